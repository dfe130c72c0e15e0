"""dqtest.py - helpers for the CLI tests in tests/cli (python3 stdlib only).

A CLI test is a plain script: it imports this module, prints each thing it
checks ("ok   ..." / "FAIL ..."), and ends with finish(), which exits 1 if any
check failed. tests/run.sh provides the environment:

  DQ_BIN              the delayq binary under test
  DQ_TEST_REDIS       redis://127.0.0.1:PORT of the private redis-server
  DQ_TEST_REDIS_PORT, DQ_TEST_REDIS_DIR, DQ_TEST_LIB, DQ_TEST_SLOW
  DQ_TEST_WRAPPER     (make valgrind) the command the calls made with
                      wrap=True run under (tests/cli/ops/leaks.py)

Everything here is bounded in time: every subprocess gets a timeout, every
wait has a deadline, every background process is stopped by its pid (at the
latest when the test exits).
"""
import atexit
import base64
import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

# run.sh starts tests as background jobs, which inherit SIGINT ignored; give
# delayq processes the default disposition, as a shell user's would have.
signal.signal(signal.SIGINT, signal.SIG_DFL)
sys.stdout.reconfigure(line_buffering=True)


def _env(name):
    v = os.environ.get(name)
    if not v:
        print(f"dqtest: {name} is not set: run this through tests/run.sh", file=sys.stderr)
        sys.exit(2)
    return v


BIN = _env("DQ_BIN")
if not os.access(BIN, os.X_OK):
    print(f"dqtest: {BIN} is not an executable: build it first (make all)", file=sys.stderr)
    sys.exit(1)
URL = _env("DQ_TEST_REDIS")
PORT = int(_env("DQ_TEST_REDIS_PORT"))
RDIR = _env("DQ_TEST_REDIS_DIR")
LIB = os.environ.get("DQ_TEST_LIB") or os.path.dirname(os.path.abspath(__file__))
SLOW = int(os.environ.get("DQ_TEST_SLOW", "1") or "1")
# Only the calls that ask for it (wrap=True) run under the wrapper: the
# other tests time what they run, which valgrind slows some 30 times.
WRAPPER = os.environ.get("DQ_TEST_WRAPPER", "").split()

# ------------------------------------------------------------------ checks

_failures = []
_checks = 0


def section(title):
    print(f"-- {title}")


def ok(cond, what, detail=None):
    """Records one check; returns cond so callers can skip dependent checks."""
    global _checks
    _checks += 1
    if cond:
        print(f"ok   {what}")
    else:
        print(f"FAIL {what}" + (f": {detail}" if detail is not None else ""))
        _failures.append(what)
    return bool(cond)


def eq(got, want, what):
    return ok(got == want, what, f"got {_short(got)!s}, want {_short(want)!s}")


def note(text):
    print(f"     {text}")


def _short(v, n=300):
    s = repr(v)
    return s if len(s) <= n else s[:n] + f"... ({len(s)} chars)"


SKIPPED = 77  # the exit code tests/run.sh counts as skipped


def finish(skip=None):
    """Exits 1 if a check failed; else 0, or SKIPPED when skip (why the
    test could not check what it is for here) is given."""
    _stop_all()
    if _failures:
        print(f"{len(_failures)} of {_checks} checks failed")
        sys.exit(1)
    print(f"all {_checks} checks passed")
    if skip:
        print(f"SKIP {skip}")
        sys.exit(SKIPPED)
    sys.exit(0)


# ------------------------------------------------------------------ running delayq


class Result:
    def __init__(self, args, rc, out, err, secs):
        self.args, self.rc, self.out, self.err, self.secs = args, rc, out, err, secs

    @property
    def text(self):
        return self.out.decode("utf-8", "replace")

    @property
    def errtext(self):
        return self.err.decode("utf-8", "replace")

    def json_lines(self):
        return parse_json_lines(self.out)

    def __repr__(self):
        return (f"<delayq {' '.join(map(str, self.args))[:200]}: rc={self.rc} "
                f"out={_short(self.out, 200)} err={_short(self.err, 300)} {self.secs:.2f}s>")


