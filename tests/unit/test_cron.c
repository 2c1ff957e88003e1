/* Unit tests: cron parser, slot computation, time zones and DST. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "endpoints/cron.h"

/* UTC instant of a civil date-time (test oracle: glibc timegm). */
static int64_t utc(int y, int mo, int d, int h, int mi, int s)
{
    struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d,
                    .tm_hour = h, .tm_min = mi, .tm_sec = s};
    return (int64_t)timegm(&tm);
}

static struct cron_expr *must_parse(const char *text, const char *tz)
{
    char err[CRON_ERR_MAX];
    struct cron_expr *e = cron_parse(text, tz, err, sizeof err);
    if (!e) fail_msg("cron_parse(\"%s\", %s) failed: %s", text, tz ? tz : "UTC", err);
    return e;
}

/* Checks the chain of next slots after `after`. */
static void expect_chain(const char *text, const char *tz, int64_t after, const int64_t *want, size_t n)
{
    struct cron_expr *e = must_parse(text, tz);
    int64_t t = after;
    for (size_t i = 0; i < n; i++) {
        int64_t got = cron_next(e, t);
        if (got != want[i]) {
            char g[40], w[40];
            cron_format_time(e, got, g, sizeof g);
            cron_format_time(e, want[i], w, sizeof w);
            fail_msg("\"%s\" (%s) step %zu after %lld: got %lld (%s), want %lld (%s)", text,
                     tz ? tz : "UTC", i, (long long)t, (long long)got, g, (long long)want[i], w);
        }
        t = got;
    }
    cron_free(e);
}
#define CHAIN(text, tz, after, ...)                                                   \
    do {                                                                              \
        const int64_t w_[] = {__VA_ARGS__};                                           \
        expect_chain(text, tz, after, w_, sizeof w_ / sizeof w_[0]);                  \
    } while (0)

static void expect_error(const char *text, const char *tz, const char *want1, const char *want2)
{
    char err[CRON_ERR_MAX] = "";
    struct cron_expr *e = cron_parse(text, tz, err, sizeof err);
    if (e) {
        cron_free(e);
        fail_msg("\"%s\" was accepted, expected an error containing \"%s\"", text, want1);
    }
    if (!strstr(err, want1) || (want2 && !strstr(err, want2)))
        fail_msg("\"%s\": error \"%s\" lacks \"%s\"%s%s", text, err, want1, want2 ? " / " : "",
                 want2 ? want2 : "");
}

static void test_accepts(void **state)
{
    (void)state;
    static const char *const ok[] = {
        "* * * * * *", "0 0 0 * * *", "*/7 * * * * *", "10-40/5 * * * * *", "5/15 * * * * *",
        "0,15,30,45 * * * * *", "0 0 9 * JAN-MAR mon-FRI", "0 0 0 ? * SUN",
        "  0   0  0 1 1 *  ", "0 0 0 29 2 *", "0 0 0 * * 7", "0 0 0 * * 0-7", "@daily", "@HOURLY", "@weekly",
        "@monthly", "@yearly", "@annually", "@midnight", "@every 1s", "@every 90", "@every 5m",
        "@every 1h", "@every 1h30m", "@every 2d", NULL,
    };
    for (size_t i = 0; ok[i]; i++) {
        cron_free(must_parse(ok[i], NULL));
    }
    cron_free(must_parse("0 0 0 * * *", "Europe/Berlin"));
    cron_free(must_parse("0 0 0 * * *", "America/New_York"));
    cron_free(must_parse("0 0 0 * * *", "UTC"));
}

