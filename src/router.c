/*
 * router.c - where a command goes: one node, the master a Sentinel names,
 * or the master that owns a key's slot in a Redis Cluster.
 *
 * The router holds the node connections (a command connection per node, a
 * pool of blocking connections per node, a push connection per node for
 * sharded pub/sub) and follows the topology:
 *   - Sentinel: asks the sentinels in turn for the master's address,
 *     checks with ROLE that the node is a master (conn.c's handshake),
 *     listens for +switch-master, and asks again when the master's
 *     connection is lost or it answers READONLY, LOADING or MASTERDOWN.
 *   - Cluster: keeps a slot map from CLUSTER SLOTS, follows MOVED (map
 *     updated, command resent) and ASK (ASKING, one resend on that node),
 *     retries TRYAGAIN and CLUSTERDOWN with a bounded backoff, and reloads
 *     the map after a redirect or a lost node. While a slot's owner is
 *     unreachable it reloads the map with a backoff until it heals; a
 *     healthy cluster costs nothing.
 * Durable writes: a command sent with DQ__ROUTE_WRITE is followed, on the
 * same connection and pipelined, by "WAIT n timeout" when the client asks
 * for n replicas; the reply reaches the caller with DQ_ENOTDURABLE when
 * fewer confirmed.
 *
 * It knows nothing of queues or scripts: callers give a slot and a command
 * in RESP, and an optional rewrite hook for error replies (script.c turns
 * NOSCRIPT into EVAL with it). Nothing here calls up into the operations;
 * they hear of topology changes through the hooks they register.
 *
 * Commands for a node whose connection is still being made wait for it
 * (connect_timeout_ms at most); a node known to be down fails them at once,
 * as a single node always did.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

#define REDIRECTS_MAX 5      /* MOVED/ASK hops for one command           */
#define RETRIES_MAX 10       /* TRYAGAIN/CLUSTERDOWN/LOADING... retries   */
#define RETRY_MIN_S 0.02
#define RETRY_MAX_S 0.5
#define HEAL_MIN_S 0.05      /* topology re-reads while a node is broken */
#define HEAL_MAX_S 1.0

typedef struct dq__node dq__node;
typedef struct rreq rreq;

struct dq__node {
    dq__node *next;
    dq__router *rt;
    dq__endpoint ep;
    dq__conn *cmd;
    dq__conn *idle;          /* idle blocking connections               */
    dq__push *push;          /* sharded subscriptions on this node      */
    rreq *held, *held_tail;  /* waiting for cmd to come up              */
};

struct dq__sub {
    dq__sub *next;
    dq__router *rt;
    unsigned slot;
    dq__node *node;          /* where it is (being) subscribed, or NULL */
    int confirmed;
    dq__sub_fn *fn;
    void *privdata;
    char channel[DQ__KEY_MAX];
};

enum outcome { DELIVER, RESEND, RETRY_LATER };

struct rreq {
    rreq *next;              /* node's held list, or the retry list      */
    dq__router *rt;
    unsigned slot;
    unsigned flags;
    char *cmd;               /* owned                                    */
    size_t len;
    dq__rewrite_fn *rewrite;
    dq__reply_fn *fn;
    void *privdata;
    int redirects, retries;
    int asking;              /* send ASKING first (ASK redirect)          */
    dq__node *target;        /* a redirect's node, else the slot's owner */
    int wait_n;              /* WAIT for this many replicas, 0 = none     */
    int replies_left;        /* for the current send: command (+ WAIT)    */
    enum outcome outcome;
    redisReply *held;        /* the command's reply (a copy) until WAIT's */
    int held_code;
    dq__conn *conn;          /* the connection of the current send        */
    long long acked;         /* WAIT's answer                             */
    ev_timer timer;
};

struct dq__router {
    dq_client *c;
    int topology;
    dq__node *nodes;
    dq__node *master;        /* single and Sentinel                      */
    dq__node **slots;        /* Cluster: DQ__SLOTS owners, NULL unknown  */
    int map_loaded;
    dq__sub *subs;
    rreq *retrying;          /* requests waiting on a backoff timer      */
    dq__up_fn *on_up;
    void *on_up_privdata;
    /* Sentinel */
    int sentinel_next;       /* the next sentinel to ask                 */
    int discovering;
    int discover_rounds;     /* full rounds over the sentinels that failed */
    int failover_seen;       /* the sentinel asked runs a failover now    */
    double connect_deadline; /* dq_connect gives up waiting for one then  */
    dq__conn *asking;        /* the sentinel being asked                 */
    dq__push *watch;         /* +switch-master                           */
    int watch_sentinel;
    /* Cluster */
    int refreshing, refresh_again;
    /* Both: topology re-reads while broken */
    ev_timer heal_timer;
    double heal_s;
    char errstr[DQ__ERRSTR_MAX];
};

static void dispatch(rreq *r);
static void refresh(dq__router *rt);
static void discover(dq__router *rt);
static void attach_sub(dq__sub *s);
static void heal_later(dq__router *rt);

/* ------------------------------------------------------------ replies */

/* A deep copy of a reply that outlives hiredis's (freed with
 * freeReplyObject: hiredis 0.14 allocates with malloc too). */
static redisReply *reply_dup(const redisReply *r) {
    redisReply *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->type = r->type;
    d->integer = r->integer;
    if (r->str) {
        d->str = malloc(r->len + 1);
        if (!d->str) goto fail;
        memcpy(d->str, r->str, r->len);
        d->str[r->len] = '\0';
        d->len = r->len;
    }
    if (r->type == REDIS_REPLY_ARRAY && r->elements) {
        d->element = calloc(r->elements, sizeof *d->element);
        if (!d->element) goto fail;
        d->elements = r->elements;
        for (size_t i = 0; i < r->elements; i++)
            if (!(d->element[i] = reply_dup(r->element[i]))) goto fail;
    }
    return d;
fail:
    freeReplyObject(d);
    return NULL;
}

