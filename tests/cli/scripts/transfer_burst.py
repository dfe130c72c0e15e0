"""transfer_burst.py - lua/transfer.lua reads a burst (records due in one
millisecond, over several slots) without their scores, and loses nothing
on the way: each item keeps its own due time and its place in the order, a
lease record or an undecodable record inside the burst is handled as
anywhere else (through ZSCORE), and a record that sits below its slot's
range (the layout broken by hand) is neither skipped nor removed unread.
The layout is planted by hand and the script called directly, with a time
budget large enough for every chunk to run in one call."""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

ORD = 2048
R = Redis(timeout=30)
TRANSFER = R.cmd("SCRIPT", "LOAD", eval_script("transfer"))


def keys(q):
    p = f"dq:{{{q}}}:"
    return [p + s for s in ("zs", "r", "x", "n", "d", "dz", "s")], p


def plant_slot(q, name, bound, records):
    """Slot `name` with lower bound `bound`, holding records {member: score}."""
    _, p = keys(q)
    redis("ZADD", p + "zs", str(bound), name)
    args = []
    for member, score in records.items():
        args += [str(score), member]
    redis("ZADD", p + "q:" + name, *args)


def transfer(q):
    k, p = keys(q)
    return R.cmd("EVALSHA", TRANSFER, "7", *k, p, p + "w", "100000", "1000000000", "0", "")


