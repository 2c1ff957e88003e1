/* Bounded multi-producer, single-consumer queue of messages between an
 * endpoint and its forwarder. Overflow policy: block (the producer waits for
 * room) or drop_oldest (the oldest queued message is evicted and returned to
 * the caller, who counts, logs and finishes it). */
#ifndef BATON_QUEUE_H
#define BATON_QUEUE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/message.h"

enum queue_policy { QUEUE_BLOCK = 0, QUEUE_DROP_OLDEST = 1 };

struct queue;

struct queue *queue_create(size_t capacity, enum queue_policy policy);
/* Returns 0 when queued. With drop_oldest and a full queue, *evicted gets the
 * oldest message (the new one is queued). With block, waits for room; returns
 * -1 (m not queued, still the caller's) once the queue is closed. */
int queue_push(struct queue *q, struct message *m, struct message **evicted);
/* queue_push, but a blocked producer gives up (returns -2, m still the
 * caller's) once should_give_up(arg) returns true; checked at least every
 * 50 ms while blocked. */
int queue_push_cancellable(struct queue *q, struct message *m, struct message **evicted,
                           bool (*should_give_up)(void *arg), void *arg);
/* queue_push_cancellable without waking the consumer, unless the depth
 * reaches the quiet limit (queue_set_quiet_limit; default the capacity) or
 * the producer has to wait for room. The producer promises a queue_flush-
 * like step before it blocks on anything else: queue_claim, or queue_wake. */
int queue_push_quiet(struct queue *q, struct message *m, struct message **evicted,
                     bool (*should_give_up)(void *arg), void *arg);
void queue_set_quiet_limit(struct queue *q, size_t depth);
/* Pops up to max messages into out, waiting up to timeout_ms (< 0: no
 * limit) for the first. Returns the count (0 on timeout, or when closed and
 * empty). Never pops while a producer holds the delivery token. */
size_t queue_pop_batch(struct queue *q, struct message **out, size_t max, int64_t timeout_ms);
/* The delivery token. While the consumer waits idle in queue_pop_batch and
 * nobody holds the token, takes it and up to max messages from the head
 * (returns their count; 0: token not taken, the consumer will pop them).
 * The holder delivers them itself, then calls queue_release, giving back
 * (in front, in order) the n it did not deliver; release wakes the consumer
 * when messages are left. One deliverer at a time, in queue order. */
size_t queue_claim(struct queue *q, struct message **out, size_t max);
/* The token's holder takes up to max more from the head (0: none left). */
size_t queue_claim_more(struct queue *q, struct message **out, size_t max);
void queue_release(struct queue *q, struct message **back, size_t n);
/* Wakes an idle consumer when messages wait (after quiet pushes). */
void queue_wake(struct queue *q);
size_t queue_depth(struct queue *q);
/* Wakes everyone; pushes fail from now on; pops drain what is left. */
void queue_close(struct queue *q);
bool queue_closed(struct queue *q);
/* Frees remaining messages with message_finish(m, MSG_DROPPED_SHUTDOWN)
 * and the queue. */
void queue_destroy(struct queue *q);

#endif
