/*
 * test_reliable.c - reliable delivery through the C API, against the real
 * server: takes with a lease (attempt, token), dq_ack, dq_nack (explicit
 * delay and the client's backoff), dq_extend, leases that run out and come
 * back with a new token (fencing of the old one), max attempts and the dead
 * letters (count, list, redrive one or all, purge), idempotent offers of ids
 * that are ready or in flight, dq_take_many, a worker whose handler fails
 * everything, a worker whose handler settles after the lease ran out (stale:
 * dq_worker_set_on_stale and the log name the item; three stale in one
 * call, the hook stopping the worker at the first), the life cycle as
 * dq_lookup and dq_get_stats see it, and plain takes (no lease) that leave
 * nothing in flight.
 * Needs $DQ_TEST_REDIS (tests/run.sh sets it). Each test uses its own queues;
 * every wait polls until a deadline scaled by $DQ_TEST_SLOW.
 */
#include <limits.h>

#include "dqtest.h"

/* ------------------------------------------------------------ helpers */

static dq_take_opts lease_opts(int64_t lease_ms, int max_attempts) {
    dq_take_opts o;
    dq_take_opts_init(&o);
    o.lease_ms = lease_ms;
    o.max_attempts = max_attempts;
    return o;
}

static void offer_now(dq_client *c, const char *q, const char *id, const void *payload, size_t len) {
    dq_item it = {.id = id, .payload = payload, .payload_len = len};
    dq_offer_result res;
    DQT_EXPECT(c, dq_offer(c, q, &it, &res), 0);
    assert_int_equal(res.status, DQ_ADDED);
}

/* Takes exactly one message with opts (NULL: no lease) within secs (scaled). */
static dq_msg *take_one(dq_client *c, const char *q, const dq_take_opts *opts, double secs) {
    dq_msg *m[1] = {NULL};
    int rc = dq_take_many(c, q, opts, (int64_t)(secs * 1000 * dqt_slow()), m, 1);
    if (rc != 1)
        print_error("take from %s: %d (%s), want 1 message; errstr: %s\n", q, rc, dq_strerror(rc),
                    dq_client_errstr(c));
    assert_int_equal(rc, 1);
    assert_non_null(m[0]);
    return m[0];
}

/* Asserts that nothing can be taken from q for timeout_ms (not scaled:
 * the point is that nothing comes during this window). */
static void take_none(dq_client *c, const char *q, const dq_take_opts *opts, int64_t timeout_ms) {
    dq_msg *m[1] = {NULL};
    int rc = dq_take_many(c, q, opts, timeout_ms, m, 1);
    if (rc != 0) {
        dqt_print_msg("unexpected delivery", m[0]);
        if (rc == 1)
            print_error("  attempt %d token %s\n", m[0]->attempt, m[0]->token ? m[0]->token : "-");
        if (rc == 1) dq_msg_free(m[0]);
    }
    assert_int_equal(rc, 0);
}

static dq_item_info lookup(dq_client *c, const char *q, const char *id) {
    dq_item_info info;
    memset(&info, 0xff, sizeof info);
    DQT_EXPECT(c, dq_lookup(c, q, id, &info), 0);
    return info;
}

/* Runs c's loop in short slices until id is in state want, or secs (scaled)
 * pass; returns the last info seen. */
static dq_item_info wait_state(dq_client *c, const char *q, const char *id, int want, double secs) {
    int64_t end = dqt_mono_ms() + (int64_t)(secs * 1000 * dqt_slow());
    dq_item_info info = lookup(c, q, id);
    while (info.state != want && dqt_mono_ms() < end) {
        dqt_run_for(c, 0.01);
        info = lookup(c, q, id);
    }
    if (info.state != want)
        print_error("%s/%s: state %d after %.1f s, want %d\n", q, id, info.state, secs * dqt_slow(),
                    want);
    assert_int_equal(info.state, want);
    return info;
}

static dq_stats stats(dq_client *c, const char *q) {
    dq_stats st;
    memset(&st, 0xff, sizeof st);
    DQT_EXPECT(c, dq_get_stats(c, q, &st), 0);
    return st;
}

static void expect_stats(dq_client *c, const char *q, int64_t pending, int64_t ready, int64_t in_flight,
                         int64_t dead) {
    dq_stats st = stats(c, q);
    if (st.pending != pending || st.ready != ready || st.in_flight != in_flight || st.dead != dead)
        print_error("%s: stats pending %lld ready %lld in_flight %lld dead %lld, want %lld %lld "
                    "%lld %lld\n",
                    q, (long long)st.pending, (long long)st.ready, (long long)st.in_flight,
                    (long long)st.dead, (long long)pending, (long long)ready, (long long)in_flight,
                    (long long)dead);
    assert_int_equal(st.pending, pending);
    assert_int_equal(st.ready, ready);
    assert_int_equal(st.in_flight, in_flight);
    assert_int_equal(st.dead, dead);
    assert_int_equal(st.set_aside, 0);
}

static int64_t dead_count(dq_client *c, const char *q) {
    int64_t n = -1;
    DQT_EXPECT(c, dq_dead_count(c, q, &n), 0);
    return n;
}

/* ------------------------------------------------------------ life cycle */

/* PENDING -> READY -> IN_FLIGHT (due_ms = lease end) -> ack -> UNKNOWN;
 * attempt 1 and a token; a second ack, and nack/extend after the ack, are
 * refused with 0. */
