/* ActiveGuard: single-active consumption. Replicas race for a lease
 * (<prefix>:active:<scope>); only the leader runs the subscription.
 *
 *   g = baton_active_guard_create(locker, scope, &opts, &callbacks);
 *   baton_active_guard_start(g);            // lease thread + callback thread
 *   ... baton_active_guard_term_state(g, m->epoch, &left) before every sink write
 *   baton_active_guard_stop(g);             // demote, release, announce; joins
 *   baton_active_guard_destroy(g);
 *
 * Standby: read the release counter, try_lock; held -> wait until the
 * holder's lease would expire or a release is announced. Won -> a new term
 * (epoch; deadline = request sent + ttl - margin, CLOCK_BOOTTIME) and
 * on_promoted runs on the callback thread while the lease thread renews
 * every renew_ms. A renewal answered OK before the deadline moves it; a
 * passed deadline ends the term for good (a late reply never revives it),
 * as do a lost key and a failed start; on_demoted then runs (after
 * on_promoted returned), and the lease is released (and, when graceful,
 * announced). Graceful ends (stop, give-up) keep renewing while on_demoted
 * drains. Locker without renew: release and re-acquire each renew interval.
 * locker NULL: promoted once, always leader, epoch 0. */
#ifndef BATON_ACTIVE_GUARD_H
#define BATON_ACTIVE_GUARD_H

#include "baton/api.h"
#include "baton/locker.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct baton_locker;

struct baton_active_guard_options {
    const char *prefix;       /* NULL = "baton" */
    int64_t ttl_ms;           /* 0 = 3000 */
    int64_t renew_ms;         /* 0 = ttl / 3 */
    int64_t retry_ms;         /* 0 = 250 */
    int64_t safety_margin_ms; /* 0 = max(ttl / 20, 10): subtracted from the deadline */
    /* Extra standby delay before each try (leader balancing): called each
     * round, may be NULL. With a locker that attempts in batches (redis) it
     * is called on the locker's acquirer thread, with that thread's lock
     * held: it must be quick and must not call into the guard. */
    int64_t (*standby_delay_ms)(void *arg);
    void *standby_delay_arg;
    const char *log_name;     /* endpoint name for log lines */
    int64_t command_timeout_ms; /* the locker's command timeout (validation) */
    bool hash_tag;            /* lease key "<prefix>:active:{<scope>}" (baton_lease_key) */
};

struct baton_active_guard_callbacks {
    /* Start consuming. Return 0 once the subscription is confirmed, <0 if it
     * failed (the guard then calls on_demoted and releases). epoch is the
     * fencing epoch of the new lease. */
    int (*on_promoted)(void *arg, uint64_t epoch);
    /* Stop consuming; must return only once the consumer stopped. Called
     * before the lease is released, and only after on_promoted. */
    void (*on_demoted)(void *arg);
    void *arg;
};

enum baton_role { BATON_ROLE_STANDBY = 0, BATON_ROLE_LEADER = 1, BATON_ROLE_SINGLE = 2 };

struct baton_active_guard_stats {
    atomic_ullong promotions;
    atomic_ullong demotions;
    atomic_ullong renew_failures;
    atomic_ullong backend_errors;
    atomic_ullong epoch;          /* current (or last) lease epoch */
    atomic_llong leader_since_ms; /* wall clock ms of the last promotion, 0 if none */
    atomic_int role;              /* enum baton_role */
    atomic_ullong attempts;       /* acquisition attempts made (any outcome) */
};

/* The one validation of lease timings, used by baton_active_guard_create, by the
 * config loader and by --check-config alike. Zero fields take their
 * defaults (ttl 3000, renew ttl/3, retry 250, margin max(ttl/20, 10)).
 * Requires ttl > renew > 0, retry > 0, and
 *   ttl - margin - renew >= command_timeout_ms
 * so that a renewal that times out still leaves time to demote before the
 * key can expire (command_timeout_ms 0 = no locker: not checked). Returns 0,
 * or -1 with msg ("lease ttl 100 ms, renew 95 ms: ..."). */
BATON_API int baton_active_guard_check_timings(int64_t ttl_ms, int64_t renew_ms, int64_t retry_ms,
                               int64_t safety_margin_ms, int64_t command_timeout_ms, char *msg,
                               size_t msglen);

/* Validates the timings with baton_active_guard_check_timings (command timeout
 * taken from opts->command_timeout_ms). Returns NULL and
 * fills err on invalid options. Copies scope and prefix. */
BATON_API struct baton_active_guard *baton_active_guard_create(struct baton_locker *locker, const char *scope,
                                         const struct baton_active_guard_options *opts,
                                         const struct baton_active_guard_callbacks *cb,
                                         char *err, size_t errlen);
