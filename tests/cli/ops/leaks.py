"""leaks.py - every CLI command, its error paths and its shutdown on SIGTERM,
run once each; under `make valgrind` (DQ_TEST_WRAPPER set) each runs inside
valgrind, whose exit code 99 (a leak or a memory error) fails the check.

The other CLI tests run the binary bare, because they time what it does;
this one is where the CLI's own memory is checked by valgrind (ASan's leak
checker covers it in `make test-asan`). Without either it is a quick pass
over the same commands and exit codes, and then SKIPS (exit 77): it checked
no leak. With a wrapper that is not installed (no valgrind) it skips at once.
"""
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

VALGRIND_ERROR = 99  # --error-exitcode of the Makefile's valgrind target
Q = "leaks"
if WRAPPER and not shutil.which(WRAPPER[0]):
    finish(skip=f"{WRAPPER[0]} is not installed: no leak checked")
with open(BIN, "rb") as f:
    SANITIZED = b"__asan_init" in f.read()  # LeakSanitizer checks each run
tmp = tempfile.mkdtemp(prefix="delayq-leaks.")
note(f"wrapper: {' '.join(WRAPPER) if WRAPPER else 'none (exit codes only)'}")


def run(want_rc, *args, stdin=None, redis=True):
    """delayq args under the wrapper: exits want_rc, never with valgrind's code."""
    r = dq(*args, stdin=stdin, redis=redis, wrap=True, timeout=60)
    what = "delayq " + " ".join(str(a) for a in args)[:80]
    ok(r.rc != VALGRIND_ERROR, f"{what}: no leak or memory error", r.errtext[-3000:] if r.rc == VALGRIND_ERROR else None)
    ok(r.rc == want_rc or r.rc == VALGRIND_ERROR, f"{what}: exit {want_rc}", r)
    return r


def left(queue):
    """pending + ready + inflight of queue, by stats (not under the wrapper)."""
    r = dq("stats", queue, "--json")
    s = parse_json_lines(r.out) if r.rc == 0 else []
    return s[0]["pending"] + s[0]["ready"] + s[0]["inflight"] if s else -1


def run_until_term(*args, ready=None, want_rc=0):
    """A long-running command under the wrapper, stopped by SIGTERM once
    ready() holds (or after a second): it exits want_rc, with no leak."""
    p = bg_dq(*args, wrap=True)
    if ready is not None:
        ok(wait_for(ready, 30), f"delayq {' '.join(map(str, args))[:60]}: does its work")
    else:
        time.sleep(SLOW)  # long enough to be running, under valgrind too
    rc = p.stop(signal.SIGTERM, timeout=30)
    what = "delayq " + " ".join(str(a) for a in args)[:60] + " until SIGTERM"
    ok(rc != VALGRIND_ERROR, f"{what}: no leak or memory error", p.err.decode(errors="replace")[-3000:])
    ok(rc == want_rc, f"{what}: exit {want_rc}", rc)


section("producing and consuming")
run(0, "offer", Q, "0", "hello", "--id", "h1")
run(0, "offer", Q, "1h", "later", "--id", "l1")
run(0, "offer", Q, "1h", "again", "--id", "l1", "--nx")
run(0, "offer", Q, "--batch", "-", stdin=b"0\tb1\tone\n0\tb2\ttwo\n0\tb3\t\xff\xfe binary\n")
run(0, "take", Q, "--count", "2", "--json", "--timeout", "5s")
run(0, "take", Q, "--count", "1", "--timeout", "5s")
r = run(0, "take", Q, "--count", "1", "--ack", "manual", "--lease", "30s", "--json", "--timeout", "5s")
msgs = r.json_lines() if r.rc == 0 else []
if ok(len(msgs) == 1, "a leased take gave one delivery", r):
    run(0, "extend", Q, msgs[0]["id"], msgs[0]["token"], "1m")
    run(0, "ack", Q, msgs[0]["id"], msgs[0]["token"])
run(0, "offer", Q, "0", "fails", "--id", "f1")
r = run(0, "take", Q, "--count", "1", "--ack", "manual", "--json", "--timeout", "5s")
msgs = r.json_lines() if r.rc == 0 else []
if ok(len(msgs) == 1, "a second leased take gave one delivery", r):
    run(0, "nack", Q, msgs[0]["id"], msgs[0]["token"], "--delay", "1h", "--error", "boom")

