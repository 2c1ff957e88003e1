/* Per-endpoint counters, written by endpoints and the forwarding path with
 * relaxed atomics, read by the metrics/status listener. */
#ifndef BATON_STATS_H
#define BATON_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#define STATS_LATENCY_BUCKETS 12
/* Upper bounds in seconds of the sink latency histogram buckets. */
extern const double stats_latency_bounds[STATS_LATENCY_BUCKETS];

struct ep_stats {
    atomic_ullong received;            /* handed to emit() by the endpoint */
    atomic_ullong forwarded;           /* accepted by the sink */
    atomic_ullong dropped_queue_full;
    atomic_ullong dropped_not_leader;
    atomic_ullong dropped_sink_failed;
    atomic_ullong dropped_shutdown;
    atomic_ullong dropped_term_ended;  /* its lease term ended before the sink took it */
    atomic_ullong returned_term_ended; /* the same, left to a source that delivers it again */
    atomic_ullong sink_errors;         /* failed attempts, including retried ones */
    atomic_llong queue_depth;
    atomic_ullong source_errors;       /* connection losses, decode errors, ... */
    atomic_ullong malformed;           /* source messages that could not be decoded */
    atomic_ullong source_overflow;     /* the source cut this reader off for falling behind
                                          (redis_psub: client-output-buffer-limit pubsub) */
    atomic_ullong dead_lettered[4];    /* handed to the dead-letter sink, by
                                          enum dead_letter_reason (src/sink.h) */
    atomic_ullong fenced_by_sink;      /* the receiver answered "fenced" (HTTP 409):
                                          the term was ended */
    /* sink latency (received -> accepted) histogram */
    atomic_ullong latency_bucket[STATS_LATENCY_BUCKETS + 1]; /* last = +Inf */
    atomic_ullong latency_count;
    atomic_ullong latency_sum_us;
};

void stats_observe_latency(struct ep_stats *s, int64_t us);

/* The same histogram summed locally over a batch of messages, then added to
 * the shared counters at once (one atomic add per touched counter instead of
 * three per message). Single-threaded; lives on the caller's stack. */
struct stats_batch {
    unsigned long long bucket[STATS_LATENCY_BUCKETS + 1];
    unsigned long long count;
    unsigned long long sum_us;
};
void stats_batch_init(struct stats_batch *b);
void stats_batch_observe(struct stats_batch *b, int64_t us);
void stats_batch_publish(struct ep_stats *s, const struct stats_batch *b);

#endif
