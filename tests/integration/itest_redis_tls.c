/* Integration test of Redis over TLS (redis/tls.c through
 * redis_conn_open), against a real redis-server with only a TLS port
 * (--port 0 --tls-port P) and certificates made with the openssl command
 * line (both by tests/support/brokers.py redis-tls): commands, large values and pipelines through the bridge,
 * pub/sub, many connections from several threads, the IP-address and DNS
 * name checks, a client certificate required by the server; and the
 * failures, each a clear error naming host:port within the connect
 * timeout: an unrelated CA, a wrong server name, plain text against the TLS
 * port, TLS against a plain port, a server that accepts but never answers,
 * a server killed or stopped under an open connection (hiredis's command
 * timeout still applies on the socketpair end). Exit 77 when redis-server
 * or openssl is missing. Runs under ASan/valgrind like any cmocka test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/util.h"
#include "redis/open.h"
#include "redis/tls.h"
#include "common/util.h"
#include "tests/support/child.h"
#include "tests/support/redis_server.h"

/* ---- certificates and servers ------------------------------------------- */

/* The TLS servers and the certificates come from the launcher the Python
 * tests use too (tests/support/brokers.py redis-tls: harness.TlsRedisServer,
 * tlsfiles): server 0 without, server 1 with a required client
 * certificate. */
static struct launcher tls_launcher;
static char ca_crt[200], srv_crt[200], srv_key[200], cli_crt[200], cli_key[200], other_ca[200];

struct tls_server {
    int port;
};

static struct tls_server tls_srv, tls_srv_auth;
static struct redis_server *plain_srv;

static int tls_servers_start(void)
{
    const char *args[] = {"redis-tls", "no", "yes", NULL};
    if (launcher_start(&tls_launcher, args, NULL, 90000) < 0) return -1;
    launcher_str(&tls_launcher, "ca", -1, ca_crt, sizeof ca_crt);
    launcher_str(&tls_launcher, "server_cert", -1, srv_crt, sizeof srv_crt);
    launcher_str(&tls_launcher, "server_key", -1, srv_key, sizeof srv_key);
    launcher_str(&tls_launcher, "client_cert", -1, cli_crt, sizeof cli_crt);
    launcher_str(&tls_launcher, "client_key", -1, cli_key, sizeof cli_key);
    launcher_str(&tls_launcher, "other_ca", -1, other_ca, sizeof other_ca);
    tls_srv.port = (int)launcher_int(&tls_launcher, "ports", 0);
    tls_srv_auth.port = (int)launcher_int(&tls_launcher, "ports", 1);
    return 0;
}

/* ---- helpers ------------------------------------------------------------ */

static struct baton_redis_opts opts_for(int port)
{
    struct baton_redis_opts o = {0};
    o.host = (char *)"127.0.0.1";
    o.port = port;
    o.connect_timeout_ms = 2000;
    o.command_timeout_ms = 2000;
    o.tls.enabled = true;
    o.tls.ca_file = ca_crt;
    return o;
}

static void wait_active(size_t n)
{
    int64_t deadline = clock_mono_ms() + 3000;
    while (redis_tls_active() != n && clock_mono_ms() < deadline) usleep(5000);
    assert_int_equal(redis_tls_active(), n);
}

static void expect_status(redisContext *c, const char *want, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fprintf(stderr, "error reply: %s\n", r->str);
    assert_true(r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING);
    assert_string_equal(r->str, want);
    freeReplyObject(r);
}

/* err names where and contains what; printed for the log */
static void expect_err(const char *err, int port, const char *what)
{
    char where[64];
    snprintf(where, sizeof where, "redis 127.0.0.1:%d: ", port);
    fprintf(stderr, "    error: %s\n", err);
    assert_non_null(strstr(err, where));
    assert_non_null(strstr(err, what));
}

/* ---- tests -------------------------------------------------------------- */

