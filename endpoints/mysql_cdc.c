/* mysql_cdc: MySQL/MariaDB binlog change data capture under ActiveGuard.
 *
 * The leader opens a replication stream (Connector/C mariadb_rpl_*, the
 * COM_BINLOG_DUMP protocol) from the fenced checkpoint in the locker, or from
 * `start` when there is none, and forwards one envelope per changed row:
 *
 *   {..., "db":"shop","table":"orders","op":"update",
 *    "before":{"id":1,"qty":2}, "after":{"id":1,"qty":3},
 *    "gtid":"0-1-42","position":{"file":"binlog.000003","pos":1234},
 *    "ts":"2026-12-02T14:00:00.000Z"}      id = "<file>:<pos>:<row index>"
 *
 * Rows are decoded by cdc_decode.c (the library's row extraction rejects
 * several common column types). Progress: every row message carries a
 * sequence number; the forwarder's done callback marks it delivered; at each
 * transaction boundary (XID, COMMIT, standalone DDL) the consumer records
 * file:pos, and every checkpoint_every_events rows or checkpoint_every_ms it
 * writes the newest boundary whose messages were all delivered to the locker
 * beside the lease ("<lease key>:cdc", baton_locker_fenced_set: fenced by the lease
 * epoch, whatever the backend). Delivery across failover is at-least-once
 * from that checkpoint. The only direct Redis use left is the one-shot read
 * of a checkpoint an older baton kept at "<prefix>:cdc:<scope>" (upgrade).
 *
 * Threads: the consumer is endpoints/source_loop.h's supervisor (this file
 * gives it open, run, close); start() waits until the stream is open (first
 * event received) or its first attempt failed. stop() sets the flag, shuts
 * the sockets down to interrupt mariadb_rpl_fetch, joins. */
#include <errno.h>
#include <inttypes.h>
#include <mysql.h>
#include <mariadb_rpl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "base/util.h"
#include "endpoints/cdc_checkpoint.h"
#include "endpoints/cdc_decode.h"
#include "endpoints/cdc_filter.h"
#include "endpoints/endpoint.h"
#include "endpoints/mysql_cdc_private.h"
#include "endpoints/source_loop.h"
#include "baton/locker.h"
#include "baton/scope.h"
#include "common/envelope.h"
#include "common/log.h"
#include "common/util.h"

#define HEADER_LEN 19 /* binlog v4 common event header */

/* ------------------------------------------------------------ settings */

/* checkpoint: "locker" keeps it in the locker (any backend); "redis" is its
 * older name, still accepted. */
enum { CKPT_AUTO = 0, CKPT_LOCKER, CKPT_REDIS, CKPT_NONE };
enum { PURGED_FAIL = 0, PURGED_OLDEST };

static const char *const ckpt_choices[] = { "auto", "locker", "redis", "none", NULL };
static const char *const purged_choices[] = { "fail", "oldest", NULL };

#define OFF(f) offsetof(struct cdc_settings, f)
static const struct setting_def cdc_defs[] = {
    { "host", SETTING_STRING, OFF(host),
      .help = "server host name or address (default 127.0.0.1; or give hosts)" },
    { "port", SETTING_INT, OFF(port), .def = "3306", .min = 1, .max = 65535,
      .help = "TCP port (of host, and of hosts entries without one)" },
    { "hosts", SETTING_STRLIST, OFF(hosts),
      .help = "servers \"host[:port]\" (\"[v6]:port\") tried in order at every (re)connect, "
              "e.g. a primary and its replicas; instead of host" },
    { "user", SETTING_STRING, OFF(user), .required = true,
      .help = "user with REPLICATION SLAVE and REPLICATION CLIENT (BINLOG MONITOR) privileges" },
    { "password_env", SETTING_STRING, OFF(password_env), .help = "environment variable holding the password" },
    { "password_file", SETTING_STRING, OFF(password_file), .help = "file holding the password (first line)" },
    { "ssl", SETTING_BOOL, OFF(ssl), .def = "false", .help = "require TLS" },
    { "ssl_ca", SETTING_STRING, OFF(ssl_ca), .help = "CA certificate file (PEM)" },
    { "ssl_capath", SETTING_STRING, OFF(ssl_capath), .help = "directory of CA certificates" },
    { "ssl_cert", SETTING_STRING, OFF(ssl_cert), .help = "client certificate (PEM)" },
    { "ssl_key", SETTING_STRING, OFF(ssl_key), .help = "client key (PEM)" },
    { "ssl_verify", SETTING_BOOL, OFF(ssl_verify), .def = "true",
      .help = "verify the server certificate and host name (when ssl is on)" },
    { "server_id", SETTING_INT, OFF(server_id), .required = true, .min = 1, .max = 4294967295LL,
      .help = "replication server id: one unique id per replica set, distinct from every real replica's" },
    { "tables", SETTING_STRLIST, OFF(tables), .help = "include patterns \"db.table\" (globs, e.g. \"shop.*\"); empty = all" },
    { "exclude_tables", SETTING_STRLIST, OFF(exclude_tables), .help = "exclude patterns \"db.table\"" },
    { "ops", SETTING_STRLIST, OFF(ops), .help = "operations to forward: insert, update, delete (empty = all)" },
    { "start", SETTING_STRING, OFF(start), .def = "latest",
      .help = "where to start without a checkpoint: \"latest\", \"oldest\" or \"file:pos\"" },
    { "checkpoint", SETTING_ENUM, OFF(checkpoint), .def = "auto", .choices = ckpt_choices,
      .help = "binlog position checkpoint: locker (kept in the locker beside the lease; the "
              "default with a locker and guard \"active\"; \"redis\" is an older name for it) "
              "or none" },
    { "checkpoint_every_events", SETTING_INT, OFF(checkpoint_every_events), .def = "1000", .min = 1,
      .max = 100000000, .help = "write the checkpoint after this many row events" },
    { "checkpoint_every_ms", SETTING_INT, OFF(checkpoint_every_ms), .def = "100", .min = 1,
      .max = 3600000, .help = "or after this many milliseconds, whichever comes first (bounds "
                              "the rows a failover repeats: about rate x this)" },
    { "backlog_max_rows", SETTING_INT, OFF(backlog_max_rows), .def = "100000", .min = 1,
      .max = 100000000, .help = "a row the sink did not take holds the checkpoint: once this "
                                "many rows are behind it, end the term (give the lease up) so "
                                "the next leader re-reads from the checkpoint" },
    { "backlog_max_ms", SETTING_INT, OFF(backlog_max_ms), .def = "60000", .min = 1,
      .max = 86400000, .help = "... or once the checkpoint has been held this long" },
    { "ddl", SETTING_BOOL, OFF(ddl), .def = "false", .help = "forward DDL statements as op \"ddl\"" },
    { "on_purged", SETTING_ENUM, OFF(on_purged), .def = "fail", .choices = purged_choices,
      .help = "when the resume position was purged: fail (keep retrying, log) or oldest (skip the gap)" },
    { "connect_timeout_ms", SETTING_INT, OFF(connect_timeout_ms), .def = "3000", .min = 100,
      .max = 600000, .help = "connect timeout in ms" },
    { "heartbeat_ms", SETTING_INT, OFF(heartbeat_ms), .def = "1000", .min = 100, .max = 60000,
      .help = "server heartbeat period while the binlog is idle (dead-connection detection)" },
    { "reconnect_min_ms", SETTING_INT, OFF(reconnect_min_ms), .def = "200", .min = 1,
      .max = 600000, .help = "first reconnect delay", .old_name = "reconnect_backoff_ms" },
    { "reconnect_max_ms", SETTING_INT, OFF(reconnect_max_ms), .def = "5000", .min = 1,
      .max = 3600000, .help = "largest reconnect delay", .old_name = "reconnect_backoff_max_ms" },
    SETTINGS_END
};

static int check_start(const char *start, char *msg, size_t msglen)
{
    char file[CDC_FILE_MAX];
    uint64_t pos;
    if (!start || strcmp(start, "latest") == 0 || strcmp(start, "oldest") == 0) return 0;
    if (cdc_position_parse(start, file, sizeof file, &pos) == 0) return 0;
    snprintf(msg, msglen, "start \"%s\": expected \"latest\", \"oldest\" or \"file:pos\" "
             "(e.g. \"binlog.000003:4\")", start);
    return -1;
}

/* The servers to try, in order: hosts, or host:port (default
 * 127.0.0.1:port). -1 with msg on a malformed entry or both keys. */
