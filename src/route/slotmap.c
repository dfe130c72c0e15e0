/*
 * slotmap.c - a Redis Cluster's slot map: read with CLUSTER SLOTS from any
 * node that is up, one read at a time (a second request while one is out
 * reads again after it). Subscriptions whose slot moved are made again at
 * the new owner. While an owner is unreachable the map is read again with
 * the router's growing backoff, until a promoted replica serves its slots.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router.h"

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
        dq__rt_heal_later(rt);
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
        dq__node *n = dq__rt_node_get(rt, host, (int)dq__reply_int(m->element[1]));
        long long lo = dq__reply_int(range->element[0]), hi = dq__reply_int(range->element[1]);
        if (!n || lo < 0 || hi >= DQ__SLOTS || lo > hi) continue;
        for (long long s = lo; s <= hi; s++) rt->slots[s] = n;
    }
    rt->map_loaded = 1;
    for (dq__sub *s = rt->subs; s; s = s->next)
        if (s->node != dq__rt_owner(rt, s->slot)) {
            /* Moved (or never attached): subscribe at the new owner. */
            if (s->node && s->confirmed && dq__push_is_up(s->node->push)) {
                const char *av[2] = {"SUNSUBSCRIBE", s->channel};
                size_t al[2] = {12, strlen(s->channel)};
                (void)dq__push_send(s->node->push, 2, av, al);
            }
            dq__rt_attach_sub(s);
        }
    if (map_healthy(rt)) rt->heal_s = 0;
    else dq__rt_heal_later(rt);
    if (rt->refresh_again) {
        rt->refresh_again = 0;
        dq__rt_refresh(rt);
    }
}

void dq__rt_refresh(dq__router *rt) {
    if (rt->refreshing) {
        rt->refresh_again = 1;
        return;
    }
    dq__node *n = any_up_node(rt);
    if (!n) {
        rt->refresh_again = 1; /* the first node to come up reads it */
        dq__rt_heal_later(rt);
        return;
    }
    rt->refresh_again = 0;
    const char *av[2] = {"CLUSTER", "SLOTS"};
    size_t al[2] = {7, 5};
    if (dq__conn_send(n->cmd, 0, 2, av, al, slots_reply, rt) == 0) rt->refreshing = 1;
    else dq__rt_heal_later(rt);
}
