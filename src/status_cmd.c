#include "src/status_cmd.h"

#include <string.h>

#include "common/redact.h"

#include "baton/locker.h"
#include "baton/scope.h"

/* The STATE column, in the words /status uses for a replica's role
 * (role_name() in src/status_pages.c; README "Status words"):
 *   has-leader     ActiveGuard: a replica holds the lease (HOLDER says which)
 *   no-leader      ActiveGuard: nobody holds it (a takeover is pending, or no
 *                  replica runs or reaches Redis)
 *   once-per-slot  OnceGuard: every replica runs the clock, one fires each slot
 *   every-replica  guard "none": every replica consumes (e.g. an MQTT $share
 *                  group: the broker spreads the messages)
 *   single-process no locker configured: the guards are off, every process
 *                  runs every endpoint as if it were alone
 *   disabled       enabled = false
 * The leader/standby split is per replica: only /status shows it. */
static const char *unleased_state(const struct endpoint_config *e, bool has_locker)
{
    if (!e->enabled) return "disabled";
    if (!has_locker) return "single-process";
    return e->guard == GUARD_ONCE ? "once-per-slot" : "every-replica";
}

#define ROW "%-24s %-11s %-6s %-14s %-20s %-10s %s\n"

int status_cmd_run(const struct baton_config *cfg, FILE *out)
{
    if (!cfg->has_locker) {
        fprintf(out, ROW, "ENDPOINT", "TYPE", "GUARD", "STATE", "EPOCH", "TTL_MS", "HOLDER");
        for (size_t i = 0; i < cfg->n_endpoints; i++) {
            const struct endpoint_config *e = &cfg->endpoints[i];
            fprintf(out, ROW, e->name, e->type, guard_kind_name(e->guard), unleased_state(e, false), "-", "-",
                    "-");
        }
        fprintf(out, "(no locker configured: single-process mode, every replica runs every endpoint)\n");
        return BATON_EXIT_OK;
    }
    char err[512] = "";
    /* the locker's inspect op: the same view for every backend */
    struct baton_locker *l = config_locker_create(cfg, err, sizeof err);
    if (!l) {
        char shown[600];
        fprintf(stderr, "baton status: %s\n", redact_urls(err, shown, sizeof shown));
        return BATON_EXIT_START;
    }
    int rc = BATON_EXIT_OK;
    fprintf(out, ROW, "ENDPOINT", "TYPE", "GUARD", "STATE", "EPOCH", "TTL_MS", "HOLDER");
    for (size_t i = 0; i < cfg->n_endpoints; i++) {
        const struct endpoint_config *e = &cfg->endpoints[i];
        char scope[BATON_GUARD_KEY_MAX], key[BATON_GUARD_KEY_MAX];
        baton_scope(scope, sizeof scope, e->type, cfg->owner, e->name);
        if (e->guard != GUARD_ACTIVE) {
            fprintf(out, ROW, e->name, e->type, guard_kind_name(e->guard), unleased_state(e, true), "-", "-",
                    "-");
            continue;
        }
        baton_lease_key(key, sizeof key, cfg->key_prefix, scope, cfg->locker_hash_tag);
        struct baton_lock_info info;
        char lerr[BATON_LOCKER_ERR_MAX];
        if (baton_locker_inspect(l, key, &info, lerr) != BATON_LOCKER_OK) {
            /* the first failure says it all (the backend is down): stop there */
            char shown[BATON_LOCKER_ERR_MAX + 32];
            fprintf(stderr, "baton status: %s\n", redact_urls(lerr, shown, sizeof shown));
            rc = BATON_EXIT_START;
            break;
        }
        char epoch[32] = "-", ttl[32] = "-";
        if (info.epoch) snprintf(epoch, sizeof epoch, "%llu", (unsigned long long)info.epoch);
        if (info.held && info.ttl_ms >= 0) snprintf(ttl, sizeof ttl, "%lld", (long long)info.ttl_ms);
        /* a disabled endpoint's lease may still be held by a replica running
         * an older configuration: the epoch, ttl and holder columns show it */
        const char *state = info.held ? "has-leader" : "no-leader";
        if (!e->enabled) state = "disabled";
        fprintf(out, ROW, e->name, e->type, "active", state, epoch, ttl,
                info.held ? (info.holder[0] ? info.holder : "?") : "-");
    }
    baton_locker_destroy(l);
    return rc;
}
