/* The gateway: endpoints + guards + queues + forwarders + sinks.
 *
 * Per enabled endpoint:
 *   endpoint thread --emit--> bounded queue --forwarder thread--> sink
 * Term-scoped, lease-bounded delivery: every message carries the lease term
 * (epoch) it was received in, and the sink gets it only while this replica
 * leads now in that same term. The sink asks before every request, every
 * retry attempt and every poll slice (forward_time_left: src/forward.c asks
 * the guard itself) and bounds each blocking operation by the time left on
 * the lease; messages of a term that
 * ended are settled as term_ended and never delivered in a later term (the
 * endpoint's done callback settles them by source semantics: dropped,
 * requeued, or left unchekpointed).
 *
 * Guards:
 *   active  an ActiveGuard starts the endpoint on promotion and stops it on
 *           demotion (on_demoted also drains the queue while the lease is
 *           still valid, so a graceful handover loses nothing queued)
 *   once    the endpoint runs everywhere and dedups per delivery identity
 *           itself (schedule: OnceGuard on the planned slot)
 *   none    the endpoint runs everywhere (source already single-delivery)
 */
#include "base/util.h"
#include "src/gateway_private.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "baton/active_guard.h"
#include "baton/locker.h"
#include "baton/scope.h"
#include "common/json.h"
#include "common/log.h"
#include "common/redact.h"
#include "common/util.h"
#include "src/forward.h"
#include "src/queue.h"
#include "src/warm.h"

/* ---- host callbacks (what endpoints see) ------------------------------ */

static bool host_leader_now(const struct endpoint_host *h)
{
    const struct gw_endpoint *e = h->gw;
    return e->guard ? baton_active_guard_is_leader_now(e->guard) : true;
}

static uint64_t host_epoch(const struct endpoint_host *h)
{
    const struct gw_endpoint *e = h->gw;
    return e->guard ? baton_active_guard_epoch(e->guard) : 0;
}

static void drop_message(struct gw_endpoint *e, struct message *m, enum msg_outcome o)
{
    atomic_ullong *counter;
    struct ratelimit *rl;
    switch (o) {
    case MSG_DROPPED_QUEUE_FULL:
        counter = &e->stats.dropped_queue_full;
        rl = &e->rl_queue_full;
        break;
    case MSG_DROPPED_NOT_LEADER:
        counter = &e->stats.dropped_not_leader;
        rl = &e->rl_not_leader;
        break;
    case MSG_DROPPED_SINK_FAILED:
        counter = &e->stats.dropped_sink_failed;
        rl = &e->rl_sink_failed;
        break;
    case MSG_DROPPED_TERM_ENDED:
        if (e->host.source_redelivers) {
            /* not lost: the source delivers it again (to the next leader) */
            atomic_fetch_add_explicit(&e->stats.returned_term_ended, 1, memory_order_relaxed);
            message_finish(m, o);
            return;
        }
        counter = &e->stats.dropped_term_ended;
        rl = &e->rl_not_leader;
        break;
    default:
        counter = &e->stats.dropped_shutdown;
        rl = NULL;
        break;
    }
    unsigned long long total = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed) + 1;
    long long suppressed = 0;
    if (rl == NULL || ratelimit_ok(rl, 5000, &suppressed))
        log_warn("gateway", e->cfg->name, "dropped message%s%s (%s; %llu dropped for this reason so far, %lld warnings suppressed)",
                 m->id[0] ? " id=" : "", m->id, msg_outcome_name(o), total, suppressed);
    message_finish(m, o);
}

/* A producer blocked on a full queue gives up when its endpoint is being
 * stopped and the lease no longer covers forwarding (a graceful stop keeps
 * waiting: the forwarder drains under the still-valid lease). */
static bool producer_should_give_up(void *arg)
{
    struct gw_endpoint *e = arg;
    if (!atomic_load(&e->ep_stopping)) return false;
    if (atomic_load(&e->fwd_cancel) || clock_mono_ms() >= atomic_load(&e->drain_deadline_ms)) return true;
    return e->guard && baton_active_guard_leader_state(e->guard) == BATON_LEADER_NO;
}

/* Queues m for the forwarder (received already counted); quiet: without
 * waking it (the producer flushes before it blocks, host_flush). */
static int enqueue_as(struct gw_endpoint *e, struct message *m, bool quiet)
{
    struct message *evicted = NULL;
    atomic_fetch_add(&e->pending, 1);
    int rc = quiet ? queue_push_quiet(e->q, m, &evicted, producer_should_give_up, e)
                   : queue_push_cancellable(e->q, m, &evicted, producer_should_give_up, e);
    if (rc != 0) {
        atomic_fetch_sub(&e->pending, 1);
        drop_message(e, m, MSG_DROPPED_SHUTDOWN);
        return -1;
    }
    /* stats.queue_depth is refreshed by the forwarder after every pop (the
     * metrics read queue_depth() directly): no store here, so the producer
     * does not bounce that cache line with the forwarder per message. */
    if (evicted) {
        atomic_fetch_sub(&e->pending, 1);
        drop_message(e, evicted, MSG_DROPPED_QUEUE_FULL);
    }
    if (e->concurrent && !quiet) dispatch_wake(&e->disp);
    return 0;
}

/* failover = "replay": what warm_emit and warm_promote hand back while
 * live (counted received here: a standby's buffered messages are not). */
static int enqueue_replay_path(struct gw_endpoint *e, struct message *m, bool quiet)
{
    atomic_fetch_add_explicit(&e->stats.received, 1, memory_order_relaxed);
    return enqueue_as(e, m, quiet);
}

static int emit_as(struct endpoint_host *h, struct message *m, bool deferred)
{
    struct gw_endpoint *e = h->gw;
    /* replay: every replica buffers; the live one also enqueues (quietly
     * when deferred: the endpoint flushes before it blocks) */
    if (e->warm) {
        struct message *q = NULL;
        if (warm_emit(e->warm, m, &q) != 0) return -1;
        return q ? enqueue_replay_path(e, q, deferred) : 0;
    }
    atomic_fetch_add_explicit(&e->stats.received, 1, memory_order_relaxed);
    /* Early drop only when the term is known to be over; an unsure lease
     * (being verified) or a deadline that passed a moment ago is decided
     * by the term check right before the sink. No clock read per message. */
    if (e->guard && !baton_active_guard_term_open(e->guard)) {
        drop_message(e, m, MSG_DROPPED_NOT_LEADER);
        return -1;
    }
    return enqueue_as(e, m, deferred);
}

