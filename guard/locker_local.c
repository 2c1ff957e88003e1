/* In-process locker: a hash map of key -> (token, expiry) under one mutex,
 * swept lazily. Epochs come from one per-locker counter, floored by the wall
 * clock (ms * 1000) like the redis backend, so they increase per key and
 * across locker instances of one process lifetime. Release announcements wake
 * waiters through a condition variable. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "guard/locker.h"
#include "src/common/util.h"

#define LOCAL_BUCKETS 256
#define SWEEP_EVERY_MS 1000

struct local_entry {
    struct local_entry *next;
    char *key;
    char token[RANDOM_TOKEN_LEN];
    int64_t expires_ms; /* monotonic */
};

struct local_waiter {
    struct local_waiter *next;
    const char *key;
    bool fired;
};

struct local_locker {
    struct locker base;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    struct local_entry *buckets[LOCAL_BUCKETS];
    size_t count;
    uint64_t last_epoch;
    int64_t next_sweep_ms;
    struct local_waiter *waiters;
};

static uint32_t hash_key(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h % LOCAL_BUCKETS;
}

static void sweep(struct local_locker *ll, int64_t now)
{
    if (now < ll->next_sweep_ms) return;
    ll->next_sweep_ms = now + SWEEP_EVERY_MS;
    for (int i = 0; i < LOCAL_BUCKETS; i++) {
        struct local_entry **pp = &ll->buckets[i];
        while (*pp) {
            struct local_entry *e = *pp;
            if (e->expires_ms <= now) {
                *pp = e->next;
                free(e->key);
                free(e);
                ll->count--;
            } else {
                pp = &e->next;
            }
        }
    }
}

/* Returns the live entry for key (removing it first if it expired). */
static struct local_entry *find_live(struct local_locker *ll, const char *key, int64_t now)
{
    struct local_entry **pp = &ll->buckets[hash_key(key)];
    for (; *pp; pp = &(*pp)->next) {
        struct local_entry *e = *pp;
        if (strcmp(e->key, key) != 0) continue;
        if (e->expires_ms > now) return e;
        *pp = e->next;
        free(e->key);
        free(e);
        ll->count--;
        return NULL;
    }
    return NULL;
}

static void remove_entry(struct local_locker *ll, struct local_entry *victim)
{
    struct local_entry **pp = &ll->buckets[hash_key(victim->key)];
    for (; *pp; pp = &(*pp)->next) {
        if (*pp == victim) {
            *pp = victim->next;
            free(victim->key);
            free(victim);
            ll->count--;
            return;
        }
    }
}

static int local_try_lock(struct locker *l, const char *key, int64_t ttl_ms,
                          struct lock_grant *out, char err[LOCKER_ERR_MAX])
{
    struct local_locker *ll = (struct local_locker *)l;
    char token[RANDOM_TOKEN_LEN];
    if (random_token(token) != 0) {
        snprintf(err, LOCKER_ERR_MAX, "local locker: no randomness for a token (%s)", key);
        return LOCKER_ERR;
    }
    pthread_mutex_lock(&ll->mu);
    int64_t now = clock_mono_ms();
    sweep(ll, now);
    struct local_entry *held = find_live(ll, key, now);
    if (held != NULL) {
        if (out) out->held_pttl_ms = held->expires_ms - now;
        pthread_mutex_unlock(&ll->mu);
        return LOCKER_HELD;
    }
    struct local_entry *e = xcalloc(1, sizeof *e);
    e->key = xstrdup(key);
    memcpy(e->token, token, sizeof token);
    e->expires_ms = now + ttl_ms;
    uint32_t b = hash_key(key);
    e->next = ll->buckets[b];
    ll->buckets[b] = e;
    ll->count++;
    uint64_t floor = (uint64_t)clock_wall_ms() * 1000u;
    uint64_t epoch = ll->last_epoch + 1;
    if (floor > epoch) epoch = floor;
    ll->last_epoch = epoch;
    pthread_mutex_unlock(&ll->mu);
    if (out != NULL) {
        memcpy(out->token, token, sizeof token);
        out->epoch = epoch;
        out->sent_mono_ms = now;
    }
    return LOCKER_OK;
}

