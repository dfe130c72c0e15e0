/*
 * valbench.c - `make bench`, phase val: what a change to the scripts costs
 * Redis, as Redis CPU per item of offer, transfer and take, for the scripts
 * before the change (lua/ at an old commit, which bench/run.sh reads from git
 * history into DIR/COMMIT) and the current ones (lua/, as the library
 * embeds them), side by side. bench/run.sh runs it three times (and a
 * fourth with --callgrind, phase ir, below):
 *   --ref DIR/b1baf5e --what "hardening, issue 15"   (every script
 *       checks what it reads from Redis before writing)
 *   --ref DIR/856d7b3 --what "metrics, issue 11"     (the totals and
 *       the lateness histogram the scripts keep in dq:{Q}:n)
 *   --ref DIR/3b2bf9b --what "lease records, issue 10"  (a take's
 *       leases in one record, and tokens that name it)
 *
 *   valbench --port PORT --ref DIR [--what TEXT] [--rounds N] [--scale X]
 *            [--callgrind PID --callgrind-out FILE]
 *   valbench --port PORT --calls [--calls-ref LIBRARY] [--scale X]
 *   valbench --print-library
 *
 * --calls (phase calls of bench/run.sh) times the library's take and ack by
 * the clock instead, call by call: see "calls by the clock" below. With
 * --calls-ref, another library's in the same cycles: what a change to the
 * scripts does by the clock, where the host's stalls make sequential runs
 * useless. LIBRARY is that build's `valbench --print-library` (its Redis
 * function library, as the client loads it).
 *
 * bench/run.sh starts the private redis-server pinned to core 0 and runs
 * this program pinned to core 1. DIR (named for its commit) holds the
 * old common.lua, offer.lua, transfer.lua, take.lua and maybe ack.lua; each old script is
 * common.lua followed by the script, as tools/embed-lua.sh assembled them
 * before each EVAL text kept only the shared code its script uses.
 * The new ones are the bytes of the generated scripts.h. Both sets are
 * loaded with SCRIPT LOAD and called with EVALSHA, with the keys and
 * arguments the library sends (src/ops/offer.c send_chunk, src/ops/scheduler.c
 * transfer, src/ops/take.c run_script), each set on a queue of its own.
 *
 * A round measures the old set, then the new one (A B A B ...); FLUSHALL
 * comes before each set's block. A block measures, in this order:
 *   - offer, 16 items per call, and offer, 1 item per call: generated ids
 *     (flags: delay, fresh id), 16-byte payloads, 1 h delay, 8 calls in
 *     flight, as dq_offer_many sends them;
 *   - offer, 100 items per call (src/offer.c CHUNK_ITEMS) into an empty
 *     queue, 20,000 items (10,000 at least, whatever --scale says): one
 *     delay (1 h), then delays of their own, 1 min to 1 h and 0 to 10 s
 *     (issue 42: the report prints each set's cost per item against one
 *     delay's);
 *   - transfer: 100,000 items due (offered beforehand in calls of 100 with
 *     absolute due times one second ahead, then waited for), moved by calls
 *     with the library's default arguments (1000 items, 2000 us budget), one
 *     at a time as a scheduler sends them;
 *   - take of 64 from that ready list, without a lease and with the
 *     queue's lease (30 s), 8 calls in flight. The DEL of the result key
 *     the library sends after each reply is left out (it is not the script);
 *   - ack of those leases, 64 a call in the order taken, 8 calls in flight,
 *     as dq_worker's batched acks send them (only when DIR has ack.lua).
 * Figures per item: script time (INFO commandstats, cmdstat_evalsha usec
 * after CONFIG RESETSTAT, divided by items) and server CPU (INFO cpu
 * used_cpu_sys + used_cpu_user delta, divided by items: adds reading and
 * answering the calls). The median over rounds is printed, with each round
 * and the other work seen on core 0 (/proc/stat) during the blocks.
 * --rounds: 5 by default (at most 9).
 *
 * With --callgrind PID --callgrind-out FILE, the server is redis-server
 * running under valgrind --tool=callgrind --callgrind-out-file=FILE, and
 * each case is counted in instructions the server ran per item (callgrind's
 * Ir, between a zero and a dump by callgrind_control). No other load on the
 * machine changes that count: the same scripts give it to within about 3%
 * (ids and times differ from run to run), where the timings above can move
 * by half from one run to the next on a shared machine. Instructions are
 * not time (cache misses and branches are not in them), so this tells two
 * versions of the scripts apart; it gives no rates. One round by default,
 * and no timings (valgrind slows the server some 50 times).
 * --scale (or DQ_BENCH_SCALE) multiplies every count; anything but 1 is
 * printed as SCALED.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "callgrind.h"
#include "core0.h"
#include "internal.h"
#include "scripts.h"
#include "util.h"

#define PAYLOAD_LEN 16
#define OFFER_DELAY "3600000" /* ms, as dqbench's offers                    */
#define DEPTH 8               /* calls in flight (offers, takes)            */
#define FILL_PER_CALL 100     /* src/ops/offer.c CHUNK_ITEMS                    */
#define FILL_PER_MS 100       /* due times of the transfer's items          */
#define TAKE_MAX 64 /* items a take asks for (take_count: 64, or --calls' batch) */
#define ROUNDS_MAX 9
#define ARGS_MAX (3 + 7 + 5 * FILL_PER_CALL) /* EVALSHA sha nkeys, head, items */

enum { S_OFFER, S_TRANSFER, S_TAKE, S_ACK, S_N };
static const char *const script_names[S_N] = {"offer", "transfer", "take", "ack"};

/* The cases measured, in block order. The ack case runs only when both
 * sets have ack.lua (the oldest references keep only the other three). */
enum {
    C_OFFER16,
    C_OFFER1,
    C_OFFER100,
    C_OFFER_RND,
    C_OFFER_RND10,
    C_TRANSFER,
    C_TAKE,
    C_TAKE_LEASE,
    C_ACK,
    C_N
};
static const char *const case_names[C_N] = {
    "offer, 16 items per call (8 in flight)", "offer, 1 item per call (8 in flight)",
    "offer 100 a call, one delay 1 h",        "offer 100 a call, delays 1 min..1 h",
    "offer 100 a call, delays 0..10 s",       "transfer (calls of 1000, 2000 us budget)",
    "take 64, no lease (8 in flight)",        "take 64, queue's lease 30 s (8 in flight)",
    "ack 64 of those leases (8 in flight)"};

typedef struct script_set {
    const char *name;  /* "old" or "new"                 */
    const char *queue; /* a queue of its own              */
    char sha[S_N][41];
    dq__keys k;
    int offer_count;   /* offer takes the shard count after the channel */
    int has_ack;       /* the set has ack.lua                             */
    int grouped_ack;   /* its ack takes items in groups (dq__ack_args), not
                          (id, token, bucket) triples                      */
    int packed_ack;    /* and whole takes packed (dq__ack_args_pack)      */
    const char *fn[S_N]; /* --calls: FCALL of the library's functions, not
                            EVALSHA (NULL: EVALSHA)                         */
} script_set;

/* One case measured in one block. */
typedef struct figure {
    double items, calls;
    double script_us; /* commandstats EVALSHA usec per item             */
    double cpu_us;    /* used_cpu_sys + used_cpu_user per item          */
    double other;     /* share of core 0 busy with other work            */
    double ir;        /* server instructions per item (--callgrind)      */
} figure;

