"""lease_registry.py - a take with a lease leaves its ids' index entries as
they were and names its lease record in the lease registry (dq:{Q}:l, see
lua/lib/70_registry.lua). Checked through the CLI, with Redis
read directly: lookup and offer still find an id in flight; nack and extend
find it by its token; the record leaves the registry when its last item
goes (acks one by one, nack, extend, a worker's ack of a whole take) or
when its lease runs out and a scheduler returns it; a catch-up run drops
members whose lease has ended; a member that is no score, or names no
record, is skipped; a registry of another type makes lookup fail with a
clear error and is renamed away by the next take, which loses nothing."""
import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403
from workers import *  # noqa: E402,F403

R = Redis(timeout=30)


def keys(q):
    return f"dq:{{{q}}}:l", f"dq:{{{q}}}:"


def members(q):
    return [m.decode() for m in R.cmd("ZRANGE", keys(q)[0], "0", "-1")]


def registry(q):
    """The scores of the records the registry names (member: score|ids)."""
    return [m.split("|", 1)[0] for m in members(q)]


def index_scores(q, ids):
    return {i: R.cmd("HGET", id_index_key(q, i), i) for i in ids}


def lookup(q, id_):
    r = dq("lookup", q, id_, "--json")
    try:
        return r.rc, json.loads(r.out) if r.out else {}
    except ValueError:
        return r.rc, {}


def offer_all(q, ids):
    for i in ids:
        eq(dq("offer", q, "0", f"payload of {i}", "--id", i).rc, 0, f"offer {i}")


def settle(cmd, q, m, *opts, rest=()):
    return dq(cmd, *opts, "--", q, m["id"], m["token"], *rest)


