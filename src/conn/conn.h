/*
 * conn.h - what the connections layer (src/conn/) offers the layers above:
 * request/reply connections (conn.c), TLS (tls.c), the byte stream under
 * them (link.c), push connections (push.c) and retrying through errors
 * that persist (backoff.c). Included by internal.h; never installed.
 */
#ifndef DQ_CONN_H
#define DQ_CONN_H

#include <ev.h>
#include <hiredis/hiredis.h>

#include "delayq.h"
#include "util.h"

#define DQ__ERRSTR_MAX 256

/* ------------------------------------------------------------ connections (conn.c) */

enum dq__conn_kind { DQ__CONN_CMD, DQ__CONN_BLOCKING, DQ__CONN_SENTINEL };
enum dq__conn_state { DQ__DOWN, DQ__CONNECTING, DQ__HANDSHAKE, DQ__UP, DQ__CLOSED };

typedef struct dq__conn dq__conn;
typedef struct dq__req dq__req;

/* Where a connection goes and how it introduces itself. user and password
 * are borrowed: they live in the client's parsed URL. */
typedef struct dq__endpoint {
    int is_unix;
    char host[256];
    int port;
    char path[108];
    const char *user, *password; /* "" or NULL: no AUTH                 */
    int db;                      /* SELECT when > 0                     */
    int check_master;            /* ROLE must say "master" (Sentinel)   */
    int tls;                     /* TLS over TCP (the client's settings) */
    char name[128];              /* "host:port" / "unix:path", messages
                                    (cut to fit)                        */
} dq__endpoint;

/* Sets the address part of ep (path NULL: TCP host:port) and its name. */
void dq__endpoint_set(dq__endpoint *ep, const char *host, int port, const char *path);

/* Reply callback of dq__conn_send. reply is NULL when the command failed
 * without a reply (connection lost, timed out, closed); then code holds the
 * DQ_E* cause and conn->errstr the message. Otherwise code is 0, except
 * DQ_ENOTDURABLE from the router: the write was made (reply is its answer)
 * but fewer replicas than asked confirmed it. The reply is freed after the
 * callback returns. */
typedef void dq__reply_fn(dq__conn *conn, redisReply *reply, int code, void *privdata);

/* Called when the connection is up (handshake done) and when it went down. */
typedef void dq__conn_event_fn(dq__conn *conn, void *privdata);

struct dq__conn {
    dq_client *client;           /* the loop and the options             */
    enum dq__conn_kind kind;
    enum dq__conn_state state;
    dq__endpoint ep;
    const char *name;            /* ep.name                              */
    struct dq__link *link;       /* NULL unless CONNECTING..UP            */
    int auto_reconnect;          /* retry with backoff after a loss      */
    int backoff_ms;
    int handshake_left;          /* handshake replies still to come      */
    long long client_id;         /* CLIENT ID on the server (blocking)   */
    ev_timer connect_timer, retry_timer, cmd_timer;
    dq__req *head, *tail;        /* sent commands waiting for a reply    */
    dq__conn_event_fn *on_up, *on_down;
    dq__conn_event_fn *on_fail;  /* a connect attempt ended before UP    */
    void *event_privdata;
    dq__conn *next_in_pool;      /* blocking pool / retired list link     */
    dq__conn *list_next, **list_pprev; /* an owner's list (dq__conn_list_add) */
    void *node;                  /* the router's node it belongs to      */
    int ups;                     /* times the handshake completed        */
    int last_code;
    char errstr[DQ__ERRSTR_MAX];
};

/* A connection to ep (copied), not started. NULL when out of memory. */
dq__conn *dq__conn_new(dq_client *c, enum dq__conn_kind kind, const dq__endpoint *ep);
/* Starts connecting (no-op unless DOWN). */
void dq__conn_start(dq__conn *conn);
/* Closes for good: pending callbacks run with DQ_ECLOSED, then frees. */
void dq__conn_free(dq__conn *conn);
/* Drops the connection now (pending callbacks get code), then reconnects
 * if auto_reconnect. */
void dq__conn_abort(dq__conn *conn, int code, const char *why);

#define DQ__SEND_NO_TIMEOUT (1u << 0) /* blocking commands                  */

