/*
 * errors.c - dq_strerror: the static text of each enum dq_error code; and
 * the one place that reads Redis's error replies: dq__error_class.
 *
 * dq_strerror's are short lowercase phrases meant to follow a colon
 * ("offer: timed out"); the detail of a particular failure lives in
 * dq_client_errstr().
 *
 * An error reply is known by its code word ("READONLY ..."), never by the
 * prose after it: Valkey 8 rewrote much of that prose (its LOADING, BUSY
 * and MISCONF name Valkey, its ACL refusals are worded anew), and later
 * Redis may again. Only the few refusals that come under the generic ERR
 * are told by their first words, the ones Redis 7.0, 7.2 and Valkey 8
 * share. tests/unit/test_errors.c holds both servers' texts.
 *
 * The queue's own functions refuse with "ERR delayq:CLASS prose" (or a
 * code word of Redis's, WRONGTYPE, or DQSHARDS): dq__refusal_class reads
 * CLASS, so callers act on it rather than on the prose.
 */
#include <ctype.h>
#include <string.h>

#include "util.h"

const char *dq_strerror(int code) {
    switch (code) {
        case DQ_OK: return "success";
        case DQ_EINVAL: return "invalid argument";
        case DQ_ETOOBIG: return "payload too large";
        case DQ_ECONNECT: return "cannot connect to Redis";
        case DQ_ETIMEDOUT: return "timed out";
        case DQ_EAUTH: return "authentication failed";
        case DQ_EWRONGTYPE: return "wrong key type in Redis";
        case DQ_EREDIS: return "Redis error";
        case DQ_EPROTO: return "protocol error";
        case DQ_ENOMEM: return "out of memory";
        case DQ_ECLOSED: return "closed";
        case DQ_EBUSY: return "busy";
        case DQ_ENOTDURABLE: return "not confirmed by enough replicas";
        case DQ_EKEY: return "sealed with a key this client does not hold";
        default: return "unknown error";
    }
}

/* ------------------------------------------------------------ Redis's error replies */

/* Each class by the code word its errors start with. */
static const struct {
    const char *word;
    enum dq__errclass class;
} codes[] = {
    {"NOSCRIPT", DQ__ERR_NOSCRIPT},
    {"MOVED", DQ__ERR_MOVED},
    {"ASK", DQ__ERR_ASK},
    {"TRYAGAIN", DQ__ERR_TRYAGAIN},
    {"CLUSTERDOWN", DQ__ERR_CLUSTERDOWN},
    {"READONLY", DQ__ERR_READONLY},
    {"LOADING", DQ__ERR_LOADING},
    {"BUSY", DQ__ERR_BUSY},
    {"NOREPLICAS", DQ__ERR_NOREPLICAS},
    {"MISCONF", DQ__ERR_MISCONF},
    {"OOM", DQ__ERR_OOM},
    {"NOPERM", DQ__ERR_NOPERM},
    {"MASTERDOWN", DQ__ERR_MASTERDOWN},
    {"UNBLOCKED", DQ__ERR_UNBLOCKED},
    {"WRONGTYPE", DQ__ERR_WRONGTYPE},
    {"NOAUTH", DQ__ERR_NOAUTH},
    {"WRONGPASS", DQ__ERR_NOAUTH},
};

/* The few refusals that come under the generic ERR, each by the words
 * after it, the same in Redis 7.0, 7.2 and Valkey 8: a function call
 * the node has no library for, and an ACL refusal of a command a script
 * calls (7.0 says "The user executing the script can't ...", 7.2 and
 * Valkey "ACL failure in script: ..."). */
static const struct {
    const char *head;
    enum dq__errclass class;
} generic[] = {
    {"ERR Function not found", DQ__ERR_NOFUNCTION},
    {"ERR The user executing the script can't", DQ__ERR_NOPERM_SCRIPT},
    {"ERR ACL failure in script", DQ__ERR_NOPERM_SCRIPT},
};

void dq__error_code(const char *text, char out[DQ__ERRKIND_MAX]) {
    size_t n = 0;
    if (!text) text = "";
    while (isupper((unsigned char)text[n]) && n + 1 < DQ__ERRKIND_MAX) n++;
    if (text[n] != ' ' && text[n] != '\0') n = 0;
    memcpy(out, text, n);
    out[n] = '\0';
}

enum dq__errclass dq__error_class(const char *text) {
    char word[DQ__ERRKIND_MAX];
    if (!text) return DQ__ERR_OTHER;
    dq__error_code(text, word);
    for (size_t i = 0; i < sizeof codes / sizeof *codes; i++)
        if (strcmp(word, codes[i].word) == 0) return codes[i].class;
    for (size_t i = 0; i < sizeof generic / sizeof *generic; i++)
        if (strncmp(text, generic[i].head, strlen(generic[i].head)) == 0) return generic[i].class;
    return DQ__ERR_OTHER;
}

int dq__error_persists(const char *text) {
    switch (dq__error_class(text)) {
        case DQ__ERR_OOM:
        case DQ__ERR_MISCONF:
        case DQ__ERR_NOREPLICAS:
        case DQ__ERR_READONLY:
        case DQ__ERR_LOADING:
        case DQ__ERR_BUSY: return 1;
        default: return 0;
    }
}

int dq__error_names_key(const char *text) {
    enum dq__errclass class = dq__error_class(text);
    int refusal = class == DQ__ERR_NOPERM || class == DQ__ERR_NOPERM_SCRIPT;
    const char *access = refusal ? strstr(text, "access") : NULL;
    return access && strstr(access, " key") != NULL;
}

/* ------------------------------------------------------------ the queue's functions' refusals */

/* Each class by its word: lua/ writes "ERR delayq:WORD prose". */
static const struct {
    const char *word;
    enum dq_refusal class;
} refusals[] = {
    {"input", DQ_REFUSAL_INPUT},
    {"state", DQ_REFUSAL_STATE},
    {"corrupt", DQ_REFUSAL_CORRUPT},
    {"proto", DQ_REFUSAL_PROTO},
};

enum dq_refusal dq__refusal_class(const char *text) {
    static const char head[] = "ERR delayq:";
    if (!text || strncmp(text, head, sizeof head - 1) != 0) return DQ_REFUSAL_NONE;
    const char *word = text + sizeof head - 1;
    size_t n = strcspn(word, " ");
    if (word[n] != ' ') return DQ_REFUSAL_NONE; /* a class word is followed by its prose */
    for (size_t i = 0; i < sizeof refusals / sizeof *refusals; i++)
        if (strlen(refusals[i].word) == n && strncmp(word, refusals[i].word, n) == 0)
            return refusals[i].class;
    return DQ_REFUSAL_NONE;
}
