"""reliable.py - reliable delivery through the CLI: take --ack manual (text
and --json with attempt and token); ack (0, then 1); tokens going back in the
documented form (none starts with '-', and ack/nack/extend never take a '-'
argument for an option); a stale token refused once its lease has ended (with
no scheduler running, and after the item went to another consumer); extend
keeping an item from a second consumer past its first lease; nack --delay
(attempt 2 no earlier than the delay) and nack's default backoff; nack --error
in `dead list --json` after the last attempt; `work --exec` failing every
time with --max-attempts 3 (exactly 3 deliveries, then a dead letter); dead
count/list/redrive/purge; stats --json inflight and dead; a worker killed with
SIGKILL mid-command (its item comes back after the lease, attempt 2, to a
second worker); a worker stopping cleanly on SIGTERM after its running
command finishes."""
# tier: slow (about 13 s): make test runs it, make test-fast does not
import os
import signal
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403
from workers import *  # noqa: E402,F403

TMP = tmpdir()


def offer(queue, delay, payload, id_):
    r = dq("offer", queue, delay, payload, "--id", id_)
    return ok(r.rc == 0 and r.out == f"{id_}\n".encode(), f"offer {queue} {id_}", r)


def lop(cmd, queue, id_, token, *rest, opts=()):
    """ack/nack/extend OPTS... -- QUEUE ID TOKEN REST...: the form that is
    safe whatever the token looks like (the section on tokens starting with
    '-' checks the plain form, and a few checks use it directly)."""
    return dq(cmd, *opts, "--", queue, id_, token, *rest)


def expect_stats(queue, what, **want):
    s = stats(queue)
    if s is None:
        return None
    got = {k: s.get(k) for k in want}
    eq(got, want, f"stats {queue}: {what}")
    return s


def one_msg(r, msgs, what):
    ok(r.rc == 0 and len(msgs) == 1, f"{what}: one message, exit 0", r)
    return msgs[0] if msgs else {}


# ------------------------------------------------------------------ take --ack manual, ack

section("take --ack manual --json carries attempt and token; ack exits 0, then 1")
Q = "rel-ack"
offer(Q, "0", "hello", "a1")
r, msgs = take_manual(Q, "--timeout", "5s")
m = one_msg(r, msgs, "take --ack manual --json")
eq({k: m.get(k) for k in ("queue", "id", "payload", "attempt")},
   {"queue": Q, "id": "a1", "payload": "hello", "attempt": 1}, "queue, id, payload, attempt 1")
tok = m.get("token")
ok(isinstance(tok, str) and 1 <= len(tok) <= 64 and " " not in tok, f"a token ({tok!r})")
ok(isinstance(m.get("due_ms"), int) and isinstance(m.get("ready_ms"), int)
   and m.get("ready_ms", 0) >= m.get("due_ms", 1), "due_ms <= ready_ms, both integers")
expect_stats(Q, "in flight after the take", pending=0, ready=0, inflight=1, dead=0)
r = dq("ack", Q, "a1", "not-the-token")
eq(r.rc, 1, "ack with another token: exit 1")
r = lop("ack", Q, "a1", tok)
eq((r.rc, r.out), (0, b""), "ack: exit 0, nothing on stdout")
r = lop("ack", Q, "a1", tok)
eq(r.rc, 1, "second ack: exit 1")
ok(r.errtext.startswith("delayq: ") and r.errtext.count("\n") == 1, "... one 'delayq: ' line on stderr", r)
eq(lop("ack", Q, "never-offered", tok).rc, 1, "ack of an unknown id: exit 1")
eq(dq("ack", Q, "a1", "bad token").rc, 2, "ack with a token holding a space: usage error (2)")
eq(dq("ack", Q, "a1").rc, 2, "ack without a token: usage error (2)")
expect_stats(Q, "nothing in flight after the ack", pending=0, ready=0, inflight=0, dead=0)