static struct {
    int port, rounds;
    double scale;
    const char *ref, *what;
    int cg_pid;         /* --callgrind: the server's pid, or 0      */
    const char *cg_out; /* --callgrind-out: its --callgrind-out-file */
    int calls;          /* --calls: the library's calls by the clock */
    const char *calls_ref; /* --calls-ref: a reference library's text  */
} G = {0, 5, 1.0, NULL, "hardening, issue 15", 0, NULL, 0, NULL};

static redisContext *ctl;
static figure fig[2][ROUNDS_MAX][C_N]; /* [set][round][case] */

/* ------------------------------------------------------------ small helpers */

static void vsay(const char *fmt, va_list ap) {
    fputs("valbench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsay(fmt, ap);
    va_end(ap);
    exit(1);
}

/* An id's index bucket; dies when OpenSSL cannot compute it. */
static int bucket_of(const char *id) {
    int b = dq__id_bucket(id);
    if (b < 0) die("%s", DQ__ID_BUCKET_ERROR);
    return b;
}

static void progress(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsay(fmt, ap);
    va_end(ap);
}

/* A command on the control connection; dies on an error reply. The caller
 * frees the reply. */
static redisReply *rcmd(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(ctl, fmt, ap);
    va_end(ap);
    if (!r) die("redis: %s", ctl->errstr);
    if (r->type == REDIS_REPLY_ERROR) die("redis: %s: %s", fmt, r->str);
    return r;
}

static void rdo(const char *cmd) { freeReplyObject(rcmd(cmd)); }

/* A field of INFO section as a number; 0 if absent. */
static double info_num(const char *section, const char *field) {
    redisReply *r = rcmd("INFO %s", section);
    double v = 0;
    size_t fl = strlen(field);
    for (const char *p = r->str; p && *p;) {
        if (strncmp(p, field, fl) == 0 && p[fl] == ':') {
            v = atof(p + fl + 1);
            break;
        }
        p = strstr(p, "\r\n");
        if (p) p += 2;
    }
    freeReplyObject(r);
    return v;
}

/* calls and usec of EVALSHA since the last CONFIG RESETSTAT. */
static void evalsha_stats(double *calls, double *usec) {
    redisReply *r = rcmd("INFO commandstats");
    const char *p = strstr(r->str, "cmdstat_evalsha:");
    *calls = *usec = 0;
    if (p) {
        const char *c = strstr(p, "calls="), *u = strstr(p, "usec=");
        if (c) *calls = atof(c + 6);
        if (u) *usec = atof(u + 5);
    }
    freeReplyObject(r);
}

static double server_cpu_s(void) {
    return info_num("cpu", "used_cpu_sys") + info_num("cpu", "used_cpu_user");
}

static int64_t server_ms(void) {
    redisReply *r = rcmd("TIME");
    int64_t ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

/* ------------------------------------------------------------ measuring */

typedef struct meter {
    double cpu_s, busy_s, total_s;
} meter;

/* Runs callgrind_control OPTION on the server (--callgrind). */
static void callgrind_control(const char *option) {
    if (cg_control(G.cg_pid, option) != 0) die("callgrind_control %s %d failed", option, G.cg_pid);
}

/* The instructions the server ran since the last zero (callgrind.h). */
static double callgrind_instructions(void) {
    char err[4200];
    double ir = cg_instructions(G.cg_pid, G.cg_out, err, sizeof err);
    if (ir < 0) die("%s", err);
    return ir;
}

/* Zeroing the count comes last, and the dump first in meter_stop, so the
 * count holds the case's calls and none of the meter's own commands. */
static void meter_start(meter *m) {
    rdo("CONFIG RESETSTAT");
    m->cpu_s = server_cpu_s();
    core0_times(&m->busy_s, &m->total_s);
    if (G.cg_pid) callgrind_control("--zero");
}

/* The figure for items handled since meter_start. */
static figure meter_stop(const meter *m, double items) {
    figure f = {items, 0, 0, 0, 0, 0};
    if (G.cg_pid) f.ir = callgrind_instructions() / items;
    double usec, busy, total;
    evalsha_stats(&f.calls, &usec);
    double cpu = server_cpu_s() - m->cpu_s;
    core0_times(&busy, &total);
    f.script_us = usec / items;
    f.cpu_us = cpu * 1e6 / items;
    total -= m->total_s;
    double other = (busy - m->busy_s) - cpu;
    f.other = total > 0 && other > 0 ? other / total : 0;
    return f;
}

/* ------------------------------------------------------------ calls */

/* One call's command: argc arguments in argv/lens (valid until the next
 * build). */
typedef struct call {
    int argc;
    const char *argv[ARGS_MAX];
    size_t lens[ARGS_MAX];
} call;

static void arg(call *c, const char *s, size_t len) {
    if (c->argc == ARGS_MAX) die("more than %d arguments", ARGS_MAX);
    c->argv[c->argc] = s;
    c->lens[c->argc++] = len;
}

static void args(call *c, const char *s) { arg(c, s, strlen(s)); }

typedef void build_fn(void *ctx, long i, call *c);
typedef void reply_fn(void *ctx, long i, const redisReply *r);

/* Sends n calls, depth at a time in flight; reply runs for each reply in
 * order. */
static void pipeline(long n, int depth, build_fn *build, reply_fn *reply, void *ctx) {
    static call c;
    long sent = 0, got = 0;
    while (got < n) {
        while (sent < n && sent - got < depth) {
            c.argc = 0;
            build(ctx, sent, &c);
            if (redisAppendCommandArgv(ctl, c.argc, c.argv, c.lens) != REDIS_OK)
                die("redis: %s", ctl->errstr);
            sent++;
        }
        void *r;
        if (redisGetReply(ctl, &r) != REDIS_OK) die("redis: %s", ctl->errstr);
        reply(ctx, got, r);
        freeReplyObject(r);
        got++;
    }
}

static void head(call *c, const script_set *s, int script, const char *nkeys) {
    args(c, s->fn[script] ? "FCALL" : "EVALSHA");
    args(c, s->fn[script] ? s->fn[script] : s->sha[script]);
    args(c, nkeys);
}

/* ------------------------------------------------------------ offer */

typedef struct offer_ctx {
    const script_set *s;
    int per_call;
    const char *flags;  /* "4": delay, fresh id; "5": absolute due, fresh id */
    int64_t base;       /* absolute due times: base + item / FILL_PER_MS     */
    int64_t lo, span;   /* span > 0: random delays lo .. lo + span - 1 ms    */
    uint64_t rng;       /* their generator's state (xorshift64)             */
    long item;          /* items built so far                               */
    char ids[FILL_PER_CALL][DQ_ID_GENERATED_LEN + 1];
    char ms[FILL_PER_CALL][24], bucket[FILL_PER_CALL][8];
    char payload[FILL_PER_CALL][PAYLOAD_LEN + 1];
} offer_ctx;

/* The next number of a xorshift64 generator (state never 0): the random
 * delays are the same from run to run and set to set. */
static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The arguments of src/ops/offer.c send_chunk: 4 keys, prefix, channel, the
 * shard count (scripts since issue 13), then id, payload, ms, flags digit
 * and id index bucket per item. */
static void offer_build(void *ctx, long i, call *c) {
    offer_ctx *o = ctx;
    const dq__keys *k = &o->s->k;
    (void)i;
    head(c, o->s, S_OFFER, "4");
    args(c, k->z), args(c, k->ready), args(c, k->counters), args(c, k->signal);
    args(c, k->prefix), args(c, k->chan);
    if (o->s->offer_count) args(c, "1");
    for (int j = 0; j < o->per_call; j++, o->item++) {
        dq__id_generate(o->ids[j]);
        snprintf(o->payload[j], sizeof o->payload[j], "%016lx", (unsigned long)o->item);
        arg(c, o->ids[j], DQ_ID_GENERATED_LEN);
        arg(c, o->payload[j], PAYLOAD_LEN);
        if (o->base) arg(c, o->ms[j], dq__fmt_i64(o->ms[j], o->base + o->item / FILL_PER_MS));
        else if (o->span)
            arg(c, o->ms[j],
                dq__fmt_i64(o->ms[j], o->lo + (int64_t)(xorshift(&o->rng) % (uint64_t)o->span)));
        else args(c, OFFER_DELAY);
        args(c, o->flags);
        arg(c, o->bucket[j], dq__fmt_i64(o->bucket[j], bucket_of(o->ids[j])));
    }
}

static void offer_reply(void *ctx, long i, const redisReply *r) {
    const offer_ctx *o = ctx;
    if (r->type == REDIS_REPLY_ERROR) die("%s offer call %ld: %s", o->s->name, i, r->str);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 1 + 3 * (size_t)o->per_call)
        die("%s offer call %ld: unexpected reply", o->s->name, i);
    for (int j = 0; j < o->per_call; j++)
        if (r->element[1 + 3 * j]->integer != 1)
            die("%s offer call %ld: item %d not added", o->s->name, i, j);
}

/* calls offer calls of per_call items with random delays from lo to lo +
 * span - 1 ms (span 0: base's rule, below); seeded alike for every set. */
static void offer_spread(const script_set *s, long calls, int per_call, int64_t lo, int64_t span) {
    static offer_ctx o;
    o.s = s, o.per_call = per_call, o.flags = "4", o.base = 0, o.item = 0;
    o.lo = lo, o.span = span, o.rng = 0x9e3779b97f4a7c15u;
    pipeline(calls, DEPTH, offer_build, offer_reply, &o);
}

/* calls offer calls of per_call items; base 0: 1 h delays, else absolute
 * due times from base. */
static void offer_calls(const script_set *s, long calls, int per_call, int64_t base) {
    static offer_ctx o;
    o.s = s, o.per_call = per_call, o.flags = base ? "5" : "4", o.base = base, o.item = 0, o.span = 0;
    pipeline(calls, DEPTH, offer_build, offer_reply, &o);
}

static long long pending_of(const script_set *s) {
    redisReply *r = rcmd("HGET %s pending", s->k.counters);
    long long v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    return v;
}

/* Offers n items (a multiple of FILL_PER_CALL) due from one second from now,
 * FILL_PER_MS a millisecond, and waits until the last is due. Only the
 * first must be in the future when offered: later ones then go into slots
 * too, behind it. */
static void offer_due(const script_set *s, long n) {
    int64_t base = server_ms() + 1000;
    offer_calls(s, n / FILL_PER_CALL, FILL_PER_CALL, base);
    int64_t last = base + (n - 1) / FILL_PER_MS;
    while (server_ms() <= last + 1) usleep(20000);
}

/* ------------------------------------------------------------ transfer */

typedef struct transfer_ctx {
    const script_set *s;
    long long moved, more;
} transfer_ctx;

/* The arguments of src/ops/scheduler.c transfer() with the default options,
 * for a run fired by a due time (no wake-token top-up). */
static void transfer_build(void *ctx, long i, call *c) {
    const transfer_ctx *t = ctx;
    const dq__keys *k = &t->s->k;
    (void)i;
    head(c, t->s, S_TRANSFER, "7");
    args(c, k->z), args(c, k->ready), args(c, k->aside), args(c, k->counters);
    args(c, k->dead), args(c, k->dead_times), args(c, k->signal);
    args(c, k->prefix), args(c, k->chan), args(c, "1000"), args(c, "2000"), args(c, "0");
    args(c, "1"); /* the shard count (since issue 13; older scripts ignore it) */
}

/* A take's or transfer's reply without the queue's epoch the current
 * scripts end it with (an integer after the entries; older ones have none). */
static size_t without_epoch(const redisReply *r, size_t bare) {
    return r->elements == bare + 1 && r->element[bare]->type == REDIS_REPLY_INTEGER ? bare : r->elements;
}

static void transfer_reply(void *ctx, long i, const redisReply *r) {
    transfer_ctx *t = ctx;
    if (r->type == REDIS_REPLY_ERROR) die("%s transfer call %ld: %s", t->s->name, i, r->str);
    if (r->type != REDIS_REPLY_ARRAY || without_epoch(r, 7) != 7)
        die("%s transfer call %ld: unexpected reply", t->s->name, i);
    if (r->element[1]->integer != 0) die("%s transfer call %ld: items set aside", t->s->name, i);
    t->moved += r->element[0]->integer;
    t->more = r->element[4]->integer;
}

/* Runs transfers one at a time until nothing due is left; returns the
 * items moved. */
static long long transfer_all(const script_set *s) {
    transfer_ctx t = {s, 0, 1};
    for (int n = 0; t.more; n++) {
        if (n == 100000) die("%s transfer: still more after %d calls", s->name, n);
        pipeline(1, 1, transfer_build, transfer_reply, &t);
    }
    return t.moved;
}

/* ------------------------------------------------------------ take */

typedef struct take_ctx {
    const script_set *s;
    const char *lease; /* "0" or "-1" (the queue's)                          */
    char request[DQ_ID_GENERATED_LEN + 1];
    char tprefix[DQ_ID_GENERATED_LEN + 2];
    char result_key[DQ__KEY_MAX + DQ_ID_GENERATED_LEN + 4];
    char (*prefixes)[DQ_ID_GENERATED_LEN + 2]; /* call i's token prefix      */
} take_ctx;

/* The leases the leased takes handed out, for the ack case: id, token (as
 * src/ops/take.c makes it: "<prefix><i>", then ".<score>" when the reply's
 * first element is a lease record's score and not the older scripts' 1),
 * and the id's index bucket. */
typedef struct leased {
    char id[DQ_ID_MAX + 1];
    char token[80];
    char bucket[8];
} leased;
static leased *leases;
static long n_leases;
static int take_count = TAKE_MAX; /* items each take asks for, each ack names */
static char take_count_s[8] = "64";
static int ack_case; /* both sets have ack.lua */

static void note_leases(const struct take_ctx *t, long i, const redisReply *r);

/* The arguments of src/ops/take.c run_script: a new request per call, not
 * woken by a token, max attempts the queue's. */
static void take_build(void *ctx, long i, call *c) {
    take_ctx *t = ctx;
    const dq__keys *k = &t->s->k;
    char suffix[DQ_ID_GENERATED_LEN + 3];
    dq__id_generate(t->request);
    snprintf(suffix, sizeof suffix, "t:%s", t->request);
    dq__key(t->result_key, sizeof t->result_key, t->s->queue, suffix);
    snprintf(t->tprefix, sizeof t->tprefix, "%s.", t->request);
    if (t->prefixes) memcpy(t->prefixes[i], t->tprefix, sizeof t->tprefix);
    head(c, t->s, S_TAKE, "6");
    args(c, k->z), args(c, k->ready), args(c, k->aside), args(c, k->counters), args(c, k->signal);
    args(c, k->config), args(c, k->prefix), args(c, k->chan);
    args(c, take_count_s), args(c, t->lease), args(c, t->tprefix), args(c, "-1"), args(c, "0");
    args(c, t->result_key);
}

static void take_reply(void *ctx, long i, const redisReply *r) {
    const take_ctx *t = ctx;
    if (r->type == REDIS_REPLY_ERROR) die("%s take call %ld: %s", t->s->name, i, r->str);
    size_t n = r->type == REDIS_REPLY_ARRAY ? without_epoch(r, 1 + (size_t)take_count) : 0;
    if (n != 1 + (size_t)take_count)
        die("%s take call %ld: %zu elements, expected %d (ready list short?)", t->s->name, i, n,
            1 + take_count);
    if ((r->element[0]->integer != 0) != (strcmp(t->lease, "0") != 0))
        die("%s take call %ld: lease flag %lld", t->s->name, i, r->element[0]->integer);
    for (size_t j = 1; j < n; j++)
        if (r->element[j]->type != REDIS_REPLY_STRING || r->element[j]->len == 0)
            die("%s take call %ld: entry %zu set aside", t->s->name, i, j);
    if (t->prefixes) note_leases(t, i, r);
}

/* Keeps the leases of leased take call i (reply r) for the ack case. */
static void note_leases(const struct take_ctx *t, long i, const redisReply *r) {
    long long flag = r->element[0]->integer;
    for (size_t j = 1; j < without_epoch(r, 1 + (size_t)take_count); j++) {
        dq__entry e;
        if (dq__entry_decode(r->element[j]->str, r->element[j]->len, &e) != 0 || e.id_len > DQ_ID_MAX)
            die("%s take call %ld: entry %zu does not decode", t->s->name, i, j);
        leased *l = &leases[n_leases++];
        memcpy(l->id, e.id, e.id_len);
        l->id[e.id_len] = '\0';
        if (flag == 1) snprintf(l->token, sizeof l->token, "%s%zu", t->prefixes[i], j);
        else snprintf(l->token, sizeof l->token, "%s%zu.%lld", t->prefixes[i], j, flag);
        dq__fmt_i64(l->bucket, bucket_of(l->id));
    }
}

/* Leased takes (lease "-1") keep what they hand out in leases. */
static void take_calls(const script_set *s, long calls, const char *lease) {
    static take_ctx t;
    t.s = s, t.lease = lease, t.prefixes = NULL;
    if (strcmp(lease, "0") != 0) {
        t.prefixes = calloc((size_t)calls, sizeof *t.prefixes);
        free(leases);
        leases = calloc((size_t)calls * take_count, sizeof *leases);
        if (!t.prefixes || !leases) die("out of memory");
        n_leases = 0;
    }
    pipeline(calls, DEPTH, take_build, take_reply, &t);
    free(t.prefixes);
    t.prefixes = NULL;
}

/* ------------------------------------------------------------ ack */

/* The arguments of src/ops/reliable.c ack_send_shard: take_count leases a call,
 * in the order taken (grouped by dq__ack_args, or as the triples the older
 * scripts take). */
static void ack_build(void *ctx, long i, call *c) {
    const script_set *s = ctx;
    static dq__ack_args a;
    head(c, s, S_ACK, "2");
    if (s->grouped_ack) {
        dq__ack_args_init(&a, s->k.z, s->k.counters, s->k.prefix, "1");
        for (long j = i * take_count; j < (i + 1) * take_count; j++)
            if (dq__ack_args_add(&a, leases[j].id, leases[j].token) != 0) die("%s", DQ__ID_BUCKET_ERROR);
        if (s->packed_ack) dq__ack_args_pack(&a);
        for (size_t j = 0; j < a.n; j++) arg(c, a.argv[j], a.lens[j]);
        return;
    }
    args(c, s->k.z), args(c, s->k.counters), args(c, s->k.prefix), args(c, "1");
    for (long j = i * take_count; j < (i + 1) * take_count; j++)
        args(c, leases[j].id), args(c, leases[j].token), args(c, leases[j].bucket);
}

static void ack_reply(void *ctx, long i, const redisReply *r) {
    const script_set *s = ctx;
    if (r->type == REDIS_REPLY_ERROR) die("%s ack call %ld: %s", s->name, i, r->str);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)take_count)
        die("%s ack call %ld: unexpected reply", s->name, i);
    for (size_t j = 0; j < r->elements; j++)
        if (r->element[j]->type != REDIS_REPLY_INTEGER || r->element[j]->integer != 1)
            die("%s ack call %ld: lease %zu not acked", s->name, i, j);
}

