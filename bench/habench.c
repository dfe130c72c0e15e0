/*
 * habench.c - the high-availability figures of `make bench`, one
 * measurement per run, driven by bench/ha.py on topologies it starts:
 *
 *   habench offer    URL QUEUES ITEMS WAIT   pipelined offers (dq_offer_async)
 *                                            in runs of 64 over QUEUES queues
 *                                            named hq0..; WAIT replicas (0: none)
 *   habench one      URL ITEMS WAIT          one dq_offer at a time
 *   habench lateness URL QUEUES RATE SECS    offers at RATE/s with delays of
 *                                            0-1 s over QUEUES queues while
 *                                            one in-process consumer per
 *                                            queue takes them; ready - due
 *   habench produce  URL QUEUE SECS          one offer (due now) every 5 ms,
 *                                            failures counted, not fatal
 *
 * Each prints one line of key=value figures on stdout. Everything uses the
 * public API only; lateness is measured on the server's clock (ready_ms -
 * due_ms of each delivered message), so client clocks do not matter.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ev.h>

#include "delayq.h"
#include "hist.h"

#define MAX_QUEUES 64

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static dq_client *connect_or_die(const char *url, int wait) {
    dq_options o;
    dq_options_init(&o);
    o.wait_replicas = wait;
    dq_client *c = dq_client_new(NULL, &o);
    if (!c || dq_connect(c, url) != 0) {
        fprintf(stderr, "habench: cannot connect to %s: %s\n", url, c ? dq_client_errstr(c) : "oom");
        exit(1);
    }
    return c;
}

static void queue_name(char *buf, size_t size, int i) { snprintf(buf, size, "hq%d", i); }

/* ------------------------------------------------------------ offer */

typedef struct pipe_state {
    long left, done, failed, not_durable;
} pipe_state;

static void offered(dq_client *c, int status, const dq_offer_result *r, void *privdata) {
    (void)c, (void)r;
    pipe_state *p = privdata;
    p->done++;
    if (status == DQ_ENOTDURABLE) p->not_durable++;
    else if (status) p->failed++;
}

static int run_offer(const char *url, int queues, long items, int wait) {
    dq_client *c = connect_or_die(url, wait);
    pipe_state p = {items, 0, 0, 0};
    char q[32], payload[16] = "0123456789abcdef";
    dq_item it = {.payload = payload, .payload_len = 16, .delay_ms = 3600000};
    double t0 = mono();
    long sent = 0;
    /* Keep at most 1000 offers out, in runs of 64 per queue: the client
     * gathers consecutive offers to one queue into one script call. */
    while (p.done < items) {
        while (sent < items && sent - p.done < 1000) {
            queue_name(q, sizeof q, (int)((sent / 64) % queues));
            if (dq_offer_async(c, q, &it, offered, &p) != 0) p.failed++, p.done++;
            sent++;
        }
        ev_run(dq_client_loop(c), EVRUN_ONCE);
    }
    double s = mono() - t0;
    printf("offers=%ld seconds=%.3f per_s=%.0f failed=%ld not_durable=%ld\n", items, s, items / s,
           p.failed, p.not_durable);
    dq_client_free(c);
    return p.failed ? 1 : 0;
}

static int run_one(const char *url, long items, int wait) {
    dq_client *c = connect_or_die(url, wait);
    char payload[16] = "0123456789abcdef";
    dq_item it = {.payload = payload, .payload_len = 16, .delay_ms = 3600000};
    long failed = 0, not_durable = 0;
    double t0 = mono();
    for (long i = 0; i < items; i++) {
        int rc = dq_offer(c, "hq0", &it, NULL);
        if (rc == DQ_ENOTDURABLE) not_durable++;
        else if (rc) failed++;
    }
    double s = mono() - t0;
    printf("offers=%ld seconds=%.3f per_s=%.0f failed=%ld not_durable=%ld\n", items, s, items / s,
           failed, not_durable);
    dq_client_free(c);
    return failed ? 1 : 0;
}

/* ------------------------------------------------------------ lateness */

typedef struct lat_state {
    dq_client *c;
    hist h;
    long delivered, target;
    int stop;
} lat_state;

