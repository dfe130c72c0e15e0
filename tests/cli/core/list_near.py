"""list_near.py - `delayq list Q pending` (lua/list.lua) shows the near
lists' items (issue 42: an offer due within 40 s, WHEEL_NEAR, goes to the
list of its millisecond dq:{Q}:m:<due>, see lua/lib/67_near.lua) among the
slots' records and the timing wheel's bucket entries, in delivery order.
On the queue's clock (its mark, HSET dq:{Q}:n clock), so due times are
exact: slot records, bucket entries and near entries share due ms (slots
first, then the wheel, then the near list in list order, as the transfer
delivers them); some of each are cancelled or replaced (a near entry
replaced at its own due ms moves to its list's end). Checked:
  - pages of 1, 3, 7 and 1,000 (the CLI), pages of 1 and 3 with payloads
    cut in the script (list.lua called as the library sends it), and pages
    of 3 through `delayq serve`'s API list every pending item once, in the
    order the storage gives (due ms; slots, wheel, near; place), with its
    due time, attempts 0 and payload; none in flight;
  - planted near-index members (no list's name, a score other than its
    name, a list of another type, undecodable entries) hide nothing;
  - the real transfer then moves the items a few a call (lists moved in
    part: the counters' mcur; buckets cascaded in part): after every call
    the listing is exactly the items not yet in the ready list, and the
    listing before the first call is the ready list's final order;
  - a near list of 4,500 tombstones (cancelled items) before 3 live ones:
    pages of 7 pass them in parts (NEAR_SCAN) and list every item once.
Fails with a list.lua that does not read the near lists (items missing)."""
import os
import sys

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

ORD = 2048
Q = "ln"
P = f"dq:{{{Q}}}:"
seq = {}  # id -> the order of its latest offer
payload = {}
order = [0]
short = [0]


def use(q):
    global Q, P
    Q, P = q, f"dq:{{{q}}}:"
    seq.clear()
    payload.clear()


RC = Redis(timeout=30)  # one connection for the many reads below


def set_clock(ms):
    RC.cmd("HSET", P + "n", "clock", str(ms))


def offer_batch(rows):
    """Offers rows of (delay ms, id, payload) as one --batch."""
    offer_rows(Q, [(f"{d}ms", i, p) for d, i, p in rows])
    for _, i, p in rows:
        order[0] += 1
        seq[i], payload[i] = order[0], p


def where(i, cur=None):
    """(due ms, store, place) of a pending id as the storage holds it:
    store 0 the slots (place: the score), 1 a wheel bucket, 2 a near list
    (place: the entry's); None when not pending. cur: the counters' mcur."""
    s = RC.cmd("HGET", id_index_key(Q, i), i)
    if s is None:
        return None
    near = near_ref_of(s)
    if near is not None:
        d, pos = near
        cur = cur or ""
        if not RC.cmd("LINDEX", P + f"m:{d}", pos) or (cur.startswith(f"{d}:") and pos < int(cur.split(":")[1])):
            return None
        return d, 2, pos
    ref = wheel_ref_of(s)
    if ref is not None:
        due = zscore_due(Q, i)
        return (due, 1, ref[1]) if due is not None else None
    return int(s) // ORD, 0, int(s)


def truth():
    """The pending ids in delivery order, with their due ms."""
    cur = (RC.cmd("HGET", P + "n", "mcur") or b"").decode()
    t = {i: where(i, cur) for i in seq}
    t = {i: w for i, w in t.items() if w is not None}
    return sorted(t, key=lambda i: t[i]), {i: t[i][0] for i in t}


def list_all(limit, what):
    """Every page of `list Q` at limit: the items; short[0] counts the pages
    short of limit that had a next one."""
    items, _, short[0] = list_pages(Q, limit, what, 3000)
    return items


def check(items, what):
    want, due = truth()
    got = [m["id"] for m in items]
    eq(len(got), len(set(got)), f"{what}: no item twice")
    eq(got, want, f"{what}: every pending item once, in delivery order")
    eq([m["due_ms"] for m in items], [due[i] for i in got], f"{what}: due times")
    eq([m["attempts"] for m in items], [0] * len(items), f"{what}: attempts 0")
    eq([m["payload"] for m in items], [payload[i] for i in got], f"{what}: payloads")
    ok(all(m["state"] == "pending" for m in items), f"{what}: all pending")


def ready_item(e):
    """(id, due ms, payload) of a version 1 ready entry."""
    _, due, _, il, rest = e.split(b"|", 4)
    il = int(il)
    return rest[:il].decode(), int(due), rest[il:].decode()


LIST = eval_script("list")