static void test_rejects_with_field_and_token(void **state)
{
    (void)state;
    expect_error("* * * * *", NULL, "expected 6 fields", "got 5");
    expect_error("* * * * * * *", NULL, "expected 6 fields", "got 7");
    expect_error("", NULL, "expected 6 fields", "got 0");
    expect_error("60 * * * * *", NULL, "second field", "\"60\": value 60 out of range 0-59");
    expect_error("* 60 * * * *", NULL, "minute field", "\"60\"");
    expect_error("* * 24 * * *", NULL, "hour field", "out of range 0-23");
    expect_error("* * * 0 * *", NULL, "day-of-month field", "out of range 1-31");
    expect_error("* * * 32 * *", NULL, "day-of-month field", "\"32\"");
    expect_error("* * * * 13 *", NULL, "month field", "out of range 1-12");
    expect_error("* * * * FOO *", NULL, "month field", "\"FOO\"");
    expect_error("* * * * JANUARY *", NULL, "month field", "\"JANUARY\"");
    expect_error("* * * * * 8", NULL, "day-of-week field", "out of range 0-7");
    expect_error("* * * * * MOO", NULL, "day-of-week field", "\"MOO\"");
    expect_error("*/0 * * * * *", NULL, "second field", "step 0 out of range");
    expect_error("*/61 * * * * *", NULL, "second field", "step 61 out of range 1-60");
    expect_error("*/ * * * * *", NULL, "second field", "expected a step number");
    expect_error("5-1 * * * * *", NULL, "second field", "range start 5 is after its end 1");
    expect_error("* * * * * FRI-MON", NULL, "day-of-week field", "range start 5 is after its end 1");
    expect_error("1,,2 * * * * *", NULL, "second field", "empty list item");
    expect_error("1, * * * * *", NULL, "second field", "empty list item");
    expect_error("? * * * * *", NULL, "second field", "'?' is only allowed");
    expect_error("a * * * * *", NULL, "second field", "expected a number 0-59");
    expect_error("1-2-3 * * * * *", NULL, "second field", "unexpected '-'");
    expect_error("* * * * JAN- *", NULL, "month field", "\"JAN-\"");
    expect_error("0 0 0 30 2 *", NULL, "never matches", NULL);
    expect_error("0 0 0 31 4,6,9,11 *", NULL, "never matches", NULL);
    expect_error("@every", NULL, "@every needs a duration", NULL);
    expect_error("@every 0s", NULL, "bad duration \"0s\"", NULL);
    expect_error("@every 5x", NULL, "bad duration \"5x\"", NULL);
    expect_error("@every 1m30", NULL, "bad duration \"1m30\"", NULL);
    expect_error("@every -5s", NULL, "bad duration", NULL);
    expect_error("@every 400d", NULL, "bad duration", NULL);
    expect_error("@fortnightly", NULL, "unknown macro \"@fortnightly\"", NULL);
    expect_error("@daily 5", NULL, "unknown macro", NULL);
    expect_error("0 0 0 * * *", "Mars/Olympus_Mons", "time zone \"Mars/Olympus_Mons\"", "cannot open");
    expect_error("0 0 0 * * *", "../../etc/passwd", "not a zone name", NULL);
    expect_error("0 0 0 * * *", "/etc/passwd", "not a zone name", NULL);
    expect_error("0 0 0 * * *", "zone.tab", "not a zone name", NULL);
    expect_error("0 0 0 * * *", "Europe", "time zone \"Europe\"", NULL); /* a directory */

    char msg[CRON_ERR_MAX];
    assert_int_equal(cron_zone_check("UTC", msg, sizeof msg), 0);
    assert_int_equal(cron_zone_check("Asia/Tokyo", msg, sizeof msg), 0);
    assert_int_equal(cron_zone_check("Nowhere/City", msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "Nowhere/City"));
}

static void test_step_across_minute(void **state)
{
    (void)state;
    /* 0,7,...,56 then 0 of the next minute */
    CHAIN("*/7 * * * * *", NULL, utc(2026, 12, 2, 12, 0, 49), utc(2026, 12, 2, 12, 0, 56),
          utc(2026, 12, 2, 12, 1, 0), utc(2026, 12, 2, 12, 1, 7));
    CHAIN("*/7 * * * * *", NULL, utc(2026, 12, 31, 23, 59, 56), utc(2027, 1, 1, 0, 0, 0));
    CHAIN("10-40/15 * * * * *", NULL, utc(2026, 1, 1, 0, 0, 0), utc(2026, 1, 1, 0, 0, 10),
          utc(2026, 1, 1, 0, 0, 25), utc(2026, 1, 1, 0, 0, 40), utc(2026, 1, 1, 0, 1, 10));
    CHAIN("50/5 * * * * *", NULL, utc(2026, 1, 1, 0, 0, 0), utc(2026, 1, 1, 0, 0, 50),
          utc(2026, 1, 1, 0, 0, 55), utc(2026, 1, 1, 0, 1, 50));
    /* every second: strictly after */
    CHAIN("* * * * * *", NULL, 1000, 1001, 1002, 1003);
    CHAIN("0 */20 * * * *", NULL, utc(2026, 1, 1, 0, 40, 0), utc(2026, 1, 1, 1, 0, 0));
}

