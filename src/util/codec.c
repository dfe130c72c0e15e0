/*
 * codec.c - names, keys and the stored-entry formats, C side.
 *
 * Owns the validity rules for queue names and ids, the key layout
 * "dq:{queue}:<suffix>" (the braces are a cluster hash tag, so all keys of a
 * queue share one slot), and the two list-entry formats of lua/lib/00_base.lua:
 *   ready     "1|<due>|<ready>|<idlen>|<id><payload>"  (decoded here, and
 *             "2|<due>|<ready>|<attempts>|<idlen>|<elen>|<id><err><payload>")
 *   set-aside "1|<reason>|<idlen>|<id><raw>"           (encoded here)
Also the schedule names, and the id of a recurring tick's item, "NAME@T"
(lua/lib/80_recurring.lua), which sealing reads its binding from.
 * The payload is the tail of an entry, so it may hold any bytes ('|', NUL)
 * and is never scanned.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Longest decimal field: 19 digits hold every value up to INT64_MAX. */
#define DECIMAL_MAX_DIGITS 19

static int queue_char_ok(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == ':' || c == '-';
}

int dq__queue_valid(const char *name) {
    size_t i;
    if (name == NULL) return 0;
    for (i = 0; name[i] != '\0'; i++)
        if (i >= DQ_QUEUE_MAX || !queue_char_ok((unsigned char)name[i])) return 0;
    return i > 0;
}

int dq__id_valid(const char *id) {
    size_t i;
    if (id == NULL) return 0;
    for (i = 0; id[i] != '\0'; i++) {
        unsigned char c = (unsigned char)id[i];
        if (i >= DQ_ID_MAX || c < 0x21 || c > 0x7e) return 0;
    }
    return i > 0;
}

int dq__schedule_name_valid(const char *name, size_t len) {
    if (len < 1 || len > DQ_RECURRING_NAME_MAX) return 0;
    for (size_t i = 0; i < len; i++)
        if (!queue_char_ok((unsigned char)name[i])) return 0;
    return 1;
}

/* Strict, so that only what the tick scripts make reads as a tick: one
 * '@' (no schedule name holds one), then T as fmt writes it, digits with
 * no sign and no leading zero, at most DQ_DUE_MAX_MS. */
int dq__tick_id(const char *id, size_t len, size_t *name_len) {
    const char *at = memchr(id, '@', len);
    if (!at || !dq__schedule_name_valid(id, (size_t)(at - id))) return 0;
    const char *t = at + 1;
    size_t tl = len - (size_t)(t - id);
    if (tl < 1 || tl > DECIMAL_MAX_DIGITS || (t[0] == '0' && tl > 1)) return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < tl; i++) {
        if (t[i] < '0' || t[i] > '9') return 0;
        v = v * 10 + (uint64_t)(t[i] - '0');
    }
    if (v > (uint64_t)DQ_DUE_MAX_MS) return 0;
    *name_len = (size_t)(at - id);
    return 1;
}

int dq__list_cursor(int slots, const char *cursor, size_t *offset) {
    size_t a = strspn(cursor, "0123456789");
    *offset = 0;
    if (!*cursor) return 1;
    /* A sharded queue's cursor names its shard first: "S/" (0..63). */
    if (a >= 1 && a <= 2 && cursor[a] == '/') {
        cursor += a + 1;
        a = strspn(cursor, "0123456789");
        if (!*cursor) return 1;
    }
    if (slots) {
        if (a < 1 || a > 16 || cursor[a] != ':') return 0;
        size_t b = strspn(cursor + a + 1, "0123456789");
        return b >= 1 && b <= 6 && cursor[a + 1 + b] == '\0';
    }
    if (a > 9 || cursor[a] != '\0') return 0;
    *offset = (size_t)strtoul(cursor, NULL, 10);
    return 1;
}

int dq__key(char *buf, size_t size, const char *queue, const char *suffix) {
    int n;
    if (buf == NULL || size == 0 || queue == NULL) return -1;
    n = snprintf(buf, size, "dq:{%s}:%s", queue, suffix != NULL ? suffix : "");
    if (n < 0 || (size_t)n >= size) {
        buf[0] = '\0'; /* never leave a truncated key that looks usable */
        return -1;
    }
    return n;
}

/* Reads a "<decimal>|" field at buf[*pos]: 1..19 digits, no sign, at most
 * INT64_MAX, then the '|'. Advances *pos past the '|'. */
