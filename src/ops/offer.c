/*
 * offer.c - offers: dq_offer_async (gathered, sent before the loop polls),
 * dq_offer (one, synchronous) and dq_offer_many (a pipelined batch). Each
 * script call (lua/offer.lua) offers up to CHUNK_ITEMS items on the node
 * that serves the queue's shard; items of a sharded queue go to their ids'
 * shards, and a call refused for the shard count is routed again.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int check_item(dq_client *c, const dq_item *item) {
    if (!item) return dq__fail(c, DQ_EINVAL, "no item");
    if (item->id && dq__check_id(c, item->id)) return DQ_EINVAL;
    if (item->payload_len > c->opt.max_payload)
        return dq__fail(c, DQ_ETOOBIG, "payload is %zu bytes, limit is %zu", item->payload_len,
                        c->opt.max_payload);
    if (item->payload_len && !item->payload) return dq__fail(c, DQ_EINVAL, "payload is NULL");
    if (item->due_ms < 0 || item->due_ms > DQ_DUE_MAX_MS || item->delay_ms < 0 ||
        item->delay_ms > DQ_DUE_MAX_MS)
        return dq__fail(c, DQ_EINVAL, "delay or due time out of range (0 to %" PRId64 " ms)",
                        DQ_DUE_MAX_MS);
    if (item->flags & ~DQ_OFFER_KEEP) return dq__fail(c, DQ_EINVAL, "unknown offer flags");
    /* A payload that looks sealed but is not would be taken for one (and
     * set aside by every consumer with keys): a client without keys may not
     * offer it (its first byte is NUL, so no text payload is refused). */
    if (!c->keyring && item->payload_len && dq__looks_sealed(item->payload, item->payload_len))
        return dq__fail(c, DQ_EINVAL,
                        "the payload starts as a sealed payload does (\\0dqs): offer it "
                        "with a key file, or change its first bytes");
    return 0;
}

/* ------------------------------------------------------------ offer */

/* What one script call carries at most: items, payload bytes, and work in
 * cost units (item_cost). Big enough to pay the call's fixed cost (about
 * 20 us of Redis time: counters, bounds, TIME, reply) once per many items,
 * small enough never to hold Redis for long: about 1.5 ms of this machine's
 * Redis at most, whichever path the items take (docs/benchmarks.md, issue
 * 42). */
#define CHUNK_ITEMS 250
#define CHUNK_BYTES (512u * 1024u)
#define CHUNK_COST 500u
/* lua/lib/65_wheel.lua's WHEEL_NEAR: an item due sooner goes to a near list
 * (lua/lib/67_near.lua). Only sizes calls here: a wrong guess costs time,
 * never correctness. */
#define NEAR_MS 40000

/* An item's share of a call's work, in CHUNK_COST units: 2 for an item of a
 * generated id due NEAR_MS or more ahead, which the end of the slots or the
 * timing wheel takes; 1 more for one due sooner, or at an absolute time (the
 * client does not read the server's clock to tell): a near list's append
 * costs Redis about 1.3 times as much (a list a millisecond: docs/
 * benchmarks.md, issue 42); 1 more for an id given, which the script looks
 * up first. So a call holds 250 to 125 items, about 1.3 ms of Redis. */
static unsigned item_cost(const dq_item *it) {
    unsigned cost = 2;
    if (it->due_ms > 0 || it->delay_ms < NEAR_MS) cost += 1;
    if (it->id) cost += 1;
    return cost;
}

/* One script call offering n items. done runs once with its results. */
typedef struct offer_chunk offer_chunk;
typedef void chunk_done_fn(offer_chunk *oc, int status);
struct offer_chunk {
    dq_client *c;
    char queue[DQ_QUEUE_MAX + 1]; /* the queue (not the shard) */
    size_t n;
    dq_offer_result *results; /* n, ids filled in before sending */
    chunk_done_fn *done;
    void *privdata;
};

