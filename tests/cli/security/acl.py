"""acl.py - `delayq acl`: the rule grants what delayq needs, and nothing more.

On the suite's redis-server: the rule of `delayq acl` (applied with ACL
SETUSER) lets its user run every delayq command on its queues; the same user
is refused on another queue (exit 3, one line naming the keys; schedule and
work stop at their first refusal) and on
FLUSHALL, KEYS and CONFIG; the --read-only rule runs stats and the dead-letter
listing and is refused on every write. The password appears only as its
SHA-256. The rule grants calls, not code: the user is refused FUNCTION LOAD
(the real library wrapped with a function of its own), DELETE, FLUSH and
RESTORE, EVAL (a looping script included), EVALSHA and SCRIPT LOAD, and SET or
DEL of the registry dq:queues (SADD passes); on a server without the library
its commands exit 3 naming the node and `delayq functions load`, which the
user may not run, and which, run as the admin, lets them work. Then the same
rule through a Sentinel group and a 3-master cluster of the test's own, the
library loaded there by `functions load` first (a few commands each). Users
are deleted at the end.
"""
# tier: slow (about 16 s): make test runs it, make test-fast does not
import hashlib
import os
import signal
import stat
import sys
import tempfile
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403
import topology  # noqa: E402

PASSWORD = "s3cret-pw"
tmp = tempfile.mkdtemp(prefix="delayq-acl.")
pwfile = os.path.join(tmp, "pw")
with open(pwfile, "w") as f:
    f.write(PASSWORD + "\n")
os.chmod(pwfile, 0o600)


def rule(*args):
    r = dq("acl", *args, redis=False)
    ok(r.rc == 0 and r.text.count("\n") == 1 and r.text.startswith("ACL SETUSER "), f"acl {' '.join(args)}: "
       "one ACL SETUSER line", r)
    return r.text.split()


def apply(port, words):
    reply = topology.call(port, *words)
    ok(reply in ("OK", b"OK"), f"ACL SETUSER on {port}", reply)


def as_user(url, *args, **kw):
    return dq("--redis", url, *args, redis=False, **kw)


def refused(r, what, needle):
    ok(r.rc == 3 and r.errtext.count("\n") == 1 and "NOPERM" in r.errtext and needle in r.errtext,
       f"{what}: exit 3, one line, NOPERM naming {needle}", r)


def user_cmd(port, user, *cmd):
    """One command as user (AUTH first) on a fresh connection: the reply, or
    the error text."""
    with Redis(port=port) as c:
        c.cmd("AUTH", user, PASSWORD)
        try:
            return c.cmd(*cmd)
        except RedisError as exc:
            return str(exc)


# ------------------------------------------------------------------ the rule itself
section("the printed rule")
words = rule("aq1", "aq2", "aq3", "--user", "dqapp", "--password-file", pwfile)
line = " ".join(words)
ok(PASSWORD not in line, "the password is not in it")
ok("#" + hashlib.sha256(PASSWORD.encode()).hexdigest() in words, "its SHA-256 is (#...)")
ok(words[2:5] == ["dqapp", "reset", "on"], "it starts from reset", words[:5])
ok("~dq:{aq1}:*" in words and "~dq:{aq2}:*" in words and "&dq:{aq1}:w" in words, "keys and channels per queue")
ok("-@all" in words and "+fcall" in words and "+flushall" not in words, "-@all, then commands one by one")
ok(not any(w.lstrip("+").split("|")[0] in ("eval", "eval_ro", "evalsha", "function", "script") for w in words),
   "no EVAL, EVAL_RO, EVALSHA, FUNCTION or SCRIPT", words)
ok("~dq:queues" not in words and "(~dq:queues" in words and words[-2:] == ["+sadd", "+smembers)"],
   "the registry in a selector of its own: SADD and SMEMBERS, nothing else", words[-4:])
ok("+sadd" not in words[:-2] and "+set" in words, "SET (for the scripts) only on the queues' keys", words)
# Every command a script calls (redis.call/pcall in lua/) is granted: a
# script that calls one more fails for the rule's users only.
import glob  # noqa: E402
import re  # noqa: E402
called = set()
for path in glob.glob(os.path.join(os.environ.get("DQ_TEST_ROOT", "."), "lua", "**", "*.lua"), recursive=True):
    with open(path) as f:
        called |= {m.lower() for m in re.findall(r"redis\.p?call\('([A-Za-z]+)'", f.read())}
