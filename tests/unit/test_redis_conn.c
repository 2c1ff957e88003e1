/* Unit tests: the bounded hiredis reader every baton Redis connection uses.
 * hiredis 0.14 allocates an array's element table when it reads the "*N"
 * header; the fuzzer found a 2.9 GB calloc from "*366666666". Replies are fed
 * by hand; the last test checks that redis_conn_open installs the bound, with
 * a loopback listener that only accepts (no Redis needed for a plain connect).
 * A scripted fake server checks that AUTH and SELECT go in one round trip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <hiredis/read.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "redis/open.h"
#include "redis/sentinel.h"
#include "common/log.h"

static redisReader *bounded_reader(void)
{
    redisReader *r = redisReaderCreate();
    assert_non_null(r);
    redis_reader_bound(r);
    return r;
}

/* Feeds s and returns the reader's verdict; *out receives a reply, if any. */
static int feed_get(redisReader *r, const char *s, size_t n, redisReply **out)
{
    void *reply = NULL;
    redisReaderFeed(r, s, n);
    int rc = redisReaderGetReply(r, &reply);
    *out = reply;
    return rc;
}

static void test_normal_replies_unchanged(void **state)
{
    (void)state;
    redisReader *r = bounded_reader();
    const char pm[] = "*4\r\n$8\r\npmessage\r\n$2\r\na*\r\n$2\r\nab\r\n$5\r\nhello\r\n";
    redisReply *rep = NULL;
    assert_int_equal(feed_get(r, pm, sizeof pm - 1, &rep), REDIS_OK);
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_ARRAY);
    assert_int_equal(rep->elements, 4);
    assert_string_equal(rep->element[3]->str, "hello");
    freeReplyObject(rep);

    const char nested[] = "*2\r\n:7\r\n*2\r\n$-1\r\n+OK\r\n";
    assert_int_equal(feed_get(r, nested, sizeof nested - 1, &rep), REDIS_OK);
    assert_int_equal(rep->element[0]->integer, 7);
    assert_int_equal(rep->element[1]->element[0]->type, REDIS_REPLY_NIL);
    assert_string_equal(rep->element[1]->element[1]->str, "OK");
    freeReplyObject(rep);

    const char nil_array[] = "*-1\r\n";
    assert_int_equal(feed_get(r, nil_array, sizeof nil_array - 1, &rep), REDIS_OK);
    assert_int_equal(rep->type, REDIS_REPLY_NIL);
    freeReplyObject(rep);
    redisReaderFree(r);
}

static void test_huge_array_refused(void **state)
{
    (void)state;
    redisReader *r = bounded_reader();
    const char huge[] = "*366666666\r\n$5\r\nhello\r\n";
    redisReply *rep = NULL;
    assert_int_equal(feed_get(r, huge, sizeof huge - 1, &rep), REDIS_ERR);
    assert_null(rep);
    assert_int_not_equal(r->err, 0);
    redisReaderFree(r);

    /* nested inside a small array: refused all the same, nothing leaks */
    r = bounded_reader();
    const char inner[] = "*2\r\n:1\r\n*100000000\r\n";
    assert_int_equal(feed_get(r, inner, sizeof inner - 1, &rep), REDIS_ERR);
    assert_null(rep);
    redisReaderFree(r);
}

/* Builds "*n\r\n" followed by n ":1\r\n" items. */
static char *int_array(int n, size_t *len)
{
    char *buf = malloc(32 + (size_t)n * 4);
    int off = sprintf(buf, "*%d\r\n", n);
    for (int i = 0; i < n; i++) {
        memcpy(buf + off, ":1\r\n", 4);
        off += 4;
    }
    *len = (size_t)off;
    return buf;
}

static void test_limit_is_inclusive(void **state)
{
    (void)state;
    size_t len;
    char *ok = int_array(REDIS_MAX_ARRAY_ELEMENTS, &len);
    redisReader *r = bounded_reader();
    redisReply *rep = NULL;
    assert_int_equal(feed_get(r, ok, len, &rep), REDIS_OK);
    assert_non_null(rep);
    assert_int_equal(rep->elements, REDIS_MAX_ARRAY_ELEMENTS);
    freeReplyObject(rep);
    redisReaderFree(r);
    free(ok);

    char *over = int_array(REDIS_MAX_ARRAY_ELEMENTS + 1, &len);
    r = bounded_reader();
    assert_int_equal(feed_get(r, over, len, &rep), REDIS_ERR);
    assert_null(rep);
    redisReaderFree(r);
    free(over);
}

