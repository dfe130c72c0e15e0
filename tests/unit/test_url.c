/*
 * test_url.c - unit tests of dq__url_parse, dq__url_mask and dq__url_redact
 * (src/util/url.c):
 * every accepted form (single node, unix socket, sentinel, cluster) with each
 * field checked, every rejection with its exact message, and the promises
 * around them (out untouched on error, no password in messages nor in the
 * masked text however long or malformed the URL, field length limits at
 * their exact edges; a master name that may be a sentinel password's tail
 * hidden).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "util.h"

typedef struct good_case {
    const char *url;
    int is_unix;
    const char *host;
    int port;
    const char *path;
    const char *user;
    const char *password;
    int db;
} good_case;

static const good_case good_cases[] = {
    {"redis://localhost", 0, "localhost", 6379, "", "", "", 0},
    {"redis://127.0.0.1:6380", 0, "127.0.0.1", 6380, "", "", "", 0},
    {"redis://host:6379/3", 0, "host", 6379, "", "", "", 3},
    {"redis://host/7", 0, "host", 6379, "", "", "", 7},
    {"redis://host/", 0, "host", 6379, "", "", "", 0},
    {"redis://:pass@host", 0, "host", 6379, "", "", "pass", 0},
    {"redis://secret@host", 0, "host", 6379, "", "", "secret", 0},
    {"redis://user:pass@host:7000/2", 0, "host", 7000, "", "user", "pass", 2},
    {"redis://user:@host", 0, "host", 6379, "", "user", "", 0},
    {"redis://[::1]:6380", 0, "::1", 6380, "", "", "", 0},
    {"redis://[::1]", 0, "::1", 6379, "", "", "", 0},
    {"redis://[::ffff:127.0.0.1]/5", 0, "::ffff:127.0.0.1", 6379, "", "", "", 5},
    {"redis://u:p@[2001:DB8::1]:1/1", 0, "2001:DB8::1", 1, "", "u", "p", 1},
    {"unix:///tmp/r.sock", 1, "", 0, "/tmp/r.sock", "", "", 0},
    {"unix:///tmp/r.sock?db=2", 1, "", 0, "/tmp/r.sock", "", "", 2},
    {"unix:///var/run/redis/redis-server.sock?db=0", 1, "", 0, "/var/run/redis/redis-server.sock", "",
     "", 0},
    /* Percent-escapes in user and password. */
    {"redis://u%40x:p%3Aw%25%2f@h", 0, "h", 6379, "", "u@x", "p:w%/", 0},
    {"redis://%7e:%C3%A9@h", 0, "h", 6379, "", "~", "\xc3\xa9", 0},
    /* The last '@' ends the user info, so raw '@', '/' and ':' in a password
     * still parse as meant. */
    {"redis://u:p@ss/w:x@h:1234/9", 0, "h", 1234, "", "u", "p@ss/w:x", 9},
    {"REDIS://H", 0, "H", 6379, "", "", "", 0},
    {"Unix:///s", 1, "", 0, "/s", "", "", 0},
    {"redis://my-host_1.example.com", 0, "my-host_1.example.com", 6379, "", "", "", 0},
    {"redis://h:1/0", 0, "h", 1, "", "", "", 0},
    {"redis://h:65535/2147483647", 0, "h", 65535, "", "", "", 2147483647},
    {"redis://h:06379/007", 0, "h", 6379, "", "", "", 7},
};

static void check_good(const good_case *g) {
    dq__url u;
    char err[200] = "stale";
    int rc = dq__url_parse(g->url, &u, err, sizeof err);
    if (rc != 0) print_error("url %s: %s\n", g->url, err);
    assert_int_equal(rc, 0);
    assert_string_equal(err, "");
    assert_int_equal(u.is_unix, g->is_unix);
    assert_string_equal(u.host, g->host);
    assert_int_equal(u.port, g->port);
    assert_string_equal(u.path, g->path);
    assert_string_equal(u.user, g->user);
    assert_string_equal(u.password, g->password);
    assert_int_equal(u.db, g->db);
    assert_int_equal(u.topology, DQ__TOPO_SINGLE);
    /* A TCP URL is a list of one node; a socket has none. */
    assert_int_equal(u.nnodes, g->is_unix ? 0 : 1);
    if (!g->is_unix) {
        assert_string_equal(u.nodes[0].host, g->host);
        assert_int_equal(u.nodes[0].port, g->port);
    }
    assert_string_equal(u.master, "");
    assert_string_equal(u.sentinel_user, "");
    assert_string_equal(u.sentinel_password, "");
}

static void test_url_good(void **state) {
    size_t i;
    (void)state;
    for (i = 0; i < sizeof good_cases / sizeof good_cases[0]; i++) check_good(&good_cases[i]);
}

/* The forms with a node list. nodes is "host:port,..." with IPv6 hosts in
 * brackets, as format_nodes writes u.nodes. */
typedef struct multi_case {
    const char *url;
    int topology;
    const char *nodes;
    const char *user;
    const char *password;
    int db;
    const char *sentinel_user;
    const char *sentinel_password;
    const char *master;
} multi_case;

#define SENT DQ__TOPO_SENTINEL
#define CLUS DQ__TOPO_CLUSTER
static const multi_case multi_cases[] = {
    {"redis-sentinel://s1#mymaster", SENT, "s1:26379", "", "", 0, "", "", "mymaster"},
    {"redis-sentinel://s1:5000,s2#m", SENT, "s1:5000,s2:26379", "", "", 0, "", "", "m"},
    {"redis-sentinel://s1,s2:5001,s3:5002/3#m", SENT, "s1:26379,s2:5001,s3:5002", "", "", 3, "", "",
     "m"},
    {"redis-sentinel://u:p@s1,s2#Master.of-all_1", SENT, "s1:26379,s2:26379", "u", "p", 0, "", "",
     "Master.of-all_1"},
    {"redis-sentinel://pw@s/#m", SENT, "s:26379", "", "pw", 0, "", "", "m"},
    {"redis-sentinel://s?sentinel_user=su&sentinel_password=sp#m", SENT, "s:26379", "", "", 0, "su",
     "sp", "m"},
    {"redis-sentinel://s/2?sentinel_password=sp&sentinel_user=su#m", SENT, "s:26379", "", "", 2, "su",
     "sp", "m"},
    {"redis-sentinel://s?sentinel_password=only#m", SENT, "s:26379", "", "", 0, "", "only", "m"},
    {"redis-sentinel://s?sentinel_user=#m", SENT, "s:26379", "", "", 0, "", "", "m"},
    /* percent-decoding of both sentinel fields; '&', '#' and '@' escaped */
    {"redis-sentinel://s?sentinel_user=s%20u%2B&sentinel_password=a%26b%23c%40d%25%3d#m", SENT,
     "s:26379", "", "", 0, "s u+", "a&b#c@d%=", "m"},
    /* the last '#' starts the master name, so a raw '#' in a value works */
    {"redis-sentinel://s?sentinel_password=a#b#m", SENT, "s:26379", "", "", 0, "", "a#b", "m"},
    /* the last '@' ends the user info: raw '@', ':', '/', '#', '?' in it */
    {"redis-sentinel://u:p@s#w/x?y:z@s1,s2#m", SENT, "s1:26379,s2:26379", "u", "p@s#w/x?y:z", 0, "", "",
     "m"},
    {"redis-sentinel://:pw@[::1]:26380,[fe80::2],h:1#m", SENT, "[::1]:26380,[fe80::2]:26379,h:1", "",
     "pw", 0, "", "", "m"},
    {"REDIS-SENTINEL://H#M", SENT, "H:26379", "", "", 0, "", "", "M"},
    {"redis-cluster://n1", CLUS, "n1:6379", "", "", 0, "", "", ""},
    {"redis-cluster://u:p@n1:7000,n2:7001,[::1]:7002", CLUS, "n1:7000,n2:7001,[::1]:7002", "u", "p", 0,
     "", "", ""},
    {"redis-cluster://n1,n2/0", CLUS, "n1:6379,n2:6379", "", "", 0, "", "", ""},
    {"redis-cluster://n1/", CLUS, "n1:6379", "", "", 0, "", "", ""},
    {"redis-cluster://:p%40ss@[2001:db8::1]", CLUS, "[2001:db8::1]:6379", "", "p@ss", 0, "", "", ""},
    {"Redis-Cluster://N", CLUS, "N:6379", "", "", 0, "", "", ""},
};

