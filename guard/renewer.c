/* The renewer thread: see renewer.h.
 *
 * One pass: under mu, every active entry not in flight is asked for its
 * deadline (an ended term is handed back at once); the due ones (next_renew
 * reached) are marked in flight and sent, mu released, in one
 * ops->renew_batch; mu taken again, each answer goes to its guard
 * (client->answered), which extends its term or takes the lease back. With
 * nothing due the thread sleeps until the earliest next renewal or
 * deadline, at most RENEWER_MAX_SLEEP_MS (the boot clock, which deadlines
 * use, jumps forward over a suspend; the condition variable's clock does
 * not). renewer_remove waits on idle_cv while its entry is in flight.
 *
 * The watch thread: while a batch is out (blocked up to the locker's command
 * timeout when Redis hangs), the renewer thread cannot see a deadline pass,
 * and the renewals it has not sent yet may be the ones that pass theirs. So
 * a second thread looks at every active entry's deadline at the earliest
 * one (at least once a second) and hands back a term that ended at once,
 * whether its renewal is in flight or not: its guard demotes then (on_demoted),
 * not when the batch returns. Forwarders never depended on it (they read
 * the deadline themselves); the guard still waits for a renewal in flight
 * before it releases or begins another term (renewer_remove). */
#include "guard/renewer.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/glog.h"
#include "base/util.h"

#define RENEWER_MAX_SLEEP_MS 1000

struct renewer {
    struct baton_locker *locker; /* not owned */
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* the thread waits here (CLOCK_MONOTONIC) */
    pthread_cond_t idle_cv; /* renewer_remove waits here for in_flight to clear */
    pthread_cond_t watch_cv; /* the watch thread waits here (CLOCK_MONOTONIC) */
    struct renewer_entry *head;
    size_t n_entries;
    struct locker_renewal **batch; /* capacity >= n_entries */
    struct renewer_entry **batch_e;
    size_t batch_cap;
    bool started, watching, stop;
    pthread_t thread, watch;
    atomic_ullong batches, renewals;
};

static uint64_t locker_gen(struct baton_locker *l)
{
    return l->ops->generation ? l->ops->generation(l) : 0;
}

