"""ha_paused_beats.py - a Sentinel master paused (SIGSTOP) under a beating
consumer and ticking schedules until the sentinels promote a replica, then
resumed (SIGCONT): it wakes believing it is master, with its old copy of the
consumer keys (dq:{Q}:c, dq:{Q}:ci) and of the schedules and tick buckets
(dq:{Q}:sched, dq:{Q}:tb), until the sentinels demote it some seconds later.

1 master, 2 replicas, 3 sentinels (down-after 1000 ms). On queue Q, through
the Sentinel URL: a `delayq schedule`, a `delayq work --name W1` (beats every
500 ms, $DELAYQ_CONSUMER_BEAT_MS; lease 5 s; it runs a scheduler too), three
`every 1s` schedules on one grid (--missed one, all, skip) and producers
offering with --wait-replicas all. Checks, each with a bounded wait:
  - consumers: W1 shows again in `delayq consumers` after the promotion,
    with a beat the new master stamped (last_seen_ms after the promotion;
    a direct read of the new master holds it too); a
    consumer and a schedule 'ghost' written into the woken old master are
    listed by a direct read of that node, but never by `consumers` or
    `schedules` through the Sentinel URL (no stale listing from it);
  - offers: every offer that exited 0 (--wait-replicas all) is run by W1,
    none lost; duplicates are possible (a take or an ack the failover
    undid: at-least-once) and counted;
  - ticks (ids NAME@<tick>, all on the grid of the first tick): for every
    policy, every tick due up to 1 s before the pause and every tick due
    from RESUME_S after the promotion runs (the schedule goes on ticking).
    'all' misses no tick at all. A transfer that finds the next tick due too
    applies the policy: 'one' makes the first missed tick's item and skips
    to the next tick after now, 'skip' makes none and skips; so the ticks of
    'one' and of 'skip' have gaps only around the outage (the check of
    ticks missing above), and the tick before each gap of 'one' is its item
    for the missed ticks, run 1 s or more after its tick. A scheduler still
    slow after the move (under ASan, on a loaded machine: seen 1.2-1.4 s
    late twice running) finds a tick missed on each late run, so the gaps
    are not counted. (Which ticks fall in the outage depends on when the
    clients reach the new master, so the test looks at gaps rather than at
    ticks due in the pause.)
    A tick runs twice only if it was due from 2 s before the pause to 1 s
    after the promotion, and never three times: the one failover can undo
    one making (a transfer on the old master not yet replicated: the new one
    makes the tick again) or one take or ack of it, no more;
  - the scheduler and the worker logged the move ("master ... is now at" or
    "reconnected") and kept running; SIGTERM stops each within 10 s, exit 0;
  - while the master is paused: a second scheduler and a second worker W2
    stopped with SIGTERM exit 0 within 6 s (they do not wait on the paused
    master), W2 (its 'bye' not sent) leaves the list as its beats run out,
    and one-shot `consumers` and `schedules` end within 5 s (exit 0 or 3).
The old master is resumed once the test sees the promotion, or with
DQ_PAUSED_RESUME=selected at the first +selected-slave (it then wakes while
the promotion goes on, as in ha_paused.py). Times are read on the test's
clock for the pause and the runs, on the server's for the ticks: one host.
"""
# tier: slow (about 25 s): make test runs it, make test-fast does not
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import BIN, SLOW, Bg, dq, finish, note, ok, section, wait_for  # noqa: E402
from hatraffic import Producer, SelectedWatch, sentinel_group  # noqa: E402
from topology import call, info  # noqa: E402

Q = "pbq"
POLICIES = ("one", "all", "skip")
# From the promotion to the first tick every policy must run again: the
# clients hear +switch-master at once; 1 s to reconnect and catch up, 2 s
# more for a loaded machine.
RESUME_S = 3.0 * SLOW
os.environ["DELAYQ_CONSUMER_BEAT_MS"] = "500"  # W1's beats count 1.5 s
# When the paused master is resumed: once the test sees the promotion
# ("promoted", the default), or as soon as a sentinel announces
# +selected-slave ("selected": it wakes while the promotion goes on).
RESUME = os.environ.get("DQ_PAUSED_RESUME", "promoted")


