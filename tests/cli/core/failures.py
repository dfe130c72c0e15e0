"""failures.py - Redis errors exit 3 with one line on stderr: a queue key of
the wrong type (for the calls that only read or remove; the others rename it
away and go on), and an unreachable server."""
import os
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403


def redis_error(args, what, words, **kw):
    r = dq(*args, **kw)
    ok(r.rc == 3, f"{what}: exit 3", r)
    ok(one_line(r.err), f"{what}: one line on stderr", r.err)
    low = r.err.lower()
    ok(any(w in low for w in words), f"{what}: stderr names the cause ({' or '.join(w.decode() for w in words)})",
       r.err)
    return r


WRONG = [b"wrongtype", b"wrong"]

section("a wrong-type key")
# Calls that only read or remove report it; calls that add items rename the
# foreign key out of the way (its data kept, a note in the set-aside list)
# and go on, so the queue is never blocked for good.
redis("SET", "dq:{wq}:zs", "foo")
r = redis_error(["stats", "wq"], "stats of a queue whose zset is a string", WRONG)
note(f"stderr: {r.errtext.strip()}")
redis_error(["cancel", "wq", "i1"], "cancel", WRONG)
eq(redis("GET", "dq:{wq}:zs"), b"foo", "the foreign key is untouched by them")
r = dq("offer", "wq", "5s", "x", "--id", "i1")
eq((r.rc, r.out), (0, b"i1\n"), "offer with a delay works")
bad = redis("KEYS", "dq:{wq}:bad:zs:*")
ok(len(bad) == 1 and redis("GET", bad[0]) == b"foo", "the foreign key was renamed, its data kept", bad)
x = redis("LRANGE", "dq:{wq}:x", 0, -1)
ok(len(x) == 1 and b"wrong type: dq:{wq}:zs held a string" in x[0], "a note in the set-aside list", x)
redis("RPUSH", "dq:{wl}:zs", "a")
eq(dq("offer", "wl", "1s", "x").rc, 0, "offer when the zset key is a list works")
redis("SET", "dq:{wr}:r", "foo")
r = dq("offer", "wr", "0", "x", "--id", "r1")
eq((r.rc, r.out), (0, b"r1\n"), "offer (due now) when the ready key is a string works")
r = dq("offer", "wr", "--batch", "-", stdin=b"0\tb1\tp\n1s\tb2\tq\n")
eq((r.rc, r.out), (0, b"2\n"), "offer --batch works")

section("other queues keep working")
r = dq("offer", "fine", "0", "works", "--id", "ok1")
eq((r.rc, r.out), (0, b"ok1\n"), "offer to another queue exits 0")
r = dq("take", "fine", "--timeout", "5s")
eq((r.rc, r.out), (0, b"works\n"), "take from it works")
r = dq("take", "wr", "--timeout", "5s", "--count", "2")
eq((r.rc, sorted(r.out.split())), (0, [b"p", b"x"]), "wr's items are delivered")

section("Redis down (a closed port)")
port = closed_port()
bad = f"redis://127.0.0.1:{port}"
DOWN = [b"refused", b"connect", b"unreachable"]
for args in (["offer", "q", "0", "x"], ["cancel", "q", "x"], ["stats", "q"], ["take", "q", "--timeout", "1s"],
             ["schedule", "q", "--connect-wait", "0"]):
    t0 = time.monotonic()
    r = dq("--redis", bad, *args, redis=False, timeout=20)
    secs = time.monotonic() - t0
    what = f"{args[0]} to {bad}"
    ok(r.rc == 3, f"{what}: exit 3", r)
    ok(one_line(r.err), f"{what}: one line on stderr", r.err)
    ok(any(w in r.err.lower() for w in DOWN), f"{what}: stderr names the cause", r.err)
    ok(secs < 5 * SLOW, f"{what}: within 5 s ({secs:.2f} s)")
note(f"stderr: {r.errtext.strip()}")
t0 = time.monotonic()
r = dq("stats", "q", redis=False, env={"DELAYQ_REDIS": bad})
ok(r.rc == 3 and one_line(r.err), "DELAYQ_REDIS naming a closed port: exit 3, one line", r)
r = dq("stats", "q", "--json", redis=False, env={"DELAYQ_REDIS": URL})
ok(r.rc in (0, 1), "DELAYQ_REDIS naming the test server: works without --redis (0, or 1: q never used)", r)

finish()
