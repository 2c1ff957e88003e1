/* The renewer: one thread per locker (a backend with ops->renew_batch:
 * redis) that renews the leases of every leading guard of the process in
 * one pipelined round trip per renewal instant, so that a leading guard's
 * own thread sleeps until something happens (a stop, a callback's end, a
 * connection break, a lease handed back) instead of waking for each
 * renewal. At 1,000 led endpoints that is ~1 wake-up per second for the
 * process instead of ~2 per lease.
 *
 * The renewer only takes the happy path. It extends a term through the
 * guard's own compare-and-swap (term_extend in active_guard.c), which never
 * revives an ended term and never shrinks a deadline, whoever calls it.
 * Every other outcome (an error, a lost lease, an answer after the
 * deadline, a deadline that passed: a watch thread looks at the deadlines
 * while a batch blocks) is handed back to the guard's thread,
 * which then handles it with its own code, as without a renewer: it
 * retries itself and delegates again after its own successful renewal.
 *
 * guard/model/lease.pml (-DRENEWER) checks this split: Ren(i) renews while
 * Guard(i) verifies, ends terms and releases; a guard never leaves a term
 * (unlock, standby, a new acquisition) while the renewer has a renewal of
 * it in flight (renewer_remove waits). Internal to libbaton-guard. */
#ifndef BATON_GUARD_RENEWER_H
#define BATON_GUARD_RENEWER_H

#include <stdbool.h>
#include <stdint.h>

#include "guard/locker.h"

struct renewer;
struct renewer_entry;

/* Called by the renewer thread with its mutex held (the guard's callbacks
 * may take the guard's own mutex, never the renewer's). */
struct renewer_client {
    /* The renewal r (filled by renew_batch) sent with the locker generation
     * gen read before it was answered. Returns when to renew next (boot
     * ms), or 0: the lease is handed back to the guard's thread (the
     * callback told it) and the renewer leaves the entry alone until
     * renewer_add is called again. */
    int64_t (*answered)(struct renewer_entry *e, const struct locker_renewal *r, uint64_t gen);
    /* The term's deadline (boot ms) while it is live, else 0: the entry is
     * then handed back (the callback tells the guard's thread at once). */
    int64_t (*deadline)(struct renewer_entry *e);
};

/* Embedded in the guard; zero-initialised; owned by the renewer between
 * renewer_add and renewer_remove. */
struct renewer_entry {
    struct renewer_entry *next, *prev;
    const struct renewer_client *client;
    struct locker_renewal req; /* key, token, ttl_ms set by the guard */
    int64_t next_renew;        /* boot ms */
    bool linked, active, in_flight;
};

/* The locker's renewer, made on first use; NULL when the backend cannot
 * renew in batches (etcd, local) or it cannot be made. Freed by
 * locker_base_destroy (every guard of the locker must be destroyed first). */
struct renewer *renewer_of(struct baton_locker *l);
/* Delegates the renewals of e from next_renew on (boot ms). false: the
 * renewer thread could not be started; the guard renews itself. */
bool renewer_add(struct renewer *r, struct renewer_entry *e, int64_t next_renew);
/* Takes e back: waits while a renewal of it is in flight, then unlinks it.
 * Called before the guard releases its lease or leaves its term. */
void renewer_remove(struct renewer *r, struct renewer_entry *e);
void renewer_destroy(struct renewer *r);
/* Round trips the renewer made and the renewals they carried. */
void renewer_traffic(const struct renewer *r, uint64_t *batches, uint64_t *renewals);

#endif
