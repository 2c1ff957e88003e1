/* The acquirer thread: see acquirer.h.
 *
 * One pass: under mu, the earliest next attempt of the active entries not
 * in flight is found; if it has come, every entry due within
 * ACQUIRER_COALESCE_MS is marked in flight and sent, mu released, in one
 * ops->try_lock_batch; mu taken again, each answer goes to its guard
 * (client->answered), which schedules the next attempt or takes the grant.
 * With nothing due the thread sleeps until the earliest next attempt, at
 * most ACQUIRER_MAX_SLEEP_MS (the boot clock jumps forward over a suspend;
 * the condition variable's clock does not). acquirer_remove waits on
 * idle_cv while its entry is in flight.
 *
 * Coalescing: the leases a holder process keeps are renewed in one batch
 * (renewer.h), so they expire within a few milliseconds of each other, and
 * a standby looks again right after the expiry it was told (held_pttl).
 * Sending the attempts due within ACQUIRER_COALESCE_MS together makes those
 * one round trip; an attempt sent up to that much early finds the key held
 * (with a few ms left) and is simply made again at its expiry, so a
 * takeover is not delayed by it. */
#include "guard/acquirer.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/glog.h"
#include "base/util.h"

#define ACQUIRER_MAX_SLEEP_MS 1000
#define ACQUIRER_COALESCE_MS 20
#define ACQUIRER_SMALL_BATCH 16 /* used when the batch arrays cannot grow */

struct acquirer {
    struct baton_locker *locker; /* not owned */
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* the thread waits here (CLOCK_MONOTONIC) */
    pthread_cond_t idle_cv; /* acquirer_remove waits here for in_flight to clear */
    struct acquirer_entry *head;
    size_t n_entries;
    /* the thread's own (it grows them under mu between batches) */
    struct locker_acquisition **batch;
    struct acquirer_entry **batch_e;
    size_t batch_cap;
    bool started, stop;
    pthread_t thread;
    atomic_ullong batches, attempts;
};

static uint64_t locker_gen(struct baton_locker *l)
{
    return l->ops->generation ? l->ops->generation(l) : 0;
}

/* mu held: room for n entries; false keeps the arrays as they are */
static bool grow(struct acquirer *a, size_t n)
{
    if (a->batch_cap >= n) return true;
    size_t cap = a->batch_cap ? a->batch_cap * 2 : 64;
    while (cap < n) cap *= 2;
    struct locker_acquisition **b = realloc(a->batch, cap * sizeof *b);
    if (b == NULL) return false;
    a->batch = b;
    struct acquirer_entry **be = realloc(a->batch_e, cap * sizeof *be);
    if (be == NULL) return false;
    a->batch_e = be;
    a->batch_cap = cap;
    return true;
}

