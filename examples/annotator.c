/*
 * annotator.c - one annotator of the annotation demo (see annotate_pool.c).
 *
 * Each round: claim one free resource (atomically, CLAIM_LUA), offer a release
 * task to the delay queue "annotation-release" due after this claim's time
 * limit, work, then:
 *   - dq_cancel() says the task was still pending: the release never fired, so
 *     the work counts; the annotator returns the resource to the pool itself.
 *   - dq_cancel() says it was not pending: the deadline fired while the
 *     annotator was away ("fell asleep"); the work is discarded. It also tries
 *     the (conditional, idempotent) release itself, in case the pool service
 *     has not handled the fired task yet; whichever comes second is a no-op.
 *
 * usage: annotator URL NAME LIMIT WORK ROUNDS
 *   LIMIT  the time limit of each claim: 2s, 1500ms, ... (dq_parse_duration)
 *   WORK   how long each round takes, or a comma list used round by round
 *          ("800ms,3500ms"); longer than LIMIT = the annotator falls asleep
 *   ROUNDS how many resources to claim one after the other
 * Exit: 0 done, 1 never got a resource, 2 usage, 3 Redis trouble.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "delayq.h"

#define QUEUE "annotation-release"
#define KEYS_4 "annot:free", "annot:holder", "annot:holding", "annot:stats"
#define MAX_ROUNDS 64
#define WAIT_FOR_FREE_MS 10000 /* give up a round after waiting this long */
#define BREAK_MS 250           /* pause between rounds */

/* Takes a free resource for annotator ARGV[1], round ARGV[2]. Returns {claim
 * id "r3:bob:1", server time in ms}, or nil when the pool is empty. Refuses
 * (and counts a violation) if the annotator already holds one or the
 * resource popped from the free set has a holder. */
static const char CLAIM_LUA[] =
    "if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then\n"
    "  redis.call('HINCRBY', KEYS[4], 'violations', 1)\n"
    "  return redis.error_reply('annotator ' .. ARGV[1] .. ' already holds a resource')\n"
    "end\n"
    "local r = redis.call('SPOP', KEYS[1])\n"
    "if not r then return false end\n"
    "local claim = r .. ':' .. ARGV[1] .. ':' .. ARGV[2]\n"
    "if redis.call('HSETNX', KEYS[2], r, claim) == 0 then\n"
    "  redis.call('HINCRBY', KEYS[4], 'violations', 1)\n"
    "  return redis.error_reply('resource ' .. r .. ' was free and held at once')\n"
    "end\n"
    "redis.call('HSET', KEYS[3], ARGV[1], r)\n"
    "redis.call('HINCRBY', KEYS[4], 'claims', 1)\n"
    "local t = redis.call('TIME')\n"
    "return {claim, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}\n";

/* Same text as in annotate_pool.c: ends claim ARGV[2] of resource ARGV[1] by
 * ARGV[3] only if it still holds it; counts ARGV[4] (or ARGV[4].."_stale"). */
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

/* One timeline line "[  2.503s] NAME      text", stamped at epoch ms `at`.
 * Pool changes are stamped with the Redis server's TIME from inside the
 * script that made them (same host, same clock), so the merged timeline
 * shows them in the order Redis applied them. */
__attribute__((format(printf, 2, 0)))
static void vsay(int64_t at, const char *fmt, va_list ap)
{
    char text[512];
    vsnprintf(text, sizeof text, fmt, ap);
    printf("[%7.3fs] %-9s %s\n", (double)(at - t0_ms) / 1000.0, me, text);
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

static const char *fmt_dur(char *buf, size_t len, int64_t ms)
{
    if (ms < 1000 && ms > -1000)
        snprintf(buf, len, "%lldms", (long long)ms);
    else
        snprintf(buf, len, "%.1fs", (double)ms / 1000.0);
    return buf;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
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
        fprintf(stderr, "annotator: bad URL '%s' (want redis://HOST:PORT)\n", url);
        return NULL;
    }
    memcpy(host, p, n);
    host[n] = '\0';
    if (p[n] == ':')
        port = atoi(p + n + 1);
    struct timeval tv = {2, 0};
    redisContext *r = redisConnectWithTimeout(host, port, tv);
    if (r == NULL || r->err) {
        fprintf(stderr, "annotator: cannot connect to %s: %s\n", url,
                r ? r->errstr : "out of memory");
        redisFree(r);
        return NULL;
    }
    redisSetTimeout(r, (struct timeval){5, 0});
    return r;
}

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

