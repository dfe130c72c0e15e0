"""ha_sentinel_reconf.py - a client that meets a Sentinel failover in its
reconf_slaves phase connects to the promoted replica at once, instead of
waiting for the other replicas to resync.

A sentinel running a failover flags the master failover_in_progress until
every replica follows the promoted one (or the failover timeout passes).
Until the promotion, the address it gives may be the old master, so delayq
waits; from reconf_slaves on, it gives the promoted replica, which already
reports itself master, and the other sentinels name it too. This test holds
a failover in reconf_slaves on purpose: replica B (priority 0, never
promoted) is paused with CLIENT PAUSE, so the sentinel cannot reconfigure
it, and down-after is long enough that B is not judged down meanwhile. The
URL names the leading sentinel first. An offer must then succeed well
within the connect timeout (2 s), and be delivered to a consumer started
during the same phase.
"""
# tier: slow (about 29 s): make test runs it, make test-fast does not
import os
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import BIN, Bg, dq, finish, note, ok, section, wait_for  # noqa: E402
from hatraffic import taken  # noqa: E402
from topology import SentinelGroup, call, try_call  # noqa: E402

Q = "hsr"
PAUSE_MS = 8000


def master_info(g, sentinel):
    m = try_call(sentinel, "SENTINEL", "MASTER", g.NAME) or []
    return dict(zip(m[::2], m[1::2]))


def replica_priority(g, sentinel, port):
    for rep in try_call(sentinel, "SENTINEL", "REPLICAS", g.NAME) or []:
        f = dict(zip(rep[::2], rep[1::2]))
        if f.get("port") == str(port):
            return f.get("slave-priority")
    return None


def main():
    section("a Sentinel group, down-after 30 s (a paused replica is not judged down)")
    g = SentinelGroup(down_after_ms=30000)
    if not ok(g.ready(), "replicas linked and sentinels agree"):
        finish()
    leader = g.sentinel_ports[0]
    old = g.master_port()
    a, b = [p for p in g.data_ports if p != old]
    call(b, "CONFIG", "SET", "replica-priority", "0")
    # Sentinels read a replica's priority from its INFO, every 10 s.
    ok(wait_for(lambda: all(replica_priority(g, s, b) == "0" for s in g.sentinel_ports), 25),
       "every sentinel sees replica B's priority 0 (never promoted)")
    # The URL names the sentinel that will lead the failover first: a client
    # asks it before the others.
    url = "redis-sentinel://" + ",".join(f"127.0.0.1:{p}" for p in g.sentinel_ports) + f"#{g.NAME}"
    r = dq("--redis", url, "offer", Q, "0", "before", "--id", "before", redis=False)
    ok(r.rc == 0, "an offer before the failover works", r)

    section("a failover held in reconf_slaves: replica B paused")
    call(b, "CLIENT", "PAUSE", str(PAUSE_MS), "ALL")
    t_pause = time.monotonic()
    ok(call(leader, "SENTINEL", "FAILOVER", g.NAME) == "OK", "SENTINEL FAILOVER accepted")
    in_reconf = wait_for(lambda: master_info(g, leader).get("failover-state") == "reconf_slaves", 8)
    info = master_info(g, leader)
    ok(in_reconf and "failover_in_progress" in info.get("flags", ""),
       "the leading sentinel is in reconf_slaves, failover in progress", info)
    addr = try_call(leader, "SENTINEL", "get-master-addr-by-name", g.NAME)
    ok(addr and addr[1] == str(a) and (try_call(a, "ROLE") or ["?"])[0] == "master",
       "it names replica A, promoted, as the master", (addr, try_call(a, "ROLE")))
    still = lambda: master_info(g, leader).get("failover-state") == "reconf_slaves"  # noqa: E731

    r = dq("--redis", url, "offer", Q, "0", "during", "--id", "during", redis=False)
    in_phase = still()
    ok(r.rc == 0, "an offer during reconf_slaves works", r)
    ok(r.secs < 1.5, f"without waiting out the failover ({r.secs:.2f} s)", r)
    ok(in_phase, "the failover was still in reconf_slaves when it returned")
    take = Bg([BIN, "--redis", url, "take", Q, "--count", "0", "--json"], name="take")
    ok(wait_for(lambda: {"before", "during"} <= set(taken(take)), 5), "a consumer started now gets both",
       sorted(taken(take)))
    ok(still() or time.monotonic() - t_pause < PAUSE_MS / 1000,
       "delivered while replica B was still paused")
    r = dq("--redis", url, "stats", Q, redis=False)
    ok(r.rc == 0, "stats during the failover works", r)

    section("the failover ends; everything still works")
    # CLIENT UNPAUSE would wait behind the pause itself: it runs out.
    ok(wait_for(lambda: try_call(b, "PING", timeout=1) == "PONG", PAUSE_MS / 1000 + 5), "replica B answers again")
    ok(wait_for(lambda: not master_info(g, leader).get("failover-state") or
                master_info(g, leader).get("port") == str(a), 20),
       "the leading sentinel ends the failover and names replica A", master_info(g, leader))
    r = dq("--redis", url, "offer", Q, "0", "after", "--id", "after", redis=False)
    ok(r.rc == 0, "an offer after the failover works", r)
    ok(wait_for(lambda: "after" in taken(take), 10), "and is delivered")
    ok(all(len(v) == 1 for v in taken(take).values()), "each delivered once", taken(take))
    note(f"old master {old}, promoted {a}, paused replica {b}")
    take.stop()
    g.stop()
    finish()


main()
