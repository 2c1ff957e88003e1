/* Adaptive request concurrency (AIMD): the rule is in aimd.h. Windows close
 * only when an observation arrives, so an idle sink keeps its window open
 * and its next answer, however late, is judged with the ones before it. */
#include "src/aimd.h"

#define DECREASE_NUM 9 /* limit * 9 / 10: floor(limit * 0.9) */
#define DECREASE_DEN 10
#define RISE_RATIO 1.25
#define RISE_SLACK_MS 2.0
#define BASE_WEIGHT 0.25
#define SRTT_WEIGHT 0.125

void aimd_init(struct aimd *a, unsigned max)
{
    *a = (struct aimd){0};
    if (max < 1) max = 1;
    if (max > AIMD_MAX_LIMIT) max = AIMD_MAX_LIMIT;
    a->max = max;
    a->limit = 1;
}

static void decrease(struct aimd *a)
{
    unsigned next = a->limit * DECREASE_NUM / DECREASE_DEN;
    a->limit = next ? next : 1;
}

static double window_ms(const struct aimd *a)
{
    double len = a->has_base ? a->base_ms : a->srtt_ms;
    return len > AIMD_WINDOW_MIN_MS ? len : AIMD_WINDOW_MIN_MS;
}

/* The baseline follows a window's mean unless the mean rose with more of
 * our requests in flight than it was last confirmed at (aimd.h). */
static void learn_base(struct aimd *a, double mean, unsigned load)
{
    if (!a->has_base) {
        a->has_base = true;
        a->base_ms = mean;
        a->base_load = load;
        return;
    }
    if (mean <= a->base_ms)
        a->base_load = load;
    else if (load > a->base_load)
        return;
    a->base_ms += BASE_WEIGHT * (mean - a->base_ms);
}

static void close_window(struct aimd *a)
{
    if (!a->win_overload) {
        double mean = a->win_rtt_sum / a->win_count;
        if (a->has_base && mean > a->base_ms * RISE_RATIO + RISE_SLACK_MS)
            decrease(a);
        else if (a->win_load >= a->limit && a->limit < a->max)
            a->limit++;
        learn_base(a, mean, a->win_load);
    }
    a->win_count = 0;
    a->win_rtt_sum = 0;
    a->win_load = 0;
    a->win_overload = false;
}

static void add_rtt(struct aimd *a, double rtt_ms)
{
    a->win_rtt_sum += rtt_ms;
    if (a->srtt_ms == 0)
        a->srtt_ms = rtt_ms;
    else
        a->srtt_ms += SRTT_WEIGHT * (rtt_ms - a->srtt_ms);
}

void aimd_observe(struct aimd *a, int64_t now_ms, double rtt_ms, bool overload,
                  unsigned in_flight_at_start)
{
    if (!(rtt_ms >= 0)) rtt_ms = 0; /* negative or NaN: a caller's slip */
    if (a->win_count == 0 || now_ms < a->win_start_ms) a->win_start_ms = now_ms;
    a->win_count++;
    if (in_flight_at_start > a->win_load) a->win_load = in_flight_at_start;
    if (overload) {
        if (!a->win_overload) decrease(a);
        a->win_overload = true;
    } else {
        add_rtt(a, rtt_ms);
    }
    if ((double)(now_ms - a->win_start_ms) >= window_ms(a)) close_window(a);
}

unsigned aimd_limit(const struct aimd *a)
{
    return a->limit;
}

double aimd_rtt_ms(const struct aimd *a)
{
    return a->srtt_ms;
}

double aimd_rtt_base_ms(const struct aimd *a)
{
    return a->has_base ? a->base_ms : 0;
}
