/* Warm standby replay: the mark and the ring (see src/replay.h). */
#include "src/replay.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* ---- the mark ---- */

void replay_mark_note(struct replay_mark *mk, uint64_t epoch, uint64_t fp, int64_t wall_ms)
{
    /* A new term settles from a new stream position: the old run says
     * nothing about it. n > K can only be garbage: start over too. */
    if (epoch != mk->epoch || mk->n > REPLAY_MARK_K) {
        mk->epoch = epoch;
        mk->n = 0;
    }
    if (mk->n == REPLAY_MARK_K) {
        memmove(mk->fp, mk->fp + 1, (REPLAY_MARK_K - 1) * sizeof mk->fp[0]);
        mk->n--;
    }
    mk->fp[mk->n++] = fp;
    mk->wall_ms = wall_ms;
}

static bool mark_valid(const struct replay_mark *mk)
{
    if (mk->n < 1 || mk->n > REPLAY_MARK_K) return false;
    for (unsigned i = 0; i < mk->n; i++)
        if (!mk->fp[i]) return false;
    return true;
}

int replay_mark_format(const struct replay_mark *mk, char *buf, size_t len)
{
    /* Never write what replay_mark_parse would reject: a reader would take
     * it for a corrupt mark rather than for "no mark". */
    if (!mark_valid(mk)) return -1;
    size_t used = 0;
    int w = snprintf(buf, len, "v1 %" PRIu64 " %" PRId64 " %u", mk->epoch, mk->wall_ms, mk->n);
    for (unsigned i = 0;; i++) {
        if (w < 0 || (size_t)w >= len - used) return -1;
        used += (size_t)w;
        if (i == mk->n) return (int)used;
        w = snprintf(buf + used, len - used, " %" PRIx64, mk->fp[i]);
    }
}

/* A cursor over the text being parsed: s is not NUL terminated. */
struct scan {
    const char *p, *end;
};

static bool scan_char(struct scan *sc, char c)
{
    if (sc->p == sc->end || *sc->p != c) return false;
    sc->p++;
    return true;
}

