/*
 * delivery.c - what a take's script reply becomes: messages for the
 * consumer, each with its lease token, and the entries no consumer can use
 * (a client-side decoding failure; for a client with keys, a payload that
 * is no envelope opening under them),
 * which go to the set-aside list rather than away. take.c runs the script
 * and hands the reply here; nothing here knows of waiting or retrying.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* A message from a decoded ready entry; token: NULL without a lease. One
 * allocation holds the struct and NUL-terminated copies of every string. */
static dq_msg *msg_new(const char *queue, const dq__entry *e, const char *token) {
    size_t ql = strlen(queue), tl = token ? strlen(token) : 0;
    dq_msg *m = malloc(sizeof *m + ql + 1 + e->id_len + 1 + e->payload_len + 1 + tl + 1);
    if (!m) return NULL;
    char *p = (char *)(m + 1);
    memcpy(p, queue, ql + 1);
    m->queue = p;
    p += ql + 1;
    memcpy(p, e->id, e->id_len);
    p[e->id_len] = '\0';
    m->id = p;
    m->id_len = e->id_len;
    p += e->id_len + 1;
    if (e->payload_len) memcpy(p, e->payload, e->payload_len);
    p[e->payload_len] = '\0';
    m->payload = p;
    m->payload_len = e->payload_len;
    p += e->payload_len + 1;
    m->token = NULL;
    if (token) {
        memcpy(p, token, tl + 1);
        m->token = p;
    }
    m->due_ms = e->due_ms;
    m->ready_ms = e->ready_ms;
    m->attempt = (int)e->attempts + 1;
    return m;
}

void dq_msg_free(dq_msg *msg) { free(msg); }

/* An entry the script handed out but this client cannot decode (the
 * script checks what the decoder checks, so only a version skew between the
 * two gets here), or whose sealed payload does not open: it goes to the
 * set-aside list with why, rather than away. */
static void set_aside(const dq__delivery *d, const redisReply *e, const char *why) {
    size_t len;
    char *rec = dq__aside_encode(why, "", 0, e->str, e->len, &len);
    dq__log(d->c, "queue %s: a delivered entry set aside: %s", d->shard, why);
    if (!rec) return;
    const char *argv[3] = {"RPUSH", d->keys->aside, rec};
    size_t lens[3] = {5, strlen(d->keys->aside), len};
    (void)dq__op_command(d->c, d->shard, 3, argv, lens, dq__ignore_reply, NULL);
    free(rec);
}

/* A leased delivery that will never be handed out (set aside): its lease
 * is acked, so it does not come back to fail again. */
static void ack_lease(const dq__delivery *d, const dq__entry *e, const char *token) {
    char id[DQ_ID_MAX + 1];
    memcpy(id, e->id, e->id_len);
    id[e->id_len] = '\0';
    /* The take ran on these very keys: no shard count to check (''). On
     * the heap: the struct is sized for DQ__ACK_BATCH items. If it (or the
     * id's bucket) cannot be had, the lease runs out and the entry comes
     * back to be set aside. */
    dq__ack_args *args = malloc(sizeof *args);
    if (!args) return;
    dq__ack_args_init(args, d->keys->z, d->keys->counters, d->keys->prefix, "");
    if (dq__ack_args_add(args, id, token) == 0)
        (void)dq__op_eval(d->c, d->shard, DQ__ROUTE_WRITE, DQ__LUA_ACK, 2, (int)args->n - 2, args->argv,
                          args->lens, dq__ignore_reply, NULL);
    free(args);
}

/* Opens a sealed payload in place of e's (*plain gets the buffer to free
 * once the message is made). Returns 0 (also for a payload that goes as it
 * is: see dq__open_taken), or -1 after setting the entry aside: a client
 * that holds keys got no envelope that opens under them (not sealed, cut
 * short, tampered, or moved from another item or queue). The item is bound
 * to the queue, not to the shard the take ran on (seal.c). */
