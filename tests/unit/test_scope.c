/* Scope and key building (guard/scope.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "guard/scope.h"

static void test_scope_skips_empty_and_null(void **state)
{
    char buf[64];
    const char *owner = NULL;
    assert_int_equal(guard_scope(buf, sizeof buf, "schedule", owner, "nightly"), 16);
    assert_string_equal(buf, "schedule:nightly");
    assert_int_equal(guard_scope(buf, sizeof buf, "schedule", "", "nightly"), 16);
    assert_string_equal(buf, "schedule:nightly");
    assert_int_equal(guard_scope(buf, sizeof buf, "schedule", "acme", "nightly"), 21);
    assert_string_equal(buf, "schedule:acme:nightly");
    assert_int_equal(guard_scope(buf, sizeof buf, "", ""), 0);
    assert_string_equal(buf, "");
    assert_int_equal(guard_scope(buf, sizeof buf, "only"), 4);
    assert_string_equal(buf, "only");
    /* the header's own example, with an explicit trailing NULL */
    assert_int_equal(guard_scope(buf, sizeof buf, "schedule", owner, "nightly", NULL), 16);
    assert_string_equal(buf, "schedule:nightly");
    /* NULL-terminated variadic form */
    assert_int_equal(guard_scope_join(buf, sizeof buf, "a", "", "b", (const char *)0), 3);
    assert_string_equal(buf, "a:b");
}

static void test_scope_overflow(void **state)
{
    char buf[10];
    /* "abcd:efgh" is 9 chars + NUL = fits exactly */
    assert_int_equal(guard_scope(buf, sizeof buf, "abcd", "efgh"), 9);
    assert_string_equal(buf, "abcd:efgh");
    memset(buf, 'x', sizeof buf);
    assert_int_equal(guard_scope(buf, sizeof buf, "abcd", "efghi"), -1);
    assert_string_equal(buf, "");
    assert_int_equal(guard_scope(buf, 0, "a"), -1);
}

static void test_key_building(void **state)
{
    char buf[GUARD_KEY_MAX];
    assert_int_equal(guard_key(buf, sizeof buf, "baton", "once", "schedule:nightly", "1733148000"),
                     (int)strlen("baton:once:schedule:nightly:1733148000"));
    assert_string_equal(buf, "baton:once:schedule:nightly:1733148000");
    /* NULL and empty prefix default to "baton" */
    guard_key(buf, sizeof buf, NULL, "active", "redis_psub:acme:orders", NULL);
    assert_string_equal(buf, "baton:active:redis_psub:acme:orders");
    guard_key(buf, sizeof buf, "", "active", "s", "");
    assert_string_equal(buf, "baton:active:s");
    guard_key(buf, sizeof buf, "myapp", "once", "s", "k");
    assert_string_equal(buf, "myapp:once:s:k");
    char small[12];
    assert_int_equal(guard_key(small, sizeof small, "baton", "once", "scope", "key"), -1);
    assert_string_equal(small, "");
}

static void test_owner_segment_isolates_tenants(void **state)
{
    char a[128], b[128], ka[GUARD_KEY_MAX], kb[GUARD_KEY_MAX];
    guard_scope(a, sizeof a, "schedule", "tenant-a", "nightly");
    guard_scope(b, sizeof b, "schedule", "tenant-b", "nightly");
    guard_key(ka, sizeof ka, NULL, "once", a, "42");
    guard_key(kb, sizeof kb, NULL, "once", b, "42");
    assert_string_not_equal(ka, kb);
    assert_string_equal(ka, "baton:once:schedule:tenant-a:nightly:42");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scope_skips_empty_and_null),
        cmocka_unit_test(test_scope_overflow),
        cmocka_unit_test(test_key_building),
        cmocka_unit_test(test_owner_segment_isolates_tenants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
