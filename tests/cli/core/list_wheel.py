"""list_wheel.py - `delayq list Q pending` shows the timing wheel's items
(issue 42): offers with delays of their own (45 s..100 s: past the wheel's
40 s horizon, WHEEL_NEAR, and inside the slots) wait in the buckets
dq:{Q}:b:K, mixed with offers in time order that go to the slots; some are
cancelled, some replaced. Paged with small limits (1, 7, and one page of
1,000), the listing shows every pending item exactly once, in due order
(equal due ms in offer order, slot records before bucket entries of the same
ms), with its due time as the id index holds it, attempts 0 and its payload;
cancelled items and replaced items' old copies are not shown. The same holds
with planted bucket-index members and a bucket of another type beside them,
and through `delayq serve`'s API, whose pages cut long payloads in the
script."""
import os
import random
import sys

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

Q = "lw"
P = f"dq:{{{Q}}}:"
rng = random.Random(42)
seq = {}  # id -> the order of its latest offer
payload = {}
order = [0]
short = [0]


def offer_batch(rows):
    """Offers rows of (delay, id, payload) as one --batch."""
    offer_rows(Q, rows)
    for _, i, p in rows:
        order[0] += 1
        seq[i], payload[i] = order[0], p


def truth():
    """id -> (due ms, in the wheel?) as the id index says, for every live id."""
    out = {}
    for i in seq:
        s = redis("HGET", id_index_key(Q, i), i)
        if s is None:
            continue
        out[i] = (zscore_due(Q, i), wheel_ref_of(s) is not None)
    return out


def list_all(limit, what):
    """Every page of `list Q` at limit: the items, and the page count;
    short[0] counts the pages short of limit that had a next one."""
    items, pages, short[0] = list_pages(Q, limit, what)
    return items, pages


def check(items, pages, what):
    t = truth()
    want = sorted(t, key=lambda i: (t[i][0], seq[i]))
    got = [m["id"] for m in items]
    eq(len(got), len(set(got)), f"{what}: no item twice ({pages} pages)")
    eq(got, want, f"{what}: every pending item once, in due order (equal ms in offer order)")
    eq([m["due_ms"] for m in items], [t[i][0] for i in got], f"{what}: due times as the id index holds them")
    eq([m["attempts"] for m in items], [0] * len(items), f"{what}: attempts 0")
    eq([m["payload"] for m in items], [payload[i] for i in got], f"{what}: payloads")
    ok(all(m["state"] == "pending" for m in items), f"{what}: all pending")


section("offers into the slots and the wheel, cancels, replaces")
# In time order first (to the slots): the last record is due in 120 s, so
# what follows from 40 s ahead (WHEEL_NEAR) has delays of its own (the
# wheel). Nothing is due within 30 s, nor any bucket within the cascade's
# lead (30 s) for 15 s: serve's scheduler, below, finds nothing to do.
offer_batch([("120s", "anchor", "anchor")])
rows, n = [], 0
for b in range(6):
    for _ in range(12):
        rows.append((f"{rng.randint(45000, 100000)}ms", f"w{n:03d}", f"wheel {n} " + "x" * rng.randint(0, 40)))
        n += 1
    # Four of one delay: one due ms, in offer order.
    rows += [("73s", f"t{b}{j}", f"tie {b} {j}") for j in range(4)]
    # In time order: after everything, to the slots.
    rows.append((f"{130 + b}s", f"s{b}", f"slot {b}"))
offer_batch(rows)
# A slot record and bucket entries of one ms: e0 is in time order (slots),
# e1 then is not (past e0 comes 'after'), e2 joins e0's ms in the wheel
# (more than 4,096 ms before the last record: not in time order). e1 comes
# twice so that the batch goes in file order: dq_offer_many sends a batch
# in delay order unless an id comes twice (src/util/send_order.c).
offer_batch([("140s", "e0", "e0 in the slots"), ("146s", "e1", "e1"), ("140s", "e2", "e2 in the wheel"),
             ("146s", "e1", "e1")])
t = truth()
wheel = [i for i in t if t[i][1]]
ok(redis("KEYS", P + "b:*"), "the wheel's buckets exist (dq:{Q}:b:*)")
ok(len(wheel) >= 60 and len(t) - len(wheel) >= 8, "items in the wheel and in the slots",
   (len(wheel), len(t) - len(wheel)))
same = t.get("e0") and t.get("e2") and t["e0"][0] == t["e2"][0]
note(f"{len(wheel)} in the wheel, {len(t) - len(wheel)} in the slots; e0/e2 share a ms: {bool(same)}")
if same:
    ok(not t["e0"][1] and t["e2"][1], "e0 in the slots, e2 in the wheel, one due ms")

cancelled = [f"w{k:03d}" for k in range(0, 72, 9)] + ["s2", "t31"]
for i in cancelled:
    eq(dq("cancel", Q, i).rc, 0, f"cancel {i}")
# Replaced: wheel items moved (to another bucket or the slots), a slot item
# into the wheel; their old entries stay in the buckets, stale.
repl = [("80s", "w001", "w001 again"), ("30s", "w002", "w002 again"), ("150s", "w004", "w004 at the end"),
        ("60s", "s1", "s1 into the wheel"), ("73s", "t00", "t00 again")]
offer_batch(repl)
t = truth()
ok(all(i not in t for i in cancelled), "cancelled ids are gone from the id index")
ok(t["s1"][1] and t["w001"][1], "s1 and w001 now in the wheel", (t["s1"], t["w001"]))

