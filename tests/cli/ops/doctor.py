"""doctor.py - `delayq doctor`, and the unsafe findings of the long-running
commands at their start.

Against redis-servers of the test's own (free ports, temp dirs, stopped by
pid) configured to be unsafe: maxmemory-policy allkeys-lru, no persistence
at all, a clock 60 s ahead or behind (the LD_PRELOAD shim
tests/tools/preload/clockshift.c under redis-server): doctor names the check
`unsafe` and exits 1, `--json` prints exactly one object of the documented
shape; a healthy server (AOF, appendfsync always, noeviction) exits 0; an
application user that may not read CONFIG or INFO gets warnings, not a
failure; a Sentinel group's replicas are examined; nothing listening is
exit 3. `take` prints the unsafe findings (the clock's naming both clocks)
once at its start and runs anyway; `serve` shows them in /metrics and
/api/queues. The suite's own server is only read.
"""
# tier: slow (about 19 s): make test runs it, make test-fast does not
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403
import topology  # noqa: E402

CHECKS = ["maxmemory-policy", "persistence", "replicas", "min-replicas-to-write", "clock",
          "redis-version", "function-library", "acl"]
SHIM = os.path.join(os.environ["DQ_BUILD_DIR"], "tests", "tools", "clockshift.so")
tmp = tempfile.mkdtemp(prefix="delayq-doctor.")
servers = []


def server(*args, shift_ms=None):
    """A redis-server of this test's, on a free port with its own dir; its
    port, once it answers PING."""
    port = topology.free_port()
    d = os.path.join(tmp, str(port))
    os.makedirs(d)
    env = dict(os.environ)
    if shift_ms is not None:
        env.update(LD_PRELOAD=SHIM, CLOCKSHIFT_MS=str(shift_ms))
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
                          "--protected-mode", "no", *args], cwd=d, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    servers.append(p)
    ok(topology.wait_until(lambda: topology.try_call(port, "PING") == "PONG", 10), f"redis-server on {port} starts")
    return port


def stop_servers():
    for p in servers:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
    shutil.rmtree(tmp, ignore_errors=True)


def url(port, auth=""):
    return f"redis://{auth}127.0.0.1:{port}"


def doctor(redis_url, *extra):
    return dq("--redis", redis_url, "doctor", *extra, redis=False)


def findings(r):
    """{check: (status, detail)} of a doctor --json run, its shape checked."""
    try:
        body = json.loads(r.out)
    except ValueError as exc:
        ok(False, "doctor --json prints JSON", f"{exc}: {r!r}")
        return {}
    ok(r.out.count(b"\n") == 1 and r.out.endswith(b"\n"), "doctor --json prints one line", r)
    ok(isinstance(body, dict) and list(body) == ["findings"], "one object whose only key is findings", body)
    fs = body.get("findings") if isinstance(body, dict) else None
    ok(isinstance(fs, list) and all(isinstance(f, dict) and sorted(f) == ["check", "detail", "status"] for f in fs),
       "each finding is {check, status, detail}", fs)
    fs = fs if isinstance(fs, list) else []
    eq([f.get("check") for f in fs], CHECKS, "the checks, in order")
    ok(all(f.get("status") in ("ok", "warn", "unsafe") and isinstance(f.get("detail"), str) and f["detail"]
           for f in fs), "every status is ok, warn or unsafe, with a detail", fs)
    return {f.get("check"): (f.get("status"), f.get("detail")) for f in fs}


def unsafe_lines(err):
    return [l for l in err.decode("utf-8", "replace").splitlines() if l.startswith("delayq: unsafe: ")]


