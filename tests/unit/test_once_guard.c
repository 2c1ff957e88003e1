/* OnceGuard (guard/once_guard.c): policy on backend failure, key building,
 * TTL pass-through, no-locker mode, tenant isolation. Uses a small
 * fault-injecting locker implemented here, and the local locker. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guard/locker.h"
#include "baton/once_guard.h"
#include "baton/scope.h"
#include "common/log.h"

struct fault_locker {
    struct baton_locker base;
    int answer; /* what try_lock returns */
    int calls;
    int64_t last_ttl;
    char last_key[BATON_GUARD_KEY_MAX];
};

static int fault_try_lock(struct baton_locker *l, const char *key, int64_t ttl_ms,
                          struct baton_lock_grant *out, char err[BATON_LOCKER_ERR_MAX])
{
    struct fault_locker *f = (struct fault_locker *)l;
    f->calls++;
    f->last_ttl = ttl_ms;
    snprintf(f->last_key, sizeof f->last_key, "%s", key);
    if (f->answer == BATON_LOCKER_OK) {
        memset(out, 0, sizeof *out);
        strcpy(out->token, "0123456789abcdef0123456789abcdef");
        out->epoch = 7;
    } else if (f->answer == BATON_LOCKER_ERR) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "injected: connection refused");
    }
    return f->answer;
}

static int fault_unlock(struct baton_locker *l, const char *key, const char *token,
                        char err[BATON_LOCKER_ERR_MAX])
{
    return BATON_LOCKER_OK;
}

static void fault_destroy(struct baton_locker *l)
{
    free(l);
}

static const struct locker_ops fault_ops = {
    .name = "fault",
    .try_lock = fault_try_lock,
    .unlock = fault_unlock,
    .destroy = fault_destroy,
};

static struct fault_locker *fault_create(int answer)
{
    struct fault_locker *f = calloc(1, sizeof *f);
    f->base.ops = &fault_ops;
    f->answer = answer;
    return f;
}

#define STAT(g, field) atomic_load(&baton_once_guard_stats(g)->field)

static void test_fail_closed_by_default(void **state)
{
    struct fault_locker *f = fault_create(BATON_LOCKER_ERR);
    struct baton_once_guard *g = baton_once_guard_create(&f->base, "schedule:nightly", NULL);
    assert_false(baton_once_guard_allow(g, "1733148000"));
    assert_false(baton_once_guard_allow(g, "1733148001"));
    assert_int_equal(f->calls, 2);
    assert_int_equal(STAT(g, allowed), 0);
    assert_int_equal(STAT(g, skipped), 2);
    assert_int_equal(STAT(g, backend_errors), 2);
    /* backend recovers: allowed again */
    f->answer = BATON_LOCKER_OK;
    assert_true(baton_once_guard_allow(g, "1733148002"));
    assert_int_equal(STAT(g, allowed), 1);
    baton_once_guard_destroy(g);
    baton_locker_destroy(&f->base);
}

static void test_fail_open_option(void **state)
{
    struct fault_locker *f = fault_create(BATON_LOCKER_ERR);
    struct baton_once_guard_options o = {.fail_open = true, .log_name = "claims"};
    struct baton_once_guard *g = baton_once_guard_create(&f->base, "s", &o);
    assert_true(baton_once_guard_allow(g, "k1"));
    assert_int_equal(STAT(g, allowed), 1);
    assert_int_equal(STAT(g, skipped), 0);
    assert_int_equal(STAT(g, backend_errors), 1);
    /* held elsewhere is not a failure: skipped even when failing open */
    f->answer = BATON_LOCKER_HELD;
    assert_false(baton_once_guard_allow(g, "k1"));
    assert_int_equal(STAT(g, skipped), 1);
    assert_int_equal(STAT(g, backend_errors), 1);
    baton_once_guard_destroy(g);
    baton_locker_destroy(&f->base);
}

