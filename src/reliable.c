/*
 * reliable.c - what a consumer does with a delivery it holds a lease on
 * (ack, nack with backoff, extend), and the dead letters of a queue (count,
 * list, redrive, purge). Every call is one script; the token check happens
 * inside it, so a stale token can never touch another consumer's delivery.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define DEAD_BATCH "500" /* dead letters one redrive/purge run handles */

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
    if (!dq__shards_refused(reply, &n)) return 0;
    dq__shards_learn(c, queue, n);
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
    if (!a) return dq__fail(c, DQ_ENOMEM, "out of memory");
    a->b = b, a->sent = 0;
    dq__fmt_i64(count, shards);
    const dq__keys *k = dq__keys_of(c, name);
    dq__ack_args args;
    dq__ack_args_init(&args, k->z, k->counters, k->prefix, count);
    for (size_t i = 0; i < b->n; i++) {
        if (b->results[i] == DQ_EINVAL) continue;
        if (shards > 1 && dq__shard_of_id(ids[i], strlen(ids[i]), shards) != shard) continue;
        a->map[a->sent++] = i;
        dq__ack_args_add(&args, ids[i], tokens[i]);
    }
    if (a->sent == 0) {
        free(a);
        return 0;
    }
    int rc = dq__op_eval(c, name, DQ__ROUTE_WRITE, DQ__LUA_ACK, 2, (int)args.n - 2, args.argv, args.lens,
                         ack_call_reply, a);
    if (rc) free(a);
    else b->calls++;
    return rc;
}