/* u.nodes as "host:port,...", IPv6 hosts in brackets. */
static const char *format_nodes(const dq__url *u, char *buf, size_t size) {
    size_t len = 0;
    int i;
    buf[0] = '\0';
    for (i = 0; i < u->nnodes; i++) {
        const char *h = u->nodes[i].host;
        int v6 = strchr(h, ':') != NULL;
        int n = snprintf(buf + len, size - len, "%s%s%s%s:%d", i ? "," : "", v6 ? "[" : "", h,
                         v6 ? "]" : "", u->nodes[i].port);
        assert_true(n > 0 && (size_t)n < size - len);
        len += (size_t)n;
    }
    return buf;
}

static void test_url_multi(void **state) {
    size_t i;
    (void)state;
    for (i = 0; i < sizeof multi_cases / sizeof multi_cases[0]; i++) {
        const multi_case *g = &multi_cases[i];
        dq__url u;
        char err[200] = "stale", nodes[600];
        int rc = dq__url_parse(g->url, &u, err, sizeof err);
        if (rc != 0) print_error("url %s: %s\n", g->url, err);
        assert_int_equal(rc, 0);
        assert_string_equal(err, "");
        assert_int_equal(u.topology, g->topology);
        assert_int_equal(u.is_unix, 0);
        assert_string_equal(format_nodes(&u, nodes, sizeof nodes), g->nodes);
        assert_string_equal(u.user, g->user);
        assert_string_equal(u.password, g->password);
        assert_int_equal(u.db, g->db);
        assert_string_equal(u.sentinel_user, g->sentinel_user);
        assert_string_equal(u.sentinel_password, g->sentinel_password);
        assert_string_equal(u.master, g->master);
        /* host/port name the single form's node only */
        assert_string_equal(u.host, "");
        assert_int_equal(u.port, 0);
    }
}

/* Up to DQ__URL_NODES_MAX nodes, in either list form. */
static void test_url_nodes_max(void **state) {
    static const char *const forms[][2] = {{"redis-sentinel://", "#m"}, {"redis-cluster://", ""}};
    size_t f;
    (void)state;
    for (f = 0; f < 2; f++) {
        char url[600], err[200];
        dq__url u;
        int i;
        strcpy(url, forms[f][0]);
        for (i = 0; i < DQ__URL_NODES_MAX; i++)
            sprintf(url + strlen(url), "%sn%d:%d", i ? "," : "", i, 7000 + i);
        strcat(url, forms[f][1]);
        assert_int_equal(dq__url_parse(url, &u, err, sizeof err), 0);
        assert_int_equal(u.nnodes, DQ__URL_NODES_MAX);
        assert_string_equal(u.nodes[15].host, "n15");
        assert_int_equal(u.nodes[15].port, 7015);
        /* one more is refused */
        strcpy(url, forms[f][0]);
        for (i = 0; i <= DQ__URL_NODES_MAX; i++) sprintf(url + strlen(url), "%sn%d", i ? "," : "", i);
        strcat(url, forms[f][1]);
        assert_int_equal(dq__url_parse(url, &u, err, sizeof err), DQ_EINVAL);
        assert_string_equal(err, "too many nodes (at most 16)");
    }
}

#define SCHEMES "redis://, redis-sentinel://, redis-cluster:// (rediss...: TLS) or unix://"
#define NO_QUERY(scheme) \
    scheme " takes no ?query (sentinel_user and sentinel_password are for redis-sentinel://)"
#define NO_FRAGMENT(scheme) scheme " takes no #fragment (#MASTER is for redis-sentinel://)"
#define EMPTY_NODE "empty host in the node list (no host between two ',' or at an end)"
#define MISSING_MASTER "missing #MASTER at the end (the name of the master the sentinels monitor)"
#define UNKNOWN_PARAM(n)                                                           \
    "unknown query parameter " #n " (only sentinel_user=, sentinel_password= and " \
    "sentinel_tls=; write '&' in a value as %26)"

/* A URL and the text expected of it: a rejection's reason, or the masked
 * form. */
typedef struct url_case {
    const char *url;
    const char *want;
} url_case;

