"""planted_leases.py - what the scripts read from Redis is outside input:
lease records with a bad item, huge attempt counts, a bad id in a batch of
acks (part 3 of 4, with planted_entries.py, planted_acked.py and
planted_stored.py).

The checks, the same for every part, are told in tests/lib/planted.py.
"""
import os
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403
from planted import *  # noqa: E402,F403

pinger = watch()

# ------------------------------------------------------------------ a lease record with one bad item

def run_out_lease(q, rec, ids, good_id):
    """Plants lease record rec in q, its lease run out 500 ms ago (ids in
    the id index, pointing at it), takes q with a lease: the one good item
    comes again, on its second attempt, and is acked. The set-aside list."""
    plant_slot(q, server_ms() - 500, rec)
    score = redis("ZRANGE", k(q, "q:planted"), 0, 0, "WITHSCORES")[1]
    for i in ids:
        redis("HSET", id_index_key(q, i), i, score)
    r = dq("take", q, "--count", "64", "--timeout", "1s", "--json", "--ack", "manual")
    m = r.json_lines()
    eq([(x["id"], x["attempt"]) for x in m], [(good_id, 2)],
       f"{good_id} delivered, on its second attempt ({r.err[-200:]!r})")
    if m:
        eq(dq("ack", q, good_id, m[0]["token"]).rc, 0, "and acked")
    eq(redis("ZCARD", k(q, "q:planted")), 0, "the lease records are gone")
    return aside(q)


section("a lease record whose lease ran out, with a good item and a bad one: the good one is delivered again")
good = entry_v1(server_ms() - 600, b"lg", b"payload-lg")
rec = lease_record(3, b"t.", [good, b"2|5|6|999999999|2|0|idp", b""], v=3)  # version 3, as older takes wrote
x = run_out_lease("pllease", rec, ["lg"], "lg")
ok(len(x) == 1 and b"out of range" in x[0] and x[0].endswith(b"2|5|6|999999999|2|0|idp"),
   "the bad item's entry set aside with its reason and bytes", x)

section("a version 4 lease record whose lease ran out: a good item, a bad one, one its ids misname")
q = "pllease4"
good = entry_v1(server_ms() - 600, b"lh", b"payload-lh")
misnamed = entry_v1(server_ms() - 600, b"lw", b"payload-lw")
rec = lease_record(3, b"t.", [good, b"2|5|6|999999999|2|0|idp", misnamed, b""], ids=[b"lh", b"id", b"zz", b""])
x = run_out_lease(q, rec, ["lh", "lw"], "lh")
eq(sorted(aside_reason(e) for e in x), ["lease record ids disagree", "ready entry with a number out of range"],
   "the bad item and the misnamed one set aside, each with its reason")
ok(any(e.endswith(misnamed) for e in x), "the misnamed one with its entry's bytes", x)
eq(redis("HGET", id_index_key(q, "lw"), "lw"), None, "lw leaves the id index")

# ------------------------------------------------------------------ work --exec: one bad id never sinks a batch of acks

section("work --exec: 10 good items and an entry with a bad id")
q = "plwork"
goods = [f"w{j}" for j in range(10)]
offer_goods(q, goods[:5])
redis("RPUSH", k(q, "r"), entry_v1(server_ms(), b"bad id"))
offer_goods(q, goods[5:])
out = os.path.join(RDIR, "plwork.out")
w = bg_dq("work", q, "--exec", f"echo $DELAYQ_ID >> {out}", "--concurrency", "4", "--lease", "3s",
          "--max-attempts", "3")
wait_for(lambda: os.path.exists(out) and len(open(out).read().split()) >= 10, 15)
time.sleep(0.5)
rc = w.stop()
ran = open(out).read().split() if os.path.exists(out) else []
eq(sorted(ran), sorted(goods), "each good item ran exactly once, the bad one never")
ok(b"10 succeeded, 0 failed" in w.err, "summary: 10 succeeded, 0 failed", w.err[-300:])
st = stats(q)
if st:
    eq((st["pending"], st["ready"], st["inflight"], st["dead"], st["set_aside"]), (0, 0, 0, 0, 1),
       "nothing left in flight or dead; the bad entry set aside")