ok(len(called) > 20 and called <= {w.lstrip("+") for w in words if w.startswith("+")},
   "every command the scripts call is granted", sorted(called - {w.lstrip("+") for w in words}))
r = dq("acl", "aq1", "--user", "dqapp", redis=False)
ok(r.rc == 0 and "#" not in r.text and "no password" in r.errtext, "without a password file: none, and a warning",
   r)
os.chmod(pwfile, 0o640)
r = dq("acl", "aq1", "--user", "dqapp", "--password-file", pwfile, redis=False)
ok(r.rc == 2 and "group or others" in r.errtext and PASSWORD not in r.errtext + r.text,
   "a group-readable password file: exit 2", r)
os.chmod(pwfile, 0o600)
for bad in (("--user", "a b"), ()):
    r = dq("acl", "aq1", *bad, redis=False)
    eq(r.rc, 2, f"acl aq1 {' '.join(bad)}: exit 2")
eq(dq("acl", "bad{q}", "--user", "u", redis=False).rc, 2, "an invalid queue name: exit 2")

# ------------------------------------------------------------------ single node, full rights
apply(PORT, words)
url = f"redis://dqapp:{PASSWORD}@127.0.0.1:{PORT}"
R = Redis(timeout=30)


def no_library(r, what, port):
    ok(r.rc == 3 and r.errtext.count("\n") == 1 and "delayq functions load" in r.errtext and
       f"127.0.0.1:{port}" in r.errtext and "NOPERM" in r.errtext,
       f"{what}: exit 3, one line naming the node and 'delayq functions load'", r)


def functions_load(url_, ports):
    r = dq("--redis", url_, "functions", "load", redis=False)
    got = sorted(ln.split("\t")[0] for ln in r.text.splitlines())
    ok(r.rc == 0 and got == sorted(f"127.0.0.1:{p}" for p in ports) and
       all(ln.split("\t")[1].startswith("delayq_") for ln in r.text.splitlines()),
       f"functions load as the admin: one line per master ({len(ports)})", r)
    return r


section("a server without the library: the user may not load it")
R.cmd("FUNCTION", "FLUSH")
no_library(as_user(url, "offer", "aq1", "0", "one", "--id", "o1"), "offer", PORT)
no_library(as_user(url, "take", "aq1", "--timeout", "1s"), "take", PORT)
eq(R.cmd("FUNCTION", "LIST"), [], "no library was loaded")
eq(R.cmd("EXISTS", "dq:{aq1}:n"), 0, "nothing was written")
r = as_user(url, "functions", "load")
ok(r.rc == 3 and "NOPERM" in r.errtext and "function|load" in r.errtext and r.out == b"",
   "functions load as the user: exit 3, NOPERM", r)
r = dq("functions", "status")
ok(r.rc == 1 and r.text == f"127.0.0.1:{PORT}\tmissing\t-\n", "functions status: missing, exit 1", r)
functions_load(URL, [PORT])
r = dq("functions", "status")
lib = r.text.split("\t")[-1].strip() if r.rc == 0 else "?"
ok(r.rc == 0 and r.text == f"127.0.0.1:{PORT}\tcurrent\t{lib}\n" and lib.startswith("delayq_"),
   "functions status: current", r)

section("the rule grants calls, not code")
code = R.cmd("FUNCTION", "LIST", "LIBRARYNAME", lib, "WITHCODE")[0][-1]
# The probe's hijack: the real library, wrapped with a function of the user's.
spy = code + f"\nredis.register_function('{lib}_spy', function(keys, args) return 1 end)\n".encode()
dump = R.cmd("FUNCTION", "DUMP")
loop = ("redis.call('SET', KEYS[1], 'x') local n = 0 for i = 1, 30000000 do n = n + 1 end return n")
for cmd in (("FUNCTION", "LOAD", "REPLACE", spy), ("FUNCTION", "DELETE", lib), ("FUNCTION", "FLUSH"),
            ("FUNCTION", "RESTORE", dump, "REPLACE"), ("EVAL", "return 1", "0"),
            ("EVAL", loop, "1", "dq:{aq1}:probe"), ("EVAL_RO", "return 1", "0"),
            ("EVALSHA", hashlib.sha1(b"return 1").hexdigest(), "0"), ("SCRIPT", "LOAD", "return 1"),
            ("SET", "dq:queues", "x"), ("DEL", "dq:queues"), ("SREM", "dq:queues", "aq1")):
    reply = user_cmd(PORT, "dqapp", *cmd)
    ok(isinstance(reply, str) and reply.startswith("NOPERM"), f"{' '.join(map(str, cmd[:2]))[:40]}: NOPERM",
       reply)
