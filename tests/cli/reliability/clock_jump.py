"""clock_jump.py - a redis-server whose clock jumps 60 s, back or forward.

A redis-server of its own (AOF, fsync always; a free 127.0.0.1 port, a temp
dir, stopped by pid) restarted under pending items with its wall clock
shifted by an LD_PRELOAD shim (tests/tools/preload/clockshift.c: TIME, expiry and
AOF read the shifted clock), a scheduler and a consumer running:
  - 60 s back: no item is delivered before its due time by the old clock;
    the queue's time stands at its high-water mark, so an item offered
    meanwhile with a 1 s delay is due 1 s after the last time the queue
    used, not 59 s before it; back on the right clock, every item comes,
    once, none early;
  - 60 s forward: items due within the jump come at once, none early by
    more than the jump (the documented bound); one due after the jump is
    not delivered before its due time minus the jump; when the jump is
    undone (the right clock again), the queue's time does not run
    backwards: an item offered with a 1 s delay is due 1 s after the
    queue's mark, late by at most the jump, not due before items offered
    earlier.
"""
# tier: slow (about 10 s): make test runs it, make test-fast does not
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403
import dqtest  # noqa: E402
from ownserver import OwnServer  # noqa: E402

JUMP_MS = 60000
SLACK_MS = 1500  # a delivery's own path: scheduler, consumer, process start
SHIM = os.path.join(os.path.dirname(BIN), "tests", "tools", "clockshift.so")

own = OwnServer("delayq-clock.")
tmp, port, url = own.dir, own.port, own.url
stop_server, rcmd = own.stop, own.cmd


def start_server(shift_ms):
    """The server with AOF, fsync always, its clock shifted by shift_ms."""
    return own.start("--save", "", "--appendonly", "yes", "--appendfsync", "always",
                     env={"LD_PRELOAD": SHIM, "CLOCKSHIFT_MS": str(shift_ms)})


def server_clock_ms():
    s, us = rcmd("TIME")
    return int(s) * 1000 + int(us) // 1000


def host_ms():
    return int(time.time() * 1000)


def run(*args, stdin=None):
    return dq("--redis", url, *args, stdin=stdin, redis=False)


def bg(*args):
    return Bg([BIN, "--redis", url] + [str(a) for a in args], name="delayq " + " ".join(map(str, args[:2])))


def due_of(queue, id_):
    r = run("lookup", queue, id_, "--json")
    return json.loads(r.out)["due_ms"] if r.rc == 0 else None


def offer_batch(queue, items):
    """items: (delay ms, id); returns {id: due ms} as lookup reports them."""
    batch = "".join(f"{d}\t{i}\tpayload {i}\n" for d, i in items).encode()
    r = run("offer", queue, "--batch", "-", stdin=batch)
    eq(r.rc, 0, f"offer {len(items)} items to {queue}")
    return {i: due_of(queue, i) for _, i in items}


def deliveries(consumer):
    """{id: host receive time ms} of the consumer's deliveries, and the count of all."""
    lines = consumer.snapshot()
    got = {}
    for t, line in lines:
        m = json.loads(line)
        got.setdefault(m["id"], int(t * 1000))
    return got, len(lines)


