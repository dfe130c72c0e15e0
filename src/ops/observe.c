/*
 * observe.c - what an operator reads of a queue: its metrics (counts,
 * totals and the lateness histogram, one script), paged listings of each
 * state, and whether its node takes writes. Reads only: the scripts are no-writes functions, so a
 * read-only ACL user may run them, and they never change what they show.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

const int64_t dq_lateness_bounds_ms[DQ_LATENESS_BUCKETS] = {1,   2,   5,    10,   25,   50,   100,
                                                            250, 500, 1000, 2500, 5000, 10000};

/* A synchronous script or command whose array reply decode turns into the
 * caller's result, inside the reply callback (the reply is freed after it). */
typedef int decode_fn(dq_client *c, const char *queue, const redisReply *reply, void *out);

typedef struct sync_call {
    dq_client *c;
    const char *queue;
    int done, status;
    decode_fn *decode;
    void *out;
    int *left; /* of a batch: calls whose reply is still to come */
} sync_call;

static void sync_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    sync_call *s = privdata;
    s->done = 1;
    if (s->left) --*s->left;
    if (reply && reply->type == REDIS_REPLY_ARRAY) s->status = s->decode(s->c, s->queue, reply, s->out);
    else s->status = dq__reply_failure(s->c, conn, reply, code, s->queue);
}

static int run_sync(sync_call *s, int script, int nkeys, int nargs, const char **argv) {
    size_t lens[8];
    for (int i = 0; i < nkeys + nargs; i++) lens[i] = strlen(argv[i]);
    int rc = script >= 0 ? dq__op_eval(s->c, s->queue, 0, (enum dq__script)script, nkeys, nargs, argv,
                                       lens, sync_reply, s)
                         : dq__op_command(s->c, s->queue, nkeys + nargs, argv, lens, sync_reply, s);
    if (rc) return rc;
    dq__wait(s->c, &s->done);
    return s->status;
}

static int check_read(dq_client *c, const char *queue) {
    int rc = dq__not_in_callback(c);
    return rc ? rc : dq__check_queue(c, queue);
}

/* ------------------------------------------------------------ metrics */

/* A stored total: absent is 0; anything but a decimal integer is refused,
 * naming the field (totals are written with pcall and may hold whatever
 * someone put there). */
static int stored_total(dq_client *c, const redisReply *r, const char *field, int64_t *out) {
    *out = 0;
    if (r->type == REDIS_REPLY_NIL) return 0;
    if (r->type == REDIS_REPLY_INTEGER) {
        *out = r->integer;
        return 0;
    }
    char *end = NULL;
    long long v =
        r->type == REDIS_REPLY_STRING && r->len > 0 && r->len <= 19 ? strtoll(r->str, &end, 10) : 0;
    if (!end || *end || end != r->str + r->len || v < 0)
        return dq__fail(c, DQ_EPROTO, "metric %s of the queue is not a count (HDEL it to reset it)",
                        field);
    *out = v;
    return 0;
}

enum { METRIC_COUNTS = 7, METRIC_TOTALS = 7 };

