"""shards.py - one queue spread over shards, on the suite's single node
(where shards only split big keys; shards_cluster.py runs a cluster).

Through the CLI, as users run it:
  - config --shards: refused (exit 3, naming what the queue holds, nothing
    changed) on a queue that holds an item; accepted on an empty one, and
    the settings reach every shard;
  - offers spread over the 4 shards (each shard's own counters);
  - a consumer started before the change learns it (a stale count is
    refused by the scripts and learned), and a fresh CLI process learns it
    on its first call;
  - every id delivered exactly once, none early, by one `take --count 0`
    and by `work`; cancel and lookup by id; leased takes acked, nacked
    into dead letters, then dead list / count / redrive / purge over all
    shards; stats add up;
  - list pages through every shard (cursors name the shard), /metrics of
    `serve` sums the shards;
  - a count the keys do not hold is refused, with nothing written;
  - a consumer fed a trickle on 12 shards costs about 2 script calls an
    item, not one per empty shard (counted, not timed);
  - idle on 12 shards, a consumer sends no command, and a scheduler only
    its safety re-checks;
  - a change of the count whose client died half way is refused for a
    minute, then undone (not every old shard locked) or finished (all
    locked) by the next change, with no item lost.
"""
# tier: slow (about 17 s): make test runs it, make test-fast does not
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

BUILD = os.environ.get("DQ_BUILD_DIR", "build")
Q = "shq"
N = 4


def shard_names(queue, n):
    import subprocess
    r = subprocess.run([os.path.join(BUILD, "tests", "tools", "shardnames"), queue, str(n)],
                       capture_output=True, timeout=10)
    return r.stdout.decode().split()


def counter(name, field):
    v = redis("HGET", f"dq:{{{name}}}:n", field)
    return int(v) if v is not None else None


def config(*args):
    return dq("config", Q, "--json", *args)


section("the shard count changes only on an empty queue")
r = config()
ok(r.rc == 0 and json.loads(r.out).get("shards") == 1, "a new queue has 1 shard", r)
eq(dq("offer", Q, "1h", "x", "--id", "early").rc, 0, "offer one item")
r = config("--shards", N)
ok(r.rc == 3 and b"empty queue" in r.err and b"1 pending" in r.err, "--shards 4 refused: it holds 1 pending",
   r)
eq(json.loads(config().out).get("shards"), 1, "... and nothing changed")
eq(counter(Q, "shards"), None, "... not even the lock (it was undone)")
eq(dq("cancel", Q, "early").rc, 0, "cancel the item")
r = config("--shards", N, "--lease", "2s")
ok(r.rc == 0 and json.loads(r.out).get("shards") == N and json.loads(r.out).get("lease_ms") == 2000,
   "--shards 4 --lease 2s on the empty queue", r)
names = shard_names(Q, N)
eq(len(names), N, "4 shard names")
eq([counter(x, "shards") for x in names] + [counter(Q, "shards")], [N] * (N + 1),
   "every shard and the queue's own keys hold the count")
eq([redis("HGET", f"dq:{{{x}}}:cfg", "lease_ms") for x in names], [b"2000"] * N, "every shard has the lease")
eq(dq("config", Q, "--shards", "0").rc, 2, "--shards 0: usage error")
eq(dq("config", Q, "--shards", "65").rc, 2, "--shards 65: usage error")

section("offers spread over the shards; a fresh process learns the count on its first call")
lines = "".join(f"{i}ms\tk{i}\tpayload {i}\n" for i in range(2000)).encode()
r = dq("offer", Q, "--batch", "-", stdin=lines)
eq((r.rc, r.out), (0, b"2000\n"), "2000 offered through --batch")
per = [(counter(x, "pending") or 0) + int(redis("LLEN", f"dq:{{{x}}}:r")) for x in names]
eq(sum(per), 2000, f"all pending or ready in the shards: {per}")
ok(all(400 <= p <= 600 for p in per), "each shard holds a fair share (400..600 of 2000)", per)
ok(counter(Q, "pending") in (None, 0) and redis("LLEN", f"dq:{{{Q}}}:r") == 0, "none in the queue's own keys")
st = stats(Q)
ok(st and st["pending"] + st["ready"] == 2000, "stats: 2000 pending or ready, summed over the shards", st)
r = dq("lookup", Q, "k7", "--json")
ok(r.rc == 0 and json.loads(r.out).get("state") == "pending", "lookup by id finds k7 pending", r)
eq(dq("cancel", Q, "k7").rc, 0, "cancel k7 (by id, in its shard)")
eq(dq("cancel", Q, "k7").rc, 1, "... once")

