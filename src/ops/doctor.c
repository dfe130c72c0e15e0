/*
 * doctor.c - dq_doctor: what in the deployment under a client breaks
 * delayq's promise (never lost, never silently late), one finding a check.
 *
 * Owns examining nodes: a connection of its own to each master the router
 * serves (masters.c) and to each replica their ROLE lists, and the same
 * commands on each: TIME first (so its round trip, which bounds the clock
 * comparison, is short), ROLE, HELLO (the version; any user may run it),
 * CONFIG GET of the settings that matter, INFO (their fallback), FUNCTION
 * LIST, ACL WHOAMI, and four probes telling whether this user may run
 * EVAL, FUNCTION LOAD, FCALL and FCALL_RO without running anything: each
 * gets an argument its command rejects after the ACL check, so NOPERM
 * means refused and any other answer allowed. Answers are kept as text
 * (arrays flattened, one element a line); the checks then read every
 * node's. A refused read (an application user's rule allows no CONFIG or
 * INFO) is a warning naming the refusal, never a failure. Nothing is
 * written anywhere. DQ_DOCTOR_QUICK (a long-running command's start) asks
 * the masters only, and only the reads before FUNCTION LIST: the checks
 * that can find the ground unsafe.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define MASTERS_MAX 64
#define NODES_MAX 256
#define CLOCK_SKEW_MS 1000.0      /* beyond this a clock is unsafe     */
#define BEHIND_WARN_BYTES (1024 * 1024)

enum query {
    Q_TIME,
    Q_ROLE,
    Q_HELLO,
    Q_POLICY,
    Q_APPENDONLY,
    Q_FSYNC,
    Q_SAVE,
    Q_MINREP,
    Q_MINLAG,
    Q_INFO,
    Q_FUNCTIONS,
    Q_WHOAMI,
    Q_EVAL,
    Q_LOAD,
    Q_FCALL,
    Q_FCALL_RO,
    Q_COUNT
};

/* The last ones (from Q_FUNCTIONS) only for the checks DQ_DOCTOR_QUICK skips. */
#define Q_QUICK Q_FUNCTIONS
static const struct {
    int argc;
    const char *argv[4];
} queries[Q_COUNT] = {
    [Q_TIME] = {1, {"TIME"}},
    [Q_ROLE] = {1, {"ROLE"}},
    [Q_HELLO] = {2, {"HELLO", "2"}},
    [Q_POLICY] = {3, {"CONFIG", "GET", "maxmemory-policy"}},
    [Q_APPENDONLY] = {3, {"CONFIG", "GET", "appendonly"}},
    [Q_FSYNC] = {3, {"CONFIG", "GET", "appendfsync"}},
    [Q_SAVE] = {3, {"CONFIG", "GET", "save"}},
    [Q_MINREP] = {3, {"CONFIG", "GET", "min-replicas-to-write"}},
    [Q_MINLAG] = {3, {"CONFIG", "GET", "min-replicas-max-lag"}},
    [Q_INFO] = {1, {"INFO"}},
    [Q_FUNCTIONS] = {4, {"FUNCTION", "LIST", "LIBRARYNAME", "delayq_"}},
    [Q_WHOAMI] = {2, {"ACL", "WHOAMI"}},
    /* The probes: a negative key count, a library without its header line,
     * a function nobody defines. */
    [Q_EVAL] = {3, {"EVAL", "return 1", "-1"}},
    [Q_LOAD] = {3, {"FUNCTION", "LOAD", "-- delayq doctor: not a library"}},
    [Q_FCALL] = {3, {"FCALL", "delayq_doctor_probe", "0"}},
    [Q_FCALL_RO] = {3, {"FCALL_RO", "delayq_doctor_probe", "0"}},
};

/* One command's answer: a reply (error or not) or the connection's failure. */
typedef struct answer {
    int got;    /* a reply came                                      */
    int error;  /* it is an error reply, or none came                */
    char *text; /* the reply flattened, the error's text, or the cause */
} answer;

typedef struct node node;
typedef struct exam exam;