static void *renewer_main(void *arg)
{
    struct renewer *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        int64_t now = clock_boot_ms();
        int64_t wake = now + RENEWER_MAX_SLEEP_MS;
        size_t n = 0;
        for (struct renewer_entry *e = r->head; e; e = e->next) {
            if (!e->active || e->in_flight) continue;
            int64_t d = e->client->deadline(e);
            if (d <= 0) {
                e->active = false; /* handed back: the term ended */
                continue;
            }
            if (e->next_renew <= now) {
                e->in_flight = true;
                r->batch[n] = &e->req;
                r->batch_e[n] = e;
                n++;
                continue;
            }
            if (e->next_renew < wake) wake = e->next_renew;
            if (d < wake) wake = d;
        }
        if (n == 0) {
            struct timespec ts = clock_deadline(CLOCK_MONOTONIC, wake - now);
            pthread_cond_timedwait(&r->cv, &r->mu, &ts);
            continue;
        }
        /* batch[] and batch_e[] are only touched by this thread, and
         * renewer_add grows them only while none is in flight... */
        struct locker_renewal **batch = r->batch;
        struct renewer_entry **be = r->batch_e;
        /* ...so they are detached while mu is let go */
        r->batch = NULL;
        r->batch_e = NULL;
        size_t cap = r->batch_cap;
        r->batch_cap = 0;
        pthread_mutex_unlock(&r->mu);

        uint64_t gen = locker_gen(r->locker); /* before the request: a break during it shows */
        r->locker->ops->renew_batch(r->locker, n, batch);
        atomic_fetch_add(&r->batches, 1);
        atomic_fetch_add(&r->renewals, (unsigned long long)n);

        pthread_mutex_lock(&r->mu);
        for (size_t i = 0; i < n; i++) {
            struct renewer_entry *e = be[i];
            e->in_flight = false;
            int64_t next = e->client->answered(e, &e->req, gen);
            if (next > 0)
                e->next_renew = next;
            else
                e->active = false;
        }
        if (r->batch == NULL) { /* nobody grew them meanwhile */
            r->batch = batch;
            r->batch_e = be;
            r->batch_cap = cap;
        } else {
            free(batch);
            free(be);
        }
        pthread_cond_broadcast(&r->idle_cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Hands back every active entry whose term ended (mu held); returns the
 * earliest deadline of the others (INT64_MAX without any). */
static int64_t hand_back_ended(struct renewer *r)
{
    int64_t earliest = INT64_MAX;
    for (struct renewer_entry *e = r->head; e; e = e->next) {
        if (!e->active) continue;
        int64_t d = e->client->deadline(e);
        if (d <= 0)
            e->active = false; /* handed back (an answer in flight still goes to answered) */
        else if (d < earliest)
            earliest = d;
    }
    return earliest;
}

static void *watch_main(void *arg)
{
    struct renewer *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        int64_t earliest = hand_back_ended(r);
        int64_t sleep = RENEWER_MAX_SLEEP_MS;
        int64_t now = clock_boot_ms();
        if (earliest != INT64_MAX && earliest - now < sleep) sleep = earliest > now ? earliest - now : 1;
        struct timespec ts = clock_deadline(CLOCK_MONOTONIC, sleep);
        pthread_cond_timedwait(&r->watch_cv, &r->mu, &ts);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

struct renewer *renewer_of(struct baton_locker *l)
{
    if (l == NULL || l->ops->renew_batch == NULL) return NULL;
    pthread_mutex_lock(&l->watch_mu);
    struct renewer *r = l->renewer;
    if (r == NULL) {
        r = calloc(1, sizeof *r);
        if (r != NULL) {
            r->locker = l;
            pthread_mutex_init(&r->mu, NULL);
            cond_init_clock(&r->cv, CLOCK_MONOTONIC);
            cond_init_clock(&r->watch_cv, CLOCK_MONOTONIC);
            pthread_cond_init(&r->idle_cv, NULL);
            l->renewer = r;
        }
    }
    pthread_mutex_unlock(&l->watch_mu);
    return r;
}

/* mu held: room for every entry in the batch arrays */
static bool reserve(struct renewer *r, size_t need)
{
    if (r->batch != NULL && r->batch_cap >= need) return true;
    size_t cap = r->batch_cap > need ? r->batch_cap : need;
    if (cap < 16) cap = 16;
    while (cap < need) cap *= 2;
    if (r->batch_cap > 0 && cap < r->batch_cap * 2) cap = r->batch_cap * 2;
    struct locker_renewal **b = malloc(cap * sizeof *b);
    struct renewer_entry **be = malloc(cap * sizeof *be);
    if (b == NULL || be == NULL) {
        free(b);
        free(be);
        return false;
    }
    /* the thread detaches the arrays while a batch is out and keeps its
     * own then: the new ones are installed for the next pass */
    free(r->batch);
    free(r->batch_e);
    r->batch = b;
    r->batch_e = be;
    r->batch_cap = cap;
    return true;
}

bool renewer_add(struct renewer *r, struct renewer_entry *e, int64_t next_renew)
{
    if (r == NULL) return false;
    pthread_mutex_lock(&r->mu);
    bool ok = true;
    if (!e->linked) {
        ok = reserve(r, r->n_entries + 1);
        if (ok && !r->started) {
            int err = pthread_create(&r->thread, NULL, renewer_main, r);
            if (err != 0) {
                glog_error("guard", NULL,
                          "cannot start the renewer thread (%s): every guard renews its own lease",
                          strerror(err));
                ok = false;
            } else {
                thread_name(r->thread, "renewer", r->locker->ops->name);
                r->started = true;
                /* without it, a blocked batch delays demotions (logged) */
                err = pthread_create(&r->watch, NULL, watch_main, r);
                if (err != 0)
                    glog_error("guard", NULL,
                               "cannot start the renewer's watch thread (%s): while a renewal "
                               "batch blocks, a term that ends meanwhile is demoted only when "
                               "it returns", strerror(err));
                else
                    thread_name(r->watch, "renewer", "watch");
                r->watching = err == 0;
            }
        }
        if (ok) {
            e->prev = NULL;
            e->next = r->head;
            if (r->head) r->head->prev = e;
            r->head = e;
            e->linked = true;
            r->n_entries++;
        }
    }
    if (ok) {
        e->next_renew = next_renew;
        e->active = true;
        pthread_cond_signal(&r->cv);
        pthread_cond_signal(&r->watch_cv); /* its deadline may be the earliest */
    }
    pthread_mutex_unlock(&r->mu);
    return ok;
}

void renewer_remove(struct renewer *r, struct renewer_entry *e)
{
    if (r == NULL) return;
    pthread_mutex_lock(&r->mu);
    while (e->in_flight) pthread_cond_wait(&r->idle_cv, &r->mu);
    e->active = false;
    if (e->linked) {
        if (e->prev)
            e->prev->next = e->next;
        else
            r->head = e->next;
        if (e->next) e->next->prev = e->prev;
        e->next = e->prev = NULL;
        e->linked = false;
        r->n_entries--;
    }
    pthread_mutex_unlock(&r->mu);
}

void renewer_destroy(struct renewer *r)
{
    if (r == NULL) return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_signal(&r->cv);
    pthread_cond_signal(&r->watch_cv);
    bool started = r->started, watching = r->watching;
    pthread_mutex_unlock(&r->mu);
    if (started) pthread_join(r->thread, NULL);
    if (watching) pthread_join(r->watch, NULL);
    free(r->batch);
    free(r->batch_e);
    pthread_cond_destroy(&r->idle_cv);
    pthread_cond_destroy(&r->watch_cv);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void renewer_traffic(const struct renewer *r, uint64_t *batches, uint64_t *renewals)
{
    *batches = r ? atomic_load(&r->batches) : 0;
    *renewals = r ? atomic_load(&r->renewals) : 0;
}
