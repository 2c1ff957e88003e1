/* Term-scoped forwarding (src/forward.c) with a fake guard (a term whose
 * epoch, deadline and verification state the test steers, on a fake clock
 * the sink advances) and a fake sink that behaves like the real ones: it
 * asks time_left before every request and stops when the term ended. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "src/forward.h"

/* ---- fake guard: one current term on a fake clock -------------------------- */

/* struct baton_active_guard is opaque outside the library, so the test gives
 * it a body of its own and answers for it through forward_ctx.term_state
 * (the seam that replaces baton_active_guard_term_state). */
struct baton_active_guard {
    uint64_t epoch;      /* current term */
    int64_t deadline;    /* fake ms; the term ended once now >= deadline */
    int64_t now;         /* fake clock */
    atomic_int unsure_polls; /* answer UNSURE this many more times */
    int asked;
};

static enum baton_leader_state fake_term_state(const struct baton_active_guard *cg, uint64_t epoch,
                                               int64_t *left)
{
    struct baton_active_guard *g = (struct baton_active_guard *)cg; /* the test's own, not const */
    g->asked++;
    if (left) *left = 0;
    if (epoch != g->epoch || g->now >= g->deadline) return BATON_LEADER_NO;
    if (left) *left = g->deadline - g->now;
    if (atomic_load(&g->unsure_polls) > 0) {
        atomic_fetch_sub(&g->unsure_polls, 1);
        return BATON_LEADER_UNSURE;
    }
    return BATON_LEADER_YES;
}

/* ---- fake sink: each request takes `cost` fake ms -------------------------- */

struct fake_sink {
    struct baton_active_guard *g;
    int64_t cost;
    int calls, requests;
    bool timed; /* the last call came with a time_left */
    uint64_t sent_epochs[64];
    int64_t sent_at[64];
};

static void fake_send(void *sink, struct message *const *msgs, size_t n, enum msg_outcome *outcome,
                      struct sink_call *call)
{
    struct fake_sink *k = sink;
    k->calls++;
    k->timed = call->time_left != NULL;
    for (size_t i = 0; i < n; i++) {
        int64_t left = sink_time_left(call, msgs[i]->epoch);
        if (left < 0) {
            for (size_t j = i; j < n; j++) outcome[j] = MSG_DROPPED_TERM_ENDED;
            return;
        }
        /* the request would need more than what is left: aborted at the
         * deadline (the real sinks cap their timeouts at it) */
        if (k->cost > left) {
            k->g->now += left;
            outcome[i] = MSG_DROPPED_TERM_ENDED;
            continue;
        }
        k->g->now += k->cost;
        k->sent_epochs[k->requests] = msgs[i]->epoch;
        k->sent_at[k->requests++] = k->g->now;
        outcome[i] = MSG_DELIVERED;
    }
}

static const struct sink_ops fake_ops = {.type = "fake", .send = fake_send};

static struct message *msg(uint64_t epoch)
{
    struct message *m = message_new("{}", 2);
    m->epoch = epoch;
    return m;
}

static void finish_all(struct message **m, const enum msg_outcome *o, size_t n)
{
    for (size_t i = 0; i < n; i++) message_finish(m[i], o[i]);
}

/* The term's deadline passes in the middle of a batch: what was written
 * before it is delivered, nothing is written after it. */
static void test_term_ends_mid_batch(void **state)
{
    struct baton_active_guard g = {.epoch = 7, .deadline = 100, .now = 0};
    struct fake_sink k = {.g = &g, .cost = 30};
    struct forward_ctx ctx = {.sink_ops = &fake_ops, .sink = &k, .guard = &g, .term_state = fake_term_state};
    struct message *m[6];
    enum msg_outcome o[6];
    for (int i = 0; i < 6; i++) m[i] = msg(7);
    forward_batch(&ctx, m, o, 6);
    /* 30, 60, 90 fit; the 4th would end at 120 > 100: aborted */
    for (int i = 0; i < 6; i++) assert_int_equal(o[i], i < 3 ? MSG_DELIVERED : MSG_DROPPED_TERM_ENDED);
    assert_int_equal(k.requests, 3);
    for (int i = 0; i < k.requests; i++) assert_true(k.sent_at[i] <= g.deadline);
    finish_all(m, o, 6);
}

/* Re-promotion with older messages still queued: a batch holding messages
 * of the ended term 5 and of the new term 6. Term 5's never reach the sink;
 * term 6's do, in order. */
static void test_older_term_messages_never_delivered(void **state)
{
    struct baton_active_guard g = {.epoch = 6, .deadline = 1000, .now = 0};
    struct fake_sink k = {.g = &g, .cost = 1};
    struct forward_ctx ctx = {.sink_ops = &fake_ops, .sink = &k, .guard = &g, .term_state = fake_term_state};
    uint64_t epochs[7] = {5, 5, 5, 6, 6, 5, 6};
    struct message *m[7];
    enum msg_outcome o[7];
    for (int i = 0; i < 7; i++) m[i] = msg(epochs[i]);
    forward_batch(&ctx, m, o, 7);
    for (int i = 0; i < 7; i++)
        assert_int_equal(o[i], epochs[i] == 6 ? MSG_DELIVERED : MSG_DROPPED_TERM_ENDED);
    assert_int_equal(k.requests, 3);
    for (int i = 0; i < k.requests; i++) assert_int_equal(k.sent_epochs[i], 6);
    /* one sink call per run of the new term, none for the old one */
    assert_int_equal(k.calls, 2);
    finish_all(m, o, 7);
}

/* A lease being verified holds the batch (nothing sent, nothing dropped)
 * until it resolves. */