libs = [dict(zip(x[0::2], x[1::2])) for x in R.cmd("FUNCTION", "LIST", "WITHCODE")]
eq([d[b"library_name"] for d in libs], [lib.encode()], "one library, the admin's")
ok(libs and libs[0][b"library_code"] == code and len(libs[0][b"functions"]) == 20, "as loaded: its code, "
   "its 20 functions, none of the user's", libs and len(libs[0][b"functions"]))
eq(R.cmd("EXISTS", "dq:{aq1}:probe"), 0, "the looping script wrote nothing")
ok(user_cmd(PORT, "dqapp", "SADD", "dq:queues", "aq1") in (0, 1), "SADD dq:queues passes")
eq(R.cmd("TYPE", "dq:queues"), "set", "the registry is still a set")

section("every command on its queue")
eq(as_user(url, "offer", "aq1", "0", "one", "--id", "o1").rc, 0, "offer")
r = as_user(url, "offer", "aq1", "--batch", "-", stdin=b"0\tb1\tx\n0\tb2\ty\n1h\tb3\tz\n")
eq(r.rc, 0, "offer --batch")
# Due times that fall from line to line, past the timing wheel's horizon
# (WHEEL_NEAR, 40 s) and the queue's first offers, so into the slots: every
# offer lands below the slot's records, so the slot splits (its upper half
# moves with ZRANGESTORE).
lines = "".join(f"{60000 - i}ms\ts{i:03d}\tx\n" for i in range(200))
r = as_user(url, "offer", "aq3", "--batch", "-", stdin=lines.encode())
ok(r.rc == 0, "offer --batch of 200 in falling due order", r)
ok(redis("ZCARD", "dq:{aq3}:zs") > 1, "its slot split", redis("ZCARD", "dq:{aq3}:zs"))
# Past the horizon, and more than 4 s before the last item, they go to the
# timing wheel's bucket lists, which the take's scheduler cascades into the
# slots (a run inside a slot splits it); due within the horizon, to the
# near lists (one cancelled: its entry made a tombstone): all with this
# user's rights. The queue's clock mark (not real time) then brings them due.
lines = "90s\tanchor\tx\n" + "".join(f"{41990 - i}ms\tw{i:03d}\tx\n" for i in range(150))
lines += "".join(f"{5000 + i}ms\tn{i:03d}\tx\n" for i in range(10))
r = as_user(url, "offer", "aq3", "--batch", "-", stdin=lines.encode())
ok(r.rc == 0 and redis("EXISTS", "dq:{aq3}:bz") == 1 and len(redis("KEYS", "dq:{aq3}:m:*")) == 10,
   "offer --batch of 160 more (and an anchor), into the wheel and the near lists", r)
eq(as_user(url, "cancel", "aq3", "n000").rc, 0, "cancel an item of a near list")
redis("HSET", "dq:{aq3}:n", "clock", str(server_ms() + 61000))
r = as_user(url, "take", "aq3", "--count", "359", "--json", "--timeout", "8s")
ms = r.json_lines() if r.rc == 0 else []
dues = [m.get("due_ms", 0) for m in ms]
want = [f"s{i:03d}" for i in range(200)] + [f"w{i:03d}" for i in range(150)] + [f"n{i:03d}" for i in range(1, 10)]
ok(sorted(m.get("id") for m in ms) == sorted(want) and dues == sorted(dues),
   "the take's scheduler moved them (the wheel cascaded, the near lists): all 359, once each, by due time",
   [m.get("id") for m in ms][:5])
