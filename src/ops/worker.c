/*
 * worker.c - runs a handler for every item of a queue with up to N messages
 * in hand at once. A message counts until dq_worker_done, which acks it
 * (success) or nacks it with the client's backoff (failure). A handler that
 * never finishes, or a process that dies, leaves the lease to run out: the
 * item comes back.
 *
 * Batching: the worker asks for every free place in one take (up to 64
 * messages a script call, at most WORKER_TAKES takes out at once), and the
 * acks of dq_worker_done are gathered and sent as one script call when the
 * loop is about to poll (or once 64 are waiting). Both happen from one
 * prepare watcher, so a burst of handlers finishing in one loop iteration
 * costs one ack call and one take call, not one of each per message. Nacks
 * (failures, the rare case) go out one by one at once.
 *
 * Taking ahead: each take and each ack costs Redis a fixed part per call,
 * as much as some 20 items (BENCHMARKS.md, "The worker's gap is fixed cost
 * per call"), so a round of 256 costs less per item than a round of 32.
 * While handlers finish before they return (dq_worker_done inside the
 * handler) and quickly, concurrency bounds nothing but the take's size, so
 * the worker then takes up to AHEAD_BATCH whatever its concurrency. The
 * messages past the free places wait in the worker, in order, and go to the
 * handler as places free; their leases run meanwhile, which is why a take
 * ahead holds no more than the last round's pace handles within
 * QUICK_ROUND_S, and the grant ends with the first round that is not
 * quick. AHEAD_BYTES keeps a take ahead (and so its lease record in Redis)
 * to about a megabyte of payloads.
 *
 * Settling late: an ack or nack that comes after its lease ran out (a
 * handler, or the whole process, paused past it) is refused by the server
 * as stale. Its message is kept until the reply (a settle_call), so the
 * log line and the program's dq_stale_fn can name the item.
 *
 * Lifetime: the worker stays allocated while anything can still call into
 * it: a handler running (busy), takes waiting, messages in hand, or ack/nack
 * replies to come (settling). dq_worker_stop only marks it.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define WORKER_TAKES 2      /* takes out at once: one can wait while one returns */
#define TAKE_BATCH 64       /* messages one take asks for at most                */
#define AHEAD_BATCH DQ__TAKE_BATCH_MAX /* messages a take ahead asks for at most */
#define QUICK_ROUND_S 0.010 /* the time a take ahead's messages take to handle, at most */
#define AHEAD_BYTES (1 << 20) /* the payload bytes a take ahead brings, about */
/* Waiting messages: fewer than AHEAD_BATCH (messages wait only past the
 * places granted ahead) plus one take's, as takes ask for no more places
 * than are free or granted. */
#define WAIT_MAX (2 * AHEAD_BATCH)

typedef struct take_slot {
    struct dq_worker *w;
    int index;
} take_slot;

struct dq_worker {
    dq_worker *next;
    dq_client *c;
    char queue[DQ_QUEUE_MAX + 1];
    dq_take_opts opts;
    int concurrency;
    int asked;          /* messages the outstanding takes may bring  */
    int ahead;          /* places granted past concurrency (grant_ahead) */
    dq_msg *waiting[WAIT_MAX]; /* taken, not handed yet: a ring, in order */
    int first_waiting, nwaiting;
    int settling;       /* ack/nack calls sent, replies to come      */
    int busy;           /* inside the handler: never free now        */
    int stopping;
    int orphaned;       /* the client is going: free when settled    */
    dq_handler *handler;
    void *privdata;
    dq_take_req *reqs[WORKER_TAKES]; /* outstanding takes, to cancel on stop */
    int req_max[WORKER_TAKES];
    dq_msg *acks[DQ__ACK_BATCH];     /* done, their ack not sent yet     */
    size_t nacks;
    ev_prepare flush;   /* sends the acks and refills before the loop polls */
    ev_timer retry;     /* a pause after a failed take                  */
    dq__backoff backoff; /* takes failed in a row: the pause grows      */
    dq_worker_counters counters;
    dq_consumer *consumer; /* its beats (consumer.c), NULL once it leaves */
    dq_stale_fn *on_stale; /* dq_worker_set_on_stale's, or NULL            */
    void *stale_data;
};

