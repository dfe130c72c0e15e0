"""ownserver.py - one redis-server of a test's own, restartable in place.

For tests that change what the suite's server must not (persistence, the
clock under an LD_PRELOAD shim) and restart it under running processes: the
same port and directory each start, stopped by its pid (SIGTERM, then
SIGKILL after 10 s).
"""
import os
import signal
import subprocess
import tempfile

from dqtest import Redis, RedisError, wait_for
from topology import free_port


class OwnServer:
    def __init__(self, prefix):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}"
        self.proc = None

    def start(self, *args, env=None):
        """Starts redis-server with args after the port, bind and dir; True
        once it answers PING (within 10 s)."""
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--dir", self.dir, "--protected-mode", "no", *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env=dict(os.environ, **env) if env else None)
        return wait_for(self.ping, 10)

    def ping(self):
        try:
            with Redis(port=self.port, timeout=1) as r:
                return r.cmd("PING") == "PONG"
        except (OSError, RedisError):
            return False

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def cmd(self, *args):
        with Redis(port=self.port) as r:
            return r.cmd(*args)
