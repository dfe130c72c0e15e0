"""failures.py - Redis errors exit 3 with one line on stderr: a queue key of
the wrong type (other queues keep working), and an unreachable server."""
import os
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "lib")))
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
redis("SET", "dq:{wq}:zs", "foo")
r = redis_error(["offer", "wq", "0", "x"], "offer to a queue whose zset is a string", WRONG)
note(f"stderr: {r.errtext.strip()}")
redis_error(["offer", "wq", "5s", "x", "--id", "i1"], "offer with a delay", WRONG)
redis_error(["offer", "wq", "--batch", "-"], "offer --batch", WRONG, stdin=b"0\tb1\tp\n1s\tb2\tq\n")
redis_error(["cancel", "wq", "i1"], "cancel", WRONG)
redis_error(["stats", "wq"], "stats", WRONG)
eq(redis("GET", "dq:{wq}:zs"), b"foo", "the foreign key is untouched")
redis("RPUSH", "dq:{wl}:zs", "a")
redis_error(["offer", "wl", "1s", "x"], "offer when the zset key is a list", WRONG)
redis("SET", "dq:{wr}:r", "foo")
redis_error(["offer", "wr", "0", "x"], "offer (due now) when the ready key is a string", WRONG)
# A delayed item would be accepted into a queue whose transfers must fail.
redis_error(["offer", "wr", "1s", "x"], "offer (delayed) when the ready key is a string", WRONG)

section("other queues keep working")
r = dq("offer", "fine", "0", "works", "--id", "ok1")
eq((r.rc, r.out), (0, b"ok1\n"), "offer to another queue exits 0")
r = dq("take", "fine", "--timeout", "5s")
eq((r.rc, r.out), (0, b"works\n"), "take from it works")
redis("DEL", "dq:{wq}:zs")
r = dq("offer", "wq", "0", "again", "--id", "w2")
eq((r.rc, r.out), (0, b"w2\n"), "offer to wq works again once the key is gone")
r = dq("take", "wq", "--timeout", "5s")
eq((r.rc, r.out), (0, b"again\n"), "and the item is delivered")

section("Redis down (a closed port)")
port = closed_port()
bad = f"redis://127.0.0.1:{port}"
DOWN = [b"refused", b"connect", b"unreachable"]
for args in (["offer", "q", "0", "x"], ["cancel", "q", "x"], ["stats", "q"], ["take", "q", "--timeout", "1s"],
             ["schedule", "q"]):
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
ok(r.rc == 0, "DELAYQ_REDIS naming the test server: works without --redis", r)

finish()