static int parse_hosts(const struct cdc_settings *s, struct net_host **out, size_t *n, char *msg,
                       size_t msglen)
{
    *out = NULL;
    *n = 0;
    if (s->host && s->hosts.n) {
        snprintf(msg, msglen, "give host or hosts, not both");
        return -1;
    }
    size_t cnt = s->hosts.n ? s->hosts.n : 1;
    struct net_host *h = xcalloc(cnt, sizeof *h);
    for (size_t i = 0; i < cnt; i++) {
        if (!s->hosts.n) {
            snprintf(h[i].host, sizeof h[i].host, "%s", s->host ? s->host : "127.0.0.1");
            h[i].port = (int)s->port;
        } else {
            char e[400];
            if (net_host_parse(s->hosts.v[i], (int)s->port, &h[i], e, sizeof e)) {
                snprintf(msg, msglen, "hosts[%zu]: %s", i, e);
                free(h);
                return -1;
            }
        }
    }
    *out = h;
    *n = cnt;
    return 0;
}

static int cdc_validate(const void *settings, enum guard_kind guard, bool force, char *msg,
                        size_t msglen)
{
    const struct cdc_settings *s = settings;
    if (check_start(s->start, msg, msglen)) return -1;
    struct net_host *hl;
    size_t nh;
    if (parse_hosts(s, &hl, &nh, msg, msglen)) return -1;
    free(hl);
    struct cdc_filter f;
    if (cdc_filter_init(&f, &s->tables, &s->exclude_tables, &s->ops, msg, msglen)) return -1;
    cdc_filter_free(&f);
    if (s->password_env && s->password_file) {
        snprintf(msg, msglen, "give password_env or password_file, not both");
        return -1;
    }
    if (s->reconnect_max_ms < s->reconnect_min_ms) {
        snprintf(msg, msglen, "reconnect_max_ms must be >= reconnect_min_ms");
        return -1;
    }
    if (guard == GUARD_ONCE) {
        snprintf(msg, msglen, "guard \"once\" does not apply to a binlog stream (rows have no "
                 "delivery identity to race on): use \"active\" (the default) or \"none\"");
        return -1;
    }
    if (guard == GUARD_NONE && !force) {
        snprintf(msg, msglen, "guard \"none\" makes every replica forward every row: use "
                 "\"active\" (the default), or set force_guard = true for a single instance");
        return -1;
    }
    if (guard != GUARD_ACTIVE && (s->checkpoint == CKPT_LOCKER || s->checkpoint == CKPT_REDIS)) {
        snprintf(msg, msglen, "checkpoint = \"%s\" needs guard \"active\": the checkpoint write "
                 "is fenced by the lease epoch, and guard \"%s\" holds no lease (set checkpoint = "
                 "\"none\")", ckpt_choices[s->checkpoint], guard_kind_name(guard));
        return -1;
    }
    return 0;
}

static enum guard_kind cdc_auto_guard(const void *settings)
{
    (void)settings;
    return GUARD_ACTIVE;
}

/* ------------------------------------------------------------ endpoint */

static void cache_store(struct cdc *c, const struct cdc_ckpt *ck)
{
    pthread_mutex_lock(&c->cache_mu);
    c->cache = *ck;
    c->cache_valid = true;
    c->cache_at_ms = clock_mono_ms();
    pthread_mutex_unlock(&c->cache_mu);
}

/* Registers the socket of a new connection so stop() can shut it down;
 * false when stopping already. */
static bool register_fd(struct cdc *c, int slot, MYSQL *m)
{
    pthread_mutex_lock(&c->lock);
    bool ok = !source_loop_stopping(&c->loop);
    if (ok) c->fds[slot] = (int)mysql_get_socket(m);
    pthread_mutex_unlock(&c->lock);
    return ok;
}

static void close_conn(struct cdc *c, int slot, MYSQL **m)
{
    if (!*m) return;
    pthread_mutex_lock(&c->lock);
    c->fds[slot] = -1;
    pthread_mutex_unlock(&c->lock);
    mysql_close(*m);
    *m = NULL;
}

/* mysql handle with timeouts and TLS; not yet connected. */
static MYSQL *conn_new(struct cdc *c, unsigned read_timeout_s)
{
    MYSQL *m = mysql_init(NULL);
    if (!m) return NULL;
    unsigned ct = (unsigned)((c->s->connect_timeout_ms + 999) / 1000);
    mysql_optionsv(m, MYSQL_OPT_CONNECT_TIMEOUT, &ct);
    mysql_optionsv(m, MYSQL_OPT_READ_TIMEOUT, &read_timeout_s);
    mysql_optionsv(m, MYSQL_OPT_WRITE_TIMEOUT, &read_timeout_s);
    if (c->s->ssl) {
        my_bool on = 1, verify = c->s->ssl_verify;
        mysql_ssl_set(m, c->s->ssl_key, c->s->ssl_cert, c->s->ssl_ca, c->s->ssl_capath, NULL);
        mysql_optionsv(m, MYSQL_OPT_SSL_ENFORCE, &on);
        mysql_optionsv(m, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify);
    }
    return m;
}

/* Connects m to host i. */
static int conn_connect_to(struct cdc *c, MYSQL *m, size_t i, char *err, size_t errlen)
{
    const struct net_host *hp = &c->hosts[i];
    if (!mysql_real_connect(m, hp->host, c->s->user, c->password, NULL, (unsigned)hp->port,
                            NULL, 0)) {
        char where[300];
        net_host_format(hp, where, sizeof where);
        snprintf(err, errlen, "mysql %s: connect as '%s': %s (error %u)", where, c->s->user,
                 mysql_error(m), mysql_errno(m));
        return -1;
    }
    return 0;
}

/* Connects m to the server in use (host_cur): the metadata connection and
 * the purged-position lookup go where the stream is. */
static int conn_connect(struct cdc *c, MYSQL *m, char *err, size_t errlen)
{
    return conn_connect_to(c, m, c->host_cur, err, errlen);
}

/* The stream's connection: the hosts in order from host_next (wrapping),
 * the first that accepts. *m is replaced by a fresh handle after a failed
 * attempt. On success host_cur and `where` name it; otherwise err lists
 * every host with its error. */
static int conn_connect_any(struct cdc *c, MYSQL **m, unsigned read_timeout_s, char *err,
                            size_t errlen)
{
    size_t off = 0;
    err[0] = '\0';
    for (size_t k = 0; k < c->nhosts; k++) {
        size_t i = (c->host_next + k) % c->nhosts;
        char e1[600];
        if (!*m) *m = conn_new(c, read_timeout_s);
        if (!*m) {
            snprintf(err, errlen, "mysql_init: out of memory");
            return -1;
        }
        if (conn_connect_to(c, *m, i, e1, sizeof e1) == 0) {
            c->host_cur = i;
            net_host_format(&c->hosts[i], c->where, sizeof c->where);
            return 0;
        }
        mysql_close(*m);
        *m = NULL;
        if (off < errlen) {
            int w = snprintf(err + off, errlen - off, "%s%s", k ? "; " : "",
                             c->nhosts > 1 ? e1 + 6 : e1); /* "mysql " once */
            if (w > 0) off += (size_t)w;
        }
    }
    if (c->nhosts > 1) {
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "mysql: no server of %zu accepted: %s", c->nhosts, err);
        snprintf(err, errlen, "%s", tmp);
    }
    return -1;
}

static int run_sql(struct cdc *c, MYSQL *m, const char *sql, char *err, size_t errlen)
{
    if (mysql_query(m, sql)) {
        snprintf(err, errlen, "mysql %s: %s: %s (error %u)", c->where, sql, mysql_error(m),
                 mysql_errno(m));
        return -1;
    }
    MYSQL_RES *r = mysql_store_result(m);
    if (r) mysql_free_result(r);
    return 0;
}

/* First row, column col of a query; out "" when there is no row. */
int mysql_cdc_query_value(struct cdc *c, MYSQL *m, const char *sql, unsigned col, char *out,
                          size_t outlen, char *out2, size_t out2len, char *err, size_t errlen)
{
    if (mysql_query(m, sql)) {
        snprintf(err, errlen, "mysql %s: %s: %s (error %u)", c->where, sql, mysql_error(m),
                 mysql_errno(m));
        return -1;
    }
    MYSQL_RES *r = mysql_store_result(m);
    out[0] = '\0';
    if (out2) out2[0] = '\0';
    if (!r) return 0;
    MYSQL_ROW row = mysql_fetch_row(r);
    if (row && mysql_num_fields(r) > col) {
        snprintf(out, outlen, "%s", row[col] ? row[col] : "");
        if (out2 && mysql_num_fields(r) > col + 1)
            snprintf(out2, out2len, "%s", row[col + 1] ? row[col + 1] : "");
    }
    mysql_free_result(r);
    return 0;
}