static void test_month_ends_and_leap_day(void **state)
{
    (void)state;
    /* the 31st: February, April are skipped */
    CHAIN("0 0 0 31 * *", NULL, utc(2026, 1, 31, 0, 0, 0), utc(2026, 3, 31, 0, 0, 0),
          utc(2026, 5, 31, 0, 0, 0), utc(2026, 7, 31, 0, 0, 0), utc(2026, 8, 31, 0, 0, 0),
          utc(2026, 10, 31, 0, 0, 0));
    CHAIN("0 0 0 30 * *", NULL, utc(2026, 1, 30, 0, 0, 0), utc(2026, 3, 30, 0, 0, 0));
    /* Feb 29 only on leap years; 2100 is not one */
    CHAIN("0 0 12 29 2 *", NULL, utc(2025, 1, 1, 0, 0, 0), utc(2028, 2, 29, 12, 0, 0),
          utc(2032, 2, 29, 12, 0, 0));
    CHAIN("0 0 12 29 FEB *", NULL, utc(2097, 1, 1, 0, 0, 0), utc(2104, 2, 29, 12, 0, 0));
}

static void test_dom_dow_semantics(void **state)
{
    (void)state;
    /* both restricted: OR. 2026-01-02 is a Friday, the 13th a Tuesday. */
    CHAIN("0 0 0 13 * FRI", NULL, utc(2026, 1, 1, 0, 0, 0), utc(2026, 1, 2, 0, 0, 0),
          utc(2026, 1, 9, 0, 0, 0), utc(2026, 1, 13, 0, 0, 0), utc(2026, 1, 16, 0, 0, 0));
    /* dom unrestricted: only the weekday */
    CHAIN("0 0 0 * * FRI", NULL, utc(2026, 1, 2, 0, 0, 0), utc(2026, 1, 9, 0, 0, 0),
          utc(2026, 1, 16, 0, 0, 0));
    CHAIN("0 0 0 ? * 5", NULL, utc(2026, 1, 2, 0, 0, 0), utc(2026, 1, 9, 0, 0, 0));
    /* dow unrestricted: only the day of month */
    CHAIN("0 0 0 13 * *", NULL, utc(2026, 1, 1, 0, 0, 0), utc(2026, 1, 13, 0, 0, 0),
          utc(2026, 2, 13, 0, 0, 0));
    /* a field beginning with '*' counts as unrestricted (Vixie): AND.
     * Mondays of Jan 2026: 5, 12, 19, 26; odd days among them: 5, 19. */
    CHAIN("0 0 0 */2 * MON", NULL, utc(2026, 1, 1, 0, 0, 0), utc(2026, 1, 5, 0, 0, 0),
          utc(2026, 1, 19, 0, 0, 0));
}

