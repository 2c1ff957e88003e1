/* Configuration loading: the main file (libconfig) plus one file per endpoint
 * in endpoints_dir (*.cfg, name order). Every error names file and line.
 * Every file must be a regular file (or a symlink to one) of at most
 * CONFIG_FILE_MAX_BYTES; anything else is refused before it is read. */
#ifndef BATON_CONFIG_H
#define BATON_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "baton/etcd.h"
#include "baton/pg.h"
#include "baton/redis.h"
#include "endpoints/endpoint.h"
#include "common/log.h"
#include "common/settings.h"
#include "src/queue.h"
#include "src/sink.h"

struct lease_config {
    int64_t ttl_ms;          /* default 3000 */
    int64_t renew_ms;        /* default ttl / 3 */
    int64_t retry_ms;        /* default 250 */
    int64_t balance_step_ms; /* leader balancing step, default retry / 2 (issue 8) */
};

/* Warm standby replay (failover = "replay"). */
enum failover_mode { FAILOVER_GAP = 0, FAILOVER_REPLAY = 1 };
struct replay_config {
    int64_t window_ms;        /* default 2 x lease ttl + 1000 */
    int64_t max_bytes;        /* default 16 MiB */
    int64_t mark_interval_ms; /* default 50 */
    int64_t takeover_ms;      /* derived: lease ttl + retry, the longest
                                 crash takeover the ring must cover */
};

struct sink_config {
    char *name;
    char *type;
    const struct sink_ops *ops;
    void *settings; /* filled from ops->settings */
    char *file;
    int line;
    char *dead_letter; /* the sink's dead_letter setting (a sink name); NULL = none */
    bool invalid;      /* loading only: its errors are reported; endpoints naming it say nothing more */
};

/* Delivery order of an endpoint's messages at a sink with requests in
 * flight together (http max_in_flight): key = one message per ordering key
 * in flight, in receive order (message.key); strict = one request at a time;
 * none = any order. */
enum ordering { ORDERING_KEY = 0, ORDERING_NONE, ORDERING_STRICT };

struct endpoint_config {
    char *name;
    char *type;
    char *file;                     /* the endpoint's own file */
    const struct endpoint_ops *ops;
    void *settings;                 /* filled from ops->settings */
    char *sink_name;
    const struct sink_config *sink; /* points into baton_config.sinks */
    /* Where a message the sink cannot deliver goes (the endpoint's
     * dead_letter, else its sink's); NULL = dropped and counted. */
    const struct sink_config *dead_letter;
    bool enabled;
    enum guard_kind guard;          /* resolved: never GUARD_AUTO */
    bool force_guard;
    int64_t queue_size;             /* default 10000 */
    enum queue_policy queue_policy; /* default block */
    int64_t queue_batch_max;        /* messages taken from the queue per sink send,
                                       default 256 (formerly batch_max) */
    enum ordering ordering;         /* delivery order (default key) */
    struct lease_config lease;      /* main lease, overridden by lease_*_ms keys */
    int64_t once_ttl_ms;            /* OnceGuard ttl, default 3600000 */
    bool once_fail_open;            /* default false */
    enum failover_mode failover;    /* default gap */
    struct replay_config replay;    /* failover = replay only */
};

struct baton_config {
    char *path;           /* main file as given */
    char *owner;          /* NULL when absent */
    bool has_locker;      /* false: single-process mode */
    enum locker_backend {
        LOCKER_BACKEND_REDIS = 0,
        LOCKER_BACKEND_ETCD,
        LOCKER_BACKEND_PG
    } locker_backend;
    struct baton_redis_opts locker_redis; /* backend redis */
    struct baton_etcd_opts locker_etcd;   /* backend etcd */
    struct baton_pg_opts locker_pg;       /* backend postgresql */
    /* command_timeout_ms was given; otherwise its default (1000) is lowered
     * to fit the shortest lease (ttl - margin - renew, at least 50 ms). */
    bool locker_command_timeout_set;
    char *key_prefix;     /* default "baton" */
    bool locker_hash_tag; /* lease keys "<prefix>:active:{<scope>}" (Redis Cluster) */
    struct lease_config lease;
    struct sink_config *sinks;
    size_t n_sinks;
    bool sinks_incomplete; /* loading only: a bad sink without a name (or a bad sinks list) */
    struct endpoint_config *endpoints; /* sorted by file name */
    size_t n_endpoints;
    char *metrics_listen; /* "127.0.0.1:9464"; NULL = no listener */
    enum log_level log_level;
    enum log_format log_format; /* default text */
    char *endpoints_dir;  /* resolved path */
    int64_t drain_timeout_ms; /* shutdown drain bound, default 5000 */
    char *admin_token;    /* admin.token_file's token (secret_free); NULL = control from loopback only */
    int64_t priority;        /* preferred leader: higher wins after prefer_after_ms as a standby; default 0 */
    int64_t prefer_after_ms; /* default 10000 */
};

/* Size cap of every configuration file (main and endpoint files), checked
 * before libconfig parses it: its parser is quadratic in the number of keys,
 * so a huge file would stall --check-config and start-up for minutes. */
#define CONFIG_FILE_MAX_BYTES (1024 * 1024)

/* Exit statuses (documented in the README). */
enum baton_exit {
    BATON_EXIT_OK = 0,
    BATON_EXIT_USAGE = 64,    /* bad command line (EX_USAGE) */
    BATON_EXIT_CONFIG = 78,   /* invalid configuration (EX_CONFIG) */
    BATON_EXIT_RUNTIME = 70,  /* internal failure at run time (EX_SOFTWARE) */
    BATON_EXIT_START = 69,    /* could not start (EX_UNAVAILABLE) */
};

/* Loads and validates everything (including endpoint files, sinks, secrets),
 * going on after an error wherever what follows does not rest on it: each
 * group of the main file, each sink, each endpoint file, each key of a
 * group (a syntax error stops its own file only; what depends on a part
 * that failed, such as an endpoint's sink, is not reported again). Returns
 * 0, or -1 with every error in errors (file, line, message, in the order
 * found; free with config_errors_free). out must be zeroed; call
 * config_free either way. */
int config_load_all(const char *path, struct baton_config *out, struct config_errors *errors);
/* Prints each error as "file:line: message", one a line (URLs redacted). */
void config_errors_print(const struct config_errors *errors, FILE *f);
/* config_load_all for the command line: one error is returned in err (file,
 * line, message) and nothing is printed; several are printed to stderr (as
 * config_errors_print) and err says how many ("3 errors in the
 * configuration ...", no file), the line the caller prints after them.
 * Returns 0 or -1. out must be zeroed; call config_free either way. */
int config_load(const char *path, struct baton_config *out, struct config_error *err);
void config_free(struct baton_config *c);

/* The locker backend's name: "redis", "etcd", or "none" (no locker). */
const char *config_locker_backend(const struct baton_config *c);
/* "redis 127.0.0.1:6379", "etcd http://a:2379,http://b:2379" or "none". */
void config_locker_describe(const struct baton_config *c, char *buf, size_t len);
/* The backend's command timeout (0 without a locker). */
int64_t config_locker_command_timeout(const struct baton_config *c);
/* The configured backend's locker (has_locker only); NULL with err naming it. */
struct baton_locker;
struct baton_locker *config_locker_create(const struct baton_config *c, char *err, size_t errlen);

#endif
