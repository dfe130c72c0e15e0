/*
 * output.c - everything the CLI writes: records on stdout (text or JSON),
 * one-line errors on stderr, and how outside bytes are shown in either.
 *
 * Owns the formats: a taken message as its raw payload plus "\n", or as one
 * JSON object per line ("queue", "id" or "id_base64", "payload" or
 * "payload_base64", "due_ms", "ready_ms"; serve's take answers are the same
 * objects without "queue": cli_msg_json), a leased delivery as
 * "ID<TAB>TOKEN<TAB>PAYLOAD" or the same JSON plus "attempt" and "token"; a
 * queue's stats and settings as "name value" lines or one JSON object; a
 * dead letter as one tab-separated line or one JSON object. Every JSON text
 * is built by jansson, so it is valid whatever bytes ids and payloads hold:
 * bytes that are not valid UTF-8 go out as the field's "_base64" twin. In
 * text, an id that breaks the id rules (bytes read back from Redis may) and
 * every reason and error are escaped (dq__escape), so a record stays on one
 * line. Each record is built whole and flushed at once, so a reader never
 * sees half a message, and a failed write (the reader went away, a full
 * disk) becomes an error instead of a silent loss: cli_out_close() checks
 * stdout once more at the end of every run.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli/cli.h"
#include "util.h"

/* ------------------------------------------------------------ stderr */

static int out_closed;  /* stdout was closed by cli_out_close */
static int out_missing; /* stdout was closed when the process started */

void cli_std_fds_hold(void) {
    /* A descriptor 0, 1 or 2 left closed by whoever started us would be the
     * next one opened: a socket to Redis there would take an error line
     * meant for stderr as commands. /dev/null holds each: stdout's is read
     * only, so writes to it fail as they did (EBADF) and cli_out_usable can
     * tell; stderr's takes the lines its closer did not want. */
    static const int modes[3] = {O_RDONLY, O_RDONLY, O_WRONLY};
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        int got = open("/dev/null", modes[fd]);
        if (got >= 0 && got != fd) { /* a lower one was closed too: it took that */
            dup2(got, fd);
            close(got);
        }
        if (fd == 1) out_missing = 1;
    }
}

int cli_out_usable(const char *what) {
    if (!out_missing) return 0;
    cli_err("%s: stdout is closed: nothing taken could be printed (give it a file or a pipe)", what);
    return CLI_USAGE;
}

/* A message's own text is ours, but it may quote what the library read
 * from Redis: anything that is no printable ASCII still becomes \xHH. The
 * line goes out in one write (stderr is unbuffered): lines of processes
 * sharing a stderr, a work command's children say, never interleave. */
void cli_err(const char *fmt, ...) {
    static const char hex[] = "0123456789abcdef";
    va_list ap;
    char *msg;

    va_start(ap, fmt);
    int n = vasprintf(&msg, fmt, ap);
    va_end(ap);
    if (!out_closed) fflush(stdout); /* what was printed before comes first */
    if (n < 0) { /* out of memory: msg is not set */
        fprintf(stderr, "delayq: %s\n", fmt);
        return;
    }
    char *line = malloc(4 * (size_t)n + 16);
    if (!line) {
        fprintf(stderr, "delayq: %s\n", msg);
        free(msg);
        return;
    }
    memcpy(line, "delayq: ", 8);
    size_t len = 8;
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        if (*p >= 0x20 && *p < 0x7f) {
            line[len++] = (char)*p;
        } else {
            line[len++] = '\\', line[len++] = 'x';
            line[len++] = hex[*p >> 4], line[len++] = hex[*p & 0xF];
        }
    }
    line[len++] = '\n';
    fwrite(line, 1, len, stderr);
    free(line);
    free(msg);
}

/* Quotes kept at once: enough for the messages with the most of them. */
#define QUOTE_SLOTS 4
#define QUOTE_SIZE (4 * CLI_QUOTE_MAX + 4)

