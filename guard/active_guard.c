/* ActiveGuard: one lease per scope; the holder is the only active consumer.
 *
 * The loop runs on its own thread. Leader state visible to other threads is
 * two atomics: the lease deadline (monotonic ms, 0 = not leader) and the
 * locker generation recorded at the last successful acquire/renew/check.
 * active_guard_is_leader_now() reads both and the monotonic clock. */
#include "guard/active_guard.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "guard/locker.h"
#include "guard/scope.h"
#include "src/common/log.h"
#include "src/common/util.h"

#define DEFAULT_TTL_MS 3000
#define DEFAULT_RETRY_MS 250
/* Generation watch between renewals. Safety does not depend on it:
 * is_leader_now reads the deadline and the generation itself on every call;
 * this only bounds how soon a verification starts after a reconnect (the
 * forwarder holds meanwhile). The deadline itself is waited for exactly. */
#define LEADER_POLL_MS 100
#define RELEASE_WAIT_CHUNK_MS 250 /* bounds stop latency while waiting for a release */
#define VERIFY_RETRY_MS 100

struct active_guard {
    struct locker *locker; /* not owned */
    char key[GUARD_KEY_MAX];
    char *log_name;
    int64_t ttl_ms, renew_ms, retry_ms, margin_ms;
    int64_t (*standby_delay_ms)(void *arg);
    void *standby_delay_arg;
    struct active_guard_callbacks cb;

    pthread_mutex_t life_mu; /* start/stop/destroy */
    bool running;
    pthread_t thread;

    pthread_mutex_t mu; /* wakeups and the give-up reason */
    pthread_cond_t cv;  /* CLOCK_MONOTONIC */
    atomic_bool stop;
    atomic_bool give_up;
    char give_up_reason[160];

    atomic_llong deadline; /* monotonic ms; 0 = not leader */
    atomic_ullong lease_gen;
    char token[RANDOM_TOKEN_LEN]; /* guard thread only */
    struct log_ratelimit rl_err;
    struct active_guard_stats stats;
};

enum wake { W_TIMEOUT, W_STOP, W_GIVE_UP, W_GEN, W_DEADLINE };
enum lead_end { LEAD_STANDBY, LEAD_REACQUIRE, LEAD_STOPPED };

static uint64_t locker_gen(const struct active_guard *g)
{
    if (g->locker == NULL || g->locker->ops->generation == NULL) return 0;
    return g->locker->ops->generation(g->locker);
}

static bool gen_changed(const struct active_guard *g)
{
    return locker_gen(g) != atomic_load(&g->lease_gen);
}

/* Waits until `until` (monotonic ms) or an event. While leader, also watches
 * the deadline and (from gen_after on) the locker generation. */
static enum wake wait_until(struct active_guard *g, int64_t until, bool leader, int64_t gen_after)
{
    enum wake w;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        if (atomic_load(&g->stop)) {
            w = W_STOP;
            break;
        }
        if (atomic_load(&g->give_up)) {
            w = W_GIVE_UP;
            break;
        }
        int64_t now = clock_mono_ms();
        if (leader) {
            int64_t d = atomic_load(&g->deadline);
            if (d != 0 && now >= d) {
                w = W_DEADLINE;
                break;
            }
            if (now >= gen_after && gen_changed(g)) {
                w = W_GEN;
                break;
            }
        }
        if (now >= until) {
            w = W_TIMEOUT;
            break;
        }
        int64_t slice = until - now;
        if (leader) {
            int64_t d = atomic_load(&g->deadline);
            if (d != 0 && d - now < slice) slice = d - now;
            if (slice > LEADER_POLL_MS) slice = LEADER_POLL_MS;
        }
        struct timespec ts = clock_deadline(CLOCK_MONOTONIC, slice);
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    pthread_mutex_unlock(&g->mu);
    return w;
}

