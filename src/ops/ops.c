/*
 * ops.c - what every operation shares: the checks of queue names and ids,
 * the helpers every operation sends through (dq__op_eval, dq__wait), which
 * keep gathered offers (offer.c) ahead of later commands, the errors of
 * replies, and the small synchronous operations on one id or one queue:
 * cancel, lookup (with or without the payload) and stats. Each is one
 * script call on the node that serves the queue, the loop run until its
 * reply. Also what listings share (a sealed payload shown opened, freeing
 * a listing), which lookup, dead.c and observe.c all use.
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
        return dq__fail(c, DQ_EINVAL, "invalid id '%s': use 1 to %d printable ASCII characters, no spaces",
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
            return dq__fail(c, code, "%.*s (queue %s needs keys dq:{%s}:* and channel dq:{%s}:w: "
                            "see 'delayq acl')", len, reply->str, queue, queue, queue);
        if (dq__error_class(reply->str) == DQ__ERR_NOPERM_SCRIPT)
            return dq__fail(c, code, "%.*s (queue %s: a command or key of its scripts is not "
                            "granted: 'delayq acl' prints the rule delayq needs)", len, reply->str, queue);
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

int dq__op_eval(dq_client *c, const char *queue, unsigned flags, enum dq__script script,
                int nkeys, int nargs, const char **argv, const size_t *argvlen,
                dq__reply_fn *fn, void *privdata) {
    if (!c->router) return dq__fail(c, DQ_ECONNECT, "not connected: call dq_connect first");
    offers_first(c); /* keep call order */
    return dq__eval(c, queue, flags, script, nkeys, nargs, argv, argvlen, fn, privdata);
}