section("looking at a queue")
run(0, "lookup", Q, "l1", "--json")
run(0, "list", Q, "--state", "pending", "--json")
run(0, "list", Q, "--state", "ready", "--limit", "5")
run(0, "stats", Q, "--json")
run(0, "cancel", Q, "l1")
run(1, "cancel", Q, "l1")
run(0, "config", Q, "--lease", "20s", "--max-attempts", "1")
run(0, "config", Q, "--json")
run(0, "config", Q, "--reset")
run(0, "doctor")
run(0, "doctor", "--json")

section("dead letters")
run(0, "config", Q, "--max-attempts", "1")
run(0, "offer", Q, "0", "dies", "--id", "d1")
r = run(0, "take", Q, "--count", "1", "--ack", "manual", "--json", "--timeout", "5s")
msgs = r.json_lines() if r.rc == 0 else []
if ok(len(msgs) == 1, "a delivery to bury", r):
    run(0, "nack", Q, msgs[0]["id"], msgs[0]["token"])  # its one attempt spent: buried
r = run(0, "dead", Q, "list", "--json")
ok(b'"d1"' in r.out, "d1 is a dead letter", r)
run(0, "dead", Q, "count")
run(0, "dead", Q, "redrive", "d1")
run(0, "dead", Q, "purge")

section("sealed payloads and ACL rules")
r = run(0, "keygen", redis=False)
key = private_file(tmp, "key", r.text) if r.rc == 0 else None
if key:
    run(0, "--key-file", key, "offer", "sealed", "0", "secret", "--id", "s1")
    r = run(0, "--key-file", key, "take", "sealed", "--json", "--timeout", "5s")
    ok(b'"payload":"secret"' in r.out, "the sealed payload opens", r)
run(0, "acl", Q, "--user", "app", redis=False)

section("TLS: a round trip, mutual TLS and a refused certificate")
# OpenSSL's contexts, sessions and verification errors are freed too.
import ssl  # noqa: E402
import topology  # noqa: E402
from tlsca import TestCA, tls_args  # noqa: E402

ca, other = TestCA(), TestCA("other")
server, client = ca.issue("server", ["IP:127.0.0.1"]), ca.issue("client")
peek = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
peek.check_hostname, peek.verify_mode = False, ssl.CERT_NONE
peek.load_cert_chain(*client)
tls_group = topology._Group("delayq-leaks-tls.")
tls_group.tls = peek
try:
    tport = topology.free_port()
    tls_group._server(tport, *tls_args(tport, server[0], server[1], ca.ca, True))
    ok(tls_group.wait_ping([tport]), "a TLS-only redis-server with tls-auth-clients started")
    TU = ["--redis", f"rediss://127.0.0.1:{tport}", "--tls-ca", ca.ca, "--tls-cert", client[0],
          "--tls-key", client[1]]
    run(0, *TU, "offer", "tlsq", "0", "over-tls", redis=False)
    r = run(0, *TU, "take", "tlsq", "--timeout", "5s", redis=False)
    ok(r.text == "over-tls\n", "the item came back over TLS", r)
    run(3, "--redis", f"rediss://127.0.0.1:{tport}", "--tls-ca", other.ca, "stats", "tlsq", redis=False)
    run(3, "--redis", f"rediss://127.0.0.1:{tport}", "--tls-ca", ca.ca, "stats", "tlsq", redis=False)
finally:
    tls_group.stop()

section("bad input and Redis out of reach")
run(2, "offer", Q, "5x", "p")
run(2, "offer", "bad queue", "0", "p")
run(2, "offer", Q, "0", "p", "--id", "bad id")
run(2, "--redis", "redis://:1:2:3", "stats", Q, redis=False)
run(3, "--redis", f"redis://127.0.0.1:{closed_port()}", "stats", Q, redis=False)
redis("SET", f"dq:{{wrongtype}}:r", "a string where a list belongs")
run(0, "offer", "wrongtype", "0", "p", "--id", "w1")
run(0, "take", "wrongtype", "--count", "1", "--timeout", "5s")

section("long-running commands, stopped by SIGTERM")
run(0, "offer", "work", "--batch", "-", stdin=b"".join(b"0\tw%d\tx\n" % i for i in range(20)))
run_until_term("work", "work", "--exec", "true", "--concurrency", "4",
               ready=lambda: left("work") == 0)
run_until_term("schedule", Q)
run_until_term("take", "idle", want_rc=1)
port = closed_port()


def answers():
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            return resp.status == 200 and len(resp.read()) > 0
    except OSError:
        return False


run_until_term("serve", "--listen", f"127.0.0.1:{port}", Q, ready=answers)

shutil.rmtree(tmp, ignore_errors=True)
finish(skip=None if WRAPPER or SANITIZED else
       "no leak checker here (make valgrind or make test-asan has one): exit codes only")