static void test_commands_over_tls(void **state)
{
    (void)state;
    struct baton_redis_opts o = opts_for(tls_srv.port);
    o.max_reply_bytes = 8 << 20; /* the 3 MiB value below (the default is 1 MiB) */
    char err[512];
    redisContext *c = redis_conn_open(&o, err, sizeof err);
    if (c == NULL) fprintf(stderr, "%s\n", err);
    assert_non_null(c);
    wait_active(1);
    expect_status(c, "PONG", "PING");
    expect_status(c, "OK", "SET k v1");
    expect_status(c, "v1", "GET k");

    /* a value far larger than the bridge's buffers, both ways */
    size_t big = 3 * 1024 * 1024 + 17;
    char *v = xmalloc(big);
    for (size_t i = 0; i < big; i++) v[i] = (char)('a' + i % 26);
    expect_status(c, "OK", "SET big %b", v, big);
    redisReply *r = redisCommand(c, "GET big");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(r->len, big);
    assert_memory_equal(r->str, v, big);
    freeReplyObject(r);
    free(v);

    /* a deep pipeline: 20,000 commands queued before any reply is read */
    for (int i = 0; i < 20000; i++) assert_int_equal(redisAppendCommand(c, "INCR n"), REDIS_OK);
    for (int i = 0; i < 20000; i++) {
        assert_int_equal(redisGetReply(c, (void **)&r), REDIS_OK);
        assert_int_equal(r->integer, i + 1);
        freeReplyObject(r);
    }
    redisFree(c);
    wait_active(0); /* hiredis closed its end: the bridge freed the session */

    /* AUTH/SELECT pipelined at open work over TLS too */
    o.db = 3;
    c = redis_conn_open(&o, err, sizeof err);
    assert_non_null(c);
    expect_status(c, "OK", "SET in3 x");
    redisFree(c);
    wait_active(0);
}

static void test_dns_name_and_server_name(void **state)
{
    (void)state;
    char err[512];
    struct baton_redis_opts o = opts_for(tls_srv.port);
    o.host = (char *)"localhost"; /* checked as a DNS name, sent as SNI */
    redisContext *c = redis_conn_open(&o, err, sizeof err);
    if (c == NULL) fprintf(stderr, "%s\n", err);
    assert_non_null(c);
    expect_status(c, "PONG", "PING");
    redisFree(c);
    o.host = (char *)"127.0.0.1";
    o.tls.server_name = (char *)"localhost"; /* connect to the IP, check the name */
    c = redis_conn_open(&o, err, sizeof err);
    assert_non_null(c);
    expect_status(c, "PONG", "PING");
    redisFree(c);
    wait_active(0);
}

static void test_pubsub_over_tls(void **state)
{
    (void)state;
    char err[512];
    struct baton_redis_opts o = opts_for(tls_srv.port);
    redisContext *sub = redis_conn_open(&o, err, sizeof err);
    redisContext *pub = redis_conn_open(&o, err, sizeof err);
    assert_non_null(sub);
    assert_non_null(pub);
    redisReply *r = redisCommand(sub, "PSUBSCRIBE ch.*");
    assert_non_null(r);
    freeReplyObject(r);
    enum { N = 50000 };
    int64_t t0 = clock_mono_us();
    for (int i = 0; i < N; i++) redisAppendCommand(pub, "PUBLISH ch.%d %d-payload-of-thirty-bytes", i % 7, i);
    int got = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(redisGetReply(pub, (void **)&r), REDIS_OK);
        freeReplyObject(r);
    }
    while (got < N) {
        assert_int_equal(redisGetReply(sub, (void **)&r), REDIS_OK);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->elements, 4);
        assert_int_equal(atoi(r->element[3]->str), got);
        freeReplyObject(r);
        got++;
    }
    int64_t us = clock_mono_us() - t0;
    fprintf(stderr, "    pub/sub over TLS: %d messages in %.1f ms (%.0f msg/s, publisher and subscriber in one thread)\n",
            N, us / 1000.0, N * 1e6 / (double)(us ? us : 1));
    redisFree(sub);
    redisFree(pub);
    wait_active(0);
}

static void *many_worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    struct baton_redis_opts o = opts_for(tls_srv.port);
    char err[512];
    for (int round = 0; round < 5; round++) {
        redisContext *c = redis_conn_open(&o, err, sizeof err);
        if (c == NULL) {
            fprintf(stderr, "%s\n", err);
            return (void *)1;
        }
        for (int i = 0; i < 200; i++) {
            redisReply *r = redisCommand(c, "INCR w%d", id);
            bool ok = r && r->type == REDIS_REPLY_INTEGER && r->integer == round * 200 + i + 1;
            if (r) freeReplyObject(r);
            if (!ok) {
                redisFree(c);
                return (void *)1;
            }
        }
        redisFree(c);
    }
    return NULL;
}

