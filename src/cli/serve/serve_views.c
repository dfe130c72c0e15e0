/*
 * serve_views.c - what 'delayq serve' answers, built from the library's
 * reads: the Prometheus text of /metrics and the JSON bodies of /api/.
 *
 * Owns turning dq_get_metrics, dq_list, dq_lookup_item, dq_recurring_list and
 * the dead-letter and cancel calls into a status and a body. Knows nothing of HTTP beyond the
 * status codes: serve_http.c routes the requests here and sends the bodies.
 * The queues shown are the registry's (dq_queues), those named on the
 * command line and those seen before whose keys vanished (dq_queues_seen).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/serve/serve.h"
#include "util.h"

/* ------------------------------------------------------------ bodies */

static void view_json(cli_view *v, int status, json_t *body) {
    v->status = status;
    v->type = "application/json";
    v->body = body ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;
    json_decref(body);
    if (!v->body) {
        v->status = 500;
        v->body = strdup("{\"error\":\"out of memory\"}");
    }
    v->len = v->body ? strlen(v->body) : 0;
}

void cli_view_error(cli_view *v, int status, const char *fmt, ...) {
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *o = json_object();
    /* Messages may quote what the request held: keep them valid UTF-8. */
    char esc[4 * sizeof msg];
    dq__escape(esc, sizeof esc, msg, strlen(msg), SIZE_MAX, DQ__ESC_UTF8);
    json_object_set_new(o, "error", json_string(esc));
    view_json(v, status, o);
}

/* The HTTP status of a refusal by the queue's scripts (enum dq_refusal),
 * read from its class, never its prose, as cli_exit_for reads it for the
 * CLI's exit code. A value of the request (an offer's due time past the
 * maximum, a cursor out of range) is the caller's to fix: 400, nothing
 * changed. The queue's state refusing the call for now: 409, as a stale
 * lease token. Data in Redis that breaks the rules: 500, not 502: Redis
 * answered well, with a clear refusal, and the fault is in the data this
 * service keeps, which a retry will not mend (a bad gateway would say
 * Redis misbehaved). Arguments that break the protocol: 502, as any other
 * error Redis gives: Redis holds the scripts of another version. */
static int refusal_status(enum dq_refusal class) {
    switch (class) {
        case DQ_REFUSAL_INPUT: return 400;
        case DQ_REFUSAL_STATE: return 409;
        case DQ_REFUSAL_CORRUPT: return 500;
        case DQ_REFUSAL_PROTO:
        case DQ_REFUSAL_NONE: break;
    }
    return 502;
}

/* The HTTP status of a library failure rc (class: the client's
 * dq_client_refusal), the one table of every answer serve makes of one:
 * bad input 400, Redis away or the server stopping 503, out of memory 500,
 * a key of the queue of another type 500 (the data's fault, as a corrupt
 * refusal), the shards disagreeing on their count 409 (as a state
 * refusal: a change is under way), a script's refusal by its class,
 * anything else Redis said 502. */
static int failure_status(int rc, enum dq_refusal class) {
    switch (rc) {
        case DQ_EINVAL:
        case DQ_ETOOBIG: return 400;
        case DQ_ECONNECT:
        case DQ_ETIMEDOUT:
        case DQ_ECLOSED: return 503;
        case DQ_ENOMEM:
        case DQ_EWRONGTYPE: return 500;
        case DQ_EBUSY: return 409;
        case DQ_EREDIS: return refusal_status(class);
        default: return 502;
    }
}

static void view_failure(cli_view *v, dq_client *c, int rc) {
    int status = failure_status(rc, dq_client_refusal(c));
    const char *msg = dq_client_errstr(c);
    cli_view_error(v, status, "%s", msg[0] ? msg : dq_strerror(rc));
}

void cli_view_json(cli_view *v, int status, json_t *body) { view_json(v, status, body); }

void cli_view_failure(cli_view *v, dq_client *c, int rc) { view_failure(v, c, rc); }

