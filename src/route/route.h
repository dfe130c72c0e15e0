/*
 * route.h - what the routing module (src/route/) offers the operations:
 * sending a command to the node that serves its slot, one node, a
 * Sentinel's master or a cluster's owner, and sharded subscriptions.
 * router.h is what the module's own files share. Included by internal.h;
 * never installed.
 */
#ifndef DQ_ROUTE_H
#define DQ_ROUTE_H

#include "conn.h"

/* ------------------------------------------------------------ routing (router.c) */

typedef struct dq__router dq__router;
typedef struct dq__sub dq__sub;

/* Connects to the topology of c->url: one node, the master the sentinels
 * name, or a cluster's slot map. Runs the loop until done. Returns 0 or a
 * DQ_E* code with the message on c. */
int dq__router_connect(dq_client *c);
/* Closes every connection (pending callbacks run with DQ_ECLOSED). */
void dq__router_free(dq_client *c);

/* Rewrites a command after an error reply: a new malloc'ed command and its
 * length in *newlen, or NULL to keep the error. *pre (NULL when none; set
 * only with a new command) may get a malloc'ed command of *pre_len bytes to
 * send first on the same connection, its reply ignored. pre_sent: this
 * hook's pre went last to the request's node on the connection the request
 * used (another request's error asked for it), most likely after the
 * request, which sent again then runs after it: the hook may return a copy
 * of cmd and no pre (a pipeline of calls that all fail costs one pre, not
 * one each; if the pre came first, or failed, the copy fails again and the
 * hook is asked once more without pre_sent). Used at most once with
 * pre_sent and once without per request. */
typedef char *dq__rewrite_fn(const char *cmd, size_t len, const redisReply *err, int pre_sent,
                             size_t *newlen, char **pre, size_t *pre_len);
/* After a rewrite, the new command's error reply (from conn's node) as the
 * caller wants it read: a malloc'ed text to deliver instead (its first word
 * an error code, as Redis's), or NULL to keep the reply. */
typedef char *dq__explain_fn(const redisReply *err, const dq__conn *conn);
/* A request's hooks for its error replies (script.c's missing library). */
typedef struct dq__rewrite {
    dq__rewrite_fn *rewrite;
    dq__explain_fn *explain; /* may be NULL */
} dq__rewrite;

/* A write: WAIT for the client's wait_replicas after it. */
#define DQ__ROUTE_WRITE (1u << 1)
/* The caller retries by itself, within a deadline of its own (a take's
 * timeout): a busy refusal (READONLY, LOADING, CLUSTERDOWN, TRYAGAIN,
 * MASTERDOWN) is answered at once, after the router did what the refusal
 * says of the topology (a demoted node's connection made again, a
 * refresh), instead of being retried for up to ~14 s past that deadline. */
#define DQ__ROUTE_OWN_RETRY (1u << 2)
/* Sends cmd (RESP, len bytes; owned by the router from now on, also on
 * failure) to the node serving slot, following redirects. flags:
 * DQ__SEND_NO_TIMEOUT, DQ__ROUTE_WRITE, DQ__ROUTE_OWN_RETRY. Returns 0 (fn runs exactly once) or
 * a code with the message on c (fn never runs). */
int dq__route(dq_client *c, unsigned slot, unsigned flags, char *cmd, size_t len,
              const dq__rewrite *rewrite, dq__reply_fn *fn, void *privdata);
/* The same for a command in argv form (copied). */
int dq__route_argv(dq_client *c, unsigned slot, unsigned flags, int argc, const char **argv,
                   const size_t *lens, dq__reply_fn *fn, void *privdata);
/* 0 if commands for slot can be sent (or held until the connection being
 * made is up), else DQ_ECONNECT with the message on c. */
int dq__route_check(dq_client *c, unsigned slot);
/* One slot per master of the topology, for a command meant for every master
 * (routed by that slot): 0 outside a cluster; in a cluster the first slot of
 * each owner in the map, and the first slot no known node serves (routing
 * it looks again). A malloc'ed array of *n slots, or NULL when out of memory. */
unsigned *dq__route_master_slots(dq_client *c, size_t *n);
/* Writes what every command connection has queued, now. */
void dq__route_write_now(dq_client *c);
/* 1 while commands are out or waiting for a retry. */
int dq__route_busy(dq_client *c);
/* 1 while a node is not up or the topology is being read again. */
int dq__route_degraded(dq_client *c);
/* 1 for an error reply that says the topology changed (MOVED, ASK,
 * TRYAGAIN, CLUSTERDOWN, READONLY, LOADING, MASTERDOWN, UNBLOCKED). */
int dq__reply_is_topology(const redisReply *r);

/* Called whenever a command connection comes (back) up: announcements may
 * have been missed meanwhile. One hook per client. */
typedef void dq__up_fn(dq_client *c, void *privdata);
void dq__route_set_up_hook(dq_client *c, dq__up_fn *fn, void *privdata);

/* A blocking connection to the node serving slot (from its pool, and up,
 * or new and connecting: watch on_up), or NULL (message on c). Blocking
 * connections never reconnect: one lost while pooled is retired here. Give it back with
 * dq__route_blocking_release, or dq__conn_retire it. */
dq__conn *dq__route_blocking(dq_client *c, unsigned slot);
void dq__route_blocking_release(dq_client *c, dq__conn *conn);
/* 1 if conn belongs to the node that serves slot now. */
int dq__route_owns(dq_client *c, const dq__conn *conn, unsigned slot);
/* The endpoints of the masters served now (masters.c): the one node, the
 * Sentinel's master, or each cluster node owning a slot; at most max into
 * eps, without db or ROLE check. Returns how many (0: none known now). */
int dq__route_masters(dq_client *c, dq__endpoint *eps, int max);

/* Sharded pub/sub: fn hears READY each time the subscription is (again)
 * confirmed, at whichever node serves the channel's slot, and MESSAGE for
 * each message. It follows failovers and slot moves by itself. */
enum { DQ__SUB_READY, DQ__SUB_MESSAGE };
typedef void dq__sub_fn(void *privdata, int event, const char *msg, size_t len);
dq__sub *dq__route_subscribe(dq_client *c, const char *channel, dq__sub_fn *fn, void *privdata);
/* Ends it; fn never runs again. */
void dq__route_unsubscribe(dq_client *c, dq__sub *s);

#endif