static void test_many_connections_threads(void **state)
{
    (void)state;
    enum { T = 8 };
    pthread_t t[T];
    char err[512];
    struct baton_redis_opts o = opts_for(tls_srv.port);
    /* 12 idle connections stay open meanwhile */
    redisContext *idle[12];
    for (int i = 0; i < 12; i++) {
        idle[i] = redis_conn_open(&o, err, sizeof err);
        assert_non_null(idle[i]);
    }
    redisReply *r = redisCommand(idle[0], "DEL w0 w1 w2 w3 w4 w5 w6 w7");
    assert_non_null(r);
    freeReplyObject(r);
    for (int i = 0; i < T; i++) pthread_create(&t[i], NULL, many_worker, (void *)(intptr_t)i);
    for (int i = 0; i < T; i++) {
        void *rv;
        pthread_join(t[i], &rv);
        assert_null(rv);
    }
    wait_active(12);
    for (int i = 0; i < 12; i++) {
        expect_status(idle[i], "PONG", "PING");
        redisFree(idle[i]);
    }
    wait_active(0);
}

static void test_client_certificate(void **state)
{
    (void)state;
    char err[512];
    struct baton_redis_opts o = opts_for(tls_srv_auth.port);
    o.tls.cert_file = cli_crt;
    o.tls.key_file = cli_key;
    redisContext *c = redis_conn_open(&o, err, sizeof err);
    if (c == NULL) fprintf(stderr, "%s\n", err);
    assert_non_null(c);
    expect_status(c, "PONG", "PING");
    redisFree(c);

    /* without one: the server ends the session (TLS 1.3 reports it after the
     * client's handshake); the open fails, naming host:port */
    o.tls.cert_file = o.tls.key_file = NULL;
    int64_t t0 = clock_mono_ms();
    c = redis_conn_open(&o, err, sizeof err);
    assert_null(c);
    assert_true(clock_mono_ms() - t0 < 2500);
    char where[64];
    snprintf(where, sizeof where, "redis 127.0.0.1:%d: ", tls_srv_auth.port);
    fprintf(stderr, "    error: %s\n", err);
    assert_non_null(strstr(err, where));

    /* a key that is not the certificate's */
    o.tls.cert_file = cli_crt;
    o.tls.key_file = srv_key;
    c = redis_conn_open(&o, err, sizeof err);
    assert_null(c);
    expect_err(err, tls_srv_auth.port, "TLS: cannot load the client key");
    /* a missing CA file */
    o = opts_for(tls_srv.port);
    o.tls.ca_file = (char *)"/nonexistent/ca.pem";
    c = redis_conn_open(&o, err, sizeof err);
    assert_null(c);
    expect_err(err, tls_srv.port, "TLS: cannot load the CA file /nonexistent/ca.pem");
    wait_active(0);
}

static void test_unrelated_ca(void **state)
{
    (void)state;
    char err[512];
    struct baton_redis_opts o = opts_for(tls_srv.port);
    o.tls.ca_file = other_ca;
    redisContext *c = redis_conn_open(&o, err, sizeof err);
    assert_null(c);
    expect_err(err, tls_srv.port, "TLS: certificate verify failed");
    /* the system's store does not know the test CA either */
    o.tls.ca_file = NULL;
    c = redis_conn_open(&o, err, sizeof err);
    assert_null(c);
    expect_err(err, tls_srv.port, "TLS: certificate verify failed");
    wait_active(0);
}

static void test_wrong_server_name(void **state)
{
    (void)state;
    char err[512];
    struct baton_redis_opts o = opts_for(tls_srv.port);
    o.tls.server_name = (char *)"redis.example.com";
    redisContext *c = redis_conn_open(&o, err, sizeof err);
    assert_null(c);
    expect_err(err, tls_srv.port, "TLS: certificate verify failed: hostname mismatch");
    o.tls.server_name = (char *)"127.0.0.2"; /* an IP the certificate does not name */
    c = redis_conn_open(&o, err, sizeof err);
    assert_null(c);
    expect_err(err, tls_srv.port, "TLS: certificate verify failed: IP address mismatch");
    wait_active(0);
}

static void test_plain_text_against_tls_port(void **state)
{
    (void)state;
    char err[512];
    struct baton_redis_opts o = opts_for(tls_srv.port);
    o.tls.enabled = false;
    int64_t t0 = clock_mono_ms();
    redisContext *c = redis_conn_open(&o, err, sizeof err);
    assert_null(c);
    assert_true(clock_mono_ms() - t0 < 2500);
    expect_err(err, tls_srv.port, "TLS port?");
    o.password = (char *)"secret"; /* with AUTH pipelined as well */
    c = redis_conn_open(&o, err, sizeof err);
    assert_null(c);
    expect_err(err, tls_srv.port, "TLS port?");
}

