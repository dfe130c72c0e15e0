/*
 * script.c - the registry of delayq's Lua scripts and how they run.
 *
 * tools/embed-lua.sh embeds each text once (the shared code of lua/lib, each
 * lua/NAME.lua, the library's prologue) and the order that joins them into
 * two kinds of text, joined here when they are sent: one Redis function
 * library (the shared code once, each script a function named
 * <library>_NAME), and each script on its own with the definitions of that
 * code it uses before it (runs of the shared code's bytes). A
 * call is FCALL on the node that serves the queue's slot: the library was
 * loaded once, so the call runs its script only (EVAL runs its whole text,
 * and makes its garbage, every time: a single take's script time fell from
 * 18.4 to 11.9 us, when EVAL texts carried all the shared code). When that
 * node lacks the library ("Function not found": a new server, FUNCTION
 * FLUSH, a node that never served the queue), the call goes again as EVAL
 * of the script's own text, and FUNCTION LOAD REPLACE of the library goes
 * before it on the same connection, so the calls after it find the library
 * (pipelined calls sent before it that failed too go again as FCALL after
 * it: one load, not one each). Functions live in the dataset: they are
 * replicated, persisted in RDB and AOF, and kept by FLUSHALL.
 * Loading the library is an administrator's act ('delayq functions load',
 * functions.c): Redis runs a function with the rights of its caller, so a
 * user who could load it could run code as every other user, and the rule
 * 'delayq acl' prints grants neither FUNCTION LOAD nor EVAL. Such a user's
 * fallback is refused (NOPERM for EVAL): the error then says which node
 * lacks the library and what loads it, in place of Redis's words.
 * The scripts that only read (stats, lookup, dead letters' list and count)
 * are no-writes functions called with FCALL_RO (EVAL_RO as the fallback):
 * their keys then count as read, so a user whose keys are read-only (ACL
 * %R~, `delayq acl --read-only`) may run them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "scripts.h"

typedef struct part {
    const char *bytes;
    size_t len;
} part;

static const part library[] = {DQ_LUA_LIBRARY_PARTS};

/* Script NAME's EVAL text: its parts (the runs of the shared code it uses,
 * then the script) and how many. */
#define EVAL_TEXT(name) (const part[]){DQ_LUA_##name##_PARTS}, DQ_LUA_##name##_NPARTS

static const struct {
    const part *eval; /* the EVAL text's parts */
    size_t n;         /* how many */
    const char *fn;   /* the function's name in the library */
    int ro;           /* a no-writes function: FCALL_RO, EVAL_RO */
} scripts[DQ__LUA_COUNT] = {
    [DQ__LUA_OFFER] = {EVAL_TEXT(offer), DQ_LUA_offer_FN, 0},
    [DQ__LUA_TRANSFER] = {EVAL_TEXT(transfer), DQ_LUA_transfer_FN, 0},
    [DQ__LUA_CANCEL] = {EVAL_TEXT(cancel), DQ_LUA_cancel_FN, 0},
    [DQ__LUA_LOOKUP] = {EVAL_TEXT(lookup), DQ_LUA_lookup_FN, 1},
    [DQ__LUA_STATS] = {EVAL_TEXT(stats), DQ_LUA_stats_FN, 1},
    [DQ__LUA_TAKE] = {EVAL_TEXT(take), DQ_LUA_take_FN, 0},
    [DQ__LUA_ACK] = {EVAL_TEXT(ack), DQ_LUA_ack_FN, 0},
    [DQ__LUA_NACK] = {EVAL_TEXT(nack), DQ_LUA_nack_FN, 0},
    [DQ__LUA_EXTEND] = {EVAL_TEXT(extend), DQ_LUA_extend_FN, 0},
    [DQ__LUA_DEAD] = {EVAL_TEXT(dead), DQ_LUA_dead_FN, 0},
    [DQ__LUA_DEAD_RO] = {EVAL_TEXT(dead), DQ_LUA_dead_ro_FN, 1},
    [DQ__LUA_CONFIG] = {EVAL_TEXT(config), DQ_LUA_config_FN, 0},
    [DQ__LUA_METRICS] = {EVAL_TEXT(metrics), DQ_LUA_metrics_FN, 1},
    [DQ__LUA_LIST] = {EVAL_TEXT(list), DQ_LUA_list_FN, 1},
    [DQ__LUA_SHARDS] = {EVAL_TEXT(shards), DQ_LUA_shards_FN, 0},
    [DQ__LUA_RECURRING] = {EVAL_TEXT(recurring), DQ_LUA_recurring_FN, 0},
    [DQ__LUA_BEAT] = {EVAL_TEXT(beat), DQ_LUA_beat_FN, 0},
    [DQ__LUA_CONSUMERS] = {EVAL_TEXT(consumers), DQ_LUA_consumers_FN, 1},
    [DQ__LUA_SCHEDULES] = {EVAL_TEXT(schedules), DQ_LUA_schedules_FN, 1},
};

