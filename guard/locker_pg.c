/* PostgreSQL locker (include/baton/pg.h): leases as rows, the database's
 * clock deciding expiry.
 *
 * Mapping of the locker contract (guard/locker.h), one statement each, no
 * session state (so it works through PgBouncer in transaction mode; only
 * LISTEN needs a direct connection):
 *
 * - try_lock: an upsert into baton_leases that writes only when the row is
 *   absent or expires_at <= clock_timestamp() (the database's clock, never
 *   a replica's). A live row is not even locked: the INSERT's SELECT is
 *   empty then, and the answer is "held" with how long the lease still
 *   runs. The epoch is greatest(stored epoch + 1, nextval(baton_epoch_seq),
 *   clock_timestamp() in microseconds): strictly increasing per key while
 *   the row lives, and across the row's loss (the sequence) and a restored
 *   backup (the clock floor, as the Redis backend's TIME floor). The
 *   acquisition also sets the key column (to itself), so it takes the row's
 *   FOR UPDATE lock: a writer holding FOR KEY SHARE on the row (fenced_set,
 *   a sink in the same database) finishes before a new term begins.
 * - renew: UPDATE ... WHERE token = $2 AND expires_at > clock_timestamp();
 *   the replica's deadline counts from the send time, as for every backend.
 * - unlock: the row is kept (its epoch with it), token and holder cleared,
 *   expires_at -infinity, and pg_notify('baton_release', key) in the same
 *   statement: delivered when it commits.
 * - release_seq / wait_release: a thread LISTENs on a connection of its
 *   own; a notification of a key, and every (re)established LISTEN (it may
 *   have missed some), advance the key's count.
 * - claim: an upsert into baton_claims that writes only an expired or
 *   absent row; expired rows are deleted in batches of 1,000 at most once a
 *   minute.
 * - fenced_set: an upsert into baton_shared whose SELECT requires the lease
 *   row to hold the epoch, under FOR KEY SHARE: an acquisition in progress
 *   is waited for and then re-checked, so a superseded writer writes
 *   nothing.
 *
 * Connections: "lease" (try_lock, renew, unlock, check), "side" (claim,
 * holder, ping, shared state, inspect) and the LISTEN thread's. A
 * connection that failed or did not answer within the command timeout is
 * closed and opened again by the next call (the generation counts the lease
 * connection's breaks). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "baton/pg.h"
#include "base/glog.h"
#include "base/pq_dl.h"
#include "base/util.h"
#include "guard/locker.h"

#define PG_SLICE_MS 50         /* a wait asks its deadline again this often */
#define CLAIM_SWEEP_MS 60000   /* expired claims deleted at most this often */
#define CLAIM_SWEEP_ROWS "1000"
#define LISTEN_POLL_MS 200
#define LISTEN_BACKOFF_MAX_MS 5000
#define RELEASE_CHANNEL "baton_release"

static const char DDL[] =
    "CREATE SEQUENCE IF NOT EXISTS baton_epoch_seq;\n"
    "CREATE TABLE IF NOT EXISTS baton_leases (\n"
    "    key text PRIMARY KEY,\n"
    "    token text,\n"
    "    holder text,\n"
    "    epoch bigint NOT NULL,\n"
    "    expires_at timestamptz NOT NULL\n"
    ");\n"
    "CREATE TABLE IF NOT EXISTS baton_claims (\n"
    "    key text PRIMARY KEY,\n"
    "    expires_at timestamptz NOT NULL\n"
    ");\n"
    "CREATE INDEX IF NOT EXISTS baton_claims_expires_at ON baton_claims (expires_at);\n"
    "CREATE TABLE IF NOT EXISTS baton_shared (\n"
    "    key text NOT NULL,\n"
    "    name text NOT NULL,\n"
    "    epoch bigint NOT NULL,\n"
    "    value bytea NOT NULL,\n"
    "    expires_at timestamptz NOT NULL,\n"
    "    PRIMARY KEY (key, name)\n"
    ");\n";

#define MS(p) "clock_timestamp() + " p "::bigint * interval '1 millisecond'"
/* ms until col, 0 when past (a released row's -infinity included) */
#define LEFT_MS(col)                                                                  \
    "CASE WHEN " col " > clock_timestamp() THEN ceil(extract(epoch FROM (" col       \
    " - clock_timestamp())) * 1000)::bigint ELSE 0 END"

/* $1 key, $2 token, $3 holder, $4 ttl, $5 lock_timeout (ms): rows (1,
 * epoch, 0) acquired, (0, 0, ms left) held, none: held (taken meanwhile by
 * another). An expired row locked by a writer's transaction (a sink's
 * lease fence) is waited for at most the lock timeout (3/4 of the command
 * timeout), set for this statement alone (set_config(..., true): no
 * session state), so a statement whose client gave up does not linger on
 * the server. */
static const char SQL_ACQUIRE[] =
    "WITH cur AS (SELECT expires_at FROM baton_leases WHERE key = $1), "
    "up AS (INSERT INTO baton_leases AS l (key, token, holder, epoch, expires_at) "
    "SELECT $1, $2, $3, greatest(nextval('baton_epoch_seq'), "
    "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint), " MS("$4") " "
    "WHERE NOT EXISTS (SELECT 1 FROM cur WHERE expires_at > clock_timestamp()) "
    "AND NOT EXISTS (SELECT 1 FROM baton_claims WHERE key = $1 AND expires_at > clock_timestamp()) "
    "AND set_config('lock_timeout', $5, true) IS NOT NULL "
    "ON CONFLICT (key) DO UPDATE SET key = excluded.key, token = excluded.token, "
    "holder = excluded.holder, epoch = greatest(l.epoch + 1, excluded.epoch), "
    "expires_at = excluded.expires_at WHERE l.expires_at <= clock_timestamp() "
    "RETURNING l.epoch) "
    "SELECT 1, epoch, 0::bigint FROM up UNION ALL "
    "SELECT 0, 0, greatest(0, " LEFT_MS("expires_at") ") FROM cur "
    "WHERE NOT EXISTS (SELECT 1 FROM up)";
