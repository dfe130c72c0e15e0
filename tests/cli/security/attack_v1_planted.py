"""attack_v1_planted.py - schedules of the previous release (spec v1,
dq:{Q}:ticks: lib/85_recurring_v1.lua) planted by a writer to Redis, run by
a user who may EVAL but not FUNCTION LOAD (so the migration runs from the
trimmed EVAL texts: tools/lua-trim.awk).

  - a v1 spec under a name no schedule can have ('a@b', an escape byte) is
    not migrated: it enters no tick bucket, so it makes no items after the
    migration (it ticked every second, unlisted and past removing, as
    `schedules` and `every ... remove` refuse such a name); its one pending
    item of the previous release stays an ordinary item;
  - a good v1 schedule beside them migrates and ticks, through the EVAL
    texts (no "nonexistent global" in the scheduler's lines), and `every`
    on another v1 one (recurring.lua's v1 hook) changes it;
  - dq:{Q}:ticks of another type, and the HSCAN cursor dq:{Q}:smig as a
    list or garbage digits, fail no transfer: an ordinary item offered
    beside them is taken;
  - a schedule migrated, then removed by a client of the previous release
    (its spec and payload deleted, its bucket member left: that release
    knew no buckets): it ticked on, unlisted, and `schedules remove` said
    there was no such schedule; now it lists as bad, remove exits 0 and
    its ticks stop; one set again by that release (spec v1 of another
    interval) ticks on one grid after its migration, not on both;
  - v1 specs whose numbers are negative, huge or NaN list as bad (a
    payload length of -5 or 1e300 was listed as such) and fail no
    transfer;
  - a scheduler whose user may not HSCAN, on a queue with a v1 schedule
    only the HSCAN finds (paused), runs a few transfers, not ~10,000 a
    second (each said 'more');
  - two schedulers started at once on v1 schedules make each tick once;
  - the keys of the tick buckets a schedule's next ticks go into, planted
    as strings, fail no transfer and lose no schedule: they are renamed
    away (noted in the set-aside list) and the schedules, today's and a
    migrated one, tick on (the transfer failed after popping the
    schedules out of their bucket: they were gone).
"""
# tier: slow
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

PASSWORD = "v1-planted-pw"
R = Redis(timeout=30)
eq(R.cmd("ACL", "SETUSER", "dqv1", "reset", "on", ">" + PASSWORD, "~*", "&*", "+@all", "-function"), "OK",
   "a user who may EVAL but not FUNCTION LOAD")
EURL = f"redis://dqv1:{PASSWORD}@127.0.0.1:{PORT}"
R.cmd("FUNCTION", "FLUSH")

# A spec v1 as the previous release wrote it (lib/85_recurring_v1.lua), its
# pending item for tick NEXT (id NAME@NEXT) offered as that release did.
PLANT_V1 = """
local s = {v = 1, kind = 'every', every = tonumber(ARGV[2]), start = tonumber(ARGV[3]), stop = 0,
           missed = 'one', paused = 0, text = ARGV[2] .. 'ms', zone = '', plen = #ARGV[5],
           next = tonumber(ARGV[4]), last = -1}
redis.call('HSET', KEYS[1], ARGV[1], cmsgpack.pack(s))
redis.call('HSET', KEYS[2], ARGV[1], ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])
return 1
"""


def ev(*args, **kw):
    """delayq as the user without FUNCTION rights (EVAL fallback only)."""
    return dq("--redis", EURL, *args, redis=False, **kw)


def plant_v1(q, name, every, nxt, payload):
    P = "dq:{" + q + "}:"
    ev("offer", q, f"{max(0, nxt - server_ms())}ms", payload, "--id", name + b"@" + str(nxt).encode()
       if isinstance(name, bytes) else f"{name}@{nxt}")
    redis("EVAL", PLANT_V1, 3, P + "sched", P + "spay", P + "ticks", name, every, nxt - every, nxt, payload)


def bucket_members(q):
    P = "dq:{" + q + "}:"
    out = []
    for b in redis("ZRANGE", P + "tb", 0, -1):
        out += redis("LRANGE", P + "tb:" + b.decode(), 0, -1)
    return out


