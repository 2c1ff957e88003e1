/* The acquirer: one thread per locker (a backend with ops->try_lock_batch
 * and release announcements: redis) that makes the acquisition attempts of
 * every standby guard of the process, all those due at one instant in one
 * pipelined round trip, so that a standby's own thread sleeps until it is
 * granted the lease or asked to stop, instead of waking for each attempt.
 * At 1,000 standby endpoints that is a few wake-ups per second for the
 * process instead of one or two per lease every few seconds.
 *
 * The acquirer only attempts. A grant is handed to the guard's thread
 * (answered returns 0), which leads with it exactly as after its own
 * try_lock: the term is counted from when the request was sent
 * (grant.sent_ms), so a late hand-over can only shorten the term, never
 * lengthen it. An attempt is the same single request as a guard's own (the
 * model's send and read of a try_lock are already separate steps with any
 * delay between them), so this adds no state to guard/model/.
 *
 * A release announcement for a key (locker_release_notify, from the
 * backend's subscriber) makes the entry of that key due at once (after its
 * release_delay); one that comes while its attempt is in flight makes the
 * next one due at once. Internal to libbaton-guard. */
#ifndef BATON_GUARD_ACQUIRER_H
#define BATON_GUARD_ACQUIRER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "guard/locker.h"

struct acquirer;
struct acquirer_entry;

/* Called by the acquirer thread with its mutex held (the guard's callback
 * may take the guard's own mutex, never the acquirer's). */
struct acquirer_client {
    /* The attempt a (filled by try_lock_batch); gen_before is the locker
     * generation read before it was sent. Returns when to attempt next
     * (boot ms), or 0: the entry is handed back to the guard's thread (a
     * grant) and left alone until acquirer_add is called again. */
    int64_t (*answered)(struct acquirer_entry *e, const struct locker_acquisition *a,
                        uint64_t gen_before);
};

/* Embedded in the guard; zero-initialised; owned by the acquirer between
 * acquirer_add and acquirer_remove (the guard sets client, req.key,
 * req.ttl_ms and release_delay before acquirer_add; the client may update
 * release_delay from answered). */
struct acquirer_entry {
    struct acquirer_entry *next, *prev;
    const struct acquirer_client *client;
    struct locker_acquisition req;
    size_t klen;
    int64_t release_delay; /* ms after an announcement before the attempt */
    int64_t next_attempt;  /* boot ms */
    bool linked, active, in_flight, released;
};

/* The locker's acquirer, made on first use; NULL when the backend cannot
 * attempt in batches (etcd, local) or it cannot be made. Freed by
 * baton_locker_destroy / locker_base_destroy (every guard of the locker
 * must be destroyed first). */
struct acquirer *acquirer_of(struct baton_locker *l);
/* Delegates the attempts for e from next_attempt on (boot ms). false: the
 * thread could not be started; the guard attempts itself. */
bool acquirer_add(struct acquirer *a, struct acquirer_entry *e, int64_t next_attempt);
/* Takes e back: waits while an attempt of it is in flight (its answer is
 * given to the client first), then unlinks it. */
void acquirer_remove(struct acquirer *a, struct acquirer_entry *e);
/* A release of key was announced (locker_release_notify). */
void acquirer_released(struct acquirer *a, const char *key, size_t klen);
void acquirer_destroy(struct acquirer *a);
/* Round trips the acquirer made and the attempts they carried. */
void acquirer_traffic(const struct acquirer *a, uint64_t *batches, uint64_t *attempts);

#endif
