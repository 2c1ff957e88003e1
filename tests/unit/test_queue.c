/* Unit tests: the bounded message queue. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "common/util.h"
#include "src/queue.h"

static atomic_int done_count[5];
static void on_done(void *arg, const struct message *m, enum msg_outcome o)
{
    (void)arg;
    (void)m;
    atomic_fetch_add(&done_count[o], 1);
}

static struct message *mk(uint64_t seq)
{
    struct message *m = message_new("{}", 2);
    m->seq = seq;
    m->done = on_done;
    return m;
}

static void reset_done(void)
{
    for (int i = 0; i < 5; i++) atomic_store(&done_count[i], 0);
}

struct pusher {
    struct queue *q;
    struct message *m;
    atomic_int state; /* 0 = not started, 1 = pushing, 2 = returned */
    int rc;
};

static void *push_thread(void *arg)
{
    struct pusher *p = arg;
    atomic_store(&p->state, 1);
    p->rc = queue_push(p->q, p->m, NULL);
    atomic_store(&p->state, 2);
    return NULL;
}

static void test_block_blocks_then_proceeds(void **state)
{
    (void)state;
    reset_done();
    struct queue *q = queue_create(2, QUEUE_BLOCK);
    struct message *ev = (void *)1;
    assert_int_equal(queue_push(q, mk(1), &ev), 0);
    assert_null(ev);
    assert_int_equal(queue_push(q, mk(2), NULL), 0);
    assert_int_equal(queue_depth(q), 2);
    struct pusher p = {.q = q, .m = mk(3)};
    pthread_t t;
    pthread_create(&t, NULL, push_thread, &p);
    sleep_ms_cancellable(200, NULL);
    assert_int_equal(atomic_load(&p.state), 1); /* still blocked */
    assert_int_equal(queue_depth(q), 2);
    struct message *out[4];
    int64_t t0 = clock_mono_ms();
    assert_int_equal(queue_pop_batch(q, out, 1, 0), 1);
    assert_int_equal(out[0]->seq, 1);
    message_finish(out[0], MSG_DELIVERED);
    while (atomic_load(&p.state) != 2 && clock_mono_ms() - t0 < 5000) sleep_ms_cancellable(1, NULL);
    printf("blocked producer resumed after %lld ms\n", (long long)(clock_mono_ms() - t0));
    pthread_join(t, NULL);
    assert_int_equal(p.rc, 0);
    assert_int_equal(queue_depth(q), 2);
    assert_int_equal(queue_pop_batch(q, out, 4, 0), 2);
    assert_int_equal(out[0]->seq, 2);
    assert_int_equal(out[1]->seq, 3);
    message_finish(out[0], MSG_DELIVERED);
    message_finish(out[1], MSG_DELIVERED);
    queue_destroy(q);
    assert_int_equal(atomic_load(&done_count[MSG_DELIVERED]), 3);
}

static void test_drop_oldest(void **state)
{
    (void)state;
    reset_done();
    struct queue *q = queue_create(3, QUEUE_DROP_OLDEST);
    struct message *ev = NULL;
    for (uint64_t i = 1; i <= 3; i++) {
        assert_int_equal(queue_push(q, mk(i), &ev), 0);
        assert_null(ev);
    }
    assert_int_equal(queue_push(q, mk(4), &ev), 0);
    assert_non_null(ev);
    assert_int_equal(ev->seq, 1);
    assert_null(ev->next);
    message_finish(ev, MSG_DROPPED_QUEUE_FULL);
    assert_int_equal(queue_push(q, mk(5), &ev), 0);
    assert_int_equal(ev->seq, 2);
    message_finish(ev, MSG_DROPPED_QUEUE_FULL);
    /* without an evicted pointer the queue finishes the victim itself */
    assert_int_equal(queue_push(q, mk(6), NULL), 0);
    assert_int_equal(atomic_load(&done_count[MSG_DROPPED_QUEUE_FULL]), 3);
    assert_int_equal(queue_depth(q), 3);
    struct message *out[8];
    assert_int_equal(queue_pop_batch(q, out, 8, 0), 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(out[i]->seq, (uint64_t)(4 + i));
        message_finish(out[i], MSG_DELIVERED);
    }
    queue_destroy(q);
}

