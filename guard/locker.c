/* Locker: status names and the NULL-safe wrappers shared by every backend,
 * plus the blocking lock() and lock_with_retry() built on try_lock(). */
#include "guard/locker.h"

#include <stdio.h>
#include <string.h>

#include "base/glog.h"
#include "guard/acquirer.h"
#include "guard/renewer.h"
#include "baton/scope.h"

/* Guards build their keys (baton_key, baton_lease_key) within BATON_GUARD_KEY_MAX
 * and call some backend operations directly (check, holder): those keys
 * must pass the wrappers' bound too, so their side keys always fit. */
_Static_assert(BATON_GUARD_KEY_MAX <= BATON_KEY_MAX, "guard keys exceed the lockers' key bound");
#include "base/util.h"

void locker_base_init(struct baton_locker *l, const struct locker_ops *ops, bool notifies_gen)
{
    l->ops = ops;
    l->notifies_gen = notifies_gen;
    pthread_mutex_init(&l->watch_mu, NULL);
    l->watchers = NULL;
    l->renewer = NULL;
    l->acquirer = NULL;
}

/* The renewer and the acquirer (they may use the backend's connections):
 * first of all. The acquirer leaves under watch_mu, so a release announced
 * meanwhile (locker_release_notify) never reaches a freed one. */
static void helpers_destroy(struct baton_locker *l)
{
    renewer_destroy(l->renewer);
    l->renewer = NULL;
    pthread_mutex_lock(&l->watch_mu);
    struct acquirer *a = l->acquirer;
    l->acquirer = NULL;
    pthread_mutex_unlock(&l->watch_mu);
    acquirer_destroy(a);
}

void locker_base_destroy(struct baton_locker *l)
{
    helpers_destroy(l);
    pthread_mutex_destroy(&l->watch_mu);
}

void locker_watch(struct baton_locker *l, struct locker_watcher *w)
{
    pthread_mutex_lock(&l->watch_mu);
    w->prev = NULL;
    w->next = l->watchers;
    if (l->watchers) l->watchers->prev = w;
    l->watchers = w;
    pthread_mutex_unlock(&l->watch_mu);
}

void locker_unwatch(struct baton_locker *l, struct locker_watcher *w)
{
    pthread_mutex_lock(&l->watch_mu);
    if (w->prev)
        w->prev->next = w->next;
    else if (l->watchers == w)
        l->watchers = w->next;
    if (w->next) w->next->prev = w->prev;
    w->next = w->prev = NULL;
    pthread_mutex_unlock(&l->watch_mu);
}

void locker_notify_gen(struct baton_locker *l)
{
    pthread_mutex_lock(&l->watch_mu);
    for (struct locker_watcher *w = l->watchers; w; w = w->next) {
        pthread_mutex_lock(w->mu);
        pthread_cond_broadcast(w->cv);
        pthread_mutex_unlock(w->mu);
    }
    pthread_mutex_unlock(&l->watch_mu);
}

void locker_release_notify(struct baton_locker *l, const char *key, size_t klen)
{
    pthread_mutex_lock(&l->watch_mu);
    acquirer_released(l->acquirer, key, klen);
    pthread_mutex_unlock(&l->watch_mu);
}

void baton_locker_holders(struct baton_locker *l, size_t n, const char *const *keys,
                          char *const *bufs, size_t len, int *rcs)
{
    char err[BATON_LOCKER_ERR_MAX];
    for (size_t i = 0; i < n; i++) rcs[i] = BATON_LOCKER_ERR;
    if (l == NULL || l->ops == NULL || l->ops->holder == NULL) return;
    if (l->ops->holders) {
        l->ops->holders(l, n, keys, bufs, len, rcs, err);
        return;
    }
    for (size_t i = 0; i < n; i++) rcs[i] = l->ops->holder(l, keys[i], bufs[i], len, err);
}

const char *baton_locker_status_name(int status)
{
    switch (status) {
    case BATON_LOCKER_OK: return "ok";
    case BATON_LOCKER_HELD: return "held";
    case BATON_LOCKER_LOST: return "lost";
    case BATON_LOCKER_ERR: return "error";
    case BATON_LOCKER_MISMATCH: return "token mismatch";
    case BATON_LOCKER_CANCELLED: return "cancelled";
    case BATON_LOCKER_EXHAUSTED: return "retries exhausted";
    case BATON_LOCKER_UNSUPPORTED: return "unsupported";
    default: return "unknown";
    }
}

