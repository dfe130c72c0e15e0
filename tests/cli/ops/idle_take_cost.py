"""idle_take_cost.py - what idle takes cost Redis: a take whose wait (BLPOP,
2.5 s: half safety_check_ms) ends empty asks LLEN of the ready list, and
runs the take script only when entries wait there (their wake tokens taken
by a consumer that was paused or died: paused_consumer.py checks that case).

Four `take --no-scheduler` on an empty queue, watched with MONITOR for
6 s (two waits each): no take script call, an LLEN per ended wait (each
ended wait ran the take script: 8 calls in 6 s, 280 FCALLs in 30 s for 20
takes, where the same takes had cost 40, their beats). Then an item offered
is taken at once by one of them.

A sharded take does the same per shard (src/ops/waiter.c): T1 waiting on
both shards of a queue is paused (SIGSTOP) and pops the token of the next
item; T2, waiting behind it, gets the item after its 2.5 s wait (it
waited for ever: nothing looked again without a scheduler).
"""
# tier: slow
import os
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

Q = "idlecost"
eq(dq("offer", Q, "1h", "later").rc, 0, "the queue exists (an item due in an hour)")
# Their timeout outlasts the watch below (6 s, scaled like it under a wrapper).
takes = [bg_dq("take", Q, "--no-scheduler", "--timeout", f"{20 * SLOW}s") for _ in range(4)]
ok(wait_for(lambda: command_calls("blpop") >= 4, 10), "the four takes wait")
time.sleep(0.3)
mon = subprocess.Popen(["redis-cli", "-p", str(PORT), "monitor"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL)
try:
    time.sleep(6 * SLOW)
finally:
    mon.terminate()
lines = mon.communicate(timeout=10)[0].lower().splitlines()
script = [ln for ln in lines if b'"fcall' in ln and b'_take"' in ln]
llen = [ln for ln in lines if b'"llen" "dq:{' + Q.encode() + b'}:r"' in ln and b"lua]" not in ln]
blpops = [ln for ln in lines if b'"blpop"' in ln]
ok(len(blpops) >= 4, "the takes waited again meanwhile", len(blpops))
eq(len(script), 0, "no take script ran for an empty wait")
ok(len(llen) >= 4, "an LLEN of the ready list after each ended wait", len(llen))
t0 = time.monotonic()
eq(dq("offer", Q, "0", "now", "--id", "now").rc, 0, "an item ready now")
ok(wait_for(lambda: sum(t.count() for t in takes) >= 1, 5), "one take gets it at once",
   round(time.monotonic() - t0, 2))
for t in takes:
    t.stop()

section("a sharded take: a paused waiter swallows a token, another take looks again after its wait")
Q2 = "idlecost2"
eq(dq("config", Q2, "--shards", "2").rc, 0, "a queue of 2 shards")


def blocked():
    """The idle seconds of each client waiting in a BLPOP, from CLIENT LIST."""
    return [int(ln.split(" idle=")[1].split()[0]) for ln in redis("CLIENT", "LIST").decode().splitlines()
            if "cmd=blpop" in ln and "flags=b" in ln]


t1 = bg_dq("take", Q2, "--no-scheduler", "--count", "0", "--json")
t2 = None
try:
    # Paused within a second of its BLPOPs (2.5 s, one per shard), so that
    # they are still out in Redis, first in line, when the item comes.
    ok(wait_for(lambda: blocked() == [0, 0], 10), "T1 waits on both shards", t1.err)
    os.kill(t1.pid, signal.SIGSTOP)
    t2 = bg_dq("take", Q2, "--no-scheduler", "--json", "--timeout", "8s")
    ok(wait_for(lambda: len(blocked()) == 4, 10), "T2 waits behind it", t2.err)
    eq(dq("offer", Q2, "0", "job", "--id", "j").rc, 0, "offer j (due now: ready, one wake token)")
    t0 = time.monotonic()
    eq(t2.wait(10), 0, "T2 got j, though paused T1 popped its token (no scheduler tops tokens up)")
    ok(time.monotonic() - t0 < 2.5 + 2 * SLOW, "within its own wait of 2.5 s and a look",
       round(time.monotonic() - t0, 2))
    eq([m.get("id") for m in parse_json_lines(b"\n".join(ln for _, ln in t2.snapshot()))], ["j"], "it printed j")
finally:
    os.kill(t1.pid, signal.SIGCONT)
eq(t1.stop(), 0, "T1, resumed, exits 0 on SIGTERM")
eq(t1.count(), 0, "T1 got nothing")
finish()
