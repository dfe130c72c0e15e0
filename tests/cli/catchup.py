"""catchup.py - items that fell due while no scheduler ran stay pending (nothing
moves them by itself) and are delivered promptly, in order, by the catch-up
transfer of take's in-process scheduler."""
import os
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "lib")))
from dqtest import *  # noqa: E402,F403

N = 50
section(f"{N} items with delay 200ms, no scheduler running")
batch = "".join(f"200ms\tcu{i:02d}\tpayload {i}\n" for i in range(N)).encode()
r = dq("offer", "cu", "--batch", "-", stdin=batch)
eq((r.rc, r.out), (0, b"%d\n" % N), "offer --batch of 50 lines")
time.sleep(1.0)
p = stats("cu")
if p is not None:
    eq((p["pending"], p["ready"], p["next_due_in_ms"]), (N, 0, 0), "1 s later: all still pending, overdue, none ready")
r = dq("take", "cu", "--count", "0", "--json", "--timeout", "300ms", "--no-scheduler")
eq((r.rc, r.out), (0, b""), "take --no-scheduler gets nothing (nobody moves them)")

section("take --count 50 --timeout 5s: the in-process scheduler catches up")
t0 = time.monotonic()
r = dq("take", "cu", "--count", str(N), "--json", "--timeout", "5s")
secs = time.monotonic() - t0
eq(r.rc, 0, "take --count 50 exits 0")
msgs = r.json_lines()
eq([m["id"] for m in msgs], [f"cu{i:02d}" for i in range(N)], "all 50, in offer order")
ok(secs < 2.0 * SLOW, f"promptly: {secs * 1000:.0f} ms for all 50")
ok(all(m["ready_ms"] >= m["due_ms"] + 900 for m in msgs), "ready_ms is the catch-up time (>= due + ~1 s)",
   [(m["due_ms"], m["ready_ms"]) for m in msgs[:3]])
p = stats("cu")
if p is not None:
    eq((p["pending"], p["ready"], p["next_due_in_ms"]), (0, 0, -1), "the queue is empty afterwards")

finish()
