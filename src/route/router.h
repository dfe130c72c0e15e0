/*
 * router.h - what the files of the router share (router.c: nodes, the
 * blocking pools, healing, connect and free; request.c: commands and their
 * redirects; subs.c: sharded subscriptions; slotmap.c: a cluster's slot
 * map; sentinel.c: finding a Sentinel master). Private to those files.
 */
#ifndef DQ_ROUTER_H
#define DQ_ROUTER_H

#include "internal.h"

typedef struct dq__node dq__node;
typedef struct dq__rreq dq__rreq;

/* A Redis node: its address and the connections the router keeps to it. */
struct dq__node {
    dq__node *next;
    dq__router *rt;
    dq__endpoint ep;
    dq__conn *cmd;
    dq__conn *idle;          /* idle blocking connections               */
    dq__conn *busy;          /* blocking connections handed out (a list
                                of dq__conn_list_add), so a move ends
                                their waits too                         */
    dq__push *push;          /* sharded subscriptions on this node      */
    dq__rreq *held, *held_tail; /* waiting for cmd to come up           */
    int on_hold;             /* Sentinel: a failover is replacing it, cmd
                                stays down (dq__rt_node_hold)           */
    int demoted;             /* single: answered READONLY, to be made
                                again (dq__rt_node_renew_demoted)      */
    double renewed_at;       /* ev_now() of the last such renewal       */
    const dq__rewrite *pre_of; /* the hook whose pre went last on cmd, */
    int pre_ups;             /* ... while cmd->ups was this            */
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

/* What one sentinel said in a discovery round (sentinel.c). */
typedef struct dq__sentinel_answer {
    enum { DQ__ASK_PENDING, DQ__ASK_ANSWERED, DQ__ASK_FAILED } state;
    char host[256];
    int port;
    long long epoch;         /* SENTINEL MASTER's config-epoch            */
    int failover;            /* it runs a failover not yet past promotion */
} dq__sentinel_answer;

struct dq__router {
    dq_client *c;
    int topology;
    dq__node *nodes;
    dq__node *master;        /* single and Sentinel                      */
    dq__node **slots;        /* Cluster: DQ__SLOTS owners, NULL unknown  */
    int map_loaded;
    dq__sub *subs;
    dq__rreq *retrying;      /* requests waiting on a backoff timer      */
    dq__up_fn *on_up;
    void *on_up_privdata;
    /* Sentinel: a round asks every sentinel of the URL at once */
    int discovering;
    int discover_rounds;     /* rounds in a row no sentinel answered      */
    double connect_deadline; /* dq_connect gives up waiting for one then  */
    dq__conn *asking[DQ__URL_NODES_MAX];   /* this round's, by URL index */
    dq__sentinel_answer answers[DQ__URL_NODES_MAX];
    int pending;             /* sentinels of the round yet to answer      */
    int answered;            /* and those that named a master            */
    ev_timer round_timer;    /* the round ends then with what it has      */
    int failover_logged;     /* "failover in progress" said, once a wait  */
    dq__push *watch[DQ__URL_NODES_MAX]; /* each sentinel's announcements */
    /* Cluster */
    int refreshing, refresh_again;
    /* Both: topology re-reads while broken */
    ev_timer heal_timer;
    double heal_s;
    char errstr[DQ__ERRSTR_MAX];
};

/* router.c */
/* The node at host:port, made (and its command connection started) if new;
 * NULL when out of memory. */
dq__node *dq__rt_node_get(dq__router *rt, const char *host, int port);
/* The node serving slot: the master outside a cluster; NULL if unknown. */
dq__node *dq__rt_owner(const dq__router *rt, unsigned slot);
/* Points node n (single or Sentinel master) at another address: its
 * connections are dropped and made again there. At the same address, a
 * held node's command connection starts again (dq__rt_node_hold). */
void dq__rt_node_move(dq__node *n, const char *host, int port);
/* Stops using node n (a Sentinel master a failover is replacing): every
 * connection to it is dropped, blocking ones included, and its command
 * connection stays down until dq__rt_node_move names where it is. */
void dq__rt_node_hold(dq__node *n, const char *why);
/* A single-node URL's node answered READONLY: a replica now, maybe under a
 * DNS name (a managed service's primary endpoint) that names the new
 * master. Marks it for dq__rt_node_renew_demoted. */
void dq__rt_node_demoted(dq__node *n);
/* If n is marked demoted and no reply is owed on its command connection
 * (the commands pipelined behind the refused one get their own answers
 * first) and none was made again in the last 2 s, makes all its
 * connections again, resolving its name again, and clears the mark:
 * returns 1. Else 0. */
int dq__rt_node_renew_demoted(dq__node *n);
/* Reads the topology again after a backoff that grows while it stays
 * broken (reset when it reads whole). */
void dq__rt_heal_later(dq__router *rt);
/* The address of "MOVED <slot> <host>:<port>" or ASK, split. Returns 0. */
int dq__rt_redirect_addr(const redisReply *r, char *host, size_t hostlen, int *port);

/* request.c */
/* The requests held for n's command connection: failed with code, or sent
 * now that it is up. */
void dq__rt_fail_held(dq__node *n, int code);
void dq__rt_send_held(dq__node *n);
/* Fails the requests waiting for a retry with DQ_ECLOSED (router free). */
void dq__rt_requests_free(dq__router *rt);

/* subs.c */
/* Subscribes s at its slot's owner (now, or when that node's push
 * connection comes up). */
void dq__rt_attach_sub(dq__sub *s);

/* slotmap.c */
/* Reads CLUSTER SLOTS from a node that is up (one read at a time). */
void dq__rt_refresh(dq__router *rt);

/* sentinel.c */
/* Asks every sentinel of the URL at once where the master is, and follows
 * the one with the newest config epoch, unless one of them runs a failover
 * (then it asks again shortly). One round at a time. */
void dq__rt_discover(dq__router *rt);
/* Ends the sentinel connections (router free). */
void dq__rt_sentinels_free(dq__router *rt);

#endif