static void test_lease_ack_lifecycle(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "life");
    dq_client *c = dqt_client(NULL);

    dq_item_info info = lookup(c, q, "L1");
    assert_int_equal(info.state, DQ_STATE_UNKNOWN);

    dq_item it = {.id = "L1", .payload = "hello", .payload_len = 5, .delay_ms = 300};
    dq_offer_result res;
    int64_t s0 = dqt_server_ms();
    DQT_EXPECT(c, dq_offer(c, q, &it, &res), 0);
    assert_int_equal(res.status, DQ_ADDED);
    assert_int_equal(res.state, DQ_STATE_PENDING);
    info = lookup(c, q, "L1");
    assert_int_equal(info.state, DQ_STATE_PENDING);
    assert_int_equal(info.due_ms, res.due_ms);
    assert_true(res.due_ms >= s0 + 300);
    assert_int_equal(info.attempts, 0);
    expect_stats(c, q, 1, 0, 0, 0);

    DQT_EXPECT(c, dq_schedule(c, q), 0);
    info = wait_state(c, q, "L1", DQ_STATE_READY, 3);
    assert_true(dqt_server_ms() >= res.due_ms);
    expect_stats(c, q, 0, 1, 0, 0);

    dq_take_opts o = lease_opts(5000, 3);
    int64_t t0 = dqt_server_ms();
    dq_msg *m = take_one(c, q, &o, 2);
    int64_t t1 = dqt_server_ms();
    assert_string_equal(m->id, "L1");
    assert_int_equal(m->payload_len, 5);
    assert_memory_equal(m->payload, "hello", 5);
    assert_int_equal(m->attempt, 1);
    assert_non_null(m->token);
    assert_true(strlen(m->token) > 0 && strlen(m->token) <= 64);
    assert_int_equal(m->due_ms, res.due_ms);
    assert_true(m->ready_ms >= m->due_ms);

    info = lookup(c, q, "L1");
    assert_int_equal(info.state, DQ_STATE_IN_FLIGHT);
    assert_int_equal(info.attempts, 1);
    if (info.due_ms < t0 + 5000 || info.due_ms > t1 + 5000)
        print_error("lease end %lld not in [%lld, %lld]\n", (long long)info.due_ms,
                    (long long)(t0 + 5000), (long long)(t1 + 5000));
    assert_true(info.due_ms >= t0 + 5000 && info.due_ms <= t1 + 5000);
    expect_stats(c, q, 0, 0, 1, 0);
    /* In flight: not pending, so cancel leaves it to its consumer. */
    DQT_EXPECT(c, dq_cancel(c, q, "L1"), 0);
    assert_int_equal(lookup(c, q, "L1").state, DQ_STATE_IN_FLIGHT);

    /* A made-up token is refused; a missing one is a bad argument. */
    DQT_EXPECT(c, dq_ack(c, q, "L1", "not-the-token"), 0);
    DQT_EXPECT(c, dq_ack(c, q, "L1", NULL), DQ_EINVAL);
    DQT_EXPECT(c, dq_ack(c, q, "L1", ""), DQ_EINVAL);
    DQT_EXPECT(c, dq_extend(c, q, "L1", m->token, 0), DQ_EINVAL);
    assert_int_equal(lookup(c, q, "L1").state, DQ_STATE_IN_FLIGHT);

    DQT_EXPECT(c, dq_ack(c, q, "L1", m->token), 1);
    DQT_EXPECT(c, dq_ack(c, q, "L1", m->token), 0);
    DQT_EXPECT(c, dq_nack(c, q, "L1", m->token, 0, "late"), 0);
    DQT_EXPECT(c, dq_extend(c, q, "L1", m->token, 1000), 0);
    info = lookup(c, q, "L1");
    assert_int_equal(info.state, DQ_STATE_UNKNOWN);
    assert_int_equal(info.due_ms, 0);
    expect_stats(c, q, 0, 0, 0, 0);
    assert_int_equal(dead_count(c, q), 0);
    dq_msg_free(m);

    /* Nothing came back: the queue is empty for good. */
    take_none(c, q, &o, 300);
    dq_client_free(c);
}

/* Plain takes (no lease) still hand items out and forget them. */
static void test_plain_take(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "plain");
    dq_client *c = dqt_client(NULL);
    offer_now(c, q, "p1", "one", 3);
    offer_now(c, q, "p2", "two", 3);
    offer_now(c, q, "p3", "three", 5);

    dq_msg *m = NULL;
    DQT_EXPECT(c, dq_take(c, q, 2000, &m), 1);
    assert_string_equal(m->id, "p1");
    assert_null(m->token);
    assert_int_equal(m->attempt, 1);
    dq_msg_free(m);

    dq_msg *ms[4] = {NULL};
    DQT_EXPECT(c, dq_take_many(c, q, NULL, 2000, ms, 4), 2);
    assert_string_equal(ms[0]->id, "p2");
    assert_string_equal(ms[1]->id, "p3");
    for (int i = 0; i < 2; i++) {
        assert_null(ms[i]->token);
        assert_int_equal(ms[i]->attempt, 1);
        dq_msg_free(ms[i]);
    }
    /* A lease of 0 in the options is a plain take too. */
    offer_now(c, q, "p4", "four", 4);
    dq_take_opts o = lease_opts(0, 3);
    m = take_one(c, q, &o, 2);
    assert_null(m->token);
    dq_msg_free(m);

    expect_stats(c, q, 0, 0, 0, 0);
    for (int i = 1; i <= 4; i++) {
        char id[8];
        snprintf(id, sizeof id, "p%d", i);
        assert_int_equal(lookup(c, q, id).state, DQ_STATE_UNKNOWN);
        DQT_EXPECT(c, dq_ack(c, q, id, "whatever"), 0);
    }
    /* Taken without a lease, the id is free for a new offer. */
    offer_now(c, q, "p1", "again", 5);
    dq_client_free(c);
}

/* ------------------------------------------------------------ leases running out */

/* A lease of 200 ms runs out: the client's scheduler returns the item, and
 * the next take gets attempt 2 with a new token; the old token is fenced. */
static void test_lease_expiry_fencing(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "expire");
    dq_client *c = dqt_client(NULL);
    DQT_EXPECT(c, dq_schedule(c, q), 0);
    offer_now(c, q, "e1", "payload e1", 10);

    dq_take_opts o = lease_opts(200, 5);
    dq_msg *m1 = take_one(c, q, &o, 2);
    assert_int_equal(m1->attempt, 1);
    assert_non_null(m1->token);
    int64_t lease_end = lookup(c, q, "e1").due_ms;
    assert_true(lease_end > 0);

    /* Another consumer takes with a longer lease: it must wait for the end. */
    dq_take_opts o2 = lease_opts(10000, 5);
    dq_msg *m2 = take_one(c, q, &o2, 5);
    int64_t got_at = dqt_server_ms();
    assert_string_equal(m2->id, "e1");
    assert_int_equal(m2->attempt, 2);
    assert_non_null(m2->token);
    assert_string_not_equal(m2->token, m1->token);
    assert_memory_equal(m2->payload, "payload e1", 10);
    assert_int_equal(m2->payload_len, 10);
    assert_int_equal(m2->due_ms, m1->due_ms); /* the original due time */
    if (got_at < lease_end)
        print_error("redelivered at %lld, before the lease end %lld\n", (long long)got_at,
                    (long long)lease_end);
    assert_true(got_at >= lease_end);
    assert_true(m2->ready_ms >= lease_end);

    dq_sched_counters sc;
    dq_get_sched_counters(c, &sc);
    assert_true(sc.leases_expired >= 1);
    assert_int_equal(sc.buried, 0);

    /* Fencing: the first lease's token can do nothing any more. */
    DQT_EXPECT(c, dq_ack(c, q, "e1", m1->token), 0);
    DQT_EXPECT(c, dq_nack(c, q, "e1", m1->token, 0, "stale"), 0);
    DQT_EXPECT(c, dq_extend(c, q, "e1", m1->token, 60000), 0);
    dq_item_info info = lookup(c, q, "e1");
    assert_int_equal(info.state, DQ_STATE_IN_FLIGHT);
    assert_int_equal(info.attempts, 2);
    assert_true(info.due_ms >= got_at + 9000); /* m2's lease, untouched */
    expect_stats(c, q, 0, 0, 1, 0);

    DQT_EXPECT(c, dq_ack(c, q, "e1", m2->token), 1);
    assert_int_equal(lookup(c, q, "e1").state, DQ_STATE_UNKNOWN);
    expect_stats(c, q, 0, 0, 0, 0);
    dq_msg_free(m1);
    dq_msg_free(m2);
    dq_client_free(c);
}

