"""bench/shards.py BUILD_DIR - issue 13's figures: one queue spread over 12
shards next to the same queue unsharded, in the same run, through the CLI.

  S1  on 1, 2 and 3 masters (a cluster built by hand, slots split evenly, no
      replicas): offers/s (60,000 through `offer --batch`), drain/s (one
      scheduler, two `take --count 0` consumers, all due at once), and Redis
      CPU per item on each node, with each node's share of it and of the
      memory. Unsharded and sharded alternate (A B A B).
  S2  lateness (ready - due, server clock) p50/p99/max at 2,000 offers/s,
      delays 0-2 s, one consumer, on 3 masters: unsharded vs 12 shards;
      and the largest inversion of due order that consumer saw.
  S3  16 scheduler processes on the 12-shard queue vs 1, at 2,000 offers/s:
      Redis CPU and script calls per item.
In S2 and S3 the Redis CPU is summed over the nodes, less what they spend
idle (cron, cluster bus), measured just before on the same nodes.

This machine has 2 cores: the servers share core 0 (pinned, as bench/run.sh
does) and the clients core 1, so several masters cannot run faster than
one here. What the figures show is how the cost spreads: with a core per
node, a node's share is what it would carry. Every server is started by
tests/lib/topology.py and stopped by its pid; every wait has a deadline.
"""
import json
import os
import random
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
DELAYQ = os.path.join(BUILD, "delayq")
SCALE = float(os.environ.get("DQ_BENCH_SCALE", "1") or "1")
SHARDS = 12


def n(x):
    return max(1, int(x * SCALE))


class HandCluster(topology._Group):
    """m masters without replicas, each serving an equal contiguous range of
    slots (what redis-cli --cluster create does, which needs 3 or more)."""

    def __init__(self, m):
        super().__init__("delayq-bench-shards.")
        self.ports = []
        while len(self.ports) < m:
            p = topology.free_port(with_bus=True)
            if p not in self.ports:
                self.ports.append(p)
        for p in self.ports:
            self._server(p, "--appendonly", "no", "--cluster-enabled", "yes", "--cluster-config-file",
                         os.path.join(self.dir, str(p), "nodes.conf"), "--cluster-node-timeout", "5000")
        if not self.wait_ping(self.ports):
            raise RuntimeError("nodes did not start")
        for i, p in enumerate(self.ports):
            lo, hi = i * 16384 // m, (i + 1) * 16384 // m - 1
            topology.call(p, "CLUSTER", "ADDSLOTSRANGE", str(lo), str(hi))
        for p in self.ports[1:]:
            topology.call(p, "CLUSTER", "MEET", "127.0.0.1", str(self.ports[0]))
        ok = topology.wait_until(lambda: all("cluster_state:ok" in (topology.try_call(p, "CLUSTER", "INFO") or "")
                                             for p in self.ports), 30, 0.1)
        if not ok:
            raise RuntimeError("cluster did not become ready")
        time.sleep(0.5)

    def url(self):
        return "redis-cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)


def cpu(port):
    info = topology.info(port, "cpu")
    return float(info.get("used_cpu_sys", 0)) + float(info.get("used_cpu_user", 0))


def mem(port):
    return int(topology.info(port, "memory").get("used_memory", 0))


def dq(url, *args, stdin=None, timeout=300):
    return subprocess.run(CLIENT + [DELAYQ, "--redis", url] + [str(a) for a in args], input=stdin,
                          capture_output=True, timeout=timeout)


def stats(url, q):
    r = dq(url, "stats", q, "--json", timeout=30)
    return json.loads(r.stdout) if r.returncode == 0 else {}


def wait_empty(url, q, deadline_s):
    end = time.time() + deadline_s
    while time.time() < end:
        s = stats(url, q)
        if s and s.get("pending", 1) + s.get("ready", 1) + s.get("inflight", 1) == 0:
            return True
        time.sleep(0.05)
    return False