/* ------------------------------------------------------------ checkpoint */

/* Writes ck fenced by this term's epoch; logs the outcome. Returns 1,
 * 0 (the epoch is stale: a newer leader exists) or -1 (locker error, the next
 * write retries). */
int mysql_cdc_write_checkpoint(struct cdc *c, const struct cdc_ckpt *ck)
{
    char value[CDC_CHECKPOINT_MAX], err[BATON_LOCKER_ERR_MAX];
    const char *name = c->h->name;
    int n = cdc_checkpoint_format(value, sizeof value, ck);
    int rc = n < 0 ? BATON_LOCKER_ERR
                   : baton_locker_fenced_set(c->h->locker, c->h->lease_key, CDC_CHECKPOINT_NAME,
                                       c->epoch, value, (size_t)n, CDC_CHECKPOINT_TTL_MS, err);
    if (n < 0) snprintf(err, sizeof err, "checkpoint %.200s: position too long", c->ckpt_key);
    if (rc == BATON_LOCKER_OK) {
        log_debug(COMPONENT, name, "checkpoint %s = %s (epoch %" PRIu64 ")", c->ckpt_key, value,
                  c->epoch);
        cache_store(c, ck);
        if (ck != &c->written_ck) c->written_ck = *ck; /* a refresh writes it from there */
        c->written_ms = clock_mono_ms();
        c->written = true;
        return 1;
    }
    if (rc == BATON_LOCKER_LOST) {
        log_error(COMPONENT, name, "checkpoint %s = %s rejected: epoch %" PRIu64 " is stale (a "
                  "newer leader took the lease over): this replica is no longer the leader",
                  c->ckpt_key, value, c->epoch);
        return 0;
    }
    long long supp = 0;
    if (ratelimit_ok(&c->rl_ckpt, 5000, &supp))
        log_warn(COMPONENT, name, "checkpoint not written: %s (%lld similar suppressed)", err,
                 supp);
    return -1;
}

/* Reads "<lease key>:cdc". Returns 1 found (*ck filled), 0 absent, -1 on a
 * locker error or an unparsable value (err filled). */
int mysql_cdc_read_checkpoint(struct cdc *c, struct cdc_ckpt *ck, char *err, size_t errlen)
{
    /* zeroed: a NUL inside the value shows as bytes after it */
    char value[CDC_CHECKPOINT_MAX] = "", lerr[BATON_LOCKER_ERR_MAX];
    int rc = baton_locker_shared_get(c->h->locker, c->h->lease_key, CDC_CHECKPOINT_NAME, value,
                               sizeof value, lerr);
    if (rc == BATON_LOCKER_LOST) return 0;
    if (rc != BATON_LOCKER_OK) {
        snprintf(err, errlen, "%s", lerr);
        return -1;
    }
    return cdc_checkpoint_parse_n(value, cdc_checkpoint_value_len(value, sizeof value), c->ckpt_key, ck,
                                  err, errlen) == 0 ? 1 : -1;
}

/* Follows the checkpoint in the locker (see struct cdc): a read every
 * checkpoint_every_ms (at least 200 ms); the locker runs it on its side
 * connection, never delaying lease traffic. */
static void *follower_main(void *arg)
{
    struct cdc *c = arg;
    int64_t every = c->s->checkpoint_every_ms > 200 ? c->s->checkpoint_every_ms : 200;
    while (!atomic_load(&c->follower_stop)) {
        char err[512];
        struct cdc_ckpt ck;
        if (mysql_cdc_read_checkpoint(c, &ck, err, sizeof err) == 1) cache_store(c, &ck);
        sleep_ms_cancellable(every, &c->follower_stop);
    }
    return NULL;
}

/* The term cannot go on: a row the sink did not take holds the checkpoint
 * and the rows behind it pile up (memory) while nothing can be checkpointed
 * past it. Give the lease up so the next leader (after one ttl, most likely
 * another replica) re-reads from the checkpoint and retries that row.
 * Returns true when it ended the term. */
static bool backlog_check(struct cdc *c, int64_t now)
{
    struct cdc_backlog b;
    cdc_progress_backlog(c->progress, &b);
    if (!b.blocked || c->term_ended) return false;
    int64_t held = now - b.blocked_since_ms;
    if (b.pending < (uint64_t)c->s->backlog_max_rows && held < c->s->backlog_max_ms)
        return false;
    char reason[600];
    snprintf(reason, sizeof reason, "a row the sink did not take holds the checkpoint at %s:%"
             PRIu64 " since %lld ms, %" PRIu64 " rows behind it (%zu bytes; backlog_max_rows %"
             PRId64 ", backlog_max_ms %" PRId64 ")", c->written_ck.file, c->written_ck.pos,
             (long long)held, b.pending, b.bytes, c->s->backlog_max_rows, c->s->backlog_max_ms);
    log_error(COMPONENT, c->h->name, "%s: ending the term so the next leader re-reads from the "
              "checkpoint", reason);
    c->term_ended = true;
    if (c->h->end_term) c->h->end_term(c->h, reason);
    return true;
}

static void maybe_checkpoint(struct cdc *c, bool force)
{
    if (!c->ckpt_on) return;
    int64_t now = clock_mono_ms();
    if (!force && c->rows_since_ckpt < (uint64_t)c->s->checkpoint_every_events &&
        now - c->last_ckpt_ms < c->s->checkpoint_every_ms)
        return;
    c->rows_since_ckpt = 0;
    c->last_ckpt_ms = now;
    struct cdc_ckpt ck;
    if (cdc_progress_checkpoint(c->progress, &ck)) mysql_cdc_write_checkpoint(c, &ck);
    else if (c->written && now - c->written_ms >= CDC_CHECKPOINT_REFRESH_MS)
        mysql_cdc_write_checkpoint(c, &c->written_ck); /* keeps it from expiring */
    if (!force && c->guarded) backlog_check(c, now);
}

static void on_done(void *arg, const struct message *m, enum msg_outcome o)
{
    struct cdc *c = arg;
    cdc_progress_done(c->progress, m->seq, o == MSG_DELIVERED);
    if (o != MSG_DELIVERED) {
        long long supp = 0;
        if (ratelimit_ok(&c->rl_bad, 5000, &supp))
            log_warn(COMPONENT, c->h->name, "row message %s not delivered (%s): the checkpoint "
                     "stays before it for this term, a later leader re-reads it (%lld similar "
                     "suppressed)", m->id, msg_outcome_name(o), supp);
    }
}

/* ------------------------------------------------------------ tables */

static struct table_entry *table_find(struct cdc *c, uint64_t id)
{
    for (size_t i = 0; i < c->ntables; i++)
        if (c->tables[i].used && c->tables[i].t.table_id == id) return &c->tables[i];
    return NULL;
}

static void tables_clear(struct cdc *c)
{
    for (size_t i = 0; i < c->ntables; i++) cdc_table_free(&c->tables[i].t);
    free(c->tables);
    c->tables = NULL;
    c->ntables = 0;
}

/* Which of the k columns in names are whole-column parts of t's primary key,
 * from information_schema.STATISTICS, into in_pk. false when it could not
 * be read (logged; the rows are then keyed by db + table). */
static bool pk_lookup(struct cdc *c, const struct cdc_table *t, const char *edb, const char *etb,
                      char *const *names, uint32_t k, bool *in_pk)
{
    char sql[1400];
    snprintf(sql, sizeof sql,
             "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA='%s' AND "
             "TABLE_NAME='%s' AND INDEX_NAME='PRIMARY' AND SUB_PART IS NULL", edb, etb);
    if (mysql_query(c->meta, sql)) {
        log_warn(COMPONENT, c->h->name, "information_schema primary key lookup of %s.%s: %s "
                 "(its rows are ordered by table)", t->db, t->table, mysql_error(c->meta));
        close_conn(c, 1, &c->meta);
        return false;
    }
    MYSQL_RES *r = mysql_store_result(c->meta);
    if (!r) return false;
    MYSQL_ROW row;
    while ((row = mysql_fetch_row(r)))
        for (uint32_t i = 0; row[0] && i < k; i++)
            if (strcasecmp(names[i], row[0]) == 0) in_pk[i] = true; /* names are case-insensitive */
    mysql_free_result(r);
    return true;
}

