/* See pg_server.h. */
#include "tests/support/pg_server.h"

#include "tests/support/child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct pg_server {
    struct launcher l; /* tests/support/brokers.py postgres */
    pid_t pid;         /* the postmaster's, 0 = not running */
    int port;
    char conninfo[128];
    char dir[256];
};

/* Whether name is an executable file in one of PATH's directories. */
static bool in_path(const char *name)
{
    const char *path = getenv("PATH");
    if (path == NULL || *path == '\0') path = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, ":");
        char file[512];
        if (n > 0 && snprintf(file, sizeof file, "%.*s/%s", (int)n, p, name) < (int)sizeof file &&
            access(file, X_OK) == 0)
            return true;
        p += n;
        if (*p == ':') p++;
    }
    return false;
}

bool pg_server_available(char *why, size_t len)
{
    char msg[512] = "";
    const char *bin = getenv("BATON_PG_BIN");
    if (bin == NULL || *bin == '\0') bin = "/usr/lib/postgresql/15/bin";
    char postgres[400];
    snprintf(postgres, sizeof postgres, "%s/postgres", bin);
    if (access(postgres, X_OK) != 0)
        snprintf(msg, sizeof msg,
                 "PostgreSQL 15 is not installed (no %s; apt-get install postgresql)", postgres);
    else if (!in_path("psql"))
        snprintf(msg, sizeof msg, "psql is not installed (apt-get install postgresql-client)");
    else if (!in_path("runuser"))
        snprintf(msg, sizeof msg, "runuser is not available (util-linux)");
    else if (getpwnam("postgres") == NULL)
        snprintf(msg, sizeof msg, "there is no user postgres to run PostgreSQL as");
    else if (geteuid() != 0)
        snprintf(msg, sizeof msg, "not root: PostgreSQL is run as the user postgres by runuser");
    if (why && len) snprintf(why, len, "%s", msg);
    return msg[0] == '\0';
}

struct pg_server *pg_server_start(void)
{
    char why[512];
    if (!pg_server_available(why, sizeof why)) {
        fprintf(stderr, "pg_server: %s\n", why);
        return NULL;
    }
    struct pg_server *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    const char *args[] = {"postgres", NULL};
    /* initdb (~1 s), then up to 5 ports of up to 60 s each in the worst case */
    if (launcher_start(&s->l, args, NULL, 120000) < 0) {
        fprintf(stderr, "pg_server: could not start PostgreSQL\n");
        free(s);
        return NULL;
    }
    s->port = (int)launcher_int(&s->l, "port", -1);
    long pid = launcher_int(&s->l, "pid", -1);
    s->pid = pid > 0 ? (pid_t)pid : 0;
    launcher_str(&s->l, "conninfo", -1, s->conninfo, sizeof s->conninfo);
    launcher_str(&s->l, "dir", -1, s->dir, sizeof s->dir);
    return s;
}

const char *pg_server_conninfo(const struct pg_server *s)
{
    return s->conninfo;
}

int pg_server_port(const struct pg_server *s)
{
    return s->port;
}

const char *pg_server_dir(const struct pg_server *s)
{
    return s->dir;
}

pid_t pg_server_pid(const struct pg_server *s)
{
    return s->pid;
}

bool pg_server_running(const struct pg_server *s)
{
    return s->pid > 0;
}

/* One command to the launcher; the postmaster's pid afterwards. */
static int server_cmd(struct pg_server *s, const char *cmd, bool need_running)
{
    if (s == NULL || (need_running && s->pid <= 0)) return -1;
    int rc = launcher_cmd(&s->l, "%s", cmd);
    long pid = launcher_int(&s->l, "pid", -1);
    s->pid = pid > 0 ? (pid_t)pid : 0;
    return rc;
}

int pg_server_stop(struct pg_server *s)
{
    return server_cmd(s, "stop", true);
}

int pg_server_kill(struct pg_server *s)
{
    return server_cmd(s, "kill", true);
}

int pg_server_restart(struct pg_server *s)
{
    if (server_cmd(s, "restart", false) == 0) return 0;
    fprintf(stderr, "pg_server: restart on port %d failed (see %s/server.log)\n", s ? s->port : -1,
            s ? s->dir : "");
    return -1;
}

int pg_server_pause(struct pg_server *s)
{
    return server_cmd(s, "pause", true);
}

int pg_server_resume(struct pg_server *s)
{
    return server_cmd(s, "resume", true);
}

int pg_server_sql(const struct pg_server *s, const char *sql, char *out, size_t outlen)
{
    if (out && outlen) out[0] = '\0';
    if (s == NULL || sql == NULL) return -1;
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) return -1;
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    const char *argv[] = {"psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                          "-h", "127.0.0.1", "-p", port, "-U", "postgres", "-d", "postgres",
                          "-c", sql, NULL};
    /* a server that does not accept (paused) must not hold psql past 10 s */
    static const char *const env[] = {"PGCONNECT_TIMEOUT", "10", NULL};
    pid_t pid = child_exec(argv, env, NULL, pfd[1]);
    close(pfd[1]);
    if (pid < 0) {
        close(pfd[0]);
        return -1;
    }
    size_t len = 0;
    int64_t deadline = child_now_ms() + 10000;
    char sink[512];
    for (;;) {
        int64_t left = deadline - child_now_ms();
        struct pollfd p = {.fd = pfd[0], .events = POLLIN};
        int n = left > 0 ? poll(&p, 1, (int)left) : 0;
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            kill(pid, SIGKILL);
            break;
        }
        char *dst = sink;
        size_t room = sizeof sink;
        if (out && outlen > len + 1) {
            dst = out + len;
            room = outlen - len - 1;
        }
        ssize_t r = read(pfd[0], dst, room);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (dst != sink) {
            len += (size_t)r;
            out[len] = '\0';
        }
    }
    close(pfd[0]);
    int st = child_reap_pid(pid);
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void pg_server_destroy(struct pg_server *s)
{
    if (s == NULL) return;
    launcher_stop(&s->l);
    free(s);
}
