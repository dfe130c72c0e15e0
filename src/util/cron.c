/*
 * cron.c - cron expressions in a time zone, as a pure helper: the parser
 * (five fields, lists, ranges, steps, names, @macros), a zone's offsets read
 * from its TZif file, and the next tick after a given instant.
 *
 * Why TZif read here, not localtime_r/mktime under TZ: TZ is process-wide
 * state and setenv is not thread-safe, and a library must not change its
 * caller's environment. A TZif file (RFC 8536) is a list of transition
 * instants and the offsets they bring; the 64-bit (version 2+) block is all
 * this needs, with the footer's POSIX TZ rule ("EST5EDT,M3.2.0,M11.1.0")
 * written out as transitions from the table's end to 2100: "fat" files list
 * transitions to 2037, "slim" ones stop at the last change of rules.
 *
 * The next tick walks local wall-clock minutes forward from the local time
 * of the instant after which it looks, and maps each matching wall time
 * back to UTC. The rule for DST, which is what users of Vixie cron and
 * cronie know for jobs at fixed times: a wall time that a spring-forward
 * skips (02:30 on 2026-03-08 in America/New_York) runs at the first instant
 * after the gap (03:00 EDT), once however many of its times fall in the
 * gap; a wall time that comes twice (01:30 on 2026-11-01 there) runs at its
 * first occurrence only, as walking forward passes it once. (cron(8) of
 * ISC cron and cronie limits its rule to jobs at fixed times or less often
 * than hourly, and runs the others "normally", so they also run in a
 * repeated hour; here every schedule follows the one rule.) The day-of-month and
 * day-of-week fields combine as cron's do: when both are restricted (neither
 * starts with '*'), a day matching either runs.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "util.h"

/* ------------------------------------------------------------ parsing */

typedef struct field {
    const char *name;
    int lo, hi;
    const char *const *names; /* 3-letter names of lo.., or NULL */
} field;

static const char *const month_names[] = {"jan", "feb", "mar", "apr", "may", "jun", "jul",
                                          "aug", "sep", "oct", "nov", "dec", NULL};
