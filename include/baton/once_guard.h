/* OnceGuard: message-level deduplication across replicas. One SET NX per
 * delivery identity; the winner proceeds, the others skip at once.
 * Key: <prefix>:once:<scope>:<key>. The key must come from the delivery
 * identity (a planned cron slot, a message id), never from a local clock
 * reading at execution time. Thread safe. */
#ifndef BATON_ONCE_GUARD_H
#define BATON_ONCE_GUARD_H

#include "baton/api.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct baton_locker;

struct baton_once_guard_options {
    const char *prefix; /* NULL = "baton" */
    int64_t ttl_ms;     /* 0 = 1 hour; must exceed the guarded action */
    bool fail_open;     /* backend failure: false = skip (default), true = allow */
    const char *log_name; /* endpoint name for log lines, may be NULL */
};

struct baton_once_guard_stats {
    atomic_ullong allowed;
    atomic_ullong skipped;        /* held elsewhere */
    atomic_ullong backend_errors; /* each also counted in allowed or skipped per policy */
};

/* locker NULL = single-process mode: always allow. The guard keeps its own
 * copies of scope and prefix; it does not own the locker. NULL when out of
 * memory. */
BATON_API struct baton_once_guard *baton_once_guard_create(struct baton_locker *locker, const char *scope,
                                     const struct baton_once_guard_options *opts);
BATON_API bool baton_once_guard_allow(struct baton_once_guard *g, const char *key);
BATON_API const struct baton_once_guard_stats *baton_once_guard_stats(const struct baton_once_guard *g);
BATON_API void baton_once_guard_destroy(struct baton_once_guard *g);

#endif