section("pages of 7, of 1, and one of 1,000")
items, pages = list_all(7, "limit 7")
check(items, pages, "limit 7")
ok(pages >= len(t) // 7, "limit 7: pages of at most 7", pages)
items, pages = list_all(1, "limit 1")
check(items, pages, "limit 1")
items, pages = list_all(1000, "limit 1000")
check(items, pages, "limit 1000")
r = dq("list", Q, "--state", "inflight", "--json")
eq((r.rc, r.out), (0, b""), "in flight: none (the wheel holds pending items only)")

section("planted bucket-index members and a bucket of another type")
far = (server_ms() + 3600_000) // WHEEL_MS
redis("ZADD", P + "bz", "0", "notabucket")
redis("ZADD", P + "bz", str(far * WHEEL_MS + 5), str(far))
redis("SET", P + f"b:{far}", "junk")
redis("ZADD", P + "bz", str((far + 2) * WHEEL_MS + 9000), str(far + 2))  # a score outside its bucket
redis("RPUSH", P + f"b:{far + 2}", "17|1|1|3|abcjunk")
redis("RPUSH", P + f"b:{far + 3}", "not|an|entry", "5|99999|1|1|z")
redis("ZADD", P + "bz", str((far + 3) * WHEEL_MS), str(far + 3))
items, pages = list_all(7, "planted")
check(items, pages, "planted")
for k in ("notabucket", str(far), str(far + 2), str(far + 3)):
    redis("ZREM", P + "bz", k)
redis("DEL", P + f"b:{far}", P + f"b:{far + 2}", P + f"b:{far + 3}")

section("serve's API: pages of 3, long payloads cut in the script")
big = "L" * 20000
offer_batch([("90s", "big1", big), ("52s", "big2", big)])
t = truth()
ok(t["big1"][1] and t["big2"][1], "the long ones wait in the wheel", (t.get("big1"), t.get("big2")))
tok = "t0ken-of-list-wheel"
srv, port = serve_started(Q, tok)


def api_all(limit):
    """Every page of the API's pending items at limit."""
    return api_pages(port, Q, limit, tok)


want = sorted(t, key=lambda i: (t[i][0], seq[i]))
api_items = api_all(3)
eq([m["id"] for m in api_items], want, "the API's pages of 3: every pending item once, in due order")
eq([m["due_ms"] for m in api_items], [t[i][0] for i in want], "the API's due times")
api_items = api_all(100)  # payloads cut to 1 MiB / 100 bytes
eq([m["id"] for m in api_items], want, "the API's pages of 100: every pending item once, in due order")
cut = (1 << 20) // 100
bigs = [m for m in api_items if m["id"] in ("big1", "big2")]
ok(len(bigs) == 2 and all(m["payload_truncated"] and m["payload_bytes"] == 20000 and m["payload"] == big[:cut]
                          for m in bigs), "long payloads of the wheel's items come cut, with their whole size",
   [(m["id"], m["payload_bytes"], m["payload_truncated"], len(m["payload"] or "")) for m in bigs])
short = [m for m in api_items if m["id"] not in ("big1", "big2")]
eq([m["payload"] for m in short], [payload[m["id"]] for m in short], "short payloads whole")
srv.stop()

section("many stale entries: pages read the buckets in parts (WHEEL_SCAN)")
rows = [(f"{rng.randint(45000, 100000)}ms", f"m{k:04d}", f"many {k}") for k in range(6000)]
offer_batch(rows)
t = truth()
ok(sum(1 for k in range(6000) if t[f"m{k:04d}"][1]) == 6000, "all 6,000 in the wheel")
# Replaced to the end of the slots: their bucket entries go stale.
offer_batch([("2h", f"m{k:04d}", f"many {k} later") for k in range(6000) if k % 12])
items, pages = list_all(1000, "stale, limit 1000")
check(items, pages, "stale, limit 1000")
ok(short[0] >= 1, "stale, limit 1000: a page stopped at the bucket past 4,000 entries read", short[0])
items, pages = list_all(150, "stale, limit 150")
check(items, pages, "stale, limit 150")

section("a bucket cascaded in part (bcur): its first entries in the slots, the rest in its list")
Q, P = "lw2", "dq:{lw2}:"
seq.clear()
payload.clear()
offer_batch([("120s", "anchor2", "anchor")])
rows = [(f"{rng.randint(44000, 45000)}ms", f"c{k:02d}", f"cascade {k}") for k in range(30)]
rows[10:10] = [("44500ms", f"ctie{j}", f"tie {j}") for j in range(3)]
offer_batch(rows)
bz = redis("ZRANGE", P + "bz", "0", "0", "WITHSCORES")
ok(len(bz) == 2, "the 33 wait in the wheel's buckets", bz)
low = int(float(bz[1])) if len(bz) == 2 else server_ms() + 44000
# The queue's clock mark (not real time) brings the first bucket within the
# cascade's lead (WHEEL_LEAD, 30 s), with nothing due yet.
redis("HSET", P + "n", "clock", str(low - 30000 + 20))
R = Redis(timeout=30)
k = [P + x for x in ("zs", "r", "x", "n", "d", "dz", "s")]
# Cascades of one entry a call until one leaves a bucket part-done (a
# bucket that ends with the entry is done instead: the next one's first
# entry then does it).
script = R.cmd("SCRIPT", "LOAD", eval_script("transfer"))
cur = None
for _ in range(40):
    R.cmd("EVALSHA", script, "7", *k, P, P + "w", "1", "1000000000", "0", "")
    cur = redis("HGET", P + "n", "bcur")
    if cur is not None:
        break
t = truth()
ok(cur is not None and sum(1 for i in t if t[i][1]) and sum(1 for i in t if not t[i][1]) >= 2,
   "a bucket cascaded in part: items in both stores", (cur, sorted(t.items())[:8]))
items, pages = list_all(4, "cascaded in part")
check(items, pages, "cascaded in part")

finish()
