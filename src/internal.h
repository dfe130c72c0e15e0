/*
 * internal.h - the structures shared by the library's core files: the client,
 * its Redis connections, and the hooks between them. Never installed.
 *
 * Ownership in one place:
 *   dq_client owns its connections (cmd, sub, blocking pool), its schedulers,
 *   takes and workers, and frees them all in dq_client_free.
 *   A dq__conn and a dq__push each own their link (link.c: the socket, its
 *   TLS session, the output buffer and reply parser) and close it when it
 *   reports DOWN or they drop it.
 */
#ifndef DQ_INTERNAL_H
#define DQ_INTERNAL_H

#include <ev.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "delayq.h"
#include "util.h"

#define DQ__KEY_MAX (DQ__SHARD_NAME_MAX + 16)
#define DQ__ERRSTR_MAX 256

/* ------------------------------------------------------------ connections (conn.c) */

enum dq__conn_kind { DQ__CONN_CMD, DQ__CONN_BLOCKING, DQ__CONN_SENTINEL };
enum dq__conn_state { DQ__DOWN, DQ__CONNECTING, DQ__HANDSHAKE, DQ__UP, DQ__CLOSED };

typedef struct dq__conn dq__conn;
typedef struct dq__req dq__req;

/* Where a connection goes and how it introduces itself. user and password
 * are borrowed: they live in the client's parsed URL. */
typedef struct dq__endpoint {
    int is_unix;
    char host[256];
    int port;
    char path[108];
    const char *user, *password; /* "" or NULL: no AUTH                 */
    int db;                      /* SELECT when > 0                     */
    int check_master;            /* ROLE must say "master" (Sentinel)   */
    int tls;                     /* TLS over TCP (the client's settings) */
    char name[128];              /* "host:port" / "unix:path", messages
                                    (cut to fit)                        */
} dq__endpoint;

/* Sets the address part of ep (path NULL: TCP host:port) and its name. */
void dq__endpoint_set(dq__endpoint *ep, const char *host, int port, const char *path);

/* Reply callback of dq__conn_send. reply is NULL when the command failed
 * without a reply (connection lost, timed out, closed); then code holds the
 * DQ_E* cause and conn->errstr the message. Otherwise code is 0, except
 * DQ_ENOTDURABLE from the router: the write was made (reply is its answer)
 * but fewer replicas than asked confirmed it. The reply is freed after the
 * callback returns. */
typedef void dq__reply_fn(dq__conn *conn, redisReply *reply, int code, void *privdata);

/* Called when the connection is up (handshake done) and when it went down. */
typedef void dq__conn_event_fn(dq__conn *conn, void *privdata);

struct dq__conn {
    dq_client *client;           /* the loop and the options             */
    enum dq__conn_kind kind;
    enum dq__conn_state state;
    dq__endpoint ep;
    const char *name;            /* ep.name                              */
    struct dq__link *link;       /* NULL unless CONNECTING..UP            */
    int auto_reconnect;          /* retry with backoff after a loss      */
    int backoff_ms;
    int handshake_left;          /* handshake replies still to come      */
    long long client_id;         /* CLIENT ID on the server (blocking)   */
    ev_timer connect_timer, retry_timer, cmd_timer;
    dq__req *head, *tail;        /* sent commands waiting for a reply    */
    dq__conn_event_fn *on_up, *on_down;
    dq__conn_event_fn *on_fail;  /* a connect attempt ended before UP    */
    void *event_privdata;
    dq__conn *next_in_pool;      /* blocking pool / retired list link     */
    dq__conn *list_next, **list_pprev; /* an owner's list (dq__conn_list_add) */
    void *node;                  /* the router's node it belongs to      */
    int ups;                     /* times the handshake completed        */
    int last_code;
    char errstr[DQ__ERRSTR_MAX];
};

/* A connection to ep (copied), not started. NULL when out of memory. */
dq__conn *dq__conn_new(dq_client *c, enum dq__conn_kind kind, const dq__endpoint *ep);
/* Starts connecting (no-op unless DOWN). */
void dq__conn_start(dq__conn *conn);
/* Closes for good: pending callbacks run with DQ_ECLOSED, then frees. */
void dq__conn_free(dq__conn *conn);
/* Drops the connection now (pending callbacks get code), then reconnects
 * if auto_reconnect. */
void dq__conn_abort(dq__conn *conn, int code, const char *why);

#define DQ__SEND_NO_TIMEOUT (1u << 0) /* blocking commands                  */

/* Sends a command. Returns 0 (fn will run exactly once), or DQ_ECONNECT /
 * DQ_ENOMEM (fn never runs). argv/argvlen are copied. */