/* Also learns the shard count the keys' counters hold (the last element). */
static int decode_metrics(dq_client *c, const char *queue, const redisReply *reply, void *out) {
    dq_metrics *m = out;
    size_t count = METRIC_COUNTS + METRIC_TOTALS + DQ_LATENESS_BUCKETS + 1;
    /* Then the shard count, then the epoch, the schedulers, overdue_ms and
     * the recurring schedules. */
    if (reply->elements != count + 5 || dq__epoch_reply(c, queue, reply->element[count + 1]) != 0)
        return dq__fail(c, DQ_EPROTO, "unexpected metrics reply");
    int64_t shards = dq__reply_int(reply->element[count]);
    if (shards < 0 || shards > DQ__SHARDS_MAX) return dq__fail(c, DQ_EPROTO, "unexpected metrics reply");
    if (!strchr(queue, '~')) dq__shards_learn(c, queue, (unsigned)shards); /* the queue's own keys */
    redisReply *const *e = reply->element;
    memset(m, 0, sizeof *m);
    m->wiped = dq__epoch_wipes(c, queue);
    m->stats.pending = dq__reply_int(e[0]);
    m->stats.ready = dq__reply_int(e[1]);
    m->stats.next_due_in_ms = dq__reply_int(e[2]);
    m->stats.set_aside = dq__reply_int(e[3]);
    m->stats.in_flight = dq__reply_int(e[4]);
    m->stats.dead = dq__reply_int(e[5]);
    m->oldest_ready_age_ms = dq__reply_int(e[6]);
    m->stats.schedulers = dq__reply_int(e[count + 2]);
    m->stats.overdue_ms = dq__reply_int(e[count + 3]);
    m->schedules = dq__reply_int(e[count + 4]);
    static const char *const names[METRIC_TOTALS] = {"offered", "delivered", "acked",  "nacked",
                                                     "dead",    "expired",   "lat_sum"};
    int64_t *totals[METRIC_TOTALS] = {&m->offered, &m->delivered,     &m->acked,          &m->nacked,
                                      &m->dead,    &m->lease_expired, &m->lateness_sum_ms};
    for (int i = 0; i < METRIC_TOTALS; i++) {
        int rc = stored_total(c, e[METRIC_COUNTS + i], names[i], totals[i]);
        if (rc) return rc;
    }
    for (int b = 0; b <= DQ_LATENESS_BUCKETS; b++) {
        char name[16];
        snprintf(name, sizeof name, "lat:%d", b + 1);
        int rc = stored_total(c, e[METRIC_COUNTS + METRIC_TOTALS + b], name, &m->lateness[b]);
        if (rc) return rc;
    }
    return 0;
}

/* Sends the metrics call of s->queue (the reply fills s). */
static int send_metrics(sync_call *s) {
    dq__keys k;
    dq__keys_init(&k, s->queue);
    const char *argv[6] = {k.z, k.ready, k.aside, k.counters, k.dead_times, k.prefix};
    size_t lens[6];
    for (int i = 0; i < 6; i++) lens[i] = strlen(argv[i]);
    return dq__op_eval(s->c, s->queue, 0, DQ__LUA_METRICS, 5, 1, argv, lens, sync_reply, s);
}

/* Adds one shard's metrics into the sum (the earliest due, the oldest
 * ready item). */
static void metrics_add(dq_metrics *sum, const dq_metrics *one) {
    dq_stats *a = &sum->stats;
    const dq_stats *b = &one->stats;
    a->pending += b->pending, a->ready += b->ready, a->set_aside += b->set_aside;
    a->in_flight += b->in_flight, a->dead += b->dead;
    if (b->next_due_in_ms >= 0 && (a->next_due_in_ms < 0 || b->next_due_in_ms < a->next_due_in_ms))
        a->next_due_in_ms = b->next_due_in_ms;
    if (one->oldest_ready_age_ms > sum->oldest_ready_age_ms)
        sum->oldest_ready_age_ms = one->oldest_ready_age_ms;
    if (b->schedulers > a->schedulers) a->schedulers = b->schedulers; /* each beats on every shard */
    if (b->overdue_ms > a->overdue_ms) a->overdue_ms = b->overdue_ms;
    sum->offered += one->offered, sum->delivered += one->delivered, sum->acked += one->acked;
    sum->nacked += one->nacked, sum->dead += one->dead, sum->lease_expired += one->lease_expired;
    for (int i = 0; i <= DQ_LATENESS_BUCKETS; i++) sum->lateness[i] += one->lateness[i];
    sum->lateness_sum_ms += one->lateness_sum_ms;
    sum->schedules += one->schedules;
    sum->wiped += one->wiped;
}

/* The metrics of a sharded queue: its own keys' (*m, read already: the
 * totals from before it was sharded) plus each shard's, one call each. */