static void chunk_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    offer_chunk *oc = privdata;
    dq_client *c = oc->c;
    int status = code; /* 0, or DQ_ENOTDURABLE with the results */
    /* The reply: the server time, then status, due time and state per item. */
    if (dq__shards_relearn(c, oc->queue, reply, NULL)) {
        status = DQ__ESHARDS;
    } else if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != 1 + 3 * oc->n) {
        status = dq__reply_failure(c, conn, reply, code, oc->queue);
    } else {
        for (size_t i = 0; i < oc->n; i++) {
            redisReply **f = reply->element + 1 + 3 * i;
            dq_offer_result *r = &oc->results[i];
            r->status = (int)dq__reply_int(f[0]);
            r->due_ms = dq__reply_int(f[1]);
            int state = (int)dq__reply_int(f[2]);
            r->state = state == 3 ? DQ_STATE_IN_FLIGHT : state == 2 ? DQ_STATE_READY : DQ_STATE_PENDING;
        }
    }
    c->callback_depth++;
    oc->done(oc, status);
    c->callback_depth--;
    free(oc->results);
    free(oc);
}

/* Sends items[0..n-1] (already checked) in one call, to shard `shard` of
 * `shards` (the count the client routes by, which the script checks): ids[i]
 * is item i's id, generated already when items[i].id is NULL. Returns 0
 * (done will run) or a negative code (it will not). One allocation holds
 * the argument arrays and the numbers' text; no printf on the way (this is
 * the path of every offer, one at a time included). */
static int send_chunk(dq_client *c, const char *queue, unsigned shard, unsigned shards,
                      const dq_item *items, const char *const *ids, size_t n, chunk_done_fn *done,
                      void *privdata) {
    enum { HEAD = 7, PER_ITEM = 5, MS_LEN = 24, BUCKET_LEN = 8 };
    char name[DQ__SHARD_NAME_MAX + 1], count[24];
    if (dq__shard_named(c, queue, shard, shards, name) != 0) return DQ_EPROTO;
    size_t count_len = (size_t)dq__fmt_i64(count, shards);
    offer_chunk *oc = calloc(1, sizeof *oc);
    size_t argc = HEAD + PER_ITEM * n;
    void *mem = malloc(argc * (sizeof(const char *) + sizeof(size_t)) + n * (MS_LEN + BUCKET_LEN));
    unsigned char **sealed = c->keyring ? calloc(n, sizeof *sealed) : NULL; /* the envelopes */
    if (oc) oc->results = calloc(n, sizeof *oc->results);
    int rc = DQ_ENOMEM;
    if (oc && oc->results && mem && (sealed || !c->keyring)) {
        rc = 0; /* until an envelope cannot be made */
        const char **argv = mem;
        size_t *lens = (size_t *)(argv + argc);
        char *text = (char *)(lens + argc);
        oc->c = c, oc->n = n, oc->done = done, oc->privdata = privdata;
        snprintf(oc->queue, sizeof oc->queue, "%s", queue);
        const dq__keys *k = dq__keys_of(c, name);
        const char *head[HEAD] = {k->z, k->ready, k->counters, k->signal, k->prefix, k->chan, count};
        for (int i = 0; i < HEAD; i++) argv[i] = head[i], lens[i] = strlen(head[i]);
        lens[HEAD - 1] = count_len;
        dq__keyring_use(c->keyring);
        const char *why = "out of memory"; /* when rc is set below */
        for (size_t i = 0; i < n; i++) {
            const dq_item *it = &items[i];
            char *id = oc->results[i].id, *ms = text, *bucket = text + MS_LEN;
            text += MS_LEN + BUCKET_LEN;
            size_t idl = strlen(ids[i]); /* checked: at most DQ_ID_MAX */
            memcpy(id, ids[i], idl + 1);
            int abs = it->due_ms > 0;
            /* flags (see lua/offer.lua): 1 absolute, 2 keep, 4 fresh id */
            static const char *const digit[8] = {"0", "1", "2", "3", "4", "5", "6", "7"};
            int flags = abs | ((it->flags & DQ_OFFER_KEEP) ? 2 : 0) | (it->id ? 0 : 4);
            const char **a = argv + HEAD + PER_ITEM * i;
            size_t *l = lens + HEAD + PER_ITEM * i;
            a[0] = id, l[0] = idl;
            a[1] = it->payload_len ? it->payload : "", l[1] = it->payload_len;
            if (sealed &&
                dq__seal(c->keyring, queue, id, a[1], it->payload_len, &sealed[i], &l[1]) != 0) {
                rc = DQ_ENOMEM;
                break;
            }
            if (sealed) a[1] = (const char *)sealed[i];
            a[2] = ms, l[2] = dq__fmt_i64(ms, abs ? it->due_ms : it->delay_ms);
            a[3] = digit[flags], l[3] = 1;
            int b = dq__id_bucket(id);
            if (b < 0) {
                rc = DQ_ENOMEM, why = DQ__ID_BUCKET_ERROR;
                break;
            }
            a[4] = bucket, l[4] = dq__fmt_i64(bucket, b);
        }
        dq__keyring_done(c->keyring);
        if (rc == 0) dq__registry_note(c, queue); /* a call that fails here writes nothing */
        rc = rc == 0 ? dq__eval(c, name, DQ__ROUTE_WRITE, DQ__LUA_OFFER, 4, (int)argc - 4, argv, lens,
                                chunk_reply, oc)
                     : dq__fail(c, DQ_ENOMEM, "%s", why);
    } else {
        dq__fail(c, DQ_ENOMEM, "out of memory");
    }
    for (size_t i = 0; sealed && i < n; i++) free(sealed[i]);
    free(sealed);
    free(mem);
    if (rc && oc) {
        free(oc->results);
        free(oc);
    }
    return rc;
}

