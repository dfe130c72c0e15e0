#!/bin/sh
# demo.sh BUILD_DIR - the annotation demo (seeds/000) on a private redis-server.
#
# The pool of 3 resources IS the delayq queue "annotation-pool": a free
# resource is a ready item. 5 annotators (examples/annotator.c) share it, each
# with its own time limit. A claim is a reliable take whose lease is the
# task's time limit; finishing is a release (the resource goes straight
# back, and the claim counts as no attempt); running over the limit needs no
# release task at all: the lease runs out and a scheduler (every annotator
# runs one) returns the resource. Who comes back too late finds the release
# refused: the work is discarded.
#
#   erin   is killed with SIGKILL mid-task: her resource comes back when her
#          lease ends, with nobody left to release it.
#   bob    falls asleep every time: his resource is returned and re-claimed
#          while he sleeps; his late release is refused.
#   alice  is steady and always in time.
#   carol  has a long second task and asks for more time (dq_extend).
#   dave   comes last and waits for a free resource.
# At 2.5 s the pool is seeded again, like a re-run deploy job: every resource
# is still in the queue exactly once (an id is never queued twice).
#
# Prints the merged timeline (Redis server time where there is one), then a
# summary. Exits 0 iff every invariant holds (see annotate_pool check). Every
# wait below is bounded; every process is stopped by pid.
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
ANNOT_PIDS=""     # annotators still to wait for or stop
ERIN_PID=""

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
# DEMO_T0_MS, in a fixed-width field, so sorting on it merges them. Within one
# millisecond a claim goes after whatever freed the resource.
timeline() {
  echo
  echo "timeline (seconds since the demo started; Redis server time where there is one):"
  cat "$LOG"/*.log 2>/dev/null |
    LC_ALL=C awk '{ print substr($0, 1, 10) "\t" (index($0, " claimed ") ? 1 : 0) "\t" $0 }' |
    LC_ALL=C sort -s -t"$(printf '\t')" -k1,1 -k2,2n | cut -f3- || true
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
  for p in $ANNOT_PIDS $ERIN_PID; do stop "$p" 20; done
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

# wait_for FILE TEXT: until FILE contains TEXT, at most 5 s.
wait_for() {
  i_=0
  while [ "$i_" -lt 250 ] && ! grep -q "$2" "$1" 2>/dev/null; do sleep 0.02; i_=$((i_ + 1)); done
  grep -q "$2" "$1" 2>/dev/null || { echo "demo: no '$2' in $(basename "$1") within 5 s" >&2; exit 3; }
}

# sleep_until MS_SINCE_T0
sleep_until() {
  left=$(( $1 - ($(now_ms) - DEMO_T0_MS) ))
  [ "$left" -gt 0 ] && sleep "$(printf '%d.%03d' $((left / 1000)) $((left % 1000)))"
  return 0
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
"$EX/annotate_pool" "$URL" seed "$N" --fresh >"$LOG/pool.log" 2>"$LOG/pool.err"

# annotator NAME LIMIT WORK[,WORK...] ROUNDS [EXTEND]: starts one; its pid is $!.
annotator() {
  "$EX/annotator" "$URL" "$@" >"$LOG/$1.log" 2>"$LOG/$1.err" &
}

echo "demo: 5 annotators share $N resources; erin gets killed; about 8 s to go..."
#          name  limit   work            rounds  extend
annotator  erin  2s      6s              1       # SIGKILLed mid-task
ERIN_PID=$!
wait_for "$LOG/erin.log" claimed
annotator  bob   1500ms  3s              2       # falls asleep every time
ANNOT_PIDS="$ANNOT_PIDS $!"
wait_for "$LOG/bob.log" claimed
annotator  alice 3s      1s              3       # steady, always in time
ANNOT_PIDS="$ANNOT_PIDS $!"
wait_for "$LOG/alice.log" claimed
annotator  carol 2s      1200ms,2500ms   2  2s   # long 2nd task: asks for 2s more
ANNOT_PIDS="$ANNOT_PIDS $!"
annotator  dave  2500ms  800ms           3       # has to wait for a resource
ANNOT_PIDS="$ANNOT_PIDS $!"

# erin crashes 0.7 s into her task: nobody will ever release her resource.
sleep 0.7
note "kill -KILL erin (pid $ERIN_PID) in the middle of her task"
kill -KILL "$ERIN_PID"
wait "$ERIN_PID" 2>/dev/null || true
ERIN_PID=""
# Each take names its annotator as the holder: lookup shows it while the
# lease lasts (erin's too: her lease has not ended yet).
held=""
for r in r1 r2 r3; do
  h=$("$BUILD/delayq" --redis "$URL" lookup annotation-pool "$r" 2>/dev/null | sed -n 's/^holder //p')
  held="$held $r ${h:-free},"
done
note "delayq lookup: who holds what:${held%,}"

# A re-run of the seeding job while resources are claimed: nothing doubles.
sleep_until 2500
"$EX/annotate_pool" "$URL" seed "$N" >>"$LOG/pool.log" 2>>"$LOG/pool.err" ||
  { echo "demo: the second seeding failed" >&2; exit 3; }

# Wait for the annotators (bounded: 20 s in all), collect their exit codes.
failed=0
left=""   # stragglers, for the cleanup to stop
i=0
for p in $ANNOT_PIDS; do
  while alive "$p" && [ "$i" -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
  if alive "$p"; then
    echo "demo: annotator pid $p still running after 20 s" >&2
    failed=1
    left="$left $p"
  else
    wait "$p" || { echo "demo: annotator pid $p exited with $?" >&2; failed=1; }
  fi
done
ANNOT_PIDS=$left

# The check runs a scheduler for the pool until every resource is back (at
# most 8 s), then checks the queue and the ledger. 1 claim (erin's) never ended.
note "all annotators are done; checking the pool"
check_rc=0
"$EX/annotate_pool" "$URL" check "$N" 1 >"$TMP/check.out" 2>"$LOG/check.err" || check_rc=$?
grep '^\[' "$TMP/check.out" >"$LOG/check.log" || true

# ------------------------------------------------------------ report
timeline
echo
grep -v '^\[' "$TMP/check.out" || true
if [ -x "$BUILD/delayq" ]; then
  echo "delayq stats annotation-pool: $("$BUILD/delayq" --redis "$URL" stats annotation-pool 2>&1 | tr '\n' ' ')"
fi
if [ "$check_rc" -ne 0 ] || [ "$failed" -ne 0 ]; then
  echo "demo: FAILED (check exit $check_rc)"
  exit 1
fi
echo "demo: OK"
exit 0
