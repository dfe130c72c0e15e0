/*
 * ackargs.c - the arguments an ack script call takes (lua/ack.lua): the
 * items in groups of one token prefix and suffix.
 *
 * A lease token is "<request>.<i>.<score>": the take's request, the item's
 * block in the lease record, and the record's score (src/ops/take.c). A worker
 * acks a take's items together, so cutting each token into prefix
 * "<request>.", middle "<i>" and suffix ".<score>", and sending the prefix
 * and suffix once for the run of items that share them, lets the script
 * find the record once per group and each item by its block number, with
 * no token to take apart per item. The cut is a plain split of the token's
 * bytes (prefix .. middle .. suffix is the token), so any token, ours or
 * not, goes through: one without two dots is a group of its own, its whole
 * text the prefix, and the script looks it up through the id index.
 *
 * Packing (dq__ack_args_pack): a group that names blocks 1..k in order, as
 * a worker acks a whole take, goes as two arguments, the ids joined and the
 * buckets joined, instead of three per item. Redis makes a string of every
 * argument and the script checks each item's; packed, the script compares
 * the ids with its record's in one piece.
 */
#include <string.h>

#include "util.h"

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
    return a->lens[h] == mid && memcmp(a->argv[h], token, mid) == 0 && a->lens[h + 1] == len - suffix &&
           memcmp(a->argv[h + 1], token + suffix, len - suffix) == 0;
}

int dq__ack_args_add(dq__ack_args *a, const char *id, const char *token) {
    int b = dq__id_bucket(id); /* first: a failure leaves a as it was */
    if (b < 0) return -1;
    size_t len = strlen(token), mid, suffix;
    split_token(token, len, &mid, &suffix);
    if (!in_current_group(a, token, len, mid, suffix)) {
        a->group_at = a->n, a->in_group = 0;
        add_arg(a, token, mid);
        add_arg(a, token + suffix, len - suffix);
        add_arg(a, a->counts[a->groups++], 0); /* its length set below, per item */
    }
    a->in_group++;
    a->group_items[a->groups - 1] = a->in_group;
    a->lens[a->group_at + 2] = dq__fmt_i64(a->counts[a->groups - 1], (int64_t)a->in_group);
    char *bucket = a->buckets[a->items++];
    add_arg(a, token + mid, suffix - mid);
    add_arg(a, id, strlen(id));
    add_arg(a, bucket, dq__fmt_i64(bucket, b));
    return 0;
}

/* Whether the k items whose arguments start at argv[at] name blocks 1..k in
 * that order: their token middles are "1", "2", ... "k". */
static int blocks_in_order(const dq__ack_args *a, size_t at, size_t k) {
    char want[24];
    for (size_t j = 0; j < k; j++) {
        size_t len = dq__fmt_i64(want, (int64_t)j + 1);
        if (a->lens[at + 3 * j] != len || memcmp(a->argv[at + 3 * j], want, len) != 0) return 0;
    }
    return 1;
}

/* Joins the k arguments argv[at], argv[at + 3], ... with single spaces at
 * buf + *used (which grows by their length); returns where they start. */
static const char *join_items(const dq__ack_args *a, size_t at, size_t k, char *buf, size_t *used,
                              size_t *len) {
    char *start = buf + *used, *p = start;
    for (size_t j = 0; j < k; j++) {
        if (j) *p++ = ' ';
        memcpy(p, a->argv[at + 3 * j], a->lens[at + 3 * j]);
        p += a->lens[at + 3 * j];
    }
    *len = (size_t)(p - start);
    *used += *len;
    return start;
}

void dq__ack_args_pack(dq__ack_args *a) {
    size_t r = 4, w = 4, ids_used = 0, buckets_used = 0; /* read and write positions */
    for (size_t gi = 0; gi < a->groups; gi++) {
        size_t k = a->group_items[gi], items_at = r + 3;
        const char *head[3] = {a->argv[r], a->argv[r + 1], a->argv[r + 2]};
        size_t head_len[3] = {a->lens[r], a->lens[r + 1], a->lens[r + 2]};
        if (k >= 2 && blocks_in_order(a, items_at, k)) {
            /* Read the items before writing: the packed group may overlap
             * them (w <= r). */
            size_t ids_len, buckets_len;
            const char *ids = join_items(a, items_at + 1, k, a->packed_ids, &ids_used, &ids_len);
            const char *buckets =
                join_items(a, items_at + 2, k, a->packed_buckets, &buckets_used, &buckets_len);
            a->counts[gi][0] = '*';
            head[2] = a->counts[gi];
            head_len[2] = 1 + dq__fmt_i64(a->counts[gi] + 1, (int64_t)k);
            for (int h = 0; h < 3; h++) a->argv[w + h] = head[h], a->lens[w + h] = head_len[h];
            a->argv[w + 3] = ids, a->lens[w + 3] = ids_len;
            a->argv[w + 4] = buckets, a->lens[w + 4] = buckets_len;
            w += 5;
        } else {
            /* As it is, moved down over what packing saved before it. */
            memmove(&a->argv[w], &a->argv[r], (3 + 3 * k) * sizeof a->argv[0]);
            memmove(&a->lens[w], &a->lens[r], (3 + 3 * k) * sizeof a->lens[0]);
            w += 3 + 3 * k;
        }
        r = items_at + 3 * k;
    }
    a->n = w;
}
