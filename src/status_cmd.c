#include "src/status_cmd.h"

#include <hiredis/hiredis.h>
#include <string.h>

#include "guard/redis_conn.h"
#include "guard/scope.h"

static void get_string(redisContext *c, const char *cmd, const char *key, char *out, size_t len)
{
    out[0] = '\0';
    redisReply *r = redisCommand(c, "%s %s", cmd, key);
    if (!r) return;
    if (r->type == REDIS_REPLY_STRING) snprintf(out, len, "%.*s", (int)r->len, r->str);
    else if (r->type == REDIS_REPLY_INTEGER) snprintf(out, len, "%lld", r->integer);
    freeReplyObject(r);
}

/* The STATE column, in the words /status uses for a replica's role
 * (role_name() in src/gateway.c; README "Status words"):
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
    redisContext *c = redis_conn_open(&cfg->locker_redis, err, sizeof err);
    if (!c) {
        fprintf(stderr, "baton status: %s\n", err);
        return BATON_EXIT_START;
    }
    fprintf(out, ROW, "ENDPOINT", "TYPE", "GUARD", "STATE", "EPOCH", "TTL_MS", "HOLDER");
    for (size_t i = 0; i < cfg->n_endpoints; i++) {
        const struct endpoint_config *e = &cfg->endpoints[i];
        char scope[GUARD_KEY_MAX], key[GUARD_KEY_MAX], sub[GUARD_KEY_MAX + 16];
        char token[128], epoch[64], ttl[64], holder[256];
        guard_scope(scope, sizeof scope, e->type, cfg->owner, e->name);
        if (e->guard != GUARD_ACTIVE) {
            fprintf(out, ROW, e->name, e->type, guard_kind_name(e->guard), unleased_state(e, true), "-", "-",
                    "-");
            continue;
        }
        guard_key(key, sizeof key, cfg->key_prefix, "active", scope, NULL);
        get_string(c, "GET", key, token, sizeof token);
        get_string(c, "PTTL", key, ttl, sizeof ttl);
        snprintf(sub, sizeof sub, "%s:epoch", key);
        get_string(c, "GET", sub, epoch, sizeof epoch);
        snprintf(sub, sizeof sub, "%s:holder", key);
        get_string(c, "GET", sub, holder, sizeof holder);
        /* a disabled endpoint's lease may still be held by a replica running
         * an older configuration: the epoch, ttl and holder columns show it */
        const char *state = token[0] ? "has-leader" : "no-leader";
        if (!e->enabled) state = "disabled";
        fprintf(out, ROW, e->name, e->type, "active", state, epoch[0] ? epoch : "-", token[0] ? ttl : "-",
                token[0] ? (holder[0] ? holder : "?") : "-");
    }
    if (c->err) fprintf(stderr, "baton status: redis error: %s\n", c->errstr);
    redisFree(c);
    return BATON_EXIT_OK;
}
