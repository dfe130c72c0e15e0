/*
 * test_config.c - a queue's own settings (dq_queue_config): takes and
 * workers that ask for DQ_QUEUE_SETTING use its lease and max attempts, and
 * nacks without a delay its backoff; a bad change changes nothing.
 */
#include "dqtest.h"

static void test_defaults_and_all_or_nothing(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "cfg");
    dq_client *c = dqt_client(NULL);
    dq_queue_config qc;
    DQT_EXPECT(c, dq_queue_config_get(c, q, &qc), 0);
    assert_int_equal(qc.lease_ms, DQ_LEASE_DEFAULT_MS);
    assert_int_equal(qc.max_attempts, DQ_MAX_ATTEMPTS_DEFAULT);
    assert_int_equal(qc.backoff_base_ms, 1000);
    assert_int_equal(qc.backoff_max_ms, 600000);

    dq_queue_config set = {5000, 4, DQ_QUEUE_SETTING, DQ_QUEUE_SETTING, DQ_QUEUE_SETTING};
    DQT_EXPECT(c, dq_queue_config_set(c, q, &set, &qc), 0);
    assert_int_equal(qc.lease_ms, 5000);
    assert_int_equal(qc.max_attempts, 4);
    assert_int_equal(qc.backoff_base_ms, 1000); /* untouched */

    /* base above the cap: refused, and the lease given with it not written */
    dq_queue_config bad = {7000, DQ_QUEUE_SETTING, 5000, 100, DQ_QUEUE_SETTING};
    DQT_EXPECT(c, dq_queue_config_set(c, q, &bad, NULL), DQ_EREDIS);
    DQT_EXPECT(c, dq_queue_config_get(c, q, &qc), 0);
    assert_int_equal(qc.lease_ms, 5000);
    dq_queue_config range = {-2, 1, 1, 1, DQ_QUEUE_SETTING};
    DQT_EXPECT(c, dq_queue_config_set(c, q, &range, NULL), DQ_EINVAL);

    DQT_EXPECT(c, dq_queue_config_reset(c, q), 0);
    DQT_EXPECT(c, dq_queue_config_get(c, q, &qc), 0);
    assert_int_equal(qc.lease_ms, DQ_LEASE_DEFAULT_MS);
    assert_int_equal(qc.max_attempts, DQ_MAX_ATTEMPTS_DEFAULT);
    dq_client_free(c);
}

static void test_takes_and_nacks_follow_the_queue(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "cfguse");
    dq_client *c = dqt_client(NULL); /* backoff options: the queue's */
    DQT_EXPECT(c, dq_schedule(c, q), 0);
    dq_queue_config set = {400, 2, 20, 40, DQ_QUEUE_SETTING};
    DQT_EXPECT(c, dq_queue_config_set(c, q, &set, NULL), 0);
    dq_item it = {.id = "c1", .payload = "x", .payload_len = 1};
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), 0);

    dq_take_opts opts;
    dq_take_opts_init(&opts); /* DQ_QUEUE_SETTING for both */
    dq_msg *m[1];
    int64_t t0 = dqt_server_ms();
    DQT_EXPECT(c, dq_take_many(c, q, &opts, 2000, m, 1), 1);
    dq_item_info info;
    DQT_EXPECT(c, dq_lookup(c, q, "c1", &info), 0);
    assert_int_equal(info.state, DQ_STATE_IN_FLIGHT);
    assert_true(info.due_ms >= t0 + 400 && info.due_ms <= dqt_server_ms() + 400); /* the queue's lease */

    /* A nack without a delay waits the queue's backoff: 20 ms, jittered down to 10. */
    int64_t before = dqt_server_ms();
    DQT_EXPECT(c, dq_nack(c, q, "c1", m[0]->token, -1, "first"), 1);
    DQT_EXPECT(c, dq_lookup(c, q, "c1", &info), 0);
    assert_int_equal(info.state, DQ_STATE_PENDING);
    assert_true(info.due_ms >= before + 10 && info.due_ms <= dqt_server_ms() + 20);
    dq_msg_free(m[0]);

    /* Second delivery, second failure: the queue's max attempts (2) buries it. */
    DQT_EXPECT(c, dq_take_many(c, q, &opts, 2000, m, 1), 1);
    assert_int_equal(m[0]->attempt, 2);
    DQT_EXPECT(c, dq_nack(c, q, "c1", m[0]->token, -1, "second"), 2);
    int64_t dead = 0;
    DQT_EXPECT(c, dq_dead_count(c, q, &dead), 0);
    assert_int_equal(dead, 1);
    dq_msg_free(m[0]);
    dq_client_free(c);
}

/* A worker without options takes with the queue's lease. */
static void hold(dq_worker *w, dq_msg *msg, void *privdata) {
    (void)w;
    dq_msg **held = privdata;
    *held = msg; /* never done: the lease must run out */
}

static void test_worker_uses_queue_lease(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "cfgwork");
    dq_client *c = dqt_client(NULL);
    dq_queue_config set = {300, 0, DQ_QUEUE_SETTING, DQ_QUEUE_SETTING, DQ_QUEUE_SETTING};
    DQT_EXPECT(c, dq_queue_config_set(c, q, &set, NULL), 0);
    dq_item it = {.id = "w1", .payload = "x", .payload_len = 1};
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), 0);
    dq_msg *held = NULL;
    dq_worker *w = dq_worker_start(c, q, 1, 0, hold, &held);
    assert_non_null(w);
    for (int i = 0; i < 200 && !held; i++) dqt_run_for(c, 0.01);
    assert_non_null(held);
    dq_item_info info;
    DQT_EXPECT(c, dq_lookup(c, q, "w1", &info), 0);
    assert_int_equal(info.state, DQ_STATE_IN_FLIGHT);
    assert_true(info.due_ms - dqt_server_ms() <= 300);
    dq_worker_done(w, held, 0);
    dq_client_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_all_or_nothing),
        cmocka_unit_test(test_takes_and_nacks_follow_the_queue),
        cmocka_unit_test(test_worker_uses_queue_lease),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
