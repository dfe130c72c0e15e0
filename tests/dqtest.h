/*
 * dqtest.h - helpers for the cmocka integration tests in tests/integration.
 *
 * The tests talk to the private redis-server that tests/run.sh starts: its
 * URL is in $DQ_TEST_REDIS (redis://127.0.0.1:PORT). Every helper here is
 * static inline (each test binary uses a different subset), bounded in time,
 * and frees what it allocates, so the valgrind run sees no leaks of ours.
 * $DQ_TEST_SLOW (1, or 5 under valgrind) scales the upper time bounds.
 */
#ifndef DQ_TEST_H
#define DQ_TEST_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>
#include <ev.h>
#include <hiredis/hiredis.h>

#include "delayq.h"

/* The suite's Redis URL; fails the test when it is not set. */
static inline const char *dqt_url(void) {
    const char *u = getenv("DQ_TEST_REDIS");
    if (!u || !*u) {
        print_error("DQ_TEST_REDIS is not set: run the tests through tests/run.sh\n");
        fail();
    }
    return u;
}

/* The port of $DQ_TEST_REDIS. */
static inline int dqt_port(void) {
    const char *u = dqt_url();
    const char *colon = strrchr(u, ':');
    assert_non_null(colon);
    int port = atoi(colon + 1);
    assert_true(port > 0 && port < 65536);
    return port;
}

/* 1 normally, larger when the tests run under a slow wrapper (valgrind). */
static inline int dqt_slow(void) {
    const char *s = getenv("DQ_TEST_SLOW");
    int v = s ? atoi(s) : 1;
    return v > 0 ? v : 1;
}

/* Monotonic milliseconds, for elapsed times. */
static inline int64_t dqt_mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A queue name unique to this process and call: "t<pid>.<tag>.<n>". */
static inline void dqt_queue(char *buf, size_t size, const char *tag) {
    static unsigned counter;
    int n = snprintf(buf, size, "t%ld.%s.%u", (long)getpid(), tag, ++counter);
    assert_true(n > 0 && (size_t)n < size);
}

/* A new client connected to the suite's Redis; opts may be NULL. */
static inline dq_client *dqt_client(const dq_options *opts) {
    dq_client *c = dq_client_new(NULL, opts);
    assert_non_null(c);
    int rc = dq_connect(c, dqt_url());
    if (rc != 0)
        print_error("dq_connect(%s): %s: %s\n", dqt_url(), dq_strerror(rc), dq_client_errstr(c));
    assert_int_equal(rc, 0);
    return c;
}

/* Asserts that expr (a call on client c) returns want; on a mismatch prints
 * the call, both codes and the client's last error first. */
#define DQT_EXPECT(c, expr, want)                                                                    \
    do {                                                                                             \
        long long dqt_got_ = (long long)(expr);                                                      \
        long long dqt_want_ = (long long)(want);                                                     \
        if (dqt_got_ != dqt_want_)                                                                   \
            print_error("%s:%d: %s = %lld (%s), want %lld; errstr: %s\n", __FILE__, __LINE__, #expr, \
                        dqt_got_, dq_strerror((int)dqt_got_), dqt_want_, dq_client_errstr(c));       \
        assert_int_equal(dqt_got_, dqt_want_);                                                       \
    } while (0)

/* ------------------------------------------------------------ running the loop */

typedef struct dqt_guard {
    ev_timer timer;
    dq_client *c;
    int fired;
} dqt_guard;

static inline void dqt_guard_cb(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop;
    (void)revents;
    dqt_guard *g = w->data;
    g->fired = 1;
    dq_stop(g->c);
}

/* Runs c's loop (dq_run) until a callback calls dq_stop(c), or secs (scaled
 * by dqt_slow) have passed. Returns 1 if the time ran out, else 0. */
static inline int dqt_run_until_stopped(dq_client *c, double secs) {
    dqt_guard g;
    memset(&g, 0, sizeof g);
    g.c = c;
    ev_timer_init(&g.timer, dqt_guard_cb, secs * dqt_slow(), 0);
    g.timer.data = &g;
    ev_timer_start(dq_client_loop(c), &g.timer);
    dq_run(c);
    ev_timer_stop(dq_client_loop(c), &g.timer);
    return g.fired;
}

