/* Integration test of the redis_psub endpoint in-process, against a real
 * redis-server started on a free loopback port: subscription confirmed
 * before start() returns, prompt stop(), start failure when the source is
 * down, reconnect after a restart, source_lost after the lease ttl (closed
 * port and a stopped server detected by PING), unguarded background retry,
 * repeated start/stop cycles. A fake host records what the endpoint emits.
 * Runs under ASan/TSan/valgrind like any cmocka test. */
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
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "endpoints/redis_psub.h"
#include "common/util.h"
#include "tests/support/free_port.h"
#include "tests/support/redis_server.h"

extern const struct endpoint_ops ep_redis_psub_ops;

/* ---- a redis-server of our own (tests/support/redis_server.h) ---------- */

static struct redis_server *redis_srv;
static int redis_port;

/* (Again) on its port, with empty data. */
static void redis_start(void)
{
    assert_int_equal(redis_server_restart(redis_srv), 0);
}

/* SIGTERM, reaped. */
static void redis_stop(void)
{
    redis_server_term(redis_srv);
}

static long long publish(const char *channel, const char *payload)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", redis_port, tv);
    long long n = -1;
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "PUBLISH %s %s", channel, payload);
        if (r && r->type == REDIS_REPLY_INTEGER) n = r->integer;
        if (r) freeReplyObject(r);
    }
    if (c) redisFree(c);
    return n;
}

/* ---- a fake host -------------------------------------------------------- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int emitted;
static char last_json[1024];
static int lost_calls;
static int64_t lost_at_ms;
static char lost_reason[1024];

static int fake_emit(struct endpoint_host *h, struct message *m)
{
    (void)h;
    pthread_mutex_lock(&mu);
    emitted++;
    snprintf(last_json, sizeof last_json, "%s", m->json);
    pthread_mutex_unlock(&mu);
    message_finish(m, MSG_DELIVERED);
    return 0;
}
static bool fake_leader_now(const struct endpoint_host *h) { (void)h; return true; }
static uint64_t fake_epoch(const struct endpoint_host *h) { (void)h; return 7; }
static void fake_source_lost(struct endpoint_host *h, const char *reason)
{
    (void)h;
    pthread_mutex_lock(&mu);
    if (lost_calls++ == 0) lost_at_ms = clock_mono_ms();
    snprintf(lost_reason, sizeof lost_reason, "%s", reason);
    pthread_mutex_unlock(&mu);
}
static bool fake_stopping(const struct endpoint_host *h) { (void)h; return false; }

static struct ep_stats stats;
static struct endpoint_host host;

static int get_emitted(void)
{
    pthread_mutex_lock(&mu);
    int n = emitted;
    pthread_mutex_unlock(&mu);
    return n;
}
static int get_lost(void)
{
    pthread_mutex_lock(&mu);
    int n = lost_calls;
    pthread_mutex_unlock(&mu);
    return n;
}

static char *patterns[] = {(char *)"chan.*"};
static char *channels[] = {(char *)"plain"};
static struct redis_psub_settings settings;

static int setup(void **state)
{
    (void)state;
    memset(&stats, 0, sizeof stats);
    memset(&host, 0, sizeof host);
    host.name = "itest";
    host.type = "redis_psub";
    host.guard = GUARD_ACTIVE;
    host.lease_ttl_ms = 500;
    host.stats = &stats;
    host.emit = fake_emit;
    host.leader_now = fake_leader_now;
    host.epoch = fake_epoch;
    host.source_lost = fake_source_lost;
    host.stopping = fake_stopping;
    emitted = lost_calls = 0;
    last_json[0] = lost_reason[0] = 0;
    memset(&settings, 0, sizeof settings);
    settings.conn.host = (char *)"127.0.0.1";
    settings.conn.port = redis_port;
    settings.conn.connect_timeout_ms = 200;
    settings.conn.command_timeout_ms = 200;
    settings.patterns.v = patterns;
    settings.patterns.n = 1;
    settings.channels.v = channels;
    settings.channels.n = 1;
    settings.reconnect_min_ms = 20;
    settings.reconnect_max_ms = 100;
    settings.ping_interval_ms = 100;
    if (!redis_server_running(redis_srv)) redis_start();
    return 0;
}

static void *create_ep(void)
{
    char err[512] = "";
    void *ep = ep_redis_psub_ops.create(&settings, &host, err, sizeof err);
    if (!ep) fail_msg("create: %s", err);
    return ep;
}

static bool wait_for(int (*get)(void), int want, int64_t timeout_ms)
{
    int64_t end = clock_mono_ms() + timeout_ms;
    while (get() < want) {
        if (clock_mono_ms() > end) return false;
        sleep_ms_cancellable(5, NULL);
    }
    return true;
}

/* start() returns only once subscribed: a PUBLISH right after reaches us */
static void test_start_confirms_then_forwards(void **state)
{
    (void)state;
    void *ep = create_ep();
    assert_int_equal(ep_redis_psub_ops.start(ep), 0);
    assert_int_equal(publish("chan.x", "hello"), 1);
    assert_true(wait_for(get_emitted, 1, 2000));
    pthread_mutex_lock(&mu);
    assert_non_null(strstr(last_json, "\"epoch\":7"));
    assert_non_null(strstr(last_json, "\"channel\":\"chan.x\",\"pattern\":\"chan.*\",\"payload\":\"hello\""));
    pthread_mutex_unlock(&mu);
    assert_int_equal(publish("plain", "p2"), 1);
    assert_true(wait_for(get_emitted, 2, 2000));
    pthread_mutex_lock(&mu);
    assert_non_null(strstr(last_json, "\"channel\":\"plain\",\"payload\":\"p2\""));
    assert_null(strstr(last_json, "pattern"));
    pthread_mutex_unlock(&mu);
    ep_redis_psub_ops.stop(ep);
    assert_int_equal(publish("chan.x", "after"), 0); /* unsubscribed */
    ep_redis_psub_ops.destroy(ep);
}

