#include "src/status_cmd.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/redact.h"

#include "baton/locker.h"
#include "baton/log.h"
#include "baton/scope.h"

/* The STATE column, in the words /status uses for a replica's role
 * (role_name() in src/status_pages.c; docs/operations.md, "Status words"):
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

/* A failed lease lookup as one line: what failed first, then why. err
 * begins with the locker's description ("redis 127.0.0.1:6379: ...") when
 * the backend says where: not repeated. */
static void say_locker_failed(const struct baton_config *cfg, const char *err)
{
    char where[300], shown[BATON_LOCKER_ERR_MAX + 32], why[BATON_LOCKER_ERR_MAX + 32];
    config_locker_describe(cfg, where, sizeof where);
    size_t wl = strlen(where);
    const char *rest = strncmp(err, where, wl) == 0 && strncmp(err + wl, ": ", 2) == 0 ? err + wl + 2 : err;
    snprintf(why, sizeof why, "%s", rest);
    /* a connection that failed, or no answer in time: the locker is out of
     * reach; anything else is an answer that was refused or not understood */
    bool unreachable = strstr(why, "onnect") || strstr(why, "timed out") || strstr(why, "timeout") ||
                       strstr(why, "resolve") || strstr(why, "unreachable");
    char line[sizeof where + sizeof why + 80];
    snprintf(line, sizeof line, "%s (%s): %s",
             unreachable ? "cannot reach the locker" : "cannot read the leases from the locker", where, why);
    fprintf(stderr, "baton status: %s\n", redact_urls(line, shown, sizeof shown));
}

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
    /* A locker out of reach is said in one line (say_locker_failed): its
     * own "will keep retrying" lines are for a running replica, not for a
     * command that stops at the first failure; --log-level info or debug
     * shows them. */
    bool quiet = log_get_level() < LOG_INFO;
    if (quiet) baton_log_set(NULL, NULL, BATON_LOG_OFF);
    /* the locker's inspect op: the same view for every backend */
    struct baton_locker *l = config_locker_create(cfg, err, sizeof err);
    if (!l) {
        if (quiet) log_set_level(log_get_level()); /* the guard library logs again */
        char shown[600];
        fprintf(stderr, "baton status: %s\n", redact_urls(err, shown, sizeof shown));
        return BATON_EXIT_START;
    }
    int rc = BATON_EXIT_OK;
    /* the table is printed once every lease was read: a failure prints no
     * half table */
    char *table = NULL;
    size_t table_len = 0;
    FILE *real_out = out;
    out = open_memstream(&table, &table_len);
    if (!out) out = real_out;
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
            say_locker_failed(cfg, lerr);
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
    if (quiet) log_set_level(log_get_level()); /* the guard library logs again */
    if (out != real_out) {
        fclose(out);
        if (rc == BATON_EXIT_OK) fwrite(table, 1, table_len, real_out);
        free(table);
    }
    return rc;
}
