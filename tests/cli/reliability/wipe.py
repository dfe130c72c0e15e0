"""wipe.py - a queue whose keys vanish is noticed, never silent.

On a redis-server of its own without persistence (no RDB, no AOF; a free
127.0.0.1 port, a temp dir, stopped by pid):
  - restarted under a running scheduler, consumer (take --count 0), worker
    (work) and serve: each says once on stderr that the queue's keys
    vanished, and serve's /metrics keeps the queue with
    delayq_queue_wiped_total 1; a new offer after it is delivered, and
    nothing more is said;
  - FLUSHALL under them: said once more (one line per loss);
  - a queue's settings hash gone alone (as allkeys-lru evicts one key, or a
    DEL): a take by the queue's lease and a read of the settings are
    refused with a message naming it, never run on the defaults; setting
    them again repairs the queue;
  - allkeys-lru under memory pressure evicting the settings: reported
    (refused, or the queue's loss said), never silently defaulted;
  - lookup of an id whose ready list is gone says unknown, not ready.
"""
import os
import shlex
import shutil
import sys
import time
import urllib.request

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403
from topology import free_port  # noqa: E402
import dqtest  # noqa: E402
from ownserver import OwnServer  # noqa: E402

VANISHED = b"keys vanished"
REMADE = b"keys were lost and made anew"

own = OwnServer("delayq-wipe.")
tmp, port, url = own.dir, own.port, own.url
stop_server, rcmd = own.stop, own.cmd


def start_server(*extra):
    """The server without persistence (no RDB, no AOF); waits for PING."""
    return own.start("--save", "", "--appendonly", "no", *extra)


def run(*args, stdin=None):
    return dq("--redis", url, *args, stdin=stdin, redis=False)


def bg(*args):
    """A background delayq whose stderr goes to a file (p.log), read while it runs."""
    log = os.path.join(tmp, f"{args[0]}.{len(os.listdir(tmp))}.err")
    argv = " ".join(shlex.quote(str(a)) for a in [BIN, "--redis", url, *args])
    p = Bg(["sh", "-c", f"exec {argv} 2>{shlex.quote(log)}"], name="delayq " + " ".join(map(str, args[:2])))
    p.log = log
    return p


def said(p, what=VANISHED, queue=b"wq"):
    try:
        with open(p.log, "rb") as f:
            err = f.read()
    except OSError:
        return 0
    return sum(1 for line in err.splitlines() if what in line and b"queue " + queue + b":" in line)


