/*
 * test_api.c - the synchronous C API against a real Redis: connecting,
 * offer/take round trips, batches, cancel, lookup, stats, metrics of many
 * queues at once, keep/replace,
 * payload limits, wrong-type keys and take timeouts.
 * Needs $DQ_TEST_REDIS (tests/run.sh sets it). Each test uses its own queues.
 */
#include "dqtest.h"

/* ------------------------------------------------------------ connecting */

static void test_strerror(void **state) {
    (void)state;
    for (int code = DQ_OK; code >= DQ_EBUSY; code--) {
        const char *s = dq_strerror(code);
        assert_non_null(s);
        assert_true(strlen(s) > 0);
    }
    assert_non_null(dq_strerror(12345));
    assert_non_null(dq_strerror(-12345));
    assert_string_not_equal(dq_strerror(DQ_EINVAL), dq_strerror(DQ_ECONNECT));
}

static void connect_expect(const char *url, int want, int64_t max_ms) {
    dq_options o;
    dq_options_init(&o);
    o.connect_timeout_ms = 2000;
    dq_client *c = dq_client_new(NULL, &o);
    assert_non_null(c);
    int64_t t0 = dqt_mono_ms();
    int rc = dq_connect(c, url);
    int64_t took = dqt_mono_ms() - t0;
    if (rc != want)
        print_error("dq_connect(\"%s\") = %d (%s), want %d; errstr: %s\n", url, rc, dq_strerror(rc),
                    want, dq_client_errstr(c));
    size_t errlen = strlen(dq_client_errstr(c));
    int multiline = strchr(dq_client_errstr(c), '\n') != NULL;
    dq_client_free(c); /* before asserting: a failure is not also a leak */
    assert_int_equal(rc, want);
    if (want != 0) {
        assert_true(errlen > 0);
        assert_false(multiline);
    }
    if (took > max_ms * dqt_slow())
        print_error("dq_connect(\"%s\") took %lld ms\n", url, (long long)took);
    assert_true(took <= max_ms * dqt_slow());
}

static void test_connect_bad_url(void **state) {
    (void)state;
    const char *bad[] = {
        "",
        "http://127.0.0.1:6379",
        "redis://",
        "redis://127.0.0.1:notaport",
        "redis://127.0.0.1:0",
        "redis://127.0.0.1:65536",
        "redis://127.0.0.1:6379/notadb",
        "unix://",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) connect_expect(bad[i], DQ_EINVAL, 1000);
}

static void test_connect_closed_port(void **state) {
    (void)state;
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", dqt_closed_port());
    connect_expect(url, DQ_ECONNECT, 1000);
}

/* A server that accepts the TCP connection but never answers: the
 * handshake times out after connect_timeout_ms. */
static void test_connect_silent_server(void **state) {
    (void)state;
    int port;
    int fd = dqt_loopback_socket(&port);
    assert_int_equal(listen(fd, 16), 0); /* never accept()ed: the kernel completes the handshake */
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);

    dq_options o;
    dq_options_init(&o);
    o.connect_timeout_ms = 300;
    dq_client *c = dq_client_new(NULL, &o);
    assert_non_null(c);
    int64_t t0 = dqt_mono_ms();
    int rc = dq_connect(c, url);
    int64_t took = dqt_mono_ms() - t0;
    print_message("silent server: dq_connect = %d (%s) after %lld ms: %s\n", rc, dq_strerror(rc),
                  (long long)took, dq_client_errstr(c));
    /* Freed before asserting, so a failure here does not also show up as a leak. */
    dq_client_free(c);
    close(fd);
    assert_int_equal(rc, DQ_ETIMEDOUT);
    if (took > 1300 * dqt_slow())
        print_error("dq_connect with connect_timeout_ms 300 took %lld ms\n", (long long)took);
    assert_true(took >= 290 && took <= 1300 * dqt_slow());
}

/* A command that gets no reply within command_timeout_ms fails with
 * DQ_ETIMEDOUT; the client works again once Redis answers. */
static void test_command_timeout(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "cmdtmo");
    dq_options o;
    dq_options_init(&o);
    o.command_timeout_ms = 300;
    dq_client *c = dqt_client(&o);
    dq_item it = {.id = "t1", .payload = "p", .payload_len = 1, .delay_ms = 60000};
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), 0);

    redisReply *r = dqt_redis("CLIENT PAUSE 1200 ALL");
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    int64_t t0 = dqt_mono_ms();
    dq_stats st;
    DQT_EXPECT(c, dq_get_stats(c, q, &st), DQ_ETIMEDOUT);
    int64_t took = dqt_mono_ms() - t0;
    assert_true(took >= 290 && took <= 1100 * dqt_slow());
    assert_true(strlen(dq_client_errstr(c)) > 0);

    /* Once the pause is over, calls succeed again (allow for a reconnect). */
    int64_t end = t0 + 1200 + 5000 * dqt_slow();
    int rc = -1;
    while (dqt_mono_ms() < end) {
        rc = dq_get_stats(c, q, &st);
        if (rc == 0) break;
        dqt_run_for(c, 0.05);
    }
    DQT_EXPECT(c, rc, 0);
    assert_true(dqt_mono_ms() - t0 >= 1100);
    assert_int_equal(st.pending, 1);
    dq_client_free(c);
}

