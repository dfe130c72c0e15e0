"""chaos.py - at-least-once under crashes: 4 `delayq work --concurrency 4
--lease 2s` processes share one queue of 3,000 items (offer --batch, delays
0..2000 ms; 600 under a slow wrapper). Each command appends "<id> <attempt>"
to a shared log (one short O_APPEND write: atomic) and sleeps 0-50 ms (the
time comes in its payload). About every second (0.4 s in the scaled-down run)
one random worker is killed with SIGKILL and a new one started, until nothing
is pending or ready (at most 25 s); then the leases of the killed workers run
out and the survivors finish.

Checks: every item was delivered at least once (none lost), no delivery was
made twice (an (id, attempt) pair logs once), the queue ends empty (pending,
ready and in flight 0) with no dead letter, and the duplicates stay within
what the kills can explain (each kill can strand at most the worker's
concurrency plus the acks it had on the way). Prints the duplicates, the
kills and the times: the lead reports them. Set DQ_CHAOS_SEED to replay a
run's offer plan and kill choices."""
import os
import random
import signal
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403
from workers import *  # noqa: E402,F403

Q = "chaos"
N = 3000 if SLOW == 1 else 600
WORKERS = 4
CONC = 4
LEASE = "2s"
KILL_FOR_S = 25.0      # kills stop after this long at the latest
# The scaled-down run is over in about 2 s (the delays): kill more often.
KILL_EVERY_S = 1.0 if N == 3000 else 0.4
DRAIN_S = 20.0         # then everything must be acked within this
SEED = int(os.environ.get("DQ_CHAOS_SEED") or time.time_ns() % 1000000007)
rng = random.Random(SEED)
T_START = time.monotonic()

TMP = tmpdir()
LOG = os.path.join(TMP, "deliveries.log")
# The payload is the command's sleep time in seconds ("0.037"); read's exit
# status at the missing newline does not matter.
CMD = f'read s; printf "%s %s\\n" "$DELAYQ_ID" "$DELAYQ_ATTEMPT" >> {q(LOG)}; sleep "$s"'
note(f"seed {SEED}, {N} items, {WORKERS} workers x concurrency {CONC}, lease {LEASE}")


def start_worker():
    return work(Q, CMD, "--concurrency", CONC, "--lease", LEASE)


def numsub():
    try:
        return int(redis("PUBSUB", "SHARDNUMSUB", f"dq:{{{Q}}}:w")[1])
    except (OSError, RedisError, ValueError, IndexError):
        return -1


section(f"{WORKERS} workers, then {N} items")
live = [start_worker() for _ in range(WORKERS)]
ok(wait_for(lambda: numsub() >= WORKERS, 10), "all workers' schedulers subscribed")
ids = [f"c{i:05d}" for i in range(N)]
plan = {}
lines = []
for id_ in ids:
    delay = rng.randint(0, 2000)
    plan[id_] = delay
    lines.append(f"{delay}\t{id_}\t{rng.randint(0, 50) / 1000:.3f}\n")
t_offer = time.monotonic()
r = dq("offer", Q, "--batch", "-", stdin="".join(lines).encode(), timeout=60)
eq((r.rc, r.out), (0, f"{N}\n".encode()), f"offer --batch of {N}")

section(f"kill a random worker about every {KILL_EVERY_S:g} s, start a replacement")
killed = []   # (seconds after the offer, pid)
busy_kills = 0  # kills while items were ready: the victim had commands running
stats_seen = None
kill_end = time.monotonic() + KILL_FOR_S * SLOW
while time.monotonic() < kill_end:
    time.sleep(rng.uniform(0.8, 1.2) * KILL_EVERY_S)
    stats_seen = stats_json(Q)
    if stats_seen and stats_seen.get("pending") == 0 and stats_seen.get("ready") == 0:
        break  # nothing left to disrupt but what is in flight
    if stats_seen and stats_seen.get("ready", 0) > 0:
        busy_kills += 1
    victim = rng.choice(live)
    os.kill(victim.pid, signal.SIGKILL)
    killed.append((time.monotonic() - t_offer, victim.pid))
    live.remove(victim)
    try:
        victim.proc.wait(timeout=5)  # reap it; its commands finish by themselves
    except Exception:  # noqa: BLE001 - reported below as a failed check
        pass
    live.append(start_worker())
