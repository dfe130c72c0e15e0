/*
 * output.c - everything the CLI writes to stdout, in text or JSON.
 *
 * Owns the formats: a taken message as its raw payload plus "\n", or as one
 * JSON object per line ("queue", "id", "payload" or, for bytes that are not
 * valid UTF-8, "payload_base64", "due_ms", "ready_ms"), a leased delivery as
 * "ID<TAB>TOKEN<TAB>PAYLOAD" or the same JSON plus "attempt" and "token"; a
 * queue's stats as "name value" lines or one JSON object; a dead letter as
 * one tab-separated line or one JSON object. Each record is built whole and
 * flushed at once, so a reader never sees half a message, and a failed write
 * (the reader went away) becomes an error instead of a silent loss.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "util.h"

static int out_error(void)
{
    cli_err("cannot write to stdout: %s", strerror(errno));
    return CLI_FAIL;
}

int cli_write_out(const void *data, size_t len)
{
    if ((len && fwrite(data, 1, len, stdout) != len) || fflush(stdout) != 0)
        return out_error();
    return 0;
}

/* Text form of a message: the payload as it is, then a newline; a leased
 * delivery's is preceded by "ID<TAB>TOKEN<TAB>". */
static int print_text(const dq_msg *msg)
{
    size_t len = msg->payload_len;
    if (msg->token && printf("%s\t%s\t", msg->id, msg->token) < 0)
        return out_error();
    if ((len && fwrite(msg->payload, 1, len, stdout) != len) || putchar('\n') == EOF ||
        fflush(stdout) != 0)
        return out_error();
    return 0;
}

/* Appends "payload":"..." or "payload_base64":"..." for len bytes. */
static int json_payload(dq__buf *b, const void *payload, size_t len)
{
    if (dq__utf8_valid(payload, len))
        return dq__buf_printf(b, "\"payload\":") || dq__json_string(b, payload, len);
    char *b64 = dq__base64_encode(payload, len);
    if (!b64)
        return DQ_ENOMEM;
    int rc = dq__buf_printf(b, "\"payload_base64\":\"%s\"", b64);
    free(b64);
    return rc;
}

/* Builds the JSON line of a message into b. Returns 0 or DQ_ENOMEM. */
static int json_msg(dq__buf *b, const dq_msg *msg)
{
    if (dq__buf_printf(b, "{\"queue\":") ||
        dq__json_string(b, msg->queue, strlen(msg->queue)) ||
        dq__buf_printf(b, ",\"id\":") || dq__json_string(b, msg->id, msg->id_len) ||
        dq__buf_printf(b, ",") || json_payload(b, msg->payload, msg->payload_len) ||
        dq__buf_printf(b, ",\"due_ms\":%" PRId64 ",\"ready_ms\":%" PRId64, msg->due_ms,
                       msg->ready_ms))
        return DQ_ENOMEM;
    if (msg->token &&
        (dq__buf_printf(b, ",\"attempt\":%d,\"token\":", msg->attempt) ||
         dq__json_string(b, msg->token, strlen(msg->token))))
        return DQ_ENOMEM;
    return dq__buf_printf(b, "}\n");
}

int cli_print_msg(const dq_msg *msg, int json)
{
    dq__buf b = {0};

    if (!json)
        return print_text(msg);
    int rc = json_msg(&b, msg);
    if (rc)
        cli_err("cannot print message '%s': out of memory", msg->id);
    else
        rc = cli_write_out(b.data, b.len);
    dq__buf_release(&b);
    return rc ? CLI_FAIL : 0;
}

