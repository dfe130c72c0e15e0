/*
 * test_cron.c - unit tests of src/util/cron.c: the next tick of cron expressions
 * against a table of expressions, zones and instants (UTC; America/New_York
 * and Europe/Berlin across both of their 2026 DST transitions, and past
 * 2037 where the TZif footer's rule applies, Sydney's southern seasons
 * included; Asia/Tokyo, which has none), the parser's errors (each names its field), and zone
 * names refused or unknown. Needs the system's tz database (tzdata).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "util.h"

/* "2026-03-08T07:00Z" as epoch ms. */
static int64_t ms_of(const char *iso) {
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(iso, "%Y-%m-%dT%H:%MZ", &tm);
    assert_non_null(end);
    assert_int_equal(*end, '\0');
    return (int64_t)timegm(&tm) * 1000;
}

typedef struct next_case {
    const char *expr, *zone, *after, *want; /* want NULL: no tick */
} next_case;

static const next_case next_cases[] = {
    /* UTC: fields, lists, ranges, steps, names, macros */
    {"*/15 * * * *", "UTC", "2026-01-01T00:07Z", "2026-01-01T00:15Z"},
    {"0 3 * * *", "UTC", "2026-01-01T03:00Z", "2026-01-02T03:00Z"}, /* strictly after */
    {"@hourly", "UTC", "2026-01-01T10:59Z", "2026-01-01T11:00Z"},
    {"@monthly", "UTC", "2026-01-31T12:00Z", "2026-02-01T00:00Z"},
    {"@weekly", "UTC", "2026-11-27T10:00Z", "2026-11-29T00:00Z"},
    {"@daily", "UTC", "2026-11-27T10:00Z", "2026-11-28T00:00Z"},
    {"0 9 * * mon-fri", "UTC", "2026-11-27T10:00Z", "2026-11-30T09:00Z"},
    {"0 0 29 2 *", "UTC", "2026-03-01T00:00Z", "2028-02-29T00:00Z"},
    {"0 0 13 * fri", "UTC", "2026-01-01T00:00Z", "2026-01-02T00:00Z"}, /* either day field */
    {"0 0 13 * fri", "UTC", "2026-02-08T00:00Z", "2026-02-13T00:00Z"},
    {"30 4 1,15 jan,JUL *", "UTC", "2026-01-15T05:00Z", "2026-07-01T04:30Z"},
    {"5-10/5 8-9 * * *", "UTC", "2026-01-01T08:10Z", "2026-01-01T09:05Z"},
    {"0 0 * * 7", "UTC", "2026-11-27T00:00Z", "2026-11-29T00:00Z"}, /* 7 is Sunday */
    /* America/New_York, spring forward 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z) */
    {"30 2 * * *", "America/New_York", "2026-03-07T08:00Z",
     "2026-03-08T07:00Z"}, /* in the gap: its end */
    {"30 2 * * *", "America/New_York", "2026-03-08T07:00Z", "2026-03-09T06:30Z"},
    {"*/30 * * * *", "America/New_York", "2026-03-08T06:45Z", "2026-03-08T07:00Z"},
    {"*/30 * * * *", "America/New_York", "2026-03-08T07:00Z", "2026-03-08T07:30Z"}, /* once */
    {"0 3 * * *", "America/New_York", "2026-03-08T06:00Z", "2026-03-08T07:00Z"},
    {"0 12 * * *", "America/New_York", "2026-03-08T12:00Z", "2026-03-08T16:00Z"}, /* EDT now */
    /* fall back 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z): 01:30 is 05:30Z and 06:30Z */
    {"30 1 * * *", "America/New_York", "2026-11-01T04:00Z", "2026-11-01T05:30Z"}, /* the first */
    {"30 1 * * *", "America/New_York", "2026-11-01T05:30Z", "2026-11-02T06:30Z"}, /* not again */
    {"0 * * * *", "America/New_York", "2026-11-01T05:00Z", "2026-11-01T07:00Z"},
    {"*/10 * * * *", "America/New_York", "2026-11-01T06:35Z", "2026-11-01T06:40Z"}, /* set in the 2nd */
    /* Europe/Berlin: 2026-03-29 02:00 CET -> 03:00 CEST (01:00Z); 2026-10-25 03:00 CEST -> 02:00 CET (01:00Z) */
    {"30 2 * * *", "Europe/Berlin", "2026-03-28T12:00Z", "2026-03-29T01:00Z"},
    {"30 2 * * *", "Europe/Berlin", "2026-03-29T01:00Z", "2026-03-30T00:30Z"},
    {"30 2 * * *", "Europe/Berlin", "2026-10-24T12:00Z", "2026-10-25T00:30Z"},
    {"30 2 * * *", "Europe/Berlin", "2026-10-25T00:30Z", "2026-10-26T01:30Z"},
    {"0 12 * * *", "Europe/Berlin", "2026-07-01T00:00Z", "2026-07-01T10:00Z"},
    /* past the files' table (2037): the footer's rule, written out */
    {"30 2 * * *", "America/New_York", "2040-03-10T08:00Z", "2040-03-11T07:00Z"},
    {"30 1 * * *", "America/New_York", "2040-11-04T04:00Z", "2040-11-04T05:30Z"},
    {"30 2 * * *", "Europe/Berlin", "2045-03-25T12:00Z", "2045-03-26T01:00Z"},
    {"30 2 * * *", "Australia/Sydney", "2050-10-01T00:00Z", "2050-10-01T16:00Z"}, /* southern spring */
    {"30 2 * * *", "Australia/Sydney", "2050-04-02T00:00Z", "2050-04-02T15:30Z"}, /* first 02:30 */
    {"30 2 * * *", "Australia/Sydney", "2050-04-02T15:30Z", "2050-04-03T16:30Z"},
    /* Asia/Tokyo: no DST, UTC+9 all year */
    {"0 9 * * *", "Asia/Tokyo", "2026-03-07T23:00Z", "2026-03-08T00:00Z"},
    {"0 2 * * *", "Asia/Tokyo", "2026-11-01T00:00Z", "2026-11-01T17:00Z"},
};

