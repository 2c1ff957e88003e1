/* redis_reply_pool: replies built by a real hiredis reader from recycled
 * objects read as hiredis' own, partial replies freed, nothing leaked
 * (valgrind and ASan run this test). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "endpoints/redis_psub.h"
#include "endpoints/redis_reply_pool.h"
#include "redis/io.h"
#include "common/log.h"

static void *get(redisReader *r)
{
    void *rv = NULL;
    assert_int_equal(redisReaderGetReply(r, &rv), REDIS_OK);
    return rv;
}

/* A stream of pmessages, fed in pieces of every size from 1 to 97 bytes
 * (replies cut anywhere, also inside a bulk): each decodes as the bytes
 * sent, and the pool keeps a handful of objects, not one per message. */
static void test_stream_of_messages_reuses_objects(void **state)
{
    (void)state;
    struct reply_pool *p = reply_pool_create();
    assert_non_null(p);
    redisReader *r = redisReaderCreate();
    reply_pool_attach(p, r);
    enum { N = 2000 };
    char *in = malloc((size_t)N * 128);
    size_t len = 0;
    for (int i = 0; i < N; i++) {
        char payload[64];
        int pl = snprintf(payload, sizeof payload, "payload-%d-%s", i, i % 7 ? "x" : "a longer one");
        len += (size_t)sprintf(in + len, "*4\r\n$8\r\npmessage\r\n$6\r\nchan.*\r\n$6\r\nchan.x\r\n$%d\r\n%s\r\n",
                               pl, payload);
    }
    size_t off = 0, step = 1;
    int seen = 0;
    size_t kept_max = 0;
    while (off < len) {
        size_t n = len - off < step ? len - off : step;
        assert_int_equal(redisReaderFeed(r, in + off, n), REDIS_OK);
        off += n;
        step = step % 97 + 1;
        for (void *rv; (rv = get(r)) != NULL;) {
            struct psub_event ev;
            assert_int_equal(redis_psub_decode(rv, &ev), PSUB_PMESSAGE);
            char want[64];
            int wl = snprintf(want, sizeof want, "payload-%d-%s", seen, seen % 7 ? "x" : "a longer one");
            assert_int_equal(ev.payload_len, (size_t)wl);
            assert_memory_equal(ev.payload, want, (size_t)wl);
            assert_int_equal(ev.payload[wl], '\0'); /* terminated as hiredis' */
            assert_int_equal(ev.channel_len, 6);
            assert_memory_equal(ev.pattern, "chan.*", 6);
            reply_pool_put(rv);
            seen++;
            if (reply_pool_kept(p) > kept_max) kept_max = reply_pool_kept(p);
        }
    }
    assert_int_equal(seen, N);
    /* the five objects of one pmessage, and no more */
    assert_int_equal(kept_max, 5);
    redisReaderFree(r);
    reply_pool_destroy(p);
    free(in);
}

/* Every RESP2 shape the subscriber can get, built from the pool. */
static void test_every_shape(void **state)
{
    (void)state;
    struct reply_pool *p = reply_pool_create();
    redisReader *r = redisReaderCreate();
    reply_pool_attach(p, r);
    const char *in = "*3\r\n$10\r\npsubscribe\r\n$3\r\na.*\r\n:1\r\n"
                     "*3\r\n$12\r\npunsubscribe\r\n$-1\r\n:0\r\n"
                     "+PONG\r\n"
                     "-NOPERM no permissions\r\n"
                     "*2\r\n*1\r\n:7\r\n*-1\r\n"
                     "*0\r\n";
    assert_int_equal(redisReaderFeed(r, in, strlen(in)), REDIS_OK);
    struct psub_event ev;
    redisReply *x = get(r);
    assert_int_equal(redis_psub_decode(x, &ev), PSUB_SUBSCRIBED);
    assert_int_equal(ev.pattern_sub, 1);
    assert_int_equal(x->element[2]->type, REDIS_REPLY_INTEGER);
    assert_int_equal(x->element[2]->integer, 1);
    reply_pool_put(x);
    x = get(r);
    assert_int_equal(redis_psub_decode(x, &ev), PSUB_UNSUBSCRIBED);
    assert_int_equal(x->element[1]->type, REDIS_REPLY_NIL);
    assert_null(ev.channel);
    reply_pool_put(x);
    x = get(r);
    assert_int_equal(x->type, REDIS_REPLY_STATUS);
    assert_int_equal(redis_psub_decode(x, &ev), PSUB_PONG);
    reply_pool_put(x);
    x = get(r);
    assert_int_equal(redis_psub_decode(x, &ev), PSUB_ERROR);
    assert_int_equal(ev.payload_len, 21);
    assert_memory_equal(ev.payload, "NOPERM no permissions", 21);
    reply_pool_put(x);
    x = get(r); /* nested arrays, a nil array */
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    assert_int_equal(x->elements, 2);
    assert_int_equal(x->element[0]->elements, 1);
    assert_int_equal(x->element[0]->element[0]->integer, 7);
    assert_int_equal(x->element[1]->type, REDIS_REPLY_NIL);
    assert_int_equal(redis_psub_decode(x, &ev), PSUB_MALFORMED);
    reply_pool_put(x);
    x = get(r);
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    assert_int_equal(x->elements, 0);
    assert_int_equal(redis_psub_decode(x, &ev), PSUB_MALFORMED);
    reply_pool_put(x);
    assert_null(get(r));
    redisReaderFree(r);
    reply_pool_destroy(p);
}

