"""http_work.py - the work verbs of `delayq serve`'s HTTP API (issue 38):
offer (one, many), take (with and without a lease, waiting), ack, nack,
extend and release (issue 39: back with no attempt counted, stale 409,
consume role), the consumers endpoint (serve listed as its takes'
consumer), with the token roles, over real HTTP to a real serve process.

Checks: each verb's answer and its effect (looked up through the API and
Redis); 4 long-polling consumers with leases and 2 producers, every item
delivered once and none before its due time on the server's clock
(due_ms <= ready_ms, and due_ms as offered); a consumer that stops acking
sees its items come back after the lease (attempt 2); 200 takes waiting at
once while /metrics answers within a bound and the server's thread count
stays small, then all 200 served by one batch of offers; every error status
(400 for bad JSON, unknown fields, bad ids, tokens, durations and sizes,
changing nothing; 401, 403 by role and read-only, 404, 405, 409 stale, 413,
421).
"""
import base64
import json
import os
import random
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

ADMIN = "admin-token-of-http-work"
PRODUCE = "produce-token-of-http-work"
CONSUME = "consume-token-of-http-work"
tmp = tempfile.mkdtemp(prefix="delayq-httpwork.")
tokfile = private_file(tmp, "tokens", f"# roles\n{ADMIN}\nproduce {PRODUCE}\nconsume {CONSUME}\n")


call = http_call  # (status, JSON or bytes) of one request: dqtest.py


def start_server(token=True):
    port = closed_port()
    p = bg_dq("serve", "--listen", f"127.0.0.1:{port}", *(["--token-file", tokfile] if token else []))
    up = wait_for(lambda: call(port, "GET", "/api/queues", timeout=2)[0] == 200, 10)
    ok(up, f"serve answers on 127.0.0.1:{port}", p.err if not up else None)
    return p, port


def q(name, rest=""):
    return f"/api/queues/{name}{rest}"


server, port = start_server()

# ------------------------------------------------------------------ each verb
section("offer, take, ack, nack, extend")
st, r = call(port, "POST", q("hw", "/items"), {"payload": "one", "delay_ms": 0}, PRODUCE)
eq(st, 200, "offer of one item answers 200")
ok(isinstance(r, dict) and isinstance(r.get("id"), str) and r["id"], "its answer is {\"id\": ...}", r)
one = r.get("id") if isinstance(r, dict) else None
now = server_ms()
st, r = call(port, "POST", q("hw", "/items"),
             [{"payload": "two", "id": "i2"}, {"payload_base64": base64.b64encode(b"\x00\xff\xfe").decode(),
                                              "id": "i3", "due_ms": now + 300},
              {"payload": "kept?", "id": "i2", "nx": True}], PRODUCE)
eq((st, r), (200, {"ids": ["i2", "i3", "i2"]}), "offer of many answers the ids in order")
st, r = call(port, "GET", q("hw", "/items/i3"))
eq((st, r.get("state"), r.get("due_ms")), (200, "pending", now + 300), "i3 is pending with its due_ms")
st, r = call(port, "POST", q("hw", "/take"), {"count": 2}, CONSUME)
eq(st, 200, "take without a lease answers 200")
items = r.get("items", []) if isinstance(r, dict) else []
eq(sorted(i["id"] for i in items), sorted([one, "i2"]), "it gives the two ready items")
eq(sorted(i.get("payload") for i in items), ["one", "two"], "with their payloads (nx kept i2's)")
ok(all("token" not in i and "attempt" not in i and i["due_ms"] <= i["ready_ms"] for i in items),
   "no lease: no token nor attempt; due_ms <= ready_ms", items)
t0 = time.monotonic()
st, r = call(port, "POST", q("hw", "/take"), {"wait_ms": 5000, "lease_ms": 5000}, CONSUME)
waited = time.monotonic() - t0
items = r.get("items", []) if isinstance(r, dict) else []
eq([i["id"] for i in items], ["i3"], "a waiting take gets i3 when it comes due (the serve's scheduler)")
ok(items and items[0].get("payload_base64") == base64.b64encode(b"\x00\xff\xfe").decode() and
   "payload" not in items[0], "bytes that are not UTF-8 come as payload_base64", items)
