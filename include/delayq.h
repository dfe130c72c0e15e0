/*
 * delayq.h - a Redis-backed delay queue: "do X after T", durable and on time.
 *
 * The whole public API of libdelayq. Everything here has the dq_ prefix;
 * handles are opaque.
 *
 * Model
 *   A producer offers an item (id, payload, delay) to a named queue. The item
 *   waits in Redis until its due time, then a scheduler moves it to the
 *   queue's ready list, where consumers take it. Any number of processes may
 *   produce, schedule and consume one queue at the same time.
 *
 * Time
 *   All times are milliseconds. Due times are absolute *Redis server* epoch
 *   milliseconds (the server's TIME), never the client's clock: clients with
 *   skewed clocks agree. A delay is added to the server's clock inside the
 *   offer script. An item is never delivered before its due time. Items with
 *   equal due times are delivered in offer order (exactly for up to 2048
 *   items sharing one due millisecond in one queue; beyond that, by id).
 *
 * Errors
 *   Functions return 0 (or a documented non-negative value) on success and a
 *   negative DQ_E* code on failure; dq_strerror() names the code and
 *   dq_client_errstr() holds the message of the client's last failure. If a
 *   function that takes a callback returns an error, the callback is never
 *   called.
 *
 * Threads
 *   A client and everything made from it belong to one thread: the one that
 *   runs its event loop. Different clients may live in different threads.
 *
 * Delivery
 *   Two modes, chosen per take. Without a lease (dq_take, dq_take_async) a
 *   take hands the item out and forgets it: at-most-once from then on. With
 *   a lease (dq_take_opts.lease_ms > 0, and every dq_worker) the item stays in
 *   Redis, in flight, until dq_ack; dq_nack or the end of the lease returns
 *   it for another attempt, and after max_attempts it becomes a dead letter:
 *   at-least-once. Either way an item is never lost between offer and
 *   delivery, whichever process dies or whenever Redis restarts (with AOF or
 *   RDB persistence on). Each delivery carries its attempt number (1 first)
 *   and, with a lease, a token that ack/nack/extend must present: a token
 *   from a lease that ran out is refused, so a slow consumer can never ack
 *   another consumer's delivery.
 *
 * Ids
 *   An id is in one place at a time: pending, ready, in flight or dead. An
 *   offer of an id that is pending replaces it (or keeps it, DQ_OFFER_KEEP);
 *   an offer of an id that is ready or in flight keeps the existing copy,
 *   whatever the flags: there is never a second copy. Once acked, taken
 *   without a lease, cancelled or dead, the id is free for a new offer.
 */
#ifndef DELAYQ_H
#define DELAYQ_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version, in its one place: the Makefile reads it for the .pc and the
 * shared library's soname (its major number), `delayq --version` prints it. */
#define DQ_VERSION "0.1.0"

#if defined(__GNUC__) || defined(__clang__)
#define DQ_EXPORT __attribute__((visibility("default")))
#define DQ_NODISCARD __attribute__((warn_unused_result))
#else
#define DQ_EXPORT
#define DQ_NODISCARD
#endif

struct ev_loop;

/* ------------------------------------------------------------------ limits */

/* Longest queue name and id, in bytes. Queue names are 1..DQ_QUEUE_MAX
 * bytes of [A-Za-z0-9_.:-]; ids are 1..DQ_ID_MAX printable ASCII bytes
 * (0x21..0x7e). */
#define DQ_QUEUE_MAX 128
#define DQ_ID_MAX 128
#define DQ_HOLDER_MAX 64 /* longest dq_take_opts.holder, in bytes */
/* Length of a generated id: 128 random bits, base64url without padding,
 * never starting with '-'. */
#define DQ_ID_GENERATED_LEN 22
/* Default and hard ceiling for a payload, in bytes (see dq_options). */
#define DQ_PAYLOAD_DEFAULT_MAX (1024u * 1024u)
#define DQ_PAYLOAD_HARD_MAX (64u * 1024u * 1024u)
/* Latest due time accepted: 2^42 - 1 ms after the epoch (year 2109). */
#define DQ_DUE_MAX_MS ((int64_t)4398046511103)

/* ------------------------------------------------------------------ errors */

enum dq_error {
    DQ_OK = 0,
    DQ_EINVAL = -1,     /* bad argument: name, id, duration, URL, flag      */
    DQ_ETOOBIG = -2,    /* payload larger than the client's max_payload      */
    DQ_ECONNECT = -3,   /* Redis unreachable, or the connection was lost     */
    DQ_ETIMEDOUT = -4,  /* no reply within command_timeout_ms                */
    DQ_EAUTH = -5,      /* AUTH or SELECT refused                           */
    DQ_EWRONGTYPE = -6, /* a key of the queue holds another Redis type      */
    DQ_EREDIS = -7,     /* any other error reply from Redis                  */
    DQ_EPROTO = -8,     /* a reply or stored value delayq cannot decode      */
    DQ_ENOMEM = -9,     /* out of memory (or, for an offer or ack, OpenSSL
                           offers no SHA-1, which the id index needs: its
                           configuration, OPENSSL_CONF, loads no provider
                           with it; nothing was sent)                      */
    DQ_ECLOSED = -10,   /* the client, worker or take was stopped            */
    DQ_EBUSY = -11,     /* the operation is not allowed right now (e.g. a
                           synchronous call from inside a callback)         */
    DQ_ENOTDURABLE = -12, /* the write was made on the master, but fewer than
                           dq_options.wait_replicas replicas confirmed it in
                           wait_timeout_ms: a failover before it replicates
                           may lose it. Results are filled as on success.  */
    DQ_EKEY = -13       /* a take found only sealed items needing a key the
                           client does not hold (dq_options.key_file): they
                           stay ready for a consumer with that key (one
                           found among others is passed, and the others
                           delivered); errstr names a key id and its item */
};

/* Static text for a DQ_E* code ("invalid argument", ...). Never NULL. */
DQ_EXPORT const char *dq_strerror(int code);

/* The class of a refusal by the queue's own functions (lua/): their error
 * replies carry it as a word right after "delayq:", before the prose
 * ("ERR delayq:input due time beyond ...": PROTOCOL.md, Errors). A failure
 * that is no such refusal (a lost connection, Redis's own errors, a check
 * of the client's) is DQ_REFUSAL_NONE. Read the class, never the prose,
 * which may be reworded. */
enum dq_refusal {
    DQ_REFUSAL_NONE = 0, /* not a refusal by the queue's functions          */
    DQ_REFUSAL_INPUT,    /* a value the caller gave is out of range or
                            breaks the queue's settings (a due time past
                            DQ_DUE_MAX_MS, a backoff base above its max):
                            fix the input; nothing changed                  */
    DQ_REFUSAL_STATE,    /* the queue's state refuses the call for now (its
                            shard count changes only when it is empty, a
                            change is under way); nothing changed           */
    DQ_REFUSAL_CORRUPT,  /* a value Redis holds breaks the rules (a counter,
                            setting or record, named in the message): the
                            call refused before writing                     */
    DQ_REFUSAL_PROTO     /* the call's arguments break the protocol: a
                            client and a library of different versions      */
};

/* ------------------------------------------------------------------ parsing helpers */

/* Parses a duration: "250ms", "30s", "5m", "2h", "1d", or bare digits meaning
 * milliseconds; "0" is zero. No sign, no spaces, no fractions, at most
 * DQ_DUE_MAX_MS. Returns 0 and sets *ms, or DQ_EINVAL (and *ms is untouched). */
DQ_EXPORT int dq_parse_duration(const char *text, int64_t *ms) DQ_NODISCARD;

/* ------------------------------------------------------------------ client */

typedef struct dq_client dq_client;

