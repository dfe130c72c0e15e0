"""ha_cluster.py - delayq on a Redis Cluster (3 masters, 3 replicas,
cluster-node-timeout 1000): queues on different masters, a SIGKILLed master
under load, then a live queue's slot moved to another master while
producers, schedulers and consumers run.

Checks: every offer confirmed durable (--wait-replicas 1, exit 0) is
delivered, none before its due time; the clients follow the promoted replica
and the moved slot by themselves (no restarts); wake-ups follow the move, so
items due after it are not left for the safety re-check (5 s).
"""
# tier: slow (about 20 s): make test runs it, make test-fast does not
import os
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import BIN, Bg, dq, finish, note, ok, section, wait_for  # noqa: E402
from hatraffic import Producer, check_delivered, taken, worked  # noqa: E402
from topology import Cluster, call, try_call  # noqa: E402


def main():
    section("a cluster: 3 masters, 3 replicas, cluster-node-timeout 1000")
    c = Cluster()
    masters = c.master_ports()
    ok(len(masters) == 3, "3 masters", masters)
    qa, qb = c.queue_on(masters[0], "qa"), c.queue_on(masters[1], "qb")
    sa, sb = c.slot_of(qa), c.slot_of(qb)
    note(f"queue {qa} (slot {sa}) on {masters[0]}, {qb} (slot {sb}) on {masters[1]}")
    url = c.url(3)
    wpath = os.path.join(c.dir, "worked.txt")

    section("bad and unreachable cluster URLs")
    r = dq("--redis", "redis-cluster://127.0.0.1:99999", "stats", qa, redis=False)
    ok(r.rc == 2 and r.errtext.count("\n") == 1, "a bad port: exit 2, one line", r)
    r = dq("--redis", "redis-cluster://127.0.0.1:1,127.0.0.1:2", "stats", qa, redis=False)
    ok(r.rc == 3, "no node reachable: exit 3", r)

    section("each queue lives on its own master")
    for q, m in ((qa, masters[0]), (qb, masters[1])):
        r = dq("--redis", url, "offer", q, "1h", "x", "--id", "probe", redis=False)
        ok(r.rc == 0, f"offer to {q} through the cluster URL", r)
        ok(try_call(m, "EXISTS", f"dq:{{{q}}}:n") == 1, f"{q}'s keys are on {m}")
        dq("--redis", url, "cancel", q, "probe", redis=False)

    section("a master SIGKILLed under load")
    work = Bg([BIN, "--redis", url, "work", qa, "--concurrency", "4", "--exec",
               f"printf '%s\\n' \"$DELAYQ_ID\" >> {wpath}"], name="work")
    take = Bg([BIN, "--redis", url, "take", qb, "--count", "0", "--json"], name="take")
    prod = Producer(url, "k", [qa, qb])
    prod.start()
    ok(wait_for(lambda: len(prod.confirmed()) >= 20 and take.count() >= 5, 20), "traffic before the kill")
    old = c.owner(sa)
    t_kill = time.time()
    c.kill(old)
    note(f"master {old} (serving {qa}) SIGKILLed")
    ok(c.wait_owner_change(sa, old), "a replica takes over the slot", c.owner(sa))
    t_over = time.time()
    note(f"slot {sa} served by {c.owner(sa)} after {t_over - t_kill:.2f} s")
    # The promoted replica has no replica of its own: its offers are made
    # but not confirmed (exit 4) until the old master rejoins as its replica.
    ok(wait_for(lambda: any(r[1] == qa and r[2] in (0, 4) and r[3] > t_over for r in prod.results), 20),
       f"offers to {qa} work after the failover (exit 0 or 4)")
    ok(c.restart(old), "the old master restarts")
    ok(wait_for(lambda: (try_call(old, "ROLE") or ["?"])[0] == "slave" and c.replicas_up(), 30),
       "and rejoins as a replica")
    t_back = time.time()
    ok(wait_for(lambda: sum(1 for r in prod.confirmed(qa) if r[3] > t_back) >= 5, 30),
       f"offers to {qa} are confirmed durable again")
    prod.stop()
    ok(work.running() and take.running(), "consumers still running (not restarted)")
    check_delivered(prod, take, qb, wpath, "kill")

    section(f"slot {sb} of {qb} moves to another master while traffic runs")
    prod2 = Producer(url, "m", [qb, qa])
    prod2.start()
    wait_for(lambda: len(prod2.confirmed()) >= 10, 20)
    src = c.owner(sb)
    dst = [m for m in c.master_ports() if m != src][0]
    c.migrate_slot(sb, src, dst, between=lambda: time.sleep(0.2), batch=3)
    ok(c.owner(sb) == dst, f"slot {sb} now on {dst}")
    t_moved = time.time()
    wait_for(lambda: sum(1 for r in prod2.results if r[3] > t_moved) >= 10, 20)
    prod2.stop()
    check_delivered(prod2, take, qb, wpath, "move")
    ok(try_call(dst, "EXISTS", f"dq:{{{qb}}}:n") == 1, f"{qb}'s keys are on {dst} now")

    section("wake-ups follow the move: items due after it are on time")
    ids = [f"late{i}" for i in range(10)]
    for id_ in ids:
        r = dq("--redis", url, "offer", qb, "1s", "x", "--id", id_, redis=False)
        if r.rc:
            ok(False, f"offer {id_}", r)
    ok(wait_for(lambda: all(i in taken(take) for i in ids), 15), "all delivered")
    lat = [e["ready_ms"] - e["due_ms"] for i in ids for _, e in taken(take).get(i, [])]
    note(f"lateness after the move (ready - due, server clock): max {max(lat) if lat else None} ms")
    ok(lat and max(lat) < 1000, "each within 1 s of its due time (the safety re-check is 2.5-5 s)", lat)

    section("graceful failover (CLUSTER FAILOVER on a replica)")
    rep = [p for p in c.alive() if (try_call(p, "ROLE") or ["?"])[0] == "slave" and
           (try_call(p, "ROLE") or [None, None, 0])[2] == c.owner(sb)]
    if ok(rep, f"a replica of {qb}'s master"):
        was = c.owner(sb)
        ok(call(rep[0], "CLUSTER", "FAILOVER") == "OK", "CLUSTER FAILOVER accepted")
        ok(wait_for(lambda: c.owner(sb) == rep[0], 20), "the replica serves the slot now")
        r = dq("--redis", url, "offer", qb, "0", "x", "--id", "after-failover", redis=False)
        ok(r.rc == 0, "an offer after it works", r)
        ok(wait_for(lambda: "after-failover" in taken(take), 10), "and the running consumer gets it")
        note(f"old master {was} is now a {(try_call(was, 'ROLE') or ['?'])[0]}")
    ok(work.running() and take.running(), "consumers still running")
    for p in (take, work):
        p.stop()
    c.stop()
    finish()


main()