/* stop() interrupts a blocked read at once (no waiting for a timeout) */
static void test_stop_is_prompt(void **state)
{
    (void)state;
    settings.ping_interval_ms = 0; /* the read blocks without any timeout */
    void *ep = create_ep();
    assert_int_equal(ep_redis_psub_ops.start(ep), 0);
    sleep_ms_cancellable(100, NULL);
    int64_t t0 = clock_mono_us();
    ep_redis_psub_ops.stop(ep);
    int64_t us = clock_mono_us() - t0;
    printf("    stop() took %lld us\n", (long long)us);
    assert_true(us < 100000);
    ep_redis_psub_ops.destroy(ep);
}

static void test_start_cycles(void **state)
{
    (void)state;
    void *ep = create_ep();
    for (int i = 0; i < 20; i++) {
        assert_int_equal(ep_redis_psub_ops.start(ep), 0);
        ep_redis_psub_ops.stop(ep);
    }
    assert_int_equal(ep_redis_psub_ops.start(ep), 0);
    assert_int_equal(publish("chan.y", "x"), 1);
    ep_redis_psub_ops.destroy(ep); /* destroy stops a running endpoint */
}

static void test_start_fails_when_source_down(void **state)
{
    (void)state;
    settings.conn.port = test_free_port();
    void *ep = create_ep();
    int64_t t0 = clock_mono_ms();
    assert_int_equal(ep_redis_psub_ops.start(ep), -1);
    assert_true(clock_mono_ms() - t0 < 1000);
    assert_int_equal(get_lost(), 0);
    ep_redis_psub_ops.stop(ep); /* harmless after a failed start */
    ep_redis_psub_ops.destroy(ep);
}

