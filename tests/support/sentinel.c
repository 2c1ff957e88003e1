/* See sentinel.h. */
#include "tests/support/sentinel.h"

#include "tests/support/child.h"
#include "tests/support/free_port.h"
#include "tests/support/redis_server.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct sentinel_proc {
    struct child c;
    int port;
    char conf[220];
};

struct sentinel_cluster {
    char name[64];
    int n_redis, n_sentinels;
    int down_after_ms, failover_timeout_ms;
    struct redis_server *redis[SENTINEL_MAX_REDIS];
    struct sentinel_proc sent[SENTINEL_MAX];
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

static bool answers_ping(int port)
{
    redisContext *c = connect_port(port, 200);
    bool ok = false;
    if (c) {
        redisReply *r = redisCommand(c, "PING");
        ok = r != NULL;
        if (r) freeReplyObject(r);
        redisFree(c);
    }
    return ok;
}

static int spawn_sentinel(void *arg)
{
    struct sentinel_proc *s = arg;
    const char *argv[] = {"redis-sentinel", s->conf, NULL};
    return child_spawn(&s->c, argv, NULL, answers_ping, s->port, 10000);
}

static int write_conf(const struct sentinel_cluster *cl, struct sentinel_proc *s, int master_port,
                      int quorum)
{
    snprintf(s->conf, sizeof s->conf, "%s/sentinel.conf", s->c.dir);
    FILE *f = fopen(s->conf, "w");
    if (f == NULL) return -1;
    fprintf(f,
            "port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\nlogfile %s/sentinel.log\n"
            "sentinel monitor %s 127.0.0.1 %d %d\n"
            "sentinel down-after-milliseconds %s %d\n"
            "sentinel failover-timeout %s %d\n"
            "sentinel parallel-syncs %s 1\n",
            s->port, s->c.dir, s->c.dir, cl->name, master_port, quorum, cl->name,
            cl->down_after_ms, cl->name, cl->failover_timeout_ms, cl->name);
    return fclose(f) == 0 ? 0 : -1;
}

/* SENTINEL master <name>: the value of field, or -1. */
static long master_field(int port, const char *name, const char *field)
{
    redisContext *c = connect_port(port, 500);
    if (c == NULL) return -1;
    long v = -1;
    redisReply *r = redisCommand(c, "SENTINEL master %s", name);
    if (r && r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i + 1 < r->elements; i += 2)
            if (r->element[i]->type == REDIS_REPLY_STRING && strcmp(r->element[i]->str, field) == 0)
                v = strtol(r->element[i + 1]->str, NULL, 10);
    if (r) freeReplyObject(r);
    redisFree(c);
    return v;
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
        redisContext *c = connect_port(redis_server_port(cl->redis[i]), 500);
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
    cl->down_after_ms = down_after_ms;
    cl->failover_timeout_ms = failover_timeout_ms;
    cl->redis[0] = redis_server_start(NULL);
    if (cl->redis[0] == NULL) goto fail;
    cl->n_redis = 1;
    int mport = redis_server_port(cl->redis[0]);
    char mp[16];
    snprintf(mp, sizeof mp, "%d", mport);
    for (int i = 1; i < n_redis; i++) {
        const char *args[] = {"--replicaof", "127.0.0.1", mp, NULL};
        cl->redis[i] = redis_server_start(args);
        if (cl->redis[i] == NULL) goto fail;
        cl->n_redis++;
    }
    for (int i = 1; i < n_redis; i++)
        if (!sentinel_cluster_wait_replica_synced(cl, i, 10000)) {
            fprintf(stderr, "sentinel: replica %d never synced\n", i);
            goto fail;
        }
    for (int i = 0; i < n_sentinels; i++) {
        struct sentinel_proc *s = &cl->sent[i];
        if (child_init(&s->c, "sentinel", "/tmp", "baton-csentinel", NULL) < 0) goto fail;
        cl->n_sentinels = i + 1;
        bool up = false;
        for (int attempt = 0; attempt < 5 && !up; attempt++) {
            s->port = test_free_port();
            up = s->port > 0 && write_conf(cl, s, mport, n_sentinels / 2 + 1) == 0 &&
                 spawn_sentinel(s) == 0;
        }
        if (!up) {
            fprintf(stderr, "sentinel: could not start redis-sentinel (see %s)\n", s->c.dir);
            goto fail;
        }
    }
    /* every sentinel knows the others and the replicas */
    int64_t deadline = child_now_ms() + 30000;
    for (;;) {
        bool ready = true;
        for (int i = 0; i < n_sentinels && ready; i++)
            ready = master_field(cl->sent[i].port, cl->name, "num-other-sentinels") >=
                        n_sentinels - 1 &&
                    master_field(cl->sent[i].port, cl->name, "num-slaves") >= n_redis - 1;
        if (ready) break;
        if (child_now_ms() > deadline) {
            fprintf(stderr, "sentinel: the sentinels did not discover each other in 30 s\n");
            goto fail;
        }
        usleep(100 * 1000);
    }
    return cl;
fail:
    sentinel_cluster_destroy(cl);
    return NULL;
}

int sentinel_cluster_sentinel_port(const struct sentinel_cluster *c, int i)
{
    return i >= 0 && i < c->n_sentinels ? c->sent[i].port : -1;
}

int sentinel_cluster_redis_port(const struct sentinel_cluster *c, int i)
{
    return i >= 0 && i < c->n_redis ? redis_server_port(c->redis[i]) : -1;
}

int sentinel_cluster_kill_redis(struct sentinel_cluster *c, int i)
{
    return i >= 0 && i < c->n_redis ? redis_server_stop(c->redis[i]) : -1;
}

int sentinel_cluster_restart_redis(struct sentinel_cluster *c, int i)
{
    return i >= 0 && i < c->n_redis ? redis_server_restart(c->redis[i]) : -1;
}

int sentinel_cluster_master_port(const struct sentinel_cluster *c)
{
    for (int i = 0; i < c->n_sentinels; i++) {
        int p = ask_master_port(c->sent[i].port, c->name);
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
            int q = ask_master_port(c->sent[i].port, c->name);
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
        char path[512];
        snprintf(path, sizeof path, "%s/sentinel.log", c->sent[i].c.dir);
        FILE *f = fopen(path, "r");
        if (f == NULL) continue;
        /* keep the last last_lines lines in a ring */
        char ring[64][256];
        int n = 0, keep = last_lines < 64 ? last_lines : 64;
        if (keep < 1) keep = 1;
        while (fgets(ring[n % keep], sizeof ring[0], f)) n++;
        fclose(f);
        fprintf(stderr, "--- sentinel %d (port %d), last lines of %s\n", i, c->sent[i].port, path);
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
            int q = ask_master_port(c->sent[i].port, c->name);
            if (q <= 0 || (p > 0 && q != p)) agree = false;
            p = q;
        }
        char role[32];
        bool ok = agree && p > 0 && strcmp(sentinel_cluster_role(p, role, sizeof role), "master") == 0;
        for (int i = 0; i < c->n_redis && ok; i++)
            if (redis_server_port(c->redis[i]) != p) ok = sentinel_cluster_wait_replica_synced(c, i, 0);
        if (ok) return p;
        usleep(100 * 1000);
    }
    return -1;
}

void sentinel_cluster_destroy(struct sentinel_cluster *c)
{
    if (c == NULL) return;
    for (int i = 0; i < c->n_sentinels; i++) child_release(&c->sent[i].c);
    for (int i = 0; i < c->n_redis; i++) redis_server_destroy(c->redis[i]);
    free(c);
}