static bool args_ok(struct baton_locker *l, const char *key, char err[BATON_LOCKER_ERR_MAX])
{
    if (l == NULL || l->ops == NULL) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "no locker");
        return false;
    }
    if (key == NULL || key[0] == '\0') {
        snprintf(err, BATON_LOCKER_ERR_MAX, "%s locker: empty key", l->ops->name);
        return false;
    }
    if (strlen(key) > BATON_KEY_MAX) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "%s locker: key %.64s... longer than %d bytes",
                 l->ops->name, key, BATON_KEY_MAX);
        return false;
    }
    return true;
}

/* args_ok, and a positive ttl (suffix names a shared value: "<key>:<suffix>"). */
static bool ttl_args_ok(struct baton_locker *l, const char *key, const char *suffix, int64_t ttl_ms,
                        char err[BATON_LOCKER_ERR_MAX])
{
    if (!args_ok(l, key, err)) return false;
    if (ttl_ms > 0) return true;
    snprintf(err, BATON_LOCKER_ERR_MAX, "%s locker: ttl must be > 0 (got %lld ms) for %.100s%s%.40s",
             l->ops->name, (long long)ttl_ms, key, suffix ? ":" : "", suffix ? suffix : "");
    return false;
}

int baton_locker_try_lock(struct baton_locker *l, const char *key, int64_t ttl_ms, struct baton_lock_grant *out,
                    char err[BATON_LOCKER_ERR_MAX])
{
    err[0] = '\0';
    if (!ttl_args_ok(l, key, NULL, ttl_ms, err)) return BATON_LOCKER_ERR;
    return l->ops->try_lock(l, key, ttl_ms, out, err);
}

int baton_locker_unlock(struct baton_locker *l, const char *key, const char *token, char err[BATON_LOCKER_ERR_MAX])
{
    err[0] = '\0';
    if (!args_ok(l, key, err)) return BATON_LOCKER_ERR;
    if (token == NULL) token = "";
    return l->ops->unlock(l, key, token, err);
}

int baton_locker_renew(struct baton_locker *l, const char *key, const char *token, int64_t ttl_ms,
                 int64_t *sent_ms, char err[BATON_LOCKER_ERR_MAX])
{
    err[0] = '\0';
    if (!args_ok(l, key, err)) return BATON_LOCKER_ERR;
    if (l->ops->renew == NULL) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "%s locker cannot renew", l->ops->name);
        return BATON_LOCKER_UNSUPPORTED;
    }
    if (ttl_ms <= 0) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "%s locker: ttl must be > 0 (got %lld ms) for %.100s",
                 l->ops->name, (long long)ttl_ms, key);
        return BATON_LOCKER_ERR;
    }
    int64_t sent_dummy;
    return l->ops->renew(l, key, token ? token : "", ttl_ms,
                         sent_ms ? sent_ms : &sent_dummy, err);
}

int baton_locker_ping(struct baton_locker *l, char err[BATON_LOCKER_ERR_MAX])
{
    if (l == NULL || l->ops == NULL || l->ops->ping == NULL) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "%s: no ping", baton_locker_backend(l));
        return BATON_LOCKER_UNSUPPORTED;
    }
    return l->ops->ping(l, err);
}

bool baton_locker_has_holder(const struct baton_locker *l)
{
    return l != NULL && l->ops != NULL && l->ops->holder != NULL;
}

int baton_locker_holder(struct baton_locker *l, const char *key, char *buf, size_t len,
                        char err[BATON_LOCKER_ERR_MAX])
{
    if (len) buf[0] = '\0';
    if (!baton_locker_has_holder(l)) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "%s: no holder", baton_locker_backend(l));
        return BATON_LOCKER_UNSUPPORTED;
    }
    return l->ops->holder(l, key, buf, len, err);
}

int baton_locker_where(struct baton_locker *l, char *buf, size_t len)
{
    if (len) buf[0] = '\0';
    if (l == NULL || l->ops == NULL || l->ops->where == NULL) return -1;
    l->ops->where(l, buf, len);
    return 0;
}

