/*
 * seal.c - sealed payloads: key files, and the envelope that seals a payload
 * for one item of one queue.
 *
 * A key file holds key lines "dq-key-1 <key id> <key>": the key is 32 bytes
 * in standard base64, the key id the first 8 bytes of the key's BLAKE2b
 * (crypto_generichash) in hex, so a line is checked whole and a key is
 * named without being shown. '#' starts a comment line; blank lines are
 * skipped. The first key seals; every key opens (rotation: put the new key
 * first, keep the old ones until no item sealed with them is left).
 *
 * The envelope, stored as the item's payload:
 *   "\0dqs1" | key id (8 bytes) | nonce (24 bytes) | ciphertext and tag
 * XChaCha20-Poly1305 (libsodium's IETF AEAD): a random 192-bit nonce per
 * item is safe without a counter, which many producer processes could not
 * share. The associated data, "delayq-seal-1\0<queue>\0<id>", binds the
 * format version, the queue and the item id: an envelope copied to another
 * item or queue fails to open. 53 bytes of overhead. <queue> is the queue's
 * own name whichever of its shards holds the item (seal_binding), so the
 * offer, the take, the listings and a change of shard count agree on it.
 *
 * A recurring schedule's payload is sealed once, when the schedule is set,
 * and each tick's item carries that envelope: its associated data,
 * "delayq-sched-1\0<queue>\0<schedule name>", binds the queue and the
 * schedule, not an item (a tick's id is only known at the tick). The other
 * prefix keeps the two apart: a schedule's envelope never opens as an
 * ordinary item's, nor the reverse. An item whose id is a tick's
 * ("NAME@T", dq__tick_id) opens under schedule NAME's binding, or else
 * under its own id's (an item offered with such an id); any other item
 * only under its id's. So an envelope moved to another schedule, queue or
 * item fails; one replayed as another tick of its own schedule opens,
 * which is what the schedule does anyway.
 *
 * A client that holds keys takes only envelopes that open (dq__open_taken):
 * a payload that is not one (plaintext, an envelope cut short, another
 * format) is refused with its reason, as a forged one is, unless the client
 * allows plaintext (dq_options.allow_plaintext) during a move to sealing.
 *
 * Keys live in sodium_malloc'ed memory (guarded, locked where the system
 * allows, wiped when freed), read-only while in use and no-access between
 * uses; the file's bytes are wiped once parsed. A file that group or others
 * may read is refused, as ssh refuses such a private key.
 */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define KEY_LEN crypto_aead_xchacha20poly1305_ietf_KEYBYTES
#define NONCE_LEN crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
#define TAG_LEN crypto_aead_xchacha20poly1305_ietf_ABYTES
#define FILE_MAX (64 * 1024)
#define LINE_TAG "dq-key-1"

static const char magic[DQ__SEAL_MAGIC_LEN] = {'\0', 'd', 'q', 's', '1'};

struct dq__keyring {
    size_t n;
    unsigned char (*ids)[DQ__KEY_ID_LEN];
    unsigned char *keys; /* n * KEY_LEN, sodium_malloc'ed, no access at rest */
    int in_use;          /* dq__keyring_use depth: readable while > 0 */
};

/* Two mprotect calls per item would cost more than sealing it: a batch
 * opens the keys once (dq__keyring_use ... dq__keyring_done), and the seal
 * and open calls inside it only count. */
void dq__keyring_use(dq__keyring *kr) {
    if (kr && kr->in_use++ == 0) sodium_mprotect_readonly(kr->keys);
}

void dq__keyring_done(dq__keyring *kr) {
    if (kr && --kr->in_use == 0) sodium_mprotect_noaccess(kr->keys);
}

/* ------------------------------------------------------------ key ids */

static void key_id_of(const unsigned char *key, unsigned char id[DQ__KEY_ID_LEN]) {
    unsigned char h[crypto_generichash_BYTES_MIN];
    crypto_generichash(h, sizeof h, key, KEY_LEN, NULL, 0);
    memcpy(id, h, DQ__KEY_ID_LEN);
}

void dq__key_id_hex(const unsigned char id[DQ__KEY_ID_LEN], char hex[DQ__KEY_ID_LEN * 2 + 1]) {
    sodium_bin2hex(hex, DQ__KEY_ID_LEN * 2 + 1, id, DQ__KEY_ID_LEN);
}

/* ------------------------------------------------------------ key files */

void dq__keyring_free(dq__keyring *kr) {
    if (!kr) return;
    sodium_free(kr->keys); /* wipes */
    free(kr->ids);
    free(kr);
}

/* Parses one key line (len bytes, no newline) into key and id. Returns 0
 * or -1 with why in err. */
