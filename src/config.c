/* Configuration loader: the main file plus one file per endpoint in
 * endpoints_dir (*.cfg, loaded in byte order of the file names). Every value
 * goes through a settings table (common/settings.h), so defaults, checks
 * and messages come from one place; every error names file and line. */
#include "src/config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "baton/active_guard.h"
#include "baton/locker.h"
#include "base/pq_dl.h"
#include "endpoints/redis_settings.h"
#include "redis/io.h" /* redis_opts_clear: the Redis connection unit */
#include "common/redact.h"
#include "common/util.h"
#include "src/config_test.h"

/* ---- registries (replaceable by unit tests) ---- */

static const struct endpoint_ops *const *test_endpoints;
static const struct sink_ops *const *test_sinks;

void config_test_set_registries(const struct endpoint_ops *const *endpoints,
                                const struct sink_ops *const *sinks)
{
    test_endpoints = endpoints;
    test_sinks = sinks;
}

static const struct endpoint_ops *const *endpoint_types(void)
{
    return test_endpoints ? test_endpoints : endpoint_registry;
}

static const struct sink_ops *const *sink_types(void)
{
    return test_sinks ? test_sinks : sink_registry;
}

static const struct endpoint_ops *find_endpoint_type(const char *type)
{
    if (!test_endpoints) return endpoint_lookup(type);
    for (size_t i = 0; test_endpoints[i]; i++)
        if (strcmp(test_endpoints[i]->type, type) == 0) return test_endpoints[i];
    return NULL;
}

static const struct sink_ops *find_sink_type(const char *type)
{
    if (!test_sinks) return sink_lookup(type);
    for (size_t i = 0; test_sinks[i]; i++)
        if (strcmp(test_sinks[i]->type, type) == 0) return test_sinks[i];
    return NULL;
}

/* Joins names into buf: "a, b, c" (or "(none)"). */
static void join_names(char *buf, size_t len, size_t n, const char *(*get)(size_t i, const void *ctx),
                       const void *ctx)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        int w = snprintf(buf + used, len - used, "%s%s", i ? ", " : "", get(i, ctx));
        if (w < 0 || (size_t)w >= len - used) {
            if (len >= 4) memcpy(buf + len - 4, "...", 4);
            return;
        }
        used += (size_t)w;
    }
    if (n == 0) snprintf(buf, len, "(none)");
}

static const char *endpoint_type_at(size_t i, const void *ctx)
{
    return ((const struct endpoint_ops *const *)ctx)[i]->type;
}

static const char *sink_type_at(size_t i, const void *ctx)
{
    return ((const struct sink_ops *const *)ctx)[i]->type;
}

static const char *sink_name_at(size_t i, const void *ctx)
{
    return ((const struct baton_config *)ctx)->sinks[i].name;
}

static void known_endpoint_types(char *buf, size_t len)
{
    const struct endpoint_ops *const *r = endpoint_types();
    size_t n = 0;
    while (r[n]) n++;
    join_names(buf, len, n, endpoint_type_at, r);
}

static void known_sink_types(char *buf, size_t len)
{
    const struct sink_ops *const *r = sink_types();
    size_t n = 0;
    while (r[n]) n++;
    join_names(buf, len, n, sink_type_at, r);
}

/* ---- small helpers ---- */

static int line_of(const config_setting_t *s)
{
    int l = s ? config_setting_source_line(s) : 0;
    return l > 0 ? l : 1;
}

/* The setting a validation message is about: a message that begins with a
 * key of the group ("cron: ...", "topics[2]: ...", "'bind_headers' entry
 * ...", "guard \"none\" ...") is reported at that key's line. NULL when the
 * message names none. */
static const config_setting_t *setting_named_by(const config_setting_t *group, const char *msg)
{
    if (*msg == '\'') msg++;
    size_t n = 0;
    while ((msg[n] >= 'a' && msg[n] <= 'z') || (msg[n] >= 'A' && msg[n] <= 'Z') || msg[n] == '_' ||
           (n > 0 && msg[n] >= '0' && msg[n] <= '9'))
        n++;
    if (n == 0 || n >= 64) return NULL;
    char key[64];
    memcpy(key, msg, n);
    key[n] = '\0';
    return config_setting_get_member(group, key);
}

/* Names of a settings table as a NULL-terminated array (for also_allowed),
 * older names included (setting_def.old_name), plus extra (a group key
 * parsed separately) when not NULL. */
static const char **def_names_with(const struct setting_def *defs, const char *extra)
{
    size_t n = 0, k = 0;
    while (defs && defs[n].name) n++;
    const char **v = xcalloc(2 * n + 2, sizeof *v);
    for (size_t i = 0; i < n; i++) {
        v[k++] = defs[i].name;
        if (defs[i].old_name) v[k++] = defs[i].old_name;
    }
    v[k] = extra;
    return v;
}

static const char **def_names(const struct setting_def *defs)
{
    return def_names_with(defs, NULL);
}

/* Names used in lock keys, scopes, headers and metric labels. */
static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-' || c == '.'))
            return false;
    }
    return true;
}

#define NAME_RULE "1 to 128 characters out of letters, digits, '_', '-', '.'"

/* "dir/rel" unless rel is absolute. */
static char *path_join(const char *dir, const char *rel)
{
    if (rel[0] == '/') return xstrdup(rel);
    size_t n = strlen(dir) + strlen(rel) + 2;
    char *p = xmalloc(n);
    snprintf(p, n, "%s/%s", dir, rel);
    return p;
}

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return xstrdup(".");
    if (slash == path) return xstrdup("/");
    char *d = xmalloc((size_t)(slash - path) + 1);
    memcpy(d, path, (size_t)(slash - path));
    d[slash - path] = '\0';
    return d;
}

/* What a non-regular file is, for messages ("a FIFO"); NULL: none of these. */
static const char *file_kind(mode_t mode)
{
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISDIR(mode)) return "a directory";
    return NULL;
}

/* Refuses what libconfig must not be given: anything but a regular file (a
 * FIFO or a character device would block --check-config forever; symlinks
 * to regular files are followed) and files over CONFIG_FILE_MAX_BYTES
 * (libconfig's parser is quadratic in the number of keys: 50,000 keys take
 * 41 s to reject). The type is checked with stat before anything is opened
 * (opening a device can have side effects); a regular file is then opened
 * non-blocking and checked again on the descriptor, so a swap between the
 * two is caught too. Nothing is read here. libconfig 1.5 then opens the path
 * again (config_read_file: the only call that keeps the file name every
 * error message needs), so a file replaced by a FIFO in that window could
 * still block; that takes someone racing the check on purpose. Files pulled
 * in with @include are checked the same way before libconfig opens them
 * (check_includes). */
static int check_input_file(const char *path, struct config_error *err)
{
    struct stat st, lst;
    if (stat(path, &st) != 0) {
        config_error_set(err, path, 0, "cannot read file: %s", strerror(errno));
        return -1;
    }
    bool via_link = lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode);
    int fd = -1;
    if (S_ISREG(st.st_mode)) {
        fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) {
            config_error_set(err, path, 0, "cannot read file: %s", strerror(errno));
            return -1;
        }
        if (fstat(fd, &st) != 0) {
            config_error_set(err, path, 0, "cannot read file: %s", strerror(errno));
            close(fd);
            return -1;
        }
        close(fd);
    }
    if (!S_ISREG(st.st_mode)) {
        const char *kind = file_kind(st.st_mode);
        if (kind)
            config_error_set(err, path, 0, "cannot read file: it is %s%s, not a regular file",
                             via_link ? "a symbolic link to " : "", kind);
        else
            config_error_set(err, path, 0, "cannot read file: it is %snot a regular file (mode %#o)",
                             via_link ? "a symbolic link to something " : "", (unsigned)st.st_mode);
        return -1;
    }
    if (st.st_size > CONFIG_FILE_MAX_BYTES) {
        double mib = (double)st.st_size / (1024.0 * 1024.0);
        config_error_set(err, path, 0,
                         "cannot read file: it is %.1f MiB (%lld bytes); configuration files are "
                         "limited to %d MiB (%d bytes)",
                         mib, (long long)st.st_size, CONFIG_FILE_MAX_BYTES / (1024 * 1024),
                         CONFIG_FILE_MAX_BYTES);
        return -1;
    }
    return 0;
}

/* libconfig's own limit on @include nesting. */
#define INCLUDE_DEPTH_MAX 10

/* The file name of an @include line (libconfig 1.5's scanner: the line
 * starts with optional blanks, "@include", blanks and a quoted name with \\
 * and \" escapes). NULL when line is no @include; *bad set when it is one
 * whose name is unterminated (libconfig reports that itself). */
static char *include_name(const char *line, size_t n, bool *bad)
{
    size_t i = 0;
    *bad = false;
    while (i < n && (line[i] == ' ' || line[i] == '\t')) i++;
    if (n - i < 8 || memcmp(line + i, "@include", 8) != 0) return NULL;
    i += 8;
    size_t blanks = i;
    while (i < n && (line[i] == ' ' || line[i] == '\t')) i++;
    if (i == blanks || i >= n || line[i] != '"') return NULL;
    i++;
    char *name = xmalloc(n - i + 1);
    size_t k = 0;
    for (; i < n && line[i] != '"'; i++) {
        if (line[i] == '\\' && i + 1 < n && (line[i + 1] == '\\' || line[i + 1] == '"')) i++;
        name[k++] = line[i];
    }
    name[k] = '\0';
    if (i >= n) {
        *bad = true;
        free(name);
        return NULL;
    }
    return name;
}