/* A lease that runs out on the last attempt makes a dead letter. */
static void test_lease_expiry_buries(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "expdead");
    dq_client *c = dqt_client(NULL);
    DQT_EXPECT(c, dq_schedule(c, q), 0);
    offer_now(c, q, "x1", "xx", 2);
    dq_take_opts o = lease_opts(150, 2);
    dq_msg *m1 = take_one(c, q, &o, 2);
    assert_int_equal(m1->attempt, 1);
    dq_msg *m2 = take_one(c, q, &o, 5);
    assert_int_equal(m2->attempt, 2);
    wait_state(c, q, "x1", DQ_STATE_DEAD, 5);
    DQT_EXPECT(c, dq_ack(c, q, "x1", m2->token), 0);
    expect_stats(c, q, 0, 0, 0, 1);
    dq_dead_letter *d = NULL;
    size_t n = 0;
    DQT_EXPECT(c, dq_dead_list(c, q, 0, 10, &d, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].id, "x1");
    assert_int_equal(d[0].attempts, 2);
    print_message("lease-expiry dead letter reason: \"%s\"\n", d[0].reason);
    assert_non_null(strstr(d[0].reason, "attempt 2 of 2"));
    assert_non_null(strstr(d[0].reason, "lease"));
    assert_string_equal(d[0].error, "");
    assert_int_equal(d[0].payload_len, 2);
    assert_memory_equal(d[0].payload, "xx", 2);
    dq_dead_letters_free(d, n);
    dq_sched_counters sc;
    dq_get_sched_counters(c, &sc);
    assert_true(sc.leases_expired >= 2);
    assert_int_equal(sc.buried, 1);
    dq_msg_free(m1);
    dq_msg_free(m2);
    dq_client_free(c);
}

/* dq_extend keeps a lease alive past its original end: while it is
 * extended nobody gets the item; once the extensions stop it comes back. */
static void test_extend(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "extend");
    dq_client *c = dqt_client(NULL);
    DQT_EXPECT(c, dq_schedule(c, q), 0);
    offer_now(c, q, "x1", "ext", 3);
    const int64_t lease = 300 * dqt_slow();
    dq_take_opts o = lease_opts(lease, 5);
    dq_msg *m = take_one(c, q, &o, 2);
    int64_t first_end = lookup(c, q, "x1").due_ms;

    /* Extend every ~100 ms for 4 original leases' worth; meanwhile a take
     * (same client, its scheduler running) gets nothing. */
    int64_t until = dqt_server_ms() + 4 * lease;
    int rounds = 0;
    while (dqt_server_ms() < until && rounds < 200) {
        take_none(c, q, &o, lease / 3);
        int64_t s0 = dqt_server_ms();
        DQT_EXPECT(c, dq_extend(c, q, "x1", m->token, lease), 1);
        dq_item_info info = lookup(c, q, "x1");
        assert_int_equal(info.state, DQ_STATE_IN_FLIGHT);
        assert_int_equal(info.attempts, 1);
        assert_true(info.due_ms >= s0 + lease);
        rounds++;
    }
    assert_true(rounds >= 4);
    assert_true(dqt_server_ms() > first_end + lease); /* well past the original end */
    dq_item_info info = lookup(c, q, "x1");
    assert_int_equal(info.state, DQ_STATE_IN_FLIGHT);
    assert_true(info.due_ms > first_end);
    dq_sched_counters sc;
    dq_get_sched_counters(c, &sc);
    assert_int_equal(sc.leases_expired, 0);

    /* No more extensions: the extended lease runs out and the item comes
     * back (the scheduler must have re-armed for the new lease end). */
    int64_t last_end = info.due_ms;
    dq_msg *m2 = take_one(c, q, &o, 3);
    assert_true(dqt_server_ms() >= last_end);
    assert_int_equal(m2->attempt, 2);
    assert_string_not_equal(m2->token, m->token);
    DQT_EXPECT(c, dq_extend(c, q, "x1", m->token, lease), 0);
    DQT_EXPECT(c, dq_ack(c, q, "x1", m2->token), 1);
    dq_msg_free(m);
    dq_msg_free(m2);
    dq_client_free(c);
}

/* ------------------------------------------------------------ nack */

/* nack with a delay of 100 ms: pending again (attempts 1), then delivered
 * as attempt 2 no earlier than the delay. */
static void test_nack_delay(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "nack");
    dq_client *c = dqt_client(NULL);
    DQT_EXPECT(c, dq_schedule(c, q), 0);
    offer_now(c, q, "n1", "retry me", 8);
    dq_take_opts o = lease_opts(10000, 5);
    dq_msg *m = take_one(c, q, &o, 2);
    assert_int_equal(m->attempt, 1);

    int64_t s0 = dqt_server_ms();
    DQT_EXPECT(c, dq_nack(c, q, "n1", m->token, 100, "boom 1"), 1);
    int64_t s1 = dqt_server_ms();
    dq_item_info info = lookup(c, q, "n1");
    if (info.state == DQ_STATE_PENDING) {
        assert_int_equal(info.attempts, 1);
        assert_true(info.due_ms >= s0 + 100 && info.due_ms <= s1 + 100);
    } else {
        assert_int_equal(info.state, DQ_STATE_READY); /* only if 100 ms went by */
    }
    DQT_EXPECT(c, dq_nack(c, q, "n1", m->token, 100, "again"), 0); /* settled already */
    DQT_EXPECT(c, dq_ack(c, q, "n1", m->token), 0);

    dq_msg *m2 = take_one(c, q, &o, 3);
    assert_true(dqt_server_ms() >= s0 + 100);
    assert_string_equal(m2->id, "n1");
    assert_int_equal(m2->attempt, 2);
    assert_int_equal(m2->payload_len, 8);
    assert_memory_equal(m2->payload, "retry me", 8);
    assert_string_not_equal(m2->token, m->token);
    DQT_EXPECT(c, dq_ack(c, q, "n1", m2->token), 1);
    expect_stats(c, q, 0, 0, 0, 0);
    dq_msg_free(m);
    dq_msg_free(m2);
    dq_client_free(c);
}