static const char SQL_RENEW[] =
    "UPDATE baton_leases SET expires_at = " MS("$3") " "
    "WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp() RETURNING 1";
/* rows: (1) released, (0) held with another token, none: not held */
static const char SQL_UNLOCK[] =
    "WITH d AS (UPDATE baton_leases SET token = NULL, holder = NULL, expires_at = '-infinity' "
    "WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp() RETURNING key) "
    "SELECT 1, pg_notify('" RELEASE_CHANNEL "', key) FROM d UNION ALL "
    "SELECT 0, NULL FROM baton_leases WHERE key = $1 AND token IS NOT NULL "
    "AND expires_at > clock_timestamp() AND NOT EXISTS (SELECT 1 FROM d)";
static const char SQL_CHECK[] =
    "SELECT 1 FROM baton_leases WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()";
/* a key held as a lease is not claimed either (one key space, as in Redis) */
static const char SQL_CLAIM[] =
    "INSERT INTO baton_claims AS c (key, expires_at) SELECT $1, " MS("$2") " "
    "WHERE NOT EXISTS (SELECT 1 FROM baton_leases WHERE key = $1 AND token IS NOT NULL "
    "AND expires_at > clock_timestamp()) "
    "ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at "
    "WHERE c.expires_at <= clock_timestamp() RETURNING 1";
static const char SQL_CLAIM_SWEEP[] =
    "DELETE FROM baton_claims WHERE key IN (SELECT key FROM baton_claims "
    "WHERE expires_at < clock_timestamp() LIMIT " CLAIM_SWEEP_ROWS ") "
    "AND expires_at < clock_timestamp()";
static const char SQL_HOLDER[] =
    "SELECT coalesce(holder, '') FROM baton_leases WHERE key = $1 AND token IS NOT NULL "
    "AND expires_at > clock_timestamp()";
/* $1 key, $2 name, $3 epoch, $4 value (bytea, binary), $5 ttl */
static const char SQL_FENCED_SET[] =
    "INSERT INTO baton_shared AS s (key, name, epoch, value, expires_at) "
    "SELECT $1, $2, $3, $4, " MS("$5") " "
    "WHERE EXISTS (SELECT 1 FROM baton_leases WHERE key = $1 AND epoch = $3 FOR KEY SHARE) "
    "ON CONFLICT (key, name) DO UPDATE SET epoch = excluded.epoch, value = excluded.value, "
    "expires_at = excluded.expires_at WHERE s.epoch <= excluded.epoch RETURNING 1";
static const char SQL_SHARED_GET[] =
    "SELECT value FROM baton_shared WHERE key = $1 AND name = $2 "
    "AND expires_at > clock_timestamp()";
static const char SQL_INSPECT[] =
    "SELECT (token IS NOT NULL AND expires_at > clock_timestamp())::int, epoch, "
    "coalesce(holder, ''), CASE WHEN token IS NOT NULL AND expires_at > clock_timestamp() "
    "THEN greatest(0, " LEFT_MS("expires_at") ") ELSE -1 END "
    "FROM baton_leases WHERE key = $1";

/* One connection and the lock that serialises its calls. */
struct pgc {
    pthread_mutex_t mu;
    PGconn *c;         /* NULL: opened by the next call */
    /* the server sent FATAL while the connection was idle (a fast shutdown,
     * pg_terminate_backend, idle_session_timeout): closed before the next
     * statement is sent on it */
    bool doomed;
    const char *name;  /* "lease", "side", "listen" */
    atomic_uint_fast64_t breaks; /* failures that closed it */
};

/* A key some standby watches (release_seq). */
struct watch_key {
    struct watch_key *next;
    char *key;
    uint64_t seq;
};

struct pg_locker {
    struct baton_locker base; /* first */
    const char *kw[6];
    const char *val[6];
    char *conninfo, *password;
    char where[160];
    char holder[128];
    int64_t connect_timeout_ms, command_timeout_ms;
    struct pgc lease, side, listen;
    int64_t last_sweep_ms; /* side.mu */
    struct ratelimit rl_sweep;
    /* the LISTEN thread */
    pthread_mutex_t w_mu;
    pthread_cond_t w_cv;
    struct watch_key *keys;
    bool listening;
    bool w_started;
    atomic_bool w_stop;
    pthread_t w_thread;
    struct ratelimit rl_listen;
};

/* ---- helpers ------------------------------------------------------------------ */

static void errf(char err[BATON_LOCKER_ERR_MAX], const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void errf(char err[BATON_LOCKER_ERR_MAX], const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, BATON_LOCKER_ERR_MAX, fmt, ap);
    va_end(ap);
    for (char *p = err; *p; p++) /* libpq's messages span lines: one log line */
        if (*p == '\n' || *p == '\t') *p = ' ';
    size_t l = strlen(err);
    while (l > 0 && err[l - 1] == ' ') err[--l] = '\0';
}

static const char *conn_error(PGconn *c)
{
    const char *e = c ? sym_PQerrorMessage(c) : NULL;
    return e && e[0] ? e : "connection failed";
}

static int wait_fd(int fd, short events, int64_t deadline)
{
    int64_t left = deadline - clock_mono_ms();
    if (left <= 0) return 0;
    struct pollfd p = {.fd = fd, .events = events};
    int n = poll(&p, 1, left < PG_SLICE_MS ? (int)left : PG_SLICE_MS);
    return n < 0 && errno == EINTR ? 1 : n;
}