/* dq_options.wait_replicas: wait for every replica the master has. */
#define DQ_WAIT_ALL (-1)

typedef struct dq_options {
    int connect_timeout_ms;  /* per connection attempt; default 2000         */
    int command_timeout_ms;  /* reply deadline of each non-blocking command;
                                default 5000                                 */
    int safety_check_ms;     /* a scheduler re-checks each queue at a random
                                time in [1/2, 1] of this after its last
                                transfer, whatever it heard; default 5000   */
    int reconnect_max_ms;    /* reconnect backoff ceiling; default 1000      */
    size_t max_payload;      /* default DQ_PAYLOAD_DEFAULT_MAX, at most
                                DQ_PAYLOAD_HARD_MAX                          */
    int transfer_batch;      /* items one transfer script moves at most;
                                default 1000                                 */
    int transfer_budget_us;  /* server time one transfer run may spend;
                                default 2000                                 */
    int64_t backoff_base_ms; /* dq_nack with delay < 0 waits base * 2^(attempt
                                - 1), capped, times a random factor in
                                [1/2, 1]. Default DQ_QUEUE_SETTING: the
                                queue's policy (dq_queue_config), else 1000 */
    int64_t backoff_max_ms;  /* the cap; default DQ_QUEUE_SETTING: the
                                queue's, else 600000 (10 minutes). Set both
                                or neither                                  */
    int wait_replicas;       /* durable writes: every write of a call
                                (offers, leased takes, ack, nack, extend,
                                cancel, config, dead-letter redrive and
                                purge) is followed by WAIT wait_replicas
                                wait_timeout_ms on the same connection; the
                                call returns DQ_ENOTDURABLE when fewer
                                confirm. 0 (default): no WAIT.
                                DQ_WAIT_ALL: every replica the master lists
                                (ROLE, sent just before each write; at
                                least one), one round trip more a write;
                                needs ROLE in the user's ACL                */
    int wait_timeout_ms;     /* default 1000; 0 waits forever (WAIT's rule) */
    const char *key_file;    /* sealed payloads: a file of key lines ('delayq
                                keygen'), read by dq_connect (DQ_EINVAL when
                                it is unreadable, malformed, or open to group
                                or others). The first key seals every payload
                                this client offers (XChaCha20-Poly1305, bound
                                to the queue and the item id); every key
                                opens what it takes. NULL (default): payloads
                                go as they are, and sealed items are left for
                                consumers with keys (DQ_EKEY when a take
                                finds nothing else). The string must stay
                                valid until dq_connect returns              */
    int allow_plaintext;     /* with key_file: 0 (default) sets aside, with
                                its reason, every payload taken that is no
                                envelope opening under the file's keys
                                (plaintext, an envelope cut short or of
                                another format, a forged one), as it sets
                                aside one failing authentication; 1 delivers
                                plaintext as it is (while producers move to
                                sealing), never a damaged envelope. No
                                effect without key_file                     */
    const char *password;    /* the data nodes' AUTH password, kept out of
                                the URL (which may reach logs, argv or the
                                environment): replaces the URL's password;
                                the URL's user, if any, stays, else the
                                default user. At most 255 bytes, not "".
                                dq_connect copies it (DQ_EINVAL when it is
                                too long or ""); the caller's string must
                                stay valid until dq_connect returns and may
                                be wiped then; the client wipes its copy
                                when freed. NULL (default): the URL's      */
    const char *sentinel_password; /* the same for the sentinels of a
                                redis-sentinel:// URL, in place of its
                                sentinel_password (sentinel_user stays);
                                DQ_EINVAL with any other URL               */
    /* TLS (rediss://, rediss-sentinel://, rediss-cluster:// URLs). The files
     * are read by dq_connect (DQ_EINVAL when one is unreadable or the key
     * does not match the certificate); the strings must stay valid until it
     * returns. Ignored with a plain URL. */
    const char *tls_ca;      /* PEM file of the CAs trusted to sign the
                                servers' certificates; NULL (default): the
                                system's CA store                          */
    const char *tls_cert;    /* client certificate (PEM, with its chain) for
                                servers that ask for one (tls-auth-clients);
                                NULL (default): none. Needs tls_key        */
    const char *tls_key;     /* its private key (PEM); with tls_cert        */
    const char *tls_server_name; /* the name sent as SNI and required in the
                                servers' certificates; NULL (default): each
                                node's host as the URL or the topology gives
                                it (an IP address is checked against the
                                certificate's IP entries)                  */
    int tls_insecure_skip_verify; /* 1: accept any server certificate and
                                name (encrypts, but anyone in the path can
                                read and change the traffic). 0 (default):
                                verify the chain and the name; a failure is
                                DQ_ECONNECT from dq_connect, with the cause
                                in dq_client_errstr                        */
    int consumer_beat_ms;    /* how often a consumer (dq_consumer_start, and
                                every dq_worker) beats: it counts as live
                                for 3 x this after its last beat, so one
                                that dies leaves the list within that;
                                default 15000, at least 100                 */
} dq_options;

/* Fills *opts with the defaults above. */
DQ_EXPORT void dq_options_init(dq_options *opts);

/* Makes a client. loop: the libev loop the client runs on; NULL makes a
 * private loop owned (and destroyed) by the client. opts may be NULL for the
 * defaults; it is copied. Returns NULL only when out of memory or when opts
 * holds an out-of-range value. Connect with dq_connect() before use. */
DQ_EXPORT dq_client *dq_client_new(struct ev_loop *loop, const dq_options *opts);

/* Connects to Redis, waiting (running the loop) up to connect_timeout_ms per
 * attempt. url picks the topology:
 *   redis://[[user:]password@]host[:port][/db]     one node (port 6379, db 0)
 *   unix:///path/to/redis.sock[?db=N]              one node
 *   redis-sentinel://[[user:]password@]host[:port][,host[:port]...][/db]
 *       [?sentinel_user=U&sentinel_password=P]#MASTER
 *                      the master the sentinels (port 26379) name MASTER
 *   redis-cluster://[[user:]password@]host[:port][,host[:port]...]
 *                      a Redis Cluster, from any of its nodes
 * Percent-escapes are allowed in user and passwords. Authenticates and
 * selects the db. Returns 0, DQ_EINVAL (bad URL), DQ_ECONNECT, DQ_ETIMEDOUT
 * or DQ_EAUTH. After a success the client follows the topology by itself:
 * it reconnects, follows Sentinel failovers and cluster slot moves and
 * failovers (see docs/ha.md, 'High availability'). Call once per client. */
DQ_EXPORT int dq_connect(dq_client *c, const char *url) DQ_NODISCARD;

/* Stops everything the client runs (schedulers, takes, workers: their
 * callbacks run with DQ_ECLOSED), waits up to command_timeout_ms for the
 * commands already sent (acks and nacks of dq_worker_done among them) to be
 * answered, closes its connections and frees it. Safe with NULL. Must not
 * be called from one of the client's callbacks. */
DQ_EXPORT void dq_client_free(dq_client *c);

/* The loop the client runs on (the caller's, or its private one). */
DQ_EXPORT struct ev_loop *dq_client_loop(const dq_client *c);

/* Message of the client's last failure, "" if none. Owned by the client;
 * valid until its next call. */
DQ_EXPORT const char *dq_client_errstr(const dq_client *c);

/* The class of the client's last failure (the one dq_client_errstr
 * describes: enum dq_refusal); DQ_REFUSAL_NONE for NULL or no failure. */
DQ_EXPORT enum dq_refusal dq_client_refusal(const dq_client *c);

/* Receives what the client's background work (schedulers, reconnects,
 * set-aside entries) has to report, one line without a newline; msg is valid
 * during the call. Default: nothing is reported. Errors Redis gives while a
 * condition lasts (OOM, MISCONF, NOREPLICAS, READONLY, LOADING, BUSY: known
 * by that first word) are retried with a backoff of up to 1 s and reported
 * per kind: the first as it is, then one line at most every 10 s counting
 * the repeats, and "<KIND> errors cleared after ..." when one succeeds. */
