/*
 * scheduler.c - moves due items to the ready lists, on the client's loop.
 *
 * Per scheduled queue: a subscription to the queue's wake channel, one libev
 * timer armed for the earliest announced due time (decided by sched_core.c),
 * and a jittered safety timer. A transfer run is one call of lua/transfer.lua
 * on the command connection; it runs again at once while the server says
 * more items are due. A catch-up run happens on every (re)subscription and
 * on every reconnect of the command connection, so a lost announcement
 * delays nothing for longer than the safety interval.
 *
 * Lifetime: a scheduler is referenced by hiredis while subscribed (the
 * subscription callback runs once more with NULL or the unsubscribe reply)
 * and by its in-flight transfer; dq_unschedule marks it closing and the
 * last reference frees it.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "sched_core.h"

struct dq__sched {
    dq__sched *next;
    dq_client *c;
    char queue[DQ_QUEUE_MAX + 1];
    dq__keys keys;
    dq__sched_core core;
    ev_timer due_timer, safety_timer;
    int sub_registered;  /* hiredis holds our subscription callback */
    int subscribed;      /* the subscription is confirmed            */
    int closing;
    double sent_at;      /* ev_time when the in-flight run was sent  */
};

static void transfer(dq__sched *s, int64_t fired_for);

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
    if (!s->closing || s->sub_registered || s->core.in_flight) return;
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

static void transfer_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    dq__sched *s = privdata;
    dq_client *c = s->c;
    (void)conn;
    if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != 7) {
        dq__sched_core_failed(&s->core);
        c->counters.errors++;
        if (reply && reply->type == REDIS_REPLY_ERROR)
            dq__log(c, "queue %s: transfer failed: %s", s->queue, reply->str);
        else if (!reply && code != DQ_ECLOSED)
            dq__log(c, "queue %s: transfer interrupted: %s", s->queue, dq_strerror(code));
        if (s->closing) {
            maybe_free(s);
            return;
        }
        arm_safety_timer(s);
        arm_due_timer(s);
        return;
    }
    int64_t moved = dq__reply_int(reply->element[0]);
    int64_t aside = dq__reply_int(reply->element[1]);
    int64_t next_due = dq__reply_int(reply->element[2]);
    int64_t server_us = dq__reply_int(reply->element[3]);
    int more = dq__reply_int(reply->element[4]) != 0;
    int64_t expired = dq__reply_int(reply->element[5]);
    int64_t buried = dq__reply_int(reply->element[6]);
    c->counters.leases_expired += (uint64_t)expired;
    c->counters.buried += (uint64_t)buried;
    dq__clock_sample(c, s->sent_at, ev_time(), server_us);
    c->counters.transfers++;
    c->counters.moved += (uint64_t)moved;
    c->counters.set_aside += (uint64_t)aside;
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
    char batch[16], budget[16];
    const dq__keys *k = &s->keys;
    /* Runs not fired by a due time (catch-up, safety) also top up the wake
     * tokens, which a dying consumer can lose. */
    const char *argv[12] = {k->z, k->ready, k->aside, k->counters, k->dead, k->dead_times,
                            k->signal, k->prefix, k->chan, batch, budget,
                            fired_for < 0 ? "1" : "0"};
    size_t lens[12];
    snprintf(batch, sizeof batch, "%d", c->opt.transfer_batch);
    snprintf(budget, sizeof budget, "%d", c->opt.transfer_budget_us);
    for (int i = 0; i < 12; i++) lens[i] = strlen(argv[i]);
    s->sent_at = ev_time();
    dq__sched_core_begin(&s->core, fired_for);
    if (dq__conn_eval(c->cmd, DQ__LUA_TRANSFER, 7, 5, argv, lens, transfer_reply, s) != 0) {
        /* Not connected: the reconnect runs a catch-up; the safety timer
         * covers the rest. */
        dq__sched_core_failed(&s->core);
        arm_safety_timer(s);
    }
}

void dq__sched_on_cmd_up(dq_client *c) {
    for (dq__sched *s = c->scheds; s; s = s->next) transfer(s, DQ__NONE);
}

/* ------------------------------------------------------------ subscription */

