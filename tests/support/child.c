/* Server processes for C tests and benchmarks (tests/support/child.h). */
#include "tests/support/child.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int64_t child_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int child_rm_entry_(const char *path, const struct stat *sb, int flag,
                                  struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void child_remove_tree(const char *dir)
{
    if (dir && dir[0]) nftw(dir, child_rm_entry_, 16, FTW_DEPTH | FTW_PHYS);
}

int child_reap_pid(pid_t pid)
{
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return st;
}

int child_kill(struct child *c)
{
    if (c == NULL || c->pid <= 0) return -1;
    kill(c->pid, SIGKILL);
    child_reap_pid(c->pid);
    c->pid = 0;
    return 0;
}

int child_stop(struct child *c, int grace_ms)
{
    if (c == NULL || c->pid <= 0) return -1;
    kill(c->pid, SIGCONT);
    kill(c->pid, SIGTERM);
    int64_t deadline = child_now_ms() + grace_ms;
    while (child_now_ms() < deadline) {
        int st;
        pid_t r = waitpid(c->pid, &st, WNOHANG);
        if (r == c->pid || (r < 0 && errno != EINTR)) {
            c->pid = 0;
            return 0;
        }
        usleep(10 * 1000);
    }
    return child_kill(c);
}

/* Whether every thread of pid is stopped ('T' in /proc/<pid>/task/<tid>/stat). */
static bool child_all_threads_stopped_(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL) return true; /* no /proc: nothing to wait for */
    bool all = true;
    struct dirent *e;
    while (all && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char stat_path[400], buf[512];
        snprintf(stat_path, sizeof stat_path, "%s/%s/stat", path, e->d_name);
        FILE *f = fopen(stat_path, "r");
        if (f == NULL) continue; /* the thread exited */
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *rp = strrchr(buf, ')'); /* "tid (comm) S ..." */
        if (rp == NULL || rp[1] != ' ' || (rp[2] != 'T' && rp[2] != 't')) all = false;
    }
    closedir(d);
    return all;
}

int child_signal(struct child *c, int sig)
{
    if (c == NULL || c->pid <= 0) return -1;
    if (kill(c->pid, sig) != 0) return -1;
    /* kill() returns before a group stop is complete: a thread running on
     * another CPU may still answer a request for a moment. Wait (up to 2 s)
     * until every thread is stopped, so "paused" means paused. */
    if (sig == SIGSTOP) {
        int64_t deadline = child_now_ms() + 2000;
        while (!child_all_threads_stopped_(c->pid) && child_now_ms() < deadline)
            usleep(1000);
    }
    return 0;
}

/* ---- the atexit registry -------------------------------------------------- */

static pthread_mutex_t child_reg_mu_ = PTHREAD_MUTEX_INITIALIZER;
static struct child *child_registry_[CHILD_MAX_REGISTERED];
static bool child_atexit_done_;

static void child_cleanup_all_(void)
{
    pthread_mutex_lock(&child_reg_mu_);
    for (int i = 0; i < CHILD_MAX_REGISTERED; i++) {
        if (child_registry_[i] == NULL) continue;
        child_kill(child_registry_[i]);
        child_remove_tree(child_registry_[i]->dir);
    }
    pthread_mutex_unlock(&child_reg_mu_);
}

static void child_register_(struct child *c)
{
    pthread_mutex_lock(&child_reg_mu_);
    if (!child_atexit_done_) {
        atexit(child_cleanup_all_);
        child_atexit_done_ = true;
    }
    for (int i = 0; i < CHILD_MAX_REGISTERED; i++)
        if (child_registry_[i] == NULL) {
            child_registry_[i] = c;
            break;
        }
    pthread_mutex_unlock(&child_reg_mu_);
}

static void child_unregister_(struct child *c)
{
    pthread_mutex_lock(&child_reg_mu_);
    for (int i = 0; i < CHILD_MAX_REGISTERED; i++)
        if (child_registry_[i] == c) child_registry_[i] = NULL;
    pthread_mutex_unlock(&child_reg_mu_);
}

/* ---- life cycle ------------------------------------------------------------ */

