"""paused_consumer.py - a consumer that is PAUSED (SIGSTOP: a stuck process,
a VM pause, a debugger) and then resumes, with an item in hand.

With the shortest beat the CLI takes ($DELAYQ_CONSUMER_BEAT_MS=100: a beat
counts 300 ms) and a 4 s lease (2 s for the take):
  - a `work --name P` whose command holds the item is listed with in_hand 1,
    then SIGSTOPped (its command, in a process group of its own, goes on and
    exits 0 meanwhile): P leaves `consumers` and `consumers --json` within
    5 s, and `GET /api/queues/{q}/consumers` of a `delayq serve`; `lookup`
    still shows the item in flight, held by P, until its lease ends;
  - the lease ends: another worker W gets the item (attempt 2), runs it and
    acks it: nothing lost;
  - P resumes (SIGCONT): it is listed again (the CLI, the API) within 5 s,
    its late ack is refused as stale and logged on its stderr, once, as
    "worker Q: the ack of ID (attempt 1) came after its lease had run out:
    refused, the item is delivered again"; stopped by SIGTERM it exits 0 and its summary
    counts the item as "1 stale" (its command succeeded, the ack did not
    count), not as succeeded; the item was acked once (W's), the queue is
    empty, no dead letter, no second run;
  - a streaming `take --ack manual --name T` SIGSTOPped with an item leaves
    the list, the item comes back to a take after its lease, T shows again
    after SIGCONT, and `delayq ack` with T's token exits 1 (stale);
  - a `take --no-scheduler` paused while it waits pops the wake token of
    the next item made ready (Redis serves BLPOPs in order) and never takes
    it: another take waiting behind it gets the item within one wait (2.5
    s: a take looks again when its BLPOP times out), though no scheduler
    runs to top the tokens up.
Every process is SIGCONTed before it is stopped, in a finally.
"""
# tier: slow
import json
import os
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

Q = "paused-q"
Q2 = "paused-q2"
BEAT = {"DELAYQ_CONSUMER_BEAT_MS": "100"}  # the shortest the CLI takes
LEASE_S = 4  # work P's: room to see it dropped while its item is still in flight
TAKE_LEASE_S = 2
tmp = tempfile.mkdtemp(prefix="delayq-paused.")
runs = os.path.join(tmp, "runs")  # one line per command run: NAME ID ATTEMPT


def listed(env=BEAT):
    """{name: consumer} from `consumers Q --json` (None on failure)."""
    r = dq("consumers", Q, "--json", env=env)
    return {c["name"]: c for c in r.json_lines()} if r.rc == 0 else None


def get(port, path):
    """The JSON of serve's GET path (None on failure)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5 * SLOW) as r:
            return json.loads(r.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None


def api_listed(port):
    """{name: consumer} from serve's GET /api/queues/Q/consumers (None on failure)."""
    got = get(port, f"/api/queues/{Q}/consumers")
    return {c["name"]: c for c in got["consumers"]} if isinstance(got, dict) and "consumers" in got else None


def blocked():
    """The idle seconds of each client waiting in a BLPOP (in the last
    section: its takes'), from CLIENT LIST."""
    return [int(ln.split(" idle=")[1].split()[0]) for ln in redis("CLIENT", "LIST").decode().splitlines()
            if "cmd=blpop" in ln and "flags=b" in ln]


def absent(name, source):
    """True when source() answered and does not list name."""
    got = source()
    return got is not None and name not in got


def run_lines():
    try:
        with open(runs) as f:
            return [ln.split() for ln in f.read().splitlines()]
    except FileNotFoundError:
        return []


def command(name, secs):
    """A work command that records its run, then takes secs."""
    return f'cat >/dev/null; echo "{name} $DELAYQ_ID $DELAYQ_ATTEMPT" >> {runs}; sleep {secs}'


stopped = []  # the processes SIGSTOPped and not yet SIGCONTed


def pause(p):
    stopped.append(p)
    os.kill(p.pid, signal.SIGSTOP)


def resume(p):
    os.kill(p.pid, signal.SIGCONT)
    stopped.remove(p)


def gone_within(name, secs, source):
    t0 = time.monotonic()
    gone = wait_for(lambda: absent(name, source), secs, 0.05)
    return gone, time.monotonic() - t0


