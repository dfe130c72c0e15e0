"""serve_exposure.py - what `delayq serve` shows and to whom (issue 35,
findings 5-10 and 12), with real sockets against a real serve and redis.

Host: only the listen address, localhost and --allow-host names are
answered; any other name gets 421 before any work (DNS rebinding), and an
HTTP/1.0 request without Host is answered. Every answer forbids framing
(X-Frame-Options and CSP frame-ancestors). A page of 1 MB payloads carries
at most 1 MiB of payload (cut, with payload_truncated and the whole size),
a page of one item the whole payload, and serve's peak RSS stays low. The
single-item look-up answers the payload whole (pending, ready, in flight
alone or in a lease record, dead; sealed, opened with serve's key or shown
sealed without), and a 2 MB one cut to 1 MiB with its whole size. 100
slow connections from 127.0.0.1 and 64 from 127.0.0.2 do not keep /metrics
from a new connection from 127.0.0.1: the longest waiting are pushed out. A token under 16 characters and a non-loopback
--listen without --token-file or --public-read are refused at the start
(exit 2); failed tokens past the third answer 429 with Retry-After. A
registry (dq:queues) of the wrong type is a registry_error, not Redis down.
--listen localhost:PORT and [::1]:PORT serve.
"""
import http.client
import json
import os
import select
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

TOKEN = "a-token-of-serve-exposure"
tmp = tempfile.mkdtemp(prefix="delayq-exposure.")
tokfile = private_file(tmp, "token", TOKEN + "\n")


def request(port, path, host=None, method="GET", token=None, addr="127.0.0.1", timeout=10):
    """(status, body bytes, headers dict) of one request; host None: the
    default Host (addr:port)."""
    c = http.client.HTTPConnection(addr, port, timeout=timeout * SLOW)
    try:
        c.putrequest(method, path, skip_host=host is not None)
        if host is not None:
            c.putheader("Host", host)
        if token is not None:
            c.putheader("Authorization", f"Bearer {token}")
        c.endheaders()
        r = c.getresponse()
        return r.status, r.read(), {k.lower(): v for k, v in r.getheaders()}
    except OSError as e:
        return None, str(e).encode(), {}
    finally:
        c.close()


def body_json(b):
    try:
        return json.loads(b)
    except ValueError:
        return None


def start(*extra, listen=None, key=None):
    port = closed_port()
    p = bg_dq(*(["--key-file", key] if key else []), "serve", "--listen", listen or f"127.0.0.1:{port}", *extra)
    up = wait_for(lambda: request(port, "/api/queues", timeout=2)[0] == 200, 10 * SLOW)
    ok(up, f"serve {' '.join(extra)} answers", p.err if not up else None)
    return p, port


Q = "expo1"
eq(dq("offer", Q, "1h", "small", "--id", "s0").rc, 0, "offer s0")
server, port = start("--token-file", tokfile, "--allow-host", "dq.example", "--allow-host=Other.Example", "shown")

section("Host: this server's names only (DNS rebinding)")
for host, want in ((f"127.0.0.1:{port}", 200), ("127.0.0.1", 200), (f"localhost:{port}", 200),
                   ("LOCALHOST", 200), (f"dq.example:{port}", 200), ("other.example", 200),
                   (f"rebind.test:{port}", 421), ("rebind.test", 421), (f"127.0.0.2:{port}", 421),
                   (f"localhost.evil.test:{port}", 421), (f"dq.example.evil:{port}", 421), ("", 421),
                   (f"localhost:{port}:1", 421), ("[::1]", 421)):
    for path in ("/api/queues", "/metrics", f"/api/queues/{Q}/items", "/"):
        st, b, _ = request(port, path, host=host)
        if st != want:
            break
    ok(st == want, f"Host {host!r}: {want} on /api/queues, /metrics, items and the page", (st, b[:200]))
