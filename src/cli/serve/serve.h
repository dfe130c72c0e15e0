/*
 * serve.h - the parts of 'delayq serve': the command (cmd_serve.c) starts
 * the HTTP server (serve_http.c), which has each request guarded (its Host,
 * failed tokens, and connections: serve_guard.c), routed and checked
 * (serve_route.c; both with no HTTP library and no Redis, so they can be
 * fuzzed) and answered by a view (serve_views.c), which reads through the
 * library. Each layer calls only the ones below.
 *
 * Two threads, each with a client of its own (a dq_client is not
 * thread-safe; its synchronous calls run its private loop):
 * libmicrohttpd's polling thread runs every request, one at a time, and is
 * the only user of conf->c, of the backoff table and of the connection
 * table; the work thread (serve_work.c) owns the takes' client, runs its
 * loop (the waiting takes and the schedulers of the queues taken from) and
 * hands each take's answer back by resuming its suspended connection, so
 * a waiting take holds no thread.
 */
#ifndef DELAYQ_CLI_SERVE_H
#define DELAYQ_CLI_SERVE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "delayq.h"

/* Roles of the tokens (bits): what a token may change. */
enum cli_role {
    CLI_ROLE_PRODUCE = 1, /* offer, cancel                  */
    CLI_ROLE_CONSUME = 2, /* take, ack, nack, extend        */
    CLI_ROLE_ADMIN = 7    /* all of the above, redrive, purge */
};
#define CLI_TOKENS_MAX 32

/* The token file's lines: "ROLE TOKEN", or "TOKEN" alone (admin). */
typedef struct cli_tokens {
    int n;
    int role[CLI_TOKENS_MAX];          /* enum cli_role                    */
    const char *text[CLI_TOKENS_MAX];  /* NUL-terminated, the caller's     */
} cli_tokens;

struct cli_work;

