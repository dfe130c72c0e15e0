"""bench/wheel_ir.py BUILD_DIR REF_BUILD_DIR [N] - issue 42's ratio in
instructions, with the cost per item taken apart, before and after the
timing wheel (phase wheel of bench/run.sh).

One redis-server under valgrind's callgrind on a free 127.0.0.1 port of its
own, stopped by its pid. For each build ("before": REF_BUILD_DIR/delayq,
built from commit 319241f, main before the wheel; "after":
BUILD_DIR/delayq) and each kind of delays (one delay, 1 h; delays 1 min to
1 h; delays 0 to 10 s: N lines of DELAY<TAB><TAB>PAYLOAD, 16-byte payloads,
generated ids, the same file for both builds), on an empty database
(FLUSHALL, then a warm-up offer to another queue so the build's function
library is loaded before anything is counted):
  offer     `delayq offer q --batch FILE`, the server's instructions from a
            `callgrind_control -z` before it to a `-d` after it, per item;
  delivery  the queue's clock mark (dq:{q}:n clock) pushed past every due
            time (a queue's time is max(TIME, mark), lua/lib/20_counters.lua),
            then `delayq schedule q` until the queue has no pending item,
            stopped by its pid: the transfers' instructions (after the
            wheel, with its cascade) per item moved;
  bytes     after the offers: INFO used_memory (less client buffers) less
            before them, and the MEMORY USAGE of the queue's keys, per item;
  by hand   the same offers again, then the transfer function called as a
            scheduler calls it but with 10 s a call, not 2 ms (callgrind
            slows the server some 50 times, so a scheduler's calls move
            fewer items each than on a bare server): per item moved.
Prints the exact commands, a table of the figures with each kind's ratio to
its build's one delay and a line per kind after/before, then each step taken
apart: the scripts, the commands they called, Lua around them, Lua's numbers
printed, and the commands of most instructions with their calls per item
(INFO commandstats). The whole server is counted (its cron at hz 10 and the
pending polls, one HGET on one connection every 0.25 s, included: about a
hundred instructions an item at most). An item with a delay of 0 is ready
at its offer: the table says how many the scheduler moved. With
DQ_CALLGRIND_KEEP=1 the run's directory stays, with every step's dump
(cg.BUILD.KIND.STEP) for callgrind_annotate; DQ_WHEEL_KINDS=1 (a comma
list of 0, 1, 2) runs only those kinds. About 4 minutes at N = 20,000.
"""
import glob
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
import topology  # noqa: E402

Q = "q"
P = f"dq:{{{Q}}}:"
KINDS = (("one delay 1 h", lambda rnd: 3600000),
         ("1 min .. 1 h", lambda rnd: rnd.randint(60000, 3600000)),
         ("0 .. 10 s", lambda rnd: rnd.randint(0, 10000)))
SEED = 42
# DQ_WHEEL_KINDS=1,2: only these kinds (0: one delay, 1: 1 min .. 1 h,
# 2: 0 .. 10 s), e.g. for one kind at a larger N.
PICK = sorted({int(x) for x in os.environ.get("DQ_WHEEL_KINDS", "0,1,2").split(",") if x.strip()} & {0, 1, 2})
STEP_S = 300      # the most one offer or one delivery may take
POLL_S = 0.25     # between two looks at the pending count


