"""set_aside.py - entries delayq cannot decode never block a queue and are
never dropped: they go to the set-aside list dq:{Q}:x with a reason, and
stats counts them."""
import os
import sys

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

ORD = 2048


def plant(queue, score, record):
    """Puts a raw record into a slot of its own, as lua/lib/00_base.lua lays them
    out: the slot index dq:{Q}:zs names slot 'planted', dq:{Q}:q:planted."""
    redis("ZADD", f"dq:{{{queue}}}:zs", str(score), "planted")
    redis("ZADD", f"dq:{{{queue}}}:q:planted", str(score), record)


section("an undecodable entry in the ready list")
redis("RPUSH", "dq:{sx}:r", "garbage that is no entry")
eq(dq("offer", "sx", "0", "good", "--id", "g1").rc, 0, "offer a good item after it")
r = dq("take", "sx", "--json", "--timeout", "3s")
msgs = r.json_lines()
eq((r.rc, [(m["id"], m["payload"]) for m in msgs]), (0, [("g1", "good")]), "take skips the garbage, gets the good item")
aside = redis("LRANGE", "dq:{sx}:x", 0, -1)
eq(len(aside), 1, "the garbage is in the set-aside list")
if aside:
    ok(aside[0].startswith(b"1|") and aside[0].endswith(b"garbage that is no entry"),
       "set-aside entry: version 1, a reason, the raw bytes", aside[0])
p = stats("sx")
if p is not None:
    eq((p["pending"], p["ready"], p.get("set_aside")), (0, 0, 1), "stats --json: set_aside 1")
r = dq("stats", "sx")
ok(r.rc == 0 and b"set_aside 1\n" in r.out, "plain stats shows set_aside 1", r.out)

section("a slot record whose lengths do not add up")
now = server_ms()
due = now - 1000
plant("sp", due * ORD, "1|99|orphan")
eq(dq("offer", "sp", "100ms", "fine", "--id", "f1").rc, 0, "offer a good item after it")
r = dq("take", "sp", "--count", "1", "--json", "--timeout", "3s")
msgs = r.json_lines()
eq((r.rc, [m["id"] for m in msgs]), (0, ["f1"]), "the good item is delivered")
aside = redis("LRANGE", "dq:{sp}:x", 0, -1)
eq(len(aside), 1, "the broken record is set aside")
if aside:
    ok(aside[0].endswith(b"1|99|orphan") and aside[0].startswith(b"1|"), "... raw, with a reason", aside[0])
eq(redis("EXISTS", "dq:{sp}:q:planted"), 0, "nothing left in the slot")

section("a record of an unknown format")
due = server_ms() - 500
plant("sf", due * ORD, "9future-format")
r = dq("take", "sf", "--count", "0", "--json", "--timeout", "800ms")
eq((r.rc, r.out), (0, b""), "nothing delivered")
aside = redis("LRANGE", "dq:{sf}:x", 0, -1)
eq(len(aside), 1, "set aside")
if aside:
    ok(aside[0].endswith(b"9future-format"), "... with the raw record kept", aside[0])
p = stats("sf")
if p is not None:
    eq((p["pending"], p["ready"], p.get("set_aside")), (0, 0, 1), "stats: 0 pending, 0 ready, 1 set aside")

finish()