typedef void dq_log_fn(void *privdata, const char *msg);
DQ_EXPORT void dq_set_log(dq_client *c, dq_log_fn *fn, void *privdata);

/* Receives each refusal of the client's background work by Redis's ACL (a
 * NOPERM reply to a transfer, a subscription or a worker's take), one line
 * naming the queue or channel and the permission; msg is valid during the
 * call. Retrying cannot help until the user's rule changes, so a program
 * that exists to do that work (a scheduler, a worker) may stop here: 'delayq
 * schedule' and 'delayq work' exit 3. Default: nothing; the line still goes
 * to the log and the work is retried with its usual backoff. */
typedef void dq_refused_fn(void *privdata, const char *msg);
DQ_EXPORT void dq_set_on_refused(dq_client *c, dq_refused_fn *fn, void *privdata);

/* Runs the client's loop until dq_stop() is called or nothing is left to do.
 * Returns 0. */
DQ_EXPORT int dq_run(dq_client *c);

/* Makes dq_run() return once the current callback is done. Safe anywhere in
 * the loop's thread, including callbacks and ev_signal watchers. */
DQ_EXPORT void dq_stop(dq_client *c);

/* ------------------------------------------------------------------ the function library */

/* delayq's scripts run as the functions of one Redis function library,
 * named for this build's scripts ("delayq_" and 12 hex digits: each version
 * has its own, so clients of two versions can share a server). A client
 * whose user may load it (FUNCTION LOAD, EVAL: an administrator) loads it
 * on a node that lacks it by itself; any other user's call there fails with
 * DQ_EAUTH and a message naming the node and 'delayq functions load'. */

/* This build's library name. Static; never NULL. */
DQ_EXPORT const char *dq_library_name(void);

/* Receives one master's answer: node is "host:port" (or "slot N's master"
 * when none could be reached); code 0 and text the answer, or a negative
 * code and text Redis's or the connection's message. Both valid during
 * the call. */
typedef void dq_node_report_fn(void *privdata, const char *node, int code, const char *text);

/* Loads (FUNCTION LOAD REPLACE) this build's library on every master of the
 * client's topology: the one node, the Sentinel's master, or each master of
 * the cluster's map; replicas get it by replication. Needs a user that may
 * run FUNCTION LOAD. fn (NULL: none) hears each master's answer, its text
 * the library's name. Returns 0 when every master loaded it, else the first
 * failure's code (DQ_EAUTH for NOPERM), its message on c naming the node.
 * Not from inside a callback (DQ_EBUSY). */
DQ_EXPORT int dq_functions_load(dq_client *c, dq_node_report_fn *fn, void *privdata) DQ_NODISCARD;

/* Reads which delayq libraries (FUNCTION LIST) every master holds: fn hears
 * each master's, their names space-separated ("" for none). Returns as
 * dq_functions_load. */
DQ_EXPORT int dq_functions_status(dq_client *c, dq_node_report_fn *fn, void *privdata) DQ_NODISCARD;

/* ------------------------------------------------------------------ producing */

/* Flags of dq_item.flags. */
/* If the id is pending, keep it as it is (default: replace payload and due
 * time). */
#define DQ_OFFER_KEEP (1u << 0)

typedef struct dq_item {
    const char *id;       /* NUL-terminated, or NULL for a generated id     */
    const void *payload;  /* any bytes; may be NULL when payload_len is 0   */
    size_t payload_len;
    int64_t delay_ms;     /* from the server's now; 0 = due now             */
    int64_t due_ms;       /* absolute server epoch ms; when > 0 it is used
                             instead of delay_ms (a past time = due now)   */
    unsigned flags;       /* DQ_OFFER_*                                     */
} dq_item;

/* What an offer did. */
enum dq_offer_status {
    DQ_ADDED = 1,     /* a new pending item                               */
    DQ_REPLACED = 2,  /* the id was pending: payload and due time replaced */
    DQ_KEPT = 3       /* the id was pending and DQ_OFFER_KEEP kept it      */
};

typedef struct dq_offer_result {
    char id[DQ_ID_MAX + 1];  /* the item's id (the generated one, if any)  */
    int status;              /* enum dq_offer_status                       */
    int64_t due_ms;          /* the item's due time (for DQ_KEPT: the kept
                                item's, 0 if it is ready already)          */
    int state;               /* enum dq_state of the id after the offer:
                                PENDING, READY (due already) or, for
                                DQ_KEPT, IN_FLIGHT                          */
} dq_offer_result;

/* Offers one item to queue and waits for Redis's answer. result may be NULL.
 * Returns 0, or DQ_EINVAL, DQ_ETOOBIG, DQ_ECONNECT, DQ_ETIMEDOUT,
 * DQ_EWRONGTYPE, DQ_EREDIS, DQ_EBUSY (called from a callback of c). */
DQ_EXPORT int dq_offer(dq_client *c, const char *queue, const dq_item *item,
                       dq_offer_result *result) DQ_NODISCARD;

/* Offers n items in one pipeline and waits for all answers. results: NULL or
 * an array of n, filled in order. Returns the number of items Redis accepted
 * (n on full success; items are independent, so a failure of one does not
 * undo the others), or a negative code if the batch could not be sent at
 * all (then nothing was offered). On a partial failure, the first failing
 * item's code is in results[i].status as a negative value, and
 * dq_client_errstr() tells the cause.
 * Items go out in delay order (then those with a due time, by due time; ties
 * in array order), so that each script call's items share their due times'
 * writes: items with delays of their own then cost Redis about what items of
 * one delay do. Each item's due time is still Redis's time at its call plus
 * its delay. When two items share an id they go in array order (the later
 * one replaces or keeps the earlier). Which items a partial failure offered
 * is thus any subset, not a prefix: the results say. */
DQ_EXPORT int dq_offer_many(dq_client *c, const char *queue, const dq_item *items, size_t n,
                            dq_offer_result *results) DQ_NODISCARD;

/* Completion of dq_offer_async. status: 0 or a negative code; result is NULL
 * on failure and valid only until the callback returns. */
typedef void dq_offer_cb(dq_client *c, int status, const dq_offer_result *result, void *privdata);

/* Offers without waiting: cb runs on the loop when Redis answers (or the
 * command fails). The item and its payload are copied before return. Offers
 * made before the loop next polls go out together, as few script calls as
 * possible, in call order and before any later command of c.
 * Returns 0 or DQ_EINVAL, DQ_ETOOBIG, DQ_ECONNECT (not connected), DQ_ENOMEM. */
DQ_EXPORT int dq_offer_async(dq_client *c, const char *queue, const dq_item *item, dq_offer_cb *cb,
                             void *privdata) DQ_NODISCARD;

/* Removes a pending item. Returns 1 if it was pending and is now removed, 0
 * if it was not pending (unknown, cancelled, or already ready/taken), or a
 * negative code. O(log N). */
DQ_EXPORT int dq_cancel(dq_client *c, const char *queue, const char *id) DQ_NODISCARD;

enum dq_state {
    DQ_STATE_UNKNOWN = 0,   /* never offered, or acked, taken without a lease,
                               cancelled or redriven away                    */
    DQ_STATE_PENDING = 1,   /* waiting for its due time (or its retry)      */
    DQ_STATE_READY = 2,     /* due, waiting for a consumer                  */
    DQ_STATE_IN_FLIGHT = 3, /* taken with a lease, not yet acked            */
    DQ_STATE_DEAD = 4       /* out of attempts: in the dead letters         */
};

