/*
 * take.c - consumers: runs the take script, waits when nothing is ready,
 * retries, times out (what its reply becomes is delivery.c's).
 *
 * A take runs lua/take.lua on the node serving the queue, which pops up to
 * N ready entries atomically (and, with a lease, puts each in flight). When
 * the ready list is empty, it waits on a blocking connection of its own to
 * that node with a BLPOP on its wake tokens (dq__blpop: a failover or slot
 * move ends the wait, and so does a node that stays silent past the safety
 * interval: the take looks again and waits where the queue is now). Whatever
 * makes an entry ready pushes one token, so
 * each entry wakes one waiter, not every idle consumer. Then it runs the
 * script again. The blocking connection never holds an item, only a token:
 * a take can end at any moment (timeout, cancel, a dying process) without
 * losing an item, and only the script decides who gets what. A token lost
 * that way (or popped by a consumer that is paused) is put back by the
 * schedulers' catch-up and safety runs; meanwhile each wait ends after
 * half the safety interval and the take looks again if the ready list
 * holds entries (an LLEN; an idle take runs no script), so its entry waits
 * no longer than that for a consumer that is waiting.
 *
 * A sharded queue (shard.c) is taken from shard by shard: the script runs
 * on one shard, and on the next when that one is empty, starting from a
 * shard that turns per take (fairness); when all are empty, the take waits
 * on every shard at once, through waiters (waiter.c: one BLPOP per shard,
 * left armed for the client's next take). A take skips the shards its
 * client's armed waits have found quiet (shard_quiet): at a steady trickle
 * a take then looks where a token came from, not at every empty shard in
 * turn.
 *
 * The take's own timeout is a libev timer, not a blocking command's timeout
 * (Redis checks those only every 100 ms at the default hz 10). A take always
 * runs the script at least once, so timeout 0 means "whatever is ready now"
 * (on a sharded queue: on every shard not known to be quiet; a quiet
 * shard's items, if any came, are another consumer's to take, as its
 * token went there).
 *
 * An error Redis gives while a condition lasts (OOM, MISCONF, NOREPLICAS,
 * BUSY: backoff.c) does not end a take that has time left: it looks again
 * after a growing pause, until the condition clears or the timeout, which
 * then reports that error rather than "nothing". (READONLY and LOADING say
 * the topology moved: the router does what that asks, a connection made
 * again or its map refreshed, and hands the refusal back at once, so the
 * take waits it out as above and keeps to its timeout.) So does a Redis
 * that cannot be reached: the take waits for it, and a timeout that comes
 * first reports DQ_ECONNECT, so that a caller can tell an outage from an
 * empty queue.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define RETRY_S 0.1  /* while the command connection is down */
/* Messages one call may take: dq_take_many's limit (the worker's is
 * DQ__TAKE_BATCH_MAX). */
#define TAKE_MAX 64

typedef void take_done_fn(dq_take_req *t, int status, dq_msg **msgs, size_t n);

/* A script reply may come after its take has ended and been freed, so the
 * reply holds this token, which the take clears when it ends. */
typedef struct take_token {
    dq_take_req *take;
} take_token;

struct dq_take_req {
    dq_take_req *next;
    dq_client *c;
    char owner[DQ_QUEUE_MAX + 1];     /* the queue taken from               */
    char queue[DQ__SHARD_NAME_MAX + 1]; /* the shard the script runs on      */
    dq__keys keys;                    /* its keys                           */
    unsigned shards, cur, tried;      /* the count taken by; the shard now;
                                         shards found empty in a row        */
    char shards_text[24];
    unsigned char tokens[DQ__SHARDS_MAX]; /* tokens popped per shard, not yet
                                         handed to a script                 */
    uint64_t found_empty;             /* bit j: shard j was found empty since
                                         the take last retried              */
    dq__waiter *waiters[DQ__SHARDS_MAX];
    dq_take_opts opts;      /* its holder is NULL: see holder            */
    char holder[DQ_HOLDER_MAX + 1]; /* opts.holder's copy, "" for none  */
    size_t max;             /* messages one script run may pop           */
    take_done_fn *done_fn;
    dq_take_cb *cb;         /* dq_take_async's callback                   */
    dq_take_many_cb *batch_cb; /* dq_take_many_async's callback         */
    void *privdata;
    dq_msg **out;           /* dq_take_many's array                       */
    dq__conn *conn;         /* blocking connection for the wait, or NULL */
    ev_timer timer;         /* the timeout, then retries and deferrals    */
    take_token *token;      /* the script run in flight, if any           */
    int wait_out;           /* a BLPOP wait is out on conn                */
    int woke;               /* the last wait popped a token (tell the script) */
    int passed;             /* a shard gave only items sealed for a key this
                               client lacks: when no other shard has any,
                               the take ends with DQ_EKEY, not a wait     */
    unsigned result_slot;   /* which of the client's result keys is ours  */
    char result_key[DQ__KEY_MAX + DQ_ID_GENERATED_LEN + 16]; /* dq:{Q}:t:<client tag>.<slot> */
    char request[DQ_ID_GENERATED_LEN + 1]; /* the request out, "" when none:
                               kept until a reply comes, so a retry
                               repeats it and the script replays a lost
                               result                                     */
    int ending;             /* timeout or cancel: finish at the next step */
    int retrying;           /* the timer is a retry, not the timeout      */
    double deadline;        /* ev_now() time of the timeout; < 0: none    */
    int end_status;         /* 0 (timeout), DQ_ECLOSED (cancel), or the code
                               of an error that persists (or of Redis out
                               of reach), while it does (note_failure)   */
    dq__backoff backoff;    /* errors that persist, in a row              */
    int done;
};

