# tools/lua-trim.awk: which parts of the scripts' shared code (lua/lib,
# joined) a script needs, for its EVAL text (tools/embed-lua.sh). Redis runs
# an EVAL text whole on every call, so each top-level definition of the
# shared code it carries costs a closure or a table per call, used or not.
#
# The shared code is cut into top-level definitions, each starting at
# column 0 at block depth 0 in one of these forms (anything else there fails
# the run, so a new kind of statement is never cut wrongly):
#   local function NAME ...      local NAME[, NAME...] = ...
#   function TABLE.NAME ...      TABLE.NAME = ...
# A definition runs to its last line of code; the comments and blank lines
# before it go with it. A name used (outside strings and comments) is a
# reference: NAME to the local, TABLE.NAME to that field's definition, and
# TABLE used any other way (TABLE[k], TABLE:m(), passed along) to all of
# its fields. A script keeps what its body references, transitively, in the
# shared code's order.
#
#   awk [-v dir=DIR] -f tools/lua-trim.awk COMMON SCRIPT...
#       writes "OFFSET LENGTH" per run of bytes of COMMON a script keeps, in
#       order, into DIR/NAME.runs for lua/NAME.lua (without DIR: one script,
#       to stdout)
#   awk -v dir=DIR -v check=1 -f tools/lua-trim.awk COMMON SCRIPT...
#       fails (exit 1, saying what) if a text DIR/NAME.lua + SCRIPT uses a
#       name COMMON defines that DIR/NAME.lua does not, or uses a local of
#       DIR/NAME.lua before the definition that makes it one
# Run with LC_ALL=C: offsets are bytes.

function fail(msg) {
    print "lua-trim.awk: " msg > "/dev/stderr"
    exit 1
}

# Notes that unit u of parse p uses ref (once: a script names some things
# hundreds of times).
function add_ref(p, u, ref) {
    if ((p, u, "uses", ref) in P) return
    P[p, u, "uses", ref] = 1
    P[p, u, "refs"] = P[p, u, "refs"] " " ref
}