def scrape(sport):
    """serve's /metrics, or "" while it does not answer yet (a slow start:
    serve examines the deployment first, slower under a sanitizer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{sport}/metrics", timeout=10) as f:
            return f.read().decode()
    except OSError:
        return ""


def metric(text, name, queue):
    for line in text.splitlines():
        if line.startswith(f'{name}{{queue="{queue}"}} '):
            return float(line.split()[-1])
    return None


try:
    ok(start_server(), f"a redis-server without persistence on port {port}")

    section("a restart without persistence under running processes")
    eq(run("config", "wq", "--lease", "7s").rc, 0, "config wq --lease 7s")
    eq(run("offer", "wq", "--batch", "-", stdin=b"0\tw0\tnow\n0\tw1\tnow\n1h\tw2\tlater\n").rc, 0,
       "offer two items due now and one in an hour")
    eq(run("offer", "wk", "0", "job").rc, 0, "offer one item to wk (for the worker)")
    sched = bg("schedule", "wq")
    consumer = bg("take", "wq", "--count", "0", "--json", "--no-scheduler")
    worker = bg("work", "wk", "--exec", "cat >/dev/null")
    sport = free_port()
    serve = bg("serve", "--listen", f"127.0.0.1:{sport}")
    ok(wait_for(lambda: consumer.count() >= 2, 10), "the consumer got the two items due")
    ok(wait_for(lambda: rcmd("HGET", "dq:{wk}:n", "acked") == b"1", 10), "the worker did its job")
    ok(wait_for(lambda: metric(scrape(sport), "delayq_queue_wiped_total", "wq") == 0, 10),
       "serve shows wq, delayq_queue_wiped_total 0")
    time.sleep(0.5)  # the scheduler's first run saw the epoch too

    stop_server()
    ok(start_server(), "restarted: every key gone")
    eq(rcmd("DBSIZE"), 0, "the dataset is empty")
    ok(wait_for(lambda: said(consumer) >= 1, 15), "the consumer says the queue's keys vanished")
    ok(wait_for(lambda: said(sched) >= 1, 15), "the scheduler says so")
    ok(wait_for(lambda: said(worker, queue=b"wk") >= 1, 15), "the worker says so (of wk)")
    ok(wait_for(lambda: metric(scrape(sport), "delayq_queue_wiped_total", "wq") == 1, 15),
       "serve: delayq_queue_wiped_total{queue=\"wq\"} 1, wq still shown")
    ok(said(serve) == 1, "serve's log says so")

    eq(run("offer", "wq", "500ms", "after").rc, 0, "an offer after the restart, due in 500 ms")
    ok(wait_for(lambda: consumer.count() >= 3, 10), "... is delivered (the scheduler moved it: it saw the new epoch)")
    time.sleep(2.5)
    eq((said(consumer), said(sched), said(worker, queue=b"wk"), said(serve)), (1, 1, 1, 1),
       "each said it once (consumer, scheduler, worker, serve)")
    eq(said(consumer, REMADE), 0, "the new epoch after the loss is not another loss")

    section("FLUSHALL under them")
    eq(rcmd("FLUSHALL"), "OK", "FLUSHALL")
    ok(wait_for(lambda: said(sched) >= 2, 15), "the scheduler says it again (its safety run)")
    eq(run("offer", "wq", "0", "after flush").rc, 0, "an offer after the flush")
    ok(wait_for(lambda: consumer.count() >= 4, 10), "... is delivered")
    ok(wait_for(lambda: said(consumer) + said(consumer, REMADE) >= 2, 5),
       "the (idle) consumer says it at its next take: the keys were made anew")
    time.sleep(1.5)
    eq((said(consumer) + said(consumer, REMADE), said(sched) + said(sched, REMADE)), (2, 2),
       "one line per loss (2 in all, consumer and scheduler)")
    for p in (sched, consumer, worker, serve):
        eq(p.stop(), 0, f"{p.name} exits 0 on SIGTERM")

    section("the settings hash gone alone (evicted or deleted)")
    eq(run("config", "ws", "--lease", "7s", "--backoff-base", "2s").rc, 0, "config ws --lease 7s --backoff-base 2s")
    eq(run("offer", "ws", "0", "a").rc, 0, "offer one item")
    eq(rcmd("DEL", "dq:{ws}:cfg"), 1, "DEL dq:{ws}:cfg (what allkeys-lru does to one key)")
    r = run("take", "ws", "--ack", "manual", "--timeout", "1s")
    ok(r.rc not in (0, 1) and b"settings" in r.err and b"gone" in r.err,
       "take by the queue's lease is refused, naming the settings gone", r)
    eq(rcmd("LLEN", "dq:{ws}:r"), 1, "... and the item is still ready")
    r = run("config", "ws")
    ok(r.rc != 0 and b"gone" in r.err, "config ws (a read) says the settings are gone", r)
    eq(run("config", "ws", "--lease", "7s").rc, 0, "config ws --lease 7s repairs them")
    r = run("config", "ws", "--json")
    ok(r.rc == 0 and b'"lease_ms":7000' in r.out, "config ws reads lease 7 s again", r)
    r = run("take", "ws", "--ack", "manual", "--json", "--timeout", "2s")
    ok(r.rc == 0 and len(parse_json_lines(r.out)) == 1, "take by the queue's lease works again", r)

    section("allkeys-lru evicting settings")
    eq(run("config", "we", "--lease", "7s").rc, 0, "config we --lease 7s")
    eq(run("offer", "we", "0", "e").rc, 0, "offer one item to we")
    watcher = bg("schedule", "we")
    time.sleep(1.2)  # Redis's LRU clock ticks in seconds: the settings are older than the counters
    used = int(rcmd("INFO", "memory").decode().split("used_memory:")[1].split()[0])
    rcmd("CONFIG", "SET", "maxmemory", str(used + 4 * 1024 * 1024))
    rcmd("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
    filler = "x" * 20000
    n = 0
    with Redis(port=port) as R:
        while R.cmd("EXISTS", "dq:{we}:cfg") == 1 and n < 5000:
            R.cmd("SET", f"filler:{n}", filler)
            R.cmd("HGET", "dq:{we}:n", "pending")  # keeps the counters recent
            n += 1
    rcmd("CONFIG", "SET", "maxmemory", "0")
    eq(rcmd("EXISTS", "dq:{we}:cfg"), 0, f"the settings were evicted ({n} filler keys)")
    counters_left = rcmd("EXISTS", "dq:{we}:n") == 1  # (before the take, which writes them)
    r = run("take", "we", "--ack", "manual", "--timeout", "1s")
    if counters_left:
        ok(r.rc not in (0, 1) and b"settings" in r.err and b"gone" in r.err,
           "take by the queue's lease is refused, naming the settings gone", r)
    else:
        note("the counters were evicted too: the queue's loss is what a watcher reports")
        ok(wait_for(lambda: said(watcher, queue=b"we") == 1, 15), "a scheduler of we says its keys vanished")
    eq(watcher.stop(), 0, "the scheduler of we exits 0")
    rcmd("FLUSHALL")
    rcmd("CONFIG", "SET", "maxmemory-policy", "noeviction")

    section("lookup checks the ready list")
    eq(run("offer", "wl", "0", "r", "--id", "rid").rc, 0, "offer rid, due now (straight to the ready list)")
    r = run("lookup", "wl", "rid")
    ok(r.rc == 0 and b"ready" in r.out, "lookup says ready", r)
    eq(rcmd("DEL", "dq:{wl}:r"), 1, "DEL dq:{wl}:r (an evicted ready list)")
    r = run("lookup", "wl", "rid")
    ok(b"ready" not in r.out and b"unknown" in (r.out + r.err), "lookup no longer says ready", r)
finally:
    dqtest._stop_all()
    stop_server()
    shutil.rmtree(tmp, ignore_errors=True)

finish()
