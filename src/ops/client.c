/*
 * client.c - the dq_client handle's life: options, connecting, running and
 * stopping the loop, and freeing everything the client runs. The top of
 * the library: it calls down into the operations and the router, and
 * nothing calls up into it.
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
    o->wait_replicas = 0;
    o->wait_timeout_ms = 1000;
    o->consumer_beat_ms = 15000;
}

static int options_valid(const dq_options *o) {
    return o->connect_timeout_ms > 0 && o->command_timeout_ms >= 0 && o->safety_check_ms >= 10 &&
           o->reconnect_max_ms >= 20 && o->max_payload <= DQ_PAYLOAD_HARD_MAX &&
           o->transfer_batch >= 1 && o->transfer_batch <= 100000 && o->transfer_budget_us >= 100 &&
           o->backoff_base_ms >= -1 && o->backoff_max_ms >= -1 &&
           (o->backoff_base_ms < 0) == (o->backoff_max_ms < 0) &&
           o->backoff_max_ms >= o->backoff_base_ms && o->backoff_max_ms <= DQ_DUE_MAX_MS &&
           o->wait_replicas >= DQ_WAIT_ALL && o->wait_timeout_ms >= 0 && o->consumer_beat_ms >= 100;
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
    if (!c->loop) {
        dq_client_free(c);
        return NULL;
    }
    c->clock_best_rtt_us = INT64_MAX;
    ev_timer_init(&c->reaper, NULL, 0, 0);
    ev_prepare_init(&c->offers_flush, NULL);
    return c;
}

struct ev_loop *dq_client_loop(const dq_client *c) { return c->loop; }

/* Copies one password of the options over the URL's into field (size
 * bytes). what names it in messages. */
static int take_password(dq_client *c, const char *pw, char *field, size_t size, const char *what) {
    size_t n = strlen(pw);
    if (n == 0) return dq__fail(c, DQ_EINVAL, "the %s is empty", what);
    if (n >= size) return dq__fail(c, DQ_EINVAL, "the %s is longer than %zu bytes", what, size - 1);
    memcpy(field, pw, n + 1);
    return 0;
}

/* dq_options.password and sentinel_password over the URL's. The caller's
 * strings are not kept: the client's copies live in c->url, which
 * dq_client_free wipes. */
static int take_passwords(dq_client *c, const char *pw, const char *spw) {
    int rc = 0;
    if (pw) rc = take_password(c, pw, c->url.password, sizeof c->url.password, "password");
    if (!rc && spw && c->url.topology != DQ__TOPO_SENTINEL)
        rc = dq__fail(c, DQ_EINVAL,
                      "a sentinel password is given, but the URL is not "
                      "redis-sentinel://");
    if (!rc && spw)
        rc = take_password(c, spw, c->url.sentinel_password, sizeof c->url.sentinel_password,
                           "sentinel password");
    return rc;
}

int dq_connect(dq_client *c, const char *url) {
    char err[200];
    /* The caller's strings are read here or never. */
    const char *pw = c->opt.password, *spw = c->opt.sentinel_password;
    c->opt.password = c->opt.sentinel_password = NULL;
    if (c->router) return dq__fail(c, DQ_EINVAL, "dq_connect: already connected");
    if (!url || dq__url_parse(url, &c->url, err, sizeof err) != 0)
        return dq__fail(c, DQ_EINVAL, "invalid Redis URL: %s", err); /* never echo a password */
    int prc = take_passwords(c, pw, spw);
    if (prc) return prc;
    if (c->opt.key_file && !c->keyring) {
        char why[512];
        int krc = dq__keyring_load(c->opt.key_file, &c->keyring, why, sizeof why);
        if (krc) return dq__fail(c, krc, "%s", why);
        c->opt.key_file = NULL; /* the caller's string: not kept */
    }
    if (c->url.tls || c->url.sentinel_tls) {
        char why[DQ__ERRSTR_MAX];
        int trc = dq__tls_ctx_new(&c->tls, &c->opt, why, sizeof why);
        if (trc) return dq__fail(c, trc, "%s", why);
        if (c->opt.tls_insecure_skip_verify)
            dq__log(c, "TLS: the servers' certificates and names are NOT verified "
                       "(tls_insecure_skip_verify): anyone in the path can read and change the traffic");
    }
    /* The caller's strings are read by now. */
    c->opt.tls_ca = c->opt.tls_cert = c->opt.tls_key = c->opt.tls_server_name = NULL;
    int rc = dq__router_connect(c);
    if (rc) dq__router_free(c); /* nothing keeps trying in the background */
    return rc;
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
    if (!c->router || !dq__route_busy(c)) return;
    ev_now_update(c->loop);
    double end =
        ev_now(c->loop) + (c->opt.command_timeout_ms ? c->opt.command_timeout_ms : 5000) / 1000.0;
    while (dq__route_busy(c) && ev_now(c->loop) < end) ev_run(c->loop, EVRUN_ONCE);
}

void dq_client_free(dq_client *c) {
    if (!c) return;
    dq__worker_free_all(c);
    dq__take_free_all(c);
    dq__consumers_free(c);
    dq__waiters_free(c);
    dq__sched_free_all(c);
    dq__offers_flush(c);
    if (c->loop) ev_prepare_stop(c->loop, &c->offers_flush);
    drain(c);
    dq__router_free(c);
    dq__reap_retired(c);
    if (c->own_loop && c->loop) ev_loop_destroy(c->loop);
    dq__registry_free(c);
    dq__shards_free(c);
    dq__epochs_free(c);
    dq__keyring_free(c->keyring);
    dq__tls_ctx_free(c->tls);
    dq__errlog_free(c);
    explicit_bzero(&c->url, sizeof c->url); /* its passwords */
    free(c);
}
