/*
 * fig_backlog.c - dqbench, figure 5, backlog catch-up and drains (and figure 2 per delivered item).
 */
#include "bench.h"

static const char *CU_Q = "cu";

/* Fills n items all due within span_ms of now+1 s, and waits until they
 * are. */
static void fill_due_within(const char *queue, int64_t n, int64_t span_ms, const char *label) {
    int64_t t0 = server_ms();
    fill_spec fs = {0, 0, t0 + 1000, span_ms};
    double secs = fill(queue, n, &fs, 512, label);
    out("   backlog: %" PRId64 " offers (due within [T+1 s, T+1 s + %" PRId64
        " ms)) in %.1f s (%.0f/s)\n",
        n, span_ms, secs, (double)n / secs);
    while (server_ms() < t0 + 1010 + span_ms) usleep(10000);
    long long zc = pending_count(queue);
    if (zc != n)
        out("   note: %lld of %" PRId64 " are pending (the rest went straight to ready)\n", zc, n);
}

/* Fills n items all due within [now+1 s, now+2 s] and waits until they are. */
static void fill_due_backlog(const char *queue, int64_t n, const char *label) {
    fill_due_within(queue, n, 1000, label);
}

typedef struct drain_res {
    uint64_t got;   /* delivered when the target was reached (or time ran out) */
    double secs, cpu_item;
    snap a, b;
} drain_res;

static void alternated(int64_t n); /* figure 5h, below */

/* Seconds left of the run's time budget (DQ_BENCH_BUDGET, default 540). */
static double remaining(void) { return G.budget - (mono() - G.t_start); }

/* Starts procs consumers (ca) and waits until they delivered target items
 * (at most timeout s, and never past the time budget minus a reserve for
 * the rest: then the drain is reported as partial). */
static void run_drain(const cons_args *ca, int procs, uint64_t target, double timeout, const char *label,
                      drain_res *r) {
    reset_slots();
    take_snap(&r->a);
    double t0 = mono(), next_p = t0 + 2;
    double reserve = remaining() - 90;
    if (timeout > reserve) timeout = reserve > 15 ? reserve : 15;
    for (int i = 0; i < procs; i++) spawn_consumer(i, ca);
    while (total_delivered(procs) < target && mono() < t0 + timeout) {
        if (mono() > next_p) {
            next_p += 2;
            check_kids_failed(procs);
            progress("%s: %" PRIu64 " of %" PRIu64, label, total_delivered(procs), target);
        }
        usleep(2000);
    }
    r->secs = mono() - t0;
    r->got = total_delivered(procs);
    take_snap(&r->b);
    stop_kids();
    r->cpu_item = d_cpu_us(&r->a, &r->b) / (double)(r->got ? r->got : 1);
    if (r->got < target)
        out("   NOTE: %s stopped after %.0f s with %" PRIu64 " of %" PRIu64
            " delivered (time bound): the\n"
            "   rate below is over that partial drain\n",
            label, r->secs, r->got, target);
}

/* One end-to-end drain (figure 5d, 5e): a fresh backlog of n due items,
 * then 4 consumer processes of kind a until all are delivered or limit_s
 * runs out. Prints the result under the heading how; returns items/s. */
static double end_to_end(const cons_args *a, int64_t n, int limit_s, const char *kind, const char *how,
                         drain_res *r) {
    char label[96];
    flushall();
    snprintf(label, sizeof label, "fill a due backlog of %" PRId64 " (end to end, %s)", n, kind);
    fill_due_backlog(a->queue, n, label);
    rdo("SLOWLOG RESET");
    snprintf(label, sizeof label, "end-to-end drain, %s", kind);
    run_drain(a, 4, (uint64_t)n, limit_s, label, r);
    long long nslow = 0;
    long long slow = slowlog_max(DQ_LUA_transfer_FN, &nslow);
    double rate = (double)r->got / r->secs;
    out("   %s:\n      %" PRIu64 " of %" PRId64
        " delivered in %.2f s = %.0f items/s, Redis CPU %.2f us per item,\n"
        "      longest transfer run %s%lld us\n",
        how, r->got, n, r->secs, rate, r->cpu_item, slow < 0 ? "< " : "", slow < 0 ? 1000 : slow);
    print_breakdown(&r->a, &r->b, (double)(r->got ? r->got : 1), "item delivered");
    print_core0(&r->a, &r->b);
    return rate;
}