static void test_connect_ok(void **state) {
    (void)state;
    connect_expect(dqt_url(), 0, 2000);
    /* The same server with an explicit db number. */
    char url[128];
    snprintf(url, sizeof url, "%s/0", dqt_url());
    connect_expect(url, 0, 2000);
    dq_client_free(NULL); /* safe */
}

/* ------------------------------------------------------------ offer and take */

static void test_roundtrip_binary(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "bin");
    dq_client *c = dqt_client(NULL);
    DQT_EXPECT(c, dq_schedule(c, q), 0);

    static const unsigned char payload[] = {0x00, 'a', 0x00, 0xff, 0xfe, '\n', 0x80, 0x00, 'z'};
    dq_item it = {.id = "bin-1", .payload = payload, .payload_len = sizeof payload};
    dq_offer_result res;
    int64_t s0 = dqt_server_ms();
    DQT_EXPECT(c, dq_offer(c, q, &it, &res), 0);
    int64_t s1 = dqt_server_ms();
    assert_string_equal(res.id, "bin-1");
    assert_int_equal(res.status, DQ_ADDED);
    assert_true(res.due_ms >= s0 && res.due_ms <= s1);

    dq_msg *m = NULL;
    int64_t t0 = dqt_mono_ms();
    DQT_EXPECT(c, dq_take(c, q, 5000, &m), 1);
    assert_true(dqt_mono_ms() - t0 < 1000 * dqt_slow()); /* delay 0: promptly */
    assert_non_null(m);
    assert_string_equal(m->queue, q);
    assert_int_equal(m->id_len, 5);
    assert_memory_equal(m->id, "bin-1", 6); /* with its NUL */
    assert_int_equal(m->payload_len, sizeof payload);
    assert_memory_equal(m->payload, payload, sizeof payload);
    assert_int_equal(((const char *)m->payload)[m->payload_len], '\0');
    assert_int_equal(m->due_ms, res.due_ms);
    assert_true(m->ready_ms >= m->due_ms);
    dq_msg_free(m);
    dq_msg_free(NULL);

    dq_stats st;
    DQT_EXPECT(c, dq_get_stats(c, q, &st), 0);
    assert_int_equal(st.pending, 0);
    assert_int_equal(st.ready, 0);
    assert_int_equal(st.next_due_in_ms, -1);
    dq_client_free(c);
}

static void test_generated_id(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "gen");
    dq_client *c = dqt_client(NULL);
    dq_offer_result a, b;
    dq_item it = {.payload = "x", .payload_len = 1, .delay_ms = 60000};
    DQT_EXPECT(c, dq_offer(c, q, &it, &a), 0);
    DQT_EXPECT(c, dq_offer(c, q, &it, &b), 0);
    assert_int_equal(strlen(a.id), DQ_ID_GENERATED_LEN);
    assert_string_not_equal(a.id, b.id);
    for (size_t i = 0; i < DQ_ID_GENERATED_LEN; i++)
        assert_non_null(
            strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", a.id[i]));
    assert_int_equal(a.status, DQ_ADDED);
    assert_int_equal(b.status, DQ_ADDED);
    dq_item_info info;
    DQT_EXPECT(c, dq_lookup(c, q, a.id, &info), 0);
    assert_int_equal(info.state, DQ_STATE_PENDING);
    assert_int_equal(info.due_ms, a.due_ms);
    dq_client_free(c);
}

/* One client's takes share result keys (for the lost-reply replay): a
 * hundred takes one after the other leave one key, and two takes out at
 * once two. */
static void on_async_take(dq_client *c, int status, dq_msg *msg, void *privdata) {
    (void)c;
    int *left = privdata;
    assert_int_equal(status, 1);
    dq_msg_free(msg);
    (*left)--;
}

static void test_take_result_keys_bounded(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "rkeys");
    dq_client *c = dqt_client(NULL);
    dq_item it = {.payload = "x", .payload_len = 1, .delay_ms = 0};
    for (int i = 0; i < 102; i++) DQT_EXPECT(c, dq_offer(c, q, &it, NULL), 0);
    DQT_EXPECT(c, dq_schedule(c, q), 0);
    for (int i = 0; i < 100; i++) {
        dq_msg *m = NULL;
        DQT_EXPECT(c, dq_take(c, q, 5000, &m), 1);
        dq_msg_free(m);
    }
    char pattern[128];
    snprintf(pattern, sizeof pattern, "dq:{%s}:t:*", q);
    redisReply *r = dqt_redis("KEYS %s", pattern);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 1);
    freeReplyObject(r);
    int left = 2;
    DQT_EXPECT(c, dq_take_async(c, q, 5000, on_async_take, &left, NULL), 0);
    DQT_EXPECT(c, dq_take_async(c, q, 5000, on_async_take, &left, NULL), 0);
    for (int i = 0; i < 100 && left > 0; i++) dqt_run_for(c, 0.05);
    assert_int_equal(left, 0);
    r = dqt_redis("KEYS %s", pattern);
    assert_int_equal(r->elements, 2);
    freeReplyObject(r);
    dq_client_free(c);
}

