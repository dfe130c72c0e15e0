"""recurring.py - recurring schedules ('delayq every', 'delayq schedules'),
with real scheduler processes:
  - a 1 s schedule with three 'delayq schedule' processes, one SIGKILLed
    halfway and one killed and started again: one item per tick for at
    least 10 ticks, ids NAME@<tick> and due_ms one second apart, none
    missing or twice;
  - --missed one, all and skip after 4.5 s with no scheduler: one item
    (the first missed tick's), one per missed tick, none; then on schedule;
  - changing, pausing, resuming and removing under a running scheduler:
    the next tick moves at once, no item while paused, one after resume,
    nothing left behind by remove;
  - cron: the first tick of '*/5 * * * *' in a zone, listed with its zone;
    planted near ticks (through the library's own functions) made into one
    item each by two schedulers, whose transfer then asks for more ticks and
    one of them computes and adds them (the window refill);
  - a queue of 3 shards: schedules spread over its shards by name, listed
    together, each tick once from two schedulers; pause and remove routed to
    the schedule's shard; the shard count does not change under schedules;
  - a user with the rule 'delayq acl' prints sets, lists and removes
    schedules, and its scheduler makes their items;
  - bad names, intervals, expressions, zones, policies and times exit 2 and
    change nothing; so does a payload that starts as an envelope, set
    without a key file (sealed schedules: recurring_sealed.py).
"""
# tier: slow (about 32 s): make test runs it, make test-fast does not
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403


def listing(queue):
    r = dq("schedules", queue, "--json")
    ok(r.rc == 0, f"schedules {queue} --json exits 0", r)
    return {s["name"]: s for s in r.json_lines()}


def tick_items(msgs, name):
    """(tick, due_ms) of the taken messages of schedule name."""
    out = []
    for m in msgs:
        if m["id"].startswith(name + "@"):
            out.append((int(m["id"].split("@", 1)[1]), m["due_ms"]))
    return out


def taken(bg):
    return [json.loads(line) for _, line in bg.snapshot() if line.strip()]


# ------------------------------------------------------------------ exactly once
section("a 1 s schedule, three schedulers, one SIGKILLed and one restarted")
Q = "rec1"
consumer = bg_dq("take", Q, "--count", "0", "--json", "--timeout", "16s", "--no-scheduler")
r = dq("every", Q, "tick", "1s", "beat")
ok(r.rc == 0 and r.text.strip().lstrip("-").isdigit(), "every exits 0 and prints the first tick", r)
first = int(r.text.strip()) if r.rc == 0 else 0
scheds = [bg_dq("schedule", Q) for _ in range(3)]
ok(wait_for(lambda: len(tick_items(taken(consumer), "tick")) >= 4, 8), "4 ticks delivered")
scheds[0].stop(signal.SIGKILL)
ok(wait_for(lambda: len(tick_items(taken(consumer), "tick")) >= 6, 5), "6 ticks delivered after the SIGKILL")
scheds[1].stop(signal.SIGKILL)
scheds[1] = bg_dq("schedule", Q)
ok(wait_for(lambda: len(tick_items(taken(consumer), "tick")) >= 11, 10), "11 ticks delivered")
eq(dq("schedules", Q, "pause", "tick").rc, 0, "pause exits 0")
time.sleep(0.3)
items = tick_items(taken(consumer), "tick")
ticks = sorted(t for t, _ in items)
eq(len(ticks), len(set(ticks)), "no tick delivered twice")
eq(ticks[:1], [first], "the first item is the first tick printed by every")
eq([b - a for a, b in zip(ticks, ticks[1:])], [1000] * (len(ticks) - 1), "ticks one second apart, none missing")
ok(all(t == d for t, d in items), "each item's due_ms is its tick", items[:3])
ok(len(ticks) >= 10, "at least 10 ticks", len(ticks))
for s in scheds[1:]:
    ok(s.stop() == 0 and b"Sanitizer" not in s.err, "a scheduler stops cleanly on SIGTERM", s.err[-300:])
consumer.stop()
eq(stats(Q)["pending"], 0, "paused: no tick's item left pending")