static int host_emit(struct endpoint_host *h, struct message *m)
{
    return emit_as(h, m, false);
}

static int host_emit_deferred(struct endpoint_host *h, struct message *m)
{
    return emit_as(h, m, true);
}

static void deliver(struct gw_endpoint *e, const struct forward_ctx *ctx, struct message **batch,
                    enum msg_outcome *outcome, size_t n);

/* The endpoint is about to block: what it emitted deferred goes out now.
 * While the forwarder waits idle and the sink takes the batch at once, this
 * thread delivers it itself (queue_claim: the delivery token keeps the queue
 * order and one deliverer at a time), with the same term-scoped
 * forward_batch the forwarder runs. That saves the hand-off (a futex wake,
 * a forwarder wake-up and its coalescing pause per message at ordinary
 * rates). Otherwise the forwarder is woken and takes them. */
static void host_flush(struct endpoint_host *h)
{
    struct gw_endpoint *e = h->gw;
    /* A lease being verified is waited out by the forwarder, not by the
     * thread that reads the source (it keeps reading meanwhile). */
    if (!e->inline_ok ||
        (e->guard && baton_active_guard_leader_state(e->guard) != BATON_LEADER_YES)) {
        queue_wake(e->q);
        if (e->concurrent) dispatch_wake(&e->disp);
        return;
    }
    size_t n = queue_claim(e->q, e->inl_batch, e->queue_batch_max);
    if (n == 0) return; /* the forwarder is busy (it pops them) or nothing waits */
    /* batch after batch while the sink takes them at once: a read of more
     * than queue_batch_max messages is not split between two threads */
    while (n > 0) {
        size_t bytes = 0;
        for (size_t i = 0; i < n; i++) bytes += e->inl_batch[i]->len + 1;
        if (!e->cfg->sink->ops->ready(e->sink, bytes)) {
            queue_release(e->q, e->inl_batch, n); /* the forwarder may wait for room; we may not */
            return;
        }
        deliver(e, &e->inl_fctx, e->inl_batch, e->inl_outcome, n);
        n = queue_claim_more(e->q, e->inl_batch, e->queue_batch_max);
    }
    queue_release(e->q, NULL, 0);
}

static bool host_replay_live(const struct endpoint_host *h)
{
    const struct gw_endpoint *e = h->gw;
    return e->warm && warm_live(e->warm);
}

static void host_source_gap(struct endpoint_host *h)
{
    struct gw_endpoint *e = h->gw;
    if (e->warm) warm_gap(e->warm);
}

static void host_source_lost(struct endpoint_host *h, const char *reason)
{
    struct gw_endpoint *e = h->gw;
    atomic_fetch_add(&e->stats.source_errors, 1);
    if (e->guard) {
        log_warn("gateway", e->cfg->name, "source lost for longer than the lease ttl (%s): giving up the lease",
                 reason);
        baton_active_guard_give_up(e->guard, reason);
    } else {
        log_warn("gateway", e->cfg->name, "source lost: %s", reason);
    }
}

static void host_end_term(struct endpoint_host *h, const char *reason)
{
    struct gw_endpoint *e = h->gw;
    if (e->guard) {
        log_warn("gateway", e->cfg->name, "ending the lease term (%s): giving up the lease", reason);
        baton_active_guard_give_up(e->guard, reason);
    } else {
        log_warn("gateway", e->cfg->name, "cannot end the term (no lease): %s", reason);
    }
}

static void host_set_source(struct endpoint_host *h, const char *where)
{
    struct gw_endpoint *e = h->gw;
    pthread_mutex_lock(&e->source_mu);
    redact_urls(where ? where : "", e->source, sizeof e->source); /* shown in /status */
    pthread_mutex_unlock(&e->source_mu);
}

static bool host_stopping(const struct endpoint_host *h)
{
    const struct gw_endpoint *e = h->gw;
    return atomic_load(&e->gw->stopping);
}

static bool host_draining(const struct endpoint_host *h)
{
    const struct gw_endpoint *e = h->gw;
    return gateway_draining(e->gw);
}

/* The receiver answered that it saw a newer epoch than `epoch` (HTTP 409,
 * from the sink on the forwarder's thread): the term ends here at once.
 * Every term up to it counts as ended for this endpoint's forwarding from
 * now on (forward_ctx.fenced_epoch: nothing more of it goes out, what
 * waits settles as term_ended), and the guard gives the lease up (released
 * if the locker still shows it ours) and competes again after one ttl.
 * Counted once per term. */
static void on_fenced(void *arg, uint64_t epoch, const char *what)
{
    struct gw_endpoint *e = arg;
    if (epoch == 0) {
        log_warn("gateway", e->cfg->name, "the sink (its receiver or store) answered that it saw a newer epoch (%s), "
                 "but this endpoint has no lease term to end (guard \"%s\"): the message is "
                 "settled as term_ended", what, e->guard ? "active" : "none or once");
        return;
    }
    uint64_t cur = atomic_load(&e->fenced_epoch);
    do {
        if (epoch <= cur) return; /* this term was fenced already */
    } while (!atomic_compare_exchange_weak(&e->fenced_epoch, &cur, epoch));
    atomic_fetch_add_explicit(&e->stats.fenced_by_sink, 1, memory_order_relaxed);
    char reason[200];
    snprintf(reason, sizeof reason, "fenced by the sink: epoch %llu is older than one its receiver or store saw",
             (unsigned long long)epoch);
    log_warn("gateway", e->cfg->name, "%s (%s): ending the term now, settling its messages as "
             "term_ended, giving the lease up", reason, what);
    if (e->guard && baton_active_guard_epoch(e->guard) == epoch) baton_active_guard_give_up(e->guard, reason);
}

/* ---- dead letters --------------------------------------------------------- */

/* Why a message the sink did not take goes to the dead-letter sink, or -1
 * when it does not (dropped and counted as today): rejected, retries gave
 * out, or still queued when the drain at exit timed out. Messages a source
 * delivers again (rabbitmq group, mysql_cdc, failover = "replay") are left
 * to it at exit: the next leader gets them, which beats a file. */
