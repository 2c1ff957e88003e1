/* libbaton-guard: the lock contract its guards are built on.
 *
 * A baton_locker is a handle on one coordination backend: Redis
 * (baton_locker_redis_create, include/baton/redis.h), etcd v3
 * (baton_locker_etcd_create, include/baton/etcd.h), or an in-process map
 * (baton_locker_local_create, for tests and single-process use). Every
 * locker is thread safe. Keys always expire. Tokens are 128 random bits
 * (hex). "Held elsewhere" is a normal answer, never an error; a backend or
 * connection failure is always BATON_LOCKER_ERR, never "held elsewhere" and
 * never a false "acquired".
 *
 * Fencing epoch: every successful acquisition also advances a per-key epoch
 * kept beside the lock (Redis: "<key>:epoch", new = max(stored + 1, server
 * clock in microseconds); etcd: the revision of the acquiring transaction),
 * so epochs are strictly increasing across leaders of one key, even after
 * the backend lost its data. Pass the epoch to what you write and let the
 * receiver refuse a smaller one: that is what makes a paused, superseded
 * holder harmless. See guard/README.md. */
#ifndef BATON_PUBLIC_LOCKER_H
#define BATON_PUBLIC_LOCKER_H

#include "baton/api.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Length of a lease token: 32 hex characters and a NUL. */
#define BATON_TOKEN_LEN 33
/* Longest key (bytes) and longest shared-value name the lockers accept;
 * longer ones are refused with BATON_LOCKER_ERR. */
#define BATON_KEY_MAX 1024
#define BATON_NAME_MAX 63

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
BATON_API const char *baton_locker_status_name(int status);