static void test_no_locker_always_allows(void **state)
{
    struct baton_once_guard *g = baton_once_guard_create(NULL, "schedule:x", NULL);
    for (int i = 0; i < 5; i++) assert_true(baton_once_guard_allow(g, "same-key"));
    assert_int_equal(STAT(g, allowed), 5);
    assert_int_equal(STAT(g, skipped), 0);
    baton_once_guard_destroy(g);
}

static void test_ttl_and_key_passed_through(void **state)
{
    struct fault_locker *f = fault_create(BATON_LOCKER_OK);
    struct baton_once_guard *g = baton_once_guard_create(&f->base, "schedule:nightly", NULL);
    assert_true(baton_once_guard_allow(g, "1733148000"));
    assert_int_equal(f->last_ttl, 3600 * 1000);
    assert_string_equal(f->last_key, "baton:once:schedule:nightly:1733148000");
    baton_once_guard_destroy(g);

    struct baton_once_guard_options o = {.prefix = "app", .ttl_ms = 1234};
    g = baton_once_guard_create(&f->base, "s", &o);
    assert_true(baton_once_guard_allow(g, "k"));
    assert_int_equal(f->last_ttl, 1234);
    assert_string_equal(f->last_key, "app:once:s:k");
    baton_once_guard_destroy(g);
    baton_locker_destroy(&f->base);
}

static void test_bad_keys_follow_the_failure_policy(void **state)
{
    struct fault_locker *f = fault_create(BATON_LOCKER_OK);
    struct baton_once_guard *g = baton_once_guard_create(&f->base, "s", NULL);
    assert_false(baton_once_guard_allow(g, ""));
    assert_false(baton_once_guard_allow(g, NULL));
    char huge[BATON_GUARD_KEY_MAX + 10];
    memset(huge, 'k', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    assert_false(baton_once_guard_allow(g, huge));
    assert_int_equal(f->calls, 0);
    assert_int_equal(STAT(g, backend_errors), 3);
    assert_int_equal(STAT(g, skipped), 3);
    baton_once_guard_destroy(g);
    baton_locker_destroy(&f->base);
}

static void test_dedup_and_tenant_isolation(void **state)
{
    struct baton_locker *l = baton_locker_local_create();
    char sa[128], sb[128];
    baton_scope(sa, sizeof sa, "schedule", "tenant-a", "nightly");
    baton_scope(sb, sizeof sb, "schedule", "tenant-b", "nightly");
    /* two replicas of tenant a, one of tenant b */
    struct baton_once_guard *a1 = baton_once_guard_create(l, sa, NULL);
    struct baton_once_guard *a2 = baton_once_guard_create(l, sa, NULL);
    struct baton_once_guard *b1 = baton_once_guard_create(l, sb, NULL);
    assert_true(baton_once_guard_allow(a1, "slot-1"));
    assert_false(baton_once_guard_allow(a2, "slot-1")); /* same tenant: deduplicated */
    assert_true(baton_once_guard_allow(b1, "slot-1"));  /* other tenant: independent */
    assert_true(baton_once_guard_allow(a2, "slot-2"));
    assert_false(baton_once_guard_allow(a1, "slot-2"));
    assert_int_equal(STAT(a1, allowed) + STAT(a2, allowed), 2);
    assert_int_equal(STAT(a1, skipped) + STAT(a2, skipped), 2);
    baton_once_guard_destroy(a1);
    baton_once_guard_destroy(a2);
    baton_once_guard_destroy(b1);
    baton_locker_destroy(l);
}

int main(void)
{
    log_set_level(LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fail_closed_by_default),
        cmocka_unit_test(test_fail_open_option),
        cmocka_unit_test(test_no_locker_always_allows),
        cmocka_unit_test(test_ttl_and_key_passed_through),
        cmocka_unit_test(test_bad_keys_follow_the_failure_policy),
        cmocka_unit_test(test_dedup_and_tenant_isolation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
