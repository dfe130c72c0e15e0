"""install_paths.py - `make install` and `make uninstall` refuse a DESTDIR
or PREFIX the shell would split or expand, and touch nothing outside them:
  - uninstall with a DESTDIR holding a space ('victim stage dir') exits 2
    with a line naming the value, and the file 'victim' beside the stage is
    still there (rm -f removed it, outside DESTDIR);
  - install with a DESTDIR holding ';touch FILE' or a quote exits 2, and
    neither FILE nor anything in the stage is made;
  - both with DESTDIR and PREFIX empty exit 2 (nothing under /);
  - a plain DESTDIR and PREFIX still install and uninstall (the build under
    test is used as it is: make -o, so nothing is rebuilt).
"""
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

ROOT = os.environ.get("DQ_TEST_ROOT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
BUILD = os.path.dirname(os.path.abspath(BIN))
# A make started from `make test` must not join that make's jobs or flags.
ENV = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
tmp = tempfile.mkdtemp(prefix="delayq-install.")


def make(target, destdir, prefix="/opt/x"):
    """make TARGET with the build under test taken as it is; (rc, output)."""
    built = [os.path.join(BUILD, n) for n in ("libdelayq.a", "libdelayq.so", "delayq")]
    argv = ["make", "--no-print-directory", f"BUILD={BUILD}"] + [a for b in built for a in ("-o", b)]
    p = subprocess.run(argv + [target, f"DESTDIR={destdir}", f"PREFIX={prefix}"], cwd=ROOT, env=ENV,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60 * SLOW)
    return p.returncode, p.stdout.decode(errors="replace")


def files(d):
    return sorted(os.path.relpath(os.path.join(r, n), d) for r, _, ns in os.walk(d) for n in ns)


section("uninstall with a space in DESTDIR removes nothing outside it")
victim = os.path.join(tmp, "victim")
open(victim, "w").close()
stage = os.path.join(tmp, "stage dir")
os.makedirs(stage)
rc, out = make("uninstall", f"{victim} {stage}")
ok(rc == 2 and "DESTDIR and PREFIX" in out and "victim" in out, "exit 2, the value named", out[-600:])
ok(os.path.exists(victim), "the file beside the stage is still there")

section("install with ';' or a quote in DESTDIR makes nothing")
pwn = os.path.join(tmp, "pwn")
rc, out = make("install", os.path.join(tmp, "a;touch " + pwn + ";"))
ok(rc == 2 and "DESTDIR and PREFIX" in out, "';touch FILE': exit 2", out[-600:])
ok(not os.path.exists(pwn), "FILE not made")
rc, out = make("install", os.path.join(tmp, "it's"))
ok(rc == 2 and not os.path.exists(os.path.join(tmp, "it's")), "a quote: exit 2, nothing made", out[-600:])
eq(files(tmp), ["victim"], "nothing else in the temporary directory")

section("empty DESTDIR and PREFIX are refused")
rc, out = make("uninstall", "", "")
ok(rc == 2 and "DESTDIR and PREFIX" in out, "uninstall: exit 2", out[-600:])

section("a plain DESTDIR and PREFIX install and uninstall")
ok_stage = os.path.join(tmp, "ok-1.stage")
rc, out = make("install", ok_stage)
ok(rc == 0 and "opt/x/bin/delayq" in files(ok_stage), "install: exit 0, bin/delayq there", out[-1500:])
rc, out = make("uninstall", ok_stage)
eq((rc, files(ok_stage)), (0, []), "uninstall: exit 0, nothing left")

subprocess.run(["rm", "-rf", tmp])
finish()