/* Claims a resource, waiting up to WAIT_FOR_FREE_MS. Returns 1 and fills
 * claim_id, res, *waited (ms) and *at (server ms of the claim), 0 if none
 * came free, -1 on error. */
static int claim(redisContext *r, int round, char *claim_id, size_t claim_len, char *res,
                 size_t res_len, int64_t *waited, int64_t *at)
{
    char rbuf[16];
    snprintf(rbuf, sizeof rbuf, "%d", round);
    int64_t start = wall_ms();
    int said = 0;
    for (;;) {
        redisReply *rep = must(r, redisCommand(r, "EVAL %s 4 %s %s %s %s %s %s", CLAIM_LUA,
                                               KEYS_4, me, rbuf), "claim");
        if (!rep)
            return -1;
        if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
            rep->element[0]->type == REDIS_REPLY_STRING) {
            const char *id = rep->element[0]->str;
            snprintf(claim_id, claim_len, "%s", id);
            snprintf(res, res_len, "%.*s", (int)strcspn(id, ":"), id);
            *at = rep->element[1]->integer;
            freeReplyObject(rep);
            *waited = said ? *at - start : 0;
            return 1;
        }
        freeReplyObject(rep);
        if (!said) {
            say("no free resource, waiting");
            said = 1;
        }
        if (wall_ms() - start >= WAIT_FOR_FREE_MS)
            return 0;
        sleep_ms(50);
    }
}

/* Runs RELEASE_LUA; returns 1 released, 0 stale (cur gets the current claim
 * or ""), -1 error. *at: the server ms of the release. */
static int release(redisContext *r, const char *res, const char *claim_id, const char *counter,
                   char *cur, size_t cur_len, int64_t *at)
{
    redisReply *rep = must(r, redisCommand(r, "EVAL %s 4 %s %s %s %s %s %s %s %s", RELEASE_LUA,
                                           KEYS_4, res, claim_id, me, counter), "release");
    if (!rep)
        return -1;
    int ok = rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 ? (int)rep->element[0]->integer
                                                                   : -1;
    if (ok >= 0) {
        snprintf(cur, cur_len, "%s", rep->element[1]->str);
        *at = rep->element[2]->integer;
    }
    freeReplyObject(rep);
    return ok;
}