try:
    ok(os.path.exists(SHIM), f"the clock shim is built ({SHIM})")

    section("60 s back")
    ok(start_server(0), f"a redis-server with AOF on port {port}, on the right clock")
    t0 = host_ms()  # the server's clock too: the queue's mark is at least this
    dues = offer_batch("cb", [(2000 + 500 * k, f"b{k}") for k in range(8)])
    ok(all(d is not None and t0 + 2000 + 500 * k <= d <= t0 + 2000 + 500 * k + 1500 for k, d in
           enumerate(dues[f"b{k}"] for k in range(8))), "due times are offer time + delay", dues)
    stop_server()
    ok(start_server(-JUMP_MS), "restarted with its clock 60 s back (AOF kept)")
    skew = server_clock_ms() - host_ms()
    ok(-JUMP_MS - 1000 <= skew <= -JUMP_MS + 1000, f"the server's clock is 60 s behind ({skew} ms)")
    sched = bg("schedule", "cb")
    consumer = bg("take", "cb", "--count", "0", "--json", "--no-scheduler")
    t_new = host_ms()
    eq(run("offer", "cb", "1s", "late", "--id", "bnew").rc, 0, "offer bnew with a 1 s delay")
    d_new = due_of("cb", "bnew")
    ok(d_new is not None and d_new >= t0 + 1000,
       f"bnew is due 1 s after the queue's mark, not 59 s before it (due - offer = {d_new - t_new} ms)")
    end = max(dues.values()) + 2000
    time.sleep(max(0.0, (end - host_ms()) / 1000.0))
    got, n = deliveries(consumer)
    early = {i: got[i] - d for i, d in list(dues.items()) + [("bnew", d_new)] if i in got and got[i] < d}
    eq(early, {}, f"no item delivered before its due time by the old clock ({n} delivered while behind)")

    stop_server()
    ok(start_server(0), "restarted on the right clock again")
    ok(wait_for(lambda: deliveries(consumer)[1] >= 9, 10), "every item comes")
    time.sleep(0.5)
    got, n = deliveries(consumer)
    eq(n, 9, "each once")
    early = {i: got[i] - d for i, d in list(dues.items()) + [("bnew", d_new)] if got.get(i, d) < d}
    eq(early, {}, "none before its due time")
    for p in (sched, consumer):
        eq(p.stop(), 0, f"{p.name} exits 0 on SIGTERM")

    section("60 s forward, then back")
    t0 = host_ms()
    dues = offer_batch("cf", [(3000 + 500 * k, f"f{k}") for k in range(8)] + [(JUMP_MS + 30000, "ffar")])
    stop_server()
    ok(start_server(JUMP_MS), "restarted with its clock 60 s ahead")
    skew = server_clock_ms() - host_ms()
    ok(JUMP_MS - 1000 <= skew <= JUMP_MS + 1000, f"the server's clock is 60 s ahead ({skew} ms)")
    sched = bg("schedule", "cf")
    consumer = bg("take", "cf", "--count", "0", "--json", "--no-scheduler")
    ok(wait_for(lambda: deliveries(consumer)[1] >= 8, 10), "the items due within the jump come at once")
    got, n = deliveries(consumer)
    early = sorted(dues[i] - got[i] for i in got)
    note(f"early by {early[0]}..{early[-1]} ms")
    ok(all(e <= JUMP_MS + SLACK_MS for e in early), "none early by more than the jump", early)
    ok("ffar" not in got or got["ffar"] >= dues["ffar"] - JUMP_MS - SLACK_MS,
       "the item due after the jump is not early by more than the jump")
    # The queue's time the transfers used (each delivery's ready time): its
    # mark is at least the latest.
    used = max(m["ready_ms"] for m in (json.loads(line) for _, line in consumer.snapshot()))
    mark = rcmd("HGET", "dq:{cf}:n", "clock")
    ok(mark is not None and int(mark) >= used >= host_ms() + JUMP_MS - 5000,
       "the queue's mark is the shifted clock's", (mark, used))

    stop_server()
    ok(start_server(0), "restarted on the right clock (the jump undone)")
    t_new = host_ms()
    eq(run("offer", "cf", "1s", "after", "--id", "fafter").rc, 0, "offer fafter with a 1 s delay")
    d_new = due_of("cf", "fafter")
    ok(d_new is not None and d_new >= used + 1000,
       "the queue's time did not run backwards: due 1 s after the time it used", (d_new, used))
    ok(d_new - t_new <= 1000 + JUMP_MS + SLACK_MS,
       f"late by at most the jump ({d_new - t_new - 1000} ms)")
    ok(d_new > dues["f7"], "not due before an item offered earlier with a longer delay")
    time.sleep(1.5)
    got, n = deliveries(consumer)
    ok("fafter" not in got, "not delivered by the right clock's 1 s")
    for p in (sched, consumer):
        eq(p.stop(), 0, f"{p.name} exits 0 on SIGTERM")
finally:
    dqtest._stop_all()
    stop_server()
    shutil.rmtree(tmp, ignore_errors=True)

finish()
