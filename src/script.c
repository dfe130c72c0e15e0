/*
 * script.c - the registry of delayq's Lua scripts (lua/NAME.lua, embedded at
 * build time with their SHA-1s) and how they run: EVALSHA on the node that
 * serves the queue's slot, and EVAL with the body when that node's script
 * cache does not hold it (after a restart, a failover or SCRIPT FLUSH).
 * EVAL caches the script there, so the next EVALSHA finds it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "scripts.h"

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

/* The head every EVALSHA command starts with, up to the sha:
 * "*<argc>\r\n$7\r\nEVALSHA\r\n$40\r\n<sha>\r\n". */
#define SHA_FIELD (sizeof "$7\r\nEVALSHA\r\n$40\r\n" - 1)

/* NOSCRIPT: the same command as EVAL with the body, the argument count and
 * everything after the sha kept as they are. */
static char *as_eval(const char *cmd, size_t cmd_len, const redisReply *err, size_t *newlen) {
    if (strncmp(err->str, "NOSCRIPT", 8) != 0) return NULL;
    const char *crlf = memchr(cmd, '\n', cmd_len);
    if (!crlf) return NULL;
    size_t head = (size_t)(crlf + 1 - cmd), skip = head + SHA_FIELD + 40 + 2;
    if (skip > cmd_len) return NULL;
    const char *sha = cmd + head + SHA_FIELD;
    int which = -1;
    for (int i = 0; i < DQ__LUA_COUNT; i++)
        if (memcmp(scripts[i].sha, sha, 40) == 0) which = i;
    if (which < 0) return NULL;
    char mid[48];
    int mlen = snprintf(mid, sizeof mid, "$4\r\nEVAL\r\n$%zu\r\n", scripts[which].len);
    size_t len = head + (size_t)mlen + scripts[which].len + 2 + (cmd_len - skip);
    char *out = malloc(len + 1), *p = out; /* NUL-ended, as dq__format_command's */
    if (!out) return NULL;
    memcpy(p, cmd, head), p += head;
    memcpy(p, mid, (size_t)mlen), p += mlen;
    memcpy(p, scripts[which].body, scripts[which].len), p += scripts[which].len;
    memcpy(p, "\r\n", 2), p += 2;
    memcpy(p, cmd + skip, cmd_len - skip);
    out[len] = '\0';
    *newlen = len;
    return out;
}

unsigned dq__queue_slot(const char *queue) { return dq__key_slot(queue, strlen(queue)); }

int dq__eval(dq_client *c, const char *queue, unsigned flags, enum dq__script script, int nkeys,
             int nargs, const char **argv, const size_t *argvlen, dq__reply_fn *fn,
             void *privdata) {
    char nk[21];
    const char *head[3] = {"EVALSHA", scripts[script].sha, nk};
    size_t headlen[3] = {7, 40, dq__fmt_i64(nk, nkeys)};
    char *cmd = NULL;
    long len = dq__format_command(&cmd, 3, head, headlen, nkeys + nargs, argv, argvlen);
    if (len < 0) return dq__fail(c, DQ_ENOMEM, "out of memory");
    return dq__route(c, dq__queue_slot(queue), flags, cmd, (size_t)len, as_eval, fn, privdata);
}
