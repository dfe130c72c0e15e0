/*
 * test_text.c - unit tests of src/util/text.c: strict UTF-8 validation (table
 * of classic edge cases, then an exhaustive cross-check against a reference
 * decoder), the growable buffer and its NUL invariant, and the escaping of
 * outside bytes into one line of text (dq__escape).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util.h"

/* ------------------------------------------------------------ UTF-8 */

typedef struct utf8_case {
    const char *bytes;
    size_t len;
    int valid;
} utf8_case;

/* clang-format reads a macro's braced list as a block and splits it. */
/* clang-format off */
#define U(s, v) {s, sizeof s - 1, v}
/* clang-format on */

static const utf8_case utf8_cases[] = {
    U("", 1),
    U("plain ASCII \x7f", 1),
    U("nul \0 inside", 1),
    U("\xc2\x80", 1),             /* U+0080, smallest 2-byte */
    U("\xc3\xa9", 1),             /* e acute */
    U("\xdf\xbf", 1),             /* U+07FF */
    U("\xe0\xa0\x80", 1),         /* U+0800, smallest 3-byte */
    U("\xe2\x82\xac", 1),         /* euro sign */
    U("\xed\x9f\xbf", 1),         /* U+D7FF, just below the surrogates */
    U("\xee\x80\x80", 1),         /* U+E000, just above them */
    U("\xef\xbf\xbf", 1),         /* U+FFFF (a noncharacter, but valid) */
    U("\xf0\x90\x80\x80", 1),     /* U+10000, smallest 4-byte */
    U("\xf0\x9f\x98\x80", 1),     /* emoji */
    U("\xf4\x8f\xbf\xbf", 1),     /* U+10FFFF, the last code point */
    U("\xf4\x90\x80\x80", 0),     /* U+110000 */
    U("\xf5\x80\x80\x80", 0),
    U("\xf7\xbf\xbf\xbf", 0),
    U("\xf8\x88\x80\x80\x80", 0), /* 5-byte form */
    U("\xfc\x84\x80\x80\x80\x80", 0),
    U("\xfe", 0),
    U("\xff", 0),
    U("\xc0\x80", 0),             /* overlong NUL */
    U("\xc1\xbf", 0),             /* overlong U+007F */
    U("\xe0\x80\x80", 0),         /* overlong 3-byte */
    U("\xe0\x9f\xbf", 0),         /* overlong U+07FF */
    U("\xf0\x80\x80\x80", 0),     /* overlong 4-byte */
    U("\xf0\x8f\xbf\xbf", 0),     /* overlong U+FFFF */
    U("\xed\xa0\x80", 0),         /* U+D800 surrogate */
    U("\xed\xbf\xbf", 0),         /* U+DFFF surrogate */
    U("\xed\xa0\xbd\xed\xb8\x80", 0), /* CESU-8 surrogate pair */
    U("\x80", 0),                 /* lone continuation */
    U("a\xbf", 0),
    U("\xc3", 0),                 /* truncated */
    U("\xe2\x82", 0),
    U("\xf0\x9f\x98", 0),
    U("\xc3\x28", 0),             /* bad continuation */
    U("\xe2\x28\xa1", 0),
    U("\xe2\x82\x28", 0),
    U("\xf0\x9f\x98\x28", 0),
    U("\xf0\x28\x98\x80", 0),
    U("\xc3\xa9\xc3", 0),         /* valid then truncated */
    U("ok\xe2\x82\xac ok \xf0\x9f\x98\x80", 1),
};

static void test_utf8_cases(void **state) {
    size_t i;
    (void)state;
    for (i = 0; i < sizeof utf8_cases / sizeof utf8_cases[0]; i++) {
        const utf8_case *c = &utf8_cases[i];
        if (dq__utf8_valid(c->bytes, c->len) != c->valid)
            print_error("utf8 case %zu: want %d\n", i, c->valid);
        assert_int_equal(dq__utf8_valid(c->bytes, c->len), c->valid);
    }
}

static void test_utf8_null(void **state) {
    (void)state;
    assert_int_equal(dq__utf8_valid(NULL, 0), 1);
    assert_int_equal(dq__utf8_valid(NULL, 3), 0);
}

/* The length bounds the check: a sequence cut by len is invalid even if the
 * memory after it would complete it. */
static void test_utf8_len_bounds(void **state) {
    static const char s[] = "\xe2\x82\xac";
    (void)state;
    assert_int_equal(dq__utf8_valid(s, 3), 1);
    assert_int_equal(dq__utf8_valid(s, 2), 0);
    assert_int_equal(dq__utf8_valid(s, 1), 0);
    assert_int_equal(dq__utf8_valid(s, 0), 1);
}