def calls(name):
    for line in redis("INFO", "commandstats").decode().splitlines():
        if line.startswith(f"cmdstat_{name}:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def v1(i):
    return f"b{i:03d}", f"1|4|b{i:03d}payload-{i}"


def entry_due_and_id(e):
    """(version, due, id) of a ready entry."""
    f = e.split(b"|")
    if f[0] == b"1":
        il = int(f[3])
        head = b"|".join(f[:4]) + b"|"
        return 1, int(f[1]), e[len(head):len(head) + il].decode()
    il = int(f[4])
    head = b"|".join(f[:6]) + b"|"
    return 2, int(f[1]), e[len(head):len(head) + il].decode()


section("a burst over four slots, with a lease record, a broken record and a misplaced one")
q = "tburst"
D = server_ms() - 5000  # every record below is due
expect = []  # (id, due) in the order the ready list must hold them
# Slot a: 40 items of ms D.
recs = {}
for i in range(40):
    ident, rec = v1(i)
    recs[rec] = D * ORD + i
    expect.append((ident, D))
plant_slot(q, "a", D * ORD, recs)
# Slot b: 40 more of ms D, a lease record whose lease ended in ms D (its
# item comes back, attempt 1), and a record that does not decode.
recs = {}
for i in range(40, 80):
    ident, rec = v1(i)
    recs[rec] = D * ORD + i + 10
    expect.append((ident, D))
lease_entry = f"1|{D - 100}|{D - 100}|2|L1leased"
lease_rec = f"3|16|4|1|tk1.{len(lease_entry)}|{lease_entry}"
recs[lease_rec] = D * ORD + 200
recs["1|99|broken"] = D * ORD + 300
plant_slot(q, "b", D * ORD + 40, recs)
expect.append(("L1", D - 100))  # the lease's item, after b's items (score D*ORD+200)
# Slot c: 30 items of ms D + 1.
recs = {}
for i in range(80, 110):
    ident, rec = v1(i)
    recs[rec] = (D + 1) * ORD + i
    expect.append((ident, D + 1))
plant_slot(q, "c", D * ORD + 1000, recs)
# Slot d: 20 items of ms D + 1, and one of ms D put below the slot's bound
# (a broken layout): the burst of ms D + 1 does not start at d's first rank.
recs = {}
for i in range(110, 130):
    ident, rec = v1(i)
    recs[rec] = (D + 1) * ORD + i
ident, low = v1(999)
recs[low] = D * ORD + 7
plant_slot(q, "d", (D + 1) * ORD + 100, recs)
expect += [(f"b{i:03d}", D + 1) for i in range(110, 130)]
redis("HSET", f"dq:{{{q}}}:n", "pending", "131", "inflight", "1")

redis("CONFIG", "RESETSTAT")
res = transfer(q)
eq(res[0], 132, "moved: 131 items and the lease's one")
eq(res[1], 1, "set aside: the broken record")
eq(res[5], 1, "expired: the lease's item")
ok(calls("zscore") >= 2, "the lease and the broken record in the burst got their scores from ZSCORE",
   calls("zscore"))
ok(calls("zrank") >= 1, "the burst path ran (ZRANK before removing by rank)", calls("zrank"))
ready = redis("LRANGE", f"dq:{{{q}}}:r", 0, -1)
got = [entry_due_and_id(e) for e in ready]
eq([(i, d) for _, d, i in got[:len(expect)]], expect,
   "every item once, in score order, each with its own due time")
ok(len(got) == 132 and got[-1][2] == "b999" and got[-1][1] == D,
   "the misplaced record is delivered last (read again with scores), due D", got[-1:])
eq([v for v, _, i in got if i == "L1"], [2], "the lease's item is back as a version 2 entry (attempt 1)")
aside = redis("LRANGE", f"dq:{{{q}}}:x", 0, -1)
ok(len(aside) == 1 and aside[0].endswith(b"1|99|broken"), "the broken record is set aside, raw", aside)
eq(redis("ZCARD", f"dq:{{{q}}}:zs"), 0, "no slot left in the index")
eq([redis("EXISTS", f"dq:{{{q}}}:q:{s}") for s in "abcd"], [0, 0, 0, 0], "no slot key left")
eq(redis("LLEN", f"dq:{{{q}}}:s"), 132, "a wake token for each ready entry")

section("a slot with later records after the burst's millisecond")
q = "tburst2"
D = server_ms() - 5000
plant_slot(q, "a", D * ORD, {v1(i)[1]: D * ORD + i for i in range(30)})
# b: ms D first, then ms D + 2 (due) and ms far in the future (not due).
recs = {v1(i)[1]: D * ORD + 100 + i for i in range(30, 50)}
recs.update({v1(i)[1]: (D + 2) * ORD + i for i in range(50, 60)})
future = server_ms() + 3600 * 1000
recs.update({v1(i)[1]: future * ORD + i for i in range(60, 64)})
plant_slot(q, "b", D * ORD + 30, recs)
redis("HSET", f"dq:{{{q}}}:n", "pending", "64")
res = transfer(q)
eq(res[0], 60, "moved the 60 due items")
got = [entry_due_and_id(e) for e in redis("LRANGE", f"dq:{{{q}}}:r", 0, -1)]
eq([(i, d) for _, d, i in got], [(f"b{i:03d}", D) for i in range(50)] + [(f"b{i:03d}", D + 2) for i in range(50, 60)],
   "ms D in order, then ms D + 2")
eq(redis("ZCARD", f"dq:{{{q}}}:q:b"), 4, "the 4 future records stay in their slot")
eq(int(res[2]) // 1000, future // 1000, "next due: the first future record")

section("one slot of 250 records at one score (more than a chunk)")
q = "tburst3"
D = server_ms() - 5000
plant_slot(q, "a", D * ORD, {v1(i)[1]: D * ORD + 5 for i in range(250)})
redis("HSET", f"dq:{{{q}}}:n", "pending", "250")
redis("CONFIG", "RESETSTAT")
res = transfer(q)
eq(res[0], 250, "moved all 250")
ok(calls("zrank") >= 2, "chunks after the first were read as a burst, in the same slot", calls("zrank"))
got = [entry_due_and_id(e) for e in redis("LRANGE", f"dq:{{{q}}}:r", 0, -1)]
eq([(i, d) for _, d, i in got], [(f"b{i:03d}", D) for i in range(250)], "each once, in order, due D")
eq(redis("EXISTS", f"dq:{{{q}}}:q:a"), 0, "the slot is gone")

finish()