static int dead_letter_reason(const struct gw_endpoint *e, const struct message *m, enum msg_outcome o)
{
    if (!e->dl_sink) return -1;
    if (o == MSG_DROPPED_SINK_FAILED)
        return m->failure && m->failure->rejected ? DEAD_LETTER_REJECTED : DEAD_LETTER_RETRIES_EXHAUSTED;
    /* (the drain of a demotion that ran out is not a shutdown: dropped and
     * counted as before) */
    if (o == MSG_DROPPED_SHUTDOWN && !e->host.source_redelivers && atomic_load(&e->gw->stopping))
        return DEAD_LETTER_SHUTDOWN;
    return -1;
}

/* The dead-letter envelope: the message's own, with
 * "dead_letter":{"reason":..,"status":..,"body":..} added at its end. */
static struct message *dead_letter_envelope(const struct message *m, enum dead_letter_reason r)
{
    struct jbuf b;
    jbuf_init(&b, m->len + 96 + (m->failure ? 2 * m->failure->body_len : 0));
    size_t keep = m->len;
    while (keep > 0 && m->json[keep - 1] != '}') keep--;
    if (keep > 1) {
        jbuf_raw(&b, m->json, keep - 1);
        jbuf_rawz(&b, m->json[1] == '}' ? "" : ",");
    } else { /* not an object (never, for an envelope): kept as a string */
        jbuf_rawz(&b, "{\"message\":");
        jbuf_str(&b, m->json, m->len);
        jbuf_char(&b, ',');
    }
    jbuf_rawz(&b, "\"dead_letter\":{\"reason\":");
    jbuf_strz(&b, dead_letter_reason_name(r));
    if (m->failure && m->failure->status > 0) {
        jbuf_rawz(&b, ",\"status\":");
        jbuf_i64(&b, m->failure->status);
    }
    if (m->failure && m->failure->body_len > 0) {
        jbuf_rawz(&b, ",\"body\":");
        jbuf_str(&b, m->failure->body, m->failure->body_len);
    }
    jbuf_rawz(&b, "}}");
    struct message *d = message_new(b.data, b.len);
    jbuf_free(&b);
    d->epoch = m->epoch;
    d->key = m->key;
    d->received_mono_us = m->received_mono_us;
    d->received_wall_ms = m->received_wall_ms;
    memcpy(d->id, m->id, sizeof d->id);
    return d;
}

/* How long the dead-letter sink may take (its sink_call's time_left): the
 * dead-letter record is not a delivery in a term (the receiver did not take
 * it), so it is bounded by a deadline of its own: the larger of the lease
 * ttl and 5 s, and at exit half a second past the drain deadline. */
static int64_t dead_letter_time_left(void *arg, uint64_t epoch)
{
    (void)epoch;
    const int64_t *deadline = arg;
    int64_t left = *deadline - clock_mono_ms();
    return left > 0 ? left : -1;
}

/* Hands msgs[0..n) (reasons why[0..n)) to the dead-letter sink; each one
 * taken is finished as delivered to its source (acked, checkpointed: it is
 * kept in the dead-letter sink) and counted; the others are dropped with
 * their own outcome, counted and logged. */
static void dead_letter(struct gw_endpoint *e, struct message **msgs, const enum msg_outcome *orig,
                        const int *why, size_t n)
{
    struct message **dl = xcalloc(n, sizeof *dl);
    enum msg_outcome *out = xcalloc(n, sizeof *out);
    for (size_t i = 0; i < n; i++) {
        dl[i] = dead_letter_envelope(msgs[i], (enum dead_letter_reason)why[i]);
        out[i] = MSG_DROPPED_SINK_FAILED;
    }
    int64_t now = clock_mono_ms();
    int64_t deadline = now + (e->cfg->lease.ttl_ms > 5000 ? e->cfg->lease.ttl_ms : 5000);
    if (atomic_load(&e->gw->stopping)) {
        int64_t at_exit = atomic_load(&e->gw->stop_deadline_ms);
        at_exit = (at_exit > now ? at_exit : now) + 500;
        if (at_exit < deadline) deadline = at_exit;
    }
    struct sink_call call = {.time_left = dead_letter_time_left, .arg = &deadline};
    const struct sink_config *dc = e->cfg->dead_letter;
    /* one send per run of the same epoch (the sink's contract) */
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && dl[j]->epoch == dl[i]->epoch) j++;
        dc->ops->send(e->dl_sink, dl + i, j - i, out + i, &call);
        i = j;
    }
    for (size_t i = 0; i < n; i++) {
        if (out[i] == MSG_DELIVERED) {
            atomic_fetch_add_explicit(&e->stats.dead_lettered[why[i]], 1, memory_order_relaxed);
            message_finish(msgs[i], MSG_DELIVERED);
        } else {
            long long suppressed = 0;
            if (ratelimit_ok(&e->rl_dead_letter, 5000, &suppressed))
                log_error("gateway", e->cfg->name, "dead-letter sink '%s' did not take message id '%s' "
                          "(%s; reason %s): dropping it (%lld such lines suppressed)", dc->name,
                          msgs[i]->id, msg_outcome_name(out[i]), dead_letter_reason_name((enum dead_letter_reason)why[i]),
                          suppressed);
            drop_message(e, msgs[i], orig[i]);
        }
        message_finish(dl[i], out[i]);
    }
    free(dl);
    free(out);
}

/* ---- forwarder -------------------------------------------------------- */

/* Settles msgs[0..n) with their outcomes: counters, latency, done callbacks;
 * what the sink could not deliver goes to the dead-letter sink, if any. */
static void settle(struct gw_endpoint *e, struct message **msgs, const enum msg_outcome *outcome,
                   size_t n)
{
    int64_t now = clock_mono_us();
    unsigned long long delivered = 0;
    struct stats_batch lat;
    stats_batch_init(&lat);
    struct message **dl = NULL;
    enum msg_outcome *dl_orig = NULL;
    int *dl_why = NULL;
    size_t n_dl = 0;
    for (size_t i = 0; i < n; i++) {
        int why;
        if (outcome[i] == MSG_DELIVERED) {
            delivered++;
            stats_batch_observe(&lat, now - msgs[i]->received_mono_us);
            message_finish(msgs[i], MSG_DELIVERED);
        } else if ((why = dead_letter_reason(e, msgs[i], outcome[i])) >= 0) {
            if (!dl) {
                dl = xcalloc(n, sizeof *dl);
                dl_orig = xcalloc(n, sizeof *dl_orig);
                dl_why = xcalloc(n, sizeof *dl_why);
            }
            dl[n_dl] = msgs[i];
            dl_orig[n_dl] = outcome[i];
            dl_why[n_dl++] = why;
        } else {
            drop_message(e, msgs[i], outcome[i]);
        }
    }
    if (n_dl) dead_letter(e, dl, dl_orig, dl_why, n_dl);
    free(dl);
    free(dl_orig);
    free(dl_why);
    if (delivered) {
        atomic_fetch_add_explicit(&e->stats.forwarded, delivered, memory_order_relaxed);
        stats_batch_publish(&e->stats, &lat);
    }
    /* pending drops after every message was finished (drain_wait only needs
     * it to reach zero after) */
    atomic_fetch_sub(&e->pending, (long long)n);
}

