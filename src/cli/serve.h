/*
 * serve.h - the parts of 'delayq serve': the command (cmd_serve.c) starts
 * the HTTP server (serve_http.c), which has each request guarded (its Host,
 * failed tokens, and connections: serve_guard.c), routed and checked
 * (serve_route.c; both with no HTTP library and no Redis, so they can be
 * fuzzed) and answered by a view (serve_views.c), which reads through the
 * library. Each layer calls only the ones below.
 *
 * One thread: libmicrohttpd's own polling thread runs every request, one
 * at a time, and is the only user of the client (a dq_client is not
 * thread-safe; its synchronous calls run its private loop), of the backoff
 * table and of the connection table.
 */
#ifndef DELAYQ_CLI_SERVE_H
#define DELAYQ_CLI_SERVE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "delayq.h"

typedef struct cli_serve_conf {
    dq_client *c;     /* used only by the server's thread once it starts */
    const char *token; /* mutations need "Authorization: Bearer TOKEN";
                          NULL: read-only, mutations answer 403          */
    char **queues;     /* shown besides the registry's                    */
    int nqueues;
    const dq_finding *findings; /* the doctor's at the start (cli_doctor_start),
                                   shown by /metrics and /api/queues      */
    size_t nfindings;
    const struct cli_hosts *hosts; /* the Host headers answered (serve_guard.c) */
    struct cli_guard *guard;       /* failed-token backoff; the server's thread's */
} cli_serve_conf;

/* A response: status, content type (static) and a malloc'ed body. */
typedef struct cli_view {
    int status;
    const char *type;
    char *body;
    size_t len;
} cli_view;

/* ------------------------------------------------------------ views (serve_views.c) */

/* Each fills v, for a queue the router and cli_queue_known passed. A library failure becomes 400 (bad input), 503 (Redis
 * away) or 502 (Redis erred), with a JSON body {"error": "..."}. */
