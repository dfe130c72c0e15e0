"""ha_demote.py - a single-node URL whose node is demoted under load and made
master again: what a managed service's primary endpoint (a DNS name) does
in a failover, where the client sees READONLY from the node it reached.

A master and one replica. Producers offer through redis://<master> the
whole time; a `take --json` and a `work --exec` consume. The master is
demoted (REPLICAOF a port where nothing listens: it keeps its data, refuses
writes with READONLY) for 5 s, then made master again (REPLICAOF NO ONE).
Each client makes its connections again on READONLY (resolving the name
again) and retries the refused command for up to ~14 s: every offer started
during the demotion exits 0 once the node is master again (before the fix,
each failed after ~3 s of retries), producers and consumers carry on,
neither consumer is restarted, and every offer that exited 0 is delivered,
none early. A `take --timeout 2s` during the demotion exits 3 with the
READONLY error (before, 1: "nothing arrived").
"""
# tier: slow (about 12 s): make test runs it, make test-fast does not
import os
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import BIN, Bg, finish, note, ok, section, wait_for  # noqa: E402
from hatraffic import Producer, check_delivered, consumers  # noqa: E402
from topology import SentinelGroup, call, free_port, try_call  # noqa: E402

QP, QW = "dmp", "dmw"  # plain takes, worker
DEMOTED_S = 5


def role(port):
    return (try_call(port, "ROLE") or ["?"])[0]


def main():
    section("a master and a replica, clients on a single-node URL")
    g = SentinelGroup(n_replicas=1, n_sentinels=0)
    m, rep = g.data_ports
    ok(wait_for(lambda: role(rep) == "slave" and
                "master_link_status:up" in (try_call(rep, "INFO", "replication") or ""), 20),
       "replica linked")
    url = f"redis://127.0.0.1:{m}"
    wpath = os.path.join(g.dir, "worked.txt")
    take, work = consumers(url, QP, QW, wpath)
    prods = [Producer(url, f"d{i}-", [QP, QW], wait="0") for i in range(3)]
    for p in prods:
        p.start()
    ok(wait_for(lambda: sum(1 for p in prods for r in p.results if r[2] == 0) >= 20 and take.count() >= 5, 20),
       "offers confirmed and delivered before the demotion")

    section(f"the node demoted for {DEMOTED_S} s (READONLY), then master again")
    nowhere = free_port()
    t_down = time.time()
    call(m, "REPLICAOF", "127.0.0.1", str(nowhere))
    ok(role(m) == "slave", "the node is a replica", role(m))
    # A take whose timeout ends while the node still refuses says so: an
    # outage is not an empty queue (exit 1).
    t_take = time.time()
    took = Bg([BIN, "--redis", url, "take", "dmx", "--timeout", "2s"], name="take dmx --timeout 2s")
    time.sleep(max(0.0, DEMOTED_S - (time.time() - t_down)))
    t_up = time.time()
    call(m, "REPLICAOF", "NO", "ONE")
    rc = took.wait(10)
    last = took.err.splitlines()[-1:] or [b""]
    ok(rc == 3 and b"READONLY" in last[0], "take --timeout 2s meanwhile: exit 3 with the READONLY", (rc, last))
    note(f"that take exited {time.time() - t_take:.1f} s after it started (its timeout 2 s; its client's "
         "last writes waited for the master)")
    ok(role(m) == "master", "the node is a master again", role(m))
    note(f"demoted {t_up - t_down:.2f} s")

    def ten_after():
        return sum(1 for p in prods for r in list(p.results) if r[3] > t_up + 0.5 and r[2] == 0) >= 10
    ok(wait_for(ten_after, 30), "offers after the demotion exit 0")
    for p in prods:
        p.stop()
    during = [r for p in prods for r in p.results if t_down - 0.5 < r[3] < t_up]
    note("offers started during the demotion: exit codes "
         + str({c: sum(1 for r in during if r[2] == c) for c in sorted({r[2] for r in during})}))
    ok(len(during) >= 3 and all(r[2] == 0 for r in during),
       "every offer started during the demotion waited for a master and exited 0",
       [(r[0], r[2]) for r in during if r[2] != 0][:10])
    ok(take.running() and work.running(), "consumers still running (not restarted)")
    for i, p in enumerate(prods):
        check_delivered(p, take, QP, wpath, f"demote, producer {i}")
    for p in (take, work):
        p.stop()
    logs = take.err.decode(errors="replace") + work.err.decode(errors="replace")
    ok("answered READONLY" in logs, "a consumer made its connections again on READONLY",
       " | ".join(logs.splitlines()[:6]))
    g.stop()
    finish()


if __name__ == "__main__":
    main()
