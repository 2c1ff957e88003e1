/* Child processes of C tests and benchmarks: a command run to its end
 * (child_exec, child_reap_pid) and the broker launcher, which starts every
 * broker server (launcher_*, below). */
#ifndef BATON_TEST_CHILD_H
#define BATON_TEST_CHILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CHILD_MAX_ARGS 48

int64_t child_now_ms(void);
/* Waits for pid to end (EINTR retried); its wait status, or -1. */
int child_reap_pid(pid_t pid);
/* Forks and execs argv[0] (searched in PATH): stdin from /dev/null; with
 * out_fd >= 0, stdout and stderr to out_fd, else stdout to /dev/null and
 * stderr appended to log_path (inherited when NULL); env: NULL, or
 * NULL-terminated name, value pairs set in the child's environment. The
 * child dies with this process (PR_SET_PDEATHSIG). Its pid, or -1. */
pid_t child_exec(const char *const *argv, const char *const *env, const char *log_path, int out_fd);

/* ---- the broker launcher --------------------------------------------------
 * The brokers (redis-server, TLS-only ones, Redis Sentinel, etcd) are started
 * the way the Python tests start them, by tests/support/brokers.py (a command
 * line in front of tests/integration/lib), which the C tests run as a child
 * (python3; $BATON_SOURCE_DIR/tests/support/brokers.py, else beside this
 * file): it answers one JSON line once the brokers are up and one a command
 * sent on its stdin. Closing its stdin (launcher_stop), this process ending,
 * or its SIGTERM (PR_SET_PDEATHSIG) stops the brokers and removes their
 * directories. */
struct launcher {
    pid_t pid;     /* 0 = not running */
    int to, from;  /* its stdin, its stdout */
    char reply[8192]; /* the last JSON line it answered */
};

/* Runs brokers.py with args and then more (each NULL-terminated, more may be
 * NULL) and waits (up to timeout_ms) for its first answer: 0 when it says
 * "ok": true, else -1 (its error on stderr, the launcher stopped). */
int launcher_start(struct launcher *l, const char *const *args, const char *const *more,
                   int timeout_ms);
/* Sends one command line (printf format) and waits (up to 60 s) for the
 * answer: 0 when it says "ok": true, else -1. */
int launcher_cmd(struct launcher *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Element index of the JSON array key in the last answer (index < 0: key
 * is a number): a number, or -1. */
long launcher_int(const struct launcher *l, const char *key, int index);
/* Element index of the JSON array key of strings (index < 0: a string) into
 * buf (no escapes other than \" and \\ expected): buf, or "" when absent. */
const char *launcher_str(const struct launcher *l, const char *key, int index, char *buf,
                         size_t len);
/* Closes its stdin and waits (up to 30 s, then SIGKILL) until it has
 * stopped its brokers. NULL-safe, idempotent. */
void launcher_stop(struct launcher *l);

#endif