def dq(*args, stdin=None, timeout=30, redis=True, env=None, wrap=False):
    """Runs delayq [--redis URL] args..., stdin bytes (or None: /dev/null);
    under DQ_TEST_WRAPPER if wrap. Returns a Result; rc is None if it had to
    be killed at the timeout."""
    argv = ((WRAPPER if wrap else []) + [BIN] + (["--redis", URL] if redis else []) +
            [str(a) if not isinstance(a, bytes) else a for a in args])
    e = dict(os.environ)
    e["DELAYQ_REDIS"] = URL
    if env:
        e.update(env)
        for k, v in env.items():
            if v is None:
                del e[k]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e)
    try:
        out, err = p.communicate(stdin, timeout=timeout * SLOW)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        rc = None
    return Result(args, rc, out, err, time.monotonic() - t0)


def one_line(b):
    """True if b is exactly one non-empty line ending in a newline."""
    return len(b) > 1 and b.endswith(b"\n") and b.count(b"\n") == 1 and b.strip() != b""


def parse_json_lines(data):
    """Parses one JSON object per line; a line that does not parse is a failed check."""
    out = []
    for i, line in enumerate(data.split(b"\n")):
        if not line:
            continue
        try:
            out.append(json.loads(line.decode("utf-8")))
        except (ValueError, UnicodeDecodeError) as exc:
            ok(False, f"output line {i} is JSON", f"{exc}: {_short(line)}")
    return out


def msg_payload(m):
    """The payload bytes of a take --json object (payload or payload_base64)."""
    if "payload_base64" in m:
        return base64.b64decode(m["payload_base64"], validate=True)
    return m["payload"].encode("utf-8")


# ------------------------------------------------------------------ background processes

_procs = []


class Bg:
    """A background delayq (or other) process whose stdout lines are collected
    with their local receive time (time.time()), as they arrive."""

    def __init__(self, argv, stdin=None, name=None, env=None):
        """env: variables added to this process's environment for the child."""
        self.name = name or " ".join(map(str, argv[1:4]))
        self.lines = []  # (recv_epoch_s, bytes without newline)
        self.err = b""
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=dict(os.environ, **env) if env else None)
        self.pid = self.proc.pid
        self.started = time.time()
        _procs.append(self)
        if stdin is not None:
            threading.Thread(target=self._feed, args=(stdin,), daemon=True).start()
        self._tout = threading.Thread(target=self._read_out, daemon=True)
        self._terr = threading.Thread(target=self._read_err, daemon=True)
        self._tout.start()
        self._terr.start()

    def _feed(self, data):
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.close()
        except OSError:
            pass

    def _read_out(self):
        buf = b""
        f = self.proc.stdout
        while True:
            chunk = os.read(f.fileno(), 65536)
            if not chunk:
                break
            now = time.time()
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                with self._lock:
                    self.lines.append((now, line))
        if buf:
            with self._lock:
                self.lines.append((time.time(), buf))

    def _read_err(self):
        self.err = self.proc.stderr.read()

    def count(self):
        with self._lock:
            return len(self.lines)

    def snapshot(self):
        with self._lock:
            return list(self.lines)

    def running(self):
        return self.proc.poll() is None

    def wait(self, timeout):
        """Waits for a normal exit; returns the exit code or None if still running."""
        try:
            rc = self.proc.wait(timeout=timeout * SLOW)
        except subprocess.TimeoutExpired:
            return None
        self._tout.join(5)
        self._terr.join(5)
        return rc

    def stop(self, sig=signal.SIGTERM, timeout=10):
        """Sends sig to the pid, waits up to timeout s, then SIGKILL.
        Returns the exit code (negative: killed by that signal)."""
        if self.proc.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=timeout * SLOW)
            except subprocess.TimeoutExpired:
                print(f"     {self.name} (pid {self.pid}) ignored signal {sig} for {timeout} s: SIGKILL")
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait()
        self._tout.join(5)
        self._terr.join(5)
        return self.proc.returncode


