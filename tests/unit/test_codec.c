/*
 * test_codec.c - unit tests of src/util/codec.c: queue-name and id rules at
 * their edges, key building with exact buffer sizes, the ready-entry decoder
 * on well-formed, binary and malformed input, and the set-aside encoder.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util.h"

/* A NUL-terminated string of n copies of c (n < 300). */
static const char *run_of(char c, size_t n) {
    static char buf[300];
    assert_true(n < sizeof buf);
    memset(buf, c, n);
    buf[n] = '\0';
    return buf;
}

/* ------------------------------------------------------------ names */

static void test_queue_valid(void **state) {
    char one[2] = {0, 0};
    int c;
    (void)state;
    assert_int_equal(dq__queue_valid("a"), 1);
    assert_int_equal(dq__queue_valid("orders.eu-1:retry_2"), 1);
    assert_int_equal(dq__queue_valid("ABCXYZabcxyz0189_.:-"), 1);
    assert_int_equal(dq__queue_valid(run_of('q', DQ_QUEUE_MAX)), 1);
    assert_int_equal(dq__queue_valid(run_of('q', DQ_QUEUE_MAX + 1)), 0);
    assert_int_equal(dq__queue_valid(""), 0);
    assert_int_equal(dq__queue_valid(NULL), 0);
    assert_int_equal(dq__queue_valid("a b"), 0);
    assert_int_equal(dq__queue_valid("a{b"), 0); /* would break the hash tag */
    assert_int_equal(dq__queue_valid("a}b"), 0);
    assert_int_equal(dq__queue_valid("a/b"), 0);
    assert_int_equal(dq__queue_valid("caf\xc3\xa9"), 0);
    /* every single byte: exactly the documented set is accepted */
    for (c = 1; c < 256; c++) {
        int want = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '_' || c == '.' || c == ':' || c == '-';
        one[0] = (char)c;
        assert_int_equal(dq__queue_valid(one), want);
    }
}

static void test_id_valid(void **state) {
    char one[2] = {0, 0};
    int c;
    (void)state;
    assert_int_equal(dq__id_valid("!"), 1);
    assert_int_equal(dq__id_valid("~"), 1);
    assert_int_equal(dq__id_valid("order-42|{x}:\"q\"\\"), 1);
    assert_int_equal(dq__id_valid(run_of('i', DQ_ID_MAX)), 1);
    assert_int_equal(dq__id_valid(run_of('i', DQ_ID_MAX + 1)), 0);
    assert_int_equal(dq__id_valid(""), 0);
    assert_int_equal(dq__id_valid(NULL), 0);
    assert_int_equal(dq__id_valid("a b"), 0);
    assert_int_equal(dq__id_valid("ab\n"), 0);
    for (c = 1; c < 256; c++) {
        one[0] = (char)c;
        assert_int_equal(dq__id_valid(one), c >= 0x21 && c <= 0x7e);
    }
}

/* ------------------------------------------------------------ keys */

static void test_key(void **state) {
    char buf[64];
    (void)state;
    assert_int_equal(dq__key(buf, sizeof buf, "orders", "z"), 13);
    assert_string_equal(buf, "dq:{orders}:z");
    assert_int_equal(dq__key(buf, sizeof buf, "q", "p:8191"), 13);
    assert_string_equal(buf, "dq:{q}:p:8191");
    assert_int_equal(dq__key(buf, sizeof buf, "q", ""), 7);
    assert_string_equal(buf, "dq:{q}:");
    assert_int_equal(dq__key(buf, sizeof buf, "q", NULL), 7);
    assert_string_equal(buf, "dq:{q}:");
    /* exact fit: 8 chars + NUL in 9 bytes; one byte less fails cleanly */
    assert_int_equal(dq__key(buf, 9, "q", "r"), 8);
    assert_string_equal(buf, "dq:{q}:r");
    assert_int_equal(dq__key(buf, 8, "q", "r"), -1);
    assert_string_equal(buf, "");
    assert_int_equal(dq__key(buf, 1, "q", "r"), -1);
    assert_int_equal(dq__key(buf, 0, "q", "r"), -1);
    assert_int_equal(dq__key(NULL, 10, "q", "r"), -1);
    assert_int_equal(dq__key(buf, sizeof buf, NULL, "r"), -1);
}