/* Checks every file path @includes (recursively, relative to include_dir as
 * libconfig resolves them) as check_input_file checks the main file: a
 * directory, FIFO or device given to libconfig 1.5 ends the process from
 * inside its scanner ("input in flex scanner failed", exit 2) or blocks. An
 * error names the including file and the line of the @include. A file that
 * does not exist is left to libconfig, which reports it with file and line
 * ("cannot open include file"). path itself passed check_input_file. */
static int check_includes(const char *path, const char *include_dir, int depth, struct config_error *err)
{
    if (depth >= INCLUDE_DEPTH_MAX) return 0; /* libconfig refuses deeper nesting itself */
    FILE *f = fopen(path, "r");
    if (!f) return 0; /* libconfig says why */
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int lineno = 0, rc = 0;
    while (rc == 0 && (n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        bool bad;
        char *name = include_name(line, (size_t)n, &bad);
        if (!name) continue;
        char *inc = include_dir && name[0] != '/' ? path_join(include_dir, name) : xstrdup(name);
        struct stat st;
        if (stat(inc, &st) == 0) {
            struct config_error why = { 0 };
            if (check_input_file(inc, &why) != 0) {
                config_error_set(err, path, lineno, "@include \"%s\": %s: %s", name, inc, why.msg);
                rc = -1;
            } else {
                rc = check_includes(inc, include_dir, depth + 1, err);
            }
        }
        free(inc);
        free(name);
    }
    free(line);
    fclose(f);
    return rc;
}

/* Reads one libconfig file; errors name the file (unreadable, not a regular
 * file, too large: line 0) or file and line (syntax, an @include of
 * something that is not a regular file). */
static int read_file(config_t *cf, const char *path, struct config_error *err)
{
    if (check_input_file(path, err)) return -1;
    char *dir = dir_of(path);
    config_set_include_dir(cf, dir);
    int inc = check_includes(path, dir, 0, err);
    free(dir);
    if (inc) return -1;
    if (config_read_file(cf, path) != CONFIG_TRUE) {
        if (config_error_type(cf) == CONFIG_ERR_FILE_IO) {
            config_error_set(err, config_error_file(cf) ? config_error_file(cf) : path, 0,
                             "cannot read file: %s", config_error_text(cf));
        } else {
            config_error_set(err, config_error_file(cf) ? config_error_file(cf) : path,
                             config_error_line(cf), "cannot parse: %s (libconfig syntax: key = value;)",
                             config_error_text(cf));
        }
        return -1;
    }
    return 0;
}

/* ---- main file tables ---- */

struct main_settings {
    char *owner;
    char *endpoints_dir;
    int64_t priority;
    int64_t prefer_after_ms;
};
static const struct setting_def main_defs[] = {
    { "owner", SETTING_STRING, offsetof(struct main_settings, owner),
      .help = "tenant id, " NAME_RULE },
    { "endpoints_dir", SETTING_STRING, offsetof(struct main_settings, endpoints_dir),
      .def = "endpoints.d", .help = "directory of endpoint files, relative to the main file" },
    { "priority", SETTING_INT, offsetof(struct main_settings, priority), .def = "0", .min = 0, .max = 1000,
      .help = "this replica's priority: a leader hands an endpoint over gracefully to a ready standby of "
              "higher priority once that one has been a standby for prefer_after_ms" },
    { "prefer_after_ms", SETTING_INT, offsetof(struct main_settings, prefer_after_ms), .def = "10000",
      .min = 0, .max = 86400000,
      .help = "how long a replica of higher priority must have been a ready standby before a leader hands "
              "over to it (hysteresis: a flapping preferred replica causes no handover)" },
    SETTINGS_END
};
static const char *const main_groups[] = {
    "locker", "lease", "sinks", "metrics", "log", "shutdown", "admin", NULL,
};

static const char *const locker_types[] = { "redis", "etcd", "postgresql", NULL };
struct locker_settings {
    int type;
    int backend;
    struct strlist endpoints;
    char *ca_file;
    char *cert_file;
    char *key_file;
    struct strlist sentinels;
    char *master_name;
    struct redis_tls_settings tls;
    int64_t max_reply_bytes;
    bool hash_tag;
    char *host;
    int64_t port;
    int64_t db;
    char *user;
    char *password_env;
    char *password_file;
    int64_t connect_timeout_ms;
    int64_t command_timeout_ms;
    char *prefix;
    char *conninfo;
};
static const struct setting_def locker_defs[] = {
    { "backend", SETTING_ENUM, offsetof(struct locker_settings, backend), .def = "redis",
      .choices = locker_types, .help = "locker backend" },
    { "type", SETTING_ENUM, offsetof(struct locker_settings, type), .def = "redis",
      .choices = locker_types, .help = "older name of backend, still read" },
    { "endpoints", SETTING_STRLIST, offsetof(struct locker_settings, endpoints),
      .help = "etcd client URLs (http:// or https://), tried in order" },
    { "ca_file", SETTING_STRING, offsetof(struct locker_settings, ca_file),
      .help = "etcd: CA certificate that signed the members' certificates" },
    { "cert_file", SETTING_STRING, offsetof(struct locker_settings, cert_file),
      .help = "etcd: client certificate" },
    { "key_file", SETTING_STRING, offsetof(struct locker_settings, key_file),
      .help = "etcd: client certificate key" },
    { "host", SETTING_STRING, offsetof(struct locker_settings, host), .def = "127.0.0.1",
      .help = "Redis host name or address" },
    { "port", SETTING_INT, offsetof(struct locker_settings, port), .def = "6379", .min = 1,
      .max = 65535, .help = "Redis TCP port" },
    { "db", SETTING_INT, offsetof(struct locker_settings, db), .def = "0", .min = 0,
      .max = 65535, .help = "Redis database number" },
    { "user", SETTING_STRING, offsetof(struct locker_settings, user), .help = "Redis ACL user" },
    { "password_env", SETTING_STRING, offsetof(struct locker_settings, password_env),
      .help = "name of the environment variable holding the Redis password" },
    { "password_file", SETTING_STRING, offsetof(struct locker_settings, password_file),
      .help = "file whose first line is the Redis password" },
    { "connect_timeout_ms", SETTING_INT, offsetof(struct locker_settings, connect_timeout_ms),
      .def = "1000", .min = 1, .max = 600000, .help = "TCP connect timeout" },
    { "command_timeout_ms", SETTING_INT, offsetof(struct locker_settings, command_timeout_ms),
      .def = "1000", .min = 1, .max = 600000, .help = "command timeout (one request)" },
    { "prefix", SETTING_STRING, offsetof(struct locker_settings, prefix), .def = "baton",
      .help = "prefix of every lock key" },
    { "conninfo", SETTING_STRING, offsetof(struct locker_settings, conninfo),
      .help = "postgresql: libpq connection string (\"host=... dbname=...\" or postgresql://...); "
              "the password from password_file or password_env, not from here" },
    REDIS_HA_TLS_DEFS(struct locker_settings),
    { "hash_tag", SETTING_BOOL, offsetof(struct locker_settings, hash_tag), .def = "false",
      .help = "lease keys <prefix>:active:{<scope>}: a lease's keys share one Redis Cluster slot "
              "(changes the key names: switch every replica at once)" },
    SETTINGS_END
};

static const struct setting_def lease_defs[] = {
    { "ttl_ms", SETTING_INT, offsetof(struct lease_config, ttl_ms), .def = "3000", .min = 10,
      .max = 86400000, .help = "lease lifetime" },
    { "renew_ms", SETTING_INT, offsetof(struct lease_config, renew_ms), .min = 1, .max = 86400000,
      .help = "renewal interval, less than ttl_ms; default ttl_ms / 3" },
    { "retry_ms", SETTING_INT, offsetof(struct lease_config, retry_ms), .def = "250", .min = 1,
      .max = 3600000, .help = "standby retry interval" },
    { "balance_step_ms", SETTING_INT, offsetof(struct lease_config, balance_step_ms), .min = 1,
      .max = 3600000, .help = "leader balancing step; default retry_ms / 2" },
    SETTINGS_END
};

struct metrics_settings {
    char *listen;
};
static const struct setting_def metrics_defs[] = {
    { "listen", SETTING_STRING, offsetof(struct metrics_settings, listen), .def = "127.0.0.1:9464",
      .help = "host:port of the ops listener (/metrics, /healthz, /readyz, /status)" },
    SETTINGS_END
};

static const char *const log_levels[] = { "error", "warn", "info", "debug", NULL };
/* In enum log_format order. */
static const char *const log_formats[] = { "text", "json", NULL };
struct log_settings {
    int level;
    int format;
};
static const struct setting_def log_defs[] = {
    { "level", SETTING_ENUM, offsetof(struct log_settings, level), .def = "info",
      .choices = log_levels, .help = "least severe level logged (--log-level wins over it)" },
    { "format", SETTING_ENUM, offsetof(struct log_settings, format), .def = "text",
      .choices = log_formats,
      .help = "text: one line per event (time, level, component[endpoint], message); json: one "
              "JSON object per line" },
    SETTINGS_END
};

struct shutdown_settings {
    int64_t drain_timeout_ms;
};
static const struct setting_def shutdown_defs[] = {
    { "drain_timeout_ms", SETTING_INT, offsetof(struct shutdown_settings, drain_timeout_ms),
      .def = "5000", .min = 0, .max = 3600000, .help = "how long shutdown drains queues to sinks" },
    SETTINGS_END
};

struct admin_settings {
    char *token_file;
};
static const struct setting_def admin_defs[] = {
    { "token_file", SETTING_STRING, offsetof(struct admin_settings, token_file),
      .help = "file holding the bearer token that control requests (POST /v1/...: step-down, "
              "drain, resume) must carry, read at start (first line; mode 600 or 640), relative "
              "to the main file; without it control requests are taken from loopback peers only" },
    SETTINGS_END
};

struct sink_common {
    char *name;
    char *type;
    char *dead_letter;
};
static const struct setting_def sink_common_defs[] = {
    { "name", SETTING_STRING, offsetof(struct sink_common, name), .required = true,
      .help = "sink name, " NAME_RULE },
    { "type", SETTING_STRING, offsetof(struct sink_common, type), .required = true,
      .help = "one of the sink types, e.g. \"http\"" },
    { "dead_letter", SETTING_STRING, offsetof(struct sink_common, dead_letter),
      .help = "name of a sink that gets the messages this one cannot deliver (for every "
              "endpoint using this sink that sets no dead_letter of its own)" },
    SETTINGS_END
};

/* ---- endpoint common table ---- */

static const char *const guard_names[] = { "auto", "active", "once", "none", NULL };
static const char *const policy_names[] = { "block", "drop_oldest", NULL };
static const char *const ordering_names[] = { "key", "none", "strict", NULL }; /* enum ordering */
static const char *const failover_names[] = { "gap", "replay", NULL };
struct endpoint_common {
    char *name;
    char *type;
    char *sink;
    char *dead_letter;
    bool enabled;
    int guard;
    bool force_guard;
    int64_t queue_size;
    int queue_policy;
    int64_t queue_batch_max;
    int ordering;
    int64_t lease_ttl_ms;   /* 0: not given */
    int64_t lease_renew_ms; /* 0: not given */
    int64_t lease_retry_ms; /* 0: not given */
    int64_t once_ttl_ms;
    bool once_fail_open;
    int failover;
};
static const struct setting_def endpoint_common_defs[] = {
    { "name", SETTING_STRING, offsetof(struct endpoint_common, name), .required = true,
      .help = "unique endpoint name, " NAME_RULE },
    { "type", SETTING_STRING, offsetof(struct endpoint_common, type), .required = true,
      .help = "one of the endpoint types, e.g. \"redis_psub\"" },
    { "sink", SETTING_STRING, offsetof(struct endpoint_common, sink), .required = true,
      .help = "name of a sink from the main file" },
    { "dead_letter", SETTING_STRING, offsetof(struct endpoint_common, dead_letter),
      .help = "name of a sink that gets the messages the sink cannot deliver (rejected, "
              "retries exhausted, left at shutdown), with the reason; default: the sink's "
              "dead_letter, else none (dropped and counted)" },
    { "enabled", SETTING_BOOL, offsetof(struct endpoint_common, enabled), .def = "true",
      .help = "false: validated but not started" },
    { "guard", SETTING_ENUM, offsetof(struct endpoint_common, guard), .def = "auto",
      .choices = guard_names,
      .help = "active: only the lease holder consumes (ActiveGuard); once: every replica "
              "consumes, each message goes out once (OnceGuard); none: no guard, every "
              "replica forwards what it receives; auto: the type's own choice" },
    { "force_guard", SETTING_BOOL, offsetof(struct endpoint_common, force_guard), .def = "false",
      .help = "accept a guard the endpoint type advises against" },
    { "queue_size", SETTING_INT, offsetof(struct endpoint_common, queue_size), .def = "10000",
      .min = 1, .max = 100000000, .help = "messages queued between endpoint and sink" },
    { "queue_policy", SETTING_ENUM, offsetof(struct endpoint_common, queue_policy), .def = "block",
      .choices = policy_names, .help = "what a full queue does" },
    { "queue_batch_max", SETTING_INT, offsetof(struct endpoint_common, queue_batch_max), .def = "256",
      .min = 1, .max = 1000000, .help = "messages taken from the queue per sink send",
      .old_name = "batch_max" },
    { "ordering", SETTING_ENUM, offsetof(struct endpoint_common, ordering), .def = "key",
      .choices = ordering_names,
      .help = "delivery order at a sink with requests in flight together: key (per ordering "
              "key, in receive order), none, strict (one request at a time)" },
    { "lease_ttl_ms", SETTING_INT, offsetof(struct endpoint_common, lease_ttl_ms), .min = 10,
      .max = 86400000, .help = "overrides the main lease ttl_ms" },
    { "lease_renew_ms", SETTING_INT, offsetof(struct endpoint_common, lease_renew_ms), .min = 1,
      .max = 86400000, .help = "overrides the main lease renew_ms" },
    { "lease_retry_ms", SETTING_INT, offsetof(struct endpoint_common, lease_retry_ms), .min = 1,
      .max = 3600000, .help = "overrides the main lease retry_ms" },
    { "once_ttl_ms", SETTING_INT, offsetof(struct endpoint_common, once_ttl_ms), .def = "3600000",
      .min = 1, .max = 31L * 86400000, .help = "OnceGuard key lifetime" },
    { "once_fail_open", SETTING_BOOL, offsetof(struct endpoint_common, once_fail_open),
      .def = "false", .help = "allow when the locker is unreachable" },
    { "failover", SETTING_ENUM, offsetof(struct endpoint_common, failover), .def = "gap",
      .choices = failover_names,
      .help = "what a crash takeover does with messages published meanwhile: \"gap\" loses "
              "them, \"replay\" has standbys buffer and the new leader replay them" },
    SETTINGS_END
};

/* replay = { window_ms; max_bytes; mark_interval_ms; } (failover = "replay") */
static const struct setting_def replay_defs[] = {
    { "window_ms", SETTING_INT, offsetof(struct replay_config, window_ms), .min = 100,
      .max = 3600000, .help = "how long a standby keeps what it received (default 2 x ttl + 1 s)" },
    { "max_bytes", SETTING_INT, offsetof(struct replay_config, max_bytes), .def = "16777216",
      .min = 65536, .max = 4294967296LL, .help = "bytes a standby's ring holds at most" },
    { "mark_interval_ms", SETTING_INT, offsetof(struct replay_config, mark_interval_ms),
      .def = "50", .min = 1, .max = 60000,
      .help = "how often the leader publishes what it delivered" },
    SETTINGS_END
};

/* ---- main file sections ---- */

static int check_name(const config_setting_t *s, const char *what, const char *key, const char *v,
                      struct config_error *err)
{
    if (name_ok(v)) return 0;
    config_error_set(err, config_setting_source_file(s), line_of(s),
                     "%s: %s = \"%s\": expected " NAME_RULE, what, key, v);
    return -1;
}

/* A relative path in the main file is relative to the main file. */
static char *main_relative(const char *main_path, const char *p)
{
    char *dir = dir_of(main_path);
    char *r = path_join(dir, p);
    free(dir);
    return r;
}

static int parse_locker(struct baton_config *c, const config_setting_t *g, struct config_error *err)
{
    const char *file = config_setting_source_file(g);
    const config_setting_t *pw = config_setting_is_group(g) ? config_setting_get_member(g, "password") : NULL;
    if (pw) {
        config_error_set(err, file, line_of(pw),
                         "locker: 'password' is never written in the config file; use "
                         "password_env (an environment variable name) or password_file");
        return -1;
    }
    struct locker_settings ls = { 0 };
    int rc = settings_parse(locker_defs, g, NULL, "locker", &ls, err);
    if (rc == 0 && !ls.prefix[0]) {
        const config_setting_t *s = config_setting_get_member(g, "prefix");
        config_error_set(err, file, line_of(s ? s : g), "locker: prefix must not be empty");
        rc = -1;
    }
    const config_setting_t *type_s = g ? config_setting_get_member(g, "type") : NULL;
    const config_setting_t *backend_s = g ? config_setting_get_member(g, "backend") : NULL;
    if (rc == 0 && type_s && backend_s) {
        config_error_set(err, file, line_of(type_s),
                         "locker: both 'backend' and its older name 'type' given; keep 'backend'");
        rc = -1;
    }
    int backend = backend_s ? ls.backend : ls.type;
    static const char *const redis_only[] = { "host", "port", "db", "sentinels", "master_name", "tls",
                                              "hash_tag", NULL };
    static const char *const etcd_only[] = { "endpoints", "ca_file", "cert_file", "key_file", NULL };
    static const char *const pg_only[] = { "conninfo", NULL };
    static const char *const *const only[] = { redis_only, etcd_only, pg_only };
    for (int b = 0; b < 3; b++) {
        if (b == backend) continue;
        for (size_t i = 0; rc == 0 && only[b][i]; i++) {
            const config_setting_t *s = config_setting_get_member(g, only[b][i]);
            if (!s) continue;
            config_error_set(err, file, line_of(s), "locker: '%s' is a setting of the %s backend, not of %s",
                             only[b][i], locker_types[b], locker_types[backend]);
            rc = -1;
        }
    }
    if (rc == 0 && backend == LOCKER_BACKEND_PG) {
        static const char *const redis_conn[] = { "host", "port", "db", "user", NULL };
        for (size_t i = 0; rc == 0 && redis_conn[i]; i++) {
            const config_setting_t *s = config_setting_get_member(g, redis_conn[i]);
            if (!s) continue;
            config_error_set(err, file, line_of(s),
                             "locker: '%s' is not a setting of the postgresql backend: put it in conninfo",
                             redis_conn[i]);
            rc = -1;
        }
        const config_setting_t *s = config_setting_get_member(g, "conninfo");
        char why[300];
        if (rc == 0 && (!ls.conninfo || !ls.conninfo[0])) {
            config_error_set(err, file, line_of(s ? s : backend_s ? backend_s : type_s ? type_s : g),
                             "locker: backend \"postgresql\" needs conninfo = \"host=... dbname=...\"");
            rc = -1;
        } else if (rc == 0 && pq_dl_load(why, sizeof why) != 0) {
            config_error_set(err, file, line_of(s), "locker: %s", why);
            rc = -1;
        } else if (rc == 0) {
            char *perr = NULL;
            PQconninfoOption *o = sym_PQconninfoParse(ls.conninfo, &perr);
            bool has_password = false;
            for (PQconninfoOption *p = o; p && p->keyword; p++)
                if (strcmp(p->keyword, "password") == 0 && p->val && p->val[0]) has_password = true;
            if (!o) {
                size_t l = perr ? strlen(perr) : 0;
                while (l > 0 && (perr[l - 1] == '\n' || perr[l - 1] == ' ')) l--;
                config_error_set(err, file, line_of(s), "locker: conninfo is not a libpq connection string: %.*s",
                                 (int)l, perr ? perr : "unknown error");
                rc = -1;
            } else if (has_password) {
                /* never echoed: it holds a password */
                config_error_set(err, file, line_of(s),
                                 "locker: conninfo holds a password; set password_file (or password_env) instead");
                rc = -1;
            }
            if (perr) sym_PQfreemem(perr);
            if (o) sym_PQconninfoFree(o);
        }
    }
    if (rc == 0 && backend == LOCKER_BACKEND_REDIS && !ls.host[0]) {
        const config_setting_t *s = config_setting_get_member(g, "host");
        config_error_set(err, file, line_of(s ? s : g), "locker: host must not be empty");
        rc = -1;
    }
    if (rc == 0 && backend == LOCKER_BACKEND_ETCD) {
        const config_setting_t *s = config_setting_get_member(g, "endpoints");
        if (ls.endpoints.n == 0) {
            config_error_set(err, file, line_of(s ? s : backend_s ? backend_s : type_s ? type_s : g),
                             "locker: backend \"etcd\" needs endpoints = [ \"http://host:2379\", ... ]");
            rc = -1;
        }
        for (size_t i = 0; rc == 0 && i < ls.endpoints.n; i++) {
            const char *u = ls.endpoints.v[i];
            bool https = strncmp(u, "https://", 8) == 0;
            if ((strncmp(u, "http://", 7) != 0 && !https) || strlen(u) < 9 || strlen(u) > 200) {
                config_error_set(err, file, line_of(s),
                                 "locker: endpoint \"%s\": expected http://host:port or https://host:port", u);
                rc = -1;
            } else if (redact_needed(u)) {
                /* never echoed: the URL holds a password */
                config_error_set(err, file, line_of(s),
                                 "locker: endpoint %zu has user information in its URL (user:password@): "
                                 "etcd answers such requests 401 and the password would be shown with "
                                 "the URL; set user and password_file (or password_env) instead", i + 1);
                rc = -1;
            } else if (!https && (ls.ca_file || ls.cert_file || ls.key_file)) {
                config_error_set(err, file, line_of(s),
                                 "locker: endpoint \"%s\" is plain http while TLS files are given; use https://", u);
                rc = -1;
            }
        }
        if (rc == 0 && (ls.cert_file != NULL) != (ls.key_file != NULL)) {
            const config_setting_t *t = config_setting_get_member(g, ls.cert_file ? "cert_file" : "key_file");
            config_error_set(err, file, line_of(t), "locker: cert_file and key_file go together");
            rc = -1;
        }
        char **tls[3] = { &ls.ca_file, &ls.cert_file, &ls.key_file };
        static const char *const tls_names[3] = { "ca_file", "cert_file", "key_file" };
        for (int i = 0; rc == 0 && i < 3; i++) {
            if (*tls[i] == NULL) continue;
            char *path = main_relative(c->path, *tls[i]);
            free(*tls[i]);
            *tls[i] = path;
            if (access(path, R_OK) != 0) {
                config_error_set(err, file, line_of(config_setting_get_member(g, tls_names[i])),
                                 "locker: %s %s: %s", tls_names[i], path, strerror(errno));
                rc = -1;
            }
        }
    }
    if (rc == 0 && backend == LOCKER_BACKEND_REDIS) {
        char *dir = dir_of(c->path);
        rc = redis_settings_check(g, &ls.sentinels, ls.master_name, &ls.tls, dir, "locker", err);
        free(dir);
    }
    char *password = NULL;
    if (rc == 0) {
        char *pfile = ls.password_file ? main_relative(c->path, ls.password_file) : NULL;
        char msg[512];
        if (secret_resolve(ls.password_env, pfile, &password, msg, sizeof msg)) {
            const config_setting_t *s = config_setting_get_member(g, ls.password_env ? "password_env"
                                                                                   : "password_file");
            if (ls.password_env && ls.password_file) s = config_setting_get_member(g, "password_file");
            config_error_set(err, file, line_of(s), "locker: %s", msg);
            rc = -1;
        }
        free(pfile);
    }
    if (rc == 0 && backend == LOCKER_BACKEND_ETCD && ls.user && !password) {
        config_error_set(err, file, line_of(config_setting_get_member(g, "user")),
                         "locker: etcd user \"%s\" needs password_env or password_file", ls.user);
        rc = -1;
    }
    if (rc == 0) {
        c->has_locker = true;
        c->locker_backend = (enum locker_backend)backend;
        c->locker_hash_tag = ls.hash_tag;
        c->locker_command_timeout_set = g && config_setting_get_member(g, "command_timeout_ms") != NULL;
        if (backend == LOCKER_BACKEND_PG) {
            struct baton_pg_opts *p = &c->locker_pg;
            p->conninfo = ls.conninfo;
            ls.conninfo = NULL;
            p->password = password;
            p->connect_timeout_ms = ls.connect_timeout_ms;
            p->command_timeout_ms = ls.command_timeout_ms;
        } else if (backend == LOCKER_BACKEND_ETCD) {
            struct baton_etcd_opts *e = &c->locker_etcd;
            e->endpoints = ls.endpoints.v;
            e->n_endpoints = ls.endpoints.n;
            ls.endpoints.v = NULL;
            ls.endpoints.n = 0;
            e->ca_file = ls.ca_file;
            e->cert_file = ls.cert_file;
            e->key_file = ls.key_file;
            ls.ca_file = ls.cert_file = ls.key_file = NULL;
            e->user = ls.user;
            ls.user = NULL;
            e->password = password;
            e->connect_timeout_ms = ls.connect_timeout_ms;
            e->command_timeout_ms = ls.command_timeout_ms;
        } else {
            c->locker_redis.host = ls.host;
            ls.host = NULL;
            c->locker_redis.port = (int)ls.port;
            c->locker_redis.db = (int)ls.db;
            c->locker_redis.user = ls.user;
            ls.user = NULL;
            c->locker_redis.password = password;
            c->locker_redis.connect_timeout_ms = ls.connect_timeout_ms;
            c->locker_redis.command_timeout_ms = ls.command_timeout_ms;
            c->locker_redis.max_reply_bytes = ls.max_reply_bytes;
            redis_settings_apply(&c->locker_redis, &ls.sentinels, ls.master_name, &ls.tls);
        }
        free(c->key_prefix);
        c->key_prefix = ls.prefix;
        ls.prefix = NULL;
    } else if (password) {
        explicit_bzero(password, strlen(password));
        free(password);
    }
    settings_free(locker_defs, &ls);
    return rc;
}

static int parse_lease(struct lease_config *l, const config_setting_t *g, struct config_error *err)
{
    memset(l, 0, sizeof *l);
    if (settings_parse(lease_defs, g, NULL, "lease", l, err)) return -1;
    if (l->renew_ms == 0) l->renew_ms = l->ttl_ms / 3;
    if (l->balance_step_ms == 0) l->balance_step_ms = l->retry_ms / 2 > 0 ? l->retry_ms / 2 : 1;
    return 0;
}

/* ---- lease timings ----
 *
 * One validation for --check-config and start-up alike: the guard's own
 * baton_active_guard_check_timings (the one baton_active_guard_create applies), with the
 * same inputs the gateway passes it: the effective lease, the default safety
 * margin and the locker's command timeout (0 without a locker). A lease that
 * passes here is never refused when the guard is created. */

/* The command timeout the guard checks against: the locker's Redis command
 * timeout, 0 in single-process mode (no locker, nothing can time out). */
static int64_t *locker_command_timeout(struct baton_config *c)
{
    if (c->locker_backend == LOCKER_BACKEND_PG) return &c->locker_pg.command_timeout_ms;
    return c->locker_backend == LOCKER_BACKEND_ETCD ? &c->locker_etcd.command_timeout_ms
                                                    : &c->locker_redis.command_timeout_ms;
}

static int64_t lease_command_timeout(struct baton_config *c)
{
    return c->has_locker ? *locker_command_timeout(c) : 0;
}

/* A lease that fails only against a command timeout nobody set: the
 * default is lowered to what the lease leaves (ttl - margin - renew), when
 * that is at least LEASE_MIN_COMMAND_TIMEOUT_MS, instead of refusing a
 * config that never mentioned the timeout. Returns true when it did. */
#define LEASE_MIN_COMMAND_TIMEOUT_MS 50
static bool fit_default_command_timeout(struct baton_config *c, const struct lease_config *l)
{
    if (!c->has_locker || c->locker_command_timeout_set) return false;
    char scratch[400];
    if (baton_active_guard_check_timings(l->ttl_ms, l->renew_ms, l->retry_ms, 0, 0, scratch, sizeof scratch) != 0)
        return false;
    int64_t ttl = l->ttl_ms ? l->ttl_ms : 3000;
    int64_t renew = l->renew_ms ? l->renew_ms : ttl / 3;
    int64_t margin = ttl / 20 > 10 ? ttl / 20 : 10;
    int64_t fit = ttl - margin - renew;
    if (fit < LEASE_MIN_COMMAND_TIMEOUT_MS) return false;
    if (fit < *locker_command_timeout(c)) *locker_command_timeout(c) = fit;
    return true;
}

/* The one check, baton_active_guard_check_timings, against the locker's command
 * timeout (fitted when nobody set it). false: msg says why, and
 * *cmd_involved whether the command timeout is what failed it. */
static bool lease_timings_ok(struct baton_config *c, const struct lease_config *l, char *msg,
                             size_t msglen, bool *cmd_involved)
{
    int64_t cmd = lease_command_timeout(c);
    int64_t ttl = l->ttl_ms ? l->ttl_ms : 3000;
    if (c->has_locker && c->locker_backend == LOCKER_BACKEND_ETCD && (ttl % 1000 || ttl < 2000)) {
        /* said, never rounded: a longer lease would lengthen every takeover */
        snprintf(msg, msglen, "lease ttl %lld ms: etcd leases are whole seconds, at least 2000 ms "
                 "(etcd's minimum with default settings)", (long long)ttl);
        *cmd_involved = false;
        return false;
    }
    if (baton_active_guard_check_timings(l->ttl_ms, l->renew_ms, l->retry_ms, 0, cmd, msg, msglen) == 0)
        return true;
    if (fit_default_command_timeout(c, l)) return true;
    char scratch[400];
    *cmd_involved = cmd > 0 && baton_active_guard_check_timings(l->ttl_ms, l->renew_ms, l->retry_ms, 0, 0,
                                                          scratch, sizeof scratch) == 0;
    return false;
}

/* "lease ttl 100 ms, ..." -> "ttl 100 ms, ..." (the callers name the lease). */
static const char *lease_msg_tail(const char *msg)
{
    return strncmp(msg, "lease ", 6) == 0 ? msg + 6 : msg;
}

/* The main file's lease group (g, NULL when absent). Reported at renew_ms,
 * else ttl_ms, else the lease group; with no lease group the defaults only
 * fail against the locker's command timeout: reported there. */
static int check_main_lease(struct baton_config *c, const config_setting_t *g,
                            const config_setting_t *locker, struct config_error *err)
{
    char msg[400];
    bool cmd_involved = false;
    if (lease_timings_ok(c, &c->lease, msg, sizeof msg, &cmd_involved)) return 0;
    const config_setting_t *cmd_setting = locker ? config_setting_get_member(locker, "command_timeout_ms") : NULL;
    const config_setting_t *at = NULL;
    if (g) {
        at = config_setting_get_member(g, "renew_ms");
        if (!at) at = config_setting_get_member(g, "ttl_ms");
        if (!at) at = g;
    } else if (locker) {
        at = cmd_setting ? cmd_setting : locker;
    }
    const char *cmd_from = !cmd_involved ? NULL
                           : cmd_setting ? "command timeout: locker command_timeout_ms"
                                         : "command timeout: the locker's default command_timeout_ms";
    const char *lease_from = g ? NULL : "default lease timings: the main file has no lease group";
    config_error_set(err, at ? config_setting_source_file(at) : c->path, line_of(at), "lease: %s%s%s%s%s%s",
                     lease_msg_tail(msg), lease_from || cmd_from ? " (" : "", lease_from ? lease_from : "",
                     lease_from && cmd_from ? "; " : "", cmd_from ? cmd_from : "",
                     lease_from || cmd_from ? ")" : "");
    return -1;
}

/* "host:port" or "[v6]:port"; port 0..65535 (0: any free port). */
static int check_listen(const char *v, const config_setting_t *s, struct config_error *err)
{
    const char *colon = strrchr(v, ':');
    const char *why = NULL;
    if (!colon || colon == v) {
        why = "expected host:port";
    } else if (v[0] == '[' && colon[-1] != ']') {
        why = "expected [IPv6]:port";
    } else {
        char *end;
        errno = 0;
        long p = strtol(colon + 1, &end, 10);
        if (!colon[1] || *end || errno) {
            why = "expected host:port with a numeric port";
        } else if (p < 0 || p > 65535) {
            config_error_set(err, config_setting_source_file(s), line_of(s),
                             "metrics: listen = \"%s\": port %ld is out of range 0..65535", v, p);
            return -1;
        }
    }
    if (!why) return 0;
    config_error_set(err, config_setting_source_file(s), line_of(s), "metrics: listen = \"%s\": %s", v,
                     why);
    return -1;
}

static int parse_sink(struct baton_config *c, const config_setting_t *g, int index,
                      struct config_error *err)
{
    const char *file = config_setting_source_file(g);
    char what[200];
    if (!config_setting_is_group(g)) {
        config_error_set(err, file, line_of(g),
                         "sinks: element %d: expected a group { name = \"...\"; type = \"...\"; }", index + 1);
        return -1;
    }
    const char *pre_name = NULL;
    config_setting_lookup_string(g, "name", &pre_name);
    if (pre_name)
        snprintf(what, sizeof what, "sink '%s'", pre_name);
    else
        snprintf(what, sizeof what, "sinks: element %d", index + 1);

    struct sink_config *sc = &c->sinks[c->n_sinks++];
    sc->file = xstrdup(file ? file : c->path);
    sc->line = line_of(g);

    /* type first: it says which other keys exist */
    const config_setting_t *ts = config_setting_get_member(g, "type");
    char known[300];
    known_sink_types(known, sizeof known);
    if (!ts || config_setting_type(ts) != CONFIG_TYPE_STRING) {
        config_error_set(err, file, line_of(ts ? ts : g), "%s: %s 'type' (a string, one of %s)", what,
                         ts ? "expected a string for" : "missing required key", known);
        return -1;
    }
    const char *t = config_setting_get_string(ts);
    sc->ops = find_sink_type(t);
    if (!sc->ops) {
        config_error_set(err, file, line_of(ts), "%s: unknown sink type '%s'; known types: %s", what, t,
                         known);
        return -1;
    }
    const char **type_keys = def_names(sc->ops->settings);
    struct sink_common com = { 0 };
    int rc = settings_parse(sink_common_defs, g, type_keys, what, &com, err);
    free(type_keys);
    if (com.name && check_name(config_setting_get_member(g, "name"), what, "name", com.name, err)) rc = -1;
    sc->name = com.name;
    sc->type = com.type;
    sc->dead_letter = com.dead_letter;

    for (size_t i = 0; sc->name && i + 1 < c->n_sinks; i++) {
        if (c->sinks[i].name && strcmp(c->sinks[i].name, sc->name) == 0) {
            config_error_set(err, file, line_of(config_setting_get_member(g, "name")),
                             "duplicate sink name '%s' (first defined at %s:%d)", sc->name,
                             c->sinks[i].file, c->sinks[i].line);
            rc = -1;
            break;
        }
    }

    /* the type's keys are checked whatever the common ones found; unknown
     * keys were reported with those */
    const char **common_keys = def_names(sink_common_defs);
    sc->settings = xcalloc(1, sc->ops->settings_size ? sc->ops->settings_size : 1);
    if (settings_parse_values(sc->ops->settings, g, common_keys, what, sc->settings, err)) rc = -1;
    free(common_keys);
    if (rc) return -1;
    if (sc->ops->validate) {
        char msg[400] = "";
        if (sc->ops->validate(sc->settings, msg, sizeof msg)) {
            const config_setting_t *at = setting_named_by(g, msg);
            config_error_set(err, file, line_of(at ? at : g), "%s: %s", what,
                             msg[0] ? msg : "invalid settings");
            return -1;
        }
    }
    return 0;
}

static int parse_sinks(struct baton_config *c, const config_setting_t *s, struct config_error *err)
{
    if (config_setting_type(s) != CONFIG_TYPE_LIST) {
        c->sinks_incomplete = true;
        config_error_set(err, config_setting_source_file(s), line_of(s),
                         "'sinks' expected a list ( { name = \"...\"; type = \"...\"; }, ... ), got %s",
                         config_setting_is_group(s) ? "a group { }" : "a single value or an array");
        return -1;
    }
    int n = config_setting_length(s), rc = 0;
    c->sinks = xcalloc((size_t)n + 1, sizeof *c->sinks);
    /* every sink is checked; a bad one is marked (sink_config.invalid) so
     * that the endpoints naming it do not report it again */
    for (int i = 0; i < n; i++) {
        const config_setting_t *g = config_setting_get_elem(s, (unsigned)i);
        size_t at = c->n_sinks;
        if (parse_sink(c, g, i, err) == 0) continue;
        rc = -1;
        const char *name = NULL;
        if (config_setting_is_group(g)) config_setting_lookup_string(g, "name", &name);
        if (c->n_sinks > at) {
            c->sinks[at].invalid = true;
            if (!c->sinks[at].name && name) c->sinks[at].name = xstrdup(name);
        }
        if (!name) c->sinks_incomplete = true; /* any unknown name may be this one */
    }
    return rc;
}

/* A main-file group that must be a group when present. */
static const config_setting_t *main_group_member(const config_setting_t *root, const char *name)
{
    return config_setting_get_member(root, name);
}

static int expect_group(const config_setting_t *s, const char *name, struct config_error *err)
{
    if (config_setting_is_group(s)) return 0;
    config_error_set(err, config_setting_source_file(s), line_of(s),
                     "'%s' expected a group %s = { key = value; ... };", name, name);
    return -1;
}

/* ---- endpoint files ---- */

struct name_site {
    const char *file;
    int line;
};

/* What an endpoint file's checks depend on in the main file: when that part
 * failed, its error is reported and the checks resting on it are skipped
 * (no second error for one mistake). */
struct load_ctx {
    struct name_site *sites; /* where each endpoint name was defined */
    bool locker_bad;         /* the locker group failed: no locker, timeouts unknown */
    bool lease_bad;          /* the main lease failed */
};

/* An endpoint's effective lease (the main lease with its lease_*_ms
 * overrides). The main lease passed already, so a failure comes from an
 * override: reported at lease_renew_ms, else lease_ttl_ms, else
 * lease_retry_ms. */
static int check_endpoint_lease(struct baton_config *c, const struct endpoint_config *ep,
                                const config_setting_t *root, const char *what,
                                const struct endpoint_common *com, struct config_error *err)
{
    char msg[400];
    bool cmd_involved = false;
    if (lease_timings_ok(c, &ep->lease, msg, sizeof msg, &cmd_involved)) return 0;
    const config_setting_t *at = config_setting_get_member(root, "lease_renew_ms");
    if (!at) at = config_setting_get_member(root, "lease_ttl_ms");
    if (!at) at = config_setting_get_member(root, "lease_retry_ms");
    char from[200];
    snprintf(from, sizeof from, "ttl from %s, renew from %s",
             com->lease_ttl_ms ? "lease_ttl_ms" : "the main file's lease",
             com->lease_renew_ms ? "lease_renew_ms"
             : com->lease_ttl_ms ? "lease_ttl_ms / 3"
                                 : "the main file's lease");
    config_error_set(err, ep->file, line_of(at), "%s: %s (%s%s)", what, msg, from,
                     cmd_involved ? "; command timeout from the locker's command_timeout_ms in the main file" : "");
    return -1;
}

/* failover = "replay": the type must support it (endpoint_ops.replay_check),
 * the endpoint must run under ActiveGuard with a locker, and the ring must
 * cover a crash takeover (window >= ttl + retry). */
static int parse_replay(const struct baton_config *c, struct endpoint_config *ep,
                        const config_setting_t *root, const char *what, struct config_error *err)
{
    const config_setting_t *g = config_setting_get_member(root, "replay");
    const config_setting_t *fs = config_setting_get_member(root, "failover");
    if (ep->failover != FAILOVER_REPLAY) {
        if (g) {
            config_error_set(err, ep->file, line_of(g),
                             "%s: 'replay' settings are given but failover is \"gap\"; set "
                             "failover = \"replay\" to use them", what);
            return -1;
        }
        return 0;
    }
    char msg[400] = "";
    if (!ep->ops->replay_check) {
        config_error_set(err, ep->file, line_of(fs),
                         "%s: failover = \"replay\" is not available for type %s (it exists for "
                         "broadcast sources: redis_psub, mqtt without shared_group)", what, ep->type);
        return -1;
    }
    if (ep->ops->replay_check(ep->settings, msg, sizeof msg)) {
        const config_setting_t *at = setting_named_by(root, msg);
        config_error_set(err, ep->file, line_of(at ? at : fs), "%s: failover = \"replay\": %s",
                         what, msg);
        return -1;
    }
    if (ep->guard != GUARD_ACTIVE || !c->has_locker) {
        config_error_set(err, ep->file, line_of(fs),
                         "%s: failover = \"replay\" needs guard \"active\" and a locker in the "
                         "main file (standbys buffer what the leader delivers)", what);
        return -1;
    }
    if (g && !config_setting_is_group(g)) {
        config_error_set(err, ep->file, line_of(g),
                         "%s: 'replay' must be a group: replay = { window_ms = ...; max_bytes = ...; "
                         "mark_interval_ms = ...; }", what);
        return -1;
    }
    char rwhat[240];
    snprintf(rwhat, sizeof rwhat, "%s: replay", what);
    memset(&ep->replay, 0, sizeof ep->replay);
    if (settings_parse(replay_defs, g, NULL, rwhat, &ep->replay, err)) return -1;
    int64_t need = ep->lease.ttl_ms + ep->lease.retry_ms;
    ep->replay.takeover_ms = need;
    if (ep->replay.window_ms == 0) ep->replay.window_ms = 2 * ep->lease.ttl_ms + 1000;
    if (ep->replay.window_ms < need) {
        const config_setting_t *at = config_setting_get_member(g, "window_ms");
        config_error_set(err, ep->file, line_of(at ? at : g ? g : fs),
                         "%s: replay.window_ms = %lld is shorter than a crash takeover can take "
                         "(lease ttl %lld + retry %lld ms): the ring could not cover the gap",
                         what, (long long)ep->replay.window_ms, (long long)ep->lease.ttl_ms,
                         (long long)ep->lease.retry_ms);
        return -1;
    }
    if (ep->replay.mark_interval_ms >= ep->lease.ttl_ms) {
        const config_setting_t *at = config_setting_get_member(g, "mark_interval_ms");
        config_error_set(err, ep->file, line_of(at ? at : g ? g : fs),
                         "%s: replay.mark_interval_ms = %lld must be shorter than the lease ttl "
                         "(%lld ms): every failover repeats what was delivered after the last mark",
                         what, (long long)ep->replay.mark_interval_ms, (long long)ep->lease.ttl_ms);
        return -1;
    }
    return 0;
}

/* The endpoint's dead-letter sink: its own dead_letter, else its sink's.
 * The target must be another sink of the main file (a sink cannot take
 * back what it refused); its own dead_letter is not followed. */
static int resolve_dead_letter(struct baton_config *c, struct endpoint_config *ep,
                               const config_setting_t *root, const char *path, const char *what,
                               const char *own, struct config_error *err)
{
    const char *name = own ? own : ep->sink->dead_letter;
    if (!name) return 0;
    const char *file = own ? path : ep->sink->file;
    int line = own ? line_of(config_setting_get_member(root, "dead_letter")) : ep->sink->line;
    char by[480];
    if (own)
        snprintf(by, sizeof by, "%s: dead_letter", what);
    else
        snprintf(by, sizeof by, "sink '%s' (used by %s): dead_letter", ep->sink->name, what);
    for (size_t i = 0; i < c->n_sinks; i++)
        if (c->sinks[i].name && strcmp(c->sinks[i].name, name) == 0) ep->dead_letter = &c->sinks[i];
    if (ep->dead_letter && ep->dead_letter->invalid) return -1; /* reported at the sink */
    if (!ep->dead_letter && c->sinks_incomplete) return -1;    /* may be the bad one: reported */
    if (!ep->dead_letter) {
        char names[300];
        join_names(names, sizeof names, c->n_sinks, sink_name_at, c);
        config_error_set(err, file, line, "%s: unknown sink '%s'; sinks defined in %s: %s", by, name,
                         c->path, names);
        return -1;
    }
    if (ep->dead_letter == ep->sink) {
        config_error_set(err, file, line,
                         "%s: '%s' is the sink itself; name another sink (a file sink, say) to keep "
                         "what '%s' cannot deliver", by, name, name);
        return -1;
    }
    return 0;
}

static int load_endpoint(struct baton_config *c, const char *path, const struct load_ctx *ctx,
                         struct config_error *err)
{
    config_t cf;
    config_init(&cf);
    struct endpoint_config *ep = &c->endpoints[c->n_endpoints++];
    ep->file = xstrdup(path);
    struct endpoint_common com = { 0 };
    const char **type_keys = NULL, **common_keys = NULL;
    char what[200];
    int rc = -1;

    if (read_file(&cf, path, err)) goto out;
    const config_setting_t *root = config_root_setting(&cf);
    const char *pre_name = NULL;
    config_setting_lookup_string(root, "name", &pre_name);
    if (pre_name) {
        snprintf(what, sizeof what, "endpoint '%s'", pre_name);
    } else {
        const char *base = strrchr(path, '/');
        snprintf(what, sizeof what, "endpoint file '%s'", base ? base + 1 : path);
    }

    const config_setting_t *ts = config_setting_get_member(root, "type");
    char known[300];
    known_endpoint_types(known, sizeof known);
    if (!ts || config_setting_type(ts) != CONFIG_TYPE_STRING) {
        config_error_set(err, path, ts ? line_of(ts) : 1, "%s: %s 'type' (a string, one of %s)", what,
                         ts ? "expected a string for" : "missing required key", known);
        goto out;
    }
    ep->ops = find_endpoint_type(config_setting_get_string(ts));
    if (!ep->ops) {
        config_error_set(err, path, line_of(ts), "%s: unknown endpoint type '%s'; known types: %s", what,
                         config_setting_get_string(ts), known);
        goto out;
    }

    /* the common keys and the type's keys: both checked, whatever the other
     * found */
    type_keys = def_names_with(ep->ops->settings, "replay");
    int bad = settings_parse(endpoint_common_defs, root, type_keys, what, &com, err);
    ep->name = com.name;
    com.name = NULL;
    ep->type = com.type;
    com.type = NULL;
    ep->sink_name = com.sink;
    com.sink = NULL;
    const config_setting_t *ns = config_setting_get_member(root, "name");
    if (ep->name && check_name(ns, what, "name", ep->name, err)) bad = -1;

    for (size_t i = 0; ep->name && i + 1 < c->n_endpoints; i++) {
        if (ctx->sites[i].file && strcmp(c->endpoints[i].name, ep->name) == 0) {
            config_error_set(err, path, line_of(ns),
                             "duplicate endpoint name '%s' (also defined at %s:%d)", ep->name,
                             ctx->sites[i].file, ctx->sites[i].line);
            bad = -1;
            break;
        }
    }
    if (!bad) {
        ctx->sites[c->n_endpoints - 1].file = ep->file;
        ctx->sites[c->n_endpoints - 1].line = line_of(ns);
    }

    ep->settings = xcalloc(1, ep->ops->settings_size ? ep->ops->settings_size : 1);
    common_keys = def_names_with(endpoint_common_defs, "replay");
    /* the unknown keys were reported with the common keys above */
    if (settings_parse_values(ep->ops->settings, root, common_keys, what, ep->settings, err)) bad = -1;
    if (bad) goto out;

    ep->enabled = com.enabled;
    ep->force_guard = com.force_guard;
    ep->queue_size = com.queue_size;
    ep->queue_policy = com.queue_policy == 1 ? QUEUE_DROP_OLDEST : QUEUE_BLOCK;
    ep->queue_batch_max = com.queue_batch_max;
    ep->ordering = (enum ordering)com.ordering;
    ep->once_ttl_ms = com.once_ttl_ms;
    ep->once_fail_open = com.once_fail_open;

    /* guard: auto -> the type's default for these settings */
    const config_setting_t *gs = config_setting_get_member(root, "guard");
    enum guard_kind g = (enum guard_kind)com.guard;
    if (g == GUARD_AUTO) g = ep->ops->auto_guard ? ep->ops->auto_guard(ep->settings) : GUARD_ACTIVE;
    if (g != GUARD_ACTIVE && g != GUARD_ONCE && g != GUARD_NONE) {
        config_error_set(err, path, line_of(gs ? gs : ts),
                         "%s: internal error: type '%s' resolved guard \"auto\" to %d", what, ep->type,
                         (int)g);
        goto out;
    }
    ep->guard = g;
    /* From here each check stands alone: one failing does not hide the
     * next (rc collects them). */
    rc = 0;
    if (ep->ops->validate) {
        char msg[400] = "";
        if (ep->ops->validate(ep->settings, ep->guard, ep->force_guard, msg, sizeof msg)) {
            const config_setting_t *at = setting_named_by(root, msg);
            config_error_set(err, path, line_of(at ? at : gs ? gs : ts), "%s: %s", what,
                             msg[0] ? msg : "invalid settings");
            rc = -1;
        }
    }
    if (rc == 0 && ep->ops->check_file) {
        char *dir = dir_of(path);
        int r = ep->ops->check_file(ep->settings, root, dir, what, err);
        free(dir);
        if (r) rc = -1;
    }

    /* sink */
    for (size_t i = 0; i < c->n_sinks; i++)
        if (c->sinks[i].name && strcmp(c->sinks[i].name, ep->sink_name) == 0) ep->sink = &c->sinks[i];
    if (ep->sink && ep->sink->invalid) {
        rc = -1; /* the sink's own errors are reported at the sink */
    } else if (!ep->sink && c->sinks_incomplete) {
        rc = -1; /* it may be the bad sink whose name is unknown: reported there */
    } else if (!ep->sink) {
        char names[300];
        join_names(names, sizeof names, c->n_sinks, sink_name_at, c);
        config_error_set(err, path, line_of(config_setting_get_member(root, "sink")),
                         "%s: unknown sink '%s'; sinks defined in %s: %s", what, ep->sink_name, c->path,
                         names);
        rc = -1;
    } else if (resolve_dead_letter(c, ep, root, path, what, com.dead_letter, err)) {
        rc = -1;
    }

    /* lease: the main lease, overridden per endpoint; not checked when the
     * main lease or the locker (its command timeout) failed */
    if (ctx->lease_bad || ctx->locker_bad) {
        rc = -1;
        goto out;
    }
    ep->lease = c->lease;
    if (com.lease_ttl_ms) {
        ep->lease.ttl_ms = com.lease_ttl_ms;
        ep->lease.renew_ms = com.lease_ttl_ms / 3;
    }
    if (com.lease_renew_ms) ep->lease.renew_ms = com.lease_renew_ms;
    if (com.lease_retry_ms) {
        ep->lease.retry_ms = com.lease_retry_ms;
        ep->lease.balance_step_ms = com.lease_retry_ms / 2 > 0 ? com.lease_retry_ms / 2 : 1;
    }
    if (check_endpoint_lease(c, ep, root, what, &com, err)) {
        rc = -1;
        goto out;
    }
    ep->failover = com.failover == 1 ? FAILOVER_REPLAY : FAILOVER_GAP;
    if (parse_replay(c, ep, root, what, err)) rc = -1;
out:
    free(type_keys);
    free(common_keys);
    settings_free(endpoint_common_defs, &com);
    config_destroy(&cf);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_cfg_name(const char *n)
{
    size_t len = strlen(n);
    return n[0] != '.' && len > 4 && strcmp(n + len - 4, ".cfg") == 0;
}

static int load_endpoints(struct baton_config *c, const config_setting_t *dir_setting,
                          struct load_ctx *ctx, struct config_error *err)
{
    DIR *d = opendir(c->endpoints_dir);
    if (!d) {
        config_error_set(err, c->path, dir_setting ? line_of(dir_setting) : 0,
                         "cannot open endpoints directory '%s': %s%s", c->endpoints_dir, strerror(errno),
                         dir_setting ? "" : " (endpoints_dir defaults to endpoints.d next to the main file)");
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!is_cfg_name(de->d_name)) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            names = xrealloc(names, cap * sizeof *names);
        }
        names[n++] = xstrdup(de->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_str);
    /* No endpoint files is not an error; main warns once the log settings
     * (level, format) of this very file apply. */

    c->endpoints = xcalloc(n + 1, sizeof *c->endpoints);
    ctx->sites = xcalloc(n + 1, sizeof *ctx->sites);
    int rc = 0;
    /* each file on its own: an error in one does not stop the next */
    for (size_t i = 0; i < n; i++) {
        char *p = path_join(c->endpoints_dir, names[i]);
        if (load_endpoint(c, p, ctx, err)) rc = -1;
        free(p);
    }
    free(ctx->sites);
    ctx->sites = NULL;
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

/* ---- entry points ---- */

/* Every check of the configuration; errors go through err (collected by
 * the caller's config_errors list). Returns 0 or -1. */
static int load_all(const char *path, struct baton_config *out, struct config_error *err)
{
    out->path = xstrdup(path);
    out->key_prefix = xstrdup("baton");
    out->lease = (struct lease_config){ .ttl_ms = 3000, .renew_ms = 1000, .retry_ms = 250, .balance_step_ms = 125 };
    out->log_level = LOG_INFO;
    out->log_format = LOG_FORMAT_TEXT;
    out->drain_timeout_ms = 5000;

    config_t cf;
    config_init(&cf);
    struct main_settings ms = { 0 };
    struct load_ctx ctx = { 0 };
    int rc = 0;
    if (read_file(&cf, path, err)) {
        rc = -1;
        goto out; /* nothing to check without the main file */
    }
    const config_setting_t *root = config_root_setting(&cf);
    if (settings_parse(main_defs, root, main_groups, "main file", &ms, err)) rc = -1;

    out->priority = ms.priority;
    out->prefer_after_ms = ms.prefer_after_ms;
    if (ms.owner && ms.owner[0]) {
        if (check_name(config_setting_get_member(root, "owner"), "main file", "owner", ms.owner, err)) {
            rc = -1;
        } else {
            out->owner = ms.owner;
            ms.owner = NULL;
        }
    }

    /* each group on its own; a group that is no group is reported once */
    bool is_group[sizeof main_groups / sizeof main_groups[0]] = { false };
    const config_setting_t *s;
    for (size_t i = 0; main_groups[i]; i++) {
        s = main_group_member(root, main_groups[i]);
        is_group[i] = !s || strcmp(main_groups[i], "sinks") == 0 || expect_group(s, main_groups[i], err) == 0;
        if (!is_group[i]) rc = -1;
    }
    /* main_groups order: locker, lease, sinks, metrics, log, shutdown, admin */
    const config_setting_t *locker = is_group[0] ? main_group_member(root, "locker") : NULL;
    const config_setting_t *lease = is_group[1] ? main_group_member(root, "lease") : NULL;
    ctx.locker_bad = !is_group[0] || (locker && parse_locker(out, locker, err) != 0);
    ctx.lease_bad = !is_group[1] || parse_lease(&out->lease, lease, err) != 0;
    if (ctx.locker_bad || ctx.lease_bad) rc = -1;
    /* the lease against the locker's command timeout: both must be known */
    if (!ctx.locker_bad && !ctx.lease_bad && check_main_lease(out, lease, locker, err)) {
        ctx.lease_bad = true;
        rc = -1;
    }
    if ((s = main_group_member(root, "sinks")) && parse_sinks(out, s, err)) rc = -1;
    if (is_group[3] && (s = main_group_member(root, "metrics"))) {
        struct metrics_settings m = { 0 };
        int r = settings_parse(metrics_defs, s, NULL, "metrics", &m, err);
        if (r == 0) {
            const config_setting_t *ls = config_setting_get_member(s, "listen");
            r = check_listen(m.listen, ls ? ls : s, err);
        }
        out->metrics_listen = m.listen;
        if (r) rc = -1;
    }
    if (is_group[4] && (s = main_group_member(root, "log"))) {
        struct log_settings l = { 0 };
        if (settings_parse(log_defs, s, NULL, "log", &l, err)) rc = -1;
        out->log_level = (enum log_level)l.level;
        out->log_format = (enum log_format)l.format;
    }
    if (is_group[5] && (s = main_group_member(root, "shutdown"))) {
        struct shutdown_settings sd = { 0 };
        if (settings_parse(shutdown_defs, s, NULL, "shutdown", &sd, err)) rc = -1;
        out->drain_timeout_ms = sd.drain_timeout_ms;
    }
    if (is_group[6] && (s = main_group_member(root, "admin"))) {
        struct admin_settings a = { 0 };
        if (settings_parse(admin_defs, s, NULL, "admin", &a, err)) {
            rc = -1;
        } else if (a.token_file) {
            const config_setting_t *ts = config_setting_get_member(s, "token_file");
            char *tfile = main_relative(path, a.token_file);
            char msg[512];
            char *token = NULL;
            if (secret_resolve(NULL, tfile, &token, msg, sizeof msg)) {
                config_error_set(err, config_setting_source_file(ts), line_of(ts), "admin: %s", msg);
                rc = -1;
            } else if (!token || strlen(token) < 16 || strspn(token, " \t") == strlen(token)) {
                config_error_set(err, config_setting_source_file(ts), line_of(ts),
                                 "admin: token_file %s: the token must be at least 16 characters "
                                 "(e.g. openssl rand -hex 32 > FILE)", tfile);
                secret_free(token);
                rc = -1;
            } else {
                out->admin_token = token;
            }
            free(tfile);
        }
        free(a.token_file);
    }

    const config_setting_t *ds = config_setting_get_member(root, "endpoints_dir");
    if (!ms.endpoints_dir) {
        rc = -1; /* not a string: reported above */
        goto out;
    }
    if (!ms.endpoints_dir[0]) {
        config_error_set(err, path, line_of(ds), "main file: endpoints_dir must not be empty");
        rc = -1;
        goto out;
    }
    out->endpoints_dir = main_relative(path, ms.endpoints_dir);
    if (load_endpoints(out, ds, &ctx, err)) rc = -1;
out:
    settings_free(main_defs, &ms);
    config_destroy(&cf);
    return rc;
}

/* Errors in the order a reader meets them: files in the order they were
 * checked (main file, then endpoint files by name), lines in order within a
 * file (the checks go group by group, not line by line). Stable: errors
 * on one line keep their order. */
static void sort_errors(struct config_errors *e)
{
    size_t *rank = xcalloc(e->n + 1, sizeof *rank);
    for (size_t i = 0; i < e->n; i++) {
        rank[i] = i;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(e->v[j].file, e->v[i].file) == 0) {
                rank[i] = rank[j];
                break;
            }
        }
    }
    for (size_t i = 1; i < e->n; i++) { /* insertion sort: few errors */
        struct config_error x = e->v[i];
        size_t rx = rank[i], j = i;
        while (j > 0 && (rank[j - 1] > rx || (rank[j - 1] == rx && e->v[j - 1].line > x.line))) {
            e->v[j] = e->v[j - 1];
            rank[j] = rank[j - 1];
            j--;
        }
        e->v[j] = x;
        rank[j] = rx;
    }
    free(rank);
}

