"""ack_groups.py - lua/ack.lua's grouped arguments, called directly (EVALSHA)
on items leased through the CLI: groups that do not add up refuse the whole
call and change nothing; inside a well-formed call each item is judged on
its own (acked through its lease record's block, -1 for a malformed bucket,
0 for the same item twice, for a middle that names another item's block, for
a token without its cut, and for a lease record of another take); a second
group of the same record in one call acks through the same read; an item
that extend moved to a record of its own is found through the id index by
the token rebuilt from its cut; the record keeps exactly the items not yet
acked, and the CLI acks those afterwards. Packed groups (count '*k', the ids
joined, the buckets joined: src/util/ackargs.c packs a whole take so) ack a whole
take in one piece; one that is not a whole take (an id misnamed, a bucket
malformed, ids short of the count, a record an earlier ack changed) is taken
apart and each item judged on its own; packed groups that do not add up
refuse the call."""
import hashlib
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403
from workers import *  # noqa: E402,F403

R = Redis(timeout=30)
SHA = R.cmd("SCRIPT", "LOAD", eval_script("ack"))
Q = "ackg"
P = f"dq:{{{Q}}}:".encode()


def bucket(id_):
    return str(int(hashlib.sha1(id_.encode()).hexdigest()[:4], 16) % 32768)


def ack(*args):
    """EVALSHA of ack.lua on Q: the reply, or the RedisError."""
    try:
        return R.cmd("EVALSHA", SHA, "2", P + b"zs", P + b"n", P, "1", *args)
    except RedisError as e:
        return e


def cut(token):
    """prefix, middle, suffix as src/util/ackargs.c cuts a lease token."""
    pre, mid, suf = token.rsplit(".", 2)
    return pre + ".", mid, "." + suf


def records():
    """The records in the queue's slots."""
    out = []
    for name in R.cmd("ZRANGE", P + b"zs", "0", "-1"):
        out += R.cmd("ZRANGE", P + b"q:" + name, "0", "-1")
    return out


def after_prefix(rec):
    """A v4 lease record past its head and its token prefix: its ids and blocks."""
    head = rec.split(b"|", 5)
    return head[5][int(head[2]):]


def inflight():
    s = stats(Q)
    return s.get("inflight") if s else None


section("items leased in one take through the CLI")
for i in range(1, 7):
    eq(dq("offer", Q, "0", f"payload {i}", "--id", f"g{i}").rc, 0, f"offer g{i}")
r, msgs = take_manual(Q, "--count", "6", "--batch", "64", "--timeout", "5s")
eq(sorted(m.get("id") for m in msgs), [f"g{i}" for i in range(1, 7)], "one take leases g1..g6")
tok = {m["id"]: m["token"] for m in msgs}
pre, _, suf = cut(tok["g1"])
ok(all(cut(t)[0] == pre and cut(t)[2] == suf for t in tok.values()), "one prefix and suffix: one lease record")
mid = {i: cut(t)[1] for i, t in tok.items()}
eq(inflight(), 6, "6 in flight")
record = records()

section("groups that do not add up refuse the call, and change nothing")
item = [mid["g1"], "g1", bucket("g1")]
for what, args in [
    ("count 0", [pre, suf, "0"]),
    ("count past the arguments", [pre, suf, "2"] + item),
    ("count not a number", [pre, suf, "x"] + item),
    ("count with a sign", [pre, suf, "+1"] + item),
    ("an argument left over", [pre, suf, "1"] + item + ["g2"]),
    ("a group head cut short", [pre, suf]),
]:
    got = ack(*args)
    ok(isinstance(got, RedisError) and "malformed ack arguments" in str(got), f"{what}: refused", got)
eq(inflight(), 6, "still 6 in flight")
eq(records(), record, "the lease record untouched")

section("each item judged on its own")
got = ack(pre, suf, "5",
          mid["g1"], "g1", bucket("g1"),    # acked through its block
          mid["g2"], "g2", "x",             # malformed bucket: -1
          mid["g1"], "g1", bucket("g1"),    # g1 again: its block is gone: 0
          mid["g4"], "g3", bucket("g3"),    # g4's block does not hold g3: 0
          "0" + mid["g5"], "g5", bucket("g5"),  # a middle with a leading zero names no block: 0
          tok["g2"], "", "1", "", "g2", bucket("g2"),    # the whole token, uncut: no record found: 0
          "other.", suf, "1", mid["g3"], "g3", bucket("g3"),  # another take's prefix: 0
          pre, suf, "1", mid["g6"], "g6", bucket("g6"))  # a second group of the same record: acked
