/*
 * test_url.c - unit tests of dq__url_parse (src/url.c): every accepted form
 * with each field checked, every rejection with its exact message, and the
 * promises around them (out untouched on error, no password in messages,
 * field length limits at their exact edges).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
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
    {"unix:///var/run/redis/redis-server.sock?db=0", 1, "", 0,
     "/var/run/redis/redis-server.sock", "", "", 0},
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

static void check_good(const good_case *g)
{
    dq__url u;
    char err[200] = "stale";
    int rc = dq__url_parse(g->url, &u, err, sizeof err);
    if (rc != 0)
        print_error("url %s: %s\n", g->url, err);
    assert_int_equal(rc, 0);
    assert_string_equal(err, "");
    assert_int_equal(u.is_unix, g->is_unix);
    assert_string_equal(u.host, g->host);
    assert_int_equal(u.port, g->port);
    assert_string_equal(u.path, g->path);
    assert_string_equal(u.user, g->user);
    assert_string_equal(u.password, g->password);
    assert_int_equal(u.db, g->db);
}

static void test_url_good(void **state)
{
    size_t i;
    (void)state;
    for (i = 0; i < sizeof good_cases / sizeof good_cases[0]; i++)
        check_good(&good_cases[i]);
}

typedef struct bad_case {
    const char *url;
    const char *err;
} bad_case;

static const bad_case bad_cases[] = {
    {"", "empty URL"},
    {"localhost:6379", "missing scheme (expected redis:// or unix://)"},
    {"redis:/host", "missing scheme (expected redis:// or unix://)"},
    {"http://h", "unknown scheme 'http' (expected redis:// or unix://)"},
    {"://h", "unknown scheme '' (expected redis:// or unix://)"},
    {"redis-sentinel://h", "unknown scheme 'redis-sentinel' (expected redis:// or unix://)"},
    {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa://h",
     "unknown scheme 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...' (expected redis:// or unix://)"},
    {"re\tdis://h", "unknown scheme 're?dis' (expected redis:// or unix://)"},
    {"rediss://h", "TLS (rediss://) is not supported"},
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
    {"redis://h:12a", "bad port '12a' (expected 1..65535)"},
    {"redis://h:-1", "bad port '-1' (expected 1..65535)"},
    {"redis://h:+1", "bad port '+1' (expected 1..65535)"},
    {"redis://h: 1", "bad port ' 1' (expected 1..65535)"},
    {"redis://h:1:2", "bad port '1:2' (expected 1..65535)"},
    {"redis://h:6379?x=1", "bad port '6379?x=1' (expected 1..65535)"},
    {"redis://h:99999999999999999999999", "bad port '99999999999999999999999' (expected 1..65535)"},
    {"redis://h/x", "bad db 'x' (expected 0..2147483647)"},
    {"redis://h/-1", "bad db '-1' (expected 0..2147483647)"},
    {"redis://h/+1", "bad db '+1' (expected 0..2147483647)"},
    {"redis://h/2147483648", "bad db '2147483648' (expected 0..2147483647)"},
    {"redis://h/99999999999999999999999", "bad db '99999999999999999999999' (expected 0..2147483647)"},
    {"redis://h/3/4", "trailing garbage '/4' after db"},
    {"redis://h/3?x=1", "trailing garbage '?x=1' after db"},
    {"redis://h:1/3x", "trailing garbage 'x' after db"},
    {"redis://h/3 ", "trailing garbage ' ' after db"},
    {"redis://[::1", "unterminated '[' in IPv6 host"},
    {"redis://[::1:6379/2", "unterminated '[' in IPv6 host"},
    {"redis://[::1]x", "trailing garbage 'x' after IPv6 host"},
    {"redis://[::1]]", "trailing garbage ']' after IPv6 host"},
    {"redis://[::g]", "invalid character in IPv6 host (only hex digits, ':' and '.')"},
    {"redis://[fe80::1%25eth0]", "invalid character in IPv6 host (only hex digits, ':' and '.')"},
    {"redis://h?x", "invalid character '?' in host"},
    {"redis://h#x", "invalid character '#' in host"},
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
    {"unix:///tmp/r.sock?foo=1",
     "trailing garbage '?foo=1' after socket path (only ?db=N is allowed)"},
    {"unix:///tmp/r.sock?", "trailing garbage '?' after socket path (only ?db=N is allowed)"},
    {"unix:///tmp/r.sock?DB=1",
     "trailing garbage '?DB=1' after socket path (only ?db=N is allowed)"},
    {"redis://u:p%zz@h", "bad percent-escape in password (write a literal '%' as %25)"},
    {"redis://u:p%@h", "bad percent-escape in password (write a literal '%' as %25)"},
    {"redis://u:p%4@h", "bad percent-escape in password (write a literal '%' as %25)"},
    {"redis://u%4:p@h", "bad percent-escape in user (write a literal '%' as %25)"},
    {"redis://u%g0:p@h", "bad percent-escape in user (write a literal '%' as %25)"},
    {"redis://p%0@h", "bad percent-escape in password (write a literal '%' as %25)"},
    {"redis://u:p%00@h", "%00 is not allowed in password"},
    {"redis://%00:p@h", "%00 is not allowed in user"},
};

static void test_url_bad(void **state)
{
    size_t i;
    (void)state;
    for (i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        dq__url u;
        char err[200] = "";
        int rc = dq__url_parse(bad_cases[i].url, &u, err, sizeof err);
        if (rc != DQ_EINVAL || strcmp(err, bad_cases[i].err) != 0)
            print_error("url [%s]: rc %d, err [%s]\n", bad_cases[i].url, rc, err);
        assert_int_equal(rc, DQ_EINVAL);
        assert_string_equal(err, bad_cases[i].err);
    }
}

static void test_url_null_arguments(void **state)
{
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

static void test_url_err_truncated(void **state)
{
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
static void test_url_out_untouched_on_error(void **state)
{
    static const char *const urls[] = {"redis://u:p@host:0", "redis://u:p@host/x",
                                       "unix:///s?db=x", "http://h", ""};
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
static void test_url_resets_fields(void **state)
{
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
}

/* Reasons quote the port or db, never the user info. */
static void test_url_err_hides_password(void **state)
{
    static const char *const urls[] = {
        "redis://u:HUNTER2%zz@h", "redis://u:HUNTER2@h:0", "redis://u:HUNTER2@h/x",
        "redis://u:HUNTER2@", "redis://u:HUNTER2@[::1", "redis://HUNTER2%00@h",
        "redis://u:HUNTER2@h?x", "redis://HUNTER2:p%@h"};
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
                          const char *suffix)
{
    size_t p = strlen(prefix), s = strlen(suffix);
    assert_true(p + n + s < size);
    memcpy(buf, prefix, p);
    memset(buf + p, c, n);
    memcpy(buf + p + n, suffix, s + 1);
    return buf;
}

