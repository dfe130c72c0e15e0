"""wheel.py - items whose due times come in no order go through the timing
wheel (issue 42: bucket lists dq:{Q}:b:<k> and their index dq:{Q}:bz, see
docs/key-layout.md) and look to users exactly as in-order ones do. Through
the real CLI (and the Python client where the CLI has no absolute due time),
real `delayq schedule`, `take`, `work` and `serve` processes.

Offers enter the wheel only when due at least WHEEL_NEAR (40 s) after the
queue's now, so every delay meant for the wheel here is 41 s more than a
delay of seconds. Nothing waits that long: the test moves each queue's time
by its clock mark (HSET dq:{Q}:n clock <ms>, see queue_time_of in
lua/lib/20_counters.lua) in steps, wakes the schedulers on the queue's
channel, and waits until they have moved what is due by the mark (the
clock driver below). due_ms and ready_ms are then both on the queue's clock,
as the scripts write them: "none early" compares them, and lateness is
ready_ms - due_ms (at most one step when the schedulers keep up).

1. FIFO among equal due times across calls: items due at one absolute ms,
   offered in separate calls between CLI offers of random delays and
   in-order ones, and some while the scheduler cascades their bucket, come
   out in offer order; all come out in due order, each once. Also: 2500
   items of one bucket (cascaded in parts), a take scheduling for itself,
   `work`, a queue of 4 shards, and a catch-up of 1500 wheel items among 300
   in-order slot records all overdue. Items due at T offered late: before
   T's bucket is cascaded (into its list), just after (to the slots), and
   200 ms before T.
2. cancel of a wheel item exits 0, it is never delivered, pending drops; one
   cancelled and offered again at its due time comes once, the new payload.
3. replace (wheel to wheel, wheel to slots, slots to wheel, twice in one
   batch, at its own due time: it goes after the others due then) delivers
   the new payload once at the new due time; --nx keeps the old item, and the
   Python client's offer reports the kept due time.
4. lookup: pending with the due time, before any scheduler ran.
5. list pending (and serve's listing): in due order, ties in offer order,
   with due times and payloads, before any scheduler ran.
6. stats, serve's counts and /metrics count the wheel's items, next_due too.
7. Redis: the offers left bucket lists and bz (fails on a tree without the
   wheel); once all is delivered no bucket, bz or bcur, nothing set aside.
8. Lateness: 300 items due 42..46 s ahead, offered in batches while a
   scheduler and a consumer run and the queue's time moves: none moved
   before its due time, none received more than 1.5 s after it (queue clock).
9. Hostile: a bucket planted as a string, an entry that does not decode, a
   bz member without a list, a bz of another type, an id index entry into a
   bucket at nothing: the scheduler runs on, good items all arrive, the bad
   ones are set aside (dq:{Q}:x: delayq has no command listing its entries;
   stats counts them).
10. A burst of 20,000 offers by `offer --batch` with random delays of 40 to
   50 s (all into the wheel, behind an anchor 90 s ahead), the queue's time
   pushed past them all, one `take --count 20000` with its own scheduler:
   each arrives once, none before its due time, in due order (ties in offer
   order), each due at its offer's time plus its delay.
"""
import collections
import os
import random
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

