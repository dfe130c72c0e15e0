"""planted_stored.py - what the scripts read from Redis is outside input:
corrupt counters and settings, keys of the wrong type, undecodable dead
letters (part 4 of 4, with planted_entries.py, planted_acked.py and
planted_leases.py).

The checks, the same for every part, are told in tests/lib/planted.py.
"""
# tier: slow (about 21 s): make test runs it, make test-fast does not
import os
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403
from planted import *  # noqa: E402,F403

pinger = watch()

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

unblocked(pinger)
finish()