/* What the sink made of msgs[0..n) (in receive order), told to everyone
 * who counts: the error counter, the replay ring, the settle above. Both
 * forwarders end here: deliver below, and concurrent delivery
 * (src/dispatch.c) with each finished prefix. */
static void settle_sent(void *arg, struct message **msgs, const enum msg_outcome *outcome,
                        size_t n, unsigned long long errors)
{
    struct gw_endpoint *e = arg;
    if (errors) atomic_fetch_add_explicit(&e->stats.sink_errors, errors, memory_order_relaxed);
    if (n == 0) return; /* failed attempts only (a request still retrying) */
    if (e->warm) warm_settled(e->warm, msgs, outcome, n); /* before they are freed */
    settle(e, msgs, outcome, n);
}

/* Forwards a popped (or claimed) batch and settles it. */
static void deliver(struct gw_endpoint *e, const struct forward_ctx *ctx, struct message **batch,
                    enum msg_outcome *outcome, size_t n)
{
    unsigned long long errors = forward_batch(ctx, batch, outcome, n);
    settle_sent(e, batch, outcome, n, errors);
}

/* The queue's depth for the metrics, after every pop. */
static void publish_queue_depth(void *arg)
{
    struct gw_endpoint *e = arg;
    atomic_store_explicit(&e->stats.queue_depth, (long long)queue_depth(e->q), memory_order_relaxed);
}

static void *forwarder_main(void *arg)
{
    struct gw_endpoint *e = arg;
    if (e->concurrent) {
        dispatch_run(&e->disp);
        return NULL;
    }
    size_t max = e->queue_batch_max;
    struct message **batch = xcalloc(max, sizeof *batch);
    enum msg_outcome *outcome = xcalloc(max, sizeof *outcome);
    size_t last_n = 0;
    const long linger_ns = 100000; /* 100 us */

    for (;;) {
        /* Coalescing: after a partial batch, pause linger_ns before the
         * next pop so a stream is taken in batches rather than one message
         * per wake-up (each wake-up costs the producer a futex syscall and
         * the sink a write). Only messages arriving within that pause wait
         * for it; an idle queue is still waited on with the condvar. */
        if (last_n > 0 && last_n < max && queue_depth(e->q) < max) {
            struct timespec ts = {0, linger_ns};
            nanosleep(&ts, NULL);
        }
        /* no timeout: a push or close() wakes it (an idle endpoint costs no wake-ups) */
        size_t n = queue_pop_batch(e->q, batch, max, -1);
        last_n = n;
        /* A producer waiting for the outcome (MQTT QoS 1/2 after_sink) must
         * not pay the coalescing pause on every message. */
        for (size_t i = 0; i < n; i++)
            if (batch[i]->sender_waits) last_n = 0;
        publish_queue_depth(e);
        if (n == 0) {
            if (queue_closed(e->q)) break;
            continue;
        }
        deliver(e, &e->fctx, batch, outcome, n);
    }
    free(batch);
    free(outcome);
    return NULL;
}

/* Waits until everything queued so far was finished (delivered or dropped),
 * at most timeout_ms. Returns true when drained. */
static bool drain_wait(struct gw_endpoint *e, int64_t timeout_ms)
{
    int64_t deadline = clock_mono_ms() + timeout_ms;
    while (atomic_load(&e->pending) > 0) {
        if (clock_mono_ms() >= deadline) return false;
        sleep_ms_cancellable(1, NULL);
    }
    return true;
}

/* ---- guard callbacks ---------------------------------------------------- */

/* failover = "replay", at promotion: what the ring holds after the previous
 * leader's mark is enqueued, in ring order, before anything live (the
 * endpoint's live emits wait in warm_emit until warm_promote_done). */
static int promote_replay(struct gw_endpoint *e, uint64_t epoch, size_t *n_replayed)
{
    struct message **replay = NULL;
    size_t n = 0;
    if (warm_promote(e->warm, epoch, &replay, &n) != 0) return -1;
    for (size_t i = 0; i < n; i++) enqueue_replay_path(e, replay[i], false);
    free(replay);
    warm_promote_done(e->warm);
    *n_replayed = n;
    return 0;
}

static int on_promoted(void *arg, uint64_t epoch)
{
    struct gw_endpoint *e = arg;
    pthread_mutex_lock(&e->lifecycle);
    atomic_store(&e->ep_stopping, false);
    if (!atomic_load(&e->gw->stopping)) atomic_store(&e->fwd_cancel, false);
    /* replay: the endpoint runs already; replay the ring, then go live */
    size_t replayed = 0;
    int rc = e->warm ? promote_replay(e, epoch, &replayed) : e->cfg->ops->start(e->ep);
    pthread_mutex_unlock(&e->lifecycle);
    if (rc != 0) {
        log_error("gateway", e->cfg->name, "endpoint failed to start as leader (epoch %llu)",
                  (unsigned long long)epoch);
        return rc;
    }
    if (!atomic_exchange(&e->leading, true)) atomic_fetch_add(&e->gw->leaders, 1);
    if (e->warm)
        /* the source was started at start-up on every replica and may still
         * be connecting (it says when it is subscribed): not "consuming" */
        log_info("gateway", e->cfg->name, "leading (epoch %llu): %zu message%s replayed from the ring; "
                 "what the source receives is forwarded from now on", (unsigned long long)epoch, replayed,
                 replayed == 1 ? "" : "s");
    else /* start returned: the source is connected (subscribed) */
        log_info("gateway", e->cfg->name, "consuming as leader (epoch %llu)", (unsigned long long)epoch);
    return 0;
}

/* How long a demotion may drain: at shutdown, until the drain deadline; at
 * an operator's step-down, shutdown.drain_timeout_ms (the same path as
 * SIGTERM: the lease keeps being renewed meanwhile); otherwise (give-up, a
 * failed start, a lost term) one lease ttl. */