static void test_names_and_sunday(void **state)
{
    (void)state;
    /* 2026-01-30 is a Friday: next working day in JAN or JUL is 2026-07-01 (Wed) */
    CHAIN("0 0 9 * JAN,jul Mon-Fri", NULL, utc(2026, 1, 30, 9, 0, 0), utc(2026, 7, 1, 9, 0, 0),
          utc(2026, 7, 2, 9, 0, 0), utc(2026, 7, 3, 9, 0, 0), utc(2026, 7, 6, 9, 0, 0));
    /* 7, 0 and SUN are all Sunday; 2026-01-04 is a Sunday */
    const char *sundays[] = {"0 0 0 * * 7", "0 0 0 * * 0", "0 0 0 * * sun", "0 0 0 * * SUN-SUN",
                             "0 0 0 * * SAT-SUN"};
    for (size_t i = 0; i < 4; i++)
        CHAIN(sundays[i], NULL, utc(2026, 1, 1, 0, 0, 0), utc(2026, 1, 4, 0, 0, 0),
              utc(2026, 1, 11, 0, 0, 0));
    /* SAT-SUN is 6-7: Saturday and Sunday */
    CHAIN(sundays[4], NULL, utc(2026, 1, 1, 0, 0, 0), utc(2026, 1, 3, 0, 0, 0),
          utc(2026, 1, 4, 0, 0, 0), utc(2026, 1, 10, 0, 0, 0));
}

static void test_macros(void **state)
{
    (void)state;
    int64_t t0 = utc(2026, 5, 17, 13, 14, 15); /* a Sunday */
    CHAIN("@daily", NULL, t0, utc(2026, 5, 18, 0, 0, 0), utc(2026, 5, 19, 0, 0, 0));
    CHAIN("@hourly", NULL, t0, utc(2026, 5, 17, 14, 0, 0), utc(2026, 5, 17, 15, 0, 0));
    CHAIN("@weekly", NULL, t0, utc(2026, 5, 24, 0, 0, 0), utc(2026, 5, 31, 0, 0, 0));
    CHAIN("@monthly", NULL, t0, utc(2026, 6, 1, 0, 0, 0), utc(2026, 7, 1, 0, 0, 0));
    CHAIN("@yearly", NULL, t0, utc(2027, 1, 1, 0, 0, 0), utc(2028, 1, 1, 0, 0, 0));
    CHAIN("@daily", "Asia/Tokyo", t0, utc(2026, 5, 17, 15, 0, 0), utc(2026, 5, 18, 15, 0, 0));
}

static void test_every_aligned_to_epoch(void **state)
{
    (void)state;
    CHAIN("@every 7s", NULL, 100, 105, 112, 119);
    CHAIN("@every 7", NULL, 104, 105);
    CHAIN("@every 5m", NULL, 1000, 1200, 1500);
    CHAIN("@every 1h30m", NULL, 0, 5400, 10800);
    /* independent of the zone and of where the replica starts */
    CHAIN("@every 10s", "America/New_York", 1733148003, 1733148010, 1733148020);
    struct cron_expr *e = must_parse("@every 1h", "Europe/Berlin");
    assert_int_equal(cron_every_seconds(e), 3600);
    for (int64_t t = 1700000000; t < 1700000000 + 20000; t += 997) {
        int64_t n = cron_next(e, t);
        assert_true(n > t && n - t <= 3600 && n % 3600 == 0);
    }
    cron_free(e);
}

