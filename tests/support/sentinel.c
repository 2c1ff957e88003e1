/* See sentinel.h. */
#include "tests/support/sentinel.h"

#include "tests/support/child.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct sentinel_cluster {
    char name[64];
    int n_redis, n_sentinels;
    int redis_port[SENTINEL_MAX_REDIS];
    int sentinel_port[SENTINEL_MAX];
    char sentinel_log[SENTINEL_MAX][256];
    struct launcher l; /* tests/support/brokers.py sentinel */
};

static redisContext *connect_port(int port, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c && c->err) {
        redisFree(c);
        return NULL;
    }
    if (c) redisSetTimeout(c, tv);
    return c;
}

static int ask_master_port(int sport, const char *name)
{
    redisContext *c = connect_port(sport, 500);
    if (c == NULL) return -1;
    int port = -1;
    redisReply *r = redisCommand(c, "SENTINEL get-master-addr-by-name %s", name);
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        port = (int)strtol(r->element[1]->str, NULL, 10);
    if (r) freeReplyObject(r);
    redisFree(c);
    return port;
}

const char *sentinel_cluster_role(int port, char *buf, int len)
{
    buf[0] = '\0';
    redisContext *c = connect_port(port, 500);
    if (c == NULL) return buf;
    redisReply *r = redisCommand(c, "ROLE");
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
        r->element[0]->type == REDIS_REPLY_STRING)
        snprintf(buf, (size_t)len, "%s", r->element[0]->str);
    if (r) freeReplyObject(r);
    redisFree(c);
    return buf;
}

bool sentinel_cluster_wait_replica_synced(const struct sentinel_cluster *cl, int i, int timeout_ms)
{
    int64_t deadline = child_now_ms() + timeout_ms;
    for (;;) {
        redisContext *c = connect_port(cl->redis_port[i], 500);
        bool ok = false;
        if (c) {
            redisReply *r = redisCommand(c, "INFO replication");
            ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "role:slave") &&
                 strstr(r->str, "master_link_status:up");
            if (r) freeReplyObject(r);
            redisFree(c);
        }
        if (ok) return true;
        if (child_now_ms() >= deadline) return false;
        usleep(100 * 1000);
    }
}

struct sentinel_cluster *sentinel_cluster_start(const char *master_name, int n_redis,
                                                int n_sentinels, int down_after_ms,
                                                int failover_timeout_ms)
{
    if (system("command -v redis-sentinel >/dev/null 2>&1") != 0) {
        fprintf(stderr, "sentinel: redis-sentinel is not installed\n");
        return NULL;
    }
    if (n_redis < 1 || n_redis > SENTINEL_MAX_REDIS || n_sentinels < 1 ||
        n_sentinels > SENTINEL_MAX)
        return NULL;
    struct sentinel_cluster *cl = calloc(1, sizeof *cl);
    if (cl == NULL) return NULL;
    snprintf(cl->name, sizeof cl->name, "%s", master_name);
    char nr[16], ns[16], da[16], ft[16];
    snprintf(nr, sizeof nr, "%d", n_redis);
    snprintf(ns, sizeof ns, "%d", n_sentinels);
    snprintf(da, sizeof da, "%d", down_after_ms);
    snprintf(ft, sizeof ft, "%d", failover_timeout_ms);
    const char *args[] = {"sentinel", "--name", master_name, "--redis", nr, "--sentinels", ns,
                          "--down-after-ms", da, "--failover-timeout-ms", ft, NULL};
    /* it waits until the replicas are in sync and every sentinel knows the
     * others and the replicas (up to 15 + 30 s) */
    if (launcher_start(&cl->l, args, 90000) < 0) {
        fprintf(stderr, "sentinel: the deployment did not come up\n");
        free(cl);
        return NULL;
    }
    cl->n_redis = n_redis;
    cl->n_sentinels = n_sentinels;
    for (int i = 0; i < n_redis; i++)
        cl->redis_port[i] = (int)launcher_int(&cl->l, "redis_ports", i);
    for (int i = 0; i < n_sentinels; i++) {
        cl->sentinel_port[i] = (int)launcher_int(&cl->l, "sentinel_ports", i);
        launcher_str(&cl->l, "sentinel_logs", i, cl->sentinel_log[i], sizeof cl->sentinel_log[i]);
    }
    return cl;
}

