/*
 * util.h - the one interface header of src/util/, the pure helpers shared
 * by the library and the CLI: URL parsing, RESP formatting, slots and
 * shards, names and keys, the stored-entry codec, ids, text encodings,
 * sealing, the classes of Redis's error replies, an ack call's arguments,
 * cron expressions and a scheduler's decisions. No I/O (but reading a time
 * zone's file) and no event loop here, so every function is unit-tested
 * alone. Internal: dq__ prefix, never installed.
 */
#ifndef DQ_UTIL_H
#define DQ_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "delayq.h"

/* ------------------------------------------------------------ URL (url.c) */

/* Topologies a URL names. */
enum dq__topology {
    DQ__TOPO_SINGLE = 0,   /* redis:// or unix://: one node                 */
    DQ__TOPO_SENTINEL = 1, /* redis-sentinel://: ask sentinels for MASTER   */
    DQ__TOPO_CLUSTER = 2   /* redis-cluster://: a Redis Cluster             */
};

#define DQ__URL_NODES_MAX 16
#define DQ__URL_MASKED_MAX 200

/* One TCP address. */
typedef struct dq__addr {
    char host[256];      /* IPv4, name, or IPv6 without brackets            */
    int port;
} dq__addr;

typedef struct dq__url {
    int topology;        /* enum dq__topology                               */
    int is_unix;         /* 1: unix socket at path; 0: TCP host:port        */
    char host[256];      /* single TCP: host (== nodes[0].host)             */
    int port;            /* single TCP: port, default 6379 (== nodes[0])    */
    char path[108];      /* unix socket path                                */
    int nnodes;          /* TCP: 1 (single) or the sentinels / seed nodes   */
    dq__addr nodes[DQ__URL_NODES_MAX]; /* sentinel default port 26379,
                                          cluster and single 6379           */
    char master[128];    /* sentinel: the monitored master's name           */
    char user[128];      /* ACL user, "" if none (percent-decoded)          */
    char password[256];  /* "" if none (percent-decoded)                    */
    char sentinel_user[128];     /* sentinel: ?sentinel_user=, "" if none   */
    char sentinel_password[256]; /* sentinel: ?sentinel_password=           */
    int db;              /* database number, default 0 (always 0 in cluster)*/
    int tls;             /* rediss*: TLS to the data nodes                  */
    int sentinel_tls;    /* rediss-sentinel: TLS to the sentinels too, unless
                            ?sentinel_tls=no (also allowed with plain)      */
    char masked[DQ__URL_MASKED_MAX + 1]; /* the URL for messages: user info
                            and sentinel_password replaced by "***", control
                            bytes escaped, cut to DQ__URL_MASKED_MAX bytes
                            with "..."; never holds a password             */
    int master_hidden;   /* sentinel: 1 while master, written right after a
                            sentinel_password value, may be that password's
                            tail (a raw '#' in it); messages name it through
                            dq__url_master_shown. Cleared once a sentinel
                            knows the name                                 */
} dq__url;

/* Parses one of
 *   redis://[[user:]password@]host[:port][/db]
 *   unix:///path.sock[?db=N]
 *   redis-sentinel://[[user:]password@]host[:port][,host[:port]...][/db]
 *       [?sentinel_user=U&sentinel_password=P]#MASTER
 *   redis-cluster://[[user:]password@]host[:port][,host[:port]...]
 * "redis://:pw@h" means password only. Returns 0, or DQ_EINVAL with a
 * one-line reason in err (errlen bytes) that never quotes a password. */
int dq__url_parse(const char *text, dq__url *out, char *err, size_t errlen);

/* Writes the masked form of text (as dq__url.masked) into out (size bytes):
 * for messages about a URL that may not parse. User info (all before the
 * last '@'), query pieces other than db= and sentinel_user=, a master name
 * right after a hidden query piece, and hosts that do not read as
 * host[:port] (a password whose '@' was forgotten) become "***". */
void dq__url_mask(const char *text, char *out, size_t size);

/* The same masking of the len bytes at text (any bytes, NUL included),
 * written as they are (no escaping: the caller escapes), into out (size
 * bytes, NUL-terminated, cut with "..." when it does not fit). Returns the
 * length written. For text that may hold a URL, such as a mistyped
 * argument quoted in an error. */
