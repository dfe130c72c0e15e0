/*
 * sentinel.c - finding the master of a Sentinel-managed group. A round
 * asks every sentinel of the URL at once (SENTINEL MASTER for its flags and
 * config epoch, then SENTINEL get-master-addr-by-name, pipelined) and
 * follows the answer with the newest config epoch: a sentinel that has not
 * heard of a failover yet names the old master with an older epoch. A
 * round ends when all have answered or failed, 0.2 s after a majority
 * answered, or at the connect timeout, whichever comes first. While
 * any sentinel that answers runs a failover not yet past the promotion,
 * the round names nothing and another follows shortly. Every sentinel is
 * also watched: +promoted-slave and +switch-master move a running client
 * at once, and +selected-slave (a failover has picked the replica to
 * promote) stops it from using the old master until a round names the
 * master again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router.h"

#define ROUND_GRACE_S 0.2 /* for the rest once a majority has answered */

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

static int asked_index(const dq__router *rt, const dq__conn *conn) {
    for (int i = 0; i < rt->c->url.nnodes; i++)
        if (rt->asking[i] == conn) return i;
    return -1;
}

static void round_end(dq__router *rt);

/* Sentinel i's part of the round is over: answered (why NULL) or not. */
static void answer_done(dq__router *rt, int i, const char *why) {
    if (i < 0 || rt->answers[i].state != DQ__ASK_PENDING) return;
    dq__sentinel_answer *a = &rt->answers[i];
    const char *name = rt->asking[i] ? rt->asking[i]->name : "?";
    if (why) {
        dq__log(rt->c, "sentinel %s: %s", name, why);
        /* Sized to fit DQ__ERRSTR_MAX whole: Redis's refusals (WRONGPASS
         * ...) run to 100 bytes and more, and a cut one reads as a
         * different error. */
        snprintf(rt->errstr, sizeof rt->errstr, "no sentinel named master '%.40s' (last %.46s: %.128s)",
                 dq__url_master_shown(&rt->c->url), name, why);
    }
    a->state = why ? DQ__ASK_FAILED : DQ__ASK_ANSWERED;
    if (rt->asking[i]) dq__conn_retire(rt->asking[i]);
    rt->asking[i] = NULL;
    if (--rt->pending == 0) {
        round_end(rt);
        return;
    }
    if (!why && ++rt->answered == rt->c->url.nnodes / 2 + 1) {
        /* A majority answered: the rest get a moment, not the connect
         * timeout (a sentinel cut off from us would hold every round). */
        ev_timer_stop(rt->c->loop, &rt->round_timer);
        ev_timer_set(&rt->round_timer, ROUND_GRACE_S, 0);
        ev_timer_start(rt->c->loop, &rt->round_timer);
    }
}

/* SENTINEL MASTER's flags: while this sentinel runs a failover, the master
 * it names may already have been replaced by a promoted replica, and every
 * write it takes until it is demoted is lost (even one a replica of it
 * confirmed with WAIT: that replica resyncs from the new master). So the
 * round waits until the failover is over, or until it has reached
 * reconf_slaves (or update_config): from then on the sentinel names the
 * promoted replica, which already reports itself master, and a client that
 * kept waiting would stall for as long as the other replicas take to
 * resync (up to the failover timeout) while the other sentinels already
 * name the new master. The connection's handshake still checks ROLE. */
static int failover_names_old_master(const char *state) {
    return strcmp(state, "reconf_slaves") != 0 && strcmp(state, "update_config") != 0;
}

static void master_flags_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    (void)code;
    dq__router *rt = privdata;
    int i = asked_index(rt, conn);
    if (i < 0 || !reply || reply->type != REDIS_REPLY_ARRAY) return; /* the address reply judges */
    int in_progress = 0;
    const char *state = "";
    for (size_t k = 0; k + 1 < reply->elements; k += 2) {
        const redisReply *key = reply->element[k], *v = reply->element[k + 1];
        if (key->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) continue;
        if (strcmp(key->str, "flags") == 0 && strstr(v->str, "failover_in_progress")) in_progress = 1;
        else if (strcmp(key->str, "failover-state") == 0) state = v->str;
        else if (strcmp(key->str, "config-epoch") == 0) rt->answers[i].epoch = atoll(v->str);
    }
    rt->answers[i].failover = in_progress && failover_names_old_master(state);
}

