/*
 * url.c - the connection URL of dq_connect() and the CLI.
 *
 * Owns dq__url_parse: "redis://[[user:]password@]host[:port][/db]" and
 * "unix:///path/to/redis.sock[?db=N]" into a dq__url. Pure string work: no
 * name resolution, no I/O. Every rejection comes with a one-line reason;
 * the reason may quote the scheme, port or db but never the user info, so a
 * password cannot leak into a log.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util.h"

#define DEFAULT_PORT 6379
/* How much of an offending fragment an error message quotes. */
#define QUOTE_MAX 32

typedef struct parser {
    char *err;
    size_t errlen;
} parser;

static int fail(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records the reason (if the caller wants it) and returns DQ_EINVAL, so that
 * every error path is one "return fail(...)". */
static int fail(parser *ps, const char *fmt, ...)
{
    if (ps->err != NULL && ps->errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ps->err, ps->errlen, fmt, ap);
        va_end(ap);
    }
    return DQ_EINVAL;
}

/* Copies n bytes of s for quoting in a message: non-printable bytes become
 * '?' so the message stays one line, and long fragments are cut with "...". */
static const char *quote(char out[QUOTE_MAX + 4], const char *s, size_t n)
{
    size_t i, k = n > QUOTE_MAX ? QUOTE_MAX : n;
    for (i = 0; i < k; i++)
        out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    if (k < n) {
        memcpy(out + k, "...", 3);
        k += 3;
    }
    out[k] = '\0';
    return out;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Reads a run of digits at s (at most n bytes) as a number no larger than
 * max. Returns the count of digits read (0 if none) and sets *value; returns
 * -1 if the number exceeds max. Capping while reading keeps any digit count
 * overflow-free. */
static long read_digits(const char *s, size_t n, long long max, long long *value)
{
    size_t i = 0;
    long long v = 0;
    while (i < n && is_digit(s[i])) {
        v = v * 10 + (s[i] - '0');
        if (v > max)
            return -1;
        i++;
    }
    *value = v;
    return (long)i;
}

/* Percent-decodes n bytes of src into dst (size bytes, NUL-terminated).
 * what names the field in messages. */
static int decode_field(parser *ps, const char *what, const char *src, size_t n, char *dst,
                        size_t size)
{
    size_t i, k = 0;
    for (i = 0; i < n; i++) {
        int c = (unsigned char)src[i];
        if (c == '%') {
            int hi = i + 2 < n ? hex_value(src[i + 1]) : -1;
            int lo = hi >= 0 ? hex_value(src[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return fail(ps, "bad percent-escape in %s (write a literal '%%' as %%25)", what);
            c = hi * 16 + lo;
            if (c == 0)
                return fail(ps, "%%00 is not allowed in %s", what);
            i += 2;
        }
        if (k + 1 >= size)
            return fail(ps, "%s too long (at most %zu bytes)", what, size - 1);
        dst[k++] = (char)c;
    }
    dst[k] = '\0';
    return 0;
}

/* "[user:]password" before the '@'. Without a colon it is a password, as
 * in "redis://secret@host" (the form Redis's own tools accept). */
static int parse_userinfo(parser *ps, const char *s, size_t n, dq__url *u)
{
    const char *colon = memchr(s, ':', n);
    if (colon == NULL)
        return decode_field(ps, "password", s, n, u->password, sizeof u->password);
    if (decode_field(ps, "user", s, (size_t)(colon - s), u->user, sizeof u->user) != 0)
        return DQ_EINVAL;
    return decode_field(ps, "password", colon + 1, n - (size_t)(colon - s) - 1, u->password,
                        sizeof u->password);
}

static int copy_host(parser *ps, const char *s, size_t n, dq__url *u)
{
    if (n == 0)
        return fail(ps, "missing host");
    if (n >= sizeof u->host)
        return fail(ps, "host too long (at most %zu bytes)", sizeof u->host - 1);
    memcpy(u->host, s, n);
    u->host[n] = '\0';
    return 0;
}

/* "[v6addr]" at *p; leaves *p after the ']'. Only hex digits, ':' and '.'
 * (IPv4-mapped forms) are allowed inside; zone ids are not supported. */
static int parse_ipv6_host(parser *ps, const char **p, dq__url *u)
{
    const char *open = *p, *close = strchr(open, ']');
    const char *c;
    if (close == NULL)
        return fail(ps, "unterminated '[' in IPv6 host");
    for (c = open + 1; c < close; c++)
        if (hex_value(*c) < 0 && *c != ':' && *c != '.')
            return fail(ps, "invalid character in IPv6 host (only hex digits, ':' and '.')");
    if (copy_host(ps, open + 1, (size_t)(close - open - 1), u) != 0)
        return DQ_EINVAL;
    *p = close + 1;
    if (**p != '\0' && **p != ':' && **p != '/') {
        char q[QUOTE_MAX + 4];
        return fail(ps, "trailing garbage '%s' after IPv6 host", quote(q, *p, strlen(*p)));
    }
    return 0;
}

/* A host name or IPv4 address at *p, up to ':', '/' or the end. */
static int parse_name_host(parser *ps, const char **p, dq__url *u)
{
    const char *s = *p, *e = s;
    while (*e != '\0' && *e != ':' && *e != '/') {
        char c = *e;
        if (!(is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' ||
              c == '.' || c == '_')) {
            char q[QUOTE_MAX + 4];
            return fail(ps, "invalid character '%s' in host", quote(q, e, 1));
        }
        e++;
    }
    if (copy_host(ps, s, (size_t)(e - s), u) != 0)
        return DQ_EINVAL;
    *p = e;
    return 0;
}

/* ":port" at *p (the ':' included); the port runs to '/' or the end. */
static int parse_port(parser *ps, const char **p, dq__url *u)
{
    const char *s = *p + 1;
    size_t n = strcspn(s, "/");
    long long v = 0;
    long got = read_digits(s, n, 65535, &v);
    if (got <= 0 || (size_t)got != n || v == 0) {
        char q[QUOTE_MAX + 4];
        return fail(ps, "bad port '%s' (expected 1..65535)", quote(q, s, n));
    }
    u->port = (int)v;
    *p = s + n;
    return 0;
}

/* A db number at s up to the end; "" means 0 only where empty_ok. */
static int parse_db(parser *ps, const char *s, int empty_ok, dq__url *u)
{
    size_t n = strlen(s);
    long long v = 0;
    long got = read_digits(s, n, INT_MAX, &v);
    char q[QUOTE_MAX + 4];
    if (n == 0 && empty_ok)
        return 0;
    if (got <= 0)
        return fail(ps, "bad db '%s' (expected 0..%d)", quote(q, s, n), INT_MAX);
    if ((size_t)got != n)
        return fail(ps, "trailing garbage '%s' after db", quote(q, s + got, n - (size_t)got));
    u->db = (int)v;
    return 0;
}

/* Everything after "redis://". */
static int parse_tcp(parser *ps, const char *rest, dq__url *u)
{
    /* The last '@' ends the user info: host, port and db cannot hold one, so
     * a password with a raw '@' or '/' still parses as the user meant. */
    const char *at = strrchr(rest, '@');
    const char *p = rest;
    u->port = DEFAULT_PORT;
    if (at != NULL) {
        if (parse_userinfo(ps, rest, (size_t)(at - rest), u) != 0)
            return DQ_EINVAL;
        p = at + 1;
    }
    if (*p == '[' ? parse_ipv6_host(ps, &p, u) : parse_name_host(ps, &p, u))
        return DQ_EINVAL;
    if (*p == ':' && parse_port(ps, &p, u) != 0)
        return DQ_EINVAL;
    if (*p == '/')
        return parse_db(ps, p + 1, 1, u);
    return 0;
}

/* Everything after "unix://": an absolute path, then "?db=N" at most. */
static int parse_unix(parser *ps, const char *rest, dq__url *u)
{
    size_t n = strcspn(rest, "?");
    u->is_unix = 1;
    if (n == 0)
        return fail(ps, "missing socket path (expected unix:///path/to/redis.sock)");
    if (rest[0] != '/')
        return fail(ps, "socket path must be absolute (expected unix:///path/to/redis.sock)");
    if (n >= sizeof u->path)
        return fail(ps, "socket path too long (at most %zu bytes)", sizeof u->path - 1);
    memcpy(u->path, rest, n);
    u->path[n] = '\0';
    if (rest[n] == '\0')
        return 0;
    if (strncmp(rest + n, "?db=", 4) != 0) {
        char q[QUOTE_MAX + 4];
        const char *query = rest + n;
        return fail(ps, "trailing garbage '%s' after socket path (only ?db=N is allowed)",
                    quote(q, query, strlen(query)));
    }
    return parse_db(ps, rest + n + 4, 0, u);
}

int dq__url_parse(const char *text, dq__url *out, char *err, size_t errlen)
{
    parser ps = {err, errlen};
    dq__url u;
    const char *sep;
    size_t scheme_len;
    int rc;
    char q[QUOTE_MAX + 4];

    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (out == NULL)
        return fail(&ps, "no output");
    if (text == NULL || text[0] == '\0')
        return fail(&ps, "empty URL");
    sep = strstr(text, "://");
    if (sep == NULL)
        return fail(&ps, "missing scheme (expected redis:// or unix://)");
    scheme_len = (size_t)(sep - text);

    memset(&u, 0, sizeof u);
    /* Schemes are case-insensitive (RFC 3986, 3.1). */
    if (scheme_len == 5 && strncasecmp(text, "redis", 5) == 0)
        rc = parse_tcp(&ps, sep + 3, &u);
    else if (scheme_len == 4 && strncasecmp(text, "unix", 4) == 0)
        rc = parse_unix(&ps, sep + 3, &u);
    else if (scheme_len == 6 && strncasecmp(text, "rediss", 6) == 0)
        rc = fail(&ps, "TLS (rediss://) is not supported");
    else
        rc = fail(&ps, "unknown scheme '%s' (expected redis:// or unix://)",
                  quote(q, text, scheme_len));

    /* Only a complete parse reaches *out, and the stack copy of the
     * password is wiped either way. */
    if (rc == 0)
        *out = u;
    explicit_bzero(&u, sizeof u);
    return rc;
}
