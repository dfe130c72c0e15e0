#!/bin/sh
# Turns lua/*.lua into a C header the library embeds:
#   - one Redis function library holding the shared code (lua/lib/*.lua,
#     joined in name order: "the common code" below) once and every other
#     script as a function: the library is loaded once per server (FUNCTION
#     LOAD), and a call (FCALL) then runs only its script, not the 1,300
#     lines of common code that EVAL would run afresh each time;
#   - each script on its own (the common code before it), for EVAL when a
#     server lacks the library (it is loaded alongside; see src/ops/script.c).
# The header holds each text once: the common code, each script's body and
# the library's prologue, as byte arrays, and the order that joins them:
# DQ_LUA_LIBRARY_PARTS (the library) and DQ_LUA_<name>_PARTS (the EVAL
# text), lists of {bytes, length} that src/ops/script.c joins where it sends
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
trap 'rm -f "$libbody" "$common" "$prologue"' EXIT
# The common code: the files of lua/lib in name order (C collation, so the
# order never depends on the machine's locale).
(LC_ALL=C; cat "$libdir"/*.lua) > "$common"

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
    echo "#define DQ_LUA_${name}_LEN ((size_t)$(cat "$common" "$f" | wc -c))"
    echo "#define DQ_LUA_${name}_SHA \"$(cat "$common" "$f" | sha1sum | cut -d' ' -f1)\""
    echo "#define DQ_LUA_${name}_FN \"${libname}_${name}\""
    echo "#define DQ_LUA_${name}_PARTS {dq_lua_common, dq_lua_common_LEN}, {dq_lua_$name, dq_lua_${name}_LEN}"
    [ "$name" = dead ] && echo "#define DQ_LUA_dead_ro_FN \"${libname}_dead_ro\""
  done
  printf '#define DQ_LUA_LIBRARY_PARTS \\\n  {"#!lua name=%s\\n", sizeof "#!lua name=%s\\n" - 1},' "$libname" "$libname"
  library_parts "$libname" "$@" | c_parts
  echo
  echo "#endif"
} > "$tmp"
mv "$tmp" "$out"