ROOT = os.environ.get("DQ_TEST_ROOT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
import delayq  # noqa: E402

BUCKET_MS = WHEEL_MS
NEAR, LEAD = 40000, 30000  # lua/lib/65_wheel.lua: WHEEL_NEAR, WHEEL_LEAD
AHEAD = NEAR + 1000  # added to each delay of seconds: its item lands past NEAR, in the wheel
STEP = 400  # the clock driver's step of queue time (ms): the lateness it allows
rnd = random.Random(int(os.environ.get("DQ_TEST_SEED", "0")) or None)
SEED = rnd.randrange(1 << 30)
rnd.seed(SEED)
note(f"seed {SEED} (DQ_TEST_SEED={SEED} repeats this run's delays)")


class Q:
    """One queue's offers, in offer order, as the test expects to see them."""

    def __init__(self, name, sharded=False):
        self.name = name
        self.sharded = sharded  # over shards: no order across them (each shard's own)
        self.seq = []  # ids in offer order (an id offered again moves to the end)
        self.payload = {}
        self.due = {}  # known due ms (Python offers; lookup fills the rest)

    def offered(self, id_, payload, due=None):
        if id_ in self.seq:
            self.seq.remove(id_)
        self.seq.append(id_)
        self.payload[id_] = payload
        self.due.pop(id_, None)
        if due is not None:
            self.due[id_] = due

    def drop(self, id_):
        self.seq.remove(id_)
        del self.payload[id_]
        self.due.pop(id_, None)

    def expected(self):
        """Due order, ties in offer order (an id whose due time a failed
        check left unknown first)."""
        pos = {i: n for n, i in enumerate(self.seq)}
        return sorted(self.seq, key=lambda i: (self.due.get(i, -1), pos[i]))


def cli_offer(q, delay_ms, id_, payload):
    r = dq("offer", q.name, f"{delay_ms}ms", payload, "--id", id_)
    if ok((r.rc, r.out) == (0, f"{id_}\n".encode()), f"offer {q.name} {delay_ms}ms --id {id_}", r):
        q.offered(id_, payload)


def cli_batch(q, lines):
    """offer --batch of (delay_ms, id, payload) lines."""
    data = "".join(f"{d}ms\t{i}\t{p}\n" for d, i, p in lines).encode()
    r = dq("offer", q.name, "--batch", "-", stdin=data)
    if ok((r.rc, r.out) == (0, b"%d\n" % len(lines)), f"offer {q.name} --batch of {len(lines)} lines", r):
        for _, i, p in lines:
            q.offered(i, p)


def random_lines(prefix, n, lo_ms, hi_ms):
    """n lines of random delays in [lo_ms, hi_ms] + AHEAD (into the wheel)."""
    return [(AHEAD + rnd.randint(lo_ms, hi_ms), f"{prefix}{j:02d}", f"{prefix}{j:02d} body {rnd.random():.6f}")
            for j in range(n)]


client = None


def py_offer(q, items, status="added"):
    """One offer call of the Python client: (id, payload, due_ms) items at
    absolute due times; checks each was added (or status) at exactly that
    due time."""
    got = client.offer_many(q.name, [delayq.Item(p, id=i, due_ms=d) for i, p, d in items])
    eq([(o.id, o.status, o.due_ms, o.state) for o in got], [(i, status, d, "pending") for i, _, d in items],
       f"python offer of {[i for i, _, _ in items]} to {q.name} at absolute due times: {status}")
    for i, p, d in items:
        q.offered(i, p, d)


def lookup(qname, id_):
    """(exit code, lookup --json object or None)."""
    r = dq("lookup", qname, id_, "--json")
    js = r.json_lines()
    return r.rc, (js[0] if len(js) == 1 else None)


def look_all(q):
    """Lookup of every pending id before any scheduler ran: pending, with the
    due time the offer gave it (a Python offer's) or, for the CLI's, a due
    time recorded for the later checks."""
    bad = []
    for i in q.seq:
        rc, js = lookup(q.name, i)
        if rc != 0 or not js or js.get("state") != "pending" or not isinstance(js.get("due_ms"), int):
            bad.append((i, rc, js))
            continue
        if i in q.due and js["due_ms"] != q.due[i]:
            bad.append((i, "due", js["due_ms"], q.due[i]))
        q.due.setdefault(i, js["due_ms"])
    ok(not bad, f"lookup of each of {len(q.seq)} {q.name} ids: pending, with its due time", bad[:5])
    return not bad


def list_pending(qname):
    """Every page of list QNAME --state pending --json, concatenated."""
    items, cursor = [], None
    for _ in range(50):
        args = ["list", qname, "--state", "pending", "--limit", "1000", "--json"]
        if cursor:
            args += ["--cursor", cursor]
        r = dq(*args)
        if not ok(r.rc == 0, f"list {qname} --state pending exits 0", r):
            break
        items += r.json_lines()
        nxt = [ln.split("next: ", 1)[1].strip() for ln in r.errtext.splitlines() if "next: " in ln]
        if not nxt:
            break
        cursor = nxt[0]
    return items


def wheel_keys(qname, suffix):
    """The keys dq:{Q}:SUFFIX (a glob) of the queue and of its shards (dq:{Q~s}:)."""
    return sorted(redis("KEYS", f"dq:{{{qname}}}:{suffix}") + redis("KEYS", f"dq:{{{qname}~*}}:{suffix}"))


def bucket_keys(qname):
    return wheel_keys(qname, "b:*")


def aside(qname):
    return redis("LRANGE", f"dq:{{{qname}}}:x", 0, -1)


def consume(qname, timeout_ms):
    """A take --no-scheduler --count 0 of QNAME for timeout_ms: what a
    scheduler moves, each line with its receive time."""
    return bg_dq("take", qname, "--no-scheduler", "--count", "0", "--json", "--timeout", f"{int(timeout_ms)}ms")


def delivered(proc, qname):
    """[(recv_s, take --json object)] of a finished consumer."""
    out = []
    for t, line in proc.snapshot():
        js = parse_json_lines(line + b"\n")
        if js:
            out.append((t, js[0]))
    return out


def check_delivery(q, got, label):
    """Each expected id once, in due order (ties in offer order), with its
    payload and due time, none moved before it was due."""
    ids = [m["id"] for _, m in got]
    dup = [i for i, n in collections.Counter(ids).items() if n > 1]
    ok(not dup, f"{label}: no item delivered twice", dup[:5])
    want = set(q.seq)
    eq(sorted(set(ids) - want), [], f"{label}: nothing delivered that is not pending (cancelled, replaced, unknown)")
    eq(sorted(want - set(ids)), [], f"{label}: nothing lost")
    if not q.sharded:
        if all(i in q.due for i in q.seq):
            eq(ids, q.expected(), f"{label}: delivery order is due order, ties in offer order")
        dues = [m["due_ms"] for _, m in got]
        eq(dues, sorted(dues), f"{label}: due_ms non-decreasing in delivery order")
    wrong = [(m["id"], m["payload"], m["due_ms"]) for _, m in got
             if m["id"] in want and (m["payload"] != q.payload[m["id"]] or m["due_ms"] != q.due.get(m["id"]))]
    ok(not wrong, f"{label}: each item with its own payload and due time", wrong[:5])
    early = [(m["id"], m["due_ms"], m["ready_ms"]) for _, m in got if m["ready_ms"] < m["due_ms"]]
    ok(not early, f"{label}: none moved to the ready list before its due time", early[:5])


def check_wheel_used(qname):
    ok(bucket_keys(qname) != [], f"{qname}: the offers left bucket lists dq:{{{qname}}}:b:*",
       "none: the items went to the slots (no wheel)")
    bz = wheel_keys(qname, "bz")
    ok(bz and all(redis("TYPE", k) == "zset" for k in bz), f"{qname}: dq:{{{qname}}}:bz is a zset", bz)
    # Each bucket scored by its start, written once by the push that made
    # its list (not the lowest due time of each push).
    off = [(m, s) for k in bz for m, s in scores_with_members(k) if int(float(s)) != int(m) * BUCKET_MS]
    ok(bz and not off, f"{qname}: each bz score is its bucket's start (k * {BUCKET_MS})", off[:3])


def scores_with_members(key):
    r = redis("ZRANGE", key, 0, -1, "WITHSCORES")
    return [(r[i].decode(), r[i + 1].decode()) for i in range(0, len(r), 2)]


def check_wheel_empty(qname, planted=False):
    """After everything was delivered: no wheel key left, nothing pending;
    nothing set aside unless the test planted bad data (planted)."""
    eq(bucket_keys(qname), [], f"{qname}: no bucket list left once all was delivered")
    eq(wheel_keys(qname, "bz"), [], f"{qname}: no bz left")
    eq([k for k in wheel_keys(qname, "n") if redis("HGET", k, "bcur") is not None], [],
       f"{qname}: no partly cascaded bucket (bcur)")
    if not planted:
        eq([e for k in wheel_keys(qname, "x") for e in redis("LRANGE", k, 0, -1)], [], f"{qname}: nothing set aside")
    p = stats(qname)
    if p is not None:
        eq((p["pending"], p["ready"]), (0, 0), f"{qname}: stats: nothing pending or ready")
    eq(wheel_keys(qname, "q:*") + wheel_keys(qname, "i:*"), [], f"{qname}: no slot record or id index entry left")


# ------------------------------------------------------------------ the clock driver

RC = None  # one connection for the driver's many small commands (redis() opens one a call)
LOG = []  # (local time s, queue time ms) of each step, to read a receive time on the queue's clock


def prefixes(qname):
    """The key prefixes holding a queue's items: its shards' (dq:{Q~T}:), or its own."""
    shards = sorted(k.decode()[:-1] for k in redis("KEYS", f"dq:{{{qname}~*}}:n"))
    return shards or [f"dq:{{{qname}}}:"]


def queue_clock(qname):
    """The queue's now (ms): the server's time, or its clock mark when later."""
    marks = [int(redis("HGET", P + "n", "clock") or 0) for P in prefixes(qname)]
    return max([server_ms()] + marks)


def set_clock(P, ms):
    """Moves the time of the keys under prefix P to ms, and wakes their
    schedulers (a due time long past on their channel runs a transfer now:
    their own timers count on the server's clock, which stays behind)."""
    RC.cmd("HSET", P + "n", "clock", ms)
    RC.cmd("SPUBLISH", P + "w", 0)


def next_event(P, t):
    """The earliest queue time after t at which something under P is due:
    a bucket's cascade (its bz score - LEAD), a record in the slots or a
    near list (the first group's score in mz: its earliest list,
    lua/lib/67_near.lua); t + 1 when it cannot tell (a key of another type,
    which the scheduler moves away), None when nothing is pending."""
    try:
        b = RC.cmd("ZRANGE", P + "bz", 0, 0, "WITHSCORES")
        first = RC.cmd("ZRANGE", P + "zs", 0, 0)
        r = RC.cmd("ZRANGE", P + "q:" + first[0].decode(), 0, 0, "WITHSCORES") if first else []
        m = RC.cmd("ZRANGE", P + "mz", 0, 0, "WITHSCORES")
        ready = RC.cmd("LLEN", P + "r")
    except RedisError:
        return t + 1
    evs = ([int(float(b[1])) - LEAD] if b else []) + ([int(float(r[1])) // 2048] if r else [])
    evs += [int(float(m[1]))] if m else []
    if ready:  # not yet taken: due already
        evs.append(t)
    return min(evs) if evs else None


def caught_up(ps, t):
    """Whether the schedulers (and consumers) of prefixes ps have done all
    that is due by queue time t: no bucket within the lead, no record due,
    nothing left in a ready list."""
    return all((ev := next_event(P, t)) is None or ev > t for P in ps)


def printed_all(proc, qname):
    """Whether consumer proc (take --json) printed each item its queue counts
    as delivered: a take pops an item before it prints it, so an empty ready
    list alone lets the driver move the clock on before the line comes, and
    its receive time would read steps late."""
    taken = sum(int(RC.cmd("HGET", P + "n", "delivered") or 0) for P in prefixes(qname))
    return len(delivered(proc, qname)) >= taken


def drive(qnames, until, hooks=(), settled=lambda: True):
    """Moves the queues' time from their now to until (ms) in steps of STEP
    (straight over stretches where nothing is due: to the next event and up
    to a step past it), waiting after each step until the schedulers caught
    up. hooks: (queue time, function) run once the time stands there (a step
    ends at each). Returns the steps at which the schedulers did not catch
    up within 10 s (scaled): a stall. settled: a further condition of
    catching up (the consumers printed what they took)."""
    ps = [P for q in qnames for P in prefixes(q)]
    t = max(queue_clock(q) for q in qnames)
    hooks = sorted(hooks, key=lambda h: h[0])
    stalls = []
    for _ in range(2000):
        if t >= until:
            break
        nxt = min(t + STEP, until)
        evs = [e for e in (next_event(P, t) for P in ps) if e is not None]
        if not evs or min(evs) > nxt:  # nothing due in the step: on to the next event
            nxt = min(min(evs) + rnd.randint(0, STEP - 1), until) if evs else until
        hook = hooks[0] if hooks and hooks[0][0] <= nxt else None
        if hook:
            nxt = max(hook[0], t)
        for P in ps:
            set_clock(P, nxt)
        LOG.append((time.time(), nxt))
        t = nxt
        if not wait_for(lambda: caught_up(ps, t) and settled(), 10, 0.005):
            stalls.append(t)
        if hook:
            hooks.pop(0)
            hook[1]()
    return stalls


def clock_at(recv_s):
    """The queue time the driver had set when a line came (local time recv_s)."""
    last = None
    for s, ms in LOG:
        if s > recv_s:
            break
        last = ms
    return last


# ------------------------------------------------------------------ offers (no scheduler runs yet)

section("offers: equal absolute due times over separate calls, random delays, in-order items")
# The Python client needs the function library (any CLI call would load it).
eq(dq("functions", "load").rc, 0, "delayq functions load")
wf, wc, wr, wbig = Q("wf"), Q("wc"), Q("wr"), Q("wbig")
client = delayq.Client(URL)
now = server_ms()
T = now + AHEAD + 9000
# wf: E* due at T, through the Python client, between the CLI's offers. E00
# is offered to an empty queue (in order: to the slots), the others after
# zlast (not in order: to T's bucket), so the cascade puts them after E00.
# Every delay is AHEAD (41 s) more than one of seconds, so that the random
# ones (random_lines) land past the wheel's horizon (NEAR) and before the
# queue's last record (an anchor or zlast): into the wheel. The in-order
# items (anchors, zlast) stay in the slots.
py_offer(wf, [("E00", "equal 0", T)])
cli_offer(wf, AHEAD + 14000, "zlast", "in order, last")
py_offer(wf, [("E01", "equal 1", T)])
cli_batch(wf, random_lines("wa", 8, 2000, 12000))
py_offer(wf, [("E02", "equal 2", T), ("E03", "equal 3", T)])
cli_offer(wf, AHEAD + rnd.randint(2000, 12000), "wsingle", "one alone")
py_offer(wf, [("E04", "equal 4", T)])
cli_batch(wf, random_lines("wb", 8, 2000, 12000))
py_offer(wf, [("E05", "equal 5", T), ("pm1", "one ms before", T - 1), ("E06", "equal 6", T),
              ("pp1", "one ms after", T + 1), ("E07", "equal 7", T)])
cli_batch(wf, random_lines("wd", 8, 2000, 12000))
cli_offer(wf, AHEAD + 15000, "zlast2", "in order, after zlast")
py_offer(wf, [("E08", "equal 8", T)])
cli_batch(wf, [(AHEAD + 5000, f"same5s{j}", f"same delay {j}") for j in range(6)])  # equal due in one call
# Replaced at the same due time: it goes after the others due then (its
# old entry, earlier in T's bucket, is stale).
py_offer(wf, [("E03", "equal 3, replaced", T)], status="replaced")

# wbig: 2500 items of one delay in one batch, behind an in-order anchor: one
# bucket (or two) of more than a transfer's 1000 items, cascaded in parts.
cli_offer(wbig, AHEAD + 13000, "anchor", "in order")
cli_batch(wbig, [(AHEAD + 4000, f"big{j:04d}", f"big {j}") for j in range(2500)])

# wc: an in-order anchor, then random delays; two of them cancelled below.
cli_offer(wc, AHEAD + 13000, "anchor", "in order")
cli_batch(wc, random_lines("c", 12, 3000, 8000))
cli_offer(wc, AHEAD + 11000, "lone", "alone in its bucket")

# wr: an in-order item (to be moved into the wheel), an anchor, random delays.
cli_offer(wr, AHEAD + 11000, "s1", "old s1")
cli_offer(wr, AHEAD + 13000, "anchor", "in order")
cli_batch(wr, [(AHEAD + 7000, "r1", "old r1"), (AHEAD + 5000, "r2", "old r2"), (AHEAD + 8000, "r3", "old r3"),
               (AHEAD + 6000, "k1", "kept k1")] + random_lines("r", 8, 3000, 9000))

# wk: taken by a take that schedules for itself (no --no-scheduler, no
# schedule process); ww: by delayq work; wsh: 4 shards, each with a wheel.
wk, ww, wsh = Q("wk"), Q("ww"), Q("wsh", sharded=True)
for q in (wk, ww):
    cli_offer(q, AHEAD + 12000, "anchor", "in order")
    cli_batch(q, random_lines(q.name, 15, 2000, 9000))
r = dq("config", "wsh", "--shards", "4")
ok(r.rc == 0, "config wsh --shards 4", r)
# In-order anchors first, 64 so that each shard surely has one: a batch
# goes out in delay order (src/util/send_order.c), so on an empty shard its
# items would all be in time order, the slots' end.
cli_batch(wsh, [(AHEAD + 12000, f"sa{j:02d}", f"anchor {j}") for j in range(64)])
cli_batch(wsh, random_lines("s", 40, 2000, 9000))
# wo: no scheduler until all of it is overdue: 300 in-order items (slots)
# among 1500 of random delays (wheel; those less than 4,096 ms before the
# last in-order one: the slots), caught up at once, more than a transfer's
# 1000 items: the slots' records must wait for the buckets.
wo = Q("wo")
cli_batch(wo, [(AHEAD + 1500 + j * 20, f"o{j:03d}", f"in order {j}") for j in range(300)])
cli_batch(wo, random_lines("x", 1500, 1500, 3500))

# ------------------------------------------------------------------ before any scheduler

section("Redis: the offers used the wheel (bucket lists and bz)")
for q in (wf, wc, wr, wbig, wk, ww, wsh, wo):
    check_wheel_used(q.name)

section("lookup: each item pending with its due time")
for q in (wf, wc, wr, wk, ww, wsh):
    look_all(q)
eq([wf.due.get(f"E0{j}") for j in range(9)], [T] * 9, "the E items are due at T")
# wbig's 2501 due times by the Python client's lookup (one connection: a
# CLI lookup each would take long); the CLI's for the first and the last.
for i in wbig.seq:
    lk = client.lookup("wbig", i)
    if lk.state == "pending":
        wbig.due[i] = lk.due_ms
eq(len(wbig.due), len(wbig.seq), f"wbig: python lookup of each of {len(wbig.seq)} items: pending")
for i in wo.seq:
    lk = client.lookup("wo", i)
    if lk.state == "pending":
        wo.due[i] = lk.due_ms
eq(len(wo.due), len(wo.seq), f"wo: python lookup of each of {len(wo.seq)} items: pending")
for i in ("big0000", "big2499"):
    rc, js = lookup("wbig", i)
    eq((rc, js and js.get("state"), js and js.get("due_ms")), (0, "pending", wbig.due.get(i)),
       f"lookup wbig {i}: pending, with its due time")
dues = [wbig.due.get(i) for i in wbig.seq[1:]]
ok(None not in dues and dues == sorted(dues), "wbig: the batch's 2500 items due in offer order", (dues[:1], dues[-1:]))

section("cancel of wheel items")
p = stats("wc")
n_wc = len(wc.seq)
if p is not None:
    eq(p["pending"], n_wc, f"wc: stats pending {n_wc} before the cancels")
for victim in ("c03", "lone"):
    r = dq("cancel", "wc", victim)
    eq((r.rc, r.out, r.err), (0, b"", b""), f"cancel wc {victim} exits 0 (it was pending)")
    wc.drop(victim)
    p = stats("wc")
    if p is not None:
        eq(p["pending"], len(wc.seq), f"wc: stats pending {len(wc.seq)} after cancelling {victim}")
    rc, js = lookup("wc", victim)
    eq((rc, js and js.get("state")), (1, "unknown"), f"lookup wc {victim}: unknown (exit 1)")
    eq(dq("cancel", "wc", victim).rc, 1, f"a second cancel of {victim} exits 1")
# Cancelled, then offered again at the same due time: its bucket holds a
# stale entry and a live one of the same id.
c05_due = wc.due.get("c05")
eq(dq("cancel", "wc", "c05").rc, 0, "cancel wc c05")
wc.drop("c05")
if c05_due is not None:
    py_offer(wc, [("c05", "c05, offered again", c05_due)])

section("replace and keep of wheel items")


def replace(id_, delay_ms, payload):
    s0 = server_ms()
    r = dq("offer", "wr", f"{delay_ms}ms", payload, "--id", id_)
    s1 = server_ms()
    if ok((r.rc, r.out) == (0, f"{id_}\n".encode()), f"offer wr {delay_ms}ms --id {id_} (replace) prints {id_}", r):
        wr.offered(id_, payload)
    rc, js = lookup("wr", id_)
    due = js.get("due_ms") if js else None
    ok(rc == 0 and js.get("state") == "pending" and due is not None and s0 + delay_ms <= due <= s1 + delay_ms,
       f"lookup wr {id_}: pending, due now + {delay_ms} ms", f"{s0 + delay_ms} <= {due} <= {s1 + delay_ms}")
    if due is not None:
        wr.due[id_] = due


n_wr = len(wr.seq)
replace("r1", AHEAD + 4000, "new r1")  # wheel to wheel, earlier
replace("r2", AHEAD + 14000, "new r2")  # wheel to the slots (after the anchor: in order)
replace("r3", AHEAD + 8000, "new r3")  # wheel to wheel, about the same bucket
replace("s1", AHEAD + 3500, "new s1")  # slots to wheel
eq([wheel_ref_of(redis("HGET", id_index_key("wr", i), i)) is not None for i in ("r1", "r2", "r3", "s1")],
   [True, False, True, True], "wr: r1, r3 and s1 now in the wheel (their index entries name buckets), r2 not")
k1_due = wr.due.get("k1")
r = dq("offer", "wr", "2s", "other k1", "--id", "k1", "--nx")
eq((r.rc, r.out), (0, b"k1\n"), "offer wr 2s --id k1 --nx exits 0, prints k1")
ok(b"kept" in r.err, "... and says it kept the pending item", r.err)
rc, js = lookup("wr", "k1")
eq((rc, js and js.get("state"), js and js.get("due_ms")), (0, "pending", k1_due), "lookup wr k1: due time unchanged")
got = client.offer_many("wr", [delayq.Item("third k1", id="k1", nx=True, due_ms=T)])
eq([(o.status, o.due_ms, o.state) for o in got], [("kept", k1_due, "pending")],
   "python offer of k1 with nx: kept, reporting the kept item's due time")
p = stats("wr")
if p is not None:
    eq(p["pending"], n_wr, f"wr: stats pending still {n_wr} after the replaces")
r = dq("offer", "wr", "--batch", "-", "--nx", stdin=b"2s\tk1\tbatch k1\n%dms\tk2\tnew k2\n" % (AHEAD + 3500))
if ok((r.rc, r.out) == (0, b"2\n"), "offer wr --batch --nx of k1 (pending) and k2 (new) prints 2", r):
    wr.offered("k2", "new k2")
rc, js = lookup("wr", "k1")
eq((rc, js and js.get("due_ms")), (0, k1_due), "lookup wr k1: still its first due time")
# One batch naming an id twice, both times into the wheel: the later line
# replaces the earlier, whose entry is held back in the same call.
cli_batch(wr, [(AHEAD + 5000, "t1", "first t1"), (AHEAD + 6000, "t2", "other"), (AHEAD + 7000, "t1", "second t1")])
for i in ("k2", "t1", "t2"):
    rc, js = lookup("wr", i)
    if ok(rc == 0 and js and js.get("state") == "pending", f"lookup wr {i}: pending", js):
        wr.due[i] = js["due_ms"]
p = stats("wr")
if p is not None:
    eq(p["pending"], n_wr + 3, f"wr: stats pending {n_wr + 3} with k2, t1 and t2 (t1 once)")

section("list pending: due order, due times, payloads")
for q in (wf, wr, wbig, wsh):
    items = list_pending(q.name)
    ids = [m.get("id") for m in items]
    eq(sorted(ids), sorted(q.seq), f"list {q.name}: every pending item once")
    if not q.sharded:  # (a page holds one shard's items)
        dues = [m.get("due_ms") for m in items]
        eq(dues, sorted(dues, key=lambda d: d if d is not None else -1), f"list {q.name}: in due order")
        eq(ids, q.expected(), f"list {q.name}: in due order, ties in offer order")
    wrong = [(m.get("id"), m.get("due_ms"), m.get("payload")) for m in items
             if m.get("id") in q.payload and (m.get("due_ms") != q.due.get(m["id"]) or
                                              m.get("payload") != q.payload[m["id"]] or m.get("state") != "pending")]
    ok(not wrong, f"list {q.name}: each with state pending, its due time and payload", wrong[:5])

section("stats: pending and next_due_in_ms include the wheel's items")
for q in (wf, wr, wbig, wsh):
    s0 = server_ms()
    p = stats(q.name)
    s1 = server_ms()
    first = min(q.due.values(), default=-1)
    if p is not None:
        eq((p["pending"], p["ready"]), (len(q.seq), 0), f"stats {q.name}: pending {len(q.seq)}, ready 0")
        lo, hi = max(0, first - s1 - 1), max(0, first - s0 + 1)
        ok(lo <= p["next_due_in_ms"] <= hi, f"stats {q.name}: next_due_in_ms is the first due time - now",
           f"{p['next_due_in_ms']} not in [{lo}, {hi}]")

# stats reads the first bucket (its bz score is its start, up to 4 s early):
# three items in one bucket, the first cancelled, then the second: the next
# due time follows the first live one (a tombstone does not count).
wn = Q("wn")
eq(dq("offer", "wn", "1h", "anchor", "--id", "anchor").rc, 0, "wn: an anchor 1 h ahead (the slots)")
wn.offered("anchor", "anchor")
T0 = (server_ms() + 120000) // BUCKET_MS * BUCKET_MS + BUCKET_MS  # a bucket's start, 2 min ahead
py_offer(wn, [("t1", "t1", T0 + 2100), ("t2", "t2", T0 + 2600), ("t3", "t3", T0 + 3900)])
check_wheel_used("wn")
for gone, first in ((None, T0 + 2100), ("t1", T0 + 2600), ("t2", T0 + 3900)):
    if gone:
        eq(dq("cancel", "wn", gone).rc, 0, f"cancel wn {gone}")
        wn.drop(gone)
    s0 = server_ms()
    p = stats("wn")
    s1 = server_ms()
    if p is not None:
        ok(first - s1 - 1 <= p["next_due_in_ms"] <= first - s0 + 1,
           f"stats wn{' after cancelling ' + gone if gone else ''}: next_due_in_ms is {first - T0} ms past the bucket's start",
           f"{p['next_due_in_ms']} not in [{first - s1 - 1}, {first - s0 + 1}]")
for i in ("t3", "anchor"):
    eq(dq("cancel", "wn", i).rc, 0, f"cancel wn {i}")
p = stats("wn")
if p is not None:
    eq((p["pending"], p["next_due_in_ms"]), (0, -1), "stats wn: nothing pending (the bucket holds tombstones only)")

# ------------------------------------------------------------------ hostile data (its own queues)

section("serve: the API's counts, item and listing, and /metrics, include the wheel's items")


def metric(text, name, **labels):
    """The value of the sample NAME{labels} in a /metrics text, or None."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        head, _, value = line.rpartition(" ")
        if head.startswith(name + "{") and ",".join(sorted(head[len(name) + 1:-1].split(","))) == want:
            return float(value)
    return None


sport = closed_port()
srv = bg_dq("serve", "--listen", f"127.0.0.1:{sport}")
if ok(wait_for(lambda: http_call(sport, "GET", "/api/queues", timeout=2)[0] == 200, 10),
      f"serve answers on 127.0.0.1:{sport}", srv.err):
    st, js = http_call(sport, "GET", "/api/queues/wf")
    ok(st == 200 and isinstance(js, dict) and js.get("pending") == len(wf.seq),
       f"GET /api/queues/wf: pending {len(wf.seq)}", (st, js))
    st, js = http_call(sport, "GET", "/api/queues/wf/items/E01")
    ok(st == 200 and isinstance(js, dict) and (js.get("state"), js.get("due_ms"), js.get("payload")) ==
       ("pending", T, "equal 1"), "GET /api/queues/wf/items/E01: pending, due at T, its payload", (st, js))
    listed, cursor = [], ""
    for _ in range(50):
        st, js = http_call(sport, "GET", f"/api/queues/wf/items?state=pending&limit=1000{cursor}")
        if not ok(st == 200 and isinstance(js, dict), "GET /api/queues/wf/items?state=pending", (st, js)):
            break
        listed += [m.get("id") for m in js.get("items", [])]
        if not js.get("next_cursor"):
            break
        cursor = "&cursor=" + js["next_cursor"]
    eq(listed, wf.expected(), "GET /api/queues/wf/items: every pending item, in due order")
    st, body = http_call(sport, "GET", "/metrics")
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else ""
    eq(metric(text, "delayq_items", queue="wf", state="pending"), float(len(wf.seq)),
       'delayq_items{queue="wf",state="pending"}')
eq(srv.stop(), 0, "serve exits 0 on SIGTERM")

section("hostile: planted buckets, entries, bz members and index entries")
wh, wz = Q("wh"), Q("wz")
cli_offer(wh, AHEAD + 13000, "anchor", "in order")
# Three buckets from about AHEAD + 2.5 s ahead: a string, a list holding an
# entry that does not decode, a bz member with no list (no offer goes there:
# the random delays below start after it).
now = server_ms()
kA = (now + AHEAD + 2500) // BUCKET_MS
kB, kC = kA + 1, kA + 2
P = "dq:{wh}:"
redis("SET", f"{P}b:{kA}", "a planted string")
redis("ZADD", f"{P}bz", kA * BUCKET_MS, kA)
GARBAGE = b"no-such-entry-format \x01\xff"
redis("RPUSH", f"{P}b:{kB}", GARBAGE)
redis("ZADD", f"{P}bz", kB * BUCKET_MS, kB)
redis("ZADD", f"{P}bz", kC * BUCKET_MS, kC)
# A fourth, after the anchor: a list with no bz member (planted, or left by
# an OOM between the push and the index). An offer into it (the wheel: its
# bucket has a list) must index it, or the bucket is never cascaded.
kD = (now + AHEAD + 16000) // BUCKET_MS
redis("RPUSH", f"{P}b:{kD}", GARBAGE)
redis("HSET", id_index_key("wh", "ghost"), "ghost", wheel_ref(kA, 7))
rc, js = lookup("wh", "ghost")
eq((rc, js and js.get("state")), (1, "unknown"), "lookup of an index entry pointing into a bucket at nothing: unknown")
eq(dq("cancel", "wh", "ghost").rc, 1, "cancel of it exits 1 (not pending)")
py_offer(wh, [("inA", "into the string bucket", kA * BUCKET_MS + 100),
              ("inB", "after the garbage entry", kB * BUCKET_MS + 200)])
py_offer(wh, [("inD", "into the list with no index member", kD * BUCKET_MS + 300)])
eq((redis("LLEN", f"{P}b:{kD}"), redis("ZSCORE", f"{P}bz", kD)), (2, b"%d" % (kD * BUCKET_MS)),
   f"inD went into b:{kD}, which is now in bz at its start")
cli_batch(wh, random_lines("h", 10, 6000, 9000))
cli_offer(wh, AHEAD + 7000, "ghost", "ghost, offered for real")
look_all(wh)
redis("SET", "dq:{wz}:bz", "a planted string")
cli_offer(wz, AHEAD + 13000, "anchor", "in order")
cli_batch(wz, random_lines("z", 10, 3000, 9000))
look_all(wz)

# ------------------------------------------------------------------ schedulers and consumers

note(f"{(server_ms() - (T - AHEAD - 9000)) / 1000:.1f} s since the first offer")
section("a scheduler and consumers: everything delivered, the queues' time moved by their clock marks")
RC = Redis()
sched = bg_dq("schedule", "wf", "wc", "wr", "wbig", "wsh")
sched_h = bg_dq("schedule", "wh", "wz")
cons = {}
for q in (wf, wc, wr, wbig, wh, wz, wsh):
    cons[q.name] = consume(q.name, 120000)  # stopped (SIGTERM) once all arrived
cons["wk"] = bg_dq("take", "wk", "--count", "0", "--json", "--timeout", "120s")
work = bg_dq("work", "ww", "--exec", 'printf "%s\\n" "$DELAYQ_ID"')
driven = ["wf", "wc", "wr", "wbig", "wsh", "wh", "wz", "wk", "ww"]
ok(wait_for(lambda: all(redis("PUBSUB", "SHARDNUMSUB", P + "w")[1] > 0 for q in driven for P in prefixes(q)), 15),
   "every scheduler subscribed to its queue's channel")
# More items due at T while the schedulers run: before T's bucket is
# cascaded (LEAD ahead of its first due time), just after, and 200 ms
# before T. Each is due within the wheel's 40 s horizon, so it goes to T's
# near list (lua/lib/67_near.lua), not to the bucket nor the slots; they
# must still come after E08, in offer order.
kT = T // BUCKET_MS
sT = redis("ZSCORE", "dq:{wf}:bz", kT)
cT = int(float(sT)) - LEAD if sT is not None else T - LEAD  # when T's bucket is cascaded


def late_offer(j, at):
    """Offers E<j> due at T once wf's time stands at at; checks it went into
    T's near list."""
    if queue_clock("wf") > at + 100:  # the server's clock passed it while the offers ran (a slow build)
        note(f"E{j:02d} not offered: wf's time passed T - {T - at} ms before the driver began")
        return
    py_offer(wf, [(f"E{j:02d}", f"equal {j}, offered late", T)])
    ref = near_ref_of(redis("HGET", id_index_key("wf", f"E{j:02d}"), f"E{j:02d}"))
    eq(ref and ref[0], T, f"E{j:02d}, offered at T - {T - at} ms (queue time): into T's near list")


stalls = drive(driven, max(max(q.due.values(), default=0) for q in (wf, wc, wr, wbig, wsh, wh, wz, wk, ww)) + 1,
               hooks=[(at, lambda j=j, at=at: late_offer(j, at))
                      for j, at in ((9, cT - 1500), (10, cT + 300), (11, T - 200))])
ok(not stalls, f"the schedulers kept up with each step of the queues' time ({len(LOG)} steps)", stalls[:3])
# wo: its time pushed past every item, with no scheduler yet: all overdue.
wo_at = max(wo.due.values(), default=0) + 500
for P in prefixes("wo"):
    set_clock(P, wo_at)
ok(queue_clock("wo") > max(wo.due.values(), default=0) and bucket_keys("wo") and redis("LLEN", "dq:{wo}:r") == 0,
   "wo: all of it overdue (queue clock) before anything scheduled it: its buckets still there, nothing ready",
   (queue_clock("wo"), max(wo.due.values(), default=0), bucket_keys("wo")[:2]))
cons_o = bg_dq("take", "wo", "--count", len(wo.seq), "--json", "--timeout", "20s")
eq(cons_o.wait(40), 0, f"take wo --count {len(wo.seq)} (scheduling for itself) got them all")
byname = {q.name: q for q in (wf, wc, wr, wbig, wh, wz, wsh, wk)}
for name, c in cons.items():
    wait_for(lambda: c.count() >= len(byname[name].seq), 10)
time.sleep(0.3)  # time for one more (which must not come)
for name, c in cons.items():
    eq(c.stop(), 0, f"take {name} exits 0 on SIGTERM once all arrived")
ok(wait_for(lambda: work.count() >= len(ww.seq), 10), f"work ww ran its command {len(ww.seq)} times")
time.sleep(0.3)  # time for one more (which must not come)
eq(work.stop(), 0, "work ww exits 0 on SIGTERM")
ok(sched.running(), "the scheduler of wf wc wr is still running")
ok(sched_h.running(), "the scheduler of the hostile queues is still running")
eq(sched.stop(), 0, "the scheduler exits 0 on SIGTERM")
eq(sched.err.split(b"\n")[1:], [b""], "... and printed nothing on stderr but its first line")
eq(sched_h.stop(), 0, "the hostile queues' scheduler exits 0 on SIGTERM")
note(f"hostile scheduler's stderr: {sched_h.err[:300]!r}")

for q in (wf, wc, wr, wbig, wk, wsh):
    got = delivered(cons[q.name], q.name)
    check_delivery(q, got, q.name)
    late = [(m["id"], m["ready_ms"] - m["due_ms"]) for _, m in got if m["ready_ms"] - m["due_ms"] >= STEP]
    ok(not late, f"{q.name}: none moved {STEP} ms (a step of the clock) or more after its due time", late[:5])
    check_wheel_empty(q.name)
check_delivery(wo, delivered(cons_o, "wo"), "wo (caught up)")
check_wheel_empty("wo")
ran = [line.decode() for _, line in work.snapshot()]
eq(ran, ww.expected(), "work ww: each item once, in due order")
check_wheel_empty("ww")

section("hostile: the good items all arrived, the bad ones were set aside")
for q in (wh, wz):
    got = delivered(cons[q.name], q.name)
    check_delivery(q, got, q.name)
    late = [(m["id"], m["ready_ms"] - m["due_ms"]) for _, m in got if m["ready_ms"] - m["due_ms"] > 1500 * SLOW]
    ok(not late, f"{q.name}: no item moved more than 1.5 s after its due time (no stall)", late[:5])
x = aside("wh")
ok(any(e.endswith(GARBAGE) for e in x), "wh: the entry that does not decode is in the set-aside list", x)
ok(any(f"b:{kA}".encode() in e and b"wrong type" in e for e in x),
   f"wh: the string at b:{kA} was renamed away, with a note in the set-aside list", x)
p = stats("wh")
if p is not None:
    eq(p.get("set_aside"), len(x), "wh: stats counts the set-aside entries")
check_wheel_empty("wh", planted=True)
x = aside("wz")
ok(any(b"dq:{wz}:bz" in e and b"wrong type" in e for e in x), "wz: the string bz was renamed away, with a note", x)
check_wheel_empty("wz", planted=True)

# ------------------------------------------------------------------ lateness

section("lateness: 300 items due 42..46 s ahead, offered while a scheduler and a consumer run and time moves")
N = 300
wt = Q("wt")
sched = bg_dq("schedule", "wt")
cons_t = bg_dq("take", "wt", "--no-scheduler", "--count", N, "--json", "--timeout", "60s")
cli_offer(wt, AHEAD + 20000, "anchor", "in order: the batches' items come before it, into the wheel")
wt_printed = lambda: printed_all(cons_t, "wt")  # noqa: E731
wt.drop("anchor")  # not delivered: cancelled once the rest came
ok(wait_for(lambda: redis("PUBSUB", "SHARDNUMSUB", "dq:{wt}:w")[1] > 0, 15), "the scheduler of wt subscribed")
stalls = []
for b in range(10):
    cli_batch(wt, [(AHEAD + rnd.randint(1000, 5000), f"t{b}-{j:02d}", f"late {b} {j}") for j in range(30)])
    stalls += drive(["wt"], queue_clock("wt") + 150, settled=wt_printed)  # 150 ms between batches
check_wheel_used("wt")
# Past every item (due at most AHEAD + 5 s after its offer), before the anchor.
stalls += drive(["wt"], queue_clock("wt") + AHEAD + 5500, settled=wt_printed)
ok(not stalls, "the scheduler kept up with each step of wt's time", stalls[:3])
rc = cons_t.wait(40)
eq(rc, 0, f"take wt --count {N} got them all")
got = delivered(cons_t, "wt")
ids = [m["id"] for _, m in got]
eq((len(ids), len(set(ids))), (N, N), f"{N} items, each once")
eq(set(ids), set(wt.seq), "the ones offered (not the anchor, due later)")
early = [(m["id"], m["due_ms"], m["ready_ms"]) for _, m in got if m["ready_ms"] < m["due_ms"]]
ok(not early, "none moved before its due time (queue clock)", early[:5])
moved = [m["ready_ms"] - m["due_ms"] for _, m in got]
recv = [clock_at(t) - m["due_ms"] for t, m in got if clock_at(t) is not None]
ok(len(recv) == len(got) and max(recv, default=0) <= 1500 * SLOW,
   "none received more than 1.5 s after its due time (queue clock when it came)", f"max {max(recv, default=0)} ms")
if got:
    note(f"moved after due: p50 {percentile(moved, 50)} ms, p99 {percentile(moved, 99)} ms, max {max(moved)} ms; "
         f"received after due (queue clock): p50 {percentile(recv, 50)} ms, max {max(recv, default=0)} ms")
ok(sched.running(), "the scheduler is still running")
eq(sched.stop(), 0, "it exits 0 on SIGTERM")
eq(sched.err.split(b"\n")[1:], [b""], "... and printed nothing on stderr but its first line")
eq(dq("cancel", "wt", "anchor").rc, 0, "cancel wt anchor (due later)")
check_wheel_empty("wt")

# ------------------------------------------------------------------ a burst

section("a burst: 20,000 offers of random delays of 40-50 s by offer --batch, one take once time passed them")
NB = 20000
PB = "dq:{wburst}:"
eq(dq("offer", "wburst", "90s", "anchor", "--id", "anchor").rc, 0, "an anchor 90 s ahead (the slots)")
delays = [rnd.randint(40000, 50000) for _ in range(NB)]
data = "".join(f"{d}ms\tb{j:05d}\tburst {j}\n" for j, d in enumerate(delays)).encode()
s0 = server_ms()
r = dq("offer", "wburst", "--batch", "-", stdin=data, timeout=120)
s1 = server_ms()
eq((r.rc, r.out), (0, b"%d\n" % NB), f"offer wburst --batch of {NB} lines")
in_wheel = sum(redis("LLEN", k) for k in bucket_keys("wburst"))
eq((in_wheel, slot_records("wburst")), (NB, 1), f"all {NB} in the wheel's buckets, only the anchor in the slots")
# Buckets of over 4,096 entries (WHEEL_PEEK) are not read by stats: the
# first one's start stands, at most a bucket before the first due time.
first_lo, first_hi = s0 + min(delays), s1 + min(delays)
t0 = server_ms()
p = stats("wburst")
t1 = server_ms()
if p is not None:
    ok(first_lo - BUCKET_MS - t1 - 1 <= p["next_due_in_ms"] <= first_hi - t0 + 1,
       "stats wburst: next_due_in_ms at most a bucket before the first due time (big buckets: their start)",
       f"{p['next_due_in_ms']} not in [{first_lo - BUCKET_MS - t1 - 1}, {first_hi - t0 + 1}]")
for P in prefixes("wburst"):
    set_clock(P, s1 + 50001)  # past every item's due time, before the anchor's
r = dq("take", "wburst", "--count", NB, "--json", "--timeout", "60s", timeout=120)
eq(r.rc, 0, f"take wburst --count {NB} (its own scheduler) exits 0")
msgs = r.json_lines()
ids = [m.get("id") for m in msgs]
eq((len(ids), len(set(ids))), (NB, NB), f"{NB} items, each once")
eq(set(ids), {f"b{j:05d}" for j in range(NB)}, "the ones offered (not the anchor)")
early = [(m["id"], m["due_ms"], m["ready_ms"]) for m in msgs if m["ready_ms"] < m["due_ms"]]
ok(not early, "none moved before its due time (queue clock)", early[:5])
keys = [(m["due_ms"], m["id"]) for m in msgs]
ok(keys == sorted(keys), "in due order, ties in offer order",
   next(((a, b) for a, b in zip(keys, keys[1:]) if b < a), None))
off = [(m["id"], m["due_ms"]) for m in msgs
       if not s0 + delays[int(m["id"][1:])] <= m["due_ms"] <= s1 + delays[int(m["id"][1:])]]
ok(not off, "each due at its offer's time plus its delay", off[:5])
rc, js = lookup("wburst", "anchor")
eq((rc, js and js.get("state")), (0, "pending"), "the anchor still pending")
eq(dq("cancel", "wburst", "anchor").rc, 0, "cancel wburst anchor")
check_wheel_empty("wburst")

RC.close()
finish()