eq(got, [1, -1, 0, 0, 0, 0, 0, 1], "statuses in order")
eq(inflight(), 4, "4 in flight")
left = records()
body = after_prefix(left[0]) if len(left) == 1 else b""  # the prefix is random: it may hold "g1"
ok(all(f"g{i}".encode() in body for i in (2, 3, 4, 5))
   and b"g1" not in body and b"g6" not in body, "the record keeps g2..g5 and no more", left)

section("an item extend moved out is found through the id index")
eq(dq("extend", "--", Q, "g4", tok["g4"], "60s").rc, 0, "extend g4 (a record of its own, same token)")
got = ack(pre, suf, "1", mid["g4"], "g4", bucket("g4"))
eq(got, [1], "acked by its cut token")
eq(inflight(), 3, "3 in flight")

section("the CLI acks what is left")
for i in (2, 3, 5):
    eq(dq("ack", "--", Q, f"g{i}", tok[f"g{i}"]).rc, 0, f"ack g{i}")
eq(inflight(), 0, "nothing in flight")
eq(records(), [], "no lease record left")
eq(id_index_size(Q), 0, "no id index entry left")


def lease_six(tag):
    """Offers tag1..tag6 and leases them in one take: [(block, id, token)]
    in block order."""
    for i in range(1, 7):
        eq(dq("offer", Q, "0", f"payload {i}", "--id", f"{tag}{i}").rc, 0, f"offer {tag}{i}")
    _, msgs = take_manual(Q, "--count", "6", "--batch", "64", "--timeout", "5s")
    eq(len(msgs), 6, f"one take leases {tag}1..{tag}6")
    return sorted((int(cut(m["token"])[1]), m["id"], m["token"]) for m in msgs)


def whole(items, order=None):
    """A group of the items in the given order of blocks (default: 1..n)."""
    pre_, _, suf_ = cut(items[0][2])
    args = [pre_, suf_, str(len(items))]
    for b, id_, _ in (items if order is None else [items[j] for j in order]):
        args += [str(b), id_, bucket(id_)]
    return args


section("a whole take acked in block order: its ids compared in one piece, the record gone whole")
items = lease_six("w")
ok(len(records()) == 1 and records()[0][:2] == b"4|", "one lease record, of version 4", records())
eq(ack(*whole(items)), [1] * 6, "all six acked")
eq((inflight(), records(), id_index_size(Q)), (0, [], 0), "nothing in flight, no record, no index entry")
eq(ack(*whole(items)), [0] * 6, "the same ack again: none in flight")
eq(inflight(), 0, "still nothing in flight")

section("a whole take with one id that is not its block's: each item judged on its own")
items = lease_six("x")
args = whole(items)
args[3 + 3 * 1 + 1] = "x9"  # block 2 named with another id
eq(ack(*args), [1, 0, 1, 1, 1, 1], "five acked, the misnamed one not")
left = records()
# Past the head and the token prefix, which is random and may hold "x2".
body = after_prefix(left[0]) if len(left) == 1 else b""
ok(body.count(b"x2") == 2 and all(f"x{i}".encode() not in body for i in (1, 3, 4, 5, 6)),
   "the record keeps x2 alone (its id and its entry)", left)
eq(dq("ack", "--", Q, "x2", items[1][2]).rc, 0, "the CLI acks x2")
eq((inflight(), records(), id_index_size(Q)), (0, [], 0), "nothing left")

section("a whole take acked out of block order: each item judged on its own, all acked")
items = lease_six("y")
eq(ack(*whole(items, [1, 0, 2, 3, 4, 5])), [1] * 6, "all six acked")
eq((inflight(), records(), id_index_size(Q)), (0, [], 0), "nothing left")

section("a lease record whose ids are not its entries': a whole ack does not go by them")
items = lease_six("z")
(rec,) = records()
(name,) = R.cmd("ZRANGE", P + b"zs", "0", "-1")
score = R.cmd("ZSCORE", P + b"q:" + name, rec)
R.cmd("ZREM", P + b"q:" + name, rec)
R.cmd("ZADD", P + b"q:" + name, score, rec.replace(b"z1 z2", b"q1 z2", 1))
eq(ack(*whole(items)), [0, 1, 1, 1, 1, 1], "z1, whose block names q1, is not acked; the others are")
eq(inflight(), 1, "z1 in flight until its lease runs out")
R.cmd("ZREMRANGEBYSCORE", P + b"q:" + name, score, score)  # its record, tampered with: gone
R.cmd("HINCRBY", P + b"n", "inflight", "-1")
R.cmd("HDEL", P + b"i:" + bucket("z1").encode(), "z1")
R.cmd("ZREMRANGEBYSCORE", P + b"l", score, score)


