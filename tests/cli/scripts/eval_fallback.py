"""eval_fallback.py - every script through the EVAL fallback, as a user who
may run EVAL but not FUNCTION LOAD.

Such a user's calls never find the library (it may not load it), so each
one goes as FCALL, then as EVAL of the script's own text (src/ops/script.c).
An EVAL text carries only the definitions of the shared code (lua/lib) its
script uses (tools/embed-lua.sh, tools/lua-trim.awk): a definition left out
would show here as a Lua error ("nonexistent global variable"). Checked
through the CLI (and serve's /metrics), each script at least once, and
each result checked; then that each of the 18 EVAL texts ran (Redis's script
cache has them) and that none is the whole shared code followed by its
script (the texts are the trimmed ones). dqtest's eval_script gives the same
texts (checked here), so the tests that call the scripts directly
(mutation.py, take_batches.py, ...) run them too.
"""
import hashlib
import os
import re
import sys
import urllib.request

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

PASSWORD = "eval-fallback-pw"
R = Redis(timeout=30)
Q, Q2 = "evq", "evq2"

eq(R.cmd("ACL", "SETUSER", "dqeval", "reset", "on", ">" + PASSWORD, "~*", "&*", "+@all", "-function"), "OK",
   "a user who may EVAL but not FUNCTION LOAD")
url = f"redis://dqeval:{PASSWORD}@127.0.0.1:{PORT}"
R.cmd("FUNCTION", "FLUSH")
R.cmd("SCRIPT", "FLUSH")
R.cmd("CONFIG", "RESETSTAT")


def ev(*args, **kw):
    return dq("--redis", url, *args, redis=False, **kw)


def one(r):
    lines = r.json_lines() if r.rc == 0 else []
    return lines[0] if len(lines) == 1 else {}


section("offer, cancel, lookup, stats, config, list")
eq(ev("offer", Q, "0", "pa", "--id", "a").rc, 0, "offer a (due now)")
eq(ev("offer", Q, "0", "pc", "--id", "c").rc, 0, "offer c (due now)")
eq(ev("offer", Q, "1h", "pb", "--id", "b").rc, 0, "offer b (in 1 h)")
eq(ev("offer", Q, "1h", "pd", "--id", "d").rc, 0, "offer d (in 1 h)")
eq(ev("cancel", Q, "d").rc, 0, "cancel d")
r = ev("lookup", Q, "b", "--json")
eq((r.rc, one(r).get("state")), (0, "pending"), "lookup b: pending")
r = ev("stats", Q, "--json")
eq((r.rc, one(r).get("pending"), one(r).get("ready")), (0, 1, 2), "stats: 1 pending, 2 ready")
r = ev("config", Q, "--max-attempts", "1", "--json")
eq((r.rc, one(r).get("max_attempts")), (0, 1), "config: max attempts 1")
r = ev("list", Q, "--state", "pending", "--json")
ok(r.rc == 0 and [m.get("id") for m in r.json_lines()] == ["b"], "list pending: b", r)

section("take with a lease, extend, ack, nack to a dead letter; a consumer's beat")
r = ev("take", Q, "--ack", "manual", "--count", "2", "--json", "--timeout", "5s")
got = {m.get("id"): m.get("token") for m in (r.json_lines() if r.rc == 0 else [])}
eq(sorted(got), ["a", "c"], "take --ack manual: a and c")
eq(ev("extend", Q, "c", got.get("c", "?"), "30s").rc, 0, "extend c")
eq(ev("ack", Q, "a", got.get("a", "?")).rc, 0, "ack a")
eq(ev("nack", Q, "c", got.get("c", "?"), "--error", "boom").rc, 0, "nack c: its last attempt")
t1 = bg_dq("--redis", url, "take", Q2, "--count", "0", "--name", "T1")


def consumers():
    r = ev("consumers", Q2, "--json")
    return [m.get("name") for m in r.json_lines()] if r.rc == 0 else None


