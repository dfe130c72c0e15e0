/*
 * test_worker.c - the worker API: dq_worker_start with concurrency 3 handling
 * 100 items (asynchronous dq_worker_done, success and failure counters, the
 * concurrency bound), DQ_WORKER_NO_SCHEDULER, stopping from a handler without
 * losing items, and argument checks; taking ahead of concurrency only while
 * handlers finish before they return, quickly, up to about a megabyte of
 * payloads a take, and the messages taken ahead waiting their turn when
 * handlers start keeping theirs. Consumers (issue 39): a worker and a
 * program's dq_consumer_start show in dq_consumers with their names and
 * items in hand, and leave it when stopped; bad names and queues refused.
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
    int sync_until;     /* handlers finish at once while handled <= this    */
    int spin_us;        /* and each takes this long first                  */
    int max_ahead;      /* most messages taken and not yet handed out       */
    int no_failures;    /* the timer finishes every message with success    */
    size_t pad;         /* payloads padded to this many bytes (0: not)       */
    int stopped;        /* dq_worker_stop was called (w may be gone)       */
    ev_timer finisher;
} work_state;

static void handler(dq_worker *w, dq_msg *msg, void *privdata) {
    work_state *s = privdata;
    assert_ptr_equal(w, s->w);
    s->handled++;
    int k = -1;
    if (msg->id_len == 4 && msg->id[0] == 'w') k = atoi(msg->id + 1);
    if (k >= 0 && k < N) {
        s->seen[k]++;
        char want[32];
        snprintf(want, sizeof want, "work %d", k);
        size_t len = s->pad ? s->pad : strlen(want);
        if (msg->payload_len != len || memcmp(msg->payload, want, strlen(want)) != 0) s->bad++;
    } else {
        s->bad++;
    }
    if (msg->ready_ms < msg->due_ms) s->early++;
    dq_worker_counters wc;
    dq_worker_get_counters(w, &wc);
    if (wc.in_hand > s->max_in_hand) s->max_in_hand = wc.in_hand;
    if ((int)(wc.taken - (uint64_t)s->handled) > s->max_ahead)
        s->max_ahead = (int)(wc.taken - (uint64_t)s->handled);
    if (s->handled <= s->sync_until) {
        int64_t until = dqt_mono_ms() * 1000 + s->spin_us;
        for (int i = 0; i < 1000000 && s->spin_us > 0 && dqt_mono_ms() * 1000 < until; i++)
            ;
        dq_worker_done(w, msg, 0);
        if (s->handled >= s->target) dq_stop(s->c);
        return;
    }
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
    if (s->nhand > s->max_hand) s->max_hand = s->nhand;
}

/* Finishes all messages in hand: every 10th fails. */
static void finish_cb(struct ev_loop *loop, ev_timer *t, int revents) {
    (void)loop;
    (void)revents;
    work_state *s = t->data;
    int n = s->nhand;
    s->nhand = 0;
    for (int i = 0; i < n; i++) {
        dq_msg *m = s->hand[i];
        int k = atoi(m->id + 1);
        dq_worker_done(s->w, m, k % 10 == 0 && !s->no_failures ? 1 : 0);
    }
    if (s->handled >= s->target && s->nhand == 0) dq_stop(s->c);
}

/* Offers n items "work <i>" (padded with '.' to pad bytes if pad). */
static void offer_work_padded(dq_client *c, const char *q, int n, int delayed_every, size_t pad) {
    dq_item items[N];
    char ids[N][8];
    static char pays[N][32768];
    assert_true(pad < sizeof pays[0]);
    memset(items, 0, sizeof items);
    for (int i = 0; i < n; i++) {
        snprintf(ids[i], sizeof ids[i], "w%03d", i);
        int len = snprintf(pays[i], sizeof pays[i], "work %d", i);
        if (pad) memset(pays[i] + len, '.', pad - (size_t)len);
        items[i].id = ids[i];
        items[i].payload = pays[i];
        items[i].payload_len = pad ? pad : (size_t)len;
        items[i].delay_ms = (delayed_every && i % delayed_every == 0) ? 100 * dqt_slow() + 2 * i : 0;
    }
    DQT_EXPECT(c, dq_offer_many(c, q, items, (size_t)n, NULL), n);
}

