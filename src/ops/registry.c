/*
 * registry.c - the set of queue names an operator's tools list (dq:queues),
 * so that finding every queue needs no SCAN or KEYS.
 *
 * Owns the client's table of queues it has registered already. The first
 * offer a client makes to a queue adds the name with SADD, sent alongside
 * the offer on the loop and never waited for; every later offer costs one
 * look-up in this table, and nothing in Redis. A registration lost with its
 * connection is tried again with the next offer; one Redis refuses (an ACL
 * rule without the registry key) is logged once and not tried again, and
 * never fails the offer. The set is a plain key outside every queue's hash
 * tag: on a cluster it lives in its own slot, wherever that is.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define REGISTRY_KEY "dq:queues"

struct dq__registry {
    char **names; /* open addressing; NULL is a free place */
    size_t cap;   /* a power of two */
    size_t n;
    int refused;  /* Redis refused a registration: said once */
};

static uint32_t name_hash(const char *s) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The place of name in the table: where it is, or the free one it would take. */
static char **place_of(struct dq__registry *r, const char *name) {
    size_t i = name_hash(name) & (r->cap - 1);
    while (r->names[i] && strcmp(r->names[i], name) != 0) i = (i + 1) & (r->cap - 1);
    return &r->names[i];
}

static int grow(struct dq__registry *r) {
    size_t cap = r->cap ? r->cap * 2 : 16;
    char **old = r->names;
    size_t old_cap = r->cap;
    r->names = calloc(cap, sizeof *r->names);
    if (!r->names) {
        r->names = old;
        return -1;
    }
    r->cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i]) *place_of(r, old[i]) = old[i];
    free(old);
    return 0;
}

static void forget(dq_client *c, const char *name) {
    struct dq__registry *r = c->registry;
    if (!r) return;
    char **p = place_of(r, name);
    if (!*p) return;
    /* Take it out and put back the run after it (linear probing). */
    free(*p);
    *p = NULL;
    r->n--;
    size_t i = (size_t)(p - r->names);
    for (i = (i + 1) & (r->cap - 1); r->names[i]; i = (i + 1) & (r->cap - 1)) {
        char *moved = r->names[i];
        r->names[i] = NULL;
        *place_of(r, moved) = moved;
    }
}

typedef struct noted {
    dq_client *c;
    char name[DQ_QUEUE_MAX + 1];
} noted;

static void sadd_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    noted *nd = privdata;
    (void)conn;
    if (!reply) {
        if (code != DQ_ECLOSED) forget(nd->c, nd->name); /* lost: the next offer tries again */
    } else if (reply->type == REDIS_REPLY_ERROR && nd->c->registry && !nd->c->registry->refused) {
        nd->c->registry->refused = 1;
        dq__log(nd->c,
                "queue registry %s: %s (queue %s is not listed for 'delayq serve'; "
                "'delayq acl' grants it)",
                REGISTRY_KEY, reply->str, nd->name);
    }
    free(nd);
}

void dq__registry_note(dq_client *c, const char *queue) {
    struct dq__registry *r = c->registry;
    if (r && r->cap && *place_of(r, queue)) return;
    if (!r && !(r = c->registry = calloc(1, sizeof *r))) return;
    if ((r->n + 1) * 2 > r->cap && grow(r) != 0) return;
    noted *nd = malloc(sizeof *nd);
    char *name = strdup(queue);
    if (!nd || !name) {
        free(nd);
        free(name);
        return; /* out of memory: the next offer tries again */
    }
    *place_of(r, queue) = name;
    r->n++;
    nd->c = c;
    snprintf(nd->name, sizeof nd->name, "%s", queue);
    const char *argv[3] = {"SADD", REGISTRY_KEY, queue};
    size_t lens[3] = {4, sizeof REGISTRY_KEY - 1, strlen(queue)};
    if (dq__route_argv(c, dq__key_slot(REGISTRY_KEY, sizeof REGISTRY_KEY - 1), 0, 3, argv, lens,
                       sadd_reply, nd) != 0) {
        free(nd);
        forget(c, queue);
    }
}

void dq__registry_free(dq_client *c) {
    struct dq__registry *r = c->registry;
    if (!r) return;
    for (size_t i = 0; i < r->cap; i++) free(r->names[i]);
    free(r->names);
    free(r);
    c->registry = NULL;
}

/* ------------------------------------------------------------ listing */

typedef struct members {
    dq_client *c;
    int done, status;
    char **names;
    size_t n;
} members;

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void smembers_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    members *m = privdata;
    m->done = 1;
    if (reply && reply->type == REDIS_REPLY_ERROR) {
        m->status = dq__fail(m->c, dq__reply_error_code(reply), "queue registry %s: %s", REGISTRY_KEY,
                             reply->str);
        return;
    }
    if (!reply || reply->type != REDIS_REPLY_ARRAY) {
        m->status = dq__reply_failure(m->c, conn, reply, code, REGISTRY_KEY);
        return;
    }
    m->names = calloc(reply->elements ? reply->elements : 1, sizeof *m->names);
    if (!m->names) {
        m->status = dq__fail(m->c, DQ_ENOMEM, "out of memory");
        return;
    }
    for (size_t i = 0; i < reply->elements; i++) {
        const redisReply *e = reply->element[i];
        /* Names only a delayq client would register: others are skipped. */
        if (e->type != REDIS_REPLY_STRING || strlen(e->str) != e->len || !dq__queue_valid(e->str))
            continue;
        if (!(m->names[m->n] = strdup(e->str))) {
            m->status = dq__fail(m->c, DQ_ENOMEM, "out of memory");
            return;
        }
        m->n++;
    }
    qsort(m->names, m->n, sizeof *m->names, by_name);
}

int dq_queues(dq_client *c, char ***names, size_t *n) {
    *names = NULL;
    *n = 0;
    int rc = dq__not_in_callback(c);
    if (rc) return rc;
    if (!c->router) return dq__fail(c, DQ_ECONNECT, "not connected: call dq_connect first");
    members m = {c, 0, 0, NULL, 0};
    const char *argv[2] = {"SMEMBERS", REGISTRY_KEY};
    size_t lens[2] = {8, sizeof REGISTRY_KEY - 1};
    rc = dq__route_argv(c, dq__key_slot(REGISTRY_KEY, sizeof REGISTRY_KEY - 1), 0, 2, argv, lens,
                        smembers_reply, &m);
    if (rc) return rc;
    dq__wait(c, &m.done);
    if (m.status) {
        dq_queues_free(m.names, m.n);
        return m.status;
    }
    *names = m.names;
    *n = m.n;
    return 0;
}

void dq_queues_free(char **names, size_t n) {
    if (!names) return;
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
}
