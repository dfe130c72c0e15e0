/*
 * consumer.c - consumers that show themselves: the beats of dq_consumer_start
 * (and of every dq_worker) and the list of dq_consumers.
 *
 * Owns the client's registered consumers and the one timer that beats for
 * them all: every consumer_beat_ms (and about a second after a consumer
 * starts) it sends each one's beat (lua/beat.lua:
 * name, items in hand; the server stamps the times), and nothing else runs
 * between beats. A beat counts for three intervals, so a consumer that dies
 * drops out of the list within that; one that stops says 'bye' and leaves at
 * once. A beat is never waited for: a failed one is logged once (until one
 * succeeds) and the next one tries again, so Redis being away costs a
 * consumer nothing but its visibility.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define LIST_MAX 1000 /* consumers.lua's limit */
#define FIRST_BEAT_S 1.0 /* a new consumer's first beat, at most this late */

struct dq_consumer {
    dq_consumer *next;
    dq_client *c;
    char queue[DQ_QUEUE_MAX + 1];
    char name[DQ_CONSUMER_NAME_MAX + 1];
    int64_t in_hand;
    const int *count; /* read at each beat when set (a worker's) */
    int beaten;       /* a beat was sent: leaving needs a 'bye' */
};

/* The consumer keys of queue: its prefix's 'c' and 'ci' (lib/75_holders.lua). */
static void consumer_keys(const char *queue, char *live, char *info) {
    dq__keys k;
    dq__keys_init(&k, queue);
    snprintf(live, DQ__KEY_MAX + 4, "%sc", k.prefix);
    snprintf(info, DQ__KEY_MAX + 4, "%sci", k.prefix);
}

/* "host:pid", the host cut so that the whole fits in DQ_CONSUMER_NAME_MAX. */
static void default_name(char *out) {
    char host[256] = "", pid[24];
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "unknown");
    int n = snprintf(pid, sizeof pid, ":%ld", (long)getpid());
    snprintf(out, DQ_CONSUMER_NAME_MAX + 1, "%.*s%s", DQ_CONSUMER_NAME_MAX - n, host, pid);
}

static void beat_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    dq_client *c = privdata;
    (void)conn;
    if (reply && reply->type != REDIS_REPLY_ERROR) {
        c->consumer_failed = 0;
        return;
    }
    if (code == DQ_ECLOSED || c->consumer_failed) return;
    c->consumer_failed = 1;
    const char *why = reply ? reply->str : conn ? conn->errstr : dq_strerror(code);
    if (reply && dq__reply_is_refusal(reply)) dq__refused(c, "consumer beat refused: %s", why);
    else dq__log(c, "consumer beat failed: %s (tried again at the next beat)", why);
}

/* Sends k's beat ("beat") or its leaving ("bye"). */
static void send_beat(dq_consumer *k, const char *op) {
    char live[DQ__KEY_MAX + 4], info[DQ__KEY_MAX + 4], hand[24], lasts[24];
    consumer_keys(k->queue, live, info);
    int64_t n = k->count ? *k->count : k->in_hand;
    snprintf(hand, sizeof hand, "%lld",
             (long long)(n > 0 ? (n < 999999999 ? n : 999999999) : 0)); /* beat.lua's bound */
    snprintf(lasts, sizeof lasts, "%d", 3 * k->c->opt.consumer_beat_ms);
    const char *argv[6] = {live, info, op, k->name, hand, lasts};
    size_t lens[6];
    for (int i = 0; i < 6; i++) lens[i] = strlen(argv[i]);
    int nargs = strcmp(op, "bye") == 0 ? 2 : 4;
    if (dq__op_eval(k->c, k->queue, 0, DQ__LUA_BEAT, 2, nargs, argv, lens, beat_reply, k->c) != 0 &&
        !k->c->consumer_failed) {
        k->c->consumer_failed = 1;
        dq__log(k->c, "consumer beat of %s not sent: %s", k->name, dq_client_errstr(k->c));
    }
}

static void on_beat(struct ev_loop *loop, ev_timer *w, int revents) {
    dq_client *c = w->data;
    (void)loop, (void)revents;
    for (dq_consumer *k = c->consumers; k; k = k->next) {
        send_beat(k, "beat");
        k->beaten = 1;
    }
}

/* The beats go FIRST_BEAT_S after a consumer starts (or at once when the
 * interval is shorter), then every interval: a consumer that is gone within
 * the first second (a take served at once, one that failed) costs nothing
 * and says nothing, and a newcomer is listed about a second after it came. */
static void arm_beats(dq_client *c) {
    double every = c->opt.consumer_beat_ms / 1000.0, first = every < FIRST_BEAT_S ? every : FIRST_BEAT_S;
    if (ev_is_active(&c->consumer_beat) && ev_timer_remaining(c->loop, &c->consumer_beat) <= first)
        return;
    ev_timer_stop(c->loop, &c->consumer_beat);
    ev_timer_set(&c->consumer_beat, first, every);
    ev_timer_start(c->loop, &c->consumer_beat);
}