/* ------------------------------------------------------------ a block */

/* Measures every case for set s into out[C_N]; counts scaled by scale. */
static void block(const script_set *s, double scale, figure *out) {
    long offer16 = (long)(2000 * scale), offer1 = (long)(10000 * scale), offer100 = (long)(200 * scale);
    /* At least 10,000 items (some 200 slots): most of a call's random
     * delays then land in slots of their own, as in a big queue. */
    if (offer100 < 100) offer100 = 100;
    long due_n = (long)(100000 * scale) / FILL_PER_CALL * FILL_PER_CALL;
    long takes = (long)(500 * scale);
    if (offer16 < 1 || offer1 < 1 || offer100 < 1 || due_n < FILL_PER_CALL || takes < 1)
        die("--scale too small");
    meter m;

    rdo("FLUSHALL");
    meter_start(&m);
    offer_calls(s, offer16, 16, 0);
    out[C_OFFER16] = meter_stop(&m, (double)offer16 * 16);
    meter_start(&m);
    offer_calls(s, offer1, 1, 0);
    out[C_OFFER1] = meter_stop(&m, (double)offer1);
    if (pending_of(s) != offer16 * 16 + offer1)
        die("%s: pending count is not what was offered", s->name);

    /* Issue 42: the same number of items into an empty queue with one
     * delay, then with delays of their own (each item in a time slot of
     * its own, most of the time, once the queue holds thousands of slots). */
    static const int64_t spread[3][2] = {{0, 0}, {60000, 3540001}, {0, 10001}};
    for (int k = 0; k < 3; k++) {
        rdo("FLUSHALL");
        meter_start(&m);
        if (k == 0) offer_calls(s, offer100, FILL_PER_CALL, 0);
        else offer_spread(s, offer100, FILL_PER_CALL, spread[k][0], spread[k][1]);
        out[C_OFFER100 + k] = meter_stop(&m, (double)offer100 * FILL_PER_CALL);
        if (pending_of(s) != offer100 * FILL_PER_CALL)
            die("%s: pending count is not what was offered", s->name);
    }

    /* Items due one second from now and over the next due_n / FILL_PER_MS
     * ms (offer_due). */
    rdo("FLUSHALL");
    offer_due(s, due_n);
    if (pending_of(s) != due_n) die("%s: %lld pending, expected %ld", s->name, pending_of(s), due_n);
    meter_start(&m);
    long long moved = transfer_all(s);
    out[C_TRANSFER] = meter_stop(&m, (double)moved);
    if (moved != due_n) die("%s transfer: moved %lld, expected %ld", s->name, moved, due_n);

    if (2 * takes * take_count > due_n) die("%s: not enough ready entries for the takes", s->name);
    meter_start(&m);
    take_calls(s, takes, "0");
    out[C_TAKE] = meter_stop(&m, (double)takes * take_count);
    meter_start(&m);
    take_calls(s, takes, "-1");
    out[C_TAKE_LEASE] = meter_stop(&m, (double)takes * take_count);
    if (!ack_case) return;
    if (n_leases != takes * take_count) die("%s: %ld leases noted", s->name, n_leases);
    meter_start(&m);
    pipeline(takes, DEPTH, ack_build, ack_reply, (void *)s);
    out[C_ACK] = meter_stop(&m, (double)n_leases);
}

