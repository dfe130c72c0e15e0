#!/bin/sh
# tests/run.sh BUILD_DIR - runs the whole suite on a private redis-server.
#
#   sh tests/run.sh build            (make test / test-asan / valgrind call it)
#
# Starts redis-server on a free 127.0.0.1 port (never 6379) in a mktemp -d
# directory (AOF on, appendfsync everysec, no RDB), then runs, each under a
# timeout and after a FLUSHALL:
#   1. the unit binaries        BUILD_DIR/tests/<name> for tests/unit/<name>.c
#   2. the integration binaries BUILD_DIR/tests/<name> for tests/integration/<name>.c
#   3. the CLI tests            tests/cli/GROUP/*.py (python3) and *.sh (sh), in
#                               the order of their file names, whatever their
#                               group (tests/README.md maps features to files)
# C binaries run under $DQ_TEST_WRAPPER when set (make valgrind sets it).
# Ends with the line "N passed, N failed" (counting test files; ", N skipped"
# after it when some were); exits 1 if any failed. A test that exits 77 (the
# automake convention) is SKIPPED: it cannot check here (valgrind missing for
# the leak checks), and says why. The server is stopped from a trap, whoever
# (re)started it. The tests' temporary files go to a directory of the run's
# (TMPDIR points there), removed at the end, so nothing stays in /tmp.
#
# Environment the tests get:
#   DQ_TEST_REDIS       redis://127.0.0.1:PORT   (DELAYQ_REDIS is set to it too)
#   DQ_TEST_REDIS_PORT  PORT                      DQ_TEST_REDIS_DIR  data dir
#   DQ_BIN              BUILD_DIR/delayq          DQ_BUILD_DIR       BUILD_DIR
#   DQ_TEST_ROOT        the source tree           DQ_TEST_LIB        tests/lib
#   DQ_TEST_SLOW        1, or 5 under a wrapper (tests scale time bounds)
# Knobs: DQ_TEST_ONLY=glob (run only matching test names, e.g. 'test_api*';
#        a CLI test's name is its file name, without its group),
#        DQ_TEST_TIER=fast (the C binaries and the CLI tests not marked slow:
#        a line "# tier: slow" in the file), slow (only those marked), or all
#        (the default),
#        DQ_TEST_TIMEOUT=seconds per test file (default 120; 400 with a wrapper;
#        make test-asan sets 240;
#        twice that for the ha_* files, which wait through real failovers).
set -u

