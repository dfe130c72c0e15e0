"""functions.py - the scripts as a Redis function library.

The library runs its scripts with FCALL; a server without the library (a new
one, FUNCTION FLUSH, FUNCTION DELETE) gets the call as EVAL of the script's
text with FUNCTION LOAD of the library before it, so the call still works
and the next one finds the library. Checked through the CLI against the
test's redis-server, with commandstats counting which command ran.
"""
import os
import sys

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

R = Redis(timeout=30)


def libraries():
    out = {}
    for lib in R.cmd("FUNCTION", "LIST") or []:
        d = dict(zip(lib[0::2], lib[1::2]))
        fns = [dict(zip(f[0::2], f[1::2])) for f in d[b"functions"]]
        out[d[b"library_name"].decode()] = {f[b"name"].decode(): f[b"flags"] for f in fns}
    return out


section("the first call on a server without the library loads it")
R.cmd("FUNCTION", "FLUSH")
R.cmd("CONFIG", "RESETSTAT")
r = dq("offer", "fn1", "0", "a", "--id", "a")
eq(r.rc, 0, "offer exits 0")
libs = libraries()
names = [n for n in libs if n.startswith("delayq_")]
eq(len(names), 1, "one delayq library on the server")
lib = names[0] if names else "?"
fns = libs.get(lib, {})
eq(sorted(n[len(lib) + 1:] for n in fns),
   sorted(["ack", "beat", "cancel", "config", "consumers", "dead", "dead_ro", "extend", "list", "lookup", "metrics",
           "nack", "offer", "protocol", "recurring", "schedules", "shards", "stats", "take", "transfer"]),
   "its functions: one per script, and dead.lua's reading half again")
for name in ("stats", "lookup", "dead_ro", "metrics", "list", "protocol", "consumers", "schedules"):
    eq(fns.get(lib + "_" + name), ["no-writes"], f"{name} is no-writes (FCALL_RO; runs while out of memory)")
eq(fns.get(lib + "_offer"), [], "offer is not (it writes, and may not start while out of memory)")
eq((command_calls("function|load"), command_calls("eval")), (1, 1), "one FUNCTION LOAD, and the call itself as EVAL")

section("every script compiles as EVAL runs it (the fallback)")
# The shared code and a script make one chunk there: Lua 5.1 allows 200
# locals a function, so shared code that grows can break the fallback alone.
for path in sorted(os.listdir(os.path.join(os.environ.get("DQ_TEST_ROOT", "."), "lua"))):
    if path.endswith(".lua"):
        try:
            sha = R.cmd("SCRIPT", "LOAD", eval_script(path[:-4]))
        except RedisError as exc:
            sha = str(exc)
        ok(isinstance(sha, bytes) and len(sha) == 40, f"{path} compiles with the shared code", sha)

section("later calls are FCALLs")
R.cmd("CONFIG", "RESETSTAT")
r = dq("take", "fn1", "--json", "--timeout", "5s")
ok(r.rc == 0 and [m["id"] for m in r.json_lines()] == ["a"], "take gets the item", r)
eq(dq("stats", "fn1").rc, 0, "stats exits 0")
eq(command_calls("eval") + command_calls("evalsha") + command_calls("function|load"), 0,
   "no EVAL, no EVALSHA, no FUNCTION LOAD")
ok(command_calls("fcall") >= 1 and command_calls("fcall_ro") == 1, "FCALLs ran, stats as FCALL_RO",
   (command_calls("fcall"), command_calls("fcall_ro")))

section("a pipeline of calls meeting a server without the library: one load")
# 2,000 lines are 8 offer calls sent at once; all fail ("Function not
# found"). The first goes again as EVAL with FUNCTION LOAD before it, the
# others as the same FCALL after the load: not a load and an EVAL each.
R.cmd("FUNCTION", "FLUSH")
R.cmd("CONFIG", "RESETSTAT")
r = dq("offer", "fn3", "--batch", "-", stdin=b"".join(b"1h\t\tp%d\n" % i for i in range(2000)))
eq((r.rc, r.out), (0, b"2000\n"), "offer --batch of 2,000 exits 0, all offered")
eq(stats("fn3")["pending"], 2000, "2,000 pending")
eq((command_calls("function|load"), command_calls("eval")), (1, 1),
   "one FUNCTION LOAD and one EVAL for the whole pipeline")
ok(command_calls("fcall") >= 8, "the other calls ran as FCALLs", command_calls("fcall"))

section("a read-only function missing: EVAL_RO, and the library loaded")
R.cmd("FUNCTION", "FLUSH")
R.cmd("CONFIG", "RESETSTAT")
eq(dq("dead", "fn1", "count").rc, 0, "dead count exits 0")
eq((command_calls("eval_ro"), command_calls("function|load")), (1, 1), "one EVAL_RO, one FUNCTION LOAD")

section("FUNCTION DELETE while a consumer waits: nothing is lost")
p = bg_dq("take", "fn2", "--count", "3", "--json", "--timeout", "20s")
ok(wait_for(lambda: command_calls("blpop") > 0 or p.count() > 0, 5), "the consumer waits")
R.cmd("FUNCTION", "DELETE", lib)
eq(libraries(), {}, "no library on the server")
for i in range(3):
    eq(dq("offer", "fn2", "0", f"p{i}", "--id", f"b{i}").rc, 0, f"offer b{i} exits 0")
eq(p.wait(15), 0, "the consumer exits 0")
got = sorted(parse_json_lines(b"\n".join(line for _, line in p.snapshot())), key=lambda m: m["id"])
eq([m["id"] for m in got], ["b0", "b1", "b2"], "it got all three")
eq(list(libraries()), [lib], "the library is back")

finish()
