/*
 * test_ackargs.c - unit tests of the ack script's grouped arguments
 * (src/util/ackargs.c): tokens cut at their last two dots, consecutive items of
 * one prefix and suffix in one group, any other token a group of its own,
 * and the cut always giving the token back (prefix .. middle .. suffix);
 * packing: a group of blocks 1..k in order becomes count "*k", the ids
 * joined and the buckets joined, and every other group stays as it was.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"

/* Argument i of a as a NUL-terminated copy (the arguments are counted
 * strings pointing into the tokens). */
static const char *arg(const dq__ack_args *a, size_t i) {
    static char buf[8][128];
    static int next;
    char *s = buf[next++ % 8];
    assert_true(a->lens[i] < sizeof buf[0]);
    memcpy(s, a->argv[i], a->lens[i]);
    s[a->lens[i]] = '\0';
    return s;
}

/* The keys and fixed arguments: argv[0..3]; the groups start at F. */
#define F 4
static void start(dq__ack_args *a) { dq__ack_args_init(a, "zs", "n", "dq:{q}:", "1"); }

static void add(dq__ack_args *a, const char *id, const char *token) {
    assert_int_equal(dq__ack_args_add(a, id, token), 0);
}

static void test_one_record_one_group(void **state) {
    (void)state;
    dq__ack_args a;
    start(&a);
    add(&a, "o1", "Rq.1.4096");
    add(&a, "o2", "Rq.2.4096");
    add(&a, "o3", "Rq.17.4096");
    assert_int_equal(a.groups, 1);
    assert_int_equal(a.n, F + 3 + 3 * 3);
    assert_string_equal(arg(&a, 0), "zs");
    assert_string_equal(arg(&a, 2), "dq:{q}:");
    assert_string_equal(arg(&a, 3), "1");
    assert_string_equal(arg(&a, F - 1 + 1), "Rq.");
    assert_string_equal(arg(&a, F - 1 + 2), ".4096");
    assert_string_equal(arg(&a, F - 1 + 3), "3");
    const char *want[3][2] = {{"1", "o1"}, {"2", "o2"}, {"17", "o3"}};
    for (int i = 0; i < 3; i++) {
        assert_string_equal(arg(&a, F - 1 + 4 + 3 * (size_t)i), want[i][0]);
        assert_string_equal(arg(&a, F - 1 + 5 + 3 * (size_t)i), want[i][1]);
        char bucket[16];
        snprintf(bucket, sizeof bucket, "%d", dq__id_bucket(want[i][1]));
        assert_string_equal(arg(&a, F - 1 + 6 + 3 * (size_t)i), bucket);
    }
}

static void test_groups_change_with_prefix_or_suffix(void **state) {
    (void)state;
    dq__ack_args a;
    start(&a);
    add(&a, "a", "R1.1.4096");
    add(&a, "b", "R2.1.4096"); /* another take, same score */
    add(&a, "c", "R2.2.8192"); /* same take, another score */
    add(&a, "d", "R1.2.4096"); /* back to the first: a new group */
    assert_int_equal(a.groups, 4);
    assert_int_equal(a.n, F + 4 * 6);
    for (size_t g = 0; g < 4; g++) assert_string_equal(arg(&a, F - 1 + 1 + 6 * g + 2), "1");
    assert_string_equal(arg(&a, F - 1 + 7), "R2.");
    assert_string_equal(arg(&a, F - 1 + 14), ".8192");
}

static void test_tokens_without_two_dots(void **state) {
    (void)state;
    const char *tokens[] = {"plain", "one.dot", ".", ".."};
    dq__ack_args a;
    start(&a);
    for (size_t i = 0; i < 4; i++) add(&a, "x", tokens[i]);
    /* Each token that cannot be cut is all prefix; ".." cuts into "." + ""
     * + ".". */
    assert_int_equal(a.groups, 4);
    assert_string_equal(arg(&a, F - 1 + 1), "plain");
    assert_string_equal(arg(&a, F - 1 + 2), "");
    assert_string_equal(arg(&a, F - 1 + 4), "");
    assert_string_equal(arg(&a, F - 1 + 7), "one.dot");
    assert_string_equal(arg(&a, F - 1 + 13), ".");
    assert_string_equal(arg(&a, F - 1 + 19), ".");
    assert_string_equal(arg(&a, F - 1 + 20), ".");
    assert_string_equal(arg(&a, F - 1 + 22), "");
}

