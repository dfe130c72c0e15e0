/*
 * serve_work.c - the work thread of 'delayq serve': the takes of the HTTP
 * API, waiting without holding the server's thread.
 *
 * Owns the takes' client, its loop and the thread that runs it. The server's
 * thread hands a take over (cli_work_take: a list under a mutex, and an
 * ev_async to wake the loop) and suspends its connection; this thread
 * schedules the queue (dq_schedule: serve runs the scheduler of every queue
 * it takes from), starts dq_take_many_async, and when it ends fills the
 * take's answer and calls its done(), which resumes the connection; each
 * queue taken from shows serve as its consumer ('delayq consumers'). The
 * client is used by this thread alone, from the moment it starts until it
 * is joined (then cli_work_stop frees it).
 */
#include <ev.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/serve/serve.h"

/* A take under way: its dq_take_req, so that a stop can cancel it, and
 * the look at its client's socket while it waits. */
typedef struct running {
    cli_take *t;
    dq_take_req *req;
    ev_timer gone;
    struct running *prev, *next;
    struct cli_work *w;
} running;

/* How often a waiting take looks whether its client went away (s). */
#define GONE_CHECK_S 0.5

struct cli_work {
    dq_client *c;
    struct ev_loop *loop;
    ev_async wake;
    pthread_t thread;
    pthread_mutex_t mu;
    cli_take *inbox; /* mu's: handed over, not started yet     */
    int stopping;    /* mu's                                   */
    running *head;   /* the thread's: the takes under way      */
    struct taken_from *queues; /* the thread's: queues it consumes */
};

/* A queue serve's takes consume, registered as its consumer (host:pid) in
 * 'delayq consumers' from the first take on; the client says it leaves
 * when it is freed. */
struct taken_from {
    struct taken_from *next;
    char queue[DQ_QUEUE_MAX + 1];
};

/* Registers serve as a consumer of queue, once. Not being listed costs the
 * take nothing, so a failure is left to the client's log. */
static void consume_from(cli_work *w, const char *queue) {
    for (struct taken_from *q = w->queues; q; q = q->next)
        if (strcmp(q->queue, queue) == 0) return;
    dq_consumer *k;
    struct taken_from *q = calloc(1, sizeof *q);
    if (!q || dq_consumer_start(w->c, queue, NULL, &k) != 0) {
        free(q);
        return;
    }
    snprintf(q->queue, sizeof q->queue, "%s", queue);
    q->next = w->queues;
    w->queues = q;
}

/* ------------------------------------------------------------ answers */

/* Fills v with {"items": [...]}, each message as 'take --json' prints it
 * (cli_msg_json) without "queue" (the path names it), so an id or payload
 * that is not UTF-8 shows as its base64 twin; frees the messages. */
static void answer_items(cli_view *v, dq_msg **msgs, size_t n) {
    json_t *items = json_array(), *body = json_object();
    int lost = !items || !body;
    for (size_t i = 0; i < n; i++) {
        if (!lost && json_array_append_new(items, cli_msg_json(msgs[i], 0))) lost = 1;
        dq_msg_free(msgs[i]);
    }
    if (lost) json_decref(items);
    else lost = json_object_set_new(body, "items", items) != 0; /* takes items either way */
    if (lost) {
        json_decref(body);
        cli_view_error(v, 500, "out of memory: the %zu items taken cannot be shown", n);
    } else {
        cli_view_json(v, 200, body);
    }
}

static void finish(cli_work *w, running *r) {
    ev_timer_stop(w->loop, &r->gone);
    if (r->prev) r->prev->next = r->next;
    else w->head = r->next;
    if (r->next) r->next->prev = r->prev;
    cli_take *t = r->t;
    free(r);
    t->done(t); /* t is not ours from here on */
}

/* Ends the loop once a stop has cancelled every take. */
static void maybe_end(cli_work *w) {
    pthread_mutex_lock(&w->mu);
    int stop = w->stopping;
    pthread_mutex_unlock(&w->mu);
    if (stop && !w->head) {
        ev_async_stop(w->loop, &w->wake);
        ev_break(w->loop, EVBREAK_ALL);
    }
}

static void on_taken(dq_client *c, int status, dq_msg **msgs, size_t n, void *privdata) {
    running *r = privdata;
    cli_work *w = r->w;
    if (status >= 0) {
        answer_items(&r->t->v, msgs, n);
    } else if (status == DQ_ECLOSED) {
        cli_view_error(&r->t->v, 503, "the server is stopping");
    } else {
        cli_view_failure(&r->t->v, c, status);
    }
    finish(w, r);
    maybe_end(w);
}