/* Column names, signedness and binary-ness from information_schema, for
 * table maps without FULL metadata (binlog_row_metadata=MINIMAL), and the
 * primary key (the ordering key of the rows, issue 36). */
static void schema_lookup(struct cdc *c, struct cdc_table *t)
{
    char err[512];
    const char *name = c->h->name;
    if (!c->meta) {
        unsigned rt = 10;
        c->meta = conn_new(c, rt);
        if (!c->meta || conn_connect(c, c->meta, err, sizeof err) || !register_fd(c, 1, c->meta)) {
            log_warn(COMPONENT, name, "column names of %s.%s unknown (no FULL table map metadata "
                     "and information_schema unreachable: %s); keys are @1, @2, ...",
                     t->db, t->table, c->meta ? err : "out of memory");
            close_conn(c, 1, &c->meta);
            return;
        }
    }
    char edb[2 * 256 + 1], etb[2 * 256 + 1], sql[1400];
    mysql_real_escape_string(c->meta, edb, t->db, (unsigned long)strlen(t->db));
    mysql_real_escape_string(c->meta, etb, t->table, (unsigned long)strlen(t->table));
    snprintf(sql, sizeof sql,
             "SELECT COLUMN_NAME, COLUMN_TYPE, CHARACTER_SET_NAME FROM information_schema.COLUMNS "
             "WHERE TABLE_SCHEMA='%s' AND TABLE_NAME='%s' ORDER BY ORDINAL_POSITION", edb, etb);
    if (mysql_query(c->meta, sql)) {
        log_warn(COMPONENT, name, "information_schema lookup of %s.%s: %s", t->db, t->table,
                 mysql_error(c->meta));
        close_conn(c, 1, &c->meta);
        return;
    }
    MYSQL_RES *r = mysql_store_result(c->meta);
    if (!r) return;
    uint64_t n = mysql_num_rows(r);
    char **names = xcalloc(n + 1, sizeof *names);
    bool *uns = xcalloc(n + 1, sizeof *uns), *bin = xcalloc(n + 1, sizeof *bin);
    MYSQL_ROW row;
    uint32_t k = 0;
    while ((row = mysql_fetch_row(r)) && k < n) {
        names[k] = xstrdup(row[0] ? row[0] : "");
        uns[k] = row[1] && strstr(row[1], "unsigned") != NULL;
        bin[k] = row[2] == NULL;
        k++;
    }
    mysql_free_result(r);
    if (k != t->ncols)
        log_warn(COMPONENT, name, "%s.%s: information_schema lists %u columns, the table map %u "
                 "(schema changed since the event was written?)", t->db, t->table, k, t->ncols);
    cdc_table_apply_schema(t, names, uns, bin, k);
    if (!t->have_pk) {
        bool *in_pk = xcalloc(k + 1, sizeof *in_pk);
        if (pk_lookup(c, t, edb, etb, names, k, in_pk)) cdc_table_apply_pk(t, in_pk, k);
        free(in_pk);
    }
    for (uint32_t i = 0; i < k; i++) free(names[i]);
    free(names);
    free(uns);
    free(bin);
}

static void handle_table_map(struct cdc *c, const unsigned char *body, size_t len)
{
    if (len >= 6) {
        uint64_t id = 0;
        for (int i = 5; i >= 0; i--) id = (id << 8) | body[i];
        struct table_entry *e = table_find(c, id);
        if (e && e->t.body_len == len && memcmp(e->t.body, body, len) == 0) return; /* unchanged */
    }
    struct cdc_table t;
    char err[256];
    if (cdc_table_parse(body, len, &t, err, sizeof err)) {
        atomic_fetch_add_explicit(&c->h->stats->malformed, 1, memory_order_relaxed);
        log_warn(COMPONENT, c->h->name, "%s:%" PRIu64 ": %s", c->file, c->pos, err);
        return;
    }
    bool pass = cdc_filter_table(&c->filter, t.db, t.table);
    if (pass && !t.have_names) schema_lookup(c, &t);
    struct table_entry *e = table_find(c, t.table_id);
    if (!e) {
        if (c->ntables >= 4096) tables_clear(c);
        c->tables = xrealloc(c->tables, (c->ntables + 1) * sizeof *c->tables);
        e = &c->tables[c->ntables++];
        memset(e, 0, sizeof *e);
    } else {
        cdc_table_free(&e->t);
    }
    e->t = t;
    e->pass = pass;
    e->used = true;
}

/* ------------------------------------------------------------ emitting */

static void begin_envelope_at(struct cdc *c, const char *id, int64_t received_wall_ms)
{
    envelope_begin(&c->env, c->h->name, c->h->type, c->epoch, id, received_wall_ms);
}

static void begin_envelope(struct cdc *c, const char *id)
{
    begin_envelope_at(c, id, clock_wall_ms());
}

/* The event header's timestamp as RFC 3339, cached: every row of an event
 * (and usually every event of a second) shares it. */
static const char *event_ts(struct cdc *c, uint32_t ts)
{
    if (!c->ts_valid || c->ts_secs != ts) {
        clock_format_rfc3339((int64_t)ts * 1000, c->ts_text, sizeof c->ts_text);
        c->ts_secs = ts;
        c->ts_valid = true;
    }
    return c->ts_text;
}

/* "<file>:<pos>:" into out (size CDC_FILE_MAX + 48); returns its length. */
static size_t id_prefix(const struct cdc *c, uint64_t ev_pos, char *out)
{
    size_t fl = strnlen(c->file, CDC_FILE_MAX - 1);
    memcpy(out, c->file, fl);
    char *o = out + fl;
    *o++ = ':';
    char tmp[24], *p = tmp + sizeof tmp;
    do {
        *--p = (char)('0' + ev_pos % 10);
        ev_pos /= 10;
    } while (ev_pos);
    memcpy(o, p, (size_t)(tmp + sizeof tmp - p));
    o += tmp + sizeof tmp - p;
    *o++ = ':';
    *o = '\0';
    return (size_t)(o - out);
}

/* Appends the row index to an id prefix of length n; returns the id's
 * length. */
static size_t id_row(char *id, size_t n, uint64_t idx)
{
    char tmp[24], *p = tmp + sizeof tmp;
    do {
        *--p = (char)('0' + idx % 10);
        idx /= 10;
    } while (idx);
    size_t l = (size_t)(tmp + sizeof tmp - p);
    memcpy(id + n, p, l);
    id[n + l] = '\0';
    return n + l;
}

/* Where the row index of id (its prefix of length idn plus "0") sits in the
 * envelope in c->ev_head (as envelope_begin wrote it for that id), or
 * SIZE_MAX when the template cannot be used: an id of a later row could be
 * truncated to MESSAGE_ID_MAX, or `"id":"<escaped id>"` is not there. The
 * first raw `"id":` is the key: a quote inside a string value is escaped. */
static size_t row_index_offset(struct cdc *c, const char *id, size_t idn)
{
    if (idn + 21 >= MESSAGE_ID_MAX) return SIZE_MAX; /* 20 digits + NUL */
    jbuf_reset(&c->ev_tail); /* scratch, rewritten right after */
    jbuf_raw(&c->ev_tail, "\"id\":", 5);
    jbuf_strz(&c->ev_tail, id);
    const char *at = strstr(c->ev_head.data, c->ev_tail.data);
    if (!at) return SIZE_MAX;
    size_t d = (size_t)(at - c->ev_head.data) + c->ev_tail.len - 2;
    if (c->ev_head.data[d] != '0' || c->ev_head.data[d + 1] != '"') return SIZE_MAX;
    return d;
}

/* ,"gtid":..,"position":{"file":..,"pos":..},"ts":.. (the fields after the
 * row images, the same for every row of an event) */
static void write_common(struct cdc *c, struct jbuf *b, uint64_t ev_pos, uint32_t ts)
{
    bool first = false;
    jbuf_key(b, &first, "gtid");
    if (c->gtid[0]) jbuf_strz(b, c->gtid);
    else jbuf_null(b);
    jbuf_key(b, &first, "position");
    jbuf_rawz(b, "{\"file\":");
    jbuf_strz(b, c->file);
    jbuf_rawz(b, ",\"pos\":");
    jbuf_u64(b, ev_pos);
    jbuf_char(b, '}');
    jbuf_key(b, &first, "ts");
    jbuf_strz(b, event_ts(c, ts));
}