static void run_script(dq_take_req *t);
static void wait_for_entries(dq_take_req *t);
static void waiters_detach(dq_take_req *t);
static int set_shards(dq_take_req *t, unsigned n);
static void next_shard(dq_take_req *t);
static void note_empty(dq_take_req *t);
static int shard_quiet(const dq_take_req *t, unsigned j);
static void wait_on_shards(dq_take_req *t);
static void on_conn_up(dq__conn *conn, void *privdata);
static void on_retry(dq_take_req *t);
static void retry_after(dq_take_req *t, double in);
static int wait_out_error(dq_take_req *t, dq__conn *conn, const redisReply *reply, int code);
static int look_if_ready(dq_take_req *t);
static void note_failure(dq_take_req *t, int code);

void dq_take_opts_init(dq_take_opts *o) {
    o->lease_ms = DQ_QUEUE_SETTING;
    o->max_attempts = DQ_QUEUE_SETTING;
    o->holder = NULL;
}

/* ------------------------------------------------------------ ending */

static void unlink_take(dq_take_req *t) {
    for (dq_take_req **p = &t->c->takes; *p; p = &(*p)->next) {
        if (*p == t) {
            *p = t->next;
            return;
        }
    }
}

static void release_conn(dq_take_req *t) {
    dq__conn *conn = t->conn;
    t->conn = NULL;
    if (!conn) return;
    if (!t->wait_out && conn->state == DQ__UP) dq__route_blocking_release(t->c, conn);
    else dq__conn_retire(conn); /* still waiting, or broken: not reusable */
}

/* ------------------------------------------------------------ result keys */

/* Each take out at once has a result key of its own (the script keeps its
 * last result there for a retry to replay). Keys are numbered per client and
 * reused by later takes, which overwrite them: no clean-up command, and a
 * client leaves at most one key per take it ran at once, each expiring 60 s
 * after its last use. */
static int result_slot_acquire(dq_client *c, unsigned *slot) {
    if (c->result_nfree > 0) {
        *slot = c->result_free[--c->result_nfree];
        return 0;
    }
    if (c->result_next == c->result_cap) { /* room to give every slot back */
        size_t cap = c->result_cap ? c->result_cap * 2 : 8;
        unsigned *p = realloc(c->result_free, cap * sizeof *p);
        if (!p) return -1;
        c->result_free = p;
        c->result_cap = cap;
    }
    if (!c->take_tag[0]) dq__id_generate(c->take_tag);
    *slot = c->result_next++;
    return 0;
}

static void result_slot_release(dq_client *c, unsigned slot) {
    c->result_free[c->result_nfree++] = slot; /* room was made at acquire */
}

static void finish(dq_take_req *t, int status, dq_msg **msgs, size_t n) {
    if (t->done) return;
    t->done = 1;
    ev_timer_stop(t->c->loop, &t->timer);
    unlink_take(t);
    result_slot_release(t->c, t->result_slot);
    if (t->token) t->token->take = NULL;
    release_conn(t);
    waiters_detach(t);
    t->c->callback_depth++;
    t->done_fn(t, status, msgs, n);
    t->c->callback_depth--;
    free(t);
}

/* ------------------------------------------------------------ the script */