st, b, _ = request(port, "/api/queues", host="rebind.test")
j = body_json(b) or {}
ok(st == 421 and "error" in j and Q.encode() not in b, "the 421 says why and shows no queue", b[:300])
# HTTP/1.0 without Host: no browser sends that, so no rebinding; answered.
with socket.create_connection(("127.0.0.1", port), timeout=10 * SLOW) as s:
    s.sendall(b"GET /api/queues HTTP/1.0\r\n\r\n")
    raw = b""
    while len(raw) < 1 << 20:
        chunk = s.recv(65536)
        if not chunk:
            break
        raw += chunk
ok(raw.startswith(b"HTTP/1.0 200") or raw.startswith(b"HTTP/1.1 200"), "HTTP/1.0 without Host: 200", raw[:100])

section("no answer may be framed")
for path, st_want in (("/", 200), ("/api/queues", 200), ("/metrics", 200), ("/nothing", 404),
                      (f"/api/queues/{Q}/items/s0", 200)):
    st, _, h = request(port, path)
    csp = h.get("content-security-policy", "")
    ok(st == st_want and h.get("x-frame-options") == "DENY" and "frame-ancestors 'none'" in csp,
       f"{path}: X-Frame-Options DENY, CSP frame-ancestors 'none'", (st, h))
st, _, h = request(port, "/", host="rebind.test")
ok(h.get("x-frame-options") == "DENY", "the 421 too", h)
st, _, h = request(port, "/")
ok("script-src 'unsafe-inline'" in h.get("content-security-policy", "") and "connect-src 'self'" in
   h.get("content-security-policy", ""), "the page's CSP keeps its directives", h)

section("failed tokens are slowed down")
path = f"/api/queues/{Q}/dead/purge"
codes = [request(port, path, method="POST", token="wrong-token-wrong-token")[0] for _ in range(4)]
eq(codes, [401, 401, 401, 401], "four wrong tokens: 401 each")
st, b, h = request(port, path, method="POST", token=TOKEN)
ok(st == 429 and h.get("retry-after", "").isdigit() and int(h["retry-after"]) >= 1,
   "right after the fourth, even the right token waits: 429 with Retry-After", (st, b, h))
st, _, _ = request(port, "/api/queues")
eq(st, 200, "reads are not held back")
time.sleep(int(h.get("retry-after", "1")) + 0.1)
st, b, _ = request(port, path, method="POST", token=TOKEN)
ok(st == 200 and (body_json(b) or {}).get("purged") == 0, "after Retry-After the right token works", (st, b))
codes = [request(port, path, method="POST", token="wrong-token-wrong-token")[0] for _ in range(3)]
eq(codes, [401, 401, 401], "a success starts afresh: three wrong tokens are 401 again")

section("slow connections do not lock others out, even from the same address")
slow = {"127.0.0.1": [], "127.0.0.2": []}
for src, count in (("127.0.0.2", 64), ("127.0.0.1", 100)):
    for i in range(count):
        s = socket.socket()
        s.settimeout(5 * SLOW)
        try:
            s.bind((src, 0))
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers never end
            slow[src].append(s)
        except OSError:
            s.close()
ok(len(slow["127.0.0.1"]) == 100 and len(slow["127.0.0.2"]) == 64,
   "164 slow connections opened: 100 from 127.0.0.1, 64 from 127.0.0.2", {k: len(v) for k, v in slow.items()})
time.sleep(0.3)
for attempt in ("/metrics", "/api/queues", "/metrics"):
    t0 = time.monotonic()
    st, b, _ = request(port, attempt, timeout=5)
    took = time.monotonic() - t0
    ok(st == 200 and took < 3 * SLOW, f"{attempt} from 127.0.0.1 meanwhile: 200 in {took:.2f} s", (st, b[:200]))


readable, _, _ = select.select(slow["127.0.0.1"], [], [], 0.5 * SLOW)
pushed = 0
for s in readable:
    try:
        pushed += s.recv(1) == b""
    except OSError:
        pushed += 1
ok(pushed >= 100 - 32, f"the server closed {pushed} of the 100 that waited longest (it keeps 32 an address)", pushed)
for s in slow["127.0.0.1"] + slow["127.0.0.2"]:
    s.close()

