/* Private to guard/locker_redis.c and guard/locker_redis_sub.c (the release
 * subscriber): the Redis locker's state and what the two files call of each
 * other. Nothing here is part of libbaton-guard's API (hidden, like every
 * guard/ function not marked BATON_API). */
#ifndef BATON_LOCKER_REDIS_PRIVATE_H
#define BATON_LOCKER_REDIS_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "guard/locker.h"
#include "redis/io.h"
#include "redis/sentinel.h"
#include "base/util.h"

#define RELEASED_SUFFIX ":released"
#define CHAN_BUCKETS 1024 /* release channels index (power of two) */
#define ORPHAN_MAX 64    /* acquisitions with lost replies remembered, all keys */

/* Scripts [0, S_LEASE_COUNT) run on the lease connection, the others on the
 * side connection; each connection loads its own on connect. */
enum {
    S_ACQUIRE,
    S_UNLOCK,
    S_RENEW,
    S_CHECK,
    S_LEASE_COUNT,
    S_FENCED_SET = S_LEASE_COUNT,
    S_COUNT
};

struct sub_channel {
    struct sub_channel *next;  /* all channels */
    struct sub_channel *hnext; /* same bucket of the index */
    char *key;
    size_t klen;
    uint32_t hash;
    uint64_t seq;    /* announcements seen + re-subscriptions (release_seq) */
    bool subscribed; /* SUBSCRIBE sent on the current subscriber connection */
    bool confirmed;  /* ... and confirmed */
};

/* An acquisition whose reply was lost (timeout, broken connection) may still
 * have run on the server: its token is kept and released before the next
 * attempt on the same key, so it never blocks the key for a whole ttl. */
struct orphan {
    char *key;
    char token[RANDOM_TOKEN_LEN];
};

/* One lazily (re)connected blocking connection. */
struct rconn {
    pthread_mutex_t mu;
    redisContext *c;
    const char *role; /* "lease", "side" */
    bool ever_connected;
    char sha[S_COUNT][41]; /* of this connection's scripts ("" = use EVAL) */
    struct ratelimit rl_break;
    uint64_t switch_seen; /* sentinel switches counted before it connected */
};

struct redis_locker {
    struct baton_locker base;
    struct baton_redis_opts opts;
    char where[128];
    char holder[128]; /* "host pid N": who holds a lock, for `baton status` */
    /* the value of this locker's claims: the holder and a token of this
     * locker instance, so a claim whose answer was lost can be recognised as
     * ours (a restarted process with the same pid is another instance) */
    char claim_value[128 + RANDOM_TOKEN_LEN + 1];

    /* Calls for the lease connection queue here (group commit): the first
     * caller to find no batch in flight takes everything queued and sends
     * it in one pipelined round trip, so the renewals of all the leases a
     * replica holds (and its standbys' attempts) cost a round trip per
     * tick, not one per lease. */
    pthread_mutex_t q_mu;
    struct lease_waiter *q_head, *q_tail;
    bool q_busy;
    atomic_ullong q_batches, q_calls; /* round trips and the calls they carried */

    struct rconn lease; /* + everything below up to side: under lease.mu */
    struct orphan orphans[ORPHAN_MAX]; /* oldest first */
    int n_orphans;
    /* renew_batch's calls and their argument strings, kept between batches
     * (the renewer sends one every renewal interval) */
    struct rb_call *rb_calls;
    struct script_call **rb_ptrs;
    size_t rb_ncap;
    char *rb_arena;
    size_t rb_acap;

    struct rconn side;

    atomic_ullong generation; /* lease connection and subscriber only */
    struct redis_sentinel_watch *watch; /* +switch-master counter; NULL without sentinels */

    struct ratelimit rl_sub_err; /* subscriber thread only */
    pthread_mutex_t sub_mu;
    pthread_cond_t sub_cv; /* CLOCK_MONOTONIC */
    uint64_t sub_woken;    /* wake_waiters calls (under sub_mu) */
    bool sub_started;
    pthread_t sub_thread;
    atomic_bool sub_stop;
    int wake_pipe[2];
    struct sub_channel *channels;
    struct sub_channel *chan_index[CHAN_BUCKETS]; /* by key: a standby looks up its key per attempt */
};

/* guard/locker_redis.c */
void locker_redis_gen_bump(struct redis_locker *rl);

/* guard/locker_redis_sub.c: the release subscriber thread, started on first
 * use, and the locker ops that read what it counts */
void locker_redis_wake_sub(struct redis_locker *rl);
void locker_redis_sub_ensure_started(struct redis_locker *rl);
uint64_t locker_redis_release_seq(struct baton_locker *l, const char *key);
bool locker_redis_wait_release(struct baton_locker *l, const char *key, uint64_t seen,
                               int64_t timeout_ms);
void locker_redis_wake_waiters(struct baton_locker *l);

#endif
