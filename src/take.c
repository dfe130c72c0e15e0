/*
 * take.c - consumers: one waiting take per blocking connection.
 *
 * A take sends "BLPOP <ready> 0" and waits. Its own timeout is a libev
 * timer, not the BLPOP timeout (Redis checks those only every 100 ms at the
 * default hz 10). When the timer fires or the take is cancelled, the command
 * connection sends CLIENT UNBLOCK for the blocking connection, and the take
 * ends when the BLPOP answers: with nil, or with an item that was already
 * popped, which is then delivered instead of being lost.
 * An entry that cannot be decoded is moved to the queue's set-aside list and
 * the take keeps waiting.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define UNBLOCK_RETRY_S 0.01
#define UNBLOCK_TRIES 100

struct dq_take_req {
    dq_take_req *next;
    dq_client *c;
    char queue[DQ_QUEUE_MAX + 1];
    dq__keys keys;
    dq_take_cb *cb;
    void *privdata;
    dq__conn *conn;
    ev_timer timer;        /* the deadline, then unblock retries / deferral */
    int blpop_out;         /* a BLPOP is waiting on conn                    */
    int ending;            /* timeout or cancel requested                   */
    int end_status;        /* what to report if no item comes: 0 or ECLOSED */
    int unblock_tries;
    int done;              /* finish() ran: ignore late callbacks           */
    struct unblock_token *token; /* the CLIENT UNBLOCK in flight, if any    */
};

/* A CLIENT UNBLOCK reply may come after its take has ended and been freed,
 * so the reply holds this token, which the take clears when it ends. */
struct unblock_token {
    dq_take_req *take;
};

static void issue_blpop(dq_take_req *t);

/* ------------------------------------------------------------ messages */

static dq_msg *msg_new(const char *queue, const dq__entry *e) {
    size_t ql = strlen(queue);
    dq_msg *m = malloc(sizeof *m + ql + 1 + e->id_len + 1 + e->payload_len + 1);
    if (!m) return NULL;
    char *p = (char *)(m + 1);
    memcpy(p, queue, ql + 1);
    m->queue = p;
    p += ql + 1;
    memcpy(p, e->id, e->id_len);
    p[e->id_len] = '\0';
    m->id = p;
    m->id_len = e->id_len;
    p += e->id_len + 1;
    if (e->payload_len) memcpy(p, e->payload, e->payload_len);
    p[e->payload_len] = '\0';
    m->payload = p;
    m->payload_len = e->payload_len;
    m->due_ms = e->due_ms;
    m->ready_ms = e->ready_ms;
    return m;
}

void dq_msg_free(dq_msg *msg) { free(msg); }

/* ------------------------------------------------------------ ending */

static void unlink_take(dq_take_req *t) {
    for (dq_take_req **p = &t->c->takes; *p; p = &(*p)->next) {
        if (*p == t) {
            *p = t->next;
            return;
        }
    }
}

static void finish(dq_take_req *t, int status, dq_msg *msg) {
    dq_client *c = t->c;
    if (t->done) return;
    t->done = 1;
    ev_timer_stop(c->loop, &t->timer);
    unlink_take(t);
    if (t->token) t->token->take = NULL;
    dq__conn *conn = t->conn;
    t->conn = NULL;
    if (conn) {
        if (!t->blpop_out && conn->state == DQ__UP) dq__blocking_release(c, conn);
        else dq__conn_retire(conn); /* still blocked or broken: not reusable */
    }
    c->callback_depth++;
    t->cb(c, status, msg, t->privdata);
    c->callback_depth--;
    free(t);
}

/* ------------------------------------------------------------ set aside */

static void aside_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    (void)conn, (void)code, (void)privdata, (void)reply;
}

/* Keeps an undecodable ready entry, with the reason, instead of dropping it. */
static void set_aside(dq_take_req *t, const char *raw, size_t len) {
    size_t elen;
    char *entry = dq__aside_encode("undecodable ready entry", "", 0, raw, len, &elen);
    if (!entry) return;
    const char *argv[3] = {"RPUSH", t->keys.aside, entry};
    size_t lens[3] = {5, strlen(t->keys.aside), elen};
    if (dq__conn_send(t->c->cmd, 0, 3, argv, lens, aside_reply, NULL) != 0)
        dq__log(t->c, "queue %s: could not set aside an undecodable entry (%zu bytes)", t->queue, len);
    else
        dq__log(t->c, "queue %s: undecodable ready entry set aside in %s", t->queue, t->keys.aside);
    free(entry);
}

