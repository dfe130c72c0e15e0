"""http_refusals.py - what `delayq serve` answers when the library fails,
through the one table of serve_views.c (cli_view_failure), and the bytes of
its take answers, over real HTTP to a real serve process.

Checks: a value of the request that the queue's scripts refuse as input (an
offer whose delay puts its due time past the maximum, alone and in a list;
a cursor the router lets through but the list script refuses) answers 400
with the script's words ("delayq:input ...") and changes nothing; data in
Redis that breaks the rules (a corrupt counter, planted) answers 500 with
the script's words, for an offer and for a leased take (the work thread's
path), and works again once repaired; Redis stopped answers 503 (an offer,
a queue's items; a take waits through the outage, as dq_take_many_async
survives reconnects) and serve serves again once it is back. A key of the
queue of another type (WRONGTYPE: the data's fault) answers 500, and an
offer while the shards disagree on their count (DQ_EBUSY, "changing its
shard count: try again") 409, the state class's status. Ids are printable ASCII (the id rule,
lua/lib id_ok), so the bytes are checked on the payload path: payloads of
every byte value offered as payload_base64 and text come back from an HTTP
take byte for byte (payload or payload_base64), and ack over HTTP with the
id and token the take gave works; an entry planted with an id of invalid
UTF-8 is set aside by the take or shown as id_base64, the answer still JSON.
"""
import base64
import json
import os
import sys
import tempfile

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

TOKEN = "admin-token-of-http-refusals"
tmp = tempfile.mkdtemp(prefix="delayq-httpref.")
tokfile = private_file(tmp, "tokens", TOKEN + "\n")
DUE_MAX_MS = 4398046511103  # DQ_DUE_MAX_MS
ALL = bytes(range(256))


def call(port, method, path, body=None, timeout=30):
    """(status, parsed JSON or bytes) of one request with the admin token."""
    return http_call(port, method, path, body, TOKEN, timeout=timeout)


def q(name, rest=""):
    return f"/api/queues/{name}{rest}"


def error_of(r):
    return r.get("error", "") if isinstance(r, dict) else ""


def keys_of(queue):
    return {k: redis("DUMP", k) for k in sorted(redis("KEYS", f"dq:{{{queue}}}:*"))}


port = closed_port()
server = bg_dq("serve", "--listen", f"127.0.0.1:{port}", "--token-file", tokfile)
up = wait_for(lambda: call(port, "GET", "/api/queues", timeout=2)[0] == 200, 10)
ok(up, f"serve answers on 127.0.0.1:{port}", server.err if not up else None)

# ------------------------------------------------------------------ input: 400
section("a value a script refuses as input answers 400 with its words")
Q = "hrin"
st, r = call(port, "POST", q(Q, "/items"), {"payload": "first", "id": "a1", "delay_ms": 60000})
eq(st, 200, "an offer due in a minute is taken")
before = keys_of(Q)
st, r = call(port, "POST", q(Q, "/items"), {"payload": "x", "id": "b1", "delay_ms": DUE_MAX_MS})
ok(st == 400 and "delayq:input" in error_of(r) and "due time beyond" in error_of(r),
   "an offer whose delay puts it past the latest due time: 400, the script's words", (st, r))
st, r = call(port, "POST", q(Q, "/items"),
             [{"payload": "ok", "id": "b2"}, {"payload": "x", "id": "b3", "delay_ms": DUE_MAX_MS}])
ok(st == 400 and "due time beyond" in error_of(r), "the same in a list of offers: 400", (st, r))
eq(keys_of(Q), before, "neither changed a key (the list's good item was not offered either)")
st, r = call(port, "GET", q(Q, "/items?state=pending&cursor=9999999999999999:0"))
ok(st == 400 and "delayq:input" in error_of(r) and "cursor" in error_of(r),
   "a well-formed cursor past the largest score: 400 from the list script", (st, r))
st, r = call(port, "GET", q(Q, "/items?state=pending"))
ok(st == 200 and [i["id"] for i in r.get("items", [])] == ["a1"], "the queue holds its one item still", (st, r))

# ------------------------------------------------------------------ corrupt: 500
section("data in Redis that breaks the rules answers 500 with the script's words")
Q = "hrco"
st, r = call(port, "POST", q(Q, "/items"), {"payload": "one", "id": "c1"})
eq(st, 200, "an item offered, ready at once")
redis("HSET", f"dq:{{{Q}}}:n", "pending", "abc")
before = keys_of(Q)
st, r = call(port, "POST", q(Q, "/items"), {"payload": "two", "id": "c2"})
ok(st == 500 and "delayq:corrupt" in error_of(r) and f"counter pending in dq:{{{Q}}}:n" in error_of(r),
   "an offer over a corrupt counter: 500 naming the counter", (st, r))
eq(keys_of(Q), before, "nothing written")
redis("HDEL", f"dq:{{{Q}}}:n", "pending")
redis("HSET", f"dq:{{{Q}}}:n", "inflight", "abc")
st, r = call(port, "POST", q(Q, "/take"), {"lease_ms": 30000, "wait_ms": 3000})
ok(st == 500 and "delayq:corrupt" in error_of(r) and f"counter inflight in dq:{{{Q}}}:n" in error_of(r),
   "a leased take over a corrupt counter: 500 naming the counter (the work thread's answer)", (st, r))
