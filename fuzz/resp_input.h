/*
 * resp_input.h - what the fuzz targets that feed bytes to hiredis's reply
 * parser share (fuzz_reply.c, fuzz_dead.c).
 */
#ifndef DQ_FUZZ_RESP_INPUT_H
#define DQ_FUZZ_RESP_INPUT_H

#include <stddef.h>
#include <stdint.h>

/* 1 if an array or string header claims a million elements or bytes:
 * hiredis 0.14 allocates what an array header claims before the elements
 * come, so such input only measures the machine's memory. (From a server,
 * such a reply would have to be real.) */
static inline int claims_huge(const uint8_t *data, size_t size) {
    for (size_t i = 0; i + 1 < size; i++) {
        if (data[i] != '*' && data[i] != '$') continue;
        size_t digits = 0;
        while (i + 1 + digits < size && data[i + 1 + digits] >= '0' && data[i + 1 + digits] <= '9')
            digits++;
        if (digits >= 7) return 1;
    }
    return 0;
}

#endif
