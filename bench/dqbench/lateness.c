/*
 * lateness.c - dqbench, the lateness run figures 4 and 7 share (offers at
 * a rate, consumers timing each delivery), and its report rows.
 */
#include "bench.h"

void print_quantiles(const char *label, const hist *h) {
    out("   %-46s p50 %6.2f  p90 %6.2f  p99 %6.2f  p99.9 %6.2f  max %7.2f ms%s\n", label,
        (double)hist_quantile(h, 0.50) / 1000, (double)hist_quantile(h, 0.90) / 1000,
        (double)hist_quantile(h, 0.99) / 1000, (double)hist_quantile(h, 0.999) / 1000,
        (double)h->max / 1000, h->neg ? " (some < 0: clock offset error)" : "");
}

/* Steady offers at `rate`/s for `secs` with delays uniform in [0, max_delay)
 * while `consumers` worker processes (each with its own scheduler) take. */
void lateness_run(const char *queue, int consumers, double rate, double secs, int max_delay_ms,
                  const char *label, lat_res *res) {
    memset(res, 0, sizeof *res);
    reset_slots();
    cons_args ca = {queue, CONS_WORKER, CONSUMER_CONC, 0};
    for (int i = 0; i < consumers; i++) spawn_consumer(i, &ca);
    wait_ready(consumers, 30);
    sleep_s(0.2); /* let the catch-up runs and subscriptions settle */
    snap a, b;
    take_snap(&a);
    int64_t total = (int64_t)(rate * secs);
    int64_t sent = 0;
    dq_item items[64];
    char payloads[64][PAYLOAD_LEN];
    P_touch();
    double t0 = mono(), next_progress = t0 + 2;
    while (sent < total) {
        int64_t target = (int64_t)((mono() - t0) * rate) + 1;
        if (target > total) target = total;
        while (sent < target) {
            int k = (int)(target - sent > 64 ? 64 : target - sent);
            for (int j = 0; j < k; j++) {
                make_payload(payloads[j], (uint64_t)(sent + j));
                items[j] = (dq_item){.payload = payloads[j],
                                     .payload_len = PAYLOAD_LEN,
                                     .delay_ms = (int64_t)(rnd() % (uint64_t)max_delay_ms)};
            }
            int rc = dq_offer_many(P, queue, items, (size_t)k, NULL);
            if (rc != k) die("dq_offer_many: %s", dq_client_errstr(P));
            sent += k;
        }
        if (mono() > next_progress) {
            next_progress += 2;
            check_kids_failed(consumers);
            progress("%s: offered %" PRId64 " of %" PRId64 ", delivered %" PRIu64, label, sent, total,
                     total_delivered(consumers));
        }
        sleep_until(t0 + (double)(sent + 5) / rate); /* groups of about 5 */
    }
    double t_offer = mono() - t0;
    double until = mono() + max_delay_ms / 1000.0 + 15;
    while (total_delivered(consumers) < (uint64_t)sent && mono() < until) {
        if (mono() > next_progress) {
            next_progress += 2;
            check_kids_failed(consumers);
            progress("%s: all %" PRId64 " offered, delivered %" PRIu64, label, sent,
                     total_delivered(consumers));
        }
        usleep(5000);
    }
    take_snap(&b);
    stop_kids();
    res->offered = sent;
    res->rate = (double)sent / t_offer;
    hist_init(&res->recv);
    hist_init(&res->ready_lat);
    for (int i = 0; i < consumers; i++) {
        slot *s = &S->s[i];
        res->delivered += (int64_t)s->delivered;
        hist_merge(&res->recv, &s->recv);
        hist_merge(&res->ready_lat, &s->ready_lat);
        res->sc.transfers += s->sc.transfers;
        res->sc.moved += s->sc.moved;
        res->sc.wakeups += s->sc.wakeups;
        res->sc.safety_checks += s->sc.safety_checks;
        res->sc.errors += s->sc.errors;
        if (s->clock_rtt_us > res->max_offset_rtt) res->max_offset_rtt = s->clock_rtt_us;
    }
    res->cpu_us = d_cpu_us(&a, &b);
    res->fcall_calls = d_calls(&a, &b, "fcall");
    res->block_calls = d_calls(&a, &b, "blpop") + d_calls(&a, &b, "blmove") + d_calls(&a, &b, "blmpop") +
                       d_calls(&a, &b, "brpoplpush");

    out("\n   -- %s%s\n", label, scaled_tag());
    out("   %d consumer process(es), each: dq_worker_start (own scheduler), %d takes in flight.\n",
        consumers, CONSUMER_CONC);
    out("   offered %" PRId64 " at %.0f/s for %.1f s, delays uniform in [0, %d) ms; delivered %" PRId64
        "%s\n",
        res->offered, res->rate, t_offer, max_delay_ms, res->delivered,
        res->delivered == res->offered ? "" : "  <-- NOT ALL DELIVERED");
    print_quantiles("receive lateness (consumer clock + offset - due)", &res->recv);
    print_quantiles("ready lateness (ready_ms - due_ms, server clock)", &res->ready_lat);
    out("   clock offset: TIME sample with the best of 20 round trips, worst such round trip %" PRId64
        " us\n",
        res->max_offset_rtt);
    hist_print2(stdout, "     ", &res->recv, "receive", &res->ready_lat, "ready");
    print_breakdown(&a, &b, (double)(res->delivered ? res->delivered : 1), "delivered item");
    print_core0(&a, &b);
    out("   Redis CPU %.3f s in the window = %.2f us per delivered item (offers included);\n"
        "   transfer runs %" PRIu64 " (%.3f per delivered item), wake-ups heard %" PRIu64
        ", safety checks %" PRIu64 ", errors %" PRIu64 "\n",
        res->cpu_us / 1e6, res->cpu_us / (double)(res->delivered ? res->delivered : 1),
        res->sc.transfers, (double)res->sc.transfers / (double)(res->delivered ? res->delivered : 1),
        res->sc.wakeups, res->sc.safety_checks, res->sc.errors);
    fflush(stdout);
}

void lateness_rows(const char *pending, int consumers, const lat_res *r) {
    char what[72], ours[32];
    int64_t p99 = hist_quantile(&r->recv, 0.99), mx = r->recv.max;
    snprintf(what, sizeof what, "lateness p99, %s pending, %d consumer%s", pending, consumers,
             consumers > 1 ? "s" : "");
    snprintf(ours, sizeof ours, "%.2f ms", (double)p99 / 1000);
    char ref[44];
    snprintf(ref, sizeof ref, "ready_ms-due: %.2f ms",
             (double)hist_quantile(&r->ready_lat, 0.99) / 1000);
    add_row("4", what, ours, ref, "-", "<= 5 ms", p99 <= 5000 && r->delivered == r->offered);
    snprintf(what, sizeof what, "lateness max, %s pending, %d consumer%s", pending, consumers,
             consumers > 1 ? "s" : "");
    snprintf(ours, sizeof ours, "%.2f ms", (double)mx / 1000);
    snprintf(ref, sizeof ref, "ready_ms-due: %.2f ms", (double)r->ready_lat.max / 1000);
    add_row("4", what, ours, ref, "-", "<= 50 ms", mx <= 50000 && r->delivered == r->offered);
}

double lat_secs(void) { return 10.0 * G.scale < 2 ? 2 : 10.0 * G.scale; }
