/*
 * core0.h - how busy core 0 (where bench/run.sh pins redis-server) has been,
 * from /proc/stat, so a benchmark can tell how much of a window the server
 * shared its core with other work. Header-only (static inline): the
 * Makefile builds every C file of bench/ into its own program.
 */
#ifndef DQ_BENCH_CORE0_H
#define DQ_BENCH_CORE0_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Busy and total seconds of core 0 so far (/proc/stat); both 0 if it
 * cannot be read. */
static inline void core0_times(double *busy, double *total) {
    *busy = *total = 0;
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long long v[10] = {0};
        if (strncmp(line, "cpu0 ", 5) != 0) continue;
        sscanf(line + 5, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
               &v[5], &v[6], &v[7]);
        double hz = (double)sysconf(_SC_CLK_TCK), t = 0;
        for (int i = 0; i < 8; i++) t += (double)v[i];
        *total = t / hz;
        *busy = (t - (double)v[3] - (double)v[4]) / hz; /* minus idle and iowait */
        break;
    }
    fclose(f);
}

#endif
