"""planted.py - what the scripts read from Redis is outside input.

Table-driven: for each kind of bad data (entries and records that do not
decode, ids that break the id rule, numbers out of range, corrupt counters
and settings, keys of the wrong type, huge attempt counts, undecodable dead
letters), plant it beside good items, run the commands, and check:
  - every good item is delivered exactly once;
  - the bad one is set aside with a reason (or, for a corrupt counter or
    setting, the call fails with an error naming the key and field, and
    nothing is written);
  - offered = delivered + pending + ready + inflight + dead (stats), and
    set_aside = what was planted;
  - Redis is never blocked: the work over many entries runs in bounded
    calls (counted in INFO commandstats, which cannot flake), a PING loop
    beside the commands sees max latency under 500 ms, and SLOWLOG holds
    nothing above 100 ms. The time bounds are loose on purpose: a 500-entry
    batch takes under 1 ms here but was once logged at 10.2 ms on a busy CI
    machine, so they catch a script that walks a whole key, not noise.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "lib")))
from dqtest import *  # noqa: E402,F403

ORD = 2048
DUE_MAX = 4398046511103


def k(q, suffix):
    return f"dq:{{{q}}}:{suffix}".encode()


class Pinger:
    """PINGs Redis every 10 ms from a thread; max_ms is the worst latency."""

    def __init__(self):
        self.max_ms, self.n, self._stop = 0.0, 0, False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        with Redis(timeout=30) as r:
            while not self._stop:
                t0 = time.monotonic()
                r.cmd("PING")
                self.max_ms = max(self.max_ms, (time.monotonic() - t0) * 1000)
                self.n += 1
                time.sleep(0.01)

    def stop(self):
        self._stop = True
        self.t.join(10)


redis("CONFIG", "SET", "slowlog-log-slower-than", "100000")
redis("SLOWLOG", "RESET")
pinger = Pinger()


def take_all(q, manual=False):
    """Takes until nothing comes; returns [(id, payload bytes)]. With manual,
    acks each delivery."""
    got = []
    for _ in range(50):
        args = ["take", q, "--count", "64", "--timeout", "400ms", "--json"]
        if manual:
            args += ["--ack", "manual"]
        r = dq(*args)
        msgs = r.json_lines()
        if not msgs:
            break
        for m in msgs:
            got.append((m["id"], msg_payload(m)))
            if manual:
                a = dq("ack", q, m["id"], m["token"])
                ok(a.rc == 0, f"{q}: ack {m['id']} exits 0", a)
    return got


def offer_goods(q, names, delay="0"):
    for n in names:
        r = dq("offer", q, delay, f"payload-{n}", "--id", n)
        ok(r.rc == 0, f"{q}: offer {n}", r)


def aside(q):
    return redis("LRANGE", k(q, "x"), 0, -1)


def aside_reason(e):
    """The reason of a set-aside entry '1|reason|idlen|<id><raw>'."""
    return e.split(b"|", 2)[1].decode("latin-1")


def check_balance(q, offered, delivered, planted):
    st = stats(q)
    if st is None:
        return
    eq(offered, len(delivered) + st["pending"] + st["ready"] + st.get("inflight", 0) + st.get("dead", 0),
       f"{q}: offered = delivered + pending + ready + inflight + dead")
    eq(st.get("set_aside"), planted, f"{q}: set_aside = the {planted} planted")


def check_delivered(q, got, goods):
    ids = [i for i, _ in got]
    eq(sorted(ids), sorted(goods), f"{q}: every good item delivered exactly once")
    ok(all(p == f"payload-{i}".encode() for i, p in got), f"{q}: with its payload")


def plant_slot(q, due, record, name="planted"):
    redis("ZADD", k(q, "zs"), str(due * ORD), name)
    redis("ZADD", k(q, "q:" + name), str(due * ORD), record)


def lease_records(q):
    """(slot key, record, score) of every lease record (version 3 or 4) of q."""
    for s_ in redis("ZRANGE", k(q, "zs"), 0, -1):
        sk = k(q, "q:" + s_.decode())
        rs = redis("ZRANGE", sk, 0, -1, "WITHSCORES")
        for member, score in zip(rs[0::2], rs[1::2]):
            if member[:2] in (b"3|", b"4|"):
                yield sk, member, score


def parse_lease(rec):
    """A lease record as (version, max attempts, token prefix, entries of its
    blocks, ids of its blocks: version 4's, else None)."""
    v = int(rec[:1])
    if v == 4:
        _, m, tl, n, il, rest = rec.split(b"|", 5)
        ids, body = rest[int(tl):int(tl) + int(il)].split(b" "), rest[int(tl) + int(il):]
    else:
        _, m, tl, n, rest = rec.split(b"|", 4)
        ids, body = None, rest[int(tl):]
    prefix = rest[:int(tl)]
    blocks = []
    for _ in range(int(n)):
        ln, body = body.split(b"|", 1)
        blocks.append(body[:int(ln)])
        body = body[int(ln):]
    return v, int(m), prefix, blocks, ids


def entry_id(e):
    """The id of a ready entry (version 1 or 2), b"" for an empty block."""
    if not e:
        return b""
    f = e.split(b"|", 6) if e[:1] == b"2" else e.split(b"|", 4)
    il, rest = (int(f[4]), f[6]) if e[:1] == b"2" else (int(f[3]), f[4])
    return rest[:il]


def lease_record(m, prefix, blocks, v=4, ids=None):
    """A lease record of version v: version 4's ids are those of its blocks'
    entries unless given."""
    body = b"".join(b"%d|" % len(e) + e for e in blocks)
    if v == 3:
        return b"3|%d|%d|%d|" % (m, len(prefix), len(blocks)) + prefix + body
    ids = b" ".join(ids if ids is not None else [entry_id(e) for e in blocks])
    return b"4|%d|%d|%d|%d|" % (m, len(prefix), len(blocks), len(ids)) + prefix + ids + body


def rewrite(q, token, before, max_):
    """Rewrites the lease record holding token (its prefix, the item's
    block number, '.', the record's score): its max attempts become max_, and the item's entry
    claims `before` earlier attempts (bytes: any digits), same score.
    Whether a record was found."""
    token = token.encode()
    for sk, member, score in lease_records(q):
        v, m, prefix, blocks, ids = parse_lease(member)
        if not token.startswith(prefix):
            continue
        i = int(token[len(prefix):].split(b".")[0]) - 1
        e = blocks[i]
        if e[:1] == b"1":
            _, due, ready, il, rest = e.split(b"|", 4)
            blocks[i] = b"2|%s|%s|%s|%s|0|%s" % (due, ready, before, il, rest)
        else:
            f = e.split(b"|", 6)
            f[3] = before
            blocks[i] = b"|".join(f)
        redis("ZREM", sk, member)
        redis("ZADD", sk, score, lease_record(max_, prefix, blocks, v, ids))
        return True
    return False


def entry_v1(due, id_, payload=b"p"):
    return b"1|%d|%d|%d|" % (due, due, len(id_)) + id_ + payload


# ------------------------------------------------------------------ ready entries and slot records

BAD_IDS = [(b"a b", "space"), (b"a\tb", "tab"), (b"a\nb", "newline"), (b"a\x7fb", "0x7f"),
           (b"a\x80b", "0x80"), (b"x" * 129, "129 bytes")]

now = server_ms()
CASES = []  # (name, [(how, bytes)], reason substring)
for bid, what in BAD_IDS:
    CASES.append((f"ready entry, id with {what}", [("ready", entry_v1(now, bid))], "invalid id"
                  if len(bid) <= 128 else "undecodable"))
CASES += [
    ("ready entry, empty id", [("ready", b"1|5|6|0|payload")], "undecodable"),
    ("ready entry, attempts at the cap", [("ready", b"2|5|6|999999999|2|0|idp")], "out of range"),
    ("ready entry, attempts of 30 digits", [("ready", b"2|5|6|" + b"9" * 30 + b"|2|0|idp")], "out of range"),
    ("ready entry, due past DUE_MAX", [("ready", b"1|%d|6|2|idp" % (DUE_MAX + 1))], "out of range"),
    ("ready entry, error length past the end", [("ready", b"2|5|6|1|2|99|idp")], "undecodable"),
    ("ready entry, garbage", [("ready", b"\x00\xff|||")], "undecodable"),
    ("slot record v1, id with tab", [("slot", b"1|3|a\tbpayload")], "invalid id"),
    ("slot record v1, id with 0x80", [("slot", b"1|3|a\x80bpayload")], "invalid id"),
    ("slot record v2, attempts of 12 digits", [("slot", b"2|999999999999|3|5|2|0|0|idp")], "out of range"),
    ("slot record v2, max attempts -1", [("slot", b"2|1|-1|5|2|3|0|idtokp")], "undecodable"),
    ("slot record v2, due past DUE_MAX", [("slot", b"2|1|3|%d|2|0|0|idp" % (DUE_MAX + 1))], "out of range"),
    ("slot record v2, token of 200 bytes", [("slot", b"2|1|3|5|2|200|0|id" + b"t" * 200)], "undecodable"),
    ("slot record, lengths past the end", [("slot", b"1|99|orphan")], "undecodable"),
    ("slot record, unknown version", [("slot", b"9future")], "unknown record format"),
    ("slot record, negative score", [("negslot", b"1|2|idp")], "negative score"),
    ("lease record, empty token prefix", [("slot", b"3|5|0|1|0|")], "undecodable"),
    ("lease record, block length past the end", [("slot", b"3|5|2|1|t.99|1|1|1|2|idp")], "undecodable"),
    ("lease record, 1001 blocks", [("slot", b"3|5|2|1001|t." + b"0|" * 1001)], "undecodable"),
    ("lease record, bytes after its blocks", [("slot", b"3|5|2|1|t.0|junk")], "undecodable"),
    ("lease record, block length of 10 digits", [("slot", b"3|5|2|1|t.0000000001|x")], "undecodable"),
    ("lease record v4, ids past the end", [("slot", b"4|5|2|1|99|t.id11|1|1|1|2|idp")], "undecodable"),
    ("lease record v4, two ids for one block", [("slot", b"4|5|2|1|5|t.id id11|1|1|1|2|idp")], "undecodable"),
    ("lease record v4, an id for an empty block", [("slot", b"4|5|2|2|3|t.id 0|11|1|1|1|2|idp")], "undecodable"),
    ("lease record v4, no id for a full block", [("slot", b"4|5|2|2|3|t. id11|1|1|1|2|idp0|")], "undecodable"),
    ("lease record v4, an id of 129 bytes", [("slot", b"4|5|2|1|129|t." + b"i" * 129 + b"11|1|1|1|2|idp")],
     "undecodable"),
]

for i, (name, plants, reason) in enumerate(CASES):
    for mode in ("take", "manual"):
        q = f"pl{i}{mode[0]}"
        section(f"{name} ({'take --ack manual + ack' if mode == 'manual' else 'take'})")
        goods = [f"g{j}" for j in range(6)]
        offer_goods(q, goods[:3])
        now = server_ms()
        for how, data in plants:
            if how == "ready":
                redis("RPUSH", k(q, "r"), data)
            elif how == "slot":
                plant_slot(q, now - 500, data)
            else:
                redis("ZADD", k(q, "zs"), "-100", "neg")
                redis("ZADD", k(q, "q:neg"), "-100", data)
        offer_goods(q, goods[3:])
        got = take_all(q, manual=(mode == "manual"))
        check_delivered(q, got, goods)
        x = aside(q)
        eq(len(x), len(plants), f"{q}: the bad one is set aside")
        if x:
            ok(reason in aside_reason(x[0]), f"{q}: with a reason naming it ({reason!r})", x[0][:120])
            # A never-delivered slot record reaches the set-aside list as the
            # ready entry the transfer made of it: the record after its '1'.
            ok(x[0].endswith(plants[0][1][1:]), f"{q}: and its raw bytes", x[0][:120])
        check_balance(q, len(goods), got, len(plants))

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

# ------------------------------------------------------------------ corrupt counters

for field in ("pending", "inflight", "slots"):
    for bad in ("abc", "1.5", "", " 1", "01", "99999999999999999999"):
        q = f"plc{field[:2]}{len(bad)}{abs(hash(bad)) % 1000}"
        section(f"counter {field} = {bad!r}")
        offer_goods(q, ["c1"], delay="10s")
        redis("HSET", k(q, "n"), field, bad)
        before = sorted(redis("KEYS", f"dq:{{{q}}}:*"))
        snap = {kk: redis("DUMP", kk) for kk in before}
        for args in (("offer", q, "0", "x", "--id", "c2"),
                     ("take", q, "--ack", "manual", "--timeout", "0"), ("stats", q), ("cancel", q, "c1")):
            r = dq(*args)
            ok(r.rc == 3 and f"counter {field} in dq:{{{q}}}:n".encode() in r.err,
               f"{args[0]}: exit 3, the error names the key and field", r)
        # A plain take neither reads nor writes the counters: it is not refused.
        # Its scheduler's catch-up transfer does read them, and may report
        # that (a line of its own) before the take ends.
        r = dq("take", q, "--timeout", "0")
        told = [ln for ln in r.err.splitlines() if b"counter" in ln]
        ok(r.rc == 1 and all(b"transfer failed" in ln for ln in told),
           "plain take: not refused (exit 1: nothing due)", r)
        after = sorted(redis("KEYS", f"dq:{{{q}}}:*"))
        ok(after == before and all(redis("DUMP", kk) == snap[kk] for kk in after), "nothing written")
        redis("HDEL", k(q, "n"), field)
        r = dq("cancel", q, "c1")
        eq(r.rc, 0, "after HDEL of the field, cancel works")

# ------------------------------------------------------------------ corrupt settings

SETTINGS = [("lease_ms", "0"), ("lease_ms", "-5"), ("lease_ms", "abc"), ("lease_ms", "5000000000000"),
            ("max_attempts", "-1"), ("max_attempts", "1000000000000"), ("max_attempts", "2.5")]
for field, bad in SETTINGS:
    q = f"pls{field[:2]}{abs(hash(bad)) % 10000}"
    section(f"setting {field} = {bad!r}")
    offer_goods(q, ["s1", "s2"])
    redis("HSET", k(q, "cfg"), field, bad)
    r = dq("take", q, "--ack", "manual", "--timeout", "0")
    ok(r.rc == 3 and f"setting {field} in dq:{{{q}}}:cfg".encode() in r.err and bad.encode() in r.err,
       "take --ack manual: exit 3, the error names the setting, key and value", r)
    eq(redis("LLEN", k(q, "r")), 2, "nothing popped")
    # work retries a failed take (as after any Redis error), saying why
    # each time; it never runs without the lease.
    w = bg_dq("work", q, "--exec", "true")
    time.sleep(1.2)
    w.stop()
    ok(f"setting {field} in dq:{{{q}}}:cfg".encode() in w.err, "work: its takes fail naming the setting",
       w.err[-300:])
    eq(redis("LLEN", k(q, "r")), 2, "still nothing popped")
    r = dq("config", q)
    ok(r.rc == 3 and field.encode() in r.err, "config (read): the error names it", r)
    eq(dq("config", q, "--reset").rc, 0, "config --reset repairs it")
    check_delivered(q, take_all(q, manual=True), ["s1", "s2"])

for field, bad in (("backoff_base_ms", "x"), ("backoff_max_ms", "-1")):
    q = f"plb{field[8:10]}"
    section(f"setting {field} = {bad!r}: a nack with the backoff")
    offer_goods(q, ["b1"])
    r = dq("take", q, "--ack", "manual", "--json", "--timeout", "2s")
    m = r.json_lines()
    redis("HSET", k(q, "cfg"), field, bad)
    if ok(len(m) == 1, "b1 taken", r):
        r = dq("nack", q, "b1", m[0]["token"])
        ok(r.rc == 3 and f"setting {field} in dq:{{{q}}}:cfg".encode() in r.err, "nack: exit 3, names it", r)
        st = stats(q)
        eq(st and st["inflight"], 1, "b1 is still in flight, its lease intact")
        eq(dq("nack", q, "b1", m[0]["token"], "--delay", "0").rc, 0, "a nack with a delay does not need it")

# ------------------------------------------------------------------ keys of the wrong type

RENAMED = ["zs", "r", "x", "s", "slot", "bucket"]
for which in RENAMED:
    q = f"plt{which}"
    section(f"key {which} of the wrong type (a string)")
    goods = ["t1", "t2", "t3"]
    key = {"slot": k(q, "q:junk"), "bucket": id_index_key(q, "t2").encode()}.get(which, k(q, which))
    if which == "slot":
        redis("ZADD", k(q, "zs"), str((server_ms() + 200) * ORD), "junk")
    redis("SET", key, "junk")
    offer_goods(q, goods[:1])
    offer_goods(q, goods[1:], delay="300ms")
    if which == "x":
        redis("RPUSH", k(q, "r"), entry_v1(server_ms(), b"bad\x01id"))
    got = take_all(q)
    check_delivered(q, got, goods)
    bad = redis("KEYS", f"dq:{{{q}}}:bad:*")
    ok(len(bad) >= 1 and all(redis("GET", b) == b"junk" for b in bad if redis("TYPE", b) == "string"),
       "the key was renamed out of the way, its data kept", bad)
    notes = [e for e in aside(q) if b"wrong type" in e]
    ok(len(notes) >= 1, "a note in the set-aside list names it", aside(q))

for which in ("n", "cfg"):
    q = f"plt{which}"
    section(f"key {which} of the wrong type: an error naming it")
    offer_goods(q, ["u1"]) if which == "cfg" else None
    redis("DEL", k(q, which))
    redis("RPUSH", k(q, which), "junk")
    r = dq("take", q, "--ack", "manual", "--timeout", "0")
    ok(r.rc == 3 and f"dq:{{{q}}}:{which}".encode() in r.err and b"WRONGTYPE" in r.err, "take: exit 3, names the key", r)

for which in ("d", "dz"):
    q = f"plt{which}"
    section(f"dead letters key {which} of the wrong type: a burial renames it")
    redis("SET", k(q, which), "junk")
    eq(dq("config", q, "--max-attempts", "1").rc, 0, "config --max-attempts 1")
    offer_goods(q, ["v1"])
    r = dq("take", q, "--ack", "manual", "--json", "--timeout", "2s")
    m = r.json_lines()
    if ok(len(m) == 1, "v1 taken", r):
        eq(dq("nack", q, "v1", m[0]["token"]).rc, 0, "nack on its last attempt")
        eq(dq("dead", q, "count").out, b"1\n", "v1 is a dead letter")
        ok(len(redis("KEYS", f"dq:{{{q}}}:bad:*")) == 1, "the old key renamed, kept")

# ------------------------------------------------------------------ dead letters

section("dead list: 1,501 dead letters, one undecodable and one without its record")
q = "pldead"
died = server_ms() - 100000
args_h, args_z = [], []
for j in range(1501):
    id_ = f"d{j:04d}"
    rec = b"1|%d|3|%d|6|0|failedpayload-%s" % (died + j, died, id_.encode())
    if j == 700:
        rec = b"1|%d|3|x|garbage\xff" % (died + j)
    args_h += [id_, rec]
    args_z += [str(died + j), id_]
redis("HSET", k(q, "d"), *args_h)
redis("ZADD", k(q, "dz"), *args_z)
redis("ZADD", k(q, "dz"), str(died + 2000), "ghost")
r = dq("dead", q, "list")
lines = r.out.split(b"\n")[:-1]
eq((r.rc, len(lines)), (0, 1502), "list: every member, 1,502 lines")
r = dq("dead", q, "list", "--json")
js = r.json_lines()
eq(len(js), 1502, "list --json: 1,502 objects")
byid = {j_["id"]: j_ for j_ in js}
ok(byid.get("d0700", {}).get("reason") == "undecodable", "the bad one: reason 'undecodable'", byid.get("d0700"))
ok(byid.get("ghost", {}).get("reason") == "missing record", "the ghost: reason 'missing record'", byid.get("ghost"))
r = dq("dead", q, "redrive", "d0700")
ok(r.rc in (0, 1) and r.out == b"0\n", "redrive of the undecodable one: 0 moved", r)
x = aside(q)
ok(len(x) == 1 and x[0].endswith(b"garbage\xff") and b"undecodable dead letter" in x[0],
   "... set aside with its raw bytes and a reason, not dropped", x)
n0 = command_calls("fcall")
r = dq("dead", q, "redrive")
n1 = command_calls("fcall")
eq((r.rc, r.out), (0, b"1500\n"), "redrive all: the 1,500 good ones moved back")
ok(n1 - n0 >= 4, f"... in bounded calls: {n1 - n0} FCALLs for 1,501 entries (500 at most each)")
eq(dq("dead", q, "count").out, b"0\n", "no dead letter left")
eq(redis("LLEN", k(q, "r")), 1500, "1,500 ready")

section("dead redrive of a dead letter with an invalid id: set aside")
q = "pldead2"
redis("HSET", k(q, "d"), "a b", b"1|5|1|5|1|0|rp")
redis("ZADD", k(q, "dz"), "5", "a b")
r = dq("dead", q, "redrive")
eq(r.out, b"0\n", "0 moved")
x = aside(q)
ok(len(x) == 1 and b"invalid id" in x[0], "set aside with its reason", x)

# ------------------------------------------------------------------ Redis never blocked

pinger.stop()
ok(pinger.n > 50 and pinger.max_ms < 500, f"PING latency beside the commands: max {pinger.max_ms:.1f} ms "
   f"over {pinger.n} PINGs")
slow = redis("SLOWLOG", "GET", "128")
slow = [s for s in slow if s[2] > 100000]
ok(not slow, "SLOWLOG: nothing above 100 ms", [(s[2], s[3][:3]) for s in slow])
redis("CONFIG", "SET", "slowlog-log-slower-than", "10000")

finish()