struct node {
    exam *ex;
    dq__conn *conn;
    int is_replica;
    int failed;                /* never came up: why in err             */
    char err[DQ__ERRSTR_MAX];
    double sent, received;     /* TIME's round trip on the local clock  */
    struct ref {
        node *nd;
        int q;
    } refs[Q_COUNT];           /* the reply callbacks' privdata         */
    answer a[Q_COUNT];
};

struct exam {
    dq_client *c;
    unsigned flags;
    node *nodes[NODES_MAX];
    int n;
    int left;                  /* connections and replies to come       */
};

/* ------------------------------------------------------------ answers */

/* Appends reply as text: arrays one element a line, nil as "". */
static int flatten(dq__buf *b, const redisReply *r) {
    if (r->type == REDIS_REPLY_INTEGER) return dq__buf_printf(b, "%lld", r->integer);
    if (r->type != REDIS_REPLY_ARRAY) return r->str ? dq__buf_append(b, r->str, r->len) : 0;
    int bad = 0;
    for (size_t i = 0; i < r->elements; i++) {
        if (i) bad |= dq__buf_append(b, "\n", 1);
        bad |= flatten(b, r->element[i]);
    }
    return bad;
}

static void on_answer(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    struct ref *ref = privdata;
    node *nd = ref->nd;
    answer *a = &nd->a[ref->q];
    if (ref->q == Q_TIME) nd->received = ev_time();
    dq__buf b = {0};
    if (!reply) dq__buf_printf(&b, "%s", conn->errstr[0] ? conn->errstr : dq_strerror(code));
    else if (flatten(&b, reply)) dq__buf_release(&b);
    a->got = reply != NULL;
    a->error = !reply || reply->type == REDIS_REPLY_ERROR;
    a->text = b.data ? b.data : strdup("");
    nd->ex->left--;
}

/* The answer's text when the command succeeded, else NULL. */
static const char *value(const node *nd, int q) {
    const answer *a = &nd->a[q];
    return a->text && !a->error ? a->text : NULL;
}

/* Why an answer is missing: the error, or that the node was not asked. */
static const char *why(const node *nd, int q) {
    if (nd->a[q].text && nd->a[q].text[0]) return nd->a[q].text;
    return "no answer";
}

/* Line i (0-based) of a flattened answer into out; 0 or -1. */
static int line_of(const char *text, int i, char *out, size_t size) {
    for (; text && i > 0; i--) {
        text = strchr(text, '\n');
        if (text) text++;
    }
    if (!text) return -1;
    size_t n = strcspn(text, "\n");
    snprintf(out, size, "%.*s", (int)n, text);
    return 0;
}

/* The line after the line holding exactly key (a flattened map). */
static int map_get(const char *text, const char *key, char *out, size_t size) {
    char line[128];
    for (int i = 0; text && line_of(text, i, line, sizeof line) == 0; i++)
        if (strcmp(line, key) == 0) return line_of(text, i + 1, out, size);
    return -1;
}

/* A CONFIG GET's value ("name\nvalue"), or NULL when refused or unknown. */
static const char *config(const node *nd, int q) {
    const char *v = value(nd, q);
    const char *nl = v ? strchr(v, '\n') : NULL;
    return nl ? nl + 1 : NULL;
}

/* An INFO field ("name:value" lines) into out; 0 or -1. */
static int info(const node *nd, const char *field, char *out, size_t size) {
    const char *text = value(nd, Q_INFO);
    size_t n = strlen(field);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, field, n) == 0 && p[n] == ':') {
            snprintf(out, size, "%.*s", (int)strcspn(p + n + 1, "\r\n"), p + n + 1);
            return 0;
        }
    return -1;
}

/* Whether this user may run a probe's command: 1, 0 (NOPERM), -1 unknown. */
static int allowed(const node *nd, int q) {
    const answer *a = &nd->a[q];
    if (!a->got) return -1;
    return a->error && dq__text_is_refusal(a->text) ? 0 : 1;
}

/* ------------------------------------------------------------ nodes */

static node *node_add(exam *ex, const dq__endpoint *ep, int is_replica);