/* What the server says outside an answer, on pc's connection: a notice
 * ("relation ... already exists, skipping" when the DDL runs again) goes to
 * the debug log, not to stderr as libpq's default would print it; a FATAL
 * (the server ending the session while it was idle) dooms the connection.
 * Runs inside libpq on the thread that holds pc->mu. */
static void notice(void *arg, const PGresult *res)
{
    struct pgc *pc = arg;
    const char *sev = sym_PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
    const char *msg = sym_PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    if (sev && (strcmp(sev, "FATAL") == 0 || strcmp(sev, "PANIC") == 0)) {
        pc->doomed = true;
        glog_info("locker", NULL, "postgresql: the server ended the %s connection: %s", pc->name,
                  msg ? msg : "?");
        return;
    }
    glog_debug("locker", NULL, "postgresql: %s: %s", sev ? sev : "NOTICE", msg ? msg : "?");
}

/* Opens a connection for pc by the deadline (clock_mono_ms): nonblocking,
 * or NULL with why. */
static PGconn *open_conn(struct pg_locker *pl, struct pgc *pc, int64_t deadline, char *why,
                         size_t len)
{
    PGconn *c = sym_PQconnectStartParams(pl->kw, pl->val, 1);
    if (!c) {
        snprintf(why, len, "out of memory");
        return NULL;
    }
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    while (sym_PQstatus(c) != CONNECTION_BAD && st != PGRES_POLLING_OK &&
           st != PGRES_POLLING_FAILED) {
        if (clock_mono_ms() >= deadline) {
            snprintf(why, len, "connecting timed out");
            sym_PQfinish(c);
            return NULL;
        }
        int r = wait_fd(sym_PQsocket(c), st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline);
        if (r == 0) continue;
        st = sym_PQconnectPoll(c);
    }
    if (st != PGRES_POLLING_OK || sym_PQstatus(c) != CONNECTION_OK) {
        snprintf(why, len, "%s", conn_error(c));
        sym_PQfinish(c);
        return NULL;
    }
    sym_PQsetnonblocking(c, 1);
    pc->doomed = false;
    sym_PQsetNoticeReceiver(c, notice, pc);
    return c;
}

static void drop(struct pgc *pc)
{
    if (pc->c) sym_PQfinish(pc->c);
    pc->c = NULL;
    atomic_fetch_add(&pc->breaks, 1);
}

/* Collects the one result of what was sent on pc->c by deadline: the
 * result (may be an error result; caller clears) or NULL with why (the
 * connection failed or did not answer in time). */
static PGresult *collect(PGconn *c, int64_t deadline, char *why, size_t len)
{
    int fd = sym_PQsocket(c);
    for (;;) {
        int r = sym_PQflush(c);
        if (r == 0) break;
        if (r < 0 || clock_mono_ms() >= deadline) goto failed;
        wait_fd(fd, POLLIN | POLLOUT, deadline);
        if (!sym_PQconsumeInput(c)) goto failed;
    }
    PGresult *keep = NULL;
    for (;;) {
        while (sym_PQisBusy(c)) {
            if (clock_mono_ms() >= deadline) {
                sym_PQclear(keep);
                snprintf(why, len, "no answer within the command timeout");
                return NULL;
            }
            wait_fd(fd, POLLIN, deadline);
            if (!sym_PQconsumeInput(c)) {
                sym_PQclear(keep);
                goto failed;
            }
        }
        PGresult *res = sym_PQgetResult(c);
        if (!res) break;
        /* the first error, else the last result (several statements: the DDL) */
        bool keep_err = keep && sym_PQresultStatus(keep) != PGRES_TUPLES_OK &&
                        sym_PQresultStatus(keep) != PGRES_COMMAND_OK;
        if (keep_err) {
            sym_PQclear(res);
        } else {
            sym_PQclear(keep);
            keep = res;
        }
    }
    if (keep) return keep;
failed:
    if (clock_mono_ms() >= deadline) snprintf(why, len, "no answer within the command timeout");
    else snprintf(why, len, "%s", conn_error(c));
    return NULL;
}

/* Runs one statement on pc with n parameters (text, except lens/fmts
 * given) within the command timeout; result format fmt_out (1 binary).
 * The result (status tuples or command ok; caller clears), or NULL with
 * err: a server error keeps the connection, a failure or a timeout
 * closes it. *sent_ms (may be NULL): clock_boot_ms just before sending. */
static PGresult *query(struct pg_locker *pl, struct pgc *pc, const char *what, const char *key,
                       const char *sql, int n, const Oid *types, const char *const *vals,
                       const int *lens, const int *fmts, int fmt_out, int64_t *sent_ms,
                       char err[BATON_LOCKER_ERR_MAX])
{
    char why[BATON_LOCKER_ERR_MAX];
    pthread_mutex_lock(&pc->mu);
    /* an idle connection the server closed meanwhile shows without
     * blocking: EOF (a restart, a killed backend), or a FATAL it said first
     * (parsed by PQisBusy: notice() dooms the connection). Nothing was sent
     * on it, so it is opened again instead of failing this call. */
    if (pc->c && (!sym_PQconsumeInput(pc->c) || (sym_PQisBusy(pc->c), false) ||
                  sym_PQstatus(pc->c) == CONNECTION_BAD || pc->doomed))
        drop(pc);
    if (!pc->c) {
        pc->c = open_conn(pl, pc, clock_mono_ms() + pl->connect_timeout_ms, why, sizeof why);
        if (!pc->c) {
            pthread_mutex_unlock(&pc->mu);
            errf(err, "postgresql %s: %s%s%s: %s", pl->where, what, key ? " " : "", key ? key : "",
                 why);
            return NULL;
        }
    }
    int64_t deadline = clock_mono_ms() + pl->command_timeout_ms;
    if (sent_ms) *sent_ms = clock_boot_ms();
    PGresult *res = NULL;
    if (!sym_PQsendQueryParams(pc->c, sql, n, types, vals, lens, fmts, fmt_out))
        snprintf(why, sizeof why, "%s", conn_error(pc->c));
    else
        res = collect(pc->c, deadline, why, sizeof why);
    if (!res) {
        drop(pc);
        pthread_mutex_unlock(&pc->mu);
        errf(err, "postgresql %s: %s%s%s: %s", pl->where, what, key ? " " : "", key ? key : "",
             why);
        return NULL;
    }
    pthread_mutex_unlock(&pc->mu);
    ExecStatusType st = sym_PQresultStatus(res);
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) return res;
    const char *state = sym_PQresultErrorField(res, PG_DIAG_SQLSTATE);
    /* the primary message only: the full report quotes the statement, and
     * would crowd the hint out of BATON_LOCKER_ERR_MAX */
    const char *m = sym_PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    /* 42P01 undefined table: the schema was never created */
    bool no_table = state && strcmp(state, "42P01") == 0;
    errf(err, "postgresql %s: %s%s%s: %s (SQLSTATE %s)%s", pl->where, what, key ? " " : "",
         key ? key : "", m && m[0] ? m : "error without a message", state ? state : "?",
         no_table ? "; create the locker's tables with baton --init-locker --apply" : "");
    sym_PQclear(res);
    return NULL;
}

