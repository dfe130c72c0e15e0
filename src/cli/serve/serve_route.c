/*
 * serve_route.c - where a request to 'delayq serve' goes: its method and
 * path to an endpoint, its path and query to checked arguments, and its
 * Authorization header to a yes or no for changes, by the token's role.
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
 *   GET    /api/queues/{q}/schedules           its recurring schedules
 *   DELETE /api/queues/{q}/items/{id}          cancel           (token)
 *   POST   /api/queues/{q}/dead/redrive        all dead letters (token)
 *   POST   /api/queues/{q}/dead/{id}/redrive   one              (token)
 *   POST   /api/queues/{q}/dead/purge                           (token)
 *   POST   /api/queues/{q}/items               offer            (produce)
 *   POST   /api/queues/{q}/take                take             (consume)
 *   POST   /api/queues/{q}/items/{id}/ack      and /nack, /extend (consume)
 * Cancel needs produce, redrive and purge admin. POST tells the lease
 * verbs from a look-up of an id ending in "/ack".
 * HEAD is taken wherever GET is.
 */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/serve/serve.h"
#include "util.h"

#define LIMIT_DEFAULT 50
#define LIMIT_MAX 1000

static void refuse(cli_route *r, int status, const char *error) {
    r->ep = CLI_EP_ERROR;
    r->status = status;
    r->error = error;
}

/* 0 if the method is one the path takes (GET also allows HEAD); else
 * fills r with 405. */
static int method_is(cli_route *r, const char *method, const char *allowed) {
    if (strcmp(method, allowed) == 0 || (strcmp(allowed, "GET") == 0 && strcmp(method, "HEAD") == 0))
        return 0;
    r->allow = allowed;
    refuse(r, 405, "method not allowed");
    return -1;
}

int cli_endpoint_role(cli_endpoint ep) {
    switch (ep) {
        case CLI_EP_OFFER:
        case CLI_EP_CANCEL: return CLI_ROLE_PRODUCE;
        case CLI_EP_TAKE:
        case CLI_EP_ACK:
        case CLI_EP_NACK:
        case CLI_EP_EXTEND:
        case CLI_EP_RELEASE: return CLI_ROLE_CONSUME;
        case CLI_EP_REDRIVE_ALL:
        case CLI_EP_REDRIVE_ONE:
        case CLI_EP_PURGE: return CLI_ROLE_ADMIN;
        default: return 0;
    }
}

/* The role of the header's token, 0 if it is none of tokens. Every token
 * is compared in full (sodium_memcmp), whichever matches, so the time
 * taken tells nothing of where a guess went wrong. */
static int token_role(const cli_tokens *tokens, const char *header) {
    int role = 0;
    if (!header || strncmp(header, "Bearer ", 7) != 0) return 0;
    size_t len = strlen(header + 7);
    for (int i = 0; i < tokens->n; i++) {
        size_t want = strlen(tokens->text[i]);
        if (len == want && sodium_memcmp(header + 7, tokens->text[i], want) == 0)
            role |= tokens->role[i];
    }
    return role;
}

/* 0 if the request may do what ep does; else fills r (403 read-only or
 * a role that may not, 401 no known token). */
static int authorized(cli_route *r, const cli_tokens *tokens, const char *header, cli_endpoint ep) {
    int need = cli_endpoint_role(ep);
    if (!tokens || !tokens->n) {
        refuse(r, 403, "read-only: this server was started without --token-file");
        return -1;
    }
    int role = token_role(tokens, header);
    if (!role) {
        refuse(r, 401, "a valid 'Authorization: Bearer TOKEN' header is needed to change a queue");
        return -1;
    }
    if ((role & need) != need) {
        refuse(r, 403,
               need == CLI_ROLE_ADMIN ? "this token's role may not do this: it needs admin"
               : need == CLI_ROLE_PRODUCE
                   ? "this token's role may not do this: it needs produce or admin"
                   : "this token's role may not do this: it needs consume or admin");
        return -1;
    }
    return 0;
}

/* Copies the len bytes at s into dst (size bytes) if they form a valid
 * name by valid(); else fills r with 400 and error. */
static int take_name(cli_route *r, char *dst, size_t size, const char *s, size_t len,
                     int (*valid)(const char *), const char *error) {
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

static int take_queue(cli_route *r, const char *s, size_t len) {
    return take_name(r, r->queue, sizeof r->queue, s, len, dq__queue_valid,
                     "invalid queue name: 1 to 128 of A-Z a-z 0-9 _ . : -");
}

static int take_id(cli_route *r, const char *s, size_t len) {
    return take_name(r, r->id, sizeof r->id, s, len, dq__id_valid,
                     "invalid id: 1 to 128 printable ASCII characters");
}

/* The query of GET .../items: state (default pending), limit, cursor. */
static void route_items(cli_route *r, const cli_request *rq) {
    const char *state = rq->state ? rq->state : "pending";
    r->state = DQ_STATE_UNKNOWN;
    for (int s = DQ_STATE_PENDING; s <= DQ_STATE_DEAD; s++)
        if (strcmp(state, cli_state_name(s)) == 0) r->state = s;
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
        refuse(r, 400,
               slots ? "cursor: expected SCORE:SKIP, as a page's next_cursor"
                     : "cursor: expected an offset, as a page's next_cursor");
        return;
    }
    r->cursor = rq->cursor && *rq->cursor ? rq->cursor : NULL;
    r->ep = CLI_EP_ITEMS;
}

/* The lease verb an id path ends in ("/ack", "/nack", "/extend", "/release"), with
 * its length in *sl; CLI_EP_ERROR if none. */
