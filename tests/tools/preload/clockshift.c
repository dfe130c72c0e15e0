/*
 * clockshift.c - an LD_PRELOAD shim that moves a program's wall clock.
 *
 * The tests put it under redis-server (LD_PRELOAD=.../clockshift.so
 * DQ_CLOCK_SHIFT_MS=60000 redis-server ...) to get a server whose clock is
 * off by that many ms, ahead (> 0) or behind (< 0): its TIME, and so every
 * due time and lease its scripts compute, moves with it. Only the wall
 * clock moves (gettimeofday, time, clock_gettime of CLOCK_REALTIME and its
 * coarse twin); the monotonic clocks Redis measures intervals with do not.
 * Built as a shared object (Makefile, PRELOAD_SO), without sanitizers.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

typedef int clock_gettime_fn(clockid_t, struct timespec *);
typedef int gettimeofday_fn(struct timeval *, void *);

static long long shift_ms(void)
{
    const char *v = getenv("DQ_CLOCK_SHIFT_MS");
    return v ? atoll(v) : 0;
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    static clock_gettime_fn *real;
    if (!real)
        real = (clock_gettime_fn *)dlsym(RTLD_NEXT, "clock_gettime");
    int rc = real(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        long long ns = (long long)ts->tv_nsec + shift_ms() % 1000 * 1000000;
        ts->tv_sec += (time_t)(shift_ms() / 1000 + (ns >= 1000000000) - (ns < 0));
        ts->tv_nsec = (long)((ns % 1000000000 + 1000000000) % 1000000000);
    }
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
    static gettimeofday_fn *real;
    if (!real)
        real = (gettimeofday_fn *)dlsym(RTLD_NEXT, "gettimeofday");
    int rc = real(tv, tz);
    if (rc == 0) {
        long long us = (long long)tv->tv_usec + shift_ms() % 1000 * 1000;
        tv->tv_sec += (time_t)(shift_ms() / 1000 + (us >= 1000000) - (us < 0));
        tv->tv_usec = (suseconds_t)((us % 1000000 + 1000000) % 1000000);
    }
    return rc;
}

time_t time(time_t *out)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
