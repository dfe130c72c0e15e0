/*
 * push.c - a connection that receives pushed messages: sharded pub/sub
 * (SSUBSCRIBE, smessage, sunsubscribe) on data nodes, and +switch-master on
 * a sentinel. Every reply after the handshake goes to one callback, in
 * order; the owner (router.c) matches them up.
 *
 * Why not hiredis's async API, as conn.c uses: hiredis 0.14 knows only
 * SUBSCRIBE and PSUBSCRIBE. A reply it did not ask for outside those modes
 * (an smessage) trips an assertion and aborts the process. So this file
 * drives a non-blocking redisContext with libev watchers of its own and
 * uses hiredis only to format commands and parse replies.
 *
 * Reconnects by itself with conn.c's jittered backoff until freed; the owner hears DOWN and UP and
 * subscribes again after each UP.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "internal.h"

struct dq__push {
    dq_client *c;
    dq__endpoint ep;
    redisContext *ctx;           /* NULL while down                      */
    ev_io rio, wio;
    ev_timer connect_timer, retry_timer;
    int connected;               /* TCP connect finished                 */
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
    ev_io_stop(loop, &p->rio);
    ev_io_stop(loop, &p->wio);
    ev_timer_stop(loop, &p->connect_timer);
    if (p->ctx) redisFree(p->ctx);
    p->ctx = NULL;
    p->connected = p->up = 0;
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

static void want_write(dq__push *p) {
    if (p->ctx && !ev_is_active(&p->wio)) ev_io_start(p->c->loop, &p->wio);
}

int dq__push_send(dq__push *p, int argc, const char **argv, const size_t *lens) {
    if (!p->ctx || !p->up) return DQ_ECONNECT;
    if (redisAppendCommandArgv(p->ctx, argc, argv, lens) != REDIS_OK) return DQ_ENOMEM;
    want_write(p);
    return 0;
}

static int handshake_done(dq__push *p) {
    ev_timer_stop(p->c->loop, &p->connect_timer);
    p->up = 1;
    p->backoff_ms = 0;
    p->errstr[0] = '\0';
    return emit(p, DQ__PUSH_UP, NULL);
}

static void on_connected(dq__push *p) {
    p->connected = 1;
    ev_io_start(p->c->loop, &p->rio);
    const dq__endpoint *ep = &p->ep;
    if (ep->password && ep->password[0]) {
        const char *av[3] = {"AUTH", ep->user, ep->password};
        size_t al[3] = {4, strlen(ep->user), strlen(ep->password)};
        int named = ep->user && ep->user[0];
        if (!named) av[1] = ep->password, al[1] = al[2];
        if (redisAppendCommandArgv(p->ctx, named ? 3 : 2, av, al) != REDIS_OK) {
            fail(p, "out of memory");
            return;
        }
        p->handshake_left = 1;
        want_write(p);
        return;
    }
    (void)handshake_done(p);
}

static void on_writable(struct ev_loop *loop, ev_io *w, int revents) {
    (void)loop, (void)revents;
    dq__push *p = w->data;
    if (!p->connected) {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(p->ctx->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        if (err) {
            fail(p, strerror(err));
            return;
        }
        ev_io_stop(p->c->loop, &p->wio);
        on_connected(p);
        return;
    }
    int done = 0;
    if (redisBufferWrite(p->ctx, &done) != REDIS_OK) {
        fail(p, p->ctx->errstr[0] ? p->ctx->errstr : "write failed");
        return;
    }
    if (done) ev_io_stop(p->c->loop, &p->wio);
}

static void on_readable(struct ev_loop *loop, ev_io *w, int revents) {
    (void)loop, (void)revents;
    dq__push *p = w->data;
    if (redisBufferRead(p->ctx) != REDIS_OK) {
        fail(p, p->ctx->errstr[0] ? p->ctx->errstr : "closed by server");
        return;
    }
    for (;;) {
        void *r = NULL;
        if (!p->ctx || redisGetReplyFromReader(p->ctx, &r) != REDIS_OK) {
            if (p->ctx) fail(p, "protocol error");
            return;
        }
        if (!r) return;
        redisReply *reply = r;
        if (p->handshake_left > 0) {
            p->handshake_left--;
            if (reply->type == REDIS_REPLY_ERROR) {
                char why[DQ__ERRSTR_MAX];
                snprintf(why, sizeof why, "AUTH refused: %s", reply->str);
                freeReplyObject(reply);
                fail(p, why);
                return;
            }
            freeReplyObject(reply);
            if (p->handshake_left == 0 && handshake_done(p)) return;
        } else {
            int gone = emit(p, DQ__PUSH_REPLY, reply);
            freeReplyObject(reply);
            if (gone) return;
        }
    }
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
    redisContext *ctx = p->ep.is_unix ? redisConnectUnixNonBlock(p->ep.path)
                                      : redisConnectNonBlock(p->ep.host, p->ep.port);
    if (!ctx || ctx->err) {
        snprintf(p->errstr, sizeof p->errstr, "%.120s: %.120s", p->ep.name, ctx ? ctx->errstr : "out of memory");
        if (ctx) redisFree(ctx);
        schedule_retry(p);
        return;
    }
    p->ctx = ctx;
    p->connected = p->up = 0;
    p->handshake_left = 0;
    struct ev_loop *loop = p->c->loop;
    ev_io_set(&p->rio, ctx->fd, EV_READ);
    ev_io_set(&p->wio, ctx->fd, EV_WRITE);
    ev_io_start(loop, &p->wio); /* writable once the connect finished */
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
    ev_init(&p->rio, on_readable);
    ev_init(&p->wio, on_writable);
    ev_timer_init(&p->connect_timer, on_connect_timeout, 0, 0);
    ev_timer_init(&p->retry_timer, on_retry, 0, 0);
    p->rio.data = p->wio.data = p->connect_timer.data = p->retry_timer.data = p;
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
