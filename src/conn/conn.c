/*
 * conn.c - one Redis connection to one address on the client's libev loop:
 * connect with a timeout, handshake (AUTH, SELECT, ROLE, CLIENT ID),
 * per-command reply deadlines, and reconnection with jittered backoff.
 * It knows nothing of queues, scripts or topologies: the router (router.c)
 * decides where a connection points and what goes over it.
 *
 * The bytes go over a link (link.c: the socket, plain or TLS, and the RESP
 * parser). Each connection keeps its sent commands in a FIFO (replies come
 * back in order) and one libev timer armed for the oldest one's deadline. When it expires the connection is
 * dropped: a late reply can no longer be matched to anything, and every
 * waiting callback learns the cause once.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define BACKOFF_MIN_MS 20

struct dq__req {
    dq__req *next;
    dq__conn *conn;
    dq__reply_fn *fn;
    void *privdata;
    double deadline;         /* ev_now seconds; 0 = none                  */
    int timeout_ms;          /* what the deadline was set from (messages) */
};

static void set_err(dq__conn *conn, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(dq__conn *conn, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(conn->errstr, sizeof conn->errstr, fmt, ap);
    va_end(ap);
    conn->last_code = code;
}

/* ------------------------------------------------------------ request FIFO */

static void req_free(dq__req *r) { free(r); }

static void fifo_push(dq__conn *conn, dq__req *r) {
    r->next = NULL;
    if (conn->tail) conn->tail->next = r;
    else conn->head = r;
    conn->tail = r;
}

static void fifo_remove(dq__conn *conn, dq__req *r) {
    dq__req **p = &conn->head, *prev = NULL;
    while (*p && *p != r) {
        prev = *p;
        p = &(*p)->next;
    }
    if (!*p) return;
    *p = r->next;
    if (conn->tail == r) conn->tail = prev;
}

/* Arms the command timer for the oldest request that has a deadline. */
static void rearm_cmd_timer(dq__conn *conn) {
    struct ev_loop *loop = conn->client->loop;
    ev_timer_stop(loop, &conn->cmd_timer);
    for (dq__req *r = conn->head; r; r = r->next) {
        if (r->deadline > 0) {
            double in = r->deadline - ev_now(loop);
            ev_timer_set(&conn->cmd_timer, in > 0 ? in : 0, 0);
            ev_timer_start(loop, &conn->cmd_timer);
            return;
        }
    }
}

/* ------------------------------------------------------------ reply dispatch */

/* A reply answers the oldest request sent. */
static void on_reply(dq__conn *conn, redisReply *reply) {
    dq__req *r = conn->head;
    if (!r) {
        set_err(conn, DQ_EPROTO, "Redis at %s sent a reply nothing asked for", conn->name);
        dq__conn_abort(conn, DQ_EPROTO, NULL);
        return;
    }
    fifo_remove(conn, r);
    rearm_cmd_timer(conn);
    r->fn(conn, reply, 0, r->privdata);
    req_free(r);
}

void dq__ignore_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    (void)conn, (void)reply, (void)code, (void)privdata;
}

/* Sends cmd with a reply deadline of timeout_ms (0: none). */
static int send_within(dq__conn *conn, int timeout_ms, const char *cmd, size_t len, dq__reply_fn *fn,
                       void *privdata) {
    if (!conn->link || (conn->state != DQ__UP && conn->state != DQ__HANDSHAKE)) {
        char why[DQ__ERRSTR_MAX];
        snprintf(why, sizeof why, "%s", conn->errstr[0] ? conn->errstr : "connecting");
        set_err(conn, DQ_ECONNECT, "not connected to Redis at %s (%s)", conn->name, why);
        return DQ_ECONNECT;
    }
    dq__req *r = calloc(1, sizeof *r);
    if (!r) return DQ_ENOMEM;
    r->fn = fn;
    r->privdata = privdata;
    r->conn = conn;
    if (timeout_ms > 0) {
        /* The loop's cached time is stale after a while outside the loop
         * (a synchronous caller's own work): refresh it, or the deadline
         * could be in the past already. */
        ev_now_update(conn->client->loop);
        r->deadline = ev_now(conn->client->loop) + timeout_ms / 1000.0;
        r->timeout_ms = timeout_ms;
    }
    /* The link copies the command into its output buffer. */
    int rc = dq__link_send(conn->link, cmd, len);
    if (rc) {
        set_err(conn, rc, "cannot send to Redis at %s: %s", conn->name,
                rc == DQ_ENOMEM ? "out of memory" : "connection closing");
        free(r);
        return rc;
    }
    fifo_push(conn, r);
    if (r->deadline > 0 && !ev_is_active(&conn->cmd_timer)) rearm_cmd_timer(conn);
    return 0;
}

