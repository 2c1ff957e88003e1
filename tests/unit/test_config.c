/* Configuration loader: bad configurations (each asserting the reported
 * file, line and message), good ones (parsed values and defaults), file
 * ordering, guard resolution, lease overrides and secrets.
 *
 * Each case writes its files into a fresh temporary directory. The endpoint
 * and sink types are test-only ops tables registered through
 * config_test_set_registries, so these tests depend on no real endpoint or
 * sink module. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "baton/active_guard.h"
#include "src/config.h"
#include "src/config_test.h"

/* ---- test-only endpoint types ---- */

struct sched_settings {
    char *cron;
    char *timezone;
    char *payload;
};
static const struct setting_def sched_defs[] = {
    { "cron", SETTING_STRING, offsetof(struct sched_settings, cron), .required = true,
      .help = "6-field cron expression" },
    { "timezone", SETTING_STRING, offsetof(struct sched_settings, timezone), .def = "UTC",
      .help = "IANA time zone" },
    { "payload", SETTING_STRING, offsetof(struct sched_settings, payload), .help = "extra payload" },
    SETTINGS_END
};
static enum guard_kind sched_auto(const void *s)
{
    (void)s;
    return GUARD_ONCE;
}
static int sched_validate(const void *settings, enum guard_kind g, bool force, char *msg, size_t len)
{
    const struct sched_settings *s = settings;
    if (!s->cron[0]) {
        snprintf(msg, len, "cron must not be empty");
        return -1;
    }
    if (g == GUARD_ACTIVE && !force) {
        snprintf(msg, len, "schedule runs on every replica; guard active needs force_guard = true");
        return -1;
    }
    return 0;
}
static const struct endpoint_ops test_schedule = {
    .type = "schedule", .settings = sched_defs, .settings_size = sizeof(struct sched_settings),
    .auto_guard = sched_auto, .validate = sched_validate,
};

struct psub_settings {
    char *host;
    int64_t port;
    struct strlist patterns;
};
static const struct setting_def psub_defs[] = {
    { "host", SETTING_STRING, offsetof(struct psub_settings, host), .def = "127.0.0.1" },
    { "port", SETTING_INT, offsetof(struct psub_settings, port), .def = "6379", .min = 1, .max = 65535,
      .help = "TCP port" },
    { "patterns", SETTING_STRLIST, offsetof(struct psub_settings, patterns), .required = true,
      .help = "PSUBSCRIBE patterns" },
    SETTINGS_END
};
static enum guard_kind psub_auto(const void *s)
{
    (void)s;
    return GUARD_ACTIVE;
}
static const struct endpoint_ops test_psub = {
    .type = "psub", .settings = psub_defs, .settings_size = sizeof(struct psub_settings),
    .auto_guard = psub_auto,
};

struct mq_settings {
    char *topic;
    char *shared_group;
};
static const struct setting_def mq_defs[] = {
    { "topic", SETTING_STRING, offsetof(struct mq_settings, topic), .required = true, .help = "topic" },
    { "shared_group", SETTING_STRING, offsetof(struct mq_settings, shared_group), .help = "$share group" },
    SETTINGS_END
};
static enum guard_kind mq_auto(const void *settings)
{
    const struct mq_settings *s = settings;
    return s->shared_group ? GUARD_NONE : GUARD_ACTIVE;
}
static int mq_validate(const void *settings, enum guard_kind g, bool force, char *msg, size_t len)
{
    const struct mq_settings *s = settings;
    if (s->shared_group && g != GUARD_NONE && !force) {
        snprintf(msg, len, "a guard on a $share subscription turns at-least-once into at-most-once; "
                           "set force_guard = true to insist");
        return -1;
    }
    return 0;
}
static const struct endpoint_ops test_mq = {
    .type = "mq", .settings = mq_defs, .settings_size = sizeof(struct mq_settings),
    .auto_guard = mq_auto, .validate = mq_validate,
};

static const struct endpoint_ops *const test_endpoint_types[] = { &test_schedule, &test_psub, &test_mq, NULL };

/* ---- test-only sink types ---- */

static const struct setting_def stdout_defs[] = { SETTINGS_END };
static const struct sink_ops test_stdout = { .type = "stdout", .settings = stdout_defs, .settings_size = 0 };

struct http_settings {
    char *url;
    int64_t timeout_ms;
    struct strlist headers;
};
static const struct setting_def http_defs[] = {
    { "url", SETTING_STRING, offsetof(struct http_settings, url), .required = true, .help = "POST target" },
    { "timeout_ms", SETTING_INT, offsetof(struct http_settings, timeout_ms), .def = "5000", .min = 1,
      .max = 600000 },
    { "headers", SETTING_STRLIST, offsetof(struct http_settings, headers), .help = "static headers" },
    SETTINGS_END
};
static int http_validate(const void *settings, char *msg, size_t len)
{
    const struct http_settings *s = settings;
    if (strncmp(s->url, "http://", 7) != 0 && strncmp(s->url, "https://", 8) != 0) {
        snprintf(msg, len, "url = \"%s\": expected http:// or https://", s->url);
        return -1;
    }
    return 0;
}
static const struct sink_ops test_http = {
    .type = "http", .settings = http_defs, .settings_size = sizeof(struct http_settings),
    .validate = http_validate,
};

static const struct sink_ops *const test_sink_types[] = { &test_stdout, &test_http, NULL };

/* ---- file trees ---- */

#define DIR_MARK "<dir>"
#define LINK_MARK "->" /* "->target": a symlink */
#define FIFO_MARK "<fifo>"
#define SOCKET_MARK "<socket>" /* a bound AF_UNIX socket */

struct file {
    const char *name; /* relative to the case directory */
    const char *text;
};

struct tree {
    char root[64];
    char main[128];
};

static void write_tree(struct tree *t, const struct file *files, bool endpoints_dir)
{
    snprintf(t->root, sizeof t->root, "/tmp/baton-test-config-XXXXXX");
    assert_non_null(mkdtemp(t->root));
    snprintf(t->main, sizeof t->main, "%s/baton.cfg", t->root);
    char p[512];
    if (endpoints_dir) {
        snprintf(p, sizeof p, "%s/endpoints.d", t->root);
        assert_int_equal(mkdir(p, 0755), 0);
    }
    for (size_t i = 0; files && files[i].name; i++) {
        snprintf(p, sizeof p, "%s/%s", t->root, files[i].name);
        if (strcmp(files[i].text, DIR_MARK) == 0) {
            assert_int_equal(mkdir(p, 0755), 0);
        } else if (strcmp(files[i].text, FIFO_MARK) == 0) {
            assert_int_equal(mkfifo(p, 0644), 0);
        } else if (strcmp(files[i].text, SOCKET_MARK) == 0) {
            struct sockaddr_un sa = { .sun_family = AF_UNIX };
            assert_true(strlen(p) < sizeof sa.sun_path);
            memcpy(sa.sun_path, p, strlen(p) + 1);
            int fd = socket(AF_UNIX, SOCK_STREAM, 0);
            assert_true(fd >= 0);
            assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
            close(fd); /* the socket file stays */
        } else if (strncmp(files[i].text, LINK_MARK, 2) == 0) {
            assert_int_equal(symlink(files[i].text + 2, p), 0);
        } else {
            FILE *f = fopen(p, "w");
            if (!f) fail_msg("cannot write %s", p);
            fputs(files[i].text, f);
            fclose(f);
            /* secret files others can read are refused (secret_resolve) */
            if (strncmp(files[i].name, "secrets/", 8) == 0) assert_int_equal(chmod(p, 0600), 0);
        }
    }
}

static void remove_tree(struct tree *t)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->root);
    assert_int_equal(system(cmd), 0);
}

/* ---- bad configurations ---- */

#define SINKS_OUT "sinks = ( { name = \"out\"; type = \"stdout\"; } );\n"
#define EP_A "name = \"a\";\ntype = \"schedule\";\nsink = \"out\";\ncron = \"* * * * * *\";\n"

struct bad_case {
    const char *title;
    struct file files[6];
    const char *err_file; /* relative to the case directory */
    int line;             /* 0: none expected */
    const char *want;
    const char *want2;    /* optional second substring */
};