static void finish_common(struct cdc *c, uint64_t ev_pos, uint32_t ts)
{
    /* envelope_begin wrote the first keys: the next one takes a comma */
    write_common(c, &c->env.buf, ev_pos, ts);
}

static void emit_current(struct cdc *c)
{
    struct message *m = envelope_finish(&c->env);
    if (c->ckpt_on) {
        m->seq = cdc_progress_assign(c->progress);
        m->done = on_done;
        m->done_arg = c;
    }
    /* deferred: the rows of one binlog event go out together at the flush
     * after it, on this thread when the forwarder is idle and the sink takes
     * them at once (src/gateway.c host_flush): the envelopes are written
     * from the cache of the core that built them, with no hand-off */
    if (c->h->emit_deferred) {
        c->h->emit_deferred(c->h, m);
        c->deferred++;
    } else {
        c->h->emit(c->h, m);
    }
    c->rows_since_ckpt++;
    c->rows_emitted++;
}

/* Emitted deferred since the last flush: out now, before mariadb_rpl_fetch
 * may block again. */
static void flush_deferred(struct cdc *c)
{
    if (c->deferred) {
        c->deferred = 0;
        c->h->flush(c->h);
    }
}

static void bad_event(struct cdc *c, const char *what)
{
    atomic_fetch_add_explicit(&c->h->stats->malformed, 1, memory_order_relaxed);
    long long supp = 0;
    if (ratelimit_ok(&c->rl_bad, 5000, &supp))
        log_warn(COMPONENT, c->h->name, "%s:%" PRIu64 ": %s; event skipped (%lld similar "
                 "suppressed)", c->file, c->pos, what, supp);
}

static void handle_rows(struct cdc *c, int type, const unsigned char *body, size_t len,
                        uint64_t ev_pos, uint32_t ts)
{
    struct cdc_rows rows;
    char err[256];
    if (cdc_rows_parse(type, body, len, &rows, err, sizeof err)) {
        bad_event(c, err);
        return;
    }
    struct table_entry *te = table_find(c, rows.table_id);
    if (!te) {
        snprintf(err, sizeof err, "rows event for unknown table id %" PRIu64, rows.table_id);
        bad_event(c, err);
        return;
    }
    if (!te->pass || !cdc_filter_op(&c->filter, rows.op)) return;
    if (te->t.ncols != rows.ncols) {
        snprintf(err, sizeof err, "rows event has %u columns, table map of %s.%s %u", rows.ncols,
                 te->t.db, te->t.table, te->t.ncols);
        bad_event(c, err);
        return;
    }
    const unsigned char *p = rows.data;
    /* where each image's primary key values were written (cdc_row_key) */
    struct cdc_span pk_before[CDC_PK_MAX], pk_after[CDC_PK_MAX];
    /* every row of the event was received now, with the event */
    int64_t received = clock_wall_ms();
    char id[CDC_FILE_MAX + 48];
    size_t idn = id_prefix(c, ev_pos, id);
    /* The envelope of every row of the event is the same but for the row
     * index at the end of its id: envelope_begin writes it once, for row 0,
     * the event's own fields are appended, and each row copies that template
     * with its index in place. envelope_begin per row (strlen + escaping of
     * endpoint, type and id, the received_at timestamp) cost ~12% of the
     * consumer thread. Falls back to envelope_begin per row when an id
     * would be truncated or the escaped id is not found in the template. */
    id_row(id, idn, 0);
    begin_envelope_at(c, id, received);
    jbuf_reset(&c->ev_head);
    jbuf_raw(&c->ev_head, c->env.buf.data, c->env.buf.len);
    size_t env_len = c->ev_head.len;
    size_t digit = row_index_offset(c, id, idn);
    bool first = false;
    jbuf_key(&c->ev_head, &first, "db");
    jbuf_strz(&c->ev_head, te->t.db);
    jbuf_key(&c->ev_head, &first, "table");
    jbuf_strz(&c->ev_head, te->t.table);
    jbuf_key(&c->ev_head, &first, "op");
    jbuf_strz(&c->ev_head, cdc_op_name(rows.op));
    jbuf_key(&c->ev_head, &first, "before");
    jbuf_reset(&c->ev_tail);
    write_common(c, &c->ev_tail, ev_pos, ts);
    for (uint64_t idx = 0; p < rows.end; idx++) {
        size_t idl = id_row(id, idn, idx);
        struct envelope *e = &c->env;
        if (digit != SIZE_MAX) {
            jbuf_reset(&e->buf);
            jbuf_raw(&e->buf, c->ev_head.data, digit);
            jbuf_raw(&e->buf, id + idn, idl - idn);
            jbuf_raw(&e->buf, c->ev_head.data + digit + 1, c->ev_head.len - digit - 1);
            e->first = false;
            e->epoch = c->epoch;
            memcpy(e->id, id, idl + 1); /* idl < MESSAGE_ID_MAX: row_index_offset */
        } else {
            begin_envelope_at(c, id, received);
            /* envelope_begin wrote the first keys: the event's fields start
             * with a comma */
            jbuf_raw(&e->buf, c->ev_head.data + env_len, c->ev_head.len - env_len);
        }
        int rc = 0;
        if (rows.op == CDC_OP_INSERT) jbuf_null(&e->buf);
        else rc = cdc_row_to_json_pk(&te->t, rows.present, &p, rows.end, &e->buf, pk_before, err,
                                     sizeof err);
        if (rc == 0) {
            jbuf_raw(&e->buf, ",\"after\":", 9);
            if (rows.op == CDC_OP_DELETE) jbuf_null(&e->buf);
            else
                rc = cdc_row_to_json_pk(&te->t,
                                        rows.op == CDC_OP_UPDATE ? rows.present_upd : rows.present,
                                        &p, rows.end, &e->buf, pk_after, err, sizeof err);
        }
        if (rc) {
            char what[400];
            snprintf(what, sizeof what, "%s.%s row %" PRIu64 ": %s", te->t.db, te->t.table, idx, err);
            bad_event(c, what);
            return;
        }
        if (c->skip_left > 0) { /* already forwarded before the reconnect */
            c->skip_left--;
            c->txn_rows++;
            continue;
        }
        /* ordered per row: db + table + primary key (the new one for an
         * update that changes it; see cdc_row_key), db + table when the
         * table's primary key is not known */
        e->key = cdc_row_key(&te->t, e->buf.data, rows.op == CDC_OP_INSERT ? NULL : pk_before,
                             rows.op == CDC_OP_DELETE ? NULL : pk_after);
        jbuf_raw(&e->buf, c->ev_tail.data, c->ev_tail.len);
        emit_current(c);
        c->txn_rows++;
    }
}

/* The read-side GTID position moves past g. */
static void rstate_apply(struct cdc *c, const struct cdc_gtid *g)
{
    for (size_t i = 0; i < c->nrstate; i++)
        if (c->rstate[i].domain == g->domain) {
            c->rstate[i] = *g;
            return;
        }
    if (c->nrstate < CDC_GTID_DOMAINS) c->rstate[c->nrstate++] = *g;
    else c->rstate_known = false;
}

static void end_txn(struct cdc *c)
{
    c->in_txn = false;
    c->standalone = false;
    c->skip_left = 0;
    c->by_gtid = false; /* a transaction ended here: this server's position is known */
    snprintf(c->resume_file, sizeof c->resume_file, "%s", c->file);
    c->resume_pos = c->pos;
    c->resume_server = c->server_now;
    if (c->txn_has_gtid) rstate_apply(c, &c->txn_gtid);
    if (c->ckpt_on)
        cdc_progress_boundary(c->progress, c->file, c->pos, c->txn_has_gtid ? &c->txn_gtid : NULL,
                              c->server_now);
    c->txn_has_gtid = false;
}

static bool stmt_is(const char *s, size_t n, const char *word)
{
    size_t w = strlen(word);
    return n >= w && strncasecmp(s, word, w) == 0 && (n == w || s[w] == ' ' || s[w] == '\t' ||
                                                      s[w] == ';');
}

