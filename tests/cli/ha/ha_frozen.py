"""ha_frozen.py - a Sentinel master frozen (SIGSTOP) for 30 s while a
`take --count 0` and a `work` wait on it, idle, in a blocking take.

1 master, 2 replicas, 3 sentinels (down-after 1000 ms). The sentinels
promote a replica after about 2-3 s; the frozen master neither answers nor
closes anything. Checks: both running consumers follow the promoted replica
by themselves and deliver an item offered there within a bound of the
promotion (a BLPOP already sent to the frozen node must not hold them for
the 30 s), none is lost or early, and once the old master is resumed (it
rejoins as a replica) everything still works. Also: a silent sentinel in the
URL does not hold discovery for the connect timeout.
"""
# tier: slow (about 46 s): make test runs it, make test-fast does not
import os
import signal
import socket
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import SLOW, dq, note, ok, section, wait_for  # noqa: E402
from hatraffic import consumers, sentinel_group, taken, worked, wrap_up  # noqa: E402
from topology import try_call  # noqa: E402

QP, QW = "frp", "frw"  # plain takes, worker
FREEZE_S = 30
# From the promotion the test sees (polling a sentinel) to a delivery: the
# client hears it from the sentinels' announcements at once; 1 s for its
# reconnect and the offer's own round trip, 1 s more for a loaded machine.
BOUND_S = 2.0 * SLOW


def offer_until_ok(queue, id_, limit_s=10):
    """Offers id_ (due now) until one exits 0; returns the time it did."""
    end = time.time() + limit_s * SLOW
    while time.time() < end:
        r = dq("--redis", URL, "offer", queue, "0", "p", "--id", id_, redis=False, timeout=10)
        if r.rc == 0:
            return time.time()
        time.sleep(0.05)
    return None


g, URL, wpath = sentinel_group()

section("a silent sentinel in the URL (accepts, never answers) does not hold discovery")
silent = socket.socket()
silent.bind(("127.0.0.1", 0))
silent.listen(16)
silent_url = URL.replace("redis-sentinel://", f"redis-sentinel://127.0.0.1:{silent.getsockname()[1]},")
t0 = time.monotonic()
r = dq("--redis", silent_url, "stats", QP, redis=False)
took = time.monotonic() - t0
ok(r.rc in (0, 1), "stats through a URL with a silent sentinel first works (1: QP not used yet)", r)
ok(took < 1.5 * SLOW, "in well under the connect timeout (2 s): the others are a majority", took)
silent.close()

take, work = consumers(URL, QP, QW, wpath)
ok(offer_until_ok(QP, "before-p") and offer_until_ok(QW, "before-w"), "offers before the freeze")
ok(wait_for(lambda: "before-p" in taken(take) and "before-w" in worked(wpath), 10),
   "both consumers deliver before the freeze")
time.sleep(0.5)  # both are idle now, waiting in a blocking take

section(f"the master is frozen (SIGSTOP) for {FREEZE_S} s")
old = g.master_port()
t_stop = time.time()
os.kill(g.procs[old].pid, signal.SIGSTOP)
try:
    promoted = g.wait_new_master(old, timeout=20)
    t_promoted = time.time()
    ok(promoted, "the sentinels promote a replica", g.master_port())
    note(f"promotion seen {t_promoted - t_stop:.2f} s after the freeze")
    t_p = offer_until_ok(QP, "during-p")
    t_w = offer_until_ok(QW, "during-w")
    ok(t_p and t_w, "offers to the promoted replica work")
    note(f"offers made {(t_p or 0) - t_promoted:.2f} / {(t_w or 0) - t_promoted:.2f} s after the promotion")
    ok(wait_for(lambda: "during-p" in taken(take) and "during-w" in worked(wpath),
                FREEZE_S - (time.time() - t_stop) - 2),
       "the running take and work deliver while the old master is still frozen")
    got = taken(take).get("during-p")
    recv_p = got[0][0] if got else None
    recv_w = None
    if "during-w" in worked(wpath):
        recv_w = time.time()  # an upper bound: the file is polled
    for label, recv in (("take", recv_p), ("work", recv_w)):
        if recv:
            note(f"{label}: delivered {recv - t_promoted:.2f} s after the promotion "
                 f"({recv - t_stop:.2f} s after the freeze)")
        ok(recv is not None and recv - t_promoted <= BOUND_S,
           f"{label} delivers within {BOUND_S:.0f} s of the promotion", recv and recv - t_promoted)
    ok(time.time() - t_stop < FREEZE_S, "all of that before the freeze ends")
    left = FREEZE_S - (time.time() - t_stop)
    if left > 0:
        time.sleep(left)
finally:
    os.kill(g.procs[old].pid, signal.SIGCONT)

section("the old master resumes and rejoins as a replica")
ok(wait_for(lambda: (try_call(old, "ROLE") or ["?"])[0] == "slave", 30), "it is a replica now",
   try_call(old, "ROLE"))
ok(offer_until_ok(QP, "after-p") and offer_until_ok(QW, "after-w"), "offers after it resumed work")
ok(wait_for(lambda: "after-p" in taken(take) and "after-w" in worked(wpath), 10),
   "and both consumers deliver them")
got = taken(take)
early = [(k, m) for k, v in got.items() for _, m in v if m["ready_ms"] < m["due_ms"]]
ok(not early, "none delivered before its due time", early[:3])
wrap_up(g, take, work)