def script_pages(limit, cut):
    """Every page of list.lua called directly with a payload cut: the items
    as (id, due ms, payload, whole length)."""
    items, cursor = [], ""
    for _ in range(3000):
        r = RC.cmd("EVAL", LIST, "1", P + "zs", P, "pending", cursor, str(limit), str(cut))
        cursor = r[0].decode()
        for x in range(1, len(r), 4):
            i, due, p = ready_item(r[x + 2])
            eq(int(r[x]), due, f"cut {cut}, limit {limit}: {i}'s time is its due time")
            items.append((i, due, p, r[x + 3]))
        if not cursor:
            break
    return items


# ------------------------------------------------------------------ the queue
section("slot records, bucket entries and near entries sharing due ms")
M = server_ms() + 600_000  # the queue's clock: 10 min ahead, nothing falls due by itself
set_clock(M)
D1, D2 = M + 60_000, M + 61_000
# In time order (the slots): two of D1, one of D2, then the anchor 200 s on.
offer_batch([(60_000, "s0", "slot 0"), (60_000, "s1", "slot 1"), (61_000, "s2", "slot 2"),
             (70_000, "s3", "slot 3"), (200_000, "anchor", "anchor")])
# Out of time order (the wheel): two of D1, one of D2, and some of their own.
rows = [(60_000, "w0", "wheel 0"), (60_000, "w1", "wheel 1"), (61_000, "w2", "wheel 2")]
rows += [(45_000 + 1_777 * k, f"wx{k}", f"wheel x{k} " + "y" * k) for k in range(12)]
offer_batch(rows)
# The queue's clock 30 s on: D1 and D2 within 40 s (the near lists).
set_clock(M + 30_000)
rows = [(30_000, f"n{j}", f"near {j}") for j in range(6)]  # D1
rows += [(31_000, f"m{j}", f"near D2 {j}") for j in range(4)]  # D2
rows += [(1_000 + 997 * k, f"nx{k:02d}", f"near x{k} " + "z" * (k % 5)) for k in range(30)]
rows += [(5_000, f"nt{j}", f"near tie {j}") for j in range(5)]  # one list of 5
offer_batch(rows)
t, due = truth()
stores = {where(i)[1] for i in t}
ok(stores == {0, 1, 2}, "items in the slots, the wheel and the near lists", stores)
ok(redis("KEYS", P + "m:*") and redis("ZCARD", P + "mz") >= 30, "near lists dq:{Q}:m:<due> and their index mz")
eq([where(i)[:2] for i in ("s0", "w0", "n0")], [(D1, 0), (D1, 1), (D1, 2)], "s0, w0, n0: one due ms, three stores")
eq([where(i)[:2] for i in ("s2", "w2", "m0")], [(D2, 0), (D2, 1), (D2, 2)], "s2, w2, m0: one due ms, three stores")

cancelled = ["n1", "nx03", "nx17", "nt2", "w1", "wx4", "s1", "m3"]
for i in cancelled:
    eq(dq("cancel", Q, i).rc, 0, f"cancel {i}")
# Replaced: n2 at its own ms (to its list's end), nx05 to another near ms,
# wx2 (wheel) and s3 (slots) into near lists, nx09 out to the wheel.
offer_batch([(30_000, "n2", "n2 again"), (2_000, "nx05", "nx05 sooner"), (30_000, "wx2", "wx2 into D1"),
             (5_000, "s3", "s3 into the tie"), (70_000, "nx09", "nx09 later")])
t, due = truth()
ok(not any(i in t for i in cancelled), "cancelled ids are not pending")
eq([where(i)[1] for i in ("n2", "wx2", "s3", "nx09")], [2, 2, 2, 1], "replaced ones where they went")
eq([i for i in t if due[i] == D1], ["s0", "w0", "n0", "n3", "n4", "n5", "n2", "wx2"],
   "D1: slot, wheel, then the near list in list order")
ok(near_records(Q) < sum(redis("LLEN", k) for k in redis("KEYS", P + "m:*")), "tombstones in the near lists")

section("pages of 1, 3, 7 and 1,000")
for limit in (1, 3, 7, 1000):
    check(list_all(limit, f"limit {limit}"), f"limit {limit}")
r = dq("list", Q, "--state", "inflight", "--json")
eq((r.rc, r.out), (0, b""), "in flight: none")

section("list.lua's pages with payloads cut in the script")
for limit, cut in ((1, 5), (3, 5), (7, 1)):
    got = script_pages(limit, cut)
    t, due = truth()
    eq([g[0] for g in got], t, f"cut {cut}, limit {limit}: every pending item once, in delivery order")
    eq([(g[2], g[3]) for g in got], [(payload[i][:cut], len(payload[i])) for i in t],
       f"cut {cut}, limit {limit}: payloads cut, whole lengths")