static int64_t demotion_drain_bound(struct gw_endpoint *e)
{
    if (atomic_exchange(&e->stepping_down, false) && !atomic_load(&e->gw->stopping))
        return e->gw->cfg->drain_timeout_ms;
    if (atomic_load(&e->gw->stopping)) {
        int64_t left = atomic_load(&e->gw->stop_deadline_ms) - clock_mono_ms();
        return left > 0 ? left : 0;
    }
    return e->cfg->lease.ttl_ms;
}

/* Runs on the guard's callback thread; the lease keeps being renewed
 * meanwhile (graceful), so what was received drains under it. */
static void on_demoted(void *arg)
{
    struct gw_endpoint *e = arg;
    int64_t t0 = clock_mono_ms();
    int64_t bound = demotion_drain_bound(e);
    atomic_store(&e->drain_deadline_ms, t0 + bound);
    if (e->warm) warm_demote(e->warm); /* keeps buffering, stops enqueueing */
    atomic_store(&e->ep_stopping, true);
    if (!e->warm) {
        pthread_mutex_lock(&e->lifecycle);
        e->cfg->ops->stop(e->ep);
        pthread_mutex_unlock(&e->lifecycle);
    }
    int64_t left = t0 + bound - clock_mono_ms();
    if (!drain_wait(e, left > 0 ? left : 0)) {
        long long pending = atomic_load(&e->pending);
        /* out of time: the sink aborts, the forwarder settles the rest */
        atomic_store(&e->fwd_cancel, true);
        drain_wait(e, 1000);
        if (!atomic_load(&e->gw->stopping)) /* at shutdown gateway_stop reports it */
            log_warn("gateway", e->cfg->name,
                     "queue not drained within %lld ms at demotion: settled %lld undelivered "
                     "messages (counted by reason; rabbitmq group requeues them, CDC replays "
                     "them from its checkpoint)",
                     (long long)bound, pending);
    }
    /* the successor starts after what was settled here (the lease is still
     * ours on a graceful end; a superseded epoch is refused) */
    if (e->warm) warm_flush_mark(e->warm);
    if (atomic_exchange(&e->leading, false)) atomic_fetch_sub(&e->gw->leaders, 1);
    log_info("gateway", e->cfg->name, "stopped %s (%lld ms)", e->warm ? "forwarding, buffering as standby" : "consuming",
             (long long)(clock_mono_ms() - t0));
}

/* Leader balancing. A replica leading k endpoints waits k x step before
 * each attempt, so replicas leading fewer win the races for free leases.
 * step = min(lease.balance_step_ms, BALANCE_WINDOW_MS / guarded endpoints):
 * the delay never exceeds the window however many endpoints a replica has
 * (1,000 endpoints: 1 ms per lease held), so every endpoint is led again
 * within ttl + retry + the window after its leader dies. */
#define BALANCE_WINDOW_MS 1000

static int64_t balance_delay(const struct gw_endpoint *e, int k)
{
    int64_t step = e->cfg->lease.balance_step_ms;
    int n = e->gw->n_guarded > 0 ? e->gw->n_guarded : 1;
    int64_t by_window = (int64_t)k * BALANCE_WINDOW_MS / n;
    int64_t by_step = (int64_t)k * step;
    return by_step < by_window ? by_step : by_window;
}

static int64_t standby_delay(void *arg)
{
    struct gw_endpoint *e = arg;
    /* The first attempt is paced by gateway_start instead. */
    if (atomic_load(&baton_active_guard_stats(e->guard)->attempts) == 0) return 0;
    /* a replica of higher priority waits for this lease (src/prefer.c) */
    int64_t yield = atomic_load(&e->prefer_yield) ? e->cfg->lease.ttl_ms : 0;
    return balance_delay(e, atomic_load(&e->gw->leaders)) + yield;
}

/* ---- unguarded endpoints ------------------------------------------------ */

static void *starter_main(void *arg)
{
    struct gw_endpoint *e = arg;
    for (unsigned attempt = 0; !atomic_load(&e->gw->stopping); attempt++) {
        pthread_mutex_lock(&e->lifecycle);
        int rc = atomic_load(&e->gw->stopping) ? 0 : e->cfg->ops->start(e->ep);
        if (rc == 0 && !atomic_load(&e->gw->stopping)) atomic_store(&e->running, true);
        pthread_mutex_unlock(&e->lifecycle);
        if (rc == 0) return NULL;
        int64_t wait = backoff_ms(attempt, 250, 10000);
        log_warn("gateway", e->cfg->name, "endpoint failed to start; retrying in %lld ms", (long long)wait);
        sleep_ms_cancellable(wait, &e->gw->stopping);
    }
    return NULL;
}

/* ---- lifecycle ---------------------------------------------------------- */

