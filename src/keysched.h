/* The key scheduler of concurrent delivery: which popped messages may go
 * to the sink now, and in what order they are settled.
 *
 * It holds a window of messages taken from the endpoint's queue, in receive
 * order. Each is waiting, in flight (picked into a request) or finished
 * (its outcome known). Two rules:
 *
 *   pick    With ordering "key", a message may go when no message with its
 *           key (message.key) is in flight and no earlier waiting message
 *           has its key: per key, one request at a time, in receive order
 *           (head of line per key); different keys go in parallel, oldest
 *           first (fair across keys: a busy key holds one request, never
 *           the whole limit). With "none", any waiting message may go.
 *           A request holds messages of one term (epoch) only.
 *   settle  Messages leave the window in receive order only: the longest
 *           prefix of finished messages. So what the source is told (acks,
 *           CDC checkpoints, replay marks) always covers a prefix of the
 *           stream, never a message finished ahead of an unfinished one.
 *
 * Pure logic: no threads, no clock, no I/O (tests/unit/test_keysched.c).
 * One thread uses it (the endpoint's forwarder). */
#ifndef BATON_KEYSCHED_H
#define BATON_KEYSCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/message.h"

struct keysched;

/* window: messages held at most (>= 1); by_key: false = ordering "none". */
struct keysched *keysched_create(size_t window, bool by_key);
/* Frees the scheduler; messages still in it are the caller's (take them
 * out first). NULL is a no-op. */
void keysched_destroy(struct keysched *ks);

size_t keysched_room(const struct keysched *ks);    /* free slots */
size_t keysched_held(const struct keysched *ks);    /* messages in the window */
size_t keysched_waiting(const struct keysched *ks); /* not yet picked */

/* Appends m as waiting (keysched_room must be > 0). */
void keysched_push(struct keysched *ks, struct message *m);

/* Picks the next request: up to max waiting messages of one term that may
 * go now, oldest first. Fills msgs and slots (the handles to finish them
 * with); they are in flight from now on. Returns the count, 0 when nothing
 * may go now. */
size_t keysched_pick(struct keysched *ks, struct message **msgs, uint32_t *slots, size_t max);
/* Puts picked messages back as waiting, in their old places (the term was
 * being verified: nothing went out). */
void keysched_unpick(struct keysched *ks, const uint32_t *slots, size_t n);
/* Finishes picked (or waiting) messages with outcome o; their keys are
 * free for the next message. */
void keysched_finish(struct keysched *ks, const uint32_t *slots, size_t n, enum msg_outcome o);
/* Finishes every waiting message with o (a term ended, shutdown). */
void keysched_finish_waiting(struct keysched *ks, enum msg_outcome o);
/* Takes out up to max messages of the finished prefix, in receive order,
 * with their outcomes. Returns the count. */
size_t keysched_settle(struct keysched *ks, struct message **msgs, enum msg_outcome *outcome,
                       size_t max);

#endif