static int error_is(const redisReply *r, const char *prefix) {
    size_t n = strlen(prefix);
    return r && r->type == REDIS_REPLY_ERROR && r->str && strncmp(r->str, prefix, n) == 0 &&
           (r->str[n] == ' ' || r->str[n] == '\0');
}

int dq__reply_is_topology(const redisReply *r) {
    return error_is(r, "MOVED") || error_is(r, "ASK") || error_is(r, "TRYAGAIN") ||
           error_is(r, "CLUSTERDOWN") || error_is(r, "READONLY") || error_is(r, "LOADING") ||
           error_is(r, "MASTERDOWN") || error_is(r, "UNBLOCKED");
}

/* "MOVED <slot> <host>:<port>" or ASK: the address, split. Returns 0. */
static int redirect_addr(const redisReply *r, char *host, size_t hostlen, int *port) {
    const char *addr = strchr(r->str, ' ');
    addr = addr ? strchr(addr + 1, ' ') : NULL;
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    if (!colon || colon - addr - 1 <= 0 || (size_t)(colon - addr - 1) >= hostlen) return -1;
    memcpy(host, addr + 1, (size_t)(colon - addr - 1));
    host[colon - addr - 1] = '\0';
    *port = atoi(colon + 1);
    return *port > 0 && *port < 65536 ? 0 : -1;
}

/* ------------------------------------------------------------ nodes */

static void node_cmd_up(dq__conn *conn, void *privdata);
static void node_cmd_down(dq__conn *conn, void *privdata);
static void node_cmd_fail(dq__conn *conn, void *privdata);
static void push_event(dq__push *p, int event, redisReply *reply, void *privdata);

static dq__endpoint data_endpoint(const dq__router *rt, const char *host, int port) {
    const dq__url *u = &rt->c->url;
    dq__endpoint ep;
    memset(&ep, 0, sizeof ep);
    dq__endpoint_set(&ep, host, port, u->is_unix ? u->path : NULL);
    ep.user = u->user;
    ep.password = u->password;
    ep.db = u->topology == DQ__TOPO_CLUSTER ? 0 : u->db;
    ep.check_master = u->topology == DQ__TOPO_SENTINEL;
    return ep;
}

static dq__node *node_find(dq__router *rt, const char *host, int port) {
    for (dq__node *n = rt->nodes; n; n = n->next)
        if (n->ep.port == port && strcmp(n->ep.host, host) == 0) return n;
    return NULL;
}

/* The node at host:port, made (and its command connection started) if new. */
static dq__node *node_get(dq__router *rt, const char *host, int port) {
    dq__node *n = node_find(rt, host, port);
    if (n) return n;
    n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->rt = rt;
    n->ep = data_endpoint(rt, host, port);
    n->cmd = dq__conn_new(rt->c, DQ__CONN_CMD, &n->ep);
    if (!n->cmd) {
        free(n);
        return NULL;
    }
    n->cmd->node = n;
    n->cmd->on_up = node_cmd_up;
    n->cmd->on_down = node_cmd_down;
    n->cmd->on_fail = node_cmd_fail;
    n->cmd->event_privdata = n;
    n->cmd->auto_reconnect = 1;
    n->next = rt->nodes;
    rt->nodes = n;
    dq__conn_start(n->cmd);
    return n;
}

static void fail_held(dq__node *n, int code);

static void node_free(dq__node *n) {
    fail_held(n, DQ_ECLOSED);
    while (n->idle) {
        dq__conn *b = n->idle;
        n->idle = b->next_in_pool;
        dq__conn_free(b);
    }
    dq__push_free(n->push);
    dq__conn_free(n->cmd);
    free(n);
}

static dq__node *owner(const dq__router *rt, unsigned slot) {
    if (rt->topology != DQ__TOPO_CLUSTER) return rt->master;
    return rt->slots[slot % DQ__SLOTS];
}

static void send_held(dq__node *n);

static void node_cmd_up(dq__conn *conn, void *privdata) {
    dq__node *n = privdata;
    dq__router *rt = n->rt;
    if (conn->ups > 1) rt->c->counters.reconnects++;
    if (n == rt->master) rt->heal_s = 0;
    send_held(n);
    if (rt->topology == DQ__TOPO_CLUSTER && rt->refresh_again) refresh(rt);
    /* Announcements may have been missed while it was away. */
    if (rt->on_up) rt->on_up(rt->c, rt->on_up_privdata);
}

/* The node is unreachable: its waiting commands fail, and the topology is
 * read again (a failover may have moved its slots or the master). */
static void node_lost(dq__node *n) {
    dq__router *rt = n->rt;
    fail_held(n, n->cmd->last_code ? n->cmd->last_code : DQ_ECONNECT);
    if (rt->topology != DQ__TOPO_SINGLE) heal_later(rt);
}

static void node_cmd_down(dq__conn *conn, void *privdata) {
    (void)conn;
    dq__node *n = privdata;
    dq__log(n->rt->c, "%s; reconnecting", n->cmd->errstr);
    node_lost(n);
}

static void node_cmd_fail(dq__conn *conn, void *privdata) {
    (void)conn;
    node_lost(privdata);
}

/* Points node n (single or Sentinel master) at another address: its
 * connections are dropped and made again there. */