static int parse_line(const char *line, size_t len, unsigned char *key, unsigned char *id, char *err,
                      size_t errlen) {
    char hexid[DQ__KEY_ID_LEN * 2 + 1], b64[64];
    const char *sp1 = memchr(line, ' ', len);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', len - (size_t)(sp1 + 1 - line)) : NULL;
    if (!sp2 || (size_t)(sp1 - line) != sizeof LINE_TAG - 1 ||
        memcmp(line, LINE_TAG, sizeof LINE_TAG - 1) != 0) {
        snprintf(err, errlen, "not a key line (expected '" LINE_TAG " KEYID KEY')");
        return -1;
    }
    size_t idl = (size_t)(sp2 - sp1 - 1), kl = len - (size_t)(sp2 + 1 - line);
    if (idl != DQ__KEY_ID_LEN * 2 || kl >= sizeof b64) {
        snprintf(err, errlen, "malformed key id or key");
        return -1;
    }
    memcpy(hexid, sp1 + 1, idl);
    hexid[idl] = '\0';
    memcpy(b64, sp2 + 1, kl);
    b64[kl] = '\0';
    size_t got = 0;
    unsigned char want[DQ__KEY_ID_LEN];
    int bad = sodium_base642bin(key, KEY_LEN, b64, kl, NULL, &got, NULL,
                                sodium_base64_VARIANT_ORIGINAL) != 0 ||
              got != KEY_LEN || sodium_hex2bin(want, sizeof want, hexid, idl, NULL, &got, NULL) != 0 ||
              got != sizeof want;
    sodium_memzero(b64, sizeof b64);
    if (bad) {
        snprintf(err, errlen, "malformed key id or key");
        return -1;
    }
    key_id_of(key, id);
    if (sodium_memcmp(id, want, sizeof want) != 0) {
        snprintf(err, errlen, "key id %s does not match its key", hexid);
        return -1;
    }
    return 0;
}

int dq__keyring_parse(const char *text, size_t len, dq__keyring **out, char *err, size_t errlen) {
    *out = NULL;
    size_t lines = 0;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    lines++;
    dq__keyring *kr = calloc(1, sizeof *kr);
    if (kr) kr->ids = calloc(lines, sizeof *kr->ids);
    if (kr && kr->ids) kr->keys = sodium_malloc(lines * KEY_LEN);
    if (!kr || !kr->ids || !kr->keys) {
        dq__keyring_free(kr);
        snprintf(err, errlen, "out of memory");
        return DQ_ENOMEM;
    }
    size_t lineno = 0;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len, l = end - at;
        lineno++;
        if (l && text[at + l - 1] == '\r') l--;
        if (l && text[at] != '#') {
            char why[96];
            if (memchr(text + at, '\0', l) ||
                parse_line(text + at, l, kr->keys + kr->n * KEY_LEN, kr->ids[kr->n], why, sizeof why)) {
                snprintf(err, errlen, "line %zu: %s", lineno,
                         memchr(text + at, '\0', l) ? "a NUL byte" : why);
                dq__keyring_free(kr);
                return DQ_EINVAL;
            }
            kr->n++;
        }
        at = end + 1;
    }
    if (kr->n == 0) {
        snprintf(err, errlen, "no key in it (make one with 'delayq keygen')");
        dq__keyring_free(kr);
        return DQ_EINVAL;
    }
    sodium_mprotect_noaccess(kr->keys);
    *out = kr;
    return 0;
}

int dq__keyring_load(const char *path, dq__keyring **out, char *err, size_t errlen) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        snprintf(err, errlen, "cannot read key file %s: %s", path, strerror(errno));
        return DQ_EINVAL;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > FILE_MAX) {
        snprintf(err, errlen, "key file %s is not a regular file of at most %d bytes", path, FILE_MAX);
        close(fd);
        return DQ_EINVAL;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        snprintf(err, errlen, "key file %s is open to group or others (mode %03o): chmod 600 it", path,
                 (unsigned)(st.st_mode & 0777));
        close(fd);
        return DQ_EINVAL;
    }
    char *buf = sodium_malloc(FILE_MAX);
    if (!buf) {
        close(fd);
        snprintf(err, errlen, "out of memory");
        return DQ_ENOMEM;
    }
    size_t len = 0;
    ssize_t got;
    while (len < FILE_MAX && (got = read(fd, buf + len, FILE_MAX - len)) != 0) {
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) break;
        len += (size_t)got;
    }
    close(fd);
    char why[160];
    int rc = dq__keyring_parse(buf, len, out, why, sizeof why);
    sodium_free(buf); /* wipes the key lines */
    if (rc) snprintf(err, errlen, "key file %s: %s", path, why);
    return rc;
}

