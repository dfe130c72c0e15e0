#!/bin/sh
# bench/run.sh BUILD_DIR - delayq's benchmark on a private redis-server.
#
#   sh bench/run.sh build            (make bench calls it after building)
#
# Starts redis-server (default settings, except: 127.0.0.1 on a free port,
# never 6379, data in a mktemp -d directory, and `save ""` so no RDB snapshot
# forks in the middle of a figure) pinned to core 0 with taskset, then runs
# BUILD_DIR/bench/dqbench pinned to core 1 (its children and redis-benchmark
# inherit the pinning), then BUILD_DIR/bench/valbench on the same server and
# core (phase val), then valbench --calls on it (phase calls: take and ack
# by the clock, interleaved call by call), then valbench again on a redis-server of its own under
# valgrind's callgrind (phase ir: the scripts' cost in instructions, which
# no other load on the machine changes), then bench/ha.py (phase ha), then bench/users.py (phase
# users: the CLI as users run it, unpinned, on a server of its own), then
# bench/ops.py (phase ops: `delayq serve`'s scrapes with 100 queues), then
# bench/shards.py (phase shards: one queue over 12 shards on 1, 2 and 3
# masters next to the same queue unsharded), then
# bench/peer.py (phase peer: BullMQ next to the CLI, A B A B), then bench/tls.py (phase tls: the
# CLI over TLS next to plain TCP), then bench/recurring.py (phase recur:
# 10,000 recurring schedules' ticks next to 10,000 items, Redis time per
# tick and per item, a few seconds). The figures go to stdout and to
# BUILD_DIR/bench/results.txt; progress lines go to stderr. Everything it
# starts is stopped by pid from a trap. The whole run is bounded by
# DQ_BENCH_TIMEOUT seconds (default 600).
#
# Knobs (environment):
#   DQ_BENCH_SCALE=0.1      scale item counts and durations (smoke run; the
#                           output then says SCALED next to every figure)
#   DQ_BENCH_ONLY=offer,spread,mem,lat,backlog,deadline,val,calls,ir,wheel,ha,users,ops,shards,peer,http,tls,recur
#                           run only these phases (spread: figure 1r, dq_offer_many
#                           with one delay against delays of their own, issue 42;
#                           val: bench/valbench.c, Redis CPU per item
#                           of the scripts before the hardening and before
#                           the metrics and before lease records, lua/ at
#                           commits b1baf5e, 856d7b3 and 3b2bf9b (read from
#                           git history into the run's directory; without
#                           it, as in a tarball, the run says so and skips
#                           them), next to the current ones;
#                           calls: valbench --calls, a plain take, a leased
#                           take and its ack of 1, 32 and 64 items timed
#                           by Redis call by call, interleaved, so the
#                           host's stalls fall on all (about 20 s);
#                           ir: valbench --callgrind against
#                           commit 3b2bf9b's, counts scaled by 0.05
#                           (DQ_BENCH_SCALE does not change it), then
#                           dqbench --only drainir (figure 5f: the
#                           drains of dq_worker and dq_take_many, 10,000
#                           items each, due over a second and in one
#                           millisecond, in instructions; with
#                           DQ_CALLGRIND_KEEP=1 both keep their dumps,
#                           cg.out.N, and the run keeps its directory,
#                           for callgrind_annotate);
#                           wheel: bench/wheel_ir.py, issue 42's three
#                           kinds of delays through `delayq offer --batch`
#                           and `delayq schedule`, in instructions per item
#                           taken apart, with bytes per item, on a
#                           redis-server of its own under callgrind, for
#                           the CLI of commit 319241f (main before the
#                           timing wheel, built from git history into the
#                           run's directory; skipped, and said so, without
#                           it) next to this build's (about 4 minutes);
#                           ha: bench/ha.py, the high-availability figures
#                           on Sentinel groups and clusters of its own;
#                           users: bench/users.py, the CLI unpinned;
#                           ops: bench/ops.py, /metrics with 100 queues;
#                           shards: bench/shards.py, a sharded queue on
#                           clusters of its own;
#                           peer: bench/peer.py, BullMQ in the same run;
#                           tls: bench/tls.py, the CLI's offers, drain and
#                           lateness over TLS next to plain TCP, one server
#                           with both ports;
#                           http: bench/http_api.py, the HTTP API's work
#                           verbs through delayq serve;
#                           python: bench/python_client.py, the Python
#                           client's offers and take + ack;
#                           recur: bench/recurring.py, the ticks of 10,000
#                           schedules due at once next to 10,000 items;
#                           parts, never by default: dqbench --only parts,
#                           figure 5g, dq_worker's drain taken apart by
#                           the clock: a worker, a leased take that never
#                           acks and a plain take, at 32 and 64 a call)
#   DQ_BENCH_TIMEOUT=600    seconds
set -u