int dq_consumer_start(dq_client *c, const char *queue, const char *name, dq_consumer **out) {
    *out = NULL;
    int bad = dq__check_queue(c, queue);
    if (bad) return bad;
    if (name && !dq__name_valid(name, DQ_CONSUMER_NAME_MAX))
        return dq__fail(c, DQ_EINVAL,
                        "invalid consumer name: 1 to %d bytes of UTF-8, no control character",
                        DQ_CONSUMER_NAME_MAX);
    if (!c->router) return dq__fail(c, DQ_ECONNECT, "not connected: call dq_connect first");
    dq_consumer *k = calloc(1, sizeof *k);
    if (!k) return dq__fail(c, DQ_ENOMEM, "out of memory");
    k->c = c;
    snprintf(k->queue, sizeof k->queue, "%s", queue);
    if (name) snprintf(k->name, sizeof k->name, "%s", name);
    else default_name(k->name);
    if (!c->consumers) {
        ev_timer_init(&c->consumer_beat, on_beat, 0, 0);
        c->consumer_beat.data = c;
    }
    k->next = c->consumers;
    c->consumers = k;
    arm_beats(c);
    *out = k;
    return 0;
}

void dq_consumer_set_in_hand(dq_consumer *k, int64_t in_hand) { k->in_hand = in_hand; }

void dq__consumer_count(dq_consumer *k, const int *count) { k->count = count; }

void dq_consumer_stop(dq_consumer *k) {
    if (!k) return;
    dq_client *c = k->c;
    for (dq_consumer **p = &c->consumers; *p; p = &(*p)->next) {
        if (*p == k) {
            *p = k->next;
            break;
        }
    }
    if (!c->consumers) ev_timer_stop(c->loop, &c->consumer_beat);
    if (k->beaten) send_beat(k, "bye");
    free(k);
}

void dq__consumers_free(dq_client *c) {
    while (c->consumers) dq_consumer_stop(c->consumers);
}

/* ------------------------------------------------------------ the list */

typedef struct list_call {
    dq_client *c;
    const char *queue;
    int done, status;
    dq_consumer_info *out;
    size_t n;
} list_call;

/* One consumer of consumers.lua's reply (4 elements at e) into *ci.
 * Returns 0, 1 for a name no consumer can have (planted in Redis: control
 * bytes, bad UTF-8, a NUL; left out so it reaches no terminal or page, and
 * hides no other), or DQ_EPROTO. */
static int decode_one(redisReply **e, int64_t now, dq_consumer_info *ci) {
    if (e[0]->type != REDIS_REPLY_STRING) return DQ_EPROTO;
    if (e[0]->len > DQ_CONSUMER_NAME_MAX || strlen(e[0]->str) != e[0]->len ||
        !dq__name_valid(e[0]->str, DQ_CONSUMER_NAME_MAX))
        return 1;
    memset(ci, 0, sizeof *ci);
    memcpy(ci->name, e[0]->str, e[0]->len);
    ci->started_ms = dq__reply_int(e[1]);
    ci->in_hand = dq__reply_int(e[2]);
    ci->last_seen_ms = dq__reply_int(e[3]);
    ci->now_ms = now;
    return 0;
}

static int list_decode(list_call *s, const redisReply *r) {
    if (r->elements < 1 || (r->elements - 1) % 4 != 0 || (r->elements - 1) / 4 > LIST_MAX)
        return DQ_EPROTO;
    int64_t now = dq__reply_int(r->element[0]);
    size_t n = (r->elements - 1) / 4;
    if (n == 0) return 0;
    if (!(s->out = calloc(n, sizeof *s->out))) return DQ_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        int rc = decode_one(r->element + 1 + 4 * i, now, &s->out[s->n]);
        if (rc < 0) return rc;
        if (rc == 0) s->n++;
    }
    return 0;
}

static void list_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    list_call *s = privdata;
    s->done = 1;
    if (reply && reply->type == REDIS_REPLY_ARRAY) {
        int rc = list_decode(s, reply);
        if (rc)
            s->status =
                dq__fail(s->c, rc, rc == DQ_ENOMEM ? "out of memory" : "unexpected consumers reply");
    } else {
        s->status = dq__reply_failure(s->c, conn, reply, code, s->queue);
    }
}

int dq_consumers(dq_client *c, const char *queue, dq_consumer_info **out, size_t *n) {
    *out = NULL;
    *n = 0;
    int rc = dq__not_in_callback(c);
    if (!rc) rc = dq__check_queue(c, queue);
    if (rc) return rc;
    char live[DQ__KEY_MAX + 4], info[DQ__KEY_MAX + 4];
    consumer_keys(queue, live, info);
    const char *argv[2] = {live, info};
    size_t lens[2] = {strlen(live), strlen(info)};
    list_call s = {.c = c, .queue = queue};
    rc = dq__op_eval(c, queue, 0, DQ__LUA_CONSUMERS, 2, 0, argv, lens, list_reply, &s);
    if (rc) return rc;
    dq__wait(c, &s.done);
    if (s.status) {
        free(s.out);
        return s.status;
    }
    *out = s.out;
    *n = s.n;
    return 0;
}