/* The input the fuzzer reported (out-of-memory in redisReaderGetReply). */
static void test_fuzzer_input(void **state)
{
    (void)state;
    static const unsigned char input[] = {
        0x2a, 0x33, 0x36, 0x36, 0x36, 0x36, 0x36, 0x36, 0x36, 0x36, 0xd, 0xa, 0x24, 0x35, 0xd,
        0xa,  0x61, 0x2a, 0xd,  0xa,  0x2d, 0xd,  0xa,  0x20, 0x64, 0x2a, 0x33, 0xd, 0xa};
    redisReader *r = bounded_reader();
    redisReply *rep = NULL;
    assert_int_equal(feed_get(r, (const char *)input, sizeof input, &rep), REDIS_ERR);
    assert_null(rep);
    redisReaderFree(r);
}

static void test_bound_idempotent_and_foreign_tables_kept(void **state)
{
    (void)state;
    redisReader *r = bounded_reader();
    redisReplyObjectFunctions *bounded = r->fn;
    redis_reader_bound(r);
    assert_ptr_equal(r->fn, bounded);
    redisReaderFree(r);

    /* a reader with its own table (nobody in baton, but a caller could) is left alone */
    redisReplyObjectFunctions mine = {0};
    r = redisReaderCreateWithFunctions(&mine);
    redis_reader_bound(r);
    assert_ptr_equal(r->fn, &mine);
    redisReaderFree(r);
    redis_reader_bound(NULL);
}

/* Accepts one client, answers its first command (the PING redis_conn_open
 * sends when there is no AUTH or SELECT) with +PONG, and waits for it to
 * close. */
static void *pong_serve(void *arg)
{
    int ls = *(int *)arg;
    int c = accept(ls, NULL, NULL);
    if (c < 0) return NULL;
    char buf[256];
    struct pollfd p = {.fd = c, .events = POLLIN};
    if (poll(&p, 1, 2000) > 0 && read(c, buf, sizeof buf) > 0) {
        ssize_t w = write(c, "+PONG\r\n", 7);
        (void)w;
    }
    poll(&p, 1, 2000); /* until the client closes */
    close(c);
    return NULL;
}

static void test_conn_open_installs_bound(void **state)
{
    (void)state;
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(ls >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(ls, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(ls, 1), 0);
    socklen_t alen = sizeof a;
    assert_int_equal(getsockname(ls, (struct sockaddr *)&a, &alen), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, pong_serve, &ls), 0);

    struct baton_redis_opts o = {.host = (char *)"127.0.0.1", .port = ntohs(a.sin_port)};
    char err[256];
    redisContext *c = redis_conn_open(&o, err, sizeof err);
    if (c == NULL) fprintf(stderr, "redis_conn_open: %s\n", err);
    assert_non_null(c);
    redisReader *plain = redisReaderCreate();
    assert_ptr_not_equal(c->reader->fn, plain->fn);
    redisReaderFree(plain);

    const char huge[] = "*366666666\r\n";
    redisReaderFeed(c->reader, huge, sizeof huge - 1);
    void *rep = NULL;
    assert_int_equal(redisGetReplyFromReader(c, &rep), REDIS_ERR);
    assert_null(rep);
    redisFree(c);
    pthread_join(th, NULL);
    close(ls);
}

/* A fake server that answers only once it has received both AUTH and SELECT:
 * a client that waits for AUTH's reply before sending SELECT times out. */
struct fake_server {
    int ls;
    const char *answer;
    char got[512];
    pthread_t th;
};

