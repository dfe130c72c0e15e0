"""catchup.py - items that fell due while no scheduler ran stay pending (nothing
moves them by itself) and are delivered promptly, in order, by the catch-up
transfer of take's in-process scheduler, which files each item's lateness in
its bucket of the metrics' histogram."""
import hashlib
import os
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
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

section("one catch-up transfer files each item's lateness in its bucket")
# Items planted due 20 s, 6 s and 3 s ago (absolute due times through the
# offer function: the CLI takes delays), behind one already due so they go
# into slots, not straight to the ready list. One transfer moves them in due
# order; runs of one lateness share a bucket look-up, so a stale one would
# file the next run in the wrong bucket. Buckets (lua/lib/20_counters.lua LAT_MS): 14 is
# above 10 s, 13 is (5 s, 10 s], 12 is (2.5 s, 5 s]; the margins allow a
# slow start of the take.
Q = "cl"
eq(dq("offer", Q, "1ms", "first", "--id", "cl-first").rc, 0, "offer one item due at once, no scheduler")
time.sleep(0.05)
lib = [x for x in redis("FUNCTION", "LIST") if b"delayq_" in x[1]][0][1].decode()
sec, usec = redis("TIME")
now = int(sec) * 1000 + int(usec) // 1000
late = {"cl-a0": 20000, "cl-a1": 20000, "cl-a2": 20000, "cl-b0": 6000, "cl-b1": 6000, "cl-c0": 3000,
        "cl-c1": 2990}
args = []
for id_, ms in late.items():
    bucket = int(hashlib.sha1(id_.encode()).hexdigest()[:4], 16) % 32768
    args += [id_, "p", str(now - ms), "1", str(bucket)]
redis("FCALL", f"{lib}_offer", "4", f"dq:{{{Q}}}:zs", f"dq:{{{Q}}}:r", f"dq:{{{Q}}}:n", f"dq:{{{Q}}}:s",
      f"dq:{{{Q}}}:", f"dq:{{{Q}}}:w", "1", *args)
fields = [f"lat:{b}" for b in range(1, 15)]
before = [int(v or 0) for v in redis("HMGET", f"dq:{{{Q}}}:n", *fields)]
r = dq("take", Q, "--count", "8", "--json", "--timeout", "5s")
eq(sorted(m["id"] for m in r.json_lines()), sorted(["cl-first", *late]), "all 8 delivered")
after = [int(v or 0) for v in redis("HMGET", f"dq:{{{Q}}}:n", *fields)]
moved = [a - b for a, b in zip(after, before)]
ok((moved[13], moved[12], moved[11]) == (3, 2, 2),
   "3 in bucket 14 (> 10 s), 2 in 13 (5-10 s), 2 in 12 (2.5-5 s)", moved)
ok(sum(moved) == 8, "8 moves filed in all (the first item's too)", moved)

finish()
