/*
 * test_fencing.c - a lease that has ended is refused at once, by the server's
 * clock, even when no scheduler has returned its item yet: a late consumer
 * can never ack, nack or extend work that is about to go to someone else.
 */
#include "dqtest.h"

static void test_expired_lease_refused_without_scheduler(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "fence");
    dq_client *c = dqt_client(NULL); /* no dq_schedule: nothing returns it */
    dq_item it = {.id = "f1", .payload = "x", .payload_len = 1};
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), 0);

    dq_take_opts opts = {.lease_ms = 150, .max_attempts = 5};
    dq_msg *m[1];
    DQT_EXPECT(c, dq_take_many(c, q, &opts, 2000, m, 1), 1);
    assert_non_null(m[0]->token);
    assert_int_equal(m[0]->attempt, 1);

    /* While the lease runs, the token works. */
    DQT_EXPECT(c, dq_extend(c, q, "f1", m[0]->token, 150), 1);
    dqt_run_for(c, 0.4); /* past the extended end */

    DQT_EXPECT(c, dq_ack(c, q, "f1", m[0]->token), 0);
    DQT_EXPECT(c, dq_nack(c, q, "f1", m[0]->token, 0, "late"), 0);
    DQT_EXPECT(c, dq_extend(c, q, "f1", m[0]->token, 1000), 0);
    dq_item_info info;
    DQT_EXPECT(c, dq_lookup(c, q, "f1", &info), 0);
    assert_int_equal(info.state, DQ_STATE_IN_FLIGHT); /* not returned yet ... */

    /* ... until a scheduler runs: then it is ready again, one attempt used. */
    DQT_EXPECT(c, dq_schedule(c, q), 0);
    dq_msg *again[1];
    DQT_EXPECT(c, dq_take_many(c, q, &opts, 3000, again, 1), 1);
    assert_string_equal(again[0]->id, "f1");
    assert_int_equal(again[0]->attempt, 2);
    assert_string_not_equal(again[0]->token, m[0]->token);
    DQT_EXPECT(c, dq_ack(c, q, "f1", m[0]->token), 0);     /* the old one: no */
    DQT_EXPECT(c, dq_ack(c, q, "f1", again[0]->token), 1); /* the new one: yes */
    dq_msg_free(m[0]);
    dq_msg_free(again[0]);
    dq_client_free(c);
}

/* dq_client_free right after an async ack must not drop it. */
static void ack_cb_worker(dq_worker *w, dq_msg *msg, void *privdata) {
    int *handled = privdata;
    (*handled)++;
    dq_worker_done(w, msg, 0);
}

static void test_free_drains_acks(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "drain");
    dq_client *c = dqt_client(NULL);
    dq_item it = {.id = "d1", .payload = "x", .payload_len = 1};
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), 0);
    int handled = 0;
    dq_worker *w = dq_worker_start(c, q, 1, 0, ack_cb_worker, &handled);
    assert_non_null(w);
    for (int i = 0; i < 200 && handled == 0; i++) dqt_run_for(c, 0.01);
    assert_int_equal(handled, 1);
    dq_client_free(c); /* the ack may still be unsent here */

    dq_client *c2 = dqt_client(NULL);
    dq_item_info info;
    DQT_EXPECT(c2, dq_lookup(c2, q, "d1", &info), 0);
    assert_int_equal(info.state, DQ_STATE_UNKNOWN); /* acked: gone */
    dq_stats st;
    DQT_EXPECT(c2, dq_get_stats(c2, q, &st), 0);
    assert_int_equal(st.in_flight, 0);
    dq_client_free(c2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expired_lease_refused_without_scheduler),
        cmocka_unit_test(test_free_drains_acks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
