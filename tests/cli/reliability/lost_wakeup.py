"""lost_wakeup.py - a scheduler whose wake-up message is lost (its pub/sub
connection killed right after the offer) still delivers the item: by its
reconnect catch-up or, at the latest, its safety re-check (default 5 s)."""
import os
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403


def subscribed(queue):
    r = redis("PUBSUB", "SHARDNUMSUB", f"dq:{{{queue}}}:w")
    return int(r[1]) >= 1


def one_round(queue, delay_ms, kill_before_offer):
    sched = bg_dq("schedule", queue)
    ok(wait_for(lambda: subscribed(queue), 5), f"{queue}: the scheduler subscribed to dq:{{{queue}}}:w")
    consumer = bg_dq("take", queue, "--json", "--no-scheduler", "--timeout", "15s")
    time.sleep(0.2)  # let the consumer connect
    if kill_before_offer:
        killed = redis("CLIENT", "KILL", "TYPE", "pubsub")
    t_offer = time.time()
    r = dq("offer", queue, f"{delay_ms}ms", "wake me", "--id", "lw1")
    if not kill_before_offer:
        killed = redis("CLIENT", "KILL", "TYPE", "pubsub")
    eq((r.rc, r.out), (0, b"lw1\n"), f"{queue}: offer {delay_ms}ms")
    ok(killed >= 1, f"{queue}: CLIENT KILL TYPE pubsub killed {killed} connection(s)")
    due = zscore_due(queue, "lw1")
    rc = consumer.wait(10)
    eq(rc, 0, f"{queue}: the --no-scheduler consumer got an item and exited 0")
    lines = consumer.snapshot()
    msgs = parse_json_lines(b"\n".join(line for _, line in lines))
    if eq([m["id"] for m in msgs], ["lw1"], f"{queue}: it got lw1"):
        m = msgs[0]
        recv = lines[0][0]
        eq(m["due_ms"], due, f"{queue}: due_ms as stored")
        ok(m["ready_ms"] >= m["due_ms"], f"{queue}: not before its due time", m)
        ok(recv - t_offer <= 7.0 * SLOW, f"{queue}: delivered within 7 s of the offer",
           f"{recv - t_offer:.2f} s")
        note(f"{queue}: lateness ready - due = {m['ready_ms'] - m['due_ms']} ms, "
             f"received {recv * 1000 - m['due_ms']:.0f} ms after due, {recv - t_offer:.2f} s after the offer")
    src = sched.stop()
    eq(src, 0, f"{queue}: the scheduler exits 0 on SIGTERM")
    consumer.stop()
    if src != 0:
        note(f"scheduler stderr: {sched.err.decode(errors='replace').strip()}")


section("pub/sub connection killed right after the offer (1500ms)")
one_round("lw", 1500, kill_before_offer=False)
section("pub/sub connection killed right before the offer (1500ms)")
one_round("lw2", 1500, kill_before_offer=True)
section("pub/sub connection killed right after an offer due now-ish (100ms)")
one_round("lw3", 100, kill_before_offer=False)

finish()