static void script_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    take_token *token = privdata;
    dq_take_req *t = token->take;
    free(token);
    if (!t) return;
    t->token = NULL;
    if (!reply) {
        if (code != DQ_ECLOSED) note_failure(t, dq__reply_failure(t->c, conn, NULL, code, t->queue));
        if (t->ending || code == DQ_ECLOSED) finish(t, t->ending ? t->end_status : code, NULL, 0);
        else run_script(t); /* retries once the connection is back */
        return;
    }
    if (dq__reply_is_topology(reply)) {
        /* A failover or a slot move under way (a cluster says CLUSTERDOWN
         * for every slot while one master is replaced), handed back at once
         * by the router (DQ__ROUTE_OWN_RETRY), which made its connections
         * again or refreshed its map. The script did not run: try again
         * after the backoff's pause, until the take's own timeout, which
         * then reports it. */
        note_failure(t, dq__reply_failure(t->c, conn, reply, code, t->queue));
        if (t->ending) finish(t, t->end_status, NULL, 0);
        else
            retry_after(
                t, dq__backoff_failed(
                       t->c, &t->backoff, reply->str, "queue %s: take waits for %s: %s", t->queue,
                       dq__reply_class(reply) == DQ__ERR_LOADING ? "Redis to load its data" : "a master",
                       reply->str));
        return;
    }
    unsigned told;
    if (dq__shards_relearn(t->c, t->owner, reply, &told)) {
        /* Taken by another count than the queue's: learn it, start over. */
        t->request[0] = '\0';
        if (t->ending) finish(t, t->end_status, NULL, 0);
        else if (told == 0 || set_shards(t, told) != 0) on_retry(t);
        else run_script(t);
        return;
    }
    if (wait_out_error(t, conn, reply, code)) return;
    dq__backoff_ok(t->c, &t->backoff);
    if (t->end_status != DQ_ECLOSED) t->end_status = 0; /* Redis answers again */
    /* A reply came: the request is settled, and its token counted. */
    if (t->woke && t->tokens[t->cur]) t->tokens[t->cur]--;
    t->woke = 0;
    char request[DQ_ID_GENERATED_LEN + 1]; /* t->request is cleared below */
    memcpy(request, t->request, sizeof request);
    t->request[0] = '\0';
    if (code == DQ_ENOTDURABLE)
        /* Handed out all the same: holding them back would only leave them
         * in flight until their lease ends. A failover before the take
         * replicates may deliver them again, which a lease allows. */
        dq__log(t->c, "queue %s: take not confirmed by the replicas: %s", t->queue, t->c->errstr);
    dq_msg *msgs[DQ__TAKE_BATCH_MAX];
    int held = 0;
    dq__keyring_use(t->c->keyring); /* once for the batch's envelopes */
    dq__delivery dv = {t->c, t->owner, t->queue, &t->keys};
    int n = dq__take_reply_decode(&dv, reply, request, msgs, t->max, &held);
    dq__keyring_done(t->c->keyring);
    if (n < 0) {
        finish(t, dq__reply_failure(t->c, conn, reply, code, t->queue), NULL, 0);
        return;
    }
    if (held > 0 && n > 0) dq__log(t->c, "queue %s: %s", t->queue, t->c->errstr);
    if (n > 0) finish(t, 1, msgs, (size_t)n);
    else if (held > 0 && t->shards > 1 && !t->ending && ++t->tried < t->shards) {
        /* They stay for the holders of that key, and stop nothing: the
         * other shards may have items for this client. */
        t->passed = 1;
        next_shard(t);
    } else if (held > 0) finish(t, DQ_EKEY, NULL, 0); /* the message names the key */
    else if (t->ending) finish(t, t->end_status, NULL, 0);
    else if (reply->elements > 1) run_script(t); /* all popped were set aside: look again */
    else {
        note_empty(t);
        if (t->shards > 1 && ++t->tried < t->shards) next_shard(t); /* this one is empty */
        else if (t->passed) finish(t, DQ_EKEY, NULL, 0);
        else wait_for_entries(t);
    }
}

/* An error that persists, with time left: remembered for the timeout to
 * report, logged (coalesced), and looked at again after the backoff's
 * pause. The script did not run (Redis refuses these before it starts), so
 * the request and its wake token are kept for the next try. Returns 1 if
 * so, 0 for any other reply. */
static int wait_out_error(dq_take_req *t, dq__conn *conn, const redisReply *reply, int code) {
    double now = ev_now(t->c->loop);
    if (t->ending || reply->type != REDIS_REPLY_ERROR || !dq__error_persists(reply->str) ||
        (t->deadline >= 0 && t->deadline <= now))
        return 0;
    t->end_status = dq__reply_failure(t->c, conn, reply, code, t->queue);
    retry_after(t, dq__backoff_failed(t->c, &t->backoff, reply->str, "queue %s: take failed: %s",
                                      t->queue, t->c->errstr));
    return 1;
}

