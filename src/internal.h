/*
 * internal.h - the structures shared by the library's core files: the client,
 * its Redis connections, and the hooks between them. Never installed.
 *
 * Ownership in one place:
 *   dq_client owns its connections (cmd, sub, blocking pool), its schedulers,
 *   takes and workers, and frees them all in dq_client_free.
 *   A dq__conn owns its hiredis context; hiredis frees the context after the
 *   connect-failure and disconnect callbacks, so conn->ac is cleared there.
 */
#ifndef DQ_INTERNAL_H
#define DQ_INTERNAL_H

#include <ev.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "delayq.h"
#include "util.h"

#define DQ__KEY_MAX (DQ_QUEUE_MAX + 16)
#define DQ__ERRSTR_MAX 256

/* ------------------------------------------------------------ connections (conn.c) */

enum dq__conn_kind { DQ__CONN_CMD, DQ__CONN_SUB, DQ__CONN_BLOCKING };
enum dq__conn_state { DQ__DOWN, DQ__CONNECTING, DQ__HANDSHAKE, DQ__UP, DQ__CLOSED };

typedef struct dq__conn dq__conn;
typedef struct dq__req dq__req;

/* Reply callback of dq__conn_send. reply is NULL when the command failed
 * without a reply (connection lost, timed out, closed); then code holds the
 * DQ_E* cause and conn->errstr the message. Otherwise code is 0. The reply
 * is freed by hiredis after the callback returns. */
typedef void dq__reply_fn(dq__conn *conn, redisReply *reply, int code, void *privdata);

/* Called when the connection is up (handshake done) and when it went down. */
typedef void dq__conn_event_fn(dq__conn *conn, void *privdata);

struct dq__conn {
    dq_client *client;
    enum dq__conn_kind kind;
    enum dq__conn_state state;
    redisAsyncContext *ac;       /* NULL unless CONNECTING..UP            */
    int auto_reconnect;          /* retry with backoff after a loss      */
    int backoff_ms;
    int handshake_left;          /* handshake replies still to come      */
    long long client_id;         /* CLIENT ID on the server (blocking)   */
    ev_timer connect_timer, retry_timer, cmd_timer;
    dq__req *head, *tail;        /* sent commands waiting for a reply    */
    dq__conn_event_fn *on_up, *on_down;
    void *event_privdata;
    dq__conn *next_in_pool;      /* blocking pool / retired list link     */
    int ups;                     /* times the handshake completed        */
    int last_code;
    char errstr[DQ__ERRSTR_MAX];
};

dq__conn *dq__conn_new(dq_client *c, enum dq__conn_kind kind);
/* Starts connecting (no-op unless DOWN). */
void dq__conn_start(dq__conn *conn);
/* Closes for good: pending callbacks run with DQ_ECLOSED, then frees. */
void dq__conn_free(dq__conn *conn);
/* Drops the connection now (pending callbacks get code), then reconnects
 * if auto_reconnect. */
void dq__conn_abort(dq__conn *conn, int code, const char *why);

#define DQ__SEND_NO_TIMEOUT (1u << 0) /* blocking commands, SUBSCRIBE        */

/* Sends a command. Returns 0 (fn will run exactly once), or DQ_ECONNECT /
 * DQ_ENOMEM (fn never runs). argv/argvlen are copied. */
int dq__conn_send(dq__conn *conn, unsigned flags, int argc, const char **argv,
                  const size_t *argvlen, dq__reply_fn *fn, void *privdata);

/* Script ids: one per lua/<name>.lua. */
enum dq__script { DQ__LUA_OFFER, DQ__LUA_TRANSFER, DQ__LUA_CANCEL, DQ__LUA_LOOKUP,
                  DQ__LUA_STATS, DQ__LUA_TAKE, DQ__LUA_ACK, DQ__LUA_NACK, DQ__LUA_EXTEND,
                  DQ__LUA_DEAD, DQ__LUA_CONFIG, DQ__LUA_COUNT };

/* Runs a script with EVALSHA (EVAL again on NOSCRIPT). keys then args. */
int dq__conn_eval(dq__conn *conn, enum dq__script script, int nkeys, int nargs,
                  const char **argv, const size_t *argvlen, dq__reply_fn *fn,
                  void *privdata);

/* Writes what the connection has queued now, without waiting for the loop
 * (no-op unless UP). Not from inside one of the connection's callbacks. */
void dq__conn_write_now(dq__conn *conn);

/* Closes a connection that may be inside one of its own callbacks: fails
 * what is pending now, frees the struct later from the loop. */
void dq__conn_retire(dq__conn *conn);

/* Frees retired connections now (dq_client_free). */
void dq__reap_retired(dq_client *c);