static const struct bad_case bad_cases[] = {
    { "main: syntax error",
      { { "baton.cfg", "owner = \"t\";\nsinks = ( { name = \"out\"; type = stdout; } );\n" } },
      "baton.cfg", 2, "cannot parse: syntax error", NULL },
    { "main: unknown top-level key",
      { { "baton.cfg", SINKS_OUT "ownr = \"t\";\n" } },
      "baton.cfg", 2, "main file: unknown key 'ownr' (did you mean 'owner'?); valid keys: owner, endpoints_dir, priority, prefer_after_ms, locker, lease, sinks", NULL },
    { "main: owner with a colon",
      { { "baton.cfg", SINKS_OUT "owner = \"a:b\";\n" } },
      "baton.cfg", 2, "owner = \"a:b\": expected 1 to 128 characters out of letters, digits", NULL },
    { "locker: unknown key",
      { { "baton.cfg", SINKS_OUT "locker = {\n  host = \"127.0.0.1\";\n  hots = \"x\";\n};\n" } },
      "baton.cfg", 4, "locker: unknown key 'hots' (did you mean 'host'?); valid keys: backend, type, endpoints, ca_file", NULL },
    { "locker: port out of range",
      { { "baton.cfg", SINKS_OUT "locker = {\n  port = 70000;\n};\n" } },
      "baton.cfg", 3, "locker: port = 70000 is out of range 1..65535", NULL },
    { "locker: port of the wrong type",
      { { "baton.cfg", SINKS_OUT "locker = {\n  port = \"6379\";\n};\n" } },
      "baton.cfg", 3, "locker: 'port' expected an integer", "got a string" },
    { "locker: literal password",
      { { "baton.cfg", SINKS_OUT "locker = {\n  host = \"h\";\n  password = \"hunter2\";\n};\n" } },
      "baton.cfg", 4, "'password' is never written in the config file; use password_env", NULL },
    { "locker: password_env names an unset variable",
      { { "baton.cfg", SINKS_OUT "locker = {\n  password_env = \"BATON_TEST_UNSET_PW\";\n};\n" } },
      "baton.cfg", 3, "environment variable 'BATON_TEST_UNSET_PW' is not set", NULL },
    { "locker: password_file missing",
      { { "baton.cfg", SINKS_OUT "locker = {\n\n  password_file = \"secrets/redis\";\n};\n" } },
      "baton.cfg", 4, "cannot read secret file", "secrets/redis': No such file or directory" },
    { "locker: both password_env and password_file",
      { { "baton.cfg", SINKS_OUT "locker = {\n  password_env = \"HOME\";\n  password_file = \"/etc/hostname\";\n};\n" } },
      "baton.cfg", 4, "give only one", NULL },
    { "locker: unknown type",
      { { "baton.cfg", SINKS_OUT "locker = {\n  type = \"zookeeper\";\n};\n" } },
      "baton.cfg", 3, "locker: type = \"zookeeper\": expected one of redis, etcd", NULL },
    { "locker: unknown backend",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"consul\";\n};\n" } },
      "baton.cfg", 3, "locker: backend = \"consul\": expected one of redis, etcd", NULL },
    { "locker: backend and type",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"redis\";\n  type = \"redis\";\n};\n" } },
      "baton.cfg", 4, "locker: both 'backend' and its older name 'type' given", NULL },
    { "locker: sentinels without master_name",
      { { "baton.cfg", SINKS_OUT "locker = {\n  sentinels = [ \"127.0.0.1:26379\" ];\n};\n" } },
      "baton.cfg", 3, "locker: sentinels need master_name", NULL },
    { "locker: master_name without sentinels",
      { { "baton.cfg", SINKS_OUT "locker = {\n  master_name = \"m\";\n};\n" } },
      "baton.cfg", 3, "locker: master_name needs sentinels", NULL },
    { "locker: sentinels beside host",
      { { "baton.cfg", SINKS_OUT "locker = {\n  sentinels = [ \"127.0.0.1:26379\" ];\n  master_name = \"m\";\n  host = \"x\";\n};\n" } },
      "baton.cfg", 5, "locker: 'host' and sentinels exclude each other", NULL },
    { "locker: sentinel without port",
      { { "baton.cfg", SINKS_OUT "locker = {\n  sentinels = [ \"127.0.0.1\" ];\n  master_name = \"m\";\n};\n" } },
      "baton.cfg", 3, "locker: sentinel \"127.0.0.1\": expected host:port", NULL },
    { "locker: tls not a group",
      { { "baton.cfg", SINKS_OUT "locker = {\n  tls = true;\n};\n" } },
      "baton.cfg", 3, "locker: 'tls' expected a group tls = { key = value; ... }", NULL },
    { "locker: tls unknown key",
      { { "baton.cfg", SINKS_OUT "locker = {\n  tls = {\n    ca = \"x\";\n  };\n};\n" } },
      "baton.cfg", 4, "locker: tls: unknown key 'ca'", NULL },
    { "locker: tls cert without key",
      { { "baton.cfg", SINKS_OUT "locker = {\n  tls = {\n    cert_file = \"/etc/hostname\";\n  };\n};\n" } },
      "baton.cfg", 4, "locker: tls: cert_file and key_file go together", NULL },
    { "locker: tls CA missing",
      { { "baton.cfg", SINKS_OUT "locker = {\n  tls = {\n    ca_file = \"no/ca.pem\";\n  };\n};\n" } },
      "baton.cfg", 4, "locker: tls: ca_file ", "No such file or directory" },
    { "locker: hash_tag with etcd",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"etcd\";\n  endpoints = [ \"http://127.0.0.1:2379\" ];\n  hash_tag = true;\n};\n" } },
      "baton.cfg", 5, "locker: 'hash_tag' is a setting of the redis backend, not of etcd", NULL },
    { "locker: tls with etcd",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"etcd\";\n  endpoints = [ \"http://127.0.0.1:2379\" ];\n  tls = { };\n};\n" } },
      "baton.cfg", 5, "locker: 'tls' is a setting of the redis backend, not of etcd", NULL },
    { "locker: postgresql without conninfo",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"postgresql\";\n};\n" } },
      "baton.cfg", 3, "locker: backend \"postgresql\" needs conninfo", NULL },
    { "locker: postgresql conninfo with a password",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"postgresql\";\n  conninfo = \"host=db password=s3cret\";\n};\n" } },
      "baton.cfg", 4, "locker: conninfo holds a password; set password_file", NULL },
    { "locker: postgresql conninfo libpq cannot parse",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"postgresql\";\n  conninfo = \"host=db bogus_key=1\";\n};\n" } },
      "baton.cfg", 4, "locker: conninfo is not a libpq connection string", NULL },
    { "locker: postgresql with a Redis host",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"postgresql\";\n  conninfo = \"host=db\";\n  host = \"x\";\n};\n" } },
      "baton.cfg", 5, "locker: 'host' is a setting of the redis backend, not of postgresql", NULL },
    { "locker: postgresql with a Redis port",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"postgresql\";\n  conninfo = \"host=db\";\n  port = 5432;\n};\n" } },
      "baton.cfg", 5, "locker: 'port' is a setting of the redis backend, not of postgresql", NULL },
    { "locker: etcd with a conninfo",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"etcd\";\n  endpoints = [ \"http://127.0.0.1:2379\" ];\n  conninfo = \"host=db\";\n};\n" } },
      "baton.cfg", 5, "locker: 'conninfo' is a setting of the postgresql backend, not of etcd", NULL },
    { "locker: etcd without endpoints",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"etcd\";\n};\n" } },
      "baton.cfg", 3, "locker: backend \"etcd\" needs endpoints", NULL },
    { "locker: etcd endpoint without scheme",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"etcd\";\n  endpoints = [ \"127.0.0.1:2379\" ];\n};\n" } },
      "baton.cfg", 4, "locker: endpoint \"127.0.0.1:2379\": expected http://host:port or https://host:port", NULL },
    { "locker: etcd with a Redis host",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"etcd\";\n  endpoints = [ \"http://127.0.0.1:2379\" ];\n  host = \"x\";\n};\n" } },
      "baton.cfg", 5, "locker: 'host' is a setting of the redis backend, not of etcd", NULL },
    { "locker: redis with etcd endpoints",
      { { "baton.cfg", SINKS_OUT "locker = {\n  endpoints = [ \"http://127.0.0.1:2379\" ];\n};\n" } },
      "baton.cfg", 3, "locker: 'endpoints' is a setting of the etcd backend, not of redis", NULL },
    { "locker: etcd TLS files with http",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"etcd\";\n  endpoints = [ \"http://127.0.0.1:2379\" ];\n  ca_file = \"/etc/hostname\";\n};\n" } },
      "baton.cfg", 4, "locker: endpoint \"http://127.0.0.1:2379\" is plain http while TLS files are given; use https://", NULL },
    { "locker: etcd CA file missing",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"etcd\";\n  endpoints = [ \"https://127.0.0.1:2379\" ];\n  ca_file = \"no/such/ca.crt\";\n};\n" } },
      "baton.cfg", 5, "locker: ca_file ", "No such file or directory" },
    { "locker: etcd cert without key",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"etcd\";\n  endpoints = [ \"https://127.0.0.1:2379\" ];\n  cert_file = \"/etc/hostname\";\n};\n" } },
      "baton.cfg", 5, "locker: cert_file and key_file go together", NULL },
    { "locker: etcd user without password",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"etcd\";\n  endpoints = [ \"http://127.0.0.1:2379\" ];\n  user = \"baton\";\n};\n" } },
      "baton.cfg", 5, "locker: etcd user \"baton\" needs password_env or password_file", NULL },
    { "lease: etcd ttl not whole seconds",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"etcd\";\n  endpoints = [ \"http://127.0.0.1:2379\" ];\n};\nlease = {\n  ttl_ms = 2500;\n};\n" } },
      "baton.cfg", 7, "lease: ttl 2500 ms: etcd leases are whole seconds, at least 2000 ms", NULL },
    { "lease: etcd ttl below the minimum",
      { { "baton.cfg", SINKS_OUT "locker = {\n  backend = \"etcd\";\n  endpoints = [ \"http://127.0.0.1:2379\" ];\n};\nlease = {\n  ttl_ms = 1000;\n  renew_ms = 300;\n};\n" } },
      "baton.cfg", 8, "lease: ttl 1000 ms: etcd leases are whole seconds", NULL },
    { "locker: not a group",
      { { "baton.cfg", SINKS_OUT "locker = \"redis://x\";\n" } },
      "baton.cfg", 2, "'locker' expected a group", NULL },
    { "lease: ttl equal to renew",
      { { "baton.cfg", SINKS_OUT "lease = {\n  ttl_ms = 1000;\n  renew_ms = 1000;\n};\n" } },
      "baton.cfg", 4, "lease: ttl 1000 ms, renew 1000 ms", "renew interval must be shorter than the ttl" },
    { "lease: retry 0",
      { { "baton.cfg", SINKS_OUT "lease = { retry_ms = 0; };\n" } },
      "baton.cfg", 2, "lease: retry_ms = 0 is out of range 1..3600000", NULL },
    { "lease: unknown key",
      { { "baton.cfg", SINKS_OUT "lease = {\n ttl = 3000;\n};\n" } },
      "baton.cfg", 3, "lease: unknown key 'ttl'; valid keys: ttl_ms, renew_ms, retry_ms, balance_step_ms", NULL },
    { "sinks: a group instead of a list",
      { { "baton.cfg", "owner = \"t\";\nsinks = { name = \"out\"; type = \"stdout\"; };\n" } },
      "baton.cfg", 2, "'sinks' expected a list ( {", NULL },
    { "sinks: element not a group",
      { { "baton.cfg", "sinks = (\n  \"out\",\n  \"x\"\n);\n" } },
      "baton.cfg", 2, "sinks: element 1: expected a group", NULL },
    { "sinks: unknown sink type",
      { { "baton.cfg", "sinks = (\n  { name = \"k\";\n    type = \"kafka\"; }\n);\n" } },
      "baton.cfg", 3, "sink 'k': unknown sink type 'kafka'; known types: stdout, http", NULL },
    { "sinks: missing type",
      { { "baton.cfg", "sinks = (\n  { name = \"k\"; }\n);\n" } },
      "baton.cfg", 2, "sink 'k': missing required key 'type' (a string, one of stdout, http)", NULL },
    { "main: empty endpoints_dir",
      { { "baton.cfg", SINKS_OUT "endpoints_dir = \"\";\n" } },
      "baton.cfg", 2, "main file: endpoints_dir must not be empty", NULL },
    { "sinks: http sink missing required url",
      { { "baton.cfg", "sinks = (\n  { name = \"out\"; type = \"stdout\"; },\n  { name = \"hook\";\n    type = \"http\"; }\n);\n" } },
      "baton.cfg", 3, "sink 'hook': missing required key 'url' (POST target)", NULL },
    { "sinks: sink type validation",
      { { "baton.cfg", "sinks = (\n  { name = \"hook\"; type = \"http\"; url = \"ftp://x\"; }\n);\n" } },
      "baton.cfg", 2, "sink 'hook': url = \"ftp://x\": expected http:// or https://", NULL },
    { "sinks: key of another sink type",
      { { "baton.cfg", "sinks = (\n  { name = \"out\"; type = \"stdout\";\n    url = \"http://x\"; }\n);\n" } },
      "baton.cfg", 3, "sink 'out': unknown key 'url'; valid keys: name, type", NULL },
    { "sinks: duplicate name",
      { { "baton.cfg", "sinks = (\n  { name = \"out\"; type = \"stdout\"; },\n  { name = \"out\"; type = \"http\"; url = \"http://h/\"; }\n);\n" } },
      "baton.cfg", 3, "duplicate sink name 'out' (first defined at ", "baton.cfg:2)" },
    { "sinks: bad name",
      { { "baton.cfg", "sinks = (\n  { name = \"my sink\"; type = \"stdout\"; }\n);\n" } },
      "baton.cfg", 2, "name = \"my sink\": expected 1 to 128 characters", NULL },
    { "metrics: listen without port",
      { { "baton.cfg", SINKS_OUT "metrics = {\n  listen = \"127.0.0.1\";\n};\n" } },
      "baton.cfg", 3, "metrics: listen = \"127.0.0.1\": expected host:port", NULL },
    { "metrics: listen port out of range",
      { { "baton.cfg", SINKS_OUT "metrics = {\n  listen = \"127.0.0.1:70000\";\n};\n" } },
      "baton.cfg", 3, "port 70000 is out of range 0..65535", NULL },
    { "log: unknown level",
      { { "baton.cfg", SINKS_OUT "log = {\n  level = \"verbose\";\n};\n" } },
      "baton.cfg", 3, "log: level = \"verbose\": expected one of error, warn, info, debug", NULL },
    { "log: unknown format",
      { { "baton.cfg", SINKS_OUT "log = {\n  level = \"info\";\n  format = \"yaml\";\n};\n" } },
      "baton.cfg", 4, "log: format = \"yaml\": expected one of text, json", NULL },
    { "log: unknown key next to format",
      { { "baton.cfg", SINKS_OUT "log = {\n  format = \"json\";\n  fromat = \"json\";\n};\n" } },
      "baton.cfg", 4, "log: unknown key 'fromat' (did you mean 'format'?); valid keys: level, format", NULL },
    { "shutdown: negative drain timeout",
      { { "baton.cfg", SINKS_OUT "shutdown = { drain_timeout_ms = -1; };\n" } },
      "baton.cfg", 2, "shutdown: drain_timeout_ms = -1 is out of range 0..3600000", NULL },
    { "endpoints_dir missing",
      { { "baton.cfg", SINKS_OUT "endpoints_dir = \"nope.d\";\n" } },
      "baton.cfg", 2, "cannot open endpoints directory", "nope.d': No such file or directory" },
    { "endpoint: syntax error",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", "name = \"a\";\ntype = \"schedule\";\nsink = ;\n" } },
      "endpoints.d/a.cfg", 3, "cannot parse: syntax error", NULL },
    { "endpoint: empty file (missing type)",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", "" } },
      "endpoints.d/a.cfg", 1, "endpoint file 'a.cfg': missing required key 'type' (a string, one of schedule, psub, mq)", NULL },
    { "endpoint: unknown type",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", "name = \"a\";\ntype = \"kafka\";\n" } },
      "endpoints.d/a.cfg", 2, "endpoint 'a': unknown endpoint type 'kafka'; known types: schedule, psub, mq", NULL },
    { "endpoint: type not a string",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", "name = \"a\";\ntype = 5;\n" } },
      "endpoints.d/a.cfg", 2, "endpoint 'a': expected a string for 'type'", NULL },
    { "endpoint: misspelt type-specific key",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", "name = \"a\";\ntype = \"schedule\";\nsink = \"out\";\ncrn = \"* * * * * *\";\n" } },
      "endpoints.d/a.cfg", 4, "endpoint 'a': unknown key 'crn' (did you mean 'cron'?); valid keys: name, type, sink, dead_letter, enabled, guard", "cron, timezone, payload" },
    { "endpoint: missing required type-specific key",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", "name = \"a\";\ntype = \"schedule\";\nsink = \"out\";\n" } },
      "endpoints.d/a.cfg", 1, "endpoint 'a': missing required key 'cron' (6-field cron expression)", NULL },
    { "endpoint: missing name",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/x.cfg", "type = \"schedule\";\nsink = \"out\";\ncron = \"* * * * * *\";\n" } },
      "endpoints.d/x.cfg", 1, "endpoint file 'x.cfg': missing required key 'name'", NULL },
    { "endpoint: bad name",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", "name = \"a/b\";\ntype = \"schedule\";\nsink = \"out\";\ncron = \"* * * * * *\";\n" } },
      "endpoints.d/a.cfg", 1, "name = \"a/b\": expected 1 to 128 characters", NULL },
    { "endpoint: bad guard",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", EP_A "guard = \"sometimes\";\n" } },
      "endpoints.d/a.cfg", 5, "endpoint 'a': guard = \"sometimes\": expected one of auto, active, once, none", NULL },
    { "endpoint: bad queue policy",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", EP_A "queue_policy = \"drop_newest\";\n" } },
      "endpoints.d/a.cfg", 5, "queue_policy = \"drop_newest\": expected one of block, drop_oldest", NULL },
    { "endpoint: queue_size 0",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", EP_A "queue_size = 0;\n" } },
      "endpoints.d/a.cfg", 5, "queue_size = 0 is out of range 1..100000000", NULL },
    { "endpoint: enabled not a boolean",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", EP_A "enabled = \"yes\";\n" } },
      "endpoints.d/a.cfg", 5, "'enabled' expected a boolean (true or false)", "got a string" },
    { "endpoint: type-specific value of the wrong type",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", "name = \"a\";\ntype = \"psub\";\nsink = \"out\";\npatterns = [\"x.*\"];\nport = \"6379\";\n" } },
      "endpoints.d/a.cfg", 5, "endpoint 'a': 'port' expected an integer (TCP port), got a string", NULL },
    { "endpoint: unknown sink",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", "name = \"a\";\ntype = \"schedule\";\nsink = \"nope\";\ncron = \"* * * * * *\";\n" } },
      "endpoints.d/a.cfg", 3, "endpoint 'a': unknown sink 'nope'; sinks defined in ", "baton.cfg: out" },
    { "endpoint: dead_letter names no sink",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", EP_A "dead_letter = \"nope\";\n" } },
      "endpoints.d/a.cfg", 5, "endpoint 'a': dead_letter: unknown sink 'nope'; sinks defined in ", "baton.cfg: out" },
    { "endpoint: dead_letter is its own sink",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", EP_A "dead_letter = \"out\";\n" } },
      "endpoints.d/a.cfg", 5, "endpoint 'a': dead_letter: 'out' is the sink itself", NULL },
    { "sink: dead_letter names no sink (reported for the endpoint using it)",
      { { "baton.cfg", "sinks = ( { name = \"out\"; type = \"stdout\";\n dead_letter = \"gone\"; } );\n" },
        { "endpoints.d/a.cfg", EP_A } },
      "baton.cfg", 1, "sink 'out' (used by endpoint 'a'): dead_letter: unknown sink 'gone'", NULL },
    { "endpoint: sink reference without any sinks",
      { { "baton.cfg", "owner = \"t\";\n" }, { "endpoints.d/a.cfg", EP_A } },
      "endpoints.d/a.cfg", 3, "unknown sink 'out'", "(none)" },
    { "endpoint: duplicate name across files",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", EP_A },
        { "endpoints.d/b.cfg", "# copy\ntype = \"schedule\";\nname = \"a\";\nsink = \"out\";\ncron = \"0 * * * * *\";\n" } },
      "endpoints.d/b.cfg", 3, "duplicate endpoint name 'a' (also defined at ", "endpoints.d/a.cfg:1)" },
    { "endpoint: lease renew not below the main ttl",
      { { "baton.cfg", SINKS_OUT "lease = { ttl_ms = 3000; };\n" }, { "endpoints.d/a.cfg", EP_A "\nlease_renew_ms = 5000;\n" } },
      "endpoints.d/a.cfg", 6, "endpoint 'a': lease ttl 3000 ms, renew 5000 ms", "renew interval must be shorter than the ttl" },
    { "timings: main lease ttl 100 / renew 95 (no locker)",
      { { "baton.cfg", SINKS_OUT "lease = {\n  ttl_ms = 100;\n  renew_ms = 95;\n};\n" } },
      "baton.cfg", 4, "lease: ttl 100 ms, renew 95 ms", "ttl - safety margin must exceed the renew interval" },
    { "timings: ttl - margin - renew below the locker command timeout",
      { { "baton.cfg", SINKS_OUT "locker = { command_timeout_ms = 1000; };\nlease = {\n  ttl_ms = 1000;\n  renew_ms = 900;\n};\n" } },
      "baton.cfg", 5, "ttl - safety margin - renew = 50 ms is shorter than the locker command timeout (1000 ms)",
      "(command timeout: locker command_timeout_ms)" },
    { "timings: default lease against a long command timeout",
      { { "baton.cfg", SINKS_OUT "locker = {\n  host = \"h\";\n  command_timeout_ms = 2000;\n};\n" } },
      "baton.cfg", 4, "lease: ttl 3000 ms, renew 1000 ms", "no lease group" },
    { "timings: endpoint lease_ttl_ms override too short for the command timeout",
      { { "baton.cfg", SINKS_OUT "locker = { host = \"h\"; command_timeout_ms = 1000; };\n" }, { "endpoints.d/a.cfg", EP_A "\nlease_ttl_ms = 1000;\n" } },
      "endpoints.d/a.cfg", 6, "endpoint 'a': lease ttl 1000 ms, renew 333 ms", "ttl from lease_ttl_ms, renew from lease_ttl_ms / 3" },
    { "endpoint: type validation (guard on a shared subscription)",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/m.cfg", "name = \"m\";\ntype = \"mq\";\nsink = \"out\";\ntopic = \"t\";\nshared_group = \"g\";\nguard = \"active\";\n" } },
      "endpoints.d/m.cfg", 6, "endpoint 'm': a guard on a $share subscription", "force_guard = true" },
    { "endpoint: a validation message naming a setting points at its line",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", "name = \"a\";\ntype = \"schedule\";\nsink = \"out\";\n\ncron = \"\";\n" } },
      "endpoints.d/a.cfg", 5, "endpoint 'a': cron must not be empty", NULL },
    { "endpoint: disabled endpoints are validated too",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", "name = \"a\";\ntype = \"schedule\";\nsink = \"out\";\nenabled = false;\ncron = 5;\n" } },
      "endpoints.d/a.cfg", 5, "'cron' expected a string", NULL },
    { "endpoint: a directory named *.cfg",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", DIR_MARK } },
      "endpoints.d/a.cfg", 0, "cannot read file: it is a directory, not a regular file", NULL },
    { "endpoint: dangling symlink",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", LINK_MARK "/nonexistent/baton-x.cfg" } },
      "endpoints.d/a.cfg", 0, "cannot read file: No such file or directory", NULL },
    { "endpoint: libconfig duplicate key",
      { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", EP_A "name = \"b\";\n" } },
      "endpoints.d/a.cfg", 5, "duplicate setting name", NULL },
};