int cli_print_stats(const dq_stats *st, int json)
{
    char line[512];
    int n;

    if (json)
        n = snprintf(line, sizeof line,
                     "{\"pending\":%" PRId64 ",\"ready\":%" PRId64
                     ",\"next_due_in_ms\":%" PRId64 ",\"set_aside\":%" PRId64
                     ",\"inflight\":%" PRId64 ",\"dead\":%" PRId64 "}\n",
                     st->pending, st->ready, st->next_due_in_ms, st->set_aside,
                     st->in_flight, st->dead);
    else
        n = snprintf(line, sizeof line,
                     "pending %" PRId64 "\nready %" PRId64 "\nnext_due_in_ms %" PRId64
                     "\ninflight %" PRId64 "\ndead %" PRId64 "\n",
                     st->pending, st->ready, st->next_due_in_ms, st->in_flight, st->dead);
    if (!json && st->set_aside > 0)
        n += snprintf(line + n, sizeof line - (size_t)n, "set_aside %" PRId64 "\n",
                      st->set_aside);
    return cli_write_out(line, (size_t)n);
}

/* ------------------------------------------------------------ dead letters */

/* Appends text as one tab-separated field: tabs, newlines and other control
 * bytes become spaces. */
static int text_field(dq__buf *b, const char *text)
{
    size_t start = b->len;

    if (dq__buf_append(b, text, strlen(text)))
        return DQ_ENOMEM;
    for (size_t i = start; i < b->len; i++)
        if ((unsigned char)b->data[i] < 0x20 || b->data[i] == 0x7f)
            b->data[i] = ' ';
    return 0;
}

/* Appends a payload as the last field of a text line: as it is when it is
 * valid UTF-8 without control bytes (tab, newline, NUL, ...) and does not
 * itself start with "base64:", else "base64:" and its standard base64. */
static int text_payload(dq__buf *b, const void *payload, size_t len)
{
    const unsigned char *p = payload;
    int raw = dq__utf8_valid(payload, len) && !(len >= 7 && memcmp(p, "base64:", 7) == 0);

    for (size_t i = 0; raw && i < len; i++)
        raw = p[i] >= 0x20 && p[i] != 0x7f;
    if (raw)
        return dq__buf_append(b, payload, len);
    char *b64 = dq__base64_encode(payload, len);
    if (!b64)
        return DQ_ENOMEM;
    int rc = dq__buf_printf(b, "base64:%s", b64);
    free(b64);
    return rc;
}

static int text_dead(dq__buf *b, const dq_dead_letter *d)
{
    if (dq__buf_printf(b, "%s\t%d\t", d->id, d->attempts) || text_field(b, d->reason) ||
        dq__buf_printf(b, "\t") || text_field(b, d->error) || dq__buf_printf(b, "\t") ||
        text_payload(b, d->payload, d->payload_len))
        return DQ_ENOMEM;
    return dq__buf_printf(b, "\n");
}

/* Reason and error are the library's and a consumer's words: any bytes. */
static int json_text(dq__buf *b, const char *text)
{
    size_t len = strlen(text);

    if (dq__utf8_valid(text, len))
        return dq__json_string(b, text, len);
    char *copy = strdup(text);
    if (!copy)
        return DQ_ENOMEM;
    for (char *p = copy; *p; p++)
        if ((unsigned char)*p >= 0x80)
            *p = '?';
    int rc = dq__json_string(b, copy, len);
    free(copy);
    return rc;
}

static int json_dead(dq__buf *b, const dq_dead_letter *d)
{
    if (dq__buf_printf(b, "{\"id\":") || dq__json_string(b, d->id, strlen(d->id)) ||
        dq__buf_printf(b, ",\"died_ms\":%" PRId64 ",\"attempts\":%d,\"due_ms\":%" PRId64
                          ",\"reason\":", d->died_ms, d->attempts, d->due_ms) ||
        json_text(b, d->reason) || dq__buf_printf(b, ",\"error\":") ||
        json_text(b, d->error) || dq__buf_printf(b, ",") ||
        json_payload(b, d->payload, d->payload_len))
        return DQ_ENOMEM;
    return dq__buf_printf(b, "}\n");
}

int cli_print_dead(const dq_dead_letter *d, int json)
{
    dq__buf b = {0};

    int rc = json ? json_dead(&b, d) : text_dead(&b, d);
    if (rc)
        cli_err("cannot print dead letter '%s': out of memory", d->id);
    else
        rc = cli_write_out(b.data, b.len);
    dq__buf_release(&b);
    return rc ? CLI_FAIL : 0;
}
