/*
 * serve_http.c - the HTTP side of 'delayq serve', on libmicrohttpd.
 *
 * Owns the daemon, turning each request into a cli_request for the router
 * (serve_route.c, which checks everything the request brings), asking
 * Redis whether a routed queue is known, calling the endpoint's view and
 * sending what it built. A take's connection is suspended while the work
 * thread (serve_work.c) waits for items, and resumed by it with the
 * answer, which the next call for that connection sends.
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/serve/serve.h"
#include "dashboard.h"
#include "util.h"

struct cli_server {
    struct MHD_Daemon *d;
    const cli_serve_conf *conf;
    cli_conns *conns; /* the daemon's thread's */
    size_t held;      /* the daemon's thread's: body bytes kept by all requests */
    int takes;        /* takes handed to the work thread whose answer is not
                         sent yet (atomic: cli_serve_stop waits for 0) */
};

/* Per request: its body (kept up to what its endpoint may take, counted
 * past that), and its take while the work thread has it. */
typedef struct request {
    cli_take take;   /* first: done() gets it back as the request */
    char *body;
    size_t len, cap, keep;
    int taking;      /* 1: handed to the work thread; 2: answered  */
    int took;        /* counted in cli_server.takes until completed  */
    int over;        /* its body would pass BODIES_HELD: 503         */
    int64_t since;   /* when its headers came (ms)                  */
    int refused;     /* refused when its headers came (route_early): its
                        body is read and dropped, then `early` answered */
    cli_route early;
    struct MHD_Connection *conn;
} request;

/* Bodies: all requests' together at most BODIES_HELD bytes (past it, a
 * request answers 503 and keeps nothing more), and each must arrive within
 * BODY_TIME_MS of its headers (else its connection is closed): a client
 * that trickles a body byte by byte, which the idle timeout alone lets
 * through, holds neither memory nor a connection for long. Only a request
 * whose token passed keeps its body (route_early). */
#define BODIES_HELD (64u << 20)
#define BODY_TIME_MS 30000

/* ------------------------------------------------------------ sending */

/* No answer of this server may be framed (clickjacking); the JSON and text
 * answers load nothing. */
#define CSP_DATA "default-src 'none'; frame-ancestors 'none'"
/* The page is one file with inline script and style, and talks only to
 * this server. */
#define CSP_PAGE                                                                                      \
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; " \
    "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

