/*
 * test_util.c - unit tests of the small helpers: dq_parse_duration
 * (src/util/duration.c), dq_strerror (src/util/errors.c) and the libsodium wrapper
 * (src/util/ids.c: init, generated ids, uniform random numbers, base64) and the
 * id index bucket (src/util/idindex.c: SHA-1 through OpenSSL, as the Lua scripts
 * compute it, also from threads racing for its one-time set-up).
 * URL, codec and text helpers have their own test_url/test_codec/test_text.
 */
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

/* ------------------------------------------------------------ durations */

typedef struct duration_case {
    const char *text;
    int64_t ms;
} duration_case;

static const duration_case good_durations[] = {
    {"0", 0},
    {"0ms", 0},
    {"0s", 0},
    {"0d", 0},
    {"1", 1},
    {"250", 250},
    {"250ms", 250},
    {"30s", 30000},
    {"5m", 300000},
    {"2h", 7200000},
    {"1d", 86400000},
    {"007s", 7000},
    {"90m", 5400000},
    {"4398046511103", DQ_DUE_MAX_MS},
    {"4398046511103ms", DQ_DUE_MAX_MS},
    {"0000000000000000000000000001s", 1000}, /* leading zeros do not overflow */
    {"4398046511s", 4398046511000LL},
    {"73300775m", 4398046500000LL},
    {"1221679h", 4398044400000LL},
    {"50903d", 4398019200000LL},
};

static void test_duration_good(void **state) {
    size_t i;
    (void)state;
    for (i = 0; i < sizeof good_durations / sizeof good_durations[0]; i++) {
        int64_t ms = -12345;
        int rc = dq_parse_duration(good_durations[i].text, &ms);
        if (rc != 0 || ms != good_durations[i].ms)
            print_error("duration [%s]: rc %d ms %lld\n", good_durations[i].text, rc, (long long)ms);
        assert_int_equal(rc, 0);
        assert_int_equal(ms, good_durations[i].ms);
    }
}

static const char *const bad_durations[] = {
    "",
    "-1",
    "+1",
    "-0",
    " 1",
    "1 ",
    "1 s",
    "5 s",
    "\t5",
    "1\n",
    "1.5s",
    "1.0",
    ".5s",
    "1,5s",
    "1e3",
    "0x10",
    "5x",
    "5S",
    "5MS",
    "5Ms",
    "5mS",
    "1H",
    "1D",
    "5sec",
    "5min",
    "1w",
    "1y",
    "1us",
    "1ns",
    "ms",
    "s",
    "m",
    "h",
    "d",
    "1msx",
    "1sm",
    "1h30m",
    "1s1",
    "1ss",
    "4398046511104",
    "4398046511104ms",
    "4398046512s",
    "73300776m",
    "1221680h",
    "50904d",
    "9223372036854775807",
    "9223372036854775808",
    "99999999999999999999999999",
    "18446744073709551616s",
    "106751991167300d",
};

/* Every rejection is DQ_EINVAL and leaves *ms as it was. */
static void test_duration_bad(void **state) {
    size_t i;
    (void)state;
    for (i = 0; i < sizeof bad_durations / sizeof bad_durations[0]; i++) {
        int64_t ms = -12345;
        int rc = dq_parse_duration(bad_durations[i], &ms);
        if (rc != DQ_EINVAL)
            print_error("duration [%s] accepted as %lld\n", bad_durations[i], (long long)ms);
        assert_int_equal(rc, DQ_EINVAL);
        assert_int_equal(ms, -12345);
    }
}

static void test_duration_null(void **state) {
    int64_t ms = 77;
    (void)state;
    assert_int_equal(dq_parse_duration(NULL, &ms), DQ_EINVAL);
    assert_int_equal(ms, 77);
    assert_int_equal(dq_parse_duration("5s", NULL), DQ_EINVAL);
}

/* ------------------------------------------------------------ errors */

