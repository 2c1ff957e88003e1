/* The etcd gateway client's pure helpers (guard/etcd_conn.c): base64 both
 * ways (keys and values travel base64), the strict readers of answer fields
 * (int64 given as strings, booleans, absent vs malformed) and of whole
 * answers, the watch stream's cap, and the locker refusing lease ttls etcd
 * cannot keep before any request. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <curl/curl.h>
#include <stdbool.h>
#include <stdio.h>
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

/* Reads field of the JSON text: the reader's result, the value in *out. */
static enum etcd_field int_of(const char *text, const char *field, bool neg, int64_t *out,
                              char *err)
{
    json_object *o = json_tokener_parse(text);
    assert_non_null(o);
    err[0] = '\0';
    enum etcd_field f = etcd_field_int64(o, field, neg, out, err, 256);
    json_object_put(o);
    return f;
}

static void test_int_fields(void **state)
{
    (void)state;
    char err[256];
    int64_t v = 0;
    assert_int_equal(int_of("{\"revision\":\"9007199254740993\"}", "revision", false, &v, err),
                     ETCD_FIELD_OK);
    assert_int_equal(v, 9007199254740993LL); /* beyond a double */
    assert_int_equal(int_of("{\"TTL\":2}", "TTL", false, &v, err), ETCD_FIELD_OK);
    assert_int_equal(v, 2);
    assert_int_equal(int_of("{\"n\":\"-1\"}", "n", true, &v, err), ETCD_FIELD_OK);
    assert_int_equal(v, -1);
    assert_int_equal(int_of("{\"n\":-7}", "n", true, &v, err), ETCD_FIELD_OK);
    assert_int_equal(v, -7);
    assert_int_equal(int_of("{\"n\":\"9223372036854775807\"}", "n", false, &v, err), ETCD_FIELD_OK);
    assert_int_equal(v, INT64_MAX);
    assert_int_equal(int_of("{\"n\":\"-9223372036854775808\"}", "n", true, &v, err), ETCD_FIELD_OK);
    assert_true(v == INT64_MIN);
    /* absent: untouched, not an error */
    v = 42;
    assert_int_equal(int_of("{\"x\":1}", "absent", false, &v, err), ETCD_FIELD_ABSENT);
    assert_int_equal(v, 42);
    assert_int_equal(etcd_field_int64(NULL, "x", false, &v, err, sizeof err), ETCD_FIELD_ABSENT);
    /* malformed, each named */
    const char *bad[] = {
        "{\"revision\":\"99999999999999999999\"}", /* was INT64_MAX */
        "{\"revision\":\"9223372036854775808\"}",
        "{\"revision\":99999999999999999999}",     /* a number json-c clamps */
        "{\"revision\":9223372036854775808}",
        "{\"revision\":\" 12\"}",                  /* was 12 */
        "{\"revision\":\"12 \"}",
        "{\"revision\":\"+12\"}",
        "{\"revision\":\"12x\"}",
        "{\"revision\":\"\"}",
        "{\"revision\":\"-\"}",
        "{\"revision\":\"0x10\"}",
        "{\"revision\":\"1e3\"}",
        "{\"revision\":1e3}",
        "{\"revision\":12.0}",
        "{\"revision\":true}",
        "{\"revision\":null}",
        "{\"revision\":{}}",
        "{\"revision\":[1]}",
        "{\"revision\":\"-5\"}",                   /* no sign where none is allowed */
        "{\"revision\":-5}",
        "{\"revision\":\"-0\"}",
        "{\"revision\":\"-9223372036854775809\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = 42;
        enum etcd_field f = int_of(bad[i], "revision", false, &v, err);
        if (f != ETCD_FIELD_MALFORMED) fail_msg("%s read as %d (%lld)", bad[i], f, (long long)v);
        assert_int_equal(v, 42);
        assert_non_null(strstr(err, "field \"revision\""));
    }
    assert_int_equal(int_of("{\"n\":\"-9223372036854775809\"}", "n", true, &v, err),
                     ETCD_FIELD_MALFORMED);
    assert_non_null(strstr(err, "range"));
    assert_int_equal(int_of("{\"n\":\" -1\"}", "n", true, &v, err), ETCD_FIELD_MALFORMED);
    /* a parent that is not an object */
    json_object *s = json_object_new_string("x");
    assert_int_equal(etcd_field_int64(s, "n", false, &v, err, sizeof err), ETCD_FIELD_MALFORMED);
    json_object_put(s);
    /* uint64: member IDs beyond int64 */
    json_object *o = json_tokener_parse("{\"leader\":\"10276657743932975437\",\"m\":\"-1\"}");
    uint64_t u = 0;
    assert_int_equal(etcd_field_uint64(o, "leader", &u, err, sizeof err), ETCD_FIELD_OK);
    assert_true(u == 10276657743932975437ULL);
    assert_int_equal(etcd_field_uint64(o, "m", &u, err, sizeof err), ETCD_FIELD_MALFORMED);
    json_object_put(o);
}

