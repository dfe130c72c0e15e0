"""slots.py - the slot layout (lua/lib/60_slots.lua) holds its invariants under
splits: every slot stays a small listpack (but one of a single score),
slot i holds only scores in [bound i, bound i+1), ids come out in due order
with equal due times in offer order, nothing is lost, and the id index is
empty once everything is delivered."""
# tier: slow (about 13 s): make test runs it, make test-fast does not
import os
import random
import time
import sys

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

SLOT_CAP = 64
Q = "slots"


def slots(queue):
    """[(name, bound, [(score, record), ...])] in index order."""
    out = []
    idx = redis("ZRANGE", f"dq:{{{queue}}}:zs", 0, -1, "WITHSCORES")
    for i in range(0, len(idx), 2):
        name, bound = idx[i].decode(), int(float(idx[i + 1]))
        recs = redis("ZRANGE", f"dq:{{{queue}}}:q:{name}", 0, -1, "WITHSCORES")
        out.append((name, bound, [(int(float(recs[j + 1])), recs[j]) for j in range(0, len(recs), 2)]))
    return out


def check_layout(queue, what, one_score_ok=False):
    ss = slots(queue)
    ok(len(ss) > 1, f"{what}: more than one slot ({len(ss)})")
    big = [(n, len(r)) for n, _, r in ss if len(r) > SLOT_CAP and not (one_score_ok and len({s for s, _ in r}) == 1)]
    eq(big, [], f"{what}: no slot over {SLOT_CAP} records")
    enc = {redis("OBJECT", "ENCODING", f"dq:{{{queue}}}:q:{n}") for n, _, r in ss if r and len(r) <= SLOT_CAP}
    eq(enc, {b"listpack"}, f"{what}: the slots are listpacks")
    bad = []
    for i, (n, bound, recs) in enumerate(ss):
        upper = ss[i + 1][1] if i + 1 < len(ss) else None
        for s, _ in recs:
            if (i > 0 and s < bound) or (upper is not None and s >= upper):
                bad.append((n, bound, upper, s))
    eq(bad[:3], [], f"{what}: every score lies in its slot's range")
    return ss


# Offers due within 40 s go to their millisecond's near list (67_near.lua);
# those due later and less than a wheel bucket (4,096 ms) before the
# queue's last record go into the slots, in any order: these. The ones
# further off go through the wheel, whose cascade is checked below. The
# queue's clock mark is set past them to deliver them (FAR: 60 s ahead).
FAR = 60000


def pass_time(queue, ms):
    """Sets the queue's clock mark ms ahead of the server's clock."""
    redis("HSET", f"dq:{{{queue}}}:n", "clock", str(server_ms() + ms))


section("3,000 offers with random delays 60.2-60.9 s, 300 at one due time: splits")
rng = random.Random(7)
lines, want = [], []
for i in range(3000):
    d = FAR + rng.randint(200, 900)
    lines.append(f"{d}ms\tr{i:04d}\tp{i}")
for i in range(300):
    lines.append(f"{FAR + 500}ms\ts{i:03d}\tsame {i}")
r = dq("offer", Q, "--batch", "-", stdin=("\n".join(lines) + "\n").encode(), timeout=60)
eq((r.rc, r.out), (0, b"3300\n"), "offer --batch: 3300")
eq(id_index_size(Q), 3300, "3300 ids in the id index")
eq(slot_records(Q), 3300, "3300 records in the slots")
check_layout(Q, "after the offers")
p = stats(Q)
if p is not None:
    eq(p["pending"], 3300, "stats: 3300 pending")

section("cancel and replace inside the slots")
eq(dq("cancel", Q, "r0005").rc, 0, "cancel r0005")
eq(dq("offer", Q, f"{FAR + 2500}ms", "moved", "--id", "r0006").rc, 0, "replace r0006 (due in 62.5 s)")
eq(slot_records(Q), 3299, "3299 records")
check_layout(Q, "after cancel and replace")

