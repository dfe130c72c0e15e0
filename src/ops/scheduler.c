/*
 * scheduler.c - moves due items to the ready lists, on the client's loop.
 *
 * Per scheduled queue: a sharded subscription to the queue's wake channel
 * (SSUBSCRIBE at whichever node serves the queue: the router follows
 * failovers and slot moves), one libev timer armed for the earliest
 * announced due time (decided by sched_core.c), and a jittered safety
 * timer. A transfer run is one call of lua/transfer.lua; it runs again at
 * once while the server says more items are due. A catch-up run happens on
 * every (re)subscription and on every reconnect of a command connection,
 * so a lost announcement delays nothing for longer than the safety
 * interval. A run that failed delays the next one (backoff.c), whatever
 * asks for it: Redis refusing with OOM or MISCONF would otherwise be asked
 * again at once, as the due time it failed for has passed.
 *
 * A sharded queue has one of these per shard, each with the queue as its
 * owner: dq_schedule starts them by the shard count the client knows (1
 * until told), and a transfer refused for another count ("DQSHARDS n")
 * replaces the owner's set with one for n shards.
 *
 * Lifetime: a scheduler is referenced by its in-flight transfer;
 * dq_unschedule ends the subscription, marks it closing, and the last
 * reference frees it.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

struct dq__sched {
    dq__sched *next;
    dq_client *c;
    char owner[DQ_QUEUE_MAX + 1];       /* the queue scheduled            */
    char queue[DQ__SHARD_NAME_MAX + 1]; /* the shard this one moves       */
    unsigned shards;                    /* the count it was started by    */
    char shards_text[24];
    dq__keys keys;
    dq__sched_core core;
    ev_timer due_timer, safety_timer;
    dq__sub *sub;        /* the wake channel's subscription          */
    dq__backoff backoff; /* failed runs in a row: the next waits      */
    int closing;
    double sent_at;      /* ev_time when the in-flight run was sent  */
};

static void transfer(dq__sched *s, int64_t fired_for);
static int start_shards(dq_client *c, const char *queue);
static void close_owner(dq_client *c, const char *queue);

/* ------------------------------------------------------------ lifetime */

static void unlink_sched(dq__sched *s) {
    for (dq__sched **p = &s->c->scheds; *p; p = &(*p)->next) {
        if (*p == s) {
            *p = s->next;
            return;
        }
    }
}

static void maybe_free(dq__sched *s) {
    if (!s->closing || s->core.in_flight) return;
    ev_timer_stop(s->c->loop, &s->due_timer);
    ev_timer_stop(s->c->loop, &s->safety_timer);
    free(s);
}

/* ------------------------------------------------------------ timers */

static void arm_due_timer(dq__sched *s) {
    struct ev_loop *loop = s->c->loop;
    ev_timer_stop(loop, &s->due_timer);
    int64_t at = dq__sched_core_fire_at(&s->core);
    if (at < 0 || s->closing) return;
    /* A little after the server's clock reaches the due millisecond: the
     * clock estimate is good to a fraction of a round trip. */
    ev_now_update(loop); /* libev times timers from its cached now */
    double in = dq__clock_until(s->c, at) + 0.0003;
    ev_timer_set(&s->due_timer, in > 0 ? in : 0, 0);
    ev_timer_start(loop, &s->due_timer);
}

static void arm_safety_timer(dq__sched *s) {
    struct ev_loop *loop = s->c->loop;
    int max = s->c->opt.safety_check_ms;
    double ms = max / 2.0 + dq__random_uniform((uint32_t)(max / 2) + 1);
    ev_timer_stop(loop, &s->safety_timer);
    if (s->closing) return;
    ev_timer_set(&s->safety_timer, ms / 1000.0, 0);
    ev_timer_start(loop, &s->safety_timer);
}

static void on_due_timer(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    dq__sched *s = w->data;
    transfer(s, s->core.next_due);
}

static void on_safety_timer(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    dq__sched *s = w->data;
    s->c->counters.safety_checks++;
    transfer(s, DQ__NONE);
}

/* ------------------------------------------------------------ transfer */

const char *dq__process_name(void) {
    static char name[300];
    if (!name[0]) {
        char host[256] = "";
        if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "unknown");
        snprintf(name, sizeof name, "%s:%ld", host, (long)getpid());
    }
    return name;
}

