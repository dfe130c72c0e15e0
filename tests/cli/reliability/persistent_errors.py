"""persistent_errors.py - Redis refusing for a while: OOM, NOREPLICAS, BUSY
and MISCONF.

OOM (maxmemory 1 under noeviction) for 12.5 s, with items falling due
during it, under a running `take --count 0`, `work` and `schedule` (each on
a queue of its own, so each one's own scheduler must recover), and a `take`
started during it: each process writes fewer than 100 stderr lines (all
four together too), one of them a count of the repeats after 10 s, and
uses under 1 s of CPU over 10 s (utime + stime from /proc/PID/stat); no
process exits, and each delivers (or, for schedule, makes ready) its items
within 2 s of memory being freed. Before the fix each scheduler retried at
once (some 70,000 lines and 2.4 s of CPU per process), and a take started
during OOM exited 3.

NOREPLICAS (min-replicas-to-write 1 without replicas) and BUSY (a 4 s
script past busy-reply-threshold), 3 s each, under a running `take`: at
most 5 stderr lines, little CPU, and the items delivered within 2 s of the
end (before: some 20,000 and 177 lines).

MISCONF (stop-writes-on-bgsave-error with a BGSAVE whose child is killed by
SIGKILL, which Redis records as a failed save): `stats`, `lookup`, `list`
and `dead count` work (their connection's PING is refused with MISCONF,
which used to make every command fail), an offer fails with the MISCONF
message and exit 3, and a `serve` started meanwhile says delayq_up 1 and
delayq_redis_writable 0, then 1 once a BGSAVE succeeds again.
"""
# tier: slow (about 21 s): make test runs it, make test-fast does not
import os
import re
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

TICK = os.sysconf("SC_CLK_TCK")
OOM_S = 12.5  # past the 10 s window (and a 1 s retry) after the first failure: one "repeated" line
N = 5  # items per queue, due during the OOM