def ids_taken(q, secs):
    r = ev("take", q, "--count", "0", "--json", "--no-scheduler", "--timeout", f"{int(secs * 1000)}ms")
    return [m.get("id") for m in r.json_lines()]


def ticking(q, name):
    """Queue q with today's schedule name, every 1 s, ticking under a
    scheduler (returned, with q and its key prefix)."""
    eq(ev("every", q, name, "1s", "p-" + name).rc, 0, f"today's schedule {name}, every 1 s")
    b = Bg([BIN, "--redis", EURL, "schedule", q], name="delayq schedule (EVAL only)")
    ok(wait_for(lambda: len(ids_taken(q, 0.3)) > 0, 5), f"{name} ticks")
    return q, "dq:{" + q + "}:", b


section("v1 schedules with names no schedule can have are not migrated")
Q = "v1bad"
P = "dq:{" + Q + "}:"
now = server_ms()
nxt = now + 300
plant_v1(Q, "a@b", 1000, nxt, "p-at")
plant_v1(Q, b"esc\x1bname", 1000, nxt, "p-esc")
plant_v1(Q, "good", 1000, nxt, "p-good")
plant_v1(Q, "other", 60000, now + 60000, "p-other")
sched = Bg([BIN, "--redis", EURL, "schedule", Q], name="delayq schedule (EVAL only)")
ok(wait_for(lambda: redis("EXISTS", P + "ticks") == 0, 10), "the scheduler migrates them: dq:{Q}:ticks is gone")
members = bucket_members(Q)
eq(sorted(m.split(b"|")[0] for m in members), [b"good", b"other"], "only the good names enter a tick bucket")
r = ev("every", Q, "other", "2s", "p-other2")
ok(r.rc == 0, "every on a v1 schedule through EVAL (recurring.lua's v1 hook)", r.errtext)
ok(wait_for(lambda: server_ms() >= nxt + 2600, 5), "three ticks of 1 s pass")
ids = ids_taken(Q, 1)
eq(sorted(i for i in ids if not i.startswith(("good@", "other@"))), [f"a@b@{nxt}"],
   "the bad names made no item after the migration (a@b's pending item stays; esc's id is no id)")
ok(len([i for i in ids if i.startswith("good@")]) >= 2, "the good one ticks", ids)
l = ev("schedules", Q, "--json")
eq(sorted(m.get("name") for m in l.json_lines()), ["good", "other"], "schedules lists the good ones")
eq(sched.stop(), 0, "the scheduler stops on SIGTERM")
ok(b"global" not in sched.err and b"script" not in sched.err, "no script error in the scheduler's lines",
   sched.err)

section("dq:{Q}:ticks and dq:{Q}:smig of another type or garbage fail no transfer")
for i, (tk, ck) in enumerate([("string", "list"), ("set", "digits"), ("hash", "huge")]):
    q = f"v1junk{i}"
    P = "dq:{" + q + "}:"
    plant_v1(q, "s", 1000, server_ms() + 60000, "p")
    redis("HDEL", P + "sstate", "s")
    redis("DEL", P + "ticks")
    {"string": lambda: redis("SET", P + "ticks", "x"), "set": lambda: redis("SADD", P + "ticks", "s"),
     "hash": lambda: redis("HSET", P + "ticks", "s", "1")}[tk]()
    {"list": lambda: redis("RPUSH", P + "smig", "7"), "digits": lambda: redis("SET", P + "smig", "12345"),
     "huge": lambda: redis("SET", P + "smig", "9" * 30)}[ck]()
    eq(ev("offer", q, "0", "item", "--id", "ordinary").rc, 0, f"{q}: offer")
    t = ev("take", q, "--timeout", "5s", "--json")
    eq((t.rc, [m.get("id") for m in t.json_lines()]), (0, ["ordinary"]),
       f"{q}: ticks a {tk}, smig {ck}: the ordinary item is taken ({t.errtext})")

