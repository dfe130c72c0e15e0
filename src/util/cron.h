/*
 * cron.h - cron expressions and time zones as a pure helper (cron.c): the
 * parser, a zone read from the system's tz database, and the next tick of
 * an expression in a zone. No I/O but reading the zone's file, no global
 * state, no environment (TZ is never set). Unit tests: tests/unit/test_cron.c.
 */
#ifndef DQ_CRON_H
#define DQ_CRON_H

#include <stddef.h>
#include <stdint.h>

/* A parsed five-field expression: one bit per value allowed. */
typedef struct dq__cron {
    uint64_t minute;   /* bits 0..59 */
    uint32_t hour;     /* bits 0..23 */
    uint32_t mday;     /* bits 1..31 */
    uint32_t month;    /* bits 1..12 */
    uint32_t wday;     /* bits 0..6, 0 = Sunday (7 is read as 0) */
    int mday_star;     /* the day-of-month field started with '*' */
    int wday_star;     /* the day-of-week field started with '*' */
} dq__cron;

/* Parses expr: five fields (minute, hour, day of month, month, day of
 * week) of lists, ranges, steps, and month and day names (jan..dec,
 * sun..sat, any case), or @yearly, @annually, @monthly, @weekly, @daily,
 * @midnight, @hourly. Returns 0, or -1 with a message naming the bad field
 * in err (size bytes). */
int dq__cron_parse(const char *expr, dq__cron *out, char *err, size_t size);

/* A zone's UTC offsets over time. */
typedef struct dq__zone {
    size_t n;          /* transitions                                    */
    int64_t *at;       /* transition instants (UTC seconds), ascending   */
    int32_t *offset;   /* the offset (seconds east of UTC) from at[i] on */
    int32_t initial;   /* the offset before at[0] (or always, if n is 0) */
} dq__zone;

/* Loads zone name ("UTC", "Europe/Berlin": an IANA name) from the TZif
 * file dir/name (dir NULL: /usr/share/zoneinfo). Returns 0, or -1 with the
 * reason in err. Free with dq__zone_free. Offsets after the file's last
 * transition stay the last one's (the system's files run to 2037). */
int dq__zone_load(const char *dir, const char *name, dq__zone *z, char *err, size_t size);
void dq__zone_free(dq__zone *z);

/* The offset in effect at UTC second t. */
int32_t dq__zone_offset(const dq__zone *z, int64_t t);

/* The first tick of c in zone z strictly after after_ms (UTC epoch ms), in
 * ms (a whole minute), or -1 when none comes in the next 8 years.
 * A wall-clock time a spring-forward skips runs at the first instant after
 * the gap (the transition), once; a time that comes twice (fall back) runs
 * at its first occurrence only. */
int64_t dq__cron_next(const dq__cron *c, const dq__zone *z, int64_t after_ms);

#endif