/* Copies the n parts one after the other to out; returns the end. */
static char *join(char *out, const part *parts, size_t n) {
    for (size_t i = 0; i < n; i++) memcpy(out, parts[i].bytes, parts[i].len), out += parts[i].len;
    return out;
}

/* The n parts joined into a malloc'ed, NUL-ended text of *len bytes (the
 * length counted from the parts themselves). */
static char *joined(const part *parts, size_t n, size_t *len) {
    *len = 0;
    for (size_t i = 0; i < n; i++) *len += parts[i].len;
    char *text = malloc(*len + 1);
    if (!text) return NULL;
    *join(text, parts, n) = '\0';
    return text;
}

char *dq__library_text(size_t *len) { return joined(library, sizeof library / sizeof *library, len); }

char *dq__script_text(enum dq__script script, size_t *len) {
    return joined(scripts[script].eval, scripts[script].n, len);
}

char *dq__library_load_command(size_t *len) {
    size_t lib_len;
    char *lib = dq__library_text(&lib_len);
    if (!lib) return NULL;
    const char *argv[4] = {"FUNCTION", "LOAD", "REPLACE", lib};
    size_t lens[4] = {8, 4, 7, lib_len};
    char *cmd = NULL;
    long n = dq__format_command(&cmd, 0, NULL, NULL, 4, argv, lens);
    free(lib);
    if (n < 0) return NULL;
    *len = (size_t)n;
    return cmd;
}

/* "Function not found" (the node lacks the library): the same call as EVAL
 * (EVAL_RO) of the script's text, everything after the function's name kept
 * as it is, with the library's FUNCTION LOAD to go before it (*pre). The
 * command starts "*<argc>\r\n$5\r\nFCALL\r\n$<n>\r\n<name>\r\n" (or
 * "$8\r\nFCALL_RO\r\n"). When another call's FUNCTION LOAD went to the node
 * after this call (pre_sent), the same FCALL again: a pipeline of calls that
 * met a new server made a FUNCTION LOAD (4.7 ms of Redis) and an EVAL (1.3
 * ms) each, 66 of them for a batch of 200,000 offers. */