section("take --ack manual without --json: ID<TAB>TOKEN<TAB>PAYLOAD")
offer(Q, "0", "text payload", "a2")
r = dq("take", Q, "--ack", "manual", "--timeout", "5s")
parts = r.out.rstrip(b"\n").split(b"\t")
ok(r.rc == 0 and r.out.endswith(b"\n") and len(parts) == 3 and parts[0] == b"a2"
   and parts[2] == b"text payload" and parts[1], "one line a2<TAB>TOKEN<TAB>text payload", r)
if len(parts) == 3:
    eq(lop("ack", Q, "a2", parts[1].decode()).rc, 0, "ack with the printed token: exit 0")
r = dq("take", Q, "--timeout", "5s", "--lease", "1s")
eq(r.rc, 2, "--lease without --ack manual: usage error (2)")
eq(dq("take", Q, "--ack", "auto-ish", "--timeout", "1s").rc, 2, "--ack with another value: usage error (2)")

section("ack/nack/extend QUEUE ID TOKEN: a token that starts with '-' is an argument")
# Whatever take prints must go back in the documented form, without '--':
# the parser takes an unknown "-x" in these commands for an argument, and
# the library's tokens do not start with '-' anyway (one in 64 would, at
# random). 1,000 deliveries (1,000 token prefixes) check the latter.
Q = "rel-dash"
batch = "".join(f"0\tdash{i:04d}\tpayload {i}\n" for i in range(1000)).encode()
r = dq("offer", Q, "--batch", "-", stdin=batch)
eq((r.rc, r.out), (0, b"1000\n"), "offer --batch of 1000")
r, msgs = take_manual(Q, "--count", "1000", "--lease", "2m", "--timeout", "20s", timeout=60)
eq((r.rc, len(msgs)), (0, 1000), "take --ack manual --count 1000: all delivered")
toks = [str(m.get("token", "")) for m in msgs]
badtok = [t for t in toks if not (1 <= len(t) <= 64 and all(c.isalnum() or c in "-_." for c in t))]
eq(badtok[:3], [], "every token is 1 to 64 of [A-Za-z0-9_.-]")
eq([t for t in toks if t.startswith("-")][:3], [], "no token starts with '-'")
eq(len(set(toks)), 1000, "1000 distinct tokens")
for cmd, tok_, rest in (("ack", "-notmine", ()), ("nack", "-notmine", ("--delay", "0")),
                        ("extend", "--notmine", ("1s",)), ("ack", "-", ())):
    r = dq(cmd, Q, "dash0000", tok_, *rest)
    eq(r.rc, 1, " ".join((cmd, Q, "dash0000", tok_) + rest) + ": a stale token (exit 1), not a usage error")
m0 = msgs[0] if msgs else {}
eq((m0.get("id"), dq("ack", Q, m0.get("id", "x"), m0.get("token", "x")).rc), ("dash0000", 0),
   "dash0000 is untouched: its own token acks it (plain form)")

section("plain take leaves nothing in flight")
Q = "rel-plain"
offer(Q, "0", "plain", "a3")
r = dq("take", Q, "--json", "--timeout", "5s")
pm = r.json_lines()
ok(r.rc == 0 and len(pm) == 1 and pm[0].get("id") == "a3", "plain take --json gets a3", r)
expect_stats(Q, "plain take", pending=0, ready=0, inflight=0, dead=0)

section("5,000 leases taken in batches and never acked: all come back once, on attempt 2")
# Each take's leases share one lease record (79 here); when they run out
# together, the scheduler moves them back a few records per transfer call.
Q = "rel-expire"
batch = "".join(f"0\texp{i:04d}\tpayload {i}\n" for i in range(5000)).encode()
eq(dq("offer", Q, "--batch", "-", stdin=batch).rc, 0, "offer --batch of 5000")
r, msgs = take_manual(Q, "--count", "5000", "--lease", "1s", "--batch", "64", "--timeout", "20s", timeout=60)
eq((r.rc, len(msgs)), (0, 5000), "take --ack manual --count 5000 --lease 1s: all delivered")
expect_stats(Q, "5000 leased", pending=0, ready=0, inflight=5000)
time.sleep(1.2)
r, again = take_manual(Q, "--count", "5000", "--lease", "2m", "--batch", "64", "--timeout", "20s", timeout=60)
eq((r.rc, len(again), len({m.get("id") for m in again})), (0, 5000, 5000),
   "after the lease: 5000 distinct items delivered again")
