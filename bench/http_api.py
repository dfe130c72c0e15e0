"""bench/http_api.py BUILD_DIR - `make bench`, phase http: the work verbs of
`delayq serve`'s HTTP API (issue 38), as a service in another language uses
them: one keep-alive connection, JSON bodies, unpinned.

  H1  offers/s, one item a request ({"payload": 16 bytes})
  H2  offers/s, 1,000 items a request (items/s)
  H3  leased take + ack/s: a take of 1 with lease_ms, then its ack
  H4  leased take of 64 + an ack a request for each (items/s)

Next to them, same run and server: `delayq offer --batch -` of the same
items (the CLI's streaming offers), for scale. The server is started by
tests/lib/topology.py (AOF off) and stopped by its pid, as is `delayq
serve`; every wait has a deadline. DQ_BENCH_SCALE scales the counts.
"""
import http.client
import json
import os
import stat
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import topology  # noqa: E402
from cli_server import Serve, Server, out  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
DELAYQ = os.path.join(BUILD, "delayq")
SCALE = float(os.environ.get("DQ_BENCH_SCALE", "1") or "1")
N_ONE = max(200, int(5000 * SCALE))
N_BATCHES = max(5, int(100 * SCALE))
TOKEN = "bench-http-admin-token"


class Api:
    def __init__(self, port):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.h = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    def post(self, path, body):
        self.c.request("POST", path, body=json.dumps(body), headers=self.h)
        r = self.c.getresponse()
        data = r.read()
        if r.status != 200:
            raise SystemExit(f"http: POST {path}: {r.status} {data[:200]!r}")
        return json.loads(data)


def rate(n, t0):
    return n / (time.perf_counter() - t0)


def main():
    out("\n== The HTTP API's work verbs (issue 38): `delayq serve`, one keep-alive connection, unpinned"
        + (" [SCALED]" if SCALE != 1 else ""))
    tmp = tempfile.mkdtemp(prefix="delayq-bench-http.")
    tokfile = os.path.join(tmp, "token")
    with open(tokfile, "w") as f:
        f.write(TOKEN + "\n")
    os.chmod(tokfile, stat.S_IRUSR | stat.S_IWUSR)
    with Server("http") as srv:
        port = topology.free_port()
        with Serve(DELAYQ, srv.url, port, "--token-file", tokfile):
            deadline = time.time() + 10
            while True:
                try:
                    api = Api(port)
                    api.post("/api/queues/h0/take", {})
                    break
                except (OSError, http.client.HTTPException):
                    if time.time() > deadline:
                        raise SystemExit("http: serve did not answer")
                    time.sleep(0.05)
            item = {"payload": "x" * 16}
            t0 = time.perf_counter()
            for _ in range(N_ONE):
                api.post("/api/queues/h1/items", item)
            out(f"   H1 offers, one a request:        {rate(N_ONE, t0):10.0f} /s   ({N_ONE} requests)")
            t0 = time.perf_counter()
            for _ in range(N_BATCHES):
                api.post("/api/queues/h2/items", [item] * 1000)
            out(f"   H2 offers, 1,000 a request:      {rate(N_BATCHES * 1000, t0):10.0f} items/s (target >= 50,000)")
            t0 = time.perf_counter()
            done = 0
            while done < N_ONE:
                for m in api.post("/api/queues/h1/take", {"count": 1, "lease_ms": 60000})["items"]:
                    api.post(f"/api/queues/h1/items/{m['id']}/ack", {"token": m["token"]})
                    done += 1
            out(f"   H3 leased take of 1 + ack:       {rate(done, t0):10.0f} /s")
            t0 = time.perf_counter()
            done, want = 0, min(N_BATCHES * 1000, 20000)
            while done < want:
                for m in api.post("/api/queues/h2/take", {"count": 64, "lease_ms": 60000})["items"]:
                    api.post(f"/api/queues/h2/items/{m['id']}/ack", {"token": m["token"]})
                    done += 1
            out(f"   H4 leased take of 64 + each ack: {rate(done, t0):10.0f} items/s")
            lines = "".join(f"0\t\tx{'x' * 15}\n" for _ in range(N_BATCHES * 1000)).encode()
            t0 = time.perf_counter()
            subprocess.run([DELAYQ, "--redis", srv.url, "offer", "h3", "--batch", "-"], input=lines,
                           capture_output=True, timeout=120, check=True)
            out(f"   (CLI `offer --batch -`, same items: {rate(N_BATCHES * 1000, t0):10.0f} items/s)")

if __name__ == "__main__":
    main()
