/*
 * dqbench.c - `make bench`: delayq's throughput, Redis cost, memory and
 * lateness, each printed next to a reference measured in the same run on the
 * same redis-server, so the ratio holds on a noisy machine.
 *
 *   dqbench --port PORT [--scale X] [--only PHASES]
 *
 * bench/run.sh starts a private redis-server pinned to core 0 and runs this
 * program pinned to core 1 (every process it forks inherits the pinning).
 * PHASES is a comma list of: offer (figures 1, 2), spread (1r: one delay
 * against delays of their own, issue 42), mem (3, 4 at 1,000,000
 * pending), lat (4 at 100,000 pending, 7), backlog (5, with 5h: 5d and 5e
 * alternated on one backlog; 2), deadline (6), and, not by default, drainir (5f: the drains of 5d and 5e counted in the
 * server's instructions, with --callgrind PID --callgrind-out FILE naming a
 * redis-server that runs under valgrind's callgrind, as run.sh's phase ir
 * starts it) and parts (5g: dq_worker's drain taken apart by the clock).
 * --scale (or DQ_BENCH_SCALE) multiplies every item count and duration, for
 * a quick smoke run; anything but 1 is printed as SCALED next to each figure.
 *
 * Processes: the parent produces, watches and reads Redis's INFO; consumers,
 * schedulers and concurrent producers are forked children that talk to the
 * parent through one shared memory block (counters and histograms). Every
 * child uses only the public API of libdelayq (plus a hiredis connection for
 * the server-clock sample), except the "raw LPOP COUNT" consumer, which is
 * labelled as such: it shows what a batch take would do, which the library
 * does not offer yet.
 *
 * Redis figures come from INFO cpu (used_cpu_sys + used_cpu_user of the
 * server), INFO memory (used_memory), INFO commandstats and SLOWLOG. Every
 * reference is a redis-benchmark run (or a hiredis pipeline, for memory)
 * against the same server, in the same process placement.
 *
 * This file holds main, the run's header and its summary; bench.h says
 * where the rest lives.
 */
#include "bench.h"

static void print_header(void) {
    struct utsname u;
    uname(&u);
    char model[128] = "?";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "model name", 10) == 0) {
                char *p = strchr(line, ':');
                if (p) snprintf(model, sizeof model, "%s", p + 2);
                model[strcspn(model, "\n")] = '\0';
                break;
            }
        fclose(f);
    }
    char ver[32], pid[32];
    info_field("server", "redis_version", ver, sizeof ver);
    info_field("server", "process_id", pid, sizeof pid);
    char aff_redis[64] = "?";
    char path[64];
    snprintf(path, sizeof path, "/proc/%s/status", pid);
    f = fopen(path, "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "Cpus_allowed_list:", 18) == 0) {
                snprintf(aff_redis, sizeof aff_redis, "%.60s", line + 19);
                aff_redis[strcspn(aff_redis, "\n")] = '\0';
            }
        fclose(f);
    }
    cpu_set_t set;
    char aff_me[64] = "";
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int i = 0; i < CPU_SETSIZE && strlen(aff_me) < 50; i++)
            if (CPU_ISSET(i, &set))
                snprintf(aff_me + strlen(aff_me), sizeof aff_me - strlen(aff_me), "%s%d",
                         aff_me[0] ? "," : "", i);
    out("delayq benchmark (dqbench)\n");
    out("machine: %s, %ld online cores, %s %s %s\n", model, sysconf(_SC_NPROCESSORS_ONLN), u.sysname,
        u.release, u.machine);
    out("redis-server %s on 127.0.0.1:%d (pid %s, cores %s); clients on cores %s\n", ver, G.port, pid,
        aff_redis, aff_me);
    char la[64] = "?";
    f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(la, sizeof la, f)) la[0] = '\0';
        fclose(f);
        la[strcspn(la, "\n")] = '\0';
    }
    out("/proc/loadavg at start: %s (other work on this machine makes figures noisy; each timed\n"
        "window below reports how much of core 0 went to something other than redis-server)\n",
        la);
    out("libdelayq %s, hiredis %d.%d, libev %d.%d; scale %.3g%s\n", DQ_VERSION, HIREDIS_MAJOR,
        HIREDIS_MINOR, ev_version_major(), ev_version_minor(), G.scale,
        G.scale != 1 ? " (SCALED: figures are not the spec's)" : "");
}

