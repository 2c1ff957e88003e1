/* Unit tests: util helpers (tokens, jitter, backoff, clocks, sleeping) and
 * the log rate limiter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "common/log.h"
#include "common/util.h"

static void test_token_format_and_uniqueness(void **state)
{
    (void)state;
    enum { N = 2000 };
    char (*toks)[RANDOM_TOKEN_LEN] = calloc(N, RANDOM_TOKEN_LEN);
    assert_non_null(toks);
    for (int i = 0; i < N; i++) {
        assert_int_equal(random_token(toks[i]), 0);
        assert_int_equal(strlen(toks[i]), 32);
        assert_int_equal(strspn(toks[i], "0123456789abcdef"), 32);
    }
    qsort(toks, N, RANDOM_TOKEN_LEN, (int (*)(const void *, const void *))strcmp);
    for (int i = 1; i < N; i++) assert_int_not_equal(strcmp(toks[i - 1], toks[i]), 0);
    free(toks);
    unsigned char a[64] = {0}, b[64] = {0};
    assert_int_equal(random_bytes(a, sizeof a), 0);
    assert_int_equal(random_bytes(b, sizeof b), 0);
    assert_memory_not_equal(a, b, sizeof a);
}

static void test_jitter_range(void **state)
{
    (void)state;
    assert_int_equal(random_jitter(0), 0);
    assert_int_equal(random_jitter(1), 0);
    int seen[10] = {0};
    for (int i = 0; i < 10000; i++) {
        uint32_t r = random_jitter(10);
        assert_true(r < 10);
        seen[r]++;
    }
    for (int i = 0; i < 10; i++) assert_true(seen[i] > 700); /* ~1000 each */
}

static void test_backoff_bounds(void **state)
{
    (void)state;
    for (unsigned attempt = 0; attempt < 100; attempt++) {
        int64_t ideal = 100;
        for (unsigned i = 0; i < attempt && ideal < 5000; i++) ideal *= 2;
        if (ideal > 5000) ideal = 5000;
        int64_t lo = INT64_MAX, hi = 0;
        for (int k = 0; k < 200; k++) {
            int64_t d = backoff_ms(attempt, 100, 5000);
            assert_true(d >= ideal / 2);
            assert_true(d <= ideal);
            if (d < lo) lo = d;
            if (d > hi) hi = d;
        }
        assert_true(hi > lo); /* jittered */
        if (attempt < 3 || attempt == 99)
            printf("attempt %u: ideal %lld ms, observed %lld..%lld\n", attempt, (long long)ideal,
                   (long long)lo, (long long)hi);
    }
    /* degenerate inputs stay sane */
    assert_true(backoff_ms(0, 0, 0) >= 1);
    int64_t big = backoff_ms(4000000000u, 1000, INT64_MAX / 4);
    assert_true(big >= INT64_MAX / 16 && big <= INT64_MAX / 4);
}

static void test_clocks_and_format(void **state)
{
    (void)state;
    char buf[32];
    clock_format_rfc3339(1796220000123LL, buf, sizeof buf);
    assert_string_equal(buf, "2026-12-02T14:00:00.123Z");
    clock_format_rfc3339(0, buf, sizeof buf);
    assert_string_equal(buf, "1970-01-01T00:00:00.000Z");
    clock_format_rfc3339(951782400999LL, buf, sizeof buf); /* leap day 2000 */
    assert_string_equal(buf, "2000-02-29T00:00:00.999Z");
    clock_format_rfc3339(951782400999LL + 1, buf, sizeof buf); /* next second, cache */
    assert_string_equal(buf, "2000-02-29T00:00:01.000Z");
    clock_format_rfc3339(-1, buf, sizeof buf);
    assert_string_equal(buf, "1969-12-31T23:59:59.999Z");
    char small[5];
    clock_format_rfc3339(1796220000123LL, small, sizeof small); /* truncated, terminated */
    assert_string_equal(small, "2026");
    int64_t w = clock_wall_ms();
    assert_true(w > 1700000000000LL);
    int64_t a = clock_mono_us(), b = clock_mono_us();
    assert_true(b >= a);
    assert_true(llabs(clock_mono_ms() - b / 1000) < 1000);
}

static atomic_bool cancel_flag;
static void *set_cancel(void *arg)
{
    (void)arg;
    sleep_ms_cancellable(100, NULL);
    atomic_store(&cancel_flag, true);
    return NULL;
}

static void test_sleep_cancellable(void **state)
{
    (void)state;
    int64_t t0 = clock_mono_ms();
    assert_false(sleep_ms_cancellable(120, NULL));
    int64_t el = clock_mono_ms() - t0;
    assert_true(el >= 120 && el < 2000);
    atomic_store(&cancel_flag, false);
    pthread_t t;
    pthread_create(&t, NULL, set_cancel, NULL);
    t0 = clock_mono_ms();
    assert_true(sleep_ms_cancellable(10000, &cancel_flag));
    el = clock_mono_ms() - t0;
    pthread_join(t, NULL);
    printf("cancelled 10 s sleep after %lld ms (cancel at 100 ms)\n", (long long)el);
    assert_true(el >= 90 && el < 2000);
    /* already cancelled: returns at once */
    assert_true(sleep_ms_cancellable(10000, &cancel_flag));
    assert_false(sleep_ms_cancellable(0, NULL));
}