static const url_case bad_cases[] = {
    {"", "empty URL"},
    {"localhost:6379", "missing scheme (expected " SCHEMES ")"},
    {"redis:/host", "missing scheme (expected " SCHEMES ")"},
    {"http://h", "unknown scheme 'http' (expected " SCHEMES ")"},
    {"://h", "unknown scheme '' (expected " SCHEMES ")"},
    {"redisss-sentinel://h#m", "unknown scheme 'redisss-sentinel' (expected " SCHEMES ")"},
    {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa://h",
     "unknown scheme 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...' (expected " SCHEMES ")"},
    {"re\tdis://h", "unknown scheme 're?dis' (expected " SCHEMES ")"},
    {"redisss://h", "unknown scheme 'redisss' (expected " SCHEMES ")"},
    {"rediss-sentinel://h?sentinel_tls=off#m", "sentinel_tls takes yes or no"},
    {"rediss://h?sentinel_tls=no", NO_QUERY("redis://")},
    {"redis://", "missing host"},
    {"redis://:6379", "missing host"},
    {"redis:///2", "missing host"},
    {"redis://u:p@", "missing host"},
    {"redis://u:p@/2", "missing host"},
    {"redis://[]", "missing host"},
    {"redis://[]:1", "missing host"},
    {"redis://h:0", "bad port '0' (expected 1..65535)"},
    {"redis://h:00000", "bad port '00000' (expected 1..65535)"},
    {"redis://h:65536", "bad port '65536' (expected 1..65535)"},
    {"redis://h:", "bad port '' (expected 1..65535)"},
    {"redis://h:/2", "bad port '' (expected 1..65535)"},
    {"redis://h:12a", "bad port '***' (expected 1..65535)"},
    {"redis://h:-1", "bad port '***' (expected 1..65535)"},
    {"redis://h:+1", "bad port '***' (expected 1..65535)"},
    {"redis://h: 1", "bad port '***' (expected 1..65535)"},
    {"redis://h:1:2", "bad port '***' (expected 1..65535)"},
    {"redis://h:6379?x=1", NO_QUERY("redis://")},
    {"redis://h:99999999999999999999999", "bad port '***' (expected 1..65535)"},
    {"redis://h/x", "bad db 'x' (expected 0..2147483647)"},
    {"redis://h/-1", "bad db '-1' (expected 0..2147483647)"},
    {"redis://h/+1", "bad db '+1' (expected 0..2147483647)"},
    {"redis://h/2147483648", "bad db '2147483648' (expected 0..2147483647)"},
    {"redis://h/99999999999999999999999", "bad db '99999999999999999999999' (expected 0..2147483647)"},
    {"redis://h/3/4", "trailing garbage '/4' after db"},
    {"redis://h/3?x=1", NO_QUERY("redis://")},
    {"redis://h:1/3x", "trailing garbage 'x' after db"},
    {"redis://h/3 ", "trailing garbage ' ' after db"},
    {"redis://[::1", "unterminated '[' in IPv6 host"},
    {"redis://[::1:6379/2", "unterminated '[' in IPv6 host"},
    {"redis://[::1]x", "trailing garbage 'x' after IPv6 host"},
    {"redis://[::1]]", "trailing garbage ']' after IPv6 host"},
    {"redis://[::g]", "invalid character in IPv6 host (only hex digits, ':' and '.')"},
    {"redis://[fe80::1%25eth0]", "invalid character in IPv6 host (only hex digits, ':' and '.')"},
    {"redis://h?x", NO_QUERY("redis://")},
    {"redis://h#x", NO_FRAGMENT("redis://")},
    {"redis://h/1#x", NO_FRAGMENT("redis://")},
    {"redis://a,b", "redis:// takes one host (several: redis-sentinel:// or redis-cluster://)"},
    {"redis://a:1,b:2/3", "redis:// takes one host (several: redis-sentinel:// or redis-cluster://)"},
    {"redis://h st", "invalid character ' ' in host"},
    {"redis://h\n", "invalid character '?' in host"},
    {"redis://a[b]", "invalid character '[' in host"},
    {"unix://", "missing socket path (expected unix:///path/to/redis.sock)"},
    {"unix://?db=1", "missing socket path (expected unix:///path/to/redis.sock)"},
    {"unix://tmp/r.sock", "socket path must be absolute (expected unix:///path/to/redis.sock)"},
    {"unix:///tmp/r.sock?db=", "bad db '' (expected 0..2147483647)"},
    {"unix:///tmp/r.sock?db=x", "bad db 'x' (expected 0..2147483647)"},
    {"unix:///tmp/r.sock?db=-2", "bad db '-2' (expected 0..2147483647)"},
    {"unix:///tmp/r.sock?db=2147483648", "bad db '2147483648' (expected 0..2147483647)"},
    {"unix:///tmp/r.sock?db=2&x=1", "trailing garbage '&x=1' after db"},
    {"unix:///tmp/r.sock?foo=1", "trailing garbage '?***' after socket path (only ?db=N is allowed)"},
    {"unix:///tmp/r.sock?", "trailing garbage '?' after socket path (only ?db=N is allowed)"},
    {"unix:///tmp/r.sock?DB=1", "trailing garbage '?***' after socket path (only ?db=N is allowed)"},
    {"redis://u:p%zz@h", "bad percent-escape in password (write a literal '%' as %25)"},
    {"redis://u:p%@h", "bad percent-escape in password (write a literal '%' as %25)"},
    {"redis://u:p%4@h", "bad percent-escape in password (write a literal '%' as %25)"},
    {"redis://u%4:p@h", "bad percent-escape in user (write a literal '%' as %25)"},
    {"redis://u%g0:p@h", "bad percent-escape in user (write a literal '%' as %25)"},
    {"redis://p%0@h", "bad percent-escape in password (write a literal '%' as %25)"},
    {"redis://u:p%00@h", "%00 is not allowed in password"},
    {"redis://%00:p@h", "%00 is not allowed in user"},
    /* redis-sentinel:// */
    {"redis-sentinel://h", MISSING_MASTER},
    {"redis-sentinel://u:p@h1,h2/3?sentinel_user=x", MISSING_MASTER},
    {"redis-sentinel://h#", "empty master name after '#' (1..127 of A-Z a-z 0-9 _ . -)"},
    {"redis-sentinel://h#my master", "invalid character in master name (only A-Z a-z 0-9 _ . -)"},
    {"redis-sentinel://h#m?x", "invalid character in master name (only A-Z a-z 0-9 _ . -)"},
    {"redis-sentinel://h#m/1", "invalid character in master name (only A-Z a-z 0-9 _ . -)"},
    {"redis-sentinel://h#m\xc3\xa9", "invalid character in master name (only A-Z a-z 0-9 _ . -)"},
    {"redis-sentinel://#m", "missing host"},
    {"redis-sentinel:///1#m", "missing host"},
    {"redis-sentinel://u:p@#m", "missing host"},
    {"redis-sentinel://:26379#m", "missing host"},
    {"redis-sentinel://a,,b#m", EMPTY_NODE},
    {"redis-sentinel://a,#m", EMPTY_NODE},
    {"redis-sentinel://,a#m", EMPTY_NODE},
    {"redis-sentinel://,#m", EMPTY_NODE},
    {"redis-sentinel://a,/1#m", EMPTY_NODE},
    {"redis-sentinel://a,?sentinel_user=u#m", EMPTY_NODE},
    {"redis-sentinel://a,:1#m", "missing host"},
    {"redis-sentinel://a,[]#m", "missing host"},
    {"redis-sentinel://a:0#m", "bad port '0' (expected 1..65535)"},
    {"redis-sentinel://a:x,b#m", "bad port '***' (expected 1..65535)"},
    {"redis-sentinel://a,b:65536#m", "bad port '65536' (expected 1..65535)"},
    {"redis-sentinel://a,b:#m", "bad port '' (expected 1..65535)"},
    {"redis-sentinel://a:1:2,b#m", "bad port '***' (expected 1..65535)"},
    {"redis-sentinel://a b#m", "invalid character ' ' in host"},
    {"redis-sentinel://a;b#m", "invalid character ';' in host"},
    {"redis-sentinel://[::1#m", "unterminated '[' in IPv6 host"},
    {"redis-sentinel://[::1]x,b#m", "trailing garbage 'x' after IPv6 host"},
    /* the quote stops at the node's end, before any query */
    {"redis-sentinel://[::1]x?sentinel_password=p#m", "trailing garbage 'x' after IPv6 host"},
    {"redis-sentinel://h/x#m", "bad db 'x' (expected 0..2147483647)"},
    {"redis-sentinel://h/1x?sentinel_user=u#m", "trailing garbage 'x' after db"},
    {"redis-sentinel://h?foo=1#m", UNKNOWN_PARAM(1)},
    {"redis-sentinel://h?sentinel_user=u&foo=1#m", UNKNOWN_PARAM(2)},
    {"redis-sentinel://h?db=1#m", UNKNOWN_PARAM(1)},
    {"redis-sentinel://h?Sentinel_User=u#m", UNKNOWN_PARAM(1)},
    {"redis-sentinel://h?sentinel_password=a&b#m",
     "query parameter 2 has no '=' (expected sentinel_user=U or sentinel_password=P; write '&' "
     "in a value as %26)"},
    {"redis-sentinel://h?sentinel_user#m",
     "query parameter 1 has no '=' (expected sentinel_user=U or sentinel_password=P; write '&' "
     "in a value as %26)"},
    {"redis-sentinel://h?sentinel_user=a&sentinel_user=b#m", "duplicate query parameter sentinel_user"},
    {"redis-sentinel://h?sentinel_password=a&sentinel_user=u&sentinel_password=a#m",
     "duplicate query parameter sentinel_password"},
    {"redis-sentinel://h?#m", "empty query parameter (a stray '?' or '&')"},
    {"redis-sentinel://h?sentinel_user=u&#m", "empty query parameter (a stray '?' or '&')"},
    {"redis-sentinel://h?&sentinel_user=u#m", "empty query parameter (a stray '?' or '&')"},
    {"redis-sentinel://h?sentinel_password=%zz#m",
     "bad percent-escape in sentinel_password (write a literal '%' as %25)"},
    {"redis-sentinel://h?sentinel_user=%4#m",
     "bad percent-escape in sentinel_user (write a literal '%' as %25)"},
    {"redis-sentinel://h?sentinel_password=%00#m", "%00 is not allowed in sentinel_password"},
    /* a raw '@' in the query would make the host list a piece of it */
    {"redis-sentinel://h?sentinel_password=se@cret#m",
     "an '@' after the hosts (write '@' in query values as %40)"},
    {"redis-sentinel://:p@h?sentinel_user=a@b#m",
     "an '@' after the hosts (write '@' in query values as %40)"},
    /* redis-cluster:// */
    {"redis-cluster://", "missing host"},
    {"redis-cluster://u:p@", "missing host"},
    {"redis-cluster://a,,b", EMPTY_NODE},
    {"redis-cluster://a,b,", EMPTY_NODE},
    {"redis-cluster://a,/0", EMPTY_NODE},
    {"redis-cluster://a:99999", "bad port '99999' (expected 1..65535)"},
    {"redis-cluster://a,b/5", "redis-cluster:// takes no /db other than /0 (a cluster has only db 0)"},
    {"redis-cluster://a/00001", "redis-cluster:// takes no /db other than /0 (a cluster has only db 0)"},
    {"redis-cluster://a/x", "bad db 'x' (expected 0..2147483647)"},
    {"redis-cluster://a?x=1", NO_QUERY("redis-cluster://")},
    {"redis-cluster://a/0?x=1", NO_QUERY("redis-cluster://")},
    {"redis-cluster://a#m", NO_FRAGMENT("redis-cluster://")},
    {"redis-cluster://a,b/0#m", NO_FRAGMENT("redis-cluster://")},
};

