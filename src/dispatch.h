/* Concurrent delivery: the forwarder of an endpoint whose sink has requests
 * in flight together (sink_ops.async: http max_in_flight) and whose
 * ordering is "key" or "none".
 *
 *   queue --pop--> window (src/keysched.c) --pick--> sink requests
 *                     ^                                   |
 *                     +------- finished, by request ------+
 *   window --settle, a finished prefix in receive order--> the host
 *
 * Every request is gated like a forward_batch run (src/forward.c) before it
 * is handed to the sink: sent only while this replica leads now in its
 * messages' term; a term that ended settles its waiting messages as
 * term_ended without the sink, and the sink aborts the term's requests in
 * flight (it asks the term before every write and poll slice). Settling in
 * receive order only keeps what the source is told (acks, CDC checkpoints,
 * replay marks) to a prefix of the stream. */
#ifndef BATON_DISPATCH_H
#define BATON_DISPATCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/message.h"
#include "src/forward.h"
#include "src/queue.h"

struct dispatch_host {
    struct queue *q;
    const struct forward_ctx *fctx; /* sink (with async ops), guard, cancel */
    size_t queue_batch_max;         /* messages popped at once */
    bool by_key;                    /* ordering "key" (else "none") */
    /* Settles msgs[0..n) (receive order) with their outcomes; errors: the
     * sink's failed attempts since the last call (n may be 0: only
     * attempts failed meanwhile). */
    void (*settle)(void *arg, struct message **msgs, const enum msg_outcome *outcome, size_t n,
                   unsigned long long errors);
    /* After every pop: the queue's depth, for the metrics. */
    void (*popped)(void *arg);
    void *arg;
    /* True while the dispatcher waits in the sink: a producer that queued a
     * message then wakes the sink (dispatch_wake). */
    atomic_bool waiting;
};

/* Runs until the queue is closed and everything taken from it is settled. */
void dispatch_run(struct dispatch_host *h);
/* A producer queued a message (after the push): wakes the dispatcher if it
 * waits in the sink. */
void dispatch_wake(struct dispatch_host *h);

#endif