/* A payload larger than the pool keeps, then a reply the reader is still
 * building when it is freed (a connection closed mid-message) and a
 * protocol error mid-reply: everything goes back to the pool or is freed
 * (no leak under valgrind / ASan). */
static void test_large_partial_and_broken_replies(void **state)
{
    (void)state;
    struct reply_pool *p = reply_pool_create();
    redisReader *r = redisReaderCreate();
    reply_pool_attach(p, r);
    size_t big = 100000;
    char *in = malloc(big + 128);
    int h = sprintf(in, "*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$%zu\r\n", big);
    memset(in + h, 'z', big);
    memcpy(in + h + big, "\r\n", 2);
    assert_int_equal(redisReaderFeed(r, in, (size_t)h + big + 2), REDIS_OK);
    struct psub_event ev;
    redisReply *x = get(r);
    assert_int_equal(redis_psub_decode(x, &ev), PSUB_MESSAGE);
    assert_int_equal(ev.payload_len, big);
    assert_int_equal(ev.payload[big - 1], 'z');
    reply_pool_put(x);
    assert_int_equal(reply_pool_kept(p), 4);
    /* half a pmessage, then the reader goes */
    const char *half = "*4\r\n$8\r\npmessage\r\n$6\r\nchan.*\r\n$6\r\nch";
    assert_int_equal(redisReaderFeed(r, half, strlen(half)), REDIS_OK);
    assert_null(get(r));
    redisReaderFree(r);
    assert_true(reply_pool_kept(p) >= 4);
    /* a protocol error after two elements of an array */
    r = redisReaderCreate();
    reply_pool_attach(p, r);
    const char *bad = "*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n?oops\r\n";
    assert_int_equal(redisReaderFeed(r, bad, strlen(bad)), REDIS_OK);
    void *rv = NULL;
    assert_int_equal(redisReaderGetReply(r, &rv), REDIS_ERR);
    assert_null(rv);
    redisReaderFree(r);
    /* an array over the bound of every baton connection is refused */
    r = redisReaderCreate();
    reply_pool_attach(p, r);
    const char *huge = "*4\r\n$7\r\nmessage\r\n*100000000\r\n";
    assert_int_equal(redisReaderFeed(r, huge, strlen(huge)), REDIS_OK);
    rv = NULL;
    assert_int_equal(redisReaderGetReply(r, &rv), REDIS_ERR);
    assert_null(rv);
    redisReaderFree(r);
    reply_pool_put(NULL);
    reply_pool_destroy(p);
    free(in);
}


/* The pool's functions bound replies as every baton reader: the reply's
 * bytes within redis_reader_set_max's limit, strict integers. */
static void test_pool_reader_bounded(void **state)
{
    (void)state;
    struct reply_pool *p = reply_pool_create();
    redisReader *r = redisReaderCreate();
    reply_pool_attach(p, r);
    redis_reader_set_max(r, 1000);
    char msg[2048];
    int off = sprintf(msg, "*4\r\n$8\r\npmessage\r\n$1\r\na\r\n$1\r\na\r\n$990\r\n");
    memset(msg + off, 'p', 990);
    off += 990;
    off += sprintf(msg + off, "\r\n");
    redisReaderFeed(r, msg, (size_t)off);
    void *v = NULL;
    assert_int_equal(redisReaderGetReply(r, &v), REDIS_ERR);
    assert_null(v);
    redisReaderFree(r);

    r = redisReaderCreate();
    reply_pool_attach(p, r);
    redisReaderFeed(r, ":99999999999999999999\r\n", 23);
    assert_int_equal(redisReaderGetReply(r, &v), REDIS_ERR);
    redisReaderFree(r);

    /* the same message under a limit it fits */
    r = redisReaderCreate();
    reply_pool_attach(p, r);
    redis_reader_set_max(r, 2000);
    redisReaderFeed(r, msg, (size_t)off);
    assert_int_equal(redisReaderGetReply(r, &v), REDIS_OK);
    assert_non_null(v);
    reply_pool_put(v);
    redisReaderFree(r);
    reply_pool_destroy(p);
}

int main(void)
{
    log_set_level(LOG_ERROR); /* the refusal's warning is expected */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_of_messages_reuses_objects),
        cmocka_unit_test(test_every_shape),
        cmocka_unit_test(test_large_partial_and_broken_replies),
        cmocka_unit_test(test_pool_reader_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
