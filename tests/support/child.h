/* A server process for C tests and benchmarks, the part redis_server and
 * etcd_server share: a fresh temporary directory, a copy of the caller's
 * extra arguments, spawning (stdin and stdout on /dev/null, stderr to a log
 * file, PR_SET_PDEATHSIG so that a crashed or killed test takes it along)
 * until a readiness probe answers, stop (SIGTERM, then SIGKILL), kill
 * (SIGKILL, reaped), pause/resume, and cleanup: child_release, and an
 * atexit handler that kills and removes whatever was not released. */
#ifndef BATON_TEST_CHILD_H
#define BATON_TEST_CHILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CHILD_MAX_EXTRA 16
#define CHILD_MAX_ARGS 48
#define CHILD_MAX_REGISTERED 32

struct child {
    pid_t pid;                        /* 0 = not running */
    char dir[160];                    /* its temporary directory */
    char *extra[CHILD_MAX_EXTRA + 1]; /* the caller's extra arguments, copied */
};

int64_t child_now_ms(void);
/* Removes dir and everything below it (links are not followed). "" is a
 * no-op. */
void child_remove_tree(const char *dir);
/* Waits for pid to end (EINTR retried); its wait status, or -1. */
int child_reap_pid(pid_t pid);
/* SIGKILL and reap. 0, or -1 if it was not running. */
int child_kill(struct child *c);
/* SIGTERM (after a SIGCONT: a stopped process cannot act on it), reaped;
 * SIGKILL after grace_ms. 0, or -1 if it was not running. */
int child_stop(struct child *c, int grace_ms);
/* kill(pid, sig) (SIGSTOP / SIGCONT); after SIGSTOP, waits (up to 2 s) until
 * every thread is stopped. 0, or -1 if it was not running. */
int child_signal(struct child *c, int sig);
/* Creates c's directory "<base>/<prefix>-XXXXXX", copies extra_args
 * (NULL-terminated, may be NULL; at most CHILD_MAX_EXTRA) and registers c
 * for the atexit cleanup. 0, or -1 with a message on stderr naming who. */
int child_init(struct child *c, const char *who, const char *base, const char *prefix, const char *const *extra_args);
/* Forks and execs argv[0] (searched in PATH): stdin from /dev/null; with
 * out_fd >= 0, stdout and stderr to out_fd, else stdout to /dev/null and
 * stderr appended to log_path (inherited when NULL); env: NULL, or
 * NULL-terminated name, value pairs set in the child's environment. The
 * child dies with this process (PR_SET_PDEATHSIG). Its pid, or -1. */
pid_t child_exec(const char *const *argv, const char *const *env, const char *log_path, int out_fd);
/* Starts argv followed by c's extra arguments (see child_exec for log_path)
 * and waits until ready(port) is true: 0. -1 when it exited first (port
 * taken, bad argument, ...) or was not ready within timeout_ms (then it is
 * killed). */
int child_spawn(struct child *c, const char *const *argv, const char *log_path, bool (*ready)(int port), int port, int timeout_ms);
/* Kills c (if running) and calls spawn(arg) until it returns 0, up to
 * attempts times, pause_ms apart (the ports of a killed server may linger
 * briefly). 0, or -1. */
int child_respawn(struct child *c, int (*spawn)(void *arg), void *arg, int attempts, int pause_ms);
/* Kills it (if running), unregisters it, removes its directory and frees
 * the copied arguments; c itself is the caller's. */
void child_release(struct child *c);

/* ---- the broker launcher --------------------------------------------------
 * Brokers that the Python tests start too (Redis Sentinel, etcd) are started
 * by one launcher, tests/support/brokers.py, which the C tests run as a child
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

/* Runs brokers.py with args (NULL-terminated) and waits (up to timeout_ms)
 * for its first answer: 0 when it says "ok": true, else -1 (its error on
 * stderr, the launcher stopped). */
int launcher_start(struct launcher *l, const char *const *args, int timeout_ms);
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