/* 1 if the len bytes at text may hold a URL's secrets. */
static int may_hold_secret(const char *text, size_t len) {
    static const char word[] = "password";
    if (memchr(text, '@', len) || memmem(text, len, "://", 3)) return 1;
    for (size_t i = 0; i + sizeof word - 1 <= len; i++)
        if (strncasecmp(text + i, word, sizeof word - 1) == 0) return 1;
    return 0;
}

const char *cli_quote_n(const void *text, size_t len) {
    static char slots[QUOTE_SLOTS][QUOTE_SIZE];
    static unsigned next;
    char *out = slots[next++ % QUOTE_SLOTS];
    /* The masking reads all of text (its last '@' may be far in), but only
     * the first CLI_QUOTE_MAX bytes of what it writes are shown. */
    char masked[CLI_QUOTE_MAX + 4];

    if (may_hold_secret(text, len)) {
        len = dq__url_redact(text, len, masked, sizeof masked);
        text = masked;
    }
    dq__escape(out, QUOTE_SIZE, text, len, CLI_QUOTE_MAX, 0);
    return out;
}

const char *cli_quote(const char *text) { return cli_quote_n(text, strlen(text)); }

/* ------------------------------------------------------------ stdout */

static int out_failed; /* a failed write was reported already */

static int out_error(void) {
    if (!out_failed) cli_err("cannot write to stdout: %s", strerror(errno));
    out_failed = 1;
    return CLI_FAIL;
}

int cli_write_out(const void *data, size_t len) {
    if (out_failed) return CLI_FAIL;
    if ((len && fwrite(data, 1, len, stdout) != len) || fflush(stdout) != 0) return out_error();
    return 0;
}

int cli_help(const char *text) { return cli_write_out(text, strlen(text)) ? CLI_FAIL : CLI_OK; }

int cli_out_close(void) {
    errno = 0;
    int bad = fflush(stdout) != 0 || ferror(stdout);
    /* Closing is where a file system may report what it could not store. */
    if (fclose(stdout) != 0) bad = 1;
    out_closed = 1;
    if (!bad) return 0;
    if (!errno) errno = EIO;
    return out_error();
}

int cli_write_json(json_t *v, const char *what) {
    char *text = v ? json_dumps(v, JSON_COMPACT) : NULL;
    int rc;

    json_decref(v);
    if (!text) {
        cli_err("cannot print %s: out of memory", what);
        return CLI_FAIL;
    }
    size_t len = strlen(text);
    text[len] = '\n'; /* over the NUL: json_dumps's buffer holds len + 1 */
    rc = cli_write_out(text, len + 1);
    free(text);
    return rc;
}

/* Writes what b holds, built with result built (0, or DQ_ENOMEM while
 * building it), and releases b. Returns 0 or CLI_FAIL after saying why. */
static int write_text(dq__buf *b, int built, const char *what) {
    int rc = built;

    if (rc) cli_err("cannot print %s: out of memory", what);
    else rc = cli_write_out(b->data, b->len);
    dq__buf_release(b);
    return rc ? CLI_FAIL : 0;
}

/* Sets obj[key] to the len bytes at data as a string when they are valid
 * UTF-8, else obj[key + "_base64"] to their standard base64. Returns 0 or
 * -1 when out of memory. */
static int json_bytes(json_t *obj, const char *key, const void *data, size_t len) {
    char name[64];

    if (dq__utf8_valid(data, len))
        return json_object_set_new(obj, key, json_stringn(len ? data : "", len));
    char *b64 = dq__base64_encode(data, len);
    if (!b64) return -1;
    snprintf(name, sizeof name, "%s_base64", key);
    int rc = json_object_set_new(obj, name, json_string(b64));
    free(b64);
    return rc;
}

/* Sets obj[key] to text, a consumer's or the library's words: as it is
 * when it is valid UTF-8, else escaped (dq__escape). */
static int json_words(json_t *obj, const char *key, const char *text) {
    size_t len = strlen(text);

    if (dq__utf8_valid(text, len)) return json_object_set_new(obj, key, json_stringn(text, len));
    char *esc = malloc(4 * len + 1);
    if (!esc) return -1;
    dq__escape(esc, 4 * len + 1, text, len, SIZE_MAX, DQ__ESC_UTF8);
    int rc = json_object_set_new(obj, key, json_string(esc));
    free(esc);
    return rc;
}