static void *fake_serve(void *arg)
{
    struct fake_server *f = arg;
    int c = accept(f->ls, NULL, NULL);
    if (c < 0) return NULL;
    size_t n = 0;
    for (int i = 0; i < 20 && !(strstr(f->got, "AUTH") && strstr(f->got, "SELECT")); i++) {
        struct pollfd p = {.fd = c, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t r = read(c, f->got + n, sizeof f->got - 1 - n);
        if (r <= 0) break;
        n += (size_t)r;
        f->got[n] = '\0';
    }
    if (strstr(f->got, "AUTH") && strstr(f->got, "SELECT")) {
        ssize_t w = write(c, f->answer, strlen(f->answer));
        (void)w;
    }
    struct pollfd p = {.fd = c, .events = POLLIN};
    poll(&p, 1, 1000); /* until the client closes */
    close(c);
    return NULL;
}

/* true when redis_conn_open_ex returned a connection (closed at once). */
static bool open_against(const char *answer, char *err, size_t errlen, bool *refused)
{
    struct fake_server f = {.answer = answer};
    f.ls = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(f.ls >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(f.ls, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(f.ls, 1), 0);
    socklen_t alen = sizeof a;
    assert_int_equal(getsockname(f.ls, (struct sockaddr *)&a, &alen), 0);
    assert_int_equal(pthread_create(&f.th, NULL, fake_serve, &f), 0);
    struct baton_redis_opts o = {.host = (char *)"127.0.0.1", .port = ntohs(a.sin_port),
                           .password = (char *)"pw", .db = 3, .command_timeout_ms = 500};
    redisContext *c = redis_conn_open_ex(&o, err, errlen, refused);
    bool connected = c != NULL;
    if (c) redisFree(c); /* lets the server thread finish */
    pthread_join(f.th, NULL);
    close(f.ls);
    return connected;
}

/* Reconnects are shorter (issue 13, item 3): AUTH and SELECT pipelined in one
 * round trip, the replies still checked in order. Before, the client waited
 * for AUTH's reply before sending SELECT, so against this server it timed out
 * ("AUTH: Resource temporarily unavailable", not refused). */
static void test_auth_and_select_one_round_trip(void **state)
{
    (void)state;
    char err[256];
    bool refused = false;
    assert_false(open_against("-WRONGPASS invalid username-password pair\r\n"
                             "-NOAUTH Authentication required.\r\n",
                             err, sizeof err, &refused));
    printf("refused AUTH: %s\n", err);
    assert_non_null(strstr(err, "AUTH refused"));
    assert_non_null(strstr(err, "WRONGPASS"));
    assert_true(refused);

    refused = false;
    assert_false(open_against("+OK\r\n-ERR DB index is out of range\r\n", err, sizeof err,
                             &refused));
    printf("refused SELECT: %s\n", err);
    assert_non_null(strstr(err, "SELECT refused"));
    assert_true(refused);

    refused = true;
    assert_true(open_against("+OK\r\n+OK\r\n", err, sizeof err, &refused));
    assert_false(refused);
}

static void put(int fd, const char *s, size_t n)
{
    assert_int_equal(write(fd, s, n), (ssize_t)n);
}

/* redis_get_reply / redis_buffer_read (hiredis's, with the read buffer on
 * the heap): whole and split replies, one larger than a read, EOF and a
 * protocol error, with hiredis's error codes and texts. */
static void test_heap_read_replies_and_errors(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    redisContext *c = redisConnectFd(sv[0]);
    assert_non_null(c);
    assert_int_equal(c->err, 0);

    put(sv[1], "+OK\r\n:42\r\n", 10);
    redisReply *r = NULL;
    assert_int_equal(redis_get_reply(c, (void **)&r), REDIS_OK);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    assert_string_equal(r->str, "OK");
    freeReplyObject(r);
    assert_int_equal(redis_get_reply(c, (void **)&r), REDIS_OK); /* already read */
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 42);
    freeReplyObject(r);

    /* 40,000 bytes: three reads of at most 16 KiB; sent from a thread-free
     * socket buffer (the pair holds far more than this) */
    size_t big = 40000;
    char *payload = malloc(big + 32);
    int h = snprintf(payload, 32, "$%zu\r\n", big);
    memset(payload + h, 'x', big);
    memcpy(payload + h + big, "\r\n", 2);
    put(sv[1], payload, (size_t)h + big + 2);
    assert_int_equal(redis_get_reply(c, (void **)&r), REDIS_OK);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(r->len, big);
    assert_int_equal(r->str[big - 1], 'x');
    freeReplyObject(r);
    free(payload);

    /* a reply split across two writes; NULL reply: read and freed */
    put(sv[1], "$5\r\nhel", 8);
    put(sv[1], "lo\r\n", 4);
    assert_int_equal(redis_get_reply(c, NULL), REDIS_OK);

    /* a protocol error: the reader's code and text */
    put(sv[1], "!bad\r\n", 6);
    assert_int_equal(redis_get_reply(c, (void **)&r), REDIS_ERR);
    assert_int_equal(c->err, REDIS_ERR_PROTOCOL);
    assert_true(strlen(c->errstr) > 0);
    redisFree(c); /* closes sv[0] */
    close(sv[1]);

    /* the peer closes: EOF, as hiredis says it */
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    c = redisConnectFd(sv[0]);
    close(sv[1]);
    assert_int_equal(redis_buffer_read(c), REDIS_ERR);
    assert_int_equal(c->err, REDIS_ERR_EOF);
    assert_string_equal(c->errstr, "Server closed the connection");
    assert_int_equal(redis_buffer_read(c), REDIS_ERR); /* an errored context stays so */
    redisFree(c);
}


/* ---- one deadline per command, bounded replies (issue 39) ---------------- */

struct trickle {
    int fd;
    const char *head; /* written at once */
    int bytes;        /* then this many 'x', one at a time */
    int every_ms;
};

static void *trickle_serve(void *arg)
{
    struct trickle *t = arg;
    if (t->head) {
        ssize_t w = write(t->fd, t->head, strlen(t->head));
        (void)w;
    }
    for (int i = 0; i < t->bytes; i++) {
        usleep((useconds_t)t->every_ms * 1000);
        if (write(t->fd, "x", 1) != 1) break; /* the client shut the connection */
    }
    return NULL;
}

static redisContext *pair_context(int sv[2], int64_t timeout_ms)
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    redisContext *c = redisConnectFd(sv[0]);
    assert_non_null(c);
    if (timeout_ms > 0) {
        struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
        assert_int_equal(redisSetTimeout(c, tv), REDIS_OK);
    }
    redis_reader_bound(c->reader);
    return c;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A sentinel answering "$100000\r\n" then one byte every 100 ms: before, each
 * read waited its own SO_RCVTIMEO and the command took 100,000 x 100 ms; now
 * it fails at its deadline, and the socket is shut. */
static void test_deadline_trickled_answer(void **state)
{
    (void)state;
    int sv[2];
    redisContext *c = pair_context(sv, 300);
    struct trickle t = {.fd = sv[1], .head = "$100000\r\n", .bytes = 40, .every_ms = 100};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, trickle_serve, &t), 0);
    int64_t t0 = mono_ms();
    redisReply *r = redis_commandf(c, "SENTINEL get-master-addr-by-name %s", "m");
    int64_t took = mono_ms() - t0;
    printf("trickled answer: failed after %lld ms: %s\n", (long long)took, c->errstr);
    assert_null(r);
    assert_true(took >= 280 && took < 700);
    assert_string_equal(c->errstr, "no complete answer within 300 ms");
    assert_int_not_equal(c->err, 0);
    pthread_join(th, NULL); /* its writes fail once the socket is shut */
    redisFree(c);
    close(sv[1]);

    /* nothing at all: "no answer", not EAGAIN's "Resource temporarily unavailable" */
    c = pair_context(sv, 200);
    t0 = mono_ms();
    assert_null(redis_commandf(c, "ROLE"));
    took = mono_ms() - t0;
    assert_true(took >= 180 && took < 600);
    assert_string_equal(c->errstr, "no answer within 200 ms");
    redisFree(c);
    close(sv[1]);

    /* a complete reply, then a look for more: nothing pending (hiredis sets
     * up a read task on that look); a reply begun: pending */
    c = pair_context(sv, 200);
    put(sv[1], "+PONG\r\n", 7);
    redisReply *pr = NULL;
    assert_int_equal(redis_get_reply(c, (void **)&pr), REDIS_OK);
    freeReplyObject(pr);
    void *none = NULL;
    assert_int_equal(redis_next_reply(c, &none), REDIS_OK);
    assert_null(none);
    assert_false(redis_reply_pending(c));
    put(sv[1], "*2\r\n$3\r\nab", 10);
    assert_int_equal(redis_buffer_read(c), REDIS_OK);
    assert_int_equal(redis_next_reply(c, &none), REDIS_OK);
    assert_null(none);
    assert_true(redis_reply_pending(c));
    redisFree(c);
    close(sv[1]);

    /* the blocking read alone (a caller that polled first): the same words */
    c = pair_context(sv, 100);
    assert_int_equal(redis_buffer_read(c), REDIS_ERR);
    assert_string_equal(c->errstr, "no answer within 100 ms");
    redisFree(c);
    close(sv[1]);
}

