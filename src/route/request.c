/*
 * request.c - one command through the router: sent to the node that serves
 * its slot (or held while that node's connection is being made), MOVED and
 * ASK followed, TRYAGAIN, CLUSTERDOWN, LOADING, READONLY and MASTERDOWN
 * retried with a bounded backoff (a single node's READONLY longer, over
 * connections made again: a demoted primary endpoint), an error reply rewritten once by the
 * caller's hook (script.c: a missing function library into FUNCTION LOAD and
 * EVAL) and the rewritten command's error explained by its other hook (a
 * user who may not load the library), and for a write, WAIT for
 * the client's wait_replicas pipelined behind it on the same connection
 * (for DQ_WAIT_ALL, the count of replicas a ROLE sent just before the write
 * lists): the reply reaches the caller with DQ_ENOTDURABLE when fewer
 * confirmed.
 * Every command's callback runs exactly once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router.h"

#define REDIRECTS_MAX 5      /* MOVED/ASK hops for one command           */
#define RETRIES_MAX 10       /* TRYAGAIN/CLUSTERDOWN/LOADING... retries   */
#define DEMOTED_RETRIES_MAX 30 /* READONLY from a single node: ~14 s      */
#define RETRY_MIN_S 0.02
#define RETRY_MAX_S 0.5

enum outcome { DELIVER, RESEND, RETRY_LATER };

struct dq__rreq {
    dq__rreq *next;          /* node's held list, or the retry list      */
    dq__router *rt;
    unsigned slot;
    unsigned flags;
    char *cmd;               /* owned                                    */
    size_t len;
    const dq__rewrite *rewrite; /* NULL: none                        */
    int rewritten;           /* the hook's command replaced the caller's */
    int after_pre;           /* sent again after another request's pre  */
    char *pre;               /* the rewrite's command to send first, owned */
    size_t pre_len;
    dq__reply_fn *fn;
    void *privdata;
    int redirects, retries;
    int asking;              /* send ASKING first (ASK redirect)          */
    dq__node *target;        /* a redirect's node, else the slot's owner */
    int wait_n;              /* WAIT for this many replicas, 0 = none,
                                DQ_WAIT_ALL = as many as ROLE lists      */
    int wait_need;           /* the current send's count (ROLE's for all) */
    int replies_left;        /* for the current send: command (+ WAIT)    */
    enum outcome outcome;
    redisReply *held;        /* the command's reply (a copy) until WAIT's */
    int held_code;
    dq__conn *conn;          /* the connection of the current send        */
    long long acked;         /* WAIT's answer                             */
    ev_timer timer;
};

typedef dq__rreq rreq;

static void dispatch(rreq *r);
static void retry_later(rreq *r);
static void settle(rreq *r);

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

/* ------------------------------------------------------------ requests */

