"""mutation.py - the scripts against mutated records and entries.

Takes real bytes from Redis (slot records never delivered, retried, and
a take's lease record; ready entries of both versions; dead letters; id index scores;
counters and settings), mutates them (flipped bytes, truncation, extension,
separators added or removed, fields swapped, numbers made huge, negative or
not numbers, ids with bytes the id rule refuses), writes each mutant back
beside a good item, and runs every script on the queue (offer, transfer,
take, ack, nack, extend, cancel, lookup, dead list/redrive/purge, stats,
config), straight through EVALSHA with the arguments the library sends.
No script may answer with an error that is not delayq's own ("delayq:" in
it: a Lua runtime error such as "attempt to compare nil" is a bug), take
longer than a time bound, or lose or repeat the good item. Deterministic
(seed 1234), a bounded count of mutations.
"""
import hashlib
import os
import random
import sys
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

ORD = 2048
COUNT = int(os.environ.get("DQ_MUTATIONS", "2500"))
BOUND_MS = 100 * SLOW  # per script call; each is well under 1 ms normally

R = Redis(timeout=30)
SHA = {}
for name in ("offer", "transfer", "take", "ack", "nack", "extend", "cancel", "lookup", "dead", "stats",
             "config"):
    SHA[name] = R.cmd("SCRIPT", "LOAD", eval_script(name))

untyped, slow_calls, calls = [], [], 0
worst_ms = 0.0


def bucket(id_):
    return int(hashlib.sha1(id_).hexdigest()[:4], 16) % 32768


class Q:
    def __init__(self, name):
        self.name = name
        self.P = f"dq:{{{name}}}:".encode()

    def k(self, s):
        return self.P + s.encode()

    def ev(self, script, keys, args, what):
        """Runs a script; returns its reply, or None for one of delayq's own
        errors. Records untyped errors and slow calls."""
        global calls, worst_ms
        calls += 1
        keys = [self.k(x) for x in keys]
        t0 = time.monotonic()
        try:
            r = R.cmd("EVALSHA", SHA[script], len(keys), *keys, *args)
        except RedisError as e:
            r = None
            if "delayq:" not in str(e):
                untyped.append((script, what, str(e)[:200]))
        if script == "take" and r and isinstance(r[-1], int):
            r = r[:-1]  # the queue's epoch ends a take's reply: the rest is the take's
        ms = (time.monotonic() - t0) * 1000
        worst_ms = max(worst_ms, ms)
        if ms > BOUND_MS:
            slow_calls.append((script, what, round(ms, 1)))
        return r

    # The scripts, with the arguments the library sends.
    def offer(self, id_, payload=b"p", ms=0, flags=0):
        return self.ev("offer", ["zs", "r", "n", "s"],
                       [self.P, self.k("w"), "1", id_, payload, str(ms), str(flags), str(bucket(id_))], "offer")

    def transfer(self):
        return self.ev("transfer", ["zs", "r", "x", "n", "d", "dz", "s"], [self.P, self.k("w"), "1000", "2000", "1", "1"],
                       "transfer")

    def take(self, lease=60000, n=16, req=None):
        req = req or "req%d" % random.getrandbits(40)
        return req, self.ev("take", ["zs", "r", "x", "n", "s", "cfg"],
                            [self.P, self.k("w"), str(n), str(lease), req + ".", "5", "0",
                             self.k("t:" + req)], "take")

    def ack(self, pairs):
        return self.ev("ack", ["zs", "n"], [self.P, "1"] + ack_groups(pairs), "ack")

    def nack(self, id_, tok, delay=-1):
        return self.ev("nack", ["zs", "n", "d", "dz", "cfg"],
                       [self.P, self.k("w"), id_, tok, str(delay), "oops", "-1", "-1", "0.5", "1"], "nack")

    def extend(self, id_, tok):
        return self.ev("extend", ["zs", "n"], [self.P, id_, tok, "30000", self.k("w"), "1"], "extend")

    def dead(self, op, *args):
        return self.ev("dead", ["d", "dz", "r", "s"], [self.P, op] + list(args), "dead " + op)