static void master_addr_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    (void)code;
    dq__router *rt = privdata;
    int i = asked_index(rt, conn);
    if (i < 0 || !reply) return; /* the connection failed: its on_fail ends its part */
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
        reply->element[0]->type != REDIS_REPLY_STRING) {
        answer_done(rt, i, reply->type == REDIS_REPLY_ERROR ? reply->str : "does not know the master");
        return;
    }
    /* A sentinel knows the name: a master's, whatever the URL's '#' was. */
    rt->c->url.master_hidden = 0;
    snprintf(rt->answers[i].host, sizeof rt->answers[i].host, "%s", reply->element[0]->str);
    rt->answers[i].port = (int)dq__reply_int(reply->element[1]);
    answer_done(rt, i, NULL);
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
        answer_done(rt, asked_index(rt, conn), "cannot send");
}

static void sentinel_fail(dq__conn *conn, void *privdata) {
    dq__router *rt = privdata;
    answer_done(rt, asked_index(rt, conn), conn->errstr[0] ? conn->errstr : "unreachable");
}

/* The round's time is up (the connect timeout, or the grace after a
 * majority): it ends with the answers it has. */
static void on_round_timer(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    dq__router *rt = w->data;
    for (int i = 0; i < rt->c->url.nnodes && rt->discovering; i++)
        answer_done(rt, i, "no answer in time (the others answered, or the connect timeout)");
}

static void watch_all(dq__router *rt);

/* The round is over (every sentinel answered or failed, or its time is
 * up): follow the newest answer. */
static void round_end(dq__router *rt) {
    ev_timer_stop(rt->c->loop, &rt->round_timer);
    rt->discovering = 0;
    const dq__sentinel_answer *best = NULL;
    int busy = -1, disagree = 0;
    for (int i = 0; i < rt->c->url.nnodes; i++) {
        const dq__sentinel_answer *a = &rt->answers[i];
        if (a->state != DQ__ASK_ANSWERED) continue;
        if (a->failover) busy = i;
        if (best && (best->port != a->port || strcmp(best->host, a->host) != 0)) disagree = 1;
        if (!best || a->epoch > best->epoch) best = a;
    }
    if (!best) { /* nobody answered: wait before the next round */
        rt->discover_rounds++;
        dq__rt_heal_later(rt);
        return;
    }
    if (busy >= 0) {
        /* What dq_connect reports if the failover outlasts its timeout;
         * logged once, not each round. */
        char why[DQ__ERRSTR_MAX];
        snprintf(why, sizeof why, "sentinel %.46s:%d reports a failover of '%.40s' in progress",
                 rt->c->url.nodes[busy].host, rt->c->url.nodes[busy].port,
                 dq__url_master_shown(&rt->c->url));
        if (!rt->failover_logged) dq__log(rt->c, "%s; waiting", why);
        rt->failover_logged = 1;
        memcpy(rt->errstr, why, sizeof why);
        rt->heal_s = 0;
        dq__rt_heal_later(rt);
        return;
    }
    if (disagree)
        dq__log(rt->c, "sentinels disagree on master %s: following %s:%d (config epoch %lld)",
                dq__url_master_shown(&rt->c->url), best->host, best->port, best->epoch);
    rt->discover_rounds = 0;
    rt->failover_logged = 0;
    /* A new address restarts the connections there; the same address
     * leaves the command connection to its own retries (a failover may not
     * be over yet, and each failed attempt asks again, with a backoff). */
    if (!rt->master) rt->master = dq__rt_node_get(rt, best->host, best->port);
    else dq__rt_node_move(rt->master, best->host, best->port);
    watch_all(rt);
}

