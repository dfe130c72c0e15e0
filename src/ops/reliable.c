/*
 * reliable.c - what a consumer does with a delivery it holds a lease on:
 * ack, nack with backoff, release, extend. Every call is one script; the token check
 * happens inside it, so a stale token can never touch another consumer's
 * delivery. The dead letters are in dead.c, a queue's settings in qconfig.c.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"


static int check_lease(dq_client *c, const char *id, const char *token) {
    int rc = dq__check_id(c, id);
    if (!rc && (!token || !*token || strlen(token) > 64))
        rc = dq__fail(c, DQ_EINVAL, "invalid lease token '%s'", token ? token : "(null)");
    return rc;
}

static int check_lease_args(dq_client *c, const char *queue, const char *id, const char *token) {
    int rc = dq__check_queue(c, queue);
    return rc ? rc : check_lease(c, id, token);
}

int64_t dq_backoff_ms(const dq_client *c, int attempt) {
    /* The client's policy, or the library's default one (a queue's own
     * setting is applied inside the nack script instead). */
    int64_t base = c->opt.backoff_base_ms >= 0 ? c->opt.backoff_base_ms : 1000;
    int64_t cap = c->opt.backoff_max_ms >= 0 ? c->opt.backoff_max_ms : 600000;
    /* Closed form, no loop over the attempt (it comes from Redis): base
     * doubled attempt - 1 times, capped. cap < 2^42, so base (>= 1)
     * doubled 42 times passes it; below that, base > cap >> shift says
     * whether it would, without an overflow. */
    int64_t d = base;
    int shift = attempt > 1 ? attempt - 1 : 0;
    if (d > 0) d = shift >= 42 || d > (cap >> shift) ? cap : d << shift;
    if (d > cap) d = cap;
    /* Jitter in [1/2, 1] spreads the retries of items that failed together. */
    uint32_t half = (uint32_t)(d / 2 > UINT32_MAX - 1 ? UINT32_MAX - 1 : d / 2);
    return d - half + dq__random_uniform(half + 1);
}

/* ------------------------------------------------------------ async settle */

/* A "DQSHARDS n" refusal of a settle: learned, and reported as DQ_EBUSY.
 * The count cannot change while an item is in flight, so the client that
 * took it knows it already; another (a 'delayq ack' process) learns it
 * here, and the synchronous calls go again (settle_again). Returns that
 * code, or 0 for any other reply. */
static int shards_refused(dq_client *c, const redisReply *reply, const char *queue) {
    unsigned n;
    if (!dq__shards_relearn(c, queue, reply, &n)) return 0;
    return dq__fail(c, DQ_EBUSY, "queue %s: its shard count is now %u: settle again", queue, n);
}

typedef struct settle {
    dq_client *c;
    char queue[DQ_QUEUE_MAX + 1];
    dq__settle_cb *cb;
    void *privdata;
} settle;

static void settle_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    settle *s = privdata;
    int status;
    if (reply && reply->type == REDIS_REPLY_INTEGER) status = (int)reply->integer;
    else if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements >= 1)
        status = (int)dq__reply_int(reply->element[0]);
    else if (!(status = shards_refused(s->c, reply, s->queue)))
        status = dq__reply_failure(s->c, conn, reply, code, s->queue);
    /* Made but not confirmed by enough replicas: say so (the message is on
     * the client already). */
    if (code == DQ_ENOTDURABLE && status >= 0) status = code;
    s->c->callback_depth++;
    s->cb(s->c, status, s->privdata);
    s->c->callback_depth--;
    free(s);
}

static int settle_send(dq_client *c, const char *queue, const char *shard, enum dq__script script,
                       int nkeys, int nargs, const char **argv, const size_t *lens, dq__settle_cb *cb,
                       void *privdata) {
    settle *s = malloc(sizeof *s);
    if (!s) return dq__fail(c, DQ_ENOMEM, "out of memory");
    s->c = c;
    snprintf(s->queue, sizeof s->queue, "%s", queue);
    s->cb = cb;
    s->privdata = privdata;
    int rc = dq__op_eval(c, shard, DQ__ROUTE_WRITE, script, nkeys, nargs, argv, lens, settle_reply, s);
    if (rc) {
        free(s);
        return rc;
    }
    return 0;
}