typedef struct cli_serve_conf {
    dq_client *c;     /* used only by the server's thread once it starts */
    const cli_tokens *tokens; /* changes need "Authorization: Bearer TOKEN"
                                 of a role that may; NULL: read-only,
                                 changes answer 403                     */
    struct cli_work *work;    /* the takes' thread (serve_work.c)        */
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

/* Each fills v, for a queue the router and cli_queue_known passed. A library failure becomes the status of
 * cli_view_failure's table, with a JSON body {"error": "..."}. */
void cli_view_error(cli_view *v, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Fills v with status and body (a reference it takes; NULL: out of memory, 500). */
struct json_t;
void cli_view_json(cli_view *v, int status, struct json_t *body);
/* Fills v with a library failure's status and c's message (the client's
 * own words, or a script's refusal as the script wrote it): 400 bad input
 * (DQ_EINVAL, DQ_ETOOBIG, a script's "input" refusal), 409 a script's
 * "state" refusal, 500 out of memory or a script's "corrupt" refusal, 503
 * Redis away or the server stopping, 502 anything else Redis said. The one
 * table of serve's answers to failures: every view goes through it. */
void cli_view_failure(cli_view *v, dq_client *c, int rc);
void cli_view_metrics(const cli_serve_conf *conf, cli_view *v);
void cli_view_queues(const cli_serve_conf *conf, cli_view *v);
void cli_view_queue(const cli_serve_conf *conf, const char *queue, cli_view *v);
void cli_view_consumers(const cli_serve_conf *conf, const char *queue, cli_view *v);
/* state, cursor and limit as the router checked them (cli_route). */
void cli_view_items(const cli_serve_conf *conf, const char *queue, int state, const char *cursor,
                    size_t limit, cli_view *v);
void cli_view_item(const cli_serve_conf *conf, const char *queue, const char *id, cli_view *v);
/* {"queue", "schedules": [as 'schedules --json']}: read only (FCALL_RO). */
void cli_view_schedules(const cli_serve_conf *conf, const char *queue, cli_view *v);
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
    const char *path; /* unescaped, without the query        */
    const char *state, *cursor, *limit; /* the query's values          */
    const char *authorization; /* the header's value                   */
    size_t body_len; /* bytes of body received               */
} cli_request;

typedef enum cli_endpoint {
    CLI_EP_ERROR, /* the route holds the answer: status, error, allow */
    CLI_EP_PAGE, /* GET /                                           */
    CLI_EP_METRICS, /* GET /metrics                                    */
    CLI_EP_QUEUES, /* GET /api/queues                                 */
    CLI_EP_QUEUE, /* GET /api/queues/{q}                             */
    CLI_EP_ITEMS, /* GET /api/queues/{q}/items                       */
    CLI_EP_ITEM, /* GET /api/queues/{q}/items/{id}                  */
    CLI_EP_CANCEL, /* DELETE /api/queues/{q}/items/{id}               */
    CLI_EP_REDRIVE_ALL, /* POST /api/queues/{q}/dead/redrive               */
    CLI_EP_REDRIVE_ONE, /* POST /api/queues/{q}/dead/{id}/redrive          */
    CLI_EP_PURGE, /* POST /api/queues/{q}/dead/purge                 */
    CLI_EP_OFFER, /* POST /api/queues/{q}/items                      */
    CLI_EP_TAKE, /* POST /api/queues/{q}/take                       */
    CLI_EP_ACK, /* POST /api/queues/{q}/items/{id}/ack             */
    CLI_EP_NACK, /* POST /api/queues/{q}/items/{id}/nack            */
    CLI_EP_EXTEND, /* POST /api/queues/{q}/items/{id}/extend          */
    CLI_EP_RELEASE, /* POST /api/queues/{q}/items/{id}/release         */
    CLI_EP_CONSUMERS, /* GET /api/queues/{q}/consumers                   */
    CLI_EP_SCHEDULES /* GET /api/queues/{q}/schedules                   */
} cli_endpoint;

/* Bodies: CLI_BODY_MAX bytes for an offer, CLI_BODY_SMALL for the others. */
#define CLI_BODY_MAX (8u << 20)
#define CLI_BODY_SMALL 65536u

/* The role an endpoint's request needs (0: none, a read). */
int cli_endpoint_role(cli_endpoint ep);

/* Where a request goes, with its arguments checked: a queue endpoint has
 * a valid queue name (whether the queue exists is the caller's to ask
 * Redis), an id endpoint a valid id, ITEMS a state, a limit from 1 to
 * 1000 and a well-formed cursor (NULL: the first page). A mutation got
 * here only with the right token. */
typedef struct cli_route {
    cli_endpoint ep;
    char queue[DQ_QUEUE_MAX + 1];
    char id[DQ_ID_MAX + 1];
    int state; /* enum dq_state */
    size_t limit;
    const char *cursor; /* points into the request */
    /* CLI_EP_ERROR only: */
    int status; /* 4xx                                    */
    const char *allow; /* for 405: the methods the path takes    */
    const char *error; /* static text                            */
} cli_route;

/* Routes rq. tokens: what changes need in "Authorization: Bearer TOKEN"
 * (401 without one of them, 403 with one whose role may not); NULL or none:
 * read-only, changes get 403. Never fails otherwise. */
void cli_route_request(const cli_tokens *tokens, const cli_request *rq, cli_route *r);

/* ------------------------------------------------------------ guards (serve_guard.c) */

/* The names a request's Host header may give (DNS rebinding: a page of a
 * foreign origin whose name now points here still sends its own name). */
typedef struct cli_hosts {
    const char *listen; /* the listen address: an IPv4 or IPv6 literal  */
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

/* ------------------------------------------------------------ work (serve_work.c, serve_verbs.c) */

/* Offer, ack, nack and extend: the body (JSON, len bytes) checked in full
 * before anything changes (400 with what is wrong), then the library call
 * on conf->c. */
void cli_view_offer(const cli_serve_conf *conf, const char *queue, const char *body, size_t len,
                    cli_view *v);
void cli_view_lease(const cli_serve_conf *conf, cli_endpoint ep, const char *queue, const char *id,
                    const char *body, size_t len, cli_view *v);

/* A take's request, checked: count 1..64, wait_ms 0..60000, lease_ms 0
 * (none) or more. Returns 0, or -1 after filling v with 400. */
typedef struct cli_take_args {
    size_t count;
    int64_t wait_ms, lease_ms;
} cli_take_args;
int cli_take_parse(const char *body, size_t len, cli_take_args *a, cli_view *v);

/* The work thread: uses c (a client on a loop of its own, connected) from
 * here on and runs its loop until cli_work_stop. NULL after saying why. */
typedef struct cli_work cli_work;
cli_work *cli_work_start(dq_client *c);
/* Cancels every waiting take (each answers what it got, or 503), then
 * stops the thread; the caller frees the client after. w stays valid
 * (cli_work_take refuses from now on) until cli_work_free, which comes
 * once the HTTP server, which may still hand takes over, has stopped.
 * Both safe with NULL. */
void cli_work_stop(cli_work *w);
void cli_work_free(cli_work *w);

/* A take handed to the work thread; done() runs on the work thread once
 * v is filled, after which the work thread no longer touches t. */
typedef struct cli_take {
    char queue[DQ_QUEUE_MAX + 1];
    cli_take_args args;
    int fd; /* the client's socket, looked at while the take waits:
                        a client gone cancels it (-1: not looked at) */
    cli_view v;
    void (*done)(struct cli_take *t);
    void *ctx;
    struct cli_take *next; /* the work thread's */
} cli_take;
/* Hands t to the work thread. Returns 0, or -1 if the thread is stopping
 * (then done never runs). */
int cli_work_take(cli_work *w, cli_take *t);

/* ------------------------------------------------------------ server (serve_http.c) */

typedef struct cli_server cli_server;

/* Starts serving on addr:port (an IPv4 or IPv6 literal) in a thread of its own. NULL after
 * printing why. conf must outlive the server. */
cli_server *cli_serve_start(const cli_serve_conf *conf, const char *addr, int port);
void cli_serve_stop(cli_server *s);

#endif