void phase_backlog(void) {
    int64_t n = scaled(1000000);
    char rl[160], ours[32], ref[44], ratio[16], nt[34];
    snprintf(rl, sizeof rl, "dq:{%s}:r", CU_Q);
    double f = machine_factor();
    out("\n== Figure 5: backlog catch-up%s\n", scaled_tag());
    progress("transfer reference (minimal mover script)");
    double mover_cpu, mover_rate = mover_reference(n, &mover_cpu);
    progress("consumption reference (redis-benchmark LPOP)");
    double lpop_rate = lpop_reference(scaled(200000), 4 * DRAIN_CONC);
    out("   references: a minimal Lua mover (ZRANGEBYSCORE 100 + ZREM + RPUSH of the members, 1000 a\n"
        "   call, no payload) moves %" PRId64 " due 22-char members at %.0f/s, %.2f us Redis CPU each;\n"
        "   redis-benchmark LPOP (-c %d -P 1, 71-byte values) pops %.0f/s.\n",
        n, mover_rate, mover_cpu, 4 * DRAIN_CONC, lpop_rate);
    flushall();
    fill_due_backlog(CU_Q, n, "fill the due backlog");

    /* 5a: pure transfer, one scheduler process, no consumers. */
    reset_slots();
    rdo("SLOWLOG RESET");
    snap a, b;
    take_snap(&a);
    double t0 = mono();
    cons_args sa = {CU_Q, CONS_SCHED_ONLY, 0, 0};
    spawn_consumer(0, &sa);
    double max_ping = 0, next_z = t0, next_p = t0 + 2;
    long long left = n;
    while (left > 0 && mono() < t0 + 120) {
        double p0 = mono();
        redisReply *r = rcmd(ctl, "PING");
        freeReplyObject(r);
        double rtt = mono() - p0;
        if (rtt > max_ping) max_ping = rtt;
        if (mono() >= next_z) {
            left = pending_count(CU_Q);
            next_z = mono() + 0.02;
        }
        if (mono() > next_p) {
            next_p += 2;
            check_kids_failed(1);
            progress("pure transfer: %lld left", left);
        }
        usleep(5000);
    }
    double t_tr = mono() - t0;
    take_snap(&b);
    stop_kids();
    long long nslow = 0;
    long long slow = slowlog_max(DQ_LUA_transfer_FN, &nslow);
    double tr_calls = d_calls(&a, &b, "fcall"), tr_usec = d_usec(&a, &b, "fcall");
    double tr_rate = (double)n / t_tr, tr_cpu = d_cpu_us(&a, &b) / (double)n;
    long long ready_len = rint_cmd("LLEN %s", rl);
    out("   5a pure transfer (1 scheduler process: dq_schedule, default transfer_batch and\n"
        "      transfer_budget_us): %" PRId64
        " items moved in %.2f s = %.0f items/s (mover reference: %.0f/s)\n",
        n, t_tr, tr_rate, mover_rate);
    out("      transfer runs %.0f (%.0f items/run), mean run %.0f us (commandstats), longest %s%lld us\n"
        "      (SLOWLOG, %lld runs over 1 ms logged); longest PING round trip meanwhile %.2f ms\n"
        "      Redis CPU %.2f us per item moved (mover reference %.2f); ready list now %lld\n",
        tr_calls, (double)n / (tr_calls ? tr_calls : 1), tr_usec / (tr_calls ? tr_calls : 1),
        slow < 0 ? "< " : "", slow < 0 ? 1000 : slow, nslow, max_ping * 1000, tr_cpu, mover_cpu,
        ready_len);
    print_breakdown(&a, &b, (double)n, "item moved");
    print_core0(&a, &b);
    snprintf(ours, sizeof ours, "%.0f items/s", tr_rate);
    snprintf(ref, sizeof ref, "minimal mover: %.0f/s", mover_rate);
    snprintf(ratio, sizeof ratio, "%.2f", tr_rate / mover_rate);
    add_row("5", "catch-up: pure transfer rate", ours, ref, ratio, ">= 200,000/s", tr_rate >= 200000);
    snprintf(nt, sizeof nt, ">= %.0f/s", 200000 * f);
    row_norm(nt, tr_rate >= 200000 * f);
    snprintf(ours, sizeof ours, "%s%lld us", slow < 0 ? "< " : "", slow < 0 ? 1000 : slow);
    snprintf(ref, sizeof ref, "max PING RTT %.2f ms", max_ping * 1000);
    add_row("5", "catch-up: longest transfer script run", ours, ref, "-", "<= 5 ms", slow <= 5000);

    /* 5b: consumption of the ready list by library workers, 4 processes. */
    drain_res lib, bat;
    cons_args la = {CU_Q, CONS_WORKER, DRAIN_CONC, DQ_WORKER_NO_SCHEDULER};
    run_drain(&la, 4, (uint64_t)(ready_len / 2), 120, "consumption, dq_worker", &lib);
    out("   5b consumption only (the ready list; 4 processes, dq_worker with NO_SCHEDULER, %d in\n"
        "      flight each, takes and acks batched%s): %" PRIu64 " items in %.2f s = %.0f items/s\n"
        "      (LPOP reference %.0f/s), Redis CPU %.2f us per item\n",
        DRAIN_CONC, ", lease + ack", lib.got, lib.secs, (double)lib.got / lib.secs, lpop_rate,
        lib.cpu_item);
    print_breakdown(&lib.a, &lib.b, (double)(lib.got ? lib.got : 1), "item taken");
    print_core0(&lib.a, &lib.b);

    /* 5c: the rest with a batch take. */
    long long rest = rint_cmd("LLEN %s", rl);
    cons_args ba = {CU_Q, CONS_TAKE_MANY, 0, DQ_WORKER_NO_SCHEDULER};
    run_drain(&ba, 4, (uint64_t)rest, 120, "consumption, batch", &bat);
    out("   5c consumption only, batch take: %s, up to %d a call, 4 processes:\n"
        "      %" PRIu64 " items in %.2f s = %.0f items/s, Redis CPU %.2f us per item\n",
        "dq_take_many", TAKE_MANY_MAX, bat.got, bat.secs, (double)bat.got / bat.secs, bat.cpu_item);
    print_breakdown(&bat.a, &bat.b, (double)(bat.got ? bat.got : 1), "item taken");
    print_core0(&bat.a, &bat.b);

    /* 5d, 5e: end to end, each on a fresh backlog. */
    drain_res e2e, e2b;
    cons_args ea = {CU_Q, CONS_WORKER, DRAIN_CONC, 0};
    char how[160];
    snprintf(how, sizeof how,
             "5d end to end (fresh backlog; 4 processes, dq_worker with its scheduler, %d in\n"
             "      flight each)",
             DRAIN_CONC);
    double e2e_rate = end_to_end(&ea, n, 60, "dq_worker", how, &e2e);
    cons_args eb = {CU_Q, CONS_TAKE_MANY, 0, 0};
    snprintf(how, sizeof how,
             "5e end to end, batch take (fresh backlog; 4 processes, dq_schedule +\n"
             "      dq_take_many up to %d)",
             TAKE_MANY_MAX);
    double e2b_rate = end_to_end(&eb, n, 180, "dq_take_many", how, &e2b);
    out("   For scale: BullMQ drains about 20k jobs/s (brief's figure).\n");
    /* Both are judged against 100,000/s: the drain's target allows a batch
     * take (dq_take_many), and issue 10 holds dq_worker to it too. */
    snprintf(nt, sizeof nt, ">= %.0f/s", 100000 * f);
    snprintf(ours, sizeof ours, "%.0f items/s", e2e_rate);
    snprintf(ref, sizeof ref, "LPOP -c%d: %.0f/s", 4 * DRAIN_CONC, lpop_rate);
    snprintf(ratio, sizeof ratio, "%.2f", e2e_rate / lpop_rate);
    add_row("5", "end-to-end drain, 4 procs, dq_worker", ours, ref, ratio, ">= 100,000/s",
            e2e_rate >= 100000);
    row_norm(nt, e2e_rate >= 100000 * f);
    snprintf(ours, sizeof ours, "%.0f items/s", e2b_rate);
    snprintf(ratio, sizeof ratio, "%.2f", e2b_rate / lpop_rate);
    add_row("5", "end-to-end drain, 4 procs, dq_take_many", ours, ref, ratio, ">= 100,000/s",
            e2b_rate >= 100000);
    row_norm(nt, e2b_rate >= 100000 * f);
    snprintf(ours, sizeof ours, "%.0f items/s", (double)lib.got / lib.secs);
    snprintf(ratio, sizeof ratio, "%.2f", (double)lib.got / lib.secs / lpop_rate);
    add_row("5", "consumption only, 4 procs, dq_worker", ours, ref, ratio, "(info)", -1);
    snprintf(ours, sizeof ours, "%.0f items/s", (double)bat.got / bat.secs);
    snprintf(ratio, sizeof ratio, "%.2f", (double)bat.got / bat.secs / lpop_rate);
    add_row("5", "consumption only, 4 procs, dq_take_many", ours, ref, ratio, "(info)", -1);
    alternated(n);

    out("\n== Figure 2 (delivery side): Redis CPU per delivered item\n");
    out("   transfer %.2f us (5a) + take %.2f us (5b, dq_worker) = %.2f us per delivered item from a\n"
        "   backlog; with a batch take (5c) %.2f + %.2f = %.2f us; end to end %.2f us (5d)\n",
        tr_cpu, lib.cpu_item, tr_cpu + lib.cpu_item, tr_cpu, bat.cpu_item, tr_cpu + bat.cpu_item,
        e2e.cpu_item);
    snprintf(ours, sizeof ours, "%.2f us", tr_cpu + lib.cpu_item);
    snprintf(ref, sizeof ref, "mover %.2f + batch take %.2f", mover_cpu, bat.cpu_item);
    add_row("2", "Redis CPU per delivered item (5a+5b)", ours, ref, "-", "(no target)", -1);
    flushall();
}