redis("HDEL", f"dq:{{{Q}}}:n", "inflight")
st, r = call(port, "POST", q(Q, "/take"), {"lease_ms": 30000, "wait_ms": 3000})
got = r.get("items", []) if isinstance(r, dict) else []
ok(st == 200 and [i.get("id") for i in got] == ["c1"], "repaired: the take gives c1, nothing was lost", (st, r))

# ------------------------------------------------------------------ wrong type: 500; busy: 409
section("a key of another type answers 500; a shard count in change 409")
Q = "hrwt"
st, r = call(port, "POST", q(Q, "/items"), {"payload": "one", "id": "w1"})
eq(st, 200, "an item offered, ready at once")
redis("DEL", f"dq:{{{Q}}}:r")
redis("SET", f"dq:{{{Q}}}:r", "planted")
st, r = call(port, "GET", q(Q, "/items?state=ready"))
ok(st == 500 and f"dq:{{{Q}}}:r" in error_of(r), "the ready list as a string: 500 naming the key (502 said "
   "Redis misbehaved)", (st, r))
redis("DEL", f"dq:{{{Q}}}:r")
Q = "hrbusy"
eq(dq("config", Q, "--shards", "2").rc, 0, "a queue of 2 shards")
shard = sorted(k for k in redis("KEYS", f"dq:{{{Q}~*}}:n"))[0].decode()
redis("HSET", shard, "shards", "3")  # one shard says another count: the client never settles
sts = [call(port, "POST", q(Q, "/items"), {"payload": "x", "id": f"b{i}"})[0] for i in range(8)]
ok(409 in sts and set(sts) <= {200, 409}, "offers routed to the shard that disagrees: 409 (the queue's state; "
   "was 502), the others 200", sts)

# ------------------------------------------------------------------ bytes
section("payloads of any bytes come back from an HTTP take; ack by its id works")
Q = "hrby"
offered = {"p-all": ALL, "p-high": ALL[128:], "p-nul": b"a\x00b", "p-text": "h\u00e9llo \u2603".encode()}
body = [{"id": i, "payload_base64": base64.b64encode(p).decode()} for i, p in offered.items() if i != "p-text"]
body.append({"id": "p-text", "payload": offered["p-text"].decode()})
st, r = call(port, "POST", q(Q, "/items"), body)
eq((st, r), (200, {"ids": list(offered)}), "four payloads offered, as base64 and as text")
st, r = call(port, "POST", q(Q, "/take"), {"count": 4, "wait_ms": 3000, "lease_ms": 30000})
got = r.get("items", []) if isinstance(r, dict) else []
eq((st, len(got)), (200, 4), "one take gives all four")
back = {}
for m in got:
    p = base64.b64decode(m["payload_base64"], validate=True) if "payload_base64" in m else m.get("payload", "").encode()
    back[m.get("id")] = p
eq(back, offered, "each payload comes back byte for byte")
ok(all(("payload" in m) != ("payload_base64" in m) for m in got), "each has payload or payload_base64, not both", got)
ok(all("payload_base64" in m for m in got if m.get("id") in ("p-all", "p-high")),
   "bytes that are not UTF-8 come as payload_base64", got)
ok(all(isinstance(m.get("id"), str) and "id_base64" not in m and "queue" not in m and
       isinstance(m.get("token"), str) and m.get("attempt") == 1 for m in got),
   "the documented fields: id, token and attempt; no queue", got)
for m in got:
    st, r = call(port, "POST", q(Q, f"/items/{m['id']}/ack"), {"token": m["token"]})
    ok((st, r) == (200, {"acked": True}), f"ack of {m['id']} with its id and token", (st, r))
st, r = call(port, "GET", q(Q, "/items/p-all"))
eq(st, 404, "an acked item is gone")

section("an entry planted with an id of invalid UTF-8: set aside or id_base64, never broken JSON")
Q = "hrpl"
call(port, "POST", q(Q, "/items"), {"payload": "makes the queue"})
call(port, "POST", q(Q, "/take"), {"wait_ms": 3000})
now = server_ms()
bad_id = b"\xff\xfe-id"
redis("RPUSH", f"dq:{{{Q}}}:r", b"1|%d|%d|%d|" % (now, now, len(bad_id)) + bad_id + b"\xc3(")
st, r = call(port, "POST", q(Q, "/take"), {"wait_ms": 1000})
ok(st == 200 and isinstance(r, dict), "the take answers 200 with JSON", (st, r))
got = r.get("items", []) if isinstance(r, dict) else []
aside = redis("LLEN", f"dq:{{{Q}}}:x")
shown = [base64.b64decode(m["id_base64"]) for m in got if "id_base64" in m]
ok((got == [] and aside == 1) or shown == [bad_id], "set aside, or delivered with id_base64 of its bytes",
   (got, aside))

# ------------------------------------------------------------------ Redis away: 503
section("Redis stopped: 503, then served again")
ok(redis_stop(), "redis stopped")
st, r = call(port, "POST", q("hrin", "/items"), {"payload": "x"})
ok(st == 503 and error_of(r), "an offer: 503 with why", (st, r))
st, r = call(port, "GET", q("hrin", "/items"))
ok(st == 503 and error_of(r), "a queue's items: 503 with why", (st, r))
ok(redis_start(), "redis started")
ok(wait_for(lambda: call(port, "POST", q("hrin", "/items"), {"payload": "back"}, timeout=5)[0] == 200, 15),
   "an offer answers 200 again")
ok(server.running(), "serve survived")
eq(server.stop(), 0, "serve exits 0 on SIGTERM")
os.remove(tokfile)
os.rmdir(tmp)
finish()