section("a page of 1 MB payloads is bounded; one item a page shows it whole")
BIG, N = 1_000_000, 40
batch = b"".join(b"1h\tb%02d\t" % i + (b"%c" % (97 + i % 26)) * BIG + b"\n" for i in range(N))
eq(dq("offer", Q, "--batch", "-", stdin=batch, timeout=60).rc, 0, f"{N} items of {BIG} bytes pending")
# Pages of limit N + 1: each payload cut to 1 MiB / (N + 1) in the script,
# and a page ends after reading 4 MiB of records, with a next cursor.
items, sizes, pages, cursor, took, first = [], [], 0, "", 0.0, None
while pages < 3 * N:
    t0 = time.monotonic()
    st, b, _ = request(port, f"/api/queues/{Q}/items?state=pending&limit={N + 1}&cursor={cursor}", timeout=30)
    took = max(took, time.monotonic() - t0)
    j = body_json(b) or {}
    first = first or j
    pages, cursor = pages + 1, j.get("next_cursor") or ""
    sizes.append(len(b))
    items += [i for i in j.get("items", []) if i["id"].startswith("b")]
    if st != 200 or not cursor:
        break
note(f"{N} items of 1 MB in pages of {N + 1}: {pages} pages, the largest {max(sizes)} bytes, the slowest {took:.2f} s")
eq(sorted(i["id"] for i in items), [f"b{i:02d}" for i in range(N)], f"the pages hold the {N} items, each once")
ok(max(sizes) < 1_000_000 and pages > 1, f"each answer under 1 MB ({max(sizes)}), over {pages} pages", sizes)
ok(all(i.get("payload_truncated") is True and i.get("payload_bytes") == BIG for i in items),
   "each says payload_truncated and its whole size", items[:1] and {k: v for k, v in items[0].items()
                                                               if not k.startswith("payload")})
cut = (1 << 20) // (N + 1)
ok(all(len(i.get("payload") or "") == cut for i in items), f"each payload cut to 1 MiB / {N + 1} = {cut} bytes",
   sorted({len(i.get("payload") or "") for i in items}))
j = first
small = [i for i in j.get("items", []) if i["id"] == "s0"]
ok(small and small[0]["payload"] == "small" and small[0].get("payload_truncated") is False,
   "a short payload is whole, payload_truncated false", small)
cursor, one = "", {}
for _ in range(3):  # s0 comes first, then b00
    st, b, _ = request(port, f"/api/queues/{Q}/items?state=pending&limit=1&cursor={cursor}", timeout=30)
    page = body_json(b) or {}
    one = (page.get("items") or [{}])[0]
    cursor = page.get("next_cursor") or ""
    if one.get("id", "").startswith("b") or not cursor:
        break
ok(st == 200 and one.get("payload_bytes") == BIG and len(one.get("payload") or "") == BIG and
   one.get("payload_truncated") is False, "a page of one item: the whole 1 MB payload", (st, len(b)))
with open(f"/proc/{server.pid}/status") as f:
    hwm = [int(line.split()[1]) for line in f if line.startswith("VmHWM:")][0]
note(f"serve's peak RSS: {hwm} kB")
ok(hwm < 200_000, f"serve's peak RSS {hwm // 1024} MB < 200 MB", hwm)
t0 = time.monotonic()
st, _, _ = request(port, "/metrics")
ok(st == 200 and time.monotonic() - t0 < 2 * SLOW, "/metrics still answers at once", st)

