"""bench/python_client.py BUILD_DIR - `make bench`, phase python: the Python
client (clients/python/delayq, issue 38) against the C library, same run and
server, unpinned.

  Y1  offers/s, one a call (Client.offer: one FCALL a round trip)
  Y2  offers/s, 1,000 a call (Client.offer_many: ten FCALLs of 100, pipelined)
  Y2r offers/s, 1,000 a call, with delays of their own (0 to 10 s, 1 min to
      1 h) next to one delay (1 h), each with Redis's time an item (INFO
      commandstats); random delays also in array order, as offer_many sent
      them before it sent in delay order (issue 42)
  Y3  leased take of 1 + ack/s
  Y4  leased take of 64 + an ack for each (items/s)
  Y5  leased take of 64 + one ack_many of them (items/s), as a worker does

Next to them the C library's batched offers of the same items
(dq_offer_many, through `delayq offer --batch -`), and Y2's share of it
(issue 38's target: at least 0.5). The server is started by
tests/lib/topology.py (AOF off) and stopped by its pid. Needs Debian's
python3-redis (make deps): without it the phase says so and is skipped.
DQ_BENCH_SCALE scales the counts.
"""
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
from cli_server import Server, out  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
DELAYQ = os.path.join(BUILD, "delayq")
SCALE = float(os.environ.get("DQ_BENCH_SCALE", "1") or "1")
N_ONE = max(200, int(5000 * SCALE))
N_BATCHES = max(5, int(100 * SCALE))
PAYLOAD = b"x" * 16
SPREAD_BATCH = int(os.environ.get("DQ_SPREAD_BATCH", "16384"))


def rate(n, t0):
    return n / (time.perf_counter() - t0)


def offer_rate(c, queue, batches):
    """items/s and Redis's us an item (its FCALLs) of offer_many over batches."""
    c.redis.config_resetstat()
    t0 = time.perf_counter()
    for items in batches:
        c.offer_many(queue, items)
    n = sum(len(b) for b in batches)
    r = rate(n, t0)
    return r, c.redis.info("commandstats").get("cmdstat_fcall", {}).get("usec", 0) / n


def spread_rows(c):
    """Y2r: offers with delays of their own against one delay, same run."""
    import random

    import delayq
    import delayq.client as dc
    rnd = random.Random(42)
    n = max(2, N_BATCHES * 1000 // SPREAD_BATCH)

    def batches(delay):
        return [[delayq.Item(PAYLOAD, delay()) for _ in range(SPREAD_BATCH)] for _ in range(n)]

    one, us1 = offer_rate(c, "y2one", batches(lambda: 3600000))
    out(f"   Y2r one delay (1 h):              {one:10.0f} items/s   Redis {us1:.1f} us/item")
    for label, lo, hi in (("0-10 s", 0, 10000), ("1 min-1 h", 60000, 3600000)):
        for order in ("delay order", "array order"):
            keep = dc._send_order
            if order == "array order":
                dc._send_order = lambda items, args: list(range(len(items)))
            try:
                r, us = offer_rate(c, f"y2r{lo}{order[0]}", batches(lambda: rnd.randint(lo, hi)))
            finally:
                dc._send_order = keep
            out(f"   Y2r {label:9} {order}:     {r:10.0f} items/s ({r / one:.2f})   Redis {us:.1f} us/item")


def main():
    out("\n== The Python client (issue 38): clients/python on python3-redis, one connection, unpinned"
        + (" [SCALED]" if SCALE != 1 else ""))
    try:
        import delayq
    except ImportError as e:
        out(f"   skipped: {e} (make deps installs python3-redis)")
        return
    with Server("python") as srv:
        subprocess.run([DELAYQ, "--redis", srv.url, "functions", "load"], capture_output=True, timeout=30,
                       check=True)
        c = delayq.Client(srv.url)
        c.library()
        t0 = time.perf_counter()
        for _ in range(N_ONE):
            c.offer("y1", PAYLOAD)
        out(f"   Y1 offers, one a call:            {rate(N_ONE, t0):10.0f} /s   ({N_ONE} calls)")
        items = [delayq.Item(PAYLOAD) for _ in range(1000)]
        t0 = time.perf_counter()
        for _ in range(N_BATCHES):
            c.offer_many("y2", items)
        py = rate(N_BATCHES * 1000, t0)
        out(f"   Y2 offers, 1,000 a call:          {py:10.0f} items/s")
        spread_rows(c)
        t0 = time.perf_counter()
        done = 0
        while done < N_ONE:
            for m in c.take("y1", 1, lease_ms=60000):
                c.ack("y1", m.id, m.token)
                done += 1
        out(f"   Y3 leased take of 1 + ack:        {rate(done, t0):10.0f} /s")
        t0 = time.perf_counter()
        done, want = 0, min(N_BATCHES * 1000 // 2, 20000)
        while done < want:
            for m in c.take("y2", 64, lease_ms=60000) or sys.exit("python: y2 ran dry"):
                c.ack("y2", m.id, m.token)
                done += 1
        out(f"   Y4 leased take of 64 + each ack:  {rate(done, t0):10.0f} items/s")
        t0 = time.perf_counter()
        done = 0
        while True:  # the rest of y2's items
            got = c.take("y2", 64, lease_ms=60000)
            if not got:
                break
            c.ack_many("y2", [(m.id, m.token) for m in got])
            done += len(got)
        out(f"   Y5 leased take of 64 + ack_many:  {rate(done, t0):10.0f} items/s")
        lines = "".join(f"0\t\t{PAYLOAD.decode()}\n" for _ in range(N_BATCHES * 1000)).encode()
        t0 = time.perf_counter()
        subprocess.run([DELAYQ, "--redis", srv.url, "offer", "y3", "--batch", "-"], input=lines,
                       capture_output=True, timeout=120, check=True)
        cl = rate(N_BATCHES * 1000, t0)
        out(f"   (C library, dq_offer_many through `delayq offer --batch -`: {cl:10.0f} items/s;"
            f" Y2 is {py / cl:.2f} of it, target >= 0.5)")
        c.close()


if __name__ == "__main__":
    main()