static PGresult *q_text(struct pg_locker *pl, struct pgc *pc, const char *what, const char *key,
                        const char *sql, int n, const char *const *vals, int64_t *sent_ms,
                        char err[BATON_LOCKER_ERR_MAX])
{
    return query(pl, pc, what, key, sql, n, NULL, vals, NULL, NULL, 0, sent_ms, err);
}

static bool ttl_ok(const char *what, const char *key, int64_t ttl_ms, char err[BATON_LOCKER_ERR_MAX])
{
    if (ttl_ms > 0) return true;
    errf(err, "postgresql locker: %s %s: ttl %lld ms (must be positive)", what, key,
         (long long)ttl_ms);
    return false;
}

static int64_t cell_i64(PGresult *res, int row, int col)
{
    return strtoll(sym_PQgetvalue(res, row, col), NULL, 10);
}

/* ---- the lease ---------------------------------------------------------------- */

static uint64_t pg_generation(struct baton_locker *l)
{
    return atomic_load(&((struct pg_locker *)l)->lease.breaks) + 1;
}

static int pg_try_lock(struct baton_locker *l, const char *key, int64_t ttl_ms,
                       struct baton_lock_grant *out, char err[BATON_LOCKER_ERR_MAX])
{
    struct pg_locker *pl = (struct pg_locker *)l;
    memset(out, 0, sizeof *out);
    if (!ttl_ok("lock", key, ttl_ms, err)) return BATON_LOCKER_ERR;
    char token[RANDOM_TOKEN_LEN], ttl[24], lock_ms[24];
    if (random_token(token) != 0) {
        errf(err, "postgresql locker: lock %s: no random token", key);
        return BATON_LOCKER_ERR;
    }
    snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_ms);
    /* the server gives up before the client does: an error naming the lock,
     * and the connection kept */
    snprintf(lock_ms, sizeof lock_ms, "%lld", (long long)(pl->command_timeout_ms * 3 / 4 + 1));
    uint64_t gen = pg_generation(l);
    int64_t sent = 0;
    const char *v[5] = {key, token, pl->holder, ttl, lock_ms};
    PGresult *res = q_text(pl, &pl->lease, "lock", key, SQL_ACQUIRE, 5, v, &sent, err);
    if (!res) return BATON_LOCKER_ERR;
    int rc = BATON_LOCKER_HELD;
    if (sym_PQntuples(res) >= 1 && cell_i64(res, 0, 0) == 1) {
        int64_t epoch = cell_i64(res, 0, 1);
        if (epoch <= 0) {
            errf(err, "postgresql %s: lock %s: the database answered epoch \"%.30s\"", pl->where,
                 key, sym_PQgetvalue(res, 0, 1));
            rc = BATON_LOCKER_ERR;
        } else {
            memcpy(out->token, token, sizeof out->token);
            out->epoch = (uint64_t)epoch;
            out->sent_ms = sent;
            out->gen = gen;
            rc = BATON_LOCKER_OK;
        }
    } else if (sym_PQntuples(res) >= 1) {
        out->held_pttl_ms = cell_i64(res, 0, 2);
    }
    sym_PQclear(res);
    return rc;
}

static int pg_renew(struct baton_locker *l, const char *key, const char *token, int64_t ttl_ms,
                    int64_t *sent_ms, char err[BATON_LOCKER_ERR_MAX])
{
    struct pg_locker *pl = (struct pg_locker *)l;
    if (!ttl_ok("renew", key, ttl_ms, err)) return BATON_LOCKER_ERR;
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_ms);
    const char *v[3] = {key, token, ttl};
    PGresult *res = q_text(pl, &pl->lease, "renew", key, SQL_RENEW, 3, v, sent_ms, err);
    if (!res) return BATON_LOCKER_ERR;
    int n = sym_PQntuples(res);
    sym_PQclear(res);
    if (n == 1) return BATON_LOCKER_OK;
    errf(err, "postgresql locker: renew %s: not held with this token (expired or released)", key);
    return BATON_LOCKER_LOST;
}

static int pg_unlock(struct baton_locker *l, const char *key, const char *token,
                     char err[BATON_LOCKER_ERR_MAX])
{
    struct pg_locker *pl = (struct pg_locker *)l;
    const char *v[2] = {key, token};
    PGresult *res = q_text(pl, &pl->lease, "unlock", key, SQL_UNLOCK, 2, v, NULL, err);
    if (!res) return BATON_LOCKER_ERR;
    int n = sym_PQntuples(res);
    bool released = n >= 1 && cell_i64(res, 0, 0) == 1;
    sym_PQclear(res);
    if (released) return BATON_LOCKER_OK;
    if (n >= 1) errf(err, "postgresql locker: unlock %s: held with another token", key);
    else errf(err, "postgresql locker: unlock %s: not held (expired or released)", key);
    return BATON_LOCKER_MISMATCH;
}

