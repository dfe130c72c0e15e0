/*
 * annotate_pool.c - the resource pool service of the annotation demo.
 *
 * The use case (seeds/000): on a data-annotation platform each annotator
 * holds at most one resource at a time; every claim has its own time limit;
 * finishing in time cancels the release; running over the limit returns the
 * resource to the pool. The annotator (annotator.c) claims a resource and
 * offers a release task to the delay queue "annotation-release", due when its
 * limit runs out. This service runs a delayq worker on that queue and performs
 * the releases that come due.
 *
 * The pool itself is the application's own state, kept in Redis with plain
 * synchronous hiredis (delayq does not know about it):
 *   annot:free     SET   free resource ids ("r1" ...)
 *   annot:holder   HASH  resource -> claim id "r3:bob:1"
 *   annot:holding  HASH  annotator -> resource
 *   annot:stats    HASH  counters for the final check
 * A release is conditional on the claim id (RELEASE_LUA): releasing twice, or
 * releasing a claim that has ended, changes nothing. That is what makes the
 * race between "annotator finishes" and "deadline fires" harmless.
 *
 * usage: annotate_pool URL seed N      empty the pool keys, add r1..rN
 *        annotate_pool URL serve       run the release worker until SIGTERM
 *        annotate_pool URL check N     wait for the queue to drain, print a
 *                                      summary, exit 0 iff the invariants hold
 * URL is redis://HOST:PORT. Timeline lines are stamped relative to
 * $DEMO_T0_MS (epoch ms), else to the program's start.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ev.h>
#include <hiredis/hiredis.h>

#include "delayq.h"

#define QUEUE "annotation-release"
#define KEYS_4 "annot:free", "annot:holder", "annot:holding", "annot:stats"

/* Ends the claim ARGV[2] of resource ARGV[1] by annotator ARGV[3] and puts the
 * resource back in the free set, only if that claim still holds it. Counts
 * ARGV[4] on success, ARGV[4].."_stale" otherwise. Returns {1, ""} or
 * {0, current claim or ""}. Same text as in annotator.c. */
static const char RELEASE_LUA[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local cur = redis.call('HGET', KEYS[2], ARGV[1])\n"
    "if cur ~= ARGV[2] then\n"
    "  redis.call('HINCRBY', KEYS[4], ARGV[4] .. '_stale', 1)\n"
    "  return {0, cur or '', now}\n"
    "end\n"
    "redis.call('HDEL', KEYS[2], ARGV[1])\n"
    "if redis.call('HGET', KEYS[3], ARGV[3]) == ARGV[1] then\n"
    "  redis.call('HDEL', KEYS[3], ARGV[3])\n"
    "end\n"
    "if redis.call('SADD', KEYS[1], ARGV[1]) == 0 then\n"
    "  redis.call('HINCRBY', KEYS[4], 'violations', 1)\n"
    "end\n"
    "redis.call('HINCRBY', KEYS[4], ARGV[4], 1)\n"
    "return {1, '', now}\n";

/* ------------------------------------------------------------------ timeline */

static int64_t t0_ms;

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void init_t0(void)
{
    const char *s = getenv("DEMO_T0_MS");
    char *end = NULL;
    long long v = s ? strtoll(s, &end, 10) : 0;
    t0_ms = (s && end && *end == '\0' && v > 0) ? (int64_t)v : wall_ms();
}

/* One timeline line "[  2.503s] NAME      text", stamped at epoch ms `at`.
 * Pool changes are stamped with the Redis server's TIME from inside the
 * script that made them (same host, same clock), so the merged timeline
 * shows them in the order Redis applied them. */
__attribute__((format(printf, 2, 0)))
static void vsay(int64_t at, const char *fmt, va_list ap)
{
    char text[512];
    vsnprintf(text, sizeof text, fmt, ap);
    printf("[%7.3fs] %-9s %s\n", (double)(at - t0_ms) / 1000.0, "pool", text);
    fflush(stdout);
}

__attribute__((format(printf, 2, 3)))
static void say_at(int64_t at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(at, fmt, ap);
    va_end(ap);
}

__attribute__((format(printf, 1, 2)))
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(wall_ms(), fmt, ap);
    va_end(ap);
}