static int endpoint_setup(struct gateway *gw, struct gw_endpoint *e, const struct endpoint_config *c,
                          char *err, size_t errlen)
{
    e->gw = gw;
    e->cfg = c;
    pthread_mutex_init(&e->lifecycle, NULL);
    pthread_mutex_init(&e->source_mu, NULL);
    if (baton_scope(e->scope, sizeof e->scope, c->type, gw->cfg->owner, c->name) < 0) {
        snprintf(err, errlen, "endpoint '%s': guard scope too long", c->name);
        return -1;
    }
    e->q = queue_create((size_t)c->queue_size, c->queue_policy);
    e->queue_batch_max = (size_t)(c->queue_batch_max > 0 ? c->queue_batch_max : 256);
    /* quiet pushes wake the forwarder once a batch is full */
    queue_set_quiet_limit(e->q, e->queue_batch_max);

    char serr[256] = "";
    e->sink = c->sink->ops->create(c->sink->name, c->name, c->sink->settings, serr, sizeof serr);
    if (!e->sink) {
        snprintf(err, errlen, "endpoint '%s': sink '%s': %s", c->name, c->sink->name, serr);
        return -1;
    }

    if (c->guard == GUARD_ACTIVE) {
        struct baton_active_guard_options o = {
            .prefix = gw->cfg->key_prefix,
            .ttl_ms = c->lease.ttl_ms,
            .renew_ms = c->lease.renew_ms,
            .retry_ms = c->lease.retry_ms,
            .standby_delay_ms = standby_delay,
            .standby_delay_arg = e,
            .log_name = c->name,
            .command_timeout_ms = config_locker_command_timeout(gw->cfg),
            .hash_tag = gw->cfg->locker_hash_tag,
        };
        struct baton_active_guard_callbacks cb = {.on_promoted = on_promoted, .on_demoted = on_demoted, .arg = e};
        char gerr[256] = "";
        e->guard = baton_active_guard_create(gw->locker, e->scope, &o, &cb, gerr, sizeof gerr);
        if (!e->guard) {
            snprintf(err, errlen, "endpoint '%s': %s", c->name, gerr);
            return -1;
        }
        e->lease_key = xstrdup(baton_active_guard_key(e->guard));
        gw->n_guarded++;
        if (c->failover == FAILOVER_REPLAY && gw->locker)
            e->warm = warm_create(c->name, &c->replay, gw->locker, e->lease_key);
    }
    if (c->dead_letter) {
        e->dl_sink = c->dead_letter->ops->create(c->dead_letter->name, c->name,
                                                 c->dead_letter->settings, serr, sizeof serr);
        if (!e->dl_sink) {
            snprintf(err, errlen, "endpoint '%s': dead-letter sink '%s': %s", c->name,
                     c->dead_letter->name, serr);
            return -1;
        }
    }
    /* The forwarder asks the guard itself (src/forward.c). */
    e->fctx = (struct forward_ctx){
        .sink_ops = c->sink->ops,
        .sink = e->sink,
        .guard = e->guard,
        .cancel = &e->fwd_cancel,
        .fenced_epoch = &e->fenced_epoch,
        .on_fenced = on_fenced,
        .fenced_arg = e,
    };
    /* Inline delivery's view of the term: the lease's (always live when
     * unguarded), but over once the endpoint is being stopped and its drain
     * deadline passed. The forwarder gets fwd_cancel for that from
     * on_demoted after stop() returns; stop() joins the very thread that
     * delivers inline, so that thread must give up by itself (a shared pipe
     * filled by another endpoint between ready() and the write would
     * otherwise hold the stop as long as the reader stalls). */
    e->concurrent = c->sink->ops->async != NULL && c->ordering != ORDERING_STRICT;
    if (e->concurrent) {
        e->disp.q = e->q;
        e->disp.fctx = &e->fctx;
        e->disp.queue_batch_max = e->queue_batch_max;
        e->disp.by_key = c->ordering == ORDERING_KEY;
        e->disp.settle = settle_sent;
        e->disp.popped = publish_queue_depth;
        e->disp.arg = e;
    }
    e->inl_fctx = e->fctx;
    e->inl_fctx.stopping = &e->ep_stopping;
    e->inl_fctx.drain_deadline_ms = &e->drain_deadline_ms;
    /* replay too: what warm_emit hands back of a deferred emit is enqueued
     * quietly, and deliver() tells warm what was settled on either path */
    e->inline_ok = c->sink->ops->ready != NULL;
    if (e->inline_ok) {
        e->inl_batch = xcalloc(e->queue_batch_max, sizeof *e->inl_batch);
        e->inl_outcome = xcalloc(e->queue_batch_max, sizeof *e->inl_outcome);
    }

    struct endpoint_host *h = &e->host;
    h->name = c->name;
    h->type = c->type;
    h->owner = gw->cfg->owner;
    h->key_prefix = gw->cfg->key_prefix ? gw->cfg->key_prefix : BATON_DEFAULT_PREFIX;
    h->scope = e->scope;
    h->guard = c->guard;
    h->locker = gw->locker;
    h->locker_redis = gw->cfg->has_locker && gw->cfg->locker_backend == LOCKER_BACKEND_REDIS
                          ? &gw->cfg->locker_redis : NULL;
    h->lease_key = e->lease_key;
    h->lease_ttl_ms = c->lease.ttl_ms;
    h->stats = &e->stats;
    h->gw = e;
    h->emit = host_emit;
    h->emit_deferred = host_emit_deferred;
    h->flush = host_flush;
    h->leader_now = host_leader_now;
    h->epoch = host_epoch;
    h->source_lost = host_source_lost;
    h->end_term = host_end_term;
    h->stopping = host_stopping;
    h->draining = host_draining;
    h->once_ttl_ms = c->once_ttl_ms;
    h->once_fail_open = c->once_fail_open;
    h->replay = e->warm != NULL;
    h->source_gap = host_source_gap;
    h->replay_live = host_replay_live;
    h->set_source = host_set_source;
    /* replay: what a term left unsettled is after its last mark, so the
     * successor replays it from its ring */
    if (e->warm) h->source_redelivers = true;

    char eerr[512] = "";
    e->ep = c->ops->create(c->settings, h, eerr, sizeof eerr);
    if (!e->ep) {
        snprintf(err, errlen, "endpoint '%s' (%s): %s", c->name, c->type, eerr[0] ? eerr : "cannot create");
        return -1;
    }
    if (e->warm && c->ops->replay_render) warm_set_render(e->warm, c->ops->replay_render, e->ep);
    return 0;
}

static void endpoint_teardown(struct gw_endpoint *e)
{
    /* the guard first (its callbacks use the endpoint), then the queue (a
     * leftover message's done callback reaches into the endpoint), then the
     * endpoint */
    if (e->guard) baton_active_guard_destroy(e->guard);
    if (e->q) queue_destroy(e->q);
    free(e->inl_batch);
    free(e->inl_outcome);
    if (e->ep) e->cfg->ops->destroy(e->ep);
    warm_destroy(e->warm); /* after the endpoint: it emits into the ring */
    if (e->sink) e->cfg->sink->ops->destroy(e->sink);
    if (e->dl_sink) e->cfg->dead_letter->ops->destroy(e->dl_sink);
    free(e->lease_key);
    pthread_mutex_destroy(&e->lifecycle);
    pthread_mutex_destroy(&e->source_mu);
}