/* "$3000000000" then data: refused as soon as the length is read, not after
 * hiredis has buffered 3 GB. */
static void test_declared_bulk_over_limit(void **state)
{
    (void)state;
    int sv[2];
    redisContext *c = pair_context(sv, 2000);
    redis_reader_set_max(c->reader, 1 << 20);
    char *chunk = malloc(65536);
    memset(chunk, 'y', 65536);
    put(sv[1], "$3000000000\r\n", 13);
    put(sv[1], chunk, 65536);
    redisReply *r = NULL;
    assert_int_equal(redisAppendCommand(c, "GET k"), REDIS_OK);
    assert_int_equal(redis_get_reply(c, (void **)&r), REDIS_ERR);
    printf("declared bulk: %s (reader holds %zu bytes)\n", c->errstr, c->reader->len);
    assert_non_null(strstr(c->errstr, "3000000000"));
    assert_non_null(strstr(c->errstr, "max_reply_bytes"));
    assert_true(c->reader->len < 2 * 65536);
    redisFree(c);
    close(sv[1]);

    /* at the limit: accepted; one byte over: refused */
    size_t max = 100000;
    for (int over = 0; over <= 1; over++) {
        c = pair_context(sv, 2000);
        redis_reader_set_max(c->reader, (int64_t)max);
        size_t n = max + (size_t)over;
        char *msg = malloc(n + 32);
        int h = snprintf(msg, 32, "$%zu\r\n", n);
        memset(msg + h, 'z', n);
        memcpy(msg + h + n, "\r\n", 2);
        put(sv[1], msg, (size_t)h + n + 2);
        free(msg);
        int rc = redis_get_reply(c, (void **)&r);
        if (over) {
            assert_int_equal(rc, REDIS_ERR);
            assert_non_null(strstr(c->errstr, "max_reply_bytes"));
        } else {
            assert_int_equal(rc, REDIS_OK);
            assert_int_equal(r->len, max);
            freeReplyObject(r);
        }
        redisFree(c);
        close(sv[1]);
    }
    free(chunk);
}

