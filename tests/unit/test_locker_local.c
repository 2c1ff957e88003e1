/* Local locker (guard/locker_local.c) and the generic wrappers in
 * guard/locker.c: exclusivity, expiry, token CAS, racing threads, retries,
 * key and name bounds; the library's logging callback (base/glog.c).
 * Expiries, retries and release waits run on the test clock
 * (tests/support/fake_clock.h, issue 35): the bounds are in fake ms. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/fake_clock.h"
#include "base/util.h"
#include "baton/log.h"
#include "base/glog.h"
#include "guard/locker.h"
#include "common/util.h"

static void test_exclusive_and_token_format(void **state)
{
    struct baton_locker *l = baton_locker_local_create();
    struct baton_lock_grant a, b;
    char err[BATON_LOCKER_ERR_MAX];
    assert_int_equal(baton_locker_try_lock(l, "k", 5000, &a, err), BATON_LOCKER_OK);
    assert_int_equal(strlen(a.token), 32);
    for (int i = 0; i < 32; i++) assert_non_null(strchr("0123456789abcdef", a.token[i]));
    assert_int_equal(baton_locker_try_lock(l, "k", 5000, &b, err), BATON_LOCKER_HELD);
    /* another key is independent */
    assert_int_equal(baton_locker_try_lock(l, "k2", 5000, &b, err), BATON_LOCKER_OK);
    assert_string_not_equal(a.token, b.token);
    assert_int_equal(baton_locker_unlock(l, "k", a.token, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_try_lock(l, "k", 5000, &b, err), BATON_LOCKER_OK);
    assert_true(b.epoch > a.epoch);
    baton_locker_destroy(l);
}

/* Time unit of the ttl tests, in ms: 1 on the fake clock (exact); 20 on the
 * real one (valgrind, where fake_clock_install installs nothing), so that a
 * thread stalled on a loaded machine does not outlast a margin: 40 real ms
 * of margin failed a CI run under valgrind. */
static int64_t unit_ms(void)
{
    return fake_clock_active() ? 1 : 20;
}

static void test_expiry(void **state)
{
    struct baton_locker *l = baton_locker_local_create();
    struct baton_lock_grant a, b;
    char err[BATON_LOCKER_ERR_MAX];
    const int64_t u = unit_ms();
    int64_t t0 = clock_boot_ms();
    assert_int_equal(baton_locker_try_lock(l, "exp", 100 * u, &a, err), BATON_LOCKER_OK);
    assert_true(a.sent_ms >= t0 && a.sent_ms <= clock_boot_ms());
    assert_int_equal(a.gen, 0); /* no connection that could break */
    assert_int_equal(baton_locker_try_lock(l, "exp", 100 * u, &b, err), BATON_LOCKER_HELD);
    fake_clock_sleep(150 * u);
    assert_int_equal(baton_locker_try_lock(l, "exp", 100 * u, &b, err), BATON_LOCKER_OK);
    assert_true(b.epoch > a.epoch);
    /* the expired holder can neither renew nor release the new lease */
    int64_t sent;
    assert_int_equal(baton_locker_renew(l, "exp", a.token, 100 * u, &sent, err), BATON_LOCKER_LOST);
    assert_int_equal(baton_locker_unlock(l, "exp", a.token, err), BATON_LOCKER_MISMATCH);
    assert_int_equal(baton_locker_unlock(l, "exp", b.token, err), BATON_LOCKER_OK);
    baton_locker_destroy(l);
}

