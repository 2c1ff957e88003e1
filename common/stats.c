/* Per-endpoint counters: the sink latency histogram. */
#include "common/stats.h"

#include <stddef.h>
#include <string.h>

const double stats_latency_bounds[STATS_LATENCY_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5, 10.0,
};

/* The bounds in whole microseconds: bucket i holds us <= bound_us[i]
 * (the same test as secs <= stats_latency_bounds[i]). */
static const int64_t bound_us[STATS_LATENCY_BUCKETS] = {
    500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 1000000, 2500000, 10000000,
};

static size_t bucket_of(int64_t us)
{
    size_t i = 0;
    while (i < STATS_LATENCY_BUCKETS && us > bound_us[i]) i++;
    return i;
}

void stats_observe_latency(struct ep_stats *s, int64_t us)
{
    if (!s) return;
    if (us < 0) us = 0;
    /* Non-cumulative buckets (the last one is +Inf); the metrics writer sums
     * them into Prometheus' cumulative "le" form. */
    atomic_fetch_add_explicit(&s->latency_bucket[bucket_of(us)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->latency_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->latency_sum_us, (unsigned long long)us, memory_order_relaxed);
}

void stats_batch_init(struct stats_batch *b)
{
    memset(b, 0, sizeof *b);
}

void stats_batch_observe(struct stats_batch *b, int64_t us)
{
    if (us < 0) us = 0;
    b->bucket[bucket_of(us)]++;
    b->count++;
    b->sum_us += (unsigned long long)us;
}

void stats_batch_publish(struct ep_stats *s, const struct stats_batch *b)
{
    if (!s || b->count == 0) return;
    for (size_t i = 0; i <= STATS_LATENCY_BUCKETS; i++)
        if (b->bucket[i]) atomic_fetch_add_explicit(&s->latency_bucket[i], b->bucket[i], memory_order_relaxed);
    atomic_fetch_add_explicit(&s->latency_count, b->count, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->latency_sum_us, b->sum_us, memory_order_relaxed);
}