ok(items and items[0]["ready_ms"] >= items[0]["due_ms"] == now + 300, "not before its due time", items)
ok(items and items[0].get("attempt") == 1 and items[0].get("token"), "a lease gives attempt 1 and a token", items)
ok(waited < 4 * SLOW, f"it came in {waited:.2f} s, not at the end of wait_ms")
tok3 = items[0]["token"] if items else "x"
st, r = call(port, "POST", q("hw", "/items/i3/extend"), {"token": tok3, "lease_ms": 60000}, CONSUME)
eq(st, 200, "extend answers 200")
st, r = call(port, "GET", q("hw", "/items/i3"))
ok(st == 200 and r.get("state") == "inflight" and r.get("lease_end_ms", 0) >= server_ms() + 50000,
   "the lease now ends a minute away", r)
st, r = call(port, "POST", q("hw", "/items/i3/nack"), {"token": tok3, "delay_ms": 0, "error": "boom"}, CONSUME)
eq((st, r), (200, {"dead": False}), "nack answers 200, not dead")
st, r = call(port, "POST", q("hw", "/take"), {"wait_ms": 3000, "lease_ms": 5000}, CONSUME)
items = r.get("items", []) if isinstance(r, dict) else []
ok(len(items) == 1 and items[0]["id"] == "i3" and items[0]["attempt"] == 2, "the nacked item comes back, attempt 2",
   r)
tok3b = items[0]["token"] if items else "x"
st, r = call(port, "POST", q("hw", "/items/i3/ack"), {"token": tok3}, CONSUME)
eq(st, 409, "ack with the first (stale) token answers 409")
st, r = call(port, "POST", q("hw", "/items/i3/ack"), {"token": tok3b}, ADMIN)
eq((st, r), (200, {"acked": True}), "ack with the current token answers 200 (admin may too)")
st, r = call(port, "POST", q("hw", "/items/i3/ack"), {"token": tok3b}, CONSUME)
eq(st, 409, "a second ack answers 409")
st, r = call(port, "POST", q("hw", "/items/nosuch/ack"), {"token": "abc"}, CONSUME)
eq(st, 409, "an unknown id answers 409")
st, r = call(port, "POST", q("hw", "/take"), {}, CONSUME)
eq((st, r), (200, {"items": []}), "nothing ready and no wait: an empty list at once")
t0 = time.monotonic()
st, r = call(port, "POST", q("hw", "/take"), {"wait_ms": 700}, CONSUME)
waited = time.monotonic() - t0
ok(st == 200 and r == {"items": []} and 0.6 <= waited < 5 * SLOW, f"wait_ms 700: empty after {waited:.2f} s", r)

section("release (issue 39): back uncounted; stale 409; the consumers endpoint")
st, r = call(port, "POST", q("hw", "/items"), {"payload": "res", "id": "r1"}, PRODUCE)
eq(st, 200, "offer r1")
for n in range(3):
    st, r = call(port, "POST", q("hw", "/take"), {"lease_ms": 30000, "wait_ms": 5000}, CONSUME)
    items = r.get("items", []) if isinstance(r, dict) else []
    ok(len(items) == 1 and items[0]["id"] == "r1" and items[0]["attempt"] == 1, f"take {n + 1} of r1: attempt 1", r)
    tokr = items[0]["token"] if items else "x"
    st, r = call(port, "POST", q("hw", "/items/r1/release"), {"token": tokr}, CONSUME)
    eq((st, r), (200, {"released": True}), f"release {n + 1} answers 200, released")
st, r = call(port, "POST", q("hw", "/items/r1/release"), {"token": tokr}, CONSUME)
eq(st, 409, "a second release with the same (stale) token answers 409")
st, r = call(port, "POST", q("hw", "/items/r1/release"), {"token": tokr}, PRODUCE)
eq(st, 403, "produce may not release")
st, r = call(port, "POST", q("hw", "/items/r1/release"), {"token": tokr, "error": "x"}, CONSUME)
eq(st, 400, "release takes no error text")
st, r = call(port, "POST", q("hw", "/take"), {"lease_ms": 30000, "wait_ms": 5000}, CONSUME)
items = r.get("items", []) if isinstance(r, dict) else []
tokr = items[0]["token"] if items else "x"
st, r = call(port, "POST", q("hw", "/items/r1/release"), {"token": tokr, "delay_ms": 60000}, CONSUME)
eq(st, 200, "release with delay_ms answers 200")
st, r = call(port, "GET", q("hw", "/items/r1"))
ok(st == 200 and r.get("state") == "pending" and r.get("due_ms", 0) >= server_ms() + 50000,
   "released with delay_ms 60000: pending a minute away", r)