void cli_view_error(cli_view *v, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void cli_view_metrics(const cli_serve_conf *conf, cli_view *v);
void cli_view_queues(const cli_serve_conf *conf, cli_view *v);
void cli_view_queue(const cli_serve_conf *conf, const char *queue, cli_view *v);
/* state, cursor and limit as the router checked them (cli_route). */
void cli_view_items(const cli_serve_conf *conf, const char *queue, int state, const char *cursor, size_t limit,
                    cli_view *v);
void cli_view_item(const cli_serve_conf *conf, const char *queue, const char *id, cli_view *v);
/* id NULL: every dead letter. */
void cli_view_redrive(const cli_serve_conf *conf, const char *queue, const char *id, cli_view *v);
void cli_view_purge(const cli_serve_conf *conf, const char *queue, cli_view *v);
void cli_view_cancel(const cli_serve_conf *conf, const char *queue, const char *id, cli_view *v);

/* *known = 1 if queue is in the registry or on the command line. Returns 0
 * or a negative code (Redis away). */
int cli_queue_known(const cli_serve_conf *conf, const char *queue, int *known);

/* ------------------------------------------------------------ routing (serve_route.c) */

/* A request as the router sees it, with no HTTP library in sight. Every
 * string is NUL-terminated and may hold any other byte; NULL: absent. */
typedef struct cli_request {
    const char *method;
    const char *path;          /* unescaped, without the query        */
    const char *state, *cursor, *limit; /* the query's values          */
    const char *authorization; /* the header's value                   */
    size_t body_len;           /* bytes of body received (and dropped) */
} cli_request;

typedef enum cli_endpoint {
    CLI_EP_ERROR,       /* the route holds the answer: status, error, allow */
    CLI_EP_PAGE,        /* GET /                                           */
    CLI_EP_METRICS,     /* GET /metrics                                    */
    CLI_EP_QUEUES,      /* GET /api/queues                                 */
    CLI_EP_QUEUE,       /* GET /api/queues/{q}                             */
    CLI_EP_ITEMS,       /* GET /api/queues/{q}/items                       */
    CLI_EP_ITEM,        /* GET /api/queues/{q}/items/{id}                  */
    CLI_EP_CANCEL,      /* DELETE /api/queues/{q}/items/{id}               */
    CLI_EP_REDRIVE_ALL, /* POST /api/queues/{q}/dead/redrive               */
    CLI_EP_REDRIVE_ONE, /* POST /api/queues/{q}/dead/{id}/redrive          */
    CLI_EP_PURGE        /* POST /api/queues/{q}/dead/purge                 */
} cli_endpoint;

/* Where a request goes, with its arguments checked: a queue endpoint has
 * a valid queue name (whether the queue exists is the caller's to ask
 * Redis), an id endpoint a valid id, ITEMS a state, a limit from 1 to
 * 1000 and a well-formed cursor (NULL: the first page). A mutation got
 * here only with the right token. */
typedef struct cli_route {
    cli_endpoint ep;
    char queue[DQ_QUEUE_MAX + 1];
    char id[DQ_ID_MAX + 1];
    int state;          /* enum dq_state */
    size_t limit;
    const char *cursor; /* points into the request */
    /* CLI_EP_ERROR only: */
    int status;         /* 4xx                                    */
    const char *allow;  /* for 405: the methods the path takes    */
    const char *error;  /* static text                            */
} cli_route;

/* Routes rq. token: what mutations need in "Authorization: Bearer TOKEN";
 * NULL: read-only, mutations get 403. Never fails otherwise. */
void cli_route_request(const char *token, const cli_request *rq, cli_route *r);

/* ------------------------------------------------------------ guards (serve_guard.c) */

/* The names a request's Host header may give (DNS rebinding: a page of a
 * foreign origin whose name now points here still sends its own name). */
typedef struct cli_hosts {
    const char *listen;       /* the listen address: an IPv4 or IPv6 literal  */
    const char *const *names; /* --allow-host names, compared without case    */
    int nnames;
} cli_hosts;

/* 1 if host (the Host header's value, NULL when absent) may be answered:
 * its name is the listen address, any IP literal if that is a wildcard
 * (0.0.0.0, ::), "localhost", or one of names; a port after it, if any,
 * is not checked (forwarded ports change it; the name is what rebinding
 * cannot fake). An absent Host passes: browsers always send one, and
 * libmicrohttpd itself refuses HTTP/1.1 requests without it. Pure. */
int cli_host_allowed(const cli_hosts *h, const char *host);

/* 1 if addr (an IPv4 or IPv6 literal) is a loopback address. */
int cli_addr_loopback(const char *addr);

/* Failed-token backoff, per client address and for the whole process:
 * past an address's third failed token, its next try is refused (429)
 * for a delay that doubles with each failure, from 250 ms to 60 s (an
 * address quiet for 10 minutes, or right once, starts afresh); and past 20
 * failures in 10 s from all addresses, every try is refused until the
 * window ends. Refusals answer at once: no thread waits. Times are the
 * caller's monotonic clock in ms (this is about the server's own pace, not
 * queue time). Bounded: a fixed table; the oldest address is forgotten
 * when full. Used by one thread. */
typedef struct cli_guard cli_guard;
cli_guard *cli_guard_new(void);
void cli_guard_free(cli_guard *g);
/* 0 if a client at addr (its IP address: 4 or 16 bytes) may try a
 * token at now_ms; else the seconds to wait (>= 1). */
int cli_guard_wait(cli_guard *g, const void *addr, size_t len, int64_t now_ms);
/* Records how a token try of addr ended (ok 1: it was right). */
void cli_guard_result(cli_guard *g, const void *addr, size_t len, int64_t now_ms, int ok);

/* Open connections, so that a new one can push out a waiting one (no
 * request in progress: a slow client's, or one idle between requests):
 * slow clients cannot fill the server, not even from the one address every
 * local client shares. A new connection closes the connection that has
 * waited longest among its address's if that address has CLI_WAIT_PER_IP
 * waiting, else among all if the server holds CLI_CONN_SOFT_MAX. Used by
 * one thread; times are the caller's monotonic ms. */
#define CLI_WAIT_PER_IP 32
#define CLI_CONN_SOFT_MAX 224
typedef struct cli_conn cli_conn;
typedef struct cli_conns cli_conns;
cli_conns *cli_conns_new(void);
void cli_conns_free(cli_conns *t);
/* Records a new connection from addr (its IP address bytes) with handle
 * (the caller's, given back by cli_conn_handle). Returns its entry, NULL if
 * out of memory; *evict gets a waiting connection's entry to close (it
 * stays listed, never chosen again, until cli_conn_end), or NULL. */
cli_conn *cli_conn_start(cli_conns *t, const void *addr, size_t len, void *handle, int64_t now_ms,
                         cli_conn **evict);
/* A request began (busy 1) or ended (0) on c. */
void cli_conn_busy(cli_conn *c, int busy, int64_t now_ms);
/* c closed: forgets and frees it (NULL: nothing). */
void cli_conn_end(cli_conns *t, cli_conn *c);
void *cli_conn_handle(const cli_conn *c);

/* ------------------------------------------------------------ server (serve_http.c) */

typedef struct cli_server cli_server;

/* Starts serving on addr:port (an IPv4 or IPv6 literal) in a thread of its own. NULL after
 * printing why. conf must outlive the server. */
cli_server *cli_serve_start(const cli_serve_conf *conf, const char *addr, int port);
void cli_serve_stop(cli_server *s);

#endif
