/* Warm standby replay for one endpoint (failover = "replay"): the ring every
 * replica keeps, the switch from standby to live at promotion, and the
 * fenced mark the leader publishes.
 *
 *   endpoint thread   warm_emit(w, m, &q)   ring (+ hands back q, what
 *                                           the gateway enqueues, while live)
 *   guard callbacks   warm_promote(w, epoch, &replay, &n)
 *                                           read the mark, align, hand back
 *                                           the rest of the ring marked
 *                                           replayed, go live; the gateway
 *                                           enqueues them, then
 *                     warm_promote_done(w)  lets live emits through (so the
 *                                           replayed come first: in order)
 *                     warm_demote(w)        stop handing messages back
 *                     warm_flush_mark(w)    final mark before the release
 *   forwarder         warm_settled(...)     what the mark covers
 *   marker thread     warm_mark_tick(w, now) at most every mark_interval_ms
 *
 * The mark lives at "<lease key>:mark" and is written only while the
 * lease's epoch is the writer's (locker fenced_set): a superseded leader
 * never moves it. A leader that crashes after delivering past its last mark
 * makes its successor repeat those messages (marked "replayed"); nothing it
 * had not settled is lost while the successor's ring still holds it. */
#ifndef BATON_WARM_H
#define BATON_WARM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/envelope.h"
#include "common/message.h"
#include "src/config.h"

struct baton_locker;
struct warm;

struct warm_stats {
    atomic_ullong buffered;       /* received as standby (ring only) */
    atomic_ullong replayed;       /* enqueued from the ring at promotion */
    atomic_ullong promotions;     /* promotions with replay */
    atomic_ullong unaligned[4];   /* by enum warm_unaligned */
    atomic_ullong ambiguous;      /* aligned among several candidates */
    atomic_ullong marks_written;
    atomic_ullong mark_errors;    /* backend errors writing or reading the mark */
    atomic_ullong marks_fenced;   /* refused: the epoch moved on */
    atomic_ullong ring_count;     /* gauges, refreshed on every push */
    atomic_ullong ring_bytes;
    atomic_llong ring_oldest_wall_ms; /* 0 = empty */
    atomic_ullong evicted_window, evicted_overflow;
};

enum warm_unaligned { WARM_NO_MARK = 0, WARM_RING_SHORT, WARM_NOT_FOUND, WARM_GAP };
extern const char *const warm_unaligned_names[4]; /* "no_mark", "ring_short", "not_found", "gap" */

struct warm *warm_create(const char *name, const struct replay_config *rc, struct baton_locker *l,
                         const char *lease_key);
/* Renders a raw record (message.raw) into its envelope: the endpoint's
 * replay_render op. Called under the ring lock with the warm's own scratch
 * envelope. The message it returns gets the record's ordering key
 * (message.key), as every message the ring re-issues keeps its own. */
typedef struct message *(*warm_render_fn)(void *ep, struct envelope *scratch,
                                          const struct message *raw, uint64_t epoch,
                                          bool replayed);
/* Before the endpoint starts, when it emits raw records. */
void warm_set_render(struct warm *w, warm_render_fn render, void *ep);
void warm_destroy(struct warm *w);

/* Endpoint thread. Takes m (m->fp set by the endpoint). Standby: kept in the
 * ring only (a done callback is called at once, as delivered: the ring is
 * the buffer); *enqueue = NULL. Live: a reference goes into the ring and
 * *enqueue receives what the caller queues for the sink (m, restamped to the
 * live epoch if it was built with another, or rendered if raw); it owns it.
 * While a promotion's hand-off runs (warm_promote .. warm_promote_done) a
 * live emit waits for it, so what the caller enqueues follows the replayed
 * messages. Returns 0, or -1 when a raw record could not be rendered (m is
 * consumed, *enqueue = NULL; logged). */
int warm_emit(struct warm *w, struct message *m, struct message **enqueue);
/* The subscription broke and was re-established. */
void warm_gap(struct warm *w);
/* Guard callback thread, after the grant of epoch: reads the mark, aligns
 * on it and goes live. Returns 0 with the rest of the ring, re-issued in
 * epoch and marked replayed, in ring order in *replay (*n of them, maybe 0;
 * the caller owns the array and the messages): the caller enqueues them in
 * that order, frees the array, then calls warm_promote_done. Until then
 * live emits wait (the order-preserving hand-off: the replayed messages
 * precede the live stream in the queue, as they did in the source), so
 * nothing that may block on the endpoint thread may be waited for in
 * between. Returns -1 when the mark could not be read (the promotion fails;
 * the guard releases): nothing handed back, still standby, no
 * warm_promote_done. */
int warm_promote(struct warm *w, uint64_t epoch, struct message ***replay, size_t *n);
/* Ends the hand-off warm_promote began: live emits go through again. */
void warm_promote_done(struct warm *w);
void warm_demote(struct warm *w);
bool warm_live(const struct warm *w);
/* Forwarder, before the messages are finished: notes the settled ones
 * (delivered, or dropped for good) of their term in the pending mark. */
void warm_settled(struct warm *w, struct message *const *msgs, const enum msg_outcome *outcome,
                  size_t n);
/* Marker thread: writes the pending mark when due. Returns the mono ms when
 * it wants to be called again at the latest. */
int64_t warm_mark_tick(struct warm *w, int64_t now_mono_ms);
/* Writes the pending mark now (graceful demotion, before the release). */
void warm_flush_mark(struct warm *w);
/* ms of settled messages not yet covered by a written mark (0 = none). */
int64_t warm_mark_lag_ms(const struct warm *w);
/* Trims the ring by window (an idle source). Observer thread. */
void warm_trim(struct warm *w);
const struct warm_stats *warm_stats(const struct warm *w);

#endif
