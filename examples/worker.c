/*
 * worker.c - the README's second example: a worker that handles the items of
 * one queue as they come due, until SIGINT or SIGTERM.
 *
 * usage: worker QUEUE [URL]   default $DELAYQ_REDIS, else redis://127.0.0.1:6379
 * Try it with: delayq offer QUEUE 2s "hello in two seconds"
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include <ev.h>

#include "delayq.h"

/* Runs on the loop for each due item; the handler owns msg until
 * dq_worker_done (which may also come later, from another callback). */
static void handle(dq_worker *w, dq_msg *msg, void *privdata)
{
    (void)privdata;
    printf("%s %s: %.*s\n", msg->queue, msg->id, (int)msg->payload_len,
           (const char *)msg->payload);
    fflush(stdout);
    dq_worker_done(w, msg, 0);
}

static void on_signal(struct ev_loop *loop, ev_signal *sig, int revents)
{
    (void)loop;
    (void)revents;
    dq_stop(sig->data); /* dq_run returns once this callback is done */
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: worker QUEUE [URL]\n");
        return 2;
    }
    const char *url = argc > 2 ? argv[2] : getenv("DELAYQ_REDIS");
    dq_client *c = dq_client_new(NULL, NULL);
    if (!c)
        return 1;
    int rc = dq_connect(c, url ? url : "redis://127.0.0.1:6379");
    if (rc < 0) {
        fprintf(stderr, "connect: %s: %s\n", dq_strerror(rc), dq_client_errstr(c));
        dq_client_free(c);
        return 3;
    }
    /* 4 messages in hand at most; also schedules the queue (flags 0). */
    dq_worker *w = dq_worker_start(c, argv[1], 4, 0, handle, NULL);
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
    dq_worker_stop(w);
    dq_client_free(c);
    return 0;
}
