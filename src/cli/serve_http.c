/*
 * serve_http.c - the HTTP side of 'delayq serve', on libmicrohttpd.
 *
 * Owns the daemon, routing a request's method and path to a view, the
 * bearer-token check of mutations, and sending what the view built. Paths:
 *   GET    /                                   the dashboard (built in)
 *   GET    /metrics                            Prometheus text
 *   GET    /api/queues                         every queue with its counts
 *   GET    /api/queues/{q}                     one, with its lateness histogram
 *   GET    /api/queues/{q}/items?state=&cursor=&limit=
 *   GET    /api/queues/{q}/items/{id}          look-up
 *   DELETE /api/queues/{q}/items/{id}          cancel          (token)
 *   POST   /api/queues/{q}/dead/redrive        all dead letters (token)
 *   POST   /api/queues/{q}/dead/{id}/redrive   one             (token)
 *   POST   /api/queues/{q}/dead/purge                          (token)
 * A bad request gets a 4xx with a JSON error body. libmicrohttpd has
 * unescaped the path already, so an id may hold '/': it is the rest of the
 * path after "/items/", or before "/redrive".
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

#define BODY_MAX 65536 /* request bodies are read and dropped, up to this */

struct cli_server {
    struct MHD_Daemon *d;
};

/* Per request: what its body has brought so far. */
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

/* ------------------------------------------------------------ checks */

/* 0 if the request may change things; else fills v (403 read-only, 401). */
static int authorized(const cli_serve_conf *conf, struct MHD_Connection *conn, cli_view *v)
{
    if (!conf->token) {
        cli_view_error(v, 403, "read-only: this server was started without --token-file");
        return -1;
    }
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    size_t want = strlen(conf->token);
    if (h && strncmp(h, "Bearer ", 7) == 0 && strlen(h + 7) == want &&
        sodium_memcmp(h + 7, conf->token, want) == 0)
        return 0;
    cli_view_error(v, 401, "a valid 'Authorization: Bearer TOKEN' header is needed to change a queue");
    return -1;
}

/* 0 if queue is a valid name the server knows; else fills v. */
static int known_queue(const cli_serve_conf *conf, const char *queue, cli_view *v)
{
    int known;
    if (!dq__queue_valid(queue)) {
        cli_view_error(v, 400, "invalid queue name");
        return -1;
    }
    int rc = cli_queue_known(conf, queue, &known);
    if (rc) {
        cli_view_error(v, 503, "Redis: %s", dq_client_errstr(conf->c));
        return -1;
    }
    if (!known) {
        cli_view_error(v, 404, "no such queue");
        return -1;
    }
    return 0;
}

static int valid_id(const char *id, cli_view *v)
{
    if (dq__id_valid(id))
        return 0;
    cli_view_error(v, 400, "invalid id: 1 to %d printable ASCII characters", DQ_ID_MAX);
    return -1;
}

/* ------------------------------------------------------------ routing */

/* The request on /api/queues/{q}/REST, rest without its leading '/'
 * ("" for the queue itself). Fills v; *allow gets the methods the path
 * takes when the method is wrong. */
static void route_queue(const cli_serve_conf *conf, struct MHD_Connection *conn, const char *method,
                        const char *queue, const char *rest, cli_view *v, const char **allow)
{
    int get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0,
        del = strcmp(method, "DELETE") == 0;
    size_t rl = strlen(rest);
    if (!*rest || strcmp(rest, "items") == 0) {
        if (!get) {
            *allow = "GET";
            cli_view_error(v, 405, "method not allowed");
        } else if (known_queue(conf, queue, v) == 0) {
            if (*rest)
                cli_view_items(conf, queue,
                               MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "state")
                                   ?: "pending",
                               MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "cursor"),
                               MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit"), v);
            else
                cli_view_queue(conf, queue, v);
        }
    } else if (strncmp(rest, "items/", 6) == 0) {
        const char *id = rest + 6;
        if (!get && !del) {
            *allow = "GET, DELETE";
            cli_view_error(v, 405, "method not allowed");
        } else if (valid_id(id, v) == 0 && (get || authorized(conf, conn, v) == 0) &&
                   known_queue(conf, queue, v) == 0) {
            if (get)
                cli_view_item(conf, queue, id, v);
            else
                cli_view_cancel(conf, queue, id, v);
        }
    } else if (strcmp(rest, "dead/redrive") == 0 || strcmp(rest, "dead/purge") == 0 ||
               (strncmp(rest, "dead/", 5) == 0 && rl > 5 + 8 && strcmp(rest + rl - 8, "/redrive") == 0)) {
        char id[DQ_ID_MAX + 2] = "";
        int one = strcmp(rest, "dead/redrive") != 0 && strcmp(rest, "dead/purge") != 0;
        if (one)
            snprintf(id, sizeof id, "%.*s", (int)(rl - 5 - 8 < sizeof id - 1 ? rl - 5 - 8 : sizeof id - 1),
                     rest + 5);
        if (!post) {
            *allow = "POST";
            cli_view_error(v, 405, "method not allowed");
        } else if ((!one || valid_id(id, v) == 0) && authorized(conf, conn, v) == 0 &&
                   known_queue(conf, queue, v) == 0) {
            if (strcmp(rest, "dead/purge") == 0)
                cli_view_purge(conf, queue, v);
            else
                cli_view_redrive(conf, queue, one ? id : NULL, v);
        }
    } else {
        cli_view_error(v, 404, "no such path");
    }
}

static void route(const cli_serve_conf *conf, struct MHD_Connection *conn, const char *method, const char *url,
                  cli_view *v, const char **allow)
{
    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    if (strcmp(url, "/metrics") == 0 || strcmp(url, "/api/queues") == 0) {
        if (!get) {
            *allow = "GET";
            cli_view_error(v, 405, "method not allowed");
        } else if (url[1] == 'm') {
            cli_view_metrics(conf, v);
        } else {
            cli_view_queues(conf, v);
        }
        return;
    }
    if (strncmp(url, "/api/queues/", 12) == 0) {
        const char *q = url + 12, *slash = strchr(q, '/');
        char queue[DQ_QUEUE_MAX + 2];
        size_t ql = slash ? (size_t)(slash - q) : strlen(q);
        snprintf(queue, sizeof queue, "%.*s", (int)(ql < sizeof queue - 1 ? ql : sizeof queue - 1), q);
        route_queue(conf, conn, method, queue, slash ? slash + 1 : "", v, allow);
        return;
    }
    cli_view_error(v, 404, "no such path");
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
    cli_view v = {0};
    const char *allow = NULL;
    if (rq->body > BODY_MAX)
        cli_view_error(&v, 413, "request body too large");
    else if (strcmp(url, "/") == 0 && (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0))
        return send_page(conn);
    else if (strcmp(url, "/") == 0)
        (allow = "GET"), cli_view_error(&v, 405, "method not allowed");
    else
        route(conf, conn, method, url, &v, &allow);
    return send_view(conn, &v, allow);
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