static const char *const day_names[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat", NULL};

/* One field a line, as a cron line reads (clang-format would pack them). */
/* clang-format off */
static const field fields[5] = {
    {"minute", 0, 59, NULL},
    {"hour", 0, 23, NULL},
    {"day of month", 1, 31, NULL},
    {"month", 1, 12, month_names},
    {"day of week", 0, 7, day_names},
};
/* clang-format on */

/* A value of f at *p (digits or a name); advances *p. -1 if none. */
static int read_value(const field *f, const char **p) {
    const char *s = *p;
    if (*s >= '0' && *s <= '9') {
        int v = 0;
        while (*s >= '0' && *s <= '9' && v < 1000) v = v * 10 + (*s++ - '0');
        *p = s;
        return v;
    }
    for (int i = 0; f->names && f->names[i]; i++) {
        if (strncasecmp(s, f->names[i], 3) == 0) {
            *p = s + 3;
            return f->lo + i;
        }
    }
    return -1;
}

static int field_error(char *err, size_t size, int i, const char *text, size_t len, const char *why) {
    snprintf(err, size, "field %d (%s): '%.*s' %s", i + 1, fields[i].name, (int)len, text, why);
    return -1;
}

/* One comma-separated item of field i ([start, end)) into *bits. */
static int parse_item(int i, const char *s, const char *end, uint64_t *bits, char *err, size_t size) {
    const field *f = &fields[i];
    const char *p = s;
    int lo, hi, step = 1;
    if (*p == '*') {
        lo = f->lo, hi = f->hi, p++;
    } else {
        lo = hi = read_value(f, &p);
        if (lo < 0) return field_error(err, size, i, s, (size_t)(end - s), "is no value, range or '*'");
        if (*p == '-') {
            p++;
            hi = read_value(f, &p);
            if (hi < 0)
                return field_error(err, size, i, s, (size_t)(end - s), "has a range without an end");
        } else if (*p == '/') {
            hi = f->hi; /* "N/S": from N to the field's end */
        }
    }
    if (*p == '/') {
        p++;
        const char *q = p;
        step = read_value(&(field){"", 0, 0, NULL}, &p);
        if (step < 1 || step > f->hi - f->lo + 1 || p == q)
            return field_error(err, size, i, s, (size_t)(end - s), "has a bad step");
    }
    if (p != end) return field_error(err, size, i, s, (size_t)(end - s), "is not understood");
    if (lo < f->lo || hi > f->hi || lo > hi) {
        char why[48];
        snprintf(why, sizeof why, "is out of range %d-%d", f->lo, f->hi);
        return field_error(err, size, i, s, (size_t)(end - s), why);
    }
    for (int v = lo; v <= hi; v += step) *bits |= (uint64_t)1 << v;
    return 0;
}

static int parse_field(int i, const char *s, size_t len, uint64_t *bits, char *err, size_t size) {
    const char *end = s + len;
    *bits = 0;
    while (s < end) {
        const char *comma = memchr(s, ',', (size_t)(end - s));
        const char *e = comma ? comma : end;
        if (e == s) return field_error(err, size, i, s, 0, "(an empty list item)");
        if (parse_item(i, s, e, bits, err, size)) return -1;
        s = comma ? comma + 1 : end;
        if (comma && s == end) return field_error(err, size, i, comma, 1, "ends a list");
    }
    return 0;
}

static const struct {
    const char *name, *expr;
} macros[] = {{"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
              {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
              {"@hourly", "0 * * * *"}};

/* Whether the day fields can match a date: when either is '*', both must
 * match (day_matches), so a day of the month that no month of the month
 * field has ("0 0 30 2 *") would never tick; refused when set rather than
 * listed as ended from the start. With neither '*' either field matches,
 * and every month has every weekday. */
static int date_exists(const dq__cron *c) {
    static const int days[13] = {0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (!c->mday_star && !c->wday_star) return 1;
    for (int m = 1; m <= 12; m++)
        if (c->month >> m & 1 && c->mday & ((2u << days[m]) - 2u)) return 1;
    return 0;
}

static int no_date(const dq__cron *c, char *err, size_t size) {
    int day = 1;
    while (day < 31 && !(c->mday >> day & 1)) day++;
    snprintf(err, size,
             "field 3 (day of month): no month of field 4 has day %d, nor the other days given: "
             "it would never run",
             day);
    return -1;
}

int dq__cron_parse(const char *expr, dq__cron *out, char *err, size_t size) {
    if (expr[0] == '@') {
        for (size_t i = 0; i < sizeof macros / sizeof macros[0]; i++)
            if (strcmp(expr, macros[i].name) == 0) return dq__cron_parse(macros[i].expr, out, err, size);
        snprintf(err, size,
                 "unknown '%.20s': expected @yearly, @annually, @monthly, @weekly, @daily, "
                 "@midnight or @hourly",
                 expr);
        return -1;
    }
    const char *at[5];
    size_t len[5];
    int n = 0;
    for (const char *p = expr; *p;) {
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) break;
        const char *s = p;
        while (*p && *p != ' ' && *p != '\t') p++;
        if (n < 5) at[n] = s, len[n] = (size_t)(p - s);
        n++;
    }
    if (n != 5) {
        snprintf(err, size, "expected 5 fields (minute hour day-of-month month day-of-week), got %d", n);
        return -1;
    }
    uint64_t bits[5];
    for (int i = 0; i < 5; i++)
        if (parse_field(i, at[i], len[i], &bits[i], err, size)) return -1;
    out->minute = bits[0];
    out->hour = (uint32_t)bits[1];
    out->mday = (uint32_t)bits[2];
    out->month = (uint32_t)bits[3];
    out->wday = (uint32_t)((bits[4] | bits[4] >> 7) & 0x7f); /* 7 is Sunday too */
    out->mday_star = at[2][0] == '*';
    out->wday_star = at[4][0] == '*';
    return date_exists(out) ? 0 : no_date(out, err, size);
}

/* ------------------------------------------------------------ zones */

static int zone_name_ok(const char *name) {
    size_t n = strlen(name);
    if (n < 1 || n > 200 || name[0] == '/' || strstr(name, "..")) return 0;
    return strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/_+-") == n;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p) { return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4)); }

#define TZIF_MAX (1 << 20)

/* Reads the whole file into a malloc'ed *buf; returns its length or -1. */
static long read_file(const char *path, unsigned char **buf) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    *buf = malloc(TZIF_MAX);
    long n = 0;
    while (*buf && n < TZIF_MAX) {
        ssize_t r = read(fd, *buf + n, (size_t)(TZIF_MAX - n));
        if (r <= 0) break;
        n += r;
    }
    close(fd);
    if (!*buf) return -1;
    return n;
}

/* ------------------------------------------------------------ the footer's rule */

/* Floor division, for days and weekdays before 1970. */
static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

/* The civil date of day d since 1970-01-01 (proleptic Gregorian). */
static void civil(int64_t d, int *month, int *mday) {
    d += 719468; /* from 0000-03-01 */
    int64_t era = floor_div(d, 146097);
    int64_t doe = d - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *mday = (int)(doy - (153 * mp + 2) / 5 + 1);
    *month = (int)(mp < 10 ? mp + 3 : mp - 9);
}


/* The days from 1970-01-01 to y-m-d (proleptic Gregorian). */
static int64_t days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* [+-]hh[:mm[:ss]] at *p into *secs; advances *p. -1 if none. */
static int tz_time(const char **p, int64_t *secs) {
    const char *s = *p;
    int sign = 1;
    if (*s == '+' || *s == '-') sign = *s++ == '-' ? -1 : 1;
    if (*s < '0' || *s > '9') return -1;
    int64_t part[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) {
        if (i && *s != ':') break;
        if (i) s++;
        if (*s < '0' || *s > '9') return -1;
        while (*s >= '0' && *s <= '9' && part[i] < 1000) part[i] = part[i] * 10 + (*s++ - '0');
    }
    *secs = sign * (part[0] * 3600 + part[1] * 60 + part[2]);
    *p = s;
    return 0;
}

static int tz_name(const char **p) {
    const char *s = *p;
    if (*s == '<') {
        const char *e = strchr(s, '>');
        if (!e) return -1;
        *p = e + 1;
        return 0;
    }
    while ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z')) s++;
    if (s - *p < 3) return -1;
    *p = s;
    return 0;
}

/* A rule "Mm.w.d[/time]": its month, week (5: last), weekday, local time. */
typedef struct tz_rule {
    int month, week, wday;
    int64_t time;
} tz_rule;

static int tz_rule_parse(const char **p, tz_rule *r) {
    const char *s = *p;
    if (sscanf(s, "M%d.%d.%d", &r->month, &r->week, &r->wday) != 3 || r->month < 1 || r->month > 12 ||
        r->week < 1 || r->week > 5 || r->wday < 0 || r->wday > 6)
        return -1; /* the Jn and n forms are not read: no zone of tzdata uses them */
    s = strchr(s, '.') + 1;
    s = strchr(s, '.') + 1;
    while (*s >= '0' && *s <= '9') s++;
    r->time = 7200;
    if (*s == '/') {
        s++;
        if (tz_time(&s, &r->time) != 0) return -1;
    }
    *p = s;
    return 0;
}

/* The day (since 1970-01-01) of rule r in year y. */
static int64_t tz_rule_day(const tz_rule *r, int64_t y) {
    static const int mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int64_t first = days_from_civil(y, r->month, 1);
    int wday1 = (int)(first + 4 - floor_div(first + 4, 7) * 7);
    int64_t d = first + (r->wday - wday1 + 7) % 7 + (r->week - 1) * 7;
    int len = mdays[r->month - 1];
    if (r->month == 2 && !((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)) len = 28;
    while (d >= first + len) d -= 7;
    return d;
}

/* The years the footer's rule is written out for, after the table's end. */
#define FOOTER_YEAR_LAST 2100

/* Appends the transitions of the POSIX TZ rule footer (len bytes) after
 * the table's last one, up to FOOTER_YEAR_LAST, into z (room for cap
 * transitions). A rule it cannot read adds nothing: the last offset stays. */
static void footer_extend(dq__zone *z, const char *footer, size_t len, size_t cap) {
    char tz[256];
    if (len == 0 || len >= sizeof tz) return;
    memcpy(tz, footer, len);
    tz[len] = '\0';
    const char *p = tz;
    int64_t std, dst;
    tz_rule start, end;
    if (tz_name(&p) != 0 || tz_time(&p, &std) != 0 || *p == '\0' || tz_name(&p) != 0) return;
    std = -std; /* POSIX offsets count west of Greenwich */
    dst = std + 3600;
    if (*p != ',' && tz_time(&p, &dst) == 0) dst = -dst;
    if (*p++ != ',' || tz_rule_parse(&p, &start) != 0 || *p++ != ',' || tz_rule_parse(&p, &end) != 0 ||
        *p)
        return;
    int64_t last = z->n ? z->at[z->n - 1] : INT64_MIN;
    int64_t y0 = z->n ? 1970 + floor_div(last, 31556952) : 1970; /* about the year of the last one */
    for (int64_t y = y0 - 1; y <= FOOTER_YEAR_LAST; y++) {
        int64_t a = tz_rule_day(&start, y) * 86400 + start.time - std; /* into DST, in standard time */
        int64_t b = tz_rule_day(&end, y) * 86400 + end.time - dst;     /* out of it, in DST */
        int64_t t[2] = {a < b ? a : b, a < b ? b : a};
        int32_t o[2] = {(int32_t)(a < b ? dst : std), (int32_t)(a < b ? std : dst)};
        for (int i = 0; i < 2; i++) {
            if (t[i] <= last || z->n >= cap) continue;
            z->at[z->n] = last = t[i];
            z->offset[z->n++] = o[i];
        }
    }
}

/* ------------------------------------------------------------ TZif */

/* The 64-bit block of a TZif file of len bytes into z, and its footer's
 * rule after the table's end. */
static int tzif_parse(const unsigned char *b, long len, dq__zone *z) {
    if (len < 44 || memcmp(b, "TZif", 4) != 0 || b[4] < '2') return -1;
    uint64_t c[6];
    for (int i = 0; i < 6; i++) c[i] = be32(b + 20 + 4 * i);
    /* isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt */
    uint64_t v1 = c[3] * 5 + c[4] * 6 + c[5] + c[2] * 8 + c[1] + c[0];
    if (44 + v1 + 44 > (uint64_t)len) return -1;
    const unsigned char *h = b + 44 + v1;
    if (memcmp(h, "TZif", 4) != 0) return -1;
    for (int i = 0; i < 6; i++) c[i] = be32(h + 20 + 4 * i);
    uint64_t timecnt = c[3], typecnt = c[4];
    const unsigned char *times = h + 44, *idx = times + timecnt * 8, *types = idx + timecnt;
    const unsigned char *foot = types + typecnt * 6 + c[5] + c[2] * 12 + c[1] + c[0];
    if (typecnt < 1 || (uint64_t)(foot - b) > (uint64_t)len) return -1;
    size_t cap = (size_t)timecnt + 2 * (FOOTER_YEAR_LAST - 1970 + 2);
    z->at = calloc(cap, sizeof *z->at);
    z->offset = calloc(cap, sizeof *z->offset);
    if (!z->at || !z->offset) return -1;
    z->initial = (int32_t)be32(types);
    for (uint64_t i = 0; i < timecnt; i++) {
        if (idx[i] >= typecnt) return -1;
        z->at[i] = be64(times + 8 * i);
        z->offset[i] = (int32_t)be32(types + 6 * idx[i]);
        if (i && z->at[i] <= z->at[i - 1]) return -1;
    }
    z->n = (size_t)timecnt;
    long rest = len - (long)(foot - b);
    if (rest >= 2 && foot[0] == '\n') {
        const unsigned char *nl = memchr(foot + 1, '\n', (size_t)rest - 1);
        if (nl) footer_extend(z, (const char *)foot + 1, (size_t)(nl - foot - 1), cap);
    }
    return 0;
}

void dq__zone_free(dq__zone *z) {
    free(z->at);
    free(z->offset);
    memset(z, 0, sizeof *z);
}

int dq__zone_load(const char *dir, const char *name, dq__zone *z, char *err, size_t size) {
    memset(z, 0, sizeof *z);
    if (!zone_name_ok(name)) {
        snprintf(err, size, "zone '%.64s' is no IANA zone name (as Europe/Berlin)", name);
        return -1;
    }
    if (strcmp(name, "UTC") == 0) return 0; /* needs no tz database */
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "/usr/share/zoneinfo", name);
    unsigned char *buf = NULL;
    long len = read_file(path, &buf);
    int rc = len < 0 ? -1 : tzif_parse(buf, len, z);
    free(buf);
    if (rc) {
        dq__zone_free(z);
        snprintf(err, size, "unknown zone '%.64s' (no valid %.200s: is tzdata installed?)", name, path);
    }
    return rc;
}

/* The index of the first transition after t (z->n if none). */
static size_t first_after(const dq__zone *z, int64_t t) {
    size_t lo = 0, hi = z->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (z->at[mid] <= t) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

int32_t dq__zone_offset(const dq__zone *z, int64_t t) {
    size_t i = first_after(z, t);
    return i == 0 ? z->initial : z->offset[i - 1];
}

/* ------------------------------------------------------------ next tick */

static int day_matches(const dq__cron *c, int64_t d) {
    int month, mday;
    civil(d, &month, &mday);
    if (!(c->month >> month & 1)) return 0;
    int wday = (int)(d + 4 - floor_div(d + 4, 7) * 7); /* 1970-01-01 was a Thursday */
    int md = c->mday >> mday & 1, wd = c->wday >> wday & 1;
    return c->mday_star || c->wday_star ? md && wd : md || wd;
}

/* The UTC second of wall time w (local seconds) that comes first after
 * after_s, by the rule above; or INT64_MIN when it comes at or before. */
static int64_t resolve(const dq__zone *z, int64_t w, int64_t after_s) {
    int32_t oa = dq__zone_offset(z, w - 86400), ob = dq__zone_offset(z, w + 86400);
    int64_t best = INT64_MIN, ua = w - oa, ub = w - ob;
    int va = dq__zone_offset(z, ua) == oa, vb = dq__zone_offset(z, ub) == ob;
    if (!va && !vb) {
        /* In a gap: the transition that opened it. */
        size_t i = first_after(z, ub < ua ? ub : ua);
        return i < z->n && z->at[i] > after_s ? z->at[i] : INT64_MIN;
    }
    if (va && ua > after_s) best = ua;
    if (vb && ub > after_s && (best == INT64_MIN || ub < best)) best = ub;
    return best;
}

#define NEXT_DAYS_MAX (8 * 366)

int64_t dq__cron_next(const dq__cron *c, const dq__zone *z, int64_t after_ms) {
    int64_t after_s = floor_div(after_ms, 1000);
    int64_t local = after_s + dq__zone_offset(z, after_s);
    int64_t w0 = floor_div(local, 60) * 60 + 60;
    int64_t d0 = floor_div(w0, 86400);
    for (int64_t d = d0; d < d0 + NEXT_DAYS_MAX; d++) {
        if (!day_matches(c, d)) continue;
        for (int h = 0; h < 24; h++) {
            if (!(c->hour >> h & 1)) continue;
            for (int m = 0; m < 60; m++) {
                int64_t w = d * 86400 + h * 3600 + m * 60;
                if (!(c->minute >> m & 1) || w < w0) continue;
                int64_t u = resolve(z, w, after_s);
                if (u != INT64_MIN) return u * 1000;
            }
        }
    }
    return -1;
}
