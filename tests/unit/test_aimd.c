/* Unit tests: adaptive request concurrency (src/aimd.c). Most run a
 * discrete-event simulation: a sender that always has more to send than the
 * limit lets out, a simulated receiver, and a fake clock in microseconds.
 * The sender starts requests while fewer than aimd_limit() are in flight;
 * the receiver decides each request's latency and whether it is refused
 * from how many requests it actually holds when the request arrives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>

#include "src/aimd.h"

enum rx_kind {
    RX_UNLIMITED, /* every request takes latency_ms */
    RX_CAPACITY,  /* beyond capacity at once: a 503 after 1 ms */
    RX_QUEUEING,  /* latency_ms * max(1, held / knee) */
};

struct receiver {
    enum rx_kind kind;
    double latency_ms;
    unsigned capacity; /* RX_CAPACITY */
    unsigned knee;     /* RX_QUEUEING */
    unsigned held;     /* requests it works on now (503s not counted) */
};

struct request {
    int64_t start_us, end_us;
    unsigned in_flight_at_start;
    bool overload, held;
};

struct stats { /* from the end of the warm-up on */
    unsigned long answers, overloads;
    unsigned min_limit, max_limit;
};

struct sim {
    struct aimd a;
    struct receiver rx;
    int64_t now_us;
    struct request req[AIMD_MAX_LIMIT + 1];
    unsigned n;              /* in flight */
    int64_t first_at_max_us; /* when the limit first reached max; -1: not yet */
    struct stats st;
};

static void sim_init(struct sim *s, unsigned max, struct receiver rx)
{
    *s = (struct sim){.rx = rx, .first_at_max_us = -1};
    aimd_init(&s->a, max);
}

static void start_one(struct sim *s)
{
    struct request *r = &s->req[s->n++];
    struct receiver *rx = &s->rx;
    double ms = rx->latency_ms;
    *r = (struct request){.start_us = s->now_us, .in_flight_at_start = s->n};
    if (rx->kind == RX_CAPACITY && rx->held >= rx->capacity) {
        r->overload = true;
        ms = 1;
    } else {
        r->held = true;
        rx->held++;
        if (rx->kind == RX_QUEUEING && rx->held > rx->knee) ms *= (double)rx->held / rx->knee;
    }
    r->end_us = s->now_us + (int64_t)(ms * 1000 + 0.5);
}

static void fill(struct sim *s)
{
    while (s->n < aimd_limit(&s->a))
        start_one(s);
}

/* Finishes the earliest request, tells the controller, refills. */
static void step(struct sim *s, int64_t warm_us)
{
    unsigned first = 0;
    for (unsigned i = 1; i < s->n; i++)
        if (s->req[i].end_us < s->req[first].end_us) first = i;
    struct request r = s->req[first];
    s->req[first] = s->req[--s->n];
    s->now_us = r.end_us;
    if (r.held) s->rx.held--;
    aimd_observe(&s->a, s->now_us / 1000, (double)(r.end_us - r.start_us) / 1000, r.overload,
                 r.in_flight_at_start);
    unsigned limit = aimd_limit(&s->a);
    assert_in_range(limit, 1, s->a.max);
    if (limit == s->a.max && s->first_at_max_us < 0) s->first_at_max_us = s->now_us;
    if (s->now_us >= warm_us) {
        struct stats *st = &s->st;
        if (st->answers == 0 || limit < st->min_limit) st->min_limit = limit;
        if (limit > st->max_limit) st->max_limit = limit;
        st->answers++;
        st->overloads += r.overload;
    }
    fill(s);
}

static void run_until(struct sim *s, int64_t until_us, int64_t warm_us)
{
    fill(s);
    while (s->now_us < until_us)
        step(s, warm_us);
}

static void print_stats(const char *name, const struct sim *s)
{
    print_message("%s: limit %u..%u after warm-up, %lu answers, %lu overloads, baseline %.2f ms,"
                  " rtt %.2f ms\n",
                  name, s->st.min_limit, s->st.max_limit, s->st.answers, s->st.overloads,
                  aimd_rtt_base_ms(&s->a), aimd_rtt_ms(&s->a));
}

#define SEC 1000000LL
#define MS 1000LL

static struct sim sim; /* 33 KB: not on the stack */

/* 1. Constant 20 ms, unlimited capacity: +1 per window. A window is at
 * least one baseline RTT (20 ms) and closes at the first answer 20 ms after
 * it opened; with requests always in flight one arrives at least every
 * 20 ms, so a window lasts 20..40 ms: 63 increases take 1.26..2.52 s. */
