"""schedulers.py - a queue without a scheduler shows it (issue 39): items
offered with no scheduler running, and a lease that ended with nobody to
return it, show in `stats --json` (schedulers 0, overdue_ms growing) and in
serve's /metrics (delayq_schedulers 0, delayq_overdue_seconds > 1) within
5 s; `lookup` of the item whose lease ended says "lease ended N s ago,
waiting for a scheduler" (and of a pending one "due N s ago"). Once `delayq
schedule` starts, both clear within 2 s (schedulers 1, overdue 0), the lease
comes back, and a second scheduler counts as 2."""
import os
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403
from workers import *  # noqa: E402,F403

TOKEN = "t0ken-of-schedulers-py"
tmp = tempfile.mkdtemp(prefix="delayq-sched.")
tokfile = private_file(tmp, "token", TOKEN + "\n")


def metrics_of(port, queue):
    """{family: value} of queue's delayq_schedulers and delayq_overdue_seconds."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5 * SLOW) as r:
            body = r.read().decode()
    except (urllib.error.URLError, OSError):
        return {}
    out = {}
    for line in body.splitlines():
        for fam in ("delayq_schedulers", "delayq_overdue_seconds"):
            if line.startswith(f'{fam}{{queue="{queue}"}} '):
                out[fam] = float(line.split()[-1])
    return out


def stats_of(queue):
    return stats(queue) or {}


Q = "sched-vis"
section("no scheduler: overdue work shows in stats, /metrics and lookup within 5 s")
port = closed_port()
srv = bg_dq("serve", "--listen", f"127.0.0.1:{port}", "--token-file", tokfile, Q)
ok(wait_for(lambda: metrics_of(port, Q) != {}, 10), "serve answers /metrics", srv.err)
eq(dq("offer", Q, "0", "gpu", "--id", "lease1").rc, 0, "offer lease1")
# Due now: ready at once (the offer puts it there), so the take needs no
# scheduler (one would count for 15 s after it left: its heartbeat's span).
r, msgs = take_manual(Q, "--lease", "500ms", "--no-scheduler", "--timeout", "5s")
eq((r.rc, len(msgs)), (0, 1), "take lease1 with a 500 ms lease")
eq(dq("offer", Q, "300ms", "x", "--id", "p1").rc, 0, "offer p1, due in 300 ms, no scheduler running")
t0 = time.monotonic()
seen = wait_for(lambda: stats_of(Q).get("overdue_ms", 0) >= 1000, 5)
s = stats_of(Q)
ok(seen and s.get("schedulers") == 0, f"stats: schedulers 0, overdue_ms >= 1000 ({s.get('overdue_ms')})", s)
m = {}
seen = wait_for(lambda: (m.update(metrics_of(port, Q)) or True) and m.get("delayq_overdue_seconds", 0) >= 1, 5)
ok(seen and m.get("delayq_schedulers") == 0.0, f"/metrics: delayq_schedulers 0, delayq_overdue_seconds >= 1 "
   f"({m.get('delayq_overdue_seconds')})", m)
ok(time.monotonic() - t0 < 5 * SLOW + 1, "within 5 s")
time.sleep(max(0, 1.6 - (time.monotonic() - t0)))
r = dq("lookup", Q, "lease1")
ok(r.rc == 0 and b"state inflight" in r.out and b" s ago, waiting for a scheduler" in r.out
   and b"lease ended " in r.out, "lookup lease1: 'lease ended N s ago, waiting for a scheduler'", r)
j = (dq("lookup", Q, "lease1", "--json").json_lines() or [{}])[0]
ok(j.get("overdue_ms", 0) >= 1000, f"lookup --json: overdue_ms >= 1000 ({j.get('overdue_ms')})", j)
r = dq("lookup", Q, "p1")
ok(r.rc == 0 and b"state pending" in r.out and b"waiting for a scheduler" in r.out, "lookup p1: due N s ago", r)

section("a scheduler starts: clear within 2 s")
sched = bg_dq("schedule", Q)
t1 = time.monotonic()
cleared = wait_for(lambda: (lambda s_: s_.get("schedulers") == 1 and s_.get("overdue_ms") == 0)(stats_of(Q)), 2)
ok(cleared, "stats: schedulers 1, overdue_ms 0 within 2 s", stats_of(Q))
m = {}
cleared = wait_for(lambda: (m.update(metrics_of(port, Q)) or True) and m.get("delayq_schedulers") == 1.0
                   and m.get("delayq_overdue_seconds") == 0.0, 2)
ok(cleared, "/metrics: delayq_schedulers 1, delayq_overdue_seconds 0 within 2 s", m)
note(f"cleared after {time.monotonic() - t1:.2f} s")
r = dq("lookup", Q, "lease1")
ok(r.rc == 0 and b"state ready" in r.out and b"waiting" not in r.out, "lookup lease1: ready again", r)
sched2 = bg_dq("schedule", Q)
ok(wait_for(lambda: stats_of(Q).get("schedulers") == 2, 3), "a second scheduler: schedulers 2", stats_of(Q))
eq(sched2.stop(signal.SIGTERM), 0, "second scheduler stops")
eq(sched.stop(signal.SIGTERM), 0, "scheduler stops")
srv.stop(signal.SIGTERM)

finish()
