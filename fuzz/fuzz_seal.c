/*
 * fuzz_seal.c - libFuzzer target: the sealed-payload opener (src/util/seal.c,
 * dq__open_taken) on any bytes, as a consumer meets them in Redis. The first
 * byte picks the case: bit 0 allows plaintext, bit 1 takes without keys,
 * bit 2 names the shard "fuzz~1" instead of the queue "fuzz", bit 3 takes
 * it as item "id@5", a tick of schedule "id"; the rest is the payload of
 * item "id" (or "id@5"). The seed corpus (fuzz/corpus/fuzz_seal) holds
 * envelopes sealed for that item with the key of fuzz/corpus/fuzz_keyfile/one,
 * cut at many lengths and forged (another key id, another version, a body of
 * noise), so mutations start from what an attacker with write access would
 * try, and an envelope of schedule "id" (sched_envelope). Besides crashes it checks what the opener promises: with keys and
 * plaintext refused, nothing passes unopened; what opens is a whole
 * envelope under the ring's key, 53 bytes longer than what came out, and
 * no prefix of it and no flipped byte in it opens; what passes unopened
 * does not look sealed unless the client has no keys; a refusal gives one
 * line of reason that never holds the key; an envelope opens as item "id"
 * or as tick "id@5", never both (the schedule binding is apart), and one
 * that opens as tick "id@6" too (a schedule's) never as one of "ie".
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char key_line[] =
    "dq-key-1 782c7528f67825b4 VsN9nyP2ql2akiG7bmacVyfpuZDCG5ie9gQqFjGSB1w=\n";

static dq__keyring *ring(void) {
    static dq__keyring *kr;
    char err[128];
    if (!kr && (sodium_init() < 0 ||
                dq__keyring_parse(key_line, sizeof key_line - 1, &kr, err, sizeof err) != 0))
        abort();
    return kr;
}

/* Opens p as the case says; checks the result's shape. Returns its code. */
static int open_case(dq__keyring *kr, int allow, const char *queue, const char *id, const uint8_t *p,
                     size_t len) {
    unsigned char *out = NULL;
    size_t ol = 0;
    char why[128] = "";
    int rc = dq__open_taken(kr, allow, queue, id, strlen(id), p, len, &out, &ol, why, sizeof why);
    if (rc == 0) {
        unsigned char kid[DQ__KEY_ID_LEN];
        char hex[DQ__KEY_ID_LEN * 2 + 1];
        if (!out || !kr || !dq__sealed(p, len, kid) || ol + DQ__SEAL_OVERHEAD != len) abort();
        dq__key_id_hex(kid, hex);
        if (memcmp(hex, key_line + 9, 16) != 0) abort();
    } else if (rc == 1) {
        if (out || (kr && (!allow || dq__looks_sealed(p, len)))) abort();
    } else {
        if (out || (rc != DQ_EINVAL && rc != DQ_EKEY && rc != DQ_EPROTO && rc != DQ_ENOMEM)) abort();
        size_t wl = strnlen(why, sizeof why);
        if (wl == 0 || wl == sizeof why || strchr(why, '\n') || strstr(why, "VsN9nyP2")) abort();
    }
    free(out);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int allow = data[0] & 1;
    dq__keyring *kr = data[0] & 2 ? NULL : ring();
    const char *queue = data[0] & 4 ? "fuzz~1" : "fuzz", *id = data[0] & 8 ? "id@5" : "id";
    const uint8_t *p = data + 1;
    size_t len = size - 1;
    int rc = open_case(kr, allow, queue, id, p, len);
    if (kr && !allow && rc == 1) abort();
    if (rc != 0) return 0;
    /* A genuine envelope: none of its prefixes opens, nor any change of a
     * byte, and the other name of its queue opens it too. */
    uint8_t *copy = malloc(len);
    if (!copy) abort();
    memcpy(copy, p, len);
    for (size_t cut = 0; cut < len; cut++)
        if (open_case(kr, allow, queue, id, copy, cut) == 0) abort();
    for (size_t i = 0; i < len; i++) {
        copy[i] ^= 0x80;
        if (open_case(kr, allow, queue, id, copy, len) == 0) abort();
        copy[i] ^= 0x80;
    }
    if (open_case(kr, allow, data[0] & 4 ? "fuzz" : "fuzz~1", id, copy, len) != 0) abort();
    /* Item and schedule bindings apart; a schedule's opens as its every tick. */
    int as_item = open_case(kr, allow, queue, "id", copy, len) == 0;
    int as_tick = open_case(kr, allow, queue, "id@5", copy, len) == 0;
    if (as_item == as_tick) abort();
    if (as_tick && open_case(kr, allow, queue, "id@6", copy, len) == 0 &&
        open_case(kr, allow, queue, "ie@5", copy, len) == 0)
        abort();
    free(copy);
    return 0;
}