static int metrics_of_shards(dq_client *c, const char *queue, unsigned shards, dq_metrics *m) {
    for (unsigned i = 0; i < shards; i++) {
        char name[DQ__SHARD_NAME_MAX + 1];
        if (dq__shard_named(c, queue, i, shards, name) != 0) return DQ_EPROTO;
        dq_metrics one;
        sync_call s = {c, name, 0, 0, decode_metrics, &one, NULL};
        int rc = send_metrics(&s);
        if (rc) return rc;
        dq__wait(c, &s.done);
        if (s.status) return s.status;
        metrics_add(m, &one);
    }
    return 0;
}

int dq_get_metrics(dq_client *c, const char *queue, dq_metrics *m) {
    int rc = check_read(c, queue);
    if (rc) return rc;
    sync_call s = {c, queue, 0, 0, decode_metrics, m, NULL};
    if ((rc = send_metrics(&s))) return rc;
    dq__wait(c, &s.done);
    if (s.status) return s.status;
    unsigned shards = dq__shards_of(c, queue);
    return shards > 1 ? metrics_of_shards(c, queue, shards, m) : 0;
}

int dq_get_metrics_many(dq_client *c, const char *const *queues, size_t n, dq_metrics *m, int *status) {
    int rc = dq__not_in_callback(c);
    if (rc) return rc;
    sync_call *calls = calloc(n ? n : 1, sizeof *calls);
    if (!calls) return dq__fail(c, DQ_ENOMEM, "out of memory");
    int left = 0;
    for (size_t i = 0; i < n; i++) {
        sync_call *s = &calls[i];
        *s = (sync_call){c, queues[i], 0, 0, decode_metrics, &m[i], &left};
        if ((status[i] = dq__check_queue(c, queues[i])) == 0 && (status[i] = send_metrics(s)) == 0)
            left++;
        else s->done = 1;
    }
    dq__wait_all(c, &left);
    for (size_t i = 0; i < n; i++) {
        if (!status[i]) status[i] = calls[i].status;
        /* A sharded queue adds its shards, one call each. */
        unsigned shards = status[i] ? 0 : dq__shards_of(c, queues[i]);
        if (shards > 1) status[i] = metrics_of_shards(c, queues[i], shards, &m[i]);
    }
    free(calls);
    return 0;
}

/* ------------------------------------------------------------ writability */

typedef struct ping_call {
    dq_client *c;
    int done, status;
} ping_call;

/* PING is refused with MISCONF exactly while a master refuses writes for a
 * failing RDB or AOF write (and answered, unlike a write, otherwise). */
static void ping_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    ping_call *p = privdata;
    p->done = 1;
    if (dq__reply_class(reply) == DQ__ERR_MISCONF) p->status = dq__fail(p->c, 0, "%s", reply->str);
    else if (reply && reply->type != REDIS_REPLY_ERROR) p->status = 1;
    else p->status = dq__reply_failure(p->c, conn, reply, code, "(none)");
}

int dq_redis_writable(dq_client *c, const char *queue) {
    int rc = dq__not_in_callback(c);
    if (!rc && queue) rc = dq__check_queue(c, queue);
    if (rc) return rc;
    if (!c->router) return dq__fail(c, DQ_ECONNECT, "not connected: call dq_connect first");
    ping_call p = {c, 0, 0};
    const char *argv[1] = {"PING"};
    size_t lens[1] = {4};
    rc = dq__route_argv(c, queue ? dq__queue_slot(queue) : 0, 0, 1, argv, lens, ping_reply, &p);
    if (rc) return rc;
    dq__wait(c, &p.done);
    return p.status;
}

/* ------------------------------------------------------------ listing */

