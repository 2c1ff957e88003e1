/* Private to endpoints/mysql_cdc.c and endpoints/cdc_start.c (finding where
 * a term starts): the endpoint's settings and state, and what the two files
 * call of each other. */
#ifndef BATON_MYSQL_CDC_PRIVATE_H
#define BATON_MYSQL_CDC_PRIVATE_H

#include <mysql.h>
#include <mariadb_rpl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "endpoints/cdc_checkpoint.h"
#include "endpoints/cdc_decode.h"
#include "endpoints/cdc_filter.h"
#include "endpoints/endpoint.h"
#include "endpoints/source_loop.h"
#include "baton/scope.h"
#include "common/envelope.h"
#include "common/settings.h"
#include "common/util.h"

#define COMPONENT "mysql_cdc"

struct cdc_settings {
    char *host;
    int64_t port;
    struct strlist hosts;
    char *user;
    char *password_env;
    char *password_file;
    bool ssl;
    char *ssl_ca;
    char *ssl_capath;
    char *ssl_cert;
    char *ssl_key;
    bool ssl_verify;
    int64_t server_id;
    struct strlist tables;
    struct strlist exclude_tables;
    struct strlist ops;
    char *start;
    int checkpoint;
    int64_t checkpoint_every_events;
    int64_t checkpoint_every_ms;
    int64_t backlog_max_rows;
    int64_t backlog_max_ms;
    bool ddl;
    int on_purged;
    int64_t connect_timeout_ms;
    int64_t heartbeat_ms;
    int64_t reconnect_min_ms;
    int64_t reconnect_max_ms;
};

struct table_entry {
    struct cdc_table t;
    bool pass;       /* table filter result */
    bool used;
};

struct cdc {
    const struct cdc_settings *s;
    struct endpoint_host *h;
    char *password;
    struct cdc_filter filter;
    bool guarded;
    bool ckpt_on;
    struct net_host *hosts; /* tried in order (parse_hosts) */
    size_t nhosts;
    size_t host_next;       /* where the next connect starts */
    size_t host_cur;        /* the one connected (while connected) */
    char where[300];        /* "host:port" connected (or the first) */
    char ckpt_key[BATON_GUARD_KEY_MAX + 8]; /* "<lease key>:cdc", for messages */
    bool legacy_on;                   /* a redis locker: look at legacy_key too */
    char legacy_key[BATON_GUARD_KEY_MAX];   /* "<prefix>:cdc:<scope>", before the locker kept it */
    struct cdc_progress *progress;

    pthread_mutex_t lock; /* fds */
    int fds[2];           /* sockets to shut down on stop: binlog, metadata */
    struct source_loop loop; /* the consumer thread (endpoints/source_loop.h) */
    struct ratelimit rl_bad, rl_ckpt, rl_start;

    /* consumer thread state */
    uint64_t epoch;
    MYSQL *meta; /* information_schema connection, opened on demand */
    struct envelope env;
    struct jbuf ev_head;     /* ,"db":..,"table":..,"op":..,"before": of the rows event */
    struct jbuf ev_tail;     /* ,"gtid":..,"position":{..},"ts":.. of the rows event */
    bool have_pos;
    MYSQL *m;                /* the binlog connection of the session */
    MARIADB_RPL *rpl;        /* its stream */
    bool purged;             /* the session ended: position purged from the server */
    bool server_crc;
    char file[CDC_FILE_MAX]; /* current binlog file */
    uint64_t pos;            /* position after the last event read */
    char resume_file[CDC_FILE_MAX];
    uint64_t resume_pos;     /* last transaction boundary */
    uint32_t server_now;     /* @@server_id of the server connected */
    uint32_t resume_server;  /* ... of the server resume_file:pos is on (0 = unknown) */
    /* GTID position at the resume point (read side: what the next session
     * asks a different server for) */
    bool rstate_known;
    struct cdc_gtid rstate[CDC_GTID_DOMAINS];
    size_t nrstate;
    bool by_gtid;            /* this session streams by GTID: no own position until the
                                first transaction ends */
    struct cdc_gtid txn_gtid; /* of the transaction being read */
    bool txn_has_gtid;
    struct cdc_gtid skip_gtid; /* ... of the transaction to skip rows of */
    uint32_t skip_server;      /* the server skip_file:skip_pos is on */
    bool term_ended;         /* end_term called: stop reading */
    bool in_txn, standalone;
    char txn_file[CDC_FILE_MAX];
    uint64_t txn_pos;        /* where the current transaction's GTID event starts */
    uint64_t txn_rows;       /* rows emitted for it */
    char skip_file[CDC_FILE_MAX];
    uint64_t skip_pos, skip_rows, skip_left; /* replay suppression after a reconnect */
    char gtid[64];
    bool ts_valid;           /* ts_text holds ts_secs formatted */
    uint32_t ts_secs;
    char ts_text[32];
    struct table_entry *tables;
    size_t ntables;
    uint64_t rows_since_ckpt;
    int64_t last_ckpt_ms;
    bool written;            /* wrote `written` this term, at written_ms */
    struct cdc_ckpt written_ck;
    int64_t written_ms;
    uint64_t events, rows_emitted;
    size_t deferred; /* consumer thread: rows emitted since the last flush */

    /* Checkpoint cache: every replica (leader and standbys) follows the
     * checkpoint in the locker on its own thread and keeps the last one
     * seen, so if the locker loses its data (a Redis restart without
     * persistence) the next leader still resumes near where the last one
     * stopped instead of at `start`, which would skip the rows in between. */
    pthread_t follower;
    bool follower_started;
    atomic_bool follower_stop;
    pthread_mutex_t cache_mu;
    bool cache_valid;
    struct cdc_ckpt cache;
    int64_t cache_at_ms; /* monotonic ms when it was last seen or written */
};

/* endpoints/mysql_cdc.c */
int mysql_cdc_query_value(struct cdc *c, MYSQL *m, const char *sql, unsigned col, char *out,
                          size_t outlen, char *out2, size_t out2len, char *err, size_t errlen);
int mysql_cdc_write_checkpoint(struct cdc *c, const struct cdc_ckpt *ck);
int mysql_cdc_read_checkpoint(struct cdc *c, struct cdc_ckpt *ck, char *err, size_t errlen);

/* endpoints/cdc_start.c: where a term starts and what a session asks of it */
int mysql_cdc_resolve_start(struct cdc *c, MYSQL *m, const char *start, char *err, size_t errlen);
bool mysql_cdc_is_purged_error(unsigned errnum, const char *msg);
int mysql_cdc_gtid_at(struct cdc *c, MYSQL *m, const char *file, uint64_t pos, char *out,
                      size_t outlen, char *err, size_t errlen);
void mysql_cdc_set_resume(struct cdc *c, const struct cdc_ckpt *ck);
int mysql_cdc_find_start(struct cdc *c, MYSQL *m, char *err, size_t errlen);

#endif
