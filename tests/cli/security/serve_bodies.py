"""serve_bodies.py - what a request of `delayq serve` may make it hold
before its token is checked, and what a stop does to the takes it
answers, with real sockets against a real serve and redis.

- The token is checked when the headers come, before any body: 60
  connections from one address that all send their headers (wrong tokens,
  the right one last) before any body get at most four 401s and then 429,
  the right token too (before, every token was compared once its body
  came: 59 x 401 and the right one 200, the backoff bypassed).
- A request without a valid token never has its body kept: 40 held 4 MiB
  bodies leave serve's memory as it was (before: 160 MiB), a new request
  from the same address gets through meanwhile (a refused request's
  connection may be pushed out, as an idle one may), and each is answered
  401 once its body came (read and dropped, so a client that sends its
  body before it reads gets the answer, not a reset); a Content-Length
  past what its endpoint takes 413 the same way.
- Bodies held at once are bounded (64 MiB): eight unfinished 8 MiB offer
  bodies with a token, then a ninth request with a body answers 503; once
  the eight are answered, a body is taken again.
- "%00" in a path is no NUL: GET and DELETE of items/abc%00xyz answer 400
  and item abc stays (before, the NUL ended the id: abc was cancelled).
- SIGTERM while takes wait: each gets a whole answer (503), none an empty
  reply; under takes without a lease and offers, every item the queue
  counts as delivered reached a taker (before, the daemon stopped before
  the answers went out: items taken for good were lost).
- A take while Redis is stopped answers 503 after its wait, not 200 with
  no items (a consumer could not tell an outage from an empty queue).
- A waiting take whose client closed its connection is cancelled (within
  0.5 s): an item offered after that stays ready for the next take
  (before, the take waited on and popped it for nobody: lost).
"""
import json
import os
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

PRODUCE = "produce-token-of-serve-bodies"
CONSUME = "consume-token-of-serve-bodies"
tmp = tempfile.mkdtemp(prefix="delayq-bodies.")
tokfile = private_file(tmp, "tokens", f"produce {PRODUCE}\nconsume {CONSUME}\n")
MIB = 1 << 20


def start():
    port = closed_port()
    p = bg_dq("serve", "--listen", f"127.0.0.1:{port}", "--token-file", tokfile)
    up = wait_for(lambda: http_call(port, "GET", "/api/queues", timeout=2)[0] == 200, 10)
    ok(up, f"serve answers on 127.0.0.1:{port}", p.err if not up else None)
    return p, port


def connect(port, src="127.0.0.1"):
    s = socket.socket()
    s.settimeout(10 * SLOW)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def head(path, length, token=None, method="POST"):
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def status_of(s):
    """The status of the answer on socket s (None: closed or reset first)."""
    try:
        line = s.recv(65536).split(b"\r\n", 1)[0]
        return int(line.split()[1]) if line.startswith(b"HTTP/1.1 ") else None
    except (OSError, ValueError, IndexError):
        return None


server, port = start()

section("the token is checked when the headers come: no guess per held-back body")
socks = []
for i in range(60):
    s = connect(port, "127.0.0.9")
    token = CONSUME if i == 59 else f"wrong-token-{i:020d}"
    s.sendall(head("/api/queues/sb1/take", 2, token))
    socks.append(s)
time.sleep(0.5)
codes = []
for s in socks:
    try:
        s.sendall(b"{}")
    except OSError:
        pass  # answered and closed already
    codes.append(status_of(s))
    s.close()
ok(codes.count(401) <= 4 and 200 not in codes, "60 held-back bodies: at most four 401s, the right token no 200",
   {c: codes.count(c) for c in set(codes)})
ok(codes[-1] == 429, "the right token, past the wrong ones, waits: 429", codes[-1])

section("a refused request's body is read and dropped, never kept; its connection holds no place")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


rss0 = rss_kib(server.proc.pid)
unsent = []
for i in range(40):  # 160 MiB of bodies without a token, all but their last byte
    s = connect(port)
    s.sendall(head("/api/queues/sb1/items", 4 * MIB) + b" " * (4 * MIB - 1))
    unsent.append(s)
time.sleep(0.5)
grew = rss_kib(server.proc.pid) - rss0
ok(grew < 16 * 1024, f"40 held 4 MiB bodies without a token: serve grew {grew} KiB (kept, it would be 160 MiB)")
st, r = http_call(port, "GET", "/api/queues")
eq(st, 200, "meanwhile a new request from the same address gets through (the refused ones may be pushed out)")
codes = []
for s in unsent:
    try:
        s.sendall(b" ")
        codes.append(status_of(s))
    except OSError:
        codes.append("pushed out")
    s.close()
codes = ["pushed out" if c is None else c for c in codes]  # closed by serve before its answer
ok(all(c in (401, 429, "pushed out") for c in codes) and codes.count(401) >= 1,
   "each answered 401 (or 429) once its body came, or was pushed out", {c: codes.count(c) for c in set(codes)})
big = b"[" + b" " * (9 * MIB) + b"]"
st, r = http_call(port, "POST", "/api/queues/sb1/items", raw=big, token=PRODUCE)
eq(st, 413, "a 9 MiB offer body with a token: 413 (after its body, which is dropped)")
st, r = http_call(port, "POST", "/api/queues/sb1/take", raw=b"{" + b" " * (100 * 1024) + b"}", token=CONSUME)
eq(st, 413, "a take's body past 64 KiB: 413")