int dq__ack_many_async(dq_client *c, const char *queue, const char *const *ids,
                       const char *const *tokens, size_t n, dq__acks_cb *cb, void *privdata) {
    if (n == 0 || n > DQ__ACK_BATCH) return dq__fail(c, DQ_EINVAL, "ack 1 to 64 deliveries");
    int rc = dq__check_queue(c, queue);
    if (rc) return rc;
    unsigned shards = dq__shards_of(c, queue);
    if (!shards) return dq__fail(c, DQ_EBUSY, "queue %s is changing its shard count", queue);
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
    if (bad)
        dq__log(c, "queue %s: %zu of %zu acks not sent: invalid id or lease token", queue, bad, n);
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

int dq__nack_async(dq_client *c, const char *queue, const char *id, const char *token,
                   int64_t delay_ms, const char *error, int attempt, dq__settle_cb *cb,
                   void *privdata) {
    int rc = check_lease_args(c, queue, id, token);
    if (rc) return rc;
    (void)attempt; /* the script knows it */
    if (delay_ms > DQ_DUE_MAX_MS) return dq__fail(c, DQ_EINVAL, "nack delay out of range");
    dq__shard_at at;
    if ((rc = dq__shard_for_id(c, queue, id, 0, &at, NULL)) != 0) return rc;
    const dq__keys *k = &at.k;
    char delay[24], base[24], cap[24], frac[24];
    snprintf(delay, sizeof delay, "%" PRId64, delay_ms < 0 ? (int64_t)-1 : delay_ms);
    snprintf(base, sizeof base, "%" PRId64, c->opt.backoff_base_ms);
    snprintf(cap, sizeof cap, "%" PRId64, c->opt.backoff_max_ms);
    snprintf(frac, sizeof frac, "%.6f", dq__random_uniform(1000001) / 1e6);
    const char *argv[15] = {k->z, k->counters, k->dead, k->dead_times, k->config, k->prefix, k->chan,
                            id, token, delay, error ? error : "", base, cap, frac, at.count};
    size_t lens[15];
    for (int i = 0; i < 15; i++) lens[i] = strlen(argv[i]);
    return settle_send(c, queue, at.name, DQ__LUA_NACK, 5, 10, argv, lens, cb, privdata);
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
    return status == DQ_EBUSY && round < 2 && dq__shards_of(c, queue) != before;
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

int dq_nack(dq_client *c, const char *queue, const char *id, const char *token, int64_t delay_ms,
            const char *error) {
    if (dq__not_in_callback(c)) return DQ_EBUSY;
    for (int round = 0;; round++) {
        unsigned before = dq__shards_of(c, queue);
        sync_settle s = {0, 0};
        int rc = dq__nack_async(c, queue, id, token, delay_ms, error, 0, sync_settle_cb, &s);
        if (rc) return rc;
        dq__wait(c, &s.done);
        if (!settle_again(c, queue, s.status, before, round)) return s.status;
    }
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
        const char *argv[8] = {at.k.z, at.k.counters, at.k.prefix, id, token, lease, at.k.chan, at.count};
        dq__sync_ints s;
        rc = dq__eval_ints_on(c, queue, at.name, DQ__ROUTE_WRITE, DQ__LUA_EXTEND, 2, 6, argv, &s);
        if (rc != DQ__ESHARDS) return rc ? rc : (int)s.v[0];
    }
}

/* ------------------------------------------------------------ dead letters */

/* One call of dead.lua on shard i of `shards` of queue. */
static int dead_ints(dq_client *c, const char *queue, unsigned i, unsigned shards, const char *op,
                     const char *arg, dq__sync_ints *s) {
    dq__shard_at at;
    int rc = dq__shard_at_init(c, &at, queue, i, shards, shards);
    if (rc) return rc;
    const dq__keys *k = &at.k;
    const char *argv[10] = {k->dead, k->dead_times, k->ready, k->signal, k->counters,
                            k->prefix, op, arg ? arg : "", "", at.count};
    unsigned flags = strcmp(op, "count") == 0 ? 0 : DQ__ROUTE_WRITE;
    enum dq__script script = flags ? DQ__LUA_DEAD : DQ__LUA_DEAD_RO; /* count only reads */
    return dq__eval_ints_on(c, queue, at.name, flags, script, 5, 5, argv, s);
}

/* The shard count a dead-letter call goes by (DQ_EBUSY while it changes). */
static int dead_shards(dq_client *c, const char *queue, int round, unsigned *shards) {
    *shards = dq__shards_of(c, queue);
    if (*shards && round < 3) return 0;
    return dq__fail(c, DQ_EBUSY, "queue %s is changing its shard count: try again", queue);
}

int dq_dead_count(dq_client *c, const char *queue, int64_t *n) {
    int rc = dq__not_in_callback(c);
    if (!rc) rc = dq__check_queue(c, queue);
    for (int round = 0; !rc; round++) {
        unsigned shards;
        if ((rc = dead_shards(c, queue, round, &shards)) != 0) break;
        int64_t sum = 0;
        for (unsigned i = 0; i < shards && !rc; i++) {
            dq__sync_ints s;
            rc = dead_ints(c, queue, i, shards, "count", NULL, &s);
            if (!rc) sum += s.v[0];
        }
        if (rc == DQ__ESHARDS) { /* learned: count again */
            rc = 0;
            continue;
        }
        if (!rc) *n = sum;
        break;
    }
    return rc;
}

/* Both redrive-all and purge run in bounded batches until nothing is left,
 * shard by shard; the count is bounded too, so a queue refilled meanwhile
 * cannot loop us. */
static int64_t dead_batches(dq_client *c, const char *queue, const char *op) {
    int not_durable = 0;
    for (int again = 0;; again++) {
        unsigned shards;
        int rc = dead_shards(c, queue, again, &shards);
        if (rc) return rc;
        int64_t total = 0;
        for (unsigned i = 0; i < shards && !rc; i++) {
            for (int round = 0; round < 100000; round++) {
                dq__sync_ints s;
                rc = dead_ints(c, queue, i, shards, op, DEAD_BATCH, &s);
                if (rc == DQ_ENOTDURABLE) not_durable = 1, rc = 0;
                if (rc) break;
                if (s.count != 2) return dq__fail(c, DQ_EPROTO, "unexpected dead-letter reply");
                total += s.v[1];
                if (s.v[0] == 0) break;
            }
        }
        if (rc == DQ__ESHARDS) continue; /* learned: go over the shards again */
        if (rc) return rc;
        /* Done, but some batch was not confirmed (the message is on c). */
        return not_durable ? DQ_ENOTDURABLE : total;
    }
}

int64_t dq_dead_redrive(dq_client *c, const char *queue, const char *id) {
    int rc = dq__not_in_callback(c);
    if (!rc) rc = dq__check_queue(c, queue);
    if (!rc && id) rc = dq__check_id(c, id);
    if (rc) return rc;
    if (!id) return dead_batches(c, queue, "redrive_all");
    for (int round = 0;; round++) {
        unsigned shards;
        if ((rc = dead_shards(c, queue, round, &shards)) != 0) return rc;
        dq__sync_ints s;
        rc = dead_ints(c, queue, dq__shard_of_id(id, strlen(id), shards), shards, "redrive", id, &s);
        if (rc != DQ__ESHARDS) return rc ? rc : s.v[0];
    }
}

int64_t dq_dead_purge(dq_client *c, const char *queue) {
    int rc = dq__not_in_callback(c);
    if (!rc) rc = dq__check_queue(c, queue);
    if (rc) return rc;
    return dead_batches(c, queue, "purge");
}

typedef struct dead_list {
    dq_client *c;
    const char *queue;
    int done, status;
    dq_dead_letter *out;
    size_t n;
} dead_list;

static char *dup_str(const redisReply *r) {
    char *s = malloc(r->len + 1);
    if (s) {
        memcpy(s, r->str, r->len);
        s[r->len] = '\0';
    }
    return s;
}

static int letter_from(dq_dead_letter *d, redisReply **f) {
    for (int i = 0; i < 7; i++)
        if (f[i]->type != REDIS_REPLY_STRING && f[i]->type != REDIS_REPLY_INTEGER) return DQ_EPROTO;
    if (f[0]->type != REDIS_REPLY_STRING || f[4]->type != REDIS_REPLY_STRING ||
        f[5]->type != REDIS_REPLY_STRING || f[6]->type != REDIS_REPLY_STRING)
        return DQ_EPROTO;
    d->id = dup_str(f[0]);
    d->died_ms = dq__reply_int(f[1]);
    d->attempts = (int)dq__reply_int(f[2]);
    d->due_ms = dq__reply_int(f[3]);
    d->reason = dup_str(f[4]);
    d->error = dup_str(f[5]);
    d->payload = dup_str(f[6]);
    d->payload_len = f[6]->len;
    return d->id && d->reason && d->error && d->payload ? 0 : DQ_ENOMEM;
}

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

int dq__dead_letters_decode(const redisReply *reply, dq_dead_letter **out, size_t *n) {
    *out = NULL;
    *n = 0;
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements % 7) return DQ_EPROTO;
    size_t count = reply->elements / 7;
    *out = calloc(count ? count : 1, sizeof **out);
    if (!*out) return DQ_ENOMEM;
    for (size_t i = 0; i < count; i++) {
        *n = i + 1;
        int rc = letter_from(&(*out)[i], reply->element + 7 * i);
        if (rc) return rc;
    }
    return 0;
}