/* A delayed item is not delivered before its due time, then promptly. */
static void test_delay_respected(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "delay");
    dq_client *c = dqt_client(NULL);
    DQT_EXPECT(c, dq_schedule(c, q), 0);
    DQT_EXPECT(c, dq_schedule(c, q), 0); /* idempotent */

    dq_item it = {.id = "d1", .payload = "later", .payload_len = 5, .delay_ms = 400};
    dq_offer_result res;
    int64_t s0 = dqt_server_ms();
    DQT_EXPECT(c, dq_offer(c, q, &it, &res), 0);
    int64_t s1 = dqt_server_ms();
    assert_true(res.due_ms >= s0 + 400 && res.due_ms <= s1 + 400);

    dq_msg *m = (dq_msg *)&m; /* must be set to NULL */
    int64_t t0 = dqt_mono_ms();
    DQT_EXPECT(c, dq_take(c, q, 100, &m), 0);
    assert_null(m);
    int64_t took = dqt_mono_ms() - t0;
    assert_true(took >= 95 && took < 1000 * dqt_slow());

    DQT_EXPECT(c, dq_take(c, q, 5000, &m), 1);
    assert_non_null(m);
    assert_string_equal(m->id, "d1");
    assert_int_equal(m->due_ms, res.due_ms);
    assert_true(m->ready_ms >= m->due_ms);
    assert_true(dqt_server_ms() >= res.due_ms);
    if (dqt_slow() == 1) assert_true(m->ready_ms - m->due_ms < 500);
    dq_msg_free(m);

    assert_int_equal(dqt_wait_moved(c, 1, 2), 1);
    dq_sched_counters sc;
    dq_get_sched_counters(c, &sc);
    assert_true(sc.transfers >= 1);
    assert_int_equal(sc.moved, 1);
    assert_int_equal(sc.set_aside, 0);

    DQT_EXPECT(c, dq_unschedule(c, q), 0);
    DQT_EXPECT(c, dq_unschedule(c, q), DQ_EINVAL);
    dq_client_free(c);
}

/* An absolute due time in the past means now, even with later items pending. */
static void test_due_in_past(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "past");
    dq_client *c = dqt_client(NULL);
    DQT_EXPECT(c, dq_schedule(c, q), 0);
    dq_item later = {.id = "later", .payload = "L", .payload_len = 1, .delay_ms = 60000};
    DQT_EXPECT(c, dq_offer(c, q, &later, NULL), 0);
    /* Let the scheduler see "later" first, so the past item is a new earliest. */
    dq_msg *m = NULL;
    DQT_EXPECT(c, dq_take(c, q, 200, &m), 0);

    dq_item past = {.id = "past", .payload = "P", .payload_len = 1, .due_ms = 1000};
    dq_offer_result res;
    DQT_EXPECT(c, dq_offer(c, q, &past, &res), 0);
    assert_int_equal(res.status, DQ_ADDED);
    assert_true(res.due_ms <= dqt_server_ms());
    int64_t t0 = dqt_mono_ms();
    DQT_EXPECT(c, dq_take(c, q, 3000, &m), 1);
    assert_true(dqt_mono_ms() - t0 < 1000 * dqt_slow());
    assert_string_equal(m->id, "past");
    assert_string_equal(m->payload, "P");
    assert_int_equal(m->due_ms, res.due_ms);
    assert_true(m->ready_ms >= m->due_ms);
    dq_msg_free(m);

    /* A past due time on an otherwise empty queue. */
    dq_item past2 = {.id = "past2", .payload = "Q", .payload_len = 1, .due_ms = 5};
    DQT_EXPECT(c, dq_offer(c, q, &past2, &res), 0);
    DQT_EXPECT(c, dq_take(c, q, 3000, &m), 1);
    assert_string_equal(m->id, "past2");
    dq_msg_free(m);

    dq_stats st;
    DQT_EXPECT(c, dq_get_stats(c, q, &st), 0);
    assert_int_equal(st.pending, 1);
    assert_int_equal(st.ready, 0);
    assert_true(st.next_due_in_ms > 50000 && st.next_due_in_ms <= 60000);
    dq_client_free(c);
}

