/* The endpoint supervisor: see source_loop.h. */
#include "endpoints/source_loop.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "common/log.h"

enum { START_PENDING = 0, START_UP = 1, START_FAILED = -1 };

enum source_lost_action source_lost_rule(enum guard_kind guard, bool replay, bool leader_now,
                                         bool reported, int64_t down_ms, int64_t ttl_ms)
{
    if (guard != GUARD_ACTIVE || down_ms < ttl_ms) return SOURCE_KEEP_TRYING;
    if (!replay) return SOURCE_GIVE_UP_LEASE;
    return leader_now && !reported ? SOURCE_REPORT_AND_KEEP_TRYING : SOURCE_KEEP_TRYING;
}

int64_t source_backoff_cap(enum guard_kind guard, bool replay, int64_t backoff, int64_t down_ms,
                           int64_t ttl_ms)
{
    if (guard != GUARD_ACTIVE || replay) return backoff;
    int64_t left = ttl_ms - down_ms;
    if (backoff > left) backoff = left > 1 ? left : 1;
    return backoff;
}

/* A start that fails: guarded, not replay (the guard retries on the next
 * promotion). */
static bool start_may_fail(const struct endpoint_host *h)
{
    return h->guard != GUARD_NONE && !h->replay;
}

static void set_start(struct source_loop *l, int st, const char *err)
{
    pthread_mutex_lock(&l->lock);
    if (l->start_state == START_PENDING) {
        l->start_state = st;
        if (err) snprintf(l->start_err, sizeof l->start_err, "%s", err);
        pthread_cond_broadcast(&l->cond);
    }
    pthread_mutex_unlock(&l->lock);
}

void source_loop_up(struct source_loop *l)
{
    if (l->session_up) return;
    l->session_up = true;
    int64_t now = clock_mono_ms();
    l->up_at_ms = now;
    bool first = !l->first_up_done;
    l->first_up_done = true;
    struct endpoint_host *h = l->h;
    if (!first && h->replay && h->source_gap) h->source_gap(h); /* the ring has a hole here */
    if (l->ops->up) l->ops->up(l->ep, first, l->lost_since_ms ? now - l->lost_since_ms : 0);
    l->lost_since_ms = 0;
    set_start(l, START_UP, NULL);
}

static void wait_backoff(struct source_loop *l, int64_t ms)
{
    if (l->ops->wait)
        l->ops->wait(l->ep, ms, &l->stop);
    else
        sleep_ms_cancellable(ms, &l->stop);
}

/* After a session failed (never up) or broke (was up). Returns false when
 * the loop ends. */
static bool after_failure(struct source_loop *l, bool was_up, unsigned *attempt, bool *reported,
                          char *err, size_t errlen)
{
    struct endpoint_host *h = l->h;
    const char *name = h->name;
    int64_t now = clock_mono_ms();
    atomic_fetch_add_explicit(&h->stats->source_errors, 1, memory_order_relaxed);
    if (was_up) {
        if (now - l->up_at_ms >= 1000) *attempt = 0;
        l->lost_since_ms = now;
        *reported = false;
    }
    bool at_once = l->ops->failed && l->ops->failed(l->ep, was_up, err, errlen);
    if (was_up) {
        char from[400] = "";
        if (l->ops->resume_point) {
            char at[380] = "";
            l->ops->resume_point(l->ep, at, sizeof at);
            if (at[0]) snprintf(from, sizeof from, " from %s", at);
        }
        log_warn(l->component, name, "connection lost: %s; reconnecting%s", err, from);
    }
    if (at_once) return true;
    long long supp = 0;
    if (!l->first_up_done && l->start_state == START_PENDING) {
        if (start_may_fail(h)) {
            set_start(l, START_FAILED, err); /* start() reports it */
            return false;
        }
        log_error(l->component, name, "%s; retrying in the background", err);
        (void)ratelimit_ok(&l->rl_retry, 5000, &supp); /* said just now */
        set_start(l, START_UP, NULL);
    }
    if (!l->lost_since_ms) l->lost_since_ms = now;
    int64_t down = now - l->lost_since_ms;
    bool leader = h->guard == GUARD_ACTIVE && h->replay && h->leader_now(h);
    enum source_lost_action act =
        source_lost_rule(h->guard, h->replay, leader, *reported, down, h->lease_ttl_ms);
    if (act != SOURCE_KEEP_TRYING) {
        char reason[1400];
        snprintf(reason, sizeof reason,
                 "source unreachable for %" PRId64 " ms (lease ttl %" PRId64 " ms): %s", down,
                 h->lease_ttl_ms, err);
        /* the gateway logs it ("giving up the lease") */
        h->source_lost(h, reason);
        if (act == SOURCE_GIVE_UP_LEASE) return false; /* the guard calls stop(), which joins us */
        /* replay: a leader without its source hands over to a standby
         * that may have it; this replica keeps retrying and buffering */
        *reported = true;
    }
    int64_t d = source_backoff_cap(h->guard, h->replay,
                                   backoff_ms((*attempt)++, l->backoff_min_ms, l->backoff_max_ms),
                                   down, h->lease_ttl_ms);
    if (!was_up && ratelimit_ok(&l->rl_retry, 5000, &supp))
        log_warn(l->component, name, "%s; retrying in %" PRId64 " ms (%lld similar lines "
                 "suppressed)", err, d, supp);
    wait_backoff(l, d);
    return true;
}

