"""recurring_upgrade.py - schedules set by the previous release go on
ticking after an upgrade (lua/lib/85_recurring_v1.lua).

The previous release (commit 78a83b5) is built from git history into a
temporary directory (SKIPPED, exit 77, where the history is not there). Its
CLI sets, on one queue, an 'every' schedule (--missed all), one with an end
(--missed one), one paused and a cron one (its window of ticks planted 0.5,
2.5 and 4.5 s after the start with that release's own library functions,
so its ticks come within the test); a junk spec v1 and its tick are planted
too. Its scheduler runs over the first ticks and stops; ticks pass with no
scheduler (the upgrade); today's scheduler then runs. Checked:
  - before any of today's schedulers ran, 'schedules' lists them as they
    are (active, paused, next ticks), not 'bad';
  - every tick's item exactly once across the upgrade, due at its tick,
    with its schedule's payload: all the 'every' schedule's ticks; the
    ended one's by --missed one (one item for the ticks missed in the
    upgrade, then on schedule to its end); each planted cron tick, then the
    window refilled by today's scheduler (next: the 5-minute boundary after
    them); none of the paused one's, then its paused tick's after resume;
  - the old keys are gone (dq:{Q}:ticks, the pending items the previous
    release made ahead, the spec v1 records); the junk spec lists as 'bad';
  - 300 active and 150 paused ones planted with the old library: all
    migrated (100 a call) before their tick, each tick's item once;
  - today's 'every' and 'schedules remove' on an unmigrated schedule (no
    scheduler ran) leave no old tick nor its pending item behind.
Run without the migration, the schedules list as bad and stop ticking.
"""
# tier: slow (about 25 s, most of it building the previous release)
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