static void test_strerror(void **state) {
    (void)state;
    assert_string_equal(dq_strerror(DQ_OK), "success");
    assert_string_equal(dq_strerror(DQ_EINVAL), "invalid argument");
    assert_string_equal(dq_strerror(DQ_ETOOBIG), "payload too large");
    assert_string_equal(dq_strerror(DQ_ECONNECT), "cannot connect to Redis");
    assert_string_equal(dq_strerror(DQ_ETIMEDOUT), "timed out");
    assert_string_equal(dq_strerror(DQ_EAUTH), "authentication failed");
    assert_string_equal(dq_strerror(DQ_EWRONGTYPE), "wrong key type in Redis");
    assert_string_equal(dq_strerror(DQ_EREDIS), "Redis error");
    assert_string_equal(dq_strerror(DQ_EPROTO), "protocol error");
    assert_string_equal(dq_strerror(DQ_ENOMEM), "out of memory");
    assert_string_equal(dq_strerror(DQ_ECLOSED), "closed");
    assert_string_equal(dq_strerror(DQ_EBUSY), "busy");
    assert_string_equal(dq_strerror(DQ_EKEY), "sealed with a key this client does not hold");
}

static void test_strerror_unknown(void **state) {
    static const int codes[] = {1, 2, -14, -100, 1000, INT_MIN, INT_MAX};
    size_t i;
    (void)state;
    for (i = 0; i < sizeof codes / sizeof codes[0]; i++)
        assert_string_equal(dq_strerror(codes[i]), "unknown error");
}

/* Every code from DQ_EBUSY to DQ_OK has its own text. */
static void test_strerror_distinct(void **state) {
    int a, b;
    (void)state;
    for (a = DQ_EKEY; a <= DQ_OK; a++)
        for (b = DQ_EKEY; b < a; b++) assert_string_not_equal(dq_strerror(a), dq_strerror(b));
}

/* ------------------------------------------------------------ ids and randomness */

static void test_crypto_init(void **state) {
    (void)state;
    assert_int_equal(dq__crypto_init(), 0);
    assert_int_equal(dq__crypto_init(), 0); /* idempotent */
}

