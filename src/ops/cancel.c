/*
 * cancel.c - dq_cancel: an item removed before it is taken. One script call
 * (lua/cancel.lua) on the shard that holds the id, routed by the shard
 * count the client knows, and sent again when the script names another.
 */
#include "internal.h"

int dq_cancel(dq_client *c, const char *queue, const char *id) {
    int bad = dq__check_sync(c, queue, id);
    if (bad) return bad;
    for (int round = 0;; round++) {
        dq__shard_at at;
        int rc = dq__shard_for_id(c, queue, id, round, &at, NULL);
        if (rc) return rc;
        const char *argv[5] = {at.k.z, at.k.counters, at.k.prefix, id, at.count};
        dq__sync_ints s;
        rc = dq__eval_ints_on(c, queue, at.name, DQ__ROUTE_WRITE, DQ__LUA_CANCEL, 2, 3, argv, &s);
        if (rc != DQ__ESHARDS) return rc ? rc : (int)s.v[0];
    }
}