eq(sorted({m.get("attempt") for m in again}), [2], "each on attempt 2")
expect_stats(Q, "5000 leased again", pending=0, ready=0, inflight=5000)

# ------------------------------------------------------------------ stale token

section("a token whose lease has ended is refused, even before the item comes back")
Q = "rel-stale"
offer(Q, "0", "late ack", "s0")
r = dq("take", Q, "--ack", "manual", "--json", "--lease", "300ms", "--no-scheduler", "--timeout", "5s")
ms0 = r.json_lines()
ok(r.rc == 0 and len(ms0) == 1, "take --ack manual --lease 300ms --no-scheduler", r)
end0 = lease_end(Q, "s0")
ok(end0 is not None and wait_for(lambda: server_ms() > end0 + 20, 3), "the lease's end passed (no scheduler runs)")
eq(lop("ack", Q, "s0", ms0[0].get("token", "x") if ms0 else "x").rc, 1, "ack after the lease's end: exit 1")
expect_stats(Q, "still counted in flight until a scheduler returns it", pending=0, ready=0, inflight=1)
r, msgs = take_manual(Q, "--timeout", "5s")
m = one_msg(r, msgs, "a take (its scheduler returns the item)")
eq((m.get("id"), m.get("attempt")), ("s0", 2), "s0 again, attempt 2")
eq(lop("ack", Q, "s0", m.get("token", "x")).rc, 0, "ack with the new token: exit 0")

section("a token whose lease ran out is refused once the item went elsewhere")
offer(Q, "0", "stale me", "s1")
r, msgs = take_manual(Q, "--lease", "300ms", "--timeout", "5s")
m1 = one_msg(r, msgs, "first take, lease 300ms")
end1 = lease_end(Q, "s1")
s_now = server_ms()
ok(end1 is not None and s_now - 100 <= end1 <= s_now + 300, f"lease end about 300 ms away ({end1} vs now {s_now})")
t0 = time.monotonic()
r, msgs = take_manual(Q, "--lease", "30s", "--timeout", "10s")
m2 = one_msg(r, msgs, "second consumer (its scheduler returns the lease)")
got_at = server_ms()
note(f"redelivered after {time.monotonic() - t0:.2f} s")
eq((m2.get("id"), m2.get("attempt")), ("s1", 2), "s1 again, attempt 2")
ok(m2.get("token") and m2.get("token") != m1.get("token"), "a new token")
ok(end1 is not None and m2.get("ready_ms", 0) >= end1 and got_at >= end1,
   f"not before the first lease's end (ready_ms {m2.get('ready_ms')} >= {end1})")
eq(m2.get("payload"), "stale me", "same payload")
eq(lop("ack", Q, "s1", m1.get("token", "x")).rc, 1, "ack with the stale token: exit 1")
eq(lop("nack", Q, "s1", m1.get("token", "x"), opts=("--delay", "0")).rc, 1, "nack with the stale token: exit 1")
eq(lop("extend", Q, "s1", m1.get("token", "x"), "1m").rc, 1, "extend with the stale token: exit 1")
expect_stats(Q, "still in flight with the second consumer", pending=0, ready=0, inflight=1, dead=0)
eq(lop("ack", Q, "s1", m2.get("token", "x")).rc, 0, "ack with the current token: exit 0")
expect_stats(Q, "acked", pending=0, ready=0, inflight=0, dead=0)

# ------------------------------------------------------------------ extend