int dq__conn_send(dq__conn *conn, unsigned flags, int argc, const char **argv,
                  const size_t *argvlen, dq__reply_fn *fn, void *privdata);
/* The same with a command already in RESP (len bytes, copied). */
int dq__conn_send_raw(dq__conn *conn, unsigned flags, const char *cmd, size_t len,
                      dq__reply_fn *fn, void *privdata);
/* The same with a reply deadline of timeout_ms (0: none) instead of
 * command_timeout_ms: a blocking command that must end by then. */
int dq__conn_send_within(dq__conn *conn, int timeout_ms, int argc, const char **argv,
                         const size_t *argvlen, dq__reply_fn *fn, void *privdata);
/* A dq__reply_fn for commands whose reply nobody needs. */
void dq__ignore_reply(dq__conn *conn, redisReply *reply, int code, void *privdata);

/* Formats head[0..nhead-1] then argv[0..argc-1] as one RESP command into a
 * malloc'ed *out (the caller frees). Returns its length, or -1 (no memory). */
long dq__format_command(char **out, int nhead, const char **head, const size_t *headlen,
                        int argc, const char **argv, const size_t *argvlen);

/* Writes what the connection has queued now, without waiting for the loop
 * (no-op unless UP). Not from inside one of the connection's callbacks. */
void dq__conn_write_now(dq__conn *conn);

/* Closes a connection that may be inside one of its own callbacks: fails
 * what is pending now, frees the struct later from the loop. */
void dq__conn_retire(dq__conn *conn);

/* Puts conn in an owner's list at *head (out of any other first), so the
 * owner can reach every connection it handed out; retiring or freeing
 * conn takes it out again, so the list never holds a freed one. */
void dq__conn_list_add(dq__conn **head, dq__conn *conn);
void dq__conn_unlist(dq__conn *conn);

/* Frees retired connections now (dq_client_free). */
void dq__reap_retired(dq_client *c);

/* Maps an error reply to a DQ_E* code (WRONGTYPE -> DQ_EWRONGTYPE, ...). */
int dq__reply_error_code(const redisReply *reply);
/* 1 if reply is an ACL refusal: NOPERM, or a script's command or key the
 * user's rule does not grant. */
int dq__reply_is_refusal(const redisReply *reply);
/* The same for an error's text (a reply's, or a failure message built on it). */
int dq__text_is_refusal(const char *text);

/* Arms timer for the next reconnect attempt: *backoff_ms doubles from
 * 20 ms up to reconnect_max_ms, with a jitter in [1/2, 1]. */
void dq__retry_later(dq_client *c, ev_timer *timer, int *backoff_ms);

/* ------------------------------------------------------------ TLS (tls.c) */

typedef struct dq__tls_ctx dq__tls_ctx;
typedef struct dq__tls dq__tls;
enum { DQ__TLS_DONE = 0, DQ__TLS_WANT_READ = 1, DQ__TLS_WANT_WRITE = 2, DQ__TLS_ERR = -1 };

/* A client's TLS settings from o's tls_* fields (files read now). Returns 0
 * and *out (freed with dq__tls_ctx_free), or DQ_EINVAL / DQ_ENOMEM with the
 * cause in err. */
int dq__tls_ctx_new(dq__tls_ctx **out, const dq_options *o, char *err, size_t errlen);
void dq__tls_ctx_free(dq__tls_ctx *t);
/* A TLS session over the connected socket fd to host (the name verified
 * unless the settings name one). NULL with the cause in err. */
dq__tls *dq__tls_new(dq__tls_ctx *t, int fd, const char *host, char *err, size_t errlen);
void dq__tls_free(dq__tls *s);
/* A handshake step: DQ__TLS_DONE, WANT_READ / WANT_WRITE (call again when
 * the socket is so), or DQ__TLS_ERR with the cause in err. */
int dq__tls_handshake(dq__tls *s, char *err, size_t errlen);
/* Bytes read / written (> 0), or 0 with *st a WANT_* or DQ__TLS_ERR (err). */
long dq__tls_read(dq__tls *s, void *buf, size_t len, int *st, char *err, size_t errlen);
long dq__tls_write(dq__tls *s, const void *buf, size_t len, int *st, char *err, size_t errlen);

/* ------------------------------------------------------------ links (link.c) */

typedef struct dq__link dq__link;
enum { DQ__LINK_UP, DQ__LINK_REPLY, DQ__LINK_DOWN };
/* Events of a link: UP (connected, TLS handshake done: send now), REPLY
 * (each reply in order; freed after the call), DOWN (why: the stream is
 * dead, the owner closes the link). The owner may close the link in any
 * of them. */
typedef void dq__link_fn(dq__link *l, int event, redisReply *reply, const char *why,
                         void *privdata);