/* A failure the take waits out (Redis out of reach, a topology refusal):
 * kept for a timeout that comes before it clears (or while its call was
 * out: the failure is then the take's answer), as wait_out_error keeps an
 * error that persists. A cancel's DQ_ECLOSED stays. */
static void note_failure(dq_take_req *t, int code) {
    if (code < 0 && t->end_status != DQ_ECLOSED) t->end_status = code;
}

/* Arms the timer for whichever comes first: a retry or the timeout. */
static void on_retry(dq_take_req *t) { retry_after(t, RETRY_S); }

/* The same, for a retry in `in` seconds. */
static void retry_after(dq_take_req *t, double in) {
    struct ev_loop *loop = t->c->loop;
    t->found_empty = 0; /* what was seen before a failure is old news */
    t->retrying = 1;
    if (t->deadline >= 0 && t->deadline - ev_now(loop) <= in) {
        in = t->deadline - ev_now(loop);
        t->retrying = 0;
    }
    ev_timer_stop(loop, &t->timer);
    ev_timer_set(&t->timer, in > 0 ? in : 0, 0);
    ev_timer_start(loop, &t->timer);
}

/* Arms the timer for the timeout, if any. */
static void arm_timeout(dq_take_req *t) {
    struct ev_loop *loop = t->c->loop;
    ev_timer_stop(loop, &t->timer);
    t->retrying = 0;
    if (t->deadline < 0) return;
    double in = t->deadline - ev_now(loop);
    ev_timer_set(&t->timer, in > 0 ? in : 0, 0);
    ev_timer_start(loop, &t->timer);
}

static void run_script(dq_take_req *t) {
    dq_client *c = t->c;
    if (t->token || t->done) return;
    take_token *token = malloc(sizeof *token);
    if (!token) {
        finish(t, dq__fail(c, DQ_ENOMEM, "out of memory"), NULL, 0);
        return;
    }
    token->take = t;
    char count[16], lease[24], max[16], tprefix[DQ_ID_GENERATED_LEN + 2];
    /* A sharded take tells the script of a token it holds for this shard
     * (popped by a waiter); a plain one, of the token its BLPOP popped. */
    if (t->shards > 1 && !t->request[0]) t->woke = t->tokens[t->cur] > 0;
    const char *woke = t->woke ? "1" : "0";
    /* A new request: 128 random bits, so tokens never repeat. A retry
     * after a lost reply keeps the request, and the script replays it. */
    const char *repeat = t->request[0] ? "1" : "0";
    if (!t->request[0]) dq__id_generate(t->request);
    snprintf(tprefix, sizeof tprefix, "%s.", t->request);
    snprintf(count, sizeof count, "%zu", t->max);
    snprintf(lease, sizeof lease, "%" PRId64, t->opts.lease_ms);
    snprintf(max, sizeof max, "%d", t->opts.max_attempts);
    const dq__keys *k = &t->keys;
    char held[64 * DQ__KEY_ID_LEN * 2 + 1]; /* the key ids this client holds */
    dq__keyring_ids_hex(c->keyring, held, sizeof held);
    const char *argv[18] = {k->z,      k->ready,      k->aside, k->counters, k->signal,      k->config,
                            k->prefix, k->chan,       count,    lease,       tprefix,        max,
                            woke,      t->result_key, repeat,   held,        t->shards_text, t->holder};
    size_t lens[18];
    for (int i = 0; i < 18; i++) lens[i] = strlen(argv[i]);
    /* A leased take writes what must survive a failover; a plain take
     * hands its items out for good either way. */
    unsigned flags = t->opts.lease_ms != 0 ? DQ__ROUTE_WRITE : 0;
    /* Busy refusals come back at once: the take retries them itself
     * (script_reply) and so keeps to its own timeout. */
    flags |= DQ__ROUTE_OWN_RETRY;
    int nargs = t->holder[0] ? 12 : 11;
    int rc = dq__op_eval(c, t->queue, flags, DQ__LUA_TAKE, 6, nargs, argv, lens, script_reply, token);
    if (rc != 0) {
        free(token);
        note_failure(t, rc);
        if (t->ending) finish(t, t->end_status, NULL, 0);
        else on_retry(t); /* not connected: try again shortly */
        return;
    }
    t->token = token;
}

/* ------------------------------------------------------------ shards */