def lines(path):
    """[(id, run ms)] from the lines W1's command appended to path."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[1].isdigit():
                    out.append((parts[0], int(parts[1])))
    except OSError:
        pass
    return out


def ticks(path, name):
    """tick -> [run ms] of schedule name's items."""
    out = {}
    for id_, ms in lines(path):
        if id_.startswith(name + "@"):
            out.setdefault(int(id_.split("@", 1)[1]), []).append(ms)
    return out


def listed(url, what="consumers"):
    """{name: entry} from `consumers Q --json` (or `schedules`) through url;
    None on failure."""
    r = dq("--redis", url, what, Q, "--json", redis=False, timeout=10)
    if r.rc != 0:
        return None
    try:
        return {c["name"]: c for c in (json.loads(x) for x in r.out.splitlines() if x.strip())}
    except ValueError:
        return None


g, URL, wpath = sentinel_group()

section("an every-1s schedule per missed policy, a scheduler, a worker W1 and producers")
r = dq("--redis", URL, "every", Q, "one", "1s", "p-one", redis=False)
ok(r.rc == 0 and r.text.strip().isdigit(), "every one 1s prints its first tick", r)
start = int(r.text.strip()) if r.rc == 0 and r.text.strip().isdigit() else 0
for p in POLICIES[1:]:
    r = dq("--redis", URL, "every", Q, p, "1s", f"p-{p}", "--missed", p, "--start", start, redis=False)
    ok(r.rc == 0, f"every {p} 1s --missed {p} on the same grid", r)
sched = Bg([BIN, "--redis", URL, "schedule", Q], name="schedule")
RUN = f"printf '%s %s\\n' \"$DELAYQ_ID\" \"$(date +%s%3N)\" >> {wpath}"
work = Bg([BIN, "--redis", URL, "work", Q, "--name", "W1", "--concurrency", "4", "--lease", "5s", "--exec", RUN],
          name="work")
# Stopped while the master is paused: they must not wait for it.
sched2 = Bg([BIN, "--redis", URL, "schedule", Q], name="schedule 2")
work2 = Bg([BIN, "--redis", URL, "work", Q, "--name", "W2", "--lease", "5s", "--exec", RUN], name="work W2")
prods = [Producer(URL, f"o{i}-", [Q], wait="all") for i in range(2)]
for p in prods:
    p.start()
ok(wait_for(lambda: {"W1", "W2"} <= set(listed(URL) or {}), 10), "W1 and W2 listed by `consumers`", listed(URL))
ok(wait_for(lambda: all(len(ticks(wpath, p)) >= 3 for p in POLICIES), 10), "3 ticks of each schedule run")
ok(wait_for(lambda: sum(1 for p in prods for r in p.results if r[2] == 0) >= 20, 30), "offers confirmed")

section("the master paused until a replica is promoted, then resumed")
old = g.master_port()
pid = g.procs[old].pid
watch = SelectedWatch(g.sentinel_ports, lambda: os.kill(pid, signal.SIGCONT)) if RESUME == "selected" else None
t_stop = time.time()
os.kill(pid, signal.SIGSTOP)
during = {}  # what ran while the master was paused -> (exit code, seconds)


def timed(label, fn):
    t0 = time.monotonic()
    rc = fn()
    during[label] = (rc, time.monotonic() - t0)


try:
    time.sleep(0.3)
    threads = [threading.Thread(target=timed, args=(f"{w} (one-shot)", lambda w=w: dq(
        "--redis", URL, w, Q, redis=False, timeout=20).rc)) for w in ("consumers", "schedules")]
    for bg in (sched2, work2):
        os.kill(bg.pid, signal.SIGTERM)
        threads.append(threading.Thread(target=timed, args=(f"{bg.name} (SIGTERM)", lambda bg=bg: bg.wait(20))))
    for t in threads:
        t.start()
    promoted = g.wait_new_master(old, timeout=20)
    t_prom = time.time()