int config_load_all(const char *path, struct baton_config *out, struct config_errors *errors)
{
    struct config_error err = { 0 };
    config_errors_attach(errors, &err);
    int rc = load_all(path, out, &err);
    config_errors_detach();
    if (rc != 0 && errors->n == 0) {
        /* a failure whose message did not pass through config_error_set on
         * err (none is known): keep what err holds */
        if (!err.msg[0]) config_error_set(&err, path, 0, "invalid configuration");
        errors->v = xrealloc(errors->v, sizeof *errors->v);
        errors->v[errors->n++] = err;
    }
    sort_errors(errors);
    return errors->n ? -1 : 0;
}

void config_errors_print(const struct config_errors *errors, FILE *f)
{
    for (size_t i = 0; i < errors->n; i++) {
        char msg[1200], shown[1300];
        config_error_format(&errors->v[i], msg, sizeof msg);
        /* a URL quoted in the message keeps its password out of the output */
        fprintf(f, "%s\n", redact_urls(msg, shown, sizeof shown));
    }
}

int config_load(const char *path, struct baton_config *out, struct config_error *err)
{
    struct config_error scratch;
    if (!err) err = &scratch;
    memset(err, 0, sizeof *err);
    struct config_errors all = { 0 };
    int rc = config_load_all(path, out, &all);
    if (all.n == 1) {
        *err = all.v[0];
    } else if (all.n > 1) {
        /* each on its own line, compiler style; err is the count, the line
         * the caller prints last */
        config_errors_print(&all, stderr);
        config_error_set(err, NULL, 0, "%zu errors in the configuration (each above, as file:line: message)",
                         all.n);
    }
    config_errors_free(&all);
    return rc;
}