section("serve's API: pages of 3")
tok = "t0ken-of-list-near"
srv, port = serve_started(Q, tok)
api = api_pages(port, Q, 3, tok)
srv.stop()
t, due = truth()
eq([m["id"] for m in api], t, "the API's pages of 3: every pending item once, in delivery order")
eq([m["due_ms"] for m in api], [due[i] for i in t], "the API's due times")

section("planted near-index members and lists")
far = M + 3_000_000
redis("ZADD", P + "mz", "0", "notalist", str(far + 5), str(far + 7), str(far), str(far))
redis("SET", P + f"m:{far}", "junk")
redis("ZADD", P + "mz", str(far + 9), str(far + 9))
redis("RPUSH", P + f"m:{far + 9}", "not an entry", "99999|1|3|abc", "", "7|1|3|xyz")
redis("ZADD", P + "mz", str(D1 - 5), str(D1 - 5))  # an index member with no list
check(list_all(7, "planted"), "planted")
check(list_all(2, "planted, limit 2"), "planted, limit 2")
redis("ZREM", P + "mz", "notalist", str(far + 7), str(far), str(far + 9), str(D1 - 5))
redis("DEL", P + f"m:{far}", P + f"m:{far + 9}")

section("the transfer moves them a few a call: the listing is what is not ready yet")
final, _ = truth()
before = [m["id"] for m in list_all(1000, "before the transfer")]
eq(before, final, "the listing before the transfer")
set_clock(M + 400_000)  # everything due
R = Redis(timeout=30)
keys = [P + x for x in ("zs", "r", "x", "n", "d", "dz", "s")]
sha = R.cmd("SCRIPT", "LOAD", eval_script("transfer"))
snaps, cur_seen, bcur_seen = [], False, False
for _ in range(200):
    moved = R.cmd("EVALSHA", sha, "7", *keys, P, P + "w", "3", "1000000000", "0", "")
    cur_seen |= redis("HGET", P + "n", "mcur") is not None
    bcur_seen |= redis("HGET", P + "n", "bcur") is not None
    n_ready = redis("LLEN", P + "r")
    snaps.append((n_ready, [g[0] for g in script_pages(4, 0)]))
    if n_ready >= len(final) or int(moved[0]) == 0 and not redis("EXISTS", P + "mz"):
        break
ready = [ready_item(e) for e in redis("LRANGE", P + "r", "0", "-1")]
delivered = [r[0] for r in ready]
eq(delivered, final, "the ready list's order (delivery) is the listing's")
eq([r[2] for r in ready], [payload[i] for i in delivered], "the ready entries' payloads")
ok(cur_seen, "a near list was moved in part (mcur) while listed")
note(f"{len(snaps)} transfer calls; a bucket cascaded in part seen: {bcur_seen}")
bad = [(n, got) for n, got in snaps if got != delivered[n:]]
ok(not bad, "after every transfer call: the listing is the items not yet ready, in order",
   bad[:1] and (bad[0][0], bad[0][1][:10], delivered[bad[0][0]:][:10]))
eq(redis("LLEN", P + "x"), 0, "nothing set aside")

# ------------------------------------------------------------------ tombstones
section("a near list of 4,500 tombstones before 3 live entries")
use("ln2")
M = server_ms() + 600_000
set_clock(M)
offer_batch([(100_000, "late", "in the slots")])
set_clock(M + 80_000)
rows = [(10_000, f"g{k:04d}", f"gone {k}") for k in range(4500)]
offer_batch(rows)
offer_batch([(10_000, f"live{j}", f"live {j}") for j in range(3)] + [(9_000, "first", "before them")])
# Cancelled through the real cancel.lua, on one connection (4,500 processes
# of `delayq cancel` would take long).
sha = RC.cmd("SCRIPT", "LOAD", eval_script("cancel"))
gone = sum(RC.cmd("EVALSHA", sha, "2", P + "zs", P + "n", P, f"g{k:04d}", "1") for k in range(4500))
eq(gone, 4500, "4,500 cancelled")
for k in range(4500):
    del seq[f"g{k:04d}"]
d = M + 90_000
eq(redis("LLEN", P + f"m:{d}"), 4503, "one list of 4,503 entries")
ok(sum(1 for e in redis("LRANGE", P + f"m:{d}", 0, -1) if e) == 3, "4,500 of them tombstones")
check(list_all(7, "tombstones, limit 7"), "tombstones, limit 7")
ok(short[0] >= 1, "a page stopped in the tombstones (NEAR_SCAN) with a next cursor", short[0])
check(list_all(1000, "tombstones, limit 1000"), "tombstones, limit 1000")
check(list_all(1, "tombstones, limit 1"), "tombstones, limit 1")

finish()
