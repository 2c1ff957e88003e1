/* Term-scoped forwarding of one popped batch to a sink: the rule of
 * DESIGN.md "Term-scoped, lease-bounded delivery", apart from the threads,
 * queues and counters around it (src/gateway.c), so it is unit-tested with a
 * fake guard and a fake sink.
 *
 * A batch is cut into runs of messages of the same term (epoch); each run
 * is handed to the sink only while this replica leads now in that term (the
 * sink then asks again before every request, attempt and poll slice through
 * sink_call.time_left). A run whose term ended is settled as
 * MSG_DROPPED_TERM_ENDED without reaching the sink; once the cancel flag is
 * set (drain deadline at shutdown) as MSG_DROPPED_SHUTDOWN.
 *
 * The forwarder asks the endpoint's ActiveGuard itself
 * (baton_active_guard_term_state); the gateway only fills the context. */
#ifndef BATON_FORWARD_H
#define BATON_FORWARD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "baton/active_guard.h"
#include "common/message.h"
#include "src/sink.h"

/* How a term is asked about: baton_active_guard_term_state's signature. */
typedef enum baton_leader_state (*forward_term_state_fn)(const struct baton_active_guard *g,
                                                         uint64_t epoch, int64_t *left_ms);

struct forward_ctx {
    const struct sink_ops *sink_ops;
    void *sink;
    /* The endpoint's ActiveGuard; NULL = unguarded (always leader, no
     * deadline). */
    struct baton_active_guard *guard;
    /* Shutdown past the drain deadline: settle without the sink, and the
     * sink aborts (MSG_DROPPED_SHUTDOWN). NULL = never. */
    const atomic_bool *cancel;
    /* Inline delivery (the endpoint's own thread, src/gateway.c host_flush)
     * sets both: once *stopping is true and the monotonic clock passed
     * *drain_deadline_ms, the term counts as ended for this context (the
     * thread that delivers inline is the one stop() joins, so it must give
     * up by itself). A context with them is always term-checked, guarded
     * or not. NULL = not used (the forwarder thread gets *cancel instead). */
    const atomic_bool *stopping;
    const atomic_llong *drain_deadline_ms;
    /* Test seam: NULL (always, outside tests/unit/test_forward.c) =
     * baton_active_guard_term_state. A test that sets it passes a guard of
     * its own making (struct baton_active_guard is opaque, so the test
     * defines it) and answers for it; no gateway callback sits between the
     * forwarder and the guard. */
    forward_term_state_fn term_state;
    /* The receiver fenced a term (answered that it saw a newer epoch): every
     * term up to *fenced_epoch counts as ended for this context from that
     * moment, before the guard has given the lease up. on_fenced (the
     * sink_call's fenced) records it and ends the term; NULL = not used. */
    const _Atomic uint64_t *fenced_epoch;
    void (*on_fenced)(void *arg, uint64_t epoch, const char *what);
    void *fenced_arg;
};

/* Whether a request of term `epoch` may go out now (non-blocking; the
 * check forward_batch makes before each run). */
enum forward_gate {
    FORWARD_OPEN,      /* leader now in that term (or unchecked) */
    FORWARD_VERIFYING, /* the lease is being verified: send nothing yet, ask again */
    FORWARD_ENDED,     /* the term ended: settle as MSG_DROPPED_TERM_ENDED */
    FORWARD_CANCELLED, /* shutdown past the drain deadline: MSG_DROPPED_SHUTDOWN */
};
enum forward_gate forward_gate(const struct forward_ctx *ctx, uint64_t epoch);
/* The sink_call of ctx: what every request of the context runs under. */
struct sink_call forward_call(const struct forward_ctx *ctx);

/* Fills outcome[0..n) for msgs[0..n) (in order); returns the sink's failed
 * attempts. Does not finish the messages (the caller settles them). */
unsigned long long forward_batch(const struct forward_ctx *ctx, struct message *const *msgs,
                                 enum msg_outcome *outcome, size_t n);

/* The sink's time_left for a term-checked context (ctx passed as arg):
 * > 0 ms left in term `epoch`, 0 while verified, < 0 once the term ended. */
int64_t forward_time_left(void *ctx, uint64_t epoch);

#endif