int dq__conn_send_raw(dq__conn *conn, unsigned flags, const char *cmd, size_t len, dq__reply_fn *fn,
                      void *privdata) {
    int ms = (flags & DQ__SEND_NO_TIMEOUT) ? 0 : conn->client->opt.command_timeout_ms;
    return send_within(conn, ms, cmd, len, fn, privdata);
}

int dq__conn_send(dq__conn *conn, unsigned flags, int argc, const char **argv, const size_t *argvlen,
                  dq__reply_fn *fn, void *privdata) {
    int ms = (flags & DQ__SEND_NO_TIMEOUT) ? 0 : conn->client->opt.command_timeout_ms;
    return dq__conn_send_within(conn, ms, argc, argv, argvlen, fn, privdata);
}

int dq__conn_send_within(dq__conn *conn, int timeout_ms, int argc, const char **argv,
                         const size_t *argvlen, dq__reply_fn *fn, void *privdata) {
    char *cmd = NULL;
    long len = dq__format_command(&cmd, 0, NULL, NULL, argc, argv, argvlen);
    int rc = len < 0 ? DQ_ENOMEM : send_within(conn, timeout_ms, cmd, (size_t)len, fn, privdata);
    free(cmd);
    return rc;
}

void dq__conn_write_now(dq__conn *conn) {
    if (conn && conn->link && conn->state == DQ__UP) dq__link_flush(conn->link);
}

/* ------------------------------------------------------------ connect / handshake */

static void schedule_retry(dq__conn *conn);
static void drop(dq__conn *conn, int code);

/* A connect attempt ended before the connection was up: tell the owner
 * (the router tries elsewhere), then retry if this one reconnects. */
static void attempt_failed(dq__conn *conn) {
    schedule_retry(conn);
    if (conn->on_fail) conn->on_fail(conn, conn->event_privdata);
}

/* ROLE's first element: "master", "slave" or "sentinel". */
static int role_is_master(const redisReply *reply) {
    return reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
           reply->element[0]->type == REDIS_REPLY_STRING &&
           strcmp(reply->element[0]->str, "master") == 0;
}

/* A master that refuses writes (stop-writes-on-bgsave-error with a failing
 * RDB save, or an AOF write error) answers PING with MISCONF, but it is up
 * and serves reads: the connection is made, and each write gets the MISCONF
 * itself. */
static int refuses_writes_only(const char *what, const redisReply *reply) {
    return strcmp(what, "PING") == 0 && dq__error_class(reply->str) == DQ__ERR_MISCONF;
}

static void handshake_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    const char *what = privdata;
    if (!conn) return;
    if (!reply) return; /* the connection went down: drop() handles it */
    (void)code;
    if (reply->type == REDIS_REPLY_ERROR && !refuses_writes_only(what, reply)) {
        int auth = strcmp(what, "AUTH") == 0 || strcmp(what, "SELECT") == 0;
        set_err(conn, auth ? DQ_EAUTH : DQ_EREDIS, "%s refused by Redis at %s: %s", what, conn->name,
                reply->str);
        dq__conn_abort(conn, conn->last_code, NULL);
        return;
    }
    if (strcmp(what, "ROLE") == 0 && !role_is_master(reply)) {
        /* A failover moved the master: the router asks again. */
        set_err(conn, DQ_ECONNECT, "Redis at %s is not a master (it is a %s)", conn->name,
                reply->type == REDIS_REPLY_ARRAY && reply->elements ? reply->element[0]->str : "?");
        dq__conn_abort(conn, conn->last_code, NULL);
        return;
    }
    if (strcmp(what, "CLIENT ID") == 0) conn->client_id = reply->integer;
    if (--conn->handshake_left == 0 && conn->state == DQ__HANDSHAKE) {
        /* connect_timeout_ms bounds the handshake too: a server that
         * accepts but never answers is as good as none. */
        ev_timer_stop(conn->client->loop, &conn->connect_timer);
        conn->state = DQ__UP;
        conn->ups++;
        conn->backoff_ms = 0;
        conn->errstr[0] = '\0';
        conn->last_code = 0;
        if (conn->on_up) conn->on_up(conn, conn->event_privdata);
    }
}

