"""layers.py - the source folders are layers, and calls only go down them.

Reads the layer table of docs/source-layout.md (the one copy: each row a
layer number and a folder, or one file, of src/), then the symbols of every
object file the build made of src/ (nm: what each defines, what it leaves
undefined), and fails when:
  - a file under src/ belongs to no row, or a row names nothing there, or
    the Makefile's LAYERS (the library's folders) differ from the table's;
  - a file calls (or reads) a symbol defined by a file of a higher layer;
  - two folders call each other, or files call each other in a cycle
    anywhere outside a folder the table marks "one module" (the router);
  - a library folder's header other than its interface header (the
    folder's name: util.h, conn.h, ...) is included from outside the
    folder, or a function an interface header declares is defined in
    another folder (each declaration sits in its own folder's header).
Needs no Redis; runs on whichever build run.sh was given (plain or ASan).
"""
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

ROOT = os.environ.get("DQ_TEST_ROOT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
BUILD = os.environ["DQ_BUILD_DIR"]
DOC = os.path.join(ROOT, "docs", "source-layout.md")

# A table row: "| 2 | `src/route/` (one module) | ... |".
ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*`(src/[^`]+)`([^|]*)\|")


def read_table():
    """[(path, layer, one_module)], most specific path first."""
    rows = []
    with open(DOC, encoding="utf-8") as f:
        for line in f:
            m = ROW.match(line)
            if m:
                rows.append((m.group(2).rstrip("/"), int(m.group(1)), "one module" in m.group(3)))
    return sorted(rows, key=lambda r: -len(r[0]))


def row_of(path, table):
    """The table row a source path (src/...) falls under, or None."""
    for row in table:
        if path == row[0] or path.startswith(row[0] + "/"):
            return row
    return None


def symbols(obj):
    """(defined, undefined) global symbols of one object file."""
    out = subprocess.run(["nm", "-g", obj], capture_output=True, text=True, timeout=30, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
        elif len(parts) == 3:
            defined.add(parts[2])
    return defined, undefined


def cycles(nodes, edges):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, found, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


section("the table, the folders and the Makefile agree")
table = read_table() if os.path.exists(DOC) else []
if not ok(table, "docs/source-layout.md has the layer table", DOC):
    finish()
sources = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "src", "**", "*.c"), recursive=True))
unplaced = [s for s in sources if row_of(s, table) is None]
ok(not unplaced, "every src/ file is in a layer of the table", unplaced)
empty = [r[0] for r in table if not any(s == r[0] or s.startswith(r[0] + "/") for s in sources)]
ok(not empty, "every row of the table names source files", empty)
with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
    m = re.search(r"^LAYERS = (.*)$", f.read(), re.M)
lib_rows = sorted((r for r in table if not r[0].startswith("src/cli")), key=lambda r: r[1])
eq(m.group(1).split() if m else None, [r[0][len("src/"):] for r in lib_rows],
   "the Makefile's LAYERS are the library's folders of the table, lowest first")

section("calls only go down")
objs = {}
for o in glob.glob(os.path.join(BUILD, "src", "**", "*.o"), recursive=True):
    src = os.path.relpath(o, BUILD)[:-2] + ".c"
    if src in sources:  # not a file since moved or removed
        objs[src] = symbols(o)
missing = [s for s in sources if s not in objs]
ok(not missing, f"an object file for every source file ({len(objs)})", missing)
owner = {}
for src, (defined, _) in objs.items():
    for sym in defined:
        owner.setdefault(sym, src)
edges, why = {}, {}
for src, (_, undefined) in objs.items():
    for sym in undefined:
        dst = owner.get(sym)
        if dst and dst != src:
            edges.setdefault(src, set()).add(dst)
            why.setdefault((src, dst), []).append(sym)
up = []
for (a, b), syms in sorted(why.items()):
    if row_of(a, table)[1] < row_of(b, table)[1]:
        up.append(f"{a} (layer {row_of(a, table)[1]}) -> {b} (layer {row_of(b, table)[1]}): "
                  + " ".join(sorted(syms)))
ok(not up, f"no file calls into a higher layer ({len(why)} file pairs)", "\n    " + "\n    ".join(up))


def unit(src):
    """A file, or its whole folder when the table marks that one module."""
    row = row_of(src, table)
    return row[0] if row[2] else src


folder_edges, unit_edges = {}, {}
for (a, b) in why:
    fa, fb = row_of(a, table)[0], row_of(b, table)[0]
    if fa != fb:
        folder_edges.setdefault(fa, set()).add(fb)
    if unit(a) != unit(b):
        unit_edges.setdefault(unit(a), set()).add(unit(b))
loops = cycles({r[0] for r in table}, folder_edges)
ok(not loops, "no two folders call each other", loops)
loops = cycles({unit(s) for s in objs}, unit_edges)
ok(not loops, "no call cycle between files (the router is one module)", loops)
note("modules: " + ", ".join(r[0] for r in table if r[2]))


section("one interface header per folder, each declaration in its folder's")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# A prototype or definition: at the start of a line, a type, then dq__name(.
DECL = re.compile(r"^[A-Za-z_][\w \t*]*?\b(dq__\w+)\s*\(", re.M)
COMMENT = re.compile(r"/\*.*?\*/", re.S)
texts = []
for d in ("src", "tests", "bench", "fuzz", "examples", "tools"):
    for path in glob.glob(os.path.join(ROOT, d, "**", "*.[ch]"), recursive=True):
        with open(path, encoding="utf-8", errors="replace") as f:
            texts.append((os.path.relpath(path, ROOT), f.read()))
strays, misplaced, checked = [], [], 0
for folder in (r[0] for r in lib_rows):
    interface = os.path.basename(folder) + ".h"
    for h in sorted(glob.glob(os.path.join(ROOT, folder, "*.h"))):
        name = os.path.basename(h)
        if name != interface:
            outside = [p for p, text in texts if name in INCLUDE.findall(text) and os.path.dirname(p) != folder]
            if outside:
                strays.append(f"{folder}/{name} (private to {folder}/) included by " + " ".join(outside))
            continue
        with open(h, encoding="utf-8") as f:
            for fn in sorted(set(DECL.findall(COMMENT.sub("", f.read())))):
                src = owner.get(fn)
                checked += bool(src)
                if src and row_of(src, table)[0] != folder:
                    misplaced.append(f"{fn} declared in {folder}/{name}, defined in {src}")
ok(not strays, "a folder's other headers are private to it", "\n    " + "\n    ".join(strays))
ok(not misplaced, f"each interface header declares only its own folder's functions ({checked} checked)",
   "\n    " + "\n    ".join(misplaced))

finish()
