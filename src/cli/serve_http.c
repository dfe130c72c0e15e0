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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/serve.h"
#include "dashboard.h"
#include "util.h"

struct cli_server {
    struct MHD_Daemon *d;
    const cli_serve_conf *conf;
    cli_conns *conns; /* the daemon's thread's */
};

/* Per request: how many bytes of body it has brought so far. */
typedef struct request {
    size_t body;
} request;

/* ------------------------------------------------------------ sending */

/* No answer of this server may be framed (clickjacking); the JSON and text
 * answers load nothing. */
#define CSP_DATA "default-src 'none'; frame-ancestors 'none'"
/* The page is one file with inline script and style, and talks only to
 * this server. */
#define CSP_PAGE                                                                                              \
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "        \
    "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

static enum MHD_Result queue(struct MHD_Connection *conn, struct MHD_Response *r, unsigned status,
                             const char *type, const char *csp)
{
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Content-Security-Policy", csp);
    enum MHD_Result rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rc;
}

/* Sends v; allow: the Allow header of a 405; retry_after: seconds, for a
 * 429 (0: none). */
static enum MHD_Result send_view(struct MHD_Connection *conn, cli_view *v, const char *allow, int retry_after)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(v->len, v->body ? v->body : (char *)"", MHD_RESPMEM_MUST_COPY);
    free(v->body);
    if (!r)
        return MHD_NO;
    if (allow)
        MHD_add_response_header(r, "Allow", allow);
    if (v->status == 401)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (retry_after > 0) {
        char secs[16];
        snprintf(secs, sizeof secs, "%d", retry_after);
        MHD_add_response_header(r, "Retry-After", secs);
    }
    return queue(conn, r, (unsigned)v->status, v->type, CSP_DATA);
}

static enum MHD_Result send_page(struct MHD_Connection *conn)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(dq_dashboard_html_LEN, (void *)dq_dashboard_html,
                                                             MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    return queue(conn, r, MHD_HTTP_OK, "text/html; charset=utf-8", CSP_PAGE);
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

/* The client's IP address bytes into ip (16); their count, 0 if unknown. */
static size_t client_ip(struct MHD_Connection *conn, unsigned char ip[16])
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET) {
        memcpy(ip, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
        return 4;
    }
    if (sa && sa->sa_family == AF_INET6) {
        memcpy(ip, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
        return 16;
    }
    return 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int is_mutation(cli_endpoint ep)
{
    return ep == CLI_EP_CANCEL || ep == CLI_EP_REDRIVE_ALL || ep == CLI_EP_REDRIVE_ONE || ep == CLI_EP_PURGE;
}

/* The checks a request meets before anything else is done for it: a Host
 * of this server (421), and no wait owed for failed tokens if it brings
 * one (429). MHD_YES with nothing sent if it passes. */
static enum MHD_Result guard(const cli_serve_conf *conf, struct MHD_Connection *conn, int *sent)
{
    cli_view v = {0};
    unsigned char ip[16];
    *sent = 1;
    if (!cli_host_allowed(conf->hosts, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host"))) {
        cli_view_error(&v, 421, "misdirected request: this server answers to its address, localhost and the "
                                "names given with --allow-host");
        return send_view(conn, &v, NULL, 0);
    }
    int wait = 0;
    if (MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization"))
        wait = cli_guard_wait(conf->guard, ip, client_ip(conn, ip), now_ms());
    if (wait) {
        cli_view_error(&v, 429, "too many failed tokens: try again in %d s", wait);
        return send_view(conn, &v, NULL, wait);
    }
    *sent = 0;
    return MHD_YES;
}

/* conn's entry in the connection table, or NULL. */
static cli_conn *conn_entry(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    const cli_serve_conf *conf = ((const cli_server *)cls)->conf;
    request *rq = *con_cls;
    (void)version, (void)upload_data;
    if (!rq) {
        /* First call: the headers only. Bodies come in the calls after. */
        int sent;
        cli_conn_busy(conn_entry(conn), 1, now_ms());
        enum MHD_Result g = guard(conf, conn, &sent);
        if (sent)
            return g;
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
    if (req.authorization && (is_mutation(r.ep) || r.status == 401)) {
        unsigned char ip[16];
        cli_guard_result(conf->guard, ip, client_ip(conn, ip), now_ms(), r.status != 401);
    }
    if (r.ep == CLI_EP_PAGE)
        return send_page(conn);
    cli_view v = {0};
    answer(conf, &r, &v);
    return send_view(conn, &v, r.ep == CLI_EP_ERROR ? r.allow : NULL, 0);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)toe;
    cli_conn_busy(conn_entry(conn), 0, now_ms());
    free(*con_cls);
    *con_cls = NULL;
}

/* Keeps the connection table, and closes the waiting connection a new one
 * pushes out: shutdown() makes the daemon see its end and close it, in
 * this same thread, so the descriptor is still that connection's. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    cli_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        cli_conn_end(s->conns, *socket_context);
        *socket_context = NULL;
        return;
    }
    unsigned char ip[16];
    cli_conn *evict;
    *socket_context = cli_conn_start(s->conns, ip, client_ip(conn, ip), conn, now_ms(), &evict);
    const union MHD_ConnectionInfo *fd =
        evict ? MHD_get_connection_info(cli_conn_handle(evict), MHD_CONNECTION_INFO_CONNECTION_FD) : NULL;
    if (fd)
        shutdown(fd->connect_fd, SHUT_RDWR);
}

/* ------------------------------------------------------------ the daemon */

/* Connections: at most CONN_MAX in all and CONN_PER_IP from one address,
 * each closed after CONN_IDLE_S seconds without a byte, in its headers,
 * its body or while it reads the answer; below those bounds a new
 * connection pushes out a waiting one (see cli_conn_start), so these are
 * never reached by waiting connections alone. One polling thread (epoll)
 * reads and writes every connection without blocking, so a slow client
 * holds only its own connections. */
#define CONN_MAX 256
#define CONN_PER_IP 64
#define CONN_IDLE_S 10

cli_server *cli_serve_start(const cli_serve_conf *conf, const char *addr, int port)
{
    struct sockaddr_storage ss = {0};
    struct sockaddr_in *sa4 = (struct sockaddr_in *)(void *)&ss;
    struct sockaddr_in6 *sa6 = (struct sockaddr_in6 *)(void *)&ss;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
    if (inet_pton(AF_INET, addr, &sa4->sin_addr) == 1) {
        sa4->sin_family = AF_INET;
        sa4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, addr, &sa6->sin6_addr) == 1) {
        sa6->sin6_family = AF_INET6;
        sa6->sin6_port = htons((uint16_t)port);
        flags |= MHD_USE_IPv6;
    } else {
        cli_err("serve: --listen: %s is not an IPv4 or IPv6 address", cli_quote(addr));
        return NULL;
    }
    cli_server *s = calloc(1, sizeof *s);
    if (!s || !(s->conns = cli_conns_new())) {
        cli_err("serve: out of memory");
        free(s);
        return NULL;
    }
    s->conf = conf;
    s->d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                            (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONN_MAX, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                            (unsigned)CONN_PER_IP, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_IDLE_S,
                            MHD_OPTION_END);
    if (!s->d) {
        cli_err("serve: cannot listen on %s port %d (in use, or not an address of this machine)", addr, port);
        cli_conns_free(s->conns);
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
    cli_conns_free(s->conns);
    free(s);
}