static void test_offer_many(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "many");
    dq_client *c = dqt_client(NULL);
    DQT_EXPECT(c, dq_schedule(c, q), 0);

    enum { N = 20 };
    dq_item items[N];
    char ids[N][16], pays[N][32];
    dq_offer_result res[N];
    memset(items, 0, sizeof items);
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "m%02d", i);
        snprintf(pays[i], sizeof pays[i], "payload %d", i);
        items[i].id = ids[i];
        items[i].payload = pays[i];
        items[i].payload_len = strlen(pays[i]);
        items[i].delay_ms = (i % 2) ? 200 : 0;
    }
    DQT_EXPECT(c, dq_offer_many(c, q, items, N, res), N);
    for (int i = 0; i < N; i++) {
        assert_string_equal(res[i].id, ids[i]);
        assert_int_equal(res[i].status, DQ_ADDED);
    }
    /* Delay 0 first, in offer order; then the 200 ms ones, in offer order. */
    for (int k = 0; k < N; k++) {
        int want = k < N / 2 ? 2 * k : 2 * (k - N / 2) + 1;
        dq_msg *m = NULL;
        DQT_EXPECT(c, dq_take(c, q, 3000, &m), 1);
        if (strcmp(m->id, ids[want]) != 0)
            print_error("take #%d: got %s, want %s\n", k, m->id, ids[want]);
        assert_string_equal(m->id, ids[want]);
        assert_string_equal(m->payload, pays[want]);
        assert_int_equal(m->due_ms, res[want].due_ms);
        dq_msg_free(m);
    }
    /* Results may be NULL; n = 0 sends nothing. */
    DQT_EXPECT(c, dq_offer_many(c, q, items, 2, NULL), 2);
    DQT_EXPECT(c, dq_offer_many(c, q, items, 0, NULL), 0);
    /* One invalid item: nothing is sent. */
    dq_item bad[2] = {items[0], items[1]};
    bad[1].id = "not valid";
    DQT_EXPECT(c, dq_offer_many(c, q, bad, 2, NULL), DQ_EINVAL);
    dq_stats st;
    DQT_EXPECT(c, dq_get_stats(c, q, &st), 0);
    assert_int_equal(st.pending + st.ready, 2);
    dq_client_free(c);
}

/* 3,000 items due in one millisecond: more than the 2048 ordinals, so the
 * slot holding them cannot split by score. All come out in offer order
 * (the ordinals run out after 2048: those past it share the last score and
 * must still all arrive), taken with leases and acked. */
static void test_one_millisecond(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "onems");
    dq_client *c = dqt_client(NULL);
    enum { N = 3000 };
    dq_item *items = calloc(N, sizeof *items);
    char(*ids)[16] = calloc(N, sizeof *ids);
    assert_non_null(items);
    assert_non_null(ids);
    int64_t due = dqt_server_ms() + 1500;
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "o%04d", i);
        items[i].id = ids[i];
        items[i].payload = ids[i];
        items[i].payload_len = strlen(ids[i]);
        items[i].due_ms = due;
    }
    DQT_EXPECT(c, dq_offer_many(c, q, items, N, NULL), N);
    dq_item_info info;
    DQT_EXPECT(c, dq_lookup(c, q, "o2999", &info), 0);
    assert_int_equal(info.state, DQ_STATE_PENDING);
    assert_int_equal(info.due_ms, due);
    DQT_EXPECT(c, dq_cancel(c, q, "o2500"), 1); /* past the ordinals: found by scanning */
    DQT_EXPECT(c, dq_schedule(c, q), 0);
    dq_take_opts opts;
    dq_take_opts_init(&opts);
    opts.lease_ms = 60000;
    int got = 0, order_ok = 1, next = 0;
    for (int round = 0; round < 200 && got < N - 1; round++) {
        dq_msg *msgs[64];
        int n = dq_take_many(c, q, &opts, 5000, msgs, 64);
        assert_true(n > 0);
        for (int k = 0; k < n; k++) {
            if (next == 2500) next++;
            if (next < 2048 && strcmp(msgs[k]->id, ids[next]) != 0) order_ok = 0;
            assert_int_equal(msgs[k]->due_ms, due);
            assert_true(msgs[k]->ready_ms >= due);
            DQT_EXPECT(c, dq_ack(c, q, msgs[k]->id, msgs[k]->token), 1);
            dq_msg_free(msgs[k]);
            next++;
        }
        got += n;
    }
    assert_int_equal(got, N - 1);
    assert_true(order_ok); /* offer order for the first 2048 at least */
    dq_stats st;
    DQT_EXPECT(c, dq_get_stats(c, q, &st), 0);
    assert_int_equal(st.pending + st.ready + st.in_flight, 0);
    free(items);
    free(ids);
    dq_client_free(c);
}

/* ------------------------------------------------------------ cancel, lookup, stats */