static void test_dst_berlin(void **state)
{
    (void)state;
    /* 2026: CET->CEST on 29 Mar at 01:00Z (02:00 -> 03:00 local);
     *       CEST->CET on 25 Oct at 01:00Z (03:00 -> 02:00 local). */
    int64_t spring = utc(2026, 3, 29, 1, 0, 0), fall = utc(2026, 10, 25, 1, 0, 0);
    /* 02:30 does not exist on 29 Mar: fires at the transition */
    CHAIN("0 30 2 * * *", "Europe/Berlin", utc(2026, 3, 28, 12, 0, 0), spring,
          utc(2026, 3, 30, 0, 30, 0));
    /* 03:00 exists once (the same instant as the transition) */
    CHAIN("0 0 3 * * *", "Europe/Berlin", utc(2026, 3, 28, 12, 0, 0), spring, utc(2026, 3, 30, 1, 0, 0));
    /* every second goes straight through the gap */
    CHAIN("* * * * * *", "Europe/Berlin", spring - 2, spring - 1, spring, spring + 1);
    /* 02:30 occurs twice on 25 Oct: fires at the first occurrence only */
    CHAIN("0 30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12, 0, 0), utc(2026, 10, 25, 0, 30, 0),
          utc(2026, 10, 26, 1, 30, 0));
    /* hourly (hour field '*') fires every real hour, both passes of 02:00 */
    CHAIN("0 0 * * * *", "Europe/Berlin", utc(2026, 10, 24, 23, 30, 0), utc(2026, 10, 25, 0, 0, 0),
          fall, utc(2026, 10, 25, 2, 0, 0));
    CHAIN("0 */30 * * * *", "Europe/Berlin", fall - 1800 - 1, fall - 1800, fall, fall + 1800);
    /* every second through the repeated hour: continuous */
    CHAIN("* * * * * *", "Europe/Berlin", fall - 2, fall - 1, fall, fall + 1);
    /* offsets and formatting */
    struct cron_expr *e = must_parse("@daily", "Europe/Berlin");
    assert_int_equal(cron_utc_offset(e, spring - 1), 3600);
    assert_int_equal(cron_utc_offset(e, spring), 7200);
    assert_int_equal(cron_utc_offset(e, fall - 1), 7200);
    assert_int_equal(cron_utc_offset(e, fall), 3600);
    char buf[40];
    cron_format_time(e, spring, buf, sizeof buf);
    assert_string_equal(buf, "2026-03-29T03:00:00+02:00");
    cron_format_time(e, fall, buf, sizeof buf);
    assert_string_equal(buf, "2026-10-25T02:00:00+01:00");
    assert_string_equal(cron_zone_name(e), "Europe/Berlin");
    cron_free(e);
    e = must_parse("@daily", NULL);
    cron_format_time(e, utc(2026, 12, 2, 14, 0, 0), buf, sizeof buf);
    assert_string_equal(buf, "2026-12-02T14:00:00Z");
    assert_string_equal(cron_zone_name(e), "UTC");
    cron_free(e);
    /* @daily in Berlin: local midnight, 23 h and 25 h days included */
    CHAIN("@daily", "Europe/Berlin", utc(2026, 3, 28, 12, 0, 0), utc(2026, 3, 28, 23, 0, 0),
          utc(2026, 3, 29, 22, 0, 0));
}

static void test_dst_new_york_and_far_future(void **state)
{
    (void)state;
    /* 2026: EST->EDT on 8 Mar at 07:00Z (02:00 -> 03:00); back on 1 Nov at 06:00Z */
    int64_t spring = utc(2026, 3, 8, 7, 0, 0), fall = utc(2026, 11, 1, 6, 0, 0);
    CHAIN("0 */15 * * * *", "America/New_York", spring - 900 - 1, spring - 900, spring, spring + 900);
    CHAIN("0 15 2 * * *", "America/New_York", utc(2026, 3, 7, 12, 0, 0), spring,
          utc(2026, 3, 9, 6, 15, 0));
    CHAIN("0 30 1 * * *", "America/New_York", utc(2026, 10, 31, 12, 0, 0), fall - 1800,
          utc(2026, 11, 2, 6, 30, 0));
    /* past the last TZif transition the POSIX footer rule applies (2080:
     * second Sunday of March is the 10th) */
    CHAIN("0 0 12 * * *", "America/New_York", utc(2080, 3, 9, 12, 0, 0), utc(2080, 3, 9, 17, 0, 0),
          utc(2080, 3, 10, 16, 0, 0));
    /* southern hemisphere (DST across the new year): Sydney 2026-01-01 is AEDT +11 */
    CHAIN("@daily", "Australia/Sydney", utc(2026, 1, 1, 0, 0, 0), utc(2026, 1, 1, 13, 0, 0));
    CHAIN("@daily", "Australia/Sydney", utc(2090, 7, 1, 0, 0, 0), utc(2090, 7, 1, 14, 0, 0));
}

