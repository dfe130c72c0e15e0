/*
 * epochs.c - what a client knows of its queues' epochs: noticing a queue
 * whose keys vanished.
 *
 * A queue's counters hash holds its epoch, the server time (us) when an
 * offer or a setting first made its keys (lua/lib/20_counters.lua). The
 * scripts a long-running process calls anyway return it with their replies
 * (take, transfer, metrics), so noticing costs no round trip: a queue (or
 * shard) whose epoch was E and now reads 0 or another lost its keys to a
 * restart without persistence, an eviction or a flush, with every pending,
 * in-flight and dead item and its settings. The client says so once per
 * loss, in its log, and counts it (dq_metrics.wiped); dq_queues_seen lists
 * the queues it watches, so a queue that vanished is still looked at.
 *
 * A short list: clients use a few queues each. Names are the keys' (a shard
 * of a sharded queue is watched on its own).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct dq__epoch {
    struct dq__epoch *next;
    int64_t epoch;  /* the last seen; 0: none (vanished, or never made) */
    uint64_t wiped; /* times an epoch seen was followed by none or another */
    char queue[DQ__SHARD_NAME_MAX + 1];
} dq__epoch;

static dq__epoch *find(dq_client *c, const char *queue) {
    for (dq__epoch *e = c->epochs; e; e = e->next)
        if (strcmp(e->queue, queue) == 0) return e;
    return NULL;
}

void dq__epoch_seen(dq_client *c, const char *queue, int64_t epoch) {
    dq__epoch *e = find(c, queue);
    if (!e) {
        if (epoch <= 0) return; /* never saw one: nothing to lose */
        e = calloc(1, sizeof *e);
        if (!e) return; /* noticed on the next reply */
        snprintf(e->queue, sizeof e->queue, "%s", queue);
        e->next = c->epochs;
        c->epochs = e;
    } else if (e->epoch > 0 && epoch != e->epoch) {
        e->wiped++;
        if (epoch > 0)
            dq__log(c,
                    "queue %s: its keys were lost and made anew (epoch %" PRId64 ", was %" PRId64 "): "
                    "Redis restarted without persistence, evicted them or was flushed; its pending, "
                    "in-flight and dead items and its settings are gone",
                    queue, epoch, e->epoch);
        else
            dq__log(
                c,
                "queue %s: its keys vanished (epoch %" PRId64 " gone): Redis restarted without "
                "persistence, evicted them or was flushed; its pending, in-flight and dead items and "
                "its settings are gone",
                queue, e->epoch);
    }
    e->epoch = epoch > 0 ? epoch : 0;
}

int dq__epoch_reply(dq_client *c, const char *queue, const redisReply *r) {
    if (!r || r->type != REDIS_REPLY_INTEGER || r->integer < 0) return -1;
    dq__epoch_seen(c, queue, r->integer);
    return 0;
}

uint64_t dq__epoch_wipes(dq_client *c, const char *queue) {
    dq__epoch *e = find(c, queue);
    return e ? e->wiped : 0;
}

int dq_queues_seen(dq_client *c, char ***names, size_t *n) {
    *names = NULL;
    *n = 0;
    if (!c) return DQ_EINVAL;
    size_t k = 0;
    for (dq__epoch *e = c->epochs; e; e = e->next) k += !strchr(e->queue, '~');
    char **out = calloc(k ? k : 1, sizeof *out);
    if (!out) return DQ_ENOMEM;
    size_t i = 0;
    for (dq__epoch *e = c->epochs; e && i < k; e = e->next) {
        if (strchr(e->queue, '~')) continue; /* a shard: its queue has an entry of its own */
        if (!(out[i] = strdup(e->queue))) {
            dq_queues_free(out, i);
            return DQ_ENOMEM;
        }
        i++;
    }
    *names = out;
    *n = k;
    return 0;
}

void dq__epochs_free(dq_client *c) {
    while (c->epochs) {
        dq__epoch *e = c->epochs;
        c->epochs = e->next;
        free(e);
    }
}
