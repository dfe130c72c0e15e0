"""ha_tls.py - the TLS topologies of issue 37, every server TLS-only (port 0,
tls-port) with a CA this file makes (tests/lib/tlsca.py); the CLI trusts it
through $DELAYQ_TLS_CA.

1. rediss-cluster:// on a 3-master cluster with tls-cluster yes: a queue
   of 6 shards, spread over the masters; 300 items offered in one batch,
   each taken once, and the cluster's TLS nodes are what the topology hands
   out (a plain redis-cluster:// URL cannot reach them: exit 3).
2. rediss-sentinel:// on a Sentinel group (1 master, 2 replicas, 3 TLS
   sentinels, tls-replication yes): producers offer with --wait-replicas 1
   and a consumer takes while the master is SIGKILLed; every offer
   confirmed durable is delivered, none early, and the consumer follows the
   promoted replica by itself.
3. ?sentinel_tls=no: the same data nodes behind sentinels that speak plain
   TCP: an offer and a take work; without it (TLS to the plain sentinels)
   exit 3.
"""
# tier: slow (about 19 s): make test runs it, make test-fast does not
import json
import os
import sys

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import BIN, Bg, dq, finish, ok, section, wait_for  # noqa: E402
from hatraffic import Producer, check_delivered, kill_master_under_load  # noqa: E402
from tlsca import TestCA  # noqa: E402
from topology import Cluster, SentinelGroup, call  # noqa: E402

ca = TestCA()
crt, key = ca.issue("node", ["IP:127.0.0.1", "DNS:localhost"])
FILES = (crt, key, ca.ca)
os.environ["DELAYQ_TLS_CA"] = ca.ca  # every delayq this test starts


def run(url, *args, **kw):
    return dq("--redis", url, *args, redis=False, **kw)


def cluster_part():
    section("1. rediss-cluster://: 3 masters, tls-cluster yes, a queue of 6 shards")
    c = Cluster(replicas_per_master=0, tls=FILES)
    url = c.url(2).replace("redis-cluster://", "rediss-cluster://")
    r = run(url, "config", "sq", "--shards", "6", "--json")
    ok(r.rc == 0 and json.loads(r.out or b"{}").get("shards") == 6, "config --shards 6 over TLS", r)
    lines = "".join(f"0\ts{i}\tp{i}\n" for i in range(300)).encode()
    r = run(url, "offer", "sq", "--batch", "-", stdin=lines)
    ok(r.rc == 0, "300 offers in one batch", r)
    sizes = {p: call(p, "DBSIZE") for p in c.master_ports()}
    ok(all(n > 0 for n in sizes.values()), "the shards are on every master", sizes)
    r = run(url, "take", "sq", "--count", "300", "--json", "--timeout", "20s", timeout=40)
    ids = [json.loads(l)["id"] for l in r.out.splitlines() if l.strip()]
    ok(r.rc == 0 and sorted(ids) == sorted(f"s{i}" for i in range(300)), "each of the 300 taken once",
       (r.rc, len(ids), len(set(ids))))
    r = run(url.replace("rediss-cluster://", "redis-cluster://"), "stats", "sq")
    ok(r.rc == 3, "a plain redis-cluster:// URL on the TLS nodes: exit 3", r)
    c.stop()


def sentinel_part():
    section("2. rediss-sentinel://: TLS sentinels and replication, master SIGKILLed under load")
    g = SentinelGroup(tls=FILES)
    if not ok(g.ready(), "replicas linked and sentinels agree, over TLS"):
        return
    url = g.url().replace("redis-sentinel://", "rediss-sentinel://")
    take = Bg([BIN, "--redis", url, "take", "tq", "--count", "0", "--json"], name="take")
    prod = Producer(url, "t", ["tq"])
    prod.start()
    ok(wait_for(lambda: sum(1 for r in prod.results if r[2] == 0) >= 15 and take.count() >= 5, 20),
       "offers confirmed and delivered before the failover")
    kill_master_under_load(g, prod)
    prod.stop()
    ok(take.running(), "the consumer still runs (not restarted)")
    check_delivered(prod, take, "tq", os.path.join(g.dir, "none"), "TLS kill")
    take.stop()
    g.stop()


def plain_sentinels_part():
    section("3. ?sentinel_tls=no: TLS data nodes, plain sentinels")
    g = SentinelGroup(n_replicas=1, n_sentinels=1, tls=FILES, tls_sentinels=False)
    ok(wait_for(lambda: g.master_port() is not None, 10), "the sentinel knows the master")
    url = g.url().replace("redis-sentinel://", "rediss-sentinel://").replace("#", "?sentinel_tls=no#")
    r = run(url, "offer", "pq", "0", "plain-sentinel")
    ok(r.rc == 0, "offer through a plain sentinel to a TLS master", r)
    r = run(url, "take", "pq", "--timeout", "5s")
    ok(r.rc == 0 and r.out == b"plain-sentinel\n", "take gets it", r)
    r = run(url.replace("?sentinel_tls=no", ""), "stats", "pq")
    ok(r.rc == 3, "without sentinel_tls=no (TLS to a plain sentinel): exit 3", r)
    g.stop()


cluster_part()
sentinel_part()
plain_sentinels_part()
finish()