static void note_backend_error(struct active_guard *g, const char *what, const char *err)
{
    atomic_fetch_add(&g->stats.backend_errors, 1);
    long long suppressed = 0;
    if (log_ratelimit_ok(&g->rl_err, 2000, &suppressed))
        log_warn("guard", g->log_name, "%s %s: %s (%lld similar suppressed)", what, g->key, err,
                 suppressed);
}

static void set_lease(struct active_guard *g, uint64_t gen, int64_t sent_mono_ms)
{
    int64_t d = sent_mono_ms + g->ttl_ms - g->margin_ms;
    if (d <= 0) d = 1;
    atomic_store(&g->lease_gen, gen); /* before the deadline: readers see a consistent pair */
    atomic_store(&g->deadline, d);
}

/* Demote: on_demoted first (the lease is still valid unless lost, so the
 * consumer may drain under it), then drop leadership, then release. */
static void demote(struct active_guard *g, const char *reason, bool lost, bool announce)
{
    if (lost) atomic_store(&g->deadline, 0);
    if (g->cb.on_demoted) g->cb.on_demoted(g->cb.arg);
    atomic_store(&g->deadline, 0);
    atomic_store(&g->stats.role, ROLE_STANDBY);
    atomic_fetch_add(&g->stats.demotions, 1);
    log_info("guard", g->log_name, "demoted from leader of %s (epoch %llu): %s", g->key,
             (unsigned long long)atomic_load(&g->stats.epoch), reason);
    if (lost) return;
    char err[LOCKER_ERR_MAX];
    int rc = locker_unlock(g->locker, g->key, g->token, err);
    if (rc != LOCKER_OK) {
        log_warn("guard", g->log_name, "release of %s: %s", g->key, err);
        return;
    }
    if (announce && g->locker->ops->announce_release) {
        if (g->locker->ops->announce_release(g->locker, g->key, err) != LOCKER_OK)
            log_warn("guard", g->log_name, "announcing the release of %s: %s", g->key, err);
    }
}

/* Verifies the lease after the locker connection broke. */
static int verify_lease(struct active_guard *g, char err[LOCKER_ERR_MAX])
{
    uint64_t g1 = locker_gen(g);
    int rc;
    if (g->locker->ops->check) {
        err[0] = '\0';
        rc = g->locker->ops->check(g->locker, g->key, g->token, err);
        if (rc == LOCKER_OK) atomic_store(&g->lease_gen, g1);
    } else {
        int64_t sent = 0;
        rc = locker_renew(g->locker, g->key, g->token, g->ttl_ms, &sent, err);
        if (rc == LOCKER_OK) set_lease(g, g1, sent);
    }
    return rc;
}

static enum lead_end lead(struct active_guard *g, const struct lock_grant *grant, uint64_t gen0)
{
    memcpy(g->token, grant->token, sizeof g->token);
    set_lease(g, gen0, grant->sent_mono_ms);
    atomic_store(&g->stats.epoch, grant->epoch);
    atomic_store(&g->stats.leader_since_ms, clock_wall_ms());
    atomic_store(&g->stats.role, ROLE_LEADER);
    atomic_fetch_add(&g->stats.promotions, 1);
    log_info("guard", g->log_name, "promoted to leader of %s (epoch %llu)", g->key,
             (unsigned long long)grant->epoch);

    if (g->cb.on_promoted && g->cb.on_promoted(g->cb.arg, grant->epoch) < 0) {
        log_warn("guard", g->log_name, "starting the consumer failed; releasing %s", g->key);
        demote(g, "promotion failed", false, true);
        wait_until(g, clock_mono_ms() + g->retry_ms, false, 0);
        return LEAD_STANDBY;
    }

