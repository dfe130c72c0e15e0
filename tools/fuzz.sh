#!/bin/sh
# tools/fuzz.sh BUILD SECONDS LAYER_INC - builds every fuzz/fuzz_*.c as a libFuzzer
# target against the objects `make fuzz` built in BUILD (clang,
# -fsanitize=fuzzer-no-link,address,undefined) and runs each for SECONDS on
# its seed corpus (fuzz/corpus/NAME, read only; new inputs go to
# BUILD/corpus/NAME) with its dictionary (fuzz/NAME.dict) if any. Crash
# inputs are written as BUILD/crash-NAME-*. Exits 1 if any target failed.
# LAYER_INC: the library folders' include flags (the Makefile's LAYER_INC).
set -u
BUILD=$1
SECONDS_EACH=$2
LAYER_INC=$3
ar rcs "$BUILD/libcli.a" $(ls "$BUILD"/src/cli/*.o "$BUILD"/src/cli/serve/*.o | grep -v '/main\.o$') || exit 2
failed=""
for src in fuzz/fuzz_*.c; do
    name=$(basename "$src" .c)
    bin="$BUILD/fuzz/$name"
    mkdir -p "$BUILD/fuzz" "$BUILD/corpus/$name"
    clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
        -fno-sanitize-recover=all -Iinclude -Isrc $LAYER_INC -I"$BUILD/gen" -o "$bin" "$src" \
        "$BUILD/libcli.a" "$BUILD/libdelayq.a" -lhiredis -lev -lsodium -lssl -lcrypto -ljansson -lm || {
        failed="$failed $name(build)"
        continue
    }
    dict=""
    [ -f "fuzz/$name.dict" ] && dict="-dict=fuzz/$name.dict"
    echo "== $name: $SECONDS_EACH s"
    # shellcheck disable=SC2086
    if ! "$bin" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -artifact_prefix="$BUILD/crash-$name-" \
        $dict "$BUILD/corpus/$name" "fuzz/corpus/$name" 2>"$BUILD/$name.log"; then
        tail -n 30 "$BUILD/$name.log"
        failed="$failed $name"
    fi
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$BUILD/$name.log" | tr '\n' ' '
    echo
done
if [ -n "$failed" ]; then
    echo "fuzz: failed:$failed" >&2
    exit 1
fi
echo "fuzz: every target ran ${SECONDS_EACH} s without a finding"
