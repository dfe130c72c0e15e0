/*
 * clockshift.c - an LD_PRELOAD shim that shifts a process's wall clock, for
 * tests of a redis-server whose clock jumps (tests/cli/reliability/clock_jump.py).
 *
 * Built as a shared object (Makefile: PRELOAD_SO, build/tests/tools/clockshift.so),
 * without sanitizers; tests/cli/ops/doctor.py uses it too.
 * CLOCKSHIFT_MS (a signed integer, read once) is added to every reading of
 * the wall clock the process makes through clock_gettime(CLOCK_REALTIME and
 * its coarse variant), gettimeofday and time; the monotonic clocks are left
 * alone, so the server's timers and timeouts run as before. Redis's TIME,
 * its key expiry and its RDB/AOF timestamps then read the shifted clock, as
 * they would on a host whose clock was set forward or back.
 * Self-contained: only libc (dlsym for the real calls).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

typedef int clock_gettime_fn(clockid_t, struct timespec *);
typedef int gettimeofday_fn(struct timeval *, void *);

static int64_t shift_ms(void) {
    static int64_t shift;
    static int read;
    if (!read) {
        const char *s = getenv("CLOCKSHIFT_MS");
        shift = s ? strtoll(s, NULL, 10) : 0;
        read = 1;
    }
    return shift;
}

static void shift_ts(struct timespec *ts) {
    int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + shift_ms() * 1000000;
    ts->tv_sec = (time_t)(ns / 1000000000);
    ts->tv_nsec = (long)(ns % 1000000000);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    static clock_gettime_fn *real;
    if (!real) real = (clock_gettime_fn *)dlsym(RTLD_NEXT, "clock_gettime");
    int rc = real(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift_ts(ts);
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
    tv->tv_sec = ts.tv_sec; /* never NULL: glibc declares it nonnull */
    tv->tv_usec = (suseconds_t)(ts.tv_nsec / 1000);
    if (tz) {
        static gettimeofday_fn *real;
        if (!real) real = (gettimeofday_fn *)dlsym(RTLD_NEXT, "gettimeofday");
        struct timeval ignored;
        return real(&ignored, tz);
    }
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
