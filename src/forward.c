/* Term-scoped forwarding of a batch (see src/forward.h). */
#include "src/forward.h"

#include <time.h>

#include "base/util.h"

/* Whether runs are checked against a term at all: guarded, or inline
 * delivery (whose drain deadline ends the term even when unguarded). */
static bool term_checked(const struct forward_ctx *ctx)
{
    return ctx->guard != NULL || ctx->drain_deadline_ms != NULL;
}

/* The leader state in term `epoch`, asked of the guard itself (term-checked
 * contexts only). */
static enum baton_leader_state term_state(const struct forward_ctx *ctx, uint64_t epoch,
                                          int64_t *left_ms)
{
    if (ctx->stopping && ctx->drain_deadline_ms && atomic_load(ctx->stopping) &&
        clock_mono_ms() >= atomic_load(ctx->drain_deadline_ms))
        return BATON_LEADER_NO;
    if (ctx->fenced_epoch && epoch != 0 && epoch <= atomic_load(ctx->fenced_epoch))
        return BATON_LEADER_NO; /* the receiver saw a newer term */
    if (!ctx->guard) { /* inline delivery of an unguarded endpoint */
        if (left_ms) *left_ms = INT64_MAX;
        return BATON_LEADER_YES;
    }
    forward_term_state_fn ask = ctx->term_state ? ctx->term_state : baton_active_guard_term_state;
    return ask(ctx->guard, epoch, left_ms);
}

int64_t forward_time_left(void *arg, uint64_t epoch)
{
    const struct forward_ctx *ctx = arg;
    int64_t left = 0;
    switch (term_state(ctx, epoch, &left)) {
    case BATON_LEADER_YES: return left > 0 ? left : -1;
    case BATON_LEADER_UNSURE: return 0;
    default: return -1;
    }
}

static bool cancelled(const struct forward_ctx *ctx)
{
    return ctx->cancel && atomic_load(ctx->cancel);
}

enum forward_gate forward_gate(const struct forward_ctx *ctx, uint64_t epoch)
{
    if (cancelled(ctx)) return FORWARD_CANCELLED;
    if (!term_checked(ctx)) return FORWARD_OPEN;
    switch (term_state(ctx, epoch, NULL)) {
    case BATON_LEADER_YES: return FORWARD_OPEN;
    case BATON_LEADER_UNSURE: return FORWARD_VERIFYING;
    default: return FORWARD_ENDED;
    }
}

static void forward_fenced(void *arg, uint64_t epoch, const char *what)
{
    const struct forward_ctx *ctx = arg;
    ctx->on_fenced(ctx->fenced_arg, epoch, what);
}

static int forward_lease(void *arg, uint64_t epoch, const char **key, char token[33])
{
    const struct forward_ctx *ctx = arg;
    *key = baton_active_guard_key(ctx->guard);
    return baton_active_guard_term_token(ctx->guard, epoch, token);
}

struct sink_call forward_call(const struct forward_ctx *ctx)
{
    struct sink_call call = {
        .cancel = ctx->cancel,
        .time_left = term_checked(ctx) ? forward_time_left : NULL,
        .arg = (void *)ctx,
        .fenced = ctx->on_fenced ? forward_fenced : NULL,
        .lease = ctx->guard ? forward_lease : NULL,
    };
    return call;
}

/* One run of messages of the same term. */
static unsigned long long forward_run(const struct forward_ctx *ctx, struct message *const *msgs,
                                      enum msg_outcome *outcome, size_t n)
{
    /* A lease being verified after a locker reconnect is waited for
     * (nothing is forwarded meanwhile): it resolves within a round trip, or
     * the deadline passes and the term ends. */
    enum forward_gate g;
    while ((g = forward_gate(ctx, msgs[0]->epoch)) == FORWARD_VERIFYING) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    if (g != FORWARD_OPEN) {
        enum msg_outcome o = g == FORWARD_CANCELLED ? MSG_DROPPED_SHUTDOWN : MSG_DROPPED_TERM_ENDED;
        for (size_t i = 0; i < n; i++) outcome[i] = o;
        return 0;
    }
    for (size_t i = 0; i < n; i++) outcome[i] = MSG_DROPPED_SINK_FAILED;
    struct sink_call call = forward_call(ctx);
    ctx->sink_ops->send(ctx->sink, msgs, n, outcome, &call);
    return call.attempt_errors;
}

unsigned long long forward_batch(const struct forward_ctx *ctx, struct message *const *msgs,
                                 enum msg_outcome *outcome, size_t n)
{
    unsigned long long errors = 0;
    /* One sink call per run of the same term: a batch popped across a term
     * change never lets an old term's message ride on a newer term's check. */
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && msgs[j]->epoch == msgs[i]->epoch) j++;
        errors += forward_run(ctx, msgs + i, outcome + i, j - i);
        i = j;
    }
    return errors;
}