static void test_bad_configs(void **state)
{
    (void)state;
    unsetenv("BATON_TEST_UNSET_PW");
    size_t n = sizeof bad_cases / sizeof bad_cases[0];
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        const struct bad_case *bc = &bad_cases[i];
        struct tree t;
        write_tree(&t, bc->files, true);
        struct baton_config c = { 0 };
        struct config_errors all = { 0 };
        int rc = config_load_all(t.main, &c, &all);
        config_free(&c);
        /* the first error found is the one each case names (some have more:
         * "sinks: element not a group" finds both elements) */
        struct config_error err = { 0 };
        if (all.n) err = all.v[0];
        config_errors_free(&all);
        char want_file[512], line[1200];
        snprintf(want_file, sizeof want_file, "%s/%s", t.root, bc->err_file);
        config_error_format(&err, line, sizeof line);
        print_message("  [%2zu] %-55s -> %s\n", i + 1, bc->title, line + (strncmp(line, t.root, strlen(t.root)) == 0 ? strlen(t.root) + 1 : 0));
        bool ok = rc == -1 && strcmp(err.file, want_file) == 0 && err.line == bc->line &&
                  strstr(err.msg, bc->want) && (!bc->want2 || strstr(err.msg, bc->want2));
        if (!ok) {
            failed++;
            print_error("FAILED case %zu (%s): rc=%d file=%s line=%d msg=%s; wanted %s:%d '%s' '%s'\n", i + 1,
                        bc->title, rc, err.file, err.line, err.msg, bc->err_file, bc->line, bc->want,
                        bc->want2 ? bc->want2 : "");
        }
        remove_tree(&t);
    }
    print_message("  %zu bad configurations, %zu failed\n", n, failed);
    assert_true(n >= 25);
    assert_int_equal(failed, 0);
}

static void test_missing_main_file(void **state)
{
    (void)state;
    struct baton_config c = { 0 };
    struct config_error err = { 0 };
    assert_int_equal(config_load("/nonexistent/baton-test/baton.cfg", &c, &err), -1);
    config_free(&c);
    assert_string_equal(err.file, "/nonexistent/baton-test/baton.cfg");
    assert_int_equal(err.line, 0);
    assert_non_null(strstr(err.msg, "cannot read file: No such file or directory"));
}

static void test_missing_default_endpoints_dir(void **state)
{
    (void)state;
    const struct file files[] = { { "baton.cfg", SINKS_OUT }, { NULL, NULL } };
    struct tree t;
    write_tree(&t, files, false);
    struct baton_config c = { 0 };
    struct config_error err = { 0 };
    assert_int_equal(config_load(t.main, &c, &err), -1);
    config_free(&c);
    assert_string_equal(err.file, t.main);
    assert_non_null(strstr(err.msg, "cannot open endpoints directory"));
    assert_non_null(strstr(err.msg, "endpoints_dir defaults to endpoints.d next to the main file"));
    remove_tree(&t);
}

/* ---- lease timings (issue 13 item 8) ----
 *
 * --check-config and start-up validate lease timings with one function,
 * baton_active_guard_check_timings, the one baton_active_guard_create applies; the
 * loader passes it the effective lease of the main file and of every
 * endpoint and the locker's command timeout (0 without a locker). A failure
 * is a configuration error with file:line, so both exit 78. */

