/* The sink interface. A sink is declared once in the main config (named) and
 * instantiated once per endpoint that uses it (create is called per
 * endpoint), so send() is only ever called from that endpoint's forwarder
 * thread. Shared resources (stdout) serialise inside the implementation. */
#ifndef BATON_SINK_H
#define BATON_SINK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "src/common/message.h"
#include "src/common/settings.h"

struct sink_ops {
    const char *type; /* "stdout", "http" */
    const struct setting_def *settings;
    size_t settings_size;
    /* Optional cross-field validation after the table checks. */
    int (*validate)(const void *settings, char *msg, size_t msglen);
    void *(*create)(const char *name, const void *settings, char *err, size_t errlen);
    /* Delivers msgs[0..n); fills outcome[i] with MSG_DELIVERED or
     * MSG_DROPPED_SINK_FAILED (after the sink's own retries). Retries stop
     * early when *cancel turns true (shutdown past the drain deadline).
     * *attempt_errors receives the number of failed attempts (for metrics). */
    void (*send)(void *sink, struct message *const *msgs, size_t n, enum msg_outcome *outcome,
                 const atomic_bool *cancel, unsigned long long *attempt_errors);
    /* Readiness: 0 when the sink looks reachable, -1 with msg otherwise. */
    int (*check)(void *sink, char *msg, size_t msglen);
    void (*destroy)(void *sink);
};

const struct sink_ops *sink_lookup(const char *type);
extern const struct sink_ops *const sink_registry[];

#endif
