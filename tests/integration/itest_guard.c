/* Guard library against a real backend, one parameterised suite run once per
 * locker backend: `itest_guard redis` (a redis-server, tests/support/
 * redis_server) and `itest_guard etcd` (a single etcd member,
 * tests/support/etcd_server); the backend comes from argv[1], else from
 * BATON_GUARD_BACKEND, else redis.
 *
 * Both backends: token CAS, expiry, epochs strictly increasing, an
 * unreachable backend, a wrong password, held is never an error, release
 * counters a standby cannot miss, the generation carried by the grant,
 * claim / holder / ping / inspect, shared state beside a lease (fenced_set /
 * shared_get), a backend restart under two ActiveGuards, the backend paused
 * under three, and three ActiveGuards handing over while the leader is
 * repeatedly stopped. The sampler asserts that never two guards are leader
 * at once. Redis only (skipped for etcd): script cache loss, non-string
 * keys, orphaned acquisitions per key, the side connection's generation.
 *
 * etcd differs where the backend does: lease TTLs are whole seconds of at
 * least 2000 ms (T() below), epochs are revisions (no clock floor), data
 * survives a restart (no "Redis lost its data" case), expiry is checked by
 * the member about every 500 ms (wider time bounds). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <json-c/json.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "baton/active_guard.h"
#include "guard/etcd_conn.h"
#include "guard/locker.h"
#include "baton/once_guard.h"
#include "redis/open.h"
#include "common/log.h"
#include "common/util.h"
#include "baton/pg.h"
#include "tests/support/etcd_server.h"
#include "tests/support/pg_server.h"
#include "tests/support/redis_server.h"
#include "tests/support/wait.h"

/* ---- the backend under test ---------------------------------------------------- */

enum backend { BK_REDIS, BK_ETCD, BK_PG };
static enum backend BK = BK_REDIS;
static const char *const BK_NAME[] = {"redis", "etcd", "postgresql"};
#define IS_ETCD (BK == BK_ETCD)
#define IS_PG (BK == BK_PG)
/* The backend keeps its data across a crash (etcd, PostgreSQL; Redis here
 * restarts empty). */
#define DURABLE (BK != BK_REDIS)

/* Tests about Redis itself (its scripts, types, connections). */
#define REDIS_ONLY()                                                     \
    do {                                                                 \
        if (BK != BK_REDIS) {                                            \
            printf("skipped: a Redis-only test\n");                      \
            skip();                                                      \
        }                                                                \
    } while (0)

/* One server of the backend under test. */
struct srv {
    struct redis_server *r;
    struct etcd_server *e;
    struct pg_server *p;
    pid_t redis_pid; /* srv_pause: a paused Redis cannot be asked for it */
};

static struct baton_pg_opts pg_opts(const struct pg_server *p, int timeout_ms)
{
    struct baton_pg_opts o = {.conninfo = (char *)pg_server_conninfo(p),
                              .connect_timeout_ms = timeout_ms,
                              .command_timeout_ms = timeout_ms};
    return o;
}

static struct srv shared;

static bool srv_open(struct srv *s)
{
    memset(s, 0, sizeof *s);
    if (IS_ETCD) {
        s->e = etcd_server_start(NULL);
    } else if (IS_PG) {
        s->p = pg_server_start();
        char err[BATON_LOCKER_ERR_MAX];
        struct baton_pg_opts o = pg_opts(s->p, 5000);
        if (s->p && baton_locker_pg_init_schema(&o, err) != 0) {
            fprintf(stderr, "baton_locker_pg_init_schema: %s\n", err);
            pg_server_destroy(s->p);
            s->p = NULL;
        }
    } else {
        s->r = redis_server_start(NULL);
    }
    return s->r || s->e || s->p;
}

static struct srv *srv_start(void)
{
    struct srv *s = calloc(1, sizeof *s);
    assert_non_null(s);
    assert_true(srv_open(s));
    return s;
}

static void srv_destroy(struct srv *s)
{
    if (s == NULL) return;
    redis_server_destroy(s->r);
    etcd_server_destroy(s->e);
    pg_server_destroy(s->p);
    if (s != &shared) free(s);
}

static int srv_port(const struct srv *s)
{
    return s->e ? etcd_server_port(s->e) : s->p ? pg_server_port(s->p) : redis_server_port(s->r);
}

/* A crash: SIGKILL. Redis loses its data, etcd and PostgreSQL keep it. */
static int srv_kill(struct srv *s)
{
    return s->e ? etcd_server_kill(s->e) : s->p ? pg_server_kill(s->p) : redis_server_stop(s->r);
}

static int srv_restart(struct srv *s)
{
    return s->e ? etcd_server_restart(s->e) : s->p ? pg_server_restart(s->p) : redis_server_restart(s->r);
}

/* Lease TTLs: as given for Redis; whole seconds of at least 2000 ms for etcd. */
static int64_t T(int64_t ms)
{
    if (!IS_ETCD) return ms;
    int64_t r = (ms + 999) / 1000 * 1000;
    return r < 2000 ? 2000 : r;
}

static struct baton_redis_opts opts_for(int port, const char *password)
{
    struct baton_redis_opts o = {.host = "127.0.0.1", .port = port, .password = (char *)password,
                           .connect_timeout_ms = 500, .command_timeout_ms = 500};
    return o;
}

static struct baton_locker *redis_locker(int port)
{
    struct baton_redis_opts o = opts_for(port, NULL);
    char err[BATON_LOCKER_ERR_MAX];
    struct baton_locker *l = baton_locker_redis_create(&o, err);
    if (l == NULL) fprintf(stderr, "baton_locker_redis_create: %s\n", err);
    assert_non_null(l);
    return l;
}

/* An etcd locker on url (NULL user: no auth); NULL with err on failure. */
static struct baton_locker *etcd_locker_try(const char *url, const char *user, const char *password,
                                      char err[BATON_LOCKER_ERR_MAX])
{
    char *eps[1] = {(char *)url};
    struct baton_etcd_opts o = {.endpoints = eps, .n_endpoints = 1, .user = (char *)user,
                          .password = (char *)password, .connect_timeout_ms = 500,
                          .command_timeout_ms = 500};
    return baton_locker_etcd_create(&o, err);
}

static struct baton_locker *etcd_locker(const char *url)
{
    char err[BATON_LOCKER_ERR_MAX];
    struct baton_locker *l = etcd_locker_try(url, NULL, NULL, err);
    if (l == NULL) fprintf(stderr, "baton_locker_etcd_create: %s\n", err);
    assert_non_null(l);
    return l;
}

static struct baton_locker *pg_locker(const struct pg_server *p, int timeout_ms)
{
    char err[BATON_LOCKER_ERR_MAX];
    struct baton_pg_opts o = pg_opts(p, timeout_ms);
    struct baton_locker *l = baton_locker_pg_create(&o, err);
    if (l == NULL) fprintf(stderr, "baton_locker_pg_create: %s\n", err);
    assert_non_null(l);
    return l;
}

static struct baton_locker *locker_for(const struct srv *s)
{
    if (s->p) return pg_locker(s->p, 500);
    return s->e ? etcd_locker(etcd_server_url(s->e)) : redis_locker(redis_server_port(s->r));
}

/* A locker with a command timeout of timeout_ms, for tests of correctness rather than of
 * timeouts: on a loaded 2-core CI machine an etcd round trip can exceed 500 ms. */
static struct baton_locker *locker_patient(const struct srv *s, int timeout_ms)
{
    char err[BATON_LOCKER_ERR_MAX];
    struct baton_locker *l;
    if (s->p) return pg_locker(s->p, timeout_ms);
    if (s->e) {
        char *eps[1] = {(char *)etcd_server_url(s->e)};
        struct baton_etcd_opts o = {.endpoints = eps, .n_endpoints = 1,
                                    .connect_timeout_ms = timeout_ms,
                                    .command_timeout_ms = timeout_ms};
        l = baton_locker_etcd_create(&o, err);
    } else {
        struct baton_redis_opts o = opts_for(redis_server_port(s->r), NULL);
        o.connect_timeout_ms = o.command_timeout_ms = timeout_ms;
        l = baton_locker_redis_create(&o, err);
    }
    if (l == NULL) fprintf(stderr, "locker_patient: %s\n", err);
    assert_non_null(l);
    return l;
}

#define LOCKER() locker_for(&shared)

static redisReply *raw(int port, const char *fmt, ...)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    assert_non_null(r);
    return r;
}

/* ---- raw etcd access (the JSON gateway, keys and values base64) ---------------- */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void b64enc(const char *in, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned char)in[i] << 16;
        if (i + 1 < n) v |= (unsigned char)in[i + 1] << 8;
        if (i + 2 < n) v |= (unsigned char)in[i + 2];
        out[o++] = B64[(v >> 18) & 63];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = i + 1 < n ? B64[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? B64[v & 63] : '=';
    }
    out[o] = '\0';
}

/* Decodes into out (NUL terminated); returns the decoded length. */
static size_t b64dec(const char *in, char *out, size_t cap)
{
    size_t o = 0;
    unsigned v = 0;
    int bits = 0;
    for (; *in && *in != '='; in++) {
        const char *p = strchr(B64, *in);
        if (p == NULL) continue;
        v = (v << 6) | (unsigned)(p - B64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o + 1 < cap) out[o++] = (char)((v >> bits) & 0xff);
        }
    }
    if (cap) out[o] = '\0';
    return o;
}

/* A range of key on the member: 1 present (value, its lease id, its
 * mod_revision filled when asked), 0 absent. */
static int eraw_range(struct etcd_server *s, const char *key, char *val, size_t vlen,
                      size_t *vn, long long *lease, long long *mod_rev)
{
    char kb[512], body[600], out[16384];
    b64enc(key, strlen(key), kb);
    snprintf(body, sizeof body, "{\"key\":\"%s\"}", kb);
    int st = etcd_server_http(s, "/v3/kv/range", body, NULL, out, sizeof out, 3000);
    if (st != 200) fail_msg("etcd range %s: HTTP %d %s", key, st, out);
    json_object *o = json_tokener_parse(out), *kvs, *f;
    assert_non_null(o);
    int present = 0;
    if (json_object_object_get_ex(o, "kvs", &kvs) && json_object_array_length(kvs) > 0) {
        json_object *kv = json_object_array_get_idx(kvs, 0);
        present = 1;
        if (val) {
            val[0] = '\0';
            size_t n = 0;
            if (json_object_object_get_ex(kv, "value", &f))
                n = b64dec(json_object_get_string(f), val, vlen);
            if (vn) *vn = n;
        }
        if (lease)
            *lease = json_object_object_get_ex(kv, "lease", &f)
                         ? strtoll(json_object_get_string(f), NULL, 10)
                         : 0;
        if (mod_rev)
            *mod_rev = json_object_object_get_ex(kv, "mod_revision", &f)
                           ? strtoll(json_object_get_string(f), NULL, 10)
                           : 0;
    }
    json_object_put(o);
    return present;
}

/* Remaining ms of lease id (-1 expired or unknown). */
static long long eraw_lease_ttl_ms(struct etcd_server *s, long long id)
{
    char body[64], out[1024];
    snprintf(body, sizeof body, "{\"ID\":\"%lld\"}", id);
    int st = etcd_server_http(s, "/v3/lease/timetolive", body, NULL, out, sizeof out, 3000);
    if (st != 200) return -1;
    json_object *o = json_tokener_parse(out), *f;
    long long ttl = -1;
    if (o && json_object_object_get_ex(o, "TTL", &f)) ttl = strtoll(json_object_get_string(f), NULL, 10);
    json_object_put(o);
    return ttl < 0 ? -1 : ttl * 1000;
}

/* ---- raw PostgreSQL access (psql) ---------------------------------------------- */

/* Runs sql on p (fails the test on an error): its output, rows one a line,
 * the trailing newline removed. */
