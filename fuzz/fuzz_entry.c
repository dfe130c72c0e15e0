/*
 * fuzz_entry.c - libFuzzer target: the decoder of ready-list entries, which
 * any writer to Redis could have planted (dq__entry_decode). A decoded
 * entry's id, error and payload lie inside the buffer, the id obeys the id
 * rule, and the times are in range.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void inside(const char *buf, size_t len, const char *p, size_t n) {
    if (n == 0) return;
    if (p < buf || p + n > buf + len) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* A copy of exactly size bytes, so ASan sees any read past the end. */
    char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    dq__entry e;
    if (dq__entry_decode(buf, size, &e) == 0) {
        inside(buf, size, e.id, e.id_len);
        inside(buf, size, e.err, e.err_len);
        inside(buf, size, e.payload, e.payload_len);
        if (e.id_len < 1 || e.id_len > DQ_ID_MAX) abort();
        for (size_t i = 0; i < e.id_len; i++)
            if ((unsigned char)e.id[i] < 0x21 || (unsigned char)e.id[i] > 0x7e) abort();
        if (e.due_ms < 0 || e.due_ms > DQ_DUE_MAX_MS || e.ready_ms < 0 || e.attempts < 0) abort();
    }
    free(buf);
    return 0;
}
