/*
 * duration.c - dq_parse_duration: human durations ("250ms", "30s", "5m",
 * "2h", "1d", bare digits = ms) for the CLI's --delay and for callers.
 *
 * Deliberately narrow: lowercase units only, no sign, no spaces, no
 * fractions, no compound forms ("1h30m"). Anything a reader could take two
 * ways is refused instead of guessed. The result is capped at DQ_DUE_MAX_MS,
 * the latest due time there is, so no valid delay overflows later sums.
 */
#include <string.h>

#include "util.h"

typedef struct unit {
    const char *suffix;
    int64_t ms;
} unit;

/* Suffixes are compared whole, so "ms" never matches "m" or "s"; the
 * empty suffix is bare digits, which mean milliseconds. */
static const unit units[] = {
    {"", 1}, {"ms", 1}, {"s", 1000}, {"m", 60 * 1000}, {"h", 60 * 60 * 1000}, {"d", 24 * 60 * 60 * 1000},
};

static const unit *find_unit(const char *suffix) {
    size_t i;
    for (i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(units[i].suffix, suffix) == 0) return &units[i];
    return NULL;
}

int dq_parse_duration(const char *text, int64_t *ms) {
    const char *p = text;
    const unit *u;
    int64_t v = 0;
    if (text == NULL || ms == NULL || !(*p >= '0' && *p <= '9')) return DQ_EINVAL;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (*p - '0');
        /* Capping per digit keeps v * 10 + 9 far from INT64_MAX. */
        if (v > DQ_DUE_MAX_MS) return DQ_EINVAL;
    }
    u = find_unit(p);
    if (u == NULL || v > DQ_DUE_MAX_MS / u->ms) return DQ_EINVAL;
    *ms = v * u->ms;
    return 0;
}