static void test_climbs_to_max_and_stays(void **state)
{
    (void)state;
    sim_init(&sim, 64, (struct receiver){.kind = RX_UNLIMITED, .latency_ms = 20});
    run_until(&sim, 3 * SEC, 3 * SEC);
    print_message("reached 64 after %.3f s\n", (double)sim.first_at_max_us / SEC);
    assert_true(sim.first_at_max_us >= 1260 * MS);
    assert_true(sim.first_at_max_us <= 2600 * MS);
    run_until(&sim, 30 * SEC, 3 * SEC);
    print_stats("unlimited", &sim);
    assert_int_equal(sim.st.min_limit, 64);
    assert_int_equal(sim.st.max_limit, 64);
    assert_int_equal(sim.st.overloads, 0);
    assert_true(aimd_rtt_base_ms(&sim.a) == 20.0);
}

/* 2. At most 16 at once, a 503 in 1 ms beyond: the limit saws between 15
 * and 17, one 503 each time it reaches 17. */
static void test_capacity_16_with_503(void **state)
{
    (void)state;
    sim_init(&sim, 64, (struct receiver){.kind = RX_CAPACITY, .latency_ms = 20, .capacity = 16});
    run_until(&sim, 60 * SEC, 5 * SEC);
    print_stats("capacity 16", &sim);
    assert_true(sim.st.min_limit >= 8);
    assert_true(sim.st.max_limit <= 24);
    assert_true(sim.st.overloads * 100 < sim.st.answers * 5);
    assert_true(sim.st.answers > 55 * 8 * 50); /* > 8 in flight at 20 ms on average */
}

/* 3. Latency 20 ms * max(1, held / 32): 25 % over 20 ms (plus 2 ms) is
 * reached at 44 in flight, one decrease there and, since what finishes
 * next still started at 44, usually a second: the limit saws between about
 * 35 and 44. The bounds 24..48 leave room either side; the baseline stays
 * at the unqueued 20 ms instead of creeping up with the sawtooth. */
static void test_queueing_beyond_32(void **state)
{
    (void)state;
    sim_init(&sim, 64, (struct receiver){.kind = RX_QUEUEING, .latency_ms = 20, .knee = 32});
    run_until(&sim, 60 * SEC, 5 * SEC);
    print_stats("queueing beyond 32", &sim);
    assert_true(sim.st.min_limit >= 24);
    assert_true(sim.st.max_limit <= 48);
    assert_true(aimd_rtt_base_ms(&sim.a) >= 19.9 && aimd_rtt_base_ms(&sim.a) <= 21);
    assert_int_equal(sim.st.overloads, 0);
}

/* 4. Bounds: never below 1, never above max, whatever comes in. */
static void test_bounds(void **state)
{
    (void)state;
    struct aimd a;
    aimd_init(&a, 0);
    assert_int_equal(a.max, 1);
    aimd_init(&a, 5000);
    assert_int_equal(a.max, AIMD_MAX_LIMIT);
    assert_int_equal(aimd_limit(&a), 1);
    assert_true(aimd_rtt_ms(&a) == 0 && aimd_rtt_base_ms(&a) == 0);

    /* an overload at limit 1 stays 1 */
    aimd_init(&a, 8);
    for (int i = 0; i < 100; i++) {
        aimd_observe(&a, i * 50, 1, true, 1);
        assert_int_equal(aimd_limit(&a), 1);
    }
    /* max = 1 stays 1, however fast and used */
    sim_init(&sim, 1, (struct receiver){.kind = RX_UNLIMITED, .latency_ms = 20});
    run_until(&sim, 10 * SEC, 0);
    assert_int_equal(sim.st.min_limit, 1);
    assert_int_equal(sim.st.max_limit, 1);

    /* arbitrary input (an LCG): 1 <= limit <= max after every call; phases
     * of 5000 calls: calm (5 ms), overloads, random RTTs. A calm phase is
     * ~1500 windows: enough to reach any max but 1024 (it gets to ~940) */
    const unsigned maxes[] = {1, 2, 3, 10, 64, AIMD_MAX_LIMIT};
    for (unsigned m = 0; m < sizeof maxes / sizeof maxes[0]; m++) {
        uint32_t x = 12345 + m;
        int64_t now = 0;
        bool hit_max = false;
        aimd_init(&a, maxes[m]);
        for (int i = 0; i < 200000; i++) {
            x = x * 1664525u + 1013904223u;
            now += (x >> 8) % 7;
            double rtt = (i / 5000) % 3 == 2 ? 1 + (x >> 12) % 200 : 5;
            bool overload = (i / 5000) % 3 == 1 && (x >> 20) % 4 == 0;
            aimd_observe(&a, now, rtt, overload, 1 + (x >> 4) % (AIMD_MAX_LIMIT + 8));
            assert_in_range(aimd_limit(&a), 1, maxes[m]);
            hit_max |= aimd_limit(&a) == maxes[m];
        }
        if (maxes[m] < AIMD_MAX_LIMIT) assert_true(hit_max);
    }
    /* NaN, negative RTT and a clock going back do not break it */
    aimd_init(&a, 4);
    aimd_observe(&a, 100, -5, false, 1);
    aimd_observe(&a, 50, 0.0 / 0.0, false, 1);
    aimd_observe(&a, 200, 3, false, 1);
    assert_in_range(aimd_limit(&a), 1, 4);
    assert_true(aimd_rtt_ms(&a) >= 0 && aimd_rtt_ms(&a) <= 3);
}