ok(b"aq3" in redis("SMEMBERS", "dq:queues"), "the offers registered aq3 (SADD through the selector)")
eq(as_user(url, "cancel", "aq1", "b3").rc, 0, "cancel")
r = as_user(url, "take", "aq1", "--count", "2", "--json", "--timeout", "5s")
ok(r.rc == 0 and len(r.json_lines()) == 2, "take (plain) gets 2", r)
r = as_user(url, "take", "aq1", "--ack", "manual", "--json", "--timeout", "5s")
m = r.json_lines()[0] if r.rc == 0 and r.json_lines() else {}
ok(bool(m.get("token")), "take --ack manual", r)
eq(as_user(url, "extend", "aq1", m.get("id", "?"), m.get("token", "?"), "1m").rc, 0, "extend")
eq(as_user(url, "ack", "aq1", m.get("id", "?"), m.get("token", "?")).rc, 0, "ack")
r = as_user(url, "config", "aq1", "--max-attempts", "1", "--json")
eq(r.rc, 0, "config (set)")
eq(as_user(url, "config", "aq1").rc, 0, "config (read)")
eq(as_user(url, "offer", "aq1", "0", "two", "--id", "d1").rc, 0, "offer d1")
r = as_user(url, "take", "aq1", "--ack", "manual", "--json", "--timeout", "5s")
m = r.json_lines()[0] if r.rc == 0 and r.json_lines() else {}
eq(as_user(url, "nack", "aq1", m.get("id", "?"), m.get("token", "?"), "--error", "boom").rc, 0,
   "nack (its last attempt: a dead letter)")
eq(as_user(url, "dead", "aq1", "count").text.strip(), "1", "dead count")
r = as_user(url, "dead", "aq1", "list")
ok(r.rc == 0 and "d1" in r.text, "dead list", r)
eq(as_user(url, "dead", "aq1", "redrive").rc, 0, "dead redrive")
eq(as_user(url, "stats", "aq1").rc, 0, "stats")
r = as_user(url, "offer", "aq1", "0", "three", "--id", "d2")
eq(as_user(url, "config", "aq1", "--reset").rc, 0, "config --reset")
p = bg_dq("--redis", url, "work", "aq1", "--exec", "cat >/dev/null")
ok(wait_for(lambda: (stats("aq1") or {}).get("ready") == 0 and (stats("aq1") or {}).get("inflight") == 0, 10),
   "work: runs the ready items", stats("aq1"))
eq(p.stop(signal.SIGTERM), 0, "work exits 0 on SIGTERM")
eq(as_user(url, "offer", "aq2", "0", "x", "--id", "p1").rc, 0, "the second queue: offer")
eq(as_user(url, "dead", "aq2", "purge").rc, 0, "dead purge")
p = bg_dq("--redis", url, "schedule", "aq1", "aq2")
time.sleep(0.5)
eq(p.stop(signal.SIGTERM), 0, "schedule runs and exits 0 on SIGTERM")
ok("NOPERM" not in p.err.decode(errors="replace"), "schedule: no refusal", p.err)

section("a sharded queue: its shards' keys are in the rule")
ok("~dq:{aq2~*}:*" in words and "&dq:{aq2~*}:w" in words, "dq:{aq2~*}:* and its wake channels")
eq(as_user(url, "take", "aq2", "--count", "0", "--timeout", "1s").rc, 0, "take what aq2 holds")
r = as_user(url, "config", "aq2", "--shards", "3")
eq(r.rc, 0, "config aq2 --shards 3 as the user")
r = as_user(url, "offer", "aq2", "--batch", "-", stdin=b"".join(b"0\ts%d\tx\n" % i for i in range(30)))
eq((r.rc, r.out), (0, b"30\n"), "offer 30 into the 3 shards")
r = as_user(url, "take", "aq2", "--count", "30", "--ack", "manual", "--json", "--timeout", "5s")
got = r.json_lines() if r.rc == 0 else []
eq(sorted(m["id"] for m in got), sorted(f"s{i}" for i in range(30)), "take all 30 with leases", )
eq([as_user(url, "ack", "aq2", m["id"], m["token"]).rc for m in got[:3]], [0, 0, 0], "ack across shards")
eq(as_user(url, "config", "aq2", "--shards", "1").rc, 3, "back to 1 refused: 27 still in flight")
eq([as_user(url, "ack", "aq2", m["id"], m["token"]).rc for m in got[3:]], [0] * 27, "ack the rest")
eq(as_user(url, "config", "aq2", "--shards", "1").rc, 0, "back to 1 shard, empty")

