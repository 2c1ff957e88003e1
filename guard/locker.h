/* Locker: the distributed lock contract baton's guards are built on.
 *
 * An opaque struct baton_locker behind a const struct locker_ops table. Every
 * implementation is thread safe. Keys always expire. Tokens are 128 random
 * bits (hex). "Held elsewhere" is a normal answer, never an error; a backend
 * or connection failure is always BATON_LOCKER_ERR, never "held elsewhere" and never
 * a false "acquired".
 *
 * Fencing epoch: every successful acquisition also advances a per-key epoch
 * stored beside the lock (key "<lock key>:epoch"), atomically with the SET NX
 * PX, as new = max(stored + 1, backend clock in microseconds); so it is strictly
 * increasing across leaders even when the backend lost its data. */
#ifndef BATON_LOCKER_H
#define BATON_LOCKER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"

enum baton_locker_status {
    BATON_LOCKER_OK = 0,         /* acquired / released / renewed */
    BATON_LOCKER_HELD = 1,       /* try_lock: held by someone else */
    BATON_LOCKER_LOST = 2,       /* renew: the key is gone or holds another token */
    BATON_LOCKER_ERR = -1,       /* backend or connection error (transient) */
    BATON_LOCKER_MISMATCH = -2,  /* unlock: the key holds another token (or none) */
    BATON_LOCKER_CANCELLED = -3, /* lock: cancelled */
    BATON_LOCKER_EXHAUSTED = -4, /* lock_with_retry: max retries reached */
    BATON_LOCKER_UNSUPPORTED = -5,
};
const char *baton_locker_status_name(int status);

struct baton_lock_grant {
    char token[RANDOM_TOKEN_LEN];
    uint64_t epoch;
    /* clock_boot_ms() just before the acquiring request was sent: the lease
     * deadline is computed from it, so it always falls before the expiry. */
    int64_t sent_ms;
    /* The locker generation of the connection that carried the request, read
     * before it was sent (0 = the backend does not say; the guard then uses
     * the one it read before the call). A break after the grant then always
     * shows as a changed generation, never absorbed. */
    uint64_t gen;
    /* try_lock answering BATON_LOCKER_HELD: how long the current holder's lease
     * still runs (ms), when the backend knows (0 = unknown). A standby need
     * not try again before then, unless a release is announced. */
    int64_t held_pttl_ms;
};

#define BATON_LOCKER_ERR_MAX 256

/* What a status page shows about one lease (baton_locker_inspect). */
struct baton_lock_info {
    bool held;          /* someone holds key */
    uint64_t epoch;     /* its epoch (the last one granted), 0 = none yet */
    int64_t ttl_ms;     /* how long the lease still runs (held), -1 unknown */
    char holder[128];   /* "host pid N", "" unknown */
};

struct baton_locker;

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

struct baton_locker {
    const struct locker_ops *ops;
};


/* Convenience wrappers (NULL-safe on optional ops). */
int baton_locker_try_lock(struct baton_locker *l, const char *key, int64_t ttl_ms, struct baton_lock_grant *out,
                    char err[BATON_LOCKER_ERR_MAX]);
int baton_locker_unlock(struct baton_locker *l, const char *key, const char *token, char err[BATON_LOCKER_ERR_MAX]);
int baton_locker_renew(struct baton_locker *l, const char *key, const char *token, int64_t ttl_ms,
                 int64_t *sent_ms, char err[BATON_LOCKER_ERR_MAX]);
bool baton_locker_can_renew(const struct baton_locker *l);
/* claim() when the backend has it, else try_lock (the token is discarded). */
int baton_locker_claim(struct baton_locker *l, const char *key, int64_t ttl_ms, char err[BATON_LOCKER_ERR_MAX]);
/* Blocks until acquired or *cancel becomes true (BATON_LOCKER_CANCELLED), trying
 * every retry_ms; backend errors are retried too (logged, rate limited). */
int baton_locker_lock(struct baton_locker *l, const char *key, int64_t ttl_ms, int64_t retry_ms,
                const atomic_bool *cancel, struct baton_lock_grant *out, char err[BATON_LOCKER_ERR_MAX]);
/* At most 1 + max_retries attempts, interval_ms apart: BATON_LOCKER_OK, or
 * BATON_LOCKER_EXHAUSTED, or BATON_LOCKER_ERR when the last attempt failed with an error. */
int baton_locker_lock_with_retry(struct baton_locker *l, const char *key, int64_t ttl_ms,
                           int64_t interval_ms, int max_retries, const atomic_bool *cancel,
                           struct baton_lock_grant *out, int *attempts, char err[BATON_LOCKER_ERR_MAX]);
/* fenced_set / shared_get, BATON_LOCKER_UNSUPPORTED when the backend has none. */
int baton_locker_fenced_set(struct baton_locker *l, const char *key, const char *name, uint64_t epoch,
                      const char *value, size_t len, int64_t ttl_ms, char err[BATON_LOCKER_ERR_MAX]);
int baton_locker_shared_get(struct baton_locker *l, const char *key, const char *name, char *buf, size_t len,
                      char err[BATON_LOCKER_ERR_MAX]);
/* "<key>:<name>" (malloc'ed), the keys a backend keeps beside a lease
 * ("epoch", "holder", shared values): for the backends. */
char *locker_subkey(const char *key, const char *name);
/* inspect, BATON_LOCKER_UNSUPPORTED when the backend has none. */
int baton_locker_inspect(struct baton_locker *l, const char *key, struct baton_lock_info *info,
                   char err[BATON_LOCKER_ERR_MAX]);
void baton_locker_destroy(struct baton_locker *l);

/* In-process backend: a map with expiry and lazy sweeping; supports renew,
 * announce/wait_release and epochs. */
struct baton_locker *baton_locker_local_create(void);

/* Redis backend, see guard/redis_conn.h for the connection options. */
struct baton_redis_opts;
struct baton_locker *baton_locker_redis_create(const struct baton_redis_opts *opts, char err[BATON_LOCKER_ERR_MAX]);

/* etcd v3 backend, see guard/etcd_conn.h for the options and guard/locker_etcd.c
 * for the mapping. The epoch is the etcd revision of the acquiring
 * transaction. TTLs are whole seconds: try_lock and renew refuse a ttl that
 * is not a multiple of 1000 ms or below 2000 ms (BATON_LOCKER_ERR); claim and
 * fenced_set round up. */
struct baton_etcd_opts;
struct baton_locker *baton_locker_etcd_create(const struct baton_etcd_opts *opts, char err[BATON_LOCKER_ERR_MAX]);

#endif