typedef struct page {
    int state;
    dq_listed *items;
    size_t n;
    char *next; /* DQ_CURSOR_MAX + 1 */
    size_t offset, limit; /* ready and dead: the page's place */
    size_t cut;           /* the most payload bytes an item keeps; 0: whole */
} page;

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* Fills item from a ready entry (entry form: see lua/list.lua). */
static int item_of_entry(dq_listed *it, const char *buf, size_t len) {
    dq__entry e;
    if (dq__entry_decode(buf, len, &e) != 0) return DQ_EPROTO;
    it->id = dup_n(e.id, e.id_len);
    it->error = dup_n(e.err, e.err_len);
    it->reason = dup_n("", 0);
    it->payload = dup_n(e.payload, e.payload_len);
    it->payload_len = e.payload_len;
    it->due_ms = e.due_ms;
    it->attempts = (int)e.attempts;
    it->ready_ms = e.ready_ms;
    return it->id && it->error && it->reason && it->payload ? 0 : DQ_ENOMEM;
}

/* list.lua's reply: {next cursor, (time, attempts, entry[, whole payload
 * length when cut or in flight][, holder when in flight])...}. */
static int decode_slots_page(dq_client *c, const char *queue, const redisReply *reply, void *out) {
    (void)queue;
    page *p = out;
    int inflight = p->state == DQ_STATE_IN_FLIGHT;
    size_t stride = inflight ? 5 : p->cut ? 4 : 3;
    if (reply->elements < 1 || (reply->elements - 1) % stride != 0 ||
        reply->element[0]->type != REDIS_REPLY_STRING || reply->element[0]->len > DQ_CURSOR_MAX)
        return dq__fail(c, DQ_EPROTO, "unexpected list reply");
    memcpy(p->next, reply->element[0]->str, reply->element[0]->len + 1);
    size_t n = (reply->elements - 1) / stride;
    p->items = calloc(n ? n : 1, sizeof *p->items);
    if (!p->items) return dq__fail(c, DQ_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        redisReply *const *e = reply->element + 1 + stride * i;
        dq_listed *it = &p->items[p->n];
        if (e[2]->type != REDIS_REPLY_STRING) return dq__fail(c, DQ_EPROTO, "unexpected list reply");
        int rc = item_of_entry(it, e[2]->str, e[2]->len);
        p->n++;
        if (rc == DQ_ENOMEM) return dq__fail(c, rc, "out of memory");
        if (rc) return dq__fail(c, rc, "a listed item does not decode");
        it->state = p->state;
        it->attempts = (int)dq__reply_int(e[1]);
        it->ready_ms = 0;
        if (p->state == DQ_STATE_IN_FLIGHT) it->lease_end_ms = dq__reply_int(e[0]);
        if (stride > 3) {
            int64_t whole = dq__reply_int(e[3]);
            it->payload_full_len = whole > (int64_t)it->payload_len ? (size_t)whole : it->payload_len;
        }
        if (inflight && e[4]->type == REDIS_REPLY_STRING && e[4]->len < sizeof it->holder)
            memcpy(it->holder, e[4]->str, e[4]->len); /* calloc'd: NUL-ended */
    }
    return 0;
}

/* LRANGE of the ready list. An entry that does not decode is shown with
 * its raw bytes and reason "undecodable" (a consumer sets it aside). */
static int decode_ready_page(dq_client *c, const char *queue, const redisReply *reply, void *out) {
    (void)queue;
    page *p = out;
    size_t n = reply->elements;
    p->items = calloc(n ? n : 1, sizeof *p->items);
    if (!p->items) return dq__fail(c, DQ_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const redisReply *e = reply->element[i];
        dq_listed *it = &p->items[p->n++];
        it->state = DQ_STATE_READY;
        int rc = e->type == REDIS_REPLY_STRING ? item_of_entry(it, e->str, e->len) : DQ_EPROTO;
        if (rc == DQ_EPROTO) {
            free(it->id), free(it->error), free(it->reason), free(it->payload);
            memset(it, 0, sizeof *it);
            it->state = DQ_STATE_READY;
            it->id = dup_n("", 0);
            it->error = dup_n("", 0);
            it->reason = dup_n("undecodable", 11);
            it->payload = e->type == REDIS_REPLY_STRING ? dup_n(e->str, e->len) : dup_n("", 0);
            it->payload_len = e->type == REDIS_REPLY_STRING ? e->len : 0;
            rc = it->id && it->error && it->reason && it->payload ? 0 : DQ_ENOMEM;
        }
        if (rc) return dq__fail(c, rc, "out of memory");
    }
    if (n == p->limit) snprintf(p->next, DQ_CURSOR_MAX + 1, "%zu", p->offset + n);
    return 0;
}

