"""bench/cli_server.py - what the CLI-driven bench phases (users.py, peer.py)
share: a private, unpinned redis-server (AOF off) started through
tests/lib/topology.py and stopped by its pid, and the small helpers they
print with."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "lib"))
import topology  # noqa: E402


def out(*a):
    print(*a, flush=True)


def quantile(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


class Server(topology._Group):
    """One redis-server on a free 127.0.0.1 port; a context manager."""

    def __init__(self, tag):
        super().__init__(f"delayq-bench-{tag}.")
        self.port = topology.free_port()
        self._server(self.port, "--appendonly", "no")
        if not self.wait_ping([self.port]):
            raise SystemExit(f"{tag}: redis-server did not start")
        self.url = f"redis://127.0.0.1:{self.port}"

    def call(self, *args):
        return topology.call(self.port, *args)

    def cpu(self):
        i = topology.info(self.port, "cpu")
        return float(i["used_cpu_sys"]) + float(i["used_cpu_user"])

    def memory(self):
        return int(topology.info(self.port, "memory")["used_memory"])

    def now_ms(self):
        s, us = self.call("TIME")
        return int(s) * 1000 + int(us) // 1000


class Serve:
    """`delayq serve` on 127.0.0.1:port with args, for a with block: started
    at entry, stopped by its pid (TERM, then KILL after 10 s) at exit."""

    def __init__(self, delayq, url, port, *args):
        self.proc = subprocess.Popen([delayq, "--redis", url, "serve", "--listen", f"127.0.0.1:{port}", *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def __enter__(self):
        return self.proc

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return False