st, r = call(port, "GET", q("hw", "/consumers"))
cons = r.get("consumers", []) if isinstance(r, dict) else []
ok(st == 200 and len(cons) == 1 and cons[0].get("queue") == "hw" and
   cons[0].get("name", "").endswith(f":{server.pid}") and "in_hand" in cons[0] and "last_seen_ago_ms" in cons[0],
   "GET .../consumers lists serve (host:pid) as the consumer of the queue it took from", r)
st, r = call(port, "GET", q("hw-never-taken", "/consumers"))
ok(st in (200, 404) and (st == 404 or r == {"consumers": []}), "a queue nobody takes from lists none", (st, r))
st, r = call(port, "POST", q("hw", "/consumers"), {}, ADMIN)
eq(st, 405, "POST .../consumers answers 405")

# ------------------------------------------------------------------ errors
section("every error status, changing nothing")
before = redis("DBSIZE")
bad = [
    ("POST", "/items", b"{not json", PRODUCE, "bad JSON"),
    ("POST", "/items", b"[]", PRODUCE, "an empty list"),
    ("POST", "/items", json.dumps([{"payload": "x"}] * 1001).encode(), PRODUCE, "1,001 items"),
    ("POST", "/items", b'{"payload": "x", "colour": 1}', PRODUCE, "an unknown field"),
    ("POST", "/items", b'[{"payload": "ok"}, {"payload": "x", "id": "bad id"}]', PRODUCE, "a bad id (in a list)"),
    ("POST", "/items", b'{"payload": "x", "delay_ms": -1}', PRODUCE, "a negative delay"),
    ("POST", "/items", b'{"payload": "x", "delay_ms": 1.5}', PRODUCE, "a delay that is no integer"),
    ("POST", "/items", b'{"payload": "x", "delay_ms": 1, "due_ms": 1}', PRODUCE, "delay_ms and due_ms"),
    ("POST", "/items", b'{"payload": "x", "payload_base64": "AA=="}', PRODUCE, "payload and payload_base64"),
    ("POST", "/items", b'{"payload_base64": "***"}', PRODUCE, "bad base64"),
    ("POST", "/items", b'{"payload": 5}', PRODUCE, "a payload that is no string"),
    ("POST", "/items", b'{"payload": "x", "nx": 1}', PRODUCE, "nx that is no boolean"),
    ("POST", "/items", json.dumps({"payload": "x" * ((1 << 20) + 1)}).encode(), PRODUCE, "a payload over 1 MiB"),
    ("POST", "/take", b'{"count": 0}', CONSUME, "count 0"),
    ("POST", "/take", b'{"count": 65}', CONSUME, "count 65"),
    ("POST", "/take", b'{"wait_ms": 60001}', CONSUME, "wait_ms over 60000"),
    ("POST", "/take", b'{"lease_ms": 0}', CONSUME, "lease_ms 0"),
    ("POST", "/take", b'{"count": 1, "x": 1}', CONSUME, "an unknown take field"),
    ("POST", "/take", b'[1]', CONSUME, "a take body that is no object"),
    ("POST", "/items/i2/ack", b'{}', CONSUME, "an ack without a token"),
    ("POST", "/items/i2/ack", b'{"token": "has space"}', CONSUME, "a malformed token"),
    ("POST", "/items/i2/ack", b'{"token": "abc", "delay_ms": 1}', CONSUME, "a field ack does not take"),
    ("POST", "/items/i2/nack", b'{"token": "abc", "delay_ms": -5}', CONSUME, "a negative nack delay"),
    ("POST", "/items/i2/extend", b'{"token": "abc"}', CONSUME, "extend without lease_ms"),
    ("POST", "/items/i2/extend", b'{"token": "abc", "lease_ms": "9"}', CONSUME, "a lease_ms that is a string"),
]
for method, rest, raw, token, what in bad:
    st, r = call(port, method, q("hw", rest), raw=raw, token=token)
    ok(st == 400 and isinstance(r, dict) and r.get("error"), f"400 with an error: {what}", (st, r))
eq(redis("DBSIZE"), before, "none of them changed a key")
st, r = call(port, "GET", q("hw", "/items/i2"))
eq(st, 404, "i2 was taken and is gone still (nothing offered)")