section("extend keeps an item from a second consumer past its first lease")
Q = "rel-extend"
offer(Q, "0", "long job", "x1")
r, msgs = take_manual(Q, "--lease", "500ms", "--timeout", "5s")
m = one_msg(r, msgs, "take, lease 500ms")
tok = m.get("token", "x")
first_end = lease_end(Q, "x1")
eq(lop("extend", Q, "x1", tok, "2s").rc, 0, "extend 2s: exit 0")
other = bg_dq("take", Q, "--ack", "manual", "--json", "--timeout", "3s")
ext_rc = []
t0 = time.monotonic()
for i in range(2):
    time.sleep(0.9)
    ext_rc.append(lop("extend", Q, "x1", tok, "2s").rc)
eq(ext_rc, [0, 0], "two more extends of 2s, about a second apart: exit 0")
e = expect_stats(Q, "in flight while extended", pending=0, ready=0, inflight=1)
orc = other.wait(10)
note(f"second consumer ended after {time.monotonic() - t0:.2f} s")
eq((orc, other.count()), (1, 0), "second consumer (--timeout 3s): nothing, exit 1")
now = server_ms()
ok(first_end is not None and now > first_end + 2000, f"that was well past the first lease's end ({now - (first_end or 0)} ms)")
last_end = lease_end(Q, "x1")
ok(last_end is not None and last_end > now, "the lease still runs")
r, msgs = take_manual(Q, "--lease", "30s", "--timeout", "10s")
m2 = one_msg(r, msgs, "without more extends, it comes back")
eq(m2.get("attempt"), 2, "attempt 2")
ok(last_end is not None and m2.get("ready_ms", 0) >= last_end, "not before the extended lease's end")
eq(lop("extend", Q, "x1", tok, "2s").rc, 1, "extend with the old token now: exit 1")
eq(lop("extend", Q, "x1", m2.get("token", "x"), "0").rc, 2, "extend 0: usage error (2)")
eq(lop("ack", Q, "x1", m2.get("token", "x")).rc, 0, "ack")

# ------------------------------------------------------------------ nack

section("nack --delay: pending again, then attempt 2 no earlier than the delay")
Q = "rel-nack"
offer(Q, "0", "nack me", "n1")
r, msgs = take_manual(Q, "--timeout", "5s")
m = one_msg(r, msgs, "take")
s0 = server_ms()
r = lop("nack", Q, "n1", m.get("token", "x"), opts=("--delay", "400ms", "--error", "first failure"))
eq((r.rc, r.out), (0, b""), "nack --delay 400ms: exit 0")
s1 = server_ms()
due = zscore_due(Q, "n1")
ok(due is not None and s0 + 400 <= due <= s1 + 400, f"due again 400 ms after the nack ({due} in [{s0 + 400}, {s1 + 400}])")
expect_stats(Q, "pending after the nack", pending=1, ready=0, inflight=0, dead=0)
eq(lop("nack", Q, "n1", m.get("token", "x")).rc, 1, "a second nack with the same token: exit 1")
r, msgs = take_manual(Q, "--timeout", "10s")
m2 = one_msg(r, msgs, "take again")
eq((m2.get("id"), m2.get("attempt"), m2.get("payload")), ("n1", 2, "nack me"), "n1, attempt 2, same payload")
ok(m2.get("ready_ms", 0) >= (due or 0) and m2.get("due_ms") == m.get("due_ms"),
   "ready no earlier than the retry time; due_ms is the original due time")

section("nack without --delay: the backoff (1 s doubling, jitter [1/2, 1])")
s0 = server_ms()
eq(lop("nack", Q, "n1", m2.get("token", "x")).rc, 0, "nack of attempt 2 without --delay: exit 0")
s1 = server_ms()
due = zscore_due(Q, "n1")
ok(due is not None and s0 + 1000 <= due <= s1 + 2000,
   f"due in 1..2 s for attempt 2 ({None if due is None else due - s0} ms after the nack)")
eq(dq("cancel", Q, "n1").rc, 0, "a retry waiting for its time can be cancelled")
expect_stats(Q, "empty", pending=0, ready=0, inflight=0, dead=0)