static int handshake_cmd(dq__conn *conn, const char *what, int argc, const char **argv,
                         const size_t *lens) {
    int rc = dq__conn_send(conn, 0, argc, argv, lens, handshake_reply, (void *)what);
    if (rc == 0) conn->handshake_left++;
    return rc;
}

static void start_handshake(dq__conn *conn) {
    const dq__endpoint *ep = &conn->ep;
    conn->state = DQ__HANDSHAKE;
    conn->handshake_left = 1; /* held until all are sent */
    if (ep->password && ep->password[0]) {
        const char *av[3] = {"AUTH", ep->user, ep->password};
        size_t al[3] = {4, strlen(ep->user), strlen(ep->password)};
        if (ep->user[0]) handshake_cmd(conn, "AUTH", 3, av, al);
        else {
            av[1] = ep->password, al[1] = al[2];
            handshake_cmd(conn, "AUTH", 2, av, al);
        }
    }
    if (ep->db) {
        char db[16];
        const char *av[2] = {"SELECT", db};
        size_t al[2] = {6, (size_t)snprintf(db, sizeof db, "%d", ep->db)};
        handshake_cmd(conn, "SELECT", 2, av, al);
    }
    if (ep->check_master) {
        const char *av[1] = {"ROLE"};
        size_t al[1] = {4};
        handshake_cmd(conn, "ROLE", 1, av, al);
    }
    if (conn->kind != DQ__CONN_BLOCKING) {
        /* Something must answer before the connection counts as up: a
         * server that accepts but never replies is as good as none. */
        const char *av[1] = {"PING"};
        size_t al[1] = {4};
        handshake_cmd(conn, "PING", 1, av, al);
    }
    if (conn->kind == DQ__CONN_BLOCKING) {
        const char *av[2] = {"CLIENT", "ID"};
        size_t al[2] = {6, 2};
        handshake_cmd(conn, "CLIENT ID", 2, av, al);
    }
    /* Release the hold; if nothing was sent the connection is up now. */
    redisReply fake = {.type = REDIS_REPLY_STATUS};
    handshake_reply(conn, &fake, 0, (void *)"");
}

/* The link's stream ended: before it was up (the connect or the TLS
 * handshake failed), or after. */
static void on_link_down(dq__conn *conn, const char *why) {
    dq__link_close(conn->link);
    conn->link = NULL;
    if (conn->state == DQ__CONNECTING) {
        ev_timer_stop(conn->client->loop, &conn->connect_timer);
        set_err(conn, DQ_ECONNECT, "cannot connect to %s: %s", conn->name, why);
        conn->state = DQ__DOWN;
        attempt_failed(conn);
        return;
    }
    if (!conn->last_code) {
        /* A TLS port drops a plain client at its first command. */
        int first = conn->state == DQ__HANDSHAKE && !conn->ep.tls && !conn->ep.is_unix && conn->ups == 0;
        set_err(conn, DQ_ECONNECT, "connection to %s lost: %s%s", conn->name, why,
                first ? " before any reply (a TLS port? use rediss://)" : "");
    }
    drop(conn, conn->last_code);
}

static void on_link(dq__link *l, int event, redisReply *reply, const char *why, void *privdata) {
    (void)l;
    dq__conn *conn = privdata;
    if (event == DQ__LINK_UP) start_handshake(conn);
    else if (event == DQ__LINK_REPLY) on_reply(conn, reply);
    else on_link_down(conn, why);
}

