/*
 * stats.c - dq_get_stats: a queue's counts, read by lua/stats.lua from the
 * queue's own keys, summed over a sharded queue's shards; and
 * dq__shards_fetch, the shard count read the same way by the calls that
 * route by no item.
 */
#include "internal.h"

/* The stats of one shard (the queue itself when shards is 1) into *st;
 * *told gets the count its counters hold. */
static int shard_stats(dq_client *c, const char *queue, unsigned i, unsigned shards, dq_stats *st,
                       unsigned *told) {
    dq__shard_at at;
    int rc = dq__shard_at_init(c, &at, queue, i, shards, shards);
    if (rc) return rc;
    const dq__keys *k = &at.k;
    const char *argv[6] = {k->z, k->ready, k->aside, k->counters, k->dead_times, k->prefix};
    dq__sync_ints s;
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
    int bad = dq__check_sync(c, queue, NULL);
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
            if (one.next_due_in_ms >= 0 &&
                (sum.next_due_in_ms < 0 || one.next_due_in_ms < sum.next_due_in_ms))
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
