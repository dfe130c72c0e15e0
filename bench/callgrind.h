/*
 * callgrind.h - counting what a redis-server running under valgrind's
 * callgrind executes (valgrind --tool=callgrind --callgrind-out-file=FILE
 * redis-server ...): callgrind_control zeroes the count, switches the
 * instrumentation off and on, and dumps; the dump's summary line is the
 * instructions (Ir) run since the zero. The same work gives the same count
 * to within a few %, whatever else the machine is doing, where timings on
 * a shared machine move by half. Header-only (static inline), like core0.h:
 * valbench and dqbench both use it.
 */
#ifndef DQ_BENCH_CALLGRIND_H
#define DQ_BENCH_CALLGRIND_H

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs callgrind_control OPTION on the server with pid; 0, or -1 if it
 * failed (the caller says so and stops). */
static inline int cg_control(int pid, const char *option) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, "callgrind_control %s %d >/dev/null 2>&1", option, pid);
    return system(cmd) == 0 ? 0 : -1;
}

/* The newest dump of out_file: out_file.<n> with the highest n (callgrind
 * numbers its dumps from 1 over the server's life); 0, or -1 if none. */
static inline int cg_newest_dump(const char *out_file, char *path, size_t size) {
    char pattern[4096];
    snprintf(pattern, sizeof pattern, "%s.*", out_file);
    glob_t g;
    long best = 0;
    if (glob(pattern, 0, NULL, &g) == 0) {
        size_t plen = strlen(out_file) + 1;
        for (size_t i = 0; i < g.gl_pathc; i++) {
            char *end;
            long n = strtol(g.gl_pathv[i] + plen, &end, 10);
            if (*end == '\0' && n > best) best = n;
        }
        globfree(&g);
    }
    if (best == 0) return -1;
    snprintf(path, size, "%s.%ld", out_file, best);
    return 0;
}

/* The instructions the server ran since the last zero: dumps them, reads
 * the dump's summary line and removes the dump (kept, for callgrind_annotate,
 * when DQ_CALLGRIND_KEEP is set). -1 on failure, with why in err. */
static inline double cg_instructions(int pid, const char *out_file, char *err, size_t errsize) {
    char path[4096];
    if (cg_control(pid, "--dump") != 0) {
        snprintf(err, errsize, "callgrind_control --dump %d failed", pid);
        return -1;
    }
    if (cg_newest_dump(out_file, path, sizeof path) != 0) {
        snprintf(err, errsize, "callgrind wrote no dump %s.*", out_file);
        return -1;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errsize, "%s: %s", path, strerror(errno));
        return -1;
    }
    char line[256];
    double ir = -1;
    while (ir < 0 && fgets(line, sizeof line, f))
        if (strncmp(line, "summary: ", 9) == 0) ir = atof(line + 9);
    fclose(f);
    if (!getenv("DQ_CALLGRIND_KEEP")) remove(path);
    if (ir < 0) snprintf(err, errsize, "%s: no summary line", path);
    return ir;
}

#endif