/* Points the take at shard j: the script's keys and result key. */
static int set_shard(dq_take_req *t, unsigned j) {
    if (dq__shard_name(t->owner, j, t->shards, t->queue, sizeof t->queue) != 0) return -1;
    t->cur = j;
    dq__keys_init(&t->keys, t->queue);
    char suffix[DQ_ID_GENERATED_LEN + 16];
    snprintf(suffix, sizeof suffix, "t:%s.%u", t->c->take_tag, t->result_slot);
    dq__key(t->result_key, sizeof t->result_key, t->queue, suffix);
    return 0;
}

/* Takes by n shards from now on, starting from one picked at random, so
 * consumers do not all start on the same shard. */
static int set_shards(dq_take_req *t, unsigned n) {
    waiters_detach(t);
    t->shards = n;
    t->tried = 0;
    t->found_empty = 0;
    dq__fmt_i64(t->shards_text, n);
    return set_shard(t, n > 1 ? dq__random_uniform(n) : 0);
}

/* Shard j needs no look: a wait of this client on it was out when the
 * shard was last found empty, and has popped nothing since (see
 * dq__waiters_quiet). A token t holds for it says otherwise. */
static int shard_quiet(const dq_take_req *t, unsigned j) {
    return !t->tokens[j] && dq__waiters_quiet(t->c, t->owner, t->shards, j);
}

/* Shard t->cur was found empty: the waits out on it become quiet. */
static void note_empty(dq_take_req *t) {
    if (t->shards < 2 || t->tokens[t->cur]) return;
    t->found_empty |= (uint64_t)1 << t->cur;
    dq__waiters_note_empty(t->c, t->owner, t->shards, t->cur);
}

/* The shard to look at next: one a waiter popped a token for, else the
 * next one that is not quiet (a quiet one counts as found empty). When
 * none is left, the take waits on them all. */
static void next_shard(dq_take_req *t) {
    unsigned j = t->shards; /* none yet */
    for (unsigned k = 1; k <= t->shards && j == t->shards; k++)
        if (t->tokens[(t->cur + k) % t->shards]) j = (t->cur + k) % t->shards;
    for (unsigned k = 1; j == t->shards && t->tried < t->shards; k++) {
        unsigned i = (t->cur + k) % t->shards;
        if (shard_quiet(t, i)) t->tried++;
        else j = i;
    }
    if (j == t->shards) {
        if (t->passed) finish(t, DQ_EKEY, NULL, 0); /* see passed */
        else wait_for_entries(t);
        return;
    }
    if (set_shard(t, j) != 0) {
        finish(t, dq__fail(t->c, DQ_EPROTO, "queue %s: no name for shard %u", t->owner, j), NULL, 0);
        return;
    }
    run_script(t);
}

/* The take ends or changes its count: its waiters stay armed for the next
 * take (an idle one is let go), and tokens it holds go back. */
static void waiters_detach(dq_take_req *t) {
    for (unsigned j = 0; j < t->shards && t->shards > 1; j++) {
        dq__waiter *w = t->waiters[j];
        t->waiters[j] = NULL;
        if (w) dq__waiter_release(w);
        if (t->tokens[j]) {
            char shard[DQ__SHARD_NAME_MAX + 1];
            if (dq__shard_name(t->owner, j, t->shards, shard, sizeof shard) == 0)
                dq__push_back_tokens(t->c, shard, t->tokens[j]);
            t->tokens[j] = 0;
        }
    }
}

/* A waiter t holds popped a token on shard j: it is t's. An idle t looks
 * there. */
static void on_waiter_token(void *holder, unsigned j) {
    dq_take_req *t = holder;
    if (t->tokens[j] < 255) t->tokens[j]++;
    if (t->wait_out) {
        t->wait_out = 0;
        t->tried = 0;
        if (set_shard(t, j) == 0) run_script(t);
    }
}

/* A wait of a waiter t holds ended without a token: an idle t looks again,
 * and waits where the shards are now. */
static void on_waiter_ended(void *holder) {
    dq_take_req *t = holder;
    if (t->wait_out) {
        t->wait_out = 0;
        t->tried = 0;
        on_retry(t);
    }
}

/* A waiter t holds found entries on shard j after its wait ran out (their
 * tokens gone): an idle t looks there, holding no token for it. */
static void on_waiter_look(void *holder, unsigned j) {
    dq_take_req *t = holder;
    if (t->wait_out) {
        t->wait_out = 0;
        t->tried = 0;
        if (set_shard(t, j) == 0) run_script(t);
    }
}