int dq__key_line(char *line, size_t size) {
    unsigned char key[KEY_LEN], id[DQ__KEY_ID_LEN];
    char hex[DQ__KEY_ID_LEN * 2 + 1],
        b64[sodium_base64_ENCODED_LEN(KEY_LEN, sodium_base64_VARIANT_ORIGINAL)];
    randombytes_buf(key, sizeof key);
    key_id_of(key, id);
    dq__key_id_hex(id, hex);
    sodium_bin2base64(b64, sizeof b64, key, sizeof key, sodium_base64_VARIANT_ORIGINAL);
    int n = snprintf(line, size, LINE_TAG " %s %s\n", hex, b64);
    sodium_memzero(key, sizeof key);
    sodium_memzero(b64, sizeof b64);
    return n > 0 && (size_t)n < size ? 0 : -1;
}

/* ------------------------------------------------------------ envelopes */

int dq__sealed(const void *payload, size_t len, unsigned char id[DQ__KEY_ID_LEN]) {
    if (len < DQ__SEAL_OVERHEAD || memcmp(payload, magic, sizeof magic) != 0) return 0;
    if (id) memcpy(id, (const unsigned char *)payload + sizeof magic, DQ__KEY_ID_LEN);
    return 1;
}

/* What a sealed item is bound to: the length of the queue name within
 * name, which is the queue's own name or one of its shards' ("q~T", T a
 * tag: shard.c; no queue name holds '~'). Sealing and every opener go
 * through make_ad, so none can bind an item to a shard, which an item
 * leaves when the shard count changes and which an offer and a take may
 * name differently. */
static size_t seal_binding(const char *name) { return strcspn(name, "~"); }

/* The two bindings' versions: an item's, a schedule's (see above). */
static const char item_binding[] = "delayq-seal-1";
static const char sched_binding[] = "delayq-sched-1";

/* "<version>\0<queue>\0<what>" into ad (sized for the longest): what is
 * the item id, or the schedule name. */
static size_t make_ad(unsigned char *ad, const char *version, const char *queue, const char *what,
                      size_t what_len) {
    size_t ql = seal_binding(queue), n = strlen(version) + 1; /* with its NUL */
    memcpy(ad, version, n);
    memcpy(ad + n, queue, ql), n += ql;
    ad[n++] = '\0';
    memcpy(ad + n, what, what_len), n += what_len;
    return n;
}

#define AD_MAX (32 + DQ_QUEUE_MAX + DQ_ID_MAX)

/* Seals len bytes of pt under adl bytes of ad with kr's first key. */
static int seal_ad(dq__keyring *kr, const unsigned char *ad, size_t adl, const void *pt, size_t len,
                   unsigned char **out, size_t *out_len) {
    unsigned char *e = malloc(DQ__SEAL_OVERHEAD + len);
    if (!e) return DQ_ENOMEM;
    memcpy(e, magic, sizeof magic);
    memcpy(e + sizeof magic, kr->ids[0], DQ__KEY_ID_LEN);
    unsigned char *nonce = e + sizeof magic + DQ__KEY_ID_LEN;
    dq__random_bytes(nonce, NONCE_LEN);
    unsigned long long clen = 0;
    dq__keyring_use(kr);
    crypto_aead_xchacha20poly1305_ietf_encrypt(nonce + NONCE_LEN, &clen, pt, len, ad, adl, NULL, nonce,
                                               kr->keys);
    dq__keyring_done(kr);
    *out = e;
    *out_len = DQ__SEAL_OVERHEAD + len;
    return 0;
}

int dq__seal(dq__keyring *kr, const char *queue, const char *id, const void *pt, size_t len,
             unsigned char **out, size_t *out_len) {
    unsigned char ad[AD_MAX];
    return seal_ad(kr, ad, make_ad(ad, item_binding, queue, id, strlen(id)), pt, len, out, out_len);
}

int dq__seal_schedule(dq__keyring *kr, const char *queue, const char *name, const void *pt, size_t len,
                      unsigned char **out, size_t *out_len) {
    unsigned char ad[AD_MAX];
    return seal_ad(kr, ad, make_ad(ad, sched_binding, queue, name, strlen(name)), pt, len, out, out_len);
}

/* Opens the envelope env (len bytes, a whole one) with key which of kr
 * under adl bytes of ad: 0 with *out, DQ_EPROTO, DQ_ENOMEM. */