static void praw(const struct pg_server *p, char *out, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void praw(const struct pg_server *p, char *out, size_t len, const char *fmt, ...)
{
    char sql[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    int rc = pg_server_sql(p, sql, out, len);
    if (rc != 0) fail_msg("psql %s: exit %d: %s", sql, rc, out);
    size_t n = strlen(out);
    while (n > 0 && out[n - 1] == '\n') out[--n] = '\0';
}

/* What a key name means in the PostgreSQL backend's tables: a live lease
 * of that key, or a live shared value "<lease key>:<name>" (the tests' keys
 * need no quoting). */
#define PG_LIVE(col)                                                                    \
    "SELECT " col " FROM baton_leases WHERE key = '%s' AND token IS NOT NULL "         \
    "AND expires_at > clock_timestamp() UNION ALL SELECT " col " FROM baton_shared "   \
    "WHERE key || ':' || name = '%s' AND expires_at > clock_timestamp()"
#define PG_TTL "ceil(extract(epoch FROM (expires_at - clock_timestamp())) * 1000)::bigint"

/* Backend-neutral raw reads of the shared server. */
static bool raw_exists(const char *key)
{
    if (IS_PG) {
        char out[256];
        praw(shared.p, out, sizeof out, PG_LIVE("1"), key, key);
        return out[0] != '\0';
    }
    if (IS_ETCD) return eraw_range(shared.e, key, NULL, 0, NULL, NULL, NULL) == 1;
    redisReply *r = raw(redis_server_port(shared.r), "EXISTS %s", key);
    bool e = r->integer == 1;
    freeReplyObject(r);
    return e;
}

static void raw_value(const char *key, char *buf, size_t len)
{
    buf[0] = '\0';
    if (IS_ETCD) {
        assert_int_equal(eraw_range(shared.e, key, buf, len, NULL, NULL, NULL), 1);
        return;
    }
    if (IS_PG) { /* a lease's token, or a shared value (text) */
        praw(shared.p, buf, len,
             "SELECT token FROM baton_leases WHERE key = '%s' AND token IS NOT NULL "
             "AND expires_at > clock_timestamp() UNION ALL SELECT encode(value, 'escape') "
             "FROM baton_shared WHERE key || ':' || name = '%s' AND expires_at > clock_timestamp()",
             key, key);
        assert_true(buf[0] != '\0');
        return;
    }
    redisReply *r = raw(redis_server_port(shared.r), "GET %s", key);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    snprintf(buf, len, "%s", r->str);
    freeReplyObject(r);
}

/* The remaining ttl of key in ms (etcd: its lease's, whole seconds); -1 no
 * expiry, -2 absent. */
static long long raw_ttl_ms(const char *key)
{
    if (IS_PG) {
        char out[256];
        praw(shared.p, out, sizeof out, PG_LIVE(PG_TTL), key, key);
        return out[0] ? strtoll(out, NULL, 10) : -2;
    }
    if (IS_ETCD) {
        long long lease = 0;
        if (eraw_range(shared.e, key, NULL, 0, NULL, &lease, NULL) != 1) return -2;
        return lease ? eraw_lease_ttl_ms(shared.e, lease) : -1;
    }
    redisReply *r = raw(redis_server_port(shared.r), "PTTL %s", key);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

static int group_setup(void **state)
{
    return srv_open(&shared) ? 0 : -1;
}

static int group_teardown(void **state)
{
    srv_destroy(&shared);
    return 0;
}

#define PORT redis_server_port(shared.r)

/* WAIT_FOR: tests/support/wait.h */

/* ---- locker --------------------------------------------------------------- */

static void test_token_cas_unlock_renew(void **state)
{
    struct baton_locker *a = LOCKER(), *b = LOCKER();
    struct baton_lock_grant ga, gb;
    char err[BATON_LOCKER_ERR_MAX], v[128];
    int64_t sent = 0, t0 = clock_boot_ms();
    assert_int_equal(baton_locker_try_lock(a, "cas", 2000, &ga, err), BATON_LOCKER_OK);
    assert_true(ga.sent_ms >= t0 && ga.sent_ms <= clock_boot_ms());
    assert_int_equal(strlen(ga.token), 32);
    assert_int_equal(baton_locker_try_lock(b, "cas", 2000, &gb, err), BATON_LOCKER_HELD);
    /* the stored value is our token */
    raw_value("cas", v, sizeof v);
    assert_string_equal(v, ga.token);
    /* a wrong token neither releases nor renews */
    assert_int_equal(baton_locker_unlock(b, "cas", "ffffffffffffffffffffffffffffffff", err),
                     BATON_LOCKER_MISMATCH);
    assert_non_null(strstr(err, "another token"));
    assert_int_equal(baton_locker_renew(b, "cas", "ffffffffffffffffffffffffffffffff", 5000, &sent, err),
                     BATON_LOCKER_LOST);
    assert_int_equal(b->ops->check(b, "cas", "ffffffffffffffffffffffffffffffff", err),
                     BATON_LOCKER_LOST);
    assert_int_equal(a->ops->check(a, "cas", ga.token, err), BATON_LOCKER_OK);
    /* renew with the right token extends the expiry */
    t0 = clock_boot_ms();
    assert_int_equal(baton_locker_renew(a, "cas", ga.token, 60000, &sent, err), BATON_LOCKER_OK);
    assert_true(sent >= t0 && sent <= clock_boot_ms());
    long long pttl = raw_ttl_ms("cas");
    printf("token_cas: ttl after renew(60000): %lld ms\n", pttl);
    if (pttl <= 50000) fail_msg("renew with ttl 60000 ms left the key a ttl of %lld ms", pttl);
    assert_int_equal(baton_locker_unlock(a, "cas", ga.token, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_unlock(a, "cas", ga.token, err), BATON_LOCKER_MISMATCH);
    assert_non_null(strstr(err, "not held"));
    assert_int_equal(baton_locker_renew(a, "cas", ga.token, T(1000), &sent, err), BATON_LOCKER_LOST);
    assert_int_equal(baton_locker_try_lock(b, "cas", 2000, &gb, err), BATON_LOCKER_OK);
    assert_true(gb.epoch > ga.epoch);
    baton_locker_unlock(b, "cas", gb.token, err);
    baton_locker_destroy(a);
    baton_locker_destroy(b);
}

static void test_expiry(void **state)
{
    struct baton_locker *a = LOCKER(), *b = LOCKER();
    struct baton_lock_grant ga, gb;
    char err[BATON_LOCKER_ERR_MAX];
    int64_t ttl = T(150);
    assert_int_equal(baton_locker_try_lock(a, "exp", ttl, &ga, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_try_lock(b, "exp", ttl, &gb, err), BATON_LOCKER_HELD);
    if (DURABLE) { /* the server knows how long the holder's lease still runs */
        printf("expiry: held, holder's lease runs %lld ms more\n", (long long)gb.held_pttl_ms);
        assert_true(gb.held_pttl_ms > 0 && gb.held_pttl_ms <= ttl);
    }
    int64_t took = WAIT_FOR(baton_locker_try_lock(b, "exp", ttl, &gb, err) == BATON_LOCKER_OK,
                            IS_ETCD ? 6000 : 2000);
    int64_t since_sent = clock_boot_ms() - ga.sent_ms;
    printf("lock with ttl %lld ms taken over after %lld ms (%lld ms after the acquisition "
           "was sent)\n",
           (long long)ttl, (long long)took, (long long)since_sent);
    if (!IS_ETCD) {
        assert_true(took >= 100 && took < 1000);
    } else { /* never before the ttl; the member checks expiry about every 500 ms */
        assert_true(took >= 0);
        assert_true(since_sent >= ttl && since_sent < ttl + 2000);
    }
    int64_t sent;
    assert_int_equal(baton_locker_renew(a, "exp", ga.token, T(1000), &sent, err), BATON_LOCKER_LOST);
    baton_locker_destroy(a);
    baton_locker_destroy(b);
}

#define EPOCH_THREADS 4
#define EPOCH_TOTAL 1000
struct epoch_run {
    struct baton_locker *lockers[2];
    pthread_mutex_t mu;
    uint64_t epochs[EPOCH_TOTAL];
    atomic_int n;
    atomic_int errors;
    char first_err[BATON_LOCKER_ERR_MAX + 64];
    atomic_int unlock_failures; /* asserted on the test's thread (cmocka) */
    char first_unlock_err[BATON_LOCKER_ERR_MAX + 64];
};

static void *epoch_worker(void *arg)
{
    struct epoch_run *er = arg;
    static atomic_int idx;
    struct baton_locker *l = er->lockers[atomic_fetch_add(&idx, 1) % 2];
    char err[BATON_LOCKER_ERR_MAX];
    while (atomic_load(&er->n) < EPOCH_TOTAL) {
        struct baton_lock_grant g;
        int rc = baton_locker_try_lock(l, "epochs", 5000, &g, err);
        if (rc == BATON_LOCKER_ERR && atomic_fetch_add(&er->errors, 1) == 0)
            snprintf(er->first_err, sizeof er->first_err, "try_lock: %s", err);
        if (rc != BATON_LOCKER_OK) continue;
        /* appended while holding the lock: the array order is the acquisition order */
        pthread_mutex_lock(&er->mu);
        int i = atomic_load(&er->n);
        if (i < EPOCH_TOTAL) er->epochs[i] = g.epoch;
        atomic_store(&er->n, i + 1);
        pthread_mutex_unlock(&er->mu);
        int urc = baton_locker_unlock(l, "epochs", g.token, err);
        if (urc != BATON_LOCKER_OK && atomic_fetch_add(&er->unlock_failures, 1) == 0)
            snprintf(er->first_unlock_err, sizeof er->first_unlock_err,
                     "unlock of the grant with epoch %llu: %s: %s", (unsigned long long)g.epoch,
                     baton_locker_status_name(urc), err);
    }
    return NULL;
}

static void test_epochs_strictly_increasing(void **state)
{
    struct epoch_run *er = calloc(1, sizeof *er);
    /* 3 s command timeouts: this test is about epochs, not latency (a timed-out try_lock is
     * an ambiguous outcome and would count as an error) */
    er->lockers[0] = locker_patient(&shared, 3000);
    er->lockers[1] = locker_patient(&shared, 3000);
    pthread_mutex_init(&er->mu, NULL);
    int64_t t0 = clock_mono_ms();
    pthread_t th[EPOCH_THREADS];
    for (int i = 0; i < EPOCH_THREADS; i++) pthread_create(&th[i], NULL, epoch_worker, er);
    for (int i = 0; i < EPOCH_THREADS; i++) pthread_join(th[i], NULL);
    int64_t took = clock_mono_ms() - t0;
    if (atomic_load(&er->errors))
        fail_msg("%d try_lock errors, the first: %s", atomic_load(&er->errors), er->first_err);
    if (atomic_load(&er->unlock_failures))
        fail_msg("%d unlocks right after the grant failed, the first: %s",
                 atomic_load(&er->unlock_failures), er->first_unlock_err);
    for (int i = 1; i < EPOCH_TOTAL; i++) {
        if (er->epochs[i] <= er->epochs[i - 1])
            fail_msg("epoch %d (%llu) <= epoch %d (%llu)", i, (unsigned long long)er->epochs[i],
                     i - 1, (unsigned long long)er->epochs[i - 1]);
    }
    /* floored by Redis TIME in ms * 1000 (etcd: revisions, no clock) */
    uint64_t wall_floor = (uint64_t)(clock_wall_ms() - 60000) * 1000u;
    if (!IS_ETCD) assert_true(er->epochs[0] > wall_floor);
    printf("%d acquisitions by %d threads on 2 connections in %lld ms, epochs strictly "
           "increasing (%llu .. %llu)\n",
           EPOCH_TOTAL, EPOCH_THREADS, (long long)took, (unsigned long long)er->epochs[0],
           (unsigned long long)er->epochs[EPOCH_TOTAL - 1]);
    struct baton_lock_grant g;
    char err[BATON_LOCKER_ERR_MAX];
    if (IS_PG) {
        /* the lease row is lost (deleted by hand): the sequence and the clock
         * floor keep the epoch increasing */
        char out[64];
        praw(shared.p, out, sizeof out, "DELETE FROM baton_leases WHERE key = 'epochs'");
        assert_int_equal(baton_locker_try_lock(er->lockers[0], "epochs", 1000, &g, err), BATON_LOCKER_OK);
        printf("after the lease row was deleted: epoch %llu\n", (unsigned long long)g.epoch);
        assert_true(g.epoch > er->epochs[EPOCH_TOTAL - 1]);
        er->epochs[EPOCH_TOTAL - 1] = g.epoch;
        assert_int_equal(baton_locker_unlock(er->lockers[0], "epochs", g.token, err), BATON_LOCKER_OK);
    }
    if (BK == BK_REDIS) {
        /* Redis loses its data: the epoch still increases */
        freeReplyObject(raw(PORT, "FLUSHALL"));
        assert_int_equal(baton_locker_try_lock(er->lockers[0], "epochs", 1000, &g, err), BATON_LOCKER_OK);
        assert_true(g.epoch > er->epochs[EPOCH_TOTAL - 1]);
        redisReply *r = raw(PORT, "GET epochs:epoch");
        assert_int_equal(strtoull(r->str, NULL, 10), g.epoch);
        freeReplyObject(r);
    } else {
        /* the server crashes and comes back (its data survives): still increasing */
        assert_int_equal(srv_kill(&shared), 0);
        assert_int_equal(srv_restart(&shared), 0);
        int rc = BATON_LOCKER_ERR;
        int64_t t1 = clock_mono_ms();
        while (rc == BATON_LOCKER_ERR && clock_mono_ms() - t1 < 5000) {
            rc = baton_locker_try_lock(er->lockers[0], "epochs", 2000, &g, err);
            if (rc == BATON_LOCKER_ERR) usleep(50 * 1000);
        }
        assert_int_equal(rc, BATON_LOCKER_OK);
        printf("after a member restart: epoch %llu\n", (unsigned long long)g.epoch);
        assert_true(g.epoch > er->epochs[EPOCH_TOTAL - 1]);
        if (IS_ETCD) {
            long long mod = 0;
            assert_int_equal(eraw_range(shared.e, "epochs:epoch", NULL, 0, NULL, NULL, &mod), 1);
            assert_int_equal((uint64_t)mod, g.epoch); /* the epoch key's revision */
        }
        assert_int_equal(baton_locker_unlock(er->lockers[0], "epochs", g.token, err), BATON_LOCKER_OK);
    }
    baton_locker_destroy(er->lockers[0]);
    baton_locker_destroy(er->lockers[1]);
    pthread_mutex_destroy(&er->mu);
    free(er);
}

static void test_script_cache_flushed(void **state)
{
    REDIS_ONLY();
    struct baton_locker *a = redis_locker(PORT);
    struct baton_lock_grant g;
    char err[BATON_LOCKER_ERR_MAX];
    int64_t sent;
    freeReplyObject(raw(PORT, "SCRIPT FLUSH"));
    assert_int_equal(baton_locker_try_lock(a, "noscript", 1000, &g, err), BATON_LOCKER_OK);
    freeReplyObject(raw(PORT, "SCRIPT FLUSH"));
    assert_int_equal(baton_locker_renew(a, "noscript", g.token, 1000, &sent, err), BATON_LOCKER_OK);
    freeReplyObject(raw(PORT, "SCRIPT FLUSH"));
    assert_int_equal(baton_locker_unlock(a, "noscript", g.token, err), BATON_LOCKER_OK);
    /* reloaded: the next call goes by SHA again and works */
    assert_int_equal(baton_locker_try_lock(a, "noscript", 1000, &g, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_unlock(a, "noscript", g.token, err), BATON_LOCKER_OK);
    baton_locker_destroy(a);
}

/* ---- bad input -------------------------------------------------------------- */

static void test_non_string_key(void **state)
{
    REDIS_ONLY();
    struct baton_locker *a = redis_locker(PORT);
    struct baton_lock_grant g;
    char err[BATON_LOCKER_ERR_MAX];
    int64_t sent;
    freeReplyObject(raw(PORT, "DEL listkey listkey:epoch"));
    freeReplyObject(raw(PORT, "LPUSH listkey x"));
    assert_int_equal(baton_locker_try_lock(a, "listkey", 1000, &g, err), BATON_LOCKER_ERR);
    printf("non-string key: %s\n", err);
    assert_non_null(strstr(err, "WRONGTYPE"));
    assert_int_equal(baton_locker_unlock(a, "listkey", "abc", err), BATON_LOCKER_ERR);
    assert_non_null(strstr(err, "WRONGTYPE"));
    assert_int_equal(baton_locker_renew(a, "listkey", "abc", 1000, &sent, err), BATON_LOCKER_ERR);
    assert_int_equal(a->ops->check(a, "listkey", "abc", err), BATON_LOCKER_ERR);
    /* a wrong-typed epoch key: error, and the lock is not left behind */
    freeReplyObject(raw(PORT, "DEL hk hk:epoch"));
    freeReplyObject(raw(PORT, "HSET hk:epoch f v"));
    assert_int_equal(baton_locker_try_lock(a, "hk", 1000, &g, err), BATON_LOCKER_ERR);
    assert_non_null(strstr(err, "WRONGTYPE"));
    redisReply *r = raw(PORT, "EXISTS hk");
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    /* the connection stays usable after error replies */
    assert_int_equal(baton_locker_try_lock(a, "fine", 1000, &g, err), BATON_LOCKER_OK);
    /* OnceGuard on such a key: fail-closed skip, counted as a backend error */
    freeReplyObject(raw(PORT, "SADD baton:once:s:k x"));
    struct baton_once_guard *og = baton_once_guard_create(a, "s", NULL);
    assert_false(baton_once_guard_allow(og, "k"));
    assert_int_equal(atomic_load(&baton_once_guard_stats(og)->backend_errors), 1);
    assert_true(baton_once_guard_allow(og, "k2"));
    assert_false(baton_once_guard_allow(og, "k2"));
    baton_once_guard_destroy(og);
    baton_locker_destroy(a);
}

/* SIGSTOP / SIGCONT the server (PostgreSQL: the postmaster and every
 * backend). */
static long server_pid(int port);
static int srv_pause(struct srv *s)
{
    if (s->p) return pg_server_pause(s->p);
    if (s->e) return etcd_server_pause(s->e);
    s->redis_pid = (pid_t)server_pid(srv_port(s));
    return kill(s->redis_pid, SIGSTOP);
}

static int srv_resume(struct srv *s)
{
    if (s->p) return pg_server_resume(s->p);
    if (s->e) return etcd_server_resume(s->e);
    return kill(s->redis_pid, SIGCONT);
}

/* etcd, PostgreSQL: a server that was reachable goes away (SIGKILL): every
 * call is BATON_LOCKER_ERR naming the endpoint and the reason, never "held"
 * or "lost"; it comes back: the next call works. Paused (SIGSTOP):
 * BATON_LOCKER_ERR within the command timeout. */
static void unreachable_durable(void)
{
    struct srv *sv = srv_start();
    char where[64], err[BATON_LOCKER_ERR_MAX];
    snprintf(where, sizeof where, "127.0.0.1:%d", srv_port(sv));
    struct baton_locker *l = locker_for(sv);
    struct baton_lock_grant g0, g;
    int64_t sent;
    assert_int_equal(baton_locker_try_lock(l, "held", 10000, &g0, err), BATON_LOCKER_OK);
    assert_int_equal(srv_kill(sv), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(baton_locker_try_lock(l, "k", 2000, &g, err), BATON_LOCKER_ERR);
        assert_non_null(strstr(err, where));
        assert_true(strcasestr(err, "refused") || strcasestr(err, "connect"));
    }
    printf("unreachable: %s\n", err);
    assert_int_equal(baton_locker_renew(l, "held", g0.token, 10000, &sent, err), BATON_LOCKER_ERR);
    printf("unreachable, renew: %s\n", err);
    assert_int_equal(l->ops->check(l, "held", g0.token, err), BATON_LOCKER_ERR);
    assert_int_equal(baton_locker_claim(l, "c", 2000, err), BATON_LOCKER_ERR);
    if (l->ops->ping) assert_int_equal(l->ops->ping(l, err), BATON_LOCKER_ERR);
    /* it comes up (data kept): the next call connects, the lease is still ours */
    assert_int_equal(srv_restart(sv), 0);
    assert_int_equal(baton_locker_try_lock(l, "k", 2000, &g, err), BATON_LOCKER_OK);
    assert_int_equal(l->ops->check(l, "held", g0.token, err), BATON_LOCKER_OK);
    /* held by this very locker: held, like anyone else's (never taken over) */
    int self = baton_locker_try_lock(l, "held", 2000, &g, err);
    if (self != BATON_LOCKER_HELD)
        fail_msg("try_lock of a key this locker holds (lease alive, check OK): %s, want held (%s)",
                 baton_locker_status_name(self), err);
    /* paused: an error within the command timeout (500 ms), never a hang */
    assert_int_equal(srv_pause(sv), 0);
    int64_t t0 = clock_mono_ms();
    int rc = baton_locker_try_lock(l, "k2", 2000, &g, err);
    int64_t took = clock_mono_ms() - t0;
    assert_int_equal(srv_resume(sv), 0);
    printf("paused server: try_lock %s after %lld ms: %s\n", baton_locker_status_name(rc),
           (long long)took, err);
    assert_int_equal(rc, BATON_LOCKER_ERR);
    assert_non_null(strstr(err, where));
    assert_true(took < 1000);
    t0 = clock_mono_ms();
    rc = baton_locker_renew(l, "held", g0.token, 10000, &sent, err);
    printf("resumed: renew %s after %lld ms\n", baton_locker_status_name(rc),
           (long long)(clock_mono_ms() - t0));
    assert_int_equal(rc, BATON_LOCKER_OK);
    assert_int_equal(baton_locker_unlock(l, "held", g0.token, err), BATON_LOCKER_OK);
    baton_locker_destroy(l);
    srv_destroy(sv);
}

static void test_unreachable_backend(void **state)
{
    if (DURABLE) {
        unreachable_durable();
        return;
    }
    /* a port nobody listens on: start a server to learn a free port, stop it */
    struct redis_server *s = redis_server_start(NULL);
    assert_non_null(s);
    int port = redis_server_port(s);
    redis_server_stop(s);
    struct baton_redis_opts o = opts_for(port, NULL);
    char err[BATON_LOCKER_ERR_MAX];
    struct baton_locker *l = baton_locker_redis_create(&o, err);
    assert_non_null(l); /* transient: created, every call reports the error */
    struct baton_lock_grant g;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(baton_locker_try_lock(l, "k", 1000, &g, err), BATON_LOCKER_ERR);
        assert_non_null(strstr(err, "127.0.0.1"));
        assert_non_null(strstr(err, "refused"));
    }
    printf("unreachable: %s\n", err);
    int64_t sent;
    assert_int_equal(baton_locker_renew(l, "k", "abc", 1000, &sent, err), BATON_LOCKER_ERR);
    assert_int_equal(baton_locker_unlock(l, "k", "abc", err), BATON_LOCKER_ERR);
    /* it comes up: the next call connects */
    assert_int_equal(redis_server_restart(s), 0);
    assert_int_equal(baton_locker_try_lock(l, "k", 1000, &g, err), BATON_LOCKER_OK);
    baton_locker_destroy(l);
    /* redis_conn_open directly */
    redis_server_stop(s);
    assert_null(redis_conn_open(&o, err, sizeof err));
    assert_non_null(strstr(err, "refused"));
    redis_server_destroy(s);
}

static void etcdctl_ok(struct etcd_server *s, const char *const *args)
{
    char out[2048];
    int rc = etcd_server_ctl(s, args, out, sizeof out);
    if (rc != 0) fail_msg("etcdctl %s %s: exit %d: %s", args[0], args[1], rc, out);
}

/* etcd with auth enabled (etcdctl): a wrong password is refused with the
 * reason, no user at all fails every call, the right one works; a user
 * without permission on a key gets BATON_LOCKER_ERR, never BATON_LOCKER_HELD. */
static void wrong_password_etcd(void)
{
    struct etcd_server *s = etcd_server_start(NULL);
    assert_non_null(s);
    const char *c1[] = {"user", "add", "root:rootpw", "--interactive=false", NULL};
    const char *c2[] = {"user", "grant-role", "root", "root", NULL};
    const char *c3[] = {"user", "add", "lim:limpw", "--interactive=false", NULL};
    const char *c4[] = {"role", "add", "lim", NULL};
    const char *c5[] = {"role", "grant-permission", "lim", "readwrite", "--prefix=true", "ok:", NULL};
    const char *c6[] = {"user", "grant-role", "lim", "lim", NULL};
    const char *c7[] = {"auth", "enable", NULL};
    const char *const *cmds[] = {c1, c2, c3, c4, c5, c6, c7};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) etcdctl_ok(s, cmds[i]);
    const char *url = etcd_server_url(s);
    char err[BATON_LOCKER_ERR_MAX];
    struct baton_lock_grant g;
    /* wrong password: refused at create, or at every call, with the reason */
    struct baton_locker *l = etcd_locker_try(url, "root", "wrong", err);
    if (l != NULL) {
        assert_int_equal(baton_locker_try_lock(l, "k", 2000, &g, err), BATON_LOCKER_ERR);
        baton_locker_destroy(l);
    }
    printf("wrong password (%s): %s\n", l ? "at the first call" : "at create", err);
    assert_non_null(strstr(err, "authentication failed"));
    /* no user at all: created, but every call fails with the reason */
    l = etcd_locker_try(url, NULL, NULL, err);
    assert_non_null(l);
    assert_int_equal(baton_locker_try_lock(l, "k", 2000, &g, err), BATON_LOCKER_ERR);
    printf("no user: %s\n", err);
    assert_non_null(strstr(err, "user name is empty"));
    baton_locker_destroy(l);
    /* the right password */
    l = etcd_locker_try(url, "root", "rootpw", err);
    if (l == NULL) fail_msg("baton_locker_etcd_create(root): %s", err);
    assert_int_equal(baton_locker_try_lock(l, "k", 2000, &g, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_unlock(l, "k", g.token, err), BATON_LOCKER_OK);
    baton_locker_destroy(l);
    /* no permission on the key: an error, never "held" */
    l = etcd_locker_try(url, "lim", "limpw", err);
    if (l == NULL) fail_msg("baton_locker_etcd_create(lim): %s", err);
    assert_int_equal(baton_locker_try_lock(l, "nope", 2000, &g, err), BATON_LOCKER_ERR);
    printf("no permission: %s\n", err);
    assert_non_null(strstr(err, "permission denied"));
    assert_int_equal(baton_locker_try_lock(l, "ok:k", 2000, &g, err), BATON_LOCKER_OK);
    int64_t sent;
    assert_int_equal(baton_locker_renew(l, "ok:k", g.token, 2000, &sent, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_unlock(l, "ok:k", g.token, err), BATON_LOCKER_OK);
    baton_locker_destroy(l);
    etcd_server_destroy(s);
}

static void test_wrong_password(void **state)
{
    if (IS_PG) {
        /* authentication is libpq's; the test server trusts local connections */
        printf("skipped: the PostgreSQL test server trusts every local connection\n");
        skip();
    }
    if (IS_ETCD) {
        wrong_password_etcd();
        return;
    }
    const char *args[] = {"--requirepass", "s3cret", NULL};
    struct redis_server *s = redis_server_start(args);
    assert_non_null(s);
    int port = redis_server_port(s);
    char err[BATON_LOCKER_ERR_MAX];
    struct baton_redis_opts o = opts_for(port, "wrong");
    assert_null(baton_locker_redis_create(&o, err));
    printf("wrong password: %s\n", err);
    assert_true(strstr(err, "WRONGPASS") || strstr(err, "invalid"));
    /* no password at all: created, but every call fails with the reason */
    o = opts_for(port, NULL);
    struct baton_locker *l = baton_locker_redis_create(&o, err);
    assert_non_null(l);
    struct baton_lock_grant g;
    assert_int_equal(baton_locker_try_lock(l, "k", 1000, &g, err), BATON_LOCKER_ERR);
    assert_non_null(strstr(err, "NOAUTH"));
    baton_locker_destroy(l);
    /* right password, with a db */
    o = opts_for(port, "s3cret");
    o.db = 3;
    l = baton_locker_redis_create(&o, err);
    assert_non_null(l);
    assert_int_equal(baton_locker_try_lock(l, "k", 1000, &g, err), BATON_LOCKER_OK);
    baton_locker_destroy(l);
    o.db = 99999;
    assert_null(baton_locker_redis_create(&o, err));
    assert_non_null(strstr(err, "SELECT"));
    redis_server_destroy(s);
}

/* ---- issue 13 ------------------------------------------------------------- */

static long long raw_int(int port, const char *fmt, const char *arg)
{
    redisReply *r = raw(port, fmt, arg);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* Subscribers of channel (PUBSUB NUMSUB). */
static long long numsub(int port, const char *channel)
{
    redisReply *r = raw(port, "PUBSUB NUMSUB %s", channel);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    long long v = r->element[1]->integer;
    freeReplyObject(r);
    return v;
}

/* The id of the client named name (CLIENT SETNAME), or -1. */
static long long client_id(int port, const char *name)
{
    redisReply *r = raw(port, "CLIENT LIST");
    long long id = -1;
    char pat[64];
    snprintf(pat, sizeof pat, " name=%s ", name);
    for (char *line = r->str; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (strstr(line, pat)) id = strtoll(line + 3, NULL, 10); /* "id=N ..." */
        line = nl ? nl + 1 : NULL;
    }
    freeReplyObject(r);
    return id;
}

/* (4) The epoch key must not expire while a lease exists. It gets a TTL of
 * max(2 x ttl, 24 h) at acquisition; here its TTL is cut to 300 ms with a raw
 * connection, as if those 24 h had passed. The old renew script refreshed only
 * the lock and holder keys, so PTTL stayed <= 300 and the key vanished. */
/* etcd: "<key>:epoch" carries no lease at all (it never expires), and a
 * renewal (a keep-alive) leaves it alone: its revision stays the term's
 * epoch, so the term's fenced writes keep working. */
static void epoch_key_etcd(void)
{
    struct baton_locker *a = LOCKER();
    struct baton_lock_grant g;
    char err[BATON_LOCKER_ERR_MAX];
    int64_t sent;
    assert_int_equal(baton_locker_try_lock(a, "ep", 2000, &g, err), BATON_LOCKER_OK);
    long long lease = -1, mod = 0;
    assert_int_equal(eraw_range(shared.e, "ep:epoch", NULL, 0, NULL, &lease, &mod), 1);
    assert_int_equal(lease, 0);
    assert_int_equal((uint64_t)mod, g.epoch);
    for (int i = 0; i < 3; i++) {
        usleep(400 * 1000);
        assert_int_equal(baton_locker_renew(a, "ep", g.token, 2000, &sent, err), BATON_LOCKER_OK);
    }
    usleep(1000 * 1000); /* past the first grant's 2 s: only the renewals kept it */
    assert_int_equal(a->ops->check(a, "ep", g.token, err), BATON_LOCKER_OK);
    assert_int_equal(eraw_range(shared.e, "ep:epoch", NULL, 0, NULL, &lease, &mod), 1);
    assert_int_equal((uint64_t)mod, g.epoch);
    assert_int_equal(baton_locker_fenced_set(a, "ep", "mark", g.epoch, "v", 1, 10000, err), BATON_LOCKER_OK);
    /* renewing someone else's lease touches nothing */
    assert_int_equal(baton_locker_renew(a, "ep", "ffffffffffffffffffffffffffffffff", 2000, &sent, err),
                     BATON_LOCKER_LOST);
    assert_int_equal(eraw_range(shared.e, "ep:epoch", NULL, 0, NULL, NULL, &mod), 1);
    assert_int_equal((uint64_t)mod, g.epoch);
    assert_int_equal(baton_locker_unlock(a, "ep", g.token, err), BATON_LOCKER_OK);
    baton_locker_destroy(a);
}

/* PostgreSQL: the epoch is a column of the lease row; renewals (only
 * expires_at changes) keep it, past the first grant's ttl, so the term's
 * fenced writes keep working; renewing someone else's lease changes
 * nothing. */
static void epoch_key_pg(void)
{
    struct baton_locker *a = LOCKER();
    struct baton_lock_grant g;
    struct baton_lock_info info;
    char err[BATON_LOCKER_ERR_MAX];
    int64_t sent;
    assert_int_equal(baton_locker_try_lock(a, "ep", 2000, &g, err), BATON_LOCKER_OK);
    for (int i = 0; i < 3; i++) {
        usleep(400 * 1000);
        assert_int_equal(baton_locker_renew(a, "ep", g.token, 2000, &sent, err), BATON_LOCKER_OK);
    }
    usleep(1000 * 1000); /* past the first grant's 2 s: only the renewals kept it */
    assert_int_equal(a->ops->check(a, "ep", g.token, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_inspect(a, "ep", &info, err), BATON_LOCKER_OK);
    assert_true(info.held);
    assert_int_equal(info.epoch, g.epoch);
    assert_int_equal(baton_locker_fenced_set(a, "ep", "mark", g.epoch, "v", 1, 10000, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_renew(a, "ep", "ffffffffffffffffffffffffffffffff", 2000, &sent, err),
                     BATON_LOCKER_LOST);
    assert_int_equal(baton_locker_inspect(a, "ep", &info, err), BATON_LOCKER_OK);
    assert_int_equal(info.epoch, g.epoch);
    assert_int_equal(baton_locker_unlock(a, "ep", g.token, err), BATON_LOCKER_OK);
    /* released: the row keeps the epoch (the next one counts from it) */
    assert_int_equal(baton_locker_inspect(a, "ep", &info, err), BATON_LOCKER_OK);
    assert_false(info.held);
    assert_int_equal(info.epoch, g.epoch);
    baton_locker_destroy(a);
}

static void test_epoch_expiry_renew_keeps_epoch_key(void **state)
{
    if (IS_PG) {
        epoch_key_pg();
        return;
    }
    if (IS_ETCD) {
        epoch_key_etcd();
        return;
    }
    struct baton_locker *a = redis_locker(PORT);
    struct baton_lock_grant g;
    char err[BATON_LOCKER_ERR_MAX];
    int64_t sent;
    freeReplyObject(raw(PORT, "DEL ep ep:epoch"));
    assert_int_equal(baton_locker_try_lock(a, "ep", 2000, &g, err), BATON_LOCKER_OK);
    long long pttl = raw_int(PORT, "PTTL %s", "ep:epoch");
    assert_true(pttl > 23LL * 3600 * 1000);
    freeReplyObject(raw(PORT, "PEXPIRE ep:epoch 300"));
    assert_int_equal(baton_locker_renew(a, "ep", g.token, 2000, &sent, err), BATON_LOCKER_OK);
    pttl = raw_int(PORT, "PTTL %s", "ep:epoch");
    printf("epoch_expiry: epoch key PTTL after renew: %lld ms (cut to 300 ms before)\n", pttl);
    assert_true(pttl >= 2000);
    assert_true(pttl > 23LL * 3600 * 1000); /* max(2 x ttl, 24 h) */
    usleep(400 * 1000);
    assert_int_equal(baton_locker_renew(a, "ep", g.token, 2000, &sent, err), BATON_LOCKER_OK);
    assert_int_equal(raw_int(PORT, "EXISTS %s", "ep:epoch"), 1);
    redisReply *r = raw(PORT, "GET ep:epoch");
    assert_int_equal(strtoull(r->str, NULL, 10), g.epoch);
    freeReplyObject(r);
    /* a long ttl: the epoch key lives at least 2 x ttl */
    assert_int_equal(baton_locker_renew(a, "ep", g.token, 13LL * 3600 * 1000, &sent, err), BATON_LOCKER_OK);
    assert_true(raw_int(PORT, "PTTL %s", "ep:epoch") > 25LL * 3600 * 1000);
    /* renewing someone else's lease touches nothing */
    freeReplyObject(raw(PORT, "PEXPIRE ep:epoch 5000"));
    assert_int_equal(baton_locker_renew(a, "ep", "ffffffffffffffffffffffffffffffff", 2000, &sent, err),
                     BATON_LOCKER_LOST);
    assert_true(raw_int(PORT, "PTTL %s", "ep:epoch") <= 5000);
    assert_int_equal(baton_locker_unlock(a, "ep", g.token, err), BATON_LOCKER_OK);
    baton_locker_destroy(a);
}

/* (5) A standby reads the release counter, is then busy (try_lock, balancing
 * delay, between wait chunks) while the leader releases and announces: its
 * next wait_release returns at once. The old wait_release only saw messages
 * arriving while it waited, so this announcement was lost and the handover
 * waited for the retry interval or the ttl. A break of the subscriber
 * connection advances the counter too: announcements may have been missed
 * while it was down. */
/* etcd: a lease's expiry wakes a standby (the DELETE the member issues when
 * it revokes it); a member restart re-creates the watch stream and advances
 * the counter (releases may have been missed meanwhile); after it, releases
 * are counted again. */
static void missed_release_etcd(struct srv *sv, struct baton_locker *leader, struct baton_locker *standby,
                                struct baton_lock_grant *h)
{
    char err[BATON_LOCKER_ERR_MAX];
    struct baton_lock_grant g;
    assert_int_equal(baton_locker_unlock(standby, "mr", h->token, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_try_lock(leader, "mr", 2000, &g, err), BATON_LOCKER_OK); /* never renewed */
    uint64_t s1 = standby->ops->release_seq(standby, "mr");
    assert_true(standby->ops->wait_release(standby, "mr", s1, 6000));
    int64_t since = clock_boot_ms() - g.sent_ms;
    printf("missed_release: expiry of a 2000 ms lease woke the standby %lld ms after the "
           "acquisition was sent\n",
           (long long)since);
    assert_true(since >= 2000 && since < 4500);
    assert_int_equal(baton_locker_try_lock(standby, "mr", 10000, h, err), BATON_LOCKER_OK);
    /* the member restarts: the counter advances */
    uint64_t s2 = standby->ops->release_seq(standby, "mr");
    int64_t t0 = clock_mono_ms();
    assert_int_equal(srv_kill(sv), 0);
    assert_int_equal(srv_restart(sv), 0);
    assert_true(standby->ops->wait_release(standby, "mr", s2, 8000));
    printf("missed_release: counter advanced %lld ms after the member was killed (restart "
           "included)\n",
           (long long)(clock_mono_ms() - t0));
    /* counted again: a release wakes it */
    assert_true(WAIT_FOR(standby->ops->check(standby, "mr", h->token, err) == BATON_LOCKER_OK, 3000) >=
                0);
    usleep(300 * 1000); /* the watch stream is re-created (an advance of its own) */
    uint64_t s3 = standby->ops->release_seq(standby, "mr");
    assert_int_equal(baton_locker_unlock(standby, "mr", h->token, err), BATON_LOCKER_OK);
    t0 = clock_mono_ms();
    assert_true(standby->ops->wait_release(standby, "mr", s3, 2000));
    printf("missed_release: release after the restart seen in %lld ms\n",
           (long long)(clock_mono_ms() - t0));
    baton_locker_destroy(leader);
    baton_locker_destroy(standby);
    srv_destroy(sv);
}

/* PostgreSQL: the release is announced by NOTIFY in the releasing statement
 * (no announce_release); a server restart breaks the LISTEN connection, and
 * LISTENing again advances the counter (releases may have been missed
 * meanwhile); after it, releases are counted again. An expiry is not
 * announced: a standby retries when the holder's lease runs out
 * (held_pttl_ms). */
static void missed_release_pg(struct srv *sv, struct baton_locker *leader, struct baton_locker *standby,
                              struct baton_lock_grant *h)
{
    char err[BATON_LOCKER_ERR_MAX];
    assert_null(leader->ops->announce_release);
    uint64_t s2 = standby->ops->release_seq(standby, "mr");
    int64_t t0 = clock_mono_ms();
    assert_int_equal(srv_kill(sv), 0);
    assert_int_equal(srv_restart(sv), 0);
    assert_true(standby->ops->wait_release(standby, "mr", s2, 8000));
    printf("missed_release: counter advanced %lld ms after the server was killed (restart "
           "included)\n",
           (long long)(clock_mono_ms() - t0));
    assert_true(WAIT_FOR(standby->ops->check(standby, "mr", h->token, err) == BATON_LOCKER_OK, 3000) >=
                0);
    uint64_t s3 = standby->ops->release_seq(standby, "mr");
    assert_int_equal(baton_locker_unlock(standby, "mr", h->token, err), BATON_LOCKER_OK);
    t0 = clock_mono_ms();
    assert_true(standby->ops->wait_release(standby, "mr", s3, 2000));
    printf("missed_release: release after the restart seen in %lld ms\n",
           (long long)(clock_mono_ms() - t0));
    baton_locker_destroy(leader);
    baton_locker_destroy(standby);
    srv_destroy(sv);
}

static void test_missed_release_counted_and_resubscribed(void **state)
{
    struct srv *sv = srv_start(); /* CLIENT KILL / a restart hits only ours */
    int port = srv_port(sv);
    struct baton_locker *leader = locker_for(sv), *standby = locker_for(sv);
    struct baton_lock_grant g, h;
    char err[BATON_LOCKER_ERR_MAX];
    assert_int_equal(baton_locker_try_lock(leader, "mr", 10000, &g, err), BATON_LOCKER_OK);
    int64_t t0 = clock_mono_ms();
    uint64_t seen = standby->ops->release_seq(standby, "mr");
    printf("missed_release: first release_seq (subscribe confirmed) took %lld ms\n",
           (long long)(clock_mono_ms() - t0));
    if (BK == BK_REDIS) assert_int_equal(numsub(port, "mr:released"), 1); /* confirmed before it returned */
    assert_int_equal(baton_locker_try_lock(standby, "mr", 10000, &h, err), BATON_LOCKER_HELD);
    /* the standby is busy: the leader releases and announces now (etcd: the
     * release's DELETE is the announcement) */
    assert_int_equal(baton_locker_unlock(leader, "mr", g.token, err), BATON_LOCKER_OK);
    if (BK == BK_REDIS || leader->ops->announce_release)
        assert_int_equal(leader->ops->announce_release(leader, "mr", err), BATON_LOCKER_OK);
    usleep(50 * 1000); /* still busy; the subscriber thread counts it meanwhile */
    t0 = clock_mono_ms();
    assert_true(standby->ops->wait_release(standby, "mr", seen, 2000));
    int64_t took = clock_mono_ms() - t0;
    printf("missed_release: wait_release after a past announcement returned in %lld ms\n",
           (long long)took);
    assert_true(took < 100);
    if (BK == BK_REDIS) {
        assert_int_equal(standby->ops->release_seq(standby, "mr"), seen + 1);
    } else {
        uint64_t now = standby->ops->release_seq(standby, "mr");
        printf("missed_release: counter %llu -> %llu\n", (unsigned long long)seen,
               (unsigned long long)now);
        assert_true(now > seen);
    }
    assert_int_equal(baton_locker_try_lock(standby, "mr", 10000, &h, err), BATON_LOCKER_OK);
    if (IS_ETCD) {
        missed_release_etcd(sv, leader, standby, &h);
        return;
    }
    if (IS_PG) {
        missed_release_pg(sv, leader, standby, &h);
        return;
    }

    /* every announcement counts, waited for or not */
    uint64_t s1 = standby->ops->release_seq(standby, "mr");
    for (int i = 0; i < 3; i++)
        assert_int_equal(leader->ops->announce_release(leader, "mr", err), BATON_LOCKER_OK);
    assert_true(WAIT_FOR(standby->ops->release_seq(standby, "mr") == s1 + 3, 2000) >= 0);
    /* nothing new: times out */
    assert_false(standby->ops->wait_release(standby, "mr", s1 + 3, 100));

    /* the subscriber connection breaks: the counter advances once it is
     * subscribed again, so a standby that read it before cannot miss what was
     * announced in between */
    uint64_t s2 = standby->ops->release_seq(standby, "mr");
    uint64_t gen = standby->ops->generation(standby);
    assert_true(raw_int(port, "CLIENT KILL TYPE %s", "pubsub") >= 1);
    t0 = clock_mono_ms();
    assert_true(standby->ops->wait_release(standby, "mr", s2, 3000));
    printf("missed_release: counter advanced %lld ms after the subscriber was killed\n",
           (long long)(clock_mono_ms() - t0));
    assert_true(standby->ops->release_seq(standby, "mr") != s2);
    assert_true(standby->ops->generation(standby) != gen);
    /* subscribed again: announcements are counted again */
    assert_true(WAIT_FOR(numsub(port, "mr:released") == 1, 2000) >= 0);
    uint64_t s3 = standby->ops->release_seq(standby, "mr");
    assert_int_equal(leader->ops->announce_release(leader, "mr", err), BATON_LOCKER_OK);
    assert_true(standby->ops->wait_release(standby, "mr", s3, 2000));
    assert_int_equal(baton_locker_unlock(standby, "mr", h.token, err), BATON_LOCKER_OK);
    baton_locker_destroy(leader);
    baton_locker_destroy(standby);
    srv_destroy(sv);
}

/* (6) try_lock reports the generation of the connection that carried the
 * acquisition, read before it was sent (after any reconnect). A break right
 * after the grant -- before anyone reads the generation -- then shows as
 * generation() != grant.gen. The old try_lock did not fill grant.gen (the
 * guard read the generation after the call, absorbing such a break). */
/* etcd: the grant's generation is the lease connection's, read before the
 * request was sent, and equal to generation() while nothing broke, also
 * after earlier breaks; a break (the member killed) moves it; the lease
 * survives the member's restart. */
static void gen_before_grant_etcd(void)
{
    struct srv *sv = srv_start();
    struct baton_locker *l = locker_for(sv);
    struct baton_lock_grant g, g2;
    char err[BATON_LOCKER_ERR_MAX];
    assert_int_equal(baton_locker_try_lock(l, "gb", 10000, &g, err), BATON_LOCKER_OK);
    assert_true(g.gen != 0);
    assert_int_equal(g.gen, l->ops->generation(l)); /* nothing broke yet */
    assert_int_equal(srv_kill(sv), 0);
    assert_int_equal(l->ops->check(l, "gb", g.token, err), BATON_LOCKER_ERR);
    printf("gen_before_grant: check with the member down: %s\n", err);
    assert_true(l->ops->generation(l) != g.gen);
    assert_int_equal(srv_restart(sv), 0);
    int rc = l->ops->check(l, "gb", g.token, err);
    if (rc == BATON_LOCKER_ERR) rc = l->ops->check(l, "gb", g.token, err); /* found broken */
    assert_int_equal(rc, BATON_LOCKER_OK); /* the lease survived the restart */
    uint64_t before = l->ops->generation(l);
    assert_int_equal(baton_locker_try_lock(l, "gb2", 10000, &g2, err), BATON_LOCKER_OK);
    printf("gen_before_grant: after one break: generation %llu, grant.gen %llu\n",
           (unsigned long long)l->ops->generation(l), (unsigned long long)g2.gen);
    assert_int_equal(l->ops->generation(l), before);
    assert_int_equal(g2.gen, l->ops->generation(l));
    assert_int_equal(baton_locker_unlock(l, "gb", g.token, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_unlock(l, "gb2", g2.token, err), BATON_LOCKER_OK);
    baton_locker_destroy(l);
    srv_destroy(sv);
}

static void test_gen_before_grant(void **state)
{
    if (DURABLE) { /* PostgreSQL as etcd: the lease connection's breaks */
        gen_before_grant_etcd();
        return;
    }
    struct redis_server *srv = redis_server_start(NULL);
    assert_non_null(srv);
    int port = redis_server_port(srv);
    struct baton_locker *l = redis_locker(port);
    struct baton_lock_grant g, g2;
    char err[BATON_LOCKER_ERR_MAX];
    l->ops->release_seq(l, "gb"); /* the subscriber is connected and subscribed */
    assert_int_equal(baton_locker_try_lock(l, "gb", 10000, &g, err), BATON_LOCKER_OK);
    assert_true(g.gen != 0);
    assert_int_equal(g.gen, l->ops->generation(l)); /* nothing broke yet */
    /* a break right after the grant: the lease and subscriber connections die */
    assert_true(raw_int(port, "CLIENT KILL TYPE %s", "normal") >= 1);
    assert_true(raw_int(port, "CLIENT KILL TYPE %s", "pubsub") >= 1);
    /* the subscriber notices without any call on the lease connection */
    int64_t noticed = WAIT_FOR(l->ops->generation(l) != g.gen, 2000);
    printf("gen_before_grant: generation moved %lld ms after the kill\n", (long long)noticed);
    assert_true(noticed >= 0);
    /* the lease connection's break shows at its next use and moves it again */
    uint64_t g1 = l->ops->generation(l);
    assert_int_equal(l->ops->check(l, "gb", g.token, err), BATON_LOCKER_ERR);
    printf("gen_before_grant: check on the killed lease connection: %s\n", err);
    assert_true(l->ops->generation(l) != g1);
    assert_int_equal(l->ops->check(l, "gb", g.token, err), BATON_LOCKER_OK); /* reconnected */
    /* the grant's generation is the one after the reconnect, before sending */
    assert_true(raw_int(port, "CLIENT KILL TYPE %s", "normal") >= 1);
    assert_int_equal(baton_locker_try_lock(l, "gb2", 10000, &g2, err), BATON_LOCKER_ERR); /* found broken */
    uint64_t before = l->ops->generation(l);
    assert_int_equal(baton_locker_try_lock(l, "gb2", 10000, &g2, err), BATON_LOCKER_OK); /* reconnects */
    assert_true(g2.gen > before);
    assert_int_equal(g2.gen, l->ops->generation(l));
    baton_locker_destroy(l);
    redis_server_destroy(srv);
}

static long server_pid(int port)
{
    redisReply *r = raw(port, "INFO server");
    char *p = strstr(r->str, "process_id:");
    assert_non_null(p);
    long pid = strtol(p + strlen("process_id:"), NULL, 10);
    freeReplyObject(r);
    assert_true(pid > 0);
    return pid;
}

/* (7) An acquisition whose reply was lost (here: Redis stopped with SIGSTOP,
 * the command times out, and runs once Redis continues) is remembered per
 * key and released before the next try_lock of that key. Two keys with lost
 * replies: both are acquirable at once. With the old single slot the second
 * orphan overwrote the first, whose key stayed blocked for its whole ttl. */
static void test_orphan_per_key(void **state)
{
    REDIS_ONLY();
    struct redis_server *srv = redis_server_start(NULL);
    assert_non_null(srv);
    int port = redis_server_port(srv);
    pid_t pid = (pid_t)server_pid(port);
    struct baton_locker *l = redis_locker(port); /* command timeout 500 ms */
    struct baton_lock_grant g;
    char err[BATON_LOCKER_ERR_MAX];
    const char *keys[2] = {"orph:a", "orph:b"};
    for (int i = 0; i < 2; i++) {
        /* the lease connection is up (reconnected after the previous timeout) */
        assert_int_equal(l->ops->check(l, "orph:warm", "x", err), BATON_LOCKER_LOST);
        assert_int_equal(kill(pid, SIGSTOP), 0);
        int rc = baton_locker_try_lock(l, keys[i], 30000, &g, err);
        assert_int_equal(kill(pid, SIGCONT), 0);
        printf("orphan_per_key: try_lock %s with Redis stopped: %s (%s)\n", keys[i],
               baton_locker_status_name(rc), err);
        assert_int_equal(rc, BATON_LOCKER_ERR);
        /* the acquisition ran once Redis continued: the key is taken by a token
         * only the locker knows */
        assert_true(WAIT_FOR(raw_int(port, "EXISTS %s", keys[i]) == 1, 2000) >= 0);
    }
    assert_true(raw_int(port, "PTTL %s", "orph:a") > 20000);
    assert_true(raw_int(port, "PTTL %s", "orph:b") > 20000);
    /* both orphans are released before the next try_lock of each key */
    for (int i = 0; i < 2; i++) {
        int rc = baton_locker_try_lock(l, keys[i], 30000, &g, err);
        printf("orphan_per_key: next try_lock %s: %s\n", keys[i], baton_locker_status_name(rc));
        assert_int_equal(rc, BATON_LOCKER_OK);
        assert_int_equal(baton_locker_unlock(l, keys[i], g.token, err), BATON_LOCKER_OK);
    }
    baton_locker_destroy(l);
    redis_server_destroy(srv);
}

/* (3) claim, holder and ping run on a side connection of their own: lease
 * traffic (try_lock, renew, check) never waits behind them, and a break or
 * reconnect of the side connection never moves the generation (the guard
 * would re-verify its lease for nothing). */
static void test_side_connection_keeps_generation(void **state)
{
    REDIS_ONLY();
    struct redis_server *srv = redis_server_start(NULL);
    assert_non_null(srv);
    int port = redis_server_port(srv);
    struct baton_locker *l = redis_locker(port);
    struct baton_lock_grant g;
    char err[BATON_LOCKER_ERR_MAX], who[128];
    int64_t sent;
    assert_int_equal(baton_locker_try_lock(l, "side", 10000, &g, err), BATON_LOCKER_OK);
    uint64_t gen = l->ops->generation(l);
    assert_int_equal(l->ops->ping(l, err), BATON_LOCKER_OK);
    assert_int_equal(l->ops->holder(l, "side", who, sizeof who, err), BATON_LOCKER_OK);
    assert_non_null(strstr(who, " pid "));
    assert_int_equal(l->ops->holder(l, "nobody", who, sizeof who, err), BATON_LOCKER_LOST);
    assert_int_equal(baton_locker_claim(l, "side:once", 10000, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_claim(l, "side:once", 10000, err), BATON_LOCKER_HELD);
    /* two connections, each named after its role */
    long long lease_id = client_id(port, "baton-lease"), side_id = client_id(port, "baton-side");
    assert_true(lease_id > 0 && side_id > 0 && lease_id != side_id);
    assert_true(WAIT_FOR(client_id(port, "baton-sub") > 0, 2000) >= 0);
    /* the side connection breaks: side calls recover, the generation stays */
    freeReplyObject(raw(port, "CLIENT KILL ID %lld", side_id));
    int rc = l->ops->ping(l, err);
    if (rc != BATON_LOCKER_OK) rc = l->ops->ping(l, err); /* the first call may find it broken */
    assert_int_equal(rc, BATON_LOCKER_OK);
    assert_int_equal(l->ops->holder(l, "side", who, sizeof who, err), BATON_LOCKER_OK);
    assert_true(client_id(port, "baton-side") != side_id); /* a new one */
    assert_int_equal(l->ops->generation(l), gen);
    /* lease traffic never noticed: same connection, no error */
    assert_int_equal(baton_locker_renew(l, "side", g.token, 10000, &sent, err), BATON_LOCKER_OK);
    assert_int_equal(l->ops->check(l, "side", g.token, err), BATON_LOCKER_OK);
    assert_int_equal(client_id(port, "baton-lease"), lease_id);
    assert_int_equal(l->ops->generation(l), gen);
    /* a side call failing on an unreachable Redis does not move it either */
    assert_int_equal(redis_server_stop(srv), 0);
    assert_int_equal(l->ops->ping(l, err), BATON_LOCKER_ERR);
    printf("side connection, Redis down: %s\n", err);
    assert_int_equal(l->ops->ping(l, err), BATON_LOCKER_ERR);
    baton_locker_destroy(l);
    redis_server_destroy(srv);
}

/* Both backends: ping, holder, a one-shot claim (once; again only after its
 * ttl), inspect when the backend has it; none of it moves the generation. */
static void test_claim_holder_ping_inspect(void **state)
{
    struct baton_locker *l = LOCKER(), *m = LOCKER();
    struct baton_lock_grant g;
    char err[BATON_LOCKER_ERR_MAX], who[128];
    assert_int_equal(baton_locker_try_lock(l, "side2", 10000, &g, err), BATON_LOCKER_OK);
    uint64_t gen = l->ops->generation ? l->ops->generation(l) : 0;
    assert_non_null(l->ops->ping);
    assert_int_equal(l->ops->ping(l, err), BATON_LOCKER_OK);
    assert_non_null(l->ops->holder);
    assert_int_equal(l->ops->holder(m, "side2", who, sizeof who, err), BATON_LOCKER_OK);
    printf("holder: %s\n", who);
    assert_non_null(strstr(who, " pid "));
    assert_int_equal(l->ops->holder(l, "nobody2", who, sizeof who, err), BATON_LOCKER_LOST);
    /* claim: once */
    assert_int_equal(baton_locker_claim(l, "side2:once", 10000, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_claim(l, "side2:once", 10000, err), BATON_LOCKER_HELD);
    assert_int_equal(baton_locker_claim(m, "side2:once", 10000, err), BATON_LOCKER_HELD);
    /* a claim taken by try_lock's key is held too */
    assert_int_equal(baton_locker_claim(m, "side2", 10000, err), BATON_LOCKER_HELD);
    /* again only once its ttl ran out (etcd rounds it up to whole seconds) */
    int64_t t0 = clock_mono_ms();
    assert_int_equal(baton_locker_claim(l, "side2:short", 1000, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_claim(m, "side2:short", 1000, err), BATON_LOCKER_HELD);
    int64_t again = WAIT_FOR(baton_locker_claim(m, "side2:short", 1000, err) == BATON_LOCKER_OK,
                             IS_ETCD ? 6000 : 3000);
    int64_t since = clock_mono_ms() - t0;
    printf("claim with ttl 1000 ms: claimed again %lld ms later\n", (long long)since);
    assert_true(again >= 0);
    assert_true(since >= 950);
    /* inspect, when the backend has it */
    struct baton_lock_info info;
    int rc = baton_locker_inspect(m, "side2", &info, err);
    if (rc == BATON_LOCKER_UNSUPPORTED) {
        printf("inspect: %s\n", err);
    } else {
        assert_int_equal(rc, BATON_LOCKER_OK);
        printf("inspect: held %d epoch %llu ttl %lld ms holder \"%s\"\n", info.held,
               (unsigned long long)info.epoch, (long long)info.ttl_ms, info.holder);
        assert_true(info.held);
        assert_int_equal(info.epoch, g.epoch);
        assert_true(info.ttl_ms > 0 && info.ttl_ms <= 10000);
        assert_non_null(strstr(info.holder, " pid "));
        assert_int_equal(baton_locker_inspect(m, "nobody2", &info, err), BATON_LOCKER_OK);
        assert_false(info.held);
    }
    if (l->ops->generation) assert_int_equal(l->ops->generation(l), gen);
    assert_int_equal(baton_locker_unlock(l, "side2", g.token, err), BATON_LOCKER_OK);
    assert_int_equal(l->ops->holder(m, "side2", who, sizeof who, err), BATON_LOCKER_LOST);
    baton_locker_destroy(l);
    baton_locker_destroy(m);
}

/* ---- PostgreSQL: the lease row lock (same-database fencing) ------------------ */

struct row_holder {
    const struct pg_server *p;
    char sql[512];
    int rc;
};

static void *hold_row(void *arg)
{
    struct row_holder *rh = arg;
    char out[512];
    rh->rc = pg_server_sql(rh->p, rh->sql, out, sizeof out);
    return NULL;
}

/* A writer's transaction holding the lease row FOR KEY SHARE (the
 * postgresql sink's lease_fence) keeps the next acquisition out until it
 * ends: the acquisition (its upsert sets the key column: FOR UPDATE) waits
 * for it, at most its command timeout (lock_timeout, then an error naming
 * the lock), and is granted once the writer committed. A renewal (FOR NO
 * KEY UPDATE) does not wait for it. */
static void test_lease_row_lock(void **state)
{
    if (!IS_PG) {
        printf("skipped: a PostgreSQL-only test\n");
        skip();
    }
    struct baton_locker *a = LOCKER(), *quick = LOCKER(), *patient = locker_patient(&shared, 5000);
    struct baton_lock_grant g, h;
    char err[BATON_LOCKER_ERR_MAX];
    int64_t sent;
    /* a renewal under a writer's share lock: not held up */
    assert_int_equal(baton_locker_try_lock(a, "rowlock", 2000, &g, err), BATON_LOCKER_OK);
    struct row_holder rh = {.p = shared.p};
    snprintf(rh.sql, sizeof rh.sql,
             "BEGIN; SELECT 1 FROM baton_leases WHERE key = 'rowlock' FOR KEY SHARE; "
             "SELECT pg_sleep(1.5); COMMIT;");
    pthread_t th;
    pthread_create(&th, NULL, hold_row, &rh);
    usleep(300 * 1000);
    int64_t t0 = clock_mono_ms();
    assert_int_equal(baton_locker_renew(a, "rowlock", g.token, 200, &sent, err), BATON_LOCKER_OK);
    int64_t renew_ms = clock_mono_ms() - t0;
    printf("lease row lock: a renewal under a writer's share lock took %lld ms\n", (long long)renew_ms);
    assert_true(renew_ms < 400);
    pthread_join(th, NULL);
    assert_int_equal(rh.rc, 0);
    /* the lease (ttl 200 ms) has expired; a writer holds the row again */
    pthread_create(&th, NULL, hold_row, &rh);
    usleep(300 * 1000);
    t0 = clock_mono_ms();
    int rc = baton_locker_try_lock(quick, "rowlock", 2000, &h, err);
    int64_t quick_ms = clock_mono_ms() - t0;
    printf("lease row lock: acquisition with a 500 ms command timeout: %s after %lld ms: %s\n",
           baton_locker_status_name(rc), (long long)quick_ms, err);
    assert_int_equal(rc, BATON_LOCKER_ERR);
    assert_non_null(strstr(err, "lock timeout"));
    t0 = clock_mono_ms();
    rc = baton_locker_try_lock(patient, "rowlock", 2000, &h, err);
    int64_t waited = clock_mono_ms() - t0;
    printf("lease row lock: acquisition with a 5 s command timeout: %s after %lld ms\n",
           baton_locker_status_name(rc), (long long)waited);
    assert_int_equal(rc, BATON_LOCKER_OK);
    assert_true(waited >= 500); /* the writer held the row for 1.5 s from 0.3 s before */
    assert_true(h.epoch > g.epoch);
    pthread_join(th, NULL);
    assert_int_equal(rh.rc, 0);
    assert_int_equal(baton_locker_unlock(patient, "rowlock", h.token, err), BATON_LOCKER_OK);
    baton_locker_destroy(a);
    baton_locker_destroy(quick);
    baton_locker_destroy(patient);
}

/* PostgreSQL ends sessions on its own (pg_terminate_backend, a fast
 * shutdown, idle_session_timeout): it says FATAL on the idle connection
 * and closes it. The next call opens a new connection instead of failing on
 * the dead one, and the lease is untouched. A database without the
 * locker's tables: every call's error names --init-locker. */
static void test_pg_session_ended_and_missing_tables(void **state)
{
    if (!IS_PG) {
        printf("skipped: a PostgreSQL-only test\n");
        skip();
    }
    struct baton_locker *a = LOCKER(), *b = LOCKER();
    struct baton_lock_grant g, h;
    char err[BATON_LOCKER_ERR_MAX], out[512];
    int64_t sent;
    assert_int_equal(baton_locker_try_lock(a, "ended", 10000, &g, err), BATON_LOCKER_OK);
    assert_int_equal(b->ops->ping(b, err), BATON_LOCKER_OK);
    uint64_t s0 = b->ops->release_seq(b, "ended");
    praw(shared.p, out, sizeof out,
         "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
         "WHERE application_name = 'baton-locker' AND pid <> pg_backend_pid()");
    printf("session ended: %s locker sessions terminated\n", out);
    assert_true(atoi(out) >= 4); /* a: lease, side; b: side, listen */
    usleep(100 * 1000);
    /* every call works at once: the dead connections are replaced first */
    int rrc = baton_locker_renew(a, "ended", g.token, 10000, &sent, err);
    if (rrc != BATON_LOCKER_OK) fail_msg("renew after the sessions ended: %s: %s", baton_locker_status_name(rrc), err);
    assert_int_equal(a->ops->check(a, "ended", g.token, err), BATON_LOCKER_OK);
    assert_int_equal(b->ops->ping(b, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_try_lock(b, "ended", 10000, &h, err), BATON_LOCKER_HELD);
    /* LISTEN again: announcements may have been missed, so the count moved */
    assert_true(b->ops->wait_release(b, "ended", s0, 3000));
    uint64_t s1 = b->ops->release_seq(b, "ended");
    assert_int_equal(baton_locker_unlock(a, "ended", g.token, err), BATON_LOCKER_OK);
    assert_true(b->ops->wait_release(b, "ended", s1, 2000));
    baton_locker_destroy(a);
    baton_locker_destroy(b);

    /* a database without the tables */
    praw(shared.p, out, sizeof out, "CREATE DATABASE notables");
    char conninfo[256];
    snprintf(conninfo, sizeof conninfo, "%s dbname=notables", pg_server_conninfo(shared.p));
    struct baton_pg_opts o = {.conninfo = conninfo, .connect_timeout_ms = 2000, .command_timeout_ms = 2000};
    struct baton_locker *n = baton_locker_pg_create(&o, err);
    assert_non_null(n);
    assert_int_equal(baton_locker_try_lock(n, "k", 2000, &h, err), BATON_LOCKER_ERR);
    printf("no tables: %s\n", err);
    assert_non_null(strstr(err, "baton_leases"));
    assert_non_null(strstr(err, "--init-locker --apply"));
    assert_int_equal(baton_locker_claim(n, "c", 2000, err), BATON_LOCKER_ERR);
    assert_non_null(strstr(err, "--init-locker --apply"));
    baton_locker_destroy(n);
    assert_int_equal(baton_locker_pg_init_schema(&o, err), 0);
    n = baton_locker_pg_create(&o, err);
    assert_int_equal(baton_locker_try_lock(n, "k", 2000, &h, err), BATON_LOCKER_OK);
    baton_locker_destroy(n);
}

/* ---- shared state beside a lease (fenced_set / shared_get) ----------------- */

/* "<key>:<name>" is written only while "<key>:epoch" holds the writer's
 * epoch, in one script on the side connection: a superseded leader never
 * overwrites what a newer one wrote. Values are binary safe and expire. */
static void test_fenced_set_shared_get(void **state)
{
    struct baton_locker *a = LOCKER(), *b = LOCKER();
    struct baton_lock_grant ga, gb, gc;
    char err[BATON_LOCKER_ERR_MAX], buf[128];
    if (BK == BK_REDIS) freeReplyObject(raw(PORT, "DEL fx fx:epoch fx:mark fx:none"));
    assert_int_equal(baton_locker_try_lock(a, "fx", 10000, &ga, err), BATON_LOCKER_OK);
    uint64_t gen = a->ops->generation(a);
    /* spaces, newlines, CR, quotes: one binary-safe argument */
    static const char v1[] = "hello world\nline 2\r\n\"quoted\" 'x' %s";
    assert_int_equal(baton_locker_fenced_set(a, "fx", "mark", ga.epoch, v1, strlen(v1), 10000, err),
                     BATON_LOCKER_OK);
    assert_int_equal(baton_locker_shared_get(b, "fx", "mark", buf, sizeof buf, err), BATON_LOCKER_OK);
    assert_string_equal(buf, v1);
    if (IS_PG) {
        char rv[128];
        raw_value("fx:mark", rv, sizeof rv);
        assert_string_equal(rv, v1);
    } else if (!IS_ETCD) {
        redisReply *r = raw(PORT, "GET fx:mark");
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        assert_int_equal(r->len, strlen(v1));
        assert_memory_equal(r->str, v1, strlen(v1));
        freeReplyObject(r);
    } else {
        char rv[128];
        size_t rn = 0;
        assert_int_equal(eraw_range(shared.e, "fx:mark", rv, sizeof rv, &rn, NULL, NULL), 1);
        assert_int_equal(rn, strlen(v1));
        assert_memory_equal(rv, v1, strlen(v1));
    }
    long long pttl = raw_ttl_ms("fx:mark");
    printf("fenced_set: value key PTTL %lld ms (ttl 10000)\n", pttl);
    assert_true(pttl > 0 && pttl <= 10000);
    /* an embedded NUL goes through too */
    static const char v0[] = "a\0b";
    assert_int_equal(baton_locker_fenced_set(a, "fx", "mark", ga.epoch, v0, 3, 10000, err), BATON_LOCKER_OK);
    if (BK == BK_REDIS) assert_int_equal(raw_int(PORT, "STRLEN %s", "fx:mark"), 3);
    memset(buf, 'z', sizeof buf);
    assert_int_equal(baton_locker_shared_get(b, "fx", "mark", buf, sizeof buf, err), BATON_LOCKER_OK);
    assert_memory_equal(buf, v0, 4);
    if (BK == BK_REDIS) {
        /* the epoch compared is the one the acquire script stored */
        char dec[24];
        snprintf(dec, sizeof dec, "%llu", (unsigned long long)ga.epoch);
        assert_int_equal(baton_locker_shared_get(b, "fx", "epoch", buf, sizeof buf, err), BATON_LOCKER_OK);
        assert_string_equal(buf, dec);
    }

    /* a new leader (released, taken by b): a's writes are fenced off */
    assert_int_equal(baton_locker_unlock(a, "fx", ga.token, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_try_lock(b, "fx", 10000, &gb, err), BATON_LOCKER_OK);
    assert_true(gb.epoch > ga.epoch);
    assert_int_equal(baton_locker_fenced_set(b, "fx", "mark", gb.epoch, "new", 3, 10000, err),
                     BATON_LOCKER_OK);
    assert_int_equal(baton_locker_fenced_set(a, "fx", "mark", ga.epoch, "stale", 5, 10000, err),
                     BATON_LOCKER_LOST);
    printf("fenced_set, superseded: %s\n", err);
    assert_non_null(strstr(err, "fx:mark"));
    assert_int_equal(baton_locker_shared_get(a, "fx", "mark", buf, sizeof buf, err), BATON_LOCKER_OK);
    assert_string_equal(buf, "new");
    /* the lease expired, nobody took it since: the fence is the epoch only */
    assert_int_equal(baton_locker_unlock(b, "fx", gb.token, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_try_lock(b, "fx", T(100), &gb, err), BATON_LOCKER_OK);
    if (BK == BK_REDIS) {
        usleep(150 * 1000);
        assert_int_equal(raw_int(PORT, "EXISTS %s", "fx"), 0);
    } else {
        int64_t gone = WAIT_FOR(!raw_exists("fx"), 6000);
        printf("fenced_set: lease of 2000 ms expired after %lld ms\n", (long long)gone);
        assert_true(gone >= 0);
    }
    assert_int_equal(baton_locker_fenced_set(b, "fx", "mark", gb.epoch, "late", 4, 10000, err),
                     BATON_LOCKER_OK);
    /* expiry and the second try_lock: the old term is fenced off */
    assert_int_equal(baton_locker_try_lock(a, "fx", 10000, &gc, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_fenced_set(b, "fx", "mark", gb.epoch, "stale", 5, 10000, err),
                     BATON_LOCKER_LOST);
    assert_int_equal(baton_locker_shared_get(b, "fx", "mark", buf, sizeof buf, err), BATON_LOCKER_OK);
    assert_string_equal(buf, "late");

    /* absent: no value, or no epoch at all (nothing written then) */
    assert_int_equal(baton_locker_shared_get(a, "fx", "none", buf, sizeof buf, err), BATON_LOCKER_LOST);
    assert_string_equal(buf, "");
    if (BK == BK_REDIS) freeReplyObject(raw(PORT, "DEL nofx:epoch nofx:mark"));
    assert_int_equal(baton_locker_fenced_set(a, "nofx", "mark", gc.epoch, "v", 1, 10000, err),
                     BATON_LOCKER_LOST);
    assert_false(raw_exists("nofx:mark"));

    /* the value expires after its ttl */
    assert_int_equal(baton_locker_fenced_set(a, "fx", "short", gc.epoch, "s", 1, 100, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_shared_get(a, "fx", "short", buf, sizeof buf, err), BATON_LOCKER_OK);
    int64_t gone = WAIT_FOR(baton_locker_shared_get(a, "fx", "short", buf, sizeof buf, err) ==
                                BATON_LOCKER_LOST,
                            IS_ETCD ? 15000 : 2000); /* etcd: min lease ttl, lessor under load (6 s was seen exceeded) */
    printf("fenced_set: value with ttl 100 ms gone after %lld ms\n", (long long)gone);
    assert_true(gone >= 0);

    /* the buffer needs room for the NUL */
    assert_int_equal(baton_locker_fenced_set(a, "fx", "big", gc.epoch, "12345678", 8, 10000, err),
                     BATON_LOCKER_OK);
    char small[8], exact[9];
    assert_int_equal(baton_locker_shared_get(a, "fx", "big", small, sizeof small, err), BATON_LOCKER_ERR);
    printf("shared_get, small buffer: %s\n", err);
    if (BK == BK_REDIS) assert_non_null(strstr(err, "value of 8 bytes exceeds the buffer of 8"));
    assert_non_null(strstr(err, "fx:big"));
    assert_int_equal(baton_locker_shared_get(a, "fx", "big", exact, sizeof exact, err), BATON_LOCKER_OK);
    assert_string_equal(exact, "12345678");
    if (DURABLE) {
        /* all of it on the side connection: the lease generation never moved */
        assert_int_equal(a->ops->generation(a), gen);
        assert_int_equal(baton_locker_unlock(a, "fx", gc.token, err), BATON_LOCKER_OK);
        baton_locker_destroy(a);
        baton_locker_destroy(b);
        return; /* the rest is about Redis types and scripts */
    }

    /* wrong types: errors, never "lost" */
    freeReplyObject(raw(PORT, "DEL wt:epoch wt:mark"));
    freeReplyObject(raw(PORT, "HSET wt:epoch f v"));
    assert_int_equal(baton_locker_fenced_set(a, "wt", "mark", 1, "v", 1, 10000, err), BATON_LOCKER_ERR);
    printf("fenced_set, hash epoch key: %s\n", err);
    assert_non_null(strstr(err, "WRONGTYPE"));
    assert_non_null(strstr(err, "wt:mark"));
    freeReplyObject(raw(PORT, "SADD wt:mark x"));
    assert_int_equal(baton_locker_shared_get(a, "wt", "mark", buf, sizeof buf, err), BATON_LOCKER_ERR);
    assert_non_null(strstr(err, "WRONGTYPE"));

    /* script cache lost: NOSCRIPT, EVAL, reloaded; then by SHA again */
    freeReplyObject(raw(PORT, "SCRIPT FLUSH"));
    assert_int_equal(baton_locker_fenced_set(a, "fx", "mark", gc.epoch, "after flush", 11, 10000, err),
                     BATON_LOCKER_OK);
    assert_int_equal(baton_locker_fenced_set(a, "fx", "mark", gc.epoch, "by sha", 6, 10000, err),
                     BATON_LOCKER_OK);
    assert_int_equal(baton_locker_shared_get(a, "fx", "mark", buf, sizeof buf, err), BATON_LOCKER_OK);
    assert_string_equal(buf, "by sha");
    /* all of it on the side connection: the lease generation never moved */
    assert_int_equal(a->ops->generation(a), gen);
    assert_int_equal(baton_locker_unlock(a, "fx", gc.token, err), BATON_LOCKER_OK);
    baton_locker_destroy(a);
    baton_locker_destroy(b);
}

/* Redis down: BATON_LOCKER_ERR naming the address and the key; back up with its
 * data lost: the epoch is gone, so the old term's write is BATON_LOCKER_LOST, and
 * a new acquisition writes again. */
/* etcd: the member down: BATON_LOCKER_ERR naming the endpoint and the key; back
 * up, its data kept: the term's epoch still fences (its writes go through),
 * a newer term's epoch fences it off. */
static void fenced_set_etcd_down(void)
{
    struct srv *sv = srv_start();
    struct baton_locker *l = locker_for(sv);
    struct baton_lock_grant g, g2;
    char err[BATON_LOCKER_ERR_MAX], buf[64], where[64];
    snprintf(where, sizeof where, "127.0.0.1:%d", srv_port(sv));
    const char *key = "baton:active:x";
    assert_int_equal(baton_locker_try_lock(l, key, 10000, &g, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_fenced_set(l, key, "mark", g.epoch, "up", 2, 10000, err), BATON_LOCKER_OK);
    assert_int_equal(srv_kill(sv), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(baton_locker_fenced_set(l, key, "mark", g.epoch, "down", 4, 10000, err),
                         BATON_LOCKER_ERR);
        printf("fenced_set, %s down (%d): %s\n", BK_NAME[BK], i, err);
        assert_non_null(strstr(err, where));
        assert_non_null(strstr(err, "baton:active:x:mark"));
        assert_int_equal(baton_locker_shared_get(l, key, "mark", buf, sizeof buf, err), BATON_LOCKER_ERR);
        printf("shared_get, %s down (%d): %s\n", BK_NAME[BK], i, err);
        assert_non_null(strstr(err, where));
        assert_non_null(strstr(err, "baton:active:x:mark"));
    }
    assert_int_equal(srv_restart(sv), 0);
    int rc = baton_locker_shared_get(l, key, "mark", buf, sizeof buf, err);
    if (rc == BATON_LOCKER_ERR) rc = baton_locker_shared_get(l, key, "mark", buf, sizeof buf, err);
    assert_int_equal(rc, BATON_LOCKER_OK);
    assert_string_equal(buf, "up"); /* the data survived */
    assert_int_equal(baton_locker_fenced_set(l, key, "mark", g.epoch, "old", 3, 10000, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_unlock(l, key, g.token, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_try_lock(l, key, 10000, &g2, err), BATON_LOCKER_OK);
    assert_true(g2.epoch > g.epoch);
    assert_int_equal(baton_locker_fenced_set(l, key, "mark", g.epoch, "stale", 5, 10000, err),
                     BATON_LOCKER_LOST);
    assert_int_equal(baton_locker_fenced_set(l, key, "mark", g2.epoch, "again", 5, 10000, err),
                     BATON_LOCKER_OK);
    assert_int_equal(baton_locker_shared_get(l, key, "mark", buf, sizeof buf, err), BATON_LOCKER_OK);
    assert_string_equal(buf, "again");
    assert_int_equal(baton_locker_unlock(l, key, g2.token, err), BATON_LOCKER_OK);
    baton_locker_destroy(l);
    srv_destroy(sv);
}

static void test_fenced_set_backend_down(void **state)
{
    if (DURABLE) {
        fenced_set_etcd_down();
        return;
    }
    struct redis_server *srv = redis_server_start(NULL);
    assert_non_null(srv);
    int port = redis_server_port(srv);
    struct baton_locker *l = redis_locker(port);
    struct baton_lock_grant g;
    char err[BATON_LOCKER_ERR_MAX], buf[64], where[64];
    snprintf(where, sizeof where, "redis 127.0.0.1:%d: ", port);
    const char *key = "baton:active:x";
    assert_int_equal(baton_locker_try_lock(l, key, 10000, &g, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_fenced_set(l, key, "mark", g.epoch, "up", 2, 10000, err), BATON_LOCKER_OK);
    assert_int_equal(redis_server_stop(srv), 0);
    for (int i = 0; i < 2; i++) { /* the broken connection, then a refused connect */
        assert_int_equal(baton_locker_fenced_set(l, key, "mark", g.epoch, "down", 4, 10000, err),
                         BATON_LOCKER_ERR);
        printf("fenced_set, Redis down (%d): %s\n", i, err);
        assert_non_null(strstr(err, where));
        assert_non_null(strstr(err, "fenced write baton:active:x:mark: "));
        assert_int_equal(baton_locker_shared_get(l, key, "mark", buf, sizeof buf, err), BATON_LOCKER_ERR);
        printf("shared_get, Redis down (%d): %s\n", i, err);
        assert_non_null(strstr(err, where));
        assert_non_null(strstr(err, "shared read baton:active:x:mark: "));
    }
    assert_non_null(strstr(err, "refused"));
    assert_int_equal(redis_server_restart(srv), 0);
    assert_int_equal(baton_locker_fenced_set(l, key, "mark", g.epoch, "old", 3, 10000, err),
                     BATON_LOCKER_LOST);
    assert_int_equal(baton_locker_shared_get(l, key, "mark", buf, sizeof buf, err), BATON_LOCKER_LOST);
    struct baton_lock_grant g2;
    int rc = baton_locker_try_lock(l, key, 10000, &g2, err);
    if (rc == BATON_LOCKER_ERR) rc = baton_locker_try_lock(l, key, 10000, &g2, err); /* found broken */
    assert_int_equal(rc, BATON_LOCKER_OK);
    assert_true(g2.epoch > g.epoch);
    assert_int_equal(baton_locker_fenced_set(l, key, "mark", g2.epoch, "again", 5, 10000, err),
                     BATON_LOCKER_OK);
    assert_int_equal(baton_locker_shared_get(l, key, "mark", buf, sizeof buf, err), BATON_LOCKER_OK);
    assert_string_equal(buf, "again");
    baton_locker_destroy(l);
    redis_server_destroy(srv);
}

/* ---- ActiveGuard ---------------------------------------------------------- */

#define MAXG 3
struct sampler {
    pthread_mutex_t mu;
    struct baton_active_guard *g[MAXG];
    int n;
    atomic_bool stop;
    long samples, violations, leaderless;
    pthread_t th;
};

static void *sample_loop(void *arg)
{
    struct sampler *s = arg;
    while (!atomic_load(&s->stop)) {
        bool p1[MAXG] = {0}, p2[MAXG] = {0};
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < s->n; i++) p1[i] = s->g[i] && baton_active_guard_is_leader_now(s->g[i]);
        for (int i = s->n - 1; i >= 0; i--)
            p2[i] = s->g[i] && baton_active_guard_is_leader_now(s->g[i]);
        pthread_mutex_unlock(&s->mu);
        int both = 0, any = 0;
        for (int i = 0; i < s->n; i++) {
            both += p1[i] && p2[i];
            any += p1[i];
        }
        s->samples++;
        if (both > 1) s->violations++;
        if (any == 0) s->leaderless++;
        usleep(500);
    }
    return NULL;
}

static int leader_index(struct sampler *s)
{
    int idx = -1, count = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n; i++)
        if (s->g[i] && baton_active_guard_is_leader_now(s->g[i])) {
            idx = i;
            count++;
        }
    pthread_mutex_unlock(&s->mu);
    return count == 1 ? idx : (count > 1 ? -2 : -1);
}

static struct baton_active_guard *new_guard(struct baton_locker *l, int64_t ttl, int64_t renew, int64_t retry)
{
    struct baton_active_guard_options o = {.ttl_ms = ttl, .renew_ms = renew, .retry_ms = retry};
    char err[256];
    struct baton_active_guard *g = baton_active_guard_create(l, "itest:lease", &o, NULL, err, sizeof err);
    assert_non_null(g);
    assert_int_equal(baton_active_guard_start(g), 0);
    return g;
}

static void test_backend_restart_never_two_leaders(void **state)
{
    struct srv *srv = srv_start();
    struct baton_locker *l[2] = {locker_for(srv), locker_for(srv)};
    struct sampler s = {.n = 2};
    pthread_mutex_init(&s.mu, NULL);
    /* lease deadline ~2850 ms after each renewal: noticing the kill well before
     * that shows the connection watch works, not the deadline */
    s.g[0] = new_guard(l[0], 3000, 1000, 100);
    s.g[1] = new_guard(l[1], 3000, 1000, 100);
    pthread_create(&s.th, NULL, sample_loop, &s);
    assert_true(WAIT_FOR(leader_index(&s) >= 0, 3000) >= 0);
    int first = leader_index(&s);
    assert_true(first >= 0);
    uint64_t epoch_before = baton_active_guard_epoch(s.g[first]);

    for (int round = 0; round < 2; round++) {
        int64_t t0 = clock_mono_ms();
        assert_int_equal(srv_kill(srv), 0);
        /* the leader notices at once (connection broke), not at the deadline;
         * etcd (no connection to watch): at its next renewal (every 1000 ms,
         * command timeout 500 ms), well before the deadline (~2850 ms) */
        int64_t noticed = WAIT_FOR(leader_index(&s) == -1, DURABLE ? 4000 : 2000);
        printf("restart %d: leader-now false %lld ms after the %s server was killed\n", round,
               (long long)noticed, BK_NAME[BK]);
        assert_true(noticed >= 0 && noticed < (DURABLE ? 2000 : 1000));
        usleep(1200 * 1000);
        assert_int_equal(leader_index(&s), -1);
        /* etcd keeps its data across the restart: a term survives an outage
         * shorter than its deadline (a renewal then succeeds, rightly). Stay
         * down past the ttl, so the deadline has surely passed and the next
         * leader needs a new epoch. (Redis here restarts empty.) */
        if (DURABLE)
            while (clock_mono_ms() - t0 < 3100) usleep(20 * 1000);
        unsigned long long errs = 0;
        for (int i = 0; i < 2; i++)
            errs += atomic_load(&baton_active_guard_stats(s.g[i])->backend_errors);
        assert_true(errs > 0);
        struct baton_lock_grant g;
        char err[BATON_LOCKER_ERR_MAX];
        assert_int_equal(baton_locker_try_lock(l[0], "probe", T(1000), &g, err), BATON_LOCKER_ERR);
        assert_true(strlen(err) > 0);
        assert_int_equal(srv_restart(srv), 0);
        /* etcd keeps the old term's lease (its release failed while the member
         * was down), with its ttl running again from the restart */
        int64_t back = WAIT_FOR(leader_index(&s) >= 0, DURABLE ? 10000 : 5000);
        assert_true(back >= 0);
        printf("restart %d: a leader again %lld ms after %s came back (down %lld ms)\n", round,
               (long long)back, BK_NAME[BK],
               (long long)(clock_mono_ms() - t0 - back));
        int now_leader = leader_index(&s);
        assert_true(now_leader >= 0);
        assert_true(baton_active_guard_epoch(s.g[now_leader]) > epoch_before);
        epoch_before = baton_active_guard_epoch(s.g[now_leader]);
        usleep(500 * 1000);
        assert_true(leader_index(&s) >= 0);
    }
    atomic_store(&s.stop, true);
    pthread_join(s.th, NULL);
    printf("restart test: %ld samples, %ld with two leaders\n", s.samples, s.violations);
    assert_int_equal(s.violations, 0);
    for (int i = 0; i < 2; i++) {
        baton_active_guard_destroy(s.g[i]);
        baton_locker_destroy(l[i]);
    }
    pthread_mutex_destroy(&s.mu);
    srv_destroy(srv);
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

static void test_three_guards_leader_repeatedly_stopped(void **state)
{
    struct baton_locker *l[MAXG];
    struct sampler s = {.n = MAXG};
    pthread_mutex_init(&s.mu, NULL);
    for (int i = 0; i < MAXG; i++) {
        l[i] = LOCKER();
        s.g[i] = new_guard(l[i], T(1500), 500, 2000); /* retry 2 s: handover relies on announce */
    }
    pthread_create(&s.th, NULL, sample_loop, &s);
    assert_true(WAIT_FOR(leader_index(&s) >= 0, 5000) >= 0);
    long long handover[64];
    int nh = 0;
    int64_t end = clock_mono_ms() + 10000;
    while (clock_mono_ms() < end && nh < 64) {
        usleep(400 * 1000);
        int li = leader_index(&s);
        assert_true(li >= 0);
        struct baton_active_guard *old = s.g[li];
        int64_t t0 = clock_mono_ms();
        baton_active_guard_stop(old); /* graceful: demote, release, announce */
        int64_t took = WAIT_FOR(leader_index(&s) >= 0, 3000);
        assert_true(took >= 0);
        handover[nh++] = clock_mono_ms() - t0;
        assert_true(leader_index(&s) != li);
        pthread_mutex_lock(&s.mu);
        s.g[li] = NULL;
        pthread_mutex_unlock(&s.mu);
        baton_active_guard_destroy(old);
        struct baton_active_guard *fresh = new_guard(l[li], T(1500), 500, 2000);
        pthread_mutex_lock(&s.mu);
        s.g[li] = fresh;
        pthread_mutex_unlock(&s.mu);
    }
    atomic_store(&s.stop, true);
    pthread_join(s.th, NULL);
    qsort(handover, (size_t)nh, sizeof handover[0], cmp_ll);
    printf("3 guards, 10 s: %d graceful handovers, stop->new leader ms: min %lld median %lld "
           "max %lld (retry interval 2000 ms); %ld samples, %ld leaderless, %ld with two "
           "leaders\n",
           nh, handover[0], handover[nh / 2], handover[nh - 1], s.samples, s.leaderless,
           s.violations);
    assert_true(nh >= 10);
    assert_int_equal(s.violations, 0);
    assert_true(handover[nh - 1] < 1000);
    for (int i = 0; i < MAXG; i++) {
        baton_active_guard_destroy(s.g[i]);
        baton_locker_destroy(l[i]);
    }
    pthread_mutex_destroy(&s.mu);
}

/* The backend frozen (SIGSTOP) for longer than the lease under three guards:
 * the leader steps down before its lease can expire, nobody leads while it
 * is frozen, a new term (a higher epoch) follows once it continues; never
 * two leaders. */
/* Redis: the renewals of many leases held by one locker travel together.
 * 64 guards lead on one locker (ttl 3000, renew 1000): over 3 s they make
 * at least 64 x 2 renewals, in at most a quarter as many round trips (each
 * guard renews on a shared grid and the locker pipelines what queues while
 * a round trip is in flight), and every one of them leads throughout. */
static void test_renewals_batched(void **state)
{
    if (BK != BK_REDIS) {
        uint64_t rt, calls;
        struct baton_locker *l = LOCKER();
        assert_int_equal(baton_locker_lease_traffic(l, &rt, &calls), -1); /* not counted */
        baton_locker_destroy(l);
        return;
    }
    enum { NG = 64 };
    struct baton_locker *l = LOCKER();
    struct baton_active_guard *g[NG];
    for (int i = 0; i < NG; i++) {
        char scope[32];
        snprintf(scope, sizeof scope, "batch:%d", i);
        struct baton_active_guard_options o = {.ttl_ms = 3000, .renew_ms = 1000, .retry_ms = 100};
        char err[256];
        g[i] = baton_active_guard_create(l, scope, &o, NULL, err, sizeof err);
        assert_non_null(g[i]);
        assert_int_equal(baton_active_guard_start(g[i]), 0);
    }
    int leading = 0;
    int64_t until = clock_mono_ms() + 5000;
    while (clock_mono_ms() < until) {
        leading = 0;
        for (int i = 0; i < NG; i++) leading += baton_active_guard_is_leader_now(g[i]);
        if (leading == NG) break;
        usleep(10 * 1000);
    }
    assert_int_equal(leading, NG);
    usleep(1100 * 1000); /* every term's first (shortened) interval is over */
    uint64_t rt0, c0, rt1, c1;
    assert_int_equal(baton_locker_lease_traffic(l, &rt0, &c0), 0);
    unsigned long long fail0 = 0, fail1 = 0;
    for (int i = 0; i < NG; i++) fail0 += atomic_load(&baton_active_guard_stats(g[i])->renew_failures);
    for (int t = 0; t < 30; t++) {
        usleep(100 * 1000);
        for (int i = 0; i < NG; i++) assert_true(baton_active_guard_is_leader_now(g[i]));
    }
    assert_int_equal(baton_locker_lease_traffic(l, &rt1, &c1), 0);
    for (int i = 0; i < NG; i++) fail1 += atomic_load(&baton_active_guard_stats(g[i])->renew_failures);
    printf("renewals batched: %llu calls in %llu round trips over 3 s (64 leases)\n",
           (unsigned long long)(c1 - c0), (unsigned long long)(rt1 - rt0));
    assert_true(c1 - c0 >= NG * 2);
    assert_true((rt1 - rt0) * 4 <= c1 - c0);
    assert_true(fail1 == fail0);
    for (int i = 0; i < NG; i++) baton_active_guard_destroy(g[i]);
    baton_locker_destroy(l);
}

/* Redis: the attempts of many standbys on one locker travel together (the
 * acquirer thread). 64 guards lead on one locker, 64 stand by for the same
 * scopes on another (ttl 3000, renew 1000, retry 100): over 4 s the standby
 * locker makes at least 64 attempts (each looks again at the holder's
 * expiry, not every retry), in at most a quarter as many round trips, and
 * no standby leads. Then every leader stops (graceful): every standby leads
 * within 1 s (the release announcements, through the acquirer), with a
 * larger epoch. */
static void test_attempts_batched(void **state)
{
    if (BK != BK_REDIS) return; /* etcd, PostgreSQL: each standby attempts itself (no batch) */
    enum { NG = 64 };
    struct baton_locker *la = LOCKER(), *lb = LOCKER();
    struct baton_active_guard *a[NG], *b[NG];
    char err[256];
    for (int i = 0; i < NG; i++) {
        char scope[32];
        snprintf(scope, sizeof scope, "acq:%d", i);
        struct baton_active_guard_options o = {.ttl_ms = 3000, .renew_ms = 1000, .retry_ms = 100};
        a[i] = baton_active_guard_create(la, scope, &o, NULL, err, sizeof err);
        assert_non_null(a[i]);
        assert_int_equal(baton_active_guard_start(a[i]), 0);
    }
    int leading = 0;
    int64_t until = clock_mono_ms() + 5000;
    while (clock_mono_ms() < until) {
        leading = 0;
        for (int i = 0; i < NG; i++) leading += baton_active_guard_is_leader_now(a[i]);
        if (leading == NG) break;
        usleep(10 * 1000);
    }
    assert_int_equal(leading, NG);
    for (int i = 0; i < NG; i++) {
        char scope[32];
        snprintf(scope, sizeof scope, "acq:%d", i);
        struct baton_active_guard_options o = {.ttl_ms = 3000, .renew_ms = 1000, .retry_ms = 100};
        b[i] = baton_active_guard_create(lb, scope, &o, NULL, err, sizeof err);
        assert_non_null(b[i]);
        assert_int_equal(baton_active_guard_start(b[i]), 0);
    }
    usleep(1000 * 1000); /* every standby made its first attempt */
    uint64_t rt0, c0, rt1, c1;
    assert_int_equal(baton_locker_lease_traffic(lb, &rt0, &c0), 0);
    for (int t = 0; t < 40; t++) {
        usleep(100 * 1000);
        for (int i = 0; i < NG; i++) {
            assert_true(baton_active_guard_is_leader_now(a[i]));
            assert_false(baton_active_guard_is_leader_now(b[i]));
        }
    }
    assert_int_equal(baton_locker_lease_traffic(lb, &rt1, &c1), 0);
    printf("attempts batched: %llu attempts in %llu round trips over 4 s (64 standbys)\n",
           (unsigned long long)(c1 - c0), (unsigned long long)(rt1 - rt0));
    assert_true(c1 - c0 >= NG);
    assert_true(c1 - c0 <= NG * 4); /* at the holder's expiry, not every retry (40 each) */
    assert_true((rt1 - rt0) * 4 <= c1 - c0);
    uint64_t epochs[NG];
    for (int i = 0; i < NG; i++) epochs[i] = baton_active_guard_epoch(a[i]);
    int64_t t0 = clock_mono_ms();
    for (int i = 0; i < NG; i++) baton_active_guard_request_stop(a[i]);
    for (int i = 0; i < NG; i++) baton_active_guard_stop(a[i]);
    until = t0 + 5000;
    while (clock_mono_ms() < until) {
        leading = 0;
        for (int i = 0; i < NG; i++) leading += baton_active_guard_is_leader_now(b[i]);
        if (leading == NG) break;
        usleep(5 * 1000);
    }
    int64_t took = clock_mono_ms() - t0;
    printf("attempts batched: all 64 standbys lead %lld ms after the leaders were asked to stop\n",
           (long long)took);
    assert_int_equal(leading, NG);
    assert_true(took < 1000); /* the expiry would be up to 3 s */
    for (int i = 0; i < NG; i++) assert_true(baton_active_guard_epoch(b[i]) > epochs[i]);
    for (int i = 0; i < NG; i++) {
        baton_active_guard_destroy(a[i]);
        baton_active_guard_destroy(b[i]);
    }
    baton_locker_destroy(la);
    baton_locker_destroy(lb);
}

static void test_backend_paused_never_two_leaders(void **state)
{
    struct srv *srv = srv_start();
    struct baton_locker *l[MAXG];
    struct sampler s = {.n = MAXG};
    pthread_mutex_init(&s.mu, NULL);
    int64_t ttl = T(1500);
    for (int i = 0; i < MAXG; i++) {
        l[i] = locker_for(srv);
        s.g[i] = new_guard(l[i], ttl, 500, 250);
    }
    pthread_create(&s.th, NULL, sample_loop, &s);
    assert_true(WAIT_FOR(leader_index(&s) >= 0, 5000) >= 0);
    for (int round = 0; round < 2; round++) {
        int li = leader_index(&s);
        assert_true(li >= 0);
        uint64_t before = baton_active_guard_epoch(s.g[li]);
        int64_t t0 = clock_mono_ms();
        assert_int_equal(srv_pause(srv), 0);
        int64_t noticed = WAIT_FOR(leader_index(&s) == -1, ttl + 1000);
        printf("pause %d: leader-now false %lld ms after the backend was stopped (ttl %lld)\n",
               round, (long long)noticed, (long long)ttl);
        assert_true(noticed >= 0 && noticed < ttl);
        while (clock_mono_ms() - t0 < ttl + 500) {
            assert_int_equal(leader_index(&s), -1);
            usleep(20 * 1000);
        }
        assert_int_equal(srv_resume(srv), 0);
        int64_t back = WAIT_FOR(leader_index(&s) >= 0, 3 * ttl + 5000);
        printf("pause %d: a leader again %lld ms after the backend continued\n", round,
               (long long)back);
        assert_true(back >= 0);
        int now = leader_index(&s);
        assert_true(now >= 0);
        assert_true(baton_active_guard_epoch(s.g[now]) > before);
        usleep(500 * 1000);
    }
    atomic_store(&s.stop, true);
    pthread_join(s.th, NULL);
    printf("pause test: %ld samples, %ld with two leaders\n", s.samples, s.violations);
    assert_int_equal(s.violations, 0);
    for (int i = 0; i < MAXG; i++) {
        baton_active_guard_destroy(s.g[i]);
        baton_locker_destroy(l[i]);
    }
    pthread_mutex_destroy(&s.mu);
    srv_destroy(srv);
}

static bool in_path(const char *prog)
{
    const char *path = getenv("PATH");
    if (path == NULL) return false;
    char *copy = strdup(path), *save = NULL;
    bool found = false;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char f[512];
        snprintf(f, sizeof f, "%s/%s", d, prog);
        found = access(f, X_OK) == 0;
    }
    free(copy);
    return found;
}

/* itest_guard [redis|etcd]: the backend (else $BATON_GUARD_BACKEND, else redis).
 * Exit 77 (ctest SKIP_RETURN_CODE) when etcd is not installed. */
int main(int argc, char **argv)
{
    log_set_level(LOG_ERROR);
    const char *backend = argc > 1 ? argv[1] : getenv("BATON_GUARD_BACKEND");
    if (backend == NULL || backend[0] == '\0') backend = "redis";
    if (strcmp(backend, "postgresql") == 0) {
        BK = BK_PG;
        char why[256];
        if (!pg_server_available(why, sizeof why)) {
            fprintf(stderr, "itest_guard postgresql: %s: skipped\n", why);
            return 77;
        }
    } else if (strcmp(backend, "etcd") == 0) {
        BK = BK_ETCD;
        if (!in_path("etcd") || !in_path("etcdctl")) {
            fprintf(stderr, "itest_guard etcd: etcd/etcdctl not installed: skipped\n");
            return 77;
        }
    } else if (strcmp(backend, "redis") != 0) {
        fprintf(stderr, "usage: %s [redis|etcd|postgresql] (got \"%s\")\n", argv[0], backend);
        return 2;
    }
    /* BATON_TEST_FILTER=test_orphan* runs only the matching tests */
    if (getenv("BATON_TEST_FILTER")) cmocka_set_test_filter(getenv("BATON_TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_cas_unlock_renew),
        cmocka_unit_test(test_expiry),
        cmocka_unit_test(test_epochs_strictly_increasing),
        cmocka_unit_test(test_script_cache_flushed),
        cmocka_unit_test(test_non_string_key),
        cmocka_unit_test(test_unreachable_backend),
        cmocka_unit_test(test_wrong_password),
        cmocka_unit_test(test_epoch_expiry_renew_keeps_epoch_key),
        cmocka_unit_test(test_missed_release_counted_and_resubscribed),
        cmocka_unit_test(test_gen_before_grant),
        cmocka_unit_test(test_orphan_per_key),
        cmocka_unit_test(test_side_connection_keeps_generation),
        cmocka_unit_test(test_claim_holder_ping_inspect),
        cmocka_unit_test(test_lease_row_lock),
        cmocka_unit_test(test_pg_session_ended_and_missing_tables),
        cmocka_unit_test(test_fenced_set_shared_get),
        cmocka_unit_test(test_fenced_set_backend_down),
        cmocka_unit_test(test_backend_restart_never_two_leaders),
        cmocka_unit_test(test_three_guards_leader_repeatedly_stopped),
        cmocka_unit_test(test_backend_paused_never_two_leaders),
        cmocka_unit_test(test_renewals_batched),
        cmocka_unit_test(test_attempts_batched),
    };
    char group[32];
    snprintf(group, sizeof group, "guard.%s", BK_NAME[BK]);
    return cmocka_run_group_tests_name(group, tests, group_setup,
                                       group_teardown);
}
