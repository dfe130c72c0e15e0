"""sealed_strict.py - sealing end to end, whatever is in Redis (issue 35).

- A sharded queue (config --shards 4): sealed offers are delivered opened by
  take and by work, and dead letters and listings open them too (the item is
  bound to the queue, not to the shard that holds it).
- A consumer with keys refuses what is no envelope: a payload replaced by
  plaintext in Redis, or an envelope cut below its 53 bytes, is set aside
  with its reason, not delivered (under a lease too: acked away). With
  --plaintext allow (or $DELAYQ_PLAINTEXT=allow) plaintext is delivered, a
  cut envelope still is not; a client without keys takes plaintext as ever.
- An item sealed with a key the consumer lacks stays ready for the holders
  of that key and does not stop the items behind it: take (plain and
  leased, whose tokens still ack), a take without any key file, a take of
  a sharded queue (whatever shard it starts on) and a running work process
  all get the items behind it.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

R = Redis(timeout=30)
tmp = tempfile.mkdtemp(prefix="delayq-sealed-strict.")


def keyfile(name, line):
    path = os.path.join(tmp, name)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(line)
    return path


def keygen():
    r = dq("keygen", redis=False)
    ok(r.rc == 0 and r.text.startswith("dq-key-1 "), "keygen prints a key line", r)
    return r.text


K1, K2 = keygen(), keygen()
k1, k2 = keyfile("k1", K1), keyfile("k2", K2)
ID2 = K2.split()[1]


def take(q, key=None, *extra, env=None):
    args = (["--key-file", key] if key else []) + ["take", q, "--json", "--no-scheduler", "--timeout", "1s"]
    return dq(*args, *extra, env=env)


def got(r):
    """{id: payload bytes} of a take --json that exited 0, else {}."""
    return {m["id"]: msg_payload(m) for m in r.json_lines()} if r.rc == 0 else {}


def offer(q, key, pid, payload):
    args = (["--key-file", key] if key else []) + ["offer", q, "0", "--id", pid]
    eq(dq(*args, stdin=payload).rc, 0, f"offer {pid} to {q}" + (" sealed" if key else " plain"))


def ready_entries(q):
    return R.cmd("LRANGE", f"dq:{{{q}}}:r", 0, -1)


def aside(q):
    return R.cmd("LRANGE", f"dq:{{{q}}}:x", 0, -1)


def plant_plaintext(q, pid, payload):
    """Offers pid sealed to q, then replaces its ready entry by the entry a
    client without keys makes for the same id and payload: what anyone who
    may write to Redis can do."""
    offer(q, k1, pid, b"sealed " + payload)
    offer(q + "_src", None, pid, payload)
    plain = ready_entries(q + "_src")[0]
    R.cmd("LSET", f"dq:{{{q}}}:r", -1, plain)
    R.cmd("DEL", f"dq:{{{q}_src}}:r")


def plant_cut(q, pid, keep):
    """Offers pid sealed to q and cuts its envelope to its first keep bytes."""
    offer(q, k1, pid, b"a secret payload")
    e = ready_entries(q)[-1]
    at = e.index(pid.encode()) + len(pid)  # an entry is head | id | payload
    R.cmd("LSET", f"dq:{{{q}}}:r", -1, e[:at + keep])


section("a sharded queue: sealed offers are taken, worked, listed and dead-listed")
q = "ssq"
eq(dq("config", q, "--shards", "4", "--max-attempts", "1").rc, 0, "config --shards 4 --max-attempts 1")
want = {f"s{i}": f"pay-s{i}".encode() for i in range(6)}
for pid, p in want.items():
    offer(q, k1, pid, p)
listed, cursor = {}, []
for _ in range(20):  # a page holds one shard's part at most: follow 'next: C'
    r = dq("--key-file", k1, "list", q, "--state", "ready", "--json", *cursor)
    if r.rc != 0:
        break
    listed.update({m["id"]: m.get("payload") for m in r.json_lines()})
    nxt = [line.split("next: ", 1)[1] for line in r.errtext.splitlines() if "next: " in line]
    if not nxt:
        break
    cursor = ["--cursor", nxt[0]]
eq(listed, {k: v.decode() for k, v in want.items()}, "list with the key: every payload opened")
r = take(q, k1, "--count", "6")
eq(got(r), want, "take with the key: all six delivered, opened")
eq((stats(q) or {}).get("set_aside"), 0, "none set aside")
out = os.path.join(tmp, "worked")
for i in range(4):
    offer(q, k1, f"w{i}", f"work-w{i}".encode())
w = bg_dq("--key-file", k1, "work", q, "--exec", f"cat >> {out}; echo >> {out}")
ok(wait_for(lambda: os.path.exists(out) and open(out, "rb").read().count(b"\n") >= 4, 10),
   "work with the key: four items run", open(out, "rb").read() if os.path.exists(out) else None)
w.stop()
eq(sorted(open(out, "rb").read().split()) if os.path.exists(out) else [],
   [f"work-w{i}".encode() for i in range(4)], "... each with its payload opened")
offer(q, k1, "d1", b"dead-secret")
w = bg_dq("--key-file", k1, "work", q, "--exec", "cat > /dev/null; exit 1")
ok(wait_for(lambda: (stats(q) or {}).get("dead") == 1, 10), "a failing command makes d1 a dead letter")
w.stop()
r = dq("--key-file", k1, "dead", q, "list", "--json")
eq([(d.get("id"), d.get("payload")) for d in r.json_lines()] if r.rc == 0 else r,
   [("d1", "dead-secret")], "dead list with the key: the payload opened")
eq((stats(q) or {}).get("set_aside"), 0, "still none set aside")

section("plaintext in place of an envelope: set aside by a consumer with keys")
q = "spt"
plant_plaintext(q, "p1", b"forged order")
r = take(q, k1)
ok(r.rc == 1 and r.text == "", "take with the key: nothing delivered (exit 1)", r)
x = aside(q)
ok(len(x) == 1 and b"not sealed" in x[0] and x[0].endswith(b"forged order"),
   "set aside with its reason, the entry kept", x)
eq(take(q, k1).rc, 1, "not retried: the next take finds nothing")
q = "sptl"
plant_plaintext(q, "p2", b"forged order")
r = take(q, k1, "--ack", "manual", "--lease", "5s")
ok(r.rc == 1 and r.text == "", "the same under a lease: nothing delivered", r)
ok(wait_for(lambda: (stats(q) or {}).get("inflight") == 0, 5), "... and its lease acked away", stats(q))
ok(len(aside(q)) == 1 and b"not sealed" in aside(q)[0], "... set aside once", aside(q))

section("--plaintext allow delivers plaintext, never a cut envelope")
q = "spa"
plant_plaintext(q, "a1", b"legacy one")
plant_plaintext(q, "a2", b"legacy two")
r = take(q, k1, "--count", "1", "--plaintext", "allow")
eq(got(r), {"a1": b"legacy one"}, "--plaintext allow: delivered as it is")
r = take(q, k1, "--count", "1", env={"DELAYQ_PLAINTEXT": "allow"})
eq(got(r), {"a2": b"legacy two"}, "$DELAYQ_PLAINTEXT=allow: the same")
eq(aside(q), [], "nothing set aside")
r = dq("--key-file", k1, "--plaintext", "sometimes", "stats", q)
ok(r.rc == 2 and "allow or refuse" in r.errtext, "--plaintext with another word: exit 2", r)
plant_cut("spc", "c0", 30)
r = take("spc", k1, "--plaintext", "allow")
ok(r.rc == 1 and r.text == "", "allow: a cut envelope is still not delivered", r)
ok(len(aside("spc")) == 1 and b"cut short" in aside("spc")[0], "... set aside as cut short", aside("spc"))
q = "spk"
offer(q, None, "n1", b"plain for a plain consumer")
eq(got(take(q)), {"n1": b"plain for a plain consumer"}, "a client without keys takes plaintext as ever")

section("an envelope cut below its 53 bytes: set aside, never delivered raw")
for keep in (0, 5, 13, 52):
    q = f"scut{keep}"
    plant_cut(q, "c1", keep)
    r = take(q, k1)
    ok(r.rc == 1 and r.text == "", f"cut to {keep} bytes: nothing delivered", r)
    x = aside(q)
    ok(len(x) == 1 and (b"cut short" in x[0] if keep >= 4 else b"not sealed" in x[0]),
       f"cut to {keep} bytes: set aside with its reason", x)

section("an item sealed with a key the consumer lacks does not stop the ones behind it")
q = "suk"
offer(q, k2, "u1", b"for the holders of k2")
offer(q, k1, "u2", b"two")
offer(q, k1, "u3", b"three")
eq(got(take(q, k1, "--count", "1")), {"u2": b"two"}, "take --count 1: the item behind it")
eq(got(take(q, k1, "--count", "1")), {"u3": b"three"}, "take --count 1 again: the next")
r = take(q, k1)
ok(r.rc == 3 and ID2 in r.errtext and "u1" in r.errtext, "then only u1 is left: exit 3 naming its key", r)
eq((stats(q) or {}).get("ready"), 1, "u1 is still ready")
eq(got(take(q, k2)), {"u1": b"for the holders of k2"}, "a holder of k2 takes it")
q = "sukl"
offer(q, k2, "l1", b"for k2")
offer(q, k1, "l2", b"two")
offer(q, k1, "l3", b"three")
r = take(q, k1, "--count", "2", "--ack", "manual", "--lease", "30s")
msgs = r.json_lines() if r.rc == 0 else []
eq(sorted((m["id"], msg_payload(m)) for m in msgs), [("l2", b"two"), ("l3", b"three")],
   "leased take --count 2: the two behind it")
for m in msgs:
    eq(dq("ack", q, m["id"], m["token"]).rc, 0, f"ack {m['id']} with its token")
s = stats(q) or {}
eq((s.get("ready"), s.get("inflight"), s.get("set_aside")), (1, 0, 0), "l1 ready, nothing in flight or aside")
q = "sukn"
offer(q, k1, "x1", b"sealed")
offer(q, None, "x2", b"plain")
eq(got(take(q, None, "--count", "1")), {"x2": b"plain"}, "a take without any key file gets the plain one behind")
eq((stats(q) or {}).get("ready"), 1, "the sealed one stays ready")

section("... nor, on a sharded queue, the shards after the one a take starts on")
q = "sukq"
eq(dq("config", q, "--shards", "4").rc, 0, "config --shards 4")
for i in range(16):
    offer(q, k2, f"k2-{i}", b"for k2")
lists = R.cmd("KEYS", f"dq:{{{q}~*}}:r")
ok(len(lists) == 4 and all(R.cmd("LLEN", k) > 0 for k in lists), "every shard holds items sealed for k2", lists)
for i in range(4):  # a take starts on a shard picked at random
    offer(q, k1, f"k1-{i}", b"for k1")
    eq(got(take(q, k1, "--count", "1")), {f"k1-{i}": b"for k1"}, f"take {i + 1}: the k1 item, on whatever shard")
r = take(q, k1)
ok(r.rc == 3 and ID2 in r.errtext, "only k2 items left: exit 3 naming the key", r)
eq((stats(q) or {}).get("ready"), 16, "the k2 items all stay ready")

section("... nor a running work process")
q = "sukw"
out = os.path.join(tmp, "worked-k1")
offer(q, k2, "w1", b"for k2")
for i in range(2, 5):
    offer(q, k1, f"w{i}", f"work-{i}".encode())
w = bg_dq("--key-file", k1, "work", q, "--exec", f"cat >> {out}; echo >> {out}")
ok(wait_for(lambda: os.path.exists(out) and open(out, "rb").read().count(b"\n") >= 3, 10),
   "work with k1: the three items behind w1 run", w.err)
offer(q, k1, "w5", b"work-5")
ok(wait_for(lambda: os.path.exists(out) and open(out, "rb").read().count(b"\n") >= 4, 10),
   "... and one offered later", w.err)
w.stop()
eq(sorted(open(out, "rb").read().split()) if os.path.exists(out) else [],
   [f"work-{i}".encode() for i in range(2, 6)], "each once, opened")
eq(((stats(q) or {}).get("ready"), aside(q)), (1, []), "w1 still ready, nothing set aside")
eq(got(take(q, k2)), {"w1": b"for k2"}, "a holder of k2 takes w1")

for f in os.listdir(tmp):
    os.remove(os.path.join(tmp, f))
os.rmdir(tmp)
finish()
