"""connect_wait.py - long-running commands started before Redis (issue 39).
On a redis-server of its own (a free 127.0.0.1 port, no persistence, started
late and restarted by pid): `schedule` and `take --connect-wait 30s` started
while nothing listens keep running and say once that they wait; once Redis
is up, an item offered then is moved by that scheduler (a take with
--no-scheduler gets it) and the take gets one too; each says it connected.
After a restart of Redis, the scheduler says "reconnected". `schedule
--connect-wait 1s` with Redis down exits 3 after about a second."""
import os
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403
from topology import free_port  # noqa: E402

tmp = tempfile.mkdtemp(prefix="delayq-cwait.")
port = free_port()
url = f"redis://127.0.0.1:{port}"
server = None


def start_server():
    global server
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp,
                               "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return wait_for(lambda: run("stats", "probe").rc in (0, 1), 10)


def stop_server():
    if server and server.poll() is None:
        server.terminate()
        server.wait(10)


def run(*args, stdin=None):
    return dq("--redis", url, *args, stdin=stdin, redis=False)


procs = []


def bg(*args):
    """A background delayq on url; its stderr goes to a file (p.log), read
    while it runs. Stopped by pid at the end."""
    log = os.path.join(tmp, f"{args[0]}.{len(procs)}.err")
    with open(log, "wb") as f:
        p = subprocess.Popen([BIN, "--redis", url, *map(str, args)], stdout=subprocess.PIPE, stderr=f)
    p.log = log
    procs.append(p)
    return p


def err_of(p):
    with open(p.log, "rb") as f:
        return f.read()


try:
    section("schedule and take started before Redis")
    sched = bg("schedule", "cwq")
    taker = bg("take", "cwt", "--connect-wait", "30s", "--json", "--timeout", "30s")
    time.sleep(1.5)
    ok(sched.poll() is None and taker.poll() is None, "both still running 1.5 s later")
    for p, what in ((sched, "schedule"), (taker, "take")):
        e = err_of(p)
        eq(e.count(b"waiting for it (--connect-wait)"), 1, f"{what}: says once that it waits ({e!r})")
    ok(start_server(), f"redis-server up on port {port}")
    eq(run("offer", "cwq", "300ms", "late", "--id", "c1").rc, 0, "offer c1 to cwq, due in 300 ms")
    r = run("take", "cwq", "--no-scheduler", "--json", "--timeout", "10s")
    ok(r.rc == 0 and b'"c1"' in r.out, "the early scheduler moved c1: a take without a scheduler gets it", r)
    eq(run("offer", "cwt", "0", "x", "--id", "t1").rc, 0, "offer t1 to cwt")
    out, _ = taker.communicate(timeout=10 * SLOW)
    ok(taker.returncode == 0 and b'"t1"' in out, "the early take gets t1 and exits 0", err_of(taker))
    for p, what in ((sched, "schedule"), (taker, "take")):
        ok(b"connected to " in err_of(p), f"{what}: says it connected", err_of(p))

    section("a restart of Redis: 'reconnected'")
    stop_server()
    ok(start_server(), "redis-server restarted")
    ok(wait_for(lambda: b"reconnected" in err_of(sched), 15), "schedule says 'reconnected'", err_of(sched))
    sched.terminate()
    eq(sched.wait(10 * SLOW), 0, "schedule stops on SIGTERM")

    section("--connect-wait 1s with Redis down: exit 3 after about a second")
    stop_server()
    t0 = time.monotonic()
    r = run("schedule", "cwq", "--connect-wait", "1s")
    secs = time.monotonic() - t0
    ok(r.rc == 3 and 0.9 <= secs < 5 * SLOW, f"exit 3 after {secs:.2f} s", r)
    ok(b"waited 1.0 s" in r.err, "says how long it waited", r)
    eq(run("schedule", "cwq", "--connect-wait", "soon").rc, 2, "--connect-wait soon: usage error")
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    stop_server()

finish()