static void on_connect_timeout(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    dq__conn *conn = w->data;
    if (!conn->link) return;
    set_err(conn, DQ_ETIMEDOUT, "cannot connect to %s: no answer within %d ms%s", conn->name,
            conn->client->opt.connect_timeout_ms,
            conn->ep.tls && conn->state == DQ__CONNECTING
                ? " (the TLS handshake did not finish: a plain port? use redis://)"
                : "");
    dq__conn_abort(conn, DQ_ETIMEDOUT, NULL);
}

static void on_cmd_timeout(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    dq__conn *conn = w->data;
    int ms = conn->client->opt.command_timeout_ms;
    for (const dq__req *r = conn->head; r; r = r->next)
        if (r->deadline > 0) {
            ms = r->timeout_ms; /* the one that expired: the oldest */
            break;
        }
    set_err(conn, DQ_ETIMEDOUT, "Redis at %s did not reply within %d ms", conn->name, ms);
    dq__conn_abort(conn, DQ_ETIMEDOUT, NULL);
}

static void on_retry(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    dq__conn_start(w->data);
}

void dq__retry_later(dq_client *c, ev_timer *timer, int *backoff_ms) {
    int max = c->opt.reconnect_max_ms;
    *backoff_ms = *backoff_ms ? *backoff_ms * 2 : BACKOFF_MIN_MS;
    if (*backoff_ms > max) *backoff_ms = max;
    /* Jitter in [1/2, 1] so many clients do not reconnect in lockstep. */
    double ms = *backoff_ms / 2.0 + dq__random_uniform((uint32_t)*backoff_ms / 2 + 1);
    ev_timer_stop(c->loop, timer);
    ev_timer_set(timer, ms / 1000.0, 0);
    ev_timer_start(c->loop, timer);
}

static void schedule_retry(dq__conn *conn) {
    if (!conn->auto_reconnect || conn->state == DQ__CLOSED) return;
    dq__retry_later(conn->client, &conn->retry_timer, &conn->backoff_ms);
}

void dq__conn_start(dq__conn *conn) {
    if (conn->state != DQ__DOWN) return;
    dq_client *c = conn->client;
    char why[DQ__ERRSTR_MAX];
    conn->link = dq__link_open(c, &conn->ep, on_link, conn, why, sizeof why);
    if (!conn->link) {
        set_err(conn, DQ_ECONNECT, "cannot connect to %s: %s", conn->name, why);
        attempt_failed(conn);
        return;
    }
    conn->state = DQ__CONNECTING;
    conn->last_code = 0;
    ev_timer_set(&conn->connect_timer, c->opt.connect_timeout_ms / 1000.0, 0);
    ev_timer_start(c->loop, &conn->connect_timer);
}

/* Fails every waiting request with code, now, in order. */
static void fail_pending(dq__conn *conn, int code) {
    dq__req *list = conn->head;
    conn->head = conn->tail = NULL;
    ev_timer_stop(conn->client->loop, &conn->cmd_timer);
    while (list) {
        dq__req *r = list;
        list = r->next;
        r->fn(conn, NULL, code, r->privdata);
        req_free(r);
    }
}

static void drop(dq__conn *conn, int code) {
    struct ev_loop *loop = conn->client->loop;
    ev_timer_stop(loop, &conn->connect_timer);
    ev_timer_stop(loop, &conn->cmd_timer);
    int was_up = conn->state == DQ__UP;
    int closed = conn->state == DQ__CLOSED;
    if (!closed) conn->state = DQ__DOWN;
    fail_pending(conn, code ? code : DQ_ECONNECT);
    if (closed) return;
    if (!was_up) {
        attempt_failed(conn);
        return;
    }
    if (conn->on_down) conn->on_down(conn, conn->event_privdata);
    if (conn->state != DQ__CLOSED) schedule_retry(conn);
}

void dq__conn_abort(dq__conn *conn, int code, const char *why) {
    if (why) set_err(conn, code, "%s", why);
    else conn->last_code = code;
    dq__link *link = conn->link;
    conn->link = NULL;
    dq__link_close(link); /* its callbacks never run again */
    drop(conn, code);
}

