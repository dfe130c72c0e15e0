/*
 * test_seal.c - unit tests of src/util/seal.c: key lines and files (format,
 * errors by line and without key material, refused permissions), the
 * envelope round trip with every byte value, and what must not open: another
 * item, another queue, a flipped byte anywhere, a key the ring lacks. Also
 * rotation: a ring of [new, old] seals with new and opens both. The binding
 * is the queue whichever shard names it, and what a client with keys takes
 * (dq__open_taken) is an envelope that opens, or refused with its reason:
 * plaintext (unless allowed), every cut length, another format, an unknown
 * key id, a forged body. A schedule's envelope (dq__seal_schedule) opens as
 * each tick's item of that schedule and queue ("NAME@T", parsed strictly
 * by dq__tick_id) and as nothing else: not another schedule's tick, nor an
 * ordinary item, nor the reverse.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "util.h"

static void new_line(char *line, size_t size) { assert_int_equal(dq__key_line(line, size), 0); }

static dq__keyring *ring_of(const char *text) {
    dq__keyring *kr = NULL;
    char err[200];
    int rc = dq__keyring_parse(text, strlen(text), &kr, err, sizeof err);
    if (rc) fail_msg("parse: %s", err);
    return kr;
}

static void test_key_lines(void **state) {
    (void)state;
    char a[128], b[128], text[512];
    new_line(a, sizeof a);
    new_line(b, sizeof b);
    assert_memory_equal(a, "dq-key-1 ", 9);
    assert_int_equal(strlen(a), 9 + 16 + 1 + 44 + 1);
    assert_string_not_equal(a, b);
    snprintf(text, sizeof text, "# keys\n\n%s%s", a, b);
    dq__keyring *kr = ring_of(text);
    char ids[64];
    assert_int_equal(dq__keyring_ids_hex(kr, ids, sizeof ids), 32);
    assert_memory_equal(ids, a + 9, 16); /* the first key first */
    assert_memory_equal(ids + 16, b + 9, 16);
    dq__keyring_free(kr);
}

