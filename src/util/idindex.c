/*
 * idindex.c - the id index bucket of an id, computed on the client.
 *
 * Every queue keeps an id index: hashes dq:{Q}:i:<bucket> mapping id ->
 * score (see lua/lib/50_idindex.lua). The scripts compute the bucket as the first
 * 16 bits of SHA-1(id) modulo DQ__ID_BUCKETS, with redis.sha1hex. That
 * costs an offer about 1 us of Redis CPU (the digest, its 40-character hex
 * string, and the strings cut from it), a sixth of the whole offer, so
 * offers compute it here, where it is cheap, and pass it along. Both sides
 * must agree bit for bit: tests/unit/test_util.c checks the digest against
 * the FIPS 180-4 vectors, and every integration test that cancels, looks up
 * or acknowledges an offered id checks the two sides against each other.
 *
 * SHA-1 is used only as a spreading function here (no security property
 * is wanted: an id picks its bucket, nothing more).
 */
#include <stdint.h>
#include <string.h>

#include "util.h"

static uint32_t rol(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

/* One 64-byte block into the state h (FIPS 180-4, 6.1.2). */
static void sha1_block(uint32_t h[5], const unsigned char *p) {
    uint32_t w[80];
    for (int t = 0; t < 16; t++)
        w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 | (uint32_t)p[4 * t + 2] << 8 |
               (uint32_t)p[4 * t + 3];
    for (int t = 16; t < 80; t++) w[t] = rol(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int t = 0; t < 80; t++) {
        uint32_t f, k;
        if (t < 20) f = (b & c) | (~b & d), k = 0x5a827999;
        else if (t < 40) f = b ^ c ^ d, k = 0x6ed9eba1;
        else if (t < 60) f = (b & c) | (b & d) | (c & d), k = 0x8f1bbcdc;
        else f = b ^ c ^ d, k = 0xca62c1d6;
        uint32_t tmp = rol(a, 5) + f + e + k + w[t];
        e = d, d = c, c = rol(b, 30), b = a, a = tmp;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
}

void dq__sha1(const void *data, size_t len, unsigned char out[20]) {
    uint32_t h[5] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0};
    const unsigned char *p = data;
    size_t left = len;
    for (; left >= 64; left -= 64, p += 64) sha1_block(h, p);
    /* The tail, the 0x80 marker and the length in bits (big-endian) fill
     * one or two final blocks. */
    unsigned char last[128] = {0};
    if (left) memcpy(last, p, left);
    last[left] = 0x80;
    size_t blocks = left + 1 + 8 <= 64 ? 1 : 2;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++) last[blocks * 64 - 1 - i] = (unsigned char)(bits >> (8 * i));
    for (size_t i = 0; i < blocks; i++) sha1_block(h, last + 64 * i);
    for (int i = 0; i < 5; i++) {
        out[4 * i] = (unsigned char)(h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(h[i] >> 8);
        out[4 * i + 3] = (unsigned char)h[i];
    }
}

unsigned dq__id_bucket(const char *id) {
    unsigned char d[20];
    dq__sha1(id, strlen(id), d);
    return ((unsigned)d[0] << 8 | d[1]) % DQ__ID_BUCKETS;
}
