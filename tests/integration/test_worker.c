/*
 * test_worker.c - the worker API: dq_worker_start with concurrency 3 handling
 * 100 items (asynchronous dq_worker_done, success and failure counters, the
 * concurrency bound), DQ_WORKER_NO_SCHEDULER, stopping from a handler without
 * losing items, and argument checks.
 * Needs $DQ_TEST_REDIS (tests/run.sh sets it).
 */
#include "dqtest.h"

enum { N = 100, CONC = 3 };

typedef struct work_state {
    dq_client *c;
    dq_worker *w;
    dq_msg *hand[16];   /* messages in hand, finished by the timer         */
    int nhand;
    int max_hand;       /* most messages in hand at once (our count)        */
    int max_in_hand;    /* most the worker's counter showed                 */
    int handled;
    int seen[N];        /* deliveries per item index                        */
    int early;          /* messages with ready_ms < due_ms                  */
    int bad;            /* messages that do not match what was offered      */
    int target;         /* dq_stop when handled reaches it                  */
    int stop_in_handler;
    int stopped;        /* dq_worker_stop was called (w may be gone)       */
    ev_timer finisher;
} work_state;

static void handler(dq_worker *w, dq_msg *msg, void *privdata)
{
    work_state *s = privdata;
    assert_ptr_equal(w, s->w);
    s->handled++;
    int k = -1;
    if (msg->id_len == 4 && msg->id[0] == 'w')
        k = atoi(msg->id + 1);
    if (k >= 0 && k < N) {
        s->seen[k]++;
        char want[32];
        snprintf(want, sizeof want, "work %d", k);
        if (msg->payload_len != strlen(want) || memcmp(msg->payload, want, msg->payload_len) != 0)
            s->bad++;
    } else {
        s->bad++;
    }
    if (msg->ready_ms < msg->due_ms)
        s->early++;
    dq_worker_counters wc;
    dq_worker_get_counters(w, &wc);
    if (wc.in_hand > s->max_in_hand)
        s->max_in_hand = wc.in_hand;
    if (s->stop_in_handler) {
        dq_worker_done(w, msg, 0);
        if (!s->stopped) {
            s->stopped = 1;
            dq_worker_stop(w); /* safe in handlers */
        }
        return;
    }
    /* Keep it in hand; the timer finishes it a little later. */
    assert_true(s->nhand < (int)(sizeof s->hand / sizeof s->hand[0]));
    s->hand[s->nhand++] = msg;
    if (s->nhand > s->max_hand)
        s->max_hand = s->nhand;
}

/* Finishes all messages in hand: every 10th fails. */
static void finish_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    work_state *s = t->data;
    int n = s->nhand;
    s->nhand = 0;
    for (int i = 0; i < n; i++) {
        dq_msg *m = s->hand[i];
        int k = atoi(m->id + 1);
        dq_worker_done(s->w, m, k % 10 == 0 ? 1 : 0);
    }
    if (s->handled >= s->target && s->nhand == 0)
        dq_stop(s->c);
}

static void offer_work(dq_client *c, const char *q, int n, int delayed_every)
{
    dq_item items[N];
    char ids[N][8], pays[N][16];
    memset(items, 0, sizeof items);
    for (int i = 0; i < n; i++) {
        snprintf(ids[i], sizeof ids[i], "w%03d", i);
        snprintf(pays[i], sizeof pays[i], "work %d", i);
        items[i].id = ids[i];
        items[i].payload = pays[i];
        items[i].payload_len = strlen(pays[i]);
        items[i].delay_ms = (delayed_every && i % delayed_every == 0) ? 100 * dqt_slow() + 2 * i : 0;
    }
    DQT_EXPECT(c, dq_offer_many(c, q, items, (size_t)n, NULL), n);
}