section("one take --count 0 drains all shards: each id once, none early")
r = dq("take", Q, "--count", "0", "--json", "--timeout", "3s", timeout=90)
ms = r.json_lines()
ids = [m["id"] for m in ms]
eq(sorted(ids), sorted(f"k{i}" for i in range(2000) if i != 7), "every id but the cancelled one, once")
ok(all(m["ready_ms"] >= m["due_ms"] for m in ms), "none before its due time")
ok(all(m.get("queue", Q) == Q for m in ms), "each says the queue's name")
st = stats(Q)
ok(st and (st["pending"], st["ready"], st["inflight"]) == (0, 0, 0), "stats: nothing left", st)

section("a consumer started before a change learns it")
eq(config("--shards", "1").rc, 0, "back to 1 shard (the queue is empty)")
early = bg_dq("take", Q, "--count", "0", "--json", "--timeout", "60s")
ok(wait_for(lambda: redis("CLIENT", "LIST").count(b"cmd=blpop") >= 1, 10), "the consumer waits (BLPOP)")
eq(config("--shards", N).rc, 0, "--shards 4 while it waits")
r = dq("offer", Q, "0", "late one", "--id", "late1")
eq(r.rc, 0, "offer one item")
sched = bg_dq("schedule", Q)
ok(wait_for(lambda: early.count() >= 1, 15), "the waiting consumer gets it", early.snapshot())
early.stop()
sched.stop()

section("leases over shards: ack, nack into dead letters, dead list/count/redrive/purge")
eq(config("--max-attempts", "1").rc, 0, "max attempts 1 (every shard)")
lines = "".join(f"0\tl{i}\tlease {i}\n" for i in range(40)).encode()
eq(dq("offer", Q, "--batch", "-", stdin=lines).out, b"40\n", "40 offered, due now")
r = dq("take", Q, "--count", "40", "--ack", "manual", "--lease", "1m", "--json", "--timeout", "5s", timeout=60)
leased = r.json_lines()
ok(len(leased) == 40, "40 taken with a lease", r)
st = stats(Q)
ok(st and st["inflight"] == 40, "stats: 40 in flight", st)
acked = [dq("ack", Q, m["id"], m["token"]).rc for m in leased[:20]]
eq(acked, [0] * 20, "20 acked, each in its shard")
nacked = [dq("nack", Q, m["id"], m["token"], "--error", "boom").rc for m in leased[20:]]
eq(nacked, [0] * 20, "20 nacked on their last attempt")
eq(dq("dead", Q, "count").out, b"20\n", "dead count: 20, over all the shards")
per = [int(redis("ZCARD", f"dq:{{{x}}}:dz")) for x in names]
ok(sum(per) == 20 and sum(1 for p in per if p) >= 2, f"the dead letters lie in several shards: {per}")
r = dq("dead", Q, "list", "--json")
eq(sorted(d["id"] for d in r.json_lines()), sorted(m["id"] for m in leased[20:]), "dead list: all 20")
eq(dq("dead", Q, "redrive", leased[20]["id"]).out, b"1\n", "redrive one by id")
eq(dq("dead", Q, "redrive").out, b"19\n", "redrive the other 19")
eq(dq("dead", Q, "count").out, b"0\n", "no dead letter left")
st = stats(Q)
ok(st and st["ready"] == 20 and st["inflight"] == 0, "stats: the 20 are ready again", st)
eq(config("--max-attempts", "16").rc, 0, "max attempts back to 16")

section("work on a sharded queue")
got = os.path.join(os.environ.get("DQ_TEST_REDIS_DIR", "/tmp"), "shards_work.txt")
if os.path.exists(got):
    os.unlink(got)
w = bg_dq("work", Q, "--exec", f'p=$(cat); echo "$p" >> {got}', "--concurrency", "4")
ok(wait_for(lambda: os.path.exists(got) and open(got).read().count("\n") >= 20, 20), "work ran the 20")
w.stop()
eq(sorted(x for x in open(got).read().split("\n") if x), sorted(m["payload"] for m in leased[20:]),
   "each of the 20 payloads once")
st = stats(Q)
ok(st and (st["pending"], st["ready"], st["inflight"], st["dead"]) == (0, 0, 0, 0), "stats: empty", st)

section("list pages through every shard; /metrics sums them")
lines = "".join(f"1h\tp{i}\tlater {i}\n" for i in range(250)).encode()
eq(dq("offer", Q, "--batch", "-", stdin=lines).out, b"250\n", "250 offered, due in an hour")
seen, cursor, pages = [], None, 0
for _ in range(40):
    r = dq("list", Q, "--limit", "40", "--json", *(["--cursor", cursor] if cursor else []))
    if not ok(r.rc == 0, "list a page", r):
        break
    seen += [m["id"] for m in r.json_lines()]
    pages += 1
    err = r.err.decode()
    cursor = err.split("next: ")[1].strip() if "next: " in err else None
    if not cursor:
        break
