"""bench/peer.py BUILD_DIR - delayq next to BullMQ, on the same redis-server,
in the same run, interleaved A B A B.

Both sides run as their users run them: delayq through its CLI (`delayq
offer --batch`, `delayq take --json`), BullMQ 6 (pinned with its lockfile in
bench/peers/bullmq) through its Node library (Queue.addBulk / add, a Worker);
nothing is pinned. Workloads:

  adds      delayed jobs added per second (N jobs, delay 1 h, 16-byte data):
            `offer --batch FILE` against addBulk of 1000
  spread    the same with each job its own delay, 60 s + 0..1 h (one seeded
            draw per job): the order in which jobs fall due is no longer the
            order they are added in, which is what per-job delays give
  lateness  2,000 jobs/s for 10 s, delays 0-10 s, one consumer: p50/p99/max
            of receive time - due time (the machine's clock on both sides:
            delayq's due_ms is the server's, BullMQ's timestamp + delay the
            producer's; same machine)
  drain     a backlog of N jobs due now, one consumer process: jobs/s
  memory    Redis used_memory per pending job (N jobs, delay 1 h)

Each workload runs delayq, BullMQ, delayq, BullMQ (FLUSHALL before each run);
the better of each side's two runs is shown, with the ratio. Without node
and npm, or when `npm ci` fails, it says so and exits 0: `make bench` goes
on. DQ_BENCH_SCALE scales N and the lateness run's length.
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import topology  # noqa: E402
from cli_server import Server, out, quantile  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
DELAYQ = os.path.join(BUILD, "delayq")
PEER_DIR = os.path.join(ROOT, "bench", "peers", "bullmq")
SCALE = float(os.environ.get("DQ_BENCH_SCALE", "1") or "1")


def n(x):
    return max(1000, int(x * SCALE))






def peer_ready():
    """node and the pinned BullMQ, or the reason there are none."""
    if not shutil.which("node") or not shutil.which("npm"):
        return "node/npm not found"
    if not os.path.isdir(os.path.join(PEER_DIR, "node_modules", "bullmq")):
        r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=PEER_DIR, capture_output=True,
                           text=True, timeout=300)
        if r.returncode != 0:
            return "npm ci failed: " + (r.stderr.strip().splitlines() or ["?"])[-1][:200]
    return None


def bull(srv, *args, timeout=300):
    r = subprocess.run(["node", os.path.join(PEER_DIR, "peer.js"), args[0], str(srv.port)] +
                       [str(a) for a in args[1:]], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"peer.js {args[0]}: {r.stderr.strip()[-300:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def feed_file(path, count, delay):
    with open(path, "w") as f:
        for i in range(count):
            f.write(f"{delay}\t\t0123456789abcdef\n")


SPREAD_MS = 3600 * 1000


def feed_spread(path, count):
    """count lines, each delayed 60 s + 0..SPREAD_MS (seeded, so runs repeat)."""
    rnd = random.Random(1)
    with open(path, "w") as f:
        for i in range(count):
            f.write(f"{60000 + rnd.randint(0, SPREAD_MS)}ms\t\t0123456789abcdef\n")


# ------------------------------------------------------------------ delayq's side

def dq_add(srv, tmp, count, spread=False):
    path = os.path.join(tmp, "adds")
    if spread:
        feed_spread(path, count)
    else:
        feed_file(path, count, "1h")
    t0 = time.time()
    subprocess.run([DELAYQ, "--redis", srv.url, "offer", "pq", "--batch", path], stdout=subprocess.DEVNULL,
                   check=True, timeout=300)
    return count / (time.time() - t0)


def dq_memory(srv, tmp, count):
    before = srv.memory()
    path = os.path.join(tmp, "mem")
    feed_file(path, count, "1h")
    subprocess.run([DELAYQ, "--redis", srv.url, "offer", "pq", "--batch", path], stdout=subprocess.DEVNULL,
                   check=True, timeout=300)
    return (srv.memory() - before) / count


def dq_drain(srv, tmp, count):
    path = os.path.join(tmp, "drain")
    feed_file(path, count, "0")
    subprocess.run([DELAYQ, "--redis", srv.url, "offer", "pq", "--batch", path], stdout=subprocess.DEVNULL,
                   check=True, timeout=300)
    t0 = time.time()
    r = subprocess.run([DELAYQ, "--redis", srv.url, "take", "pq", "--count", str(count), "--json",
                        "--no-scheduler", "--timeout", "120s"], stdout=subprocess.PIPE, timeout=180)
    secs = time.time() - t0
    got = r.stdout.count(b"\n")
    return got / secs if got == count else float("nan")


def dq_lateness(srv, rate, secs, max_delay):
    cons = subprocess.Popen([DELAYQ, "--redis", srv.url, "take", "pq", "--count", "0", "--json", "--timeout",
                             f"{int(secs + max_delay / 1000 + 20)}s"], stdout=subprocess.PIPE)
    got = []

    def read():
        for line in cons.stdout:
            got.append((time.time(), line))

    th = threading.Thread(target=read, daemon=True)
    th.start()
    time.sleep(0.5)
    prod = subprocess.Popen([DELAYQ, "--redis", srv.url, "offer", "pq", "--batch", "-"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL)
    rnd = random.Random(3)
    t0, sent = time.time(), 0
    while time.time() - t0 < secs:  # bounded by secs
        want = int((time.time() - t0) * rate)
        if want > sent:
            prod.stdin.write("".join(f"{rnd.randint(0, max_delay)}ms\t\t0123456789abcdef\n"
                                     for _ in range(want - sent)).encode())
            prod.stdin.flush()
            sent = want
        time.sleep(0.005)
    prod.stdin.close()
    prod.wait(timeout=60)
    end = time.time() + max_delay / 1000 + 10
    while len(got) < sent and time.time() < end:  # bounded
        time.sleep(0.05)
    cons.terminate()
    cons.wait(timeout=10)
    th.join(timeout=5)
    late = [t * 1000 - json.loads(line)["due_ms"] for t, line in got]
    return sent, late


# ------------------------------------------------------------------ the runs

def best(values, higher_is_better=True):
    v = [x for x in values if x == x]  # no NaN
    if not v:
        return float("nan")
    return max(v) if higher_is_better else min(v)


def main():
    if not os.path.exists(DELAYQ):
        raise SystemExit(f"peer: {DELAYQ} not built")
    out("\n== Next to a peer: BullMQ on the same redis-server, A B A B" + (" [SCALED]" if SCALE != 1 else ""))
    why = peer_ready()
    if why:
        out(f"   peer: {why}: the BullMQ comparison is skipped")
        return 0
    version = json.load(open(os.path.join(PEER_DIR, "node_modules", "bullmq", "package.json")))["version"]
    adds_n, drain_n, mem_n = n(50000), n(50000), n(100000)
    rate, secs, max_delay = 2000, max(2.0, 10 * SCALE), 10000
    tmp = tempfile.mkdtemp(prefix="delayq-peer.")
    rows = []
    with Server("peer") as srv:
        out(f"   redis-server 127.0.0.1:{srv.port}, not pinned; delayq CLI {DELAYQ}; BullMQ {version} "
            f"(node {subprocess.run(['node', '--version'], capture_output=True, text=True).stdout.strip()})")

        def ab(run_dq, run_bull):
            res_dq, res_bull = [], []
            for _ in range(2):
                srv.call("FLUSHALL")
                res_dq.append(run_dq())
                srv.call("FLUSHALL")
                res_bull.append(run_bull())
            return res_dq, res_bull

        d, b = ab(lambda: dq_add(srv, tmp, adds_n), lambda: adds_n / bull(srv, "add", adds_n)["secs"])
        rows.append(("delayed jobs added/s", f"{best(d):,.0f}", f"{best(b):,.0f}", best(d) / best(b),
                     "higher is better", f"{adds_n:,} jobs; runs {[round(x) for x in d]} / {[round(x) for x in b]}"))
        out(f"   adds: delayq {[round(x) for x in d]}/s, BullMQ {[round(x) for x in b]}/s")

        d, b = ab(lambda: dq_add(srv, tmp, adds_n, True),
                  lambda: adds_n / bull(srv, "add", adds_n, SPREAD_MS)["secs"])
        rows.append(("delayed jobs added/s, delays 1 min-1 h", f"{best(d):,.0f}", f"{best(b):,.0f}",
                     best(d) / best(b), "higher is better",
                     f"{adds_n:,} jobs, each its own delay; runs {[round(x) for x in d]} / {[round(x) for x in b]}"))
        out(f"   adds, spread delays: delayq {[round(x) for x in d]}/s, BullMQ {[round(x) for x in b]}/s")

        def bull_mem():
            before = srv.memory()
            bull(srv, "fill", mem_n)
            return (srv.memory() - before) / mem_n

        d, b = ab(lambda: dq_memory(srv, tmp, mem_n), bull_mem)
        rows.append(("Redis bytes per pending job", f"{best(d, False):.0f} B", f"{best(b, False):.0f} B",
                     best(d, False) / best(b, False), "lower is better", f"{mem_n:,} jobs, 16-byte data"))
        out(f"   memory: delayq {[round(x) for x in d]} B, BullMQ {[round(x) for x in b]} B per job")

        d, b = ab(lambda: dq_drain(srv, tmp, drain_n), lambda: (lambda r: r["n"] / r["secs"])(bull(srv, "drain",
                                                                                                  drain_n)))
        rows.append(("drain of a backlog, jobs/s", f"{best(d):,.0f}", f"{best(b):,.0f}", best(d) / best(b),
                     "higher is better", f"{drain_n:,} due jobs, one consumer process"))
        out(f"   drain: delayq {[round(x) for x in d]}/s, BullMQ {[round(x) for x in b]}/s")

        lat = {"dq": [], "bull": []}
        for _ in range(2):
            srv.call("FLUSHALL")
            sent, late = dq_lateness(srv, rate, secs, max_delay)
            lat["dq"].append((sent, late))
            srv.call("FLUSHALL")
            r = bull(srv, "lateness", rate, secs, max_delay, timeout=secs + max_delay / 1000 + 120)
            lat["bull"].append((r["n"], r["late"]))
        picks = {}
        for side, runs in lat.items():
            sent, late = min(runs, key=lambda x: quantile(x[1], .99) if x[1] else 1e9)
            picks[side] = (sent, late)
            out(f"   lateness {side}: " + "; ".join(f"{len(l)}/{s} received, p50 {quantile(l, .5):.1f} p99 "
                                                    f"{quantile(l, .99):.1f} max {max(l, default=float('nan')):.1f} ms"
                                                    for s, l in runs))
        for label, q in (("p50", .5), ("p99", .99), ("max", 1.0)):
            dv = quantile(picks["dq"][1], q) if q < 1 else max(picks["dq"][1], default=float("nan"))
            bv = quantile(picks["bull"][1], q) if q < 1 else max(picks["bull"][1], default=float("nan"))
            rows.append((f"lateness {label}, 2,000/s, delays 0-10 s", f"{dv:.1f} ms", f"{bv:.1f} ms",
                         dv / bv if bv else float("nan"), "lower is better",
                         f"received {len(picks['dq'][1])}/{picks['dq'][0]} and {len(picks['bull'][1])}/"
                         f"{picks['bull'][0]}"))
    shutil.rmtree(tmp, ignore_errors=True)
    out("\n   summary (delayq / BullMQ, same server, same run)")
    out(f"   {'workload':<40} {'delayq':>14} {'BullMQ':>14} {'ratio':>8}  ")
    for what, dv, bv, ratio, better, note in rows:
        out(f"   {what:<40} {dv:>14} {bv:>14} {ratio:>8.2f}  ({better}; {note})")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        topology._stop_all()