static void test_cancel_lookup(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "cancel");
    dq_client *c = dqt_client(NULL);
    dq_item it = {.id = "c1", .payload = "x", .payload_len = 1, .delay_ms = 30000};
    dq_offer_result res;
    DQT_EXPECT(c, dq_offer(c, q, &it, &res), 0);

    dq_item_info info = {.state = -1, .due_ms = -1, .attempts = -1, .holder = "x"};
    DQT_EXPECT(c, dq_lookup(c, q, "c1", &info), 0);
    assert_int_equal(info.state, DQ_STATE_PENDING);
    assert_int_equal(info.due_ms, res.due_ms);

    DQT_EXPECT(c, dq_cancel(c, q, "c1"), 1);
    DQT_EXPECT(c, dq_cancel(c, q, "c1"), 0);
    DQT_EXPECT(c, dq_cancel(c, q, "never"), 0);
    DQT_EXPECT(c, dq_lookup(c, q, "c1", &info), 0);
    assert_int_equal(info.state, DQ_STATE_UNKNOWN);
    assert_int_equal(info.due_ms, 0);
    DQT_EXPECT(c, dq_lookup(c, q, "never", &info), 0);
    assert_int_equal(info.state, DQ_STATE_UNKNOWN);

    /* Bad arguments. */
    DQT_EXPECT(c, dq_cancel(c, q, "has space"), DQ_EINVAL);
    DQT_EXPECT(c, dq_cancel(c, "bad queue", "c1"), DQ_EINVAL);
    DQT_EXPECT(c, dq_lookup(c, "", "c1", &info), DQ_EINVAL);

    /* A cancelled item is never delivered. */
    DQT_EXPECT(c, dq_schedule(c, q), 0);
    dq_item gone = {.id = "gone", .payload = "g", .payload_len = 1, .delay_ms = 150};
    dq_item stay = {.id = "stay", .payload = "s", .payload_len = 1, .delay_ms = 300};
    DQT_EXPECT(c, dq_offer(c, q, &gone, NULL), 0);
    DQT_EXPECT(c, dq_offer(c, q, &stay, NULL), 0);
    DQT_EXPECT(c, dq_cancel(c, q, "gone"), 1);
    dq_msg *m = NULL;
    DQT_EXPECT(c, dq_take(c, q, 3000, &m), 1);
    assert_string_equal(m->id, "stay");
    dq_msg_free(m);
    DQT_EXPECT(c, dq_take(c, q, 300, &m), 0);
    /* Not pending any more once delivered. */
    DQT_EXPECT(c, dq_cancel(c, q, "stay"), 0);
    DQT_EXPECT(c, dq_lookup(c, q, "stay", &info), 0);
    assert_int_equal(info.state, DQ_STATE_UNKNOWN);
    /* No record and no id index entry left behind. */
    char pat[128];
    snprintf(pat, sizeof pat, "dq:{%s}:[qi]:*", q);
    redisReply *r = dqt_redis("KEYS %s", pat);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 0);
    freeReplyObject(r);
    dq_client_free(c);
}

/* dq_lookup_item: the payload whole (payload_max 0) or cut with its whole
 * size, binary bytes kept; an unknown id has none; bad input fills nothing. */
static void test_lookup_item(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "lookupitem");
    dq_client *c = dqt_client(NULL);
    dq_item it = {.id = "p1", .payload = "ab\0cd", .payload_len = 5, .delay_ms = 30000};
    dq_offer_result res;
    DQT_EXPECT(c, dq_offer(c, q, &it, &res), 0);

    dq_listed *l = NULL;
    DQT_EXPECT(c, dq_lookup_item(c, q, "p1", 0, &l), 0);
    assert_int_equal(l->state, DQ_STATE_PENDING);
    assert_int_equal(l->due_ms, res.due_ms);
    assert_string_equal(l->id, "p1");
    assert_int_equal(l->payload_len, 5);
    assert_int_equal(l->payload_full_len, 5);
    assert_memory_equal(l->payload, "ab\0cd", 5);
    dq_listed_free(l, 1);

    DQT_EXPECT(c, dq_lookup_item(c, q, "p1", 3, &l), 0);
    assert_int_equal(l->payload_len, 3);
    assert_int_equal(l->payload_full_len, 5);
    assert_memory_equal(l->payload, "ab\0", 3);
    dq_listed_free(l, 1);

    DQT_EXPECT(c, dq_lookup_item(c, q, "never", 0, &l), 0);
    assert_int_equal(l->state, DQ_STATE_UNKNOWN);
    assert_null(l->payload);
    dq_listed_free(l, 1);

    l = (dq_listed *)1;
    DQT_EXPECT(c, dq_lookup_item(c, q, "has space", 0, &l), DQ_EINVAL);
    assert_null(l);
    dq_client_free(c);
}

static void test_stats(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "stats");
    dq_client *c = dqt_client(NULL);
    dq_stats st;
    memset(&st, 0x55, sizeof st);
    DQT_EXPECT(c, dq_get_stats(c, q, &st), 0);
    assert_int_equal(st.pending, 0);
    assert_int_equal(st.ready, 0);
    assert_int_equal(st.next_due_in_ms, -1);
    assert_int_equal(st.set_aside, 0);

    const int64_t delays[] = {10000, 20000, 30000, 0, 0};
    for (int i = 0; i < 5; i++) {
        dq_item it = {.payload = "p", .payload_len = 1, .delay_ms = delays[i]};
        DQT_EXPECT(c, dq_offer(c, q, &it, NULL), 0);
    }
    DQT_EXPECT(c, dq_get_stats(c, q, &st), 0);
    assert_int_equal(st.pending, 3);
    assert_int_equal(st.ready, 2);
    assert_true(st.next_due_in_ms > 9000 && st.next_due_in_ms <= 10000);
    assert_int_equal(st.set_aside, 0);
    DQT_EXPECT(c, dq_get_stats(c, "bad name", &st), DQ_EINVAL);
    dq_client_free(c);
}

