"""python_client.py - the Python client (clients/python/delayq) against a real
server: the protocol's test vectors (tests/protocol/vectors.json, PROTOCOL.md)
run verbatim; each verb of the client, and its refusals (bad input, a sharded
queue, no library); mixed runs with real processes on one queue: C producers
(delayq offer --batch) and Python consumers with leases, and the reverse
(Python producers, delayq take), every item delivered once and none early;
and the Python Scheduler alone delivering delayed items to a Python consumer.

Run with --role ROLE ... it is one of those processes instead (a producer, a
consumer or a scheduler), speaking JSON lines on stdout.
"""
# tier: slow (about 10 s): make test runs it, make test-fast does not
import json
import os
import random
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
try:
    import delayq  # noqa: E402
except ImportError as exc:  # a failure, not a skip: the client is part of the project
    print(f"python_client.py: {exc}: install python3-redis (make deps)", file=sys.stderr)
    sys.exit(1)


# ------------------------------------------------------------ the processes

def role(argv):
    """A producer, consumer or scheduler process of the mixed runs."""
    what, url, queue = argv[0], argv[1], argv[2]
    client = delayq.Client(url)
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    if what == "produce":  # produce URL QUEUE PREFIX N MAX_DELAY_MS
        prefix, n, spread = argv[3], int(argv[4]), int(argv[5])
        for start in range(0, n, 20):
            items = [delayq.Item(f"p{i}", random.randint(0, spread), id=f"{prefix}-{i}")
                     for i in range(start, min(n, start + 20))]
            for o in client.offer_many(queue, items):
                print(json.dumps({"id": o.id, "due_ms": o.due_ms}), flush=True)
            time.sleep(0.01)
    elif what == "consume":  # consume URL QUEUE LEASE_MS (0: none)
        lease = int(argv[3]) or None
        while not stop:
            for m in client.take(queue, 10, wait_ms=300, lease_ms=lease):
                print(json.dumps({"id": m.id, "due_ms": m.due_ms, "ready_ms": m.ready_ms,
                                  "payload": m.payload.decode()}), flush=True)
                if lease and not client.ack(queue, m.id, m.token):
                    print(json.dumps({"ack_failed": m.id}), flush=True)
    elif what == "schedule":  # schedule URL QUEUE...
        sched = delayq.Scheduler(client, argv[2:], safety_check_ms=2000)
        signal.signal(signal.SIGTERM, lambda *a: sched.stop(0))
        sched.run()