section("ready and dead pages are cut too; a cut sealed payload stays sealed")
R = "expo2"
eq(dq("config", R, "--max-attempts", "1").rc, 0, "expo2: max attempts 1")
batch = b"".join(b"0\tr%d\t" % i + b"\xc3\xa9" * 150_000 + b"\n" for i in range(3))
eq(dq("offer", R, "--batch", "-", stdin=batch).rc, 0, "3 ready items of 300,000 bytes of text (e-acute)")
r = dq("take", R, "--ack", "manual", "--json", "--timeout", "5s")
m = r.json_lines()[0] if r.rc == 0 and r.json_lines() else {}
eq(dq("nack", R, m.get("id", "?"), m.get("token", "?"), "--error", "x").rc, 0, "one nacked to the dead letters")
L = "expo4"
eq(dq("offer", L, "--batch", "-", stdin=batch).rc, 0, "expo4: 3 items of 300,000 bytes")
r = dq("take", L, "--count", "3", "--ack", "manual", "--lease", "1h", "--json", "--timeout", "5s")
ok(r.rc == 0 and len(r.json_lines()) == 3, "taken at once with a lease (one lease record)", r)
for state, want in (("ready", 2), ("dead", 1)):
    st, b, _ = request(port, f"/api/queues/{R}/items?state={state}&limit=999")
    its = (body_json(b) or {}).get("items", [])
    ok(st == 200 and len(its) == want and all(
        i.get("payload_truncated") is True and i.get("payload_bytes") == 300_000 and len(i.get("payload") or "") == 524
        and set(i.get("payload") or "") == {"\u00e9"} for i in its),
       f"{state}: cut to 1 MiB / 999 = 1049 bytes, shown to the last whole character (524), whole size",
       (st, b[:300]))
st, b, _ = request(port, f"/api/queues/{L}/items?state=inflight&limit=999")
its = (body_json(b) or {}).get("items", [])
ok(st == 200 and len(its) == 3 and all(i.get("payload_truncated") is True and i.get("payload_bytes") == 300_000 and
                                       len(i.get("payload") or "") == 524 for i in its),
   "in flight in a lease record: cut the same way", (st, b[:300]))

section("the single-item look-up answers the payload, whole up to 1 MiB, in every state")


def item(queue, id_):
    st, b, _ = request(port, f"/api/queues/{queue}/items/{id_}", timeout=30)
    return st, body_json(b) or {}, b


def whole(j, payload, state):
    return (j.get("state") == state and j.get("payload") == payload and j.get("payload_truncated") is False and
            j.get("payload_bytes") == len(payload.encode()) and j.get("sealed") is False)


P5 = "".join(chr(97 + i % 26) for i in range(5000))
eq(dq("offer", Q, "1h", P5, "--id", "p5").rc, 0, "a pending item of 5,000 bytes")
st, j, b = item(Q, "p5")
ok(st == 200 and whole(j, P5, "pending") and j.get("due_ms"), "pending: the whole 5,000 bytes and its due time",
   b[:200])
E = "\u00e9" * 150_000
dead_id = m.get("id", "?")
for rid in ("r0", "r1", "r2"):
    st, j, b = item(R, rid)
    want = "dead" if rid == dead_id else "ready"
    ok(st == 200 and whole(j, E, want), f"{want} ({rid}): the whole 300,000 bytes", b[:200])
for rid in ("r0", "r1", "r2"):
    st, j, b = item(L, rid)
    ok(st == 200 and whole(j, E, "inflight") and j.get("lease_end_ms"),
       f"in flight in a lease record ({rid}): the whole 300,000 bytes and its lease's end", b[:200])
F = "expo6"
eq(dq("offer", F, "0", P5, "--id", "f1").rc, 0, "expo6: a ready item of 5,000 bytes")
r = dq("take", F, "--ack", "manual", "--lease", "1h", "--json", "--timeout", "5s")
ok(r.rc == 0 and len(r.json_lines()) == 1, "taken alone with a lease", r)
st, j, b = item(F, "f1")
ok(st == 200 and whole(j, P5, "inflight"), "in flight alone: the whole 5,000 bytes", b[:200])
# A 2 MB payload (past the largest a client offers): a 1 MB item's record
# in its slot made twice as long.
eq(dq("offer", Q, "--batch", "-", stdin=b"1h\tbig2\t" + b"x" * BIG + b"\n", timeout=60).rc, 0,
   "a pending item of 1 MB")
