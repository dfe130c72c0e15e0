"""exit_codes.py - the exit code of every input error is 2, as docs/cli.md
says, with one printable line on stderr and nothing on stdout; a value
Redis refuses as out of range or inconsistent is an input error too; a
stdout that cannot be written fails the command with exit 3 and a message.
The exit codes of the scripts' refusals follow their class word (ERR
delayq:input is 2; corrupt and state are 3), and every refusal in lua/
carries one (docs/protocol.md, Errors).

Table-driven: each row is (what, args, stdin). Outside input quoted in a
message is escaped and cut, so every message is one short line of
printable ASCII whatever the input."""
import os
import sys

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

LONG = "q" * 10000
MIB = 1048576


def check_usage(what, args, stdin=None, redis=True, env=None):
    r = dq(*args, stdin=stdin, redis=redis, env=env, timeout=60)
    good = (r.rc == 2 and one_line(r.err) and r.out == b"" and len(r.err) <= 400
            and all(0x20 <= c < 0x7f for c in r.err[:-1]))
    ok(good, f"{what}: exit 2, one short printable line on stderr, nothing on stdout", r)
    return r


# ------------------------------------------------------------------ the table

ROWS = [
    # global
    ("no command", [], None),
    ("unknown command", ["frobnicate"], None),
    ("unknown command with raw bytes", [b"fr\xff\x01ob"], None),
    ("help of an unknown command", ["help", "nope"], None),
    ("unknown global option", ["--bogus", "stats", "q"], None),
    ("--redis without a value", ["stats", "q", "--redis"], None),
    ("--redis with a bad port", ["--redis", "redis://127.0.0.1:notaport", "stats", "q"], None),
    ("--redis of another scheme", ["--redis", "http://127.0.0.1/", "stats", "q"], None),
    # offer
    ("offer without arguments", ["offer"], None),
    ("offer without a delay", ["offer", "q"], None),
    ("offer with an extra argument", ["offer", "q", "1s", "p", "extra"], None),
    ("offer with an unknown option", ["offer", "q", "1s", "p", "--bogus"], None),
    ("offer to an invalid queue", ["offer", "bad queue", "1s", "p"], None),
    ("offer to a 10,000-byte queue name", ["offer", LONG, "1s", "p"], None),
    ("offer to a queue name of raw bytes", ["offer", b"q\xc3\xa9\n\x1b[31m", "1s", "p"], None),
    ("offer with a bad delay", ["offer", "q", "1.5s", "p"], None),
    ("offer with a delay past the largest duration", ["offer", "q", "99999999999999999999", "p"], None),
    ("offer whose due time overflows (31000d)", ["offer", "q", "31000d", "p"], None),
    ("offer whose due time overflows (in ms)", ["offer", "q", "4398046511103", "p"], None),
    ("offer with an invalid id", ["offer", "q", "1s", "p", "--id", "a b"], None),
    ("offer with a 129-byte id", ["offer", "q", "1s", "p", "--id", "x" * 129], None),
    ("offer with an id of raw bytes", ["offer", "q", "1s", "p", "--id", b"\xff\xfe\x07"], None),
    ("offer of a payload over 1 MiB on stdin", ["offer", "q", "0"], b"x" * (MIB + 1)),
    ("offer --id with --batch", ["offer", "q", "--batch", "-", "--id", "a"], b""),
    ("offer --batch of a missing file", ["offer", "q", "--batch", "/nonexistent/x.tsv"], None),
    ("batch line without tabs", ["offer", "q", "--batch", "-"], b"just text\n"),
    ("batch line with a bad delay", ["offer", "q", "--batch", "-"], b"5x\tid\tp\n"),
    ("batch line whose due time overflows", ["offer", "q", "--batch", "-"], b"0\ta\tp\n31000d\tb\tp\n"),
    ("batch line with a bad id", ["offer", "q", "--batch", "-"], b"0\tbad id\tp\n"),
    ("batch line with a NUL in the id", ["offer", "q", "--batch", "-"], b"0\tab\x00cd\tp\n"),
    ("batch line with a NUL in the delay", ["offer", "q", "--batch", "-"], b"1\x00s\tid\tp\n"),
    ("batch line with a payload over 1 MiB", ["offer", "q", "--batch", "-"], b"0\tid\t" + b"x" * (MIB + 1) + b"\n"),
    ("batch line longer than any valid one", ["offer", "q", "--batch", "-"], b"0\tid\t" + b"x" * (2 * MIB)),
    # cancel
    ("cancel without an id", ["cancel", "q"], None),
    ("cancel with an extra argument", ["cancel", "q", "a", "b"], None),
    ("cancel of an invalid id", ["cancel", "q", b"a\tb"], None),
    ("cancel in an invalid queue", ["cancel", "q q", "a"], None),
    # take
    ("take without a queue", ["take"], None),
    ("take --count -1", ["take", "q", "--count", "-1"], None),
    ("take --count abc", ["take", "q", "--count", "abc"], None),
    ("take --count past int64", ["take", "q", "--count", "99999999999999999999"], None),
    ("take --timeout 1.5s", ["take", "q", "--timeout", "1.5s"], None),
    ("take --lease without --ack", ["take", "q", "--lease", "1s"], None),
    ("take --ack auto", ["take", "q", "--ack", "auto"], None),
    ("take --ack manual --lease 0", ["take", "q", "--ack", "manual", "--lease", "0"], None),
    ("take --json=1", ["take", "q", "--json=1"], None),
    # ack, nack, extend
    ("ack without a token", ["ack", "q", "a"], None),
    ("ack with a token holding a space", ["ack", "q", "a", "bad token"], None),
    ("ack with a 65-byte token", ["ack", "q", "a", "t" * 65], None),
    ("ack of an invalid id", ["ack", "q", "a b", "tok"], None),
    ("nack with a bad delay", ["nack", "q", "a", "tok", "--delay", "soon"], None),
    ("extend without a duration", ["extend", "q", "a", "tok"], None),
    ("extend by 0", ["extend", "q", "a", "tok", "0"], None),
    ("extend by a bad duration", ["extend", "q", "a", "tok", "1w"], None),
    # work
    ("work without --exec", ["work", "q"], None),
    ("work --concurrency 0", ["work", "q", "--exec", "true", "--concurrency", "0"], None),
    ("work --concurrency 10001", ["work", "q", "--exec", "true", "--concurrency", "10001"], None),
    ("work --max-attempts -1", ["work", "q", "--exec", "true", "--max-attempts", "-1"], None),
    ("work --lease 0", ["work", "q", "--exec", "true", "--lease", "0"], None),
    ("work --lease 1y", ["work", "q", "--exec", "true", "--lease", "1y"], None),
    # dead
    ("dead without an action", ["dead", "q"], None),
    ("dead with an unknown action", ["dead", "q", "bury"], None),
    ("dead count --json", ["dead", "q", "count", "--json"], None),
    ("dead list with an extra argument", ["dead", "q", "list", "x"], None),
    ("dead redrive of an invalid id", ["dead", "q", "redrive", "a b"], None),
    # lookup, list
    ("lookup without an id", ["lookup", "q"], None),
    ("lookup of an invalid id", ["lookup", "q", "a b"], None),
    ("list --state sideways", ["list", "q", "--state", "sideways"], None),
    ("list --limit 0", ["list", "q", "--limit", "0"], None),
    ("list --limit 1001", ["list", "q", "--limit", "1001"], None),
    ("list --cursor zz", ["list", "q", "--cursor", "zz"], None),
    ("list --state ready --cursor 1:2", ["list", "q", "--state", "ready", "--cursor", "1:2"], None),
    # schedule, stats
    ("schedule without a queue", ["schedule"], None),
    ("schedule of an invalid queue", ["schedule", "ok", "not ok"], None),
    ("stats without a queue", ["stats"], None),
    ("stats with an extra argument", ["stats", "q", "r"], None),
    # config
    ("config --lease 0", ["config", "q", "--lease", "0"], None),
    ("config --max-attempts x", ["config", "q", "--max-attempts", "x"], None),
    ("config --max-attempts past int32", ["config", "q", "--max-attempts", "2147483648"], None),
    ("config --backoff-base 1.5s", ["config", "q", "--backoff-base", "1.5s"], None),
    ("config base above max, both given", ["config", "q", "--backoff-base", "10m", "--backoff-max", "1s"], None),
    ("config --reset with a base above the default max", ["config", "q", "--reset", "--backoff-base", "11m"], None),
    ("config --reset with a max below the default base", ["config", "q", "--reset", "--backoff-max", "999"], None),
]

