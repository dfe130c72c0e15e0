/*
 * annotator.c - one annotator of the annotation demo (seeds/000).
 *
 * The pool of resources IS the delayq queue "annotation-pool": each free
 * resource is one ready item (id "r1", payload its description). So:
 *
 *   claim     = a reliable take (dq_take_many with a lease): the lease is this
 *               task's time limit, and max_attempts 0 means no limit (a
 *               resource must never become a dead letter).
 *   finish    = dq_nack(..., delay 0): the resource goes back to the pool.
 *   time out  = nothing to do: when the lease runs out, a scheduler (every
 *               annotator runs one for the pool, see idle()) puts the
 *               resource back in the ready list. No release task, no cron.
 *   too late  = the nack is refused (stale token): the resource has gone
 *               back, maybe to another annotator, and the work is discarded.
 *
 * "At most one resource per annotator" is this program's rule: it claims one,
 * ends that claim, and only then claims the next. "At most one annotator per
 * resource" is delayq's: an id is in one place at a time, and only the token
 * of the current lease can settle it.
 *
 * For the final check (annotate_pool check) each claim is also written to a
 * ledger of the demo's own, with plain hiredis (delayq does not need it):
 *   annot:claims  LIST  lease tokens, in claim order
 *   annot:claim   HASH  token -> "res who attempt take_ms lease_end limit work
 *                        plan ready_ms rel_start end_ms outcome"
 *   annot:last    HASH  resource -> token of its latest claim
 * Its times are the Redis server's: take_ms and lease_end come from
 * dq_lookup (the lease end is exactly the take's time plus the lease),
 * rel_start and end_ms from TIME just before and after the nack.
 *
 * usage: annotator URL NAME LIMIT WORK[,WORK...] ROUNDS [EXTEND]
 *   LIMIT  the time limit of each task (the lease): 2s, 1500ms, ...
 *   WORK   how long each task takes, or a comma list used round by round;
 *          longer than LIMIT = the annotator falls asleep
 *   ROUNDS how many tasks to do, one after the other
 *   EXTEND when a task runs long, ask for this much more time (dq_extend)
 *          once, at 2/3 of the limit
 * Exit: 0 done, 1 never got a resource, 2 usage, 3 Redis trouble.
 * Timeline lines are stamped relative to $DEMO_T0_MS (epoch ms).
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

#define QUEUE "annotation-pool"
#define MAX_ROUNDS 64
#define WAIT_FOR_FREE_MS 10000 /* give up a round after waiting this long */
#define BREAK_MS 250           /* pause between tasks */

/* Appends a claim to the ledger: KEYS claims list, claim hash, last hash;
 * ARGV token, record, resource. */
static const char LEDGER_CLAIM_LUA[] =
    "redis.call('RPUSH', KEYS[1], ARGV[1])\n"
    "redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])\n"
    "redis.call('HSET', KEYS[3], ARGV[3], ARGV[1])\n"
    "return 1\n";

/* ------------------------------------------------------------------ timeline */

static int64_t t0_ms;
static const char *me = "annotator";

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

/* One timeline line "[  2.503s] NAME      text", stamped at epoch ms `at`
 * (the Redis server's clock where we have it: same host, same clock). */