bool baton_locker_can_renew(const struct baton_locker *l)
{
    return l != NULL && l->ops != NULL && l->ops->renew != NULL;
}

int baton_locker_lock(struct baton_locker *l, const char *key, int64_t ttl_ms, int64_t retry_ms,
                const atomic_bool *cancel, struct baton_lock_grant *out, char err[BATON_LOCKER_ERR_MAX])
{
    struct ratelimit rl = {0, 0};
    if (retry_ms <= 0) retry_ms = 1;
    for (;;) {
        if (cancel != NULL && atomic_load(cancel)) {
            snprintf(err, BATON_LOCKER_ERR_MAX, "lock on %s cancelled", key ? key : "(null)");
            return BATON_LOCKER_CANCELLED;
        }
        int rc = baton_locker_try_lock(l, key, ttl_ms, out, err);
        if (rc == BATON_LOCKER_OK) return rc;
        if (rc != BATON_LOCKER_HELD) {
            if (l == NULL || l->ops == NULL || key == NULL || key[0] == '\0' || ttl_ms <= 0)
                return rc; /* bad arguments never get better */
            long long suppressed = 0;
            if (ratelimit_ok(&rl, 5000, &suppressed))
                glog_warn("locker", NULL, "lock %s: %s (retrying every %lld ms, %lld suppressed)",
                         key, err, (long long)retry_ms, suppressed);
        }
        if (sleep_ms_cancellable(retry_ms, cancel)) {
            snprintf(err, BATON_LOCKER_ERR_MAX, "lock on %s cancelled", key);
            return BATON_LOCKER_CANCELLED;
        }
    }
}

int baton_locker_lock_with_retry(struct baton_locker *l, const char *key, int64_t ttl_ms,
                           int64_t interval_ms, int max_retries, const atomic_bool *cancel,
                           struct baton_lock_grant *out, int *attempts, char err[BATON_LOCKER_ERR_MAX])
{
    int n = 0, rc = BATON_LOCKER_ERR;
    if (max_retries < 0) max_retries = 0;
    if (interval_ms < 0) interval_ms = 0;
    err[0] = '\0';
    for (;;) {
        if (cancel != NULL && atomic_load(cancel)) {
            rc = BATON_LOCKER_CANCELLED;
            snprintf(err, BATON_LOCKER_ERR_MAX, "lock on %s cancelled", key ? key : "(null)");
            break;
        }
        n++;
        rc = baton_locker_try_lock(l, key, ttl_ms, out, err);
        if (rc == BATON_LOCKER_OK) break;
        if (n > max_retries) {
            if (rc == BATON_LOCKER_HELD) {
                rc = BATON_LOCKER_EXHAUSTED;
                snprintf(err, BATON_LOCKER_ERR_MAX, "%s still held after %d attempts", key, n);
            }
            break;
        }
        if (interval_ms > 0 && sleep_ms_cancellable(interval_ms, cancel)) {
            rc = BATON_LOCKER_CANCELLED;
            snprintf(err, BATON_LOCKER_ERR_MAX, "lock on %s cancelled", key ? key : "(null)");
            break;
        }
    }
    if (attempts != NULL) *attempts = n;
    return rc;
}

void baton_locker_destroy(struct baton_locker *l)
{
    if (l == NULL) return;
    helpers_destroy(l);
    if (l->ops != NULL && l->ops->destroy != NULL) l->ops->destroy(l);
}

int baton_locker_claim(struct baton_locker *l, const char *key, int64_t ttl_ms, char err[BATON_LOCKER_ERR_MAX])
{
    err[0] = '\0';
    if (!ttl_args_ok(l, key, NULL, ttl_ms, err)) return BATON_LOCKER_ERR;
    if (l->ops->claim) return l->ops->claim(l, key, ttl_ms, err);
    struct baton_lock_grant g;
    return baton_locker_try_lock(l, key, ttl_ms, &g, err);
}

/* Names the backend itself writes beside a lease: fenced_set must not
 * overwrite them ("<key>:epoch" is the fence itself). */
static bool reserved_name(const char *name)
{
    return strcmp(name, "epoch") == 0 || strcmp(name, "holder") == 0;
}