/* Sends a command. Returns 0 (fn will run exactly once), or DQ_ECONNECT /
 * DQ_ENOMEM (fn never runs). argv/argvlen are copied. */
int dq__conn_send(dq__conn *conn, unsigned flags, int argc, const char **argv, const size_t *argvlen,
                  dq__reply_fn *fn, void *privdata);
/* The same with a command already in RESP (len bytes, copied). */
int dq__conn_send_raw(dq__conn *conn, unsigned flags, const char *cmd, size_t len, dq__reply_fn *fn,
                      void *privdata);
/* The same with a reply deadline of timeout_ms (0: none) instead of
 * command_timeout_ms: a blocking command that must end by then. */
int dq__conn_send_within(dq__conn *conn, int timeout_ms, int argc, const char **argv,
                         const size_t *argvlen, dq__reply_fn *fn, void *privdata);
/* A dq__reply_fn for commands whose reply nobody needs. */
void dq__ignore_reply(dq__conn *conn, redisReply *reply, int code, void *privdata);

/* Writes what the connection has queued now, without waiting for the loop
 * (no-op unless UP). Not from inside one of the connection's callbacks. */
void dq__conn_write_now(dq__conn *conn);

/* Closes a connection that may be inside one of its own callbacks: fails
 * what is pending now, frees the struct later from the loop. */
void dq__conn_retire(dq__conn *conn);

/* Puts conn in an owner's list at *head (out of any other first), so the
 * owner can reach every connection it handed out; retiring or freeing
 * conn takes it out again, so the list never holds a freed one. */
void dq__conn_list_add(dq__conn **head, dq__conn *conn);
void dq__conn_unlist(dq__conn *conn);

/* Frees retired connections now (dq_client_free). */
void dq__reap_retired(dq_client *c);

/* Maps an error reply to a DQ_E* code (WRONGTYPE -> DQ_EWRONGTYPE, ...). */
int dq__reply_error_code(const redisReply *reply);
/* 1 if reply is an ACL refusal: NOPERM, or a script's command or key the
 * user's rule does not grant. */
int dq__reply_is_refusal(const redisReply *reply);
/* The same for an error's text (a reply's, or a failure message built on it). */
int dq__text_is_refusal(const char *text);
/* The class of reply (see dq__error_class): DQ__ERR_OTHER for NULL or a
 * non-error. */
enum dq__errclass dq__reply_class(const redisReply *reply);

/* Arms timer for the next reconnect attempt: *backoff_ms doubles from
 * 20 ms up to reconnect_max_ms, with a jitter in [1/2, 1]. */
void dq__retry_later(dq_client *c, ev_timer *timer, int *backoff_ms);

/* ------------------------------------------------------------ TLS (tls.c) */

typedef struct dq__tls_ctx dq__tls_ctx;
typedef struct dq__tls dq__tls;
enum { DQ__TLS_DONE = 0, DQ__TLS_WANT_READ = 1, DQ__TLS_WANT_WRITE = 2, DQ__TLS_ERR = -1 };

/* A client's TLS settings from o's tls_* fields (files read now). Returns 0
 * and *out (freed with dq__tls_ctx_free), or DQ_EINVAL / DQ_ENOMEM with the
 * cause in err. */
int dq__tls_ctx_new(dq__tls_ctx **out, const dq_options *o, char *err, size_t errlen);
void dq__tls_ctx_free(dq__tls_ctx *t);
/* A TLS session over the connected socket fd to host (the name verified
 * unless the settings name one). NULL with the cause in err. */
dq__tls *dq__tls_new(dq__tls_ctx *t, int fd, const char *host, char *err, size_t errlen);
void dq__tls_free(dq__tls *s);
/* A handshake step: DQ__TLS_DONE, WANT_READ / WANT_WRITE (call again when
 * the socket is so), or DQ__TLS_ERR with the cause in err. */
int dq__tls_handshake(dq__tls *s, char *err, size_t errlen);
/* Bytes read / written (> 0), or 0 with *st a WANT_* or DQ__TLS_ERR (err). */
long dq__tls_read(dq__tls *s, void *buf, size_t len, int *st, char *err, size_t errlen);
long dq__tls_write(dq__tls *s, const void *buf, size_t len, int *st, char *err, size_t errlen);

