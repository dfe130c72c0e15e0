"""roundtrip.py - offer then take: ids, payloads, due/ready times, and that a
delayed item is not delivered before its due time."""
import os
import re
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

ID_RE = re.compile(rb"^[A-Za-z0-9_-]{22}\n$")

section("offer with delay 0, take --json")
s0 = server_ms()
r = dq("offer", "rt", "0", "hello")
ok(r.rc == 0, "offer rt 0 hello exits 0", r)
ok(ID_RE.match(r.out) is not None, "offer prints a generated id (22 base64url chars) and a newline", r.out)
eq(r.err, b"", "offer prints nothing on stderr")
id0 = r.out.strip().decode()
s1 = server_ms()
r = dq("take", "rt", "--json", "--timeout", "5s")
ok(r.rc == 0, "take --json exits 0", r)
msgs = r.json_lines()
if eq(len(msgs), 1, "take prints one JSON line"):
    m = msgs[0]
    eq(sorted(m.keys()), ["due_ms", "id", "payload", "queue", "ready_ms"], "JSON keys")
    eq(m["queue"], "rt", "queue")
    eq(m["id"], id0, "id is the offered id")
    eq(m["payload"], "hello", "payload")
    ok(isinstance(m["due_ms"], int) and isinstance(m["ready_ms"], int), "due_ms and ready_ms are integers", m)
    ok(s0 <= m["due_ms"] <= s1, "due_ms is the server time of the offer", f"{s0} <= {m['due_ms']} <= {s1}")
    ok(m["ready_ms"] >= m["due_ms"], "ready_ms >= due_ms", m)
    ok(m["ready_ms"] <= s1 + 1000 * SLOW, "ready promptly (delay 0)", f"ready {m['ready_ms']}, offer done {s1}")

section("text mode, explicit id")
r = dq("offer", "rt", "0", "plain text", "--id", "my-id.1")
eq((r.rc, r.out), (0, b"my-id.1\n"), "offer --id prints that id")
r = dq("take", "rt", "--timeout", "5s")
eq((r.rc, r.out), (0, b"plain text\n"), "text take prints the raw payload and a newline")
r = dq("offer", "rt", "0", "")
ok(r.rc == 0, "an empty payload is accepted", r)
r = dq("take", "rt", "--timeout", "5s")
eq((r.rc, r.out), (0, b"\n"), "an empty payload comes out as an empty line")

section("a 300ms item: not before its due time")
s0 = server_ms()
t0 = time.time()
r = dq("offer", "rt", "300ms", "later", "--id", "late1")
eq((r.rc, r.out), (0, b"late1\n"), "offer rt 300ms later --id late1")
s1 = server_ms()
due = zscore_due("rt", "late1")
ok(due is not None and s0 + 300 <= due <= s1 + 300, "stored due time is server time + 300 ms",
   f"{s0 + 300} <= {due} <= {s1 + 300}")
r = dq("take", "rt", "--timeout", "100ms")
elapsed = time.time() - t0
note(f"the early take ended {elapsed * 1000:.0f} ms after the offer started")
if elapsed < 0.29:
    ok(r.rc == 1, "take --timeout 100ms right after the offer exits 1", r)
    eq(r.out, b"", "... and prints nothing")
else:
    # Too slow a machine to tell: the item may have been due already.
    ok(r.rc in (0, 1), "take --timeout 100ms right after the offer (inconclusive: started late)", r)
    ok(r.rc == 1 or server_ms() >= due, "... if it got the item, it was due", r)
ok(r.secs >= 0.09, "... after waiting about 100 ms", f"{r.secs * 1000:.0f} ms")
r = dq("take", "rt", "--json", "--timeout", "5s")
t1 = time.time()
ok(r.rc == 0, "take --json --timeout 5s gets it", r)
msgs = r.json_lines()
if eq(len(msgs), 1, "one message"):
    m = msgs[0]
    eq((m["id"], m["payload"]), ("late1", "later"), "id and payload")
    eq(m["due_ms"], due, "due_ms is the stored due time")
    ok(m["ready_ms"] >= m["due_ms"], "ready_ms >= due_ms", m)
    ok(t1 * 1000 >= m["due_ms"], "received after its due time (local clock)", f"recv {t1 * 1000:.0f} due {m['due_ms']}")
    note(f"ready - due = {m['ready_ms'] - m['due_ms']} ms; received {t1 * 1000 - m['due_ms']:.0f} ms after due")

section("take --count")
for i in range(3):
    dq("offer", "rtc", "0", f"p{i}", "--id", f"c{i}")
r = dq("take", "rtc", "--count", "2", "--timeout", "5s")
eq((r.rc, r.out), (0, b"p0\np1\n"), "take --count 2 prints two payloads in offer order")
r = dq("take", "rtc", "--count", "2", "--timeout", "500ms")
eq((r.rc, r.out), (1, b"p2\n"), "take --count 2 with one item left prints it and exits 1 at the timeout")
r = dq("stats", "rtc", "--json")
ok(r.rc == 0 and b'"pending":0' in r.out and b'"ready":0' in r.out, "queue is empty afterwards", r)

finish()
