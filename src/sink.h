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
#include <stdio.h>

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
    /* The receiver answered that it saw a newer epoch than `epoch` (HTTP
     * 409): the term is over for the receiver, so it must end here too, at
     * once (src/gateway.c ends it and gives the lease up). The sink settles
     * that request's messages as MSG_DROPPED_TERM_ENDED and never retries
     * it; the term's other requests are aborted by the next term check.
     * NULL = not asked for (the sink then only settles as term_ended). */
    void (*fenced)(void *arg, uint64_t epoch, const char *what);
    /* The lease behind the messages' term, for a store that checks it in the
     * writer's own transaction (the postgresql sink's lease_fence): 0 with
     * the lease key and the token of term `epoch`, -1 when this replica's
     * latest term has another epoch. NULL = unguarded. */
    int (*lease)(void *arg, uint64_t epoch, const char **key, char token[33]);
};

/* Why a message went to the dead-letter sink (its envelope's
 * "dead_letter":{"reason":...}, baton_messages_dead_lettered_total{reason}). */
enum dead_letter_reason {
    DEAD_LETTER_REJECTED = 0,      /* a non-retryable answer (4xx but 408, 409, 425, 429) */
    DEAD_LETTER_RETRIES_EXHAUSTED, /* retries = <number>, all failed */
    DEAD_LETTER_SHUTDOWN,          /* still queued when the drain at exit timed out */
};
#define DEAD_LETTER_REASONS 3
const char *dead_letter_reason_name(enum dead_letter_reason r);

/* Helpers for sinks (src/sinks.c). sink_time_left: call->time_left, or
 * INT64_MAX when unguarded. sink_wait_live: waits while the lease is being
 * verified (0), at most until the cancel flag; returns the time left (> 0),
 * or < 0 when the term ended, or 0 when cancelled. */
int64_t sink_time_left(const struct sink_call *call, uint64_t epoch);
int64_t sink_wait_live(const struct sink_call *call, uint64_t epoch);

/* One request of a concurrent sink (sink_async_ops): up to batch_max
 * messages of one term, in order, and what became of them. The dispatcher
 * (src/dispatch.c) owns it; the sink holds it from submit until run hands
 * it back. */
struct sink_req {
    struct message **msgs;
    size_t n;
    enum msg_outcome outcome; /* set by the sink when it hands it back */
};

/* What a concurrent sink shows of its requests (/metrics, /status). */
struct sink_flight {
    size_t in_flight; /* requests started and not handed back (retry waits included) */
    size_t limit;     /* how many may be in flight now (fixed, or adaptive) */
    double rtt_ms;    /* smoothed round-trip time of answered requests; 0 = none yet */
};

/* Requests in flight together. Every call but wake and flight comes from
 * one thread (the endpoint's dispatcher). */
struct sink_async_ops {
    /* How many requests may be in flight now, and how many messages one
     * request carries at most. */
    size_t (*limit)(void *sink);
    size_t (*limit_max)(void *sink);
    size_t (*batch_max)(void *sink);
    /* Starts r (never blocks on the network). call is the endpoint's, the
     * same for every request until the sink is destroyed: the sink asks
     * call->time_left for r's term before every write, attempt and poll
     * slice, exactly as send() does, and aborts r the moment its term ends
     * (MSG_DROPPED_TERM_ENDED) or *call->cancel turns true
     * (MSG_DROPPED_SHUTDOWN). */
    void (*submit)(void *sink, struct sink_req *r, struct sink_call *call);
    /* Runs the requests in flight for at most wait_ms (0: no waiting),
     * returning as soon as one finished or wake was called. Fills done with
     * up to max finished requests (outcome set); returns their count. */
    size_t (*run)(void *sink, int64_t wait_ms, struct sink_req **done, size_t max);
    /* Any thread: makes a waiting run return now (a message was queued). */
    void (*wake)(void *sink);
    /* Any thread: the figures for /metrics and /status. */
    void (*flight)(void *sink, struct sink_flight *out);
};

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
    /* Optional: requests in flight together (http max_in_flight). A sink
     * with it is driven by the dispatcher (src/dispatch.c) unless the
     * endpoint's ordering is "strict"; send() must still work (strict). */
    const struct sink_async_ops *async;
    /* Readiness: 0 when the sink looks reachable, -1 with msg otherwise. */
    int (*check)(void *sink, char *msg, size_t msglen);
    /* Optional: `baton --init-sink NAME [--apply]`. Writes to out what the
     * store needs before the sink can run (the postgresql sink: its
     * idempotent DDL), or creates it when apply. 0, or -1 with err. NULL:
     * the sink needs nothing set up. */
    int (*init)(const char *name, const void *settings, bool apply, FILE *out, char *err,
                size_t errlen);
    void (*destroy)(void *sink);
};

const struct sink_ops *sink_lookup(const char *type);

/* SIGHUP (logrotate): sinks that write files reopen them. main() calls
 * sinks_reopen_request from its signal loop; a sink compares
 * sinks_reopen_generation with the one it opened its file at before each
 * write. Any thread. */
void sinks_reopen_request(void);
unsigned sinks_reopen_generation(void);
extern const struct sink_ops *const sink_registry[];

#endif
