/* The settings every Redis connection baton makes shares beyond host/port:
 * Sentinel discovery (`sentinels`, `master_name`), TLS (`tls = { ... }`) and
 * the largest reply accepted (`max_reply_bytes`: the caller copies it into
 * struct baton_redis_opts, where 0 means its own default),
 * for the locker group of the main file and for redis_psub endpoint files
 * alike: one table, one check, one way into struct baton_redis_opts.
 *
 *   struct my_settings { ...; struct strlist sentinels; char *master_name;
 *                        struct redis_tls_settings tls; int64_t max_reply_bytes; };
 *   static const struct setting_def defs[] = { ..., REDIS_HA_TLS_DEFS(struct my_settings), ... };
 */
#ifndef BATON_REDIS_SETTINGS_H
#define BATON_REDIS_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "redis/io.h"
#include "common/settings.h"

/* max_reply_bytes at most 1 GiB */
#define REDIS_MAX_REPLY_BYTES_MAX ((int64_t)1 << 30)

struct redis_tls_settings {
    bool present; /* tls = { ... } given (SETTING_GROUP) */
    char *ca_file;
    char *cert_file;
    char *key_file;
    char *server_name;
};

extern const struct setting_def redis_tls_defs[];

#define REDIS_HA_TLS_DEFS(type)                                                                 \
    {"sentinels", SETTING_STRLIST, offsetof(type, sentinels),                                   \
     .help = "Redis Sentinel addresses \"host:port\", instead of host/port: the master of "     \
             "master_name is asked of them"},                                                   \
    {"master_name", SETTING_STRING, offsetof(type, master_name),                                \
     .help = "the master's name known to the sentinels"},                                       \
    {"tls", SETTING_GROUP, offsetof(type, tls), .sub = redis_tls_defs,                          \
     .help = "TLS: { ca_file; cert_file; key_file; server_name; } (an empty group: the "        \
             "system's CAs)"},                                                                \
    {"max_reply_bytes", SETTING_INT, offsetof(type, max_reply_bytes), .def = "0", .min = 0,     \
     .max = REDIS_MAX_REPLY_BYTES_MAX,                                                          \
     .help = "largest reply accepted, in bytes (a bulk string, or one whole reply); a bigger "  \
             "one closes the connection. 0 = the default: 1 MiB for the locker, 64 MiB for a "  \
             "source"}

/* host/port, db, ACL user, password (from an environment variable or a
 * file, never the config file) and the timeouts of a Redis connection, for
 * settings tables that embed it as a member (redis_psub, the redis_stream
 * sink; the locker's group in src/config.c still has its own):
 *
 *   struct my_settings { struct redis_conn_settings conn; ... };
 *   static const struct setting_def defs[] = { REDIS_CONN_DEFS(struct my_settings, conn), ... };
 */
struct redis_conn_settings {
    char *host;
    int64_t port;
    int64_t db;
    char *user;
    char *password_env;
    char *password_file;
    int64_t connect_timeout_ms;
    int64_t command_timeout_ms;
};

#define REDIS_CONN_DEFS(type, m)                                                                \
    {"host", SETTING_STRING, offsetof(type, m.host), .def = "127.0.0.1",                        \
     .help = "Redis host name or address"},                                                     \
    {"port", SETTING_INT, offsetof(type, m.port), .def = "6379", .min = 1, .max = 65535,        \
     .help = "Redis TCP port"},                                                                 \
    {"db", SETTING_INT, offsetof(type, m.db), .def = "0", .min = 0, .max = 1000000,             \
     .help = "Redis database number to SELECT"},                                                \
    {"user", SETTING_STRING, offsetof(type, m.user), .help = "Redis ACL user"},                 \
    {"password_env", SETTING_STRING, offsetof(type, m.password_env),                            \
     .help = "name of the environment variable holding the Redis password"},                    \
    {"password_file", SETTING_STRING, offsetof(type, m.password_file),                          \
     .help = "file whose first line is the Redis password"},                                    \
    {"connect_timeout_ms", SETTING_INT, offsetof(type, m.connect_timeout_ms), .def = "1000",    \
     .min = 1, .max = 600000, .help = "TCP connect timeout in ms"},                                   \
    {"command_timeout_ms", SETTING_INT, offsetof(type, m.command_timeout_ms), .def = "1000",    \
     .min = 1, .max = 600000,                                                                   \
     .help = "timeout in ms of each request: AUTH, SELECT, a command, a subscription's "   \
             "confirmation"}

/* 0, or -1 with msg naming the setting first ("'password_file' ..."):
 * host not empty, not both password_env and password_file, the password
 * resolvable (so --check-config reports an unset variable or an unreadable
 * file). */
int redis_conn_settings_validate(const struct redis_conn_settings *s, char *msg, size_t msglen);
/* Fills o's host, port, db, user, password (resolved) and timeouts; 0, or -1
 * with msg when the password cannot be read. o owns its copies. */
int redis_conn_settings_apply(struct baton_redis_opts *o, const struct redis_conn_settings *s,
                              char *msg, size_t msglen);

/* Checks group's sentinels / master_name / tls (after settings_parse):
 * both or neither of sentinels and master_name, no host/port beside
 * sentinels, "host:port" entries, cert_file with key_file, the files
 * readable. Relative file names are resolved against base_dir (NULL: as
 * given) and rewritten in tls. 0, or -1 with err at the offending line. */
int redis_settings_check(const config_setting_t *group, const struct strlist *sentinels,
                         const char *master_name, struct redis_tls_settings *tls,
                         const char *base_dir, const char *what, struct config_error *err);

/* Copies sentinels, master_name and tls into o (which owns its copies; see
 * redis_opts_clear). */
void redis_settings_apply(struct baton_redis_opts *o, const struct strlist *sentinels,
                          const char *master_name, const struct redis_tls_settings *tls);

#endif
