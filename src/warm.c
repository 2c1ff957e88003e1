/* Warm standby replay for one endpoint: see warm.h. */
#include "src/warm.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "baton/locker.h"
#include "common/envelope.h"
#include "common/log.h"
#include "common/util.h"
#include "src/replay.h"

#define COMPONENT "replay"

const char *const warm_unaligned_names[4] = {"no_mark", "ring_short", "not_found", "gap"};

struct warm {
    char *name;
    char *lease_key;
    struct baton_locker *locker;
    struct replay_config rc;
    int64_t mark_ttl_ms;

    pthread_mutex_t mu; /* the ring and the standby -> live switch */
    /* A promotion's replayed messages are being enqueued by the gateway
     * (warm_promote .. warm_promote_done): live emits wait on handoff_cv. */
    bool handoff;
    pthread_cond_t handoff_cv;
    struct replay_ring *ring;
    warm_render_fn render; /* raw records -> envelopes (NULL: none emitted) */
    void *render_ep;
    struct envelope scratch; /* render's buffer, under mu */
    atomic_ullong live; /* epoch enqueued in, 0 = standby */

    pthread_mutex_t write_mu; /* one mark write at a time: a flush waits for
                                 one in flight, so the release follows it */
    pthread_mutex_t mk_mu; /* the pending mark */
    struct replay_mark mark;
    bool dirty;
    int64_t dirty_since_ms;  /* mono ms of the oldest settle not yet written */
    int64_t last_write_ms;   /* mono ms of the last write attempt */
    int64_t last_ok_ms;      /* mono ms of the last successful write */
    atomic_llong lag_since_ms; /* dirty_since_ms, readable without the lock (0 = clean) */

    struct warm_stats stats;
    struct ratelimit rl_mark, rl_cover;
    unsigned long long overflow_seen; /* evicted_overflow at the last trim */
};

struct warm *warm_create(const char *name, const struct replay_config *rc, struct baton_locker *l,
                         const char *lease_key)
{
    struct warm *w = xcalloc(1, sizeof *w);
    w->name = xstrdup(name);
    w->lease_key = xstrdup(lease_key);
    w->locker = l;
    w->rc = *rc;
    /* The mark outlives quiet spells: a leader rewrites it every half ttl
     * while it leads, and a successor finds it after a crash. */
    w->mark_ttl_ms = rc->window_ms * 10 > 60000 ? rc->window_ms * 10 : 60000;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->handoff_cv, NULL);
    pthread_mutex_init(&w->mk_mu, NULL);
    pthread_mutex_init(&w->write_mu, NULL);
    w->ring = replay_ring_new(rc->window_ms, (size_t)rc->max_bytes);
    envelope_init(&w->scratch);
    atomic_init(&w->live, 0);
    return w;
}

void warm_destroy(struct warm *w)
{
    if (!w) return;
    replay_ring_free(w->ring);
    envelope_free(&w->scratch);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->handoff_cv);
    pthread_mutex_destroy(&w->mk_mu);
    pthread_mutex_destroy(&w->write_mu);
    free(w->name);
    free(w->lease_key);
    free(w);
}

void warm_set_render(struct warm *w, warm_render_fn render, void *ep)
{
    w->render = render;
    w->render_ep = ep;
}

/* The envelope of a ring entry in term epoch (mu held): raw records are
 * rendered, envelopes restamped. It keeps the entry's ordering key (issue
 * 36: a replayed message is ordered with the live ones of its key, as it
 * would have been on the leader that received it). NULL when it cannot be
 * (logged). */
static struct message *reissue(struct warm *w, const struct message *m, uint64_t epoch,
                               bool replayed)
{
    struct message *r = NULL;
    if (m->raw)
        r = w->render ? w->render(w->render_ep, &w->scratch, m, epoch, replayed) : NULL;
    else
        r = envelope_restamp(m, epoch, replayed);
    if (r) r->key = m->key; /* whatever the render did: the key it was received with */
    if (!r)
        log_error(COMPONENT, w->name, "internal: a buffered message could not be re-issued (%s)",
                  m->raw ? "raw record" : "envelope");
    return r;
}