static void node_move(dq__node *n, const char *host, int port) {
    dq__router *rt = n->rt;
    if (n->ep.port == port && strcmp(n->ep.host, host) == 0) return;
    dq__log(rt->c, "master %s is now at %s:%d (was %s)", rt->c->url.master, host, port, n->ep.name);
    dq__endpoint_set(&n->ep, host, port, NULL);
    dq__endpoint_set(&n->cmd->ep, host, port, NULL);
    while (n->idle) {
        dq__conn *b = n->idle;
        n->idle = b->next_in_pool;
        dq__conn_retire(b);
    }
    if (n->push) {
        dq__push_free(n->push);
        n->push = NULL;
        for (dq__sub *s = rt->subs; s; s = s->next)
            if (s->node == n) s->node = NULL, s->confirmed = 0;
    }
    if (n->cmd->state != DQ__DOWN) dq__conn_abort(n->cmd, DQ_ECONNECT, "the master moved");
    else {
        ev_timer_stop(rt->c->loop, &n->cmd->retry_timer);
        dq__conn_start(n->cmd);
    }
    for (dq__sub *s = rt->subs; s; s = s->next)
        if (!s->node) attach_sub(s);
}

/* ------------------------------------------------------------ requests */

static void rreq_free(rreq *r) {
    if (r->held) freeReplyObject(r->held);
    free(r->cmd);
    free(r);
}

static void unlink_retrying(rreq *r) {
    for (rreq **p = &r->rt->retrying; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            return;
        }
}

/* Hands the outcome to the caller and frees r. */
static void deliver(rreq *r, dq__conn *conn, redisReply *reply, int code) {
    r->fn(conn, reply, code, r->privdata);
    rreq_free(r);
}

static void fail_held(dq__node *n, int code) {
    rreq *list = n->held;
    n->held = n->held_tail = NULL;
    while (list) {
        rreq *r = list;
        list = r->next;
        deliver(r, n->cmd, NULL, code);
    }
}

static void ignore_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    (void)conn, (void)reply, (void)code, (void)privdata;
}

static void on_cmd_reply(dq__conn *conn, redisReply *reply, int code, void *privdata);
static void on_wait_reply(dq__conn *conn, redisReply *reply, int code, void *privdata);

/* Sends r on n's command connection (up). Returns 0 or a DQ_E* code. */
static int send_on(rreq *r, dq__node *n) {
    dq__conn *conn = n->cmd;
    if (r->asking) {
        const char *av[1] = {"ASKING"};
        size_t al[1] = {6};
        if (dq__conn_send(conn, 0, 1, av, al, ignore_reply, NULL) != 0) return DQ_ECONNECT;
        r->asking = 0;
    }
    int rc = dq__conn_send_raw(conn, r->flags & DQ__SEND_NO_TIMEOUT, r->cmd, r->len, on_cmd_reply, r);
    if (rc) return rc;
    r->conn = conn;
    r->replies_left = 1;
    r->outcome = DELIVER;
    r->held_code = 0;
    if (r->wait_n > 0) {
        char n_text[16], t_text[24];
        const char *av[3] = {"WAIT", n_text, t_text};
        size_t al[3] = {4, dq__fmt_i64(n_text, r->wait_n),
                        dq__fmt_i64(t_text, r->rt->c->opt.wait_timeout_ms)};
        /* WAIT blocks up to its own timeout: no reply deadline of ours. */
        if (dq__conn_send(conn, DQ__SEND_NO_TIMEOUT, 3, av, al, on_wait_reply, r) == 0)
            r->replies_left = 2;
        else r->acked = -1;
    }
    return 0;
}

static void send_held(dq__node *n) {
    rreq *list = n->held;
    n->held = n->held_tail = NULL;
    while (list) {
        rreq *r = list;
        list = r->next;
        int rc = send_on(r, n);
        if (rc) deliver(r, n->cmd, NULL, rc);
    }
}

/* Sends r to its node, or holds it while that node's connection is being
 * made. Returns 0, or a code when r cannot go anywhere now (r untouched). */
static int try_dispatch(rreq *r) {
    dq__router *rt = r->rt;
    dq__node *n = r->target ? r->target : owner(rt, r->slot);
    r->target = NULL;
    if (!n) {
        snprintf(rt->errstr, sizeof rt->errstr, "no node serves slot %u (cluster map %s)", r->slot,
                 rt->map_loaded ? "incomplete" : "not loaded");
        return DQ_ECONNECT;
    }
    enum dq__conn_state st = n->cmd->state;
    if (st == DQ__CONNECTING || st == DQ__HANDSHAKE) {
        r->next = NULL;
        if (n->held_tail) n->held_tail->next = r;
        else n->held = r;
        n->held_tail = r;
        return 0;
    }
    int rc = st == DQ__UP ? send_on(r, n) : DQ_ECONNECT;
    if (rc) snprintf(rt->errstr, sizeof rt->errstr, "%s", n->cmd->errstr);
    return rc;
}

static void dispatch(rreq *r) {
    int rc = try_dispatch(r);
    if (rc) deliver(r, NULL, NULL, dq__fail(r->rt->c, rc, "%s", r->rt->errstr));
}

static void on_retry_timer(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    rreq *r = w->data;
    unlink_retrying(r);
    dispatch(r);
}

static void retry_later(rreq *r) {
    double s = RETRY_MIN_S;
    for (int i = 1; i < r->retries && s < RETRY_MAX_S; i++) s *= 2;
    if (s > RETRY_MAX_S) s = RETRY_MAX_S;
    ev_timer_init(&r->timer, on_retry_timer, s, 0);
    r->timer.data = r;
    r->next = r->rt->retrying;
    r->rt->retrying = r;
    ev_timer_start(r->rt->c->loop, &r->timer);
}

/* Both replies of the current send are in: act on what they said. */
static void settle(rreq *r) {
    dq__conn *conn = r->conn;
    switch (r->outcome) {
    case RESEND:
        dispatch(r);
        return;
    case RETRY_LATER:
        retry_later(r);
        return;
    case DELIVER:
        break;
    }
    int code = r->held_code;
    if (!code && r->wait_n > 0 && r->held && r->held->type != REDIS_REPLY_ERROR &&
        r->acked < r->wait_n) {
        code = DQ_ENOTDURABLE;
        dq__fail(r->rt->c, code, "only %lld of %d replicas confirmed the write within %d ms",
                 r->acked < 0 ? 0 : r->acked, r->wait_n, r->rt->c->opt.wait_timeout_ms);
    }
    redisReply *reply = r->held;
    r->held = NULL;
    r->fn(conn, reply, code, r->privdata);
    if (reply) freeReplyObject(reply);
    rreq_free(r);
}