eq(sorted(seen), sorted(f"p{i}" for i in range(250)), f"list: all 250 pending, once each, in {pages} pages")
ok(pages >= 7, "pages of at most 40, each from one shard", pages)
import urllib.request  # noqa: E402
port = closed_port()
srv = bg_dq("serve", "--listen", f"127.0.0.1:{port}", Q)
body = ""


def scrape():
    global body
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        return True
    except OSError:
        return False


ok(wait_for(scrape, 10), "serve answers /metrics")
line = [x for x in body.splitlines() if x.startswith("delayq_items{") and f'queue="{Q}"' in x and
        'state="pending"' in x]
ok(line and float(line[0].split()[-1]) == 250.0, "delayq_items pending = 250, summed over the shards", line)
srv.stop()
eq(dq("cancel", Q, "p0").rc, 0, "cancel one of them by id")

section("a count the keys do not hold is refused, and nothing is written")
r = redis("FUNCTION", "LIST")
lib = [x for x in r if b"delayq_" in x[1]][0][1].decode()
try:
    redis("FCALL", f"{lib}_offer", "4", f"dq:{{{Q}}}:zs", f"dq:{{{Q}}}:r", f"dq:{{{Q}}}:n", f"dq:{{{Q}}}:s",
          f"dq:{{{Q}}}:", f"dq:{{{Q}}}:w", "1", "x1", "p", "0", "4", "1")
    ok(False, "an offer routed by 1 to a 4-shard queue's own keys is refused")
except RedisError as exc:
    ok(str(exc).startswith("DQSHARDS 4"), "an offer routed by 1 to a 4-shard queue's own keys: DQSHARDS 4", exc)
eq(redis("EXISTS", f"dq:{{{Q}}}:zs"), 0, "... nothing written")