planted = False
for name in redis("ZRANGE", f"dq:{{{Q}}}:zs", 0, -1):
    key = f"dq:{{{Q}}}:q:{name.decode()}"
    got = redis("ZRANGE", key, 0, -1, "WITHSCORES")
    for rec, score in zip(got[::2], got[1::2]):
        if rec.startswith(b"1|4|big2"):
            redis("ZREM", key, rec)
            redis("ZADD", key, score, rec + b"y" * BIG)
            planted = True
ok(planted, "its record made 2,000,000 bytes long")
t0 = time.monotonic()
st, j, b = item(Q, "big2")
took = time.monotonic() - t0
ok(st == 200 and j.get("payload_truncated") is True and j.get("payload_bytes") == 2 * BIG and
   j.get("payload") == "x" * BIG + "y" * ((1 << 20) - BIG), "2,000,000 bytes: cut to 1 MiB, its whole size shown",
   {k: v for k, v in j.items() if k != "payload" and k != "payload_base64"})
note(f"a 2 MB item's look-up: {len(b)} bytes in {took:.2f} s")
with open(f"/proc/{server.pid}/status") as f:
    hwm = [int(line.split()[1]) for line in f if line.startswith("VmHWM:")][0]
ok(hwm < 200_000, f"serve's peak RSS still {hwm // 1024} MB < 200 MB", hwm)
st, j, _ = item(Q, "nosuch")
eq(st, 404, "an unknown id: 404")
eq(server.stop(), 0, "serve exits 0 on SIGTERM")
keyf = private_file(tmp, "key", dq("keygen", redis=False).text)
S = "expo3"
secret = "s" * 5000
eq(dq("--key-file", keyf, "offer", S, "1h", secret, "--id", "k0").rc, 0, "a sealed item of 5000 bytes")
server, port = start("--token-file", tokfile, "shown", key=keyf)
st, b, _ = request(port, f"/api/queues/{S}/items?limit=1000")
it = ((body_json(b) or {}).get("items") or [{}])[0]
ok(it.get("sealed") is True and it.get("payload_truncated") is True and it.get("payload_bytes", 0) > 5000 and
   b"sssss" not in b, "cut, the envelope is not opened: sealed, truncated, its whole size", it)
st, b, _ = request(port, f"/api/queues/{S}/items?limit=1")
it = ((body_json(b) or {}).get("items") or [{}])[0]
ok(it.get("sealed") is False and it.get("payload") == secret and it.get("payload_truncated") is False and
   it.get("payload_bytes") == 5000, "whole (a page of one), serve's key opens it", {k: it.get(k) for k in
                                                                                  ("sealed", "payload_bytes")})
st, b, _ = request(port, f"/api/queues/{S}/items/k0")
it = body_json(b) or {}
ok(st == 200 and it.get("sealed") is False and it.get("payload") == secret and it.get("payload_truncated") is False
   and it.get("payload_bytes") == 5000, "the look-up: serve's key opens it, whole", b[:200])
srv, sport = start("--token-file", tokfile, "shown")
st, b, _ = request(sport, f"/api/queues/{S}/items/k0")
it = body_json(b) or {}
ok(st == 200 and it.get("sealed") is True and len(it.get("payload_sealed_with") or "") == 16 and
   it.get("payload_truncated") is False and it.get("payload_bytes", 0) > 5000 and b"sssss" not in b,
   "the look-up without a key: sealed, the whole envelope, not opened", b[:200])
eq(srv.stop(), 0, "the keyless serve exits 0 on SIGTERM")

section("a registry of the wrong type is a problem, not Redis down")
redis("DEL", "dq:queues")
redis("SET", "dq:queues", "not a set")
st, b, _ = request(port, "/api/queues")
j = body_json(b) or {}
ok(st == 200 and j.get("redis_up") is True and "WRONGTYPE" in (j.get("registry_error") or ""),
   "/api/queues: redis_up true, registry_error names WRONGTYPE", j)