/* The etcd options parsed here: every string is the configuration's own. */
static void etcd_settings_free(struct baton_etcd_opts *o)
{
    char *owned[] = {o->ca_file, o->cert_file, o->key_file, o->user};
    for (size_t i = 0; i < o->n_endpoints; i++) free(o->endpoints[i]);
    free(o->endpoints);
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) free(owned[i]);
    if (o->password) explicit_bzero(o->password, strlen(o->password));
    free(o->password);
    memset(o, 0, sizeof *o);
}

void config_free(struct baton_config *c)
{
    if (!c) return;
    free(c->path);
    free(c->owner);
    redis_opts_clear(&c->locker_redis);
    etcd_settings_free(&c->locker_etcd);
    free(c->locker_pg.conninfo);
    if (c->locker_pg.password) {
        explicit_bzero(c->locker_pg.password, strlen(c->locker_pg.password));
        free(c->locker_pg.password);
    }
    free(c->key_prefix);
    for (size_t i = 0; i < c->n_sinks; i++) {
        struct sink_config *s = &c->sinks[i];
        if (s->ops && s->settings) settings_free(s->ops->settings, s->settings);
        free(s->settings);
        free(s->name);
        free(s->type);
        free(s->file);
        free(s->dead_letter);
    }
    free(c->sinks);
    for (size_t i = 0; i < c->n_endpoints; i++) {
        struct endpoint_config *e = &c->endpoints[i];
        if (e->ops && e->settings) settings_free(e->ops->settings, e->settings);
        free(e->settings);
        free(e->name);
        free(e->type);
        free(e->file);
        free(e->sink_name);
    }
    free(c->endpoints);
    free(c->metrics_listen);
    free(c->endpoints_dir);
    secret_free(c->admin_token);
    memset(c, 0, sizeof *c);
}