static int is_base64url_char(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

static int cmp_ids(const void *a, const void *b) { return strcmp(a, b); }

/* 22 base64url chars and a NUL. 128 bits fill 21 chars and 2 bits of the
 * last, whose 4 low bits are then zero: it is one of A, Q, g, w. */
static void test_id_generate_format(void **state) {
    char id[DQ_ID_GENERATED_LEN + 2];
    int i, k;
    (void)state;
    for (i = 0; i < 200; i++) {
        memset(id, '#', sizeof id);
        dq__id_generate(id);
        assert_int_equal(id[DQ_ID_GENERATED_LEN], '\0');
        assert_int_equal(id[DQ_ID_GENERATED_LEN + 1], '#'); /* nothing written past */
        assert_int_equal(strlen(id), 22);
        for (k = 0; k < DQ_ID_GENERATED_LEN; k++) assert_true(is_base64url_char(id[k]));
        assert_non_null(strchr("AQgw", id[21]));
        assert_int_equal(dq__id_valid(id), 1);
    }
}

#define NIDS 2000

/* Ids are unique, and every position takes many values (not constant). */
static void test_id_generate_unique(void **state) {
    char(*ids)[DQ_ID_GENERATED_LEN + 1] = calloc(NIDS, sizeof *ids);
    int i, k;
    (void)state;
    assert_non_null(ids);
    for (i = 0; i < NIDS; i++) dq__id_generate(ids[i]);
    qsort(ids, NIDS, sizeof *ids, cmp_ids);
    for (i = 1; i < NIDS; i++) assert_string_not_equal(ids[i - 1], ids[i]);
    for (k = 0; k < 21; k++) {
        int seen[128] = {0}, distinct = 0;
        for (i = 0; i < NIDS; i++)
            if (!seen[(unsigned char)ids[i][k]]++) distinct++;
        /* 64 symbols, 2000 draws: missing even 8 is astronomically unlikely */
        assert_true(distinct >= 56);
    }
    free(ids);
}

/* A forked child never makes an id its parent makes: ids are drawn from a
 * block of random bytes, and a child must not use what the parent left. */
static void test_id_generate_after_fork(void **state) {
    char first[DQ_ID_GENERATED_LEN + 1], parent[8][DQ_ID_GENERATED_LEN + 1];
    char child[8][DQ_ID_GENERATED_LEN + 1];
    int fds[2], i, j, status;
    pid_t pid;
    (void)state;
    dq__id_generate(first); /* the block is now in use, most of it left */
    assert_int_equal(pipe(fds), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        for (i = 0; i < 8; i++) dq__id_generate(child[i]);
        _exit(write(fds[1], child, sizeof child) == (ssize_t)sizeof child ? 0 : 1);
    }
    close(fds[1]);
    for (i = 0; i < 8; i++) dq__id_generate(parent[i]);
    assert_int_equal(read(fds[0], child, sizeof child), (ssize_t)sizeof child);
    close(fds[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    for (i = 0; i < 8; i++)
        for (j = 0; j < 8; j++) assert_string_not_equal(parent[i], child[j]);
}

static void test_random_uniform(void **state) {
    int seen[10] = {0};
    int i;
    (void)state;
    for (i = 0; i < 100; i++) assert_int_equal(dq__random_uniform(1), 0);
    for (i = 0; i < 2000; i++) {
        uint32_t v = dq__random_uniform(10);
        assert_true(v < 10);
        seen[v]++;
    }
    /* each value expected 200 times; below 100 is about 9 sigma off */
    for (i = 0; i < 10; i++) assert_true(seen[i] > 100);
    for (i = 0; i < 1000; i++) assert_true(dq__random_uniform(UINT32_MAX) < UINT32_MAX);
}

/* RFC 4648, section 10, plus bytes that differ between the standard and
 * URL-safe alphabets. */
static void test_base64_vectors(void **state) {
    static const struct {
        const char *in;
        size_t len;
        const char *out;
    } v[] = {
        {"", 0, ""},
        {"f", 1, "Zg=="},
        {"fo", 2, "Zm8="},
        {"foo", 3, "Zm9v"},
        {"foob", 4, "Zm9vYg=="},
        {"fooba", 5, "Zm9vYmE="},
        {"foobar", 6, "Zm9vYmFy"},
        {"\xfb\xff", 2, "+/8="},
        {"\xfb\xef\xbe", 3, "++++"},
        {"\xff\xff\xff", 3, "////"},
        {"\0\0\0", 3, "AAAA"},
        {"a\0b", 3, "YQBi"},
    };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof v / sizeof v[0]; i++) {
        char *s = dq__base64_encode(v[i].in, v[i].len);
        assert_non_null(s);
        assert_string_equal(s, v[i].out);
        free(s);
    }
}

static void test_base64_null_and_huge(void **state) {
    char *s;
    (void)state;
    s = dq__base64_encode(NULL, 0);
    assert_non_null(s);
    assert_string_equal(s, "");
    free(s);
    /* a length whose encoded size would wrap fails without reading data */
    assert_null(dq__base64_encode("x", SIZE_MAX));
    assert_null(dq__base64_encode("x", SIZE_MAX / 4 * 3 + 3));
}

/* A larger buffer: length is 4 * ceil(n / 3) and the output round-trips
 * through a small reference decoder. */
static void test_base64_long(void **state) {
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned char in[1000];
    size_t n, i;
    (void)state;
    for (i = 0; i < sizeof in; i++) in[i] = (unsigned char)(i * 7 + 3);
    for (n = 995; n <= 1000; n++) {
        char *s = dq__base64_encode(in, n);
        size_t k, bits = 0, got = 0;
        uint32_t acc = 0;
        assert_non_null(s);
        assert_int_equal(strlen(s), (n + 2) / 3 * 4);
        for (k = 0; s[k] != '\0' && s[k] != '='; k++) {
            const char *p = strchr(alphabet, s[k]);
            assert_non_null(p);
            acc = (acc << 6) | (uint32_t)(p - alphabet);
            bits += 6;
            if (bits >= 8) {
                bits -= 8;
                assert_int_equal((acc >> bits) & 0xFF, in[got]);
                got++;
            }
        }
        assert_int_equal(got, n);
        free(s);
    }
}

/* ------------------------------------------------------------ id index */

static void hex(const unsigned char *d, size_t n, char *out) {
    for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void test_sha1_vectors(void **state) {
    (void)state;
    /* FIPS 180-4 examples, and lengths around the one- and two-block
     * padding boundaries (55, 56, 64 bytes), checked with sha1sum. */
    static const struct {
        const char *in;
        const char *digest;
    } cases[] = {
        {"", "da39a3ee5e6b4b0d3255bfef95601890afd80709"},
        {"abc", "a9993e364706816aba3e25717850c26c9cd0d89d"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "84983e441c3bd26ebaae4aa1f95129e5e54670f1"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
         "c1c8bbdc22796e28c0e15163d20899b65621d65a"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
         "c2db330f6083854c99d4b5bfb6e8f29f201be699"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
         "0098ba824b5c16427bd7a1122a5a442a25ec644d"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char d[20];
        char h[41];
        assert_int_equal(dq__sha1(cases[i].in, strlen(cases[i].in), d), 0);
        hex(d, sizeof d, h);
        assert_string_equal(h, cases[i].digest);
    }
    /* FIPS 180-4's long example: a million 'a'. */
    enum { MILLION = 1000000 };
    char *a = malloc(MILLION);
    assert_non_null(a);
    memset(a, 'a', MILLION);
    unsigned char d[20];
    char h[41];
    assert_int_equal(dq__sha1(a, MILLION, d), 0);
    free(a);
    hex(d, sizeof d, h);
    assert_string_equal(h, "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
}

static void test_id_bucket(void **state) {
    (void)state;
    /* SHA-1("abc") starts a999: 0xa999 % 32768 = 10649, as
     * tonumber('a999', 16) % 32768 in lua/lib/50_idindex.lua. */
    assert_int_equal(dq__id_bucket("abc"), 0xa999 % 32768);
    assert_int_equal(dq__id_bucket(""), 0xda39 % 32768);
    /* tests/protocol/vectors.json's buckets (the Python client's too). */
    assert_int_equal(dq__id_bucket("a"), 1783);
    assert_int_equal(dq__id_bucket("order-1"), 27191);
    assert_int_equal(dq__id_bucket("LHR17WHQDSEhlk5hHN2zwA"), 27143);
    /* An id of DQ_ID_MAX bytes: SHA-1 ad5b3fdb..., 0xad5b % 32768. */
    char longest[DQ_ID_MAX + 1];
    memset(longest, 'a', DQ_ID_MAX);
    longest[DQ_ID_MAX] = '\0';
    assert_int_equal(dq__id_bucket(longest), 0xad5b % 32768);
    for (int i = 0; i < 1000; i++) {
        char id[32];
        snprintf(id, sizeof id, "order-%d", i);
        int b = dq__id_bucket(id);
        assert_true(b >= 0 && b < (int)DQ__ID_BUCKETS);
    }
}

/* Threads whose first calls race for the one-time fetch of the algorithm
 * (this test runs before any other use of SHA-1 in this binary): each gets
 * the right buckets (make test-asan and make valgrind run it too). */
enum { RACE_THREADS = 4 };
static pthread_barrier_t race_start;

static void *race_buckets(void *arg) {
    (void)pthread_barrier_wait(&race_start);
    int ok = 1;
    for (int i = 0; i < 200; i++) ok &= dq__id_bucket("order-1") == 27191 && dq__id_bucket("a") == 1783;
    *(int *)arg = ok;
    return NULL;
}

static void test_id_bucket_threads(void **state) {
    (void)state;
    pthread_t t[RACE_THREADS];
    int ok[RACE_THREADS] = {0};
    assert_int_equal(pthread_barrier_init(&race_start, NULL, RACE_THREADS), 0);
    for (int i = 0; i < RACE_THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, race_buckets, &ok[i]), 0);
    for (int i = 0; i < RACE_THREADS; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_true(ok[i]);
    }
    (void)pthread_barrier_destroy(&race_start);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duration_good),
        cmocka_unit_test(test_duration_bad),
        cmocka_unit_test(test_duration_null),
        cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_strerror_unknown),
        cmocka_unit_test(test_strerror_distinct),
        cmocka_unit_test(test_id_bucket_threads), /* first: see there */
        cmocka_unit_test(test_crypto_init),
        cmocka_unit_test(test_id_generate_format),
        cmocka_unit_test(test_id_generate_after_fork),
        cmocka_unit_test(test_id_generate_unique),
        cmocka_unit_test(test_random_uniform),
        cmocka_unit_test(test_base64_vectors),
        cmocka_unit_test(test_base64_null_and_huge),
        cmocka_unit_test(test_base64_long),
        cmocka_unit_test(test_sha1_vectors),
        cmocka_unit_test(test_id_bucket),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