section("every input error exits 2")
for what, args, stdin in ROWS:
    check_usage(what, args, stdin)
r = dq("stats", "q")
ok(r.rc == 1 and b"no queue q" in r.err, "no refused offer or config left anything behind: q has no keys "
   "(stats of a queue never used exits 1)", r)
eq(dq("config", "q", "--json").text.strip(),
   '{"lease_ms":30000,"max_attempts":16,"backoff_base_ms":1000,"backoff_max_ms":600000,"shards":1}',
   "no refused config changed a setting")

section("a message names its command once")
r = dq("lookup", "q", "a b")
ok(r.err.startswith(b"delayq: lookup: invalid id 'a b'"), "lookup: the id", r.err)
r = dq("list", "q", "--cursor", "zz")
ok(r.err.startswith(b"delayq: list: malformed cursor") and b"list: list" not in r.err, "list: the cursor", r.err)

section("input errors Redis finds: exit 2 too")
eq(dq("config", "cr", "--backoff-max", "2s").rc, 0, "config cr --backoff-max 2s")
r = check_usage("a base above the stored max (the script refuses it)", ["config", "cr", "--backoff-base", "10m"])
ok(b"backoff_base_ms above backoff_max_ms" in r.err, "... and says why", r.err)
check_usage("a base above the max, both given with --reset", ["config", "cr", "--backoff-base", "2s", "--reset", "--backoff-max", "1s"])
eq(dq("config", "cr", "--backoff-base", "1500ms").rc, 0, "a base below the stored max is fine")
check_usage("a max below the stored base (the script refuses it)", ["config", "cr", "--backoff-max", "1s"])
eq(dq("config", "cr", "--json").text.strip(),
   '{"lease_ms":30000,"max_attempts":16,"backoff_base_ms":1500,"backoff_max_ms":2000,"shards":1}',
   "refused settings changed nothing")

