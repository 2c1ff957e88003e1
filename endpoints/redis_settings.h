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
