/*
 * ops.c - the producer-side operations: offer (async, sync, pipelined
 * batch), cancel, lookup and stats. Each is one script call on the command
 * connection; the synchronous forms run the loop until their reply.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ------------------------------------------------------------ validation */

int dq__check_queue(dq_client *c, const char *queue) {
    if (!queue || !dq__queue_valid(queue))
        return dq__fail(c, DQ_EINVAL, "invalid queue name '%s': use 1 to %d of A-Z a-z 0-9 _ . : -",
                        queue ? queue : "(null)", DQ_QUEUE_MAX);
    return 0;
}

int dq__check_id(dq_client *c, const char *id) {
    if (!id || !dq__id_valid(id))
        return dq__fail(c, DQ_EINVAL, "invalid id '%s': use 1 to %d printable ASCII characters, no spaces",
                        id ? id : "(null)", DQ_ID_MAX);
    return 0;
}

static int check_item(dq_client *c, const dq_item *item) {
    if (!item) return dq__fail(c, DQ_EINVAL, "no item");
    if (item->id && dq__check_id(c, item->id)) return DQ_EINVAL;
    if (item->payload_len > c->opt.max_payload)
        return dq__fail(c, DQ_ETOOBIG, "payload is %zu bytes, limit is %zu", item->payload_len,
                        c->opt.max_payload);
    if (item->payload_len && !item->payload) return dq__fail(c, DQ_EINVAL, "payload is NULL");
    if (item->due_ms < 0 || item->due_ms > DQ_DUE_MAX_MS || item->delay_ms < 0 ||
        item->delay_ms > DQ_DUE_MAX_MS)
        return dq__fail(c, DQ_EINVAL, "delay or due time out of range (0 to %" PRId64 " ms)",
                        DQ_DUE_MAX_MS);
    if (item->flags & ~DQ_OFFER_KEEP) return dq__fail(c, DQ_EINVAL, "unknown offer flags");
    return 0;
}

/* Error of a reply, with its text kept on the client (without the
 * " script: <sha>, on @user_script:N." tail Redis adds to script errors). */
int dq__reply_failure(dq_client *c, dq__conn *conn, const redisReply *reply, int code,
                      const char *queue) {
    if (!reply) return dq__fail(c, code, "%s", conn ? conn->errstr : "connection closed");
    if (reply->type == REDIS_REPLY_ERROR) {
        const char *tail = strstr(reply->str, " script: ");
        int len = tail ? (int)(tail - reply->str) : (int)strlen(reply->str);
        code = dq__reply_error_code(reply);
        if (code == DQ_EWRONGTYPE && !strstr(reply->str, "dq:{"))
            return dq__fail(c, code,
                            "%.*s (queue %s: dq:{%s}:z must be a zset, dq:{%s}:r a list, "
                            "dq:{%s}:p:* hashes)",
                            len, reply->str, queue, queue, queue, queue);
        return dq__fail(c, code, "%.*s", len, reply->str);
    }
    return dq__fail(c, DQ_EPROTO, "unexpected reply type %d from Redis", reply->type);
}

/* ------------------------------------------------------------ offer */

typedef struct offer_ctx {
    dq_client *c;
    char queue[DQ_QUEUE_MAX + 1];
    dq_offer_cb *cb;
    void *privdata;
    dq_offer_result result;
} offer_ctx;

static void offer_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    offer_ctx *o = privdata;
    dq_client *c = o->c;
    int status = 0;
    if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != 4) {
        status = dq__reply_failure(c, conn, reply, code, o->queue);
    } else {
        o->result.status = (int)dq__reply_int(reply->element[0]);
        o->result.due_ms = dq__reply_int(reply->element[1]);
        o->result.state = (int)dq__reply_int(reply->element[3]) == 3   ? DQ_STATE_IN_FLIGHT
                          : (int)dq__reply_int(reply->element[3]) == 2 ? DQ_STATE_READY
                                                                        : DQ_STATE_PENDING;
    }
    c->callback_depth++;
    o->cb(c, status, status ? NULL : &o->result, o->privdata);
    c->callback_depth--;
    free(o);
}