/* nack with delay < 0 uses the client's backoff for the attempt number. */
static void test_nack_backoff(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "backoff");
    dq_client *c = dqt_client(NULL); /* base 1 s doubling, cap 10 min */
    for (int i = 0; i < 50; i++) {
        int64_t b1 = dq_backoff_ms(c, 1), b3 = dq_backoff_ms(c, 3), b40 = dq_backoff_ms(c, 40);
        assert_true(b1 >= 500 && b1 <= 1000);
        assert_true(b3 >= 2000 && b3 <= 4000);
        assert_true(b40 >= 300000 && b40 <= 600000);
    }
    offer_now(c, q, "b1", "bk", 2);
    dq_take_opts o = lease_opts(10000, 5);
    dq_msg *m = take_one(c, q, &o, 2);
    int64_t s0 = dqt_server_ms();
    DQT_EXPECT(c, dq_nack(c, q, "b1", m->token, -1, "use backoff"), 1);
    int64_t s1 = dqt_server_ms();
    dq_item_info info = lookup(c, q, "b1");
    assert_int_equal(info.state, DQ_STATE_PENDING);
    if (info.due_ms < s0 + 500 || info.due_ms > s1 + 1000)
        print_error("backoff due %lld not in [%lld, %lld]\n", (long long)info.due_ms,
                    (long long)(s0 + 500), (long long)(s1 + 1000));
    assert_true(info.due_ms >= s0 + 500 && info.due_ms <= s1 + 1000);
    dq_msg_free(m);
    dq_client_free(c);

    dq_options opts;
    dq_options_init(&opts);
    opts.backoff_base_ms = 10;
    opts.backoff_max_ms = 20;
    c = dqt_client(&opts);
    for (int i = 0; i < 50; i++) {
        int64_t b1 = dq_backoff_ms(c, 1), b2 = dq_backoff_ms(c, 2), b9 = dq_backoff_ms(c, 9);
        assert_true(b1 >= 5 && b1 <= 10);
        assert_true(b2 >= 10 && b2 <= 20);
        assert_true(b9 >= 10 && b9 <= 20);
        int64_t bmax = dq_backoff_ms(c, INT_MAX); /* closed form: no loop over it */
        assert_true(bmax >= 10 && bmax <= 20);
    }
    dq_client_free(c);

    opts.backoff_base_ms = 0;
    opts.backoff_max_ms = 0;
    c = dqt_client(&opts);
    int64_t t0 = dqt_mono_ms();
    assert_int_equal(dq_backoff_ms(c, INT_MAX), 0);
    assert_int_equal(dq_backoff_ms(c, 999999999), 0);
    assert_true(dqt_mono_ms() - t0 < 100);
    opts.backoff_base_ms = 1;
    opts.backoff_max_ms = DQ_DUE_MAX_MS;
    dq_client_free(c);
    c = dqt_client(&opts);
    int64_t b41 = dq_backoff_ms(c, 42), b43 = dq_backoff_ms(c, 43), bbig = dq_backoff_ms(c, INT_MAX);
    assert_true(b41 >= ((int64_t)1 << 40) && b41 <= ((int64_t)1 << 41));
    assert_true(b43 >= DQ_DUE_MAX_MS / 2 && b43 <= DQ_DUE_MAX_MS);
    assert_true(bbig >= DQ_DUE_MAX_MS / 2 && bbig <= DQ_DUE_MAX_MS);
    dq_client_free(c);
}

/* ------------------------------------------------------------ dead letters */

/* max_attempts 3, nacked every time: the third nack buries it (2), with
 * attempts 3, a reason naming attempt 3 of 3, the last error and the exact
 * payload bytes; redrive(id) makes it ready again, attempt 1. */
static void test_dead_after_max_attempts(void **state) {
    (void)state;
    static const unsigned char payload[] = {'d', 0x00, 'e', 0x00, 0xff, 'a', 0x00, '\n', 'd'};
    char q[64];
    dqt_queue(q, sizeof q, "dead");
    dq_client *c = dqt_client(NULL);
    DQT_EXPECT(c, dq_schedule(c, q), 0);
    dq_offer_result res;
    dq_item it = {.id = "dl-1", .payload = payload, .payload_len = sizeof payload};
    DQT_EXPECT(c, dq_offer(c, q, &it, &res), 0);

    dq_take_opts o = lease_opts(10000, 3);
    int64_t before = 0;
    for (int attempt = 1; attempt <= 3; attempt++) {
        dq_msg *m = take_one(c, q, &o, 3);
        assert_string_equal(m->id, "dl-1");
        assert_int_equal(m->attempt, attempt);
        assert_int_equal(m->payload_len, sizeof payload);
        assert_memory_equal(m->payload, payload, sizeof payload);
        assert_int_equal(m->due_ms, res.due_ms);
        char err[32];
        snprintf(err, sizeof err, "error number %d", attempt);
        before = dqt_server_ms();
        DQT_EXPECT(c, dq_nack(c, q, "dl-1", m->token, 0, err), attempt < 3 ? 1 : 2);
        dq_msg_free(m);
    }
    int64_t after = dqt_server_ms();
    dq_item_info info = lookup(c, q, "dl-1");
    assert_int_equal(info.state, DQ_STATE_DEAD);
    assert_int_equal(dead_count(c, q), 1);
    expect_stats(c, q, 0, 0, 0, 1);
    take_none(c, q, &o, 200); /* dead letters are not delivered */

    dq_dead_letter *d = NULL;
    size_t n = 99;
    DQT_EXPECT(c, dq_dead_list(c, q, 0, 100, &d, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].id, "dl-1");
    assert_int_equal(d[0].attempts, 3);
    print_message("dead letter reason: \"%s\", error: \"%s\"\n", d[0].reason, d[0].error);
    assert_non_null(strstr(d[0].reason, "attempt 3 of 3"));
    assert_string_equal(d[0].error, "error number 3");
    assert_int_equal(d[0].payload_len, sizeof payload);
    assert_memory_equal(d[0].payload, payload, sizeof payload);
    assert_int_equal(d[0].due_ms, res.due_ms);
    assert_true(d[0].died_ms >= before && d[0].died_ms <= after);
    dq_dead_letters_free(d, n);
    /* Past the end: an empty list. */
    d = NULL;
    DQT_EXPECT(c, dq_dead_list(c, q, 1, 10, &d, &n), 0);
    assert_int_equal(n, 0);
    dq_dead_letters_free(d, n);
    DQT_EXPECT(c, dq_dead_list(c, q, 0, 0, &d, &n), DQ_EINVAL);

    /* Redrive it: ready again, and attempts start over. */
    DQT_EXPECT(c, dq_dead_redrive(c, q, "nope"), 0);
    DQT_EXPECT(c, dq_dead_redrive(c, q, "dl-1"), 1);
    assert_int_equal(lookup(c, q, "dl-1").state, DQ_STATE_READY);
    assert_int_equal(dead_count(c, q), 0);
    expect_stats(c, q, 0, 1, 0, 0);
    DQT_EXPECT(c, dq_dead_redrive(c, q, "dl-1"), 0); /* not dead any more */
    dq_msg *m = take_one(c, q, &o, 2);
    assert_int_equal(m->attempt, 1);
    assert_int_equal(m->payload_len, sizeof payload);
    assert_memory_equal(m->payload, payload, sizeof payload);
    /* It has its three attempts again. */
    DQT_EXPECT(c, dq_nack(c, q, "dl-1", m->token, 0, "x"), 1);
    dq_msg_free(m);
    m = take_one(c, q, &o, 3);
    assert_int_equal(m->attempt, 2);
    DQT_EXPECT(c, dq_ack(c, q, "dl-1", m->token), 1);
    dq_msg_free(m);
    expect_stats(c, q, 0, 0, 0, 0);
    dq_client_free(c);
}