section("tick buckets planted as strings: quarantined, the schedules and the items go on")
Q = "v1tb"
P = "dq:{" + Q + "}:"
eq(ev("every", Q, "g", "1s", "p-g").rc, 0, "today's schedule g, every 1 s")
first = int(redis("ZRANGE", P + "tb", 0, 0, "WITHSCORES")[1])
nxt = first + 3000
plant_v1(Q, "old", 1000, nxt, "p-old")
for k in range(1, 7):  # the buckets g's next ticks and old's go into
    redis("SET", P + f"tb:{first + k * 1000}|e|1000|0|one", "planted")
eq(ev("offer", Q, f"{first + 1500 - server_ms()}ms", "item", "--id", "ordinary").rc, 0, "an ordinary item due "
   "between g's ticks")
sched = Bg([BIN, "--redis", EURL, "schedule", Q], name="delayq schedule (EVAL only)")
ok(wait_for(lambda: server_ms() >= first + 5600, 10), "six ticks pass")
ids = ids_taken(Q, 1)
eq(sched.stop(), 0, "the scheduler stops on SIGTERM")
ok(b"transfer failed" not in sched.err, "no transfer failed", sched.err)
ok("ordinary" in ids, "the ordinary item is taken", ids)
ok(len([i for i in ids if i.startswith("g@")]) >= 5, "g ticks on (its members were popped, then the push "
   "into the planted next bucket failed: g was gone)", ids)
ok(len([i for i in ids if i.startswith("old@")]) >= 2, "old, migrated into a planted bucket, ticks", ids)
notes = [e for e in redis("LRANGE", P + "x", 0, -1) if b"wrong type: " + P.encode() + b"tb:" in e]
ok(len(notes) >= 2, "the planted buckets renamed away, noted in the set-aside list", len(notes))

section("v1 specs with numbers out of range or NaN list as bad and fail no transfer")
Q = "v1nums"
P = "dq:{" + Q + "}:"
BADNUM = """
local s = {v = 1, kind = 'every', every = 1000, start = 1000, stop = 0, missed = 'one', paused = 0,
           text = '1s', zone = '', plen = 1, next = 5000, last = -1}
s[ARGV[2]] = ARGV[3] == 'nan' and 0 / 0 or tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], cmsgpack.pack(s))
redis.call('ZADD', KEYS[2], '5000', ARGV[1])
return 1
"""
cases = {"plen-neg": ("plen", "-5"), "plen-huge": ("plen", "1e300"), "plen-nan": ("plen", "nan"),
         "next-nan": ("next", "nan"), "every-neg": ("every", "-1000"), "start-huge": ("start", "1e300"),
         "last-low": ("last", "-3")}
for n, (f, v) in cases.items():
    redis("EVAL", BADNUM, 2, P + "sched", P + "ticks", n, f, v)
rows = {m.get("name"): m.get("state") for m in ev("schedules", Q, "--json").json_lines()}
eq(rows, {n: "bad" for n in cases}, "each lists as bad (a payload length of -5 or -2^63 was listed)")
eq(ev("offer", Q, "1s", "item", "--id", "ordinary").rc, 0, "an ordinary item due in 1 s")
t = ev("take", Q, "--timeout", "5s", "--json")
eq((t.rc, [m.get("id") for m in t.json_lines()]), (0, ["ordinary"]), "taken: the migration failed no transfer")
eq(redis("EXISTS", P + "ticks"), 0, "and left dq:{Q}:ticks")

section("HSCAN refused (an ACL without it): the transfer does not run again at once")
Q = "v1noscan"
P = "dq:{" + Q + "}:"
eq(ev("offer", Q, "1h", "later").rc, 0, "the queue exists")
PAUSED_V1 = ("local s = {v = 1, kind = 'every', every = 1000, start = 1000, stop = 0, missed = 'one', paused = 1, "
             "text = '1s', zone = '', plen = 1, next = 5000, last = -1} "
             "redis.call('HSET', KEYS[1], 'pz', cmsgpack.pack(s)) return 1")
redis("EVAL", PAUSED_V1, 1, P + "sched")  # not in dq:{Q}:ticks: only the HSCAN finds it
eq(R.cmd("ACL", "SETUSER", "dqv1noscan", "reset", "on", ">" + PASSWORD, "~*", "&*", "+@all", "-function",
         "-hscan"), "OK", "a user who may not HSCAN")
