/* The sink interface. A sink is declared once in the main config (named) and
 * instantiated once per endpoint that uses it (create is called per
 * endpoint, with the endpoint's name), so send() is called for one endpoint
 * at a time: from its
 * forwarder thread, or from its endpoint thread holding the queue's delivery
 * token (inline delivery, see ready). Shared resources (stdout) serialise inside the implementation. */
#ifndef BATON_SINK_H
#define BATON_SINK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/message.h"
#include "common/settings.h"

/* What one send() runs under. Every message of one call belongs to the same
 * lease term (msgs[0]->epoch; the forwarder splits batches by term). */
struct sink_call {
    /* Shutdown past the drain deadline: abort at once (MSG_DROPPED_SHUTDOWN). */
    const atomic_bool *cancel;
    /* Term-scoped, lease-bounded delivery. NULL = unguarded (always live, no
     * deadline). Otherwise asked before every request, every retry attempt
     * and every poll slice: > 0 = ms left on the lease in the messages' term
     * (bound every blocking operation by it); 0 = the lease is being
     * verified (send nothing now, ask again shortly); < 0 = the term ended:
     * send nothing more, settle the rest as MSG_DROPPED_TERM_ENDED. */
    int64_t (*time_left)(void *arg, uint64_t epoch);
    void *arg;
    /* Out: failed attempts, for metrics. */
    unsigned long long attempt_errors;
};

/* Helpers for sinks (src/sinks.c). sink_time_left: call->time_left, or
 * INT64_MAX when unguarded. sink_wait_live: waits while the lease is being
 * verified (0), at most until the cancel flag; returns the time left (> 0),
 * or < 0 when the term ended, or 0 when cancelled. */
int64_t sink_time_left(const struct sink_call *call, uint64_t epoch);
int64_t sink_wait_live(const struct sink_call *call, uint64_t epoch);

struct sink_ops {
    const char *type; /* "stdout", "http" */
    const struct setting_def *settings;
    size_t settings_size;
    /* Optional cross-field validation after the table checks. */
    int (*validate)(const void *settings, char *msg, size_t msglen);
    /* name: the sink's, from the main file; endpoint: the endpoint this
     * instance serves (headers, log lines; NULL or "" = none). */
    void *(*create)(const char *name, const char *endpoint, const void *settings, char *err,
                    size_t errlen);
    /* Delivers msgs[0..n); fills outcome[i] with MSG_DELIVERED,
     * MSG_DROPPED_SINK_FAILED (after the sink's own retries),
     * MSG_DROPPED_TERM_ENDED (the term ended before it went out, or the lease
     * ran out during the operation: aborted, never "sent and hoped") or
     * MSG_DROPPED_SHUTDOWN (*call->cancel turned true). */
    void (*send)(void *sink, struct message *const *msgs, size_t n, enum msg_outcome *outcome,
                 struct sink_call *call);
    /* Optional: true when a send of `bytes` (the lines of a batch) would
     * complete at once, waiting for no reader and no server. Then the
     * endpoint's own thread may deliver a batch while the forwarder is idle
     * (src/gateway.c host_flush); send() stays bounded by the lease as
     * always if the answer was wrong (another writer filled a pipe in
     * between). NULL: every batch goes through the forwarder. */
    bool (*ready)(void *sink, size_t bytes);
    /* Readiness: 0 when the sink looks reachable, -1 with msg otherwise. */
    int (*check)(void *sink, char *msg, size_t msglen);
    void (*destroy)(void *sink);
};

const struct sink_ops *sink_lookup(const char *type);
extern const struct sink_ops *const sink_registry[];

#endif
