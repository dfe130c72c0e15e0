/*
 * sentinel.c - finding the master of a Sentinel-managed group: the
 * sentinels are asked in turn (SENTINEL get-master-addr-by-name, with
 * SENTINEL MASTER's flags: no answer while that sentinel runs a failover),
 * and one of them is watched for +promoted-slave and +switch-master, so a
 * running client moves as soon as a replica is promoted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router.h"

/* ------------------------------------------------------------ sentinel */

static dq__endpoint sentinel_endpoint(const dq__router *rt, int i) {
    const dq__url *u = &rt->c->url;
    dq__endpoint ep;
    memset(&ep, 0, sizeof ep);
    dq__endpoint_set(&ep, u->nodes[i].host, u->nodes[i].port, NULL);
    ep.user = u->sentinel_user;
    ep.password = u->sentinel_password;
    ep.tls = u->sentinel_tls;
    return ep;
}

static void ask_sentinel(dq__router *rt);

static void next_sentinel(dq__router *rt, const char *why) {
    dq__log(rt->c, "sentinel %s: %s", rt->asking ? rt->asking->name : "?", why);
    /* Sized to fit DQ__ERRSTR_MAX whole: Redis's refusals (WRONGPASS ...)
     * run to 100 bytes and more, and a cut one reads as a different error. */
    snprintf(rt->errstr, sizeof rt->errstr, "no sentinel named master '%.40s' (last %.46s: %.128s)",
             dq__url_master_shown(&rt->c->url), rt->asking ? rt->asking->name : "?", why);
    if (rt->asking) dq__conn_retire(rt->asking);
    rt->asking = NULL;
    rt->sentinel_next = (rt->sentinel_next + 1) % rt->c->url.nnodes;
    if (rt->sentinel_next == 0) {
        /* A full round failed: wait before the next one. */
        rt->discover_rounds++;
        rt->discovering = 0;
        dq__rt_heal_later(rt);
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
    /* A sentinel knows the name: a master's, whatever the URL's '#' was. */
    rt->c->url.master_hidden = 0;
    if (rt->failover_seen) {
        /* Ask again shortly (the same sentinel first: it runs it). */
        dq__log(rt->c, "sentinel %s: failover of %s in progress; waiting", conn->name,
                rt->c->url.master);
        /* What dq_connect reports if the failover outlasts its timeout. */
        snprintf(rt->errstr, sizeof rt->errstr, "sentinel %.46s reports a failover of '%.40s' in "
                 "progress", conn->name, rt->c->url.master);
        dq__conn_retire(rt->asking);
        rt->asking = NULL;
        rt->discovering = 0;
        rt->heal_s = 0;
        dq__rt_heal_later(rt);
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
    if (!rt->master) rt->master = dq__rt_node_get(rt, host, port);
    else dq__rt_node_move(rt->master, host, port);
    watch_sentinel(rt, answered);
}

/* SENTINEL MASTER's flags: while this sentinel runs a failover, the master
 * it names may already have been replaced by a promoted replica, and every
 * write it takes until it is demoted is lost (even one a replica of it
 * confirmed with WAIT: that replica resyncs from the new master). So the
 * answer waits until the failover is over, or until it has reached
 * reconf_slaves (or update_config): from then on the sentinel names the
 * promoted replica, which already reports itself master, and a client that
 * kept waiting would stall for as long as the other replicas take to
 * resync (up to the failover timeout) while the other sentinels already
 * name the new master. The connection's handshake still checks ROLE. */
static int failover_names_old_master(const char *state) {
    return strcmp(state, "reconf_slaves") != 0 && strcmp(state, "update_config") != 0;
}

static void master_flags_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    (void)conn, (void)code;
    dq__router *rt = privdata;
    rt->failover_seen = 0;
    if (!reply || reply->type != REDIS_REPLY_ARRAY) return;
    int in_progress = 0;
    const char *state = "";
    for (size_t i = 0; i + 1 < reply->elements; i += 2) {
        const redisReply *k = reply->element[i], *v = reply->element[i + 1];
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) continue;
        if (strcmp(k->str, "flags") == 0 && strstr(v->str, "failover_in_progress")) in_progress = 1;
        else if (strcmp(k->str, "failover-state") == 0) state = v->str;
    }
    rt->failover_seen = in_progress && failover_names_old_master(state);
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
        dq__rt_heal_later(rt);
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
void dq__rt_discover(dq__router *rt) {
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
    dq__rt_node_move(rt->master, newh, newp);
}

static void watch_event(dq__push *p, int event, redisReply *reply, void *privdata) {
    dq__router *rt = privdata;
    if (event == DQ__PUSH_UP) {
        const char *av[3] = {"SUBSCRIBE", "+switch-master", "+promoted-slave"};
        size_t al[3] = {9, 14, 15};
        (void)dq__push_send(p, 3, av, al);
        /* A switch may have happened while we did not listen. */
        dq__rt_discover(rt);
    } else if (event == DQ__PUSH_REPLY && reply->type == REDIS_REPLY_ARRAY && reply->elements == 3 &&
               reply->element[0]->type == REDIS_REPLY_STRING &&
               strcmp(reply->element[0]->str, "message") == 0 &&
               reply->element[1]->type == REDIS_REPLY_STRING &&
               reply->element[2]->type == REDIS_REPLY_STRING) {
        switch_master(rt, reply->element[1]->str, reply->element[2]->str, reply->element[2]->len);
    }
}