static void transfer_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    dq__sched *s = privdata;
    dq_client *c = s->c;
    (void)conn;
    unsigned told;
    if (!s->closing && dq__shards_relearn(c, s->owner, reply, &told)) {
        /* Another count: start over with the queue's (0, changing: keep
         * this set, and look again at the safety run). */
        dq__sched_core_failed(&s->core);
        if (told) {
            char owner[DQ_QUEUE_MAX + 1];
            memcpy(owner, s->owner, sizeof owner);
            close_owner(c, owner); /* frees s */
            if (start_shards(c, owner) != 0)
                dq__log(c, "queue %s: cannot schedule its %u shards: %s", owner, told, c->errstr);
            return;
        }
        arm_safety_timer(s);
        return;
    }
    if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements < 8 || reply->elements > 9) {
        dq__sched_core_failed(&s->core);
        c->counters.errors++;
        if (reply) dq__backoff_next(c, &s->backoff, reply->type == REDIS_REPLY_ERROR ? reply->str : "");
        if (dq__reply_is_refusal(reply) && dq__text_is_no_library(reply->str))
            dq__refused(c, "queue %s: transfer refused: %s", s->queue, reply->str);
        else if (dq__reply_is_refusal(reply))
            dq__refused(c,
                        "queue %s: transfer refused: %s (queue %s needs keys dq:{%s}:* and channel "
                        "dq:{%s}:w: see 'delayq acl')",
                        s->queue, reply->str, s->queue, s->queue, s->queue);
        else if (reply && reply->type == REDIS_REPLY_ERROR)
            dq__log_error(c, reply->str, "queue %s: transfer failed: %s", s->queue, reply->str);
        else if (!reply && code != DQ_ECLOSED)
            dq__log(c, "queue %s: transfer interrupted: %s", s->queue, dq_strerror(code));
        if (s->closing) {
            maybe_free(s);
            return;
        }
        arm_safety_timer(s);
        /* An error reply tells nothing of what is due: run again once the
         * backoff allows (transfer waits it out). */
        if (reply) transfer(s, DQ__NONE);
        else arm_due_timer(s);
        return;
    }
    dq__backoff_ok(c, &s->backoff);
    int64_t moved = dq__reply_int(reply->element[0]);
    int64_t aside = dq__reply_int(reply->element[1]);
    int64_t next_due = dq__reply_int(reply->element[2]);
    int64_t server_us = dq__reply_int(reply->element[3]);
    int more = dq__reply_int(reply->element[4]) != 0;
    int64_t expired = dq__reply_int(reply->element[5]);
    int64_t buried = dq__reply_int(reply->element[6]);
    dq__epoch_seen(c, s->queue, dq__reply_int(reply->element[7]));
    c->counters.leases_expired += (uint64_t)expired;
    c->counters.buried += (uint64_t)buried;
    dq__clock_sample(c, s->sent_at, ev_time(), server_us);
    c->counters.transfers++;
    c->counters.moved += (uint64_t)moved;
    c->counters.set_aside += (uint64_t)aside;
    if (reply->elements == 9) dq__recurring_refill(c, s->queue, reply->element[8]);
    if (aside > 0)
        dq__log(c, "queue %s: %" PRId64 " undecodable entries set aside in %s", s->queue, aside,
                s->keys.aside);
    more = dq__sched_core_finish(&s->core, moved, next_due, more);
    if (s->closing) {
        maybe_free(s);
        return;
    }
    if (more) {
        transfer(s, DQ__NONE);
        return;
    }
    arm_due_timer(s);
    arm_safety_timer(s);
}

static void transfer(dq__sched *s, int64_t fired_for) {
    dq_client *c = s->c;
    if (s->closing || s->core.in_flight) return;
    ev_timer_stop(c->loop, &s->due_timer);
    double wait = dq__backoff_left(c, &s->backoff);
    if (wait > 0) { /* the due timer runs it then */
        ev_timer_set(&s->due_timer, wait, 0);
        ev_timer_start(c->loop, &s->due_timer);
        return;
    }
    char batch[16], budget[16];
    const dq__keys *k = &s->keys;
    /* Runs not fired by a due time (catch-up, safety) also top up the wake
     * tokens, which a dying consumer can lose. */
    /* Those runs also carry the heartbeat (stats' schedulers), which lasts
     * three safety intervals. */
    char lasts[24];
    snprintf(lasts, sizeof lasts, "%d", 3 * c->opt.safety_check_ms);
    const char *argv[15] = {
        k->z,           k->ready,           k->aside, k->counters, k->dead, k->dead_times,
        k->signal,      k->prefix,          k->chan,  batch,       budget,  fired_for < 0 ? "1" : "0",
        s->shards_text, dq__process_name(), lasts};
    size_t lens[15];
    snprintf(batch, sizeof batch, "%d", c->opt.transfer_batch);
    snprintf(budget, sizeof budget, "%d", c->opt.transfer_budget_us);
    for (int i = 0; i < 15; i++) lens[i] = strlen(argv[i]);
    s->sent_at = ev_time();
    dq__sched_core_begin(&s->core, fired_for);
    if (dq__op_eval(c, s->queue, 0, DQ__LUA_TRANSFER, 7, fired_for < 0 ? 8 : 6, argv, lens,
                    transfer_reply, s) != 0) {
        /* Not connected: the reconnect runs a catch-up; the safety timer
         * covers the rest. */
        dq__sched_core_failed(&s->core);
        arm_safety_timer(s);
    }
}

