/*
 * internal.h - the library's private header: the client structure, what
 * core.c declares on it (the failure message, the log, a queue's keys, the
 * server clock, reading replies), and each layer's interface header in
 * layer order: util.h (src/util/), conn.h (src/conn/), route.h
 * (src/route/), then ops.h (src/ops/, after the client structure it uses).
 * A file includes this one header, or util.h alone when it needs no more.
 * Never installed.
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

#include "conn.h"
#include "route.h"

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
    /* dq__offers_flush, set by offer.c while offers are gathered: the
     * operations' senders (ops.c) send them first through it, so commands
     * keep call order without ops.c calling up into offer.c. */
    void (*offers_send)(dq_client *c);
    dq_log_fn *log_fn;
    void *log_privdata;
    struct dq__registry *registry; /* queues this client registered (registry.c) */
    struct dq__shardcount *shardcounts; /* shard counts learned (shardcount.c) */
    struct dq__epoch *epochs;    /* queues' epochs seen (epochs.c)      */
    struct dq__waiter *waiters;  /* armed waits on shards (waiter.c)    */
    dq_refused_fn *refused_fn;
    void *refused_privdata;
    struct dq__errlog *errlog;   /* errors that persist, by kind (backoff.c) */
    struct dq_consumer *consumers; /* registered consumers (consumer.c)  */
    ev_timer consumer_beat;      /* their beats, while there are any     */
    int consumer_failed;         /* a beat failed: said once until one works */
    char errstr[DQ__ERRSTR_MAX];
};

/* Reports a line through the client's log callback, if any. */
void dq__log(dq_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reports an ACL refusal of background work: to the log, then to the
 * dq_set_on_refused callback, if any. */
void dq__refused(dq_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

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

/* Integer from a reply element (integer or numeric string); 0 if neither. */
int64_t dq__reply_int(const redisReply *r);
/* A string reply's bytes as a malloc'ed C string (the caller frees), or
 * NULL without memory (core.c). */
char *dq__reply_dup(const redisReply *r);
#include "ops.h"

#endif
