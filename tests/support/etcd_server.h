/* A real single-member etcd for C integration tests and benchmarks: started
 * on two free 127.0.0.1 ports (client and peer) with a fresh data directory
 * by the launcher the Python tests use too (tests/support/brokers.py etcd:
 * EtcdCluster of tests/integration/lib/etcd.py; child.h, launcher_*); can be
 * stopped (SIGTERM), killed (SIGKILL, like a crash: the data survives, it is
 * on disk), restarted on the same ports with the same data, and paused
 * (SIGSTOP) / resumed (SIGCONT); always cleaned up: destroy, or this process
 * ending (the launcher's stdin closes; its PR_SET_PDEATHSIG), so that a
 * crashed or killed test takes its member along. */
#ifndef BATON_TEST_ETCD_SERVER_H
#define BATON_TEST_ETCD_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct etcd_server;

/* extra_args: NULL-terminated extra etcd arguments, or NULL. The data
 * directory goes under $BATON_ETCD_DIR_BASE, else /dev/shm (no fsync cost)
 * when writable, else /tmp. Returns NULL (with a message on stderr) when
 * the member did not answer /health within 20 s. */
struct etcd_server *etcd_server_start(const char *const *extra_args);
/* The same with the data directory under base (e.g. "/tmp" to measure with
 * a real disk's fsync). */
struct etcd_server *etcd_server_start_in(const char *base, const char *const *extra_args);
/* "http://127.0.0.1:PORT" */
const char *etcd_server_url(const struct etcd_server *s);
int etcd_server_port(const struct etcd_server *s);
int etcd_server_peer_port(const struct etcd_server *s);
const char *etcd_server_dir(const struct etcd_server *s);
pid_t etcd_server_pid(const struct etcd_server *s);
bool etcd_server_running(const struct etcd_server *s);
/* SIGTERM, reaped (SIGKILL after 5 s). Data kept. 0, or -1 if not running. */
int etcd_server_stop(struct etcd_server *s);
/* SIGKILL and reap (a crash). Data kept. 0, or -1 if not running. */
int etcd_server_kill(struct etcd_server *s);
/* (Kills it if running and) starts it again on the same ports with the same
 * data. 0 once /health answers true, -1 otherwise. */
int etcd_server_restart(struct etcd_server *s);
/* SIGSTOP / SIGCONT. 0, or -1 if not running. */
int etcd_server_pause(struct etcd_server *s);
int etcd_server_resume(struct etcd_server *s);
/* Runs `etcdctl --endpoints=URL args...` (ETCDCTL_API=3, 10 s timeout);
 * stdout and stderr go to out (NUL terminated, may be NULL). Returns its
 * exit status (or -1). */
int etcd_server_ctl(const struct etcd_server *s, const char *const *args, char *out,
                    size_t outlen);
/* One HTTP request to the member's gateway: POST path with body (JSON) when
 * body is non-NULL, else GET path; token (may be NULL) as Authorization.
 * The response body goes to out (NUL terminated). Returns the HTTP status,
 * or -1 when it could not be reached within timeout_ms. */
int etcd_server_http(const struct etcd_server *s, const char *path, const char *body,
                     const char *token, char *out, size_t outlen, int timeout_ms);
/* Stops it (if running) and removes its directory. NULL-safe. */
void etcd_server_destroy(struct etcd_server *s);

#endif
