/*
 * secret.c - reading a secret (an ACL password, an HTTP token) from a file
 * that only its owner may read, for the commands that take one (acl,
 * serve). What was read is wiped from the stack before returning.
 */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

/* Reads the first line of path (without its "\n" or "\r\n") into pw and
 * wipes what it read. Returns 0, or CLI_USAGE after saying why. */
int cli_read_secret(const char *cmd, const char *what, const char *path, char *pw, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        cli_err("%s: cannot read the %s file %s: %s", cmd, what, cli_quote(path), strerror(errno));
        return CLI_USAGE;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        cli_err("%s: the %s file %s is not a regular file", cmd, what, cli_quote(path));
        close(fd);
        return CLI_USAGE;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        cli_err("%s: the %s file %s is open to group or others (mode %03o): chmod 600 it",
                cmd, what, cli_quote(path), (unsigned)(st.st_mode & 0777));
        close(fd);
        return CLI_USAGE;
    }
    char buf[1024];
    ssize_t got = read(fd, buf, sizeof buf);
    close(fd);
    size_t len = got > 0 ? (size_t)got : 0;
    char *nl = memchr(buf, '\n', len);
    if (nl)
        len = (size_t)(nl - buf);
    if (len && buf[len - 1] == '\r')
        len--;
    int rc = 0;
    if (got < 0) {
        cli_err("%s: cannot read the %s file %s: %s", cmd, what, cli_quote(path), strerror(errno));
        rc = CLI_USAGE;
    } else if (len == 0) {
        cli_err("%s: the %s file %s is empty", cmd, what, cli_quote(path));
        rc = CLI_USAGE;
    } else if (len >= size || (!nl && (size_t)got == sizeof buf)) {
        cli_err("%s: the %s in %s is longer than %zu bytes", cmd, what, cli_quote(path), size - 1);
        rc = CLI_USAGE;
    } else {
        memcpy(pw, buf, len);
        pw[len] = '\0';
    }
    sodium_memzero(buf, sizeof buf);
    return rc;
}