if [ $# -ne 1 ]; then
    echo "usage: sh tests/run.sh BUILD_DIR" >&2
    exit 2
fi

ROOT=$(cd "$(dirname "$0")/.." && pwd)
case "$1" in
    /*) BUILD_DIR=$1 ;;
    *) BUILD_DIR=$(pwd)/$1 ;;
esac
cd "$ROOT" || exit 2
if [ ! -d "$BUILD_DIR" ]; then
    echo "run.sh: no build directory $BUILD_DIR (run make first)" >&2
    exit 2
fi

. "$ROOT/tests/lib/redis.sh"

WRAPPER=${DQ_TEST_WRAPPER:-}
if [ -n "$WRAPPER" ]; then
    SLOW=5
    TIMEOUT=${DQ_TEST_TIMEOUT:-400}
else
    SLOW=1
    TIMEOUT=${DQ_TEST_TIMEOUT:-120}
fi

cleanup() {
    # Finish cleaning up even if another signal comes meanwhile.
    trap '' INT TERM
    trap - EXIT
    redis_stop
    if [ -n "${DQ_TEST_REDIS_DIR:-}" ] && [ -d "$DQ_TEST_REDIS_DIR" ]; then
        rm -rf "$DQ_TEST_REDIS_DIR"
    fi
    if [ -n "${DQ_TEST_TMP:-}" ] && [ -d "$DQ_TEST_TMP" ]; then
        rm -rf "$DQ_TEST_TMP"
    fi
}
# The running test (a timeout process, leader of the test's process group).
CUR_PID=
stop_current() {
    if [ -n "$CUR_PID" ]; then
        kill -TERM "$CUR_PID" 2>/dev/null
        wait "$CUR_PID" 2>/dev/null
        CUR_PID=
    fi
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted" >&2; stop_current; exit 130' INT
trap 'echo "run.sh: terminated" >&2; stop_current; exit 143' TERM

DQ_TEST_REDIS_DIR=$(mktemp -d "${TMPDIR:-/tmp}/delayq-test.XXXXXX") || exit 2
export DQ_TEST_REDIS_DIR
# Where the tests' own temporary files go (python's tempfile, mktemp and
# the C tests read TMPDIR): removed by cleanup, even after a test that
# failed half-way or forgot its files.
DQ_TEST_TMP=$(mktemp -d "${TMPDIR:-/tmp}/delayq-tmp.XXXXXX") || exit 2
TMPDIR=$DQ_TEST_TMP
export TMPDIR

# A free port: probe, start, and retry with another port if someone took it
# between the probe and the bind.
started=0
for attempt in 1 2 3 4 5; do
    DQ_TEST_REDIS_PORT=$(redis_pick_port)
    export DQ_TEST_REDIS_PORT
    if [ -z "$DQ_TEST_REDIS_PORT" ]; then
        echo "run.sh: cannot pick a port (python3 missing?)" >&2
        exit 2
    fi
    if redis_ping; then
        continue # someone answers there already: not ours
    fi
    if redis_start; then
        started=1
        break
    fi
    echo "run.sh: start attempt $attempt on port $DQ_TEST_REDIS_PORT failed; retrying" >&2
done
if [ $started -ne 1 ]; then
    echo "run.sh: could not start redis-server" >&2
    exit 2
fi

DQ_TEST_REDIS="redis://127.0.0.1:$DQ_TEST_REDIS_PORT"
DELAYQ_REDIS=$DQ_TEST_REDIS
DQ_BIN="$BUILD_DIR/delayq"
DQ_BUILD_DIR=$BUILD_DIR
DQ_TEST_ROOT=$ROOT
DQ_TEST_LIB="$ROOT/tests/lib"
DQ_TEST_SLOW=$SLOW
export DQ_TEST_REDIS DELAYQ_REDIS DQ_BIN DQ_BUILD_DIR DQ_TEST_ROOT DQ_TEST_LIB DQ_TEST_SLOW
# cmocka: failures and summaries on stdout, in the order they happen.
CMOCKA_MESSAGE_OUTPUT=stdout
export CMOCKA_MESSAGE_OUTPUT
unset CMOCKA_TEST_ABORT 2>/dev/null || true

echo "run.sh: redis-server $(redis_pid) on 127.0.0.1:$DQ_TEST_REDIS_PORT, dir $DQ_TEST_REDIS_DIR"
echo "run.sh: build $BUILD_DIR${WRAPPER:+, wrapper: $WRAPPER}"

passed=0
failed=0
skipped=0
failed_names=""

selected() {
    [ -z "${DQ_TEST_ONLY:-}" ] && return 0
    case "$1" in $DQ_TEST_ONLY) return 0 ;; esac
    return 1
}

TIER=${DQ_TEST_TIER:-all}
case "$TIER" in
    fast | slow | all) ;;
    *)
        echo "run.sh: DQ_TEST_TIER is fast, slow or all, not '$TIER'" >&2
        exit 2
        ;;
esac

# in_tier FILE: 0 if the test in FILE belongs to the tier asked for. A test
# is slow when it says so (a line "# tier: slow"); the C binaries are fast.
in_tier() {
    [ "$TIER" = all ] && return 0
    _slow=fast
    [ -n "$1" ] && grep -q '^# tier: slow' "$1" && _slow=slow
    [ "$_slow" = "$TIER" ]
}

# Makes sure the server is up and empty before a test file: a test that
# restarted it (or timed out while it was down) must not break the next.
prepare() {
    if ! redis_ping; then
        echo "run.sh: redis is down before $1; starting it again"
        redis_stop
        redis_start || return 1
    fi
    "$REDIS_CLI" -h 127.0.0.1 -p "$DQ_TEST_REDIS_PORT" FLUSHALL >/dev/null 2>&1 || return 1
    "$REDIS_CLI" -h 127.0.0.1 -p "$DQ_TEST_REDIS_PORT" SCRIPT FLUSH >/dev/null 2>&1 || return 1
}

# run_one KIND NAME CMD...: runs one test file and counts it.
run_one() {
    _kind=$1
    _name=$2
    shift 2
    echo
    echo "=== $_kind $_name"
    if ! prepare "$_name"; then
        echo "--- FAIL $_kind $_name: redis not available"
        failed=$((failed + 1))
        failed_names="$failed_names $_name"
        return
    fi
    _t0=$(date +%s)
    # In the background so that a signal to run.sh can stop it (timeout
    # passes SIGTERM on to the test's whole process group).
    # The HA tests start Sentinel groups and clusters of their own and wait
    # through real failovers: they get twice the time.
    _limit=$TIMEOUT
    case "$_name" in ha_*) _limit=$((TIMEOUT * 2)) ;; esac
    timeout -k 10 "$_limit" "$@" &
    CUR_PID=$!
    wait "$CUR_PID"
    _rc=$?
    CUR_PID=
    _t1=$(date +%s)
    if [ $_rc -eq 0 ]; then
        echo "--- PASS $_kind $_name ($((_t1 - _t0)) s)"
        passed=$((passed + 1))
    elif [ $_rc -eq 77 ]; then
        echo "--- SKIP $_kind $_name ($((_t1 - _t0)) s)"
        skipped=$((skipped + 1))
    else
        if [ $_rc -eq 124 ] || [ $_rc -eq 137 ]; then
            _why="timed out after $_limit s"
        else
            _why="exit $_rc"
        fi
        echo "--- FAIL $_kind $_name: $_why ($((_t1 - _t0)) s)"
        failed=$((failed + 1))
        failed_names="$failed_names $_name"
    fi
}

# A wrapper that is not installed (make valgrind without valgrind): the C
# tests it would run are skipped, visibly, rather than failed or run bare.
WRAPPER_MISSING=
if [ -n "$WRAPPER" ] && ! command -v "${WRAPPER%% *}" >/dev/null 2>&1; then
    WRAPPER_MISSING=${WRAPPER%% *}
    echo "run.sh: $WRAPPER_MISSING is not installed: the tests run under it are SKIPPED"
fi

# run_c KIND DIR: the binaries built from DIR/*.c.
run_c() {
    for src in "$ROOT"/tests/"$2"/*.c; do
        [ -e "$src" ] || continue
        name=$(basename "$src" .c)
        selected "$name" || continue
        in_tier "" || continue
        if [ -n "$WRAPPER_MISSING" ]; then
            echo
            echo "=== $1 $name"
            echo "--- SKIP $1 $name: $WRAPPER_MISSING not installed"
            skipped=$((skipped + 1))
            continue
        fi
        bin="$BUILD_DIR/tests/$name"
        if [ ! -x "$bin" ]; then
            echo
            echo "=== $1 $name"
            echo "--- FAIL $1 $name: $bin not built"
            failed=$((failed + 1))
            failed_names="$failed_names $name"
            continue
        fi
        # shellcheck disable=SC2086
        run_one "$1" "$name" $WRAPPER "$bin"
    done
}

run_c unit unit
run_c integration integration

# Debian's python3, where the python3-* packages the tests use (make deps)
# live; a python3 of its own earlier in PATH would not see them.
PYTHON=python3
[ -x /usr/bin/python3 ] && PYTHON=/usr/bin/python3
# The CLI tests of every group (tests/cli/GROUP/NAME), by NAME.
cli_tests() {
    find "$ROOT/tests/cli" -type f \( -name '*.py' -o -name '*.sh' \) |
        awk -F/ '{ print $NF "\t" $0 }' | LC_ALL=C sort | cut -f2-
}
_ifs=$IFS
IFS='
'
for t in $(cli_tests); do
    IFS=$_ifs
    name=$(basename "$t")
    case "$name" in _*) continue ;; esac
    selected "$name" || continue
    in_tier "$t" || continue
    case "$t" in
        *.py) run_one cli "$name" "$PYTHON" "$t" ;;
        *.sh) run_one cli "$name" sh "$t" ;;
    esac
done
IFS=$_ifs

echo
if [ -n "$failed_names" ]; then
    echo "failed:$failed_names"
fi
if [ $skipped -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
if [ $failed -eq 0 ]; then
    exit 0
fi
exit 1