static void test_token_mismatch_and_renew(void **state)
{
    struct baton_locker *l = baton_locker_local_create();
    struct baton_lock_grant a;
    char err[BATON_LOCKER_ERR_MAX];
    int64_t sent = 0;
    const int64_t u = unit_ms();
    assert_int_equal(baton_locker_try_lock(l, "m", 150 * u, &a, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_unlock(l, "m", "00000000000000000000000000000000", err),
                     BATON_LOCKER_MISMATCH);
    assert_true(strstr(err, "m") != NULL);
    assert_int_equal(baton_locker_renew(l, "m", "deadbeef", 150 * u, &sent, err), BATON_LOCKER_LOST);
    assert_int_equal(l->ops->check(l, "m", a.token, err), BATON_LOCKER_OK);
    assert_int_equal(l->ops->check(l, "m", "deadbeef", err), BATON_LOCKER_LOST);
    /* renewing keeps it alive past the original ttl */
    for (int i = 0; i < 4; i++) {
        fake_clock_sleep(80 * u);
        int64_t before = clock_boot_ms();
        assert_int_equal(baton_locker_renew(l, "m", a.token, 150 * u, &sent, err), BATON_LOCKER_OK);
        assert_true(sent >= before && sent <= clock_boot_ms());
    }
    struct baton_lock_grant b;
    assert_int_equal(baton_locker_try_lock(l, "m", 150, &b, err), BATON_LOCKER_HELD);
    assert_int_equal(baton_locker_unlock(l, "m", a.token, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_unlock(l, "m", a.token, err), BATON_LOCKER_MISMATCH);
    assert_int_equal(l->ops->check(l, "m", a.token, err), BATON_LOCKER_LOST);
    baton_locker_destroy(l);
}

static void test_bad_arguments(void **state)
{
    struct baton_locker *l = baton_locker_local_create();
    struct baton_lock_grant a;
    char err[BATON_LOCKER_ERR_MAX];
    assert_int_equal(baton_locker_try_lock(l, "", 100, &a, err), BATON_LOCKER_ERR);
    assert_true(strlen(err) > 0);
    assert_int_equal(baton_locker_try_lock(l, NULL, 100, &a, err), BATON_LOCKER_ERR);
    assert_int_equal(baton_locker_try_lock(l, "k", 0, &a, err), BATON_LOCKER_ERR);
    assert_int_equal(baton_locker_try_lock(NULL, "k", 100, &a, err), BATON_LOCKER_ERR);
    assert_string_equal(baton_locker_status_name(BATON_LOCKER_HELD), "held");
    assert_true(baton_locker_can_renew(l));
    assert_false(baton_locker_can_renew(NULL));
    baton_locker_destroy(l);
    baton_locker_destroy(NULL);
}

#define RACERS 50
struct race {
    struct baton_locker *l;
    pthread_barrier_t *barrier;
    int rc;
};

static void *racer(void *arg)
{
    struct race *r = arg;
    struct baton_lock_grant g;
    char err[BATON_LOCKER_ERR_MAX];
    pthread_barrier_wait(r->barrier);
    r->rc = baton_locker_try_lock(r->l, "race", 10000, &g, err);
    return NULL;
}

static void test_fifty_threads_one_winner(void **state)
{
    for (int round = 0; round < 5; round++) {
        struct baton_locker *l = baton_locker_local_create();
        pthread_barrier_t barrier;
        pthread_barrier_init(&barrier, NULL, RACERS);
        pthread_t th[RACERS];
        struct race r[RACERS];
        for (int i = 0; i < RACERS; i++) {
            r[i] = (struct race){.l = l, .barrier = &barrier, .rc = 99};
            assert_int_equal(pthread_create(&th[i], NULL, racer, &r[i]), 0);
        }
        int won = 0, held = 0;
        for (int i = 0; i < RACERS; i++) {
            pthread_join(th[i], NULL);
            if (r[i].rc == BATON_LOCKER_OK) won++;
            if (r[i].rc == BATON_LOCKER_HELD) held++;
        }
        assert_int_equal(won, 1);
        assert_int_equal(held, RACERS - 1);
        pthread_barrier_destroy(&barrier);
        baton_locker_destroy(l);
    }
}

static void test_lock_with_retry_counts(void **state)
{
    struct baton_locker *l = baton_locker_local_create();
    struct baton_lock_grant a, b;
    char err[BATON_LOCKER_ERR_MAX];
    int attempts = 0;
    assert_int_equal(baton_locker_try_lock(l, "r", 10000, &a, err), BATON_LOCKER_OK);
    int64_t t0 = clock_mono_ms();
    assert_int_equal(baton_locker_lock_with_retry(l, "r", 1000, 20, 3, NULL, &b, &attempts, err),
                     BATON_LOCKER_EXHAUSTED);
    int64_t took = clock_mono_ms() - t0;
    assert_int_equal(attempts, 4);
    assert_true(took >= 60); /* three intervals between four attempts */
    assert_int_equal(baton_locker_lock_with_retry(l, "r", 1000, 0, 0, NULL, &b, &attempts, err),
                     BATON_LOCKER_EXHAUSTED);
    assert_int_equal(attempts, 1);
    /* free key: first attempt wins */
    assert_int_equal(baton_locker_lock_with_retry(l, "r2", 1000, 20, 3, NULL, &b, &attempts, err),
                     BATON_LOCKER_OK);
    assert_int_equal(attempts, 1);
    /* lease expiring during retries: wins on a later attempt */
    assert_int_equal(baton_locker_try_lock(l, "r3", 70, &a, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_lock_with_retry(l, "r3", 1000, 30, 10, NULL, &b, &attempts, err),
                     BATON_LOCKER_OK);
    assert_true(attempts >= 2 && attempts <= 5);
    printf("lock_with_retry: won r3 after %d attempts\n", attempts);
    /* error on the last attempt is reported as an error */
    assert_int_equal(baton_locker_lock_with_retry(l, "", 1000, 1, 2, NULL, &b, &attempts, err),
                     BATON_LOCKER_ERR);
    assert_int_equal(attempts, 3);
    /* cancelled before the first attempt */
    atomic_bool cancel = true;
    assert_int_equal(baton_locker_lock_with_retry(l, "r", 1000, 10, 3, &cancel, &b, &attempts, err),
                     BATON_LOCKER_CANCELLED);
    baton_locker_destroy(l);
}

struct canceller {
    atomic_bool *flag;
    int64_t after_ms;
};

static void *cancel_later(void *arg)
{
    struct canceller *c = arg;
    fake_clock_sleep(c->after_ms);
    atomic_store(c->flag, true);
    return NULL;
}

static void test_lock_blocks_until_free_or_cancelled(void **state)
{
    struct baton_locker *l = baton_locker_local_create();
    struct baton_lock_grant a, b;
    char err[BATON_LOCKER_ERR_MAX];
    assert_int_equal(baton_locker_try_lock(l, "b", 120, &a, err), BATON_LOCKER_OK);
    int64_t t0 = clock_mono_ms();
    assert_int_equal(baton_locker_lock(l, "b", 10000, 10, NULL, &b, err), BATON_LOCKER_OK);
    int64_t took = clock_mono_ms() - t0;
    assert_true(took >= 100 && took < 2000);
    atomic_bool cancel = false;
    struct canceller c = {&cancel, 100};
    pthread_t th;
    pthread_create(&th, NULL, cancel_later, &c);
    t0 = clock_mono_ms();
    assert_int_equal(baton_locker_lock(l, "b", 10000, 10, &cancel, &a, err), BATON_LOCKER_CANCELLED);
    took = clock_mono_ms() - t0;
    pthread_join(th, NULL);
    assert_true(took >= 90 && took < 2000);
    baton_locker_destroy(l);
}

struct waiter {
    struct baton_locker *l;
    const char *key;
    bool fired;
    int64_t took;
    uint64_t seen;
};

static void *wait_for_release(void *arg)
{
    struct waiter *w = arg;
    int64_t t0 = clock_mono_ms();
    w->fired = w->l->ops->wait_release(w->l, w->key, w->seen, 2000);
    w->took = clock_mono_ms() - t0;
    return NULL;
}

static void test_announce_wakes_waiters_of_that_key(void **state)
{
    struct baton_locker *l = baton_locker_local_create();
    char err[BATON_LOCKER_ERR_MAX];
    struct waiter w1 = {l, "x", false, 0, l->ops->release_seq(l, "x")},
                  w2 = {l, "y", false, 0, l->ops->release_seq(l, "y")};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, wait_for_release, &w1);
    pthread_create(&t2, NULL, wait_for_release, &w2);
    fake_clock_sleep(50);
    assert_int_equal(l->ops->announce_release(l, "x", err), BATON_LOCKER_OK);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    assert_true(w1.fired);
    assert_true(w1.took < 1000);
    assert_false(w2.fired);
    assert_true(w2.took >= 1900);
    /* nothing announced since: times out */
    assert_false(l->ops->wait_release(l, "x", l->ops->release_seq(l, "x"), 30));
    assert_int_equal(l->ops->ping(l, err), BATON_LOCKER_OK);
    baton_locker_destroy(l);
}

/* The test clock's wait must not lose a wakeup (a CI failure of the test
 * above under TSan): the waiter's real poll runs out while this thread
 * holds the mutex, so the waiter is off the condition's waiters when the
 * broadcast comes. The test clock used to wait on after such a poll, and
 * the waiter saw the flag only at its (fake) timeout, 600 s here; now
 * clock_cond_wait returns and the caller's loop looks at the flag. */
struct flag_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool flag, saw;
    int64_t took;
};

static void *wait_for_flag(void *arg)
{
    struct flag_wait *f = arg;
    int64_t t0 = clock_mono_ms();
    struct clock_wait cw = clock_wait_in(CLOCK_MONOTONIC, 600000);
    pthread_mutex_lock(&f->mu);
    while (!f->flag)
        if (clock_cond_wait(&f->cv, &f->mu, &cw) != 0) break;
    f->saw = f->flag;
    pthread_mutex_unlock(&f->mu);
    f->took = clock_mono_ms() - t0;
    return NULL;
}

static void test_wakeup_not_lost_while_poll_runs_out(void **state)
{
    struct flag_wait f = {.flag = false};
    pthread_mutex_init(&f.mu, NULL);
    cond_init_clock(&f.cv, CLOCK_MONOTONIC);
    pthread_t th;
    pthread_create(&th, NULL, wait_for_flag, &f);
    fake_clock_sleep(20);
    pthread_mutex_lock(&f.mu);
    struct timespec hold = {0, 30 * 1000000L}; /* real time: the waiter's 5 ms poll runs out */
    while (nanosleep(&hold, &hold) != 0) {
    }
    f.flag = true;
    pthread_cond_broadcast(&f.cv);
    pthread_mutex_unlock(&f.mu);
    pthread_join(th, NULL);
    assert_true(f.saw);
    assert_true(f.took < 300000);
    pthread_cond_destroy(&f.cv);
    pthread_mutex_destroy(&f.mu);
}

/* Issue 13 (5): a standby reads the release counter, is then busy (in
 * try_lock, in its balancing delay, between wait chunks: not waiting) while
 * the leader releases and announces; its next wait_release must return at
 * once, not after its timeout. The old wait_release only woke waiters
 * registered at the moment of the announcement, so this waited 2 s and
 * returned false. */
static void test_missed_release_counted_while_busy(void **state)
{
    struct baton_locker *l = baton_locker_local_create();
    char err[BATON_LOCKER_ERR_MAX];
    struct baton_lock_grant leader, standby;
    assert_int_equal(baton_locker_try_lock(l, "mr", 10000, &leader, err), BATON_LOCKER_OK);
    uint64_t seen = l->ops->release_seq(l, "mr");
    assert_int_equal(baton_locker_try_lock(l, "mr", 10000, &standby, err), BATON_LOCKER_HELD);
    /* the standby is busy: the leader releases and announces now */
    assert_int_equal(baton_locker_unlock(l, "mr", leader.token, err), BATON_LOCKER_OK);
    assert_int_equal(l->ops->announce_release(l, "mr", err), BATON_LOCKER_OK);
    int64_t t0 = clock_mono_ms();
    assert_true(l->ops->wait_release(l, "mr", seen, 2000));
    int64_t took = clock_mono_ms() - t0;
    printf("missed_release (local): wait_release after a past announcement returned in %lld ms\n",
           (long long)took);
    assert_true(took < 100);
    assert_int_equal(baton_locker_try_lock(l, "mr", 10000, &standby, err), BATON_LOCKER_OK);
    /* the counter moved by exactly one; every announcement counts, waited or not */
    assert_int_equal(l->ops->release_seq(l, "mr"), seen + 1);
    assert_int_equal(l->ops->announce_release(l, "mr", err), BATON_LOCKER_OK);
    assert_int_equal(l->ops->announce_release(l, "mr", err), BATON_LOCKER_OK);
    assert_int_equal(l->ops->release_seq(l, "mr"), seen + 3);
    /* another key's announcement does not move it; no announcement: timeout */
    uint64_t now_seen = l->ops->release_seq(l, "mr");
    l->ops->release_seq(l, "other");
    assert_int_equal(l->ops->announce_release(l, "other", err), BATON_LOCKER_OK);
    t0 = clock_mono_ms();
    assert_false(l->ops->wait_release(l, "mr", now_seen, 50));
    assert_true(clock_mono_ms() - t0 >= 45);
    baton_locker_destroy(l);
}

static void test_epochs_increase_and_sweep(void **state)
{
    struct baton_locker *l = baton_locker_local_create();
    char err[BATON_LOCKER_ERR_MAX];
    uint64_t last = 0;
    for (int i = 0; i < 2000; i++) {
        char key[32];
        snprintf(key, sizeof key, "sweep:%d", i % 7);
        struct baton_lock_grant g;
        int rc = baton_locker_try_lock(l, key, 1, &g, err);
        if (rc != BATON_LOCKER_OK) continue;
        assert_true(g.epoch > last);
        last = g.epoch;
    }
    assert_true(last >= (uint64_t)clock_wall_ms() * 1000u - 60000000u);
    /* many short-lived keys: lazily swept, no leak (valgrind checks) */
    for (int i = 0; i < 1000; i++) {
        char key[32];
        struct baton_lock_grant g;
        snprintf(key, sizeof key, "many:%d", i);
        assert_int_equal(baton_locker_try_lock(l, key, 1, &g, err), BATON_LOCKER_OK);
    }
    baton_locker_destroy(l);
}

/* fenced_set / shared_get: "<key>:<name>" written only while "<key>:epoch"
 * still holds the writer's epoch; a superseded leader never overwrites what a
 * newer one wrote. */
static void test_fenced_set_and_shared_get(void **state)
{
    struct baton_locker *l = baton_locker_local_create();
    struct baton_lock_grant a, b, c;
    char err[BATON_LOCKER_ERR_MAX], buf[64];
    assert_int_equal(baton_locker_try_lock(l, "fs", 100, &a, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_fenced_set(l, "fs", "mark", a.epoch, "v1", 2, 5000, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_shared_get(l, "fs", "mark", buf, sizeof buf, err), BATON_LOCKER_OK);
    assert_string_equal(buf, "v1");
    /* the epoch record, as in redis: "<key>:epoch" in decimal */
    char dec[24];
    snprintf(dec, sizeof dec, "%llu", (unsigned long long)a.epoch);
    assert_int_equal(baton_locker_shared_get(l, "fs", "epoch", buf, sizeof buf, err), BATON_LOCKER_OK);
    assert_string_equal(buf, dec);
    /* the lease expired but nobody acquired since: the fence is on the epoch
     * only, the write still goes through */
    fake_clock_sleep(150);
    assert_int_equal(l->ops->check(l, "fs", a.token, err), BATON_LOCKER_LOST);
    assert_int_equal(baton_locker_fenced_set(l, "fs", "mark", a.epoch, "v1 late", 7, 5000, err),
                     BATON_LOCKER_OK);
    /* a new leader (new epoch) writes; the old one is fenced off */
    assert_int_equal(baton_locker_try_lock(l, "fs", 5000, &b, err), BATON_LOCKER_OK);
    assert_true(b.epoch > a.epoch);
    assert_int_equal(baton_locker_fenced_set(l, "fs", "mark", b.epoch, "v2", 2, 5000, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_fenced_set(l, "fs", "mark", a.epoch, "stale", 5, 5000, err),
                     BATON_LOCKER_LOST);
    printf("fenced_set (local), superseded: %s\n", err);
    assert_non_null(strstr(err, "fs:mark"));
    assert_int_equal(baton_locker_shared_get(l, "fs", "mark", buf, sizeof buf, err), BATON_LOCKER_OK);
    assert_string_equal(buf, "v2");
    /* released and taken again (unlock + a second try_lock): b's epoch is old */
    assert_int_equal(baton_locker_unlock(l, "fs", b.token, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_fenced_set(l, "fs", "mark", b.epoch, "v2 after unlock", 15, 5000, err),
                     BATON_LOCKER_OK); /* unlock keeps the epoch record */
    assert_int_equal(baton_locker_try_lock(l, "fs", 5000, &c, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_fenced_set(l, "fs", "mark", b.epoch, "stale", 5, 5000, err),
                     BATON_LOCKER_LOST);
    assert_int_equal(baton_locker_shared_get(l, "fs", "mark", buf, sizeof buf, err), BATON_LOCKER_OK);
    assert_string_equal(buf, "v2 after unlock");
    /* names are independent values beside the same lease */
    assert_int_equal(baton_locker_fenced_set(l, "fs", "other", c.epoch, "o", 1, 5000, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_shared_get(l, "fs", "other", buf, sizeof buf, err), BATON_LOCKER_OK);
    assert_string_equal(buf, "o");
    assert_int_equal(baton_locker_shared_get(l, "fs", "mark", buf, sizeof buf, err), BATON_LOCKER_OK);
    assert_string_equal(buf, "v2 after unlock");
    /* an epoch from the future is not current either */
    assert_int_equal(baton_locker_fenced_set(l, "fs", "mark", c.epoch + 1, "x", 1, 5000, err),
                     BATON_LOCKER_LOST);
    assert_int_equal(baton_locker_unlock(l, "fs", c.token, err), BATON_LOCKER_OK);
    baton_locker_destroy(l);
}

static void test_shared_absent_expiry_and_buffer(void **state)
{
    struct baton_locker *l = baton_locker_local_create();
    struct baton_lock_grant a;
    char err[BATON_LOCKER_ERR_MAX], buf[64];
    /* absent: never written, and no epoch at all */
    assert_int_equal(baton_locker_shared_get(l, "sx", "mark", buf, sizeof buf, err), BATON_LOCKER_LOST);
    assert_string_equal(buf, "");
    assert_true(strlen(err) > 0);
    assert_int_equal(baton_locker_fenced_set(l, "sx", "mark", 12345, "v", 1, 5000, err), BATON_LOCKER_LOST);
    printf("fenced_set (local), no epoch: %s\n", err);
    assert_int_equal(baton_locker_shared_get(l, "sx", "mark", buf, sizeof buf, err), BATON_LOCKER_LOST);
    assert_int_equal(baton_locker_try_lock(l, "sx", 10000, &a, err), BATON_LOCKER_OK);
    /* the value expires after its ttl, not with the lease (times in
     * unit_ms: a 20-unit margin below) */
    const int64_t u = unit_ms();
    assert_int_equal(baton_locker_fenced_set(l, "sx", "short", a.epoch, "s", 1, 60 * u, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_shared_get(l, "sx", "short", buf, sizeof buf, err), BATON_LOCKER_OK);
    fake_clock_sleep(100 * u);
    assert_int_equal(baton_locker_shared_get(l, "sx", "short", buf, sizeof buf, err), BATON_LOCKER_LOST);
    /* rewriting refreshes the ttl */
    assert_int_equal(baton_locker_fenced_set(l, "sx", "short", a.epoch, "s1", 2, 60 * u, err), BATON_LOCKER_OK);
    fake_clock_sleep(40 * u);
    assert_int_equal(baton_locker_fenced_set(l, "sx", "short", a.epoch, "s2", 2, 60 * u, err), BATON_LOCKER_OK);
    fake_clock_sleep(40 * u);
    assert_int_equal(baton_locker_shared_get(l, "sx", "short", buf, sizeof buf, err), BATON_LOCKER_OK);
    assert_string_equal(buf, "s2");
    /* the buffer needs room for the NUL: 8 bytes need 9 */
    assert_int_equal(baton_locker_fenced_set(l, "sx", "big", a.epoch, "12345678", 8, 5000, err),
                     BATON_LOCKER_OK);
    char small[8];
    assert_int_equal(baton_locker_shared_get(l, "sx", "big", small, sizeof small, err), BATON_LOCKER_ERR);
    printf("shared_get (local), small buffer: %s\n", err);
    assert_non_null(strstr(err, "value of 8 bytes exceeds the buffer of 8"));
    char exact[9];
    assert_int_equal(baton_locker_shared_get(l, "sx", "big", exact, sizeof exact, err), BATON_LOCKER_OK);
    assert_string_equal(exact, "12345678");
    /* binary values: spaces, newlines, an embedded NUL, and the empty value */
    static const char bin[] = "a b\nc\r\n\0d";
    assert_int_equal(baton_locker_fenced_set(l, "sx", "bin", a.epoch, bin, sizeof bin - 1, 5000, err),
                     BATON_LOCKER_OK);
    memset(buf, 'z', sizeof buf);
    assert_int_equal(baton_locker_shared_get(l, "sx", "bin", buf, sizeof buf, err), BATON_LOCKER_OK);
    assert_memory_equal(buf, bin, sizeof bin); /* up to the final NUL */
    assert_int_equal(baton_locker_fenced_set(l, "sx", "empty", a.epoch, NULL, 0, 5000, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_shared_get(l, "sx", "empty", buf, sizeof buf, err), BATON_LOCKER_OK);
    assert_string_equal(buf, "");
    /* bad arguments */
    assert_int_equal(baton_locker_fenced_set(l, "sx", "epoch", a.epoch, "1", 1, 5000, err), BATON_LOCKER_ERR);
    assert_non_null(strstr(err, "reserved"));
    assert_int_equal(baton_locker_fenced_set(l, "sx", "", a.epoch, "1", 1, 5000, err), BATON_LOCKER_ERR);
    assert_int_equal(baton_locker_fenced_set(l, "sx", NULL, a.epoch, "1", 1, 5000, err), BATON_LOCKER_ERR);
    assert_int_equal(baton_locker_fenced_set(l, "", "m", a.epoch, "1", 1, 5000, err), BATON_LOCKER_ERR);
    assert_int_equal(baton_locker_fenced_set(l, "sx", "m", a.epoch, "1", 1, 0, err), BATON_LOCKER_ERR);
    assert_int_equal(baton_locker_fenced_set(l, "sx", "m", a.epoch, NULL, 1, 5000, err), BATON_LOCKER_ERR);
    assert_int_equal(baton_locker_shared_get(l, "sx", "m", NULL, 0, err), BATON_LOCKER_ERR);
    assert_int_equal(baton_locker_shared_get(l, "sx", "", buf, sizeof buf, err), BATON_LOCKER_ERR);
    /* claim (OnceGuard) takes no epoch: nothing to fence against */
    assert_int_equal(baton_locker_claim(l, "once", 5000, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_claim(l, "once", 5000, err), BATON_LOCKER_HELD);
    assert_int_equal(baton_locker_shared_get(l, "once", "epoch", buf, sizeof buf, err), BATON_LOCKER_LOST);
    assert_int_equal(baton_locker_claim(l, "", 5000, err), BATON_LOCKER_ERR);
    assert_int_equal(baton_locker_claim(l, "once2", 0, err), BATON_LOCKER_ERR);
    baton_locker_destroy(l);
}

/* A backend without shared state: BATON_LOCKER_UNSUPPORTED, saying which. */
static void test_shared_unsupported(void **state)
{
    static const struct locker_ops bare = {.name = "bare"};
    struct baton_locker l = {.ops = &bare};
    char err[BATON_LOCKER_ERR_MAX], buf[8];
    assert_int_equal(baton_locker_fenced_set(&l, "k", "m", 1, "v", 1, 1000, err), BATON_LOCKER_UNSUPPORTED);
    assert_string_equal(err, "backend bare keeps no shared state");
    assert_int_equal(baton_locker_shared_get(&l, "k", "m", buf, sizeof buf, err), BATON_LOCKER_UNSUPPORTED);
    assert_string_equal(err, "backend bare keeps no shared state");
    assert_string_equal(baton_locker_status_name(BATON_LOCKER_UNSUPPORTED), "unsupported");
}

/* Expired values and epoch records are swept like leases (valgrind checks
 * nothing leaks; destroy frees what is left). */
static void test_shared_values_swept(void **state)
{
    struct baton_locker *l = baton_locker_local_create();
    char err[BATON_LOCKER_ERR_MAX];
    for (int i = 0; i < 500; i++) {
        char key[32];
        struct baton_lock_grant g;
        snprintf(key, sizeof key, "sv:%d", i);
        assert_int_equal(baton_locker_try_lock(l, key, 1, &g, err), BATON_LOCKER_OK);
        assert_int_equal(baton_locker_fenced_set(l, key, "m", g.epoch, "x", 1, 1, err), BATON_LOCKER_OK);
    }
    fake_clock_sleep(1100);
    struct baton_lock_grant g;
    assert_int_equal(baton_locker_try_lock(l, "sv:trigger", 1000, &g, err), BATON_LOCKER_OK); /* sweeps */
    baton_locker_destroy(l);
}

/* Keys up to BATON_KEY_MAX and names up to BATON_NAME_MAX work (their side
 * keys are built on the stack); longer ones are refused, never truncated. */
static void test_key_and_name_bounds(void **state)
{
    (void)state;
    struct baton_locker *l = baton_locker_local_create();
    assert_string_equal(baton_locker_backend(l), "local");
    char key[BATON_KEY_MAX + 2], name[BATON_NAME_MAX + 2], err[BATON_LOCKER_ERR_MAX], buf[16];
    memset(key, 'k', BATON_KEY_MAX);
    key[BATON_KEY_MAX] = '\0';
    memset(name, 'n', BATON_NAME_MAX);
    name[BATON_NAME_MAX] = '\0';
    struct baton_lock_grant g;
    assert_int_equal(baton_locker_try_lock(l, key, 5000, &g, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_fenced_set(l, key, name, g.epoch, "v", 1, 5000, err),
                     BATON_LOCKER_OK);
    assert_int_equal(baton_locker_shared_get(l, key, name, buf, sizeof buf, err), BATON_LOCKER_OK);
    assert_string_equal(buf, "v");
    /* one byte more: refused with a message, nothing written */
    key[BATON_KEY_MAX] = 'k';
    key[BATON_KEY_MAX + 1] = '\0';
    assert_int_equal(baton_locker_try_lock(l, key, 5000, &g, err), BATON_LOCKER_ERR);
    assert_non_null(strstr(err, "longer than"));
    assert_int_equal(baton_locker_claim(l, key, 5000, err), BATON_LOCKER_ERR);
    key[BATON_KEY_MAX] = '\0';
    name[BATON_NAME_MAX] = 'n';
    name[BATON_NAME_MAX + 1] = '\0';
    assert_int_equal(baton_locker_fenced_set(l, key, name, g.epoch, "w", 1, 5000, err),
                     BATON_LOCKER_ERR);
    assert_non_null(strstr(err, "name longer than"));
    assert_int_equal(baton_locker_shared_get(l, key, name, buf, sizeof buf, err), BATON_LOCKER_ERR);
    baton_locker_destroy(l);
}

struct seen {
    int n;
    enum baton_log_level level;
    char line[256];
    size_t msg_len;
    char msg_tail[8];
};

static void record(void *ctx, enum baton_log_level level, const char *component,
                   const char *subject, const char *message)
{
    struct seen *s = ctx;
    s->n++;
    s->level = level;
    snprintf(s->line, sizeof s->line, "%s[%s] %s", component, subject ? subject : "", message);
    s->msg_len = strlen(message);
    snprintf(s->msg_tail, sizeof s->msg_tail, "%s", message + (s->msg_len > 4 ? s->msg_len - 4 : 0));
}

/* baton_log_set: lines up to max_level reach the callback with component,
 * subject and the formatted message; above it they are not even formatted;
 * BATON_LOG_OFF silences; a long message is cut with "...". */
static void test_log_callback(void **state)
{
    (void)state;
    struct seen s = {0};
    baton_log_set(record, &s, BATON_LOG_INFO);
    assert_true(glog_enabled(BATON_LOG_INFO));
    assert_false(glog_enabled(BATON_LOG_DEBUG));
    glog_info("guard", "orders", "promoted (epoch %d)", 7);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.level, BATON_LOG_INFO);
    assert_string_equal(s.line, "guard[orders] promoted (epoch 7)");
    glog_debug("guard", "orders", "not wanted");
    assert_int_equal(s.n, 1);
    char big[6000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    glog_warn("guard", NULL, "%s", big);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.level, BATON_LOG_WARN);
    /* cut to the 4 KiB message buffer, ending in "..." */
    assert_int_equal(s.msg_len, 4095);
    assert_string_equal(s.msg_tail, "x...");
    baton_log_set(record, &s, BATON_LOG_OFF);
    glog_error("guard", NULL, "silenced");
    assert_int_equal(s.n, 2);
    baton_log_set(NULL, NULL, BATON_LOG_WARN); /* back to stderr */
    assert_false(glog_enabled(BATON_LOG_INFO));
    assert_true(glog_enabled(BATON_LOG_WARN));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exclusive_and_token_format),
        cmocka_unit_test(test_expiry),
        cmocka_unit_test(test_token_mismatch_and_renew),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_fifty_threads_one_winner),
        cmocka_unit_test(test_lock_with_retry_counts),
        cmocka_unit_test(test_lock_blocks_until_free_or_cancelled),
        cmocka_unit_test(test_announce_wakes_waiters_of_that_key),
        cmocka_unit_test(test_wakeup_not_lost_while_poll_runs_out),
        cmocka_unit_test(test_missed_release_counted_while_busy),
        cmocka_unit_test(test_epochs_increase_and_sweep),
        cmocka_unit_test(test_fenced_set_and_shared_get),
        cmocka_unit_test(test_shared_absent_expiry_and_buffer),
        cmocka_unit_test(test_shared_unsupported),
        cmocka_unit_test(test_shared_values_swept),
        cmocka_unit_test(test_key_and_name_bounds),
        cmocka_unit_test(test_log_callback),
    };
    if (fake_clock_install() != 0) return 1;
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    fake_clock_uninstall();
    return failed;
}
