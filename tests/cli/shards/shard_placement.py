"""shard_placement.py - a sharded queue's shards spread evenly over the
masters of a real cluster (groundwork for issue 13: nothing offers into
shards yet, so this checks where their keys would live).

Builds a 3-master cluster with redis-cli --cluster create (no replicas:
placement is all that is looked at; redis-cli makes no fewer than 3 masters,
so 2 masters are left to test_shard.c's arithmetic), takes the shard names from
BUILD/tests/tools/shardnames (dq__shard_name as a command), and asks the
cluster itself: CLUSTER KEYSLOT of each shard's ready-list key, and which
master serves that slot (CLUSTER SLOTS). For 20 queue names:
  - every shard in its own slot;
  - 12 shards on 3 masters: 4 on each;
  - 16 shards on 3 masters (not a multiple): 5 or 6 on each;
  - one shard is the queue itself (today's keys)."""
import os
import subprocess
import sys

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403
import topology  # noqa: E402

TOOL = os.path.join(os.environ.get("DQ_BUILD_DIR", "build"), "tests", "tools", "shardnames")
QUEUES = [f"orders-{i}" for i in range(18)] + ["a", "claims.eu-1:retry_2"]


def shard_names(queue, n):
    r = subprocess.run([TOOL, queue, str(n)], capture_output=True, timeout=10)
    if r.returncode != 0:
        return None
    return r.stdout.decode().split()


def shares(cluster, queue, n):
    """{master port: shards it serves}, and how many distinct slots."""
    names = shard_names(queue, n) or []
    table = cluster.slots()
    per, seen = {p: 0 for p in cluster.master_ports()}, set()
    for name in names:
        slot = cluster.slot_of(f"dq:{{{name}}}:r")
        seen.add(slot)
        for lo, hi, master, *rest in table:
            if lo <= slot <= hi:
                per[int(master[1])] += 1
    return per, len(seen), len(names)


section("the shard names")
eq(shard_names("orders", 1), ["orders"], "one shard: the queue itself")
names = shard_names("orders", 12) or []
ok(len(names) == 12 and all(x.startswith("orders~") for x in names), "12 shards: orders~TAG each", names)
r = subprocess.run([TOOL, "orders", "65"], capture_output=True, timeout=10)
ok(r.returncode == 2 and b"1..64" in r.stderr, "65 shards refused", r)

section("3 masters")
with topology.Cluster(masters=3, replicas_per_master=0) as c3:
    eq(len(c3.master_ports()), 3, "3 masters serve the slots")
    split = []
    for q in QUEUES:
        per, slots, n = shares(c3, q, 12)
        split.append(sorted(per.values()))
        ok(n == 12 and slots == 12, f"{q}: 12 shards in 12 slots", (n, slots))
    eq(split, [[4, 4, 4]] * len(QUEUES), "12 shards: 4 on each master, for all 20 queue names")
    split16 = [sorted(shares(c3, q, 16)[0].values()) for q in QUEUES]
    ok(all(s in ([5, 5, 6], [5, 6, 5], [6, 5, 5]) for s in split16) and
       all(sum(s) == 16 for s in split16), "16 shards: 5 or 6 on each master", split16)

finish()
