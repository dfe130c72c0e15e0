/*
 * test_send_order.c - unit tests of dq__send_order (src/util/send_order.c):
 * the order dq_offer_many sends a batch in. Delays ascending, then due times
 * ascending, ties in array order; array order whenever two given ids are
 * equal; a permutation always. tests/cli/core/batch_order.py checks what
 * Redis does with it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util.h"

static dq_item delayed(const char *id, int64_t delay_ms) {
    return (dq_item){.id = id, .delay_ms = delay_ms};
}

static void assert_order(const size_t *got, const size_t *want, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (got[i] != want[i]) print_error("place %zu: item %zu, not %zu\n", i, got[i], want[i]);
        assert_int_equal(got[i], want[i]);
    }
}

static void test_delays_ascending_ties_in_array_order(void **state) {
    (void)state;
    dq_item items[] = {delayed(NULL, 500), delayed(NULL, 0),   delayed(NULL, 500),
                       delayed("a", 20),   delayed(NULL, 500), delayed("b", 0)};
    size_t order[6], want[] = {1, 5, 3, 0, 2, 4};
    assert_int_equal(dq__send_order(items, 6, order), 1);
    assert_order(order, want, 6);
}

static void test_due_times_after_delays(void **state) {
    (void)state;
    dq_item items[] = {{.due_ms = 9000}, {.delay_ms = 100000}, {.due_ms = 5000}, {.delay_ms = 7}};
    size_t order[4], want[] = {3, 1, 2, 0};
    assert_int_equal(dq__send_order(items, 4, order), 1);
    assert_order(order, want, 4);
}

/* The later of two items of one id replaces (or keeps) the earlier: the
 * batch keeps the caller's order, even when the ids are far apart. */
static void test_an_id_twice_keeps_array_order(void **state) {
    (void)state;
    enum { N = 3000 };
    dq_item *items = calloc(N, sizeof *items);
    char(*ids)[16] = calloc(N, sizeof *ids);
    size_t *order = calloc(N, sizeof *order);
    assert_non_null(items), assert_non_null(ids), assert_non_null(order);
    for (size_t i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "id-%zu", i);
        items[i] = delayed(ids[i], (int64_t)(N - i));
    }
    assert_int_equal(dq__send_order(items, N, order), 1); /* distinct: sorted */
    assert_int_equal(order[0], N - 1);
    items[N - 1].id = ids[17]; /* id-17 twice, 2982 places apart */
    assert_int_equal(dq__send_order(items, N, order), 0);
    for (size_t i = 0; i < N; i++) assert_int_equal(order[i], i);
    free(items), free(ids), free(order);
}

/* Generated ids (NULL) are never taken for equal ones. */
static void test_generated_ids_are_distinct(void **state) {
    (void)state;
    dq_item items[] = {delayed(NULL, 3), delayed(NULL, 2), delayed(NULL, 1)};
    size_t order[3], want[] = {2, 1, 0};
    assert_int_equal(dq__send_order(items, 3, order), 1);
    assert_order(order, want, 3);
}

/* A big shuffled batch: a permutation, in delay order, stable. */
static void test_permutation_sorted_stable(void **state) {
    (void)state;
    enum { N = 20000 };
    dq_item *items = calloc(N, sizeof *items);
    size_t *order = calloc(N, sizeof *order);
    char *seen = calloc(N, 1);
    assert_non_null(items), assert_non_null(order), assert_non_null(seen);
    uint32_t x = 12345;
    for (size_t i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        items[i] = delayed(NULL, (int64_t)((x >> 8) % 1000));
    }
    assert_int_equal(dq__send_order(items, N, order), 1);
    for (size_t i = 0; i < N; i++) {
        assert_true(order[i] < N);
        assert_false(seen[order[i]]);
        seen[order[i]] = 1;
        if (i == 0) continue;
        const dq_item *a = &items[order[i - 1]], *b = &items[order[i]];
        assert_true(a->delay_ms < b->delay_ms ||
                    (a->delay_ms == b->delay_ms && order[i - 1] < order[i]));
    }
    free(items), free(order), free(seen);
}

static void test_empty_and_one(void **state) {
    (void)state;
    size_t order[1] = {99};
    dq_item one = delayed("x", 5);
    assert_int_equal(dq__send_order(&one, 0, order), 0);
    assert_int_equal(order[0], 99);
    assert_int_equal(dq__send_order(&one, 1, order), 0);
    assert_int_equal(order[0], 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delays_ascending_ties_in_array_order),
        cmocka_unit_test(test_due_times_after_delays),
        cmocka_unit_test(test_an_id_twice_keeps_array_order),
        cmocka_unit_test(test_generated_ids_are_distinct),
        cmocka_unit_test(test_permutation_sorted_stable),
        cmocka_unit_test(test_empty_and_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