typedef struct dq_item_info {
    int state;      /* enum dq_state                                        */
    int64_t due_ms; /* PENDING: its due time; IN_FLIGHT: its lease's end;
                       else 0                                               */
    int attempts;   /* deliveries so far (PENDING and IN_FLIGHT)            */
    char holder[DQ_HOLDER_MAX + 1]; /* IN_FLIGHT: the take's holder
                                       (dq_take_opts.holder) while its lease
                                       lasts; else ""                     */
    int64_t overdue_ms; /* PENDING, IN_FLIGHT: how long ago (server ms) its
                           due time or lease end passed, 0 if it has not:
                           the item waits for a scheduler to move it     */
} dq_item_info;

/* Looks an id up. Returns 0 and fills *info, or a negative code. O(1). */
DQ_EXPORT int dq_lookup(dq_client *c, const char *queue, const char *id,
                        dq_item_info *info) DQ_NODISCARD;

typedef struct dq_stats {
    int64_t pending;        /* items waiting for their due time            */
    int64_t ready;          /* items due and waiting for a consumer        */
    int64_t next_due_in_ms; /* server ms until the next timed event: the
                               earliest pending item's due time or lease
                               end (0 if overdue); -1 if none              */
    int64_t set_aside;      /* entries the scheduler or a consumer could not
                               decode, kept with a reason (never dropped)   */
    int64_t in_flight;      /* taken with a lease, not acked yet            */
    int64_t dead;           /* dead letters                                 */
    int64_t schedulers;     /* processes scheduling the queue now, by their
                               heartbeats (every catch-up and safety run:
                               a scheduler that stops beating stops
                               counting after 3 x its safety_check_ms)    */
    int64_t overdue_ms;     /* how long the earliest pending item or lease
                               end has been past due (server ms), 0 when
                               none is: work that waits for a scheduler   */
    int64_t exists;         /* 1 when any of the queue's keys exists in
                               Redis; 0 for a queue never used (or wiped) */
} dq_stats;

/* Counts of one queue. Returns 0 and fills *stats, or a negative code.
 * O(1) apart from one O(log N) look-up. */
DQ_EXPORT int dq_get_stats(dq_client *c, const char *queue, dq_stats *stats) DQ_NODISCARD;

/* ------------------------------------------------------------------ observing */

/* Upper bounds, in ms, of the lateness buckets of dq_metrics (ready time
 * minus due time of every item a transfer moves); a last bucket holds what
 * lies above them all. */
#define DQ_LATENESS_BUCKETS 13
DQ_EXPORT extern const int64_t dq_lateness_bounds_ms[DQ_LATENESS_BUCKETS];

typedef struct dq_metrics {
    dq_stats stats;
    int64_t oldest_ready_age_ms; /* how long the head of the ready list has
                                    waited (consumer lag); -1 if empty      */
    /* Totals since the queue's first offer, kept in Redis by the scripts
     * that do the work (so every process counts, and they survive
     * restarts of any process): */
    int64_t offered;       /* items accepted by offers (new or replacing)   */
    int64_t delivered;     /* items handed out by takes, leased or not      */
    int64_t acked;
    int64_t nacked;
    int64_t dead;          /* items that became dead letters                */
    int64_t lease_expired; /* leases that ran out before an ack or nack     */
    int64_t lateness[DQ_LATENESS_BUCKETS + 1]; /* moves per bucket, not
                                                  cumulative               */
    int64_t lateness_sum_ms;
    int64_t schedules; /* recurring schedules of the queue (active, paused
                          or ended: dq_recurring_list lists them)          */
    uint64_t wiped; /* times this client saw the queue's keys vanish (a
                       restart without persistence, an eviction, a flush:
                       see dq_queues_seen); kept by the client, not Redis */
} dq_metrics;

/* Counts and totals of one queue, in one round trip. Returns 0 and fills
 * *m, or a negative code: DQ_EPROTO (message names the field) when a
 * stored total is not an integer. O(1) apart from one O(log N) look-up. */
DQ_EXPORT int dq_get_metrics(dq_client *c, const char *queue, dq_metrics *m) DQ_NODISCARD;
/* The same for n queues at once, their calls pipelined: about one round
 * trip for all, not one each. status[i] gets 0 (m[i] filled) or queue i's
 * negative code; the message on c is the last failure's. Returns 0 once
 * every call has ended, or a negative code (nothing was sent). */
DQ_EXPORT int dq_get_metrics_many(dq_client *c, const char *const *queues, size_t n, dq_metrics *m,
                                  int *status) DQ_NODISCARD;

/* Whether the node serving queue (NULL: the master outside a cluster, or
 * the one serving slot 0) takes writes: one PING, which a master refuses
 * with MISCONF exactly while it refuses writes because an RDB save or an
 * AOF write failed (stop-writes-on-bgsave-error; reads keep working).
 * Returns 1 if it takes them, 0 if it refuses them (the message on c is
 * Redis's), or a negative code when it could not be asked. */
DQ_EXPORT int dq_redis_writable(dq_client *c, const char *queue) DQ_NODISCARD;

/* The names of every queue ever offered to, from the registry the offers
 * keep (the set dq:queues: a client adds a queue the first time it offers
 * to it, pipelined with that offer; no SCAN, no KEYS). Returns 0 and a new
 * array *names of *n strings, sorted (free with dq_queues_free), or a
 * negative code. */
DQ_EXPORT int dq_queues(dq_client *c, char ***names, size_t *n) DQ_NODISCARD;
DQ_EXPORT void dq_queues_free(char **names, size_t n);

/* The queues this client has seen an epoch of (the mark a queue's first
 * offer or setting makes) in a take, scheduler run or metrics read,
 * including those whose keys vanished since: a restart without
 * persistence, an eviction or a flush loses a queue's items, settings and
 * registry entry, so dq_queues forgets it, while this list keeps it. Each
 * such loss is logged once (dq_set_log) and counted (dq_metrics.wiped,
 * when the queue's metrics are read). Returns 0 and a new array *names of
 * *n strings (free with dq_queues_free), or DQ_EINVAL, DQ_ENOMEM. Needs no
 * round trip. */
DQ_EXPORT int dq_queues_seen(dq_client *c, char ***names, size_t *n) DQ_NODISCARD;

/* One item of a listing (dq_list). Strings are owned by the array. */
typedef struct dq_listed {
    int state;            /* enum dq_state of the listing                 */
    char *id;
    int64_t due_ms;       /* its due time                                 */
    int64_t lease_end_ms; /* IN_FLIGHT: its lease's end; else 0           */
    int64_t ready_ms;     /* READY: when it became ready; else 0          */
    int64_t died_ms;      /* DEAD: when it died; else 0                   */
    int attempts;         /* deliveries so far                            */
    char *error;          /* the last failure a consumer gave, "" if none */
    char *reason;         /* DEAD: why it died; else ""                   */
    void *payload;        /* a sealed payload the client's keys open is
                             shown opened; one they do not open stays
                             sealed (it starts "\0dqs1")                */
    size_t payload_len;
    size_t payload_full_len; /* the payload's whole size: payload_len, or
                                more when dq_list_cut cut it             */
    char holder[DQ_HOLDER_MAX + 1]; /* IN_FLIGHT: its take's holder
                                       (dq_take_opts.holder) while the
                                       lease lasts; else ""               */
} dq_listed;

/* Longest cursor of dq_list, without its NUL. */
#define DQ_CURSOR_MAX 40

/* One page of the items of queue in state (PENDING by due time, IN_FLIGHT
 * by lease end, READY and DEAD oldest first): cursor NULL or "" for the
 * first page, else the next_cursor of the page before. Reads a bounded
 * part of the state, never all of it: a page may hold fewer than limit
 * items (even none) and still have a next page. *out gets a new array of *n
 * items (dq_listed_free); next_cursor (DQ_CURSOR_MAX + 1 bytes) gets the
 * next page's cursor, "" at the end. Items that move meanwhile may be
 * missed or shown twice, as in any paged view of a moving queue. Returns 0,
 * DQ_EINVAL (a bad state, limit outside 1..1000, or a malformed cursor), or
 * a negative code. */