/* dq_offer_async gathers offers here, and the batch goes out as one script
 * call when the loop is about to poll (or sooner: when full, for another
 * queue, or before any other command): pipelined offers then cost what
 * dq_offer_many costs. Each offer keeps its own callback. */
typedef struct pending_offer {
    dq_item item;
    char id[DQ_ID_MAX + 1]; /* given or generated: the shard comes from it */
    int fresh;              /* generated                                   */
    void *payload; /* a copy, freed once sent */
    dq_offer_cb *cb;
    void *privdata;
} pending_offer;

struct dq__offer_batch {
    char queue[DQ_QUEUE_MAX + 1];
    size_t n, bytes, cost;
    pending_offer offers[CHUNK_ITEMS];
};

/* Gathered offers sent in one script call. It owns their payload copies
 * until the reply: a call refused for the shard count wrote nothing, and
 * its offers are routed again by the count it told (round counts those
 * tries, up to DQ__SHARD_ROUNDS), as dq_offer and dq_offer_many do. */
typedef struct sent_batch {
    char queue[DQ_QUEUE_MAX + 1];
    int round;
    size_t n;
    pending_offer offers[];
} sent_batch;

static void send_offers(dq_client *c, const char *queue, pending_offer *offers, size_t n, int round);

/* Reports status to offers[0..n-1]'s callbacks (results[i] for offer i, or
 * none) and frees their payloads. */
static void report_offers(dq_client *c, pending_offer *offers, size_t n, int status,
                          const dq_offer_result *results) {
    c->callback_depth++;
    for (size_t i = 0; i < n; i++) {
        offers[i].cb(c, status, results ? &results[i] : NULL, offers[i].privdata);
        free(offers[i].payload);
        offers[i].payload = NULL;
    }
    c->callback_depth--;
}

static void sent_batch_done(offer_chunk *oc, int status) {
    sent_batch *sb = oc->privdata;
    if (status == DQ__ESHARDS) { /* nothing written: route again */
        send_offers(oc->c, sb->queue, sb->offers, sb->n, sb->round + 1);
    } else {
        int made = status == 0 || status == DQ_ENOTDURABLE;
        report_offers(oc->c, sb->offers, sb->n, status, made ? oc->results : NULL);
    }
    free(sb); /* its payloads were moved or freed */
}

static void on_prepare(struct ev_loop *loop, ev_prepare *w, int revents) {
    (void)loop, (void)revents;
    dq__offers_flush(w->data);
}

/* Sends the k offers of offers[0..n-1] whose shard (of[i]) is `shard`, of
 * `shards`, in one call, taking their payloads; if it cannot, their
 * callbacks get the failure. */
static void send_shard(dq_client *c, const char *queue, pending_offer *offers, const unsigned *of,
                       size_t n, size_t k, unsigned shard, unsigned shards, int round) {
    sent_batch *sb = malloc(sizeof *sb + k * sizeof sb->offers[0]);
    if (!sb) {
        int rc = dq__fail(c, DQ_ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++)
            if (of[i] == shard) report_offers(c, &offers[i], 1, rc, NULL);
        return;
    }
    snprintf(sb->queue, sizeof sb->queue, "%s", queue);
    sb->round = round;
    sb->n = 0;
    dq_item items[CHUNK_ITEMS];
    const char *ids[CHUNK_ITEMS];
    for (size_t i = 0; i < n; i++) {
        if (of[i] != shard) continue;
        pending_offer *q = &sb->offers[sb->n];
        *q = offers[i];
        offers[i].payload = NULL; /* the batch owns it now */
        items[sb->n] = q->item;
        items[sb->n].id = q->fresh ? NULL : q->id; /* NULL: the script learns it is new */
        items[sb->n].payload = q->payload;
        ids[sb->n++] = q->id;
    }
    int rc = send_chunk(c, queue, shard, shards, items, ids, sb->n, sent_batch_done, sb);
    if (rc) { /* accepted already: report the failure through each callback */
        report_offers(c, sb->offers, sb->n, rc, NULL);
        free(sb);
    }
}