size_t dq__url_redact(const void *text, size_t len, char *out, size_t size);

/* u->master for messages, or "***" while u->master_hidden. */
const char *dq__url_master_shown(const dq__url *u);

/* ------------------------------------------------------------ RESP (resp.c) */

/* Formats head[0..nhead-1] then argv[0..argc-1] as one RESP command into a
 * malloc'ed *out (the caller frees). Returns its length, or -1 (no memory). */
long dq__format_command(char **out, int nhead, const char **head, const size_t *headlen, int argc,
                        const char **argv, const size_t *argvlen);

/* ------------------------------------------------------------ cluster slots (slot.c) */

#define DQ__SLOTS 16384
/* The cluster slot of a key, exactly as Redis computes it: CRC16 (XMODEM)
 * of the key, or of the text between the first '{' and the next '}' when
 * that text is not empty, modulo 16384. */
unsigned dq__key_slot(const char *key, size_t len);
/* The slot of a queue's keys (their hash tag is the queue name, or a
 * shard's name). */
unsigned dq__queue_slot(const char *queue);

/* ------------------------------------------------------------ shards (shard.c) */

/* The most shards a queue may have. */
#define DQ__SHARDS_MAX 64
/* Longest shard name: the queue, '~' and a tag of up to 6 hex digits. */
#define DQ__SHARD_NAME_MAX (DQ_QUEUE_MAX + 8)

/* Writes the name of shard i of n of queue into out (size bytes): queue
 * itself for shard 0, else "queue~TAG", its tag searched so the shards lie
 * evenly round the slot space (see shard.c). Returns 0, or -1 when n is not
 * 1..DQ__SHARDS_MAX, i >= n or out is too small. */
int dq__shard_name(const char *queue, unsigned i, unsigned n, char *out, size_t size);
/* The shard (0..n-1) of the item with id (len bytes) in a queue of n. */
unsigned dq__shard_of_id(const char *id, size_t len, unsigned n);

/* ------------------------------------------------------------ names (codec.c) */

/* 1 if name is a valid queue name (1..DQ_QUEUE_MAX of [A-Za-z0-9_.:-]). */
int dq__queue_valid(const char *name);
/* 1 if id is a valid id (1..DQ_ID_MAX bytes in 0x21..0x7e). */
int dq__id_valid(const char *id);
/* 1 if len bytes of name are a valid schedule name (1..DQ_RECURRING_NAME_MAX
 * of the queue names' characters). */
int dq__schedule_name_valid(const char *name, size_t len);
/* 1 if id (len bytes, not NUL-ended) is a recurring tick's item id,
 * "NAME@T" (NAME a schedule name, T 0..DQ_DUE_MAX_MS in plain decimal);
 * then *name_len gets NAME's length. 0 otherwise (*name_len untouched). */
int dq__tick_id(const char *id, size_t len, size_t *name_len);

/* 1 if cursor is a valid dq_list cursor ("" starts at the top). The
 * pending and in-flight pages (slots) take "<score>:<skip>", 1-16 and 1-6
 * digits; the ready and dead pages an offset of 1-9 digits, stored in
 * *offset (0 for ""). A sharded queue's cursor starts with its shard,
 * "S/" (1-2 digits), and the rest is one of those, or "". */
int dq__list_cursor(int slots, const char *cursor, size_t *offset);

/* Writes "dq:{queue}:" followed by suffix into buf (NUL-terminated).
 * Returns the length, or -1 if it does not fit. */
int dq__key(char *buf, size_t size, const char *queue, const char *suffix);

/* Writes v in decimal and a NUL into buf (at least 21 bytes); returns the
 * length. For the hot paths: snprintf costs a few hundred ns a call. */
size_t dq__fmt_i64(char *buf, int64_t v);

/* ------------------------------------------------------------ entries (codec.c) */

/* A ready-list entry, decoded in place (id, error and payload point into
 * the buffer that was decoded):
 *   "1|due|ready|idlen|<id><payload>"                 never delivered
 *   "2|due|ready|attempts|idlen|elen|<id><err><payload>"  delivered before */
