/* Child processes of C tests and benchmarks (tests/support/child.h). */
#include "tests/support/child.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/select.h>
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

int child_reap_pid(pid_t pid)
{
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return st;
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

int launcher_start(struct launcher *l, const char *const *args, const char *const *more,
                   int timeout_ms)
{
    memset(l, 0, sizeof *l);
    l->to = l->from = -1;
    char script[512];
    launcher_script_(script, sizeof script);
    const char *argv[CHILD_MAX_ARGS + 3] = {"python3", script};
    int argc = 2;
    for (int i = 0; args && args[i] && argc < CHILD_MAX_ARGS + 2; i++) argv[argc++] = args[i];
    for (int i = 0; more && more[i] && argc < CHILD_MAX_ARGS + 2; i++) argv[argc++] = more[i];
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