/* The messages of one ack or nack call, kept (owned) until its reply. */
typedef struct settle_call {
    dq_worker *w;
    size_t n;
    dq_msg *msgs[];
} settle_call;

static void refill(dq_worker *w);
static void flush_acks(dq_worker *w);
static int hand_waiting(dq_worker *w);

static void unlink_worker(dq_worker *w) {
    for (dq_worker **p = &w->c->workers; *p; p = &(*p)->next) {
        if (*p == w) {
            *p = w->next;
            return;
        }
    }
}

/* The worker leaves the consumers' list. */
static void unregister(dq_worker *w) {
    dq_consumer_stop(w->consumer);
    w->consumer = NULL;
}

static void release(dq_worker *w) {
    unregister(w);
    ev_prepare_stop(w->c->loop, &w->flush);
    ev_timer_stop(w->c->loop, &w->retry);
    for (size_t i = 0; i < w->nacks; i++) dq_msg_free(w->acks[i]);
    /* Only a worker whose client is going has messages still waiting:
     * they can no longer be settled, and their leases will run out. */
    for (int i = 0; i < w->nwaiting; i++) dq_msg_free(w->waiting[(w->first_waiting + i) % WAIT_MAX]);
    free(w);
}

static void maybe_free(dq_worker *w) {
    if (w->busy || w->settling > 0) return;
    if (w->orphaned) {
        release(w);
        return;
    }
    if (!w->stopping || w->asked > 0 || w->counters.in_hand > 0 || w->nwaiting > 0) return;
    unlink_worker(w);
    release(w);
}

/* Asks the prepare watcher to flush acks and refill before the next poll. */
static void later(dq_worker *w) {
    if (!ev_is_active(&w->flush)) ev_prepare_start(w->c->loop, &w->flush);
}

static void on_prepare(struct ev_loop *loop, ev_prepare *p, int revents) {
    (void)revents;
    dq_worker *w = p->data;
    ev_prepare_stop(loop, p);
    hand_waiting(w);
    flush_acks(w);
    if (w->stopping) maybe_free(w);
    else refill(w);
}

static void on_retry(struct ev_loop *loop, ev_timer *t, int revents) {
    (void)loop, (void)revents;
    refill(t->data);
}

/* ------------------------------------------------------------ taking */

/* Pauses the takes for wait s after a failed one (the backoff's: the
 * take itself waits out the errors that persist, so this is for the rest).
 * The timer is set again each time: a libev timer that has fired keeps
 * only what was left of its time (nothing), so restarting it alone would
 * retry at once, in a busy loop for as long as Redis refuses. */
static void pause_takes(dq_worker *w, double wait) {
    if (w->stopping || w->orphaned || ev_is_active(&w->retry)) return;
    ev_timer_set(&w->retry, wait, 0);
    ev_timer_start(w->c->loop, &w->retry);
}

/* Hands waiting messages to the handler, in order, while there are free
 * places; returns how many. A taken message is always handled, even if a
 * handler stops the worker on the way. */
static int hand_waiting(dq_worker *w) {
    int handed = 0;
    w->busy++;
    while (w->nwaiting > 0 && w->counters.in_hand < w->concurrency) {
        dq_msg *m = w->waiting[w->first_waiting];
        w->first_waiting = (w->first_waiting + 1) % WAIT_MAX;
        w->nwaiting--;
        w->counters.in_hand++;
        handed++;
        w->handler(w, m, w->privdata);
    }
    w->busy--;
    return handed;
}

/* Sets the places the next takes may ask for past concurrency, from the
 * round just handed out: handed messages of bytes payload bytes in all, of
 * which settled were done before their handler returned, in took seconds.
 * Granted only when every one was and none waits: as many as make a take of
 * at most AHEAD_BATCH, handled within QUICK_ROUND_S at that pace (so a
 * message waits in the worker about that long at most), with AHEAD_BYTES of
 * payloads. Any other round ends the grant. */
static void grant_ahead(dq_worker *w, int handed, uint64_t settled, size_t bytes, double took) {
    if (handed == 0 || settled < (uint64_t)handed || w->nwaiting > 0) {
        w->ahead = 0; /* the handlers hold on to their messages */
        return;
    }
    double per_s = took / handed, per_bytes = (double)bytes / handed + 1;
    double most = AHEAD_BATCH;
    if (per_s * most > QUICK_ROUND_S) most = QUICK_ROUND_S / per_s;
    if (per_bytes * most > AHEAD_BYTES) most = AHEAD_BYTES / per_bytes;
    w->ahead = most > w->concurrency ? (int)most - w->concurrency : 0;
}

