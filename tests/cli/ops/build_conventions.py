"""build_conventions.py - the build as a user of a C library runs it.

Into build directories of its own (so the build under test is untouched):
- `make DEBUG=1 WERROR=1` builds everything (-O0, warnings as errors);
- -Werror comes only with WERROR=1;
- the dependency files (-MMD -MP) make an edit rebuild only what includes the
  file: a Lua script, the generated header's one includer (script.c); the
  dashboard, serve_http.c;
- lua/lib's shared code is in libdelayq.so once, not once per script;
- `delayq --version` prints include/delayq.h's DQ_VERSION, the version's one
  place, which the .pc and the soname carry too;
- `make install DESTDIR=... PREFIX=/opt/x` after that plain build writes a .pc
  saying /opt/x; examples/hello.c builds against that install with pkg-config
  (the README's line) and runs against the test's redis-server;
- `make uninstall` with the same DESTDIR and PREFIX leaves no file behind.
Checked once, by the plain suite: a sanitized build skips it (exit 77).
"""
# tier: slow (about 15 s, a second build): make test runs it, make test-fast does not
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

ROOT = os.environ.get("DQ_TEST_ROOT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
with open(BIN, "rb") as f:
    if b"__asan_init" in f.read():
        finish(skip="checked by the plain suite (this build is sanitized)")
for tool in ("make", "cc", "pkg-config"):
    if not shutil.which(tool):
        finish(skip=f"{tool} is not installed")

tmp = tempfile.mkdtemp(prefix="delayq-build.")
build = os.path.join(tmp, "build-debug")
stage = os.path.join(tmp, "stage")
# A make started from `make test` must not join that make's jobs or flags,
# nor inherit the WERROR=1 that .ci/run exports (the checks set it per make).
ENV = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "WERROR")}


def sh(*argv, timeout=240, env=None):
    """argv run in the source tree; (rc, output) with stderr joined to stdout."""
    try:
        p = subprocess.run(argv, cwd=ROOT, env=env or ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout * SLOW)
        return p.returncode, p.stdout.decode(errors="replace")
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout * SLOW} s"
    except OSError as e:  # a program the build did not make
        return None, str(e)


def make(*args, timeout=240):
    return sh("make", "--no-print-directory", f"BUILD={build}", "DEBUG=1", *args, timeout=timeout)


def compiled(out):
    """The objects a make -n output would compile (its '-c SRC -o OBJ' lines)."""
    return sorted(os.path.relpath(m, build) for m in re.findall(r" -c \S+ -o (\S+)", out))


section("make DEBUG=1, warnings as errors")
rc, out = make("-j2", "WERROR=1", "all", timeout=300)
ok(rc == 0, "make DEBUG=1 WERROR=1 all builds", out[-3000:])
ok(" -O0 " in out and " -Werror " in out, "at -O0, with -Werror", out[:500])

section("-Werror only when asked")
rc, out = make("-n", "-W", "src/ops/script.c", f"{build}/src/ops/script.o")
ok(rc == 0 and " -c " in out and " -Werror" not in out, "a plain make compiles without -Werror", out[:500])
rc, out = make("-n", "WERROR=1", "-W", "src/ops/script.c", f"{build}/src/ops/script.o")
ok(rc == 0 and " -Werror " in out, "WERROR=1 adds it", out[:500])

section("an edit rebuilds what includes the file")
rc, out = make("-n", "-W", "lua/offer.lua", "all")
eq(compiled(out), ["src/ops/script.o"], "a Lua script: the generated header's one includer")
rc, out = make("-n", "-W", "src/cli/serve/dashboard.html", "all")
eq(compiled(out), ["src/cli/serve/serve_http.o"], "the dashboard: serve_http.c only")
rc, out = make("-n", "all")
eq(compiled(out), [], "nothing when nothing changed")

section("the Lua shared code embedded once")
libdir = os.path.join(ROOT, "lua", "lib")
common = b"".join(open(os.path.join(libdir, n), "rb").read() for n in sorted(os.listdir(libdir)) if n.endswith(".lua"))
so = os.path.join(build, "libdelayq.so")
with open(so if os.path.exists(so) else os.devnull, "rb") as f:
    eq(f.read().count(common), 1, "lua/lib's code is in libdelayq.so once (not once per script)")

section("the version in one place")
with open(os.path.join(ROOT, "include", "delayq.h")) as f:
    m = re.search(r'^#define DQ_VERSION "([^"]+)"', f.read(), re.M)
version = m.group(1) if m else "?"
rc, out = sh(os.path.join(build, "delayq"), "--version")
eq((rc, out.strip()), (0, f"delayq {version}"), "delayq --version prints DQ_VERSION")
rc, out = sh("readelf", "-d", os.path.join(build, "libdelayq.so"))
ok(f"[libdelayq.so.{version.split('.')[0]}]" in out, "the soname carries its major number", out[-500:])

section("make install DESTDIR PREFIX, after a plain make")
rc, out = make("install", f"DESTDIR={stage}", "PREFIX=/opt/x")
ok(rc == 0, "make install DESTDIR=... PREFIX=/opt/x", out[-2000:])
installed = sorted(os.path.relpath(os.path.join(d, n), stage)
                   for d, _, files in os.walk(stage) for n in files)
note(f"installed: {' '.join(installed)}")
pcdir = os.path.join(stage, "opt", "x", "lib", "pkgconfig")
pc = open(os.path.join(pcdir, "delayq.pc")).read() if os.path.exists(os.path.join(pcdir, "delayq.pc")) else ""
ok("prefix=/opt/x\n" in pc, "the .pc says the PREFIX given to install", pc)
env = dict(ENV, PKG_CONFIG_PATH=pcdir)
rc, out = sh("pkg-config", "--modversion", "delayq", env=env)
eq((rc, out.strip()), (0, version), "pkg-config --modversion: DQ_VERSION")

section("an outside program, built with pkg-config against that install")
rc, flags = sh("pkg-config", "--define-prefix", "--cflags", "--libs", "delayq", env=env)
ok(rc == 0 and "-ldelayq" in flags, "pkg-config --define-prefix --cflags --libs delayq", flags)
hello = os.path.join(tmp, "hello")
rc, out = sh("cc", os.path.join(ROOT, "examples", "hello.c"), "-o", hello, *flags.split(), env=env)
ok(rc == 0, "cc examples/hello.c -o hello $(pkg-config ...)", out[-2000:])
rc, out = sh(hello, URL, env=dict(ENV, LD_LIBRARY_PATH=os.path.join(stage, "opt", "x", "lib")), timeout=30)
ok(rc == 0 and "took hello:2" in out and "took hello:1" in out, "it runs against the installed library", out)
rc, out = sh("ldd", hello, env=dict(ENV, LD_LIBRARY_PATH=os.path.join(stage, "opt", "x", "lib")))
ok(os.path.join(stage, "opt", "x", "lib", "libdelayq.so.") in out, "and links the installed libdelayq.so", out)

section("make uninstall")
rc, out = make("uninstall", f"DESTDIR={stage}", "PREFIX=/opt/x")
ok(rc == 0, "make uninstall DESTDIR=... PREFIX=/opt/x", out[-2000:])
left = sorted(os.path.relpath(os.path.join(d, n), stage) for d, dirs, files in os.walk(stage)
              for n in files + [x for x in dirs if os.path.islink(os.path.join(d, x))])
eq(left, [], "nothing install put is left")

shutil.rmtree(tmp, ignore_errors=True)
finish()