try:
    section("the suite's server (AOF everysec, no replica): nothing unsafe")
    r = dq("doctor")
    eq(r.rc, 0, "doctor exits 0")
    lines = r.text.splitlines()
    eq([l.split()[0] for l in lines], CHECKS, "one line per check")
    ok(all(l.split()[1] in ("ok", "warn", "unsafe") for l in lines), "each with its status", r)
    rj = dq("doctor", "--json")
    eq(rj.rc, 0, "doctor --json exits 0")
    f = findings(rj)
    eq(f.get("maxmemory-policy", ("?",))[0], "ok", "maxmemory-policy ok (noeviction)")
    eq(f.get("persistence", ("?",))[0], "warn", "persistence: a warning (AOF everysec without replicas)")
    eq(f.get("replicas", ("?",))[0], "warn", "replicas: a warning (none)")
    eq(f.get("clock", ("?",))[0], "ok", "clock ok")
    eq(f.get("redis-version", ("?",))[0], "ok", "redis-version ok")
    eq(dq("take", "dr-none", "--timeout", "200ms").err.count(b"unsafe"), 0, "take says nothing at its start")

    section("maxmemory-policy allkeys-lru: unsafe")
    lru = server("--appendonly", "yes", "--appendfsync", "always", "--save", "", "--maxmemory", "100mb",
                 "--maxmemory-policy", "allkeys-lru")
    r = doctor(url(lru), "--json")
    eq(r.rc, 1, "doctor --json exits 1")
    f = findings(r)
    st, detail = f.get("maxmemory-policy", ("?", ""))
    eq(st, "unsafe", "maxmemory-policy unsafe")
    ok("allkeys-lru" in detail and "noeviction" in detail, "it names the policy and the fix", detail)
    eq([c for c, (s, _) in f.items() if s == "unsafe"], ["maxmemory-policy"], "nothing else is unsafe")
    r = dq("--redis", url(lru), "take", "dr-lru", "--timeout", "300ms", redis=False)
    eq(r.rc, 1, "take still runs (exit 1: nothing came before its timeout)")
    lines = unsafe_lines(r.err)
    ok(len(lines) == 1 and lines[0].startswith("delayq: unsafe: maxmemory-policy: ") and "allkeys-lru" in lines[0],
       "take prints one line for it at its start", r)

    section("/metrics and the dashboard's API show the findings")
    sport = closed_port()
    p = Bg([BIN, "--redis", url(lru), "serve", "--listen", f"127.0.0.1:{sport}"], name="serve")

    def get(path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{sport}{path}", timeout=5) as resp:
                return resp.read().decode()
        except OSError:
            return None

    ok(wait_for(lambda: get("/api/queues") is not None, 10), "serve answers", p.err)
    m = get("/metrics") or ""
    ok('delayq_doctor_finding{check="maxmemory-policy",status="unsafe"} 1' in m, "/metrics: maxmemory-policy unsafe",
       m[-800:])
    ok('delayq_doctor_finding{check="clock",status="ok"} 1' in m, "/metrics: clock ok")
    api = json.loads(get("/api/queues") or "{}")
    eq([u.get("check") for u in api.get("unsafe", [])], ["maxmemory-policy"], "/api/queues lists the unsafe one")
    eq(p.stop(), 0, "serve exits 0 on SIGTERM")
    eq(len(unsafe_lines(p.err)), 1, "serve printed it once at its start")

    section("no persistence (appendonly no, save ''): unsafe")
    bare = server("--appendonly", "no", "--save", "")
    r = doctor(url(bare))
    eq(r.rc, 1, "doctor exits 1")
    line = [l for l in r.text.splitlines() if l.startswith("persistence ")]
    ok(len(line) == 1 and line[0].split()[1] == "unsafe" and "neither AOF nor RDB" in line[0],
       "persistence unsafe: neither AOF nor RDB", r)
    f = findings(doctor(url(bare), "--json"))
    eq(f.get("persistence", ("?",))[0], "unsafe", "--json says so too")

    section("a healthy server: AOF, appendfsync always, noeviction")
    good = server("--appendonly", "yes", "--appendfsync", "always", "--save", "")
    r = doctor(url(good), "--json")
    eq(r.rc, 0, "doctor exits 0")
    f = findings(r)
    eq(f.get("persistence", ("?",))[0], "ok", "persistence ok")
    eq([c for c, (s, _) in f.items() if s == "unsafe"], [], "nothing unsafe")
    ok("EVAL" in f.get("acl", ("", ""))[1] and f.get("acl", ("",))[0] == "warn",
       "acl: the default user may run EVAL and FUNCTION LOAD (a warning)", f.get("acl"))

    section("an application user (the rule of 'delayq acl'): warnings, not failures")
    pw = private_file(tmp, "pw", "app-pw-1\n")
    rule = dq("acl", "drq", "--user", "app", "--password-file", pw)
    eq(rule.rc, 0, "delayq acl prints the rule")
    cli = subprocess.run(["redis-cli", "-p", str(good)] + rule.text.split(), capture_output=True, timeout=10)
    eq(cli.stdout.strip(), b"OK", "the rule is set")
    r = doctor(url(good, "app:app-pw-1@"), "--json")
    eq(r.rc, 0, "doctor as the user exits 0")
    f = findings(r)
    st, detail = f.get("maxmemory-policy", ("?", ""))
    ok(st == "warn" and "NOPERM" in detail, "maxmemory-policy: a warning naming the refusal", detail)
    eq(f.get("persistence", ("?",))[0], "warn", "persistence: a warning")
    eq(f.get("clock", ("?",))[0], "ok", "clock: TIME is allowed, ok")
    st, detail = f.get("acl", ("?", ""))
    if "+eval" in rule.text or "+function|load" in rule.text:
        ok(st == "warn" and "user app" in detail and "may run" in detail,
           "acl: a warning, as the rule grants EVAL or FUNCTION LOAD", detail)
    cli = subprocess.run(["redis-cli", "-p", str(good), "ACL", "SETUSER", "app", "-eval", "-function|load"],
                         capture_output=True, timeout=10)
    eq(cli.stdout.strip(), b"OK", "the user loses EVAL and FUNCTION LOAD")
    st, detail = findings(doctor(url(good, "app:app-pw-1@"), "--json")).get("acl", ("?", ""))
    ok(st == "ok" and "may not run EVAL or FUNCTION LOAD" in detail, "acl ok: no EVAL, no FUNCTION LOAD", detail)

    section("a server clock 60 s ahead, and 60 s behind: unsafe")
    for shift, word in ((60000, "ahead of"), (-60000, "behind")):
        skew = server("--appendonly", "yes", "--appendfsync", "always", "--save", "", shift_ms=shift)
        t = topology.call(skew, "TIME")
        ok(abs(int(t[0]) - time.time() - shift / 1000) < 5, f"the shim moves its TIME by {shift} ms", t)
        r = doctor(url(skew), "--json")
        eq(r.rc, 1, "doctor exits 1")
        st, detail = findings(r).get("clock", ("?", ""))
        m = re.search(r"clock ([0-9.]+) s " + word + " this host's", detail)
        ok(st == "unsafe" and m and 59 < float(m.group(1)) < 61, f"clock unsafe: 60 s {word} this host's", detail)
        r = dq("--redis", url(skew), "take", "dr-clock", "--timeout", "300ms", redis=False)
        eq(r.rc, 1, "take still runs")
        lines = unsafe_lines(r.err)
        ok(len(lines) == 1 and lines[0].startswith("delayq: unsafe: clock: ") and " there, " in lines[0]
           and " here)" in lines[0], "take's one line at its start names both clocks", r)
    p = Bg([BIN, "--redis", url(skew), "schedule", "dr-clock"], name="schedule")
    time.sleep(1)
    eq(p.stop(), 0, "schedule runs until SIGTERM")
    lines = unsafe_lines(p.err)
    ok(len(lines) == 1 and lines[0].startswith("delayq: unsafe: clock: "), "schedule prints the clock's line once",
       p.err)

    section("a replica whose clock is 60 s ahead of its master's")
    rep = server("--appendonly", "yes", "--save", "", "--replicaof", "127.0.0.1", str(good), shift_ms=60000)
    ok(topology.wait_until(lambda: topology.info(rep, "replication").get("master_link_status") == "up", 10),
       "the replica is linked")
    # The replica says it is linked a moment before its master lists it
    # (ROLE), which is what doctor reads.
    ok(topology.wait_until(lambda: len(topology.call(good, "ROLE")[2] or []) == 1, 10),
       "the master lists it (ROLE)")
    r = doctor(url(good), "--json")
    eq(r.rc, 1, "doctor on the master's URL exits 1")
    f = findings(r)
    st, detail = f.get("clock", ("?", ""))
    # About 60 s: the two clocks are read one after the other (59.998 is seen).
    ok(st == "unsafe" and f"127.0.0.1:{rep} (replica): clock" in detail and
       re.search(r"the nodes' clocks differ by (59|60)\.\d+ s", detail),
       "clock unsafe: the replica's, and the nodes differ (a failover would jump)", detail)
    eq(f.get("persistence", ("?",))[0], "ok", "persistence ok on both")
    ok("1 replica" in f.get("replicas", ("", ""))[1], "replicas: the master has one", f.get("replicas"))
    r = dq("--redis", url(good), "take", "dr-rep", "--timeout", "300ms", redis=False)
    eq(unsafe_lines(r.err), [], "take's quick look at the start examines the master only")

    section("nothing listening: exit 3")
    r = doctor(url(closed_port()))
    eq(r.rc, 3, "doctor exits 3")
    ok(one_line(r.err), "one line on stderr", r)

    section("a Sentinel group: the master and its replicas")
    with topology.SentinelGroup(n_replicas=2) as g:
        ok(g.ready(), "the group is ready")
        r = dq("--redis", g.url(), "doctor", "--json", redis=False)
        eq(r.rc, 0, "doctor exits 0")
        f = findings(r)
        st, detail = f.get("replicas", ("?", ""))
        ok(st in ("ok", "warn") and "2 replicas" in detail, "replicas: the master's 2", detail)
        ok("2 replicas examined" in f.get("clock", ("", ""))[1], "the replicas were examined too", f.get("clock"))
        eq(f.get("persistence", ("?",))[0], "ok", "persistence ok (AOF everysec, with replicas)")
finally:
    stop_servers()

finish()