void dq__endpoint_set(dq__endpoint *ep, const char *host, int port, const char *path) {
    ep->is_unix = path != NULL;
    if (path) {
        snprintf(ep->path, sizeof ep->path, "%s", path);
        snprintf(ep->name, sizeof ep->name, "unix:%s", path);
    } else {
        snprintf(ep->host, sizeof ep->host, "%s", host);
        ep->port = port;
        /* An IPv6 address gets brackets, so the port stays readable. */
        snprintf(ep->name, sizeof ep->name, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    }
}

dq__conn *dq__conn_new(dq_client *c, enum dq__conn_kind kind, const dq__endpoint *ep) {
    dq__conn *conn = calloc(1, sizeof *conn);
    if (!conn) return NULL;
    conn->client = c;
    conn->kind = kind;
    conn->ep = *ep;
    conn->name = conn->ep.name;
    conn->state = DQ__DOWN;
    ev_timer_init(&conn->connect_timer, on_connect_timeout, 0, 0);
    ev_timer_init(&conn->retry_timer, on_retry, 0, 0);
    ev_timer_init(&conn->cmd_timer, on_cmd_timeout, 0, 0);
    conn->connect_timer.data = conn->retry_timer.data = conn->cmd_timer.data = conn;
    return conn;
}

void dq__conn_list_add(dq__conn **head, dq__conn *conn) {
    dq__conn_unlist(conn);
    conn->list_next = *head;
    if (*head) (*head)->list_pprev = &conn->list_next;
    conn->list_pprev = head;
    *head = conn;
}

void dq__conn_unlist(dq__conn *conn) {
    if (!conn->list_pprev) return;
    *conn->list_pprev = conn->list_next;
    if (conn->list_next) conn->list_next->list_pprev = conn->list_pprev;
    conn->list_next = NULL;
    conn->list_pprev = NULL;
}

void dq__conn_free(dq__conn *conn) {
    if (!conn) return;
    dq__conn_unlist(conn);
    struct ev_loop *loop = conn->client->loop;
    conn->state = DQ__CLOSED;
    conn->auto_reconnect = 0;
    ev_timer_stop(loop, &conn->retry_timer);
    set_err(conn, DQ_ECLOSED, "client closed");
    dq__conn_abort(conn, DQ_ECLOSED, NULL);
    free(conn);
}

void dq__reap_retired(dq_client *c) {
    ev_timer_stop(c->loop, &c->reaper);
    while (c->retired) {
        dq__conn *conn = c->retired;
        c->retired = conn->next_in_pool;
        free(conn);
    }
}

static void on_reaper(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    dq__reap_retired(w->data);
}

void dq__conn_retire(dq__conn *conn) {
    dq_client *c = conn->client;
    dq__conn_unlist(conn);
    conn->on_up = conn->on_down = conn->on_fail = NULL;
    conn->event_privdata = NULL;
    conn->auto_reconnect = 0;
    ev_timer_stop(c->loop, &conn->retry_timer);
    dq__conn_abort(conn, DQ_ECLOSED, "connection retired");
    conn->state = DQ__CLOSED;
    conn->next_in_pool = c->retired;
    c->retired = conn;
    if (!ev_is_active(&c->reaper)) {
        ev_timer_init(&c->reaper, on_reaper, 0, 0);
        c->reaper.data = c;
        ev_timer_start(c->loop, &c->reaper);
    }
}

int dq__text_is_refusal(const char *text) {
    enum dq__errclass class = dq__error_class(text);
    return class == DQ__ERR_NOPERM || class == DQ__ERR_NOPERM_SCRIPT;
}

int dq__reply_is_refusal(const redisReply *reply) {
    return reply && reply->type == REDIS_REPLY_ERROR && reply->str && dq__text_is_refusal(reply->str);
}

enum dq__errclass dq__reply_class(const redisReply *reply) {
    return reply && reply->type == REDIS_REPLY_ERROR ? dq__error_class(reply->str) : DQ__ERR_OTHER;
}

int dq__reply_error_code(const redisReply *reply) {
    if (!reply || reply->type != REDIS_REPLY_ERROR || !reply->str) return DQ_EPROTO;
    switch (dq__error_class(reply->str)) {
        case DQ__ERR_WRONGTYPE: return DQ_EWRONGTYPE;
        case DQ__ERR_NOAUTH:
        case DQ__ERR_NOPERM: return DQ_EAUTH;
        default: return DQ_EREDIS;
    }
}