/* ------------------------------------------------------------ links (link.c) */

typedef struct dq__link dq__link;
enum { DQ__LINK_UP, DQ__LINK_REPLY, DQ__LINK_DOWN };
/* Events of a link: UP (connected, TLS handshake done: send now), REPLY
 * (each reply in order; freed after the call), DOWN (why: the stream is
 * dead, the owner closes the link). The owner may close the link in any
 * of them. */
typedef void dq__link_fn(dq__link *l, int event, redisReply *reply, const char *why, void *privdata);
/* Starts connecting to ep (plain, or TLS when ep->tls). NULL with the cause
 * in err when it cannot even start (fn never runs). */
dq__link *dq__link_open(dq_client *c, const dq__endpoint *ep, dq__link_fn *fn, void *privdata, char *err,
                        size_t errlen);
/* Queues a command in RESP (len bytes, copied): 0, DQ_ECONNECT or DQ_ENOMEM. */
int dq__link_send(dq__link *l, const char *cmd, size_t len);
/* Writes what is queued now, without waiting for the loop. */
void dq__link_flush(dq__link *l);
/* Closes and frees (later, when inside its callback); fn never runs again. */
void dq__link_close(dq__link *l);

/* ------------------------------------------------------------ push connections (push.c) */

typedef struct dq__push dq__push;
enum { DQ__PUSH_UP, DQ__PUSH_DOWN, DQ__PUSH_REPLY };
/* Events of a push connection: UP (handshake done: subscribe now), DOWN
 * (lost: it reconnects by itself), REPLY (every reply after the handshake,
 * in order; freed after the call). May free p. */
typedef void dq__push_fn(dq__push *p, int event, redisReply *reply, void *privdata);
/* Starts connecting to ep (copied). NULL when out of memory. */
dq__push *dq__push_new(dq_client *c, const dq__endpoint *ep, dq__push_fn *fn, void *privdata);
/* Queues a command (only when up). Returns 0, DQ_ECONNECT or DQ_ENOMEM. */
int dq__push_send(dq__push *p, int argc, const char **argv, const size_t *lens);
int dq__push_is_up(const dq__push *p);
const char *dq__push_errstr(const dq__push *p);
/* Closes and frees p (NULL is fine), also from inside its callback. */
void dq__push_free(dq__push *p);

/* ------------------------------------------------------------ errors that persist (backoff.c) */

/* The state of something that retries on its own (a scheduler's transfers,
 * a take, a worker's takes): zeroed is "nothing failed". */
typedef struct dq__backoff {
    int failures;                /* in a row                                 */
    double until;                /* ev_now() before which it does not retry  */
    char kind[DQ__ERRKIND_MAX];  /* the last failure's code word, or ""      */
} dq__backoff;

/* A failure of what b retries, with error (the Redis error text, or a
 * message): returns the seconds to wait before the next try (20 ms doubling
 * to 1 s, times a random factor in [1/2, 1]), which dq__backoff_left then
 * counts down. */
double dq__backoff_next(dq_client *c, dq__backoff *b, const char *error);
/* The same, after logging the line fmt makes as dq__log_error does. */
double dq__backoff_failed(dq_client *c, dq__backoff *b, const char *error, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A success: b starts over, and if b's last failure was of a persisting
 * kind that was reported, the log says the kind cleared. */
void dq__backoff_ok(dq_client *c, dq__backoff *b);
/* Lets the next try go at once (what refused may be gone: a reconnect),
 * the failures still counted. */
void dq__backoff_retry_now(dq__backoff *b);
/* Seconds before b allows the next try; 0 when it does. */
double dq__backoff_left(const dq_client *c, const dq__backoff *b);
/* Logs a line about error (the Redis error text): one of a persisting kind
 * is coalesced with the client's others of that kind (the first said, the
 * rest counted in a line at most every 10 s); any other, as dq__log. */
void dq__log_error(dq_client *c, const char *error, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Frees the client's record of the kinds (dq_client_free). */
void dq__errlog_free(dq_client *c);

#endif