static void test_cron_next_table(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof next_cases / sizeof next_cases[0]; i++) {
        const next_case *t = &next_cases[i];
        dq__cron c;
        dq__zone z;
        char err[200];
        if (dq__cron_parse(t->expr, &c, err, sizeof err) != 0) fail_msg("case %zu: %s", i, err);
        if (dq__zone_load(NULL, t->zone, &z, err, sizeof err) != 0) fail_msg("case %zu: %s", i, err);
        int64_t got = dq__cron_next(&c, &z, ms_of(t->after));
        int64_t want = t->want ? ms_of(t->want) : -1;
        if (got != want)
            fail_msg("case %zu: '%s' in %s after %s: got %lld, want %s (%lld)", i, t->expr, t->zone,
                     t->after, (long long)got, t->want ? t->want : "none", (long long)want);
        dq__zone_free(&z);
    }
}

/* A tick is strictly after the instant, also within its minute. */
static void test_cron_next_within_minute(void **state) {
    dq__cron c;
    dq__zone z;
    char err[200];
    (void)state;
    assert_int_equal(dq__cron_parse("* * * * *", &c, err, sizeof err), 0);
    assert_int_equal(dq__zone_load(NULL, "UTC", &z, err, sizeof err), 0);
    int64_t t = ms_of("2026-01-01T00:00Z");
    assert_int_equal(dq__cron_next(&c, &z, t - 1), t);
    assert_int_equal(dq__cron_next(&c, &z, t), t + 60000);
    assert_int_equal(dq__cron_next(&c, &z, t + 59999), t + 60000);
}

static void test_cron_parse_errors(void **state) {
    static const struct {
        const char *expr, *says;
    } bad[] = {
        {"60 * * * *", "field 1 (minute)"},
        {"* 24 * * *", "field 2 (hour)"},
        {"* * 0 * *", "field 3 (day of month)"},
        {"* * * 13 *", "field 4 (month)"},
        {"* * * * 8", "field 5 (day of week)"},
        {"* * * *", "expected 5 fields"},
        {"* * * * * *", "expected 5 fields"},
        {"*/0 * * * *", "bad step"},
        {"1,,2 * * * *", "field 1"},
        {"5-1 * * * *", "out of range"},
        {"* * * foo *", "field 4"},
        {"@often", "unknown '@often'"},
        {"1- * * * *", "field 1"},
        {"1, * * * *", "field 1"},
        {"*/61 * * * *", "bad step"},
        {"* */25 * * *", "field 2 (hour): '*/25' has a bad step"},
        {"0 0 30 2 *", "no month of field 4 has day 30"},
        {"0 0 31 4,6,9,11 *", "it would never run"},
        {"0 0 30,31 feb *", "day 30, nor the other days"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dq__cron c;
        char err[200] = "";
        if (dq__cron_parse(bad[i].expr, &c, err, sizeof err) != -1)
            fail_msg("'%s' was accepted", bad[i].expr);
        if (!strstr(err, bad[i].says))
            fail_msg("'%s': '%s' does not say '%s'", bad[i].expr, err, bad[i].says);
    }
}

/* A day field no month has is refused (above); dates that exist, if
 * rarely, are not, and with both day fields given either matches (every
 * month has a Monday). */
static void test_cron_dates_exist(void **state) {
    dq__cron c;
    char err[200];
    (void)state;
    assert_int_equal(dq__cron_parse("0 0 29 2 *", &c, err, sizeof err), 0);
    assert_int_equal(dq__cron_parse("0 0 30 2 mon", &c, err, sizeof err), 0);
    assert_int_equal(dq__cron_parse("0 0 30,31 2,4 *", &c, err, sizeof err), 0);
    assert_int_equal(dq__cron_parse("0 0 31 * *", &c, err, sizeof err), 0);
}

static void test_cron_zones(void **state) {
    dq__zone z;
    char err[200];
    (void)state;
    assert_int_equal(dq__zone_load(NULL, "Mars/Olympus_Mons", &z, err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown zone"));
    assert_int_equal(dq__zone_load(NULL, "../../etc/passwd", &z, err, sizeof err), -1);
    assert_non_null(strstr(err, "no IANA zone name"));
    assert_int_equal(dq__zone_load(NULL, "", &z, err, sizeof err), -1);
    assert_int_equal(dq__zone_load(NULL, "Europe/Berlin", &z, err, sizeof err), 0);
    assert_int_equal(dq__zone_offset(&z, ms_of("2026-01-15T12:00Z") / 1000), 3600);
    assert_int_equal(dq__zone_offset(&z, ms_of("2026-07-15T12:00Z") / 1000), 7200);
    dq__zone_free(&z);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cron_next_table),   cmocka_unit_test(test_cron_next_within_minute),
        cmocka_unit_test(test_cron_parse_errors), cmocka_unit_test(test_cron_dates_exist),
        cmocka_unit_test(test_cron_zones),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
