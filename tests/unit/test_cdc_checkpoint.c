/* mysql_cdc checkpoint text (endpoints/cdc_checkpoint.c): "file:pos" format
 * and parse, and the round trip through a locker exactly as mysql_cdc.c
 * stores it (locker_fenced_set / locker_shared_get under the name "cdc",
 * 30-day ttl), here on the local backend. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "endpoints/cdc_checkpoint.h"
#include "guard/locker.h"

static void test_format_parse(void **state)
{
    (void)state;
    char buf[CDC_CHECKPOINT_MAX], f[CDC_FILE_MAX], err[256];
    uint64_t pos = 0;
    assert_int_equal(cdc_checkpoint_format(buf, sizeof buf, "binlog.000003", 1234), 18);
    assert_string_equal(buf, "binlog.000003:1234");
    assert_int_equal(cdc_checkpoint_parse(buf, "k", f, &pos, err, sizeof err), 0);
    assert_string_equal(f, "binlog.000003");
    assert_int_equal(pos, 1234);

    /* the longest file name with the largest position fits the buffer */
    char longf[CDC_FILE_MAX];
    memset(longf, 'x', sizeof longf - 1);
    longf[sizeof longf - 1] = '\0';
    int n = cdc_checkpoint_format(buf, sizeof buf, longf, UINT32_MAX);
    assert_true(n > 0 && (size_t)n < sizeof buf);
    assert_int_equal(cdc_checkpoint_parse(buf, "k", f, &pos, err, sizeof err), 0);
    assert_string_equal(f, longf);
    assert_int_equal(pos, UINT32_MAX);

    /* too small a buffer: -1 and an empty string, never a truncated value */
    assert_int_equal(cdc_checkpoint_format(buf, 10, "binlog.000003", 1234), -1);
    assert_string_equal(buf, "");
    assert_int_equal(cdc_checkpoint_format(buf, 0, "b", 4), -1);

    /* errors name the key and what it holds */
    assert_int_equal(cdc_checkpoint_parse("garbage", "baton:active:x:cdc", f, &pos, err,
                                          sizeof err), -1);
    assert_non_null(strstr(err, "baton:active:x:cdc"));
    assert_non_null(strstr(err, "\"garbage\""));
    assert_non_null(strstr(err, "file:pos"));
    assert_int_equal(cdc_checkpoint_parse("f:3", "k", f, &pos, err, sizeof err), -1);
    assert_int_equal(cdc_checkpoint_parse("", "k", f, &pos, err, sizeof err), -1);
    assert_int_equal(cdc_checkpoint_parse(NULL, "k", f, &pos, err, sizeof err), -1);
    assert_non_null(strstr(err, "holds \"\""));
}

static void test_ttl_constants(void **state)
{
    (void)state;
    assert_int_equal(CDC_CHECKPOINT_TTL_MS, 30LL * 86400 * 1000);
    assert_true(CDC_CHECKPOINT_REFRESH_MS < CDC_CHECKPOINT_TTL_MS / 2);
    assert_string_equal(CDC_CHECKPOINT_NAME, "cdc");
}

/* The locker contract mysql_cdc relies on: the name "cdc" is not reserved,
 * a 30-day ttl is accepted, absent reads are LOCKER_LOST, and a superseded
 * epoch cannot move the value. */
static void test_locker_round_trip(void **state)
{
    (void)state;
    struct locker *l = locker_local_create();
    char err[LOCKER_ERR_MAX], buf[CDC_CHECKPOINT_MAX], f[CDC_FILE_MAX];
    uint64_t pos = 0;
    const char *lease = "baton:active:mysql_cdc:st";
    assert_int_equal(locker_shared_get(l, lease, CDC_CHECKPOINT_NAME, buf, sizeof buf, err),
                     LOCKER_LOST);
    struct lock_grant a, b;
    assert_int_equal(locker_try_lock(l, lease, 5000, &a, err), LOCKER_OK);
    int n = cdc_checkpoint_format(buf, sizeof buf, "binlog.000001", 4);
    assert_int_equal(locker_fenced_set(l, lease, CDC_CHECKPOINT_NAME, a.epoch, buf, (size_t)n,
                                       CDC_CHECKPOINT_TTL_MS, err),
                     LOCKER_OK);
    memset(buf, 0, sizeof buf);
    assert_int_equal(locker_shared_get(l, lease, CDC_CHECKPOINT_NAME, buf, sizeof buf, err),
                     LOCKER_OK);
    assert_int_equal(cdc_checkpoint_parse(buf, lease, f, &pos, err, sizeof err), 0);
    assert_string_equal(f, "binlog.000001");
    assert_int_equal(pos, 4);

    /* a newer leader: the old epoch's write is LOCKER_LOST, the value stays */
    assert_int_equal(locker_unlock(l, lease, a.token, err), LOCKER_OK);
    assert_int_equal(locker_try_lock(l, lease, 5000, &b, err), LOCKER_OK);
    n = cdc_checkpoint_format(buf, sizeof buf, "binlog.000009", 999);
    assert_int_equal(locker_fenced_set(l, lease, CDC_CHECKPOINT_NAME, a.epoch, buf, (size_t)n,
                                       CDC_CHECKPOINT_TTL_MS, err),
                     LOCKER_LOST);
    assert_int_equal(locker_shared_get(l, lease, CDC_CHECKPOINT_NAME, buf, sizeof buf, err),
                     LOCKER_OK);
    assert_string_equal(buf, "binlog.000001:4");
    locker_destroy(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_parse),
        cmocka_unit_test(test_ttl_constants),
        cmocka_unit_test(test_locker_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