R.cmd("CONFIG", "RESETSTAT")
noscan = Bg([BIN, "--redis", f"redis://dqv1noscan:{PASSWORD}@127.0.0.1:{PORT}", "schedule", Q],
            name="delayq schedule (no HSCAN)")
time.sleep(3 * SLOW)
eq(noscan.stop(), 0, "the scheduler stops on SIGTERM")
calls = command_calls("eval") + command_calls("evalsha")
ok(calls < 100, "a few transfers in 3 s (it ran some 10,000 a second)", calls)
R.cmd("ACL", "DELUSER", "dqv1noscan")

section("two schedulers migrate at once: each tick once")
Q = "v1two"
P = "dq:{" + Q + "}:"
base = server_ms() + 400
for j in range(3):
    plant_v1(Q, f"t{j}", 1000, base, f"p{j}")
two = [Bg([BIN, "--redis", EURL, "schedule", Q], name=f"delayq schedule #{j}") for j in range(2)]
ok(wait_for(lambda: server_ms() >= base + 3300, 10), "four ticks pass")
for b in two:
    eq(b.stop(), 0, "a scheduler stops on SIGTERM")
ids = ids_taken(Q, 1)
eq(len(ids), len(set(ids)), "no item twice")
for j in range(3):
    got = sorted(i for i in ids if i.startswith(f"t{j}@"))
    eq(got, [f"t{j}@{base + k * 1000}" for k in range(max(4, len(got)))],
       f"t{j}: its pending tick and each next one, once each")

section("a migrated schedule removed by the previous release: listed as bad, removed, its ticks stop")
Q, P, sched = ticking("v1rm", "s")
# What the previous release's 'schedules remove' does to a spec it cannot
# read (it knew no buckets nor states).
redis("HDEL", P + "sched", "s")
redis("HDEL", P + "spay", "s")
redis("ZREM", P + "ticks", "s")
rows = {m.get("name"): m.get("state") for m in ev("schedules", Q, "--json").json_lines()}
eq(rows, {"s": "bad"}, "schedules lists it as bad (it was not listed, ticking on)")
r = ev("schedules", Q, "remove", "s")
eq(r.rc, 0, "schedules remove s: exit 0 (it said no such schedule)")
ids_taken(Q, 0.2)
time.sleep(2.2 * SLOW)
eq([i for i in ids_taken(Q, 0.2) if i.startswith("s@")], [], "no tick of s in 2 s after")
eq(ev("schedules", Q, "--json").json_lines(), [], "nothing listed")
eq(sched.stop(), 0, "the scheduler stops on SIGTERM")

section("a migrated schedule set again by the previous release: its old ticks stop at its migration")
Q, P, sched = ticking("v1set", "b")
eq(sched.stop(), 0, "the scheduler stops on SIGTERM")
nxt = server_ms() + 1500
plant_v1(Q, "b", 2000, nxt, "p-b2")  # the previous release's 'every Q b 2s' over it
sched = Bg([BIN, "--redis", EURL, "schedule", Q], name="delayq schedule (EVAL only)")
ok(wait_for(lambda: redis("EXISTS", P + "ticks") == 0, 5), "migrated")
ids_taken(Q, 0.2)
ok(wait_for(lambda: server_ms() >= nxt + 4300, 10), "b's next three ticks of 2 s pass")
eq(sched.stop(), 0, "the scheduler stops on SIGTERM")
late = sorted(int(i.split("@")[1]) for i in ids_taken(Q, 0.5) if i.startswith("b@"))
late = [t for t in late if t >= nxt]
eq([(t - nxt) % 2000 for t in late], [0] * len(late), "b's ticks after its migration are all of its 2 s grid "
   "(its 1 s member ticked on beside it)", )
ok(len(late) >= 2, "... and it ticks", late)

eq(R.cmd("FUNCTION", "LIST"), [], "no library was loaded: every call above ran an EVAL text")
R.cmd("ACL", "DELUSER", "dqv1")
finish()
