/*
 * subs.c - sharded subscriptions (SSUBSCRIBE) through the router: each is
 * made at the node that serves its channel's slot, on that node's push
 * connection (push.c), and follows the queue when a failover or a slot move
 * ends it: the server sends sunsubscribe, refuses with MOVED, or the
 * connection drops. Every confirmation is reported (DQ__SUB_READY), so the
 * scheduler catches up on what it may have missed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router.h"

/* ------------------------------------------------------------ subscriptions */

static void push_event(dq__push *p, int event, redisReply *reply, void *privdata);

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
void dq__rt_attach_sub(dq__sub *s) {
    dq__router *rt = s->rt;
    dq__node *n = dq__rt_owner(rt, s->slot);
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
    if (rt->topology == DQ__TOPO_CLUSTER) dq__rt_refresh(rt); /* attaches it when read */
    else dq__rt_attach_sub(s);
}

/* A refused SSUBSCRIBE: MOVED names the slot's owner, which the map takes
 * at once (a map read could still be older); anything else waits for the
 * next map read, with a backoff. */
static void sub_refused(dq__node *n, const redisReply *reply) {
    dq__router *rt = n->rt;
    char host[256];
    int port;
    if (dq__reply_class(reply) == DQ__ERR_MOVED && rt->slots &&
        dq__rt_redirect_addr(reply, host, sizeof host, &port) == 0) {
        unsigned slot = (unsigned)strtoul(strchr(reply->str, ' ') + 1, NULL, 10) % DQ__SLOTS;
        dq__node *to = dq__rt_node_get(rt, host, port);
        if (to && to != n) {
            rt->slots[slot] = to;
            for (dq__sub *s = rt->subs; s; s = s->next)
                if (s->node == n && !s->confirmed && s->slot == slot) dq__rt_attach_sub(s);
            return;
        }
    }
    if (dq__reply_is_refusal(reply)) {
        /* Redis does not say which channel: the ones waiting on n. */
        const char *chan = "?";
        for (dq__sub *s = rt->subs; s; s = s->next)
            if (s->node == n && !s->confirmed) chan = s->channel;
        dq__refused(rt->c, "subscription to %s refused by %s: %s (see 'delayq acl')", chan, n->ep.name,
                    reply->str);
    } else dq__log(rt->c, "subscription refused by %s: %s", n->ep.name, reply->str);
    for (dq__sub *s = rt->subs; s; s = s->next)
        if (s->node == n && !s->confirmed) s->node = NULL;
    dq__rt_heal_later(rt); /* the map read attaches them */
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
            if (rt->topology == DQ__TOPO_CLUSTER) dq__rt_heal_later(rt);
            break;
        case DQ__PUSH_REPLY: push_reply(n, reply); break;
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
    dq__rt_attach_sub(s);
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
