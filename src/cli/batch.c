/*
 * batch.c - the input of "delayq offer QUEUE --batch FILE", streamed.
 *
 * Owns reading a batch file ('-' = stdin) and checking its lines a chunk at
 * a time: each line is DELAY<TAB>ID<TAB>PAYLOAD, where an empty ID asks for
 * a generated one and PAYLOAD is the rest of the line (tabs and all)
 * without its "\n" and a "\r" before it; blank lines are skipped. A chunk
 * is at most BATCH_CHUNK_ITEMS lines and about BATCH_CHUNK_BYTES bytes, so
 * memory stays bounded whatever the input: one buffer of BUF_CAP bytes,
 * allocated once, holds the chunk's lines, cut into NUL-terminated fields
 * in place, and the start of the next line. A line is refused as soon as
 * it grows past BATCH_LINE_MAX bytes, without reading the rest of it.
 * A chunk also ends, short, when the input pauses (a pipe or terminal with
 * nothing more to read right now): a producer that streams lines has them
 * offered as they come, not held until 1000 have gathered, and Redis gets a
 * steady flow of small calls instead of bursts that hold it for
 * milliseconds (and make every scheduler late meanwhile).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

/* The longest DELAY field: any valid duration with room for leading zeros. */
#define DELAY_FIELD_MAX 64
/* Bytes one read() asks for. */
#define READ_SIZE (64 * 1024)
/* The buffer: a chunk's bytes, then one line of the longest kind. */
#define BUF_CAP (BATCH_CHUNK_BYTES + BATCH_LINE_MAX + 1)

int cli_batch_open(const char *path, unsigned flags, cli_batch *b) {
    int is_stdin = strcmp(path, "-") == 0;

    memset(b, 0, sizeof *b);
    b->fd = is_stdin ? 0 : open(path, O_RDONLY | O_CLOEXEC);
    if (b->fd < 0) {
        cli_err("cannot read %s: %s", cli_quote(path), strerror(errno));
        return CLI_USAGE;
    }
    snprintf(b->name, sizeof b->name, "%s", is_stdin ? "stdin" : cli_quote(path));
    b->flags = flags;
    b->delay_max = cli_delay_max();
    b->buf = malloc(BUF_CAP + 1); /* + 1: the NUL after a last line without "\n" */
    b->items = calloc(BATCH_CHUNK_ITEMS, sizeof *b->items);
    b->lines = calloc(BATCH_CHUNK_ITEMS, sizeof *b->lines);
    if (b->buf && b->items && b->lines) return 0;
    cli_err("batch: out of memory");
    cli_batch_close(b);
    return CLI_FAIL;
}

void cli_batch_close(cli_batch *b) {
    if (b->fd > 0) close(b->fd);
    free(b->buf);
    free(b->items);
    free(b->lines);
    memset(b, 0, sizeof *b);
}

/* Checks one line (len bytes at line, then a byte that may be overwritten)
 * and fills *it. where names the line in messages. */
static int parse_line(const cli_batch *b, char *line, size_t len, const char *where, dq_item *it) {
    char *tab1 = memchr(line, '\t', len);
    char *tab2 = tab1 ? memchr(tab1 + 1, '\t', len - (size_t)(tab1 + 1 - line)) : NULL;
    int rc;

    if (!tab2) {
        cli_err("%sexpected DELAY<TAB>ID<TAB>PAYLOAD", where);
        return CLI_USAGE;
    }
    *tab1 = *tab2 = line[len] = '\0';
    memset(it, 0, sizeof *it);
    size_t dlen = (size_t)(tab1 - line);
    if (memchr(line, '\0', dlen)) {
        cli_err("%sinvalid delay: a NUL byte at byte %zu of it ('%s')", where,
                (size_t)((char *)memchr(line, '\0', dlen) - line) + 1, cli_quote_n(line, dlen));
        return CLI_USAGE;
    }
    if ((rc = cli_parse_delay(where, "delay", line, &it->delay_ms)) != 0 ||
        (rc = cli_check_due(where, line, it->delay_ms, b->delay_max)) != 0)
        return rc;
    if (tab2 > tab1 + 1 && (rc = cli_check_id(where, tab1 + 1, (size_t)(tab2 - tab1 - 1))) != 0)
        return rc;
    it->id = tab2 > tab1 + 1 ? tab1 + 1 : NULL;
    it->payload = tab2 + 1;
    it->payload_len = (size_t)(line + len - (tab2 + 1));
    it->flags = b->flags;
    return cli_check_payload(where, it->payload_len, DQ_PAYLOAD_DEFAULT_MAX);
}

/* Takes the line [b->start, nl) (nl: its "\n", or the end of the input)
 * into the chunk, unless it is blank. */
static int take_line(cli_batch *b, char *nl) {
    char *line = b->buf + b->start, where[sizeof b->name + 48];
    size_t len = (size_t)(nl - line);

    b->lineno++;
    b->start += len + (nl < b->buf + b->end);
    b->scan = b->start;
    if (len && line[len - 1] == '\r') len--;
    if (!len) return 0;
    snprintf(where, sizeof where, "%s line %zu: ", b->name, b->lineno);
    int rc = parse_line(b, line, len, where, &b->items[b->n]);
    if (!rc) b->lines[b->n++] = b->lineno;
    return rc;
}

/* Whether a read of fd would return at once (data, end of input, or an
 * error to report): always so for a regular file. */
static int input_ready(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int n;

    do n = poll(&p, 1, 0);
    while (n < 0 && errno == EINTR);
    return n != 0;
}

/* Reads more input after b->end. Returns 0 or CLI_USAGE after saying why. */
static int fill(cli_batch *b) {
    size_t room = BUF_CAP - b->end;

    for (;;) {
        ssize_t got = read(b->fd, b->buf + b->end, room < READ_SIZE ? room : READ_SIZE);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            cli_err("cannot read %s: %s", b->name, strerror(errno));
            return CLI_USAGE;
        }
        b->end += (size_t)got;
        b->eof = got == 0;
        return 0;
    }
}

int cli_batch_next(cli_batch *b) {
    /* The last chunk has been sent: its bytes go, the line begun stays. */
    memmove(b->buf, b->buf + b->start, b->end - b->start);
    b->end -= b->start;
    b->scan -= b->start;
    b->start = 0;
    b->n = 0;
    while (b->n < BATCH_CHUNK_ITEMS && b->start < BATCH_CHUNK_BYTES) {
        char *nl = memchr(b->buf + b->scan, '\n', b->end - b->scan);
        int rc = 0;
        if (nl) {
            rc = take_line(b, nl);
        } else if (b->end - b->start > BATCH_LINE_MAX) {
            cli_err("%s line %zu: longer than %d bytes (a delay, an id and a payload of at "
                    "most %u bytes)",
                    b->name, b->lineno + 1, BATCH_LINE_MAX, DQ_PAYLOAD_DEFAULT_MAX);
            rc = CLI_USAGE;
        } else if (b->eof) {
            if (b->start < b->end) rc = take_line(b, b->buf + b->end);
            if (!rc) break;
        } else if (b->n > 0 && !input_ready(b->fd)) {
            break; /* the input pauses: send what has come */
        } else {
            b->scan = b->end;
            rc = fill(b);
        }
        if (rc) {
            b->n = 0;
            return rc;
        }
    }
    return 0;
}