# Reads file f; strict: cut it into definitions (else it is one unit, a
# script's body). Fills, under prefix p: p,"units"; per unit u p,u,"names"
# (space-separated), p,u,"from" and p,u,"to" (lines), p,u,"refs" (space
# separated, "TABLE.*" for all of TABLE's fields); p,"off",line (byte
# offset of the line's start); p,"def",NAME = unit.
function parse(f, strict, p,    line, ln, n, i, c, rest, name, depth, brackets, unit, last, word, in_long, in_str, prev, base, pending, skip, m, names, k, off) {
    ln = 0; unit = 0; depth = 0; brackets = 0; in_long = ""; in_str = ""; off = 0
    prev = ""; base = ""; pending = ""; skip = 0; last = 0
    if (!strict) { unit = 1; P[p, 1, "names"] = ""; P[p, 1, "from"] = 1; P[p, 1, "refs"] = "" }
    while ((getline line < f) > 0) {
        ln++
        P[p, "off", ln] = off
        off += length(line) + 1
        if (strict && in_long == "" && in_str == "" && line ~ /^[^ \t}\)-]/ && line !~ /^end([^A-Za-z0-9_]|$)/) {
            if (depth != 0 || brackets != 0)
                fail(f ":" ln ": a line at column 0 inside a block (indent it, or close the block above)")
            if (unit > 0) P[p, unit, "to"] = last
            unit++
            P[p, unit, "from"] = (unit == 1) ? 1 : last + 1
            P[p, unit, "refs"] = ""
            if (match(line, /^local function [A-Za-z_][A-Za-z0-9_]*/)) {
                names = substr(line, 16, RLENGTH - 15)
            } else if (match(line, /^local [A-Za-z_][A-Za-z0-9_, ]*=/)) {
                names = substr(line, 7, RLENGTH - 7)
                gsub(/[ ,]+/, " ", names)
                sub(/^ +/, "", names)
                sub(/ +$/, "", names)
                skip = 1 # the names before '=' are defined here, not used
            } else if (match(line, /^function [A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*/)) {
                names = substr(line, 10, RLENGTH - 9)
            } else if (match(line, /^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]* *=/)) {
                names = substr(line, 1, RLENGTH - 1)
                sub(/ +$/, "", names)
            } else {
                fail(f ":" ln ": a top-level statement this tool does not cut: " substr(line, 1, 60))
            }
            P[p, unit, "names"] = names
            k = split(names, m, " ")
            for (i = 1; i <= k; i++) {
                if ((p, "def", m[i]) in P) fail(f ":" ln ": " m[i] " is defined twice at the top level")
                P[p, "def", m[i]] = unit
            }
        }
        n = length(line)
        i = 1
        while (i <= n) {
            if (in_long != "") { # in a long string or comment: to its closing bracket
                k = index(substr(line, i), in_long)
                if (k == 0) { i = n + 1; continue }
                i += k - 1 + length(in_long)
                in_long = ""
                last = ln
                continue
            }
            if (in_str != "") { # in a quoted string: to its quote (a \ skips a byte)
                c = substr(line, i, 1)
                if (c == "\\") { i += 2; continue }
                i++
                if (c == in_str) { in_str = ""; last = ln }
                continue
            }
            c = substr(line, i, 1)
            rest = substr(line, i)
            if (c == " " || c == "\t" || c == "\r") { i++; continue }
            if (substr(rest, 1, 2) == "--") {
                if (match(rest, /^--\[=*\[/)) {
                    in_long = "]" substr(rest, 4, RLENGTH - 4) "]"
                    i += RLENGTH
                } else {
                    i = n + 1
                }
                continue
            }
            last = ln
            if (match(rest, /^\[=*\[/)) {
                in_long = "]" substr(rest, 2, RLENGTH - 2) "]"
                i += RLENGTH
                word = "string"
            } else if (c == "'" || c == "\"") {
                in_str = c
                i++
                word = "string"
            } else if (match(rest, /^[A-Za-z_][A-Za-z0-9_]*/)) {
                word = "name"
                name = substr(rest, 1, RLENGTH)
                i += RLENGTH
            } else if (match(rest, /^(\.?[0-9])[0-9A-Za-z_.]*([eE][-+][0-9]+)?/)) {
                word = "number"
                i += RLENGTH
            } else if (match(rest, /^\.\.+/)) {
                word = ".."
                i += RLENGTH
            } else {
                word = c
                i++
            }
            # A name used bare (not as NAME.FIELD): all of its fields.
            if (pending != "" && word != ".") {
                if (!skip) add_ref(p, unit, pending ".*")
                pending = ""
            }
            if (word == "name" && (prev == "." || prev == ":")) {
                if (prev == "." && base != "" && !skip) add_ref(p, unit, base "." name)
                base = ""
                word = "field"
            } else if (word == "name") {
                if (name == "function" || name == "if" || name == "do" || name == "repeat") depth++
                else if (name == "end" || name == "until") depth--
                if (!skip) add_ref(p, unit, name)
                pending = base = name
            } else if (word == ".") {
                pending = "" # base's field comes next
            } else {
                base = ""
                if (word == "(" || word == "{" || word == "[") brackets++
                else if (word == ")" || word == "}" || word == "]") brackets--
                else if (word == "=") skip = 0
            }
            prev = word
        }
    }
    close(f)
    if (in_long != "" || in_str != "") fail(f ": ends inside a string or comment")
    if (strict && (depth != 0 || brackets != 0)) fail(f ": ends inside a block")
    P[p, unit, "to"] = strict ? last : ln
    P[p, "units"] = unit
    P[p, "off", ln + 1] = off
}

# Marks unit u of parse p kept for script a, and what it references,
# transitively.
function keep(p, u, a,    k, i, r) {
    if (P[p, u, "kept"] == a) return
    P[p, u, "kept"] = a
    k = split(P[p, u, "refs"], r, " ")
    for (i = 1; i <= k; i++) keep_ref(p, r[i], a)
}

function keep_ref(p, ref, a,    t, v) {
    if (ref ~ /\.\*$/) {
        t = substr(ref, 1, length(ref) - 1)
        for (v = 1; v <= P[p, "units"]; v++)
            if (index(P[p, v, "names"], t) == 1) keep(p, v, a)
    } else if ((p, "def", ref) in P) {
        keep(p, P[p, "def", ref], a)
    }
}

# Prints to out the runs of COMMON that script a (parse "s" a) keeps, merged.
function print_runs(a, out,    k, i, r, u, start, end, from, to) {
    k = split(P["s" a, 1, "refs"], r, " ")
    for (i = 1; i <= k; i++) keep_ref("c", r[i], a)
    printf "" > out
    start = -1
    for (u = 1; u <= P["c", "units"]; u++) {
        from = P["c", "off", P["c", u, "from"]]
        to = P["c", "off", P["c", u, "to"] + 1]
        if (P["c", u, "kept"] == a && start >= 0 && from == end) { end = to; continue }
        if (start >= 0) print start, end - start > out
        start = -1
        if (P["c", u, "kept"] == a) { start = from; end = to }
    }
    if (start >= 0) print start, end - start > out
    close(out)
}

# Fails if refs (of unit at of kept text k, or after it) use what COMMON
# defines and k does not, or a local of k before its definition.
function check_refs(k, refs, at, where,    n, i, r, t, name, v) {
    n = split(refs, r, " ")
    for (i = 1; i <= n; i++) {
        name = r[i]
        if (name ~ /\.\*$/) {
            t = substr(name, 1, length(name) - 1)
            for (v = 1; v <= P["c", "units"]; v++)
                if (index(P["c", v, "names"], t) == 1 && !((k, "def", P["c", v, "names"]) in P))
                    fail(where ": uses " name " but lacks " P["c", v, "names"] " (shared code not kept)")
            continue
        }
        if (!(("c", "def", name) in P)) continue
        if (!((k, "def", name) in P))
            fail(where ": uses " name " but lacks its definition (shared code not kept)")
        if (name !~ /\./ && P[k, "def", name] > at)
            fail(where ": uses local " name " before its definition")
    }
}

# Checks the text KEPT, then script a (parse "s" a) after it.
function check_text(a, kept,    k, u) {
    k = "k" a
    parse(kept, 1, k)
    for (u = 1; u <= P[k, "units"]; u++)
        check_refs(k, P[k, u, "refs"], u, kept " (" P[k, u, "names"] ")")
    check_refs(k, P["s" a, 1, "refs"], P[k, "units"] + 1, ARGV[a])
}

BEGIN {
    if (ARGC < 3 || (check && dir == ""))
        fail("usage: awk [-v dir=DIR] [-v check=1] -f lua-trim.awk COMMON SCRIPT...")
    if (dir == "" && ARGC > 3) fail("several scripts need -v dir=DIR")
    parse(ARGV[1], 1, "c")
    for (a = 2; a < ARGC; a++) {
        name = ARGV[a]
        sub(/.*\//, "", name)
        sub(/\.lua$/, "", name)
        parse(ARGV[a], 0, "s" a)
        if (check) check_text(a, dir "/" name ".lua")
        else print_runs(a, dir == "" ? "/dev/stdout" : dir "/" name ".runs")
    }
    exit 0
}
