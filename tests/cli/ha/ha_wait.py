"""ha_wait.py - durable writes on the suite's own redis-server, which has no
replica: --wait-replicas 1 cannot be confirmed, so the write is made and the
command exits 4 after about --wait-timeout; --wait-replicas 0 is as before, and
--wait-replicas all still waits for one.
Also the global options' bad values (exit 2)."""
import json
import os
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import dq, finish, note, ok, section, stats  # noqa: E402

Q = "hw"

section("an offer no replica can confirm")
t0 = time.monotonic()
r = dq("--wait-replicas", "1", "--wait-timeout", "200ms", "offer", Q, "1h", "x", "--id", "w1")
took = time.monotonic() - t0
ok(r.rc == 4, "exit 4", r)
ok(r.text.strip() == "w1", "the id is printed: the item was offered", r)
ok(r.errtext.count("\n") == 1 and "replica" in r.errtext, "one line says why", r.errtext)
note(f"took {took * 1000:.0f} ms with --wait-timeout 200ms")
ok(0.15 <= took <= 2.0, "after about 200 ms", took)
st = stats(Q)
ok(st and st["pending"] == 1, "the item is there", st)

section("the options also after the command; 0 replicas waits for nothing")
r = dq("offer", Q, "1h", "x", "--id", "w2", "--wait-replicas", "1", "--wait-timeout", "100ms")
ok(r.rc == 4, "after the command too: exit 4", r)
r = dq("--wait-replicas", "0", "offer", Q, "1h", "x", "--id", "w3")
ok(r.rc == 0, "--wait-replicas 0: exit 0", r)
r = dq("--wait-replicas", "all", "--wait-timeout", "100ms", "offer", Q, "1h", "x", "--id", "w4")
ok(r.rc == 4 and r.text.strip() == "w4", "--wait-replicas all without replicas waits for one: exit 4", r)
ok("0 of 1 replicas" in r.errtext, "and says so", r.errtext)

section("every write of a command waits: batch, cancel, config, dead letters, leases")
r = dq("--wait-replicas", "1", "--wait-timeout", "100ms", "offer", Q, "--batch", "-",
       stdin=b"1h\tb1\tx\n1h\tb2\ty\n")
ok(r.rc == 4 and r.text.strip() == "2", "a batch: all offered, exit 4", r)
r = dq("--wait-replicas", "1", "--wait-timeout", "100ms", "cancel", Q, "b1")
ok(r.rc == 4, "cancel: exit 4", r)
ok(stats(Q)["pending"] == 5, "and it was cancelled", stats(Q))
r = dq("--wait-replicas", "1", "--wait-timeout", "100ms", "config", Q, "--lease", "10s")
ok(r.rc == 4, "config: exit 4", r)
dq("offer", Q, "0", "now", "--id", "n1")
r = dq("--wait-replicas", "1", "--wait-timeout", "100ms", "take", Q, "--ack", "manual", "--json",
       "--timeout", "2s")
ok(r.rc == 0 and r.json_lines(), "a leased take still hands its item out (logged, exit 0)", r)
m = r.json_lines()[0] if r.json_lines() else {}
r = dq("--wait-replicas", "1", "--wait-timeout", "100ms", "ack", Q, m.get("id", "n1"), m.get("token", "t.1"))
ok(r.rc == 4, "ack: exit 4", r)
r = dq("--wait-replicas", "1", "--wait-timeout", "100ms", "dead", Q, "purge")
ok(r.rc == 4, "dead purge: exit 4", r)
r = dq("--wait-replicas", "1", "stats", Q)
ok(r.rc == 0, "a read (stats) does not wait", r)

section("bad values: exit 2, one line")
for args in (["--wait-replicas", "x"], ["--wait-replicas", "-1"], ["--wait-replicas", "1001"], ["--wait-replicas", "All"],
             ["--wait-timeout", "soon"], ["--wait-timeout", "-5ms"], ["--wait-replicas"]):
    r = dq(*args, "offer", Q, "0", "x")
    ok(r.rc == 2 and r.errtext.count("\n") == 1, f"{' '.join(args)}: exit 2", r)

finish()
