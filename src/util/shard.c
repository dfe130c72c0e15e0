/*
 * shard.c - the names of a sharded queue's shards, and which shard an id
 * belongs to.
 *
 * A queue with n shards keeps n complete sets of the usual keys, each under
 * its own hash tag, so each set sits in one cluster slot. With one shard
 * that is the queue's own name: the unsharded layout. With n > 1, shard i
 * is "queue~T", T a short tag: '~' is not allowed in queue names, so no
 * user queue and no shard of another queue can have that name. The queue's
 * own keys then hold only its settings and its shard count (its home).
 *
 * Where the shards land decides whether the queue spreads over the masters.
 * Tags taken at random put 12 shards on 3 masters unevenly (by 3 or more in
 * most tries), so T is searched instead: shard i's slot must lie within a
 * window around the middle of the i-th of n equal arcs of the slot space
 * (an eighth of an arc either side, so it never leaves its arc). Masters
 * that serve contiguous ranges of equal size, as `redis-cli --cluster
 * create` sets them up, then get equal shares whenever n is a multiple of
 * the number of masters (12 on 3: 4 each), and shares that differ by one
 * otherwise. The search is deterministic, so every client derives the same
 * names; it costs about 4 * n CRC16s per shard, once per queue and client.
 */
#include <stdio.h>
#include <string.h>

#include "util.h"

/* Gives up after this many tags; never reached for n <= DQ__SHARDS_MAX (a
 * window is at least 16 slots wide and CRC16 hits every residue). */
#define TAGS_MAX (1u << 22)

/* Distance between two slots. */
static unsigned slot_distance(unsigned a, unsigned b) { return a > b ? a - b : b - a; }

int dq__shard_name(const char *queue, unsigned i, unsigned n, char *out, size_t size) {
    size_t qlen = strlen(queue);
    if (n < 1 || n > DQ__SHARDS_MAX || i >= n || qlen + 1 > size) return -1;
    if (n == 1) {
        memcpy(out, queue, qlen + 1);
        return 0;
    }
    unsigned long arc2 = 2ul * DQ__SLOTS / n; /* twice an arc, to round once */
    unsigned target = (unsigned)(((2ul * i + 1) * DQ__SLOTS / n) / 2);
    unsigned window = (unsigned)(arc2 / 16);  /* half-width: an eighth of an arc */
    for (unsigned t = 0; t < TAGS_MAX; t++) {
        int len = snprintf(out, size, "%s~%x", queue, t);
        if (len < 0 || (size_t)len >= size) return -1;
        if (slot_distance(dq__key_slot(out, (size_t)len), target) <= window) return 0;
    }
    return -1;
}

unsigned dq__shard_of_id(const char *id, size_t len, unsigned n) {
    if (n <= 1) return 0;
    /* CRC16 of the whole id (no hash tag rule: ids may hold braces), which
     * spreads both generated and sequential user ids evenly. */
    char key[2 + DQ_ID_MAX];
    if (len > DQ_ID_MAX) len = DQ_ID_MAX;
    key[0] = '{';
    key[1] = '}'; /* "{}..." : an empty tag, so the whole key is hashed */
    memcpy(key + 2, id, len);
    unsigned h = dq__key_slot(key, len + 2);
    return h % n;
}
