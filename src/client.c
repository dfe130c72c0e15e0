/*
 * client.c - the dq_client handle: options, connecting, running and stopping
 * the loop, the server-clock estimate, the pool of blocking connections, and
 * the error message kept on the handle.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void dq_options_init(dq_options *o) {
    memset(o, 0, sizeof *o);
    o->connect_timeout_ms = 2000;
    o->command_timeout_ms = 5000;
    o->safety_check_ms = 5000;
    o->reconnect_max_ms = 1000;
    o->max_payload = DQ_PAYLOAD_DEFAULT_MAX;
    o->transfer_batch = 1000;
    o->transfer_budget_us = 2000;
    o->backoff_base_ms = -1; /* the queue's policy */
    o->backoff_max_ms = -1;
}

static int options_valid(const dq_options *o) {
    return o->connect_timeout_ms > 0 && o->command_timeout_ms >= 0 && o->safety_check_ms >= 10 &&
           o->reconnect_max_ms >= 20 && o->max_payload <= DQ_PAYLOAD_HARD_MAX &&
           o->transfer_batch >= 1 && o->transfer_batch <= 100000 && o->transfer_budget_us >= 100 &&
           o->backoff_base_ms >= -1 && o->backoff_max_ms >= -1 &&
           (o->backoff_base_ms < 0) == (o->backoff_max_ms < 0) &&
           o->backoff_max_ms >= o->backoff_base_ms && o->backoff_max_ms <= DQ_DUE_MAX_MS;
}

dq_client *dq_client_new(struct ev_loop *loop, const dq_options *opts) {
    dq_options def;
    if (!opts) {
        dq_options_init(&def);
        opts = &def;
    }
    if (!options_valid(opts) || dq__crypto_init() != 0) return NULL;
    dq_client *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->opt = *opts;
    c->loop = loop;
    if (!c->loop) {
        c->loop = ev_loop_new(EVFLAG_AUTO);
        c->own_loop = 1;
    }
    c->cmd = dq__conn_new(c, DQ__CONN_CMD);
    if (!c->loop || !c->cmd) {
        dq_client_free(c);
        return NULL;
    }
    c->clock_best_rtt_us = INT64_MAX;
    ev_timer_init(&c->reaper, NULL, 0, 0);
    ev_prepare_init(&c->offers_flush, NULL);
    return c;
}

int dq__fail(dq_client *c, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errstr, sizeof c->errstr, fmt, ap);
    va_end(ap);
    return code;
}

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

const char *dq_client_errstr(const dq_client *c) { return c ? c->errstr : ""; }
struct ev_loop *dq_client_loop(const dq_client *c) { return c->loop; }

static void on_cmd_up(dq__conn *conn, void *privdata) {
    (void)privdata;
    dq_client *c = conn->client;
    if (conn->ups > 1) c->counters.reconnects++;
    c->connected_once = 1;
    dq__sched_on_cmd_up(c);
}

int dq_connect(dq_client *c, const char *url) {
    char err[200];
    if (c->connected_once || c->cmd->state != DQ__DOWN)
        return dq__fail(c, DQ_EINVAL, "dq_connect: already connected");
    if (!url || dq__url_parse(url, &c->url, err, sizeof err) != 0)
        return dq__fail(c, DQ_EINVAL, "invalid Redis URL: %s", err); /* never echo a password */
    /* Messages name the URL by its masked text, which the parser made from
     * the whole URL before any cut: no password byte can reach them. */
    snprintf(c->url_text, sizeof c->url_text, "%s", c->url.masked);
    c->cmd->on_up = on_cmd_up;
    c->cmd->auto_reconnect = 0;
    dq__conn_start(c->cmd);
    while (c->cmd->state != DQ__UP && !(c->cmd->state == DQ__DOWN && c->cmd->last_code))
        ev_run(c->loop, EVRUN_ONCE);
    if (c->cmd->state != DQ__UP) {
        int code = c->cmd->last_code;
        return dq__fail(c, code, "%s", c->cmd->errstr);
    }
    c->cmd->auto_reconnect = 1;
    return 0;
}

void dq__wait(dq_client *c, const int *done) {
    /* A synchronous caller has nothing more to gather: send now, and write
     * the socket now rather than on the loop's next writable event (one
     * poll and two epoll_ctl calls fewer per round trip). */
    dq__offers_flush(c);
    dq__conn_write_now(c->cmd);
    while (!*done) ev_run(c->loop, EVRUN_ONCE);
}

int dq_run(dq_client *c) {
    c->stop = 0;
    while (!c->stop) {
        if (!ev_run(c->loop, EVRUN_ONCE)) break;
    }
    return 0;
}

void dq_stop(dq_client *c) {
    c->stop = 1;
    ev_break(c->loop, EVBREAK_ONE);
}

/* Lets commands already sent (acks, nacks, offers) reach Redis and be
 * answered, for up to command_timeout_ms, so freeing right after
 * dq_worker_done does not drop its ack. */
static void drain(dq_client *c) {
    if (!c->cmd || c->cmd->state != DQ__UP || !c->cmd->head) return;
    ev_now_update(c->loop);
    double end = ev_now(c->loop) + (c->opt.command_timeout_ms ? c->opt.command_timeout_ms : 5000) / 1000.0;
    while (c->cmd->head && c->cmd->state == DQ__UP && ev_now(c->loop) < end) ev_run(c->loop, EVRUN_ONCE);
}

void dq_client_free(dq_client *c) {
    if (!c) return;
    dq__worker_free_all(c);
    dq__take_free_all(c);
    dq__sched_free_all(c);
    dq__offers_flush(c);
    if (c->loop) ev_prepare_stop(c->loop, &c->offers_flush);
    drain(c);
    while (c->idle_blocking) {
        dq__conn *b = c->idle_blocking;
        c->idle_blocking = b->next_in_pool;
        dq__conn_free(b);
    }
    dq__conn_free(c->sub);
    dq__conn_free(c->cmd);
    dq__reap_retired(c);
    if (c->own_loop && c->loop) ev_loop_destroy(c->loop);
    free(c);
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

/* ------------------------------------------------------------ blocking pool */

dq__conn *dq__blocking_acquire(dq_client *c) {
    dq__conn *b = c->idle_blocking;
    if (b) {
        c->idle_blocking = b->next_in_pool;
        b->next_in_pool = NULL;
        return b;
    }
    b = dq__conn_new(c, DQ__CONN_BLOCKING);
    if (!b) return NULL;
    b->auto_reconnect = 1;
    dq__conn_start(b);
    return b;
}

void dq__blocking_release(dq_client *c, dq__conn *b) {
    b->on_up = b->on_down = NULL;
    b->event_privdata = NULL;
    b->next_in_pool = c->idle_blocking;
    c->idle_blocking = b;
}

int64_t dq__reply_int(const redisReply *r) {
    if (!r) return 0;
    if (r->type == REDIS_REPLY_INTEGER) return r->integer;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) return strtoll(r->str, NULL, 10);
    return 0;
}
