/* The etcd gateway client's pure helpers (guard/etcd_conn.c): base64 both
 * ways (keys and values travel base64), int64 fields given as strings, and
 * the locker refusing lease ttls etcd cannot keep before any request. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "guard/etcd_conn.h"
#include "guard/locker.h"

static void test_b64_round_trip(void **state)
{
    (void)state;
    const char *cases[] = {"", "a", "ab", "abc", "baton:active:redis_psub:ev", "\xff\x00\x01"};
    const size_t lens[] = {0, 1, 2, 3, 26, 3};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *e = etcd_b64(cases[i], lens[i]);
        size_t n = 99;
        char *d = etcd_unb64(e, &n);
        assert_non_null(d);
        assert_int_equal(n, lens[i]);
        assert_memory_equal(d, cases[i], lens[i]);
        free(e);
        free(d);
    }
    char *e = etcd_b64("a", 1);
    assert_string_equal(e, "YQ==");
    free(e);
    size_t n = 0;
    char *d = etcd_unb64("dg==", &n); /* as etcd answers */
    assert_string_equal(d, "v");
    free(d);
    assert_null(etcd_unb64("not base64!", &n));
}

static void test_int_fields(void **state)
{
    (void)state;
    json_object *o = json_tokener_parse(
        "{\"revision\":\"9007199254740993\",\"TTL\":2,\"bad\":\"12x\",\"neg\":\"-1\"}");
    assert_non_null(o);
    assert_int_equal(etcd_int(o, "revision", 0), 9007199254740993LL); /* beyond a double */
    assert_int_equal(etcd_int(o, "TTL", 0), 2);
    assert_int_equal(etcd_int(o, "bad", 7), 7);
    assert_int_equal(etcd_int(o, "neg", 0), -1);
    assert_int_equal(etcd_int(o, "absent", 42), 42);
    assert_int_equal(etcd_int(NULL, "x", 5), 5);
    json_object_put(o);
}

/* Nothing listens on port 1: the ttl is refused before any request. */
static void test_ttl_refused(void **state)
{
    (void)state;
    char *eps[] = {"http://127.0.0.1:1"};
    struct baton_etcd_opts o = {.endpoints = eps, .n_endpoints = 1, .command_timeout_ms = 200};
    char err[BATON_LOCKER_ERR_MAX];
    struct baton_locker *l = baton_locker_etcd_create(&o, err);
    assert_non_null(l);
    assert_string_equal(l->ops->name, "etcd");
    struct baton_lock_grant g;
    assert_int_equal(baton_locker_try_lock(l, "k", 2500, &g, err), BATON_LOCKER_ERR);
    assert_non_null(strstr(err, "whole seconds"));
    assert_int_equal(baton_locker_try_lock(l, "k", 1000, &g, err), BATON_LOCKER_ERR);
    assert_non_null(strstr(err, "at least 2000 ms"));
    /* a valid ttl reaches for the cluster: the error names the endpoint */
    assert_int_equal(baton_locker_try_lock(l, "k", 2000, &g, err), BATON_LOCKER_ERR);
    assert_non_null(strstr(err, "etcd http://127.0.0.1:1"));
    baton_locker_destroy(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_b64_round_trip),
        cmocka_unit_test(test_int_fields),
        cmocka_unit_test(test_ttl_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