static void handle_query(struct cdc *c, const MARIADB_RPL_EVENT *ev, uint64_t ev_pos)
{
    const char *sql = ev->event.query.statement.str;
    size_t n = ev->event.query.statement.length;
    while (n && sql[n - 1] == '\0') n--;
    if (!sql || n == 0) return;
    if (stmt_is(sql, n, "BEGIN") || stmt_is(sql, n, "SAVEPOINT") || stmt_is(sql, n, "XA"))
        return;
    if (stmt_is(sql, n, "COMMIT") || stmt_is(sql, n, "ROLLBACK")) {
        end_txn(c);
        return;
    }
    /* DDL (or a statement-format statement): names may have changed */
    char db[256];
    snprintf(db, sizeof db, "%.*s", (int)ev->event.query.database.length,
             ev->event.query.database.str ? ev->event.query.database.str : "");
    tables_clear(c);
    if (c->s->ddl && cdc_filter_db(&c->filter, db) && c->skip_left == 0) {
        char id[CDC_FILE_MAX + 48];
        snprintf(id, sizeof id, "%s:%" PRIu64 ":0", c->file, ev_pos);
        begin_envelope(c, id);
        /* ordered per database (the statement's default one), not with
         * the rows of its tables */
        c->env.key = cdc_ddl_key(db);
        envelope_strz(&c->env, "db", db);
        envelope_key(&c->env, "table");
        jbuf_null(&c->env.buf);
        envelope_strz(&c->env, "op", "ddl");
        envelope_str(&c->env, "statement", sql, n);
        finish_common(c, ev_pos, ev->timestamp);
        emit_current(c);
    }
    if (!c->in_txn || c->standalone) end_txn(c);
}

/* One event. Returns false when the stream must be reopened. */
static void handle_event(struct cdc *c, MARIADB_RPL_EVENT *ev)
{
    const unsigned char *raw = ev->raw_data ? ev->raw_data + ev->raw_data_ofs : NULL;
    size_t ev_len = ev->raw_data ? ev->raw_data_size - ev->raw_data_ofs : 0;
    size_t crc = c->server_crc ? 4 : 0;
    const unsigned char *body = raw ? raw + HEADER_LEN : NULL;
    size_t body_len = ev_len >= HEADER_LEN + crc ? ev_len - HEADER_LEN - crc : 0;
    uint64_t next = ev->next_event_pos;
    uint64_t ev_pos = next >= ev_len ? next - ev_len : c->pos;
    c->events++;

    switch ((int)ev->event_type) {
    case ROTATE_EVENT: {
        if (body_len < 8) break;
        uint64_t p = 0;
        for (int i = 7; i >= 0; i--) p = (p << 8) | body[i];
        size_t fl = body_len - 8;
        if (fl >= sizeof c->file) fl = sizeof c->file - 1;
        memcpy(c->file, body + 8, fl);
        c->file[fl] = '\0';
        c->pos = p;
        /* streaming by GTID, the first rotation names the file the server
         * starts scanning, not where the GTID position is: no boundary
         * until a transaction ends */
        if (!c->in_txn && !c->by_gtid) {
            snprintf(c->resume_file, sizeof c->resume_file, "%s", c->file);
            c->resume_pos = c->pos;
            c->resume_server = c->server_now;
            if (c->ckpt_on)
                cdc_progress_boundary(c->progress, c->file, c->pos, NULL, c->server_now);
        }
        log_debug(COMPONENT, c->h->name, "now at %s:%" PRIu64, c->file, c->pos);
        return;
    }
    case GTID_EVENT:
        snprintf(c->gtid, sizeof c->gtid, "%u-%u-%" PRIu64, ev->event.gtid.domain_id,
                 ev->server_id, (uint64_t)ev->event.gtid.sequence_nr);
        c->in_txn = true;
        c->standalone = (ev->event.gtid.flags & FL_STANDALONE) != 0;
        c->txn_gtid.domain = ev->event.gtid.domain_id;
        c->txn_gtid.server = ev->server_id;
        c->txn_gtid.seq = (uint64_t)ev->event.gtid.sequence_nr;
        c->txn_has_gtid = true;
        snprintf(c->txn_file, sizeof c->txn_file, "%s", c->file);
        c->txn_pos = ev_pos;
        c->txn_rows = 0;
        c->skip_left = 0;
        /* the transaction cut by the last disconnect, re-read: by position
         * on the same server, by GTID on another one */
        if (c->skip_rows &&
            ((c->skip_server == c->server_now && strcmp(c->skip_file, c->txn_file) == 0 &&
              c->skip_pos == ev_pos) ||
             (c->skip_gtid.seq && c->skip_gtid.seq == c->txn_gtid.seq &&
              c->skip_gtid.domain == c->txn_gtid.domain &&
              c->skip_gtid.server == c->txn_gtid.server))) {
            c->skip_left = c->skip_rows;
            c->skip_rows = 0;
        }
        break;
    case QUERY_EVENT:
        if (next) c->pos = next;
        handle_query(c, ev, ev_pos);
        return;
    case XID_EVENT:
        if (next) c->pos = next;
        end_txn(c);
        return;
    case TABLE_MAP_EVENT:
        if (body) handle_table_map(c, body, body_len);
        break;
    case WRITE_ROWS_EVENT_V1: case UPDATE_ROWS_EVENT_V1: case DELETE_ROWS_EVENT_V1:
    case WRITE_ROWS_EVENT: case UPDATE_ROWS_EVENT: case DELETE_ROWS_EVENT:
        if (body) handle_rows(c, (int)ev->event_type, body, body_len, ev_pos, ev->timestamp);
        break;
    case WRITE_ROWS_COMPRESSED_EVENT_V1: case UPDATE_ROWS_COMPRESSED_EVENT_V1:
    case DELETE_ROWS_COMPRESSED_EVENT_V1: case WRITE_ROWS_COMPRESSED_EVENT:
    case UPDATE_ROWS_COMPRESSED_EVENT: case DELETE_ROWS_COMPRESSED_EVENT:
        bad_event(c, "compressed rows event (log_bin_compress=ON) is not supported");
        break;
    case HEARTBEAT_LOG_EVENT:
    case FORMAT_DESCRIPTION_EVENT:
        return; /* positions of these are not stream positions to resume from */
    default:
        break;
    }
    if (next && !(ev->flags & LOG_EVENT_ARTIFICIAL_F)) c->pos = next;
}

/* ------------------------------------------------------------ session */

/* The supervisor's hooks (endpoints/source_loop.h): open connects (the
 * hosts in order), resolves the position and opens the binlog stream; run
 * streams until an error, stop or the end of the term, and says the source
 * is up at its first event; close frees the session. */

/* The read timeout of a session: a heartbeat is due every heartbeat_ms. */
static unsigned read_timeout_s(const struct cdc *c)
{
    unsigned rt = (unsigned)((c->s->heartbeat_ms * 4 + 999) / 1000);
    return rt < 2 ? 2 : rt;
}

