/* Unit tests: JSON writers, UTF-8 validation, base64. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "common/json.h"

/* Writes s[0..n) with jbuf_str and returns a malloc'd copy of the output. */
static char *str_out(const char *s, size_t n)
{
    struct jbuf b;
    jbuf_init(&b, 4);
    jbuf_str(&b, s, n);
    assert_int_equal(strlen(b.data), b.len);
    return jbuf_steal(&b, NULL);
}

static void test_escape_every_control_char(void **state)
{
    (void)state;
    for (int c = 0; c < 0x20; c++) {
        char in[3] = {'a', (char)c, 'z'};
        char *out = str_out(in, 3);
        char expect[16];
        switch (c) {
        case '\n': snprintf(expect, sizeof expect, "\"a\\nz\""); break;
        case '\r': snprintf(expect, sizeof expect, "\"a\\rz\""); break;
        case '\t': snprintf(expect, sizeof expect, "\"a\\tz\""); break;
        case '\b': snprintf(expect, sizeof expect, "\"a\\bz\""); break;
        case '\f': snprintf(expect, sizeof expect, "\"a\\fz\""); break;
        default: snprintf(expect, sizeof expect, "\"a\\u%04xz\"", c); break;
        }
        assert_string_equal(out, expect);
        /* no raw control byte may survive */
        for (const char *p = out; *p; p++) assert_true((unsigned char)*p >= 0x20);
        free(out);
    }
    /* DEL (0x7f) is not a JSON control character: passes through */
    char *out = str_out("\x7f", 1);
    assert_string_equal(out, "\"\x7f\"");
    free(out);
}

static void test_escape_quote_backslash(void **state)
{
    (void)state;
    char *out = str_out("say \"hi\" \\ /", 12);
    assert_string_equal(out, "\"say \\\"hi\\\" \\\\ /\"");
    free(out);
    out = str_out("", 0);
    assert_string_equal(out, "\"\"");
    free(out);
}

static void test_valid_utf8_passes_through(void **state)
{
    (void)state;
    const char *s = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe2\x80\xa8";
    char *out = str_out(s, strlen(s));
    char expect[64];
    snprintf(expect, sizeof expect, "\"%s\"", s);
    assert_string_equal(out, expect);
    free(out);
}

