"""sealed.py - sealed payloads through the CLI (--key-file, delayq keygen).

- Round trip byte for byte with binary payloads; no plaintext anywhere in
  Redis (every key of the queue, DUMPed), nor in its AOF or RDB files.
- No key, or the wrong key: exit 3 naming the key id and the item, and the
  item stays where a consumer with the key gets it (a plain take included).
- A tampered envelope, or payloads swapped between two items: set aside with
  the reason, not delivered, not retried (also under a lease: acked away).
- Rotation: a file of [new, old] opens old items and seals with the new key.
- Dead letters and listings show a sealed payload as sealed unless the key
  is given.
- Key files open to group or others, or malformed, are refused (exit 2); a
  client without keys may not offer a payload that looks sealed.
"""
import base64
import glob
import os
import secrets
import sys
import tempfile

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

R = Redis(timeout=30)
tmp = tempfile.mkdtemp(prefix="delayq-sealed.")


def keyfile(name, *lines):
    path = os.path.join(tmp, name)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write("".join(lines))
    return path


def keygen():
    r = dq("keygen", redis=False)
    ok(r.rc == 0 and r.text.startswith("dq-key-1 ") and r.text.count("\n") == 1, "keygen prints one key line", r)
    return r.text


def key_id(line):
    return line.split()[1]


def payload_of(m):
    return base64.b64decode(m["payload_base64"]) if "payload_base64" in m else m["payload"].encode()


def take(q, key=None, *extra):
    args = (["--key-file", key] if key else []) + ["take", q, "--json", "--no-scheduler", "--timeout", "1s"]
    return dq(*args, *extra)


def ready_entries(q):
    return R.cmd("LRANGE", f"dq:{{{q}}}:r", 0, -1)


def aside(q):
    return R.cmd("LRANGE", f"dq:{{{q}}}:x", 0, -1)


K1, K2 = keygen(), keygen()
k1, k2 = keyfile("k1", K1), keyfile("k2", K2)
rotated = keyfile("rot", K2, K1)

section("round trip, byte for byte, binary payloads")
q = "seal1"
marker = secrets.token_hex(16).encode()
payloads = {"b1": marker + bytes(range(256)), "b2": b"\x00" + marker + b"\xff\n\r\t", "b3": marker}
for pid, p in payloads.items():
    r = dq("--key-file", k1, "offer", q, "0", "--id", pid, stdin=p)
    eq(r.rc, 0, f"offer {pid} ({len(p)} bytes)")
keys = R.cmd("KEYS", f"dq:{{{q}}}:*")
ok(keys and all(marker not in (R.cmd("DUMP", k) or b"") for k in keys), "no plaintext in any key of the queue")
R.cmd("BGREWRITEAOF")
R.cmd("SAVE")
ok(wait_for(lambda: b"aof_rewrite_in_progress:0" in R.cmd("INFO", "persistence"), 10), "AOF rewritten")
files = [f for f in glob.glob(os.path.join(RDIR, "**"), recursive=True) if os.path.isfile(f)]
ok(any(f.endswith(".rdb") for f in files) and any("aof" in f for f in files), "RDB and AOF files found", files)
ok(all(marker not in open(f, "rb").read() for f in files), "no plaintext in the AOF or RDB files")
r = take(q, k1, "--count", "3")
got = {m["id"]: payload_of(m) for m in r.json_lines()} if r.rc == 0 else {}
eq(got, payloads, "taken with the key: every payload byte for byte")

section("no key, and the wrong key: the item stays")
q = "seal2"
eq(dq("--key-file", k1, "offer", q, "0", "secret", "--id", "n1").rc, 0, "offer n1 sealed")
r = take(q)
ok(r.rc == 3 and key_id(K1) in r.errtext and "n1" in r.errtext and r.errtext.count("\n") == 1,
   "no key file: exit 3, one line naming the key and the item", r)
r = take(q, k2)
ok(r.rc == 3 and key_id(K1) in r.errtext and "does not hold" in r.errtext, "the wrong key: exit 3 naming it", r)
eq((stats(q) or {}).get("ready"), 1, "the item is still ready")
r = take(q, k1)
ok(r.rc == 0 and [payload_of(m) for m in r.json_lines()] == [b"secret"], "a consumer with the key gets it", r)
eq((stats(q) or {}).get("ready"), 0, "and it is gone")

section("a tampered envelope is set aside, not delivered, not retried")
q = "seal3"
eq(dq("--key-file", k1, "offer", q, "0", "secret", "--id", "t1").rc, 0, "offer t1")
e = ready_entries(q)[0]
R.cmd("LSET", f"dq:{{{q}}}:r", 0, e[:-1] + bytes([e[-1] ^ 1]))
r = take(q, k1)
ok(r.rc == 1 and r.text == "", "take with the key: nothing delivered (exit 1)", r)
x = aside(q)
ok(len(x) == 1 and b"failed authentication" in x[0] and key_id(K1).encode() in x[0],
   "set aside: failed authentication, naming the key", x)
eq(take(q, k1).rc, 1, "not retried: the next take finds nothing")

section("the same under a lease: set aside, and the lease acked")
q = "seal4"
eq(dq("--key-file", k1, "offer", q, "0", "secret", "--id", "t2").rc, 0, "offer t2")
e = ready_entries(q)[0]
R.cmd("LSET", f"dq:{{{q}}}:r", 0, e[:-1] + bytes([e[-1] ^ 1]))
r = take(q, k1, "--ack", "manual", "--lease", "1s")
ok(r.rc == 1, "take --ack manual: nothing delivered", r)
ok(wait_for(lambda: (stats(q) or {}).get("inflight") == 0, 5), "no lease left in flight", stats(q))
ok(len(aside(q)) == 1, "set aside once", aside(q))

