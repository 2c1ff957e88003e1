/* OnceGuard: one SET NX per delivery identity; the winner proceeds. */
#include "baton/once_guard.h"

#include <stdlib.h>
#include <string.h>

#include "guard/locker.h"
#include "baton/scope.h"
#include "base/glog.h"
#include "base/util.h"

#define ONCE_DEFAULT_TTL_MS (3600LL * 1000)

struct baton_once_guard {
    struct baton_locker *locker; /* not owned */
    char *scope;
    char *prefix;
    char *log_name;
    int64_t ttl_ms;
    bool fail_open;
    struct ratelimit rl;
    struct baton_once_guard_stats stats;
};

struct baton_once_guard *baton_once_guard_create(struct baton_locker *locker, const char *scope,
                                     const struct baton_once_guard_options *opts)
{
    struct baton_once_guard *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->locker = locker;
    g->scope = strdup(scope ? scope : "");
    g->prefix = strdup(opts && opts->prefix && opts->prefix[0] ? opts->prefix
                                                                : BATON_DEFAULT_PREFIX);
    g->log_name = opts && opts->log_name ? strdup(opts->log_name) : NULL;
    if (!g->scope || !g->prefix || (opts && opts->log_name && !g->log_name)) {
        baton_once_guard_destroy(g);
        return NULL;
    }
    g->ttl_ms = opts && opts->ttl_ms > 0 ? opts->ttl_ms : ONCE_DEFAULT_TTL_MS;
    g->fail_open = opts ? opts->fail_open : false;
    return g;
}

/* Backend failure (or a key that cannot be built): decided by the policy. */
static bool on_failure(struct baton_once_guard *g, const char *key, const char *why)
{
    atomic_fetch_add(&g->stats.backend_errors, 1);
    if (g->fail_open)
        atomic_fetch_add(&g->stats.allowed, 1);
    else
        atomic_fetch_add(&g->stats.skipped, 1);
    long long suppressed = 0;
    if (ratelimit_ok(&g->rl, 1000, &suppressed))
        glog_warn("once_guard", g->log_name, "%s %s: %s (%s; %lld similar suppressed)", g->scope,
                 key ? key : "(null)", why,
                 g->fail_open ? "fail-open: allowed" : "fail-closed: skipped", suppressed);
    return g->fail_open;
}

bool baton_once_guard_allow(struct baton_once_guard *g, const char *key)
{
    if (g == NULL) return false;
    if (g->locker == NULL) {
        atomic_fetch_add(&g->stats.allowed, 1);
        return true;
    }
    if (key == NULL || key[0] == '\0') return on_failure(g, key, "empty delivery key");
    char full[BATON_GUARD_KEY_MAX];
    if (baton_key(full, sizeof full, g->prefix, "once", g->scope, key) < 0)
        return on_failure(g, key, "key too long");
    char err[BATON_LOCKER_ERR_MAX];
    err[0] = '\0';
    int rc = baton_locker_claim(g->locker, full, g->ttl_ms, err);
    if (rc == BATON_LOCKER_OK) {
        atomic_fetch_add(&g->stats.allowed, 1);
        glog_debug("once_guard", g->log_name, "%s: allowed", full);
        return true;
    }
    if (rc == BATON_LOCKER_HELD) {
        atomic_fetch_add(&g->stats.skipped, 1);
        glog_debug("once_guard", g->log_name, "%s: already taken elsewhere, skipped", full);
        return false;
    }
    return on_failure(g, key, err[0] ? err : baton_locker_status_name(rc));
}

const struct baton_once_guard_stats *baton_once_guard_stats(const struct baton_once_guard *g)
{
    return &g->stats;
}

void baton_once_guard_destroy(struct baton_once_guard *g)
{
    if (g == NULL) return;
    free(g->scope);
    free(g->prefix);
    free(g->log_name);
    free(g);
}