/* Whatever the token, its group's prefix, its middle and the suffix give it
 * back byte for byte: the script rebuilds tokens it looks up by index. */
static void test_cut_gives_the_token_back(void **state) {
    (void)state;
    const char *tokens[] = {
        "a.b.c.d", "x..y", "...",  "007.012.0009",
        "t",       "abc.", ".abc", "0123456789012345678901234567890123456789012345678901234567890.1.2"};
    for (size_t t = 0; t < sizeof tokens / sizeof *tokens; t++) {
        dq__ack_args a;
        start(&a);
        add(&a, "id", tokens[t]);
        char back[256];
        snprintf(back, sizeof back, "%s%s%s", arg(&a, F - 1 + 1), arg(&a, F - 1 + 4),
                 arg(&a, F - 1 + 2));
        assert_string_equal(back, tokens[t]);
    }
}

static void test_full_batch(void **state) {
    (void)state;
    dq__ack_args a;
    start(&a);
    char tokens[DQ__ACK_BATCH][32], ids[DQ__ACK_BATCH][16];
    for (int i = 0; i < DQ__ACK_BATCH; i++) {
        /* Every item a group of its own: the most arguments a batch makes. */
        snprintf(tokens[i], sizeof tokens[i], "R%d.%d.4096", i, i + 1);
        snprintf(ids[i], sizeof ids[i], "id%d", i);
        add(&a, ids[i], tokens[i]);
    }
    assert_int_equal(a.groups, DQ__ACK_BATCH);
    assert_int_equal(a.n, F + 6 * DQ__ACK_BATCH);
    assert_true(a.n <= sizeof a.argv / sizeof a.argv[0]);
    char last[16];
    snprintf(last, sizeof last, "id%d", DQ__ACK_BATCH - 1);
    assert_string_equal(arg(&a, a.n - 2), last);
}

/* The bucket of id as text, as the script's bucket keys spell it. */
static const char *bucket_of(const char *id) {
    static char buf[4][16];
    static int next;
    char *s = buf[next++ % 4];
    snprintf(s, sizeof buf[0], "%d", dq__id_bucket(id));
    return s;
}

static void test_pack_whole_take(void **state) {
    (void)state;
    dq__ack_args a;
    start(&a);
    add(&a, "o1", "Rq.1.4096");
    add(&a, "o2", "Rq.2.4096");
    add(&a, "o3", "Rq.3.4096");
    dq__ack_args_pack(&a);
    assert_int_equal(a.n, F + 5);
    assert_string_equal(arg(&a, F), "Rq.");
    assert_string_equal(arg(&a, F + 1), ".4096");
    assert_string_equal(arg(&a, F + 2), "*3");
    assert_string_equal(arg(&a, F + 3), "o1 o2 o3");
    char want[64];
    snprintf(want, sizeof want, "%s %s %s", bucket_of("o1"), bucket_of("o2"), bucket_of("o3"));
    assert_string_equal(arg(&a, F + 4), want);
}

/* Blocks not 1..k in order (a gap, a repeat, another order, a leading
 * zero), and groups of one item: left as they were. */
