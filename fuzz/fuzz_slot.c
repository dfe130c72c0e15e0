/*
 * fuzz_slot.c - libFuzzer target: dq__key_slot on any key. The slot is
 * below 16384, and "{x}y" lands where "x" does when x is not empty.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    unsigned slot = dq__key_slot((const char *)data, size);
    if (slot >= DQ__SLOTS) abort();
    const uint8_t *close = memchr(data, '}', size);
    if (size > 0 && !memchr(data, '{', size) && close && close > data) {
        /* data = "x}rest" with no '{': then "{" + data has tag x. */
        uint8_t *k = malloc(size + 1);
        if (!k) return 0;
        k[0] = '{';
        memcpy(k + 1, data, size);
        if (dq__key_slot((const char *)k, size + 1) !=
            dq__key_slot((const char *)data, (size_t)(close - data)))
            abort();
        free(k);
    }
    return 0;
}