static void rreq_free(rreq *r) {
    if (r->held) freeReplyObject(r->held);
    free(r->pre);
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

void dq__rt_fail_held(dq__node *n, int code) {
    rreq *list = n->held;
    n->held = n->held_tail = NULL;
    while (list) {
        rreq *r = list;
        list = r->next;
        deliver(r, n->cmd, NULL, code);
    }
}

static void on_cmd_reply(dq__conn *conn, redisReply *reply, int code, void *privdata);
static void on_wait_reply(dq__conn *conn, redisReply *reply, int code, void *privdata);
static void on_role_reply(dq__conn *conn, redisReply *reply, int code, void *privdata);

/* Pipelines "WAIT n timeout" behind what r sent on conn. */
static void send_wait(rreq *r, dq__conn *conn, int n) {
    char n_text[16], t_text[24];
    const char *av[3] = {"WAIT", n_text, t_text};
    size_t al[3] = {4, dq__fmt_i64(n_text, n), dq__fmt_i64(t_text, r->rt->c->opt.wait_timeout_ms)};
    r->wait_need = n;
    /* WAIT blocks up to its own timeout: no reply deadline of ours. */
    if (dq__conn_send(conn, DQ__SEND_NO_TIMEOUT, 3, av, al, on_wait_reply, r) == 0) r->replies_left++;
    else r->acked = -1;
}

/* Sends r on n's command connection (up). Returns 0 or a DQ_E* code. */
static int send_on(rreq *r, dq__node *n) {
    dq__conn *conn = n->cmd;
    int role = r->wait_n == DQ_WAIT_ALL;
    if (role) {
        /* Every replica the master lists just before the write: ROLE
         * goes first, and WAIT follows once its reply has counted them
         * (on_role_reply), one round trip later than a fixed count's. */
        const char *av[1] = {"ROLE"};
        size_t al[1] = {4};
        if (dq__conn_send(conn, 0, 1, av, al, on_role_reply, r) != 0) return DQ_ECONNECT;
    }
    if (r->asking) {
        const char *av[1] = {"ASKING"};
        size_t al[1] = {6};
        if (dq__conn_send(conn, 0, 1, av, al, dq__ignore_reply, NULL) != 0) return DQ_ECONNECT;
        r->asking = 0;
    }
    if (r->pre) {
        if (dq__conn_send_raw(conn, 0, r->pre, r->pre_len, dq__ignore_reply, NULL) != 0)
            return DQ_ECONNECT;
        free(r->pre); /* sent: the connection has its copy */
        r->pre = NULL;
        n->pre_of = r->rewrite, n->pre_ups = conn->ups;
    }
    int rc = dq__conn_send_raw(conn, r->flags & DQ__SEND_NO_TIMEOUT, r->cmd, r->len, on_cmd_reply, r);
    if (rc) return rc;
    r->conn = conn;
    r->replies_left = 1 + role;
    r->outcome = DELIVER;
    r->held_code = 0;
    r->acked = -1;
    r->wait_need = r->wait_n;
    if (r->wait_n > 0) send_wait(r, conn, r->wait_n);
    return 0;
}

/* The replicas a master's ROLE lists: {"master", offset, {{ip, port,
 * offset}, ...}} (the ones online: one still in its first sync is not
 * listed, and WAIT would not count it either). -1 for another reply. */
static int role_replicas(const redisReply *reply) {
    if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements < 3 ||
        reply->element[0]->type != REDIS_REPLY_STRING || strcmp(reply->element[0]->str, "master") != 0 ||
        reply->element[2]->type != REDIS_REPLY_ARRAY)
        return -1;
    return (int)reply->element[2]->elements;
}

static void on_role_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    (void)code;
    rreq *r = privdata;
    r->replies_left--;
    int n = role_replicas(reply);
    /* At least one: "all" of none would make no write durable. A node that
     * is no master gets the same, its write is refused anyway (READONLY,
     * retried) and a refused ROLE leaves acked at -1: not confirmed. */
    if (n >= 0 || (reply && reply->type != REDIS_REPLY_ERROR)) send_wait(r, conn, n > 1 ? n : 1);
    else if (reply)
        dq__log(r->rt->c, "cannot count the replicas of %s: ROLE: %s", conn->name, reply->str);
    if (r->replies_left == 0) settle(r);
}

