/* postgresql sink: every batch in one transaction, fenced by the store.
 *
 * One connection per instance (one per endpoint), opened on first use and
 * reopened with back-off after a loss, while the term lives. A batch:
 *
 *   BEGIN; SET LOCAL statement_timeout = <lease left>;
 *          SET LOCAL idle_in_transaction_session_timeout = <lease left, 2 s at most>;
 *   INSERT INTO baton_fence (endpoint, epoch) VALUES ('<endpoint>', <epoch>)
 *     ON CONFLICT (endpoint) DO UPDATE SET epoch = EXCLUDED.epoch
 *     WHERE baton_fence.epoch <= EXCLUDED.epoch RETURNING epoch
 *       -- creates the row on first use, else locks it (as SELECT ... FOR
 *       -- UPDATE), compares and raises it in one statement; no row
 *       -- returned = a newer epoch has written: ROLLBACK, fenced.
 *       -- One simple query with BEGIN: one round trip (endpoint names
 *       -- are [A-Za-z0-9_.-], safe as a literal)
 *   INSERT INTO <table> (endpoint, id, epoch, received_at, source, payload)
 *     SELECT ... FROM jsonb_array_elements($3) ON CONFLICT (endpoint, id)
 *     DO NOTHING [RETURNING id, payload, source, received_at]
 *   [the user's statement, once per id the INSERT returned (new ids only)]
 *   COMMIT
 *
 * The fence row lock serialises the transactions of one endpoint, so rows
 * get their seq (bigserial) in commit order and an epoch never decreases
 * along it.
 *
 * Errors: SQLSTATE classes 21, 22, 23, 42, 44, P0 (a constraint violation,
 * bad data, an error in the user's statement) are not retried: the batch is
 * rolled back and its messages tried one transaction each, so only the one
 * that fails goes to the dead-letter path (MSG_DROPPED_SINK_FAILED) with the
 * server's message. Anything else (connection loss, 40 serialization or
 * deadlock, 53 resources, 57 statement timeout or shutdown, 08) is retried
 * with back-off (50 ms doubling to 1 s) while the term lives. A COMMIT whose
 * answer was lost is resolved on the next connection by reading back: when
 * every id of the batch is in the table the batch counts as delivered;
 * otherwise the transaction runs again, which is safe because ids already
 * recorded are skipped (ON CONFLICT DO NOTHING) and the statement runs only
 * for ids the INSERT returned. Every wait (connect, results) is bounded by
 * the lease left, asked every 20 ms with the cancel flag. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/pq_dl.h"
#include "base/util.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "src/sink_impl.h"

#define PG_BACKOFF_MS 50
#define PG_BACKOFF_MAX_MS 1000
#define PG_SLICE_MS 20
#define PG_CONNECT_MAX_MS 10000   /* one connection attempt at most */
#define PG_PROBE_MS 5000          /* connecting at start and for --init-sink */
#define PG_CHECK_MS 2000          /* /readyz */
#define PG_UNGUARDED_TIMEOUT_MS 60000 /* statement timeouts without a lease */
#define PG_IDENT_MAX 63
/* idle_in_transaction_session_timeout at most: a batch's transaction is
 * never idle longer than a round trip unless its client stopped (paused,
 * partitioned); meanwhile it holds the fence row, so the next leader waits
 * for it at most this long (or the lease left, when shorter). */
#define PG_IDLE_MAX_MS 2000

struct pg_settings {
    char *conninfo;
    char *host;
    int64_t port;
    char *dbname;
    char *user;
    char *password_env;
    char *password_file;
    char *sslmode;
    char *sslrootcert;
    char *sslcert;
    char *sslkey;
    char *table;
    char *statement;
    bool lease_fence;
};

#define OFF(f) offsetof(struct pg_settings, f)
static const struct setting_def pg_defs[] = {
    {"conninfo", SETTING_STRING, OFF(conninfo),
     .help = "libpq connection string (\"host=... dbname=...\" or postgresql://...); or the "
             "settings below, not both"},
    {"host", SETTING_STRING, OFF(host), .help = "server host name, address or socket directory"},
    {"port", SETTING_INT, OFF(port), .def = "5432", .min = 1, .max = 65535, .help = "server port"},
    {"dbname", SETTING_STRING, OFF(dbname), .help = "database name"},
    {"user", SETTING_STRING, OFF(user), .help = "user name"},
    {"password_env", SETTING_STRING, OFF(password_env),
     .help = "environment variable holding the password"},
    {"password_file", SETTING_STRING, OFF(password_file),
     .help = "file holding the password (first line)"},
    {"sslmode", SETTING_STRING, OFF(sslmode),
     .help = "disable, allow, prefer, require, verify-ca or verify-full (libpq's sslmode)"},
    {"sslrootcert", SETTING_STRING, OFF(sslrootcert), .help = "CA certificate file (PEM)"},
    {"sslcert", SETTING_STRING, OFF(sslcert), .help = "client certificate file (PEM)"},
    {"sslkey", SETTING_STRING, OFF(sslkey), .help = "client key file (PEM)"},
    {"table", SETTING_STRING, OFF(table), .def = "baton_messages",
     .help = "table the messages go to: an SQL identifier, optionally schema-qualified "
             "(schema.table); the fence table baton_fence lives in the same schema"},
    {"statement", SETTING_STRING, OFF(statement),
     .help = "SQL run in the batch's transaction once per new message id, with $1 id, $2 epoch, "
             "$3 payload (jsonb), $4 endpoint, $5 source, $6 received_at, $7 the envelope (jsonb)"},
    {"lease_fence", SETTING_BOOL, OFF(lease_fence), .def = "false",
     .help = "the locker is backend \"postgresql\" on this same database: every batch's "
             "transaction also locks the lease row (FOR KEY SHARE) and commits only while it "
             "holds this term's token and has not expired by the database's clock"},
    SETTINGS_END,
};
#undef OFF

static const char *const sslmodes[] = {"disable", "allow", "prefer", "require", "verify-ca",
                                       "verify-full", NULL};

