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
/* Pops up to max messages into out, waiting up to timeout_ms for the first.
 * Returns the count (0 on timeout, or when closed and empty). */
/* queue_push, but a blocked producer gives up (returns -2, m still the
 * caller's) once should_give_up(arg) returns true; checked at least every
 * 50 ms while blocked. */
int queue_push_cancellable(struct queue *q, struct message *m, struct message **evicted,
                           bool (*should_give_up)(void *arg), void *arg);
size_t queue_pop_batch(struct queue *q, struct message **out, size_t max, int64_t timeout_ms);
size_t queue_depth(struct queue *q);
/* Wakes everyone; pushes fail from now on; pops drain what is left. */
void queue_close(struct queue *q);
bool queue_closed(struct queue *q);
/* Frees remaining messages with message_finish(m, MSG_DROPPED_SHUTDOWN)
 * and the queue. */
void queue_destroy(struct queue *q);

#endif