/* The zone reader against glibc's (single-threaded test: setenv is fine here). */
static void test_offsets_match_libc(void **state)
{
    (void)state;
    const char *zones[] = {"Europe/Berlin", "America/New_York", "Australia/Sydney", "Asia/Kolkata",
                           "America/Sao_Paulo", "Pacific/Chatham", "Europe/London", "Africa/Casablanca"};
    char *old = getenv("TZ") ? strdup(getenv("TZ")) : NULL;
    uint64_t x = 88172645463325252ULL;
    int checked = 0;
    for (size_t z = 0; z < sizeof zones / sizeof zones[0]; z++) {
        struct cron_expr *e = must_parse("@daily", zones[z]);
        setenv("TZ", zones[z], 1);
        tzset();
        for (int i = 0; i < 3000; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            int64_t t = 0 + (int64_t)(x % (uint64_t)(utc(2120, 1, 1, 0, 0, 0)));
            time_t tt = (time_t)t;
            struct tm tm;
            localtime_r(&tt, &tm);
            if (cron_utc_offset(e, t) != tm.tm_gmtoff)
                fail_msg("%s at %lld: offset %d, libc %ld", zones[z], (long long)t, cron_utc_offset(e, t),
                         tm.tm_gmtoff);
            checked++;
        }
        cron_free(e);
    }
    if (old) {
        setenv("TZ", old, 1);
        free(old);
    } else {
        unsetenv("TZ");
    }
    tzset();
    print_message("offsets checked against libc: %d\n", checked);
}

/* Brute force over every second around DST transitions, with glibc's
 * localtime as the clock and the same expression in UTC as the field
 * matcher: the documented rules (gap -> fires at the transition; second
 * pass of an overlap only with hour '*') must give exactly cron_next's chain. */
static bool civil_matches(const struct cron_expr *eu, int64_t L)
{
    return cron_next(eu, L - 1) == L;
}

static long libc_off(int64_t t)
{
    time_t tt = (time_t)t;
    struct tm tm;
    localtime_r(&tt, &tm);
    return tm.tm_gmtoff;
}

static void test_dst_brute_force(void **state)
{
    (void)state;
    const char *zones[] = {"Europe/Berlin", "America/New_York", "Australia/Sydney", "Asia/Tehran"};
    /* around spring and fall transitions of 2026 and 2050 (the latter from
     * the POSIX rule); windows of 3 h on either side */
    const char *exprs[] = {"0 30 2 * * *", "0 */15 * * * *", "0 0 * * * *", "30 59 1 * * *",
                           "0 0 2,3 * * *", "0 59 2 * * *", "*/20 30 * * * *", "0 0 0 * * *"};
    char *old = getenv("TZ") ? strdup(getenv("TZ")) : NULL;
    long fired = 0, windows = 0;
    for (size_t z = 0; z < sizeof zones / sizeof zones[0]; z++) {
        setenv("TZ", zones[z], 1);
        tzset();
        /* find the transitions of 2026 and 2050 by scanning hourly */
        int64_t trans[8];
        int nt = 0;
        int years[2] = {2026, 2050};
        for (int yi = 0; yi < 2; yi++)
            for (int64_t t = utc(years[yi], 1, 1, 0, 0, 0); t < utc(years[yi] + 1, 1, 1, 0, 0, 0) && nt < 8;
                 t += 3600)
                if (libc_off(t) != libc_off(t + 3600)) {
                    int64_t lo = t, hi = t + 3600;
                    while (hi - lo > 1) {
                        int64_t mid = (lo + hi) / 2;
                        if (libc_off(mid) == libc_off(t)) lo = mid;
                        else hi = mid;
                    }
                    trans[nt++] = hi;
                }
        if (strcmp(zones[z], "Asia/Tehran") != 0) assert_int_equal(nt, 4);
        for (size_t x = 0; x < sizeof exprs / sizeof exprs[0]; x++) {
            struct cron_expr *e = must_parse(exprs[x], zones[z]);
            struct cron_expr *eu = must_parse(exprs[x], NULL);
            char f[3][16];
            assert_int_equal(sscanf(exprs[x], "%15s %15s %15s", f[0], f[1], f[2]), 3);
            bool hour_star = f[2][0] == '*';
            for (int k = 0; k < nt; k++) {
                int64_t from = trans[k] - 3 * 3600, to = trans[k] + 3 * 3600;
                int64_t got = cron_next(e, from);
                windows++;
                /* one transition per window: the offset is ob before it, oa from it on */
                long ob = libc_off(trans[k] - 1), oa = libc_off(trans[k]);
                assert_int_equal(libc_off(from), ob);
                assert_int_equal(libc_off(to), oa);
                for (int64_t u = from + 1; u <= to; u++) {
                    long o = u < trans[k] ? ob : oa;
                    bool fire = false;
                    if (civil_matches(eu, u + o)) {
                        fire = true;
                        /* second pass of a fall-back overlap: the same local
                         * time was already reached before the transition */
                        if (u >= trans[k] && ob > oa && u + oa < trans[k] + ob && !hour_star) fire = false;
                    }
                    if (!fire && u == trans[k] && oa > ob) { /* spring-forward gap [T+ob, T+oa) */
                        int64_t n = cron_next(eu, u + ob - 1);
                        if (n >= 0 && n < u + oa) fire = true;
                    }
                    if (!fire) continue;
                    fired++;
                    if (got != u)
                        fail_msg("%s \"%s\": brute force fires at %lld, cron_next gives %lld (window %d)",
                                 zones[z], exprs[x], (long long)u, (long long)got, k);
                    got = cron_next(e, u);
                }
                if (got <= to)
                    fail_msg("%s \"%s\": cron_next gives %lld, brute force has nothing until %lld",
                             zones[z], exprs[x], (long long)got, (long long)to);
            }
            cron_free(e);
            cron_free(eu);
        }
    }
    if (old) {
        setenv("TZ", old, 1);
        free(old);
    } else {
        unsetenv("TZ");
    }
    tzset();
    print_message("DST brute force: %ld windows, %ld slots agree\n", windows, fired);
}

