"""bench/tls.py BUILD_DIR - `make bench`, phase tls: the CLI over TLS next to
plain TCP, on one redis-server with both a plain port and a TLS port (a
test CA made with openssl by tests/lib/tlsca.py, nothing fetched), in the
same run, A B A B:

  T1  offers/s: `offer --batch -` of N items due now
  T2  drain/s: `take --count N` of those N items
  T3  lateness: M items due over 1 s with a `take --json` waiting; each
      item's receive time minus its due time (one host: one clock), p50/p99

with the client's CPU (the CLI processes', user + sys) and Redis's (INFO
cpu) per phase, and TLS over plain for T1 and T2 (issue 37's target: at
least 0.7). The server is pinned to core 0 and the CLI to core 1 where
bench/pinning.py can; the server is stopped by its pid; every wait has a
deadline. DQ_BENCH_SCALE scales the counts.
"""
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import topology  # noqa: E402
from cli_server import out, quantile  # noqa: E402
from pinning import CLIENT, PINNED  # noqa: E402
from tlsca import TestCA  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
DELAYQ = os.path.join(BUILD, "delayq")
SCALE = float(os.environ.get("DQ_BENCH_SCALE", "1") or "1")
N = max(2000, int(50000 * SCALE))
M = max(200, int(2000 * SCALE))
ROUNDS = 2


class DualServer(topology._Group):
    """One redis-server with a plain port and a TLS port (AOF off)."""

    def __init__(self, ca):
        super().__init__("delayq-bench-tls.")
        crt, key = ca.issue("server", ["IP:127.0.0.1"])
        self.port, self.tls_port = topology.free_port(), topology.free_port()
        d = os.path.join(self.dir, "data")
        os.makedirs(d)
        self._spawn(self.port, ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", d,
                                "--save", "", "--appendonly", "no", "--protected-mode", "no",
                                "--tls-port", str(self.tls_port), "--tls-cert-file", crt, "--tls-key-file", key,
                                "--tls-ca-cert-file", ca.ca, "--tls-auth-clients", "no"])
        if not self.wait_ping([self.port]):
            raise SystemExit("tls: redis-server did not start")

    def cpu(self):
        i = topology.info(self.port, "cpu")
        return float(i["used_cpu_sys"]) + float(i["used_cpu_user"])


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cli(url, ca, *args, **kw):
    return subprocess.run(CLIENT + [DELAYQ, "--redis", url, "--tls-ca", ca, *args], capture_output=True,
                          timeout=300, check=True, **kw)


def measured(srv, fn):
    """fn() timed: (seconds, client CPU s, Redis CPU s)."""
    c0, r0, t0 = children_cpu(), srv.cpu(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, children_cpu() - c0, srv.cpu() - r0


def offers_and_drain(srv, url, ca, q):
    lines = "".join(f"0\t\tp{i:015d}\n" for i in range(N)).encode()
    off = measured(srv, lambda: cli(url, ca, "offer", q, "--batch", "-", input=lines))
    drain = measured(srv, lambda: cli(url, ca, "take", q, "--count", str(N), "--timeout", "120s"))
    return off, drain


def lateness(url, ca, q):
    """Receive time minus due time (ms) of M items due over 1 s from 1 s on."""
    take = subprocess.Popen(CLIENT + [DELAYQ, "--redis", url, "--tls-ca", ca, "take", q, "--count", str(M),
                                      "--json", "--timeout", "60s"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    time.sleep(0.3)  # its subscription made
    lines = "".join(f"{1000 + (i * 1000) // M}\t\tp\n" for i in range(M)).encode()
    cli(url, ca, "offer", q, "--batch", "-", input=lines)
    late = []
    for line in take.stdout:
        recv = time.time() * 1000
        late.append(recv - json.loads(line)["due_ms"])
    take.wait(timeout=60)
    return late


def main():
    out("\n== TLS next to plain TCP (issue 37): one redis-server, a plain and a TLS port, the CLI "
        + ("on core 1, the server on core 0" if PINNED else "unpinned") + (" [SCALED]" if SCALE != 1 else ""))
    ca = TestCA("benchca")
    with DualServer(ca) as srv:
        urls = {"plain": f"redis://127.0.0.1:{srv.port}", "tls": f"rediss://127.0.0.1:{srv.tls_port}"}
        res = {k: {"off": [], "drain": [], "late": []} for k in urls}
        for rnd in range(ROUNDS):
            for kind, url in urls.items():
                off, drain = offers_and_drain(srv, url, ca.ca, f"{kind}{rnd}b")
                res[kind]["off"].append(off)
                res[kind]["drain"].append(drain)
                res[kind]["late"] += lateness(url, ca.ca, f"{kind}{rnd}l")
                topology.call(srv.port, "FLUSHALL")
        best = {}
        for kind in urls:
            r = res[kind]
            o = min(r["off"]), min(r["drain"])
            best[kind] = (N / o[0][0], N / o[1][0])
            out(f"   {kind:5}  T1 offers {N / o[0][0]:9.0f} /s (client CPU {o[0][1]:.2f} s, Redis {o[0][2]:.2f} s)"
                f"   T2 drain {N / o[1][0]:9.0f} /s (client CPU {o[1][1]:.2f} s, Redis {o[1][2]:.2f} s)"
                f"   T3 lateness p50 {quantile(r['late'], 0.5):6.1f} ms p99 {quantile(r['late'], 0.99):6.1f} ms"
                f" ({len(r['late'])} items)")
        out(f"   TLS / plain: offers {best['tls'][0] / best['plain'][0]:.2f}, drain {best['tls'][1] / best['plain'][1]:.2f}"
            f" (target >= 0.7; best of {ROUNDS} rounds each, {N} items)")


if __name__ == "__main__":
    main()