/* An ack of up to DQ__ACK_BATCH deliveries: one script call per shard they
 * are in; the callback runs once, when the last call has answered. */
typedef struct ack_batch {
    dq_client *c;
    char queue[DQ_QUEUE_MAX + 1];
    size_t n;          /* deliveries asked for                             */
    int results[DQ__ACK_BATCH]; /* DQ_EINVAL for one not sent, else filled
                                   from the replies                         */
    int calls;         /* script calls still to answer                     */
    int status;        /* 1, or the first failure (DQ_ENOTDURABLE: made)   */
    dq__acks_cb *cb;
    void *privdata;
} ack_batch;

/* One shard's part of an ack_batch. */
typedef struct ack_call {
    ack_batch *b;
    size_t sent;
    size_t map[DQ__ACK_BATCH]; /* its deliveries' indices in the batch */
} ack_call;

static void ack_call_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    ack_call *a = privdata;
    ack_batch *b = a->b;
    if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == a->sent) {
        for (size_t k = 0; k < a->sent; k++) {
            int64_t v = dq__reply_int(reply->element[k]);
            /* 1 acked, 0 stale; -1: the script found the id or token
             * malformed (it judges each on its own, as we do). */
            b->results[a->map[k]] = v == 1 ? 1 : v == 0 ? 0 : DQ_EINVAL;
        }
        if (code == DQ_ENOTDURABLE && b->status == 1) b->status = code;
    } else {
        int status = shards_refused(b->c, reply, b->queue);
        if (!status) status = dq__reply_failure(b->c, conn, reply, code, b->queue);
        if (status >= 0) status = DQ_EPROTO;
        if (b->status == 1 || b->status == DQ_ENOTDURABLE) b->status = status;
    }
    free(a);
    if (--b->calls > 0) return;
    b->c->callback_depth++;
    int made = b->status == 1 || b->status == DQ_ENOTDURABLE;
    b->cb(b->c, b->status, made ? b->results : NULL, b->n, b->privdata);
    b->c->callback_depth--;
    free(b);
}

/* Sends the deliveries of shard `shard` (of `shards`) among ids/tokens; the
 * batch's results say which are invalid. Returns 0 (none, or sent) or a
 * negative code. */
static int ack_send_shard(ack_batch *b, const char *const *ids, const char *const *tokens,
                          unsigned shard, unsigned shards) {
    dq_client *c = b->c;
    char name[DQ__SHARD_NAME_MAX + 1], count[24];
    if (dq__shard_named(c, b->queue, shard, shards, name) != 0) return DQ_EPROTO;
    ack_call *a = malloc(sizeof *a);
    /* Some 66 KB at DQ__ACK_BATCH 256: too much for a caller's stack. */
    dq__ack_args *args = malloc(sizeof *args);
    if (!a || !args) {
        free(a), free(args);
        return dq__fail(c, DQ_ENOMEM, "out of memory");
    }
    a->b = b, a->sent = 0;
    dq__fmt_i64(count, shards);
    const dq__keys *k = dq__keys_of(c, name);
    dq__ack_args_init(args, k->z, k->counters, k->prefix, count);
    for (size_t i = 0; i < b->n; i++) {
        if (b->results[i] == DQ_EINVAL) continue;
        if (shards > 1 && dq__shard_of_id(ids[i], strlen(ids[i]), shards) != shard) continue;
        if (dq__ack_args_add(args, ids[i], tokens[i]) != 0) {
            free(a), free(args);
            return dq__fail(c, DQ_ENOMEM, DQ__ID_BUCKET_ERROR);
        }
        a->map[a->sent++] = i;
    }
    int rc = 0;
    if (a->sent > 0) {
        dq__ack_args_pack(args);
        rc = dq__op_eval(c, name, DQ__ROUTE_WRITE, DQ__LUA_ACK, 2, (int)args->n - 2, args->argv,
                         args->lens, ack_call_reply, a);
    }
    if (a->sent == 0 || rc) free(a);
    else b->calls++;
    free(args);
    return rc;
}