struct gateway *gateway_create(const struct baton_config *cfg, char *err, size_t errlen)
{
    struct gateway *gw = xcalloc(1, sizeof *gw);
    gw->cfg = cfg;
    gw->started_wall_ms = clock_wall_ms();
    if (cfg->has_locker) {
        gw->locker = config_locker_create(cfg, err, errlen);
        if (!gw->locker) {
            free(gw);
            return NULL;
        }
    }
    size_t n = 0;
    for (size_t i = 0; i < cfg->n_endpoints; i++)
        if (cfg->endpoints[i].enabled) n++;
    gw->eps = xcalloc(n ? n : 1, sizeof *gw->eps);
    pthread_mutex_init(&gw->obs.mu, NULL);
    pthread_mutex_init(&gw->obs_wait_mu, NULL);
    cond_init_clock(&gw->obs_wait_cv, CLOCK_MONOTONIC);
    gw->obs.holder = xcalloc(n ? n : 1, sizeof *gw->obs.holder);
    gw->obs.holder_known = xcalloc(n ? n : 1, sizeof *gw->obs.holder_known);
    for (size_t i = 0; i < cfg->n_endpoints; i++) {
        if (!cfg->endpoints[i].enabled) {
            log_info("gateway", cfg->endpoints[i].name, "disabled in %s", cfg->endpoints[i].file);
            continue;
        }
        struct gw_endpoint *e = &gw->eps[gw->n_eps++];
        if (endpoint_setup(gw, e, &cfg->endpoints[i], err, errlen) != 0) {
            gateway_destroy(gw);
            return NULL;
        }
    }
    /* endpoint files, all disabled (no files at all: main says so) */
    if (n == 0 && cfg->n_endpoints > 0)
        log_warn("gateway", NULL, "no endpoint is enabled (%zu endpoint file%s in %s, each with enabled = "
                 "false): baton will do nothing; set enabled = true in one (/readyz answers 503 meanwhile)",
                 cfg->n_endpoints, cfg->n_endpoints == 1 ? "" : "s", cfg->endpoints_dir);
    return gw;
}

/* Publishes the replay marks of the endpoints this replica leads (each at
 * most every mark_interval_ms) and trims idle rings once a second. */
static void *marker_main(void *arg)
{
    struct gateway *gw = arg;
    int64_t next_trim = clock_mono_ms() + 1000;
    while (!atomic_load(&gw->mark_stop)) {
        int64_t now = clock_mono_ms(), wake = now + 1000;
        for (size_t i = 0; i < gw->n_eps; i++) {
            if (!gw->eps[i].warm) continue;
            int64_t t = warm_mark_tick(gw->eps[i].warm, now);
            if (t < wake) wake = t;
            if (now >= next_trim) warm_trim(gw->eps[i].warm);
        }
        if (now >= next_trim) next_trim = now + 1000;
        int64_t d = wake - clock_mono_ms();
        sleep_ms_cancellable(d > 1 ? d : 1, &gw->mark_stop);
    }
    return NULL;
}

int gateway_start(struct gateway *gw)
{
    if (pthread_create(&gw->obs_thread, NULL, status_pages_observer_main, gw) != 0) return -1;
    thread_name(gw->obs_thread, "baton", "status");
    gw->obs_started = true;
    for (size_t i = 0; i < gw->n_eps && !gw->mark_started; i++) {
        if (!gw->eps[i].warm) continue;
        if (pthread_create(&gw->mark_thread, NULL, marker_main, gw) != 0) return -1;
        thread_name(gw->mark_thread, "baton", "marker");
        gw->mark_started = true;
    }
    for (size_t i = 0; i < gw->n_eps; i++) {
        struct gw_endpoint *e = &gw->eps[i];
        if (pthread_create(&e->fwd_thread, NULL, forwarder_main, e) != 0) return -1;
        thread_name(e->fwd_thread, "fwd", e->cfg->name);
        e->fwd_started = true;
    }
    for (size_t i = 0; i < gw->n_eps; i++) {
        struct gw_endpoint *e = &gw->eps[i];
        log_info("gateway", e->cfg->name, "type %s, guard %s, sink %s%s%s", e->cfg->type,
                 guard_kind_name(e->cfg->guard), e->cfg->sink->name,
                 e->guard ? (gw->locker ? ", competing for the lease" : ", single-process mode") : "",
                 e->warm ? ", failover replay (the source runs on every replica; a standby buffers)" : "");
        if (e->warm) {
            /* subscribed before competing: the ring fills from the start */
            if (pthread_create(&e->starter_thread, NULL, starter_main, e) != 0) return -1;
            thread_name(e->starter_thread, "start", e->cfg->name);
            e->starter_started = true;
        }
        if (e->guard) {
            if (baton_active_guard_start(e->guard) != 0) return -1;
            /* Leader balancing at start: guards make their first attempts
             * one after another, and after each lease this replica wins it
             * waits one step (balance_delay(1)) before the next attempt;
             * an attempt that finds the lease held costs no wait. Replicas
             * started together take turns (3 replicas, 6 endpoints: 2/2/2);
             * a lone replica leads all its endpoints within the balancing
             * window (1 s), however many there are: linear, not k x step
             * for the k-th lease. */
            const struct baton_active_guard_stats *gs = baton_active_guard_stats(e->guard);
            int64_t bound = clock_mono_ms() + e->cfg->lease.retry_ms + 1000;
            while (gw->locker && atomic_load(&gs->attempts) == 0 && clock_mono_ms() < bound &&
                   !atomic_load(&gw->stopping))
                sleep_ms_cancellable(1, NULL);
            if (gw->locker && atomic_load(&gs->role) == BATON_ROLE_LEADER) {
                int64_t pace = balance_delay(e, 1);
                if (pace > 0) sleep_ms_cancellable(pace, NULL);
            }
        } else {
            if (pthread_create(&e->starter_thread, NULL, starter_main, e) != 0) return -1;
            e->starter_started = true;
        }
    }
    return 0;
}

/* ---- operator control ---------------------------------------------------- */

static struct gw_endpoint *endpoint_named(struct gateway *gw, const char *name)
{
    for (size_t i = 0; i < gw->n_eps; i++)
        if (strcmp(gw->eps[i].cfg->name, name) == 0) return &gw->eps[i];
    return NULL;
}

static void step_down_one(struct gw_endpoint *e, const char *reason, int64_t hold_ms)
{
    /* a standby holds without a demotion: the flag is cleared at the next
     * promotion's demotion at the latest, where it only lengthens a drain */
    if (atomic_load(&e->leading)) atomic_store(&e->stepping_down, true);
    baton_active_guard_step_down(e->guard, reason, hold_ms);
}

