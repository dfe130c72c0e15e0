"""bench/recurring.py BUILD_DIR - issue 40's figure (phase recur of
bench/run.sh): the Redis server time of the transfers that make the ticks
of 10,000 recurring schedules all due in one millisecond (each tick: its
item made ready, the schedule moved to its next tick), beside the transfers
that move 10,000 ordinary items due in one millisecond, in the same run on
one private redis-server (pinned to core 0 where taskset is).

The schedules are planted with the library's own functions (the common Lua
of lua/lib, as EVAL), as 10,000 'delayq every' runs would take minutes; the
items come from one 'offer --batch'. Both are due when the drains start.
The transfers are the library's (FCALL of its transfer function, as a
scheduler sends them), called until they report nothing more; the server
time is INFO commandstats' fcall usec. Five rounds, the two drains in
alternating order; the figure is each one's median round, so a stall of
the host falls on one round, not on the figure. DQ_BENCH_SCALE scales the
count (not below 1,000).
"""
import os
import shutil
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
import topology  # noqa: E402

SCALE = float(os.environ.get("DQ_BENCH_SCALE", "1") or "1")
N = max(1000, int(10000 * SCALE))
ROUNDS = 5
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
BIN = os.path.join(BUILD, "delayq")
LIB = b"".join(open(os.path.join(ROOT, "lua", "lib", n), "rb").read()
               for n in sorted(os.listdir(os.path.join(ROOT, "lua", "lib"))) if n.endswith(".lua"))
PLANT = LIB + b"""
call_begin()
local P, n, start = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
for i = 1, n do
  local s = {v = 2, kind = 'every', every = 3600000, start = start, stop = 0, missed = 'one', paused = 0,
             text = 'every 1h', zone = '', plen = 12}
  redis.call('HSET', recur.payload_key(P), 's' .. i, 'tick payload')
  recur.spec_write(P, 's' .. i, s)
  recur.state_write(P, 's' .. i, -1, start)
  recur.enter(P, ARGV[4], 's' .. i, s, start, 'tick payload', 0)
end
return n
"""


def transfer_fn():
    for line in open(os.path.join(BUILD, "gen", "scripts.h")):
        if "DQ_LUA_transfer_FN" in line:
            return line.split('"')[1]
    raise SystemExit("no transfer function name in " + BUILD + "/gen/scripts.h")


def fcall_usec(port):
    for line in topology.call(port, "INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_fcall:"):
            return int(line.split("usec=")[1].split(",")[0])
    return 0


def drain(port, fn, q):
    P = f"dq:{{{q}}}:"
    keys = [P + "zs", P + "r", P + "x", P + "n", P + "d", P + "dz", P + "s"]
    u0, moved, calls = fcall_usec(port), 0, 0
    for _ in range(10000):
        r = topology.call(port, "FCALL", fn, 7, *keys, P, P + "w", 1000, 2000, 0, 1, timeout=30)
        moved, calls = moved + r[0], calls + 1
        if r[4] == 0:
            break
    return moved, calls, fcall_usec(port) - u0


def now_ms(port):
    s, us = topology.call(port, "TIME")
    return int(s) * 1000 + int(us) // 1000


def items_round(port, url, fn):
    # Due 300 ms on (an item due at once would go straight to ready), then
    # drained once they all are due.
    due = now_ms(port) + 300
    lines = "".join(f"300\ti{k}\ttick payload\n" for k in range(N)).encode()
    subprocess.run([BIN, "--redis", url, "offer", "bitems", "--batch", "-"], input=lines, check=True,
                   capture_output=True, timeout=60)
    topology.wait_until(lambda: now_ms(port) > due + 300, 10)
    return drain(port, fn, "bitems")


def ticks_round(port, fn):
    topology.call(port, "EVAL", PLANT, 0, "dq:{bsched}:", N, now_ms(port) - 1, "dq:{bsched}:w", timeout=60)
    return drain(port, fn, "bsched")


def median(xs):
    return sorted(xs)[len(xs) // 2]


def main():
    port = topology.free_port()
    d = f"/tmp/dq-bench-recurring.{os.getpid()}"
    os.makedirs(d, exist_ok=True)
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") and (os.cpu_count() or 1) >= 2 else []
    srv = subprocess.Popen(pin + ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", d], stdout=subprocess.DEVNULL)
    try:
        topology.wait_until(lambda: topology.try_call(port, "PING") is not None, 10)
        url = f"redis://127.0.0.1:{port}"
        subprocess.run([BIN, "--redis", url, "functions", "load"], check=True, capture_output=True, timeout=30)
        fn = transfer_fn()
        per_item, per_tick = [], []
        for r in range(ROUNDS):
            topology.call(port, "FLUSHALL")
            runs = [lambda: items_round(port, url, fn), lambda: ticks_round(port, fn)]
            if r % 2:
                runs.reverse()
            got = [run() for run in runs]
            if r % 2:
                got.reverse()
            (m1, c1, u1), (m2, c2, u2) = got
            if m1 != N or m2 != N:
                raise SystemExit(f"recurring.py: moved {m1} items and made {m2} ticks, not {N} each")
            per_item.append(u1 / m1)
            per_tick.append(u2 / m2)
        scaled = " [SCALED]" if SCALE != 1 else ""
        print(f"recur: {N} ordinary items due in one ms, moved by transfers: "
              f"{median(per_item):.2f} us of Redis time per item (median of {ROUNDS} rounds){scaled}")
        print(f"recur: {N} schedules due in one ms, their ticks made by transfers: "
              f"{median(per_tick):.2f} us of Redis time per tick (median of {ROUNDS} rounds){scaled}")
        print(f"recur: per tick / per item: {median(per_tick) / median(per_item):.2f} "
              f"(rounds, items: {' '.join(f'{x:.2f}' for x in per_item)}; "
              f"ticks: {' '.join(f'{x:.2f}' for x in per_tick)})")
    finally:
        srv.terminate()
        srv.wait(10)
        shutil.rmtree(d, ignore_errors=True)


main()