BATON_API int baton_active_guard_start(struct baton_active_guard *g);
/* Graceful: on_demoted (if leader), unlock, announce release; joins the thread.
 * Idempotent. */
BATON_API void baton_active_guard_stop(struct baton_active_guard *g);
/* Asks the guard to stop without waiting (the graceful handover starts at
 * once); baton_active_guard_stop then joins. Lets a process stop many guards in
 * parallel. */
BATON_API void baton_active_guard_request_stop(struct baton_active_guard *g);
BATON_API void baton_active_guard_destroy(struct baton_active_guard *g);

/* A few atomic loads and one clock read: true only while this replica holds
 * a lease in its current term whose deadline has not passed and whose
 * backend connection has not broken since it was last verified. Always true
 * without a locker. (Forwarders use baton_active_guard_term_state with the
 * message's own epoch instead.) */
BATON_API bool baton_active_guard_is_leader_now(const struct baton_active_guard *g);
/* Like baton_active_guard_is_leader_now, but tells apart a lease whose backend
 * connection broke and is being verified (BATON_LEADER_UNSURE: forward nothing yet,
 * but do not discard either; it resolves within one round trip after the
 * reconnect, or when the deadline passes) from no lease at all. */
enum baton_leader_state { BATON_LEADER_NO = 0, BATON_LEADER_YES = 1, BATON_LEADER_UNSURE = 2 };
BATON_API enum baton_leader_state baton_active_guard_leader_state(const struct baton_active_guard *g);
BATON_API uint64_t baton_active_guard_epoch(const struct baton_active_guard *g);
/* One atomic load, no clock read: false once this replica's current term is
 * known to have ended (released, lost, given up, or its deadline seen to
 * pass by a reader or the watch thread) or when none began; true otherwise,
 * which includes a term whose deadline passed a moment ago and that nobody
 * has ended yet. A filter for a per-message hot path (drop early what can
 * never be delivered), never a licence to deliver: that is
 * baton_active_guard_term_state's. Always true without a locker. */
BATON_API bool baton_active_guard_term_open(const struct baton_active_guard *g);
/* Term-scoped delivery. A term is one acquisition: one epoch, from the grant
 * until its deadline passes or the lease is released or lost; a passed
 * deadline is final (a renewal answered after it never revives the term).
 * Returns the leader state *in term `epoch`*: BATON_LEADER_YES only while this
 * replica leads now and the current term is that epoch; BATON_LEADER_UNSURE while
 * that term's connection is being verified; BATON_LEADER_NO otherwise (the term
 * ended, or another one runs). *left_ms (may be NULL) receives the time left
 * until the term's current deadline (0 unless YES or UNSURE; INT64_MAX
 * without a locker). Lock-free: a few atomic loads and one clock read. */
BATON_API enum baton_leader_state baton_active_guard_term_state(const struct baton_active_guard *g, uint64_t epoch,
                                          int64_t *left_ms);
/* The endpoint lost its source for longer than the lease ttl: demote and
 * release so that another replica can try; this replica waits at least one
 * ttl before competing again. Safe from any thread, including a callback. */
BATON_API void baton_active_guard_give_up(struct baton_active_guard *g, const char *reason);
/* An operator's step-down: the same graceful path as a stop for this guard
 * only (on_demoted runs under the still-renewed lease, then the lease is
 * released and the release announced), then this replica stays out of the
 * race for hold_ms (0: 2 x ttl; < 0: until baton_active_guard_resume). A
 * standby just holds. Safe from any thread; returns at once. */
BATON_API void baton_active_guard_step_down(struct baton_active_guard *g, const char *reason, int64_t hold_ms);
/* Ends a step-down's hold (or a give-up's sit-out) now: the guard competes
 * again. A step-down asked for but not yet acted on still happens, without
 * the hold. No-op otherwise. */
BATON_API void baton_active_guard_resume(struct baton_active_guard *g);
/* Time left of the hold: 0 = competing, -1 = until resumed, else ms. A
 * step-down asked for and not yet acted on counts with its whole hold. */
BATON_API int64_t baton_active_guard_hold_left_ms(const struct baton_active_guard *g);
/* The lease token of the term with this epoch (this replica's latest
 * acquisition), for a store that checks the lease itself in the writer's
 * transaction (the postgresql sink's lease_fence): 0 with out filled, or -1
 * (out "") when this replica's latest term has another epoch. The token
 * says nothing about whether the term still runs: the store decides. */
BATON_API int baton_active_guard_term_token(struct baton_active_guard *g, uint64_t epoch,
                                            char out[BATON_TOKEN_LEN]);
/* The full lease key, "<prefix>:active:<scope>" (epoch key: + ":epoch"). */
BATON_API const char *baton_active_guard_key(const struct baton_active_guard *g);
BATON_API const struct baton_active_guard_stats *baton_active_guard_stats(const struct baton_active_guard *g);

#endif