/* "2.0s", or "450ms" below a second. */
static const char *fmt_dur(char *buf, size_t len, int64_t ms)
{
    if (ms < 1000 && ms > -1000)
        snprintf(buf, len, "%lldms", (long long)ms);
    else
        snprintf(buf, len, "%.1fs", (double)ms / 1000.0);
    return buf;
}

/* ------------------------------------------------------------------ app state */

static redisContext *app_connect(const char *url)
{
    char host[256];
    int port = 6379;
    const char *p = url;
    if (strncmp(p, "redis://", 8) == 0)
        p += 8;
    size_t n = strcspn(p, ":/");
    if (n == 0 || n >= sizeof host) {
        fprintf(stderr, "annotate_pool: bad URL '%s' (want redis://HOST:PORT)\n", url);
        return NULL;
    }
    memcpy(host, p, n);
    host[n] = '\0';
    if (p[n] == ':')
        port = atoi(p + n + 1);
    struct timeval tv = {2, 0};
    redisContext *r = redisConnectWithTimeout(host, port, tv);
    if (r == NULL || r->err) {
        fprintf(stderr, "annotate_pool: cannot connect to %s: %s\n", url,
                r ? r->errstr : "out of memory");
        redisFree(r);
        return NULL;
    }
    redisSetTimeout(r, (struct timeval){5, 0});
    return r;
}

/* Runs a command that must succeed; NULL (and a message) otherwise. */
static redisReply *must(redisContext *r, redisReply *reply, const char *what)
{
    if (reply == NULL) {
        fprintf(stderr, "annotate_pool: %s: %s\n", what, r->errstr);
        return NULL;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "annotate_pool: %s: %s\n", what, reply->str);
        freeReplyObject(reply);
        return NULL;
    }
    return reply;
}

static long long stat_get(redisReply *all, const char *name)
{
    for (size_t i = 0; i + 1 < all->elements; i += 2)
        if (strcmp(all->element[i]->str, name) == 0)
            return atoll(all->element[i + 1]->str);
    return 0;
}

/* ------------------------------------------------------------------ seed */

static int cmd_seed(redisContext *r, int n)
{
    redisReply *rep = must(r, redisCommand(r, "DEL %s %s %s %s", KEYS_4), "DEL");
    if (!rep)
        return 3;
    freeReplyObject(rep);
    char list[256] = "";
    for (int i = 1; i <= n; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        rep = must(r, redisCommand(r, "SADD annot:free %s", id), "SADD");
        if (!rep)
            return 3;
        freeReplyObject(rep);
        size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s%s", i > 1 ? " " : "", id);
    }
    say("seeded with %d free resources: %s", n, list);
    return 0;
}

/* ------------------------------------------------------------------ serve */

struct service {
    redisContext *app;
    dq_client *dq;
    int64_t started_ms;   /* wall clock at start: releases due before were
                             caught up, not served on time                  */
    int failed;
};

/* The worker's handler: one release task came due. payload = "r3 bob 2000". */
static void on_release(dq_worker *w, dq_msg *msg, void *privdata)
{
    struct service *s = privdata;
    char res[64], who[64], buf1[32], buf2[32];
    long long limit = 0;
    if (sscanf(msg->payload, "%63s %63s %lld", res, who, &limit) != 3) {
        say("task %s: unreadable payload '%s', ignored", msg->id, (const char *)msg->payload);
        dq_worker_done(w, msg, 1);
        return;
    }
    redisReply *rep = must(s->app,
                           redisCommand(s->app, "EVAL %s 4 %s %s %s %s %s %s %s %s", RELEASE_LUA,
                                        KEYS_4, res, msg->id, who, "released_by_pool"),
                           "release");
    if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 3) {
        if (rep)
            freeReplyObject(rep);
        s->failed = 1;
        dq_worker_done(w, msg, 1);
        dq_stop(s->dq);
        return;
    }
    /* Both times are the Redis server's clock: how late the scheduler was. */
    int64_t late = msg->ready_ms - msg->due_ms;
    int64_t at = rep->element[2]->integer;
    fmt_dur(buf1, sizeof buf1, limit);
    fmt_dur(buf2, sizeof buf2, late);
    if (rep->element[0]->integer == 1) {
        if (msg->due_ms < s->started_ms) {
            redisReply *x = redisCommand(s->app, "HINCRBY annot:stats caught_up 1");
            if (x)
                freeReplyObject(x);
            say_at(at, "%s released: %s timed out (limit %s); due while this service was down, "
                "caught up %s late", res, who, buf1, buf2);
        } else
            say_at(at, "%s released: %s timed out (limit %s), fired %s after the deadline",
                res, who, buf1, buf2);
    } else {
        const char *now = rep->element[1]->str;
        say_at(at, "%s: %s's claim %s had already ended (%s), nothing to release", res, who,
            msg->id, now[0] ? "resource held by a new claim" : "resource already free");
    }
    freeReplyObject(rep);
    dq_worker_done(w, msg, 0);
}

