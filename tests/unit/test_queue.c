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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