static int stat_incr(redisContext *r, const char *field)
{
    redisReply *rep = must(r, redisCommand(r, "HINCRBY annot:stats %s 1", field), "HINCRBY");
    if (!rep)
        return -1;
    freeReplyObject(rep);
    return 0;
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
    int64_t limit, work[MAX_ROUNDS];
    int nwork = -1, rounds = argc == 6 ? atoi(argv[5]) : 0;
    if (argc != 6 || dq_parse_duration(argv[3], &limit) < 0 || limit <= 0 ||
        (nwork = parse_work(argv[4], work, MAX_ROUNDS)) < 0 || rounds < 1 ||
        rounds > MAX_ROUNDS || strlen(argv[2]) == 0 || strlen(argv[2]) > 32 ||
        strpbrk(argv[2], ": \t") != NULL) {
        fprintf(stderr, "usage: annotator URL NAME LIMIT WORK[,WORK...] ROUNDS\n"
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
    dq_client *dq = dq_client_new(NULL, NULL);
    if (!dq) {
        redisFree(app);
        return 3;
    }
    int rc = dq_connect(dq, url);
    if (rc < 0) {
        fprintf(stderr, "annotator %s: %s: %s\n", me, dq_strerror(rc), dq_client_errstr(dq));
        goto fail;
    }

    int got_any = 0;
    for (int round = 1; round <= rounds; round++) {
        char claim_id[128], res[64], cur[128], b1[32], b2[32], waited[48] = "";
        int64_t w = work[(round - 1) % nwork], waited_ms, at;
        rc = claim(app, round, claim_id, sizeof claim_id, res, sizeof res, &waited_ms, &at);
        if (rc < 0)
            goto fail;
        if (rc == 0) {
            say("gave up: no resource came free within %s",
                fmt_dur(b1, sizeof b1, WAIT_FOR_FREE_MS));
            continue;
        }
        got_any = 1;
        int64_t claimed_at = at;

        /* The release task: id = claim id, payload = "r3 bob 2000". */
        char payload[160];
        snprintf(payload, sizeof payload, "%s %s %lld", res, me, (long long)limit);
        dq_item item = {.id = claim_id, .payload = payload, .payload_len = strlen(payload),
                        .delay_ms = limit};
        dq_offer_result offered;
        rc = dq_offer(dq, QUEUE, &item, &offered);
        if (rc < 0) {
            fprintf(stderr, "annotator %s: offer: %s: %s\n", me, dq_strerror(rc),
                    dq_client_errstr(dq));
            goto fail;
        }
        fmt_dur(b1, sizeof b1, limit);
        if (waited_ms > 0)
            snprintf(waited, sizeof waited, " after waiting %s",
                     fmt_dur(b2, sizeof b2, waited_ms));
        fmt_dur(b2, sizeof b2, w);
        if (w > limit)
            say_at(at, "claimed %s%s (task %s, limit %s) ... and falls asleep for %s", res,
                   waited, claim_id, b1, b2);
        else
            say_at(at, "claimed %s%s (task %s, limit %s), works %s", res, waited, claim_id, b1,
                   b2);

        sleep_ms(w);

        int64_t now = wall_ms(), took = now - claimed_at;
        fmt_dur(b2, sizeof b2, took);
        rc = dq_cancel(dq, QUEUE, claim_id);
        if (rc < 0) {
            fprintf(stderr, "annotator %s: cancel: %s: %s\n", me, dq_strerror(rc),
                    dq_client_errstr(dq));
            goto fail;
        }
        if (rc == 1) {
            /* The release never fired: the work counts, and the resource is
             * still ours to give back. */
            int late = now > offered.due_ms;
            if (release(app, res, claim_id, "finished", cur, sizeof cur, &at) < 0 ||
                (late && stat_incr(app, "finished_late") < 0))
                goto fail;
            if (late)
                say_at(at, "finished %s in %s, past the %s limit, but the release had not "
                           "fired yet: cancelled it, %s back in the pool", res, b2, b1, res);
            else
                say_at(at, "finished %s in %s (limit %s): release cancelled, %s back in the pool",
                       res, b2, b1, res);
        } else {
            /* The deadline fired: the pool service takes the resource back
             * (or has already); doing it here too is harmless. */
            if (stat_incr(app, "timed_out") < 0)
                goto fail;
            rc = release(app, res, claim_id, "late_release_by_annotator", cur, sizeof cur, &at);
            if (rc < 0)
                goto fail;
            if (rc == 1)
                say_at(at, "woke up after %s (limit %s): the release had fired; gave %s back "
                           "myself, work discarded", b2, b1, res);
            else if (cur[0])
                say_at(at, "woke up after %s (limit %s): too late, %s was taken back (now "
                           "claim %s); work discarded", b2, b1, res, cur);
            else
                say_at(at, "woke up after %s (limit %s): too late, %s was taken back; work "
                           "discarded", b2, b1, res);
        }
        if (round < rounds)
            sleep_ms(BREAK_MS);
    }
    say("done");
    dq_client_free(dq);
    redisFree(app);
    return got_any ? 0 : 1;

fail:
    dq_client_free(dq);
    redisFree(app);
    return 3;
}
