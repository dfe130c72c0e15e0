"""bench/recurring.py BUILD_DIR - issue 40's figure: the Redis server time
of the transfers that make the ticks of 10,000 recurring schedules all due
in one millisecond (each tick: its item moved, the next tick's item made,
the spec rewritten), beside the transfers that move 10,000 ordinary items
due in one millisecond, in the same run on one private redis-server.

The schedules are planted with the library's own functions (the common Lua
of lua/lib, as EVAL), as 10,000 'delayq every' runs would take minutes; the
items come from one 'offer --batch'. The transfers are the library's (FCALL
of its transfer function, as a scheduler sends them), called until they
report nothing more; the server time is INFO commandstats' fcall usec.
Not part of 'make bench' (bench/run.sh) yet.
"""
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
import topology  # noqa: E402

N = 10000
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
BIN = os.path.join(BUILD, "delayq")
LIB = b"".join(open(os.path.join(ROOT, "lua", "lib", n), "rb").read()
               for n in sorted(os.listdir(os.path.join(ROOT, "lua", "lib"))) if n.endswith(".lua"))
PLANT = LIB + b"""
call_begin()
local P, n, start = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local zs, counters = P .. 'zs', P .. 'n'
for i = 1, n do
  local s = {v = 1, kind = 'every', every = 3600000, start = start, stop = 0, missed = 'one', paused = 0,
             next = -1, last = -1, text = 'every 1h', zone = '', plen = 12}
  redis.call('HSET', payload_key(P), 's' .. i, 'tick payload')
  recur_arm(P, zs, counters, 's' .. i, s, start)
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


def main():
    port = topology.free_port()
    d = f"/tmp/dq-bench-recurring.{os.getpid()}"
    os.makedirs(d, exist_ok=True)
    srv = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no", "--dir", d], stdout=subprocess.DEVNULL)
    try:
        topology.wait_until(lambda: topology.try_call(port, "PING") is not None, 10)
        url = f"redis://127.0.0.1:{port}"
        subprocess.run([BIN, "--redis", url, "functions", "load"], check=True, capture_output=True, timeout=30)
        fn = transfer_fn()
        s, us = topology.call(port, "TIME")
        due = int(s) * 1000 + int(us) // 1000 + 4000
        topology.call(port, "EVAL", PLANT, 0, "dq:{bsched}:", N, due, timeout=60)
        s, us = topology.call(port, "TIME")
        delay = due - (int(s) * 1000 + int(us) // 1000)
        lines = "".join(f"{delay}\ti{k}\ttick payload\n" for k in range(N)).encode()
        subprocess.run([BIN, "--redis", url, "offer", "bitems", "--batch", "-"], input=lines, check=True,
                       capture_output=True, timeout=60)
        time.sleep(max(0, delay / 1000) + 1.5)
        m1, c1, u1 = drain(port, fn, "bitems")
        m2, c2, u2 = drain(port, fn, "bsched")
        print(f"ordinary items: {m1} moved by {c1} transfers, {u1} us of server time, "
              f"{u1 / max(m1, 1):.2f} us per item")
        print(f"schedules:      {m2} ticks made by {c2} transfers, {u2} us of server time, "
              f"{u2 / max(m2, 1):.2f} us per tick (its item moved, the next tick's made)")
    finally:
        srv.terminate()
        srv.wait(10)
        shutil.rmtree(d, ignore_errors=True)


main()