section("nack --error is kept: dead list after the last attempt (16 by default)")
Q = "rel-nackdead"
offer(Q, "0", "ünïcode payload", "d1")
attempts = []
last_stderr = ""
for i in range(1, 17):
    r, msgs = take_manual(Q, "--timeout", "5s")
    if not msgs:
        ok(False, f"take for attempt {i}", r)
        break
    attempts.append(msgs[0].get("attempt"))
    rn = lop("nack", Q, "d1", msgs[0].get("token", "x"), opts=("--delay", "0", "--error", f"failure number {i}"))
    if rn.rc != 0:
        ok(False, f"nack {i}: exit 0", rn)
        break
    last_stderr = rn.errtext
eq(attempts, list(range(1, 17)), "attempts 1..16")
ok("dead" in last_stderr.lower(), f"the last nack says so on stderr ({last_stderr.strip()!r})")
eq(dead_count(Q), 1, "dead count: 1")
expect_stats(Q, "one dead letter", pending=0, ready=0, inflight=0, dead=1)
r = dq("dead", Q, "list", "--json")
dl = r.json_lines()
ok(r.rc == 0 and len(dl) == 1, "dead list --json: one object", r)
d = dl[0] if dl else {}
eq((d.get("id"), d.get("attempts"), d.get("error"), d.get("payload")),
   ("d1", 16, "failure number 16", "ünïcode payload"), "id, attempts 16, the last error, the payload")
ok("attempt 16 of 16" in str(d.get("reason")), f"reason names attempt 16 of 16 ({d.get('reason')!r})")
ok(isinstance(d.get("died_ms"), int) and isinstance(d.get("due_ms"), int), "died_ms and due_ms are integers")
r, msgs = take_manual(Q, "--timeout", "300ms")
eq((r.rc, msgs), (1, []), "a dead letter is not delivered")

# ------------------------------------------------------------------ work, dead letters

section("work --exec failing every time, --max-attempts 3: exactly 3 deliveries, then dead")
Q = "rel-work"
LOG = os.path.join(TMP, "fail.log")
PAYDIR = os.path.join(TMP, "fail.payloads")
os.makedirs(PAYDIR, exist_ok=True)
# One file per delivery: with --concurrency 2, appends from two commands to one
# file would interleave ("job onejob two"), which says nothing about delayq.
fail_cmd = (f'echo "$DELAYQ_ID $DELAYQ_ATTEMPT $DELAYQ_QUEUE" >> {q(LOG)}; '
            f'cat > {q(PAYDIR)}/"$DELAYQ_ID.$DELAYQ_ATTEMPT"; exit 7')
offer(Q, "0", "job one", "w1")
offer(Q, "200ms", "job two", "w2")
w = work(Q, fail_cmd, "--max-attempts", "3", "--concurrency", "2", "--lease", "30s")
t0 = time.monotonic()
ok(wait_for(lambda: dead_count(Q) == 2, 15), "both items dead within 15 s (backoff 0.5-1 s, then 1-2 s)")
note(f"dead after {time.monotonic() - t0:.2f} s")
time.sleep(0.5)  # anything more would show up in the log now
recs, bad = read_log(LOG)
eq(bad, 0, "no malformed log line")
for id_ in ("w1", "w2"):
    eq(sorted(a for i, a, _ in recs if i == id_), [1, 2, 3], f"{id_}: delivered exactly 3 times, attempts 1, 2, 3")
ok(all(rest == [Q] for _, _, rest in recs), "DELAYQ_QUEUE set for every command")
pays = []
for name in sorted(os.listdir(PAYDIR)):
    with open(os.path.join(PAYDIR, name), "rb") as f:
        pays.append(f.read())
pays.sort()
eq(pays, [b"job one"] * 3 + [b"job two"] * 3, "the payload on every command's stdin")
eq(w.running(), True, "the worker keeps running")
eq(w.stop(signal.SIGTERM), 0, "SIGTERM: exit 0")
ok(w.err.count(b"last attempt") == 2 or w.err.count(b"dead") >= 2,
   "stderr names the two last attempts", w.err.decode(errors="replace")[-600:])
