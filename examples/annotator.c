/*
 * annotator.c - one annotator of the annotation demo (seeds/000).
 *
 * The pool of resources IS the delayq queue "annotation-pool": each free
 * resource is one ready item (id "r1", payload its description). So:
 *
 *   claim     = a reliable take (dq_take_many with a lease, naming the
 *               annotator its holder): the lease is this task's time
 *               limit, and max_attempts 0 means no limit (a resource must
 *               never become a dead letter, not even one whose holders
 *               keep running out of time).
 *   finish    = dq_release: the resource goes back to the pool, ready at
 *               once, and the claim counts as no attempt.
 *   time out  = nothing to do: when the lease runs out, a scheduler (every
 *               annotator runs one for the pool, see idle() in
 *               annotate_common.h) puts the resource back in the ready
 *               list. No release task, no cron.
 *   too late  = the release is refused (stale token): the resource has gone
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
 *   annot:claim   HASH  token -> "res who nclaim take_ms lease_end limit work
 *                        plan ready_ms rel_start end_ms outcome"
 *   annot:last    HASH  resource -> token of its latest claim
 *   annot:nclaim  HASH  resource -> how many claims it has had (the claim
 *                       numbers of the timeline: delayq's attempt number
 *                       counts no released claim)
 * Its times are the Redis server's: take_ms and lease_end come from
 * dq_lookup (the lease end is exactly the take's time plus the lease),
 * rel_start and end_ms from TIME just before and after the release.
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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "annotate_common.h"
#include "delayq.h"

#define QUEUE "annotation-pool"
#define MAX_ROUNDS 64
#define WAIT_FOR_FREE_MS 10000 /* give up a round after waiting this long */
#define BREAK_MS 250           /* pause between tasks */

/* Appends a claim to the ledger: KEYS claims list, claim hash, last hash;
 * ARGV token, record, resource. */
static const char LEDGER_CLAIM_LUA[] = "redis.call('RPUSH', KEYS[1], ARGV[1])\n"
                                       "redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])\n"
                                       "redis.call('HSET', KEYS[3], ARGV[3], ARGV[1])\n"
                                       "return 1\n";

static const char *me = "annotator"; /* this annotator's name (argv[2]) */

/* ------------------------------------------------------------------ the ledger */

/* The next claim number of resource res, or -1. */
static int ledger_number(redisContext *r, const char *res) {
    redisReply *rep = must(r, redisCommand(r, "HINCRBY annot:nclaim %s 1", res), "ledger");
    if (!rep) return -1;
    int n = rep->type == REDIS_REPLY_INTEGER ? (int)rep->integer : -1;
    freeReplyObject(rep);
    return n;
}

static int ledger_claim(redisContext *r, const char *token, const struct claim *k) {
    char rec[512];
    claim_format(k, rec, sizeof rec);
    redisReply *rep = must(r,
                           redisCommand(r, "EVAL %s 3 annot:claims annot:claim annot:last %s %s %s",
                                        LEDGER_CLAIM_LUA, token, rec, k->res),
                           "ledger");
    if (!rep) return -1;
    freeReplyObject(rep);
    return 0;
}

static int ledger_update(redisContext *r, const char *token, const struct claim *k) {
    char rec[512];
    claim_format(k, rec, sizeof rec);
    redisReply *rep = must(r, redisCommand(r, "HSET annot:claim %s %s", token, rec), "ledger");
    if (!rep) return -1;
    freeReplyObject(rep);
    return 0;
}

/* Where resource res is now, by the ledger: "is dave's now (claim #4, since
 * 3.105s)", or "is free" if its latest claim is still our own. */
static void current_holder(redisContext *r, const char *res, const char *my_token, char *buf,
                           size_t len) {
    snprintf(buf, len, "is free");
    redisReply *t = redisCommand(r, "HGET annot:last %s", res);
    if (t && t->type == REDIS_REPLY_STRING && strcmp(t->str, my_token) != 0) {
        redisReply *rec = redisCommand(r, "HGET annot:claim %s", t->str);
        struct claim k;
        char at[32];
        if (rec && rec->type == REDIS_REPLY_STRING && claim_parse(rec->str, &k) == 0)
            snprintf(buf, len, "is %s's now (claim #%d, since %s)", k.who, k.nclaim,
                     fmt_at(at, sizeof at, k.take_ms));
        if (rec) freeReplyObject(rec);
    }
    if (t) freeReplyObject(t);
}