/* ------------------------------------------------------------ calls by the clock */

/* --calls: what one call of take and ack costs by the clock, for the
 * library as src/ops/script.c runs it (FUNCTION LOAD once, then FCALL). A ready
 * list, then cycles: each runs a plain take, a leased take and the ack of
 * that take's leases (packed, as dq_worker sends it), of 1, then 32, then
 * 64 items, one call at a time. Redis times each call itself: the usec INFO
 * commandstats adds to FCALL's, the call's run without reading or
 * answering it (not SLOWLOG, which with a threshold of 0 logs every command
 * a script runs as well, at a cost that grows with their number). Every
 * kind and size alternates call by call, so a stall of the host (this one
 * takes the CPU away for seconds: BENCHMARKS.md) falls on all of them
 * alike: their ratios hold where sequential timings move by half. Each
 * cycle also runs two leased takes of 32 and one ack of the 64 (acks that
 * would wait for the next take). Printed: the medians, and the commands a
 * script runs inside one call (INFO commandstats, in a short pass of each
 * kind on its own). */

enum { K_PLAIN, K_LEASED, K_ACK, K_N };
#define CALL_BATCHES 3
static const int call_batches[CALL_BATCHES] = {1, 32, 64};

typedef struct call_times {
    double median[K_N];   /* us per call                               */
    double commands[K_N]; /* commands the script ran, per call          */
    double pair;          /* batch 32 only: two leased takes of 32 and one
                             ack of the 64 (acks that wait for the next
                             take), median us of the three together        */
} call_times;