static int loop_open(void *ep, char *err, size_t errlen)
{
    struct cdc *c = ep;
    const char *name = c->h->name;
    c->purged = false;
    if (conn_connect_any(c, &c->m, read_timeout_s(c), err, errlen)) return -1;
    MYSQL *m = c->m;
    if (!register_fd(c, 0, m)) {
        snprintf(err, errlen, "stopping");
        return -1;
    }
    if (c->h->set_source) c->h->set_source(c->h, c->where);

    char crc[32], sid[32];
    if (mysql_cdc_query_value(c, m, "SELECT @@global.binlog_checksum, @@global.server_id", 0, crc,
                              sizeof crc, sid, sizeof sid, err, errlen))
        return -1;
    c->server_crc = strcasecmp(crc, "NONE") != 0 && crc[0];
    c->server_now = (uint32_t)strtoul(sid, NULL, 10);
    char sql[CDC_GTID_MAX + 80];
    snprintf(sql, sizeof sql, "SET @master_heartbeat_period = %" PRId64, c->s->heartbeat_ms * 1000000);
    if (run_sql(c, m, "SET @master_binlog_checksum = @@global.binlog_checksum", err, errlen) ||
        run_sql(c, m, "SET @mariadb_slave_capability = 4", err, errlen) ||
        run_sql(c, m, sql, err, errlen))
        return -1;

    if (!c->have_pos) {
        if (mysql_cdc_find_start(c, m, err, errlen)) return -1;
        c->have_pos = true;
    }

    /* Another server than the one the resume point is on (a promoted
     * replica, the next of `hosts`): its binlog positions mean nothing
     * there; the GTID position does (MariaDB GTIDs are kept by replication,
     * with log_slave_updates). */
    c->by_gtid = c->resume_server != 0 && c->resume_server != c->server_now;
    if (c->by_gtid) {
        char gt[CDC_GTID_MAX] = "";
        if (!c->rstate_known || cdc_gtid_format(gt, sizeof gt, c->rstate, c->nrstate) < 0) {
            snprintf(err, errlen, "mysql %s is server_id %" PRIu32 ", the resume point %s:%" PRIu64
                     " is on server_id %" PRIu32 " and its GTID position is not known: cannot "
                     "resume on this server (is it the right one? a checkpoint from an older "
                     "baton holds no GTID position)",
                     c->where, c->server_now, c->resume_file, c->resume_pos, c->resume_server);
            return -1;
        }
        char eg[2 * CDC_GTID_MAX + 1];
        mysql_real_escape_string(m, eg, gt, (unsigned long)strlen(gt));
        char setq[2 * CDC_GTID_MAX + 64];
        snprintf(setq, sizeof setq, "SET @slave_connect_state = '%s'", eg);
        if (run_sql(c, m, setq, err, errlen) ||
            run_sql(c, m, "SET @slave_gtid_strict_mode = 0", err, errlen) ||
            run_sql(c, m, "SET @slave_gtid_ignore_duplicates = 0", err, errlen))
            return -1;
        log_warn(COMPONENT, name, "mysql %s is server_id %" PRIu32 ", not server_id %" PRIu32
                 " where %s:%" PRIu64 " was read (a switchover?): resuming by GTID position \"%s\"",
                 c->where, c->server_now, c->resume_server, c->resume_file, c->resume_pos, gt);
    }
    MARIADB_RPL *rpl = mariadb_rpl_init(m);
    if (!rpl) {
        snprintf(err, errlen, "mariadb_rpl_init: %s", mysql_error(m));
        return -1;
    }
    c->rpl = rpl;
    snprintf(c->file, sizeof c->file, "%s", c->by_gtid ? "" : c->resume_file);
    c->pos = c->by_gtid ? 4 : c->resume_pos;
    c->in_txn = false;
    c->standalone = false;
    c->txn_has_gtid = false;
    mariadb_rpl_optionsv(rpl, MARIADB_RPL_SERVER_ID, (unsigned)c->s->server_id);
    mariadb_rpl_optionsv(rpl, MARIADB_RPL_FILENAME, c->file, strlen(c->file));
    mariadb_rpl_optionsv(rpl, MARIADB_RPL_START, (unsigned long)c->pos);
    mariadb_rpl_optionsv(rpl, MARIADB_RPL_FLAGS, 0u);
    if (mariadb_rpl_open(rpl)) {
        snprintf(err, errlen, "mysql %s: binlog dump from %s:%" PRIu64 ": %s (error %u)", c->where,
                 c->by_gtid ? "GTID position" : c->file, c->pos, mysql_error(m), mysql_errno(m));
        return -1;
    }
    return 0;
}

static enum source_end loop_run(void *ep, struct source_loop *l, char *err, size_t errlen)
{
    struct cdc *c = ep;
    MYSQL *m = c->m;
    enum source_end rc = SOURCE_LOST;
    MARIADB_RPL_EVENT *ev = NULL;
    for (;;) {
        ev = mariadb_rpl_fetch(c->rpl, ev);
        if (source_loop_stopping(l)) {
            rc = SOURCE_STOPPED;
            break;
        }
        if (!ev) {
            unsigned en = mysql_errno(m);
            const char *em = mysql_error(m);
            if (c->by_gtid && en == 1236) {
                snprintf(err, errlen, "mysql %s: cannot stream from the GTID position of %s:%"
                         PRIu64 " (server_id %" PRIu32 "): %s (error %u)", c->where,
                         c->resume_file, c->resume_pos, c->resume_server, em, en);
            } else if (mysql_cdc_is_purged_error(en, em)) {
                snprintf(err, errlen, "mysql %s: position %s:%" PRIu64 " is no longer on the "
                         "server (binlog purged?): %s (error %u)", c->where, c->file, c->pos, em, en);
                c->purged = true;
            } else {
                snprintf(err, errlen, "mysql %s: binlog stream at %s:%" PRIu64 ": %s (error %u)",
                         c->where, c->file, c->pos, em[0] ? em : "stream ended", en);
            }
            break;
        }
        source_loop_up(l); /* once per session: at its first event */
        handle_event(c, ev);
        flush_deferred(c); /* before the checkpoint: it sees what was delivered inline */
        maybe_checkpoint(c, false);
        if (c->term_ended) {
            snprintf(err, errlen, "the term ended (backlog behind an undelivered row)");
            rc = SOURCE_TERM_ENDED;
            break;
        }
    }
    flush_deferred(c); /* whatever ended the stream, nothing stays unannounced */
    if (ev) mariadb_free_rpl_event(ev);
    return rc;
}

static void loop_up(void *ep, bool first, int64_t down_ms)
{
    struct cdc *c = ep;
    if (first)
        log_info(COMPONENT, c->h->name, "streaming the binlog of %s from %s:%" PRIu64
                 " as server_id %" PRId64 " (epoch %" PRIu64 ")", c->where, c->file, c->pos,
                 c->s->server_id, c->epoch);
    else
        log_info(COMPONENT, c->h->name, "streaming the binlog of %s again from %s:%" PRIu64
                 " after %" PRId64 " ms", c->where, c->file, c->pos, down_ms);
}

static void loop_close(void *ep)
{
    struct cdc *c = ep;
    struct endpoint_host *h = c->h;
    if (c->rpl) mariadb_rpl_close(c->rpl);
    c->rpl = NULL;
    /* a transaction cut in the middle is re-read from its start; rows
     * already forwarded are skipped on the way */
    if (c->in_txn && c->txn_rows > 0) {
        snprintf(c->skip_file, sizeof c->skip_file, "%s", c->txn_file);
        c->skip_pos = c->txn_pos;
        c->skip_server = c->server_now;
        c->skip_gtid = c->txn_has_gtid ? c->txn_gtid : (struct cdc_gtid){0, 0, 0};
        c->skip_rows = c->txn_rows;
    }
    c->in_txn = false;
    c->txn_has_gtid = false;
    if (c->m) close_conn(c, 0, &c->m);
    c->m = NULL;
    close_conn(c, 1, &c->meta);
    if (h->set_source) h->set_source(h, "");
}

/* After a failed or broken session: where the next one starts, and what a
 * purged position means (on_purged). */
static bool loop_failed(void *ep, bool was_up, char *err, size_t errlen)
{
    struct cdc *c = ep;
    const char *name = c->h->name;
    /* the next attempt starts at the first host after one that streamed
     * (the preferred server first), at the next one after a server that
     * was reached but could not stream (e.g. lacks the GTID position) */
    c->host_next = was_up || c->nhosts == 0 ? 0 : (c->host_cur + 1) % c->nhosts;
    if (c->purged && c->s->on_purged == PURGED_OLDEST) {
        char e2[512], oldf[CDC_FILE_MAX];
        uint64_t oldp = c->resume_pos;
        snprintf(oldf, sizeof oldf, "%s", c->resume_file);
        MYSQL *m2 = conn_new(c, read_timeout_s(c));
        bool moved = false;
        if (m2 && conn_connect(c, m2, e2, sizeof e2) == 0 && register_fd(c, 0, m2) &&
            mysql_cdc_resolve_start(c, m2, "oldest", e2, sizeof e2) == 0) {
            log_error(COMPONENT, name, "%s; on_purged = oldest: restarting from %s:%" PRIu64
                      " (the events between %s:%" PRIu64 " and it are LOST)", err, c->file,
                      c->pos, oldf, oldp);
            snprintf(c->resume_file, sizeof c->resume_file, "%s", c->file);
            c->resume_pos = c->pos;
            c->resume_server = c->server_now;
            c->rstate_known = false; /* the gap: what GTID position is that? asked below */
            char gt[CDC_GTID_MAX];
            if (mysql_cdc_gtid_at(c, m2, c->file, c->pos, gt, sizeof gt, e2, sizeof e2) == 1) {
                struct cdc_ckpt ck = {.server_id = c->server_now, .gtid_known = true};
                snprintf(ck.file, sizeof ck.file, "%s", c->file);
                ck.pos = c->pos;
                snprintf(ck.gtid, sizeof ck.gtid, "%s", gt);
                mysql_cdc_set_resume(c, &ck);
            }
            c->skip_rows = 0;
            if (c->ckpt_on)
                cdc_progress_boundary(c->progress, c->file, c->pos, NULL, c->server_now);
            moved = true;
        }
        if (m2) close_conn(c, 0, &m2);
        if (moved) return true; /* open again at once */
    } else if (c->purged) {
        size_t n = strlen(err);
        snprintf(err + n, errlen - n,
                 "; on_purged = fail: fix the position (set start and delete the checkpoint "
                 "key %.200s%s%.200s) or set on_purged = oldest",
                 c->ckpt_on ? c->ckpt_key : "(none)", c->legacy_on ? " and the legacy key " : "",
                 c->legacy_on ? c->legacy_key : "");
    }
    return false;
}