t_kills_over = time.monotonic() - t_offer
note(f"{len(killed)} kills, at {', '.join(f'{t:.1f}' for t, _ in killed)} s after the offer")
note(f"kills over {t_kills_over:.1f} s after the offer; stats then: {stats_seen}")
eq(all(not pid_alive(p) for _, p in killed), True, "every killed worker is gone")
ok(len(killed) >= 3, f"at least 3 kills happened while work was left ({len(killed)})")

section("the killed workers' leases run out; the survivors finish")
ok(wait_for(lambda: drained(Q), DRAIN_S, interval=0.2),
   f"pending 0, ready 0, in flight 0 within {DRAIN_S:.0f} s", stats_json(Q))
t_done = time.monotonic() - t_offer
n_before = log_count(LOG)
time.sleep(0.5)
eq(log_count(LOG), n_before, "no delivery after that")
final = stats(Q)
if final is not None:
    eq({k: final.get(k) for k in ("pending", "ready", "inflight", "dead", "set_aside")},
       {"pending": 0, "ready": 0, "inflight": 0, "dead": 0, "set_aside": 0}, "final stats")
eq(dead_count(Q), 0, "dead count 0")
rcs = [w.stop(signal.SIGTERM, timeout=10) for w in live]
eq(rcs, [0] * len(live), "the live workers stop on SIGTERM with exit 0")
for w in live:
    err = w.err.decode(errors="replace")
    if "failed" in err and "0 failed" not in err:
        note(f"worker {w.pid} stderr: {err.strip()[-400:]}")

section("none lost, each delivery once, duplicates explained by the kills")
recs, bad = read_log(LOG)
eq(bad, 0, "no malformed or torn log line")
seen = {}
for id_, attempt, _ in recs:
    seen.setdefault(id_, []).append(attempt)
missing = [i for i in ids if i not in seen]
unknown = [i for i in seen if i not in plan]
eq(len(missing), 0, f"every item delivered at least once (missing: {missing[:10]})")
eq(len(unknown), 0, f"no unknown id (first: {unknown[:5]})")
twice = {i: a for i, a in seen.items() if len(a) != len(set(a))}
eq(len(twice), 0, f"no (id, attempt) delivered twice (first: {list(twice.items())[:5]})")
dups = {i: sorted(a) for i, a in seen.items() if len(a) > 1}
extra = len(recs) - len(seen)
maxatt = max((max(a) for a in seen.values()), default=0)
bound = len(killed) * 2 * CONC
ok(extra <= bound, f"extra deliveries ({extra}) within {bound} (kills x 2 x concurrency)")
ok(maxatt <= 4, f"no item needed more than 4 attempts (max {maxatt})")
# A worker killed while items were waiting had commands running (logged,
# never acked): their leases must run out and bring them back.
if busy_kills:
    ok(len(dups) >= 1, f"{busy_kills} kills of busy workers brought items back ({len(dups)} duplicated ids)")

print()
print(f"CHAOS RESULT: {N} items, {len(recs)} deliveries, {len(dups)} duplicated ids "
      f"({extra} extra deliveries), {len(killed)} kills (SIGKILL), "
      f"{busy_kills} of them while items were ready, all acked {t_done:.1f} s after the offer (kills over at {t_kills_over:.1f} s), "
      f"max attempt {maxatt}, lost {len(missing)}, dead {final.get('dead') if final else '?'}, "
      f"seed {SEED}, test time {time.monotonic() - T_START:.1f} s")
if dups:
    shown = sorted(dups.items())
    print("duplicates (id: attempts logged): " + ", ".join(f"{i}: {a}" for i, a in shown[:60])
          + (f" ... and {len(shown) - 60} more" if len(shown) > 60 else ""))
print()
ok(time.monotonic() - T_START < 60 * SLOW, f"finished within {60 * SLOW} s")
finish()
