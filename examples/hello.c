/*
 * hello.c - the README's first example: a producer and a consumer in one
 * program. Offers three items with different delays, cancels one, then takes
 * the other two as they come due (in due-time order, not offer order).
 *
 * dq_take is the plain take: it hands an item out and forgets it
 * (at-most-once from then on). For at-least-once delivery, take with a lease
 * (dq_take_many with dq_take_opts, or a worker: see worker.c) and ack.
 *
 * usage: hello [URL]     default $DELAYQ_REDIS, else redis://127.0.0.1:6379
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delayq.h"

int main(int argc, char **argv) {
    const char *url = argc > 1 ? argv[1] : getenv("DELAYQ_REDIS");
    dq_client *c = dq_client_new(NULL, NULL); /* NULL loop: a private one */
    if (!c) return 1;
    int rc = dq_connect(c, url ? url : "redis://127.0.0.1:6379");
    if (rc < 0) {
        fprintf(stderr, "connect: %s: %s\n", dq_strerror(rc), dq_client_errstr(c));
        dq_client_free(c);
        return 3;
    }

    /* Producer: three items; ids are ours (NULL would generate one). */
    const char *ids[] = {"hello:1", "hello:2", "hello:3"};
    const char *texts[] = {"second, after 600 ms", "first, after 300 ms", "cancelled"};
    int64_t delays[] = {600, 300, 900};
    for (int i = 0; i < 3; i++) {
        dq_item item = {
            .id = ids[i], .payload = texts[i], .payload_len = strlen(texts[i]), .delay_ms = delays[i]};
        dq_offer_result res;
        rc = dq_offer(c, "hello", &item, &res);
        if (rc < 0) {
            fprintf(stderr, "offer: %s\n", dq_client_errstr(c));
            dq_client_free(c);
            return 3;
        }
        printf("offered %s, due at %lld (Redis server ms)\n", res.id, (long long)res.due_ms);
    }
    /* 1: it was pending and will never be delivered; 0: too late. */
    rc = dq_cancel(c, "hello", "hello:3");
    printf("cancel hello:3 -> %d\n", rc);

    /* Consumer: something must move due items to the ready list. Here the
     * consumer's own client does it; any number of processes may. */
    rc = dq_schedule(c, "hello");
    for (int got = 0; rc == 0 && got < 2;) {
        dq_msg *msg;
        rc = dq_take(c, "hello", 5000, &msg); /* 1 item, 0 timeout, < 0 error */
        if (rc == 1) {
            printf("took %s: %s (ready %lld ms after due)\n", msg->id, (const char *)msg->payload,
                   (long long)(msg->ready_ms - msg->due_ms));
            dq_msg_free(msg);
            got++;
            rc = 0;
        } else if (rc == 0) {
            fprintf(stderr, "nothing within 5 s\n");
            rc = 1;
        }
    }
    if (rc < 0) fprintf(stderr, "take: %s: %s\n", dq_strerror(rc), dq_client_errstr(c));
    dq_client_free(c);
    return rc == 0 ? 0 : rc < 0 ? 3 : 1;
}