# Shown: the queue of the command line, and those serve read before (it
# keeps the queues it has seen, dq_queues_seen), each read without error.
named = [q["name"] for q in j.get("queues", [])]
ok("shown" in named and all("error" not in q for q in j.get("queues", [])),
   "the queue named on the command line is still read", j.get("queues"))
st, b, _ = request(port, "/metrics")
ok(st == 200 and b"\ndelayq_up 1\n" in b and b"\ndelayq_registry_errors 1\n" in b and
   b'delayq_items{queue="shown",state="pending"} 0' in b, "/metrics: delayq_up 1, delayq_registry_errors 1",
   b[:400])
st, b, _ = request(port, "/api/queues/shown/items")
eq(st, 200, "the command line's queue pages")
redis("DEL", "dq:queues")
eq(dq("offer", Q, "1h", "again", "--id", "s1").rc, 0, "the key deleted, an offer registers again")
st, b, _ = request(port, "/api/queues")
j = body_json(b) or {}
ok(j.get("registry_error") is None and Q in [q["name"] for q in j.get("queues", [])], "no problem then", j)
st, b, _ = request(port, "/metrics")
ok(b"\ndelayq_registry_errors 0\n" in b, "delayq_registry_errors 0", b[:300])
eq(server.stop(), 0, "serve exits 0 on SIGTERM")

section("the start refuses short tokens and unguarded network addresses")
# (timeout=5: a server that wrongly starts is stopped soon)
short = private_file(tmp, "short", "abc\n")
p = closed_port()
r = dq("serve", "--listen", f"127.0.0.1:{p}", "--token-file", short, timeout=5)
ok(r.rc == 2 and "at least 16" in r.errtext, "a 3-character token: exit 2, says at least 16", r)
r = dq("serve", "--listen", f"0.0.0.0:{p}", timeout=5)
ok(r.rc == 2 and "loopback" in r.errtext and "--public-read" in r.errtext and "--token-file" in r.errtext,
   "0.0.0.0 without --token-file: exit 2, names both options", r)
r = dq("serve", "--listen", f"[::]:{p}", timeout=5)
eq(r.rc, 2, "[::] without --token-file: exit 2")
# 192.0.2.1 (TEST-NET) passes the rule, then cannot be bound: exit 3.
r = dq("serve", "--listen", f"192.0.2.1:{p}", "--public-read", timeout=5)
ok(r.rc == 3 and "cannot listen" in r.errtext, "with --public-read the rule passes (then no such address)", r)
r = dq("serve", "--listen", f"192.0.2.1:{p}", "--token-file", tokfile, timeout=5)
ok(r.rc == 3 and "cannot listen" in r.errtext, "with --token-file too", r)
for bad in ("nowhere:80", "::1:80", "[::1]", "localhost", "[nope]:80"):
    r = dq("serve", "--listen", bad, timeout=5)
    ok(r.rc == 2 and "--listen" in r.errtext, f"--listen {bad}: exit 2", r)
r = dq("serve", "--listen", f"127.0.0.1:{p}", "--allow-host", "bad/name", timeout=5)
ok(r.rc == 2 and "--allow-host" in r.errtext, "--allow-host bad/name: exit 2", r)

section("--listen localhost:PORT and [::1]:PORT")
lp = closed_port()
srv = bg_dq("serve", "--listen", f"localhost:{lp}")
ok(wait_for(lambda: request(lp, "/api/queues", timeout=2)[0] == 200, 10 * SLOW), "localhost:PORT serves 127.0.0.1",
   srv.err)
srv.stop()
srv = bg_dq("serve", "--listen", f"[::1]:{lp}")
ok(wait_for(lambda: request(lp, "/api/queues", addr="::1", host=f"[::1]:{lp}", timeout=2)[0] == 200, 10 * SLOW),
   "[::1]:PORT serves ::1", srv.err)
st, _, _ = request(lp, "/api/queues", addr="::1", host=f"rebind.test:{lp}")
eq(st, 421, "and checks Host there too")
srv.stop()
for f in ("token", "short", "key"):
    os.remove(os.path.join(tmp, f))
os.rmdir(tmp)
finish()