/* ------------------------------------------------------------------ delayq */

/* The lease's end of a delivery we hold (server ms), or -1. */
static int64_t lease_end_of(dq_client *c, const char *id) {
    dq_item_info info;
    int rc = dq_lookup(c, QUEUE, id, &info);
    if (rc < 0) {
        fprintf(stderr, "annotator %s: lookup: %s: %s\n", me, dq_strerror(rc), dq_client_errstr(c));
        return -1;
    }
    if (info.state != DQ_STATE_IN_FLIGHT) {
        fprintf(stderr, "annotator %s: %s is not in flight right after the take (state %d)\n", me, id,
                info.state);
        return -1;
    }
    /* The take named us its holder: anyone's dq_lookup (or 'delayq lookup')
     * says who holds the resource while the lease lasts. */
    if (strcmp(info.holder, me) != 0) {
        fprintf(stderr, "annotator %s: %s's holder is '%s', not us\n", me, id, info.holder);
        return -1;
    }
    return info.due_ms;
}

/* ------------------------------------------------------------------ main */

static int parse_work(const char *text, int64_t *out, int max) {
    char buf[256];
    int n = 0;
    if (strlen(text) >= sizeof buf) return -1;
    strcpy(buf, text);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == max || dq_parse_duration(tok, &out[n]) < 0) return -1;
        n++;
    }
    return n > 0 ? n : -1;
}

