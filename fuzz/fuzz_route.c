/*
 * fuzz_route.c - libFuzzer target: the HTTP API's request handling
 * (cli_route_request, serve_route.c) on any method, path, query values,
 * Authorization header and body size.
 *
 * Input: a flags byte, then up to six fields split at NUL bytes: method,
 * path, state, cursor, limit, Authorization. Flag bit 0 gives the server a
 * token ("s3cret"); bits 1-4 leave state, cursor, limit or the header out;
 * bit 5 brings a body bigger than the server takes.
 *
 * Besides not crashing: an error is a 4xx with a message (and an Allow
 * list for 405); a routed queue and id are valid and appear in the path;
 * an items page has a known state, a limit of 1-1000 and a cursor the
 * library takes; a mutation happens only with the token.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/serve/serve.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TOKEN "s3cret"

static int is_mutation(cli_endpoint ep) { return cli_endpoint_role(ep) != 0; }

/* The method each change takes. */
static const char *change_method(cli_endpoint ep) { return ep == CLI_EP_CANCEL ? "DELETE" : "POST"; }

static void check(const cli_request *rq, const char *token, const cli_route *r) {
    if (r->ep == CLI_EP_ERROR) {
        if (r->status < 400 || r->status > 499 || !r->error || !*r->error) abort();
        if (r->status == 405 && !r->allow) abort();
        return;
    }
    if (rq->body_len > (r->ep == CLI_EP_OFFER ? CLI_BODY_MAX : CLI_BODY_SMALL)) abort();
    int read = strcmp(rq->method, "GET") == 0 || strcmp(rq->method, "HEAD") == 0;
    if (is_mutation(r->ep)) {
        if (!token || !rq->authorization || strncmp(rq->authorization, "Bearer ", 7) != 0 ||
            strcmp(rq->authorization + 7, token) != 0)
            abort();
        if (strcmp(rq->method, change_method(r->ep)) != 0) abort();
    } else if (!read) {
        abort();
    }
    if (r->ep == CLI_EP_PAGE || r->ep == CLI_EP_METRICS || r->ep == CLI_EP_QUEUES) return;
    if (!dq__queue_valid(r->queue) || !strstr(rq->path, r->queue)) abort();
    if (r->ep == CLI_EP_ITEM || r->ep == CLI_EP_CANCEL || r->ep == CLI_EP_REDRIVE_ONE ||
        r->ep == CLI_EP_ACK || r->ep == CLI_EP_NACK || r->ep == CLI_EP_EXTEND ||
        r->ep == CLI_EP_RELEASE) {
        if (!dq__id_valid(r->id) || !strstr(rq->path, r->id)) abort();
    }
    if (r->ep == CLI_EP_ITEMS) {
        size_t off;
        int slots = r->state == DQ_STATE_PENDING || r->state == DQ_STATE_IN_FLIGHT;
        if (r->state < DQ_STATE_PENDING || r->state > DQ_STATE_DEAD || r->limit < 1 || r->limit > 1000)
            abort();
        if (r->cursor && (!*r->cursor || !dq__list_cursor(slots, r->cursor, &off))) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned flags = data[0];
    char *buf = malloc(size); /* the fields, each ending in a NUL */
    if (!buf) return 0;
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = '\0';
    const char *field[6] = {"GET", "/", NULL, NULL, NULL, NULL};
    char *p = buf, *end = buf + size - 1;
    for (int i = 0; i < 6 && p <= end; i++) {
        field[i] = p;
        p += strlen(p) + 1;
    }
    const cli_request rq = {
        .method = field[0],
        .path = field[1],
        .state = flags & 2 ? NULL : field[2],
        .cursor = flags & 4 ? NULL : field[3],
        .limit = flags & 8 ? NULL : field[4],
        .authorization = flags & 16 ? NULL : field[5],
        .body_len = flags & 32 ? CLI_BODY_SMALL + 1 : 0,
    };
    const char *token = flags & 1 ? TOKEN : NULL;
    const cli_tokens tokens = {1, {CLI_ROLE_ADMIN}, {TOKEN}};
    cli_route r;
    cli_route_request(token ? &tokens : NULL, &rq, &r);
    check(&rq, token, &r);
    free(buf);
    return 0;
}
