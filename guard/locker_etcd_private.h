/* Private to guard/locker_etcd.c and guard/locker_etcd_watch.c (the watch
 * thread): the etcd locker's state and what the two files call of each
 * other. Nothing here is part of libbaton-guard's API (hidden, like every
 * guard/ function not marked BATON_API). */
#ifndef BATON_LOCKER_ETCD_PRIVATE_H
#define BATON_LOCKER_ETCD_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/curl_dl.h"
#include "guard/etcd_conn.h"
#include "guard/locker.h"
#include "base/util.h"

#define SHARED_LEASES 8

struct etcd_locker;
struct watch_key {
    struct watch_key *next;
    struct etcd_locker *el;
    char *key;
    uint64_t seq;
    bool confirmed;
    CURL *easy;
    struct curl_slist *headers;
    struct etcd_stream *stream;
    bool bad; /* a malformed message: the stream ends */
    int64_t started_ms, retry_at_ms;
    unsigned failures;
    unsigned aborts; /* streams in a row ended for a bad or oversized message */
    bool got_data;
};

struct shared_lease {
    int64_t ttl_s;
    char id[24];
    int64_t granted_ms;
};

struct etcd_locker {
    struct baton_locker base;
    char holder[128];
    struct etcd_conn *lease; /* try_lock, renew, unlock, check */
    struct etcd_conn *side;  /* claim, holder, ping, shared state, inspect */
    struct etcd_conn *watch; /* endpoint and token for the watch streams */
    int64_t command_timeout_ms;

    pthread_mutex_t held_mu;
    struct held *held;
    struct shared_lease shared[SHARED_LEASES]; /* under held_mu */

    pthread_mutex_t w_mu;
    pthread_cond_t w_cv; /* CLOCK_MONOTONIC */
    struct watch_key *keys;
    bool w_started;
    atomic_bool w_stop;
    pthread_t w_thread;
    struct ratelimit w_rl; /* warnings about aborted streams */
};

/* guard/locker_etcd.c: {"key": base64(key)}, a new object */
json_object *locker_etcd_obj_key(const char *key);

/* guard/locker_etcd_watch.c: the locker ops served by the watch thread
 * (started on first use) */
uint64_t locker_etcd_release_seq(struct baton_locker *l, const char *key);
bool locker_etcd_wait_release(struct baton_locker *l, const char *key, uint64_t seen, int64_t timeout_ms);

#endif
