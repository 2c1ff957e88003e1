/* In-process locker: a hash map of key -> (token, expiry) under one mutex,
 * swept lazily. Epochs come from one per-locker counter, floored by the wall
 * clock (ms * 1000) like the redis backend, so they increase per key and
 * across locker instances of one process lifetime. Expiry runs on
 * CLOCK_BOOTTIME, the clock of every "sent" time. Release announcements
 * advance a per-key counter (for the keys someone watches, see release_seq)
 * and wake waiters through a condition variable, so a standby that was busy
 * when one was made still sees it. */
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
    int64_t expires_ms; /* clock_boot_ms */
};

/* A watched key's release counter. Never removed: one per guard key. */
struct local_chan {
    struct local_chan *next;
    char *key;
    uint64_t seq;
};

struct local_locker {
    struct locker base;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    struct local_entry *buckets[LOCAL_BUCKETS];
    size_t count;
    uint64_t last_epoch;
    int64_t next_sweep_ms;
    struct local_chan *chans[LOCAL_BUCKETS];
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
    int64_t now = clock_boot_ms();
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
        out->sent_ms = now;
        out->gen = 0; /* no connection: nothing can break between calls */
        out->held_pttl_ms = 0;
    }
    return LOCKER_OK;
}

static int local_unlock(struct locker *l, const char *key, const char *token,
                        char err[LOCKER_ERR_MAX])
{
    struct local_locker *ll = (struct local_locker *)l;
    pthread_mutex_lock(&ll->mu);
    int64_t now = clock_boot_ms();
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
                       int64_t *sent_ms, char err[LOCKER_ERR_MAX])
{
    struct local_locker *ll = (struct local_locker *)l;
    pthread_mutex_lock(&ll->mu);
    int64_t now = clock_boot_ms();
    *sent_ms = now;
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
    struct local_entry *e = find_live(ll, key, clock_boot_ms());
    int rc = (e != NULL && strcmp(e->token, token) == 0) ? LOCKER_OK : LOCKER_LOST;
    pthread_mutex_unlock(&ll->mu);
    if (rc == LOCKER_LOST) snprintf(err, LOCKER_ERR_MAX, "local locker: %s not held by us", key);
    return rc;
}

/* mu held: key's release counter; created (watching starts) when create. */
static struct local_chan *chan_find(struct local_locker *ll, const char *key, bool create)
{
    uint32_t b = hash_key(key);
    for (struct local_chan *c = ll->chans[b]; c; c = c->next)
        if (strcmp(c->key, key) == 0) return c;
    if (!create) return NULL;
    struct local_chan *c = xcalloc(1, sizeof *c);
    c->key = xstrdup(key);
    c->next = ll->chans[b];
    ll->chans[b] = c;
    return c;
}

static int local_announce(struct locker *l, const char *key, char err[LOCKER_ERR_MAX])
{
    struct local_locker *ll = (struct local_locker *)l;
    pthread_mutex_lock(&ll->mu);
    struct local_chan *c = chan_find(ll, key, false); /* unwatched: nobody to tell */
    if (c != NULL) {
        c->seq++;
        pthread_cond_broadcast(&ll->cv);
    }
    pthread_mutex_unlock(&ll->mu);
    return LOCKER_OK;
}

static uint64_t local_release_seq(struct locker *l, const char *key)
{
    struct local_locker *ll = (struct local_locker *)l;
    pthread_mutex_lock(&ll->mu);
    uint64_t seq = chan_find(ll, key, true)->seq;
    pthread_mutex_unlock(&ll->mu);
    return seq;
}

static bool local_wait_release(struct locker *l, const char *key, uint64_t seen,
                               int64_t timeout_ms)
{
    struct local_locker *ll = (struct local_locker *)l;
    struct timespec ts = clock_deadline(CLOCK_MONOTONIC, timeout_ms);
    pthread_mutex_lock(&ll->mu);
    struct local_chan *c = chan_find(ll, key, true);
    while (c->seq == seen)
        if (pthread_cond_timedwait(&ll->cv, &ll->mu, &ts) != 0) break;
    bool changed = c->seq != seen;
    pthread_mutex_unlock(&ll->mu);
    return changed;
}

static int local_ping(struct locker *l, char err[LOCKER_ERR_MAX])
{
    return LOCKER_OK; /* in process: always reachable */
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
        struct local_chan *c = ll->chans[i];
        while (c) {
            struct local_chan *next = c->next;
            free(c->key);
            free(c);
            c = next;
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
    .release_seq = local_release_seq,
    .wait_release = local_wait_release,
    .generation = NULL,
    .check = local_check,
    .destroy = local_destroy,
    .ping = local_ping,
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