/* Queues a take's messages behind those waiting, then hands out what the
 * free places allow, and grants the next takes their places ahead. */
static void hand_out(dq_worker *w, dq_msg **msgs, size_t n) {
    uint64_t settled0 = w->counters.succeeded + w->counters.failed;
    double t0 = ev_time();
    size_t bytes = 0;
    int handed = 0;
    for (size_t i = 0; i < n; i++) {
        bytes += msgs[i]->payload_len;
        if (w->nwaiting == WAIT_MAX) {
            /* Never so (see WAIT_MAX); were it, handled past concurrency
             * rather than lost. */
            w->counters.in_hand++;
            handed++;
            w->handler(w, msgs[i], w->privdata);
            continue;
        }
        w->waiting[(w->first_waiting + w->nwaiting) % WAIT_MAX] = msgs[i];
        w->nwaiting++;
    }
    handed += hand_waiting(w);
    grant_ahead(w, handed, w->counters.succeeded + w->counters.failed - settled0, bytes, ev_time() - t0);
}

static void on_take(dq_client *c, int status, dq_msg **msgs, size_t n, void *privdata) {
    take_slot *s = privdata;
    dq_worker *w = s->w;
    w->reqs[s->index] = NULL;
    w->asked -= w->req_max[s->index];
    free(s);
    w->busy++;
    if (status == 1) {
        w->counters.taken += n;
        dq__backoff_ok(c, &w->backoff);
        hand_out(w, msgs, n);
    } else if (status == DQ_EAUTH && dq__text_is_refusal(c->errstr)) {
        dq__refused(c, "worker %s: take refused: %s", w->queue, c->errstr);
        pause_takes(w, dq__backoff_next(c, &w->backoff, c->errstr));
    } else if (status != DQ_ECLOSED && !ev_is_active(&w->retry)) {
        pause_takes(w, dq__backoff_failed(c, &w->backoff, c->errstr, "worker %s: take failed: %s",
                                          w->queue, c->errstr));
    }
    w->busy--;
    if (w->stopping || w->orphaned) maybe_free(w);
    else later(w);
}

/* Asks for every free place (and those granted ahead), in takes of up to
 * TAKE_BATCH (AHEAD_BATCH while places are granted ahead). */
static void refill(dq_worker *w) {
    for (int i = 0; i < WORKER_TAKES; i++) {
        int free_places = w->concurrency + w->ahead - w->counters.in_hand - w->nwaiting - w->asked;
        if (w->stopping || ev_is_active(&w->retry) || free_places <= 0) return;
        if (w->reqs[i]) continue;
        int batch = w->ahead > 0 ? AHEAD_BATCH : TAKE_BATCH;
        int max = free_places < batch ? free_places : batch;
        take_slot *s = malloc(sizeof *s);
        if (!s) return;
        s->w = w;
        s->index = i;
        if (dq__take_batch_async(w->c, w->queue, &w->opts, -1, (size_t)max, on_take, s, &w->reqs[i]) !=
            0) {
            free(s);
            return;
        }
        w->req_max[i] = max;
        w->asked += max;
    }
}

