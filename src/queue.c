/* Bounded MPSC message queue: mutex, two condition variables, intrusive
 * singly linked list through message->next.
 *
 * Cost per message on the hot path: one uncontended lock/unlock. The
 * condition variables are signalled only when someone waits on them (waiter
 * counts under the mutex), and the depth is an atomic so queue_depth() and
 * queue_closed() never take the lock.
 *
 * Delivery token (queue_claim / queue_release): a producer may take the
 * head itself while the consumer is idle; `claimed` keeps the consumer
 * from popping meanwhile, so messages still leave in queue order and one
 * thread at a time delivers. */
#include "src/queue.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "base/util.h"
#include "common/util.h"

struct queue {
    pthread_mutex_t mu;
    pthread_cond_t not_empty; /* the consumer waits here */
    pthread_cond_t not_full;  /* blocked producers wait here */
    struct message *head, *tail;
    atomic_size_t depth;  /* written under mu; read anywhere */
    size_t capacity;
    enum queue_policy policy;
    atomic_bool closed;   /* written under mu; read anywhere */
    unsigned consumers_waiting; /* under mu */
    unsigned producers_waiting; /* under mu */
    bool claimed;         /* under mu: a producer delivers the head itself */
    bool wake_sent;       /* under mu: not_empty signalled, the consumer not yet back */
    size_t quiet_limit;   /* a quiet push wakes the consumer from this depth */
};

struct queue *queue_create(size_t capacity, enum queue_policy policy)
{
    struct queue *q = xcalloc(1, sizeof *q);
    pthread_mutex_init(&q->mu, NULL);
    cond_init_clock(&q->not_empty, CLOCK_MONOTONIC);
    cond_init_clock(&q->not_full, CLOCK_MONOTONIC);
    q->capacity = capacity ? capacity : 1;
    q->policy = policy;
    q->quiet_limit = q->capacity;
    return q;
}