/* Starts connecting to ep (plain, or TLS when ep->tls). NULL with the cause
 * in err when it cannot even start (fn never runs). */
dq__link *dq__link_open(dq_client *c, const dq__endpoint *ep, dq__link_fn *fn, void *privdata,
                        char *err, size_t errlen);
/* Queues a command in RESP (len bytes, copied): 0, DQ_ECONNECT or DQ_ENOMEM. */
int dq__link_send(dq__link *l, const char *cmd, size_t len);
/* Writes what is queued now, without waiting for the loop. */
void dq__link_flush(dq__link *l);
/* Closes and frees (later, when inside its callback); fn never runs again. */
void dq__link_close(dq__link *l);

/* ------------------------------------------------------------ push connections (push.c) */

typedef struct dq__push dq__push;
enum { DQ__PUSH_UP, DQ__PUSH_DOWN, DQ__PUSH_REPLY };
/* Events of a push connection: UP (handshake done: subscribe now), DOWN
 * (lost: it reconnects by itself), REPLY (every reply after the handshake,
 * in order; freed after the call). May free p. */
typedef void dq__push_fn(dq__push *p, int event, redisReply *reply, void *privdata);
/* Starts connecting to ep (copied). NULL when out of memory. */
dq__push *dq__push_new(dq_client *c, const dq__endpoint *ep, dq__push_fn *fn, void *privdata);
/* Queues a command (only when up). Returns 0, DQ_ECONNECT or DQ_ENOMEM. */
int dq__push_send(dq__push *p, int argc, const char **argv, const size_t *lens);
int dq__push_is_up(const dq__push *p);
const char *dq__push_errstr(const dq__push *p);
/* Closes and frees p (NULL is fine), also from inside its callback. */
void dq__push_free(dq__push *p);

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
 * send first on the same connection, its reply ignored. Used once per
 * request. */
typedef char *dq__rewrite_fn(const char *cmd, size_t len, const redisReply *err, size_t *newlen,
                             char **pre, size_t *pre_len);
/* After a rewrite, the new command's error reply (from conn's node) as the
 * caller wants it read: a malloc'ed text to deliver instead (its first word
 * an error code, as Redis's), or NULL to keep the reply. */
typedef char *dq__explain_fn(const redisReply *err, const dq__conn *conn);
/* A request's hooks for its error replies (script.c's missing library). */
typedef struct dq__rewrite {
    dq__rewrite_fn *rewrite;
    dq__explain_fn *explain; /* may be NULL */
} dq__rewrite;

#define DQ__ROUTE_WRITE (1u << 1) /* a write: WAIT for the client's
                                     wait_replicas after it              */
/* Sends cmd (RESP, len bytes; owned by the router from now on, also on
 * failure) to the node serving slot, following redirects. flags:
 * DQ__SEND_NO_TIMEOUT, DQ__ROUTE_WRITE. Returns 0 (fn runs exactly once) or
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

/* ------------------------------------------------------------ scripts (script.c) */

/* Script ids: one per lua/<name>.lua. */
enum dq__script { DQ__LUA_OFFER, DQ__LUA_TRANSFER, DQ__LUA_CANCEL, DQ__LUA_LOOKUP,
                  DQ__LUA_STATS, DQ__LUA_TAKE, DQ__LUA_ACK, DQ__LUA_NACK, DQ__LUA_EXTEND,
                  DQ__LUA_DEAD, DQ__LUA_CONFIG,
                  DQ__LUA_DEAD_RO, /* dead.lua's list and count, as no-writes */
                  DQ__LUA_METRICS, DQ__LUA_LIST, DQ__LUA_SHARDS,
                  DQ__LUA_RECURRING,
                  DQ__LUA_SCHEDULES, /* the listing of recurring schedules, no-writes */
                  DQ__LUA_COUNT };

/* The slot of a queue's keys (their hash tag is the queue name). */
unsigned dq__queue_slot(const char *queue);

/* Runs a script on the node serving queue's slot with FCALL (EVAL of its
 * text, with the library loaded before it, when the node lacks the library):
 * argv holds nkeys keys then nargs args. flags as dq__route. Returns as
 * dq__route. */
int dq__eval(dq_client *c, const char *queue, unsigned flags, enum dq__script script, int nkeys,
             int nargs, const char **argv, const size_t *argvlen, dq__reply_fn *fn,
             void *privdata);

/* "FUNCTION LOAD REPLACE <the library>", formatted (malloc'ed, *len bytes),
 * or NULL when out of memory. */
char *dq__library_load_command(size_t *len);
/* 1 if text is dq__eval's refusal of a node that lacks the library to a user
 * who may not load it (a NOPERM naming 'delayq functions load'). */
int dq__text_is_no_library(const char *text);

