/*
 * hist.h - the benchmark's log-bucketed latency histogram (microseconds).
 *
 * Values 0..15 us have a bucket each; above that every power of two (an
 * "octave") is split into HIST_SUB linear sub-buckets, so a bucket is at
 * most 1/16 (6.25 %) of its value wide. Percentiles are reported as the
 * upper bound of the bucket that holds them (never optimistic) and capped
 * at the exact maximum. Negative values (a receive time before the due
 * time, which only clock-offset error can produce) are counted apart and
 * reported as such, never folded into 0.
 *
 * Plain data with no pointers, so it lives in shared memory written by one
 * consumer process and read by the parent. Header-only (static inline): the
 * Makefile builds every C file of bench/ into its own program.
 */
#ifndef DQ_BENCH_HIST_H
#define DQ_BENCH_HIST_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define HIST_SUB 16 /* sub-buckets per octave (and values below 16 us) */
#define HIST_OCT 40 /* octaves from 16 us up: beyond 2^44 us = 200 days */
#define HIST_BUCKETS (HIST_SUB + HIST_OCT * HIST_SUB)

typedef struct hist {
    uint64_t n;   /* values recorded, negatives included            */
    uint64_t neg; /* of those, values below 0                       */
    int64_t min, max;
    double sum;
    uint64_t b[HIST_BUCKETS];
} hist;

static inline void hist_init(hist *h) {
    memset(h, 0, sizeof *h);
    h->min = INT64_MAX;
    h->max = INT64_MIN;
}

static inline int hist_index(int64_t v) {
    if (v < HIST_SUB) return (int)(v < 0 ? 0 : v);
    int e = 63 - __builtin_clzll((unsigned long long)v); /* >= 4 */
    int sub = (int)((v >> (e - 4)) & (HIST_SUB - 1));
    int i = HIST_SUB + (e - 4) * HIST_SUB + sub;
    return i < HIST_BUCKETS ? i : HIST_BUCKETS - 1;
}

/* Highest value that falls in bucket i. */
static inline int64_t hist_bucket_hi(int i) {
    if (i < HIST_SUB) return i;
    int e = (i - HIST_SUB) / HIST_SUB + 4, sub = (i - HIST_SUB) % HIST_SUB;
    return ((int64_t)(HIST_SUB + sub + 1) << (e - 4)) - 1;
}

static inline void hist_add(hist *h, int64_t v) {
    h->n++;
    h->sum += (double)v;
    if (v < h->min) h->min = v;
    if (v > h->max) h->max = v;
    if (v < 0) {
        h->neg++;
        return;
    }
    h->b[hist_index(v)]++;
}

static inline void hist_merge(hist *into, const hist *h) {
    into->n += h->n;
    into->neg += h->neg;
    into->sum += h->sum;
    if (h->n && h->min < into->min) into->min = h->min;
    if (h->n && h->max > into->max) into->max = h->max;
    for (int i = 0; i < HIST_BUCKETS; i++) into->b[i] += h->b[i];
}

/* The value at quantile q (0..1): negatives count as below every bucket. */
static inline int64_t hist_quantile(const hist *h, double q) {
    if (h->n == 0) return 0;
    uint64_t want = (uint64_t)((double)h->n * q + 0.5);
    if (want < 1) want = 1;
    if (want > h->n) want = h->n;
    uint64_t seen = h->neg;
    if (seen >= want) return h->min;
    for (int i = 0; i < HIST_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= want) {
            int64_t hi = hist_bucket_hi(i);
            return hi < h->max ? hi : h->max;
        }
    }
    return h->max;
}

/* Prints up to two histograms side by side, one row per octave (values in
 * milliseconds), from the first to the last non-empty row. */
static inline void hist_print2(FILE *f, const char *indent, const hist *a, const char *aname,
                               const hist *b, const char *bname) {
    enum { ROWS = HIST_OCT + 2 };
    uint64_t ca[ROWS] = {0}, cb[ROWS] = {0};
    /* row 0: negatives; row 1: 0..15 us; row 2+k: [16<<k, 32<<k) us */
    const hist *hs[2] = {a, b};
    uint64_t *cs[2] = {ca, cb};
    for (int k = 0; k < 2; k++) {
        if (!hs[k]) continue;
        cs[k][0] = hs[k]->neg;
        for (int i = 0; i < HIST_BUCKETS; i++) {
            int row = i < HIST_SUB ? 1 : 2 + (i - HIST_SUB) / HIST_SUB;
            cs[k][row] += hs[k]->b[i];
        }
    }
    int first = -1, last = -1;
    for (int r = 0; r < ROWS; r++)
        if (ca[r] || cb[r]) {
            if (first < 0) first = r;
            last = r;
        }
    if (first < 0) return;
    fprintf(f, "%s%-22s %12s %7s %7s", indent, "lateness (ms)", aname, "%", "cum%");
    if (b) fprintf(f, " %12s %7s %7s", bname, "%", "cum%");
    fprintf(f, "\n");
    uint64_t cuma = 0, cumb = 0;
    for (int r = first; r <= last; r++) {
        char range[40];
        if (r == 0) snprintf(range, sizeof range, "< 0");
        else if (r == 1) snprintf(range, sizeof range, "[0, 0.016)");
        else {
            double lo = (double)(16LL << (r - 2)) / 1000.0, hi = lo * 2;
            snprintf(range, sizeof range, "[%.3g, %.3g)", lo, hi);
        }
        cuma += ca[r];
        cumb += cb[r];
        double na = a->n ? (double)a->n : 1, nb = (b && b->n) ? (double)b->n : 1;
        fprintf(f, "%s%-22s %12llu %6.2f%% %6.2f%%", indent, range, (unsigned long long)ca[r],
                100.0 * (double)ca[r] / na, 100.0 * (double)cuma / na);
        if (b)
            fprintf(f, " %12llu %6.2f%% %6.2f%%", (unsigned long long)cb[r], 100.0 * (double)cb[r] / nb,
                    100.0 * (double)cumb / nb);
        fprintf(f, "\n");
    }
}

#endif
