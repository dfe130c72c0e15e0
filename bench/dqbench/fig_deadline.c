/*
 * fig_deadline.c - dqbench, figure 6, the same-deadline stress.
 */
#include "bench.h"

static const char *SD_Q = "sd";

/* Offers n items sharing one absolute due time, just after the fill (its
 * rate measured on a probe first). Returns the due time. */
static int64_t fill_same_deadline(int64_t n, const char *label) {
    flushall();
    int64_t probe = n / 10 > 1000 ? n / 10 : 1000;
    fill_spec far = {86400000, 0, 0, 0};
    double tp = fill("sdprobe", probe, &far, 512, NULL);
    flushall();
    double rate = (double)probe / tp;
    int64_t due = server_ms() + (int64_t)((double)n / rate * 1500.0) + 1500;
    fill_spec fs = {0, 0, due, 0};
    double tf = fill(SD_Q, n, &fs, 512, label);
    out("   %" PRId64 " offers (default ids, 16-byte payloads) with one absolute due time, in %.1f s\n",
        n, tf);
    return due;
}

void phase_deadline(void) {
    int64_t n = scaled(100000);
    out("\n== Figure 6: same-deadline stress%s\n", scaled_tag());
    double f = machine_factor();
    /* Reference: Redisson's design on the same server. Its transfer runs one
     * LREM over the list of all delayed items per item moved, so the cost
     * is a*n + b*n^2: measured at two sizes, fitted, evaluated at n. */
    int64_t n1 = scaled(10000) < 1000 ? 1000 : scaled(10000), n2 = 2 * n1;
    progress("Redisson reference at %" PRId64 " items", n1);
    double c1 = redisson_move(n1);
    progress("Redisson reference at %" PRId64 " items", n2);
    double c2 = redisson_move(n2);
    double qb = (c2 / (double)n2 - c1 / (double)n1) / (double)(n2 - n1),
           qa = c1 / (double)n1 - qb * (double)n1;
    double rs_pred = qa * (double)n + qb * (double)n * (double)n;
    out("   reference: Redisson's RDelayedQueue scripts (offer + transfer, verbatim from\n"
        "   redisson/redisson RedissonDelayedQueue.java) on this server: %.3f s of script time to move\n"
        "   %" PRId64 " same-deadline items, %.3f s for %" PRId64
        "; fitted a*n + b*n^2 gives %.1f s for %" PRId64 "\n",
        c1, n1, c2, n2, rs_pred, n);

    /* 6a: the move alone: one scheduler process, no consumers, so every
     * FCALL in the window is a transfer run. */
    int64_t due = fill_same_deadline(n, "fill same-deadline (move only)");
    reset_slots();
    rdo("SLOWLOG RESET");
    cons_args sa = {SD_Q, CONS_SCHED_ONLY, 0, 0};
    spawn_consumer(0, &sa);
    wait_ready(1, 30);
    snap a, b;
    take_snap(&a);
    double t0 = mono();
    int64_t moved_ms = -1;
    while (mono() < t0 + 120) {
        if (server_ms() > due && pending_count(SD_Q) == 0) {
            moved_ms = server_ms();
            break;
        }
        usleep(5000);
    }
    take_snap(&b);
    stop_kids();
    long long nslow = 0;
    long long slow = slowlog_max(DQ_LUA_transfer_FN, &nslow);
    double tr_usec = d_usec(&a, &b, "fcall"), tr_calls = d_calls(&a, &b, "fcall"),
           mv_cpu = d_cpu_us(&a, &b);
    out("   6a move only (1 scheduler process): all moved to the ready list %.3f s after the due time;\n"
        "      transfer scripts %.3f s of Redis time in %.0f runs (commandstats FCALL usec), longest run\n"
        "      %s%lld us; all Redis CPU in the window %.3f s. Redisson's design: about 40 s (brief's figure).\n",
        moved_ms < 0 ? -1.0 : (double)(moved_ms - due) / 1000, tr_usec / 1e6, tr_calls,
        slow < 0 ? "< " : "", slow < 0 ? 1000 : slow, mv_cpu / 1e6);
    print_breakdown(&a, &b, (double)n, "item");
    print_core0(&a, &b);
    int moved_all = moved_ms >= 0;

    /* 6b: end to end: 4 consumer processes, each with its scheduler. */
    due = fill_same_deadline(n, "fill same-deadline (end to end)");
    reset_slots();
    rdo("SLOWLOG RESET");
    cons_args ca = {SD_Q, CONS_WORKER, DRAIN_CONC, 0};
    take_snap(&a);
    int64_t start_ms = server_ms();
    for (int i = 0; i < 4; i++) spawn_consumer(i, &ca);
    wait_ready(4, 30);
    int64_t from = due;
    if (start_ms > due) {
        out("   note: the fill ended %" PRId64
            " ms after the due time; times are from the consumers' start\n",
            start_ms - due);
        from = start_ms;
    }
    t0 = mono();
    double next_p = t0 + 2;
    moved_ms = -1;
    while ((int64_t)total_delivered(4) < n && mono() < t0 + 120) {
        if (moved_ms < 0 && server_ms() > due && pending_count(SD_Q) == 0) moved_ms = server_ms();
        if (mono() > next_p) {
            next_p += 2;
            check_kids_failed(4);
            progress("same deadline: delivered %" PRIu64 " of %" PRId64, total_delivered(4), n);
        }
        usleep(5000);
    }
    take_snap(&b);
    stop_kids();
    uint64_t got = 0;
    int64_t last = 0;
    for (int i = 0; i < 4; i++) {
        got += S->s[i].delivered;
        if (S->s[i].last_recv_us > last) last = S->s[i].last_recv_us;
    }
    double cpu = d_cpu_us(&a, &b);
    double deliver_s = (double)(last / 1000 - from) / 1000;
    out("   6b end to end (4 processes, dq_worker with its scheduler, %d in flight each): delivered\n"
        "      %" PRIu64 " of %" PRId64
        ", all delivered %.3f s after the due time (%.0f items/s); all Redis CPU\n"
        "      in the window (move + take + the rest) %.3f s\n",
        DRAIN_CONC, got, n, deliver_s, (double)got / (deliver_s > 0 ? deliver_s : 1e-3), cpu / 1e6);
    print_breakdown(&a, &b, (double)(got ? got : 1), "item");
    print_core0(&a, &b);

    char ours[32], ref[44], ratio[16], nt[34];
    snprintf(ours, sizeof ours, "%.3f s", tr_usec / 1e6);
    snprintf(ref, sizeof ref, "Redisson: %.1f s (fit)", rs_pred);
    snprintf(ratio, sizeof ratio, "%.4f", tr_usec / 1e6 / rs_pred);
    add_row("6", "same deadline: Redis CPU to move 100k", ours, ref, ratio, "< 1 s",
            tr_usec / 1e6 < 1.0 && moved_all);
    snprintf(nt, sizeof nt, "< %.2f s", 1.0 / f);
    row_norm(nt, tr_usec / 1e6 < 1.0 / f && moved_all);
    snprintf(ours, sizeof ours, "%.3f s", deliver_s);
    add_row("6", "same deadline: time until all delivered", ours, "-", "-", "(info)",
            got == (uint64_t)n ? -1 : 0);
    snprintf(ours, sizeof ours, "%.3f s", cpu / 1e6);
    add_row("6", "same deadline: all Redis CPU, end to end", ours, "-", "-", "(info)", -1);
    flushall();
}
