/*
 * fig_lat.c - dqbench, figure 4 at 100,000 pending, and figure 7 (many schedulers).
 */
#include "bench.h"

void phase_lat(void) {
    int64_t n = scaled(100000);
    out("\n== Figure 4 at %" PRId64 " pending, and figure 7 (many schedulers)%s\n", n, scaled_tag());
    flushall();
    fill_spec fs = {86400000, 86400000, 0, 0};
    fill(LAT_Q, n, &fs, 512, "fill 100k far-future");
    lat_res r1, r4, r16;
    char label[96];
    snprintf(label, sizeof label, "%" PRId64 " pending, 1 consumer", n);
    lateness_run(LAT_Q, 1, LAT_RATE, lat_secs(), LAT_MAX_DELAY, label, &r1);
    snprintf(label, sizeof label, "%" PRId64 " pending, 4 consumers", n);
    lateness_run(LAT_Q, 4, LAT_RATE, lat_secs(), LAT_MAX_DELAY, label, &r4);
    snprintf(label, sizeof label, "%" PRId64 " pending, 16 consumers (figure 7)", n);
    lateness_run(LAT_Q, 16, LAT_RATE, lat_secs(), LAT_MAX_DELAY, label, &r16);
    lateness_rows("100k", 1, &r1);
    lateness_rows("100k", 4, &r4);

    out("\n   Figure 7: 16 consumer processes each running the scheduler vs 1, same load\n");
    double d1 = (double)(r1.delivered ? r1.delivered : 1),
           d16 = (double)(r16.delivered ? r16.delivered : 1);
    double off1 = (double)r1.offered, off16 = (double)r16.offered;
    /* Offer cost in each window: FCALL calls that were not transfers are
     * offers; their Redis CPU is estimated from the run with 1 scheduler is not
     * separable, so both the total and the transfer-call counts are shown. */
    out("   %-44s %12s %12s %8s\n", "", "1 process", "16 procs", "ratio");
    out("   %-44s %12.4f %12.4f %8.2f\n", "transfer script calls per delivered item",
        (double)r1.sc.transfers / d1, (double)r16.sc.transfers / d16,
        ((double)r16.sc.transfers / d16) / ((double)r1.sc.transfers / d1));
    out("   %-44s %12.2f %12.2f %8.2f\n", "Redis CPU us per delivered item (all)", r1.cpu_us / d1,
        r16.cpu_us / d16, (r16.cpu_us / d16) / (r1.cpu_us / d1));
    out("   %-44s %12.2f %12.2f %8.2f\n", "FCALL calls per delivered item (all scripts)",
        r1.fcall_calls / d1, r16.fcall_calls / d16, (r16.fcall_calls / d16) / (r1.fcall_calls / d1));
    out("   %-44s %12.2f %12.2f %8.2f\n", "blocking waits per delivered item (BL*)", r1.block_calls / d1,
        r16.block_calls / d16, (r16.block_calls / d16) / (r1.block_calls > 0 ? r1.block_calls / d1 : 1));
    (void)off1, (void)off16;
    out("   %-44s %12" PRIu64 " %12" PRIu64 "\n", "wake-ups heard (all processes)", r1.sc.wakeups,
        r16.sc.wakeups);
    out("   %-44s %12.2f %12.2f %8.2f\n", "lateness p99 (receive), ms",
        (double)hist_quantile(&r1.recv, .99) / 1000, (double)hist_quantile(&r16.recv, .99) / 1000,
        (double)hist_quantile(&r16.recv, .99) /
            (double)(hist_quantile(&r1.recv, .99) ? hist_quantile(&r1.recv, .99) : 1));
    char ours[32], ref[44], ratio[16];
    double ratio_cpu = (r16.cpu_us / d16) / (r1.cpu_us / d1);
    snprintf(ours, sizeof ours, "%.2f us/item", r16.cpu_us / d16);
    snprintf(ref, sizeof ref, "1 process: %.2f us/item", r1.cpu_us / d1);
    snprintf(ratio, sizeof ratio, "%.2f", ratio_cpu);
    add_row("7", "Redis CPU per delivered item, 16 schedulers", ours, ref, ratio, "ratio <= 2",
            ratio_cpu <= 2.0);
    snprintf(ours, sizeof ours, "%.4f", (double)r16.sc.transfers / d16);
    snprintf(ref, sizeof ref, "1 process: %.4f", (double)r1.sc.transfers / d1);
    snprintf(ratio, sizeof ratio, "%.2f",
             ((double)r16.sc.transfers / d16) / ((double)r1.sc.transfers / d1));
    add_row("7", "transfer calls per delivered item, 16 sched.", ours, ref, ratio, "(informs CPU)", -1);
    snprintf(ours, sizeof ours, "%.2f ms", (double)hist_quantile(&r16.recv, .99) / 1000);
    add_row("7", "lateness p99 with 16 consumers", ours, "-", "-", "(info)", -1);
    flushall();
}
