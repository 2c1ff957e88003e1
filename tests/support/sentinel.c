/* See sentinel.h. */
#include "tests/support/sentinel.h"

#include "tests/support/child.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sentinel_cluster {
    int n_redis, n_sentinels;
    int redis_port[SENTINEL_MAX_REDIS];
    int sentinel_port[SENTINEL_MAX];
    struct launcher l; /* tests/support/brokers.py sentinel */
};

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
    char nr[16], ns[16], da[16], ft[16];
    snprintf(nr, sizeof nr, "%d", n_redis);
    snprintf(ns, sizeof ns, "%d", n_sentinels);
    snprintf(da, sizeof da, "%d", down_after_ms);
    snprintf(ft, sizeof ft, "%d", failover_timeout_ms);
    const char *args[] = {"sentinel", "--name", master_name, "--redis", nr, "--sentinels", ns,
                          "--down-after-ms", da, "--failover-timeout-ms", ft, NULL};
    /* it waits until the replicas are in sync and every sentinel knows the
     * others and the replicas (up to 15 + 30 s) */
    if (launcher_start(&cl->l, args, NULL, 90000) < 0) {
        fprintf(stderr, "sentinel: the deployment did not come up\n");
        free(cl);
        return NULL;
    }
    cl->n_redis = n_redis;
    cl->n_sentinels = n_sentinels;
    for (int i = 0; i < n_redis; i++)
        cl->redis_port[i] = (int)launcher_int(&cl->l, "redis_ports", i);
    for (int i = 0; i < n_sentinels; i++)
        cl->sentinel_port[i] = (int)launcher_int(&cl->l, "sentinel_ports", i);
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

bool sentinel_cluster_wait_replica_synced(struct sentinel_cluster *c, int i, int timeout_ms)
{
    return i >= 0 && i < c->n_redis &&
           launcher_cmd(&c->l, "wait_synced %d %d", i, timeout_ms) == 0 &&
           strstr(c->l.reply, "\"synced\": true") != NULL;
}

int sentinel_cluster_wait_new_master(struct sentinel_cluster *c, int not_port, int timeout_ms)
{
    if (launcher_cmd(&c->l, "wait_new_master %d %d", not_port, timeout_ms) < 0) return -1;
    return (int)launcher_int(&c->l, "port", -1);
}

int sentinel_cluster_wait_settled(struct sentinel_cluster *c, int timeout_ms)
{
    if (launcher_cmd(&c->l, "wait_settled %d", timeout_ms) < 0) return -1;
    return (int)launcher_int(&c->l, "port", -1);
}

void sentinel_cluster_dump_logs(struct sentinel_cluster *c, int last_lines)
{
    launcher_cmd(&c->l, "dump_logs %d", last_lines);
}

void sentinel_cluster_destroy(struct sentinel_cluster *c)
{
    if (c == NULL) return;
    launcher_stop(&c->l);
    free(c);
}