int dq_offer_async(dq_client *c, const char *queue, const dq_item *item, dq_offer_cb *cb,
                   void *privdata) {
    int bad = dq__check_queue(c, queue);
    if (!bad) bad = check_item(c, item);
    if (bad) return bad;
    if (!cb) return dq__fail(c, DQ_EINVAL, "no callback");
    offer_ctx *o = calloc(1, sizeof *o);
    if (!o) return dq__fail(c, DQ_ENOMEM, "out of memory");
    o->c = c, o->cb = cb, o->privdata = privdata;
    snprintf(o->queue, sizeof o->queue, "%s", queue);
    if (item->id) snprintf(o->result.id, sizeof o->result.id, "%s", item->id);
    else dq__id_generate(o->result.id);

    dq__keys k;
    dq__keys_init(&k, queue);
    char ms[24];
    int abs = item->due_ms > 0;
    int msl = snprintf(ms, sizeof ms, "%" PRId64, abs ? item->due_ms : item->delay_ms);
    const char *argv[11] = {k.z, k.ready, k.ready_ids, k.prefix, k.chan, o->result.id,
                            item->payload_len ? item->payload : "", abs ? "a" : "d", ms,
                            (item->flags & DQ_OFFER_KEEP) ? "1" : "0", item->id ? "0" : "1"};
    size_t lens[11] = {strlen(k.z), strlen(k.ready), strlen(k.ready_ids), strlen(k.prefix),
                       strlen(k.chan), strlen(o->result.id), item->payload_len, 1, (size_t)msl,
                       1, 1};
    int rc = dq__conn_eval(c->cmd, DQ__LUA_OFFER, 3, 8, argv, lens, offer_reply, o);
    if (rc) {
        free(o);
        return dq__fail(c, rc, "%s", c->cmd->errstr);
    }
    return 0;
}

typedef struct sync_offer {
    int done, status;
    dq_offer_result *out;
} sync_offer;

static void sync_offer_cb(dq_client *c, int status, const dq_offer_result *result, void *privdata) {
    (void)c;
    sync_offer *s = privdata;
    s->status = status;
    if (s->out) {
        if (result) *s->out = *result;
        else s->out->status = status;
    }
    s->done = 1;
}

/* Checks shared by the synchronous calls on a queue and an optional id. */
static int check_sync(dq_client *c, const char *queue, const char *id, int need_id);

int dq__not_in_callback(dq_client *c) {
    if (c->callback_depth > 0)
        return dq__fail(c, DQ_EBUSY, "synchronous call from inside a delayq callback");
    return 0;
}

int dq_offer(dq_client *c, const char *queue, const dq_item *item, dq_offer_result *result) {
    if (dq__not_in_callback(c)) return DQ_EBUSY;
    sync_offer s = {0, 0, result};
    int rc = dq_offer_async(c, queue, item, sync_offer_cb, &s);
    if (rc) return rc;
    dq__wait(c, &s.done);
    return s.status;
}

typedef struct batch {
    int pending, accepted, first_error;
    char first_errstr[DQ__ERRSTR_MAX];
} batch;

typedef struct batch_item {
    batch *b;
    dq_offer_result *out;
} batch_item;

static void batch_cb(dq_client *c, int status, const dq_offer_result *result, void *privdata) {
    batch_item *bi = privdata;
    batch *b = bi->b;
    if (status == 0) b->accepted++;
    else if (!b->first_error) {
        b->first_error = status;
        snprintf(b->first_errstr, sizeof b->first_errstr, "%s", c->errstr);
    }
    if (bi->out) {
        if (result) *bi->out = *result;
        else bi->out->status = status;
    }
    b->pending--;
}

int dq_offer_many(dq_client *c, const char *queue, const dq_item *items, size_t n,
                  dq_offer_result *results) {
    if (dq__not_in_callback(c)) return DQ_EBUSY;
    if (dq__check_queue(c, queue)) return DQ_EINVAL;
    for (size_t i = 0; i < n; i++) {
        int rc = check_item(c, &items[i]);
        if (rc) {
            char why[DQ__ERRSTR_MAX];
            snprintf(why, sizeof why, "%s", c->errstr); /* dq__fail writes errstr */
            return dq__fail(c, rc, "item %zu: %s", i, why);
        }
    }
    batch b = {0};
    batch_item *bis = calloc(n ? n : 1, sizeof *bis);
    if (!bis) return dq__fail(c, DQ_ENOMEM, "out of memory");
    size_t sent = 0;
    for (; sent < n; sent++) {
        bis[sent].b = &b;
        bis[sent].out = results ? &results[sent] : NULL;
        int rc = dq_offer_async(c, queue, &items[sent], batch_cb, &bis[sent]);
        if (rc) {
            if (!b.first_error) {
                b.first_error = rc;
                snprintf(b.first_errstr, sizeof b.first_errstr, "%s", c->errstr);
            }
            for (size_t j = sent; j < n && results; j++) results[j].status = rc;
            break;
        }
        b.pending++;
    }
    while (b.pending > 0) ev_run(c->loop, EVRUN_ONCE);
    free(bis);
    if (sent == 0 && n > 0) return dq__fail(c, b.first_error, "%s", b.first_errstr);
    if (b.first_error) dq__fail(c, b.first_error, "%s", b.first_errstr);
    return b.accepted;
}

