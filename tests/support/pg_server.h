/* A real PostgreSQL 15 for C integration tests and benchmarks: initdb (trust
 * auth, superuser postgres) into a fresh directory and postgres on a free
 * 127.0.0.1 port, as the `postgres` user (PostgreSQL refuses root; runuser),
 * by the launcher the Python tests use too (tests/support/brokers.py
 * postgres: PgServer of tests/integration/lib/postgres.py; child.h,
 * launcher_*); can be stopped (fast shutdown), killed (SIGKILL to the
 * postmaster and its backends, like a crash: the data survives, it is on
 * disk), restarted on the same port with the same data, and paused
 * (SIGSTOP to the postmaster and every backend: neither new nor existing
 * connections answer) / resumed (SIGCONT); always cleaned up: destroy, or
 * this process ending (the launcher's stdin closes; its PR_SET_PDEATHSIG),
 * so that a crashed or killed test takes its server along. Needs root. */
#ifndef BATON_TEST_PG_SERVER_H
#define BATON_TEST_PG_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct pg_server;

/* Whether pg_server_start can work here: $BATON_PG_BIN (default
 * /usr/lib/postgresql/15/bin) holds postgres, psql and runuser are in
 * PATH, the user postgres exists, this process is root. If not, false with
 * why (NUL terminated, may be NULL) saying what is missing, for a skip. */
bool pg_server_available(char *why, size_t len);
/* Returns NULL (with a message on stderr) when it is not available or did
 * not answer SELECT 1 within 60 s. The directory goes under $TMPDIR, else
 * /tmp. */
struct pg_server *pg_server_start(void);
/* "host=127.0.0.1 port=PORT dbname=postgres user=postgres" */
const char *pg_server_conninfo(const struct pg_server *s);
int pg_server_port(const struct pg_server *s);
/* Its directory: data/ (the cluster), server.log, the Unix socket. */
const char *pg_server_dir(const struct pg_server *s);
/* The postmaster's pid, 0 when not running. */
pid_t pg_server_pid(const struct pg_server *s);
bool pg_server_running(const struct pg_server *s);
/* Fast shutdown (pg_ctl -m fast; a paused server is resumed first). Data
 * kept. 0, or -1 if not running. */
int pg_server_stop(struct pg_server *s);
/* SIGKILL to the postmaster and all its backends (a crash), returning once
 * they are gone. Data kept. 0, or -1 if not running. */
int pg_server_kill(struct pg_server *s);
/* (Kills it if running and) starts it again on the same port with the same
 * data (crash recovery after a kill). 0 once SELECT 1 answers, -1
 * otherwise. */
int pg_server_restart(struct pg_server *s);
/* SIGSTOP to the postmaster, then to all its backends, returning once all
 * are stopped / SIGCONT to them. 0, or -1 if not running. */
int pg_server_pause(struct pg_server *s);
int pg_server_resume(struct pg_server *s);
/* Runs `psql -X -q -A -t -v ON_ERROR_STOP=1 -h 127.0.0.1 -p PORT -U postgres
 * -d postgres -c sql` (killed after 10 s): unaligned rows, one a line, `|`
 * between columns; stdout and stderr go to out (NUL terminated, may be
 * NULL). Returns its exit status (0 ok, 1 or 3 an SQL error, 2 no
 * connection), or -1 (could not run, or killed at 10 s). */
int pg_server_sql(const struct pg_server *s, const char *sql, char *out, size_t outlen);
/* Stops it (if running) and removes its directory. NULL-safe. */
void pg_server_destroy(struct pg_server *s);

#endif
