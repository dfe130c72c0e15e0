/*
 * link.c - the byte stream under a connection: one non-blocking socket to
 * one endpoint on the client's libev loop, plain or TLS (tls.c), carrying
 * RESP. It owns the socket, its io watchers, the TLS session, the output
 * buffer and the reply parser; it connects (the TCP connect, then the TLS
 * handshake), writes what is queued, parses what arrives, and reports UP,
 * each REPLY in order, and DOWN (with why) to its one owner: conn.c (the
 * request/reply connections) and push.c (pub/sub).
 *
 * hiredis does the parts it is good at here: the socket's creation and
 * connect (redisConnectNonBlock), the output buffer and the RESP reader of
 * a redisContext. hiredis 0.14 has no TLS, so a TLS link reads and writes
 * through the SSL session instead of redisBufferRead/Write. Timeouts are
 * the owner's: it closes the link when its connect timer fires.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <hiredis/sds.h>

#include "internal.h"

enum stage { CONNECTING, HANDSHAKE, OPEN, DEAD };

struct dq__link {
    dq_client *c;
    redisContext *ctx;
    dq__tls *tls;                /* NULL: plain                          */
    int use_tls;
    char host[256];              /* the name TLS verifies                */
    enum stage stage;
    ev_io rio, wio;
    int read_wants_write;        /* SSL_read asked for writability       */
    int write_wants_read;        /* SSL_write asked for readability      */
    int depth;                   /* > 0 inside the owner's callback      */
    int closing;                 /* dq__link_close called meanwhile      */
    dq__link_fn *fn;
    void *privdata;
};

static int alive(const dq__link *l);

/* Runs the owner's callback. Returns 1 if the owner closed l meanwhile (it
 * is freed now: the caller must not touch it), else 0. */
static int emit(dq__link *l, int event, redisReply *reply, const char *why) {
    l->depth++;
    l->fn(l, event, reply, why, l->privdata);
    l->depth--;
    if (l->closing && l->depth == 0) {
        dq__link_close(l);
        return 1;
    }
    return 0;
}

static void stop_io(dq__link *l) {
    ev_io_stop(l->c->loop, &l->rio);
    ev_io_stop(l->c->loop, &l->wio);
}

/* The stream is unusable: stop it and tell the owner (who closes it). */
static void fail(dq__link *l, const char *why) {
    stop_io(l);
    l->stage = DEAD;
    (void)emit(l, DQ__LINK_DOWN, NULL, why);
}

static void set_io(ev_io *w, struct ev_loop *loop, int on) {
    if (on && !ev_is_active(w)) ev_io_start(loop, w);
    else if (!on && ev_is_active(w)) ev_io_stop(loop, w);
}

static int has_output(const dq__link *l) { return l->ctx->obuf && sdslen(l->ctx->obuf) > 0; }

/* The watchers an open stream needs now. */
static void arm_open(dq__link *l) {
    struct ev_loop *loop = l->c->loop;
    set_io(&l->rio, loop, 1);
    set_io(&l->wio, loop, l->read_wants_write || (has_output(l) && !l->write_wants_read));
}

static void opened(dq__link *l) {
    l->stage = OPEN;
    arm_open(l);
    (void)emit(l, DQ__LINK_UP, NULL, NULL);
}

static void step_handshake(dq__link *l) {
    char err[DQ__ERRSTR_MAX];
    int st = dq__tls_handshake(l->tls, err, sizeof err);
    if (st == DQ__TLS_DONE) {
        opened(l);
        return;
    }
    if (st == DQ__TLS_ERR) {
        fail(l, err);
        return;
    }
    set_io(&l->rio, l->c->loop, st == DQ__TLS_WANT_READ);
    set_io(&l->wio, l->c->loop, st == DQ__TLS_WANT_WRITE);
}

/* The TCP connect finished (the socket turned writable). */
static void connected(dq__link *l) {
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(l->ctx->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err) {
        fail(l, strerror(err));
        return;
    }
    if (!l->use_tls) {
        opened(l);
        return;
    }
    char why[DQ__ERRSTR_MAX];
    l->tls = dq__tls_new(l->c->tls, l->ctx->fd, l->host, why, sizeof why);
    if (!l->tls) {
        fail(l, why);
        return;
    }
    l->stage = HANDSHAKE;
    step_handshake(l);
}

/* Hands every complete reply to the owner, in order. */
static void deliver(dq__link *l) {
    for (;;) {
        void *r = NULL;
        if (redisGetReplyFromReader(l->ctx, &r) != REDIS_OK) {
            fail(l, "protocol error in a reply");
            return;
        }
        if (!r) return;
        int gone = emit(l, DQ__LINK_REPLY, r, NULL);
        freeReplyObject(r);
        if (gone || !alive(l)) return;
    }
}

