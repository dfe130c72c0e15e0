/*
 * serve.h - the parts of 'delayq serve': the command (cmd_serve.c) starts
 * the HTTP server (serve_http.c), which routes each request to a view
 * (serve_views.c), which reads through the library. Each layer calls only
 * the one below.
 *
 * One thread: libmicrohttpd's own polling thread runs every request, one
 * at a time, and is the only user of the client (a dq_client is not
 * thread-safe; its synchronous calls run its private loop).
 */
#ifndef DELAYQ_CLI_SERVE_H
#define DELAYQ_CLI_SERVE_H

#include <stdarg.h>
#include <stddef.h>

#include "delayq.h"

typedef struct cli_serve_conf {
    dq_client *c;     /* used only by the server's thread once it starts */
    const char *token; /* mutations need "Authorization: Bearer TOKEN";
                          NULL: read-only, mutations answer 403          */
    char **queues;     /* shown besides the registry's                    */
    int nqueues;
} cli_serve_conf;

/* A response: status, content type (static) and a malloc'ed body. */
typedef struct cli_view {
    int status;
    const char *type;
    char *body;
    size_t len;
} cli_view;

/* ------------------------------------------------------------ views (serve_views.c) */

/* Each fills v. A library failure becomes 400 (bad input), 503 (Redis
 * away) or 502 (Redis erred), with a JSON body {"error": "..."}. */
void cli_view_error(cli_view *v, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void cli_view_metrics(const cli_serve_conf *conf, cli_view *v);
void cli_view_queues(const cli_serve_conf *conf, cli_view *v);
void cli_view_queue(const cli_serve_conf *conf, const char *queue, cli_view *v);
void cli_view_items(const cli_serve_conf *conf, const char *queue, const char *state, const char *cursor,
                    const char *limit, cli_view *v);
void cli_view_item(const cli_serve_conf *conf, const char *queue, const char *id, cli_view *v);
/* id NULL: every dead letter. */
void cli_view_redrive(const cli_serve_conf *conf, const char *queue, const char *id, cli_view *v);
void cli_view_purge(const cli_serve_conf *conf, const char *queue, cli_view *v);
void cli_view_cancel(const cli_serve_conf *conf, const char *queue, const char *id, cli_view *v);

/* *known = 1 if queue is in the registry or on the command line. Returns 0
 * or a negative code (Redis away). */
int cli_queue_known(const cli_serve_conf *conf, const char *queue, int *known);

/* ------------------------------------------------------------ server (serve_http.c) */

typedef struct cli_server cli_server;

/* Starts serving on addr:port (IPv4) in a thread of its own. NULL after
 * printing why. conf must outlive the server. */
cli_server *cli_serve_start(const cli_serve_conf *conf, const char *addr, int port);
void cli_serve_stop(cli_server *s);

#endif
