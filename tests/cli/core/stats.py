"""stats.py - delayq stats QUEUE [--json]: pending, ready, next_due_in_ms.
A queue never used (no keys, not in the registry) exits 1 with one line
naming it and prints nothing; a known queue emptied prints zeros, exit 0."""
import json
import os
import re
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403


def plain(queue):
    r = dq("stats", queue)
    ok(r.rc == 0, f"stats {queue} exits 0", r)
    vals = {}
    for line in r.text.splitlines():
        m = re.fullmatch(r"([a-z_]+)[ \t]*[:=]?[ \t]*(-?\d+)", line.strip())
        if ok(m is not None, f"stats {queue}: line {line!r} is 'name value'"):
            vals[m.group(1)] = int(m.group(2))
    return vals


def as_json(queue):
    r = dq("stats", queue, "--json")
    ok(r.rc == 0, f"stats {queue} --json exits 0", r)
    eq(r.out.count(b"\n"), 1, f"stats {queue} --json is one line")
    try:
        return json.loads(r.out)
    except ValueError:
        ok(False, f"stats {queue} --json parses", r.out)
        return {}


section("a queue never used: exit 1, one line, nothing printed")
for args in (["stats", "never"], ["stats", "never", "--json"]):
    r = dq(*args)
    ok(r.rc == 1 and r.out == b"" and one_line(r.err) and b"no queue never" in r.err, " ".join(args) + ": exit 1", r)

section("a known, empty queue: zeros")
eq(dq("offer", "empty", "1h", "x", "--id", "gone").rc, 0, "offer to empty")
eq(dq("cancel", "empty", "gone").rc, 0, "cancel it: empty, and known")
v = plain("empty")
eq((v.get("pending"), v.get("ready"), v.get("next_due_in_ms")), (0, 0, -1), "plain: 0 pending, 0 ready, -1")
j = as_json("empty")
eq((j.get("pending"), j.get("ready"), j.get("next_due_in_ms")), (0, 0, -1), "json: 0, 0, -1")
for k in ("pending", "ready", "next_due_in_ms"):
    ok(isinstance(j.get(k), int), f"json: {k} is an integer", j)

section("3 pending, 2 ready")
for d, i in [("10s", "a"), ("20s", "b"), ("30s", "c"), ("0", "d"), ("0", "e")]:
    eq(dq("offer", "st", d, "p", "--id", i).rc, 0, f"offer st {d} --id {i}")
due_a = zscore_due("st", "a")
s = server_ms()
v = plain("st")
eq((v.get("pending"), v.get("ready")), (3, 2), "plain: pending 3, ready 2")
ok(due_a - s - 1000 <= v.get("next_due_in_ms", -99) <= due_a - s, "plain: next_due_in_ms is the first due time - now",
   f"{v.get('next_due_in_ms')} vs {due_a - s}")
# stats reads the server's clock between s0 and s1 (a slow run, under
# ASan on a busy machine, took 66 ms for the call).
s0 = server_ms()
j = as_json("st")
s1 = server_ms()
eq((j.get("pending"), j.get("ready")), (3, 2), "json: pending 3, ready 2")
ok(due_a - s1 - 1 <= j.get("next_due_in_ms", -99) <= due_a - s0 + 1, "json: next_due_in_ms",
   f"{j.get('next_due_in_ms')} in [{due_a - s1}, {due_a - s0}]")
ok(9000 <= j.get("next_due_in_ms", -99) <= 10000, "json: next_due_in_ms in [9000, 10000]", j)

section("after a cancel and a take")
eq(dq("cancel", "st", "a").rc, 0, "cancel a")
eq(dq("take", "st", "--timeout", "2s", "--no-scheduler").rc, 0, "take one ready item")
j = as_json("st")
eq((j.get("pending"), j.get("ready")), (2, 1), "json: pending 2, ready 1")
ok(19000 - 1000 <= j.get("next_due_in_ms", -99) <= 20000, "json: next_due_in_ms now follows b (~20 s)", j)

section("an overdue item (no scheduler running) counts 0 ms")
eq(dq("offer", "od", "200ms", "p", "--id", "o1").rc, 0, "offer od 200ms")
time.sleep(0.5)
j = as_json("od")
eq((j.get("pending"), j.get("ready"), j.get("next_due_in_ms")), (1, 0, 0), "json: pending 1, ready 0, next 0")

finish()