/* ------------------------------------------------------------ client (client.c) */

/* Keys of a queue, built once per use. */
typedef struct dq__keys {
    char z[DQ__KEY_MAX], ready[DQ__KEY_MAX], aside[DQ__KEY_MAX];
    char prefix[DQ__KEY_MAX], chan[DQ__KEY_MAX];
    char counters[DQ__KEY_MAX];
    char dead[DQ__KEY_MAX], dead_times[DQ__KEY_MAX];
    char signal[DQ__KEY_MAX], config[DQ__KEY_MAX];
} dq__keys;
typedef struct dq__sched dq__sched;

struct dq_client {
    struct ev_loop *loop;
    int own_loop;
    dq_options opt;              /* opt.key_file is not kept: see keyring */
    dq__keyring *keyring;        /* sealing keys (opt.key_file), or NULL */
    dq__url url;
    dq__router *router;          /* the connections, after dq_connect   */
    dq__tls_ctx *tls;            /* TLS settings; NULL: no TLS URL       */
    dq__conn *retired;           /* closed, to be freed by the reaper   */
    ev_timer reaper;
    dq__sched *scheds;
    struct dq_take_req *takes;   /* every live take                     */
    char take_tag[DQ_ID_GENERATED_LEN + 1]; /* names the client's take result
                                    keys, "" until the first take        */
    unsigned *result_free;       /* result key numbers free for reuse   */
    size_t result_nfree, result_cap; /* result_cap: numbers handed out
                                    so far fit (all can be given back)   */
    unsigned result_next;        /* the next number never used          */
    struct dq_worker *workers;
    int callback_depth;          /* > 0 while running a user callback   */
    int stop;
    int64_t clock_offset_us;     /* server time - local ev_time, in us   */
    int64_t clock_best_rtt_us;
    double clock_sampled_at;
    dq_sched_counters counters;
    char keys_queue[DQ__SHARD_NAME_MAX + 1]; /* the queue (or shard) keys_cache is for, or "" */
    dq__keys keys_cache;
    struct dq__offer_batch *offers; /* dq_offer_async calls not sent yet */
    ev_prepare offers_flush;        /* sends them before the loop polls  */
    int flushing;
    dq_log_fn *log_fn;
    void *log_privdata;
    struct dq__registry *registry; /* queues this client registered (registry.c) */
    struct dq__shardcount *shardcounts; /* shard counts learned (shardcount.c) */
    struct dq__epoch *epochs;    /* queues' epochs seen (epochs.c)      */
    struct dq__waiter *waiters;  /* armed waits on shards (waiter.c)    */
    dq_refused_fn *refused_fn;
    void *refused_privdata;
    struct dq__errlog *errlog;   /* errors that persist, by kind (backoff.c) */
    char errstr[DQ__ERRSTR_MAX];
};

/* ------------------------------------------------------------ deliveries */

/* Where a take's script ran (delivery.c): the client, the queue taken from
 * (messages name it), the shard the script ran on and that shard's keys.
 * All borrowed for the call. */
typedef struct dq__delivery {
    dq_client *c;
    const char *owner;
    const char *shard;
    const dq__keys *keys;
} dq__delivery;

/* As dq_take_many_async, for up to DQ__TAKE_BATCH_MAX items (dq_take_many
 * keeps to 64): a worker whose handlers are quick takes this many at once,
 * as each take and ack has a fixed cost in Redis (src/worker.c). */
#define DQ__TAKE_BATCH_MAX 256
int dq__take_batch_async(dq_client *c, const char *queue, const dq_take_opts *opts,
                         int64_t timeout_ms, size_t max, dq_take_many_cb *cb, void *privdata,
                         dq_take_req **out);

/* The take script's reply: {} or {lease, entry 1, ..., entry n}
 * (lua/take.lua); lease is 0, or the score of the lease record when leased:
 * entry i's token is then "<request>.<i>.<lease>"; an empty entry is one
 * the script set aside, and a last "k|..." names the first it passed
 * (sealed with a key this client lacks, left ready: *held counts it, and it
 * is named in c's error).
 * Fills msgs (the caller owns them: dq_msg_free) with at most max; returns
 * how many, or -1 if the reply is not of that shape. An entry this client
 * cannot decode, or that is no envelope opening under c's keys when c has
 * keys (dq__open_taken), goes to the shard's set-aside list (its lease
 * acked) instead of into msgs. */
int dq__take_reply_decode(const dq__delivery *d, const redisReply *reply, const char *request, dq_msg **msgs,
                          size_t max, int *held);

/* ------------------------------------------------------------ waiters */

/* A BLPOP on one shard's wake tokens, armed by a take that found every
 * shard of its queue empty, and left armed for the client's next take when
 * that take ends (waiter.c). Owned by the client's list: a take only holds
 * one (dq__waiter_hold) and lets it go (dq__waiter_release). */
