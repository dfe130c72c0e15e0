/*
 * fuzz_url.c - libFuzzer target: dq__url_parse, dq__url_mask and
 * dq__url_redact on any bytes. Besides not crashing: the masked text fits
 * DQ__URL_MASKED_MAX and shows "***" where the user info and a sentinel
 * password were; the redacted text (NUL bytes and all) fits its buffer,
 * whatever its size, and ends where its length says.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Where the URL had user info, the masked text shows "***" in its place
 * and nothing of it, and every sentinel_password parameter of the query
 * shows "***" as its value. (Looking for the password's bytes anywhere
 * would flag hosts, or another parameter's value, that happen to hold
 * them: a sentinel_user of "sentinel_password=x" with the password "x"
 * once did.) */
static void check_masked(const char *masked, const char *text, const dq__url *u) {
    const char *sep = strstr(text, "://");
    if (!sep) abort(); /* it parsed */
    size_t scheme = (size_t)(sep - text) + 3;
    /* A unix:// path may hold an '@': it has no user info. */
    if (!u->is_unix && strrchr(sep + 3, '@') &&
        (strncmp(masked, text, scheme) != 0 || strncmp(masked + scheme, "***@", 4) != 0))
        abort();
    if (!u->sentinel_password[0]) return;
    /* The query as the parser reads it: after the first '?', parameters
     * split at '&', up to '#'. Each sentinel_password shows "***", or the
     * masked text's "..." cut in it (escaped bytes before it can fill
     * DQ__URL_MASKED_MAX): nothing of the value. A value may hold '?' or
     * the words "sentinel_password=" (a sentinel_user did once). */
    static const char name[] = "sentinel_password=";
    const char *q = strchr(masked + scheme, '?');
    while (q && *q && *q != '#') {
        const char *param = q + 1, *end = param + strcspn(param, "&#");
        if ((size_t)(end - param) >= sizeof name - 1 && memcmp(param, name, sizeof name - 1) == 0) {
            const char *v = param + sizeof name - 1;
            size_t vl = (size_t)(end - v);
            int hidden =
                (vl == 3 && memcmp(v, "***", 3) == 0) || (!*end && vl <= 6 && strspn(v, "*.") == vl);
            if (!hidden) abort();
        }
        q = *end == '&' ? end : NULL;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    dq__url u;
    char err[200];
    if (dq__url_parse(text, &u, err, sizeof err) == 0) {
        if (strlen(u.masked) > DQ__URL_MASKED_MAX) abort();
        check_masked(u.masked, text, &u);
        if (u.nnodes < 0 || u.nnodes > DQ__URL_NODES_MAX) abort();
    } else if (strlen(err) >= sizeof err) {
        abort();
    }
    char masked[DQ__URL_MASKED_MAX + 1];
    dq__url_mask(text, masked, sizeof masked);
    if (strlen(masked) > DQ__URL_MASKED_MAX) abort();
    /* The raw form reads all size bytes, NULs included, into buffers
     * large and small (a cut may fall anywhere). */
    char raw[DQ__URL_MASKED_MAX + 1];
    size_t room = size % sizeof raw + 1;
    size_t n = dq__url_redact(data, size, raw, room);
    if (n >= room || raw[n] != '\0') abort();
    free(text);
    return 0;
}
