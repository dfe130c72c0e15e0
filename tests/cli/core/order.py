"""order.py - items come out in due order, and items with equal due times
(one offer --batch, same delay) in offer (file) order."""
import os
import sys

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403


def take_all(queue, n, timeout):
    r = dq("take", queue, "--count", str(n), "--json", "--timeout", timeout, timeout=60)
    ok(r.rc == 0, f"take {queue} --count {n} exits 0", r)
    return r.json_lines()


section("different delays come out in due order")
offers = [("a", "1800ms"), ("b", "600ms"), ("c", "1200"), ("d", "0"), ("e", "900ms"), ("f", "2s")]
for id_, delay in offers:
    r = dq("offer", "ord", delay, f"payload-{id_}", "--id", id_)
    eq((r.rc, r.out), (0, f"{id_}\n".encode()), f"offer ord {delay} --id {id_}")
msgs = take_all("ord", len(offers), "10s")
eq([m["id"] for m in msgs], ["d", "b", "e", "c", "a", "f"], "delivery order is due order")
eq([m["payload"] for m in msgs], [f"payload-{m['id']}" for m in msgs], "each payload belongs to its id")
dues = [m["due_ms"] for m in msgs]
eq(dues, sorted(dues), "due_ms non-decreasing in delivery order")
ok(all(m["ready_ms"] >= m["due_ms"] for m in msgs), "ready_ms >= due_ms for all")

section("a batch file: DELAY<TAB>ID<TAB>PAYLOAD, mixed delays")
lines = []
delays = [700, 0, 350, 120, 0, 700, 350, 1000]
for i, d in enumerate(delays):
    lines.append(f"{d}ms\tmix{i}\tpayload {i}")
batch = ("\n".join(lines) + "\n").encode()
r = dq("offer", "mix", "--batch", "-", stdin=batch)
eq((r.rc, r.out), (0, b"%d\n" % len(delays)), "offer --batch - prints the count")
msgs = take_all("mix", len(delays), "10s")
want = [f"mix{i}" for i, _ in sorted(enumerate(delays), key=lambda p: (p[1], p[0]))]
eq([m["id"] for m in msgs], want, "due order; equal delays in file order")
ok(all(m["ready_ms"] >= m["due_ms"] for m in msgs), "ready_ms >= due_ms for all")

section("200 lines with the same delay (500ms) in one batch: FIFO")
N = 200
path = os.path.join(RDIR, "fifo.tsv")
with open(path, "w") as f:
    for i in range(N):
        f.write(f"500ms\tf{i:03d}\tbody {i}\n")
r = dq("offer", "fifo", "--batch", path)
eq((r.rc, r.out), (0, b"200\n"), "offer --batch FILE prints 200")
ids = [f"f{i:03d}" for i in range(N)]
dues = [zscore_due("fifo", i) for i in ids]
ok(None not in dues, "all 200 pending right after the offer", [i for i, d in zip(ids, dues) if d is None][:5])
if None not in dues:
    eq(dues, sorted(dues), "consecutive lines got the same or increasing due ms")
    note(f"{len(set(dues))} distinct due ms over {N} lines")
msgs = take_all("fifo", N, "10s")
eq([m["id"] for m in msgs], ids, "output order equals the file order")
eq([m["payload"] for m in msgs], [f"body {i}" for i in range(N)], "payloads in file order")
if None not in dues:
    eq([m["due_ms"] for m in msgs], dues, "due_ms as stored")
ok(all(m["ready_ms"] >= m["due_ms"] for m in msgs), "ready_ms >= due_ms for all")

section("100 items with delay 0, one by one: FIFO through the ready list")
path = os.path.join(RDIR, "now.tsv")
with open(path, "w") as f:
    for i in range(100):
        f.write(f"0\tn{i:03d}\t{i}\n")
r = dq("offer", "now", "--batch", path)
eq((r.rc, r.out), (0, b"100\n"), "offer --batch of 100 delay-0 lines")
msgs = take_all("now", 100, "10s")
eq([m["id"] for m in msgs], [f"n{i:03d}" for i in range(100)], "delivered in offer order")

finish()
