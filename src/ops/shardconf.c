/*
 * shardconf.c - changing a queue's shard count, and dq_queue_config_set,
 * which writes the settings first (qconfig.c) and then the count.
 *
 * Allowed only on an empty queue, so no item is ever left in a shard the
 * new count does not have. Each step is one script call on one shard
 * (lua/shards.lua):
 *   0. begin: the queue's own keys (its home) record the change, from the
 *      count they hold to the new one. One change at a time: a second is
 *      refused while the first is recent.
 *   1. lock every shard of the present layout: each checks it holds
 *      nothing and sets its count to 0, which refuses every call routed by
 *      a count (offers too) while the change is made. If one refuses, the
 *      shards locked so far get their count back, the record goes, and the
 *      change fails naming what the shard holds. Then the home records
 *      that every old shard is locked.
 *   2. set the new count on every shard of the new layout (which get the
 *      queue's settings first), on the old shards and on the home: a
 *      client still routing by the old count is refused ("DQSHARDS n") and
 *      learns the new one wherever it calls. The record goes.
 * Then every old shard gets a wake token and a wake-up announcement, so
 * blocked takes and idle schedulers run their scripts now and learn it too.
 *
 * A change cut off half way (its client died) leaves shards at 0, which
 * refuse offers. The next change of the count, a minute after the cut one
 * began, takes it over first: if every old shard was locked, none holds an
 * item, and it goes forward to the count the cut change wanted; if not, an
 * old shard not yet locked may hold items, and it goes back to the old
 * count. Both only write counts, so doing either twice is harmless.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* Runs shards.lua's op with count n on shard i of `shards` of queue (the
 * home when shards is 1); its reply into *s when s is not NULL. */
static int shard_step_ints(dq_client *c, const char *queue, unsigned i, unsigned shards, const char *op,
                           unsigned n, dq__sync_ints *out) {
    dq__shard_at at;
    int rc = dq__shard_at_init(c, &at, queue, i, shards, n);
    if (rc) return rc;
    const char *argv[5] = {at.k.counters, at.k.ready, at.k.dead_times, op, at.count};
    dq__sync_ints s;
    return dq__eval_ints_on(c, queue, at.name, DQ__ROUTE_WRITE, DQ__LUA_SHARDS, 3, 2, argv,
                            out ? out : &s);
}

static int shard_step(dq_client *c, const char *queue, unsigned i, unsigned shards, const char *op,
                      unsigned n) {
    return shard_step_ints(c, queue, i, shards, op, n, NULL);
}

/* A write that was made, durable or not. */
static int made(int rc) { return rc == 0 || rc == DQ_ENOTDURABLE; }

/* A wake token and a wake-up announcement on shard i of `shards`. */
static void wake_shard(dq_client *c, const char *queue, unsigned i, unsigned shards) {
    char name[DQ__SHARD_NAME_MAX + 1];
    if (dq__shard_name(queue, i, shards, name, sizeof name) != 0) return;
    dq__keys k;
    dq__keys_init(&k, name);
    const char *push[3] = {"RPUSH", k.signal, "1"};
    size_t push_lens[3] = {5, strlen(k.signal), 1};
    (void)dq__op_command(c, name, 3, push, push_lens, dq__ignore_reply, NULL);
    const char *pub[3] = {"SPUBLISH", k.chan, "0"};
    size_t pub_lens[3] = {8, strlen(k.chan), 1};
    (void)dq__op_command(c, name, 3, pub, pub_lens, dq__ignore_reply, NULL);
}

/* Step 1 on every shard of `old`; undone on failure (the record too). */
static int lock_all(dq_client *c, const char *queue, unsigned old) {
    for (unsigned i = 0; i < old; i++) {
        int rc = shard_step(c, queue, i, old, "lock", old);
        if (!made(rc)) {
            char why[DQ__ERRSTR_MAX];
            snprintf(why, sizeof why, "%s", c->errstr);
            for (unsigned j = 0; j < i; j++) (void)shard_step(c, queue, j, old, "set", old);
            (void)shard_step(c, queue, 0, 1, "end", 1);
            if (rc == DQ__ESHARDS)
                return dq__fail(c, DQ_EBUSY, "queue %s: shard %u of %u says another count: try again",
                                queue, i, old);
            return dq__fail(c, rc, "%s", why);
        }
    }
    return shard_step(c, queue, 0, 1, "locked", 1);
}

/* Writes count n on every shard of a layout of `shards` (the home when 1);
 * sets *not_durable when a write was not confirmed. 0 or a failure. */