/* What an error reply means for r: a redirect, a retry, or the answer. */
static enum outcome judge_error(rreq *r, const redisReply *reply) {
    dq__router *rt = r->rt;
    int moved = error_is(reply, "MOVED"), ask = error_is(reply, "ASK");
    if ((moved || ask) && r->redirects < REDIRECTS_MAX) {
        char host[256];
        int port;
        if (redirect_addr(reply, host, sizeof host, &port) != 0) return DELIVER;
        dq__node *n = node_get(rt, host, port);
        if (!n) return DELIVER;
        r->redirects++;
        r->target = n;
        if (ask) r->asking = 1;
        else if (rt->slots) {
            rt->slots[r->slot % DQ__SLOTS] = n;
            refresh(rt);
        }
        return RESEND;
    }
    int busy = error_is(reply, "TRYAGAIN") || error_is(reply, "CLUSTERDOWN") ||
               error_is(reply, "LOADING") || error_is(reply, "READONLY") ||
               error_is(reply, "MASTERDOWN");
    if (busy && r->retries < RETRIES_MAX) {
        r->retries++;
        if (rt->topology == DQ__TOPO_CLUSTER && !error_is(reply, "TRYAGAIN")) refresh(rt);
        if (rt->topology == DQ__TOPO_SENTINEL && !error_is(reply, "LOADING")) discover(rt);
        return RETRY_LATER;
    }
    if (r->rewrite) {
        size_t len;
        char *cmd = r->rewrite(r->cmd, r->len, reply, &len);
        if (cmd) {
            free(r->cmd);
            r->cmd = cmd, r->len = len;
            r->rewrite = NULL; /* once */
            return RESEND;
        }
    }
    return DELIVER;
}

static void on_cmd_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    rreq *r = privdata;
    r->replies_left--;
    r->outcome = reply && reply->type == REDIS_REPLY_ERROR ? judge_error(r, reply) : DELIVER;
    if (r->outcome == DELIVER && r->replies_left == 0) {
        /* The common case, with no copy: no WAIT behind it. */
        deliver(r, conn, reply, code);
        return;
    }
    if (r->outcome == DELIVER) {
        r->held_code = code;
        if (reply && !(r->held = reply_dup(reply))) r->held_code = DQ_ENOMEM;
    }
    if (r->replies_left == 0) settle(r);
}

static void on_wait_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    (void)conn, (void)code;
    rreq *r = privdata;
    r->replies_left--;
    r->acked = reply && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
    if (r->replies_left == 0) settle(r);
}

int dq__route(dq_client *c, unsigned slot, unsigned flags, char *cmd, size_t len,
              dq__rewrite_fn *rewrite, dq__reply_fn *fn, void *privdata) {
    dq__router *rt = c->router;
    rreq *r = calloc(1, sizeof *r);
    if (!r) {
        free(cmd);
        return dq__fail(c, DQ_ENOMEM, "out of memory");
    }
    r->rt = rt;
    r->slot = slot;
    r->flags = flags;
    r->cmd = cmd, r->len = len;
    r->rewrite = rewrite;
    r->fn = fn, r->privdata = privdata;
    r->wait_n = (flags & DQ__ROUTE_WRITE) ? c->opt.wait_replicas : 0;
    int rc = try_dispatch(r);
    if (rc) {
        dq__fail(c, rc, "%s", rt->errstr);
        free(r->cmd);
        free(r);
    }
    return rc;
}

int dq__route_argv(dq_client *c, unsigned slot, unsigned flags, int argc, const char **argv,
                   const size_t *lens, dq__reply_fn *fn, void *privdata) {
    char *cmd = NULL;
    long len = dq__format_command(&cmd, 0, NULL, NULL, argc, argv, lens);
    if (len < 0) return dq__fail(c, DQ_ENOMEM, "out of memory");
    return dq__route(c, slot, flags, cmd, (size_t)len, NULL, fn, privdata);
}

int dq__route_check(dq_client *c, unsigned slot) {
    dq__router *rt = c->router;
    dq__node *n = owner(rt, slot);
    if (n && n->cmd->state != DQ__DOWN && n->cmd->state != DQ__CLOSED) return 0;
    return dq__fail(c, DQ_ECONNECT, "not connected to Redis (%s)",
                    n ? (n->cmd->errstr[0] ? n->cmd->errstr : "connecting")
                      : "no node serves the queue's slot");
}

void dq__route_write_now(dq_client *c) {
    for (dq__node *n = c->router->nodes; n; n = n->next) dq__conn_write_now(n->cmd);
}

int dq__route_degraded(dq_client *c) {
    dq__router *rt = c->router;
    /* A cluster re-reads its map until every owner is up (heal_later). */
    if (ev_is_active(&rt->heal_timer) || rt->discovering || rt->refreshing) return 1;
    return rt->master && rt->master->cmd->state != DQ__UP;
}

int dq__route_busy(dq_client *c) {
    dq__router *rt = c->router;
    if (rt->retrying) return 1;
    for (dq__node *n = rt->nodes; n; n = n->next)
        if ((n->cmd->head && n->cmd->state == DQ__UP) || n->held) return 1;
    return 0;
}

void dq__route_set_up_hook(dq_client *c, dq__up_fn *fn, void *privdata) {
    c->router->on_up = fn;
    c->router->on_up_privdata = privdata;
}

/* ------------------------------------------------------------ blocking pool */