# The previous release (78a83b5): schedules as spec v1 with dq:{Q}:ticks.
OLD_COMMIT = "78a83b598cb732f9bdd376f73969ba3c5a0b4d0c"
ROOT = os.environ.get("DQ_TEST_ROOT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
Q = "upg"
P = f"dq:{{{Q}}}:"


def have_history():
    if shutil.which("git") is None:
        return "git is not installed"
    r = subprocess.run(["git", "-C", ROOT, "cat-file", "-e", OLD_COMMIT + "^{commit}"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
    return None if r.returncode == 0 else f"no git history with commit {OLD_COMMIT} in {ROOT}"


def build_old(tmp):
    """The previous release's CLI, built in tmp (-O0, its warnings not
    errors: a newer compiler must not fail it); its path, or None."""
    src = os.path.join(tmp, "old")
    os.mkdir(src)
    arch = subprocess.Popen(["git", "-C", ROOT, "archive", OLD_COMMIT], stdout=subprocess.PIPE)
    tar = subprocess.run(["tar", "-x", "-C", src], stdin=arch.stdout, timeout=120)
    arch.stdout.close()
    if arch.wait(timeout=60) != 0 or tar.returncode != 0:
        return None
    # Nothing of this build's make (make test-asan's flags, .ci/run's WERROR).
    drop = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "WERROR", "CFLAGS", "LDFLAGS", "SANITIZE", "BUILD", "DEBUG")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    r = subprocess.run(["make", "-C", src, "-j2", "DEBUG=1", "WARN=-w", "SANITIZE=", "BUILD=build", "build/delayq"],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    if not ok(r.returncode == 0, f"the previous release ({OLD_COMMIT[:7]}) builds", r.stdout[-2000:]):
        return None
    return os.path.join(src, "build", "delayq")


def old_dq(old, *args):
    r = subprocess.run([old, "--redis", URL] + [str(a) for a in args], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    return r.returncode, r.stdout.decode(errors="replace").strip(), r.stderr.decode(errors="replace")


def listing_of(queue, check=True):
    r = dq("schedules", queue, "--json")
    if check:
        ok(r.rc == 0, f"schedules {queue} --json exits 0", r)
    return {s["name"]: s for s in r.json_lines()}


def listing(check=True):
    return listing_of(Q, check)


def old_lib():
    """The previous release's shared script code (its lua/lib, in name order)."""
    ls = subprocess.run(["git", "-C", ROOT, "ls-tree", "--name-only", f"{OLD_COMMIT}:lua/lib"],
                        stdout=subprocess.PIPE, check=True, timeout=30).stdout.decode().split()
    return b"".join(subprocess.run(["git", "-C", ROOT, "show", f"{OLD_COMMIT}:lua/lib/{n}"], stdout=subprocess.PIPE,
                                   check=True, timeout=30).stdout for n in sorted(ls) if n.endswith(".lua"))


def ticks_of(msgs, name):
    """(tick, due_ms, payload) of the taken items of schedule name, by tick."""
    return sorted((int(m["id"].split("@", 1)[1]), m["due_ms"], m.get("payload"))
                  for m in msgs if m["id"].startswith(name + "@"))


why = have_history()
if why:
    finish(skip=why)

tmp = tempfile.mkdtemp(prefix="delayq-old.")
t0 = time.monotonic()
OLD = build_old(tmp)
if OLD is None:
    finish()
note(f"built the previous release in {time.monotonic() - t0:.1f} s")

# ------------------------------------------------------------------ the previous release
section(f"schedules set and run by the previous release ({OLD_COMMIT[:7]})")
S = server_ms() + 1500
E = S + 4000
rc, out, err = old_dq(OLD, "every", Q, "tick", "1s", "p-tick", "--missed", "all", "--start", S)
eq((rc, out), (0, str(S)), "old every tick --missed all")
rc, out, err = old_dq(OLD, "every", Q, "ending", "1s", "p-end", "--start", S, "--end", E)
eq((rc, out), (0, str(S)), "old every ending --end")
rc, out, err = old_dq(OLD, "every", Q, "paused", "1s", "p-paused", "--start", S)
eq(rc, 0, "old every paused")
eq(old_dq(OLD, "schedules", Q, "pause", "paused")[0], 0, "old schedules pause paused")
rc, out, err = old_dq(OLD, "cron", Q, "cr", "*/5 * * * *", "p-cron", "--tz", "Europe/Berlin")
eq(rc, 0, "old cron cr '*/5 * * * *' --tz Europe/Berlin")
# Its window planted as three near ticks, with the old library's functions
# (its pending item moved to the first, as its transfer would have).
C = [S + 500, S + 2500, S + 4500]
plant = old_lib() + b"""
local P, name = ARGV[1], ARGV[2]
local zs, counters = P .. 'zs', P .. 'n'
local s = recur.spec_read(P, name)
recur.uninsert(P, zs, counters, name, s.next)
s.win = {tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])}
s.wlast = s.win[3]
recur.arm(P, zs, counters, name, s, s.win[1])
return s.next
"""
eq(redis("EVAL", plant, 0, P, "cr", *C), C[0], "the cron window planted")
junk = "local s = {v = 1, kind = 'every', missed = 'sometimes'} " \
       "redis.call('HSET', KEYS[1], 'junk', cmsgpack.pack(s)) redis.call('ZADD', KEYS[2], ARGV[1], 'junk')"
redis("EVAL", junk, 2, P + "sched", P + "ticks", S + 2000)
consumer = bg_dq("take", Q, "--count", "0", "--json", "--timeout", f"{S + 6000 - server_ms()}ms",
                 "--no-scheduler")
old_sched = Bg([OLD, "--redis", URL, "schedule", Q], name="old delayq schedule")
# Stopped once it made the second ticks (its next ones then wait at S+2000).
ok(wait_for(lambda: [redis("ZSCORE", P + "ticks", n) for n in ("tick", "ending", "cr")] ==
            [str(S + 2000).encode(), str(S + 2000).encode(), str(C[1]).encode()], 5),
   "the old scheduler ran over the first ticks")
ok(server_ms() < S + 2000, "... and stops before the next", server_ms() - S)
eq(old_sched.stop(), 0, "the old scheduler stops on SIGTERM")
eq(sorted(redis("ZRANGE", P + "ticks", 0, -1)), [b"cr", b"ending", b"junk", b"tick"], "the old ticks set")
s = listing()
eq(sorted(s), ["cr", "ending", "junk", "paused", "tick"], "today's listing, before any of today's schedulers ran")
eq({n: (v.get("state"), v.get("next_ms")) for n, v in s.items()},
   {"tick": ("active", S + 2000), "ending": ("active", S + 2000), "paused": ("paused", S),
    "cr": ("active", C[1]), "junk": ("bad", -1)},
   "... lists each as it stands (the junk spec as bad)")
eq((s.get("ending", {}).get("end_ms"), s.get("cr", {}).get("zone"), s.get("tick", {}).get("missed")),
   (E, "Europe/Berlin", "all"), "... with its end, zone and missed policy")

# ------------------------------------------------------------------ today's release
section("ticks missed during the upgrade, then today's scheduler")
ok(wait_for(lambda: server_ms() >= S + 3200, 5), "ticks S+2000 and S+3000 pass with no scheduler")
sched = bg_dq("schedule", Q)
ok(wait_for(lambda: redis("EXISTS", P + "ticks") == 0, 5), "today's scheduler migrates them: dq:{Q}:ticks is gone")
ok(consumer.wait(10) == 0, "the consumer ends at its timeout")
msgs = [m for m in parse_json_lines(b"\n".join(line for _, line in consumer.snapshot()))]
got = ticks_of(msgs, "tick")
want = [(t, t, "p-tick") for t in range(S, S + 6000, 1000)]
eq(got[:len(want)], want, "every --missed all: each tick once, due at it, across the upgrade")
ok(len(got) <= len(want) + 1 and len({t for t, _, _ in got}) == len(got), "... none twice", got)
eq(ticks_of(msgs, "ending"), [(t, t, "p-end") for t in (S, S + 1000, S + 2000, S + 4000)],
   "--end, --missed one: the first tick missed in the upgrade once, then on time to its end")
eq(ticks_of(msgs, "cr"), [(t, t, "p-cron") for t in C], "cron: each planted tick once, the one missed late")
eq(ticks_of(msgs, "paused"), [], "paused: no item")
eq(ticks_of(msgs, "junk"), [], "the junk spec: no item")

section("after the migration")
nxt5 = (C[2] // 300000 + 1) * 300000
ok(wait_for(lambda: (listing(False).get("cr") or {}).get("next_ms") == nxt5, 5),
   "today's scheduler refilled the cron window: next is the 5-minute boundary after the planted ticks",
   listing().get("cr"))
s = listing()
eq({n: v.get("state") for n, v in s.items()},
   {"tick": "active", "ending": "ended", "paused": "paused", "cr": "active", "junk": "bad"}, "listed states")
ok(s.get("tick", {}).get("next_ms", 0) > server_ms() - 1000, "tick: the next tick is ahead", s.get("tick"))
eq((s.get("paused", {}).get("next_ms"), s.get("ending", {}).get("last_ms")), (S, S + 4000),
   "the paused tick and the ended schedule's last tick kept")
eq(redis("EXISTS", P + "ticks", P + "smig"), 0, "the old ticks set and the migration's cursor are gone")
eq(sorted(redis("HKEYS", P + "sstate")), [b"cr", b"ending", b"junk", b"paused", b"tick"], "each has today's state")
eq(stats(Q)["pending"], 0, "no pending item left of the previous release's ticks")
eq(dq("schedules", Q, "resume", "paused").rc, 0, "resume the paused one (today's CLI)")
r = dq("take", Q, "--count", "0", "--json", "--timeout", "800ms", "--no-scheduler")
got = ticks_of(r.json_lines(), "paused")
eq(got[:1], [(S, S, "p-paused")], "resumed: an item for its paused tick")
ok(all(t >= S + 6000 for t, _, _ in got[1:]), "... one for the ticks it missed (--missed one)", got)
msgs += r.json_lines()
eq(dq("schedules", Q, "remove", "junk").rc, 0, "the junk spec is removable")
ok(sched.stop() == 0 and b"Sanitizer" not in sched.err, "today's scheduler stops cleanly", sched.err[-300:])
r = dq("take", Q, "--count", "0", "--json", "--timeout", "300ms", "--no-scheduler")
seen = {(t, n) for n in ("tick", "ending", "cr") for t, _, _ in ticks_of(msgs, n)}
eq([m["id"] for m in r.json_lines() if (int(m["id"].split("@")[1]), m["id"].split("@")[0]) in seen], [],
   "no tick delivered twice")

# ------------------------------------------------------------------ many
section("300 active and 150 paused schedules of the previous release: migrated 100 a call, each tick once")
Q2, N, K = "upg2", 300, 150
P2 = f"dq:{{{Q2}}}:"
S2 = server_ms() + 3000
eq(old_dq(OLD, "every", Q2, "first", "1h", "f", "--start", S2 + 3600000)[0], 0, "old every (the queue's first)")
many = old_lib() + b"""
local P, n, k, start = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local zs, counters = P .. 'zs', P .. 'n'
for i = 1, n + k do
  local name = (i <= n and 'm' or 'q') .. i
  redis.call('HSET', recur.payload_key(P), name, name)
  local s = {v = 1, kind = 'every', every = 1000, start = start, stop = 0, missed = 'one', paused = 0, next = -1,
             last = -1, text = 'every 1s', zone = '', plen = #name}
  if i <= n then
    recur.arm(P, zs, counters, name, s, start)
  else
    s.paused, s.next = 1, start
    recur.spec_write(P, name, s)
  end
end
return redis.call('ZCARD', recur.ticks_key(P))
"""
eq(redis("EVAL", many, 0, P2, N, K, S2), N + 1, f"{N} active ones planted with the old library, {K} paused")
eq(stats(Q2)["pending"], N + 1, "each with its next tick's item pending, as that release kept them")
consumer = bg_dq("take", Q2, "--count", str(N), "--json", "--timeout", "8s", "--no-scheduler")
sched = bg_dq("schedule", Q2)
ok(wait_for(lambda: redis("EXISTS", P2 + "ticks", P2 + "smig") == 0 and redis("HLEN", P2 + "sstate") == N + K + 1, 5),
   "all migrated before their tick (the old keys gone)")
ok(server_ms() < S2, "... before their tick came", S2 - server_ms())
eq(consumer.wait(12), 0, f"the consumer got {N} items")
got = sorted(m["id"] for m in parse_json_lines(b"\n".join(line for _, line in consumer.snapshot())))
eq(got, sorted(f"m{i}@{S2}" for i in range(1, N + 1)), "one item per active schedule, for its tick")
s = listing_of(Q2)
eq(sum(1 for v in s.values() if v["state"] == "paused" and v["next_ms"] == S2), K, "the paused ones listed paused")
ok(sched.stop() == 0 and b"Sanitizer" not in sched.err, "today's scheduler stops cleanly", sched.err[-300:])
r = dq("take", Q2, "--count", "0", "--json", "--timeout", "300ms", "--no-scheduler")
eq([m["id"] for m in r.json_lines() if m["id"].endswith(f"@{S2}")], [], "no tick made twice")

# ------------------------------------------------------------------ changed by today's CLI
section("today's every and schedules remove on schedules of the previous release, no scheduler run")
Q3 = "upg3"
P3 = f"dq:{{{Q3}}}:"
for n in ("a", "b"):
    eq(old_dq(OLD, "every", Q3, n, "1h", f"p{n}")[0], 0, f"old every {n} 1h")
eq(stats(Q3)["pending"], 2, "their next ticks' items pending")
r = dq("every", Q3, "a", "2h", "pa2")
ok(r.rc == 0, "today's every replaces a", r)
eq((stats(Q3)["pending"], redis("ZSCORE", P3 + "ticks", "a")), (1, None),
   "a's old tick and its pending item are gone")
eq(listing_of(Q3).get("a", {}).get("spec"), "every 2h", "a listed as set again")
eq(dq("schedules", Q3, "remove", "b").rc, 0, "today's schedules remove b")
eq((stats(Q3)["pending"], redis("EXISTS", P3 + "ticks")), (0, 0), "b left no pending item, no old tick")
eq(sorted(listing_of(Q3)), ["a"], "only a is listed")
shutil.rmtree(tmp, ignore_errors=True)
finish()
