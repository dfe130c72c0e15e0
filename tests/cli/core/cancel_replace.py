"""cancel_replace.py - cancel (exit 0, then 1), a cancelled item is never
delivered; offering a pending id again replaces it (only the new payload,
once); --nx keeps the pending one."""
import os
import sys

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

section("cancel")
r = dq("offer", "cq", "5s", "x", "--id", "c1")
eq((r.rc, r.out), (0, b"c1\n"), "offer cq 5s --id c1")
r = dq("cancel", "cq", "c1")
eq((r.rc, r.out, r.err), (0, b"", b""), "cancel cq c1 exits 0 (was pending)")
eq(zscore_due("cq", "c1"), None, "c1 is gone from the pending set")
r = dq("cancel", "cq", "c1")
eq((r.rc, r.out), (1, b""), "a second cancel exits 1 (not pending)")
r = dq("cancel", "cq", "never-offered")
eq(r.rc, 1, "cancel of an unknown id exits 1")
r = dq("cancel", "other-queue", "c1")
eq(r.rc, 1, "cancel on another queue exits 1")
p = stats("cq")
if p is not None:
    eq((p["pending"], p["ready"]), (0, 0), "nothing pending, nothing ready after the cancel")
    eq((slot_records("cq"), id_index_size("cq")), (0, 0), "no record or id index entry left behind")

section("a cancelled item is never delivered")
eq(dq("offer", "cq2", "300ms", "cancelled", "--id", "gone").rc, 0, "offer cq2 300ms --id gone")
eq(dq("offer", "cq2", "600ms", "kept", "--id", "stay").rc, 0, "offer cq2 600ms --id stay")
eq(dq("cancel", "cq2", "gone").rc, 0, "cancel gone")
r = dq("take", "cq2", "--count", "0", "--json", "--timeout", "1500ms")
eq(r.rc, 0, "take --count 0 --timeout 1500ms exits 0 at the timeout")
msgs = r.json_lines()
eq([(m["id"], m["payload"]) for m in msgs], [("stay", "kept")], "only the not-cancelled item came")

section("cancel after delivery")
eq(dq("offer", "cq3", "0", "now", "--id", "d1").rc, 0, "offer cq3 0 --id d1")
eq(dq("take", "cq3", "--timeout", "5s").out, b"now\n", "take gets it")
eq(dq("cancel", "cq3", "d1").rc, 1, "cancel of a delivered id exits 1")

section("replace: offering a pending id again")
s0 = server_ms()
eq(dq("offer", "rq", "300ms", "old", "--id", "r1").rc, 0, "offer rq 300ms old --id r1")
d_old = zscore_due("rq", "r1")
s1 = server_ms()
r = dq("offer", "rq", "800ms", "new", "--id", "r1")
eq((r.rc, r.out), (0, b"r1\n"), "offer rq 800ms new --id r1 (replace) prints r1")
s2 = server_ms()
d_new = zscore_due("rq", "r1")
ok(d_new is not None and s1 + 800 <= d_new <= s2 + 800, "due time replaced by now + 800 ms",
   f"{s1 + 800} <= {d_new} <= {s2 + 800} (old {d_old})")
p = stats("rq")
if p is not None:
    eq(p["pending"], 1, "still one pending item")
r = dq("take", "rq", "--count", "0", "--json", "--timeout", "2s")
eq(r.rc, 0, "take --count 0 --timeout 2s exits 0")
msgs = r.json_lines()
eq([(m["id"], m["payload"]) for m in msgs], [("r1", "new")], "only the new payload, once")
if msgs:
    eq(msgs[0]["due_ms"], d_new, "delivered with the new due time")
    ok(msgs[0]["ready_ms"] >= d_new, "not before the new due time", msgs[0])

section("replace with a shorter delay")
eq(dq("offer", "rq2", "10s", "slow", "--id", "r2").rc, 0, "offer rq2 10s --id r2")
eq(dq("offer", "rq2", "200ms", "fast", "--id", "r2").rc, 0, "offer rq2 200ms --id r2")
r = dq("take", "rq2", "--json", "--timeout", "3s")
msgs = r.json_lines()
eq((r.rc, [(m["id"], m["payload"]) for m in msgs]), (0, [("r2", "fast")]), "delivered at the new, earlier time")
p = stats("rq2")
if p is not None:
    eq((p["pending"], p["ready"]), (0, 0), "nothing left of the old offer")

section("--nx keeps the pending item")
s0 = server_ms()
eq(dq("offer", "kq", "400ms", "first", "--id", "k1").rc, 0, "offer kq 400ms first --id k1")
s1 = server_ms()
d_first = zscore_due("kq", "k1")
r = dq("offer", "kq", "100ms", "second", "--id", "k1", "--nx")
eq((r.rc, r.out), (0, b"k1\n"), "offer kq 100ms second --id k1 --nx exits 0, prints k1")
eq(zscore_due("kq", "k1"), d_first, "due time unchanged")
ok(d_first is not None and s0 + 400 <= d_first <= s1 + 400, "... still the first offer's", d_first)
r = dq("take", "kq", "--count", "0", "--json", "--timeout", "1500ms")
msgs = r.json_lines()
eq((r.rc, [(m["id"], m["payload"]) for m in msgs]), (0, [("k1", "first")]), "only the first payload, once")
if msgs:
    eq(msgs[0]["due_ms"], d_first, "with the first due time")

section("--nx on a new id adds it")
r = dq("offer", "kq2", "0", "fresh", "--id", "k2", "--nx")
eq((r.rc, r.out), (0, b"k2\n"), "offer --nx of a new id")
eq(dq("take", "kq2", "--timeout", "5s").out, b"fresh\n", "delivered")

section("offer --batch --nx keeps pending ids, adds the others")
eq(dq("offer", "kb", "400ms", "old", "--id", "b1").rc, 0, "offer kb 400ms old --id b1")
r = dq("offer", "kb", "--batch", "-", "--nx", stdin=b"0\tb1\tnew\n0\tb2\tother\n")
eq((r.rc, r.out), (0, b"2\n"), "offer --batch --nx prints 2")
r = dq("take", "kb", "--count", "0", "--json", "--timeout", "1500ms")
msgs = r.json_lines()
eq((r.rc, [(m["id"], m["payload"]) for m in msgs]), (0, [("b2", "other"), ("b1", "old")]),
   "b2 now, b1 with its old payload at its old time")

section("one batch naming an id twice: the later line replaces the earlier")
# Offers in one script call hold their slot and id index writes back until
# the call ends; an id seen twice must find its first copy all the same.
r = dq("offer", "tw", "--batch", "-", stdin=b"200ms\tt1\tfirst\n250ms\tt2\tother\n300ms\tt1\tsecond\n")
eq((r.rc, r.out), (0, b"3\n"), "offer --batch of 3 lines (t1 twice) prints 3")
p = stats("tw")
if p is not None:
    eq(p["pending"], 2, "two items pending, not three")
eq((slot_records("tw") + near_records("tw"), id_index_size("tw")), (2, 2),
   "two records (slots and near lists) and two id index entries")
r = dq("take", "tw", "--count", "0", "--json", "--timeout", "1500ms")
msgs = r.json_lines()
eq((r.rc, [(m["id"], m["payload"]) for m in msgs]), (0, [("t2", "other"), ("t1", "second")]),
   "t1 once, with the later payload and due time")
p = stats("tw")
if p is not None:
    eq((p["pending"], p["ready"]), (0, 0), "nothing left")

finish()