const char *config_locker_backend(const struct baton_config *c)
{
    if (!c->has_locker) return "none";
    return locker_types[c->locker_backend];
}

void config_locker_describe(const struct baton_config *c, char *buf, size_t len)
{
    if (!c->has_locker) {
        snprintf(buf, len, "none");
    } else if (c->locker_backend == LOCKER_BACKEND_PG) {
        /* conninfo holds no password (refused when parsed) */
        snprintf(buf, len, "postgresql %s", c->locker_pg.conninfo);
    } else if (c->locker_backend == LOCKER_BACKEND_ETCD) {
        /* shown in logs, STATUS= and errors: user information masked */
        size_t off = (size_t)snprintf(buf, len, "etcd");
        for (size_t i = 0; i < c->locker_etcd.n_endpoints && off < len; i++) {
            char shown[300];
            redact_urls(c->locker_etcd.endpoints[i], shown, sizeof shown);
            off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? "," : " ", shown);
        }
    } else if (c->locker_redis.n_sentinels) {
        size_t off = (size_t)snprintf(buf, len, "redis%s sentinel master %s via", c->locker_redis.tls.enabled ? " (tls)" : "",
                                      c->locker_redis.master_name);
        for (size_t i = 0; i < c->locker_redis.n_sentinels && off < len; i++)
            off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? "," : " ", c->locker_redis.sentinels[i]);
    } else {
        snprintf(buf, len, "redis%s %s:%d", c->locker_redis.tls.enabled ? " (tls)" : "", c->locker_redis.host,
                 c->locker_redis.port);
    }
}