dq_worker *dq_worker_start_ex(dq_client *c, const char *queue, int concurrency, unsigned flags,
                              const dq_take_opts *opts, dq_handler *handler, void *privdata) {
    if (dq__check_queue(c, queue)) return NULL;
    if (concurrency < 1 || concurrency > 10000 || !handler || (flags & ~DQ_WORKER_NO_SCHEDULER)) {
        dq__fail(c, DQ_EINVAL, "worker needs a handler and a concurrency of 1 to 10000");
        return NULL;
    }
    dq_take_opts def;
    dq_take_opts_init(&def);
    if (!opts) opts = &def;
    if ((opts->lease_ms <= 0 && opts->lease_ms != DQ_QUEUE_SETTING) ||
        opts->max_attempts < DQ_QUEUE_SETTING) {
        dq__fail(c, DQ_EINVAL, "worker needs a lease (> 0, or the queue's) and max attempts >= 0");
        return NULL;
    }
    if (!(flags & DQ_WORKER_NO_SCHEDULER) && dq_schedule(c, queue) != 0) return NULL;
    dq_worker *w = calloc(1, sizeof *w);
    if (!w) {
        dq__fail(c, DQ_ENOMEM, "out of memory");
        return NULL;
    }
    w->c = c;
    snprintf(w->queue, sizeof w->queue, "%s", queue);
    w->opts = *opts;
    w->concurrency = concurrency;
    w->handler = handler;
    w->privdata = privdata;
    ev_prepare_init(&w->flush, on_prepare);
    w->flush.data = w;
    ev_timer_init(&w->retry, on_retry, 0, 0);
    w->retry.data = w;
    w->next = c->workers;
    c->workers = w;
    /* Visible to 'delayq consumers' with its messages in hand; a worker
     * that cannot register still works. */
    if (dq_consumer_start(c, queue, opts->holder, &w->consumer) == 0)
        dq__consumer_count(w->consumer, &w->counters.in_hand);
    refill(w);
    return w;
}

dq_worker *dq_worker_start(dq_client *c, const char *queue, int concurrency, unsigned flags,
                           dq_handler *handler, void *privdata) {
    return dq_worker_start_ex(c, queue, concurrency, flags, NULL, handler, privdata);
}

/* ------------------------------------------------------------ settling */

/* A call for the n messages at msgs (taken over), or NULL (out of memory:
 * the messages are freed). */
static settle_call *settle_call_new(dq_worker *w, dq_msg **msgs, size_t n) {
    settle_call *s = malloc(sizeof *s + n * sizeof *msgs);
    if (!s) {
        for (size_t i = 0; i < n; i++) dq_msg_free(msgs[i]);
        return NULL;
    }
    s->w = w;
    s->n = n;
    memcpy(s->msgs, msgs, n * sizeof *msgs);
    return s;
}

static void settle_call_free(settle_call *s) {
    for (size_t i = 0; i < s->n; i++) dq_msg_free(s->msgs[i]);
    free(s);
}

/* The server refused m's ack (acked 1) or nack as stale: say which item, and
 * tell the program. The worker stays while its hook runs (busy). */
static void stale(dq_worker *w, const dq_msg *m, int acked) {
    char id[200];
    dq__escape(id, sizeof id, m->id, m->id_len, 64, DQ__ESC_UTF8); /* an id may hold any byte */
    w->counters.stale++;
    dq__log(w->c,
            "worker %s: the %s of %s (attempt %d) came after its lease had run out: refused, the "
            "item is delivered again",
            w->queue, acked ? "ack" : "nack", id, m->attempt);
    if (!w->on_stale) return;
    w->busy++;
    w->on_stale(w, m, acked, w->stale_data);
    w->busy--;
}

static void log_settle_failure(dq_worker *w, int status) {
    if (status == DQ_ENOTDURABLE) {
        dq__log(w->c, "worker %s: ack/nack made but not confirmed by the replicas: %s", w->queue,
                w->c->errstr);
    } else if (status < 0 && status != DQ_ECLOSED) {
        dq__log_error(w->c, w->c->errstr,
                      "worker %s: ack/nack failed (%s); the lease will run out and "
                      "the item come back",
                      w->queue, w->c->errstr);
    }
}

static void on_settled(dq_client *c, int status, void *privdata) {
    (void)c;
    settle_call *s = privdata;
    dq_worker *w = s->w;
    if (status < 0) w->counters.refused++;
    if (status == 0) stale(w, s->msgs[0], 0);
    else log_settle_failure(w, status);
    settle_call_free(s);
    w->settling--;
    if (w->stopping || w->orphaned) maybe_free(w);
}

static void on_acked(dq_client *c, int status, const int *results, size_t n, void *privdata) {
    (void)c;
    settle_call *s = privdata;
    dq_worker *w = s->w;
    if (status < 0) {
        /* The call failed as a whole: every ack of it is refused. */
        w->counters.refused += n;
        log_settle_failure(w, status);
    }
    /* Each result on its own: one refused ack never hides the others. */
    for (size_t i = 0; results && i < n && i < s->n; i++) {
        if (results[i] == 0) {
            stale(w, s->msgs[i], 1);
        } else if (results[i] < 0) {
            w->counters.refused++;
            dq__log(w->c,
                    "worker %s: an ack was refused (invalid id or token); its lease will "
                    "run out",
                    w->queue);
        }
    }
    settle_call_free(s);
    w->settling--;
    if (w->stopping || w->orphaned) maybe_free(w);
}

