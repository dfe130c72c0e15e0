/*
 * children.c - dqbench's forked children: consumers (a dq_worker, a
 * scheduler alone, or dq_take_many in a loop, with or without a lease) and producers, each writing
 * its counters and histograms into its slot of the shared block; and the
 * parent's side: spawning them, waiting until they are ready, stopping them.
 */
#include "bench.h"

static void child_common(int idx) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    rnd_seed((uint64_t)getpid() * 7919 + (uint64_t)idx + (uint64_t)real_us());
}

static void child_fail(slot *s, const char *what, const char *why) {
    snprintf(s->err, sizeof s->err, "%s: %s", what, why);
    __atomic_store_n(&s->failed, 1, __ATOMIC_SEQ_CST);
    _exit(1);
}

/* Server clock minus local clock (us), from the TIME sample with the
 * shortest round trip of 20. */
static void sample_offset(slot *s) {
    redisContext *c = connect_sync();
    int64_t best_rtt = INT64_MAX, best_off = 0;
    for (int i = 0; i < 20; i++) {
        int64_t t0 = real_us();
        redisReply *r = redisCommand(c, "TIME");
        int64_t t1 = real_us();
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) child_fail(s, "TIME", c->errstr);
        int64_t srv = atoll(r->element[0]->str) * 1000000 + atoll(r->element[1]->str);
        freeReplyObject(r);
        if (t1 - t0 < best_rtt) {
            best_rtt = t1 - t0;
            best_off = srv - (t0 + t1) / 2;
        }
    }
    redisFree(c);
    s->clock_offset_us = best_off;
    s->clock_rtt_us = best_rtt;
}

/* Records one delivery received at server time now (us). */
static void record(slot *s, int64_t now, int64_t due_ms, int64_t ready_ms) {
    hist_add(&s->recv, now - due_ms * 1000);
    hist_add(&s->ready_lat, (ready_ms - due_ms) * 1000);
    if (s->first_recv_us == 0) s->first_recv_us = now;
    s->last_recv_us = now;
}

static void on_msg(dq_worker *w, dq_msg *m, void *privdata) {
    slot *s = privdata;
    record(s, real_us() + s->clock_offset_us, m->due_ms, m->ready_ms);
    __atomic_store_n(&s->delivered, s->delivered + 1, __ATOMIC_RELAXED);
    dq_worker_done(w, m, 0);
}

/* dq_take_many in a loop, batch (1..TAKE_MANY_MAX) at most per call; with
 * opts' lease the items stay in flight, never acked (figure 5g). */
static void take_many_loop(dq_client *c, slot *s, const char *queue, const dq_take_opts *opts,
                           int batch) {
    dq_msg *msgs[TAKE_MANY_MAX];
    while (!__atomic_load_n(&S->stop, __ATOMIC_SEQ_CST)) {
        int n = dq_take_many(c, queue, opts, 20, msgs, (size_t)batch);
        if (n < 0) child_fail(s, "dq_take_many", dq_client_errstr(c));
        int64_t now = real_us() + s->clock_offset_us;
        for (int i = 0; i < n; i++) {
            record(s, now, msgs[i]->due_ms, msgs[i]->ready_ms);
            dq_msg_free(msgs[i]);
        }
        __atomic_store_n(&s->delivered, s->delivered + (uint64_t)(n > 0 ? n : 0), __ATOMIC_RELAXED);
        if (!s->ready) {
            dq_sched_counters sc;
            dq_get_sched_counters(c, &sc);
            if (sc.transfers > 0) __atomic_store_n(&s->ready, 1, __ATOMIC_SEQ_CST);
        }
    }
}

static void on_tick(struct ev_loop *loop, ev_timer *t, int revents) {
    (void)loop, (void)revents;
    cons_ctx *x = t->data;
    if (!x->s->ready) {
        dq_sched_counters sc;
        dq_get_sched_counters(x->c, &sc);
        if (!x->need_sched || sc.transfers > 0) __atomic_store_n(&x->s->ready, 1, __ATOMIC_SEQ_CST);
    }
    if (__atomic_load_n(&S->stop, __ATOMIC_SEQ_CST)) dq_stop(x->c);
}

static void on_log(void *privdata, const char *msg) {
    (void)privdata;
    fprintf(stderr, "  [consumer %d] %s\n", (int)getpid(), msg);
}

