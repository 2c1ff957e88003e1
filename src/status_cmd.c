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

int status_cmd_run(const struct baton_config *cfg, FILE *out)
{
    if (!cfg->has_locker) {
        fprintf(out, "no locker configured: single-process mode, every replica runs every endpoint\n");
        return BATON_EXIT_OK;
    }
    char err[512] = "";
    redisContext *c = redis_conn_open(&cfg->locker_redis, err, sizeof err);
    if (!c) {
        fprintf(stderr, "baton status: %s\n", err);
        return BATON_EXIT_START;
    }
    fprintf(out, "%-24s %-11s %-6s %-8s %-20s %-10s %s\n", "ENDPOINT", "TYPE", "GUARD", "STATE", "EPOCH",
            "TTL_MS", "HOLDER");
    for (size_t i = 0; i < cfg->n_endpoints; i++) {
        const struct endpoint_config *e = &cfg->endpoints[i];
        char scope[GUARD_KEY_MAX], key[GUARD_KEY_MAX], sub[GUARD_KEY_MAX + 16];
        char token[128], epoch[64], ttl[64], holder[256];
        guard_scope(scope, sizeof scope, e->type, cfg->owner, e->name);
        if (e->guard != GUARD_ACTIVE) {
            fprintf(out, "%-24s %-11s %-6s %-8s %-20s %-10s %s\n", e->name, e->type, guard_kind_name(e->guard),
                    e->enabled ? "all" : "disabled", "-", "-", "-");
            continue;
        }
        guard_key(key, sizeof key, cfg->key_prefix, "active", scope, NULL);
        get_string(c, "GET", key, token, sizeof token);
        get_string(c, "PTTL", key, ttl, sizeof ttl);
        snprintf(sub, sizeof sub, "%s:epoch", key);
        get_string(c, "GET", sub, epoch, sizeof epoch);
        snprintf(sub, sizeof sub, "%s:holder", key);
        get_string(c, "GET", sub, holder, sizeof holder);
        const char *state = token[0] ? "led" : "vacant";
        if (!e->enabled) state = "disabled";
        fprintf(out, "%-24s %-11s %-6s %-8s %-20s %-10s %s\n", e->name, e->type, "active", state,
                epoch[0] ? epoch : "-", token[0] ? ttl : "-", token[0] ? (holder[0] ? holder : "?") : "-");
    }
    if (c->err) fprintf(stderr, "baton status: redis error: %s\n", c->errstr);
    redisFree(c);
    return BATON_EXIT_OK;
}