section("delivered in due order, equal due times in offer order, none lost")
pass_time(Q, FAR + 4000)
sched = bg_dq("schedule", Q)
r = dq("take", Q, "--count", "3299", "--json", "--timeout", "15s", timeout=60)
sched.stop()
msgs = r.json_lines()
eq((r.rc, len(msgs)), (0, 3299), "take --count 3299: all of them")
ids = [m["id"] for m in msgs]
eq(len(set(ids)), 3299, "no id twice")
ok("r0005" not in ids, "the cancelled id is not delivered")
eq([m["payload"] for m in msgs if m["id"] == "r0006"], ["moved"], "the replaced id carries its new payload")
dues = [m["due_ms"] for m in msgs]
eq(dues, sorted(dues), "due_ms non-decreasing in delivery order")
same = [m["id"] for m in msgs if m["id"].startswith("s")]
eq(same, [f"s{i:03d}" for i in range(300)], "the 300 with one due time in offer order")
# The random delays share due times too (3,000 over 2 s): each such group in
# offer (file) order, its ordinals given inside the slots (r0006, offered
# again later, left out).
groups = {}
for m in msgs:
    if m["id"].startswith("r") and m["id"] != "r0006":
        groups.setdefault(m["due_ms"], []).append(m["id"])
shared = [g for g in groups.values() if len(g) > 1]
ok(len(shared) > 100, f"random delays: {len(shared)} due times shared by several items")
eq([g for g in shared if g != sorted(g)][:3], [], "random delays: items sharing a due time in offer order")
ok(all(m["ready_ms"] >= m["due_ms"] for m in msgs), "never early: ready_ms >= due_ms")
eq((slot_records(Q), id_index_size(Q), redis("LLEN", f"dq:{{{Q}}}:r")), (0, 0, 0),
   "nothing left in the slots, the id index or the ready list")
p = stats(Q)
if p is not None:
    eq((p["pending"], p["ready"]), (0, 0), "stats: 0 pending, 0 ready")

section("a split meets keys at the slot names it issues: a zset is left alone, another type renamed")
Q2 = "slots2"
P2 = f"dq:{{{Q2}}}:"
# Due times falling from one offer to the next: every insert lands below the
# slot's records, so the slot grows until it splits (no appending to a full
# slot, which starts a new slot without a split).
eq(dq("offer", Q2, f"{FAR + 900}ms", "first", "--id", "d000").rc, 0, "the first offer makes slot 1")
eq(redis("HGET", P2 + "n", "slots"), b"1", "slot names issued: 1")
redis("ZADD", P2 + "q:2", "1", "planted")
redis("SET", P2 + "q:3", "planted string")
lines = [f"{FAR + 900 - i}ms\td{i:03d}\tp{i}" for i in range(1, 200)]
r = dq("offer", Q2, "--batch", "-", stdin=("\n".join(lines) + "\n").encode(), timeout=60)
eq((r.rc, r.out), (0, b"199\n"), "offer --batch: 199 more")
eq(redis("ZRANGE", P2 + "q:2", 0, -1, "WITHSCORES"), [b"planted", b"1"], "the planted zset at slot name 2 is untouched")
ok(redis("ZSCORE", P2 + "zs", "2") is None, "name 2 is no slot")
bad = redis("KEYS", P2 + "bad:q:3:*")
eq(len(bad), 1, "the string at slot name 3 was renamed out of the way")
if bad:
    eq(redis("GET", bad[0]), b"planted string", "renamed with its value")
ok(redis("ZSCORE", P2 + "zs", "3") is not None, "name 3 is a slot: the split went on there")
eq(slot_records(Q2), 200, "200 records in the slots")
check_layout(Q2, "after the splits")
pass_time(Q2, FAR + 2000)
sched = bg_dq("schedule", Q2)
r = dq("take", Q2, "--count", "200", "--json", "--timeout", "15s", timeout=60)
sched.stop()
msgs = r.json_lines()
eq(sorted(m["id"] for m in msgs), [f"d{i:03d}" for i in range(200)], "all 200 delivered, each once")
dues = [m["due_ms"] for m in msgs]
eq(dues, sorted(dues), "due_ms non-decreasing in delivery order")

