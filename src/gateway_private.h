/* What src/gateway.c and src/status_pages.c share: the state of the gateway
 * and of each of its endpoints, and the observer thread's entry points.
 * Private to these two files: src/gateway.h (used by main.c and the HTTP
 * listener) keeps struct gateway opaque. */
#ifndef BATON_GATEWAY_PRIVATE_H
#define BATON_GATEWAY_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "baton/active_guard.h"
#include "baton/locker.h"
#include "baton/scope.h"
#include "common/util.h"
#include "src/dispatch.h"
#include "src/forward.h"
#include "src/gateway.h"
#include "src/queue.h"
#include "src/warm.h"

struct gw_endpoint {
    struct gateway *gw;
    const struct endpoint_config *cfg;
    struct endpoint_host host;
    struct ep_stats stats;
    char scope[BATON_GUARD_KEY_MAX];
    char *lease_key;

    void *ep;               /* endpoint instance */
    void *sink;             /* sink instance (one per endpoint) */
    void *dl_sink;          /* the dead-letter sink's instance; NULL = none */
    _Atomic uint64_t fenced_epoch; /* the newest term the receiver fenced (409); 0 = none */
    struct queue *q;
    struct forward_ctx fctx;    /* term-scoped delivery to the sink (src/forward.h) */
    struct forward_ctx inl_fctx; /* the same for inline delivery (+ its drain deadline) */
    /* Concurrent delivery (src/dispatch.c): the sink has requests in flight
     * together and the ordering is not "strict". */
    bool concurrent;
    struct dispatch_host disp;
    size_t queue_batch_max;  /* messages per sink send (config queue_batch_max) */
    /* Inline delivery (host_flush): the endpoint's thread delivers its own
     * batch while the forwarder is idle, if the sink takes it at once. */
    bool inline_ok;
    struct message **inl_batch;     /* under the queue's delivery token */
    enum msg_outcome *inl_outcome;
    struct baton_active_guard *guard; /* GUARD_ACTIVE only */
    struct warm *warm;          /* failover = "replay" only */

    pthread_t fwd_thread;
    bool fwd_started;
    atomic_bool fwd_cancel;  /* drain deadline passed: sinks abort, the rest is settled */
    atomic_llong drain_deadline_ms; /* while demoting: a blocked producer gives up after it */
    atomic_llong pending;    /* queued or being sent, not yet finished */

    pthread_t starter_thread; /* unguarded endpoints: start with retries */
    bool starter_started;
    atomic_bool running;      /* endpoint started (unguarded) */
    atomic_bool ep_stopping;  /* set before stop(): a producer blocked on a
                                 full queue gives up instead of holding stop */
    atomic_bool leading;      /* counted in gw->leaders */
    atomic_bool stepping_down; /* an operator's step-down: the demotion drains as at shutdown */
    /* preferred leaders (src/prefer.c; the observer thread only, but the yield flag) */
    int64_t prefer_since_ms;     /* mono ms since when a ready standby here; 0 = not */
    uint64_t prefer_acted_epoch; /* the term this replica stepped down from for a preferred one */
    int64_t prefer_seen_ms;      /* leader: mono ms since when a marker for its term is seen; 0 = none */
    atomic_bool prefer_yield;    /* a replica of higher priority waits: attempts one ttl later */
    pthread_mutex_t lifecycle; /* serialises start/stop of the endpoint */

    pthread_mutex_t source_mu; /* guards source */
    char source[256];          /* host->set_source: the server in use, "" = none */

    struct ratelimit rl_queue_full;
    struct ratelimit rl_not_leader;
    struct ratelimit rl_sink_failed;
    struct ratelimit rl_dead_letter;
};

/* What the HTTP pages show of the backend, refreshed by the observer thread
 * every OBSERVE_MS: the listener never waits for Redis or a sink. */
#define OBSERVE_MS 1000
struct observed {
    pthread_mutex_t mu;
    bool valid;            /* refreshed at least once */
    bool locker_up;
    char ready_reason[320]; /* "" = ready */
    char (*holder)[160];    /* per endpoint; "" = nobody / unknown */
    bool *holder_known;
};

struct gateway {
    const struct baton_config *cfg;
    struct baton_locker *locker;
    struct gw_endpoint *eps;
    size_t n_eps;
    atomic_bool stopping;
    atomic_bool draining;    /* POST /v1/drain until /v1/resume: standby everywhere */
    atomic_llong stop_deadline_ms; /* mono ms: drain bound at shutdown */
    atomic_int leaders;      /* endpoints this replica leads (balancing) */
    int n_guarded;           /* endpoints with an ActiveGuard (balancing) */
    int64_t started_wall_ms;
    struct observed obs;
    pthread_t obs_thread;
    bool obs_started;
    atomic_bool obs_stop;
    size_t obs_cursor;       /* observer thread only: where observe_holders goes on */
    size_t prefer_cursor;    /* observer thread only: where prefer_round goes on */
    pthread_mutex_t obs_wait_mu; /* the observer sleeps on obs_wait_cv between rounds */
    pthread_cond_t obs_wait_cv;  /* CLOCK_MONOTONIC; status_pages_obs_stop_now broadcasts it */
    pthread_t mark_thread;      /* replay marks, when an endpoint replays */
    bool mark_started;
    atomic_bool mark_stop;
};

/* The observer thread (src/status_pages.c): refreshes gw->obs every
 * OBSERVE_MS until status_pages_obs_stop_now; started and joined by
 * gateway_start/gateway_stop. */
void *status_pages_observer_main(void *arg);
void status_pages_obs_stop_now(struct gateway *gw);

#endif
