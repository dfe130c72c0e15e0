#!/bin/sh
# demo.sh BUILD_DIR - the annotation demo (seeds/000) on a private redis-server.
#
# A pool of 3 resources, a pool service (annotate_pool serve: a delayq worker
# on queue "annotation-release") and 4 annotators with their own time limits.
# Some finish in time (their release task is cancelled), some fall asleep
# (the delay queue hands the resource back). Half-way, the pool service is
# stopped for 1.5 s and started again, like a deploy: a release that comes due
# meanwhile is not lost, it is caught up at restart.
#
# Prints the merged timeline, then a summary. Exits 0 iff every resource is
# back in the pool, no resource was ever held twice, and every claim ended
# exactly once. Every wait below is bounded; every process is stopped by pid.
set -eu

BUILD=${1:-build}
EX=$BUILD/examples
for b in "$EX/annotate_pool" "$EX/annotator"; do
  [ -x "$b" ] || { echo "demo: $b not built (run make)" >&2; exit 2; }
done
command -v redis-server >/dev/null || { echo "demo: redis-server not installed (make deps)" >&2; exit 2; }
command -v redis-cli >/dev/null || { echo "demo: redis-cli not installed (make deps)" >&2; exit 2; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/delayq-demo.XXXXXX")
LOG=$TMP/log      # one NAME.log (timeline lines) and NAME.err per process
mkdir "$LOG"
REDIS_PID=""
POOL_PID=""
ANNOT_PIDS=""

# True while pid $1 runs (a zombie counts as gone).
alive() {
  st=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

# stop PID [TENTHS]: SIGTERM, wait up to TENTHS/10 s, then SIGKILL.
stop() {
  [ -n "$1" ] || return 0
  kill -TERM "$1" 2>/dev/null || return 0
  n_=0
  while alive "$1" && [ "$n_" -lt "${2:-30}" ]; do sleep 0.1; n_=$((n_ + 1)); done
  alive "$1" && kill -KILL "$1" 2>/dev/null
  return 0
}

# The merged timeline: each process stamps its own lines with the time since
# DEMO_T0_MS, in a fixed-width field, so a plain sort merges them.
timeline() {
  echo
  echo "timeline (seconds since the demo started):"
  LC_ALL=C sort -s -t']' -k1,1 "$LOG"/*.log 2>/dev/null || true
  for e in "$LOG"/*.err; do
    [ -s "$e" ] && { echo "--- stderr of $(basename "$e" .err):"; cat "$e"; }
  done
  REPORTED=1
}
REPORTED=""

# shellcheck disable=SC2317  # called from the trap
cleanup() {
  rc=$?
  trap - EXIT INT TERM
  if [ "$rc" -ne 0 ] && [ -z "$REPORTED" ] && [ -d "$TMP" ]; then
    timeline
    echo "demo: FAILED (exit $rc)"
  fi
  for p in $ANNOT_PIDS $POOL_PID; do stop "$p" 20; done
  stop "$REDIS_PID" 50
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now_ms() { date +%s%3N; }

# note TEXT: a timeline line of the demo script itself.
note() {
  t=$(( $(now_ms) - DEMO_T0_MS ))
  printf '[%3d.%03ds] %-9s %s\n' $((t / 1000)) $((t % 1000)) demo "$*" >>"$LOG/demo.log"
}

# ------------------------------------------------------------ private redis-server
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
    echo $((20000 + $$ % 20000))
}

PORT=""
tries=0
while [ -z "$PORT" ] && [ "$tries" -lt 5 ]; do
  tries=$((tries + 1))
  p=$(free_port)
  [ "$p" = 6379 ] && continue
  redis-server --port "$p" --bind 127.0.0.1 --dir "$TMP" --appendonly yes --save '' \
    --daemonize no --logfile "$TMP/redis.log" >/dev/null 2>&1 &
  REDIS_PID=$!
  i=0
  while [ "$i" -lt 50 ] && alive "$REDIS_PID"; do
    if [ "$(redis-cli -h 127.0.0.1 -p "$p" ping 2>/dev/null)" = PONG ]; then PORT=$p; break; fi
    sleep 0.1; i=$((i + 1))
  done
  if [ -z "$PORT" ]; then stop "$REDIS_PID" 20; REDIS_PID=""; fi
done
if [ -z "$PORT" ]; then
  echo "demo: could not start redis-server on 127.0.0.1" >&2
  [ -f "$TMP/redis.log" ] && tail -5 "$TMP/redis.log" >&2
  exit 3
fi
URL=redis://127.0.0.1:$PORT
echo "demo: private redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$PORT, AOF on, in $TMP"

# ------------------------------------------------------------ the scenario
DEMO_T0_MS=$(now_ms)
export DEMO_T0_MS
N=3
"$EX/annotate_pool" "$URL" seed "$N" >"$LOG/pool.log" 2>"$LOG/pool.err"

# start_pool: runs the pool service, waits (bounded) for "service up".
start_pool() {
  "$EX/annotate_pool" "$URL" serve >>"$LOG/pool.log" 2>>"$LOG/pool.err" &
  POOL_PID=$!
  i=0
  while [ "$i" -lt 50 ]; do
    alive "$POOL_PID" || { echo "demo: the pool service died at start:" >&2; cat "$LOG/pool.err" >&2; exit 3; }
    [ "$(grep -c 'service up' "$LOG/pool.log")" -ge "$1" ] && return 0
    sleep 0.1; i=$((i + 1))
  done
  echo "demo: the pool service did not come up within 5 s" >&2
  exit 3
}
start_pool 1

#                name  limit   work (per round)       rounds
annotator() {
  "$EX/annotator" "$URL" "$1" "$2" "$3" "$4" >"$LOG/$1.log" 2>"$LOG/$1.err" &
  ANNOT_PIDS="$ANNOT_PIDS $!"
}
# bob goes first, so his first release falls due (at 2 s) while the pool
# service is down; dave comes last and has to wait for a resource.
annotator bob   2s     3500ms              2   # falls asleep every time
i=0
while [ "$i" -lt 50 ] && ! grep -q claimed "$LOG/bob.log"; do sleep 0.02; i=$((i + 1)); done
annotator alice 3s     1s                  3   # steady, always in time
annotator carol 1500ms 700ms,1s,600ms      3   # quick, tight limit
sleep 0.05
annotator dave  2500ms 1200ms,4s           2   # in time, then asleep
echo "demo: 4 annotators share $N resources; the pool service restarts at 1.5 s; about 8 s to go..."

# The "deploy": the pool service is down from 1.5 s to 3.0 s.
sleep_until() { # sleep_until MS_SINCE_T0 (bounded by its own arithmetic)
  left=$(( $1 - ($(now_ms) - DEMO_T0_MS) ))
  [ "$left" -gt 0 ] && sleep "$(printf '%d.%03d' $((left / 1000)) $((left % 1000)))"
  return 0
}
sleep_until 1500
note "stopping the pool service (a deploy); release tasks keep waiting in Redis"
stop "$POOL_PID" 50
wait "$POOL_PID" || { echo "demo: the pool service failed when stopped" >&2; exit 3; }
POOL_PID=""
sleep_until 3000
note "starting the pool service again"
start_pool 2

# Wait for the annotators (bounded: 30 s in all), collect their exit codes.
failed=0
left=""   # stragglers, for the cleanup to stop
i=0
for p in $ANNOT_PIDS; do
  while alive "$p" && [ "$i" -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
  if alive "$p"; then
    echo "demo: annotator pid $p still running after 30 s" >&2
    failed=1
    left="$left $p"
  else
    wait "$p" || { echo "demo: annotator pid $p exited with $?" >&2; failed=1; }
  fi
done
ANNOT_PIDS=$left

# The check runs while the pool service still serves the queue: it waits
# (at most 5 s) for every fired release to be handled.
note "all annotators are done; checking the pool and the queue"
check_rc=0
"$EX/annotate_pool" "$URL" check "$N" >"$TMP/check.out" 2>"$LOG/check.err" || check_rc=$?
stop "$POOL_PID" 50
wait "$POOL_PID" || failed=1
POOL_PID=""

# ------------------------------------------------------------ report
timeline
echo
cat "$TMP/check.out"
if [ -x "$BUILD/delayq" ]; then
  echo "delayq stats annotation-release: $("$BUILD/delayq" --redis "$URL" stats annotation-release 2>&1 | tr '\n' ' ')"
fi
if [ "$check_rc" -ne 0 ] || [ "$failed" -ne 0 ]; then
  echo "demo: FAILED (check exit $check_rc)"
  exit 1
fi
echo "demo: OK"
exit 0