static void test_latest_and_skipped(void **state)
{
    (void)state;
    struct cron_expr *e = must_parse("* * * * * *", NULL);
    int64_t skipped = -1;
    assert_int_equal(cron_latest(e, 100, 110, &skipped, 1000), 110);
    assert_int_equal(skipped, 9);
    assert_int_equal(cron_latest(e, 100, 101, &skipped, 1000), 101);
    assert_int_equal(skipped, 0);
    assert_int_equal(cron_latest(e, 100, 100, &skipped, 1000), -1);
    /* more than the cap: still the exact latest slot */
    assert_int_equal(cron_latest(e, 100, 100 + 86400, &skipped, 500), 100 + 86400);
    assert_int_equal(skipped, 500);
    cron_free(e);

    e = must_parse("0 0 0 * * *", NULL);
    int64_t d0 = utc(2026, 1, 1, 0, 0, 0);
    assert_int_equal(cron_latest(e, d0, d0 + 3 * 86400 + 5, &skipped, 1000), d0 + 3 * 86400);
    assert_int_equal(skipped, 2);
    assert_int_equal(cron_latest(e, d0, d0 + 86399, &skipped, 1000), -1);
    assert_int_equal(cron_latest(e, d0, d0 + 400 * 86400, &skipped, 10), d0 + 400 * 86400);
    assert_int_equal(skipped, 10);
    cron_free(e);

    e = must_parse("@every 15s", NULL);
    assert_int_equal(cron_latest(e, 30, 100, &skipped, 1000), 90);
    assert_int_equal(skipped, 3); /* 45, 60, 75 */
    assert_int_equal(cron_latest(e, 30, 44, &skipped, 1000), -1);
    cron_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts),
        cmocka_unit_test(test_rejects_with_field_and_token),
        cmocka_unit_test(test_step_across_minute),
        cmocka_unit_test(test_month_ends_and_leap_day),
        cmocka_unit_test(test_dom_dow_semantics),
        cmocka_unit_test(test_names_and_sunday),
        cmocka_unit_test(test_macros),
        cmocka_unit_test(test_every_aligned_to_epoch),
        cmocka_unit_test(test_dst_berlin),
        cmocka_unit_test(test_dst_new_york_and_far_future),
        cmocka_unit_test(test_offsets_match_libc),
        cmocka_unit_test(test_dst_brute_force),
        cmocka_unit_test(test_latest_and_skipped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
