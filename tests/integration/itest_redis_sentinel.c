/* Integration test of Redis Sentinel support (redis/sentinel.c,
 * redis_conn_open_ex with sentinels, the Redis locker following a failover)
 * against real processes on loopback: a master, a replica and three
 * redis-sentinel (tests/support/sentinel.h). In order, on one deployment:
 * discovery (a dead sentinel skipped, an unknown name, every sentinel down:
 * errors naming each), the ROLE check (a fake sentinel naming the replica),
 * SIGKILL of the master (the locker follows the new master, the watcher
 * counts +switch-master, the lease is kept or verified, epochs increase), the
 * old master restarted (it comes back as a replica) and a master demoted
 * behind the sentinels' back (READONLY: the connection is dropped, the
 * generation moves, rediscovery refuses the replica). Exit 77 when
 * redis-sentinel is not installed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/util.h"
#include "guard/locker.h"
#include "redis/open.h"
#include "redis/sentinel.h"
#include "common/util.h"
#include "tests/support/free_port.h"
#include "tests/support/sentinel.h"

#define NAME "bmaster"
#define DOWN_AFTER_MS 1000
#define FAILOVER_TIMEOUT_MS 3000

static struct sentinel_cluster *cl;
static char *sent_addrs[4];

static void opts_init(struct baton_redis_opts *o, char **sentinels, size_t n, const char *name)
{
    memset(o, 0, sizeof *o);
    o->sentinels = sentinels;
    o->n_sentinels = n;
    o->master_name = (char *)name;
    o->connect_timeout_ms = 500;
    o->command_timeout_ms = 1000;
}

static int conn_port(redisContext *c)
{
    redisReply *r = redisCommand(c, "CONFIG GET port");
    int p = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        p = (int)strtol(r->element[1]->str, NULL, 10);
    if (r) freeReplyObject(r);
    return p;
}

static void run_on(int port, const char *cmd)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    redisSetTimeout(c, tv);
    redisReply *r = redisCommand(c, cmd);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("%s on %d: %s", cmd, port, r->str);
    freeReplyObject(r);
    redisFree(c);
}

/* ---- a fake sentinel naming a fixed address -------------------------------- */

static int fake_port, fake_answer_port;
static atomic_bool fake_stop;
static pthread_t fake_thread;
static int fake_fd = -1;

static void *fake_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&fake_stop)) {
        struct pollfd p = {.fd = fake_fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) continue;
        int c = accept(fake_fd, NULL, NULL);
        if (c < 0) continue;
        char buf[512];
        struct pollfd q = {.fd = c, .events = POLLIN};
        while (poll(&q, 1, 2000) > 0 && read(c, buf, sizeof buf) > 0) {
            char port[16], rep[96];
            snprintf(port, sizeof port, "%d", fake_answer_port);
            int n = snprintf(rep, sizeof rep, "*2\r\n$9\r\n127.0.0.1\r\n$%zu\r\n%s\r\n",
                             strlen(port), port);
            if (write(c, rep, (size_t)n) != n) break;
        }
        close(c);
    }
    return NULL;
}

static void fake_start(int answer_port)
{
    fake_answer_port = answer_port;
    fake_port = test_free_port();
    fake_fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fake_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fake_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fake_fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fake_fd, 8), 0);
    atomic_store(&fake_stop, false);
    assert_int_equal(pthread_create(&fake_thread, NULL, fake_main, NULL), 0);
}

static void fake_stop_now(void)
{
    atomic_store(&fake_stop, true);
    pthread_join(fake_thread, NULL);
    close(fake_fd);
}

/* ---- tests ------------------------------------------------------------------ */

