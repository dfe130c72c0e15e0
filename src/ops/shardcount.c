/*
 * shardcount.c - what a client knows of its queues' shard counts.
 *
 * A client routes a queue's items by the shard count it believes (1 until
 * it learns otherwise). Every script that routes by it gets that count and
 * refuses, writing nothing, when the queue's own says otherwise
 * ("DQSHARDS n": lua/lib/20_counters.lua shards_refusal). The client then learns n
 * here and sends again. So the count costs no round trip of its own: a
 * client meets a sharded queue's count once, with one refused call, and a
 * change (allowed only on an empty queue) the same way. Every operation
 * learns and routes again the one way: dq__shards_relearn on each reply,
 * dq__shards_round before each round, bounded by DQ__SHARD_ROUNDS.
 *
 * A short list: clients use a few queues each.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct dq__shardcount {
    struct dq__shardcount *next;
    unsigned n;
    char queue[DQ_QUEUE_MAX + 1];
} dq__shardcount;

/* queue's entry, or NULL when the client keeps none (its count is 1). */
static dq__shardcount *entry_of(dq_client *c, const char *queue) {
    for (dq__shardcount *s = c->shardcounts; s; s = s->next)
        if (strcmp(s->queue, queue) == 0) return s;
    return NULL;
}

unsigned dq__shards_of(dq_client *c, const char *queue) {
    const dq__shardcount *s = entry_of(c, queue);
    return s ? s->n : 1;
}

void dq__shards_learn(dq_client *c, const char *queue, unsigned n) {
    dq__shardcount *s = entry_of(c, queue);
    if (s) {
        s->n = n;
        return;
    }
    if (n == 1) return; /* the default: nothing to keep */
    s = malloc(sizeof *s);
    if (!s) return; /* the next call is refused again, and tries again */
    s->n = n;
    snprintf(s->queue, sizeof s->queue, "%s", queue);
    s->next = c->shardcounts;
    c->shardcounts = s;
}

int dq__shards_refused(const redisReply *r, unsigned *n) {
    if (!r || r->type != REDIS_REPLY_ERROR || strncmp(r->str, "DQSHARDS ", 9) != 0) return 0;
    char *end;
    unsigned long v = strtoul(r->str + 9, &end, 10);
    if (end == r->str + 9 || v > DQ__SHARDS_MAX) return 0;
    *n = (unsigned)v;
    return 1;
}

int dq__shards_relearn(dq_client *c, const char *queue, const redisReply *reply, unsigned *told) {
    unsigned n;
    if (!dq__shards_refused(reply, &n)) return 0;
    dq__shards_learn(c, queue, n);
    if (told) *told = n;
    return 1;
}

int dq__shards_round(dq_client *c, const char *queue, int round, unsigned *n) {
    *n = dq__shards_of(c, queue);
    if (*n && round < DQ__SHARD_ROUNDS) return 0;
    return dq__fail(c, DQ_EBUSY, "queue %s is changing its shard count: try again", queue);
}

void dq__shards_free(dq_client *c) {
    while (c->shardcounts) {
        dq__shardcount *s = c->shardcounts;
        c->shardcounts = s->next;
        free(s);
    }
}