static void *loop_main(void *arg)
{
    struct source_loop *l = arg;
    unsigned attempt = 0;
    bool reported = false;
    char err[1024];

    while (!atomic_load(&l->stop)) {
        err[0] = '\0';
        l->session_up = false;
        enum source_end end = SOURCE_LOST;
        if (l->ops->open(l->ep, err, sizeof err) == 0) {
            if (!l->up_in_run) source_loop_up(l);
            end = l->ops->run(l->ep, l, err, sizeof err);
        } else if (!err[0]) {
            snprintf(err, sizeof err, "cannot connect");
        }
        l->ops->close(l->ep);
        if (atomic_load(&l->stop) || end != SOURCE_LOST) break;
        if (!after_failure(l, l->session_up, &attempt, &reported, err, sizeof err)) break;
    }
    if (l->ops->finish) l->ops->finish(l->ep);
    set_start(l, START_FAILED, l->first_up_done ? NULL : "stopped before the source was up");
    return NULL;
}

void source_loop_init(struct source_loop *l, const struct source_loop_ops *ops, void *ep,
                      struct endpoint_host *h, const char *component, const char *thread_kind,
                      int64_t backoff_min_ms, int64_t backoff_max_ms)
{
    l->ops = ops;
    l->ep = ep;
    l->h = h;
    l->component = component;
    l->thread_kind = thread_kind;
    l->backoff_min_ms = backoff_min_ms;
    l->backoff_max_ms = backoff_max_ms;
    atomic_init(&l->stop, false);
    l->running = false;
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->cond, NULL);
}

void source_loop_destroy(struct source_loop *l)
{
    source_loop_join(l);
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->cond);
}

int source_loop_start(struct source_loop *l, char *err, size_t errlen)
{
    if (l->running) {
        snprintf(err, errlen, "start called while already running");
        return -1;
    }
    atomic_store(&l->stop, false);
    l->start_state = START_PENDING;
    l->start_err[0] = '\0';
    l->first_up_done = false;
    l->lost_since_ms = 0;
    l->session_up = false;
    int rc = pthread_create(&l->thread, NULL, loop_main, l);
    if (rc != 0) {
        snprintf(err, errlen, "cannot create the consumer thread: %s", strerror(rc));
        return -1;
    }
    thread_name(l->thread, l->thread_kind, l->h->name);
    l->running = true;
    pthread_mutex_lock(&l->lock);
    while (l->start_state == START_PENDING) pthread_cond_wait(&l->cond, &l->lock);
    int st = l->start_state;
    pthread_mutex_unlock(&l->lock);
    if (st == START_FAILED) {
        pthread_join(l->thread, NULL);
        l->running = false;
        snprintf(err, errlen, "%s", l->start_err);
        return -1;
    }
    return 0;
}

void source_loop_request_stop(struct source_loop *l)
{
    atomic_store(&l->stop, true);
}

void source_loop_join(struct source_loop *l)
{
    if (!l->running) return;
    pthread_join(l->thread, NULL);
    l->running = false;
}

bool source_loop_running(const struct source_loop *l)
{
    return l->running;
}

bool source_loop_stopping(const struct source_loop *l)
{
    return atomic_load(&l->stop);
}
