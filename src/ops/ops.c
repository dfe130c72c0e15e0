/*
 * ops.c - what every operation shares: the checks of queue names and ids,
 * the helpers every operation sends through (dq__op_eval, dq__wait), which
 * keep gathered offers (offer.c) ahead of later commands, the errors of
 * replies, and the one-script synchronous call (dq__eval_ints: one script
 * call on the node that serves the queue, the loop run until its reply)
 * that cancel.c, lookup.c and stats.c build on. Also what listings share
 * (a sealed payload shown opened, freeing a listing), which lookup.c,
 * dead.c and observe.c all use.
 */
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
        return dq__fail(c, DQ_EINVAL,
                        "invalid id '%s': use 1 to %d printable ASCII characters, no spaces",
                        id ? id : "(null)", DQ_ID_MAX);
    return 0;
}

/* Error of a reply, with its text kept on the client (without the
 * " script: <sha>, on @user_script:N." tail Redis adds to script errors). */
int dq__reply_failure(dq_client *c, dq__conn *conn, const redisReply *reply, int code,
                      const char *queue) {
    /* No connection: the router recorded the message on c already. */
    if (!reply) return conn ? dq__fail(c, code, "%s", conn->errstr) : code;
    if (reply->type == REDIS_REPLY_ERROR) {
        const char *tail = NULL; /* the last: Valkey's refusals say "ACL failure in script: " */
        for (const char *p = reply->str; (p = strstr(p, " script: ")) != NULL; p++) tail = p;
        int len = tail ? (int)(tail - reply->str) : (int)strlen(reply->str);
        code = dq__reply_error_code(reply);
        /* ACL refusals: Redis names a refused command, never a refused key
         * (nor, from inside a script, the command): say which permission. */
        if (dq__error_names_key(reply->str))
            return dq__fail(c, code,
                            "%.*s (queue %s needs keys dq:{%s}:* and channel dq:{%s}:w: "
                            "see 'delayq acl')",
                            len, reply->str, queue, queue, queue);
        if (dq__error_class(reply->str) == DQ__ERR_NOPERM_SCRIPT)
            return dq__fail(c, code,
                            "%.*s (queue %s: a command or key of its scripts is not "
                            "granted: 'delayq acl' prints the rule delayq needs)",
                            len, reply->str, queue);
        if (code == DQ_EWRONGTYPE && !strstr(reply->str, "dq:{"))
            return dq__fail(c, code,
                            "%.*s (queue %s: dq:{%s}:zs and dq:{%s}:q:* must be zsets, "
                            "dq:{%s}:r a list, dq:{%s}:i:* hashes)",
                            len, reply->str, queue, queue, queue, queue, queue);
        return dq__fail(c, code, "%.*s", len, reply->str);
    }
    return dq__fail(c, DQ_EPROTO, "unexpected reply type %d from Redis", reply->type);
}

/* ------------------------------------------------------------ sending */

/* Gathered offers go ahead of any later command (offer.c set the hook). */
static void offers_first(dq_client *c) {
    if (c->offers) c->offers_send(c);
}

int dq__op_eval(dq_client *c, const char *queue, unsigned flags, enum dq__script script, int nkeys,
                int nargs, const char **argv, const size_t *argvlen, dq__reply_fn *fn, void *privdata) {
    if (!c->router) return dq__fail(c, DQ_ECONNECT, "not connected: call dq_connect first");
    offers_first(c); /* keep call order */
    return dq__eval(c, queue, flags, script, nkeys, nargs, argv, argvlen, fn, privdata);
}

int dq__op_command(dq_client *c, const char *queue, int argc, const char **argv, const size_t *lens,
                   dq__reply_fn *fn, void *privdata) {
    if (!c->router) return dq__fail(c, DQ_ECONNECT, "not connected: call dq_connect first");
    offers_first(c);
    return dq__route_argv(c, dq__queue_slot(queue), 0, argc, argv, lens, fn, privdata);
}

void dq__wait(dq_client *c, const int *done) {
    /* A synchronous caller has nothing more to gather: send now, and write
     * the sockets now rather than on the loop's next writable event (one
     * poll and two epoll_ctl calls fewer per round trip). */
    offers_first(c);
    if (c->router) dq__route_write_now(c);
    while (!*done) ev_run(c->loop, EVRUN_ONCE);
}

void dq__wait_all(dq_client *c, const int *left) {
    offers_first(c);
    if (c->router) dq__route_write_now(c);
    while (*left > 0) ev_run(c->loop, EVRUN_ONCE);
}

