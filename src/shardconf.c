/*
 * shardconf.c - changing a queue's shard count (dq_queue_config_set with
 * shards).
 *
 * Allowed only on an empty queue, so no item is ever left in a shard the
 * new count does not have. In two steps, each one script call per shard
 * (lua/shards.lua):
 *   1. lock every shard of the present layout: each checks it holds
 *      nothing and sets its count to 0, which refuses every call routed by
 *      a count (offers too) while the change is made. If one refuses, the
 *      shards locked so far get their count back, and the change fails
 *      naming what the shard holds.
 *   2. set the new count on every shard of the new layout (which get the
 *      queue's settings first), on the old shards and on the queue's own
 *      keys: a client still routing by the old count is refused ("DQSHARDS
 *      n") and learns the new one wherever it calls.
 * Then every old shard gets a wake token and a wake-up announcement, so
 * blocked takes and idle schedulers run their scripts now and learn it too.
 * A change cut off half way (the client dies) leaves shards at 0: the
 * queue refuses offers until the change is run again.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* Runs shards.lua's op with count n on shard i of `shards` of queue. */
static int shard_step(dq_client *c, const char *queue, unsigned i, unsigned shards, const char *op,
                      unsigned n) {
    char name[DQ__SHARD_NAME_MAX + 1], count[24];
    if (dq__shard_name(queue, i, shards, name, sizeof name) != 0)
        return dq__fail(c, DQ_EPROTO, "queue %s: no name for shard %u of %u", queue, i, shards);
    dq__fmt_i64(count, n);
    dq__keys k;
    dq__keys_init(&k, name);
    const char *argv[5] = {k.counters, k.ready, k.dead_times, op, count};
    dq__sync_ints s;
    return dq__eval_ints_on(c, queue, name, DQ__ROUTE_WRITE, DQ__LUA_SHARDS, 3, 2, argv, &s);
}

static void ignore_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    (void)conn, (void)reply, (void)code, (void)privdata;
}

/* A wake token and a wake-up announcement on shard i of `shards`. */
static void wake_shard(dq_client *c, const char *queue, unsigned i, unsigned shards) {
    char name[DQ__SHARD_NAME_MAX + 1];
    if (dq__shard_name(queue, i, shards, name, sizeof name) != 0) return;
    dq__keys k;
    dq__keys_init(&k, name);
    const char *push[3] = {"RPUSH", k.signal, "1"};
    size_t push_lens[3] = {5, strlen(k.signal), 1};
    (void)dq__op_command(c, name, 3, push, push_lens, ignore_reply, NULL);
    const char *pub[3] = {"SPUBLISH", k.chan, "0"};
    size_t pub_lens[3] = {8, strlen(k.chan), 1};
    (void)dq__op_command(c, name, 3, pub, pub_lens, ignore_reply, NULL);
}

/* Step 1 on every shard of `old`; undone on failure. */
static int lock_all(dq_client *c, const char *queue, unsigned old) {
    for (unsigned i = 0; i < old; i++) {
        int rc = shard_step(c, queue, i, old, "lock", old);
        if (rc && rc != DQ_ENOTDURABLE) {
            char why[DQ__ERRSTR_MAX];
            snprintf(why, sizeof why, "%s", c->errstr);
            for (unsigned j = 0; j < i; j++) (void)shard_step(c, queue, j, old, "set", old);
            if (rc == DQ__ESHARDS) return rc; /* learned: the caller starts over */
            return dq__fail(c, rc, "%s", why);
        }
    }
    return 0;
}

int dq__shards_change(dq_client *c, const char *queue, unsigned n, const dq_queue_config *q) {
    if (n < 1 || n > DQ__SHARDS_MAX)
        return dq__fail(c, DQ_EINVAL, "shard count %u out of range: 1..%d", n, DQ__SHARDS_MAX);
    for (int round = 0; round < 3; round++) {
        unsigned old = dq__shards_of(c, queue);
        if (old == 0)
            return dq__fail(c, DQ_EBUSY, "queue %s is changing its shard count (or a change was cut "
                            "off): try again", queue);
        if (old == n) return 0;
        int rc = lock_all(c, queue, old);
        if (rc == DQ__ESHARDS) continue;
        if (rc) return rc;
        int not_durable = 0;
        rc = dq__config_copy(c, queue, n, q);
        not_durable |= rc == DQ_ENOTDURABLE;
        for (unsigned i = 0; i < n && (rc == 0 || rc == DQ_ENOTDURABLE); i++) {
            rc = shard_step(c, queue, i, n, "set", n);
            not_durable |= rc == DQ_ENOTDURABLE;
        }
        for (unsigned i = 0; i < old && (rc == 0 || rc == DQ_ENOTDURABLE); i++) {
            rc = shard_step(c, queue, i, old, "set", n);
            not_durable |= rc == DQ_ENOTDURABLE;
        }
        if (rc == 0 || rc == DQ_ENOTDURABLE) rc = shard_step(c, queue, 0, 1, "set", n); /* the home */
        if (rc && rc != DQ_ENOTDURABLE) return rc;
        dq__shards_learn(c, queue, n);
        for (unsigned i = 0; i < old; i++) wake_shard(c, queue, i, old);
        return not_durable ? DQ_ENOTDURABLE : 0;
    }
    return dq__fail(c, DQ_EBUSY, "queue %s: its shard count keeps changing: try again", queue);
}