static int set_layout(dq_client *c, const char *queue, unsigned shards, unsigned n, int *not_durable) {
    for (unsigned i = 0; i < shards; i++) {
        int rc = shard_step(c, queue, i, shards, "set", n);
        if (!made(rc)) return rc;
        *not_durable |= rc == DQ_ENOTDURABLE;
    }
    return 0;
}

/* The change's end: the record goes, the client routes by n, and the old
 * shards wake their takes and schedulers. */
static int end_change(dq_client *c, const char *queue, unsigned old, unsigned n, int not_durable) {
    int rc = shard_step(c, queue, 0, 1, "end", 1);
    if (!made(rc)) return rc;
    dq__shards_learn(c, queue, n);
    for (unsigned i = 0; i < old; i++) wake_shard(c, queue, i, old);
    return not_durable || rc == DQ_ENOTDURABLE ? DQ_ENOTDURABLE : 0;
}

/* Step 2: count n on the new shards (the settings q first), the old ones
 * and the home, then the end. Returns 0, DQ_ENOTDURABLE or a failure. */
static int set_all(dq_client *c, const char *queue, unsigned old, unsigned n, const dq_queue_config *q) {
    int rc = dq__config_copy(c, queue, n, q), not_durable = rc == DQ_ENOTDURABLE;
    if (made(rc)) rc = set_layout(c, queue, n, n, &not_durable);
    if (made(rc)) rc = set_layout(c, queue, old, n, &not_durable);
    if (made(rc)) rc = set_layout(c, queue, 1, n, &not_durable); /* the home */
    return made(rc) ? end_change(c, queue, old, n, not_durable) : rc;
}

/* Finishes a change whose client died (see the top of the file): forward
 * to `to` if every shard of `from` was locked, else back to `from` (the
 * home is one of those shards when from is 1, and untouched otherwise). */
static int take_over(dq_client *c, const char *queue, unsigned from, unsigned to, int locked,
                     const dq_queue_config *q) {
    dq__log(c, "queue %s: a change of the shard count from %u to %u was cut off: %s", queue, from, to,
            locked ? "finishing it" : "undoing it");
    if (locked) return set_all(c, queue, from, to, q);
    int not_durable = 0, rc = set_layout(c, queue, from, from, &not_durable);
    return made(rc) ? end_change(c, queue, from, from, not_durable) : rc;
}

int dq__shards_change(dq_client *c, const char *queue, unsigned n, const dq_queue_config *q) {
    if (n < 1 || n > DQ__SHARDS_MAX)
        return dq__fail(c, DQ_EINVAL, "shard count %u out of range: 1..%d", n, DQ__SHARDS_MAX);
    for (int round = 0; round < 2; round++) { /* a take-over, then this change */
        dq__sync_ints s;
        int rc = shard_step_ints(c, queue, 0, 1, "begin", n, &s);
        if (!made(rc)) return rc;
        if (s.count < 2 || s.v[0] < 1 || s.v[0] > 2 || s.v[1] < 1 || s.v[1] > DQ__SHARDS_MAX)
            return dq__fail(c, DQ_EPROTO, "queue %s: unexpected reply to the start of a shard change",
                            queue);
        if (s.v[0] == 2) { /* a cut-off change, ours now */
            if (s.count != 4 || s.v[2] < 1 || s.v[2] > DQ__SHARDS_MAX)
                return dq__fail(c, DQ_EPROTO, "queue %s: unexpected shard change record", queue);
            rc = take_over(c, queue, (unsigned)s.v[1], (unsigned)s.v[2], s.v[3] == 1, q);
            if (!made(rc)) return rc;
            continue;
        }
        unsigned old = (unsigned)s.v[1];
        if (old == n) return shard_step(c, queue, 0, 1, "end", 1);
        rc = lock_all(c, queue, old);
        if (!made(rc)) return rc;
        return set_all(c, queue, old, n, q);
    }
    return dq__fail(c, DQ_EBUSY, "queue %s: its shard count keeps changing: try again", queue);
}

int dq_queue_config_set(dq_client *c, const char *queue, const dq_queue_config *set,
                        dq_queue_config *out) {
    dq_queue_config now;
    int rc = dq__config_settings_set(c, queue, set, &now);
    if (rc && rc != DQ_ENOTDURABLE) return rc;
    /* Even to the count the home holds: a cut-off change is finished or
     * undone on the way. */
    if (set->shards > 0) {
        int change = dq__shards_change(c, queue, (unsigned)set->shards, &now);
        if (change && change != DQ_ENOTDURABLE) return change;
        if (change) rc = change;
        now.shards = set->shards;
    }
    if (out) *out = now;
    return rc;
}