static char *as_eval(const char *cmd, size_t cmd_len, const redisReply *err, int pre_sent,
                     size_t *newlen, char **pre, size_t *pre_len) {
    static const char fcall[] = "$5\r\nFCALL\r\n", fcall_ro[] = "$8\r\nFCALL_RO\r\n";
    if (dq__error_class(err->str) != DQ__ERR_NOFUNCTION) return NULL;
    if (pre_sent) {
        char *again = malloc(cmd_len + 1); /* NUL-ended, as dq__format_command's */
        if (!again) return NULL;
        memcpy(again, cmd, cmd_len);
        again[cmd_len] = '\0';
        *newlen = cmd_len;
        return again;
    }
    const char *crlf = memchr(cmd, '\n', cmd_len);
    if (!crlf) return NULL;
    size_t head = (size_t)(crlf + 1 - cmd), at;
    if (head + sizeof fcall_ro + 4 > cmd_len) return NULL;
    if (memcmp(cmd + head, fcall, sizeof fcall - 1) == 0) at = head + sizeof fcall - 1;
    else if (memcmp(cmd + head, fcall_ro, sizeof fcall_ro - 1) == 0) at = head + sizeof fcall_ro - 1;
    else return NULL;
    if (cmd[at] != '$') return NULL;
    char *end;
    unsigned long name_len = strtoul(cmd + at + 1, &end, 10);
    size_t name_at = (size_t)(end - cmd) + 2, skip = name_at + name_len + 2;
    if (skip > cmd_len) return NULL;
    int which = -1;
    for (int i = 0; i < DQ__LUA_COUNT; i++)
        if (strlen(scripts[i].fn) == name_len && memcmp(scripts[i].fn, cmd + name_at, name_len) == 0)
            which = i;
    if (which < 0) return NULL;
    char mid[48];
    size_t text_len = 0;
    for (size_t i = 0; i < scripts[which].n; i++) text_len += scripts[which].eval[i].len;
    int mlen = scripts[which].ro ? snprintf(mid, sizeof mid, "$7\r\nEVAL_RO\r\n$%zu\r\n", text_len)
                                 : snprintf(mid, sizeof mid, "$4\r\nEVAL\r\n$%zu\r\n", text_len);
    size_t len = head + (size_t)mlen + text_len + 2 + (cmd_len - skip);
    char *out = malloc(len + 1), *p = out; /* NUL-ended, as dq__format_command's */
    if (!out) return NULL;
    memcpy(p, cmd, head), p += head;
    memcpy(p, mid, (size_t)mlen), p += mlen;
    p = join(p, scripts[which].eval, scripts[which].n);
    memcpy(p, "\r\n", 2), p += 2;
    memcpy(p, cmd + skip, cmd_len - skip);
    out[len] = '\0';
    *newlen = len;
    *pre = dq__library_load_command(pre_len); /* NULL: the EVAL goes alone */
    return out;
}

#define NO_LIBRARY_HINT "an administrator loads it with 'delayq functions load'"

/* The fallback refused (the user may not run EVAL, nor, then, FUNCTION
 * LOAD: the rule of 'delayq acl'): which node lacks the library, and what
 * loads it. The keys were granted: the FCALL's were checked first. */
static char *no_library(const redisReply *err, const dq__conn *conn) {
    if (dq__error_class(err->str) != DQ__ERR_NOPERM) return NULL;
    const char *user = conn->ep.user && conn->ep.user[0] ? conn->ep.user : "default";
    dq__buf b = {0};
    if (dq__buf_printf(&b,
                       "NOPERM %s lacks delayq's function library %s, and user %s may not load it "
                       "(nor run EVAL): " NO_LIBRARY_HINT,
                       conn->name, DQ_LUA_LIBRARY_NAME, user) != 0) {
        dq__buf_release(&b);
        return NULL;
    }
    return b.data;
}

static const dq__rewrite missing_library = {as_eval, no_library};

int dq__text_is_no_library(const char *text) {
    return dq__error_class(text) == DQ__ERR_NOPERM && strstr(text, NO_LIBRARY_HINT) != NULL;
}

int dq__eval(dq_client *c, const char *queue, unsigned flags, enum dq__script script, int nkeys,
             int nargs, const char **argv, const size_t *argvlen, dq__reply_fn *fn, void *privdata) {
    char nk[21];
    const char *head[3] = {scripts[script].ro ? "FCALL_RO" : "FCALL", scripts[script].fn, nk};
    size_t headlen[3] = {strlen(head[0]), strlen(scripts[script].fn), dq__fmt_i64(nk, nkeys)};
    char *cmd = NULL;
    long len = dq__format_command(&cmd, 3, head, headlen, nkeys + nargs, argv, argvlen);
    if (len < 0) return dq__fail(c, DQ_ENOMEM, "out of memory");
    return dq__route(c, dq__queue_slot(queue), flags, cmd, (size_t)len, &missing_library, fn, privdata);
}

const char *dq_library_name(void) { return DQ_LUA_LIBRARY_NAME; }