static void test_invalid_utf8_replaced(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        size_t n;
        const char *out;
    } cases[] = {
        {"a\xff" "b", 3, "\"a\xef\xbf\xbd" "b\""},
        {"\x80", 1, "\"\xef\xbf\xbd\""},                         /* stray continuation */
        {"\xc3", 1, "\"\xef\xbf\xbd\""},                         /* truncated */
        {"\xc0\xaf", 2, "\"\xef\xbf\xbd\xef\xbf\xbd\""},         /* overlong '/' */
        {"\xe0\x80\xaf", 3, "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""}, /* overlong 3 */
        {"\xed\xa0\x80", 3, "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""}, /* U+D800 */
        {"\xf4\x90\x80\x80", 4,
         "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""}, /* > U+10FFFF */
        {"x\xe2\x82", 3, "\"x\xef\xbf\xbd\xef\xbf\xbd\""},         /* truncated 3-byte */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = str_out(cases[i].in, cases[i].n);
        assert_string_equal(out, cases[i].out);
        assert_true(utf8_valid(out, strlen(out)));
        free(out);
    }
}

static void test_utf8_valid_strict(void **state)
{
    (void)state;
    assert_true(utf8_valid("", 0));
    assert_true(utf8_valid("hello", 5));
    assert_true(utf8_valid("\xc2\x80", 2));             /* U+0080 */
    assert_true(utf8_valid("\xdf\xbf", 2));             /* U+07FF */
    assert_true(utf8_valid("\xe0\xa0\x80", 3));         /* U+0800 */
    assert_true(utf8_valid("\xed\x9f\xbf", 3));         /* U+D7FF */
    assert_true(utf8_valid("\xee\x80\x80", 3));         /* U+E000 */
    assert_true(utf8_valid("\xef\xbf\xbf", 3));         /* U+FFFF */
    assert_true(utf8_valid("\xf0\x90\x80\x80", 4));     /* U+10000 */
    assert_true(utf8_valid("\xf4\x8f\xbf\xbf", 4));     /* U+10FFFF */
    assert_true(utf8_valid("a\0b", 3));                 /* NUL is valid UTF-8 */

    assert_false(utf8_valid("\xc0\x80", 2));            /* overlong NUL */
    assert_false(utf8_valid("\xc1\xbf", 2));            /* overlong */
    assert_false(utf8_valid("\xe0\x9f\xbf", 3));        /* overlong U+07FF */
    assert_false(utf8_valid("\xf0\x8f\xbf\xbf", 4));    /* overlong U+FFFF */
    assert_false(utf8_valid("\xed\xa0\x80", 3));        /* U+D800 */
    assert_false(utf8_valid("\xed\xbf\xbf", 3));        /* U+DFFF */
    assert_false(utf8_valid("\xf4\x90\x80\x80", 4));    /* U+110000 */
    assert_false(utf8_valid("\xf5\x80\x80\x80", 4));
    assert_false(utf8_valid("\xff", 1));
    assert_false(utf8_valid("\x80", 1));
    assert_false(utf8_valid("\xe2\x82", 2));            /* truncated */
    assert_false(utf8_valid("\xe2\x28\xa1", 3));        /* bad continuation */
    assert_false(utf8_valid("abc\xf0\x9f\x98", 6));     /* truncated at end */
}

static void roundtrip_double(double v)
{
    struct jbuf b;
    jbuf_init(&b, 0);
    jbuf_double(&b, v);
    char *end = NULL;
    double back = strtod(b.data, &end);
    assert_true(*end == '\0');
    assert_true(back == v);
    jbuf_free(&b);
}

static void test_doubles(void **state)
{
    (void)state;
    struct jbuf b;
    jbuf_init(&b, 0);
    jbuf_double(&b, NAN);
    jbuf_char(&b, ' ');
    jbuf_double(&b, INFINITY);
    jbuf_char(&b, ' ');
    jbuf_double(&b, -INFINITY);
    jbuf_char(&b, ' ');
    jbuf_double(&b, 0.1);
    jbuf_char(&b, ' ');
    jbuf_double(&b, 1.5);
    jbuf_char(&b, ' ');
    jbuf_double(&b, -2);
    assert_string_equal(b.data, "null null null 0.1 1.5 -2");
    jbuf_free(&b);
    double vals[] = {0.0, 1.0 / 3.0, 2.0 / 3.0, 1e300, -1e-300, 5e-324, 1.7976931348623157e308,
                     123456789.123456789, 0.30000000000000004};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) roundtrip_double(vals[i]);
}

static void test_ints_bools_keys(void **state)
{
    (void)state;
    struct jbuf b = {0};
    bool first = true;
    jbuf_char(&b, '{');
    jbuf_key(&b, &first, "a");
    jbuf_i64(&b, INT64_MIN);
    jbuf_key(&b, &first, "b");
    jbuf_u64(&b, UINT64_MAX);
    jbuf_key(&b, &first, "c\"");
    jbuf_bool(&b, true);
    jbuf_key(&b, &first, "d");
    jbuf_bool(&b, false);
    jbuf_key(&b, &first, "e");
    jbuf_null(&b);
    jbuf_key(&b, &first, "f");
    jbuf_strz(&b, NULL);
    jbuf_char(&b, '}');
    assert_string_equal(b.data, "{\"a\":-9223372036854775808,\"b\":18446744073709551615,"
                                "\"c\\\"\":true,\"d\":false,\"e\":null,\"f\":null}");
    size_t len = 0;
    char *s = jbuf_steal(&b, &len);
    assert_int_equal(len, strlen(s));
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    free(s);
    /* reusable after steal */
    jbuf_rawz(&b, "x");
    assert_string_equal(b.data, "x");
    jbuf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");
    jbuf_free(&b);
}

static void test_base64_rfc4648(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out;
    } v[] = {
        {"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},         {"foo", "Zm9v"},
        {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        size_t n = strlen(v[i].in);
        assert_int_equal(base64_encoded_len(n), strlen(v[i].out));
        char out[16] = {0};
        base64_encode(v[i].in, n, out);
        assert_string_equal(out, v[i].out);
        struct jbuf b;
        jbuf_init(&b, 1);
        jbuf_base64(&b, v[i].in, n);
        char q[20];
        snprintf(q, sizeof q, "\"%s\"", v[i].out);
        assert_string_equal(b.data, q);
        jbuf_free(&b);
    }
    /* every byte value, including the alphabet's last symbols */
    unsigned char all[3] = {0xfb, 0xff, 0xbf};
    char out[8] = {0};
    base64_encode(all, 3, out);
    assert_string_equal(out, "+/+/");
}

static void test_growth_large(void **state)
{
    (void)state;
    /* 1 MiB of control characters: every byte becomes \u0001 (6 bytes) */
    size_t n = 1 << 20;
    char *in = malloc(n);
    memset(in, 1, n);
    struct jbuf b;
    jbuf_init(&b, 0);
    jbuf_str(&b, in, n);
    assert_int_equal(b.len, n * 6 + 2);
    assert_memory_equal(b.data + 1, "\\u0001\\u0001", 12);
    assert_int_equal(b.data[b.len - 1], '"');
    jbuf_free(&b);
    free(in);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape_every_control_char),
        cmocka_unit_test(test_escape_quote_backslash),
        cmocka_unit_test(test_valid_utf8_passes_through),
        cmocka_unit_test(test_invalid_utf8_replaced),
        cmocka_unit_test(test_utf8_valid_strict),
        cmocka_unit_test(test_doubles),
        cmocka_unit_test(test_ints_bools_keys),
        cmocka_unit_test(test_base64_rfc4648),
        cmocka_unit_test(test_growth_large),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
