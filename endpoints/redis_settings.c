/* Sentinel and TLS settings shared by the locker and redis_psub. */
#include "endpoints/redis_settings.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "redis/sentinel.h"

const struct setting_def redis_tls_defs[] = {
    {"ca_file", SETTING_STRING, offsetof(struct redis_tls_settings, ca_file),
     .help = "PEM bundle of the CAs that sign the server certificate (default: the system's)"},
    {"cert_file", SETTING_STRING, offsetof(struct redis_tls_settings, cert_file),
     .help = "client certificate (PEM), with key_file"},
    {"key_file", SETTING_STRING, offsetof(struct redis_tls_settings, key_file),
     .help = "client certificate key (PEM)"},
    {"server_name", SETTING_STRING, offsetof(struct redis_tls_settings, server_name),
     .help = "name the server certificate must carry, sent as SNI (default: the host)"},
    SETTINGS_END,
};

static int line_of(const config_setting_t *s)
{
    return s ? config_setting_source_line(s) : 0;
}

static const char *file_of(const config_setting_t *s)
{
    const char *f = s ? config_setting_source_file(s) : NULL;
    return f ? f : "";
}

/* "host:port" with a port 1..65535 in digits only (strtol would take
 * "26400abc" up to the junk's end check, but also " 26400" and "+26400"),
 * parsed as the sentinels are asked (redis_sentinel_parse_addr). */
static bool host_port_ok(const char *v)
{
    const char *colon = strrchr(v, ':');
    if (colon == NULL || colon == v || colon[1] == '\0') return false;
    char host[256];
    int port;
    return redis_sentinel_parse_addr(v, host, sizeof host, &port);
}

static char *resolve(const char *base_dir, const char *path)
{
    if (base_dir == NULL || path[0] == '/') return xstrdup(path);
    size_t n = strlen(base_dir) + 1 + strlen(path) + 1;
    char *r = xmalloc(n);
    snprintf(r, n, "%s/%s", base_dir, path);
    return r;
}

int redis_settings_check(const config_setting_t *group, const struct strlist *sentinels,
                         const char *master_name, struct redis_tls_settings *tls,
                         const char *base_dir, const char *what, struct config_error *err)
{
    const config_setting_t *sen = config_setting_get_member(group, "sentinels");
    const config_setting_t *mn = config_setting_get_member(group, "master_name");
    if (sentinels->n > 0 && master_name == NULL) {
        config_error_set(err, file_of(sen), line_of(sen),
                         "%s: sentinels need master_name (the master's name known to them)", what);
        return -1;
    }
    if (master_name && sentinels->n == 0) {
        config_error_set(err, file_of(mn), line_of(mn),
                         "%s: master_name needs sentinels = [ \"host:port\", ... ]", what);
        return -1;
    }
    if (master_name && !master_name[0]) {
        config_error_set(err, file_of(mn), line_of(mn), "%s: master_name must not be empty", what);
        return -1;
    }
    for (size_t i = 0; i < sentinels->n; i++) {
        if (host_port_ok(sentinels->v[i])) continue;
        config_error_set(err, file_of(sen), line_of(sen),
                         "%s: sentinel \"%s\": expected host:port", what, sentinels->v[i]);
        return -1;
    }
    static const char *const direct[] = {"host", "port", NULL};
    for (size_t i = 0; sentinels->n > 0 && direct[i]; i++) {
        const config_setting_t *s = config_setting_get_member(group, direct[i]);
        if (!s) continue;
        config_error_set(err, file_of(s), line_of(s),
                         "%s: '%s' and sentinels exclude each other: with sentinels the master's "
                         "address is discovered", what, direct[i]);
        return -1;
    }
    if (!tls->present) return 0;
    const config_setting_t *tg = config_setting_get_member(group, "tls");
    if ((tls->cert_file != NULL) != (tls->key_file != NULL)) {
        const config_setting_t *s = config_setting_get_member(tg, tls->cert_file ? "cert_file" : "key_file");
        config_error_set(err, file_of(s), line_of(s), "%s: tls: cert_file and key_file go together",
                         what);
        return -1;
    }
    if (tls->server_name && !tls->server_name[0]) {
        const config_setting_t *s = config_setting_get_member(tg, "server_name");
        config_error_set(err, file_of(s), line_of(s), "%s: tls: server_name must not be empty", what);
        return -1;
    }
    char **files[3] = {&tls->ca_file, &tls->cert_file, &tls->key_file};
    static const char *const names[3] = {"ca_file", "cert_file", "key_file"};
    for (int i = 0; i < 3; i++) {
        if (*files[i] == NULL) continue;
        char *path = resolve(base_dir, *files[i]);
        free(*files[i]);
        *files[i] = path;
        if (access(path, R_OK) == 0) continue;
        const config_setting_t *s = config_setting_get_member(tg, names[i]);
        config_error_set(err, file_of(s), line_of(s), "%s: tls: %s %s: %s", what, names[i], path,
                         strerror(errno));
        return -1;
    }
    return 0;
}

void redis_settings_apply(struct baton_redis_opts *o, const struct strlist *sentinels,
                          const char *master_name, const struct redis_tls_settings *tls)
{
    if (sentinels->n > 0) {
        o->sentinels = xcalloc(sentinels->n, sizeof *o->sentinels);
        for (size_t i = 0; i < sentinels->n; i++) o->sentinels[i] = xstrdup(sentinels->v[i]);
        o->n_sentinels = sentinels->n;
        o->master_name = xstrdup(master_name);
    }
    if (tls->present) {
        o->tls.enabled = true;
        o->tls.ca_file = tls->ca_file ? xstrdup(tls->ca_file) : NULL;
        o->tls.cert_file = tls->cert_file ? xstrdup(tls->cert_file) : NULL;
        o->tls.key_file = tls->key_file ? xstrdup(tls->key_file) : NULL;
        o->tls.server_name = tls->server_name ? xstrdup(tls->server_name) : NULL;
    }
}

int redis_conn_settings_validate(const struct redis_conn_settings *s, char *msg, size_t msglen)
{
    if (!s->host || !s->host[0]) {
        snprintf(msg, msglen, "'host' must not be empty");
        return -1;
    }
    if (s->password_env && s->password_file) {
        snprintf(msg, msglen, "'password_file' and password_env: set one, not both");
        return -1;
    }
    char *pw = NULL;
    char why[400];
    if (secret_resolve(s->password_env, s->password_file, &pw, why, sizeof why)) {
        snprintf(msg, msglen, "'%s': %s", s->password_env ? "password_env" : "password_file", why);
        return -1;
    }
    secret_free(pw);
    return 0;
}

int redis_conn_settings_apply(struct baton_redis_opts *o, const struct redis_conn_settings *s,
                              char *msg, size_t msglen)
{
    char *pw = NULL;
    if (secret_resolve(s->password_env, s->password_file, &pw, msg, msglen)) return -1;
    o->host = xstrdup(s->host ? s->host : "127.0.0.1");
    o->port = (int)s->port;
    o->db = (int)s->db;
    o->user = s->user ? xstrdup(s->user) : NULL;
    o->password = pw;
    o->connect_timeout_ms = s->connect_timeout_ms;
    o->command_timeout_ms = s->command_timeout_ms;
    return 0;
}