static void test_url_bad(void **state) {
    size_t i;
    (void)state;
    for (i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        dq__url u;
        char err[200] = "";
        int rc = dq__url_parse(bad_cases[i].url, &u, err, sizeof err);
        if (rc != DQ_EINVAL || strcmp(err, bad_cases[i].want) != 0)
            print_error("url [%s]: rc %d, err [%s]\n", bad_cases[i].url, rc, err);
        assert_int_equal(rc, DQ_EINVAL);
        assert_string_equal(err, bad_cases[i].want);
    }
}

/* The TLS forms: TLS to the nodes, and to the sentinels unless
 * sentinel_tls=no; the plain forms: none, unless sentinel_tls=yes. */
static void test_url_tls(void **state) {
    static const struct {
        const char *url;
        int topology, tls, sentinel_tls;
    } cases[] = {
        {"rediss://h", DQ__TOPO_SINGLE, 1, 1},
        {"REDISS://u:p@h:6380/2", DQ__TOPO_SINGLE, 1, 1},
        {"rediss-cluster://a,b:7001", DQ__TOPO_CLUSTER, 1, 1},
        {"rediss-sentinel://s1,s2#m", DQ__TOPO_SENTINEL, 1, 1},
        {"rediss-sentinel://s1?sentinel_tls=no#m", DQ__TOPO_SENTINEL, 1, 0},
        {"rediss-sentinel://s1?sentinel_user=u&sentinel_tls=NO#m", DQ__TOPO_SENTINEL, 1, 0},
        {"redis-sentinel://s1?sentinel_tls=yes#m", DQ__TOPO_SENTINEL, 0, 1},
        {"redis://h", DQ__TOPO_SINGLE, 0, 0},
        {"redis-cluster://h", DQ__TOPO_CLUSTER, 0, 0},
    };
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dq__url u;
        char err[200] = "";
        assert_int_equal(dq__url_parse(cases[i].url, &u, err, sizeof err), 0);
        assert_int_equal(u.topology, cases[i].topology);
        assert_int_equal(u.tls, cases[i].tls);
        assert_int_equal(u.sentinel_tls, cases[i].sentinel_tls);
    }
    dq__url u;
    assert_int_equal(
        dq__url_parse("rediss-sentinel://s?sentinel_tls=no&sentinel_password=x#m", &u, NULL, 0), 0);
    assert_string_equal(u.masked, "rediss-sentinel://s?sentinel_tls=no&sentinel_password=***#***");
}