dq__conn *dq__route_blocking(dq_client *c, unsigned slot) {
    dq__node *n = owner(c->router, slot);
    if (!n) {
        dq__fail(c, DQ_ECONNECT, "no node serves slot %u", slot);
        return NULL;
    }
    dq__conn *b = n->idle;
    if (b) {
        n->idle = b->next_in_pool;
        b->next_in_pool = NULL;
        return b;
    }
    b = dq__conn_new(c, DQ__CONN_BLOCKING, &n->ep);
    if (!b) {
        dq__fail(c, DQ_ENOMEM, "out of memory");
        return NULL;
    }
    b->node = n;
    dq__conn_start(b);
    return b;
}

void dq__route_blocking_release(dq_client *c, dq__conn *b) {
    dq__node *n = b->node;
    b->on_up = b->on_down = b->on_fail = NULL;
    b->event_privdata = NULL;
    /* Only a healthy connection to where its node still is goes back. */
    int same = n && b->ep.port == n->ep.port && strcmp(b->ep.host, n->ep.host) == 0;
    if (b->state != DQ__UP || !same || node_find(c->router, n->ep.host, n->ep.port) != n) {
        dq__conn_retire(b);
        return;
    }
    b->next_in_pool = n->idle;
    n->idle = b;
}

int dq__route_owns(dq_client *c, const dq__conn *b, unsigned slot) {
    const dq__node *n = owner(c->router, slot);
    /* The node, and where it is now (a Sentinel master moves). */
    return n && b->node == n && b->ep.port == n->ep.port && strcmp(b->ep.host, n->ep.host) == 0;
}

/* ------------------------------------------------------------ subscriptions */

static dq__sub *find_sub(dq__router *rt, const dq__node *n, const char *channel, size_t len) {
    for (dq__sub *s = rt->subs; s; s = s->next)
        if ((!n || s->node == n) && strlen(s->channel) == len && memcmp(s->channel, channel, len) == 0)
            return s;
    return NULL;
}

static void send_ssubscribe(dq__sub *s) {
    const char *av[2] = {"SSUBSCRIBE", s->channel};
    size_t al[2] = {10, strlen(s->channel)};
    (void)dq__push_send(s->node->push, 2, av, al);
}

/* Subscribes s at its slot's owner (now, or when that node's push
 * connection comes up). */
static void attach_sub(dq__sub *s) {
    dq__router *rt = s->rt;
    dq__node *n = owner(rt, s->slot);
    s->node = n;
    s->confirmed = 0;
    if (!n) return; /* the next map read attaches it */
    if (!n->push) {
        n->push = dq__push_new(rt->c, &n->ep, push_event, n);
        return; /* its UP subscribes */
    }
    if (dq__push_is_up(n->push)) send_ssubscribe(s);
}

/* A subscription was dropped by the server (its slot moved) or refused. */
static void sub_lost(dq__sub *s) {
    dq__router *rt = s->rt;
    s->confirmed = 0;
    s->node = NULL;
    if (rt->topology == DQ__TOPO_CLUSTER) refresh(rt); /* attaches it when read */
    else attach_sub(s);
}

/* A refused SSUBSCRIBE: MOVED names the slot's owner, which the map takes
 * at once (a map read could still be older); anything else waits for the
 * next map read, with a backoff. */
static void sub_refused(dq__node *n, const redisReply *reply) {
    dq__router *rt = n->rt;
    char host[256];
    int port;
    if (error_is(reply, "MOVED") && rt->slots && redirect_addr(reply, host, sizeof host, &port) == 0) {
        unsigned slot = (unsigned)strtoul(strchr(reply->str, ' ') + 1, NULL, 10) % DQ__SLOTS;
        dq__node *to = node_get(rt, host, port);
        if (to && to != n) {
            rt->slots[slot] = to;
            for (dq__sub *s = rt->subs; s; s = s->next)
                if (s->node == n && !s->confirmed && s->slot == slot) attach_sub(s);
            return;
        }
    }
    dq__log(rt->c, "subscription refused by %s: %s", n->ep.name, reply->str);
    for (dq__sub *s = rt->subs; s; s = s->next)
        if (s->node == n && !s->confirmed) s->node = NULL;
    heal_later(rt); /* the map read attaches them */
}

static void push_reply(dq__node *n, const redisReply *reply) {
    dq__router *rt = n->rt;
    if (reply->type == REDIS_REPLY_ERROR) {
        sub_refused(n, reply);
        return;
    }
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 3 ||
        reply->element[0]->type != REDIS_REPLY_STRING || reply->element[1]->type != REDIS_REPLY_STRING)
        return;
    const char *kind = reply->element[0]->str;
    const redisReply *chan = reply->element[1];
    dq__sub *s = find_sub(rt, n, chan->str, chan->len);
    if (!s) return;
    if (strcmp(kind, "smessage") == 0) {
        const redisReply *m = reply->element[2];
        if (m->type == REDIS_REPLY_STRING) s->fn(s->privdata, DQ__SUB_MESSAGE, m->str, m->len);
    } else if (strcmp(kind, "ssubscribe") == 0) {
        s->confirmed = 1;
        s->fn(s->privdata, DQ__SUB_READY, NULL, 0);
    } else if (strcmp(kind, "sunsubscribe") == 0) {
        sub_lost(s);
    }
}

static void push_event(dq__push *p, int event, redisReply *reply, void *privdata) {
    (void)p;
    dq__node *n = privdata;
    dq__router *rt = n->rt;
    switch (event) {
    case DQ__PUSH_UP:
        for (dq__sub *s = rt->subs; s; s = s->next)
            if (s->node == n) send_ssubscribe(s);
        break;
    case DQ__PUSH_DOWN:
        dq__log(rt->c, "wake channel connection lost (%s); reconnecting", dq__push_errstr(p));
        for (dq__sub *s = rt->subs; s; s = s->next)
            if (s->node == n) s->confirmed = 0;
        if (rt->topology == DQ__TOPO_CLUSTER) heal_later(rt);
        break;
    case DQ__PUSH_REPLY:
        push_reply(n, reply);
        break;
    }
}

