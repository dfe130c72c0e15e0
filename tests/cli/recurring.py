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
  - bad names, intervals, policies and times exit 2 and change nothing.
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "lib")))
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
    s.stop()
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
eq(zscore_due(Q, f"chg@{nxt}"), nxt, "the new tick's item is pending")
eq(stats(Q)["pending"], 1, "the old tick's item is gone: one pending")
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
ok(wait_for(lambda: (listing(Q).get("chg") or {}).get("next_ms", 0) > server_ms(), 3),
   "then on schedule: the next tick is ahead")
eq(dq("schedules", Q, "remove", "chg").rc, 0, "remove exits 0")
eq(listing(Q), {}, "removed: not listed")
eq(stats(Q)["pending"], 0, "removed: no tick's item left pending")
eq(redis("ZCARD", f"dq:{{{Q}}}:ticks"), 0, "removed: no tick left")
time.sleep(1.2)
r = dq("take", Q, "--count", "0", "--json", "--timeout", "200ms", "--no-scheduler")
eq(tick_items(r.json_lines(), "chg"), [], "removed: no more items")
r = dq("schedules", Q, "remove", "chg")
eq(r.rc, 1, "remove of an unknown schedule exits 1")
sched.stop()

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
        (("schedules", Q, "pause"), "an operation without NAME", "NAME")]:
    r = dq(*args)
    ok(r.rc == 2 and word in r.errtext, f"{what}: exit 2, naming {word}", r)
key = private_file(RDIR, "rec.key", dq("keygen").text)
r = dq("--key-file", key, "every", Q, "x", "1s", "p")
ok(r.rc == 2 and "seal" in r.errtext, "with a key file: exit 2 (sealed schedules not supported)", r)
eq(listing(Q), {}, "nothing was set")

finish()