/* ------------------------------------------------------------ the thread */

/* A waiting take whose client closed its connection (or reset it) is
 * cancelled: libmicrohttpd does not watch a suspended connection, so
 * without this the take would wait on and pop items nobody receives, lost
 * when taken without a lease. A cancel loses nothing (dq_take_cancel): an
 * item already on its way is answered, to a socket that may be gone, as
 * before. The socket stays open until the take's answer is sent. */
static void on_gone_check(struct ev_loop *loop, ev_timer *tm, int revents) {
    running *r = tm->data;
    (void)revents;
    struct pollfd p = {.fd = r->t->fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) == 1 && p.revents & (POLLRDHUP | POLLHUP | POLLERR)) {
        ev_timer_stop(loop, tm);
        if (r->req) dq_take_cancel(r->req);
    }
}

static void start_take(cli_work *w, cli_take *t) {
    running *r = calloc(1, sizeof *r);
    dq_take_opts opts;
    int rc = r ? dq_schedule(w->c, t->queue) : DQ_ENOMEM;
    if (!r) {
        cli_view_error(&t->v, 500, "out of memory");
        t->done(t);
        return;
    }
    r->t = t;
    r->w = w;
    ev_timer_init(&r->gone, on_gone_check, GONE_CHECK_S, GONE_CHECK_S);
    r->gone.data = r;
    if (t->fd >= 0 && t->args.wait_ms > 0) ev_timer_start(w->loop, &r->gone);
    r->next = w->head;
    if (w->head) w->head->prev = r;
    w->head = r;
    dq_take_opts_init(&opts);
    opts.lease_ms = t->args.lease_ms;
    if (!rc) consume_from(w, t->queue);
    if (!rc)
        rc = dq_take_many_async(w->c, t->queue, &opts, t->args.wait_ms, t->args.count, on_taken, r,
                                &r->req);
    if (rc) {
        cli_view_failure(&t->v, w->c, rc);
        finish(w, r);
    }
}

static void on_wake(struct ev_loop *loop, ev_async *wake, int revents) {
    cli_work *w = wake->data;
    (void)loop, (void)revents;
    pthread_mutex_lock(&w->mu);
    cli_take *t = w->inbox;
    int stop = w->stopping;
    w->inbox = NULL;
    pthread_mutex_unlock(&w->mu);
    cli_take *fifo = NULL; /* the inbox is newest first */
    while (t) {
        cli_take *next = t->next;
        t->next = fifo;
        fifo = t;
        t = next;
    }
    t = fifo;
    while (t) {
        cli_take *next = t->next;
        start_take(w, t);
        t = next;
    }
    if (stop)
        for (running *r = w->head; r; r = r->next)
            if (r->req) dq_take_cancel(r->req); /* on_taken runs later, with what came or DQ_ECLOSED */
    maybe_end(w);
}

static void *run(void *arg) {
    cli_work *w = arg;
    ev_run(w->loop, 0);
    return NULL;
}

cli_work *cli_work_start(dq_client *c) {
    cli_work *w = calloc(1, sizeof *w);
    if (!w) {
        cli_err("serve: out of memory");
        return NULL;
    }
    w->c = c;
    w->loop = dq_client_loop(c);
    pthread_mutex_init(&w->mu, NULL);
    ev_async_init(&w->wake, on_wake);
    w->wake.data = w;
    ev_async_start(w->loop, &w->wake);
    if (pthread_create(&w->thread, NULL, run, w) != 0) {
        cli_err("serve: cannot start the work thread");
        ev_async_stop(w->loop, &w->wake);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return NULL;
    }
    return w;
}

int cli_work_take(cli_work *w, cli_take *t) {
    pthread_mutex_lock(&w->mu);
    int stop = w->stopping;
    if (!stop) {
        t->next = w->inbox;
        w->inbox = t;
    }
    pthread_mutex_unlock(&w->mu);
    if (stop) return -1;
    ev_async_send(w->loop, &w->wake);
    return 0;
}

void cli_work_stop(cli_work *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stopping = 1;
    pthread_mutex_unlock(&w->mu);
    ev_async_send(w->loop, &w->wake);
    pthread_join(w->thread, NULL);
}

void cli_work_free(cli_work *w) {
    if (!w) return;
    pthread_mutex_destroy(&w->mu);
    while (w->queues) {
        struct taken_from *q = w->queues;
        w->queues = q->next;
        free(q);
    }
    free(w);
}