/* Loads files; expects an error at err_file:line whose message holds want
 * and want2 (optional). */
static void expect_config_error(const struct file *files, const char *err_file, int line,
                                const char *want, const char *want2)
{
    struct tree t;
    write_tree(&t, files, true);
    struct baton_config c = { 0 };
    struct config_errors all = { 0 };
    int rc = config_load_all(t.main, &c, &all);
    config_free(&c);
    struct config_error err = { 0 };
    if (all.n) err = all.v[0];
    config_errors_free(&all);
    char want_file[512];
    snprintf(want_file, sizeof want_file, "%s/%s", t.root, err_file);
    print_message("  -> %s:%d: %s\n", err.file + (strncmp(err.file, t.root, strlen(t.root)) == 0 ? strlen(t.root) + 1 : 0),
                  err.line, err.msg);
    bool ok = rc == -1 && strcmp(err.file, want_file) == 0 && err.line == line && strstr(err.msg, want) &&
              (!want2 || strstr(err.msg, want2));
    remove_tree(&t);
    if (!ok)
        fail_msg("rc=%d %s:%d: %s; wanted %s:%d '%s' '%s'", rc, err.file, err.line, err.msg, err_file, line,
                 want, want2 ? want2 : "");
}

/* ---- every error in one run (--check-config) ----
 *
 * config_load_all goes on after an error: each key of a group, each group
 * of the main file, each sink and each endpoint file is checked; a syntax
 * error stops its own file only, and what rests on a part that failed (the
 * sink an endpoint names, the lease against a bad locker) is not reported
 * a second time. */

/* Loads files and checks the errors found: want[i] = { file, line,
 * message part }, n of them, in this order (files in the order checked,
 * lines in order within a file). */
struct want_error {
    const char *file;
    int line;
    const char *part;
};
static void expect_errors(const struct file *files, const struct want_error *want, size_t n)
{
    struct tree t;
    write_tree(&t, files, true);
    struct baton_config c = { 0 };
    struct config_errors all = { 0 };
    int rc = config_load_all(t.main, &c, &all);
    config_free(&c);
    size_t root = strlen(t.root) + 1;
    for (size_t i = 0; i < all.n; i++)
        print_message("  -> %s:%d: %s\n", all.v[i].file + (strncmp(all.v[i].file, t.root, root - 1) == 0 ? root : 0),
                      all.v[i].line, all.v[i].msg);
    char why[1500] = "";
    if (rc != -1 || all.n != n) {
        snprintf(why, sizeof why, "rc=%d, %zu errors; wanted -1, %zu errors", rc, all.n, n);
    } else {
        for (size_t i = 0; i < n && !why[0]; i++) {
            char want_file[512];
            snprintf(want_file, sizeof want_file, "%s/%s", t.root, want[i].file);
            if (strcmp(all.v[i].file, want_file) != 0 || all.v[i].line != want[i].line ||
                !strstr(all.v[i].msg, want[i].part))
                snprintf(why, sizeof why, "error %zu is %s:%d: %s; wanted %s:%d '%s'", i + 1, all.v[i].file,
                         all.v[i].line, all.v[i].msg, want[i].file, want[i].line, want[i].part);
        }
    }
    config_errors_free(&all);
    remove_tree(&t);
    if (why[0]) fail_msg("%s", why);
}

/* Three mistakes in three places of the main file: a key of the locker, a
 * value of the log group, a sink's unknown type. All three, each at its
 * line; the endpoint naming a good sink loads. */
static void test_all_errors_main_file(void **state)
{
    (void)state;
    const struct file files[] = {
        { "baton.cfg",
          "locker = {\n"                                  /* 1 */
          "  host = \"127.0.0.1\";\n"                     /* 2 */
          "  port = 70000;\n"                             /* 3: out of range */
          "};\n"                                          /* 4 */
          "log = { level = \"loud\"; };\n"                /* 5: not a level */
          "sinks = (\n"                                   /* 6 */
          "  { name = \"out\"; type = \"stdout\"; },\n"   /* 7 */
          "  { name = \"bad\"; type = \"carrier_pigeon\"; }\n" /* 8: unknown type */
          ");\n" },
        { "endpoints.d/a.cfg", EP_A },
        { NULL, NULL },
    };
    const struct want_error want[] = {
        { "baton.cfg", 3, "locker: port = 70000 is out of range 1..65535" },
        { "baton.cfg", 5, "log: level = \"loud\": expected one of error, warn, info, debug" },
        { "baton.cfg", 8, "sink 'bad': unknown sink type 'carrier_pigeon'" },
    };
    expect_errors(files, want, 3);
}

/* One group, several bad keys: each is reported (a bad value does not stop
 * the others); a misspelt required key is one error, not also "missing". */
static void test_all_errors_in_one_group(void **state)
{
    (void)state;
    const struct file files[] = {
        { "baton.cfg", SINKS_OUT },
        { "endpoints.d/a.cfg",
          "name = \"a\";\n"               /* 1 */
          "type = \"schedule\";\n"        /* 2 */
          "sink = \"out\";\n"             /* 3 */
          "queue_size = 0;\n"             /* 4: out of range */
          "crn = \"* * * * * *\";\n"      /* 5: misspelt cron (required) */
          "enabled = \"yes\";\n" },       /* 6: not a boolean */
        { NULL, NULL },
    };
    const struct want_error want[] = {
        { "endpoints.d/a.cfg", 4, "queue_size = 0 is out of range" },
        { "endpoints.d/a.cfg", 5, "unknown key 'crn' (did you mean 'cron'?)" },
        { "endpoints.d/a.cfg", 6, "'enabled' expected a boolean" },
    };
    expect_errors(files, want, 3);
}

/* An error in one endpoint file and another in a second: both, in file
 * order; a syntax error stops its own file only (c.cfg), and the endpoint
 * naming a sink that failed (d.cfg names "bad") adds nothing. */
static void test_all_errors_across_endpoint_files(void **state)
{
    (void)state;
    const struct file files[] = {
        { "baton.cfg", "sinks = (\n  { name = \"out\"; type = \"stdout\"; },\n"
                       "  { name = \"bad\"; type = \"stdout\"; colour = 1; }\n);\n" },
        { "endpoints.d/a.cfg", "name = \"a\";\ntype = \"schedule\";\nsink = \"nowhere\";\ncron = \"* * * * * *\";\n" },
        { "endpoints.d/b.cfg", "name = \"b\";\ntype = \"schedule\";\nsink = \"out\";\ncron = 5;\n" },
        { "endpoints.d/c.cfg", "name = \"c\";\ntype = \"schedule\";\nsink = = \"out\";\n" },
        { "endpoints.d/d.cfg", "name = \"d\";\ntype = \"schedule\";\nsink = \"bad\";\ncron = \"* * * * * *\";\n" },
        { "endpoints.d/e.cfg", "name = \"e\";\ntype = \"schedule\";\nsink = \"out\";\ncron = \"* * * * * *\";\n" },
        { NULL, NULL },
    };
    const struct want_error want[] = {
        { "baton.cfg", 3, "sink 'bad': unknown key 'colour'" },
        { "endpoints.d/a.cfg", 3, "endpoint 'a': unknown sink 'nowhere'" },
        { "endpoints.d/b.cfg", 4, "endpoint 'b': 'cron' expected a string" },
        { "endpoints.d/c.cfg", 3, "cannot parse: syntax error" },
    };
    expect_errors(files, want, 4);
}

/* What rests on a part that failed is not checked again: a locker that
 * failed hides the endpoint's replay and lease checks against it (no
 * "needs a locker" for a locker that is there but wrong). */
static void test_all_errors_no_cascade_from_locker(void **state)
{
    (void)state;
    const struct file files[] = {
        { "baton.cfg", SINKS_OUT "locker = { host = \"\"; };\n" },
        { "endpoints.d/a.cfg", EP_A "lease_ttl_ms = 3000;\n" },
        { NULL, NULL },
    };
    const struct want_error want[] = {
        { "baton.cfg", 2, "locker: host must not be empty" },
    };
    expect_errors(files, want, 1);
}

/* config_load, the command line's: one error comes back as is; several are
 * printed (stderr) and err counts them. */
static void test_config_load_counts_several(void **state)
{
    (void)state;
    const struct file files[] = {
        { "baton.cfg", SINKS_OUT "log = { level = \"loud\"; format = \"xml\"; };\n" },
        { "endpoints.d/a.cfg", EP_A },
        { NULL, NULL },
    };
    struct tree t;
    write_tree(&t, files, true);
    struct baton_config c = { 0 };
    struct config_error err = { 0 };
    fflush(stderr);
    int rc = config_load(t.main, &c, &err);
    config_free(&c);
    remove_tree(&t);
    assert_int_equal(rc, -1);
    assert_string_equal(err.file, "");
    assert_int_equal(err.line, 0);
    assert_non_null(strstr(err.msg, "2 errors in the configuration"));
}

/* Loads files; expects success and returns nothing (the caller checks what
 * it needs through *out when non-NULL; the caller frees it). */
static void expect_config_ok(const struct file *files, struct baton_config *out, struct tree *t)
{
    write_tree(t, files, true);
    struct config_error err = { 0 };
    if (config_load(t->main, out, &err)) fail_msg("%s:%d: %s", err.file, err.line, err.msg);
}

/* The reproduction of the issue: ttl 100 / renew 95 passed --check-config
 * and failed at start (exit 69). Now a config error at renew_ms, with and
 * without a locker (the margin alone breaks it: 100 - 10 <= 95). */
static void test_timings_ttl100_renew95_rejected(void **state)
{
    (void)state;
    const struct file no_locker[] = {
        { "baton.cfg", SINKS_OUT "lease = {\n  ttl_ms = 100;\n  renew_ms = 95;\n};\n" }, { NULL, NULL } };
    expect_config_error(no_locker, "baton.cfg", 4, "lease: ttl 100 ms, renew 95 ms",
                        "ttl - safety margin must exceed the renew interval");
    const struct file with_locker[] = {
        { "baton.cfg", SINKS_OUT "locker = { host = \"127.0.0.1\"; };\n"
                       "lease = {\n  ttl_ms = 100;\n  renew_ms = 95;\n};\n" }, { NULL, NULL } };
    expect_config_error(with_locker, "baton.cfg", 5, "lease: ttl 100 ms, renew 95 ms", NULL);
    /* only ttl_ms given: renew = ttl / 3 = 33 leaves 100 - 10 - 33 = 57 ms; the
     * command timeout was not given, so its default (1000) is lowered to fit */
    const struct file ttl_only[] = {
        { "baton.cfg", SINKS_OUT "locker = { host = \"127.0.0.1\"; };\n"
                       "lease = {\n  retry_ms = 50;\n  ttl_ms = 100;\n};\n" }, { "endpoints.d/a.cfg", EP_A },
        { NULL, NULL } };
    struct baton_config c = { 0 };
    struct tree t;
    expect_config_ok(ttl_only, &c, &t);
    assert_int_equal(c.locker_redis.command_timeout_ms, 57);
    config_free(&c);
    remove_tree(&t);
    /* given explicitly, it is checked: reported at ttl_ms */
    const struct file ttl_only_given[] = {
        { "baton.cfg", SINKS_OUT "locker = { host = \"127.0.0.1\"; command_timeout_ms = 1000; };\n"
                       "lease = {\n  retry_ms = 50;\n  ttl_ms = 100;\n};\n" }, { NULL, NULL } };
    expect_config_error(ttl_only_given, "baton.cfg", 5, "lease: ttl 100 ms, renew 33 ms",
                        "shorter than the locker command timeout (1000 ms)");
}

/* ttl 1000 / renew 900 leaves 1000 - 50 - 900 = 50 ms after a renewal that
 * times out: shorter than the locker's command timeout (1000 ms, given or
 * default). Without a locker nothing can time out: accepted. */