static cli_endpoint lease_verb(const char *rest, size_t rl, size_t *sl) {
    static const struct {
        const char *s;
        cli_endpoint ep;
    } verbs[] = {{"/ack", CLI_EP_ACK},
                 {"/nack", CLI_EP_NACK},
                 {"/extend", CLI_EP_EXTEND},
                 {"/release", CLI_EP_RELEASE}};
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++) {
        *sl = strlen(verbs[i].s);
        if (rl > *sl && strcmp(rest + rl - *sl, verbs[i].s) == 0) return verbs[i].ep;
    }
    return CLI_EP_ERROR;
}

/* items/{id}: a look-up (GET), a cancel (DELETE) or a lease verb (POST
 * .../ack, /nack, /extend, /release). */
static void route_item(cli_route *r, const cli_tokens *tokens, const cli_request *rq, const char *q,
                       size_t qlen, const char *id, size_t idlen) {
    size_t sl = 0;
    cli_endpoint ep = strcmp(rq->method, "DELETE") == 0 ? CLI_EP_CANCEL : CLI_EP_ITEM;
    if (strcmp(rq->method, "POST") == 0) {
        ep = lease_verb(id, idlen, &sl);
        if (ep == CLI_EP_ERROR) {
            refuse(r, 404, "no such path: POST takes .../items/{id}/ack, /nack, /extend or /release");
            return;
        }
        idlen -= sl;
    } else if (ep == CLI_EP_ITEM && method_is(r, rq->method, "GET")) {
        r->allow = "GET, DELETE, POST"; /* the path takes all three */
        return;
    }
    if (take_id(r, id, idlen) || (ep != CLI_EP_ITEM && authorized(r, tokens, rq->authorization, ep)) ||
        take_queue(r, q, qlen))
        return;
    r->ep = ep;
}

/* /api/queues/{q}/REST: rest is what follows "{q}/" ("" for the queue). */
static void route_queue(cli_route *r, const cli_tokens *tokens, const cli_request *rq, const char *q,
                        size_t qlen, const char *rest) {
    size_t rl = strlen(rest);
    static const char redrive[] = "/redrive";
    const size_t rdl = sizeof redrive - 1;

    if (strcmp(rest, "items") == 0 && strcmp(rq->method, "POST") == 0) {
        if (authorized(r, tokens, rq->authorization, CLI_EP_OFFER) || take_queue(r, q, qlen)) return;
        r->ep = CLI_EP_OFFER;
    } else if (!*rest || strcmp(rest, "items") == 0) {
        if (method_is(r, rq->method, "GET")) {
            if (*rest) r->allow = "GET, POST";
            return;
        }
        if (take_queue(r, q, qlen)) return;
        if (*rest) route_items(r, rq);
        else r->ep = CLI_EP_QUEUE;
    } else if (strcmp(rest, "consumers") == 0) {
        if (method_is(r, rq->method, "GET") || take_queue(r, q, qlen)) return;
        r->ep = CLI_EP_CONSUMERS;
    } else if (strcmp(rest, "schedules") == 0) {
        if (method_is(r, rq->method, "GET") || take_queue(r, q, qlen)) return;
        r->ep = CLI_EP_SCHEDULES;
    } else if (strcmp(rest, "take") == 0) {
        if (method_is(r, rq->method, "POST") || authorized(r, tokens, rq->authorization, CLI_EP_TAKE) ||
            take_queue(r, q, qlen))
            return;
        r->ep = CLI_EP_TAKE;
    } else if (strncmp(rest, "items/", 6) == 0) {
        route_item(r, tokens, rq, q, qlen, rest + 6, rl - 6);
    } else if (strcmp(rest, "dead/redrive") == 0 || strcmp(rest, "dead/purge") == 0) {
        cli_endpoint ep = rest[5] == 'p' ? CLI_EP_PURGE : CLI_EP_REDRIVE_ALL;
        if (method_is(r, rq->method, "POST") || authorized(r, tokens, rq->authorization, ep) ||
            take_queue(r, q, qlen))
            return;
        r->ep = ep;
    } else if (strncmp(rest, "dead/", 5) == 0 && rl > 5 + rdl && strcmp(rest + rl - rdl, redrive) == 0) {
        if (method_is(r, rq->method, "POST") || take_id(r, rest + 5, rl - 5 - rdl) ||
            authorized(r, tokens, rq->authorization, CLI_EP_REDRIVE_ONE) || take_queue(r, q, qlen))
            return;
        r->ep = CLI_EP_REDRIVE_ONE;
    } else {
        refuse(r, 404, "no such path");
    }
}

void cli_route_request(const cli_tokens *tokens, const cli_request *rq, cli_route *r) {
    const char *path = rq->path;

    memset(r, 0, sizeof *r);
    if (rq->body_len > CLI_BODY_MAX) {
        refuse(r, 413, "request body too large");
    } else if (strcmp(path, "/") == 0) {
        if (method_is(r, rq->method, "GET") == 0) r->ep = CLI_EP_PAGE;
    } else if (strcmp(path, "/metrics") == 0) {
        if (method_is(r, rq->method, "GET") == 0) r->ep = CLI_EP_METRICS;
    } else if (strcmp(path, "/api/queues") == 0) {
        if (method_is(r, rq->method, "GET") == 0) r->ep = CLI_EP_QUEUES;
    } else if (strncmp(path, "/api/queues/", 12) == 0) {
        const char *q = path + 12, *slash = strchr(q, '/');
        route_queue(r, tokens, rq, q, slash ? (size_t)(slash - q) : strlen(q), slash ? slash + 1 : "");
    } else {
        refuse(r, 404, "no such path");
    }
    /* Only an offer brings a big body. */
    if (r->ep != CLI_EP_ERROR && r->ep != CLI_EP_OFFER && rq->body_len > CLI_BODY_SMALL)
        refuse(r, 413, "request body too large");
}
