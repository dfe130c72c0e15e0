"""ha_shards.py - one queue spread over a Redis Cluster (3 masters, 3
replicas, cluster-node-timeout 1000) as 12 shards, through the cluster URL.

  - the shards' slots, and the items, fall on every master in a fair share
    (measured on the nodes: each master's shards and their counts);
  - 30,000 items offered (due in 1-6 s), 100 of them cancelled by id: two
    `take --count 0` consumers get every other id exactly once, none early;
    stats add up to nothing left;
  - the HA cases on the sharded queue: a master SIGKILLed under load, a
    shard's slot moved to another master, and a graceful CLUSTER FAILOVER:
    every offer confirmed durable is delivered, none early, and the
    consumers follow by themselves.
"""
# tier: slow (about 29 s): make test runs it, make test-fast does not
import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import BIN, Bg, dq, eq, finish, note, ok, section, wait_for  # noqa: E402
from hatraffic import Producer, check_delivered, taken  # noqa: E402
from topology import Cluster, call, try_call  # noqa: E402

BUILD = os.environ.get("DQ_BUILD_DIR", "build")
Q = "orders"
N = 12
ITEMS = 30000


def shard_names(queue, n):
    r = subprocess.run([os.path.join(BUILD, "tests", "tools", "shardnames"), queue, str(n)],
                       capture_output=True, timeout=10)
    return r.stdout.decode().split()


def held(port, name):
    """pending + ready + in flight of one shard, read on its master."""
    p = try_call(port, "HGET", f"dq:{{{name}}}:n", "pending")
    f = try_call(port, "HGET", f"dq:{{{name}}}:n", "inflight")
    r = try_call(port, "LLEN", f"dq:{{{name}}}:r")
    return int(p or 0) + int(f or 0) + int(r or 0)