/* Reference: decodes one sequence by bit arithmetic and checks the code
 * point's range; returns its length, or 0 if it is invalid. */
static size_t ref_sequence(const unsigned char *s, size_t n) {
    uint32_t cp, min;
    size_t need, i;
    if (s[0] < 0x80) return 1;
    if ((s[0] & 0xE0) == 0xC0) {
        need = 2, cp = s[0] & 0x1F, min = 0x80;
    } else if ((s[0] & 0xF0) == 0xE0) {
        need = 3, cp = s[0] & 0x0F, min = 0x800;
    } else if ((s[0] & 0xF8) == 0xF0) {
        need = 4, cp = s[0] & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < need) return 0;
    for (i = 1; i < need; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return need;
}

static int ref_valid(const unsigned char *s, size_t n) {
    size_t i = 0, k;
    while (i < n) {
        k = ref_sequence(s + i, n - i);
        if (k == 0) return 0;
        i += k;
    }
    return 1;
}

/* All 1- and 2-byte strings, all 3-byte strings led by E0..EF, and 4-byte
 * strings led by F0..FF with every second byte (third and fourth from a
 * set of boundary values) agree with the reference. */
static void test_utf8_exhaustive(void **state) {
    static const unsigned char tails[] = {0x00, 0x7f, 0x80, 0x81, 0xbf, 0xc0, 0xff};
    unsigned char s[4];
    unsigned a, b, c, d;
    (void)state;
    for (a = 0; a < 256; a++) {
        s[0] = (unsigned char)a;
        assert_int_equal(dq__utf8_valid(s, 1), ref_valid(s, 1));
        for (b = 0; b < 256; b++) {
            s[1] = (unsigned char)b;
            assert_int_equal(dq__utf8_valid(s, 2), ref_valid(s, 2));
        }
    }
    for (a = 0xE0; a <= 0xEF; a++)
        for (b = 0; b < 256; b++)
            for (c = 0; c < 256; c++) {
                s[0] = (unsigned char)a, s[1] = (unsigned char)b, s[2] = (unsigned char)c;
                if (dq__utf8_valid(s, 3) != ref_valid(s, 3))
                    print_error("3-byte %02x %02x %02x\n", a, b, c);
                assert_int_equal(dq__utf8_valid(s, 3), ref_valid(s, 3));
            }
    for (a = 0xF0; a < 256; a++)
        for (b = 0; b < 256; b++)
            for (c = 0; c < sizeof tails; c++)
                for (d = 0; d < sizeof tails; d++) {
                    s[0] = (unsigned char)a, s[1] = (unsigned char)b;
                    s[2] = tails[c], s[3] = tails[d];
                    assert_int_equal(dq__utf8_valid(s, 4), ref_valid(s, 4));
                }
}

/* Every code point encodes to a valid sequence except the surrogates. */
static void test_utf8_every_code_point(void **state) {
    unsigned char s[4];
    uint32_t cp;
    size_t n;
    (void)state;
    for (cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp < 0x80) {
            s[0] = (unsigned char)cp, n = 1;
        } else if (cp < 0x800) {
            s[0] = (unsigned char)(0xC0 | (cp >> 6));
            s[1] = (unsigned char)(0x80 | (cp & 0x3F)), n = 2;
        } else if (cp < 0x10000) {
            s[0] = (unsigned char)(0xE0 | (cp >> 12));
            s[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
            s[2] = (unsigned char)(0x80 | (cp & 0x3F)), n = 3;
        } else {
            s[0] = (unsigned char)(0xF0 | (cp >> 18));
            s[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
            s[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
            s[3] = (unsigned char)(0x80 | (cp & 0x3F)), n = 4;
        }
        assert_int_equal(dq__utf8_valid(s, n), !(cp >= 0xD800 && cp <= 0xDFFF));
    }
}

/* ------------------------------------------------------------ buffer */

static void test_buf_append(void **state) {
    dq__buf b = {NULL, 0, 0};
    (void)state;
    assert_int_equal(dq__buf_append(&b, "abc", 3), 0);
    assert_non_null(b.data);
    assert_int_equal(b.len, 3);
    assert_true(b.cap >= 4);
    assert_string_equal(b.data, "abc");
    assert_int_equal(dq__buf_append(&b, "\0de", 3), 0);
    assert_int_equal(b.len, 6);
    assert_memory_equal(b.data, "abc\0de", 7); /* the NUL after the data too */
    dq__buf_release(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
}

/* An empty append allocates nothing, on an empty or a filled buffer. */
static void test_buf_append_empty(void **state) {
    dq__buf b = {NULL, 0, 0};
    (void)state;
    assert_int_equal(dq__buf_append(&b, NULL, 0), 0);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(dq__buf_append(&b, "x", 1), 0);
    assert_int_equal(dq__buf_append(&b, NULL, 0), 0);
    assert_int_equal(b.len, 1);
    assert_string_equal(b.data, "x");
    dq__buf_release(&b);
}

/* Many small appends cross several growth steps; content and NUL stay
 * right at every step, and cap always leaves room for the NUL. */
static void test_buf_growth(void **state) {
    dq__buf b = {NULL, 0, 0};
    size_t i;
    (void)state;
    for (i = 0; i < 5000; i++) {
        char c = (char)('a' + i % 26);
        assert_int_equal(dq__buf_append(&b, &c, 1), 0);
        assert_int_equal(b.len, i + 1);
        assert_true(b.cap > b.len);
        assert_int_equal(b.data[i], c);
        assert_int_equal(b.data[i + 1], '\0');
    }
    for (i = 0; i < 5000; i++) assert_int_equal(b.data[i], 'a' + i % 26);
    dq__buf_release(&b);
}

static void test_buf_append_large(void **state) {
    dq__buf b = {NULL, 0, 0};
    char *big = malloc(100000);
    (void)state;
    assert_non_null(big);
    memset(big, 'z', 100000);
    assert_int_equal(dq__buf_append(&b, "head", 4), 0);
    assert_int_equal(dq__buf_append(&b, big, 100000), 0);
    assert_int_equal(b.len, 100004);
    assert_memory_equal(b.data, "headzz", 6);
    assert_int_equal(b.data[100003], 'z');
    assert_int_equal(b.data[100004], '\0');
    free(big);
    dq__buf_release(&b);
}

/* A size that cannot be represented fails before anything is read, and the
 * buffer is left as it was. */
static void test_buf_append_overflow(void **state) {
    dq__buf b = {NULL, 0, 0};
    (void)state;
    assert_int_equal(dq__buf_append(&b, "x", SIZE_MAX), DQ_ENOMEM);
    assert_null(b.data);
    assert_int_equal(dq__buf_append(&b, "ab", 2), 0);
    assert_int_equal(dq__buf_append(&b, "x", SIZE_MAX - 2), DQ_ENOMEM);
    assert_int_equal(dq__buf_append(&b, "x", SIZE_MAX - 1), DQ_ENOMEM);
    assert_int_equal(b.len, 2);
    assert_string_equal(b.data, "ab");
    dq__buf_release(&b);
}

static void test_buf_printf(void **state) {
    dq__buf b = {NULL, 0, 0};
    (void)state;
    assert_int_equal(dq__buf_printf(&b, "%d-%s", 42, "x"), 0);
    assert_int_equal(b.len, 4);
    assert_string_equal(b.data, "42-x");
    assert_int_equal(dq__buf_printf(&b, "|%05lld|", (long long)-7), 0);
    assert_string_equal(b.data, "42-x|-0007|");
    assert_int_equal(b.len, 11);
    dq__buf_release(&b);
}

/* An empty format still leaves a valid "" (data != NULL, NUL at [0]). */
static void test_buf_printf_empty(void **state) {
    dq__buf b = {NULL, 0, 0};
    (void)state;
    assert_int_equal(dq__buf_printf(&b, "%s", ""), 0);
    assert_non_null(b.data);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");
    dq__buf_release(&b);
}

static void test_buf_printf_long(void **state) {
    dq__buf b = {NULL, 0, 0};
    char want[3001];
    size_t i;
    (void)state;
    memset(want, 'w', 3000);
    want[3000] = '\0';
    assert_int_equal(dq__buf_append(&b, "<", 1), 0);
    assert_int_equal(dq__buf_printf(&b, "%s%s%s", want, want, ">"), 0);
    assert_int_equal(b.len, 6002);
    assert_int_equal(b.data[0], '<');
    for (i = 1; i <= 6000; i++) assert_int_equal(b.data[i], 'w');
    assert_string_equal(b.data + 6001, ">");
    dq__buf_release(&b);
}

static void test_buf_release_twice(void **state) {
    dq__buf b = {NULL, 0, 0};
    (void)state;
    dq__buf_release(&b);
    assert_int_equal(dq__buf_append(&b, "a", 1), 0);
    dq__buf_release(&b);
    dq__buf_release(&b);
    assert_null(b.data);
    /* a released buffer is reusable */
    assert_int_equal(dq__buf_append(&b, "b", 1), 0);
    assert_string_equal(b.data, "b");
    dq__buf_release(&b);
}

/* ------------------------------------------------------------ UTF-8 sequences */

static void test_utf8_seq(void **state) {
    (void)state;
    assert_int_equal(dq__utf8_seq("a", 1), 1);
    assert_int_equal(dq__utf8_seq("", 1), 1); /* NUL is a character */
    assert_int_equal(dq__utf8_seq("\xc3\xa9x", 3), 2);
    assert_int_equal(dq__utf8_seq("\xe2\x82\xac", 3), 3);
    assert_int_equal(dq__utf8_seq("\xf0\x9f\x98\x80", 4), 4);
    assert_int_equal(dq__utf8_seq("\xf0\x9f\x98\x80", 3), 0); /* truncated */
    assert_int_equal(dq__utf8_seq("\x80", 1), 0);             /* continuation */
    assert_int_equal(dq__utf8_seq("\xc0\x80", 2), 0);         /* overlong */
    assert_int_equal(dq__utf8_seq("\xed\xa0\x80", 3), 0);     /* surrogate */
    assert_int_equal(dq__utf8_seq("\xf4\x90\x80\x80", 4), 0); /* > U+10FFFF */
    assert_int_equal(dq__utf8_seq("\xc3\x28", 2), 0);
    assert_int_equal(dq__utf8_seq("a", 0), 0);
    assert_int_equal(dq__utf8_seq(NULL, 5), 0);
}

/* ------------------------------------------------------------ escaping */

/* dq__escape of len bytes into a buffer of size, no cut by max. */
static void esc_is(const void *in, size_t len, unsigned flags, const char *want) {
    char out[1024];
    size_t n = dq__escape(out, sizeof out, in, len, SIZE_MAX, flags);
    assert_string_equal(out, want);
    assert_int_equal(n, strlen(want));
}

static void test_escape_plain(void **state) {
    (void)state;
    esc_is("", 0, 0, "");
    esc_is(NULL, 0, 0, "");
    esc_is("queue:1 a-b_c.d", 15, 0, "queue:1 a-b_c.d");
    esc_is("~!\"#'", 5, 0, "~!\"#'");
    esc_is("a\\b", 3, 0, "a\\\\b");
    esc_is("a\tb\nc\rd", 7, 0, "a\\x09b\\x0ac\\x0dd");
    esc_is("\0\x01\x1f\x7f", 4, 0, "\\x00\\x01\\x1f\\x7f");
    esc_is("\x80\xff", 2, 0, "\\x80\\xff");
}

static void test_escape_utf8(void **state) {
    (void)state;
    /* Without the flag every non-ASCII byte is escaped, valid or not. */
    esc_is("caf\xc3\xa9", 5, 0, "caf\\xc3\\xa9");
    /* With it valid characters stay, invalid bytes are escaped one by one. */
    esc_is("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14, DQ__ESC_UTF8,
           "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    esc_is("a\xc3\x28z", 4, DQ__ESC_UTF8, "a\\xc3(z");
    esc_is("\xe2\x82", 2, DQ__ESC_UTF8, "\\xe2\\x82"); /* truncated sequence */
    esc_is("\xed\xa0\x80", 3, DQ__ESC_UTF8, "\\xed\\xa0\\x80");
    esc_is("x\ny", 3, DQ__ESC_UTF8, "x\\x0ay"); /* control bytes still escaped */
}

/* Every byte value alone: printable ASCII but '\' as is, the rest \xHH. */
static void test_escape_every_byte(void **state) {
    static const char hex[] = "0123456789abcdef";
    (void)state;
    for (int c = 0; c < 256; c++) {
        unsigned char in = (unsigned char)c;
        char want[8];
        if (c == '\\') strcpy(want, "\\\\");
        else if (c >= 0x20 && c < 0x7f) want[0] = (char)c, want[1] = '\0';
        else want[0] = '\\', want[1] = 'x', want[2] = hex[c >> 4], want[3] = hex[c & 15], want[4] = '\0';
        esc_is(&in, 1, 0, want);
        esc_is(&in, 1, DQ__ESC_UTF8, want);
    }
}

/* max cuts the input; "..." marks the cut. */
static void test_escape_max(void **state) {
    char out[64];
    (void)state;
    assert_int_equal(dq__escape(out, sizeof out, "abcdefgh", 8, 3, 0), 6);
    assert_string_equal(out, "abc...");
    assert_int_equal(dq__escape(out, sizeof out, "abc", 3, 3, 0), 3);
    assert_string_equal(out, "abc");
    assert_int_equal(dq__escape(out, sizeof out, "a\nbc", 4, 2, 0), 8);
    assert_string_equal(out, "a\\x0a...");
    assert_int_equal(dq__escape(out, sizeof out, "abc", 3, 0, 0), 3);
    assert_string_equal(out, "...");
    /* A character is never split by max: the sequence counts as invalid. */
    dq__escape(out, sizeof out, "a\xc3\xa9", 3, 2, DQ__ESC_UTF8);
    assert_string_equal(out, "a\\xc3...");
}

/* A small out cuts at a whole unit and still ends in "..." + NUL. */
static void test_escape_small_out(void **state) {
    char out[16];
    (void)state;
    memset(out, 'Z', sizeof out);
    assert_int_equal(dq__escape(out, 8, "abcdefghij", 10, SIZE_MAX, 0), 7);
    assert_string_equal(out, "abcd...");
    assert_int_equal(out[9], 'Z');
    /* exactly fits: no cut */
    assert_int_equal(dq__escape(out, 8, "abcdefg", 7, SIZE_MAX, 0), 7);
    assert_string_equal(out, "abcdefg");
    /* an escape that does not fit whole is left out whole */
    assert_int_equal(dq__escape(out, 8, "ab\x01\x02", 4, SIZE_MAX, 0), 5);
    assert_string_equal(out, "ab...");
    assert_int_equal(dq__escape(out, 4, "abcdef", 6, SIZE_MAX, 0), 3);
    assert_string_equal(out, "...");
    assert_int_equal(dq__escape(out, 3, "abc", 3, SIZE_MAX, 0), 0);
    assert_string_equal(out, "");
    /* 4 * len + 1 is always enough */
    unsigned char all[256];
    char big[4 * 256 + 1];
    for (int i = 0; i < 256; i++) all[i] = (unsigned char)i;
    size_t n = dq__escape(big, sizeof big, all, sizeof all, SIZE_MAX, 0);
    assert_int_equal(n, strlen(big));
    assert_int_equal(n, 95 + 1 + 4 * (256 - 95)); /* printable, '\\', the rest */
    assert_null(strstr(big, "..."));
}

/* The output is always one line of printable ASCII (without the flag),
 * whatever the input: checked on random bytes. */
static void test_escape_random(void **state) {
    unsigned char in[300];
    char out[200];
    unsigned seed = 12345;
    (void)state;
    for (int round = 0; round < 2000; round++) {
        size_t len = (size_t)(round % 300);
        for (size_t i = 0; i < len; i++) {
            seed = seed * 1103515245u + 12345u;
            in[i] = (unsigned char)(seed >> 16);
        }
        size_t n = dq__escape(out, sizeof out, in, len, (size_t)(round % 70), 0);
        assert_true(n < sizeof out);
        assert_int_equal(strlen(out), n);
        for (size_t i = 0; i < n; i++) assert_true(out[i] >= 0x20 && out[i] < 0x7f);
        n = dq__escape(out, sizeof out, in, len, SIZE_MAX, DQ__ESC_UTF8);
        assert_int_equal(strlen(out), n);
        assert_true(dq__utf8_valid(out, n));
        for (size_t i = 0; i < n; i++) assert_true((unsigned char)out[i] >= 0x20 && out[i] != 0x7f);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_cases),
        cmocka_unit_test(test_utf8_null),
        cmocka_unit_test(test_utf8_len_bounds),
        cmocka_unit_test(test_utf8_exhaustive),
        cmocka_unit_test(test_utf8_every_code_point),
        cmocka_unit_test(test_buf_append),
        cmocka_unit_test(test_buf_append_empty),
        cmocka_unit_test(test_buf_growth),
        cmocka_unit_test(test_buf_append_large),
        cmocka_unit_test(test_buf_append_overflow),
        cmocka_unit_test(test_buf_printf),
        cmocka_unit_test(test_buf_printf_empty),
        cmocka_unit_test(test_buf_printf_long),
        cmocka_unit_test(test_buf_release_twice),
        cmocka_unit_test(test_utf8_seq),
        cmocka_unit_test(test_escape_plain),
        cmocka_unit_test(test_escape_utf8),
        cmocka_unit_test(test_escape_every_byte),
        cmocka_unit_test(test_escape_max),
        cmocka_unit_test(test_escape_small_out),
        cmocka_unit_test(test_escape_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
