/*
 * output.c - everything the CLI writes to stdout, in text or JSON.
 *
 * Owns the formats: a taken message as its raw payload plus "\n", or as one
 * JSON object per line ("queue", "id", "payload" or, for bytes that are not
 * valid UTF-8, "payload_base64", "due_ms", "ready_ms"); and a queue's stats
 * as "name value" lines or one JSON object. Each record is built whole and
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

/* Text form of a message: the payload as it is, then a newline. */
static int print_text(const dq_msg *msg)
{
    size_t len = msg->payload_len;
    if ((len && fwrite(msg->payload, 1, len, stdout) != len) || putchar('\n') == EOF ||
        fflush(stdout) != 0)
        return out_error();
    return 0;
}

/* Appends "payload":"..." or "payload_base64":"..." for the message. */
static int json_payload(dq__buf *b, const dq_msg *msg)
{
    if (dq__utf8_valid(msg->payload, msg->payload_len))
        return dq__buf_printf(b, "\"payload\":") ||
               dq__json_string(b, msg->payload, msg->payload_len);
    char *b64 = dq__base64_encode(msg->payload, msg->payload_len);
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
        dq__buf_printf(b, ",") || json_payload(b, msg))
        return DQ_ENOMEM;
    return dq__buf_printf(b, ",\"due_ms\":%" PRId64 ",\"ready_ms\":%" PRId64 "}\n",
                          msg->due_ms, msg->ready_ms);
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
    char line[256];
    int n;

    if (json)
        n = snprintf(line, sizeof line,
                     "{\"pending\":%" PRId64 ",\"ready\":%" PRId64
                     ",\"next_due_in_ms\":%" PRId64 ",\"set_aside\":%" PRId64 "}\n",
                     st->pending, st->ready, st->next_due_in_ms, st->set_aside);
    else
        n = snprintf(line, sizeof line,
                     "pending %" PRId64 "\nready %" PRId64 "\nnext_due_in_ms %" PRId64 "\n",
                     st->pending, st->ready, st->next_due_in_ms);
    if (!json && st->set_aside > 0)
        n += snprintf(line + n, sizeof line - (size_t)n, "set_aside %" PRId64 "\n",
                      st->set_aside);
    return cli_write_out(line, (size_t)n);
}
