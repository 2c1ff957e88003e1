/* See redis_server.h. */
#include "tests/support/redis_server.h"

#include "tests/support/free_port.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_EXTRA 16
#define MAX_SERVERS 32

struct redis_server {
    int port;
    pid_t pid; /* 0 = not running */
    char dir[128];
    char *extra[MAX_EXTRA + 1];
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct redis_server *registry[MAX_SERVERS];
static bool atexit_done;

static void kill_and_reap(struct redis_server *s)
{
    if (s->pid <= 0) return;
    kill(s->pid, SIGKILL);
    while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    s->pid = 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void remove_dir(const char *dir)
{
    if (dir[0]) nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static void cleanup_all(void)
{
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < MAX_SERVERS; i++) {
        if (registry[i] == NULL) continue;
        kill_and_reap(registry[i]);
        remove_dir(registry[i]->dir);
    }
    pthread_mutex_unlock(&reg_mu);
}

static void reg_add(struct redis_server *s)
{
    pthread_mutex_lock(&reg_mu);
    if (!atexit_done) {
        atexit(cleanup_all);
        atexit_done = true;
    }
    for (int i = 0; i < MAX_SERVERS; i++)
        if (registry[i] == NULL) {
            registry[i] = s;
            break;
        }
    pthread_mutex_unlock(&reg_mu);
}

static void reg_remove(struct redis_server *s)
{
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < MAX_SERVERS; i++)
        if (registry[i] == s) registry[i] = NULL;
    pthread_mutex_unlock(&reg_mu);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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

static int spawn(struct redis_server *s)
{
    char port[16], logfile[200];
    snprintf(port, sizeof port, "%d", s->port);
    snprintf(logfile, sizeof logfile, "%s/redis.log", s->dir);
    const char *argv[40] = {"redis-server", "--port", port, "--bind", "127.0.0.1",
                            "--save", "", "--appendonly", "no", "--daemonize", "no",
                            "--dir", s->dir, "--logfile", logfile};
    int argc = 15;
    for (int i = 0; s->extra[i] && argc < 38; i++) argv[argc++] = s->extra[i];
    argv[argc] = NULL;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
        }
        execvp("redis-server", (char *const *)argv);
        _exit(127);
    }
    s->pid = pid;
    int64_t deadline = now_ms() + 10000;
    while (now_ms() < deadline) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            s->pid = 0;
            return -1; /* exited: port taken, bad argument, ... */
        }
        if (answers_ping(s->port)) return 0;
        usleep(20 * 1000);
    }
    kill_and_reap(s);
    return -1;
}

struct redis_server *redis_server_start(const char *const *extra_args)
{
    struct redis_server *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    snprintf(s->dir, sizeof s->dir, "/tmp/baton-credis-XXXXXX");
    if (mkdtemp(s->dir) == NULL) {
        fprintf(stderr, "redis_server: mkdtemp: %s\n", strerror(errno));
        free(s);
        return NULL;
    }
    for (int i = 0; extra_args && extra_args[i] && i < MAX_EXTRA; i++)
        s->extra[i] = strdup(extra_args[i]);
    reg_add(s);
    for (int attempt = 0; attempt < 5; attempt++) {
        s->port = test_free_port();
        if (s->port > 0 && spawn(s) == 0) return s;
    }
    fprintf(stderr, "redis_server: could not start redis-server (see %s/redis.log)\n", s->dir);
    redis_server_destroy(s);
    return NULL;
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

int redis_server_stop(struct redis_server *s)
{
    if (s == NULL || s->pid <= 0) return -1;
    kill_and_reap(s);
    return 0;
}

int redis_server_restart(struct redis_server *s)
{
    if (s == NULL) return -1;
    kill_and_reap(s);
    /* the port may linger briefly after a kill: retry for up to ~5 s */
    for (int attempt = 0; attempt < 25; attempt++) {
        if (spawn(s) == 0) return 0;
        usleep(200 * 1000);
    }
    fprintf(stderr, "redis_server: restart on port %d failed\n", s->port);
    return -1;
}

void redis_server_destroy(struct redis_server *s)
{
    if (s == NULL) return;
    kill_and_reap(s);
    reg_remove(s);
    remove_dir(s->dir);
    for (int i = 0; i < MAX_EXTRA; i++) free(s->extra[i]);
    free(s);
}