s = expect_stats(Q, "stats --json after the worker: two dead", pending=0, ready=0, inflight=0, dead=2)
ok(s is not None and "inflight" in s and "dead" in s, "stats --json has inflight and dead")
r = dq("dead", Q, "list", "--json")
dl = r.json_lines()
eq(sorted(x.get("id") for x in dl), ["w1", "w2"], "dead list --json: w1 and w2")
for x in dl:
    ok(x.get("attempts") == 3 and "attempt 3 of 3" in str(x.get("reason")) and "7" in str(x.get("error")),
       f"{x.get('id')}: attempts 3, reason {x.get('reason')!r}, error {x.get('error')!r}")
r = dq("dead", Q, "list")
lines = r.out.split(b"\n")[:-1]
ok(r.rc == 0 and len(lines) == 2 and all(len(l.split(b"\t")) == 5 for l in lines),
   "dead list: two lines of 5 tab-separated fields", r)
ok(all(l.split(b"\t")[1] == b"3" for l in lines if len(l.split(b"\t")) == 5), "... attempts field 3")
r = dq("dead", Q, "count")
eq((r.rc, r.out), (0, b"2\n"), "dead count: 2")

section("dead redrive ID, then redrive all: delivered again with attempt 1")
r = dq("dead", Q, "redrive", "nope")
eq(r.rc, 1, "redrive of an unknown id: exit 1")
r = dq("dead", Q, "redrive", "w1")
eq((r.rc, r.out), (0, b"1\n"), "redrive w1: prints 1")
eq(dq("dead", Q, "count").out, b"1\n", "dead count: 1")
expect_stats(Q, "w1 ready again", pending=0, ready=1, inflight=0, dead=1)
LOG2 = os.path.join(TMP, "ok.log")
ok_cmd = f'echo "$DELAYQ_ID $DELAYQ_ATTEMPT $(cat)" >> {q(LOG2)}'
w = work(Q, ok_cmd, "--lease", "30s")
ok(wait_for(lambda: log_count(LOG2) >= 1, 10), "the worker gets w1")
r = dq("dead", Q, "redrive")
eq((r.rc, r.out), (0, b"1\n"), "redrive (all): prints 1")
ok(wait_for(lambda: log_count(LOG2) >= 2, 10), "the worker gets w2")
ok(wait_for(lambda: drained(Q), 10), "both acked: nothing pending, ready or in flight")
time.sleep(0.3)
recs, bad = read_log(LOG2)
eq(sorted((i, a, rest) for i, a, rest in recs), [("w1", 1, ["job", "one"]), ("w2", 1, ["job", "two"])],
   "w1 and w2 delivered once each, attempt 1, payload intact")
eq(w.stop(signal.SIGTERM), 0, "worker: SIGTERM exits 0")
expect_stats(Q, "all done", pending=0, ready=0, inflight=0, dead=0)
r = dq("dead", Q, "redrive")
eq((r.rc, r.out), (0, b"0\n"), "redrive with no dead letters: prints 0")

section("dead purge")
Q = "rel-purge"
for i in range(3):
    offer(Q, "0", f"p{i}", f"p{i}")
w = work(Q, "exit 1", "--max-attempts", "1", "--concurrency", "3")
ok(wait_for(lambda: dead_count(Q) == 3, 10), "three dead letters (max attempts 1)")
eq(w.stop(signal.SIGTERM), 0, "worker: SIGTERM exits 0")
r = dq("dead", Q, "purge")
eq((r.rc, r.out), (0, b"3\n"), "purge: prints 3")
eq(dq("dead", Q, "count").out, b"0\n", "dead count: 0")
r = dq("dead", Q, "list", "--json")
eq((r.rc, r.out), (0, b""), "dead list --json: empty")
eq(dq("dead", Q, "purge").out, b"0\n", "purge again: prints 0")
eq(dq("dead", Q, "bogus").rc, 2, "dead QUEUE bogus: usage error (2)")
expect_stats(Q, "empty", pending=0, ready=0, inflight=0, dead=0)

# ------------------------------------------------------------------ a worker killed mid-command

