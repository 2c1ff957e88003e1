/* Scope and key building (include/baton/scope.h, guard/scope.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "baton/scope.h"

static void test_scope_skips_empty_and_null(void **state)
{
    char buf[64];
    const char *owner = NULL;
    assert_int_equal(baton_scope(buf, sizeof buf, "schedule", owner, "nightly"), 16);
    assert_string_equal(buf, "schedule:nightly");
    assert_int_equal(baton_scope(buf, sizeof buf, "schedule", "", "nightly"), 16);
    assert_string_equal(buf, "schedule:nightly");
    assert_int_equal(baton_scope(buf, sizeof buf, "schedule", "acme", "nightly"), 21);
    assert_string_equal(buf, "schedule:acme:nightly");
    assert_int_equal(baton_scope(buf, sizeof buf, "", ""), 0);
    assert_string_equal(buf, "");
    assert_int_equal(baton_scope(buf, sizeof buf, "only"), 4);
    assert_string_equal(buf, "only");
    /* the header's own example, with an explicit trailing NULL */
    assert_int_equal(baton_scope(buf, sizeof buf, "schedule", owner, "nightly", NULL), 16);
    assert_string_equal(buf, "schedule:nightly");
    /* NULL-terminated variadic form */
    assert_int_equal(baton_scope_join(buf, sizeof buf, "a", "", "b", (const char *)0), 3);
    assert_string_equal(buf, "a:b");
}

static void test_scope_overflow(void **state)
{
    char buf[10];
    /* "abcd:efgh" is 9 chars + NUL = fits exactly */
    assert_int_equal(baton_scope(buf, sizeof buf, "abcd", "efgh"), 9);
    assert_string_equal(buf, "abcd:efgh");
    memset(buf, 'x', sizeof buf);
    assert_int_equal(baton_scope(buf, sizeof buf, "abcd", "efghi"), -1);
    assert_string_equal(buf, "");
    assert_int_equal(baton_scope(buf, 0, "a"), -1);
}

static void test_key_building(void **state)
{
    char buf[BATON_GUARD_KEY_MAX];
    assert_int_equal(baton_key(buf, sizeof buf, "baton", "once", "schedule:nightly", "1733148000"),
                     (int)strlen("baton:once:schedule:nightly:1733148000"));
    assert_string_equal(buf, "baton:once:schedule:nightly:1733148000");
    /* NULL and empty prefix default to "baton" */
    baton_key(buf, sizeof buf, NULL, "active", "redis_psub:acme:orders", NULL);
    assert_string_equal(buf, "baton:active:redis_psub:acme:orders");
    baton_key(buf, sizeof buf, "", "active", "s", "");
    assert_string_equal(buf, "baton:active:s");
    baton_key(buf, sizeof buf, "myapp", "once", "s", "k");
    assert_string_equal(buf, "myapp:once:s:k");
    char small[12];
    assert_int_equal(baton_key(small, sizeof small, "baton", "once", "scope", "key"), -1);
    assert_string_equal(small, "");
}

/* Redis Cluster's key slot: CRC16-XMODEM of the first non-empty {...}, or of
 * the whole key, mod 16384 (the cluster specification's keyHashSlot). */
static unsigned crc16(const char *s, size_t n)
{
    unsigned crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (unsigned)(unsigned char)s[i] << 8;
        for (int b = 0; b < 8; b++) crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) : (crc << 1);
        crc &= 0xffff;
    }
    return crc;
}

static unsigned key_slot(const char *key)
{
    size_t n = strlen(key);
    const char *open = strchr(key, '{');
    if (open) {
        const char *close = strchr(open + 1, '}');
        if (close && close > open + 1) return crc16(open + 1, (size_t)(close - open - 1)) & 16383;
    }
    return crc16(key, n) & 16383;
}

static void test_lease_key_hash_tag(void **state)
{
    (void)state;
    char k[BATON_GUARD_KEY_MAX], sub[BATON_GUARD_KEY_MAX + 16];
    assert_true(baton_lease_key(k, sizeof k, "baton", "redis_psub:orders", false) > 0);
    assert_string_equal(k, "baton:active:redis_psub:orders");
    assert_int_equal(key_slot("123456789"), 12739); /* the specification's check value */
    assert_true(baton_lease_key(k, sizeof k, "baton", "redis_psub:orders", true) > 0);
    assert_string_equal(k, "baton:active:{redis_psub:orders}");
    /* every key kept beside the lease lands in the lease key's slot */
    const char *names[] = {"epoch", "holder", "mark", "cdc", "released"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(sub, sizeof sub, "%s:%s", k, names[i]);
        assert_int_equal(key_slot(sub), key_slot(k));
    }
    /* without the tag they do not (for this scope) */
    baton_lease_key(k, sizeof k, "baton", "redis_psub:orders", false);
    snprintf(sub, sizeof sub, "%s:epoch", k);
    assert_int_not_equal(key_slot(sub), key_slot(k));
    char small[20];
    assert_int_equal(baton_lease_key(small, sizeof small, "baton", "redis_psub:orders", true), -1);
    assert_string_equal(small, "");
}

static void test_owner_segment_isolates_tenants(void **state)
{
    char a[128], b[128], ka[BATON_GUARD_KEY_MAX], kb[BATON_GUARD_KEY_MAX];
    baton_scope(a, sizeof a, "schedule", "tenant-a", "nightly");
    baton_scope(b, sizeof b, "schedule", "tenant-b", "nightly");
    baton_key(ka, sizeof ka, NULL, "once", a, "42");
    baton_key(kb, sizeof kb, NULL, "once", b, "42");
    assert_string_not_equal(ka, kb);
    assert_string_equal(ka, "baton:once:schedule:tenant-a:nightly:42");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scope_skips_empty_and_null),
        cmocka_unit_test(test_scope_overflow),
        cmocka_unit_test(test_key_building),
        cmocka_unit_test(test_lease_key_hash_tag),
        cmocka_unit_test(test_owner_segment_isolates_tenants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