static void child_consumer(int idx, const cons_args *a) {
    slot *s = &S->s[idx];
    sample_offset(s);
    dq_client *c = dq_client_new(NULL, NULL);
    if (!c) child_fail(s, "dq_client_new", "failed");
    dq_set_log(c, on_log, NULL);
    if (dq_connect(c, G.url) != 0) child_fail(s, "dq_connect", dq_client_errstr(c));
    cons_ctx x = {c, s, 0};
    if (a->mode == CONS_TAKE_MANY || a->mode == CONS_TAKE_LEASED) {
        if (!(a->wflags & DQ_WORKER_NO_SCHEDULER) && dq_schedule(c, a->queue) != 0)
            child_fail(s, "dq_schedule", dq_client_errstr(c));
        if (a->wflags & DQ_WORKER_NO_SCHEDULER) __atomic_store_n(&s->ready, 1, __ATOMIC_SEQ_CST);
        dq_take_opts lease = {.lease_ms = 30000, .max_attempts = 0};
        int batch = a->conc > 0 && a->conc < TAKE_MANY_MAX ? a->conc : TAKE_MANY_MAX;
        take_many_loop(c, s, a->queue, a->mode == CONS_TAKE_LEASED ? &lease : NULL, batch);
        dq_get_sched_counters(c, &s->sc);
        dq_client_free(c);
        __atomic_store_n(&s->done, 1, __ATOMIC_SEQ_CST);
        return;
    }
    if (a->mode == CONS_SCHED_ONLY) {
        if (dq_schedule(c, a->queue) != 0) child_fail(s, "dq_schedule", dq_client_errstr(c));
        x.need_sched = 1;
    } else {
        dq_worker *w = dq_worker_start(c, a->queue, a->conc, a->wflags, on_msg, s);
        if (!w) child_fail(s, "dq_worker_start", dq_client_errstr(c));
        x.need_sched = !(a->wflags & DQ_WORKER_NO_SCHEDULER);
    }
    ev_timer tick;
    ev_timer_init(&tick, on_tick, 0.002, 0.002);
    tick.data = &x;
    ev_timer_start(dq_client_loop(c), &tick);
    dq_run(c);
    ev_timer_stop(dq_client_loop(c), &tick);
    dq_get_sched_counters(c, &s->sc);
    dq_client_free(c);
    __atomic_store_n(&s->done, 1, __ATOMIC_SEQ_CST);
}

void make_payload(char *buf, uint64_t seq) {
    char tmp[PAYLOAD_LEN + 1];
    snprintf(tmp, sizeof tmp, "%016" PRIx64, seq);
    memcpy(buf, tmp, PAYLOAD_LEN);
}

/* One producer of the concurrent-offer figure: dq_offer one at a time. */
static void child_offerer(int idx, const offer_args *a) {
    slot *s = &S->s[idx];
    dq_client *c = dq_client_new(NULL, NULL);
    if (!c || dq_connect(c, G.url) != 0) child_fail(s, "dq_connect", c ? dq_client_errstr(c) : "oom");
    __atomic_store_n(&s->ready, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&S->go, __ATOMIC_SEQ_CST)) usleep(100);
    char payload[PAYLOAD_LEN];
    for (int64_t i = 0; i < a->n; i++) {
        make_payload(payload, (uint64_t)idx << 40 | (uint64_t)i);
        dq_item it = {.payload = payload, .payload_len = PAYLOAD_LEN, .delay_ms = a->delay_ms};
        if (dq_offer(c, a->queue, &it, NULL) != 0) child_fail(s, "dq_offer", dq_client_errstr(c));
    }
    s->t_end = mono();
    dq_client_free(c);
    __atomic_store_n(&s->done, 1, __ATOMIC_SEQ_CST);
}

void reset_slots(void) {
    memset(S, 0, sizeof *S);
    for (int i = 0; i < MAXP; i++) {
        hist_init(&S->s[i].recv);
        hist_init(&S->s[i].ready_lat);
    }
}

/* Forks child idx, which runs body(idx, arg) and exits. */
static pid_t spawn_child(int idx, void (*body)(int idx, const void *arg), const void *arg) {
    fflush(stdout);
    fflush(stderr);
    pid_t p = fork();
    if (p < 0) die("fork: %s", strerror(errno));
    if (p == 0) {
        child_common(idx);
        body(idx, arg);
        _exit(0);
    }
    kids[nkids++] = p;
    return p;
}

static void consumer_body(int idx, const void *arg) { child_consumer(idx, arg); }
static void offerer_body(int idx, const void *arg) { child_offerer(idx, arg); }

pid_t spawn_consumer(int idx, const cons_args *a) { return spawn_child(idx, consumer_body, a); }
pid_t spawn_offerer(int idx, const offer_args *a) { return spawn_child(idx, offerer_body, a); }

void check_kids_failed(int n) {
    for (int i = 0; i < n; i++)
        if (__atomic_load_n(&S->s[i].failed, __ATOMIC_SEQ_CST))
            die("child %d failed: %s", i, S->s[i].err);
}

/* Waits until n children say ready (at most secs). */
void wait_ready(int n, double secs) {
    double until = mono() + secs;
    for (;;) {
        check_kids_failed(n);
        int r = 0;
        for (int i = 0; i < n; i++) r += __atomic_load_n(&S->s[i].ready, __ATOMIC_SEQ_CST);
        if (r == n) return;
        if (mono() > until) die("children not ready within %.0f s (%d of %d)", secs, r, n);
        usleep(1000);
    }
}

/* Asks every child to stop and reaps them (SIGKILL after 10 s). */
void stop_kids(void) {
    __atomic_store_n(&S->stop, 1, __ATOMIC_SEQ_CST);
    double until = mono() + 10;
    for (int i = 0; i < nkids; i++) {
        for (;;) {
            pid_t r = waitpid(kids[i], NULL, WNOHANG);
            if (r == kids[i] || r < 0) break;
            if (mono() > until) {
                fprintf(stderr, "dqbench: child %d did not stop; killing it\n", (int)kids[i]);
                kill(kids[i], SIGKILL);
                waitpid(kids[i], NULL, 0);
                break;
            }
            usleep(2000);
        }
        kids[i] = 0;
    }
    nkids = 0;
    __atomic_store_n(&S->stop, 0, __ATOMIC_SEQ_CST);
}

uint64_t total_delivered(int n) {
    uint64_t t = 0;
    for (int i = 0; i < n; i++) t += __atomic_load_n(&S->s[i].delivered, __ATOMIC_RELAXED);
    return t;
}
