"""signals.py - take and schedule in the background: output flushed per
message, --count/--timeout exit codes, SIGINT/SIGTERM end them with exit 0,
one schedule process serving several queues."""
import os
import signal
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

section("take --count 0: each message flushed as it arrives; SIGINT exits 0")
take = bg_dq("take", "sg", "--count", "0")
time.sleep(0.3)
eq(dq("offer", "sg", "0", "first").rc, 0, "offer first")
ok(wait_for(lambda: take.count() >= 1, 3), "the first line arrives while take still runs (flushed)")
eq(dq("offer", "sg", "200ms", "second").rc, 0, "offer second (200ms)")
ok(wait_for(lambda: take.count() >= 2, 3), "the second line arrives")
ok(take.running(), "take --count 0 keeps running")
rc = take.stop(signal.SIGINT)
eq(rc, 0, "SIGINT: exit 0")
eq([line for _, line in take.snapshot()], [b"first", b"second"], "printed both payloads")

section("SIGTERM exits 0 too")
take = bg_dq("take", "sg2", "--count", "0", "--json")
time.sleep(0.3)
rc = take.stop(signal.SIGTERM)
eq(rc, 0, "SIGTERM: exit 0")
eq(take.count(), 0, "nothing printed")

section("--count and --timeout")
r = dq("take", "sg3", "--count", "0", "--timeout", "500ms")
eq((r.rc, r.out), (0, b""), "take --count 0 --timeout 500ms on an empty queue exits 0")
ok(0.45 <= r.secs <= 3 * SLOW, f"... after about 500 ms ({r.secs:.2f} s)")
eq(dq("offer", "sg3", "0", "only").rc, 0, "offer one item")
r = dq("take", "sg3", "--count", "3", "--timeout", "500ms")
eq((r.rc, r.out), (1, b"only\n"), "take --count 3 with one item: prints it, exits 1 at the timeout")
r = dq("take", "sg3", "--timeout", "300ms")
eq((r.rc, r.out), (1, b""), "take on an empty queue: exit 1 at the timeout")
ok(0.25 <= r.secs <= 3 * SLOW, f"... after about 300 ms ({r.secs:.2f} s)")

section("one schedule process for several queues")
sched = bg_dq("schedule", "sa", "sb")
ok(wait_for(lambda: int(redis("PUBSUB", "SHARDNUMSUB", "dq:{sa}:w")[1]) >= 1 and
            int(redis("PUBSUB", "SHARDNUMSUB", "dq:{sb}:w")[1]) >= 1, 5), "subscribed to both queues")
eq(dq("offer", "sa", "200ms", "a", "--id", "a1").rc, 0, "offer sa 200ms")
eq(dq("offer", "sb", "300ms", "b", "--id", "b1").rc, 0, "offer sb 300ms")
ok(wait_for(lambda: redis("LLEN", "dq:{sa}:r") == 1 and redis("LLEN", "dq:{sb}:r") == 1, 3),
   "both items moved to their ready lists by the scheduler")
eq(dq("take", "sa", "--no-scheduler", "--timeout", "1s").out, b"a\n", "take sa --no-scheduler")
eq(dq("take", "sb", "--no-scheduler", "--timeout", "1s").out, b"b\n", "take sb --no-scheduler")
eq(sched.stop(signal.SIGINT), 0, "schedule: SIGINT exits 0")
sched = bg_dq("schedule", "sa")
ok(wait_for(lambda: int(redis("PUBSUB", "SHARDNUMSUB", "dq:{sa}:w")[1]) >= 1, 5), "schedule sa subscribed")
eq(sched.stop(signal.SIGTERM), 0, "schedule: SIGTERM exits 0")

finish()
