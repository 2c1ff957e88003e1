#include "src/prefer.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "src/gateway_private.h"

#define PREFER_NAME "prefer"
#define PREFER_TTL_MS (3 * OBSERVE_MS)
#define PREFER_PER_ROUND 32 /* 1,000 endpoints: each looked at every 31 s */

/* "<priority> <epoch>": false when absent or malformed. */
static bool read_marker(struct gateway *gw, const struct gw_endpoint *e, int64_t *prio, uint64_t *epoch)
{
    char buf[64], err[BATON_LOCKER_ERR_MAX];
    if (baton_locker_shared_get(gw->locker, e->lease_key, PREFER_NAME, buf, sizeof buf, err) != BATON_LOCKER_OK)
        return false;
    long long p;
    unsigned long long ep;
    if (sscanf(buf, "%lld %llu", &p, &ep) != 2) return false;
    *prio = p;
    *epoch = ep;
    return true;
}

static void one(struct gateway *gw, struct gw_endpoint *e, bool ready, int64_t now)
{
    int64_t mine = gw->cfg->priority;
    int64_t p = -1;
    uint64_t pe = 0;
    bool marked = read_marker(gw, e, &p, &pe);
    bool better_waits = marked && p > mine;
    atomic_store(&e->prefer_yield, better_waits);
    if (baton_active_guard_is_leader_now(e->guard)) {
        e->prefer_since_ms = 0;
        uint64_t epoch = baton_active_guard_epoch(e->guard);
        if (!(better_waits && pe == epoch)) {
            e->prefer_seen_ms = 0;
            return;
        }
        /* acted on only once every standby had the time to see the marker
         * and to make an attempt since (its delay after a release is the
         * one computed at its last attempt, at most a ttl ago) */
        if (e->prefer_seen_ms == 0) e->prefer_seen_ms = now;
        int64_t settle = e->cfg->lease.ttl_ms + 2 * OBSERVE_MS;
        if (now - e->prefer_seen_ms >= settle && e->prefer_acted_epoch != epoch && !atomic_load(&gw->stopping)) {
            e->prefer_acted_epoch = epoch;
            char reason[128];
            snprintf(reason, sizeof reason, "handing over to a replica of priority %lld (this one: %lld)",
                     (long long)p, (long long)mine);
            log_info("gateway", e->cfg->name, "%s", reason);
            atomic_store(&e->stepping_down, true);
            baton_active_guard_step_down(e->guard, reason, 0);
        }
        return;
    }
    /* a standby: does it wait to be preferred? */
    bool eligible = mine > 0 && ready && !gateway_draining(gw) && baton_active_guard_hold_left_ms(e->guard) == 0;
    if (!eligible) {
        e->prefer_since_ms = 0;
        return;
    }
    if (e->prefer_since_ms == 0) e->prefer_since_ms = now;
    if (now - e->prefer_since_ms < gw->cfg->prefer_after_ms) return;
    struct baton_lock_info info;
    char err[BATON_LOCKER_ERR_MAX];
    if (baton_locker_inspect(gw->locker, e->lease_key, &info, err) != BATON_LOCKER_OK || !info.held || !info.epoch)
        return;
    if (marked && pe == info.epoch && p > mine) return; /* a replica preferred to this one waits */
    char v[64];
    int n = snprintf(v, sizeof v, "%lld %llu", (long long)mine, (unsigned long long)info.epoch);
    if (baton_locker_fenced_set(gw->locker, e->lease_key, PREFER_NAME, info.epoch, v, (size_t)n, PREFER_TTL_MS,
                                err) == BATON_LOCKER_OK &&
        !(marked && pe == info.epoch && p == mine))
        log_info("gateway", e->cfg->name,
                 "a standby of priority %lld for %lld ms: asking the leader (epoch %llu) to hand over",
                 (long long)mine, (long long)(now - e->prefer_since_ms), (unsigned long long)info.epoch);
}

void prefer_round(struct gateway *gw, bool ready)
{
    if (!gw->locker || gw->n_eps == 0 || !baton_locker_has_shared_state(gw->locker)) return;
    int64_t now = clock_mono_ms();
    size_t done = 0, seen = 0;
    for (; seen < gw->n_eps && done < PREFER_PER_ROUND; seen++) {
        struct gw_endpoint *e = &gw->eps[(gw->prefer_cursor + seen) % gw->n_eps];
        if (!e->guard) continue;
        one(gw, e, ready, now);
        done++;
    }
    gw->prefer_cursor = (gw->prefer_cursor + seen) % gw->n_eps;
}