static void flush_acks(dq_worker *w) {
    size_t n = w->nacks;
    if (n == 0) return;
    w->nacks = 0;
    const char *ids[DQ__ACK_BATCH], *tokens[DQ__ACK_BATCH];
    for (size_t i = 0; i < n; i++) ids[i] = w->acks[i]->id, tokens[i] = w->acks[i]->token;
    settle_call *s = settle_call_new(w, w->acks, n);
    if (s && dq__ack_many_async(w->c, w->queue, ids, tokens, n, on_acked, s) == 0) {
        w->settling++;
        return;
    }
    w->counters.refused += n;
    dq__log(w->c, "worker %s: cannot ack %zu now (%s); their leases will run out", w->queue, n,
            s ? w->c->errstr : "out of memory");
    if (s) settle_call_free(s);
}

/* Sends msg's nack (taken over: freed once its reply came). */
static void nack(dq_worker *w, dq_msg *msg, const char *error) {
    char id[200];
    dq__escape(id, sizeof id, msg->id, msg->id_len, 64, DQ__ESC_UTF8);
    settle_call *s = settle_call_new(w, &msg, 1); /* msg is s's (or freed) from here */
    if (s && dq__nack_async(w->c, w->queue, msg->id, msg->token, -1, error, msg->attempt, on_settled,
                            s) == 0) {
        w->settling++;
        return;
    }
    w->counters.refused++;
    dq__log(w->c, "worker %s: cannot nack %s now (%s); its lease will run out", w->queue, id,
            s ? w->c->errstr : "out of memory");
    if (s) settle_call_free(s);
}

static void settle(dq_worker *w, dq_msg *msg, int ok, const char *error) {
    if (msg->token && ok) {
        if (w->nacks == DQ__ACK_BATCH) flush_acks(w);
        w->acks[w->nacks++] = msg; /* freed once its ack's reply came */
    } else {
        if (msg->token) nack(w, msg, error);
        else dq_msg_free(msg);
    }
    w->counters.in_hand--;
    if (ok) w->counters.succeeded++;
    else w->counters.failed++;
    if (w->stopping && w->nwaiting == 0) {
        flush_acks(w);
        maybe_free(w);
    } else {
        later(w); /* hands a waiting message the place, and sends the acks */
    }
}

void dq_worker_done(dq_worker *w, dq_msg *msg, int status) {
    settle(w, msg, status == 0, status == 0 ? NULL : "handler failed");
}

void dq_worker_fail(dq_worker *w, dq_msg *msg, const char *error) {
    settle(w, msg, 0, error ? error : "handler failed");
}

void dq_worker_stop(dq_worker *w) {
    if (w->stopping) return;
    w->stopping = 1;
    flush_acks(w);
    ev_timer_stop(w->c->loop, &w->retry);
    for (int i = 0; i < WORKER_TAKES; i++)
        if (w->reqs[i]) dq_take_cancel(w->reqs[i]);
    maybe_free(w);
}

void dq_worker_get_counters(const dq_worker *w, dq_worker_counters *out) { *out = w->counters; }

void dq_worker_set_on_stale(dq_worker *w, dq_stale_fn *fn, void *privdata) {
    w->on_stale = fn;
    w->stale_data = privdata;
}

void dq__worker_free_all(dq_client *c) {
    /* The takes end with DQ_ECLOSED when the client frees them. Messages
     * still in hand can no longer be settled (their leases will run out);
     * gathered acks go out now, and a worker with acks in flight is freed
     * when their replies come, or fail as the command connection closes,
     * within dq_client_free. */
    for (dq_worker *w = c->workers; w; w = w->next) {
        w->stopping = 1;
        flush_acks(w);
        unregister(w); /* before the client's consumers go */
    }
    dq__take_free_all(c);
    while (c->workers) {
        dq_worker *w = c->workers;
        c->workers = w->next;
        w->orphaned = 1;
        maybe_free(w);
    }
}
