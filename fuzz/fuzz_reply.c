/*
 * fuzz_reply.c - libFuzzer target: replies from Redis. The bytes go through
 * hiredis's RESP parser, and every complete reply through what the library
 * reads of replies without a connection: integers (dq__reply_int), error
 * codes (dq__reply_error_code), an error's class, code word, persistence
 * and ACL refusal of a key (errors.c) and the router's topology errors
 * (dq__reply_is_topology), on the reply and on each element of an array.
 */
#include <stdint.h>
#include <stdlib.h>

#include "internal.h"
#include "resp_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void visit(const redisReply *r, int depth) {
    (void)dq__reply_int(r);
    if (r->type == REDIS_REPLY_ERROR) {
        char word[DQ__ERRKIND_MAX];
        (void)dq__reply_error_code(r);
        dq__error_code(r->str, word);
        (void)dq__error_persists(r->str);
        (void)dq__error_names_key(r->str);
    }
    (void)dq__reply_is_topology(r);
    if (r->type == REDIS_REPLY_ARRAY && depth < 8)
        for (size_t i = 0; i < r->elements; i++) visit(r->element[i], depth + 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (claims_huge(data, size)) return 0;
    redisReader *reader = redisReaderCreate();
    if (!reader) return 0;
    if (redisReaderFeed(reader, (const char *)data, size) == REDIS_OK) {
        for (int n = 0; n < 64; n++) {
            void *reply = NULL;
            if (redisReaderGetReply(reader, &reply) != REDIS_OK || !reply) break;
            visit(reply, 0);
            freeReplyObject(reply);
        }
    }
    redisReaderFree(reader);
    return 0;
}
