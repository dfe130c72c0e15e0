/*
 * dead.c - the dead letters of a queue: count, list, redrive and purge,
 * across its shards. Items land here from the scripts (max attempts spent,
 * or a lease that ran out on its last attempt); every call is one run of
 * dead.lua per shard, so a redrive moves letters back atomically.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define DEAD_BATCH "500" /* dead letters one redrive/purge run handles */

/* One call of dead.lua on shard i of `shards` of queue. */
static int dead_ints(dq_client *c, const char *queue, unsigned i, unsigned shards, const char *op,
                     const char *arg, dq__sync_ints *s) {
    dq__shard_at at;
    int rc = dq__shard_at_init(c, &at, queue, i, shards, shards);
    if (rc) return rc;
    const dq__keys *k = &at.k;
    const char *argv[10] = {k->dead, k->dead_times,  k->ready, k->signal, k->counters, k->prefix,
                            op,      arg ? arg : "", "",       at.count};
    unsigned flags = strcmp(op, "count") == 0 ? 0 : DQ__ROUTE_WRITE;
    enum dq__script script = flags ? DQ__LUA_DEAD : DQ__LUA_DEAD_RO; /* count only reads */
    return dq__eval_ints_on(c, queue, at.name, flags, script, 5, 5, argv, s);
}

int dq_dead_count(dq_client *c, const char *queue, int64_t *n) {
    int rc = dq__not_in_callback(c);
    if (!rc) rc = dq__check_queue(c, queue);
    for (int round = 0; !rc; round++) {
        unsigned shards;
        if ((rc = dq__shards_round(c, queue, round, &shards)) != 0) break;
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
        int rc = dq__shards_round(c, queue, again, &shards);
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
        if ((rc = dq__shards_round(c, queue, round, &shards)) != 0) return rc;
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

static int letter_from(dq_dead_letter *d, redisReply **f) {
    for (int i = 0; i < 7; i++)
        if (f[i]->type != REDIS_REPLY_STRING && f[i]->type != REDIS_REPLY_INTEGER) return DQ_EPROTO;
    if (f[0]->type != REDIS_REPLY_STRING || f[4]->type != REDIS_REPLY_STRING ||
        f[5]->type != REDIS_REPLY_STRING || f[6]->type != REDIS_REPLY_STRING)
        return DQ_EPROTO;
    d->id = dq__reply_dup(f[0]);
    d->died_ms = dq__reply_int(f[1]);
    d->attempts = (int)dq__reply_int(f[2]);
    d->due_ms = dq__reply_int(f[3]);
    d->reason = dq__reply_dup(f[4]);
    d->error = dq__reply_dup(f[5]);
    d->payload = dq__reply_dup(f[6]);
    d->payload_len = f[6]->len;
    return d->id && d->reason && d->error && d->payload ? 0 : DQ_ENOMEM;
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
    if (dq__shards_relearn(l->c, l->queue, reply, NULL)) {
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
    for (size_t i = 0; i < l->n; i++)
        dq__open_shown(l->c, l->queue, l->out[i].id, &l->out[i].payload, &l->out[i].payload_len);
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
    const char *argv[10] = {k->dead,   k->dead_times, k->ready, k->signal, k->counters,
                            k->prefix, "list",        off,      lim,       at.count};
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

int dq_dead_list(dq_client *c, const char *queue, size_t offset, size_t limit, dq_dead_letter **out,
                 size_t *n) {
    *out = NULL;
    *n = 0;
    int rc = dq__not_in_callback(c);
    if (!rc) rc = dq__check_queue(c, queue);
    if (!rc && (limit == 0 || limit > 100000 || offset > INT32_MAX))
        rc = dq__fail(c, DQ_EINVAL, "list between 1 and 100000 dead letters");
    if (rc) return rc;
    for (int round = 0;; round++) {
        unsigned shards;
        if ((rc = dq__shards_round(c, queue, round, &shards)) != 0) return rc;
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