static void *acquirer_main(void *arg)
{
    struct acquirer *a = arg;
    struct locker_acquisition *small[ACQUIRER_SMALL_BATCH];
    struct acquirer_entry *small_e[ACQUIRER_SMALL_BATCH];
    pthread_mutex_lock(&a->mu);
    while (!a->stop) {
        int64_t now = clock_boot_ms();
        int64_t earliest = INT64_MAX;
        for (struct acquirer_entry *e = a->head; e; e = e->next)
            if (e->active && !e->in_flight && e->next_attempt < earliest) earliest = e->next_attempt;
        if (earliest > now) {
            int64_t sleep = earliest - now;
            if (sleep > ACQUIRER_MAX_SLEEP_MS) sleep = ACQUIRER_MAX_SLEEP_MS;
            struct timespec ts = clock_deadline(CLOCK_MONOTONIC, sleep);
            pthread_cond_timedwait(&a->cv, &a->mu, &ts);
            continue;
        }
        struct locker_acquisition **batch = small;
        struct acquirer_entry **be = small_e;
        size_t cap = ACQUIRER_SMALL_BATCH;
        if (grow(a, a->n_entries)) {
            batch = a->batch;
            be = a->batch_e;
            cap = a->batch_cap;
        }
        size_t n = 0;
        for (struct acquirer_entry *e = a->head; e && n < cap; e = e->next) {
            if (!e->active || e->in_flight || e->next_attempt > now + ACQUIRER_COALESCE_MS) continue;
            e->in_flight = true;
            e->released = false;
            batch[n] = &e->req;
            be[n] = e;
            n++;
        }
        /* the arrays are this thread's: acquirer_add never touches them */
        pthread_mutex_unlock(&a->mu);
        uint64_t gen = locker_gen(a->locker); /* before the request: a break during it shows */
        a->locker->ops->try_lock_batch(a->locker, n, batch);
        atomic_fetch_add(&a->batches, 1);
        atomic_fetch_add(&a->attempts, (unsigned long long)n);
        pthread_mutex_lock(&a->mu);
        now = clock_boot_ms();
        for (size_t i = 0; i < n; i++) {
            struct acquirer_entry *e = be[i];
            e->in_flight = false;
            int64_t next = e->client->answered(e, &e->req, gen);
            if (next <= 0) {
                e->active = false; /* handed back */
            } else {
                /* announced while in flight: the attempt may have come
                 * before the release */
                if (e->released && now + e->release_delay < next) next = now + e->release_delay;
                e->next_attempt = next;
            }
            e->released = false;
        }
        pthread_cond_broadcast(&a->idle_cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

struct acquirer *acquirer_of(struct baton_locker *l)
{
    if (l == NULL || l->ops->try_lock_batch == NULL || l->ops->release_seq == NULL) return NULL;
    pthread_mutex_lock(&l->watch_mu);
    struct acquirer *a = l->acquirer;
    if (a == NULL) {
        a = calloc(1, sizeof *a);
        if (a != NULL) {
            a->locker = l;
            pthread_mutex_init(&a->mu, NULL);
            cond_init_clock(&a->cv, CLOCK_MONOTONIC);
            pthread_cond_init(&a->idle_cv, NULL);
            l->acquirer = a;
        }
    }
    pthread_mutex_unlock(&l->watch_mu);
    return a;
}

bool acquirer_add(struct acquirer *a, struct acquirer_entry *e, int64_t next_attempt)
{
    if (a == NULL) return false;
    pthread_mutex_lock(&a->mu);
    bool ok = true;
    if (!a->started) {
        int err = pthread_create(&a->thread, NULL, acquirer_main, a);
        if (err != 0) {
            glog_error("guard", NULL,
                       "cannot start the acquirer thread (%s): every standby attempts itself",
                       strerror(err));
            ok = false;
        } else {
            thread_name(a->thread, "acquirer", a->locker->ops->name);
            a->started = true;
        }
    }
    if (ok && !e->linked) {
        e->prev = NULL;
        e->next = a->head;
        if (a->head) a->head->prev = e;
        a->head = e;
        e->linked = true;
        a->n_entries++;
    }
    if (ok) {
        e->klen = strlen(e->req.key);
        e->next_attempt = next_attempt;
        e->released = false;
        e->active = true;
        pthread_cond_signal(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return ok;
}

void acquirer_remove(struct acquirer *a, struct acquirer_entry *e)
{
    if (a == NULL) return;
    pthread_mutex_lock(&a->mu);
    while (e->in_flight) pthread_cond_wait(&a->idle_cv, &a->mu);
    e->active = false;
    if (e->linked) {
        if (e->prev)
            e->prev->next = e->next;
        else
            a->head = e->next;
        if (e->next) e->next->prev = e->prev;
        e->next = e->prev = NULL;
        e->linked = false;
        a->n_entries--;
    }
    pthread_mutex_unlock(&a->mu);
}

void acquirer_released(struct acquirer *a, const char *key, size_t klen)
{
    if (a == NULL) return;
    pthread_mutex_lock(&a->mu);
    int64_t now = clock_boot_ms();
    bool woke = false;
    for (struct acquirer_entry *e = a->head; e; e = e->next) {
        if (!e->active || e->klen != klen || memcmp(e->req.key, key, klen) != 0) continue;
        if (e->in_flight) {
            e->released = true;
        } else if (now + e->release_delay < e->next_attempt) {
            e->next_attempt = now + e->release_delay;
            woke = true;
        }
    }
    if (woke) pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

void acquirer_destroy(struct acquirer *a)
{
    if (a == NULL) return;
    pthread_mutex_lock(&a->mu);
    a->stop = true;
    pthread_cond_signal(&a->cv);
    bool started = a->started;
    pthread_mutex_unlock(&a->mu);
    if (started) pthread_join(a->thread, NULL);
    free(a->batch);
    free(a->batch_e);
    pthread_cond_destroy(&a->idle_cv);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

void acquirer_traffic(const struct acquirer *a, uint64_t *batches, uint64_t *attempts)
{
    *batches = a ? atomic_load(&a->batches) : 0;
    *attempts = a ? atomic_load(&a->attempts) : 0;
}