static void dead_list_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    dead_list *l = privdata;
    l->done = 1;
    unsigned told;
    if (dq__shards_refused(reply, &told)) {
        dq__shards_learn(l->c, l->queue, told);
        l->status = DQ__ESHARDS;
        return;
    }
    if (!reply || reply->type == REDIS_REPLY_ERROR) {
        l->status = dq__reply_failure(l->c, conn, reply, code, l->queue);
        return;
    }
    int rc = dq__dead_letters_decode(reply, &l->out, &l->n);
    if (rc) {
        l->status = dq__fail(l->c, rc, rc == DQ_ENOMEM ? "out of memory" : "undecodable dead letter");
        return;
    }
    for (size_t i = 0; i < l->n; i++) dq__open_shown(l->c, l->queue, l->out[i].id, &l->out[i].payload, &l->out[i].payload_len);
}

/* One page of shard i's dead letters appended to *out (*n of them). */
static int dead_list_one(dq_client *c, const char *queue, unsigned i, unsigned shards, size_t offset,
                         size_t limit, dq_dead_letter **out, size_t *n) {
    dq__shard_at at;
    int rc = dq__shard_at_init(c, &at, queue, i, shards, shards);
    if (rc) return rc;
    const dq__keys *k = &at.k;
    char off[24], lim[24];
    snprintf(off, sizeof off, "%zu", offset);
    snprintf(lim, sizeof lim, "%zu", limit);
    const char *argv[10] = {k->dead, k->dead_times, k->ready, k->signal, k->counters, k->prefix, "list", off,
                            lim, at.count};
    size_t lens[10];
    for (int j = 0; j < 10; j++) lens[j] = strlen(argv[j]);
    dead_list l = {c, queue, 0, 0, NULL, 0};
    rc = dq__op_eval(c, at.name, 0, DQ__LUA_DEAD_RO, 5, 5, argv, lens, dead_list_reply, &l);
    if (rc) return rc;
    dq__wait(c, &l.done);
    if (l.status) {
        dq_dead_letters_free(l.out, l.n);
        return l.status;
    }
    if (!*out) {
        *out = l.out, *n = l.n;
        return 0;
    }
    dq_dead_letter *all = realloc(*out, (*n + l.n + 1) * sizeof *all);
    if (!all) {
        dq_dead_letters_free(l.out, l.n);
        return dq__fail(c, DQ_ENOMEM, "out of memory");
    }
    memcpy(all + *n, l.out, l.n * sizeof *all);
    free(l.out); /* the letters' strings moved to all */
    *out = all, *n += l.n;
    return 0;
}