typedef struct dq__entry {
    int64_t due_ms, ready_ms;
    int64_t attempts; /* deliveries before this one */
    const char *id;
    size_t id_len;
    const char *err; /* the last failure's text (empty for version 1) */
    size_t err_len;
    const char *payload;
    size_t payload_len;
} dq__entry;

/* Attempts and max attempts as records keep them (9 digits): an entry
 * claims fewer, so its next attempt still fits (lua/lib/00_base.lua ATTEMPTS_MAX). */
#define DQ__ATTEMPTS_MAX 999999999

/* Decodes a ready-list entry. Returns 0, or DQ_EPROTO for anything else
 * (wrong version, bad number, a time past DQ_DUE_MAX_MS, attempts of
 * DQ__ATTEMPTS_MAX or more, an id that breaks the id rule of dq__id_valid,
 * lengths that do not add up). */
int dq__entry_decode(const char *buf, size_t len, dq__entry *out);

/* Builds a set-aside entry "1|reason|idlen|<id><raw>" (the same format the
 * Lua scripts write) into a malloc'ed buffer; *len gets its length.
 * Returns NULL when out of memory. The caller frees. */
char *dq__aside_encode(const char *reason, const char *id, size_t id_len, const char *raw,
                       size_t raw_len, size_t *len);

/* ------------------------------------------------------------ ids (ids.c) */

/* The only file that includes sodium.h. */

/* Initialises libsodium once; returns 0 or -1. Thread-safe. */
int dq__crypto_init(void);
/* Writes a new random id (128 bits, base64url without padding,
 * DQ_ID_GENERATED_LEN chars + NUL) into out. */
void dq__id_generate(char out[DQ_ID_GENERATED_LEN + 1]);
/* A uniformly random integer in [0, upper) (upper > 0), for jitter. */
/* n random bytes from the same fork-safe block as the ids (one getrandom()
 * per 1 KiB, not one per call): nonces. */
void dq__random_bytes(unsigned char *out, size_t n);
uint32_t dq__random_uniform(uint32_t upper);
/* ------------------------------------------------------------ id index (idindex.c) */

/* Buckets of a queue's id index; equals ID_BUCKETS in lua/lib/00_base.lua. */
#define DQ__ID_BUCKETS 32768u
/* SHA-1 of len bytes into out (FIPS 180-4), by OpenSSL. Thread-safe.
 * Returns 0, or -1 when OpenSSL cannot compute it (out of memory, or a
 * configuration whose providers offer no SHA-1); out is then undefined. */
int dq__sha1(const void *data, size_t len, unsigned char out[20]);
/* The id index bucket of a NUL-terminated id, as lua/lib/50_idindex.lua's id_key
 * computes it: the first 16 bits of SHA-1(id) modulo DQ__ID_BUCKETS, so
 * 0..DQ__ID_BUCKETS - 1. Thread-safe. Returns -1 when dq__sha1 fails: never
 * a guessed bucket (an id indexed in the wrong one cannot be found again).
 * The scripts accept only a bucket number (lua/offer.lua, lua/ack.lua), so
 * they cannot compute it instead: the caller fails its call (DQ_ENOMEM,
 * DQ__ID_BUCKET_ERROR) and sends nothing. */
int dq__id_bucket(const char *id);
/* The failure message of a call whose dq__id_bucket failed. */
#define DQ__ID_BUCKET_ERROR                                                                \
    "OpenSSL cannot compute SHA-1 for the id index (out of memory, or its configuration, " \
    "OPENSSL_CONF, loads no provider with SHA-1)"

/* Standard base64 (with padding) of len bytes into a malloc'ed NUL-terminated
 * string; NULL when out of memory. The caller frees. */
char *dq__base64_encode(const void *data, size_t len);

/* ------------------------------------------------------------ send order (send_order.c) */

/* Fills order[0..n-1] with the order dq_offer_many sends items[0..n-1] in:
 * items with a delay by delay, then items with a due time by due time, ties
 * in array order, so a script call's items share their due times' lists
 * and slots; or 0..n-1 when two given ids are equal (their writes must keep
 * the caller's order) or memory is short. Returns 1 when it sorted, else 0.
 * The items were checked (dq_offer_many's check_item). */
int dq__send_order(const dq_item *items, size_t n, size_t *order);

/* ------------------------------------------------------------ text (text.c) */