dq__sub *dq__route_subscribe(dq_client *c, const char *channel, dq__sub_fn *fn, void *privdata) {
    dq__router *rt = c->router;
    dq__sub *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->rt = rt;
    snprintf(s->channel, sizeof s->channel, "%s", channel);
    s->slot = dq__key_slot(channel, strlen(channel));
    s->fn = fn, s->privdata = privdata;
    s->next = rt->subs;
    rt->subs = s;
    attach_sub(s);
    return s;
}

void dq__route_unsubscribe(dq_client *c, dq__sub *s) {
    dq__router *rt = c->router;
    for (dq__sub **p = &rt->subs; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    if (s->node && dq__push_is_up(s->node->push)) {
        const char *av[2] = {"SUNSUBSCRIBE", s->channel};
        size_t al[2] = {12, strlen(s->channel)};
        (void)dq__push_send(s->node->push, 2, av, al);
    }
    free(s);
}

/* ------------------------------------------------------------ healing */

static void on_heal(struct ev_loop *loop, ev_timer *w, int revents) {
    /* Sentinel: ask where the master is; Cluster: read the slot map. */
    (void)loop, (void)revents;
    dq__router *rt = w->data;
    if (rt->topology == DQ__TOPO_CLUSTER) refresh(rt);
    else discover(rt);
}

/* Reads the topology again after a backoff that grows while it stays
 * broken (reset when it reads whole). */
static void heal_later(dq__router *rt) {
    if (ev_is_active(&rt->heal_timer)) return;
    rt->heal_s = rt->heal_s ? rt->heal_s * 2 : HEAL_MIN_S;
    if (rt->heal_s > HEAL_MAX_S) rt->heal_s = HEAL_MAX_S;
    ev_timer_set(&rt->heal_timer, rt->heal_s, 0);
    ev_timer_start(rt->c->loop, &rt->heal_timer);
}

/* ------------------------------------------------------------ cluster map */

static dq__node *any_up_node(dq__router *rt) {
    for (dq__node *n = rt->nodes; n; n = n->next)
        if (n->cmd->state == DQ__UP) return n;
    return NULL;
}

/* 1 if every slot has an owner whose command connection is up. */
static int map_healthy(const dq__router *rt) {
    for (unsigned i = 0; i < DQ__SLOTS; i++)
        if (rt->slots[i] && rt->slots[i]->cmd->state != DQ__UP) return 0;
    return 1;
}

static void slots_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    (void)code;
    dq__router *rt = privdata;
    rt->refreshing = 0;
    if (!reply || reply->type != REDIS_REPLY_ARRAY) {
        if (reply && reply->type == REDIS_REPLY_ERROR)
            snprintf(rt->errstr, sizeof rt->errstr, "CLUSTER SLOTS refused by %s: %.100s", conn->name,
                     reply->str);
        heal_later(rt);
        return;
    }
    for (size_t i = 0; i < reply->elements; i++) {
        const redisReply *range = reply->element[i];
        if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) continue;
        const redisReply *m = range->element[2];
        if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 || m->element[0]->type != REDIS_REPLY_STRING)
            continue;
        /* An empty host means "the address you reached me at". */
        const char *host = m->element[0]->len ? m->element[0]->str : conn->ep.host;
        dq__node *n = node_get(rt, host, (int)dq__reply_int(m->element[1]));
        long long lo = dq__reply_int(range->element[0]), hi = dq__reply_int(range->element[1]);
        if (!n || lo < 0 || hi >= DQ__SLOTS || lo > hi) continue;
        for (long long s = lo; s <= hi; s++) rt->slots[s] = n;
    }
    rt->map_loaded = 1;
    for (dq__sub *s = rt->subs; s; s = s->next)
        if (s->node != owner(rt, s->slot)) {
            /* Moved (or never attached): subscribe at the new owner. */
            if (s->node && s->confirmed && dq__push_is_up(s->node->push)) {
                const char *av[2] = {"SUNSUBSCRIBE", s->channel};
                size_t al[2] = {12, strlen(s->channel)};
                (void)dq__push_send(s->node->push, 2, av, al);
            }
            attach_sub(s);
        }
    if (map_healthy(rt)) rt->heal_s = 0;
    else heal_later(rt);
    if (rt->refresh_again) {
        rt->refresh_again = 0;
        refresh(rt);
    }
}

static void refresh(dq__router *rt) {
    if (rt->refreshing) {
        rt->refresh_again = 1;
        return;
    }
    dq__node *n = any_up_node(rt);
    if (!n) {
        rt->refresh_again = 1; /* the first node to come up reads it */
        heal_later(rt);
        return;
    }
    rt->refresh_again = 0;
    const char *av[2] = {"CLUSTER", "SLOTS"};
    size_t al[2] = {7, 5};
    if (dq__conn_send(n->cmd, 0, 2, av, al, slots_reply, rt) == 0) rt->refreshing = 1;
    else heal_later(rt);
}

/* ------------------------------------------------------------ sentinel */

static dq__endpoint sentinel_endpoint(const dq__router *rt, int i) {
    const dq__url *u = &rt->c->url;
    dq__endpoint ep;
    memset(&ep, 0, sizeof ep);
    dq__endpoint_set(&ep, u->nodes[i].host, u->nodes[i].port, NULL);
    ep.user = u->sentinel_user;
    ep.password = u->sentinel_password;
    return ep;
}

static void ask_sentinel(dq__router *rt);

