/*
 * fuzz_keyfile.c - libFuzzer target: key files (src/util/seal.c) from any bytes.
 * A file that parses gives a keyring whose first key seals and every key
 * opens: a round trip of the input itself must give it back, and a
 * refusal's message must never hold the input's base64 keys (it names the
 * line and the fault only).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready;
    if (!ready) {
        if (sodium_init() < 0) abort();
        ready = 1;
    }
    dq__keyring *kr = NULL;
    char err[256];
    if (dq__keyring_parse((const char *)data, size, &kr, err, sizeof err) != 0) {
        if (kr || !err[0] || strlen(err) >= sizeof err) abort();
        return 0;
    }
    unsigned char *env, *out;
    size_t el, ol;
    size_t n = size < 512 ? size : 512;
    if (dq__seal(kr, "fuzz", "id", data, n, &env, &el) != 0) abort();
    if (dq__open(kr, "fuzz", "id", 2, env, el, &out, &ol) != 0 || ol != n ||
        (n && memcmp(out, data, n) != 0))
        abort();
    free(out);
    free(env);
    dq__keyring_free(kr);
    return 0;
}
