/*
 * test_async.c - the callback API on the client's loop: dq_offer_async,
 * dq_take_async (item, timeout, many at once), gathered offers on a sharded
 * queue by a client that had to learn its shard count,, dq_take_cancel (never inside
 * the call, never losing an item), DQ_EBUSY from callbacks, DQ_ECLOSED when
 * the client is freed, a scheduled delay through the async path, and a
 * take that waits after its client's idle blocking connection was lost.
 * Needs $DQ_TEST_REDIS (tests/run.sh sets it).
 */
#include "dqtest.h"

typedef struct take_state {
    dq_client *c;
    int calls;
    int status;
    dq_msg *msg;
    int64_t at_ms; /* monotonic time of the callback */
    int stop_when_called;
    const char *queue; /* for the DQ_EBUSY checks */
    int busy_offer, busy_take;
    int *in_cancel; /* set while dq_take_cancel runs */
    int called_inside_cancel;
} take_state;

static void take_cb(dq_client *c, int status, dq_msg *msg, void *privdata) {
    take_state *s = privdata;
    s->calls++;
    s->status = status;
    s->msg = msg;
    s->at_ms = dqt_mono_ms();
    if (s->in_cancel && *s->in_cancel) s->called_inside_cancel = 1;
    if (s->queue) {
        dq_item it = {.payload = "x", .payload_len = 1};
        s->busy_offer = dq_offer(c, s->queue, &it, NULL);
        dq_msg *m = NULL;
        s->busy_take = dq_take(c, s->queue, 0, &m);
    }
    if (s->stop_when_called) dq_stop(c);
}

typedef struct offer_state {
    int calls;
    int status;
    dq_offer_result result;
} offer_state;

static void offer_cb(dq_client *c, int status, const dq_offer_result *result, void *privdata) {
    (void)c;
    offer_state *s = privdata;
    s->calls++;
    s->status = status;
    if (result) s->result = *result;
    else memset(&s->result, 0, sizeof s->result);
}

static void test_take_async_item(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "atake");
    dq_client *c = dqt_client(NULL);
    take_state ts = {.c = c, .stop_when_called = 1};
    dq_take_req *req = NULL;
    DQT_EXPECT(c, dq_take_async(c, q, 5000, take_cb, &ts, &req), 0);
    assert_non_null(req);
    assert_int_equal(ts.calls, 0); /* never from inside the call */

    static const char payload[] = "async\0payload";
    dq_item it = {.id = "a1", .payload = payload, .payload_len = sizeof payload};
    offer_state os = {0};
    DQT_EXPECT(c, dq_offer_async(c, q, &it, offer_cb, &os), 0);
    assert_int_equal(os.calls, 0);
    int64_t t0 = dqt_mono_ms();
    assert_int_equal(dqt_run_until_stopped(c, 5), 0);
    assert_int_equal(ts.calls, 1);
    assert_int_equal(ts.status, 1);
    assert_non_null(ts.msg);
    assert_true(ts.at_ms - t0 < 1000 * dqt_slow());
    assert_string_equal(ts.msg->id, "a1");
    assert_string_equal(ts.msg->queue, q);
    assert_int_equal(ts.msg->payload_len, sizeof payload);
    assert_memory_equal(ts.msg->payload, payload, sizeof payload);
    dq_msg_free(ts.msg);
    /* The offer's reply comes on another connection: maybe a bit later. */
    for (int i = 0; i < 100 * dqt_slow() && os.calls == 0; i++) dqt_run_for(c, 0.01);
    assert_int_equal(os.calls, 1);
    assert_int_equal(os.status, 0);
    assert_int_equal(os.result.status, DQ_ADDED);
    assert_string_equal(os.result.id, "a1");
    assert_true(os.result.due_ms > 0);
    dq_client_free(c);
}