static void test_parse_and_failover_errors(void **state)
{
    (void)state;
    char h[64];
    int p;
    assert_true(redis_sentinel_parse_addr("10.0.0.1:26380", h, sizeof h, &p));
    assert_string_equal(h, "10.0.0.1");
    assert_int_equal(p, 26380);
    assert_true(redis_sentinel_parse_addr("sentinel-a", h, sizeof h, &p));
    assert_int_equal(p, 26379);
    assert_true(redis_sentinel_parse_addr("[::1]:5000", h, sizeof h, &p));
    assert_string_equal(h, "::1");
    assert_int_equal(p, 5000);
    assert_false(redis_sentinel_parse_addr(":26379", h, sizeof h, &p));
    assert_false(redis_sentinel_parse_addr("h:0", h, sizeof h, &p));
    assert_false(redis_sentinel_parse_addr("h:x", h, sizeof h, &p));
    assert_true(redis_failover_error("READONLY You can't write against a read only replica."));
    assert_true(redis_failover_error("MASTERDOWN Link with MASTER is down"));
    assert_true(redis_failover_error("LOADING Redis is loading the dataset in memory"));
    assert_true(redis_failover_error(
        "ERR Error running script (call to f_x): @user_script:9: -READONLY You can't write"));
    assert_false(redis_failover_error("ERR unknown command"));
    assert_false(redis_failover_error("READONLYX"));
}

static void test_discovery(void **state)
{
    (void)state;
    struct baton_redis_opts o;
    char host[64], err[1024];
    int port = 0;
    opts_init(&o, sent_addrs, 3, NAME);
    assert_int_equal(redis_sentinel_resolve(&o, host, sizeof host, &port, err, sizeof err), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, sentinel_cluster_redis_port(cl, 0));

    /* a dead sentinel first: the next one answers */
    char dead[32];
    snprintf(dead, sizeof dead, "127.0.0.1:%d", test_free_port());
    char *with_dead[2] = {dead, sent_addrs[0]};
    opts_init(&o, with_dead, 2, NAME);
    assert_int_equal(redis_sentinel_resolve(&o, host, sizeof host, &port, err, sizeof err), 0);
    assert_int_equal(port, sentinel_cluster_redis_port(cl, 0));

    /* an unknown name: every sentinel named, with the reason */
    opts_init(&o, with_dead, 2, "nosuchmaster");
    assert_int_equal(redis_sentinel_resolve(&o, host, sizeof host, &port, err, sizeof err), -1);
    printf("    unknown name: %s\n", err);
    assert_non_null(strstr(err, "redis nosuchmaster via sentinels"));
    assert_non_null(strstr(err, dead));
    assert_non_null(strstr(err, "connect"));
    assert_non_null(strstr(err, sent_addrs[0]));
    assert_non_null(strstr(err, "does not know master"));

    /* everything down, through redis_conn_open_ex: not "refused" (transient) */
    char dead2[32];
    snprintf(dead2, sizeof dead2, "127.0.0.1:%d", test_free_port());
    char *all_dead[2] = {dead, dead2};
    opts_init(&o, all_dead, 2, NAME);
    bool refused = true;
    redisContext *c = redis_conn_open_ex(&o, err, sizeof err, &refused);
    assert_null(c);
    assert_false(refused);
    printf("    all down: %s\n", err);
    assert_non_null(strstr(err, dead));
    assert_non_null(strstr(err, dead2));
}

static void test_open_checks_role(void **state)
{
    (void)state;
    struct baton_redis_opts o;
    char err[1024];
    opts_init(&o, sent_addrs, 3, NAME);
    redisContext *c = redis_conn_open_ex(&o, err, sizeof err, NULL);
    assert_non_null(c);
    assert_int_equal(conn_port(c), sentinel_cluster_redis_port(cl, 0));
    redisFree(c);

    /* a sentinel naming the replica (a stale answer): refused after one retry */
    int replica = sentinel_cluster_redis_port(cl, 1);
    fake_start(replica);
    char fake[32];
    snprintf(fake, sizeof fake, "127.0.0.1:%d", fake_port);
    char *fakes[1] = {fake};
    opts_init(&o, fakes, 1, NAME);
    c = redis_conn_open_ex(&o, err, sizeof err, NULL);
    fake_stop_now();
    assert_null(c);
    printf("    stale sentinel: %s\n", err);
    char want[128];
    snprintf(want, sizeof want, "redis " NAME " via sentinels: 127.0.0.1:%d is a replica", replica);
    assert_string_equal(err, want);
}