static void test_pop_batch_timeout(void **state)
{
    (void)state;
    struct queue *q = queue_create(4, QUEUE_BLOCK);
    struct message *out[4];
    int64_t t0 = clock_mono_ms();
    assert_int_equal(queue_pop_batch(q, out, 4, 250), 0);
    int64_t el = clock_mono_ms() - t0;
    printf("empty pop with 250 ms timeout returned after %lld ms\n", (long long)el);
    assert_true(el >= 240);
    assert_true(el < 3000);
    /* timeout 0 polls */
    t0 = clock_mono_ms();
    assert_int_equal(queue_pop_batch(q, out, 4, 0), 0);
    assert_true(clock_mono_ms() - t0 < 100);
    /* batch takes at most max, in order */
    for (uint64_t i = 0; i < 4; i++) queue_push(q, mk(i), NULL);
    assert_int_equal(queue_pop_batch(q, out, 3, 1000), 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(out[i]->seq, (uint64_t)i);
        message_finish(out[i], MSG_DELIVERED);
    }
    assert_int_equal(queue_depth(q), 1);
    queue_destroy(q);
}

struct popper {
    struct queue *q;
    size_t got;
    int64_t waited_ms;
};

static void *pop_thread(void *arg)
{
    struct popper *p = arg;
    struct message *out[2];
    int64_t t0 = clock_mono_ms();
    p->got = queue_pop_batch(p->q, out, 2, 10000);
    p->waited_ms = clock_mono_ms() - t0;
    for (size_t i = 0; i < p->got; i++) message_finish(out[i], MSG_DELIVERED);
    return NULL;
}

static void test_pop_wakes_on_push_and_close(void **state)
{
    (void)state;
    struct queue *q = queue_create(4, QUEUE_BLOCK);
    struct popper p = {.q = q};
    pthread_t t;
    pthread_create(&t, NULL, pop_thread, &p);
    sleep_ms_cancellable(100, NULL);
    queue_push(q, mk(1), NULL);
    pthread_join(t, NULL);
    assert_int_equal(p.got, 1);
    assert_true(p.waited_ms < 5000);
    /* close wakes a waiting consumer with 0 */
    pthread_create(&t, NULL, pop_thread, &p);
    sleep_ms_cancellable(100, NULL);
    queue_close(q);
    pthread_join(t, NULL);
    assert_int_equal(p.got, 0);
    assert_true(p.waited_ms < 5000);
    queue_destroy(q);
}

static void test_close_wakes_blocked_producer(void **state)
{
    (void)state;
    reset_done();
    struct queue *q = queue_create(1, QUEUE_BLOCK);
    assert_int_equal(queue_push(q, mk(1), NULL), 0);
    struct pusher p = {.q = q, .m = mk(2)};
    pthread_t t;
    pthread_create(&t, NULL, push_thread, &p);
    sleep_ms_cancellable(150, NULL);
    assert_int_equal(atomic_load(&p.state), 1);
    assert_false(queue_closed(q));
    int64_t t0 = clock_mono_ms();
    queue_close(q);
    pthread_join(t, NULL);
    printf("close woke the blocked producer in %lld ms\n", (long long)(clock_mono_ms() - t0));
    assert_true(queue_closed(q));
    assert_int_equal(p.rc, -1);
    /* the rejected message is still the caller's */
    assert_int_equal(p.m->seq, 2);
    message_finish(p.m, MSG_DROPPED_SHUTDOWN);
    /* pushes fail (both policies); pops drain what is left, then return 0 */
    struct message *m3 = mk(3);
    assert_int_equal(queue_push(q, m3, NULL), -1);
    message_finish(m3, MSG_DROPPED_SHUTDOWN);
    struct message *out[2];
    assert_int_equal(queue_pop_batch(q, out, 2, 1000), 1);
    assert_int_equal(out[0]->seq, 1);
    message_finish(out[0], MSG_DELIVERED);
    int64_t t1 = clock_mono_ms();
    assert_int_equal(queue_pop_batch(q, out, 2, 5000), 0);
    assert_true(clock_mono_ms() - t1 < 1000); /* closed: no waiting */
    queue_destroy(q);

    struct queue *d = queue_create(1, QUEUE_DROP_OLDEST);
    queue_close(d);
    struct message *m4 = mk(4);
    assert_int_equal(queue_push(d, m4, NULL), -1);
    message_finish(m4, MSG_DROPPED_SHUTDOWN);
    queue_destroy(d);
}