static void test_unsure_waits_then_delivers(void **state)
{
    struct baton_active_guard g = {.epoch = 3, .deadline = 1000, .now = 0};
    atomic_store(&g.unsure_polls, 20);
    struct fake_sink k = {.g = &g, .cost = 1};
    struct forward_ctx ctx = {.sink_ops = &fake_ops, .sink = &k, .guard = &g, .term_state = fake_term_state};
    struct message *m[2] = {msg(3), msg(3)};
    enum msg_outcome o[2];
    forward_batch(&ctx, m, o, 2);
    assert_int_equal(atomic_load(&g.unsure_polls), 0);
    assert_int_equal(o[0], MSG_DELIVERED);
    assert_int_equal(o[1], MSG_DELIVERED);
    finish_all(m, o, 2);
}

/* Past the drain deadline: settled as shutdown without the sink. */
static void test_cancel_settles_without_the_sink(void **state)
{
    struct baton_active_guard g = {.epoch = 3, .deadline = 1000, .now = 0};
    struct fake_sink k = {.g = &g, .cost = 1};
    atomic_bool cancel = true;
    struct forward_ctx ctx = {.sink_ops = &fake_ops, .sink = &k, .guard = &g, .term_state = fake_term_state,
                              .cancel = &cancel};
    struct message *m[2] = {msg(3), msg(3)};
    enum msg_outcome o[2];
    forward_batch(&ctx, m, o, 2);
    assert_int_equal(o[0], MSG_DROPPED_SHUTDOWN);
    assert_int_equal(o[1], MSG_DROPPED_SHUTDOWN);
    assert_int_equal(k.calls, 0);
    finish_all(m, o, 2);
}

/* Unguarded (schedule, mqtt $share): no term, always handed over. */
static void test_unguarded_always_forwards(void **state)
{
    struct baton_active_guard g = {.epoch = 0, .deadline = 0, .now = 0};
    struct fake_sink k = {.g = &g, .cost = 1};
    struct forward_ctx ctx = {.sink_ops = &fake_ops, .sink = &k};
    struct message *m[3] = {msg(0), msg(0), msg(0)};
    enum msg_outcome o[3];
    forward_batch(&ctx, m, o, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(o[i], MSG_DELIVERED);
    finish_all(m, o, 3);
}

/* Unguarded forwarder thread: the sink gets no time_left at all (no term,
 * no deadline). */
static void test_unguarded_sink_call_is_untimed(void **state)
{
    struct baton_active_guard g = {0};
    struct fake_sink k = {.g = &g, .cost = 1};
    struct forward_ctx ctx = {.sink_ops = &fake_ops, .sink = &k};
    struct message *m[1] = {msg(0)};
    enum msg_outcome o[1];
    forward_batch(&ctx, m, o, 1);
    assert_int_equal(o[0], MSG_DELIVERED);
    assert_false(k.timed);
    finish_all(m, o, 1);
}

/* Inline delivery (the endpoint's own thread): while the endpoint is not
 * being stopped, or its drain deadline has not passed, the lease decides
 * (always live when unguarded, but the sink call is timed); once stopping
 * and past the drain deadline the term counts as ended, guarded or not,
 * and the sink is not called. */
static void test_inline_drain_deadline_ends_the_term(void **state)
{
    struct baton_active_guard g = {.epoch = 4, .deadline = 1000, .now = 0};
    struct fake_sink k = {.g = &g, .cost = 1};
    atomic_bool stopping = false;
    atomic_llong drain_deadline = 0; /* long passed on the monotonic clock */
    struct forward_ctx guarded = {.sink_ops = &fake_ops, .sink = &k, .guard = &g,
                                  .term_state = fake_term_state, .stopping = &stopping,
                                  .drain_deadline_ms = &drain_deadline};
    struct forward_ctx unguarded = {.sink_ops = &fake_ops, .sink = &k, .stopping = &stopping,
                                    .drain_deadline_ms = &drain_deadline};
    struct message *m[2] = {msg(4), msg(0)};
    enum msg_outcome o[2];

    /* not stopping: delivered; the unguarded one's call is timed too */
    forward_batch(&guarded, m, o, 1);
    forward_batch(&unguarded, m + 1, o + 1, 1);
    assert_int_equal(o[0], MSG_DELIVERED);
    assert_int_equal(o[1], MSG_DELIVERED);
    assert_true(k.timed);
    assert_int_equal(k.calls, 2);

    /* stopping, deadline ahead: still delivered */
    atomic_store(&stopping, true);
    atomic_store(&drain_deadline, INT64_MAX);
    forward_batch(&guarded, m, o, 1);
    forward_batch(&unguarded, m + 1, o + 1, 1);
    assert_int_equal(o[0], MSG_DELIVERED);
    assert_int_equal(o[1], MSG_DELIVERED);
    assert_int_equal(k.calls, 4);

    /* stopping and past the drain deadline: term ended, no sink call */
    atomic_store(&drain_deadline, 0);
    int asked = g.asked;
    forward_batch(&guarded, m, o, 1);
    forward_batch(&unguarded, m + 1, o + 1, 1);
    assert_int_equal(o[0], MSG_DROPPED_TERM_ENDED);
    assert_int_equal(o[1], MSG_DROPPED_TERM_ENDED);
    assert_int_equal(k.calls, 4);
    assert_int_equal(g.asked, asked); /* decided before the guard is asked */
    finish_all(m, o, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_term_ends_mid_batch),
        cmocka_unit_test(test_older_term_messages_never_delivered),
        cmocka_unit_test(test_unsure_waits_then_delivers),
        cmocka_unit_test(test_cancel_settles_without_the_sink),
        cmocka_unit_test(test_unguarded_always_forwards),
        cmocka_unit_test(test_unguarded_sink_call_is_untimed),
        cmocka_unit_test(test_inline_drain_deadline_ends_the_term),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
