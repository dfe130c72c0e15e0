/*
 * functions.c - delayq's function library on the servers, as an
 * administrator handles it: loading this build's library on every master of
 * the topology (dq_functions_load) and reading which delayq libraries each
 * master holds (dq_functions_status).
 *
 * Owns the round of one command sent to every master at once (one slot per
 * master, from the router: the one node, the Sentinel's master, each owner
 * of a cluster's map) and the report of each answer. Replicas get the
 * library from their master by replication, as every function. The library
 * itself and the command that loads it are script.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Reads a master's answer into text; returns 0 or a DQ_E* code. */
typedef int answer_fn(const redisReply *reply, dq__buf *text);

typedef struct round {
    dq_client *c;
    size_t left;   /* answers still to come */
    int done;
    int status;    /* the first failure's code, 0 if none */
    answer_fn *answer;
    dq_node_report_fn *fn;
    void *privdata;
} round;

typedef struct ask {
    round *rd;
    unsigned slot;
} ask;

/* Reports one answer, and records the round's first failure on c. */
static void report(round *rd, const char *node, int code, const char *text) {
    char msg[DQ__ERRSTR_MAX]; /* text may be the client's message, which dq__fail rewrites */
    snprintf(msg, sizeof msg, "%s", text);
    if (code && !rd->status) rd->status = dq__fail(rd->c, code, "%s: %s", node, msg);
    if (rd->fn) rd->fn(rd->privdata, node, code, msg);
}

static void on_answer(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    ask *a = privdata;
    round *rd = a->rd;
    char node[160];
    if (conn) snprintf(node, sizeof node, "%s", conn->name);
    else snprintf(node, sizeof node, "slot %u's master", a->slot);
    if (!reply) {
        /* No connection: the router recorded why on the client. */
        report(rd, node, code, conn && conn->errstr[0] ? conn->errstr : dq_client_errstr(rd->c));
    } else if (reply->type == REDIS_REPLY_ERROR) {
        report(rd, node, dq__reply_error_code(reply), reply->str);
    } else {
        dq__buf text = {0};
        int rc = rd->answer(reply, &text);
        report(rd, node, rc,
               rc          ? (rc == DQ_ENOMEM ? "out of memory" : "unexpected reply")
               : text.data ? text.data
                           : "");
        dq__buf_release(&text);
    }
    if (--rd->left == 0) rd->done = 1;
}

/* Sends the command made by make (a malloc'ed RESP command, NULL when out
 * of memory) to every master and waits for every answer. */
static int every_master(dq_client *c, char *(*make)(size_t *len), answer_fn *answer,
                        dq_node_report_fn *fn, void *privdata) {
    int rc = dq__not_in_callback(c);
    if (rc) return rc;
    if (!c->router) return dq__fail(c, DQ_ECONNECT, "not connected: call dq_connect first");
    size_t n;
    unsigned *slots = dq__route_master_slots(c, &n);
    ask *asks = slots ? calloc(n, sizeof *asks) : NULL;
    if (!asks) {
        free(slots);
        return dq__fail(c, DQ_ENOMEM, "out of memory");
    }
    round rd = {c, 0, 0, 0, answer, fn, privdata};
    for (size_t i = 0; i < n; i++) {
        size_t len;
        char *cmd = make(&len);
        asks[i] = (ask){&rd, slots[i]};
        if (!cmd) {
            report(&rd, "client", DQ_ENOMEM, "out of memory");
            break;
        }
        rd.left++;
        int sent = dq__route(c, slots[i], 0, cmd, len, NULL, on_answer, &asks[i]);
        if (sent) {
            rd.left--;
            char node[32];
            snprintf(node, sizeof node, "slot %u's master", slots[i]);
            report(&rd, node, sent, dq_client_errstr(c));
        }
    }
    rd.done = rd.left == 0;
    dq__wait(c, &rd.done);
    free(asks);
    free(slots);
    return rd.status;
}

/* ------------------------------------------------------------ load */

static int loaded(const redisReply *reply, dq__buf *text) {
    if (reply->type != REDIS_REPLY_STRING && reply->type != REDIS_REPLY_STATUS) return DQ_EPROTO;
    return dq__buf_append(text, reply->str, reply->len);
}

int dq_functions_load(dq_client *c, dq_node_report_fn *fn, void *privdata) {
    return every_master(c, dq__library_load_command, loaded, fn, privdata);
}

/* ------------------------------------------------------------ status */

static char *list_command(size_t *len) {
    const char *argv[4] = {"FUNCTION", "LIST", "LIBRARYNAME", "delayq_*"};
    size_t lens[4] = {8, 4, 11, 8};
    char *cmd = NULL;
    long n = dq__format_command(&cmd, 0, NULL, NULL, 4, argv, lens);
    if (n < 0) return NULL;
    *len = (size_t)n;
    return cmd;
}

/* FUNCTION LIST's libraries (each a flat map: library_name NAME engine ...)
 * as their names, space-separated. */
static int listed(const redisReply *reply, dq__buf *text) {
    if (reply->type != REDIS_REPLY_ARRAY) return DQ_EPROTO;
    int rc = 0;
    for (size_t i = 0; !rc && i < reply->elements; i++) {
        const redisReply *lib = reply->element[i];
        if (lib->type != REDIS_REPLY_ARRAY) return DQ_EPROTO;
        for (size_t k = 0; !rc && k + 1 < lib->elements; k += 2) {
            const redisReply *key = lib->element[k], *val = lib->element[k + 1];
            if (key->type != REDIS_REPLY_STRING || strcmp(key->str, "library_name") != 0) continue;
            if (val->type != REDIS_REPLY_STRING || strncmp(val->str, "delayq_", 7) != 0) continue;
            if (text->len) rc = dq__buf_append(text, " ", 1);
            if (!rc) rc = dq__buf_append(text, val->str, val->len);
        }
    }
    return rc;
}

int dq_functions_status(dq_client *c, dq_node_report_fn *fn, void *privdata) {
    return every_master(c, list_command, listed, fn, privdata);
}
