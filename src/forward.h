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
 * set (drain deadline at shutdown) as MSG_DROPPED_SHUTDOWN. */
#ifndef BATON_FORWARD_H
#define BATON_FORWARD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "baton/active_guard.h"
#include "common/message.h"
#include "src/sink.h"

struct forward_ctx {
    const struct sink_ops *sink_ops;
    void *sink;
    /* NULL = unguarded (always leader, no deadline). */
    enum baton_leader_state (*term_state)(void *arg, uint64_t epoch, int64_t *left_ms);
    void *arg;
    const atomic_bool *cancel;
};

/* Fills outcome[0..n) for msgs[0..n) (in order); returns the sink's failed
 * attempts. Does not finish the messages (the caller settles them). */
unsigned long long forward_batch(const struct forward_ctx *ctx, struct message *const *msgs,
                                 enum msg_outcome *outcome, size_t n);

/* The sink's time_left for a guarded context (ctx passed as arg): > 0 ms
 * left in term `epoch`, 0 while verified, < 0 once the term ended. */
int64_t forward_time_left(void *ctx, uint64_t epoch);

#endif
