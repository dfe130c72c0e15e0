/*
 * shardcount.c - what a client knows of its queues' shard counts.
 *
 * A client routes a queue's items by the shard count it believes (1 until
 * it learns otherwise). Every script that routes by it gets that count and
 * refuses, writing nothing, when the queue's own says otherwise
 * ("DQSHARDS n": lua/lib/20_counters.lua shards_refusal). The client then learns n
 * here and sends again. So the count costs no round trip of its own: a
 * client meets a sharded queue's count once, with one refused call, and a
 * change (allowed only on an empty queue) the same way.
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

unsigned dq__shards_of(dq_client *c, const char *queue) {
    for (dq__shardcount *s = c->shardcounts; s; s = s->next)
        if (strcmp(s->queue, queue) == 0) return s->n;
    return 1;
}

void dq__shards_learn(dq_client *c, const char *queue, unsigned n) {
    for (dq__shardcount *s = c->shardcounts; s; s = s->next) {
        if (strcmp(s->queue, queue) == 0) {
            s->n = n;
            return;
        }
    }
    if (n == 1) return; /* the default: nothing to keep */
    dq__shardcount *s = malloc(sizeof *s);
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

void dq__shards_free(dq_client *c) {
    while (c->shardcounts) {
        dq__shardcount *s = c->shardcounts;
        c->shardcounts = s->next;
        free(s);
    }
}