/* Sends offers[0..n-1] (at most CHUNK_ITEMS), one call per shard they
 * fall in, by the count the client knows now. Takes every payload: each
 * goes out with a call or is freed after its callback. */
static void send_offers(dq_client *c, const char *queue, pending_offer *offers, size_t n, int round) {
    unsigned shards;
    int rc = dq__shards_round(c, queue, round, &shards);
    if (rc) {
        report_offers(c, offers, n, rc, NULL);
        return;
    }
    unsigned of[CHUNK_ITEMS];         /* each offer's shard, computed once */
    size_t per[DQ__SHARDS_MAX] = {0}; /* offers per shard                  */
    for (size_t i = 0; i < n; i++) {
        of[i] = dq__shard_of_id(offers[i].id, strlen(offers[i].id), shards);
        per[of[i]]++;
    }
    for (unsigned s = 0; s < shards; s++)
        if (per[s]) send_shard(c, queue, offers, of, n, per[s], s, shards, round);
}

void dq__offers_flush(dq_client *c) {
    struct dq__offer_batch *b = c->offers;
    if (!b || c->flushing) return;
    c->offers = NULL;
    ev_prepare_stop(c->loop, &c->offers_flush);
    c->flushing = 1;
    send_offers(c, b->queue, b->offers, b->n, 0);
    c->flushing = 0;
    free(b); /* send_offers took the payloads */
}

static int check_offer(dq_client *c, const char *queue, const dq_item *item) {
    int bad = dq__check_queue(c, queue);
    return bad ? bad : check_item(c, item);
}

/* An offer is never queued in the client while Redis is away. */
static int check_connected(dq_client *c, const char *queue) {
    if (!c->router) return dq__fail(c, DQ_ECONNECT, "not connected: call dq_connect first");
    return dq__route_check(c, dq__queue_slot(queue));
}

int dq_offer_async(dq_client *c, const char *queue, const dq_item *item, dq_offer_cb *cb,
                   void *privdata) {
    int bad = check_offer(c, queue, item);
    if (bad) return bad;
    if (!cb) return dq__fail(c, DQ_EINVAL, "no callback");
    if ((bad = check_connected(c, queue)) != 0) return bad;
    struct dq__offer_batch *b = c->offers;
    if (b && (strcmp(b->queue, queue) != 0 || b->n == CHUNK_ITEMS ||
              b->bytes + item->payload_len > CHUNK_BYTES || b->cost + item_cost(item) > CHUNK_COST)) {
        dq__offers_flush(c);
        b = NULL;
    }
    if (!b) {
        b = malloc(sizeof *b);
        if (!b) return dq__fail(c, DQ_ENOMEM, "out of memory");
        snprintf(b->queue, sizeof b->queue, "%s", queue);
        b->n = b->bytes = b->cost = 0;
    }
    pending_offer *p = &b->offers[b->n];
    p->payload = malloc(item->payload_len ? item->payload_len : 1);
    if (!p->payload) {
        if (!c->offers) free(b);
        return dq__fail(c, DQ_ENOMEM, "out of memory");
    }
    if (item->payload_len) memcpy(p->payload, item->payload, item->payload_len);
    p->item = *item;
    /* The id is fixed now (generated if need be); the script learns whether
     * it was generated (fresh). */
    p->fresh = item->id == NULL;
    if (item->id) snprintf(p->id, sizeof p->id, "%s", item->id);
    else dq__id_generate(p->id);
    p->cb = cb, p->privdata = privdata;
    b->n++;
    b->bytes += item->payload_len;
    b->cost += item_cost(item);
    c->offers = b;
    c->offers_send = dq__offers_flush;
    if (!ev_is_active(&c->offers_flush)) {
        ev_prepare_init(&c->offers_flush, on_prepare);
        c->offers_flush.data = c;
        ev_prepare_start(c->loop, &c->offers_flush);
    }
    return 0;
}

typedef struct sync_offer {
    int done, status;
    dq_offer_result *out;
} sync_offer;