DQ_EXPORT int dq_list(dq_client *c, const char *queue, int state, const char *cursor, size_t limit,
                      dq_listed **out, size_t *n, char *next_cursor) DQ_NODISCARD;
/* As dq_list, with each payload cut to at most payload_max bytes (0:
 * whole), for views that must stay small whatever the payloads hold.
 * Pending and in-flight payloads are cut in the script, so the rest never
 * leaves Redis; ready and dead ones after they arrive. payload_full_len
 * gets each whole size. A sealed payload that was cut is not opened (it
 * stays a cut envelope). Returns as dq_list. */
DQ_EXPORT int dq_list_cut(dq_client *c, const char *queue, int state, const char *cursor, size_t limit,
                          size_t payload_max, dq_listed **out, size_t *n,
                          char *next_cursor) DQ_NODISCARD;
DQ_EXPORT void dq_listed_free(dq_listed *items, size_t n);
/* As dq_lookup, with the item's payload: *out gets a new item (free with
 * dq_listed_free(*out, 1)) with its state, id, due_ms (PENDING),
 * lease_end_ms (IN_FLIGHT), attempts and payload, in every state. The
 * payload is cut to at most payload_max bytes (0: whole) in the script, so
 * the rest never leaves Redis; payload_full_len gets its whole size. A
 * sealed payload the client's keys open is shown opened (when what it seals
 * fits payload_max), else it stays sealed. payload is NULL when it was not
 * read: an UNKNOWN state, a record that does not decode, a READY item of a
 * ready list too long to scan (over 10,000 entries). error and reason are
 * "", ready_ms and died_ms 0 (not read). Returns 0 or as dq_lookup (*out
 * NULL then). */
DQ_EXPORT int dq_lookup_item(dq_client *c, const char *queue, const char *id, size_t payload_max,
                             dq_listed **out) DQ_NODISCARD;

/* ------------------------------------------------------------------ doctor */

/* What dq_doctor found for one check. */
enum dq_finding_status {
    DQ_FINDING_OK = 0,
    DQ_FINDING_WARN = 1,   /* worth a look, or could not be read          */
    DQ_FINDING_UNSAFE = 2  /* breaks a promise: items lost, early or late */
};

typedef struct dq_finding {
    const char *check;  /* static: "maxmemory-policy", "persistence",
                           "replicas", "min-replicas-to-write", "clock",
                           "redis-version", "function-library", "acl"      */
    int status;         /* enum dq_finding_status                         */
    char *detail;       /* what was found on which node, and what to
                           change; one line of printable ASCII. Owned by
                           the array                                      */
} dq_finding;

/* Checks dq_doctor makes, one finding each. */
#define DQ_DOCTOR_CHECKS 8
/* dq_doctor's flags. DQ_DOCTOR_QUICK: what a long-running program needs
 * at its start, which should neither wait on a replica nor run commands
 * beyond reads: the masters only, and only the checks that can find the
 * ground unsafe. function-library and acl (whose probes send FCALL, EVAL
 * and FUNCTION LOAD) are then not examined: DQ_FINDING_OK, and their
 * detail says so. */
#define DQ_DOCTOR_QUICK (1u << 0)

/* Examines the deployment c is connected to (the node, the Sentinel
 * group's master, or every cluster master) and, unless flags has
 * DQ_DOCTOR_QUICK, the replicas the masters list (ROLE), over
 * connections of its own, waiting up to connect_timeout_ms for each node
 * and command_timeout_ms for its answers. Every check that cannot be read
 * (CONFIG, INFO or ACL refused to this user, a replica unreachable) is a
 * DQ_FINDING_WARN saying why. The clock check compares each node's TIME
 * with this host's clock: more than 1 s apart is DQ_FINDING_UNSAFE (see
 * docs/operations.md, 'Clocks'). Fills *out with a new array of *n (DQ_DOCTOR_CHECKS)
 * findings in a fixed order; free it with dq_findings_free. Returns 0, or a
 * negative code (nothing in *out): DQ_ECONNECT when no node could be
 * examined, DQ_ENOMEM, DQ_EBUSY from a callback of c. Runs the client's
 * loop meanwhile. */
DQ_EXPORT int dq_doctor(dq_client *c, unsigned flags, dq_finding **out, size_t *n) DQ_NODISCARD;
DQ_EXPORT void dq_findings_free(dq_finding *findings, size_t n);

/* "ok", "warn" or "unsafe" for an enum dq_finding_status; "?" otherwise. */
DQ_EXPORT const char *dq_finding_status_name(int status);

/* ------------------------------------------------------------------ scheduling */

/* Starts moving due items of queue to its ready list, on the client's loop:
 * subscribes to the queue's wake channel, runs a catch-up transfer now and
 * after every reconnect, keeps one timer armed for the earliest announced
 * due time, and re-checks at a jittered safety interval. Idempotent per
 * queue. Any number of processes may schedule the same queue; they stay out
 * of each other's way (see docs/guarantees.md, 'Many schedulers').
 * Returns 0, DQ_EINVAL or DQ_ENOMEM. Failures after that (Redis down) are
 * retried by the scheduler itself. */
DQ_EXPORT int dq_schedule(dq_client *c, const char *queue) DQ_NODISCARD;

/* Stops scheduling queue. Returns 0, or DQ_EINVAL if it was not scheduled. */
DQ_EXPORT int dq_unschedule(dq_client *c, const char *queue);

/* Counters of the client's schedulers, summed over queues (for tests and
 * benchmarks). */
typedef struct dq_sched_counters {
    uint64_t transfers;      /* transfer scripts run                        */
    uint64_t moved;          /* items they moved to ready lists             */
    uint64_t set_aside;      /* entries they set aside                      */
    uint64_t wakeups;        /* wake announcements received                 */
    uint64_t safety_checks;  /* transfers started by the safety timer       */
    uint64_t reconnects;     /* connections re-established                  */
    uint64_t errors;         /* transfer runs that failed (see dq_set_log)  */
    uint64_t leases_expired; /* leases that ran out and came back           */
    uint64_t buried;         /* of those, items that became dead letters    */
} dq_sched_counters;

DQ_EXPORT void dq_get_sched_counters(const dq_client *c, dq_sched_counters *out);

/* ------------------------------------------------------------------ recurring schedules */

/* A recurring schedule lives in Redis, in the queue's keys: any client sets,
 * changes, pauses or removes it at run time, and the queue's schedulers
 * (dq_scheduler_start, 'delayq schedule') turn each tick into one ordinary
 * item, whatever their number, crashes and clocks: id "NAME@<tick ms>",
 * due_ms the tick's time on the server clock, the schedule's payload.
 * On a sharded queue a schedule lives in the shard its name picks (as an
 * offer's id picks one), and the listing gathers the shards. A client with keys (key_file) seals
 * the payload once, when it sets the schedule, bound to the queue and the
 * schedule's name (a tick's id is not known in advance): each tick's item
 * carries that envelope, and a consumer with keys opens it as that
 * schedule's, by the item's id, and sets aside any other envelope, as for
 * an offered item (docs/security.md). Setting and changing run a writing
 * script; the listing only reads (FCALL_RO), so a read-only ACL user may
 * list schedules. */

/* What to do with the ticks that came while no scheduler ran, or while the
 * schedule was paused. */
