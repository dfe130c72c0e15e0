/*
 * core.c - what every layer of the library shares: the failure message
 * kept on the handle, the log callback, the keys of a queue, the estimate
 * of the server's clock, and reading integers and strings from replies. It
 * calls nothing above it.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int dq__fail(dq_client *c, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errstr, sizeof c->errstr, fmt, ap);
    va_end(ap);
    return code;
}

const char *dq_client_errstr(const dq_client *c) { return c ? c->errstr : ""; }
enum dq_refusal dq_client_refusal(const dq_client *c) { return dq__refusal_class(c ? c->errstr : NULL); }

void dq_set_log(dq_client *c, dq_log_fn *fn, void *privdata) {
    c->log_fn = fn;
    c->log_privdata = privdata;
}

void dq__log(dq_client *c, const char *fmt, ...) {
    if (!c->log_fn) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    c->log_fn(c->log_privdata, line);
}

void dq_set_on_refused(dq_client *c, dq_refused_fn *fn, void *privdata) {
    c->refused_fn = fn;
    c->refused_privdata = privdata;
}

void dq__refused(dq_client *c, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (c->log_fn) c->log_fn(c->log_privdata, line);
    if (c->refused_fn) c->refused_fn(c->refused_privdata, line);
}

void dq__keys_init(dq__keys *k, const char *queue) {
    dq__key(k->z, sizeof k->z, queue, "zs");
    dq__key(k->ready, sizeof k->ready, queue, "r");
    dq__key(k->aside, sizeof k->aside, queue, "x");
    dq__key(k->prefix, sizeof k->prefix, queue, "");
    dq__key(k->chan, sizeof k->chan, queue, "w");
    dq__key(k->counters, sizeof k->counters, queue, "n");
    dq__key(k->dead, sizeof k->dead, queue, "d");
    dq__key(k->dead_times, sizeof k->dead_times, queue, "dz");
    dq__key(k->signal, sizeof k->signal, queue, "s");
    dq__key(k->config, sizeof k->config, queue, "cfg");
}

const dq__keys *dq__keys_of(dq_client *c, const char *queue) {
    if (strcmp(c->keys_queue, queue) != 0) {
        dq__keys_init(&c->keys_cache, queue);
        snprintf(c->keys_queue, sizeof c->keys_queue, "%s", queue);
    }
    return &c->keys_cache;
}

/* ------------------------------------------------------------ server clock */

/* A sample taken over a short round trip pins the offset best: keep the
 * tightest recent one, and let a sample replace it after 10 s whatever its
 * round trip, so drift between the clocks is followed. */
void dq__clock_sample(dq_client *c, double sent, double received, int64_t server_us) {
    int64_t rtt = (int64_t)((received - sent) * 1e6);
    if (rtt < 0) rtt = 0;
    double now = received;
    int stale = now - c->clock_sampled_at > 10.0;
    if (rtt <= c->clock_best_rtt_us || stale) {
        double mid = (sent + received) / 2.0;
        c->clock_offset_us = server_us - (int64_t)llround(mid * 1e6);
        c->clock_best_rtt_us = rtt;
        c->clock_sampled_at = now;
    }
}

double dq__clock_until(const dq_client *c, int64_t server_ms) {
    double local_target = ((double)server_ms * 1000.0 - (double)c->clock_offset_us) / 1e6;
    return local_target - ev_time();
}

int64_t dq__reply_int(const redisReply *r) {
    if (!r) return 0;
    if (r->type == REDIS_REPLY_INTEGER) return r->integer;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) return strtoll(r->str, NULL, 10);
    return 0;
}

char *dq__reply_dup(const redisReply *r) {
    char *s = malloc(r->len + 1);
    if (s) {
        memcpy(s, r->str, r->len);
        s[r->len] = '\0';
    }
    return s;
}