typedef struct dq__waiter dq__waiter;

/* What a waiter tells the take holding it (holder): a token it popped on
 * shard `index` (the token is the holder's now), or that its wait ended
 * without one (a failover, an error, a closed connection: look again).
 * Only a held waiter calls; one nobody holds pushes a token back. */
typedef struct dq__waiter_calls {
    void (*token)(void *holder, unsigned index);
    void (*ended)(void *holder);
} dq__waiter_calls;

/* The waiter on shard j of `shards` of queue owner: an armed one no take
 * holds, or a new one (not armed). NULL when out of memory or the shard
 * has no name. */
dq__waiter *dq__waiter_for(dq_client *c, const char *owner, unsigned j, unsigned shards);
/* holder holds w from now on; calls must outlive the hold. */
void dq__waiter_hold(dq__waiter *w, const dq__waiter_calls *calls, void *holder);
/* The holder lets w go: it stays armed for a later take if its BLPOP is
 * out, and is freed otherwise. No call reaches the holder after this. */
void dq__waiter_release(dq__waiter *w);
/* Sends w's BLPOP unless it is out. found_empty: the shard was found empty
 * just before (the wait then counts as quiet, see dq__waiters_quiet).
 * Returns 1 if the BLPOP is out, 0 if it goes once the connection is up,
 * -1 if no node serves the shard now (the holder retries later). */
int dq__waiter_arm(dq__waiter *w, int found_empty);
/* Whether a wait of this client on shard j of owner's queue (by `shards`)
 * was out when the shard was last found empty, and has popped nothing
 * since: a token pushed there since is popped by some BLPOP, whose take
 * then looks there, so that shard needs no look now. */
int dq__waiters_quiet(const dq_client *c, const char *owner, unsigned shards, unsigned j);
/* Shard j of owner's queue was found empty: the waits out on it are quiet. */
void dq__waiters_note_empty(dq_client *c, const char *owner, unsigned shards, unsigned j);
/* Sends "BLPOP key" on conn, a blocking connection, for a take or a
 * waiter: Redis ends it with nil after half of safety_check_ms (the caller
 * waits again), and the connection is dropped (DQ_ETIMEDOUT, its on_down)
 * when no reply came within safety_check_ms: no wait outlasts the safety
 * interval on a node that went silent. Returns as dq__conn_send. */
int dq__blpop(dq_client *c, dq__conn *conn, const char *key, dq__reply_fn *fn, void *privdata);
/* Gives n wake tokens back to the shard named shard (no reply awaited). */
void dq__push_back_tokens(dq_client *c, const char *shard, unsigned n);

/* Sends the offers dq_offer_async has gathered, as few script calls as
 * possible. Called before the loop polls and before any other command of
 * the operations goes out (dq__op_eval), so commands keep call order. */
void dq__offers_flush(dq_client *c);
/* dq__eval for the operations: gathered offers go first. */
int dq__op_eval(dq_client *c, const char *queue, unsigned flags, enum dq__script script,
                int nkeys, int nargs, const char **argv, const size_t *argvlen,
                dq__reply_fn *fn, void *privdata);
/* The same for a plain command on queue's node. */
int dq__op_command(dq_client *c, const char *queue, int argc, const char **argv,
                   const size_t *lens, dq__reply_fn *fn, void *privdata);

/* Registers queue in dq:queues unless this client did already: an SADD on
 * the loop, not waited for (registry.c). Called by every offer. */
void dq__registry_note(dq_client *c, const char *queue);
void dq__registry_free(dq_client *c);

/* A script refused the shard count the call was routed by (never returned
 * to the caller: the operation learns the count and sends again). */
#define DQ__ESHARDS (-100)

/* Shard counts (shardcount.c). The count the client routes queue's items
 * by: 1 until a script said otherwise. */
unsigned dq__shards_of(dq_client *c, const char *queue);
/* Records queue's count as a script told it (0: changing right now). */
void dq__shards_learn(dq_client *c, const char *queue, unsigned n);
/* 1 with *n set if r is a script's "DQSHARDS n" refusal, else 0. */
int dq__shards_refused(const redisReply *r, unsigned *n);
void dq__shards_free(dq_client *c);

/* Queues' epochs (epochs.c): a script's reply carried queue's (a shard's
 * keys' name) epoch, 0 for none; one that differs from the last seen
 * non-zero one means the keys vanished: logged once, counted. */