static void loop_resume_point(void *ep, char *buf, size_t len)
{
    const struct cdc *c = ep;
    snprintf(buf, len, "%s:%" PRIu64, c->resume_file, c->resume_pos);
}

static void loop_finish(void *ep)
{
    maybe_checkpoint(ep, true); /* what the sink accepted so far */
}

static const struct source_loop_ops cdc_loop_ops = {
    .open = loop_open,
    .run = loop_run,
    .close = loop_close,
    .up = loop_up,
    .failed = loop_failed,
    .resume_point = loop_resume_point,
    .finish = loop_finish,
};

/* ------------------------------------------------------------ lifecycle */

static void cdc_destroy(void *ep);

static void *cdc_create(const void *settings, struct endpoint_host *host, char *err, size_t errlen)
{
    const struct cdc_settings *s = settings;
    char msg[512];
    if (cdc_validate(s, host->guard, true, msg, sizeof msg)) {
        snprintf(err, errlen, "endpoint '%s': %s", host->name, msg);
        return NULL;
    }
    struct cdc *c = xcalloc(1, sizeof *c);
    c->s = s;
    c->h = host;
    c->fds[0] = c->fds[1] = -1;
    pthread_mutex_init(&c->lock, NULL);
    source_loop_init(&c->loop, &cdc_loop_ops, c, host, COMPONENT, "cdc", s->reconnect_min_ms,
                     s->reconnect_max_ms);
    c->loop.up_in_run = true; /* up at the first binlog event */
    pthread_mutex_init(&c->cache_mu, NULL);
    envelope_init(&c->env);
    jbuf_init(&c->ev_head, 256);
    jbuf_init(&c->ev_tail, 256);
    c->progress = cdc_progress_create();
    if (parse_hosts(s, &c->hosts, &c->nhosts, msg, sizeof msg)) {
        snprintf(err, errlen, "endpoint '%s': %s", host->name, msg);
        cdc_destroy(c);
        return NULL;
    }
    net_host_format(&c->hosts[0], c->where, sizeof c->where);
    if (cdc_filter_init(&c->filter, &s->tables, &s->exclude_tables, &s->ops, msg, sizeof msg)) {
        snprintf(err, errlen, "endpoint '%s': %s", host->name, msg);
        cdc_destroy(c);
        return NULL;
    }
    if (secret_resolve(s->password_env, s->password_file, &c->password, msg, sizeof msg)) {
        snprintf(err, errlen, "endpoint '%s': password: %s", host->name, msg);
        cdc_destroy(c);
        return NULL;
    }
    c->guarded = host->guard == GUARD_ACTIVE;
    /* The checkpoint lives in the locker beside the lease, fenced by its
     * epoch: it needs a locker that keeps shared state and guard "active"
     * (cdc_validate refuses an explicit checkpoint with any other guard). */
    bool shared = baton_locker_has_shared_state(host->locker);
    if (s->checkpoint == CKPT_LOCKER || s->checkpoint == CKPT_REDIS) {
        const char *why = !host->locker ? "there is no locker in the main configuration"
                        : !shared       ? "this locker backend keeps no shared state"
                        : !host->lease_key ? "the endpoint holds no lease"
                                           : NULL;
        if (why) {
            snprintf(err, errlen, "endpoint '%s': checkpoint = \"%s\" keeps the checkpoint in the "
                     "locker, but %s (set checkpoint = \"none\")", host->name,
                     ckpt_choices[s->checkpoint], why);
            cdc_destroy(c);
            return NULL;
        }
        c->ckpt_on = true;
    } else if (s->checkpoint == CKPT_AUTO && host->locker) {
        c->ckpt_on = shared && c->guarded && host->lease_key != NULL;
        if (!shared)
            log_warn(COMPONENT, host->name, "checkpoint off (checkpoint = \"auto\"): the %s "
                     "locker keeps no shared state; a restart starts at start = \"%s\"",
                     baton_locker_backend(host->locker), s->start);
        else if (!c->ckpt_on)
            log_warn(COMPONENT, host->name, "checkpoint off (checkpoint = \"auto\"): its writes "
                     "are fenced by the lease epoch and guard \"%s\" holds no lease; a restart "
                     "starts at start = \"%s\"", guard_kind_name(host->guard), s->start);
    }
    host->source_redelivers = c->ckpt_on;
    if (c->ckpt_on) {
        int n = snprintf(c->ckpt_key, sizeof c->ckpt_key, "%s:" CDC_CHECKPOINT_NAME,
                         host->lease_key);
        if (n < 0 || (size_t)n >= sizeof c->ckpt_key) {
            snprintf(err, errlen, "endpoint '%s': checkpoint key too long", host->name);
            cdc_destroy(c);
            return NULL;
        }
        /* The legacy key exists only where an older baton wrote it: in the
         * Redis of a redis locker (and only if it was not too long). */
        c->legacy_on = host->locker_redis && strcmp(baton_locker_backend(host->locker), "redis") == 0 &&
                       baton_key(c->legacy_key, sizeof c->legacy_key, host->key_prefix, "cdc",
                                 host->scope, NULL) >= 0;
        if (pthread_create(&c->follower, NULL, follower_main, c) == 0) {
            c->follower_started = true;
            thread_name(c->follower, "cdcf", host->name);
        }
    }
    return c;
}

static int cdc_start(void *ep)
{
    struct cdc *c = ep;
    const char *name = c->h->name;
    if (source_loop_running(&c->loop)) {
        log_error(COMPONENT, name, "start called while already running");
        return -1;
    }
    c->epoch = c->h->epoch(c->h);
    c->have_pos = false;
    c->in_txn = false;
    c->skip_rows = c->skip_left = 0;
    c->gtid[0] = '\0';
    c->rows_since_ckpt = 0;
    c->last_ckpt_ms = clock_mono_ms();
    c->written = false;
    tables_clear(c);
    cdc_progress_reset(c->progress, NULL);
    c->term_ended = false;
    c->host_next = 0;
    c->txn_has_gtid = false;
    c->by_gtid = false;
    char err[1024];
    if (source_loop_start(&c->loop, err, sizeof err) < 0) {
        long long supp = 0;
        if (ratelimit_ok(&c->rl_start, 5000, &supp))
            log_error(COMPONENT, name, "cannot stream the binlog: %s (standby-eligible, retried on "
                      "the next promotion; %lld similar suppressed)", err, supp);
        return -1;
    }
    return 0;
}

static void cdc_stop(void *ep)
{
    struct cdc *c = ep;
    if (!source_loop_running(&c->loop)) return;
    source_loop_request_stop(&c->loop);
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < 2; i++)
        if (c->fds[i] >= 0) shutdown(c->fds[i], SHUT_RDWR); /* wakes mariadb_rpl_fetch */
    pthread_mutex_unlock(&c->lock);
    source_loop_join(&c->loop);
    log_info(COMPONENT, c->h->name, "stopped at %s:%" PRIu64 " after %" PRIu64 " row events",
             c->file, c->pos, c->rows_emitted);
}

static void cdc_destroy(void *ep)
{
    struct cdc *c = ep;
    if (!c) return;
    cdc_stop(c);
    if (c->follower_started) {
        atomic_store(&c->follower_stop, true);
        pthread_join(c->follower, NULL);
    }
    pthread_mutex_destroy(&c->cache_mu);
    tables_clear(c);
    cdc_filter_free(&c->filter);
    envelope_free(&c->env);
    jbuf_free(&c->ev_head);
    jbuf_free(&c->ev_tail);
    cdc_progress_destroy(c->progress);
    free(c->hosts);
    secret_free(c->password); /* wiped: memset before free may be optimised away */
    source_loop_destroy(&c->loop);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

const struct endpoint_ops ep_mysql_cdc_ops = {
    .type = "mysql_cdc",
    .settings = cdc_defs,
    .settings_size = sizeof(struct cdc_settings),
    .auto_guard = cdc_auto_guard,
    .validate = cdc_validate,
    .create = cdc_create,
    .start = cdc_start,
    .stop = cdc_stop,
    .destroy = cdc_destroy,
};