int sentinel_cluster_sentinel_port(const struct sentinel_cluster *c, int i)
{
    return i >= 0 && i < c->n_sentinels ? c->sentinel_port[i] : -1;
}

int sentinel_cluster_redis_port(const struct sentinel_cluster *c, int i)
{
    return i >= 0 && i < c->n_redis ? c->redis_port[i] : -1;
}

int sentinel_cluster_kill_redis(struct sentinel_cluster *c, int i)
{
    return i >= 0 && i < c->n_redis ? launcher_cmd(&c->l, "kill_redis %d", i) : -1;
}

int sentinel_cluster_restart_redis(struct sentinel_cluster *c, int i)
{
    return i >= 0 && i < c->n_redis ? launcher_cmd(&c->l, "start_redis %d", i) : -1;
}

int sentinel_cluster_master_port(const struct sentinel_cluster *c)
{
    for (int i = 0; i < c->n_sentinels; i++) {
        int p = ask_master_port(c->sentinel_port[i], c->name);
        if (p > 0) return p;
    }
    return -1;
}

int sentinel_cluster_wait_new_master(const struct sentinel_cluster *c, int not_port,
                                     int timeout_ms)
{
    int64_t deadline = child_now_ms() + timeout_ms;
    while (child_now_ms() < deadline) {
        int p = -1;
        bool agree = true;
        for (int i = 0; i < c->n_sentinels && agree; i++) {
            int q = ask_master_port(c->sentinel_port[i], c->name);
            if (q <= 0 || q == not_port || (p > 0 && q != p)) agree = false;
            p = q;
        }
        char role[32];
        if (agree && p > 0 && strcmp(sentinel_cluster_role(p, role, sizeof role), "master") == 0)
            return p;
        usleep(100 * 1000);
    }
    return -1;
}

void sentinel_cluster_dump_logs(const struct sentinel_cluster *c, int last_lines)
{
    for (int i = 0; i < c->n_sentinels; i++) {
        const char *path = c->sentinel_log[i];
        FILE *f = fopen(path, "r");
        if (f == NULL) continue;
        /* keep the last last_lines lines in a ring */
        char ring[64][256];
        int n = 0, keep = last_lines < 64 ? last_lines : 64;
        if (keep < 1) keep = 1;
        while (fgets(ring[n % keep], sizeof ring[0], f)) n++;
        fclose(f);
        fprintf(stderr, "--- sentinel %d (port %d), last lines of %s\n", i, c->sentinel_port[i], path);
        for (int k = n > keep ? n - keep : 0; k < n; k++) fprintf(stderr, "    %s", ring[k % keep]);
    }
}

int sentinel_cluster_wait_settled(const struct sentinel_cluster *c, int timeout_ms)
{
    int64_t deadline = child_now_ms() + timeout_ms;
    while (child_now_ms() < deadline) {
        int p = -1;
        bool agree = true;
        for (int i = 0; i < c->n_sentinels && agree; i++) {
            int q = ask_master_port(c->sentinel_port[i], c->name);
            if (q <= 0 || (p > 0 && q != p)) agree = false;
            p = q;
        }
        char role[32];
        bool ok = agree && p > 0 && strcmp(sentinel_cluster_role(p, role, sizeof role), "master") == 0;
        for (int i = 0; i < c->n_redis && ok; i++)
            if (c->redis_port[i] != p) ok = sentinel_cluster_wait_replica_synced(c, i, 0);
        if (ok) return p;
        usleep(100 * 1000);
    }
    return -1;
}

void sentinel_cluster_destroy(struct sentinel_cluster *c)
{
    if (c == NULL) return;
    launcher_stop(&c->l);
    free(c);
}