static int open_payload(const dq__delivery *d, const redisReply *r, dq__entry *e, const char *token,
                        unsigned char **plain) {
    char why[96];
    size_t len = 0;
    int rc = dq__open_taken(d->c->keyring, d->c->opt.allow_plaintext, d->owner, e->id, e->id_len,
                            e->payload, e->payload_len, plain, &len, why, sizeof why);
    if (rc == 0) {
        e->payload = (const char *)*plain;
        e->payload_len = len;
    }
    if (rc >= 0) return 0;
    set_aside(d, r, why);
    if (token) ack_lease(d, e, token);
    return -1;
}

/* A "k|<key id>|<id>" marker: the script passed an item sealed with a key
 * this client lacks, left ready. Says so in the client's error (the first
 * one kept), naming the queue as its user does. */
static void note_held_back(const dq__delivery *d, const redisReply *r, int first) {
    const char *bar = r->len > 19 ? memchr(r->str + 2, '|', r->len - 2) : NULL;
    if (!first || !bar) return;
    int kl = (int)(bar - r->str - 2), il = (int)(r->len - (size_t)(bar + 1 - r->str));
    if (d->c->keyring)
        dq__fail(d->c, DQ_EKEY,
                 "item %.*s of queue %s is sealed with key %.*s, which this client's key "
                 "file does not hold; it stays for a consumer that does",
                 il, bar + 1, d->owner, kl, r->str + 2);
    else
        dq__fail(d->c, DQ_EKEY,
                 "item %.*s of queue %s is sealed with key %.*s, and this client has no key "
                 "file (--key-file); it stays for a consumer that has the key",
                 il, bar + 1, d->owner, kl, r->str + 2);
}

int dq__take_reply_decode(const dq__delivery *d, const redisReply *reply, const char *request,
                          dq_msg **msgs, size_t max, int *held) {
    /* The last element is the queue's epoch (lua/take.lua). */
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements == 0) return -1;
    if (dq__epoch_reply(d->c, d->shard, reply->element[reply->elements - 1]) != 0) return -1;
    size_t elements = reply->elements - 1;
    if (elements == 0) return 0;
    const redisReply *lease = reply->element[0];
    if (lease->type != REDIS_REPLY_INTEGER || lease->integer < 0 || elements - 1 > max) return -1;
    /* "<request>.<i>.<score>": the score of the take's lease record (the
     * reply's first element), which lets an ack find the record directly
     * (see lua/lib/40_leases.lua). */
    char token[DQ_ID_GENERATED_LEN + 48];
    char score[24];
    dq__fmt_i64(score, (int64_t)lease->integer);
    size_t prefix_len = strlen(request);
    memcpy(token, request, prefix_len);
    token[prefix_len++] = '.';
    size_t got = 0;
    for (size_t i = 1; i < elements; i++) {
        const redisReply *r = reply->element[i];
        if (r->type != REDIS_REPLY_STRING) return -1;
        if (r->len == 0) continue; /* set aside by the script */
        if (r->len > 2 && r->str[0] == 'k' && r->str[1] == '|') {
            note_held_back(d, r, ++*held == 1);
            continue;
        }
        dq__entry e;
        if (dq__entry_decode(r->str, r->len, &e) != 0) {
            set_aside(d, r, "undecodable by the client");
            continue;
        }
        if (lease->integer) {
            size_t n = prefix_len + dq__fmt_i64(token + prefix_len, (int64_t)i);
            token[n++] = '.';
            memcpy(token + n, score, strlen(score) + 1);
        }
        unsigned char *plain;
        if (open_payload(d, r, &e, lease->integer ? token : NULL, &plain) != 0) continue;
        dq_msg *m = msg_new(d->owner, &e, lease->integer ? token : NULL);
        free(plain);
        if (m) msgs[got++] = m;
        else dq__log(d->c, "queue %s: out of memory for a delivery", d->shard);
    }
    return (int)got;
}