roles = [
    ("POST", "/items", {"payload": "x"}, CONSUME, "consume may not offer"),
    ("DELETE", "/items/i2", None, CONSUME, "consume may not cancel"),
    ("POST", "/take", {}, PRODUCE, "produce may not take"),
    ("POST", "/items/i2/ack", {"token": "abc"}, PRODUCE, "produce may not ack"),
    ("POST", "/items/i2/nack", {"token": "abc"}, PRODUCE, "produce may not nack"),
    ("POST", "/items/i2/extend", {"token": "abc", "lease_ms": 5}, PRODUCE, "produce may not extend"),
    ("POST", "/dead/purge", None, PRODUCE, "produce may not purge"),
    ("POST", "/dead/redrive", None, CONSUME, "consume may not redrive"),
]
for method, rest, body, token, what in roles:
    st, r = call(port, method, q("hw", rest), body, token)
    ok(st == 403 and isinstance(r, dict) and "role" in r.get("error", ""), f"403: {what}", (st, r))
st, r = call(port, "POST", q("hw", "/items"), {"payload": "x"}, "not-the-token-at-all")
eq(st, 401, "an unknown token answers 401")
st, r = call(port, "POST", q("hw", "/items"), {"payload": "x"})
eq(st, 401, "no token answers 401")
eq(redis("DBSIZE"), before, "no refused request changed a key")
st, r = call(port, "PUT", q("hw", "/items"), {"payload": "x"}, PRODUCE)
eq(st, 405, "PUT .../items answers 405")
st, r = call(port, "GET", q("hw", "/take"))
eq(st, 405, "GET .../take answers 405")
st, r = call(port, "POST", q("hw", "/items/i2/frob"), {}, CONSUME)
eq(st, 404, "POST .../items/{id}/frob answers 404")
st, r = call(port, "POST", q("hw", "/take"), raw=b"{" + b" " * 70000 + b"}", token=CONSUME)
eq(st, 413, "a take body over 64 KiB answers 413")
st, r = call(port, "POST", q("hw", "/items"), raw=b"[" + b" " * (8 << 20) + b"]", token=PRODUCE)
eq(st, 413, "an offer body over 8 MiB answers 413")
st, r = call(port, "POST", q("hw", "/items"), {"payload": "x"}, PRODUCE, host="evil.example")
eq(st, 421, "a foreign Host still answers 421")
ro, roport = start_server(token=False)
st, r = call(roport, "POST", q("hw", "/items"), {"payload": "x"}, PRODUCE)
eq(st, 403, "a read-only server (no token file) answers 403 to an offer")
st, r = call(roport, "POST", q("hw", "/take"), {}, CONSUME)
eq(st, 403, "and to a take")
eq(ro.stop(), 0, "the read-only serve exits 0 on SIGTERM")

# ------------------------------------------------------------------ a consumer that stops acking
section("a lease that runs out")
st, r = call(port, "POST", q("lz", "/items"), [{"payload": f"p{i}", "id": f"l{i}"} for i in range(3)], PRODUCE)
eq(st, 200, "3 items offered")
st, r = call(port, "POST", q("lz", "/take"), {"count": 3, "wait_ms": 2000, "lease_ms": 600}, CONSUME)
got = sorted(i["id"] for i in r.get("items", [])) if isinstance(r, dict) else []
eq(got, ["l0", "l1", "l2"], "a consumer takes all 3 with a 600 ms lease, then stops acking")
st, r = call(port, "POST", q("lz", "/take"), {"count": 3}, CONSUME)
eq(r, {"items": []}, "while the lease runs, nobody else gets them")
back = []
end = time.monotonic() + 10 * SLOW
while len(back) < 3 and time.monotonic() < end:
    st, r = call(port, "POST", q("lz", "/take"), {"count": 3, "wait_ms": 1000, "lease_ms": 5000}, CONSUME)
    back += r.get("items", []) if isinstance(r, dict) else []
eq(sorted(i["id"] for i in back), ["l0", "l1", "l2"], "after the lease they come back to another consumer")
ok(all(i["attempt"] == 2 for i in back), "with attempt 2", back)
for i in back:
    call(port, "POST", q("lz", f"/items/{i['id']}/ack"), {"token": i["token"]}, CONSUME)

# ------------------------------------------------------------------ consumers and producers
section("4 long-polling consumers with leases, 2 producers")
N_PER = 150
delivered = []  # (id, due_ms, ready_ms)
errors = []
lock = threading.Lock()
offered = {}
stop = threading.Event()