/* Figure 5h: 5d and 5e alternated on one backlog (A B A B). Four dq_worker
 * processes and four dq_take_many processes share one backlog, and one side
 * runs while the other is stopped (SIGSTOP), in windows of ALT_WINDOW_S.
 * This host takes the CPU away for seconds at a time (BENCHMARKS.md): two
 * drains run a minute apart meet two different machines, and their ratio
 * swings from 0.5 to 1. Windows this short put both sides through the same
 * stalls. A side is credited with what its processes delivered, the time,
 * and the Redis CPU (used_cpu) of its own windows; the replies to its last
 * requests before a stop are counted when it resumes, in its next window.
 * The first window of each side (connecting, the catch-up) is not counted,
 * and the run stops at 90% delivered: near the end a side finds the ready
 * list empty and waits, which is not its speed. */
#define ALT_WINDOW_S 0.25
#define ALT_WINDOWS_MAX 2000

typedef struct alt_side {
    const char *name;
    int first, procs;      /* its children: slots and kids [first, first + procs) */
    uint64_t got;
    double secs, cpu_us, faults; /* faults: redis-server's minor page faults */
    int windows;
    double rate[ALT_WINDOWS_MAX]; /* items/s of each counted window */
} alt_side;

static uint64_t side_delivered(const alt_side *a) {
    uint64_t t = 0;
    for (int i = a->first; i < a->first + a->procs; i++)
        t += __atomic_load_n(&S->s[i].delivered, __ATOMIC_RELAXED);
    return t;
}

