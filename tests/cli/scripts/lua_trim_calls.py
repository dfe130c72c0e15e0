"""lua_trim_calls.py - every EVAL text (a script after the shared code
tools/lua-trim.awk keeps for it) defines everything it can call, on every
path, rare ones included (quarantine, set-aside, the registry, a shard
count refused, the previous release's schedules): eval_fallback.py runs
each script once, so a definition reached only on a path it does not take
would fail first for a user without FUNCTION rights.

Each text is compiled by the test's Redis (loadstring, then string.dump:
Lua 5.1 bytecode, never run) and its instructions read here: a global it
reads must be one of Redis's Lua sandbox (a local of the shared code left
out becomes a global, nil at run time), and a field of a shared table
(recur, seen, qmeta, ...) it calls must be assigned a function in the same
text. Checked to fail on a text cut by hand: recur.upgrade's definition
taken out of transfer's, and fmt's out of ack's.
"""
import os
import re
import struct
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

ROOT = os.environ.get("DQ_TEST_ROOT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
SANDBOX = set("redis string math table cmsgpack cjson bit struct tonumber tostring type ipairs pairs unpack pcall "
              "error select next assert KEYS ARGV setmetatable getmetatable rawget rawset rawequal xpcall _G "
              "loadstring".split())
# Lua 5.1 opcodes read here.
GETUPVAL, GETGLOBAL, GETTABLE, SETTABLE, SELF, CALL, TAILCALL = 4, 5, 6, 9, 11, 28, 29
# Those that leave R(A) as it was.
KEEPS_A = {7, 8, 9, 22, 23, 24, 25, 26, 30, 31, 33, 34, 35}


class Chunk:
    """A reader of string.dump's output (Lua 5.1, as Redis builds it: int 4,
    size_t 8, instruction 4, number 8 bytes, little-endian)."""

    def __init__(self, data):
        if data[:4] != b"\x1bLua" or data[4] != 0x51 or tuple(data[6:12]) != (1, 4, 8, 4, 8, 0):
            raise ValueError(f"not the Lua 5.1 bytecode this reads: {data[:12]!r}")
        self.b, self.i = data, 12

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.b, self.i)[0]
        self.i += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("Q")
        v = self.b[self.i:self.i + n - 1].decode("latin1") if n else None
        self.i += n
        return v

    def function(self):
        f = {}
        self.string()
        self.take("i"), self.take("i")
        self.i += 4  # upvalues, parameters, vararg, stack size
        f["code"] = [self.take("I") for _ in range(self.take("i"))]
        f["k"] = []
        for _ in range(self.take("i")):
            t = self.take("B")
            f["k"].append(None if t == 0 else bool(self.take("B")) if t == 1 else self.take("d") if t == 3
                          else self.string())
        f["protos"] = [self.function() for _ in range(self.take("i"))]
        f["lines"] = [self.take("i") for _ in range(self.take("i"))]
        f["locals"] = [(self.string(), self.take("i"), self.take("i")) for _ in range(self.take("i"))]
        f["upvalues"] = [self.string() for _ in range(self.take("i"))]
        return f


def scan(f, tables, out):
    """Globals read, and fields of the shared tables called and assigned,
    into out (sets of names), for f and the functions inside it."""
    holds, field = {}, {}  # register -> table name; register -> "table.field" loaded into it
    for pc, ins in enumerate(f["code"]):
        op, a = ins & 0x3F, (ins >> 6) & 0xFF
        c, b, bx = (ins >> 14) & 0x1FF, (ins >> 23) & 0x1FF, ins >> 14
        active = [n for n, s, e in f["locals"] if s <= pc < e]

        def table_in(r):
            if r in holds:
                return holds[r]
            return active[r] if r < len(active) and active[r] in tables else None

        def key(rk):
            return f["k"][rk & 0xFF] if rk & 0x100 and isinstance(f["k"][rk & 0xFF], str) else None
        loaded = None
        if op == GETGLOBAL:
            out["globals"].add(f["k"][bx])
        elif op in (GETTABLE, SELF) and table_in(b) and key(c):
            loaded = table_in(b) + "." + key(c)
        elif op == SETTABLE and table_in(a) and key(b):
            out["assigned"].add(table_in(a) + "." + key(b))
        elif op in (CALL, TAILCALL) and a in field:
            out["called"].add(field[a])
        if op not in KEEPS_A and op not in (CALL, TAILCALL):
            holds.pop(a, None)
            field.pop(a, None)
            if op == GETUPVAL and f["upvalues"][b] in tables:
                holds[a] = f["upvalues"][b]
            if loaded:
                field[a] = loaded
    for p in f["protos"]:
        scan(p, tables, out)


def missing(text, tables):
    """What text uses and does not define: globals outside the sandbox, and
    shared tables' fields it calls but never assigns."""
    dump = redis("EVAL", "return string.dump(assert(loadstring(ARGV[1])))", 0, text)
    out = {"globals": set(), "called": set(), "assigned": set()}
    scan(Chunk(dump).function(), tables, out)
    return sorted(out["globals"] - SANDBOX) + sorted(out["called"] - out["assigned"])


lib = os.path.join(ROOT, "lua", "lib")
common = b"".join(open(os.path.join(lib, n), "rb").read() for n in sorted(os.listdir(lib)) if n.endswith(".lua"))
tables = {t.decode() for t in re.findall(rb"^local (\w+) = \{", common, re.M)}
ok({"recur", "seen", "qmeta"} <= tables, "the shared tables are found", sorted(tables))
scripts = sorted(n[:-4] for n in os.listdir(os.path.join(ROOT, "lua")) if n.endswith(".lua"))
ok(len(scripts) >= 18, "the scripts", scripts)

section("every EVAL text defines what it calls")
for name in scripts:
    eq(missing(eval_script(name), tables), [], f"{name}'s EVAL text")

section("the check fails on a text cut by hand")
text = eval_script("transfer")
cut = re.sub(rb"\nfunction recur\.upgrade\(.*?\nend\n", b"\n", text, count=1, flags=re.S)
ok(cut != text, "recur.upgrade's definition cut out of transfer's text")
eq(missing(cut, tables), ["recur.upgrade"], "... is found missing")
text = eval_script("ack")
cut = re.sub(rb"\nlocal function fmt\(n\)[^\n]*\n", b"\n", text, count=1)
ok(cut != text, "fmt's definition cut out of ack's text")
ok("fmt" in missing(cut, tables), "... is found missing (a global)")
finish()