# ------------------------------------------------------------------ an id left indexed by a bad record

section("a leased record with max attempts -1: set aside, and its id offered again is delivered")
q = "plmax"
now = server_ms()
rec = b"2|1|-1|%d|4|3|0|zombtok" % (now - 100) + b"payload"
plant_slot(q, now - 50, rec)
redis("HSET", id_index_key(q, "zomb"), "zomb", str((now - 50) * ORD))
got = take_all(q)
eq(got, [], "nothing delivered")
eq(len(aside(q)), 1, "the record is set aside")
eq(redis("HGET", id_index_key(q, "zomb"), "zomb"), None, "its id left the id index")
r = dq("offer", q, "0", "payload-zomb", "--id", "zomb")
ok(r.rc == 0 and b"kept" not in r.err, "a new offer of the id is added, not 'kept'", r)
check_delivered(q, take_all(q), ["zomb"])

# ------------------------------------------------------------------ offers of a ready or in-flight id

section("an offer of an id that is ready or in flight says so")
q = "plstate"
offer_goods(q, ["rd", "fl"])
r = dq("take", q, "--ack", "manual", "--count", "1", "--json", "--timeout", "1s")
taken = r.json_lines()
held = taken[0]["id"] if taken else "fl"
other = "rd" if held == "fl" else "fl"
r = dq("offer", q, "0", "again", "--id", other)
ok(r.rc == 0 and b"already ready, kept" in r.err, "ready: 'already ready, kept'", r)
r = dq("offer", q, "0", "again", "--id", held)
ok(r.rc == 0 and b"already in flight, kept" in r.err, "in flight: 'already in flight, kept'", r)

# ------------------------------------------------------------------ nack backoff with a huge attempt count

section("nack with backoff base 0 and 999,999,999 attempts: closed form, no stall")
q = "plnack"
eq(dq("config", q, "--backoff-base", "0", "--backoff-max", "0").rc, 0, "config --backoff-base 0")
offer_goods(q, ["n1"])
r = dq("take", q, "--ack", "manual", "--json", "--timeout", "2s")
m = r.json_lines()
if ok(len(m) == 1, "n1 taken with a lease", r):
    tok = m[0]["token"]
    ok(rewrite(q, tok, b"999999998", 0), "n1's lease record rewritten: attempt 999,999,999, no max")
    t0 = time.monotonic()
    r = dq("nack", q, "n1", tok)
    secs = time.monotonic() - t0
    ok(r.rc == 0 and secs < 2, f"nack answers at once ({secs:.2f} s)", r)
    eq(zscore_due(q, "n1") is not None, True, "n1 is pending again")

section("nack of a record claiming 10^12 attempts: refused as stale, set aside at its lease end")
q = "plnack2"
offer_goods(q, ["n2", "n3"])
r = dq("take", q, "--ack", "manual", "--lease", "600ms", "--count", "2", "--json", "--timeout", "2s")
m = {x["id"]: x for x in r.json_lines()}
if ok(set(m) == {"n2", "n3"}, "n2, n3 taken with a lease", r):
    ok(rewrite(q, m["n2"]["token"], b"999999999999", 3), "n2's entry in its lease record rewritten")
    r = dq("nack", q, "n2", m["n2"]["token"])
    eq(r.rc, 1, "nack n2: exit 1 (no such delivery: its record does not decode)")
    eq(dq("ack", q, "n3", m["n3"]["token"]).rc, 0, "ack n3 still works")
    time.sleep(0.8)
    eq(take_all(q), [], "nothing more delivered")
    x = aside(q)
    ok(len(x) == 1 and b"out of range" in x[0], "n2's record set aside: number out of range", x)

# ------------------------------------------------------------------ Redis never blocked

unblocked(pinger)
finish()
