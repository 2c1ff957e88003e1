/* Warm standby replay (failover = "replay"): pure pieces, no I/O, no locks.
 *
 * Every replica of a replay endpoint subscribes and keeps a ring of what it
 * received in the last window_ms (bounded by max_bytes), each message with a
 * 64-bit fingerprint of (channel or topic, payload). The leader publishes a
 * mark after settled batches: its epoch and the fingerprints of the last
 * messages it settled (REPLAY_MARK_K at most), with the wall-clock receive
 * time of the newest. A promoted standby aligns the mark on its ring and
 * replays everything after it.
 *
 *   fp = replay_fingerprint(ch, chlen, payload, n);
 *   replay_id(&idctx, fp, id);                 // "r<16 hex>", stable across replicas
 *   replay_ring_push(ring, m, wall_ms);        // m->fp set; the ring owns m
 *   replay_ring_align(ring, &mark_or_NULL, &plan);
 *   for (i = plan.start; i < replay_ring_count(ring); i++) ... replay_ring_at(ring, i)
 *
 * The caller serialises all calls on one ring. */
#ifndef BATON_REPLAY_H
#define BATON_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/message.h"
#include "common/replay_id.h"

#define REPLAY_MARK_K 8
/* Longest formatted mark, NUL included. */
#define REPLAY_MARK_MAX 256

/* ---- the mark ---- */

struct replay_mark {
    uint64_t epoch;       /* the writer's term */
    int64_t wall_ms;      /* wall-clock receive time of fp[n - 1] */
    unsigned n;           /* 1..REPLAY_MARK_K */
    uint64_t fp[REPLAY_MARK_K]; /* oldest first; fp[n - 1] the last settled */
};
/* Appends fp (settled in term epoch, received at wall_ms); a new epoch
 * starts a new run. */
void replay_mark_note(struct replay_mark *mk, uint64_t epoch, uint64_t fp, int64_t wall_ms);
/* Text form: "v1 <epoch> <wall_ms> <n> <fp hex> ...". Returns the length,
 * or -1 when it does not fit. */
int replay_mark_format(const struct replay_mark *mk, char *buf, size_t len);
/* Strict parse of the text form; -1 when malformed (wrong version, count
 * out of range, a missing or extra field, a 0 fingerprint). */
int replay_mark_parse(const char *s, size_t len, struct replay_mark *out);

/* ---- the ring ---- */

struct replay_ring;

struct replay_ring_stats {
    size_t count;             /* messages held */
    size_t bytes;             /* bytes held (messages plus per-entry overhead) */
    int64_t oldest_wall_ms;   /* 0 when empty */
    int64_t newest_wall_ms;   /* 0 when empty */
    unsigned long long evicted_window;   /* older than window_ms */
    unsigned long long evicted_overflow; /* pushed out by max_bytes */
};

struct replay_ring *replay_ring_new(int64_t window_ms, size_t max_bytes);
/* Drops the ring's reference to every held message (message_unref: a done
 * callback is never called by the ring). */
void replay_ring_free(struct replay_ring *r);
/* Takes one reference to m (m->fp set by the caller; the message may be
 * shared with the forwarding path, see message_ref). Then
 * evicts entries received before wall_ms - window_ms, and the oldest while
 * the ring holds more than max_bytes (a single message larger than
 * max_bytes is still kept, alone). */
void replay_ring_push(struct replay_ring *r, struct message *m, int64_t wall_ms);
/* Evicts by window without pushing (an idle source). */
void replay_ring_trim(struct replay_ring *r, int64_t now_wall_ms);
/* The subscription broke and was re-established: messages may be missing
 * between the newest entry and the next one pushed. */
void replay_ring_gap(struct replay_ring *r);
size_t replay_ring_count(const struct replay_ring *r);
/* i = 0 is the oldest. */
const struct message *replay_ring_at(const struct replay_ring *r, size_t i);
int64_t replay_ring_wall_at(const struct replay_ring *r, size_t i);
void replay_ring_stats(const struct replay_ring *r, struct replay_ring_stats *out);

enum replay_how {
    REPLAY_ALIGNED = 0,  /* the mark's run found: replay what follows it */
    REPLAY_NO_MARK,      /* no mark given: replay the whole ring */
    REPLAY_RING_SHORT,   /* not found, and the ring evicted entries newer
                            than the mark (window or max_bytes too small
                            for the gap): replay the whole ring */
    REPLAY_NOT_FOUND,    /* not found otherwise (this replica was not
                            subscribed then, or the streams differ) */
};
const char *replay_how_name(enum replay_how h); /* "aligned", "no_mark", "ring_short", "not_found" */

struct replay_plan {
    enum replay_how how;
    size_t start;     /* first ring index to replay; == count: nothing */
    size_t matches;   /* positions where the mark's run occurs (>1: ambiguous,
                         the one whose receive time is nearest the mark's
                         wall_ms was chosen; ties: the newest) */
    bool gap;         /* a gap lies inside the replayed range or between the
                         mark and it: messages may be missing */
};
/* mark may be NULL. A match needs all mark->n fingerprints consecutive in
 * the ring, with no gap among them. Never fails. */
void replay_ring_align(const struct replay_ring *r, const struct replay_mark *mark,
                       struct replay_plan *out);

#endif