static void on_signal(struct ev_loop *loop, ev_signal *sig, int revents)
{
    (void)loop;
    (void)revents;
    struct service *s = sig->data;
    say("service stopping (signal %d)", sig->signum);
    dq_stop(s->dq);
}

static int cmd_serve(redisContext *app, const char *url)
{
    struct service s = {.app = app, .started_ms = wall_ms()};
    s.dq = dq_client_new(NULL, NULL);
    if (!s.dq) {
        fprintf(stderr, "annotate_pool: out of memory\n");
        return 3;
    }
    int rc = dq_connect(s.dq, url);
    if (rc < 0) {
        fprintf(stderr, "annotate_pool: %s: %s\n", dq_strerror(rc), dq_client_errstr(s.dq));
        dq_client_free(s.dq);
        return 3;
    }
    dq_stats st;
    rc = dq_get_stats(s.dq, QUEUE, &st);
    if (rc < 0) {
        fprintf(stderr, "annotate_pool: stats: %s: %s\n", dq_strerror(rc), dq_client_errstr(s.dq));
        dq_client_free(s.dq);
        return 3;
    }
    long long waiting = (long long)(st.pending + st.ready);
    const char *tasks = waiting == 1 ? "task" : "tasks";
    if (waiting == 0)
        say("service up, worker on queue %s: no release tasks waiting", QUEUE);
    else if (st.next_due_in_ms == 0 || st.ready > 0)
        say("service up, worker on queue %s: %lld release %s waiting, the earliest "
            "overdue: catching up", QUEUE, waiting, tasks);
    else
        say("service up, worker on queue %s: %lld release %s waiting, the next due in %lldms",
            QUEUE, waiting, tasks, (long long)st.next_due_in_ms);

    dq_worker *w = dq_worker_start(s.dq, QUEUE, 1, 0, on_release, &s);
    if (!w) {
        fprintf(stderr, "annotate_pool: worker: %s\n", dq_client_errstr(s.dq));
        dq_client_free(s.dq);
        return 3;
    }
    struct ev_loop *loop = dq_client_loop(s.dq);
    ev_signal sigterm, sigint;
    ev_signal_init(&sigterm, on_signal, SIGTERM);
    ev_signal_init(&sigint, on_signal, SIGINT);
    sigterm.data = sigint.data = &s;
    ev_signal_start(loop, &sigterm);
    ev_signal_start(loop, &sigint);

    dq_run(s.dq);

    dq_worker_counters wc;
    dq_worker_get_counters(w, &wc);
    dq_worker_stop(w);
    ev_signal_stop(loop, &sigterm);
    ev_signal_stop(loop, &sigint);
    dq_client_free(s.dq);
    say("service stopped after handling %llu release task%s", (unsigned long long)wc.taken,
        wc.taken == 1 ? "" : "s");
    return s.failed ? 3 : 0;
}

/* ------------------------------------------------------------------ check */

