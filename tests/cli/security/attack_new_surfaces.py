"""attack_new_surfaces.py - what a writer to Redis plants in the consumers
registry, the recurring schedules and the queue registry (issues 39 and
40) breaks nothing else, reaches no terminal and stays bounded.

  - consumers: names planted in the registry with an escape sequence and a
    bell, over 64 bytes, of bad UTF-8, and details that are not numbers or
    are 24 digits long, are left out of `delayq consumers` (text and
    --json), which still lists the good consumer and exits 0: no control
    byte reaches the terminal, and one planted entry hides no other (it
    failed with exit 3, "unexpected consumers reply" or "out of memory");
    a beat (lua/beat.lua, which a queue user may call with any bytes)
    refuses a name with a control byte, and a count in hand that is no
    whole number up to 999999999 (1e300 was stored as -2^63); a key of the registry of another
    type exits 3 with a line naming that key (the line named the queue's
    other keys);
  - a planted bucket member without a '|' (not NAME|PAYLOAD) in a bucket
    found late is dropped: the transfer goes on, and the schedule beside it
    still makes its items (the transfer's script failed on it);
  - `--missed all` of a 1 s schedule whose tick is a day late (a day's
    outage) makes the last 1000 ticks' items, not 86400: the schedule is
    back on time at once, and the items are the newest ticks;
  - schedules planted with a name no schedule can have (an escape
    sequence, a space) are left out of `delayq schedules`, and one whose
    spec text holds control bytes is listed as bad (it printed them raw);
  - a schedule whose spec no longer decodes, once removed (as its error
    says to), makes no more items: it stayed in its bucket and ticked on,
    unlisted, and a second remove said there was no such schedule; one
    set again over such a spec ticks once (the old one ticked on too);
  - a queue that has only a schedule is a known queue: `stats` exits 0
    (it said "never offered to (no keys...)", exit 1) and it is in the
    registry that serve and metrics list; `stats` of an unknown queue
    whose registry cannot be read (a key of another type) exits 3 naming
    it, not 1 "never offered to".
"""
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

CQ = "atk-cons"
LIVE, INFO = "dq:{" + CQ + "}:c", "dq:{" + CQ + "}:ci"


def plant_consumer(name, details):
    """A consumer entry whose beat counts for 100 s more, as a writer plants it."""
    redis("ZADD", LIVE, str(server_ms() + 100000), name)
    redis("HSET", INFO, name, details)


section("consumers: planted names and details are left out, the good one listed")
eq(dq("offer", CQ, "0", "x").rc, 0, "offer (the queue exists)")
now = server_ms()
plant_consumer("good", f"{now - 5000}|2|{now - 1000}")
plant_consumer(b"evil\x1b[31mRED\x07", f"{now}|1|{now}")
plant_consumer(b"L" * 200, f"{now}|1|{now}")
plant_consumer(b"bad\xff\xfe", f"{now}|1|{now}")
plant_consumer("huge-digits", f"{'9' * 24}|1|{now}")
plant_consumer("not-numbers", "a|b|c")
r = dq("consumers", CQ)
ok(r.rc == 0 and r.out.startswith(b"good in_hand 2 up_s ") and r.out.count(b"\n") == 1,
   "text: exit 0, the good consumer alone", r)
ok(not any(b < 0x20 and b != 0x0a for b in r.out), "text: no control byte reaches the terminal", r.out)
r = dq("consumers", CQ, "--json")
names = [c.get("name") for c in r.json_lines()] if r.rc == 0 else None
ok(r.rc == 0 and names == ["good"], "--json: exit 0, the good consumer alone", r)

section("consumers: the beat refuses a name with a control byte, whoever calls it")
redis("DEL", LIVE, INFO)
beat = eval_script("beat")
for bad in (b"evil\x1b[31m", b"nul\x00byte", b"del\x7f"):
    try:
        redis("EVAL", beat, 2, LIVE, INFO, "beat", bad, "0", "45000")
        got = "accepted"
    except RedisError as e:
        got = str(e)
    ok("delayq:input bad consumer name" in got, f"beat of {bad!r}: refused (input)", got)
