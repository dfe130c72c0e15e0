/*
 * url.c - the connection URL of dq_connect() and the CLI.
 *
 * Owns dq__url_parse, which turns one of
 *   redis://[[user:]password@]host[:port][/db]
 *   unix:///path/to/redis.sock[?db=N]
 *   redis-sentinel://[[user:]password@]host[:port][,host[:port]...][/db]
 *       [?sentinel_user=U&sentinel_password=P]#MASTER
 *   redis-cluster://[[user:]password@]host[:port][,host[:port]...]
 * and their TLS forms rediss://, rediss-sentinel:// (whose query may add
 * sentinel_tls=no: the sentinels speak plain TCP) and rediss-cluster://
 * into a dq__url, and the masking of secrets in text that may be or hold a
 * URL: dq__url_mask for the library's messages, dq__url_redact for the
 * CLI's quotes of arguments (the one set of rules for both). Pure string
 * work: no name resolution, no I/O.
 *
 * Two rules decide where the parts end, because a raw password may hold
 * any of '@', ':', '/', '?' and '#': the LAST '@' ends the user info (hosts,
 * ports, db, query and master name cannot hold one), and the LAST '#' starts
 * the master name (which cannot hold one). So '@' and '&' in query values
 * must be percent-encoded.
 *
 * Every rejection comes with a one-line reason that may quote the scheme, a
 * host, a port or a db, all of which come after the user info and before the
 * query; it never quotes the user info, a query parameter or the master name,
 * so no password byte can reach a log through it.
 *
 * The master name is no secret, but one written right after a
 * sentinel_password value may be a secret's tail: a raw '#' in that password
 * would start it (what the "last '#'" rule cannot tell from a forgotten
 * #MASTER). Such a name is hidden in masked text, and the parse marks it
 * (dq__url.master_hidden) so that messages hide it until a sentinel
 * confirms it.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util.h"

#define DEFAULT_PORT 6379
#define SENTINEL_PORT 26379
/* Longest master name; the field holds it with its NUL. */
#define MASTER_MAX 127
#define SCHEMES "redis://, redis-sentinel://, redis-cluster:// (rediss...: TLS) or unix://"
/* How much of an offending fragment an error message quotes. */
#define QUOTE_MAX 32

typedef struct parser {
    char *err;
    size_t errlen;
    int hide; /* quote nothing of the hosts, port and db: see shown() */
} parser;

