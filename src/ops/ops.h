/*
 * ops.h - what the files of the operations (src/ops/) share: running
 * scripts (script.c), deliveries, waits, gathered offers, shard counts,
 * epochs, the synchronous helpers, acks and nacks. The operations' public
 * face is include/delayq.h. Included at the end of internal.h, after the
 * client structure; never installed.
 */
#ifndef DQ_OPS_H
#define DQ_OPS_H

/* ------------------------------------------------------------ scripts (script.c) */

/* Script ids: one per lua/<name>.lua. */
enum dq__script {
    DQ__LUA_OFFER,
    DQ__LUA_TRANSFER,
    DQ__LUA_CANCEL,
    DQ__LUA_LOOKUP,
    DQ__LUA_STATS,
    DQ__LUA_TAKE,
    DQ__LUA_ACK,
    DQ__LUA_NACK,
    DQ__LUA_EXTEND,
    DQ__LUA_DEAD,
    DQ__LUA_CONFIG,
    DQ__LUA_DEAD_RO, /* dead.lua's list and count, as no-writes */
    DQ__LUA_METRICS,
    DQ__LUA_LIST,
    DQ__LUA_SHARDS,
    DQ__LUA_RECURRING,
    DQ__LUA_SCHEDULES, /* the listing of recurring schedules, no-writes */
    DQ__LUA_BEAT,
    DQ__LUA_CONSUMERS,
    DQ__LUA_COUNT
};

/* Runs a script on the node serving queue's slot with FCALL (EVAL of its
 * text, with the library loaded before it, when the node lacks the library):
 * argv holds nkeys keys then nargs args. flags as dq__route. Returns as
 * dq__route. */
int dq__eval(dq_client *c, const char *queue, unsigned flags, enum dq__script script, int nkeys,
             int nargs, const char **argv, const size_t *argvlen, dq__reply_fn *fn, void *privdata);

/* "FUNCTION LOAD REPLACE <the library>", formatted (malloc'ed, *len bytes),
 * or NULL when out of memory. */
char *dq__library_load_command(size_t *len);
/* The library's text, and a script's EVAL text (the shared code, then the
 * script), as sent: malloc'ed and NUL-ended (*len bytes without the NUL),
 * the caller frees it; NULL when out of memory. The benchmark uses them. */
char *dq__library_text(size_t *len);
char *dq__script_text(enum dq__script script, size_t *len);
/* 1 if text is dq__eval's refusal of a node that lacks the library to a user
 * who may not load it (a NOPERM naming 'delayq functions load'). */
int dq__text_is_no_library(const char *text);

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
 * as each take and ack has a fixed cost in Redis (src/ops/worker.c). */
#define DQ__TAKE_BATCH_MAX DQ__ACK_BATCH /* a worker acks a whole take at once */
int dq__take_batch_async(dq_client *c, const char *queue, const dq_take_opts *opts, int64_t timeout_ms,
                         size_t max, dq_take_many_cb *cb, void *privdata, dq_take_req **out);

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
int dq__take_reply_decode(const dq__delivery *d, const redisReply *reply, const char *request,
                          dq_msg **msgs, size_t max, int *held);

/* ------------------------------------------------------------ waiters */

/* A BLPOP on one shard's wake tokens, armed by a take that found every
 * shard of its queue empty, and left armed for the client's next take when
 * that take ends (waiter.c). Owned by the client's list: a take only holds
 * one (dq__waiter_hold) and lets it go (dq__waiter_release). */
typedef struct dq__waiter dq__waiter;

/* What a waiter tells the take holding it (holder): a token it popped on
 * shard `index` (the token is the holder's now), or that its wait ended
 * without one (a failover, an error, a closed connection: look again), or
 * that its wait ran out while entries wait on shard `index` with their
 * tokens gone (look there, holding no token; the waiter is not armed).
 * Only a held waiter calls; one nobody holds pushes a token back. */
typedef struct dq__waiter_calls {
    void (*token)(void *holder, unsigned index);
    void (*ended)(void *holder);
    void (*look)(void *holder, unsigned index);
} dq__waiter_calls;

/* Asks on conn, within c's safety interval, how many entries the ready
 * list `ready` holds (LLEN), for a wait that ran out: entries there whose
 * tokens are gone (popped by a consumer paused or dead in its wait) are
 * looked at. fn gets the reply as any on conn. Returns 0 if sent, -1 if
 * not (the caller goes on as if none were found). */
int dq__ask_ready(dq_client *c, dq__conn *conn, const char *ready, dq__reply_fn *fn, void *privdata);

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

/* ------------------------------------------------------------ offers, sending, registry */

/* Sends the offers dq_offer_async has gathered, as few script calls as
 * possible. Called before the loop polls and before any other command of
 * the operations goes out (dq__op_eval, through c->offers_send), so
 * commands keep call order. */
void dq__offers_flush(dq_client *c);
/* dq__eval for the operations: gathered offers go first. */
int dq__op_eval(dq_client *c, const char *queue, unsigned flags, enum dq__script script, int nkeys,
                int nargs, const char **argv, const size_t *argvlen, dq__reply_fn *fn, void *privdata);