static int cmp_double(const void *a, const void *b);

/* The median of n values (sorts them). */
static double median_of(double *v, long n) {
    if (n == 0) return 0;
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Commands run since the last CONFIG RESETSTAT other than the calls
 * themselves and this program's own (INFO, CONFIG, SLOWLOG, FUNCTION). */
static double inner_commands(void) {
    redisReply *r = rcmd("INFO commandstats");
    double n = 0;
    for (const char *p = strstr(r->str, "cmdstat_"); p; p = strstr(p + 1, "cmdstat_")) {
        const char *name = p + 8, *c = strstr(p, "calls=");
        if (!c) break;
        if (strncmp(name, "fcall", 5) && strncmp(name, "info", 4) && strncmp(name, "config", 6) &&
            strncmp(name, "slowlog", 7) && strncmp(name, "function", 8))
            n += atof(c + 6);
    }
    freeReplyObject(r);
    return n;
}

/* One call of kind k with batch items (the ack: of the leases noted since
 * the last leased take that did not append, batch of them). append: a
 * leased take's leases are noted after those noted before. */
static void one_call_ex(const script_set *s, take_ctx *t, int k, int batch, int append) {
    take_count = batch;
    snprintf(take_count_s, sizeof take_count_s, "%d", batch);
    if (k == K_ACK) {
        pipeline(1, 1, ack_build, ack_reply, (void *)s);
        return;
    }
    t->s = s;
    t->lease = k == K_LEASED ? "-1" : "0";
    t->prefixes = NULL;
    if (k == K_LEASED) {
        static char prefix[1][DQ_ID_GENERATED_LEN + 2];
        t->prefixes = prefix;
        if (!append) n_leases = 0;
    }
    pipeline(1, 1, take_build, take_reply, t);
}

static void one_call(const script_set *s, take_ctx *t, int k, int batch) {
    one_call_ex(s, t, k, batch, 0);
}

/* The usec INFO commandstats gives FCALL so far (see time_calls). */
static double fcall_usec(void) {
    redisReply *r = rcmd("INFO commandstats");
    const char *p = strstr(r->str, "cmdstat_fcall:"), *u = p ? strstr(p, "usec=") : NULL;
    double v = u ? atof(u + 5) : 0;
    freeReplyObject(r);
    return v;
}

/* A ready list of n items for s (offered due a second ahead, then moved). */
static void fill_ready(const script_set *s, long n) {
    n = (n + FILL_PER_CALL - 1) / FILL_PER_CALL * FILL_PER_CALL;
    offer_due(s, n);
    if (transfer_all(s) != n) die("calls: the transfer did not move all %ld items", n);
}

#define CALL_SETS 2 /* the library, and a reference (--calls-ref) */

/* The commands the scripts of s run inside one call, per kind and batch
 * (each kind on its own, PASS calls: a leased take, then its ack, counted
 * apart). */
static void count_commands(const script_set *s, call_times *ct) {
    enum { PASS = 20 };
    static take_ctx t;
    for (int b = 0; b < CALL_BATCHES; b++) {
        double cmds[K_N] = {0, 0, 0};
        for (int i = 0; i < PASS; i++)
            for (int k = 0; k < K_N; k++) {
                rdo("CONFIG RESETSTAT");
                one_call(s, &t, k, call_batches[b]);
                cmds[k] += inner_commands();
            }
        for (int k = 0; k < K_N; k++) ct[b].commands[k] = cmds[k] / PASS;
    }
}

/* Times cycles cycles of each of the nsets sets into ct[set][batch]: each
 * cycle runs every set's three kinds at each batch size in turn, then its
 * pair (see call_times), so that every figure, of every set and size,
 * meets the same stalls. */
static void time_calls(const script_set *sets, int nsets, long cycles, call_times ct[][CALL_BATCHES]) {
    long per_cycle = 64; /* the pair */
    for (int b = 0; b < CALL_BATCHES; b++) per_cycle += 2L * call_batches[b];
    free(leases);
    leases = calloc(TAKE_MAX, sizeof *leases);
    size_t per_set = (size_t)(cycles * CALL_BATCHES * K_N);
    double *times = calloc(per_set * (size_t)nsets, sizeof *times);
    if (!leases || !times) die("out of memory");
    rdo("FLUSHALL");
    for (int i = 0; i < nsets; i++) {
        fill_ready(&sets[i], (cycles + 20) * per_cycle);
        count_commands(&sets[i], ct[i]);
    }
    static take_ctx t;
    double *pairs = calloc((size_t)(cycles * nsets), sizeof *pairs);
    if (!pairs) die("out of memory");
    /* times[set * per_set + (b * K_N + k) * cycles + c]: cycle c's call of
     * kind k, batch b; pairs[set * cycles + c]: its pair (see call_times). */
    double before = fcall_usec();
    for (long c = 0; c < cycles; c++)
        for (int i = 0; i < nsets; i++) {
            for (int b = 0; b < CALL_BATCHES; b++)
                for (int k = 0; k < K_N; k++) {
                    one_call(&sets[i], &t, k, call_batches[b]);
                    double after = fcall_usec();
                    times[(size_t)i * per_set + (size_t)((b * K_N + k) * cycles + c)] = after - before;
                    before = after;
                }
            one_call_ex(&sets[i], &t, K_LEASED, 32, 0);
            one_call_ex(&sets[i], &t, K_LEASED, 32, 1);
            one_call_ex(&sets[i], &t, K_ACK, 64, 0);
            double after = fcall_usec();
            pairs[(size_t)i * (size_t)cycles + (size_t)c] = after - before;
            before = after;
        }
    for (int i = 0; i < nsets; i++) {
        for (int b = 0; b < CALL_BATCHES; b++)
            for (int k = 0; k < K_N; k++)
                ct[i][b].median[k] =
                    median_of(times + (size_t)i * per_set + (size_t)((b * K_N + k) * cycles), cycles);
        ct[i][1].pair = median_of(pairs + (size_t)i * (size_t)cycles, cycles);
    }
    free(pairs);
    free(times);
    take_count = TAKE_MAX;
    snprintf(take_count_s, sizeof take_count_s, "%d", TAKE_MAX);
}

/* The worker's script time per item at 32 in flight (a leased take and its
 * ack of 32) and dq_take_many's at 64 a call: the shapes of figures 5d, 5e. */
static double worker32(const call_times *ct) {
    return (ct[1].median[K_LEASED] + ct[1].median[K_ACK]) / 32;
}
static double plain64(const call_times *ct) { return ct[2].median[K_PLAIN] / 64; }

static void report_calls(const script_set *s, const call_times *ct, long cycles) {
    const char *sc = G.scale != 1.0 ? " [SCALED]" : "";
    printf("\n== Script calls by the clock%s: take and ack, interleaved call by call (%s)\n", sc,
           s->name);
    printf(
        "   The library as loaded (FCALL). %ld cycles; each runs a plain take, a leased take and its\n"
        "   ack (packed, as dq_worker sends it) of 1, then 32, then 64 items, one call at a time.\n"
        "   Redis's own time for each (INFO commandstats, FCALL's usec: the run, not reading or\n"
        "   answering the call). Medians, us per call; 'commands': those the script ran inside a call.\n\n",
        cycles);
    printf("   %-6s %10s %10s %10s %11s %13s %11s %8s\n", "batch", "plain", "leased", "ack", "commands",
           "plain/item", "worker/item", "ratio");
    for (int b = 0; b < CALL_BATCHES; b++) {
        const call_times *c = &ct[b];
        double plain = c->median[K_PLAIN] / call_batches[b];
        double worker = (c->median[K_LEASED] + c->median[K_ACK]) / call_batches[b];
        char cmds[32];
        snprintf(cmds, sizeof cmds, "%.0f/%.0f/%.0f", c->commands[K_PLAIN], c->commands[K_LEASED],
                 c->commands[K_ACK]);
        printf("   %-6d %10.1f %10.1f %10.1f %11s %13.2f %11.2f %8.2f\n", call_batches[b],
               c->median[K_PLAIN], c->median[K_LEASED], c->median[K_ACK], cmds, plain, worker,
               plain / worker);
    }
    /* Each kind's cost as fixed + per item, by the line through 32 and 64. */
    double fixed[K_N], per_item[K_N];
    for (int k = 0; k < K_N; k++) {
        per_item[k] = (ct[2].median[k] - ct[1].median[k]) / (call_batches[2] - call_batches[1]);
        fixed[k] = ct[1].median[k] - per_item[k] * call_batches[1];
    }
    printf(
        "\n   By the line through 32 and 64: plain take %.0f us + %.2f us per item, leased take %.0f us\n"
        "   + %.2f us per item, ack %.0f us + %.2f us per item. A worker's round of 32 (a leased take\n"
        "   and its ack) spends %.0f%% of its script time on the fixed parts; a plain take of 64, %.0f%%.\n",
        fixed[K_PLAIN], per_item[K_PLAIN], fixed[K_LEASED], per_item[K_LEASED], fixed[K_ACK],
        per_item[K_ACK],
        100 * (fixed[K_LEASED] + fixed[K_ACK]) / (ct[1].median[K_LEASED] + ct[1].median[K_ACK]),
        100 * fixed[K_PLAIN] / ct[2].median[K_PLAIN]);
    printf(
        "\n   commands: plain take / leased take / ack, per call. ratio: plain take's us per item over\n"
        "   the worker's (a leased take and its ack). A call of one item is nearly all fixed cost.\n"
        "   Figures 5d and 5e's shapes (dq_worker at 32 in flight, dq_take_many at 64 a call):\n"
        "   %.2f us against %.2f us per item of script time, ratio %.2f.\n",
        worker32(ct), plain64(ct), plain64(ct) / worker32(ct));
    printf(
        "   Were a worker's acks to wait for its next take (two leased takes of 32, then one ack of\n"
        "   the 64; dq_worker does not): %.2f us per item, %.2f of the above; ratio to dq_take_many's\n"
        "   %.2f.\n",
        ct[1].pair / 64, ct[1].pair / 64 / worker32(ct), plain64(ct) / (ct[1].pair / 64));
    fflush(stdout);
}

static char *read_all(const char *path, size_t *len);

/* The library text in path (as FUNCTION LOAD takes it: its first line
 * "#!lua name=NAME"), loaded, as set s calling NAME_take and so on. */
static void load_ref_library(script_set *s, const char *path) {
    size_t len;
    char *text = read_all(path, &len);
    static char names[S_N][160];
    static const char *const suffix[S_N] = {"offer", "transfer", "take", "ack"};
    char lib[100];
    if (sscanf(text, "#!lua name=%99[A-Za-z0-9_]", lib) != 1) die("%s: no '#!lua name=' line", path);
    freeReplyObject(rcmd("FUNCTION LOAD REPLACE %b", text, len));
    free(text);
    for (int i = 0; i < S_N; i++) {
        snprintf(names[i], sizeof names[i], "%s_%s", lib, suffix[i]);
        s->fn[i] = names[i];
    }
}

/* --calls: the library's take and ack by the clock (see above); with
 * --calls-ref FILE, a reference library's too, in the same cycles. */
static void calls_phase(void) {
    static script_set sets[CALL_SETS] = {{.name = "this build's library", .queue = "valcalls"},
                                         {.name = "reference library", .queue = "valcallsref"}};
    size_t lib_len;
    char *lib = dq__library_text(&lib_len);
    if (!lib) die("out of memory");
    freeReplyObject(rcmd("FUNCTION LOAD REPLACE %b", lib, lib_len));
    free(lib);
    script_set *s = &sets[0];
    s->fn[S_OFFER] = DQ_LUA_offer_FN, s->fn[S_TRANSFER] = DQ_LUA_transfer_FN;
    s->fn[S_TAKE] = DQ_LUA_take_FN, s->fn[S_ACK] = DQ_LUA_ack_FN;
    int nsets = G.calls_ref ? 2 : 1;
    if (G.calls_ref) load_ref_library(&sets[1], G.calls_ref);
    for (int i = 0; i < nsets; i++) {
        sets[i].offer_count = sets[i].has_ack = sets[i].grouped_ack = sets[i].packed_ack = 1;
        dq__keys_init(&sets[i].k, sets[i].queue);
    }
    static call_times ct[CALL_SETS][CALL_BATCHES];
    /* About 10 s of calls a set at full scale, on some 200,000 items. */
    long cycles = (long)(1000 * G.scale);
    if (cycles < 20) cycles = 20;
    progress("calls: %ld cycles of take and ack, batches of 1, 32 and 64, %d librar%s", cycles, nsets,
             nsets > 1 ? "ies" : "y");
    time_calls(sets, nsets, cycles, ct);
    rdo("FLUSHALL");
    for (int i = 0; i < nsets; i++) report_calls(&sets[i], ct[i], cycles);
    if (nsets > 1)
        printf(
            "\n   This build against the reference (%s), in the same cycles: the worker's script time per\n"
            "   item at 32 in flight %.2f us against %.2f (%.2f), dq_take_many's at 64 %.2f against %.2f\n"
            "   (%.2f); figures 5d/5e's ratio %.2f against %.2f.\n",
            G.calls_ref, worker32(ct[0]), worker32(ct[1]), worker32(ct[0]) / worker32(ct[1]),
            plain64(ct[0]), plain64(ct[1]), plain64(ct[0]) / plain64(ct[1]),
            plain64(ct[0]) / worker32(ct[0]), plain64(ct[1]) / worker32(ct[1]));
    fflush(stdout);
}

/* ------------------------------------------------------------ scripts */

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) die("%s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 65536;
            buf = realloc(buf, cap);
            if (!buf) die("out of memory");
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) die("%s: read error", path);
    fclose(f);
    *len = n;
    return buf;
}