static atomic_bool give_up_flag;
static bool give_up_when_flagged(void *arg)
{
    (void)arg;
    return atomic_load(&give_up_flag);
}

static void *push_cancellable_thread(void *arg)
{
    struct pusher *p = arg;
    atomic_store(&p->state, 1);
    p->rc = queue_push_cancellable(p->q, p->m, NULL, give_up_when_flagged, NULL);
    atomic_store(&p->state, 2);
    return NULL;
}

static void test_blocked_producer_gives_up(void **state)
{
    (void)state;
    reset_done();
    atomic_store(&give_up_flag, false);
    struct queue *q = queue_create(1, QUEUE_BLOCK);
    assert_int_equal(queue_push(q, mk(1), NULL), 0);
    struct pusher p = {.q = q, .m = mk(2)};
    pthread_t t;
    pthread_create(&t, NULL, push_cancellable_thread, &p);
    sleep_ms_cancellable(200, NULL);
    assert_int_equal(atomic_load(&p.state), 1); /* still blocked: no room, no give-up */
    int64_t t0 = clock_mono_ms();
    atomic_store(&give_up_flag, true);
    pthread_join(t, NULL);
    int64_t waited = clock_mono_ms() - t0;
    printf("blocked producer gave up %lld ms after being told\n", (long long)waited);
    assert_true(waited < 1000);
    assert_int_equal(p.rc, -2);
    assert_int_equal(p.m->seq, 2); /* still the caller's */
    message_finish(p.m, MSG_DROPPED_SHUTDOWN);
    /* with room, the predicate is not consulted: the push succeeds */
    struct message *out[1];
    assert_int_equal(queue_pop_batch(q, out, 1, 100), 1);
    message_finish(out[0], MSG_DELIVERED);
    assert_int_equal(queue_push_cancellable(q, mk(3), NULL, give_up_when_flagged, NULL), 0);
    assert_int_equal(queue_depth(q), 1);
    queue_destroy(q);
}

static void test_destroy_finishes_remaining(void **state)
{
    (void)state;
    reset_done();
    struct queue *q = queue_create(10, QUEUE_BLOCK);
    for (uint64_t i = 0; i < 7; i++) queue_push(q, mk(i), NULL);
    queue_destroy(q);
    assert_int_equal(atomic_load(&done_count[MSG_DROPPED_SHUTDOWN]), 7);
}

#define PRODUCERS 4
#define PER_PRODUCER 20000

static atomic_int push_failures;

struct producer {
    struct queue *q;
    unsigned id;
};

static void *produce(void *arg)
{
    struct producer *p = arg;
    for (uint64_t i = 0; i < PER_PRODUCER; i++) {
        struct message *m = mk((uint64_t)p->id << 32 | i);
        /* cmocka asserts must not run off the main thread: count instead */
        if (queue_push(p->q, m, NULL) != 0) {
            atomic_fetch_add(&push_failures, 1);
            message_finish(m, MSG_DROPPED_SHUTDOWN);
        }
    }
    return NULL;
}

static void test_multi_producer(void **state)
{
    (void)state;
    reset_done();
    struct queue *q = queue_create(64, QUEUE_BLOCK);
    pthread_t t[PRODUCERS];
    struct producer p[PRODUCERS];
    int64_t t0 = clock_mono_ms();
    for (unsigned i = 0; i < PRODUCERS; i++) {
        p[i] = (struct producer){.q = q, .id = i};
        pthread_create(&t[i], NULL, produce, &p[i]);
    }
    uint64_t next[PRODUCERS] = {0};
    size_t total = 0, batches = 0;
    struct message *out[32];
    while (total < PRODUCERS * PER_PRODUCER) {
        size_t n = queue_pop_batch(q, out, 32, 5000);
        assert_true(n > 0); /* a timeout here would mean a lost wakeup */
        assert_true(queue_depth(q) <= 64);
        batches++;
        for (size_t i = 0; i < n; i++) {
            unsigned id = (unsigned)(out[i]->seq >> 32);
            uint64_t s = out[i]->seq & 0xffffffffu;
            assert_true(id < PRODUCERS);
            assert_int_equal(s, next[id]); /* FIFO per producer */
            next[id]++;
            message_finish(out[i], MSG_DELIVERED);
        }
        total += n;
    }
    for (unsigned i = 0; i < PRODUCERS; i++) pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&push_failures), 0);
    printf("%d producers x %d messages: %zu received in %zu batches, %lld ms\n", PRODUCERS,
           PER_PRODUCER, total, batches, (long long)(clock_mono_ms() - t0));
    assert_int_equal(total, PRODUCERS * PER_PRODUCER);
    assert_int_equal(queue_depth(q), 0);
    assert_int_equal(atomic_load(&done_count[MSG_DELIVERED]), PRODUCERS * PER_PRODUCER);
    queue_destroy(q);
}

