"""planted.py - helpers of the planted_*.py tests (tests/cli/scripts/):
what the scripts read from Redis is outside input. Plants records, entries
and lease records of every version beside good items, takes them through
the CLI and checks the balance; watch() and unblocked() check that Redis is
never blocked meanwhile (a PING loop and the slow log).

What the parts check, table-driven: for each kind of bad data (entries and records that do not
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
import threading
import time

from dqtest import *  # noqa: F403

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


def watch():
    """Starts watching that Redis is never blocked: the slow log from here
    (above 100 ms), and a Pinger. Returns the Pinger for unblocked()."""
    redis("CONFIG", "SET", "slowlog-log-slower-than", "100000")
    redis("SLOWLOG", "RESET")
    return Pinger()


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


def entry_cases():
    """(name, [(how, bytes)], reason substring) of each bad ready entry or
    slot record, planted beside good items."""
    bad_ids = [(b"a b", "space"), (b"a\tb", "tab"), (b"a\nb", "newline"), (b"a\x7fb", "0x7f"),
               (b"a\x80b", "0x80"), (b"x" * 129, "129 bytes")]

    now = server_ms()
    cases = []
    for bid, what in bad_ids:
        cases.append((f"ready entry, id with {what}", [("ready", entry_v1(now, bid))], "invalid id"
                      if len(bid) <= 128 else "undecodable"))
    cases += [
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
    return cases


def plant_entries(mode):
    """Each case of entry_cases() taken by mode: "take" (a plain take) or
    "manual" (take --ack manual, each delivery acked). Checks that the good
    items are delivered once, the bad one set aside with its reason and
    bytes, and the balance."""
    for i, (name, plants, reason) in enumerate(entry_cases()):
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


def unblocked(pinger):
    """Checks what watch() started: PING latency under 500 ms, nothing in the
    slow log above 100 ms; then puts the slow log's threshold back."""
    pinger.stop()
    ok(pinger.n > 50 and pinger.max_ms < 500, f"PING latency beside the commands: max {pinger.max_ms:.1f} ms "
       f"over {pinger.n} PINGs")
    slow = redis("SLOWLOG", "GET", "128")
    slow = [s for s in slow if s[2] > 100000]
    ok(not slow, "SLOWLOG: nothing above 100 ms", [(s[2], s[3][:3]) for s in slow])
    redis("CONFIG", "SET", "slowlog-log-slower-than", "10000")