/* The dead letters of all the shards, shard after shard, as one list that
 * offset and limit page through (a shard's count tells how many it skips). */
static int dead_list_shards(dq_client *c, const char *queue, unsigned shards, size_t offset,
                            size_t limit, dq_dead_letter **out, size_t *n) {
    for (unsigned i = 0; i < shards && *n < limit; i++) {
        if (shards > 1) {
            dq__sync_ints s;
            int rc = dead_ints(c, queue, i, shards, "count", NULL, &s);
            if (rc) return rc;
            if ((int64_t)offset >= s.v[0]) {
                offset -= (size_t)s.v[0];
                continue;
            }
        }
        int rc = dead_list_one(c, queue, i, shards, offset, limit - *n, out, n);
        if (rc) return rc;
        offset = 0;
    }
    if (!*out) *out = calloc(1, sizeof **out); /* an empty list, as before */
    return *out ? 0 : dq__fail(c, DQ_ENOMEM, "out of memory");
}

int dq_dead_list(dq_client *c, const char *queue, size_t offset, size_t limit,
                 dq_dead_letter **out, size_t *n) {
    *out = NULL;
    *n = 0;
    int rc = dq__not_in_callback(c);
    if (!rc) rc = dq__check_queue(c, queue);
    if (!rc && (limit == 0 || limit > 100000 || offset > INT32_MAX))
        rc = dq__fail(c, DQ_EINVAL, "list between 1 and 100000 dead letters");
    if (rc) return rc;
    for (int round = 0;; round++) {
        unsigned shards;
        if ((rc = dead_shards(c, queue, round, &shards)) != 0) return rc;
        rc = dead_list_shards(c, queue, shards, offset, limit, out, n);
        if (rc != DQ__ESHARDS) return rc;
        dq_dead_letters_free(*out, *n); /* learned the count: list again */
        *out = NULL;
        *n = 0;
    }
}

void dq_dead_letters_free(dq_dead_letter *d, size_t n) {
    if (!d) return;
    for (size_t i = 0; i < n; i++) {
        free(d[i].id);
        free(d[i].reason);
        free(d[i].error);
        free(d[i].payload);
    }
    free(d);
}

/* ------------------------------------------------------------ queue settings */

static const char *const config_fields[4] = {"lease_ms", "max_attempts", "backoff_base_ms",
                                             "backoff_max_ms"};

/* Runs config.lua on one set of keys: the queue's own (with its counters,
 * for the shard count) or a shard's (settings only). */
static int config_one(dq_client *c, const char *queue, const char *name, int home,
                      char values[4][24], dq__sync_ints *s) {
    dq__keys k;
    dq__keys_init(&k, name);
    const char *argv[10] = {k.config, k.counters};
    int nkeys = home ? 2 : 1;
    for (int i = 0; i < 4; i++)
        argv[nkeys + 2 * i] = config_fields[i], argv[nkeys + 1 + 2 * i] = values[i];
    int rc = dq__eval_ints_on(c, queue, name, DQ__ROUTE_WRITE, DQ__LUA_CONFIG, nkeys, 8, argv, s);
    if (rc && rc != DQ_ENOTDURABLE) return rc;
    if (s->count != 5 || s->v[4] < 0 || s->v[4] > DQ__SHARDS_MAX)
        return dq__fail(c, DQ_EPROTO, "unexpected queue settings reply");
    return rc;
}

