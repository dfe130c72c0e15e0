"""bench/ha.py BUILD_DIR - the high-availability figures of `make bench`,
each printed next to its reference measured in the same run:

  H1  offers/s (pipelined, 12 queues) and lateness p50/p99/max (2,000/s,
      delays 0-1 s, 6 queues) on a 3-master cluster vs a single node
  H2  the cost of --wait-replicas 1: offers/s one at a time and pipelined,
      with and without it, on a master with one replica (A B A B)
  H3  the delivery pause across a SIGKILLed master: time from the kill to
      the first delivery after it, with Sentinel (down-after 1000 ms) and
      with Cluster (cluster-node-timeout 1000 ms)

Servers run pinned to core 0 and the measuring clients to core 1 when the
machine has 2 cores and taskset (as bench/run.sh does). Every server is
started by tests/lib/topology.py and stopped by its pid; every wait has a
deadline. Lateness is ready_ms - due_ms on the server clock.
"""
import json
import os
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
import topology  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pinning import CLIENT, PINNED  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
HABENCH = os.path.join(BUILD, "bench", "habench")
DELAYQ = os.path.join(BUILD, "delayq")
SCALE = float(os.environ.get("DQ_BENCH_SCALE", "1") or "1")


def habench(*args, timeout=120):
    r = subprocess.run(CLIENT + [HABENCH] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        print(f"   habench {' '.join(map(str, args[:2]))} failed: {r.stderr.strip()[:300]}", file=sys.stderr)
    return dict(kv.split("=", 1) for kv in r.stdout.split() if "=" in kv)


def n(x):
    return max(1, int(x * SCALE))


class Single(topology._Group):
    def __init__(self, replicas=0):
        super().__init__("delayq-bench-ha.")
        self.port = topology.free_port()
        self._server(self.port, "--appendonly", "no")
        self.replica_ports = []
        for _ in range(replicas):
            p = topology.free_port()
            self._server(p, "--appendonly", "no", "--replicaof", "127.0.0.1", str(self.port))
            self.replica_ports.append(p)
        self.wait_ping([self.port] + self.replica_ports)
        topology.wait_until(lambda: all(topology.info(p, "replication").get("master_link_status") == "up"
                                        for p in self.replica_ports), 30)

    def url(self):
        return f"redis://127.0.0.1:{self.port}"


def h1():
    print("H1. Offers/s and lateness: a 3-master cluster next to a single node (same run)")
    rows = []
    with Single() as s:
        rows.append(("single node", habench("offer", s.url(), 12, n(100000), 0),
                     habench("lateness", s.url(), 6, 2000, max(2, 5 * SCALE))))
    with topology.Cluster(masters=3, replicas_per_master=0) as c:
        rows.append(("cluster, 3 masters", habench("offer", c.url(3), 12, n(100000), 0),
                     habench("lateness", c.url(3), 6, 2000, max(2, 5 * SCALE))))
    print(f"   {'':22} {'offers/s':>10} {'lat p50':>9} {'p99':>7} {'max':>7}   (ms, ready - due)")
    for name, off, lat in rows:
        print(f"   {name:22} {off.get('per_s', '?'):>10} {lat.get('p50_ms', '?'):>9} "
              f"{lat.get('p99_ms', '?'):>7} {lat.get('max_ms', '?'):>7}   "
              f"delivered {lat.get('delivered', '?')}/{lat.get('offered', '?')}")
    try:
        ratio = float(rows[1][1]["per_s"]) / float(rows[0][1]["per_s"])
        print(f"   cluster / single offers: {ratio:.2f} (this machine has 2 cores: the 3 masters share core 0)")
    except (KeyError, ValueError, ZeroDivisionError):
        pass


def h2():
    print("H2. The cost of --wait-replicas 1 (a master and one replica; A B A B)")
    with Single(replicas=1) as s:
        res = {}
        for rnd in range(2):
            for wait in (0, 1):
                one = habench("one", s.url(), n(5000), wait)
                pipe = habench("offer", s.url(), 4, n(50000), wait)
                res.setdefault(wait, []).append((float(one.get("per_s", 0)), float(pipe.get("per_s", 0)),
                                                 int(one.get("not_durable", 0)) + int(pipe.get("not_durable", 0))))
    print(f"   {'':28} {'one at a time/s':>16} {'pipelined/s':>12} {'not confirmed':>14}")
    for wait, label in ((0, "without WAIT"), (1, "--wait-replicas 1")):
        for one, pipe, nd in res[wait]:
            print(f"   {label:28} {one:>16.0f} {pipe:>12.0f} {nd:>14}")
    b0, b1 = res[0], res[1]
    print(f"   ratio with/without: one at a time {sum(x[0] for x in b1) / sum(x[0] for x in b0):.2f}, "
          f"pipelined {sum(x[1] for x in b1) / sum(x[1] for x in b0):.2f}")


def first_after(lines, t):
    later = [recv for recv, _ in lines if recv > t]
    return min(later) - t if later else None


def pause(kind):
    """Time from a SIGKILL of the queue's master to the first delivery after
    it, with a steady producer (offers due now, every 5 ms) and one
    consumer running throughout."""
    group = topology.SentinelGroup() if kind == "sentinel" else topology.Cluster()
    try:
        if kind == "sentinel":
            group.ready(40)
            url, queue = group.url(), "hp"
        else:
            queue = group.queue_on(group.master_ports()[0], "hp")
            url = group.url(3)
        lines = []
        cons = subprocess.Popen(CLIENT + [DELAYQ, "--redis", url, "take", queue, "--count", "0", "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

        def read():
            for line in cons.stdout:
                lines.append((time.time(), line))

        threading.Thread(target=read, daemon=True).start()
        prod = subprocess.Popen(CLIENT + [HABENCH, "produce", url, queue, "12"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        topology.wait_until(lambda: len(lines) > 100, 10)
        if kind == "sentinel":
            t_kill = time.time()
            group.kill_master()
        else:
            slot = group.slot_of(queue)
            old = group.owner(slot)
            t_kill = time.time()
            group.kill(old)
        topology.wait_until(lambda: first_after(lines, t_kill) is not None, 30)
        p = first_after(lines, t_kill)
        before = [recv for recv, _ in lines if recv <= t_kill]
        prod.wait(timeout=30)
        cons.terminate()
        cons.wait(timeout=10)
        return p, (t_kill - max(before)) if before else None
    finally:
        group.stop()


def h3():
    print("H3. Delivery pause across a SIGKILLed master (kill -> first delivery after it; 2 runs each)")
    for kind, detect in (("sentinel", "down-after-milliseconds 1000"), ("cluster", "cluster-node-timeout 1000")):
        runs = [pause(kind) for _ in range(2)]
        shown = ", ".join("none in 30 s" if p is None else f"{p:.2f} s" for p, _ in runs)
        print(f"   {kind:10} {shown}   ({detect}; a steady producer offers every 5 ms)")


def main():
    only = os.environ.get("DQ_HA_ONLY", "h1,h2,h3").split(",")
    if not os.access(HABENCH, os.X_OK):
        print(f"ha.py: {HABENCH} not built", file=sys.stderr)
        return 2
    print(f"== High availability ({'pinned: servers core 0, clients core 1' if PINNED else 'UNPINNED'}"
          f"{', SCALED x%g' % SCALE if SCALE != 1 else ''})")
    for name, fn in (("h1", h1), ("h2", h2), ("h3", h3)):
        if name in only:
            fn()
    return 0


sys.exit(main())