/* The longest queue name with the longest suffix fits a 160-byte buffer. */
static void test_key_longest_queue(void **state) {
    char buf[160], queue[DQ_QUEUE_MAX + 1];
    (void)state;
    memset(queue, 'q', DQ_QUEUE_MAX);
    queue[DQ_QUEUE_MAX] = '\0';
    assert_int_equal(dq__key(buf, sizeof buf, queue, "p:8191"), 4 + DQ_QUEUE_MAX + 2 + 6);
    assert_memory_equal(buf, "dq:{qq", 6);
    assert_string_equal(buf + 4 + DQ_QUEUE_MAX, "}:p:8191");
}

/* dq__fmt_i64 agrees with printf's %lld on the edges and around them. */
static void test_fmt_i64(void **state) {
    static const int64_t values[] = {0,
                                     1,
                                     9,
                                     10,
                                     99,
                                     100,
                                     -1,
                                     -9,
                                     -10,
                                     4398046511103LL,
                                     1700000000123LL * 2048,
                                     INT64_MAX,
                                     INT64_MAX - 1,
                                     INT64_MIN,
                                     INT64_MIN + 1,
                                     1000000000000000000LL};
    char got[21], want[32];
    size_t i;
    (void)state;
    for (i = 0; i < sizeof values / sizeof values[0]; i++) {
        int n = snprintf(want, sizeof want, "%lld", (long long)values[i]);
        assert_int_equal(dq__fmt_i64(got, values[i]), (size_t)n);
        assert_string_equal(got, want);
    }
}

/* ------------------------------------------------------------ ready entries */

static void test_entry_decode_basic(void **state) {
    static const char e[] = "1|1700000000123|1700000000456|3|abcpayload";
    dq__entry d;
    (void)state;
    assert_int_equal(dq__entry_decode(e, sizeof e - 1, &d), 0);
    assert_int_equal(d.due_ms, 1700000000123LL);
    assert_int_equal(d.ready_ms, 1700000000456LL);
    assert_ptr_equal(d.id, e + 32);
    assert_int_equal(d.id_len, 3);
    assert_memory_equal(d.id, "abc", 3);
    assert_ptr_equal(d.payload, e + 35);
    assert_int_equal(d.payload_len, 7);
    assert_memory_equal(d.payload, "payload", 7);
}

/* The payload is the raw tail: NUL, '|' and high bytes all survive, and the
 * id may hold '|' too (it is printable). */
static void test_entry_decode_binary(void **state) {
    static const char e[] = "1|0|0|4|a|b|\0|x\xff|";
    dq__entry d;
    (void)state;
    assert_int_equal(dq__entry_decode(e, sizeof e - 1, &d), 0);
    assert_int_equal(d.due_ms, 0);
    assert_int_equal(d.ready_ms, 0);
    assert_int_equal(d.id_len, 4);
    assert_memory_equal(d.id, "a|b|", 4);
    assert_int_equal(d.payload_len, 5);
    assert_memory_equal(d.payload, "\0|x\xff|", 5);
}

static void test_entry_decode_empty_payload(void **state) {
    static const char e[] = "1|5|6|2|idTRAILING";
    dq__entry d;
    (void)state;
    /* len bounds the entry: nothing past it is read or returned */
    assert_int_equal(dq__entry_decode(e, 10, &d), 0);
    assert_int_equal(d.due_ms, 5);
    assert_int_equal(d.ready_ms, 6);
    assert_int_equal(d.id_len, 2);
    assert_memory_equal(d.id, "id", 2);
    assert_int_equal(d.payload_len, 0);
    assert_ptr_equal(d.payload, e + 10);
}

static void test_entry_decode_number_edges(void **state) {
    static const char max[] = "1|4398046511103|0000000000000000001|1|x";
    static const char zeros[] = "1|00|0|01|xy";
    dq__entry d;
    (void)state;
    assert_int_equal(dq__entry_decode(max, sizeof max - 1, &d), 0);
    assert_int_equal(d.due_ms, DQ_DUE_MAX_MS);
    assert_int_equal(d.ready_ms, 1);
    assert_int_equal(d.id_len, 1);
    assert_int_equal(d.payload_len, 0);
    assert_int_equal(dq__entry_decode(zeros, sizeof zeros - 1, &d), 0);
    assert_int_equal(d.due_ms, 0);
    assert_int_equal(d.id_len, 1);
    assert_memory_equal(d.id, "x", 1);
    assert_int_equal(d.payload_len, 1);
    assert_memory_equal(d.payload, "y", 1);
}

