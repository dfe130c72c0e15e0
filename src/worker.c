/*
 * worker.c - runs a handler for every item of a queue with up to N messages
 * in hand at once: N async takes (each on its own blocking connection) keep
 * the pipeline full, and a message counts until dq_worker_done.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct dq_worker {
    dq_worker *next;
    dq_client *c;
    char queue[DQ_QUEUE_MAX + 1];
    int concurrency;
    int waiting;        /* takes outstanding */
    int stopping;
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

static void maybe_free(dq_worker *w) {
    if (!w->stopping || w->waiting > 0 || w->counters.in_hand > 0) return;
    unlink_worker(w);
    free(w->reqs);
    free(w);
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
    if (status == 1) {
        w->counters.taken++;
        w->counters.in_hand++;
        w->handler(w, msg, w->privdata); /* a popped message is always handled */
    } else if (status < 0 && status != DQ_ECLOSED) {
        dq__log(c, "worker %s: take failed: %s", w->queue, c->errstr);
    }
    if (w->stopping) maybe_free(w);
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
        if (dq_take_async(w->c, w->queue, -1, on_take, s, &w->reqs[i]) != 0) {
            free(s);
            return;
        }
        w->waiting++;
    }
}

dq_worker *dq_worker_start(dq_client *c, const char *queue, int concurrency, unsigned flags,
                           dq_handler *handler, void *privdata) {
    if (!queue || !dq__queue_valid(queue)) {
        dq__fail(c, DQ_EINVAL, "invalid queue name '%s'", queue ? queue : "(null)");
        return NULL;
    }
    if (concurrency < 1 || concurrency > 10000 || !handler || (flags & ~DQ_WORKER_NO_SCHEDULER)) {
        dq__fail(c, DQ_EINVAL, "worker needs a handler and a concurrency of 1 to 10000");
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
    w->concurrency = concurrency;
    w->handler = handler;
    w->privdata = privdata;
    w->next = c->workers;
    c->workers = w;
    refill(w);
    return w;
}

void dq_worker_done(dq_worker *w, dq_msg *msg, int status) {
    dq_msg_free(msg);
    w->counters.in_hand--;
    if (status == 0) w->counters.succeeded++;
    else w->counters.failed++;
    if (w->stopping) maybe_free(w);
    else refill(w);
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
    /* Takes end with DQ_ECLOSED when the client frees them; a worker still
     * holding messages is freed here, as its handler can no longer finish. */
    for (dq_worker *w = c->workers; w; w = w->next) w->stopping = 1;
    dq__take_free_all(c);
    while (c->workers) {
        dq_worker *w = c->workers;
        c->workers = w->next;
        free(w->reqs);
        free(w);
    }
}
