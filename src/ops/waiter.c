/*
 * waiter.c - the waits a sharded queue's takes leave armed.
 *
 * When every shard of a sharded queue is empty, a take (take.c) waits on
 * all of them at once: one BLPOP on its wake tokens per shard, each on a
 * blocking connection to that shard's node (a cluster refuses one BLPOP
 * over keys of several slots). Each such wait is a waiter, kept in the
 * client's list. A waiter outlives its take: when the take ends, an armed
 * waiter stays armed for the client's next take on the queue (no reconnects
 * per take), and a token it pops with no take to give it to is pushed back,
 * so no token is lost and an idle consumer still only waits.
 *
 * A wait that runs out (half the safety interval) is followed by an LLEN
 * of the shard's ready list: entries there whose tokens are gone (popped by
 * a consumer paused or dead in its wait) are looked at by the holder, else
 * the waiter waits again; an idle take runs no script.
 *
 * A waiter knows nothing of takes: the take that holds it gives it three
 * calls (dq__waiter_calls), for a token popped, a wait ended and entries
 * found after a wait ran out. A
 * waiter also remembers whether its shard was found empty while its wait
 * was out (quiet), which lets takes skip that shard (dq__waiters_quiet).
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct dq__waiter {
    struct dq__waiter *next;         /* in the client's list                 */
    dq_client *c;
    char shard[DQ__SHARD_NAME_MAX + 1];
    unsigned index;                  /* the shard's number                   */
    char signal[DQ__KEY_MAX];
    dq__conn *conn;
    unsigned shards;                 /* the count the shard is named by      */
    const dq__waiter_calls *calls;   /* the holder's, or NULL: none holds it */
    void *holder;
    int out;                         /* the BLPOP is out                     */
    int quiet;                       /* the shard was found empty while the
                                        BLPOP was out, and it has popped
                                        nothing since (dq__waiters_quiet)   */
};

int dq__blpop(dq_client *c, dq__conn *conn, const char *key, dq__reply_fn *fn, void *privdata) {
    /* Redis ends the BLPOP with nil at half the safety interval; the reply
     * deadline (the connection's timer: a node that is frozen or cut off
     * answers nothing, and no disconnect may ever come) drops the
     * connection at the whole interval. */
    char secs[32];
    int ms = c->opt.safety_check_ms;
    const char *argv[3] = {"BLPOP", key, secs};
    size_t lens[3] = {5, strlen(key), (size_t)snprintf(secs, sizeof secs, "%.3f", ms / 2000.0)};
    return dq__conn_send_within(conn, ms, 3, argv, lens, fn, privdata);
}

void dq__push_back_tokens(dq_client *c, const char *shard, unsigned n) {
    if (n == 0) return;
    char signal[DQ__KEY_MAX];
    dq__key(signal, sizeof signal, shard, "s");
    const char *argv[2 + 255];
    size_t lens[2 + 255];
    argv[0] = "RPUSH", lens[0] = 5;
    argv[1] = signal, lens[1] = strlen(signal);
    for (unsigned i = 0; i < n && i < 255; i++) argv[2 + i] = "1", lens[2 + i] = 1;
    (void)dq__op_command(c, shard, 2 + (int)(n < 255 ? n : 255), argv, lens, dq__ignore_reply, NULL);
}

/* Whether w waits on shard j of owner's queue, by a count of shards. */
static int waiter_is(const dq__waiter *w, const char *owner, unsigned shards, unsigned j) {
    size_t ol = strlen(owner);
    return w->index == j && w->shards == shards && strncmp(w->shard, owner, ol) == 0 &&
           w->shard[ol] == '~';
}

int dq__waiters_quiet(const dq_client *c, const char *owner, unsigned shards, unsigned j) {
    for (const dq__waiter *w = c->waiters; w; w = w->next)
        if (w->out && w->quiet && waiter_is(w, owner, shards, j)) return 1;
    return 0;
}

void dq__waiters_note_empty(dq_client *c, const char *owner, unsigned shards, unsigned j) {
    for (dq__waiter *w = c->waiters; w; w = w->next)
        if (w->out && waiter_is(w, owner, shards, j)) w->quiet = 1;
}

static void waiter_send(dq__waiter *w);
static int ask_ready(dq__waiter *w, dq__conn *conn);

static void waiter_free(dq__waiter *w) {
    for (dq__waiter **p = &w->c->waiters; *p; p = &(*p)->next) {
        if (*p == w) {
            *p = w->next;
            break;
        }
    }
    dq__conn *conn = w->conn;
    w->conn = NULL;
    if (conn && !w->out && conn->state == DQ__UP) dq__route_blocking_release(w->c, conn);
    else if (conn) dq__conn_retire(conn); /* its BLPOP fails now, w still alive */
    free(w);
}

void dq__waiter_hold(dq__waiter *w, const dq__waiter_calls *calls, void *holder) {
    w->calls = calls;
    w->holder = holder;
}

void dq__waiter_release(dq__waiter *w) {
    w->calls = NULL;
    w->holder = NULL;
    if (!w->out) waiter_free(w);
}

/* The wait of w on conn ended (an error, a failover, a closed connection):
 * conn is done for waiting; w goes with it when no take holds it, else its
 * holder hears of it (and looks again, where the shard is now). */
static void waiter_ended(dq__waiter *w, dq__conn *conn) {
    w->conn = NULL;
    dq__conn_retire(conn);
    if (!w->calls) {
        waiter_free(w);
        return;
    }
    w->calls->ended(w->holder);
}