/* Version 2 (delivered before): attempts and the last error come first. */
static void test_entry_decode_v2(void **state) {
    static const char e[] = "2|1700000000123|1700000000456|3|2|4|idoopspay|load";
    static const char no_err[] = "2|5|6|15|1|0|x";
    dq__entry d;
    (void)state;
    assert_int_equal(dq__entry_decode(e, sizeof e - 1, &d), 0);
    assert_int_equal(d.due_ms, 1700000000123LL);
    assert_int_equal(d.ready_ms, 1700000000456LL);
    assert_int_equal(d.attempts, 3);
    assert_int_equal(d.id_len, 2);
    assert_memory_equal(d.id, "id", 2);
    assert_int_equal(d.err_len, 4);
    assert_memory_equal(d.err, "oops", 4);
    assert_int_equal(d.payload_len, 8);
    assert_memory_equal(d.payload, "pay|load", 8);
    assert_int_equal(dq__entry_decode(no_err, sizeof no_err - 1, &d), 0);
    assert_int_equal(d.attempts, 15);
    assert_int_equal(d.err_len, 0);
    assert_int_equal(d.payload_len, 0);
    assert_ptr_equal(d.payload, no_err + sizeof no_err - 1);
}

static void test_entry_decode_id_limit(void **state) {
    char e[300];
    dq__entry d;
    int n;
    (void)state;
    n = snprintf(e, sizeof e, "1|1|2|%d|%sP", DQ_ID_MAX, run_of('i', DQ_ID_MAX));
    assert_int_equal(dq__entry_decode(e, (size_t)n, &d), 0);
    assert_int_equal(d.id_len, DQ_ID_MAX);
    assert_int_equal(d.payload_len, 1);
    n = snprintf(e, sizeof e, "1|1|2|%d|%s", DQ_ID_MAX + 1, run_of('i', DQ_ID_MAX + 1));
    assert_int_equal(dq__entry_decode(e, (size_t)n, &d), DQ_EPROTO);
}

/* The id rule's edges: '!' (0x21) and '~' (0x7e) are in; an id made of
 * every allowed byte decodes. */
static void test_entry_decode_id_rule(void **state) {
    char e[200], id[95];
    dq__entry d;
    int n;
    (void)state;
    for (int c = 0x21; c <= 0x7e; c++) id[c - 0x21] = (char)c;
    id[94] = '\0';
    n = snprintf(e, sizeof e, "2|1|2|998|%d|0|%s\x01 \x7f", 94, id);
    assert_int_equal(dq__entry_decode(e, (size_t)n, &d), 0);
    assert_int_equal(d.id_len, 94);
    assert_memory_equal(d.id, id, 94);
    assert_int_equal(d.attempts, 998);
    assert_int_equal(d.payload_len, 3);
    n = snprintf(e, sizeof e, "2|1|2|999999998|1|0|!~");
    assert_int_equal(dq__entry_decode(e, (size_t)n, &d), 0);
    assert_int_equal(d.attempts, 999999998);
    assert_memory_equal(d.payload, "~", 1);
}