/* Decimal digits (at least one) up to max. */
static bool scan_dec(struct scan *sc, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    const char *start = sc->p;
    for (; sc->p < sc->end && *sc->p >= '0' && *sc->p <= '9'; sc->p++) {
        unsigned d = (unsigned)(*sc->p - '0');
        if (v > (max - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return sc->p > start;
}

/* Lowercase hex digits, 1 to 16 of them (what replay_mark_format writes). */
static bool scan_hex(struct scan *sc, uint64_t *out)
{
    uint64_t v = 0;
    const char *start = sc->p;
    for (; sc->p < sc->end; sc->p++) {
        char c = *sc->p;
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else
            break;
        if (sc->p - start == 16) return false;
        v = v << 4 | d;
    }
    *out = v;
    return sc->p > start;
}

/* wall_ms is signed: accept what format writes for any int64_t. */
static bool scan_int64(struct scan *sc, int64_t *out)
{
    bool neg = scan_char(sc, '-');
    uint64_t mag;
    if (!scan_dec(sc, neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, &mag)) return false;
    if (!neg)
        *out = (int64_t)mag;
    else
        *out = mag > (uint64_t)INT64_MAX ? INT64_MIN : -(int64_t)mag;
    return true;
}

int replay_mark_parse(const char *s, size_t len, struct replay_mark *out)
{
    struct scan sc = {s, s + len};
    struct replay_mark mk;
    memset(&mk, 0, sizeof mk);
    uint64_t n;
    if (!scan_char(&sc, 'v') || !scan_char(&sc, '1') || !scan_char(&sc, ' ')) return -1;
    if (!scan_dec(&sc, UINT64_MAX, &mk.epoch) || !scan_char(&sc, ' ')) return -1;
    if (!scan_int64(&sc, &mk.wall_ms) || !scan_char(&sc, ' ')) return -1;
    if (!scan_dec(&sc, UINT64_MAX, &n) || n < 1 || n > REPLAY_MARK_K) return -1;
    mk.n = (unsigned)n;
    for (unsigned i = 0; i < mk.n; i++) {
        if (!scan_char(&sc, ' ') || !scan_hex(&sc, &mk.fp[i]) || !mk.fp[i]) return -1;
    }
    if (sc.p != sc.end) return -1; /* an extra field or trailing bytes */
    *out = mk;
    return 0;
}

/* ---- the ring ---- */

struct entry {
    struct message *m;
    int64_t wall_ms;
    bool gap_before; /* messages may be missing between the previous entry and this one */
};

struct replay_ring {
    struct entry *e; /* circular, cap a power of two */
    size_t cap, head, count;
    size_t bytes;
    int64_t window_ms;
    size_t max_bytes;
    bool gap_pending; /* replay_ring_gap() before the next push */
    /* What eviction forgot, for telling RING_SHORT from NOT_FOUND. */
    bool evicted_any;
    int64_t evicted_newest_wall_ms; /* the largest wall_ms ever evicted */
    unsigned long long evicted_window, evicted_overflow;
};

static struct entry *slot(const struct replay_ring *r, size_t i)
{
    return &r->e[(r->head + i) & (r->cap - 1)];
}

static size_t entry_cost(const struct message *m)
{
    return sizeof(struct message) + m->len + 1 + sizeof(struct entry);
}

struct replay_ring *replay_ring_new(int64_t window_ms, size_t max_bytes)
{
    struct replay_ring *r = xcalloc(1, sizeof *r);
    r->window_ms = window_ms > 0 ? window_ms : 0;
    r->max_bytes = max_bytes;
    return r;
}

void replay_ring_free(struct replay_ring *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->count; i++) message_unref(slot(r, i)->m);
    free(r->e);
    free(r);
}

/* Doubles the array, unwrapping it so the oldest entry is at 0 again. */
static void ring_grow(struct replay_ring *r)
{
    size_t cap = r->cap ? r->cap * 2 : 16;
    if (cap > SIZE_MAX / sizeof(struct entry)) xmalloc(SIZE_MAX); /* aborts */
    struct entry *e = xmalloc(cap * sizeof *e);
    for (size_t i = 0; i < r->count; i++) e[i] = *slot(r, i);
    free(r->e);
    r->e = e;
    r->cap = cap;
    r->head = 0;
}

static void evict_oldest(struct replay_ring *r, unsigned long long *counter)
{
    struct entry *old = slot(r, 0);
    if (!r->evicted_any || old->wall_ms > r->evicted_newest_wall_ms)
        r->evicted_newest_wall_ms = old->wall_ms;
    r->evicted_any = true;
    r->bytes -= entry_cost(old->m);
    message_unref(old->m);
    old->m = NULL;
    r->head = (r->head + 1) & (r->cap - 1);
    r->count--;
    (*counter)++;
}

/* Evicts from the oldest end only, so the ring stays one contiguous stretch
 * of the stream; after a wall-clock step back an entry older than the
 * window may wait behind a newer one until that one goes. */
static void evict_window(struct replay_ring *r, int64_t now_wall_ms)
{
    if (now_wall_ms < INT64_MIN + r->window_ms) return; /* nothing is that old */
    int64_t cutoff = now_wall_ms - r->window_ms;
    while (r->count && slot(r, 0)->wall_ms < cutoff) evict_oldest(r, &r->evicted_window);
}

void replay_ring_push(struct replay_ring *r, struct message *m, int64_t wall_ms)
{
    if (!m) return;
    if (r->count == r->cap) ring_grow(r);
    *slot(r, r->count) = (struct entry){.m = m, .wall_ms = wall_ms, .gap_before = r->gap_pending};
    r->gap_pending = false;
    r->count++;
    r->bytes += entry_cost(m);
    /* The window cutoff is at most wall_ms: the new entry survives it. */
    evict_window(r, wall_ms);
    while (r->bytes > r->max_bytes && r->count > 1) evict_oldest(r, &r->evicted_overflow);
}

void replay_ring_trim(struct replay_ring *r, int64_t now_wall_ms)
{
    evict_window(r, now_wall_ms);
}

void replay_ring_gap(struct replay_ring *r)
{
    r->gap_pending = true;
}

size_t replay_ring_count(const struct replay_ring *r)
{
    return r->count;
}

const struct message *replay_ring_at(const struct replay_ring *r, size_t i)
{
    return i < r->count ? slot(r, i)->m : NULL;
}

int64_t replay_ring_wall_at(const struct replay_ring *r, size_t i)
{
    return i < r->count ? slot(r, i)->wall_ms : 0;
}

void replay_ring_stats(const struct replay_ring *r, struct replay_ring_stats *out)
{
    memset(out, 0, sizeof *out);
    out->count = r->count;
    out->bytes = r->bytes;
    if (r->count) {
        out->oldest_wall_ms = slot(r, 0)->wall_ms;
        out->newest_wall_ms = slot(r, r->count - 1)->wall_ms;
    }
    out->evicted_window = r->evicted_window;
    out->evicted_overflow = r->evicted_overflow;
}

const char *replay_how_name(enum replay_how h)
{
    switch (h) {
    case REPLAY_ALIGNED: return "aligned";
    case REPLAY_NO_MARK: return "no_mark";
    case REPLAY_RING_SHORT: return "ring_short";
    case REPLAY_NOT_FOUND: return "not_found";
    }
    return "unknown";
}

/* Does the mark's run end at entry i (i >= n - 1), with no gap inside it?
 * A gap_before on the run's first entry is outside the run: it does not
 * matter. */
static bool run_ends_at(const struct replay_ring *r, const struct replay_mark *mk, size_t i)
{
    size_t first = i + 1 - mk->n;
    for (unsigned k = 0; k < mk->n; k++) {
        const struct entry *e = slot(r, first + k);
        if (e->m->fp != mk->fp[k]) return false;
        if (k > 0 && e->gap_before) return false;
    }
    return true;
}

static uint64_t distance(int64_t a, int64_t b)
{
    /* Unsigned wrap-around gives the exact difference without overflow. */
    return a > b ? (uint64_t)a - (uint64_t)b : (uint64_t)b - (uint64_t)a;
}

/* Not found: was the ring too short, or did this replica never see the
 * mark's messages?
 *
 * The ring is one contiguous stretch of the stream (eviction takes the
 * oldest), so a message this replica received is either still held or was
 * evicted. The mark's wall_ms is the leader's receive time of its last
 * message, which differs from ours by delivery jitter and clock skew.
 * RING_SHORT when something was evicted and either:
 *  - an evicted entry was received at or after the mark's time: messages
 *    the leader had not settled yet were thrown away, the mark's run most
 *    likely with them; or
 *  - the oldest held entry is newer than the mark: the mark falls between
 *    what was evicted and what is held, so its run, received here a little
 *    earlier than the leader stamped it, went with the evicted ones.
 * Otherwise NOT_FOUND: nothing was evicted (we subscribed after the mark's
 * messages, or everything we ever received is still here), or the mark is
 * newer than all we evicted and falls inside what we hold (the streams
 * differ, or a gap swallowed the run), or the ring is empty after evicting
 * only entries older than the mark (we never received it). */
static enum replay_how why_not_found(const struct replay_ring *r, const struct replay_mark *mk)
{
    if (!r->evicted_any) return REPLAY_NOT_FOUND;
    if (r->evicted_newest_wall_ms >= mk->wall_ms) return REPLAY_RING_SHORT;
    if (r->count && slot(r, 0)->wall_ms > mk->wall_ms) return REPLAY_RING_SHORT;
    return REPLAY_NOT_FOUND;
}

/* Among every position where the run ends, the one received nearest the
 * mark's wall_ms (ties: the newest). Returns the number of positions; *best
 * is set when it is not 0. */
static size_t find_run(const struct replay_ring *r, const struct replay_mark *mk, size_t *best)
{
    size_t matches = 0;
    uint64_t best_d = 0;
    for (size_t i = mk->n - 1; i < r->count; i++) {
        if (!run_ends_at(r, mk, i)) continue;
        uint64_t d = distance(slot(r, i)->wall_ms, mk->wall_ms);
        if (!matches || d <= best_d) {
            best_d = d;
            *best = i;
        }
        matches++;
    }
    return matches;
}

/* Messages may be missing from the replay when an entry in [start, count)
 * follows a gap (for start, the gap lies between the mark and the replay),
 * or when a gap is pending after the newest entry. */
static bool gap_from(const struct replay_ring *r, size_t start)
{
    if (r->gap_pending) return true;
    for (size_t i = start; i < r->count; i++)
        if (slot(r, i)->gap_before) return true;
    return false;
}

void replay_ring_align(const struct replay_ring *r, const struct replay_mark *mark,
                       struct replay_plan *out)
{
    memset(out, 0, sizeof *out);
    size_t end = 0;
    /* A mark with no fingerprints (or a corrupt count) says nothing about
     * where the leader stopped: treat it as no mark. */
    if (!mark || mark->n < 1 || mark->n > REPLAY_MARK_K)
        out->how = REPLAY_NO_MARK;
    else if ((out->matches = find_run(r, mark, &end)) > 0)
        out->how = REPLAY_ALIGNED;
    else
        out->how = why_not_found(r, mark);
    out->start = out->how == REPLAY_ALIGNED ? end + 1 : 0;
    out->gap = gap_from(r, out->start);
}