static int fail(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records the reason (if the caller wants it) and returns DQ_EINVAL, so that
 * every error path is one "return fail(...)". */
static int fail(parser *ps, const char *fmt, ...) {
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
static const char *quote(char out[QUOTE_MAX + 4], const char *s, size_t n) {
    size_t i, k = n > QUOTE_MAX ? QUOTE_MAX : n;
    for (i = 0; i < k; i++) out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    if (k < n) {
        memcpy(out + k, "...", 3);
        k += 3;
    }
    out[k] = '\0';
    return out;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* A fragment of the hosts, port or db for a message: quoted, or "***" when
 * the URL has no '@' and its hosts do not read as host[:port]: then they
 * may be "user:password" with the '@host' forgotten (the rule of the
 * masking, which hides them too). */
static const char *shown(const parser *ps, char out[QUOTE_MAX + 4], const char *s, size_t n) {
    return ps->hide ? "***" : quote(out, s, n);
}

/* 1 if the n bytes at s contain the NUL-terminated word, in any case. */
static int contains(const char *s, size_t n, const char *word) {
    size_t k = strlen(word), i;
    for (i = 0; i + k <= n; i++)
        if (strncasecmp(s + i, word, k) == 0) return 1;
    return 0;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads a run of digits at s (at most n bytes) as a number no larger than
 * max. Returns the count of digits read (0 if none) and sets *value; returns
 * -1 if the number exceeds max. Capping while reading keeps any digit count
 * overflow-free. */
static long read_digits(const char *s, size_t n, long long max, long long *value) {
    size_t i = 0;
    long long v = 0;
    while (i < n && is_digit(s[i])) {
        v = v * 10 + (s[i] - '0');
        if (v > max) return -1;
        i++;
    }
    *value = v;
    return (long)i;
}

/* 1 if the n bytes at s, the hosts of a URL without user info, read as
 * host[:port] nodes joined by ','; else they may be a password whose '@'
 * was forgotten (":secret", "user:secret") and are hidden whole. A
 * password that reads as a host ("redis://secret") cannot be told apart. */
static int plain_nodes(const char *s, size_t n) {
    const char *end = s + n;
    while (s < end) {
        const char *comma = memchr(s, ',', (size_t)(end - s));
        const char *e = comma ? comma : end, *colon;
        if (*s == '[') { /* IPv6: the port is after the ']' */
            const char *close = memchr(s, ']', (size_t)(e - s));
            s = close ? close + 1 : e;
        }
        colon = memchr(s, ':', (size_t)(e - s));
        if (colon != NULL) { /* a port: at most 5 digits, whatever their value */
            long long v;
            size_t digits = (size_t)(e - colon - 1);
            if (digits > 5 || read_digits(colon + 1, digits, 99999, &v) != (long)digits) return 0;
        }
        s = comma ? comma + 1 : end;
    }
    return 1;
}

/* Percent-decodes n bytes of src into dst (size bytes, NUL-terminated).
 * what names the field in messages. */
static int decode_field(parser *ps, const char *what, const char *src, size_t n, char *dst,
                        size_t size) {
    size_t i, k = 0;
    for (i = 0; i < n; i++) {
        int c = (unsigned char)src[i];
        if (c == '%') {
            int hi = i + 2 < n ? hex_value(src[i + 1]) : -1;
            int lo = hi >= 0 ? hex_value(src[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return fail(ps, "bad percent-escape in %s (write a literal '%%' as %%25)", what);
            c = hi * 16 + lo;
            if (c == 0) return fail(ps, "%%00 is not allowed in %s", what);
            i += 2;
        }
        if (k + 1 >= size) return fail(ps, "%s too long (at most %zu bytes)", what, size - 1);
        dst[k++] = (char)c;
    }
    dst[k] = '\0';
    return 0;
}

/* "[user:]password" before the '@'. Without a colon it is a password, as
 * in "redis://secret@host" (the form Redis's own tools accept). */
static int parse_userinfo(parser *ps, const char *s, size_t n, dq__url *u) {
    const char *colon = memchr(s, ':', n);
    if (colon == NULL) return decode_field(ps, "password", s, n, u->password, sizeof u->password);
    if (decode_field(ps, "user", s, (size_t)(colon - s), u->user, sizeof u->user) != 0) return DQ_EINVAL;
    return decode_field(ps, "password", colon + 1, n - (size_t)(colon - s) - 1, u->password,
                        sizeof u->password);
}

/* ------------------------------------------------------------ hosts and ports */

/* Where a node's host ends: a port, the next node, the db or the query.
 * The list as a whole ends at `end` (the master name's '#' or the NUL). */
static int ends_host(const char *p, const char *end) {
    return p == end || *p == ':' || *p == ',' || *p == '/' || *p == '?';
}

/* Where a node's port (or any text of the node) ends. */
static int ends_node(const char *p, const char *end) {
    return p == end || *p == ',' || *p == '/' || *p == '?';
}

static int copy_host(parser *ps, const char *s, size_t n, dq__addr *a) {
    if (n == 0) return fail(ps, "missing host");
    if (n >= sizeof a->host) return fail(ps, "host too long (at most %zu bytes)", sizeof a->host - 1);
    memcpy(a->host, s, n);
    a->host[n] = '\0';
    return 0;
}

/* "[v6addr]" at *p; leaves *p after the ']'. Only hex digits, ':' and '.'
 * (IPv4-mapped forms) are allowed inside; zone ids are not supported. */
static int parse_ipv6_host(parser *ps, const char **p, const char *end, dq__addr *a) {
    const char *open = *p, *close = memchr(open, ']', (size_t)(end - open));
    const char *c;
    if (close == NULL) return fail(ps, "unterminated '[' in IPv6 host");
    for (c = open + 1; c < close; c++)
        if (hex_value(*c) < 0 && *c != ':' && *c != '.')
            return fail(ps, "invalid character in IPv6 host (only hex digits, ':' and '.')");
    if (copy_host(ps, open + 1, (size_t)(close - open - 1), a) != 0) return DQ_EINVAL;
    *p = close + 1;
    if (!ends_host(*p, end)) {
        /* Quote only up to the end of this node: the query may follow. */
        const char *e = *p;
        char q[QUOTE_MAX + 4];
        while (!ends_node(e, end)) e++;
        return fail(ps, "trailing garbage '%s' after IPv6 host", shown(ps, q, *p, (size_t)(e - *p)));
    }
    return 0;
}

/* A host name or IPv4 address at *p. */
static int parse_name_host(parser *ps, const char **p, const char *end, dq__addr *a) {
    const char *s = *p, *e = s;
    while (!ends_host(e, end)) {
        char c = *e;
        if (!(is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '.' ||
              c == '_')) {
            char q[QUOTE_MAX + 4];
            return fail(ps, "invalid character '%s' in host", shown(ps, q, e, 1));
        }
        e++;
    }
    if (copy_host(ps, s, (size_t)(e - s), a) != 0) return DQ_EINVAL;
    *p = e;
    return 0;
}

/* ":port" at *p (the ':' included). */
static int parse_port(parser *ps, const char **p, const char *end, dq__addr *a) {
    const char *s = *p + 1, *e = s;
    long long v = 0;
    long got;
    while (!ends_node(e, end)) e++;
    got = read_digits(s, (size_t)(e - s), 65535, &v);
    if (got <= 0 || got != e - s || v == 0) {
        char q[QUOTE_MAX + 4];
        return fail(ps, "bad port '%s' (expected 1..65535)", shown(ps, q, s, (size_t)(e - s)));
    }
    a->port = (int)v;
    *p = e;
    return 0;
}

/* "host[:port][,host[:port]...]" at *p, up to '/', '?' or end; leaves *p
 * there. Each node gets default_port unless it names one. */
static int parse_nodes(parser *ps, const char **p, const char *end, int default_port, dq__url *u) {
    for (;;) {
        dq__addr *a = &u->nodes[u->nnodes];
        /* An empty node in a list is most likely a typo ("a,,b", "a,");
         * alone it is the single form's "missing host". */
        if (ends_node(*p, end) && (u->nnodes > 0 || **p == ','))
            return fail(ps, "empty host in the node list (no host between two ',' or at an end)");
        a->port = default_port;
        if (**p == '[' ? parse_ipv6_host(ps, p, end, a) : parse_name_host(ps, p, end, a))
            return DQ_EINVAL;
        if (**p == ':' && parse_port(ps, p, end, a) != 0) return DQ_EINVAL;
        u->nnodes++;
        if (*p == end || **p != ',') return 0;
        if (u->nnodes == DQ__URL_NODES_MAX)
            return fail(ps, "too many nodes (at most %d)", DQ__URL_NODES_MAX);
        (*p)++;
    }
}

/* ------------------------------------------------------------ db, query, master */

/* A db number in n bytes at s; "" means 0 only where empty_ok. */
static int parse_db(parser *ps, const char *s, size_t n, int empty_ok, dq__url *u) {
    long long v = 0;
    long got = read_digits(s, n, INT_MAX, &v);
    char q[QUOTE_MAX + 4];
    if (n == 0 && empty_ok) return 0;
    if (got <= 0) return fail(ps, "bad db '%s' (expected 0..%d)", shown(ps, q, s, n), INT_MAX);
    if ((size_t)got != n)
        return fail(ps, "trailing garbage '%s' after db", shown(ps, q, s + got, n - (size_t)got));
    u->db = (int)v;
    return 0;
}

/* 1 if the n bytes at s are exactly the NUL-terminated word. */
static int is_word(const char *s, size_t n, const char *word) {
    return strlen(word) == n && memcmp(s, word, n) == 0;
}

/* The sentinel query (n bytes at s, after the '?'): "name=value" pairs
 * joined by '&', each of sentinel_user and sentinel_password at most once,
 * in any order. Names and values are never quoted: a value with a raw '&'
 * would leave a piece of a password where a name is expected. A
 * sentinel_password last hides the master name that follows it. */
static int parse_query(parser *ps, const char *s, size_t n, dq__url *u) {
    const char *end = s + n;
    int number = 0, seen_user = 0, seen_password = 0;
    for (;;) {
        const char *amp = memchr(s, '&', (size_t)(end - s));
        const char *e = amp ? amp : end;
        const char *eq = memchr(s, '=', (size_t)(e - s));
        size_t name_len = eq ? (size_t)(eq - s) : 0;
        number++;
        if (e == s) return fail(ps, "empty query parameter (a stray '?' or '&')");
        if (eq == NULL)
            return fail(ps,
                        "query parameter %d has no '=' (expected sentinel_user=U or "
                        "sentinel_password=P; write '&' in a value as %%26)",
                        number);
        if (is_word(s, name_len, "sentinel_user")) {
            if (seen_user++) return fail(ps, "duplicate query parameter sentinel_user");
            if (decode_field(ps, "sentinel_user", eq + 1, (size_t)(e - eq - 1), u->sentinel_user,
                             sizeof u->sentinel_user) != 0)
                return DQ_EINVAL;
            u->master_hidden = 0;
        } else if (is_word(s, name_len, "sentinel_password")) {
            if (seen_password++) return fail(ps, "duplicate query parameter sentinel_password");
            if (decode_field(ps, "sentinel_password", eq + 1, (size_t)(e - eq - 1), u->sentinel_password,
                             sizeof u->sentinel_password) != 0)
                return DQ_EINVAL;
            u->master_hidden = 1;
        } else if (is_word(s, name_len, "sentinel_tls")) {
            size_t k = (size_t)(e - eq - 1);
            if (k == 3 && strncasecmp(eq + 1, "yes", 3) == 0) u->sentinel_tls = 1;
            else if (k == 2 && strncasecmp(eq + 1, "no", 2) == 0) u->sentinel_tls = 0;
            else return fail(ps, "sentinel_tls takes yes or no");
        } else {
            return fail(ps,
                        "unknown query parameter %d (only sentinel_user=, "
                        "sentinel_password= and sentinel_tls=; write '&' in a value as "
                        "%%26)",
                        number);
        }
        if (amp == NULL) return 0;
        s = amp + 1;
    }
}

/* The master name (n bytes at s, after the '#'). Never quoted: a raw '#'
 * in a password before it would put a piece of the password here. */
static int parse_master(parser *ps, const char *s, size_t n, dq__url *u) {
    size_t i;
    if (n == 0) return fail(ps, "empty master name after '#' (1..%d of A-Z a-z 0-9 _ . -)", MASTER_MAX);
    if (n > MASTER_MAX) return fail(ps, "master name too long (at most %d bytes)", MASTER_MAX);
    for (i = 0; i < n; i++) {
        char c = s[i];
        if (!(is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '.' ||
              c == '_'))
            return fail(ps, "invalid character in master name (only A-Z a-z 0-9 _ . -)");
    }
    memcpy(u->master, s, n);
    u->master[n] = '\0';
    return 0;
}

/* ------------------------------------------------------------ the forms */

static size_t mask_text(const char *text, size_t len, char *out, size_t size, size_t limit, int raw);


/* Everything after "redis://", "redis-sentinel://" or "redis-cluster://". */
static int parse_network(parser *ps, int topology, const char *rest, dq__url *u) {
    const char *at = strrchr(rest, '@');
    const char *p = rest, *frag, *end;
    const char *name = topology == DQ__TOPO_SENTINEL  ? "redis-sentinel://"
                       : topology == DQ__TOPO_CLUSTER ? "redis-cluster://"
                                                      : "redis://";
    u->topology = topology;
    if (at != NULL) {
        /* A raw '@' in a query value would make the last '@' fall inside
         * the query: the parse would go on with a piece of the sentinel
         * password as host. Refuse rather than connect somewhere odd (and
         * name a password's tail as a host in messages). */
        if (topology == DQ__TOPO_SENTINEL &&
            (contains(rest, (size_t)(at - rest), "sentinel_password=") ||
             contains(rest, (size_t)(at - rest), "sentinel_user=")))
            return fail(ps, "an '@' after the hosts (write '@' in query values as %%40)");
        if (parse_userinfo(ps, rest, (size_t)(at - rest), u) != 0) return DQ_EINVAL;
        p = at + 1;
    }
    frag = strrchr(p, '#');
    end = frag ? frag : p + strlen(p);
    if (at == NULL) {
        const char *e = p;
        while (e < end && *e != '/' && *e != '?') e++;
        ps->hide = !plain_nodes(p, (size_t)(e - p));
    }

    if (parse_nodes(ps, &p, end, topology == DQ__TOPO_SENTINEL ? SENTINEL_PORT : DEFAULT_PORT, u) != 0)
        return DQ_EINVAL;
    if (topology == DQ__TOPO_SINGLE) {
        if (u->nnodes > 1)
            return fail(ps, "redis:// takes one host (several: redis-sentinel:// or "
                            "redis-cluster://)");
        memcpy(u->host, u->nodes[0].host, sizeof u->host);
        u->port = u->nodes[0].port;
    }
    if (p < end && *p == '/') {
        const char *q = memchr(p, '?', (size_t)(end - p));
        const char *db_end = q ? q : end;
        if (parse_db(ps, p + 1, (size_t)(db_end - p - 1), 1, u) != 0) return DQ_EINVAL;
        if (topology == DQ__TOPO_CLUSTER && u->db != 0)
            return fail(ps, "redis-cluster:// takes no /db other than /0 (a cluster has only "
                            "db 0)");
        p = db_end;
    }
    if (p < end) { /* at the '?' */
        if (topology != DQ__TOPO_SENTINEL)
            return fail(ps,
                        "%s takes no ?query (sentinel_user and sentinel_password are for "
                        "redis-sentinel://)",
                        name);
        if (parse_query(ps, p + 1, (size_t)(end - p - 1), u) != 0) return DQ_EINVAL;
    }
    if (topology != DQ__TOPO_SENTINEL) {
        if (frag != NULL)
            return fail(ps, "%s takes no #fragment (#MASTER is for redis-sentinel://)", name);
        return 0;
    }
    if (frag == NULL)
        return fail(ps, "missing #MASTER at the end (the name of the master the sentinels "
                        "monitor)");
    return parse_master(ps, frag + 1, strlen(frag + 1), u);
}

/* Everything after "unix://": an absolute path, then "?db=N" at most. */
static int parse_unix(parser *ps, const char *rest, dq__url *u) {
    size_t n = strcspn(rest, "?");
    u->is_unix = 1;
    if (n == 0) return fail(ps, "missing socket path (expected unix:///path/to/redis.sock)");
    if (rest[0] != '/')
        return fail(ps, "socket path must be absolute (expected unix:///path/to/redis.sock)");
    if (n >= sizeof u->path)
        return fail(ps, "socket path too long (at most %zu bytes)", sizeof u->path - 1);
    memcpy(u->path, rest, n);
    u->path[n] = '\0';
    if (rest[n] == '\0') return 0;
    if (strncmp(rest + n, "?db=", 4) != 0) {
        /* Masked as a query: it may hold a sentinel_password. */
        char q[QUOTE_MAX + 4];
        const char *query = rest + n;
        mask_text(query, strlen(query), q, sizeof q, QUOTE_MAX + 3, 0);
        return fail(ps, "trailing garbage '%s' after socket path (only ?db=N is allowed)", q);
    }
    return parse_db(ps, rest + n + 4, strlen(rest + n + 4), 0, u);
}

/* ------------------------------------------------------------ masking */

/* Output of the masking, cut at unit boundaries: a unit (one byte, one
 * "\xHH" escape, one "***") is written whole or not at all, so a cut never
 * leaves half an escape. `mark` is the last boundary that still leaves room
 * for "...", where the text is cut when a unit does not fit. */
typedef struct masker {
    char *out;
    size_t limit, len, mark;
    int cut;
    int raw; /* 1: bytes as they are (dq__url_redact); 0: escaped */
} masker;

static void put_unit(masker *m, const char *s, size_t n) {
    if (m->cut) return;
    if (m->len + n > m->limit) {
        size_t dots = m->limit - m->mark < 3 ? m->limit - m->mark : 3;
        memcpy(m->out + m->mark, "...", dots);
        m->len = m->mark + dots;
        m->cut = 1;
        return;
    }
    memcpy(m->out + m->len, s, n);
    m->len += n;
    if (m->len + 3 <= m->limit) m->mark = m->len;
}

/* n bytes of text: unless raw, each non-printable or non-ASCII byte as
 * "\xHH", so a message stays one line of plain ASCII whatever the URL
 * holds. */
static void put_text(masker *m, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    size_t i;
    for (i = 0; i < n && !m->cut; i++) {
        unsigned char c = (unsigned char)s[i];
        if (m->raw || (c >= 0x20 && c < 0x7f)) {
            put_unit(m, (const char *)&s[i], 1);
        } else {
            char e[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
            put_unit(m, e, 4);
        }
    }
}

/* The query (n bytes at s, after the '?'): db= and sentinel_user= pieces as
 * they are, sentinel_password= with its value as "***", and any other piece
 * as "***" whole: in a URL that does not parse, an unknown piece may be the
 * tail of a password cut at a raw '&'. Returns 1 when the last piece was
 * hidden: a master name right after it may be a password's tail. */
static int put_query(masker *m, const char *s, size_t n) {
    static const char pw[] = "sentinel_password=";
    const char *end = s + n;
    for (;;) {
        const char *amp = memchr(s, '&', (size_t)(end - s));
        size_t k = (size_t)((amp ? amp : end) - s);
        int hidden = 1;
        if (k >= 3 && memcmp(s, "db=", 3) == 0) {
            put_text(m, s, k);
            hidden = 0;
        } else if ((k >= 14 && memcmp(s, "sentinel_user=", 14) == 0) ||
                   (k >= 13 && memcmp(s, "sentinel_tls=", 13) == 0)) {
            put_text(m, s, k);
            hidden = 0;
        } else if (k >= sizeof pw - 1 && memcmp(s, pw, sizeof pw - 1) == 0) {
            put_text(m, pw, sizeof pw - 1);
            put_unit(m, "***", 3);
        } else if (k > 0) {
            put_unit(m, "***", 3);
        }
        if (amp == NULL) return hidden;
        put_unit(m, "&", 1);
        s = amp + 1;
    }
}

/* Writes the masked text (len bytes at text) into m. info..info_end
 * (info_end at the '@') is the user info to hide, or info is NULL when
 * there is none. The query starts at the first '?' after it and the
 * fragment at the last '#', as in the parse. */
static void mask_into(masker *m, const char *text, size_t len, const char *info, const char *info_end) {
    const char *p = text, *end = text + len, *frag, *stop, *query;
    int hide_master = 0;
    if (info != NULL) {
        put_text(m, text, (size_t)(info - text));
        put_unit(m, "***", 3);
        p = info_end;
    }
    frag = memrchr(p, '#', (size_t)(end - p));
    stop = frag ? frag : end;
    if (info != NULL && contains(info, (size_t)(info_end - info), "sentinel_password=")) {
        /* A raw '@' in a sentinel password puts the last '@' inside the
         * query: what follows it, up to the master name, is then that
         * password's tail and more query, so it is masked as query
         * pieces are. */
        put_unit(m, "@", 1);
        hide_master = put_query(m, info_end + 1, (size_t)(stop - info_end - 1));
    } else {
        const char *sep = info == NULL ? memmem(p, (size_t)(stop - p), "://", 3) : NULL;
        query = memchr(p, '?', (size_t)(stop - p));
        if (sep != NULL && (query == NULL || sep < query)) {
            /* No user info: the hosts are shown if they read as hosts. */
            const char *hosts = sep + 3, *hosts_end = hosts;
            while (hosts_end < stop && *hosts_end != '/' && *hosts_end != '?') hosts_end++;
            if (!plain_nodes(hosts, (size_t)(hosts_end - hosts))) {
                put_text(m, p, (size_t)(hosts - p));
                put_unit(m, "***", 3);
                p = hosts_end;
                hide_master = 1; /* a raw '#' in that password */
            }
        }
        put_text(m, p, (size_t)((query ? query : stop) - p));
        if (query != NULL) {
            put_unit(m, "?", 1);
            hide_master |= put_query(m, query + 1, (size_t)(stop - query - 1));
        }
    }
    if (frag != NULL && hide_master) put_unit(m, "#***", 4);
    else if (frag != NULL) put_text(m, frag, (size_t)(end - frag));
}

/* Masks len bytes at text as dq__url_mask says into out (size bytes, at
 * most limit before the NUL); returns the length written. */
static size_t mask_text(const char *text, size_t len, char *out, size_t size, size_t limit, int raw) {
    masker m = {out, 0, 0, 0, 0, raw};
    const char *at, *sep, *info;
    if (out == NULL || size == 0) return 0;
    m.limit = size - 1 < limit ? size - 1 : limit;
    if (text == NULL) {
        out[0] = '\0';
        return 0;
    }
    /* Whatever stands before the last '@' is hidden, from the "://" on or
     * from the start when there is no "://" before it (a scheme left out,
     * as in "pw@host"). */
    at = memrchr(text, '@', len);
    sep = memmem(text, len, "://", 3);
    info = sep != NULL && at != NULL && sep + 3 <= at ? sep + 3 : text;
    mask_into(&m, text, len, at ? info : NULL, at);
    out[m.len] = '\0';
    return m.len;
}

void dq__url_mask(const char *text, char *out, size_t size) {
    mask_text(text, text ? strlen(text) : 0, out, size, DQ__URL_MASKED_MAX, 0);
}

size_t dq__url_redact(const void *text, size_t len, char *out, size_t size) {
    return mask_text(text, len, out, size, (size_t)-1, 1);
}

const char *dq__url_master_shown(const dq__url *u) { return u->master_hidden ? "***" : u->master; }

/* ------------------------------------------------------------ entry */

/* A TLS form: TLS to every node, and to the sentinels unless the query
 * says sentinel_tls=no. */
static int parse_tls(parser *ps, int topology, const char *rest, dq__url *u) {
    u->tls = u->sentinel_tls = 1;
    return parse_network(ps, topology, rest, u);
}

int dq__url_parse(const char *text, dq__url *out, char *err, size_t errlen) {
    parser ps = {err, errlen, 0};
    dq__url u;
    const char *sep;
    size_t scheme_len;
    int rc;
    char q[QUOTE_MAX + 4];

    if (err != NULL && errlen > 0) err[0] = '\0';
    if (out == NULL) return fail(&ps, "no output");
    if (text == NULL || text[0] == '\0') return fail(&ps, "empty URL");
    sep = strstr(text, "://");
    if (sep == NULL) return fail(&ps, "missing scheme (expected " SCHEMES ")");
    scheme_len = (size_t)(sep - text);

    memset(&u, 0, sizeof u);
    /* Schemes are case-insensitive (RFC 3986, 3.1). */
    if (scheme_len == 5 && strncasecmp(text, "redis", 5) == 0)
        rc = parse_network(&ps, DQ__TOPO_SINGLE, sep + 3, &u);
    else if (scheme_len == 14 && strncasecmp(text, "redis-sentinel", 14) == 0)
        rc = parse_network(&ps, DQ__TOPO_SENTINEL, sep + 3, &u);
    else if (scheme_len == 13 && strncasecmp(text, "redis-cluster", 13) == 0)
        rc = parse_network(&ps, DQ__TOPO_CLUSTER, sep + 3, &u);
    else if (scheme_len == 4 && strncasecmp(text, "unix", 4) == 0) rc = parse_unix(&ps, sep + 3, &u);
    else if (scheme_len == 6 && strncasecmp(text, "rediss", 6) == 0)
        rc = parse_tls(&ps, DQ__TOPO_SINGLE, sep + 3, &u);
    else if (scheme_len == 15 && strncasecmp(text, "rediss-sentinel", 15) == 0)
        rc = parse_tls(&ps, DQ__TOPO_SENTINEL, sep + 3, &u);
    else if (scheme_len == 14 && strncasecmp(text, "rediss-cluster", 14) == 0)
        rc = parse_tls(&ps, DQ__TOPO_CLUSTER, sep + 3, &u);
    else rc = fail(&ps, "unknown scheme '%s' (expected " SCHEMES ")", quote(q, text, scheme_len));

    if (rc == 0) {
        /* The user info is what the parse took it to be: all before the
         * last '@' in a network URL, nothing in a socket path. */
        const char *at = u.is_unix ? NULL : strrchr(sep + 3, '@');
        masker m = {u.masked, DQ__URL_MASKED_MAX, 0, 0, 0, 0};
        mask_into(&m, text, strlen(text), at ? sep + 3 : NULL, at);
        u.masked[m.len] = '\0';
        *out = u;
    }
    /* Only a complete parse reaches *out, and the stack copy of the
     * passwords is wiped either way. */
    explicit_bzero(&u, sizeof u);
    return rc;
}
