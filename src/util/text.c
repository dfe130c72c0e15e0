/*
 * text.c - text encodings and a growable byte buffer.
 *
 * Owns strict UTF-8 validation (the CLI prints an id or a payload as a JSON
 * string only when it is valid UTF-8, else as base64), the escaping that
 * turns outside bytes into one line of printable text (dq__escape: for
 * messages and text output), and dq__buf. Buffer invariant: when data !=
 * NULL, data[len] == '\0' (not counted in len), so a buffer of text is
 * always a C string too.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define BUF_MIN_CAP 64

/* ------------------------------------------------------------ UTF-8 */

/* Length of the sequence led by byte c (1..4), or 0 if c cannot lead one:
 * continuation bytes, 0xC0/0xC1 (always overlong) and 0xF5.. (> U+10FFFF). */
static size_t utf8_seq_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* The range allowed for the second byte depends on the lead: that is where
 * overlongs (E0, F0), surrogates (ED) and code points above U+10FFFF (F4)
 * are ruled out (RFC 3629, section 4). */
static int utf8_second_ok(unsigned char lead, unsigned char c) {
    if (lead == 0xE0) return c >= 0xA0 && c <= 0xBF;
    if (lead == 0xED) return c >= 0x80 && c <= 0x9F;
    if (lead == 0xF0) return c >= 0x90 && c <= 0xBF;
    if (lead == 0xF4) return c >= 0x80 && c <= 0x8F;
    return c >= 0x80 && c <= 0xBF;
}

size_t dq__utf8_seq(const void *data, size_t len) {
    const unsigned char *s = data;
    size_t k, n;
    if (s == NULL || len == 0) return 0;
    n = utf8_seq_len(s[0]);
    if (n == 0 || n > len) return 0;
    if (n > 1 && !utf8_second_ok(s[0], s[1])) return 0;
    for (k = 2; k < n; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    return n;
}

int dq__utf8_valid(const void *data, size_t len) {
    const unsigned char *s = data;
    size_t i = 0, n;
    if (s == NULL) return len == 0;
    while (i < len) {
        n = dq__utf8_seq(s + i, len - i);
        if (n == 0) return 0;
        i += n;
    }
    return 1;
}

int dq__name_valid(const char *name, size_t max) {
    size_t n = strlen(name);
    if (n < 1 || n > max) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f) return 0;
    return dq__utf8_valid(name, n);
}

/* ------------------------------------------------------------ escaping */

/* The escaped form of the character at s[i] (shown bytes in all): sets
 * *src to its text (unit, or the input itself for a kept UTF-8 character),
 * *n to the input bytes it stands for, and returns its length. */
static size_t escape_unit(const unsigned char *s, size_t i, size_t shown, unsigned flags, char unit[4],
                          const char **src, size_t *n) {
    static const char hex[] = "0123456789abcdef";
    unsigned char c = s[i];

    *src = unit;
    *n = 1;
    if (c == '\\') {
        unit[0] = unit[1] = '\\';
        return 2;
    }
    if (c >= 0x20 && c < 0x7f) {
        unit[0] = (char)c;
        return 1;
    }
    if (c >= 0x80 && (flags & DQ__ESC_UTF8) && (*n = dq__utf8_seq(s + i, shown - i)) > 0) {
        *src = (const char *)s + i;
        return *n;
    }
    *n = 1;
    unit[0] = '\\';
    unit[1] = 'x';
    unit[2] = hex[c >> 4];
    unit[3] = hex[c & 0xF];
    return 4;
}

size_t dq__escape(char *out, size_t size, const void *data, size_t len, size_t max, unsigned flags) {
    const unsigned char *s = data;
    size_t shown = len < max ? len : max, pos = 0, i, n, k;
    int cut = len > shown;
    const char *src;
    char unit[4];

    if (size < 4) {
        if (size) out[0] = '\0';
        return 0;
    }
    /* Does it all fit? Then no room needs keeping for "...". */
    for (i = 0, k = 0; !cut && i < shown && k < size; i += n)
        k += escape_unit(s, i, shown, flags, unit, &src, &n);
    if (k > size - 1) cut = 1;
    for (i = 0; i < shown; i += n) {
        k = escape_unit(s, i, shown, flags, unit, &src, &n);
        if (pos + k + (cut ? 3 : 0) > size - 1) break;
        memcpy(out + pos, src, k);
        pos += k;
    }
    if (cut) {
        memcpy(out + pos, "...", 3);
        pos += 3;
    }
    out[pos] = '\0';
    return pos;
}

/* ------------------------------------------------------------ buffer */

/* Makes room for extra more bytes plus the NUL. */
static int buf_reserve(dq__buf *b, size_t extra) {
    size_t need, cap;
    char *p;
    if (extra > SIZE_MAX - b->len - 1) return DQ_ENOMEM;
    need = b->len + extra + 1;
    if (b->data != NULL && need <= b->cap) return 0;
    cap = b->cap > BUF_MIN_CAP ? b->cap : BUF_MIN_CAP;
    /* Doubling keeps appends amortised O(1). */
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    p = realloc(b->data, cap);
    if (p == NULL) return DQ_ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int dq__buf_append(dq__buf *b, const void *data, size_t len) {
    if (len == 0) return 0;
    if (buf_reserve(b, len) != 0) return DQ_ENOMEM;
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

int dq__buf_printf(dq__buf *b, const char *fmt, ...) {
    va_list ap;
    int n;
    char probe;

    /* First pass measures, second writes: no fixed-size scratch buffer. */
    va_start(ap, fmt);
    n = vsnprintf(&probe, 1, fmt, ap);
    va_end(ap);
    if (n < 0) return DQ_EINVAL;
    if (buf_reserve(b, (size_t)n) != 0) return DQ_ENOMEM;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void dq__buf_release(dq__buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}
