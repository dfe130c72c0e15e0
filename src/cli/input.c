/*
 * input.c - reading a whole stream (the payload on stdin), binary-safe.
 *
 * Owns cli_read_all(): bytes go into one growing buffer up to a limit, and
 * reading stops one byte past it, so an oversized payload is reported as
 * such without reading, or holding, the rest ("yes | delayq offer q 0"
 * ends at once).
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli/cli.h"

/* Makes room for at least want bytes plus the terminating NUL. */
static int grow(char **data, size_t *cap, size_t want) {
    if (want + 1 <= *cap) return 0;
    size_t ncap = *cap ? *cap : 4096;
    while (ncap < want + 1) ncap *= 2;
    char *p = realloc(*data, ncap);
    if (!p) return -1;
    *data = p;
    *cap = ncap;
    return 0;
}

int cli_read_all(int fd, size_t limit, char **data, size_t *len) {
    char *buf = NULL;
    size_t cap = 0, got = 0;

    /* One byte past the limit tells "too big" without reading the rest. */
    while (got <= limit) {
        size_t want = limit + 1 - got < 65536 ? limit + 1 - got : 65536;
        if (grow(&buf, &cap, got + want) < 0) break;
        ssize_t n = read(fd, buf + got, want);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        if (n == 0) {
            buf[got] = '\0';
            *data = buf;
            *len = got;
            return 0;
        }
        got += (size_t)n;
    }
    if (got > limit) {
        buf[got] = '\0';
        *data = buf;
        *len = got;
        return 0;
    }
    int saved = errno;
    free(buf);
    errno = saved;
    return -1;
}
