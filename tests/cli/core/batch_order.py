"""batch_order.py - offer --batch sends each chunk in delay order
(dq_offer_many, src/util/send_order.c), and nothing a queue promises
changes with it.

- 4,000 lines with delays of their own (20 s to 20.5 s: near lists, 8
  items a millisecond), in shuffled order: Redis gets few RPUSHes (a call's
  items share their milliseconds' lists: under 1,000, where file order
  makes about 3,400);
- every item's due time is Redis's time during the run plus its delay;
- lines of one delay keep file order: their (due time, place in the list)
  ascend in file order;
- an id twice in a chunk: the chunk goes in file order, so the later line
  replaces the earlier (its due time and payload), or with --nx keeps it,
  although the later line's delay is the shorter;
- the count printed is the number of lines.

The Python client's offer_many (clients/python) sends in the same order:
the same few RPUSHes and due times, results in the items' order, and an
id twice keeps the items' order."""
import os
import random
import sys
import tempfile

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "clients", "python"))
import delayq  # noqa: E402

N = 4000
SAME = 20250  # the delay that 50 lines share, spread through the file
rnd = random.Random(7)
TMP = tempfile.TemporaryDirectory()


def write_batch(name, lines):
    path = os.path.join(TMP.name, name)
    with open(path, "w") as f:
        f.write("".join(f"{d}ms\t{i}\t{p}\n" for d, i, p in lines))
    return path


def due_and_place(queue, id_):
    """(due ms, place in its near list) of a pending id, from its id index entry."""
    return near_ref_of(redis("HGET", id_index_key(queue, id_), id_))


def check_dup(q, label, t0, t1, want_delay, want_payload, noun):
    """The id "dup" of queue q, offered twice between server times t0 and
    t1, is due want_delay after its offer, with payload want_payload (its
    winner's: the noun "line" or "item" names them in the checks)."""
    whose = f"the {want_payload} {noun}'s"
    ref = due_and_place(q, "dup")
    ok(ref is not None and t0 + want_delay <= ref[0] <= t1 + want_delay,
       f"{label}: dup due {want_delay} ms after its offer ({whose} delay)", ref)
    entry = ref and redis("LINDEX", f"dq:{{{q}}}:m:{ref[0]}", ref[1])
    ok(entry is not None and entry.endswith(want_payload.encode()), f"{q}: its payload is {whose}", entry)


section(f"{N} lines with delays of their own: few RPUSHes, due times right")
lines = [(rnd.randint(20000, 20498), f"o{i}", f"p{i}") for i in range(N)]
lines = [(d + (d >= SAME), i, p) for d, i, p in lines]  # SAME is the 50 lines' own
for k in range(50):
    j = k * (N // 50) + 3
    lines[j] = (SAME, lines[j][1], lines[j][2])
path = write_batch("spread.tsv", lines)
redis("CONFIG", "RESETSTAT")
t0 = server_ms()
r = dq("offer", "bo", "--batch", path, timeout=60)
t1 = server_ms()
eq((r.rc, r.out), (0, b"%d\n" % N), f"exit 0, {N} offered")
rpush = command_calls("rpush")
ok(rpush < N // 4, f"{rpush} RPUSHes for {N} items (file order makes about 3,400)", rpush)
refs = {i: due_and_place("bo", i) for _, i, _ in lines}
bad = [(i, d, refs[i]) for d, i, _ in lines if refs[i] is None or not t0 + d <= refs[i][0] <= t1 + d]
eq(bad[:5], [], "every item's due time is Redis's time during the run plus its delay")
same = [refs[i] for d, i, _ in lines if d == SAME]
eq(len(same), 50, "50 lines share a delay")
eq(same, sorted(same), "lines of one delay: (due time, place) ascend in file order")

section("an id twice in a chunk: file order, so the later line wins")
for q, flags, want_delay, want_payload in (("bd", [], 1000, "last"), ("bn", ["--nx"], 30000, "first")):
    lines = [(30000, "dup", "first")] + [(rnd.randint(0, 39000), f"d{i}", "x") for i in range(2998)]
    lines.append((1000, "dup", "last"))
    path = write_batch(q + ".tsv", lines)
    t0 = server_ms()
    r = dq("offer", q, "--batch", path, *flags, timeout=60)
    t1 = server_ms()
    eq((r.rc, r.out), (0, b"3000\n"), f"{q}: exit 0, 3000 lines counted")
    check_dup(q, " ".join([q] + flags), t0, t1, want_delay, want_payload, "line")

section(f"the Python client's offer_many: {N} items with delays of their own, sent in delay order")
client = delayq.Client(URL)
items = [delayq.Item(f"p{i}", rnd.randint(20000, 20498), id=f"y{i}") for i in range(N)]
redis("CONFIG", "RESETSTAT")
t0 = server_ms()
got = client.offer_many("py", items)
t1 = server_ms()
eq([(o.id, o.status, o.state) for o in got], [(it.id, "added", "pending") for it in items],
   f"{N} results, in the items' order: added, pending")
rpush = command_calls("rpush")
ok(rpush < N // 4, f"{rpush} RPUSHes for {N} items (the items' order makes about 3,400)", rpush)
refs = [due_and_place("py", it.id) for it in items]
bad = [(it.id, it.delay_ms, ref) for it, ref in zip(items, refs)
       if ref is None or not t0 + it.delay_ms <= ref[0] <= t1 + it.delay_ms]
eq(bad[:5], [], "every item's due time is Redis's time during the call plus its delay")
eq([o.due_ms for o in got], [ref and ref[0] for ref in refs], "each result's due time is its item's")
one = [refs[j] for j, it in enumerate(items) if it.delay_ms == items[0].delay_ms]
eq(one, sorted(one), f"the {len(one)} items of one delay: (due time, place) ascend in the items' order")

section("the Python client's offer_many: an id twice goes in the items' order")
for q, nx, want_delay, want_payload in (("pd", False, 1000, "last"), ("pn", True, 30000, "first")):
    items = [delayq.Item("first", 30000, id="dup", nx=nx)]
    items += [delayq.Item("x", rnd.randint(0, 39000), id=f"d{i}") for i in range(998)]
    items.append(delayq.Item("last", 1000, id="dup", nx=nx))
    t0 = server_ms()
    got = client.offer_many(q, items)
    t1 = server_ms()
    eq((got[0].status, got[-1].status), ("added", "kept" if nx else "replaced"),
       f"{q}: the first dup added, the last {'kept' if nx else 'replaced'} it")
    check_dup(q, q, t0, t1, want_delay, want_payload, "item")

TMP.cleanup()
finish()
