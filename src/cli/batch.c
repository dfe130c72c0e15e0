/*
 * batch.c - the input of "delayq offer QUEUE --batch FILE".
 *
 * Owns reading a batch file ('-' = stdin) and checking every line of it
 * before anything is sent: each line is DELAY<TAB>ID<TAB>PAYLOAD, where an
 * empty ID asks for a generated one and PAYLOAD is the rest of the line (tabs
 * and all) without its "\n" and a "\r" before it; blank lines are skipped.
 * The items point into the file's bytes, which are cut into NUL-terminated
 * fields in place.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

/* Reads the whole file (or stdin for "-") into b->data. */
static int load_file(const char *path, cli_batch *b)
{
    int is_stdin = strcmp(path, "-") == 0;
    int fd = is_stdin ? 0 : open(path, O_RDONLY | O_CLOEXEC);
    size_t total;

    if (fd < 0 || cli_read_all(fd, SIZE_MAX, &b->data, &total) < 0) {
        cli_err("cannot read %s: %s", is_stdin ? "stdin" : path, strerror(errno));
        if (fd > 0)
            close(fd);
        return CLI_USAGE;
    }
    if (!is_stdin)
        close(fd);
    b->len = total;
    return 0;
}

/* Checks one line (len bytes at line, then a byte that may be overwritten)
 * and fills *it. where names the line in messages. */
static int parse_line(char *line, size_t len, unsigned flags, const char *where,
                      dq_item *it)
{
    char *tab1 = memchr(line, '\t', len);
    char *tab2 = tab1 ? memchr(tab1 + 1, '\t', len - (size_t)(tab1 + 1 - line)) : NULL;
    int rc;

    if (!tab2) {
        cli_err("%sexpected DELAY<TAB>ID<TAB>PAYLOAD", where);
        return CLI_USAGE;
    }
    *tab1 = *tab2 = line[len] = '\0';
    memset(it, 0, sizeof *it);
    if (strlen(line) != (size_t)(tab1 - line)) {
        cli_err("%sinvalid delay: contains a NUL byte", where);
        return CLI_USAGE;
    }
    if ((rc = cli_parse_delay(where, "delay", line, &it->delay_ms)) != 0)
        return rc;
    if (tab2 > tab1 + 1 &&
        (rc = cli_check_id(where, tab1 + 1, (size_t)(tab2 - tab1 - 1))) != 0)
        return rc;
    it->id = tab2 > tab1 + 1 ? tab1 + 1 : NULL;
    it->payload = tab2 + 1;
    it->payload_len = (size_t)(line + len - (tab2 + 1));
    it->flags = flags;
    return cli_check_payload(where, it->payload_len, DQ_PAYLOAD_DEFAULT_MAX);
}

/* Room for one item per line of the file. */
static int alloc_items(cli_batch *b)
{
    size_t lines = 1;
    for (const char *p = b->data; (p = memchr(p, '\n', b->len - (size_t)(p - b->data)));
         p++)
        lines++;
    b->items = calloc(lines, sizeof *b->items);
    b->lines = calloc(lines, sizeof *b->lines);
    if (b->items && b->lines)
        return 0;
    cli_err("batch of %zu lines: out of memory", lines);
    return CLI_FAIL;
}

/* Cuts b->data into lines and parses each non-blank one. */
static int parse_lines(const char *name, unsigned flags, cli_batch *b)
{
    char *p = b->data, *end = b->data + b->len, where[512];

    for (size_t lineno = 1; p < end; lineno++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = (size_t)((nl ? nl : end) - p);
        if (len && p[len - 1] == '\r')
            len--;
        if (len) {
            snprintf(where, sizeof where, "%s line %zu: ", name, lineno);
            int rc = parse_line(p, len, flags, where, &b->items[b->n]);
            if (rc)
                return rc;
            b->lines[b->n++] = lineno;
        }
        p = nl ? nl + 1 : end;
    }
    return 0;
}

int cli_batch_load(const char *path, unsigned flags, cli_batch *b)
{
    memset(b, 0, sizeof *b);
    int rc = load_file(path, b);
    if (!rc)
        rc = alloc_items(b);
    if (!rc)
        rc = parse_lines(strcmp(path, "-") == 0 ? "stdin" : path, flags, b);
    if (rc)
        cli_batch_release(b);
    return rc;
}

void cli_batch_release(cli_batch *b)
{
    free(b->data);
    free(b->items);
    free(b->lines);
    memset(b, 0, sizeof *b);
}
