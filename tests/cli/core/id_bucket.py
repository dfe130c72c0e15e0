"""id_bucket.py - the id index bucket the client computes (src/util/idindex.c,
SHA-1 through OpenSSL) is the one the scripts compute with redis.sha1hex:
ids of 1 to 128 bytes (around SHA-1's padding boundaries, 55/56/64 and
119/120 bytes, any printable byte) and a generated one, offered by the CLI,
have their index entry in the bucket Redis's own redis.sha1hex names and in
no other; cancel (the bucket computed by the script) finds them; acks (the
bucket computed by the client) leave no index entry behind. When OpenSSL
offers no SHA-1 (OPENSSL_CONF loading only its base provider), offer, offer
--batch and ack fail with a clear error (exit 3) and write nothing: no
guessed bucket, the leased item still in flight, acked once SHA-1 is back."""
import os
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403
from workers import *  # noqa: E402,F403

# The bucket as lua/lib/50_idindex.lua's id_key computes it, by Redis itself.
SHA1HEX_BUCKET = "return tonumber(string.sub(redis.sha1hex(ARGV[1]), 1, 4), 16) % 32768"
PRINTABLE = "".join(chr(c) for c in range(0x21, 0x7F))  # the id rule: bytes 0x21..0x7e


def redis_bucket(id_):
    return int(redis("EVAL", SHA1HEX_BUCKET, 0, id_))


def made_id(n, k):
    """An id of n bytes walking the printable bytes from k (never a leading '-')."""
    s = "".join(PRINTABLE[(k + 7 * i) % len(PRINTABLE)] for i in range(n))
    return "i" + s[1:] if s.startswith("-") else s


def index_holders(queue, id_):
    """The id index buckets of queue holding id_."""
    return [int(k.rsplit(b":", 1)[1]) for k in redis("KEYS", f"dq:{{{queue}}}:i:*")
            if redis("HEXISTS", k, id_) == 1]


section("offered ids sit in the bucket redis.sha1hex names")
Q = "idb"
ids = ["a", "order-1"] + [made_id(n, n) for n in (20, 55, 56, 63, 64, 65, 119, 120, 127, 128)]
eq(len(ids[-1]), 128, "the longest id is DQ_ID_MAX (128) bytes")
for i, id_ in enumerate(ids):
    eq(dq("offer", Q, "10m" if i % 2 else "2s", "p", "--id", id_).rc, 0, f"offer an id of {len(id_)} bytes")
r = dq("offer", Q, "10m", "p")
eq(r.rc, 0, "offer with a generated id")
ids.append(r.out.decode().strip())
for id_ in ids:
    eq(index_holders(Q, id_), [redis_bucket(id_)], f"id of {len(id_)} bytes: in redis.sha1hex's bucket only")
eq(id_index_size(Q), len(ids), "one index entry per id")

section("cancel finds them (the script computes the bucket)")
for id_ in ids:
    eq(dq("cancel", Q, id_).rc, 0, f"cancel the id of {len(id_)} bytes")
eq(id_index_size(Q), 0, "no index entry left")

section("acks leave no index entry (the client computes the bucket)")
QA = "idba"
for id_ in ids:
    eq(dq("offer", QA, "0", "p", "--id", id_).rc, 0, f"offer {len(id_)} bytes now")
r, msgs = take_manual(QA, "--count", str(len(ids)), "--batch", "64", "--timeout", "10s")
eq(sorted(m.get("id") for m in msgs), sorted(ids), "one take leases them all")
for m in msgs:
    eq(dq("ack", QA, m["id"], m["token"]).rc, 0, f"ack the id of {len(m['id'])} bytes")
eq(id_index_size(QA), 0, "no index entry left after the acks")

section("no SHA-1 in OpenSSL: a clear error, nothing written")
conf_dir = tempfile.mkdtemp()
conf = os.path.join(conf_dir, "base-only.cnf")
with open(conf, "w") as f:
    f.write("openssl_conf = init\n[init]\nproviders = provs\n[provs]\nbase = base\n[base]\nactivate = 1\n")
NO_SHA1 = {"OPENSSL_CONF": conf}
QN = "idbn"
r = dq("offer", QN, "1s", "x", "--id", "n1", env=NO_SHA1)
eq(r.rc, 3, "offer exits 3")
ok(b"SHA-1" in r.err and b"OPENSSL_CONF" in r.err, "it says SHA-1 is missing and why", r.err)
batch = os.path.join(conf_dir, "batch.txt")
with open(batch, "w") as f:
    f.write("1s\tn2\ty\n2s\t\tz\n")
r = dq("offer", QN, "--batch", batch, env=NO_SHA1)
eq(r.rc, 3, "offer --batch exits 3")
ok(b"SHA-1" in r.err, "it says SHA-1 is missing", r.err)
eq(redis("KEYS", f"dq:{{{QN}}}:*"), [], "no key of the queue written")
eq(redis("SISMEMBER", "dq:queues", QN), 0, "the queue not registered either")
eq(dq("offer", QN, "0", "x", "--id", "n3").rc, 0, "offer n3 with SHA-1")
r, msgs = take_manual(QN, "--timeout", "10s")
eq([m.get("id") for m in msgs], ["n3"], "n3 leased")
if msgs:
    r = dq("ack", QN, "n3", msgs[0]["token"], env=NO_SHA1)
    eq(r.rc, 3, "ack without SHA-1 exits 3")
    ok(b"SHA-1" in r.err, "it says SHA-1 is missing", r.err)
    eq((stats(QN) or {}).get("inflight"), 1, "n3 still in flight")
    eq(index_holders(QN, "n3"), [redis_bucket("n3")], "its index entry still there")
    eq(dq("ack", QN, "n3", msgs[0]["token"]).rc, 0, "acked with SHA-1")
    eq(id_index_size(QN), 0, "and its index entry gone")
os.remove(conf)
os.remove(batch)
os.rmdir(conf_dir)

finish()