int child_init(struct child *c, const char *who, const char *base, const char *prefix,
                             const char *const *extra_args)
{
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "%s/%s-XXXXXX", base, prefix);
    if (mkdtemp(c->dir) == NULL) {
        fprintf(stderr, "%s: mkdtemp %s: %s\n", who, c->dir, strerror(errno));
        c->dir[0] = '\0';
        return -1;
    }
    for (int i = 0; extra_args && extra_args[i] && i < CHILD_MAX_EXTRA; i++)
        c->extra[i] = strdup(extra_args[i]);
    child_register_(c);
    return 0;
}

pid_t child_exec(const char *const *argv, const char *const *env,
                               const char *log_path, int out_fd)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0) return pid < 0 ? -1 : pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) dup2(devnull, 0);
    if (out_fd >= 0) {
        dup2(out_fd, 1);
        dup2(out_fd, 2);
    } else {
        if (devnull >= 0) dup2(devnull, 1);
        int log = log_path ? open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644) : -1;
        if (log >= 0) dup2(log, 2);
    }
    for (int i = 0; env && env[i] && env[i + 1]; i += 2)
        setenv(env[i], env[i + 1], 1);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
}

int child_spawn(struct child *c, const char *const *argv, const char *log_path,
                              bool (*ready)(int port), int port, int timeout_ms)
{
    const char *all[CHILD_MAX_ARGS + 1];
    int argc = 0;
    for (int i = 0; argv[i] && argc < CHILD_MAX_ARGS; i++)
        all[argc++] = argv[i];
    for (int i = 0; c->extra[i] && argc < CHILD_MAX_ARGS; i++)
        all[argc++] = c->extra[i];
    all[argc] = NULL;
    pid_t pid = child_exec(all, NULL, log_path, -1);
    if (pid < 0) return -1;
    c->pid = pid;
    int64_t deadline = child_now_ms() + timeout_ms;
    while (child_now_ms() < deadline) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            c->pid = 0;
            return -1;
        }
        if (ready(port)) return 0;
        usleep(20 * 1000);
    }
    child_kill(c);
    return -1;
}

int child_respawn(struct child *c, int (*spawn)(void *arg), void *arg, int attempts,
                                int pause_ms)
{
    child_kill(c);
    for (int attempt = 0; attempt < attempts; attempt++) {
        if (spawn(arg) == 0) return 0;
        usleep((useconds_t)pause_ms * 1000);
    }
    return -1;
}

void child_release(struct child *c)
{
    child_kill(c);
    child_unregister_(c);
    child_remove_tree(c->dir);
    for (int i = 0; i < CHILD_MAX_EXTRA; i++) {
        free(c->extra[i]);
        c->extra[i] = NULL;
    }
}


/* ---- the broker launcher --------------------------------------------------- */

static void launcher_script_(char *buf, size_t len)
{
    const char *src = getenv("BATON_SOURCE_DIR");
    if (src && *src) {
        snprintf(buf, len, "%s/tests/support/brokers.py", src);
        return;
    }
    /* beside this file (__FILE__ is the absolute path CMake compiles) */
    snprintf(buf, len, "%s", __FILE__);
    char *slash = strrchr(buf, '/');
    size_t at = slash ? (size_t)(slash - buf + 1) : 0;
    snprintf(buf + at, len - at, "brokers.py");
}

/* One line of its stdout into l->reply, up to deadline: 0, or -1. */
static int launcher_read_(struct launcher *l, int64_t deadline)
{
    size_t n = 0;
    for (;;) {
        int64_t left = deadline - child_now_ms();
        if (left <= 0) {
            fprintf(stderr, "launcher: no answer in time\n");
            return -1;
        }
        struct timeval tv = {left / 1000, (left % 1000) * 1000};
        fd_set rd;
        FD_ZERO(&rd);
        FD_SET(l->from, &rd);
        int r = select(l->from + 1, &rd, NULL, NULL, &tv);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue;
        char ch;
        ssize_t got = read(l->from, &ch, 1);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            fprintf(stderr, "launcher: it exited\n");
            return -1;
        }
        if (ch == '\n') break;
        if (n + 1 < sizeof l->reply) l->reply[n++] = ch;
    }
    l->reply[n] = '\0';
    return 0;
}

