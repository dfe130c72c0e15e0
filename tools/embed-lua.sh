#!/bin/sh
# Turns lua/*.lua into a C header the library embeds:
#   - one Redis function library holding the shared code (lua/lib/*.lua,
#     joined in name order: "the common code" below) once and every other
#     script as a function: the library is loaded once per server (FUNCTION
#     LOAD), and a call (FCALL) then runs only its script, not the common
#     code that an EVAL text runs afresh each time;
#   - each script on its own, for EVAL when a server lacks the library (it is
#     loaded alongside; see src/ops/script.c), after only the definitions of
#     the common code it uses (tools/lua-trim.awk picks them, and fails the
#     build if a text uses one it lacks): Redis runs an EVAL text whole on
#     every call, and each definition it carries costs a closure or a table
#     per call, used or not.
# The header holds each text once: the common code, each script's body and
# the library's prologue, as byte arrays, and the order that joins them:
# DQ_LUA_LIBRARY_PARTS (the library) and DQ_LUA_<name>_PARTS (the EVAL
# text: runs of the common code's bytes, then the script; _NPARTS of them),
# lists of {bytes, length} that src/ops/script.c joins where it sends
# them. (Joined here, the common code was carried 16 times: 0.9 MB of the
# library's 1.2 MB of code.)
# The library's name carries the SHA-1 of its text (delayq_<12 hex>), and its
# functions are <library>_<script>, so clients of different versions never
# call each other's scripts. stats, lookup, metrics, list, consumers and schedules only read: they are flagged
# no-writes (FCALL_RO runs them, for a user whose keys are read-only, and
# they run while Redis is out of memory), and so is dead_ro, dead.lua again
# for its reading operations (list, count), and protocol (the version of
# PROTOCOL.md the library speaks, for clients in other languages). The others
# may not start while Redis is out of memory.
# Usage: tools/embed-lua.sh OUT.h lua/lib lua/a.lua lua/b.lua ...
set -eu
out=$1; libdir=$2; shift 2
tmp="$out.tmp"
libbody=$(mktemp)
common=$(mktemp)
prologue=$(mktemp)
kept=$(mktemp -d)
trap 'rm -rf "$libbody" "$common" "$prologue" "$kept"' EXIT
trim="$(dirname "$0")/lua-trim.awk"
# The common code: the files of lua/lib in name order (C collation, so the
# order never depends on the machine's locale).
(LC_ALL=C; cat "$libdir"/*.lua) > "$common"

# Each script's EVAL text: the runs of the common code it keeps, as lines
# "OFFSET LENGTH" in $kept/NAME.runs, and their bytes in $kept/NAME.lua,
# checked with the script after them before anything is written.
LC_ALL=C awk -v dir="$kept" -f "$trim" "$common" "$@"
for f in "$@"; do
  name=$(basename "$f" .lua)
  while read -r off len; do
    tail -c +$((off + 1)) "$common" | head -c "$len"
  done < "$kept/$name.runs" > "$kept/$name.lua"
done
LC_ALL=C awk -v dir="$kept" -v check=1 -f "$trim" "$common" "$@"

# The library's prologue makes the Lua libraries and Redis's API locals of
# the library (upvalues of its functions), which the common code then uses
# instead of the globals. A function's globals table is empty and reaches the
# real one through a metatable, so each `string.sub` or `redis.pcall` as a
# global costs two table lookups and a metamethod before the call (about 5%
# of a worker's drain). While the library loads only `redis` (the loading
# API, with register_function) exists, so the others are set when a function
# starts. Not in the EVAL texts: a script run as EVAL makes its closures on
# every call, where more upvalues cost more than they save.
cat > "$prologue" <<'LUA'
local function dq_runtime_globals()
  return redis, string, math, table, cmsgpack, tonumber, type, ipairs, pairs, unpack, pcall
end
local redis, string, math, table, cmsgpack, tonumber, type, ipairs, pairs, unpack, pcall = redis
local function dq_use_runtime_globals()
  redis, string, math, table, cmsgpack, tonumber, type, ipairs, pairs, unpack, pcall = dq_runtime_globals()
end
LUA

# The library's text after its first line, as parts, for library name $1:
# lines "file NAME PATH" (a file's bytes, as the array dq_lua_NAME) and
# "text TEXT" (TEXT and a newline; no double quote nor backslash in it).
library_parts() {
  lib=$1
  shift
  echo "file library_prologue $prologue"
  echo "file common $common"
  register() { # FILE FUNCTION FLAGS
    echo "text redis.register_function{function_name = '$1_$3', callback = function(KEYS, ARGV)"
    echo "text dq_use_runtime_globals()"
    echo "text call_begin()"
    echo "file $(basename "$2" .lua) $2"
    echo "text end$4}"
  }
  for f in "$@"; do
    name=$(basename "$f" .lua)
    case "$name" in
      stats|lookup|metrics|list|protocol|consumers|schedules) register "$lib" "$f" "$name" ", flags = {'no-writes'}" ;;
      dead) register "$lib" "$f" dead ""; register "$lib" "$f" dead_ro ", flags = {'no-writes'}" ;;
      *) register "$lib" "$f" "$name" "" ;;
    esac
  done
}

# The library's name carries the SHA-1 of its text with @LIB@ for the name.
library_parts @LIB@ "$@" | while IFS= read -r line; do
  case "$line" in
    file\ *) cat "${line#file * }" ;;
    text\ *) printf '%s\n' "${line#text }" ;;
  esac
done > "$libbody"
libname="delayq_$(sha1sum "$libbody" | cut -d' ' -f1 | cut -c1-12)"
liblen=$(( $(printf '#!lua name=%s\n' "$libname" | wc -c) + $(sed "s/@LIB@/$libname/g" "$libbody" | wc -c) ))

bytes() {
  od -An -v -tx1 "$1" | sed 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g; s/^/  /'
}
# array NAME FILE: FILE's bytes as dq_lua_NAME (NUL-ended) and its length
# as dq_lua_NAME_LEN.
array() {
  echo "static const char dq_lua_$1[] = {"
  bytes "$2"
  echo "  0x00};"
  echo "#define dq_lua_$1_LEN ((size_t)$(wc -c < "$2"))"
}
# The parts as C initialisers of {const char *, size_t}, one a line.
c_parts() {
  while IFS= read -r line; do
    case "$line" in
      file\ *) n=${line#file }; n=${n%% *}; printf ' \\\n  {dq_lua_%s, dq_lua_%s_LEN},' "$n" "$n" ;;
      text\ *) t=${line#text }; printf ' \\\n  {"%s\\n", sizeof "%s\\n" - 1},' "$t" "$t" ;;
    esac
  done
}

{
  echo "/* Generated by tools/embed-lua.sh from the lua directory: do not edit. */"
  echo "#ifndef DQ_GEN_SCRIPTS_H"
  echo "#define DQ_GEN_SCRIPTS_H"
  echo "#include <stddef.h>"
  echo "#define DQ_LUA_LIBRARY_NAME \"$libname\""
  echo "#define DQ_LUA_LIBRARY_LEN ((size_t)$liblen)"
  array library_prologue "$prologue"
  array common "$common"
  for f in "$@"; do
    name=$(basename "$f" .lua)
    array "$name" "$f"
    echo "#define DQ_LUA_${name}_LEN ((size_t)$(cat "$kept/$name.lua" "$f" | wc -c))"
    echo "#define DQ_LUA_${name}_SHA \"$(cat "$kept/$name.lua" "$f" | sha1sum | cut -d' ' -f1)\""
    echo "#define DQ_LUA_${name}_FN \"${libname}_${name}\""
    printf '#define DQ_LUA_%s_PARTS' "$name"
    while read -r off len; do printf ' \\\n  {dq_lua_common + %s, %s},' "$off" "$len"; done < "$kept/$name.runs"
    printf ' \\\n  {dq_lua_%s, dq_lua_%s_LEN}\n' "$name" "$name"
    echo "#define DQ_LUA_${name}_NPARTS $(( $(wc -l < "$kept/$name.runs") + 1 ))"
    [ "$name" = dead ] && echo "#define DQ_LUA_dead_ro_FN \"${libname}_dead_ro\""
  done
  printf '#define DQ_LUA_LIBRARY_PARTS \\\n  {"#!lua name=%s\\n", sizeof "#!lua name=%s\\n" - 1},' "$libname" "$libname"
  library_parts "$libname" "$@" | c_parts
  echo
  echo "#endif"
} > "$tmp"
mv "$tmp" "$out"
