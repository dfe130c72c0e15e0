"""take_batches.py - takes in batches, the lost-reply replay, streamed batches.

- `delayq take --count N` takes up to 64 items a round trip, never more than
  N in all: what it does not print stays in the queue. With --ack manual the
  same holds for leased batches.
- The take script's replay: a repeated request (same token prefix, repeat
  flag '1') gets the first result back and pops nothing more; a new request
  skips the read and overwrites the caller's result key; a result key
  holding garbage or another type never makes the script replay junk.
  Straight through EVALSHA with the arguments the library sends.
- A client's result keys stay bounded: one per take it has out at once,
  whatever the number of takes.
- `offer --batch -` sends what has come when its input pauses, instead of
  waiting for a chunk of 16,384 lines or the end of the input.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

R = Redis(timeout=30)


def st(q):
    return stats(q) or {}


def offer_due(q, count, prefix="i"):
    lines = "".join(f"0\t{prefix}{i}\tp{i}\n" for i in range(count))
    r = dq("offer", q, "--batch", "-", stdin=lines.encode())
    eq(r.rc, 0, f"{count} items offered")
    ok(wait_for(lambda: st(q).get("ready") == count, 10 * SLOW), f"{count} items ready", st(q))


# ------------------------------------------------------------------ batches
section("take --count 150 from 200 ready: 150 printed, 50 left")
q = "tb1"
offer_due(q, 200)
r = dq("take", q, "--count", "150", "--json", "--no-scheduler", "--timeout", "5s")
got = [m["id"] for m in r.json_lines()] if r.rc == 0 else []
eq(r.rc, 0, "exit 0")
eq(len(got), 150, "150 printed")
eq(len(set(got)), 150, "no id twice")
eq(st(q).get("ready"), 50, "50 still ready: the last batch asked for what was left of --count")
r = dq("take", q, "--count", "0", "--json", "--no-scheduler", "--timeout", "1s")
rest = [m["id"] for m in r.json_lines()]
eq(sorted(got + rest), sorted(f"i{i}" for i in range(200)), "with the rest, every id exactly once")

section("take --ack manual --count 100 from 130: leased batches")
q = "tb2"
offer_due(q, 130)
r = dq("take", q, "--ack", "manual", "--lease", "1m", "--count", "100", "--json", "--no-scheduler",
       "--timeout", "5s")
lines = r.json_lines() if r.rc == 0 else []
eq(len(lines), 100, "100 printed, each with a token")
ok(all(m.get("token") and m.get("attempt") == 1 for m in lines), "tokens and attempt 1")
now = stats(q) or {}
ok(now.get("inflight") == 100 and now.get("ready") == 30, "100 in flight, 30 ready", now)
eq(sum(dq("ack", q, m["id"], m["token"]).rc == 0 for m in lines[:10]), 10, "ten of them acked")
eq(st(q).get("inflight"), 90, "90 in flight")

# ------------------------------------------------------------------ replay
TAKE = R.cmd("SCRIPT", "LOAD", eval_script("take"))


def take_call(q, n, prefix, repeat, rkey, lease="0"):
    P = f"dq:{{{q}}}:"
    keys = [P + s for s in ("zs", "r", "x", "n", "s", "cfg")]
    r = R.cmd("EVALSHA", TAKE, 6, *keys, P, P + "w", n, lease, prefix, "-1", "0", rkey, repeat)
    # The reply ends with the queue's epoch (an integer): the rest is the take's.
    assert isinstance(r[-1], int), r
    return r[:-1]


section("a repeated request replays its result and pops nothing more")
q = "tb3"
offer_due(q, 10)
rkey = f"dq:{{{q}}}:t:testclient.0"
first = take_call(q, 3, "reqA.", "0", rkey)
ok(isinstance(first, list) and len(first) == 4 and first[0] == 0, "first call: 3 entries, no lease", first)
again = take_call(q, 3, "reqA.", "1", rkey)
eq(again, first, "the repeat gets the same entries")
eq(st(q).get("ready"), 7, "7 still ready: the repeat popped nothing")
other = take_call(q, 2, "reqB.", "1", rkey)
ok(isinstance(other, list) and len(other) == 3 and other[1:] != first[1:3], "a repeat of a request never "
   "made (its first send lost before Redis) pops anew", other)
eq(st(q).get("ready"), 5, "5 ready")
new = take_call(q, 1, "reqC.", "0", rkey)
ok(isinstance(new, list) and len(new) == 2, "a new request pops without reading the key", new)
ok(R.cmd("GET", rkey).startswith(b"reqC.\n"), "and its result replaced the previous one")
ok(0 < R.cmd("PTTL", rkey) <= 60000, "the result key expires within 60 s")

section("a result key holding junk or another type is never replayed")
R.cmd("SET", rkey, b"reqD.\n\xff\x00not msgpack")
try:
    r = take_call(q, 1, "reqD.", "1", rkey)
except RedisError as exc:
    r = exc
ok(isinstance(r, RedisError) and "unreadable" in str(r) and rkey in str(r),
   "junk tagged as ours: an error naming the key", r)
eq(st(q).get("ready"), 4, "nothing popped by that call")
R.cmd("DEL", rkey)
R.cmd("HSET", rkey, "f", "v")
r = take_call(q, 1, "reqE.", "1", rkey)
ok(isinstance(r, list) and len(r) == 2, "a hash in the result key: no replay, one entry popped", r)
eq(R.cmd("TYPE", rkey), "string", "the result replaced the hash")

section("a leased take's repeat rebuilds its reply from the lease record")
q = "tb3L"
offer_due(q, 6)
rkey = f"dq:{{{q}}}:t:testclient.0"
first = take_call(q, 3, "reqL.", "0", rkey, lease="30000")
ok(isinstance(first, list) and len(first) == 4 and first[0] > 1, "first call: 3 entries, leased", first)
eq(R.cmd("GET", rkey), b"reqL.\nL" + str(first[0]).encode(), "the result key keeps only the record's score")
eq(take_call(q, 3, "reqL.", "1", rkey, lease="30000"), first, "the repeat gets the same reply")
eq(st(q).get("ready"), 3, "3 still ready: the repeat popped nothing")


def entry_id(e):
    f = e.split(b"|", 4)  # a version 1 entry: 1|due|ready|idlen|<id><payload>
    return f[4][:int(f[3])].decode()


eq(dq("ack", "--", q, entry_id(first[2]), f"reqL.2.{first[0]}").rc, 0, "entry 2 acked")
eq(take_call(q, 3, "reqL.", "1", rkey, lease="30000"), [first[0], first[1], b"", first[3]],
   "a repeat after: the acked entry's place is empty")
for i in (1, 3):
    dq("ack", "--", q, entry_id(first[i]), f"reqL.{i}.{first[0]}")
eq(take_call(q, 3, "reqL.", "1", rkey, lease="30000"), [], "once the record has gone: nothing")
R.cmd("SET", rkey, b"reqM.\nLnot-a-score")
try:
    r = take_call(q, 1, "reqM.", "1", rkey, lease="30000")
except RedisError as exc:
    r = exc
ok(isinstance(r, RedisError) and "unreadable" in str(r), "an 'L' result that is no score: unreadable", r)
eq(st(q).get("ready"), 3, "nothing popped by those repeats")

section("result keys stay bounded: one per take out at once")
q = "tb4"
offer_due(q, 40)
# Each `take --count 1` process is a client of its own: one key each, and
# the number of takes a client runs never adds keys.
for _ in range(5):
    dq("take", q, "--count", "1", "--no-scheduler", "--timeout", "2s")
keys = R.cmd("KEYS", f"dq:{{{q}}}:t:*")
eq(len(keys), 5, "five one-take processes: five result keys (one each)")
tags = {k.rsplit(b".", 1)[1] for k in keys}
eq(tags, {b"0"}, "each the client's key number 0")

# ------------------------------------------------------------------ streamed batch
section("offer --batch -: lines go out when the input pauses")
q = "tb5"
p = subprocess.Popen([BIN, "--redis", URL, "offer", q, "--batch", "-"], stdin=subprocess.PIPE,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    p.stdin.write(b"1h\ta1\tx\n1h\ta2\tx\n1h\ta3\tx\n")
    p.stdin.flush()
    ok(wait_for(lambda: st(q).get("pending") == 3, 5), "3 lines offered before the input ended", st(q))
    p.stdin.write(b"1h\ta4\tx\n")
    p.stdin.close()
    p.wait(timeout=10 * SLOW)
finally:
    if p.poll() is None:
        p.kill()  # by its pid
        p.wait()
eq(p.returncode, 0, "exit 0 at the end of the input")
eq(st(q).get("pending"), 4, "all 4 pending")

finish()