static int pg_check(struct baton_locker *l, const char *key, const char *token,
                    char err[BATON_LOCKER_ERR_MAX])
{
    struct pg_locker *pl = (struct pg_locker *)l;
    const char *v[2] = {key, token};
    PGresult *res = q_text(pl, &pl->lease, "check", key, SQL_CHECK, 2, v, NULL, err);
    if (!res) return BATON_LOCKER_ERR;
    int n = sym_PQntuples(res);
    sym_PQclear(res);
    if (n == 1) return BATON_LOCKER_OK;
    errf(err, "postgresql locker: check %s: not held with this token (expired or released)", key);
    return BATON_LOCKER_LOST;
}

/* ---- the side connection ------------------------------------------------------ */

/* Deletes up to 1,000 expired claims, at most once a minute (side.mu not
 * held by the caller). A failure is only logged: claims are correct with
 * expired rows left in place. */
static void sweep_claims(struct pg_locker *pl)
{
    int64_t now = clock_mono_ms();
    pthread_mutex_lock(&pl->side.mu);
    bool due = pl->last_sweep_ms == 0 || now - pl->last_sweep_ms >= CLAIM_SWEEP_MS;
    if (due) pl->last_sweep_ms = now;
    pthread_mutex_unlock(&pl->side.mu);
    if (!due) return;
    char err[BATON_LOCKER_ERR_MAX];
    PGresult *res = q_text(pl, &pl->side, "sweep claims", NULL, SQL_CLAIM_SWEEP, 0, NULL, NULL, err);
    if (res) {
        const char *n = sym_PQcmdTuples(res);
        if (n && strcmp(n, "0") != 0) glog_debug("locker", NULL, "postgresql: %s expired claims deleted", n);
        sym_PQclear(res);
        return;
    }
    long long suppressed = 0;
    if (ratelimit_ok(&pl->rl_sweep, 60000, &suppressed))
        glog_warn("locker", NULL, "%s (%lld such warnings suppressed)", err, suppressed);
}

static int pg_claim(struct baton_locker *l, const char *key, int64_t ttl_ms,
                    char err[BATON_LOCKER_ERR_MAX])
{
    struct pg_locker *pl = (struct pg_locker *)l;
    if (!ttl_ok("claim", key, ttl_ms, err)) return BATON_LOCKER_ERR;
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_ms);
    const char *v[2] = {key, ttl};
    PGresult *res = q_text(pl, &pl->side, "claim", key, SQL_CLAIM, 2, v, NULL, err);
    if (!res) return BATON_LOCKER_ERR;
    int n = sym_PQntuples(res);
    sym_PQclear(res);
    sweep_claims(pl);
    return n == 1 ? BATON_LOCKER_OK : BATON_LOCKER_HELD;
}

static int pg_holder(struct baton_locker *l, const char *key, char *buf, size_t len,
                     char err[BATON_LOCKER_ERR_MAX])
{
    struct pg_locker *pl = (struct pg_locker *)l;
    const char *v[1] = {key};
    PGresult *res = q_text(pl, &pl->side, "holder", key, SQL_HOLDER, 1, v, NULL, err);
    if (!res) return BATON_LOCKER_ERR;
    int rc = BATON_LOCKER_LOST;
    if (sym_PQntuples(res) == 1) {
        snprintf(buf, len, "%s", sym_PQgetvalue(res, 0, 0));
        rc = BATON_LOCKER_OK;
    }
    sym_PQclear(res);
    return rc;
}

static int pg_ping(struct baton_locker *l, char err[BATON_LOCKER_ERR_MAX])
{
    struct pg_locker *pl = (struct pg_locker *)l;
    PGresult *res = q_text(pl, &pl->side, "ping", NULL, "SELECT 1", 0, NULL, NULL, err);
    if (!res) return BATON_LOCKER_ERR;
    sym_PQclear(res);
    return BATON_LOCKER_OK;
}

static int pg_fenced_set(struct baton_locker *l, const char *key, const char *name, uint64_t epoch,
                         const char *value, size_t len, int64_t ttl_ms,
                         char err[BATON_LOCKER_ERR_MAX])
{
    struct pg_locker *pl = (struct pg_locker *)l;
    if (!ttl_ok("fenced write", key, ttl_ms, err)) return BATON_LOCKER_ERR;
    if (len > (size_t)INT32_MAX / 2 || epoch > (uint64_t)INT64_MAX) {
        errf(err, "postgresql locker: fenced write %s:%s: value or epoch out of range", key, name);
        return BATON_LOCKER_ERR;
    }
    char ep[24], ttl[24];
    snprintf(ep, sizeof ep, "%llu", (unsigned long long)epoch);
    snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_ms);
    static const Oid types[5] = {25 /* text */, 25, 20 /* int8 */, 17 /* bytea */, 20};
    const char *v[5] = {key, name, ep, value ? value : "", ttl};
    const int lens[5] = {0, 0, 0, (int)len, 0};
    const int fmts[5] = {0, 0, 0, 1, 0};
    char sub[LOCKER_SUBKEY_MAX];
    locker_subkey(sub, key, name);
    PGresult *res = query(pl, &pl->side, "fenced write", sub, SQL_FENCED_SET, 5, types, v, lens,
                          fmts, 0, NULL, err);
    if (!res) return BATON_LOCKER_ERR;
    int n = sym_PQntuples(res);
    sym_PQclear(res);
    if (n == 1) return BATON_LOCKER_OK;
    errf(err, "postgresql locker: fenced write %s:%s: epoch %llu superseded", key, name,
         (unsigned long long)epoch);
    return BATON_LOCKER_LOST;
}

