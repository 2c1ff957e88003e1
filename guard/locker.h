/* The backend interface behind struct baton_locker (include/baton/locker.h):
 * each backend (locker_redis.c, locker_etcd.c, locker_local.c) fills a const
 * struct locker_ops table and embeds struct baton_locker first in its own
 * state. Internal to libbaton-guard; the public contract is in
 * include/baton/locker.h. */
#ifndef BATON_LOCKER_H
#define BATON_LOCKER_H

#include <pthread.h>
#include <stdbool.h>

#include "baton/locker.h"

/* One renewal of a batch (ops->renew_batch): key, token and ttl_ms in; rc
 * (as renew() gives it), sent_ms and err out. */
struct locker_renewal {
    const char *key, *token;
    int64_t ttl_ms;
    int rc;
    int64_t sent_ms;
    char err[BATON_LOCKER_ERR_MAX];
};

/* One acquisition of a batch (ops->try_lock_batch): key and ttl_ms in; rc,
 * grant and err out, as try_lock() gives them (grant.held_pttl_ms when
 * BATON_LOCKER_HELD). */
struct locker_acquisition {
    const char *key;
    int64_t ttl_ms;
    int rc;
    struct baton_lock_grant grant;
    char err[BATON_LOCKER_ERR_MAX];
};

struct locker_ops {
    const char *name; /* "redis", "etcd", "local" */
    /* Never blocks beyond one backend round trip. */
    int (*try_lock)(struct baton_locker *l, const char *key, int64_t ttl_ms,
                    struct baton_lock_grant *out, char err[BATON_LOCKER_ERR_MAX]);
    /* Compare-and-delete. BATON_LOCKER_MISMATCH when the token does not match. */
    int (*unlock)(struct baton_locker *l, const char *key, const char *token,
                  char err[BATON_LOCKER_ERR_MAX]);
    /* Compare-and-PEXPIRE; NULL when the backend cannot renew (the guard then
     * falls back to release-and-reacquire). *sent_ms receives when the
     * request was sent (clock_boot_ms). BATON_LOCKER_LOST when the key is gone or
     * another's. The backend also keeps "<key>:epoch" from expiring while the
     * lease is renewed. */
    int (*renew)(struct baton_locker *l, const char *key, const char *token, int64_t ttl_ms,
                 int64_t *sent_ms, char err[BATON_LOCKER_ERR_MAX]);
    /* Optional: renew() for n leases at once, in as few round trips as the
     * backend can (redis: one pipelined round trip). Each r[i] is answered
     * as renew() would answer it alone. Backends with it get a renewer
     * thread (guard/renewer.h). */
    void (*renew_batch)(struct baton_locker *l, size_t n, struct locker_renewal *const *r);
    /* Optional: try_lock() for n keys at once, in as few round trips as the
     * backend can (redis: one pipelined round trip). Each a[i] is answered
     * as try_lock() would answer it alone. Backends with it and with
     * release_seq get an acquirer thread (guard/acquirer.h); they then call
     * locker_release_notify() for every release announcement they see. */
    void (*try_lock_batch)(struct baton_locker *l, size_t n, struct locker_acquisition *const *a);
    /* Optional (NULL = not supported): tell standbys the key was released.
     * A standby cannot miss an announcement: release_seq(key) is a counter
     * of announcements seen for key (it also advances when the backend may
     * have missed some, e.g. its subscription was re-established); the
     * first call starts watching key. A standby reads it before try_lock and
     * wait_release(key, seen, timeout) returns true as soon as the counter
     * differs from seen (at once if it already does), false on timeout. */
    int (*announce_release)(struct baton_locker *l, const char *key, char err[BATON_LOCKER_ERR_MAX]);
    uint64_t (*release_seq)(struct baton_locker *l, const char *key);
    bool (*wait_release)(struct baton_locker *l, const char *key, uint64_t seen, int64_t timeout_ms);
    /* Optional: makes every wait_release in progress return (false) now, so
     * a guard asked to stop or give up need not wait out its chunk. */
    void (*wake_waiters)(struct baton_locker *l);
    /* Optional: lease-connection round trips and the calls they carried. */
    void (*lease_traffic)(const struct baton_locker *l, uint64_t *round_trips, uint64_t *calls);
    /* Optional: a counter that changes whenever the backend connection broke
     * or was re-established; the guard compares it between calls to notice a
     * restart at once. NULL = never changes. */
    uint64_t (*generation)(struct baton_locker *l);
    /* Optional: true when the key currently holds token (used after a
     * reconnect to verify the lease survived). */
    int (*check)(struct baton_locker *l, const char *key, const char *token, char err[BATON_LOCKER_ERR_MAX]);
    void (*destroy)(struct baton_locker *l);
    /* Optional: a one-shot claim, plain SET NX PX with no epoch or holder
     * bookkeeping (OnceGuard: one key per delivery, never renewed or
     * released). BATON_LOCKER_OK, BATON_LOCKER_HELD or BATON_LOCKER_ERR. NULL = try_lock.
     * Runs on the side connection (with holder and ping), never delaying
     * lease traffic. */
    int (*claim)(struct baton_locker *l, const char *key, int64_t ttl_ms, char err[BATON_LOCKER_ERR_MAX]);
    /* Optional: who holds key ("host pid N"), for status pages. BATON_LOCKER_OK
     * with buf filled, BATON_LOCKER_LOST when nobody holds it, BATON_LOCKER_ERR. Runs on
     * a connection of its own, never delaying lease traffic. */
    int (*holder)(struct baton_locker *l, const char *key, char *buf, size_t len, char err[BATON_LOCKER_ERR_MAX]);
    /* Optional: holder() for n keys at once, in as few round trips as the
     * backend can (redis: pipelined). rcs[i] and bufs[i] (len bytes each)
     * as holder() would give them; returns BATON_LOCKER_ERR with err when
     * the backend could not be asked (then every rcs[i] not filled is
     * BATON_LOCKER_ERR), else BATON_LOCKER_OK. */
    int (*holders)(struct baton_locker *l, size_t n, const char *const *keys, char *const *bufs,
                   size_t len, int *rcs, char err[BATON_LOCKER_ERR_MAX]);
    /* Optional: one round trip to the backend on the same side connection
     * as holder (readiness probes). BATON_LOCKER_OK or BATON_LOCKER_ERR with err. */
    int (*ping)(struct baton_locker *l, char err[BATON_LOCKER_ERR_MAX]);
    /* Optional (NULL = the backend keeps no shared state): shared state
     * beside a lease, fenced by its epoch. Writes value (len bytes) to
     * "<key>:<name>", expiring after ttl_ms, only while "<key>:epoch" still
     * holds epoch, in one atomic step: a writer whose term was superseded
     * can never overwrite what a newer leader wrote. BATON_LOCKER_OK written,
     * BATON_LOCKER_LOST the epoch moved on (nothing written), BATON_LOCKER_ERR. Runs on
     * the side connection, never delaying lease traffic. */
    int (*fenced_set)(struct baton_locker *l, const char *key, const char *name, uint64_t epoch,
                      const char *value, size_t len, int64_t ttl_ms, char err[BATON_LOCKER_ERR_MAX]);
    /* Optional: reads "<key>:<name>" into buf (NUL terminated; a value of
     * len bytes or more is BATON_LOCKER_ERR). BATON_LOCKER_OK, BATON_LOCKER_LOST when absent,
     * BATON_LOCKER_ERR. Side connection. */
    int (*shared_get)(struct baton_locker *l, const char *key, const char *name, char *buf,
                      size_t len, char err[BATON_LOCKER_ERR_MAX]);
    /* Optional: the state of key for status pages (`baton status`): holder,
     * epoch, remaining ttl. BATON_LOCKER_OK (info filled, held or not) or
     * BATON_LOCKER_ERR. Side connection. */
    int (*inspect)(struct baton_locker *l, const char *key, struct baton_lock_info *info,
                   char err[BATON_LOCKER_ERR_MAX]);
    /* Optional: where the backend is reached now ("127.0.0.1:6379",
     * "http://10.0.0.2:2379"), for /status. */
    void (*where)(struct baton_locker *l, char *buf, size_t len);
};