/* ---- the delivery token (queue_claim / queue_release) ------------------ */

struct seq_popper {
    struct queue *q;
    size_t max;
    uint64_t seqs[16];
    atomic_size_t got; /* set once the pop returned */
    atomic_bool returned;
    atomic_bool entered; /* set right before the pop */
};

static void *seq_pop_thread(void *arg)
{
    struct seq_popper *p = arg;
    struct message *out[16];
    atomic_store(&p->entered, true);
    size_t n = queue_pop_batch(p->q, out, p->max, 10000);
    for (size_t i = 0; i < n; i++) {
        p->seqs[i] = out[i]->seq;
        message_finish(out[i], MSG_DELIVERED);
    }
    atomic_store(&p->got, n);
    atomic_store(&p->returned, true);
    return NULL;
}

/* Starts the popper and lets it settle, idle, in queue_pop_batch: it is
 * waited for until it is about to pop (a thread can start late on a loaded
 * machine: a message pushed before would be popped at once, not waited
 * for), then 50 ms more. */
static void start_popper(pthread_t *t, struct seq_popper *p)
{
    pthread_create(t, NULL, seq_pop_thread, p);
    for (int i = 0; i < 10000 && !atomic_load(&p->entered); i++) sleep_ms_cancellable(1, NULL);
    sleep_ms_cancellable(50, NULL);
}

/* Waits (bounded) until the popper sits in queue_pop_batch: a claim
 * succeeds only then. */
static size_t claim_when_idle(struct queue *q, struct message **out, size_t max)
{
    for (int i = 0; i < 500; i++) {
        size_t n = queue_claim(q, out, max);
        if (n) return n;
        sleep_ms_cancellable(2, NULL);
    }
    return 0;
}

static void test_claim_only_while_consumer_idle(void **state)
{
    (void)state;
    struct queue *q = queue_create(8, QUEUE_BLOCK);
    struct message *mine[4];
    /* no consumer waiting: the token is not taken, the message stays */
    assert_int_equal(queue_push_quiet(q, mk(1), NULL, NULL, NULL), 0);
    assert_int_equal(queue_claim(q, mine, 4), 0);
    assert_int_equal(queue_depth(q), 1);
    struct message *out[4];
    assert_int_equal(queue_pop_batch(q, out, 4, 0), 1);
    message_finish(out[0], MSG_DELIVERED);

    struct seq_popper p = {.q = q, .max = 4};
    pthread_t t;
    start_popper(&t, &p);
    /* a quiet push does not wake the idle consumer ... */
    assert_int_equal(queue_push_quiet(q, mk(2), NULL, NULL, NULL), 0);
    sleep_ms_cancellable(100, NULL);
    assert_false(atomic_load(&p.returned));
    /* ... the producer takes it itself */
    assert_int_equal(claim_when_idle(q, mine, 4), 1);
    assert_int_equal(mine[0]->seq, 2);
    /* while the token is held the consumer pops nothing, woken or not */
    assert_int_equal(queue_push(q, mk(3), NULL), 0);
    sleep_ms_cancellable(100, NULL);
    assert_false(atomic_load(&p.returned));
    assert_int_equal(queue_claim(q, out, 4), 0); /* one holder at a time */
    message_finish(mine[0], MSG_DELIVERED);
    queue_release(q, NULL, 0); /* wakes the consumer: 3 is left */
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&p.got), 1);
    assert_int_equal(p.seqs[0], 3);
    queue_destroy(q);
}