static void next_sentinel(dq__router *rt, const char *why) {
    dq__log(rt->c, "sentinel %s: %s", rt->asking ? rt->asking->name : "?", why);
    snprintf(rt->errstr, sizeof rt->errstr, "no sentinel named a master for '%.60s' (last: %.60s: %.80s)",
             rt->c->url.master, rt->asking ? rt->asking->name : "?", why);
    if (rt->asking) dq__conn_retire(rt->asking);
    rt->asking = NULL;
    rt->sentinel_next = (rt->sentinel_next + 1) % rt->c->url.nnodes;
    if (rt->sentinel_next == 0) {
        /* A full round failed: wait before the next one. */
        rt->discover_rounds++;
        rt->discovering = 0;
        heal_later(rt);
        return;
    }
    ask_sentinel(rt);
}

static void watch_event(dq__push *p, int event, redisReply *reply, void *privdata);

/* Listens for +switch-master on sentinel i (instead of any other). */
static void watch_sentinel(dq__router *rt, int i) {
    if (rt->watch && rt->watch_sentinel == i) return;
    dq__push_free(rt->watch);
    dq__endpoint ep = sentinel_endpoint(rt, i);
    rt->watch = dq__push_new(rt->c, &ep, watch_event, rt);
    rt->watch_sentinel = i;
}

static void master_addr_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    (void)conn, (void)code;
    dq__router *rt = privdata;
    if (!reply) return; /* the connection failed: its on_fail moves on */
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
        reply->element[0]->type != REDIS_REPLY_STRING) {
        next_sentinel(rt, reply->type == REDIS_REPLY_ERROR ? reply->str : "does not know the master");
        return;
    }
    if (rt->failover_seen) {
        /* Ask again shortly (the same sentinel first: it runs it). */
        dq__log(rt->c, "sentinel %s: failover of %s in progress; waiting", conn->name,
                rt->c->url.master);
        dq__conn_retire(rt->asking);
        rt->asking = NULL;
        rt->discovering = 0;
        rt->heal_s = 0;
        heal_later(rt);
        return;
    }
    char host[256];
    snprintf(host, sizeof host, "%s", reply->element[0]->str);
    int port = (int)dq__reply_int(reply->element[1]);
    int answered = rt->sentinel_next;
    dq__conn_retire(rt->asking);
    rt->asking = NULL;
    rt->discovering = 0;
    rt->discover_rounds = 0;
    /* A new address restarts the connections there; the same address
     * leaves the command connection to its own retries (a failover may not
     * be over yet, and each failed attempt asks again, with a backoff). */
    if (!rt->master) rt->master = node_get(rt, host, port);
    else node_move(rt->master, host, port);
    watch_sentinel(rt, answered);
}

/* SENTINEL MASTER's flags: while this sentinel runs a failover, the master
 * it names may already have been replaced by a promoted replica, and every
 * write it takes until it is demoted is lost (even one a replica of it
 * confirmed with WAIT: that replica resyncs from the new master). So the
 * answer waits until the failover is over. */
static void master_flags_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    (void)conn, (void)code;
    dq__router *rt = privdata;
    rt->failover_seen = 0;
    if (!reply || reply->type != REDIS_REPLY_ARRAY) return;
    for (size_t i = 0; i + 1 < reply->elements; i += 2) {
        const redisReply *k = reply->element[i], *v = reply->element[i + 1];
        if (k->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING &&
            strcmp(k->str, "flags") == 0 && strstr(v->str, "failover_in_progress"))
            rt->failover_seen = 1;
    }
}

static void sentinel_up(dq__conn *conn, void *privdata) {
    dq__router *rt = privdata;
    const char *master = rt->c->url.master;
    const char *flags[3] = {"SENTINEL", "MASTER", master};
    size_t flags_len[3] = {8, 6, strlen(master)};
    const char *av[3] = {"SENTINEL", "get-master-addr-by-name", master};
    size_t al[3] = {8, 23, strlen(master)};
    /* Pipelined: the flags' reply comes first. */
    if (dq__conn_send(conn, 0, 3, flags, flags_len, master_flags_reply, rt) != 0 ||
        dq__conn_send(conn, 0, 3, av, al, master_addr_reply, rt) != 0)
        next_sentinel(rt, "cannot send");
}

static void sentinel_fail(dq__conn *conn, void *privdata) {
    next_sentinel(privdata, conn->errstr[0] ? conn->errstr : "unreachable");
}

static void ask_sentinel(dq__router *rt) {
    dq__endpoint ep = sentinel_endpoint(rt, rt->sentinel_next);
    rt->asking = dq__conn_new(rt->c, DQ__CONN_SENTINEL, &ep);
    if (!rt->asking) {
        rt->discovering = 0;
        heal_later(rt);
        return;
    }
    rt->asking->on_up = sentinel_up;
    rt->asking->on_down = sentinel_fail;
    rt->asking->on_fail = sentinel_fail;
    rt->asking->event_privdata = rt;
    dq__conn_start(rt->asking);
}

/* Asks the sentinels, in turn from the last one that answered, where the
 * master is. One round at a time. */
static void discover(dq__router *rt) {
    if (rt->discovering || rt->topology != DQ__TOPO_SENTINEL) return;
    ev_timer_stop(rt->c->loop, &rt->heal_timer);
    rt->discovering = 1;
    ask_sentinel(rt);
}

/* "+switch-master <name> <old ip> <old port> <new ip> <new port>", or
 * "+promoted-slave slave <ip:port> <ip> <port> @ <name> <ip> <port>": the
 * promotion comes first, and the sooner we move, the fewer writes reach an
 * old master that is about to become a replica (and lose them). */
static void switch_master(dq__router *rt, const char *channel, const char *msg, size_t len) {
    char text[600], name[128], oldh[256], newh[256], kind[16], tag[300];
    int oldp, newp;
    if (len >= sizeof text || !rt->master) return;
    memcpy(text, msg, len);
    text[len] = '\0';
    if (strcmp(channel, "+switch-master") == 0) {
        if (sscanf(text, "%127s %255s %d %255s %d", name, oldh, &oldp, newh, &newp) != 5) return;
    } else if (sscanf(text, "%15s %299s %255s %d @ %127s %255s %d", kind, tag, newh, &newp, name,
                      oldh, &oldp) != 7) {
        return;
    }
    if (strcmp(name, rt->c->url.master) != 0) return;
    node_move(rt->master, newh, newp);
}