static void signal_side(const alt_side *a, int sig) {
    for (int i = a->first; i < a->first + a->procs; i++)
        if (kids[i] > 0) kill(kids[i], sig);
}

/* redis-server's minor page faults so far (/proc/PID/stat field 10), or 0:
 * kernel time inside a script that callgrind does not count. */
static double redis_faults(void) {
    static long pid;
    if (!pid) pid = (long)info_num("server", "process_id");
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    const char *p = strrchr(buf, ')'); /* fields 3.. follow the command name */
    unsigned long minflt = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %lu", &minflt) != 1) return 0;
    return (double)minflt;
}

/* One window of side a (the other stopped); counted unless warm_up. */
static void alt_window(alt_side *a, int warm_up) {
    uint64_t before = side_delivered(a);
    double cpu0 = server_cpu_s(), f0 = redis_faults(), t0 = mono();
    signal_side(a, SIGCONT);
    while (mono() < t0 + ALT_WINDOW_S) usleep(2000);
    signal_side(a, SIGSTOP);
    double dt = mono() - t0, cpu = 1e6 * (server_cpu_s() - cpu0), faults = redis_faults() - f0;
    uint64_t got = side_delivered(a) - before;
    if (warm_up || a->windows == ALT_WINDOWS_MAX) return;
    a->rate[a->windows++] = (double)got / dt;
    a->got += got, a->secs += dt, a->cpu_us += cpu, a->faults += faults;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static void alt_report(alt_side *a) {
    qsort(a->rate, (size_t)a->windows, sizeof a->rate[0], cmp_double);
    out("   %-30s %9" PRIu64 " items in %6.2f s of its %3d windows = %7.0f items/s, Redis CPU %5.2f us\n"
        "   %-30s per item, %.3f minor page faults of redis-server per item; windows min / median /\n"
        "   %-30s max %.0f / %.0f / %.0f items/s\n",
        a->name, a->got, a->secs, a->windows, (double)a->got / a->secs, a->cpu_us / (double)a->got, "",
        a->faults / (double)a->got, "", a->rate[0], a->rate[a->windows / 2], a->rate[a->windows - 1]);
}

static void alternated(int64_t n) {
    static alt_side side[2];
    side[0] = (alt_side){.name = "dq_worker, 32 in flight", .first = 0, .procs = 4};
    side[1] = (alt_side){.name = "dq_take_many, up to 64 a call", .first = 4, .procs = 4};
    flushall();
    fill_due_backlog(CU_Q, n, "fill a due backlog of the alternated drains (5h)");
    reset_slots();
    cons_args wa = {CU_Q, CONS_WORKER, DRAIN_CONC, 0}, ta = {CU_Q, CONS_TAKE_MANY, 0, 0};
    for (int i = 0; i < 8; i++) {
        spawn_consumer(i, i < 4 ? &wa : &ta);
        kill(kids[i], SIGSTOP);
    }
    uint64_t target = (uint64_t)n * 9 / 10;
    /* 120 s at most, and never into the reserve the later figures need. */
    double limit = remaining() - 90 < 120 ? remaining() - 90 : 120;
    double until = mono() + (limit > 15 ? limit : 15), next_p = mono() + 2;
    for (int k = 0; side[0].got + side[1].got < target && mono() < until; k++) {
        alt_window(&side[k % 2], k < 2);
        check_kids_failed(8);
        if (mono() > next_p) {
            next_p += 2;
            progress("alternated drains (5h): %" PRIu64 " of %" PRIu64, total_delivered(8), target);
        }
    }
    for (int i = 0; i < 8; i++) kill(kids[i], SIGCONT);
    stop_kids();
    flushall();
    if (!side[0].windows || !side[1].windows || !side[0].got || !side[1].got)
        die("alternated drains: a side delivered nothing in its windows");
    out("\n== Figure 5h: 5d and 5e alternated on one backlog of %" PRId64 "%s (A B A B in windows of\n"
        "   %.2f s, 4 processes a side, the other side stopped; to 90%% delivered)\n",
        n, scaled_tag(), ALT_WINDOW_S);
    alt_report(&side[0]);
    alt_report(&side[1]);
    double rw = (double)side[0].got / side[0].secs, rt = (double)side[1].got / side[1].secs;
    double cw = side[0].cpu_us / (double)side[0].got, ct = side[1].cpu_us / (double)side[1].got;
    out("   dq_worker / dq_take_many: %.2f by rate, %.2f by Redis CPU per item (figure 5f counts the\n"
        "   same ratio in instructions)\n",
        rw / rt, ct / cw);
    char ours[64], ref[64], ratio[16];
    snprintf(ours, sizeof ours, "%.0f items/s", rw);
    snprintf(ref, sizeof ref, "dq_take_many: %.0f/s", rt);
    snprintf(ratio, sizeof ratio, "%.2f", rw / rt);
    add_row("5h", "drains alternated: dq_worker", ours, ref, ratio, "(info)", -1);
}

/* One end-to-end drain counted in instructions (figure 5f): a fresh backlog
 * of n due items filled with the server's instrumentation off, then the
 * consumers of kind a from a zeroed count until all are delivered. Returns
 * the server's instructions per delivered item. */
static double drain_instructions(const cons_args *a, int64_t n, int64_t span_ms, const char *kind) {
    char label[96], err[4200];
    flushall();
    if (cg_control(G.cg_pid, "--instr=off") != 0) die("callgrind_control --instr=off failed");
    snprintf(label, sizeof label, "fill due backlog (instructions, %s)", kind);
    fill_due_within(a->queue, n, span_ms, label);
    if (cg_control(G.cg_pid, "--instr=on") != 0 || cg_control(G.cg_pid, "--zero") != 0)
        die("callgrind_control --instr=on / --zero failed");
    drain_res r;
    snprintf(label, sizeof label, "end-to-end drain under callgrind, %s", kind);
    run_drain(a, 4, (uint64_t)n, 300, label, &r);
    double ir = cg_instructions(G.cg_pid, G.cg_out, err, sizeof err);
    if (ir < 0) die("%s", err);
    if (r.got < (uint64_t)n)
        die("%s: %" PRIu64 " of %" PRId64 " delivered under callgrind", kind, r.got, n);
    return ir / (double)r.got;
}

/* Figure 5f: 5d and 5e counted in the instructions the server runs per
 * delivered item (run.sh phase ir: redis-server under callgrind), which the
 * machine's load does not move, where their timed rates move by a third from
 * run to run. Both drains are Redis-bound, so the rates go as one over these
 * counts: dq_worker's rate is dq_take_many's times their ratio. */
void phase_drain_ir(void) {
    if (!G.cg_pid) die("phase drainir needs --callgrind PID --callgrind-out FILE");
    int64_t n = 10000; /* fixed: under callgrind the server runs about 50 times slower */
    cons_args w32 = {CU_Q, CONS_WORKER, DRAIN_CONC, 0};
    cons_args w64 = {CU_Q, CONS_WORKER, 2 * DRAIN_CONC, 0};
    cons_args tm = {CU_Q, CONS_TAKE_MANY, 0, 0};
    double ir_w32 = drain_instructions(&w32, n, 1000, "dq_worker, 32 in flight");
    double ir_w64 = drain_instructions(&w64, n, 1000, "dq_worker, 64 in flight");
    double ir_tm = drain_instructions(&tm, n, 1000, "dq_take_many");
    /* And a burst: the same items all due in one millisecond (as figure 6,
     * and a backlog of a million due within a second, 1,000 a ms). */
    double ir_bw = drain_instructions(&w32, n, 1, "burst, dq_worker, 32 in flight");
    double ir_bt = drain_instructions(&tm, n, 1, "burst, dq_take_many");
    flushall();
    out("\n== Figure 5f: end-to-end drains in instructions (5d, 5e of %" PRId64 " items; redis-server\n"
        "   under valgrind --tool=callgrind: the instructions it ran per delivered item, from a zeroed\n"
        "   count when the consumers start to the last delivery; the backlog is filled uncounted)\n",
        n);
    out("   %-56s %10s %8s\n", "drain (4 processes, each with its scheduler)", "Ir/item", "vs 5e");
    out("   %-56s %10.0f %8.2f\n", "5d dq_worker, 32 in flight each (as 5d)", ir_w32, ir_tm / ir_w32);
    out("   %-56s %10.0f %8.2f\n", "5d dq_worker, 64 in flight each (5e's batch of 64)", ir_w64,
        ir_tm / ir_w64);
    out("   %-56s %10.0f %8.2f\n", "5e dq_take_many, up to 64 a call", ir_tm, 1.0);
    out("   the same %" PRId64 " items due in one millisecond (a burst):\n", n);
    out("   %-56s %10.0f %8.2f\n", "burst, dq_worker, 32 in flight each", ir_bw, ir_bt / ir_bw);
    out("   %-56s %10.0f %8.2f\n", "burst, dq_take_many, up to 64 a call", ir_bt, 1.0);
    out("   The drains are Redis-bound (core 0 busy throughout), so dq_worker's rate is about\n"
        "   dq_take_many's times the 'vs 5e' column, on any day: at the 168k/s 5e made on the day\n"
        "   of docs/measured.md's figures, %.0f items/s with 32 in flight, %.0f with 64.\n",
        168000 * ir_tm / ir_w32, 168000 * ir_tm / ir_w64);
}

/* Figure 5g: dq_worker's end-to-end drain taken apart by the clock. The
 * same drain (4 processes, each with its scheduler, a fresh backlog each)
 * by consumers that each do one part of what a worker does: a plain batch
 * take (5e's, at 64 and at the worker's 32 a call), a leased batch take
 * that never acks, and the worker itself at 32 and 64 in flight. Redis CPU
 * per item differences then price the ack (worker - leased take, same
 * batch), the lease (leased - plain take) and the batch size (32 - 64).
 * Not by default: six fills of a backlog take some minutes. */
void phase_parts(void) {
    int64_t n = scaled(500000);
    enum { W32, W64, L32, L64, P32, P64, NP };
    static const char *const names[NP] = {
        "dq_worker, 32 in flight (5d)",   "dq_worker, 64 in flight",   "dq_take_many 32, lease, no ack",
        "dq_take_many 64, lease, no ack", "dq_take_many 32, no lease", "dq_take_many 64, no lease (5e)"};
    const cons_args args[NP] = {{CU_Q, CONS_WORKER, 32, 0},      {CU_Q, CONS_WORKER, 64, 0},
                                {CU_Q, CONS_TAKE_LEASED, 32, 0}, {CU_Q, CONS_TAKE_LEASED, 64, 0},
                                {CU_Q, CONS_TAKE_MANY, 32, 0},   {CU_Q, CONS_TAKE_MANY, 64, 0}};
    /* Interleaved, so a machine that slows down part way moves them all. */
    static const int order[NP] = {P64, W32, L32, P32, W64, L64};
    double rate[NP], cpu[NP];
    out("\n== Figure 5g: dq_worker's drain taken apart by the clock%s (each a fresh backlog of %" PRId64
        ")\n",
        scaled_tag(), n);
    for (int k = 0; k < NP; k++) {
        int i = order[k];
        drain_res r;
        rate[i] = end_to_end(&args[i], n, 120, names[i], names[i], &r);
        cpu[i] = r.cpu_item;
    }
    out("\n   %-34s %12s %16s %8s\n", "drain (4 processes)", "items/s", "Redis CPU/item", "vs 5e");
    for (int i = 0; i < NP; i++)
        out("   %-34s %12.0f %13.2f us %8.2f\n", names[i], rate[i], cpu[i], rate[i] / rate[P64]);
    out("   Redis CPU per item, by difference: the ack %.2f us (32 a call), %.2f us (64); the lease\n"
        "   %+.2f us (32; a leased take leaves the id index alone); 32 a call instead of 64:\n"
        "   %+.2f us (plain take), %+.2f us (dq_worker).\n",
        cpu[W32] - cpu[L32], cpu[W64] - cpu[L64], cpu[L32] - cpu[P32], cpu[P32] - cpu[P64],
        cpu[W32] - cpu[W64]);
    flushall();
}