int64_t config_locker_command_timeout(const struct baton_config *c)
{
    if (!c->has_locker) return 0;
    return *locker_command_timeout((struct baton_config *)c);
}

struct baton_locker *config_locker_create(const struct baton_config *c, char *err, size_t errlen)
{
    char lerr[BATON_LOCKER_ERR_MAX] = "";
    struct baton_locker *l = c->locker_backend == LOCKER_BACKEND_PG     ? baton_locker_pg_create(&c->locker_pg, lerr)
                             : c->locker_backend == LOCKER_BACKEND_ETCD ? baton_locker_etcd_create(&c->locker_etcd, lerr)
                                                                        : baton_locker_redis_create(&c->locker_redis, lerr);
    if (l == NULL) {
        char where[300];
        config_locker_describe(c, where, sizeof where);
        char shown[BATON_LOCKER_ERR_MAX + 32];
        snprintf(err, errlen, "locker %s: %s", where, redact_urls(lerr, shown, sizeof shown));
    }
    return l;
}

/* The main file's tables, for the generated reference (src/reference.h):
 * "main" (top level), "locker", "lease", "metrics", "log", "shutdown",
 * "sink" (what every sink has), "endpoint" (what every endpoint has),
 * "replay" (an endpoint's replay = { ... }). NULL for any other name. */
const struct setting_def *config_reference_table(const char *which)
{
    static const struct {
        const char *name;
        const struct setting_def *defs;
    } tables[] = {
        {"main", main_defs},         {"locker", locker_defs},     {"lease", lease_defs},
        {"metrics", metrics_defs},   {"log", log_defs},           {"shutdown", shutdown_defs},
        {"admin", admin_defs},
        {"sink", sink_common_defs},  {"endpoint", endpoint_common_defs}, {"replay", replay_defs},
    };
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        if (strcmp(tables[i].name, which) == 0) return tables[i].defs;
    return NULL;
}
