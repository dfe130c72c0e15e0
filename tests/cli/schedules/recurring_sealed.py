"""recurring_sealed.py - sealed recurring schedules (issue 40):
  - 'every' and 'cron' with --key-file seal the payload once, bound to the
    queue and the schedule's name: Redis holds the envelope (the schedule's
    payload, its tick bucket, its ticks' ready entries), never the
    plaintext; the listing gives the stored bytes;
  - a 1 s schedule's ticks, made by a scheduler without keys, are taken
    opened by a consumer with the key (and listed opened, by 'list' and by
    a serve with the key; a serve without it shows them sealed); a consumer
    without a key file, or with another key, leaves them ready (exit 3);
  - the same on a queue of 3 shards (the binding is the queue's name);
  - planted with raw commands: a tick item whose payload is another
    schedule's envelope, a same-named schedule's of another queue, an
    ordinary item's, or plaintext is set aside with its reason; so is an
    ordinary item carrying a schedule's envelope, and one whose id is
    almost a tick's ("a@0123": the id is parsed strictly); a schedule's own
    envelope replayed as another of its ticks opens (docs/security.md).
"""
import json
import os
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

from browser import serve_up  # noqa: E402

R = Redis(timeout=30)
tmp = tempfile.mkdtemp(prefix="delayq-recurring-sealed.")
MAGIC = b"\0dqs1"


def keygen():
    r = dq("keygen", redis=False)
    ok(r.rc == 0 and r.text.startswith("dq-key-1 "), "keygen prints a key line", r)
    return r.text


k1 = private_file(tmp, "k1", keygen())
k2 = private_file(tmp, "k2", keygen())


def take(q, key, *extra):
    args = (["--key-file", key] if key else []) + ["take", q, "--json", "--no-scheduler"]
    return dq(*args, *(extra or ("--timeout", "1s")))


def got(r):
    """{id: payload bytes} of a take --json that exited 0, or 1 with fewer
    items than its --count, else {}."""
    return {m["id"]: msg_payload(m) for m in r.json_lines()} if r.rc in (0, 1) else {}


def raw_values(q):
    """Every value under the queue's keys, as Redis stores them (strings,
    hash fields and values, list and zset members), and each key's DUMP."""
    out = []
    for k in R.cmd("KEYS", f"dq:{{{q}}}*") or []:
        t = R.cmd("TYPE", k)
        t = t.decode() if isinstance(t, bytes) else t
        if t == "string":
            out.append(R.cmd("GET", k))
        elif t == "hash":
            out += R.cmd("HGETALL", k)
        elif t == "list":
            out += R.cmd("LRANGE", k, 0, -1)
        elif t == "zset":
            out += R.cmd("ZRANGE", k, 0, -1)
        out.append(R.cmd("DUMP", k))
    return [v for v in out if isinstance(v, bytes)]


def serve_ready(key, q):
    """The ready items of q as a serve (with key, or none) shows them:
    [(id, sealed, payload)]."""
    port = closed_port()
    srv = bg_dq(*(["--key-file", key] if key else []), "serve", "--listen", f"127.0.0.1:{port}", q)
    items = None
    if ok(wait_for(lambda: serve_up(port), 10 * SLOW), "serve answers", srv.err):
        url = f"http://127.0.0.1:{port}/api/queues/{q}/items?state=ready"
        with urllib.request.urlopen(url, timeout=10 * SLOW) as r:
            items = [(i["id"], i.get("sealed"), i.get("payload")) for i in json.loads(r.read())["items"]]
    ok(srv.stop() == 0, "serve stops cleanly", srv.err[-300:])
    return items


def ready_entries(q):
    return R.cmd("LRANGE", f"dq:{{{q}}}:r", 0, -1)


def aside_reasons(q):
    """{id: reason} of the set-aside list: '1|<reason>|0|' then the ready
    entry '1|<due>|<ready>|<idlen>|<id><payload>' (these reasons hold no '|')."""
    out = {}
    for e in R.cmd("LRANGE", f"dq:{{{q}}}:x", 0, -1):
        f = e.split(b"|", 7)
        out[f[7][:int(f[6])].decode()] = f[1].decode(errors="replace")
    return out


def plant(q, pid, payload):
    """An item pid whose stored payload is payload: offered plain, then its
    ready entry rewritten (what anyone who may write to Redis can do)."""
    eq(dq("offer", q, "0", "--id", pid, stdin=b"x").rc, 0, f"offer {pid} plain")
    e = ready_entries(q)[-1]
    at = e.index(pid.encode()) + len(pid)  # an entry is head | id | payload
    R.cmd("LSET", f"dq:{{{q}}}:r", -1, e[:at] + payload)


# ------------------------------------------------------------------ ticks delivered
section("a sealed 1 s schedule: envelopes in Redis, plaintext to the key's holders")
Q = "rsd"
SECRET = b"tick secret 7f3a"
r = dq("--key-file", k1, "every", Q, "beat", "1s", SECRET.decode())
ok(r.rc == 0 and r.text.strip().isdigit(), "every with --key-file exits 0 and prints the first tick", r)
spay = R.cmd("HGET", f"dq:{{{Q}}}:spay", "beat")
ok(isinstance(spay, bytes) and spay.startswith(MAGIC) and len(spay) == len(SECRET) + 53,
   "the schedule's payload is stored as an envelope (53 bytes more)", spay)
sched = bg_dq("schedule", Q)  # a scheduler without keys makes the ticks
ok(wait_for(lambda: R.cmd("LLEN", f"dq:{{{Q}}}:r") >= 2, 8, 0.1), "two ticks made ready")
vals = raw_values(Q)
ok(vals and not any(SECRET in v for v in vals), "no plaintext in any key, value or DUMP of the queue",
   [v for v in vals if SECRET in v][:2])