static int open_ad(dq__keyring *kr, size_t which, const unsigned char *ad, size_t adl, const void *env,
                   size_t len, unsigned char **out, size_t *out_len) {
    const unsigned char *nonce = (const unsigned char *)env + DQ__SEAL_MAGIC_LEN + DQ__KEY_ID_LEN;
    size_t clen = len - DQ__SEAL_MAGIC_LEN - DQ__KEY_ID_LEN - NONCE_LEN;
    unsigned char *pt = malloc(clen - TAG_LEN + 1); /* + 1: room for a NUL, and never malloc(0) */
    if (!pt) return DQ_ENOMEM;
    unsigned long long plen = 0;
    dq__keyring_use(kr);
    int bad = crypto_aead_xchacha20poly1305_ietf_decrypt(pt, &plen, NULL, nonce + NONCE_LEN, clen, ad,
                                                         adl, nonce, kr->keys + which * KEY_LEN);
    dq__keyring_done(kr);
    if (bad) {
        free(pt);
        return DQ_EPROTO;
    }
    *out = pt;
    *out_len = (size_t)plen;
    return 0;
}

int dq__open(dq__keyring *kr, const char *queue, const char *id, size_t id_len, const void *env,
             size_t len, unsigned char **out, size_t *out_len) {
    unsigned char kid[DQ__KEY_ID_LEN];
    if (!dq__sealed(env, len, kid)) return DQ_EINVAL;
    size_t which = kr ? kr->n : 0;
    for (size_t i = 0; kr && i < kr->n && which == kr->n; i++)
        if (memcmp(kr->ids[i], kid, sizeof kid) == 0) which = i;
    if (!kr || which == kr->n) return DQ_EKEY;
    unsigned char ad[AD_MAX];
    size_t name_len, adl;
    if (dq__tick_id(id, id_len, &name_len)) {
        adl = make_ad(ad, sched_binding, queue, id, name_len);
        int rc = open_ad(kr, which, ad, adl, env, len, out, out_len);
        if (rc != DQ_EPROTO) return rc;
    }
    adl = make_ad(ad, item_binding, queue, id, id_len);
    return open_ad(kr, which, ad, adl, env, len, out, out_len);
}

int dq__looks_sealed(const void *payload, size_t len) {
    return len >= DQ__SEAL_MAGIC_LEN - 1 && memcmp(payload, magic, DQ__SEAL_MAGIC_LEN - 1) == 0;
}

/* Why a payload that is no whole envelope is refused (see dq__open_taken):
 * DQ_EINVAL with why, or 1 when it may go as it is (a client without keys
 * reads every payload as it is; one that allows plaintext, one that does
 * not look sealed). */
static int not_envelope(const dq__keyring *kr, int allow_plain, const unsigned char *p, size_t len,
                        char *why, size_t whylen) {
    int looks = dq__looks_sealed(p, len);
    /* "\0dqs" then the version, '1', or nothing: an envelope cut short. */
    int cut = len < DQ__SEAL_MAGIC_LEN || p[DQ__SEAL_MAGIC_LEN - 1] == magic[DQ__SEAL_MAGIC_LEN - 1];
    if (!kr || (allow_plain && !looks)) return 1;
    if (!looks) snprintf(why, whylen, "payload not sealed, taken by a client that holds keys");
    else if (cut)
        snprintf(why, whylen, "sealed payload cut short (%zu bytes, an envelope has at least %d)", len,
                 DQ__SEAL_OVERHEAD);
    else snprintf(why, whylen, "sealed payload of an unknown format (not \\0dqs1)");
    return DQ_EINVAL;
}

int dq__open_taken(dq__keyring *kr, int allow_plain, const char *queue, const char *id, size_t id_len,
                   const void *payload, size_t len, unsigned char **out, size_t *out_len, char *why,
                   size_t whylen) {
    unsigned char kid[DQ__KEY_ID_LEN];
    char hex[DQ__KEY_ID_LEN * 2 + 1];
    *out = NULL;
    if (!dq__sealed(payload, len, kid)) return not_envelope(kr, allow_plain, payload, len, why, whylen);
    int rc = dq__open(kr, queue, id, id_len, payload, len, out, out_len);
    if (rc == 0) return 0;
    dq__key_id_hex(kid, hex);
    if (rc == DQ_EKEY) snprintf(why, whylen, "sealed with key %s, which the taking client lacked", hex);
    else if (rc == DQ_EPROTO)
        snprintf(why, whylen, "sealed payload failed authentication (key %s)", hex);
    else snprintf(why, whylen, "sealed payload (key %s): out of memory", hex);
    return rc;
}

size_t dq__keyring_ids_hex(const dq__keyring *kr, char *buf, size_t size) {
    size_t n = 0;
    for (size_t i = 0; kr && i < kr->n && n + DQ__KEY_ID_LEN * 2 < size; i++, n += DQ__KEY_ID_LEN * 2)
        dq__key_id_hex(kr->ids[i], buf + n);
    buf[n] = '\0';
    return n;
}