    bool can_renew = locker_can_renew(g->locker);
    int64_t next_renew = grant->sent_mono_ms + g->renew_ms;
    int64_t gen_after = 0;
    char err[LOCKER_ERR_MAX];
    for (;;) {
        enum wake w = wait_until(g, next_renew, true, gen_after);
        switch (w) {
        case W_STOP:
            demote(g, "stopping", false, true);
            return LEAD_STOPPED;
        case W_GIVE_UP: {
            char reason[sizeof g->give_up_reason + 16];
            pthread_mutex_lock(&g->mu);
            snprintf(reason, sizeof reason, "gave up: %s", g->give_up_reason);
            pthread_mutex_unlock(&g->mu);
            demote(g, reason, false, true);
            return LEAD_STANDBY;
        }
        case W_DEADLINE:
            atomic_fetch_add(&g->stats.renew_failures, 1);
            demote(g, "lease deadline passed without a successful renewal", false, false);
            return LEAD_STANDBY;
        case W_GEN: {
            int rc = verify_lease(g, err);
            if (rc == LOCKER_OK) {
                log_info("guard", g->log_name,
                         "lease %s (epoch %llu) verified after the connection was re-established",
                         g->key, (unsigned long long)atomic_load(&g->stats.epoch));
                gen_after = 0;
            } else if (rc == LOCKER_LOST) {
                atomic_fetch_add(&g->stats.renew_failures, 1);
                demote(g, "lease lost while the connection was down", true, false);
                return LEAD_STANDBY;
            } else {
                note_backend_error(g, "verifying", err);
                gen_after = clock_mono_ms() + VERIFY_RETRY_MS;
            }
            break;
        }
        case W_TIMEOUT: {
            if (!can_renew) {
                demote(g, "re-acquiring (locker cannot renew)", false, false);
                return LEAD_REACQUIRE;
            }
            uint64_t g1 = locker_gen(g);
            int64_t sent = 0;
            int rc = locker_renew(g->locker, g->key, g->token, g->ttl_ms, &sent, err);
            if (rc == LOCKER_OK) {
                set_lease(g, g1, sent);
                next_renew = sent + g->renew_ms;
                gen_after = 0;
            } else if (rc == LOCKER_LOST) {
                atomic_fetch_add(&g->stats.renew_failures, 1);
                demote(g, err, true, false);
                return LEAD_STANDBY;
            } else {
                /* keep trying until the deadline; W_DEADLINE demotes */
                atomic_fetch_add(&g->stats.renew_failures, 1);
                note_backend_error(g, "renewing", err);
                int64_t step = g->retry_ms < g->renew_ms ? g->retry_ms : g->renew_ms;
                next_renew = clock_mono_ms() + step;
            }
            break;
        }
        }
    }
}

/* Standby: wait wait_ms, returning early when a release is announced (true)
 * or on stop / give-up. */
static bool standby_wait(struct active_guard *g, int64_t wait_ms)
{
    int64_t until = clock_mono_ms() + wait_ms;
    if (g->locker->ops->wait_release == NULL) {
        wait_until(g, until, false, 0);
        return false;
    }
    for (;;) {
        if (atomic_load(&g->stop) || atomic_load(&g->give_up)) return false;
        int64_t rem = until - clock_mono_ms();
        if (rem <= 0) return false;
        if (rem > RELEASE_WAIT_CHUNK_MS) rem = RELEASE_WAIT_CHUNK_MS;
        if (g->locker->ops->wait_release(g->locker, g->key, rem)) return true;
    }
}

static void sit_out(struct active_guard *g)
{
    char reason[sizeof g->give_up_reason];
    pthread_mutex_lock(&g->mu);
    snprintf(reason, sizeof reason, "%s", g->give_up_reason);
    atomic_store(&g->give_up, false);
    pthread_mutex_unlock(&g->mu);
    log_warn("guard", g->log_name, "giving up %s (%s): not competing for %lld ms", g->key, reason,
             (long long)g->ttl_ms);
    wait_until(g, clock_mono_ms() + g->ttl_ms, false, 0);
}

