/*
 * serve_route.c - where a request to 'delayq serve' goes: its method and
 * path to an endpoint, its path and query to checked arguments, and its
 * Authorization header to a yes or no for mutations.
 *
 * Pure: no HTTP library, no Redis, no allocation. That keeps it fuzzable
 * (fuzz/fuzz_route.c), and keeps every decision about hostile input in one
 * place: the views get only names, ids, states, limits and cursors that
 * passed here. Paths (the path comes unescaped, so an id may hold '/': it
 * is the rest of the path after "/items/", or what comes before
 * "/redrive"):
 *   GET    /                                   the dashboard (built in)
 *   GET    /metrics                            Prometheus text
 *   GET    /api/queues                         every queue with its counts
 *   GET    /api/queues/{q}                     one, with its lateness histogram
 *   GET    /api/queues/{q}/items?state=&cursor=&limit=
 *   GET    /api/queues/{q}/items/{id}          look-up
 *   DELETE /api/queues/{q}/items/{id}          cancel           (token)
 *   POST   /api/queues/{q}/dead/redrive        all dead letters (token)
 *   POST   /api/queues/{q}/dead/{id}/redrive   one              (token)
 *   POST   /api/queues/{q}/dead/purge                           (token)
 * HEAD is taken wherever GET is.
 */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/serve.h"
#include "util.h"

#define BODY_MAX 65536   /* request bodies are read and dropped, up to this */
#define LIMIT_DEFAULT 50
#define LIMIT_MAX 1000

static void refuse(cli_route *r, int status, const char *error)
{
    r->ep = CLI_EP_ERROR;
    r->status = status;
    r->error = error;
}

/* 0 if the method is one the path takes (GET also allows HEAD); else
 * fills r with 405. */
static int method_is(cli_route *r, const char *method, const char *allowed)
{
    if (strcmp(method, allowed) == 0 || (strcmp(allowed, "GET") == 0 && strcmp(method, "HEAD") == 0))
        return 0;
    r->allow = allowed;
    refuse(r, 405, "method not allowed");
    return -1;
}

/* 0 if the request may change things; else fills r (403 read-only, 401).
 * The comparison takes the same time wherever the tokens differ. */
static int authorized(cli_route *r, const char *token, const char *header)
{
    if (!token) {
        refuse(r, 403, "read-only: this server was started without --token-file");
        return -1;
    }
    size_t want = strlen(token);
    if (header && strncmp(header, "Bearer ", 7) == 0 && strlen(header + 7) == want &&
        sodium_memcmp(header + 7, token, want) == 0)
        return 0;
    refuse(r, 401, "a valid 'Authorization: Bearer TOKEN' header is needed to change a queue");
    return -1;
}

/* Copies the len bytes at s into dst (size bytes) if they form a valid
 * name by valid(); else fills r with 400 and error. */
static int take_name(cli_route *r, char *dst, size_t size, const char *s, size_t len, int (*valid)(const char *),
                     const char *error)
{
    if (len >= size) {
        refuse(r, 400, error);
        return -1;
    }
    memcpy(dst, s, len);
    dst[len] = '\0';
    if (!valid(dst)) {
        refuse(r, 400, error);
        return -1;
    }
    return 0;
}

static int take_queue(cli_route *r, const char *s, size_t len)
{
    return take_name(r, r->queue, sizeof r->queue, s, len, dq__queue_valid,
                     "invalid queue name: 1 to 128 of A-Z a-z 0-9 _ . : -");
}

static int take_id(cli_route *r, const char *s, size_t len)
{
    return take_name(r, r->id, sizeof r->id, s, len, dq__id_valid,
                     "invalid id: 1 to 128 printable ASCII characters");
}

