"""multiprocess.py - 2 producers (offer --batch of 2,500 lines each, random
delays 0..3000 ms) and 3 consumers (take --count 0 --json --timeout 12s, each
with its in-process scheduler) on one queue: all 5,000 delivered exactly once
across the three, none before its due time. Prints the lateness."""
# tier: slow (about 12 s): make test runs it, make test-fast does not
import os
import random
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

Q = "mp"
PER = 2500
rng = random.Random(20240611)
plan = {}  # id -> delay ms
files = []
for k in range(2):
    lines = []
    for i in range(PER):
        id_ = f"p{k}-{i:04d}"
        d = rng.randint(0, 3000)
        plan[id_] = d
        lines.append(f"{d}\t{id_}\tpayload {id_} {d}\n")
    files.append("".join(lines).encode())

section("3 consumers, then 2 producers at the same time")
consumers = [bg_dq("take", Q, "--count", "0", "--json", "--timeout", "12s") for _ in range(3)]
ok(wait_for(lambda: int(redis("PUBSUB", "SHARDNUMSUB", f"dq:{{{Q}}}:w")[1]) >= 3, 5),
   "all three in-process schedulers subscribed")
s_start = server_ms()
t_start = time.time()
producers = [bg_dq("offer", Q, "--batch", "-", stdin=f) for f in files]
prc = [p.wait(20) for p in producers]
s_end = server_ms()
note(f"producers done in {time.time() - t_start:.2f} s")
eq(prc, [0, 0], "both producers exit 0")
eq([p.snapshot()[0][1] if p.count() else None for p in producers], [b"2500", b"2500"], "each printed 2500")

crc = [c.wait(20) for c in consumers]
note(f"consumers done {time.time() - t_start:.2f} s after the producers started")
eq(crc, [0, 0, 0], "all three consumers exit 0 at their timeout")
for c in consumers:
    if c.err.strip():
        note(f"consumer {c.pid} stderr: {c.err.decode(errors='replace').strip()[:300]}")

section("exactly once, never early")
recs = []
per = []
for c in consumers:
    lines = c.snapshot()
    per.append(len(lines))
    for t, line in lines:
        for m in parse_json_lines(line):
            recs.append((t, m))
note(f"deliveries per consumer: {per}")
got = [m["id"] for _, m in recs]
counts = {}
for i in got:
    counts[i] = counts.get(i, 0) + 1
missing = [i for i in plan if i not in counts]
dups = [i for i, n in counts.items() if n > 1]
extra = [i for i in counts if i not in plan]
eq(len(missing), 0, f"no item missing (first: {missing[:5]})")
eq(len(dups), 0, f"no item delivered twice (first: {dups[:5]})")
eq(len(extra), 0, "no unknown item")
eq(len(got), 2 * PER, "5000 deliveries in all")
early = [m for _, m in recs if m["ready_ms"] < m["due_ms"]]
eq(len(early), 0, f"ready_ms >= due_ms for all (first: {early[:3]})")
badpay = [m["id"] for _, m in recs if m.get("payload") != f"payload {m['id']} {plan.get(m['id'])}"]
eq(len(badpay), 0, f"every payload matches its id (first: {badpay[:3]})")
offby = [m["id"] for _, m in recs if m["id"] in plan and
         not (s_start + plan[m["id"]] <= m["due_ms"] <= s_end + plan[m["id"]])]
eq(len(offby), 0, f"due_ms = offer time + its delay (first: {offby[:3]})")
early_recv = [m["id"] for t, m in recs if t * 1000 < m["due_ms"] - 1]
eq(len(early_recv), 0, f"no item received before its due time by the local clock (first: {early_recv[:3]})")
# Per consumer, the order it received is the order of due times (one ready list).
for n, c in enumerate(consumers):
    ms = parse_json_lines(b"\n".join(line for _, line in c.snapshot()))
    keys = [(m["ready_ms"]) for m in ms]
    ok(keys == sorted(keys), f"consumer {n}: ready_ms non-decreasing in its output")

section("lateness")
lat = sorted(m["ready_ms"] - m["due_ms"] for _, m in recs)
rlat = sorted(t * 1000 - m["due_ms"] for t, m in recs)
if lat:
    note(f"ready - due   (server ms): p50 {percentile(lat, 50)}  p99 {percentile(lat, 99)}  max {lat[-1]}")
    note(f"receive - due (local ms):  p50 {percentile(rlat, 50):.1f}  p99 {percentile(rlat, 99):.1f}  "
         f"max {rlat[-1]:.1f}")
    ok(percentile(lat, 99) <= 1000 * SLOW, f"p99 ready lateness under 1 s ({percentile(lat, 99)} ms)")
    ok(lat[-1] <= 5500 * SLOW, f"max ready lateness within the safety interval ({lat[-1]} ms)")
try:
    left = (slot_records(Q), redis("LLEN", f"dq:{{{Q}}}:r"), redis("LLEN", f"dq:{{{Q}}}:x"), id_index_size(Q))
    eq(left, (0, 0, 0, 0), "nothing left pending, ready, set aside or in the id index")
except RedisError as exc:
    ok(False, "Redis answers", exc)

finish()
