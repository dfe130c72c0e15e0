/*
 * backoff.c - retrying through errors that persist, and saying so briefly.
 *
 * Redis answers some errors for as long as a condition lasts, not once:
 * OOM (maxmemory under noeviction), MISCONF (a failing RDB or AOF write),
 * NOREPLICAS (min-replicas-to-write), READONLY (a replica), LOADING and BUSY
 * (a long script). Whatever retries on its own (a scheduler's transfers, a
 * waiting take, a worker's takes) keeps a dq__backoff: each failure in a row
 * doubles the wait before the next try, from BASE_S up to CAP_S, times a
 * random factor in [1/2, 1] so that many processes do not retry in step.
 * The cap is what bounds recovery: the first try after the error clears
 * comes within CAP_S.
 *
 * Which errors those are is errors.c's to say (dq__error_persists). The
 * log lines of those errors go through one per-client record of each kind
 * (the error's code word): the first failure of a kind is logged as it is,
 * the next ones are counted and reported in one line at most every
 * WINDOW_S ("... (repeated 412 times in the last 10 s)"), and a success of
 * something that failed with that kind says it cleared. A kind that comes
 * back within WINDOW_S of its last line is counted, not logged again, so a
 * condition that flaps writes a few lines per window, not one per flap.
 * Errors of other kinds are logged one line each, as before.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define BASE_S 0.02   /* the first wait, before jitter          */
#define CAP_S 1.0     /* the longest wait                      */
#define WINDOW_S 10.0 /* at most one repeat line per kind this often */
#define KINDS 8       /* kinds a client keeps track of at once */

typedef struct kind_log {
    char kind[DQ__ERRKIND_MAX]; /* "" when the slot is free            */
    int going;       /* failed since the last success of its kind    */
    int said;        /* a line about this run of failures was written */
    uint64_t count;  /* failures not reported in a line yet          */
    uint64_t total;  /* failures since it began                      */
    double began;    /* ev_now() of the run's first failure          */
    double line_at;  /* ev_now() of the kind's last line            */
} kind_log;

struct dq__errlog {
    kind_log k[KINDS];
};

/* The record of kind, made if new in a free slot, else in the one quiet
 * longest; NULL when out of memory. */
static kind_log *kind_get(dq_client *c, const char *kind) {
    if (!c->errlog && !(c->errlog = calloc(1, sizeof *c->errlog))) return NULL;
    kind_log *k = c->errlog->k, *pick = NULL;
    for (int i = 0; i < KINDS; i++) {
        if (strcmp(k[i].kind, kind) == 0) return &k[i];
        if (!k[i].kind[0]) pick = pick && !pick->kind[0] ? pick : &k[i];
        else if (!k[i].going && (!pick || (pick->kind[0] && k[i].line_at < pick->line_at))) pick = &k[i];
    }
    if (!pick) pick = &k[0];
    memset(pick, 0, sizeof *pick);
    snprintf(pick->kind, sizeof pick->kind, "%s", kind);
    pick->line_at = -WINDOW_S;
    return pick;
}

static void log_line(dq_client *c, const char *error, const char *line) {
    char kind[DQ__ERRKIND_MAX];
    dq__error_code(error, kind);
    kind_log *k = dq__error_persists(error) ? kind_get(c, kind) : NULL;
    if (!k) {
        dq__log(c, "%s", line);
        return;
    }
    double now = ev_now(c->loop);
    if (!k->going) {
        k->going = 1;
        k->said = 0;
        k->total = 0;
        k->began = now;
    }
    k->total++;
    k->count++;
    if (now - k->line_at < WINDOW_S) return; /* counted, said at the next line */
    if (k->count > 1)
        dq__log(c, "%s (repeated %" PRIu64 " times in the last %.0f s)", line, k->count,
                now - k->line_at);
    else dq__log(c, "%s (retrying with backoff while it lasts)", line);
    k->said = 1;
    k->count = 0;
    k->line_at = now;
}

/* log_line with the line fmt and ap make. */
static void log_va(dq_client *c, const char *error, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

static void log_va(dq_client *c, const char *error, const char *fmt, va_list ap) {
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    log_line(c, error, line);
}

void dq__log_error(dq_client *c, const char *error, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_va(c, error, fmt, ap);
    va_end(ap);
}

double dq__backoff_next(dq_client *c, dq__backoff *b, const char *error) {
    dq__error_code(error, b->kind);
    double wait = BASE_S;
    for (int i = 0; i < b->failures && wait < CAP_S; i++) wait *= 2;
    if (wait > CAP_S) wait = CAP_S;
    b->failures++;
    wait *= 0.5 + dq__random_uniform(1001) / 2000.0;
    b->until = ev_now(c->loop) + wait;
    return wait;
}

double dq__backoff_failed(dq_client *c, dq__backoff *b, const char *error, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_va(c, error, fmt, ap);
    va_end(ap);
    return dq__backoff_next(c, b, error);
}

void dq__backoff_ok(dq_client *c, dq__backoff *b) {
    if (!b->failures) return;
    kind_log *k = NULL;
    for (int i = 0; c->errlog && b->kind[0] && i < KINDS; i++)
        if (strcmp(c->errlog->k[i].kind, b->kind) == 0) k = &c->errlog->k[i];
    memset(b, 0, sizeof *b);
    if (!k || !k->going) return;
    double now = ev_now(c->loop);
    k->going = 0;
    if (!k->said) return; /* came back within a window: counted only */
    dq__log(c, "%s errors cleared after %.1f s (%" PRIu64 " failed tries)", k->kind, now - k->began,
            k->total);
    k->count = 0;
    k->line_at = now;
}

void dq__backoff_retry_now(dq__backoff *b) { b->until = 0; }

double dq__backoff_left(const dq_client *c, const dq__backoff *b) {
    double left = b->until - ev_now(c->loop);
    return b->failures && left > 0 ? left : 0;
}

void dq__errlog_free(dq_client *c) {
    free(c->errlog);
    c->errlog = NULL;
}