static const char *const bad_entries[] = {
    "",
    "1",
    "1|",
    "3|1|2|1|a",           /* unknown version */
    "0|1|2|1|a",
    "11|1|2|1|a",
    "x|1|2|1|a",
    "|1|2|1|a",
    "1,1|2|1|a",
    "1|1|2|1",             /* no '|' after idlen */
    "1|1|2|1a",
    "1|1|2",
    "1|1|2|",
    "1|1",
    "1||2|1|a",            /* empty field */
    "1|1||1|a",
    "1|1|2||a",
    "1|-1|2|1|a",          /* sign */
    "1|+1|2|1|a",
    "1|1|-2|1|a",
    "1|1|2|-1|a",
    "1| 1|2|1|a",          /* space */
    "1|1 |2|1|a",
    "1|1|2|1 |a",
    "1|1.5|2|1|a",         /* fraction */
    "1|1e3|2|1|a",
    "1|0x1|2|1|a",
    "1|1|2|0|",            /* empty id */
    "1|1|2|0|payload",
    "1|1|2|4|abc",         /* idlen past the end */
    "1|1|2|2|a",
    "1|1|2|99999999999999999|a",
    "1|9223372036854775808|2|1|a", /* INT64_MAX + 1 */
    "1|1|9999999999999999999|1|a", /* 19 digits, above INT64_MAX */
    "1|10000000000000000000|2|1|a", /* 20 digits */
    "1|00000000000000000001|2|1|a", /* 20 digits, small value */
    "1|1|2|18446744073709551617|a", /* 2^64 + 1: would wrap to 1 */
    "2|1|2|1|a",           /* version 2: no attempts or error length */
    "2|1|2|3|1|a",         /* no error length */
    "2|1|2|3|1|5|abc",     /* error past the end */
    "2|1|2|3|2|1|ab",
    "2|1|2|3|0|0|",        /* empty id */
    "2|1|2|-3|1|0|a",      /* sign */
    "2|1|2|3|1|-1|a",
    "2|1|2|2147483647|1|0|a", /* attempts + 1 overflows an int */
    "2|1|2|999999999|1|0|a", /* attempts at the cap: no next attempt */
    "1|4398046511104|2|1|a", /* due past DQ_DUE_MAX_MS */
    "1|1|4398046511104|1|a", /* ready past DQ_DUE_MAX_MS */
    "1|9223372036854775807|2|1|a",
    /* ids that break the id rule (1..128 bytes of 0x21..0x7e) */
    "1|1|2|3|a bpayload",   /* space */
    "1|1|2|3|a\tbpayload",  /* tab */
    "1|1|2|3|a\nbpayload",  /* newline */
    "1|1|2|3|a\x7f"
    "bpayload", /* DEL */
    "1|1|2|3|a\x80"
    "bpayload", /* high byte */
    "1|1|2|3|a\xff"
    "bpayload",
    "1|1|2|1|\x1fpayload",   /* control */
    "2|1|2|3|3|0|a bpayload",
    "2|1|2|3|2|1|\x7fxEpayload",
};

static void test_entry_decode_malformed(void **state) {
    size_t i;
    (void)state;
    for (i = 0; i < sizeof bad_entries / sizeof bad_entries[0]; i++) {
        dq__entry d, before;
        memset(&d, 0x5A, sizeof d);
        memcpy(&before, &d, sizeof d);
        if (dq__entry_decode(bad_entries[i], strlen(bad_entries[i]), &d) != DQ_EPROTO)
            print_error("entry [%s] accepted\n", bad_entries[i]);
        assert_int_equal(dq__entry_decode(bad_entries[i], strlen(bad_entries[i]), &d), DQ_EPROTO);
        assert_memory_equal(&d, &before, sizeof d);
    }
}

/* Every proper prefix of a valid entry that cuts into the header fails; the
 * decoder never reads past len (checked by ASan/valgrind on a heap copy). */
static void test_entry_decode_truncated(void **state) {
    static const char e[] = "1|1700000000123|1700000000456|3|abc";
    size_t cut;
    dq__entry d;
    (void)state;
    for (cut = 0; cut < sizeof e - 1; cut++) {
        char *copy = malloc(cut + 1);
        assert_non_null(copy);
        memcpy(copy, e, cut);
        assert_int_equal(dq__entry_decode(cut ? copy : NULL, cut, &d), DQ_EPROTO);
        free(copy);
    }
    assert_int_equal(dq__entry_decode(e, sizeof e - 1, &d), 0);
}

static void test_entry_decode_null(void **state) {
    dq__entry d;
    (void)state;
    assert_int_equal(dq__entry_decode(NULL, 0, &d), DQ_EPROTO);
    assert_int_equal(dq__entry_decode(NULL, 10, &d), DQ_EPROTO);
    assert_int_equal(dq__entry_decode("1|1|2|1|a", 9, NULL), DQ_EPROTO);
}

/* ------------------------------------------------------------ set-aside entries */

