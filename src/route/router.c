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
 * Files: this one (nodes, blocking pools, healing, connect and free),
 * request.c, subs.c, slotmap.c and sentinel.c; router.h holds what they
 * share. It knows nothing of queues or scripts: callers give a slot and a command
 * in RESP, and optional hooks for error replies (script.c turns a missing
 * function library into FUNCTION LOAD and EVAL with them, and explains the
 * EVAL's refusal). Nothing here calls up into the operations;
 * they hear of topology changes through the hooks they register.
 *
 * Commands for a node whose connection is still being made wait for it
 * (connect_timeout_ms at most); a node known to be down fails them at once,
 * as a single node always did.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router.h"

#define HEAL_MIN_S 0.05      /* topology re-reads while a node is broken */
#define HEAL_MAX_S 1.0
#define RENEW_MIN_S 2.0      /* a demoted single node's renewals, apart  */

/* ------------------------------------------------------------ replies */

int dq__reply_is_topology(const redisReply *r) {
    switch (dq__reply_class(r)) {
        case DQ__ERR_MOVED:
        case DQ__ERR_ASK:
        case DQ__ERR_TRYAGAIN:
        case DQ__ERR_CLUSTERDOWN:
        case DQ__ERR_READONLY:
        case DQ__ERR_LOADING:
        case DQ__ERR_MASTERDOWN:
        case DQ__ERR_UNBLOCKED: return 1;
        default: return 0;
    }
}

/* "MOVED <slot> <host>:<port>" or ASK: the address, split. Returns 0. */
int dq__rt_redirect_addr(const redisReply *r, char *host, size_t hostlen, int *port) {
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

static dq__endpoint data_endpoint(const dq__router *rt, const char *host, int port) {
    const dq__url *u = &rt->c->url;
    dq__endpoint ep;
    memset(&ep, 0, sizeof ep);
    dq__endpoint_set(&ep, host, port, u->is_unix ? u->path : NULL);
    ep.user = u->user;
    ep.password = u->password;
    ep.db = u->topology == DQ__TOPO_CLUSTER ? 0 : u->db;
    ep.check_master = u->topology == DQ__TOPO_SENTINEL;
    ep.tls = u->tls;
    return ep;
}

static dq__node *node_find(dq__router *rt, const char *host, int port) {
    for (dq__node *n = rt->nodes; n; n = n->next)
        if (n->ep.port == port && strcmp(n->ep.host, host) == 0) return n;
    return NULL;
}

/* The node at host:port, made (and its command connection started) if new. */
dq__node *dq__rt_node_get(dq__router *rt, const char *host, int port) {
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


static void node_free(dq__node *n) {
    dq__rt_fail_held(n, DQ_ECLOSED);
    while (n->busy) dq__conn_unlist(n->busy); /* their holders free them */
    while (n->idle) {
        dq__conn *b = n->idle;
        n->idle = b->next_in_pool;
        dq__conn_free(b);
    }
    dq__push_free(n->push);
    dq__conn_free(n->cmd);
    free(n);
}

dq__node *dq__rt_owner(const dq__router *rt, unsigned slot) {
    if (rt->topology != DQ__TOPO_CLUSTER) return rt->master;
    return rt->slots[slot % DQ__SLOTS];
}

unsigned *dq__route_master_slots(dq_client *c, size_t *n) {
    const dq__router *rt = c->router;
    size_t cap = 1, have = 0;
    for (const dq__node *nd = rt->nodes; nd; nd = nd->next) cap++;
    unsigned *slots = malloc(cap * sizeof *slots);
    if (!slots) return NULL;
    if (rt->topology != DQ__TOPO_CLUSTER || !rt->slots) slots[have++] = 0;
    /* Every owner is one of rt->nodes (at most cap - 1 of them); NULL, a
     * slot no node serves, counts as one more. */
    for (unsigned s = 0; rt->topology == DQ__TOPO_CLUSTER && rt->slots && s < DQ__SLOTS; s++) {
        size_t i = 0;
        while (i < have && rt->slots[slots[i]] != rt->slots[s]) i++;
        if (i == have) slots[have++] = s;
    }
    *n = have;
    return slots;
}


static void node_cmd_up(dq__conn *conn, void *privdata) {
    dq__node *n = privdata;
    dq__router *rt = n->rt;
    if (conn->ups > 1) {
        rt->c->counters.reconnects++;
        /* The pair of node_cmd_down's "reconnecting": logs say when it
         * was over. */
        dq__log(rt->c, "%s: reconnected", n->ep.name);
    }
    if (n == rt->master) rt->heal_s = 0;
    dq__rt_send_held(n);
    if (rt->topology == DQ__TOPO_CLUSTER && rt->refresh_again) dq__rt_refresh(rt);
    /* Announcements may have been missed while it was away. */
    if (rt->on_up) rt->on_up(rt->c, rt->on_up_privdata);
}

/* The node is unreachable: its waiting commands fail, and the topology is
 * read again (a failover may have moved its slots or the master). */
static void node_lost(dq__node *n) {
    dq__router *rt = n->rt;
    dq__rt_fail_held(n, n->cmd->last_code ? n->cmd->last_code : DQ_ECONNECT);
    if (rt->topology != DQ__TOPO_SINGLE) dq__rt_heal_later(rt);
}

static void node_cmd_down(dq__conn *conn, void *privdata) {
    (void)conn;
    dq__node *n = privdata;
    dq__log(n->rt->c, "%s; %s", n->cmd->errstr,
            n->on_hold ? "waiting for the sentinels" : "reconnecting");
    node_lost(n);
}

static void node_cmd_fail(dq__conn *conn, void *privdata) {
    (void)conn;
    node_lost(privdata);
}

/* Ends the waits out on n's blocking connections: a BLPOP sent to a node
 * that is frozen or cut off would wait for it however long it stays so,
 * while another node serves. Each holder hears of the loss (on_down or
 * on_fail) and waits again where the node is now; it may take a new
 * connection meanwhile, so the list is emptied first. */
static void end_busy(dq__node *n) {
    dq__conn *list = NULL;
    while (n->busy) dq__conn_list_add(&list, n->busy);
    while (list) {
        dq__conn *b = list;
        dq__conn_unlist(b);
        dq__conn_abort(b, DQ_ECONNECT, "the master moved");
    }
}

/* Drops n's blocking connections, idle and busy. */
static void node_drop_blocking(dq__node *n) {
    while (n->idle) {
        dq__conn *b = n->idle;
        n->idle = b->next_in_pool;
        dq__conn_retire(b);
    }
    end_busy(n);
}

/* Makes all of n's connections again (each connect resolves the name
 * again): blocking ones dropped, subscriptions moved, the command
 * connection aborted (why) and started again: at once if it was down or
 * now is set, else after its reconnect backoff. */
static void node_renew(dq__node *n, const char *why, int now) {
    dq__router *rt = n->rt;
    node_drop_blocking(n);
    if (n->push) {
        dq__push_free(n->push);
        n->push = NULL;
        for (dq__sub *s = rt->subs; s; s = s->next)
            if (s->node == n) s->node = NULL, s->confirmed = 0;
    }
    int was_down = n->cmd->state == DQ__DOWN;
    if (!was_down) dq__conn_abort(n->cmd, DQ_ECONNECT, why);
    if ((was_down || now) && n->cmd->state == DQ__DOWN) {
        ev_timer_stop(rt->c->loop, &n->cmd->retry_timer);
        dq__conn_start(n->cmd);
    }
    for (dq__sub *s = rt->subs; s; s = s->next)
        if (!s->node) dq__rt_attach_sub(s);
}

/* Points node n (single or Sentinel master) at another address: its
 * connections are dropped and made again there. At the same address, a
 * held node's command connection starts again (dq__rt_node_hold). */
void dq__rt_node_move(dq__node *n, const char *host, int port) {
    dq__router *rt = n->rt;
    int held = n->on_hold;
    if (held) n->on_hold = 0, n->cmd->auto_reconnect = 1;
    if (n->ep.port == port && strcmp(n->ep.host, host) == 0) {
        if (held && n->cmd->state == DQ__DOWN) dq__conn_start(n->cmd);
        return;
    }
    dq__log(rt->c, "master %s is now at %s:%d (was %s)", dq__url_master_shown(&rt->c->url), host, port,
            n->ep.name);
    dq__endpoint_set(&n->ep, host, port, NULL);
    dq__endpoint_set(&n->cmd->ep, host, port, NULL);
    node_renew(n, "the master moved", 0);
}

void dq__rt_node_demoted(dq__node *n) { n->demoted = 1; }

int dq__rt_node_renew_demoted(dq__node *n) {
    double now = ev_now(n->rt->c->loop);
    if (!n->demoted || n->cmd->state != DQ__UP || n->cmd->head || now - n->renewed_at < RENEW_MIN_S)
        return 0;
    n->demoted = 0;
    n->renewed_at = now;
    /* node_cmd_down logs it, with "reconnecting". */
    node_renew(n, "answered READONLY: no longer a master (a failover?); its name is resolved again", 1);
    return 1;
}

/* Stops using node n until dq__rt_node_move names where the master is. */
void dq__rt_node_hold(dq__node *n, const char *why) {
    dq__router *rt = n->rt;
    if (n->on_hold) return;
    dq__log(rt->c, "master %s at %s: %s; not using it until the sentinels name the master",
            dq__url_master_shown(&rt->c->url), n->ep.name, why);
    /* Its wake-ups (push) may go on: they only make takes look, and the
     * looks go through the command connection, held down. */
    node_drop_blocking(n);
    n->on_hold = 1;
    n->cmd->auto_reconnect = 0;
    ev_timer_stop(rt->c->loop, &n->cmd->retry_timer);
    if (n->cmd->state != DQ__DOWN) dq__conn_abort(n->cmd, DQ_ECONNECT, why);
}

/* ------------------------------------------------------------ blocking pool */

dq__conn *dq__route_blocking(dq_client *c, unsigned slot) {
    dq__node *n = dq__rt_owner(c->router, slot);
    if (!n) {
        dq__fail(c, DQ_ECONNECT, "no node serves slot %u", slot);
        return NULL;
    }
    if (n->on_hold) {
        dq__fail(c, DQ_ECONNECT, "%s is held: a failover is under way", n->ep.name);
        return NULL;
    }
    dq__conn *b;
    while ((b = n->idle)) {
        n->idle = b->next_in_pool;
        b->next_in_pool = NULL;
        if (b->state == DQ__UP) {
            dq__conn_list_add(&n->busy, b);
            return b;
        }
        /* Lost while idle (a restart, a killed client): a blocking
         * connection does not reconnect by itself, so one handed out now
         * would never come up, and its take would wait for ever. */
        dq__conn_retire(b);
    }
    b = dq__conn_new(c, DQ__CONN_BLOCKING, &n->ep);
    if (!b) {
        dq__fail(c, DQ_ENOMEM, "out of memory");
        return NULL;
    }
    b->node = n;
    dq__conn_list_add(&n->busy, b);
    dq__conn_start(b);
    return b;
}

void dq__route_blocking_release(dq_client *c, dq__conn *b) {
    dq__node *n = b->node;
    dq__conn_unlist(b);
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
    const dq__node *n = dq__rt_owner(c->router, slot);
    /* The node, and where it is now (a Sentinel master moves). */
    return n && b->node == n && b->ep.port == n->ep.port && strcmp(b->ep.host, n->ep.host) == 0;
}

/* ------------------------------------------------------------ healing */

static void on_heal(struct ev_loop *loop, ev_timer *w, int revents) {
    /* Sentinel: ask where the master is; Cluster: read the slot map. */
    (void)loop, (void)revents;
    dq__router *rt = w->data;
    if (rt->topology == DQ__TOPO_CLUSTER) dq__rt_refresh(rt);
    else dq__rt_discover(rt);
}

/* Reads the topology again after a backoff that grows while it stays
 * broken (reset when it reads whole). */
void dq__rt_heal_later(dq__router *rt) {
    if (ev_is_active(&rt->heal_timer)) return;
    rt->heal_s = rt->heal_s ? rt->heal_s * 2 : HEAL_MIN_S;
    if (rt->heal_s > HEAL_MAX_S) rt->heal_s = HEAL_MAX_S;
    ev_timer_set(&rt->heal_timer, rt->heal_s, 0);
    ev_timer_start(rt->c->loop, &rt->heal_timer);
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
    /* No master named yet, or held off the old one: a failover lasts. */
    if (!rt->master || rt->master->on_hold) return ev_time() > rt->connect_deadline;
    return single_done(rt);
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
        rt->master = dq__rt_node_get(rt, u->is_unix ? "" : u->host, u->is_unix ? 0 : u->port);
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
        dq__rt_discover(rt);
        run_until(rt, sentinel_done);
        if (!rt->master && !rt->errstr[0])
            snprintf(rt->errstr, sizeof rt->errstr, "no sentinel named master '%.40s' within %d ms",
                     dq__url_master_shown(u), c->opt.connect_timeout_ms);
        if (!rt->master) return connect_failed(c, DQ_ECONNECT, rt->errstr);
        if (rt->master->cmd->state != DQ__UP)
            return connect_failed(c, rt->master->cmd->last_code, rt->master->cmd->errstr);
        return 0;
    }
    rt->slots = calloc(DQ__SLOTS, sizeof *rt->slots);
    if (!rt->slots) return dq__fail(c, DQ_ENOMEM, "out of memory");
    for (int i = 0; i < u->nnodes; i++) {
        dq__node *n = dq__rt_node_get(rt, u->nodes[i].host, u->nodes[i].port);
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
                 rt->errstr[0] ? rt->errstr
                 : rt->nodes   ? rt->nodes->cmd->errstr
                               : "no nodes");
        return connect_failed(c, DQ_ECONNECT, why);
    }
    return 0;
}

void dq__router_free(dq_client *c) {
    dq__router *rt = c->router;
    if (!rt) return;
    ev_timer_stop(c->loop, &rt->heal_timer);
    dq__rt_requests_free(rt);
    while (rt->subs) dq__route_unsubscribe(c, rt->subs);
    dq__rt_sentinels_free(rt);
    while (rt->nodes) {
        dq__node *n = rt->nodes;
        rt->nodes = n->next;
        node_free(n);
    }
    free(rt->slots);
    free(rt);
    c->router = NULL;
}