/* ------------------------------------------------------------ the queues shown */

/* Whether rc, from reading the registry, means Redis answered but the
 * registry cannot be read (a key of another type, a refusal): a problem to
 * report, while the queues named on the command line are still shown. */
static int registry_problem(int rc) {
    return rc == DQ_EWRONGTYPE || rc == DQ_EAUTH || rc == DQ_EREDIS || rc == DQ_EPROTO;
}

/* The registry's queues, those of the command line and those the client
 * has seen (dq_queues_seen), sorted, without repeats, into a new array (free with dq_queues_free). problem (size
 * bytes): "" or, when the registry could not be read though Redis
 * answered, why (the command line's queues are given then). */
static int shown_queues(const cli_serve_conf *conf, char ***out, size_t *n, char *problem, size_t size) {
    char **reg = NULL;
    size_t nreg = 0;
    problem[0] = '\0';
    int rc = dq_queues(conf->c, &reg, &nreg);
    if (rc && !registry_problem(rc)) return rc;
    if (rc)
        snprintf(problem, size,
                 "%s; only the queues named on the command line are shown (if the key was "
                 "overwritten, delete it: clients register their queues again as they offer)",
                 dq_client_errstr(conf->c));
    /* And those seen before whose keys vanished since (a restart without
     * persistence, an eviction): shown, with their loss, not dropped. */
    char **seen;
    size_t nseen;
    if ((rc = dq_queues_seen(conf->c, &seen, &nseen)) != 0) {
        dq_queues_free(reg, nreg);
        return rc;
    }
    char **all = calloc(nreg + (size_t)conf->nqueues + nseen + 1, sizeof *all);
    if (!all) {
        dq_queues_free(reg, nreg);
        dq_queues_free(seen, nseen);
        return DQ_ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < nreg; i++) all[k++] = reg[i];
    free(reg);
    for (size_t i = 0; i < (size_t)conf->nqueues + nseen; i++) {
        const char *name = i < (size_t)conf->nqueues ? conf->queues[i] : seen[i - (size_t)conf->nqueues];
        size_t j = 0;
        while (j < k && strcmp(all[j], name) != 0) j++;
        if (j == k && !(all[k++] = strdup(name))) {
            dq_queues_free(all, k - 1);
            dq_queues_free(seen, nseen);
            return DQ_ENOMEM;
        }
    }
    dq_queues_free(seen, nseen);
    *out = all;
    *n = k;
    return 0;
}

int cli_queue_known(const cli_serve_conf *conf, const char *queue, int *known) {
    char **names, problem[512];
    size_t n;
    *known = 0;
    int rc = shown_queues(conf, &names, &n, problem, sizeof problem);
    for (size_t i = 0; !rc && i < n; i++)
        if (strcmp(names[i], queue) == 0) *known = 1;
    if (!rc) dq_queues_free(names, n);
    return rc;
}

/* ------------------------------------------------------------ /metrics */

static double seconds(int64_t ms) { return (double)ms / 1000.0; }

typedef struct family {
    const char *name, *type, *help;
} family;

static void family_head(dq__buf *b, const family *f) {
    dq__buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, f->type);
}

/* The metrics of each shown queue; a queue whose read fails counts in
 * delayq_queue_read_errors and is left out of the rest. */
