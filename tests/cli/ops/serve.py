"""serve.py - `delayq serve`: /metrics through a real Prometheus parser, the
JSON API with its error table and token rules, concurrent scrapes while items
flow, and Redis stopping and starting under it.

The queues are built with the CLI (offers, takes with and without leases,
acks, nacks to dead letters, an expired lease); the metrics must match those
counts, and the lateness histogram must be consistent (cumulative, +Inf =
count). The registry (dq:queues) lists every queue offered to.
"""
import json
import os
import stat
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    text_string_to_metric_families = None
ok(text_string_to_metric_families is not None, "python3-prometheus-client is installed (make deps)")

TOKEN = "t0ken-of-serve-py"
tmp = tempfile.mkdtemp(prefix="delayq-serve.")
tokfile = private_file(tmp, "token", TOKEN + "\n")


def http(port, path, method="GET", token=None, timeout=10):
    """(status, body bytes, headers) of one request to 127.0.0.1:port."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout * SLOW) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)
    except (urllib.error.URLError, OSError) as e:
        return None, str(e).encode(), {}


def api(port, path, method="GET", token=None):
    st, body, _ = http(port, path, method, token)
    try:
        return st, json.loads(body)
    except ValueError:
        return st, body


def metrics(port):
    st, body, hdr = http(port, "/metrics")
    fams = {f.name: f for f in text_string_to_metric_families(body.decode())} if st == 200 else {}
    return st, fams, hdr


def sample(fams, family, name=None, **labels):
    f = fams.get(family)
    for s in (f.samples if f else []):
        if (name is None or s.name == name) and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


def start_server(*extra, token=True):
    port = closed_port()
    args = ["serve", "--listen", f"127.0.0.1:{port}"] + (["--token-file", tokfile] if token else []) + list(extra)
    p = bg_dq(*args)
    up = wait_for(lambda: http(port, "/api/queues", timeout=2)[0] == 200, 10)
    ok(up, f"serve answers on 127.0.0.1:{port}", p.err if not up else None)
    return p, port


# ------------------------------------------------------------------ state
section("a queue in every state")
Q = "srv1"
for i in range(3):
    eq(dq("offer", Q, "1h", f"later {i}", "--id", f"p{i}").rc, 0, f"offer p{i} (pending)")
eq(dq("offer", Q, "0", "now", "--id", "r0").rc, 0, "offer r0 (due now)")
eq(dq("offer", Q, "0", "taken", "--id", "t0").rc, 0, "offer t0")
r = dq("take", Q, "--json", "--timeout", "5s")  # the oldest ready: r0
ok(r.rc == 0 and [m["id"] for m in r.json_lines()] == ["r0"], "plain take of r0", r)
eq(dq("config", Q, "--max-attempts", "1").rc, 0, "max attempts 1")
r = dq("take", Q, "--ack", "manual", "--json", "--timeout", "5s")
m = r.json_lines()[0] if r.rc == 0 and r.json_lines() else {}
eq(dq("nack", Q, m.get("id", "?"), m.get("token", "?"), "--error", "boom").rc, 0, "nack t0: a dead letter")
eq(dq("offer", Q, "0", "acked", "--id", "a0").rc, 0, "offer a0")
r = dq("take", Q, "--ack", "manual", "--json", "--timeout", "5s")
m = r.json_lines()[0] if r.rc == 0 and r.json_lines() else {}
eq(dq("ack", Q, m.get("id", "?"), m.get("token", "?")).rc, 0, "ack a0")
eq(dq("offer", Q, "0", "held", "--id", "h0").rc, 0, "offer h0")
r = dq("take", Q, "--ack", "manual", "--lease", "1h", "--json", "--timeout", "5s")
ok(r.rc == 0, "h0 taken with a 1 h lease (in flight)", r)
# An expired lease: e0 leased for 300 ms; a scheduler returns it to the
# ready list when the lease ends, and a take gets it again.
eq(dq("config", Q, "--max-attempts", "5").rc, 0, "max attempts 5")
eq(dq("offer", Q, "0", "expire", "--id", "e0").rc, 0, "offer e0")
r = dq("take", Q, "--ack", "manual", "--lease", "300ms", "--json", "--timeout", "5s")
ok(r.rc == 0 and r.json_lines() and r.json_lines()[0]["id"] == "e0", "e0 taken with a 300 ms lease", r)
r = dq("take", Q, "--json", "--timeout", "5s")
ok(r.rc == 0 and [m["id"] for m in r.json_lines()] == ["e0"], "e0 back after its lease, taken again", r)
eq(dq("offer", Q, "0", "ready", "--id", "w1").rc, 0, "offer w1 (stays ready)")
st = stats(Q)
note(f"stats: {st}")

server, port = start_server("shown-only")

section("/metrics through prometheus_client's parser")
code, fams, hdr = metrics(port)
eq(code, 200, "GET /metrics: 200")
ok(hdr.get("Content-Type", "").startswith("text/plain; version=0.0.4"), "text format 0.0.4", hdr)
eq(sample(fams, "delayq_up"), 1.0, "delayq_up 1")
for state, want in (("pending", st["pending"]), ("ready", st["ready"]), ("inflight", st["inflight"]),
                    ("dead", st["dead"])):
    eq(sample(fams, "delayq_items", queue=Q, state=state), float(want), f"delayq_items {state} = stats")
eq(sample(fams, "delayq_items", queue="shown-only", state="pending"), 0.0, "a queue named on the command line")
eq(sample(fams, "delayq_offered", queue=Q), 9.0, "offered_total 9 (p0-p2, r0, t0, a0, h0, e0, w1)")
eq(sample(fams, "delayq_delivered", queue=Q), 6.0, "delivered_total: r0, t0, a0, h0, e0 twice")
eq(sample(fams, "delayq_acked", queue=Q), 1.0, "acked_total 1")
eq(sample(fams, "delayq_nacked", queue=Q), 1.0, "nacked_total 1")
eq(sample(fams, "delayq_dead", queue=Q), 1.0, "dead_total 1")
eq(sample(fams, "delayq_lease_expired", queue=Q), 1.0, "lease_expired_total 1")
lat = fams.get("delayq_lateness_seconds")
ok(lat is not None and lat.type == "histogram", "delayq_lateness_seconds is a histogram")
b = [(s.labels["le"], s.value) for s in (lat.samples if lat else [])
     if s.name.endswith("_bucket") and s.labels.get("queue") == Q]
ok(len(b) == 14 and b[-1][0] == "+Inf" and all(b[i][1] <= b[i + 1][1] for i in range(len(b) - 1)),
   "14 cumulative buckets ending at +Inf", b)
cnt = sample(fams, "delayq_lateness_seconds", "delayq_lateness_seconds_count", queue=Q)
ok(b and cnt == b[-1][1], "count = the +Inf bucket", (cnt, b[-1:]))
ok(sample(fams, "delayq_oldest_ready_age_seconds", queue=Q) is not None, "oldest ready age present")
ok((sample(fams, "delayq_next_due_seconds", queue=Q) or 0) > 3000, "next due in about an hour")

section("the JSON API")
code, body = api(port, "/api/queues")
names = [q["name"] for q in body.get("queues", [])] if code == 200 else []
ok(code == 200 and body.get("redis_up") is True and Q in names and "shown-only" in names,
   "GET /api/queues: the registry's queues and the command line's", body)
code, body = api(port, f"/api/queues/{Q}")
ok(code == 200 and body.get("pending") == st["pending"] and body["lateness"]["buckets"][-1]["le"] == "+Inf",
   "GET /api/queues/Q: counts and lateness", body)
seen, cursor, pages = [], None, 0
while pages < 10:
    q = f"/api/queues/{Q}/items?state=pending&limit=2" + (f"&cursor={cursor}" if cursor else "")
    code, body = api(port, q)
    if code != 200:
        break
    seen += [i["id"] for i in body["items"]]
    cursor, pages = body["next_cursor"], pages + 1
    if not cursor:
        break
eq(seen, ["p0", "p1", "p2"], "pending, 2 a page, by due time, through the cursor")
code, body = api(port, f"/api/queues/{Q}/items?state=dead")
ok(code == 200 and [i["id"] for i in body["items"]] == ["t0"] and body["items"][0]["error"] == "boom",
   "dead: t0 with its last error", body)
code, body = api(port, f"/api/queues/{Q}/items?state=inflight")
ok(code == 200 and [i["id"] for i in body["items"]] == ["h0"] and body["items"][0]["lease_end_ms"],
   "inflight: h0 with its lease end", body)
code, body = api(port, f"/api/queues/{Q}/items?state=ready")
ok(code == 200 and [i["id"] for i in body["items"]] == ["w1"], "ready: w1", body)
code, body = api(port, f"/api/queues/{Q}/items/p1")
ok(code == 200 and body.get("state") == "pending" and body.get("due_ms"), "GET item p1: pending", body)

section("bad requests: a 4xx and a JSON error, never a crash")
BAD = [
    ("GET", f"/api/queues/nosuchq", 404),
    ("GET", f"/api/queues/bad%7Bname%7D", 400),
    ("GET", f"/api/queues/{Q}/items?state=sideways", 400),
    ("GET", f"/api/queues/{Q}/items?state=pending&cursor=zz", 400),
    ("GET", f"/api/queues/{Q}/items?state=ready&cursor=-1", 400),
    ("GET", f"/api/queues/{Q}/items?limit=0", 400),
    ("GET", f"/api/queues/{Q}/items?limit=abc", 400),
    ("GET", f"/api/queues/{Q}/items/nosuchid", 404),
    ("GET", f"/api/queues/{Q}/items/a%20b", 400),
    ("GET", f"/api/queues/{Q}/items/" + "x" * 200, 400),
    ("GET", "/api/nothing", 404),
    ("GET", f"/api/queues/{Q}/frobnicate", 404),
    ("PUT", f"/api/queues/{Q}", 405),
    ("POST", "/metrics", 405),
    ("GET", f"/api/queues/{Q}/dead/purge", 405),
    ("DELETE", f"/api/queues/{Q}/items/p0", 401),
    ("POST", f"/api/queues/{Q}/dead/redrive", 401),
    ("POST", f"/api/queues/{Q}/dead/t0/redrive", 401),
    ("POST", f"/api/queues/{Q}/dead/purge", 401),
]
for method, path, want in BAD:
    code, body = api(port, path, method)
    ok(code == want and isinstance(body, dict) and isinstance(body.get("error"), str),
       f"{method} {path[:60]}: {want} with an error", (code, body))
for tok in ("wrong", TOKEN + "x", ""):
    code, body = api(port, f"/api/queues/{Q}/dead/purge", "POST", token=tok)
    eq(code, 401, f"purge with token {tok!r}: 401")
eq(stats(Q)["dead"], 1, "nothing changed")

section("changes with the token")
code, body = api(port, f"/api/queues/{Q}/items/p0", "DELETE", token=TOKEN)
ok(code == 200 and body.get("cancelled") is True, "DELETE p0: cancelled", body)
code, body = api(port, f"/api/queues/{Q}/items/p0", "DELETE", token=TOKEN)
eq(code, 409, "DELETE p0 again: 409 (not pending)")
code, body = api(port, f"/api/queues/{Q}/dead/t0/redrive", "POST", token=TOKEN)
ok(code == 200 and body.get("redriven") == 1, "redrive t0", body)
code, body = api(port, f"/api/queues/{Q}/dead/t0/redrive", "POST", token=TOKEN)
eq(code, 404, "redrive t0 again: 404")
eq(stats(Q)["dead"], 0, "no dead letters left")
code, body = api(port, f"/api/queues/{Q}/dead/purge", "POST", token=TOKEN)
ok(code == 200 and body.get("purged") == 0, "purge: 0", body)
eq(server.stop(), 0, "serve exits 0 on SIGTERM")

section("read-only without a token file")
ro, rport = start_server(token=False)
for method, path in (("DELETE", f"/api/queues/{Q}/items/p1"), ("POST", f"/api/queues/{Q}/dead/redrive"),
                     ("POST", f"/api/queues/{Q}/dead/purge")):
    code, body = api(rport, path, method, token=TOKEN)
    ok(code == 403 and "error" in body, f"{method} {path}: 403", (code, body))
eq(zscore_due(Q, "p1") is not None, True, "p1 still pending")

section("concurrent scrapes, API reads and page loads while items flow")
flow = "srvflow"
sched = bg_dq("schedule", flow)
consumer = bg_dq("take", flow, "--count", "0", "--json", "--no-scheduler")
errors, done = [], threading.Event()


def scraper(kind):
    """kind 1: /metrics, parsed; 0: /api/queues; 2: the dashboard page."""
    n = 0
    path = {0: "/api/queues", 1: "/metrics", 2: "/"}[kind]
    while not done.is_set() and n < 400:
        code, body, _ = http(rport, path)
        if code != 200:
            errors.append((kind, code, body[:200]))
        elif kind == 2 and b'id="queues"' not in body:
            errors.append(("page", body[:200]))
        elif kind == 1:
            try:
                list(text_string_to_metric_families(body.decode()))
            except Exception as e:  # noqa: BLE001
                errors.append(("parse", str(e)))
        n += 1


threads = [threading.Thread(target=scraper, args=(i % 3,)) for i in range(6)]
for t in threads:
    t.start()
batch = "".join(f"{i % 500}ms\tf{i}\tx\n" for i in range(2000)).encode()
eq(dq("offer", flow, "--batch", "-", stdin=batch).rc, 0, "offer 2000 items due within 0.5 s")
ok(wait_for(lambda: consumer.count() >= 2000, 20), "all 2000 delivered", consumer.count())
done.set()
for t in threads:
    t.join(30 * SLOW)
ok(not errors, "every scrape, read and page load answered 200 and parsed", errors[:3])
code, fams, _ = metrics(rport)
eq(sample(fams, "delayq_delivered", queue=flow), 2000.0, "delivered_total 2000")
cnt = sample(fams, "delayq_lateness_seconds", "delayq_lateness_seconds_count", queue=flow)
ok(cnt is not None and 1900 <= cnt <= 2000, "the histogram counts the scheduler's moves", cnt)
consumer.stop()
sched.stop()

section("Redis stops and starts under the server")
ok(redis_stop(), "redis stopped")
code, fams, _ = metrics(rport)
ok(code == 200 and sample(fams, "delayq_up") == 0.0, "/metrics: delayq_up 0", (code, fams.keys()))
code, body = api(rport, "/api/queues")
ok(code == 200 and body.get("redis_up") is False and body.get("error"), "/api/queues: redis_up false", body)
ok(redis_start(), "redis started")
ok(wait_for(lambda: sample(metrics(rport)[1], "delayq_up") == 1.0, 15), "delayq_up 1 again")
ok(ro.running(), "serve survived")
eq(ro.stop(), 0, "serve exits 0 on SIGTERM")

section("usage")
r = dq("serve", "--listen", "nowhere")
ok(r.rc == 2 and "ADDR:PORT" in r.errtext, "a bad --listen: exit 2", r)
os.chmod(tokfile, 0o644)
r = dq("serve", "--token-file", tokfile)
ok(r.rc == 2 and "group or others" in r.errtext, "a token file others may read: exit 2", r)
os.remove(tokfile)
os.rmdir(tmp)
finish()
