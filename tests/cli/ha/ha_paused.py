"""ha_paused.py - a Sentinel master paused (SIGSTOP) until the sentinels
pick the replica to promote, then resumed (SIGCONT) at once, as a long GC
or VM pause would: the old master serves clients again for a moment while
the promotion goes on.

1 master, 2 replicas, 3 sentinels (down-after 1000 ms). Producers offer
with --wait-replicas all throughout (one CLI process per offer); a take
--count 0 and a work consume. The test listens on every sentinel for
+selected-slave and resumes the master when one announces it. Checks:
every offer that exited 0 is delivered (none lost with the old master's
writes), none early; --wait-replicas all is confirmed by both replicas in a
healthy group and by none on a lone master (exit 4, see ha_wait.py).
DQ_PAUSED_WAIT=N runs the producers on --wait-replicas N instead, to measure.
"""
# tier: slow (about 25 s): make test runs it, make test-fast does not
import os
import signal
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import dq, note, ok, section, wait_for  # noqa: E402
from hatraffic import Producer, SelectedWatch, check_delivered, consumers, sentinel_group, wrap_up  # noqa: E402
from topology import info  # noqa: E402

QP, QW = "pap", "paw"  # plain takes, worker
# What the producers pass to --wait-replicas: "all"; another value measures
# what that setting loses in the same fault (docs/guarantees.md's table).
WAIT = os.environ.get("DQ_PAUSED_WAIT", "all")


g, URL, wpath = sentinel_group()
r = dq("--redis", URL, "--wait-replicas", "all", "offer", QP, "0", "x", "--id", "healthy", redis=False)
ok(r.rc == 0, "--wait-replicas all: both replicas confirm in a healthy group (exit 0)", r)

section(f"producers on --wait-replicas {WAIT}; the master paused until +selected-slave")
take, work = consumers(URL, QP, QW, wpath)
prods = [Producer(URL, f"p{i}-", [QP, QW], wait=WAIT) for i in range(3)]
for p in prods:
    p.start()
ok(wait_for(lambda: sum(1 for p in prods for r in p.results if r[2] == 0) >= 30, 30),
   "offers confirmed before the pause")
old = g.master_port()
pid = g.procs[old].pid
watch = SelectedWatch(g.sentinel_ports, lambda: os.kill(pid, signal.SIGCONT))
t_stop = time.time()
os.kill(pid, signal.SIGSTOP)
try:
    ok(watch.fired.wait(20), "a sentinel announces +selected-slave; the master is resumed then")
finally:
    os.kill(pid, signal.SIGCONT)
    watch.close()
if watch.at:
    note(f"paused {watch.at - t_stop:.2f} s")
ok(g.wait_new_master(old), "a replica is promoted", g.master_port())
t_promoted = time.time()
ok(wait_for(lambda: info(old, "replication").get("role") == "slave", 20), "the old master is demoted")
ok(wait_for(lambda: sum(1 for p in prods for r in p.results if r[2] == 0 and r[3] > t_promoted) >= 15, 30),
   "offers after the promotion are confirmed")
for p in prods:
    p.stop()


class All:
    """The producers' results as one (check_delivered reads .confirmed())."""
    results = [r for p in prods for r in p.results]

    def confirmed(self, queue=None):
        return [r for r in self.results if r[2] == 0 and (queue is None or r[1] == queue)]


outcomes = {}
for r in All.results:
    outcomes[r[2]] = outcomes.get(r[2], 0) + 1
note(f"offer exit codes: {outcomes} (3: no master for a moment; 4: written, not confirmed by all)")
window = [r for r in All.results if t_stop - 1 < r[3] < t_promoted + 2]
note(f"around the pause: {len(window)} offers, {sum(1 for r in window if r[2] == 0)} confirmed")
check_delivered(All(), take, QP, wpath, "paused")
wrap_up(g, take, work)