static void append(struct queue *q, struct message *m)
{
    m->next = NULL;
    if (q->tail)
        q->tail->next = m;
    else
        q->head = m;
    q->tail = m;
    atomic_store_explicit(&q->depth, atomic_load_explicit(&q->depth, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

static struct message *take(struct queue *q)
{
    struct message *m = q->head;
    if (!m) return NULL;
    q->head = m->next;
    if (!q->head) q->tail = NULL;
    m->next = NULL;
    atomic_store_explicit(&q->depth, atomic_load_explicit(&q->depth, memory_order_relaxed) - 1,
                          memory_order_relaxed);
    return m;
}

static void wake_for_room(struct queue *q, size_t n)
{
    if (n > 0 && q->producers_waiting) {
        if (n == 1)
            pthread_cond_signal(&q->not_full);
        else
            pthread_cond_broadcast(&q->not_full);
    }
}

int queue_push(struct queue *q, struct message *m, struct message **evicted)
{
    return queue_push_cancellable(q, m, evicted, NULL, NULL);
}

void queue_set_quiet_limit(struct queue *q, size_t depth)
{
    pthread_mutex_lock(&q->mu);
    q->quiet_limit = depth == 0 ? 1 : depth < q->capacity ? depth : q->capacity;
    pthread_mutex_unlock(&q->mu);
}

static int push(struct queue *q, struct message *m, struct message **evicted,
                bool (*should_give_up)(void *arg), void *arg, bool quiet)
{
    struct message *old = NULL;
    if (evicted) *evicted = NULL;
    pthread_mutex_lock(&q->mu);
    if (q->policy == QUEUE_BLOCK) {
        while (!q->closed && q->depth >= q->capacity) {
            if (should_give_up && should_give_up(arg)) {
                pthread_mutex_unlock(&q->mu);
                return -2;
            }
            /* a quiet producer never waits for room it did not ask for */
            if (q->consumers_waiting) {
                q->wake_sent = true;
                pthread_cond_signal(&q->not_empty);
            }
            q->producers_waiting++;
            if (should_give_up) {
                struct timespec dl = clock_deadline(CLOCK_MONOTONIC, 50);
                pthread_cond_timedwait(&q->not_full, &q->mu, &dl);
            } else {
                pthread_cond_wait(&q->not_full, &q->mu);
            }
            q->producers_waiting--;
        }
    }
    if (q->closed) {
        pthread_mutex_unlock(&q->mu);
        return -1;
    }
    if (q->depth >= q->capacity) old = take(q); /* drop_oldest */
    append(q, m);
    /* One wake-up per wait, signalled after the unlock: the consumer does
     * not wake into a mutex still held, and a burst of pushes does not pay
     * a futex call each while it is on its way. */
    bool wake = q->consumers_waiting && !q->wake_sent && (!quiet || q->depth >= q->quiet_limit);
    if (wake) q->wake_sent = true;
    pthread_mutex_unlock(&q->mu);
    if (wake) pthread_cond_signal(&q->not_empty);
    if (old) {
        if (evicted)
            *evicted = old;
        else
            message_finish(old, MSG_DROPPED_QUEUE_FULL); /* caller did not ask */
    }
    return 0;
}

int queue_push_cancellable(struct queue *q, struct message *m, struct message **evicted,
                           bool (*should_give_up)(void *arg), void *arg)
{
    return push(q, m, evicted, should_give_up, arg, false);
}

int queue_push_quiet(struct queue *q, struct message *m, struct message **evicted,
                     bool (*should_give_up)(void *arg), void *arg)
{
    return push(q, m, evicted, should_give_up, arg, true);
}

/* Nothing to pop for the consumer: empty (and open), or a producer holds
 * the delivery token (even once closed: it gives back what it could not
 * deliver, in order). */
static bool nothing_to_pop(const struct queue *q)
{
    return q->claimed || (!q->head && !q->closed);
}

size_t queue_pop_batch(struct queue *q, struct message **out, size_t max, int64_t timeout_ms)
{
    if (max == 0) return 0;
    pthread_mutex_lock(&q->mu);
    if (nothing_to_pop(q) && timeout_ms != 0) {
        q->consumers_waiting++;
        if (timeout_ms < 0) {
            while (nothing_to_pop(q)) {
                q->wake_sent = false; /* (again) waiting: the next push signals */
                pthread_cond_wait(&q->not_empty, &q->mu);
            }
        } else {
            struct timespec dl = clock_deadline(CLOCK_MONOTONIC, timeout_ms);
            while (nothing_to_pop(q)) {
                q->wake_sent = false;
                if (pthread_cond_timedwait(&q->not_empty, &q->mu, &dl) == ETIMEDOUT) break;
            }
        }
        q->consumers_waiting--;
    }
    size_t n = 0;
    while (!q->claimed && n < max && q->head) out[n++] = take(q);
    wake_for_room(q, n);
    pthread_mutex_unlock(&q->mu);
    return n;
}

size_t queue_claim(struct queue *q, struct message **out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&q->mu);
    if (!q->claimed && q->consumers_waiting > 0 && q->head && max > 0) {
        q->claimed = true;
        while (n < max && q->head) out[n++] = take(q);
        wake_for_room(q, n);
    }
    pthread_mutex_unlock(&q->mu);
    return n;
}

size_t queue_claim_more(struct queue *q, struct message **out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&q->mu);
    if (q->claimed) {
        while (n < max && q->head) out[n++] = take(q);
        wake_for_room(q, n);
    }
    pthread_mutex_unlock(&q->mu);
    return n;
}

void queue_release(struct queue *q, struct message **back, size_t n)
{
    pthread_mutex_lock(&q->mu);
    if (n > 0) { /* they were the head: they go back in front, in order */
        for (size_t i = 0; i + 1 < n; i++) back[i]->next = back[i + 1];
        back[n - 1]->next = q->head;
        if (!q->head) q->tail = back[n - 1];
        q->head = back[0];
        atomic_store_explicit(&q->depth, atomic_load_explicit(&q->depth, memory_order_relaxed) + n,
                              memory_order_relaxed);
    }
    q->claimed = false;
    if (q->consumers_waiting && (q->head || q->closed)) pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
}

void queue_wake(struct queue *q)
{
    pthread_mutex_lock(&q->mu);
    if (q->consumers_waiting && q->head && !q->claimed) pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
}

size_t queue_depth(struct queue *q)
{
    return atomic_load_explicit(&q->depth, memory_order_relaxed);
}

void queue_close(struct queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->closed = true;
    pthread_cond_broadcast(&q->not_empty);
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
}

bool queue_closed(struct queue *q)
{
    return atomic_load(&q->closed);
}

void queue_destroy(struct queue *q)
{
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    struct message *m = q->head;
    q->head = q->tail = NULL;
    atomic_store(&q->depth, 0);
    pthread_mutex_unlock(&q->mu);
    while (m) {
        struct message *next = m->next;
        m->next = NULL;
        message_finish(m, MSG_DROPPED_SHUTDOWN);
        m = next;
    }
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->not_full);
    pthread_mutex_destroy(&q->mu);
    free(q);
}
