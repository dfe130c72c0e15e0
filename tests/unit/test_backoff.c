/*
 * test_backoff.c - unit tests of retrying through errors that persist
 * (src/conn/backoff.c), on a client that never connects, whose loop never runs
 * (so its ev_now stands still): which error codes persist, by their first
 * word only; the waits doubling from 20 ms to the 1 s cap, each in
 * [1/2, 1] of its step; and the log: a burst of one kind gives one line,
 * a success of what failed says it cleared, a kind back within the window
 * is counted without a line, and other errors are logged each time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"

#define OOM "OOM command not allowed when used memory > 'maxmemory'."

typedef struct log_lines {
    int n;
    char last[600];
} log_lines;

static void on_log(void *privdata, const char *msg) {
    log_lines *l = privdata;
    l->n++;
    snprintf(l->last, sizeof l->last, "%s", msg);
}

static dq_client *client(log_lines *l) {
    dq_client *c = dq_client_new(NULL, NULL);
    assert_non_null(c);
    memset(l, 0, sizeof *l);
    dq_set_log(c, on_log, l);
    return c;
}

static void test_kinds_by_first_word(void **state) {
    (void)state;
    assert_true(dq__error_persists(OOM));
    assert_true(dq__error_persists("MISCONF Redis is configured to save RDB snapshots"));
    assert_true(dq__error_persists("NOREPLICAS Not enough good replicas to write."));
    assert_true(dq__error_persists("READONLY You can't write against a read only replica."));
    assert_true(dq__error_persists("LOADING Redis is loading the dataset in memory"));
    assert_true(dq__error_persists("BUSY Redis is busy running a script."));
    assert_true(dq__error_persists("BUSY"));
    assert_false(dq__error_persists("ERR OOM in the text is not the code"));
    assert_false(dq__error_persists("OOMX something"));
    assert_false(dq__error_persists("BUSYKEY Target key name already exists."));
    assert_false(dq__error_persists("oom lower case"));
    assert_false(dq__error_persists("connection lost"));
    assert_false(dq__error_persists(""));
    assert_false(dq__error_persists(NULL));
}

static void test_waits_double_to_the_cap(void **state) {
    (void)state;
    log_lines l;
    dq_client *c = client(&l);
    dq__backoff b = {0};
    double step = 0.02;
    for (int i = 0; i < 12; i++) {
        double wait = dq__backoff_next(c, &b, OOM);
        assert_true(wait >= step / 2 - 1e-9 && wait <= step + 1e-9);
        assert_true(dq__backoff_left(c, &b) > 0);
        step = step * 2 > 1.0 ? 1.0 : step * 2;
    }
    assert_string_equal(b.kind, "OOM");
    dq__backoff_ok(c, &b);
    assert_int_equal(b.failures, 0);
    assert_true(dq__backoff_left(c, &b) == 0);
    assert_int_equal(l.n, 0); /* dq__backoff_next logs nothing */
    dq_client_free(c);
}

static void test_one_line_a_burst_then_cleared(void **state) {
    (void)state;
    log_lines l;
    dq_client *c = client(&l);
    dq__backoff a = {0}, b = {0};
    for (int i = 0; i < 500; i++) {
        dq__backoff_failed(c, &a, OOM, "queue q: transfer failed: %s", OOM);
        dq__backoff_failed(c, &b, OOM, "queue q: take failed: %s", OOM);
    }
    assert_int_equal(l.n, 1);
    assert_non_null(strstr(l.last, "transfer failed: OOM"));
    assert_non_null(strstr(l.last, "retrying with backoff"));
    dq__backoff_ok(c, &a);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.last, "OOM errors cleared after 0.0 s (1000 failed tries)");
    dq__backoff_ok(c, &b); /* cleared already */
    assert_int_equal(l.n, 2);
    /* Back within the window of the last line: counted, not logged, and
     * its end says nothing either. */
    for (int i = 0; i < 100; i++) dq__backoff_failed(c, &a, OOM, "queue q: transfer failed: %s", OOM);
    dq__backoff_ok(c, &a);
    assert_int_equal(l.n, 2);
    dq_client_free(c);
}

static void test_kinds_apart_and_others_each_time(void **state) {
    (void)state;
    log_lines l;
    dq_client *c = client(&l);
    dq__backoff b = {0};
    dq__backoff_failed(c, &b, OOM, "%s", OOM);
    dq__backoff_failed(c, &b, "MISCONF failing disk", "%s", "MISCONF failing disk");
    dq__backoff_failed(c, &b, "MISCONF failing disk", "%s", "MISCONF failing disk");
    assert_int_equal(l.n, 2);
    for (int i = 0; i < 3; i++)
        dq__backoff_failed(c, &b, "ERR something else", "%s", "ERR something else");
    assert_int_equal(l.n, 5);
    dq__log_error(c, "NOPERM no", "%s", "NOPERM no");
    assert_int_equal(l.n, 6);
    dq_client_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds_by_first_word),
        cmocka_unit_test(test_waits_double_to_the_cap),
        cmocka_unit_test(test_one_line_a_burst_then_cleared),
        cmocka_unit_test(test_kinds_apart_and_others_each_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