/* Buries n items named <prefix><i> with max_attempts 1 (one nack each). */
static void bury_n(dq_client *c, const char *q, const char *prefix, int n) {
    for (int i = 0; i < n; i++) {
        char id[32], pay[48];
        snprintf(id, sizeof id, "%s%d", prefix, i);
        snprintf(pay, sizeof pay, "payload of %s", id);
        offer_now(c, q, id, pay, strlen(pay));
    }
    dq_take_opts o = lease_opts(10000, 1);
    for (int i = 0; i < n; i++) {
        dq_msg *m = take_one(c, q, &o, 2);
        DQT_EXPECT(c, dq_nack(c, q, m->id, m->token, 0, "bury"), 2);
        dq_msg_free(m);
    }
}

/* Redrive all, purge, and never a second copy of an id that is active. */
static void test_dead_redrive_all_purge(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "deadall");
    dq_client *c = dqt_client(NULL);
    bury_n(c, q, "r", 5);
    assert_int_equal(dead_count(c, q), 5);
    expect_stats(c, q, 0, 0, 0, 5);

    /* Listed oldest death first, paged. */
    dq_dead_letter *d = NULL;
    size_t n = 0;
    DQT_EXPECT(c, dq_dead_list(c, q, 1, 2, &d, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(d[0].id, "r1");
    assert_string_equal(d[1].id, "r2");
    assert_int_equal(d[0].attempts, 1);
    assert_non_null(strstr(d[0].reason, "attempt 1 of 1"));
    assert_string_equal(d[1].error, "bury");
    dq_dead_letters_free(d, n);

    /* r0 was offered again meanwhile (a dead id is free): redrive drops
     * the dead copy instead of doubling it. */
    dq_item again = {.id = "r0", .payload = "new r0", .payload_len = 6, .delay_ms = 60000};
    dq_offer_result res;
    DQT_EXPECT(c, dq_offer(c, q, &again, &res), 0);
    assert_int_equal(res.status, DQ_ADDED);
    assert_int_equal(lookup(c, q, "r0").state, DQ_STATE_PENDING);
    DQT_EXPECT(c, dq_dead_redrive(c, q, NULL), 4);
    assert_int_equal(dead_count(c, q), 0);
    expect_stats(c, q, 1, 4, 0, 0);
    DQT_EXPECT(c, dq_cancel(c, q, "r0"), 1);

    dq_msg *ms[8] = {NULL};
    dq_take_opts o = lease_opts(10000, 1);
    DQT_EXPECT(c, dq_take_many(c, q, &o, 2000, ms, 8), 4);
    for (int i = 0; i < 4; i++) {
        char id[8], pay[32];
        snprintf(id, sizeof id, "r%d", i + 1);
        snprintf(pay, sizeof pay, "payload of %s", id);
        assert_string_equal(ms[i]->id, id);
        assert_string_equal(ms[i]->payload, pay);
        assert_int_equal(ms[i]->attempt, 1);
        DQT_EXPECT(c, dq_nack(c, q, ms[i]->id, ms[i]->token, 0, "again"), 2);
        dq_msg_free(ms[i]);
    }
    assert_int_equal(dead_count(c, q), 4);

    DQT_EXPECT(c, dq_dead_purge(c, q), 4);
    assert_int_equal(dead_count(c, q), 0);
    assert_int_equal(lookup(c, q, "r2").state, DQ_STATE_UNKNOWN);
    DQT_EXPECT(c, dq_dead_purge(c, q), 0);
    DQT_EXPECT(c, dq_dead_redrive(c, q, NULL), 0);
    expect_stats(c, q, 0, 0, 0, 0);
    dq_client_free(c);
}

/* Redrive all in more than one batch (the library works in batches of a few
 * hundred): every letter comes back exactly once. */
static void test_dead_redrive_many(void **state) {
    (void)state;
    enum { M = 1200 };
    char q[64];
    dqt_queue(q, sizeof q, "deadmany");
    dq_client *c = dqt_client(NULL);
    /* Bury quickly: take 64 at a time, nack each. */
    static dq_item items[M];
    static char ids[M][12];
    for (int i = 0; i < M; i++) {
        snprintf(ids[i], sizeof ids[i], "m%04d", i);
        items[i] = (dq_item){.id = ids[i], .payload = ids[i], .payload_len = strlen(ids[i])};
    }
    DQT_EXPECT(c, dq_offer_many(c, q, items, M, NULL), M);
    dq_take_opts o = lease_opts(60000, 1);
    int buried = 0;
    for (int round = 0; round < 100 && buried < M; round++) {
        dq_msg *ms[64];
        int n = dq_take_many(c, q, &o, 1000, ms, 64);
        assert_true(n > 0);
        for (int i = 0; i < n; i++) {
            DQT_EXPECT(c, dq_nack(c, q, ms[i]->id, ms[i]->token, 0, NULL), 2);
            dq_msg_free(ms[i]);
        }
        buried += n;
    }
    assert_int_equal(buried, M);
    assert_int_equal(dead_count(c, q), M);
    DQT_EXPECT(c, dq_dead_redrive(c, q, NULL), M);
    expect_stats(c, q, 0, M, 0, 0);
    static unsigned char seen[M];
    memset(seen, 0, sizeof seen);
    int got = 0;
    for (int round = 0; round < 100 && got < M; round++) {
        dq_msg *ms[64];
        int n = dq_take_many(c, q, NULL, 0, ms, 64);
        assert_true(n > 0);
        for (int i = 0; i < n; i++) {
            int k = atoi(ms[i]->id + 1);
            assert_true(k >= 0 && k < M);
            seen[k]++;
            dq_msg_free(ms[i]);
        }
        got += n;
    }
    assert_int_equal(got, M);
    for (int i = 0; i < M; i++) assert_int_equal(seen[i], 1);
    expect_stats(c, q, 0, 0, 0, 0);
    dq_client_free(c);
}

/* ------------------------------------------------------------ idempotent ids */

static void test_idempotent_offer(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "idem");
    dq_client *c = dqt_client(NULL);
    dq_item it = {.id = "once", .payload = "first", .payload_len = 5};
    dq_offer_result res;
    DQT_EXPECT(c, dq_offer(c, q, &it, &res), 0);
    assert_int_equal(res.status, DQ_ADDED);
    assert_int_equal(res.state, DQ_STATE_READY);

    /* Ready: kept, whatever the flags; no second copy. */
    dq_item again = {.id = "once", .payload = "second", .payload_len = 6};
    DQT_EXPECT(c, dq_offer(c, q, &again, &res), 0);
    assert_int_equal(res.status, DQ_KEPT);
    assert_int_equal(res.state, DQ_STATE_READY);
    assert_int_equal(res.due_ms, 0);
    again.flags = DQ_OFFER_KEEP;
    again.delay_ms = 5000;
    DQT_EXPECT(c, dq_offer(c, q, &again, &res), 0);
    assert_int_equal(res.status, DQ_KEPT);
    assert_int_equal(res.state, DQ_STATE_READY);
    expect_stats(c, q, 0, 1, 0, 0);

    dq_take_opts o = lease_opts(10000, 3);
    dq_msg *m = take_one(c, q, &o, 2);
    assert_string_equal(m->id, "once");
    assert_string_equal(m->payload, "first");
    take_none(c, q, &o, 200); /* only one delivery */

    /* In flight: kept too, and the lease holder can still ack. */
    int64_t lease_end = lookup(c, q, "once").due_ms;
    again.flags = 0;
    again.delay_ms = 0;
    DQT_EXPECT(c, dq_offer(c, q, &again, &res), 0);
    assert_int_equal(res.status, DQ_KEPT);
    assert_int_equal(res.state, DQ_STATE_IN_FLIGHT);
    dq_item_info info = lookup(c, q, "once");
    assert_int_equal(info.state, DQ_STATE_IN_FLIGHT);
    assert_int_equal(info.due_ms, lease_end); /* the lease is untouched */
    assert_int_equal(info.attempts, 1);
    expect_stats(c, q, 0, 0, 1, 0);
    take_none(c, q, &o, 200);
    DQT_EXPECT(c, dq_ack(c, q, "once", m->token), 1);
    dq_msg_free(m);

    /* Acked: the id is free again. */
    DQT_EXPECT(c, dq_offer(c, q, &again, &res), 0);
    assert_int_equal(res.status, DQ_ADDED);
    m = take_one(c, q, &o, 2);
    assert_string_equal(m->payload, "second");
    assert_int_equal(m->attempt, 1);
    DQT_EXPECT(c, dq_ack(c, q, "once", m->token), 1);
    dq_msg_free(m);

    /* Pending: replaced (or kept with DQ_OFFER_KEEP), as before. */
    dq_item later = {.id = "later", .payload = "v1", .payload_len = 2, .delay_ms = 60000};
    DQT_EXPECT(c, dq_offer(c, q, &later, &res), 0);
    assert_int_equal(res.status, DQ_ADDED);
    later.payload = "v2";
    DQT_EXPECT(c, dq_offer(c, q, &later, &res), 0);
    assert_int_equal(res.status, DQ_REPLACED);
    later.flags = DQ_OFFER_KEEP;
    DQT_EXPECT(c, dq_offer(c, q, &later, &res), 0);
    assert_int_equal(res.status, DQ_KEPT);
    assert_int_equal(res.state, DQ_STATE_PENDING);
    expect_stats(c, q, 1, 0, 0, 0);
    dq_client_free(c);
}