static void test_url_null_arguments(void **state) {
    dq__url u;
    char err[64] = "";
    (void)state;
    assert_int_equal(dq__url_parse(NULL, &u, err, sizeof err), DQ_EINVAL);
    assert_string_equal(err, "empty URL");
    assert_int_equal(dq__url_parse("redis://h", NULL, err, sizeof err), DQ_EINVAL);
    assert_string_equal(err, "no output");
    /* No room for a reason is fine on both paths. */
    assert_int_equal(dq__url_parse("redis://h:0", &u, NULL, 0), DQ_EINVAL);
    assert_int_equal(dq__url_parse("redis://h:0", &u, NULL, 10), DQ_EINVAL);
    err[0] = 'x';
    assert_int_equal(dq__url_parse("redis://h:0", &u, err, 0), DQ_EINVAL);
    assert_int_equal(err[0], 'x');
    assert_int_equal(dq__url_parse("redis://h", &u, NULL, 0), 0);
    assert_string_equal(u.host, "h");
}

static void test_url_err_truncated(void **state) {
    dq__url u;
    char err[8];
    (void)state;
    memset(err, 'z', sizeof err);
    assert_int_equal(dq__url_parse("redis://h:0", &u, err, 5), DQ_EINVAL);
    assert_string_equal(err, "bad ");
    assert_int_equal(err[5], 'z');
}

/* On failure *out keeps every byte it had, even after a parse that got as
 * far as filling the user, password and host. */
static void test_url_out_untouched_on_error(void **state) {
    static const char *const urls[] = {"redis://u:p@host:0", "redis://u:p@host/x", "unix:///s?db=x",
                                       "http://h", ""};
    size_t i;
    (void)state;
    for (i = 0; i < sizeof urls / sizeof urls[0]; i++) {
        dq__url u, before;
        memset(&u, 0xA5, sizeof u);
        memcpy(&before, &u, sizeof u);
        assert_int_equal(dq__url_parse(urls[i], &u, NULL, 0), DQ_EINVAL);
        assert_memory_equal(&u, &before, sizeof u);
    }
}

/* A success overwrites every field: nothing left from an earlier parse. */
static void test_url_resets_fields(void **state) {
    dq__url u;
    (void)state;
    assert_int_equal(dq__url_parse("redis://user:pw@h:1/4", &u, NULL, 0), 0);
    assert_int_equal(dq__url_parse("unix:///s", &u, NULL, 0), 0);
    assert_int_equal(u.is_unix, 1);
    assert_string_equal(u.host, "");
    assert_int_equal(u.port, 0);
    assert_string_equal(u.user, "");
    assert_string_equal(u.password, "");
    assert_int_equal(u.db, 0);
    assert_string_equal(u.path, "/s");
    assert_int_equal(dq__url_parse("redis-sentinel://u:pw@a,b/4?sentinel_user=su&"
                                   "sentinel_password=sp#m",
                                   &u, NULL, 0),
                     0);
    assert_int_equal(dq__url_parse("redis://h", &u, NULL, 0), 0);
    assert_int_equal(u.topology, DQ__TOPO_SINGLE);
    assert_int_equal(u.nnodes, 1);
    assert_string_equal(u.nodes[1].host, "");
    assert_string_equal(u.master, "");
    assert_string_equal(u.user, "");
    assert_string_equal(u.password, "");
    assert_string_equal(u.sentinel_user, "");
    assert_string_equal(u.sentinel_password, "");
    assert_string_equal(u.masked, "redis://h");
    assert_int_equal(u.db, 0);
}

/* Reasons quote the port or db, never the user info. */
static void test_url_err_hides_password(void **state) {
    static const char *const urls[] = {
        "redis://u:HUNTER2%zz@h", "redis://u:HUNTER2@h:0", "redis://u:HUNTER2@h/x", "redis://u:HUNTER2@",
        "redis://u:HUNTER2@[::1", "redis://HUNTER2%00@h", "redis://u:HUNTER2@h?x",
        "redis://HUNTER2:p%@h", "redis-sentinel://u:HUNTER2@h", "redis-sentinel://u:HUNTER2@h,,x#m",
        "redis-cluster://u:HUNTER2@h/5", "redis-cluster://HUNTER2@h#m",
        /* sentinel passwords, however the query is broken around them */
        "redis-sentinel://h?sentinel_password=HUNTER2&x=1#m",
        "redis-sentinel://h?sentinel_password=HUNTER2#bad master",
        "redis-sentinel://h?sentinel_password=HUNTER2%zz#m",
        "redis-sentinel://h?sentinel_password=x&HUNTER2#m",
        "redis-sentinel://h?sentinel_password=x&HUNTER2=y#m",
        "redis-sentinel://h?sentinel_password=x#HUNTER2 x",
        "redis-sentinel://h?sentinel_password=HUNTER2@h2#m",
        "redis-sentinel://h?sentinel_password=HUN@TER2#m",
        "redis-sentinel://[::1]x?sentinel_password=HUNTER2#m",
        "redis-sentinel://h/x?sentinel_password=HUNTER2#m",
        "redis-sentinel://h?sentinel_password=HUNTER2"};
    size_t i;
    (void)state;
    for (i = 0; i < sizeof urls / sizeof urls[0]; i++) {
        dq__url u;
        char err[200] = "";
        assert_int_equal(dq__url_parse(urls[i], &u, err, sizeof err), DQ_EINVAL);
        assert_true(err[0] != '\0');
        assert_null(strstr(err, "HUNTER2"));
    }
}

/* Builds prefix + n copies of c + suffix into buf. */
static const char *repeat(char *buf, size_t size, const char *prefix, char c, size_t n,
                          const char *suffix) {
    size_t p = strlen(prefix), s = strlen(suffix);
    assert_true(p + n + s < size);
    memcpy(buf, prefix, p);
    memset(buf + p, c, n);
    memcpy(buf + p + n, suffix, s + 1);
    return buf;
}

