"""format.py - the C sources stay as make format (clang-format 16) leaves them.

- `make format-check` passes on the tree: every file FORMAT_SRC lists is
  formatted by .clang-format;
- FORMAT_SRC lists every C source and header git tracks (a file in a new
  folder is not left out of the check);
- the check can fail: a source with a line joined that .clang-format splits
  makes clang-format --dry-run --Werror exit non-zero.
Needs clang-format-16 (make deps-test installs it); skips (exit 77) without
it. Needs no Redis and no build.
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

ROOT = os.environ.get("DQ_TEST_ROOT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
TOOL = "clang-format-16"
if not shutil.which(TOOL):
    finish(skip=f"{TOOL} is not installed (make deps-test)")
# A make started from `make test` must not join that make's jobs or flags.
ENV = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}


def run(*argv, cwd=ROOT):
    """(rc, output) of argv, stderr joined to stdout."""
    p = subprocess.run(argv, cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=120 * SLOW)
    return p.returncode, p.stdout.decode(errors="replace")


section("the tree is formatted")
rc, out = run("make", "--no-print-directory", "-s", "format-check")
ok(rc == 0, "make format-check passes", out[-3000:])

section("every tracked C file is checked")
rc, out = run("make", "--no-print-directory", "-s", "--eval", "dq_fs: ; @echo $(FORMAT_SRC)", "dq_fs")
listed = set(out.split())
rc, tracked = run("git", "ls-files", "*.c", "*.h") if shutil.which("git") else (1, "")
if rc == 0 and tracked:
    eq(sorted(set(tracked.split()) - listed), [], "C files git tracks that FORMAT_SRC leaves out")
else:
    note("not a git checkout: the list is not compared")
ok(len(listed) > 100, "FORMAT_SRC lists the tree's sources", f"{len(listed)} files")

section("the check can fail")
tmp = tempfile.mkdtemp(prefix="delayq-format.")
try:
    shutil.copy(os.path.join(ROOT, ".clang-format"), tmp)
    with open(os.path.join(tmp, "bad.c"), "w") as f:  # one line longer than ColumnLimit, and a split brace
        f.write("int f(int a)\n{\n    return a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + "
                "a + a + a + a + a + a + a + a + a;\n}\n")
    with open(os.path.join(tmp, "good.c"), "w") as f:
        f.write("int f(int a) { return a; }\n")
    rc, out = run(TOOL, "--dry-run", "--Werror", "bad.c", cwd=tmp)
    ok(rc != 0, "a misformatted source fails the check", out)
    rc, out = run(TOOL, "--dry-run", "--Werror", "good.c", cwd=tmp)
    ok(rc == 0, "a formatted source passes it", out)
finally:
    shutil.rmtree(tmp, ignore_errors=True)
finish()