def main():
    section("a cluster: 3 masters, 3 replicas; a queue of 12 shards")
    c = Cluster()
    url = c.url(3)
    masters = c.master_ports()
    ok(len(masters) == 3, "3 masters", masters)

    def cli(*args, **kw):
        return dq("--redis", url, *args, redis=False, **kw)

    r = cli("config", Q, "--shards", N, "--json")
    ok(r.rc == 0 and json.loads(r.out).get("shards") == N, "config --shards 12 through the cluster URL", r)
    names = shard_names(Q, N)
    owner = {x: c.owner(c.slot_of(f"dq:{{{x}}}:n")) for x in names}
    per = {m: sum(1 for x in names if owner[x] == m) for m in masters}
    note(f"shards per master: {per}")
    eq(sorted(per.values()), [4, 4, 4], "4 shards on each master")
    counts = [try_call(owner[x], "HGET", f"dq:{{{x}}}:n", "shards") for x in names]
    ok(all(str(v if not isinstance(v, bytes) else v.decode()) == str(N) for v in counts),
       "every shard holds the count, on its own master", counts)

    section("30,000 items through the cluster URL, 100 cancelled by id")
    rng = random.Random(13)
    lines = "".join(f"{rng.randint(1000, 6000)}ms\tk{i}\tp{i}\n" for i in range(ITEMS)).encode()
    t0 = time.time()
    r = cli("offer", Q, "--batch", "-", stdin=lines, timeout=120)
    eq((r.rc, r.out), (0, b"%d\n" % ITEMS), f"offered in {time.time() - t0:.1f} s")
    on = {m: sum(held(m, x) for x in names if owner[x] == m) for m in masters}
    total = sum(on.values())
    note(f"items per master right after the offers: {on}")
    ok(total == ITEMS and all(0.28 * ITEMS <= v <= 0.39 * ITEMS for v in on.values()),
       "each master holds a fair share (28-39 % of the items)", on)
    cancelled = [f"k{i}" for i in rng.sample(range(ITEMS), 100)]
    rcs = [cli("cancel", Q, x).rc for x in cancelled]
    ok(all(x in (0, 1) for x in rcs) and rcs.count(0) >= 90, f"cancels by id: {rcs.count(0)} of 100 still pending",
       rcs)
    really = {x for x, rc in zip(cancelled, rcs) if rc == 0}

    section("two consumers drain every shard")
    takes = [Bg([BIN, "--redis", url, "take", Q, "--count", "0", "--json"], name=f"take{i}") for i in range(2)]

    def got():
        out = {}
        for t in takes:
            for k, v in taken(t).items():
                out.setdefault(k, []).extend(v)
        return out

    want = ITEMS - len(really)
    ok(wait_for(lambda: len(got()) >= want, 90), f"{want} delivered", len(got()))
    time.sleep(0.5)
    g = got()
    eq(sorted(g), sorted(f"k{i}" for i in range(ITEMS) if f"k{i}" not in really),
       "every id but the cancelled ones")
    twice = [k for k, v in g.items() if len(v) > 1]
    eq(twice, [], "each exactly once")
    early = [m for v in g.values() for _, m in v if m["ready_ms"] < m["due_ms"]]
    eq(early, [], "none before its due time (server clock)")
    lat = sorted(m["ready_ms"] - m["due_ms"] for v in g.values() for _, m in v)
    note(f"ready - due over {len(lat)}: p50 {lat[len(lat) // 2]} ms, p99 {lat[len(lat) * 99 // 100]} ms, "
         f"max {lat[-1]} ms")
    # Order across shards, as one consumer saw it: the largest amount by
    # which an item's due time was earlier than one received before it.
    for t in takes:
        seq = sorted((recv, m["due_ms"]) for v in taken(t).values() for recv, m in v)
        worst, top = 0, -1
        for _, due in seq:
            top = max(top, due)
            worst = max(worst, top - due)
        note(f"{t.name}: largest inversion of due order across shards: {worst} ms over {len(seq)} items")
    both = [sum(1 for k in taken(t)) for t in takes]
    note(f"per consumer: {both}")
    r = cli("stats", Q, "--json")
    st = json.loads(r.out) if r.rc == 0 else {}
    eq((st.get("pending"), st.get("ready"), st.get("inflight"), st.get("dead")), (0, 0, 0, 0),
       "stats over the 12 shards: nothing left")
    takes[1].stop()
    take = takes[0]

    section("a master SIGKILLed under load")
    prod = Producer(url, "f", [Q])
    prod.start()
    ok(wait_for(lambda: len(prod.confirmed()) >= 20 and sum(1 for k in taken(take) if k[0] == "f") >= 5, 30),
       "traffic before the kill")
    slot0 = c.slot_of(f"dq:{{{names[0]}}}:n")
    old = c.owner(slot0)
    c.kill(old)
    note(f"master {old} (serving shards {[x for x in names if owner[x] == old]}) SIGKILLed")
    ok(c.wait_owner_change(slot0, old), "a replica takes over", c.owner(slot0))
    t_over = time.time()
    ok(wait_for(lambda: any(r[2] in (0, 4) and r[3] > t_over for r in prod.results), 20),
       "offers work after the failover (exit 0 or 4)")
    ok(c.restart(old), "the old master restarts")
    ok(wait_for(lambda: (try_call(old, "ROLE") or ["?"])[0] == "slave" and c.replicas_up(), 30),
       "and rejoins as a replica")
    t_back = time.time()
    ok(wait_for(lambda: sum(1 for r in prod.confirmed() if r[3] > t_back) >= 5, 30),
       "offers are confirmed durable again")
    prod.stop()
    ok(take.running(), "the consumer is still running (not restarted)")
    check_delivered(prod, take, Q, os.path.join(c.dir, "none"), "kill")

    section("a shard's slot moves to another master while traffic runs")
    prod2 = Producer(url, "m", [Q])
    prod2.start()
    wait_for(lambda: len(prod2.confirmed()) >= 10, 20)
    slot3 = c.slot_of(f"dq:{{{names[3]}}}:n")
    src = c.owner(slot3)
    dst = [m for m in c.master_ports() if m != src][0]
    c.migrate_slot(slot3, src, dst, between=lambda: time.sleep(0.2), batch=3)
    ok(c.owner(slot3) == dst, f"shard {names[3]}'s slot {slot3} now on {dst}")
    t_moved = time.time()
    wait_for(lambda: sum(1 for r in prod2.results if r[3] > t_moved) >= 10, 20)
    prod2.stop()
    check_delivered(prod2, take, Q, os.path.join(c.dir, "none"), "move")

    section("graceful failover (CLUSTER FAILOVER) of a shard's master")
    slot5 = c.slot_of(f"dq:{{{names[5]}}}:n")
    rep = [p for p in c.alive() if (try_call(p, "ROLE") or ["?"])[0] == "slave" and
           (try_call(p, "ROLE") or [None, None, 0])[2] == c.owner(slot5)]
    if ok(rep, "a replica of that master"):
        ok(call(rep[0], "CLUSTER", "FAILOVER") == "OK", "CLUSTER FAILOVER accepted")
        ok(wait_for(lambda: c.owner(slot5) == rep[0], 20), "the replica serves the slot now")
        ids = [f"g{i}" for i in range(24)]
        for x in ids:
            r = cli("offer", Q, "0", "x", "--id", x)
            if r.rc:
                ok(False, f"offer {x}", r)
        ok(wait_for(lambda: all(x in taken(take) for x in ids), 15),
           "24 offers after it (on every shard) reach the running consumer")
    ok(take.running(), "the consumer is still running")
    take.stop()
    c.stop()
    finish()


main()
