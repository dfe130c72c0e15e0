"""credentials.py - the Redis passwords stay out of argv, the environment of
`work --exec` commands and every message (issue 35, findings 13 and 14).

1. --password-file FILE and $DELAYQ_PASSWORD_FILE, against a redis-server of
   the test's own with requirepass and an ACL user: a URL without a password
   works with the file (default user, or the URL's user), the file replaces
   a wrong password in the URL, the option works after the command too; no
   file: exit 3; a file group or others may read: exit 2, nothing sent; a
   running delayq's argv (/proc/PID/cmdline, what ps shows) holds the path,
   never the password.
2. --sentinel-password-file and $DELAYQ_SENTINEL_PASSWORD_FILE with a
   Sentinel that has requirepass; with a redis:// URL: exit 2.
3. `work --exec` commands get no DELAYQ_REDIS (whose URL holds the
   password), DELAYQ_PASSWORD_FILE, DELAYQ_SENTINEL_PASSWORD_FILE or
   DELAYQ_KEY_FILE; with --pass-credentials they get the worker's, and a
   command running delayq with them reaches the password-protected server.
4. The sweep: 36 URL forms holding a known password (bad schemes, missing
   parts, raw '#', '@', '&' and ':' in passwords, percent-encoding, unknown
   query keys, a forgotten '@host' or #MASTER) given in 11 ways (--redis
   before or after the command, with '=' or not, $DELAYQ_REDIS, mistyped
   global options, a stray argument) to 17 commands: no piece of any
   password is ever on stdout or stderr. Every URL names closed 127.0.0.1
   ports, so each run fails fast.
"""
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import BIN, SLOW, Bg, dq, finish, note, ok, section, wait_for  # noqa: E402
import topology  # noqa: E402

tmp = tempfile.mkdtemp(prefix="delayq-creds.")


def secret_file(name, text, mode=0o600):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text + "\n")
    os.chmod(path, mode)
    return path


class AuthedRedis(topology._Group):
    """One redis-server with requirepass (the default user) and an ACL user."""

    def __init__(self, password, user, user_password):
        super().__init__("delayq-creds-redis.")
        self.port = topology.free_port()
        self.password = password
        self._server(self.port, "--requirepass", password,
                     "--user", user, "on", ">" + user_password, "~*", "&*", "+@all")
        if not self.wait_ping([self.port]):
            raise RuntimeError("redis-server with requirepass did not start")

    def _auth(self, port):
        return (self.password,)


NO_DELAYQ_VARS = {k: None for k in os.environ if k.startswith("DELAYQ_")}


def run(*args, env=None, timeout=20):
    """delayq args with no DELAYQ_* variable but those of env (not even the
    suite's DELAYQ_REDIS)."""
    return dq(*args, redis=False, env={**NO_DELAYQ_VARS, "DELAYQ_REDIS": None, **(env or {})},
              timeout=timeout)