/* ------------------------------------------------------------ BLPOP */

static void blpop_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    dq_take_req *t = privdata;
    (void)conn;
    if (t->done) return;
    t->blpop_out = 0;
    if (!reply) {
        if (t->ending || code == DQ_ECLOSED) finish(t, t->ending ? t->end_status : code, NULL);
        /* else: the connection comes back and on_conn_up asks again. */
        return;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        finish(t, dq__fail(t->c, dq__reply_error_code(reply), "%s (key %s)", reply->str, t->keys.ready),
               NULL);
        return;
    }
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
        reply->element[1]->type == REDIS_REPLY_STRING) {
        const redisReply *v = reply->element[1];
        dq__entry e;
        if (dq__entry_decode(v->str, v->len, &e) == 0) {
            dq_msg *m = msg_new(t->queue, &e);
            if (!m) finish(t, dq__fail(t->c, DQ_ENOMEM, "out of memory"), NULL);
            else finish(t, 1, m);
            return;
        }
        set_aside(t, v->str, v->len);
    }
    /* nil (unblocked) or an entry set aside */
    if (t->ending) finish(t, t->end_status, NULL);
    else issue_blpop(t);
}

static void issue_blpop(dq_take_req *t) {
    if (t->blpop_out || !t->conn || t->conn->state != DQ__UP) return;
    const char *argv[3] = {"BLPOP", t->keys.ready, "0"};
    size_t lens[3] = {5, strlen(t->keys.ready), 1};
    if (dq__conn_send(t->conn, DQ__SEND_NO_TIMEOUT, 3, argv, lens, blpop_reply, t) == 0)
        t->blpop_out = 1;
}

static void on_conn_up(dq__conn *conn, void *privdata) {
    (void)conn;
    dq_take_req *t = privdata;
    if (t->ending) finish(t, t->end_status, NULL);
    else issue_blpop(t);
}

/* ------------------------------------------------------------ unblocking */

static void request_unblock(dq_take_req *t);

static void unblock_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    (void)conn, (void)code;
    struct unblock_token *token = privdata;
    dq_take_req *t = token->take;
    free(token);
    if (!t) return;
    t->token = NULL;
    if (reply && reply->type == REDIS_REPLY_INTEGER && reply->integer == 1) return;
    /* 0: the BLPOP was not blocked yet, or its answer is on the way. Ask
     * again shortly; the answer, if any, ends the take first. */
    if (t->blpop_out) {
        ev_timer_set(&t->timer, UNBLOCK_RETRY_S, 0);
        ev_timer_start(t->c->loop, &t->timer);
    }
}

/* The reply of the last-chance LPOP of a take that never got to block. */
static void last_pop_reply(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    (void)conn, (void)code;
    struct unblock_token *token = privdata;
    dq_take_req *t = token->take;
    free(token);
    if (!t) return;
    t->token = NULL;
    if (reply && reply->type == REDIS_REPLY_STRING) {
        dq__entry e;
        if (dq__entry_decode(reply->str, reply->len, &e) == 0) {
            dq_msg *m = msg_new(t->queue, &e);
            finish(t, m ? 1 : dq__fail(t->c, DQ_ENOMEM, "out of memory"), m);
            return;
        }
        set_aside(t, reply->str, reply->len);
    } else if (reply && reply->type == REDIS_REPLY_ERROR) {
        finish(t, dq__fail(t->c, dq__reply_error_code(reply), "%s (key %s)", reply->str, t->keys.ready),
               NULL);
        return;
    }
    finish(t, t->end_status, NULL);
}

/* A take that times out before its blocking connection was ready (say,
 * with timeout 0) still looks once, on the command connection, so an item
 * that is ready already is never missed. */
static int last_chance_pop(dq_take_req *t) {
    if (t->end_status != 0 || t->token || t->c->cmd->state != DQ__UP) return -1;
    struct unblock_token *token = malloc(sizeof *token);
    if (!token) return -1;
    token->take = t;
    const char *argv[2] = {"LPOP", t->keys.ready};
    size_t lens[2] = {4, strlen(t->keys.ready)};
    if (dq__conn_send(t->c->cmd, 0, 2, argv, lens, last_pop_reply, token) != 0) {
        free(token);
        return -1;
    }
    t->token = token;
    return 0;
}

