/*
 * ackargs.c - the arguments an ack script call takes (lua/ack.lua): the
 * items in groups of one token prefix and suffix.
 *
 * A lease token is "<request>.<i>.<score>": the take's request, the item's
 * block in the lease record, and the record's score (src/take.c). A worker
 * acks a take's items together, so cutting each token into prefix
 * "<request>.", middle "<i>" and suffix ".<score>", and sending the prefix
 * and suffix once for the run of items that share them, lets the script
 * find the record once per group and each item by its block number, with
 * no token to take apart per item. The cut is a plain split of the token's
 * bytes (prefix .. middle .. suffix is the token), so any token, ours or
 * not, goes through: one without two dots is a group of its own, its whole
 * text the prefix, and the script looks it up through the id index.
 */
#include <string.h>

#include "internal.h"

/* Where token's last two dots split it: *mid at the byte after the one
 * before last, *suffix at the last; both at the end (no split) when the
 * token has fewer than two dots. */
static void split_token(const char *token, size_t len, size_t *mid, size_t *suffix) {
    *mid = *suffix = len;
    const char *last = memrchr(token, '.', len);
    if (!last) return;
    const char *before = memrchr(token, '.', (size_t)(last - token));
    if (!before) return;
    *mid = (size_t)(before - token) + 1;
    *suffix = (size_t)(last - token);
}

static void add_arg(dq__ack_args *a, const char *s, size_t len) {
    a->argv[a->n] = s;
    a->lens[a->n++] = len;
}

void dq__ack_args_init(dq__ack_args *a, const char *z, const char *counters, const char *prefix,
                       const char *shards) {
    a->n = a->items = a->groups = a->group_at = a->in_group = 0;
    add_arg(a, z, strlen(z));
    add_arg(a, counters, strlen(counters));
    add_arg(a, prefix, strlen(prefix));
    add_arg(a, shards, strlen(shards));
}

/* Whether the current group is the one of a token cut at mid and suffix. */
static int in_current_group(const dq__ack_args *a, const char *token, size_t len, size_t mid,
                            size_t suffix) {
    if (a->groups == 0) return 0;
    size_t h = a->group_at;
    return a->lens[h] == mid && memcmp(a->argv[h], token, mid) == 0 &&
           a->lens[h + 1] == len - suffix && memcmp(a->argv[h + 1], token + suffix, len - suffix) == 0;
}

void dq__ack_args_add(dq__ack_args *a, const char *id, const char *token) {
    size_t len = strlen(token), mid, suffix;
    split_token(token, len, &mid, &suffix);
    if (!in_current_group(a, token, len, mid, suffix)) {
        a->group_at = a->n, a->in_group = 0;
        add_arg(a, token, mid);
        add_arg(a, token + suffix, len - suffix);
        add_arg(a, a->counts[a->groups++], 0); /* its length set below, per item */
    }
    a->in_group++;
    a->lens[a->group_at + 2] = dq__fmt_i64(a->counts[a->groups - 1], (int64_t)a->in_group);
    char *bucket = a->buckets[a->items++];
    add_arg(a, token + mid, suffix - mid);
    add_arg(a, id, strlen(id));
    add_arg(a, bucket, dq__fmt_i64(bucket, dq__id_bucket(id)));
}