static void test_offer_async_errors(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "aoffer");
    dq_client *c = dqt_client(NULL);
    offer_state os = {0};
    dq_item it = {.id = "x", .payload = "p", .payload_len = 1};
    DQT_EXPECT(c, dq_offer_async(c, "bad queue", &it, offer_cb, &os), DQ_EINVAL);
    it.id = "bad id";
    DQT_EXPECT(c, dq_offer_async(c, q, &it, offer_cb, &os), DQ_EINVAL);
    it.id = NULL;
    dq_options o;
    dq_options_init(&o);
    it.payload_len = o.max_payload + 1;
    it.payload = calloc(1, it.payload_len);
    assert_non_null(it.payload);
    DQT_EXPECT(c, dq_offer_async(c, q, &it, offer_cb, &os), DQ_ETOOBIG);
    free((void *)it.payload);
    dqt_run_for(c, 0.2);
    assert_int_equal(os.calls, 0); /* a refused call never calls back */

    take_state ts = {.c = c};
    DQT_EXPECT(c, dq_take_async(c, "bad queue", 100, take_cb, &ts, NULL), DQ_EINVAL);
    dqt_run_for(c, 0.2);
    assert_int_equal(ts.calls, 0);

    /* A generated id comes back in the result. */
    dq_item g = {.payload = "g", .payload_len = 1, .delay_ms = 60000};
    DQT_EXPECT(c, dq_offer_async(c, q, &g, offer_cb, &os), 0);
    dqt_run_for(c, 0.3);
    assert_int_equal(os.calls, 1);
    assert_int_equal(os.status, 0);
    assert_int_equal(strlen(os.result.id), DQ_ID_GENERATED_LEN);
    dq_item_info info;
    DQT_EXPECT(c, dq_lookup(c, q, os.result.id, &info), 0);
    assert_int_equal(info.state, DQ_STATE_PENDING);
    assert_int_equal(info.due_ms, os.result.due_ms);
    dq_client_free(c);
}

typedef struct count_state {
    int calls, ok;
} count_state;

static void count_offer_cb(dq_client *c, int status, const dq_offer_result *result, void *privdata) {
    (void)c;
    count_state *s = privdata;
    s->calls++;
    s->ok += status == 0 && result != NULL;
}

/* A new client assumes one shard: the first gathered batch on a sharded
 * queue is refused by the script (nothing written), learned, and sent
 * again by the right count, so every callback sees success. */
static void test_offer_async_learns_shards(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "ashard");
    dq_client *admin = dqt_client(NULL);
    dq_queue_config set = {DQ_QUEUE_SETTING, DQ_QUEUE_SETTING, DQ_QUEUE_SETTING, DQ_QUEUE_SETTING, 4};
    DQT_EXPECT(admin, dq_queue_config_set(admin, q, &set, NULL), 0);

    dq_client *c = dqt_client(NULL); /* knows nothing of the count */
    enum { N = 150 };                /* more than one gathered batch */
    count_state cs = {0};
    for (int i = 0; i < N; i++) {
        char id[32];
        snprintf(id, sizeof id, "as%d", i);
        dq_item it = {.id = id, .payload = "p", .payload_len = 1, .delay_ms = 60000};
        DQT_EXPECT(c, dq_offer_async(c, q, &it, count_offer_cb, &cs), 0);
    }
    for (int i = 0; i < 100 && cs.calls < N; i++) dqt_run_for(c, 0.05);
    assert_int_equal(cs.calls, N);
    assert_int_equal(cs.ok, N);
    dq_stats st;
    DQT_EXPECT(admin, dq_get_stats(admin, q, &st), 0);
    assert_int_equal(st.pending, N);
    dq_item_info info;
    DQT_EXPECT(admin, dq_lookup(admin, q, "as77", &info), 0);
    assert_int_equal(info.state, DQ_STATE_PENDING);
    dq_client_free(c);
    dq_client_free(admin);
}