static int launcher_ok_(struct launcher *l)
{
    if (strstr(l->reply, "\"ok\": true")) return 0;
    fprintf(stderr, "launcher: %s\n", l->reply);
    return -1;
}

int launcher_start(struct launcher *l, const char *const *args, int timeout_ms)
{
    memset(l, 0, sizeof *l);
    l->to = l->from = -1;
    char script[512];
    launcher_script_(script, sizeof script);
    const char *argv[CHILD_MAX_ARGS + 3] = {"python3", script};
    int argc = 2;
    for (int i = 0; args && args[i] && argc < CHILD_MAX_ARGS + 2; i++) argv[argc++] = args[i];
    argv[argc] = NULL;
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) < 0) return -1;
    if (pipe2(out, O_CLOEXEC) < 0) {
        close(in[0]);
        close(in[1]);
        return -1;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        /* SIGTERM, not SIGKILL: it stops its brokers and removes their
         * directories when this process dies */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(127);
        dup2(in[0], 0);
        dup2(out[1], 1);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    if (pid < 0) {
        close(in[1]);
        close(out[0]);
        return -1;
    }
    l->pid = pid;
    l->to = in[1];
    l->from = out[0];
    if (launcher_read_(l, child_now_ms() + timeout_ms) == 0 && launcher_ok_(l) == 0) return 0;
    launcher_stop(l);
    return -1;
}

int launcher_cmd(struct launcher *l, const char *fmt, ...)
{
    if (l == NULL || l->pid <= 0) return -1;
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof line - 1) return -1;
    line[n++] = '\n';
    for (int off = 0; off < n;) {
        ssize_t w = write(l->to, line + off, (size_t)(n - off));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        off += (int)w;
    }
    if (launcher_read_(l, child_now_ms() + 60000) < 0) return -1;
    return launcher_ok_(l);
}

/* Where the value of key (index-th element of an array, or the value
 * itself with index < 0) starts in the reply, or NULL. */
static const char *launcher_value_(const struct launcher *l, const char *key, int index)
{
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(l->reply, pat);
    if (p == NULL) return NULL;
    p += strlen(pat);
    if (index < 0) return p;
    if (*p++ != '[') return NULL;
    for (int i = 0; i < index; i++) {
        bool in_str = false;
        for (; *p && (in_str || (*p != ',' && *p != ']')); p++) {
            if (*p == '\\' && p[1]) p++;
            else if (*p == '"') in_str = !in_str;
        }
        if (*p != ',') return NULL;
        p++;
        while (*p == ' ') p++;
    }
    return *p == ']' ? NULL : p;
}

long launcher_int(const struct launcher *l, const char *key, int index)
{
    const char *p = launcher_value_(l, key, index);
    if (p == NULL) return -1;
    char *end;
    long v = strtol(p, &end, 10);
    return end == p ? -1 : v;
}

const char *launcher_str(const struct launcher *l, const char *key, int index, char *buf,
                         size_t len)
{
    buf[0] = '\0';
    const char *p = launcher_value_(l, key, index);
    if (p == NULL || *p != '"' || len == 0) return buf;
    size_t n = 0;
    for (p++; *p && *p != '"'; p++) {
        if (*p == '\\' && p[1]) p++;
        if (n + 1 < len) buf[n++] = *p;
    }
    buf[n] = '\0';
    return buf;
}

void launcher_stop(struct launcher *l)
{
    if (l == NULL || l->pid <= 0) return;
    close(l->to);
    close(l->from);
    l->to = l->from = -1;
    int64_t deadline = child_now_ms() + 30000;
    for (;;) {
        int st;
        pid_t r = waitpid(l->pid, &st, WNOHANG);
        if (r == l->pid || (r < 0 && errno != EINTR)) break;
        if (child_now_ms() >= deadline) {
            kill(l->pid, SIGKILL);
            child_reap_pid(l->pid);
            break;
        }
        usleep(10 * 1000);
    }
    l->pid = 0;
}