static void waiter_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    dq__waiter *w = privdata;
    (void)code;
    w->out = 0;
    w->quiet = 0;
    if (!reply) return; /* closed: waiter_lost or waiter_free deals with it */
    if (reply->type == REDIS_REPLY_NIL) { /* its time ran out: look, or wait again */
        if (!w->calls) waiter_free(w);
        else if (ask_ready(w, conn) != 0) waiter_send(w);
        return;
    }
    if (reply->type == REDIS_REPLY_ARRAY) {
        if (!w->calls) { /* nobody to give it to: back it goes */
            dq__push_back_tokens(w->c, w->shard, 1);
            waiter_free(w);
            return;
        }
        w->calls->token(w->holder, w->index);
        return;
    }
    /* A failover, a slot move or an error ended the wait: this connection
     * is done; the take looks again and waits where the shard is now. */
    const char *why = reply->type == REDIS_REPLY_ERROR ? reply->str : "no reply";
    dq__log_error(w->c, why, "shard %s: wait ended by %s: %s", w->shard, conn->name, why);
    waiter_ended(w, conn);
}

/* The reply of ask_ready's LLEN: entries ready (their tokens gone, popped
 * by a consumer paused or dead): the holder looks there; none: w waits
 * again; an error: as one ending a wait. */
static void ready_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    dq__waiter *w = privdata;
    (void)code;
    w->out = 0;
    if (!reply) return; /* closed: waiter_lost or waiter_free deals with it */
    if (!w->calls) {
        waiter_free(w);
    } else if (reply->type == REDIS_REPLY_INTEGER) {
        if (reply->integer > 0) w->calls->look(w->holder, w->index);
        else waiter_send(w);
    } else {
        dq__log_error(w->c, reply->type == REDIS_REPLY_ERROR ? reply->str : "no reply",
                      "shard %s: look ended by %s", w->shard, conn->name);
        waiter_ended(w, conn);
    }
}

int dq__ask_ready(dq_client *c, dq__conn *conn, const char *ready, dq__reply_fn *fn, void *privdata) {
    const char *argv[2] = {"LLEN", ready};
    size_t lens[2] = {4, strlen(ready)};
    return dq__conn_send_within(conn, c->opt.safety_check_ms, 2, argv, lens, fn, privdata) != 0 ? -1 : 0;
}

/* After w's wait ran out: asks, on its connection, whether the shard's
 * ready list holds entries (one LLEN: an idle take runs no script).
 * Returns 0 if the question is out, -1 if it could not be sent. */
static int ask_ready(dq__waiter *w, dq__conn *conn) {
    char ready[DQ__KEY_MAX];
    dq__key(ready, sizeof ready, w->shard, "r");
    if (dq__ask_ready(w->c, conn, ready, ready_reply, w) != 0) return -1;
    w->out = 1;
    return 0;
}

static void waiter_lost(dq__conn *conn, void *privdata) {
    dq__waiter *w = privdata;
    if (w->conn != conn) return;
    w->out = 0;
    waiter_ended(w, conn);
}

static void waiter_up(dq__conn *conn, void *privdata) {
    (void)conn;
    dq__waiter *w = privdata;
    if (!w->calls) {
        waiter_free(w);
        return;
    }
    waiter_send(w);
}

/* Sends w's BLPOP unless it is out, on a blocking connection to the node
 * that serves the shard now (connecting one if need be: waiter_up sends it
 * once it is up). */
static void waiter_send(dq__waiter *w) {
    if (w->out) return;
    unsigned slot = dq__queue_slot(w->shard);
    if (w->conn && !dq__route_owns(w->c, w->conn, slot)) {
        dq__conn_retire(w->conn); /* the shard moved */
        w->conn = NULL;
    }
    if (!w->conn) {
        w->conn = dq__route_blocking(w->c, slot);
        if (!w->conn) return; /* no node now: the take's retry looks again */
        w->conn->event_privdata = w;
        w->conn->on_up = waiter_up;
        w->conn->on_down = waiter_lost;
        w->conn->on_fail = waiter_lost;
    }
    if (w->conn->state != DQ__UP) return;
    if (dq__blpop(w->c, w->conn, w->signal, waiter_reply, w) == 0) {
        w->out = 1;
        w->quiet = 0; /* until the shard is found empty with it out */
    }
}

int dq__waiter_arm(dq__waiter *w, int found_empty) {
    int was_out = w->out;
    waiter_send(w);
    /* A wait sent just after its shard was found empty is as good as one
     * that was out then: a token pushed in between is still in the list,
     * and the BLPOP pops it at once. (An unsharded take leaves the same gap
     * between its look and its BLPOP.) */
    if (!was_out && w->out && found_empty) w->quiet = 1;
    if (w->out) return 1;
    return w->conn ? 0 : -1;
}

dq__waiter *dq__waiter_for(dq_client *c, const char *owner, unsigned j, unsigned shards) {
    char shard[DQ__SHARD_NAME_MAX + 1];
    if (dq__shard_name(owner, j, shards, shard, sizeof shard) != 0) return NULL;
    for (dq__waiter *w = c->waiters; w; w = w->next)
        if (!w->calls && w->out && strcmp(w->shard, shard) == 0) return w;
    dq__waiter *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->c = c;
    memcpy(w->shard, shard, sizeof shard);
    w->index = j;
    w->shards = shards;
    dq__key(w->signal, sizeof w->signal, shard, "s");
    w->next = c->waiters;
    c->waiters = w;
    return w;
}

void dq__waiters_free(dq_client *c) {
    while (c->waiters) {
        c->waiters->calls = NULL;
        waiter_free(c->waiters);
    }
}
