/* See redis_server.h. */
#include "tests/support/redis_server.h"

#include "tests/support/child.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct redis_server {
    struct launcher l; /* tests/support/brokers.py redis */
    pid_t pid;         /* 0 = not running */
    int port;
    char dir[256];
};

struct redis_server *redis_server_start(const char *const *extra_args)
{
    struct redis_server *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    const char *args[] = {"redis", "--", NULL};
    if (launcher_start(&s->l, args, extra_args, 60000) < 0) {
        fprintf(stderr, "redis_server: could not start redis-server\n");
        free(s);
        return NULL;
    }
    s->port = (int)launcher_int(&s->l, "port", -1);
    s->pid = (pid_t)launcher_int(&s->l, "pid", -1);
    launcher_str(&s->l, "dir", -1, s->dir, sizeof s->dir);
    return s;
}

int redis_server_port(const struct redis_server *s)
{
    return s->port;
}

const char *redis_server_dir(const struct redis_server *s)
{
    return s->dir;
}

bool redis_server_running(const struct redis_server *s)
{
    return s->pid > 0;
}

pid_t redis_server_pid(const struct redis_server *s)
{
    return s->pid;
}

/* One command to the launcher; the server's pid afterwards. */
static int server_cmd(struct redis_server *s, const char *cmd, bool need_running)
{
    if (s == NULL || (need_running && s->pid <= 0)) return -1;
    int rc = launcher_cmd(&s->l, "%s", cmd);
    long pid = launcher_int(&s->l, "pid", -1);
    s->pid = pid > 0 ? (pid_t)pid : 0;
    return rc;
}

int redis_server_term(struct redis_server *s)
{
    return server_cmd(s, "term", true);
}

int redis_server_stop(struct redis_server *s)
{
    return server_cmd(s, "kill", true);
}

int redis_server_restart(struct redis_server *s)
{
    if (server_cmd(s, "restart", false) == 0) return 0;
    fprintf(stderr, "redis_server: restart on port %d failed\n", s ? s->port : -1);
    return -1;
}

void redis_server_destroy(struct redis_server *s)
{
    if (s == NULL) return;
    launcher_stop(&s->l);
    free(s);
}
