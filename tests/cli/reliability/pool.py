"""pool.py - a queue used as a pool of resources (issue 39): `release` gives
a leased item back without counting a failure. 50 take/release cycles of one
resource with default settings: each take is attempt 1, it never becomes a
dead letter; a release after a failed attempt keeps that attempt number for
the next take; a stale token exits
1, an invalid one 2; `release --delay` makes the item pending for that
long.
Holders: `take --ack manual --holder NAME` shows in `lookup` (text and
--json) and `list --state inflight --json` while the lease lasts, also after an `extend` past the first lease's
end; not after the lease ends, nor for the next take (no holder) or after a
release; a take without a holder shows none; a holder that is too long, holds
a control character or comes without --ack manual is a usage error (2) and
takes nothing.
Streamed leased takes: `take --ack manual --lease 2s --count 10 --json` read
through a pipe by a reader that spends 0.5 s on each line and then acks it:
every ack is accepted (the take hands out one item at a time, once the
reader has read the line before); --batch out of range or without --ack
manual is a usage error."""
import json
import subprocess
import time
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403
from workers import *  # noqa: E402,F403


def take_one(queue, what, *args):
    """One leased take of queue (a message dict, {} if none)."""
    r, msgs = take_manual(queue, "--timeout", "5s", *args)
    ok(r.rc == 0 and len(msgs) == 1, f"{what}: one delivery", r)
    return msgs[0] if msgs else {}


def lop(cmd, queue, id_, token, *rest):
    return dq(cmd, "--", queue, id_, token, *rest)


def release(queue, m, *rest):
    return dq("release", *rest, "--", queue, m.get("id", "x"), m.get("token", "x"))


section("50 take/release cycles of one resource: always attempt 1, never a dead letter")
Q = "pool-res"
eq(dq("offer", Q, "0", "gpu-0", "--id", "gpu0").rc, 0, "offer gpu0")
attempts, rcs = [], []
for i in range(50):
    m = take_one(Q, f"take {i + 1}")
    attempts.append(m.get("attempt"))
    rcs.append(release(Q, m).rc)
eq(sorted(set(attempts)), [1], "every take is attempt 1")
eq(sorted(set(rcs)), [0], "every release exits 0")
s = stats(Q) or {}
# Due at once: pending (due now) or ready, as a scheduler has moved it.
eq({"waiting": s.get("pending", 0) + s.get("ready", 0), "inflight": s.get("inflight"), "dead": s.get("dead")},
   {"waiting": 1, "inflight": 0, "dead": 0}, "stats after 50 releases: 1 waiting, none in flight, dead 0")
m = take_one(Q, "take 51")
eq(m.get("attempt"), 1, "take 51: still attempt 1")
r = release(Q, m)
eq((r.rc, r.out, r.err), (0, b"", b""), "release: exit 0, nothing printed")
r = release(Q, m)
eq(r.rc, 1, "release with the same (now stale) token again: exit 1")
ok(r.errtext.startswith("delayq: ") and "not in flight" in r.errtext, "... saying why", r)
eq(dq("release", Q, "gpu0", "not-the-token").rc, 1, "release with another token: exit 1")
eq(dq("release", Q, "gpu0", "bad token").rc, 2, "release with a token holding a space: exit 2")
eq(dq("release", Q, "gpu0").rc, 2, "release without a token: exit 2")
eq(dq("release", Q, "gpu0", "t", "--delay", "soon").rc, 2, "release --delay soon: exit 2")
r = dq("dead", Q, "count")
eq(r.out.strip(), b"0", "dead count 0")

section("a release after a failed attempt: the next take carries the same attempt and error")
Q = "pool-fail"
eq(dq("offer", Q, "0", "x", "--id", "f1").rc, 0, "offer f1")
m = take_one(Q, "first take")
eq(dq("nack", "--delay", "0", "--error", "disk full", "--", Q, "f1", m.get("token", "x")).rc, 0, "nack")
m = take_one(Q, "second take")
eq(m.get("attempt"), 2, "second take: attempt 2")
eq(release(Q, m).rc, 0, "release")
m = take_one(Q, "third take")
eq(m.get("attempt"), 2, "third take (after the release): attempt 2 again")
eq(release(Q, m).rc, 0, "release")

section("release --delay: pending for that long, then ready")
m = take_one(Q, "take")
eq(release(Q, m, "--delay", "1s").rc, 0, "release --delay 1s")
r = dq("lookup", Q, "f1", "--json")
ok(r.rc == 0 and b'"pending"' in r.out, "lookup: pending", r)
m = take_one(Q, "take after the delay")
eq(m.get("attempt"), 2, "attempt 2 still")

