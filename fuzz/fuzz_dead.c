/*
 * fuzz_dead.c - libFuzzer target: the dead-letter list decoder
 * (dq__dead_letters_decode, src/ops/reliable.c) on whatever hiredis parses from
 * the bytes: dead.lua replies with fields that any writer of the dead-letter
 * hash could have planted. Every letter decoded must be complete, and the
 * list is freed as a caller frees it, also after a failure.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "resp_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