/* ------------------------------------------------------------ take many */

static void test_take_many(void **state) {
    (void)state;
    enum { M = 25 };
    char q[64];
    dqt_queue(q, sizeof q, "many");
    dq_client *c = dqt_client(NULL);
    dq_item items[M];
    char ids[M][8];
    for (int i = 0; i < M; i++) {
        snprintf(ids[i], sizeof ids[i], "k%02d", i);
        items[i] = (dq_item){.id = ids[i], .payload = ids[i], .payload_len = 3};
    }
    DQT_EXPECT(c, dq_offer_many(c, q, items, M, NULL), M);
    expect_stats(c, q, 0, M, 0, 0);

    dq_take_opts o = lease_opts(30000, 3);
    dq_msg *ms[M];
    memset(ms, 0, sizeof ms);
    DQT_EXPECT(c, dq_take_many(c, q, &o, 2000, ms, 10), 10);
    expect_stats(c, q, 0, M - 10, 10, 0);
    DQT_EXPECT(c, dq_take_many(c, q, &o, 2000, ms + 10, 10), 10);
    DQT_EXPECT(c, dq_take_many(c, q, &o, 2000, ms + 20, 10), 5);
    expect_stats(c, q, 0, 0, M, 0);
    dq_msg *none[4] = {NULL};
    DQT_EXPECT(c, dq_take_many(c, q, &o, 0, none, 4), 0); /* timeout 0: what is ready now */
    for (int i = 0; i < M; i++) {
        assert_string_equal(ms[i]->id, ids[i]); /* offer order */
        assert_int_equal(ms[i]->attempt, 1);
        assert_non_null(ms[i]->token);
        for (int j = 0; j < i; j++) assert_string_not_equal(ms[i]->token, ms[j]->token);
    }
    assert_int_equal(lookup(c, q, "k17").state, DQ_STATE_IN_FLIGHT);
    for (int i = 0; i < M; i++) {
        DQT_EXPECT(c, dq_ack(c, q, ms[i]->id, ms[i]->token), 1);
        dq_msg_free(ms[i]);
    }
    expect_stats(c, q, 0, 0, 0, 0);
    DQT_EXPECT(c, dq_take_many(c, q, &o, 0, none, 65), DQ_EINVAL);
    DQT_EXPECT(c, dq_take_many(c, q, &o, 0, none, 0), DQ_EINVAL);
    dq_take_opts bad = lease_opts(-2, 3); /* -1 is DQ_QUEUE_SETTING */
    DQT_EXPECT(c, dq_take_many(c, q, &bad, 0, none, 1), DQ_EINVAL);
    dq_client_free(c);
}

/* ------------------------------------------------------------ worker */

enum { WN = 10 };

typedef struct fail_state {
    int deliveries[WN];
    int attempt_seen[WN][4]; /* how often each attempt number came */
    int bad;                 /* unknown ids, attempts out of range, no token */
    int total;
} fail_state;

static void fail_handler(dq_worker *w, dq_msg *msg, void *privdata) {
    fail_state *s = privdata;
    s->total++;
    int k = (msg->id_len == 3 && msg->id[0] == 'f') ? atoi(msg->id + 1) : -1;
    if (k < 0 || k >= WN || msg->attempt < 1 || msg->attempt > 3 || !msg->token) {
        s->bad++;
    } else {
        s->deliveries[k]++;
        s->attempt_seen[k][msg->attempt]++;
    }
    dq_worker_fail(w, msg, "handler says no");
}

/* A handler that fails everything, max_attempts 2, a tiny backoff: each
 * item is delivered exactly twice (attempts 1 and 2), then dead. */