static void test_pack_leaves_other_groups(void **state) {
    (void)state;
    const char *mids[][3] = {{"1", "3", "4"}, {"1", "1", "2"}, {"2", "1", "3"}, {"01", "2", "3"}};
    for (size_t t = 0; t < sizeof mids / sizeof *mids; t++) {
        dq__ack_args a, before;
        start(&a);
        char tokens[3][32];
        for (int i = 0; i < 3; i++) {
            snprintf(tokens[i], sizeof tokens[i], "Rq.%s.4096", mids[t][i]);
            add(&a, i == 0 ? "a" : i == 1 ? "b" : "c", tokens[i]);
        }
        before = a;
        dq__ack_args_pack(&a);
        assert_int_equal(a.n, before.n);
        for (size_t i = 0; i < a.n; i++) assert_string_equal(arg(&a, i), arg(&before, i));
    }
    dq__ack_args a;
    start(&a);
    add(&a, "solo", "Rq.1.4096");
    dq__ack_args_pack(&a);
    assert_int_equal(a.n, F + 6);
    assert_string_equal(arg(&a, F + 2), "1");
}

/* Packed and unpacked groups side by side: each in its place, the
 * unpacked ones moved down whole. */
static void test_pack_mixed_groups(void **state) {
    (void)state;
    dq__ack_args a;
    start(&a);
    add(&a, "a1", "R1.1.10"); /* group 1: blocks 1, 2: packed */
    add(&a, "a2", "R1.2.10");
    add(&a, "b5", "R2.5.20"); /* group 2: block 5 alone */
    add(&a, "c1", "R3.1.30"); /* group 3: blocks 1, 3: as it is */
    add(&a, "c3", "R3.3.30");
    add(&a, "d1", "R4.1.40"); /* group 4: blocks 1, 2: packed */
    add(&a, "d2", "R4.2.40");
    dq__ack_args_pack(&a);
    assert_int_equal(a.n, F + 5 + 6 + 9 + 5);
    /* One record a line (clang-format would pack them). */
    /* clang-format off */
    const char *want[] = {"R1.", ".10", "*2", "a1 a2", NULL,
                          "R2.", ".20", "1", "5", "b5", NULL,
                          "R3.", ".30", "2", "1", "c1", NULL, "3", "c3", NULL,
                          "R4.", ".40", "*2", "d1 d2", NULL};
    /* clang-format on */
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (want[i]) assert_string_equal(arg(&a, F + i), want[i]);
    assert_string_equal(arg(&a, F + 10), bucket_of("b5"));
    char both[32];
    snprintf(both, sizeof both, "%s %s", bucket_of("d1"), bucket_of("d2"));
    assert_string_equal(arg(&a, F + 24), both);
}

/* A full batch of the longest ids in one take: two arguments, all of it. */
static void test_pack_full_batch(void **state) {
    (void)state;
    static dq__ack_args a;
    static char ids[DQ__ACK_BATCH][DQ_ID_MAX + 1], tokens[DQ__ACK_BATCH][32];
    start(&a);
    for (int i = 0; i < DQ__ACK_BATCH; i++) {
        memset(ids[i], 'a' + i % 26, DQ_ID_MAX);
        ids[i][DQ_ID_MAX] = '\0';
        snprintf(tokens[i], sizeof tokens[i], "R.%d.4096", i + 1);
        add(&a, ids[i], tokens[i]);
    }
    dq__ack_args_pack(&a);
    assert_int_equal(a.n, F + 5);
    char count[16];
    snprintf(count, sizeof count, "*%d", DQ__ACK_BATCH);
    assert_string_equal(arg(&a, F + 2), count);
    assert_int_equal(a.lens[F + 3], DQ__ACK_BATCH * (DQ_ID_MAX + 1) - 1);
    assert_memory_equal(a.argv[F + 3] + a.lens[F + 3] - DQ_ID_MAX, ids[DQ__ACK_BATCH - 1], DQ_ID_MAX);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_record_one_group),
        cmocka_unit_test(test_groups_change_with_prefix_or_suffix),
        cmocka_unit_test(test_tokens_without_two_dots),
        cmocka_unit_test(test_cut_gives_the_token_back),
        cmocka_unit_test(test_full_batch),
        cmocka_unit_test(test_pack_whole_take),
        cmocka_unit_test(test_pack_leaves_other_groups),
        cmocka_unit_test(test_pack_mixed_groups),
        cmocka_unit_test(test_pack_full_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
