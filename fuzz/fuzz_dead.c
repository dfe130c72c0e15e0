/*
 * fuzz_dead.c - libFuzzer target: the dead-letter list decoder
 * (dq__dead_letters_decode, src/reliable.c) on whatever hiredis parses from
 * the bytes: dead.lua replies with fields that any writer of the dead-letter
 * hash could have planted. Every letter decoded must be complete, and the
 * list is freed as a caller frees it, also after a failure.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* hiredis 0.14 allocates what an array header claims before the elements
 * come: such input only measures the machine's memory. */
static int claims_huge(const uint8_t *data, size_t size) {
    for (size_t i = 0; i + 1 < size; i++) {
        if (data[i] != '*' && data[i] != '$') continue;
        size_t digits = 0;
        while (i + 1 + digits < size && data[i + 1 + digits] >= '0' && data[i + 1 + digits] <= '9') digits++;
        if (digits >= 7) return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (claims_huge(data, size)) return 0;
    redisReader *reader = redisReaderCreate();
    if (!reader) return 0;
    if (redisReaderFeed(reader, (const char *)data, size) == REDIS_OK) {
        void *reply = NULL;
        if (redisReaderGetReply(reader, &reply) == REDIS_OK && reply) {
            dq_dead_letter *out;
            size_t n;
            int rc = dq__dead_letters_decode(reply, &out, &n);
            for (size_t i = 0; rc == 0 && i < n; i++)
                if (!out[i].id || !out[i].reason || !out[i].error || !out[i].payload) abort();
            dq_dead_letters_free(out, n);
            freeReplyObject(reply);
        }
    }
    redisReaderFree(reader);
    return 0;
}