static void test_worker_fails_to_dead(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "wfail");
    dq_options opts;
    dq_options_init(&opts);
    opts.backoff_base_ms = 10;
    opts.backoff_max_ms = 20;
    dq_client *c = dqt_client(&opts);
    dq_take_opts to = lease_opts(30000, 2);
    fail_state *s = calloc(1, sizeof *s);
    assert_non_null(s);
    dq_worker *w = dq_worker_start_ex(c, q, 4, 0, &to, fail_handler, s);
    assert_non_null(w);

    dq_item items[WN];
    char ids[WN][8];
    for (int i = 0; i < WN; i++) {
        snprintf(ids[i], sizeof ids[i], "f%02d", i);
        items[i] = (dq_item){.id = ids[i], .payload = "pf", .payload_len = 2, .delay_ms = 20 * i};
    }
    DQT_EXPECT(c, dq_offer_many(c, q, items, WN, NULL), WN);
    int64_t t0 = dqt_mono_ms();
    int64_t end = t0 + 10000 * dqt_slow();
    int64_t dead = 0;
    while (dqt_mono_ms() < end) {
        dqt_run_for(c, 0.02);
        dead = dead_count(c, q);
        if (dead >= WN) break;
    }
    print_message("worker: %d items dead after %lld ms, %d deliveries\n", (int)dead,
                  (long long)(dqt_mono_ms() - t0), s->total);
    assert_int_equal(dead, WN);
    /* A little longer: nothing more is delivered. */
    dqt_run_for(c, 0.3);
    assert_int_equal(s->bad, 0);
    for (int i = 0; i < WN; i++) {
        if (s->deliveries[i] != 2) print_error("item f%02d delivered %d times\n", i, s->deliveries[i]);
        assert_int_equal(s->deliveries[i], 2);
        assert_int_equal(s->attempt_seen[i][1], 1);
        assert_int_equal(s->attempt_seen[i][2], 1);
    }
    assert_int_equal(s->total, 2 * WN);
    dq_worker_counters wc;
    dq_worker_get_counters(w, &wc);
    assert_int_equal(wc.taken, 2 * WN);
    assert_int_equal(wc.failed, 2 * WN);
    assert_int_equal(wc.succeeded, 0);
    assert_int_equal(wc.stale, 0);
    assert_int_equal(wc.in_hand, 0);
    expect_stats(c, q, 0, 0, 0, WN);

    dq_dead_letter *d = NULL;
    size_t n = 0;
    DQT_EXPECT(c, dq_dead_list(c, q, 0, 100, &d, &n), 0);
    assert_int_equal(n, WN);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(d[i].attempts, 2);
        assert_non_null(strstr(d[i].reason, "attempt 2 of 2"));
        assert_string_equal(d[i].error, "handler says no");
        assert_int_equal(d[i].payload_len, 2);
    }
    dq_dead_letters_free(d, n);
    dq_worker_stop(w);
    dq_client_free(c);
    free(s);
}

typedef struct ack_state {
    int handled;
    dq_client *c;
} ack_state;

static void ack_handler(dq_worker *w, dq_msg *msg, void *privdata) {
    ack_state *s = privdata;
    s->handled++;
    dq_worker_done(w, msg, 0);
}

/* A worker that succeeds acks: nothing stays in flight or pending. */
static void test_worker_acks(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "wack");
    dq_client *c = dqt_client(NULL);
    ack_state s = {0, c};
    dq_worker *w = dq_worker_start_ex(c, q, 2, 0, NULL, ack_handler, &s);
    assert_non_null(w);
    for (int i = 0; i < 6; i++) {
        char id[8];
        snprintf(id, sizeof id, "a%d", i);
        offer_now(c, q, id, "x", 1);
    }
    int64_t end = dqt_mono_ms() + 5000 * dqt_slow();
    while (s.handled < 6 && dqt_mono_ms() < end) dqt_run_for(c, 0.02);
    assert_int_equal(s.handled, 6);
    /* Acks are asynchronous: wait until the server has them all. */
    dq_stats st = stats(c, q);
    while (st.in_flight != 0 && dqt_mono_ms() < end) {
        dqt_run_for(c, 0.02);
        st = stats(c, q);
    }
    expect_stats(c, q, 0, 0, 0, 0);
    dq_worker_counters wc;
    dq_worker_get_counters(w, &wc);
    assert_int_equal(wc.succeeded, 6);
    assert_int_equal(wc.stale, 0);
    dq_worker_stop(w);
    dq_client_free(c);
}

/* One delivery whose id went bad between take and ack (overwritten here:
 * the decoders never hand out such an id) is judged on its own: the other
 * acks of the same batch go through, and the worker counts one refused. */
static void corrupting_handler(dq_worker *w, dq_msg *msg, void *privdata) {
    ack_state *s = privdata;
    s->handled++;
    if (strcmp(msg->id, "b2") == 0) ((char *)msg->id)[0] = ' ';
    dq_worker_done(w, msg, 0);
}

static void test_ack_batch_bad_id(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "wbad");
    dq_client *c = dqt_client(NULL);
    for (int i = 0; i < 5; i++) {
        char id[8];
        snprintf(id, sizeof id, "b%d", i);
        offer_now(c, q, id, "x", 1);
    }
    ack_state s = {0, c};
    dq_take_opts opts = lease_opts(60000, 3);
    dq_worker *w = dq_worker_start_ex(c, q, 8, DQ_WORKER_NO_SCHEDULER, &opts, corrupting_handler, &s);
    assert_non_null(w);
    int64_t end = dqt_mono_ms() + 5000 * dqt_slow();
    dq_stats st = stats(c, q);
    while ((s.handled < 5 || st.in_flight != 1) && dqt_mono_ms() < end) {
        dqt_run_for(c, 0.02);
        st = stats(c, q);
    }
    assert_int_equal(s.handled, 5);
    expect_stats(c, q, 0, 0, 1, 0); /* b2 alone stays in flight, until its lease ends */
    dq_worker_counters wc;
    dq_worker_get_counters(w, &wc);
    assert_int_equal(wc.succeeded, 5);
    assert_int_equal(wc.refused, 1);
    assert_int_equal(wc.stale, 0);
    assert_int_equal(lookup(c, q, "b2").state, DQ_STATE_IN_FLIGHT);
    assert_int_equal(lookup(c, q, "b1").state, DQ_STATE_UNKNOWN);
    /* A single ack of an invalid id: DQ_EINVAL, alone. */
    assert_int_equal(dq_ack(c, q, "b 2", "tok"), DQ_EINVAL);
    dq_worker_stop(w);
    dq_client_free(c);
}

/* A worker whose handler keeps its messages past their lease, then settles
 * them: the server refuses both (stale), the worker counts them, logs a
 * line naming each, and calls the stale hook once for each with the item;
 * the hook may stop the worker. */
