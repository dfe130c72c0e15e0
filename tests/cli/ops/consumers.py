"""consumers.py - consumers are visible (issue 39): `delayq consumers QUEUE`
lists the live consumers of a queue with their names and items in hand.

With the consumers' beat shortened to 500 ms ($DELAYQ_CONSUMER_BEAT_MS; a
beat counts for 3 beats):
  - a `work --name W1 --concurrency 2` holding two items (commands that
    sleep) and a streaming `take --count 0 --name T1` are both listed, W1
    with in_hand 2 and T1 with 0, in text and --json (name, queue,
    started_ms, in_hand, last_seen_ms, last_seen_ago_ms);
  - W1 killed with SIGKILL drops out within 5 s (3 beats: 1.5 s), T1 stays;
  - T1 stopped with SIGTERM (a clean exit) drops out at once, and the
    queue's consumer keys are gone with the last one;
  - a consumer whose beats were not pruned yet is never listed once its
    last beat ran out (the list filters by last seen).
With the default beat, a consumer's beat counts for 45 s (its score in
Redis minus its last seen), so a dead one leaves the list within a minute.
A --name that is too long is a usage error (2).
`stats` of a queue never used (no keys, not in the registry) exits 1 with
a line naming it; of a known queue emptied, 0.
"""
import json
import os
import signal
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

Q = "cons-q"
FAST = {"DELAYQ_CONSUMER_BEAT_MS": "500"}


def listed(queue, env=FAST):
    """{name: consumer dict} from `consumers --json` ({} on failure)."""
    r = dq("consumers", queue, "--json", env=env)
    if r.rc != 0:
        return {}
    return {c["name"]: c for c in r.json_lines()}


section("two live consumers listed, with names and items in hand")
eq(dq("offer", Q, "0", "a", "--id", "a").rc, 0, "offer a")
eq(dq("offer", Q, "0", "b", "--id", "b").rc, 0, "offer b")
w1 = bg_dq("work", Q, "--name", "W1", "--concurrency", "2", "--exec", "sleep 6", env=FAST)
ok(wait_for(lambda: listed(Q).get("W1", {}).get("in_hand") == 2, 10), "W1 listed with 2 items in hand",
   (listed(Q), w1.err))
t1 = bg_dq("take", Q, "--count", "0", "--name", "T1", env=FAST)
ok(wait_for(lambda: set(listed(Q)) == {"W1", "T1"}, 10), "W1 and T1 listed", listed(Q))
c = listed(Q)
t = c.get("T1", {})
ok(t.get("queue") == Q and t.get("in_hand") == 0 and t.get("started_ms", 0) > 0 and
   0 <= t.get("last_seen_ago_ms", -1) < 1500 and t.get("last_seen_ms", 0) >= t.get("started_ms", 0),
   "T1's JSON: queue, in_hand 0, started_ms, last seen within the last beats", t)
r = dq("consumers", Q, env=FAST)
lines = r.text.splitlines()
ok(r.rc == 0 and len(lines) == 2 and lines[0].startswith("T1 in_hand 0 up_s ") and
   lines[1].startswith("W1 in_hand 2 up_s "), "text: one line per consumer, by name", r)

section("a consumer killed with SIGKILL drops out; a clean exit leaves at once")
os.kill(w1.pid, signal.SIGKILL)  # not w1.stop(): its commands keep its stdout open
w1.proc.wait()
t0 = time.monotonic()
gone = wait_for(lambda: "W1" not in listed(Q), 5)
ok(gone, f"W1 gone {time.monotonic() - t0:.1f} s after SIGKILL (its beats count 1.5 s)", listed(Q))
ok("T1" in listed(Q), "T1 still listed", listed(Q))
t1.stop(signal.SIGTERM)
ok(wait_for(lambda: listed(Q) == {}, 2), "T1 gone within 2 s of its clean exit", listed(Q))
left = redis("ZRANGE", "dq:{" + Q + "}:c", "0", "-1")
ok(b"T1" not in (left or []) and redis("HEXISTS", "dq:{" + Q + "}:ci", "T1") == 0,
   "T1 is out of the keys (W1 stays until a beat prunes it or the keys expire)", left)
ttl = redis("PTTL", "dq:{" + Q + "}:c")
ok(not left or 0 < ttl <= 61500, f"the keys expire a minute after the last beat ({ttl} ms)", ttl)

section("a consumer whose last beat ran out is not listed, pruned or not")
k = "dq:{" + Q + "}:c"
redis("ZADD", k, str(server_ms() - 1), "ghost")
redis("HSET", "dq:{" + Q + "}:ci", "ghost", f"{server_ms() - 5000}|1|{server_ms() - 5000}")
eq(listed(Q), {}, "ghost (beat ran out, not pruned yet) not listed")
redis("DEL", k, "dq:{" + Q + "}:ci")

section("the default beat: a dead consumer leaves within a minute")
t2 = bg_dq("take", Q, "--count", "0", "--name", "T2", env={"DELAYQ_CONSUMER_BEAT_MS": ""})
ok(wait_for(lambda: "T2" in listed(Q), 10), "T2 listed", listed(Q))
score = redis("ZSCORE", k, "T2")
seen = listed(Q).get("T2", {}).get("last_seen_ms", 0)
span = int(float(score)) - seen if score else -1
ok(span == 45000, f"its beat counts 45 s from its last beat ({span} ms): gone within a minute", (score, seen))
t2.stop(signal.SIGTERM)

section("bad names, unknown queues")
r = dq("take", Q, "--name", "x" * 65, "--timeout", "0")
ok(r.rc == 2 and "--name" in r.errtext, "take --name of 65 bytes: exit 2", r)
r = dq("work", Q, "--exec", "true", "--name", "")
ok(r.rc == 2 and "--name" in r.errtext, "work --name '': exit 2", r)
r = dq("stats", "cons-never-used")
ok(r.rc == 1 and "no queue cons-never-used" in r.errtext and r.text == "", "stats of a queue never used: exit 1", r)
r = dq("stats", Q)
ok(r.rc == 0 and "pending 0" in r.text, "stats of a known, empty queue: exit 0", r)

finish()