static void test_url_length_limits(void **state) {
    char url[1200], err[200];
    dq__url u;
    size_t i;
    (void)state;

    /* host: 255 bytes fit, 256 do not (also in brackets) */
    assert_int_equal(
        dq__url_parse(repeat(url, sizeof url, "redis://", 'a', 255, ":1"), &u, err, sizeof err), 0);
    assert_int_equal(strlen(u.host), 255);
    assert_int_equal(u.port, 1);
    assert_int_equal(
        dq__url_parse(repeat(url, sizeof url, "redis://", 'a', 256, ""), &u, err, sizeof err),
        DQ_EINVAL);
    assert_string_equal(err, "host too long (at most 255 bytes)");
    assert_int_equal(
        dq__url_parse(repeat(url, sizeof url, "redis://[", '1', 256, "]"), &u, err, sizeof err),
        DQ_EINVAL);
    assert_string_equal(err, "host too long (at most 255 bytes)");

    /* unix path: 107 bytes fit, 108 do not */
    assert_int_equal(
        dq__url_parse(repeat(url, sizeof url, "unix:///", 's', 106, "?db=1"), &u, err, sizeof err), 0);
    assert_int_equal(strlen(u.path), 107);
    assert_int_equal(u.db, 1);
    assert_int_equal(
        dq__url_parse(repeat(url, sizeof url, "unix:///", 's', 107, ""), &u, err, sizeof err),
        DQ_EINVAL);
    assert_string_equal(err, "socket path too long (at most 107 bytes)");

    /* user: 127 bytes fit, 128 do not */
    assert_int_equal(
        dq__url_parse(repeat(url, sizeof url, "redis://", 'u', 127, ":p@h"), &u, err, sizeof err), 0);
    assert_int_equal(strlen(u.user), 127);
    assert_int_equal(
        dq__url_parse(repeat(url, sizeof url, "redis://", 'u', 128, ":p@h"), &u, err, sizeof err),
        DQ_EINVAL);
    assert_string_equal(err, "user too long (at most 127 bytes)");

    /* password: 255 decoded bytes fit, 256 do not; the limit counts
     * decoded bytes, not escapes */
    assert_int_equal(
        dq__url_parse(repeat(url, sizeof url, "redis://:", 'p', 255, "@h"), &u, err, sizeof err), 0);
    assert_int_equal(strlen(u.password), 255);
    assert_int_equal(
        dq__url_parse(repeat(url, sizeof url, "redis://:", 'p', 256, "@h"), &u, err, sizeof err),
        DQ_EINVAL);
    assert_string_equal(err, "password too long (at most 255 bytes)");
    strcpy(url, "redis://:");
    for (i = 0; i < 255; i++) strcat(url, "%41");
    strcat(url, "@h");
    assert_int_equal(dq__url_parse(url, &u, err, sizeof err), 0);
    assert_int_equal(strlen(u.password), 255);
    assert_int_equal(u.password[0], 'A');
    assert_int_equal(u.password[254], 'A');

    /* master: 127 bytes fit, 128 do not */
    assert_int_equal(
        dq__url_parse(repeat(url, sizeof url, "redis-sentinel://s#", 'm', 127, ""), &u, err, sizeof err),
        0);
    assert_int_equal(strlen(u.master), 127);
    assert_int_equal(
        dq__url_parse(repeat(url, sizeof url, "redis-sentinel://s#", 'm', 128, ""), &u, err, sizeof err),
        DQ_EINVAL);
    assert_string_equal(err, "master name too long (at most 127 bytes)");

    /* sentinel_user: 127 bytes; sentinel_password: 255 decoded bytes */
    assert_int_equal(
        dq__url_parse(repeat(url, sizeof url, "redis-sentinel://s?sentinel_user=", 'u', 127, "#m"), &u,
                      err, sizeof err),
        0);
    assert_int_equal(strlen(u.sentinel_user), 127);
    assert_int_equal(
        dq__url_parse(repeat(url, sizeof url, "redis-sentinel://s?sentinel_user=", 'u', 128, "#m"), &u,
                      err, sizeof err),
        DQ_EINVAL);
    assert_string_equal(err, "sentinel_user too long (at most 127 bytes)");
    assert_int_equal(
        dq__url_parse(repeat(url, sizeof url, "redis-sentinel://s?sentinel_password=", 'p', 255, "#m"),
                      &u, err, sizeof err),
        0);
    assert_int_equal(strlen(u.sentinel_password), 255);
    assert_int_equal(
        dq__url_parse(repeat(url, sizeof url, "redis-sentinel://s?sentinel_password=", 'p', 256, "#m"),
                      &u, err, sizeof err),
        DQ_EINVAL);
    assert_string_equal(err, "sentinel_password too long (at most 255 bytes)");
}

/* ------------------------------------------------------------ masking */

/* What dq__url_parse leaves in u.masked for URLs that parse. */
static const url_case parsed_masks[] = {
    {"redis://localhost", "redis://localhost"},
    {"redis://u:p@h:1/2", "redis://***@h:1/2"},
    {"redis://pw@h", "redis://***@h"},
    {"redis://:pw@h", "redis://***@h"},
    {"redis://u:@h", "redis://***@h"},
    {"REDIS://u:p@ss/w:x@H", "REDIS://***@H"},
    {"redis://u:p@[::1]:7/3", "redis://***@[::1]:7/3"},
    /* a raw byte in a password is masked with it; a socket path has no
     * user info, so an '@' in it is shown, and odd bytes are escaped */
    {"redis://u:\x01\xff@h", "redis://***@h"},
    {"unix:///tmp/a@b.sock?db=1", "unix:///tmp/a@b.sock?db=1"},
    {"unix:///tmp/\xc3\xa9\n\x7f.s", "unix:///tmp/\\xc3\\xa9\\x0a\\x7f.s"},
    {"redis-sentinel://u:p@s1,s2:5000/1?sentinel_user=su&sentinel_password=sp#m",
     "redis-sentinel://***@s1,s2:5000/1?sentinel_user=su&sentinel_password=***#***"},
    {"redis-sentinel://s?sentinel_password=sp&sentinel_user=su#m",
     "redis-sentinel://s?sentinel_password=***&sentinel_user=su#m"},
    /* a master name right after a sentinel_password value may be its
     * tail (a raw '#' in it): hidden; after another piece it is shown */
    {"redis-sentinel://s?sentinel_password=#m", "redis-sentinel://s?sentinel_password=***#***"},
    {"redis-sentinel://s?sentinel_password=a#b#m", "redis-sentinel://s?sentinel_password=***#***"},
    {"redis-sentinel://:p@s#w?x@s#m", "redis-sentinel://***@s#m"},
    {"redis-cluster://:p@ss@n1,n2", "redis-cluster://***@n1,n2"},
};

static void test_url_masked(void **state) {
    size_t i;
    (void)state;
    for (i = 0; i < sizeof parsed_masks / sizeof parsed_masks[0]; i++) {
        dq__url u;
        char err[200] = "", out[DQ__URL_MASKED_MAX + 1];
        int rc = dq__url_parse(parsed_masks[i].url, &u, err, sizeof err);
        if (rc != 0) print_error("url %s: %s\n", parsed_masks[i].url, err);
        assert_int_equal(rc, 0);
        assert_string_equal(u.masked, parsed_masks[i].want);
        /* dq__url_mask agrees on what parses (a socket path aside: it hides
         * all before an '@' without knowing the scheme's rules) */
        if (strncmp(parsed_masks[i].url, "unix:", 5) != 0) {
            dq__url_mask(parsed_masks[i].url, out, sizeof out);
            assert_string_equal(out, parsed_masks[i].want);
        }
    }
}

/* dq__url_mask on text that may not parse: all before the last '@' goes,
 * whatever it holds; the query shows only db= and sentinel_user= pieces. */
