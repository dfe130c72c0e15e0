"""offer_calls.py - how many script calls a batch takes (src/ops/offer.c,
chunk_len and item_cost): a call carries at most 250 items, 512 KiB of
payloads and 500 units of work, an item costing 2 when its id is generated
and its delay is 40 s or more (the slots' end, the timing wheel), 1 more
when due sooner or at an absolute time (a near list), 1 more for an id
given (looked up first). So 1,000 lines take 4, 7 or 8 calls, 6 for
delays of 40 s and 39.999 s in turn (sent in delay order: the 39.999 s
ones first), and payloads of 4,000 bytes fill a
call's 512 KiB at 131 items; every item is offered whatever the split. The Python
client (clients/python) sizes its calls the same way. Each kind on its own
queue, counted by INFO commandstats."""
import os
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "clients", "python"))
import delayq  # noqa: E402

N = 1000
tmp = tempfile.mkdtemp(prefix="dq-calls-")


def batch_calls(queue, lines):
    """Offers lines by `offer --batch`; returns the FCALLs it took."""
    path = os.path.join(tmp, queue + ".txt")
    with open(path, "w") as f:
        f.write("".join(lines))
    dq("offer", queue, "1h", "warm")  # the function library loaded, the queue made
    redis("CONFIG", "RESETSTAT")
    r = dq("offer", queue, "--batch", path)
    eq((r.rc, r.out), (0, b"%d\n" % N), f"{queue}: all {N} lines offered")
    calls = command_calls("fcall")
    eq(stats(queue)["pending"], N + 1, f"{queue}: {N} items pending, and the first")
    return calls


cases = [
    ("far", [f"1h\t\tp{i}\n" for i in range(N)], 4, "delay 1 h, ids generated: 250 a call"),
    ("farid", [f"1h\tid{i}\tp{i}\n" for i in range(N)], 7, "delay 1 h, ids given: 166 a call"),
    ("near", [f"5s\t\tp{i}\n" for i in range(N)], 7, "delay 5 s (near lists): 166 a call"),
    ("nearid", [f"{1 + i % 9}s\tid{i}\tp{i}\n" for i in range(N)], 8, "delays 1-9 s, ids given: 125 a call"),
    ("edge40", [f"40000\t\tp{i}\n" for i in range(N)], 4, "40 s exactly (cost 2): 250 a call"),
    ("edge39", [f"39999\t\tp{i}\n" for i in range(N)], 7, "39.999 s (cost 3): 166 a call"),
    # In turn, but sent in delay order (src/util/send_order.c): 500 of
    # cost 3 (three calls and 2 items), then 500 of cost 2.
    ("edge", [f"{40000 if i % 2 else 39999}\t\tp{i}\n" for i in range(N)], 6,
     "40 s and 39.999 s in turn, sent in delay order: 166, 166, 166, 249, 250, 3"),
    ("big", [f"1h\t\t{'x' * 4000}\n" for _ in range(N)], 8, "4,000-byte payloads: 131 a call (512 KiB)"),
]
for queue, lines, want, what in cases:
    section(what)
    eq(batch_calls(queue, lines), want, f"{queue}: {want} script calls for {N} lines")

section("the Python client's offer_many: the same sizes")
client = delayq.Client(URL)
pycases = [
    ("pyfar", [delayq.Item(f"p{i}", 3600000) for i in range(N)], 4),
    ("pyfarid", [delayq.Item(f"p{i}", 3600000, id=f"id{i}") for i in range(N)], 7),
    ("pynear", [delayq.Item(f"p{i}", 5000) for i in range(N)], 7),
    ("pydue", [delayq.Item(f"p{i}", due_ms=server_ms() + 3600000) for i in range(N)], 7),
    ("pyhalf", [delayq.Item(f"p{i}", 5000, id=f"id{i}" if i % 2 else None) for i in range(N)], 8),
    # In turn, sent in delay order as the C library sends them: 6 calls.
    ("pyedge", [delayq.Item(f"p{i}", 40000 if i % 2 else 39999) for i in range(N)], 6),
]
for queue, items, want in pycases:
    client.offer(queue, "warm", 3600000)
    redis("CONFIG", "RESETSTAT")
    got = client.offer_many(queue, items)
    eq(len(got), N, f"{queue}: {N} results")
    eq(command_calls("fcall"), want, f"{queue}: {want} script calls for {N} items")
    eq(stats(queue)["pending"], N + 1, f"{queue}: {N} items pending, and the first")

finish()