static const dq__waiter_calls waiter_calls = {on_waiter_token, on_waiter_ended, on_waiter_look};

/* Every shard was empty: wait on all of them (tokens in hand first). */
static void wait_on_shards(dq_take_req *t) {
    for (unsigned j = 0; j < t->shards; j++) {
        if (t->tokens[j]) { /* a token came while looking: look there */
            t->tried = 0;
            if (set_shard(t, j) == 0) run_script(t);
            return;
        }
    }
    int missing = 0;
    for (unsigned j = 0; j < t->shards; j++) {
        dq__waiter *w = t->waiters[j];
        if (!w && (w = dq__waiter_for(t->c, t->owner, j, t->shards)) == NULL) {
            finish(t, dq__fail(t->c, DQ_ENOMEM, "out of memory"), NULL, 0);
            return;
        }
        dq__waiter_hold(w, &waiter_calls, t);
        t->waiters[j] = w;
        missing += dq__waiter_arm(w, (t->found_empty >> j & 1) && !t->tokens[j]) < 0;
    }
    t->wait_out = 1;
    if (missing) { /* some shard has no node now: look again shortly */
        t->wait_out = 0;
        t->tried = 0;
        on_retry(t);
    }
}

/* ------------------------------------------------------------ waiting */

/* What every reply on the blocking connection (a wait, look_if_ready's
 * LLEN) starts with: returns 1 if t goes on with reply; 0 if t is done,
 * ending (finished here), or the connection was lost (on_conn_lost looks
 * again). */
static int wait_answered(dq_take_req *t, const redisReply *reply) {
    if (t->done) return 0;
    t->wait_out = 0;
    if (t->ending) {
        finish(t, t->end_status, NULL, 0);
        return 0;
    }
    return reply != NULL;
}

static void wait_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    dq_take_req *t = privdata;
    if (!wait_answered(t, reply)) return;
    if (dq__reply_is_topology(reply)) {
        /* A failover or slot move ended the wait: look, then wait where
         * the queue is now. */
        dq__log(t->c, "queue %s: wait ended by %s: %s", t->queue, conn->name, reply->str);
        t->conn = NULL;
        dq__conn_retire(conn);
        run_script(t);
        return;
    }
    if (wait_out_error(t, conn, reply, code)) return;
    if (reply->type == REDIS_REPLY_ERROR) {
        finish(t, dq__fail(t->c, dq__reply_error_code(reply), "%s (key %s)", reply->str, t->keys.signal),
               NULL, 0);
        return;
    }
    /* A token popped (an array): look. The wait's time ran out (nil): look
     * too if entries are ready (protocol.md, step 3), else wait again. A
     * token can be gone while its entry waits: popped by a consumer that
     * was then paused (SIGSTOP, a VM pause) or died. The look finds that
     * entry within one wait, not at the schedulers' next top-up, up to a
     * safety interval later; and an idle take costs one LLEN a wait, not a
     * script call. */
    if (reply->type == REDIS_REPLY_NIL && look_if_ready(t) == 0) return;
    t->woke = reply->type == REDIS_REPLY_ARRAY;
    run_script(t);
}

/* The reply of look_if_ready's LLEN: entries ready, or a refusal (an ACL
 * without LLEN, a slot moved): look; none: wait again. */
static void ready_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    (void)conn;
    (void)code;
    dq_take_req *t = privdata;
    if (!wait_answered(t, reply)) return;
    t->woke = 0;
    if (reply->type == REDIS_REPLY_INTEGER && reply->integer == 0) wait_for_entries(t);
    else run_script(t);
}

/* After a wait that ended empty: asks, on the blocking connection, whether
 * the ready list holds entries (their tokens gone). Returns 0 if the
 * question is out (ready_reply answers), -1 if it could not be sent. */
static int look_if_ready(dq_take_req *t) {
    if (dq__ask_ready(t->c, t->conn, t->keys.ready, ready_reply, t) != 0) return -1;
    t->wait_out = 1;
    return 0;
}

/* The blocking connection failed or was lost: it is not reused (its node
 * may be gone for good); look again shortly, and wait on a new one. */
static void on_conn_lost(dq__conn *conn, void *privdata) {
    dq_take_req *t = privdata;
    if (t->conn != conn) return;
    t->conn = NULL;
    t->wait_out = 0;
    note_failure(t, dq__fail(t->c, DQ_ECONNECT, "%s", conn->errstr));
    dq__conn_retire(conn);
    if (t->ending) finish(t, t->end_status, NULL, 0);
    else on_retry(t);
}

