"""payloads.py - binary payloads via stdin (payload_base64), UTF-8 text with
JSON escaping ("payload"), and the 1 MiB payload limit."""
import base64
import json
import os
import sys

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403


def roundtrip(queue, payload, what, timeout="5s"):
    """offer via stdin, take --json; returns the message dict or None."""
    r = dq("offer", queue, "0", stdin=payload, timeout=60)
    if not ok(r.rc == 0, f"{what}: offer via stdin exits 0", r):
        return None, None
    id_ = r.out.strip().decode()
    r = dq("take", queue, "--json", "--timeout", timeout, timeout=60)
    if not ok(r.rc == 0, f"{what}: take --json exits 0", r):
        return None, None
    eq(r.out.count(b"\n"), 1, f"{what}: exactly one output line")
    msgs = r.json_lines()
    if not eq(len(msgs), 1, f"{what}: one JSON object"):
        return None, None
    eq(msgs[0]["id"], id_, f"{what}: id")
    return msgs[0], r.out


section("binary payload with NUL bytes")
binary = b"\x00\x01\x02 bin\x00ary \xff\xfe\x80\n\r\t\x00" + bytes(range(256))
m, _ = roundtrip("bin", binary, "binary")
if m:
    ok("payload_base64" in m and "payload" not in m, "binary: comes as payload_base64 only", sorted(m))
    eq(msg_payload(m), binary, "binary: base64 decodes to the exact bytes")
eq(dq("offer", "bin", "0", stdin=binary).rc, 0, "binary: offer again")
r = dq("take", "bin", "--timeout", "5s")
eq((r.rc, r.out), (0, binary + b"\n"), "binary: text-mode take prints the raw bytes and a newline")

section("invalid UTF-8 forms go to payload_base64")
for what, raw in [("lone continuation byte", b"abc\x80"),
                  ("truncated sequence", b"caf\xc3"),
                  ("overlong slash", b"\xc0\xaf"),
                  ("UTF-16 surrogate", b"\xed\xa0\x80"),
                  ("above U+10FFFF", b"\xf4\x90\x80\x80"),
                  ("Latin-1 e-acute", b"caf\xe9")]:
    m, _ = roundtrip("bad8", raw, what)
    if m:
        ok("payload_base64" in m and "payload" not in m, f"{what}: payload_base64", m)
        eq(msg_payload(m), raw, f"{what}: exact bytes")

section("valid UTF-8 with newlines, quotes, controls and non-ASCII")
text = 'line1\nline2 "quoted" back\\slash\ttab \r cr \u00e9 \u6f22\u5b57 \U0001F389 \x01\x1f\x7f / \u2028 end\x00nul'
m, raw = roundtrip("u8", text.encode("utf-8"), "utf-8")
if m:
    ok("payload" in m and "payload_base64" not in m, "utf-8: comes as payload", sorted(m))
    eq(m.get("payload"), text, "utf-8: json.loads gives the exact text")
    ok(b"\n" not in raw[:-1] and b"\r" not in raw and b"\t" not in raw and b"\x01" not in raw,
       "utf-8: control characters are escaped in the JSON line", raw)
for what, t in [("empty", ""), ("plain ascii", "hello world"), ("4-byte only", "\U0010FFFF"),
                ("just quotes", '""'), ("json-looking", '{"a":[1,2]}')]:
    m, _ = roundtrip("u8", t.encode("utf-8"), what)
    if m:
        eq(m.get("payload"), t, f"{what}: payload")

section("payload from the argument")
r = dq("offer", "arg", "0", "caf\u00e9 \u2603")
eq(r.rc, 0, "offer with a UTF-8 argument")
r = dq("take", "arg", "--json", "--timeout", "5s")
msgs = r.json_lines()
eq([m.get("payload") for m in msgs], ["caf\u00e9 \u2603"], "argument payload delivered as text")

section("the 1 MiB limit")
MIB = 1048576
big = (b"0123456789abcdef" * (MIB // 16 + 1))[:MIB + 1]
r = dq("offer", "big", "0", stdin=big, timeout=60)
eq(r.rc, 2, "1 MiB + 1 byte via stdin is refused with exit 2")
ok(one_line(r.err), "... with one line on stderr", r.err)
eq(r.out, b"", "... and nothing on stdout")
note(f"stderr: {r.err.decode(errors='replace').strip()}")
p = stats("big")
if p is not None:
    eq((p["pending"], p["ready"]), (0, 0), "nothing was offered")

r = dq("offer", "big", "0", "--id", "exact", stdin=big[:MIB], timeout=60)
eq((r.rc, r.out), (0, b"exact\n"), "exactly 1 MiB (text) is accepted")
r = dq("take", "big", "--json", "--timeout", "10s", timeout=60)
msgs = r.json_lines()
if eq((r.rc, len(msgs)), (0, 1), "take --json gets it"):
    eq(msgs[0]["id"], "exact", "id")
    pl = msg_payload(msgs[0])
    eq(len(pl), MIB, "payload length is 1048576")
    ok(pl == big[:MIB], "payload bytes are exact")

rnd = os.urandom(MIB)
r = dq("offer", "big", "0", "--id", "exactbin", stdin=rnd, timeout=60)
eq((r.rc, r.out), (0, b"exactbin\n"), "exactly 1 MiB of random bytes is accepted")
r = dq("take", "big", "--timeout", "10s", timeout=60)
eq(r.rc, 0, "text take of the binary 1 MiB exits 0")
ok(r.out == rnd + b"\n", "text take: exact bytes and a newline", f"{len(r.out)} bytes")

r = dq("offer", "big", "--batch", "-", stdin=b"0\tb1\t" + b"x" * (MIB + 1) + b"\n", timeout=60)
eq(r.rc, 2, "a batch line with a 1 MiB + 1 payload is refused with exit 2")
ok(one_line(r.err), "... with one line on stderr", r.err)
p = stats("big")
if p is not None:
    eq((p["pending"], p["ready"]), (0, 0), "nothing was offered")

finish()