static void test_release_gives_back_in_front_in_order(void **state)
{
    (void)state;
    struct queue *q = queue_create(8, QUEUE_BLOCK);
    struct seq_popper p = {.q = q, .max = 8};
    pthread_t t;
    start_popper(&t, &p); /* the consumer waits, idle */
    for (uint64_t i = 1; i <= 3; i++) assert_int_equal(queue_push_quiet(q, mk(i), NULL, NULL, NULL), 0);
    struct message *mine[2];
    assert_int_equal(claim_when_idle(q, mine, 2), 2);
    assert_int_equal(queue_depth(q), 1);
    assert_int_equal(queue_push_quiet(q, mk(4), NULL, NULL, NULL), 0);
    queue_release(q, mine, 2); /* not delivered: back in front */
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&p.got), 4);
    for (uint64_t i = 0; i < 4; i++) assert_int_equal(p.seqs[i], i + 1);
    assert_int_equal(queue_depth(q), 0);
    queue_destroy(q);
}

/* The holder takes batch after batch; the consumer pops none of them and
 * none is left when the token goes back. */
static void test_claim_more_while_holding(void **state)
{
    (void)state;
    struct queue *q = queue_create(8, QUEUE_BLOCK);
    struct message *mine[2];
    assert_int_equal(queue_push(q, mk(1), NULL), 0);
    assert_int_equal(queue_claim_more(q, mine, 2), 0); /* no token: nothing */
    assert_int_equal(queue_depth(q), 1);
    struct message *out[4];
    assert_int_equal(queue_pop_batch(q, out, 4, 0), 1);
    message_finish(out[0], MSG_DELIVERED);

    struct seq_popper p = {.q = q, .max = 8};
    pthread_t t;
    start_popper(&t, &p);
    for (uint64_t i = 1; i <= 5; i++) assert_int_equal(queue_push_quiet(q, mk(i), NULL, NULL, NULL), 0);
    assert_int_equal(claim_when_idle(q, mine, 2), 2);
    uint64_t next = 1;
    size_t n = 2;
    while (n > 0) {
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(mine[i]->seq, next++);
            message_finish(mine[i], MSG_DELIVERED);
        }
        n = queue_claim_more(q, mine, 2);
    }
    assert_int_equal(next, 6);
    assert_int_equal(queue_depth(q), 0);
    assert_false(atomic_load(&p.returned));
    assert_int_equal(queue_push(q, mk(6), NULL), 0); /* the consumer still waits for it */
    queue_release(q, NULL, 0);
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&p.got), 1);
    assert_int_equal(p.seqs[0], 6);
    queue_destroy(q);
}

static void test_quiet_push_wakes_at_limit_and_when_full(void **state)
{
    (void)state;
    struct queue *q = queue_create(4, QUEUE_BLOCK);
    queue_set_quiet_limit(q, 3);
    struct seq_popper p = {.q = q, .max = 8};
    pthread_t t;
    start_popper(&t, &p);
    assert_int_equal(queue_push_quiet(q, mk(1), NULL, NULL, NULL), 0);
    assert_int_equal(queue_push_quiet(q, mk(2), NULL, NULL, NULL), 0);
    sleep_ms_cancellable(100, NULL);
    assert_false(atomic_load(&p.returned));
    assert_int_equal(queue_push_quiet(q, mk(3), NULL, NULL, NULL), 0); /* the limit */
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&p.got), 3);

    /* with the limit at the capacity, a producer that must wait for room
     * wakes the consumer first (it would wait forever otherwise) */
    queue_set_quiet_limit(q, 100);
    struct seq_popper p2 = {.q = q, .max = 8};
    for (uint64_t i = 1; i <= 4; i++) assert_int_equal(queue_push_quiet(q, mk(i), NULL, NULL, NULL), 0);
    pthread_create(&t, NULL, seq_pop_thread, &p2);
    assert_int_equal(queue_push_quiet(q, mk(5), NULL, NULL, NULL), 0); /* blocks until popped */
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&p2.got), 4);
    assert_int_equal(queue_depth(q), 1);
    queue_destroy(q);
}

/* One producer that pushes quietly and delivers what it can claim, one
 * consumer: every message is delivered once, in order, by one thread at a
 * time; close while the token is held waits for the release. */
#define TOKEN_MSGS 20000
static atomic_int delivering;
static atomic_int overlap;
static pthread_mutex_t order_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t order_next;
static atomic_int order_errors;