static int json_int(json_t *obj, const char *key, int64_t v) {
    return json_object_set_new(obj, key, json_integer((json_int_t)v));
}

/* ------------------------------------------------------------ text fields */

/* Appends the escaped form of len bytes (flags as dq__escape's). */
static int text_escaped(dq__buf *b, const void *data, size_t len, unsigned flags) {
    char *esc = malloc(4 * len + 1);

    if (!esc) return DQ_ENOMEM;
    size_t n = dq__escape(esc, 4 * len + 1, data, len, SIZE_MAX, flags);
    int rc = dq__buf_append(b, esc, n);
    free(esc);
    return rc;
}

/* Appends an id: as it is when it keeps the id rules (so it can be given
 * back to ack, nack or redrive), else escaped. */
static int text_id(dq__buf *b, const char *id, size_t len) {
    if (strlen(id) == len && dq__id_valid(id)) return dq__buf_append(b, id, len);
    return text_escaped(b, id, len, 0);
}

/* ------------------------------------------------------------ messages */

/* Text form of a message: the payload as it is, then a newline; a leased
 * delivery's is preceded by "ID<TAB>TOKEN<TAB>". */
static int text_msg(dq__buf *b, const dq_msg *msg) {
    if (msg->token && (text_id(b, msg->id, msg->id_len) || dq__buf_append(b, "\t", 1) ||
                       text_escaped(b, msg->token, strlen(msg->token), 0) || dq__buf_append(b, "\t", 1)))
        return DQ_ENOMEM;
    if (dq__buf_append(b, msg->payload, msg->payload_len) || dq__buf_append(b, "\n", 1))
        return DQ_ENOMEM;
    return 0;
}