/* A command connection came (back) up: catch up on every queue, at once
 * (a new node, or a failover's, is not the one that refused). */
static void on_node_up(dq_client *c, void *privdata) {
    (void)privdata;
    for (dq__sched *s = c->scheds; s; s = s->next) {
        dq__backoff_retry_now(&s->backoff);
        transfer(s, DQ__NONE);
    }
}

/* ------------------------------------------------------------ subscription */

static void on_wake(void *privdata, int event, const char *msg, size_t len) {
    dq__sched *s = privdata;
    if (s->closing) return;
    if (event == DQ__SUB_READY) {
        transfer(s, DQ__NONE); /* catch-up: announcements may have been missed */
        return;
    }
    s->c->counters.wakeups++;
    char text[24];
    if (len == 0 || len >= sizeof text) return;
    memcpy(text, msg, len);
    text[len] = '\0';
    int64_t due = strtoll(text, NULL, 10);
    if (dq__sched_core_heard(&s->core, due)) arm_due_timer(s);
}

/* ------------------------------------------------------------ public */

static dq__sched *find(dq_client *c, const char *queue) {
    for (dq__sched *s = c->scheds; s; s = s->next)
        if (strcmp(s->owner, queue) == 0) return s;
    return NULL;
}

/* Starts moving shard i of `shards` of queue. */
static int start_one(dq_client *c, const char *queue, unsigned i, unsigned shards) {
    dq__sched *s = calloc(1, sizeof *s);
    if (!s) return dq__fail(c, DQ_ENOMEM, "out of memory");
    s->c = c;
    snprintf(s->owner, sizeof s->owner, "%s", queue);
    if (dq__shard_named(c, queue, i, shards, s->queue) != 0) {
        free(s);
        return DQ_EPROTO;
    }
    s->shards = shards;
    dq__fmt_i64(s->shards_text, shards);
    dq__keys_init(&s->keys, s->queue);
    dq__sched_core_init(&s->core);
    ev_timer_init(&s->due_timer, on_due_timer, 0, 0);
    ev_timer_init(&s->safety_timer, on_safety_timer, 0, 0);
    s->due_timer.data = s->safety_timer.data = s;
    /* The confirmation of the subscription starts the catch-up run; until
     * then the safety timer stands guard. */
    s->sub = dq__route_subscribe(c, s->keys.chan, on_wake, s);
    if (!s->sub) {
        free(s);
        return dq__fail(c, DQ_ENOMEM, "out of memory");
    }
    s->next = c->scheds;
    c->scheds = s;
    arm_safety_timer(s);
    return 0;
}

/* Starts a scheduler for each shard of queue, by the count the client
 * knows (0, changing: the queue's own keys, until a run says more). */
static int start_shards(dq_client *c, const char *queue) {
    unsigned shards = dq__shards_of(c, queue);
    if (!shards) shards = 1;
    for (unsigned i = 0; i < shards; i++) {
        int rc = start_one(c, queue, i, shards);
        if (rc) {
            close_owner(c, queue);
            return rc;
        }
    }
    dq__route_set_up_hook(c, on_node_up, NULL);
    return 0;
}

int dq_schedule(dq_client *c, const char *queue) {
    if (!queue || !dq__queue_valid(queue))
        return dq__fail(c, DQ_EINVAL, "invalid queue name '%s'", queue ? queue : "(null)");
    if (find(c, queue)) return 0;
    if (!c->router) return dq__fail(c, DQ_ECONNECT, "not connected: call dq_connect first");
    return start_shards(c, queue);
}

static void close_sched(dq__sched *s) {
    dq_client *c = s->c;
    s->closing = 1;
    unlink_sched(s);
    ev_timer_stop(c->loop, &s->due_timer);
    ev_timer_stop(c->loop, &s->safety_timer);
    if (s->sub && c->router) dq__route_unsubscribe(c, s->sub);
    s->sub = NULL;
    maybe_free(s);
}

/* Closes every scheduler of queue's shards. */
static void close_owner(dq_client *c, const char *queue) {
    dq__sched *s;
    while ((s = find(c, queue)) != NULL) close_sched(s);
}

int dq_unschedule(dq_client *c, const char *queue) {
    if (!queue || !find(c, queue))
        return dq__fail(c, DQ_EINVAL, "queue '%s' is not scheduled", queue ? queue : "(null)");
    close_owner(c, queue);
    return 0;
}

void dq__sched_free_all(dq_client *c) {
    while (c->scheds) close_sched(c->scheds);
    /* In-flight runs end when their connections close, which frees the
     * rest (dq_client_free closes the router after this). */
}

void dq_get_sched_counters(const dq_client *c, dq_sched_counters *out) { *out = c->counters; }
