"""config.py - delayq config QUEUE: a queue's own settings, and the consumers
that follow them (take --ack manual and work without their own flags)."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403
from workers import lease_end  # noqa: E402

section("defaults, changes, reset")
r = dq("config", "cq", "--json")
eq(r.rc, 0, "config --json exits 0")
eq(json.loads(r.out), {"lease_ms": 30000, "max_attempts": 16, "backoff_base_ms": 1000,
                       "backoff_max_ms": 600000, "shards": 1}, "the defaults")
r = dq("config", "cq", "--lease", "700ms", "--max-attempts", "2", "--backoff-base", "50ms",
       "--backoff-max", "100ms")
eq(r.rc, 0, "setting all four exits 0")
eq(r.text.split(), ["lease_ms", "700", "max_attempts", "2", "backoff_base_ms", "50",
                    "backoff_max_ms", "100", "shards", "1"], "plain output: name value lines")
eq(dq("config", "cq", "--lease", "0").rc, 2, "a lease of 0: usage error")
eq(dq("config", "cq", "--max-attempts", "x").rc, 2, "max attempts not a number: usage error")
r = dq("config", "cq", "--backoff-base", "1s")
eq(r.rc, 2, "base above the cap: refused by the script, an input error (2)")
eq(json.loads(dq("config", "cq", "--json").out)["backoff_base_ms"], 50, "... and nothing changed")

section("take --ack manual without --lease: the queue's lease")
dq("offer", "cq", "0", "one", "--id", "t1")
t0 = server_ms()
r = dq("take", "cq", "--ack", "manual", "--json", "--timeout", "2s")
eq(r.rc, 0, "take exits 0")
d = lease_end("cq", "t1")
ok(d is not None and t0 + 700 <= d <= server_ms() + 700, "in flight for the queue's 700 ms", d)

section("work without --max-attempts: the queue's 2 attempts")
with tempfile.TemporaryDirectory() as tmp:
    log = os.path.join(tmp, "log")
    dq("offer", "cw", "0", "x", "--id", "w1")
    dq("config", "cw", "--max-attempts", "2", "--backoff-base", "20ms", "--backoff-max", "40ms")
    w = bg_dq("work", "cw", "--exec", f'echo "$DELAYQ_ATTEMPT" >> {log}; exit 1')
    wait_for(lambda: dq("dead", "cw", "count").text.strip() == "1", 10)
    w.stop()
    with open(log) as f:
        attempts = f.read().split()
    eq(attempts, ["1", "2"], "exactly 2 deliveries, then a dead letter")
    eq(dq("dead", "cw", "count").text.strip(), "1", "one dead letter")

finish()
