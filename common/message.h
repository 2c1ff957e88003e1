/* One forwarded message: its envelope (one JSON object, no newline) plus what
 * the forwarding path needs. One allocation per message: the JSON is stored
 * inline after the header. Ownership: whoever holds the pointer; the queue
 * and the forwarder pass it along; the forwarder calls message_finish().
 *
 * A message may come from a message pool (message_pool_new): the thread that
 * builds messages reuses the buffers the forwarder let go of, instead of a
 * malloc on one thread and a free on another per message (with glibc that
 * took arena locks, grew and trimmed the heap and cleared fresh pages: about
 * half of a CDC reader's time at saturation). */
#ifndef BATON_MESSAGE_H
#define BATON_MESSAGE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum msg_outcome {
    MSG_DELIVERED = 0,          /* the sink accepted it */
    MSG_DROPPED_QUEUE_FULL,     /* evicted by drop_oldest */
    MSG_DROPPED_NOT_LEADER,     /* the lease deadline had passed */
    MSG_DROPPED_SINK_FAILED,    /* the sink gave up after its retries */
    MSG_DROPPED_SHUTDOWN,       /* the drain deadline passed at exit */
    MSG_DROPPED_TERM_ENDED,     /* received in a lease term that ended before
                                   the sink took it: never delivered in a
                                   later term (settled by source semantics) */
};
const char *msg_outcome_name(enum msg_outcome o);

struct message;
struct message_pool;

/* What the sink said when it did not take a message (kept for the
 * dead-letter envelope and the drop log): set by the sink on failure only. */
#define MESSAGE_FAILURE_BODY_MAX 512
struct message_failure {
    bool rejected;  /* a non-retryable answer; false: retries gave out */
    int status;     /* the HTTP status of the last answer; 0 = none (no answer) */
    size_t body_len;
    char body[MESSAGE_FAILURE_BODY_MAX]; /* the first bytes of that answer's body */
};
/* Called exactly once per message, from the forwarder thread (or the thread
 * that dropped it), before the message is freed. Endpoints use it to ack
 * (RabbitMQ after_sink, MQTT QoS 1/2) or to advance a checkpoint. */
typedef void (*message_done_fn)(void *arg, const struct message *m, enum msg_outcome o);

#define MESSAGE_ID_MAX 96

struct message {
    struct message *next;      /* queue link, owned by the queue */
    uint64_t epoch;            /* lease fencing epoch (0 = unguarded) */
    int64_t received_mono_us;  /* when the endpoint received it */
    int64_t received_wall_ms;  /* the same on the wall clock (received_at);
                                  0 = not known */
    message_done_fn done;      /* optional */
    void *done_arg;
    uint64_t seq;              /* endpoint-defined (delivery tag, offset) */
    bool sender_waits;         /* the producer blocks until done: the
                                  forwarder hands it over without coalescing */
    bool raw;                  /* failover = "replay", standby: json holds the
                                  endpoint's compact record of the source
                                  message, rendered into an envelope only if
                                  it is replayed (endpoint_ops.replay_render) */
    uint64_t fp;               /* replay fingerprint of (channel or topic,
                                  payload); 0 = none (failover = "gap") */
    uint64_t key;              /* ordering key (message_key_hash of the
                                  source's key: channel, routing key, topic,
                                  table + primary key); 0 = none: the
                                  endpoint's one key (ordered with every
                                  other keyless message) */
    char id[MESSAGE_ID_MAX];   /* "" when the source has none */
    struct message_failure *failure; /* the sink's, when it did not take it;
                                        freed with the message */
    atomic_uint refs;          /* holders: the forwarding path, plus the
                                  replay ring that shares it (message_ref) */
    struct message_pool *pool; /* where it goes back to; NULL: free() */
    size_t cap;                /* room for json (len + 1 <= cap) */
    size_t len;                /* strlen(json) */
    char json[];               /* NUL terminated */
};

/* Copies json (len bytes) into a new message; aborts on OOM. json NULL:
 * room for len bytes, filled by the caller. */
struct message *message_new(const char *json, size_t len);
/* A pool of message buffers owned by one thread at a time (its owner: the
 * thread that builds the messages; an envelope's). The last unref of a
 * pooled message, on any thread, pushes it back (lock-free); the owner takes
 * the returned ones in one exchange when its own list is empty. Buffers
 * waiting to be reused hold at most about max_bytes of JSON room (more are
 * freed); messages of MESSAGE_POOL_MAX_BYTES or more are never pooled. */
#define MESSAGE_POOL_MAX_BYTES ((size_t)16 << 10)
struct message_pool *message_pool_create(size_t max_bytes);
/* The owner lets go. The pool is freed once every message it handed out
 * has come back (or now, when none is out). NULL is a no-op. */
void message_pool_release(struct message_pool *p);
/* message_new from the pool (owner thread only). p NULL: message_new. */
struct message *message_pool_new(struct message_pool *p, const char *json, size_t len);
/* Buffers handed out by p and not yet back; for tests. */
size_t message_pool_outstanding(struct message_pool *p);
/* The ordering key of a source key (FNV-1a, never 0). */
uint64_t message_key_hash(const void *key, size_t n);
/* The same over several parts, with a separator between them that no part
 * can fake (each part's length is hashed too). */
uint64_t message_key_hash_parts(const void *const *parts, const size_t *lens, size_t nparts);
/* Calls m->done (if any) with the outcome, then drops the caller's
 * reference (frees m when it was the last). NULL is a no-op. */
void message_finish(struct message *m, enum msg_outcome o);
/* Another holder of m (the replay ring keeps the leader's messages without
 * copying them): it reads only the immutable json, len, fp, id, epoch and
 * received_mono_us, and lets go with message_unref. */
struct message *message_ref(struct message *m);
/* Records what the sink said (copied; replaces an earlier record). Only
 * the forwarding path calls it, before it settles the message. */
void message_set_failure(struct message *m, const struct message_failure *f);
/* Drops one reference; frees m when it was the last. Never calls done. */
void message_unref(struct message *m);

#endif