/* Runs c's loop for secs (not scaled), whatever happens. */
static inline void dqt_run_for(dq_client *c, double secs) {
    dqt_guard g;
    memset(&g, 0, sizeof g);
    g.c = c;
    ev_timer_init(&g.timer, dqt_guard_cb, secs, 0);
    g.timer.data = &g;
    ev_timer_start(dq_client_loop(c), &g.timer);
    /* dq_run returns early when a callback calls dq_stop: run it again until
     * our timer fires (bounded by the clock too, should the loop misbehave). */
    int64_t end = dqt_mono_ms() + (int64_t)(secs * 1000) + 2000 * dqt_slow();
    while (!g.fired && dqt_mono_ms() < end) dq_run(c);
    ev_timer_stop(dq_client_loop(c), &g.timer);
    assert_true(g.fired);
}

/* Runs c's loop in short slices until its schedulers have moved at least
 * want items (a transfer's reply may come after the item was taken on
 * another connection), or secs (scaled) have passed. Returns moved. */
static inline uint64_t dqt_wait_moved(dq_client *c, uint64_t want, double secs) {
    dq_sched_counters sc;
    int64_t end = dqt_mono_ms() + (int64_t)(secs * 1000 * dqt_slow());
    for (;;) {
        dq_get_sched_counters(c, &sc);
        if (sc.moved >= want || dqt_mono_ms() >= end) return sc.moved;
        dqt_run_for(c, 0.01);
    }
}

/* ------------------------------------------------------------ raw Redis */

/* Runs one command on a fresh hiredis connection (hiredis format, e.g.
 * "SET %s %b"); returns the reply (free with freeReplyObject) and fails the
 * test on a connection error. */
static inline redisReply *dqt_redis(const char *fmt, ...) {
    struct timeval tv = {5, 0};
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", dqt_port(), tv);
    assert_non_null(rc);
    if (rc->err) {
        print_error("redis connect: %s\n", rc->errstr);
        redisFree(rc);
        fail();
    }
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    if (!r) print_error("redis command: %s\n", rc->errstr);
    redisFree(rc);
    assert_non_null(r);
    return r;
}

/* Runs a command whose reply is an integer and returns it. */
static inline long long dqt_redis_int(const char *fmt, ...) {
    struct timeval tv = {5, 0};
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", dqt_port(), tv);
    assert_non_null(rc);
    assert_int_equal(rc->err, 0);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    redisFree(rc);
    assert_non_null(r);
    if (r->type != REDIS_REPLY_INTEGER)
        print_error("expected an integer reply, got type %d (%s)\n", r->type,
                    r->type == REDIS_REPLY_ERROR ? r->str : "");
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* connected_clients of INFO clients (this helper's own connection included). */
static inline long long dqt_clients(void) {
    redisReply *r = dqt_redis("INFO clients");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    const char *p = strstr(r->str, "connected_clients:");
    assert_non_null(p);
    long long n = atoll(p + strlen("connected_clients:"));
    freeReplyObject(r);
    return n;
}

/* The Redis server's clock in epoch ms (what due_ms and ready_ms use). */
static inline int64_t dqt_server_ms(void) {
    redisReply *r = dqt_redis("TIME");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    int64_t ms =
        strtoll(r->element[0]->str, NULL, 10) * 1000 + strtoll(r->element[1]->str, NULL, 10) / 1000;
    freeReplyObject(r);
    return ms;
}

/* A TCP socket bound to a free 127.0.0.1 port; *port gets the port. */
static inline int dqt_loopback_socket(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

/* A 127.0.0.1 TCP port nobody listens on (bound and released just now). */
static inline int dqt_closed_port(void) {
    int port;
    close(dqt_loopback_socket(&port));
    return port;
}

/* Prints a message's fields (for failure diagnostics). */
static inline void dqt_print_msg(const char *what, const dq_msg *m) {
    if (!m) {
        print_message("%s: (no message)\n", what);
        return;
    }
    print_message("%s: queue %s id %.*s payload %zu bytes due %lld ready %lld\n", what, m->queue,
                  (int)m->id_len, m->id, m->payload_len, (long long)m->due_ms, (long long)m->ready_ms);
}

#endif
