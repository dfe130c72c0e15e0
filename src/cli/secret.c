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

/* Reads all of path, a regular file only its owner may read, into buf
 * (size bytes, NUL-terminated), *len getting its length. Returns 0, or
 * CLI_USAGE after saying why (it does not fit: "longer than size - 1"). */
int cli_read_secret_file(const char *cmd, const char *what, const char *path, char *buf, size_t size,
                         size_t *len) {
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
        cli_err("%s: the %s file %s is open to group or others (mode %03o): chmod 600 it", cmd, what,
                cli_quote(path), (unsigned)(st.st_mode & 0777));
        close(fd);
        return CLI_USAGE;
    }
    size_t got = 0;
    ssize_t n = 1;
    while (got < size && (n = read(fd, buf + got, size - got)) > 0) got += (size_t)n;
    close(fd);
    if (n < 0) {
        cli_err("%s: cannot read the %s file %s: %s", cmd, what, cli_quote(path), strerror(errno));
        return CLI_USAGE;
    }
    if (got == size) {
        cli_err("%s: the %s file %s is longer than %zu bytes", cmd, what, cli_quote(path), size - 1);
        return CLI_USAGE;
    }
    buf[got] = '\0';
    *len = got;
    return 0;
}

/* Reads the first line of path (without its "\n" or "\r\n") into pw and
 * wipes what it read. Returns 0, or CLI_USAGE after saying why. */
int cli_read_secret(const char *cmd, const char *what, const char *path, char *pw, size_t size) {
    char buf[1024];
    size_t len = 0;
    int rc = cli_read_secret_file(cmd, what, path, buf, sizeof buf, &len);
    char *nl = memchr(buf, '\n', len);
    if (nl) len = (size_t)(nl - buf);
    if (len && buf[len - 1] == '\r') len--;
    if (rc) {
        /* said already */
    } else if (len == 0) {
        cli_err("%s: the %s file %s is empty", cmd, what, cli_quote(path));
        rc = CLI_USAGE;
    } else if (len >= size) {
        cli_err("%s: the %s in %s is longer than %zu bytes", cmd, what, cli_quote(path), size - 1);
        rc = CLI_USAGE;
    } else {
        memcpy(pw, buf, len);
        pw[len] = '\0';
    }
    sodium_memzero(buf, sizeof buf);
    return rc;
}