int gateway_step_down(struct gateway *gw, const char *name, int64_t hold_ms, char *msg, size_t len)
{
    struct gw_endpoint *e = endpoint_named(gw, name);
    if (!e) {
        snprintf(msg, len, "no enabled endpoint named \"%s\"", name);
        return -1;
    }
    if (!e->guard) {
        snprintf(msg, len, "endpoint \"%s\" has no lease (guard %s): nothing to step down from", name,
                 guard_kind_name(e->cfg->guard));
        return -2;
    }
    if (!gw->locker) {
        snprintf(msg, len, "no locker (single-process mode): no other replica would take \"%s\" over", name);
        return -2;
    }
    if (hold_ms <= 0) hold_ms = 2 * e->cfg->lease.ttl_ms;
    bool leading = atomic_load(&e->leading);
    step_down_one(e, "stepping down on request", hold_ms);
    snprintf(msg, len, "%s: %s; not competing for %lld ms", name,
             leading ? "stepping down (draining under the lease, then releasing)" : "not leading, holding back",
             (long long)hold_ms);
    return 0;
}

void gateway_drain(struct gateway *gw)
{
    atomic_store(&gw->draining, true);
    for (size_t i = 0; i < gw->n_eps; i++)
        if (gw->eps[i].guard) step_down_one(&gw->eps[i], "draining on request", -1);
}

void gateway_resume(struct gateway *gw)
{
    atomic_store(&gw->draining, false);
    for (size_t i = 0; i < gw->n_eps; i++)
        if (gw->eps[i].guard) baton_active_guard_resume(gw->eps[i].guard);
}

bool gateway_draining(const struct gateway *gw)
{
    return atomic_load(&((struct gateway *)gw)->draining);
}

/* Settled-without-delivery counters, for the shutdown log line. */
static unsigned long long undelivered(const struct gw_endpoint *e)
{
    return atomic_load(&e->stats.dropped_shutdown) + atomic_load(&e->stats.dropped_term_ended) +
           atomic_load(&e->stats.dropped_not_leader) + atomic_load(&e->stats.returned_term_ended);
}

static bool all_drained(struct gateway *gw)
{
    for (size_t i = 0; i < gw->n_eps; i++)
        if (atomic_load(&gw->eps[i].pending) > 0) return false;
    return true;
}

/* Graceful stop, bounded by shutdown.drain_timeout_ms (+ about 1 s): every
 * endpoint stops at once (the guards hand over in parallel, each draining
 * under its still-renewed lease); at the drain deadline the sinks abort and
 * what is left is settled and counted. A stalled sink cannot hold it. */
void gateway_stop(struct gateway *gw)
{
    int64_t t0 = clock_mono_ms();
    atomic_store(&gw->stop_deadline_ms, t0 + gw->cfg->drain_timeout_ms);
    atomic_store(&gw->stopping, true);
    unsigned long long *before = xcalloc(gw->n_eps ? gw->n_eps : 1, sizeof *before);
    for (size_t i = 0; i < gw->n_eps; i++) before[i] = undelivered(&gw->eps[i]);
    /* 1. Stop consuming everywhere at once. */
    for (size_t i = 0; i < gw->n_eps; i++) {
        struct gw_endpoint *e = &gw->eps[i];
        atomic_store(&e->drain_deadline_ms, t0 + gw->cfg->drain_timeout_ms);
        if (e->guard) baton_active_guard_request_stop(e->guard);
    }
    for (size_t i = 0; i < gw->n_eps; i++) {
        struct gw_endpoint *e = &gw->eps[i];
        if (e->guard && !e->warm) continue; /* the guard's demotion stops it */
        if (e->starter_started) {
            pthread_join(e->starter_thread, NULL);
            e->starter_started = false;
        }
        atomic_store(&e->ep_stopping, true);
        pthread_mutex_lock(&e->lifecycle);
        if (atomic_exchange(&e->running, false)) e->cfg->ops->stop(e->ep);
        pthread_mutex_unlock(&e->lifecycle);
    }
    /* 2. Drain until the deadline; then every sink aborts. The guards'
     * demotions (on their own threads) wait for the same deadline. */
    while (clock_mono_ms() < t0 + gw->cfg->drain_timeout_ms) {
        bool guards_done = true;
        for (size_t i = 0; i < gw->n_eps; i++)
            if (gw->eps[i].guard && atomic_load(&gw->eps[i].leading)) guards_done = false;
        if (guards_done && all_drained(gw)) break;
        sleep_ms_cancellable(5, NULL);
    }
    for (size_t i = 0; i < gw->n_eps; i++) atomic_store(&gw->eps[i].fwd_cancel, true);
    /* 3. Join the guards (releases and announcements), then the forwarders. */
    for (size_t i = 0; i < gw->n_eps; i++)
        if (gw->eps[i].guard) baton_active_guard_stop(gw->eps[i].guard);
    atomic_store(&gw->mark_stop, true); /* final marks were written at demotion */
    if (gw->mark_started) {
        pthread_join(gw->mark_thread, NULL);
        gw->mark_started = false;
    }
    for (size_t i = 0; i < gw->n_eps; i++) queue_close(gw->eps[i].q);
    for (size_t i = 0; i < gw->n_eps; i++) {
        struct gw_endpoint *e = &gw->eps[i];
        if (e->fwd_started) {
            pthread_join(e->fwd_thread, NULL);
            e->fwd_started = false;
        }
        unsigned long long n = undelivered(e) - before[i];
        if (n)
            log_warn("gateway", e->cfg->name,
                     "shutdown: settled %llu messages without delivering them (drain timeout %lld "
                     "ms; counted by reason in baton_messages_dropped_total, or in "
                     "baton_messages_returned_total where the source delivers them again)",
                     n, (long long)gw->cfg->drain_timeout_ms);
    }
    free(before);
    status_pages_obs_stop_now(gw);
    if (gw->obs_started) {
        pthread_join(gw->obs_thread, NULL);
        gw->obs_started = false;
    }
    log_info("gateway", NULL, "stopped in %lld ms", (long long)(clock_mono_ms() - t0));
}

void gateway_destroy(struct gateway *gw)
{
    if (!gw) return;
    status_pages_obs_stop_now(gw);
    if (gw->obs_started) pthread_join(gw->obs_thread, NULL);
    atomic_store(&gw->mark_stop, true);
    if (gw->mark_started) pthread_join(gw->mark_thread, NULL);
    for (size_t i = 0; i < gw->n_eps; i++) endpoint_teardown(&gw->eps[i]);
    free(gw->eps);
    free(gw->obs.holder);
    free(gw->obs.holder_known);
    pthread_mutex_destroy(&gw->obs.mu);
    pthread_cond_destroy(&gw->obs_wait_cv);
    pthread_mutex_destroy(&gw->obs_wait_mu);
    if (gw->locker) baton_locker_destroy(gw->locker);
    free(gw);
}