static void test_aside_encode(void **state) {
    static const char want[] = "1|undecodable|3|abcraw|x\0y";
    size_t len = 0;
    char *e;
    (void)state;
    e = dq__aside_encode("undecodable", "abc", 3, "raw|x\0y", 7, &len);
    assert_non_null(e);
    assert_int_equal(len, sizeof want - 1);
    assert_memory_equal(e, want, sizeof want - 1);
    assert_int_equal(e[len], '\0');
    free(e);
}

static void test_aside_encode_empty_parts(void **state) {
    size_t len = 99;
    char *e;
    (void)state;
    e = dq__aside_encode("bad", NULL, 0, NULL, 0, &len);
    assert_non_null(e);
    assert_int_equal(len, 8);
    assert_string_equal(e, "1|bad|0|");
    free(e);
    e = dq__aside_encode(NULL, "i", 1, NULL, 0, &len);
    assert_non_null(e);
    assert_string_equal(e, "1||1|i");
    assert_int_equal(len, 6);
    free(e);
    e = dq__aside_encode("", "i", 1, "r", 1, NULL); /* len may be NULL */
    assert_non_null(e);
    assert_string_equal(e, "1||1|ir");
    free(e);
}

/* A '|' in the reason would shift the later fields; it becomes '_'. */
static void test_aside_encode_reason_pipe(void **state) {
    size_t len = 0;
    char *e = dq__aside_encode("a|b|", "id", 2, "|", 1, &len);
    (void)state;
    assert_non_null(e);
    assert_string_equal(e, "1|a_b_|2|id|");
    assert_int_equal(len, 12);
    free(e);
}

/* An entry with a long id and raw body: idlen is the byte count, and a
 * ready entry stored raw round-trips through the decoder. */
static void test_aside_encode_roundtrip_raw(void **state) {
    static const char ready[] = "1|10|20|2|idbody";
    char *e;
    size_t len = 0, want_len;
    char want[300];
    dq__entry d;
    (void)state;
    e = dq__aside_encode("bad_id", run_of('k', 200), 200, ready, sizeof ready - 1, &len);
    assert_non_null(e);
    want_len = (size_t)snprintf(want, sizeof want, "1|bad_id|200|%s%s", run_of('k', 200), ready);
    assert_int_equal(len, want_len);
    assert_memory_equal(e, want, len);
    assert_int_equal(dq__entry_decode(e + len - (sizeof ready - 1), sizeof ready - 1, &d), 0);
    assert_int_equal(d.due_ms, 10);
    assert_int_equal(d.ready_ms, 20);
    free(e);
}

/* Lengths whose sum overflows size_t fail without reading the buffers. */
static void test_aside_encode_overflow(void **state) {
    size_t len = 7;
    (void)state;
    assert_null(dq__aside_encode("r", "i", 1, "x", SIZE_MAX, &len));
    assert_null(dq__aside_encode("r", "i", SIZE_MAX - 8, "x", 1, &len));
    assert_null(dq__aside_encode("r", "i", SIZE_MAX / 2, "x", SIZE_MAX / 2, &len));
    assert_int_equal(len, 7);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_valid),
        cmocka_unit_test(test_id_valid),
        cmocka_unit_test(test_key),
        cmocka_unit_test(test_key_longest_queue),
        cmocka_unit_test(test_fmt_i64),
        cmocka_unit_test(test_entry_decode_basic),
        cmocka_unit_test(test_entry_decode_binary),
        cmocka_unit_test(test_entry_decode_empty_payload),
        cmocka_unit_test(test_entry_decode_number_edges),
        cmocka_unit_test(test_entry_decode_v2),
        cmocka_unit_test(test_entry_decode_id_limit),
        cmocka_unit_test(test_entry_decode_id_rule),
        cmocka_unit_test(test_entry_decode_malformed),
        cmocka_unit_test(test_entry_decode_truncated),
        cmocka_unit_test(test_entry_decode_null),
        cmocka_unit_test(test_aside_encode),
        cmocka_unit_test(test_aside_encode_empty_parts),
        cmocka_unit_test(test_aside_encode_reason_pipe),
        cmocka_unit_test(test_aside_encode_roundtrip_raw),
        cmocka_unit_test(test_aside_encode_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