void dq__rt_send_held(dq__node *n) {
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
    dq__node *n = r->target ? r->target : dq__rt_owner(rt, r->slot);
    r->target = NULL;
    if (!n && rt->topology == DQ__TOPO_CLUSTER && r->retries < RETRIES_MAX) {
        /* The map read during a failover may lack the slot for a moment
         * (the node asked had not heard of the promotion): read it again
         * and retry, as for CLUSTERDOWN. */
        r->retries++;
        dq__rt_refresh(rt);
        retry_later(r);
        return 0;
    }
    if (!n) {
        snprintf(rt->errstr, sizeof rt->errstr, "no node serves slot %u (cluster map %s)", r->slot,
                 rt->map_loaded ? "incomplete" : "not loaded");
        return DQ_ECONNECT;
    }
    dq__rt_node_renew_demoted(n);
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
        case RESEND: dispatch(r); return;
        case RETRY_LATER: retry_later(r); return;
        case DELIVER: break;
    }
    int code = r->held_code;
    if (!code && r->wait_n != 0 && r->held && r->held->type != REDIS_REPLY_ERROR &&
        (r->acked < r->wait_need || r->wait_need <= 0)) {
        code = DQ_ENOTDURABLE;
        dq__fail(r->rt->c, code, "only %lld of %d replicas confirmed the write within %d ms",
                 r->acked < 0 ? 0 : r->acked, r->wait_need > 0 ? r->wait_need : 1,
                 r->rt->c->opt.wait_timeout_ms);
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
    enum dq__errclass class = dq__reply_class(reply);
    int moved = class == DQ__ERR_MOVED, ask = class == DQ__ERR_ASK;
    if ((moved || ask) && r->redirects < REDIRECTS_MAX) {
        char host[256];
        int port;
        if (dq__rt_redirect_addr(reply, host, sizeof host, &port) != 0) return DELIVER;
        dq__node *n = dq__rt_node_get(rt, host, port);
        if (!n) return DELIVER;
        r->redirects++;
        r->target = n;
        if (ask) r->asking = 1;
        else if (rt->slots) {
            rt->slots[r->slot % DQ__SLOTS] = n;
            dq__rt_refresh(rt);
        }
        return RESEND;
    }
    int busy = class == DQ__ERR_TRYAGAIN || class == DQ__ERR_CLUSTERDOWN || class == DQ__ERR_LOADING ||
               class == DQ__ERR_READONLY || class == DQ__ERR_MASTERDOWN;
    /* A single node that says READONLY was demoted: its DNS name (a managed
     * service's primary endpoint) may name the new master already, or it
     * may be made master again. The command was not run: it waits longer
     * for either, over a connection made again (dispatch). */
    int demoted = class == DQ__ERR_READONLY && rt->topology == DQ__TOPO_SINGLE;
    if (busy && r->retries < (demoted ? DEMOTED_RETRIES_MAX : RETRIES_MAX)) {
        r->retries++;
        if (demoted && rt->master) dq__rt_node_demoted(rt->master);
        if (rt->topology == DQ__TOPO_CLUSTER && class != DQ__ERR_TRYAGAIN) dq__rt_refresh(rt);
        if (rt->topology == DQ__TOPO_SENTINEL) dq__rt_discover(rt);
        return r->flags & DQ__ROUTE_OWN_RETRY ? DELIVER : RETRY_LATER;
    }
    if (r->rewrite && !r->rewritten) {
        /* Another request's pre went to this connection after r did: r
         * sent again runs after it (once). */
        dq__node *n = r->conn ? r->conn->node : NULL;
        int pre_sent = !r->after_pre && n && n->cmd == r->conn && n->pre_of == r->rewrite &&
                       n->pre_ups == r->conn->ups;
        size_t len;
        char *cmd = r->rewrite->rewrite(r->cmd, r->len, reply, pre_sent, &len, &r->pre, &r->pre_len);
        if (cmd) {
            free(r->cmd);
            r->cmd = cmd, r->len = len;
            if (pre_sent) r->after_pre = 1;
            else r->rewritten = 1; /* once */
            return RESEND;
        }
    }
    return DELIVER;
}

/* The rewritten command's error reply as the hook explains it: a new reply
 * (freed with freeReplyObject), or NULL to deliver reply as it is. */
static redisReply *explained(const rreq *r, const dq__conn *conn, const redisReply *reply) {
    if (!r->rewritten || !r->rewrite->explain || !reply || reply->type != REDIS_REPLY_ERROR) return NULL;
    char *text = r->rewrite->explain(reply, conn);
    redisReply *own = text ? calloc(1, sizeof *own) : NULL;
    if (!own) {
        free(text); /* out of memory: Redis's own words go */
        return NULL;
    }
    own->type = REDIS_REPLY_ERROR;
    own->str = text;
    own->len = strlen(text);
    return own;
}

static void on_cmd_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    rreq *r = privdata;
    r->replies_left--;
    r->outcome = reply && reply->type == REDIS_REPLY_ERROR ? judge_error(r, reply) : DELIVER;
    redisReply *own = r->outcome == DELIVER ? explained(r, conn, reply) : NULL;
    if (r->outcome == DELIVER && r->replies_left == 0) {
        /* The common case, with no copy: no WAIT behind it. */
        deliver(r, conn, own ? own : reply, code);
        if (own) freeReplyObject(own);
        return;
    }
    if (r->outcome == DELIVER) {
        r->held_code = code;
        if (own) r->held = own;
        else if (reply && !(r->held = reply_dup(reply))) r->held_code = DQ_ENOMEM;
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
              const dq__rewrite *rewrite, dq__reply_fn *fn, void *privdata) {
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
    dq__node *n = dq__rt_owner(rt, slot);
    if (n && n->cmd->state != DQ__DOWN && n->cmd->state != DQ__CLOSED) return 0;
    if (!n && rt->topology == DQ__TOPO_CLUSTER) return 0; /* dq__route retries */
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

void dq__rt_requests_free(dq__router *rt) {
    while (rt->retrying) {
        rreq *r = rt->retrying;
        rt->retrying = r->next;
        ev_timer_stop(rt->c->loop, &r->timer);
        deliver(r, NULL, NULL, DQ_ECLOSED);
    }
}