static void render_metrics(dq__buf *b, char **names, const dq_metrics *m, const int *okq, size_t n) {
    static const char *const states[4] = {"pending", "ready", "inflight", "dead"};
    static const family items = {"delayq_items", "gauge", "Items of a queue by state."};
    family_head(b, &items);
    for (size_t i = 0; i < n; i++) {
        if (!okq[i]) continue;
        const int64_t v[4] = {m[i].stats.pending, m[i].stats.ready, m[i].stats.in_flight,
                              m[i].stats.dead};
        for (int s = 0; s < 4; s++)
            dq__buf_printf(b, "delayq_items{queue=\"%s\",state=\"%s\"} %" PRId64 "\n", names[i],
                           states[s], v[s]);
    }
    static const family aside = {"delayq_set_aside", "gauge",
                                 "Entries set aside because they could not be decoded."};
    family_head(b, &aside);
    for (size_t i = 0; i < n; i++)
        if (okq[i])
            dq__buf_printf(b, "delayq_set_aside{queue=\"%s\"} %" PRId64 "\n", names[i],
                           m[i].stats.set_aside);

    static const family totals[6] = {
        {"delayq_offered_total", "counter", "Items accepted by offers."},
        {"delayq_delivered_total", "counter", "Items handed out by takes."},
        {"delayq_acked_total", "counter", "Leased deliveries acked."},
        {"delayq_nacked_total", "counter", "Leased deliveries nacked."},
        {"delayq_dead_total", "counter", "Items that became dead letters."},
        {"delayq_lease_expired_total", "counter", "Leases that ran out before an ack or nack."},
    };
    for (int t = 0; t < 6; t++) {
        family_head(b, &totals[t]);
        for (size_t i = 0; i < n; i++) {
            if (!okq[i]) continue;
            const int64_t v[6] = {m[i].offered, m[i].delivered, m[i].acked,
                                  m[i].nacked,  m[i].dead,      m[i].lease_expired};
            dq__buf_printf(b, "%s{queue=\"%s\"} %" PRId64 "\n", totals[t].name, names[i], v[t]);
        }
    }

    static const family lat = {"delayq_lateness_seconds", "histogram",
                               "Ready time minus due time of the items transfers moved."};
    family_head(b, &lat);
    for (size_t i = 0; i < n; i++) {
        if (!okq[i]) continue;
        int64_t cum = 0;
        for (int k = 0; k <= DQ_LATENESS_BUCKETS; k++) {
            cum += m[i].lateness[k];
            if (k < DQ_LATENESS_BUCKETS)
                dq__buf_printf(b, "delayq_lateness_seconds_bucket{queue=\"%s\",le=\"%g\"} %" PRId64 "\n",
                               names[i], seconds(dq_lateness_bounds_ms[k]), cum);
            else
                dq__buf_printf(b,
                               "delayq_lateness_seconds_bucket{queue=\"%s\",le=\"+Inf\"} %" PRId64 "\n",
                               names[i], cum);
        }
        dq__buf_printf(b, "delayq_lateness_seconds_sum{queue=\"%s\"} %.3f\n", names[i],
                       seconds(m[i].lateness_sum_ms));
        dq__buf_printf(b, "delayq_lateness_seconds_count{queue=\"%s\"} %" PRId64 "\n", names[i], cum);
    }

    static const family wiped = {
        "delayq_queue_wiped_total", "counter",
        "Times this process saw the queue's keys vanish (Redis restarted without "
        "persistence, evicted them or was flushed): its items and settings are gone."};
    family_head(b, &wiped);
    for (size_t i = 0; i < n; i++)
        if (okq[i])
            dq__buf_printf(b, "delayq_queue_wiped_total{queue=\"%s\"} %" PRIu64 "\n", names[i],
                           m[i].wiped);

    static const family age = {"delayq_oldest_ready_age_seconds", "gauge",
                               "How long the head of the ready list has waited (0 when empty)."};
    family_head(b, &age);
    for (size_t i = 0; i < n; i++)
        if (okq[i])
            dq__buf_printf(b, "delayq_oldest_ready_age_seconds{queue=\"%s\"} %.3f\n", names[i],
                           m[i].oldest_ready_age_ms > 0 ? seconds(m[i].oldest_ready_age_ms) : 0.0);
    static const family next = {"delayq_next_due_seconds", "gauge",
                                "Seconds until the next timed event (due time or lease end); "
                                "absent when none."};
    family_head(b, &next);
    for (size_t i = 0; i < n; i++)
        if (okq[i] && m[i].stats.next_due_in_ms >= 0)
            dq__buf_printf(b, "delayq_next_due_seconds{queue=\"%s\"} %.3f\n", names[i],
                           seconds(m[i].stats.next_due_in_ms));
    static const family sch = {"delayq_schedulers", "gauge",
                               "Processes scheduling the queue, by their heartbeats."};
    family_head(b, &sch);
    for (size_t i = 0; i < n; i++)
        if (okq[i])
            dq__buf_printf(b, "delayq_schedulers{queue=\"%s\"} %" PRId64 "\n", names[i],
                           m[i].stats.schedulers);
    static const family sched = {"delayq_schedules", "gauge",
                                 "Recurring schedules of a queue (active, paused or ended)."};
    family_head(b, &sched);
    for (size_t i = 0; i < n; i++)
        if (okq[i])
            dq__buf_printf(b, "delayq_schedules{queue=\"%s\"} %" PRId64 "\n", names[i], m[i].schedules);
    static const family over = {"delayq_overdue_seconds", "gauge",
                                "How long the earliest pending item or lease end has been past due "
                                "(0 when none): work waiting for a scheduler."};
    family_head(b, &over);
    for (size_t i = 0; i < n; i++)
        if (okq[i])
            dq__buf_printf(b, "delayq_overdue_seconds{queue=\"%s\"} %.3f\n", names[i],
                           seconds(m[i].stats.overdue_ms));
}

