/*
 * recurring.c - recurring schedules: dq_recurring_set, _remove, _pause and
 * _resume, each one call of recurring.lua on the shard the schedule's name
 * picks, _list, one call of schedules.lua per shard, and the refills of
 * cron schedules' ticks.
 *
 * Owns checking a schedule before it is sent (name, interval, cron
 * expression and zone, times, missed policy, payload), sealing its payload
 * once for all its ticks when the client holds keys (seal.c's schedule
 * binding), and reading the listing back. The schedules themselves are data in Redis
 * (lua/lib/80_recurring.lua): this file keeps nothing between calls, and
 * the ticks are turned into items by the transfers any scheduler runs, not
 * here. Scripts cannot read the tz database, so a cron schedule's ticks are
 * computed here (cron.c), REFILL_TICKS at a time: by dq_recurring_set for
 * the first ones, then by the scheduler whose transfer reports the window
 * running low (dq__recurring_refill).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char *const missed_names[3] = {"one", "skip", "all"};

/* A reply's copy: an integer, or the listing. queue: the owner (a shard
 * count refused is learned for it); shard: the keys the call went to. */
typedef struct recur_call {
    dq_client *c;
    const char *queue;
    char shard[DQ__SHARD_NAME_MAX + 1];
    int done, status;
    int64_t value;
    dq_recurring *list;
    size_t n;
} recur_call;

/* 0, or DQ_EINVAL (recorded on c) for a name no schedule can have. */
static int check_name(dq_client *c, const char *name) {
    if (name && dq__schedule_name_valid(name, strlen(name))) return 0;
    return dq__fail(c, DQ_EINVAL, "invalid schedule name '%s': use 1 to %d of A-Z a-z 0-9 _ . : -",
                    name ? name : "(null)", DQ_RECURRING_NAME_MAX);
}

void dq_recurring_list_free(dq_recurring *list, size_t n) {
    for (size_t i = 0; list && i < n; i++) {
        free(list[i].name);
        free(list[i].spec);
        free(list[i].zone);
    }
    free(list);
}

/* The listing: 12 strings per schedule (see schedules.lua). */
#define LIST_FIELDS 12

static int missed_of(const redisReply *r) {
    for (int i = 0; i < 3; i++)
        if (r->len == strlen(missed_names[i]) && memcmp(r->str, missed_names[i], r->len) == 0) return i;
    return DQ_MISSED_ONE;
}

static int read_list(recur_call *k, const redisReply *reply) {
    size_t n = reply->elements / LIST_FIELDS;
    if (reply->elements % LIST_FIELDS) return DQ_EPROTO;
    for (size_t i = 0; i < reply->elements; i++)
        if (reply->element[i]->type != REDIS_REPLY_STRING) return DQ_EPROTO;
    k->list = n ? calloc(n, sizeof *k->list) : NULL;
    if (n && !k->list) return DQ_ENOMEM;
    k->n = n;
    for (size_t i = 0; i < n; i++) {
        redisReply **f = reply->element + i * LIST_FIELDS;
        dq_recurring *s = &k->list[i];
        s->name = dq__reply_dup(f[0]);
        s->spec = dq__reply_dup(f[2]);
        s->zone = dq__reply_dup(f[3]);
        if (!s->name || !s->spec || !s->zone) return DQ_ENOMEM;
        s->bad = f[1]->len == 3 && memcmp(f[1]->str, "bad", 3) == 0;
        s->every_ms = dq__reply_int(f[4]);
        s->start_ms = dq__reply_int(f[5]);
        s->end_ms = dq__reply_int(f[6]);
        s->missed = missed_of(f[7]);
        s->paused = dq__reply_int(f[8]) == 1;
        s->next_ms = dq__reply_int(f[9]);
        s->last_ms = dq__reply_int(f[10]);
        s->payload_len = (size_t)dq__reply_int(f[11]);
    }
    return 0;
}

static void recur_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    recur_call *k = privdata;
    k->done = 1;
    k->status = code == DQ_ENOTDURABLE ? code : 0;
    if (dq__shards_relearn(k->c, k->queue, reply, NULL)) {
        k->status = DQ__ESHARDS;
    } else if (reply && reply->type == REDIS_REPLY_INTEGER) {
        k->value = reply->integer;
    } else if (reply && reply->type == REDIS_REPLY_ARRAY) {
        int rc = read_list(k, reply);
        if (rc) {
            dq_recurring_list_free(k->list, k->n);
            k->list = NULL, k->n = 0;
            k->status = dq__fail(k->c, rc, "unexpected schedule listing from Redis");
        }
    } else {
        k->status = dq__reply_failure(k->c, conn, reply, code, k->queue);
    }
}