/* dq_get_metrics_many: each queue's figures as dq_get_metrics gives them,
 * and each failure on its own queue (a bad name, a corrupt total), never
 * sinking the others. */
static void test_metrics_many(void **state) {
    (void)state;
    char q[3][64];
    dq_client *c = dqt_client(NULL);
    for (int i = 0; i < 3; i++) {
        char tag[16];
        snprintf(tag, sizeof tag, "mm%d", i);
        dqt_queue(q[i], sizeof q[i], tag);
        for (int k = 0; k <= i; k++) {
            dq_item it = {.payload = "p", .payload_len = 1, .delay_ms = k % 2 ? 60000 : 0};
            DQT_EXPECT(c, dq_offer(c, q[i], &it, NULL), 0);
        }
    }
    freeReplyObject(dqt_redis("HSET dq:{%s}:n offered x", q[2])); /* corrupt: refused by name */
    const char *names[4] = {q[0], "bad name", q[1], q[2]};
    dq_metrics m[4], one;
    int status[4];
    memset(m, 0x55, sizeof m);
    DQT_EXPECT(c, dq_get_metrics_many(c, names, 4, m, status), 0);
    assert_int_equal(status[0], 0);
    assert_int_equal(status[1], DQ_EINVAL);
    assert_int_equal(status[2], 0);
    assert_int_equal(status[3], DQ_EPROTO);
    assert_int_equal(m[0].offered, 1);
    assert_int_equal(m[0].stats.ready, 1);
    assert_int_equal(m[0].stats.pending, 0);
    assert_int_equal(m[2].offered, 2);
    assert_int_equal(m[2].stats.ready, 1);
    assert_int_equal(m[2].stats.pending, 1);
    DQT_EXPECT(c, dq_get_metrics(c, q[1], &one), 0);
    assert_int_equal(one.offered, m[2].offered);
    assert_int_equal(one.stats.pending, m[2].stats.pending);
    assert_int_equal(one.stats.ready, m[2].stats.ready);
    DQT_EXPECT(c, dq_get_metrics(c, q[2], &one), DQ_EPROTO);
    assert_non_null(strstr(dq_client_errstr(c), "offered"));
    DQT_EXPECT(c, dq_get_metrics_many(c, names, 0, m, status), 0);
    dq_client_free(c);
}

/* ------------------------------------------------------------ keep / replace */

static void test_keep_replace(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "keep");
    dq_client *c = dqt_client(NULL);
    dq_offer_result r1, r2, r3, r4;

    dq_item a = {.id = "k", .payload = "a", .payload_len = 1, .delay_ms = 5000};
    DQT_EXPECT(c, dq_offer(c, q, &a, &r1), 0);
    assert_int_equal(r1.status, DQ_ADDED);

    dq_item b = {.id = "k", .payload = "b", .payload_len = 1, .delay_ms = 8000};
    DQT_EXPECT(c, dq_offer(c, q, &b, &r2), 0);
    assert_int_equal(r2.status, DQ_REPLACED);
    assert_string_equal(r2.id, "k");
    assert_true(r2.due_ms >= r1.due_ms + 3000 && r2.due_ms < r1.due_ms + 3000 + 1000 * dqt_slow());

    dq_item keep = {
        .id = "k", .payload = "c", .payload_len = 1, .delay_ms = 1000, .flags = DQ_OFFER_KEEP};
    DQT_EXPECT(c, dq_offer(c, q, &keep, &r3), 0);
    assert_int_equal(r3.status, DQ_KEPT);
    assert_int_equal(r3.due_ms, r2.due_ms);

    dq_item_info info;
    DQT_EXPECT(c, dq_lookup(c, q, "k", &info), 0);
    assert_int_equal(info.state, DQ_STATE_PENDING);
    assert_int_equal(info.due_ms, r2.due_ms);
    dq_stats st;
    DQT_EXPECT(c, dq_get_stats(c, q, &st), 0);
    assert_int_equal(st.pending, 1);

    /* Replace with delay 0: delivered now, with the new payload, once. */
    DQT_EXPECT(c, dq_schedule(c, q), 0);
    dq_item d = {.id = "k", .payload = "d", .payload_len = 1, .delay_ms = 0};
    DQT_EXPECT(c, dq_offer(c, q, &d, &r4), 0);
    assert_int_equal(r4.status, DQ_REPLACED);
    dq_msg *m = NULL;
    DQT_EXPECT(c, dq_take(c, q, 3000, &m), 1);
    assert_string_equal(m->id, "k");
    assert_string_equal(m->payload, "d");
    assert_int_equal(m->due_ms, r4.due_ms);
    dq_msg_free(m);
    DQT_EXPECT(c, dq_take(c, q, 300, &m), 0);
    DQT_EXPECT(c, dq_get_stats(c, q, &st), 0);
    assert_int_equal(st.pending, 0);
    assert_int_equal(st.ready, 0);

    /* KEEP on an id that is not pending adds it. */
    dq_item e = {.id = "k", .payload = "e", .payload_len = 1, .delay_ms = 60000, .flags = DQ_OFFER_KEEP};
    DQT_EXPECT(c, dq_offer(c, q, &e, &r1), 0);
    assert_int_equal(r1.status, DQ_ADDED);
    dq_client_free(c);
}