section("payloads swapped between two items do not open")
q = "seal5"
for pid in ("s1", "s2"):
    eq(dq("--key-file", k1, "offer", q, "0", f"pay-{pid}", "--id", pid).rc, 0, f"offer {pid}")
e1, e2 = ready_entries(q)
cut1, cut2 = e1.index(b"s1") + 2, e2.index(b"s2") + 2  # an entry is head | id | payload
R.cmd("LSET", f"dq:{{{q}}}:r", 0, e1[:cut1] + e2[cut2:])
R.cmd("LSET", f"dq:{{{q}}}:r", 1, e2[:cut2] + e1[cut1:])
r = take(q, k1, "--count", "2")
ok(r.rc == 1 and r.text == "", "neither is delivered", r)
ok(len(aside(q)) == 2 and all(b"failed authentication" in x for x in aside(q)), "both set aside", aside(q))

section("rotation: [new, old] opens old items and seals with the new key")
q = "seal6"
eq(dq("--key-file", k1, "offer", q, "0", "old", "--id", "r1").rc, 0, "offer r1 with the old key")
eq(dq("--key-file", rotated, "offer", q, "0", "new", "--id", "r2").rc, 0, "offer r2 with the rotated file")
r = take(q, rotated, "--count", "2")
got = sorted(payload_of(m) for m in r.json_lines()) if r.rc == 0 else []
eq(got, [b"new", b"old"], "the rotated file opens both")
eq(dq("--key-file", k2, "offer", q, "0", "n2", "--id", "r3").rc, 0, "offer r3 with the new key alone")
r = take(q, k1)
ok(r.rc == 3 and key_id(K2) in r.errtext, "the old key alone cannot open what the new one sealed", r)

section("dead letters: shown sealed unless the key is given")
q = "seal7"
eq(dq("config", q, "--max-attempts", "1").rc, 0, "max attempts 1")
eq(dq("--key-file", k1, "offer", q, "0", "dead-secret", "--id", "d1").rc, 0, "offer d1")
r = take(q, k1, "--ack", "manual")
m = r.json_lines()[0] if r.rc == 0 and r.json_lines() else {}
eq(dq("--key-file", k1, "nack", q, "d1", m.get("token", "?")).rc, 0, "nack: a dead letter")
r = dq("dead", q, "list")
ok(r.rc == 0 and f"<sealed with key {key_id(K1)}>" in r.text and "dead-secret" not in r.text,
   "without the key: <sealed with key ...>", r)
r = dq("dead", q, "list", "--json")
ok(r.rc == 0 and r.json_lines() and r.json_lines()[0].get("payload_sealed_with") == key_id(K1),
   "--json: payload_sealed_with", r)
r = dq("--key-file", k1, "dead", q, "list")
ok(r.rc == 0 and "dead-secret" in r.text, "with the key: the payload", r)

section("list (and so the API and the dashboard): sealed unless the key is given")
q = "seal9"
eq(dq("--key-file", k1, "offer", q, "1h", "later-secret", "--id", "l1").rc, 0, "offer l1 (pending)")
eq(dq("--key-file", k1, "offer", q, "0", "ready-secret", "--id", "l2").rc, 0, "offer l2 (ready)")
for state, word in (("pending", "later-secret"), ("ready", "ready-secret")):
    r = dq("list", q, "--state", state, "--json")
    m = r.json_lines()[0] if r.rc == 0 and r.json_lines() else {}
    ok(m.get("sealed") is True and m.get("payload") is None and word not in r.text,
       f"{state}, no key: sealed, no plaintext", r)
    eq(m.get("payload_sealed_with"), key_id(K1), f"{state}, no key: payload_sealed_with names the key")
    r = dq("--key-file", k1, "list", q, "--state", state, "--json")
    m = r.json_lines()[0] if r.rc == 0 and r.json_lines() else {}
    ok(m.get("sealed") is False and m.get("payload") == word and m.get("payload_sealed_with") is None,
       f"{state}, with the key: the payload", r)
    r = dq("--key-file", keyfile("other9", keygen()), "list", q, "--state", state)
    ok(r.rc == 0 and f"<sealed with key {key_id(K1)}>" in r.text and word not in r.text,
       f"{state}, another key: <sealed with key ...>", r)

section("refusals")
loose = keyfile("loose", K1)
os.chmod(loose, 0o644)
r = dq("--key-file", loose, "stats", "seal1")
ok(r.rc == 2 and "group or others" in r.errtext and K1.split()[2] not in r.errtext, "a key file others may "
   "read: exit 2, key not shown", r)
bad = keyfile("bad", K1, "dq-key-1 0011223344556677 nonsense\n")
r = dq("--key-file", bad, "stats", "seal1")
ok(r.rc == 2 and "line 2" in r.errtext, "a malformed line: exit 2 naming it", r)
r = dq("--key-file", os.path.join(tmp, "missing"), "stats", "seal1")
ok(r.rc == 2 and "cannot read" in r.errtext, "a missing key file: exit 2", r)
r = dq("offer", "seal8", "0", stdin=b"\x00dqs1" + b"x" * 60)
ok(r.rc == 2 and "sealed" in r.errtext, "no key file: a payload that looks sealed is refused", r)
eq((stats("seal8") or {}).get("ready"), 0, "nothing offered")

for f in os.listdir(tmp):
    os.remove(os.path.join(tmp, f))
os.rmdir(tmp)
finish()