/* The query of GET .../items: state (default pending), limit, cursor. */
static void route_items(cli_route *r, const cli_request *rq)
{
    const char *state = rq->state ? rq->state : "pending";
    r->state = DQ_STATE_UNKNOWN;
    for (int s = DQ_STATE_PENDING; s <= DQ_STATE_DEAD; s++)
        if (strcmp(state, cli_state_name(s)) == 0)
            r->state = s;
    if (r->state == DQ_STATE_UNKNOWN) {
        refuse(r, 400, "state: expected pending, ready, inflight or dead");
        return;
    }
    r->limit = LIMIT_DEFAULT;
    if (rq->limit) {
        size_t digits = strspn(rq->limit, "0123456789");
        long lim = digits >= 1 && digits <= 4 && !rq->limit[digits] ? strtol(rq->limit, NULL, 10) : 0;
        if (lim < 1 || lim > LIMIT_MAX) {
            refuse(r, 400, "limit: expected a number from 1 to 1000");
            return;
        }
        r->limit = (size_t)lim;
    }
    size_t offset;
    int slots = r->state == DQ_STATE_PENDING || r->state == DQ_STATE_IN_FLIGHT;
    if (rq->cursor && !dq__list_cursor(slots, rq->cursor, &offset)) {
        refuse(r, 400, slots ? "cursor: expected SCORE:SKIP, as a page's next_cursor"
                             : "cursor: expected an offset, as a page's next_cursor");
        return;
    }
    r->cursor = rq->cursor && *rq->cursor ? rq->cursor : NULL;
    r->ep = CLI_EP_ITEMS;
}

/* /api/queues/{q}/REST: rest is what follows "{q}/" ("" for the queue). */
static void route_queue(cli_route *r, const char *token, const cli_request *rq, const char *q, size_t qlen,
                        const char *rest)
{
    size_t rl = strlen(rest);
    static const char redrive[] = "/redrive";
    const size_t rdl = sizeof redrive - 1;

    if (!*rest || strcmp(rest, "items") == 0) {
        if (method_is(r, rq->method, "GET") || take_queue(r, q, qlen))
            return;
        if (*rest)
            route_items(r, rq);
        else
            r->ep = CLI_EP_QUEUE;
    } else if (strncmp(rest, "items/", 6) == 0) {
        int del = strcmp(rq->method, "DELETE") == 0;
        if (!del && method_is(r, rq->method, "GET")) {
            r->allow = "GET, DELETE"; /* the path takes both */
            return;
        }
        if (take_id(r, rest + 6, rl - 6) || (del && authorized(r, token, rq->authorization)) ||
            take_queue(r, q, qlen))
            return;
        r->ep = del ? CLI_EP_CANCEL : CLI_EP_ITEM;
    } else if (strcmp(rest, "dead/redrive") == 0 || strcmp(rest, "dead/purge") == 0) {
        if (method_is(r, rq->method, "POST") || authorized(r, token, rq->authorization) || take_queue(r, q, qlen))
            return;
        r->ep = rest[5] == 'p' ? CLI_EP_PURGE : CLI_EP_REDRIVE_ALL;
    } else if (strncmp(rest, "dead/", 5) == 0 && rl > 5 + rdl && strcmp(rest + rl - rdl, redrive) == 0) {
        if (method_is(r, rq->method, "POST") || take_id(r, rest + 5, rl - 5 - rdl) ||
            authorized(r, token, rq->authorization) || take_queue(r, q, qlen))
            return;
        r->ep = CLI_EP_REDRIVE_ONE;
    } else {
        refuse(r, 404, "no such path");
    }
}

void cli_route_request(const char *token, const cli_request *rq, cli_route *r)
{
    const char *path = rq->path;

    memset(r, 0, sizeof *r);
    if (rq->body_len > BODY_MAX) {
        refuse(r, 413, "request body too large");
    } else if (strcmp(path, "/") == 0) {
        if (method_is(r, rq->method, "GET") == 0)
            r->ep = CLI_EP_PAGE;
    } else if (strcmp(path, "/metrics") == 0) {
        if (method_is(r, rq->method, "GET") == 0)
            r->ep = CLI_EP_METRICS;
    } else if (strcmp(path, "/api/queues") == 0) {
        if (method_is(r, rq->method, "GET") == 0)
            r->ep = CLI_EP_QUEUES;
    } else if (strncmp(path, "/api/queues/", 12) == 0) {
        const char *q = path + 12, *slash = strchr(q, '/');
        route_queue(r, token, rq, q, slash ? (size_t)(slash - q) : strlen(q), slash ? slash + 1 : "");
    } else {
        refuse(r, 404, "no such path");
    }
}
