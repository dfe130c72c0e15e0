/*
 * test_shard.c - unit tests of src/util/shard.c: shard names (one shard is the
 * queue itself, more are "queue~tag" in slots at the middles of equal arcs),
 * how fairly 12 shards fall on the three masters `redis-cli --cluster
 * create` sets up, and how ids spread over the shards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "util.h"

static unsigned slot_of(const char *name) { return dq__key_slot(name, strlen(name)); }

static void test_one_shard_is_the_queue(void **state) {
    char name[DQ__SHARD_NAME_MAX + 1];
    (void)state;
    assert_int_equal(dq__shard_name("orders", 0, 1, name, sizeof name), 0);
    assert_string_equal(name, "orders");
    assert_int_equal(dq__shard_name("orders", 0, 12, name, sizeof name), 0);
    assert_memory_equal(name, "orders~", 7);
}

static void test_shard_name_form(void **state) {
    char name[DQ__SHARD_NAME_MAX + 1], again[DQ__SHARD_NAME_MAX + 1];
    char longest[DQ_QUEUE_MAX + 1];
    (void)state;
    assert_int_equal(dq__shard_name("orders", 5, 12, name, sizeof name), 0);
    assert_memory_equal(name, "orders~", 7);
    assert_true(strlen(name) > 7 && strlen(name) <= 6 + 7);
    assert_int_equal(dq__queue_valid(name), 0); /* never a user queue's name */
    /* deterministic: every client derives the same names */
    assert_int_equal(dq__shard_name("orders", 5, 12, again, sizeof again), 0);
    assert_string_equal(name, again);
    /* the longest queue name fits DQ__SHARD_NAME_MAX at the most shards */
    memset(longest, 'q', DQ_QUEUE_MAX);
    longest[DQ_QUEUE_MAX] = '\0';
    for (unsigned i = 0; i < DQ__SHARDS_MAX; i++) {
        assert_int_equal(dq__shard_name(longest, i, DQ__SHARDS_MAX, name, sizeof name), 0);
        assert_true(strlen(name) <= DQ__SHARD_NAME_MAX);
    }
}

static void test_shard_name_refusals(void **state) {
    char name[DQ__SHARD_NAME_MAX + 1];
    (void)state;
    assert_int_equal(dq__shard_name("q", 0, 0, name, sizeof name), -1);
    assert_int_equal(dq__shard_name("q", 3, 3, name, sizeof name), -1);
    assert_int_equal(dq__shard_name("q", 0, DQ__SHARDS_MAX + 1, name, sizeof name), -1);
    assert_int_equal(dq__shard_name("orders", 1, 2, name, 8), -1); /* too small */
}

/* Every shard in its own slot, within an eighth of an arc of its arc's
 * middle. */
static void test_shard_slots_evenly_spaced(void **state) {
    static const char *queues[] = {"orders", "a", "claims.eu-1", "Q:retry_2"};
    static const unsigned counts[] = {2, 3, 5, 12, 16, 64};
    char name[DQ__SHARD_NAME_MAX + 1];
    (void)state;
    for (size_t q = 0; q < sizeof queues / sizeof queues[0]; q++) {
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            unsigned n = counts[c];
            double arc = (double)DQ__SLOTS / n;
            for (unsigned i = 0; i < n; i++) {
                assert_int_equal(dq__shard_name(queues[q], i, n, name, sizeof name), 0);
                double d = slot_of(name) - (i + 0.5) * arc;
                if (d < 0) d = -d;
                if (d > arc / 8 + 1)
                    print_error("%s shard %u of %u: slot %u\n", queues[q], i, n, slot_of(name));
                assert_true(d <= arc / 8 + 1);
            }
        }
    }
}

/* Shards per master, for masters serving equal contiguous ranges as
 * `redis-cli --cluster create` assigns them (3 masters: 0-5460, 5461-10922,
 * 10923-16383). */
static void shares(const char *queue, unsigned n, unsigned masters, unsigned *per) {
    char name[DQ__SHARD_NAME_MAX + 1];
    memset(per, 0, masters * sizeof *per);
    for (unsigned i = 0; i < n; i++) {
        assert_int_equal(dq__shard_name(queue, i, n, name, sizeof name), 0);
        unsigned s = slot_of(name), m = 0;
        while (m + 1 < masters &&
               s >= (unsigned)(((unsigned long)(m + 1) * DQ__SLOTS + masters - 1) / masters))
            m++;
        per[m]++;
    }
}

/* 12 shards on 3 masters: 4 each, for every queue name tried; 12 on 2:
 * 6 each; 16 on 3 (not a multiple): 5 or 6 each. */
static void test_shard_fair_on_masters(void **state) {
    char queue[32];
    unsigned per[3];
    (void)state;
    for (int q = 0; q < 200; q++) {
        snprintf(queue, sizeof queue, "queue-%d", q);
        shares(queue, 12, 3, per);
        assert_int_equal(per[0], 4);
        assert_int_equal(per[1], 4);
        assert_int_equal(per[2], 4);
        shares(queue, 12, 2, per);
        assert_int_equal(per[0], 6);
        assert_int_equal(per[1], 6);
        shares(queue, 16, 3, per);
        for (int m = 0; m < 3; m++) assert_true(per[m] == 5 || per[m] == 6);
    }
}

static void test_shard_of_id(void **state) {
    char id[32];
    unsigned per[12] = {0};
    (void)state;
    assert_int_equal(dq__shard_of_id("anything", 8, 1), 0);
    assert_int_equal(dq__shard_of_id("anything", 8, 0), 0);
    /* the same id, the same shard; braces in an id change nothing */
    assert_int_equal(dq__shard_of_id("order-7", 7, 12), dq__shard_of_id("order-7", 7, 12));
    assert_true(dq__shard_of_id("{a}b", 4, 12) < 12);
    /* sequential user ids spread evenly: within 10 % of 1,000 each */
    for (int k = 0; k < 12000; k++) {
        int len = snprintf(id, sizeof id, "order-%d", k);
        unsigned s = dq__shard_of_id(id, (size_t)len, 12);
        assert_true(s < 12);
        per[s]++;
    }
    for (int s = 0; s < 12; s++) {
        if (per[s] < 900 || per[s] > 1100) print_error("shard %d: %u ids\n", s, per[s]);
        assert_true(per[s] >= 900 && per[s] <= 1100);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_shard_is_the_queue), cmocka_unit_test(test_shard_name_form),
        cmocka_unit_test(test_shard_name_refusals),    cmocka_unit_test(test_shard_slots_evenly_spaced),
        cmocka_unit_test(test_shard_fair_on_masters),  cmocka_unit_test(test_shard_of_id),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