enum dq_missed {
    DQ_MISSED_ONE = 0,  /* one item (the first missed tick's), then on time  */
    DQ_MISSED_SKIP = 1, /* none; a tick more than 60 s late is skipped too   */
    DQ_MISSED_ALL = 2   /* an item for each, each due at its own tick        */
                        /* (every: of the last 1000 ticks at most)           */
};

#define DQ_RECURRING_NAME_MAX 64  /* name: 1..64 of A-Z a-z 0-9 _ . : -      */
#define DQ_RECURRING_EVERY_MIN_MS 1000

typedef struct dq_recurring_spec {
    int64_t every_ms;    /* the interval, >= DQ_RECURRING_EVERY_MIN_MS       */
    int64_t start_ms;    /* the first tick (server epoch ms; ticks are
                            start + k * every_ms); 0: every_ms from now     */
    int64_t end_ms;      /* no tick after it (server epoch ms); 0: never    */
    int missed;          /* enum dq_missed                                  */
    const void *payload; /* every tick's item's payload (copied; sealed once
                            by a client with keys)                          */
    size_t payload_len;
    const char *cron;    /* NULL: every every_ms. Else a cron expression
                            (five fields: minute hour day-of-month month
                            day-of-week, with lists, ranges, steps, names; or
                            @hourly, @daily, @weekly, @monthly, @yearly),
                            and every_ms is not used; start_ms, if set, is
                            the earliest tick                               */
    const char *zone;    /* cron's IANA zone (read from the system's tz
                            database); NULL: "UTC". A wall time a DST change
                            skips runs at the end of the gap, once; one that
                            comes twice runs at its first occurrence         */
} dq_recurring_spec;

/* Creates schedule name of queue, or replaces it (its pending tick goes, the
 * first tick is computed anew: a change moves the next tick at once; a
 * paused schedule replaced runs again). *next_ms (may be NULL) gets the
 * first tick, -1 when none comes before end_ms. Returns 0 or a negative code:
 * DQ_EINVAL for a bad name, interval, cron expression (the message names the
 * field), zone, time or missed policy, or, from a client without keys, a
 * payload that starts as an envelope does; DQ_ETOOBIG for a payload over
 * max_payload (before sealing). A cron schedule's ticks are computed by the
 * clients (this call, then the schedulers, 64 at a time). */
DQ_EXPORT int dq_recurring_set(dq_client *c, const char *queue, const char *name,
                               const dq_recurring_spec *spec, int64_t *next_ms) DQ_NODISCARD;

/* Removes schedule name, and its pending tick's item (an item already ready
 * or in flight stays its consumer's). Pause keeps the schedule but makes no
 * items (its pending tick's item goes) until resume, whose missed policy then
 * applies to the ticks that passed. Each returns 1, 0 for a name queue has no
 * schedule of, or a negative code. */
DQ_EXPORT int dq_recurring_remove(dq_client *c, const char *queue, const char *name) DQ_NODISCARD;
DQ_EXPORT int dq_recurring_pause(dq_client *c, const char *queue, const char *name) DQ_NODISCARD;
DQ_EXPORT int dq_recurring_resume(dq_client *c, const char *queue, const char *name) DQ_NODISCARD;

/* A schedule as dq_recurring_list reports it. */
typedef struct dq_recurring {
    char *name;
    char *spec;          /* "every 1s", or the cron expression              */
    char *zone;          /* "" for every, the zone for cron                 */
    int64_t every_ms, start_ms, end_ms; /* as set (end_ms 0: never)          */
    int missed;          /* enum dq_missed                                  */
    int paused;          /* 1 while paused                                  */
    int64_t next_ms;     /* its next tick (server epoch ms), -1 once ended,
                            -2 for cron waiting for its ticks (the refill
                            by a scheduler failed: set it again)            */
    int64_t last_ms;     /* the latest tick that made an item, -1 if none    */
    size_t payload_len;
    int bad;             /* 1: its spec in Redis does not decode (remove it) */
} dq_recurring;

/* The schedules of queue, in name order (at most 10,000): *list is a new
 * array of *n entries (NULL when 0) that the caller frees with
 * dq_recurring_list_free. Returns 0 or a negative code (then *list is NULL
 * and *n 0). Only reads (FCALL_RO): a user with read-only rights on the
 * queue's keys may list. */
DQ_EXPORT int dq_recurring_list(dq_client *c, const char *queue, dq_recurring **list,
                                size_t *n) DQ_NODISCARD;
DQ_EXPORT void dq_recurring_list_free(dq_recurring *list, size_t n);

/* ------------------------------------------------------------------ consuming */

/* A delivered item. Owned by whoever the function handing it out says;
 * all fields read-only. id and payload are followed by a NUL byte that is
 * not part of them (so text payloads can be used as C strings). */
typedef struct dq_msg {
    const char *queue;
    const char *id;
    size_t id_len;
    const void *payload;
    size_t payload_len;
    int64_t due_ms;    /* its due time (server epoch ms)                    */
    int64_t ready_ms;  /* when the scheduler moved it to the ready list     */
    int attempt;       /* 1 on first delivery, then 2, 3, ...               */
    const char *token; /* the lease token, NUL-terminated; NULL without a
                          lease                                             */
} dq_msg;

/* Frees a message handed to the caller. Safe with NULL. */
DQ_EXPORT void dq_msg_free(dq_msg *msg);

/* Waits up to timeout_ms (< 0: forever) for an item of queue, running the
 * client's loop meanwhile (so the client's schedulers keep working). Returns
 * 1 and sets *msg (free it with dq_msg_free), 0 on timeout (*msg = NULL), or
 * a negative code. Must not be called from a callback of c (DQ_EBUSY). */
DQ_EXPORT int dq_take(dq_client *c, const char *queue, int64_t timeout_ms, dq_msg **msg) DQ_NODISCARD;

typedef struct dq_take_req dq_take_req;

/* A setting of the queue's own (dq_queue_config), or the default below when
 * the queue has none. */
#define DQ_QUEUE_SETTING (-1)

/* How to take. */
typedef struct dq_take_opts {
    int64_t lease_ms;  /* 0: no lease (at-most-once); > 0: the item stays in
                          flight this long unless acked, nacked or extended;
                          DQ_QUEUE_SETTING: the queue's lease               */
    int max_attempts;  /* with a lease: deliveries before an item that keeps
                          failing or timing out becomes a dead letter;
                          0 = no limit; DQ_QUEUE_SETTING: the queue's       */
    const char *holder; /* with a lease: who holds the items (a name, 1 to
                          DQ_HOLDER_MAX bytes of UTF-8, no control
                          character; else DQ_EINVAL), shown
                          by dq_lookup while the lease lasts; NULL: none.
                          Copied by the take calls; a worker keeps the
                          pointer, which must outlive it                   */
} dq_take_opts;

#define DQ_LEASE_DEFAULT_MS 30000
#define DQ_MAX_ATTEMPTS_DEFAULT 16

/* Fills *opts: the queue's lease and max attempts (DQ_QUEUE_SETTING), which
 * default to DQ_LEASE_DEFAULT_MS and DQ_MAX_ATTEMPTS_DEFAULT. */
DQ_EXPORT void dq_take_opts_init(dq_take_opts *opts);

/* A queue's own settings, kept in Redis (dq:{Q}:cfg), so every consumer of
 * the queue shares them: the lease and max attempts of takes and workers
 * that ask for DQ_QUEUE_SETTING, and the backoff of nacks without a delay
 * from clients whose backoff options are DQ_QUEUE_SETTING. */