typedef struct stale_state {
    dq_msg *held[2];
    int handled, stale, acked_seen, nacked_seen;
    char ids[2][8];
    int attempts[2];
    int logged; /* log lines naming s1's ack and s2's nack */
    dq_worker_counters at_last;
} stale_state;

static void holding_handler(dq_worker *w, dq_msg *msg, void *privdata) {
    (void)w;
    stale_state *s = privdata;
    if (s->handled < 2) s->held[s->handled] = msg;
    else dq_worker_done(w, msg, 0);
    s->handled++;
}

static void on_stale_seen(dq_worker *w, const dq_msg *msg, int acked, void *privdata) {
    stale_state *s = privdata;
    if (s->stale < 2) {
        snprintf(s->ids[s->stale], sizeof s->ids[0], "%.*s", (int)msg->id_len, msg->id);
        s->attempts[s->stale] = msg->attempt;
    }
    if (acked) s->acked_seen++;
    else s->nacked_seen++;
    if (++s->stale == 2) {
        dq_worker_get_counters(w, &s->at_last);
        dq_worker_stop(w); /* allowed here */
    }
}

static void stale_log(void *privdata, const char *msg) {
    stale_state *s = privdata;
    if (strstr(msg, "the ack of s1 (attempt 1) came after its lease had run out") ||
        strstr(msg, "the nack of s2 (attempt 1) came after its lease had run out"))
        s->logged++;
}

static void test_worker_settles_late(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "wstale");
    dq_client *c = dqt_client(NULL);
    stale_state s = {0};
    dq_set_log(c, stale_log, &s);
    offer_now(c, q, "s1", "x", 1);
    offer_now(c, q, "s2", "y", 1);
    dq_take_opts opts = lease_opts(200, 0);
    dq_worker *w = dq_worker_start_ex(c, q, 2, DQ_WORKER_NO_SCHEDULER, &opts, holding_handler, &s);
    assert_non_null(w);
    dq_worker_set_on_stale(w, on_stale_seen, &s);
    int64_t end = dqt_mono_ms() + 5000 * dqt_slow();
    while (s.handled < 2 && dqt_mono_ms() < end) dqt_run_for(c, 0.02);
    assert_int_equal(s.handled, 2);
    dqt_run_for(c, 0.4); /* past both leases, by the server's clock too */
    int s1 = strcmp(s.held[0]->id, "s1") == 0 ? 0 : 1;
    dq_worker_done(w, s.held[s1], 0);     /* s1: an ack */
    dq_worker_done(w, s.held[1 - s1], 1); /* s2: a nack */
    while (s.stale < 2 && dqt_mono_ms() < end) dqt_run_for(c, 0.02);
    assert_int_equal(s.stale, 2);
    assert_int_equal(s.acked_seen, 1);
    assert_int_equal(s.nacked_seen, 1);
    assert_true((strcmp(s.ids[0], "s1") == 0 && strcmp(s.ids[1], "s2") == 0) ||
                (strcmp(s.ids[0], "s2") == 0 && strcmp(s.ids[1], "s1") == 0));
    assert_int_equal(s.attempts[0], 1);
    assert_int_equal(s.attempts[1], 1);
    assert_int_equal(s.logged, 2);
    assert_int_equal(s.at_last.stale, 2);
    assert_int_equal(s.at_last.refused, 0);
    assert_int_equal(s.at_last.in_hand, 0);
    /* Refused as stale, nothing changed: both still in flight until a
     * scheduler returns them. */
    assert_int_equal(lookup(c, q, "s1").state, DQ_STATE_IN_FLIGHT);
    assert_int_equal(lookup(c, q, "s2").state, DQ_STATE_IN_FLIGHT);
    dq_client_free(c); /* the hook stopped the worker */
}

/* Three messages kept past their lease, then acked together (one call,
 * three stale results): the hook stops the worker at the first, and
 * reads each message whole (id, payload, queue) while the worker goes on
 * with the rest; under ASan a message freed or a worker released before
 * the last hook would show. */
typedef struct batch_stale {
    dq_msg *held[3];
    int handled, stale;
    size_t bytes; /* of the messages the hook read */
} batch_stale;

static void holding3(dq_worker *w, dq_msg *msg, void *privdata) {
    (void)w;
    batch_stale *s = privdata;
    if (s->handled < 3) s->held[s->handled++] = msg;
}

static void on_batch_stale(dq_worker *w, const dq_msg *msg, int acked, void *privdata) {
    batch_stale *s = privdata;
    assert_true(acked);
    char copy[256];
    snprintf(copy, sizeof copy, "%s|%.*s|%.*s", msg->queue, (int)msg->id_len, msg->id,
             (int)msg->payload_len, (const char *)msg->payload);
    s->bytes += strlen(copy);
    if (s->stale++ == 0) dq_worker_stop(w); /* the others' hooks still come */
}

static void test_worker_stale_batch_stop(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "wstaleb");
    dq_client *c = dqt_client(NULL);
    batch_stale s = {0};
    offer_now(c, q, "b1", "p1", 1);
    offer_now(c, q, "b2", "p2", 1);
    offer_now(c, q, "b3", "p3", 1);
    dq_take_opts opts = lease_opts(200, 0);
    dq_worker *w = dq_worker_start_ex(c, q, 3, DQ_WORKER_NO_SCHEDULER, &opts, holding3, &s);
    assert_non_null(w);
    dq_worker_set_on_stale(w, on_batch_stale, &s);
    int64_t end = dqt_mono_ms() + 5000 * dqt_slow();
    while (s.handled < 3 && dqt_mono_ms() < end) dqt_run_for(c, 0.02);
    assert_int_equal(s.handled, 3);
    dqt_run_for(c, 0.4); /* past the leases */
    for (int i = 0; i < 3; i++) dq_worker_done(w, s.held[i], 0); /* one flush: one call */
    while (s.stale < 3 && dqt_mono_ms() < end) dqt_run_for(c, 0.02);
    assert_int_equal(s.stale, 3);
    assert_true(s.bytes > 3 * strlen(q));
    dq_client_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lease_ack_lifecycle),
        cmocka_unit_test(test_plain_take),
        cmocka_unit_test(test_lease_expiry_fencing),
        cmocka_unit_test(test_lease_expiry_buries),
        cmocka_unit_test(test_extend),
        cmocka_unit_test(test_nack_delay),
        cmocka_unit_test(test_nack_backoff),
        cmocka_unit_test(test_dead_after_max_attempts),
        cmocka_unit_test(test_dead_redrive_all_purge),
        cmocka_unit_test(test_dead_redrive_many),
        cmocka_unit_test(test_idempotent_offer),
        cmocka_unit_test(test_take_many),
        cmocka_unit_test(test_worker_fails_to_dead),
        cmocka_unit_test(test_worker_acks),
        cmocka_unit_test(test_ack_batch_bad_id),
        cmocka_unit_test(test_worker_settles_late),
        cmocka_unit_test(test_worker_stale_batch_stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