/* ------------------------------------------------------------ limits and errors */

static void test_too_big(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "big");
    dq_client *c = dqt_client(NULL);
    DQT_EXPECT(c, dq_schedule(c, q), 0);
    size_t n = DQ_PAYLOAD_DEFAULT_MAX + 1;
    unsigned char *buf = malloc(n);
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 7 + (i >> 9));

    dq_item it = {.id = "big", .payload = buf, .payload_len = n};
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), DQ_ETOOBIG);
    assert_true(strlen(dq_client_errstr(c)) > 0);
    dq_offer_result res;
    it.payload_len = n - 1;
    DQT_EXPECT(c, dq_offer(c, q, &it, &res), 0);
    dq_msg *m = NULL;
    DQT_EXPECT(c, dq_take(c, q, 5000, &m), 1);
    assert_int_equal(m->payload_len, n - 1);
    assert_memory_equal(m->payload, buf, n - 1);
    dq_msg_free(m);
    dq_client_free(c);

    /* A client with a smaller limit. */
    dq_options o;
    dq_options_init(&o);
    assert_int_equal(o.max_payload, DQ_PAYLOAD_DEFAULT_MAX);
    o.max_payload = 10;
    c = dqt_client(&o);
    dq_item small = {.payload = buf, .payload_len = 11};
    DQT_EXPECT(c, dq_offer(c, q, &small, NULL), DQ_ETOOBIG);
    small.payload_len = 10;
    DQT_EXPECT(c, dq_offer(c, q, &small, NULL), 0);
    dq_client_free(c);

    /* Out-of-range options are refused. */
    dq_options_init(&o);
    o.max_payload = DQ_PAYLOAD_HARD_MAX + 1;
    assert_null(dq_client_new(NULL, &o));
    free(buf);
}

static void test_invalid_args(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "inval");
    dq_client *c = dqt_client(NULL);
    char longname[DQ_QUEUE_MAX + 2];
    memset(longname, 'q', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    char longid[DQ_ID_MAX + 2];
    memset(longid, 'i', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';

    dq_item it = {.id = "ok", .payload = "p", .payload_len = 1};
    DQT_EXPECT(c, dq_offer(c, "bad name", &it, NULL), DQ_EINVAL);
    DQT_EXPECT(c, dq_offer(c, "", &it, NULL), DQ_EINVAL);
    DQT_EXPECT(c, dq_offer(c, "q{x}", &it, NULL), DQ_EINVAL);
    DQT_EXPECT(c, dq_offer(c, longname, &it, NULL), DQ_EINVAL);
    longname[DQ_QUEUE_MAX] = '\0'; /* exactly DQ_QUEUE_MAX is fine */
    DQT_EXPECT(c, dq_offer(c, longname, &it, NULL), 0);

    it.id = "has space";
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), DQ_EINVAL);
    it.id = "";
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), DQ_EINVAL);
    it.id = "tab\there";
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), DQ_EINVAL);
    it.id = longid;
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), DQ_EINVAL);
    longid[DQ_ID_MAX] = '\0';
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), 0);

    it.id = "neg";
    it.delay_ms = -1;
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), DQ_EINVAL);
    it.delay_ms = 0;
    it.due_ms = DQ_DUE_MAX_MS + 1;
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), DQ_EINVAL);
    it.due_ms = 0;
    it.flags = 1u << 7;
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), DQ_EINVAL);
    it.flags = 0;
    it.payload = NULL;
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), DQ_EINVAL);
    it.payload_len = 0; /* NULL with length 0 is an empty payload */
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), 0);

    dq_msg *m = NULL;
    DQT_EXPECT(c, dq_take(c, "bad name", 10, &m), DQ_EINVAL);
    assert_null(m);
    DQT_EXPECT(c, dq_schedule(c, "bad name"), DQ_EINVAL);

    int64_t ms = 77;
    assert_int_equal(dq_parse_duration("1.5s", &ms), DQ_EINVAL);
    assert_int_equal(ms, 77);
    assert_int_equal(dq_parse_duration("2h", &ms), 0);
    assert_int_equal(ms, 7200000);
    dq_client_free(c);
}

