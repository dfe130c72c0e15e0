"""acl.py - `delayq acl`: the rule grants what delayq needs, and nothing more.

On the suite's redis-server: the rule of `delayq acl` (applied with ACL
SETUSER) lets its user run every delayq command on its queues; the same user
is refused on another queue (exit 3, one line naming the keys; schedule and
work stop at their first refusal) and on
FLUSHALL, KEYS and CONFIG; the --read-only rule runs stats and the dead-letter
listing and is refused on every write. The password appears only as its
SHA-256. Then the same rule through a Sentinel group and a 3-master cluster
of the test's own (a few commands each). Users are deleted at the end.
"""
import hashlib
import os
import signal
import stat
import sys
import tempfile
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "lib")))
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
R.cmd("FUNCTION", "FLUSH")  # the first call loads the library as dqapp

section("every command on its queue")
eq(as_user(url, "offer", "aq1", "0", "one", "--id", "o1").rc, 0, "offer")
r = as_user(url, "offer", "aq1", "--batch", "-", stdin=b"0\tb1\tx\n0\tb2\ty\n1h\tb3\tz\n")
eq(r.rc, 0, "offer --batch")
# Due times that fall from line to line: every offer lands below the slot's
# records, so the slot splits (its upper half moves with ZRANGESTORE).
lines = "".join(f"{60000 - i}ms\ts{i:03d}\tx\n" for i in range(200))
r = as_user(url, "offer", "aq3", "--batch", "-", stdin=lines.encode())
ok(r.rc == 0, "offer --batch of 200 in falling due order", r)
ok(redis("ZCARD", "dq:{aq3}:zs") > 1, "its slot split", redis("ZCARD", "dq:{aq3}:zs"))
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
R.cmd("FUNCTION", "FLUSH")  # and a reader cannot load it: EVAL_RO does
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

R.cmd("ACL", "DELUSER", "dqapp", "dqro")

# ------------------------------------------------------------------ Sentinel and Cluster
section("through a Sentinel group")
with topology.SentinelGroup(n_replicas=1, n_sentinels=1) as g:
    for p in g.data_ports:
        apply(p, words)
    surl = g.url().replace("redis-sentinel://", f"redis-sentinel://dqapp:{PASSWORD}@")
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
