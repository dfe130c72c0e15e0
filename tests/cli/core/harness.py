"""harness.py - the test harness itself: a private, empty redis-server on
127.0.0.1 (not 6379) with AOF on, and the stop/start helpers keep the data."""
import os
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

section("environment")
ok(PORT != 6379, f"port {PORT} is not 6379")
eq(URL, f"redis://127.0.0.1:{PORT}", "DQ_TEST_REDIS")
ok(os.path.isdir(RDIR), f"data dir {RDIR} exists")
eq(redis("DBSIZE"), 0, "the database is empty at the start of a test file (FLUSHALL)")
eq(redis("CONFIG", "GET", "appendonly"), [b"appendonly", b"yes"], "appendonly yes")
eq(redis("CONFIG", "GET", "appendfsync"), [b"appendfsync", b"everysec"], "appendfsync everysec")
eq(redis("CONFIG", "GET", "save"), [b"save", b""], "no RDB snapshots")
eq(redis("CONFIG", "GET", "bind")[1].decode().split(), ["127.0.0.1"], "bound to 127.0.0.1 only")
pid1 = redis_pid()
ok(pid1 is not None, f"pid file names a live redis-server ({pid1})")

section("stop and start keep the data (AOF)")
redis("SET", "harness:k", "v1")
redis("RPUSH", "harness:l", "a", "b")
t0 = time.monotonic()
ok(redis_stop(), "redis_stop returns success")
note(f"stopped in {time.monotonic() - t0:.2f} s")
try:
    redis("PING")
    ok(False, "nothing answers after redis_stop")
except (OSError, RedisError):
    ok(True, "nothing answers after redis_stop")
eq(redis_pid(), None, "no pid after redis_stop")
ok(redis_stop(), "redis_stop on a stopped server is a no-op success")
t0 = time.monotonic()
ok(redis_start(), "redis_start returns success")
note(f"started in {time.monotonic() - t0:.2f} s")
pid2 = redis_pid()
ok(pid2 is not None and pid2 != pid1, f"a new server process ({pid1} -> {pid2})")
eq(redis("GET", "harness:k"), b"v1", "string survived the restart")
eq(redis("LRANGE", "harness:l", 0, -1), [b"a", b"b"], "list survived the restart")
ok(not redis_start(), "redis_start refuses while one runs")
eq(redis_pid(), pid2, "still the same server")
finish()
