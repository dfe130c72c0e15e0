/*
 * resp.c - a command written as RESP (the Redis protocol's array of bulk
 * strings): dq__format_command, bytes in and bytes out.
 *
 * Why here, with the pure helpers, and not in src/conn/: it touches no
 * socket and no loop, and the layers above conn (routing in request.c, the
 * scripts in script.c and functions.c) format commands too, so a pure
 * helper at the bottom serves them all without any of them reaching into
 * the connections for a codec. hiredis keeps its reply parser (read.c)
 * apart from its sockets (net.c) for the same reason.
 */
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Appends one RESP bulk string "$<len>\r\n<bytes>\r\n" at p; returns the end. */
static char *put_bulk(char *p, const char *s, size_t len) {
    *p++ = '$';
    p += dq__fmt_i64(p, (int64_t)len);
    *p++ = '\r', *p++ = '\n';
    if (len) memcpy(p, s, len);
    p += len;
    *p++ = '\r', *p++ = '\n';
    return p;
}

/* Room for a bulk string's framing: '$', up to 20 digits, two CRLFs. */
#define BULK_FRAME 25

/* Formats a command of head[0..nhead-1] then argv[0..argc-1] as a RESP
 * array into a malloc'ed buffer (*out, freed with free). Returns its length,
 * or -1 when out of memory. hiredis's formatter calls sprintf per argument;
 * this is on the path of every request. */
long dq__format_command(char **out, int nhead, const char **head, const size_t *headlen, int argc,
                        const char **argv, const size_t *argvlen) {
    size_t room = 1 + 20 + 2 + 1; /* + a NUL: see below */
    for (int i = 0; i < nhead; i++) room += BULK_FRAME + headlen[i];
    for (int i = 0; i < argc; i++) room += BULK_FRAME + argvlen[i];
    char *buf = malloc(room), *p = buf;
    if (!buf) return -1;
    *p++ = '*';
    p += dq__fmt_i64(p, nhead + argc);
    *p++ = '\r', *p++ = '\n';
    for (int i = 0; i < nhead; i++) p = put_bulk(p, head[i], headlen[i]);
    for (int i = 0; i < argc; i++) p = put_bulk(p, argv[i], argvlen[i]);
    /* Not part of the command: hiredis finds the command's name with
     * strchr and strtol, which must stop inside the buffer. */
    *p = '\0';
    *out = buf;
    return p - buf;
}