/* Runs recurring.lua's op with args[0..nargs) after it (lens: their
 * lengths, NULL for strings) on the shard of the schedule args[0] (picked
 * by its name, as an offer's by its id: a queue of one shard is its own),
 * as "op/COUNT", so a client routing by a stale shard count is refused,
 * learns the count and routes again. */
static int recur_run(dq_client *c, const char *queue, const char *op, int nargs, const char **args,
                     const size_t *lens, recur_call *k) {
    memset(k, 0, sizeof *k);
    int rc = dq__not_in_callback(c);
    if (!rc) rc = dq__check_queue(c, queue);
    if (rc) return rc;
    for (int round = 0;; round++) {
        dq__shard_at at;
        rc = dq__shard_for_id(c, queue, args[0], round, &at, NULL);
        if (rc) return rc;
        char opc[48];
        snprintf(opc, sizeof opc, "%s/%s", op, at.count);
        const char *argv[16] = {at.k.z, at.k.counters, at.k.prefix, at.k.chan, opc};
        size_t argvlen[16];
        for (int i = 0; i < nargs; i++) argv[5 + i] = args[i];
        for (int i = 0; i < 5 + nargs; i++) argvlen[i] = i >= 5 && lens ? lens[i - 5] : strlen(argv[i]);
        memset(k, 0, sizeof *k);
        k->c = c;
        k->queue = queue;
        memcpy(k->shard, at.name, sizeof k->shard);
        rc = dq__op_eval(c, at.name, DQ__ROUTE_WRITE, DQ__LUA_RECURRING, 2, 3 + nargs, argv, argvlen,
                         recur_reply, k);
        if (rc) return rc;
        dq__wait(c, &k->done);
        if (k->status != DQ__ESHARDS) return k->status;
    }
}

/* "every 90s": the interval in its largest whole unit. */
static void every_text(int64_t ms, char *out, size_t size) {
    static const struct {
        int64_t ms;
        const char *unit;
    } units[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}, {1, "ms"}};
    size_t i = 0;
    while (ms % units[i].ms) i++;
    snprintf(out, size, "every %" PRId64 "%s", ms / units[i].ms, units[i].unit);
}

static int check_spec(dq_client *c, const char *name, const dq_recurring_spec *sp) {
    int rc = check_name(c, name);
    if (rc) return rc;
    if (!sp) return dq__fail(c, DQ_EINVAL, "no schedule");
    if (!sp->cron && (sp->every_ms < DQ_RECURRING_EVERY_MIN_MS || sp->every_ms > DQ_DUE_MAX_MS))
        return dq__fail(c, DQ_EINVAL, "invalid interval %" PRId64 " ms: at least %d ms", sp->every_ms,
                        DQ_RECURRING_EVERY_MIN_MS);
    if (sp->start_ms < 0 || sp->start_ms > DQ_DUE_MAX_MS || sp->end_ms < 0 || sp->end_ms > DQ_DUE_MAX_MS)
        return dq__fail(c, DQ_EINVAL, "start or end time out of range (0 to %" PRId64 " ms)",
                        DQ_DUE_MAX_MS);
    if (sp->missed < DQ_MISSED_ONE || sp->missed > DQ_MISSED_ALL)
        return dq__fail(c, DQ_EINVAL, "unknown missed policy %d", sp->missed);
    if (sp->payload_len > c->opt.max_payload)
        return dq__fail(c, DQ_ETOOBIG, "payload is %zu bytes, limit is %zu", sp->payload_len,
                        c->opt.max_payload);
    if (sp->payload_len && !sp->payload) return dq__fail(c, DQ_EINVAL, "payload is NULL");
    /* As for an offer: a client with keys seals it (dq_recurring_set). */
    if (!c->keyring && sp->payload_len && dq__looks_sealed(sp->payload, sp->payload_len))
        return dq__fail(c, DQ_EINVAL,
                        "the payload starts as a sealed payload does (\\0dqs): set it "
                        "with a key file, or change its first bytes");
    return 0;
}

/* ------------------------------------------------------------ cron ticks */

#define REFILL_TICKS 64

