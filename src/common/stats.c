/* Per-endpoint counters: the sink latency histogram. */
#include "src/common/stats.h"

#include <stddef.h>

const double stats_latency_bounds[STATS_LATENCY_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5, 10.0,
};

void stats_observe_latency(struct ep_stats *s, int64_t us)
{
    if (!s) return;
    if (us < 0) us = 0;
    double secs = (double)us / 1e6;
    size_t i = 0;
    while (i < STATS_LATENCY_BUCKETS && secs > stats_latency_bounds[i]) i++;
    /* Non-cumulative buckets (the last one is +Inf); the metrics writer sums
     * them into Prometheus' cumulative "le" form. */
    atomic_fetch_add_explicit(&s->latency_bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->latency_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->latency_sum_us, (unsigned long long)us, memory_order_relaxed);
}