finally:
    os.kill(pid, signal.SIGCONT)
    if watch:
        watch.close()
ok(promoted, "a replica is promoted", g.master_port())
for t in threads:
    t.join(25 * SLOW)
# A one-shot command waits for the sentinels' answer (connect_timeout_ms,
# 2 s); a stopped process lets the replies the paused master owes it come
# for up to command_timeout_ms (5 s: see dq_client_free), less once a
# sentinel's +selected-slave has it drop that master's connections.
for label, (rc, took) in sorted(during.items()):
    want, bound = ((0,), 6) if "SIGTERM" in label else ((0, 3), 5)
    ok(rc in want and took < bound * SLOW, f"during the pause: {label} ends in {took:.2f} s, exit {rc}",
       (want, bound))
ok(len(during) == 4, "all four ended", during)
woke = watch.at if watch and watch.at else t_prom
note(f"resumed {woke - t_stop:.2f} s after the pause ({RESUME}); promotion seen after {t_prom - t_stop:.2f} s")

# The woken master still holds its keys and takes writes: a consumer no
# beat wrote and a schedule no client set, which only a listing read from
# it can show (an undecodable schedule lists as 'bad').
ghost = ({}, {})
try:
    sec, us = call(old, "TIME")
    now = int(sec) * 1000 + int(us) // 1000
    call(old, "ZADD", f"dq:{{{Q}}}:c", now + 60000, "ghost")
    call(old, "HSET", f"dq:{{{Q}}}:ci", "ghost", f"{now}|0|{now}")
    call(old, "HSET", f"dq:{{{Q}}}:sched", "ghost", "x")
    ghost = (listed(f"redis://127.0.0.1:{old}"), listed(f"redis://127.0.0.1:{old}", "schedules"))
except (OSError, RuntimeError) as exc:
    note(f"the woken master refused the ghosts: {exc}")
ok(all(v and "ghost" in v for v in ghost), "the woken old master, read directly, lists both ghosts", ghost)

section("consumers through the Sentinel URL while the old master wakes and is demoted")
cviews, sviews, reshown = [], [], None
end = time.monotonic() + 20 * SLOW
while time.monotonic() < end:
    v = listed(URL)
    cviews.append(v)
    sviews.append(listed(URL, "schedules"))
    w1 = (v or {}).get("W1")
    if reshown is None and w1 and w1["last_seen_ms"] >= t_prom * 1000:
        reshown = time.time()
    if reshown and info(old, "replication").get("role") == "slave":
        break
    time.sleep(0.2)
ok(info(old, "replication").get("role") == "slave", "the old master is demoted")
ok(reshown is not None and reshown - t_prom <= 5 * SLOW,
   "W1 shows again within 5 s of the promotion, with a beat stamped after it",
   reshown and reshown - t_prom)
if reshown:
    note(f"W1 listed again {reshown - t_prom:.2f} s after the promotion")
ok(cviews and "W2" not in (cviews[-1] or {"W2": 1}),
   "W2, stopped in the pause (its 'bye' could not be sent), is no longer listed: its beats ran out", cviews[-1:])
stale = [v for v in cviews + sviews if v is None or "ghost" in v]
ok(cviews and not stale, f"no listing through the Sentinel URL fails or shows a ghost ({2 * len(cviews)} listings)",
   stale[:2])
new = g.master_port()
direct = listed(f"redis://127.0.0.1:{new}") or {}
ok(direct.get("W1", {}).get("last_seen_ms", 0) >= t_prom * 1000 and "ghost" not in direct,
   "the new master, read directly, holds W1's beats since the promotion and no ghost", direct)

section("ticks and offers after the failover")
ok(wait_for(lambda: sum(1 for p in prods for r in p.results if r[2] == 0 and r[3] > t_prom) >= 15, 30),
   "offers after the promotion are confirmed")