static int cmd_check(redisContext *app, const char *url, int n)
{
    dq_client *dq = dq_client_new(NULL, NULL);
    if (!dq)
        return 3;
    int rc = dq_connect(dq, url);
    if (rc < 0) {
        fprintf(stderr, "annotate_pool: %s: %s\n", dq_strerror(rc), dq_client_errstr(dq));
        dq_client_free(dq);
        return 3;
    }
    /* Every timed-out claim's release must have been handled by the pool
     * (released or found stale); poll for that, bounded. */
    dq_stats st = {0};
    redisReply *stats = NULL;
    long long timed_out = 0, by_pool = 0, stale = 0;
    int64_t deadline = wall_ms() + 5000;
    for (;;) {
        if (stats)
            freeReplyObject(stats);
        stats = must(app, redisCommand(app, "HGETALL annot:stats"), "HGETALL");
        rc = dq_get_stats(dq, QUEUE, &st);
        if (!stats || rc < 0) {
            if (rc < 0)
                fprintf(stderr, "annotate_pool: stats: %s\n", dq_strerror(rc));
            if (stats)
                freeReplyObject(stats);
            dq_client_free(dq);
            return 3;
        }
        timed_out = stat_get(stats, "timed_out");
        by_pool = stat_get(stats, "released_by_pool");
        stale = stat_get(stats, "released_by_pool_stale");
        if ((st.pending == 0 && st.ready == 0 && by_pool + stale == timed_out) ||
            wall_ms() >= deadline)
            break;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    dq_client_free(dq);

    long long claims = stat_get(stats, "claims");
    long long finished = stat_get(stats, "finished");
    long long finished_late = stat_get(stats, "finished_late");
    long long by_annot = stat_get(stats, "late_release_by_annotator");
    long long violations = stat_get(stats, "violations");
    long long finished_stale = stat_get(stats, "finished_stale");
    freeReplyObject(stats);

    redisReply *fr = must(app, redisCommand(app, "SCARD annot:free"), "SCARD");
    redisReply *hr = must(app, redisCommand(app, "HLEN annot:holder"), "HLEN");
    redisReply *ar = must(app, redisCommand(app, "HLEN annot:holding"), "HLEN");
    if (!fr || !hr || !ar)
        return 3;
    long long nfree = fr->integer, held = hr->integer, holding = ar->integer;
    freeReplyObject(fr);
    freeReplyObject(hr);
    freeReplyObject(ar);

    long long caught_up = 0;
    {
        redisReply *x = must(app, redisCommand(app, "HGET annot:stats caught_up"), "HGET");
        if (x && x->type == REDIS_REPLY_STRING)
            caught_up = atoll(x->str);
        if (x)
            freeReplyObject(x);
    }
    printf("summary: %lld claims: %lld finished in time, %lld released by timeout\n", claims,
           finished, timed_out);
    printf("         timeouts: %lld released by the pool service (%lld caught up after its "
           "restart), %lld by the annotator waking up first\n", by_pool, caught_up, by_annot);
    if (finished_late)
        printf("         %lld finished past the limit before the release fired, so the work "
               "counted\n", finished_late);
    printf("         pool back to %lld/%d free, %lld held; queue %s: %lld pending, %lld ready, "
           "%lld set aside; %lld violations\n",
           nfree, n, held, QUEUE, (long long)st.pending, (long long)st.ready,
           (long long)st.set_aside, violations + finished_stale);

    int ok = 1;
#define EXPECT(cond, text)                                                                     \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            printf("FAILED: %s\n", text);                                                      \
            ok = 0;                                                                            \
        }                                                                                      \
    } while (0)
    EXPECT(nfree == n && held == 0 && holding == 0, "every resource is back in the pool");
    EXPECT(violations == 0, "no resource was ever held twice or freed twice");
    EXPECT(finished_stale == 0, "a release cancelled in time never fired");
    EXPECT(claims == finished + timed_out, "every claim ended exactly once");
    EXPECT(by_pool + by_annot == timed_out, "every timed-out claim was released once");
    EXPECT(by_pool + stale == timed_out, "every fired release task reached the pool service");
    EXPECT(st.pending == 0 && st.ready == 0 && st.set_aside == 0, "the delay queue is empty");
#undef EXPECT
    return ok ? 0 : 1;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    init_t0();
    if (argc < 3 || (strcmp(argv[2], "serve") != 0 && argc != 4)) {
        fprintf(stderr, "usage: annotate_pool URL seed N | serve | check N\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    const char *url = argv[1];
    int n = argc == 4 ? atoi(argv[3]) : 0;
    redisContext *app = app_connect(url);
    if (!app)
        return 3;
    int rc;
    if (strcmp(argv[2], "seed") == 0 && n > 0 && n <= 64)
        rc = cmd_seed(app, n);
    else if (strcmp(argv[2], "serve") == 0)
        rc = cmd_serve(app, url);
    else if (strcmp(argv[2], "check") == 0 && n > 0)
        rc = cmd_check(app, url, n);
    else {
        fprintf(stderr, "usage: annotate_pool URL seed N | serve | check N\n");
        rc = 2;
    }
    redisFree(app);
    return rc;
}
