/*
 * conn.c - one Redis connection on the client's libev loop: connect with a
 * timeout, handshake (AUTH, SELECT, SCRIPT LOAD, CLIENT ID), per-command
 * reply deadlines, and reconnection with jittered backoff.
 *
 * hiredis 0.14 has no async command timeouts, so each connection keeps its
 * sent commands in a FIFO (replies come back in order) and one libev timer
 * armed for the oldest one's deadline. When it expires the connection is
 * dropped: a late reply can no longer be matched to anything, and every
 * waiting callback learns the cause once.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/adapters/libev.h>

#include "internal.h"
#include "scripts.h"

#define BACKOFF_MIN_MS 20

struct dq__req {
    dq__req *next;
    dq__conn *conn;
    dq__reply_fn *fn;
    void *privdata;
    double deadline;         /* ev_now seconds; 0 = none                  */
    int retried;             /* already resent once with EVAL             */
    /* For scripts: the command as sent (RESP), kept to retry with EVAL on
     * NOSCRIPT; one buffer instead of a copy of every argument. */
    enum dq__script script;
    char *cmd;
    size_t cmd_len;
};

static const struct {
    const char *body;
    size_t len;
    const char *sha;
} scripts[DQ__LUA_COUNT] = {
    [DQ__LUA_OFFER] = {dq_lua_offer, DQ_LUA_offer_LEN, DQ_LUA_offer_SHA},
    [DQ__LUA_TRANSFER] = {dq_lua_transfer, DQ_LUA_transfer_LEN, DQ_LUA_transfer_SHA},
    [DQ__LUA_CANCEL] = {dq_lua_cancel, DQ_LUA_cancel_LEN, DQ_LUA_cancel_SHA},
    [DQ__LUA_LOOKUP] = {dq_lua_lookup, DQ_LUA_lookup_LEN, DQ_LUA_lookup_SHA},
    [DQ__LUA_STATS] = {dq_lua_stats, DQ_LUA_stats_LEN, DQ_LUA_stats_SHA},
    [DQ__LUA_TAKE] = {dq_lua_take, DQ_LUA_take_LEN, DQ_LUA_take_SHA},
    [DQ__LUA_ACK] = {dq_lua_ack, DQ_LUA_ack_LEN, DQ_LUA_ack_SHA},
    [DQ__LUA_NACK] = {dq_lua_nack, DQ_LUA_nack_LEN, DQ_LUA_nack_SHA},
    [DQ__LUA_EXTEND] = {dq_lua_extend, DQ_LUA_extend_LEN, DQ_LUA_extend_SHA},
    [DQ__LUA_DEAD] = {dq_lua_dead, DQ_LUA_dead_LEN, DQ_LUA_dead_SHA},
    [DQ__LUA_CONFIG] = {dq_lua_config, DQ_LUA_config_LEN, DQ_LUA_config_SHA},
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

static void req_free(dq__req *r) {
    free(r->cmd);
    free(r);
}

/* ------------------------------------------------------------ RESP */

/* Appends one RESP bulk string "$<len>\r\n<bytes>\r\n" at p; returns the end. */
static char *put_bulk(char *p, const char *s, size_t len) {
    *p++ = '$';
    p += dq__fmt_i64(p, (int64_t)len);
    *p++ = '\r', *p++ = '\n';
    if (len) memcpy(p, s, len);
    p += len;
    *p++ = '\r', *p++ = '\n';
    return p;
}

/* Room for a bulk string's framing: '$', up to 20 digits, two CRLFs. */
#define BULK_FRAME 25

/* Formats a command of head[0..nhead-1] then argv[0..argc-1] as a RESP
 * array into a malloc'ed buffer (*out, freed with free). Returns its length,
 * or -1 when out of memory. hiredis's formatter calls sprintf per argument;
 * this is on the path of every request. */
static long format_command(char **out, int nhead, const char **head, const size_t *headlen,
                           int argc, const char **argv, const size_t *argvlen) {
    size_t room = 1 + 20 + 2;
    for (int i = 0; i < nhead; i++) room += BULK_FRAME + headlen[i];
    for (int i = 0; i < argc; i++) room += BULK_FRAME + argvlen[i];
    char *buf = malloc(room), *p = buf;
    if (!buf) return -1;
    *p++ = '*';
    p += dq__fmt_i64(p, nhead + argc);
    *p++ = '\r', *p++ = '\n';
    for (int i = 0; i < nhead; i++) p = put_bulk(p, head[i], headlen[i]);
    for (int i = 0; i < argc; i++) p = put_bulk(p, argv[i], argvlen[i]);
    *out = buf;
    return p - buf;
}

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

static int is_noscript(const redisReply *reply) {
    return reply && reply->type == REDIS_REPLY_ERROR && reply->str &&
           strncmp(reply->str, "NOSCRIPT", 8) == 0;
}

static int resend_as_eval(dq__req *r);

/* hiredis calls this once per command. A request whose fn is NULL was
 * already failed by drop(), and its connection may be gone: only free it. */
static void on_reply(redisAsyncContext *ac, void *reply_ptr, void *privdata) {
    (void)ac;
    dq__req *r = privdata;
    redisReply *reply = reply_ptr;
    if (!r->fn) {
        req_free(r);
        return;
    }
    dq__conn *conn = r->conn;
    fifo_remove(conn, r);
    rearm_cmd_timer(conn);
    if (is_noscript(reply) && r->cmd && !r->retried && resend_as_eval(r) == 0) return;
    int code = 0;
    if (!reply) {
        /* hiredis saw the connection end: on_disconnect follows. */
        if (!conn->last_code)
            set_err(conn, DQ_ECONNECT, "connection to %s lost", conn->client->url_text);
        code = conn->last_code;
    }
    r->fn(conn, reply, code, r->privdata);
    req_free(r);
}

/* Sends the RESP command cmd (len bytes; hiredis copies it). */
static int send_req(dq__conn *conn, dq__req *r, const char *cmd, size_t len, unsigned flags) {
    if (!conn->ac || (conn->state != DQ__UP && conn->state != DQ__HANDSHAKE)) {
        char why[DQ__ERRSTR_MAX];
        snprintf(why, sizeof why, "%s", conn->errstr[0] ? conn->errstr : "connecting");
        set_err(conn, DQ_ECONNECT, "not connected to Redis (%s)", why);
        return DQ_ECONNECT;
    }
    r->conn = conn;
    r->deadline = 0;
    if (!(flags & DQ__SEND_NO_TIMEOUT) && conn->client->opt.command_timeout_ms > 0) {
        /* The loop's cached time is stale after a while outside the loop
         * (a synchronous caller's own work): refresh it, or the deadline
         * could be in the past already. */
        ev_now_update(conn->client->loop);
        r->deadline = ev_now(conn->client->loop) + conn->client->opt.command_timeout_ms / 1000.0;
    }
    if (redisAsyncFormattedCommand(conn->ac, on_reply, r, cmd, len) != REDIS_OK) {
        set_err(conn, DQ_ECONNECT, "cannot send to Redis: %s",
                conn->ac->errstr ? conn->ac->errstr : "connection closing");
        return DQ_ECONNECT;
    }
    fifo_push(conn, r);
    if (r->deadline > 0 && !ev_is_active(&conn->cmd_timer)) rearm_cmd_timer(conn);
    return 0;
}

int dq__conn_send(dq__conn *conn, unsigned flags, int argc, const char **argv,
                  const size_t *argvlen, dq__reply_fn *fn, void *privdata) {
    if (conn->kind == DQ__CONN_CMD) dq__offers_flush(conn->client); /* keep call order */
    dq__req *r = calloc(1, sizeof *r);
    if (!r) return DQ_ENOMEM;
    r->fn = fn;
    r->privdata = privdata;
    char *cmd = NULL;
    long len = format_command(&cmd, 0, NULL, NULL, argc, argv, argvlen);
    int rc = len < 0 ? DQ_ENOMEM : send_req(conn, r, cmd, (size_t)len, flags);
    free(cmd);
    if (rc) req_free(r);
    return rc;
}

void dq__conn_write_now(dq__conn *conn) {
    /* hiredis stops the write watcher itself once the buffer is out; the
     * start and stop cancel out in libev before it reaches epoll. */
    if (conn && conn->ac && conn->state == DQ__UP) redisAsyncHandleWrite(conn->ac);
}

int dq__conn_eval(dq__conn *conn, enum dq__script script, int nkeys, int nargs,
                  const char **argv, const size_t *argvlen, dq__reply_fn *fn,
                  void *privdata) {
    if (conn->kind == DQ__CONN_CMD) dq__offers_flush(conn->client); /* keep call order */
    char nk[21];
    const char *head[3] = {"EVALSHA", scripts[script].sha, nk};
    size_t headlen[3] = {7, 40, dq__fmt_i64(nk, nkeys)};
    dq__req *r = calloc(1, sizeof *r);
    if (!r) return DQ_ENOMEM;
    r->fn = fn;
    r->privdata = privdata;
    r->script = script;
    int rc = DQ_ENOMEM;
    long len = format_command(&r->cmd, 3, head, headlen, nkeys + nargs, argv, argvlen);
    if (len >= 0) {
        r->cmd_len = (size_t)len;
        rc = send_req(conn, r, r->cmd, r->cmd_len, 0);
    }
    if (rc) req_free(r);
    return rc;
}

/* The script cache was flushed under us (SCRIPT FLUSH, failover): send the
 * body with EVAL, which also reloads it. */
static int resend_as_eval(dq__req *r) {
    /* The command starts "*<argc>\r\n$7\r\nEVALSHA\r\n$40\r\n<sha>\r\n": keep
     * the count and what follows the sha, put EVAL and the body between. */
    const char *crlf = memchr(r->cmd, '\n', r->cmd_len);
    if (!crlf) return -1;
    size_t head = (size_t)(crlf + 1 - r->cmd);
    size_t skip = head + strlen("$7\r\nEVALSHA\r\n") + strlen("$40\r\n") + 40 + 2;
    if (skip > r->cmd_len) return -1;
    const char *body = scripts[r->script].body;
    size_t blen = scripts[r->script].len;
    char mid[48];
    int mlen = snprintf(mid, sizeof mid, "$4\r\nEVAL\r\n$%zu\r\n", blen);
    size_t len = head + (size_t)mlen + blen + 2 + (r->cmd_len - skip);
    char *cmd = malloc(len);
    if (!cmd) return -1;
    char *p = cmd;
    memcpy(p, r->cmd, head), p += head;
    memcpy(p, mid, (size_t)mlen), p += mlen;
    memcpy(p, body, blen), p += blen;
    memcpy(p, "\r\n", 2), p += 2;
    memcpy(p, r->cmd + skip, r->cmd_len - skip);
    r->retried = 1;
    int rc = send_req(r->conn, r, cmd, len, 0);
    free(cmd);
    return rc;
}

/* ------------------------------------------------------------ connect / handshake */

static void schedule_retry(dq__conn *conn);
static void drop(dq__conn *conn, int code);

static void handshake_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    const char *what = privdata;
    if (!conn) return;
    if (!reply) return; /* the connection went down: drop() handles it */
    if (reply->type == REDIS_REPLY_ERROR) {
        int auth = strcmp(what, "AUTH") == 0 || strcmp(what, "SELECT") == 0;
        set_err(conn, auth ? DQ_EAUTH : DQ_EREDIS, "%s refused by Redis: %s", what, reply->str);
        dq__conn_abort(conn, conn->last_code, NULL);
        return;
    }
    (void)code;
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
    const dq__url *u = &conn->client->url;
    conn->state = DQ__HANDSHAKE;
    conn->handshake_left = 1; /* held until all are sent */
    if (u->password[0]) {
        const char *av[3] = {"AUTH", u->user, u->password};
        size_t al[3] = {4, strlen(u->user), strlen(u->password)};
        if (u->user[0]) handshake_cmd(conn, "AUTH", 3, av, al);
        else {
            av[1] = u->password, al[1] = al[2];
            handshake_cmd(conn, "AUTH", 2, av, al);
        }
    }
    if (u->db) {
        char db[16];
        const char *av[2] = {"SELECT", db};
        size_t al[2] = {6, (size_t)snprintf(db, sizeof db, "%d", u->db)};
        handshake_cmd(conn, "SELECT", 2, av, al);
    }
    if (conn->kind == DQ__CONN_CMD) {
        /* Loaded first so the commands queued behind never see NOSCRIPT. */
        for (int i = 0; i < DQ__LUA_COUNT; i++) {
            const char *av[3] = {"SCRIPT", "LOAD", scripts[i].body};
            size_t al[3] = {6, 4, scripts[i].len};
            handshake_cmd(conn, "SCRIPT LOAD", 3, av, al);
        }
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

static void on_connect(const redisAsyncContext *ac, int status) {
    dq__conn *conn = ac->data;
    if (!conn) return;
    if (status != REDIS_OK) {
        ev_timer_stop(conn->client->loop, &conn->connect_timer);
        /* hiredis frees the context after this callback. */
        set_err(conn, DQ_ECONNECT, "cannot connect to %s: %s", conn->client->url_text,
                ac->errstr ? ac->errstr : "error");
        conn->ac = NULL;
        conn->state = DQ__DOWN;
        schedule_retry(conn);
        return;
    }
    start_handshake(conn);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
    dq__conn *conn = ac->data;
    (void)status;
    if (!conn) return; /* we dropped it ourselves: already handled */
    if (!conn->last_code)
        set_err(conn, DQ_ECONNECT, "connection to %s lost: %s", conn->client->url_text,
                ac->errstr && ac->errstr[0] ? ac->errstr : "closed by server");
    conn->ac = NULL;
    drop(conn, conn->last_code);
}

static void on_connect_timeout(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    dq__conn *conn = w->data;
    if (!conn->ac) return;
    set_err(conn, DQ_ETIMEDOUT, "cannot connect to %s: no answer within %d ms",
            conn->client->url_text, conn->client->opt.connect_timeout_ms);
    dq__conn_abort(conn, DQ_ETIMEDOUT, NULL);
}

static void on_cmd_timeout(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    dq__conn *conn = w->data;
    set_err(conn, DQ_ETIMEDOUT, "Redis at %s did not reply within %d ms",
            conn->client->url_text, conn->client->opt.command_timeout_ms);
    dq__conn_abort(conn, DQ_ETIMEDOUT, NULL);
}

static void on_retry(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    dq__conn_start(w->data);
}

static void schedule_retry(dq__conn *conn) {
    if (!conn->auto_reconnect || conn->state == DQ__CLOSED) return;
    int max = conn->client->opt.reconnect_max_ms;
    conn->backoff_ms = conn->backoff_ms ? conn->backoff_ms * 2 : BACKOFF_MIN_MS;
    if (conn->backoff_ms > max) conn->backoff_ms = max;
    /* Jitter in [1/2, 1] so many clients do not reconnect in lockstep. */
    double ms = conn->backoff_ms / 2.0 + dq__random_uniform((uint32_t)conn->backoff_ms / 2 + 1);
    ev_timer_stop(conn->client->loop, &conn->retry_timer);
    ev_timer_set(&conn->retry_timer, ms / 1000.0, 0);
    ev_timer_start(conn->client->loop, &conn->retry_timer);
}

void dq__conn_start(dq__conn *conn) {
    if (conn->state != DQ__DOWN) return;
    dq_client *c = conn->client;
    redisAsyncContext *ac = c->url.is_unix ? redisAsyncConnectUnix(c->url.path)
                                           : redisAsyncConnect(c->url.host, c->url.port);
    if (!ac) {
        set_err(conn, DQ_ENOMEM, "out of memory");
        schedule_retry(conn);
        return;
    }
    if (ac->err) {
        set_err(conn, DQ_ECONNECT, "cannot connect to %s: %s", c->url_text, ac->errstr);
        redisAsyncFree(ac);
        schedule_retry(conn);
        return;
    }
    ac->data = conn;
    conn->ac = ac;
    conn->state = DQ__CONNECTING;
    conn->last_code = 0;
    redisLibevAttach(c->loop, ac);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
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
        /* hiredis still holds r and will call on_reply with NULL later;
         * make that a no-op. */
        r->fn = NULL;
    }
}

static void drop(dq__conn *conn, int code) {
    struct ev_loop *loop = conn->client->loop;
    ev_timer_stop(loop, &conn->connect_timer);
    ev_timer_stop(loop, &conn->cmd_timer);
    int was_up = conn->state == DQ__UP || conn->state == DQ__HANDSHAKE;
    if (conn->state != DQ__CLOSED) conn->state = DQ__DOWN;
    fail_pending(conn, code ? code : DQ_ECONNECT);
    if (was_up && conn->on_down) conn->on_down(conn, conn->event_privdata);
    if (conn->state != DQ__CLOSED) schedule_retry(conn);
}

void dq__conn_abort(dq__conn *conn, int code, const char *why) {
    if (why) set_err(conn, code, "%s", why);
    else conn->last_code = code;
    redisAsyncContext *ac = conn->ac;
    conn->ac = NULL;
    if (ac) {
        ac->data = NULL; /* our connect/disconnect callbacks ignore it now */
    }
    drop(conn, code);
    if (ac) redisAsyncFree(ac); /* runs the detached callbacks with NULL */
}

dq__conn *dq__conn_new(dq_client *c, enum dq__conn_kind kind) {
    dq__conn *conn = calloc(1, sizeof *conn);
    if (!conn) return NULL;
    conn->client = c;
    conn->kind = kind;
    conn->state = DQ__DOWN;
    ev_timer_init(&conn->connect_timer, on_connect_timeout, 0, 0);
    ev_timer_init(&conn->retry_timer, on_retry, 0, 0);
    ev_timer_init(&conn->cmd_timer, on_cmd_timeout, 0, 0);
    conn->connect_timer.data = conn->retry_timer.data = conn->cmd_timer.data = conn;
    return conn;
}

void dq__conn_free(dq__conn *conn) {
    if (!conn) return;
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
    conn->on_up = conn->on_down = NULL;
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

int dq__reply_error_code(const redisReply *reply) {
    if (!reply || reply->type != REDIS_REPLY_ERROR || !reply->str) return DQ_EPROTO;
    if (strstr(reply->str, "WRONGTYPE")) return DQ_EWRONGTYPE;
    if (strncmp(reply->str, "NOAUTH", 6) == 0 || strncmp(reply->str, "WRONGPASS", 9) == 0 ||
        strncmp(reply->str, "NOPERM", 6) == 0)
        return DQ_EAUTH;
    return DQ_EREDIS;
}
