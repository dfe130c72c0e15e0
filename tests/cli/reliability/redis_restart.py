"""redis_restart.py - Redis stops (SIGTERM, AOF on) and starts again on the
same port and dir while a scheduler and a consumer run: every offered item
is still delivered exactly once, none before its due time."""
import os
import random
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

N = 100
Q = "rs"
rng = random.Random(4711)
delays = [rng.randint(0, 3000) for _ in range(N)]
ids = [f"rs{i:03d}" for i in range(N)]

section("a scheduler and a consumer in the background")
sched = bg_dq("schedule", Q)
consumer = bg_dq("take", Q, "--count", "0", "--json", "--no-scheduler")
ok(wait_for(lambda: int(redis("PUBSUB", "SHARDNUMSUB", f"dq:{{{Q}}}:w")[1]) >= 1, 5), "the scheduler subscribed")
time.sleep(0.2)

section(f"offer {N} items with delays 0..3000 ms")
batch = "".join(f"{d}\t{i}\tpayload of {i}\n" for d, i in zip(delays, ids)).encode()
t_offer = time.time()
s_offer = server_ms()
r = dq("offer", Q, "--batch", "-", stdin=batch)
eq((r.rc, r.out), (0, b"%d\n" % N), "offer --batch prints 100")

time.sleep(max(0.0, t_offer + 1.0 - time.time()))
section("stop Redis about 1 s in, start it again 1 s later")
before = consumer.count()
t_stop = time.time()
ok(redis_stop(), "redis stopped (SIGTERM by pid, waited until down)")
note(f"{before} items delivered before the stop; down after {time.time() - t_stop:.2f} s")
time.sleep(1.0)
ok(redis_start(), "redis started again on the same port and dir")
t_up = time.time()
note(f"Redis was down for {t_up - t_stop:.2f} s")
try:
    left = slot_records(Q) + redis("LLEN", f"dq:{{{Q}}}:r")
    note(f"after the restart: {left} items pending or ready, {consumer.count()} delivered")
except RedisError as exc:
    note(f"after the restart: {exc}")

# Until every item is due + 6 s: late duplicates would show up by then too.
deadline = s_offer / 1000.0 + 3.0 + 6.0
wait_for(lambda: consumer.count() >= N, max(0.5, deadline - time.time()))
note(f"all {consumer.count()} in after {time.time() - t_offer:.2f} s; watching until due + 6 s")
time.sleep(max(0.0, deadline - time.time()))
ok(consumer.running(), "the consumer survived the restart")
ok(sched.running(), "the scheduler survived the restart")
crc = consumer.stop()
src = sched.stop()
eq(crc, 0, "the consumer (--count 0) exits 0 on SIGTERM")
eq(src, 0, "the scheduler exits 0 on SIGTERM")

section("every item delivered exactly once, none early")
lines = consumer.snapshot()
msgs = parse_json_lines(b"\n".join(line for _, line in lines))
got = [m["id"] for m in msgs]
missing = sorted(set(ids) - set(got))
dups = sorted({i for i in got if got.count(i) > 1})
extra = sorted(set(got) - set(ids))
eq(missing, [], "no item missing")
eq(dups, [], "no item delivered twice")
eq(extra, [], "no unknown item")
eq(len(got), N, f"{N} deliveries")
early = [m for m in msgs if m["ready_ms"] < m["due_ms"]]
eq(early, [], "ready_ms >= due_ms for all")
want = dict(zip(ids, delays))
badpay = [m["id"] for m in msgs if m.get("payload") != f"payload of {m['id']}"]
eq(badpay, [], "every payload matches its id")
offby = [m["id"] for m in msgs if m["id"] in want and not (s_offer + want[m["id"]] <= m["due_ms"] <= s_offer + want[m["id"]] + 2000)]
eq(offby, [], "due_ms = offer time + its delay")
late = sorted(m["ready_ms"] - m["due_ms"] for m in msgs)
if late:
    note(f"lateness ready - due: p50 {percentile(late, 50)} ms, max {late[-1]} ms "
         f"(items due while Redis was down are late by design)")
if consumer.err.strip() or sched.err.strip():
    note(f"consumer stderr: {consumer.err.decode(errors='replace').strip()[:500]}")
    note(f"scheduler stderr: {sched.err.decode(errors='replace').strip()[:500]}")
try:
    left = (slot_records(Q), redis("LLEN", f"dq:{{{Q}}}:r"), redis("LLEN", f"dq:{{{Q}}}:x"), id_index_size(Q))
    eq(left, (0, 0, 0, 0), "nothing left pending, ready, set aside or in the id index")
except RedisError as exc:
    ok(False, "Redis answers after the test", exc)

finish()