/* The doctor's findings at the start: one sample per check, its status a
 * label (Prometheus text). */
static void render_findings(dq__buf *b, const cli_serve_conf *conf) {
    if (!conf->nfindings) return;
    dq__buf_printf(b, "# HELP delayq_doctor_finding The checks of 'delayq doctor' at the start "
                      "(1 for the status found).\n# TYPE delayq_doctor_finding gauge\n");
    for (size_t i = 0; i < conf->nfindings; i++)
        dq__buf_printf(b, "delayq_doctor_finding{check=\"%s\",status=\"%s\"} 1\n",
                       conf->findings[i].check, dq_finding_status_name(conf->findings[i].status));
}

/* The unsafe findings, for the dashboard. */
static json_t *unsafe_json(const cli_serve_conf *conf) {
    json_t *list = json_array();
    for (size_t i = 0; i < conf->nfindings; i++)
        if (conf->findings[i].status == DQ_FINDING_UNSAFE)
            json_array_append_new(list, json_pack("{s:s, s:s}", "check", conf->findings[i].check,
                                                  "detail", conf->findings[i].detail));
    return list;
}

void cli_view_metrics(const cli_serve_conf *conf, cli_view *v) {
    dq__buf b = {0};
    char **names = NULL, problem[512];
    size_t n = 0;
    int up = shown_queues(conf, &names, &n, problem, sizeof problem) == 0;
    dq_metrics *m = up ? calloc(n ? n : 1, sizeof *m) : NULL;
    int *okq = up ? calloc(n ? n : 1, sizeof *okq) : NULL;
    int errors = 0;
    if (up && (!m || !okq || dq_get_metrics_many(conf->c, (const char *const *)names, n, m, okq) != 0))
        up = 0;
    for (size_t i = 0; up && i < n; i++) {
        okq[i] = okq[i] == 0; /* a status until here */
        errors += !okq[i];
    }
    dq__buf_printf(&b,
                   "# HELP delayq_up Whether Redis answered this scrape (1) or not (0).\n"
                   "# TYPE delayq_up gauge\ndelayq_up %d\n",
                   up);
    dq__buf_printf(&b,
                   "# HELP delayq_redis_writable Whether Redis takes writes (1) or refuses them, "
                   "as after a failed RDB save or AOF write (MISCONF), or did not answer (0).\n"
                   "# TYPE delayq_redis_writable gauge\ndelayq_redis_writable %d\n",
                   up && dq_redis_writable(conf->c, n ? names[0] : NULL) == 1);
    dq__buf_printf(&b,
                   "# HELP delayq_queue_read_errors Queues whose metrics could not be read.\n"
                   "# TYPE delayq_queue_read_errors gauge\ndelayq_queue_read_errors %d\n",
                   errors);
    dq__buf_printf(
        &b,
        "# HELP delayq_registry_errors Whether the queue registry (dq:queues) could not be read "
        "though Redis answered (1: a key of another type, or refused).\n"
        "# TYPE delayq_registry_errors gauge\ndelayq_registry_errors %d\n",
        up && problem[0] != '\0');
    if (up) render_metrics(&b, names, m, okq, n);
    render_findings(&b, conf);
    free(m);
    free(okq);
    dq_queues_free(names, n);
    v->status = b.data ? 200 : 500;
    v->type = "text/plain; version=0.0.4; charset=utf-8";
    v->body = b.data ? b.data : strdup("out of memory\n");
    v->len = b.data ? b.len : (v->body ? strlen(v->body) : 0);
}

