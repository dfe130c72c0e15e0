/*
 * send_order.c - the order a batch of offers goes out in (dq_offer_many).
 *
 * Why: a script call writes each list or slot of due times it touches with
 * one command. Items of one delay share them, so a call of 250 makes a few
 * writes; items of delays of their own, sent in the caller's order, each
 * touch a list of their own, and a call of 166 makes 166 (0.77 of one
 * delay's offers/s for delays of 0 to 10 s, docs/benchmarks.md, issue 42).
 * Sent in delay order, the items of one call share a few milliseconds and
 * their writes. Each item's due time is still the server's time at its call
 * plus its delay, and delay order is due order across calls too (a later
 * call has a later time and an equal or longer delay), so nothing a queue
 * promises depends on the order. But for ids: two items of one id must go
 * in the caller's order (the later replaces or keeps the earlier), so a
 * batch with an id twice goes in the caller's order.
 *
 * The duplicate check is a small open-addressing set of the given ids
 * (FNV-1a): no kept library offers a set of strings, and it is a dozen
 * lines.
 */
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* One item's place in the order: delays first, then absolute due times,
 * each ascending; ties keep the caller's order (qsort is not stable). */
typedef struct sort_key {
    int absolute;
    int64_t ms;
    size_t index;
} sort_key;

static int compare_keys(const void *pa, const void *pb) {
    const sort_key *a = pa, *b = pb;
    if (a->absolute != b->absolute) return a->absolute - b->absolute;
    if (a->ms != b->ms) return a->ms < b->ms ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 14695981039346656037u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

/* Whether two of the given ids (items[i].id, NULL for a generated one) are
 * equal: 1, 0, or -1 out of memory. */
static int has_duplicate(const dq_item *items, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    size_t *slots = calloc(cap, sizeof *slots); /* item index + 1; 0: free */
    if (!slots) return -1;
    int dup = 0;
    for (size_t i = 0; i < n && !dup; i++) {
        const char *id = items[i].id;
        if (!id) continue;
        size_t s = (size_t)fnv1a(id) & (cap - 1);
        while (slots[s] && !(dup = strcmp(items[slots[s] - 1].id, id) == 0)) s = (s + 1) & (cap - 1);
        slots[s] = i + 1;
    }
    free(slots);
    return dup;
}

int dq__send_order(const dq_item *items, size_t n, size_t *order) {
    for (size_t i = 0; i < n; i++) order[i] = i;
    if (n < 2 || has_duplicate(items, n) != 0) return 0;
    sort_key *keys = malloc(n * sizeof *keys);
    if (!keys) return 0;
    for (size_t i = 0; i < n; i++) {
        int absolute = items[i].due_ms > 0;
        keys[i] = (sort_key){absolute, absolute ? items[i].due_ms : items[i].delay_ms, i};
    }
    qsort(keys, n, sizeof *keys, compare_keys);
    for (size_t i = 0; i < n; i++) order[i] = keys[i].index;
    free(keys);
    return 1;
}