def producer(k):
    rnd = random.Random(k)
    i = 0
    while i < N_PER:
        n = rnd.choice([1, 1, 5, 20])
        batch = []
        for _ in range(min(n, N_PER - i)):
            batch.append({"id": f"p{k}-{i}", "payload": f"v{k}-{i}", "delay_ms": rnd.randrange(0, 1500)})
            i += 1
        body = batch[0] if len(batch) == 1 else batch
        before_ms = server_ms()
        st, r = call(port, "POST", q("mix", "/items"), body, PRODUCE)
        if st != 200:
            errors.append(("offer", st, r))
            return
        with lock:
            for it in batch:
                offered[it["id"]] = before_ms + it["delay_ms"]


def consumer(k):
    while not stop.is_set():
        st, r = call(port, "POST", q("mix", "/take"), {"count": 8, "wait_ms": 1000, "lease_ms": 10000}, CONSUME)
        if st != 200:
            errors.append(("take", st, r))
            return
        for it in r["items"]:
            with lock:
                delivered.append((it["id"], it["due_ms"], it["ready_ms"], it["payload"]))
            st, a = call(port, "POST", q("mix", f"/items/{it['id']}/ack"), {"token": it["token"]}, CONSUME)
            if st != 200:
                errors.append(("ack", st, a))


threads = [threading.Thread(target=consumer, args=(k,)) for k in range(4)]
threads += [threading.Thread(target=producer, args=(k,)) for k in range(2)]
for t in threads:
    t.start()
wait_for(lambda: len(delivered) >= 2 * N_PER or errors, 40)
time.sleep(0.5)
stop.set()
for t in threads:
    t.join(10 * SLOW)
eq(errors, [], "no request failed")
ids = [d[0] for d in delivered]
eq(len(ids), 2 * N_PER, f"{2 * N_PER} deliveries")
eq(len(set(ids)), len(ids), "each item once")
eq(set(ids), set(offered), "every item offered was delivered")
early = [d for d in delivered if d[1] > d[2]]
eq(early, [], "none before its due time (due_ms <= ready_ms, server clock)")
skew = [d for d in delivered if not (offered.get(d[0], 0) <= d[1] <= offered.get(d[0], 0) + 2000 * SLOW)]
eq(skew, [], "each due_ms is the server's time of the offer plus its delay_ms")
ok(all(d[3] == "v" + d[0][1:] for d in delivered), "each with its payload")

# ------------------------------------------------------------------ 200 waiting takes
section("200 takes waiting while /metrics answers")
WAITERS = 200
socks = []
req = json.dumps({"wait_ms": 30000, "lease_ms": 30000}).encode()
for i in range(WAITERS):
    s = socket.create_connection(("127.0.0.1", port), timeout=40 * SLOW)
    s.sendall(b"POST /api/queues/idle/take HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + CONSUME.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(req)).encode() + b"\r\n\r\n" + req)
    socks.append(s)
time.sleep(1)
slowest = 0
for _ in range(20):
    t0 = time.monotonic()
    st, body = call(port, "GET", "/metrics", timeout=5)
    slowest = max(slowest, time.monotonic() - t0)
    if st != 200:
        break
eq(st, 200, "/metrics answers")
ok(slowest < 0.5 * SLOW, f"20 scrapes, the slowest in {slowest * 1000:.0f} ms (bound 500 ms)")
st, r = call(port, "GET", "/", timeout=5)
eq(st, 200, "the dashboard answers")
threads_now = len(os.listdir(f"/proc/{server.pid}/task"))
ok(threads_now <= 12, f"the server runs {threads_now} threads with {WAITERS} takes waiting")
st, r = call(port, "POST", q("idle", "/items"), [{"payload": f"w{i}"} for i in range(WAITERS)], PRODUCE)
eq(st, 200, f"{WAITERS} items offered in one request")
answered = 0
for s in socks:
    data = b""
    try:
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < 10:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        if head.startswith(b"HTTP/1.1 200") and b'"token"' in body:
            answered += 1
    except OSError:
        pass
    s.close()
eq(answered, WAITERS, "every waiting take got an item")
st, r = call(port, "GET", q("idle"))
eq(r.get("inflight") if isinstance(r, dict) else r, WAITERS, f"{WAITERS} in flight")

eq(server.stop(), 0, "serve exits 0 on SIGTERM")
finish()