int dq__ack_many_async(dq_client *c, const char *queue, const char *const *ids,
                       const char *const *tokens, size_t n, dq__acks_cb *cb, void *privdata) {
    if (n == 0 || n > DQ__ACK_BATCH) return dq__fail(c, DQ_EINVAL, "ack 1 to 256 deliveries");
    int rc = dq__check_queue(c, queue);
    if (rc) return rc;
    unsigned shards;
    if ((rc = dq__shards_round(c, queue, 0, &shards)) != 0) return rc;
    ack_batch *b = malloc(sizeof *b);
    if (!b) return dq__fail(c, DQ_ENOMEM, "out of memory");
    b->c = c;
    snprintf(b->queue, sizeof b->queue, "%s", queue);
    b->n = n, b->calls = 0, b->status = 1, b->cb = cb, b->privdata = privdata;
    /* Each delivery on its own: an invalid id or token is not sent, and
     * gets its own result (DQ_EINVAL); the others are acked. */
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        int valid = ids && tokens && ids[i] && dq__id_valid(ids[i]) && tokens[i] && *tokens[i] &&
                    strlen(tokens[i]) <= 64;
        b->results[i] = valid ? 0 : DQ_EINVAL;
        bad += !valid;
    }
    if (bad == n) {
        free(b);
        return dq__fail(c, DQ_EINVAL, "invalid id or lease token for ack");
    }
    if (bad) dq__log(c, "queue %s: %zu of %zu acks not sent: invalid id or lease token", queue, bad, n);
    /* Replies come from the loop, never during a send: the count of calls
     * is complete before the first can end the batch. */
    for (unsigned s = 0; s < shards && !rc; s++) rc = ack_send_shard(b, ids, tokens, s, shards);
    if (b->calls == 0) {
        free(b);
        return rc ? rc : dq__fail(c, DQ_EINVAL, "invalid id or lease token for ack");
    }
    if (rc) b->status = rc; /* the calls sent report it through cb */
    return 0;
}

/* The nack script's call for a nack, or (release) a release: the script
 * then gives the take back uncounted (see lua/nack.lua). */
static int nack_send(dq_client *c, const char *queue, const char *id, const char *token,
                     int64_t delay_ms, const char *error, int release, dq__settle_cb *cb,
                     void *privdata) {
    int rc = check_lease_args(c, queue, id, token);
    if (rc) return rc;
    if (delay_ms > DQ_DUE_MAX_MS) return dq__fail(c, DQ_EINVAL, "nack delay out of range");
    dq__shard_at at;
    if ((rc = dq__shard_for_id(c, queue, id, 0, &at, NULL)) != 0) return rc;
    const dq__keys *k = &at.k;
    char delay[24], base[24], cap[24], frac[24];
    snprintf(delay, sizeof delay, "%" PRId64, delay_ms < 0 ? (int64_t)-1 : delay_ms);
    snprintf(base, sizeof base, "%" PRId64, c->opt.backoff_base_ms);
    snprintf(cap, sizeof cap, "%" PRId64, c->opt.backoff_max_ms);
    snprintf(frac, sizeof frac, "%.6f", dq__random_uniform(1000001) / 1e6);
    const char *argv[16] = {
        k->z,  k->counters,        k->dead, k->dead_times, k->config, k->prefix, k->chan, id, token,
        delay, error ? error : "", base,    cap,           frac,      at.count,  "1"};
    size_t lens[16];
    for (int i = 0; i < 16; i++) lens[i] = strlen(argv[i]);
    return settle_send(c, queue, at.name, DQ__LUA_NACK, 5, release ? 11 : 10, argv, lens, cb, privdata);
}