def cpu_s(pid):
    """utime + stime of pid, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def stderr_lines(p):
    return len([x for x in p.err.split(b"\n") if x.strip()])


def ready_len(q):
    return int(redis("LLEN", f"dq:{{{q}}}:r"))


# ------------------------------------------------------------------ OOM
section("OOM for 12.5 s under take, work and schedule")
QT, QW, QS, QL = "pe-take", "pe-work", "pe-sched", "pe-late"
tmp = os.path.join(RDIR, "pe-work.out")
if os.path.exists(tmp):
    os.unlink(tmp)
take = bg_dq("take", QT, "--count", "0", "--json")
work = bg_dq("work", QW, "--exec", f"cat >> {tmp}; echo >> {tmp}")
sched = bg_dq("schedule", QS)
ok(wait_for(lambda: all(int(redis("PUBSUB", "SHARDNUMSUB", f"dq:{{{q}}}:w")[1]) >= 1 for q in (QT, QW, QS)), 5),
   "the three schedulers subscribed")
for q in (QT, QW, QS, QL):
    # Due in 2 s: inside the refusal even when the offering process is slow
    # to exit (a sanitizer's leak check at exit can take most of a second).
    batch = "".join(f"2s\t{q}-{i}\tpayload {i}\n" for i in range(N)).encode()
    eq(dq("offer", q, "--batch", "-", stdin=batch).rc, 0, f"{N} items offered to {q}, due in 2 s")
policy = redis("CONFIG", "GET", "maxmemory-policy")[1]
redis("CONFIG", "SET", "maxmemory-policy", "noeviction")
redis("CONFIG", "SET", "maxmemory", "1")
t_oom = time.time()
try:
    r = dq("offer", QT, "0", "refused")
    ok(r.rc == 3 and b"OOM" in r.err, "Redis refuses writes with OOM (an offer exits 3)", r)
    late = bg_dq("take", QL, "--count", "0", "--json")  # starts during the OOM
    procs = {"take": take, "work": work, "schedule": sched, "take started during OOM": late}
    time.sleep(0.5)  # the items fall due, and the late take is up
    cpu0 = {name: cpu_s(p.pid) for name, p in procs.items()}
    w0 = time.time()
    time.sleep(10.0)
    cpu = {name: cpu_s(p.pid) - cpu0[name] for name, p in procs.items()}
    window = time.time() - w0
    time.sleep(max(0.0, t_oom + OOM_S - time.time()))
    for name, p in procs.items():
        ok(p.running(), f"{name} still runs after {OOM_S:.0f} s of OOM")
        ok(cpu[name] < 1.0, f"{name} used {cpu[name]:.2f} s of CPU in {window:.1f} s of OOM (< 1 s)")
    eq(ready_len(QS), 0, "nothing moved during the OOM")
finally:
    redis("CONFIG", "SET", "maxmemory", "0")
    redis("CONFIG", "SET", "maxmemory-policy", policy)
t_free = time.time()


def work_done():
    try:
        with open(tmp, "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0


got = {
    "take": wait_for(lambda: take.count() >= N, 2),
    "work": wait_for(lambda: work_done() >= N, 2),
    "schedule": wait_for(lambda: ready_len(QS) >= N, 2),
    "take started during OOM": wait_for(lambda: late.count() >= N, 2),
}
note(f"all in {time.time() - t_free:.2f} s after memory was freed")
for name, done in got.items():
    ok(done, f"{name}: its {N} items delivered (made ready) within 2 s of memory being freed")
time.sleep(0.3)  # the clearing lines
total = 0
for name, p in procs.items():
    rc = p.stop()
    eq(rc, 0, f"{name} exits 0 on SIGTERM")
    n = stderr_lines(p)
    total += n
    ok(n < 100, f"{name} wrote {n} stderr lines (< 100)", p.err[-600:])
    ok(b"OOM command not allowed" in p.err, f"{name} said OOM", p.err[-600:])
ok(total < 100, f"{total} stderr lines in all (< 100)")
# The repeats are counted in one line 10 s after the first, or, when the OOM
# cleared before the next try past those 10 s (the first failure comes when
# an item falls due, up to a few seconds into the OOM), in the line saying it
# cleared.
m = re.search(rb"transfer failed: OOM .*\(repeated (\d+) times in the last (\d+) s\)", sched.err)
c = re.search(rb"OOM errors cleared after ([\d.]+) s \((\d+) failed tries\)", sched.err)
ok((m and int(m.group(1)) >= 5 and 10 <= int(m.group(2)) <= 12) or (not m and c and int(c.group(2)) >= 5),
   "schedule counted the repeats in one line (after 10 s, or when the OOM cleared)", sched.err[-600:])
ok(b"OOM errors cleared" in take.err and b"OOM errors cleared" in sched.err,
   "take and schedule said the OOM cleared", sched.err[-600:])
note("take's stderr: " + take.err.decode(errors="replace").strip().replace("\n", " | ")[:600])


# ------------------------------------------------------------------ NOREPLICAS, BUSY
def short_refusal(kind, q, begin, end):
    """3 s of Redis answering kind under a running take --count 0 (its own
    scheduler) with items falling due: a few stderr lines, and the items
    delivered within 2 s of the end."""
    section(f"{kind} for 3 s under take")
    p = bg_dq("take", q, "--count", "0", "--json")
    ok(wait_for(lambda: int(redis("PUBSUB", "SHARDNUMSUB", f"dq:{{{q}}}:w")[1]) >= 1, 5), "the take's scheduler subscribed")
    # Due in 2 s: inside the refusal even when the offering process is slow
    # to exit (a sanitizer's leak check at exit can take most of a second).
    batch = "".join(f"2s\t{q}-{i}\tpayload {i}\n" for i in range(N)).encode()
    eq(dq("offer", q, "--batch", "-", stdin=batch).rc, 0, f"{N} items offered to {q}, due in 2 s")
    helper = begin()
    try:
        time.sleep(0.2)
        c0 = cpu_s(p.pid)
        time.sleep(2.8)
        c = cpu_s(p.pid) - c0
        ok(c < 0.5, f"the take used {c:.2f} s of CPU in 2.8 s of {kind} (< 0.5 s)")
        eq(p.count(), 0, f"nothing delivered during the {kind}")
    finally:
        end(helper)
    t_end = time.time()
    ok(wait_for(lambda: p.count() >= N, 2), f"its {N} items delivered within 2 s of the end",
       f"{p.count()} after {time.time() - t_end:.2f} s")
    time.sleep(0.3)
    eq(p.stop(), 0, "the take exits 0 on SIGTERM")
    n = stderr_lines(p)
    ok(n <= 5 and kind.encode() in p.err, f"it wrote {n} stderr lines (<= 5), naming {kind}", p.err[-600:])


short_refusal("NOREPLICAS", "pe-norepl",
              lambda: redis("CONFIG", "SET", "min-replicas-to-write", "1"),
              lambda _: redis("CONFIG", "SET", "min-replicas-to-write", "0"))

# 4 s by the microsecond: counted in whole seconds it lasted 3 to 4 s, and one
# of 3.0 s ended before the check of what the take received (CI saw 5 items).
BUSY_LUA = ("local function us() local t = redis.call('TIME') return t[1] * 1000000 + t[2] end "
            "local s = us() while us() - s < 4000000 do end return 1")


def busy_script():
    try:
        redis("EVAL", BUSY_LUA, "0")
    except RedisError:
        pass  # killed by busy_end


def busy_begin():
    threshold = redis("CONFIG", "GET", "busy-reply-threshold")[1]
    redis("CONFIG", "SET", "busy-reply-threshold", "100")
    t = threading.Thread(target=busy_script, daemon=True)
    t.start()
    time.sleep(0.2)  # the script runs, past the threshold
    return t, threshold


def busy_end(helper):
    t, threshold = helper
    try:
        redis("SCRIPT", "KILL")
    except RedisError:
        pass  # it ended by itself
    t.join(10)
    redis("CONFIG", "SET", "busy-reply-threshold", threshold)


short_refusal("BUSY", "pe-busy", busy_begin, busy_end)


# ------------------------------------------------------------------ MISCONF
section("MISCONF: a failed BGSAVE with stop-writes-on-bgsave-error")
QM = "pe-misconf"
eq(dq("offer", QM, "1h", "later", "--id", "m1").rc, 0, "offer m1 (pending)")
eq(dq("offer", QM, "0", "now", "--id", "m2").rc, 0, "offer m2 (ready)")
for i in range(50):  # enough keys for a slow save
    redis("SET", f"pe:fill:{i}", "x")
saved = {k: redis("CONFIG", "GET", k)[1] for k in ("save", "stop-writes-on-bgsave-error")}


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def persistence(field):
    for line in redis("INFO", "persistence").decode().splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    return None


serve = None
try:
    redis("CONFIG", "SET", "save", "3600 1")
    redis("CONFIG", "SET", "stop-writes-on-bgsave-error", "yes")
    redis("CONFIG", "SET", "rdb-key-save-delay", "100000")  # 0.1 s a key
    redis("BGSAVE", "SCHEDULE")
    ok(wait_for(lambda: persistence("rdb_bgsave_in_progress") == "1", 10), "a BGSAVE runs")
    kids = children(redis_pid())
    for k in kids:
        os.kill(k, 9)
    ok(wait_for(lambda: persistence("rdb_last_bgsave_status") == "err", 5),
       f"its child (pid {kids}) killed by SIGKILL: the save failed")
    try:
        redis("PING")
        ok(False, "PING is refused with MISCONF")
    except RedisError as exc:
        ok(str(exc).startswith("MISCONF"), "PING is refused with MISCONF", str(exc)[:80])

    r = dq("stats", QM)
    ok(r.rc == 0 and b"pending 1\nready 1\n" in r.out, "stats works", r)
    r = dq("lookup", QM, "m1")
    ok(r.rc == 0 and b"state pending" in r.out, "lookup works", r)
    r = dq("list", QM, "--state", "ready")
    ok(r.rc == 0 and b"m2" in r.out, "list works", r)
    r = dq("dead", QM, "count")
    eq((r.rc, r.out), (0, b"0\n"), "dead count works")
    r = dq("offer", QM, "0", "refused")
    ok(r.rc == 3 and b"MISCONF" in r.err, "an offer exits 3 with the MISCONF error", r)

    port = closed_port()
    serve = bg_dq("serve", "--listen", f"127.0.0.1:{port}", QM)

    def scrape():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5 * SLOW) as resp:
                body = resp.read().decode()
        except OSError:
            return {}
        return dict(line.split(" ", 1) for line in body.splitlines() if line.startswith("delayq_") and " " in line)

    m = {}
    wait_for(lambda: m.update(scrape()) or "delayq_up" in m, 10)
    eq((m.get("delayq_up"), m.get("delayq_redis_writable")), ("1", "0"),
       "serve started during MISCONF: delayq_up 1, delayq_redis_writable 0")
finally:
    redis("CONFIG", "SET", "rdb-key-save-delay", "0")
    redis("BGSAVE", "SCHEDULE")
    wait_for(lambda: persistence("rdb_last_bgsave_status") == "ok", 10)
    for k, v in saved.items():
        redis("CONFIG", "SET", k, v)
    for i in range(50):
        redis("DEL", f"pe:fill:{i}")
ok(persistence("rdb_last_bgsave_status") == "ok", "a BGSAVE succeeded again")
if serve:
    m = scrape()
    eq((m.get("delayq_up"), m.get("delayq_redis_writable")), ("1", "1"), "serve: writable 1 again")
    eq(serve.stop(), 0, "serve exits 0 on SIGTERM")
r = dq("offer", QM, "0", "accepted")
eq(r.rc, 0, "offers work again")
finish()