/* A cron expression and its zone, checked; *z to free with dq__zone_free. */
static int cron_load(dq_client *c, const char *expr, const char *zone, dq__cron *cr, dq__zone *z) {
    char err[256];
    memset(z, 0, sizeof *z);
    if (dq__cron_parse(expr, cr, err, sizeof err) != 0)
        return dq__fail(c, DQ_EINVAL, "invalid cron expression '%.100s': %s", expr, err);
    if (dq__zone_load(NULL, zone, z, err, sizeof err) != 0) return dq__fail(c, DQ_EINVAL, "%s", err);
    return 0;
}

/* Up to max ticks after after (none past stop, if stop > 0) into out. */
static size_t cron_ticks(const dq__cron *cr, const dq__zone *z, int64_t after, int64_t stop,
                         int64_t *out, size_t max) {
    size_t n = 0;
    while (n < max) {
        int64_t t = dq__cron_next(cr, z, after);
        if (t < 0 || t > DQ_DUE_MAX_MS || (stop > 0 && t > stop)) break;
        out[n++] = after = t;
    }
    return n;
}

/* Sends 'refill NAME WLAST ticks...' (see recurring.lua). */
static int send_refill(dq_client *c, const char *queue, const char *name, int64_t wlast,
                       const int64_t *ticks, size_t n, dq__reply_fn *fn, void *privdata) {
    dq__keys keys;
    dq__keys_init(&keys, queue);
    char text[REFILL_TICKS + 1][24];
    const char *argv[7 + REFILL_TICKS] = {keys.z,   keys.counters, keys.prefix, keys.chan,
                                          "refill", name,          text[0]};
    size_t lens[7 + REFILL_TICKS];
    snprintf(text[0], sizeof text[0], "%" PRId64, wlast);
    for (size_t i = 0; i < n; i++) {
        snprintf(text[i + 1], sizeof text[i + 1], "%" PRId64, ticks[i]);
        argv[7 + i] = text[i + 1];
    }
    for (size_t i = 0; i < 7 + n; i++) lens[i] = strlen(argv[i]);
    return dq__op_eval(c, queue, DQ__ROUTE_WRITE, DQ__LUA_RECURRING, 2, (int)(5 + n), argv, lens, fn,
                       privdata);
}

/* One schedule of a transfer's refill list (4 strings). */
static void refill_one(dq_client *c, const char *queue, redisReply **f) {
    char name[DQ_RECURRING_NAME_MAX + 1], expr[256], zone[256];
    if (f[0]->len >= sizeof name || f[1]->len >= sizeof expr || f[2]->len >= sizeof zone) return;
    memcpy(name, f[0]->str, f[0]->len), name[f[0]->len] = '\0';
    memcpy(expr, f[1]->str, f[1]->len), expr[f[1]->len] = '\0';
    memcpy(zone, f[2]->str, f[2]->len), zone[f[2]->len] = '\0';
    dq__cron cr;
    dq__zone z;
    int64_t ticks[REFILL_TICKS], wlast = dq__reply_int(f[3]);
    if (cron_load(c, expr, zone, &cr, &z) != 0) {
        dq__log(c, "queue %s: schedule %s: %s", queue, name, c->errstr);
        return;
    }
    size_t n = cron_ticks(&cr, &z, wlast, 0, ticks, REFILL_TICKS);
    dq__zone_free(&z);
    if (send_refill(c, queue, name, wlast, ticks, n, dq__ignore_reply, NULL) != 0)
        dq__log(c, "queue %s: schedule %s: cannot send its next ticks: %s", queue, name, c->errstr);
}

void dq__recurring_refill(dq_client *c, const char *queue, const redisReply *list) {
    if (!list || list->type != REDIS_REPLY_ARRAY || list->elements % 4) return;
    for (size_t i = 0; i < list->elements; i++)
        if (list->element[i]->type != REDIS_REPLY_STRING) return;
    for (size_t i = 0; i + 4 <= list->elements && i < 4 * 100; i += 4)
        refill_one(c, queue, list->element + i);
}

/* The first ticks of a cron schedule just set (the server's time now), by
 * its expression and zone as dq_recurring_set loaded them. */
