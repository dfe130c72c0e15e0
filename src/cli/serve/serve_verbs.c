/*
 * serve_verbs.c - the bodies of the HTTP API's work verbs: offer, take,
 * ack, nack, extend and release (JSON in), checked in full before anything changes,
 * and their answers (JSON out).
 *
 * Owns the rules of those bodies: known fields only, each of its type and
 * range, so that a bad request answers 400 {"error": ...} and changes
 * nothing. Offer, ack, nack, extend and release then run on the server thread's
 * client, as cancel does; a take's arguments go to the work thread
 * (serve_work.c), which waits without holding this thread.
 */
#include <jansson.h>
#include <stdarg.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/serve/serve.h"
#include "util.h"

#define OFFER_MANY_MAX 1000
#define TAKE_COUNT_MAX 64
#define TAKE_WAIT_MAX_MS 60000
#define ERROR_TEXT_MAX 1000

/* ------------------------------------------------------------ checking */

/* The body as a JSON value of the wanted type (object, or also an array
 * when arrays is 1); NULL after filling v with 400. An empty body is {}. */
static json_t *parse_body(const char *body, size_t len, int arrays, cli_view *v) {
    json_error_t e;
    json_t *j = len ? json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &e) : json_object();
    if (!j) {
        cli_view_error(v, 400, "bad JSON: %s (at byte %d)", e.text, e.position);
        return NULL;
    }
    if (!json_is_object(j) && !(arrays && json_is_array(j))) {
        json_decref(j);
        cli_view_error(v, 400,
                       arrays ? "expected a JSON object or an array of them" : "expected a JSON object");
        return NULL;
    }
    return j;
}

/* What is wrong with a body, for its 400. */
typedef struct problem {
    char text[256];
} problem;

static int wrong(problem *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int wrong(problem *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->text, sizeof p->text, fmt, ap);
    va_end(ap);
    return -1;
}

/* 0 if every key of o is one of allowed (NULL-terminated). */
static int known_fields(json_t *o, const char *const *allowed, problem *p) {
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val) {
        int ok = 0;
        for (const char *const *a = allowed; *a && !ok; a++) ok = strcmp(key, *a) == 0;
        if (!ok) return wrong(p, "unknown field %s", cli_quote(key));
    }
    return 0;
}

/* o[key] as an integer from lo to hi into *out (left as it is when the
 * field is absent). */
static int int_field(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, problem *p) {
    json_t *j = json_object_get(o, key);
    if (!j) return 0;
    if (!json_is_integer(j) || json_integer_value(j) < lo || json_integer_value(j) > hi)
        return wrong(p, "%s: expected an integer from %lld to %lld", key, (long long)lo, (long long)hi);
    *out = (int64_t)json_integer_value(j);
    return 0;
}

/* o[key] as a string without NUL bytes (NULL when absent). */
static int string_field(json_t *o, const char *key, const char **out, problem *p) {
    json_t *j = json_object_get(o, key);
    *out = NULL;
    if (!j) return 0;
    if (!json_is_string(j) || strlen(json_string_value(j)) != json_string_length(j))
        return wrong(p, "%s: expected a string without NUL characters", key);
    *out = json_string_value(j);
    return 0;
}

/* ------------------------------------------------------------ offer */

/* One offered item, checked into *it; a payload_base64 decodes into
 * *decoded (the caller frees it, even on failure). */
static int offer_item(json_t *o, dq_item *it, void **decoded, problem *p) {
    static const char *const fields[] = {"payload", "payload_base64", "delay_ms", "due_ms", "id", "nx",
                                         NULL};
    const char *b64, *id;
    json_t *payload = json_object_get(o, "payload"), *nx = json_object_get(o, "nx");

    memset(it, 0, sizeof *it);
    if (!json_is_object(o)) return wrong(p, "expected a JSON object");
    if (known_fields(o, fields, p) || string_field(o, "payload_base64", &b64, p) ||
        string_field(o, "id", &id, p) || int_field(o, "delay_ms", 0, DQ_DUE_MAX_MS, &it->delay_ms, p) ||
        int_field(o, "due_ms", 0, DQ_DUE_MAX_MS, &it->due_ms, p))
        return -1;
    if (payload && !json_is_string(payload))
        return wrong(p, "payload: expected a string (payload_base64 for bytes)");
    if (payload && b64) return wrong(p, "give payload or payload_base64, not both");
    if (json_object_get(o, "delay_ms") && json_object_get(o, "due_ms"))
        return wrong(p, "give delay_ms or due_ms, not both");
    if (nx && !json_is_boolean(nx)) return wrong(p, "nx: expected true or false");
    if (id && !dq__id_valid(id)) return wrong(p, "id: expected 1 to 128 printable ASCII characters");
    if (payload) {
        it->payload = json_string_value(payload); /* may hold NUL: JSON_ALLOW_NUL */
        it->payload_len = json_string_length(payload);
    } else if (b64) {
        size_t blen = strlen(b64), max = blen / 4 * 3 + 3, got = 0;
        if (!(*decoded = malloc(max))) return wrong(p, "out of memory");
        if (sodium_base642bin(*decoded, max, b64, blen, NULL, &got, NULL,
                              sodium_base64_VARIANT_ORIGINAL))
            return wrong(p, "payload_base64: expected standard base64");
        it->payload = *decoded;
        it->payload_len = got;
    }
    if (it->payload_len > DQ_PAYLOAD_DEFAULT_MAX)
        return wrong(p, "payload: %zu bytes, more than the %u allowed", it->payload_len,
                     DQ_PAYLOAD_DEFAULT_MAX);
    it->id = id;
    it->flags = json_is_true(nx) ? DQ_OFFER_KEEP : 0;
    return 0;
}