/* A master's ROLE: "master", offset, then host, port, offset per replica. */
static void discover(node *nd) {
    char host[256], port[16];
    dq__endpoint ep = nd->conn->ep;
    for (int i = 2; line_of(value(nd, Q_ROLE), i, host, sizeof host) == 0 && host[0] &&
                    line_of(value(nd, Q_ROLE), i + 1, port, sizeof port) == 0;
         i += 3) {
        dq__endpoint_set(&ep, host, atoi(port), NULL);
        node_add(nd->ex, &ep, 1);
    }
}

static void on_role(dq__conn *conn, redisReply *reply, int code, void *privdata) {
    struct ref *ref = privdata;
    node *nd = ref->nd;
    on_answer(conn, reply, code, privdata);
    char role[16];
    if (!(nd->ex->flags & DQ_DOCTOR_QUICK) && !nd->is_replica &&
        line_of(value(nd, Q_ROLE), 0, role, sizeof role) == 0 && strcmp(role, "master") == 0)
        discover(nd);
}

static void node_up(dq__conn *conn, void *privdata) {
    node *nd = privdata;
    int n = nd->ex->flags & DQ_DOCTOR_QUICK ? Q_QUICK : Q_COUNT;
    for (int q = 0; q < n; q++) {
        const char *argv[4];
        size_t lens[4];
        for (int i = 0; i < queries[q].argc; i++)
            argv[i] = queries[q].argv[i], lens[i] = strlen(argv[i]);
        if (q == Q_TIME) nd->sent = ev_time();
        nd->refs[q].nd = nd;
        nd->refs[q].q = q;
        if (dq__conn_send(conn, 0, queries[q].argc, argv, lens, q == Q_ROLE ? on_role : on_answer,
                          &nd->refs[q]) == 0)
            nd->ex->left++;
        else nd->a[q].error = 1;
    }
    nd->ex->left--;
}

static void node_fail(dq__conn *conn, void *privdata) {
    node *nd = privdata;
    nd->failed = 1;
    snprintf(nd->err, sizeof nd->err, "%s", conn->errstr[0] ? conn->errstr : "cannot connect");
    nd->ex->left--;
}

/* Starts examining the node at ep unless it is known already. */
static node *node_add(exam *ex, const dq__endpoint *ep, int is_replica) {
    for (int i = 0; i < ex->n; i++)
        if (strcmp(ex->nodes[i]->conn->ep.name, ep->name) == 0) return ex->nodes[i];
    if (ex->n >= NODES_MAX) return NULL;
    node *nd = calloc(1, sizeof *nd);
    if (!nd) return NULL;
    nd->conn = dq__conn_new(ex->c, DQ__CONN_CMD, ep);
    if (!nd->conn) {
        free(nd);
        return NULL;
    }
    nd->ex = ex;
    nd->is_replica = is_replica;
    nd->conn->on_up = node_up;
    nd->conn->on_fail = node_fail;
    nd->conn->event_privdata = nd;
    ex->nodes[ex->n++] = nd;
    ex->left++;
    dq__conn_start(nd->conn);
    return nd;
}

static void nodes_free(exam *ex) {
    for (int i = 0; i < ex->n; i++) {
        node *nd = ex->nodes[i];
        dq__conn_free(nd->conn);
        for (int q = 0; q < Q_COUNT; q++) free(nd->a[q].text);
        free(nd);
    }
    ex->n = 0;
}

/* ------------------------------------------------------------ reports */

#define GROUPS_MAX 16

/* What one check found: its problems, each with the nodes it was found on
 * (the worst status counts), each advice once, and the summary used when
 * all is well. */
typedef struct report {
    int status;
    struct {
        char text[400];
        dq__buf names;
    } groups[GROUPS_MAX];
    int ngroups;
    int more;        /* problems past GROUPS_MAX                         */
    dq__buf advice;
    unsigned advised;
    int oks;         /* nodes found ok                                    */
    char ok[200];    /* the first ok node's note, for the summary         */
} report;

