/* endpoints/source_loop: the lease-ttl rule and the back-off cap as pure
 * functions, and the supervisor itself driven by a scripted fake source
 * (open fails or succeeds as told, run ends as told) and a fake host that
 * records source_lost and source_gap: the start handshake (a guarded start
 * fails on its first failed attempt, an unguarded one retries in the
 * background), reconnecting, the lease given up once the source has been
 * away for the ttl, replay reporting once per outage, the finish hook. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "base/util.h"
#include "endpoints/source_loop.h"

static void test_lost_rule(void **state)
{
    (void)state;
    /* unguarded and once: never */
    assert_int_equal(source_lost_rule(GUARD_NONE, false, true, false, 99999, 100), SOURCE_KEEP_TRYING);
    assert_int_equal(source_lost_rule(GUARD_ONCE, false, true, false, 99999, 100), SOURCE_KEEP_TRYING);
    /* a lease holder: at the ttl, not before */
    assert_int_equal(source_lost_rule(GUARD_ACTIVE, false, true, false, 99, 100), SOURCE_KEEP_TRYING);
    assert_int_equal(source_lost_rule(GUARD_ACTIVE, false, true, false, 100, 100), SOURCE_GIVE_UP_LEASE);
    assert_int_equal(source_lost_rule(GUARD_ACTIVE, false, false, false, 100, 100), SOURCE_GIVE_UP_LEASE);
    /* replay: only the leader, once per outage */
    assert_int_equal(source_lost_rule(GUARD_ACTIVE, true, false, false, 500, 100), SOURCE_KEEP_TRYING);
    assert_int_equal(source_lost_rule(GUARD_ACTIVE, true, true, false, 500, 100),
                     SOURCE_REPORT_AND_KEEP_TRYING);
    assert_int_equal(source_lost_rule(GUARD_ACTIVE, true, true, true, 500, 100), SOURCE_KEEP_TRYING);
}

static void test_backoff_cap(void **state)
{
    (void)state;
    assert_int_equal(source_backoff_cap(GUARD_ACTIVE, false, 800, 0, 1000), 800);
    assert_int_equal(source_backoff_cap(GUARD_ACTIVE, false, 800, 700, 1000), 300);
    assert_int_equal(source_backoff_cap(GUARD_ACTIVE, false, 800, 1000, 1000), 1);
    assert_int_equal(source_backoff_cap(GUARD_ACTIVE, true, 800, 700, 1000), 800);
    assert_int_equal(source_backoff_cap(GUARD_NONE, false, 800, 700, 1000), 800);
}

/* ---- a scripted source ---------------------------------------------------- */

