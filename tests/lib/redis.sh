# tests/lib/redis.sh - the test suite's private redis-server: start, stop,
# probe. Sourced by tests/run.sh (POSIX sh) and called by tests that restart
# Redis (tests/lib/dqtest.py runs `sh tests/lib/redis.sh stop|start|...`).
#
# The server always listens on 127.0.0.1 only, on a port picked free by the
# harness (never 6379), with its data in DQ_TEST_REDIS_DIR:
#   appendonly yes, appendfsync everysec, save '' (AOF only).
# The pid of the running server is in $DQ_TEST_REDIS_DIR/redis.pid (written by
# redis-server itself), so whoever started it, the harness can stop it.
#
# State (environment):
#   DQ_TEST_REDIS_PORT  the port           DQ_TEST_REDIS_DIR  the data dir
#
# Functions return 0 on success, non-zero with a message on stderr otherwise.

REDIS_SERVER=${REDIS_SERVER:-redis-server}
DQ_TEST_REDIS_PORT=${DQ_TEST_REDIS_PORT:-}
DQ_TEST_REDIS_DIR=${DQ_TEST_REDIS_DIR:-}
REDIS_CLI=${REDIS_CLI:-redis-cli}

# Prints a TCP port that was free on 127.0.0.1 a moment ago (not 6379).
redis_pick_port() {
    python3 -c '
import socket
for _ in range(50):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    if p != 6379:
        print(p)
        break
'
}

# True if something answers PONG on the port.
redis_ping() {
    [ "$("$REDIS_CLI" -h 127.0.0.1 -p "$DQ_TEST_REDIS_PORT" PING 2>/dev/null)" = PONG ]
}

# Prints the pid of our server if it is running (checked against its
# command line, so a stale pid file never leads to killing something else).
redis_pid() {
    _f="$DQ_TEST_REDIS_DIR/redis.pid"
    [ -r "$_f" ] || return 1
    _p=$(cat "$_f" 2>/dev/null)
    case "$_p" in ''|*[!0-9]*) return 1 ;; esac
    [ -r "/proc/$_p/cmdline" ] || return 1
    # "redis-server 127.0.0.1:PORT" once running; its arguments while starting.
    tr '\0' ' ' < "/proc/$_p/cmdline" |
        grep -Eq "redis-server.*(:$DQ_TEST_REDIS_PORT|--port $DQ_TEST_REDIS_PORT) " || return 1
    echo "$_p"
}

# Starts the server on DQ_TEST_REDIS_PORT/DQ_TEST_REDIS_DIR (keeping any AOF
# there) and waits, at most 10 s, until it answers PING.
redis_start() {
    if redis_pid >/dev/null; then
        echo "redis_start: already running (pid $(redis_pid))" >&2
        return 1
    fi
    rm -f "$DQ_TEST_REDIS_DIR/redis.pid"
    # Not daemonized: started in the background with its output in the log;
    # redis-server writes the pid file itself.
    "$REDIS_SERVER" --port "$DQ_TEST_REDIS_PORT" --bind 127.0.0.1 \
        --dir "$DQ_TEST_REDIS_DIR" --daemonize no \
        --pidfile "$DQ_TEST_REDIS_DIR/redis.pid" \
        --logfile "$DQ_TEST_REDIS_DIR/redis.log" \
        --appendonly yes --appendfsync everysec --save '' \
        --databases 16 --protected-mode yes \
        </dev/null >/dev/null 2>&1 &
    _rp=$!
    _i=0
    while [ $_i -lt 100 ]; do
        if redis_ping; then
            return 0
        fi
        if ! kill -0 "$_rp" 2>/dev/null; then
            echo "redis_start: redis-server exited at start (port $DQ_TEST_REDIS_PORT); log tail:" >&2
            tail -n 5 "$DQ_TEST_REDIS_DIR/redis.log" >&2 2>/dev/null
            return 1
        fi
        sleep 0.1
        _i=$((_i + 1))
    done
    echo "redis_start: no PONG within 10 s on port $DQ_TEST_REDIS_PORT" >&2
    kill -KILL "$_rp" 2>/dev/null
    return 1
}

# Stops the server by pid (SIGTERM: with AOF on it fsyncs and exits), waits
# at most 10 s until the process is gone, then SIGKILL. Returns 0 once down;
# 0 as well if it was not running.
redis_stop() {
    _p=$(redis_pid) || return 0
    kill -TERM "$_p" 2>/dev/null
    _i=0
    while [ $_i -lt 100 ]; do
        kill -0 "$_p" 2>/dev/null || break
        # A zombie (our own child, not yet reaped) counts as gone.
        case "$(cut -d' ' -f3 "/proc/$_p/stat" 2>/dev/null)" in Z|'') break ;; esac
        sleep 0.1
        _i=$((_i + 1))
    done
    if kill -0 "$_p" 2>/dev/null && [ "$(cut -d' ' -f3 "/proc/$_p/stat" 2>/dev/null)" != Z ]; then
        echo "redis_stop: pid $_p ignored SIGTERM for 10 s; SIGKILL" >&2
        kill -KILL "$_p" 2>/dev/null
        sleep 0.2
    fi
    rm -f "$DQ_TEST_REDIS_DIR/redis.pid"
    # Down means: nobody answers on the port any more.
    _i=0
    while [ $_i -lt 50 ] && redis_ping; do sleep 0.1; _i=$((_i + 1)); done
    ! redis_ping
}

# Command-line use: sh tests/lib/redis.sh start|stop|pid|ping|pick-port
case "${0##*/}" in
    redis.sh)
        case "${1:-}" in
            start) redis_start ;;
            stop) redis_stop ;;
            pid) redis_pid ;;
            ping) redis_ping ;;
            pick-port) redis_pick_port ;;
            *) echo "usage: sh tests/lib/redis.sh start|stop|pid|ping|pick-port" >&2; exit 2 ;;
        esac
        ;;
esac