static void test_key_errors(void **state) {
    (void)state;
    char good[128], text[512], err[200];
    new_line(good, sizeof good);
    const char *key = good + 9 + 17; /* the base64 */
    struct {
        const char *what, *want;
    } cases[] = {
        {"", "no key"},
        {"# only a comment\n", "no key"},
        {"dq-key-2 0000000000000000 AAAA\n", "line 1: not a key line"},
        {"hello\n", "line 1: not a key line"},
        {"dq-key-1 00 AAAA\n", "line 1: malformed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dq__keyring *kr = (dq__keyring *)1;
        assert_int_not_equal(
            dq__keyring_parse(cases[i].what, strlen(cases[i].what), &kr, err, sizeof err), 0);
        assert_null(kr);
        if (!strstr(err, cases[i].want)) fail_msg("%s: got '%s'", cases[i].what, err);
    }
    /* A key that does not match its id: named by line, the key not shown. */
    snprintf(text, sizeof text, "%s# two\ndq-key-1 0123456789abcdef %s", good, key);
    dq__keyring *kr = NULL;
    assert_int_equal(dq__keyring_parse(text, strlen(text), &kr, err, sizeof err), DQ_EINVAL);
    assert_non_null(strstr(err, "line 3"));
    assert_non_null(strstr(err, "does not match"));
    assert_null(strstr(err, key));
    /* Broken base64. */
    snprintf(text, sizeof text, "dq-key-1 %.16s !!!%s", good + 9, key + 3);
    assert_int_equal(dq__keyring_parse(text, strlen(text), &kr, err, sizeof err), DQ_EINVAL);
    assert_non_null(strstr(err, "malformed"));
}

static void test_key_file_mode(void **state) {
    (void)state;
    /* In TMPDIR: tests/run.sh points it at a directory of the run's, which
     * it removes, so a failed assertion below leaves no key file behind. */
    const char *dir = getenv("TMPDIR");
    char path[4096], line[128], err[300];
    snprintf(path, sizeof path, "%s/delayq-test-key.XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    new_line(line, sizeof line);
    assert_int_equal(write(fd, line, strlen(line)), (ssize_t)strlen(line));
    close(fd);
    dq__keyring *kr = NULL;
    assert_int_equal(chmod(path, 0640), 0);
    assert_int_equal(dq__keyring_load(path, &kr, err, sizeof err), DQ_EINVAL);
    assert_non_null(strstr(err, "group or others"));
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(dq__keyring_load(path, &kr, err, sizeof err), 0);
    dq__keyring_free(kr);
    unlink(path);
    assert_int_equal(dq__keyring_load(path, &kr, err, sizeof err), DQ_EINVAL);
    assert_non_null(strstr(err, "cannot read"));
}

static void test_round_trip(void **state) {
    (void)state;
    char line[128];
    new_line(line, sizeof line);
    dq__keyring *kr = ring_of(line);
    unsigned char pt[256];
    for (int i = 0; i < 256; i++) pt[i] = (unsigned char)i;
    for (size_t len = 0; len <= sizeof pt; len += 64) {
        unsigned char *env, *out;
        size_t el, ol;
        assert_int_equal(dq__seal(kr, "q", "id-1", pt, len, &env, &el), 0);
        assert_int_equal(el, len + DQ__SEAL_OVERHEAD);
        unsigned char kid[DQ__KEY_ID_LEN];
        assert_true(dq__sealed(env, el, kid));
        assert_int_equal(dq__open(kr, "q", "id-1", 4, env, el, &out, &ol), 0);
        assert_int_equal(ol, len);
        if (len) assert_memory_equal(out, pt, len);
        if (len) assert_null(memmem(env, el, pt, len > 16 ? 16 : len)); /* nothing in the clear */
        free(out);
        free(env);
    }
    assert_false(dq__sealed("plain", 5, NULL));
    dq__keyring_free(kr);
}

static void test_what_does_not_open(void **state) {
    (void)state;
    char a[128], b[128];
    new_line(a, sizeof a);
    new_line(b, sizeof b);
    dq__keyring *ka = ring_of(a), *kb = ring_of(b);
    unsigned char *env, *out;
    size_t el, ol;
    assert_int_equal(dq__seal(ka, "orders", "o-1", "pay me", 6, &env, &el), 0);
    assert_int_equal(dq__open(ka, "orders", "o-2", 3, env, el, &out, &ol), DQ_EPROTO); /* another item */
    assert_int_equal(dq__open(ka, "refunds", "o-1", 3, env, el, &out, &ol),
                     DQ_EPROTO); /* another queue */
    assert_int_equal(dq__open(kb, "orders", "o-1", 3, env, el, &out, &ol), DQ_EKEY); /* another key */
    assert_int_equal(dq__open(NULL, "orders", "o-1", 3, env, el, &out, &ol), DQ_EKEY); /* no key */
    for (size_t i = DQ__SEAL_MAGIC_LEN + DQ__KEY_ID_LEN; i < el; i++) { /* any byte */
        env[i] ^= 0x01;
        assert_int_equal(dq__open(ka, "orders", "o-1", 3, env, el, &out, &ol), DQ_EPROTO);
        env[i] ^= 0x01;
    }
    assert_int_equal(dq__open(ka, "orders", "o-1", 3, env, el, &out, &ol), 0);
    free(out);
    assert_int_equal(dq__open(ka, "orders", "o-1", 3, env, el - 1, &out, &ol), DQ_EPROTO); /* cut */
    free(env);
    dq__keyring_free(ka);
    dq__keyring_free(kb);
}

static void test_rotation(void **state) {
    (void)state;
    char old_line[128], new_line_[128], both[256];
    new_line(old_line, sizeof old_line);
    new_line(new_line_, sizeof new_line_);
    snprintf(both, sizeof both, "%s%s", new_line_, old_line);
    dq__keyring *old = ring_of(old_line), *rotated = ring_of(both);
    unsigned char *env, *out, kid[DQ__KEY_ID_LEN];
    size_t el, ol;
    char hex[DQ__KEY_ID_LEN * 2 + 1];
    assert_int_equal(dq__seal(old, "q", "x", "before", 6, &env, &el), 0);
    assert_int_equal(dq__open(rotated, "q", "x", 1, env, el, &out, &ol), 0); /* old items still open */
    assert_memory_equal(out, "before", 6);
    free(out);
    free(env);
    assert_int_equal(dq__seal(rotated, "q", "y", "after", 5, &env, &el), 0);
    assert_true(dq__sealed(env, el, kid));
    dq__key_id_hex(kid, hex);
    assert_memory_equal(hex, new_line_ + 9, 16); /* the new key seals */
    assert_int_equal(dq__open(old, "q", "y", 1, env, el, &out, &ol), DQ_EKEY);
    free(env);
    dq__keyring_free(old);
    dq__keyring_free(rotated);
}

static void test_bound_to_queue(void **state) {
    (void)state;
    char line[128];
    new_line(line, sizeof line);
    dq__keyring *kr = ring_of(line);
    unsigned char *env, *out;
    size_t el, ol;
    /* An offer names the queue, a take the shard it runs on ("q~T"). */
    assert_int_equal(dq__seal(kr, "orders", "o-1", "pay", 3, &env, &el), 0);
    assert_int_equal(dq__open(kr, "orders~3f", "o-1", 3, env, el, &out, &ol), 0);
    free(out);
    assert_int_equal(dq__open(kr, "orders~0", "o-1", 3, env, el, &out, &ol), 0);
    free(out);
    assert_int_equal(dq__open(kr, "orders2", "o-1", 3, env, el, &out, &ol), DQ_EPROTO);
    assert_int_equal(dq__open(kr, "order", "o-1", 3, env, el, &out, &ol), DQ_EPROTO);
    assert_int_equal(dq__open(kr, "refunds~3f", "o-1", 3, env, el, &out, &ol), DQ_EPROTO);
    free(env);
    assert_int_equal(dq__seal(kr, "orders~1", "o-2", "pay", 3, &env, &el), 0);
    assert_int_equal(dq__open(kr, "orders", "o-2", 3, env, el, &out, &ol), 0);
    free(out);
    free(env);
    dq__keyring_free(kr);
}

static void test_tick_ids(void **state) {
    (void)state;
    size_t nl = 99;
    assert_true(dq__tick_id("nightly@0", 9, &nl) && nl == 7);
    assert_true(dq__tick_id("a.b:c-d_e@1795783108709", 23, &nl) && nl == 9);
    assert_true(dq__tick_id("a@4398046511103", 15, &nl) && nl == 1); /* DQ_DUE_MAX_MS */
    static const char *const no[] = {"a@4398046511104",
                                     "a@0123",
                                     "a@",
                                     "@5",
                                     "a@-5",
                                     "a@+5",
                                     "a@5x",
                                     "a@b@5",
                                     "a b@5",
                                     "a@ 5",
                                     "nightly",
                                     "a@99999999999999999999"};
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        if (dq__tick_id(no[i], strlen(no[i]), &nl)) fail_msg("'%s' read as a tick id", no[i]);
    char longname[DQ_RECURRING_NAME_MAX + 8];
    memset(longname, 'n', sizeof longname);
    memcpy(longname + DQ_RECURRING_NAME_MAX, "@5", 2);
    assert_true(dq__tick_id(longname, DQ_RECURRING_NAME_MAX + 2, &nl) && nl == DQ_RECURRING_NAME_MAX);
    longname[DQ_RECURRING_NAME_MAX] = 'n';
    memcpy(longname + DQ_RECURRING_NAME_MAX + 1, "@5", 2);
    assert_false(dq__tick_id(longname, DQ_RECURRING_NAME_MAX + 3, &nl));
    /* Only len bytes are read: what follows (an entry's payload) is not. */
    assert_true(dq__tick_id("a@5xyz", 3, &nl) && nl == 1);
}

static void test_schedule_binding(void **state) {
    (void)state;
    char line[128];
    new_line(line, sizeof line);
    dq__keyring *kr = ring_of(line);
    unsigned char *env, *item, *out;
    size_t el, il, ol;
    assert_int_equal(dq__seal_schedule(kr, "orders", "nightly", "run", 3, &env, &el), 0);
    assert_int_equal(el, 3 + DQ__SEAL_OVERHEAD);
    /* Every tick of the schedule, on any shard's name of the queue. */
    assert_int_equal(dq__open(kr, "orders", "nightly@1000", 12, env, el, &out, &ol), 0);
    assert_true(ol == 3 && memcmp(out, "run", 3) == 0);
    free(out);
    assert_int_equal(dq__open(kr, "orders~3f", "nightly@0", 9, env, el, &out, &ol), 0);
    free(out);
    /* Nothing else: another schedule, queue, an ordinary id, one almost a tick's. */
    static const char *const ids[] = {"weekly@1000", "nightly", "nightly@01000", "Nightly@1000",
                                      "nightly@"};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
        assert_int_equal(dq__open(kr, "orders", ids[i], strlen(ids[i]), env, el, &out, &ol), DQ_EPROTO);
    assert_int_equal(dq__open(kr, "refunds", "nightly@1000", 12, env, el, &out, &ol), DQ_EPROTO);
    /* The reverse: an item's envelope in a tick's item opens only under its own id. */
    assert_int_equal(dq__seal(kr, "orders", "nightly", "run", 3, &item, &il), 0);
    assert_int_equal(dq__open(kr, "orders", "nightly@1000", 12, item, il, &out, &ol), DQ_EPROTO);
    free(item);
    assert_int_equal(dq__seal(kr, "orders", "nightly@1000", "run", 3, &item, &il), 0);
    assert_int_equal(dq__open(kr, "orders", "nightly@1000", 12, item, il, &out, &ol), 0);
    free(out);
    assert_int_equal(dq__open(kr, "orders", "nightly@2000", 12, item, il, &out, &ol), DQ_EPROTO);
    free(item);
    free(env);
    dq__keyring_free(kr);
}

/* dq__open_taken of len bytes of p by kr on item "o-1" of "orders": its
 * return, *out checked against it, and why checked to hold want (NULL:
 * not refused). */
static int taken(dq__keyring *kr, int allow, const void *p, size_t len, const char *want) {
    unsigned char *out = (unsigned char *)1;
    size_t ol = 0;
    char why[128] = "";
    int rc = dq__open_taken(kr, allow, "orders~2", "o-1", 3, p, len, &out, &ol, why, sizeof why);
    if (rc == 0) assert_non_null(out);
    else assert_null(out);
    if (rc < 0 && (!want || !strstr(why, want)))
        fail_msg("len %zu: refused as '%s', want '%s'", len, why, want);
    if (rc >= 0 && want) fail_msg("len %zu: not refused (%d), want '%s'", len, rc, want);
    free(out);
    return rc;
}

static void test_open_taken_strict(void **state) {
    (void)state;
    char a[128], b[128];
    new_line(a, sizeof a);
    new_line(b, sizeof b);
    dq__keyring *ka = ring_of(a), *kb = ring_of(b);
    unsigned char *env, fake[DQ__SEAL_OVERHEAD + 8];
    size_t el;
    assert_int_equal(dq__seal(ka, "orders", "o-1", "pay me", 6, &env, &el), 0);
    assert_int_equal(taken(ka, 0, env, el, NULL), 0);
    assert_int_equal(taken(ka, 1, env, el, NULL), 0);
    /* Plaintext: refused by default, delivered as it is when allowed, and
     * always by a client without keys. */
    assert_int_equal(taken(ka, 0, "pay me", 6, "not sealed"), DQ_EINVAL);
    assert_int_equal(taken(ka, 0, "", 0, "not sealed"), DQ_EINVAL);
    assert_int_equal(taken(ka, 1, "pay me", 6, NULL), 1);
    assert_int_equal(taken(NULL, 0, "pay me", 6, NULL), 1);
    /* Every cut: shorter than an envelope is never delivered to a client with
     * keys (the first 4 bytes alone cannot be told from binary plaintext); a
     * byte short of the whole fails authentication. */
    for (size_t len = 0; len < el; len++) {
        const char *want = len < DQ__SEAL_MAGIC_LEN - 1 ? "not sealed"
                           : len < DQ__SEAL_OVERHEAD    ? "cut short"
                                                        : "failed authentication";
        assert_int_equal(taken(ka, 0, env, len, want), len < DQ__SEAL_OVERHEAD ? DQ_EINVAL : DQ_EPROTO);
        if (len >= DQ__SEAL_MAGIC_LEN - 1)
            assert_true(taken(ka, 1, env, len, len < DQ__SEAL_OVERHEAD ? "cut short" : "failed") < 0);
        else assert_int_equal(taken(ka, 1, env, len, NULL), 1);
        assert_true(dq__looks_sealed(env, len) == (len >= DQ__SEAL_MAGIC_LEN - 1));
    }
    /* Another format version: refused even when plaintext is allowed. */
    memset(fake, 'x', sizeof fake);
    memcpy(fake, env, el); /* 6 bytes of payload: el < sizeof fake */
    fake[DQ__SEAL_MAGIC_LEN - 1] = '2';
    assert_int_equal(taken(ka, 1, fake, sizeof fake, "unknown format"), DQ_EINVAL);
    assert_int_equal(taken(ka, 0, fake, DQ__SEAL_MAGIC_LEN, "unknown format"), DQ_EINVAL);
    /* Forged: a key id nobody here holds, or ka's id over another body. */
    assert_int_equal(taken(kb, 0, env, el, "which the taking client lacked"), DQ_EKEY);
    assert_int_equal(taken(NULL, 0, env, el, "which the taking client lacked"), DQ_EKEY);
    memcpy(fake, env, DQ__SEAL_MAGIC_LEN + DQ__KEY_ID_LEN);
    randombytes_buf(fake + DQ__SEAL_MAGIC_LEN + DQ__KEY_ID_LEN,
                    sizeof fake - DQ__SEAL_MAGIC_LEN - DQ__KEY_ID_LEN);
    assert_int_equal(taken(ka, 1, fake, sizeof fake, "failed authentication"), DQ_EPROTO);
    randombytes_buf(fake + DQ__SEAL_MAGIC_LEN, DQ__KEY_ID_LEN);
    assert_int_equal(taken(ka, 1, fake, sizeof fake, "lacked"), DQ_EKEY);
    free(env);
    dq__keyring_free(ka);
    dq__keyring_free(kb);
}

int main(void) {
    if (sodium_init() < 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_lines),          cmocka_unit_test(test_key_errors),
        cmocka_unit_test(test_key_file_mode),      cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_what_does_not_open), cmocka_unit_test(test_rotation),
        cmocka_unit_test(test_bound_to_queue),     cmocka_unit_test(test_open_taken_strict),
        cmocka_unit_test(test_tick_ids),           cmocka_unit_test(test_schedule_binding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