static void test_alloc_and_hostname(void **state)
{
    (void)state;
    char *s = xstrdup("abc");
    assert_string_equal(s, "abc");
    free(s);
    assert_null(xstrdup(NULL));
    int *p = xcalloc(4, sizeof *p);
    assert_int_equal(p[3], 0);
    p = xrealloc(p, 100 * sizeof *p);
    p[99] = 1;
    free(p);
    free(xmalloc(0));
    const char *h = util_hostname();
    assert_non_null(h);
    assert_true(strlen(h) > 0);
    assert_ptr_equal(h, util_hostname());
}

static void test_log_levels_and_ratelimit(void **state)
{
    (void)state;
    enum log_level l;
    assert_int_equal(log_level_parse("debug", &l), 0);
    assert_int_equal(l, LOG_DEBUG);
    assert_int_equal(log_level_parse("WARN", &l), 0);
    assert_int_equal(l, LOG_WARN);
    assert_int_equal(log_level_parse("verbose", &l), -1);
    assert_string_equal(log_level_name(LOG_ERROR), "error");
    log_set_level(LOG_WARN);
    assert_true(log_enabled(LOG_ERROR));
    assert_true(log_enabled(LOG_WARN));
    assert_false(log_enabled(LOG_INFO));
    assert_int_equal(log_get_level(), LOG_WARN);
    log_set_level(LOG_INFO);

    struct ratelimit rl = {0};
    long long sup = -1;
    assert_true(ratelimit_ok(&rl, 200, &sup));
    assert_int_equal(sup, 0);
    for (int i = 0; i < 50; i++) assert_false(ratelimit_ok(&rl, 200, &sup));
    sleep_ms_cancellable(220, NULL);
    assert_true(ratelimit_ok(&rl, 200, &sup));
    assert_int_equal(sup, 50);
}

static void test_host_parse(void **state)
{
    (void)state;
    struct net_host hp;
    char err[512], out[300];
    struct {
        const char *spec;
        const char *host;
        int port;
        const char *shown;
    } ok[] = {
        { "127.0.0.1", "127.0.0.1", 5672, "127.0.0.1:5672" },
        { "127.0.0.1:5673", "127.0.0.1", 5673, "127.0.0.1:5673" },
        { "rabbit-2.example", "rabbit-2.example", 5672, "rabbit-2.example:5672" },
        { "rabbit-2.example:1", "rabbit-2.example", 1, "rabbit-2.example:1" },
        { "h:65535", "h", 65535, "h:65535" },
        { "[::1]", "::1", 5672, "[::1]:5672" },
        { "[::1]:5673", "::1", 5673, "[::1]:5673" },
        { "[fe80::1%eth0]:5671", "fe80::1%eth0", 5671, "[fe80::1%eth0]:5671" },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        err[0] = '\0';
        if (net_host_parse(ok[i].spec, 5672, &hp, err, sizeof err) != 0)
            fail_msg("\"%s\" refused: %s", ok[i].spec, err);
        assert_string_equal(hp.host, ok[i].host);
        assert_int_equal(hp.port, ok[i].port);
        net_host_format(&hp, out, sizeof out);
        assert_string_equal(out, ok[i].shown);
    }
    struct {
        const char *spec;
        const char *why;
    } bad[] = {
        { "", "empty" },
        { ":5672", "no host" },
        { "[]:5672", "no host" },
        { "h:", "port must be 1..65535" },
        { "h:0", "port must be 1..65535" },
        { "h:65536", "port must be 1..65535" },
        { "h:-1", "port must be 1..65535" },
        { "h:+5", "port must be 1..65535" },
        { "h:56x", "port must be 1..65535" },
        { "h: 56", "port must be 1..65535" },
        { "::1", "brackets" },
        { "::1:5672", "brackets" },
        { "[::1", "missing ']'" },
        { "[::1]5672", "\":port\" after ']'" },
        { "[::1]:", "port must be 1..65535" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (net_host_parse(bad[i].spec, 5672, &hp, err, sizeof err) == 0)
            fail_msg("\"%s\" accepted", bad[i].spec);
        if (!strstr(err, bad[i].why)) fail_msg("\"%s\": \"%s\" lacks \"%s\"", bad[i].spec, err, bad[i].why);
    }
    /* a host longer than the buffer is refused, not cut */
    char longspec[400];
    memset(longspec, 'h', 300);
    snprintf(longspec + 300, sizeof longspec - 300, ":5672");
    assert_int_equal(net_host_parse(longspec, 5672, &hp, err, sizeof err), -1);
    assert_non_null(strstr(err, "longer than"));
}

/* ---- settings table + validate, from config text ---- */


int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_parse),
        cmocka_unit_test(test_token_format_and_uniqueness),
        cmocka_unit_test(test_jitter_range),
        cmocka_unit_test(test_backoff_bounds),
        cmocka_unit_test(test_clocks_and_format),
        cmocka_unit_test(test_sleep_cancellable),
        cmocka_unit_test(test_alloc_and_hostname),
        cmocka_unit_test(test_log_levels_and_ratelimit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
