/* A real redis-server for C integration tests: started on a free 127.0.0.1
 * port in a fresh temporary directory, without persistence, by the launcher
 * the Python tests use too (tests/support/brokers.py redis: harness.py's
 * RedisServer; child.h, launcher_*); can be stopped (SIGKILL, like a crash:
 * the data is lost) and restarted on the same port; always cleaned up:
 * destroy, or this process ending (the launcher's stdin closes; its
 * PR_SET_PDEATHSIG), so that a crashed or killed test takes its server
 * along. */
#ifndef BATON_TEST_REDIS_SERVER_H
#define BATON_TEST_REDIS_SERVER_H

#include <stdbool.h>
#include <sys/types.h>

struct redis_server;

/* extra_args: NULL-terminated extra redis-server arguments (for example
 * {"--requirepass", "s3cret", NULL}), or NULL. Returns NULL (with a message
 * on stderr) when redis-server could not be started within 10 s. */
struct redis_server *redis_server_start(const char *const *extra_args);
int redis_server_port(const struct redis_server *s);
const char *redis_server_dir(const struct redis_server *s);
bool redis_server_running(const struct redis_server *s);
pid_t redis_server_pid(const struct redis_server *s);
/* SIGKILL and reap. 0, or -1 if it was not running. */
int redis_server_stop(struct redis_server *s);
/* SIGTERM (after a SIGCONT), reaped; SIGKILL after 5 s. 0, or -1 if it was
 * not running. */
int redis_server_term(struct redis_server *s);
/* Starts it again on the same port with the same arguments (empty data).
 * 0 once it answers PING, -1 otherwise. */
int redis_server_restart(struct redis_server *s);
/* Stops it (if running) and removes its directory. NULL-safe. */
void redis_server_destroy(struct redis_server *s);

#endif