static int cron_first(dq_client *c, const char *queue, const char *shard, const char *name,
                      const dq_recurring_spec *sp, const dq__cron *cr, const dq__zone *z, int64_t now,
                      int64_t *next_ms) {
    int64_t ticks[REFILL_TICKS];
    int64_t after = sp->start_ms > now ? sp->start_ms - 1 : now;
    size_t n = cron_ticks(cr, z, after, sp->end_ms, ticks, REFILL_TICKS);
    recur_call k;
    memset(&k, 0, sizeof k);
    k.c = c;
    k.queue = queue;
    int rc = send_refill(c, shard, name, -1, ticks, n, recur_reply, &k);
    if (rc) return rc;
    dq__wait(c, &k.done);
    if ((k.status == 0 || k.status == DQ_ENOTDURABLE) && next_ms) *next_ms = k.value;
    return k.status;
}

/* The payload a schedule stores: sp's, or with keys its envelope, sealed
 * once for every tick (bound to the queue and the schedule's name, not to
 * a shard nor an item: seal.c). *env gets the envelope to free, or NULL. */
static int stored_payload(dq_client *c, const char *queue, const char *name, const dq_recurring_spec *sp,
                          const char **payload, size_t *len, unsigned char **env) {
    *env = NULL;
    *payload = sp->payload_len ? sp->payload : "";
    *len = sp->payload_len;
    if (!c->keyring) return 0;
    int rc = dq__check_queue(c, queue); /* its name goes into the binding */
    if (rc) return rc;
    if (dq__seal_schedule(c->keyring, queue, name, *payload, *len, env, len) != 0)
        return dq__fail(c, DQ_ENOMEM, "out of memory");
    *payload = (const char *)*env;
    return 0;
}

/* Runs 'set NAME EVERY_MS START_MS STOP_MS MISSED TEXT PAYLOAD [cron ZONE]'
 * (see recurring.lua) for sp: the arguments both kinds of schedule send,
 * every_ms 0 and with 'cron ZONE' (zone not NULL) for a cron schedule,
 * text its expression or its interval's "every 90s". The answer is in *k. */
static int run_set(dq_client *c, const char *queue, const char *name, const dq_recurring_spec *sp,
                   int64_t every_ms, const char *text, const char *zone, const char *payload,
                   size_t payload_len, recur_call *k) {
    char every[24], start[24], end[24];
    snprintf(every, sizeof every, "%" PRId64, every_ms);
    snprintf(start, sizeof start, "%" PRId64, sp->start_ms);
    snprintf(end, sizeof end, "%" PRId64, sp->end_ms);
    const char *args[9] = {name, every,   start,  end, missed_names[sp->missed],
                           text, payload, "cron", zone};
    int nargs = zone ? 9 : 7;
    size_t lens[9];
    for (int i = 0; i < nargs; i++) lens[i] = i == 6 ? payload_len : strlen(args[i]); /* any bytes */
    return recur_run(c, queue, "set", nargs, args, lens, k);
}

/* 'set' with 'cron ZONE', then the first ticks (of cr in z). */
static int set_cron(dq_client *c, const char *queue, const char *name, const dq_recurring_spec *sp,
                    const dq__cron *cr, const dq__zone *z, const char *payload, size_t payload_len,
                    int64_t *next_ms) {
    const char *zone = sp->zone ? sp->zone : "UTC";
    recur_call k;
    int rc = run_set(c, queue, name, sp, 0, sp->cron, zone, payload, payload_len, &k);
    if (rc && rc != DQ_ENOTDURABLE) return rc;
    return cron_first(c, queue, k.shard, name, sp, cr, z, k.value, next_ms);
}

/* 'set' of an 'every' schedule. */
static int set_every(dq_client *c, const char *queue, const char *name, const dq_recurring_spec *spec,
                     const char *payload, size_t payload_len, int64_t *next_ms) {
    char text[48];
    every_text(spec->every_ms, text, sizeof text);
    recur_call k;
    int rc = run_set(c, queue, name, spec, spec->every_ms, text, NULL, payload, payload_len, &k);
    if ((rc == 0 || rc == DQ_ENOTDURABLE) && next_ms) *next_ms = k.value;
    return rc;
}

/* ------------------------------------------------------------ the calls */