/* 1 if the len bytes are valid UTF-8 (no overlongs, no surrogates, no code
 * points above U+10FFFF; NUL bytes count as valid). */
int dq__utf8_valid(const void *data, size_t len);

/* 1 if the NUL-terminated name is 1 to max bytes of UTF-8 with no control
 * byte (0x00-0x1f, 0x7f): a take's holder, a consumer's name (shown on
 * terminals and pages as it is). */
int dq__name_valid(const char *name, size_t max);

/* Length (1..4) of the valid UTF-8 sequence that starts data (len bytes
 * available), or 0 if none does (an invalid or truncated one, or len 0). */
size_t dq__utf8_seq(const void *data, size_t len);

/* dq__escape flags. */
#define DQ__ESC_UTF8 (1u << 0) /* keep valid non-ASCII UTF-8 characters     */

/* Writes the first max of the len bytes at data into out (size >= 4 bytes,
 * always NUL-terminated) as one line of printable ASCII: bytes 0x20..0x7e
 * as they are except '\' as "\\", every other byte as "\xHH" (lowercase
 * hex), or with DQ__ESC_UTF8 valid non-ASCII UTF-8 characters as they are.
 * When len > max, or when out is too small for the rest, the text is cut
 * after a whole character or escape and "..." follows. Nothing is cut when
 * max >= len and size >= 4 * len + 1. Returns the length written. */
size_t dq__escape(char *out, size_t size, const void *data, size_t len, size_t max, unsigned flags);

/* A growing byte buffer. Invariant: when data != NULL, data[len] == '\0'
 * (not counted in len). */
