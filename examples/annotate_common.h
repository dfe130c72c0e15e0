/*
 * annotate_common.h - code shared by the two programs of the annotation demo
 * (seeds/000): annotate_pool.c and annotator.c.
 *
 *   timeline  wall_ms, init_t0, say_at, fmt_dur, fmt_at
 *   ledger    struct claim, claim_format, claim_parse (see annotator.c)
 *   Redis     app_connect, must, server_ms (plain hiredis, for the ledger)
 *   delayq    idle: waits while running a client's loop (and its scheduler)
 *
 * Everything is static inline: each program compiles its own copy of what
 * it uses, and what it does not use costs nothing (and is no warning).
 *
 * Before printing anything, main sets the two names used in the output:
 *   tl_who   the second column of its timeline lines ("pool", or the
 *            annotator's name);
 *   err_who  the start of must()'s error messages ("annotate_pool", or
 *            "annotator NAME").
 * app_connect runs before main knows much else, and takes its own.
 */
#ifndef ANNOTATE_COMMON_H
#define ANNOTATE_COMMON_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ev.h>
#include <hiredis/hiredis.h>

#include "delayq.h"

/* ------------------------------------------------------------------ timeline */

static int64_t t0_ms;            /* the timeline's zero, epoch ms (init_t0) */
static const char *tl_who = "";  /* who a timeline line is from            */
static char err_who[64] = "";    /* who an error message is from           */

static inline int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* t0_ms: $DEMO_T0_MS (epoch ms) if set, else now. */
static inline void init_t0(void) {
    const char *s = getenv("DEMO_T0_MS");
    char *end = NULL;
    long long v = s ? strtoll(s, &end, 10) : 0;
    t0_ms = (s && end && *end == '\0' && v > 0) ? (int64_t)v : wall_ms();
}

/* One timeline line "[  2.503s] WHO       text", stamped at epoch ms `at`
 * (the Redis server's clock where we have it: same host, same clock); WHO
 * is tl_who. */
__attribute__((format(printf, 2, 3))) static inline void say_at(int64_t at, const char *fmt, ...) {
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    printf("[%7.3fs] %-9s %s\n", (double)(at - t0_ms) / 1000.0, tl_who, text);
    fflush(stdout);
}

/* "2.0s", or "450ms" below a second. */
static inline const char *fmt_dur(char *buf, size_t len, int64_t ms) {
    if (ms < 1000 && ms > -1000) snprintf(buf, len, "%lldms", (long long)ms);
    else snprintf(buf, len, "%.1fs", (double)ms / 1000.0);
    return buf;
}

/* A point in time on the timeline: "3.105s". */
static inline const char *fmt_at(char *buf, size_t len, int64_t at) {
    snprintf(buf, len, "%.3fs", (double)(at - t0_ms) / 1000.0);
    return buf;
}

/* ------------------------------------------------------------------ the ledger (see annotator.c) */

struct claim {
    char res[DQ_ID_MAX + 1];
    char who[40];
    int nclaim;             /* this claim's number among the resource's
                               (the ledger counts them: a release counts
                               no attempt in delayq)                       */
    int64_t take_ms;        /* server ms of the take                        */
    int64_t lease_end;      /* server ms; moves with dq_extend              */
    int64_t limit, work;    /* ms                                           */
    char plan[16];          /* "intime", "extend" or "overrun"              */
    int64_t ready_ms;       /* when the resource became free for this claim */
    int64_t rel_start;      /* server ms just before the release, 0 before  */
    int64_t end_ms;         /* server ms just after it, 0 before            */
    char outcome[16];       /* "held", "releasing", "released", "refused"   */
};

static inline void claim_format(const struct claim *k, char *buf, size_t len) {
    snprintf(buf, len, "%s %s %d %lld %lld %lld %lld %s %lld %lld %lld %s", k->res, k->who, k->nclaim,
             (long long)k->take_ms, (long long)k->lease_end, (long long)k->limit, (long long)k->work,
             k->plan, (long long)k->ready_ms, (long long)k->rel_start, (long long)k->end_ms, k->outcome);
}

static inline int claim_parse(const char *text, struct claim *k) {
    long long v[7];
    memset(k, 0, sizeof *k);
    int n = sscanf(text, "%128s %39s %d %lld %lld %lld %lld %15s %lld %lld %lld %15s", k->res, k->who,
                   &k->nclaim, &v[0], &v[1], &v[2], &v[3], k->plan, &v[4], &v[5], &v[6], k->outcome);
    k->take_ms = v[0], k->lease_end = v[1], k->limit = v[2], k->work = v[3];
    k->ready_ms = v[4], k->rel_start = v[5], k->end_ms = v[6];
    return n == 12 ? 0 : -1;
}

/* ------------------------------------------------------------------ plain hiredis */

/* A hiredis connection to url (redis://HOST:PORT), or NULL and a message
 * starting with prog. */
static inline redisContext *app_connect(const char *url, const char *prog) {
    char host[256];
    int port = 6379;
    const char *p = url;
    if (strncmp(p, "redis://", 8) == 0) p += 8;
    size_t n = strcspn(p, ":/");
    if (n == 0 || n >= sizeof host) {
        fprintf(stderr, "%s: bad URL '%s' (want redis://HOST:PORT)\n", prog, url);
        return NULL;
    }
    memcpy(host, p, n);
    host[n] = '\0';
    if (p[n] == ':') port = atoi(p + n + 1);
    redisContext *r = redisConnectWithTimeout(host, port, (struct timeval){2, 0});
    if (r == NULL || r->err) {
        fprintf(stderr, "%s: cannot connect to %s: %s\n", prog, url, r ? r->errstr : "out of memory");
        redisFree(r);
        return NULL;
    }
    redisSetTimeout(r, (struct timeval){5, 0});
    return r;
}

/* The reply of a command that must succeed; NULL (and a message starting
 * with err_who) if not. */
static inline redisReply *must(redisContext *r, redisReply *reply, const char *what) {
    if (reply == NULL) {
        fprintf(stderr, "%s: %s: %s\n", err_who, what, r->errstr);
        return NULL;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "%s: %s: %s\n", err_who, what, reply->str);
        freeReplyObject(reply);
        return NULL;
    }
    return reply;
}

/* The Redis server's clock in ms, or -1. */
static inline int64_t server_ms(redisContext *r) {
    redisReply *rep = must(r, redisCommand(r, "TIME"), "TIME");
    if (!rep) return -1;
    int64_t ms = -1;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2)
        ms = atoll(rep->element[0]->str) * 1000 + atoll(rep->element[1]->str) / 1000;
    freeReplyObject(rep);
    return ms;
}

/* ------------------------------------------------------------------ delayq */

static inline void on_idle_timer(struct ev_loop *loop, ev_timer *t, int revents) {
    (void)loop;
    (void)revents;
    dq_stop(t->data);
}

/* Waits ms while running the client's loop, so that this process's
 * scheduler for the pool keeps working: it is one of the processes that
 * return resources whose lease ran out. (A plain sleep would do for the
 * waiting itself, but the scheduler would sleep too.) */
static inline void idle(dq_client *c, int64_t ms) {
    struct ev_loop *loop = dq_client_loop(c);
    ev_timer t;
    ev_now_update(loop);
    ev_timer_init(&t, on_idle_timer, (double)ms / 1000.0, 0);
    t.data = c;
    ev_timer_start(loop, &t);
    dq_run(c);
    ev_timer_stop(loop, &t);
}

#endif /* ANNOTATE_COMMON_H */