static void test_timings_command_timeout_rejected(void **state)
{
    (void)state;
    const struct file given[] = {
        { "baton.cfg", SINKS_OUT "locker = {\n  command_timeout_ms = 1000;\n};\n"
                       "lease = {\n  ttl_ms = 1000;\n  renew_ms = 900;\n};\n" }, { NULL, NULL } };
    expect_config_error(given, "baton.cfg", 7,
                        "ttl - safety margin - renew = 50 ms is shorter than the locker command timeout (1000 ms)",
                        "(command timeout: locker command_timeout_ms)");
    /* not given: the default (1000) is lowered to what the lease leaves
     * (50 ms here, the floor), instead of refusing a config that never
     * mentioned it */
    const struct file by_default[] = {
        { "baton.cfg", SINKS_OUT "locker = { host = \"127.0.0.1\"; };\n"
                       "lease = {\n  ttl_ms = 1000;\n  renew_ms = 900;\n};\n" }, { "endpoints.d/a.cfg", EP_A },
        { NULL, NULL } };
    {
        struct baton_config c0 = { 0 };
        struct tree t0;
        expect_config_ok(by_default, &c0, &t0);
        assert_int_equal(c0.locker_redis.command_timeout_ms, 50);
        config_free(&c0);
        remove_tree(&t0);
    }
    /* the plain ttl 1000 (renew 333) leaves 617 ms: the default becomes 617 */
    const struct file ttl1000[] = {
        { "baton.cfg", SINKS_OUT "locker = { host = \"127.0.0.1\"; };\nlease = { ttl_ms = 1000; };\n" },
        { "endpoints.d/a.cfg", EP_A }, { NULL, NULL } };
    {
        struct baton_config c0 = { 0 };
        struct tree t0;
        expect_config_ok(ttl1000, &c0, &t0);
        assert_int_equal(c0.locker_redis.command_timeout_ms, 617);
        config_free(&c0);
        remove_tree(&t0);
    }
    /* below the 50 ms floor even the default cannot fit: refused */
    const struct file too_short[] = {
        { "baton.cfg", SINKS_OUT "locker = { host = \"127.0.0.1\"; };\n"
                       "lease = {\n  ttl_ms = 1000;\n  renew_ms = 920;\n};\n" }, { NULL, NULL } };
    expect_config_error(too_short, "baton.cfg", 5, "shorter than the locker command timeout (1000 ms)",
                        "(command timeout: the locker's default command_timeout_ms)");
    /* a shorter command timeout makes the same lease valid */
    const struct file short_cmd[] = {
        { "baton.cfg", SINKS_OUT "locker = { command_timeout_ms = 50; };\n"
                       "lease = { ttl_ms = 1000; renew_ms = 900; };\n" }, { "endpoints.d/a.cfg", EP_A },
        { NULL, NULL } };
    struct baton_config c = { 0 };
    struct tree t;
    expect_config_ok(short_cmd, &c, &t);
    assert_int_equal(c.lease.ttl_ms, 1000);
    assert_int_equal(c.lease.renew_ms, 900);
    config_free(&c);
    remove_tree(&t);
    /* no locker: command timeout 0, only ttl > renew + margin applies */
    const struct file no_locker[] = {
        { "baton.cfg", SINKS_OUT "lease = { ttl_ms = 1000; renew_ms = 900; };\n" }, { "endpoints.d/a.cfg", EP_A },
        { NULL, NULL } };
    memset(&c, 0, sizeof c);
    expect_config_ok(no_locker, &c, &t);
    assert_false(c.has_locker);
    config_free(&c);
    remove_tree(&t);
}

/* The defaults (ttl 3000, renew 1000, margin 150: 1850 ms >= 1000 ms) pass
 * with the default command timeout, for the main file and for endpoints. */
static void test_timings_defaults_accepted(void **state)
{
    (void)state;
    const struct file files[] = {
        { "baton.cfg", SINKS_OUT "locker = { host = \"127.0.0.1\"; };\n" },
        { "endpoints.d/a.cfg", EP_A },
        { "endpoints.d/b.cfg", "name = \"b\"; type = \"psub\"; sink = \"out\"; patterns = [\"x.*\"];\n" },
        { NULL, NULL } };
    struct baton_config c = { 0 };
    struct tree t;
    expect_config_ok(files, &c, &t);
    assert_true(c.has_locker);
    assert_int_equal(c.locker_redis.command_timeout_ms, 1000);
    assert_int_equal(c.lease.ttl_ms, 3000);
    assert_int_equal(c.lease.renew_ms, 1000);
    assert_int_equal(c.n_endpoints, 2);
    char msg[400];
    for (size_t i = 0; i < c.n_endpoints; i++) {
        const struct lease_config *l = &c.endpoints[i].lease;
        assert_int_equal(l->ttl_ms, 3000);
        assert_int_equal(baton_active_guard_check_timings(l->ttl_ms, l->renew_ms, l->retry_ms, 0,
                                                    c.locker_redis.command_timeout_ms, msg, sizeof msg), 0);
    }
    config_free(&c);
    remove_tree(&t);
    /* a valid endpoint override is accepted and applied */
    const struct file ovr[] = {
        { "baton.cfg", SINKS_OUT "locker = { host = \"127.0.0.1\"; };\n" },
        { "endpoints.d/a.cfg", EP_A "lease_ttl_ms = 6000;\nlease_renew_ms = 2000;\n" },
        { NULL, NULL } };
    memset(&c, 0, sizeof c);
    expect_config_ok(ovr, &c, &t);
    assert_int_equal(c.endpoints[0].lease.ttl_ms, 6000);
    assert_int_equal(c.endpoints[0].lease.renew_ms, 2000);
    config_free(&c);
    remove_tree(&t);
}

/* The main lease is valid; an endpoint's override breaks it: reported in the
 * endpoint's own file, at the override's line. */
static void test_timings_endpoint_override_rejected(void **state)
{
    (void)state;
    /* lease_renew_ms 2500 under the main ttl 3000: 3000 - 150 - 2500 = 350 < 1000 */
    const struct file renew[] = {
        { "baton.cfg", SINKS_OUT "locker = { host = \"127.0.0.1\"; command_timeout_ms = 1000; };\n" },
        { "endpoints.d/a.cfg", EP_A "# comment\nlease_renew_ms = 2500;\n" },
        { NULL, NULL } };
    expect_config_error(renew, "endpoints.d/a.cfg", 6, "endpoint 'a': lease ttl 3000 ms, renew 2500 ms",
                        "ttl from the main file's lease, renew from lease_renew_ms");
    /* lease_ttl_ms 1000 (renew ttl / 3): reported at lease_ttl_ms */
    const struct file ttl[] = {
        { "baton.cfg", SINKS_OUT "locker = { host = \"127.0.0.1\"; command_timeout_ms = 1000; };\n" },
        { "endpoints.d/a.cfg", EP_A "lease_retry_ms = 100;\nlease_ttl_ms = 1000;\n" },
        { NULL, NULL } };
    expect_config_error(ttl, "endpoints.d/a.cfg", 6, "ttl - safety margin - renew = 617 ms", "lease_ttl_ms / 3");
    /* ttl 100 / renew 95 as overrides, without a locker: the margin breaks it */
    const struct file both[] = {
        { "baton.cfg", SINKS_OUT },
        { "endpoints.d/a.cfg", EP_A "lease_ttl_ms = 100;\n\nlease_renew_ms = 95;\n" },
        { NULL, NULL } };
    expect_config_error(both, "endpoints.d/a.cfg", 7, "endpoint 'a': lease ttl 100 ms, renew 95 ms",
                        "ttl from lease_ttl_ms, renew from lease_renew_ms");
    /* a second endpoint file is the one reported, not the valid first one */
    const struct file second[] = {
        { "baton.cfg", SINKS_OUT "locker = { host = \"127.0.0.1\"; };\n" },
        { "endpoints.d/a.cfg", EP_A },
        { "endpoints.d/b.cfg", "name = \"b\";\ntype = \"psub\";\nsink = \"out\";\npatterns = [\"x\"];\nlease_renew_ms = 2900;\n" },
        { NULL, NULL } };
    expect_config_error(second, "endpoints.d/b.cfg", 5, "endpoint 'b': lease ttl 3000 ms, renew 2900 ms", NULL);
}

/* The loader accepts exactly what the guard accepts: for a grid of timings,
 * with and without a locker (command timeouts 0, 200, 1000), config_load
 * succeeds iff baton_active_guard_check_timings does. */
static void test_timings_loader_agrees_with_guard(void **state)
{
    (void)state;
    static const int64_t ttls[] = { 10, 100, 500, 1000, 1300, 2000, 3000 };
    static const int64_t renews[] = { 0, 1, 95, 300, 900, 1500, 2999 };
    static const int64_t cmds[] = { 0, 200, 1000 };
    int accepted = 0, rejected = 0;
    for (size_t a = 0; a < sizeof ttls / sizeof *ttls; a++)
        for (size_t b = 0; b < sizeof renews / sizeof *renews; b++)
            for (size_t k = 0; k < sizeof cmds / sizeof *cmds; k++) {
                char main_text[512], lease[128] = "", locker[128] = "";
                if (renews[b])
                    snprintf(lease, sizeof lease, "lease = { ttl_ms = %lld; renew_ms = %lld; };\n",
                             (long long)ttls[a], (long long)renews[b]);
                else
                    snprintf(lease, sizeof lease, "lease = { ttl_ms = %lld; };\n", (long long)ttls[a]);
                if (cmds[k])
                    snprintf(locker, sizeof locker, "locker = { command_timeout_ms = %lld; };\n",
                             (long long)cmds[k]);
                snprintf(main_text, sizeof main_text, SINKS_OUT "%s%s", locker, lease);
                /* an endpoint without overrides inherits the main lease */
                const struct file files[] = { { "baton.cfg", main_text }, { "endpoints.d/a.cfg", EP_A },
                                              { NULL, NULL } };
                struct tree t;
                write_tree(&t, files, true);
                struct baton_config c = { 0 };
                struct config_error err = { 0 };
                int rc = config_load(t.main, &c, &err);
                if (rc == 0) {
                    assert_int_equal(c.n_endpoints, 1);
                    assert_int_equal(c.endpoints[0].lease.ttl_ms, ttls[a]);
                }
                config_free(&c);
                remove_tree(&t);
                char msg[400];
                int want = baton_active_guard_check_timings(ttls[a], renews[b], 250, 0, cmds[k], msg, sizeof msg);
                if ((rc == 0) != (want == 0))
                    fail_msg("ttl %lld renew %lld cmd %lld: loader %s (%s), guard %s (%s)", (long long)ttls[a],
                             (long long)renews[b], (long long)cmds[k], rc ? "rejects" : "accepts", err.msg,
                             want ? "rejects" : "accepts", want ? msg : "");
                if (rc == 0) accepted++;
                else rejected++;
            }
    print_message("  %d accepted, %d rejected, all as the guard decides\n", accepted, rejected);
    assert_true(accepted > 0 && rejected > 0);
}

/* ---- input limits (issue 20): only regular files, at most 1 MiB ----
 *
 * libconfig opens and reads whatever it is given: a FIFO blocked
 * --check-config forever. Loads that meet a FIFO therefore run in a child
 * process under alarm(): a regression kills the child (SIGALRM) and fails
 * the test instead of hanging it. */

#define CHILD_TIMEOUT_S 10

struct child_result {
    int rc;
    struct config_error err;
};

/* config_load(main_path) in a child process bounded by CHILD_TIMEOUT_S.
 * Returns 0, or -1 with why filled when the child hung or died (the caller
 * cleans up, then fails). */