/* Many strings each under the limit, together over it: refused, with a
 * message naming the limit (not hiredis's "Out of memory"). */
static void test_total_reply_over_limit(void **state)
{
    (void)state;
    redisReader *r = bounded_reader();
    redis_reader_set_max(r, 1000);
    char msg[2048];
    int off = sprintf(msg, "*3\r\n");
    for (int i = 0; i < 3; i++) {
        off += sprintf(msg + off, "$400\r\n");
        memset(msg + off, 'a', 400);
        off += 400;
        off += sprintf(msg + off, "\r\n");
    }
    redisReply *rep = NULL;
    assert_int_equal(feed_get(r, msg, (size_t)off, &rep), REDIS_ERR);
    assert_null(rep);
    redisReaderFree(r);

    int sv[2];
    redisContext *c = pair_context(sv, 1000);
    redis_reader_set_max(c->reader, 1000);
    put(sv[1], msg, (size_t)off);
    assert_int_equal(redis_get_reply(c, (void **)&rep), REDIS_ERR);
    printf("total: %s\n", c->errstr);
    assert_non_null(strstr(c->errstr, "over max_reply_bytes (1000)"));
    assert_non_null(strstr(c->errstr, "max_reply_bytes"));
    redisFree(c);
    close(sv[1]);

    /* two replies of 800 each under a limit of 1000: each counted alone */
    r = bounded_reader();
    redis_reader_set_max(r, 1000);
    off = 0;
    for (int i = 0; i < 2; i++) {
        off += sprintf(msg + off, "*1\r\n$800\r\n");
        memset(msg + off, 'b', 800);
        off += 800;
        off += sprintf(msg + off, "\r\n");
    }
    redisReaderFeed(r, msg, (size_t)off);
    for (int i = 0; i < 2; i++) {
        void *v = NULL;
        assert_int_equal(redisReaderGetReply(r, &v), REDIS_OK);
        assert_non_null(v);
        freeReplyObject(v);
    }
    redisReaderFree(r);
}

/* hiredis 0.14 reads ":99999999999999999999" as whatever the overflow makes
 * of it and ":1x" as -1: refused; valid integers unchanged. */
