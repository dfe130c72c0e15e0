/*
 * serve_http.c - the HTTP side of 'delayq serve', on libmicrohttpd.
 *
 * Owns the daemon, turning each request into a cli_request for the router
 * (serve_route.c, which checks everything the request brings), asking
 * Redis whether a routed queue is known, calling the endpoint's view and
 * sending what it built.
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/serve.h"
#include "dashboard.h"
#include "util.h"

struct cli_server {
    struct MHD_Daemon *d;
};

/* Per request: how many bytes of body it has brought so far. */
typedef struct request {
    size_t body;
} request;

/* ------------------------------------------------------------ sending */

static enum MHD_Result send_view(struct MHD_Connection *conn, cli_view *v, const char *allow)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(v->len, v->body ? v->body : (char *)"", MHD_RESPMEM_MUST_COPY);
    free(v->body);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", v->type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (allow)
        MHD_add_response_header(r, "Allow", allow);
    if (v->status == 401)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    enum MHD_Result rc = MHD_queue_response(conn, (unsigned)v->status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result send_page(struct MHD_Connection *conn)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(dq_dashboard_html_LEN, (void *)dq_dashboard_html,
                                                             MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    /* The page is one file with inline script and style, and talks only
     * to this server. */
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                            "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'");
    enum MHD_Result rc = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}

/* ------------------------------------------------------------ dispatch */

/* 0 if the routed queue is one the server shows; else fills v (404, or
 * 503 with Redis away). */
static int known_queue(const cli_serve_conf *conf, const char *queue, cli_view *v)
{
    int known;
    if (cli_queue_known(conf, queue, &known)) {
        cli_view_error(v, 503, "Redis: %s", dq_client_errstr(conf->c));
        return -1;
    }
    if (!known) {
        cli_view_error(v, 404, "no such queue");
        return -1;
    }
    return 0;
}

/* Every endpoint's answer but the page's, which send_page sends. */
static void answer(const cli_serve_conf *conf, const cli_route *r, cli_view *v)
{
    switch (r->ep) {
    case CLI_EP_ERROR:
        cli_view_error(v, r->status, "%s", r->error);
        return;
    case CLI_EP_METRICS:
        cli_view_metrics(conf, v);
        return;
    case CLI_EP_QUEUES:
        cli_view_queues(conf, v);
        return;
    default:
        break;
    }
    if (known_queue(conf, r->queue, v))
        return;
    switch (r->ep) {
    case CLI_EP_QUEUE:
        cli_view_queue(conf, r->queue, v);
        break;
    case CLI_EP_ITEMS:
        cli_view_items(conf, r->queue, r->state, r->cursor, r->limit, v);
        break;
    case CLI_EP_ITEM:
        cli_view_item(conf, r->queue, r->id, v);
        break;
    case CLI_EP_CANCEL:
        cli_view_cancel(conf, r->queue, r->id, v);
        break;
    case CLI_EP_REDRIVE_ALL:
        cli_view_redrive(conf, r->queue, NULL, v);
        break;
    case CLI_EP_REDRIVE_ONE:
        cli_view_redrive(conf, r->queue, r->id, v);
        break;
    default: /* CLI_EP_PURGE */
        cli_view_purge(conf, r->queue, v);
        break;
    }
}

static const char *query(struct MHD_Connection *conn, const char *name)
{
    return MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    const cli_serve_conf *conf = cls;
    request *rq = *con_cls;
    (void)version, (void)upload_data;
    if (!rq) {
        /* First call: the headers only. Bodies come in the calls after. */
        if (!(rq = calloc(1, sizeof *rq)))
            return MHD_NO;
        *con_cls = rq;
        return MHD_YES;
    }
    if (*upload_data_size) {
        rq->body += *upload_data_size;
        *upload_data_size = 0;
        return MHD_YES;
    }
    const cli_request req = {
        .method = method,
        .path = url,
        .state = query(conn, "state"),
        .cursor = query(conn, "cursor"),
        .limit = query(conn, "limit"),
        .authorization = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization"),
        .body_len = rq->body,
    };
    cli_route r;
    cli_route_request(conf->token, &req, &r);
    if (r.ep == CLI_EP_PAGE)
        return send_page(conn);
    cli_view v = {0};
    answer(conf, &r, &v);
    return send_view(conn, &v, r.ep == CLI_EP_ERROR ? r.allow : NULL);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)conn, (void)toe;
    free(*con_cls);
    *con_cls = NULL;
}

/* ------------------------------------------------------------ the daemon */

cli_server *cli_serve_start(const cli_serve_conf *conf, const char *addr, int port)
{
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
        cli_err("serve: --listen: %s is not an IPv4 address", cli_quote(addr));
        return NULL;
    }
    cli_server *s = calloc(1, sizeof *s);
    if (!s) {
        cli_err("serve: out of memory");
        return NULL;
    }
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO, (uint16_t)port, NULL, NULL,
                            on_request, (void *)conf, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)64, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (!s->d) {
        cli_err("serve: cannot listen on %s:%d (in use, or not an address of this machine)", addr, port);
        free(s);
        return NULL;
    }
    return s;
}

void cli_serve_stop(cli_server *s)
{
    if (!s)
        return;
    MHD_stop_daemon(s->d);
    free(s);
}