static void test_take_async_timeout(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "atmo");
    dq_client *c = dqt_client(NULL);
    take_state ts = {.c = c, .stop_when_called = 1};
    int64_t t0 = dqt_mono_ms();
    DQT_EXPECT(c, dq_take_async(c, q, 200, take_cb, &ts, NULL), 0);
    assert_int_equal(dqt_run_until_stopped(c, 5), 0);
    assert_int_equal(ts.calls, 1);
    assert_int_equal(ts.status, 0);
    assert_null(ts.msg);
    int64_t took = ts.at_ms - t0;
    if (took < 190 || took > 1200 * dqt_slow())
        print_error("timeout 200 ms: callback after %lld ms\n", (long long)took);
    assert_true(took >= 190 && took <= 1200 * dqt_slow());
    dqt_run_for(c, 0.1);
    assert_int_equal(ts.calls, 1); /* exactly once */
    dq_client_free(c);
}

/* Cancel a waiting take: the callback runs later, on the loop, with
 * DQ_ECLOSED, and an item offered afterwards is still there. */
static void test_take_cancel(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "acancel");
    dq_client *c = dqt_client(NULL);
    int in_cancel = 0;

    for (int round = 0; round < 2; round++) {
        take_state ts = {.c = c, .stop_when_called = 1, .in_cancel = &in_cancel};
        dq_take_req *req = NULL;
        DQT_EXPECT(c, dq_take_async(c, q, -1, take_cb, &ts, &req), 0);
        assert_non_null(req);
        if (round == 1) dqt_run_for(c, 0.15); /* let the BLPOP block first */
        in_cancel = 1;
        dq_take_cancel(req);
        in_cancel = 0;
        assert_int_equal(ts.calls, 0);
        assert_int_equal(dqt_run_until_stopped(c, 5), 0);
        assert_int_equal(ts.calls, 1);
        assert_int_equal(ts.called_inside_cancel, 0);
        assert_int_equal(ts.status, DQ_ECLOSED);
        assert_null(ts.msg);
        dqt_run_for(c, 0.1);
        assert_int_equal(ts.calls, 1);
    }

    /* Nothing is left blocked on the queue: an item offered now stays. */
    dq_item it = {.id = "after", .payload = "p", .payload_len = 1};
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), 0);
    dqt_run_for(c, 0.2);
    dq_stats st;
    DQT_EXPECT(c, dq_get_stats(c, q, &st), 0);
    assert_int_equal(st.ready, 1);
    dq_msg *m = NULL;
    DQT_EXPECT(c, dq_take(c, q, 2000, &m), 1);
    assert_string_equal(m->id, "after");
    dq_msg_free(m);
    dq_client_free(c);
}

/* Cancelling a take whose item may already be on its way: the item is
 * either delivered to the callback or still in the ready list. */
static void test_take_cancel_no_loss(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "anoloss");
    dq_client *c = dqt_client(NULL);
    int delivered = 0;
    for (int round = 0; round < 20; round++) {
        char id[16];
        snprintf(id, sizeof id, "n%d", round);
        dq_item it = {.id = id, .payload = "p", .payload_len = 1};
        DQT_EXPECT(c, dq_offer(c, q, &it, NULL), 0);
        take_state ts = {.c = c, .stop_when_called = 1};
        dq_take_req *req = NULL;
        DQT_EXPECT(c, dq_take_async(c, q, -1, take_cb, &ts, &req), 0);
        if (round % 2) dqt_run_for(c, 0.001 * (round % 5));
        if (ts.calls == 0) dq_take_cancel(req);
        if (ts.calls == 0) assert_int_equal(dqt_run_until_stopped(c, 5), 0);
        assert_int_equal(ts.calls, 1);
        dq_stats st;
        DQT_EXPECT(c, dq_get_stats(c, q, &st), 0);
        if (ts.status == 1) {
            assert_string_equal(ts.msg->id, id);
            dq_msg_free(ts.msg);
            assert_int_equal(st.ready, 0);
            delivered++;
        } else {
            assert_int_equal(ts.status, DQ_ECLOSED);
            assert_int_equal(st.ready, 1);
            dq_msg *m = NULL;
            DQT_EXPECT(c, dq_take(c, q, 1000, &m), 1);
            assert_string_equal(m->id, id);
            dq_msg_free(m);
        }
    }
    print_message("take_cancel_no_loss: %d of 20 delivered to the cancelled take\n", delivered);
    dq_client_free(c);
}