__attribute__((format(printf, 2, 3)))
static void say_at(int64_t at, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    printf("[%7.3fs] %-9s %s\n", (double)(at - t0_ms) / 1000.0, me, text);
    fflush(stdout);
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

/* A point in time on the timeline: "3.105s". */
static const char *fmt_at(char *buf, size_t len, int64_t at)
{
    snprintf(buf, len, "%.3fs", (double)(at - t0_ms) / 1000.0);
    return buf;
}

/* ------------------------------------------------------------------ the ledger */

struct claim {
    char res[DQ_ID_MAX + 1];
    char who[40];
    int attempt;            /* msg->attempt: how often delayq handed it out */
    int64_t take_ms;        /* server ms of the take                        */
    int64_t lease_end;      /* server ms; moves with dq_extend              */
    int64_t limit, work;    /* ms                                           */
    char plan[16];          /* "intime", "extend" or "overrun"              */
    int64_t ready_ms;       /* when the resource became free for this claim */
    int64_t rel_start;      /* server ms just before the nack, 0 before     */
    int64_t end_ms;         /* server ms just after it, 0 before            */
    char outcome[16];       /* "held", "releasing", "released", "refused"   */
};

static void claim_format(const struct claim *k, char *buf, size_t len)
{
    snprintf(buf, len, "%s %s %d %lld %lld %lld %lld %s %lld %lld %lld %s", k->res, k->who,
             k->attempt, (long long)k->take_ms, (long long)k->lease_end, (long long)k->limit,
             (long long)k->work, k->plan, (long long)k->ready_ms, (long long)k->rel_start,
             (long long)k->end_ms, k->outcome);
}

static int claim_parse(const char *text, struct claim *k)
{
    long long v[8];
    memset(k, 0, sizeof *k);
    int n = sscanf(text, "%128s %39s %d %lld %lld %lld %lld %15s %lld %lld %lld %15s", k->res,
                   k->who, &k->attempt, &v[0], &v[1], &v[2], &v[3], k->plan, &v[4], &v[5], &v[6],
                   k->outcome);
    k->take_ms = v[0], k->lease_end = v[1], k->limit = v[2], k->work = v[3];
    k->ready_ms = v[4], k->rel_start = v[5], k->end_ms = v[6];
    return n == 12 ? 0 : -1;
}

static redisContext *app_connect(const char *url)
{
    char host[256];
    int port = 6379;
    const char *p = url;
    if (strncmp(p, "redis://", 8) == 0)
        p += 8;
    size_t n = strcspn(p, ":/");
    if (n == 0 || n >= sizeof host) {
        fprintf(stderr, "annotator: bad URL '%s' (want redis://HOST:PORT)\n", url);
        return NULL;
    }
    memcpy(host, p, n);
    host[n] = '\0';
    if (p[n] == ':')
        port = atoi(p + n + 1);
    redisContext *r = redisConnectWithTimeout(host, port, (struct timeval){2, 0});
    if (r == NULL || r->err) {
        fprintf(stderr, "annotator: cannot connect to %s: %s\n", url,
                r ? r->errstr : "out of memory");
        redisFree(r);
        return NULL;
    }
    redisSetTimeout(r, (struct timeval){5, 0});
    return r;
}

/* The reply of a command that must succeed; NULL (and a message) if not. */
static redisReply *must(redisContext *r, redisReply *reply, const char *what)
{
    if (reply == NULL) {
        fprintf(stderr, "annotator %s: %s: %s\n", me, what, r->errstr);
        return NULL;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "annotator %s: %s: %s\n", me, what, reply->str);
        freeReplyObject(reply);
        return NULL;
    }
    return reply;
}

/* The Redis server's clock in ms, or -1. */
static int64_t server_ms(redisContext *r)
{
    redisReply *rep = must(r, redisCommand(r, "TIME"), "TIME");
    if (!rep)
        return -1;
    int64_t ms = -1;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2)
        ms = atoll(rep->element[0]->str) * 1000 + atoll(rep->element[1]->str) / 1000;
    freeReplyObject(rep);
    return ms;
}

static int ledger_claim(redisContext *r, const char *token, const struct claim *k)
{
    char rec[512];
    claim_format(k, rec, sizeof rec);
    redisReply *rep = must(r, redisCommand(r, "EVAL %s 3 annot:claims annot:claim annot:last %s %s %s",
                                           LEDGER_CLAIM_LUA, token, rec, k->res), "ledger");
    if (!rep)
        return -1;
    freeReplyObject(rep);
    return 0;
}

static int ledger_update(redisContext *r, const char *token, const struct claim *k)
{
    char rec[512];
    claim_format(k, rec, sizeof rec);
    redisReply *rep = must(r, redisCommand(r, "HSET annot:claim %s %s", token, rec), "ledger");
    if (!rep)
        return -1;
    freeReplyObject(rep);
    return 0;
}