static int pg_shared_get(struct baton_locker *l, const char *key, const char *name, char *buf,
                         size_t len, char err[BATON_LOCKER_ERR_MAX])
{
    struct pg_locker *pl = (struct pg_locker *)l;
    const char *v[2] = {key, name};
    char sub[LOCKER_SUBKEY_MAX];
    locker_subkey(sub, key, name);
    PGresult *res = query(pl, &pl->side, "shared read", sub, SQL_SHARED_GET, 2, NULL, v, NULL,
                          NULL, 1, NULL, err);
    if (!res) return BATON_LOCKER_ERR;
    int rc = BATON_LOCKER_LOST;
    if (sym_PQntuples(res) == 1) {
        int n = sym_PQgetlength(res, 0, 0);
        if (n < 0 || (size_t)n >= len) {
            errf(err, "postgresql locker: shared read %s:%s: %d bytes, more than %zu", key, name,
                 n, len ? len - 1 : 0);
            rc = BATON_LOCKER_ERR;
        } else {
            memcpy(buf, sym_PQgetvalue(res, 0, 0), (size_t)n);
            buf[n] = '\0';
            rc = BATON_LOCKER_OK;
        }
    }
    sym_PQclear(res);
    return rc;
}

static int pg_inspect(struct baton_locker *l, const char *key, struct baton_lock_info *info,
                      char err[BATON_LOCKER_ERR_MAX])
{
    struct pg_locker *pl = (struct pg_locker *)l;
    memset(info, 0, sizeof *info);
    info->ttl_ms = -1;
    const char *v[1] = {key};
    PGresult *res = q_text(pl, &pl->side, "inspect", key, SQL_INSPECT, 1, v, NULL, err);
    if (!res) return BATON_LOCKER_ERR;
    if (sym_PQntuples(res) == 1) {
        info->held = cell_i64(res, 0, 0) == 1;
        info->epoch = (uint64_t)cell_i64(res, 0, 1);
        snprintf(info->holder, sizeof info->holder, "%s", sym_PQgetvalue(res, 0, 2));
        info->ttl_ms = cell_i64(res, 0, 3);
    }
    sym_PQclear(res);
    return BATON_LOCKER_OK;
}

static void pg_where(struct baton_locker *l, char *buf, size_t len)
{
    snprintf(buf, len, "%s", ((struct pg_locker *)l)->where);
}

/* ---- release announcements: the LISTEN thread ---------------------------------- */

static struct watch_key *wk_find(struct pg_locker *pl, const char *key)
{
    for (struct watch_key *w = pl->keys; w; w = w->next)
        if (strcmp(w->key, key) == 0) return w;
    return NULL;
}

/* Every watched key's count advances (w_mu held): announcements may have
 * been missed. */
static void bump_all(struct pg_locker *pl)
{
    for (struct watch_key *w = pl->keys; w; w = w->next) w->seq++;
    pthread_cond_broadcast(&pl->w_cv);
}

/* Sleeps ms unless the locker is being destroyed. */
static void listen_sleep(struct pg_locker *pl, int64_t ms)
{
    struct timespec ts = clock_deadline(CLOCK_MONOTONIC, ms);
    pthread_mutex_lock(&pl->w_mu);
    while (!atomic_load(&pl->w_stop))
        if (pthread_cond_timedwait(&pl->w_cv, &pl->w_mu, &ts) != 0) break;
    pthread_mutex_unlock(&pl->w_mu);
}

/* Connects and LISTENs: 0, or -1 with why. */
static int listen_start(struct pg_locker *pl, char *why, size_t len)
{
    PGconn *c = open_conn(pl, &pl->listen, clock_mono_ms() + pl->connect_timeout_ms, why, len);
    if (!c) return -1;
    PGresult *res = NULL;
    if (sym_PQsendQuery(c, "LISTEN " RELEASE_CHANNEL))
        res = collect(c, clock_mono_ms() + pl->command_timeout_ms, why, len);
    else
        snprintf(why, len, "%s", conn_error(c));
    if (!res || sym_PQresultStatus(res) != PGRES_COMMAND_OK) {
        if (res) snprintf(why, len, "LISTEN: %s", sym_PQresultErrorMessage(res));
        sym_PQclear(res);
        sym_PQfinish(c);
        return -1;
    }
    sym_PQclear(res);
    pl->listen.c = c; /* this thread's alone */
    pthread_mutex_lock(&pl->w_mu);
    pl->listening = true;
    bump_all(pl);
    pthread_mutex_unlock(&pl->w_mu);
    return 0;
}

static void listen_lost(struct pg_locker *pl, const char *why)
{
    drop(&pl->listen);
    pthread_mutex_lock(&pl->w_mu);
    pl->listening = false;
    pthread_mutex_unlock(&pl->w_mu);
    long long suppressed = 0;
    if (ratelimit_ok(&pl->rl_listen, 10000, &suppressed))
        glog_warn("locker", NULL, "postgresql %s: LISTEN %s: %s; standbys poll until it is back "
                  "(%lld such warnings suppressed)", pl->where, RELEASE_CHANNEL, why, suppressed);
}