/* Ten takes waiting at once on one queue each get a different item. */
static void test_take_async_many(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "amany");
    dq_client *c = dqt_client(NULL);
    enum { N = 10 };
    take_state ts[N];
    memset(ts, 0, sizeof ts);
    for (int i = 0; i < N; i++) {
        ts[i].c = c;
        DQT_EXPECT(c, dq_take_async(c, q, 5000, take_cb, &ts[i], NULL), 0);
    }
    dqt_run_for(c, 0.1);
    dq_item items[N];
    char ids[N][8];
    memset(items, 0, sizeof items);
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "i%d", i);
        items[i].id = ids[i];
        items[i].payload = ids[i];
        items[i].payload_len = strlen(ids[i]);
    }
    DQT_EXPECT(c, dq_offer_many(c, q, items, N, NULL), N);
    int64_t end = dqt_mono_ms() + 5000 * dqt_slow();
    int done = 0;
    while (done < N && dqt_mono_ms() < end) {
        dqt_run_for(c, 0.02);
        done = 0;
        for (int i = 0; i < N; i++) done += ts[i].calls;
    }
    assert_int_equal(done, N);
    int seen[N] = {0};
    for (int i = 0; i < N; i++) {
        assert_int_equal(ts[i].calls, 1);
        assert_int_equal(ts[i].status, 1);
        int k = atoi(ts[i].msg->id + 1);
        assert_true(k >= 0 && k < N);
        seen[k]++;
        assert_string_equal(ts[i].msg->payload, ids[k]);
        dq_msg_free(ts[i].msg);
    }
    for (int k = 0; k < N; k++) assert_int_equal(seen[k], 1);
    dq_client_free(c);
}

/* Synchronous calls from inside a callback are refused with DQ_EBUSY. */
static void test_busy_in_callback(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "abusy");
    dq_client *c = dqt_client(NULL);
    take_state ts = {.c = c, .stop_when_called = 1, .queue = q};
    DQT_EXPECT(c, dq_take_async(c, q, 100, take_cb, &ts, NULL), 0);
    assert_int_equal(dqt_run_until_stopped(c, 5), 0);
    assert_int_equal(ts.calls, 1);
    assert_int_equal(ts.status, 0);
    assert_int_equal(ts.busy_offer, DQ_EBUSY);
    assert_int_equal(ts.busy_take, DQ_EBUSY);
    /* Outside a callback the same calls work. */
    dq_item it = {.payload = "x", .payload_len = 1};
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), 0);
    dq_client_free(c);
}

/* Freeing the client ends a waiting take with DQ_ECLOSED. */
static void test_free_ends_takes(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "afree");
    dq_client *c = dqt_client(NULL);
    take_state ts = {.c = c};
    take_state ts2 = {.c = c};
    DQT_EXPECT(c, dq_take_async(c, q, -1, take_cb, &ts, NULL), 0);
    DQT_EXPECT(c, dq_take_async(c, q, 60000, take_cb, &ts2, NULL), 0);
    assert_int_equal(dq_schedule(c, q), 0);
    dqt_run_for(c, 0.1);
    assert_int_equal(ts.calls, 0);
    dq_client_free(c);
    assert_int_equal(ts.calls, 1);
    assert_int_equal(ts.status, DQ_ECLOSED);
    assert_null(ts.msg);
    assert_int_equal(ts2.calls, 1);
    assert_int_equal(ts2.status, DQ_ECLOSED);
}