/* A thread waiting on its own condition variable that wants to be woken
 * when the locker's generation moves (a guard's lease thread while it
 * leads) or when a waiter should look at its flags again. */
struct locker_watcher {
    struct locker_watcher *next, *prev;
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
};

struct baton_locker {
    const struct locker_ops *ops;
    /* The backend calls locker_notify_gen() at every change of its
     * generation (when it sets this): a leading guard then waits for its
     * next renewal instead of polling the generation. */
    bool notifies_gen;
    pthread_mutex_t watch_mu;
    struct locker_watcher *watchers;
    struct renewer *renewer; /* guard/renewer.h: made on first use, under watch_mu */
    struct acquirer *acquirer; /* guard/acquirer.h: likewise */
};

/* Backends: before use / in destroy, before freeing. */
void locker_base_init(struct baton_locker *l, const struct locker_ops *ops, bool notifies_gen);
void locker_base_destroy(struct baton_locker *l);
/* Guards: w stays registered between the two calls. */
void locker_watch(struct baton_locker *l, struct locker_watcher *w);
void locker_unwatch(struct baton_locker *l, struct locker_watcher *w);
/* The holders of n keys (status pages): ops->holders in one batch where the
 * backend has it, else ops->holder for each. rcs[i] / bufs[i] as holder()
 * gives them (BATON_LOCKER_ERR for a key not asked). */
/* Broadcasts every watcher's condition variable (under its mutex, so a
 * waiter between its check and its wait cannot miss it). The caller may
 * hold backend locks but no watcher's mutex. */
void locker_notify_gen(struct baton_locker *l);
/* Backends with try_lock_batch: a release of key (klen bytes) was announced,
 * or announcements of it may have been missed (a new subscription): the
 * acquirer attempts at once for a standby of key that it attempts for. The
 * caller may hold no guard's or acquirer's lock. */
void locker_release_notify(struct baton_locker *l, const char *key, size_t klen);


/* "<key>:<name>" into buf, the keys a backend keeps beside a lease
 * ("epoch", "holder", shared values). The wrappers in locker.c refuse a key
 * longer than BATON_KEY_MAX and a name longer than BATON_NAME_MAX, so it
 * always fits; on the stack, so it cannot fail. */
#define LOCKER_SUBKEY_MAX (BATON_KEY_MAX + BATON_NAME_MAX + 2)
void locker_subkey(char buf[LOCKER_SUBKEY_MAX], const char *key, const char *name);

#endif