static void offer_work(dq_client *c, const char *q, int n, int delayed_every) {
    offer_work_padded(c, q, n, delayed_every, 0);
}

static void test_worker_100(void **state) {
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
    print_message("worker: %d items in %lld ms, at most %d in hand\n", s->handled, (long long)took,
                  s->max_hand);
    assert_int_equal(timed_out, 0);
    assert_int_equal(s->handled, N);
    for (int i = 0; i < N; i++) {
        if (s->seen[i] != 1) print_error("item w%03d delivered %d times\n", i, s->seen[i]);
        assert_int_equal(s->seen[i], 1);
    }
    assert_int_equal(s->bad, 0);
    assert_int_equal(s->early, 0);
    assert_int_equal(s->max_hand, CONC);    /* the pipeline was full ... */
    assert_int_equal(s->max_in_hand, CONC); /* ... and never fuller */
    assert_true(s->max_ahead < CONC);       /* handlers that keep theirs: no taking ahead */

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

/* A worker of concurrency conc over N ready items, its handlers as s
 * says; returns its state once all are handled (every one exactly once,
 * none left in flight), for the caller to free. */
static work_state *run_worker(const char *name, int conc, int sync_until, int spin_us, size_t pad) {
    char q[64];
    dqt_queue(q, sizeof q, name);
    dq_client *c = dqt_client(NULL);
    work_state *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->c = c;
    s->target = N;
    s->sync_until = sync_until;
    s->spin_us = spin_us;
    s->no_failures = 1;
    s->pad = pad;
    ev_timer_init(&s->finisher, finish_cb, 0.005, 0.005);
    s->finisher.data = s;
    ev_timer_start(dq_client_loop(c), &s->finisher);
    offer_work_padded(c, q, N, 0, pad);
    s->w = dq_worker_start(c, q, conc, DQ_WORKER_NO_SCHEDULER, handler, s);
    assert_non_null(s->w);
    assert_int_equal(dqt_run_until_stopped(c, 20), 0);
    assert_int_equal(s->handled, N);
    for (int i = 0; i < N; i++) assert_int_equal(s->seen[i], 1);
    assert_int_equal(s->bad, 0);
    dq_worker_stop(s->w);
    ev_timer_stop(dq_client_loop(c), &s->finisher);
    dqt_run_for(c, 0.1); /* the last acks */
    dq_stats st;
    DQT_EXPECT(c, dq_get_stats(c, q, &st), 0);
    assert_int_equal(st.ready + st.pending + st.in_flight, 0);
    dq_client_free(c);
    s->c = NULL;
    return s;
}

/* Quick handlers (finished before they return) of pad-byte payloads at
 * concurrency 4: after the first round the worker takes ahead, least to
 * most of the messages waiting behind the first of a take, and still holds
 * one message in hand at a time. */
static void check_quick_ahead(const char *name, size_t pad, int least, int most) {
    work_state *s = run_worker(name, 4, N, 0, pad);
    print_message("quick handlers, payloads padded to %zu bytes (0: not): at most %d taken ahead\n", pad,
                  s->max_ahead);
    assert_true(s->max_ahead >= least);
    assert_true(s->max_ahead <= most);
    assert_int_equal(s->max_in_hand, 1);
    free(s);
}

/* Short payloads: far past concurrency (all 96 left, unless this machine
 * is slow enough that 10 ms holds fewer). */
static void test_worker_takes_ahead(void **state) {
    (void)state;
    check_quick_ahead("workahead", 0, 32, N - 5);
}

/* 30,000-byte payloads: a take ahead brings about a megabyte (34 of them,
 * so 33 wait behind the first), not all that is ready. */
static void test_worker_ahead_bytes(void **state) {
    (void)state;
    check_quick_ahead("workbytes", 30000, 5, 33);
}

/* Handlers that finish before they return, but slowly (2 ms each): a take
 * ahead holds no more than 10 ms of them, 5 (128 ms were it 64). */
static void test_worker_slow_handlers_ahead_by_pace(void **state) {
    (void)state;
    work_state *s = run_worker("workslow", 4, N, 2000, 0);
    print_message("slow handlers, concurrency 4: at most %d taken ahead\n", s->max_ahead);
    assert_true(s->max_ahead <= 4);
    free(s);
}

/* Handlers that start keeping their messages after 10 (a round taken ahead
 * is out): the messages taken ahead wait, and concurrency still bounds
 * those in hand. */
static void test_worker_ahead_then_kept(void **state) {
    (void)state;
    work_state *s = run_worker("workkept", 2, 10, 0, 0);
    print_message("turned slow at 10, concurrency 2: at most %d taken ahead, %d in hand\n", s->max_ahead,
                  s->max_in_hand);
    assert_true(s->max_ahead > 2);
    assert_int_equal(s->max_in_hand, 2);
    assert_int_equal(s->max_hand, 2);
    free(s);
}

static void test_worker_no_scheduler(void **state) {
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
static void test_worker_stop_in_handler(void **state) {
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
    for (int i = 0; i < 5; i++) assert_true(s->seen[i] <= 1);
    assert_int_equal(s->seen[0], 1);
    dq_client_free(c);
    free(s);
}

/* Freeing the client with a worker running (nothing in hand) is clean. */
static void test_worker_free_with_client(void **state) {
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

/* The consumers of a queue: one a program registers, one a worker is. */
static void test_worker_consumers(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "workcons");
    dq_options o;
    dq_options_init(&o);
    o.consumer_beat_ms = 200;
    dq_client *c = dqt_client(&o);
    dq_consumer *k = NULL;
    assert_int_equal(dq_consumer_start(c, q, "bad\x01name", &k), DQ_EINVAL);
    assert_null(k);
    assert_int_equal(dq_consumer_start(c, "bad queue", NULL, &k), DQ_EINVAL);
    DQT_EXPECT(c, dq_consumer_start(c, q, "prog-1", &k), 0);
    dq_consumer_set_in_hand(k, 3);
    dq_take_opts to;
    dq_take_opts_init(&to);
    to.holder = "wk";
    work_state *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->c = c;
    s->w = dq_worker_start_ex(c, q, 2, DQ_WORKER_NO_SCHEDULER, &to, handler, s);
    assert_non_null(s->w);
    dqt_run_for(c, 0.5);
    dq_consumer_info *list;
    size_t n;
    DQT_EXPECT(c, dq_consumers(c, q, &list, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(list[0].name, "prog-1");
    assert_int_equal(list[0].in_hand, 3);
    assert_true(list[0].started_ms > 0 && list[0].started_ms <= list[0].last_seen_ms &&
                list[0].last_seen_ms <= list[0].now_ms);
    assert_string_equal(list[1].name, "wk");
    assert_int_equal(list[1].in_hand, 0);
    free(list);
    dq_consumer_stop(k);
    dq_worker_stop(s->w);
    dqt_run_for(c, 0.2);
    DQT_EXPECT(c, dq_consumers(c, q, &list, &n), 0);
    assert_int_equal(n, 0);
    assert_null(list);
    assert_int_equal(dq_consumers(c, "bad queue", &list, &n), DQ_EINVAL);
    dq_client_free(c);
    free(s);
}

static void test_worker_invalid(void **state) {
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_100),
        cmocka_unit_test(test_worker_takes_ahead),
        cmocka_unit_test(test_worker_ahead_bytes),
        cmocka_unit_test(test_worker_slow_handlers_ahead_by_pace),
        cmocka_unit_test(test_worker_ahead_then_kept),
        cmocka_unit_test(test_worker_no_scheduler),
        cmocka_unit_test(test_worker_stop_in_handler),
        cmocka_unit_test(test_worker_free_with_client),
        cmocka_unit_test(test_worker_consumers),
        cmocka_unit_test(test_worker_invalid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
