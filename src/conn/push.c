/*
 * push.c - a connection that receives pushed messages: sharded pub/sub
 * (SSUBSCRIBE, smessage, sunsubscribe) on data nodes, and +switch-master on
 * a sentinel. Every reply after the handshake goes to one callback, in
 * order; the owner (router.c) matches them up.
 *
 * Why not a dq__conn: a conn matches each reply to the request that asked
 * for it, and pushed messages (an smessage) were asked for by nobody. (Nor
 * hiredis's async API: 0.14 knows only SUBSCRIBE and PSUBSCRIBE, and a
 * reply it did not ask for trips an assertion that aborts the process.) So
 * this file drives a link of its own (link.c: the socket, plain or TLS, and
 * the RESP parser) and hands every reply to its owner.
 *
 * Reconnects by itself with conn.c's jittered backoff until freed; the owner hears DOWN and UP and
 * subscribes again after each UP.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct dq__push {
    dq_client *c;
    dq__endpoint ep;
    dq__link *link;              /* NULL while down                      */
    ev_timer connect_timer, retry_timer;
    int up;                      /* handshake done                       */
    int handshake_left;          /* AUTH replies still to come           */
    int backoff_ms;
    int depth;                   /* > 0 inside the callback              */
    int freeing;                 /* dq__push_free called in the callback */
    dq__push_fn *fn;
    void *privdata;
    char errstr[DQ__ERRSTR_MAX];
};

static void start(dq__push *p);

/* Runs the owner's callback. Returns 1 if the owner freed p meanwhile (it
 * is gone now: the caller must not touch it), else 0. */
static int emit(dq__push *p, int event, redisReply *reply) {
    p->depth++;
    if (p->fn) p->fn(p, event, reply, p->privdata);
    p->depth--;
    if (p->freeing && p->depth == 0) {
        dq__push_free(p);
        return 1;
    }
    return 0;
}

static void close_socket(dq__push *p) {
    struct ev_loop *loop = p->c->loop;
    ev_timer_stop(loop, &p->connect_timer);
    dq__link_close(p->link);
    p->link = NULL;
    p->up = 0;
}

static void schedule_retry(dq__push *p) { dq__retry_later(p->c, &p->retry_timer, &p->backoff_ms); }

/* The connection is gone: tell the owner (if it had been up), retry later. */
static void fail(dq__push *p, const char *why) {
    int was_up = p->up;
    snprintf(p->errstr, sizeof p->errstr, "%.120s: %.120s", p->ep.name, why);
    close_socket(p);
    schedule_retry(p);
    if (was_up) (void)emit(p, DQ__PUSH_DOWN, NULL);
}

/* Queues a command on the link (which must be there). */
static int send_cmd(dq__push *p, int argc, const char **argv, const size_t *lens) {
    char *cmd = NULL;
    long len = dq__format_command(&cmd, 0, NULL, NULL, argc, argv, lens);
    int rc = len < 0 ? DQ_ENOMEM : dq__link_send(p->link, cmd, (size_t)len);
    free(cmd);
    return rc;
}

int dq__push_send(dq__push *p, int argc, const char **argv, const size_t *lens) {
    if (!p->link || !p->up) return DQ_ECONNECT;
    return send_cmd(p, argc, argv, lens);
}

static int handshake_done(dq__push *p) {
    ev_timer_stop(p->c->loop, &p->connect_timer);
    p->up = 1;
    p->backoff_ms = 0;
    p->errstr[0] = '\0';
    return emit(p, DQ__PUSH_UP, NULL);
}

static void on_connected(dq__push *p) {
    const dq__endpoint *ep = &p->ep;
    if (ep->password && ep->password[0]) {
        const char *av[3] = {"AUTH", ep->user, ep->password};
        size_t al[3] = {4, strlen(ep->user), strlen(ep->password)};
        int named = ep->user && ep->user[0];
        if (!named) av[1] = ep->password, al[1] = al[2];
        if (send_cmd(p, named ? 3 : 2, av, al) != 0) {
            fail(p, "out of memory");
            return;
        }
        p->handshake_left = 1;
        return;
    }
    (void)handshake_done(p);
}

/* One reply: the handshake's, or the owner's. */
static void on_reply(dq__push *p, redisReply *reply) {
    if (p->handshake_left > 0) {
        p->handshake_left--;
        if (reply->type == REDIS_REPLY_ERROR) {
            char why[DQ__ERRSTR_MAX];
            snprintf(why, sizeof why, "AUTH refused: %s", reply->str);
            fail(p, why);
            return;
        }
        if (p->handshake_left == 0) (void)handshake_done(p);
        return;
    }
    (void)emit(p, DQ__PUSH_REPLY, reply);
}

static void on_link(dq__link *l, int event, redisReply *reply, const char *why, void *privdata) {
    (void)l;
    dq__push *p = privdata;
    if (event == DQ__LINK_UP) on_connected(p);
    else if (event == DQ__LINK_REPLY) on_reply(p, reply);
    else fail(p, why);
}

static void on_connect_timeout(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    dq__push *p = w->data;
    fail(p, "no answer in time");
}

static void on_retry(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    start(w->data);
}

static void start(dq__push *p) {
    char why[DQ__ERRSTR_MAX];
    p->up = 0;
    p->handshake_left = 0;
    p->link = dq__link_open(p->c, &p->ep, on_link, p, why, sizeof why);
    if (!p->link) {
        snprintf(p->errstr, sizeof p->errstr, "%.120s: %.120s", p->ep.name, why);
        schedule_retry(p);
        return;
    }
    struct ev_loop *loop = p->c->loop;
    ev_timer_set(&p->connect_timer, p->c->opt.connect_timeout_ms / 1000.0, 0);
    ev_timer_start(loop, &p->connect_timer);
}

dq__push *dq__push_new(dq_client *c, const dq__endpoint *ep, dq__push_fn *fn, void *privdata) {
    dq__push *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->c = c;
    p->ep = *ep;
    p->fn = fn;
    p->privdata = privdata;
    ev_timer_init(&p->connect_timer, on_connect_timeout, 0, 0);
    ev_timer_init(&p->retry_timer, on_retry, 0, 0);
    p->connect_timer.data = p->retry_timer.data = p;
    start(p);
    return p;
}

int dq__push_is_up(const dq__push *p) { return p && p->up; }
const char *dq__push_errstr(const dq__push *p) { return p->errstr; }

void dq__push_free(dq__push *p) {
    if (!p) return;
    if (p->depth > 0) {
        /* Inside our own callback: emit frees it on return. */
        p->freeing = 1;
        p->fn = NULL;
        return;
    }
    close_socket(p);
    ev_timer_stop(p->c->loop, &p->retry_timer);
    free(p);
}