const struct warm_stats *warm_stats(const struct warm *w)
{
    return &w->stats;
}

bool warm_live(const struct warm *w)
{
    return atomic_load(&w->live) != 0;
}

/* Ring gauges for the metrics, so the listener never takes the ring lock
 * (a producer may hold it while waiting for room in a full queue). */
static void publish_ring(struct warm *w)
{
    struct replay_ring_stats s;
    replay_ring_stats(w->ring, &s);
    atomic_store_explicit(&w->stats.ring_count, s.count, memory_order_relaxed);
    atomic_store_explicit(&w->stats.ring_bytes, s.bytes, memory_order_relaxed);
    atomic_store_explicit(&w->stats.ring_oldest_wall_ms, s.oldest_wall_ms, memory_order_relaxed);
    atomic_store_explicit(&w->stats.evicted_window, s.evicted_window, memory_order_relaxed);
    atomic_store_explicit(&w->stats.evicted_overflow, s.evicted_overflow, memory_order_relaxed);
}

int warm_emit(struct warm *w, struct message *m, struct message **enqueue)
{
    /* the ring's time of a message is when it was received (the endpoint
     * read the clock then, once per read for a burst) */
    int64_t wall = m->received_wall_ms > 0 ? m->received_wall_ms : clock_wall_ms();
    *enqueue = NULL;
    pthread_mutex_lock(&w->mu);
    /* a promotion's replayed messages are being enqueued: a live message
     * waits for them (standby emits never meet a hand-off: it starts live) */
    while (w->handoff) pthread_cond_wait(&w->handoff_cv, &w->mu);
    uint64_t live = atomic_load(&w->live);
    if (live && m->raw) {
        /* emitted as standby just before the promotion: render it now */
        struct message *r = reissue(w, m, live, false);
        message_unref(m);
        if (!r) {
            pthread_mutex_unlock(&w->mu);
            return -1;
        }
        m = r;
    }
    if (live) {
        /* the ring shares the message with the forwarding path: no copy */
        replay_ring_push(w->ring, message_ref(m), wall);
        if (m->epoch != live) {
            /* built just before the promotion: it belongs to this term */
            struct message *r = envelope_restamp(m, live, false);
            if (r) { /* restamp kept fp, key, id and the receive times */
                r->done = m->done;
                r->done_arg = m->done_arg;
                r->seq = m->seq;
                r->sender_waits = m->sender_waits;
                message_unref(m); /* the ring keeps the original */
                m = r;
            }
        }
        /* Enqueued by the caller after the ring lock is released: an
         * endpoint emits from one thread (its reader, or its client
         * library's callback thread), so its queue order stays its ring
         * order; and a promotion finished its hand-off before this emit
         * could see it live. */
        *enqueue = m;
    } else {
        /* the ring is the buffer: a source waiting for an ack gets it now */
        if (m->done) {
            m->done(m->done_arg, m, MSG_DELIVERED);
            m->done = NULL;
        }
        m->sender_waits = false;
        replay_ring_push(w->ring, m, wall);
        atomic_fetch_add_explicit(&w->stats.buffered, 1, memory_order_relaxed);
    }
    publish_ring(w);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

void warm_gap(struct warm *w)
{
    pthread_mutex_lock(&w->mu);
    replay_ring_gap(w->ring);
    pthread_mutex_unlock(&w->mu);
}

/* The ring must reach back over a crash takeover (ttl + retry): when
 * max_bytes pushed messages out while it held less than that, a promotion
 * now would lose messages. Says so (once a minute) with the size needed. */
static void check_cover(struct warm *w, const struct replay_ring_stats *s)
{
    bool overflowed = s->evicted_overflow != w->overflow_seen;
    w->overflow_seen = s->evicted_overflow;
    int64_t span = s->count ? s->newest_wall_ms - s->oldest_wall_ms : 0;
    int64_t need = w->rc.takeover_ms;
    if (!overflowed || need <= 0 || span >= need) return;
    long long supp = 0;
    if (!ratelimit_ok(&w->rl_cover, 60000, &supp)) return;
    double want = span > 0 ? (double)s->bytes * (double)need / (double)span * 1.5 : 0;
    log_warn(COMPONENT, w->name,
             "replay ring holds only %" PRId64 " ms of messages (%zu messages, %zu bytes, "
             "max_bytes %" PRId64 "): a crash takeover takes up to %" PRId64 " ms (lease ttl + "
             "retry), so a promotion now would lose messages; at this rate replay.max_bytes "
             "should be about %.0f MiB (%lld similar warnings suppressed)",
             span, s->count, s->bytes, w->rc.max_bytes, need, want / 1048576.0 + 1, supp);
}

void warm_trim(struct warm *w)
{
    pthread_mutex_lock(&w->mu);
    replay_ring_trim(w->ring, clock_wall_ms());
    publish_ring(w);
    struct replay_ring_stats s;
    replay_ring_stats(w->ring, &s);
    pthread_mutex_unlock(&w->mu);
    check_cover(w, &s);
}

/* Reads the mark: 1 found (in *mk), 0 none (absent or unreadable text,
 * logged), -1 backend error. */
static int read_mark(struct warm *w, struct replay_mark *mk)
{
    char buf[REPLAY_MARK_MAX], err[BATON_LOCKER_ERR_MAX] = "";
    int rc = baton_locker_shared_get(w->locker, w->lease_key, "mark", buf, sizeof buf, err);
    if (rc == BATON_LOCKER_LOST) return 0;
    if (rc != BATON_LOCKER_OK) {
        atomic_fetch_add(&w->stats.mark_errors, 1);
        log_error(COMPONENT, w->name, "cannot read the replay mark %s:mark: %s", w->lease_key, err);
        return -1;
    }
    if (replay_mark_parse(buf, strlen(buf), mk) != 0) {
        log_warn(COMPONENT, w->name, "replay mark %s:mark is malformed (\"%.80s\"): ignoring it",
                 w->lease_key, buf);
        return 0;
    }
    return 1;
}

/* Aligns on the whole mark, else on its newest 4, else on its newest
 * fingerprint alone: a message dropped between settled ones (queue full)
 * breaks the run, not the position. *used receives how many were matched. */
static void align(const struct replay_ring *ring, const struct replay_mark *mk,
                  struct replay_plan *plan, unsigned *used)
{
    *used = 0;
    replay_ring_align(ring, mk, plan);
    if (!mk || plan->how == REPLAY_ALIGNED) {
        if (mk) *used = mk->n;
        return;
    }
    static const unsigned tails[] = {4, 1};
    for (size_t t = 0; t < sizeof tails / sizeof tails[0]; t++) {
        if (tails[t] >= mk->n) continue;
        struct replay_mark sub = *mk;
        sub.n = tails[t];
        memcpy(sub.fp, mk->fp + (mk->n - tails[t]), tails[t] * sizeof sub.fp[0]);
        struct replay_plan p;
        replay_ring_align(ring, &sub, &p);
        if (p.how == REPLAY_ALIGNED) {
            *plan = p;
            *used = tails[t];
            return;
        }
    }
}

int warm_promote(struct warm *w, uint64_t epoch, struct message ***replay, size_t *n_replay)
{
    *replay = NULL;
    *n_replay = 0;
    struct replay_mark mk;
    int have = read_mark(w, &mk);
    if (have < 0) return -1;
    int64_t now_wall = clock_wall_ms();

    pthread_mutex_lock(&w->mu);
    replay_ring_trim(w->ring, now_wall);
    struct replay_plan plan;
    unsigned used = 0;
    align(w->ring, have ? &mk : NULL, &plan, &used);
    size_t count = replay_ring_count(w->ring);
    int64_t ring_age = count ? now_wall - replay_ring_wall_at(w->ring, 0) : 0;
    size_t n = 0;
    struct message **out = xcalloc(count > plan.start ? count - plan.start : 1, sizeof *out);
    for (size_t i = plan.start; i < count; i++) {
        struct message *m = reissue(w, replay_ring_at(w->ring, i), epoch, true);
        if (!m) continue;
        out[n++] = m;
    }
    /* Live from here, in one step with taking the replay under the ring
     * lock: a message emitted before is in the ring (and in *replay when
     * after the mark), one emitted after is live. The caller enqueues *replay
     * outside this lock, so live emits wait for warm_promote_done: the
     * order-preserving hand-off that keeps every replayed message ahead of
     * the live ones in the queue, as the enqueue under this lock did. */
    atomic_store(&w->live, epoch);
    w->handoff = true;
    *replay = out;
    *n_replay = n;
    publish_ring(w);
    struct replay_ring_stats rs;
    replay_ring_stats(w->ring, &rs);
    pthread_mutex_unlock(&w->mu);

    pthread_mutex_lock(&w->mk_mu);
    memset(&w->mark, 0, sizeof w->mark);
    w->dirty = false;
    atomic_store(&w->lag_since_ms, 0);
    pthread_mutex_unlock(&w->mk_mu);

    atomic_fetch_add(&w->stats.promotions, 1);
    atomic_fetch_add(&w->stats.replayed, n);
    if (plan.matches > 1) atomic_fetch_add(&w->stats.ambiguous, 1);
    char markdesc[160] = "no mark";
    if (have)
        snprintf(markdesc, sizeof markdesc, "mark of epoch %" PRIu64 " (last message received %" PRId64
                 " ms ago)", mk.epoch, now_wall - mk.wall_ms);
    if (plan.how == REPLAY_ALIGNED && !plan.gap) {
        log_info(COMPONENT, w->name,
                 "epoch %" PRIu64 ": aligned on the %s, matching %u fingerprint(s)%s; replaying %zu of "
                 "%zu buffered messages, then live",
                 epoch, markdesc, used, plan.matches > 1 ? " among several candidates (chosen by time)" : "",
                 n, count);
        return 0;
    }
    enum warm_unaligned why = plan.how == REPLAY_ALIGNED   ? WARM_GAP
                              : plan.how == REPLAY_NO_MARK ? WARM_NO_MARK
                              : plan.how == REPLAY_RING_SHORT ? WARM_RING_SHORT
                                                              : WARM_NOT_FOUND;
    if (why == WARM_NO_MARK && count == 0) return 0; /* nothing before us, nothing buffered */
    atomic_fetch_add(&w->stats.unaligned[why], 1);
    log_warn(COMPONENT, w->name,
             "epoch %" PRIu64 ": replay not aligned (%s): %s; delivering %zu buffered messages (ring "
             "%zu messages, %zu bytes, %" PRId64 " ms old; evicted %llu by window_ms %" PRId64
             ", %llu by max_bytes %" PRId64 "). Messages published before the ring's oldest may be "
             "lost, and some may repeat (marked replayed).",
             epoch, warm_unaligned_names[why],
             why == WARM_GAP ? "this replica's subscription broke inside the replayed range"
             : why == WARM_NO_MARK ? "no leader published a mark yet (first leader, or it expired)"
             : why == WARM_RING_SHORT ? "the ring no longer reaches back to the mark"
                                      : "the mark's messages are not in this replica's ring",
             n, count, rs.bytes, ring_age, rs.evicted_window, w->rc.window_ms, rs.evicted_overflow,
             w->rc.max_bytes);
    return 0;
}

void warm_promote_done(struct warm *w)
{
    pthread_mutex_lock(&w->mu);
    w->handoff = false;
    pthread_cond_broadcast(&w->handoff_cv);
    pthread_mutex_unlock(&w->mu);
}

void warm_demote(struct warm *w)
{
    atomic_store(&w->live, 0);
}

static bool settled_for_good(enum msg_outcome o)
{
    /* term_ended and shutdown leave the message to the next leader's replay */
    return o == MSG_DELIVERED || o == MSG_DROPPED_QUEUE_FULL || o == MSG_DROPPED_SINK_FAILED ||
           o == MSG_DROPPED_NOT_LEADER;
}

void warm_settled(struct warm *w, struct message *const *msgs, const enum msg_outcome *outcome,
                  size_t n)
{
    int64_t now_mono_us = 0, now_wall = 0;
    bool noted = false;
    pthread_mutex_lock(&w->mk_mu);
    for (size_t i = 0; i < n; i++) {
        const struct message *m = msgs[i];
        if (!m->fp || !m->epoch || !settled_for_good(outcome[i])) continue;
        int64_t wall = m->received_wall_ms;
        if (wall <= 0) { /* not known: from its age on the monotonic clock */
            if (!now_mono_us) {
                now_mono_us = clock_mono_us();
                now_wall = clock_wall_ms();
            }
            wall = now_wall - (now_mono_us - m->received_mono_us) / 1000;
        }
        replay_mark_note(&w->mark, m->epoch, m->fp, wall);
        noted = true;
    }
    if (noted && !w->dirty) {
        w->dirty = true;
        w->dirty_since_ms = (now_mono_us ? now_mono_us : clock_mono_us()) / 1000;
        atomic_store(&w->lag_since_ms, w->dirty_since_ms);
    }
    pthread_mutex_unlock(&w->mk_mu);
}

int64_t warm_mark_lag_ms(const struct warm *w)
{
    int64_t since = atomic_load(&w->lag_since_ms);
    return since ? clock_mono_ms() - since : 0;
}

/* One write of the pending mark (if any); force ignores the interval.
 * write_mu held (write_mark). */
static void write_mark_locked(struct warm *w, int64_t now, bool force)
{
    pthread_mutex_lock(&w->mk_mu);
    bool refresh = w->mark.n > 0 && now - w->last_ok_ms >= w->mark_ttl_ms / 2;
    bool due = w->dirty && (force || now - w->last_write_ms >= w->rc.mark_interval_ms);
    if (!(due || refresh) || w->mark.n == 0) {
        pthread_mutex_unlock(&w->mk_mu);
        return;
    }
    struct replay_mark mk = w->mark;
    int64_t since = w->dirty_since_ms;
    w->dirty = false;
    w->last_write_ms = now;
    pthread_mutex_unlock(&w->mk_mu);

    char text[REPLAY_MARK_MAX], err[BATON_LOCKER_ERR_MAX] = "";
    int len = replay_mark_format(&mk, text, sizeof text);
    int rc = len < 0 ? BATON_LOCKER_ERR
                     : baton_locker_fenced_set(w->locker, w->lease_key, "mark", mk.epoch, text,
                                         (size_t)len, w->mark_ttl_ms, err);
    pthread_mutex_lock(&w->mk_mu);
    if (rc == BATON_LOCKER_OK) {
        atomic_fetch_add(&w->stats.marks_written, 1);
        w->last_ok_ms = now;
        if (!w->dirty) atomic_store(&w->lag_since_ms, 0);
        else atomic_store(&w->lag_since_ms, w->dirty_since_ms);
    } else if (rc == BATON_LOCKER_LOST) {
        /* a newer leader exists: our marks no longer matter */
        atomic_fetch_add(&w->stats.marks_fenced, 1);
        atomic_store(&w->lag_since_ms, 0);
    } else {
        atomic_fetch_add(&w->stats.mark_errors, 1);
        if (!w->dirty) { /* try again at the next tick, still lagging since then */
            w->dirty = true;
            w->dirty_since_ms = since;
        }
        long long supp = 0;
        if (ratelimit_ok(&w->rl_mark, 5000, &supp))
            log_warn(COMPONENT, w->name,
                     "cannot write the replay mark: %s (a crash now repeats more messages; %lld "
                     "similar lines suppressed)", err[0] ? err : "mark too long", supp);
    }
    pthread_mutex_unlock(&w->mk_mu);
}

static void write_mark(struct warm *w, int64_t now, bool force)
{
    pthread_mutex_lock(&w->write_mu);
    write_mark_locked(w, now, force);
    pthread_mutex_unlock(&w->write_mu);
}

int64_t warm_mark_tick(struct warm *w, int64_t now_mono_ms)
{
    write_mark(w, now_mono_ms, false);
    return now_mono_ms + w->rc.mark_interval_ms;
}

void warm_flush_mark(struct warm *w)
{
    write_mark(w, clock_mono_ms(), true);
}