def bg_dq(*args, stdin=None, wrap=False, env=None):
    return Bg((WRAPPER if wrap else []) + [BIN, "--redis", URL] + [str(a) for a in args], stdin=stdin,
              name="delayq " + " ".join(str(a) for a in args[:3]), env=env)


def _stop_all():
    for p in _procs:
        if p.proc.poll() is None:
            p.stop(timeout=5)


atexit.register(_stop_all)


def wait_for(pred, timeout, interval=0.02):
    """Polls pred() until it is true or timeout seconds (scaled) pass."""
    end = time.monotonic() + timeout * SLOW
    while True:
        if pred():
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(interval)


# ------------------------------------------------------------------ Redis (a tiny RESP client)


class RedisError(Exception):
    pass


class Redis:
    def __init__(self, port=None, timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", port or PORT), timeout=timeout)
        self.f = self.sock.makefile("rb")

    def close(self):
        try:
            self.f.close()
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def cmd(self, *args):
        parts = [b"*%d\r\n" % len(args)]
        for a in args:
            if not isinstance(a, bytes):
                a = str(a).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(parts))
        return self._read()

    def _read(self):
        line = self.f.readline()
        if not line:
            raise RedisError("connection closed")
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise RedisError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            return data[:-2]
        if t == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self._read() for _ in range(n)]
        raise RedisError(f"bad reply {line!r}")


def redis(*args):
    """One command on a fresh connection; raises RedisError on an error reply."""
    with Redis() as r:
        return r.cmd(*args)