def work_env(argv, env, outfile, items):
    """Runs delayq argv (a work --exec whose command appends its environment
    and a line "done" to outfile) with the variables env until outfile
    shows items runs; returns what the commands saw."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("DELAYQ_")}
    e.update(env)
    w = subprocess.Popen([BIN] + argv, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen = lambda: open(outfile).read() if os.path.exists(outfile) else ""  # noqa: E731
    ok(wait_for(lambda: seen().count("done\n") >= items or w.poll() is not None, 15),
       f"the worker ran its {items} item(s)", w.poll())
    w.terminate()
    try:
        w.wait(10 * SLOW)
    except subprocess.TimeoutExpired:
        w.kill()
        w.wait()
    return seen()


CRED_VARS = ("DELAYQ_REDIS=", "DELAYQ_PASSWORD_FILE=", "DELAYQ_KEY_FILE=", "DELAYQ_SENTINEL_PASSWORD_FILE=")


# ------------------------------------------------------------------ 1. --password-file

# A password no URL could carry raw: '@', '#', ':' and '/' in it.
PW = "d@ta#Pw:9/xQ"
USER, USER_PW = "app", "us3r#Pw@7"
pwfile = secret_file("pw", PW)
userpwfile = secret_file("userpw", USER_PW)
open_file = secret_file("pw-open", PW, 0o640)
others_file = secret_file("pw-others", PW, 0o604)

section("--password-file against a redis-server with requirepass")
with AuthedRedis(PW, USER, USER_PW) as srv:
    base = f"redis://127.0.0.1:{srv.port}"
    r = run("--redis", base, "--password-file", pwfile, "offer", "cq", "0", "through a password file")
    ok(r.rc == 0, "--password-file before the command: the offer works", r)
    r = run("--redis", base, "take", "cq", "--json", "--timeout", "5s", "--password-file", pwfile)
    ok(r.rc == 0 and r.json_lines() and r.json_lines()[0]["payload"] == "through a password file",
       "--password-file after the command: the take gets it", r)
    r = run("--redis", base, "stats", "cq", env={"DELAYQ_PASSWORD_FILE": pwfile})
    ok(r.rc == 0 and "pending 0" in r.text, "$DELAYQ_PASSWORD_FILE works", r)
    r = run("--redis", f"redis://:wrong-pw@127.0.0.1:{srv.port}", "--password-file", pwfile, "stats", "cq")
    ok(r.rc == 0, "the file replaces the URL's (wrong) password", r)
    r = run("--redis", f"redis://{USER}:@127.0.0.1:{srv.port}", "--password-file", userpwfile, "stats", "cq")
    ok(r.rc == 0, "with the URL's user: AUTH user and the file's password", r)
    r = run("--redis", base, "stats", "cq")
    ok(r.rc == 3 and "NOAUTH" in r.errtext, "no password anywhere: exit 3, NOAUTH", r)
    for path, mode in ((open_file, "640"), (others_file, "604")):
        r = run("--redis", base, "--password-file", path, "offer", "cq", "0", "never")
        ok(r.rc == 2 and f"mode {mode}" in r.errtext and "chmod 600" in r.errtext and r.errtext.count("\n") == 1,
           f"a password file of mode {mode}: exit 2, one line that says chmod 600", r)
        ok(PW not in r.errtext + r.text, f"mode {mode}: the password is not shown", r)
    r = run("--redis", base, "--password-file", os.path.join(tmp, "missing"), "stats", "cq")
    ok(r.rc == 2 and "cannot read the password file" in r.errtext, "a missing password file: exit 2", r)
    r = run("--redis", base, "--password-file", pwfile, "stats", "cq")
    ok(r.rc == 0 and "pending 0" in r.text, "nothing was offered by the refused runs", r)

    # What ps shows: the path, never the password.
    argv = [BIN, "--redis", base, "--password-file", pwfile, "take", "cq-ps", "--timeout", "20s"]
    bg = Bg(argv, name="delayq take cq-ps")
    up = wait_for(lambda: bg.running() and os.path.exists(f"/proc/{bg.pid}/cmdline"), 5)
    cmdline = open(f"/proc/{bg.pid}/cmdline", "rb").read() if up else b""
    environ = open(f"/proc/{bg.pid}/environ", "rb").read() if up else b""
    ok(up and pwfile.encode() in cmdline and PW.encode() not in cmdline,
       "a running take's argv (ps) holds the file's path, not the password", cmdline)
    ok(up and PW.encode() not in environ, "nor does its environment", None)
    r = run("--redis", base, "--password-file", pwfile, "offer", "cq-ps", "0", "for the waiting take")
    ok(wait_for(lambda: bg.count() >= 1, 10) and bg.wait(10) == 0,
       "the waiting take, authenticated by the file, gets the item and exits 0", bg.err)
    bg.stop()

    # ---------------------------------------------------------- 3. work --exec
    section("work --exec: no credentials for the commands unless --pass-credentials")
    url_pw = f"redis://:{urllib.parse.quote(PW, safe='')}@127.0.0.1:{srv.port}"
    keyfile = secret_file("keys", "")
    r = run("keygen")
    with open(keyfile, "w") as f:
        f.write(r.text)
    envfile = os.path.join(tmp, "env-plain")
    for i in range(2):
        run("offer", "wq", "0", f"item {i}", env={"DELAYQ_REDIS": url_pw, "DELAYQ_KEY_FILE": keyfile})
    seen = work_env(["work", "wq", "--exec", f"env >> {envfile}; echo done >> {envfile}"],
                    {"DELAYQ_REDIS": url_pw, "DELAYQ_PASSWORD_FILE": pwfile, "DELAYQ_KEY_FILE": keyfile},
                    envfile, 2)
    ours = [line for line in seen.splitlines() if line.startswith("DELAYQ_")]
    for var in CRED_VARS:
        ok(var not in seen, f"the commands' environment has no {var[:-1]}", ours)
    ok(urllib.parse.quote(PW, safe="") not in seen and PW not in seen, "nor the password in any form")
    ok("DELAYQ_ID=" in seen and "DELAYQ_TOKEN=" in seen, "but their own DELAYQ_ID and DELAYQ_TOKEN")

    section("work --pass-credentials: the worker's settings, enough to run delayq")
    passfile = os.path.join(tmp, "env-passed")
    run("offer", "wq", "0", "item 3", env={"DELAYQ_REDIS": url_pw})
    # The worker's URL has no password: the file gives it, and is passed on.
    cmd = (f"env | grep '^DELAYQ_' >> {passfile}; {BIN} stats wq > /dev/null && "
           f"echo child-connected >> {passfile}; echo done >> {passfile}")
    seen = work_env(["--redis", base, "work", "wq", "--pass-credentials", "--password-file", pwfile,
                     "--exec", cmd], {}, passfile, 1)
    ok("child-connected" in seen, "a command given them runs 'delayq stats' on the protected server", seen)
    ok(f"DELAYQ_REDIS={base}\n" in seen and f"DELAYQ_PASSWORD_FILE={pwfile}\n" in seen,
       "it got DELAYQ_REDIS and DELAYQ_PASSWORD_FILE: the worker's", seen)
    ok("DELAYQ_KEY_FILE=" not in seen, "and no key file, the worker having none", seen)

# ------------------------------------------------------------------ 2. sentinels
SPW = "s3nt#Pw@x"
spwfile = secret_file("spw", SPW)
section("--sentinel-password-file with a Sentinel that wants a password")
with topology.SentinelGroup(n_replicas=0, n_sentinels=1, sentinel_password=SPW) as g:
    ok(g.ready(), "the group is up")
    u = g.url()
    r = run("--redis", u, "--sentinel-password-file", spwfile, "offer", "sq", "0", "via the sentinel")
    ok(r.rc == 0, "--sentinel-password-file: the offer works", r)
    r = run("--redis", u, "stats", "sq", env={"DELAYQ_SENTINEL_PASSWORD_FILE": spwfile})
    ok(r.rc == 0 and "pending" in r.text, "$DELAYQ_SENTINEL_PASSWORD_FILE works", r)
    wrong = u.replace("#", "?sentinel_password=wrong#")
    r = run("--redis", wrong, "stats", "sq", "--sentinel-password-file", spwfile)
    ok(r.rc == 0, "the file replaces the URL's (wrong) sentinel_password", r)
    r = run("--redis", u, "stats", "sq")
    ok(r.rc == 3 and "NOAUTH" in r.errtext, "no sentinel password: exit 3, NOAUTH", r)
    envfile = os.path.join(tmp, "env-sentinel")
    seen = work_env(["work", "sq", "--exec", f"env >> {envfile}; echo done >> {envfile}"],
                    {"DELAYQ_REDIS": u, "DELAYQ_SENTINEL_PASSWORD_FILE": spwfile}, envfile, 1)
    ok("DELAYQ_SENTINEL_PASSWORD_FILE=" not in seen and "DELAYQ_REDIS=" not in seen and "DELAYQ_ID=" in seen,
       "work through the sentinel: its commands get no DELAYQ_SENTINEL_PASSWORD_FILE",
       [line for line in seen.splitlines() if line.startswith("DELAYQ_")])
    # A raw '#' in the sentinel password and the master forgotten: the
    # password's tail is taken for the master name, and never shown.
    head, tail = "Hd7#", "Tl4Wz"
    r = run("--redis", u.split("#")[0] + f"?sentinel_password={head}{tail}", "stats", "sq")
    ok(r.rc == 3 and tail not in r.errtext and "Hd7" not in r.errtext,
       "a raw '#' in sentinel_password: the tail taken for the master is not shown", r)
    note(r.errtext.strip())
r = run("--redis", "redis://127.0.0.1:1", "--sentinel-password-file", spwfile, "stats", "sq")
ok(r.rc == 2 and "not redis-sentinel://" in r.errtext, "--sentinel-password-file with redis://: exit 2", r)

# ------------------------------------------------------------------ 4. the sweep
section("the sweep: no password piece in any output")
HEAD, TAIL, MID = "Hd7Qx", "Tl4Wz", "Md2Kv"
P = topology.free_port()
P2 = topology.free_port()
S = topology.free_port()
H = f"127.0.0.1:{P}"
SH = f"127.0.0.1:{S}"
pw = HEAD + MID + TAIL
enc = "".join(f"%{b:02X}" for b in pw.encode())
FORMS = [
    f"redis://:{pw}@{H}",
    f"redis://{pw}@{H}",
    f"redis://user:{pw}@{H}/2",
    f"REDIS://:{pw}@{H}",
    f"redis://:{HEAD}@{TAIL}@{H}",
    f"redis://:{HEAD}#{TAIL}@{H}",
    f"redis://:{HEAD}:{TAIL}@{H}",
    f"redis://:{HEAD}%23{TAIL}@{H}",
    f"redis://:{enc}@{H}",
    f"redis://:{HEAD}%zz{TAIL}@{H}",
    f"redis://:{pw}@127.0.0.1:notaport",
    f"redis://:{pw}@",
    f"redis://:{pw}",
    f"redis://user:{pw}",
    f"redis://:{pw}@{H}?db=1",
    f"redis://:{pw}@{H}#frag",
    f"rediss://:{pw}@{H}",
    f"http://:{pw}@{H}",
    f"{pw}@{H}",
    f":{pw}@{H}",
    f"unix://:{pw}@/tmp/none.sock",
    f"redis://:{pw}@[::1",
    f"redis-sentinel://:{pw}@{SH}#mymaster",
    f"redis-sentinel://:{pw}@{SH}",
    f"redis-sentinel://:{HEAD}#{TAIL}",
    f"redis-sentinel://{SH}?sentinel_password={pw}#mymaster",
    f"redis-sentinel://{SH}?sentinel_password={HEAD}#{TAIL}",
    f"redis-sentinel://{SH}?sentinel_password={HEAD}#{MID}#{TAIL}",
    f"redis-sentinel://{SH}?sentinel_password={HEAD}&{TAIL}#mymaster",
    f"redis-sentinel://{SH}?sentinel_password={HEAD}@{TAIL}#mymaster",
    f"redis-sentinel://{SH}?sentinel_password={HEAD}&#{TAIL}",
    f"redis-sentinel://{SH}?sentinel_user=u&sentinel_password={pw}",
    f"redis-sentinel://{SH}?SENTINEL_PASSWORD={pw}#mymaster",
    f"redis-sentinel://{SH}?foo={pw}&sentinel_password={pw}#mymaster",
    f"redis-cluster://:{pw}@{H},127.0.0.1:{P2}",
    f"redis-cluster://:{pw}@{H}/3?sentinel_password={pw}",
]
COMMANDS = [
    ["offer", "q", "0", "x"], ["cancel", "q", "i1"], ["take", "q", "--timeout", "0"],
    ["schedule", "q", "--connect-wait", "300ms"],
    ["stats", "q"], ["ack", "q", "i1", "t1"], ["nack", "q", "i1", "t1"], ["extend", "q", "i1", "t1", "1s"],
    ["work", "q", "--exec", "true", "--connect-wait", "300ms"], ["dead", "q", "count"], ["config", "q"], ["acl", "q", "--user", "u"],
    ["keygen"], ["lookup", "q", "i1"], ["list", "q"], ["serve", "--listen", f"127.0.0.1:{P2}"],
    ["help", "stats"],
]
CLOSED = f"redis://127.0.0.1:{P}"


def placements(url, cmd):
    """(argv after the binary, DELAYQ_REDIS) for each way the URL may come."""
    return [
        (["--redis", url] + cmd, CLOSED),
        ([f"--redis={url}"] + cmd, CLOSED),
        (cmd + ["--redis", url], CLOSED),
        (cmd + [f"--redis={url}"], CLOSED),
        (cmd, url),
        ([f"--redis-url={url}"] + cmd, CLOSED),
        (["--redis-url", url] + cmd, CLOSED),
        (cmd + [f"--redis-url={url}"], CLOSED),
        (cmd + ["--redsi", url], CLOSED),
        (cmd + [url], CLOSED),
        ([url] + cmd, CLOSED),
    ]


PIECES = [HEAD, MID, TAIL] + ["".join(f"%{b:02X}" for b in s.encode()) for s in (HEAD, MID, TAIL)]
base_env = {k: v for k, v in os.environ.items() if not k.startswith("DELAYQ_")}


def one(argv, redis_url):
    e = dict(base_env, DELAYQ_REDIS=redis_url)
    t0 = time.monotonic()
    try:
        p = subprocess.run([BIN] + argv, stdin=subprocess.DEVNULL, capture_output=True, env=e, timeout=15 * SLOW)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as exc:
        out, rc = (exc.stdout or b"") + (exc.stderr or b""), None
    text = out.decode("utf-8", "replace")
    return argv, redis_url, rc, [x for x in PIECES if x in text], text, time.monotonic() - t0


# Every form with every command (the way the URL comes turns with each),
# and every form every way with stats.
jobs = []
for fi, url in enumerate(FORMS):
    for ci, cmd in enumerate(COMMANDS):
        ways = placements(url, cmd)
        jobs.append(ways[(fi + ci) % len(ways)])
    jobs.extend(placements(url, ["stats", "q"]))
t0 = time.monotonic()
leaks, hung, slowest = [], [], 0.0
with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
    for argv, ru, rc, found, text, secs in pool.map(lambda j: one(*j), jobs):
        slowest = max(slowest, secs)
        if found:
            leaks.append((argv, ru if ru != CLOSED else "", found, text[:300]))
        if rc is None:
            hung.append(argv)
took = time.monotonic() - t0
note(f"{len(jobs)} runs ({len(FORMS)} forms, {len(COMMANDS)} commands, 11 ways) in {took:.1f} s, "
     f"slowest {slowest:.2f} s")
ok(len(FORMS) >= 30 and len(jobs) >= 900, f"the sweep ran {len(jobs)} runs")
ok(not leaks, "no password piece on stdout or stderr", "\n".join(map(repr, leaks[:10])))
ok(not hung, "every run ended in time", hung[:5])
finish()
