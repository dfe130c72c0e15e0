/*
 * worker.c - runs a handler for every item of a queue with up to N messages
 * in hand at once: N async takes with a lease keep the pipeline full, and a
 * message counts until dq_worker_done, which acks it (success) or nacks it
 * with the client's backoff (failure). A handler that never finishes, or a
 * process that dies, leaves the lease to run out: the item comes back.
 *
 * Lifetime: the worker stays allocated while anything can still call into
 * it: a handler running (busy), takes waiting, messages in hand, or ack/nack
 * replies to come (settling). dq_worker_stop only marks it.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct dq_worker {
    dq_worker *next;
    dq_client *c;
    char queue[DQ_QUEUE_MAX + 1];
    dq_take_opts opts;
    int concurrency;
    int waiting;        /* takes outstanding                         */
    int settling;       /* acks/nacks sent, replies to come          */
    int busy;           /* inside the handler: never free now        */
    int stopping;
    int orphaned;       /* the client is going: free when settled    */
    dq_handler *handler;
    void *privdata;
    dq_take_req **reqs; /* outstanding takes, to cancel them on stop */
    dq_worker_counters counters;
};

static void refill(dq_worker *w);

static void unlink_worker(dq_worker *w) {
    for (dq_worker **p = &w->c->workers; *p; p = &(*p)->next) {
        if (*p == w) {
            *p = w->next;
            return;
        }
    }
}

static void release(dq_worker *w) {
    free(w->reqs);
    free(w);
}

static void maybe_free(dq_worker *w) {
    if (w->busy || w->settling > 0) return;
    if (w->orphaned) {
        release(w);
        return;
    }
    if (!w->stopping || w->waiting > 0 || w->counters.in_hand > 0) return;
    unlink_worker(w);
    release(w);
}

typedef struct slot {
    dq_worker *w;
    int index;
} slot;

static void on_take(dq_client *c, int status, dq_msg *msg, void *privdata) {
    slot *s = privdata;
    dq_worker *w = s->w;
    w->reqs[s->index] = NULL;
    free(s);
    w->waiting--;
    w->busy++;
    if (status == 1) {
        w->counters.taken++;
        w->counters.in_hand++;
        w->handler(w, msg, w->privdata); /* a taken message is always handled */
    } else if (status < 0 && status != DQ_ECLOSED) {
        dq__log(c, "worker %s: take failed: %s", w->queue, c->errstr);
    }
    w->busy--;
    if (w->stopping || w->orphaned) maybe_free(w);
    else refill(w);
}

static void refill(dq_worker *w) {
    while (!w->stopping && w->waiting + w->counters.in_hand < w->concurrency) {
        int i = 0;
        while (i < w->concurrency && w->reqs[i]) i++;
        if (i == w->concurrency) return;
        slot *s = malloc(sizeof *s);
        if (!s) return;
        s->w = w;
        s->index = i;
        if (dq_take_async_ex(w->c, w->queue, &w->opts, -1, on_take, s, &w->reqs[i]) != 0) {
            free(s);
            return;
        }
        w->waiting++;
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
    if (w) w->reqs = calloc((size_t)concurrency, sizeof *w->reqs);
    if (!w || !w->reqs) {
        free(w);
        dq__fail(c, DQ_ENOMEM, "out of memory");
        return NULL;
    }
    w->c = c;
    snprintf(w->queue, sizeof w->queue, "%s", queue);
    w->opts = *opts;
    w->concurrency = concurrency;
    w->handler = handler;
    w->privdata = privdata;
    w->next = c->workers;
    c->workers = w;
    refill(w);
    return w;
}

dq_worker *dq_worker_start(dq_client *c, const char *queue, int concurrency, unsigned flags,
                           dq_handler *handler, void *privdata) {
    return dq_worker_start_ex(c, queue, concurrency, flags, NULL, handler, privdata);
}

/* ------------------------------------------------------------ settling */

static void on_settled(dq_client *c, int status, void *privdata) {
    dq_worker *w = privdata;
    w->settling--;
    if (status == 0) {
        w->counters.stale++;
        dq__log(c, "worker %s: lease had run out before ack/nack; the item went elsewhere",
                w->queue);
    } else if (status < 0 && status != DQ_ECLOSED) {
        dq__log(c, "worker %s: ack/nack failed (%s); the lease will run out and the item "
                   "come back", w->queue, c->errstr);
    }
    if (w->stopping || w->orphaned) maybe_free(w);
}

static void settle(dq_worker *w, dq_msg *msg, int ok, const char *error) {
    int rc = 0;
    if (msg->token) {
        rc = ok ? dq__ack_async(w->c, w->queue, msg->id, msg->token, on_settled, w)
                : dq__nack_async(w->c, w->queue, msg->id, msg->token, -1, error, msg->attempt,
                                 on_settled, w);
        if (rc == 0) w->settling++;
        else dq__log(w->c, "worker %s: cannot %s %s now (%s); its lease will run out", w->queue,
                     ok ? "ack" : "nack", msg->id, w->c->errstr);
    }
    dq_msg_free(msg);
    w->counters.in_hand--;
    if (ok) w->counters.succeeded++;
    else w->counters.failed++;
    if (w->stopping) maybe_free(w);
    else refill(w);
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
    for (int i = 0; i < w->concurrency; i++)
        if (w->reqs[i]) dq_take_cancel(w->reqs[i]);
    maybe_free(w);
}

void dq_worker_get_counters(const dq_worker *w, dq_worker_counters *out) { *out = w->counters; }

void dq__worker_free_all(dq_client *c) {
    /* The takes end with DQ_ECLOSED when the client frees them. Messages
     * still in hand can no longer be settled (their leases will run out);
     * a worker with acks in flight is freed when their replies fail as the
     * command connection closes, within dq_client_free. */
    for (dq_worker *w = c->workers; w; w = w->next) w->stopping = 1;
    dq__take_free_all(c);
    while (c->workers) {
        dq_worker *w = c->workers;
        c->workers = w->next;
        w->orphaned = 1;
        maybe_free(w);
    }
}