void dq__epoch_seen(dq_client *c, const char *queue, int64_t epoch);
/* The same from a reply element: 0, or -1 if r is no epoch (no integer >= 0). */
int dq__epoch_reply(dq_client *c, const char *queue, const redisReply *r);
/* Times the client saw queue's keys vanish. */
uint64_t dq__epoch_wipes(dq_client *c, const char *queue);
void dq__epochs_free(dq_client *c);
/* Reads queue's shard count from its own keys, learns it and puts it in
 * *n (ops.c): one round trip, for calls that route by no item. */
int dq__shards_fetch(dq_client *c, const char *queue, unsigned *n);
/* Writes settings q to each of queue's `shards` shards (qconfig.c). */
int dq__config_copy(dq_client *c, const char *queue, unsigned shards, const dq_queue_config *q);
/* Changes queue's shard count to n, refused unless the queue is empty; the
 * new shards get settings q (shardconf.c). 0, DQ_ENOTDURABLE, or a code. */
int dq__shards_change(dq_client *c, const char *queue, unsigned n, const dq_queue_config *q);

/* Reports a line through the client's log callback, if any. */
void dq__log(dq_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reports an ACL refusal of background work: to the log, then to the
 * dq_set_on_refused callback, if any. */
void dq__refused(dq_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records the client's last failure message and returns code. */
int dq__fail(dq_client *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------ errors that persist (backoff.c) */

#define DQ__ERRKIND_MAX 16 /* an error's code word ("NOREPLICAS"), with its NUL */

/* The state of something that retries on its own (a scheduler's transfers,
 * a take, a worker's takes): zeroed is "nothing failed". */
typedef struct dq__backoff {
    int failures;                /* in a row                                 */
    double until;                /* ev_now() before which it does not retry  */
    char kind[DQ__ERRKIND_MAX];  /* the last failure's code word, or ""      */
} dq__backoff;

/* ------------------------------------------------------------ Redis's error replies (errors.c) */

/* What an error reply is, told by its code word (see errors.c). */
enum dq__errclass {
    DQ__ERR_OTHER,       /* any other error, or none                    */
    DQ__ERR_NOSCRIPT,    /* EVALSHA of a script the node does not hold  */
    DQ__ERR_NOFUNCTION,  /* FCALL of a function the node does not hold  */
    DQ__ERR_MOVED,
    DQ__ERR_ASK,
    DQ__ERR_TRYAGAIN,
    DQ__ERR_CLUSTERDOWN,
    DQ__ERR_READONLY,    /* a write sent to a replica                   */
    DQ__ERR_LOADING,
    DQ__ERR_BUSY,        /* a long script or module command             */
    DQ__ERR_NOREPLICAS,
    DQ__ERR_MISCONF,
    DQ__ERR_OOM,
    DQ__ERR_NOPERM,      /* an ACL refusal of the command sent          */
    DQ__ERR_NOPERM_SCRIPT, /* ... of a command a script called (an ERR) */
    DQ__ERR_MASTERDOWN,
    DQ__ERR_UNBLOCKED,
    DQ__ERR_WRONGTYPE,
    DQ__ERR_NOAUTH,      /* NOAUTH or WRONGPASS                         */
};

/* The class of an error reply's text (or of a message that starts with
 * one); DQ__ERR_OTHER for NULL. */
enum dq__errclass dq__error_class(const char *text);
/* The code word text starts with ("NOREPLICAS") into out; "" when it does
 * not start with an upper-case word. */
void dq__error_code(const char *text, char out[DQ__ERRKIND_MAX]);
/* 1 if text is of a class Redis answers while a condition lasts: OOM,
 * MISCONF, NOREPLICAS, READONLY, LOADING, BUSY. */
int dq__error_persists(const char *text);
/* 1 if text is an ACL refusal of a key (not of a command or channel). */
int dq__error_names_key(const char *text);
/* The class of reply (conn.c): DQ__ERR_OTHER for NULL or a non-error. */
enum dq__errclass dq__reply_class(const redisReply *reply);
/* A failure of what b retries, with error (the Redis error text, or a
 * message): returns the seconds to wait before the next try (20 ms doubling
 * to 1 s, times a random factor in [1/2, 1]), which dq__backoff_left then
 * counts down. */
double dq__backoff_next(dq_client *c, dq__backoff *b, const char *error);
/* The same, after logging the line fmt makes as dq__log_error does. */
double dq__backoff_failed(dq_client *c, dq__backoff *b, const char *error, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A success: b starts over, and if b's last failure was of a persisting
 * kind that was reported, the log says the kind cleared. */
void dq__backoff_ok(dq_client *c, dq__backoff *b);
/* Lets the next try go at once (what refused may be gone: a reconnect),
 * the failures still counted. */
void dq__backoff_retry_now(dq__backoff *b);
/* Seconds before b allows the next try; 0 when it does. */
double dq__backoff_left(const dq_client *c, const dq__backoff *b);
/* Logs a line about error (the Redis error text): one of a persisting kind
 * is coalesced with the client's others of that kind (the first said, the
 * rest counted in a line at most every 10 s); any other, as dq__log. */
void dq__log_error(dq_client *c, const char *error, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Frees the client's record of the kinds (dq_client_free). */
void dq__errlog_free(dq_client *c);

void dq__keys_init(dq__keys *k, const char *queue);
/* The keys of queue from the client's one-queue cache (the hot paths use
 * one queue over and over); valid until the next call. */
const dq__keys *dq__keys_of(dq_client *c, const char *queue);

/* Feeds one clock sample: local send/receive (ev_time) and server us. */
void dq__clock_sample(dq_client *c, double sent, double received, int64_t server_us);
/* Server epoch ms -> seconds from now on the local clock (may be < 0). */
double dq__clock_until(const dq_client *c, int64_t server_ms);

/* Runs the loop until *done becomes non-zero (gathered offers and queued
 * commands are written first). */
void dq__wait(dq_client *c, const int *done);
/* The same until *left falls to 0 (replies still to come). */
void dq__wait_all(dq_client *c, const int *left);

/* Freeing what the client runs (dq_client_free). */
void dq__sched_free_all(dq_client *c);
void dq__take_free_all(dq_client *c);
/* Lets go of the waits on shards the takes left armed (waiter.c). */
void dq__waiters_free(dq_client *c);
void dq__worker_free_all(dq_client *c);

/* Maps an error reply to a code and records its message (without the
 * " script: <sha>" tail) on the client, naming the queue's keys for
 * WRONGTYPE. reply NULL: the connection's error. Returns the code. */
int dq__reply_failure(dq_client *c, dq__conn *conn, const redisReply *reply, int code,
                      const char *queue);

/* Rounds of "the script told another shard count: route again" an
 * operation goes through before giving up (a count changes only on an
 * empty queue, so the second round normally succeeds). */
#define DQ__SHARD_ROUNDS 3

/* Checks of a queue name and an id, with the failure recorded on c. */
int dq__check_queue(dq_client *c, const char *queue);
int dq__check_id(dq_client *c, const char *id);
/* This process's name for heartbeats: "host:pid" (static storage). */
const char *dq__process_name(void);
/* Whether holder is a valid dq_take_opts.holder (1 to DQ_HOLDER_MAX bytes
 * of UTF-8, no control character). */
int dq__holder_valid(const char *holder);
/* DQ_EBUSY (recorded) when called from inside one of c's callbacks. */
int dq__not_in_callback(dq_client *c);

/* Runs a script synchronously and collects up to 10 integers of its reply
 * (an integer, or an array of integers/numeric strings) into s; text gets
 * the 4th element too when it is a string (lookup's holder). */
typedef struct dq__sync_ints {
    dq_client *c;
    const char *queue;
    int done, status, count;
    int64_t v[10];
    char text[DQ_HOLDER_MAX + 1];
} dq__sync_ints;
int dq__eval_ints(dq_client *c, const char *queue, unsigned flags, enum dq__script script,
                  int nkeys, int nargs, const char **argv, dq__sync_ints *s);
/* The same on a shard of queue (argv holds the shard's keys). A script's
 * "DQSHARDS n" is learned and returned as DQ__ESHARDS: route again. */
int dq__eval_ints_on(dq_client *c, const char *queue, const char *shard, unsigned flags,
                     enum dq__script script, int nkeys, int nargs, const char **argv,
                     dq__sync_ints *s);
/* A shard of a queue (the queue itself when it has one), addressed for a
 * script call: its name, the shard count the call goes by as text (the
 * scripts check it, see shards_refusal in lua/lib/20_counters.lua), and its keys. */
typedef struct dq__shard_at {
    char name[DQ__SHARD_NAME_MAX + 1];
    char count[24];
    dq__keys k;
} dq__shard_at;

/* Writes the name of shard i of `shards` of queue (the queue itself when
 * shards is 1) into name, DQ__SHARD_NAME_MAX + 1 bytes. Returns 0, or
 * DQ_EPROTO (recorded on c) when it has none. */
int dq__shard_named(dq_client *c, const char *queue, unsigned i, unsigned shards, char *name);
/* Addresses shard i of `shards` of queue, with count as the count text.
 * Returns 0, or DQ_EPROTO (recorded on c) when the shard has no name. */
int dq__shard_at_init(dq_client *c, dq__shard_at *at, const char *queue, unsigned i, unsigned shards,
                      unsigned count);
/* Addresses the shard of queue that holds id, by the count the client
 * knows (also into *shards when not NULL), for routing round `round` (0,
 * 1, ...). DQ_EBUSY while the count changes or after too many rounds. */
int dq__shard_for_id(dq_client *c, const char *queue, const char *id, int round, dq__shard_at *at,
                     unsigned *shards);

/* The reply of dead.lua's list (flat 7 fields per letter) as letters:
 * *out (dq_dead_letters_free, also on failure) holds *n of them. Returns 0,
 * DQ_EPROTO for a reply of another shape, or DQ_ENOMEM. */
int dq__dead_letters_decode(const redisReply *reply, dq_dead_letter **out, size_t *n);

/* What a listing shows of a payload (dead.c): a sealed one that c's
 * keys open is replaced, in *payload and *len, by its plaintext (malloc'ed,
 * NUL-terminated); one they do not open stays the envelope, which the
 * caller can tell by dq__sealed. */
void dq__open_shown(dq_client *c, const char *queue, const char *id, void **payload, size_t *len);

/* Nacking a leased delivery asynchronously (reliable.c). status: the
 * script's answer (1 retried, 2 buried, 0 stale) or a negative code. */
typedef void dq__settle_cb(dq_client *c, int status, void *privdata);
int dq__nack_async(dq_client *c, const char *queue, const char *id, const char *token,
                   int64_t delay_ms, const char *error, int attempt, dq__settle_cb *cb,
                   void *privdata);


/* Acks n deliveries (1..DQ__ACK_BATCH) of queue, given by id and token, in
 * one script call; the strings are only read during the call. Each is
 * judged on its own: cb gets status 1 and results[i] for each (1 acked, 0
 * stale, DQ_EINVAL for an invalid id or token, which never sinks the
 * others), or a negative status and results NULL when the call failed as a
 * whole. Returns DQ_EINVAL (cb never runs) only if none is valid. */
#define DQ__ACK_BATCH DQ__TAKE_BATCH_MAX /* a worker acks a whole take at once */
typedef void dq__acks_cb(dq_client *c, int status, const int *results, size_t n, void *privdata);
int dq__ack_many_async(dq_client *c, const char *queue, const char *const *ids,
                       const char *const *tokens, size_t n, dq__acks_cb *cb, void *privdata);

/* The keys and arguments of lua/ack.lua (ackargs.c): the items in groups,
 * the consecutive items of one lease record in one group. argv points into
 * the strings given to init and add, which must outlive the call that sends
 * them, and into the struct itself (buckets, counts). */
typedef struct dq__ack_args {
    const char *argv[8 + 6 * DQ__ACK_BATCH];
    size_t lens[8 + 6 * DQ__ACK_BATCH];
    char buckets[DQ__ACK_BATCH][8];
    char counts[DQ__ACK_BATCH][8];
    size_t group_items[DQ__ACK_BATCH];          /* each group's items      */
    char packed_ids[DQ__ACK_BATCH * (DQ_ID_MAX + 1)];   /* dq__ack_args_pack */
    char packed_buckets[DQ__ACK_BATCH * 8];
    size_t n;        /* arguments set                          */
    size_t items;    /* items added                            */
    size_t groups;   /* groups started                         */
    size_t group_at; /* the current group's first argument     */
    size_t in_group; /* its items                              */
} dq__ack_args;
/* Sets the two keys (slot index z, counters) and the fixed arguments (key
 * prefix, the shard count as text, '' for none to check): n = 4, no items. */
void dq__ack_args_init(dq__ack_args *a, const char *z, const char *counters, const char *prefix,
                       const char *shards);
/* Adds item (id, token), both NUL-terminated, valid (dq__id_valid, 1..64
 * bytes): at most DQ__ACK_BATCH per struct. */
void dq__ack_args_add(dq__ack_args *a, const char *id, const char *token);
/* Packs every group of two or more items that are blocks 1..k of their
 * lease record in that order (token middles "1", "2", ...: a whole take
 * acked as taken) into the script's packed form: count "*k", then the ids
 * joined by spaces and the buckets joined by spaces, 2 arguments in place
 * of 3k (see lua/ack.lua). Other groups stay as they are. Call after the
 * last add, at most once: no add may follow. */
void dq__ack_args_pack(dq__ack_args *a);

/* Integer from a reply element (integer or numeric string); 0 if neither. */
int64_t dq__reply_int(const redisReply *r);
/* A string reply's bytes as a malloc'ed C string (the caller frees), or
 * NULL without memory (dead.c). */
char *dq__reply_dup(const redisReply *r);
/* A transfer's list of cron schedules short of ticks (name, expression,
 * zone, last tick, per schedule): computes the next ticks of each and sends
 * them, without waiting for the reply; a failure is logged, and the next
 * transfer asks again (recurring.c). */
void dq__recurring_refill(dq_client *c, const char *queue, const redisReply *list);

#endif
