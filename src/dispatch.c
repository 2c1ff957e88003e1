/* Concurrent delivery (see src/dispatch.h).
 *
 * One thread: pops into the window while it has room, picks requests while
 * the sink's limit allows, runs the sink until a request finishes or a
 * message arrives, finishes the requests' messages in the window and
 * settles the finished prefix. Requests are kept (with their arrays) for
 * reuse, so the steady state allocates nothing. */
#include "src/dispatch.h"

#include <stdlib.h>
#include <time.h>

#include "common/util.h"
#include "src/keysched.h"
#include "src/sink.h"

/* One request and the window slots of its messages. */
struct dreq {
    struct sink_req r; /* first: the sink hands back &r */
    struct message **msgs;
    uint32_t *slots;
    struct dreq *next; /* free list */
};

struct dispatcher {
    struct dispatch_host *h;
    const struct sink_async_ops *ops;
    void *sink;
    struct keysched *ks;
    size_t window, batch;
    struct sink_call call;
    struct dreq *spare;
    size_t in_flight;
    struct message **buf; /* pops and settles, window entries */
    enum msg_outcome *outcome;
    struct sink_req **done;
    size_t done_max;
};

#define WINDOW_MAX 65536

static void dispatcher_init(struct dispatcher *d, struct dispatch_host *h)
{
    d->h = h;
    d->ops = h->fctx->sink_ops->async;
    d->sink = h->fctx->sink;
    size_t limit_max = d->ops->limit_max(d->sink);
    size_t batch = d->ops->batch_max(d->sink);
    /* room for every request in flight at its fullest, and as much again
     * to look ahead past busy keys; at least one pop */
    size_t w = limit_max * (batch < WINDOW_MAX ? batch : WINDOW_MAX);
    w = w < WINDOW_MAX / 2 ? 2 * w : WINDOW_MAX;
    if (w < h->queue_batch_max) w = h->queue_batch_max < WINDOW_MAX ? h->queue_batch_max : WINDOW_MAX;
    d->window = w;
    d->batch = batch < w ? batch : w;
    d->ks = keysched_create(w, h->by_key);
    d->call = forward_call(h->fctx);
    d->buf = xcalloc(w, sizeof *d->buf);
    d->outcome = xcalloc(w, sizeof *d->outcome);
    d->done_max = limit_max;
    d->done = xcalloc(d->done_max, sizeof *d->done);
}

static void dispatcher_free(struct dispatcher *d)
{
    while (d->spare) {
        struct dreq *q = d->spare;
        d->spare = q->next;
        free(q->msgs);
        free(q->slots);
        free(q);
    }
    keysched_destroy(d->ks);
    free(d->buf);
    free(d->outcome);
    free(d->done);
}

static struct dreq *dreq_take(struct dispatcher *d)
{
    struct dreq *q = d->spare;
    if (q) {
        d->spare = q->next;
        return q;
    }
    q = xcalloc(1, sizeof *q);
    q->msgs = xcalloc(d->batch, sizeof *q->msgs);
    q->slots = xcalloc(d->batch, sizeof *q->slots);
    return q;
}

static void dreq_put(struct dispatcher *d, struct dreq *q)
{
    q->next = d->spare;
    d->spare = q;
}

/* Takes what the queue holds, up to the window's room; waits for the first
 * message at most timeout_ms (< 0: until one comes or the queue closes).
 * Returns the count. */
static size_t take(struct dispatcher *d, int64_t timeout_ms)
{
    size_t room = keysched_room(d->ks);
    if (room == 0) return 0;
    size_t max = room < d->h->queue_batch_max ? room : d->h->queue_batch_max;
    size_t n = queue_pop_batch(d->h->q, d->buf, max, timeout_ms);
    for (size_t i = 0; i < n; i++) keysched_push(d->ks, d->buf[i]);
    if (d->h->popped) d->h->popped(d->h->arg);
    return n;
}

/* Hands requests to the sink while its limit allows. Returns how many
 * started; *verifying: a term is being verified (nothing may go for now). */