server = p = w = t = t2 = r3 = None
try:
    section("a worker holding an item is paused: it leaves the lists, the item stays in flight")
    port = closed_port()
    server = bg_dq("serve", "--listen", f"127.0.0.1:{port}", env=BEAT)
    ok(wait_for(lambda: get(port, "/api/queues") is not None, 10), f"serve answers on 127.0.0.1:{port}", server.err)
    p = bg_dq("work", Q, "--name", "P", "--lease", f"{LEASE_S}s", "--exec", command("P", 2.5), env=BEAT)
    ok(wait_for(lambda: "P" in (listed() or {}), 10), "P listed", (listed(), p.err))
    eq(dq("offer", Q, "0", "job", "--id", "a").rc, 0, "offer a")
    ok(wait_for(lambda: run_lines()[:1] == [["P", "a", "1"]], 10), "P runs a (attempt 1)", run_lines())
    ok(wait_for(lambda: (listed() or {}).get("P", {}).get("in_hand") == 1, 1.5), "P listed with 1 item in hand",
       listed())
    pause(p)
    gone, took = gone_within("P", 5, listed)
    ok(gone, f"paused P left `consumers --json` {took:.2f} s after SIGSTOP (its beat counts 0.3 s)", listed())
    r = dq("consumers", Q, env=BEAT)
    ok(r.rc == 0 and "P " not in r.text, "and the text list", r)
    ok(api_listed(port) == {}, "and GET /api/queues/Q/consumers", api_listed(port))
    r = dq("lookup", Q, "a")
    ok(r.rc == 0 and "state inflight" in r.text and "holder P" in r.text,
       "lookup: a still in flight, held by P, while its lease lasts", r)

    section("the lease ends: another worker gets the item; nothing lost")
    w = bg_dq("work", Q, "--name", "W", "--lease", f"{LEASE_S}s", "--exec", command("W", 0), env=BEAT)
    ok(wait_for(lambda: ["W", "a", "2"] in run_lines(), LEASE_S + 8), "W runs a (attempt 2) after P's lease ended",
       (run_lines(), w.err))
    settled = lambda s: s is not None and s.get("inflight") == 0 and s.get("pending") == 0 and s.get("ready") == 0
    ok(wait_for(lambda: settled(stats(Q)), 5), "W acked a: nothing pending, ready or in flight", stats(Q))
    ok(absent("P", listed) and "W" in (listed() or {}), "P still out of the list, W in it", listed())

    section("P resumes: listed again; its late ack refused as stale")
    resume(p)
    ok(wait_for(lambda: "P" in (listed() or {}), 5), "P listed again after SIGCONT", listed())
    ok(wait_for(lambda: "P" in (api_listed(port) or {}), 5), "and in GET /api/queues/Q/consumers",
       api_listed(port))
    ok(wait_for(lambda: (listed() or {}).get("P", {}).get("in_hand") == 0, 5), "P's item is out of its hand",
       listed())
    w_rc = w.stop(signal.SIGTERM)
    p_rc = p.stop(signal.SIGTERM)
    perr = p.err.decode("utf-8", "replace")
    eq(p_rc, 0, "P exits 0 on SIGTERM")
    stale_line = (f"worker {Q}: the ack of a (attempt 1) came after its lease had run out: refused, the item is "
                  "delivered again")
    ok(perr.count(stale_line) == 1, "P's stderr says its ack of a was stale, once", perr)
    ok("work: stopped: 0 succeeded, 0 failed, 1 stale" in perr, "P's summary counts a as stale, not succeeded",
       perr)
    others = [ln for ln in perr.splitlines()
              if not any(k in ln for k in ("work: running the command", stale_line, "work: stopped: "))]
    eq(others, [], "no other line from P")
    eq(w_rc, 0, "W exits 0")
    ok("work: stopped: 1 succeeded, 0 failed" in w.err.decode(), "W's summary: 1 succeeded", w.err)
    eq(sorted(map(tuple, run_lines())), [("P", "a", "1"), ("W", "a", "2")], "a ran twice: P's attempt and W's")
    s = stats(Q) or {}
    ok(s.get("pending") == 0 and s.get("ready") == 0 and s.get("inflight") == 0 and s.get("dead") == 0,
       "the queue is empty, no dead letter", s)
    r = dq("lookup", Q, "a")
    eq(r.rc, 1, "lookup a: gone (acked once)")

    section("a streaming take with a lease, paused: same story, `delayq ack` of its token exits 1")
    eq(dq("offer", Q, "0", "job-b", "--id", "b").rc, 0, "offer b")
    t = bg_dq("take", Q, "--ack", "manual", "--lease", f"{TAKE_LEASE_S}s", "--count", "0", "--json", "--name", "T",
              env=BEAT)
    ok(wait_for(lambda: t.count() == 1, 10), "T takes b", t.err)
    tb = json.loads(t.snapshot()[0][1]) if t.count() else {}
    ok(wait_for(lambda: "T" in (listed() or {}), 5), "T listed", listed())
    pause(t)
    gone, took = gone_within("T", 5, listed)
    ok(gone, f"paused T left the list {took:.2f} s after SIGSTOP", listed())
    lk = dq("lookup", Q, "b", "--json")
    lease_end = lk.json_lines()[0].get("lease_end_ms", 0) if lk.rc == 0 else 0
    r2 = dq("take", Q, "--ack", "manual", "--json", "--timeout", f"{TAKE_LEASE_S + 8}s")
    got_ms = server_ms()
    got = r2.json_lines()
    if got and lease_end:
        note(f"b: lease end -> ready {got[0].get('ready_ms', 0) - lease_end} ms, ready -> taken about "
             f"{got_ms - got[0].get('ready_ms', 0)} ms")
    ok(r2.rc == 0 and len(got) == 1 and got[0].get("id") == "b" and got[0].get("attempt") == 2,
       "b comes back to another take after T's lease (attempt 2)", r2)
    resume(t)
    ok(wait_for(lambda: "T" in (listed() or {}), 5), "T listed again after SIGCONT", listed())
    r = dq("ack", Q, "b", tb.get("token", "x"))
    ok(r.rc == 1 and "is not in flight" in r.errtext and "its lease ran out" in r.errtext,
       "ack with T's token: exit 1, not in flight (its lease ran out)", r)
    if got:
        eq(dq("ack", Q, "b", got[0].get("token", "x")).rc, 0, "ack with the new token: 0")
    eq(t.stop(signal.SIGTERM), 0, "T exits 0 on SIGTERM")
    ok(wait_for(lambda: absent("T", listed), 2), "T left at once", listed())

    section("a take paused in its wait swallows a wake token: the others look again within a wait")
    server.stop(signal.SIGTERM)  # no scheduler runs for Q2: no top-up brings the token back
    t2 = bg_dq("take", Q2, "--no-scheduler", "--count", "0", "--json", "--name", "T2", env=BEAT)
    # Paused within a second of its BLPOP (2.5 s), so that the BLPOP is still
    # out in Redis when c comes.
    ok(wait_for(lambda: blocked() == [0], 10), "T2 waits (a BLPOP of under a second is out)", t2.err)
    pause(t2)
    r3 = bg_dq("take", Q2, "--no-scheduler", "--json", "--timeout", "8s")
    ok(wait_for(lambda: len(blocked()) == 2, 10), "a second take waits behind T2", r3.err)
    eq(dq("offer", Q2, "0", "job-c", "--id", "c").rc, 0, "offer c (due now: ready, one wake token)")
    t0 = time.monotonic()
    eq(r3.wait(10), 0, "the second take got c, though paused T2 popped its token")
    took = time.monotonic() - t0
    ok(1 < took < 2.5 + 1.5,
       f"after its own wait of 2.5 s ran out ({took:.2f} s; at once would mean T2's wait had ended)", took)
    eq([m.get("id") for m in parse_json_lines(b"\n".join(ln for _, ln in r3.snapshot()))], ["c"], "it printed c")
    resume(t2)
    eq(t2.stop(signal.SIGTERM), 0, "T2, resumed, exits 0 on SIGTERM")
    eq(t2.count(), 0, "T2 got nothing (its token's entry was taken)")
finally:
    for x in list(stopped):
        os.kill(x.pid, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
    for x in (r3, t2, t, w, p, server):
        if x is not None and x.running():
            x.stop(signal.SIGTERM, timeout=5)

finish()