static void *listen_main(void *arg)
{
    struct pg_locker *pl = arg;
    int64_t backoff = 100;
    char why[BATON_LOCKER_ERR_MAX];
    while (!atomic_load(&pl->w_stop)) {
        if (!pl->listen.c) {
            if (listen_start(pl, why, sizeof why) != 0) {
                listen_lost(pl, why);
                listen_sleep(pl, backoff);
                backoff = backoff * 2 > LISTEN_BACKOFF_MAX_MS ? LISTEN_BACKOFF_MAX_MS : backoff * 2;
                continue;
            }
            backoff = 100;
        }
        struct pollfd p = {.fd = sym_PQsocket(pl->listen.c), .events = POLLIN};
        int r = poll(&p, 1, LISTEN_POLL_MS);
        if (r <= 0) continue;
        if (!sym_PQconsumeInput(pl->listen.c) || (sym_PQisBusy(pl->listen.c), pl->listen.doomed)) {
            snprintf(why, sizeof why, "%s", pl->listen.doomed ? "the server ended the session"
                                                              : conn_error(pl->listen.c));
            listen_lost(pl, why);
            continue;
        }
        PGnotify *n;
        pthread_mutex_lock(&pl->w_mu);
        while ((n = sym_PQnotifies(pl->listen.c)) != NULL) {
            struct watch_key *w = n->extra ? wk_find(pl, n->extra) : NULL;
            if (w) w->seq++;
            sym_PQfreemem(n);
        }
        pthread_cond_broadcast(&pl->w_cv);
        pthread_mutex_unlock(&pl->w_mu);
    }
    if (pl->listen.c) sym_PQfinish(pl->listen.c);
    pl->listen.c = NULL;
    return NULL;
}

/* Registers key and starts the thread on first use (w_mu held). */
static struct watch_key *watch_ensure(struct pg_locker *pl, const char *key)
{
    struct watch_key *w = wk_find(pl, key);
    if (!w) {
        w = calloc(1, sizeof *w);
        if (w) w->key = strdup(key);
        if (w && !w->key) {
            free(w);
            w = NULL;
        }
        if (w) {
            w->next = pl->keys;
            pl->keys = w;
        }
    }
    if (!pl->w_started && !atomic_load(&pl->w_stop)) {
        if (pthread_create(&pl->w_thread, NULL, listen_main, pl) == 0) {
            pl->w_started = true;
            thread_name(pl->w_thread, "locker", "listen");
        } else {
            glog_warn("locker", NULL, "postgresql locker: cannot start the LISTEN thread; standbys poll");
        }
    }
    return w;
}

static uint64_t pg_release_seq(struct baton_locker *l, const char *key)
{
    struct pg_locker *pl = (struct pg_locker *)l;
    pthread_mutex_lock(&pl->w_mu);
    struct watch_key *w = watch_ensure(pl, key);
    /* wait (briefly) for LISTEN, so that releases after this call count */
    struct timespec ts = clock_deadline(CLOCK_MONOTONIC, pl->command_timeout_ms);
    while (w && !pl->listening && !atomic_load(&pl->w_stop))
        if (pthread_cond_timedwait(&pl->w_cv, &pl->w_mu, &ts) != 0) break;
    uint64_t seq = w ? w->seq : 0;
    pthread_mutex_unlock(&pl->w_mu);
    return seq;
}

static bool pg_wait_release(struct baton_locker *l, const char *key, uint64_t seen,
                            int64_t timeout_ms)
{
    struct pg_locker *pl = (struct pg_locker *)l;
    struct timespec ts = clock_deadline(CLOCK_MONOTONIC, timeout_ms);
    pthread_mutex_lock(&pl->w_mu);
    struct watch_key *w = watch_ensure(pl, key);
    while (w && w->seq == seen && !atomic_load(&pl->w_stop))
        if (pthread_cond_timedwait(&pl->w_cv, &pl->w_mu, &ts) != 0) break;
    bool changed = w && w->seq != seen;
    pthread_mutex_unlock(&pl->w_mu);
    return changed;
}

/* ---- life ---------------------------------------------------------------------- */

static void pgc_init(struct pgc *pc, const char *name)
{
    pthread_mutex_init(&pc->mu, NULL);
    pc->name = name;
}

static void pgc_destroy(struct pgc *pc)
{
    if (pc->c) sym_PQfinish(pc->c);
    pthread_mutex_destroy(&pc->mu);
}

static void pg_destroy(struct baton_locker *l)
{
    struct pg_locker *pl = (struct pg_locker *)l;
    atomic_store(&pl->w_stop, true);
    pthread_mutex_lock(&pl->w_mu);
    bool started = pl->w_started;
    pthread_cond_broadcast(&pl->w_cv);
    pthread_mutex_unlock(&pl->w_mu);
    if (started) pthread_join(pl->w_thread, NULL);
    while (pl->keys) {
        struct watch_key *n = pl->keys->next;
        free(pl->keys->key);
        free(pl->keys);
        pl->keys = n;
    }
    pgc_destroy(&pl->lease);
    pgc_destroy(&pl->side);
    pgc_destroy(&pl->listen);
    pthread_cond_destroy(&pl->w_cv);
    pthread_mutex_destroy(&pl->w_mu);
    free(pl->conninfo);
    if (pl->password) {
        explicit_bzero(pl->password, strlen(pl->password));
        free(pl->password);
    }
    locker_base_destroy(&pl->base);
    free(pl);
}

static const struct locker_ops pg_ops = {
    .name = "postgresql",
    .try_lock = pg_try_lock,
    .unlock = pg_unlock,
    .renew = pg_renew,
    .release_seq = pg_release_seq,
    .wait_release = pg_wait_release,
    .generation = pg_generation,
    .check = pg_check,
    .destroy = pg_destroy,
    .claim = pg_claim,
    .holder = pg_holder,
    .ping = pg_ping,
    .fenced_set = pg_fenced_set,
    .shared_get = pg_shared_get,
    .inspect = pg_inspect,
    .where = pg_where,
};

/* "host:port" (or the socket directory) the conninfo names, for logs and
 * /status; never its password. */
