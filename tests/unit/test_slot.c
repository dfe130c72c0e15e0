/*
 * test_slot.c - unit tests of dq__key_slot (src/util/slot.c): the CRC16 check
 * value, slots Redis documents or returns for known keys, and each branch of
 * the hash-tag rule. tests/cli/scripts/keyslot.py compares thousands of random keys
 * against a real node's CLUSTER KEYSLOT.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util.h"

static unsigned slot_of(const char *key) { return dq__key_slot(key, strlen(key)); }

/* "123456789" is the check input of every CRC catalogue: CRC16/XMODEM of
 * it is 0x31C3, and 0x31C3 mod 16384 is 12739. */
static void test_slot_check_value(void **state) {
    (void)state;
    assert_int_equal(slot_of("123456789"), 0x31C3 % DQ__SLOTS);
    assert_int_equal(slot_of("123456789"), 12739);
}

typedef struct vector {
    const char *key;
    size_t len;
    unsigned slot;
} vector;

/* clang-format reads a macro's braced list as a block and splits it, and
 * would pack the vectors into columns. */
/* clang-format off */
#define V(s, slot) {s, sizeof s - 1, slot}
/* Slots redis-server 7.0.15 returned for CLUSTER KEYSLOT. */
static const vector vectors[] = {
    V("", 0),
    V("foo", 12182),
    V("bar", 5061),
    V("somekey", 11058),
    V("{foo}bar", 12182),
    V("a\0b", 8383),
    V("\xff\xfe", 3374),
};
/* clang-format on */

static void test_slot_vectors(void **state) {
    size_t i;
    (void)state;
    for (i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
        unsigned got = dq__key_slot(vectors[i].key, vectors[i].len);
        if (got != vectors[i].slot)
            print_error("vector %zu: slot %u, want %u\n", i, got, vectors[i].slot);
        assert_int_equal(got, vectors[i].slot);
    }
    /* a NULL key of length 0 is the empty key */
    assert_int_equal(dq__key_slot(NULL, 0), 0);
}

static void test_slot_hash_tags(void **state) {
    (void)state;
    /* the tag alone is hashed, so these share a slot */
    assert_int_equal(slot_of("{user1000}.following"), slot_of("{user1000}.followers"));
    assert_int_equal(slot_of("{user1000}.following"), slot_of("user1000"));
    /* an empty tag: the whole key */
    assert_int_equal(slot_of("{}foo"), 9500);
    assert_true(slot_of("{}foo") != slot_of("foo"));
    assert_int_equal(slot_of("{}"), 15257); /* CLUSTER KEYSLOT "{}" */
    /* only the first '{' counts, so "{}" comes first and the key is whole */
    assert_true(slot_of("foo{}{bar}") != slot_of("bar"));
    assert_int_equal(slot_of("foo{}{bar}"), 8363);
    /* from the first '{' to the first '}' after it: the tag is "{bar" */
    assert_int_equal(slot_of("foo{{bar}}zap"), slot_of("{bar"));
    assert_int_equal(slot_of("foo{{bar}}zap"), 4015);
    /* a '{' never closed, or a '}' before any '{': the whole key */
    assert_int_equal(slot_of("foo{bar"), 15278);
    assert_true(slot_of("foo}bar{") != slot_of("bar"));
    /* the tag ends at the first '}' even when more follow */
    assert_int_equal(slot_of("{a}}b"), slot_of("a"));
    assert_int_equal(slot_of("x{a}y{b}"), slot_of("a"));
}

/* Every key of a queue is "dq:{queue}:...": one slot, the queue name's. */
static void test_slot_queue_keys(void **state) {
    char key[DQ_QUEUE_MAX + 64];
    (void)state;
    assert_int_equal(slot_of("dq:{myqueue}:zs"), slot_of("myqueue"));
    assert_int_equal(slot_of("dq:{myqueue}:q:17"), slot_of("myqueue"));
    assert_true(dq__key(key, sizeof key, "reminders", "i:123") > 0);
    assert_int_equal(slot_of(key), slot_of("reminders"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slot_check_value),
        cmocka_unit_test(test_slot_vectors),
        cmocka_unit_test(test_slot_hash_tags),
        cmocka_unit_test(test_slot_queue_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