ok(wait_for(lambda: consumers() == ["T1"], 10 * SLOW), "a waiting take's beat: consumers lists T1", consumers())
eq(t1.stop(), 0, "the take exits 0 on SIGTERM")

section("dead letters")
r = ev("dead", Q, "list", "--json")
ok(r.rc == 0 and [m.get("id") for m in r.json_lines()] == ["c"], "dead list: c", r)
r = ev("dead", Q, "count")
eq((r.rc, r.text.strip()), (0, "1"), "dead count: 1")
eq(ev("dead", Q, "redrive", "c").rc, 0, "dead redrive c")
r = ev("take", Q, "--json", "--timeout", "5s")
ok(r.rc == 0 and [m.get("id") for m in r.json_lines()] == ["c"], "c taken again after its redrive", r)
eq(ev("dead", Q, "purge").rc, 0, "dead purge")

section("recurring schedules, shards")
eq(ev("every", Q, "tick", "1h", "t").rc, 0, "every: a schedule")
r = ev("schedules", Q, "--json")
ok(r.rc == 0 and [m.get("name") for m in r.json_lines()] == ["tick"], "schedules: tick", r)
r = ev("config", Q2, "--shards", "2", "--json")
eq((r.rc, one(r).get("shards")), (0, 2), "config --shards 2 on an empty queue")
eq(ev("offer", Q2, "0", "s", "--id", "s1").rc, 0, "offer s1 to the sharded queue")
r = ev("take", Q2, "--json", "--timeout", "5s")
ok(r.rc == 0 and [m.get("id") for m in r.json_lines()] == ["s1"], "take s1", r)

section("serve's /metrics")
port = closed_port()
p = bg_dq("--redis", url, "serve", "--listen", f"127.0.0.1:{port}", Q)


def metrics():
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2 * SLOW) as resp:
            return resp.read().decode()
    except OSError:
        return ""


ok(wait_for(lambda: f'delayq_items{{queue="{Q}",state="pending"}} 1' in metrics(), 10 * SLOW),
   "/metrics shows the pending item", metrics()[:600])
eq(p.stop(), 0, "serve exits 0 on SIGTERM")

section("every EVAL text ran, and none was the whole shared code")
eq(R.cmd("FUNCTION", "LIST"), [], "no library was loaded")
fn = [ln for ln in R.cmd("INFO", "commandstats").decode().splitlines() if ln.startswith("cmdstat_fcall")]
ok(fn and all("failed_calls=0" not in ln for ln in fn), "the FCALLs failed (no library)", fn)
# Each EVAL text's SHA-1, as the build's generated header has it: dead and
# dead_ro run one text; protocol has no fallback (other clients call it).
with open(os.path.join(os.environ.get("DQ_BUILD_DIR", "build"), "gen", "scripts.h")) as f:
    shas = dict(re.findall(r'^#define DQ_LUA_(\w+)_SHA "([0-9a-f]{40})"', f.read(), re.M))
shas.pop("protocol", None)
ran = dict(zip(shas, R.cmd("SCRIPT", "EXISTS", *shas.values()) if shas else []))
eq(sorted(n for n, e in ran.items() if not e), [], "every script's EVAL text ran (in Redis's script cache)")
eq(len(ran), 18, "18 texts")
root = os.environ.get("DQ_TEST_ROOT", ".")
libdir = os.path.join(root, "lua", "lib")
common = b"".join(open(os.path.join(libdir, n), "rb").read() for n in sorted(os.listdir(libdir)) if n.endswith(".lua"))
for name in sorted(shas):
    ok(hashlib.sha1(eval_script(name)).hexdigest() == shas[name],
       f"{name}: dqtest's eval_script gives the library's EVAL text (the scripts' tests run it)")
whole = [hashlib.sha1(common + open(os.path.join(root, "lua", n + ".lua"), "rb").read()).hexdigest() for n in shas]
eq(R.cmd("SCRIPT", "EXISTS", *whole), [0] * len(whole), "none of them was the whole shared code and its script")
R.cmd("ACL", "DELUSER", "dqeval")

finish()