def packed(items, ids=None, buckets=None, count=None):
    """A packed group of the items (blocks 1..n in order), as
    dq__ack_args_pack makes it: count '*n', the ids joined by spaces, their
    buckets joined by spaces; ids, buckets or count given replace them."""
    pre_, _, suf_ = cut(items[0][2])
    ids = [id_ for _, id_, _ in items] if ids is None else ids
    buckets = [bucket(id_) for id_ in ids] if buckets is None else buckets
    return [pre_, suf_, count or f"*{len(items)}", " ".join(ids), " ".join(buckets)]


def settle_by_cli(items, which):
    """The CLI acks the items at the given indices; then nothing is left."""
    for j in which:
        eq(dq("ack", "--", Q, items[j][1], items[j][2]).rc, 0, f"the CLI acks {items[j][1]}")
    eq((inflight(), records(), id_index_size(Q)), (0, [], 0), "nothing left")


section("a whole take packed: acked in one piece, the record gone whole")
items = lease_six("p")
eq(ack(*packed(items)), [1] * 6, "all six acked")
eq((inflight(), records(), id_index_size(Q)), (0, [], 0), "nothing in flight, no record, no index entry")
eq(ack(*packed(items)), [0] * 6, "the same ack again: none in flight")
eq(inflight(), 0, "still nothing in flight")

section("a packed group that is not a whole take: taken apart, each item on its own")
items = lease_six("q")
ids = [id_ for _, id_, _ in items]
ids[1] = "q9"
eq(ack(*packed(items, ids=ids, buckets=[bucket(i) for _, i, _ in items])), [1, 0, 1, 1, 1, 1],
   "block 2 named q9: not acked; the others are")
eq(inflight(), 1, "q2 still in flight")
settle_by_cli(items, [1])

items = lease_six("r")
buckets = [bucket(id_) for _, id_, _ in items]
buckets[2] = "x"
eq(ack(*packed(items, buckets=buckets)), [1, 1, -1, 1, 1, 1], "a malformed bucket: that item -1, the rest acked")
settle_by_cli(items, [2])

items = lease_six("s")
eq(ack(*packed(items[:5], count="*6")), [1, 1, 1, 1, 1, -1], "five ids for a count of six: the sixth -1")
settle_by_cli(items, [5])

items = lease_six("t")
eq(ack(*whole(items[:1])), [1], "t1 acked alone: the record changes")
eq(ack(*packed(items)), [0, 1, 1, 1, 1, 1], "then the whole take packed: t1 not in flight, the rest acked")
eq((inflight(), records(), id_index_size(Q)), (0, [], 0), "nothing left")

items = lease_six("u")
eq(ack(*(packed(items[:3]) + packed(items[3:], count="*3"))), [1, 1, 1, 0, 0, 0],
   "a packed group of blocks 1..3 of six: each judged on its own; the second group names blocks 1..3 "
   "with u4..u6: not theirs")
eq(inflight(), 3, "u4..u6 still in flight")
settle_by_cli(items, [3, 4, 5])

section("packed groups that do not add up refuse the call, and change nothing")
items = lease_six("v")
record = records()
head = packed(items)
for what, args in [
    ("count *0", head[:2] + ["*0"] + head[3:]),
    ("count * alone", head[:2] + ["*"] + head[3:]),
    ("count *x", head[:2] + ["*x"] + head[3:]),
    ("count past the largest batch", head[:2] + ["*1001"] + head[3:]),
    ("buckets missing", head[:4]),
    ("an argument left over", head + ["v1"]),
]:
    got = ack(*args)
    ok(isinstance(got, RedisError) and "malformed ack arguments" in str(got), f"{what}: refused", got)
eq(inflight(), 6, "still 6 in flight")
eq(records(), record, "the lease record untouched")
eq(ack(*head), [1] * 6, "then acked whole")
eq((inflight(), records(), id_index_size(Q)), (0, [], 0), "nothing left")

finish()