section("the timing wheel's cascade keeps the layout: 3,300 offers 50-50.6 s ahead, 300 at one due time")
Q3 = "slots3"
P3 = f"dq:{{{Q3}}}:"
# An anchor 80 s ahead first: the rest lie more than 1 s before the last
# record, so they are not in time order, and past the wheel's horizon
# (WHEEL_NEAR, 40 s), so they take the wheel.
eq(dq("offer", Q3, "80s", "anchor", "--id", "anchor").rc, 0, "an anchor 80 s ahead, in the slots")
lines = [f"{rng.randint(50000, 50600)}ms\tw{i:04d}\tp{i}" for i in range(3000)]
lines[1500:1500] = [f"50300ms\tt{i:03d}\tsame {i}" for i in range(300)]
r = dq("offer", Q3, "--batch", "-", stdin=("\n".join(lines) + "\n").encode(), timeout=60)
eq((r.rc, r.out), (0, b"3300\n"), "offer --batch: 3300")
ok(slot_records(Q3) == 1 and redis("ZCARD", P3 + "bz") >= 1, "in the wheel's buckets, not the slots",
   (slot_records(Q3), redis("ZCARD", P3 + "bz")))


def scores(key):
    return [int(float(x)) for x in redis("ZRANGE", key, 0, -1, "WITHSCORES")[1::2]]


def schedule_until(pred, what):
    """Runs a scheduler until pred() holds (at most 30 s), then stops it."""
    sched = bg_dq("schedule", Q3)
    deadline = time.monotonic() + 30
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.05)
    sched.stop()
    ok(pred(), what)


# The queue's clock mark set to 1 s before the last bucket's earliest due
# time: every bucket falls within the lead and is cascaded, and only what is
# due by the mark moves on to the ready list.
bz = scores(P3 + "bz") or [server_ms() + 50600]  # (none: the check above failed)
redis("HSET", P3 + "n", "clock", str(max(bz) - 1000))
schedule_until(lambda: redis("EXISTS", P3 + "bz") == 0, "a scheduler cascaded every bucket")
eq(slot_records(Q3) + redis("LLEN", P3 + "r"), 3301, "3300 records and the anchor in the slots and the ready list")
ok(slot_records(Q3) > 1000, f"most still in the slots ({slot_records(Q3)})")
check_layout(Q3, "after the cascade", one_score_ok=True)
eq(redis("KEYS", P3 + "b:*"), [], "no bucket left")
redis("HSET", P3 + "n", "clock", str(max(bz) + 5000))
sched = bg_dq("schedule", Q3)
r = dq("take", Q3, "--count", "3300", "--json", "--timeout", "15s", timeout=60)
sched.stop()
msgs = r.json_lines()
eq(sorted(m["id"] for m in msgs), sorted([f"w{i:04d}" for i in range(3000)] + [f"t{i:03d}" for i in range(300)]),
   "all 3300 delivered, each once")
dues = [m["due_ms"] for m in msgs]
eq(dues, sorted(dues), "due_ms non-decreasing in delivery order")
eq([m["id"] for m in msgs if m["id"].startswith("t")], [f"t{i:03d}" for i in range(300)],
   "the 300 with one due time in offer order")
groups = {}
for m in msgs:
    if m["id"].startswith("w"):
        groups.setdefault(m["due_ms"], []).append(m["id"])
shared = [g for g in groups.values() if len(g) > 1]
ok(len(shared) > 100, f"random delays: {len(shared)} due times shared by several items")
eq([g for g in shared if g != sorted(g)][:3], [], "random delays: items sharing a due time in offer order")
eq(redis("LLEN", P3 + "x"), 0, "nothing set aside")

finish()