/* SCRIPT LOAD of body into sha; want: the expected SHA-1, or NULL. */
static void load(const char *body, size_t len, char sha[41], const char *what, const char *want) {
    redisReply *r = rcmd("SCRIPT LOAD %b", body, len);
    if (r->type != REDIS_REPLY_STRING || r->len != 40) die("SCRIPT LOAD %s: unexpected reply", what);
    memcpy(sha, r->str, 41);
    freeReplyObject(r);
    if (want && strcmp(sha, want) != 0)
        die("SCRIPT LOAD %s: sha %s, scripts.h says %s", what, sha, want);
}

/* The old set: DIR/common.lua followed by DIR/<script>.lua, as
 * tools/embed-lua.sh assembles a script. */
static void load_old(script_set *s) {
    char path[4096];
    size_t clen;
    snprintf(path, sizeof path, "%s/common.lua", G.ref);
    char *common = read_all(path, &clen);
    s->offer_count = memmem(common, clen, "shards_refusal", 14) != NULL;
    snprintf(path, sizeof path, "%s/ack.lua", G.ref);
    s->has_ack = access(path, R_OK) == 0;
    for (int i = 0; i < S_N; i++) {
        size_t len;
        if (i == S_ACK && !s->has_ack) continue;
        snprintf(path, sizeof path, "%s/%s.lua", G.ref, script_names[i]);
        char *body = read_all(path, &len);
        char *all = malloc(clen + len);
        if (!all) die("out of memory");
        memcpy(all, common, clen);
        memcpy(all + clen, body, len);
        load(all, clen + len, s->sha[i], path, NULL);
        /* The grouped ack's header says so (lua/ack.lua). */
        if (i == S_ACK) {
            s->grouped_ack = memmem(body, len, "the items in\n-- groups", 22) != NULL;
            s->packed_ack = memmem(body, len, "may come packed", 15) != NULL;
        }
        free(all);
        free(body);
    }
    free(common);
}