int dq__op_command(dq_client *c, const char *queue, int argc, const char **argv,
                   const size_t *lens, dq__reply_fn *fn, void *privdata) {
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

/* Checks shared by the synchronous calls on a queue and an optional id. */
static int check_sync(dq_client *c, const char *queue, const char *id, int need_id);

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
        if (t && t->type == REDIS_REPLY_STRING && t->len < sizeof s->text) memcpy(s->text, t->str, t->len);
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

int dq__eval_ints(dq_client *c, const char *queue, unsigned flags, enum dq__script script,
                  int nkeys, int nargs, const char **argv, sync_ints *s) {
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

int dq_cancel(dq_client *c, const char *queue, const char *id) {
    int bad = check_sync(c, queue, id, 1);
    if (bad) return bad;
    for (int round = 0;; round++) {
        dq__shard_at at;
        int rc = dq__shard_for_id(c, queue, id, round, &at, NULL);
        if (rc) return rc;
        const char *argv[5] = {at.k.z, at.k.counters, at.k.prefix, id, at.count};
        sync_ints s;
        rc = dq__eval_ints_on(c, queue, at.name, DQ__ROUTE_WRITE, DQ__LUA_CANCEL, 2, 3, argv, &s);
        if (rc != DQ__ESHARDS) return rc ? rc : (int)s.v[0];
    }
}

int dq_lookup(dq_client *c, const char *queue, const char *id, dq_item_info *info) {
    int bad = check_sync(c, queue, id, 1);
    if (bad) return bad;
    sync_ints s;
    for (int round = 0;; round++) {
        dq__shard_at at;
        int rc = dq__shard_for_id(c, queue, id, round, &at, NULL);
        if (rc) return rc;
        const char *argv[6] = {at.k.z, at.k.dead, at.k.counters, at.k.prefix, id, at.count};
        rc = dq__eval_ints_on(c, queue, at.name, 0, DQ__LUA_LOOKUP, 3, 3, argv, &s);
        if (rc == 0) break;
        if (rc != DQ__ESHARDS) return rc;
    }
    if (s.count < 3 || s.count > 5 || s.v[0] < 0 || s.v[0] > DQ_STATE_DEAD)
        return dq__fail(c, DQ_EPROTO, "unexpected lookup reply");
    info->state = (int)s.v[0];
    info->due_ms = s.v[1];
    info->attempts = (int)s.v[2];
    memcpy(info->holder, s.text, sizeof info->holder); /* "" unless the reply had one */
    info->overdue_ms = s.count == 5 && s.v[4] > 0 ? s.v[4] : 0;
    return 0;
}

/* Room an envelope takes beyond what it seals (src/util/seal.c: magic, key id,
 * 24-byte nonce, 16-byte tag): a payload cut to payload_max plus this still
 * opens when what it seals fits payload_max. */
#define SEAL_ROOM (DQ__SEAL_MAGIC_LEN + DQ__KEY_ID_LEN + 24 + 16)

typedef struct item_call {
    dq_client *c;
    const char *queue;
    int done, status;
    dq_listed *it;
} item_call;

/* lookup.lua's reply with a payload: {state, due_ms, attempts, ...,
 * payload, whole length}. The payload is read from the two last elements,
 * so elements the script puts after attempts are passed over. */
static int item_decode(item_call *s, const redisReply *reply) {
    size_t n = reply->elements;
    if (n < 5 || reply->element[n - 2]->type != REDIS_REPLY_STRING) return DQ_EPROTO;
    int64_t state = dq__reply_int(reply->element[0]), whole = dq__reply_int(reply->element[n - 1]);
    if (state < 0 || state > DQ_STATE_DEAD) return DQ_EPROTO;
    dq_listed *it = s->it;
    it->state = (int)state;
    int64_t at = dq__reply_int(reply->element[1]);
    if (state == DQ_STATE_PENDING) it->due_ms = at;
    if (state == DQ_STATE_IN_FLIGHT) it->lease_end_ms = at;
    it->attempts = (int)dq__reply_int(reply->element[2]);
    /* In flight: the holder its take named follows (lookup.lua), before the
     * payload's two elements. */
    const redisReply *h = n >= 7 && state == DQ_STATE_IN_FLIGHT ? reply->element[3] : NULL;
    if (h && h->type == REDIS_REPLY_STRING && h->len <= DQ_HOLDER_MAX) memcpy(it->holder, h->str, h->len);
    if (whole < 0) return 0; /* not read */
    if (!(it->payload = dq__reply_dup(reply->element[n - 2]))) return DQ_ENOMEM;
    it->payload_len = reply->element[n - 2]->len;
    it->payload_full_len = whole > (int64_t)it->payload_len ? (size_t)whole : it->payload_len;
    return 0;
}

static void item_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    item_call *s = privdata;
    s->done = 1;
    if (dq__shards_relearn(s->c, s->queue, reply, NULL)) {
        s->status = DQ__ESHARDS;
    } else if (reply && reply->type == REDIS_REPLY_ARRAY) {
        int rc = item_decode(s, reply);
        s->status = rc ? dq__fail(s->c, rc, rc == DQ_ENOMEM ? "out of memory" : "unexpected lookup reply") : 0;
    } else {
        s->status = dq__reply_failure(s->c, conn, reply, code, s->queue);
    }
}

/* A whole payload sealed with a key c holds is shown opened, then cut to
 * payload_max; payload_full_len is the size of what is shown whole. */
static void item_shown(dq_client *c, const char *queue, dq_listed *it, size_t payload_max) {
    if (!it->payload) return;
    if (it->payload_full_len == it->payload_len) {
        dq__open_shown(c, queue, it->id, &it->payload, &it->payload_len);
        it->payload_full_len = it->payload_len;
    }
    if (payload_max && it->payload_len > payload_max) {
        it->payload_len = payload_max;
        char *less = realloc(it->payload, payload_max + 1);
        if (less) it->payload = less; /* else the larger block stays: still valid */
        ((char *)it->payload)[payload_max] = '\0';
    }
}

int dq_lookup_item(dq_client *c, const char *queue, const char *id, size_t payload_max, dq_listed **out) {
    *out = NULL;
    int bad = check_sync(c, queue, id, 1);
    if (bad) return bad;
    char cut[24];
    dq__fmt_i64(cut, payload_max ? (int64_t)(payload_max + SEAL_ROOM) : 0);
    dq_listed *it = calloc(1, sizeof *it);
    if (!it || !(it->id = strdup(id)) || !(it->error = strdup("")) || !(it->reason = strdup(""))) {
        dq_listed_free(it, 1);
        return dq__fail(c, DQ_ENOMEM, "out of memory");
    }
    for (int round = 0;; round++) {
        dq__shard_at at;
        int rc = dq__shard_for_id(c, queue, id, round, &at, NULL);
        if (rc) {
            dq_listed_free(it, 1);
            return rc;
        }
        const char *argv[7] = {at.k.z, at.k.dead, at.k.counters, at.k.prefix, id, at.count, cut};
        size_t lens[7];
        for (int i = 0; i < 7; i++) lens[i] = strlen(argv[i]);
        item_call s = {c, queue, 0, 0, it};
        rc = dq__op_eval(c, at.name, 0, DQ__LUA_LOOKUP, 3, 4, argv, lens, item_reply, &s);
        if (!rc) {
            dq__wait(c, &s.done);
            rc = s.status;
        }
        if (rc == 0) break;
        if (rc != DQ__ESHARDS) {
            dq_listed_free(it, 1);
            return rc;
        }
    }
    item_shown(c, queue, it, payload_max);
    *out = it;
    return 0;
}

/* The stats of one shard (the queue itself when shards is 1) into *st;
 * *told gets the count its counters hold. */
static int shard_stats(dq_client *c, const char *queue, unsigned i, unsigned shards, dq_stats *st,
                       unsigned *told) {
    dq__shard_at at;
    int rc = dq__shard_at_init(c, &at, queue, i, shards, shards);
    if (rc) return rc;
    const dq__keys *k = &at.k;
    const char *argv[6] = {k->z, k->ready, k->aside, k->counters, k->dead_times, k->prefix};
    sync_ints s;
    rc = dq__eval_ints_on(c, queue, at.name, 0, DQ__LUA_STATS, 5, 1, argv, &s);
    if (rc) return rc;
    if (s.count != 10 || s.v[6] < 0 || s.v[6] > DQ__SHARDS_MAX)
        return dq__fail(c, DQ_EPROTO, "unexpected stats reply");
    st->pending = s.v[0];
    st->ready = s.v[1];
    st->next_due_in_ms = s.v[2];
    st->set_aside = s.v[3];
    st->in_flight = s.v[4];
    st->dead = s.v[5];
    st->schedulers = s.v[7];
    st->overdue_ms = s.v[8];
    st->exists = s.v[9];
    *told = (unsigned)s.v[6];
    return 0;
}

int dq__shards_fetch(dq_client *c, const char *queue, unsigned *n) {
    dq_stats st;
    int rc = shard_stats(c, queue, 0, 1, &st, n);
    if (!rc) dq__shards_learn(c, queue, *n);
    return rc;
}

/* A sharded queue's stats are the sums of its shards' (the earliest next
 * due time, the most schedulers, the longest overdue), read shard by shard. A shard that says another count than the
 * one read by starts the sum over with that count. */
int dq_get_stats(dq_client *c, const char *queue, dq_stats *st) {
    int bad = check_sync(c, queue, NULL, 0);
    if (bad) return bad;
    for (int round = 0;; round++) {
        unsigned shards;
        int rc = dq__shards_round(c, queue, round, &shards);
        if (rc) return rc;
        unsigned told = shards;
        dq_stats sum = {0, 0, -1, 0, 0, 0, 0, 0, 0};
        for (unsigned i = 0; i < shards && told == shards; i++) {
            dq_stats one;
            if ((rc = shard_stats(c, queue, i, shards, &one, &told)) != 0) return rc;
            sum.pending += one.pending, sum.ready += one.ready, sum.set_aside += one.set_aside;
            sum.in_flight += one.in_flight, sum.dead += one.dead;
            if (one.next_due_in_ms >= 0 && (sum.next_due_in_ms < 0 || one.next_due_in_ms < sum.next_due_in_ms))
                sum.next_due_in_ms = one.next_due_in_ms;
            /* A scheduler of the queue beats on each shard it moves. */
            if (one.schedulers > sum.schedulers) sum.schedulers = one.schedulers;
            if (one.overdue_ms > sum.overdue_ms) sum.overdue_ms = one.overdue_ms;
            if (one.exists) sum.exists = 1;
        }
        if (told == shards) {
            *st = sum;
            return 0;
        }
        dq__shards_learn(c, queue, told);
    }
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