section("a take with a lease: the index as it was, the record in the registry")
Q = "lreg"
ids = ["a1", "a2", "a3"]
offer_all(Q, ids)
before = index_scores(Q, ids)
ok(all(v is not None for v in before.values()), "the three ids are indexed while ready", before)
r, msgs = take_manual(Q, "--count", "3", "--batch", "64", "--lease", "30s", "--timeout", "5s")
eq(sorted(m.get("id") for m in msgs), ids, "one take leases a1..a3")
by = {m["id"]: m for m in msgs}
eq(index_scores(Q, ids), before, "the take left their index entries as they were")
score = by["a1"]["token"].rsplit(".", 1)[1]
eq(registry(Q), [score], "the registry names one record: the score the tokens name")
eq(members(Q), [score + "|" + " ".join(m["id"] for m in msgs)], "its member: the score, '|', the record's ids")
eq(R.cmd("ZSCORE", keys(Q)[0], members(Q)[0] if members(Q) else "x"), score.encode(), "its score: the record's")
rc, info = lookup(Q, "a2")
eq((rc, info.get("state"), info.get("lease_end_ms"), info.get("attempts")),
   (0, "inflight", int(score) // 2048, 1), "lookup a2: in flight, the lease's end, attempt 1")
r = dq("offer", Q, "0", "again", "--id", "a2")
ok(r.rc == 0 and b"already in flight, kept" in r.err, "offer of a2 again: kept, in flight", r)

section("the record leaves the registry when its last item goes")
eq(settle("ack", Q, by["a1"]).rc, 0, "ack a1")
eq(registry(Q), [score], "two items left: still in the registry")
eq(settle("nack", Q, by["a2"], "--delay", "1h").rc, 0, "nack a2 (found by its token)")
eq(lookup(Q, "a2")[1].get("state"), "pending", "a2 pending again")
eq(registry(Q), [score], "one item left: still in the registry")
eq(settle("extend", Q, by["a3"], rest=("1m",)).rc, 0, "extend a3 (found by its token)")
eq(registry(Q), [], "a3 moved to a record of its own: the take's record left the registry")
rc, info = lookup(Q, "a3")
eq((rc, info.get("state")), (0, "inflight"), "lookup a3: in flight, through the index")
eq(settle("ack", Q, by["a3"]).rc, 0, "ack a3 with its token")
eq(lookup(Q, "a3")[0], 1, "a3 is gone: lookup exits 1")
eq(settle("ack", Q, by["a1"]).rc, 1, "a1 acked again: stale, exit 1")

section("a worker's ack of a whole take")
Q = "lregw"
offer_all(Q, [f"w{i}" for i in range(20)])
w = work(Q, "true", "--concurrency", "8")
ok(wait_for(lambda: drained(Q), 20), "delayq work drains 20 items")
w.stop()
eq(registry(Q), [], "every record left the registry")
eq(sum(R.cmd("HLEN", k) for k in R.cmd("KEYS", f"dq:{{{Q}}}:i:*")), 0, "and the index holds no id")

section("a lease that runs out: the scheduler returns the items and drops the record")
Q = "lrege"
offer_all(Q, ["e1", "e2"])
r, msgs = take_manual(Q, "--count", "2", "--batch", "64", "--lease", "300ms", "--no-scheduler", "--timeout", "5s")
eq(len(msgs), 2, "take e1, e2 with a 300 ms lease, no scheduler")
eq(len(registry(Q)), 1, "their record is in the registry")
ok(wait_for(lambda: server_ms() > int(msgs[0]["token"].rsplit(".", 1)[1]) // 2048 + 20, 3), "the lease ran out")
eq(lookup(Q, "e1")[1].get("state"), "inflight", "lookup e1 once the lease ended: in flight until a scheduler returns it")
r, again = take_manual(Q, "--count", "2", "--batch", "64", "--lease", "30s", "--timeout", "5s")
eq(sorted((m.get("id"), m.get("attempt")) for m in again), [("e1", 2), ("e2", 2)],
   "a take (its scheduler returns them): e1, e2 on attempt 2")
eq(registry(Q), [again[0]["token"].rsplit(".", 1)[1]], "only the new take's record is in the registry")

section("members that name nothing are skipped, and ended ones dropped")
Q = "lregs"
L, P = keys(Q)
offer_all(Q, ["s1"])
far = str(2 ** 52)  # a lease end in 2039: kept, though it names no record
R.cmd("ZADD", L, "5", "junk", "5", "12345|s1", far, far + "|s0 s1 s2", far, "x|s1", "6", "7|xs1 s1x")
eq(lookup(Q, "s1")[1].get("state"), "ready", "lookup s1: ready, past members that name no record of it")
r, msgs = take_manual(Q, "--lease", "30s", "--no-scheduler", "--timeout", "5s")
eq([m.get("id") for m in msgs], ["s1"], "take s1 with a lease")
mine = msgs[0]["token"].rsplit(".", 1)[1] if msgs else "?"
eq(lookup(Q, "s1")[1].get("state"), "inflight", "lookup s1: in flight, past members that name no record of it")
sched = bg_dq("schedule", Q)
ok(wait_for(lambda: sorted(members(Q)) == sorted([far + "|s0 s1 s2", "x|s1", mine + "|s1"]), 10),
   "a scheduler's catch-up run drops the members whose lease has ended", members(Q))
sched.stop()

section("a registry of another type")
Q = "lregt"
L, P = keys(Q)
offer_all(Q, ["t1", "t2"])
R.cmd("SET", L, "not a sorted set")
r = dq("lookup", Q, "t1")
ok(r.rc == 3 and b"WRONGTYPE" in r.err and L.encode() in r.err, "lookup: exit 3, naming the key and its type", r)
r, msgs = take_manual(Q, "--count", "2", "--batch", "64", "--lease", "30s", "--timeout", "5s")
eq(sorted(m.get("id") for m in msgs), ["t1", "t2"], "a take with a lease still hands out t1, t2")
eq(R.cmd("TYPE", L), "zset", "the registry is a sorted set again")
moved = R.cmd("KEYS", P + "bad:l:*")
eq([R.cmd("GET", k) for k in moved], [b"not a sorted set"], "the string it held was renamed away, not lost")
eq(lookup(Q, "t2")[1].get("state"), "inflight", "lookup t2: in flight")

finish()
