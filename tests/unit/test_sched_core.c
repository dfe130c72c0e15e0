/*
 * test_sched_core.c - the scheduler's decisions with made-up server times:
 * which due time the timer is armed for, how announcements and run results
 * combine when they arrive out of order, and how the stagger adapts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "util.h"

static void test_starts_with_no_timer(void **state) {
    (void)state;
    dq__sched_core s;
    dq__sched_core_init(&s);
    assert_int_equal(dq__sched_core_fire_at(&s), -1);
    assert_int_equal(s.stagger_ms, 0);
}

static void test_announcement_arms_timer(void **state) {
    (void)state;
    dq__sched_core s;
    dq__sched_core_init(&s);
    assert_int_equal(dq__sched_core_heard(&s, 1000), 1);
    assert_int_equal(dq__sched_core_fire_at(&s), 1000);
    /* The latest announcement is the truth, later or earlier. */
    assert_int_equal(dq__sched_core_heard(&s, 1500), 1);
    assert_int_equal(dq__sched_core_fire_at(&s), 1500);
    assert_int_equal(dq__sched_core_heard(&s, 900), 1);
    assert_int_equal(dq__sched_core_fire_at(&s), 900);
    assert_int_equal(dq__sched_core_heard(&s, -1), 1);
    assert_int_equal(dq__sched_core_fire_at(&s), -1);
}

static void test_run_result_sets_next_due(void **state) {
    (void)state;
    dq__sched_core s;
    dq__sched_core_init(&s);
    dq__sched_core_begin(&s, -1);
    assert_int_equal(dq__sched_core_finish(&s, 3, 2000, 0), 0);
    assert_int_equal(dq__sched_core_fire_at(&s), 2000);
    dq__sched_core_begin(&s, 2000);
    assert_int_equal(dq__sched_core_finish(&s, 1, -1, 0), 0);
    assert_int_equal(dq__sched_core_fire_at(&s), -1);
}

static void test_more_due_asks_for_another_run(void **state) {
    (void)state;
    dq__sched_core s;
    dq__sched_core_init(&s);
    dq__sched_core_begin(&s, -1);
    assert_int_equal(dq__sched_core_finish(&s, 1000, 500, 1), 1);
}

/* A reply may overtake an announcement published after the run: the
 * earliest of both must win, or an item would wait for the safety check. */
static void test_announcement_during_run_is_not_lost(void **state) {
    (void)state;
    dq__sched_core s;
    dq__sched_core_init(&s);
    dq__sched_core_begin(&s, -1);
    assert_int_equal(dq__sched_core_heard(&s, 1200), 0); /* no re-arm mid-run */
    dq__sched_core_finish(&s, 0, 5000, 0);
    assert_int_equal(dq__sched_core_fire_at(&s), 1200);

    dq__sched_core_begin(&s, -1);
    dq__sched_core_heard(&s, 1300);
    dq__sched_core_finish(&s, 0, -1, 0); /* the run saw an empty queue */
    assert_int_equal(dq__sched_core_fire_at(&s), 1300);

    dq__sched_core_begin(&s, -1);
    dq__sched_core_heard(&s, -1);
    dq__sched_core_finish(&s, 0, 800, 0);
    assert_int_equal(dq__sched_core_fire_at(&s), 800);
}

static void test_failed_run_keeps_what_is_known(void **state) {
    (void)state;
    dq__sched_core s;
    dq__sched_core_init(&s);
    dq__sched_core_heard(&s, 3000);
    dq__sched_core_begin(&s, 3000);
    dq__sched_core_heard(&s, 2500);
    dq__sched_core_failed(&s);
    assert_int_equal(dq__sched_core_fire_at(&s), 2500);
    assert_int_equal(s.in_flight, 0);
}

static void test_stagger_grows_when_others_serve(void **state) {
    (void)state;
    dq__sched_core s;
    dq__sched_core_init(&s);
    for (int i = 0; i < 10; i++) {
        int64_t due = 1000 + i * 10;
        dq__sched_core_heard(&s, due);
        dq__sched_core_begin(&s, due);
        dq__sched_core_finish(&s, 0, due + 10, 0); /* someone else moved it */
    }
    assert_int_equal(s.stagger_ms, DQ__STAGGER_MAX_MS);
    assert_int_equal(dq__sched_core_fire_at(&s), 1100 + DQ__STAGGER_MAX_MS);
}

static void test_stagger_shrinks_when_serving(void **state) {
    (void)state;
    dq__sched_core s;
    dq__sched_core_init(&s);
    s.stagger_ms = DQ__STAGGER_MAX_MS;
    for (int i = 0; i < 3; i++) {
        dq__sched_core_begin(&s, 1000 + i);
        dq__sched_core_finish(&s, 5, 2000, 0);
    }
    assert_int_equal(s.stagger_ms, 0);
}

/* Firing early (clock estimate off) finds the item still pending: that is
 * not someone else's work and must not push this scheduler back. */
static void test_early_fire_keeps_stagger(void **state) {
    (void)state;
    dq__sched_core s;
    dq__sched_core_init(&s);
    dq__sched_core_begin(&s, 1000);
    dq__sched_core_finish(&s, 0, 1000, 0);
    assert_int_equal(s.stagger_ms, 0);
    assert_int_equal(dq__sched_core_fire_at(&s), 1000);
}

static void test_catch_up_runs_do_not_adapt(void **state) {
    (void)state;
    dq__sched_core s;
    dq__sched_core_init(&s);
    s.stagger_ms = 2;
    dq__sched_core_begin(&s, -1);
    dq__sched_core_finish(&s, 0, -1, 0);
    assert_int_equal(s.stagger_ms, 2);
    dq__sched_core_begin(&s, -1);
    dq__sched_core_finish(&s, 10, -1, 0);
    assert_int_equal(s.stagger_ms, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_starts_with_no_timer),
        cmocka_unit_test(test_announcement_arms_timer),
        cmocka_unit_test(test_run_result_sets_next_due),
        cmocka_unit_test(test_more_due_asks_for_another_run),
        cmocka_unit_test(test_announcement_during_run_is_not_lost),
        cmocka_unit_test(test_failed_run_keeps_what_is_known),
        cmocka_unit_test(test_stagger_grows_when_others_serve),
        cmocka_unit_test(test_stagger_shrinks_when_serving),
        cmocka_unit_test(test_early_fire_keeps_stagger),
        cmocka_unit_test(test_catch_up_runs_do_not_adapt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