static void test_reconnects_after_restart(void **state)
{
    (void)state;
    host.lease_ttl_ms = 5000;
    void *ep = create_ep();
    assert_int_equal(ep_redis_psub_ops.start(ep), 0);
    redis_stop();
    sleep_ms_cancellable(100, NULL);
    redis_start();
    int64_t end = clock_mono_ms() + 3000;
    while (publish("chan.x", "back") != 1 && clock_mono_ms() < end) sleep_ms_cancellable(10, NULL);
    assert_true(wait_for(get_emitted, 1, 2000));
    assert_true(atomic_load(&stats.source_errors) >= 1);
    assert_int_equal(get_lost(), 0);
    ep_redis_psub_ops.stop(ep);
    ep_redis_psub_ops.destroy(ep);
}

/* source closed for longer than the ttl -> source_lost once, thread ends */
static void test_source_lost_after_ttl(void **state)
{
    (void)state;
    void *ep = create_ep();
    assert_int_equal(ep_redis_psub_ops.start(ep), 0);
    int64_t t0 = clock_mono_ms();
    redis_stop();
    assert_true(wait_for(get_lost, 1, 3000));
    int64_t after = lost_at_ms - t0;
    printf("    source_lost %lld ms after the server stopped (ttl %lld): %s\n", (long long)after,
           (long long)host.lease_ttl_ms, lost_reason);
    assert_true(after >= host.lease_ttl_ms - 20 && after < host.lease_ttl_ms + 700);
    assert_non_null(strstr(lost_reason, "unreachable"));
    sleep_ms_cancellable(200, NULL);
    assert_int_equal(get_lost(), 1); /* once: the thread ended */
    ep_redis_psub_ops.stop(ep);
    ep_redis_psub_ops.destroy(ep);
    redis_start();
}

/* a stopped server keeps the socket open: PING finds it dead */
static void test_stopped_server_detected_by_ping(void **state)
{
    (void)state;
    void *ep = create_ep();
    assert_int_equal(ep_redis_psub_ops.start(ep), 0);
    int64_t t0 = clock_mono_ms();
    kill(redis_server_pid(redis_srv), SIGSTOP);
    bool lost = wait_for(get_lost, 1, 4000);
    kill(redis_server_pid(redis_srv), SIGCONT);
    assert_true(lost);
    printf("    stopped server: source_lost after %lld ms: %s\n", (long long)(lost_at_ms - t0),
           lost_reason);
    ep_redis_psub_ops.stop(ep);
    ep_redis_psub_ops.destroy(ep);
}

/* unguarded: start() returns 0 at once and subscribes in the background */
static void test_unguarded_retries_in_background(void **state)
{
    (void)state;
    redis_stop();
    host.guard = GUARD_NONE;
    void *ep = create_ep();
    assert_int_equal(ep_redis_psub_ops.start(ep), 0);
    sleep_ms_cancellable(300, NULL);
    redis_start();
    int64_t end = clock_mono_ms() + 3000;
    while (publish("chan.x", "late") != 1 && clock_mono_ms() < end) sleep_ms_cancellable(10, NULL);
    assert_true(wait_for(get_emitted, 1, 2000));
    assert_int_equal(get_lost(), 0);
    ep_redis_psub_ops.stop(ep);
    ep_redis_psub_ops.destroy(ep);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    redis_srv = redis_server_start(NULL);
    if (redis_srv == NULL) return 1;
    redis_port = redis_server_port(redis_srv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_start_confirms_then_forwards, setup),
        cmocka_unit_test_setup(test_stop_is_prompt, setup),
        cmocka_unit_test_setup(test_start_cycles, setup),
        cmocka_unit_test_setup(test_start_fails_when_source_down, setup),
        cmocka_unit_test_setup(test_reconnects_after_restart, setup),
        cmocka_unit_test_setup(test_source_lost_after_ttl, setup),
        cmocka_unit_test_setup(test_stopped_server_detected_by_ping, setup),
        cmocka_unit_test_setup(test_unguarded_retries_in_background, setup),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    redis_server_destroy(redis_srv);
    return rc;
}