static int load_in_child(const char *main_path, struct child_result *out, char *why, size_t why_len)
{
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        alarm(CHILD_TIMEOUT_S);
        struct child_result r;
        memset(&r, 0, sizeof r);
        struct baton_config c = { 0 };
        r.rc = config_load(main_path, &c, &r.err);
        config_free(&c);
        ssize_t w = write(pfd[1], &r, sizeof r);
        close(pfd[1]);
        _exit(w == (ssize_t)sizeof r ? 0 : 3);
    }
    close(pfd[1]);
    memset(out, 0, sizeof *out);
    ssize_t got = read(pfd[0], out, sizeof *out); /* the child's result, or EOF when it dies */
    close(pfd[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
        snprintf(why, why_len, "config_load(%s) hung: killed after %d s", main_path, CHILD_TIMEOUT_S);
        return -1;
    }
    if (WIFSIGNALED(status)) {
        snprintf(why, why_len, "config_load(%s): the child died of signal %d", main_path, WTERMSIG(status));
        return -1;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got != (ssize_t)sizeof *out) {
        snprintf(why, why_len, "config_load(%s): the child exited with %d (read %zd bytes)", main_path,
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1, got);
        return -1;
    }
    if (out->rc == 0) print_message("  -> %.3f s: loaded\n", secs);
    else print_message("  -> %.3f s: %s:%d: %s\n", secs, out->err.file, out->err.line, out->err.msg);
    return 0;
}

/* Loads files in a child; expects an error at err_file (line 0) holding
 * want, or success when want is NULL. */
static void expect_in_child(const struct file *files, const char *err_file, const char *want)
{
    struct tree t;
    write_tree(&t, files, true);
    struct child_result r;
    char why[800];
    int crc = load_in_child(t.main, &r, why, sizeof why);
    char want_file[512];
    snprintf(want_file, sizeof want_file, "%s/%s", t.root, err_file ? err_file : "");
    remove_tree(&t);
    if (crc) fail_msg("%s", why);
    if (!want) {
        if (r.rc != 0) fail_msg("%s:%d: %s", r.err.file, r.err.line, r.err.msg);
        return;
    }
    if (r.rc != -1 || strcmp(r.err.file, want_file) != 0 || r.err.line != 0 || !strstr(r.err.msg, want))
        fail_msg("rc=%d %s:%d: %s; wanted %s:0 '%s'", r.rc, r.err.file, r.err.line, r.err.msg, err_file, want);
}