struct baton_lock_grant {
    char token[BATON_TOKEN_LEN];
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

/* An opaque handle; destroy with baton_locker_destroy. */
struct baton_locker;

/* The backend's name: "redis", "etcd" or "local". */
BATON_API const char *baton_locker_backend(const struct baton_locker *l);
/* Lease traffic so far: round trips to the backend and the lock calls they
 * carried (acquire, renew, release, check). The Redis locker sends the calls
 * that queue while a round trip is in flight together, in one pipelined
 * round trip. 0 and both filled, or -1 when the backend does not count. */
BATON_API int baton_locker_lease_traffic(const struct baton_locker *l, uint64_t *round_trips,
                                         uint64_t *calls);

/* For status pages and readiness probes; each runs on the locker's side
 * connection, never delaying lease traffic.
 * One round trip to the backend: BATON_LOCKER_OK, BATON_LOCKER_ERR with err,
 * or BATON_LOCKER_UNSUPPORTED when the backend cannot be pinged. */
BATON_API int baton_locker_ping(struct baton_locker *l, char err[BATON_LOCKER_ERR_MAX]);
/* true when the backend records who holds a lease (baton_locker_holder). */
BATON_API bool baton_locker_has_holder(const struct baton_locker *l);
/* Who holds key ("<host> pid <pid>"): BATON_LOCKER_OK with buf filled,
 * BATON_LOCKER_LOST when nobody holds it, BATON_LOCKER_ERR with err,
 * BATON_LOCKER_UNSUPPORTED when the backend records no holder. */
BATON_API int baton_locker_holder(struct baton_locker *l, const char *key, char *buf, size_t len,
                                  char err[BATON_LOCKER_ERR_MAX]);
/* baton_locker_holder for n keys in as few round trips as the backend can
 * (Redis: pipelined): rcs[i] and bufs[i] (len bytes each) as it would give
 * them, every rcs[i] BATON_LOCKER_ERR when the backend could not be asked or
 * records no holder. */
BATON_API void baton_locker_holders(struct baton_locker *l, size_t n, const char *const *keys,
                                    char *const *bufs, size_t len, int *rcs);
/* Where the backend is reached now ("127.0.0.1:6379", "http://10.0.0.2:2379"):
 * 0 with buf filled, or -1 (buf "") when the backend does not say. */
BATON_API int baton_locker_where(struct baton_locker *l, char *buf, size_t len);

/* Convenience wrappers (NULL-safe on optional ops). */
BATON_API int baton_locker_try_lock(struct baton_locker *l, const char *key, int64_t ttl_ms, struct baton_lock_grant *out,
                    char err[BATON_LOCKER_ERR_MAX]);
BATON_API int baton_locker_unlock(struct baton_locker *l, const char *key, const char *token, char err[BATON_LOCKER_ERR_MAX]);
BATON_API int baton_locker_renew(struct baton_locker *l, const char *key, const char *token, int64_t ttl_ms,
                 int64_t *sent_ms, char err[BATON_LOCKER_ERR_MAX]);
BATON_API bool baton_locker_can_renew(const struct baton_locker *l);
/* claim() when the backend has it, else try_lock (the token is discarded). */
BATON_API int baton_locker_claim(struct baton_locker *l, const char *key, int64_t ttl_ms, char err[BATON_LOCKER_ERR_MAX]);
/* Blocks until acquired or *cancel becomes true (BATON_LOCKER_CANCELLED), trying
 * every retry_ms; backend errors are retried too (logged, rate limited). */
BATON_API int baton_locker_lock(struct baton_locker *l, const char *key, int64_t ttl_ms, int64_t retry_ms,
                const atomic_bool *cancel, struct baton_lock_grant *out, char err[BATON_LOCKER_ERR_MAX]);
/* At most 1 + max_retries attempts, interval_ms apart: BATON_LOCKER_OK, or
 * BATON_LOCKER_EXHAUSTED, or BATON_LOCKER_ERR when the last attempt failed with an error. */
BATON_API int baton_locker_lock_with_retry(struct baton_locker *l, const char *key, int64_t ttl_ms,
                           int64_t interval_ms, int max_retries, const atomic_bool *cancel,
                           struct baton_lock_grant *out, int *attempts, char err[BATON_LOCKER_ERR_MAX]);
/* true when the backend keeps fenced shared state (fenced_set and shared_get
 * are supported). */
BATON_API bool baton_locker_has_shared_state(const struct baton_locker *l);
/* fenced_set / shared_get, BATON_LOCKER_UNSUPPORTED when the backend has none. */
BATON_API int baton_locker_fenced_set(struct baton_locker *l, const char *key, const char *name, uint64_t epoch,
                      const char *value, size_t len, int64_t ttl_ms, char err[BATON_LOCKER_ERR_MAX]);
BATON_API int baton_locker_shared_get(struct baton_locker *l, const char *key, const char *name, char *buf, size_t len,
                      char err[BATON_LOCKER_ERR_MAX]);
/* inspect, BATON_LOCKER_UNSUPPORTED when the backend has none. */
BATON_API int baton_locker_inspect(struct baton_locker *l, const char *key, struct baton_lock_info *info,
                   char err[BATON_LOCKER_ERR_MAX]);
BATON_API void baton_locker_destroy(struct baton_locker *l);

/* In-process backend: a map with expiry and lazy sweeping; supports renew,
 * announce/wait_release and epochs. */
BATON_API struct baton_locker *baton_locker_local_create(void);

/* Redis backend, options in include/baton/redis.h. */
struct baton_redis_opts;
BATON_API struct baton_locker *baton_locker_redis_create(const struct baton_redis_opts *opts, char err[BATON_LOCKER_ERR_MAX]);

/* etcd v3 backend, options in include/baton/etcd.h, the mapping in guard/locker_etcd.c. The epoch is the etcd revision of the acquiring
 * transaction. TTLs are whole seconds: try_lock and renew refuse a ttl that
 * is not a multiple of 1000 ms or below 2000 ms (BATON_LOCKER_ERR); claim and
 * fenced_set round up. */
struct baton_etcd_opts;
BATON_API struct baton_locker *baton_locker_etcd_create(const struct baton_etcd_opts *opts, char err[BATON_LOCKER_ERR_MAX]);

#ifdef __cplusplus
}
#endif

#endif