if [ $# -ne 1 ]; then
    echo "usage: sh bench/run.sh BUILD_DIR" >&2
    exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case "$1" in
    /*) BUILD_DIR=$1 ;;
    *) BUILD_DIR=$(pwd)/$1 ;;
esac
BENCH="$BUILD_DIR/bench/dqbench"
VALBENCH="$BUILD_DIR/bench/valbench"
for prog in "$BENCH" "$VALBENCH"; do
    if [ ! -x "$prog" ]; then
        echo "run.sh: $prog not built (run make first)" >&2
        exit 2
    fi
done
for tool in redis-server redis-cli redis-benchmark python3; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "run.sh: $tool not found (make deps installs it)" >&2
        exit 2
    fi
done

# Pinning: redis-server on core 0, the clients on core 1.
NCPU=$(nproc 2>/dev/null || echo 1)
if [ "$NCPU" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
    PIN_SERVER="taskset -c 0"
    PIN_CLIENT="taskset -c 1"
else
    echo "run.sh: WARNING: fewer than 2 cores or no taskset: nothing is pinned; figures are not comparable" >&2
    PIN_SERVER=""
    PIN_CLIENT=""
fi

DIR=$(mktemp -d "${TMPDIR:-/tmp}/delayq-bench.XXXXXX") || exit 2
SERVER_PID=
BENCH_PID=
IR_PID=

# Stops the server with pid $1: TERM, then KILL after 10 s.
stop_server() {
    kill -0 "$1" 2>/dev/null || return 0
    kill -TERM "$1" 2>/dev/null
    i=0
    while [ $i -lt 100 ] && kill -0 "$1" 2>/dev/null; do
        sleep 0.1
        i=$((i + 1))
    done
    kill -KILL "$1" 2>/dev/null
    wait "$1" 2>/dev/null
}

cleanup() {
    trap - EXIT INT TERM
    if [ -n "$BENCH_PID" ] && kill -0 "$BENCH_PID" 2>/dev/null; then
        kill -TERM "$BENCH_PID" 2>/dev/null
        wait "$BENCH_PID" 2>/dev/null
    fi
    [ -n "$SERVER_PID" ] && stop_server "$SERVER_PID"
    [ -n "$IR_PID" ] && stop_server "$IR_PID"
    if [ -n "${DQ_CALLGRIND_KEEP:-}" ]; then
        echo "run.sh: DQ_CALLGRIND_KEEP: $DIR kept, with the callgrind dumps" >&2
    else
        rm -rf "$DIR"
    fi
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted" >&2; exit 130' INT
trap 'echo "run.sh: terminated" >&2; exit 143' TERM

# The port picker and PING probe of the test harness; the server itself is
# started here, pinned to its core and without AOF.
. "$ROOT/tests/lib/redis.sh"
ping() {
    DQ_TEST_REDIS_PORT=$PORT redis_ping
}

# Waits until the server on port $1 (pid $2) answers PING, for at most $3
# tenths of a second, or until it exits; true if it answers.
wait_up() {
    i=0
    while [ $i -lt "$3" ]; do
        DQ_TEST_REDIS_PORT=$1 redis_ping && return 0
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
        i=$((i + 1))
    done
    DQ_TEST_REDIS_PORT=$1 redis_ping
}

started=0
for attempt in 1 2 3 4 5; do
    PORT=$(redis_pick_port)
    [ -n "$PORT" ] || { echo "run.sh: cannot pick a port" >&2; exit 2; }
    ping && continue # somebody else's server answers there
    # taskset execs redis-server, so $! is the server's pid.
    $PIN_SERVER redis-server --port "$PORT" --bind 127.0.0.1 --dir "$DIR" \
        --daemonize no --logfile "$DIR/redis.log" --save '' --appendonly no \
        </dev/null >/dev/null 2>&1 &
    SERVER_PID=$!
    if wait_up "$PORT" "$SERVER_PID" 100; then
        started=1
        break
    fi
    echo "run.sh: redis-server did not start on port $PORT (attempt $attempt)" >&2
    tail -n 5 "$DIR/redis.log" >&2 2>/dev/null
    kill -KILL "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
    SERVER_PID=
done
[ $started -eq 1 ] || { echo "run.sh: could not start redis-server" >&2; exit 2; }

echo "run.sh: redis-server pid $SERVER_PID on 127.0.0.1:$PORT (${PIN_SERVER:-unpinned}), dir $DIR" >&2
RESULTS="$BUILD_DIR/bench/results.txt"
# "val" is valbench's phase, "ha" bench/ha.py's, "users" bench/users.py's
# "ops" bench/ops.py's and "shards" bench/shards.py's, not dqbench's.
CORE_ONLY=$(printf '%s' "${DQ_BENCH_ONLY:-}" | tr ',' '\n' | grep -v '^ha$' | grep -v '^val$' | grep -v '^ir$' |
    grep -v '^wheel$' |
    grep -v '^calls$' |
    grep -v '^tls$' |
    grep -v '^users$' | grep -v '^ops$' | grep -v '^shards$' | grep -v '^peer$' |
    grep -v '^http$' | grep -v '^python$' | grep -v '^recur$' | paste -sd, -)
RUN_HA=1
RUN_VAL=1
RUN_CALLS=1
RUN_IR=1
RUN_WHEEL=1
RUN_USERS=1
RUN_OPS=1
RUN_SHARDS=1
RUN_PEER=1
RUN_TLS=1
RUN_HTTP=1
RUN_PYTHON=1
RUN_RECUR=1
RUN_CORE=1
if [ -n "${DQ_BENCH_ONLY:-}" ]; then
    case ",$DQ_BENCH_ONLY," in *,ha,*) ;; *) RUN_HA=0 ;; esac
    case ",$DQ_BENCH_ONLY," in *,val,*) ;; *) RUN_VAL=0 ;; esac
    case ",$DQ_BENCH_ONLY," in *,calls,*) ;; *) RUN_CALLS=0 ;; esac
    case ",$DQ_BENCH_ONLY," in *,ir,*) ;; *) RUN_IR=0 ;; esac
    case ",$DQ_BENCH_ONLY," in *,wheel,*) ;; *) RUN_WHEEL=0 ;; esac
    case ",$DQ_BENCH_ONLY," in *,users,*) ;; *) RUN_USERS=0 ;; esac
    case ",$DQ_BENCH_ONLY," in *,ops,*) ;; *) RUN_OPS=0 ;; esac
    case ",$DQ_BENCH_ONLY," in *,shards,*) ;; *) RUN_SHARDS=0 ;; esac
    case ",$DQ_BENCH_ONLY," in *,peer,*) ;; *) RUN_PEER=0 ;; esac
    case ",$DQ_BENCH_ONLY," in *,tls,*) ;; *) RUN_TLS=0 ;; esac
    case ",$DQ_BENCH_ONLY," in *,http,*) ;; *) RUN_HTTP=0 ;; esac
    case ",$DQ_BENCH_ONLY," in *,python,*) ;; *) RUN_PYTHON=0 ;; esac
    case ",$DQ_BENCH_ONLY," in *,recur,*) ;; *) RUN_RECUR=0 ;; esac
    [ -n "$CORE_ONLY" ] || RUN_CORE=0
fi
[ $RUN_CORE -eq 1 ] &&
    echo "run.sh: command: ${PIN_CLIENT:+$PIN_CLIENT }$BENCH --port $PORT${CORE_ONLY:+ --only $CORE_ONLY}" >&2
[ $RUN_VAL -eq 1 ] &&
    echo "run.sh: command: ${PIN_CLIENT:+$PIN_CLIENT }$VALBENCH --port $PORT --ref $DIR/ref/b1baf5e (then 856d7b3, 3b2bf9b)" >&2

# ref_scripts COMMIT WHAT NAME...: lua/NAME.lua of an old commit, as git
# history holds it (the val and ir phases' references: each old script is
# its common.lua then the script), into $DIR/ref/COMMIT; prints that
# directory. Without the commit (no git, or a tarball) says which reference
# is skipped, and fails.
ref_scripts() {
    _commit=$1
    _what=$2
    shift 2
    if ! command -v git >/dev/null 2>&1 || ! git -C "$ROOT" cat-file -e "$_commit^{commit}" 2>/dev/null; then
        printf '
== The scripts before the %s: SKIPPED (no git history with commit %s here)
' "$_what" "$_commit" |
            tee -a "$RESULTS.tmp" >&2
        return 1
    fi
    mkdir -p "$DIR/ref/$_commit" || return 1
    for _name in "$@"; do
        git -C "$ROOT" show "$_commit:lua/$_name.lua" > "$DIR/ref/$_commit/$_name.lua" || return 1
    done
    echo "$DIR/ref/$_commit"
}
# ref_cli COMMIT WHAT: the CLI of an old commit, built from git history
# (git archive) in $DIR/cli-COMMIT (its warnings not errors, none of this
# make's flags: a newer compiler must not fail it); prints its build
# directory. Without the commit, or when it does not build, says which
# reference is skipped, and fails.
ref_cli() {
    _src=$DIR/cli-$1
    if ! command -v git >/dev/null 2>&1 || ! git -C "$ROOT" cat-file -e "$1^{commit}" 2>/dev/null; then
        printf '\n== %s: SKIPPED (no git history with commit %s here)\n' "$2" "$1" | tee -a "$RESULTS.tmp" >&2
        return 1
    fi
    if ! mkdir -p "$_src" || ! git -C "$ROOT" archive "$1" | tar -x -C "$_src" ||
        ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u WERROR -u CFLAGS -u LDFLAGS -u SANITIZE -u BUILD -u DEBUG \
            make -C "$_src" -j2 WARN=-w SANITIZE= BUILD=build build/delayq > "$_src.log" 2>&1; then
        printf '\n== %s: SKIPPED (commit %s does not build here: the end of its make below)\n' "$2" "$1" |
            tee -a "$RESULTS.tmp" >&2
        tail -n 5 "$_src.log" >&2 2>/dev/null
        return 1
    fi
    echo "$_src/build"
}
# Runs a phase: the command after OUT, its figures into OUT and shown as
# they come, then appended to the results; sets rc. In the background so
# that a signal to run.sh can stop it; the caller's timeout bounds the run
# (and kills the phase's children with it, by process group).
run_phase() {
    out=$1
    shift
    "$@" > "$out" &
    BENCH_PID=$!
    tail -f "$out" --pid "$BENCH_PID" 2>/dev/null &
    TAIL_PID=$!
    wait "$BENCH_PID"
    rc=$?
    BENCH_PID=
    wait "$TAIL_PID" 2>/dev/null
    cat "$out" >> "$RESULTS.tmp"
    rm -f "$out"
}

set --
[ -n "$CORE_ONLY" ] && set -- --only "$CORE_ONLY"
: > "$RESULTS.tmp"
rc=0
if [ $RUN_CORE -eq 1 ]; then
    # shellcheck disable=SC2086
    run_phase "$RESULTS.core" timeout -k 10 "${DQ_BENCH_TIMEOUT:-600}" $PIN_CLIENT "$BENCH" --port "$PORT" "$@"
fi
if [ $rc -eq 0 ] && [ $RUN_VAL -eq 1 ]; then
    # The same server, after dqbench (valbench FLUSHALLs it); 300 s at most.
    # shellcheck disable=SC2086
    ref=$(ref_scripts b1baf5e "hardening" common offer transfer take) &&
        run_phase "$RESULTS.val" timeout -k 10 300 $PIN_CLIENT "$VALBENCH" --port "$PORT" \
            --ref "$ref" --what "hardening, issue 15"
    # The same again against the scripts before the metrics (issue 11).
    # shellcheck disable=SC2086
    [ $rc -eq 0 ] && ref=$(ref_scripts 856d7b3 "metrics" common offer transfer take) &&
        run_phase "$RESULTS.val" timeout -k 10 300 $PIN_CLIENT "$VALBENCH" --port "$PORT" \
            --ref "$ref" --what "metrics, issue 11"
    # And against the scripts before lease records (issue 10): take and ack.
    # shellcheck disable=SC2086
    [ $rc -eq 0 ] && ref=$(ref_scripts 3b2bf9b "lease records" common offer transfer take ack) &&
        run_phase "$RESULTS.val" timeout -k 10 300 $PIN_CLIENT "$VALBENCH" --port "$PORT" \
            --ref "$ref" --what "lease records, issue 10"
fi
if [ $rc -eq 0 ] && [ $RUN_CALLS -eq 1 ]; then
    # The same server again: the library's take and ack by the clock; 120 s at most.
    echo "run.sh: command: ${PIN_CLIENT:+$PIN_CLIENT }$VALBENCH --port $PORT --calls" >&2
    # shellcheck disable=SC2086
    run_phase "$RESULTS.calls" timeout -k 10 120 $PIN_CLIENT "$VALBENCH" --port "$PORT" --calls
fi
if [ $rc -eq 0 ] && [ $RUN_IR -eq 1 ]; then
    # The scripts' cost in instructions: redis-server under callgrind, on a
    # port of its own (pinned like the other), stopped by pid; 300 s at
    # most. Valgrind slows it some 50 times, hence counts scaled by 0.05.
    if ! IR_REF=$(ref_scripts 3b2bf9b "lease records" common offer transfer take ack); then
        : # said why
    elif command -v valgrind >/dev/null 2>&1 && command -v callgrind_control >/dev/null 2>&1; then
        IR_PORT=$(redis_pick_port)
        # taskset execs valgrind, which runs the server in its own process.
        $PIN_SERVER valgrind --tool=callgrind --callgrind-out-file="$DIR/cg.out" \
            redis-server --port "$IR_PORT" --bind 127.0.0.1 --dir "$DIR" --daemonize no \
            --save '' --appendonly no </dev/null >"$DIR/callgrind.log" 2>&1 &
        IR_PID=$!
        if wait_up "$IR_PORT" "$IR_PID" 600; then
            # 0.05 whatever DQ_BENCH_SCALE says: it is a smoke run's size
            # already (30 s), and valbench's warm-up needs no less.
            IR_SCALE=0.05
            echo "run.sh: command: ${PIN_CLIENT:+$PIN_CLIENT }$VALBENCH --port $IR_PORT --callgrind $IR_PID" \
                "--callgrind-out $DIR/cg.out --scale $IR_SCALE --ref $IR_REF" >&2
            # shellcheck disable=SC2086
            run_phase "$RESULTS.ir" timeout -k 10 300 $PIN_CLIENT "$VALBENCH" --port "$IR_PORT" \
                --callgrind "$IR_PID" --callgrind-out "$DIR/cg.out" --scale "$IR_SCALE" \
                --ref "$IR_REF" --what "lease records, issue 10"
            # Then figure 5f: dq_worker's and dq_take_many's whole drains
            # (scheduler, takes, acks) on the same server, 10,000 items each.
            echo "run.sh: command: ${PIN_CLIENT:+$PIN_CLIENT }$BENCH --port $IR_PORT --only drainir" \
                "--callgrind $IR_PID --callgrind-out $DIR/cg.out" >&2
            # shellcheck disable=SC2086
            [ $rc -eq 0 ] && run_phase "$RESULTS.ir" timeout -k 10 600 $PIN_CLIENT "$BENCH" --port "$IR_PORT" \
                --only drainir --callgrind "$IR_PID" --callgrind-out "$DIR/cg.out"
        else
            echo "run.sh: redis-server under callgrind did not start" >&2
            tail -n 5 "$DIR/callgrind.log" >&2 2>/dev/null
            rc=1
        fi
        stop_server "$IR_PID"
        IR_PID=
    else
        printf '\n== Script cost in instructions: skipped (valgrind not installed; make deps installs it)\n' |
            tee -a "$RESULTS.tmp"
    fi
fi
if [ $rc -eq 0 ] && [ $RUN_WHEEL -eq 1 ]; then
    # Issue 42 before and after the timing wheel: a redis-server under
    # callgrind of its own, stopped by pid; 600 s at most.
    if ! command -v valgrind >/dev/null 2>&1 || ! command -v callgrind_control >/dev/null 2>&1; then
        printf '\n== Issue 42 in instructions: skipped (valgrind not installed; make deps installs it)\n' |
            tee -a "$RESULTS.tmp"
    elif WHEEL_REF=$(ref_cli 319241f "Issue 42 in instructions, before the timing wheel"); then
        echo "run.sh: command: python3 $ROOT/bench/wheel_ir.py $BUILD_DIR $WHEEL_REF" >&2
        run_phase "$RESULTS.wheel" timeout -k 10 600 python3 "$ROOT/bench/wheel_ir.py" "$BUILD_DIR" "$WHEEL_REF"
    fi
fi
if [ $rc -eq 0 ] && [ $RUN_HA -eq 1 ]; then
    # Servers of its own (pinned to core 0), stopped by pid; 300 s at most.
    run_phase "$RESULTS.ha" timeout -k 10 300 python3 "$ROOT/bench/ha.py" "$BUILD_DIR"
fi
if [ $rc -eq 0 ] && [ $RUN_USERS -eq 1 ]; then
    # The CLI as users run it: a server of its own, nothing pinned; 300 s at most.
    run_phase "$RESULTS.users" timeout -k 10 300 python3 "$ROOT/bench/users.py" "$BUILD_DIR"
fi
if [ $rc -eq 0 ] && [ $RUN_OPS -eq 1 ]; then
    # delayq serve on a server of its own, unpinned; 120 s at most.
    run_phase "$RESULTS.ops" timeout -k 10 120 python3 "$ROOT/bench/ops.py" "$BUILD_DIR"
fi
if [ $rc -eq 0 ] && [ $RUN_SHARDS -eq 1 ]; then
    # Clusters of its own (servers pinned to core 0, the CLI to core 1),
    # stopped by pid; 400 s at most.
    run_phase "$RESULTS.shards" timeout -k 10 400 python3 "$ROOT/bench/shards.py" "$BUILD_DIR"
fi
if [ $rc -eq 0 ] && [ $RUN_PEER -eq 1 ]; then
    # BullMQ on a server of its own, A B A B with the CLI; skipped (and
    # said so) where node is missing; 420 s at most.
    run_phase "$RESULTS.peer" timeout -k 10 420 python3 "$ROOT/bench/peer.py" "$BUILD_DIR"
fi
if [ $rc -eq 0 ] && [ $RUN_TLS -eq 1 ]; then
    # One server with a plain and a TLS port (pinned to core 0, the CLI to
    # core 1), stopped by pid; 240 s at most.
    run_phase "$RESULTS.tls" timeout -k 10 240 python3 "$ROOT/bench/tls.py" "$BUILD_DIR"
fi
if [ $rc -eq 0 ] && [ $RUN_HTTP -eq 1 ]; then
    # delayq serve's work verbs on a server of its own, unpinned; 180 s at most.
    run_phase "$RESULTS.http" timeout -k 10 180 python3 "$ROOT/bench/http_api.py" "$BUILD_DIR"
fi
if [ $rc -eq 0 ] && [ $RUN_PYTHON -eq 1 ]; then
    # The Python client on a server of its own, unpinned; Debian's python3
    # (python3-redis lives there); 180 s at most.
    PY3=python3
    [ -x /usr/bin/python3 ] && PY3=/usr/bin/python3
    run_phase "$RESULTS.python" timeout -k 10 180 "$PY3" "$ROOT/bench/python_client.py" "$BUILD_DIR"
fi
if [ $rc -eq 0 ] && [ $RUN_RECUR -eq 1 ]; then
    # A server of its own (pinned to core 0); a few seconds; 120 s at most.
    run_phase "$RESULTS.recur" timeout -k 10 120 python3 "$ROOT/bench/recurring.py" "$BUILD_DIR"
fi
mv "$RESULTS.tmp" "$RESULTS"
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "run.sh: the benchmark did not finish within ${DQ_BENCH_TIMEOUT:-600} s" >&2
elif [ $rc -ne 0 ]; then
    echo "run.sh: the benchmark failed (exit $rc)" >&2
else
    echo "run.sh: results in $RESULTS" >&2
fi
exit $rc