/* SCRIPT LOAD of the script's EVAL text as the library sends it. */
static void load_script(enum dq__script script, char sha[41], const char *what, const char *want) {
    size_t len;
    char *text = dq__script_text(script, &len);
    if (!text) die("out of memory");
    load(text, len, sha, what, want);
    free(text);
}

/* The new set: the texts the library sends (joined from build/gen/scripts.h). */
static void load_new(script_set *s) {
    s->offer_count = 1;
    load_script(DQ__LUA_OFFER, s->sha[S_OFFER], "offer", DQ_LUA_offer_SHA);
    load_script(DQ__LUA_TRANSFER, s->sha[S_TRANSFER], "transfer", DQ_LUA_transfer_SHA);
    load_script(DQ__LUA_TAKE, s->sha[S_TAKE], "take", DQ_LUA_take_SHA);
    load_script(DQ__LUA_ACK, s->sha[S_ACK], "ack", DQ_LUA_ack_SHA);
    s->has_ack = s->grouped_ack = s->packed_ack = 1;
}

/* ------------------------------------------------------------ report */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { M_SCRIPT, M_CPU, M_IR };

/* The median over rounds of set's case c: script time, server CPU or
 * server instructions (what). */
static double median(int set, int c, int what) {
    double v[ROUNDS_MAX];
    for (int r = 0; r < G.rounds; r++) {
        const figure *f = &fig[set][r][c];
        v[r] = what == M_SCRIPT ? f->script_us : what == M_CPU ? f->cpu_us : f->ir;
    }
    qsort(v, (size_t)G.rounds, sizeof v[0], cmp_double);
    return G.rounds % 2 ? v[G.rounds / 2] : (v[G.rounds / 2 - 1] + v[G.rounds / 2]) / 2;
}

/* Issue 42's figure: each set's cost per item with delays of their own
 * against one delay (same set, same run), by measure m. */
static void spread_ratios(int m, const char *unit) {
    printf("\n   delays of their own against one delay (%s per item, 100 a call; issue 42 wants\n"
           "   offers/s at >= 0.8 of one delay's, so cost at <= 1.25 of it):\n",
           unit);
    for (int s = 0; s < 2; s++) {
        double one = median(s, C_OFFER100, m);
        printf("   %s: 1 min..1 h %.2f x one delay, 0..10 s %.2f x\n", s ? "new" : "old",
               median(s, C_OFFER_RND, m) / one, median(s, C_OFFER_RND10, m) / one);
    }
}

/* A report's heading: its title, and the two sets' scripts. */
static void report_head(const script_set *sets, const char *title) {
    const char *sc = G.scale != 1.0 ? " [SCALED]" : "";
    const char *commit = strrchr(G.ref, '/') ? strrchr(G.ref, '/') + 1 : G.ref;
    printf("\n== %s (%s): old scripts vs new%s\n", title, G.what, sc);
    printf(
        "   old: commit %s (its lua/ from git history, common.lua prepended); new: lua/ as built (scripts.h)\n",
        commit);
    for (int i = 0; i < S_N; i++)
        printf("   %-8s old %s  new %s\n", script_names[i],
               sets[0].sha[i][0] ? sets[0].sha[i] : "(not kept)", sets[1].sha[i]);
}

