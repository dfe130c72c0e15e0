"""usage.py - bad input exits 2 with one line on stderr; --help exits 0;
valid durations mean what they say."""
import os
import sys

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403


def usage_error(args, what, stdin=None):
    r = dq(*args, stdin=stdin)
    ok(r.rc == 2, f"{what}: exit 2", r)
    ok(one_line(r.err), f"{what}: one line on stderr", r.err)
    eq(r.out, b"", f"{what}: nothing on stdout")
    return r


section("invalid durations")
for d in ["5x", "-1s", "1.5s", "", " 5s", "5s ", "5 s", "+5s", "1w", "ms", "s", "5S", "5MS", "0x10",
          "1e3", "5sec", "abc", "99999999999999999999", "-0", "5m5s"]:
    usage_error(["offer", "dur", d, "p"], f"offer delay {d!r}")
for d in ["5x", "-1s", "1.5s", ""]:
    usage_error(["take", "dur", "--timeout", d], f"take --timeout {d!r}")
usage_error(["offer", "dur", "--batch", "-"], "batch line with delay 1.5s", stdin=b"1.5s\tid1\tp\n")
p = stats("dur")
if p is not None:
    eq((p["pending"], p["ready"]), (0, 0), "no bad offer left anything behind")

section("valid durations")
for d, ms in [("250ms", 250), ("30s", 30000), ("5m", 300000), ("2h", 7200000), ("1d", 86400000),
              ("1500", 1500), ("0ms", 0), ("007s", 7000)]:
    id_ = "d" + d
    s0 = server_ms()
    r = dq("offer", "durok", d, "p", "--id", id_)
    s1 = server_ms()
    if ok(r.rc == 0, f"offer delay {d!r} exits 0", r):
        due = zscore_due("durok", id_)
        if ms == 0:
            # due now: either pending with due <= now or straight to the ready list
            ok(due is None or s0 <= due <= s1, f"{d}: due now", due)
        else:
            ok(due is not None and s0 + ms <= due <= s1 + ms, f"{d}: due = now + {ms} ms",
               f"{s0 + ms} <= {due} <= {s1 + ms}")

section("unknown commands and options, missing arguments")
usage_error([], "no command")
usage_error(["frobnicate"], "unknown command")
usage_error(["frobnicate", "--help"], "unknown command with --help")
usage_error(["--bogus", "stats", "q"], "unknown global option")
usage_error(["offer"], "offer without a queue")
usage_error(["offer", "q"], "offer without a delay")
usage_error(["offer", "q", "1s", "p", "extra"], "offer with an extra argument")
usage_error(["offer", "q", "1s", "p", "--bogus"], "offer with an unknown option")
usage_error(["offer", "q", "1s", "p", "--id"], "offer --id without a value")
usage_error(["offer", "q", "1s", "p", "--id", "has space"], "offer with an invalid id")
usage_error(["offer", "q", "1s", "p", "--id", "x" * 129], "offer with a 129-byte id")
usage_error(["offer", "bad queue", "1s", "p"], "offer to an invalid queue name")
usage_error(["offer", "q{x}", "1s", "p"], "offer to a queue name with braces")
usage_error(["offer", "x" * 129, "1s", "p"], "offer to a 129-byte queue name")
usage_error(["offer", "q", "--batch"], "offer --batch without a file")
usage_error(["offer", "q", "--batch", "/nonexistent/file.tsv"], "offer --batch of a missing file")
usage_error(["offer", "q", "--batch", "-"], "batch line without tabs", stdin=b"just text\n")
usage_error(["offer", "q", "--batch", "-"], "batch line with a bad id", stdin=b"0\tbad id\tp\n")
usage_error(["cancel", "q"], "cancel without an id")
usage_error(["cancel", "q", "a", "b"], "cancel with an extra argument")
usage_error(["take"], "take without a queue")
usage_error(["take", "q", "--count", "-1"], "take --count -1")
usage_error(["take", "q", "--count", "abc"], "take --count abc")
usage_error(["take", "q", "--bogus"], "take with an unknown option")
usage_error(["schedule"], "schedule without a queue")
usage_error(["schedule", "bad queue"], "schedule an invalid queue name")
usage_error(["stats"], "stats without a queue")
usage_error(["stats", "q", "--bogus"], "stats with an unknown option")
r = dq("offer", "q", "1s", "p", redis=False, env={"DELAYQ_REDIS": "http://127.0.0.1:1/"})
ok(r.rc == 2 and one_line(r.err), "a malformed URL in DELAYQ_REDIS: exit 2, one line", r)
usage_error(["--redis", "redis://127.0.0.1:notaport", "stats", "q"], "--redis with a bad port")

section("where --redis may go")
# Either reaches the test's server: 0, or 1 for a queue never used; not 3
# (the environment's closed port).
r = dq(f"--redis={URL}", "stats", "q", "--json", redis=False, env={"DELAYQ_REDIS": "redis://127.0.0.1:1"})
ok(r.rc in (0, 1), "--redis=URL before the command", r)
r = dq("stats", "q", "--json", "--redis", URL, redis=False, env={"DELAYQ_REDIS": "redis://127.0.0.1:1"})
ok(r.rc in (0, 1), "--redis URL after the command", r)
usage_error(["stats", "q", "--redis"], "--redis without a value")
r = dq("--version")
ok(r.rc == 0 and r.out.startswith(b"delayq ") and one_line(r.out), "--version: exit 0, one line", r)

section("--help")
r = dq("--help")
ok(r.rc == 0 and len(r.out) > 50, "delayq --help: exit 0 and usage on stdout", r)
for cmd in ["offer", "cancel", "take", "schedule", "stats"]:
    r = dq(cmd, "--help")
    ok(r.rc == 0 and cmd.encode() in r.out, f"delayq {cmd} --help: exit 0, usage naming the command", r)
    eq(r.err, b"", f"delayq {cmd} --help: nothing on stderr")
    r = dq("help", cmd)
    ok(r.rc == 0 and cmd.encode() in r.out, f"delayq help {cmd}: exit 0", r)

finish()