section("work killed with SIGKILL mid-command: the item comes back after the lease, attempt 2")
Q = "rel-kill"
LOG3 = os.path.join(TMP, "kill.log")
slow_cmd = f'echo "$DELAYQ_ID $DELAYQ_ATTEMPT $$" >> {q(LOG3)}; exec sleep 20'
offer(Q, "0", "survive me", "k1")
wa = work(Q, slow_cmd, "--lease", "1s")
ok(wait_for(lambda: log_count(LOG3) >= 1, 10), "worker A started the command")
recs, _ = read_log(LOG3)
cmd_pid = int(recs[0][2][0]) if recs and recs[0][2] and recs[0][2][0].isdigit() else None
if cmd_pid:
    watch_pid(cmd_pid)
end_a = lease_end(Q, "k1")
eq(recs[:1] and recs[0][:2], ("k1", 1), "A: k1, attempt 1")
expect_stats(Q, "k1 in flight with A", pending=0, ready=0, inflight=1)
os.kill(wa.pid, signal.SIGKILL)
killed_at = server_ms()
LOG4 = os.path.join(TMP, "kill2.log")
wb = work(Q, f'echo "$DELAYQ_ID $DELAYQ_ATTEMPT" >> {q(LOG4)}; cat > /dev/null', "--lease", "1s")
# A's command runs in a process group of its own and survives A (holding
# A's stdout and stderr open): stop it by its pid.
ok(cmd_pid is not None and kill_pid(cmd_pid), f"A's orphaned command (pid {cmd_pid}) stopped by pid")
eq(wa.stop(signal.SIGKILL, timeout=5), -signal.SIGKILL, "A was killed with SIGKILL")
ok(wait_for(lambda: log_count(LOG4) >= 1, 10), "worker B gets k1")
got_at = server_ms()
if end_a is not None:
    note(f"A killed {end_a - killed_at} ms before its lease end; B got k1 {got_at - end_a} ms after it")
    ok(got_at - end_a <= 3000 * SLOW, "B got it promptly after the lease end (within 3 s)")
recs4, _ = read_log(LOG4)
eq([r_[:2] for r_ in recs4], [("k1", 2)], "B: k1, attempt 2")
ok(end_a is not None and got_at >= end_a, "not before A's lease ended")
ok(wait_for(lambda: drained(Q), 5), "B acked it: nothing pending, ready or in flight")
eq(wb.stop(signal.SIGTERM), 0, "B: SIGTERM exits 0")
eq(dead_count(Q), 0, "no dead letter")

# ------------------------------------------------------------------ SIGTERM

section("work stops cleanly on SIGTERM after its running command finishes")
Q = "rel-term"
LOG5 = os.path.join(TMP, "term.log")
term_cmd = f'echo "$DELAYQ_ID $DELAYQ_ATTEMPT start" >> {q(LOG5)}; sleep 1; echo "$DELAYQ_ID $DELAYQ_ATTEMPT end" >> {q(LOG5)}'
wt = work(Q, term_cmd, "--concurrency", "2", "--lease", "30s")
offer(Q, "0", "t", "t1")
ok(wait_for(lambda: log_count(LOG5) >= 1, 10), "the command started")
t0 = time.monotonic()
os.kill(wt.pid, signal.SIGTERM)
time.sleep(0.3)
ok(wt.running(), "still running 0.3 s after SIGTERM (its command sleeps 1 s)")
offer(Q, "0", "late", "t2")  # after SIGTERM: not taken any more
rc = wt.wait(10)
took = time.monotonic() - t0
eq(rc, 0, "exit 0")
note(f"exited {took:.2f} s after SIGTERM")
ok(0.5 <= took <= 5 * SLOW, "... once the command was done (about 1 s)")
recs, _ = read_log(LOG5)
eq([(i, a, rest) for i, a, rest in recs], [("t1", 1, ["start"]), ("t1", 1, ["end"])],
   "the running command finished; nothing else started")
expect_stats(Q, "t1 acked, t2 left ready", pending=0, ready=1, inflight=0, dead=0)

finish()