/* The same for a plain command on queue's node. */
int dq__op_command(dq_client *c, const char *queue, int argc, const char **argv, const size_t *lens,
                   dq__reply_fn *fn, void *privdata);

/* Registers queue in dq:queues unless this client did already: an SADD on
 * the loop, not waited for (registry.c). Called by every offer. */
void dq__registry_note(dq_client *c, const char *queue);
void dq__registry_free(dq_client *c);

/* ------------------------------------------------------------ shard counts, epochs, settings */

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
/* Learning the count and routing again, written once. A reply that is a
 * "DQSHARDS n" refusal (the call wrote nothing): n learned for queue, put
 * in *told (if not NULL), and 1 returned: route the call again. Any other
 * reply: 0. */
int dq__shards_relearn(dq_client *c, const char *queue, const redisReply *reply, unsigned *told);
/* Before round `round` (0 first) of a call routed by the count: the count
 * to route by in *n and 0, or DQ_EBUSY (recorded) while the queue changes
 * its count (0) or once DQ__SHARD_ROUNDS rounds were refused: the one
 * bound of every operation. */
int dq__shards_round(dq_client *c, const char *queue, int round, unsigned *n);
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
 * *n (stats.c): one round trip, for calls that route by no item. */
int dq__shards_fetch(dq_client *c, const char *queue, unsigned *n);
/* Writes settings q to each of queue's `shards` shards (qconfig.c). */
int dq__config_copy(dq_client *c, const char *queue, unsigned shards, const dq_queue_config *q);
/* dq_queue_config_set without the shard count (qconfig.c): set's settings
 * checked and written (set->shards only checked), what the queue has now
 * in *now. 0, DQ_ENOTDURABLE, or a code. */
int dq__config_settings_set(dq_client *c, const char *queue, const dq_queue_config *set,
                            dq_queue_config *now);
/* Changes queue's shard count to n, refused unless the queue is empty; the
 * new shards get settings q (shardconf.c). 0, DQ_ENOTDURABLE, or a code. */
int dq__shards_change(dq_client *c, const char *queue, unsigned n, const dq_queue_config *q);

/* ------------------------------------------------------------ what operations share (ops.c) */

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
/* Deregisters every consumer still registered (consumer.c). */
void dq__consumers_free(dq_client *c);
/* k's items in hand are *count from now on, read at each beat (a worker's
 * counter; NULL: the value dq_consumer_set_in_hand sets). */
void dq__consumer_count(dq_consumer *k, const int *count);

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
/* The checks of a synchronous call on queue and, unless id is NULL, one
 * id: not from a callback (dq__not_in_callback), a valid queue name and
 * id. 0, or the code (recorded on c). */
int dq__check_sync(dq_client *c, const char *queue, const char *id);

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
int dq__eval_ints(dq_client *c, const char *queue, unsigned flags, enum dq__script script, int nkeys,
                  int nargs, const char **argv, dq__sync_ints *s);
/* The same on a shard of queue (argv holds the shard's keys). A script's
 * "DQSHARDS n" is learned and returned as DQ__ESHARDS: route again. */
int dq__eval_ints_on(dq_client *c, const char *queue, const char *shard, unsigned flags,
                     enum dq__script script, int nkeys, int nargs, const char **argv, dq__sync_ints *s);
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

/* What a listing shows of a payload (ops.c): a sealed one that c's
 * keys open is replaced, in *payload and *len, by its plaintext (malloc'ed,
 * NUL-terminated); one they do not open stays the envelope, which the
 * caller can tell by dq__sealed. */
void dq__open_shown(dq_client *c, const char *queue, const char *id, void **payload, size_t *len);

/* ------------------------------------------------------------ settling (reliable.c) */

/* Nacking a leased delivery asynchronously (reliable.c). status: the
 * script's answer (1 retried, 2 buried, 0 stale) or a negative code. */
typedef void dq__settle_cb(dq_client *c, int status, void *privdata);
int dq__nack_async(dq_client *c, const char *queue, const char *id, const char *token, int64_t delay_ms,
                   const char *error, int attempt, dq__settle_cb *cb, void *privdata);

/* Acks n deliveries (1..DQ__ACK_BATCH) of queue, given by id and token, in
 * one script call; the strings are only read during the call. Each is
 * judged on its own: cb gets status 1 and results[i] for each (1 acked, 0
 * stale, DQ_EINVAL for an invalid id or token, which never sinks the
 * others), or a negative status and results NULL when the call failed as a
 * whole. Returns DQ_EINVAL (cb never runs) only if none is valid. */
typedef void dq__acks_cb(dq_client *c, int status, const int *results, size_t n, void *privdata);
int dq__ack_many_async(dq_client *c, const char *queue, const char *const *ids,
                       const char *const *tokens, size_t n, dq__acks_cb *cb, void *privdata);

/* ------------------------------------------------------------ recurring (recurring.c) */

/* A transfer's list of cron schedules short of ticks (name, expression,
 * zone, last tick, per schedule): computes the next ticks of each and sends
 * them, without waiting for the reply; a failure is logged, and the next
 * transfer asks again (recurring.c). */
void dq__recurring_refill(dq_client *c, const char *queue, const redisReply *list);

#endif