section("refusals Redis's side causes: exit 3, told by their class, not their text")
redis("HSET", "dq:{cc}:n", "pending", "abc")
r = dq("offer", "cc", "1s", "p")
ok(r.rc == 3 and one_line(r.err) and b"delayq:corrupt counter pending in dq:{cc}:n" in r.err,
   "an offer onto a corrupt counter: exit 3, the class word and the field named", r)
eq(dq("offer", "sq", "1h", "p").rc, 0, "offer sq 1h p")
r = dq("config", "sq", "--shards", "4")
ok(r.rc == 3 and one_line(r.err) and b"delayq:state the shard count changes only on an empty queue" in r.err,
   "a shard count change on a queue holding an item: exit 3 (the queue's state, no bad input)", r)

section("every refusal of the library's functions carries a class word")
LUA = os.path.join(os.environ.get("DQ_TEST_ROOT", os.path.join(os.path.dirname(__file__), "..", "..", "..")), "lua")
words = {}
for d, _, files in os.walk(LUA):
    for f in sorted(files):
        if f.endswith(".lua"):
            with open(os.path.join(d, f), encoding="utf-8") as src:
                for n, line in enumerate(src, 1):
                    if "error_reply('ERR delayq:" in line:
                        w = line.split("error_reply('ERR delayq:", 1)[1].split(" ", 1)[0]
                        words.setdefault(w, []).append(f"{f}:{n}")
ok(len(words) > 0 and sum(map(len, words.values())) >= 30, "the scripts' ERR delayq: refusals are found", words)
ok(set(words) <= {"input", "state", "corrupt", "proto"},
   "each is ERR delayq:input, :state, :corrupt or :proto (PROTOCOL.md, Errors)",
   {w: v for w, v in words.items() if w not in ("input", "state", "corrupt", "proto")})

section("messages quote outside input escaped and cut")
r = dq("offer", LONG, "1s", "p")
ok(r.rc == 2 and b"q" * 64 + b"..." in r.err and b"q" * 65 not in r.err,
   "a 10,000-byte queue name is cut to 64 bytes and '...'", r.err)
r = dq("offer", b"q\xc3\xa9\n\x1b[31m", "1s", "p")
ok(b"q\\xc3\\xa9\\x0a\\x1b[31m" in r.err, "raw bytes and control characters as \\xHH", r.err)
r = dq("offer", "q", "--batch", "-", stdin=b"0\tok\tp\n\n0\tab\x00cd\tp\n")
ok(b"stdin line 3:" in r.err and b"NUL" in r.err and b"ab\\x00cd" in r.err,
   "a NUL in a batch id: named as a NUL byte, at its line, the id shown whole", r.err)
r = dq("offer", "q", "31000d", "p")
ok(b"31000d" in r.err and b"2109" in r.err, "an overflowing delay: said so", r.err)
r = dq("cancel", "q", "a" * 300)
ok(r.rc == 2 and b"a" * 64 + b"..." in r.err and b"a" * 65 not in r.err, "a long id is cut too", r.err)

section("the largest delay that fits is accepted")
r = dq("offer", "q", "30000d", "p", "--id", "far")
eq(r.rc, 0, "offer 30000d (82 years) exits 0", )

section("a stdout that cannot be written: exit 3 and a message")
eq(dq("offer", "q", "1h", "x", "--id", "known").rc, 0, "offer to q (stats of a queue never used prints nothing)")
with open("/dev/full", "wb") as full:
    import subprocess
    for what, args in [("config", ["config", "q"]), ("config --json", ["config", "q", "--json"]),
                       ("stats", ["stats", "q"]), ("dead count", ["dead", "q", "count"]),
                       ("offer (the id)", ["offer", "q", "1s", "p"]),
                       ("offer --batch (the count)", ["offer", "q", "--batch", "/dev/null"]),
                       ("--help", ["--help"]), ("offer --help", ["offer", "--help"])]:
        p = subprocess.run([BIN, "--redis", URL] + args, stdin=subprocess.DEVNULL, stdout=full,
                           stderr=subprocess.PIPE, timeout=30 * SLOW)
        ok(p.returncode == 3 and one_line(p.stderr) and b"cannot write to stdout" in p.stderr,
           f"{what} > /dev/full: exit 3, one line on stderr", (p.returncode, p.stderr))
    dq("offer", "wq", "0", "x", "--id", "w1")
    p = subprocess.run([BIN, "--redis", URL, "take", "wq", "--json", "--timeout", "3s"],
                       stdin=subprocess.DEVNULL, stdout=full, stderr=subprocess.PIPE, timeout=30 * SLOW)
    ok(p.returncode == 3 and b"cannot write to stdout" in p.stderr, "take > /dev/full: exit 3",
       (p.returncode, p.stderr))

finish()