static int list_dead(dq_client *c, const char *queue, page *p) {
    dq_dead_letter *d;
    size_t n;
    int rc = dq_dead_list(c, queue, p->offset, p->limit, &d, &n);
    if (rc) return rc;
    p->items = calloc(n ? n : 1, sizeof *p->items);
    if (!p->items) {
        dq_dead_letters_free(d, n);
        return dq__fail(c, DQ_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        dq_listed *it = &p->items[i];
        it->state = DQ_STATE_DEAD;
        it->id = d[i].id, it->reason = d[i].reason, it->error = d[i].error;
        it->payload = d[i].payload, it->payload_len = d[i].payload_len;
        it->died_ms = d[i].died_ms, it->due_ms = d[i].due_ms, it->attempts = d[i].attempts;
        memset(&d[i], 0, sizeof d[i]); /* the strings are the item's now */
    }
    p->n = n;
    dq_dead_letters_free(d, n);
    if (n == p->limit) snprintf(p->next, DQ_CURSOR_MAX + 1, "%zu", p->offset + n);
    return 0;
}

/* One page of the pending, in-flight or ready items of the keys of name
 * (the queue, or one of its shards), into *p. */
static int list_keys(dq_client *c, const char *queue, const char *name, const char *cursor, page *p) {
    int slots = p->state == DQ_STATE_PENDING || p->state == DQ_STATE_IN_FLIGHT;
    dq__keys k;
    dq__keys_init(&k, name);
    char num[2][24];
    sync_call s = {c, name, 0, 0, NULL, p, NULL};
    (void)queue;
    if (slots) {
        snprintf(num[0], sizeof num[0], "%zu", p->limit);
        snprintf(num[1], sizeof num[1], "%zu", p->cut);
        /* In flight: with the holders, so with the whole lengths too. */
        int inflight = p->state == DQ_STATE_IN_FLIGHT;
        const char *argv[7] = {k.z,    k.prefix, inflight ? "inflight" : "pending", cursor, num[0],
                               num[1], "1"};
        s.decode = decode_slots_page;
        return run_sync(&s, DQ__LUA_LIST, 1, inflight ? 6 : p->cut ? 5 : 4, argv);
    }
    snprintf(num[0], sizeof num[0], "%zu", p->offset);
    snprintf(num[1], sizeof num[1], "%zu", p->offset + p->limit - 1);
    const char *argv[4] = {"LRANGE", k.ready, num[0], num[1]};
    s.decode = decode_ready_page;
    return run_sync(&s, -1, 4, 0, argv);
}

/* A sharded queue's page: from the shard its cursor names ("S/inner"; ""
 * is shard 0 from the start), and a next cursor naming the same shard
 * further on, or the next shard from its start. */
static int list_shards(dq_client *c, const char *queue, unsigned shards, const char *cursor, page *p) {
    unsigned shard = 0;
    const char *inner = cursor;
    if (*cursor) {
        const char *slash = strchr(cursor, '/');
        shard = (unsigned)strtoul(cursor, NULL, 10);
        inner = slash ? slash + 1 : "";
        if (!slash || shard >= shards) return dq__fail(c, DQ_EINVAL, "malformed cursor: no such shard");
    }
    int slots = p->state == DQ_STATE_PENDING || p->state == DQ_STATE_IN_FLIGHT;
    if (!dq__list_cursor(slots, inner, &p->offset))
        return dq__fail(c, DQ_EINVAL,
                        "malformed cursor: give the next cursor a page of this state printed");
    char name[DQ__SHARD_NAME_MAX + 1];
    if (dq__shard_named(c, queue, shard, shards, name) != 0) return DQ_EPROTO;
    char next[DQ_CURSOR_MAX + 1] = "";
    char *caller = p->next;
    p->next = next;
    int rc = list_keys(c, queue, name, inner, p);
    p->next = caller;
    if (rc) return rc;
    /* The shard's inner cursor is shorter than DQ_CURSOR_MAX by far (an
     * offset or a slot and offset), but a cut cursor would page wrong:
     * refuse it rather than truncate. */
    int w = 0;
    if (next[0]) w = snprintf(caller, DQ_CURSOR_MAX + 1, "%u/%s", shard, next);
    else if (shard + 1 < shards) w = snprintf(caller, DQ_CURSOR_MAX + 1, "%u/", shard + 1);
    if (w < 0 || w > DQ_CURSOR_MAX)
        return dq__fail(c, DQ_EPROTO, "next cursor longer than %d bytes", DQ_CURSOR_MAX);
    return 0;
}

/* Cuts an item's payload that came whole to p->cut bytes, and gives every
 * item its whole size. */
static void cut_payload(const page *p, dq_listed *it) {
    if (!it->payload_full_len) it->payload_full_len = it->payload_len;
    if (p->cut && it->payload_len > p->cut) {
        it->payload_len = p->cut;
        char *less = realloc(it->payload, p->cut + 1);
        if (less) it->payload = less; /* else the larger block stays: still valid */
        ((char *)it->payload)[p->cut] = '\0';
    }
}

int dq_list(dq_client *c, const char *queue, int state, const char *cursor, size_t limit,
            dq_listed **out, size_t *n, char *next_cursor) {
    return dq_list_cut(c, queue, state, cursor, limit, 0, out, n, next_cursor);
}

int dq_list_cut(dq_client *c, const char *queue, int state, const char *cursor, size_t limit,
                size_t payload_max, dq_listed **out, size_t *n, char *next_cursor) {
    *out = NULL;
    *n = 0;
    next_cursor[0] = '\0';
    int rc = check_read(c, queue);
    if (rc) return rc;
    if (limit < 1 || limit > 1000) return dq__fail(c, DQ_EINVAL, "list between 1 and 1000 items a page");
    if (!cursor) cursor = "";
    page p = {state, NULL, 0, next_cursor, 0, limit, payload_max};
    int slots = state == DQ_STATE_PENDING || state == DQ_STATE_IN_FLIGHT;
    if (state != DQ_STATE_READY && state != DQ_STATE_DEAD && !slots)
        return dq__fail(c, DQ_EINVAL, "no such state %d", state);
    unsigned shards = 1;
    if (state == DQ_STATE_DEAD) { /* dq_dead_list pages over the shards itself */
        if (!dq__list_cursor(0, cursor, &p.offset))
            return dq__fail(c, DQ_EINVAL,
                            "malformed cursor: give the next cursor a page of this state printed");
        rc = list_dead(c, queue, &p);
    } else if ((rc = dq__shards_fetch(c, queue, &shards)) == 0) {
        if (shards > 1) rc = list_shards(c, queue, shards, cursor, &p);
        else if (!dq__list_cursor(slots, cursor, &p.offset))
            rc = dq__fail(c, DQ_EINVAL,
                          "malformed cursor: give the next cursor a page of this state printed");
        else rc = list_keys(c, queue, queue, cursor, &p);
    }
    if (rc) {
        dq_listed_free(p.items, p.n);
        next_cursor[0] = '\0';
        return rc;
    }
    for (size_t i = 0; i < p.n; i++) {
        dq_listed *it = &p.items[i];
        /* A cut envelope cannot be opened; a whole one gets the size of
         * what it opens to. dq_dead_list opened the dead. */
        if (!it->payload_full_len || it->payload_full_len == it->payload_len) {
            it->payload_full_len = 0;
            if (state != DQ_STATE_DEAD) dq__open_shown(c, queue, it->id, &it->payload, &it->payload_len);
        }
        cut_payload(&p, it);
    }
    *out = p.items;
    *n = p.n;
    return 0;
}