static void watch_event(dq__push *p, int event, redisReply *reply, void *privdata) {
    dq__router *rt = privdata;
    if (event == DQ__PUSH_UP) {
        const char *av[3] = {"SUBSCRIBE", "+switch-master", "+promoted-slave"};
        size_t al[3] = {9, 14, 15};
        (void)dq__push_send(p, 3, av, al);
        /* A switch may have happened while we did not listen. */
        discover(rt);
    } else if (event == DQ__PUSH_REPLY && reply->type == REDIS_REPLY_ARRAY && reply->elements == 3 &&
               reply->element[0]->type == REDIS_REPLY_STRING &&
               strcmp(reply->element[0]->str, "message") == 0 &&
               reply->element[1]->type == REDIS_REPLY_STRING &&
               reply->element[2]->type == REDIS_REPLY_STRING) {
        switch_master(rt, reply->element[1]->str, reply->element[2]->str, reply->element[2]->len);
    }
}

/* ------------------------------------------------------------ connect, free */

/* Runs the loop until done() says so or nothing is left to wait for. */
static void run_until(dq__router *rt, int (*done)(const dq__router *)) {
    while (!done(rt)) ev_run(rt->c->loop, EVRUN_ONCE);
}

static int any_attempt_open(const dq__router *rt) {
    for (dq__node *n = rt->nodes; n; n = n->next)
        if (n->cmd->state == DQ__CONNECTING || n->cmd->state == DQ__HANDSHAKE) return 1;
    return 0;
}

static int single_done(const dq__router *rt) {
    dq__conn *cmd = rt->master->cmd;
    return cmd->state == DQ__UP || (cmd->state == DQ__DOWN && cmd->last_code);
}

static int sentinel_done(const dq__router *rt) {
    if (rt->discover_rounds > 0) return 1;
    if (!rt->master && ev_time() > rt->connect_deadline) return 1; /* a failover lasts */
    return rt->master && single_done(rt);
}

static int cluster_done(const dq__router *rt) {
    if (rt->map_loaded) return 1;
    if (rt->refreshing) return 0;
    return !any_attempt_open(rt);
}

/* The first connection failed: its message, for dq_connect's caller. */
static int connect_failed(dq_client *c, int code, const char *why) {
    return dq__fail(c, code ? code : DQ_ECONNECT, "%s", why);
}

int dq__router_connect(dq_client *c) {
    dq__router *rt = calloc(1, sizeof *rt);
    if (!rt) return dq__fail(c, DQ_ENOMEM, "out of memory");
    c->router = rt;
    rt->c = c;
    rt->topology = c->url.topology;
    ev_timer_init(&rt->heal_timer, on_heal, 0, 0);
    rt->heal_timer.data = rt;
    const dq__url *u = &c->url;
    if (rt->topology == DQ__TOPO_SINGLE) {
        rt->master = node_get(rt, u->is_unix ? "" : u->host, u->is_unix ? 0 : u->port);
        if (!rt->master) return dq__fail(c, DQ_ENOMEM, "out of memory");
        rt->master->cmd->auto_reconnect = 0;
        run_until(rt, single_done);
        rt->master->cmd->auto_reconnect = 1;
        if (rt->master->cmd->state != DQ__UP)
            return connect_failed(c, rt->master->cmd->last_code, rt->master->cmd->errstr);
        return 0;
    }
    if (rt->topology == DQ__TOPO_SENTINEL) {
        rt->connect_deadline = ev_time() + c->opt.connect_timeout_ms / 1000.0;
        discover(rt);
        run_until(rt, sentinel_done);
        if (!rt->master) return connect_failed(c, DQ_ECONNECT, rt->errstr);
        if (rt->master->cmd->state != DQ__UP)
            return connect_failed(c, rt->master->cmd->last_code, rt->master->cmd->errstr);
        return 0;
    }
    rt->slots = calloc(DQ__SLOTS, sizeof *rt->slots);
    if (!rt->slots) return dq__fail(c, DQ_ENOMEM, "out of memory");
    for (int i = 0; i < u->nnodes; i++) {
        dq__node *n = node_get(rt, u->nodes[i].host, u->nodes[i].port);
        if (n) n->cmd->auto_reconnect = 0;
    }
    rt->refresh_again = 1; /* the first seed to come up reads the map */
    run_until(rt, cluster_done);
    for (dq__node *n = rt->nodes; n; n = n->next) {
        n->cmd->auto_reconnect = 1;
        if (n->cmd->state == DQ__DOWN) dq__conn_start(n->cmd);
    }
    if (!rt->map_loaded) {
        char why[DQ__ERRSTR_MAX];
        snprintf(why, sizeof why, "no cluster node answered: %.200s",
                 rt->errstr[0] ? rt->errstr : rt->nodes ? rt->nodes->cmd->errstr : "no nodes");
        return connect_failed(c, DQ_ECONNECT, why);
    }
    return 0;
}

void dq__router_free(dq_client *c) {
    dq__router *rt = c->router;
    if (!rt) return;
    ev_timer_stop(c->loop, &rt->heal_timer);
    while (rt->retrying) {
        rreq *r = rt->retrying;
        rt->retrying = r->next;
        ev_timer_stop(c->loop, &r->timer);
        deliver(r, NULL, NULL, DQ_ECLOSED);
    }
    while (rt->subs) dq__route_unsubscribe(c, rt->subs);
    dq__push_free(rt->watch);
    if (rt->asking) dq__conn_free(rt->asking);
    while (rt->nodes) {
        dq__node *n = rt->nodes;
        rt->nodes = n->next;
        node_free(n);
    }
    free(rt->slots);
    free(rt);
    c->router = NULL;
}