section("refused elsewhere")
refused(as_user(url, "offer", "other", "0", "x"), "offer to another queue", "dq:{other}:*")
refused(as_user(url, "take", "other", "--timeout", "0"), "take from another queue", "dq:{other}:*")
refused(as_user(url, "stats", "other"), "stats of another queue", "dq:{other}:*")
# The long-running commands stop at the first refusal: retrying cannot help.
r = as_user(url, "schedule", "other", timeout=10)
ok(r.rc == 3 and any("NOPERM" in ln and "dq:{other}:" in ln for ln in r.errtext.splitlines()),
   "schedule another queue: exit 3 at once, a line naming NOPERM and the queue's channel or keys", r)
r = as_user(url, "work", "other", "--exec", "true", timeout=10)
ok(r.rc == 3 and any("NOPERM" in ln and "dq:{other}:" in ln for ln in r.errtext.splitlines()),
   "work on another queue: exit 3 at once, a line naming NOPERM and the queue's keys", r)
for cmd in (("FLUSHALL",), ("KEYS", "*"), ("CONFIG", "GET", "maxmemory"), ("GET", "dq:{other}:x")):
    reply = user_cmd(PORT, "dqapp", *cmd)
    ok(isinstance(reply, str) and reply.startswith("NOPERM"), f"{cmd[0]}: NOPERM", reply)
ok(R.cmd("EXISTS", "dq:{aq1}:n") == 1, "and the queue's keys are still there")

# ------------------------------------------------------------------ read only
section("--read-only")
ro = rule("aq1", "--user", "dqro", "--password-file", pwfile, "--read-only")
ok(any(w.startswith("%R~dq:{aq1}:*") for w in ro) and not any(w.startswith("&") for w in ro),
   "read-only keys, no channel", ro)
apply(PORT, ro)
rurl = f"redis://dqro:{PASSWORD}@127.0.0.1:{PORT}"
ok(not any(w.lstrip("+").split("|")[0] in ("eval", "eval_ro", "function") for w in ro) and
   ro[-2:] == ["(%R~dq:queues", "+smembers)"], "no EVAL_RO or FUNCTION; the registry read-only, SMEMBERS", ro)
R.cmd("FUNCTION", "FLUSH")
no_library(as_user(rurl, "stats", "aq1"), "stats without the library", PORT)
functions_load(URL, [PORT])
r = as_user(rurl, "stats", "aq1", "--json")
ok(r.rc == 0 and "pending" in r.text, "stats", r)
eq(as_user(rurl, "dead", "aq1", "count").rc, 0, "dead count")
eq(as_user(rurl, "dead", "aq1", "list").rc, 0, "dead list")
# A write is a script that may write: FCALL, which the rule does not grant.
refused(as_user(rurl, "offer", "aq1", "0", "x"), "offer", "'fcall'")
refused(as_user(rurl, "take", "aq1", "--timeout", "0", "--no-scheduler"), "take", "'fcall'")
refused(as_user(rurl, "dead", "aq1", "purge"), "dead purge", "'fcall'")
eq((stats("aq1") or {}).get("pending"), 0, "nothing written")
r = as_user(rurl, "config", "aq1", "--max-attempts", "3")
ok(r.rc == 3 and "NOPERM" in r.errtext, "config (set): refused", r)
ok(b"aq1" in user_cmd(PORT, "dqro", "SMEMBERS", "dq:queues"), "SMEMBERS dq:queues (serve's list)")
for cmd in (("SADD", "dq:queues", "x"), ("SET", "dq:queues", "x"), ("EVAL_RO", "return 1", "0"),
            ("FUNCTION", "LOAD", "REPLACE", spy)):
    reply = user_cmd(PORT, "dqro", *cmd)
    ok(isinstance(reply, str) and reply.startswith("NOPERM"), f"{cmd[0]} {cmd[1]}: NOPERM", reply)

# ------------------------------------------------------------------ a provider's access string
section("--access-string: the rule alone, for a provider that takes the password apart")
r = dq("acl", "aq1", "aq2", "--access-string", redis=False)
acc = r.text.split()
ok(r.rc == 0 and r.text.count("\n") == 1 and acc[:1] == ["on"], "one line, from 'on'", r)
ok(not any(w in ("reset", "ACL", "SETUSER", "nopass") or w[:1] in ("#", ">", "<") for w in acc),
   "no ACL SETUSER, no reset, no password", acc)