def command_calls(name):
    """How many times the server has run command name (lower case, e.g.
    "fcall") since its start or CONFIG RESETSTAT, by INFO commandstats."""
    for line in redis("INFO", "commandstats").decode().splitlines():
        if line.startswith(f"cmdstat_{name}:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def server_ms():
    """The Redis server's clock, epoch ms (what due_ms/ready_ms use)."""
    s, us = redis("TIME")
    return int(s) * 1000 + int(us) // 1000


def id_index_key(queue, id_):
    """The id index bucket of an id, as lua/lib/50_idindex.lua's id_key computes it."""
    h = int(hashlib.sha1(id_.encode() if isinstance(id_, str) else id_).hexdigest()[:4], 16) % 32768
    return f"dq:{{{queue}}}:i:{h}"


def eval_script(name):
    """lua/NAME.lua as the library's EVAL fallback sends it: the definitions
    of the common code (lua/lib/*.lua joined in name order) the script uses,
    picked by tools/lua-trim.awk as tools/embed-lua.sh picks them, then the
    script."""
    root = os.environ.get("DQ_TEST_ROOT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

    def read(*parts):
        with open(os.path.join(root, "lua", *parts), "rb") as f:
            return f.read()
    lib = sorted(n for n in os.listdir(os.path.join(root, "lua", "lib")) if n.endswith(".lua"))
    common = b"".join(read("lib", n) for n in lib)
    with tempfile.NamedTemporaryFile(suffix=".lua") as f:
        f.write(common)
        f.flush()
        runs = subprocess.run(["awk", "-f", os.path.join(root, "tools", "lua-trim.awk"), f.name,
                               os.path.join(root, "lua", name + ".lua")], capture_output=True, check=True,
                              timeout=60, env=dict(os.environ, LC_ALL="C")).stdout.split()
    return b"".join(common[int(o):int(o) + int(n)] for o, n in zip(runs[0::2], runs[1::2])) + read(name + ".lua")


def slot_records(queue):
    """How many records the queue's slots hold (pending and in flight)."""
    names = redis("ZRANGE", f"dq:{{{queue}}}:zs", 0, -1)
    return sum(redis("ZCARD", f"dq:{{{queue}}}:q:{n.decode()}") for n in names)


def near_records(queue):
    """How many live entries (not tombstones) the queue's near lists hold
    (lua/lib/67_near.lua: items offered due within 40 s)."""
    keys = redis("KEYS", f"dq:{{{queue}}}:m:*")
    return sum(sum(1 for e in redis("LRANGE", k, 0, -1) if e) for k in keys)


def offer_rows(queue, rows):
    """Offers rows of (delay as `offer` takes it, id, payload) to queue as
    one `offer --batch`, a failed check unless it accepted them all."""
    text = "".join(f"{d}\t{i}\t{p}\n" for d, i, p in rows).encode()
    r = dq("offer", queue, "--batch", "-", stdin=text)
    eq((r.rc, r.out), (0, b"%d\n" % len(rows)), f"offer --batch of {len(rows)}")


def list_pages(queue, limit, what, pages_max=400):
    """Every page of `delayq list QUEUE --limit LIMIT --json` (pending), each
    from the cursor the one before printed: (items, pages, short), short
    the pages short of limit that had a next one. A page that fails is a
    failed check naming what, and ends the walk."""
    items, cursor, pages, short = [], None, 0, 0
    for _ in range(pages_max):
        r = dq("list", queue, "--limit", str(limit), "--json", *(["--cursor", cursor] if cursor else []))
        if r.rc != 0:
            ok(False, f"{what}: list a page", r)
            break
        items += r.json_lines()
        pages += 1
        err = r.err.decode()
        cursor = err.split("next: ")[1].strip() if "next: " in err else None
        short += bool(cursor) and len(r.json_lines()) < limit
        if not cursor:
            break
    return items, pages, short


def serve_started(queue, token):
    """`delayq serve` of queue on a free 127.0.0.1 port with an admin
    token file holding token: (process, port), a failed check unless it
    answers within 10 s. The caller stops the process."""
    tokfile = private_file(tempfile.mkdtemp(prefix="delayq-serve."), "token", token + "\n")
    port = closed_port()
    srv = bg_dq("serve", "--listen", f"127.0.0.1:{port}", "--token-file", tokfile, queue)
    ok(wait_for(lambda: http_call(port, "GET", "/api/queues")[0] == 200, 10), "serve answers")
    return srv, port


def api_pages(port, queue, limit, token, pages_max=200):
    """Every page of serve's pending items of queue at limit
    (/api/queues/Q/items), cursor to cursor: the items. A page that fails
    is a failed check, and ends the walk."""
    got, cursor = [], None
    for _ in range(pages_max):
        code, body = http_call(port, "GET", f"/api/queues/{queue}/items?state=pending&limit={limit}" +
                               (f"&cursor={cursor}" if cursor else ""), token=token)
        if code != 200:
            ok(False, f"GET a page of {limit} items", (code, body))
            break
        got += body["items"]
        cursor = body["next_cursor"]
        if not cursor:
            break
    return got


def id_index_size(queue):
    """How many ids the queue's id index holds (pending, ready, in flight)."""
    return sum(redis("HLEN", k) for k in redis("KEYS", f"dq:{{{queue}}}:i:*"))


WHEEL_MS = 4096  # lua/lib/65_wheel.lua: a bucket k holds due times [k * WHEEL_MS, (k + 1) * WHEEL_MS)
WHEEL_POS = 2097152  # lua/lib/65_wheel.lua: an index entry -(k * WHEEL_POS + pos)


def wheel_ref(k, pos):
    """The id index entry of the item at pos of timing wheel bucket k."""
    return f"-{k * WHEEL_POS + pos}" if pos < WHEEL_POS else f"b{k}.{pos}"


def wheel_ref_of(s):
    """(bucket k, pos) of an id index entry naming a wheel entry, else None."""
    if isinstance(s, bytes):
        s = s.decode()
    if s is None:
        return None
    if s.startswith("-") and s[1:].isdigit() and len(s) <= 17:
        return divmod(int(s[1:]), WHEEL_POS)
    if s.startswith("b") and "." in s:
        k, pos = s[1:].split(".", 1)
        return int(k), int(pos)
    return None


def near_ref_of(s):
    """(due ms, pos) of an id index entry naming a near list entry
    (lua/lib/67_near.lua: "-8" + 13-digit due + 5-digit pos, or
    "m<due>.<pos>"), else None."""
    if isinstance(s, bytes):
        s = s.decode()
    if s is None:
        return None
    if len(s) == 20 and s.startswith("-8") and s[1:].isdigit():
        return int(s[2:15]), int(s[15:])
    if s.startswith("m") and "." in s:
        d, pos = s[1:].split(".", 1)
        return int(d), int(pos)
    return None


def zscore_due(queue, id_):
    """The due ms (or lease end) of an id from its score in the id index
    (score = due*2048 + ordinal), or from the timing wheel or near list
    entry its index entry names (wheel_ref, near_ref); None if the queue
    does not hold it."""
    s = redis("HGET", id_index_key(queue, id_), id_)
    near = near_ref_of(s)
    if near is not None:
        d, pos = near
        e = redis("LINDEX", f"dq:{{{queue}}}:m:{d}", pos)
        return d if e else None
    ref = wheel_ref_of(s)
    if ref is not None:
        k, pos = ref
        e = redis("LINDEX", f"dq:{{{queue}}}:b:{k}", pos)
        return None if not e else k * WHEEL_MS + int(e.split(b"|", 1)[0])
    return None if s is None else int(s) // 2048


def redis_stop():
    """Stops the suite's redis-server by pid (SIGTERM) and waits until it is down."""
    r = subprocess.run(["sh", os.path.join(LIB, "redis.sh"), "stop"], timeout=30)
    return r.returncode == 0


def redis_start():
    """Starts it again on the same port and dir (AOF kept); waits for PING."""
    r = subprocess.run(["sh", os.path.join(LIB, "redis.sh"), "start"], timeout=30,
                       stdout=subprocess.DEVNULL)
    return r.returncode == 0


def redis_pid():
    r = subprocess.run(["sh", os.path.join(LIB, "redis.sh"), "pid"], capture_output=True, timeout=10)
    return int(r.stdout) if r.returncode == 0 and r.stdout.strip() else None


def closed_port():
    """A 127.0.0.1 port nobody listens on (bound and released a moment ago)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http_call(port, method, path, body=None, token=None, raw=None, host=None, timeout=30):
    """(status, parsed JSON or bytes) of one request to serve on
    127.0.0.1:port: body as JSON (or raw bytes), token as its Bearer, host as
    its Host header; (None, why) when the connection fails."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout * SLOW)
    hdr = {"Content-Type": "application/json"}
    if token:
        hdr["Authorization"] = f"Bearer {token}"
    if host:
        hdr["Host"] = host
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    try:
        c.request(method, path, body=data, headers=hdr)
        r = c.getresponse()
        out = r.read()
        st = r.status
    except OSError as e:
        return None, str(e)
    finally:
        c.close()
    try:
        return st, json.loads(out)
    except ValueError:
        return st, out


def private_file(directory, name, text):
    """Writes text to directory/name, readable by its owner only (what a
    token or key file must be); returns the path."""
    path = os.path.join(directory, name)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(text)
    return path


def percentile(values, p):
    if not values:
        return None
    v = sorted(values)
    k = min(len(v) - 1, max(0, int(round(p / 100.0 * (len(v) - 1)))))
    return v[k]


def stats(queue):
    """delayq stats QUEUE --json as a dict (None, with a failed check, if it fails).
    A queue never used (exit 1: no keys, not in the registry) holds nothing:
    its counts are all 0 (next_due_in_ms -1)."""
    r = dq("stats", queue, "--json")
    if r.rc == 1 and b"no queue" in r.err:
        return {"pending": 0, "ready": 0, "next_due_in_ms": -1, "set_aside": 0, "inflight": 0, "dead": 0,
                "schedulers": 0, "overdue_ms": 0}
    if not ok(r.rc == 0, f"stats {queue} --json exits 0", r):
        return None
    try:
        return json.loads(r.out)
    except ValueError as exc:
        ok(False, f"stats {queue} --json is JSON", f"{exc}: {r.out!r}")
        return None