/* Where resource res is now, by the ledger: "is dave's now (claim #4, since
 * 3.105s)", or "is free" if its latest claim is still our own. */
static void current_holder(redisContext *r, const char *res, const char *my_token, char *buf,
                           size_t len)
{
    snprintf(buf, len, "is free");
    redisReply *t = redisCommand(r, "HGET annot:last %s", res);
    if (t && t->type == REDIS_REPLY_STRING && strcmp(t->str, my_token) != 0) {
        redisReply *rec = redisCommand(r, "HGET annot:claim %s", t->str);
        struct claim k;
        char at[32];
        if (rec && rec->type == REDIS_REPLY_STRING && claim_parse(rec->str, &k) == 0)
            snprintf(buf, len, "is %s's now (claim #%d, since %s)", k.who, k.attempt,
                     fmt_at(at, sizeof at, k.take_ms));
        if (rec)
            freeReplyObject(rec);
    }
    if (t)
        freeReplyObject(t);
}

/* ------------------------------------------------------------------ delayq */

static void on_idle_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    dq_stop(t->data);
}

/* Waits ms while running the client's loop, so that this process's
 * scheduler for the pool keeps working: it is one of the processes that
 * return resources whose lease ran out. (A plain sleep would be fine for
 * the annotator itself, but its scheduler would sleep too.) */
static void idle(dq_client *c, int64_t ms)
{
    struct ev_loop *loop = dq_client_loop(c);
    ev_timer t;
    ev_now_update(loop);
    ev_timer_init(&t, on_idle_timer, (double)ms / 1000.0, 0);
    t.data = c;
    ev_timer_start(loop, &t);
    dq_run(c);
    ev_timer_stop(loop, &t);
}

/* The lease's end of a delivery we hold (server ms), or -1. */
static int64_t lease_end_of(dq_client *c, const char *id)
{
    dq_item_info info;
    int rc = dq_lookup(c, QUEUE, id, &info);
    if (rc < 0) {
        fprintf(stderr, "annotator %s: lookup: %s: %s\n", me, dq_strerror(rc), dq_client_errstr(c));
        return -1;
    }
    if (info.state != DQ_STATE_IN_FLIGHT) {
        fprintf(stderr, "annotator %s: %s is not in flight right after the take (state %d)\n",
                me, id, info.state);
        return -1;
    }
    return info.due_ms;
}

/* ------------------------------------------------------------------ main */

static int parse_work(const char *text, int64_t *out, int max)
{
    char buf[256];
    int n = 0;
    if (strlen(text) >= sizeof buf)
        return -1;
    strcpy(buf, text);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == max || dq_parse_duration(tok, &out[n]) < 0)
            return -1;
        n++;
    }
    return n > 0 ? n : -1;
}