static void read_tls(dq__link *l) {
    char buf[16384], err[DQ__ERRSTR_MAX];
    for (;;) {
        int st = 0;
        long n = dq__tls_read(l->tls, buf, sizeof buf, &st, err, sizeof err);
        if (n > 0) {
            if (redisReaderFeed(l->ctx->reader, buf, (size_t)n) != REDIS_OK) {
                fail(l, "out of memory");
                return;
            }
            continue;
        }
        if (st == DQ__TLS_ERR) {
            fail(l, err);
            return;
        }
        l->read_wants_write = st == DQ__TLS_WANT_WRITE;
        return;
    }
}

static void do_read(dq__link *l) {
    if (l->tls) {
        read_tls(l);
        if (!alive(l)) return;
    } else if (redisBufferRead(l->ctx) != REDIS_OK) {
        fail(l, l->ctx->errstr[0] ? l->ctx->errstr : "closed by server");
        return;
    }
    deliver(l);
}

static void write_tls(dq__link *l) {
    char err[DQ__ERRSTR_MAX];
    l->write_wants_read = 0;
    while (has_output(l)) {
        int st = 0;
        long n = dq__tls_write(l->tls, l->ctx->obuf, sdslen(l->ctx->obuf), &st, err, sizeof err);
        if (n > 0) {
            sdsrange(l->ctx->obuf, n, -1);
            continue;
        }
        if (st == DQ__TLS_ERR) {
            fail(l, err);
            return;
        }
        l->write_wants_read = st == DQ__TLS_WANT_READ;
        return;
    }
}

static void do_write(dq__link *l) {
    if (l->tls) {
        write_tls(l);
        if (!alive(l)) return;
    } else if (has_output(l)) {
        int done = 0;
        if (redisBufferWrite(l->ctx, &done) != REDIS_OK) {
            fail(l, l->ctx->errstr[0] ? l->ctx->errstr : "write failed");
            return;
        }
    }
    arm_open(l);
}

/* 1 while the stream is usable and its owner still wants it. */
static int alive(const dq__link *l) { return l->stage != DEAD && !l->closing; }

static void on_event(dq__link *l, int writable) {
    if (l->stage == CONNECTING) {
        if (writable) connected(l);
    } else if (l->stage == HANDSHAKE) {
        step_handshake(l);
    } else if (l->stage == OPEN) {
        /* SSL_read may need the socket writable and SSL_write readable
         * (a TLS key update): each event retries what waited on it. */
        if (!writable || l->read_wants_write) {
            l->read_wants_write = 0;
            do_read(l);
        }
        if (alive(l) && (writable || l->write_wants_read)) do_write(l);
        if (alive(l)) arm_open(l);
    }
}

/* The owner may close the link from any callback it gets: the link is
 * freed only once the loop's call returns. */
static void on_io(struct ev_loop *loop, ev_io *w, int revents) {
    (void)loop, (void)revents;
    dq__link *l = w->data;
    l->depth++;
    on_event(l, w == &l->wio);
    l->depth--;
    if (l->closing && l->depth == 0) dq__link_close(l);
}

dq__link *dq__link_open(dq_client *c, const dq__endpoint *ep, dq__link_fn *fn, void *privdata, char *err,
                        size_t errlen) {
    if (ep->tls && !c->tls) {
        snprintf(err, errlen, "TLS is not set up on this client");
        return NULL;
    }
    dq__link *l = calloc(1, sizeof *l);
    if (!l) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    redisContext *ctx =
        ep->is_unix ? redisConnectUnixNonBlock(ep->path) : redisConnectNonBlock(ep->host, ep->port);
    if (!ctx || ctx->err) {
        snprintf(err, errlen, "%s", ctx ? ctx->errstr : "out of memory");
        if (ctx) redisFree(ctx);
        free(l);
        return NULL;
    }
    l->c = c;
    l->ctx = ctx;
    l->use_tls = ep->tls;
    snprintf(l->host, sizeof l->host, "%s", ep->host);
    l->fn = fn;
    l->privdata = privdata;
    l->stage = CONNECTING;
    ev_io_init(&l->rio, on_io, ctx->fd, EV_READ);
    ev_io_init(&l->wio, on_io, ctx->fd, EV_WRITE);
    l->rio.data = l->wio.data = l;
    ev_io_start(c->loop, &l->wio); /* writable once the connect finished */
    return l;
}

int dq__link_send(dq__link *l, const char *cmd, size_t len) {
    if (l->stage == DEAD || l->closing) return DQ_ECONNECT;
    if (redisAppendFormattedCommand(l->ctx, cmd, len) != REDIS_OK) return DQ_ENOMEM;
    if (l->stage == OPEN) arm_open(l);
    return 0;
}

void dq__link_flush(dq__link *l) {
    if (!l || l->stage != OPEN || l->closing || !has_output(l)) return;
    l->depth++;
    do_write(l);
    l->depth--;
    if (l->closing && l->depth == 0) dq__link_close(l);
}

void dq__link_close(dq__link *l) {
    if (!l) return;
    stop_io(l);
    if (l->depth > 0) {
        /* Inside the owner's callback: freed when it returns. */
        l->closing = 1;
        return;
    }
    dq__tls_free(l->tls);
    redisFree(l->ctx);
    free(l);
}