section("bodies held at once are bounded: 64 MiB")
size = 8 * MIB - 1
held = []
for i in range(8):
    s = connect(port)
    s.sendall(head("/api/queues/sb2/items", size, PRODUCE) + b" " * (size - 1))  # all but the last byte
    held.append(s)
time.sleep(0.5)
ok(server.running(), "eight 8 MiB bodies held")
st, r = http_call(port, "POST", "/api/queues/sb2/items", {"payload": "ninth"}, PRODUCE)
ok(st == 503 and "busy" in (r.get("error", "") if isinstance(r, dict) else ""),
   "a ninth body meanwhile: 503 busy", (st, r))
answers = []
for s in held:
    s.sendall(b" ")
    answers.append(status_of(s))
    s.close()
ok(all(a == 400 for a in answers), "the eight bodies (blank: no JSON) answered once whole: 400", answers)
st, r = http_call(port, "POST", "/api/queues/sb2/items", {"payload": "after"}, PRODUCE)
eq(st, 200, "then a body is taken again")

section("%00 in a path is refused, never a shorter id")
st, r = http_call(port, "POST", "/api/queues/sb3/items", {"payload": "abc", "id": "abc", "delay_ms": 600000},
                  PRODUCE)
eq(st, 200, "offer abc")
for method in ("GET", "DELETE"):
    st, r = http_call(port, method, "/api/queues/sb3/items/abc%00xyz", token=PRODUCE)
    eq(st, 400, f"{method} items/abc%00xyz: 400")
st, r = http_call(port, "GET", "/api/queues/sb3/items/abc")
ok(st == 200 and r.get("state") == "pending", "abc is still pending", (st, r))

section("a waiting take whose client went away takes nothing more")
s = connect(port)
body = b'{"wait_ms": 20000}'
s.sendall(head("/api/queues/sb7/take", len(body), CONSUME) + body)
time.sleep(0.5)
s.close()  # the client gives up
time.sleep(1.5)  # the take notices within 0.5 s and is cancelled
st, r = http_call(port, "POST", "/api/queues/sb7/items", {"payload": "after", "id": "late"}, PRODUCE)
eq(st, 200, "an item offered after the client left")
time.sleep(0.5)
st, r = http_call(port, "GET", "/api/queues/sb7/items/late")
ok(st == 200 and r.get("state") == "ready", "it stays ready for a consumer that is there (not taken and lost)",
   (st, r))
eq(redis("HGET", "dq:{sb7}:n", "delivered"), None, "nothing counted as delivered")
st, r = http_call(port, "POST", "/api/queues/sb7/take", {"wait_ms": 1000}, CONSUME)
ok(st == 200 and [m["id"] for m in r["items"]] == ["late"], "the next take gets it", (st, r))

section("a take while Redis is stopped: 503 after its wait, not an empty 200")
ok(redis_stop(), "redis stopped")
st, r = http_call(port, "POST", "/api/queues/sb4/take", {"wait_ms": 1500}, CONSUME)
ok(st == 503 and isinstance(r, dict) and r.get("error"), "a take of 1.5 s: 503 with why", (st, r))
r = dq("take", "sb4", "--timeout", "1s")
ok(r.rc == 3 and r.err, "delayq take --timeout 1s: exit 3 with why, not 1 (nothing there)", r)
ok(redis_start(), "redis started")
ok(wait_for(lambda: http_call(port, "POST", "/api/queues/sb4/items", {"payload": "back"}, PRODUCE,
                              timeout=5)[0] == 200, 15), "an offer answers 200 again")

section("SIGTERM while takes wait: each answered whole")
results = []


def waiting_take():
    results.append(http_call(port, "POST", "/api/queues/sb5/take", {"wait_ms": 20000}, CONSUME)[0])


threads = [threading.Thread(target=waiting_take) for _ in range(10)]
for t in threads:
    t.start()
ok(wait_for(lambda: len(redis("CLIENT", "LIST").split(b"\n")) > 3, 5), "the takes wait")
time.sleep(0.5)
eq(server.stop(), 0, "serve exits 0 on SIGTERM")
for t in threads:
    t.join(30)
eq(sorted(results, key=str), [503] * 10, "each waiting take: a whole 503, none an empty reply")

section("SIGTERM under takes without a lease: every item taken reached a taker")
server, port = start()
got, stop = [], threading.Event()


def taker():
    while not stop.is_set():
        st, r = http_call(port, "POST", "/api/queues/sb6/take", {"wait_ms": 3000, "count": 4}, CONSUME,
                          timeout=15)
        if st == 200:
            got.extend(m["id"] for m in r["items"])
        elif st is None or st == 503:
            return


def offerer():
    for _ in range(100000):
        if stop.is_set() or http_call(port, "POST", "/api/queues/sb6/items", [{"payload": "x"}, {"payload": "y"}],
                                      PRODUCE, timeout=5)[0] != 200:
            return


threads = [threading.Thread(target=taker) for _ in range(12)] + [threading.Thread(target=offerer) for _ in range(2)]
for t in threads:
    t.start()
time.sleep(1.5)
eq(server.stop(), 0, "serve exits 0 on SIGTERM")
stop.set()
for t in threads:
    t.join(30)
delivered = int(redis("HGET", "dq:{sb6}:n", "delivered") or 0)
ok(delivered > 0 and len(got) == delivered and len(set(got)) == len(got),
   "every item the queue counts as delivered came to a taker, once", (delivered, len(got), len(set(got))))
note(f"{delivered} items taken in 1.5 s, then the stop")

os.remove(tokfile)
os.rmdir(tmp)
finish()
