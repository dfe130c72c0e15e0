"""docs_links.py - the documentation's cross-references resolve: every
relative link of README.md, tests/README.md, docs/*.md and the clients'
READMEs names a file that exists (and, with '#anchor', a heading of that
page whose GitHub anchor it is); every 'docs/NAME.md' a source comment
names (src, include, lua, tools, bench, tests/lib, clients) exists, and
with ", 'Section'" after it, that page has a heading of that title. The
README was cut short and its depth moved to docs/ (issue 41): a pointer
left behind, or a section renamed, is caught here rather than by a reader.
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "lib"))
from dqtest import finish, ok, section  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEAD = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
NAMED = re.compile(r"docs/([A-Za-z0-9_.-]+\.md)(?:, '([^']+)')?")


def headings(path):
    """The page's headings, outside fenced code blocks."""
    out, fenced = [], False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                fenced = not fenced
            elif not fenced:
                m = HEAD.match(line)
                if m:
                    out.append(m.group(1))
    return out


def anchor(title):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to '-'."""
    t = re.sub(r"[`*_]", "", title.strip().lower())
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


def pages():
    out = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "tests", "README.md")]
    out += sorted(os.path.join(ROOT, "docs", n) for n in os.listdir(os.path.join(ROOT, "docs")) if n.endswith(".md"))
    for d, _, files in os.walk(os.path.join(ROOT, "clients")):
        out += [os.path.join(d, n) for n in files if n.endswith(".md")]
    return out


def sources():
    for top in ("src", "include", "lua", "tools", "bench", os.path.join("tests", "lib"), "clients"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for n in files:
                if n.endswith((".c", ".h", ".lua", ".sh", ".py", ".awk", ".html")):
                    yield os.path.join(d, n)


section("relative links in the Markdown pages")
bad, seen = [], 0
for page in pages():
    text = open(page, encoding="utf-8").read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        seen += 1
        path, _, frag = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        where = f"{os.path.relpath(page, ROOT)} -> {target}"
        if not os.path.exists(dest):
            bad.append(f"{where}: no such file")
        elif frag and dest.endswith(".md") and frag not in {anchor(h) for h in headings(dest)}:
            bad.append(f"{where}: no such heading")
ok(seen > 50, f"links found ({seen})", seen)
ok(not bad, "every relative link names a file (and a heading) that exists", bad)

section("docs/ pages named in source comments")
bad, seen = [], 0
for src in sources():
    text = open(src, encoding="utf-8", errors="replace").read()
    # A help text split over C string literals ("...\n" "...") reads as one.
    text = re.sub(r'(\\n)?"\s*"', " ", text)
    for name, title in NAMED.findall(text):
        title = " ".join(title.split())
        seen += 1
        dest = os.path.join(ROOT, "docs", name)
        where = f"{os.path.relpath(src, ROOT)}: docs/{name}" + (f", '{title}'" if title else "")
        if not os.path.exists(dest):
            bad.append(f"{where}: no such page")
        elif title and title not in headings(dest):
            bad.append(f"{where}: no such heading")
ok(seen >= 5, f"pointers found ({seen})", seen)
ok(not bad, "every docs/ page (and section) a source names exists", bad)

finish()
