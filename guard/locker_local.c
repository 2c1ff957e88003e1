/* In-process locker: a hash map of key -> (token, expiry) under one mutex,
 * swept lazily. Epochs come from one per-locker counter, floored by the wall
 * clock (ms * 1000) like the redis backend, so they increase per key and
 * across locker instances of one process lifetime. Expiry runs on
 * CLOCK_BOOTTIME, the clock of every "sent" time. Release announcements
 * advance a per-key counter (for the keys someone watches, see release_seq)
 * and wake waiters through a condition variable, so a standby that was busy
 * when one was made still sees it.
 *
 * Shared state lives in a second map of name -> (bytes, expiry), keyed like
 * the redis backend: "<key>:epoch" holds the decimal epoch of the last
 * acquisition of key (written by try_lock, expiring after max(2 x ttl, 24 h),
 * kept alive by renew), "<key>:<name>" the values written by fenced_set, which
 * compares against that record only (as in Redis: the lease itself may have
 * expired). claim() takes a plain entry without an epoch record, so one-shot
 * keys (one per delivery) never leave records behind for a day. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "guard/locker.h"
#include "base/util.h"

#define LOCAL_BUCKETS 256
#define SWEEP_EVERY_MS 1000
#define EPOCH_KEY_MIN_TTL_MS (24LL * 3600 * 1000)

struct local_entry {
    struct local_entry *next;
    char *key;
    char token[RANDOM_TOKEN_LEN];
    int64_t expires_ms; /* clock_boot_ms */
};

/* An expiring value of the shared map ("<key>:epoch", "<key>:<name>"). */
struct local_value {
    struct local_value *next;
    char *name;
    char *data; /* len bytes (+ a NUL, not counted) */
    size_t len;
    int64_t expires_ms; /* clock_boot_ms */
};

/* A watched key's release counter. Never removed: one per guard key. */
struct local_chan {
    struct local_chan *next;
    char *key;
    uint64_t seq;
};

struct local_locker {
    struct baton_locker base;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    struct local_entry *buckets[LOCAL_BUCKETS];
    size_t count;
    uint64_t last_epoch;
    uint64_t woken; /* wake_waiters calls */
    int64_t next_sweep_ms;
    struct local_chan *chans[LOCAL_BUCKETS];
    struct local_value *values[LOCAL_BUCKETS];
};

static uint32_t hash_key(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h % LOCAL_BUCKETS;
}

static void value_free(struct local_value *v)
{
    free(v->name);
    free(v->data);
    free(v);
}