def ack_groups(pairs):
    """ack.lua's items, grouped as src/util/ackargs.c groups them: each token cut
    at its last two dots into prefix, middle and suffix (a token with fewer
    dots is all prefix), consecutive items of one prefix and suffix in one
    group [prefix, suffix, count, (middle, id, bucket)...]."""
    groups = []
    for id_, tok in pairs:
        last = tok.rfind(b".")
        before = tok.rfind(b".", 0, last) if last >= 0 else -1
        if before < 0:
            pre, mid, suf = tok, b"", b""
        else:
            pre, mid, suf = tok[:before + 1], tok[before + 1:last], tok[last:]
        if not groups or groups[-1][:2] != [pre, suf]:
            groups.append([pre, suf, []])
        groups[-1][2] += [mid, id_, str(bucket(id_))]
    return [a for pre, suf, items in groups for a in [pre, suf, str(len(items) // 3)] + items]


def entry_id(e):
    """The id of a ready entry as the client decodes it, or None."""
    try:
        f = e.split(b"|")
        if e[:1] == b"1":
            il, head = int(f[3]), len(b"|".join(f[:4])) + 1
        else:
            il, head = int(f[4]), len(b"|".join(f[:6])) + 1
        return e[head:head + il]
    except (ValueError, IndexError):
        return None


def deliveries(q, reply, req):
    """(id, token) of each entry a take handed out."""
    out = []
    if not reply:
        return out
    for i, e in enumerate(reply[1:], 1):
        if e:
            out.append((entry_id(e), ("%s.%d.%d" % (req, i, reply[0])).encode() if reply[0] else None))
    return out


# ------------------------------------------------------------------ real bytes to start from

src = Q("src")
now = server_ms()
src.offer(b"a1", b"pending payload", 60000)                  # v1 slot record
src.offer(b"a3", b"retried payload")
src.offer(b"a4", b"in-flight payload")
src.offer(b"a6", b"ready v2 payload")
req, rep = src.take(n=3)
toks = dict(deliveries(src, rep, req))
src.nack(b"a3", toks[b"a3"], 60000)                           # v2 retry record with an error
src.nack(b"a6", toks[b"a6"], 0)                               # due now: a ready v2 entry
time.sleep(0.01)
src.transfer()
src.offer(b"a2", b"ready payload")                            # ready v1 entry
entries = R.cmd("LRANGE", src.k("r"), 0, -1)
R.cmd("HSET", src.k("cfg"), "max_attempts", "1")
src.offer(b"a5", b"dead payload")
src.transfer()
rep = src.ev("take", ["zs", "r", "x", "n", "s", "cfg"],
             [src.P, src.k("w"), "16", "60000", "reqd.", "-1", "0", src.k("t:reqd")], "take")
for id_, tok in deliveries(src, rep, "reqd"):
    if id_ == b"a5":
        src.nack(b"a5", tok)                                  # a dead letter
    elif id_ is not None:
        src.nack(id_, tok, 0)

records = []
for s_ in R.cmd("ZRANGE", src.k("zs"), 0, -1):
    rs = R.cmd("ZRANGE", src.k("q:" + s_.decode()), 0, -1, "WITHSCORES")
    records += list(zip(rs[0::2], rs[1::2]))
dead = list(R.cmd("HGETALL", src.k("d")))
dead = list(zip(dead[0::2], dead[1::2]))
section("samples")
ok(len(records) >= 3 and {r[:1] for r, _ in records} == {b"1", b"2", b"4"},
   f"{len(records)} slot records of all three versions (pending, retried, a take's leases)", records)
ok(len(entries) >= 2 and {e[:1] for e in entries} == {b"1", b"2"}, f"{len(entries)} ready entries of both versions",
   entries)
ok(len(dead) >= 1, f"{len(dead)} dead letters", dead)

# ------------------------------------------------------------------ mutations

NUMS = [b"", b"0", b"-1", b"-0", b"01", b"1.5", b"1e400", b"nan", b"inf", b"99999999999999999999999",
        b"4398046511104", b"999999999", b"1000000000", b"9" * 60, b" 1", b"0x10"]
BAD_ID_BYTES = [b" ", b"\t", b"\n", b"\x7f", b"\x80", b"\x00", b"|", b"\xff"]


def mutate(rng, b):
    how = rng.randrange(9)
    if how == 0 and b:                                         # flip a byte
        i = rng.randrange(len(b))
        return b[:i] + bytes([rng.randrange(256)]) + b[i + 1:]
    if how == 1:                                               # truncate
        return b[:rng.randrange(len(b) + 1)]
    if how == 2:                                               # extend
        return b + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
    if how == 3:                                               # add a separator
        i = rng.randrange(len(b) + 1)
        return b[:i] + b"|" + b[i:]
    if how == 4 and b"|" in b:                                 # remove one
        idx = [i for i, c in enumerate(b) if c == 0x7c]
        i = rng.choice(idx)
        return b[:i] + b[i + 1:]
    f = b.split(b"|")
    if how == 5 and len(f) > 2:                                # swap two head fields
        i, j = rng.randrange(1, min(len(f) - 1, 7)), rng.randrange(1, min(len(f) - 1, 7))
        f[i], f[j] = f[j], f[i]
        return b"|".join(f)
    if how in (6, 7) and len(f) > 2:                           # a number made huge, negative, not one
        i = rng.randrange(1, min(len(f) - 1, 7))
        f[i] = rng.choice(NUMS)
        return b"|".join(f)
    if len(b) > 8:                                             # a bad byte where the id is
        i = rng.randrange(len(b) - 6, len(b))
        return b[:i] + rng.choice(BAD_ID_BYTES) + b[i + 1:]
    return b + b"|"


def scores(rng, s):
    return rng.choice([s, s, s, b"-5", b"-inf", b"0", b"9007199254740993", b"+inf",
                       str(float(s) + 0.5).encode()])


rng = random.Random(1234)
random.seed(1234)
lost, repeated, kinds = [], [], {}
t_start = time.monotonic()
for n in range(COUNT):
    q = Q("m%d" % n)
    kind = rng.choice(["record", "record", "entry", "entry", "dead", "index", "counter", "setting"])
    kinds[kind] = kinds.get(kind, 0) + 1
    now = server_ms()
    mid = None
    if kind == "record":
        rec, sc = rng.choice(records)
        mrec = mutate(rng, rec)
        score = scores(rng, sc)
        if rng.random() < 0.5:                                  # due now, or kept at its own time
            score = str((now - 10) * ORD).encode()
        R.cmd("ZADD", q.k("zs"), score if score not in (b"+inf", b"-inf") else b"0", "s1")
        R.cmd("ZADD", q.k("q:s1"), score, mrec)
        mid = next((i for i in (b"a1", b"a2", b"a3", b"a4", b"a5", b"a6") if i in mrec), None)
        if mid:
            R.cmd("HSET", q.P + b"i:%d" % bucket(mid), mid, score)
    elif kind == "entry":
        R.cmd("RPUSH", q.k("r"), mutate(rng, rng.choice(entries)))
    elif kind == "dead":
        id_, rec = rng.choice(dead)
        did = mutate(rng, id_) if rng.random() < 0.3 else id_
        R.cmd("HSET", q.k("d"), did or b"x", mutate(rng, rec))
        R.cmd("ZADD", q.k("dz"), str(now - 1000), did or b"x")
        mid = did
    elif kind == "index":
        mid = b"a%d" % rng.randrange(1, 7)
        R.cmd("HSET", q.P + b"i:%d" % bucket(mid), mid, mutate(rng, str((now - 5) * ORD).encode()))
    elif kind == "counter":
        R.cmd("HSET", q.k("n"), rng.choice(["pending", "inflight", "slots"]),
              rng.choice(NUMS + [mutate(rng, b"12")]))
    else:
        R.cmd("HSET", q.k("cfg"), rng.choice(["lease_ms", "max_attempts", "backoff_base_ms", "backoff_max_ms"]),
              rng.choice(NUMS + [mutate(rng, b"1000")]))

    # A good item beside it, due already (through a slot when there is one).
    offered = q.offer(b"good", b"good payload", now - 5, 1) is not None
    got = 0
    q.transfer()
    req, rep = q.take()
    for id_, tok in deliveries(q, rep, req):
        if id_ == b"good":
            got += 1
            q.ack([(b"good", tok), (b"bad id", b"t"), (mid or b"a1", tok)])
        elif id_ is not None:
            (q.nack if rng.random() < 0.5 else q.extend)(id_, tok)
    for x in (mid, b"good"):
        if x:
            q.ev("lookup", ["zs", "d", "n"], [q.P, x, "1"], "lookup")
            q.ev("cancel", ["zs", "n"], [q.P, x, "1"], "cancel")
    if mid:
        q.offer(mid, b"again", 0, 2)
    q.dead("list", "0", "100")
    q.dead("count")
    if mid:
        q.dead("redrive", mid)
    q.dead("redrive_all", "500")
    q.ev("stats", ["zs", "r", "x", "n", "dz"], [q.P], "stats")
    q.ev("config", ["cfg"], ["lease_ms", "", "max_attempts", "", "backoff_base_ms", "", "backoff_max_ms", ""],
         "config")
    # Repair what refuses calls by design (a corrupt counter or setting),
    # then drain: the good item comes exactly once over the whole run.
    R.cmd("DEL", q.k("n"), q.k("cfg"))
    if not offered:  # refused as a whole (a corrupt counter): nothing was written
        ok(q.offer(b"good", b"good payload", now - 5, 1) is not None, f"mutation {n}: offer after the repair")
    for _ in range(3):
        q.transfer()
        req, rep = q.take(lease=0, n=64)
        got += sum(1 for id_, _ in deliveries(q, rep, req) if id_ == b"good")
    if got == 0:
        lost.append((n, kind))
    elif got > 1:
        repeated.append((n, kind))
    q.dead("purge", "500")
    if n % 250 == 249:
        R.cmd("FLUSHALL")

section(f"{COUNT} mutations, {calls} script calls in {time.monotonic() - t_start:.1f} s")
note(f"kinds: {kinds}; slowest call {worst_ms:.1f} ms")
eq(untyped[:5], [], "no script answered with an untyped error (a Lua runtime error)")
eq(slow_calls[:5], [], f"no script call took more than {BOUND_MS} ms")
eq(lost[:5], [], "the good item was never lost")
eq(repeated[:5], [], "the good item was never delivered twice")
finish()