def one_round(c, q, shards, items):
    """Offers then drains items on queue q of shards shards; returns the
    figures of both phases."""
    url = c.url()
    r = dq(url, "config", q, "--shards", shards)
    if r.returncode != 0:
        raise RuntimeError(f"config --shards {shards}: {r.stderr.decode()[:200]}")
    lines = "".join(f"3000\t{q}-{i}\tpayload-{i:08d}\n" for i in range(items)).encode()
    c0, m0 = {p: cpu(p) for p in c.ports}, {p: mem(p) for p in c.ports}
    t0 = time.time()
    r = dq(url, "offer", q, "--batch", "-", stdin=lines)
    t_offer = time.time() - t0
    c1, m1 = {p: cpu(p) for p in c.ports}, {p: mem(p) for p in c.ports}
    if r.returncode != 0:
        raise RuntimeError(f"offer: {r.stderr.decode()[:200]}")
    time.sleep(max(0.0, 3.2 - (time.time() - t0)))  # all due now
    c2 = {p: cpu(p) for p in c.ports}
    t1 = time.time()
    procs = [subprocess.Popen(CLIENT + [DELAYQ, "--redis", url, "schedule", q], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)]
    procs += [subprocess.Popen(CLIENT + [DELAYQ, "--redis", url, "take", q, "--count", "0", "--no-scheduler"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(2)]
    drained = wait_empty(url, q, 120)
    t_drain = time.time() - t1
    c3 = {p: cpu(p) for p in c.ports}
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(timeout=10)
    r = dq(url, "config", q, "--shards", 1)  # empty again: back to one shard
    return {
        "offer_rate": items / t_offer,
        "offer_us": {p: (c1[p] - c0[p]) * 1e6 / items for p in c.ports},
        "mem": {p: m1[p] - m0[p] for p in c.ports},
        "drain_rate": items / t_drain if drained else 0.0,
        "drain_us": {p: (c3[p] - c2[p]) * 1e6 / items for p in c.ports},
    }


def share(d):
    total = sum(d.values()) or 1
    return "/".join(f"{100 * v / total:.0f}" for v in d.values())


def s1():
    print("== S1: one queue, unsharded vs 12 shards, on 1, 2 and 3 masters (A B A B;"
          f" {'servers pinned to core 0, the CLI to core 1' if PINNED else 'UNPINNED'})")
    print(f"   {n(60000)} items offered through `offer --batch` (all due 3 s later), drained by one scheduler")
    print("   and two `take --count 0`; Redis CPU per item summed over the nodes, and each node's share (%)")
    print(f"   {'masters':>7} {'queue':>10} {'offers/s':>9} {'us/item':>8} {'cpu share':>12} {'mem share':>12}"
          f" {'drain/s':>9} {'us/item':>8} {'cpu share':>12}")
    for m in (1, 2, 3):
        with HandCluster(m) as c:
            for rnd in range(2):
                for label, shards in (("unsharded", 1), ("12 shards", SHARDS)):
                    f = one_round(c, f"b{rnd}{shards}", shards, n(60000))
                    print(f"   {m:>7} {label:>10} {f['offer_rate']:>9.0f} {sum(f['offer_us'].values()):>8.2f}"
                          f" {share(f['offer_us']):>12} {share(f['mem']):>12} {f['drain_rate']:>9.0f}"
                          f" {sum(f['drain_us'].values()):>8.2f} {share(f['drain_us']):>12}", flush=True)


class Paced(threading.Thread):
    """Offers rate items a second for secs seconds through one streaming
    `offer --batch -`, delays 0-2 s."""

    def __init__(self, url, q, rate, secs):
        super().__init__(daemon=True)
        self.url, self.q, self.rate, self.secs = url, q, rate, secs

    def run(self):
        p = subprocess.Popen(CLIENT + [DELAYQ, "--redis", self.url, "offer", self.q, "--batch", "-"],
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rng = random.Random(7)
        t0, sent = time.time(), 0
        while time.time() - t0 < self.secs:
            due = int((time.time() - t0) * self.rate)
            chunk = "".join(f"{rng.randint(0, 2000)}\t\tx\n" for _ in range(max(0, due - sent)))
            if chunk:
                p.stdin.write(chunk.encode())
                p.stdin.flush()
                sent = due
            time.sleep(0.005)
        p.stdin.close()
        p.wait(timeout=30)


def lateness(c, q, shards, secs, schedulers=1):
    """Lateness and Redis cost of secs s at 2,000/s with `schedulers`
    scheduler processes and one consumer."""
    url = c.url()
    dq(url, "config", q, "--shards", shards)
    take = subprocess.Popen(CLIENT + [DELAYQ, "--redis", url, "take", q, "--count", "0", "--json",
                                      "--no-scheduler"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    # Read as it comes: a pipe left unread fills (64 KiB) and stalls the take.
    out = []
    reader = threading.Thread(target=lambda: out.extend(l.decode() for l in take.stdout), daemon=True)
    reader.start()
    scheds = [subprocess.Popen(CLIENT + [DELAYQ, "--redis", url, "schedule", q], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL) for _ in range(schedulers)]
    time.sleep(1.0)
    # What the nodes spend with the consumer and schedulers idle (cron,
    # cluster bus), per second, is taken off the window's CPU.
    b0, tb = sum(cpu(p) for p in c.ports), time.time()
    time.sleep(2.0)
    idle_per_s = (sum(cpu(p) for p in c.ports) - b0) / (time.time() - tb)
    for p in c.ports:
        topology.call(p, "CONFIG", "RESETSTAT")
    c0, t0 = sum(cpu(p) for p in c.ports), time.time()
    prod = Paced(url, q, 2000, secs)
    prod.start()
    prod.join(secs + 60)
    wait_empty(url, q, 30)
    c1 = sum(cpu(p) for p in c.ports) - idle_per_s * (time.time() - t0)
    calls = 0
    for p in c.ports:
        for k, v in topology.info(p, "commandstats").items():
            if k.startswith("cmdstat_fcall"):
                calls += int(v.split("calls=")[1].split(",")[0]) if isinstance(v, str) else int(v.get("calls", 0))
    for p in scheds:
        p.terminate()
    take.terminate()
    take.wait(timeout=30)
    reader.join(10)
    for p in scheds:
        p.wait(timeout=10)
    msgs = [json.loads(x) for x in out if x.startswith("{")]
    lat = sorted(m["ready_ms"] - m["due_ms"] for m in msgs)
    # Order as the consumer saw it: the largest amount by which an item's
    # due time was earlier than that of one received before it.
    inversion, top = 0, -1
    for m in msgs:
        top = max(top, m["due_ms"])
        inversion = max(inversion, top - m["due_ms"])
    dq(url, "config", q, "--shards", 1)
    items = len(lat) or 1
    return lat, (c1 - c0) * 1e6 / items, calls / items, inversion


def pct(v, p):
    return v[min(len(v) - 1, int(p / 100 * len(v)))] if v else -1


def s2_s3():
    secs = max(2, int(10 * SCALE))
    with HandCluster(3) as c:
        print(f"== S2: lateness at 2,000 offers/s for {secs} s, delays 0-2 s, one scheduler, one consumer,"
              " 3 masters")
        for rnd in range(2):
            for label, shards in (("unsharded", 1), ("12 shards", SHARDS)):
                lat, us, calls, inv = lateness(c, f"l{rnd}{shards}", shards, secs)
                print(f"   {label:>10}: {len(lat)} items, ready - due p50 {pct(lat, 50)} ms, p99 {pct(lat, 99)} ms,"
                      f" max {lat[-1] if lat else -1} ms; largest inversion of due order {inv} ms;"
                      f" Redis CPU {us:.1f} us/item, {calls:.2f} script calls/item", flush=True)
        print(f"== S3: 16 scheduler processes vs 1, 2,000 offers/s for {secs} s, one consumer, 3 masters")
        for label, shards in (("unsharded", 1), ("12 shards", SHARDS)):
            for k in (1, 16):
                lat, us, calls, _ = lateness(c, f"m{k}{shards}", shards, secs, schedulers=k)
                print(f"   {label:>10}, {k:>2} scheduler(s): Redis CPU {us:.1f} us/item,"
                      f" {calls:.2f} script calls/item, ready - due p99 {pct(lat, 99)} ms", flush=True)


def main():
    if not os.path.exists(DELAYQ):
        sys.exit(f"shards.py: no {DELAYQ} (run make first)")
    only = os.environ.get("DQ_BENCH_SHARDS", "s1,s2")
    if "s1" in only:
        s1()
    if "s2" in only:
        s2_s3()


main()