static void sweep(struct local_locker *ll, int64_t now)
{
    if (now < ll->next_sweep_ms) return;
    ll->next_sweep_ms = now + SWEEP_EVERY_MS;
    for (int i = 0; i < LOCAL_BUCKETS; i++) {
        struct local_value **vp = &ll->values[i];
        while (*vp) {
            struct local_value *v = *vp;
            if (v->expires_ms <= now) {
                *vp = v->next;
                value_free(v);
            } else {
                vp = &v->next;
            }
        }
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

/* mu held: the live value called name (removing it first if it expired). */
static struct local_value *value_find(struct local_locker *ll, const char *name, int64_t now)
{
    struct local_value **vp = &ll->values[hash_key(name)];
    for (; *vp; vp = &(*vp)->next) {
        struct local_value *v = *vp;
        if (strcmp(v->name, name) != 0) continue;
        if (v->expires_ms > now) return v;
        *vp = v->next;
        value_free(v);
        return NULL;
    }
    return NULL;
}

/* mu held: sets name (copied) to data (len bytes) until expires_ms.
 * 0, or -1 out of memory (nothing changed). */
static int value_put(struct local_locker *ll, const char *name, const char *data, size_t len,
                     int64_t expires_ms, int64_t now)
{
    char *copy = malloc(len + 1);
    if (!copy) return -1;
    if (len > 0) memcpy(copy, data, len);
    copy[len] = '\0';
    struct local_value *v = value_find(ll, name, now);
    if (v != NULL) {
        free(v->data);
    } else {
        v = calloc(1, sizeof *v);
        char *vname = v ? strdup(name) : NULL;
        if (!vname) {
            free(v);
            free(copy);
            return -1;
        }
        v->name = vname;
        uint32_t b = hash_key(name);
        v->next = ll->values[b];
        ll->values[b] = v;
    }
    v->data = copy;
    v->len = len;
    v->expires_ms = expires_ms;
    return 0;
}

static int64_t epoch_ttl_ms(int64_t ttl_ms)
{
    return ttl_ms > EPOCH_KEY_MIN_TTL_MS / 2 ? ttl_ms * 2 : EPOCH_KEY_MIN_TTL_MS;
}

/* Takes key for ttl_ms with token unless a live entry holds it (BATON_LOCKER_HELD,
 * *held_pttl_ms set). With epoch != NULL, also advances the epoch and records
 * it as "<key>:epoch". */
static int acquire(struct local_locker *ll, const char *key, int64_t ttl_ms, const char *token,
                   uint64_t *epoch, int64_t *now_out, int64_t *held_pttl_ms)
{
    char ekey[LOCKER_SUBKEY_MAX];
    if (epoch != NULL) locker_subkey(ekey, key, "epoch"); /* claims record none */
    pthread_mutex_lock(&ll->mu);
    int64_t now = clock_boot_ms();
    *now_out = now;
    sweep(ll, now);
    struct local_entry *held = find_live(ll, key, now);
    if (held != NULL) {
        *held_pttl_ms = held->expires_ms - now;
        pthread_mutex_unlock(&ll->mu);
        return BATON_LOCKER_HELD;
    }
    struct local_entry *e = calloc(1, sizeof *e);
    if (e) e->key = strdup(key);
    if (!e || !e->key) {
        free(e);
        pthread_mutex_unlock(&ll->mu);
        return BATON_LOCKER_ERR; /* out of memory */
    }
    memcpy(e->token, token, RANDOM_TOKEN_LEN);
    e->expires_ms = now + ttl_ms;
    uint32_t b = hash_key(key);
    e->next = ll->buckets[b];
    ll->buckets[b] = e;
    ll->count++;
    if (epoch != NULL) {
        uint64_t floor = (uint64_t)clock_wall_ms() * 1000u;
        uint64_t ep = ll->last_epoch + 1;
        if (floor > ep) ep = floor;
        ll->last_epoch = ep;
        *epoch = ep;
        char dec[24];
        int n = snprintf(dec, sizeof dec, "%llu", (unsigned long long)ep);
        /* out of memory: the lock stands without its epoch record; the next
         * epoch still exceeds this one (last_epoch and the clock floor) */
        (void)value_put(ll, ekey, dec, (size_t)n, now + epoch_ttl_ms(ttl_ms), now);
    }
    pthread_mutex_unlock(&ll->mu);
    return BATON_LOCKER_OK;
}

static int local_try_lock(struct baton_locker *l, const char *key, int64_t ttl_ms,
                          struct baton_lock_grant *out, char err[BATON_LOCKER_ERR_MAX])
{
    struct local_locker *ll = (struct local_locker *)l;
    char token[RANDOM_TOKEN_LEN];
    if (random_token(token) != 0) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "local locker: no randomness for a token (%s)", key);
        return BATON_LOCKER_ERR;
    }
    uint64_t epoch = 0;
    int64_t now = 0, pttl = 0;
    int rc = acquire(ll, key, ttl_ms, token, &epoch, &now, &pttl);
    if (rc == BATON_LOCKER_HELD) {
        if (out) out->held_pttl_ms = pttl;
        return BATON_LOCKER_HELD;
    }
    if (rc != BATON_LOCKER_OK) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "local locker: %s: out of memory", key);
        return rc;
    }
    if (out != NULL) {
        memcpy(out->token, token, sizeof token);
        out->epoch = epoch;
        out->sent_ms = now;
        out->gen = 0; /* no connection: nothing can break between calls */
        out->held_pttl_ms = 0;
    }
    return BATON_LOCKER_OK;
}

/* One-shot claim (OnceGuard): a plain entry, no epoch record. */
static int local_claim(struct baton_locker *l, const char *key, int64_t ttl_ms,
                       char err[BATON_LOCKER_ERR_MAX])
{
    struct local_locker *ll = (struct local_locker *)l;
    char token[RANDOM_TOKEN_LEN];
    if (random_token(token) != 0) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "local locker: no randomness for a token (%s)", key);
        return BATON_LOCKER_ERR;
    }
    int64_t now = 0, pttl = 0; /* key and ttl checked by baton_locker_claim */
    int rc = acquire(ll, key, ttl_ms, token, NULL, &now, &pttl);
    if (rc == BATON_LOCKER_ERR)
        snprintf(err, BATON_LOCKER_ERR_MAX, "local locker: %s: out of memory", key);
    return rc;
}

static int local_unlock(struct baton_locker *l, const char *key, const char *token,
                        char err[BATON_LOCKER_ERR_MAX])
{
    struct local_locker *ll = (struct local_locker *)l;
    pthread_mutex_lock(&ll->mu);
    int64_t now = clock_boot_ms();
    struct local_entry *e = find_live(ll, key, now);
    int rc = BATON_LOCKER_MISMATCH;
    if (e != NULL && strcmp(e->token, token) == 0) {
        remove_entry(ll, e);
        rc = BATON_LOCKER_OK;
    }
    sweep(ll, now);
    pthread_mutex_unlock(&ll->mu);
    if (rc == BATON_LOCKER_MISMATCH)
        snprintf(err, BATON_LOCKER_ERR_MAX, "local locker: %s is %s", key,
                 e ? "held with another token" : "not held");
    return rc;
}