if len(sys.argv) > 1 and sys.argv[1] == "--role":
    role(sys.argv[2:])
    sys.exit(0)

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(HERE, "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

PY = sys.executable
r = dq("functions", "load")
ok(r.rc == 0, "delayq functions load", r)
client = delayq.Client(URL)


def py_role(*args):
    return Bg([PY, os.path.abspath(__file__), "--role"] + [str(a) for a in args],
              name="python " + " ".join(str(a) for a in args[:3]))


def server_now():
    s, us = client.redis.time()
    return s * 1000 + us // 1000


# ------------------------------------------------------------ vectors

def vec_match(want, got, wins):
    """Whether reply got matches want (PROTOCOL.md, Test vectors). wins: the
    server ms before and after each marked call, "now" the current one's. A
    number may come as an integer or as its decimal text."""
    if isinstance(want, str) and want.startswith("<") and want.endswith(">"):
        if want == "<int>":
            return isinstance(got, int) or (isinstance(got, bytes) and got.lstrip(b"-").isdigit())
        name, _, add = want[1:-1].partition("+")
        win = wins[name]
        return (isinstance(got, (int, bytes)) and str(int(got)) == _text(got) and
                win[0] + int(add or 0) <= int(got) <= win[1] + int(add or 0))
    if isinstance(want, dict) and "entry" in want:
        m = delayq.client.decode_entry("v", got, None) if isinstance(got, bytes) else None
        e = want["entry"]
        return (m is not None and m.id == e["id"] and m.payload == e["payload"].encode() and
                m.attempt == e["attempt"] and m.error == e["error"].encode())
    if isinstance(want, list):
        return (isinstance(got, list) and len(got) == len(want) and
                all(vec_match(w, g, wins) for w, g in zip(want, got)))
    if isinstance(want, str):
        return got == want.encode()
    if isinstance(want, int) and isinstance(got, bytes):
        return got == str(want).encode()
    return got == want


def _text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def vec_fill(args, binds):
    out = []
    for a in args:
        for k, v in binds.items():
            a = a.replace("{{" + k + "}}", str(v))
        out.append(a)
    return out


def run_vectors():
    with open(os.path.join(ROOT, "tests", "protocol", "vectors.json")) as f:
        doc = json.load(f)
    for item_id, bucket in doc["buckets"].items():
        eq(delayq.client.id_bucket(item_id), bucket, f"vector: bucket of id {item_id}")
    lib = client.library()
    for case in doc["cases"]:
        binds, subs = {}, {}
        wins = {"now": (0, 0)}
        for n, step in enumerate(case["steps"]):
            what = f"vector {case['name']!r}, step {n + 1}"
            if "sleep_ms" in step:
                time.sleep(step["sleep_ms"] / 1000)
                continue
            if "subscribe" in step:
                conn = client.redis.connection_pool.make_connection()
                conn.connect()
                conn.send_command("SSUBSCRIBE", step["subscribe"])
                conn.read_response()
                subs[step["subscribe"]] = conn
                continue
            if "announced" in step:
                conn = subs[step["announced"]]
                got = conn.read_response() if conn.can_read(timeout=2) else None
                ok(isinstance(got, list) and vec_match(step["message"], got[2], wins),
                   f"{what}: announced {step['message']}", got)
                continue
            before = server_now()
            try:
                if "redis" in step:
                    got = client.redis.execute_command(*step["redis"])
                else:
                    fn = step.get("fcall") or step.get("fcall_ro")
                    cmd = "FCALL" if "fcall" in step else "FCALL_RO"
                    got = client.redis.execute_command(cmd, f"{lib}_{fn}", len(step["keys"]),
                                                       *step["keys"], *vec_fill(step["args"], binds))
            except Exception as e:  # noqa: BLE001 - an error reply is a result here
                got = e
            wins["now"] = (before, server_now())
            if "mark" in step:
                wins[step["mark"]] = wins["now"]
            if "error" in step:
                # redis-py drops an error reply's leading "ERR ".
                text = step["error"][4:] if step["error"].startswith("ERR ") else step["error"]
                ok(isinstance(got, Exception) and str(got) == text,
                   f"{what}: error {step['error']}", got)
                if text.startswith("delayq:") and isinstance(got, Exception):
                    word = text[len("delayq:"):].split(" ", 1)[0]
                    eq(delayq.client._error(got, "vx").refusal, word, f"{what}: the client's refusal class")
            elif "reply" in step:
                ok(not isinstance(got, Exception) and vec_match(step["reply"], got, wins),
                   f"{what}: reply {json.dumps(step['reply'])[:80]}", got)
            elif isinstance(got, Exception):
                ok(False, f"{what}: no error", got)
            for k, i in step.get("bind", {}).items():
                binds[k] = got[i] if isinstance(got, list) else None
        for conn in subs.values():
            conn.disconnect()


section("the protocol's test vectors")
run_vectors()

# ------------------------------------------------------------ each verb

section("each verb of the client")
t0 = server_now()
o = client.offer("pv", "now")
t1 = server_now()
ok(len(o.id) == 22 and o.status == "added" and o.state == "ready" and t0 <= o.due_ms <= t1,
   "offer: a generated id, ready at once, due at the server's now", o)
o2 = client.offer("pv", b"\x00\xffbin", 60000, id="later-1")
ok(o2.state == "pending" and t0 + 60000 <= o2.due_ms <= server_now() + 60000, "offer with a delay: pending", o2)
eq(client.offer("pv", "x", 1, id="later-1", nx=True).status, "kept", "offer nx keeps a pending item")
eq(client.lookup("pv", "later-1").state, "pending", "lookup: pending")
eq(client.redis.sismember("dq:queues", "pv"), True, "the first offer registers the queue in dq:queues")
many = client.offer_many("pv", [delayq.Item(f"m{i}", 0, id=f"many-{i}") for i in range(250)])
eq([m.id for m in many], [f"many-{i}" for i in range(250)], "offer_many: 250 items (3 calls), ids in order")
got = client.take("pv", 1000)
eq(len(got), 251, "take count 1000 without a lease takes all 251 ready items")
ok(got[0].id == o.id and got[0].payload == b"now" and got[0].token is None and got[0].attempt == 1,
   "the first is the first offered, without a token", got[0])
eq(client.lookup("pv", o.id).state, "unknown", "a take without a lease hands the item out for good")
client.offer_many("pv", [delayq.Item("b", 0, id=f"batch-{i}") for i in range(70)])
got = client.take("pv", 70, lease_ms=30000)
eq(len(got), 70, "a leased take of 70")
acks = client.ack_many("pv", [(m.id, m.token) for m in got[:69]] + [(got[69].id, got[0].token)])
eq(acks, [True] * 69 + [False], "ack_many: 69 acked, one with another item's token not")
eq(client.ack("pv", got[69].id, got[69].token), True, "... which its own token acks")
eq(client.take("pv", 5, wait_ms=0), [], "take with nothing ready: []")
w0 = time.monotonic()
eq(client.take("pv", 5, wait_ms=300), [], "take waiting 300 ms with nothing ready: []")
ok(0.25 <= time.monotonic() - w0 < 2 * SLOW, "... after about 300 ms", time.monotonic() - w0)
eq(client.cancel("pv", "later-1"), True, "cancel a pending item")
eq(client.cancel("pv", "later-1"), False, "cancel it again: False")

# A waiting take is woken by the wake list (no scheduler: due now).
sched = delayq.Scheduler(client, ["pv"], safety_check_ms=2000).start()
client.offer("pv", "soon", 400, id="soon-1")
w0 = time.monotonic()
got = client.take("pv", 1, wait_ms=5000, lease_ms=2000)
el = time.monotonic() - w0
ok(len(got) == 1 and got[0].id == "soon-1" and got[0].token, "a leased take waits for a delayed item", got)
ok(0.3 <= el < 3 * SLOW, "... and gets it when due (about 400 ms), not before", el)
if got:
    m = got[0]
    st = client.lookup("pv", "soon-1")
    eq((st.state, st.attempts >= 0), ("inflight", True), "lookup: in flight")
    end = client.extend("pv", m.id, m.token, 3000)
    ok(end is not None and end >= server_now() + 2500, "extend: the lease ends 3 s from now", end)
    n = client.nack("pv", m.id, m.token, 100, "broken")
    ok(n is not None and not n.dead, "nack: a retry", n)
    eq(client.nack("pv", m.id, m.token, 100, "x"), None, "a second nack with that token: None (stale)")
    got = client.take("pv", 1, wait_ms=3000, lease_ms=300)
    ok(len(got) == 1 and got[0].attempt == 2 and got[0].error == b"broken", "the retry comes back: attempt 2, error kept",
       got)
    time.sleep(0.8)  # its lease runs out: the scheduler returns it
    again = client.take("pv", 1, wait_ms=3000, lease_ms=5000)
    ok(len(again) == 1 and again[0].id == "soon-1" and again[0].attempt == 3,
       "an item whose lease ran out comes back (attempt 3)", again)
    eq(client.ack("pv", got[0].id, got[0].token), False, "ack with the expired lease's token: False")
    eq(client.ack("pv", again[0].id, again[0].token), True, "ack with the current token: True")
    eq(client.lookup("pv", "soon-1").state, "unknown", "acked: gone")
sched.stop()

section("refusals")
for bad, what in ((lambda: client.offer("bad queue", "x"), "a bad queue name"),
                  (lambda: client.offer("pv", "x", id="a b"), "an id with a space"),
                  (lambda: client.offer("pv", "x", -1), "a negative delay"),
                  (lambda: client.offer("pv", b"\0dqs1....", 0), "a payload that looks sealed"),
                  (lambda: client.take("pv", 0), "count 0"),
                  (lambda: client.take("pv", 1, lease_ms=0), "lease_ms 0"),
                  # The protocol's bounds (docs/protocol.md), checked before
                  # anything is sent: the functions would refuse them as a
                  # client of another version (proto).
                  (lambda: client.offer("pv", "x", due_ms=2 ** 42), "a due time past 4398046511103"),
                  (lambda: client.offer("pv", "x", 2 ** 42), "a delay past 4398046511103"),
                  (lambda: client.take("pv", 1, lease_ms=10 ** 13), "lease_ms past 4398046511103"),
                  (lambda: client.take("pv", 1, lease_ms=1000, max_attempts=10 ** 9), "max_attempts past 999999999"),
                  (lambda: client.extend("pv", "i", "t.1.1", 10 ** 13), "an extend past 4398046511103"),
                  (lambda: client.nack("pv", "i", "t.1.1", 10 ** 13), "a nack's delay past 4398046511103"),
                  # bytes(5) would be five zero bytes: only bytes or text.
                  (lambda: client.offer("pv", 5), "a payload that is an int"),
                  (lambda: client.offer("pv", None), "a payload that is None"),
                  (lambda: client.offer("pv", [104, 105]), "a payload that is a list"),
                  (lambda: client.offer_many("pv", [delayq.Item("ok"), delayq.Item(7)]), "an int among a batch's"),
                  (lambda: client.nack("pv", "i", "t.1.1", 10, error=5), "a nack's error that is an int"),
                  (lambda: client.take("pv", 1, holder="w1"), "a holder without a lease"),
                  (lambda: client.take("pv", 1, lease_ms=1000, holder="w" * 65), "a holder of 65 bytes"),
                  (lambda: client.take("pv", 1, lease_ms=1000, holder="a\nb"), "a holder with a newline"),
                  (lambda: client.take("pv", 1, lease_ms=1000, holder=""), "an empty holder")):
    try:
        bad()
        ok(False, f"{what} is refused")
    except delayq.DelayqError as e:
        ok(True, f"{what} is refused: {e}")
eq(redis("EXISTS", "dq:{pv}:r"), 0, "... and nothing was written")
far = client.offer("pv", bytearray(b"far"), due_ms=2 ** 42 - 1, id="far-1")
eq((far.status, far.due_ms), ("added", 2 ** 42 - 1), "a due time of 4398046511103 (the last allowed), bytearray payload")
eq(client.cancel("pv", "far-1"), True, "... cancelled")
client.offer("pv", "held", id="held-1")
got = client.take("pv", 1, lease_ms=5000, holder="worker-7 é")
eq([m.id for m in got], ["held-1"], "a leased take naming its holder")
st = client.lookup("pv", "held-1")
eq((st.state, st.holder), ("inflight", "worker-7 é"), "lookup shows the holder while the lease lasts")
r = dq("list", "pv", "--state", "inflight", "--json")
ok(r.rc == 0 and b"worker-7" in r.out, "delayq list --state inflight shows it too", r)
eq(client.ack("pv", "held-1", got[0].token) if got else None, True, "... acked")
eq(client.lookup("pv", "held-1").holder, "", "an unknown id has no holder")
redis("HSET", "dq:{sh}:n", "shards", "3")
try:
    client.offer("sh", "x")
    ok(False, "an offer to a sharded queue is refused")
except delayq.ShardedQueueError as e:
    ok("sharded (3 shards)" in str(e) and e.shards == 3, "an offer to a sharded queue is refused clearly", str(e))
eq(redis("EXISTS", "dq:{sh}:r"), 0, "... and writes nothing")
try:
    delayq.Scheduler(client, ["sh"]).run()
    ok(False, "a scheduler refuses a sharded queue")
except delayq.ShardedQueueError:
    ok(True, "a scheduler refuses a sharded queue")
redis("FUNCTION", "FLUSH")
try:
    delayq.Client(URL).offer("pv", "x")
    ok(False, "no library: NoLibraryError")
except delayq.NoLibraryError as e:
    ok("delayq functions load" in str(e), "no library: NoLibraryError says what loads it", str(e))
eq(dq("functions", "load").rc, 0, "delayq functions load again")
ok(client.offer("pv", "x").status == "added", "a client whose library went finds the new one")
client.take("pv", 10)
# A rolling upgrade leaves a release before the timing wheel loaded next to
# this one (protocol minor 0, and here a name first in byte order): a new
# client takes the highest minor, the one that sees the wheel's items.
OLD = "delayq_000000000000"
redis("FUNCTION", "LOAD", f"#!lua name={OLD}\nredis.register_function{{function_name='{OLD}_protocol', "
      "callback=function() return {1, 0} end, flags={'no-writes'}}")
ours = delayq.Client(URL).library()
ok(ours != OLD and ours.startswith("delayq_"), "with a minor-0 library loaded too, a client takes this release's", ours)
redis("FUNCTION", "DELETE", OLD)

section("a least-privilege user (delayq acl): the library named")
pw = os.path.join(RDIR, "py_client_pw")
with open(pw, "w") as f:
    f.write("py-client-password-1\n")
os.chmod(pw, 0o600)
r = dq("acl", "pa", "--user", "pyapp", "--password-file", pw, redis=False)
ok(r.rc == 0 and r.text.startswith("ACL SETUSER "), "delayq acl pa --user pyapp", r)
eq(client.redis.execute_command(*r.text.split()), b"OK", "ACL SETUSER pyapp")
user_url = URL.replace("redis://", "redis://pyapp:py-client-password-1@")
try:
    delayq.Client(user_url).offer("pa", "x")
    ok(False, "without FUNCTION LIST: NoLibraryError")
except delayq.NoLibraryError as e:
    ok("+function|list" in str(e) and "library=" in str(e), "without FUNCTION LIST: NoLibraryError says what to do",
       str(e))
app = delayq.Client(user_url, library=client.library())
o = app.offer("pa", "x", id="pa-1")
got = app.take("pa", 1, wait_ms=1000, lease_ms=5000)
ok(o.status == "added" and len(got) == 1 and app.ack("pa", "pa-1", got[0].token),
   "with library= the user offers, takes and acks", got)
eq(app.lookup("pa", "pa-1").state, "unknown", "... and looks up (FCALL_RO)")
try:
    app.offer("pv", "x")
    ok(False, "the user may not offer to another queue")
except delayq.DelayqError as e:
    ok("NOPERM" in str(e) or "permission" in str(e).lower(), "the user may not offer to another queue", str(e))
app.close()
# An upgrade loads the next release's library under another name and
# deletes this one: the named client says the name is gone, not that no
# library is loaded.
gone = delayq.Client(URL, library="delayq_0123456789ab")
try:
    gone.offer("pv", "x")
    ok(False, "a named library that is gone: NoLibraryError")
except delayq.NoLibraryError as e:
    ok("delayq_0123456789ab" in str(e) and "functions status" in str(e),
       "a named library that is gone: NoLibraryError names it and says where the new name is", str(e))
gone.close()
client.redis.execute_command("ACL", "DELUSER", "pyapp")  # users outlive the FLUSHALL between tests

# ------------------------------------------------------------ mixed runs


def check_delivery(what, lines, expected, dues=None):
    """Every expected id delivered exactly once, none before its due time."""
    seen = {}
    early, dup = [], []
    for _, line in lines:
        m = json.loads(line)
        if "id" not in m:
            ok(False, f"{what}: {line!r}")
            continue
        if m["id"] in seen:
            dup.append(m["id"])
        seen[m["id"]] = m
        due = dues.get(m["id"], m["due_ms"]) if dues else m["due_ms"]
        if m["ready_ms"] < due or m["due_ms"] != due:
            early.append(m)
    eq(sorted(seen), sorted(expected), f"{what}: every item delivered")
    eq(dup, [], f"{what}: none twice")
    eq(early, [], f"{what}: none early (ready_ms >= due_ms, the due time offered)")


def total(procs):
    return sum(p.count() for p in procs)


section("C producers, Python consumers with leases, one queue")
N = 300
sched_c = bg_dq("schedule", "mix1")
cons = [py_role("consume", URL, "mix1", 30000) for _ in range(3)]
prods = []
expected = []
for p in range(2):
    lines = []
    for i in range(N):
        lines.append(f"{random.randint(0, 1500)}ms\tc{p}-{i}\tpayload {i}")
        expected.append(f"c{p}-{i}")
    prods.append(bg_dq("offer", "mix1", "--batch", "-", stdin=("\n".join(lines) + "\n").encode()))
for p in prods:
    eq(p.wait(20), 0, "a C producer (delayq offer --batch -) exits 0")
ok(wait_for(lambda: total(cons) >= 2 * N, 30), "the Python consumers get 600 items", total(cons))
time.sleep(0.3)
for c in cons:
    c.stop()
sched_c.stop()
check_delivery("C to Python", [x for c in cons for x in c.snapshot()], expected)
ok(all(c.count() > 0 for c in cons), "each Python consumer got some", [c.count() for c in cons])
eq(stats("mix1").get("inflight"), 0, "all acked: none in flight")

section("Python producers, C consumers (delayq take), Python scheduler")
sched_p = py_role("schedule", URL, "mix2")
takers = [bg_dq("take", "mix2", "--count", "0", "--json", "--no-scheduler") for _ in range(2)]
time.sleep(0.3)
prods = [py_role("produce", URL, "mix2", f"py{p}", N, 1500) for p in range(2)]
for p in prods:
    eq(p.wait(30), 0, "a Python producer exits 0")
dues = {json.loads(x)["id"]: json.loads(x)["due_ms"] for p in prods for _, x in p.snapshot()}
eq(len(dues), 2 * N, "the producers print 600 offers")
ok(wait_for(lambda: total(takers) >= 2 * N, 30), "the C consumers get 600 items", total(takers))
time.sleep(0.3)
for t in takers:
    t.stop()
sched_p.stop()
check_delivery("Python to C", [x for t in takers for x in t.snapshot()], list(dues), dues)

section("Python alone: producer, Scheduler and consumer")
sched_p = py_role("schedule", URL, "mix3")
con = py_role("consume", URL, "mix3", 10000)
sent = client.offer_many("mix3", [delayq.Item(f"x{i}", 200 + 10 * i, id=f"alone-{i}") for i in range(100)])
ok(wait_for(lambda: con.count() >= 100, 20), "the Python consumer gets 100 delayed items", con.count())
# The scheduler's subscription cut: it connects again, subscribes and
# catches up; the items offered meanwhile and after still come on time.
pending_early = client.offer_many("mix3", [delayq.Item("y", 150, id=f"cut-{i}") for i in range(10)])
ok(redis("CLIENT", "KILL", "TYPE", "pubsub") >= 1, "the scheduler's subscription is cut (CLIENT KILL TYPE pubsub)")
time.sleep(0.4)
sent += pending_early + client.offer_many("mix3", [delayq.Item("z", 300, id=f"after-{i}") for i in range(10)])
ok(wait_for(lambda: con.count() >= 120, 5), "after the cut, the 20 items offered around it come too", con.count())
ok(sched_p.running(), "the scheduler process still runs")
time.sleep(0.3)
con.stop()
sched_p.stop()
lines = con.snapshot()
check_delivery("Python alone", lines, [o.id for o in sent], {o.id: o.due_ms for o in sent})
late = sorted(json.loads(x)["ready_ms"] - json.loads(x)["due_ms"] for _, x in lines)
if late:
    note(f"lateness (ready - due) median {late[len(late) // 2]} ms, max {late[-1]} ms")
ok(late and late[len(late) // 2] < 200 * SLOW, "the Scheduler moves items on time (median lateness < 200 ms)", late)

finish()