typedef struct dq__buf {
    char *data;
    size_t len, cap;
} dq__buf;
/* Append len bytes, or printf-formatted text. Return 0 or DQ_ENOMEM. */
int dq__buf_append(dq__buf *b, const void *data, size_t len);
int dq__buf_printf(dq__buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dq__buf_release(dq__buf *b);

/* ------------------------------------------------------------ sealing (seal.c) */

#define DQ__SEAL_MAGIC_LEN 5 /* "\0dqs1" */
#define DQ__KEY_ID_LEN 8
#define DQ__SEAL_OVERHEAD (DQ__SEAL_MAGIC_LEN + DQ__KEY_ID_LEN + 24 + 16)

typedef struct dq__keyring dq__keyring;
/* Reads a key file (see seal.c); *out is owned by the caller
 * (dq__keyring_free). Returns 0, or DQ_EINVAL / DQ_ENOMEM with why in err
 * (never key material). */
int dq__keyring_load(const char *path, dq__keyring **out, char *err, size_t errlen);
/* The same from len bytes of key lines. */
int dq__keyring_parse(const char *text, size_t len, dq__keyring **out, char *err, size_t errlen);
void dq__keyring_free(dq__keyring *kr);
/* Keys readable from use to done (nested calls count): wrap a batch of
 * seal/open calls, which otherwise each toggle the keys' protection. */
void dq__keyring_use(dq__keyring *kr);
void dq__keyring_done(dq__keyring *kr);
/* The key ids of kr, 16 hex digits each, concatenated, NUL-ended (as many
 * as fit in size). Returns the length. */
size_t dq__keyring_ids_hex(const dq__keyring *kr, char *buf, size_t size);
void dq__key_id_hex(const unsigned char id[DQ__KEY_ID_LEN], char hex[DQ__KEY_ID_LEN * 2 + 1]);
/* A new key line ("dq-key-1 <id> <key>\n") into line. 0, or -1 if size is short. */
int dq__key_line(char *line, size_t size);
/* 1 if payload is an envelope (then *id, unless NULL, gets its key id). */
int dq__sealed(const void *payload, size_t len, unsigned char id[DQ__KEY_ID_LEN]);
/* 1 if payload starts as every envelope does ("\0dqs", a whole one or not):
 * no client without keys may offer it, no client with keys take it as plain. */
int dq__looks_sealed(const void *payload, size_t len);
/* Seals pt for item id of queue with kr's first key: *out (malloc'ed) gets
 * the envelope, DQ__SEAL_OVERHEAD bytes longer. 0 or DQ_ENOMEM. queue may
 * name the queue or any of its shards: either binds the item to the queue
 * (as every opener does). */
int dq__seal(dq__keyring *kr, const char *queue, const char *id, const void *pt, size_t len,
             unsigned char **out, size_t *out_len);
/* Seals pt for recurring schedule name of queue, as dq__seal does for an
 * item, under the schedule binding (seal.c): the envelope its ticks' items
 * carry, which opens as theirs and as no other item's. */
int dq__seal_schedule(dq__keyring *kr, const char *queue, const char *name, const void *pt, size_t len,
                      unsigned char **out, size_t *out_len);
/* Opens an envelope of item id (id_len bytes) of queue: *out (malloc'ed,
 * one byte longer than *out_len) gets the payload. A tick's item
 * (dq__tick_id) opens with its schedule's envelope, or its own id's. 0,
 * DQ_EKEY (kr, which may be NULL, holds no key of that id), DQ_EPROTO (it
 * does not open: tampered, or moved from another item, schedule or queue),
 * DQ_EINVAL (no envelope), DQ_ENOMEM. */
int dq__open(dq__keyring *kr, const char *queue, const char *id, size_t id_len, const void *env,
             size_t len, unsigned char **out, size_t *out_len);
/* What a client holding kr (NULL: none) makes of the payload of item id of
 * queue it took (allow_plain: dq_options.allow_plaintext). Returns 0 (*out
 * as dq__open's), 1 (deliver the payload as it is: a client without keys, or
 * plaintext allowed; *out NULL), or a refusal with its reason in why (the
 * item's set-aside reason; never key material): DQ_EINVAL (no envelope:
 * not sealed, cut short, another format), DQ_EKEY, DQ_EPROTO, DQ_ENOMEM. */
int dq__open_taken(dq__keyring *kr, int allow_plain, const char *queue, const char *id, size_t id_len,
                   const void *payload, size_t len, unsigned char **out, size_t *out_len, char *why,
                   size_t whylen);

/* ------------------------------------------------------------ Redis's error replies (errors.c) */

#define DQ__ERRKIND_MAX 16 /* an error's code word ("NOREPLICAS"), with its NUL */

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
/* The class word of a refusal by the queue's functions ("ERR delayq:input
 * ..."), DQ_REFUSAL_NONE for NULL or any other text. */
enum dq_refusal dq__refusal_class(const char *text);

/* ------------------------------------------------------------ ack arguments (ackargs.c) */

/* The most items one ack script call settles (dq__ack_many_async): a
 * worker takes up to this many at once and acks them together
 * (DQ__TAKE_BATCH_MAX in ops.h is this number). */
#define DQ__ACK_BATCH 256

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
 * bytes): at most DQ__ACK_BATCH per struct. Returns 0, or -1 when the id's
 * bucket cannot be computed (dq__id_bucket), leaving a as it was. */
int dq__ack_args_add(dq__ack_args *a, const char *id, const char *token);
/* Packs every group of two or more items that are blocks 1..k of their
 * lease record in that order (token middles "1", "2", ...: a whole take
 * acked as taken) into the script's packed form: count "*k", then the ids
 * joined by spaces and the buckets joined by spaces, 2 arguments in place
 * of 3k (see lua/ack.lua). Other groups stay as they are. Call after the
 * last add, at most once: no add may follow. */
void dq__ack_args_pack(dq__ack_args *a);

/* ------------------------------------------------------------ cron (cron.c) */

/* Cron expressions and time zones as a pure helper (cron.c): the
 * parser, a zone read from the system's tz database, and the next tick of
 * an expression in a zone. No I/O but reading the zone's file, no global
 * state, no environment (TZ is never set). Unit tests: tests/unit/test_cron.c.
 */

/* A parsed five-field expression: one bit per value allowed. */
typedef struct dq__cron {
    uint64_t minute;   /* bits 0..59 */
    uint32_t hour;     /* bits 0..23 */
    uint32_t mday;     /* bits 1..31 */
    uint32_t month;    /* bits 1..12 */
    uint32_t wday;     /* bits 0..6, 0 = Sunday (7 is read as 0) */
    int mday_star;     /* the day-of-month field started with '*' */
    int wday_star;     /* the day-of-week field started with '*' */
} dq__cron;