static void on_wake(redisAsyncContext *ac, void *reply_ptr, void *privdata) {
    (void)ac;
    dq__sched *s = privdata;
    redisReply *r = reply_ptr;
    if (!r) {
        /* The subscription ended with its connection. */
        s->sub_registered = s->subscribed = 0;
        maybe_free(s);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->element[0]->type != REDIS_REPLY_STRING)
        return;
    const char *kind = r->element[0]->str;
    if (strcmp(kind, "message") == 0) {
        s->c->counters.wakeups++;
        if (s->closing) return;
        int64_t due = dq__reply_int(r->element[2]);
        if (dq__sched_core_heard(&s->core, due)) arm_due_timer(s);
    } else if (strcmp(kind, "subscribe") == 0) {
        s->subscribed = 1;
        transfer(s, DQ__NONE); /* catch-up: announcements may have been missed */
    } else if (strcmp(kind, "unsubscribe") == 0) {
        s->sub_registered = s->subscribed = 0;
        maybe_free(s);
    }
}

static void subscribe(dq__sched *s) {
    dq__conn *sub = s->c->sub;
    if (s->sub_registered || s->closing || !sub || sub->state != DQ__UP) return;
    const char *argv[2] = {"SUBSCRIBE", s->keys.chan};
    size_t lens[2] = {9, strlen(s->keys.chan)};
    if (redisAsyncCommandArgv(sub->ac, on_wake, s, 2, argv, lens) == REDIS_OK) s->sub_registered = 1;
}

static void on_sub_up(dq__conn *conn, void *privdata) {
    (void)privdata;
    dq_client *c = conn->client;
    if (conn->ups > 1) c->counters.reconnects++;
    for (dq__sched *s = c->scheds; s; s = s->next) subscribe(s);
}

static void on_sub_down(dq__conn *conn, void *privdata) {
    (void)privdata;
    dq__log(conn->client, "wake channel connection lost (%s); reconnecting", conn->errstr);
}

static int ensure_sub(dq_client *c) {
    if (c->sub) return 0;
    c->sub = dq__conn_new(c, DQ__CONN_SUB);
    if (!c->sub) return DQ_ENOMEM;
    c->sub->on_up = on_sub_up;
    c->sub->on_down = on_sub_down;
    c->sub->auto_reconnect = 1;
    dq__conn_start(c->sub);
    return 0;
}

/* ------------------------------------------------------------ public */

static dq__sched *find(dq_client *c, const char *queue) {
    for (dq__sched *s = c->scheds; s; s = s->next)
        if (strcmp(s->queue, queue) == 0) return s;
    return NULL;
}

int dq_schedule(dq_client *c, const char *queue) {
    if (!queue || !dq__queue_valid(queue))
        return dq__fail(c, DQ_EINVAL, "invalid queue name '%s'", queue ? queue : "(null)");
    if (find(c, queue)) return 0;
    if (ensure_sub(c)) return dq__fail(c, DQ_ENOMEM, "out of memory");
    dq__sched *s = calloc(1, sizeof *s);
    if (!s) return dq__fail(c, DQ_ENOMEM, "out of memory");
    s->c = c;
    snprintf(s->queue, sizeof s->queue, "%s", queue);
    dq__keys_init(&s->keys, queue);
    dq__sched_core_init(&s->core);
    ev_timer_init(&s->due_timer, on_due_timer, 0, 0);
    ev_timer_init(&s->safety_timer, on_safety_timer, 0, 0);
    s->due_timer.data = s->safety_timer.data = s;
    s->next = c->scheds;
    c->scheds = s;
    /* The confirmation of the subscription starts the catch-up run; until
     * then the safety timer stands guard. */
    subscribe(s);
    arm_safety_timer(s);
    return 0;
}

static void close_sched(dq__sched *s) {
    dq_client *c = s->c;
    s->closing = 1;
    unlink_sched(s);
    ev_timer_stop(c->loop, &s->due_timer);
    ev_timer_stop(c->loop, &s->safety_timer);
    if (s->sub_registered && c->sub && c->sub->ac && c->sub->state == DQ__UP) {
        const char *argv[2] = {"UNSUBSCRIBE", s->keys.chan};
        size_t lens[2] = {11, strlen(s->keys.chan)};
        redisAsyncCommandArgv(c->sub->ac, NULL, NULL, 2, argv, lens);
    }
    maybe_free(s);
}

int dq_unschedule(dq_client *c, const char *queue) {
    dq__sched *s = queue ? find(c, queue) : NULL;
    if (!s) return dq__fail(c, DQ_EINVAL, "queue '%s' is not scheduled", queue ? queue : "(null)");
    close_sched(s);
    return 0;
}

void dq__sched_free_all(dq_client *c) {
    while (c->scheds) close_sched(c->scheds);
    /* Subscriptions and in-flight runs end when their connections close,
     * which frees the rest (dq_client_free closes sub, then cmd). */
}

void dq_get_sched_counters(const dq_client *c, dq_sched_counters *out) { *out = c->counters; }