static void print_summary(void) {
    if (nrows == 0) return; /* phase drainir alone judges nothing */
    out("\n== Summary%s\n", scaled_tag());
    if (factor > 0)
        out("   machine factor %.2f (a frozen offer-like script's rate here / the brief's 130k/s);\n"
            "   'normalized' judges targets in absolute units scaled by it.\n",
            factor);
    out("   %-3s %-46s %-16s %-30s %-7s %-14s %-6s %s\n", "fig", "figure", "ours", "reference", "ratio",
        "target", "result", "normalized");
    int miss = 0, nmiss = 0;
    for (int i = 0; i < nrows; i++) {
        row *r = &rows[i];
        char norm[64] = "";
        if (r->nverdict >= 0) snprintf(norm, sizeof norm, "%s (%s)", verdict_text(r->nverdict), r->norm);
        out("   %-3s %-46s %-16s %-30s %-7s %-14s %-6s %s\n", r->fig, r->what, r->ours, r->ref, r->ratio,
            r->target, verdict_text(r->verdict), norm);
        if (r->verdict == 0) miss++;
        if (r->nverdict == 0 || (r->nverdict < 0 && r->verdict == 0)) nmiss++;
    }
    out("   %d target(s) missed as stated; %d missed after normalizing absolute targets\n", miss, nmiss);
}

static unsigned parse_only(const char *s) {
    unsigned m = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (strcmp(tok, "offer") == 0) m |= PH_OFFER;
        else if (strcmp(tok, "mem") == 0) m |= PH_MEM;
        else if (strcmp(tok, "lat") == 0) m |= PH_LAT;
        else if (strcmp(tok, "backlog") == 0) m |= PH_BACKLOG;
        else if (strcmp(tok, "deadline") == 0) m |= PH_DEADLINE;
        else if (strcmp(tok, "drainir") == 0) m |= PH_DRAIN_IR;
        else if (strcmp(tok, "parts") == 0) m |= PH_PARTS;
        else if (strcmp(tok, "spread") == 0) m |= PH_SPREAD;
        else die("unknown phase '%s' (offer, spread, mem, lat, backlog, deadline, drainir, parts)", tok);
    }
    return m;
}

int main(int argc, char **argv) {
    G.scale = getenv("DQ_BENCH_SCALE") ? atof(getenv("DQ_BENCH_SCALE")) : 1.0;
    G.only = PH_OFFER | PH_SPREAD | PH_MEM | PH_LAT | PH_BACKLOG | PH_DEADLINE;
    G.rbench = getenv("REDIS_BENCHMARK") ? getenv("REDIS_BENCHMARK") : "redis-benchmark";
    G.budget = getenv("DQ_BENCH_BUDGET") ? atof(getenv("DQ_BENCH_BUDGET")) : 540;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) G.port = atoi(argv[++i]);
        else if (strcmp(argv[i], "--scale") == 0 && i + 1 < argc) G.scale = atof(argv[++i]);
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) G.only = parse_only(argv[++i]);
        else if (strcmp(argv[i], "--callgrind") == 0 && i + 1 < argc) G.cg_pid = atoi(argv[++i]);
        else if (strcmp(argv[i], "--callgrind-out") == 0 && i + 1 < argc) G.cg_out = argv[++i];
        else {
            fprintf(
                stderr,
                "usage: dqbench --port PORT [--scale X] [--only offer,spread,mem,lat,backlog,deadline,drainir,parts]\n"
                "               [--callgrind PID --callgrind-out FILE]\n");
            return 2;
        }
    }
    if (G.port <= 0 || G.port == 6379 || !(G.scale > 0) || (G.cg_pid > 0) != (G.cg_out != NULL)) {
        fprintf(
            stderr,
            "dqbench: need --port (not 6379), a positive scale, and --callgrind with --callgrind-out\n");
        return 2;
    }
    snprintf(G.url, sizeof G.url, "redis://127.0.0.1:%d", G.port);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
    rnd_seed((uint64_t)getpid() ^ (uint64_t)real_us());
    S = mmap(NULL, sizeof *S, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (S == MAP_FAILED) die("mmap: %s", strerror(errno));
    ctl = connect_sync();
    rdo("CONFIG SET slowlog-log-slower-than 1000");
    rdo("CONFIG SET slowlog-max-len 100000");
    print_header();
    P = dq_client_new(NULL, NULL);
    if (!P || dq_connect(P, G.url) != 0) die("dq_connect: %s", P ? dq_client_errstr(P) : "oom");
    G.t_start = mono();
    double t0 = G.t_start;
    if (G.only & PH_OFFER) phase_offer();
    if (G.only & PH_SPREAD) phase_offer_spread();
    if (G.only & PH_MEM) phase_mem();
    if (G.only & PH_LAT) phase_lat();
    if (G.only & PH_BACKLOG) phase_backlog();
    if (G.only & PH_DEADLINE) phase_deadline();
    if (G.only & PH_DRAIN_IR) phase_drain_ir();
    if (G.only & PH_PARTS) phase_parts();
    print_summary();
    out("\nbench time %.0f s\n", mono() - t0);
    dq_client_free(P);
    redisFree(ctl);
    return 0;
}