static int check_sync(dq_client *c, const char *queue, const char *id, int need_id) {
    int rc = dq__not_in_callback(c);
    if (!rc) rc = dq__check_queue(c, queue);
    if (!rc && need_id) rc = dq__check_id(c, id);
    return rc;
}

/* ------------------------------------------------------------ small sync scripts */

typedef dq__sync_ints sync_ints;

static void ints_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    sync_ints *s = privdata;
    s->done = 1;
    if (reply && reply->type == REDIS_REPLY_INTEGER) {
        s->v[0] = reply->integer;
        s->count = 1;
    } else if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements <= 8) {
        for (size_t i = 0; i < reply->elements; i++) s->v[i] = dq__reply_int(reply->element[i]);
        s->count = (int)reply->elements;
    } else {
        s->status = dq__reply_failure(s->c, conn, reply, code, s->queue);
    }
}

int dq__eval_ints(dq_client *c, const char *queue, enum dq__script script, int nkeys,
                  int nargs, const char **argv, sync_ints *s) {
    size_t lens[8];
    for (int i = 0; i < nkeys + nargs; i++) lens[i] = strlen(argv[i]);
    memset(s, 0, sizeof *s);
    s->c = c;
    s->queue = queue;
    int rc = dq__conn_eval(c->cmd, script, nkeys, nargs, argv, lens, ints_reply, s);
    if (rc) return dq__fail(c, rc, "%s", c->cmd->errstr);
    dq__wait(c, &s->done);
    return s->status;
}

int dq_cancel(dq_client *c, const char *queue, const char *id) {
    int bad = check_sync(c, queue, id, 1);
    if (bad) return bad;
    dq__keys k;
    dq__keys_init(&k, queue);
    const char *argv[3] = {k.z, k.prefix, id};
    sync_ints s;
    int rc = dq__eval_ints(c, queue, DQ__LUA_CANCEL, 1, 2, argv, &s);
    return rc ? rc : (int)s.v[0];
}

int dq_lookup(dq_client *c, const char *queue, const char *id, dq_item_info *info) {
    int bad = check_sync(c, queue, id, 1);
    if (bad) return bad;
    dq__keys k;
    dq__keys_init(&k, queue);
    const char *argv[5] = {k.z, k.ready_ids, k.dead, k.prefix, id};
    sync_ints s;
    int rc = dq__eval_ints(c, queue, DQ__LUA_LOOKUP, 3, 2, argv, &s);
    if (rc) return rc;
    if (s.count != 3 || s.v[0] < 0 || s.v[0] > DQ_STATE_DEAD)
        return dq__fail(c, DQ_EPROTO, "unexpected lookup reply");
    info->state = (int)s.v[0];
    info->due_ms = s.v[1];
    info->attempts = (int)s.v[2];
    return 0;
}

int dq_get_stats(dq_client *c, const char *queue, dq_stats *st) {
    int bad = check_sync(c, queue, NULL, 0);
    if (bad) return bad;
    dq__keys k;
    dq__keys_init(&k, queue);
    const char *argv[5] = {k.z, k.ready, k.aside, k.counters, k.dead_times};
    sync_ints s;
    int rc = dq__eval_ints(c, queue, DQ__LUA_STATS, 5, 0, argv, &s);
    if (rc) return rc;
    if (s.count != 6) return dq__fail(c, DQ_EPROTO, "unexpected stats reply");
    st->pending = s.v[0];
    st->ready = s.v[1];
    st->next_due_in_ms = s.v[2];
    st->set_aside = s.v[3];
    st->in_flight = s.v[4];
    st->dead = s.v[5];
    return 0;
}
