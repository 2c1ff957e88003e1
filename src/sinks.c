/* The sink registry: every sink type baton knows, and the helpers sinks
 * share for term-scoped, lease-bounded delivery. */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "src/sink.h"
#include "src/sink_impl.h"

const struct sink_ops *const sink_registry[] = {
    &sink_stdout_ops,
    &sink_http_ops,
    &sink_file_ops,
    &sink_redis_stream_ops,
    &sink_postgresql_ops,
    NULL,
};

const struct sink_ops *sink_lookup(const char *type)
{
    if (!type) return NULL;
    for (size_t i = 0; sink_registry[i]; i++)
        if (strcmp(sink_registry[i]->type, type) == 0) return sink_registry[i];
    return NULL;
}

const char *dead_letter_reason_name(enum dead_letter_reason r)
{
    switch (r) {
    case DEAD_LETTER_REJECTED: return "rejected";
    case DEAD_LETTER_RETRIES_EXHAUSTED: return "retries_exhausted";
    case DEAD_LETTER_SHUTDOWN: return "shutdown";
    }
    return "unknown";
}

static atomic_uint reopen_generation;

void sinks_reopen_request(void)
{
    atomic_fetch_add(&reopen_generation, 1);
}

unsigned sinks_reopen_generation(void)
{
    return atomic_load(&reopen_generation);
}

int64_t sink_time_left(const struct sink_call *call, uint64_t epoch)
{
    if (call == NULL || call->time_left == NULL) return INT64_MAX;
    return call->time_left(call->arg, epoch);
}

int64_t sink_wait_live(const struct sink_call *call, uint64_t epoch)
{
    for (;;) {
        if (call && call->cancel && atomic_load(call->cancel)) return 0;
        int64_t left = sink_time_left(call, epoch);
        if (left != 0) return left;
        /* being verified: resolves within a round trip, or the term ends */
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}
