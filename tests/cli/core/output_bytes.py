"""output_bytes.py - ids, payloads, reasons and errors read back from Redis may
hold any bytes (other writers plant them): every --json line is still valid
JSON ("id" or "id_base64", "payload" or "payload_base64"), and every text
record stays on one line, its id escaped when it breaks the id rules.

The entries are planted raw, in the formats of lua/lib/00_base.lua:
  ready v1  "1|due|ready|idlen|" .. id .. payload
  dead      "1|died|attempts|due|rlen|elen|" .. reason .. err .. payload
A planted entry whose id the scripts refuse may be set aside instead of
delivered (dq:{Q}:x); it must never be lost, doubled or printed as broken
JSON."""
import base64
import json
import os
import sys

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

ALL = bytes(range(256))


def ready_v1(id_, payload, due):
    return b"1|%d|%d|%d|" % (due, due, len(id_)) + id_ + payload


def dead_rec(died, attempts, due, reason, err, payload):
    return b"1|%d|%d|%d|%d|%d|" % (died, attempts, due, len(reason), len(err)) + reason + err + payload


def field_bytes(obj, key, what):
    """The bytes of obj[key] or obj[key_base64]: exactly one of them."""
    has_text, has_b64 = key in obj, key + "_base64" in obj
    if has_text == has_b64:
        ok(False, f"{what}: exactly one of {key!r} and {key + '_base64'!r}", obj)
        return None
    if has_b64:
        return base64.b64decode(obj[key + "_base64"], validate=True)
    return obj[key].encode("utf-8")


def json_objects(out, what):
    """Every line of out parsed as one JSON object; a bad line fails."""
    objs, bad = [], []
    for line in out.split(b"\n")[:-1]:
        try:
            objs.append(json.loads(line.decode("utf-8")))
        except (ValueError, UnicodeDecodeError) as exc:
            bad.append((str(exc), line[:80]))
    ok(out == b"" or out.endswith(b"\n"), f"{what}: output ends with a newline")
    eq(bad, [], f"{what}: every line is valid UTF-8 and parses as JSON")
    return objs


def utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def escaped(b):
    """dq__escape without flags: printable ASCII as is, '\\' doubled, else \\xHH."""
    return b"".join(b"\\\\" if c == 0x5c else bytes([c]) if 0x20 <= c < 0x7f else b"\\x%02x" % c
                    for c in b)


def id_rules(id_):
    return 1 <= len(id_) <= 128 and all(0x21 <= c <= 0x7e for c in id_)


# ------------------------------------------------------------------ the items

# Ids: one per byte value (between two letters), plus ids that are valid
# UTF-8 beyond ASCII, invalid UTF-8, and one made of every byte value but
# NUL; payloads: every byte value, and each id's byte repeated.
ids = [b"i" + bytes([b]) + b"z" for b in range(256)]
ids += ["caf\u00e9".encode(), "\u2603\U0001F600".encode(), b"\xc3(", b"\xed\xa0\x80", b"\xff\xfe",
        b"a\nb\tc\rd", b"\\x41", b'"quoted"', ALL[1:128], ALL[128:]]
items = []
for k, id_ in enumerate(ids):
    payload = ALL if k % 2 == 0 else bytes([k % 256]) * 5 + b"\n\t\x00\xff"
    items.append((id_, payload))

section("take --json: ids and payloads of every byte value")
Q = "jb"
now = server_ms()
for id_, payload in items:
    redis("RPUSH", f"dq:{{{Q}}}:r", ready_v1(id_, payload, now))
r = dq("take", Q, "--json", "--count", "0", "--timeout", "2s", "--no-scheduler", timeout=60)
eq(r.rc, 0, "take --count 0 --timeout exits 0")
objs = json_objects(r.out, "take --json")
got = []
for o in objs:
    i, p = field_bytes(o, "id", "take --json"), field_bytes(o, "payload", "take --json")
    got.append((i, p))
planted = sorted(items)
aside = redis("LRANGE", f"dq:{{{Q}}}:x", 0, -1)
note(f"{len(got)} delivered, {len(aside)} set aside")
ok(all(g in items for g in got), "every delivered (id, payload) is a planted one, byte for byte")
eq(len(set(got)), len(got), "none delivered twice")
eq(len(got) + len(aside), len(items), "every planted entry is delivered or set aside")
valid = [it for it in items if id_rules(it[0])]
ok(all(it in got for it in valid), "every entry with a valid id is delivered")



ok(all(not utf8(base64.b64decode(o["id_base64"])) for o in objs if "id_base64" in o),
   "id_base64 only for ids that are not valid UTF-8")
# Ids that break the id rules are set aside by the take, never delivered;
# id_base64 shows in the dead letters' list below.
ok(all(id_rules(g[0]) for g in got), "no id that breaks the id rules is delivered")

section("take --ack manual: text records stay one line each, JSON stays JSON")
Q = "jl"
now = server_ms()
# Payloads without a newline: in text the payload is the raw last field.
line_items = [(id_, b"p" + bytes([k % 256]).replace(b"\n", b"N")) for k, id_ in enumerate(ids)]
for id_, payload in line_items:
    redis("RPUSH", f"dq:{{{Q}}}:r", ready_v1(id_, payload, now))