static void test_worker_100(void **state)
{
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "work");
    /* Failed items are nacked with backoff; a long one keeps them pending
     * for the rest of this test. */
    dq_options opts;
    dq_options_init(&opts);
    opts.backoff_base_ms = 60000;
    opts.backoff_max_ms = 60000;
    dq_client *c = dqt_client(&opts);
    work_state *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->c = c;
    s->target = N;
    ev_timer_init(&s->finisher, finish_cb, 0.005, 0.005);
    s->finisher.data = s;
    ev_timer_start(dq_client_loop(c), &s->finisher);

    s->w = dq_worker_start(c, q, CONC, 0, handler, s);
    assert_non_null(s->w);
    offer_work(c, q, N, 2); /* half due now, half within 100..300 ms */
    int64_t t0 = dqt_mono_ms();
    int timed_out = dqt_run_until_stopped(c, 20);
    int64_t took = dqt_mono_ms() - t0;
    print_message("worker: %d items in %lld ms, at most %d in hand\n", s->handled,
                  (long long)took, s->max_hand);
    assert_int_equal(timed_out, 0);
    assert_int_equal(s->handled, N);
    for (int i = 0; i < N; i++) {
        if (s->seen[i] != 1)
            print_error("item w%03d delivered %d times\n", i, s->seen[i]);
        assert_int_equal(s->seen[i], 1);
    }
    assert_int_equal(s->bad, 0);
    assert_int_equal(s->early, 0);
    assert_int_equal(s->max_hand, CONC);    /* the pipeline was full ... */
    assert_int_equal(s->max_in_hand, CONC); /* ... and never fuller */

    dq_worker_counters wc;
    dq_worker_get_counters(s->w, &wc);
    assert_int_equal(wc.taken, N);
    assert_int_equal(wc.succeeded, N - N / 10);
    assert_int_equal(wc.failed, N / 10);
    assert_int_equal(wc.in_hand, 0);

    assert_int_equal(dqt_wait_moved(c, N / 2, 2), N / 2);
    dq_sched_counters sc;
    dq_get_sched_counters(c, &sc);
    assert_int_equal(sc.moved, N / 2); /* the delayed half went through the scheduler */
    assert_int_equal(sc.set_aside, 0);

    /* Stopped, the worker takes nothing more. */
    dq_worker_stop(s->w);
    s->w = NULL;
    ev_timer_stop(dq_client_loop(c), &s->finisher);
    dqt_run_for(c, 0.2);
    dq_item extra = {.id = "extra", .payload = "e", .payload_len = 1};
    DQT_EXPECT(c, dq_offer(c, q, &extra, NULL), 0);
    dqt_run_for(c, 0.3);
    assert_int_equal(s->handled, N);
    dq_stats st;
    DQT_EXPECT(c, dq_get_stats(c, q, &st), 0);
    assert_int_equal(st.ready, 1);
    assert_int_equal(st.pending, N / 10); /* the failed ones, waiting to retry */
    assert_int_equal(st.in_flight, 0);    /* every delivery was acked or nacked */
    for (int i = 0; i < N; i += 10) {
        char id[8];
        snprintf(id, sizeof id, "w%03d", i);
        dq_item_info info;
        DQT_EXPECT(c, dq_lookup(c, q, id, &info), 0);
        assert_int_equal(info.state, DQ_STATE_PENDING);
        assert_int_equal(info.attempts, 1);
    }
    dq_client_free(c);
    free(s);
}

static void test_worker_no_scheduler(void **state)
{
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "worknosched");
    dq_client *c = dqt_client(NULL);
    work_state *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->c = c;
    s->target = 1;
    ev_timer_init(&s->finisher, finish_cb, 0.005, 0.005);
    s->finisher.data = s;
    ev_timer_start(dq_client_loop(c), &s->finisher);
    s->w = dq_worker_start(c, q, 1, DQ_WORKER_NO_SCHEDULER, handler, s);
    assert_non_null(s->w);
    dq_item it = {.id = "w007", .payload = "work 7", .payload_len = 6, .delay_ms = 100};
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), 0);
    dqt_run_for(c, 0.6);
    assert_int_equal(s->handled, 0); /* nobody moved it */
    dq_stats st;
    DQT_EXPECT(c, dq_get_stats(c, q, &st), 0);
    assert_int_equal(st.pending, 1);
    assert_int_equal(st.next_due_in_ms, 0);
    DQT_EXPECT(c, dq_schedule(c, q), 0); /* the catch-up moves it */
    assert_int_equal(dqt_run_until_stopped(c, 5), 0);
    assert_int_equal(s->handled, 1);
    assert_int_equal(s->seen[7], 1);
    dq_worker_stop(s->w);
    ev_timer_stop(dq_client_loop(c), &s->finisher);
    dq_client_free(c);
    free(s);
}

/* A handler stops its worker: items it had not taken stay in the queue. */
static void test_worker_stop_in_handler(void **state)
{
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "workstop");
    dq_client *c = dqt_client(NULL);
    offer_work(c, q, 5, 0);
    work_state *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->c = c;
    s->stop_in_handler = 1;
    s->w = dq_worker_start(c, q, 1, DQ_WORKER_NO_SCHEDULER, handler, s);
    assert_non_null(s->w);
    dqt_run_for(c, 0.5);
    assert_true(s->handled >= 1 && s->handled <= 2);
    dq_stats st;
    DQT_EXPECT(c, dq_get_stats(c, q, &st), 0);
    assert_int_equal(st.ready + s->handled, 5); /* none lost */
    for (int i = 0; i < 5; i++)
        assert_true(s->seen[i] <= 1);
    assert_int_equal(s->seen[0], 1);
    dq_client_free(c);
    free(s);
}

/* Freeing the client with a worker running (nothing in hand) is clean. */
static void test_worker_free_with_client(void **state)
{
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "workfree");
    dq_client *c = dqt_client(NULL);
    work_state *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->c = c;
    s->w = dq_worker_start(c, q, 4, 0, handler, s);
    assert_non_null(s->w);
    dqt_run_for(c, 0.2);
    assert_int_equal(s->handled, 0);
    dq_client_free(c);
    free(s);
}

static void test_worker_invalid(void **state)
{
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "workbad");
    dq_client *c = dqt_client(NULL);
    assert_null(dq_worker_start(c, q, 0, 0, handler, NULL));
    assert_true(strlen(dq_client_errstr(c)) > 0);
    assert_null(dq_worker_start(c, q, -1, 0, handler, NULL));
    assert_null(dq_worker_start(c, "bad queue", 1, 0, handler, NULL));
    assert_null(dq_worker_start(c, q, 1, 0, NULL, NULL));
    assert_null(dq_worker_start(c, q, 1, 1u << 5, handler, NULL));
    dq_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_100),
        cmocka_unit_test(test_worker_no_scheduler),
        cmocka_unit_test(test_worker_stop_in_handler),
        cmocka_unit_test(test_worker_free_with_client),
        cmocka_unit_test(test_worker_invalid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
