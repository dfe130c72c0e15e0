/*
 * fuzz_duration.c - libFuzzer target: dq_parse_duration on any bytes. A
 * success is within 0..DQ_DUE_MAX_MS; a failure leaves *ms untouched.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "delayq.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    int64_t ms = -42;
    if (dq_parse_duration(text, &ms) == 0) {
        if (ms < 0 || ms > DQ_DUE_MAX_MS) abort();
    } else if (ms != -42) {
        abort();
    }
    free(text);
    return 0;
}