int main(int argc, char **argv)
{
    int64_t limit = 0, extend = 0, work[MAX_ROUNDS];
    int nwork = -1, rounds = argc >= 6 ? atoi(argv[5]) : 0;
    if ((argc != 6 && argc != 7) || dq_parse_duration(argv[3], &limit) < 0 || limit <= 0 ||
        (nwork = parse_work(argv[4], work, MAX_ROUNDS)) < 0 || rounds < 1 ||
        rounds > MAX_ROUNDS || strlen(argv[2]) == 0 || strlen(argv[2]) > 32 ||
        strpbrk(argv[2], " \t") != NULL ||
        (argc == 7 && (dq_parse_duration(argv[6], &extend) < 0 || extend <= 0))) {
        fprintf(stderr, "usage: annotator URL NAME LIMIT WORK[,WORK...] ROUNDS [EXTEND]\n"
                        "  e.g. annotator redis://127.0.0.1:6379 bob 2s 800ms,3500ms 2\n");
        return 2;
    }
    init_t0();
    signal(SIGPIPE, SIG_IGN);
    const char *url = argv[1];
    me = argv[2];

    redisContext *app = app_connect(url);
    if (!app)
        return 3;
    dq_client *c = dq_client_new(NULL, NULL);
    if (!c) {
        redisFree(app);
        return 3;
    }
    int rc = dq_connect(c, url);
    if (rc < 0) {
        fprintf(stderr, "annotator %s: %s: %s\n", me, dq_strerror(rc), dq_client_errstr(c));
        goto fail;
    }
    /* Every annotator is also a scheduler of the pool: whichever of them is
     * around returns the resources whose lease ran out (delayq keeps many
     * schedulers of one queue out of each other's way). */
    rc = dq_schedule(c, QUEUE);
    if (rc < 0) {
        fprintf(stderr, "annotator %s: schedule: %s\n", me, dq_client_errstr(c));
        goto fail;
    }

    /* The claim: the lease is the task's time limit. max_attempts 0: no
     * limit, because every claim of a resource counts as an attempt and a
     * resource must never end up a dead letter. */
    dq_take_opts opts = {.lease_ms = limit, .max_attempts = 0};
    int claims = 0, finished = 0, discarded = 0;
    char b1[32], b2[32], b3[32], b4[32];
    for (int round = 1; round <= rounds; round++) {
        int64_t w = work[(round - 1) % nwork];
        dq_msg *msg = NULL;
        /* Timeout 0: whatever is free now. Else say so, then wait. */
        rc = dq_take_many(c, QUEUE, &opts, 0, &msg, 1);
        if (rc == 0) {
            say_at(wall_ms(), "no free resource: waits");
            rc = dq_take_many(c, QUEUE, &opts, WAIT_FOR_FREE_MS, &msg, 1);
        }
        if (rc < 0) {
            fprintf(stderr, "annotator %s: take: %s: %s\n", me, dq_strerror(rc),
                    dq_client_errstr(c));
            goto fail;
        }
        if (rc == 0) {
            say_at(wall_ms(), "gave up: no resource came free within %s",
                   fmt_dur(b1, sizeof b1, WAIT_FOR_FREE_MS));
            continue;
        }
        claims++;

        struct claim k = {.attempt = msg->attempt, .limit = limit, .work = w,
                          .ready_ms = msg->ready_ms};
        snprintf(k.res, sizeof k.res, "%s", msg->id);
        snprintf(k.who, sizeof k.who, "%s", me);
        snprintf(k.outcome, sizeof k.outcome, "held");
        int64_t extend_at = limit * 2 / 3;
        int extends = extend > 0 && w >= limit;
        if (w < limit)
            snprintf(k.plan, sizeof k.plan, "intime");
        else if (extends && w < extend_at + extend)
            snprintf(k.plan, sizeof k.plan, "extend");
        else
            snprintf(k.plan, sizeof k.plan, "overrun");
        k.lease_end = lease_end_of(c, msg->id);
        if (k.lease_end < 0)
            goto fail_msg;
        k.take_ms = k.lease_end - limit;
        if (ledger_claim(app, msg->token, &k) < 0)
            goto fail_msg;

        fmt_dur(b1, sizeof b1, limit);
        fmt_at(b2, sizeof b2, k.lease_end);
        fmt_dur(b3, sizeof b3, w);
        if (strcmp(k.plan, "intime") == 0)
            say_at(k.take_ms, "claimed %s (claim #%d of it): lease %s, until %s; works %s", msg->id,
                   msg->attempt, b1, b2, b3);
        else if (extends)
            say_at(k.take_ms, "claimed %s (claim #%d of it): lease %s, until %s; a long task "
                   "(%s)", msg->id, msg->attempt, b1, b2, b3);
        else
            say_at(k.take_ms, "claimed %s (claim #%d of it): lease %s, until %s ... and falls "
                   "asleep for %s", msg->id, msg->attempt, b1, b2, b3);

        /* Work. The client's loop runs meanwhile (see idle). */
        if (extends) {
            idle(c, extend_at);
            rc = dq_extend(c, QUEUE, msg->id, msg->token, extend);
            if (rc < 0) {
                fprintf(stderr, "annotator %s: extend: %s\n", me, dq_client_errstr(c));
                goto fail_msg;
            }
            if (rc == 1) {
                k.lease_end = lease_end_of(c, msg->id);
                if (k.lease_end < 0 || ledger_update(app, msg->token, &k) < 0)
                    goto fail_msg;
                say_at(wall_ms(), "still on %s at %s of its %s limit: asks for %s more "
                       "(dq_extend), lease now until %s", msg->id,
                       fmt_dur(b1, sizeof b1, extend_at), fmt_dur(b2, sizeof b2, limit),
                       fmt_dur(b3, sizeof b3, extend), fmt_at(b4, sizeof b4, k.lease_end));
            } else {
                say_at(wall_ms(), "asks for more time on %s: refused, the lease is gone",
                       msg->id);
            }
            idle(c, w - extend_at);
        } else {
            idle(c, w);
        }

        /* Give it back (the timeline stamps this at rel_start, which comes
         * before the nack and so before any next claim of the resource).
         * Why a nack with delay 0 and not ack + offer:
         *  - one script, so atomic: the id moves from in flight straight to
         *    the pool. With ack + offer the resource exists nowhere between
         *    the two calls, and a crash there loses it for good;
         *  - it presents the lease token, so a late annotator can never hand
         *    back a resource that has meanwhile gone to someone else (it
         *    gets 0, and nothing changes);
         *  - it keeps the id in Redis all along: the pool holds each
         *    resource exactly once, whatever happens.
         * The costs: every claim counts as an attempt (max_attempts 0, so
         * no limit), the "error" text is kept as the resource's last error,
         * and the resource passes through pending: a scheduler makes it
         * ready a few ms later, like a resource whose lease ran out. */
        k.rel_start = server_ms(app);
        snprintf(k.outcome, sizeof k.outcome, "releasing");
        if (k.rel_start < 0 || ledger_update(app, msg->token, &k) < 0)
            goto fail_msg;
        char note[64];
        snprintf(note, sizeof note, "released by %s", me);
        rc = dq_nack(c, QUEUE, msg->id, msg->token, 0, note);
        if (rc < 0 || rc == 2) {
            fprintf(stderr, "annotator %s: nack: %s\n", me,
                    rc == 2 ? "the resource became a dead letter" : dq_client_errstr(c));
            goto fail_msg;
        }
        k.end_ms = server_ms(app);
        snprintf(k.outcome, sizeof k.outcome, rc == 1 ? "released" : "refused");
        if (k.end_ms < 0 || ledger_update(app, msg->token, &k) < 0)
            goto fail_msg;
        fmt_dur(b1, sizeof b1, k.rel_start - k.take_ms);
        fmt_dur(b2, sizeof b2, limit);
        if (rc == 1) {
            finished++;
            if (k.lease_end - k.take_ms > limit)
                snprintf(b2 + strlen(b2), sizeof b2 - strlen(b2), ", extended");
            say_at(k.rel_start, "finished %s in %s (limit %s): nack(delay 0) accepted, %s back in "
                   "the pool", msg->id, b1, b2, msg->id);
        } else {
            discarded++;
            char holder[160];
            current_holder(app, msg->id, msg->token, holder, sizeof holder);
            say_at(k.rel_start, "wakes up after %s (limit %s): release REFUSED, stale token: the "
                   "lease ended at %s, %s went back to the pool and %s. Work discarded", b1, b2,
                   fmt_at(b3, sizeof b3, k.lease_end), msg->id, holder);
        }
        dq_msg_free(msg);
        if (round < rounds)
            idle(c, BREAK_MS);
        continue;
    fail_msg:
        dq_msg_free(msg);
        goto fail;
    }
    say_at(wall_ms(), "done: %d claim%s, %d finished in time, %d discarded", claims,
           claims == 1 ? "" : "s", finished, discarded);
    dq_client_free(c);
    redisFree(app);
    return claims > 0 ? 0 : 1;

fail:
    dq_client_free(c);
    redisFree(app);
    return 3;
}