/* Parses expr: five fields (minute, hour, day of month, month, day of
 * week) of lists, ranges, steps, and month and day names (jan..dec,
 * sun..sat, any case), or @yearly, @annually, @monthly, @weekly, @daily,
 * @midnight, @hourly. Returns 0, or -1 with a message naming the bad field
 * in err (size bytes). */
int dq__cron_parse(const char *expr, dq__cron *out, char *err, size_t size);

/* A zone's UTC offsets over time. */
typedef struct dq__zone {
    size_t n;          /* transitions                                    */
    int64_t *at;       /* transition instants (UTC seconds), ascending   */
    int32_t *offset;   /* the offset (seconds east of UTC) from at[i] on */
    int32_t initial;   /* the offset before at[0] (or always, if n is 0) */
} dq__zone;

/* Loads zone name ("UTC", "Europe/Berlin": an IANA name) from the TZif
 * file dir/name (dir NULL: /usr/share/zoneinfo). Returns 0, or -1 with the
 * reason in err. Free with dq__zone_free. Offsets after the file's last
 * transition stay the last one's (the system's files run to 2037). */
int dq__zone_load(const char *dir, const char *name, dq__zone *z, char *err, size_t size);
void dq__zone_free(dq__zone *z);

/* The offset in effect at UTC second t. */
int32_t dq__zone_offset(const dq__zone *z, int64_t t);

/* The first tick of c in zone z strictly after after_ms (UTC epoch ms), in
 * ms (a whole minute), or -1 when none comes in the next 8 years.
 * A wall-clock time a spring-forward skips runs at the first instant after
 * the gap (the transition), once; a time that comes twice (fall back) runs
 * at its first occurrence only. */
int64_t dq__cron_next(const dq__cron *c, const dq__zone *z, int64_t after_ms);

/* ------------------------------------------------------------ a scheduler's decisions (sched_core.c) */

/* The decisions of one queue's scheduler, free of any event
 * loop or Redis, so they are unit-tested with made-up times.
 *
 * It answers: for which server due time should the timer be armed, and with
 * how much stagger? Inputs are the announcements heard on the wake channel
 * (each one the queue's earliest pending due time at the moment it was
 * published, or -1 for none; they arrive in publish order) and the results
 * of our own transfer runs (whose replies may overtake announcements
 * published after them, so while a run is in flight every announcement is
 * remembered and the earliest wins).
 *
 * Stagger: each scheduler of a queue fires at due + stagger_ms. A run that
 * moved items halves the stagger; a run fired for a due time that someone
 * else already served adds 1 ms (up to DQ__STAGGER_MAX_MS). One process then
 * keeps stagger 0 and serves every deadline; the others hear its announcement
 * before their own timers fire and skip, so N schedulers cost about what one
 * costs. If the leader dies, the next one takes over within the stagger.
 */

#define DQ__STAGGER_MAX_MS 4
#define DQ__NONE ((int64_t)-1)

typedef struct dq__sched_core {
    int64_t next_due; /* earliest pending due (server ms) known, or -1   */
    int in_flight; /* a transfer run is outstanding                   */
    int64_t fired_for; /* due time the running transfer was fired for, -1 */
    int64_t heard_min; /* earliest due announced during the run, or -1    */
    int stagger_ms;
} dq__sched_core;

void dq__sched_core_init(dq__sched_core *s);

/* An announcement: the queue's earliest pending due is now `due` (-1: none).
 * Returns 1 if the timer should be re-armed (see dq__sched_core_fire_at). */
int dq__sched_core_heard(dq__sched_core *s, int64_t due);

/* A transfer run starts. fired_for: the due time the timer fired for, or -1
 * for catch-up and safety runs. */
void dq__sched_core_begin(dq__sched_core *s, int64_t fired_for);

/* A run finished: it moved `moved` items, and the server reported next_due
 * (-1: none). Returns 1 if another run should start at once (more_due). */
int dq__sched_core_finish(dq__sched_core *s, int64_t moved, int64_t next_due, int more_due);

/* A run failed without an answer: forget it; keep what is known. */
void dq__sched_core_failed(dq__sched_core *s);

/* Server time (ms) at which the timer should fire, or -1 for no timer. */
int64_t dq__sched_core_fire_at(const dq__sched_core *s);

#endif