static int read_decimal(const char *buf, size_t len, size_t *pos, int64_t *out) {
    size_t i = *pos, digits = 0;
    uint64_t v = 0;
    while (i < len && buf[i] >= '0' && buf[i] <= '9') {
        if (++digits > DECIMAL_MAX_DIGITS) return DQ_EPROTO;
        /* 19 digits stay below 10^19 < 2^64, so this cannot wrap. */
        v = v * 10 + (uint64_t)(buf[i] - '0');
        i++;
    }
    if (digits == 0 || i >= len || buf[i] != '|' || v > (uint64_t)INT64_MAX) return DQ_EPROTO;
    *out = (int64_t)v;
    *pos = i + 1;
    return 0;
}

size_t dq__fmt_i64(char *buf, int64_t v) {
    char tmp[20];
    size_t n = 0, len = 0;
    /* Through the magnitude as unsigned, so INT64_MIN does not overflow. */
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) buf[len++] = '-';
    while (n) buf[len++] = tmp[--n];
    buf[len] = '\0';
    return len;
}

int dq__entry_decode(const char *buf, size_t len, dq__entry *out) {
    size_t pos = 2, rest;
    int64_t due, ready, attempts = 0, idlen, errlen = 0;
    if (buf == NULL || out == NULL || len < 2 || (buf[0] != '1' && buf[0] != '2') || buf[1] != '|')
        return DQ_EPROTO;
    if (read_decimal(buf, len, &pos, &due) != 0 || read_decimal(buf, len, &pos, &ready) != 0)
        return DQ_EPROTO;
    if (buf[0] == '2' && read_decimal(buf, len, &pos, &attempts) != 0) return DQ_EPROTO;
    if (read_decimal(buf, len, &pos, &idlen) != 0) return DQ_EPROTO;
    if (buf[0] == '2' && read_decimal(buf, len, &pos, &errlen) != 0) return DQ_EPROTO;
    /* The entry was read back from Redis, where anything may have been
     * written: the same rules as lua/lib/30_records.lua's entry_head (times within
     * DQ_DUE_MAX_MS, attempts below DQ__ATTEMPTS_MAX, the whole id rule),
     * so no consumer has to re-check an id before copying or acking it. */
    rest = len - pos;
    if (due > DQ_DUE_MAX_MS || ready > DQ_DUE_MAX_MS || attempts >= DQ__ATTEMPTS_MAX || idlen == 0 ||
        idlen > DQ_ID_MAX || (uint64_t)idlen > rest || (uint64_t)errlen > rest - (size_t)idlen)
        return DQ_EPROTO;
    for (size_t i = 0; i < (size_t)idlen; i++) {
        unsigned char ch = (unsigned char)buf[pos + i];
        if (ch < 0x21 || ch > 0x7e) return DQ_EPROTO;
    }
    out->due_ms = due;
    out->ready_ms = ready;
    out->attempts = attempts;
    out->id = buf + pos;
    out->id_len = (size_t)idlen;
    out->err = buf + pos + (size_t)idlen;
    out->err_len = (size_t)errlen;
    out->payload = out->err + (size_t)errlen;
    out->payload_len = rest - (size_t)idlen - (size_t)errlen;
    return 0;
}

char *dq__aside_encode(const char *reason, const char *id, size_t id_len, const char *raw,
                       size_t raw_len, size_t *len) {
    char mid[32]; /* "|<idlen>|" */
    size_t reason_len = reason != NULL ? strlen(reason) : 0;
    size_t mid_len, total, i;
    char *out, *p;
    int n = snprintf(mid, sizeof mid, "|%zu|", id_len);
    if (n < 0 || (size_t)n >= sizeof mid) return NULL;
    mid_len = (size_t)n;
    /* "1|" + reason + mid + id + raw + NUL, each sum checked against
     * SIZE_MAX (reason and mid are small, id and raw may be anything). */
    total = 2 + reason_len + mid_len;
    if (reason_len > SIZE_MAX / 2 || id_len > SIZE_MAX - total - 1 ||
        raw_len > SIZE_MAX - total - 1 - id_len)
        return NULL;
    total += id_len + raw_len;
    out = malloc(total + 1);
    if (out == NULL) return NULL;
    p = out;
    *p++ = '1';
    *p++ = '|';
    /* The reason is ours (a short word), but a '|' in it would shift every
     * later field, so it is replaced rather than trusted. */
    for (i = 0; i < reason_len; i++) *p++ = reason[i] == '|' ? '_' : reason[i];
    memcpy(p, mid, mid_len);
    p += mid_len;
    if (id_len > 0) memcpy(p, id, id_len);
    p += id_len;
    if (raw_len > 0) memcpy(p, raw, raw_len);
    out[total] = '\0';
    if (len != NULL) *len = total;
    return out;
}