static void run_single(struct active_guard *g)
{
    atomic_store(&g->stats.role, ROLE_SINGLE);
    bool promoted = false;
    while (!atomic_load(&g->stop)) {
        if (!promoted) {
            if (g->cb.on_promoted == NULL || g->cb.on_promoted(g->cb.arg, 0) >= 0) {
                promoted = true;
                atomic_fetch_add(&g->stats.promotions, 1);
                atomic_store(&g->stats.leader_since_ms, clock_wall_ms());
                log_info("guard", g->log_name, "no locker: running as the single instance");
            } else {
                log_warn("guard", g->log_name, "starting the consumer failed; retrying");
                if (g->cb.on_demoted) g->cb.on_demoted(g->cb.arg);
                wait_until(g, clock_mono_ms() + g->retry_ms, false, 0);
                continue;
            }
        }
        enum wake w = wait_until(g, INT64_MAX, false, 0);
        if (w == W_GIVE_UP) {
            if (g->cb.on_demoted) g->cb.on_demoted(g->cb.arg);
            atomic_fetch_add(&g->stats.demotions, 1);
            promoted = false;
            sit_out(g);
        }
    }
    if (promoted && g->cb.on_demoted) g->cb.on_demoted(g->cb.arg);
}

static void *guard_main(void *arg)
{
    struct active_guard *g = arg;
    if (g->locker == NULL) {
        run_single(g);
        return NULL;
    }
    while (!atomic_load(&g->stop)) {
        if (atomic_load(&g->give_up)) {
            sit_out(g);
            continue;
        }
        if (g->standby_delay_ms) {
            int64_t d = g->standby_delay_ms(g->standby_delay_arg);
            if (d > 0 && wait_until(g, clock_mono_ms() + d, false, 0) != W_TIMEOUT) continue;
        }
        struct lock_grant grant;
        memset(&grant, 0, sizeof grant);
        char err[LOCKER_ERR_MAX];
        int rc = locker_try_lock(g->locker, g->key, g->ttl_ms, &grant, err);
        atomic_fetch_add(&g->stats.attempts, 1);
        if (rc == LOCKER_OK) {
            /* The generation of the connection that carried the grant: read
             * after the call, since try_lock may have reconnected first (a
             * generation read before would make the new lease look broken). */
            uint64_t gen0 = locker_gen(g);
            lead(g, &grant, gen0); /* LEAD_REACQUIRE: try again at once */
            continue;
        }
        if (rc == LOCKER_HELD) {
            /* The holder's lease cannot expire before its remaining ttl, and
             * a release is announced: look again when it would expire (at
             * least retry_ms, at most ttl), instead of every retry_ms. A
             * crash is then taken over right at the expiry. */
            int64_t wait = g->retry_ms;
            if (grant.held_pttl_ms > wait) wait = grant.held_pttl_ms + 1;
            if (wait > g->ttl_ms) wait = g->ttl_ms;
            standby_wait(g, wait);
            continue;
        }
        note_backend_error(g, "acquiring", err);
        wait_until(g, clock_mono_ms() + g->retry_ms, false, 0);
    }
    atomic_store(&g->stats.role, ROLE_STANDBY);
    return NULL;
}

