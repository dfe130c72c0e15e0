/*
 * worker.c - the README's second example: a worker that handles the items of
 * one queue as they come due, reliably, until SIGINT or SIGTERM.
 *
 * Workers always take with a lease: an item stays in Redis, in flight, until
 * the handler is done with it. dq_worker_done(w, msg, 0) acks it (gone for
 * good); dq_worker_fail (or a non-zero status) nacks it: it comes back after
 * the client's backoff (1 s, 2 s, 4 s, ... up to 10 min, with jitter) and
 * after max_attempts deliveries it becomes a dead letter. A handler that
 * never finishes, or a process that dies, lets the lease run out: the item is
 * delivered again.
 *
 * usage: worker QUEUE [URL]   default $DELAYQ_REDIS, else redis://127.0.0.1:6379
 * Try it with:
 *   delayq offer QUEUE 2s "hello in two seconds"
 *   delayq offer QUEUE 0 "fail: retried 3 times, then a dead letter"
 *   delayq dead QUEUE list
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "delayq.h"

/* Runs on the loop for each item; the handler owns msg until dq_worker_done
 * or dq_worker_fail (which may also come later, from another callback, as
 * long as it comes before the lease runs out). */
static void handle(dq_worker *w, dq_msg *msg, void *privdata) {
    (void)privdata;
    printf("%s %s (attempt %d): %.*s\n", msg->queue, msg->id, msg->attempt, (int)msg->payload_len,
           (const char *)msg->payload);
    fflush(stdout);
    if (msg->payload_len >= 4 && memcmp(msg->payload, "fail", 4) == 0)
        dq_worker_fail(w, msg, "the payload asked to fail"); /* nack: retried with backoff */
    else dq_worker_done(w, msg, 0);                          /* ack: done for good */
}

static void on_signal(struct ev_loop *loop, ev_signal *sig, int revents) {
    (void)loop;
    (void)revents;
    dq_stop(sig->data); /* dq_run returns once this callback is done */
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: worker QUEUE [URL]\n");
        return 2;
    }
    const char *queue = argv[1];
    const char *url = argc > 2 ? argv[2] : getenv("DELAYQ_REDIS");
    dq_client *c = dq_client_new(NULL, NULL);
    if (!c) return 1;
    int rc = dq_connect(c, url ? url : "redis://127.0.0.1:6379");
    if (rc < 0) {
        fprintf(stderr, "connect: %s: %s\n", dq_strerror(rc), dq_client_errstr(c));
        dq_client_free(c);
        return 3;
    }
    /* Each item is in flight for at most 30 s per delivery, and is tried 3
     * times before it becomes a dead letter. Up to 4 messages in hand at
     * once; the worker also schedules the queue (flags 0). */
    dq_take_opts opts = {.lease_ms = 30000, .max_attempts = 3};
    dq_worker *w = dq_worker_start_ex(c, queue, 4, 0, &opts, handle, NULL);
    if (!w) {
        fprintf(stderr, "worker: %s\n", dq_client_errstr(c));
        dq_client_free(c);
        return 2;
    }
    ev_signal sigint, sigterm;
    ev_signal_init(&sigint, on_signal, SIGINT);
    ev_signal_init(&sigterm, on_signal, SIGTERM);
    sigint.data = sigterm.data = c;
    ev_signal_start(dq_client_loop(c), &sigint);
    ev_signal_start(dq_client_loop(c), &sigterm);

    dq_run(c); /* until dq_stop() */

    ev_signal_stop(dq_client_loop(c), &sigint);
    ev_signal_stop(dq_client_loop(c), &sigterm);
    dq_worker_counters wc;
    dq_worker_get_counters(w, &wc);
    dq_worker_stop(w); /* takes nothing more; w may be freed from here on */
    /* The acks and nacks of the last handlers may not have reached Redis
     * yet, and dq_client_free does not wait for them (their items would come
     * back when their leases run out). A synchronous call goes through the
     * same command connection after them, so once it returns they are done. */
    int64_t dead = 0;
    rc = dq_dead_count(c, queue, &dead);
    if (rc < 0) fprintf(stderr, "dead count: %s\n", dq_client_errstr(c));
    fprintf(stderr,
            "worker: %llu taken, %llu acked, %llu nacked, %llu stale; %lld dead letters "
            "in %s\n",
            (unsigned long long)wc.taken, (unsigned long long)wc.succeeded,
            (unsigned long long)wc.failed, (unsigned long long)wc.stale, (long long)dead, queue);
    dq_client_free(c);
    return 0;
}