static const url_case malformed_masks[] = {
    {"", ""},
    {"redis://u:pw@", "redis://***@"},
    {"redis://@", "redis://***@"},
    {"u:secret@host", "***@host"},
    {"secret@", "***@"},
    {"a@b://c@d", "a@b://***@d"},
    {"x@y://h", "***@y://h"},
    {"redis://u:p@h:notaport", "redis://***@h:notaport"},
    {"redis://u:p@@@h", "redis://***@h"},
    /* no '@': hosts that do not read as host[:port] may be "user:password"
     * with the '@host' forgotten, and go whole, with the master name */
    {"redis://no-at-sign:shown", "redis://***"},
    {"redis://:secret", "redis://***"},
    {"redis://user:secret/2?db=1", "redis://***/2?db=1"},
    {"redis://h:123456", "redis://***"},
    {"redis-sentinel://:se#cret", "redis-sentinel://***#***"},
    {"redis-sentinel://a:1,b:x#m", "redis-sentinel://***#***"},
    {"redis://h:65536", "redis://h:65536"},
    {"redis://[::1]:6379,h:1/2", "redis://[::1]:6379,h:1/2"},
    {"http://u:p@h/x", "http://***@h/x"},
    {"redis://u:p@h\x01\x80", "redis://***@h\\x01\\x80"},
    {"redis-sentinel://h?sentinel_password=sec&ret#m",
     "redis-sentinel://h?sentinel_password=***&***#***"},
    {"redis-sentinel://h?sentinel_password=sec&ret=x#m",
     "redis-sentinel://h?sentinel_password=***&***#***"},
    {"redis-sentinel://h?sentinel_password=sec&#ret", "redis-sentinel://h?sentinel_password=***&#***"},
    {"redis://h?x#tail", "redis://h?***#***"},
    {"redis-sentinel://h?foo=bar&SENTINEL_PASSWORD=x&db=2&sentinel_user=u#m",
     "redis-sentinel://h?***&***&db=2&sentinel_user=u#m"},
    {"redis-sentinel://h?sentinel_password=a#b#c", "redis-sentinel://h?sentinel_password=***#***"},
    /* a raw '@' in the sentinel password: its tail after the '@' too */
    {"redis-sentinel://h?sentinel_password=se@cret#m", "redis-sentinel://***@***#***"},
    {"redis-sentinel://h?Sentinel_Password=se@cr&et&db=1#m", "redis-sentinel://***@***&***&db=1#m"},
    {"redis-sentinel://h?sentinel_password=x", "redis-sentinel://h?sentinel_password=***"},
    {"redis://h?&&", "redis://h?&&"},
    {"unix:///s?db=x", "unix:///s?db=x"},
    {"redis://h#frag?x", "redis://h#frag?x"},
};

static void test_url_mask_malformed(void **state) {
    size_t i;
    char out[DQ__URL_MASKED_MAX + 1];
    (void)state;
    for (i = 0; i < sizeof malformed_masks / sizeof malformed_masks[0]; i++) {
        dq__url_mask(malformed_masks[i].url, out, sizeof out);
        if (strcmp(out, malformed_masks[i].want) != 0)
            print_error("url [%s]: [%s]\n", malformed_masks[i].url, out);
        assert_string_equal(out, malformed_masks[i].want);
    }
    dq__url_mask(NULL, out, sizeof out);
    assert_string_equal(out, "");
}

/* A small out: cut at a unit boundary with as much of "..." as fits;
 * size 0 writes nothing. */
static void test_url_mask_small_out(void **state) {
    static const struct {
        const char *url;
        size_t size;
        const char *want;
    } cases[] = {
        {"redis://h", 1, ""},        {"redis://h", 3, ".."},      {"redis://h", 5, "r..."},
        {"\x01\x02", 8, "\\x01..."}, {"u:pw@h", 7, "***@h"},      {"u:pw@hh", 7, "***@hh"},
        {"u:pw@hhh", 7, "***..."},   {"u:pw@hhhh", 8, "***@..."},
    };
    char out[8];
    size_t i;
    (void)state;
    memset(out, 'z', sizeof out);
    dq__url_mask("redis://h", out, 0);
    assert_int_equal(out[0], 'z');
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dq__url_mask(cases[i].url, out, cases[i].size);
        assert_string_equal(out, cases[i].want);
    }
}

/* Percent-encodes every byte of s (so the encoded text shares nothing with
 * the decoded one but the hex digits) into out. */
static void encode_all(const char *s, char *out) {
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        *out++ = '%';
        *out++ = hex[c >> 4];
        *out++ = hex[c & 15];
    }
    *out = '\0';
}

/* No 8-byte piece of the password (decoded or as written) in text. */
static void assert_hides(const char *text, const char *decoded, const char *encoded) {
    size_t i;
    char piece[9];
    for (i = 0; decoded[i] && decoded[i + 1]; i += 4) {
        snprintf(piece, sizeof piece, "%s", decoded + i);
        if (strlen(piece) == 8 && strstr(text, piece) != NULL)
            fail_msg("[%s] holds password piece [%s]", text, piece);
    }
    for (i = 0; encoded[i] && encoded[i + 1]; i += 3) {
        snprintf(piece, sizeof piece, "%s", encoded + i);
        if (strlen(piece) == 8 && strstr(text, piece) != NULL)
            fail_msg("[%s] holds encoded password piece [%s]", text, piece);
    }
}

/* The hardening finding: a URL longer than any fixed buffer (here a 200-byte
 * password written as 600 bytes of escapes) is masked whole, before any cut,
 * so nothing of the password reaches a message. */
static void test_url_mask_long_passwords(void **state) {
    char pw[201], enc[601], url[2000], out[DQ__URL_MASKED_MAX + 1];
    dq__url u;
    size_t i;
    (void)state;
    for (i = 0; i < 200; i++) /* printable, with '@', ':', '/', '#', '?' among them */
        pw[i] = "Sx7@q:Z/#k?Lp2&w!"[i % 17];
    pw[200] = '\0';
    encode_all(pw, enc);

    snprintf(url, sizeof url, "redis://user:%s@host:6379/2", enc);
    assert_true(strlen(url) > 600);
    assert_int_equal(dq__url_parse(url, &u, NULL, 0), 0);
    assert_string_equal(u.password, pw);
    assert_string_equal(u.masked, "redis://***@host:6379/2");
    dq__url_mask(url, out, sizeof out);
    assert_string_equal(out, "redis://***@host:6379/2");
    assert_hides(u.masked, pw, enc);

    /* the same password raw: its '@', ':' and '/' are before the last '@' */
    snprintf(url, sizeof url, "redis://user:%s@host:6379/2", pw);
    dq__url_mask(url, out, sizeof out);
    assert_string_equal(out, "redis://***@host:6379/2");

    /* as the sentinels' password, next to a long data-node password */
    snprintf(url, sizeof url,
             "redis-sentinel://:%s@s1,s2/1?sentinel_user=admin&sentinel_password=%s#mymaster", enc, enc);
    assert_true(strlen(url) > 1200);
    assert_int_equal(dq__url_parse(url, &u, NULL, 0), 0);
    assert_string_equal(u.sentinel_password, pw);
    assert_string_equal(u.masked, "redis-sentinel://***@s1,s2/1?sentinel_user=admin&"
                                  "sentinel_password=***#***");
    assert_hides(u.masked, pw, enc);

    /* malformed: no host after the raw password; a raw password cut by
     * its own '&' in the sentinel query */
    snprintf(url, sizeof url, "redis://u:%s@", pw);
    assert_int_equal(dq__url_parse(url, &u, NULL, 0), DQ_EINVAL);
    dq__url_mask(url, out, sizeof out);
    assert_string_equal(out, "redis://***@");
    snprintf(url, sizeof url, "redis-sentinel://h?sentinel_password=%s&%s#m", enc, pw);
    dq__url_mask(url, out, sizeof out);
    assert_string_equal(out, "redis-sentinel://***@***#***");
    assert_hides(out, pw, enc);
    snprintf(url, sizeof url, "redis-sentinel://h?sentinel_password=%s#m", pw);
    assert_int_equal(dq__url_parse(url, &u, NULL, 0), DQ_EINVAL);
    dq__url_mask(url, out, sizeof out);
    assert_hides(out, pw, enc);
}