/* Asks every sentinel of the URL where the master is. One round at a time. */
void dq__rt_discover(dq__router *rt) {
    if (rt->discovering || rt->topology != DQ__TOPO_SENTINEL) return;
    dq_client *c = rt->c;
    ev_timer_stop(c->loop, &rt->heal_timer);
    rt->discovering = 1;
    rt->pending = c->url.nnodes;
    rt->answered = 0;
    memset(rt->answers, 0, sizeof rt->answers);
    ev_timer_init(&rt->round_timer, on_round_timer, c->opt.connect_timeout_ms / 1000.0, 0);
    rt->round_timer.data = rt;
    ev_timer_start(c->loop, &rt->round_timer);
    for (int i = 0; i < c->url.nnodes; i++) {
        dq__endpoint ep = sentinel_endpoint(rt, i);
        rt->asking[i] = dq__conn_new(c, DQ__CONN_SENTINEL, &ep);
        if (!rt->asking[i]) continue; /* out of memory: the timer ends its part */
        rt->asking[i]->on_up = sentinel_up;
        rt->asking[i]->on_down = sentinel_fail;
        rt->asking[i]->on_fail = sentinel_fail;
        rt->asking[i]->event_privdata = rt;
    }
    /* Started once all are made: one may fail at once and end the round. */
    for (int i = 0; i < c->url.nnodes && rt->discovering; i++)
        if (rt->asking[i]) dq__conn_start(rt->asking[i]);
}

void dq__rt_sentinels_free(dq__router *rt) {
    ev_timer_stop(rt->c->loop, &rt->round_timer);
    for (int i = 0; i < DQ__URL_NODES_MAX; i++) {
        dq__push_free(rt->watch[i]);
        rt->watch[i] = NULL;
        if (rt->asking[i]) dq__conn_free(rt->asking[i]);
        rt->asking[i] = NULL;
    }
}

/* ------------------------------------------------------------ announcements */

/* "+switch-master <name> <old ip> <old port> <new ip> <new port>", or
 * "+promoted-slave slave <ip:port> <ip> <port> @ <name> <ip> <port>" (and
 * +selected-slave, alike): the promotion comes first, and the sooner we
 * move, the fewer writes reach an old master that is about to become a
 * replica (and lose them). +selected-slave comes before it: from then on
 * the old master must take no write, so the client holds off it until a
 * round names the master. */
static void announcement(dq__router *rt, const char *channel, const char *msg, size_t len) {
    char text[600], name[128], oldh[256], newh[256], kind[16], tag[300];
    int oldp, newp;
    if (len >= sizeof text || !rt->master) return;
    memcpy(text, msg, len);
    text[len] = '\0';
    if (strcmp(channel, "+switch-master") == 0) {
        if (sscanf(text, "%127s %255s %d %255s %d", name, oldh, &oldp, newh, &newp) != 5) return;
    } else if (sscanf(text, "%15s %299s %255s %d @ %127s %255s %d", kind, tag, newh, &newp, name, oldh,
                      &oldp) != 7) {
        return;
    }
    if (strcmp(name, rt->c->url.master) != 0) return;
    if (strcmp(channel, "+selected-slave") == 0) {
        if (rt->master->ep.port == oldp && strcmp(rt->master->ep.host, oldh) == 0) {
            dq__rt_node_hold(rt->master, "a sentinel is promoting a replica of it");
            dq__rt_discover(rt);
        }
        return;
    }
    dq__rt_node_move(rt->master, newh, newp);
}

static void watch_event(dq__push *p, int event, redisReply *reply, void *privdata) {
    dq__router *rt = privdata;
    if (event == DQ__PUSH_UP) {
        const char *av[4] = {"SUBSCRIBE", "+switch-master", "+promoted-slave", "+selected-slave"};
        size_t al[4] = {9, 14, 15, 15};
        (void)dq__push_send(p, 4, av, al);
        /* A switch may have happened while we did not listen. */
        dq__rt_discover(rt);
    } else if (event == DQ__PUSH_REPLY && reply->type == REDIS_REPLY_ARRAY && reply->elements == 3 &&
               reply->element[0]->type == REDIS_REPLY_STRING &&
               strcmp(reply->element[0]->str, "message") == 0 &&
               reply->element[1]->type == REDIS_REPLY_STRING &&
               reply->element[2]->type == REDIS_REPLY_STRING) {
        announcement(rt, reply->element[1]->str, reply->element[2]->str, reply->element[2]->len);
    }
}

/* Listens on every sentinel: only the one that runs a failover announces
 * the promotion at once; the others follow a second or two later. */
static void watch_all(dq__router *rt) {
    for (int i = 0; i < rt->c->url.nnodes; i++) {
        if (rt->watch[i]) continue;
        dq__endpoint ep = sentinel_endpoint(rt, i);
        rt->watch[i] = dq__push_new(rt->c, &ep, watch_event, rt);
    }
}
