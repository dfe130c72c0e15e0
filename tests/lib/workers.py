"""workers.py - helpers for the CLI tests of reliable delivery (tests/cli/
reliable.py, chaos.py): takes with a lease, `delayq work` processes, and the
log files their commands append to. Python 3 stdlib only; builds on dqtest.

A command given to `delayq work --exec` records each delivery by appending
one short line to a log file (opened with O_APPEND by the shell's >>, so a
line is one write and lines of concurrent commands never interleave):

    "<DELAYQ_ID> <DELAYQ_ATTEMPT>[ <more>]\n"

read_log() parses such a file. Everything here is bounded in time, and every
process started here is stopped by its pid (at the latest when the test
exits, through dqtest's atexit hook or the one below).
"""
import atexit
import json
import os
import shlex
import shutil
import signal
import tempfile

from dqtest import SLOW, Redis, RedisError, bg_dq, dq, ok, wait_for, zscore_due  # noqa: F401

_tmpdirs = []
_pids = []  # extra processes (a killed worker's commands) to stop at exit


def tmpdir():
    """A new private directory, removed when the test exits."""
    d = tempfile.mkdtemp(prefix="delayq-cli-")
    _tmpdirs.append(d)
    return d


def watch_pid(pid):
    """Makes sure pid (a process we caused, e.g. an orphaned command) is
    stopped with SIGKILL when the test exits, if it still runs."""
    _pids.append(pid)


def kill_pid(pid, sig=signal.SIGKILL):
    """Sends sig to pid; True if it was there."""
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def pid_alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _cleanup():
    for p in _pids:
        if pid_alive(p):
            kill_pid(p)
    for d in _tmpdirs:
        shutil.rmtree(d, ignore_errors=True)


atexit.register(_cleanup)


def q(s):
    """Shell-quotes s for a --exec command."""
    return shlex.quote(str(s))


def read_log(path):
    """The deliveries a log file records: a list of (id, attempt, rest) in
    file order, and the number of malformed lines."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return [], 0
    out, bad = [], 0
    for line in data.split(b"\n"):
        if not line:
            continue
        parts = line.decode("utf-8", "replace").split(" ")
        if len(parts) < 2 or not parts[0] or not parts[1].isdigit():
            bad += 1
            continue
        out.append((parts[0], int(parts[1]), parts[2:]))
    if data and not data.endswith(b"\n"):
        bad += 1  # a torn last line
    return out, bad


def log_count(path):
    """Number of complete lines in a log file (0 if there is none)."""
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def take_manual(queue, *args, timeout=30):
    """delayq take QUEUE --ack manual --json ARGS...: (Result, [messages])."""
    r = dq("take", queue, "--ack", "manual", "--json", *args, timeout=timeout)
    msgs = []
    for line in r.out.split(b"\n"):
        if line:
            try:
                msgs.append(json.loads(line))
            except ValueError as exc:
                ok(False, "take --ack manual --json prints JSON lines", f"{exc}: {line!r}")
    return r, msgs


def work(queue, cmd, *args):
    """Starts delayq work QUEUE --exec CMD ARGS... in the background (a
    dqtest.Bg: stopped by pid at exit)."""
    return bg_dq("work", queue, "--exec", cmd, *args)


def stats_json(queue):
    """stats --json as a dict, or None (no check recorded: for polling)."""
    r = dq("stats", queue, "--json")
    if r.rc != 0:
        return None
    try:
        return json.loads(r.out)
    except ValueError:
        return None


def drained(queue):
    """True when queue has nothing pending, ready or in flight."""
    s = stats_json(queue)
    return s is not None and s.get("pending") == 0 and s.get("ready") == 0 and s.get("inflight") == 0


def dead_count(queue):
    """delayq dead QUEUE count as an int, or None if it fails."""
    r = dq("dead", queue, "count")
    try:
        return int(r.out) if r.rc == 0 else None
    except ValueError:
        return None


def lease_end(queue, id_):
    """The lease end (server ms) of an id in flight, as `delayq lookup`
    reports it; None if it is not in flight. (A take leaves the id index as
    it was: the lease end is in the lease record the registry names.)"""
    r = dq("lookup", queue, id_, "--json")
    try:
        info = json.loads(r.out) if r.rc == 0 else {}
    except ValueError:
        return None
    return info.get("lease_end_ms") if info.get("state") == "inflight" else None