full = rule("aq1", "aq2", "--user", "dqapp", "--password-file", pwfile)
ok(acc == [w for w in full[4:] if not w.startswith("#")], "the same grants as the SETUSER rule", acc)
for bad in (("--user", "x"), ("--password-file", pwfile)):
    eq(dq("acl", "aq1", "--access-string", *bad, redis=False).rc, 2, f"--access-string {bad[0]}: exit 2")
# As a provider applies it: the user and its password made apart, then the string.
eq(R.cmd("ACL", "SETUSER", "dqprov", ">" + PASSWORD), "OK", "the provider's user, its password apart")
apply(PORT, ["ACL", "SETUSER", "dqprov", *acc])
purl = f"redis://dqprov:{PASSWORD}@127.0.0.1:{PORT}"
eq(as_user(purl, "offer", "aq2", "0", "p", "--id", "p1").rc, 0, "offer as the provider's user")
r = as_user(purl, "take", "aq2", "--json", "--timeout", "5s")
ok(r.rc == 0 and r.json_lines() and r.json_lines()[0].get("id") == "p1", "take", r)
refused(as_user(purl, "offer", "other", "0", "x"), "another queue", "dq:{other}:*")

R.cmd("ACL", "DELUSER", "dqapp", "dqro", "dqprov")

# ------------------------------------------------------------------ Sentinel and Cluster
section("through a Sentinel group")
with topology.SentinelGroup(n_replicas=1, n_sentinels=1) as g:
    for p in g.data_ports:
        apply(p, words)
    surl = g.url().replace("redis-sentinel://", f"redis-sentinel://dqapp:{PASSWORD}@")
    no_library(as_user(surl, "offer", "aq1", "0", "s", "--id", "s1"), "offer before the library",
               g.master_port())
    functions_load(g.url(), [g.master_port()])
    ok(topology.wait_until(lambda: all(topology.try_call(p, "FUNCTION", "LIST") for p in g.data_ports), 10),
       "the replica has it too (replication)")
    eq(as_user(surl, "offer", "aq1", "0", "s", "--id", "s1").rc, 0, "offer")
    r = as_user(surl, "take", "aq1", "--json", "--timeout", "5s")
    ok(r.rc == 0 and [x["id"] for x in r.json_lines()] == ["s1"], "take", r)
    eq(as_user(surl, "stats", "aq1").rc, 0, "stats")
    refused(as_user(surl, "offer", "other", "0", "x"), "another queue", "dq:{other}:*")

section("through a 3-master cluster")
with topology.Cluster(masters=3, replicas_per_master=0) as cl:
    for p in cl.ports:
        apply(p, words)
    curl = cl.url().replace("redis-cluster://", f"redis-cluster://dqapp:{PASSWORD}@")
    r = as_user(curl, "offer", "aq2", "0", "c", "--id", "c1")
    ok(r.rc == 3 and "delayq functions load" in r.errtext, "offer before the library: exit 3", r)
    functions_load(cl.url(), cl.ports)
    r = dq("--redis", cl.url(), "functions", "status", redis=False)
    ok(r.rc == 0 and r.text.count("\tcurrent\t") == 3, "functions status: current on all 3", r)
    eq(as_user(curl, "offer", "aq2", "0", "c", "--id", "c1").rc, 0, "offer")
    r = as_user(curl, "take", "aq2", "--ack", "manual", "--json", "--timeout", "5s")
    m = r.json_lines()[0] if r.rc == 0 and r.json_lines() else {}
    ok(m.get("id") == "c1", "take --ack manual", r)
    eq(as_user(curl, "ack", "aq2", m.get("id", "?"), m.get("token", "?")).rc, 0, "ack")
    eq(as_user(curl, "stats", "aq2").rc, 0, "stats")
    refused(as_user(curl, "offer", "other", "0", "x"), "another queue", "dq:{other}:*")
    r = as_user(curl, "schedule", "other", timeout=10)
    ok(r.rc == 3 and any("NOPERM" in ln and "dq:{other}:" in ln for ln in r.errtext.splitlines()),
       "schedule another queue: exit 3 at its first refusal", r)

os.remove(pwfile)
os.rmdir(tmp)
finish()
