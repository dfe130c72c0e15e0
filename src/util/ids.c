/*
 * ids.c - the crypto wrapper: the only file that includes <sodium.h>.
 *
 * Owns libsodium's initialisation, generated item ids (128 random bits in
 * base64url, so two producers never collide without coordinating), the
 * random jitter source of the schedulers, and standard base64 for the CLI's
 * JSON output of binary payloads. Keeping sodium behind these four calls
 * means the rest of the library builds against util.h alone.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "util.h"

#define ID_RANDOM_BYTES 16

/* Set once sodium_init() has succeeded, so later calls skip its lock. */
static atomic_int crypto_ready;

int dq__crypto_init(void) {
    if (atomic_load_explicit(&crypto_ready, memory_order_acquire)) return 0;
    /* sodium_init() is itself thread-safe and idempotent: 0 on the first
     * success, 1 when already done, -1 on failure. */
    if (sodium_init() < 0) return -1;
    atomic_store_explicit(&crypto_ready, 1, memory_order_release);
    return 0;
}

/* Random bytes are drawn a block at a time: one getrandom() call per 64 ids
 * instead of one per id (a producer offers tens of thousands a second).
 * Each byte is used once; the block is per thread, as clients may live in
 * different threads. A forked child must not use what is left of its
 * parent's block: parent and children would make the same ids (and the same
 * take requests, whose results are then replayed to both). The fork handler
 * empties the block in the child; the child's one thread is the one that
 * called fork, so resetting its thread-local is enough. */
#define RANDOM_BLOCK (64 * ID_RANDOM_BYTES)
static _Thread_local unsigned char random_block[RANDOM_BLOCK];
static _Thread_local size_t random_used = RANDOM_BLOCK;
static pthread_once_t fork_handler_once = PTHREAD_ONCE_INIT;

static void random_forget_in_child(void) {
    sodium_memzero(random_block, sizeof random_block);
    random_used = RANDOM_BLOCK;
}

static void install_fork_handler(void) {
    /* On failure (ENOMEM) ids stay unique per process, not across forks. */
    (void)pthread_atfork(NULL, NULL, random_forget_in_child);
}

static void random_take(unsigned char *out, size_t n) {
    (void)pthread_once(&fork_handler_once, install_fork_handler);
    if (random_used + n > RANDOM_BLOCK) {
        randombytes_buf(random_block, sizeof random_block);
        random_used = 0;
    }
    memcpy(out, random_block + random_used, n);
    sodium_memzero(random_block + random_used, n);
    random_used += n;
}

void dq__id_generate(char out[DQ_ID_GENERATED_LEN + 1]) {
    unsigned char bin[ID_RANDOM_BYTES];
    _Static_assert(
        sodium_base64_ENCODED_LEN(ID_RANDOM_BYTES, sodium_base64_VARIANT_URLSAFE_NO_PADDING) ==
            DQ_ID_GENERATED_LEN + 1,
        "generated id length");
    /* randombytes works before sodium_init (it stirs on first use); the
     * init only picks the faster implementation, so failure is harmless. */
    (void)dq__crypto_init();
    /* A leading '-' would read as an option on command lines: draw again
     * (1 time in 64; the id keeps its 128 random bits). */
    do {
        random_take(bin, sizeof bin);
        sodium_bin2base64(out, DQ_ID_GENERATED_LEN + 1, bin, sizeof bin,
                          sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    } while (out[0] == '-');
}

void dq__random_bytes(unsigned char *out, size_t n) {
    (void)dq__crypto_init();
    while (n > 0) {
        size_t k = n < ID_RANDOM_BYTES ? n : ID_RANDOM_BYTES;
        random_take(out, k);
        out += k, n -= k;
    }
}

uint32_t dq__random_uniform(uint32_t upper) {
    (void)dq__crypto_init();
    return randombytes_uniform(upper);
}

char *dq__base64_encode(const void *data, size_t len) {
    static const unsigned char empty[1];
    size_t size;
    char *out;
    /* sodium_base64_ENCODED_LEN is about len * 4 / 3 and would wrap for
     * lengths near SIZE_MAX. */
    if (len > (SIZE_MAX / 4 - 1) * 3) return NULL;
    size = sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL);
    out = malloc(size);
    if (out == NULL) return NULL;
    sodium_bin2base64(out, size, data != NULL ? data : empty, len, sodium_base64_VARIANT_ORIGINAL);
    return out;
}