/* An unquoted SQL identifier: [A-Za-z_][A-Za-z0-9_$]*, at most 63 bytes. */
static bool ident_ok(const char *s, size_t n)
{
    if (n == 0 || n > PG_IDENT_MAX) return false;
    if (!(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'))) return false;
    for (size_t i = 1; i < n; i++) {
        char c = s[i];
        if (!(c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9')))
            return false;
    }
    return true;
}

static bool table_ok(const char *t)
{
    const char *dot = strchr(t, '.');
    if (!dot) return ident_ok(t, strlen(t));
    return ident_ok(t, (size_t)(dot - t)) && ident_ok(dot + 1, strlen(dot + 1));
}

static int pg_validate(const void *settings, char *msg, size_t msglen)
{
    const struct pg_settings *s = settings;
    if (s->conninfo && (s->host || s->dbname || s->user || s->sslmode || s->sslrootcert ||
                        s->sslcert || s->sslkey)) {
        snprintf(msg, msglen, "give 'conninfo' or host/dbname/user/ssl* settings, not both");
        return -1;
    }
    if (!s->conninfo && !s->host) {
        snprintf(msg, msglen, "'conninfo' or 'host' is required");
        return -1;
    }
    if (s->password_env && s->password_file) {
        snprintf(msg, msglen, "give password_env or password_file, not both");
        return -1;
    }
    if (s->sslmode) {
        size_t i = 0;
        while (sslmodes[i] && strcmp(sslmodes[i], s->sslmode) != 0) i++;
        if (!sslmodes[i]) {
            snprintf(msg, msglen,
                     "'sslmode' expected disable, allow, prefer, require, verify-ca or "
                     "verify-full, got \"%s\"", s->sslmode);
            return -1;
        }
    }
    if (!s->table || !table_ok(s->table)) {
        snprintf(msg, msglen,
                 "'table' \"%s\" is not an SQL identifier (letters, digits, _ and $, not starting "
                 "with a digit, at most 63 bytes; optionally schema.table)",
                 s->table ? s->table : "");
        return -1;
    }
    if (s->statement && !s->statement[0]) {
        snprintf(msg, msglen, "'statement' is empty");
        return -1;
    }
    if (s->conninfo) {
        char err[300];
        if (pq_dl_load(err, sizeof err) != 0) {
            snprintf(msg, msglen, "%s", err);
            return -1;
        }
        char *perr = NULL;
        PQconninfoOption *o = sym_PQconninfoParse(s->conninfo, &perr);
        if (!o) {
            size_t l = perr ? strlen(perr) : 0;
            while (l > 0 && (perr[l - 1] == '\n' || perr[l - 1] == ' ')) l--;
            snprintf(msg, msglen, "'conninfo' is not a libpq connection string: %.*s", (int)l,
                     perr ? perr : "unknown error");
            if (perr) sym_PQfreemem(perr);
            return -1;
        }
        sym_PQconninfoFree(o);
    }
    return 0;
}

/* ---- the SQL, from the settings ---- */

struct pg_sql {
    char *fence_table; /* [schema.]baton_fence */
    char *table;
    char *fence;       /* the fence upsert: $1 endpoint, $2 epoch */
    char *insert;      /* $1 endpoint, $2 epoch, $3 jsonb array of envelopes */
    char *readback;    /* $1 endpoint, $2 jsonb array: true when every id is in */
    char *exists;      /* $1 table, $2 fence table: to_regclass of both */
    char *lease;       /* lease_fence: $1 key, $2 token: one row while the term's lease holds */
};

static char *xfmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xfmt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static void sql_build(struct pg_sql *q, const struct pg_settings *s)
{
    const char *dot = strchr(s->table, '.');
    q->table = xstrdup(s->table);
    q->fence_table = dot ? xfmt("%.*s.baton_fence", (int)(dot - s->table), s->table)
                         : xstrdup("baton_fence");
    q->fence = xfmt("INSERT INTO %s AS f (endpoint, epoch) VALUES ($1, $2) "
                    "ON CONFLICT (endpoint) DO UPDATE SET epoch = EXCLUDED.epoch "
                    "WHERE f.epoch <= EXCLUDED.epoch RETURNING f.epoch",
                    q->fence_table);
    q->insert = xfmt("INSERT INTO %s (endpoint, id, epoch, received_at, source, payload) "
                     "SELECT $1, e->>'id', $2, (e->>'received_at')::timestamptz, e->>'type', "
                     "e->'payload' FROM jsonb_array_elements($3::jsonb) AS e "
                     "ON CONFLICT (endpoint, id) DO NOTHING%s",
                     q->table,
                     s->statement ? " RETURNING id, payload::text, source, received_at::text" : "");
    q->readback = xfmt("SELECT (SELECT count(*) FROM %s WHERE endpoint = $1 AND id IN "
                       "(SELECT e->>'id' FROM jsonb_array_elements($2::jsonb) AS e)) = "
                       "(SELECT count(DISTINCT e->>'id') FROM jsonb_array_elements($2::jsonb) AS e)",
                       q->table);
    q->exists = xstrdup("SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL, "
                        "to_regclass('baton_leases') IS NOT NULL");
    /* FOR KEY SHARE: a renewal (FOR NO KEY UPDATE) never waits for it; an
     * acquisition (the locker's upsert sets the key column: FOR UPDATE)
     * waits until this transaction ends, so no write of this term commits
     * after the next term began */
    q->lease = s->lease_fence ? xstrdup("SELECT 1 FROM baton_leases WHERE key = $1 AND token = $2 "
                                        "AND expires_at > clock_timestamp() FOR KEY SHARE")
                              : NULL;
}

static void sql_free(struct pg_sql *q)
{
    free(q->fence_table);
    free(q->table);
    free(q->fence);
    free(q->insert);
    free(q->readback);
    free(q->exists);
    free(q->lease);
}

/* The idempotent DDL for the fence and the table (--init-sink). */
static char *ddl_text(const struct pg_sql *q)
{
    const char *dot = strchr(q->table, '.');
    char *schema = dot ? xfmt("CREATE SCHEMA IF NOT EXISTS %.*s;\n", (int)(dot - q->table), q->table)
                       : xstrdup("");
    char *s = xfmt("%s"
                   "CREATE TABLE IF NOT EXISTS %s (\n"
                   "    endpoint text PRIMARY KEY,\n"
                   "    epoch bigint NOT NULL\n"
                   ");\n"
                   "CREATE TABLE IF NOT EXISTS %s (\n"
                   "    seq bigserial PRIMARY KEY,\n"
                   "    endpoint text NOT NULL,\n"
                   "    id text NOT NULL,\n"
                   "    epoch bigint NOT NULL,\n"
                   "    received_at timestamptz,\n"
                   "    source text,\n"
                   "    payload jsonb,\n"
                   "    written_at timestamptz NOT NULL DEFAULT now(),\n"
                   "    UNIQUE (endpoint, id)\n"
                   ");\n",
                   schema, q->fence_table, q->table);
    free(schema);
    return s;
}

/* ---- the instance ---- */

#define PG_MAX_PARAMS 16

struct pg_sink {
    char *name;
    char *endpoint; /* "" when none: the fence row's key */
    char *log_ep;   /* NULL when none */
    const char *kw[PG_MAX_PARAMS + 1];
    const char *val[PG_MAX_PARAMS + 1];
    char *password; /* secret_free */
    char *port;
    char *statement;
    struct pg_sql sql;
    PGconn *conn;      /* the sender's thread only */
    PGconn *check_conn; /* check()'s (the observer's thread) */
    /* "INSERT INTO <fence> AS f (endpoint, epoch) VALUES ('<endpoint>', ":
     * the fence in BEGIN's round trip; NULL when the name would need
     * quoting (then the prepared fence, a round trip of its own) */
    char *fence_inline;
    bool prepared;     /* the statements are prepared on conn */
    bool unknown;      /* a COMMIT's answer was lost: read back before retrying */
    unsigned failures; /* failed attempts since the last success */
    struct jbuf batch; /* the jsonb array of a batch */
    int *row_of;       /* per message of a batch: its row in the INSERT's answer, -1 none */
    size_t row_cap;
    struct ratelimit rl_err, rl_drop, rl_fatal;
};

/* Why an attempt did not go through. */
enum pg_rc {
    PG_OK,
    PG_FENCED,  /* a newer epoch has written: rolled back */
    PG_FATAL,   /* a non-retryable SQL error: rolled back */
    PG_RETRY,   /* connection loss, a retryable error: rolled back or dropped */
    PG_UNKNOWN, /* COMMIT sent, its answer lost */
    PG_STOP,    /* the term ended or shutdown: *why */
};

struct pg_fail {
    char sqlstate[6];
    char what[400];
};

static void fail_set(struct pg_fail *f, const char *state, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail_set(struct pg_fail *f, const char *state, const char *fmt, ...)
{
    snprintf(f->sqlstate, sizeof f->sqlstate, "%s", state ? state : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->what, sizeof f->what, fmt, ap);
    va_end(ap);
    size_t l = strlen(f->what);
    while (l > 0 && (f->what[l - 1] == '\n' || f->what[l - 1] == ' ')) f->what[--l] = '\0';
    for (char *p = f->what; *p; p++) /* libpq's messages span lines: one log line */
        if (*p == '\n' || *p == '\t') *p = ' ';
}

/* Not retried: data, integrity, syntax/access, check option, PL/pgSQL
 * raise, cardinality. */
static bool sqlstate_fatal(const char *st)
{
    static const char *const classes[] = {"21", "22", "23", "42", "44", "P0", NULL};
    for (size_t i = 0; classes[i]; i++)
        if (st[0] == classes[i][0] && st[1] == classes[i][1]) return true;
    return false;
}

/* What bounds one wait: the term (call may be NULL: a plain deadline). */
struct pg_bound {
    struct sink_call *call;
    uint64_t epoch;
    int64_t deadline_ms; /* clock_mono_ms; 0 = none */
    enum msg_outcome why;
};

/* 0 = go on waiting; -1 = stop (b->why set, or the deadline passed with
 * why MSG_DELIVERED). */
static int bound_check(struct pg_bound *b)
{
    if (b->call) {
        if (b->call->cancel && atomic_load(b->call->cancel)) {
            b->why = MSG_DROPPED_SHUTDOWN;
            return -1;
        }
        if (sink_time_left(b->call, b->epoch) < 0) {
            b->why = MSG_DROPPED_TERM_ENDED;
            return -1;
        }
    }
    if (b->deadline_ms && clock_mono_ms() >= b->deadline_ms) {
        b->why = MSG_DELIVERED;
        return -1;
    }
    return 0;
}

/* Waits up to one slice for events on fd. */
static void wait_fd(int fd, short events)
{
    struct pollfd p = {.fd = fd, .events = events};
    (void)poll(&p, 1, PG_SLICE_MS);
}

static const char *pg_conn_error(PGconn *c)
{
    const char *e = c ? sym_PQerrorMessage(c) : NULL;
    return e && e[0] ? e : "connection failed";
}

/* Opens a connection within b. NULL with f filled (or b->why set). */
static PGconn *pg_open(struct pg_sink *k, struct pg_bound *b, struct pg_fail *f)
{
    PGconn *c = sym_PQconnectStartParams(k->kw, k->val, 1);
    if (!c) {
        fail_set(f, "08000", "out of memory");
        return NULL;
    }
    if (sym_PQstatus(c) == CONNECTION_BAD) {
        fail_set(f, "08000", "%s", pg_conn_error(c));
        sym_PQfinish(c);
        return NULL;
    }
    int64_t end = clock_mono_ms() + PG_CONNECT_MAX_MS;
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    for (;;) {
        if (st == PGRES_POLLING_OK) break;
        if (st == PGRES_POLLING_FAILED) {
            fail_set(f, "08000", "%s", pg_conn_error(c));
            sym_PQfinish(c);
            return NULL;
        }
        if (bound_check(b) != 0 || clock_mono_ms() >= end) {
            fail_set(f, "08000", "connecting timed out");
            sym_PQfinish(c);
            return NULL;
        }
        int fd = sym_PQsocket(c);
        struct pollfd p = {.fd = fd, .events = st == PGRES_POLLING_READING ? POLLIN : POLLOUT};
        int r = poll(&p, 1, PG_SLICE_MS);
        if (r == 0) continue; /* asks the bound again; PQconnectPoll only when ready */
        st = sym_PQconnectPoll(c);
    }
    sym_PQsetnonblocking(c, 1);
    return c;
}

/* Why a wait stopped: the term or shutdown (sqlstate ""), or no answer
 * before the deadline (08006: the connection is given up). */
static void stopped(const struct pg_bound *b, struct pg_fail *f, const char *what)
{
    if (b->why != MSG_DELIVERED) fail_set(f, "", "stopped while %s", what);
    else fail_set(f, "08006", "no answer from the server in time (%s)", what);
}

/* Sends what is buffered and collects the results of one query within b:
 * the first error result, else the last one (the caller clears it). NULL
 * = the connection failed or b stopped (f / b->why say which; f->sqlstate
 * "" when b stopped). */
static PGresult *pg_wait(PGconn *c, struct pg_bound *b, struct pg_fail *f)
{
    int fd = sym_PQsocket(c);
    for (;;) {
        int r = sym_PQflush(c);
        if (r == 0) break;
        if (r < 0) {
            fail_set(f, "08006", "%s", pg_conn_error(c));
            return NULL;
        }
        if (bound_check(b) != 0) {
            stopped(b, f, "sending");
            return NULL;
        }
        wait_fd(fd, POLLIN | POLLOUT);
        if (!sym_PQconsumeInput(c)) {
            fail_set(f, "08006", "%s", pg_conn_error(c));
            return NULL;
        }
    }
    PGresult *keep = NULL;
    for (;;) {
        while (sym_PQisBusy(c)) {
            if (bound_check(b) != 0) {
                sym_PQclear(keep);
                stopped(b, f, "waiting for the answer");
                return NULL;
            }
            wait_fd(fd, POLLIN);
            if (!sym_PQconsumeInput(c)) {
                sym_PQclear(keep);
                fail_set(f, "08006", "%s", pg_conn_error(c));
                return NULL;
            }
        }
        PGresult *res = sym_PQgetResult(c);
        if (!res) break;
        ExecStatusType s = sym_PQresultStatus(res);
        bool err = s == PGRES_FATAL_ERROR || s == PGRES_BAD_RESPONSE || s == PGRES_NONFATAL_ERROR;
        bool keep_err = keep && (sym_PQresultStatus(keep) == PGRES_FATAL_ERROR ||
                                 sym_PQresultStatus(keep) == PGRES_BAD_RESPONSE);
        if (keep_err && !err) {
            sym_PQclear(res);
            continue;
        }
        if (keep_err && err) {
            sym_PQclear(res);
            continue;
        }
        sym_PQclear(keep);
        keep = res;
    }
    if (!keep) fail_set(f, "08006", "%s", pg_conn_error(c));
    return keep;
}

/* Classifies a result: 0 when its status is ok (tuples or command), else
 * -1 with f filled from the server's error. */
static int res_ok(PGresult *res, struct pg_fail *f)
{
    ExecStatusType s = sym_PQresultStatus(res);
    if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK) return 0;
    const char *st = sym_PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *m = sym_PQresultErrorMessage(res);
    if (m && strncmp(m, "ERROR:  ", 8) == 0) m += 8;
    fail_set(f, st ? st : "XX000", "%s", m && m[0] ? m : "error without a message");
    return -1;
}

static void drop_conn(struct pg_sink *k)
{
    if (k->conn) sym_PQfinish(k->conn);
    k->conn = NULL;
    k->prepared = false;
}

static const Oid insert_types[3] = {25 /* text */, 20 /* int8 */, 25};
static const Oid readback_types[2] = {25, 25};
static const Oid user_types[7] = {25, 20, 3802 /* jsonb */, 25, 25, 1184 /* timestamptz */, 3802};

/* Runs a prepared-or-not query to its result: PG_OK with *out (caller
 * clears), or PG_FATAL / PG_RETRY / PG_STOP with f filled. */
static enum pg_rc run(struct pg_sink *k, struct pg_bound *b, int sent, PGresult **out,
                          struct pg_fail *f)
{
    *out = NULL;
    if (!sent) {
        fail_set(f, "08006", "%s", pg_conn_error(k->conn));
        return PG_RETRY;
    }
    PGresult *res = pg_wait(k->conn, b, f);
    if (!res) return f->sqlstate[0] ? PG_RETRY : PG_STOP;
    if (res_ok(res, f) != 0) {
        sym_PQclear(res);
        return sqlstate_fatal(f->sqlstate) ? PG_FATAL : PG_RETRY;
    }
    *out = res;
    return PG_OK;
}

static enum pg_rc simple(struct pg_sink *k, struct pg_bound *b, const char *sql,
                             struct pg_fail *f)
{
    PGresult *res;
    enum pg_rc r = run(k, b, sym_PQsendQuery(k->conn, sql), &res, f);
    sym_PQclear(res);
    return r;
}

static enum pg_rc prepare(struct pg_sink *k, struct pg_bound *b, const char *name,
                              const char *sql, int n, const Oid *types, struct pg_fail *f)
{
    PGresult *res;
    enum pg_rc r = run(k, b, sym_PQsendPrepare(k->conn, name, sql, n, types), &res, f);
    sym_PQclear(res);
    return r;
}

/* Prepares the statements once per connection. */
static enum pg_rc prepare_all(struct pg_sink *k, struct pg_bound *b, struct pg_fail *f)
{
    if (k->prepared) return PG_OK;
    enum pg_rc r = prepare(k, b, "baton_fence", k->sql.fence, 2, insert_types, f);
    if (r == PG_OK) r = prepare(k, b, "baton_insert", k->sql.insert, 3, insert_types, f);
    if (r == PG_OK) r = prepare(k, b, "baton_readback", k->sql.readback, 2, readback_types, f);
    if (r == PG_OK && k->sql.lease)
        r = prepare(k, b, "baton_lease", k->sql.lease, 2, readback_types, f);
    if (r == PG_OK && k->statement)
        r = prepare(k, b, "baton_statement", k->statement, 7, user_types, f);
    if (r == PG_OK) k->prepared = true;
    return r;
}

static void batch_build(struct pg_sink *k, struct message *const *msgs, size_t n)
{
    jbuf_reset(&k->batch);
    jbuf_char(&k->batch, '[');
    for (size_t i = 0; i < n; i++) {
        if (i) jbuf_char(&k->batch, ',');
        jbuf_raw(&k->batch, msgs[i]->json, msgs[i]->len);
    }
    jbuf_char(&k->batch, ']');
    jbuf_char(&k->batch, '\0');
}

/* The index in msgs[0..n) of the first message with id whose row is not
 * taken yet (row_of[i] < 0), searching from *hint on; n when none. */
static size_t find_id(struct message *const *msgs, size_t n, const int *row_of, const char *id,
                      size_t *hint)
{
    for (size_t j = 0; j < n; j++) {
        size_t i = (*hint + j) % n;
        if (row_of[i] < 0 && strcmp(msgs[i]->id, id) == 0) {
            *hint = i + 1;
            return i;
        }
    }
    return n;
}

/* A COMMIT answer was lost: true (PG_OK) when every id of the batch is in
 * the table. */
static enum pg_rc readback(struct pg_sink *k, struct pg_bound *b, bool *all, struct pg_fail *f)
{
    const char *p[2] = {k->endpoint, k->batch.data};
    PGresult *res;
    enum pg_rc r =
        run(k, b, sym_PQsendQueryPrepared(k->conn, "baton_readback", 2, p, NULL, NULL, 0), &res, f);
    if (r != PG_OK) return r;
    *all = sym_PQntuples(res) == 1 && strcmp(sym_PQgetvalue(res, 0, 0), "t") == 0;
    sym_PQclear(res);
    return PG_OK;
}

/* lease_fence, inside the batch's transaction: PG_OK once the lease row
 * holds this term's token unexpired by the database's clock (and stays
 * so: the row is locked until the transaction ends); else rolled back,
 * PG_FENCED (or PG_FATAL when there is no lease to check). */
static enum pg_rc lease_check(struct pg_sink *k, struct pg_bound *b, struct pg_fail *f)
{
    const char *key = NULL;
    char token[33] = "";
    enum pg_rc r = PG_FENCED;
    if (!b->call || !b->call->lease) {
        fail_set(f, "", "lease_fence: the endpoint has no lease (it needs guard \"active\"; a "
                        "dead-letter sink cannot fence by lease)");
        r = PG_FATAL;
    } else if (b->call->lease(b->call->arg, b->epoch, &key, token) != 0) {
        fail_set(f, "", "term %llu is no longer this replica's latest", (unsigned long long)b->epoch);
    } else {
        const char *p[2] = {key, token};
        PGresult *res;
        r = run(k, b, sym_PQsendQueryPrepared(k->conn, "baton_lease", 2, p, NULL, NULL, 0), &res,
                f);
        if (r != PG_OK) return r;
        bool held = sym_PQntuples(res) == 1;
        sym_PQclear(res);
        if (held) return PG_OK;
        fail_set(f, "", "the lease row of %s does not hold term %llu's token unexpired by the "
                        "database's clock", key, (unsigned long long)b->epoch);
        r = PG_FENCED;
    }
    struct pg_fail rf;
    if (simple(k, b, "ROLLBACK", &rf) != PG_OK) drop_conn(k);
    return r;
}

/* One transaction for msgs[0..n) on the open connection. */
static enum pg_rc txn(struct pg_sink *k, struct message *const *msgs, size_t n,
                          struct pg_bound *b, struct pg_fail *f)
{
    int64_t left = sink_time_left(b->call, b->epoch);
    int64_t tmo = left == INT64_MAX || left <= 0 ? PG_UNGUARDED_TIMEOUT_MS : left;
    if (tmo < 1) tmo = 1;
    int64_t idle = tmo < PG_IDLE_MAX_MS ? tmo : PG_IDLE_MAX_MS;
    char epoch[24];
    snprintf(epoch, sizeof epoch, "%llu", (unsigned long long)b->epoch);
    const char *fp[3] = {k->endpoint, epoch, k->batch.data};
    PGresult *res;
    enum pg_rc r;
    if (k->fence_inline) {
        /* one round trip: BEGIN, the timeouts and the fence as one simple
         * query (the endpoint name is letters, digits, '_', '-' and '.'
         * only, safe as a literal; the epoch a number); its last result
         * is the fence's */
        char *sql = xfmt("BEGIN; SET LOCAL statement_timeout = %lld; "
                         "SET LOCAL idle_in_transaction_session_timeout = %lld; "
                         "%s%s) ON CONFLICT (endpoint) DO UPDATE SET epoch = EXCLUDED.epoch "
                         "WHERE f.epoch <= EXCLUDED.epoch RETURNING f.epoch",
                         (long long)tmo, (long long)idle, k->fence_inline, epoch);
        r = run(k, b, sym_PQsendQuery(k->conn, sql), &res, f);
        free(sql);
    } else {
        char begin[200];
        snprintf(begin, sizeof begin,
                 "BEGIN; SET LOCAL statement_timeout = %lld; "
                 "SET LOCAL idle_in_transaction_session_timeout = %lld",
                 (long long)tmo, (long long)idle);
        r = simple(k, b, begin, f);
        if (r != PG_OK) return r;
        r = run(k, b, sym_PQsendQueryPrepared(k->conn, "baton_fence", 2, fp, NULL, NULL, 0), &res,
                f);
    }
    if (r != PG_OK) return r;
    bool fenced = sym_PQntuples(res) == 0;
    sym_PQclear(res);
    if (fenced) {
        fail_set(f, "", "the fence row of endpoint '%s' holds an epoch newer than %s", k->endpoint,
                 epoch);
        struct pg_fail rf;
        if (simple(k, b, "ROLLBACK", &rf) != PG_OK) drop_conn(k);
        return PG_FENCED;
    }
    if (k->sql.lease) {
        r = lease_check(k, b, f);
        if (r != PG_OK) return r;
    }
    r = run(k, b, sym_PQsendQueryPrepared(k->conn, "baton_insert", 3, fp, NULL, NULL, 0), &res, f);
    if (r != PG_OK) return r;
    if (k->statement) {
        /* in the batch's order (a CDC stream's updates after their
         * inserts), for the messages whose id the INSERT returned */
        if (n > k->row_cap) {
            k->row_cap = n;
            k->row_of = xrealloc(k->row_of, n * sizeof *k->row_of);
        }
        for (size_t i = 0; i < n; i++) k->row_of[i] = -1;
        int rows = sym_PQntuples(res);
        size_t hint = 0;
        for (int i = 0; i < rows; i++) {
            size_t at = find_id(msgs, n, k->row_of, sym_PQgetvalue(res, i, 0), &hint);
            if (at < n) k->row_of[at] = i;
        }
        for (size_t m = 0; m < n && r == PG_OK; m++) {
            int i = k->row_of[m];
            if (i < 0) continue; /* recorded before: its statement ran then */
            const char *up[7] = {
                sym_PQgetvalue(res, i, 0),
                epoch,
                sym_PQgetisnull(res, i, 1) ? NULL : sym_PQgetvalue(res, i, 1),
                k->endpoint,
                sym_PQgetisnull(res, i, 2) ? NULL : sym_PQgetvalue(res, i, 2),
                sym_PQgetisnull(res, i, 3) ? NULL : sym_PQgetvalue(res, i, 3),
                msgs[m]->json,
            };
            PGresult *ur;
            r = run(k, b, sym_PQsendQueryPrepared(k->conn, "baton_statement", 7, up, NULL, NULL, 0),
                    &ur, f);
            sym_PQclear(ur);
        }
    }
    sym_PQclear(res);
    if (r != PG_OK) return r;
    /* a transaction the server had already failed answers COMMIT with the
     * tag ROLLBACK (and no error): nothing committed, so not delivered */
    r = run(k, b, sym_PQsendQuery(k->conn, "COMMIT"), &res, f);
    if (r == PG_OK) {
        const char *tag = sym_PQcmdStatus(res);
        if (!tag || strcmp(tag, "COMMIT") != 0) {
            fail_set(f, "40000", "COMMIT answered %s: the transaction was rolled back",
                     tag && tag[0] ? tag : "nothing");
            r = PG_RETRY;
        }
        sym_PQclear(res);
    }
    if (r == PG_RETRY && (!k->conn || sym_PQstatus(k->conn) == CONNECTION_BAD ||
                          strncmp(f->sqlstate, "08", 2) == 0))
        return PG_UNKNOWN;
    if (r == PG_STOP) k->unknown = true; /* committed or not: the next term's leader dedups */
    return r;
}

/* After a failed statement inside a transaction: roll back, or drop the
 * connection when even that fails. */
static void rollback(struct pg_sink *k, struct pg_bound *b)
{
    if (!k->conn) return;
    if (sym_PQstatus(k->conn) == CONNECTION_BAD) {
        drop_conn(k);
        return;
    }
    PGTransactionStatusType ts = sym_PQtransactionStatus(k->conn);
    if (ts == PQTRANS_IDLE) return;
    struct pg_fail rf;
    if (ts == PQTRANS_ACTIVE || simple(k, b, "ROLLBACK", &rf) != PG_OK) drop_conn(k);
}

/* One attempt at msgs[0..n): connect, prepare, resolve a lost COMMIT,
 * run the transaction. */
static enum pg_rc attempt(struct pg_sink *k, struct message *const *msgs, size_t n,
                              struct pg_bound *b, struct pg_fail *f)
{
    if (k->conn && sym_PQstatus(k->conn) == CONNECTION_BAD) drop_conn(k);
    /* Besides the term: a server that stopped answering (a partition, a
     * paused host) gives up the connection after the statement timeout
     * (the lease left) and a second more. */
    int64_t left = sink_time_left(b->call, b->epoch);
    int64_t wait = left <= 0 || left > PG_UNGUARDED_TIMEOUT_MS ? PG_UNGUARDED_TIMEOUT_MS : left;
    if (wait < 2000) wait = 2000;
    b->deadline_ms = clock_mono_ms() + wait + 1000;
    if (!k->conn) {
        k->conn = pg_open(k, b, f);
        if (!k->conn) return b->why != MSG_DELIVERED ? PG_STOP : PG_RETRY;
    }
    enum pg_rc r = prepare_all(k, b, f);
    if (r == PG_OK) {
        batch_build(k, msgs, n);
        if (k->unknown) {
            bool all = false;
            r = readback(k, b, &all, f);
            if (r == PG_OK) {
                k->unknown = false;
                if (all) {
                    log_info("sink_postgresql", k->log_ep,
                             "sink '%s': a COMMIT whose answer was lost had gone through (the "
                             "batch's %zu ids are in %s)", k->name, n, k->sql.table);
                    return PG_OK;
                }
            }
        }
        if (r == PG_OK) r = txn(k, msgs, n, b, f);
    }
    if (r == PG_STOP || r == PG_UNKNOWN) {
        drop_conn(k); /* the server rolls back what was not committed */
        if (r == PG_UNKNOWN) k->unknown = true;
    } else if (r == PG_FATAL || r == PG_RETRY) {
        rollback(k, b);
    }
    return r;
}

static int backoff_sleep(struct pg_bound *b, int64_t ms)
{
    int64_t end = clock_mono_ms() + ms;
    b->deadline_ms = 0; /* the term and the cancel flag only */
    for (;;) {
        if (bound_check(b) != 0) return -1;
        int64_t rem = end - clock_mono_ms();
        if (rem <= 0) return 0;
        int64_t s = rem < PG_SLICE_MS ? rem : PG_SLICE_MS;
        struct timespec ts = {0, (long)s * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void pg_send(void *sink, struct message *const *msgs, size_t n, enum msg_outcome *outcome,
                    struct sink_call *call)
{
    struct pg_sink *k = sink;
    if (n == 0) return;
    struct pg_bound b = {.call = call, .epoch = msgs[0]->epoch, .why = MSG_DELIVERED};
    size_t done = 0;
    bool single = false; /* after a non-retryable error: one message per transaction */
    enum msg_outcome why = MSG_DELIVERED;
    int64_t delay = PG_BACKOFF_MS;
    while (done < n) {
        int64_t left = sink_wait_live(call, b.epoch);
        if (call->cancel && atomic_load(call->cancel)) {
            why = MSG_DROPPED_SHUTDOWN;
            break;
        }
        if (left < 0) {
            why = MSG_DROPPED_TERM_ENDED;
            break;
        }
        size_t m = single ? 1 : n - done;
        struct pg_fail f = {"", ""};
        b.why = MSG_DELIVERED;
        enum pg_rc r = attempt(k, msgs + done, m, &b, &f);
        if (r == PG_OK) {
            for (size_t i = done; i < done + m; i++) outcome[i] = MSG_DELIVERED;
            done += m;
            delay = PG_BACKOFF_MS;
            if (k->failures) {
                log_info("sink_postgresql", k->log_ep,
                         "sink '%s': delivered again after %u failed attempts", k->name,
                         k->failures);
                k->failures = 0;
            }
            continue;
        }
        if (r == PG_STOP) {
            why = b.why == MSG_DELIVERED ? MSG_DROPPED_TERM_ENDED : b.why;
            break;
        }
        call->attempt_errors++;
        if (r == PG_FENCED) {
            log_warn("sink_postgresql", k->log_ep,
                     "sink '%s': fenced by the store: %s; %zu message(s) not written (first id "
                     "'%s'), ending the term", k->name, f.what, n - done, msgs[done]->id);
            if (call->fenced) call->fenced(call->arg, b.epoch, f.what);
            why = MSG_DROPPED_TERM_ENDED;
            break;
        }
        if (r == PG_FATAL) {
            if (m > 1) {
                single = true; /* find the message(s) the error belongs to */
                continue;
            }
            struct message_failure mf = {.rejected = true, .status = 0};
            int l = snprintf(mf.body, sizeof mf.body, "SQLSTATE %s: %s", f.sqlstate, f.what);
            mf.body_len = l < 0 ? 0 : (size_t)l >= sizeof mf.body ? sizeof mf.body - 1 : (size_t)l;
            message_set_failure(msgs[done], &mf);
            long long suppressed = 0;
            if (ratelimit_ok(&k->rl_fatal, 1000, &suppressed))
                log_error("sink_postgresql", k->log_ep,
                          "sink '%s': id '%s' rejected by the server, not retried (SQLSTATE %s): "
                          "%s%s", k->name, msgs[done]->id, f.sqlstate, f.what,
                          suppressed ? " (earlier ones suppressed)" : "");
            outcome[done++] = MSG_DROPPED_SINK_FAILED;
            continue;
        }
        k->failures++;
        long long suppressed = 0;
        if (ratelimit_ok(&k->rl_err, 1000, &suppressed))
            log_error("sink_postgresql", k->log_ep,
                      "sink '%s': %s (SQLSTATE %s): %s; %zu message(s) waiting, retrying in %lld ms "
                      "(attempt %u)%s", k->name,
                      r == PG_UNKNOWN ? "the COMMIT's answer was lost, reading back on reconnect"
                                      : "attempt failed",
                      f.sqlstate[0] ? f.sqlstate : "-", f.what, n - done,
                      r == PG_UNKNOWN ? 0LL : (long long)delay, k->failures,
                      suppressed ? " (earlier failures suppressed)" : "");
        if (r == PG_UNKNOWN) continue;
        if (backoff_sleep(&b, delay) != 0) {
            why = b.why == MSG_DELIVERED ? MSG_DROPPED_TERM_ENDED : b.why;
            break;
        }
        delay = delay * 2 > PG_BACKOFF_MAX_MS ? PG_BACKOFF_MAX_MS : delay * 2;
    }
    for (size_t i = done; i < n; i++) outcome[i] = why;
    if (done < n) {
        long long suppressed = 0;
        if (ratelimit_ok(&k->rl_drop, 1000, &suppressed))
            log_warn("sink_postgresql", k->log_ep,
                     "sink '%s': %zu of %zu message(s) not written (first id '%s'): %s%s", k->name,
                     n - done, n, msgs[done]->id,
                     why == MSG_DROPPED_SHUTDOWN ? "shutdown" : "the term ended",
                     suppressed ? " (earlier ones suppressed)" : "");
    }
}

/* ---- create, probe, check, destroy ---- */

static void pg_destroy(void *sink)
{
    struct pg_sink *k = sink;
    if (!k) return;
    drop_conn(k);
    if (k->check_conn) sym_PQfinish(k->check_conn);
    free(k->fence_inline);
    sql_free(&k->sql);
    jbuf_free(&k->batch);
    free(k->row_of);
    secret_free(k->password);
    free(k->port);
    free(k->statement);
    free(k->name);
    free(k->endpoint);
    free(k->log_ep);
    free(k);
}

static void kv(struct pg_sink *k, size_t *i, const char *key, const char *v)
{
    if (!v) return;
    k->kw[*i] = key;
    k->val[*i] = v;
    (*i)++;
}

/* A new instance without a connection; NULL with err. */
static struct pg_sink *pg_new(const char *name, const char *endpoint, const struct pg_settings *s,
                              char *err, size_t errlen)
{
    char msg[400];
    if (pg_validate(s, msg, sizeof msg) != 0) {
        snprintf(err, errlen, "sink '%s': %s", name, msg);
        return NULL;
    }
    if (pq_dl_load(msg, sizeof msg) != 0) {
        snprintf(err, errlen, "sink '%s': %s", name, msg);
        return NULL;
    }
    struct pg_sink *k = xcalloc(1, sizeof *k);
    k->name = xstrdup(name);
    k->endpoint = xstrdup(endpoint ? endpoint : "");
    k->log_ep = endpoint && endpoint[0] ? xstrdup(endpoint) : NULL;
    if ((s->password_env || s->password_file) &&
        secret_resolve(s->password_env, s->password_file, &k->password, msg, sizeof msg) != 0) {
        snprintf(err, errlen, "sink '%s': %s", name, msg);
        pg_destroy(k);
        return NULL;
    }
    size_t i = 0;
    /* before the connection string: what it says itself wins */
    kv(k, &i, "application_name", "baton");
    kv(k, &i, "connect_timeout", "10");
    if (s->conninfo) {
        kv(k, &i, "dbname", s->conninfo); /* expanded: a whole connection string */
    } else {
        k->port = xfmt("%lld", (long long)s->port);
        kv(k, &i, "host", s->host);
        kv(k, &i, "port", k->port);
        kv(k, &i, "dbname", s->dbname);
        kv(k, &i, "user", s->user);
        kv(k, &i, "sslmode", s->sslmode);
        kv(k, &i, "sslrootcert", s->sslrootcert);
        kv(k, &i, "sslcert", s->sslcert);
        kv(k, &i, "sslkey", s->sslkey);
    }
    kv(k, &i, "password", k->password);
    k->kw[i] = NULL;
    k->val[i] = NULL;
    k->statement = s->statement ? xstrdup(s->statement) : NULL;
    sql_build(&k->sql, s);
    if (k->endpoint[0] && strspn(k->endpoint, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                              "0123456789_-.") == strlen(k->endpoint))
        k->fence_inline = xfmt("INSERT INTO %s AS f (endpoint, epoch) VALUES ('%s', ",
                               k->sql.fence_table, k->endpoint);
    jbuf_init(&k->batch, 4096);
    return k;
}

/* Connects within ms and checks that both tables exist and that the user's
 * statement prepares. 0; -1 with msg (*reached: the server answered, so
 * the problem is in the schema or the statement, not the connection). */
static int probe(struct pg_sink *k, PGconn **keep, int64_t ms, bool *reached, char *msg,
                 size_t msglen)
{
    struct pg_bound b = {.deadline_ms = clock_mono_ms() + ms};
    struct pg_fail f = {"", ""};
    *reached = false;
    PGconn *c = NULL;
    if (keep && *keep) {
        if (sym_PQstatus(*keep) == CONNECTION_OK && sym_PQtransactionStatus(*keep) == PQTRANS_IDLE)
            c = *keep;
        else
            sym_PQfinish(*keep);
        *keep = NULL;
    }
    if (!c) c = pg_open(k, &b, &f);
    if (!c) {
        snprintf(msg, msglen, "cannot connect to PostgreSQL: %s", f.what);
        return -1;
    }
    *reached = true;
    PGconn *saved = k->conn;
    bool saved_prep = k->prepared;
    k->conn = c;
    const char *p[2] = {k->sql.table, k->sql.fence_table};
    PGresult *res;
    enum pg_rc r = run(k, &b, sym_PQsendQueryParams(c, k->sql.exists, 2, NULL, p, NULL, NULL, 0),
                           &res, &f);
    int rc = 0;
    if (r != PG_OK) {
        snprintf(msg, msglen, "checking the tables failed: %s", f.what);
        rc = -1;
    } else {
        bool t = strcmp(sym_PQgetvalue(res, 0, 0), "t") == 0;
        bool fe = strcmp(sym_PQgetvalue(res, 0, 1), "t") == 0;
        bool le = strcmp(sym_PQgetvalue(res, 0, 2), "t") == 0;
        sym_PQclear(res);
        if (t && fe && k->sql.lease && !le) {
            snprintf(msg, msglen,
                     "lease_fence: no table baton_leases on this database: the locker must be "
                     "backend \"postgresql\" on the database this sink writes to ('baton -c FILE "
                     "--init-locker --apply' creates its tables)");
            rc = -1;
        } else if (!t || !fe) {
            snprintf(msg, msglen,
                     "missing table%s %s%s%s (baton creates none by itself: "
                     "'baton -c FILE --init-sink %s' prints the DDL, --apply runs it)",
                     !t && !fe ? "s" : "", !t ? k->sql.table : "", !t && !fe ? ", " : "",
                     !fe ? k->sql.fence_table : "", k->name);
            rc = -1;
        }
    }
    if (rc == 0 && !keep) {
        k->prepared = false;
        r = prepare_all(k, &b, &f);
        if (r != PG_OK) {
            snprintf(msg, msglen, "%s does not prepare: SQLSTATE %s: %s",
                     k->statement ? "the statement (or the default insert)" : "the insert",
                     f.sqlstate, f.what);
            rc = -1;
        }
    }
    if (keep && sym_PQstatus(c) == CONNECTION_OK)
        *keep = c; /* the next check reuses it */
    else
        sym_PQfinish(c);
    k->conn = saved;
    k->prepared = saved_prep;
    return rc;
}

static void *pg_create(const char *name, const char *endpoint, const void *settings, char *err,
                       size_t errlen)
{
    const struct pg_settings *s = settings;
    if (!name) name = "postgresql";
    if (!s) {
        snprintf(err, errlen, "sink '%s': no settings", name);
        return NULL;
    }
    struct pg_sink *k = pg_new(name, endpoint, s, err, errlen);
    if (!k) return NULL;
    /* A missing table or a statement the server refuses fails the start; a
     * server that cannot be reached yet does not (retried on send, /readyz
     * says so meanwhile). */
    bool reached = false;
    char msg[700];
    if (probe(k, NULL, PG_PROBE_MS, &reached, msg, sizeof msg) != 0) {
        if (reached) {
            snprintf(err, errlen, "%s", msg);
            pg_destroy(k);
            return NULL;
        }
        log_warn("sink_postgresql", k->log_ep, "sink '%s': %s (retried on send)", k->name, msg);
    }
    return k;
}

static int pg_check(void *sink, char *msg, size_t msglen)
{
    struct pg_sink *k = sink;
    bool reached;
    /* its own connection, kept from one check to the next (the observer's
     * thread only): send() owns k->conn on another thread. The tables are
     * checked; the statements were prepared at start. */
    struct pg_sink probe_k = *k;
    probe_k.conn = NULL;
    probe_k.prepared = false;
    char m[600];
    if (probe(&probe_k, &k->check_conn, PG_CHECK_MS, &reached, m, sizeof m) == 0) return 0;
    snprintf(msg, msglen, "sink '%s': %s", k->name, m);
    return -1;
}

/* --init-sink: prints the DDL, or runs it (apply). */
static int pg_init(const char *name, const void *settings, bool apply, FILE *out, char *err,
                   size_t errlen)
{
    struct pg_sink *k = pg_new(name, NULL, settings, err, errlen);
    if (!k) return -1;
    char *ddl = ddl_text(&k->sql);
    int rc = 0;
    if (!apply) {
        fprintf(out, "-- baton sink '%s': the fence and the message table (idempotent)\n%s", name,
                ddl);
    } else {
        struct pg_bound b = {.deadline_ms = clock_mono_ms() + PG_CONNECT_MAX_MS};
        struct pg_fail f = {"", ""};
        k->conn = pg_open(k, &b, &f);
        if (!k->conn) {
            snprintf(err, errlen, "sink '%s': cannot connect to PostgreSQL: %s", name, f.what);
            rc = -1;
        } else {
            char *sql = xfmt("BEGIN;\n%sCOMMIT;\n", ddl);
            b.deadline_ms = clock_mono_ms() + 60000;
            if (simple(k, &b, sql, &f) != PG_OK) {
                snprintf(err, errlen, "sink '%s': the DDL failed: SQLSTATE %s: %s", name,
                         f.sqlstate, f.what);
                rc = -1;
            } else {
                fprintf(out, "sink '%s': %s and %s exist\n", name, k->sql.fence_table,
                        k->sql.table);
            }
            free(sql);
        }
    }
    free(ddl);
    pg_destroy(k);
    return rc;
}

const struct sink_ops sink_postgresql_ops = {
    .type = "postgresql",
    .settings = pg_defs,
    .settings_size = sizeof(struct pg_settings),
    .validate = pg_validate,
    .create = pg_create,
    .send = pg_send,
    .ready = NULL,
    .check = pg_check,
    .init = pg_init,
    .destroy = pg_destroy,
};
