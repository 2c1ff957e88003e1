/* See redis_server.h. */
#include "tests/support/redis_server.h"

#include "tests/support/child.h"
#include "tests/support/free_port.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct redis_server {
    struct child c; /* pid, directory, extra arguments */
    int port;
};

/* Any reply to PING (PONG, or NOAUTH with --requirepass) means it is up. */
static bool answers_ping(int port)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    bool ok = false;
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "PING");
        ok = r != NULL;
        if (r) freeReplyObject(r);
    }
    if (c) redisFree(c);
    return ok;
}

static int spawn(void *arg)
{
    struct redis_server *s = arg;
    char port[16], logfile[200];
    snprintf(port, sizeof port, "%d", s->port);
    snprintf(logfile, sizeof logfile, "%s/redis.log", s->c.dir);
    const char *argv[] = {"redis-server", "--port", port, "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "no", "--daemonize", "no",
                          "--dir", s->c.dir, "--logfile", logfile, NULL};
    return child_spawn(&s->c, argv, NULL, answers_ping, s->port, 10000);
}

struct redis_server *redis_server_start(const char *const *extra_args)
{
    struct redis_server *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    if (child_init(&s->c, "redis_server", "/tmp", "baton-credis", extra_args) < 0) {
        free(s);
        return NULL;
    }
    for (int attempt = 0; attempt < 5; attempt++) {
        s->port = test_free_port();
        if (s->port > 0 && spawn(s) == 0) return s;
    }
    fprintf(stderr, "redis_server: could not start redis-server (see %s/redis.log)\n", s->c.dir);
    redis_server_destroy(s);
    return NULL;
}

int redis_server_port(const struct redis_server *s)
{
    return s->port;
}

const char *redis_server_dir(const struct redis_server *s)
{
    return s->c.dir;
}

bool redis_server_running(const struct redis_server *s)
{
    return s->c.pid > 0;
}

pid_t redis_server_pid(const struct redis_server *s)
{
    return s->c.pid;
}

int redis_server_term(struct redis_server *s)
{
    return s ? child_stop(&s->c, 5000) : -1;
}

int redis_server_stop(struct redis_server *s)
{
    return s ? child_kill(&s->c) : -1;
}

int redis_server_restart(struct redis_server *s)
{
    if (s == NULL) return -1;
    /* ~5 s of retries: the port may linger briefly after a kill */
    if (child_respawn(&s->c, spawn, s, 25, 200) == 0) return 0;
    fprintf(stderr, "redis_server: restart on port %d failed\n", s->port);
    return -1;
}

void redis_server_destroy(struct redis_server *s)
{
    if (s == NULL) return;
    child_release(&s->c);
    free(s);
}