static int local_renew(struct baton_locker *l, const char *key, const char *token, int64_t ttl_ms,
                       int64_t *sent_ms, char err[BATON_LOCKER_ERR_MAX])
{
    struct local_locker *ll = (struct local_locker *)l;
    char ekey[LOCKER_SUBKEY_MAX];
    locker_subkey(ekey, key, "epoch");
    pthread_mutex_lock(&ll->mu);
    int64_t now = clock_boot_ms();
    *sent_ms = now;
    struct local_entry *e = find_live(ll, key, now);
    int rc = BATON_LOCKER_LOST;
    if (e != NULL && strcmp(e->token, token) == 0) {
        e->expires_ms = now + ttl_ms;
        /* the epoch record never expires while the lease is renewed */
        struct local_value *ev = value_find(ll, ekey, now);
        if (ev != NULL) ev->expires_ms = now + epoch_ttl_ms(ttl_ms);
        rc = BATON_LOCKER_OK;
    }
    pthread_mutex_unlock(&ll->mu);
    if (rc == BATON_LOCKER_LOST)
        snprintf(err, BATON_LOCKER_ERR_MAX, "local locker: %s is %s", key,
                 e ? "held with another token" : "gone");
    return rc;
}

static int local_check(struct baton_locker *l, const char *key, const char *token,
                       char err[BATON_LOCKER_ERR_MAX])
{
    struct local_locker *ll = (struct local_locker *)l;
    pthread_mutex_lock(&ll->mu);
    struct local_entry *e = find_live(ll, key, clock_boot_ms());
    int rc = (e != NULL && strcmp(e->token, token) == 0) ? BATON_LOCKER_OK : BATON_LOCKER_LOST;
    pthread_mutex_unlock(&ll->mu);
    if (rc == BATON_LOCKER_LOST) snprintf(err, BATON_LOCKER_ERR_MAX, "local locker: %s not held by us", key);
    return rc;
}

/* mu held: key's release counter; created (watching starts) when create. */
static struct local_chan *chan_find(struct local_locker *ll, const char *key, bool create)
{
    uint32_t b = hash_key(key);
    for (struct local_chan *c = ll->chans[b]; c; c = c->next)
        if (strcmp(c->key, key) == 0) return c;
    if (!create) return NULL;
    struct local_chan *c = calloc(1, sizeof *c);
    if (c) c->key = strdup(key);
    if (!c || !c->key) { /* out of memory: not watched; standbys fall back to polling */
        free(c);
        return NULL;
    }
    c->next = ll->chans[b];
    ll->chans[b] = c;
    return c;
}

static int local_announce(struct baton_locker *l, const char *key, char err[BATON_LOCKER_ERR_MAX])
{
    struct local_locker *ll = (struct local_locker *)l;
    pthread_mutex_lock(&ll->mu);
    struct local_chan *c = chan_find(ll, key, false); /* unwatched: nobody to tell */
    if (c != NULL) {
        c->seq++;
        pthread_cond_broadcast(&ll->cv);
    }
    pthread_mutex_unlock(&ll->mu);
    return BATON_LOCKER_OK;
}

static uint64_t local_release_seq(struct baton_locker *l, const char *key)
{
    struct local_locker *ll = (struct local_locker *)l;
    pthread_mutex_lock(&ll->mu);
    struct local_chan *c = chan_find(ll, key, true);
    uint64_t seq = c ? c->seq : 0; /* out of memory: unwatched, the standby polls */
    pthread_mutex_unlock(&ll->mu);
    return seq;
}

static bool local_wait_release(struct baton_locker *l, const char *key, uint64_t seen,
                               int64_t timeout_ms)
{
    struct local_locker *ll = (struct local_locker *)l;
    struct clock_wait cw = clock_wait_in(CLOCK_MONOTONIC, timeout_ms);
    pthread_mutex_lock(&ll->mu);
    struct local_chan *c = chan_find(ll, key, true);
    uint64_t woken = ll->woken;
    /* no channel (out of memory): wait out the timeout all the same */
    while ((c == NULL || c->seq == seen) && ll->woken == woken)
        if (clock_cond_wait(&ll->cv, &ll->mu, &cw) != 0) break;
    bool changed = c && c->seq != seen;
    pthread_mutex_unlock(&ll->mu);
    return changed;
}