ok(all(e.endswith(spay) for e in ready_entries(Q)), "each tick's ready entry carries the envelope")
sl = dq("schedules", Q, "--json").json_lines()
eq([(s["name"], s["payload_bytes"]) for s in sl], [("beat", len(SECRET) + 53)],
   "schedules --json: the stored bytes")
r = dq("--key-file", k1, "list", Q, "--state", "ready", "--json")
ok(r.rc == 0 and r.json_lines() and all(m.get("payload") == SECRET.decode() for m in r.json_lines()),
   "list with the key: tick items shown opened", r)
shown = serve_ready(None, Q) or []
ok(shown and all(i.startswith("beat@") and sealed is True and p is None for i, sealed, p in shown),
   "serve without the key: tick items shown sealed", shown)
shown = serve_ready(k1, Q) or []
ok(shown and all(sealed is False and p == SECRET.decode() for _, sealed, p in shown),
   "serve with the key: tick items shown opened", shown)
r = take(Q, None)
ok(r.rc == 3 and "sealed with key" in r.errtext and r.text == "",
   "take without a key file: nothing delivered, exit 3 naming the key", r)
r = take(Q, k2)
ok(r.rc == 3 and "sealed with key" in r.errtext and r.text == "", "take with another key: the same", r)
r = take(Q, k1, "--count", "1")
m = r.json_lines() if r.rc == 0 else []
ok(len(m) == 1 and m[0]["id"].startswith("beat@") and msg_payload(m[0]) == SECRET,
   "take with the key: a tick item, its payload opened", r)
eq((stats(Q) or {}).get("set_aside"), 0, "none set aside")
eq(dq("schedules", Q, "remove", "beat").rc, 0, "remove")
sched.stop()

r = dq("--key-file", k1, "cron", Q, "night", "0 3 * * *", "--tz", "Europe/Berlin", "cron secret")
ok(r.rc == 0, "cron with --key-file exits 0", r)
spay = R.cmd("HGET", f"dq:{{{Q}}}:spay", "night")
ok(isinstance(spay, bytes) and spay.startswith(MAGIC) and b"cron secret" not in spay,
   "the cron schedule's payload is an envelope", spay)

section("a sharded queue: the binding is the queue's, whichever shard holds the schedule")
Q = "rsh"
eq(dq("config", Q, "--shards", "3").rc, 0, "config --shards 3")
for n in ("s1", "s2", "s3"):
    eq(dq("--key-file", k1, "every", Q, n, "1s", f"shard secret {n}").rc, 0, f"every {n} with the key")
sched = bg_dq("schedule", Q)
ok(wait_for(lambda: (stats(Q) or {}).get("ready", 0) >= 3, 8, 0.5), "ticks made ready")
for n in ("s1", "s2", "s3"):
    eq(dq("schedules", Q, "pause", n).rc, 0, f"pause {n}")
sched.stop()
r = take(Q, k1, "--count", "100", "--timeout", "1s")
seen = {(i.split("@")[0], p) for i, p in got(r).items()}
eq(seen, {(n, f"shard secret {n}".encode()) for n in ("s1", "s2", "s3")},
   "each schedule's ticks taken opened with the key")
eq((stats(Q) or {}).get("set_aside"), 0, "none set aside")

# ------------------------------------------------------------------ forgeries
section("envelopes moved between schedules, queues and items: set aside with a reason")
Q, Q2 = "rsf", "rsf2"
far = str(server_ms() + 86400000)  # no tick of these comes during the test
for q, n, p in ((Q, "a", "alpha secret"), (Q, "b", "bravo secret"), (Q2, "a", "other queue secret")):
    eq(dq("--key-file", k1, "every", q, n, "1h", p, "--start", far).rc, 0, f"every {n} on {q} with the key")
env_a = R.cmd("HGET", f"dq:{{{Q}}}:spay", "a")
env_b = R.cmd("HGET", f"dq:{{{Q}}}:spay", "b")
env_a2 = R.cmd("HGET", f"dq:{{{Q2}}}:spay", "a")
eq(dq("--key-file", k1, "offer", Q, "0", "--id", "o-1", stdin=b"ordinary secret").rc, 0, "offer o-1 sealed")
e = ready_entries(Q)[-1]
env_o = e[e.index(b"o-1") + 3:]
eq(got(take(Q, k1)), {"o-1": b"ordinary secret"}, "o-1 taken opened")
T = int(far) - 86400000
cases = {
    f"a@{T + 1}": (env_b, "failed authentication"),    # another schedule's
    f"a@{T + 2}": (env_a2, "failed authentication"),   # the same name's in another queue
    f"a@{T + 3}": (env_o, "failed authentication"),    # an ordinary item's
    f"a@{T + 4}": (b"plain forged tick", "not sealed"),
    "o-2": (env_a, "failed authentication"),           # an ordinary item with a schedule's
    "a@0123": (env_a, "failed authentication"),        # no tick id: a leading zero
    "a@": (env_a, "failed authentication"),
    f"A@{T + 5}": (env_a, "failed authentication"),    # names are case-sensitive
}
for pid, (payload, _) in cases.items():
    plant(Q, pid, payload)
plant(Q, f"a@{T + 6}", env_a)  # replayed as another tick of its own schedule
r = take(Q, k1, "--count", "100", "--timeout", "1s")
eq(got(r), {f"a@{T + 6}": b"alpha secret"}, "only the replayed tick is delivered, opened")
reasons = aside_reasons(Q)
eq(sorted(reasons), sorted(cases), "every other one is set aside")
for pid, (_, why) in cases.items():
    ok(why in reasons.get(pid, ""), f"{pid}: set aside as '{why}'", reasons.get(pid))
eq(take(Q, k1).rc, 1, "nothing left to take")

finish()