static void problem(report *r, int status, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A warning or worse found on node name (NULL: on none in particular). */
static void problem(report *r, int status, const char *name, const char *fmt, ...) {
    char text[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (status > r->status) r->status = status;
    int g = 0;
    while (g < r->ngroups && strcmp(r->groups[g].text, text) != 0) g++;
    if (g == GROUPS_MAX) {
        r->more++;
        return;
    }
    if (g == r->ngroups) snprintf(r->groups[r->ngroups++].text, sizeof r->groups[0].text, "%s", text);
    if (name) dq__buf_printf(&r->groups[g].names, "%s%s", r->groups[g].names.len ? ", " : "", name);
}

static void fine(report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A node found ok: the first one's words summarise them all. */
static void fine(report *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (!r->oks++) vsnprintf(r->ok, sizeof r->ok, fmt, ap);
    va_end(ap);
}

static void report_release(report *r) {
    for (int g = 0; g < r->ngroups; g++) dq__buf_release(&r->groups[g].names);
    dq__buf_release(&r->advice);
}

/* Adds advice text (bit: which) unless given already. */
static void advise(report *r, unsigned bit, const char *text) {
    if (r->advised & bit) return;
    r->advised |= bit;
    dq__buf_printf(&r->advice, " %s", text);
}

#define ADV_READ (1u << 31)
static void unreadable(report *r, const char *name, const char *what, const char *cause) {
    problem(r, DQ_FINDING_WARN, name, "%s not readable (%s)", what, cause);
    advise(r, ADV_READ,
           "Run 'delayq doctor' with a user that may read it (CONFIG GET, INFO, "
           "FUNCTION LIST) to check.");
}

/* "host:port" or "host:port (replica)". */
static const char *label(const node *nd, char *buf, size_t size) {
    snprintf(buf, size, "%s%s", nd->conn->ep.name, nd->is_replica ? " (replica)" : "");
    return buf;
}

/* ------------------------------------------------------------ checks */

static int replicas_of(const node *nd) {
    char line[64];
    int n = 0;
    /* No replica: the empty list flattens to one empty line. */
    while (line_of(value(nd, Q_ROLE), 2 + 3 * n, line, sizeof line) == 0 && line[0]) n++;
    return n;
}

/* Each check_* below judges one node (name: its label), noting what it
 * finds in r; findings_make runs it over every node examined. */

static void check_policy(const node *nd, const char *name, report *r) {
    char v[64];
    const char *p = config(nd, Q_POLICY);
    if (!p && info(nd, "maxmemory_policy", v, sizeof v) == 0) p = v;
    if (!p) {
        unreadable(r, name, "maxmemory-policy", why(nd, Q_POLICY));
    } else if (strcmp(p, "noeviction") != 0) {
        problem(r, DQ_FINDING_UNSAFE, name, "maxmemory-policy %s", p);
        advise(r, 1,
               "Redis evicts keys under memory pressure: items, dead letters and queue "
               "settings vanish without a word. Set maxmemory-policy noeviction (offers "
               "then fail with OOM instead) and give Redis the memory it needs.");
    } else {
        fine(r, "noeviction");
    }
}

static void check_persistence(const node *nd, const char *name, report *r) {
    char v[16];
    const char *aof = config(nd, Q_APPENDONLY), *save = config(nd, Q_SAVE);
    const char *fsync = config(nd, Q_FSYNC);
    if (!aof && info(nd, "aof_enabled", v, sizeof v) == 0) aof = strcmp(v, "1") == 0 ? "yes" : "no";
    int copies = nd->is_replica || replicas_of(nd) > 0;
    int always = fsync && strcmp(fsync, "always") == 0;
    if (!aof) {
        unreadable(r, name, "appendonly", why(nd, Q_APPENDONLY));
    } else if (strcmp(aof, "yes") != 0 && !save) {
        unreadable(r, name, "save (no AOF)", why(nd, Q_SAVE));
    } else if (strcmp(aof, "yes") != 0 && !save[0]) {
        problem(r, DQ_FINDING_UNSAFE, name, "neither AOF nor RDB");
        advise(r, 1,
               "A restart loses every item and setting. Set appendonly yes and "
               "appendfsync always.");
    } else if (strcmp(aof, "yes") != 0) {
        problem(r, DQ_FINDING_WARN, name, "RDB snapshots only (save %s)", save);
        advise(r, 2,
               "A crash loses what was written since the last snapshot. Set appendonly "
               "yes and appendfsync always.");
    } else if (!always && !copies) {
        problem(r, DQ_FINDING_WARN, name, "AOF with appendfsync %s and no replica",
                fsync ? fsync : "(not readable)");
        advise(r, 4,
               "A crash of the host loses up to a second of acknowledged writes. Set "
               "appendfsync always, or add replicas and offer with --wait-replicas.");
    } else {
        fine(r, "AOF with appendfsync %s%s", fsync ? fsync : "?", always ? "" : " and replicas");
    }
}

/* A master's replicas, and how far behind its offset the furthest is. */
static void replicas_master(const node *nd, const char *name, report *r) {
    char line[64];
    int n = replicas_of(nd);
    long long top = line_of(value(nd, Q_ROLE), 1, line, sizeof line) == 0 ? atoll(line) : 0;
    long long behind = 0;
    for (int k = 0; k < n; k++)
        if (line_of(value(nd, Q_ROLE), 4 + 3 * k, line, sizeof line) == 0 && top - atoll(line) > behind)
            behind = top - atoll(line);
    if (n == 0) {
        problem(r, DQ_FINDING_WARN, name, "no replica");
        advise(r, 1,
               "One host holds everything: a lost disk or host loses the queues. Add replicas "
               "(with Sentinel or Cluster to fail over).");
    } else if (behind > BEHIND_WARN_BYTES) {
        problem(r, DQ_FINDING_WARN, name, "%d replica%s, one %lld bytes behind", n, n == 1 ? "" : "s",
                behind);
        advise(r, 2, "A failover now loses what the replica lacks: check its link and load.");
    } else {
        fine(r, "%d replica%s, at most %lld bytes behind", n, n == 1 ? "" : "s", behind);
    }
}

/* Also run for the nodes that never came up. */
static void check_replicas(const node *nd, const char *name, report *r) {
    char role[16], link[32];
    if (nd->failed) {
        problem(r, DQ_FINDING_WARN, name, "not examined (%s)", nd->err);
        advise(r, 4, "A node that cannot be reached cannot take over or serve.");
    } else if (line_of(value(nd, Q_ROLE), 0, role, sizeof role) != 0) {
        unreadable(r, name, "ROLE", why(nd, Q_ROLE));
    } else if (strcmp(role, "master") == 0) {
        replicas_master(nd, name, r);
    } else if (line_of(value(nd, Q_ROLE), 3, link, sizeof link) == 0 && strcmp(link, "connected") != 0) {
        problem(r, DQ_FINDING_WARN, name, "its link to the master is %s", link);
        advise(r, 8, "A replica out of touch falls behind: a failover to it loses writes.");
    }
}

static void check_min_replicas(const node *nd, const char *name, report *r) {
    if (nd->is_replica) return;
    const char *v = config(nd, Q_MINREP), *lag = config(nd, Q_MINLAG);
    int n = replicas_of(nd), want = v ? atoi(v) : 0;
    if (!v) {
        unreadable(r, name, "min-replicas-to-write", why(nd, Q_MINREP));
    } else if (want > n) {
        problem(r, DQ_FINDING_UNSAFE, name, "min-replicas-to-write %d with %d replica%s connected", want,
                n, n == 1 ? "" : "s");
        advise(r, 1,
               "Every write is refused (NOREPLICAS) until enough replicas are back. Lower "
               "it or bring the replicas back.");
    } else if (want == 0 && n > 0) {
        problem(r, DQ_FINDING_WARN, name, "min-replicas-to-write 0 with %d replica%s", n,
                n == 1 ? "" : "s");
        advise(r, 2,
               "A master cut off from its replicas keeps taking writes that a failover then "
               "drops. Set min-replicas-to-write 1 and min-replicas-max-lag 10 to bound "
               "that window, and offer with --wait-replicas where a write must survive a "
               "failover.");
    } else {
        fine(r, "min-replicas-to-write %d (max lag %s s) with %d replica%s", want, lag ? lag : "?", n,
             n == 1 ? "" : "s");
    }
}

/* ms since the epoch as "YYYY-MM-DDTHH:MM:SS.mmmZ". */
static const char *iso_ms(double ms, char *buf, size_t size) {
    time_t s = (time_t)floor(ms / 1000.0);
    struct tm tm;
    gmtime_r(&s, &tm);
    size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, size - n, ".%03dZ", (int)fmod(ms, 1000.0));
    return buf;
}

/* The node's clock minus this host's (ms), at the middle of TIME's round
 * trip, and half that round trip (the uncertainty). 0, or -1 unread. */
static int clock_offset(const node *nd, double *server, double *off, double *half) {
    char s[32], us[32];
    if (line_of(value(nd, Q_TIME), 0, s, sizeof s) || line_of(value(nd, Q_TIME), 1, us, sizeof us))
        return -1;
    *server = atof(s) * 1000.0 + atof(us) / 1000.0;
    *off = *server - (nd->sent + nd->received) * 500.0;
    *half = (nd->received - nd->sent) * 500.0;
    return 0;
}

static void check_clock(const node *nd, const char *name, report *r) {
    double server, off, half;
    char there[40], here[40];
    if (clock_offset(nd, &server, &off, &half) != 0) {
        unreadable(r, name, "TIME", why(nd, Q_TIME));
    } else if (fabs(off) - half > CLOCK_SKEW_MS) {
        problem(r, DQ_FINDING_UNSAFE, name, "clock %.3f s %s this host's (%s there, %s here)",
                fabs(off) / 1000.0, off > 0 ? "ahead of" : "behind", iso_ms(server, there, sizeof there),
                iso_ms(server - off, here, sizeof here));
        advise(r, 1,
               "delayq times everything by the server's clock, and a clock this far off "
               "gets set right with a jump: forward, items due within the jump come early "
               "by up to the jump and leases end early; backward, items come late by the "
               "jump. Synchronise the clocks (NTP) on both hosts (docs/operations.md, 'Clocks').");
    } else {
        fine(r, "within %.0f ms of this host's clock", fabs(off) + half);
    }
}

/* Across nodes: a failover moves the queue's clock by their difference. */
static void clock_spread(const exam *ex, report *r) {
    double lo = 0, hi = 0, server, off, half;
    int seen = 0;
    for (int i = 0; i < ex->n; i++) {
        if (ex->nodes[i]->failed || clock_offset(ex->nodes[i], &server, &off, &half) != 0) continue;
        lo = seen && lo < off ? lo : off;
        hi = seen && hi > off ? hi : off;
        seen = 1;
    }
    if (seen && hi - lo > CLOCK_SKEW_MS + 10.0) {
        problem(r, DQ_FINDING_UNSAFE, NULL, "the nodes' clocks differ by %.3f s", (hi - lo) / 1000.0);
        advise(r, 2, "A failover moves the queue's clock by that much.");
    }
}

/* The node's Redis version from HELLO, else INFO; 0 or -1. */
static int version_of(const node *nd, char *out, size_t size) {
    if (map_get(value(nd, Q_HELLO), "version", out, size) == 0) return 0;
    return info(nd, "redis_version", out, size);
}

static void check_version(const node *nd, const char *name, report *r) {
    char v[64];
    int functions = allowed(nd, Q_FCALL_RO) == 1 && !strstr(why(nd, Q_FCALL_RO), "unknown command");
    if (version_of(nd, v, sizeof v) != 0) {
        if (functions) fine(r, "7.0 or later (its functions answer)");
        else unreadable(r, name, "the version", why(nd, Q_HELLO));
    } else if (atoi(v) < 7) {
        problem(r, DQ_FINDING_UNSAFE, name, "Redis %s", v);
        advise(r, 1,
               "delayq needs Redis 7.0 or later: functions (FCALL) and sharded pub/sub "
               "(SSUBSCRIBE, SPUBLISH). Upgrade.");
    } else {
        fine(r, "Redis %s: functions and sharded pub/sub", v);
    }
}

static void check_library(const node *nd, const char *name, report *r) {
    char line[128], other[128] = "";
    const char *libs = value(nd, Q_FUNCTIONS);
    int ours = 0;
    if (!libs) {
        unreadable(r, name, "FUNCTION LIST", why(nd, Q_FUNCTIONS));
        return;
    }
    for (int k = 0; line_of(libs, k, line, sizeof line) == 0; k++) {
        if (strcmp(line, "library_name") != 0 || line_of(libs, k + 1, line, sizeof line) != 0) continue;
        if (strcmp(line, dq_library_name()) == 0) ours = 1;
        else if (!other[0]) snprintf(other, sizeof other, "%s", line);
    }
    if (ours) {
        fine(r, "%s loaded", dq_library_name());
        return;
    }
    if (other[0])
        problem(r, DQ_FINDING_WARN, name, "%s, not this client's %s", other, dq_library_name());
    else problem(r, DQ_FINDING_WARN, name, "no delayq library (this client's is %s)", dq_library_name());
    advise(r, 1,
           "A client loads its library at its first call if its user may run FUNCTION "
           "LOAD; for users that may not (the rule of 'delayq acl'), an administrator "
           "loads it first.");
}

static void check_acl(const node *nd, const char *name, report *r) {
    const dq__url *u = &nd->ex->c->url;
    char user[160];
    if (value(nd, Q_WHOAMI)) snprintf(user, sizeof user, "%.128s", value(nd, Q_WHOAMI));
    else snprintf(user, sizeof user, "%.128s (ACL WHOAMI refused)", u->user[0] ? u->user : "default");
    int eval = allowed(nd, Q_EVAL) == 1, load = allowed(nd, Q_LOAD) == 1;
    if (eval || load) {
        problem(r, DQ_FINDING_WARN, name, "user %s may run %s", user,
                eval && load ? "EVAL and FUNCTION LOAD"
                : eval       ? "EVAL"
                             : "FUNCTION LOAD");
        advise(r, 1,
               "Code such a user loads (FUNCTION LOAD REPLACE of delayq's library) or "
               "runs (EVAL) runs with the rights of every user that calls delayq, and a "
               "looping script freezes Redis. Give applications the rule 'delayq acl' "
               "prints.");
    } else if (allowed(nd, Q_FCALL_RO) == 0) {
        problem(r, DQ_FINDING_WARN, name, "user %s may not call delayq's functions (FCALL_RO refused)",
                user);
        advise(r, 2, "Every delayq command fails as this user: give it the rule 'delayq acl' prints.");
    } else {
        fine(r,
             "user %s may call delayq's functions%s and may not run EVAL or "
             "FUNCTION LOAD",
             user, allowed(nd, Q_FCALL) == 0 ? " (read only)" : "");
    }
}

/* ------------------------------------------------------------ findings */

static const struct {
    const char *name;
    void (*node)(const node *nd, const char *name, report *r);
    int failed_too;                              /* nodes never up too */
    void (*after)(const exam *ex, report *r);    /* across nodes, or NULL */
    int full;                                    /* skipped by DQ_DOCTOR_QUICK */
} checks[DQ_DOCTOR_CHECKS] = {
    {"maxmemory-policy", check_policy, 0, NULL, 0},
    {"persistence", check_persistence, 0, NULL, 0},
    {"replicas", check_replicas, 1, NULL, 0},
    {"min-replicas-to-write", check_min_replicas, 0, NULL, 0},
    {"clock", check_clock, 0, clock_spread, 0},
    {"redis-version", check_version, 0, NULL, 0},
    {"function-library", check_library, 0, NULL, 1},
    {"acl", check_acl, 0, NULL, 1},
};

static void run_check(const exam *ex, int k, report *r) {
    char name[160];
    if (checks[k].full && (ex->flags & DQ_DOCTOR_QUICK)) {
        fine(r, "not examined at the start (see 'delayq doctor')");
        return;
    }
    for (int i = 0; i < ex->n; i++)
        if (!ex->nodes[i]->failed || checks[k].failed_too)
            checks[k].node(ex->nodes[i], label(ex->nodes[i], name, sizeof name), r);
    if (checks[k].after) checks[k].after(ex, r);
}

/* The detail of a report: what was wrong and the advice, or the summary
 * of what was fine. One line of printable ASCII. NULL: out of memory. */
static char *detail_of(const exam *ex, const report *r) {
    dq__buf b = {0};
    int masters = 0, replicas = 0;
    for (int i = 0; i < ex->n; i++)
        if (!ex->nodes[i]->failed) ex->nodes[i]->is_replica ? replicas++ : masters++;
    for (int g = 0; r->status > DQ_FINDING_OK && g < r->ngroups; g++)
        dq__buf_printf(&b, "%s%s%s%s", g ? "; " : "",
                       r->groups[g].names.data ? r->groups[g].names.data : "",
                       r->groups[g].names.len ? ": " : "", r->groups[g].text);
    if (r->status > DQ_FINDING_OK)
        dq__buf_printf(&b, "%s.%s", r->more ? "; and more" : "", r->advice.data ? r->advice.data : "");
    else if (r->oks == 1 && ex->n == 1) dq__buf_printf(&b, "%s: %s", ex->nodes[0]->conn->ep.name, r->ok);
    else if (r->oks)
        dq__buf_printf(&b, "%s (on %d node%s; %d master%s, %d replica%s examined)", r->ok, r->oks,
                       r->oks == 1 ? "" : "s", masters, masters == 1 ? "" : "s", replicas,
                       replicas == 1 ? "" : "s");
    else dq__buf_printf(&b, "nothing to check");
    for (size_t i = 0; i < b.len; i++)
        if (b.data[i] < 0x20 || b.data[i] > 0x7e) b.data[i] = '?';
    return b.data;
}

static int findings_make(const exam *ex, dq_finding **out, size_t *n) {
    dq_finding *f = calloc(DQ_DOCTOR_CHECKS, sizeof *f);
    if (!f) return DQ_ENOMEM;
    int bad = 0;
    for (int k = 0; k < DQ_DOCTOR_CHECKS; k++) {
        report r;
        memset(&r, 0, sizeof r);
        run_check(ex, k, &r);
        f[k].check = checks[k].name;
        f[k].status = r.status;
        f[k].detail = detail_of(ex, &r);
        bad |= !f[k].detail;
        report_release(&r);
    }
    if (bad) {
        dq_findings_free(f, DQ_DOCTOR_CHECKS);
        return DQ_ENOMEM;
    }
    *out = f;
    *n = DQ_DOCTOR_CHECKS;
    return 0;
}

int dq_doctor(dq_client *c, unsigned flags, dq_finding **out, size_t *n) {
    int rc = dq__not_in_callback(c);
    if (rc) return rc;
    dq__endpoint eps[MASTERS_MAX];
    int nm = dq__route_masters(c, eps, MASTERS_MAX);
    if (nm == 0) return dq__fail(c, DQ_ECONNECT, "no master known now (a failover under way?)");
    exam *ex = calloc(1, sizeof *ex);
    if (!ex) return dq__fail(c, DQ_ENOMEM, "out of memory");
    ex->c = c;
    ex->flags = flags;
    for (int i = 0; i < nm; i++) node_add(ex, &eps[i], 0);
    dq__wait_all(c, &ex->left);
    int up = 0;
    for (int i = 0; i < ex->n; i++) up += !ex->nodes[i]->failed;
    if (!up) rc = dq__fail(c, DQ_ECONNECT, "%s", ex->n ? ex->nodes[0]->err : "no node to examine");
    else if ((rc = findings_make(ex, out, n)) != 0) dq__fail(c, rc, "out of memory");
    nodes_free(ex);
    free(ex);
    return rc;
}

void dq_findings_free(dq_finding *findings, size_t n) {
    if (!findings) return;
    for (size_t i = 0; i < n; i++) free(findings[i].detail);
    free(findings);
}

const char *dq_finding_status_name(int status) {
    switch (status) {
        case DQ_FINDING_OK: return "ok";
        case DQ_FINDING_WARN: return "warn";
        case DQ_FINDING_UNSAFE: return "unsafe";
        default: return "?";
    }
}