/* A scheduled item through the async path: not before its due time. */
static void test_async_scheduled(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "asched");
    dq_client *c = dqt_client(NULL);
    DQT_EXPECT(c, dq_schedule(c, q), 0);
    take_state ts = {.c = c, .stop_when_called = 1};
    DQT_EXPECT(c, dq_take_async(c, q, 5000, take_cb, &ts, NULL), 0);
    offer_state os = {0};
    dq_item it = {.id = "s1", .payload = "soon", .payload_len = 4, .delay_ms = 300};
    int64_t t0 = dqt_mono_ms();
    DQT_EXPECT(c, dq_offer_async(c, q, &it, offer_cb, &os), 0);
    assert_int_equal(dqt_run_until_stopped(c, 5), 0);
    assert_int_equal(ts.calls, 1);
    for (int i = 0; i < 100 * dqt_slow() && os.calls == 0; i++) dqt_run_for(c, 0.01);
    assert_int_equal(os.calls, 1);
    assert_int_equal(ts.status, 1);
    assert_string_equal(ts.msg->id, "s1");
    assert_int_equal(ts.msg->due_ms, os.result.due_ms);
    assert_true(ts.msg->ready_ms >= ts.msg->due_ms);
    assert_true(ts.at_ms - t0 >= 290);
    if (dqt_slow() == 1) assert_true(ts.at_ms - t0 < 900);
    print_message("async_scheduled: delivered %lld ms after the offer (due +300), ready - due %lld ms\n",
                  (long long)(ts.at_ms - t0), (long long)(ts.msg->ready_ms - ts.msg->due_ms));
    dq_msg_free(ts.msg);
    assert_int_equal(dqt_wait_moved(c, 1, 2), 1);
    dq_sched_counters sc;
    dq_get_sched_counters(c, &sc);
    assert_int_equal(sc.moved, 1);
    assert_true(sc.transfers >= 1);
    dq_client_free(c);
}

/* A take that waited gives its blocking connection back to the client's
 * pool. If Redis drops that connection while it sits there (a restart, a
 * CLIENT KILL), the next take that must wait gets a new one: it once got
 * the dead one, which never reconnects, and waited for ever while items
 * were ready (seen as a CLI consumer stuck after a Redis restart). */
static void test_take_after_pooled_conn_lost(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "apool");
    dq_client *c = dqt_client(NULL);
    dq_item it = {.id = "p1", .payload = "x", .payload_len = 1};

    /* 1. A take waits, an offer wakes it: its connection goes to the pool. */
    take_state ts = {.c = c, .stop_when_called = 1};
    DQT_EXPECT(c, dq_take_async(c, q, 5000, take_cb, &ts, NULL), 0);
    dqt_run_for(c, 0.2); /* now waiting in BLPOP */
    offer_state os = {0};
    DQT_EXPECT(c, dq_offer_async(c, q, &it, offer_cb, &os), 0);
    assert_int_equal(dqt_run_until_stopped(c, 5), 0);
    assert_int_equal(ts.status, 1);
    dq_msg_free(ts.msg);

    /* 2. Redis drops every connection of the client's; the command
     * connection comes back by itself, the pooled blocking one cannot. */
    freeReplyObject(dqt_redis("CLIENT KILL TYPE normal SKIPME yes"));
    dqt_run_for(c, 1.0);

    /* 3. A take that must wait, then an item: it must get it. */
    take_state ts2 = {.c = c, .stop_when_called = 1};
    DQT_EXPECT(c, dq_take_async(c, q, 3000 * dqt_slow(), take_cb, &ts2, NULL), 0);
    dqt_run_for(c, 0.3);
    it.id = "p2";
    offer_state os2 = {0};
    DQT_EXPECT(c, dq_offer_async(c, q, &it, offer_cb, &os2), 0);
    assert_int_equal(dqt_run_until_stopped(c, 5 * dqt_slow()), 0);
    assert_int_equal(ts2.calls, 1);
    assert_int_equal(ts2.status, 1);
    assert_non_null(ts2.msg);
    assert_string_equal(ts2.msg->id, "p2");
    dq_msg_free(ts2.msg);
    dq_client_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_take_async_item),
        cmocka_unit_test(test_offer_async_errors),
        cmocka_unit_test(test_offer_async_learns_shards),
        cmocka_unit_test(test_take_async_timeout),
        cmocka_unit_test(test_take_cancel),
        cmocka_unit_test(test_take_cancel_no_loss),
        cmocka_unit_test(test_take_async_many),
        cmocka_unit_test(test_busy_in_callback),
        cmocka_unit_test(test_free_ends_takes),
        cmocka_unit_test(test_async_scheduled),
        cmocka_unit_test(test_take_after_pooled_conn_lost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