for hand in ("1e300", "2.5", "-1", "1000000000"):
    try:
        redis("EVAL", beat, 2, LIVE, INFO, "beat", "B", hand, "45000")
        got = "accepted"
    except RedisError as e:
        got = str(e)
    ok("delayq:input bad consumer beat" in got, f"beat with {hand} in hand: refused (input)", got)
eq(redis("EXISTS", LIVE, INFO), 0, "nothing written")

section("consumers: a key of another type exits 3 naming it")
for key, want in ((LIVE, "zset"), (INFO, "hash")):
    redis("DEL", LIVE, INFO)
    redis("SET", key, "x")
    r = dq("consumers", CQ)
    ok(r.rc == 3 and f"{key} holds a string, expected a {want}" in r.errtext, f"{key} a string: exit 3, named", r)
redis("DEL", LIVE, INFO)

section("consumers: a planted huge start in the details is not kept by a beat")
redis("DEL", LIVE, INFO)
redis("HSET", INFO, "T9", f"{'9' * 24}|0|1")
t = bg_dq("take", CQ, "--count", "0", "--name", "T9")


def t9():
    r = dq("consumers", CQ, "--json")
    got = [c for c in r.json_lines() if c.get("name") == "T9"] if r.rc == 0 else []
    return got[0] if got else None


ok(wait_for(lambda: t9() is not None, 10), "T9 listed after its beat", redis("HGET", INFO, "T9"))
c = t9() or {}
ok(0 <= c.get("started_ms", -1) <= server_ms(), "its start is the server's time of its beat, not the planted one", c)
t.stop()
redis("DEL", LIVE, INFO)

section("schedules: a planted bucket member with no '|' is dropped, the transfer goes on")
RQ = "atk-rec"
eq(dq("every", RQ, "hb", "1s", "ping", "--missed", "all").rc, 0, "every hb 1s --missed all")


def replant(late_ms, *members):
    """Moves hb's tick late_ms into the past, in one bucket with members."""
    T = (server_ms() - late_ms) // 1000 * 1000
    buckets = "dq:{" + RQ + "}:tb"
    for b in redis("ZRANGE", buckets, "0", "-1"):
        redis("DEL", b"dq:{" + RQ.encode() + b"}:tb:" + b)
    redis("DEL", buckets)
    b = f"{T}|e|1000|0|all"
    redis("ZADD", buckets, str(T), b)
    redis("RPUSH", "dq:{" + RQ + "}:tb:" + b, *members)
    redis("HSET", "dq:{" + RQ + "}:sstate", "hb", f"-1|{T}")
    return T


def first_tick():
    f = redis("ZRANGE", "dq:{" + RQ + "}:tb", "0", "0", "WITHSCORES")
    return int(f[1]) if f else None


def ready():
    return redis("LLEN", "dq:{" + RQ + "}:r")


replant(3500, "nopipe", "hb|ping")
r = dq("take", RQ, "--count", "1", "--timeout", "5s")
ok(r.rc == 0 and "transfer failed" not in r.errtext, "the take gets hb's item, no transfer fails", r)
ok(wait_for(lambda: (first_tick() or 0) >= server_ms() - 1500, 5), "hb is back on time",
   (first_tick(), server_ms()))
redis("DEL", "dq:{" + RQ + "}:r")

section("schedules: --missed all after a day's outage makes the last 1000 ticks")
T = replant(86400000, "hb|ping")
t0 = server_ms()
r = dq("take", RQ, "--count", "1", "--timeout", "5s", "--json")
m = r.json_lines()
ok(r.rc == 0 and len(m) == 1, "one item taken", r)
ok(wait_for(lambda: (first_tick() or 0) >= server_ms() - 1500, 5),
   "hb is back on time at once (its older ticks skipped)", (first_tick(), T))
time.sleep(0.5)
n = ready() + 1
ok(1000 <= n <= 1003, f"{n} items made for a day of 1 s ticks (the last 1000, and what came since)", n)
first = m[0].get("id", "") if m else ""
tick = int(first.split("@")[1]) if "@" in first else 0
ok(tick >= t0 - 1000 * 1000 - 1000, "the items are the newest ticks", (first, t0))
eq(dq("schedules", RQ, "remove", "hb").rc, 0, "remove hb")