static void test_bool_fields(void **state)
{
    (void)state;
    char err[256];
    json_object *o = json_tokener_parse(
        "{\"t\":true,\"f\":false,\"s\":\"false\",\"st\":\"true\",\"one\":1,\"z\":0,\"n\":null}");
    assert_non_null(o);
    bool b = false;
    assert_int_equal(etcd_field_bool(o, "t", &b, err, sizeof err), ETCD_FIELD_OK);
    assert_true(b);
    assert_int_equal(etcd_field_bool(o, "f", &b, err, sizeof err), ETCD_FIELD_OK);
    assert_false(b);
    b = true;
    assert_int_equal(etcd_field_bool(o, "absent", &b, err, sizeof err), ETCD_FIELD_ABSENT);
    assert_true(b);
    const char *bad[] = {"s", "st", "one", "z", "n"};
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(etcd_field_bool(o, bad[i], &b, err, sizeof err), ETCD_FIELD_MALFORMED);
        char name[16];
        snprintf(name, sizeof name, "field \"%s\"", bad[i]);
        assert_non_null(strstr(err, name));
        if (i < 4) assert_non_null(strstr(err, "not a JSON boolean"));
    }
    json_object_put(o);
}

static json_object *parse(const char *text)
{
    json_object *o = json_tokener_parse(text);
    assert_non_null(o);
    return o;
}

