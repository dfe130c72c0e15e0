/*
 * input.c - reading a whole stream (stdin or a batch file), binary-safe.
 *
 * Owns cli_read_all(): bytes go into one growing buffer up to a limit, and
 * bytes past the limit are counted but dropped, so an oversized payload can
 * be reported with its real size without holding it all in memory.
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli/cli.h"

/* Makes room for at least want bytes plus the terminating NUL. */
static int grow(char **data, size_t *cap, size_t want)
{
    if (want + 1 <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 4096;
    while (ncap < want + 1)
        ncap *= 2;
    char *p = realloc(*data, ncap);
    if (!p)
        return -1;
    *data = p;
    *cap = ncap;
    return 0;
}

int cli_read_all(int fd, size_t limit, char **data, size_t *total)
{
    char *buf = NULL, scratch[65536];
    size_t cap = 0, kept = 0, seen = 0;

    if (grow(&buf, &cap, 0) < 0)
        return -1;
    for (;;) {
        char *dst = scratch;
        size_t want = sizeof scratch;
        if (kept < limit) {
            want = limit - kept < want ? limit - kept : want;
            if (grow(&buf, &cap, kept + want) < 0)
                break;
            dst = buf + kept;
        }
        ssize_t n = read(fd, dst, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        if (n == 0) {
            buf[kept] = '\0';
            *data = buf;
            *total = seen;
            return 0;
        }
        seen += (size_t)n;
        if (dst != scratch)
            kept += (size_t)n;
    }
    int saved = errno;
    free(buf);
    errno = saved;
    return -1;
}