section("schedules: planted names and spec texts reach no terminal")
PQ = "atk-plant-sched"
eq(dq("every", PQ, "good", "1h", "x").rc, 0, "every good 1h")
SCHED = "dq:{" + PQ + "}:sched"
redis("HSET", SCHED, b"evil\x1b[31m", b"junk", b"x y", b"junk")
# a spec that decodes, copied from good's, with an escape sequence as its text
redis("EVAL", "local s = cmsgpack.unpack(redis.call('HGET', KEYS[1], 'good')) s.text = ARGV[1] "
      "redis.call('HSET', KEYS[1], 'good2', cmsgpack.pack(s)) return 1", 1, SCHED, b"\x1b]0;pwn\x07every 1h")
r = dq("schedules", PQ)
lines = r.out.splitlines()
ok(r.rc == 0 and len(lines) == 2 and lines[0].startswith(b"good\tevery 1h") and lines[1].startswith(b"good2\t")
   and b"\tbad\t" in lines[1], "text: good, and good2 listed as bad (it can be removed); the bad names left out", r)
ok(not any(b < 0x20 and b not in (0x09, 0x0a) for b in r.out), "no control byte reaches the terminal", r.out)
r = dq("schedules", PQ, "--json")
ok(r.rc == 0 and [j.get("name") for j in r.json_lines()] == ["good", "good2"], "--json: the same two", r)

section("schedules: one whose spec no longer decodes, removed, makes no more items")
GQ = "atk-gone-sched"
eq(dq("every", GQ, "s", "1s", "from-s").rc, 0, "every s 1s")
eq(dq("every", GQ, "t", "1s", "from-t").rc, 0, "every t 1s")
redis("HSET", "dq:{" + GQ + "}:sched", "s", "junk")
r = dq("schedules", GQ, "remove", "s")
ok(r.rc == 0, "remove s (its spec does not decode, as the error told to do)", r)
r = dq("take", GQ, "--count", "0", "--timeout", "2500ms")
got = set(r.out.split())
ok(b"from-t" in got and b"from-s" not in got, "t's items come, none of s's (it ticked on, unlisted)", r)
left = [m for b in redis("ZRANGE", "dq:{" + GQ + "}:tb", "0", "-1")
        for m in redis("LRANGE", b"dq:{" + GQ.encode() + b"}:tb:" + b, "0", "-1")]
eq(left, [b"t|from-t"], "the buckets hold t alone")

section("schedules: one whose spec no longer decodes, set again, ticks once")
eq(dq("every", GQ, "u", "1s", "old-u").rc, 0, "every u 1s old-u")
redis("HSET", "dq:{" + GQ + "}:sched", "u", "junk")
eq(dq("every", GQ, "u", "1s", "new-u").rc, 0, "every u 1s new-u (set again over it)")
r = dq("take", GQ, "--count", "0", "--timeout", "2500ms")
got = set(r.out.split())
ok(b"new-u" in got and b"old-u" not in got, "new-u's items come, none of old-u's (both ticked)", r)
eq(dq("schedules", GQ, "remove", "u").rc, 0, "remove u")

section("a queue with only a schedule is known: stats exits 0, serve lists it")
SQ = "atk-only-sched"
eq(dq("every", SQ, "s1", "1h", "x").rc, 0, "every s1 1h on a queue never offered to")
r = dq("stats", SQ)
ok(r.rc == 0 and "pending 0" in r.text, "stats: exit 0 (it said 'never offered to (no keys...)', exit 1)", r)
ok(wait_for(lambda: redis("SISMEMBER", "dq:queues", SQ) == 1, 5), "it is in the registry (serve's and metrics' list)")
r = dq("stats", "atk-never-used")
ok(r.rc == 1 and "no queue atk-never-used" in r.errtext, "a queue never used still exits 1", r)

section("stats: a registry that cannot be read is an error, not 'never offered to'")
saved = redis("SMEMBERS", "dq:queues")
redis("DEL", "dq:queues")
redis("SET", "dq:queues", "planted")
r = dq("stats", "atk-never-used")
ok(r.rc == 3 and "dq:queues" in r.errtext and "never offered" not in r.errtext,
   "registry a string: exit 3 naming it (it said 'never offered to', exit 1)", r)
redis("DEL", "dq:queues")
if saved:
    redis("SADD", "dq:queues", *saved)

finish()