static void sync_chunk_done(offer_chunk *oc, int status) {
    sync_offer *s = oc->privdata;
    s->status = status;
    if (s->out) {
        if (status == 0 || status == DQ_ENOTDURABLE) *s->out = oc->results[0];
        else s->out->status = status;
    }
    s->done = 1;
}

int dq_offer(dq_client *c, const char *queue, const dq_item *item, dq_offer_result *result) {
    if (dq__not_in_callback(c)) return DQ_EBUSY;
    int bad = check_offer(c, queue, item);
    if (!bad) bad = check_connected(c, queue);
    if (bad) return bad;
    char made[DQ_ID_MAX + 1];
    const char *id = item->id;
    if (!id) dq__id_generate(made), id = made; /* the same id in every round */
    /* Straight to one script call: nothing to gather, nothing to copy. */
    for (int round = 0;; round++) {
        unsigned shards;
        int rc = dq__shards_round(c, queue, round, &shards);
        if (rc) return rc;
        sync_offer s = {0, 0, result};
        rc = send_chunk(c, queue, dq__shard_of_id(id, strlen(id), shards), shards, item, &id, 1,
                        sync_chunk_done, &s);
        if (rc) return rc;
        dq__wait(c, &s.done);
        if (s.status != DQ__ESHARDS) return s.status;
    }
}

/* A pipelined batch: chunks in flight, and where each chunk's results go. */
typedef struct batch {
    int pending, accepted, first_error, not_durable;
    size_t *again, nagain; /* items a script refused for the shard count */
    char first_errstr[DQ__ERRSTR_MAX];
} batch;

typedef struct batch_chunk {
    batch *b;
    dq_offer_result *results; /* NULL, or the caller's results             */
    size_t map[CHUNK_ITEMS];  /* the chunk's items: their index in the batch */
} batch_chunk;

static void note_error(batch *b, int code, const char *why) {
    if (b->first_error) return;
    b->first_error = code;
    snprintf(b->first_errstr, sizeof b->first_errstr, "%s", why);
}

static void batch_done(offer_chunk *oc, int status) {
    batch_chunk *bc = oc->privdata;
    batch *b = bc->b;
    int made = status == 0 || status == DQ_ENOTDURABLE;
    if (status == DQ__ESHARDS) {
        for (size_t i = 0; i < oc->n; i++) b->again[b->nagain++] = bc->map[i];
    } else {
        if (made) b->accepted += (int)oc->n;
        if (status == DQ_ENOTDURABLE && !b->not_durable) {
            b->not_durable = 1;
            snprintf(b->first_errstr, sizeof b->first_errstr, "%s", oc->c->errstr);
        } else if (!made) {
            note_error(b, status, oc->c->errstr);
        }
        for (size_t i = 0; bc->results && i < oc->n; i++) {
            dq_offer_result *r = &bc->results[bc->map[i]];
            *r = oc->results[i];
            if (!made) r->status = status;
        }
    }
    b->pending--;
    free(bc);
}

/* How many of items[0..n-1] fit in one chunk. */
static size_t chunk_len(const dq_item *items, size_t n) {
    size_t len = 0, bytes = 0, cost = 0;
    while (len < n && len < CHUNK_ITEMS) {
        bytes += items[len].payload_len;
        cost += item_cost(&items[len]);
        if (len > 0 && (bytes > CHUNK_BYTES || cost > CHUNK_COST)) break;
        len++;
    }
    return len;
}

/* The status of a result whose item a failure kept from being sent. */
#define NOT_SENT INT_MIN

/* The arrays one dq_offer_many works with, n each. */
typedef struct many {
    const char **ids;  /* every item's id (given or generated)        */
    char *made;        /* the generated ids' text                      */
    size_t *todo;      /* the items this round sends, by index         */
    dq_item *group;    /* one shard's items of this round, in order    */
    const char **gids; /* their ids                                    */
    size_t *gmap;      /* their indices                                */
} many;

static void many_free(many *m, batch *b) {
    free(m->ids), free(m->made), free(m->todo), free(m->group), free(m->gids), free(m->gmap);
    free(b->again);
}

/* Sends items todo[0..ntodo-1] of shard `shard` in chunks. Returns 0 or a
 * negative code (the items from the failed chunk on are not sent). */