section("holders: take --holder NAME shows in lookup while the lease lasts")
Q = "pool-holder"
eq(dq("offer", Q, "0", "gpu-1", "--id", "h1").rc, 0, "offer h1")
m = take_one(Q, "take --holder alice@host-1", "--holder", "alice@host-1", "--lease", "1s")
r = dq("lookup", Q, "h1", "--json")
j = (r.json_lines() or [{}])[0]
eq((j.get("state"), j.get("holder")), ("inflight", "alice@host-1"), "lookup --json: inflight, holder alice@host-1")
r = dq("lookup", Q, "h1")
ok(r.rc == 0 and b"holder alice@host-1\n" in r.out, "lookup (text): 'holder alice@host-1'", r)
eq(dq("extend", "--", Q, "h1", m.get("token", "x"), "3s").rc, 0, "extend by 3s")
time.sleep(1.3)
j = (dq("lookup", Q, "h1", "--json").json_lines() or [{}])[0]
eq((j.get("state"), j.get("holder")), ("inflight", "alice@host-1"), "past the first lease's end: still held")
r = dq("list", Q, "--state", "inflight", "--json")
eq([(i.get("id"), i.get("holder")) for i in r.json_lines()], [("h1", "alice@host-1")],
   "list --state inflight --json: h1 held by alice@host-1")
eq(release(Q, m).rc, 0, "release")
j = (dq("lookup", Q, "h1", "--json").json_lines() or [{}])[0]
eq(j.get("holder", "absent"), None, "after the release: holder null")
m = take_one(Q, "take without a holder")
j = (dq("lookup", Q, "h1", "--json").json_lines() or [{}])[0]
eq((j.get("state"), j.get("holder", "absent")), ("inflight", None), "a take without a holder: holder null")
r = dq("list", Q, "--state", "inflight", "--json")
eq([(i.get("id"), i.get("holder", "absent")) for i in r.json_lines()], [("h1", None)], "list: holder null")
eq(release(Q, m).rc, 0, "release")
m = take_one(Q, "take --holder bob --lease 500ms", "--holder", "bob", "--lease", "500ms")
time.sleep(0.8)
r = dq("lookup", Q, "h1")
ok(r.rc == 0 and b"holder" not in r.out, "once the lease has ended: no holder", r)
eq(release(Q, m).rc, 1, "release after the lease: stale (exit 1)")
for bad, what in (("x" * 65, "65 bytes"), ("a\tb", "a tab")):
    r = dq("take", Q, "--ack", "manual", "--holder", bad, "--timeout", "1s")
    eq(r.rc, 2, f"--holder of {what}: usage error (2)")
r = dq("take", Q, "--holder", "carol", "--timeout", "1s")
eq(r.rc, 2, "--holder without --ack manual: usage error (2)")
m = take_one(Q, "take --holder of 64 bytes", "--holder", "é" * 32)
j = (dq("lookup", Q, "h1", "--json").json_lines() or [{}])[0]
eq(j.get("holder"), "é" * 32, "a holder of 64 bytes (UTF-8) round-trips")

section("a streamed leased take handled at 0.5 s a line with a 2 s lease: every ack accepted")
Q = "pool-stream"
batch = "".join(f"0\ts{i:02d}\tpayload {i}\n" for i in range(10)).encode()
eq(dq("offer", Q, "--batch", "-", stdin=batch).rc, 0, "offer 10 items")
argv = [BIN, "--redis", URL, "take", Q, "--ack", "manual", "--lease", "2s", "--count", "10", "--json",
        "--timeout", "30s"]
taker = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
acks, t0 = [], time.monotonic()
for _ in range(10):
    if time.monotonic() - t0 > 40:
        break
    line = taker.stdout.readline()
    if not line:
        break
    m = json.loads(line)
    time.sleep(0.5)
    acks.append(lop("ack", Q, m.get("id", "x"), m.get("token", "x")).rc)
try:
    rc = taker.wait(timeout=10)
except subprocess.TimeoutExpired:
    taker.kill()
    rc = None
taker.stdout.close()
taker.stderr.close()
eq(rc, 0, "the take exits 0")
eq(acks, [0] * 10, "10 lines, every ack accepted (exit 0)")
s_ = stats(Q) or {}
eq((s_.get("inflight"), s_.get("dead")), (0, 0), "nothing left in flight")
eq(dq("take", Q, "--ack", "manual", "--batch", "65", "--timeout", "0").rc, 2, "--batch 65: usage error")
eq(dq("take", Q, "--ack", "manual", "--batch", "0", "--timeout", "0").rc, 2, "--batch 0: usage error")
eq(dq("take", Q, "--batch", "2", "--timeout", "0").rc, 2, "--batch without --ack manual: usage error")

finish()