/* A masked text longer than DQ__URL_MASKED_MAX is cut to exactly that many
 * bytes ending in "...", never inside an escape. */
static void test_url_mask_cut(void **state) {
    char url[1200], out[1000];
    dq__url u;
    size_t i;
    (void)state;

    /* 16 long host names: far over the limit */
    strcpy(url, "redis-cluster://u:pw@");
    for (i = 0; i < DQ__URL_NODES_MAX; i++)
        sprintf(url + strlen(url), "%snode-number-%zu.example.com:7000", i ? "," : "", i);
    assert_int_equal(dq__url_parse(url, &u, NULL, 0), 0);
    assert_int_equal(strlen(u.masked), DQ__URL_MASKED_MAX);
    assert_memory_equal(u.masked, "redis-cluster://***@node-number-0.", 34);
    assert_string_equal(u.masked + DQ__URL_MASKED_MAX - 3, "...");
    assert_memory_equal(u.masked + 20, url + 21, DQ__URL_MASKED_MAX - 23);
    /* dq__url_mask cuts at the same length even when out is larger */
    dq__url_mask(url, out, sizeof out);
    assert_string_equal(out, u.masked);

    /* exactly DQ__URL_MASKED_MAX bytes: no cut; one more: cut */
    memset(url, 'x', DQ__URL_MASKED_MAX);
    url[DQ__URL_MASKED_MAX] = '\0';
    dq__url_mask(url, out, sizeof out);
    assert_string_equal(out, url);
    url[DQ__URL_MASKED_MAX] = 'x';
    url[DQ__URL_MASKED_MAX + 1] = '\0';
    dq__url_mask(url, out, sizeof out);
    assert_int_equal(strlen(out), DQ__URL_MASKED_MAX);
    assert_string_equal(out + DQ__URL_MASKED_MAX - 3, "...");

    /* escapes are whole units: 8 + 47 * 4 = 196 bytes, then "..." */
    strcpy(url, "unix:///");
    memset(url + 8, 0xff, 99);
    url[107] = '\0';
    assert_int_equal(dq__url_parse(url, &u, NULL, 0), 0);
    assert_int_equal(strlen(u.masked), 199);
    assert_string_equal(u.masked + 192, "\\xff...");
    for (i = 8; i < 196; i += 4) assert_memory_equal(u.masked + i, "\\xff", 4);
}

/* The master name is hidden in messages while it follows a
 * sentinel_password value (it may be that password's tail). */
static void test_url_master_hidden(void **state) {
    static const struct {
        const char *url;
        int hidden;
    } cases[] = {
        {"redis-sentinel://s#m", 0},
        {"redis-sentinel://s?sentinel_user=u#m", 0},
        {"redis-sentinel://s?sentinel_password=p#m", 1},
        {"redis-sentinel://s?sentinel_user=u&sentinel_password=p#m", 1},
        {"redis-sentinel://s?sentinel_password=p&sentinel_user=u#m", 0},
        {"redis-sentinel://:p@s#m", 0},
    };
    dq__url u;
    size_t i;
    (void)state;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(dq__url_parse(cases[i].url, &u, NULL, 0), 0);
        assert_int_equal(u.master_hidden, cases[i].hidden);
        assert_string_equal(u.master, "m");
        assert_string_equal(dq__url_master_shown(&u), cases[i].hidden ? "***" : "m");
    }
}

/* dq__url_redact: the same masking on any bytes, written as they are. */
static void test_url_redact(void **state) {
    static const char with_nul[] = "x\0y redis://:pw@h\x01";
    char out[64], big[3000];
    size_t n;
    (void)state;
    n = dq__url_redact(with_nul, sizeof with_nul - 1, out, sizeof out);
    assert_int_equal(n, sizeof "x\0y redis://***@h\x01" - 1);
    assert_memory_equal(out, "x\0y redis://***@h\x01", n + 1);
    n = dq__url_redact("--redis-url=redis://u:pw@h", 26, out, sizeof out);
    assert_string_equal(out, "--redis-url=redis://***@h");
    /* the '@' far beyond what the output holds still hides all before it */
    memset(big, 'p', sizeof big);
    memcpy(big, "redis://:", 9);
    memcpy(big + sizeof big - 3, "@hh", 3);
    n = dq__url_redact(big, sizeof big, out, 16);
    assert_string_equal(out, "redis://***@hh");
    n = dq__url_redact(big, sizeof big - 3, out, 16);
    assert_string_equal(out, "redis://***");
    n = dq__url_redact("plain text", 10, out, 8);
    assert_string_equal(out, "plai...");
    assert_int_equal(n, 7);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_good),
        cmocka_unit_test(test_url_bad),
        cmocka_unit_test(test_url_tls),
        cmocka_unit_test(test_url_null_arguments),
        cmocka_unit_test(test_url_err_truncated),
        cmocka_unit_test(test_url_out_untouched_on_error),
        cmocka_unit_test(test_url_resets_fields),
        cmocka_unit_test(test_url_err_hides_password),
        cmocka_unit_test(test_url_length_limits),
        cmocka_unit_test(test_url_multi),
        cmocka_unit_test(test_url_nodes_max),
        cmocka_unit_test(test_url_masked),
        cmocka_unit_test(test_url_mask_malformed),
        cmocka_unit_test(test_url_mask_small_out),
        cmocka_unit_test(test_url_mask_long_passwords),
        cmocka_unit_test(test_url_mask_cut),
        cmocka_unit_test(test_url_master_hidden),
        cmocka_unit_test(test_url_redact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