static void test_fifo_endpoint_file_refused(void **state)
{
    (void)state;
    const struct file files[] = {
        { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", EP_A }, { "endpoints.d/b.cfg", FIFO_MARK },
        { NULL, NULL } };
    expect_in_child(files, "endpoints.d/b.cfg", "cannot read file: it is a FIFO, not a regular file");
}

static void test_fifo_main_file_refused(void **state)
{
    (void)state;
    const struct file files[] = { { "baton.cfg", FIFO_MARK }, { NULL, NULL } };
    expect_in_child(files, "baton.cfg", "cannot read file: it is a FIFO, not a regular file");
}

static void test_other_non_regular_files_refused(void **state)
{
    (void)state;
    /* a symlink to a FIFO: followed, and refused for what it points to */
    const struct file link_fifo[] = {
        { "baton.cfg", SINKS_OUT }, { "fifo", FIFO_MARK }, { "endpoints.d/a.cfg", LINK_MARK "../fifo" },
        { NULL, NULL } };
    expect_in_child(link_fifo, "endpoints.d/a.cfg",
                            "cannot read file: it is a symbolic link to a FIFO, not a regular file");
    const struct file sock[] = {
        { "baton.cfg", SINKS_OUT }, { "endpoints.d/s.cfg", SOCKET_MARK }, { NULL, NULL } };
    expect_in_child(sock, "endpoints.d/s.cfg", "cannot read file: it is a socket, not a regular file");

    /* a character device as the main file (the files of the case directory
     * are not used) */
    struct child_result r;
    char why[800];
    if (load_in_child("/dev/null", &r, why, sizeof why)) fail_msg("%s", why);
    assert_int_equal(r.rc, -1);
    assert_string_equal(r.err.file, "/dev/null");
    assert_int_equal(r.err.line, 0);
    assert_string_equal(r.err.msg, "cannot read file: it is a character device, not a regular file");

    /* a FIFO not named *.cfg is not looked at */
    const struct file ignored[] = {
        { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", EP_A }, { "endpoints.d/notes", FIFO_MARK },
        { "endpoints.d/b.cfg.tmp", FIFO_MARK }, { NULL, NULL } };
    expect_in_child(ignored, NULL, NULL);
}

/* A symlink to a regular file is followed as before. */
static void test_symlink_to_regular_file_accepted(void **state)
{
    (void)state;
    const struct file files[] = {
        { "baton.cfg", SINKS_OUT }, { "shared", DIR_MARK }, { "shared/a.cfg", EP_A },
        { "endpoints.d/a.cfg", LINK_MARK "../shared/a.cfg" }, { NULL, NULL } };
    struct tree t;
    struct baton_config c = { 0 };
    expect_config_ok(files, &c, &t);
    assert_int_equal(c.n_endpoints, 1);
    assert_string_equal(c.endpoints[0].name, "a");
    config_free(&c);
    remove_tree(&t);
}

/* text followed by comment lines: exactly size bytes (size > strlen(text)). */
static char *padded(const char *text, size_t size)
{
    size_t len = strlen(text);
    assert_true(size > len);
    char *s = malloc(size + 1);
    assert_non_null(s);
    memcpy(s, text, len);
    while (len < size) {
        size_t left = size - len;
        size_t line = left > 80 ? 80 : left; /* bytes of this line, newline included */
        if (left > 80 && left - 80 < 2) line = left - 2; /* no 1-byte last line */
        if (line == 1) {
            s[len++] = '\n';
            continue;
        }
        s[len] = '#';
        memset(s + len + 1, 'x', line - 2);
        s[len + line - 1] = '\n';
        len += line;
    }
    s[size] = '\0';
    return s;
}

static void test_size_cap(void **state)
{
    (void)state;
    assert_int_equal(CONFIG_FILE_MAX_BYTES, 1024 * 1024);

    /* the main file, one byte over the cap: refused before parsing */
    char *over = padded(SINKS_OUT, CONFIG_FILE_MAX_BYTES + 1);
    assert_int_equal(strlen(over), CONFIG_FILE_MAX_BYTES + 1);
    const struct file main_over[] = { { "baton.cfg", over }, { NULL, NULL } };
    expect_config_error(main_over, "baton.cfg", 0,
                        "cannot read file: it is 1.0 MiB (1048577 bytes); configuration files are limited "
                        "to 1 MiB (1048576 bytes)", NULL);

    /* an endpoint file over the cap names that file */
    char *ep_over = padded(EP_A, CONFIG_FILE_MAX_BYTES + 1);
    const struct file ep_files[] = { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", ep_over }, { NULL, NULL } };
    expect_config_error(ep_files, "endpoints.d/a.cfg", 0, "(1048577 bytes); configuration files are limited to 1 MiB",
                        NULL);
    free(ep_over);

    /* the size is given in MiB with one decimal */
    char *big = padded(SINKS_OUT, 2411725);
    const struct file main_big[] = { { "baton.cfg", big }, { NULL, NULL } };
    expect_config_error(main_big, "baton.cfg", 0, "it is 2.3 MiB (2411725 bytes)", NULL);
    free(big);

    /* a main file of exactly the cap and an endpoint file just under it,
     * both valid (padded with comments): accepted */
    over[CONFIG_FILE_MAX_BYTES] = '\0'; /* the last byte was a newline: still one comment line */
    over[CONFIG_FILE_MAX_BYTES - 1] = '\n';
    char *ep_under = padded(EP_A, CONFIG_FILE_MAX_BYTES - 1);
    const struct file ok_files[] = { { "baton.cfg", over }, { "endpoints.d/a.cfg", ep_under }, { NULL, NULL } };
    struct tree t;
    struct baton_config c = { 0 };
    expect_config_ok(ok_files, &c, &t);
    assert_int_equal(c.n_sinks, 1);
    assert_int_equal(c.n_endpoints, 1);
    assert_string_equal(c.endpoints[0].name, "a");
    struct stat st;
    assert_int_equal(stat(t.main, &st), 0);
    assert_int_equal(st.st_size, CONFIG_FILE_MAX_BYTES);
    assert_int_equal(stat(c.endpoints[0].file, &st), 0);
    assert_int_equal(st.st_size, CONFIG_FILE_MAX_BYTES - 1);
    config_free(&c);
    remove_tree(&t);
    free(ep_under);
    free(over);
}

/* log.format (issue 20): "text" (default) or "json". */
static void test_log_format(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        enum log_format want;
    } cases[] = {
        { SINKS_OUT, LOG_FORMAT_TEXT },
        { SINKS_OUT "log = { level = \"warn\"; };\n", LOG_FORMAT_TEXT },
        { SINKS_OUT "log = { format = \"text\"; };\n", LOG_FORMAT_TEXT },
        { SINKS_OUT "log = { level = \"info\"; format = \"json\"; };\n", LOG_FORMAT_JSON },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct file files[] = { { "baton.cfg", cases[i].text }, { NULL, NULL } };
        struct tree t;
        struct baton_config c = { 0 };
        expect_config_ok(files, &c, &t);
        if (c.log_format != cases[i].want) fail_msg("case %zu: format %d, wanted %d", i, (int)c.log_format, (int)cases[i].want);
        config_free(&c);
        remove_tree(&t);
    }
    const struct file upper[] = { { "baton.cfg", SINKS_OUT "log = {\n  format = \"JSON\";\n};\n" }, { NULL, NULL } };
    expect_config_error(upper, "baton.cfg", 3, "log: format = \"JSON\": expected one of text, json", NULL);
    const struct file number[] = { { "baton.cfg", SINKS_OUT "log = {\n\n  format = 1;\n};\n" }, { NULL, NULL } };
    expect_config_error(number, "baton.cfg", 4, "log: 'format' expected one of \"text, json\"", "got an integer");
}

/* ---- good configurations ---- */

static void test_defaults(void **state)
{
    (void)state;
    const struct file files[] = { { "baton.cfg", "# nothing but comments\n" }, { NULL, NULL } };
    struct tree t;
    write_tree(&t, files, true);
    struct baton_config c = { 0 };
    struct config_error err = { 0 };
    if (config_load(t.main, &c, &err)) fail_msg("%s:%d: %s", err.file, err.line, err.msg);
    assert_string_equal(c.path, t.main);
    assert_null(c.owner);
    assert_false(c.has_locker);
    assert_null(c.locker_redis.host);
    assert_string_equal(c.key_prefix, "baton");
    assert_int_equal(c.lease.ttl_ms, 3000);
    assert_int_equal(c.lease.renew_ms, 1000);
    assert_int_equal(c.lease.retry_ms, 250);
    assert_int_equal(c.lease.balance_step_ms, 125);
    assert_int_equal(c.n_sinks, 0);
    assert_int_equal(c.n_endpoints, 0); /* empty directory: allowed (baton warns at start) */
    assert_null(c.metrics_listen);
    assert_int_equal(c.log_level, LOG_INFO);
    assert_int_equal(c.log_format, LOG_FORMAT_TEXT);
    assert_int_equal(c.drain_timeout_ms, 5000);
    char want[256];
    snprintf(want, sizeof want, "%s/endpoints.d", t.root);
    assert_string_equal(c.endpoints_dir, want);
    config_free(&c);
    assert_null(c.path);
    remove_tree(&t);
}

static const char full_main[] =
    "owner = \"tenant1\";\n"
    "locker = {\n"
    "  type = \"redis\"; host = \"10.0.0.5\"; port = 6380; db = 3;\n"
    "  user = \"baton\";\n"
    "  password_env = \"BATON_TEST_REDIS_PW\";\n"
    "  connect_timeout_ms = 1500; command_timeout_ms = 700;\n"
    "  prefix = \"bt\";\n"
    "};\n"
    "lease = { ttl_ms = 6000; retry_ms = 300; };\n"
    "sinks = ( { name = \"out\"; type = \"stdout\"; },\n"
    "          { name = \"hook\"; type = \"http\"; url = \"http://127.0.0.1:8080/in\"; headers = [\"A: b\"]; } );\n"
    "metrics = { listen = \"[::1]:0\"; };\n"
    "log = { level = \"debug\"; };\n"
    "endpoints_dir = \"eps\";\n"
    "shutdown = { drain_timeout_ms = 0; };\n";

static void test_full_config(void **state)
{
    (void)state;
    const struct file files[] = {
        { "baton.cfg", full_main },
        { "eps", DIR_MARK },
        { "eps/20-orders.cfg",
          "name = \"orders\"; type = \"psub\"; sink = \"hook\"; enabled = false;\n"
          "patterns = (\"orders.*\", \"refunds.*\"); port = 7000;\n"
          "queue_size = 5; queue_policy = \"drop_oldest\"; queue_batch_max = 1;\n"
          "lease_ttl_ms = 9000; lease_retry_ms = 100;\n"
          "once_ttl_ms = 1000; once_fail_open = true;\n" },
        { "eps/10-tick.cfg", "name = \"tick\"; type = \"schedule\"; sink = \"out\"; cron = \"*/5 * * * * *\";\n"
                             "guard = \"none\"; lease_renew_ms = 500;\n" },
        { "eps/30-shared.cfg", "name = \"shared\"; type = \"mq\"; sink = \"out\"; topic = \"t\"; shared_group = \"g\";\n" },
        { NULL, NULL },
    };
    struct tree t;
    write_tree(&t, files, false);
    setenv("BATON_TEST_REDIS_PW", "pw-from-env", 1);
    struct baton_config c = { 0 };
    struct config_error err = { 0 };
    if (config_load(t.main, &c, &err)) fail_msg("%s:%d: %s", err.file, err.line, err.msg);

    assert_string_equal(c.owner, "tenant1");
    assert_true(c.has_locker);
    assert_string_equal(c.locker_redis.host, "10.0.0.5");
    assert_int_equal(c.locker_redis.port, 6380);
    assert_int_equal(c.locker_redis.db, 3);
    assert_string_equal(c.locker_redis.user, "baton");
    assert_string_equal(c.locker_redis.password, "pw-from-env");
    assert_int_equal(c.locker_redis.connect_timeout_ms, 1500);
    assert_int_equal(c.locker_redis.command_timeout_ms, 700);
    assert_string_equal(c.key_prefix, "bt");
    assert_int_equal(c.lease.ttl_ms, 6000);
    assert_int_equal(c.lease.renew_ms, 2000); /* ttl / 3 */
    assert_int_equal(c.lease.retry_ms, 300);
    assert_int_equal(c.lease.balance_step_ms, 150); /* retry / 2 */
    assert_string_equal(c.metrics_listen, "[::1]:0");
    assert_int_equal(c.log_level, LOG_DEBUG);
    assert_int_equal(c.drain_timeout_ms, 0);

    assert_int_equal(c.n_sinks, 2);
    assert_string_equal(c.sinks[0].name, "out");
    assert_string_equal(c.sinks[0].type, "stdout");
    assert_ptr_equal(c.sinks[0].ops, &test_stdout);
    assert_int_equal(c.sinks[0].line, 10);
    assert_string_equal(c.sinks[0].file, t.main);
    assert_string_equal(c.sinks[1].name, "hook");
    assert_ptr_equal(c.sinks[1].ops, &test_http);
    const struct http_settings *hs = c.sinks[1].settings;
    assert_string_equal(hs->url, "http://127.0.0.1:8080/in");
    assert_int_equal(hs->timeout_ms, 5000);
    assert_int_equal(hs->headers.n, 1);
    assert_string_equal(hs->headers.v[0], "A: b");

    char dir[256];
    snprintf(dir, sizeof dir, "%s/eps", t.root);
    assert_string_equal(c.endpoints_dir, dir);
    assert_int_equal(c.n_endpoints, 3);

    /* file name order: 10-tick, 20-orders, 30-shared */
    const struct endpoint_config *tick = &c.endpoints[0], *orders = &c.endpoints[1], *shared = &c.endpoints[2];
    assert_string_equal(tick->name, "tick");
    assert_string_equal(orders->name, "orders");
    assert_string_equal(shared->name, "shared");

    char f[300];
    snprintf(f, sizeof f, "%s/eps/20-orders.cfg", t.root);
    assert_string_equal(orders->file, f);
    assert_string_equal(orders->type, "psub");
    assert_ptr_equal(orders->ops, &test_psub);
    assert_string_equal(orders->sink_name, "hook");
    assert_ptr_equal(orders->sink, &c.sinks[1]);
    assert_false(orders->enabled);
    assert_int_equal(orders->guard, GUARD_ACTIVE); /* auto -> psub default */
    assert_false(orders->force_guard);
    assert_int_equal(orders->queue_size, 5);
    assert_int_equal(orders->queue_policy, QUEUE_DROP_OLDEST);
    assert_int_equal(orders->queue_batch_max, 1);
    assert_int_equal(orders->lease.ttl_ms, 9000);
    assert_int_equal(orders->lease.renew_ms, 3000);
    assert_int_equal(orders->lease.retry_ms, 100);
    assert_int_equal(orders->lease.balance_step_ms, 50);
    assert_int_equal(orders->once_ttl_ms, 1000);
    assert_true(orders->once_fail_open);
    const struct psub_settings *ps = orders->settings;
    assert_string_equal(ps->host, "127.0.0.1");
    assert_int_equal(ps->port, 7000);
    assert_int_equal(ps->patterns.n, 2);
    assert_string_equal(ps->patterns.v[1], "refunds.*");

    /* defaults of the common keys */
    assert_true(tick->enabled);
    assert_int_equal(tick->guard, GUARD_NONE); /* explicit */
    assert_ptr_equal(tick->sink, &c.sinks[0]);
    assert_int_equal(tick->queue_size, 10000);
    assert_int_equal(tick->queue_policy, QUEUE_BLOCK);
    assert_int_equal(tick->queue_batch_max, 256);
    assert_int_equal(tick->once_ttl_ms, 3600000);
    assert_false(tick->once_fail_open);
    assert_int_equal(tick->lease.ttl_ms, 6000);   /* main */
    assert_int_equal(tick->lease.renew_ms, 500);  /* override */
    assert_int_equal(tick->lease.retry_ms, 300);
    assert_int_equal(tick->lease.balance_step_ms, 150);
    const struct sched_settings *ss = tick->settings;
    assert_string_equal(ss->cron, "*/5 * * * * *");
    assert_string_equal(ss->timezone, "UTC");
    assert_null(ss->payload);

    assert_int_equal(shared->guard, GUARD_NONE); /* auto consults the settings */

    config_free(&c);
    unsetenv("BATON_TEST_REDIS_PW");
    remove_tree(&t);
}

static void test_file_selection_and_order(void **state)
{
    (void)state;
    const struct file files[] = {
        { "baton.cfg", SINKS_OUT },
        { "endpoints.d/b.cfg", "name = \"b\"; type = \"schedule\"; sink = \"out\"; cron = \"1 * * * * *\";\n" },
        { "endpoints.d/a.cfg", "name = \"a\"; type = \"schedule\"; sink = \"out\"; cron = \"2 * * * * *\";\n" },
        { "endpoints.d/10.cfg", "name = \"ten\"; type = \"schedule\"; sink = \"out\"; cron = \"3 * * * * *\";\n" },
        { "endpoints.d/B.cfg", "name = \"B\"; type = \"schedule\"; sink = \"out\"; cron = \"4 * * * * *\";\n" },
        { "endpoints.d/notes.txt", "this is not libconfig" },
        { "endpoints.d/a.cfg.bak", "neither is this" },
        { "endpoints.d/.hidden.cfg", "nor this" },
        { "endpoints.d/.cfg", "nor this" },
        { NULL, NULL },
    };
    struct tree t;
    write_tree(&t, files, true);
    struct baton_config c = { 0 };
    struct config_error err = { 0 };
    if (config_load(t.main, &c, &err)) fail_msg("%s:%d: %s", err.file, err.line, err.msg);
    assert_int_equal(c.n_endpoints, 4);
    assert_string_equal(c.endpoints[0].name, "ten"); /* "10.cfg" < "B.cfg" < "a.cfg" < "b.cfg" */
    assert_string_equal(c.endpoints[1].name, "B");
    assert_string_equal(c.endpoints[2].name, "a");
    assert_string_equal(c.endpoints[3].name, "b");
    for (size_t i = 0; i < c.n_endpoints; i++) assert_int_equal(c.endpoints[i].guard, GUARD_ONCE);
    config_free(&c);
    remove_tree(&t);
}

static void test_guard_resolution(void **state)
{
    (void)state;
    struct {
        const char *text;
        enum guard_kind want;
    } cases[] = {
        { "name = \"x\"; type = \"schedule\"; sink = \"out\"; cron = \"c\";\n", GUARD_ONCE },
        { "name = \"x\"; type = \"schedule\"; sink = \"out\"; cron = \"c\"; guard = \"auto\";\n", GUARD_ONCE },
        { "name = \"x\"; type = \"schedule\"; sink = \"out\"; cron = \"c\"; guard = \"none\";\n", GUARD_NONE },
        { "name = \"x\"; type = \"schedule\"; sink = \"out\"; cron = \"c\"; guard = \"active\"; force_guard = true;\n", GUARD_ACTIVE },
        { "name = \"x\"; type = \"psub\"; sink = \"out\"; patterns = \"p\";\n", GUARD_ACTIVE },
        { "name = \"x\"; type = \"psub\"; sink = \"out\"; patterns = \"p\"; guard = \"once\";\n", GUARD_ONCE },
        { "name = \"x\"; type = \"mq\"; sink = \"out\"; topic = \"t\";\n", GUARD_ACTIVE },
        { "name = \"x\"; type = \"mq\"; sink = \"out\"; topic = \"t\"; shared_group = \"g\";\n", GUARD_NONE },
        { "name = \"x\"; type = \"mq\"; sink = \"out\"; topic = \"t\"; shared_group = \"g\"; guard = \"active\"; force_guard = true;\n", GUARD_ACTIVE },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct file files[] = { { "baton.cfg", SINKS_OUT }, { "endpoints.d/x.cfg", cases[i].text }, { NULL, NULL } };
        struct tree t;
        write_tree(&t, files, true);
        struct baton_config c = { 0 };
        struct config_error err = { 0 };
        if (config_load(t.main, &c, &err)) fail_msg("case %zu: %s:%d: %s", i, err.file, err.line, err.msg);
        assert_int_equal(c.n_endpoints, 1);
        if (c.endpoints[0].guard != cases[i].want)
            fail_msg("case %zu: guard %s, wanted %s", i, guard_kind_name(c.endpoints[0].guard),
                     guard_kind_name(cases[i].want));
        assert_int_equal(c.endpoints[0].force_guard, strstr(cases[i].text, "force_guard = true") != NULL);
        config_free(&c);
        remove_tree(&t);
    }
}

/* config_load on files, expecting an error at file (relative to the tree)
 * and line whose message holds want. */
static void expect_error_at(const struct file *files, const char *file, int line, const char *want)
{
    struct tree t;
    write_tree(&t, files, true);
    struct baton_config c = { 0 };
    struct config_error err = { 0 };
    assert_int_equal(config_load(t.main, &c, &err), -1);
    char path[300];
    snprintf(path, sizeof path, "%s/%s", t.root, file);
    if (strcmp(err.file, path) != 0 || err.line != line || !strstr(err.msg, want))
        fail_msg("got %s:%d: %s; wanted %s:%d: ...%s...", err.file, err.line, err.msg, path, line, want);
    config_free(&c);
    remove_tree(&t);
}

/* @include of a directory: libconfig 1.5's scanner would end the process
 * ("input in flex scanner failed", exit 2); a FIFO would block it. Both are
 * a configuration error at the @include's file and line, in the main file
 * and in an included one; a regular file is included as before. */
static void test_include_not_a_file(void **state)
{
    (void)state;
    const struct file dir_in_main[] = {
        { "baton.cfg", SINKS_OUT "# endpoints\n  @include \"endpoints.d\"\n" },
        { NULL, NULL },
    };
    expect_error_at(dir_in_main, "baton.cfg", 3, "@include \"endpoints.d\": ");
    expect_error_at(dir_in_main, "baton.cfg", 3, "is a directory");

    const struct file fifo[] = {
        { "baton.cfg", SINKS_OUT "@include \"pipe\"\n" },
        { "pipe", FIFO_MARK },
        { NULL, NULL },
    };
    expect_error_at(fifo, "baton.cfg", 2, "is a FIFO");

    const struct file nested[] = {
        { "baton.cfg", SINKS_OUT "@include \"more.inc\"\n" },
        { "more.inc", "owner = \"t\";\n@include \"sub\"\n" },
        { "sub", DIR_MARK },
        { NULL, NULL },
    };
    expect_error_at(nested, "more.inc", 2, "is a directory");

    /* in an endpoint file, relative to that file's directory */
    const struct file in_endpoint[] = {
        { "baton.cfg", SINKS_OUT },
        { "endpoints.d/a.cfg", EP_A "@include \"x\"\n" },
        { "endpoints.d/x", DIR_MARK },
        { NULL, NULL },
    };
    expect_error_at(in_endpoint, "endpoints.d/a.cfg", 5, "is a directory");

    /* a regular file is included; a name in a comment or a string is no
     * @include */
    const struct file ok[] = {
        { "baton.cfg", SINKS_OUT "@include \"owner.inc\"\n// @include \"endpoints.d\"\n" },
        { "owner.inc", "owner = \"from-include\";\n" },
        { NULL, NULL },
    };
    struct tree t;
    write_tree(&t, ok, true);
    struct baton_config c = { 0 };
    struct config_error err = { 0 };
    if (config_load(t.main, &c, &err)) fail_msg("%s:%d: %s", err.file, err.line, err.msg);
    assert_string_equal(c.owner, "from-include");
    config_free(&c);
    remove_tree(&t);
}

static void test_password_file_relative_to_main(void **state)
{
    (void)state;
    const struct file files[] = {
        { "baton.cfg", SINKS_OUT "locker = { password_file = \"secrets/redis\"; };\n" },
        { "secrets", DIR_MARK },
        { "secrets/redis", "from-file\n" },
        { NULL, NULL },
    };
    struct tree t;
    write_tree(&t, files, true);
    struct baton_config c = { 0 };
    struct config_error err = { 0 };
    if (config_load(t.main, &c, &err)) fail_msg("%s:%d: %s", err.file, err.line, err.msg);
    assert_true(c.has_locker);
    assert_string_equal(c.locker_redis.password, "from-file");
    assert_string_equal(c.locker_redis.host, "127.0.0.1");
    assert_int_equal(c.locker_redis.port, 6379);
    assert_int_equal(c.locker_redis.db, 0);
    assert_null(c.locker_redis.user);
    assert_int_equal(c.locker_redis.connect_timeout_ms, 1000);
    assert_int_equal(c.locker_redis.command_timeout_ms, 1000);
    assert_string_equal(c.key_prefix, "baton");
    config_free(&c);
    remove_tree(&t);
}

static void test_absolute_endpoints_dir_and_metrics_default(void **state)
{
    (void)state;
    char dir[] = "/tmp/baton-test-config-eps-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char main_text[512];
    snprintf(main_text, sizeof main_text, SINKS_OUT "endpoints_dir = \"%s\";\nmetrics = { };\nowner = \"\";\n", dir);
    const struct file files[] = { { "baton.cfg", main_text }, { NULL, NULL } };
    struct tree t;
    write_tree(&t, files, false);
    struct baton_config c = { 0 };
    struct config_error err = { 0 };
    if (config_load(t.main, &c, &err)) fail_msg("%s:%d: %s", err.file, err.line, err.msg);
    assert_string_equal(c.endpoints_dir, dir);
    assert_string_equal(c.metrics_listen, "127.0.0.1:9464");
    assert_null(c.owner); /* empty owner = none */
    config_free(&c);
    remove_tree(&t);
    assert_int_equal(rmdir(dir), 0);
}

/* Loading is repeatable and leaves nothing behind (run under valgrind). */
static void test_repeat_load_error_paths_free(void **state)
{
    (void)state;
    for (int r = 0; r < 3; r++) {
        for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
            struct tree t;
            write_tree(&t, bad_cases[i].files, true);
            struct baton_config c = { 0 };
            assert_int_equal(config_load(t.main, &c, NULL), -1);
            config_free(&c);
            config_free(&c); /* idempotent */
            remove_tree(&t);
        }
    }
}

/* config/baton.cfg, the documented example, loads with the real sink
 * registry (copied next to an empty endpoints.d: the endpoint examples are
 * checked by --check-config elsewhere). */
static void test_example_main_file(void **state)
{
    (void)state;
    char src[512];
    snprintf(src, sizeof src, "%s", __FILE__);
    char *cut = strstr(src, "tests/unit/test_config.c");
    if (!cut) fail_msg("cannot find config/baton.cfg: __FILE__ is %s", __FILE__);
    snprintf(cut, sizeof src - (size_t)(cut - src), "config/baton.cfg");
    FILE *f = fopen(src, "r");
    if (!f) fail_msg("cannot open %s", src);
    static char text[16384];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';

    const struct file files[] = { { "baton.cfg", text }, { NULL, NULL } };
    struct tree t;
    write_tree(&t, files, true);
    config_test_set_registries(NULL, NULL);
    struct baton_config c = { 0 };
    struct config_error err = { 0 };
    int rc = config_load(t.main, &c, &err);
    config_test_set_registries(test_endpoint_types, test_sink_types);
    if (rc) fail_msg("%s:%d: %s", err.file, err.line, err.msg);
    assert_string_equal(c.owner, "tenant1");
    assert_true(c.has_locker);
    assert_string_equal(c.locker_redis.host, "127.0.0.1");
    assert_int_equal(c.locker_redis.port, 6379);
    assert_null(c.locker_redis.password);
    assert_int_equal(c.lease.ttl_ms, 3000);
    assert_int_equal(c.lease.renew_ms, 1000);
    assert_int_equal(c.n_sinks, 1);
    assert_string_equal(c.sinks[0].name, "out");
    assert_string_equal(c.sinks[0].type, "stdout");
    assert_non_null(c.sinks[0].ops);
    assert_string_equal(c.metrics_listen, "127.0.0.1:9464");
    assert_int_equal(c.log_level, LOG_INFO);
    assert_int_equal(c.log_format, LOG_FORMAT_TEXT);
    assert_int_equal(c.drain_timeout_ms, 5000);
    config_free(&c);
    remove_tree(&t);
}

/* The endpoint-level queue_batch_max (messages taken from the queue per sink
 * send) was called batch_max: the old name still sets it, with a
 * deprecation warning naming file, line and the new name; the new name is
 * read; both at once is an error; neither gives the default. The sink's own
 * batch_max (messages per HTTP POST) is another setting and keeps its name. */
static void test_queue_batch_max_and_its_old_name(void **state)
{
    (void)state;
    struct {
        const char *key_line; /* "" = neither */
        int64_t want;         /* -1 = an error, at err_line */
        bool warns;
        int err_line;
    } cases[] = {
        { "batch_max = 7;\n", 7, true, 0 },
        { "queue_batch_max = 9;\n", 9, false, 0 },
        { "", 256, false, 0 },
        { "queue_batch_max = 9;\nbatch_max = 7;\n", -1, false, 6 }, /* at the old name */
        { "batch_max = 0;\n", -1, true, 5 }, /* its range applies under the old name too */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char ep[512];
        snprintf(ep, sizeof ep, "%s%s", EP_A, cases[i].key_line);
        const struct file files[] = { { "baton.cfg", SINKS_OUT }, { "endpoints.d/a.cfg", ep }, { NULL, NULL } };
        struct tree t;
        write_tree(&t, files, true);
        struct baton_config c = { 0 };
        struct config_error err = { 0 };

        /* the loader's log (stderr), captured */
        fflush(stderr);
        int saved = dup(STDERR_FILENO);
        FILE *logf = tmpfile();
        assert_non_null(logf);
        assert_true(saved >= 0);
        assert_true(dup2(fileno(logf), STDERR_FILENO) >= 0);
        int rc = config_load(t.main, &c, &err);
        fflush(stderr);
        dup2(saved, STDERR_FILENO);
        close(saved);
        char logs[4096] = "";
        rewind(logf);
        size_t got = fread(logs, 1, sizeof logs - 1, logf);
        logs[got] = '\0';
        fclose(logf);

        if (cases[i].want < 0) {
            if (rc != -1) fail_msg("case %zu: loaded, wanted an error", i);
            assert_int_equal(err.line, cases[i].err_line); /* EP_A takes lines 1-4 */
            if (strstr(cases[i].key_line, "queue_batch_max"))
                assert_non_null(strstr(err.msg, "keep only 'queue_batch_max'"));
        } else {
            if (rc) fail_msg("case %zu: %s:%d: %s", i, err.file, err.line, err.msg);
            assert_int_equal(c.n_endpoints, 1);
            assert_int_equal(c.endpoints[0].queue_batch_max, cases[i].want);
        }
        char path[300];
        snprintf(path, sizeof path, "%s/endpoints.d/a.cfg:5: ", t.root);
        bool warned = strstr(logs, "'batch_max' is deprecated: it is now called 'queue_batch_max'") != NULL;
        if (warned != cases[i].warns) fail_msg("case %zu: warning %s; log: %s", i, warned ? "given" : "missing", logs);
        if (cases[i].warns) assert_non_null(strstr(logs, path)); /* file and line */
        config_free(&c);
        remove_tree(&t);
    }
}

static int setup(void **state)
{
    (void)state;
    config_test_set_registries(test_endpoint_types, test_sink_types);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_missing_main_file),
        cmocka_unit_test(test_missing_default_endpoints_dir),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_full_config),
        cmocka_unit_test(test_queue_batch_max_and_its_old_name),
        cmocka_unit_test(test_file_selection_and_order),
        cmocka_unit_test(test_guard_resolution),
        cmocka_unit_test(test_include_not_a_file),
        cmocka_unit_test(test_password_file_relative_to_main),
        cmocka_unit_test(test_absolute_endpoints_dir_and_metrics_default),
        cmocka_unit_test(test_repeat_load_error_paths_free),
        cmocka_unit_test(test_example_main_file),
        cmocka_unit_test(test_timings_ttl100_renew95_rejected),
        cmocka_unit_test(test_timings_command_timeout_rejected),
        cmocka_unit_test(test_timings_defaults_accepted),
        cmocka_unit_test(test_timings_endpoint_override_rejected),
        cmocka_unit_test(test_timings_loader_agrees_with_guard),
        cmocka_unit_test(test_fifo_endpoint_file_refused),
        cmocka_unit_test(test_fifo_main_file_refused),
        cmocka_unit_test(test_other_non_regular_files_refused),
        cmocka_unit_test(test_symlink_to_regular_file_accepted),
        cmocka_unit_test(test_size_cap),
        cmocka_unit_test(test_log_format),
        cmocka_unit_test(test_all_errors_main_file),
        cmocka_unit_test(test_all_errors_in_one_group),
        cmocka_unit_test(test_all_errors_across_endpoint_files),
        cmocka_unit_test(test_all_errors_no_cascade_from_locker),
        cmocka_unit_test(test_config_load_counts_several),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
