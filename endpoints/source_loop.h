/* The supervisor of an endpoint that holds a connection to its source
 * (redis_psub, rabbitmq, mysql_cdc, mqtt): one thread per start, the start
 * handshake, reconnecting with back-off, the lease-ttl rule and the join.
 * The endpoint supplies open, run and close (and, optionally, what is
 * really its own: how it logs being up, what a failure means, how it
 * waits); everything else is here, so every source behaves alike.
 *
 * The loop, on the endpoint's own thread:
 *
 *   open  -> up -> run -> close      a session; up is when the source is
 *                                    confirmed (by default: open returned
 *                                    0; with up_in_run, run says it by
 *                                    calling source_loop_up, e.g. mysql_cdc
 *                                    at its first binlog event)
 *   failed or lost -> back-off -> open again, until stopped
 *
 * The rules, the same for every source:
 * - Start: source_loop_start returns once the first session was up (0) or
 *   its first attempt failed. It fails (-1) only for a guarded endpoint
 *   (guard "active" or "once", not failover = "replay"): the guard demotes
 *   and tries again later. Every other endpoint keeps retrying in the
 *   background, and start returns 0.
 * - Back-off: backoff_ms(attempt, min, max) (doubling, jittered); the
 *   attempt count starts over after a session that was up for at least a
 *   second (one dropped sooner, e.g. by a source sending what baton
 *   refuses, backs off further).
 * - The lease-ttl rule (one source_lost policy): a leader whose source
 *   stays unreachable for the lease ttl gives the lease up so that another
 *   replica, which may reach it, can take over (guard "active" only). A
 *   lease holder logs it
 *   ("giving up the lease"), calls host->source_lost once and ends the loop
 *   (the guard stops and later restarts the endpoint); its back-off is cut
 *   so that the rule fires on time. With failover = "replay" the endpoint
 *   runs on every replica: the leader reports it once per outage and every
 *   replica keeps retrying.
 * - Counting and logging: every failed attempt and every lost session
 *   counts one source error; a lost session is logged at once, failed
 *   attempts at most every 5 s (with the count suppressed meanwhile).
 */
#ifndef BATON_SOURCE_LOOP_H
#define BATON_SOURCE_LOOP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "endpoints/endpoint.h"

/* What run (or a failed open) tells the loop. */
enum source_end {
    SOURCE_STOPPED = 0, /* stop was asked: the loop ends */
    SOURCE_LOST,        /* the connection failed or broke: err says why; retried */
    SOURCE_TERM_ENDED,  /* the endpoint cannot go on in this term: the loop ends */
};

struct source_loop;

struct source_loop_ops {
    /* Connects and subscribes. 0, or -1 with err filled (named after the
     * server). Whatever it opened is closed by close, also on failure. */
    int (*open)(void *ep, char *err, size_t errlen);
    /* Consumes until stopped or the connection breaks. */
    enum source_end (*run)(void *ep, struct source_loop *l, char *err, size_t errlen);
    /* Frees the session (after run, or after a failed open). */
    void (*close)(void *ep);
    /* Optional: the session is up. first: the first of this start; else
     * down_ms says how long the source was away. Logs it in the
     * endpoint's words ("subscribed on ..."). */
    void (*up)(void *ep, bool first, int64_t down_ms);
    /* Optional: after a session failed or broke (err may be extended).
     * Returns true to open again at once without back-off (mysql_cdc's
     * on_purged = "oldest" moved the position). */
    bool (*failed)(void *ep, bool was_up, char *err, size_t errlen);
    /* Optional: waits ms before the next attempt (redis_psub ends it early
     * when the sentinels switch the master). Default: a sleep that stop
     * interrupts. */
    void (*wait)(void *ep, int64_t ms, const atomic_bool *stop);
    /* Optional: where the next session resumes, for the log line of a lost
     * one ("connection lost: ...; reconnecting from mysql-bin.000003:1234"). */
    void (*resume_point)(void *ep, char *buf, size_t len);
    /* Optional: the loop ends (stopped, term ended, start failed or the
     * lease given up): last words on the consumer thread (mysql_cdc's
     * final checkpoint, mqtt's disconnect). */
    void (*finish)(void *ep);
};

struct source_loop {
    /* set by source_loop_init (up_in_run after it); constant while it runs */
    const struct source_loop_ops *ops;
    void *ep;
    struct endpoint_host *h;
    const char *component; /* log component ("redis_psub") */
    const char *thread_kind; /* thread name prefix ("psub") */
    int64_t backoff_min_ms, backoff_max_ms;
    bool up_in_run;  /* run calls source_loop_up itself */

    /* the loop's own */
    atomic_bool stop;
    pthread_t thread;
    bool running;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int start_state; /* 0 pending, 1 up (or retrying in the background), -1 failed */
    char start_err[1024];
    bool session_up;
    int64_t up_at_ms, lost_since_ms;
    bool first_up_done;
    struct ratelimit rl_retry;
};

/* Once, in the endpoint's create (l zeroed): its hooks, the endpoint, its
 * host, the log component, the thread name prefix and the back-off bounds
 * (reconnect_min_ms / reconnect_max_ms). */
void source_loop_init(struct source_loop *l, const struct source_loop_ops *ops, void *ep,
                      struct endpoint_host *h, const char *component, const char *thread_kind,
                      int64_t backoff_min_ms, int64_t backoff_max_ms);
void source_loop_destroy(struct source_loop *l);
/* Starts the thread and waits for the start handshake (see above). 0, or
 * -1 (err filled: the first attempt's error, or why the thread could not
 * start). Not while running. */
int source_loop_start(struct source_loop *l, char *err, size_t errlen);
/* Asks the loop to stop; the caller then interrupts run (shuts its socket
 * down) and joins. */
void source_loop_request_stop(struct source_loop *l);
/* Waits for the thread; no-op when it is not running. */
void source_loop_join(struct source_loop *l);
bool source_loop_running(const struct source_loop *l);
/* True once stop was asked (run polls it). */
bool source_loop_stopping(const struct source_loop *l);
/* From run (with up_in_run): the source is confirmed. Idempotent per
 * session. */
void source_loop_up(struct source_loop *l);

/* The lease-ttl rule as a pure function, for the unit test: given the
 * guard, whether this replica leads now, the replay mode, how long the
 * source has been down and the ttl, what to do now. */
enum source_lost_action {
    SOURCE_KEEP_TRYING = 0,
    SOURCE_REPORT_AND_KEEP_TRYING, /* replay: the leader reports once per outage */
    SOURCE_GIVE_UP_LEASE,          /* a lease holder: report and end the loop */
};
enum source_lost_action source_lost_rule(enum guard_kind guard, bool replay, bool leader_now,
                                         bool reported, int64_t down_ms, int64_t ttl_ms);
/* The next back-off, cut for a lease holder so that the lease-ttl rule
 * fires on time: at most ttl - down (at least 1 ms). */
int64_t source_backoff_cap(enum guard_kind guard, bool replay, int64_t backoff, int64_t down_ms,
                           int64_t ttl_ms);

#endif