static void where_of(const char *conninfo, char *buf, size_t len)
{
    char *perr = NULL;
    PQconninfoOption *o = sym_PQconninfoParse(conninfo, &perr);
    if (perr) sym_PQfreemem(perr);
    const char *host = NULL, *hostaddr = NULL, *port = NULL, *db = NULL;
    for (PQconninfoOption *p = o; p && p->keyword; p++) {
        if (!p->val || !p->val[0]) continue;
        if (strcmp(p->keyword, "host") == 0) host = p->val;
        else if (strcmp(p->keyword, "hostaddr") == 0) hostaddr = p->val;
        else if (strcmp(p->keyword, "port") == 0) port = p->val;
        else if (strcmp(p->keyword, "dbname") == 0) db = p->val;
    }
    snprintf(buf, len, "%.60s:%.40s%s%.40s", host ? host : hostaddr ? hostaddr : "localhost",
             port ? port : "5432", db ? "/" : "", db ? db : "");
    if (o) sym_PQconninfoFree(o);
}

/* Fills pl's connection parameters from opts: 0, or -1 with err. */
static int params(struct pg_locker *pl, const struct baton_pg_opts *opts,
                  char err[BATON_LOCKER_ERR_MAX])
{
    char why[300];
    if (pq_dl_load(why, sizeof why) != 0) {
        errf(err, "postgresql locker: %s", why);
        return -1;
    }
    if (!opts || !opts->conninfo || !opts->conninfo[0]) {
        errf(err, "postgresql locker: conninfo is required");
        return -1;
    }
    char *perr = NULL;
    PQconninfoOption *o = sym_PQconninfoParse(opts->conninfo, &perr);
    if (!o) {
        errf(err, "postgresql locker: conninfo is not a libpq connection string: %s",
             perr ? perr : "unknown error");
        if (perr) sym_PQfreemem(perr);
        return -1;
    }
    sym_PQconninfoFree(o);
    pl->conninfo = strdup(opts->conninfo);
    pl->password = opts->password ? strdup(opts->password) : NULL;
    if (!pl->conninfo || (opts->password && !pl->password)) {
        errf(err, "postgresql locker: out of memory");
        return -1;
    }
    pl->connect_timeout_ms = opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : 1000;
    pl->command_timeout_ms = opts->command_timeout_ms > 0 ? opts->command_timeout_ms : 1000;
    size_t i = 0;
    /* before the connection string: what it says itself wins */
    pl->kw[i] = "application_name";
    pl->val[i++] = "baton-locker";
    pl->kw[i] = "dbname"; /* expanded: the whole connection string */
    pl->val[i++] = pl->conninfo;
    if (pl->password) {
        pl->kw[i] = "password";
        pl->val[i++] = pl->password;
    }
    pl->kw[i] = NULL;
    pl->val[i] = NULL;
    where_of(pl->conninfo, pl->where, sizeof pl->where);
    return 0;
}

static struct pg_locker *pg_new(const struct baton_pg_opts *opts, char err[BATON_LOCKER_ERR_MAX])
{
    struct pg_locker *pl = calloc(1, sizeof *pl);
    if (!pl) {
        errf(err, "postgresql locker: out of memory");
        return NULL;
    }
    locker_base_init(&pl->base, &pg_ops, false);
    snprintf(pl->holder, sizeof pl->holder, "%.80s pid %d", util_hostname(), (int)getpid());
    pgc_init(&pl->lease, "lease");
    pgc_init(&pl->side, "side");
    pgc_init(&pl->listen, "listen");
    pthread_mutex_init(&pl->w_mu, NULL);
    cond_init_clock(&pl->w_cv, CLOCK_MONOTONIC);
    if (params(pl, opts, err) != 0) {
        pg_destroy(&pl->base);
        return NULL;
    }
    return pl;
}

struct baton_locker *baton_locker_pg_create(const struct baton_pg_opts *opts,
                                            char err[BATON_LOCKER_ERR_MAX])
{
    err[0] = '\0';
    struct pg_locker *pl = pg_new(opts, err);
    if (!pl) return NULL;
    /* Reach the database now, to say at start what is wrong (a missing
     * table included). Nothing here fails creation: the database may come
     * up, or the tables be created, while baton runs. */
    char cerr[BATON_LOCKER_ERR_MAX];
    const char *v[1] = {"-"};
    PGresult *res = q_text(pl, &pl->side, "start-up check", NULL,
                           "SELECT count(*) FROM baton_leases WHERE key = $1", 1, v, NULL, cerr);
    if (res) sym_PQclear(res);
    else glog_error("locker", NULL, "%s (will keep retrying)", cerr);
    return &pl->base;
}

const char *baton_locker_pg_ddl(void)
{
    return DDL;
}

int baton_locker_pg_init_schema(const struct baton_pg_opts *opts, char err[BATON_LOCKER_ERR_MAX])
{
    err[0] = '\0';
    struct pg_locker *pl = pg_new(opts, err);
    if (!pl) return -1;
    /* several statements: the simple protocol (PQsendQuery), not the extended */
    int rc = -1;
    pthread_mutex_lock(&pl->side.mu);
    char why[BATON_LOCKER_ERR_MAX];
    pl->side.c = open_conn(pl, &pl->side, clock_mono_ms() + pl->connect_timeout_ms, why, sizeof why);
    PGresult *res = NULL;
    if (pl->side.c && sym_PQsendQuery(pl->side.c, DDL))
        res = collect(pl->side.c, clock_mono_ms() + pl->command_timeout_ms * 10, why, sizeof why);
    else if (pl->side.c)
        snprintf(why, sizeof why, "%s", conn_error(pl->side.c));
    if (res && sym_PQresultStatus(res) == PGRES_COMMAND_OK) rc = 0;
    else if (res) snprintf(why, sizeof why, "%s", sym_PQresultErrorMessage(res));
    sym_PQclear(res);
    pthread_mutex_unlock(&pl->side.mu);
    if (rc != 0) errf(err, "postgresql %s: creating the locker's tables: %s", pl->where, why);
    pg_destroy(&pl->base);
    return rc;
}