static void wait_for_entries(dq_take_req *t) {
    if (t->wait_out || t->done) return;
    if (t->shards > 1) {
        wait_on_shards(t);
        return;
    }
    unsigned slot = dq__queue_slot(t->queue);
    if (t->conn && !dq__route_owns(t->c, t->conn, slot)) {
        dq__conn_retire(t->conn); /* the queue moved */
        t->conn = NULL;
    }
    if (!t->conn) {
        t->conn = dq__route_blocking(t->c, slot);
        if (!t->conn) {
            on_retry(t); /* no node for the slot now: look again shortly */
            return;
        }
        t->conn->event_privdata = t;
        t->conn->on_up = on_conn_up;
        t->conn->on_down = on_conn_lost;
        t->conn->on_fail = on_conn_lost;
    }
    if (t->conn->state != DQ__UP) return; /* on_conn_up looks then */
    if (dq__blpop(t->c, t->conn, t->keys.signal, wait_reply, t) == 0) t->wait_out = 1;
}

static void on_conn_up(dq__conn *conn, void *privdata) {
    (void)conn;
    dq_take_req *t = privdata;
    /* Entries may have come while we were away: look before waiting. */
    if (t->ending) finish(t, t->end_status, NULL, 0);
    else run_script(t);
}

/* The timer: the take's timeout, a deferred cancel, or a retry. */
static void on_timer(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    dq_take_req *t = w->data;
    if (t->retrying) {
        arm_timeout(t);
        run_script(t);
        return;
    }
    t->ending = 1;
    if (t->token) return;                   /* the script's reply finishes */
    if (t->wait_out && t->shards == 1)
        dq__conn_abort(t->conn, DQ_ECLOSED, "take ended"); /* nothing held */
    else finish(t, t->end_status, NULL, 0);
}

/* ------------------------------------------------------------ public */

int dq__holder_valid(const char *holder) { return dq__name_valid(holder, DQ_HOLDER_MAX); }

/* A take, not started yet (see take_start). On failure returns NULL with
 * the code in *rc. */
static dq_take_req *take_new(dq_client *c, const char *queue, const dq_take_opts *opts,
                             int64_t timeout_ms, size_t max, int *rc) {
    *rc = dq__check_queue(c, queue);
    if (*rc) return NULL;
    if (opts && (opts->lease_ms < DQ_QUEUE_SETTING || opts->lease_ms > DQ_DUE_MAX_MS ||
                 opts->max_attempts < DQ_QUEUE_SETTING)) {
        *rc = dq__fail(c, DQ_EINVAL, "invalid take options: lease %" PRId64 " ms, max attempts %d",
                       opts->lease_ms, opts->max_attempts);
        return NULL;
    }
    if (opts && opts->holder && (opts->lease_ms == 0 || !dq__holder_valid(opts->holder))) {
        *rc = dq__fail(c, DQ_EINVAL,
                       "invalid holder: a leased take's, 1 to %d bytes of UTF-8, no control "
                       "character",
                       DQ_HOLDER_MAX);
        return NULL;
    }
    dq_take_req *t = calloc(1, sizeof *t);
    if (!t || result_slot_acquire(c, &t->result_slot) != 0) {
        free(t);
        *rc = dq__fail(c, DQ_ENOMEM, "out of memory");
        return NULL;
    }
    t->c = c;
    snprintf(t->owner, sizeof t->owner, "%s", queue);
    unsigned shards = dq__shards_of(c, queue);
    if (set_shards(t, shards ? shards : 1) != 0) {
        result_slot_release(c, t->result_slot);
        free(t);
        *rc = dq__fail(c, DQ_EPROTO, "queue %s: no shard names for %u shards", queue, shards);
        return NULL;
    }
    if (opts) t->opts = *opts;
    if (opts && opts->holder) snprintf(t->holder, sizeof t->holder, "%s", opts->holder);
    t->opts.holder = NULL;
    t->max = max;
    ev_timer_init(&t->timer, on_timer, 0, 0);
    t->timer.data = t;
    ev_now_update(c->loop);
    t->deadline = timeout_ms >= 0 ? ev_now(c->loop) + timeout_ms / 1000.0 : -1;
    t->next = c->takes;
    c->takes = t;
    return t;
}

static void take_start(dq_take_req *t) {
    arm_timeout(t);
    if (t->shards > 1 && shard_quiet(t, t->cur)) {
        t->tried = 1; /* as if found empty now */
        next_shard(t);
    } else {
        run_script(t);
    }
}