static void report(const script_set *sets) {
    report_head(sets, "Script cost, Redis CPU per item");
    printf(
        "   %d rounds, old then new in each (A B A B ...), FLUSHALL before each block; queues %s, %s.\n",
        G.rounds, sets[0].queue, sets[1].queue);
    printf("   script = INFO commandstats cmdstat_evalsha usec / items (after CONFIG RESETSTAT);\n"
           "   server = INFO cpu used_cpu_sys+used_cpu_user delta / items (adds reading and answering\n"
           "   the calls). Medians over the rounds, us per item:\n\n");
    printf("   %-42s %8s %8s %6s %8s %8s %6s  %s\n", "case", "old", "new", "ratio", "old srv", "new srv",
           "ratio", "items/call (old, new)");
    int cases = ack_case ? C_N : C_ACK;
    for (int c = 0; c < cases; c++) {
        double so = median(0, c, M_SCRIPT), sn = median(1, c, M_SCRIPT), co = median(0, c, M_CPU),
               cn = median(1, c, M_CPU);
        double per_call[2];
        for (int s = 0; s < 2; s++) {
            double items = 0, calls = 0;
            for (int r = 0; r < G.rounds; r++) items += fig[s][r][c].items, calls += fig[s][r][c].calls;
            per_call[s] = calls ? items / calls : 0;
        }
        printf("   %-42s %8.2f %8.2f %6.2f %8.2f %8.2f %6.2f  %.0f, %.0f\n", case_names[c], so, sn,
               sn / so, co, cn, cn / co, per_call[0], per_call[1]);
    }
    double offer = median(1, C_OFFER16, M_SCRIPT), offer_old = median(0, C_OFFER16, M_SCRIPT);
    printf(
        "\n   target (issues 11 and 15): offer <= 7 us of Redis CPU per item (16 per call, script time):\n"
        "   new %.2f us: %s (old %.2f us: %s)\n",
        offer, offer <= 7.0 ? "PASS" : "MISS", offer_old, offer_old <= 7.0 ? "PASS" : "MISS");

    printf("\n   each round, script us per item (old / new):\n");
    printf("   %-42s", "case");
    for (int r = 0; r < G.rounds; r++) printf("   round %d   ", r + 1);
    printf("\n");
    double other = 0;
    for (int c = 0; c < cases; c++) {
        printf("   %-42s", case_names[c]);
        for (int r = 0; r < G.rounds; r++) {
            printf(" %6.2f/%-6.2f", fig[0][r][c].script_us, fig[1][r][c].script_us);
            for (int s = 0; s < 2; s++)
                if (fig[s][r][c].other > other) other = fig[s][r][c].other;
        }
        printf("\n");
    }
    printf("   most other work on core 0 (redis-server's) in any measured case: %.0f%%\n", 100 * other);
    spread_ratios(M_SCRIPT, "script us");
    fflush(stdout);
}

/* The --callgrind report: instructions per item, old and new. */
static void report_instructions(const script_set *sets) {
    report_head(sets, "Script cost in instructions");
    printf("   redis-server under valgrind --tool=callgrind: instructions it ran per item (Ir, between\n"
           "   callgrind_control --zero and --dump around each case: the scripts, and reading and\n"
           "   answering the calls). No other load changes them (from run to run: within about 3%%).\n"
           "   Not time: cache misses and branches are not counted. %d round(s), old then new; counts\n"
           "   scaled by %.2f.\n\n",
           G.rounds, G.scale);
    printf("   %-42s %10s %10s %6s  %s\n", "case", "old Ir", "new Ir", "ratio", "items (old, new)");
    int cases = ack_case ? C_N : C_ACK;
    for (int c = 0; c < cases; c++) {
        double o = median(0, c, M_IR), n = median(1, c, M_IR);
        printf("   %-42s %10.0f %10.0f %6.2f  %.0f, %.0f\n", case_names[c], o, n, n / o,
               fig[0][0][c].items, fig[1][0][c].items);
    }
    spread_ratios(M_IR, "instructions");
    fflush(stdout);
}

/* ------------------------------------------------------------ main */

static void usage(void) {
    fprintf(stderr, "usage: valbench --port PORT --ref DIR [--what TEXT] [--rounds N] [--scale X]\n"
                    "                [--callgrind PID --callgrind-out FILE]\n"
                    "       valbench --port PORT --calls [--calls-ref LIBRARY] [--scale X]\n"
                    "       valbench --print-library\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *env = getenv("DQ_BENCH_SCALE");
    int rounds_given = 0;
    if (env && *env) G.scale = atof(env);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--calls") == 0) {
            G.calls = 1;
            continue;
        }
        if (strcmp(argv[i], "--print-library") == 0) {
            /* For --calls-ref: this build's library, from another build. */
            size_t lib_len;
            char *lib = dq__library_text(&lib_len);
            if (!lib) die("out of memory");
            fwrite(lib, 1, lib_len, stdout);
            free(lib);
            return 0;
        }
        if (i + 1 >= argc) usage();
        if (strcmp(argv[i], "--port") == 0) G.port = atoi(argv[++i]);
        else if (strcmp(argv[i], "--ref") == 0) G.ref = argv[++i];
        else if (strcmp(argv[i], "--what") == 0) G.what = argv[++i];
        else if (strcmp(argv[i], "--rounds") == 0) G.rounds = atoi(argv[++i]), rounds_given = 1;
        else if (strcmp(argv[i], "--scale") == 0) G.scale = atof(argv[++i]);
        else if (strcmp(argv[i], "--callgrind") == 0) G.cg_pid = atoi(argv[++i]);
        else if (strcmp(argv[i], "--callgrind-out") == 0) G.cg_out = argv[++i];
        else if (strcmp(argv[i], "--calls-ref") == 0) G.calls_ref = argv[++i];
        else usage();
    }
    if (G.cg_pid && !rounds_given) G.rounds = 1; /* the counts vary by a few % at most */
    if (G.port <= 0 || G.port > 65535 || G.rounds < 1 || G.rounds > ROUNDS_MAX || !(G.scale > 0) ||
        G.cg_pid < 0 || (G.cg_pid > 0) != (G.cg_out != NULL))
        usage();
    if (dq__crypto_init() != 0) die("libsodium did not initialise");

    struct timeval tv = {5, 0};
    ctl = redisConnectWithTimeout("127.0.0.1", G.port, tv);
    if (!ctl || ctl->err) die("cannot connect to 127.0.0.1:%d: %s", G.port, ctl ? ctl->errstr : "oom");

    if (G.calls) {
        if (G.cg_pid) usage();
        calls_phase();
        free(leases);
        redisFree(ctl);
        return 0;
    }
    if (!G.ref) usage();
    static script_set sets[2] = {{.name = "old", .queue = "valold"}, {.name = "new", .queue = "valnew"}};
    load_old(&sets[0]);
    load_new(&sets[1]);
    for (int s = 0; s < 2; s++) dq__keys_init(&sets[s].k, sets[s].queue);
    ack_case = sets[0].has_ack && sets[1].has_ack;

    /* Warm-up (not reported): the server's allocator and Lua state. */
    figure warm[C_N];
    for (int s = 0; s < 2; s++) block(&sets[s], 0.1 * G.scale, warm);
    for (int r = 0; r < G.rounds; r++)
        for (int s = 0; s < 2; s++) {
            progress("round %d of %d, %s scripts", r + 1, G.rounds, sets[s].name);
            block(&sets[s], G.scale, fig[s][r]);
        }
    rdo("FLUSHALL");
    if (G.cg_pid) report_instructions(sets);
    else report(sets);
    free(leases);
    redisFree(ctl);
    return 0;
}