static void nap(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

struct fake {
    struct source_loop loop;
    struct endpoint_host h;
    struct ep_stats stats;
    /* the script, set before start: open number n (from 1) fails when
     * n <= opens_fail or fail_from <= n <= fail_until (fail_from 0: never) */
    int opens_fail, fail_from, fail_until;
    int runs_lost;     /* run reports a lost connection this many times, then waits for stop */
    bool leader;
    /* what happened (the loop thread writes, the test reads) */
    atomic_int opens, runs, closes, ups, ups_first, lost_calls, gaps, finishes;
    char last_reason[1500]; /* written before lost_calls moves */
};

static int f_open(void *ep, char *err, size_t errlen)
{
    struct fake *f = ep;
    int n = ++f->opens;
    if (n <= f->opens_fail || (f->fail_from && n >= f->fail_from && n <= f->fail_until)) {
        snprintf(err, errlen, "fake 127.0.0.1:1: connection refused");
        return -1;
    }
    return 0;
}

static enum source_end f_run(void *ep, struct source_loop *l, char *err, size_t errlen)
{
    struct fake *f = ep;
    f->runs++;
    if (f->runs_lost > 0) {
        f->runs_lost--;
        snprintf(err, errlen, "fake: connection reset");
        return SOURCE_LOST;
    }
    while (!source_loop_stopping(l)) nap(1);
    return SOURCE_STOPPED;
}

static void f_close(void *ep)
{
    ((struct fake *)ep)->closes++;
}

static void f_up(void *ep, bool first, int64_t down_ms)
{
    struct fake *f = ep;
    (void)down_ms;
    f->ups++;
    if (first) f->ups_first++;
}

static void f_finish(void *ep)
{
    ((struct fake *)ep)->finishes++;
}

static void h_source_lost(struct endpoint_host *h, const char *reason)
{
    struct fake *f = h->gw;
    snprintf(f->last_reason, sizeof f->last_reason, "%s", reason);
    f->lost_calls++;
}

static void h_gap(struct endpoint_host *h)
{
    ((struct fake *)h->gw)->gaps++;
}

static bool h_leader(const struct endpoint_host *h)
{
    return ((const struct fake *)h->gw)->leader;
}

static const struct source_loop_ops fake_ops = {
    .open = f_open, .run = f_run, .close = f_close, .up = f_up, .finish = f_finish,
};

static void fake_init(struct fake *f, enum guard_kind guard, bool replay, int64_t ttl)
{
    memset(f, 0, sizeof *f);
    f->h.name = "t";
    f->h.guard = guard;
    f->h.replay = replay;
    f->h.lease_ttl_ms = ttl;
    f->h.stats = &f->stats;
    f->h.gw = f;
    f->h.source_lost = h_source_lost;
    f->h.source_gap = h_gap;
    f->h.leader_now = h_leader;
    f->leader = true;
    source_loop_init(&f->loop, &fake_ops, f, &f->h, "test", "test", 1, 5);
}

static void fake_stop(struct fake *f)
{
    source_loop_request_stop(&f->loop);
    source_loop_join(&f->loop);
    source_loop_destroy(&f->loop);
}

#define WAIT_UNTIL(cond)                                                    \
    do {                                                                    \
        int64_t until_ = clock_mono_ms() + 10000;                           \
        while (!(cond) && clock_mono_ms() < until_) nap(1);            \
        assert_true(cond);                                                  \
    } while (0)

static void test_guarded_start_fails_at_once(void **state)
{
    (void)state;
    struct fake f;
    fake_init(&f, GUARD_ACTIVE, false, 1000);
    f.opens_fail = 1;
    char err[1024];
    assert_int_equal(source_loop_start(&f.loop, err, sizeof err), -1);
    assert_non_null(strstr(err, "connection refused"));
    assert_false(source_loop_running(&f.loop));
    assert_int_equal(f.opens, 1);
    assert_int_equal(f.closes, 1); /* close follows a failed open too */
    assert_int_equal(f.ups, 0);
    assert_int_equal(f.finishes, 1);
    assert_int_equal(f.lost_calls, 0); /* a failed start is not a lost source */
    assert_int_equal(atomic_load(&f.stats.source_errors), 1);
    source_loop_destroy(&f.loop);
}

static void test_unguarded_retries_in_background(void **state)
{
    (void)state;
    struct fake f;
    fake_init(&f, GUARD_NONE, false, 50);
    f.opens_fail = 4;
    char err[1024];
    assert_int_equal(source_loop_start(&f.loop, err, sizeof err), 0);
    WAIT_UNTIL(f.ups == 1);
    assert_int_equal(f.opens, 5);
    assert_int_equal(f.ups_first, 1);
    assert_int_equal(f.lost_calls, 0); /* no lease: nothing to give up */
    fake_stop(&f);
    assert_int_equal(f.finishes, 1);
    assert_int_equal(atomic_load(&f.stats.source_errors), 4);
}

static void test_reconnects_after_loss(void **state)
{
    (void)state;
    struct fake f;
    fake_init(&f, GUARD_ACTIVE, false, 5000);
    f.runs_lost = 2;
    char err[1024];
    assert_int_equal(source_loop_start(&f.loop, err, sizeof err), 0);
    WAIT_UNTIL(f.runs == 3);
    assert_int_equal(f.ups, 3);
    assert_int_equal(f.ups_first, 1);
    assert_int_equal(f.gaps, 0); /* not replay */
    assert_int_equal(f.lost_calls, 0);
    fake_stop(&f);
    assert_int_equal(f.closes, 3);
    assert_int_equal(atomic_load(&f.stats.source_errors), 2);
}

/* Up once, then the source goes away for good: the leader gives the lease
 * up after about the ttl (the back-off is cut so it fires on time) and the
 * loop ends by itself. */
static void test_gives_up_lease_after_ttl(void **state)
{
    (void)state;
    struct fake f;
    fake_init(&f, GUARD_ACTIVE, false, 150);
    f.loop.backoff_max_ms = 1000; /* longer than the ttl: the cap must cut it */
    f.runs_lost = 1;
    f.fail_from = 2; /* up once, then never again */
    f.fail_until = 1000000;
    int64_t t0 = clock_mono_ms();
    char err[1024];
    assert_int_equal(source_loop_start(&f.loop, err, sizeof err), 0);
    WAIT_UNTIL(f.lost_calls == 1 && f.finishes == 1);
    int64_t took = clock_mono_ms() - t0;
    assert_true(took >= 100);  /* not before the ttl (minus scheduling) */
    assert_true(took < 5000);  /* generous: the cap keeps it near 150 ms */
    assert_non_null(strstr(f.last_reason, "lease ttl 150 ms"));
    nap(50);
    assert_int_equal(f.lost_calls, 1); /* once */
    source_loop_join(&f.loop);
    source_loop_destroy(&f.loop);
}

/* failover = "replay": every replica keeps retrying; the leader reports the
 * outage once; a resubscription tells the gateway about the gap. */
static void test_replay_reports_once_and_keeps_trying(void **state)
{
    (void)state;
    struct fake f;
    fake_init(&f, GUARD_ACTIVE, true, 30);
    f.runs_lost = 1;
    f.fail_from = 2; /* 60 failed attempts, 1-5 ms apart: well past the ttl */
    f.fail_until = 61;
    char err[1024];
    assert_int_equal(source_loop_start(&f.loop, err, sizeof err), 0);
    WAIT_UNTIL(f.ups == 2);
    assert_int_equal(f.lost_calls, 1);
    assert_int_equal(f.gaps, 1);
    assert_true(source_loop_running(&f.loop));
    fake_stop(&f);
}

/* A replay standby (not leader) never reports. */
static void test_replay_standby_silent(void **state)
{
    (void)state;
    struct fake f;
    fake_init(&f, GUARD_ACTIVE, true, 10);
    f.leader = false;
    f.opens_fail = 30;
    char err[1024];
    assert_int_equal(source_loop_start(&f.loop, err, sizeof err), 0); /* replay: background */
    WAIT_UNTIL(f.ups == 1);
    assert_int_equal(f.lost_calls, 0);
    fake_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lost_rule),
        cmocka_unit_test(test_backoff_cap),
        cmocka_unit_test(test_guarded_start_fails_at_once),
        cmocka_unit_test(test_unguarded_retries_in_background),
        cmocka_unit_test(test_reconnects_after_loss),
        cmocka_unit_test(test_gives_up_lease_after_ttl),
        cmocka_unit_test(test_replay_reports_once_and_keeps_trying),
        cmocka_unit_test(test_replay_standby_silent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