static void test_answers(void **state)
{
    (void)state;
    char err[256];
    bool ok = true;
    int64_t rev = 0;
    /* succeeded: absent is false (the gateway omits false) */
    json_object *o = parse("{\"header\":{\"revision\":\"10\"}}");
    assert_int_equal(etcd_answer_succeeded(o, &ok, err, sizeof err), 0);
    assert_false(ok);
    assert_int_equal(etcd_answer_revision(o, &rev, err, sizeof err), 0);
    assert_int_equal(rev, 10);
    json_object_put(o);
    o = parse("{\"header\":{\"revision\":\"10\"},\"succeeded\":\"false\"}");
    assert_int_equal(etcd_answer_succeeded(o, &ok, err, sizeof err), -1);
    assert_non_null(strstr(err, "field \"succeeded\""));
    json_object_put(o);
    struct { const char *text, *msg; } revs[] = {
        {"{\"header\":{\"revision\":\"-5\"}}", "negative revision -5 in the answer"},
        {"{\"header\":{\"revision\":\"0\"}}", "no revision in the answer"},
        {"{\"header\":{}}", "no revision in the answer"},
        {"{}", "no revision in the answer"},
        {"{\"header\":\"x\"}", "not an object"},
        {"{\"header\":{\"revision\":\" 12\"}}", "field \"revision\""},
        {"{\"header\":{\"revision\":\"99999999999999999999\"}}", "out of range"},
    };
    for (size_t i = 0; i < sizeof revs / sizeof revs[0]; i++) {
        o = parse(revs[i].text);
        rev = 99;
        assert_int_equal(etcd_answer_revision(o, &rev, err, sizeof err), -1);
        assert_int_equal(rev, 99);
        if (strstr(err, revs[i].msg) == NULL) fail_msg("%s: %s", revs[i].text, err);
        json_object_put(o);
    }
    /* ttl: checked, within etcd's longest lease */
    int64_t ms = 0;
    o = parse("{\"a\":\"3\",\"b\":\"-1\",\"c\":\"9223372036854775807\",\"d\":\"-2\","
              "\"e\":\"9000000001\",\"f\":\"9000000000\"}");
    assert_int_equal(etcd_answer_ttl_ms(o, "a", &ms, err, sizeof err), 0);
    assert_int_equal(ms, 3000);
    assert_int_equal(etcd_answer_ttl_ms(o, "b", &ms, err, sizeof err), 0);
    assert_int_equal(ms, -1);
    assert_int_equal(etcd_answer_ttl_ms(o, "absent", &ms, err, sizeof err), 0);
    assert_int_equal(ms, 0);
    assert_int_equal(etcd_answer_ttl_ms(o, "f", &ms, err, sizeof err), 0);
    assert_int_equal(ms, 9000000000000LL);
    assert_int_equal(etcd_answer_ttl_ms(o, "c", &ms, err, sizeof err), -1);
    assert_non_null(strstr(err, "field \"c\""));
    assert_int_equal(etcd_answer_ttl_ms(o, "d", &ms, err, sizeof err), -1);
    assert_int_equal(etcd_answer_ttl_ms(o, "e", &ms, err, sizeof err), -1);
    json_object_put(o);
    /* first kv */
    json_object *kv = NULL;
    o = parse("{\"kvs\":[{\"key\":\"aw==\"}]}");
    assert_int_equal(etcd_answer_first_kv(o, &kv, err, sizeof err), 0);
    assert_non_null(kv);
    json_object_put(o);
    o = parse("{\"count\":\"0\"}");
    assert_int_equal(etcd_answer_first_kv(o, &kv, err, sizeof err), 0);
    assert_null(kv);
    json_object_put(o);
    o = parse("{\"kvs\":\"x\"}");
    assert_int_equal(etcd_answer_first_kv(o, &kv, err, sizeof err), -1);
    json_object_put(o);
    o = parse("{\"kvs\":[1]}");
    assert_int_equal(etcd_answer_first_kv(o, &kv, err, sizeof err), -1);
    json_object_put(o);
    /* watch messages */
    struct etcd_watch_msg m;
    o = parse("{\"result\":{\"created\":true,\"events\":[{\"type\":\"DELETE\"},{\"kv\":{}},"
              "{\"type\":\"DELETE\"}]}}");
    assert_int_equal(etcd_answer_watch(o, &m, err, sizeof err), 0);
    assert_true(m.result && m.created && !m.canceled);
    assert_int_equal(m.deletes, 2);
    json_object_put(o);
    o = parse("{\"error\":{\"grpc_code\":14}}");
    assert_int_equal(etcd_answer_watch(o, &m, err, sizeof err), 0);
    assert_false(m.result);
    json_object_put(o);
    const char *badw[] = {"{\"result\":{\"created\":\"true\"}}", "{\"result\":{\"canceled\":1}}",
                          "{\"result\":{\"events\":{}}}", "{\"result\":{\"events\":[{\"type\":1}]}}",
                          "{\"result\":\"x\"}", "[1]"};
    for (size_t i = 0; i < sizeof badw / sizeof badw[0]; i++) {
        o = parse(badw[i]);
        if (etcd_answer_watch(o, &m, err, sizeof err) != -1) fail_msg("%s accepted", badw[i]);
        json_object_put(o);
    }
}

static int objects;
static void count_object(json_object *o, void *arg)
{
    (void)o;
    (void)arg;
    objects++;
}

/* A watch stream's messages are capped: an endless string ends it, however
 * it is cut; messages below the cap pass, split anywhere. */
static void test_stream_cap(void **state)
{
    (void)state;
    char err[256];
    struct etcd_stream *s = etcd_stream_create(64);
    const char *two = "{\"result\":{\"created\":true}}\n{\"result\":{}}\r\n  {\"a\":1}";
    objects = 0;
    for (size_t i = 0; two[i]; i++) /* a byte at a time */
        assert_int_equal(etcd_stream_feed(s, two + i, 1, count_object, NULL, err, sizeof err),
                         ETCD_STREAM_OK);
    assert_int_equal(objects, 3);
    etcd_stream_destroy(s);
    /* endless string: stopped once 64 bytes are pending */
    s = etcd_stream_create(64);
    objects = 0;
    assert_int_equal(etcd_stream_feed(s, "{\"result\":{}}{\"x\":\"", 19, count_object, NULL, err,
                                      sizeof err),
                     ETCD_STREAM_OK);
    assert_int_equal(objects, 1);
    char a[16];
    memset(a, 'a', sizeof a);
    enum etcd_stream_rc rc = ETCD_STREAM_OK;
    int fed = 0;
    while (rc == ETCD_STREAM_OK && fed < 100) {
        rc = etcd_stream_feed(s, a, sizeof a, count_object, NULL, err, sizeof err);
        fed++;
    }
    assert_int_equal(rc, ETCD_STREAM_TOO_LARGE);
    assert_true(fed <= 5); /* 6 + 16 * 4 > 64 */
    assert_non_null(strstr(err, "more than 64 bytes"));
    etcd_stream_destroy(s);
    /* the same in one large piece */
    s = etcd_stream_create(64);
    char big[1000];
    memset(big, 'b', sizeof big);
    big[0] = '"';
    assert_int_equal(etcd_stream_feed(s, big, sizeof big, count_object, NULL, err, sizeof err),
                     ETCD_STREAM_TOO_LARGE);
    etcd_stream_destroy(s);
    /* a message of exactly the cap passes */
    s = etcd_stream_create(9);
    objects = 0;
    assert_int_equal(etcd_stream_feed(s, "{\"a\":123}{\"a\":123}", 18, count_object, NULL, err,
                                      sizeof err),
                     ETCD_STREAM_OK);
    assert_int_equal(objects, 2);
    assert_int_equal(etcd_stream_feed(s, "]", 1, count_object, NULL, err, sizeof err),
                     ETCD_STREAM_MALFORMED);
    etcd_stream_destroy(s);
}