static void take_next(lat_state *s, const char *queue);

static void took(dq_client *c, int status, dq_msg *m, void *privdata) {
    (void)c;
    lat_state *s = privdata;
    if (status == 1) {
        hist_add(&s->h, (m->ready_ms - m->due_ms) * 1000);
        s->delivered++;
        take_next(s, m->queue);
        dq_msg_free(m);
    }
}

static void take_next(lat_state *s, const char *queue) {
    if (!s->stop && dq_take_async(s->c, queue, -1, took, s, NULL) != 0)
        fprintf(stderr, "habench: take: %s\n", dq_client_errstr(s->c));
}

static void on_tick(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    (void)w;
}

static int run_lateness(const char *url, int queues, int rate, double secs) {
    lat_state s = {0};
    s.c = connect_or_die(url, 0);
    hist_init(&s.h);
    char q[32];
    for (int i = 0; i < queues; i++) {
        queue_name(q, sizeof q, i);
        if (dq_schedule(s.c, q) != 0) return 1;
        for (int k = 0; k < 4; k++) take_next(&s, q);
    }
    struct ev_loop *loop = dq_client_loop(s.c);
    ev_timer tick;
    ev_timer_init(&tick, on_tick, 0.001, 0.001);
    ev_timer_start(loop, &tick);
    char payload[16] = "0123456789abcdef";
    double t0 = mono(), end = t0 + secs;
    long offered_n = 0;
    pipe_state p = {0, 0, 0, 0};
    while (mono() < end) {
        long due = (long)((mono() - t0) * rate);
        while (offered_n < due) {
            dq_item it = {
                .payload = payload, .payload_len = 16, .delay_ms = (int64_t)((offered_n * 7919) % 1000)};
            queue_name(q, sizeof q, (int)(offered_n % queues));
            if (dq_offer_async(s.c, q, &it, offered, &p) != 0) p.failed++;
            offered_n++;
        }
        ev_run(loop, EVRUN_ONCE);
    }
    /* Let the last ones (due up to 1 s later) arrive, 3 s at most. */
    double drain_end = mono() + 3.0;
    while (s.delivered < offered_n - p.failed && mono() < drain_end) ev_run(loop, EVRUN_ONCE);
    ev_timer_stop(loop, &tick);
    s.stop = 1;
    printf("offered=%ld delivered=%ld failed=%ld p50_ms=%.2f p99_ms=%.2f max_ms=%.2f\n", offered_n,
           s.delivered, p.failed, hist_quantile(&s.h, 0.5) / 1000.0, hist_quantile(&s.h, 0.99) / 1000.0,
           s.h.max / 1000.0);
    dq_client_free(s.c);
    return 0;
}

/* ------------------------------------------------------------ produce */

static int run_produce(const char *url, const char *queue, double secs) {
    dq_client *c = connect_or_die(url, 0);
    long ok = 0, failed = 0;
    double end = mono() + secs;
    struct timespec five_ms = {0, 5000000};
    while (mono() < end) {
        dq_item it = {.payload = "x", .payload_len = 1};
        if (dq_offer(c, queue, &it, NULL) == 0) ok++;
        else failed++;
        nanosleep(&five_ms, NULL);
    }
    printf("offered=%ld failed=%ld\n", ok, failed);
    dq_client_free(c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 6 && strcmp(argv[1], "offer") == 0)
        return run_offer(argv[2], atoi(argv[3]), atol(argv[4]), atoi(argv[5]));
    if (argc >= 5 && strcmp(argv[1], "one") == 0) return run_one(argv[2], atol(argv[3]), atoi(argv[4]));
    if (argc >= 6 && strcmp(argv[1], "lateness") == 0)
        return run_lateness(argv[2], atoi(argv[3]), atoi(argv[4]), atof(argv[5]));
    if (argc >= 5 && strcmp(argv[1], "produce") == 0)
        return run_produce(argv[2], argv[3], atof(argv[4]));
    fprintf(stderr, "usage: habench offer URL QUEUES ITEMS WAIT | one URL ITEMS WAIT |\n"
                    "       lateness URL QUEUES RATE SECS | produce URL QUEUE SECS\n");
    return 2;
}
