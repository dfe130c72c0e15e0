/*
 * text.c - text encodings and a growable byte buffer.
 *
 * Owns strict UTF-8 validation (the CLI prints a payload as a JSON string
 * only when it is valid UTF-8, else as base64), JSON string escaping, and
 * dq__buf. Buffer invariant: when data != NULL, data[len] == '\0' (not
 * counted in len), so a buffer of text is always a C string too.
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
static size_t utf8_seq_len(unsigned char c)
{
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF)
        return 3;
    if (c >= 0xF0 && c <= 0xF4)
        return 4;
    return 0;
}

/* The range allowed for the second byte depends on the lead: that is where
 * overlongs (E0, F0), surrogates (ED) and code points above U+10FFFF (F4)
 * are ruled out (RFC 3629, section 4). */
static int utf8_second_ok(unsigned char lead, unsigned char c)
{
    if (lead == 0xE0)
        return c >= 0xA0 && c <= 0xBF;
    if (lead == 0xED)
        return c >= 0x80 && c <= 0x9F;
    if (lead == 0xF0)
        return c >= 0x90 && c <= 0xBF;
    if (lead == 0xF4)
        return c >= 0x80 && c <= 0x8F;
    return c >= 0x80 && c <= 0xBF;
}

int dq__utf8_valid(const void *data, size_t len)
{
    const unsigned char *s = data;
    size_t i = 0, k, n;
    if (s == NULL)
        return len == 0;
    while (i < len) {
        n = utf8_seq_len(s[i]);
        if (n == 0 || n > len - i)
            return 0;
        if (n > 1 && !utf8_second_ok(s[i], s[i + 1]))
            return 0;
        for (k = 2; k < n; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += n;
    }
    return 1;
}

/* ------------------------------------------------------------ buffer */

/* Makes room for extra more bytes plus the NUL. */
static int buf_reserve(dq__buf *b, size_t extra)
{
    size_t need, cap;
    char *p;
    if (extra > SIZE_MAX - b->len - 1)
        return DQ_ENOMEM;
    need = b->len + extra + 1;
    if (b->data != NULL && need <= b->cap)
        return 0;
    cap = b->cap > BUF_MIN_CAP ? b->cap : BUF_MIN_CAP;
    /* Doubling keeps appends amortised O(1). */
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    p = realloc(b->data, cap);
    if (p == NULL)
        return DQ_ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int dq__buf_append(dq__buf *b, const void *data, size_t len)
{
    if (len == 0)
        return 0;
    if (buf_reserve(b, len) != 0)
        return DQ_ENOMEM;
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

int dq__buf_printf(dq__buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;
    char probe;

    /* First pass measures, second writes: no fixed-size scratch buffer. */
    va_start(ap, fmt);
    n = vsnprintf(&probe, 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return DQ_EINVAL;
    if (buf_reserve(b, (size_t)n) != 0)
        return DQ_ENOMEM;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void dq__buf_release(dq__buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

/* ------------------------------------------------------------ JSON */

/* The escape for byte c, or NULL if it goes out as it is. Short forms where
 * JSON has them, \u00XX for the other control characters (RFC 8259, 7). */
static const char *json_escape(unsigned char c, char tmp[7])
{
    static const char hex[] = "0123456789abcdef";
    switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\t': return "\\t";
    case '\r': return "\\r";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: break;
    }
    if (c >= 0x20)
        return NULL;
    memcpy(tmp, "\\u00", 4);
    tmp[4] = hex[c >> 4];
    tmp[5] = hex[c & 0xF];
    tmp[6] = '\0';
    return tmp;
}

int dq__json_string(dq__buf *b, const void *utf8, size_t len)
{
    const unsigned char *s = utf8;
    size_t start_len = b->len, run = 0, i;
    char tmp[7];
    int rc;
    if (s == NULL && len > 0)
        return DQ_EINVAL;
    rc = dq__buf_append(b, "\"", 1);
    /* Bytes that need no escape are copied in runs, not one by one. */
    for (i = 0; rc == 0 && i < len; i++) {
        const char *esc = json_escape(s[i], tmp);
        if (esc == NULL)
            continue;
        if (i > run)
            rc = dq__buf_append(b, s + run, i - run);
        if (rc == 0)
            rc = dq__buf_append(b, esc, strlen(esc));
        run = i + 1;
    }
    if (rc == 0 && run < len)
        rc = dq__buf_append(b, s + run, len - run);
    if (rc == 0)
        rc = dq__buf_append(b, "\"", 1);
    if (rc != 0 && b->data != NULL) {
        /* All or nothing: a half-written literal would corrupt the JSON. */
        b->len = start_len;
        b->data[start_len] = '\0';
    }
    return rc;
}