# ------------------------------------------------------------------ missed ticks
section("--missed one, all, skip after 4.5 s without a scheduler")
Q = "rec2"
start = server_ms() + 500
for policy in ("one", "all", "skip"):
    r = dq("every", Q, policy, "1s", f"p-{policy}", "--missed", policy, "--start", start)
    eq((r.rc, r.text.strip()), (0, str(start)), f"every --missed {policy} --start prints the start")
cutoff = start + 4000  # ticks start .. start+4000 pass with no scheduler
ok(wait_for(lambda: server_ms() >= cutoff + 200, 8), "4.7 s later")
# A consumer with its own scheduler: its first transfer finds 5 ticks missed.
r = dq("take", Q, "--count", "0", "--json", "--timeout", "2500ms", timeout=20)
msgs = r.json_lines()
by = {p: sorted(tick_items(msgs, p)) for p in ("one", "all", "skip")}
late = {p: [t for t, _ in v if t <= cutoff] for p, v in by.items()}
eq(late["one"], [start], "one: a single item for the missed ticks, the first's")
eq(late["all"], [start + 1000 * k for k in range(5)], "all: an item for each missed tick")
eq(late["skip"], [], "skip: none for the missed ticks")
for p, v in by.items():
    ok(any(t == cutoff + 1000 for t, _ in v), f"{p}: then on schedule (the tick after)", v)

# ------------------------------------------------------------------ change, pause, resume, remove
section("change, pause, resume and remove under a running scheduler")
Q = "rec3"
sched = bg_dq("schedule", Q)
r = dq("every", Q, "chg", "1s", "a")
ok(r.rc == 0, "every chg 1s", r)
time.sleep(1.5)
r = dq("every", Q, "chg", "1h", "b")
nxt = int(r.text.strip()) if r.rc == 0 else 0
s = listing(Q).get("chg", {})
eq((s.get("next_ms"), s.get("spec"), s.get("every_ms")), (nxt, "every 1h", 3600000),
   "a change moves the next tick at once (listing)")
eq(redis("ZRANGE", f"dq:{{{Q}}}:tb", 0, -1), [f"{nxt}|e|3600000|0|one".encode()], "the schedule waits in its new tick's bucket alone")
eq(stats(Q)["pending"], 0, "no tick's item is pending (each is made at its tick)")
r = dq("take", Q, "--count", "0", "--json", "--timeout", "300ms", "--no-scheduler")
before = [m["payload"] for m in r.json_lines()]
ok(before and all(p == "a" for p in before), "the items before the change had the old payload", before)
dq("every", Q, "chg", "1s", "c")
eq(dq("schedules", Q, "pause", "chg").rc, 0, "pause exits 0")
s = listing(Q).get("chg", {})
eq((s.get("paused"), s.get("state")), (True, "paused"), "listed as paused")
paused_next = s.get("next_ms")
eq(stats(Q)["pending"], 0, "pause removes the pending tick's item")
time.sleep(2.2)
r = dq("take", Q, "--count", "0", "--json", "--timeout", "200ms", "--no-scheduler")
eq(r.json_lines(), [], "no item while paused")
eq(dq("schedules", Q, "resume", "chg").rc, 0, "resume exits 0")
r = dq("take", Q, "--count", "1", "--json", "--timeout", "3s", "--no-scheduler")
got = tick_items(r.json_lines(), "chg")
eq(got, [(paused_next, paused_next)], "resume (--missed one): one item, the paused tick's")
eq([m["payload"] for m in r.json_lines()], ["c"], "with the payload of the last change")
ok(wait_for(lambda: (listing(Q).get("chg") or {}).get("next_ms", 0) > server_ms(), 3),
   "then on schedule: the next tick is ahead")
eq(dq("schedules", Q, "remove", "chg").rc, 0, "remove exits 0")
eq(listing(Q), {}, "removed: not listed")
eq(stats(Q)["pending"], 0, "removed: no tick's item left pending")
eq(redis("ZCARD", f"dq:{{{Q}}}:tb"), 0, "removed: no tick left")
time.sleep(1.2)
r = dq("take", Q, "--count", "0", "--json", "--timeout", "200ms", "--no-scheduler")
eq(tick_items(r.json_lines(), "chg"), [], "removed: no more items")
r = dq("schedules", Q, "remove", "chg")
eq(r.rc, 1, "remove of an unknown schedule exits 1")
sched.stop()