struct active_guard *active_guard_create(struct locker *locker, const char *scope,
                                         const struct active_guard_options *opts,
                                         const struct active_guard_callbacks *cb, char *err,
                                         size_t errlen)
{
    struct active_guard_options o = {0};
    if (opts) o = *opts;
    int64_t ttl = o.ttl_ms ? o.ttl_ms : DEFAULT_TTL_MS;
    int64_t renew = o.renew_ms ? o.renew_ms : ttl / 3;
    int64_t retry = o.retry_ms ? o.retry_ms : DEFAULT_RETRY_MS;
    int64_t margin = o.safety_margin_ms ? o.safety_margin_ms : (ttl / 20 > 10 ? ttl / 20 : 10);
    const char *what = NULL;
    if (ttl <= 0)
        what = "ttl must be > 0";
    else if (renew <= 0)
        what = "renew interval must be > 0";
    else if (renew >= ttl)
        what = "renew interval must be shorter than the ttl";
    else if (retry <= 0)
        what = "retry interval must be > 0";
    else if (margin < 0 || ttl - margin <= renew)
        what = "ttl - safety margin must exceed the renew interval";
    if (what) {
        snprintf(err, errlen,
                 "active guard %s: %s (ttl %lld ms, renew %lld ms, retry %lld ms, margin %lld ms)",
                 scope ? scope : "", what, (long long)ttl, (long long)renew, (long long)retry,
                 (long long)margin);
        return NULL;
    }
    struct active_guard *g = xcalloc(1, sizeof *g);
    if (guard_key(g->key, sizeof g->key, o.prefix, "active", scope, NULL) < 0) {
        snprintf(err, errlen, "active guard %s: key too long", scope ? scope : "");
        free(g);
        return NULL;
    }
    g->locker = locker;
    g->log_name = o.log_name ? xstrdup(o.log_name) : NULL;
    g->ttl_ms = ttl;
    g->renew_ms = renew;
    g->retry_ms = retry;
    g->margin_ms = margin;
    g->standby_delay_ms = o.standby_delay_ms;
    g->standby_delay_arg = o.standby_delay_arg;
    if (cb) g->cb = *cb;
    pthread_mutex_init(&g->life_mu, NULL);
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_store(&g->stats.role, locker ? ROLE_STANDBY : ROLE_SINGLE);
    return g;
}

int active_guard_start(struct active_guard *g)
{
    if (g == NULL) return -1;
    pthread_mutex_lock(&g->life_mu);
    int rc = 0;
    if (!g->running) {
        atomic_store(&g->stop, false);
        if (pthread_create(&g->thread, NULL, guard_main, g) != 0) {
            log_error("guard", g->log_name, "cannot start the guard thread for %s", g->key);
            rc = -1;
        } else {
            g->running = true;
        }
    }
    pthread_mutex_unlock(&g->life_mu);
    return rc;
}

void active_guard_stop(struct active_guard *g)
{
    if (g == NULL) return;
    pthread_mutex_lock(&g->life_mu);
    if (g->running) {
        pthread_mutex_lock(&g->mu);
        atomic_store(&g->stop, true);
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        if (pthread_equal(pthread_self(), g->thread)) {
            /* called from a callback: the loop ends after it returns; the
             * owner's later stop/destroy joins */
            pthread_mutex_unlock(&g->life_mu);
            return;
        }
        pthread_join(g->thread, NULL);
        g->running = false;
    }
    pthread_mutex_unlock(&g->life_mu);
}

void active_guard_destroy(struct active_guard *g)
{
    if (g == NULL) return;
    active_guard_stop(g);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    pthread_mutex_destroy(&g->life_mu);
    free(g->log_name);
    free(g);
}

bool active_guard_is_leader_now(const struct active_guard *g)
{
    if (g == NULL) return false;
    if (g->locker == NULL) return true;
    int64_t d = atomic_load(&g->deadline);
    if (d == 0 || clock_mono_ms() >= d) return false;
    return !gen_changed(g);
}

enum leader_state active_guard_leader_state(const struct active_guard *g)
{
    if (g == NULL) return LEADER_NO;
    if (g->locker == NULL) return LEADER_YES;
    int64_t d = atomic_load(&g->deadline);
    if (d == 0 || clock_mono_ms() >= d) return LEADER_NO;
    return gen_changed(g) ? LEADER_UNSURE : LEADER_YES;
}

uint64_t active_guard_epoch(const struct active_guard *g)
{
    return g ? atomic_load(&g->stats.epoch) : 0;
}

void active_guard_give_up(struct active_guard *g, const char *reason)
{
    if (g == NULL) return;
    pthread_mutex_lock(&g->mu);
    snprintf(g->give_up_reason, sizeof g->give_up_reason, "%s", reason ? reason : "");
    atomic_store(&g->give_up, true);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

const char *active_guard_key(const struct active_guard *g)
{
    return g->key;
}

const struct active_guard_stats *active_guard_stats(const struct active_guard *g)
{
    return &g->stats;
}