void cli_view_offer(const cli_serve_conf *conf, const char *queue, const char *body, size_t len,
                    cli_view *v) {
    json_t *j = parse_body(body, len, 1, v);
    if (!j) return;
    int many = json_is_array(j);
    size_t n = many ? json_array_size(j) : 1;
    if (many && (n < 1 || n > OFFER_MANY_MAX)) {
        cli_view_error(v, 400, "expected 1 to %d items, not %zu", OFFER_MANY_MAX, n);
        json_decref(j);
        return;
    }
    dq_item *items = calloc(n, sizeof *items);
    void **decoded = calloc(n, sizeof *decoded);
    dq_offer_result *res = calloc(n, sizeof *res);
    size_t ok = 0;
    problem p;
    if (!items || !decoded || !res) cli_view_error(v, 500, "out of memory");
    for (; items && decoded && res && ok < n; ok++) {
        if (offer_item(many ? json_array_get(j, ok) : j, &items[ok], &decoded[ok], &p)) {
            if (many) cli_view_error(v, 400, "item %zu: %s", ok, p.text);
            else cli_view_error(v, 400, "%s", p.text);
            break;
        }
    }
    if (ok == n) {
        int rc =
            many ? dq_offer_many(conf->c, queue, items, n, res) : dq_offer(conf->c, queue, items, res);
        if (rc < 0 || (many && (size_t)rc != n)) {
            cli_view_failure(v, conf->c, rc < 0 ? rc : DQ_EREDIS);
        } else if (many) {
            json_t *ids = json_array(), *o = json_object();
            for (size_t i = 0; i < n; i++) json_array_append_new(ids, json_string(res[i].id));
            json_object_set_new(o, "ids", ids);
            cli_view_json(v, 200, o);
        } else {
            cli_view_json(v, 200, json_pack("{s:s}", "id", res[0].id));
        }
    }
    for (size_t i = 0; decoded && i < n; i++) free(decoded[i]);
    free(items), free(decoded), free(res);
    json_decref(j);
}

/* ------------------------------------------------------------ take */

int cli_take_parse(const char *body, size_t len, cli_take_args *a, cli_view *v) {
    static const char *const fields[] = {"count", "wait_ms", "lease_ms", NULL};
    int64_t count = 1;
    problem p;
    json_t *j = parse_body(body, len, 0, v);
    if (!j) return -1;
    a->wait_ms = 0;
    a->lease_ms = 0;
    int rc = known_fields(j, fields, &p) || int_field(j, "count", 1, TAKE_COUNT_MAX, &count, &p) ||
             int_field(j, "wait_ms", 0, TAKE_WAIT_MAX_MS, &a->wait_ms, &p) ||
             int_field(j, "lease_ms", 1, DQ_DUE_MAX_MS, &a->lease_ms, &p);
    a->count = (size_t)count;
    json_decref(j);
    if (rc) cli_view_error(v, 400, "%s", p.text);
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------ ack, nack, extend, release */

void cli_view_lease(const cli_serve_conf *conf, cli_endpoint ep, const char *queue, const char *id,
                    const char *body, size_t len, cli_view *v) {
    static const char *const ack_fields[] = {"token", NULL},
                             *const nack_fields[] = {"token", "delay_ms", "error", NULL},
                             *const extend_fields[] = {"token", "lease_ms", NULL},
                             *const release_fields[] = {"token", "delay_ms", NULL};
    const char *token, *error;
    int64_t delay = -1, lease = -1;
    problem p;
    json_t *j = parse_body(body, len, 0, v);
    if (!j) return;
    const char *const *fields = ep == CLI_EP_ACK       ? ack_fields
                                : ep == CLI_EP_NACK    ? nack_fields
                                : ep == CLI_EP_RELEASE ? release_fields
                                                       : extend_fields;
    if (known_fields(j, fields, &p) || string_field(j, "token", &token, &p) ||
        string_field(j, "error", &error, &p) || int_field(j, "delay_ms", 0, DQ_DUE_MAX_MS, &delay, &p) ||
        int_field(j, "lease_ms", 1, DQ_DUE_MAX_MS, &lease, &p))
        ;
    else if (!token || !cli_token_valid(token))
        wrong(&p, "token: expected the lease token a take gave (1 to 64 printable ASCII characters)");
    else if (ep == CLI_EP_EXTEND && lease < 0) wrong(&p, "lease_ms: needed, an integer of 1 or more");
    else if (error && strlen(error) > ERROR_TEXT_MAX)
        wrong(&p, "error: more than %d bytes", ERROR_TEXT_MAX);
    else p.text[0] = '\0';
    if (p.text[0]) {
        cli_view_error(v, 400, "%s", p.text);
        goto done;
    }
    int rc = ep == CLI_EP_ACK       ? dq_ack(conf->c, queue, id, token)
             : ep == CLI_EP_NACK    ? dq_nack(conf->c, queue, id, token, delay, error)
             : ep == CLI_EP_RELEASE ? dq_release(conf->c, queue, id, token, delay)
                                    : dq_extend(conf->c, queue, id, token, lease);
    if (rc < 0) cli_view_failure(v, conf->c, rc);
    else if (rc == 0)
        cli_view_error(v, 409,
                       "stale: the id is not in flight under this token (its lease ended, or it was "
                       "acked, or there is no such id)");
    else if (ep == CLI_EP_NACK) cli_view_json(v, 200, json_pack("{s:b}", "dead", rc == 2));
    else
        cli_view_json(v, 200,
                      json_pack("{s:b}",
                                ep == CLI_EP_ACK       ? "acked"
                                : ep == CLI_EP_RELEASE ? "released"
                                                       : "extended",
                                1));
done:
    json_decref(j);
}
