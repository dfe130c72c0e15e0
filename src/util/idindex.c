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
 * the FIPS 180-4 vectors, and tests/cli/core/id_bucket.py checks the
 * buckets against redis.sha1hex itself.
 *
 * OpenSSL's libcrypto computes the digest (the library links it for TLS
 * already; its SHA-1 uses the CPU's SHA instructions where there are some).
 * The algorithm is fetched once per process: OpenSSL 3 looks it up in its
 * provider store on every SHA1() or EVP_sha1() digest, which costs more
 * than the digest of a short id. The fetched EVP_MD is freed by OpenSSL's
 * own cleanup (see sha1_fetch). This file and src/conn/tls.c are the only
 * ones that include OpenSSL's headers.
 *
 * SHA-1 is used only as a spreading function here (no security property
 * is wanted: an id picks its bucket, nothing more).
 */
#include <pthread.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "util.h"

/* Fetched once (sha1_fetch); NULL when OpenSSL offers no SHA-1. */
static EVP_MD *sha1_md;
static pthread_once_t sha1_once = PTHREAD_ONCE_INIT;

static void sha1_free(void) {
    EVP_MD_free(sha1_md);
    sha1_md = NULL;
}

/* No OpenSSL call may follow OPENSSL_cleanup (at exit, from OpenSSL's
 * atexit handler, or when the application calls it), and EVP_MD_free is
 * one: OPENSSL_atexit handlers run at the start of that cleanup, whoever
 * calls it, where a plain atexit handler could run after it. The explicit
 * initialisation registers OpenSSL's atexit cleanup when nothing did before
 * (its default). If OPENSSL_atexit fails the EVP_MD stays to the end: still
 * reachable, not a leak. */
static void sha1_fetch(void) {
    if (!OPENSSL_init_crypto(0, NULL)) return;
    sha1_md = EVP_MD_fetch(NULL, "SHA1", NULL);
    if (sha1_md) (void)OPENSSL_atexit(sha1_free);
}

int dq__sha1(const void *data, size_t len, unsigned char out[20]) {
    (void)pthread_once(&sha1_once, sha1_fetch);
    unsigned int n = 0;
    if (!sha1_md || !EVP_Digest(data, len, out, &n, sha1_md, NULL) || n != 20) return -1;
    return 0;
}

int dq__id_bucket(const char *id) {
    unsigned char d[20];
    if (dq__sha1(id, strlen(id), d) != 0) return -1;
    return (int)(((unsigned)d[0] << 8 | d[1]) % DQ__ID_BUCKETS);
}