# ------------------------------------------------------------------ cron
section("cron: first tick, planted near ticks, the window refilled by a scheduler")
Q = "rec5"


def lib_lua():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "lua", "lib")
    return b"".join(open(os.path.join(root, n), "rb").read() for n in sorted(os.listdir(root)) if n.endswith(".lua"))


def window(queue, name):
    """(window length, wlast, next) of a cron schedule, read with cmsgpack."""
    return redis("EVAL", "local s = cmsgpack.unpack(redis.call('HGET', KEYS[1], ARGV[1])) "
                 "local st = redis.call('HGET', KEYS[2], ARGV[1]) "
                 "return {#s.win, s.wlast, tonumber(string.match(st, '|(.*)$'))}", 2,
                 f"dq:{{{queue}}}:sched", f"dq:{{{queue}}}:sstate", name)


before = server_ms()
r = dq("cron", Q, "c", "*/5 * * * *", "cronp", "--tz", "Asia/Tokyo")
after = server_ms()
firsts = {(before // 300000 + 1) * 300000, (after // 300000 + 1) * 300000}
ok(r.rc == 0 and int(r.text.strip() or 0) in firsts, "cron prints the next 5-minute boundary", r)
s = listing(Q).get("c", {})
eq((s.get("spec"), s.get("zone"), s.get("state")), ("*/5 * * * *", "Asia/Tokyo", "active"), "listed with its zone")
eq(window(Q, "c")[0], 63, "64 ticks computed, the first armed")
# Plant three ticks 1.5, 2.5 and 3.5 s ahead as the window (the schedule's
# pending item moved to the first), with the library's own functions.
t0 = server_ms() + 1500
plant = lib_lua() + b"""
call_begin()
local P, name = ARGV[1], ARGV[2]
local zs, counters = P .. 'zs', P .. 'n'
local s = recur.spec_read(P, name)
local payload = redis.call('HGET', recur.payload_key(P), name)
local last, nxt = recur.current(P, name, s, payload)
recur.leave(P, name, s, nxt, payload)
s.win = {tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])}
s.wlast = s.win[3]
recur.spec_write(P, name, s)
recur.state_write(P, name, last, s.win[1])
recur.enter(P, P .. 'w', name, s, s.win[1], payload, recur.bound(P, zs))
return s.win[1]
"""
eq(redis("EVAL", plant, 0, f"dq:{{{Q}}}:", "c", t0, t0 + 1000, t0 + 2000), t0, "planted")
consumer = bg_dq("take", Q, "--count", "3", "--json", "--timeout", "8s", "--no-scheduler")
scheds = [bg_dq("schedule", Q) for _ in range(2)]
eq(consumer.wait(10), 0, "the consumer got 3 items")
items = tick_items(taken(consumer), "c")
eq(items, [(t0, t0), (t0 + 1000, t0 + 1000), (t0 + 2000, t0 + 2000)], "one item per planted tick, due at it")
nxt = ((t0 + 2000) // 300000 + 1) * 300000
ok(wait_for(lambda: (listing(Q).get("c") or {}).get("next_ms") == nxt, 5),
   "a scheduler refilled the window: next is the 5-minute boundary after the planted ticks",
   listing(Q).get("c"))
w = window(Q, "c")
ok(w[0] >= 32, "the window holds ticks again", w)
for p in scheds:
    ok(p.stop() == 0 and b"Sanitizer" not in p.err, "a scheduler that refilled stops cleanly", p.err[-300:])
r = dq("take", Q, "--count", "0", "--json", "--timeout", "300ms", "--no-scheduler")
eq(tick_items(r.json_lines(), "c"), [], "no tick delivered twice")

# ------------------------------------------------------------------ many at once
section("250 schedules due in the same millisecond: each tick once")
Q = "rec6"
N = 250
start = server_ms() + 1500
many = lib_lua() + b"""
call_begin()
local P, n, start = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
for i = 1, n do
  local s = {v = 2, kind = 'every', every = 1000, start = start, stop = 0, missed = 'one', paused = 0,
             text = 'every 1s', zone = '', plen = 1}
  redis.call('HSET', recur.payload_key(P), 'm' .. i, 'm')
  recur.spec_write(P, 'm' .. i, s)
  recur.state_write(P, 'm' .. i, -1, start)
  recur.enter(P, P .. 'w', 'm' .. i, s, start, 'm', recur.bound(P, P .. 'zs'))
end
return n
"""
eq(redis("EVAL", many, 0, f"dq:{{{Q}}}:", N, start), N, f"{N} schedules planted, first tick at one time")
consumer = bg_dq("take", Q, "--count", str(2 * N), "--json", "--timeout", "8s", "--no-scheduler")
sched = bg_dq("schedule", Q)
eq(consumer.wait(12), 0, f"{2 * N} items: two ticks of each")
got = sorted(m["id"] for m in taken(consumer))
want = sorted(f"m{i}@{t}" for i in range(1, N + 1) for t in (start, start + 1000))
eq(got == want, True, "each schedule's two ticks, once each")
# Schedules that share a bucket: each found in it (its state is as it was
# set: ticks on time write none), one removed and one paused alone.
eq(dq("schedules", Q, "remove", "m7").rc, 0, "remove m7 (one of a bucket's 250)")
eq(dq("schedules", Q, "pause", "m8").rc, 0, "pause m8")
s = listing(Q)
nx = s.get("m9", {}).get("next_ms", 0)
ok(nx >= start + 2000 and (nx - start) % 1000 == 0 and s["m9"]["last_ms"] == nx - 1000,
   "m9 lists its next tick and the last one made, one second apart", s.get("m9"))
eq((s.get("m8", {}).get("state"), "m7" in s, len(s)), ("paused", False, N - 1), "m8 paused, m7 gone, the rest listed")
eq(sum(redis("LLEN", f"dq:{{{Q}}}:tb:{b.decode()}") for b in redis("ZRANGE", f"dq:{{{Q}}}:tb", 0, -1)), N - 2,
   "the buckets hold the N - 2 active schedules")
consumer = bg_dq("take", Q, "--count", str(N - 2), "--json", "--timeout", "5s", "--no-scheduler")
eq(consumer.wait(8), 0, f"{N - 2} items: the next tick of each active one")
ids = [m["id"] for m in taken(consumer)]
ok(not any(i.startswith(("m7@", "m8@")) for i in ids) and len(set(i.split("@")[0] for i in ids)) == N - 2,
   "none of m7 or m8", sorted(ids)[:3])
ok(sched.stop() == 0 and b"Sanitizer" not in sched.err, "the scheduler stops cleanly", sched.err[-300:])

# ------------------------------------------------------------------ sharded
section("a queue of 3 shards: each schedule in the shard its name picks")
Q = "rec8"
eq(dq("config", Q, "--shards", "3").rc, 0, "a queue of 3 shards")
names = [f"s{i}" for i in range(6)]
start = server_ms() + 2000
for n in names:
    r = dq("every", Q, n, "1s", f"p-{n}", "--start", start)
    eq((r.rc, r.text.strip()), (0, str(start)), f"every {n} prints its first tick")
held = redis("KEYS", f"dq:{{{Q}~*}}:sched")
ok(len(held) >= 2, "the schedules live in more than one shard", held)
eq(redis("EXISTS", f"dq:{{{Q}}}:sched"), 0, "none in the queue's own keys")
eq(sorted(listing(Q)), names, "listed together, by name")
consumer = bg_dq("take", Q, "--count", str(3 * len(names)), "--json", "--timeout", "10s", "--no-scheduler")
scheds = [bg_dq("schedule", Q) for _ in range(2)]
eq(consumer.wait(14), 0, f"{3 * len(names)} items")
ids = [m["id"] for m in taken(consumer)]
by = {n: sorted(int(i.split("@")[1]) for i in ids if i.startswith(n + "@")) for n in names}
eq(len(ids), len(set(ids)), "no tick twice")
ok(all(v and v[0] == start and v == [start + 1000 * k for k in range(len(v))] for v in by.values()) and
   min(len(v) for v in by.values()) >= 2, "each schedule's ticks from its first, one second apart", by)
for p in scheds:
    ok(p.stop() == 0 and b"Sanitizer" not in p.err, "a scheduler stops cleanly", p.err[-300:])
eq(dq("schedules", Q, "pause", "s1").rc, 0, "pause s1 (routed to its shard)")
eq(dq("schedules", Q, "remove", "s0").rc, 0, "remove s0")
s = listing(Q)
eq((sorted(s), s.get("s1", {}).get("state")), (names[1:], "paused"), "s0 gone, s1 paused")
dq("take", Q, "--count", "0", "--timeout", "200ms", "--no-scheduler")
r = dq("config", Q, "--shards", "2")
ok(r.rc != 0 and "recurring schedules" in r.errtext, "the shard count does not change under schedules", r)
eq(sorted(listing(Q)), names[1:], "they are all still listed")
for n in names[1:]:
    eq(dq("schedules", Q, "remove", n).rc, 0, f"remove {n}")
eq(dq("config", Q, "--shards", "2").rc, 0, "without schedules, it changes")

# ------------------------------------------------------------------ ACL
section("a user with the rule of 'delayq acl'")
Q = "rec7"
pw = private_file(RDIR, "rec.pw", "rec-s3cret\n")
r = dq("acl", Q, "--user", "recuser", "--password-file", pw, redis=False)
ok(r.rc == 0 and r.text.startswith("ACL SETUSER "), "acl prints the rule", r)
ok(redis(*r.text.split()) in ("OK", b"OK"), "rule applied")
dq("functions", "load")
uurl = f"redis://recuser:rec-s3cret@127.0.0.1:{PORT}"
r = dq("--redis", uurl, "every", Q, "u", "1s", "up", redis=False)
ok(r.rc == 0, "every as the user", r)
r = dq("--redis", uurl, "schedules", Q, redis=False)
ok(r.rc == 0 and r.text.startswith("u\tevery 1s"), "schedules as the user", r)
r = dq("--redis", uurl, "take", Q, "--json", "--timeout", "3s", redis=False)
ok(r.rc == 0 and tick_items(r.json_lines(), "u"), "its scheduler makes the tick's item", r)
eq(dq("--redis", uurl, "schedules", Q, "remove", "u", redis=False).rc, 0, "remove as the user")

# ------------------------------------------------------------------ bad input
section("bad input exits 2 and changes nothing")
Q = "rec4"
for args, what, word in [
        (("every", Q, "x", "500ms", "p"), "an interval under 1s", "interval"),
        (("every", Q, "x", "soon", "p"), "an interval that is no duration", "interval"),
        (("every", Q, "a@b", "1s", "p"), "a name with '@'", "name"),
        (("every", Q, "x", "1s", "p", "--missed", "most"), "an unknown --missed", "--missed"),
        (("every", Q, "x", "1s", "p", "--start", "tomorrow"), "a bad --start", "--start"),
        (("every", Q, "x", "1s", "p", "--start", "2000", "--end", "1000"), "--start after --end", "--start"),
        (("schedules", Q, "stop", "x"), "an unknown operation", "operation"),
        (("schedules", Q, "pause"), "an operation without NAME", "NAME"),
        (("cron", Q, "x", "61 * * * *", "p"), "a minute of 61", "field 1 (minute)"),
        (("cron", Q, "x", "* * 0 * *", "p"), "a day of month of 0", "field 3 (day of month)"),
        (("cron", Q, "x", "* * * * mon-xyz", "p"), "a bad day name", "field 5 (day of week)"),
        (("cron", Q, "x", "* * * *", "p"), "four fields", "5 fields"),
        (("cron", Q, "x", "@often", "p"), "an unknown macro", "@often"),
        (("cron", Q, "x", "* * * * *", "p", "--tz", "Mars/Base"), "an unknown zone", "zone"),
        (("cron", Q, "x", "* * * * *", "p", "--tz", "../etc/passwd"), "a zone path", "zone")]:
    r = dq(*args)
    ok(r.rc == 2 and word in r.errtext, f"{what}: exit 2, naming {word}", r)
r = dq("every", Q, "x", "1s", stdin=b"\0dqs1 not an envelope")
ok(r.rc == 2 and "sealed" in r.errtext, "a payload that starts as an envelope, without a key file: exit 2", r)
eq(listing(Q), {}, "nothing was set")

finish()