/* ------------------------------------------------------------ /api/queues */

static json_t *queue_json(const char *name, const dq_metrics *m) {
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(name));
    json_object_set_new(o, "pending", json_integer(m->stats.pending));
    json_object_set_new(o, "ready", json_integer(m->stats.ready));
    json_object_set_new(o, "inflight", json_integer(m->stats.in_flight));
    json_object_set_new(o, "dead", json_integer(m->stats.dead));
    json_object_set_new(o, "set_aside", json_integer(m->stats.set_aside));
    json_object_set_new(o, "offered_total", json_integer(m->offered));
    json_object_set_new(o, "delivered_total", json_integer(m->delivered));
    json_object_set_new(o, "acked_total", json_integer(m->acked));
    json_object_set_new(o, "nacked_total", json_integer(m->nacked));
    json_object_set_new(o, "dead_total", json_integer(m->dead));
    json_object_set_new(o, "lease_expired_total", json_integer(m->lease_expired));
    json_object_set_new(o, "oldest_ready_age_seconds",
                        json_real(m->oldest_ready_age_ms > 0 ? seconds(m->oldest_ready_age_ms) : 0.0));
    json_object_set_new(o, "next_due_seconds",
                        m->stats.next_due_in_ms >= 0 ? json_real(seconds(m->stats.next_due_in_ms))
                                                     : json_null());
    /* The dashboard's banner: overdue work and no scheduler alive. */
    json_object_set_new(o, "schedulers", json_integer(m->stats.schedulers));
    json_object_set_new(o, "overdue_seconds", json_real(seconds(m->stats.overdue_ms)));
    return o;
}

void cli_view_queues(const cli_serve_conf *conf, cli_view *v) {
    char **names, problem[512];
    size_t n;
    json_t *body = json_object(), *list = json_array();
    int rc = shown_queues(conf, &names, &n, problem, sizeof problem);
    json_object_set_new(body, "redis_up", json_boolean(rc == 0));
    json_object_set_new(body, "unsafe", unsafe_json(conf));
    json_object_set_new(body, "registry_error",
                        rc == 0 && problem[0] ? json_string(problem) : json_null());
    if (rc) {
        const char *msg = dq_client_errstr(conf->c);
        json_object_set_new(body, "error", json_string(msg[0] ? msg : dq_strerror(rc)));
        json_object_set_new(body, "queues", list);
        view_json(v, 200, body);
        return;
    }
    dq_metrics *m = calloc(n ? n : 1, sizeof *m);
    int *status = calloc(n ? n : 1, sizeof *status);
    rc = !m || !status ? DQ_ENOMEM
                       : dq_get_metrics_many(conf->c, (const char *const *)names, n, m, status);
    if (rc) {
        free(m), free(status), json_decref(list), json_decref(body), dq_queues_free(names, n);
        view_failure(v, conf->c, rc);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (status[i] == 0) {
            json_array_append_new(list, queue_json(names[i], &m[i]));
            continue;
        }
        /* Rare: ask again alone, for this queue's own message. */
        dq_metrics one;
        int again = dq_get_metrics(conf->c, names[i], &one);
        json_t *o = again == 0 ? queue_json(names[i], &one) : json_object();
        if (again) {
            json_object_set_new(o, "name", json_string(names[i]));
            json_object_set_new(o, "error", json_string(dq_client_errstr(conf->c)));
        }
        json_array_append_new(list, o);
    }
    free(m);
    free(status);
    dq_queues_free(names, n);
    json_object_set_new(body, "queues", list);
    view_json(v, 200, body);
}