static enum MHD_Result queue(struct MHD_Connection *conn, struct MHD_Response *r, unsigned status,
                             const char *type, const char *csp) {
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
static enum MHD_Result send_view(struct MHD_Connection *conn, cli_view *v, const char *allow,
                                 int retry_after) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(v->len, v->body ? v->body : (char *)"", MHD_RESPMEM_MUST_COPY);
    free(v->body);
    if (!r) return MHD_NO;
    if (allow) MHD_add_response_header(r, "Allow", allow);
    if (v->status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (retry_after > 0) {
        char secs[16];
        snprintf(secs, sizeof secs, "%d", retry_after);
        MHD_add_response_header(r, "Retry-After", secs);
    }
    return queue(conn, r, (unsigned)v->status, v->type, CSP_DATA);
}

static enum MHD_Result send_page(struct MHD_Connection *conn) {
    struct MHD_Response *r = MHD_create_response_from_buffer(
        dq_dashboard_html_LEN, (void *)dq_dashboard_html, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    return queue(conn, r, MHD_HTTP_OK, "text/html; charset=utf-8", CSP_PAGE);
}

/* ------------------------------------------------------------ dispatch */

/* 0 if the routed queue is one the server shows; else fills v (404, or
 * the failure's status: 503 with Redis away). */
static int known_queue(const cli_serve_conf *conf, const char *queue, cli_view *v) {
    int known, rc = cli_queue_known(conf, queue, &known);
    if (rc) {
        cli_view_failure(v, conf->c, rc);
        return -1;
    }
    if (!known) {
        cli_view_error(v, 404, "no such queue");
        return -1;
    }
    return 0;
}

/* Every endpoint's answer but the page's, which send_page sends, and a
 * take's, which the work thread builds. */
static void answer(const cli_serve_conf *conf, const cli_route *r, const request *rq, cli_view *v) {
    switch (r->ep) {
        case CLI_EP_ERROR: cli_view_error(v, r->status, "%s", r->error); return;
        case CLI_EP_OFFER: /* a queue comes to be with its first offer */
            cli_view_offer(conf, r->queue, rq->body, rq->len, v);
            return;
        case CLI_EP_ACK:
        case CLI_EP_NACK:
        case CLI_EP_EXTEND:
        case CLI_EP_RELEASE: cli_view_lease(conf, r->ep, r->queue, r->id, rq->body, rq->len, v); return;
        case CLI_EP_METRICS: cli_view_metrics(conf, v); return;
        case CLI_EP_QUEUES: cli_view_queues(conf, v); return;
        default: break;
    }
    if (known_queue(conf, r->queue, v)) return;
    switch (r->ep) {
        case CLI_EP_QUEUE: cli_view_queue(conf, r->queue, v); break;
        case CLI_EP_CONSUMERS: cli_view_consumers(conf, r->queue, v); break;
        case CLI_EP_ITEMS: cli_view_items(conf, r->queue, r->state, r->cursor, r->limit, v); break;
        case CLI_EP_ITEM: cli_view_item(conf, r->queue, r->id, v); break;
        case CLI_EP_SCHEDULES: cli_view_schedules(conf, r->queue, v); break;
        case CLI_EP_CANCEL: cli_view_cancel(conf, r->queue, r->id, v); break;
        case CLI_EP_REDRIVE_ALL: cli_view_redrive(conf, r->queue, NULL, v); break;
        case CLI_EP_REDRIVE_ONE: cli_view_redrive(conf, r->queue, r->id, v); break;
        default: /* CLI_EP_PURGE */ cli_view_purge(conf, r->queue, v); break;
    }
}

static const char *query(struct MHD_Connection *conn, const char *name) {
    return MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
}

/* The client's IP address bytes into ip (16); their count, 0 if unknown. */
static size_t client_ip(struct MHD_Connection *conn, unsigned char ip[16]) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
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

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The checks a request meets before anything else is done for it: a Host
 * of this server (421), and no wait owed for failed tokens if it brings
 * one (429). MHD_YES with nothing sent if it passes. */
static enum MHD_Result guard(const cli_serve_conf *conf, struct MHD_Connection *conn, int *sent) {
    cli_view v = {0};
    unsigned char ip[16];
    *sent = 1;
    if (!cli_host_allowed(conf->hosts, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host"))) {
        cli_view_error(&v, 421,
                       "misdirected request: this server answers to its address, localhost and the "
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
static cli_conn *conn_entry(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* Runs on the work thread once the take's answer is in t->v. */
static void take_done(cli_take *t) {
    request *rq = (request *)(void *)t;
    rq->taking = 2;
    MHD_resume_connection(rq->conn);
}

/* Hands a routed take to the work thread and suspends the connection;
 * fills v instead when the body is wrong or the thread is stopping. */
static int start_take(cli_server *s, const cli_route *r, request *rq, cli_view *v) {
    if (cli_take_parse(rq->body, rq->len, &rq->take.args, v)) return -1;
    snprintf(rq->take.queue, sizeof rq->take.queue, "%s", r->queue);
    const union MHD_ConnectionInfo *fd =
        MHD_get_connection_info(rq->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    rq->take.fd = fd ? fd->connect_fd : -1;
    rq->take.done = take_done;
    rq->taking = 1;
    rq->took = 1;
    __atomic_add_fetch(&s->takes, 1, __ATOMIC_SEQ_CST);
    MHD_suspend_connection(rq->conn);
    if (cli_work_take(s->conf->work, &rq->take) == 0) return 0;
    rq->took = 0;
    __atomic_sub_fetch(&s->takes, 1, __ATOMIC_SEQ_CST);
    MHD_resume_connection(rq->conn);
    rq->taking = 0;
    cli_view_error(v, 503, "the server is stopping");
    return -1;
}

/* Keeps what a body chunk brings, up to rq->keep bytes and while all
 * requests' bodies fit in BODIES_HELD (else marks rq over); counts the
 * rest. */
static int keep_body(cli_server *s, request *rq, const char *data, size_t size) {
    size_t room = rq->len < rq->keep ? rq->keep - rq->len : 0, take = size < room ? size : room;
    if (take && rq->len + take > rq->cap) {
        if (rq->over || s->held + (rq->len + take - rq->cap) > BODIES_HELD) {
            rq->over = 1;
            rq->len += size;
            return 0;
        }
        size_t cap = rq->cap ? rq->cap : 4096;
        while (cap < rq->len + take) cap *= 2;
        char *b = realloc(rq->body, cap + 1);
        if (!b) return -1;
        s->held += cap - rq->cap;
        rq->body = b;
        rq->cap = cap;
    }
    if (take) memcpy(rq->body + rq->len, data, take);
    rq->len += size; /* past keep, only counted: the router answers 413 */
    return 0;
}

/* The request as the router sees it, its body len bytes so far. */
static cli_request request_of(struct MHD_Connection *conn, const char *url, const char *method,
                              size_t len) {
    cli_request req = {
        .method = method,
        .path = url,
        .state = query(conn, "state"),
        .cursor = query(conn, "cursor"),
        .limit = query(conn, "limit"),
        .authorization = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization"),
        .body_len = len,
    };
    return req;
}

/* Routes a request when its headers come, before any of its body, into
 * *r: a request the router refuses whatever its body (a wrong token above
 * all) is refused now, so nobody without a token has a body kept, and the
 * failed-token backoff counts each token in the same step that checked
 * its wait (guard): connections that all sent their headers before any
 * body cannot each get a guess past the wait. A Content-Length past what
 * the endpoint takes is refused (413) as well. 1 if refused (r->ep is
 * CLI_EP_ERROR). */
static int route_early(const cli_serve_conf *conf, struct MHD_Connection *conn, const char *url,
                       const char *method, size_t keep, cli_route *r) {
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
    unsigned long long announced = cl ? strtoull(cl, NULL, 10) : 0;
    cli_request req = request_of(conn, url, method, 0);
    cli_route_request(conf->tokens, &req, r);
    if (req.authorization && (cli_endpoint_role(r->ep) || r->status == 401)) {
        unsigned char ip[16];
        cli_guard_result(conf->guard, ip, client_ip(conn, ip), now_ms(), r->status != 401);
    }
    if (r->ep != CLI_EP_ERROR && announced >= keep) {
        r->ep = CLI_EP_ERROR;
        r->status = 413;
        r->error = "request body too large";
        r->allow = NULL;
    }
    return r->ep == CLI_EP_ERROR;
}

static enum MHD_Result send_route_error(struct MHD_Connection *conn, const cli_route *r) {
    cli_view v = {0};
    cli_view_error(&v, r->status, "%s", r->error);
    return send_view(conn, &v, r->allow, 0);
}

/* Whether a body follows the headers (a Content-Length above 0, or a
 * chunked one). */
static int body_coming(struct MHD_Connection *conn) {
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
    const char *te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Transfer-Encoding");
    return (cl && strtoull(cl, NULL, 10) > 0) || te;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    cli_server *s = cls;
    const cli_serve_conf *conf = s->conf;
    request *rq = *con_cls;
    (void)version;
    if (!rq) {
        /* First call: the headers only. Bodies come in the calls after. */
        int sent;
        cli_conn_busy(conn_entry(conn), 1, now_ms());
        enum MHD_Result g = guard(conf, conn, &sent);
        if (sent) return g;
        /* Only an offer's body may be big (the router checks the rest):
         * others keep no more than the router takes from them. */
        size_t ul = strlen(url);
        int offer = strcmp(method, "POST") == 0 && ul > 6 && strcmp(url + ul - 6, "/items") == 0;
        size_t keep = (offer ? CLI_BODY_MAX : CLI_BODY_SMALL) + 1;
        cli_route early;
        int refused = route_early(conf, conn, url, method, keep, &early);
        /* A refusal with no body to come is answered now. One with a body
         * is answered once the body has been read (and dropped): a client
         * that sends its whole body before it reads the answer, as most
         * do, would otherwise meet a reset. Its connection may be pushed
         * out meanwhile, as an idle one may (cli_conn_start): a body
         * trickled on a refused request holds no place. */
        if (refused && !body_coming(conn)) return send_route_error(conn, &early);
        if (!(rq = calloc(1, sizeof *rq))) return MHD_NO;
        rq->conn = conn;
        rq->keep = keep;
        rq->since = now_ms();
        if (refused) {
            rq->refused = 1;
            rq->early = early;
            cli_conn_busy(conn_entry(conn), 0, now_ms());
        }
        *con_cls = rq;
        return MHD_YES;
    }
    if (rq->taking == 2) { /* resumed by the work thread */
        cli_view v = rq->take.v;
        rq->taking = 0;
        rq->take.v.body = NULL; /* send_view frees it */
        return send_view(conn, &v, NULL, 0);
    }
    if (*upload_data_size) {
        if (now_ms() - rq->since > BODY_TIME_MS) return MHD_NO; /* closes the connection */
        if (!rq->refused && keep_body(s, rq, upload_data, *upload_data_size)) return MHD_NO;
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (rq->refused) return send_route_error(conn, &rq->early);
    /* Routed again with the whole body: its size, and the token checked
     * once more (route_early counted it for the backoff). */
    const cli_request req = request_of(conn, url, method, rq->len);
    cli_route r;
    cli_route_request(conf->tokens, &req, &r);
    if (r.ep == CLI_EP_PAGE) return send_page(conn);
    cli_view v = {0};
    if (rq->over && r.ep != CLI_EP_ERROR) {
        cli_view_error(&v, 503, "busy: too many request bodies at once; try again");
        return send_view(conn, &v, NULL, 1);
    }
    if (r.ep == CLI_EP_TAKE) {
        if (start_take(s, &r, rq, &v) == 0) return MHD_YES;
        return send_view(conn, &v, NULL, 0);
    }
    answer(conf, &r, rq, &v);
    return send_view(conn, &v, r.ep == CLI_EP_ERROR ? r.allow : NULL, 0);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    cli_server *s = cls;
    (void)toe;
    request *rq = *con_cls;
    cli_conn_busy(conn_entry(conn), 0, now_ms());
    if (rq) {
        free(rq->take.v.body); /* an answer never sent */
        free(rq->body);
        s->held -= rq->cap;
        if (rq->took) __atomic_sub_fetch(&s->takes, 1, __ATOMIC_SEQ_CST);
    }
    free(rq);
    *con_cls = NULL;
}

/* Keeps the connection table, and closes the waiting connection a new one
 * pushes out: shutdown() makes the daemon see its end and close it, in
 * this same thread, so the descriptor is still that connection's. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
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
        evict ? MHD_get_connection_info(cli_conn_handle(evict), MHD_CONNECTION_INFO_CONNECTION_FD)
              : NULL;
    if (fd) shutdown(fd->connect_fd, SHUT_RDWR);
}

/* ------------------------------------------------------------ the daemon */

/* Decodes a path or query value in place (libmicrohttpd's own decoding),
 * with "%00" decoded to 0x01: a NUL would end the C string early, so
 * ".../items/abc%00xyz" would act on item "abc"; a control byte is refused
 * by the router like any other (no id or queue name holds one). */
static size_t unescape(void *cls, struct MHD_Connection *conn, char *s) {
    (void)cls, (void)conn;
    for (char *p = strstr(s, "%00"); p; p = strstr(p + 3, "%00")) p[2] = '1';
    return MHD_http_unescape(s);
}

/* Connections: at most CONN_MAX in all and CONN_PER_IP from one address,
 * each closed after CONN_IDLE_S seconds without a byte, in its headers,
 * its body or while it reads the answer; below those bounds a new
 * connection pushes out a waiting one (see cli_conn_start), so these are
 * never reached by waiting connections alone. One polling thread (epoll)
 * reads and writes every connection without blocking, so a slow client
 * holds only its own connections. */
#define CONN_MAX 512   /* room for hundreds of waiting takes */
#define CONN_PER_IP 256
#define CONN_IDLE_S 10

cli_server *cli_serve_start(const cli_serve_conf *conf, const char *addr, int port) {
    struct sockaddr_storage ss = {0};
    struct sockaddr_in *sa4 = (struct sockaddr_in *)(void *)&ss;
    struct sockaddr_in6 *sa6 = (struct sockaddr_in6 *)(void *)&ss;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME;
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
                            (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_UNESCAPE_CALLBACK,
                            unescape, NULL, MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONN_MAX,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)CONN_PER_IP,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_IDLE_S, MHD_OPTION_END);
    if (!s->d) {
        cli_err("serve: cannot listen on %s port %d (in use, or not an address of this machine)", addr,
                port);
        cli_conns_free(s->conns);
        free(s);
        return NULL;
    }
    return s;
}

/* Takes answered at a stop get this long to reach their clients. */
#define STOP_SEND_MS 5000

void cli_serve_stop(cli_server *s) {
    if (!s) return;
    /* The work thread has answered every take (cli_work_stop, before this)
     * and resumed its connection; stopping the daemon now would close them
     * unsent, and an item taken without a lease would be lost. So no new
     * connection is accepted, and the answers go out first. */
    MHD_socket ls = MHD_quiesce_daemon(s->d);
    for (int64_t end = now_ms() + STOP_SEND_MS;
         __atomic_load_n(&s->takes, __ATOMIC_SEQ_CST) > 0 && now_ms() < end;) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    MHD_stop_daemon(s->d);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    cli_conns_free(s->conns);
    free(s);
}