typedef struct dq_queue_config {
    int64_t lease_ms;        /* default DQ_LEASE_DEFAULT_MS; >= 1            */
    int64_t max_attempts;    /* default DQ_MAX_ATTEMPTS_DEFAULT; 0 = no limit */
    int64_t backoff_base_ms; /* default 1000                                 */
    int64_t backoff_max_ms;  /* default 600000; >= backoff_base_ms           */
    int64_t shards;          /* default 1; 1..64: how many slots (and so
                                cluster nodes) the queue spreads over. It
                                changes only while the queue is empty (no
                                item pending, ready, in flight or dead, no
                                recurring schedule): otherwise DQ_EREDIS,
                                nothing changed. One
                                change at a time (another under way:
                                DQ_EREDIS); one whose client died is
                                finished or undone first, a minute after
                                it began                                  */
} dq_queue_config;

/* Reads queue's settings (defaults filled in) into *out. */
DQ_EXPORT int dq_queue_config_get(dq_client *c, const char *queue, dq_queue_config *out) DQ_NODISCARD;

/* Sets the fields of *set that are >= 0; a field of DQ_QUEUE_SETTING stays
 * as it is. *out (may be NULL) receives the settings after the change. All
 * or nothing: a bad value (DQ_EREDIS/DQ_EINVAL) changes nothing. */
DQ_EXPORT int dq_queue_config_set(dq_client *c, const char *queue, const dq_queue_config *set,
                                  dq_queue_config *out) DQ_NODISCARD;

/* Resets all of queue's settings to the defaults. */
DQ_EXPORT int dq_queue_config_reset(dq_client *c, const char *queue) DQ_NODISCARD;

/* Completion of an async take. status: 1 with msg, 0 on timeout (msg NULL),
 * or a negative code (DQ_ECLOSED when cancelled or the client is freed).
 * msg belongs to the callee: free it with dq_msg_free(). Runs exactly once. */
typedef void dq_take_cb(dq_client *c, int status, dq_msg *msg, void *privdata);

/* Starts waiting for one item of queue on a connection of its own; cb runs
 * on the loop. timeout_ms < 0 waits forever. Survives reconnects, and waits
 * out the errors that persist (see dq_set_log) and failovers: a timeout
 * that comes while Redis still gives one (READONLY, LOADING and
 * CLUSTERDOWN among them) or cannot be reached reports that error (status
 * < 0: DQ_ECONNECT when unreachable), not 0, so that an outage does not
 * read as an empty queue. The timeout holds during a failover too. *req (may
 * be NULL) receives a handle for dq_take_cancel, valid until cb runs.
 * Returns 0, DQ_EINVAL or DQ_ENOMEM. */
DQ_EXPORT int dq_take_async(dq_client *c, const char *queue, int64_t timeout_ms, dq_take_cb *cb,
                            void *privdata, dq_take_req **req) DQ_NODISCARD;

/* As dq_take_async, with options (NULL: no lease, as dq_take_async). */
DQ_EXPORT int dq_take_async_ex(dq_client *c, const char *queue, const dq_take_opts *opts,
                               int64_t timeout_ms, dq_take_cb *cb, void *privdata,
                               dq_take_req **req) DQ_NODISCARD;

/* Takes up to max items in one round trip, waiting up to timeout_ms for the
 * first (< 0: forever). opts may be NULL (no lease). Fills msgs[0..n-1] (free
 * each with dq_msg_free). Returns n >= 1, 0 on timeout, or a negative code.
 * Must not be called from a callback of c. */
DQ_EXPORT int dq_take_many(dq_client *c, const char *queue, const dq_take_opts *opts, int64_t timeout_ms,
                           dq_msg **msgs, size_t max) DQ_NODISCARD;

/* Completion of dq_take_many_async. status: 1 with msgs[0..n-1] (n >= 1),
 * 0 on timeout, or a negative code (DQ_ECLOSED when cancelled or the client
 * is freed), with n = 0. Each message belongs to the callee (dq_msg_free);
 * the array itself does not, and is valid only during the call. Runs
 * exactly once. */
typedef void dq_take_many_cb(dq_client *c, int status, dq_msg **msgs, size_t n, void *privdata);

/* As dq_take_async_ex, for up to max (1..64) items in one round trip: cb gets
 * what one script run popped, as soon as anything is ready. Returns 0,
 * DQ_EINVAL or DQ_ENOMEM. */
DQ_EXPORT int dq_take_many_async(dq_client *c, const char *queue, const dq_take_opts *opts,
                                 int64_t timeout_ms, size_t max, dq_take_many_cb *cb, void *privdata,
                                 dq_take_req **req) DQ_NODISCARD;

/* Cancels a waiting take without losing an item: if an item was already on
 * its way, cb gets it (status 1); otherwise cb runs with DQ_ECLOSED. Either
 * way cb runs later on the loop, not inside this call. */
DQ_EXPORT void dq_take_cancel(dq_take_req *req);

/* ------------------------------------------------------------------ leases */

/* The calls below take the id and token of a delivery made with a lease.
 * They return 1 on success, 0 if the id is not in flight or the token is
 * not its current lease's (the lease ran out and the item went elsewhere),
 * or a negative code. Must not be called from a callback of c; workers use
 * dq_worker_done instead. */

/* Done with it: removes the item for good. */
DQ_EXPORT int dq_ack(dq_client *c, const char *queue, const char *id, const char *token) DQ_NODISCARD;

/* Failed: back to pending, due after delay_ms (< 0: the backoff for the
 * delivery's attempt number: the client's dq_options.backoff_*, else the
 * queue's, computed by the server where the attempt count is), keeping error (may be NULL; 1000 bytes
 * kept) as its last error. Returns 1 if it will be retried, 2 if it had had
 * its max attempts and is now a dead letter, 0 if stale (see above). */
DQ_EXPORT int dq_nack(dq_client *c, const char *queue, const char *id, const char *token,
                      int64_t delay_ms, const char *error) DQ_NODISCARD;

/* Not failed, only given back (a resource of a pool, work left for another
 * consumer): back to the queue, due after delay_ms (<= 0: ready at once),
 * as it was before this take: the take counts as no attempt (the next
 * take of the item carries this one's attempt number), so a release never
 * makes a dead letter, and the item keeps its last error. Returns 1 if
 * released, 0 if stale (see above). */
DQ_EXPORT int dq_release(dq_client *c, const char *queue, const char *id, const char *token,
                         int64_t delay_ms) DQ_NODISCARD;

/* Still working: the lease ends lease_ms from now instead. */
DQ_EXPORT int dq_extend(dq_client *c, const char *queue, const char *id, const char *token,
                        int64_t lease_ms) DQ_NODISCARD;

/* The backoff for an attempt number (>= 1), in ms, by the client's
 * dq_options.backoff_* (or the library defaults if those are the queue's:
 * this call does not read the queue's settings). */
DQ_EXPORT int64_t dq_backoff_ms(const dq_client *c, int attempt);

/* ------------------------------------------------------------------ dead letters */

typedef struct dq_dead_letter {
    char *id;
    int64_t died_ms;   /* when it became a dead letter (server ms)          */
    int attempts;
    int64_t due_ms;    /* its original due time                            */
    char *reason;      /* why it died, e.g. "failed attempt 16 of 16"      */
    char *error;       /* the last error a consumer gave, "" if none       */
    void *payload;     /* opened when it is sealed with a key the client
                          holds; else as stored (a sealed one then starts
                          "\0dqs1")                                         */
    size_t payload_len;
} dq_dead_letter;

/* Number of dead letters of queue, in *n. Returns 0 or a negative code. */
DQ_EXPORT int dq_dead_count(dq_client *c, const char *queue, int64_t *n) DQ_NODISCARD;

/* Lists up to limit dead letters from offset, oldest death first, into a
 * new array *out of *n entries; free it with dq_dead_letters_free. Every
 * dead letter in the range comes back, in order, so the next page starts at
 * offset + *n (fewer than limit: the end). One whose stored record cannot
 * be decoded comes with reason "undecodable", died_ms, attempts and due_ms
 * 0, error "" and the raw stored bytes as its payload ("missing record" and
 * no bytes when its record is gone); dq_dead_redrive sets such a letter
 * aside (the set-aside list, with its bytes) rather than dropping it. */