/* A sub-millisecond receiver still gets windows of AIMD_WINDOW_MIN_MS: at
 * most one increase per 10 ms. */
static void test_window_floor(void **state)
{
    (void)state;
    sim_init(&sim, AIMD_MAX_LIMIT, (struct receiver){.kind = RX_UNLIMITED, .latency_ms = 0.1});
    run_until(&sim, 500 * MS, 0);
    print_stats("0.1 ms receiver, 0.5 s", &sim);
    assert_in_range(aimd_limit(&sim.a), 500 * MS / MS / (2 * AIMD_WINDOW_MIN_MS),
                    1 + 500 / AIMD_WINDOW_MIN_MS);
}

/* 5. aimd_rtt_ms follows a change of latency, both ways; the baseline
 * follows a receiver that slows down by itself (at no more in flight than
 * before), after a few decreases, and the limit climbs back to max. */
static void test_rtt_follows_latency(void **state)
{
    (void)state;
    sim_init(&sim, 64, (struct receiver){.kind = RX_UNLIMITED, .latency_ms = 20});
    run_until(&sim, 5 * SEC, 5 * SEC);
    assert_true(aimd_rtt_ms(&sim.a) > 19.9 && aimd_rtt_ms(&sim.a) < 20.1);
    assert_int_equal(aimd_limit(&sim.a), 64);

    sim.rx.latency_ms = 50;
    run_until(&sim, 5 * SEC + 200 * MS, 5 * SEC);
    print_stats("20 -> 50 ms, 0.2 s", &sim);
    assert_true(aimd_rtt_ms(&sim.a) > 49 && aimd_rtt_ms(&sim.a) < 51);
    assert_true(sim.st.min_limit >= 32); /* a few decreases, no collapse */
    run_until(&sim, 10 * SEC, 5 * SEC);
    print_stats("20 -> 50 ms, 5 s", &sim);
    assert_true(aimd_rtt_base_ms(&sim.a) > 49 && aimd_rtt_base_ms(&sim.a) < 51);
    assert_int_equal(aimd_limit(&sim.a), 64);

    sim.rx.latency_ms = 20;
    sim.st = (struct stats){0};
    run_until(&sim, 10 * SEC + 200 * MS, 10 * SEC);
    assert_true(aimd_rtt_ms(&sim.a) > 19 && aimd_rtt_ms(&sim.a) < 21);
    assert_int_equal(sim.st.min_limit, 64); /* faster never decreases */
    run_until(&sim, 12 * SEC, 10 * SEC);
    assert_true(aimd_rtt_base_ms(&sim.a) > 19.9 && aimd_rtt_base_ms(&sim.a) < 20.1);
}

/* An overload answer is not a latency: a fast 503 leaves the RTT alone. */
static void test_overload_not_in_rtt(void **state)
{
    (void)state;
    struct aimd a;
    aimd_init(&a, 64);
    for (int i = 0; i < 50; i++)
        aimd_observe(&a, i * 20, 20, false, 1);
    double before = aimd_rtt_ms(&a);
    for (int i = 50; i < 100; i++)
        aimd_observe(&a, i * 20, 1, true, 1);
    assert_true(aimd_rtt_ms(&a) == before);
    assert_int_equal(aimd_limit(&a), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_climbs_to_max_and_stays),
        cmocka_unit_test(test_capacity_16_with_503),
        cmocka_unit_test(test_queueing_beyond_32),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_window_floor),
        cmocka_unit_test(test_rtt_follows_latency),
        cmocka_unit_test(test_overload_not_in_rtt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