static void test_failover_and_readonly(void **state)
{
    (void)state;
    struct baton_redis_opts o;
    char err[BATON_LOCKER_ERR_MAX];
    opts_init(&o, sent_addrs, 3, NAME);
    struct baton_locker *a = baton_locker_redis_create(&o, err);
    struct baton_locker *b = baton_locker_redis_create(&o, err);
    assert_non_null(a);
    assert_non_null(b);
    struct redis_sentinel_watch *w = redis_sentinel_watch_acquire(&o); /* shares a's watcher */
    assert_non_null(w);
    char where[200];
    a->ops->where(a, where, sizeof where);
    printf("    where: %s\n", where);
    assert_non_null(strstr(where, "sentinel master " NAME));

    struct baton_lock_grant g1;
    assert_int_equal(baton_locker_try_lock(a, "sk", 30000, &g1, err), BATON_LOCKER_OK);
    uint64_t gen1 = a->ops->generation(a);
    uint64_t sw0 = redis_sentinel_watch_count(w);
    int old_master = sentinel_cluster_redis_port(cl, 0);
    assert_true(sentinel_cluster_wait_replica_synced(cl, 1, 5000));
    usleep(300 * 1000); /* the lease reaches the replica */

    int64_t t0 = clock_mono_ms();
    assert_int_equal(sentinel_cluster_kill_redis(cl, 0), 0);
    int nm = sentinel_cluster_wait_new_master(cl, old_master, 30000);
    int64_t t_switch = clock_mono_ms() - t0;
    assert_int_equal(nm, sentinel_cluster_redis_port(cl, 1));

    /* the lease holder follows: check answers from the new master */
    int rc = BATON_LOCKER_ERR;
    int64_t deadline = clock_mono_ms() + 10000;
    while (clock_mono_ms() < deadline) {
        rc = a->ops->check(a, "sk", g1.token, err);
        if (rc != BATON_LOCKER_ERR) break;
        usleep(100 * 1000);
    }
    int64_t t_follow = clock_mono_ms() - t0;
    printf("    master SIGKILLed: sentinels agree on %d after %lld ms, locker answers after %lld "
           "ms (down-after %d ms)\n",
           nm, (long long)t_switch, (long long)t_follow, DOWN_AFTER_MS);
    assert_int_equal(rc, BATON_LOCKER_OK); /* the lease had been replicated */
    assert_true(a->ops->generation(a) > gen1);
    a->ops->where(a, where, sizeof where);
    printf("    where: %s\n", where);
    char nmaddr[32];
    snprintf(nmaddr, sizeof nmaddr, "127.0.0.1:%d", nm);
    assert_non_null(strstr(where, nmaddr));
    /* the watcher saw +switch-master */
    deadline = clock_mono_ms() + 5000;
    while (redis_sentinel_watch_count(w) == sw0 && clock_mono_ms() < deadline) usleep(50 * 1000);
    assert_true(redis_sentinel_watch_count(w) > sw0);

    /* another locker through the sentinels sees the lease; epochs increase */
    struct baton_lock_grant gb;
    rc = BATON_LOCKER_ERR;
    deadline = clock_mono_ms() + 5000;
    while (clock_mono_ms() < deadline &&
           (rc = baton_locker_try_lock(b, "sk", 30000, &gb, err)) == BATON_LOCKER_ERR)
        usleep(100 * 1000);
    assert_int_equal(rc, BATON_LOCKER_HELD);
    struct baton_lock_grant g2;
    assert_int_equal(baton_locker_try_lock(a, "sk2", 30000, &g2, err), BATON_LOCKER_OK);
    assert_true(g2.epoch > g1.epoch);

    /* the old master comes back (empty): the sentinels make it a replica.
     * They may also fail over once more (seen once on a loaded 2-core CI
     * machine: +switch-master back to the restarted, empty server); what
     * follows only needs a settled deployment, so it takes a fresh lease on
     * whichever master the sentinels agree on. */
    assert_int_equal(sentinel_cluster_restart_redis(cl, 0), 0);
    int settled = sentinel_cluster_wait_settled(cl, 30000);
    if (settled != nm) {
        fprintf(stderr, "    the sentinels settled on %d, not %d; their logs:\n", settled, nm);
        sentinel_cluster_dump_logs(cl, 30);
    }
    assert_true(settled > 0);
    nm = settled;
    rc = BATON_LOCKER_ERR;
    deadline = clock_mono_ms() + 10000;
    while (clock_mono_ms() < deadline &&
           (rc = baton_locker_try_lock(a, "sk3", 30000, &g1, err)) == BATON_LOCKER_ERR)
        usleep(100 * 1000);
    assert_int_equal(rc, BATON_LOCKER_OK);
    a->ops->where(a, where, sizeof where);
    snprintf(nmaddr, sizeof nmaddr, "127.0.0.1:%d", nm);
    assert_non_null(strstr(where, nmaddr));

    /* the master demoted behind the sentinels' back: READONLY drops the
     * connection and moves the generation; rediscovery refuses the replica */
    char cmd[64];
    snprintf(cmd, sizeof cmd, "REPLICAOF 127.0.0.1 %d", test_free_port());
    uint64_t gen2 = a->ops->generation(a);
    run_on(nm, cmd);
    int64_t renew_sent = 0;
    rc = baton_locker_renew(a, "sk3", g1.token, 30000, &renew_sent, err);
    printf("    renew on a demoted master: rc %d: %s\n", rc, err);
    assert_int_equal(rc, BATON_LOCKER_ERR);
    assert_non_null(strstr(err, "READONLY"));
    assert_true(a->ops->generation(a) > gen2);
    rc = a->ops->check(a, "sk3", g1.token, err);
    printf("    reconnect: rc %d: %s\n", rc, err);
    run_on(nm, "REPLICAOF NO ONE");
    assert_int_equal(rc, BATON_LOCKER_ERR);
    assert_non_null(strstr(err, "is a replica"));
    /* the side connection (claim) drops on READONLY too */
    rc = BATON_LOCKER_ERR;
    deadline = clock_mono_ms() + 5000;
    while (clock_mono_ms() < deadline && (rc = a->ops->check(a, "sk3", g1.token, err)) == BATON_LOCKER_ERR)
        usleep(100 * 1000);
    assert_int_equal(rc, BATON_LOCKER_OK);
    assert_int_equal(baton_locker_claim(a, "claim1", 30000, err), BATON_LOCKER_OK);
    run_on(nm, cmd);
    rc = baton_locker_claim(a, "claim2", 30000, err);
    run_on(nm, "REPLICAOF NO ONE");
    printf("    claim on a demoted master: rc %d: %s\n", rc, err);
    assert_int_equal(rc, BATON_LOCKER_ERR);
    assert_non_null(strstr(err, "READONLY"));

    redis_sentinel_watch_release(w);
    baton_locker_destroy(b);
    baton_locker_destroy(a);
}

static int group_setup(void **state)
{
    (void)state;
    cl = sentinel_cluster_start(NAME, 2, 3, DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS);
    if (cl == NULL) return -1;
    for (int i = 0; i < 3; i++) {
        sent_addrs[i] = malloc(32);
        snprintf(sent_addrs[i], 32, "127.0.0.1:%d", sentinel_cluster_sentinel_port(cl, i));
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    sentinel_cluster_destroy(cl);
    for (int i = 0; i < 3; i++) free(sent_addrs[i]);
    return 0;
}

int main(void)
{
    if (system("command -v redis-sentinel >/dev/null 2>&1") != 0) {
        fprintf(stderr, "redis-sentinel not installed: skipped\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_and_failover_errors),
        cmocka_unit_test(test_discovery),
        cmocka_unit_test(test_open_checks_role),
        cmocka_unit_test(test_failover_and_readonly),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