class Conn:
    """One connection to the server for the whole run (a new connection
    per command would be counted each time)."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.f = self.sock.makefile("rb")

    def __call__(self, *args):
        self.sock.sendall(topology._encode(args))
        return topology._read(self.f)

    def pipeline(self, commands):
        """The replies of commands, sent in one write."""
        self.sock.sendall(b"".join(topology._encode(c) for c in commands))
        return [topology._read(self.f) for _ in commands]

    def close(self):
        self.f.close()
        self.sock.close()


def say(text):
    print(text, flush=True)


def write_batches(tmp, n):
    """One file per kind, the same seed for each, so both builds offer the
    very same lines."""
    paths = []
    for k, (_, delay) in enumerate(KINDS):
        rnd = random.Random(SEED + k)
        path = os.path.join(tmp, f"batch{k}.txt")
        with open(path, "w") as f:
            f.write("".join(f"{delay(rnd)}ms\t\tp{i:015d}\n" for i in range(n)))
        paths.append(path)
    return paths


class Callgrind:
    """The server under callgrind: zero its counts, dump them, read the
    dump's total."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.out = os.path.join(tmp, "cg.out")
        self.port = topology.free_port()
        self.argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={self.out}",
                     "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", tmp,
                     "--daemonize", "no", "--save", "", "--appendonly", "no",
                     # Under callgrind every command is slow: the slow log's
                     # copies of their arguments would count as the queue's bytes.
                     "--slowlog-log-slower-than", "-1"]
        self.log = open(os.path.join(tmp, "callgrind.log"), "w")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)

    def up(self):
        return topology.wait_until(lambda: self.proc.poll() is None and
                                   topology.try_call(self.port, "PING") == "PONG", 120, 0.2)

    def control(self, flag):
        subprocess.run(["callgrind_control", flag, str(self.proc.pid)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True, timeout=120)

    def zero(self):
        self.control("-z")

    def dump(self, keep_as):
        """Dumps the counts since the last zero into the file keep_as: (their
        total, the inclusive Ir of each function)."""
        before = set(glob.glob(self.out + ".*"))
        self.control("-d")
        new = []
        for _ in range(100):  # the dump is written before callgrind_control returns; be sure
            new = sorted(set(glob.glob(self.out + ".*")) - before)
            if new:
                break
            time.sleep(0.1)
        if not new:
            raise SystemExit("wheel_ir.py: callgrind wrote no dump")
        os.replace(new[-1], keep_as)
        total = None
        with open(keep_as) as f:
            for line in f:
                if line.startswith(("summary:", "totals:")):
                    total = int(line.split()[1])
                    break
        if total is None:
            raise SystemExit(f"wheel_ir.py: no total in {keep_as}")
        return total, inclusive(keep_as)

    def stop(self):
        stop_pid(self.proc, 30)
        self.log.close()


def stop_pid(proc, wait_s):
    """SIGTERM, then SIGKILL after wait_s seconds."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


def inclusive(path):
    """The inclusive instructions of each function in a callgrind dump, by
    name (callgrind_annotate's; a recursive call's second level is named
    NAME'2: call'2 is a command a script called)."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True, timeout=120,
                         universal_newlines=True).stdout
    funcs = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S+) \[", line)
        if m:
            name = m.group(2).rsplit(":", 1)[-1]
            funcs[name] = max(funcs.get(name, 0), int(m.group(1).replace(",", "")))
    return funcs


def used_memory(conn):
    """INFO's used_memory less mem_clients_normal (client buffers, which
    Redis grows and shrinks by their use, are no part of the data), once
    the server has let go of every client but conn (a CLI's connection is
    freed when the server next reads it, which under callgrind can come
    after the CLI's exit)."""
    def alone():
        return "connected_clients:1\r" in conn("INFO", "clients")
    if not topology.wait_until(alone, 30, 0.1):
        raise SystemExit("wheel_ir.py: a client stays connected")
    info = dict(line.split(":", 1) for line in conn("INFO", "memory").splitlines() if ":" in line)
    return int(info["used_memory"]) - int(info["mem_clients_normal"])


def empty(conn, cli, url):
    """FLUSHALL, then a warm-up offer to another queue (which loads the
    build's function library): the used memory then."""
    conn("FLUSHALL")
    subprocess.run([cli, "--redis", url, "offer", "warmup", "1h", "x"], stdout=subprocess.DEVNULL,
                   check=True, timeout=STEP_S)
    return used_memory(conn)


def command_calls(conn):
    """INFO commandstats' calls, by command (lower case, as Redis names it)."""
    calls = {}
    for line in conn("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            calls[name] = int(rest.split("calls=")[1].split(",")[0])
    return calls


def pending(conn):
    return int(conn("HGET", P + "n", "pending") or 0)


class Step:
    """One counted step: its instructions, taken apart, per item."""

    SCRIPTS = ("fcall", "fcall_ro", "eval", "evalsha")
    HANDLER = {"evalsha": "evalShaCommand", "fcall_ro": "fcallroCommand"}

    def __init__(self, ir, funcs, calls, items, polls=0):
        self.ir, self.funcs, self.items = ir, funcs, max(items, 1)
        calls = {c: v for c, v in calls.items() if c not in ("config|resetstat", "info")}
        if polls:
            calls["hget"] = calls.get("hget", 0) - polls
        self.calls = calls

    def per(self, x):
        return x / self.items

    def handler(self, cmd):
        return self.funcs.get(self.HANDLER.get(cmd, cmd.replace("|", "") + "Command"))

    def scripts(self):
        return sum(self.handler(c) or 0 for c in self.SCRIPTS)

    def script_calls(self):
        return sum(self.calls.get(c, 0) for c in self.SCRIPTS)

    def commands(self):
        """The commands the scripts called, with Redis's call() around each."""
        return self.funcs.get("call'2", 0)

    def top(self, n):
        """The n commands (not the scripts) of most instructions: (NAME,
        Ir/item or None, calls/item)."""
        rows = [(c.upper(), self.handler(c), v) for c, v in self.calls.items() if c not in self.SCRIPTS and v > 0]
        rows.sort(key=lambda r: -(r[1] or 0))
        return [(c, None if ir is None else self.per(ir), self.per(v)) for c, ir, v in rows[:n]]


def key_bytes(conn):
    """MEMORY USAGE (every element) of each of the queue's keys, summed:
    the queue's own bytes, whatever else the server allocates (the one
    figure of the two that no first fill or server cache moves)."""
    total, cursor = 0, "0"
    for _ in range(100000):
        cursor, keys = conn("SCAN", cursor, "MATCH", P + "*", "COUNT", 1000)
        if keys:
            total += sum(r or 0 for r in conn.pipeline([("MEMORY", "USAGE", k, "SAMPLES", 0) for k in keys]))
        if cursor == "0":
            return total
    raise SystemExit("wheel_ir.py: SCAN did not end")


def offer(cg, conn, cli, url, path, n, keep_as):
    """On an empty database, the counted offers: (Step, used memory after
    less before, the queue's keys' bytes)."""
    mem0 = empty(conn, cli, url)
    conn("CONFIG", "RESETSTAT")
    cg.zero()
    subprocess.run([cli, "--redis", url, "offer", Q, "--batch", path], stdout=subprocess.DEVNULL,
                   check=True, timeout=STEP_S)
    ir, funcs = cg.dump(keep_as)
    return Step(ir, funcs, command_calls(conn), n), used_memory(conn) - mem0, key_bytes(conn)


def deliver(cg, conn, cli, url, n, keep_as):
    """The clock mark past every due time, then a scheduler until nothing is
    pending: (Step per item moved, items moved)."""
    before = pending(conn)
    s, us = conn("TIME")
    mark = int(s) * 1000 + int(us) // 1000 + 3600000 + 60000
    conn("HSET", P + "n", "clock", mark)
    conn("CONFIG", "RESETSTAT")
    cg.zero()
    sched = subprocess.Popen([cli, "--redis", url, "schedule", Q], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    polls = 0
    try:
        end = time.monotonic() + STEP_S
        left = before
        while left and time.monotonic() < end and sched.poll() is None:
            time.sleep(POLL_S)
            left = pending(conn)
            polls += 1
    finally:
        stop_pid(sched, 30)
    ir, funcs = cg.dump(keep_as)
    if left:
        err = sched.stderr.read().decode(errors="replace")[-500:]
        raise SystemExit(f"wheel_ir.py: {left} items still pending after {STEP_S} s of schedule: {err}")
    sched.stderr.close()
    step = Step(ir, funcs, command_calls(conn), before, polls)
    ready = conn("LLEN", P + "r")
    if ready != n:
        raise SystemExit(f"wheel_ir.py: {ready} items ready, {n} offered")
    return step, before


def transfer_fn(cli):
    """The transfer function's name in the build of the CLI cli."""
    path = os.path.join(os.path.dirname(cli), "gen", "scripts.h")
    with open(path) as f:
        for line in f:
            if "DQ_LUA_transfer_FN" in line:
                return line.split('"')[1]
    raise SystemExit(f"wheel_ir.py: no transfer function name in {path}")


def transfer_by_hand(cg, conn, fn, n, keep_as):
    """The clock mark past every due time, then the transfer function as a
    scheduler calls it (its 7 keys; up to 1,000 items a call, as the
    library's default) but with a time budget of 10 s a call, not 2 ms:
    under callgrind 2 ms is a fiftieth of what it is on the bare server, so
    a scheduler's calls move fewer items each than they would, and each
    call's fixed work weighs more. Called until nothing is pending: the
    Step, per item moved."""
    before = pending(conn)
    s, us = conn("TIME")
    conn("HSET", P + "n", "clock", int(s) * 1000 + int(us) // 1000 + 3600000 + 60000)
    keys = [P + "zs", P + "r", P + "x", P + "n", P + "d", P + "dz", P + "s"]
    conn("CONFIG", "RESETSTAT")
    cg.zero()
    end = time.monotonic() + STEP_S
    left, polls = before, 0
    for _ in range(4 * n // 1000 + 100):
        if not left or time.monotonic() > end:
            break
        conn("FCALL", fn, len(keys), *keys, P, P + "w", 1000, 10000000, 0, 1)
        left = pending(conn)
        polls += 1
    ir, funcs = cg.dump(keep_as)
    if left:
        raise SystemExit(f"wheel_ir.py: {left} items still pending after the transfers by hand")
    return Step(ir, funcs, command_calls(conn), before, polls)


def main():
    if len(sys.argv) not in (3, 4):
        raise SystemExit("usage: bench/wheel_ir.py BUILD_DIR REF_BUILD_DIR [N]")
    builds = (("before", os.path.abspath(os.path.join(sys.argv[2], "delayq"))),
              ("after", os.path.abspath(os.path.join(sys.argv[1], "delayq"))))
    n = int(sys.argv[3]) if len(sys.argv) == 4 else 20000
    for _, cli in builds:
        if not os.access(cli, os.X_OK):
            raise SystemExit(f"wheel_ir.py: {cli} not built")
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate", "redis-server"):
        if shutil.which(tool) is None:
            raise SystemExit(f"wheel_ir.py: {tool} not found")
    keep = bool(os.environ.get("DQ_CALLGRIND_KEEP"))
    # run.sh's timeout ends the run with SIGTERM: stop the server and
    # remove the directory on the way out all the same.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = tempfile.mkdtemp(prefix="dq-wheel-ir.", dir=os.environ.get("TMPDIR", "/tmp"))
    paths = write_batches(tmp, n)
    cg = Callgrind(tmp)
    conn = None
    try:
        if not cg.up():
            with open(os.path.join(tmp, "callgrind.log")) as f:
                raise SystemExit("wheel_ir.py: redis-server under callgrind did not start:\n" + f.read()[-1000:])
        conn = Conn(cg.port)
        url = f"redis://127.0.0.1:{cg.port}"
        commands(cg, url, builds, paths, n)
        rows = {}
        for k in PICK:
            kind = KINDS[k][0]
            for name, cli in builds:
                t0 = time.monotonic()
                off, mem, kb = offer(cg, conn, cli, url, paths[k], n, os.path.join(tmp, f"cg.{name}.{k}.offer"))
                dlv, moved = deliver(cg, conn, cli, url, n, os.path.join(tmp, f"cg.{name}.{k}.delivery"))
                # The same offers again, then the transfers by hand.
                offer(cg, conn, cli, url, paths[k], n, os.path.join(tmp, f"cg.{name}.{k}.offer2"))
                fc = transfer_by_hand(cg, conn, transfer_fn(cli), n, os.path.join(tmp, f"cg.{name}.{k}.fcall"))
                rows[name, k] = (off, dlv, moved, (mem / n, kb / n), fc)
                print(f"wheel_ir.py: {name}, {kind}: {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        table(rows, n)
        apart(rows)
    finally:
        if conn:
            conn.close()
        cg.stop()
        if keep:
            print(f"wheel_ir.py: DQ_CALLGRIND_KEEP: {tmp} kept, with the dumps cg.BUILD.KIND.STEP",
                  file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def commands(cg, url, builds, paths, n):
    """The exact commands of the run."""
    pid = cg.proc.pid
    say(f"\n== Issue 42 in instructions: offer and delivery per item, before the wheel and after "
        f"(redis-server under callgrind, {n:,} items a kind)")
    say("command: " + " ".join(a if a else "''" for a in cg.argv))
    say(f"command: each build, each kind: FLUSHALL; CLI --redis {url} offer warmup 1h x; CONFIG RESETSTAT; "
        f"callgrind_control -z {pid}; CLI --redis {url} offer {Q} --batch FILE; callgrind_control -d {pid}; "
        f"INFO commandstats")
    say(f"command: then: HSET {P}n clock <TIME + 3,660,000 ms>; CONFIG RESETSTAT; callgrind_control -z {pid}; "
        f"CLI --redis {url} schedule {Q} until HGET {P}n pending is 0 (polled every {POLL_S} s), "
        f"SIGTERM to its pid; callgrind_control -d {pid}; INFO commandstats")
    say("command: each dump: callgrind_annotate --inclusive=yes --threshold=100 DUMP")
    for name, cli in builds:
        say(f"command: CLI {name} = {cli}")
    for k in PICK:
        kind = KINDS[k][0]
        say(f"command: FILE {kind} = {paths[k]} (DELAY<TAB><TAB>PAYLOAD, seed {SEED + k})")


def each(rows):
    """(build, kind's name, its figures) in the tables' order."""
    for name in ("before", "after"):
        for k in PICK:
            yield name, KINDS[k][0], rows[name, k]


def table(rows, n):
    say("\n| build | delays | offer Ir/item | ratio to one delay | delivery Ir/item (items moved) "
        "| offer and delivery Ir/item | bytes/item: used_memory, keys | transfers by hand Ir/item |")
    say("|---|---|---|---|---|---|---|---|")
    for name, kind, (off, dlv, moved, mem, fc) in each(rows):
        ratio = f"{rows[name, 0][0].ir / off.ir:.2f}" if 0 in PICK else "-"
        say(f"| {name} | {kind} | {off.per(off.ir):,.0f} | {ratio} | {dlv.per(dlv.ir):,.0f} ({moved:,}) "
            f"| {(off.ir + dlv.ir) / n:,.0f} | {mem[0]:,.1f}, {mem[1]:,.1f} | {fc.per(fc.ir):,.0f} |")
    say("")
    for k in PICK:
        kind = KINDS[k][0]
        b, a = rows["before", k], rows["after", k]
        say(f"after/before, {kind}: offer {a[0].ir / b[0].ir:.2f}x, "
            f"delivery {a[1].per(a[1].ir) / b[1].per(b[1].ir):.2f}x, "
            f"offer and delivery {(a[0].ir + a[1].ir) / (b[0].ir + b[1].ir):.2f}x, bytes {a[3][1] / b[3][1]:.2f}x, "
            f"transfers by hand {a[4].per(a[4].ir) / b[4].per(b[4].ir):.2f}x")
    say(f"(ratio: one delay's offer Ir/item / this kind's, so 0.80 means 1.25x the cost; offer and delivery: "
        f"both counts / {n:,} offered; delivery: `delayq schedule`, / items moved, the rest were ready at "
        f"their offer; bytes: INFO used_memory less client buffers after the offers less before, and MEMORY "
        f"USAGE of the queue's keys, per item; after/before compares the keys' bytes; transfers by hand: the "
        f"same offers again, then FCALL of the transfer function, 1,000 items and 10 s a call, not a "
        f"scheduler's 2 ms, which callgrind's slowness makes a fiftieth)")


def kilo(x):
    return "?" if x is None else f"{x / 1000:,.1f}k"


def apart(rows):
    """Each step's instructions per item taken apart: the scripts, the
    commands they called (with Redis's call() around each), the rest of the
    scripts (Lua, and redis.call's arguments and replies), Lua's numbers
    printed (sprintf, all of the server's, nearly all Lua's tostring and
    concatenation), and the commands of most instructions."""
    say("\n| build | delays | step | server | scripts (calls, items a call) | Lua and redis.call "
        "| commands called | Lua's numbers printed (sprintf) | commands: Ir/item (calls/item) |")
    say("|---|---|---|---|---|---|---|---|---|")
    for name, kind, (off, dlv, _, _, fc) in each(rows):
        for what, st in (("offer", off), ("delivery", dlv), ("by hand", fc)):
            sc, cm, calls = st.scripts(), st.commands(), st.script_calls()
            top = ", ".join(f"{c} {kilo(ir)} ({v:.2f})" for c, ir, v in st.top(6))
            say(f"| {name} | {kind} | {what} | {kilo(st.per(st.ir))} | {kilo(st.per(sc))} ({calls:,}, "
                f"{st.items / max(calls, 1):.1f}) | {kilo(st.per(sc - cm))} | {kilo(st.per(cm))} "
                f"| {kilo(st.per(st.funcs.get('__sprintf_chk', 0)))} | {top} |")
    say("(per item offered for the offers, per item moved for the deliveries; the commands' figures are their "
        "handlers' inclusive instructions, calls/item from INFO commandstats, the pending polls taken out)")


if __name__ == "__main__":
    main()