section("a consumer at a trickle looks where a token came from, not at every empty shard")
# 40 items offered one by one, 40 ms apart, on a 12-shard queue, to a
# waiting `take --count 40`. Each item wakes the consumer on its shard; the
# next take looks there (found empty) and skips the 11 shards its armed
# waits saw empty, so about 2 script calls an item. Looking at every empty
# shard in turn costs about 13 (counted with INFO commandstats: cannot flake).
TQ, TN, TITEMS = "shtrickle", 12, 40
eq(dq("config", TQ, "--shards", TN).rc, 0, "config --shards 12")
tk = bg_dq("take", TQ, "--count", TITEMS, "--no-scheduler", "--timeout", "60s")
time.sleep(1.0 * SLOW)  # the consumer learned the count and waits on every shard
redis("CONFIG", "RESETSTAT")
feed = subprocess.Popen([BIN, "--redis", URL, "offer", TQ, "--batch", "-"], stdin=subprocess.PIPE,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for i in range(TITEMS):
    feed.stdin.write(f"0\ttr{i}\tx\n".encode())
    feed.stdin.flush()
    time.sleep(0.04)
feed.stdin.close()
feed.wait(timeout=30)
eq(tk.wait(30), 0, "the consumer got its 40 items and exited")
eq(tk.count(), TITEMS, "40 lines")
fcalls = command_calls("fcall")
note(f"script calls for {TITEMS} items offered one by one and taken: {fcalls}")
ok(fcalls <= 4 * TITEMS, f"at most 4 script calls an item (offer, take, one look that finds it empty, slack)",
   fcalls)


section("idle on a 12-shard queue: a consumer costs Redis its waits, a scheduler its safety re-checks")
# Nothing else runs on the server now. Counted, not timed: a consumer that
# looked again and again would show hundreds of commands in 4 s. A wait
# (BLPOP) ends every half safety interval (2.5 s), so that no take waits on
# a silent node longer than that interval: each shard's is sent again, after
# an LLEN of its ready list (a token popped by a paused consumer: see
# tests/cli/ops/idle_take_cost.py).
IQ = "shidle"
eq(dq("config", IQ, "--shards", TN).rc, 0, "config --shards 12")


def commands():
    st = dict(x.split(":", 1) for x in redis("INFO", "stats").decode().splitlines() if ":" in x)
    return int(st["total_commands_processed"])


idle = bg_dq("take", IQ, "--no-scheduler", "--timeout", "60s")
time.sleep(1.5 * SLOW)  # it looked at every shard once and waits on all of them
c0, b0, l0 = commands(), command_calls("blpop"), command_calls("llen")
time.sleep(4)
used = commands() - c0 - 3  # less the INFOs that read c0, b0 and l0
blpops, llens = command_calls("blpop") - b0, command_calls("llen") - l0
ok(used == blpops + llens and blpops <= 2 * TN and llens <= blpops,
   "a waiting consumer only waited again in 4 s: at most 2 BLPOPs a shard, each after an LLEN", (used, blpops, llens))
ok(idle.running(), "... and it is still waiting")
idle.stop()
sch = bg_dq("schedule", IQ)
time.sleep(1.5 * SLOW)  # its catch-up runs are done
f0 = command_calls("fcall")
time.sleep(4)
runs = command_calls("fcall") - f0
note(f"an idle scheduler of 12 shards ran {runs} scripts in 4 s (each shard re-checks every 2.5-5 s)")
ok(runs <= 2 * TN, "at most 2 safety re-checks a shard in 4 s", runs)
sch.stop()


section("a change of the count cut off half way is undone or finished by the next one")
# What a client killed in the middle of `config --shards` leaves, made step
# by step with the script a change runs (lua/shards.lua).


def step(name, op, count):
    return redis("FCALL", f"{lib}_shards", "3", f"dq:{{{name}}}:n", f"dq:{{{name}}}:r", f"dq:{{{name}}}:dz",
                 op, str(count))


def journal(name):
    return redis("HMGET", f"dq:{{{name}}}:n", "chg_from", "chg_to", "chg_ms", "chg_locked")


def age_journal(name):  # as if the change began 61 s ago
    redis("HSET", f"dq:{{{name}}}:n", "chg_ms", str(server_ms() - 61000))


CQ = "shcut"
eq(dq("config", CQ, "--shards", 4).rc, 0, "a 4-shard queue")
four = shard_names(CQ, 4)
eq(step(CQ, "begin", 8), [1, 4], "a change to 8 begins (recorded at the queue's own keys)")
eq([step(four[i], "lock", 4) for i in (0, 1)], [1, 1], "... and locks 2 of the 4 shards, then its client dies")
offers = [dq("offer", CQ, "1h", "x", "--id", f"cut{i}") for i in range(16)]
took = [f"cut{i}" for i, r in enumerate(offers) if r.rc == 0]
refused = [r for r in offers if r.rc != 0]
ok(took and refused and all(r.rc == 3 and b"shard count" in r.err for r in refused),
   f"offers to the 2 locked shards are refused (exit 3), to the others taken ({len(took)} of 16)",
   [(r.rc, r.err[:100]) for r in offers])
r = dq("config", CQ, "--shards", 8)
ok(r.rc == 3 and b"under way" in r.err, "another change right away: refused, the first is under way", r)
age_journal(CQ)
r = dq("config", CQ, "--shards", 2)
ok(r.rc == 3 and b"empty queue" in r.err, "a minute on, the next change undoes the cut one (not all locked), "
   "then is refused: the queue holds items", r)
eq(json.loads(dq("config", CQ, "--json").out).get("shards"), 4, "the count is 4 again")
eq([counter(x, "shards") for x in four], [4, 4, 4, 4], "... on every shard")
eq(journal(CQ), [None, None, None, None], "... and the record is gone")
eq(stats(CQ)["pending"], len(took), f"the {len(took)} items offered meanwhile are all there")
eq(dq("offer", CQ, "1h", "x", "--id", "cut-after").rc, 0, "offers are taken on every shard again")
eq(sum(dq("offer", CQ, "1h", "x", "--id", f"cut{i}").rc == 0 for i in range(16)), 16, "... all 16 ids")

CQ2 = "shcut2"
eq(dq("config", CQ2, "--shards", 2).rc, 0, "a 2-shard queue")
two, three = shard_names(CQ2, 2), shard_names(CQ2, 3)
eq(step(CQ2, "begin", 3), [1, 2], "a change to 3 begins")
eq([step(two[0], "lock", 2), step(two[1], "lock", 2), step(CQ2, "locked", 1)], [1, 1, 1],
   "... locks both old shards and records it")
eq(step(three[0], "set", 3), 1, "... sets the first new shard, then its client dies")
age_journal(CQ2)
r = dq("offer", CQ2, "1h", "x")
ok(r.rc == 3, "offers are refused meanwhile (exit 3)", r)
r = dq("config", CQ2, "--shards", 3)
ok(r.rc == 0, "config --shards 3 (the count the cut change wanted): it is finished", r)
eq([counter(x, "shards") for x in three + two + [CQ2]], [3] * 6, "3 on the new shards, the old and the home")
eq(journal(CQ2), [None, None, None, None], "... and the record is gone")
eq(sum(dq("offer", CQ2, "0", f"v{i}", "--id", f"fw{i}").rc == 0 for i in range(12)), 12, "12 offers taken")
r = dq("take", CQ2, "--count", 12, "--timeout", "5s")
eq(sorted(r.out.split()), sorted(f"v{i}".encode() for i in range(12)), "... and all 12 taken")

finish()