int main(int argc, char **argv) {
    int64_t limit = 0, extend = 0, work[MAX_ROUNDS];
    int nwork = -1, rounds = argc >= 6 ? atoi(argv[5]) : 0;
    if ((argc != 6 && argc != 7) || dq_parse_duration(argv[3], &limit) < 0 || limit <= 0 ||
        (nwork = parse_work(argv[4], work, MAX_ROUNDS)) < 0 || rounds < 1 || rounds > MAX_ROUNDS ||
        strlen(argv[2]) == 0 || strlen(argv[2]) > 32 || strpbrk(argv[2], " \t") != NULL ||
        (argc == 7 && (dq_parse_duration(argv[6], &extend) < 0 || extend <= 0))) {
        fprintf(stderr, "usage: annotator URL NAME LIMIT WORK[,WORK...] ROUNDS [EXTEND]\n"
                        "  e.g. annotator redis://127.0.0.1:6379 bob 2s 800ms,3500ms 2\n");
        return 2;
    }
    init_t0();
    signal(SIGPIPE, SIG_IGN);
    const char *url = argv[1];
    me = argv[2];
    tl_who = me;
    snprintf(err_who, sizeof err_who, "annotator %s", me);

    redisContext *app = app_connect(url, "annotator");
    if (!app) return 3;
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
     * limit, because a claim whose lease runs out counts as an attempt and
     * a resource must never end up a dead letter. */
    dq_take_opts opts = {.lease_ms = limit, .max_attempts = 0, .holder = me};
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
            fprintf(stderr, "annotator %s: take: %s: %s\n", me, dq_strerror(rc), dq_client_errstr(c));
            goto fail;
        }
        if (rc == 0) {
            say_at(wall_ms(), "gave up: no resource came free within %s",
                   fmt_dur(b1, sizeof b1, WAIT_FOR_FREE_MS));
            continue;
        }
        claims++;

        struct claim k = {
            .nclaim = ledger_number(app, msg->id), .limit = limit, .work = w, .ready_ms = msg->ready_ms};
        if (k.nclaim < 0) goto fail_msg;
        snprintf(k.res, sizeof k.res, "%s", msg->id);
        snprintf(k.who, sizeof k.who, "%s", me);
        snprintf(k.outcome, sizeof k.outcome, "held");
        int64_t extend_at = limit * 2 / 3;
        int extends = extend > 0 && w >= limit;
        if (w < limit) snprintf(k.plan, sizeof k.plan, "intime");
        else if (extends && w < extend_at + extend) snprintf(k.plan, sizeof k.plan, "extend");
        else snprintf(k.plan, sizeof k.plan, "overrun");
        k.lease_end = lease_end_of(c, msg->id);
        if (k.lease_end < 0) goto fail_msg;
        k.take_ms = k.lease_end - limit;
        if (ledger_claim(app, msg->token, &k) < 0) goto fail_msg;

        fmt_dur(b1, sizeof b1, limit);
        fmt_at(b2, sizeof b2, k.lease_end);
        fmt_dur(b3, sizeof b3, w);
        if (strcmp(k.plan, "intime") == 0)
            say_at(k.take_ms, "claimed %s (claim #%d of it): lease %s, until %s; works %s", msg->id,
                   k.nclaim, b1, b2, b3);
        else if (extends)
            say_at(k.take_ms,
                   "claimed %s (claim #%d of it): lease %s, until %s; a long task "
                   "(%s)",
                   msg->id, k.nclaim, b1, b2, b3);
        else
            say_at(k.take_ms,
                   "claimed %s (claim #%d of it): lease %s, until %s ... and falls "
                   "asleep for %s",
                   msg->id, k.nclaim, b1, b2, b3);

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
                if (k.lease_end < 0 || ledger_update(app, msg->token, &k) < 0) goto fail_msg;
                say_at(wall_ms(),
                       "still on %s at %s of its %s limit: asks for %s more "
                       "(dq_extend), lease now until %s",
                       msg->id, fmt_dur(b1, sizeof b1, extend_at), fmt_dur(b2, sizeof b2, limit),
                       fmt_dur(b3, sizeof b3, extend), fmt_at(b4, sizeof b4, k.lease_end));
            } else {
                say_at(wall_ms(), "asks for more time on %s: refused, the lease is gone", msg->id);
            }
            idle(c, w - extend_at);
        } else {
            idle(c, w);
        }

        /* Give it back (the timeline stamps this at rel_start, which comes
         * before the release and so before any next claim of the resource).
         * Why a release and not ack + offer:
         *  - one script, so atomic: the id moves from in flight straight to
         *    the pool. With ack + offer the resource exists nowhere between
         *    the two calls, and a crash there loses it for good;
         *  - it presents the lease token, so a late annotator can never hand
         *    back a resource that has meanwhile gone to someone else (it
         *    gets 0, and nothing changes);
         *  - it keeps the id in Redis all along: the pool holds each
         *    resource exactly once, whatever happens.
         * And not a nack: a release counts the claim as no attempt and
         * records no error. The resource passes through pending, due at
         * once: a scheduler makes it ready a few ms later, like a resource
         * whose lease ran out. */
        k.rel_start = server_ms(app);
        snprintf(k.outcome, sizeof k.outcome, "releasing");
        if (k.rel_start < 0 || ledger_update(app, msg->token, &k) < 0) goto fail_msg;
        rc = dq_release(c, QUEUE, msg->id, msg->token, 0);
        if (rc < 0) {
            fprintf(stderr, "annotator %s: release: %s\n", me, dq_client_errstr(c));
            goto fail_msg;
        }
        k.end_ms = server_ms(app);
        snprintf(k.outcome, sizeof k.outcome, rc == 1 ? "released" : "refused");
        if (k.end_ms < 0 || ledger_update(app, msg->token, &k) < 0) goto fail_msg;
        fmt_dur(b1, sizeof b1, k.rel_start - k.take_ms);
        fmt_dur(b2, sizeof b2, limit);
        if (rc == 1) {
            finished++;
            if (k.lease_end - k.take_ms > limit)
                snprintf(b2 + strlen(b2), sizeof b2 - strlen(b2), ", extended");
            say_at(k.rel_start,
                   "finished %s in %s (limit %s): release accepted, %s back in "
                   "the pool",
                   msg->id, b1, b2, msg->id);
        } else {
            discarded++;
            char holder[160];
            current_holder(app, msg->id, msg->token, holder, sizeof holder);
            say_at(k.rel_start,
                   "wakes up after %s (limit %s): release REFUSED, stale token: the "
                   "lease ended at %s, %s went back to the pool and %s. Work discarded",
                   b1, b2, fmt_at(b3, sizeof b3, k.lease_end), msg->id, holder);
        }
        dq_msg_free(msg);
        if (round < rounds) idle(c, BREAK_MS);
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