static void deliver_in_order(struct message **m, size_t n)
{
    if (atomic_fetch_add(&delivering, 1) != 0) atomic_fetch_add(&overlap, 1);
    pthread_mutex_lock(&order_mu);
    for (size_t i = 0; i < n; i++) {
        if (m[i]->seq != order_next) atomic_fetch_add(&order_errors, 1);
        order_next = m[i]->seq + 1;
        message_finish(m[i], MSG_DELIVERED);
    }
    pthread_mutex_unlock(&order_mu);
    atomic_fetch_sub(&delivering, 1);
}

static atomic_size_t claimed_batches;

static void *token_producer(void *arg)
{
    struct queue *q = arg;
    struct message *mine[8];
    for (uint64_t i = 0; i < TOKEN_MSGS;) {
        size_t burst = 1 + (i % 7);
        for (size_t k = 0; k < burst && i < TOKEN_MSGS; k++, i++)
            assert_int_equal(queue_push_quiet(q, mk(i), NULL, NULL, NULL), 0);
        size_t n = queue_claim(q, mine, 8);
        if (n == 0) {
            queue_wake(q);
            continue;
        }
        atomic_fetch_add(&claimed_batches, 1);
        if (i % 5 == 0) {
            queue_release(q, mine, n); /* "the sink is not ready": give back */
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL); /* the consumer takes them meanwhile */
        } else {
            deliver_in_order(mine, n);
            queue_release(q, NULL, 0);
        }
    }
    return NULL;
}

static void test_token_keeps_order_and_one_deliverer(void **state)
{
    (void)state;
    reset_done();
    order_next = 0;
    atomic_store(&overlap, 0);
    atomic_store(&order_errors, 0);
    atomic_store(&claimed_batches, 0);
    struct queue *q = queue_create(64, QUEUE_BLOCK);
    queue_set_quiet_limit(q, 16);
    pthread_t t;
    pthread_create(&t, NULL, token_producer, q);
    struct message *out[8];
    size_t popped = 0;
    while (atomic_load(&done_count[MSG_DELIVERED]) < TOKEN_MSGS) {
        size_t n = queue_pop_batch(q, out, 8, 100);
        if (n) deliver_in_order(out, n);
        popped += n;
    }
    pthread_join(t, NULL);
    printf("%d messages: %zu popped by the consumer, %zu batches claimed by the producer\n",
           TOKEN_MSGS, popped, atomic_load(&claimed_batches));
    assert_int_equal(atomic_load(&order_errors), 0);
    assert_int_equal(atomic_load(&overlap), 0);
    assert_int_equal(order_next, TOKEN_MSGS);
    assert_int_equal(queue_depth(q), 0);
    assert_true(atomic_load(&claimed_batches) > 0); /* both paths were taken */
    assert_true(popped > 0);

    /* close while a producer holds the token: the consumer waits for the
     * release and then drains what was given back */
    struct seq_popper p = {.q = q, .max = 8};
    start_popper(&t, &p); /* the consumer waits, idle */
    assert_int_equal(queue_push_quiet(q, mk(7), NULL, NULL, NULL), 0);
    struct message *mine[1];
    assert_int_equal(claim_when_idle(q, mine, 1), 1);
    queue_close(q);
    sleep_ms_cancellable(100, NULL);
    assert_false(atomic_load(&p.returned));
    queue_release(q, mine, 1);
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&p.got), 1);
    assert_int_equal(p.seqs[0], 7);
    queue_destroy(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_blocks_then_proceeds),
        cmocka_unit_test(test_drop_oldest),
        cmocka_unit_test(test_pop_batch_timeout),
        cmocka_unit_test(test_pop_wakes_on_push_and_close),
        cmocka_unit_test(test_close_wakes_blocked_producer),
        cmocka_unit_test(test_blocked_producer_gives_up),
        cmocka_unit_test(test_destroy_finishes_remaining),
        cmocka_unit_test(test_multi_producer),
        cmocka_unit_test(test_claim_only_while_consumer_idle),
        cmocka_unit_test(test_release_gives_back_in_front_in_order),
        cmocka_unit_test(test_claim_more_while_holding),
        cmocka_unit_test(test_quiet_push_wakes_at_limit_and_when_full),
        cmocka_unit_test(test_token_keeps_order_and_one_deliverer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