void cli_view_queue(const cli_serve_conf *conf, const char *queue, cli_view *v) {
    dq_metrics m;
    int rc = dq_get_metrics(conf->c, queue, &m);
    if (rc) {
        view_failure(v, conf->c, rc);
        return;
    }
    json_t *o = queue_json(queue, &m), *lat = json_object(), *buckets = json_array();
    int64_t cum = 0;
    for (int k = 0; k <= DQ_LATENESS_BUCKETS; k++) {
        cum += m.lateness[k];
        json_t *bk = json_object();
        json_object_set_new(bk, "le",
                            k < DQ_LATENESS_BUCKETS ? json_real(seconds(dq_lateness_bounds_ms[k]))
                                                    : json_string("+Inf"));
        json_object_set_new(bk, "count", json_integer(cum));
        json_array_append_new(buckets, bk);
    }
    json_object_set_new(lat, "buckets", buckets);
    json_object_set_new(lat, "sum", json_real(seconds(m.lateness_sum_ms)));
    json_object_set_new(lat, "count", json_integer(cum));
    json_object_set_new(o, "lateness", lat);
    view_json(v, 200, o);
}

/* ------------------------------------------------------------ consumers */

/* GET /api/queues/{q}/consumers: {"consumers": [...]}, each as 'delayq
 * consumers --json' prints it (cli_consumer_json). */
