/* Warm standby replay for one endpoint (failover = "replay"): the ring every
 * replica keeps, the switch from standby to live at promotion, and the
 * fenced mark the leader publishes.
 *
 *   endpoint thread   warm_emit(w, m)       ring (+ enqueue while live)
 *   guard callbacks   warm_promote(w, epoch) read the mark, align, enqueue
 *                                           the rest of the ring marked
 *                                           replayed, go live (one step
 *                                           under the ring lock: in order)
 *                     warm_demote(w)        stop enqueueing
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

/* How the gateway queues a message for the sink (counts it received; on a
 * drop it settles and counts it). Called with the ring lock held. quiet: as
 * host->emit_deferred, without waking the forwarder (the endpoint flushes). */
typedef int (*warm_enqueue_fn)(void *arg, struct message *m, bool quiet);

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
                         const char *lease_key, warm_enqueue_fn enqueue, void *arg);
/* Renders a raw record (message.raw) into its envelope: the endpoint's
 * replay_render op. Called under the ring lock with the warm's own scratch
 * envelope. */
typedef struct message *(*warm_render_fn)(void *ep, struct envelope *scratch,
                                          const struct message *raw, uint64_t epoch,
                                          bool replayed);
/* Before the endpoint starts, when it emits raw records. */
void warm_set_render(struct warm *w, warm_render_fn render, void *ep);
void warm_destroy(struct warm *w);

/* Endpoint thread. Takes m (m->fp set by the endpoint). Standby: kept in the
 * ring only (a done callback is called at once, as delivered: the ring is
 * the buffer). Live: a copy goes into the ring and m (restamped to the live
 * epoch if it was built with another) is enqueued, quietly when quiet (an
 * emit_deferred: the endpoint flushes before it blocks). Returns the enqueue
 * result (0 standby). */
int warm_emit(struct warm *w, struct message *m, bool quiet);
/* The subscription broke and was re-established. */
void warm_gap(struct warm *w);
/* Guard callback thread, after the grant of epoch: 0, or -1 when the mark
 * could not be read (the promotion fails; the guard releases). */
int warm_promote(struct warm *w, uint64_t epoch);
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