/* Maps an error reply to a DQ_E* code (WRONGTYPE -> DQ_EWRONGTYPE, ...). */
int dq__reply_error_code(const redisReply *reply);

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
    dq_options opt;
    dq__url url;
    char url_text[512];
    dq__conn *cmd;               /* scripts and plain commands          */
    dq__conn *sub;               /* wake channels; made by dq_schedule  */
    dq__conn *idle_blocking;     /* free blocking connections           */
    dq__conn *retired;           /* closed, to be freed by the reaper   */
    ev_timer reaper;
    dq__sched *scheds;
    struct dq_take_req *takes;   /* every live take                     */
    struct dq_worker *workers;
    int connected_once;
    int callback_depth;          /* > 0 while running a user callback   */
    int stop;
    int64_t clock_offset_us;     /* server time - local ev_time, in us   */
    int64_t clock_best_rtt_us;
    double clock_sampled_at;
    dq_sched_counters counters;
    char keys_queue[DQ_QUEUE_MAX + 1]; /* the queue keys_cache is for, or "" */
    dq__keys keys_cache;
    struct dq__offer_batch *offers; /* dq_offer_async calls not sent yet */
    ev_prepare offers_flush;        /* sends them before the loop polls  */
    int flushing;
    dq_log_fn *log_fn;
    void *log_privdata;
    char errstr[DQ__ERRSTR_MAX];
};

/* Sends the offers dq_offer_async has gathered, as few script calls as
 * possible. Called before the loop polls and before any other command goes
 * out on the command connection, so commands keep the order of the calls. */
void dq__offers_flush(dq_client *c);

/* Reports a line through the client's log callback, if any. */
void dq__log(dq_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records the client's last failure message and returns code. */
int dq__fail(dq_client *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

void dq__keys_init(dq__keys *k, const char *queue);
/* The keys of queue from the client's one-queue cache (the hot paths use
 * one queue over and over); valid until the next call. */
const dq__keys *dq__keys_of(dq_client *c, const char *queue);

/* Feeds one clock sample: local send/receive (ev_time) and server us. */
void dq__clock_sample(dq_client *c, double sent, double received, int64_t server_us);
/* Server epoch ms -> seconds from now on the local clock (may be < 0). */
double dq__clock_until(const dq_client *c, int64_t server_ms);

/* Blocking connection pool. */
dq__conn *dq__blocking_acquire(dq_client *c);
void dq__blocking_release(dq_client *c, dq__conn *conn);

/* Runs the loop until *done becomes non-zero. */
void dq__wait(dq_client *c, const int *done);

/* Hooks from conn.c into the schedulers (scheduler.c). */
void dq__sched_on_cmd_up(dq_client *c);
void dq__sched_free_all(dq_client *c);
void dq__take_free_all(dq_client *c);
void dq__worker_free_all(dq_client *c);

/* Maps an error reply to a code and records its message (without the
 * " script: <sha>" tail) on the client, naming the queue's keys for
 * WRONGTYPE. reply NULL: the connection's error. Returns the code. */
int dq__reply_failure(dq_client *c, dq__conn *conn, const redisReply *reply, int code,
                      const char *queue);

/* Checks of a queue name and an id, with the failure recorded on c. */
int dq__check_queue(dq_client *c, const char *queue);
int dq__check_id(dq_client *c, const char *id);
/* DQ_EBUSY (recorded) when called from inside one of c's callbacks. */
int dq__not_in_callback(dq_client *c);

/* Runs a script synchronously and collects up to 8 integers of its reply
 * (an integer, or an array of integers/numeric strings) into s. */
typedef struct dq__sync_ints {
    dq_client *c;
    const char *queue;
    int done, status, count;
    int64_t v[8];
} dq__sync_ints;
int dq__eval_ints(dq_client *c, const char *queue, enum dq__script script, int nkeys,
                  int nargs, const char **argv, dq__sync_ints *s);

/* Nacking a leased delivery asynchronously (reliable.c). status: the
 * script's answer (1 retried, 2 buried, 0 stale) or a negative code. */
typedef void dq__settle_cb(dq_client *c, int status, void *privdata);
int dq__nack_async(dq_client *c, const char *queue, const char *id, const char *token,
                   int64_t delay_ms, const char *error, int attempt, dq__settle_cb *cb,
                   void *privdata);

/* Waits (without a timeout) for 1..max (at most 64) items of queue and
 * passes them to cb, which owns the messages; status 1, or a negative code
 * with no messages (DQ_ECLOSED once cancelled). *req as dq_take_async. */
typedef void dq__take_batch_cb(dq_client *c, int status, dq_msg **msgs, size_t n, void *privdata);
int dq__take_batch_async(dq_client *c, const char *queue, const dq_take_opts *opts, size_t max,
                         dq__take_batch_cb *cb, void *privdata, struct dq_take_req **req);

/* Acks n deliveries (1..DQ__ACK_BATCH) of queue, given by id and token, in
 * one script call; the strings are only read during the call. Each is
 * judged on its own: cb gets status 1 and results[i] for each (1 acked, 0
 * stale, DQ_EINVAL for an invalid id or token, which never sinks the
 * others), or a negative status and results NULL when the call failed as a
 * whole. Returns DQ_EINVAL (cb never runs) only if none is valid. */
#define DQ__ACK_BATCH 64
typedef void dq__acks_cb(dq_client *c, int status, const int *results, size_t n, void *privdata);
int dq__ack_many_async(dq_client *c, const char *queue, const char *const *ids,
                       const char *const *tokens, size_t n, dq__acks_cb *cb, void *privdata);

/* Integer from a reply element (integer or numeric string); 0 if neither. */
int64_t dq__reply_int(const redisReply *r);

#endif