DQ_EXPORT int dq_dead_list(dq_client *c, const char *queue, size_t offset, size_t limit,
                           dq_dead_letter **out, size_t *n) DQ_NODISCARD;
DQ_EXPORT void dq_dead_letters_free(dq_dead_letter *letters, size_t n);

/* Moves dead letters back to the ready list as new items (attempts start
 * over): the one with id, or all of them when id is NULL (in bounded
 * batches). An id that is active again is dropped instead, never doubled;
 * a dead letter that cannot be decoded, or whose id breaks the id rule, is
 * moved to the set-aside list with its raw bytes (not counted as moved).
 * Returns how many were moved back, or a negative code. */
DQ_EXPORT int64_t dq_dead_redrive(dq_client *c, const char *queue, const char *id) DQ_NODISCARD;

/* Deletes all dead letters of queue. Returns how many, or a negative code. */
DQ_EXPORT int64_t dq_dead_purge(dq_client *c, const char *queue) DQ_NODISCARD;

/* ------------------------------------------------------------------ workers */

typedef struct dq_worker dq_worker;

/* A handler owns msg until it calls dq_worker_done(w, msg, status), now or
 * later from the loop (asynchronous work is fine). Until then the message
 * counts against the worker's concurrency. Workers take with a lease
 * (dq_worker_start_ex sets it; default: the queue's): a handler that
 * never finishes, or a process that dies, leaves the lease to run out and
 * the item is delivered again. */
typedef void dq_handler(dq_worker *w, dq_msg *msg, void *privdata);

/* Runs handler for items of queue with up to concurrency (>= 1) messages in
 * hand at once. Also schedules the queue unless DQ_WORKER_NO_SCHEDULER is in
 * flags. Returns a worker, or NULL (see dq_client_errstr) on bad arguments.
 * The worker takes in batches (every free place in one round trip, up to 64)
 * and sends the acks of dq_worker_done together once per loop iteration,
 * before the loop polls; dq_worker_stop and dq_client_free send them too.
 * Each round trip has a fixed cost in Redis, so while every handler calls
 * dq_worker_done before it returns, the worker takes ahead: up to 256 a
 * round trip whatever its concurrency, as many as the last round's pace
 * handles in 10 ms, with about a megabyte of payloads at most. The messages
 * past concurrency wait in the worker, in order, for a place (their leases
 * running), and never more than concurrency are in hand. A round whose
 * handlers keep a message ends it until a quick one. */
#define DQ_WORKER_NO_SCHEDULER (1u << 0)
DQ_EXPORT dq_worker *dq_worker_start(dq_client *c, const char *queue, int concurrency, unsigned flags,
                                     dq_handler *handler, void *privdata);

/* As dq_worker_start, with take options (lease, max attempts); opts NULL
 * means dq_take_opts_init's defaults. */
DQ_EXPORT dq_worker *dq_worker_start_ex(dq_client *c, const char *queue, int concurrency, unsigned flags,
                                        const dq_take_opts *opts, dq_handler *handler, void *privdata);

/* Ends the handling of msg and frees it. status 0 acks it; anything else
 * nacks it with the backoff (see dq_nack; error, which may be NULL, is kept as
 * its last error), so it is retried until its max attempts. */
DQ_EXPORT void dq_worker_done(dq_worker *w, dq_msg *msg, int status);
DQ_EXPORT void dq_worker_fail(dq_worker *w, dq_msg *msg, const char *error);

/* Stops taking new items; messages in hand stay valid until their
 * dq_worker_done. Then frees the worker once all are done. Safe in handlers.*/
DQ_EXPORT void dq_worker_stop(dq_worker *w);

typedef struct dq_worker_counters {
    uint64_t taken, succeeded, failed;
    uint64_t stale;  /* acks and nacks refused: the lease had run out      */
    int in_hand;
    uint64_t refused; /* acks and nacks that failed otherwise (an invalid id
                         or token, a failed call): their leases will run out
                         and the items come back                          */
} dq_worker_counters;

DQ_EXPORT void dq_worker_get_counters(const dq_worker *w, dq_worker_counters *out);

/* Receives each ack (acked 1) or nack (acked 0) of w that the server
 * refused as stale: msg's lease had run out before it came (a handler or a
 * process paused past it), so the item was, or will be, delivered again
 * and this handling counts for nothing (its side effects are the
 * program's to undo). It runs from the reply's callback, once per such
 * message, after the log line that names it and while counters.stale
 * counts it; msg (id, attempt, payload) is the worker's and valid only
 * during the call: never free it, keep it or pass it to dq_worker_done (it
 * was done already; copy what you need). The call may stop the worker.
 * fn NULL: none (the default). */
typedef void dq_stale_fn(dq_worker *w, const dq_msg *msg, int acked, void *privdata);
DQ_EXPORT void dq_worker_set_on_stale(dq_worker *w, dq_stale_fn *fn, void *privdata);

/* ------------------------------------------------------------------ consumers */

/* A consumer makes itself visible to the queue's operators ('delayq
 * consumers', serve's API and dashboard): it beats in Redis, in the queue's
 * slot, every consumer_beat_ms from the client's loop (no other traffic),
 * with its name, start, items in hand and last beat (server times). A
 * dq_worker registers itself (named by its take options' holder, else as
 * below); a program that takes by itself registers with these calls. */
#define DQ_CONSUMER_NAME_MAX 64 /* longest consumer name, in bytes */
typedef struct dq_consumer dq_consumer;

/* Registers a consumer of queue named name (1 to DQ_CONSUMER_NAME_MAX bytes
 * of UTF-8, no control character; NULL: "host:pid", the host cut to fit),
 * and beats for it about a second from now (then every consumer_beat_ms;
 * never waited for), so a consumer gone within that second never shows
 * and costs nothing in Redis. Returns 0 and sets *out,
 * owned by the client until dq_consumer_stop or dq_client_free; DQ_EINVAL
 * for a bad queue or name, DQ_ECONNECT before dq_connect, DQ_ENOMEM. A
 * failed beat is logged (dq_set_log) and tried again at the next one. */
DQ_EXPORT int dq_consumer_start(dq_client *c, const char *queue, const char *name,
                                dq_consumer **out) DQ_NODISCARD;
/* The items the consumer holds now (>= 0; sent as at most 999999999):
 * sent with its next beat. */
DQ_EXPORT void dq_consumer_set_in_hand(dq_consumer *k, int64_t in_hand);
/* Deregisters the consumer (a 'bye' sent now if it beat, not waited for;
 * dq_client_free waits for it) and frees k. NULL is fine. dq_client_free does this for
 * every consumer still registered. */
DQ_EXPORT void dq_consumer_stop(dq_consumer *k);

typedef struct dq_consumer_info {
    char name[DQ_CONSUMER_NAME_MAX + 1];
    int64_t started_ms;   /* server ms of its first beat                    */
    int64_t in_hand;      /* items it held at its last beat                 */
    int64_t last_seen_ms; /* server ms of its last beat                     */
    int64_t now_ms;       /* the server's time when the list was read       */
} dq_consumer_info;

/* The live consumers of queue (those whose last beat still counts), by
 * name, at most 1000. Returns 0 with *out a malloc'ed array of *n entries
 * (the caller frees it with free(); NULL when *n is 0), or a negative code
 * (*out NULL, *n 0). Synchronous; a read (FCALL_RO). */
DQ_EXPORT int dq_consumers(dq_client *c, const char *queue, dq_consumer_info **out,
                           size_t *n) DQ_NODISCARD;

#ifdef __cplusplus
}
#endif

#endif /* DELAYQ_H */
