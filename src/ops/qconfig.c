/*
 * qconfig.c - a queue's own settings (lease, max attempts, backoff): get,
 * set and reset, kept in every shard of the queue by config.lua so each
 * shard's scripts read their own copy. The shard count is shardconf.c's,
 * which calls down here for the settings (dq__config_settings_set).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static const char *const config_fields[4] = {"lease_ms", "max_attempts", "backoff_base_ms",
                                             "backoff_max_ms"};

/* Runs config.lua on one set of keys: the queue's own or a shard's, with
 * its counters (the shard count; the mark that settings were set). */
static int config_one(dq_client *c, const char *queue, const char *name, char values[4][24],
                      dq__sync_ints *s) {
    dq__keys k;
    dq__keys_init(&k, name);
    const char *argv[10] = {k.config, k.counters};
    int nkeys = 2;
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
        rc = config_one(c, queue, name, values, &s);
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
    rc = config_one(c, queue, queue, values, &s);
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

int dq__config_settings_set(dq_client *c, const char *queue, const dq_queue_config *set,
                            dq_queue_config *now) {
    const int64_t v[4] = {set->lease_ms, set->max_attempts, set->backoff_base_ms, set->backoff_max_ms};
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
    return config_call(c, queue, values, now);
}

int dq_queue_config_reset(dq_client *c, const char *queue) {
    char values[4][24] = {"-", "-", "-", "-"};
    return config_call(c, queue, values, NULL);
}