static int send_group(dq_client *c, const char *queue, const dq_item *items, many *m, size_t ntodo,
                      unsigned shard, unsigned shards, batch *b, dq_offer_result *results) {
    size_t ng = 0;
    for (size_t t = 0; t < ntodo; t++) {
        size_t i = m->todo[t];
        if (shards > 1 && dq__shard_of_id(m->ids[i], strlen(m->ids[i]), shards) != shard) continue;
        m->group[ng] = items[i], m->gids[ng] = m->ids[i], m->gmap[ng++] = i;
    }
    for (size_t sent = 0; sent < ng;) {
        size_t len = chunk_len(m->group + sent, ng - sent);
        batch_chunk *bc = malloc(sizeof *bc);
        int rc = bc ? 0 : dq__fail(c, DQ_ENOMEM, "out of memory");
        if (bc) {
            bc->b = b, bc->results = results;
            memcpy(bc->map, m->gmap + sent, len * sizeof *bc->map);
            rc = send_chunk(c, queue, shard, shards, m->group + sent, m->gids + sent, len, batch_done,
                            bc);
            if (rc) free(bc);
        }
        if (rc) {
            note_error(b, rc, c->errstr);
            for (size_t j = sent; j < ng && results; j++) results[m->gmap[j]].status = rc;
            return rc;
        }
        b->pending++;
        sent += len;
        /* Out now: Redis runs this call while the next one is built. */
        dq__route_write_now(c);
    }
    return 0;
}

int dq_offer_many(dq_client *c, const char *queue, const dq_item *items, size_t n,
                  dq_offer_result *results) {
    if (dq__not_in_callback(c)) return DQ_EBUSY;
    if (dq__check_queue(c, queue)) return DQ_EINVAL;
    if (n > INT32_MAX) return dq__fail(c, DQ_EINVAL, "too many items");
    for (size_t i = 0; i < n; i++) {
        int rc = check_item(c, &items[i]);
        if (rc) {
            char why[DQ__ERRSTR_MAX];
            snprintf(why, sizeof why, "%s", c->errstr); /* dq__fail writes errstr */
            return dq__fail(c, rc, "item %zu: %s", i, why);
        }
    }
    batch b = {0};
    size_t k = n ? n : 1;
    many m = {malloc(k * sizeof *m.ids),  malloc(k * (DQ_ID_GENERATED_LEN + 1)),
              malloc(k * sizeof *m.todo), malloc(k * sizeof *m.group),
              malloc(k * sizeof *m.gids), malloc(k * sizeof *m.gmap)};
    b.again = malloc(k * sizeof *b.again);
    if (!m.ids || !m.made || !m.todo || !m.group || !m.gids || !m.gmap || !b.again) {
        many_free(&m, &b);
        return dq__fail(c, DQ_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        char *made = m.made + i * (DQ_ID_GENERATED_LEN + 1);
        if (!items[i].id) dq__id_generate(made);
        m.ids[i] = items[i].id ? items[i].id : made;
    }
    /* In due order, not array order: each call's items then share a few
     * lists and slots of due times (src/util/send_order.c). */
    dq__send_order(items, n, m.todo);
    size_t ntodo = n, sent_any = 0;
    int rc = 0;
    for (int round = 0; ntodo > 0 && !rc; round++) {
        unsigned shards;
        if ((rc = dq__shards_round(c, queue, round, &shards)) != 0) {
            note_error(&b, rc, c->errstr);
            for (size_t t = 0; t < ntodo && results; t++) results[m.todo[t]].status = rc;
            break;
        }
        b.nagain = 0;
        for (size_t t = 0; t < ntodo && results; t++) results[m.todo[t]].status = NOT_SENT;
        for (unsigned s = 0; s < shards && !rc; s++)
            rc = send_group(c, queue, items, &m, ntodo, s, shards, &b, results);
        sent_any |= b.pending > 0;
        dq__route_write_now(c);
        while (b.pending > 0) ev_run(c->loop, EVRUN_ONCE);
        memcpy(m.todo, b.again, b.nagain * sizeof *m.todo); /* refused: route again */
        ntodo = b.nagain;
    }
    for (size_t i = 0; i < n && results; i++)
        if (results[i].status == NOT_SENT) results[i].status = b.first_error;
    many_free(&m, &b);
    if (!sent_any && n > 0) return dq__fail(c, b.first_error, "%s", b.first_errstr);
    if (b.first_error) dq__fail(c, b.first_error, "%s", b.first_errstr);
    else if (b.not_durable) return dq__fail(c, DQ_ENOTDURABLE, "%s", b.first_errstr);
    return b.accepted;
}