static void test_tls_against_plain_port(void **state)
{
    (void)state;
    char err[512];
    int port = redis_server_port(plain_srv);
    struct baton_redis_opts o = opts_for(port);
    o.connect_timeout_ms = 1500;
    int64_t t0 = clock_mono_ms();
    redisContext *c = redis_conn_open(&o, err, sizeof err);
    int64_t took = clock_mono_ms() - t0;
    assert_null(c);
    assert_true(took < 2000);
    expect_err(err, port, "TLS: ");
    assert_true(strstr(err, "plain-text port") || strstr(err, "TLS port"));
    wait_active(0);
}

static void test_silent_server_times_out(void **state)
{
    (void)state;
    /* a listener that accepts (the kernel completes the TCP handshake) but
     * never answers: the TLS handshake gives up at the connect timeout */
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(l, 8), 0);
    socklen_t al = sizeof a;
    getsockname(l, (struct sockaddr *)&a, &al);
    int port = ntohs(a.sin_port);
    char err[512];
    struct baton_redis_opts o = opts_for(port);
    o.connect_timeout_ms = 700;
    int64_t t0 = clock_mono_ms();
    redisContext *c = redis_conn_open(&o, err, sizeof err);
    int64_t took = clock_mono_ms() - t0;
    assert_null(c);
    expect_err(err, port, "TLS: handshake timed out after 700 ms");
    assert_true(took >= 650 && took < 1200);
    close(l);
    /* nothing listening: refused, naming host:port */
    c = redis_conn_open(&o, err, sizeof err);
    assert_null(c);
    expect_err(err, port, "connect: Connection refused");
    wait_active(0);
}

static void test_server_stopped_and_killed(void **state)
{
    (void)state;
    char err[512];
    struct baton_redis_opts o = opts_for(tls_srv.port);
    o.command_timeout_ms = 500;
    redisContext *c = redis_conn_open(&o, err, sizeof err);
    assert_non_null(c);
    expect_status(c, "PONG", "PING");

    /* stopped: hiredis's command timeout applies on the socketpair end */
    launcher_cmd(&tls_launcher, "pause 0");
    int64_t t0 = clock_mono_ms();
    redisReply *r = redisCommand(c, "PING");
    int64_t took = clock_mono_ms() - t0;
    launcher_cmd(&tls_launcher, "resume 0");
    assert_null(r);
    fprintf(stderr, "    stopped server: '%s' after %lld ms\n", c->errstr, (long long)took);
    assert_true(took >= 400 && took < 1500);
    redisFree(c);

    /* killed: the session ends, hiredis reads EOF, the bridge frees it */
    c = redis_conn_open(&o, err, sizeof err);
    assert_non_null(c);
    expect_status(c, "PONG", "PING");
    wait_active(1);
    launcher_cmd(&tls_launcher, "kill 0");
    r = redisCommand(c, "PING");
    assert_null(r);
    fprintf(stderr, "    killed server: '%s'\n", c->errstr);
    redisFree(c);
    wait_active(0);
    c = redis_conn_open(&o, err, sizeof err);
    assert_null(c);
    expect_err(err, tls_srv.port, "connect: Connection refused");
    assert_int_equal(launcher_cmd(&tls_launcher, "restart 0"), 0);
    c = redis_conn_open(&o, err, sizeof err);
    assert_non_null(c);
    expect_status(c, "PONG", "PING");
    redisFree(c);
    wait_active(0);
}

int main(void)
{
    if (system("command -v redis-server >/dev/null 2>&1 && command -v openssl >/dev/null 2>&1") != 0) {
        fprintf(stderr, "redis-server or openssl not installed: skipped\n");
        return 77;
    }
    if (tls_servers_start() != 0) {
        fprintf(stderr, "cannot make the test certificates or start the TLS servers\n");
        return 1;
    }
    plain_srv = redis_server_start(NULL);
    if (plain_srv == NULL) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commands_over_tls),
        cmocka_unit_test(test_dns_name_and_server_name),
        cmocka_unit_test(test_pubsub_over_tls),
        cmocka_unit_test(test_many_connections_threads),
        cmocka_unit_test(test_client_certificate),
        cmocka_unit_test(test_unrelated_ca),
        cmocka_unit_test(test_wrong_server_name),
        cmocka_unit_test(test_plain_text_against_tls_port),
        cmocka_unit_test(test_tls_against_plain_port),
        cmocka_unit_test(test_silent_server_times_out),
        cmocka_unit_test(test_server_stopped_and_killed),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    launcher_stop(&tls_launcher);
    redis_server_destroy(plain_srv);
    return rc;
}