void cli_view_consumers(const cli_serve_conf *conf, const char *queue, cli_view *v) {
    dq_consumer_info *list;
    size_t n;
    int rc = dq_consumers(conf->c, queue, &list, &n);
    if (rc) {
        view_failure(v, conf->c, rc);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(arr, cli_consumer_json(queue, &list[i]));
    free(list);
    view_json(v, 200, json_pack("{s:o}", "consumers", arr));
}

/* ------------------------------------------------------------ items */

/* A page of items shows at most PAGE_PAYLOAD_MAX bytes of payload in all:
 * each payload is cut to PAGE_PAYLOAD_MAX / limit bytes (1 MiB, the
 * default largest payload, for one item a page; 20 KiB for 50; 1 KiB for
 * a thousand), so a page's answer stays a few MB (each byte shows as text
 * and in base64) whatever the payloads hold. The single-item look-up shows
 * one payload up to the same bound. */
#define PAGE_PAYLOAD_MAX ((size_t)1 << 20)

/* How many of the len bytes of p to show: all, or if the payload was cut
 * and is text but for a character the cut split, up to that character, so
 * that a cut text still shows as text. */
static size_t shown_length(const unsigned char *p, size_t len, int cut) {
    if (!cut || len == 0) return len;
    size_t lead = len - 1, back = 0;
    while (lead > 0 && back < 3 && (p[lead] & 0xC0) == 0x80) lead--, back++;
    size_t need = p[lead] >= 0xF0 ? 4 : p[lead] >= 0xE0 ? 3 : p[lead] >= 0xC0 ? 2 : 1;
    size_t k = len - lead < need ? lead : len;
    return dq__utf8_valid(p, k) ? k : len;
}

/* The JSON of an item whose payload the list cut: then "payload_truncated"
 * is true and "payload_bytes" the whole size. */
static json_t *listed_json(const dq_listed *it) {
    dq_listed shown = *it;
    int cut = it->payload_full_len > it->payload_len;
    shown.payload_len = shown_length(it->payload, it->payload_len, cut);
    json_t *o = cli_json_listed(&shown);
    if (o && (json_object_set_new(o, "payload_truncated", json_boolean(cut)) ||
              json_object_set_new(o, "payload_bytes", json_integer((json_int_t)it->payload_full_len)))) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

void cli_view_items(const cli_serve_conf *conf, const char *queue, int state, const char *cursor,
                    size_t limit, cli_view *v) {
    dq_listed *items;
    size_t n;
    char next[DQ_CURSOR_MAX + 1];
    int rc =
        dq_list_cut(conf->c, queue, state, cursor, limit, PAGE_PAYLOAD_MAX / limit, &items, &n, next);
    if (rc) {
        view_failure(v, conf->c, rc);
        return;
    }
    json_t *list = json_array(), *body = json_object();
    for (size_t i = 0; i < n; i++) {
        /* Each payload is freed once its cut is in the JSON. */
        json_array_append_new(list, listed_json(&items[i]));
        free(items[i].payload);
        items[i].payload = NULL;
    }
    dq_listed_free(items, n);
    json_object_set_new(body, "items", list);
    json_object_set_new(body, "next_cursor", next[0] ? json_string(next) : json_null());
    view_json(v, 200, body);
}

void cli_view_item(const cli_serve_conf *conf, const char *queue, const char *id, cli_view *v) {
    dq_listed *it;
    int rc = dq_lookup_item(conf->c, queue, id, PAGE_PAYLOAD_MAX, &it);
    if (rc) {
        view_failure(v, conf->c, rc);
        return;
    }
    if (it->state == DQ_STATE_UNKNOWN) {
        cli_view_error(v, 404, "no such item");
    } else if (!it->payload) { /* not read: the look-up's answer without it */
        dq_item_info info = {.state = it->state,
                             .due_ms = it->state == DQ_STATE_IN_FLIGHT ? it->lease_end_ms : it->due_ms,
                             .attempts = it->attempts};
        memcpy(info.holder, it->holder, sizeof info.holder);
        view_json(v, 200, cli_json_lookup(id, &info));
    } else {
        view_json(v, 200, listed_json(it));
    }
    dq_listed_free(it, 1);
}

void cli_view_schedules(const cli_serve_conf *conf, const char *queue, cli_view *v) {
    dq_recurring *list;
    size_t n;
    int rc = dq_recurring_list(conf->c, queue, &list, &n);
    if (rc < 0) {
        view_failure(v, conf->c, rc);
        return;
    }
    json_t *o = json_object(), *arr = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(arr, cli_json_schedule(&list[i]));
    dq_recurring_list_free(list, n);
    json_object_set_new(o, "queue", json_string(queue));
    json_object_set_new(o, "schedules", arr);
    view_json(v, 200, o);
}

/* ------------------------------------------------------------ changes */

static void view_count(cli_view *v, const char *key, int64_t n) {
    json_t *o = json_object();
    json_object_set_new(o, key, json_integer(n));
    view_json(v, 200, o);
}

void cli_view_redrive(const cli_serve_conf *conf, const char *queue, const char *id, cli_view *v) {
    int64_t n = dq_dead_redrive(conf->c, queue, id);
    if (n < 0) view_failure(v, conf->c, (int)n);
    else if (id && n == 0) cli_view_error(v, 404, "no such dead letter");
    else view_count(v, "redriven", n);
}

void cli_view_purge(const cli_serve_conf *conf, const char *queue, cli_view *v) {
    int64_t n = dq_dead_purge(conf->c, queue);
    if (n < 0) view_failure(v, conf->c, (int)n);
    else view_count(v, "purged", n);
}

void cli_view_cancel(const cli_serve_conf *conf, const char *queue, const char *id, cli_view *v) {
    int rc = dq_cancel(conf->c, queue, id);
    if (rc < 0) {
        view_failure(v, conf->c, rc);
    } else if (rc == 0) {
        cli_view_error(v, 409, "not pending: only a pending item can be cancelled");
    } else {
        json_t *o = json_object();
        json_object_set_new(o, "cancelled", json_true());
        view_json(v, 200, o);
    }
}