int dq__not_in_callback(dq_client *c) {
    if (c->callback_depth > 0)
        return dq__fail(c, DQ_EBUSY, "synchronous call from inside a delayq callback");
    /* A program that only makes synchronous calls runs the loop only inside
     * them, and a call that fails fast (Redis away) runs it not at all: let
     * the reconnects, re-discoveries and map reads that are due run now, or
     * such a program would never get back. Free when all is well. */
    if (c->router && dq__route_degraded(c)) ev_run(c->loop, EVRUN_NOWAIT);
    return 0;
}

int dq__check_sync(dq_client *c, const char *queue, const char *id) {
    int rc = dq__not_in_callback(c);
    if (!rc) rc = dq__check_queue(c, queue);
    if (!rc && id) rc = dq__check_id(c, id);
    return rc;
}

/* ------------------------------------------------------------ small sync scripts */

typedef dq__sync_ints sync_ints;

static void ints_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    sync_ints *s = privdata;
    s->done = 1;
    s->status = code == DQ_ENOTDURABLE ? code : 0; /* made, values below */
    if (dq__shards_relearn(s->c, s->queue, reply, NULL)) {
        s->status = DQ__ESHARDS;
    } else if (reply && reply->type == REDIS_REPLY_INTEGER) {
        s->v[0] = reply->integer;
        s->count = 1;
    } else if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements <= 10) {
        for (size_t i = 0; i < reply->elements; i++) s->v[i] = dq__reply_int(reply->element[i]);
        s->count = (int)reply->elements;
        const redisReply *t = reply->elements > 3 ? reply->element[3] : NULL;
        if (t && t->type == REDIS_REPLY_STRING && t->len < sizeof s->text)
            memcpy(s->text, t->str, t->len);
    } else {
        s->status = dq__reply_failure(s->c, conn, reply, code, s->queue);
    }
}

int dq__eval_ints_on(dq_client *c, const char *queue, const char *shard, unsigned flags,
                     enum dq__script script, int nkeys, int nargs, const char **argv, sync_ints *s) {
    size_t lens[16];
    if (nkeys + nargs > 16) return dq__fail(c, DQ_EINVAL, "too many script arguments");
    for (int i = 0; i < nkeys + nargs; i++) lens[i] = strlen(argv[i]);
    memset(s, 0, sizeof *s);
    s->c = c;
    s->queue = queue;
    int rc = dq__op_eval(c, shard, flags, script, nkeys, nargs, argv, lens, ints_reply, s);
    if (rc) return rc;
    dq__wait(c, &s->done);
    return s->status;
}

int dq__eval_ints(dq_client *c, const char *queue, unsigned flags, enum dq__script script, int nkeys,
                  int nargs, const char **argv, sync_ints *s) {
    return dq__eval_ints_on(c, queue, queue, flags, script, nkeys, nargs, argv, s);
}

int dq__shard_named(dq_client *c, const char *queue, unsigned i, unsigned shards, char *name) {
    if (dq__shard_name(queue, i, shards, name, DQ__SHARD_NAME_MAX + 1) != 0)
        return dq__fail(c, DQ_EPROTO, "queue %s: no name for shard %u of %u", queue, i, shards);
    return 0;
}

int dq__shard_at_init(dq_client *c, dq__shard_at *at, const char *queue, unsigned i, unsigned shards,
                      unsigned count) {
    int rc = dq__shard_named(c, queue, i, shards, at->name);
    if (rc) return rc;
    dq__fmt_i64(at->count, count);
    dq__keys_init(&at->k, at->name);
    return 0;
}

int dq__shard_for_id(dq_client *c, const char *queue, const char *id, int round, dq__shard_at *at,
                     unsigned *shards) {
    unsigned n;
    int rc = dq__shards_round(c, queue, round, &n);
    if (rc) return rc;
    if (shards) *shards = n;
    return dq__shard_at_init(c, at, queue, dq__shard_of_id(id, strlen(id), n), n, n);
}

/* ------------------------------------------------------------ what listings share */

void dq__open_shown(dq_client *c, const char *queue, const char *id, void **payload, size_t *len) {
    unsigned char *plain;
    size_t plain_len;
    if (!c->keyring || !dq__sealed(*payload, *len, NULL)) return;
    if (dq__open(c->keyring, queue, id, strlen(id), *payload, *len, &plain, &plain_len) != 0) return;
    plain[plain_len] = '\0';
    free(*payload);
    *payload = plain;
    *len = plain_len;
}

void dq_listed_free(dq_listed *items, size_t n) {
    if (!items) return;
    for (size_t i = 0; i < n; i++) {
        free(items[i].id);
        free(items[i].error);
        free(items[i].reason);
        free(items[i].payload);
    }
    free(items);
}
