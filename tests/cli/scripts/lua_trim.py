"""lua_trim.py - tools/lua-trim.awk, which picks the shared code (lua/lib) a
script's EVAL text carries, on small made-up inputs: what a script uses is
kept, transitively and in order, and nothing else; a table's field is kept
by TABLE.NAME, and all of them when the table is used any other way; a
name in a string or comment is no use; the check mode fails on a text that
lacks a definition it uses, or uses a local before defining it; a top-level
statement the tool does not cut, or code at column 0 inside a block, fails
the run. Then the real lua/: every script's text passes the check, and the
offer keeps less than the whole shared code.
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

ROOT = os.environ.get("DQ_TEST_ROOT", ".")
TOOL = os.path.join(ROOT, "tools", "lua-trim.awk")
tmp = tempfile.mkdtemp(prefix="delayq-trim.")


def write(name, text):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(text if isinstance(text, bytes) else text.encode())
    return path


def trim(common, *scripts, dir_=None, check=False):
    """(rc, stdout, stderr) of the tool."""
    args = ["awk"] + (["-v", "dir=" + dir_] if dir_ else []) + (["-v", "check=1"] if check else [])
    p = subprocess.run(args + ["-f", TOOL, common, *scripts], capture_output=True, timeout=30,
                       env=dict(os.environ, LC_ALL="C"))
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def check(common, kept_text, script):
    """(rc, stderr) of the check of kept_text then script."""
    d = tempfile.mkdtemp(dir=tmp)
    write(os.path.join(d, os.path.basename(script)), kept_text)
    rc, _, err = trim(common, script, dir_=d, check=True)
    return rc, err


def kept(common, script):
    """The bytes of common the tool keeps for script (None if it failed)."""
    rc, out, err = trim(common, script)
    if rc != 0:
        return None
    with open(common, "rb") as f:
        data = f.read()
    return b"".join(data[int(o):int(o) + int(n)] for o, n in (ln.split() for ln in out.splitlines()))


COMMON = """-- the file's header
local A = 1
local B, C = 2, 3

-- f uses A
local function f(x)
  if x then
    return A
  end
  return 'C is only text' -- and B only a comment
end
local function g() return f(1) + B end
local unused = {1,
  2}
local t = {}
t.K = 5
function t.m() return t.K end
function t.n() return g() end
"""
common = write("common.lua", COMMON)

section("what a script uses is kept, transitively, in order")
got = kept(common, write("s1.lua", "return g()\n"))
ok(got is not None and b"local A = 1" in got and b"local B, C" in got and b"local function f" in got and
   b"local function g" in got, "g, and what it uses: f, A, B (C with B)", got)
ok(got is not None and b"unused" not in got and b"local t" not in got, "nothing else", got)
ok(got is not None and got.index(b"local A") < got.index(b"local function f") < got.index(b"local function g"),
   "in the shared code's order", got)
ok(got is not None and got.startswith(b"-- the file's header"), "comments before a definition go with it", got)

section("a table's fields")
got = kept(common, write("s2.lua", "return t.m()\n"))
ok(got is not None and b"local t" in got and b"t.K = 5" in got and b"function t.m" in got and
   b"function t.n" not in got and b"local function g" not in got, "t.m keeps t, t.m and t.K, not t.n", got)
got = kept(common, write("s3.lua", "local x = t['m']\nreturn x()\n"))
ok(got is not None and b"function t.n" in got and b"local function g" in got, "t[...] keeps all of t's fields",
   got)
got = kept(common, write("s4.lua", "-- f() and g() in a comment\nreturn 'f g t'\n"))
eq(got, b"", "names in strings and comments keep nothing")

section("the check")
script = write("s5.lua", "return g()\n")
eq(check(common, "local A = 1\nlocal B, C = 2, 3\nlocal function f(x) return A end\n"
         "local function g() return f(1) + B end\n", script)[0], 0, "a text with what it uses passes")
rc, err = check(common, "local A = 1\nlocal function g() return f(1) end\n", script)
ok(rc != 0 and "f" in err and "lacks" in err, "a text lacking f fails, naming it", (rc, err))
rc, err = check(common, "local function g() return f(1) end\nlocal function f() return 1 end\n", script)
ok(rc != 0 and "before its definition" in err, "f used before it is defined fails", (rc, err))
rc, err = check(common, "local t = {}\n", write("s6.lua", "return t.m()\n"))
ok(rc != 0 and "t.m" in err, "a text lacking t.m fails", (rc, err))

section("what the tool does not cut fails the run")
rc, _, err = trim(write("bad1.lua", COMMON + "print(A)\n"), script)
ok(rc != 0 and "does not cut" in err, "a top-level call", (rc, err))
rc, _, err = trim(write("bad2.lua", COMMON + "local function h()\nlocal y = 1\n  return y\nend\n"), script)
ok(rc != 0 and "inside a block" in err, "code at column 0 inside a function", (rc, err))
rc, _, err = trim(write("bad3.lua", COMMON + "local function f() end\n"), script)
ok(rc != 0 and "twice" in err, "a name defined twice", (rc, err))

section("the real scripts, all in one run as tools/embed-lua.sh runs them")
libdir = os.path.join(ROOT, "lua", "lib")
whole = b"".join(open(os.path.join(libdir, n), "rb").read() for n in sorted(os.listdir(libdir)) if n.endswith(".lua"))
real = write("real_common.lua", whole)
names = sorted(n[:-4] for n in os.listdir(os.path.join(ROOT, "lua")) if n.endswith(".lua"))
paths = [os.path.join(ROOT, "lua", n + ".lua") for n in names]
d = tempfile.mkdtemp(dir=tmp)
rc, _, err = trim(real, *paths, dir_=d)
eq((rc, err), (0, ""), "the runs of every script")
for name in names:
    got = kept(real, os.path.join(ROOT, "lua", name + ".lua"))
    with open(os.path.join(d, name + ".runs")) as f:
        runs = [ln.split() for ln in f.read().splitlines()]
    eq(b"".join(whole[int(o):int(o) + int(n)] for o, n in runs), got, f"{name}: the same runs alone and with the others")
    write(os.path.join(d, name + ".lua"), got or b"")
    if name == "offer":
        ok(got is not None and len(got) < len(whole) * 3 // 4,
           f"offer keeps less than the whole shared code ({len(got or b'')} of {len(whole)} bytes)")
rc, _, err = trim(real, *paths, dir_=d, check=True)
eq((rc, err), (0, ""), "every kept text passes the check")

shutil.rmtree(tmp, ignore_errors=True)
finish()
