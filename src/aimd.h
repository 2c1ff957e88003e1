/* Adaptive request concurrency for the HTTP sink: how many requests may be
 * in flight at once, learned from how the receiver answers (AIMD, after
 * Vector's adaptive_request_concurrency). Pure logic: no threads, no clock
 * reads, no allocation. The caller owns the struct, passes the time in
 * (any monotonic milliseconds) and serialises the calls.
 *
 *   init              limit 1, max clamped to 1..AIMD_MAX_LIMIT
 *   each finished     aimd_observe(now, rtt, overload, in flight at its start)
 *   before a start    in flight < aimd_limit()?
 *
 * The rule. Finished requests are grouped in windows: a window opens with
 * the first observation after the previous one closed and closes with the
 * first observation at least one baseline RTT later, never less than
 * AIMD_WINDOW_MIN_MS (now_ms ticks in whole ms, and a sub-ms receiver would
 * otherwise get one decision per answer: a mean of one or two samples,
 * read as signal, and an increase every millisecond). Before any baseline
 * the smoothed RTT, or the floor, stands in.
 *
 *   overload          the first overload of a window decreases at once:
 *                     limit = max(1, floor(limit * 0.9)); more overloads in
 *                     the same window change nothing (one decrease per
 *                     window). Not at the window's end: a 503 comes back in
 *                     a millisecond, and every request started at the old
 *                     limit until then would be refused as well.
 *   at the window's end, when it had no overload (mean = its mean RTT):
 *   latency rise      mean > baseline * 1.25 + 2 ms: decrease the same way
 *   limit used        else, if a request of the window started with
 *                     in_flight_at_start >= limit: limit += 1, up to max
 *   otherwise         the limit stays: no evidence more would be used
 *
 * Why 1.25 and 2 ms: with a receiver at capacity the RTT grows with the
 * requests queued in it (Little's law), so a mean 25 % over the unqueued
 * latency means about a fifth of what is in flight waits in its queue,
 * adding latency and no throughput. It is a mean over a whole window, so
 * per-request jitter is averaged out; the 2 ms keep a fast receiver
 * (localhost, 1 ms) from reading a scheduler hiccup as queueing. With a
 * receiver whose latency grows linearly beyond 32 in flight, this holds the
 * limit between about 35 and 44 (tests/unit/test_aimd.c).
 *
 * The baseline (aimd_rtt_base_ms): the receiver's latency when we do not
 * queue at it. An EWMA (weight 0.25) of the means of windows without
 * overload, taken when a window's mean is at most the baseline (the
 * receiver got faster, or we queue less), or when it is higher but came
 * with no more requests in flight than the baseline was last confirmed at
 * (the receiver got slower by itself: backing off would not bring it
 * back). A rise that came with more requests in flight is not taken: it may
 * be our own queueing, and following it would let the limit ratchet upward
 * with the latency, never decreasing. So a steady latency stays near its
 * observed minimum, and a receiver that slows down by itself costs a couple
 * of decreases, until the baseline has followed it.
 *
 * aimd_rtt_ms is an EWMA (weight 1/8, as TCP's SRTT) of every answer that
 * was not an overload: a fast 503 or a timeout is not the receiver's
 * latency. */
#ifndef BATON_AIMD_H
#define BATON_AIMD_H

#include <stdbool.h>
#include <stdint.h>

#define AIMD_MAX_LIMIT 1024
#define AIMD_WINDOW_MIN_MS 10

/* Fields are private: read them through the functions below. */
struct aimd {
    unsigned max, limit;
    int64_t win_start_ms; /* the open window: from its first observation */
    unsigned win_count;   /* observations in it; 0 = no window open */
    double win_rtt_sum;   /* of its observations without overload */
    unsigned win_load;    /* most in flight at a start in it */
    bool win_overload;    /* an overload seen: the limit already decreased */
    bool has_base;
    double base_ms;     /* the baseline */
    unsigned base_load; /* in flight when the baseline was last confirmed */
    double srtt_ms;     /* smoothed RTT, 0 = none yet */
};

/* Limit 1; max is clamped to 1..AIMD_MAX_LIMIT. */
void aimd_init(struct aimd *a, unsigned max);
/* One finished request: its round-trip time, whether the receiver signalled
 * overload (timeout, connect failure, 429, 5xx: the caller decides) and how
 * many requests were in flight when it started, itself included. now_ms
 * never goes back (if it does, the open window restarts there). */
void aimd_observe(struct aimd *a, int64_t now_ms, double rtt_ms, bool overload,
                  unsigned in_flight_at_start);
/* How many requests may be in flight now: 1..max. */
unsigned aimd_limit(const struct aimd *a);
/* Smoothed RTT (for /metrics), 0 = none yet. */
double aimd_rtt_ms(const struct aimd *a);
/* The baseline the latency-rise rule compares against, 0 = none yet. */
double aimd_rtt_base_ms(const struct aimd *a);

#endif