static int local_unlock(struct locker *l, const char *key, const char *token,
                        char err[LOCKER_ERR_MAX])
{
    struct local_locker *ll = (struct local_locker *)l;
    pthread_mutex_lock(&ll->mu);
    int64_t now = clock_mono_ms();
    struct local_entry *e = find_live(ll, key, now);
    int rc = LOCKER_MISMATCH;
    if (e != NULL && strcmp(e->token, token) == 0) {
        remove_entry(ll, e);
        rc = LOCKER_OK;
    }
    sweep(ll, now);
    pthread_mutex_unlock(&ll->mu);
    if (rc == LOCKER_MISMATCH)
        snprintf(err, LOCKER_ERR_MAX, "local locker: %s is %s", key,
                 e ? "held with another token" : "not held");
    return rc;
}

static int local_renew(struct locker *l, const char *key, const char *token, int64_t ttl_ms,
                       int64_t *sent_mono_ms, char err[LOCKER_ERR_MAX])
{
    struct local_locker *ll = (struct local_locker *)l;
    pthread_mutex_lock(&ll->mu);
    int64_t now = clock_mono_ms();
    *sent_mono_ms = now;
    struct local_entry *e = find_live(ll, key, now);
    int rc = LOCKER_LOST;
    if (e != NULL && strcmp(e->token, token) == 0) {
        e->expires_ms = now + ttl_ms;
        rc = LOCKER_OK;
    }
    pthread_mutex_unlock(&ll->mu);
    if (rc == LOCKER_LOST)
        snprintf(err, LOCKER_ERR_MAX, "local locker: %s is %s", key,
                 e ? "held with another token" : "gone");
    return rc;
}

static int local_check(struct locker *l, const char *key, const char *token,
                       char err[LOCKER_ERR_MAX])
{
    struct local_locker *ll = (struct local_locker *)l;
    pthread_mutex_lock(&ll->mu);
    struct local_entry *e = find_live(ll, key, clock_mono_ms());
    int rc = (e != NULL && strcmp(e->token, token) == 0) ? LOCKER_OK : LOCKER_LOST;
    pthread_mutex_unlock(&ll->mu);
    if (rc == LOCKER_LOST) snprintf(err, LOCKER_ERR_MAX, "local locker: %s not held by us", key);
    return rc;
}

static int local_announce(struct locker *l, const char *key, char err[LOCKER_ERR_MAX])
{
    struct local_locker *ll = (struct local_locker *)l;
    pthread_mutex_lock(&ll->mu);
    for (struct local_waiter *w = ll->waiters; w; w = w->next)
        if (strcmp(w->key, key) == 0) w->fired = true;
    pthread_cond_broadcast(&ll->cv);
    pthread_mutex_unlock(&ll->mu);
    return LOCKER_OK;
}

static bool local_wait_release(struct locker *l, const char *key, int64_t timeout_ms)
{
    struct local_locker *ll = (struct local_locker *)l;
    struct local_waiter w = {.key = key, .fired = false};
    struct timespec ts = clock_deadline(CLOCK_MONOTONIC, timeout_ms);
    pthread_mutex_lock(&ll->mu);
    w.next = ll->waiters;
    ll->waiters = &w;
    while (!w.fired)
        if (pthread_cond_timedwait(&ll->cv, &ll->mu, &ts) != 0) break;
    for (struct local_waiter **pp = &ll->waiters; *pp; pp = &(*pp)->next)
        if (*pp == &w) {
            *pp = w.next;
            break;
        }
    bool fired = w.fired;
    pthread_mutex_unlock(&ll->mu);
    return fired;
}

static void local_destroy(struct locker *l)
{
    struct local_locker *ll = (struct local_locker *)l;
    for (int i = 0; i < LOCAL_BUCKETS; i++) {
        struct local_entry *e = ll->buckets[i];
        while (e) {
            struct local_entry *next = e->next;
            free(e->key);
            free(e);
            e = next;
        }
    }
    pthread_cond_destroy(&ll->cv);
    pthread_mutex_destroy(&ll->mu);
    free(ll);
}

static const struct locker_ops local_ops = {
    .name = "local",
    .try_lock = local_try_lock,
    .unlock = local_unlock,
    .renew = local_renew,
    .announce_release = local_announce,
    .wait_release = local_wait_release,
    .generation = NULL,
    .check = local_check,
    .destroy = local_destroy,
};

struct locker *locker_local_create(void)
{
    struct local_locker *ll = xcalloc(1, sizeof *ll);
    ll->base.ops = &local_ops;
    pthread_mutex_init(&ll->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ll->cv, &ca);
    pthread_condattr_destroy(&ca);
    return &ll->base;
}