int dq_recurring_set(dq_client *c, const char *queue, const char *name, const dq_recurring_spec *spec,
                     int64_t *next_ms) {
    dq__cron cr;
    dq__zone z = {0};
    int rc = check_spec(c, name, spec);
    /* A cron expression and zone are checked before anything is written,
     * and loaded once: the first ticks come from them too. */
    if (!rc && spec->cron) rc = cron_load(c, spec->cron, spec->zone ? spec->zone : "UTC", &cr, &z);
    const char *payload;
    size_t payload_len;
    unsigned char *env = NULL;
    if (!rc) rc = stored_payload(c, queue, name, spec, &payload, &payload_len, &env);
    if (!rc) {
        dq__registry_note(c, queue); /* listed by serve and metrics, as a queue offered to */
        rc = spec->cron ? set_cron(c, queue, name, spec, &cr, &z, payload, payload_len, next_ms)
                        : set_every(c, queue, name, spec, payload, payload_len, next_ms);
    }
    dq__zone_free(&z);
    free(env);
    return rc;
}

/* remove, pause and resume: 1, 0 for no such schedule, or a code. */
static int recur_named(dq_client *c, const char *queue, const char *op, const char *name) {
    int rc = check_name(c, name);
    if (rc) return rc;
    recur_call k;
    rc = recur_run(c, queue, op, 1, &name, NULL, &k);
    return rc ? rc : (int)k.value;
}

int dq_recurring_remove(dq_client *c, const char *queue, const char *name) {
    return recur_named(c, queue, "remove", name);
}

int dq_recurring_pause(dq_client *c, const char *queue, const char *name) {
    return recur_named(c, queue, "pause", name);
}

int dq_recurring_resume(dq_client *c, const char *queue, const char *name) {
    return recur_named(c, queue, "resume", name);
}

/* One shard's listing (schedules.lua on shard i of shards) into k. */
static int list_shard(dq_client *c, const char *queue, unsigned i, unsigned shards, recur_call *k) {
    dq__shard_at at;
    memset(k, 0, sizeof *k);
    int rc = dq__shard_at_init(c, &at, queue, i, shards, shards);
    if (rc) return rc;
    const char *argv[2] = {at.k.z, at.k.prefix};
    size_t argvlen[2] = {strlen(at.k.z), strlen(at.k.prefix)};
    k->c = c;
    k->queue = queue;
    rc = dq__op_eval(c, at.name, 0, DQ__LUA_SCHEDULES, 1, 1, argv, argvlen, recur_reply, k);
    if (rc) return rc;
    dq__wait(c, &k->done);
    return k->status;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const dq_recurring *)a)->name, ((const dq_recurring *)b)->name);
}

/* Appends k's entries to *list (*n of them); k's array is freed. */
static int list_append(dq_recurring **list, size_t *n, recur_call *k) {
    if (!k->n) return 0;
    dq_recurring *grown = realloc(*list, (*n + k->n) * sizeof **list);
    if (!grown) {
        dq_recurring_list_free(k->list, k->n);
        return DQ_ENOMEM;
    }
    memcpy(grown + *n, k->list, k->n * sizeof *grown);
    free(k->list);
    *list = grown;
    *n += k->n;
    return 0;
}

/* The listing is schedules.lua, a no-writes function (FCALL_RO): a user
 * with read-only rights on the queue's keys may list. A sharded queue's
 * schedules are in its shards (each in the one its name picks): listed
 * shard by shard, by the count its own keys hold, then sorted by name. */
int dq_recurring_list(dq_client *c, const char *queue, dq_recurring **list, size_t *n) {
    *list = NULL;
    *n = 0;
    int rc = dq__not_in_callback(c);
    if (!rc) rc = dq__check_queue(c, queue);
    unsigned shards = 1;
    if (!rc) rc = dq__shards_fetch(c, queue, &shards);
    if (!rc && shards < 1)
        rc = dq__fail(c, DQ_EBUSY, "queue %s is changing its shard count: try again", queue);
    int not_durable = 0;
    for (unsigned i = 0; !rc && i < shards; i++) {
        recur_call k;
        rc = list_shard(c, queue, i, shards, &k);
        if (rc == DQ_ENOTDURABLE) not_durable = 1, rc = 0;
        if (!rc) rc = list_append(list, n, &k);
        else dq_recurring_list_free(k.list, k.n);
    }
    if (rc) {
        if (rc == DQ_ENOMEM) dq__fail(c, rc, "out of memory");
        dq_recurring_list_free(*list, *n);
        *list = NULL;
        *n = 0;
        return rc;
    }
    if (*n > 1) qsort(*list, *n, sizeof **list, by_name);
    return not_durable ? DQ_ENOTDURABLE : 0;
}