static void async_done(dq_take_req *t, int status, dq_msg **msgs, size_t n) {
    (void)n; /* max is 1 */
    t->cb(t->c, status, status == 1 ? msgs[0] : NULL, t->privdata);
}

int dq_take_async_ex(dq_client *c, const char *queue, const dq_take_opts *opts, int64_t timeout_ms,
                     dq_take_cb *cb, void *privdata, dq_take_req **out) {
    if (!cb) return dq__fail(c, DQ_EINVAL, "no callback");
    int rc;
    dq_take_req *t = take_new(c, queue, opts, timeout_ms, 1, &rc);
    if (!t) return rc;
    t->done_fn = async_done;
    t->cb = cb;
    t->privdata = privdata;
    if (out) *out = t;
    take_start(t);
    return 0;
}

static void batch_done(dq_take_req *t, int status, dq_msg **msgs, size_t n) {
    t->batch_cb(t->c, status, status == 1 ? msgs : NULL, status == 1 ? n : 0, t->privdata);
}

int dq__take_batch_async(dq_client *c, const char *queue, const dq_take_opts *opts, int64_t timeout_ms,
                         size_t max, dq_take_many_cb *cb, void *privdata, dq_take_req **out) {
    if (!cb || max == 0 || max > DQ__TAKE_BATCH_MAX)
        return dq__fail(c, DQ_EINVAL, "take between 1 and 256 items");
    int rc;
    dq_take_req *t = take_new(c, queue, opts, timeout_ms, max, &rc);
    if (!t) return rc;
    t->done_fn = batch_done;
    t->batch_cb = cb;
    t->privdata = privdata;
    if (out) *out = t;
    take_start(t);
    return 0;
}

int dq_take_many_async(dq_client *c, const char *queue, const dq_take_opts *opts, int64_t timeout_ms,
                       size_t max, dq_take_many_cb *cb, void *privdata, dq_take_req **out) {
    if (!cb || max == 0 || max > TAKE_MAX) return dq__fail(c, DQ_EINVAL, "take between 1 and 64 items");
    return dq__take_batch_async(c, queue, opts, timeout_ms, max, cb, privdata, out);
}

int dq_take_async(dq_client *c, const char *queue, int64_t timeout_ms, dq_take_cb *cb, void *privdata,
                  dq_take_req **out) {
    return dq_take_async_ex(c, queue, NULL, timeout_ms, cb, privdata, out);
}

void dq_take_cancel(dq_take_req *t) {
    if (!t || t->ending || t->done) return;
    t->ending = 1;
    t->end_status = DQ_ECLOSED;
    /* Never call back from inside this call: go through the loop. */
    t->retrying = 0;
    ev_timer_stop(t->c->loop, &t->timer);
    ev_timer_set(&t->timer, 0, 0);
    ev_timer_start(t->c->loop, &t->timer);
}

void dq__take_free_all(dq_client *c) {
    while (c->takes) {
        dq_take_req *t = c->takes;
        finish(t, DQ_ECLOSED, NULL, 0);
    }
    free(c->result_free);
    c->result_free = NULL;
    c->result_nfree = c->result_cap = c->result_next = 0;
}

/* ------------------------------------------------------------ synchronous */

typedef struct sync_take {
    int done, status;
    dq_msg **out;
    size_t max, n;
} sync_take;

static void sync_done(dq_take_req *t, int status, dq_msg **msgs, size_t n) {
    sync_take *s = t->privdata;
    s->status = status;
    for (size_t i = 0; i < n; i++) s->out[s->n++] = msgs[i];
    s->done = 1;
}

int dq_take_many(dq_client *c, const char *queue, const dq_take_opts *opts, int64_t timeout_ms,
                 dq_msg **msgs, size_t max) {
    if (dq__not_in_callback(c)) return DQ_EBUSY;
    if (!msgs || max == 0 || max > TAKE_MAX)
        return dq__fail(c, DQ_EINVAL, "take between 1 and 64 items");
    sync_take s = {0, 0, msgs, max, 0};
    int rc;
    dq_take_req *t = take_new(c, queue, opts, timeout_ms, max, &rc);
    if (!t) return rc;
    t->done_fn = sync_done;
    t->privdata = &s;
    take_start(t);
    dq__wait(c, &s.done);
    if (s.status == 1) return (int)s.n;
    return s.status;
}

int dq_take(dq_client *c, const char *queue, int64_t timeout_ms, dq_msg **msg) {
    *msg = NULL;
    int n = dq_take_many(c, queue, NULL, timeout_ms, msg, 1);
    return n > 0 ? 1 : n;
}