static void test_wrongtype(void **state) {
    (void)state;
    char q[64], ok[64], key[128];
    dqt_queue(q, sizeof q, "wrong");
    dqt_queue(ok, sizeof ok, "fine");
    snprintf(key, sizeof key, "dq:{%s}:zs", q);
    redisReply *r = dqt_redis("SET %s foo", key);
    freeReplyObject(r);

    dq_client *c = dqt_client(NULL);
    dq_item it = {.id = "w", .payload = "x", .payload_len = 1, .delay_ms = 1000};
    /* Calls that only read or remove report the wrong type. */
    dq_stats st;
    DQT_EXPECT(c, dq_get_stats(c, q, &st), DQ_EWRONGTYPE);
    assert_non_null(strstr(dq_client_errstr(c), "WRONGTYPE"));
    DQT_EXPECT(c, dq_cancel(c, q, "w"), DQ_EWRONGTYPE);
    dq_item_info info;
    DQT_EXPECT(c, dq_lookup(c, q, "w", &info), DQ_EWRONGTYPE);

    /* Other queues keep working. */
    dq_offer_result res;
    it.delay_ms = 0;
    DQT_EXPECT(c, dq_offer(c, ok, &it, &res), 0);
    assert_int_equal(res.status, DQ_ADDED);
    dq_msg *m = NULL;
    DQT_EXPECT(c, dq_take(c, ok, 3000, &m), 1);
    assert_string_equal(m->id, "w");
    dq_msg_free(m);

    /* An offer renames the foreign key out of the way (its data kept) and
     * goes on: the queue is not blocked for good. An hour ahead: into the
     * slots (an offer due within 40 s goes to a near list, not the slot
     * index). */
    it.delay_ms = 3600000;
    DQT_EXPECT(c, dq_offer(c, q, &it, &res), 0);
    assert_int_equal(res.status, DQ_ADDED);
    r = dqt_redis("TYPE %s", key);
    assert_string_equal(r->str, "zset");
    freeReplyObject(r);
    r = dqt_redis("KEYS dq:{%s}:bad:zs:*", q);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 1);
    redisReply *v = dqt_redis("GET %s", r->element[0]->str);
    assert_string_equal(v->str, "foo");
    freeReplyObject(v);
    freeReplyObject(r);
    DQT_EXPECT(c, dq_get_stats(c, q, &st), 0);
    assert_int_equal(st.pending, 1);
    assert_int_equal(st.set_aside, 1); /* the note saying so */

    /* A ready list of the wrong type: the same. */
    char q2[64];
    dqt_queue(q2, sizeof q2, "wrongr");
    snprintf(key, sizeof key, "dq:{%s}:r", q2);
    r = dqt_redis("SET %s foo", key);
    freeReplyObject(r);
    it.delay_ms = 0;
    DQT_EXPECT(c, dq_offer(c, q2, &it, NULL), 0);
    DQT_EXPECT(c, dq_take(c, q2, 3000, &m), 1);
    assert_string_equal(m->id, "w");
    dq_msg_free(m);
    dq_client_free(c);
}

static void test_take_timeout(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "tmo");
    dq_client *c = dqt_client(NULL);
    dq_msg *m = (dq_msg *)&m;
    int64_t t0 = dqt_mono_ms();
    DQT_EXPECT(c, dq_take(c, q, 250, &m), 0);
    int64_t took = dqt_mono_ms() - t0;
    assert_null(m);
    if (took < 240 || took > 1250 * dqt_slow())
        print_error("dq_take(250 ms) took %lld ms\n", (long long)took);
    assert_true(took >= 240 && took <= 1250 * dqt_slow());
    /* Zero: just a look. */
    t0 = dqt_mono_ms();
    DQT_EXPECT(c, dq_take(c, q, 0, &m), 0);
    assert_true(dqt_mono_ms() - t0 < 1000 * dqt_slow());
    /* The client is still fine for the next call. */
    dq_item it = {.id = "after", .payload = "a", .payload_len = 1};
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), 0);
    DQT_EXPECT(c, dq_take(c, q, 3000, &m), 1);
    assert_string_equal(m->id, "after");
    dq_msg_free(m);
    /* Timed-out takes in a row do not pile up connections. */
    long long before = dqt_clients();
    for (int i = 0; i < 8; i++) DQT_EXPECT(c, dq_take(c, q, 20, &m), 0);
    long long after = dqt_clients();
    if (after > before + 2)
        print_error("connected clients: %lld before 8 timed-out takes, %lld after\n", before, after);
    assert_true(after <= before + 2);
    dq_client_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_connect_bad_url),
        cmocka_unit_test(test_connect_closed_port),
        cmocka_unit_test(test_connect_silent_server),
        cmocka_unit_test(test_command_timeout),
        cmocka_unit_test(test_connect_ok),
        cmocka_unit_test(test_roundtrip_binary),
        cmocka_unit_test(test_generated_id),
        cmocka_unit_test(test_take_result_keys_bounded),
        cmocka_unit_test(test_delay_respected),
        cmocka_unit_test(test_due_in_past),
        cmocka_unit_test(test_offer_many),
        cmocka_unit_test(test_one_millisecond),
        cmocka_unit_test(test_cancel_lookup),
        cmocka_unit_test(test_lookup_item),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_metrics_many),
        cmocka_unit_test(test_keep_replace),
        cmocka_unit_test(test_too_big),
        cmocka_unit_test(test_invalid_args),
        cmocka_unit_test(test_wrongtype),
        cmocka_unit_test(test_take_timeout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