int dq__nack_async(dq_client *c, const char *queue, const char *id, const char *token, int64_t delay_ms,
                   const char *error, int attempt, dq__settle_cb *cb, void *privdata) {
    (void)attempt; /* the script knows it */
    return nack_send(c, queue, id, token, delay_ms, error, 0, cb, privdata);
}

/* ------------------------------------------------------------ sync */

typedef struct sync_settle {
    int done, status;
} sync_settle;

static void sync_settle_cb(dq_client *c, int status, void *privdata) {
    (void)c;
    sync_settle *s = privdata;
    s->status = status;
    s->done = 1;
}

static void sync_ack_cb(dq_client *c, int status, const int *results, size_t n, void *privdata) {
    (void)n;
    int r = results && status != DQ_ENOTDURABLE ? results[0] : status;
    if (r == DQ_EINVAL) r = dq__fail(c, DQ_EINVAL, "invalid id or lease token for ack");
    sync_settle_cb(c, r, privdata);
}

/* A synchronous settle goes again when it was refused for a shard count
 * the client has just learned (a process that did not take the item, such
 * as 'delayq ack', starts out assuming 1). */
static int settle_again(dq_client *c, const char *queue, int status, unsigned before, int round) {
    return status == DQ_EBUSY && round + 1 < DQ__SHARD_ROUNDS && dq__shards_of(c, queue) != before;
}

int dq_ack(dq_client *c, const char *queue, const char *id, const char *token) {
    if (dq__not_in_callback(c)) return DQ_EBUSY;
    for (int round = 0;; round++) {
        unsigned before = dq__shards_of(c, queue);
        sync_settle s = {0, 0};
        int rc = dq__ack_many_async(c, queue, &id, &token, 1, sync_ack_cb, &s);
        if (rc) return rc;
        dq__wait(c, &s.done);
        if (!settle_again(c, queue, s.status, before, round)) return s.status;
    }
}

/* dq_nack and dq_release: nack_send, waited for. */
static int nack_sync(dq_client *c, const char *queue, const char *id, const char *token,
                     int64_t delay_ms, const char *error, int release) {
    if (dq__not_in_callback(c)) return DQ_EBUSY;
    for (int round = 0;; round++) {
        unsigned before = dq__shards_of(c, queue);
        sync_settle s = {0, 0};
        int rc = nack_send(c, queue, id, token, delay_ms, error, release, sync_settle_cb, &s);
        if (rc) return rc;
        dq__wait(c, &s.done);
        if (!settle_again(c, queue, s.status, before, round)) return s.status;
    }
}

int dq_nack(dq_client *c, const char *queue, const char *id, const char *token, int64_t delay_ms,
            const char *error) {
    return nack_sync(c, queue, id, token, delay_ms, error, 0);
}

int dq_release(dq_client *c, const char *queue, const char *id, const char *token, int64_t delay_ms) {
    return nack_sync(c, queue, id, token, delay_ms < 0 ? 0 : delay_ms, NULL, 1);
}

int dq_extend(dq_client *c, const char *queue, const char *id, const char *token, int64_t lease_ms) {
    if (dq__not_in_callback(c)) return DQ_EBUSY;
    int rc = check_lease_args(c, queue, id, token);
    if (rc) return rc;
    if (lease_ms <= 0 || lease_ms > DQ_DUE_MAX_MS) return dq__fail(c, DQ_EINVAL, "lease must be > 0");
    char lease[24];
    snprintf(lease, sizeof lease, "%" PRId64, lease_ms);
    for (int round = 0;; round++) {
        dq__shard_at at;
        rc = dq__shard_for_id(c, queue, id, round, &at, NULL);
        if (rc) return rc;
        const char *argv[8] = {at.k.z, at.k.counters, at.k.prefix, id,
                               token,  lease,         at.k.chan,   at.count};
        dq__sync_ints s;
        rc = dq__eval_ints_on(c, queue, at.name, DQ__ROUTE_WRITE, DQ__LUA_EXTEND, 2, 6, argv, &s);
        if (rc != DQ__ESHARDS) return rc ? rc : (int)s.v[0];
    }
}