static size_t start_requests(struct dispatcher *d, bool *verifying)
{
    size_t started = 0;
    *verifying = false;
    while (d->in_flight < d->ops->limit(d->sink)) {
        struct dreq *q = dreq_take(d);
        size_t n = keysched_pick(d->ks, q->msgs, q->slots, d->batch);
        if (n == 0) {
            dreq_put(d, q);
            break;
        }
        switch (forward_gate(d->h->fctx, q->msgs[0]->epoch)) {
        case FORWARD_OPEN:
            q->r.msgs = q->msgs;
            q->r.n = n;
            d->ops->submit(d->sink, &q->r, &d->call);
            d->in_flight++;
            started++;
            continue;
        case FORWARD_VERIFYING:
            keysched_unpick(d->ks, q->slots, n);
            dreq_put(d, q);
            *verifying = true;
            return started;
        case FORWARD_ENDED:
            keysched_finish(d->ks, q->slots, n, MSG_DROPPED_TERM_ENDED);
            break;
        case FORWARD_CANCELLED:
            keysched_finish(d->ks, q->slots, n, MSG_DROPPED_SHUTDOWN);
            break;
        }
        dreq_put(d, q);
    }
    return started;
}

/* The requests the sink handed back: their messages are finished. */
static void finish_requests(struct dispatcher *d, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct dreq *q = (struct dreq *)d->done[i];
        keysched_finish(d->ks, q->slots, q->r.n, q->r.outcome);
        d->in_flight--;
        dreq_put(d, q);
    }
}

/* Settles the finished prefix, in receive order. */
static void settle_prefix(struct dispatcher *d)
{
    size_t n;
    while ((n = keysched_settle(d->ks, d->buf, d->outcome, d->window)) > 0) {
        unsigned long long errors = d->call.attempt_errors;
        d->call.attempt_errors = 0;
        d->h->settle(d->h->arg, d->buf, d->outcome, n, errors);
    }
}

/* Runs the sink until a request finishes, a message is queued (the
 * producer wakes the sink), or at most wait_ms. */
static void run_sink(struct dispatcher *d, int64_t wait_ms)
{
    struct dispatch_host *h = d->h;
    /* A producer's wake-up is asked for only when a message could be
     * taken (the window has room): a full window waits for answers alone,
     * not woken once per message queued meanwhile. */
    if (wait_ms > 0 && keysched_room(d->ks) > 0) {
        atomic_store(&h->waiting, true);
        /* a message queued before the flag was seen is not waited for */
        if (queue_depth(h->q) > 0) wait_ms = 0;
    }
    size_t n = d->ops->run(d->sink, wait_ms, d->done, d->done_max);
    atomic_store(&h->waiting, false);
    finish_requests(d, n);
    /* failed attempts of requests still retrying show in the metrics now,
     * not when the request ends (a receiver down for minutes) */
    if (n == 0 && d->call.attempt_errors) {
        unsigned long long errors = d->call.attempt_errors;
        d->call.attempt_errors = 0;
        h->settle(h->arg, NULL, NULL, 0, errors);
    }
}

void dispatch_run(struct dispatch_host *h)
{
    struct dispatcher d = {0};
    dispatcher_init(&d, h);
    for (;;) {
        bool idle = d.in_flight == 0 && keysched_held(d.ks) == 0;
        if (idle && queue_closed(h->q) && queue_depth(h->q) == 0) break;
        /* nothing held: wait for the queue (a push or close wakes it) */
        size_t got = take(&d, idle ? -1 : 0);
        if (idle && got == 0) continue;
        if (h->fctx->cancel && atomic_load(h->fctx->cancel))
            keysched_finish_waiting(d.ks, MSG_DROPPED_SHUTDOWN);
        bool verifying;
        size_t started = start_requests(&d, &verifying);
        settle_prefix(&d);
        if (d.in_flight > 0) {
            /* Only poll (and come back for more at once) while requests are
             * being started and more wait in the queue; otherwise wait for
             * an answer, or for a producer's wake-up (a new message may have
             * a free key). */
            bool more = started > 0 && keysched_room(d.ks) > 0 && queue_depth(h->q) > 0 &&
                        d.in_flight < d.ops->limit(d.sink);
            run_sink(&d, more ? 0 : 50);
            settle_prefix(&d);
        } else if (verifying) {
            struct timespec ts = {0, 1000000}; /* the lease is being verified */
            nanosleep(&ts, NULL);
        }
    }
    dispatcher_free(&d);
}

void dispatch_wake(struct dispatch_host *h)
{
    /* pairs with run_sink's store then depth check: either it sees the
     * message, or this sees the flag */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&h->waiting, memory_order_relaxed) && atomic_exchange(&h->waiting, false))
        h->fctx->sink_ops->async->wake(h->fctx->sink);
}
