/* ActiveGuard: single-active consumption. Replicas race for a lease
 * (<prefix>:active:<scope>); only the leader runs the subscription.
 *
 *   g = active_guard_create(locker, scope, &opts, &callbacks);
 *   active_guard_start(g);            // runs the loop on its own thread
 *   ... active_guard_is_leader_now(g) before every forwarded message ...
 *   active_guard_stop(g);             // demote, release, announce; joins
 *   active_guard_destroy(g);
 *
 * Loop: standby try_lock every retry_ms (or at once when a release is
 * announced); won -> record token, epoch, deadline = sent + ttl - margin;
 * call on_promoted; if that fails, on_demoted then release. Leader: renew
 * every renew_ms; failure, error, lost key or passed deadline -> on_demoted
 * first, then release. Locker without renew: release and re-acquire each
 * renew interval. locker NULL: promoted once, always leader, epoch 0. */
#ifndef BATON_ACTIVE_GUARD_H
#define BATON_ACTIVE_GUARD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct locker;

struct active_guard_options {
    const char *prefix;       /* NULL = "baton" */
    int64_t ttl_ms;           /* 0 = 3000 */
    int64_t renew_ms;         /* 0 = ttl / 3 */
    int64_t retry_ms;         /* 0 = 250 */
    int64_t safety_margin_ms; /* 0 = max(ttl / 20, 10): subtracted from the deadline */
    /* Extra standby delay before each try (leader balancing): called each
     * round, may be NULL. */
    int64_t (*standby_delay_ms)(void *arg);
    void *standby_delay_arg;
    const char *log_name;     /* endpoint name for log lines */
};

struct active_guard_callbacks {
    /* Start consuming. Return 0 once the subscription is confirmed, <0 if it
     * failed (the guard then calls on_demoted and releases). epoch is the
     * fencing epoch of the new lease. */
    int (*on_promoted)(void *arg, uint64_t epoch);
    /* Stop consuming; must return only once the consumer stopped. Called
     * before the lease is released, and only after on_promoted. */
    void (*on_demoted)(void *arg);
    void *arg;
};

enum active_role { ROLE_STANDBY = 0, ROLE_LEADER = 1, ROLE_SINGLE = 2 };

struct active_guard_stats {
    atomic_ullong promotions;
    atomic_ullong demotions;
    atomic_ullong renew_failures;
    atomic_ullong backend_errors;
    atomic_ullong epoch;          /* current (or last) lease epoch */
    atomic_llong leader_since_ms; /* wall clock ms of the last promotion, 0 if none */
    atomic_int role;              /* enum active_role */
    atomic_ullong attempts;       /* acquisition attempts made (any outcome) */
};

/* Validates ttl > renew > 0 and retry > 0 (after defaults). Returns NULL and
 * fills err on invalid options. Copies scope and prefix. */
struct active_guard *active_guard_create(struct locker *locker, const char *scope,
                                         const struct active_guard_options *opts,
                                         const struct active_guard_callbacks *cb,
                                         char *err, size_t errlen);
int active_guard_start(struct active_guard *g);
/* Graceful: on_demoted (if leader), unlock, announce release; joins the thread.
 * Idempotent. */
void active_guard_stop(struct active_guard *g);
void active_guard_destroy(struct active_guard *g);

/* One atomic load and one monotonic clock read: true only while this replica
 * holds a lease whose deadline has not passed and whose backend connection
 * has not broken since it was last verified. Always true without a locker. */
bool active_guard_is_leader_now(const struct active_guard *g);
/* Like active_guard_is_leader_now, but tells apart a lease whose backend
 * connection broke and is being verified (LEADER_UNSURE: forward nothing yet,
 * but do not discard either; it resolves within one round trip after the
 * reconnect, or when the deadline passes) from no lease at all. */
enum leader_state { LEADER_NO = 0, LEADER_YES = 1, LEADER_UNSURE = 2 };
enum leader_state active_guard_leader_state(const struct active_guard *g);
uint64_t active_guard_epoch(const struct active_guard *g);
/* The endpoint lost its source for longer than the lease ttl: demote and
 * release so that another replica can try; this replica waits at least one
 * ttl before competing again. Safe from any thread, including a callback. */
void active_guard_give_up(struct active_guard *g, const char *reason);
/* The full lease key, "<prefix>:active:<scope>" (epoch key: + ":epoch"). */
const char *active_guard_key(const struct active_guard *g);
const struct active_guard_stats *active_guard_stats(const struct active_guard *g);

#endif