static void local_wake_waiters(struct baton_locker *l)
{
    struct local_locker *ll = (struct local_locker *)l;
    pthread_mutex_lock(&ll->mu);
    ll->woken++;
    pthread_cond_broadcast(&ll->cv);
    pthread_mutex_unlock(&ll->mu);
}

static int local_ping(struct baton_locker *l, char err[BATON_LOCKER_ERR_MAX])
{
    return BATON_LOCKER_OK; /* in process: always reachable */
}

static int local_fenced_set(struct baton_locker *l, const char *key, const char *name, uint64_t epoch,
                            const char *value, size_t len, int64_t ttl_ms,
                            char err[BATON_LOCKER_ERR_MAX])
{
    struct local_locker *ll = (struct local_locker *)l;
    char ekey[LOCKER_SUBKEY_MAX];
    locker_subkey(ekey, key, "epoch");
    char vkey[LOCKER_SUBKEY_MAX];
    locker_subkey(vkey, key, name);
    char dec[24];
    int n = snprintf(dec, sizeof dec, "%llu", (unsigned long long)epoch);
    char current[24] = "";
    pthread_mutex_lock(&ll->mu);
    int64_t now = clock_boot_ms();
    sweep(ll, now);
    struct local_value *ev = value_find(ll, ekey, now);
    bool fenced_ok = ev != NULL && ev->len == (size_t)n && memcmp(ev->data, dec, (size_t)n) == 0;
    if (fenced_ok) {
        if (value_put(ll, vkey, value, len, now + ttl_ms, now) != 0) {
            pthread_mutex_unlock(&ll->mu);
            snprintf(err, BATON_LOCKER_ERR_MAX, "local locker: fenced write %s:%s: out of memory",
                     key, name);
            return BATON_LOCKER_ERR;
        }
    } else if (ev != NULL) {
        snprintf(current, sizeof current, "%.*s", (int)(ev->len < 23 ? ev->len : 23), ev->data);
    }
    pthread_mutex_unlock(&ll->mu);
    int rc = BATON_LOCKER_OK;
    if (!fenced_ok) {
        if (current[0])
            snprintf(err, BATON_LOCKER_ERR_MAX,
                     "local locker: fenced write %s:%s: epoch %s is not current (%s is)", key,
                     name, dec, current);
        else
            snprintf(err, BATON_LOCKER_ERR_MAX,
                     "local locker: fenced write %s:%s: epoch %s is gone (no epoch recorded)",
                     key, name, dec);
        rc = BATON_LOCKER_LOST;
    }
    return rc;
}

static int local_shared_get(struct baton_locker *l, const char *key, const char *name, char *buf,
                            size_t len, char err[BATON_LOCKER_ERR_MAX])
{
    struct local_locker *ll = (struct local_locker *)l;
    char vkey[LOCKER_SUBKEY_MAX];
    locker_subkey(vkey, key, name);
    int rc;
    size_t have = 0;
    pthread_mutex_lock(&ll->mu);
    struct local_value *v = value_find(ll, vkey, clock_boot_ms());
    if (v == NULL) {
        rc = BATON_LOCKER_LOST;
    } else if (v->len >= len) {
        have = v->len;
        rc = BATON_LOCKER_ERR;
    } else {
        memcpy(buf, v->data, v->len);
        buf[v->len] = '\0';
        rc = BATON_LOCKER_OK;
    }
    pthread_mutex_unlock(&ll->mu);
    if (rc == BATON_LOCKER_LOST)
        snprintf(err, BATON_LOCKER_ERR_MAX, "local locker: %.200s is not set (or expired)", vkey);
    else if (rc == BATON_LOCKER_ERR)
        snprintf(err, BATON_LOCKER_ERR_MAX,
                 "local locker: %.160s: value of %zu bytes exceeds the buffer of %zu (NUL included)",
                 vkey, have, len);
    return rc;
}

static void local_destroy(struct baton_locker *l)
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
        struct local_value *v = ll->values[i];
        while (v) {
            struct local_value *next = v->next;
            value_free(v);
            v = next;
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
    locker_base_destroy(&ll->base);
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
    .wake_waiters = local_wake_waiters,
    .generation = NULL,
    .check = local_check,
    .destroy = local_destroy,
    .claim = local_claim,
    .ping = local_ping,
    .fenced_set = local_fenced_set,
    .shared_get = local_shared_get,
};

struct baton_locker *baton_locker_local_create(void)
{
    struct local_locker *ll = calloc(1, sizeof *ll);
    if (!ll) return NULL;
    locker_base_init(&ll->base, &local_ops, true);
    pthread_mutex_init(&ll->mu, NULL);
    cond_init_clock(&ll->cv, CLOCK_MONOTONIC);
    return &ll->base;
}
