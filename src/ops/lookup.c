/*
 * lookup.c - what one item is now: dq_lookup (its state, due time,
 * attempts and holder) and dq_lookup_item (the same with its payload, a
 * sealed one shown opened when the client holds its key, cut to a size).
 * One script call (lua/lookup.lua) on the shard that holds the id, sent
 * again when the script names another shard count.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int dq_lookup(dq_client *c, const char *queue, const char *id, dq_item_info *info) {
    int bad = dq__check_sync(c, queue, id);
    if (bad) return bad;
    dq__sync_ints s;
    for (int round = 0;; round++) {
        dq__shard_at at;
        int rc = dq__shard_for_id(c, queue, id, round, &at, NULL);
        if (rc) return rc;
        const char *argv[6] = {at.k.z, at.k.dead, at.k.counters, at.k.prefix, id, at.count};
        rc = dq__eval_ints_on(c, queue, at.name, 0, DQ__LUA_LOOKUP, 3, 3, argv, &s);
        if (rc == 0) break;
        if (rc != DQ__ESHARDS) return rc;
    }
    if (s.count < 3 || s.count > 5 || s.v[0] < 0 || s.v[0] > DQ_STATE_DEAD)
        return dq__fail(c, DQ_EPROTO, "unexpected lookup reply");
    info->state = (int)s.v[0];
    info->due_ms = s.v[1];
    info->attempts = (int)s.v[2];
    memcpy(info->holder, s.text, sizeof info->holder); /* "" unless the reply had one */
    info->overdue_ms = s.count == 5 && s.v[4] > 0 ? s.v[4] : 0;
    return 0;
}

typedef struct item_call {
    dq_client *c;
    const char *queue;
    int done, status;
    dq_listed *it;
} item_call;

/* lookup.lua's reply with a payload: {state, due_ms, attempts, ...,
 * payload, whole length}. The payload is read from the two last elements,
 * so elements the script puts after attempts are passed over. */
static int item_decode(item_call *s, const redisReply *reply) {
    size_t n = reply->elements;
    if (n < 5 || reply->element[n - 2]->type != REDIS_REPLY_STRING) return DQ_EPROTO;
    int64_t state = dq__reply_int(reply->element[0]), whole = dq__reply_int(reply->element[n - 1]);
    if (state < 0 || state > DQ_STATE_DEAD) return DQ_EPROTO;
    dq_listed *it = s->it;
    it->state = (int)state;
    int64_t at = dq__reply_int(reply->element[1]);
    if (state == DQ_STATE_PENDING) it->due_ms = at;
    if (state == DQ_STATE_IN_FLIGHT) it->lease_end_ms = at;
    it->attempts = (int)dq__reply_int(reply->element[2]);
    /* In flight: the holder its take named follows (lookup.lua), before the
     * payload's two elements. */
    const redisReply *h = n >= 7 && state == DQ_STATE_IN_FLIGHT ? reply->element[3] : NULL;
    if (h && h->type == REDIS_REPLY_STRING && h->len <= DQ_HOLDER_MAX)
        memcpy(it->holder, h->str, h->len);
    if (whole < 0) return 0; /* not read */
    if (!(it->payload = dq__reply_dup(reply->element[n - 2]))) return DQ_ENOMEM;
    it->payload_len = reply->element[n - 2]->len;
    it->payload_full_len = whole > (int64_t)it->payload_len ? (size_t)whole : it->payload_len;
    return 0;
}

static void item_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    item_call *s = privdata;
    s->done = 1;
    if (dq__shards_relearn(s->c, s->queue, reply, NULL)) {
        s->status = DQ__ESHARDS;
    } else if (reply && reply->type == REDIS_REPLY_ARRAY) {
        int rc = item_decode(s, reply);
        s->status =
            rc ? dq__fail(s->c, rc, rc == DQ_ENOMEM ? "out of memory" : "unexpected lookup reply") : 0;
    } else {
        s->status = dq__reply_failure(s->c, conn, reply, code, s->queue);
    }
}

/* A whole payload sealed with a key c holds is shown opened, then cut to
 * payload_max; payload_full_len is the size of what is shown whole. */
static void item_shown(dq_client *c, const char *queue, dq_listed *it, size_t payload_max) {
    if (!it->payload) return;
    if (it->payload_full_len == it->payload_len) {
        dq__open_shown(c, queue, it->id, &it->payload, &it->payload_len);
        it->payload_full_len = it->payload_len;
    }
    if (payload_max && it->payload_len > payload_max) {
        it->payload_len = payload_max;
        char *less = realloc(it->payload, payload_max + 1);
        if (less) it->payload = less; /* else the larger block stays: still valid */
        ((char *)it->payload)[payload_max] = '\0';
    }
}

int dq_lookup_item(dq_client *c, const char *queue, const char *id, size_t payload_max,
                   dq_listed **out) {
    *out = NULL;
    int bad = dq__check_sync(c, queue, id);
    if (bad) return bad;
    /* Read payload_max plus what an envelope adds to what it seals: a
     * sealed payload cut there still opens when what it seals fits. */
    char cut[24];
    dq__fmt_i64(cut, payload_max ? (int64_t)(payload_max + DQ__SEAL_OVERHEAD) : 0);
    dq_listed *it = calloc(1, sizeof *it);
    if (!it || !(it->id = strdup(id)) || !(it->error = strdup("")) || !(it->reason = strdup(""))) {
        dq_listed_free(it, 1);
        return dq__fail(c, DQ_ENOMEM, "out of memory");
    }
    for (int round = 0;; round++) {
        dq__shard_at at;
        int rc = dq__shard_for_id(c, queue, id, round, &at, NULL);
        if (rc) {
            dq_listed_free(it, 1);
            return rc;
        }
        const char *argv[7] = {at.k.z, at.k.dead, at.k.counters, at.k.prefix, id, at.count, cut};
        size_t lens[7];
        for (int i = 0; i < 7; i++) lens[i] = strlen(argv[i]);
        item_call s = {c, queue, 0, 0, it};
        rc = dq__op_eval(c, at.name, 0, DQ__LUA_LOOKUP, 3, 4, argv, lens, item_reply, &s);
        if (!rc) {
            dq__wait(c, &s.done);
            rc = s.status;
        }
        if (rc == 0) break;
        if (rc != DQ__ESHARDS) {
            dq_listed_free(it, 1);
            return rc;
        }
    }
    item_shown(c, queue, it, payload_max);
    *out = it;
    return 0;
}