json_t *cli_msg_json(const dq_msg *msg, int with_queue) {
    json_t *o = json_object();

    if (!o || (with_queue && json_object_set_new(o, "queue", json_string(msg->queue))) ||
        json_bytes(o, "id", msg->id, msg->id_len) ||
        json_bytes(o, "payload", msg->payload, msg->payload_len) || json_int(o, "due_ms", msg->due_ms) ||
        json_int(o, "ready_ms", msg->ready_ms) ||
        (msg->token && (json_int(o, "attempt", msg->attempt) ||
                        json_bytes(o, "token", msg->token, strlen(msg->token))))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int cli_json_line(dq__buf *b, json_t *v) {
    char *text = v ? json_dumps(v, JSON_COMPACT) : NULL;

    json_decref(v);
    if (!text) return -1;
    int rc = dq__buf_append(b, text, strlen(text)) || dq__buf_append(b, "\n", 1);
    free(text);
    return rc ? -1 : 0;
}

int cli_print_msgs(dq_msg *const *msgs, size_t n, int json) {
    dq__buf b = {0};
    int rc = 0;

    for (size_t i = 0; i < n && !rc; i++)
        rc = json ? cli_json_line(&b, cli_msg_json(msgs[i], 1)) : text_msg(&b, msgs[i]);
    if (rc) cli_err("cannot print a message: out of memory");
    else rc = cli_write_out(b.data, b.len);
    dq__buf_release(&b);
    return rc ? CLI_FAIL : 0;
}

/* ------------------------------------------------------------ stats, settings */

int cli_print_stats(const dq_stats *st, int json) {
    char line[512];
    int n;

    if (json) {
        json_t *o = json_object();
        if (o && (json_int(o, "pending", st->pending) || json_int(o, "ready", st->ready) ||
                  json_int(o, "next_due_in_ms", st->next_due_in_ms) ||
                  json_int(o, "set_aside", st->set_aside) || json_int(o, "inflight", st->in_flight) ||
                  json_int(o, "dead", st->dead) || json_int(o, "schedulers", st->schedulers) ||
                  json_int(o, "overdue_ms", st->overdue_ms))) {
            json_decref(o);
            o = NULL;
        }
        return cli_write_json(o, "stats");
    }
    n = snprintf(line, sizeof line,
                 "pending %" PRId64 "\nready %" PRId64 "\nnext_due_in_ms %" PRId64 "\ninflight %" PRId64
                 "\ndead %" PRId64 "\n",
                 st->pending, st->ready, st->next_due_in_ms, st->in_flight, st->dead);
    if (st->set_aside > 0)
        n += snprintf(line + n, sizeof line - (size_t)n, "set_aside %" PRId64 "\n", st->set_aside);
    n += snprintf(line + n, sizeof line - (size_t)n, "schedulers %" PRId64 "\noverdue_ms %" PRId64 "\n",
                  st->schedulers, st->overdue_ms);
    return cli_write_out(line, (size_t)n);
}

int cli_print_settings(const dq_queue_config *q, int json) {
    char line[512];

    if (json) {
        json_t *o = json_object();
        if (o &&
            (json_int(o, "lease_ms", q->lease_ms) || json_int(o, "max_attempts", q->max_attempts) ||
             json_int(o, "backoff_base_ms", q->backoff_base_ms) ||
             json_int(o, "backoff_max_ms", q->backoff_max_ms) || json_int(o, "shards", q->shards))) {
            json_decref(o);
            o = NULL;
        }
        return cli_write_json(o, "the settings");
    }
    int n = snprintf(line, sizeof line,
                     "lease_ms %" PRId64 "\nmax_attempts %" PRId64 "\nbackoff_base_ms %" PRId64
                     "\nbackoff_max_ms %" PRId64 "\nshards %" PRId64 "\n",
                     q->lease_ms, q->max_attempts, q->backoff_base_ms, q->backoff_max_ms, q->shards);
    return cli_write_out(line, (size_t)n);
}

/* ------------------------------------------------------------ dead letters */

/* Appends a payload as the last field of a text line: as it is when it is
 * valid UTF-8 without control bytes (tab, newline, NUL, ...) and does not
 * itself start with "base64:", else "base64:" and its standard base64. */
static int text_payload(dq__buf *b, const void *payload, size_t len) {
    const unsigned char *p = payload;
    int raw = dq__utf8_valid(payload, len) && !(len >= 7 && memcmp(p, "base64:", 7) == 0);

    for (size_t i = 0; raw && i < len; i++) raw = p[i] >= 0x20 && p[i] != 0x7f;
    if (raw) return dq__buf_append(b, payload, len);
    char *b64 = dq__base64_encode(payload, len);
    if (!b64) return DQ_ENOMEM;
    int rc = dq__buf_printf(b, "base64:%s", b64);
    free(b64);
    return rc;
}

/* The key id of a payload still sealed (the client holds no key that opens
 * it: dq_dead_list and dq_list open the others), in hex; "" if not sealed. */
static const char *sealed_with(const void *payload, size_t len, char hex[DQ__KEY_ID_LEN * 2 + 1]) {
    unsigned char kid[DQ__KEY_ID_LEN];

    hex[0] = '\0';
    if (dq__sealed(payload, len, kid)) dq__key_id_hex(kid, hex);
    return hex;
}

static int text_dead(dq__buf *b, const dq_dead_letter *d) {
    char kid[DQ__KEY_ID_LEN * 2 + 1];

    if (text_id(b, d->id, strlen(d->id)) || dq__buf_printf(b, "\t%d\t", d->attempts) ||
        text_escaped(b, d->reason, strlen(d->reason), DQ__ESC_UTF8) || dq__buf_append(b, "\t", 1) ||
        text_escaped(b, d->error, strlen(d->error), DQ__ESC_UTF8) || dq__buf_append(b, "\t", 1) ||
        (sealed_with(d->payload, d->payload_len, kid)[0] ? dq__buf_printf(b, "<sealed with key %s>", kid)
                                                         : text_payload(b, d->payload, d->payload_len)))
        return DQ_ENOMEM;
    return dq__buf_append(b, "\n", 1);
}

static json_t *json_dead(const dq_dead_letter *d) {
    json_t *o = json_object();

    if (!o || json_bytes(o, "id", d->id, strlen(d->id)) || json_int(o, "died_ms", d->died_ms) ||
        json_int(o, "attempts", d->attempts) || json_int(o, "due_ms", d->due_ms) ||
        json_words(o, "reason", d->reason) || json_words(o, "error", d->error)) {
        json_decref(o);
        return NULL;
    }
    char kid[DQ__KEY_ID_LEN * 2 + 1];
    /* Sealed with a key this client lacks: the key's id, not the bytes. */
    if (sealed_with(d->payload, d->payload_len, kid)[0]
            ? json_object_set_new(o, "payload_sealed_with", json_string(kid))
            : json_bytes(o, "payload", d->payload, d->payload_len)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int cli_print_dead(const dq_dead_letter *d, int json) {
    dq__buf b = {0};

    if (json) return cli_write_json(json_dead(d), "a dead letter");
    return write_text(&b, text_dead(&b, d), "a dead letter");
}

/* ------------------------------------------------------------ listings and look-ups */

const char *cli_state_name(int state) {
    static const char *const names[] = {"unknown", "pending", "ready", "inflight", "dead"};

    return state >= 0 && state <= DQ_STATE_DEAD ? names[state] : "unknown";
}

/* A time in ms, or JSON null when 0 (the field does not apply). */
static int json_time(json_t *obj, const char *key, int64_t ms) {
    return json_object_set_new(obj, key, ms ? json_integer((json_int_t)ms) : json_null());
}

json_t *cli_json_listed(const dq_listed *it) {
    json_t *o = json_object();
    char *b64 = dq__base64_encode(it->payload, it->payload_len);
    char kid[DQ__KEY_ID_LEN * 2 + 1];
    int sealed = sealed_with(it->payload, it->payload_len, kid)[0] != '\0';
    int text = !sealed && dq__utf8_valid(it->payload, it->payload_len);

    if (!o || !b64 || json_bytes(o, "id", it->id, strlen(it->id)) ||
        json_object_set_new(o, "state", json_string(cli_state_name(it->state))) ||
        json_time(o, "due_ms", it->due_ms) || json_time(o, "lease_end_ms", it->lease_end_ms) ||
        json_time(o, "ready_ms", it->ready_ms) || json_time(o, "died_ms", it->died_ms) ||
        json_int(o, "attempts", it->attempts) ||
        json_object_set_new(o, "payload",
                            text ? json_stringn(it->payload_len ? it->payload : "", it->payload_len)
                                 : json_null()) ||
        json_object_set_new(o, "payload_base64", json_string(b64)) ||
        json_int(o, "payload_bytes", (int64_t)it->payload_len) ||
        json_object_set_new(o, "sealed", json_boolean(sealed)) ||
        json_object_set_new(o, "payload_sealed_with", sealed ? json_string(kid) : json_null()) ||
        (it->reason[0] ? json_words(o, "reason", it->reason)
                       : json_object_set_new(o, "reason", json_null())) ||
        (it->error[0] ? json_words(o, "error", it->error)
                      : json_object_set_new(o, "error", json_null())) ||
        (it->holder[0] ? json_bytes(o, "holder", it->holder, strlen(it->holder))
                       : json_object_set_new(o, "holder", json_null()))) {
        json_decref(o);
        o = NULL;
    }
    free(b64);
    return o;
}

/* id, state, time (due, lease end or death, by state), attempts, then the
 * error or reason, then the payload: tab-separated, escaped as take's. */
static int text_listed(dq__buf *b, const dq_listed *it) {
    int64_t at = it->state == DQ_STATE_IN_FLIGHT ? it->lease_end_ms
                 : it->state == DQ_STATE_DEAD    ? it->died_ms
                                                 : it->due_ms;
    const char *why = it->reason[0] ? it->reason : it->error;
    char kid[DQ__KEY_ID_LEN * 2 + 1];

    if (text_id(b, it->id, strlen(it->id)) ||
        dq__buf_printf(b, "\t%s\t%" PRId64 "\t%d\t", cli_state_name(it->state), at, it->attempts) ||
        text_escaped(b, why, strlen(why), DQ__ESC_UTF8) || dq__buf_append(b, "\t", 1) ||
        (sealed_with(it->payload, it->payload_len, kid)[0]
             ? dq__buf_printf(b, "<sealed with key %s>", kid)
             : text_payload(b, it->payload, it->payload_len)))
        return DQ_ENOMEM;
    return dq__buf_append(b, "\n", 1);
}

int cli_print_listed(const dq_listed *it, int json) {
    dq__buf b = {0};

    if (json) return cli_write_json(cli_json_listed(it), "an item");
    return write_text(&b, text_listed(&b, it), "an item");
}

json_t *cli_json_lookup(const char *id, const dq_item_info *info) {
    json_t *o = json_object();

    if (!o || json_bytes(o, "id", id, strlen(id)) ||
        json_object_set_new(o, "state", json_string(cli_state_name(info->state))) ||
        json_time(o, "due_ms", info->state == DQ_STATE_PENDING ? info->due_ms : 0) ||
        json_time(o, "lease_end_ms", info->state == DQ_STATE_IN_FLIGHT ? info->due_ms : 0) ||
        json_int(o, "attempts", info->attempts) || json_int(o, "overdue_ms", info->overdue_ms) ||
        (info->holder[0] ? json_bytes(o, "holder", info->holder, strlen(info->holder))
                         : json_object_set_new(o, "holder", json_null()))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int cli_print_lookup(const char *id, const dq_item_info *info, int json) {
    dq__buf b = {0};

    if (json) return cli_write_json(cli_json_lookup(id, info), "an item");
    int rc = dq__buf_printf(&b, "state %s\n", cli_state_name(info->state));
    if (!rc && info->state == DQ_STATE_PENDING)
        rc = dq__buf_printf(&b, "due_ms %" PRId64 "\n", info->due_ms);
    if (!rc && info->state == DQ_STATE_IN_FLIGHT)
        rc = dq__buf_printf(&b, "lease_end_ms %" PRId64 "\n", info->due_ms);
    if (!rc) rc = dq__buf_printf(&b, "attempts %d\n", info->attempts);
    if (!rc && info->holder[0]) rc = dq__buf_printf(&b, "holder %s\n", info->holder);
    /* A scheduler moves what is due within milliseconds: a second late is
     * worth a line. */
    if (!rc && info->overdue_ms >= 1000)
        rc = dq__buf_printf(&b, "%s %.0f s ago, waiting for a scheduler\n",
                            info->state == DQ_STATE_IN_FLIGHT ? "lease ended" : "due",
                            (double)info->overdue_ms / 1000.0);
    return write_text(&b, rc, "an item");
}

/* ------------------------------------------------------------ schedules */

const char *cli_schedule_state(const dq_recurring *s) {
    return s->bad             ? "bad"
           : s->paused        ? "paused"
           : s->next_ms == -2 ? "waiting"
           : s->next_ms < 0   ? "ended"
                              : "active";
}

const char *cli_missed_name(int missed) {
    return missed == DQ_MISSED_SKIP ? "skip" : missed == DQ_MISSED_ALL ? "all" : "one";
}

json_t *cli_json_schedule(const dq_recurring *s) {
    /* zone: null for 'every' (no zone applies). */
    return json_pack("{s:s, s:s, s:o, s:I, s:I, s:I, s:s, s:b, s:I, s:I, s:s, s:I}", "name", s->name,
                     "spec", s->spec, "zone", s->zone[0] ? json_string(s->zone) : json_null(),
                     "every_ms", (json_int_t)s->every_ms, "start_ms", (json_int_t)s->start_ms, "end_ms",
                     (json_int_t)s->end_ms, "missed", cli_missed_name(s->missed), "paused", s->paused,
                     "next_ms", (json_int_t)s->next_ms, "last_ms", (json_int_t)s->last_ms, "state",
                     cli_schedule_state(s), "payload_bytes", (json_int_t)s->payload_len);
}