int dq__config_copy(dq_client *c, const char *queue, unsigned shards, const dq_queue_config *q) {
    const int64_t v[4] = {q->lease_ms, q->max_attempts, q->backoff_base_ms, q->backoff_max_ms};
    char values[4][24];
    for (int i = 0; i < 4; i++) snprintf(values[i], sizeof values[i], "%" PRId64, v[i]);
    int rc = 0;
    for (unsigned i = 0; i < shards && shards > 1 && (rc == 0 || rc == DQ_ENOTDURABLE); i++) {
        char name[DQ__SHARD_NAME_MAX + 1];
        if (dq__shard_named(c, queue, i, shards, name) != 0) return DQ_EPROTO;
        dq__sync_ints s;
        rc = config_one(c, queue, name, 0, values, &s);
    }
    return rc;
}

/* values: what to write per field: "" leaves it, "-" resets it. The
 * queue's own keys hold its settings; a sharded queue's shards get a copy
 * (their scripts read their own), written after them. */
static int config_call(dq_client *c, const char *queue, char values[4][24], dq_queue_config *out) {
    int rc = dq__not_in_callback(c);
    if (!rc) rc = dq__check_queue(c, queue);
    if (rc) return rc;
    dq__sync_ints s;
    rc = config_one(c, queue, queue, 1, values, &s);
    if (rc && rc != DQ_ENOTDURABLE) return rc;
    dq_queue_config now = {s.v[0], s.v[1], s.v[2], s.v[3], s.v[4]};
    unsigned shards = (unsigned)s.v[4];
    if (shards) dq__shards_learn(c, queue, shards);
    int writes = 0;
    for (int i = 0; i < 4; i++) writes |= values[i][0] != '\0';
    if (writes && shards > 1) {
        int copy = dq__config_copy(c, queue, shards, &now);
        if (copy && copy != DQ_ENOTDURABLE) return copy;
        if (copy) rc = copy;
    }
    if (out) *out = now;
    return rc;
}

int dq_queue_config_get(dq_client *c, const char *queue, dq_queue_config *out) {
    char values[4][24] = {"", "", "", ""};
    return config_call(c, queue, values, out);
}

int dq_queue_config_set(dq_client *c, const char *queue, const dq_queue_config *set,
                        dq_queue_config *out) {
    const int64_t v[4] = {set->lease_ms, set->max_attempts, set->backoff_base_ms,
                          set->backoff_max_ms};
    char values[4][24];
    for (int i = 0; i < 4; i++) {
        if (v[i] < DQ_QUEUE_SETTING || v[i] > DQ_DUE_MAX_MS)
            return dq__fail(c, DQ_EINVAL, "queue setting %s out of range", config_fields[i]);
        if (v[i] < 0) values[i][0] = '\0';
        else snprintf(values[i], sizeof values[i], "%" PRId64, v[i]);
    }
    if (set->shards < DQ_QUEUE_SETTING || set->shards > DQ__SHARDS_MAX)
        return dq__fail(c, DQ_EINVAL, "shard count %" PRId64 " out of range: 1..%d", set->shards,
                        DQ__SHARDS_MAX);
    dq_queue_config now;
    int rc = config_call(c, queue, values, &now);
    if (rc && rc != DQ_ENOTDURABLE) return rc;
    /* Even to the count the home holds: a cut-off change (shardconf.c) is
     * finished or undone on the way. */
    if (set->shards > 0) {
        int change = dq__shards_change(c, queue, (unsigned)set->shards, &now);
        if (change && change != DQ_ENOTDURABLE) return change;
        if (change) rc = change;
        now.shards = set->shards;
    }
    if (out) *out = now;
    return rc;
}

int dq_queue_config_reset(dq_client *c, const char *queue) {
    char values[4][24] = {"-", "-", "-", "-"};
    return config_call(c, queue, values, NULL);
}