t_last = t_prom + RESUME_S + 4  # every policy's ticks up to here are checked
ok(wait_for(lambda: time.time() > t_last + 1.5 and
            all(any(t > t_last * 1000 for t in ticks(wpath, p)) for p in POLICIES), 20),
   "every schedule ticks past the checked span")
for p in prods:
    p.stop()
confirmed = [r[0] for p in prods for r in p.results if r[2] == 0]
outcomes = {}
for p in prods:
    for r in p.results:
        outcomes[r[2]] = outcomes.get(r[2], 0) + 1
note(f"offer exit codes: {outcomes} (3: no master for a moment; 4: written, not confirmed by all)")


def missing_offers():
    run = {i for i, _ in lines(wpath)}
    return [i for i in confirmed if i not in run]


wait_for(lambda: not missing_offers(), 20)
m = missing_offers()
ok(confirmed and not m, f"every confirmed offer run ({len(confirmed)})", (len(m), m[:10]))
counts = {}
for i, _ in lines(wpath):
    counts[i] = counts.get(i, 0) + 1
note(f"offers run more than once: {sum(1 for i in confirmed if counts.get(i, 0) > 1)}")

stop_ms, prom_ms, last_ms = t_stop * 1000, t_prom * 1000, t_last * 1000
for p in POLICIES:
    got = ticks(wpath, p)
    ts = sorted(got)
    ok(all(t >= start and (t - start) % 1000 == 0 for t in ts), f"{p}: every tick on the grid", ts[:5])
    want = [t for t in range(start, int(last_ms), 1000) if t <= stop_ms - 1000 or t >= prom_ms + RESUME_S * 1000]
    if p == "all":
        want = list(range(start, int(last_ms), 1000))
    lost = [t for t in want if t not in got]
    ok(not lost, f"{p}: no tick missing {'at all' if p == 'all' else 'before the pause or after the resumption'}",
       lost)
    gaps = [(a, b) for a, b in zip(ts, ts[1:]) if b - a > 1000]
    if p == "one":
        ok(all(max(got[a]) - a >= 1000 for a, _ in gaps),
           "one: each gap after an item made late for the missed ticks", (gaps, got))
    if p == "skip":
        note(f"skip: gaps {gaps}")
    twice = {t: len(v) for t, v in got.items() if len(v) > 1}
    odd = {t: n for t, n in twice.items() if n > 2 or not stop_ms - 2000 <= t <= prom_ms + 1000}
    ok(not odd, f"{p}: ticks run twice only around the failover, none three times", (odd, stop_ms, prom_ms))
    late = [t for t in ts if min(got[t]) - t >= 1000]
    after = [(t, min(v) - t) for t, v in sorted(got.items()) if min(v) > prom_ms]
    first = f"tick {(after[0][0] - prom_ms) / 1000:+.2f} s from it, run {after[0][1]} ms late" if after else "none"
    note(f"{p}: {len(ts)} ticks, {len(late)} first run 1 s or more late, gaps (ticks skipped) "
         f"{[(b - a) // 1000 - 1 for a, b in gaps]}, {len(twice)} run twice; the first run after the promotion: "
         f"{first}")

section("the CLI processes followed the move and stop cleanly")
ok(sched.running() and work.running(), "the scheduler and the worker still run")
for bg in (sched, work):
    t0 = time.monotonic()
    rc = bg.stop(signal.SIGTERM, timeout=10)
    took = time.monotonic() - t0
    err = bg.err.decode(errors="replace")
    ok(rc == 0 and took < 10 * SLOW, f"{bg.name}: SIGTERM stops it, exit 0 ({took:.2f} s)", (rc, err[-400:]))
    moved = [x for x in err.splitlines() if "is now at" in x or "reconnected" in x]
    ok(moved, f"{bg.name}: logged the move", err[-600:])
    note(f"{bg.name}'s log: " + " | ".join(err.splitlines()[:6]))

g.stop()
finish()