static void request_unblock(dq_take_req *t) {
    if (!t->blpop_out) {
        if (last_chance_pop(t) != 0) finish(t, t->end_status, NULL);
        return;
    }
    dq_client *c = t->c;
    char id[24];
    snprintf(id, sizeof id, "%lld", t->conn->client_id);
    const char *argv[3] = {"CLIENT", "UNBLOCK", id};
    size_t lens[3] = {6, 7, strlen(id)};
    if (t->token) return; /* one in flight already */
    if (t->unblock_tries++ < UNBLOCK_TRIES && t->conn->client_id > 0) {
        struct unblock_token *token = malloc(sizeof *token);
        if (token) {
            token->take = t;
            if (dq__conn_send(c->cmd, 0, 3, argv, lens, unblock_reply, token) == 0) {
                t->token = token;
                return;
            }
            free(token);
        }
    }
    /* No way to unblock it politely: drop the blocking connection. */
    dq__conn_abort(t->conn, DQ_ECLOSED, "take ended");
}

static void on_timer(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop, (void)revents;
    dq_take_req *t = w->data;
    t->ending = 1;
    request_unblock(t);
}

/* ------------------------------------------------------------ public */

int dq_take_async(dq_client *c, const char *queue, int64_t timeout_ms, dq_take_cb *cb,
                  void *privdata, dq_take_req **out) {
    if (!queue || !dq__queue_valid(queue))
        return dq__fail(c, DQ_EINVAL, "invalid queue name '%s'", queue ? queue : "(null)");
    if (!cb) return dq__fail(c, DQ_EINVAL, "no callback");
    dq_take_req *t = calloc(1, sizeof *t);
    if (!t) return dq__fail(c, DQ_ENOMEM, "out of memory");
    t->c = c;
    snprintf(t->queue, sizeof t->queue, "%s", queue);
    dq__keys_init(&t->keys, queue);
    t->cb = cb;
    t->privdata = privdata;
    t->conn = dq__blocking_acquire(c);
    if (!t->conn) {
        free(t);
        return dq__fail(c, DQ_ENOMEM, "out of memory");
    }
    t->conn->on_up = on_conn_up;
    t->conn->event_privdata = t;
    ev_timer_init(&t->timer, on_timer, timeout_ms >= 0 ? timeout_ms / 1000.0 : 0, 0);
    t->timer.data = t;
    if (timeout_ms >= 0) ev_timer_start(c->loop, &t->timer);
    t->next = c->takes;
    c->takes = t;
    if (out) *out = t;
    issue_blpop(t);
    return 0;
}

void dq_take_cancel(dq_take_req *t) {
    if (!t || t->ending) return;
    t->ending = 1;
    t->end_status = DQ_ECLOSED;
    /* Never call back from inside this call: go through the loop. */
    ev_timer_stop(t->c->loop, &t->timer);
    ev_timer_set(&t->timer, 0, 0);
    ev_timer_start(t->c->loop, &t->timer);
}

void dq__take_free_all(dq_client *c) {
    while (c->takes) {
        dq_take_req *t = c->takes;
        t->blpop_out = 1; /* force the connection closed, not pooled */
        finish(t, DQ_ECLOSED, NULL);
    }
}

typedef struct sync_take {
    int done, status;
    dq_msg *msg;
} sync_take;

static void sync_take_cb(dq_client *c, int status, dq_msg *msg, void *privdata) {
    (void)c;
    sync_take *s = privdata;
    s->status = status;
    s->msg = msg;
    s->done = 1;
}

int dq_take(dq_client *c, const char *queue, int64_t timeout_ms, dq_msg **msg) {
    *msg = NULL;
    if (c->callback_depth > 0)
        return dq__fail(c, DQ_EBUSY, "synchronous call from inside a delayq callback");
    sync_take s = {0, 0, NULL};
    int rc = dq_take_async(c, queue, timeout_ms, sync_take_cb, &s, NULL);
    if (rc) return rc;
    dq__wait(c, &s.done);
    *msg = s.msg;
    return s.status;
}