/* Answers are RFC 8259: json-c's liberties are refused. */
static void test_answer_parse(void **state)
{
    (void)state;
    const char *good[] = {"{\"succeeded\":true}", "{\"result\":{}}\n", "{\"a\":1}\n{\"b\":2}\n",
                          " {\"a\":[1,2]} "};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        json_object *o = etcd_answer_parse(good[i], strlen(good[i]));
        if (o == NULL) fail_msg("refused: %s", good[i]);
        json_object_put(o);
    }
    const char *bad[] = {"{\"succeeded\":TRUE}", "{\"a\":'x'}", "{\"a\":012}", "{\"a\":1,}",
                         "{\"a\":", "", "not json"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_object *o = etcd_answer_parse(bad[i], strlen(bad[i]));
        if (o != NULL) fail_msg("accepted: %s", bad[i]);
    }
    /* the length counts, not a NUL */
    assert_null(etcd_answer_parse("{\"a\":1}", 6));
    json_object *o = etcd_answer_parse("{\"a\":1}garbage", 7);
    assert_non_null(o);
    json_object_put(o);
    char err[256];
    struct etcd_stream *s = etcd_stream_create(1024);
    objects = 0;
    assert_int_equal(etcd_stream_feed(s, "{\"result\":{\"created\":TRUE}}", 29, count_object, NULL,
                                      err, sizeof err),
                     ETCD_STREAM_MALFORMED);
    assert_int_equal(objects, 0);
    etcd_stream_destroy(s);
}

static void test_transport_reason(void **state)
{
    (void)state;
    assert_string_equal(etcd_transport_reason(CURLE_OUT_OF_MEMORY, "Out of memory"),
                        "answer header line too long or malformed");
    assert_string_equal(etcd_transport_reason(CURLE_COULDNT_CONNECT, "Connection refused"),
                        "Connection refused");
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

/* an endpoint with user:password@ is refused, its text (the password) not
 * echoed; the same URL without it is taken */
static void test_userinfo_refused(void **state)
{
    (void)state;
    char *eps[2] = {"http://127.0.0.1:2379", "http://root:Pw-XYZ@127.0.0.1:2379/v3"};
    struct baton_etcd_opts o = {.endpoints = eps, .n_endpoints = 2};
    char err[ETCD_ERR_MAX] = "";
    assert_null(etcd_conn_create(&o, "test", err, sizeof err));
    assert_non_null(strstr(err, "endpoint 2 of 2 has user information"));
    assert_null(strstr(err, "Pw-XYZ"));
    assert_true(etcd_url_has_userinfo("https://tok@h:2379"));
    assert_false(etcd_url_has_userinfo("http://h:2379/a@b"));
    assert_false(etcd_url_has_userinfo("http://h:2379?x=a@b"));
    o.n_endpoints = 1;
    struct etcd_conn *c = etcd_conn_create(&o, "test", err, sizeof err);
    assert_non_null(c);
    etcd_conn_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_b64_round_trip),
        cmocka_unit_test(test_int_fields),
        cmocka_unit_test(test_bool_fields),
        cmocka_unit_test(test_answers),
        cmocka_unit_test(test_stream_cap),
        cmocka_unit_test(test_answer_parse),
        cmocka_unit_test(test_transport_reason),
        cmocka_unit_test(test_ttl_refused),
        cmocka_unit_test(test_userinfo_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