half = len(line_items) // 2
r = dq("take", Q, "--ack", "manual", "--count", str(half), "--timeout", "5s", "--no-scheduler",
       timeout=60)
lines = r.out.split(b"\n")[:-1]
ok(r.rc in (0, 1), "text take --ack manual ends", r)
ok(all(len(ln.split(b"\t")) >= 3 for ln in lines), "every text line is ID<TAB>TOKEN<TAB>PAYLOAD",
   [ln for ln in lines if len(ln.split(b"\t")) < 3][:3])
text_ids = [ln.split(b"\t")[0] for ln in lines]
ok(all(all(0x20 <= c < 0x7f for c in i) for i in text_ids), "every printed id is printable ASCII")
shown = {(it[0] if id_rules(it[0]) else escaped(it[0])): it[0] for it in line_items}
ok(all(i in shown for i in text_ids), "every printed id is a planted id: as it is when it keeps "
   "the id rules, else escaped (\\xHH, '\\' doubled)", [i for i in text_ids if i not in shown][:5])
r = dq("take", Q, "--ack", "manual", "--json", "--count", "0", "--timeout", "2s", "--no-scheduler",
       timeout=60)
objs = json_objects(r.out, "take --ack manual --json")
ok(all("token" in o and "attempt" in o for o in objs), "leased objects carry token and attempt")
got2 = [(field_bytes(o, "id", "leased"), field_bytes(o, "payload", "leased")) for o in objs]
ok(all(g in line_items for g in got2), "every leased JSON (id, payload) is a planted one")
aside = redis("LRANGE", f"dq:{{{Q}}}:x", 0, -1)
eq(len(lines) + len(got2) + len(aside), len(line_items), "each planted entry: one text line, one "
   "JSON line or set aside")

section("dead list: reasons, errors, ids and payloads of any bytes")
Q = "jd"
now = server_ms()
dead = []
for k, id_ in enumerate(ids):
    if b"\x00" in id_:
        continue  # dq_dead_letter's id is a C string: NUL-free ids only here
    reason = b"reason " + bytes([k % 255 + 1]) + b"\xe2\x82\xac\x80\n"
    err = bytes(range(1, 256))[k % 200:k % 200 + 40]
    payload = ALL if k % 2 else bytes([k % 256]) * 3
    dead.append((id_, reason, err, payload))
    redis("HSET", f"dq:{{{Q}}}:d", id_, dead_rec(now - k, 3, now - 1000, reason, err, payload))
    redis("ZADD", f"dq:{{{Q}}}:dz", now - len(ids) + k, id_)
r = dq("dead", Q, "list", "--json", timeout=60)
eq(r.rc, 0, "dead list --json exits 0")
objs = json_objects(r.out, "dead list --json")
by_id = {it[0]: it for it in dead}
seen, wrong = [], []
for o in objs:
    i, p = field_bytes(o, "id", "dead"), field_bytes(o, "payload", "dead")
    seen.append(i)
    it = by_id.get(i)
    if it is None:
        wrong.append(("not planted", i))
        continue
    if p != it[3]:
        wrong.append(("payload", i))
    if not (isinstance(o.get("reason"), str) and isinstance(o.get("error"), str)):
        wrong.append(("reason/error not strings", i))
    elif utf8(it[2]) and o["error"] != it[2].decode("utf-8"):
        wrong.append(("valid UTF-8 error changed", i))
    elif not utf8(it[2]) and any(ord(ch) < 0x20 for ch in o["error"]):
        wrong.append(("invalid UTF-8 error not escaped", i))
eq(wrong, [], "every listed dead letter: a planted id, its payload byte for byte, its error "
   "exact when valid UTF-8, else escaped")
eq(len(set(seen)), len(seen), "no dead letter listed twice")
valid = [it[0] for it in dead if id_rules(it[0])]
ok(all(v in seen for v in valid), "every dead letter with a valid id is listed")
note(f"{len(objs)} of {len(dead)} listed")

r = dq("dead", Q, "list", timeout=60)
eq(r.rc, 0, "dead list (text) exits 0")
lines = r.out.split(b"\n")[:-1]
eq(len(lines), len(objs), "text: one line per dead letter, as many as in JSON")
ok(all(len(ln.split(b"\t")) == 5 for ln in lines), "text: every line has 5 tab-separated fields",
   [ln for ln in lines if len(ln.split(b"\t")) != 5][:2])
ok(all(all(c >= 0x20 and c != 0x7f for c in ln.split(b"\t")[0]) for ln in lines),
   "text: no control byte in an id")
ok(all(all(c >= 0x20 and c != 0x7f for f in ln.split(b"\t") for c in f) for ln in lines),
   "text: no control byte anywhere but the tabs between fields")

section("stats and config --json are JSON too")
for args in (["stats", "jb", "--json"], ["config", "jb", "--json"]):
    r = dq(*args)
    ok(r.rc == 0 and len(json_objects(r.out, " ".join(args))) == 1, f"{' '.join(args)}: one object", r)

finish()