static void test_url_length_limits(void **state)
{
    char url[1200], err[200];
    dq__url u;
    size_t i;
    (void)state;

    /* host: 255 bytes fit, 256 do not (also in brackets) */
    assert_int_equal(dq__url_parse(repeat(url, sizeof url, "redis://", 'a', 255, ":1"), &u, err,
                                   sizeof err), 0);
    assert_int_equal(strlen(u.host), 255);
    assert_int_equal(u.port, 1);
    assert_int_equal(dq__url_parse(repeat(url, sizeof url, "redis://", 'a', 256, ""), &u, err,
                                   sizeof err), DQ_EINVAL);
    assert_string_equal(err, "host too long (at most 255 bytes)");
    assert_int_equal(dq__url_parse(repeat(url, sizeof url, "redis://[", '1', 256, "]"), &u, err,
                                   sizeof err), DQ_EINVAL);
    assert_string_equal(err, "host too long (at most 255 bytes)");

    /* unix path: 107 bytes fit, 108 do not */
    assert_int_equal(dq__url_parse(repeat(url, sizeof url, "unix:///", 's', 106, "?db=1"), &u, err,
                                   sizeof err), 0);
    assert_int_equal(strlen(u.path), 107);
    assert_int_equal(u.db, 1);
    assert_int_equal(dq__url_parse(repeat(url, sizeof url, "unix:///", 's', 107, ""), &u, err,
                                   sizeof err), DQ_EINVAL);
    assert_string_equal(err, "socket path too long (at most 107 bytes)");

    /* user: 127 bytes fit, 128 do not */
    assert_int_equal(dq__url_parse(repeat(url, sizeof url, "redis://", 'u', 127, ":p@h"), &u, err,
                                   sizeof err), 0);
    assert_int_equal(strlen(u.user), 127);
    assert_int_equal(dq__url_parse(repeat(url, sizeof url, "redis://", 'u', 128, ":p@h"), &u, err,
                                   sizeof err), DQ_EINVAL);
    assert_string_equal(err, "user too long (at most 127 bytes)");

    /* password: 255 decoded bytes fit, 256 do not; the limit counts
     * decoded bytes, not escapes */
    assert_int_equal(dq__url_parse(repeat(url, sizeof url, "redis://:", 'p', 255, "@h"), &u, err,
                                   sizeof err), 0);
    assert_int_equal(strlen(u.password), 255);
    assert_int_equal(dq__url_parse(repeat(url, sizeof url, "redis://:", 'p', 256, "@h"), &u, err,
                                   sizeof err), DQ_EINVAL);
    assert_string_equal(err, "password too long (at most 255 bytes)");
    strcpy(url, "redis://:");
    for (i = 0; i < 255; i++)
        strcat(url, "%41");
    strcat(url, "@h");
    assert_int_equal(dq__url_parse(url, &u, err, sizeof err), 0);
    assert_int_equal(strlen(u.password), 255);
    assert_int_equal(u.password[0], 'A');
    assert_int_equal(u.password[254], 'A');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_good),
        cmocka_unit_test(test_url_bad),
        cmocka_unit_test(test_url_null_arguments),
        cmocka_unit_test(test_url_err_truncated),
        cmocka_unit_test(test_url_out_untouched_on_error),
        cmocka_unit_test(test_url_resets_fields),
        cmocka_unit_test(test_url_err_hides_password),
        cmocka_unit_test(test_url_length_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