static bool shared_args_ok(struct baton_locker *l, const char *key, const char *name, const char *what,
                           char err[BATON_LOCKER_ERR_MAX])
{
    if (!args_ok(l, key, err)) return false;
    if (name == NULL || name[0] == '\0') {
        snprintf(err, BATON_LOCKER_ERR_MAX, "%s locker: %s %.100s: empty name", l->ops->name, what, key);
        return false;
    }
    if (strlen(name) > BATON_NAME_MAX) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "%s locker: %s %.100s: name longer than %d bytes",
                 l->ops->name, what, key, BATON_NAME_MAX);
        return false;
    }
    return true;
}

static int no_shared_state(struct baton_locker *l, char err[BATON_LOCKER_ERR_MAX])
{
    snprintf(err, BATON_LOCKER_ERR_MAX, "backend %s keeps no shared state", l->ops->name);
    return BATON_LOCKER_UNSUPPORTED;
}

bool baton_locker_has_shared_state(const struct baton_locker *l)
{
    return l != NULL && l->ops != NULL && l->ops->fenced_set != NULL && l->ops->shared_get != NULL;
}

int baton_locker_fenced_set(struct baton_locker *l, const char *key, const char *name, uint64_t epoch,
                      const char *value, size_t len, int64_t ttl_ms, char err[BATON_LOCKER_ERR_MAX])
{
    err[0] = '\0';
    if (l != NULL && l->ops != NULL && l->ops->fenced_set == NULL) return no_shared_state(l, err);
    if (!shared_args_ok(l, key, name, "fenced write", err)) return BATON_LOCKER_ERR;
    if (reserved_name(name)) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "%s locker: fenced write %.100s: name \"%s\" is reserved",
                 l->ops->name, key, name);
        return BATON_LOCKER_ERR;
    }
    if (value == NULL && len > 0) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "%s locker: fenced write %.100s:%s: no value", l->ops->name,
                 key, name);
        return BATON_LOCKER_ERR;
    }
    if (!ttl_args_ok(l, key, name, ttl_ms, err)) return BATON_LOCKER_ERR;
    return l->ops->fenced_set(l, key, name, epoch, value ? value : "", len, ttl_ms, err);
}

int baton_locker_shared_get(struct baton_locker *l, const char *key, const char *name, char *buf, size_t len,
                      char err[BATON_LOCKER_ERR_MAX])
{
    err[0] = '\0';
    if (buf != NULL && len > 0) buf[0] = '\0';
    if (l != NULL && l->ops != NULL && l->ops->shared_get == NULL) return no_shared_state(l, err);
    if (!shared_args_ok(l, key, name, "shared read", err)) return BATON_LOCKER_ERR;
    if (buf == NULL || len == 0) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "%s locker: shared read %.100s:%s: no buffer", l->ops->name,
                 key, name);
        return BATON_LOCKER_ERR;
    }
    return l->ops->shared_get(l, key, name, buf, len, err);
}

int baton_locker_inspect(struct baton_locker *l, const char *key, struct baton_lock_info *info,
                   char err[BATON_LOCKER_ERR_MAX])
{
    err[0] = '\0';
    memset(info, 0, sizeof *info);
    info->ttl_ms = -1;
    if (!args_ok(l, key, err)) return BATON_LOCKER_ERR;
    if (l->ops->inspect == NULL) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "%s locker cannot inspect a lease", l->ops->name);
        return BATON_LOCKER_UNSUPPORTED;
    }
    return l->ops->inspect(l, key, info, err);
}

void locker_subkey(char buf[LOCKER_SUBKEY_MAX], const char *key, const char *name)
{
    snprintf(buf, LOCKER_SUBKEY_MAX, "%s:%s", key, name);
}

const char *baton_locker_backend(const struct baton_locker *l)
{
    return l && l->ops ? l->ops->name : "none";
}

int baton_locker_lease_traffic(const struct baton_locker *l, uint64_t *round_trips, uint64_t *calls)
{
    if (l == NULL || l->ops == NULL || l->ops->lease_traffic == NULL) return -1;
    l->ops->lease_traffic(l, round_trips, calls);
    return 0;
}
