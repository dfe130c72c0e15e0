"""bench/ops.py BUILD_DIR - `make bench`, phase ops: what watching the queues
costs, through `delayq serve` as operators run it (unpinned).

  O1  one GET /metrics with 100 queues, each holding items in every state
      (pending, ready, in flight, dead): wall time per scrape (p50, p99,
      max over 50 scrapes after 5 warm-ups), Redis CPU per scrape, body
      size. A scrape reads the registry (SMEMBERS), then sends one
      read-only script per queue, pipelined (dq_get_metrics_many): two round
      trips. Reference, same run and server: 101 sequential round trips,
      what an exporter asking one queue at a time pays at least (redis-benchmark
      -c 1 PING_INLINE's mean latency times 101).
  O2  the same for GET /api/queues (what the dashboard polls each second).

The server is started by tests/lib/topology.py (AOF off) and stopped by its
pid, as is `delayq serve`; every wait has a deadline. DQ_BENCH_SCALE scales
the number of scrapes (not the queues: 100 is the figure asked for).
"""
import json
import os
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import topology  # noqa: E402
from cli_server import Server, out, quantile  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
DELAYQ = os.path.join(BUILD, "delayq")
SCALE = float(os.environ.get("DQ_BENCH_SCALE", "1") or "1")
QUEUES = 100
SCRAPES = max(5, int(50 * SCALE))


def dq(srv, *args, stdin=None):
    r = subprocess.run([DELAYQ, "--redis", srv.url, *args], input=stdin, capture_output=True, timeout=60)
    if r.returncode != 0:
        raise SystemExit(f"ops: delayq {' '.join(args)}: exit {r.returncode}: {r.stderr.decode()[:200]}")
    return r


def fill(srv):
    """Each queue: 20 pending, 10 ready, 5 in flight, 5 dead."""
    for q in range(QUEUES):
        name = f"ops{q:03d}"
        batch = "".join(f"1h\tp{i}\tpending item {i}\n" for i in range(20))
        batch += "".join(f"0\tr{i}\tready item {i}\n" for i in range(20))
        dq(srv, "offer", name, "--batch", "-", stdin=batch.encode())
        dq(srv, "config", name, "--max-attempts", "1")
        lines = dq(srv, "take", name, "--ack", "manual", "--lease", "1h", "--count", "10", "--json",
                   "--no-scheduler", "--timeout", "5s").stdout.decode().splitlines()
        for m in map(json.loads, lines[:5]):
            dq(srv, "nack", name, m["id"], m["token"], "--error", "bench")


def get(port, path):
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        body = r.read()
        status = r.status
    return time.perf_counter() - t0, status, body


def scrapes(srv, port, path):
    for _ in range(5):
        get(port, path)
    times, c0 = [], srv.cpu()
    size = 0
    for _ in range(SCRAPES):
        dt, status, body = get(port, path)
        if status != 200:
            raise SystemExit(f"ops: GET {path}: {status}")
        times.append(dt * 1000)
        size = len(body)
    return times, (srv.cpu() - c0) / SCRAPES * 1000, size


def ping_floor(srv):
    """Mean latency of a sequential PING (ms), from redis-benchmark -c 1."""
    r = subprocess.run(["redis-benchmark", "-p", str(srv.port), "-c", "1", "-n", "20000", "--csv", "-t", "ping_inline"],
                       capture_output=True, timeout=120, text=True)
    for line in r.stdout.splitlines():
        f = [x.strip('"') for x in line.split(",")]
        if f and f[0] == "PING_INLINE" and len(f) > 2:
            return float(f[2])  # avg_latency_ms
    raise SystemExit("ops: redis-benchmark printed no PING figure: " + r.stdout[:200] + r.stderr[:200])


def main():
    out(f"\n== Operations (issue 11): `delayq serve` with {QUEUES} queues, unpinned"
        + (" [SCALED]" if SCALE != 1 else ""))
    with Server("ops") as srv:
        fill(srv)
        port = topology.free_port()
        serve = subprocess.Popen([DELAYQ, "--redis", srv.url, "serve", "--listen", f"127.0.0.1:{port}"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.time() + 10
            while time.time() < deadline:
                try:
                    get(port, "/api/queues")
                    break
                except OSError:
                    time.sleep(0.05)
            else:
                raise SystemExit("ops: serve did not answer")
            floor = ping_floor(srv) * (QUEUES + 1)
            out(f"   each queue: 20 pending, 10 ready, 5 in flight, 5 dead; {SCRAPES} requests after 5 warm-ups")
            out(f"   {'request':<26} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'Redis CPU ms':>13} {'bytes':>8}"
                f" {'101 RTT ms':>10} {'p50/ref':>8}")
            for label, path in (("O1 GET /metrics", "/metrics"), ("O2 GET /api/queues", "/api/queues")):
                times, cpu, size = scrapes(srv, port, path)
                p50 = quantile(times, 0.5)
                out(f"   {label:<26} {p50:8.2f} {quantile(times, 0.99):8.2f} {max(times):8.2f} {cpu:13.2f}"
                    f" {size:8d} {floor:10.2f} {p50 / floor:8.2f}")
            out(f"   101 RTT: {QUEUES + 1} sequential round trips, from redis-benchmark -c 1 -n 20000 -t ping_inline's "
                f"mean latency ({floor / (QUEUES + 1) * 1000:.0f} us each), same server, same run")
        finally:
            serve.terminate()
            try:
                serve.wait(timeout=10)
            except subprocess.TimeoutExpired:
                serve.kill()
                serve.wait()


if __name__ == "__main__":
    main()