static void test_strict_integers(void **state)
{
    (void)state;
    static const char *const bad[] = {":99999999999999999999\r\n", ":9223372036854775808\r\n",
                                      ":+5\r\n", ":1x\r\n", ": 12\r\n", ":\r\n", ":-\r\n",
                                      "*2\r\n:1\r\n:12a\r\n", ":--1\r\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        redisReader *r = bounded_reader();
        redisReply *rep = NULL;
        assert_int_equal(feed_get(r, bad[i], strlen(bad[i]), &rep), REDIS_ERR);
        assert_null(rep);
        redisReaderFree(r);
    }
    static const struct {
        const char *in;
        long long v;
    } good[] = {{":0\r\n", 0}, {":-42\r\n", -42}, {":9223372036854775807\r\n", INT64_MAX},
                {":-9223372036854775808\r\n", INT64_MIN}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        redisReader *r = bounded_reader();
        redisReply *rep = NULL;
        assert_int_equal(feed_get(r, good[i].in, strlen(good[i].in), &rep), REDIS_OK);
        assert_int_equal(rep->type, REDIS_REPLY_INTEGER);
        assert_true(rep->integer == good[i].v);
        freeReplyObject(rep);
        redisReaderFree(r);
    }
    /* an integer whose line came in two feeds after hiredis cut its
     * buffer (more than 1024 bytes parsed before it) */
    redisReader *r = bounded_reader();
    char big[1200];
    int off = sprintf(big, "*2\r\n$1100\r\n");
    memset(big + off, 'c', 1100);
    off += 1100;
    off += sprintf(big + off, "\r\n:12");
    redisReply *rep = NULL;
    assert_int_equal(feed_get(r, big, (size_t)off, &rep), REDIS_OK);
    assert_null(rep);
    assert_int_equal(feed_get(r, "34\r\n", 4, &rep), REDIS_OK);
    assert_non_null(rep);
    assert_int_equal(rep->element[1]->integer, 1234);
    freeReplyObject(rep);
    redisReaderFree(r);
}

static void test_nesting_bounded(void **state)
{
    (void)state;
    char msg[128];
    int off = 0;
    for (int i = 0; i < 7; i++) off += sprintf(msg + off, "*1\r\n");
    off += sprintf(msg + off, "*0\r\n");
    redisReader *r = bounded_reader();
    redisReply *rep = NULL;
    assert_int_equal(feed_get(r, msg, (size_t)off, &rep), REDIS_OK); /* 8 levels, the last empty */
    assert_non_null(rep);
    freeReplyObject(rep);
    redisReaderFree(r);

    off = 0;
    for (int i = 0; i < 8; i++) off += sprintf(msg + off, "*1\r\n");
    off += sprintf(msg + off, ":1\r\n");
    r = bounded_reader();
    assert_int_equal(feed_get(r, msg, (size_t)off, &rep), REDIS_ERR);
    assert_null(rep);
    redisReaderFree(r);
}

/* Sentinel addresses: the port in digits only, 1..65535 (strtol took
 * "26400abc" from a sentinel's answer as 26400). */
static void test_sentinel_addr_strict(void **state)
{
    (void)state;
    char host[64];
    int port = 0;
    assert_true(redis_sentinel_parse_addr("s1:26400", host, sizeof host, &port));
    assert_string_equal(host, "s1");
    assert_int_equal(port, 26400);
    assert_true(redis_sentinel_parse_addr("[::1]:65535", host, sizeof host, &port));
    assert_int_equal(port, 65535);
    assert_true(redis_sentinel_parse_addr("s1", host, sizeof host, &port));
    assert_int_equal(port, 26379);
    static const char *const bad[] = {"s1:26400abc", "s1: 26400", "s1:+26400", "s1:0",
                                      "s1:65536", "s1:", "s1:026400", ":26400", "[::1]:x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(redis_sentinel_parse_addr(bad[i], host, sizeof host, &port));
}

int main(void)
{
    log_set_level(LOG_ERROR); /* the refusal warnings are expected here */
    signal(SIGPIPE, SIG_IGN); /* the trickling peer writes on after the shutdown */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_normal_replies_unchanged),
        cmocka_unit_test(test_huge_array_refused),
        cmocka_unit_test(test_limit_is_inclusive),
        cmocka_unit_test(test_fuzzer_input),
        cmocka_unit_test(test_bound_idempotent_and_foreign_tables_kept),
        cmocka_unit_test(test_conn_open_installs_bound),
        cmocka_unit_test(test_auth_and_select_one_round_trip),
        cmocka_unit_test(test_heap_read_replies_and_errors),
        cmocka_unit_test(test_deadline_trickled_answer),
        cmocka_unit_test(test_declared_bulk_over_limit),
        cmocka_unit_test(test_total_reply_over_limit),
        cmocka_unit_test(test_strict_integers),
        cmocka_unit_test(test_nesting_bounded),
        cmocka_unit_test(test_sentinel_addr_strict),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
