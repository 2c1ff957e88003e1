/* Opening a Redis connection the same way everywhere: TCP connect with
 * timeout, AUTH [user] password, SELECT db, command timeout, keepalive. */
#include "redis/open.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "redis/sentinel.h"
#include "base/glog.h"
#include "base/util.h"

static struct timeval ms_to_tv(int64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

/* Connects to at_host:at_port (a master found through the sentinels; errors
 * then read "redis <label>: ...") or, with at_host NULL, to o's host:port. */
static redisContext *open_at(const struct baton_redis_opts *o, const char *at_host, int at_port,
                             const char *label, char *err, size_t errlen, bool *refused)
{
    const char *host = at_host ? at_host : (o && o->host && o->host[0]) ? o->host : "127.0.0.1";
    int port = at_host ? at_port : (o && o->port > 0) ? o->port : 6379;
    int64_t mto = (o && o->command_timeout_ms > 0) ? o->command_timeout_ms : 1000;
    char where[300];
    if (label) snprintf(where, sizeof where, "%s", label);
    else snprintf(where, sizeof where, "%s:%d", host, port);
    if (refused) *refused = false;
    if (err && errlen) err[0] = '\0';
    if (!at_host && o && (o->port < 0 || o->port > 65535)) {
        snprintf(err, errlen, "redis %s: invalid port %d", where, o->port);
        if (refused) *refused = true;
        return NULL;
    }

    redisContext *c = redis_conn_connect(o, host, port, err, errlen);
    if (c == NULL) return NULL;
    if (redisSetTimeout(c, ms_to_tv(mto)) != REDIS_OK) {
        snprintf(err, errlen, "redis %s: cannot set the command timeout", where);
        redisFree(c);
        return NULL;
    }
    redis_reader_bound(c->reader);
    redis_reader_set_max(c->reader, o ? o->max_reply_bytes : 0);

    /* AUTH and SELECT pipelined: one round trip, replies checked in order
     * (after a refused AUTH, SELECT's NOAUTH is not the reason to report). */
    const char *auth_argv[3] = {"AUTH", NULL, NULL}, *sel_argv[2] = {"SELECT", NULL};
    const char *what[2];
    int n = 0;
    bool ok = true;
    if (o && o->password && o->password[0]) {
        int argc = 2;
        if (o->user && o->user[0]) {
            auth_argv[1] = o->user;
            auth_argv[2] = o->password;
            argc = 3;
        } else {
            auth_argv[1] = o->password;
        }
        ok = redisAppendCommandArgv(c, argc, auth_argv, NULL) == REDIS_OK;
        what[n++] = "AUTH";
    }
    char db[24];
    if (ok && o && o->db != 0) {
        snprintf(db, sizeof db, "%d", o->db);
        sel_argv[1] = db;
        ok = redisAppendCommandArgv(c, 2, sel_argv, NULL) == REDIS_OK;
        what[n++] = "SELECT";
    }
    if (ok && n == 0) {
        /* nothing to set up: PING, so that a server that will not talk
         * (plain text against a TLS port, a TLS session the server ends
         * after the handshake: no client certificate) fails the open,
         * naming host:port, rather than the first command */
        ok = redisAppendCommand(c, "PING") == REDIS_OK;
        what[n++] = "PING";
    }
    if (!ok) {
        snprintf(err, errlen, "redis %s: cannot queue the setup commands", where);
        redisFree(c);
        return NULL;
    }
    redisReply *rep[2] = {NULL, NULL};
    for (int i = 0; i < n && ok; i++) {
        if (redis_get_reply(c, (void **)&rep[i]) != REDIS_OK || rep[i] == NULL) {
            /* closed at once: say what usually causes it */
            bool eof = c->err == REDIS_ERR_EOF ||
                       (c->err == REDIS_ERR_IO && strcmp(c->errstr, strerror(ECONNRESET)) == 0);
            snprintf(err, errlen, "redis %s: %s: %s%s", where, what[i],
                     c->errstr[0] ? c->errstr : "connection lost",
                     !eof ? ""
                     : (o && o->tls.enabled)
                         ? " (the server ended the TLS session: see the TLS error logged)"
                         : " (a TLS port? plain text was sent: configure tls = { ... })");
            ok = false;
        }
    }
    for (int i = 0; i < n && ok; i++) {
        if (rep[i]->type == REDIS_REPLY_ERROR) {
            snprintf(err, errlen, "redis %s: %s refused: %s", where, what[i],
                     rep[i]->str ? rep[i]->str : "error");
            /* a refused PING (NOAUTH, LOADING) is what a command would
             * have met: transient as before, not a configuration error */
            if (refused && strcmp(what[i], "PING") != 0) *refused = true;
            ok = false;
        }
    }
    for (int i = 0; i < n; i++)
        if (rep[i]) freeReplyObject(rep[i]);
    if (!ok) {
        redisFree(c);
        return NULL;
    }
    return c;
}

/* ROLE on a fresh connection: 1 master, 0 replica (or sentinel: what), -1
 * connection lost (err). A server refusing ROLE (an ACL without it) is taken
 * at the sentinels' word, with a warning. */
static int role_of(redisContext *c, const char *label, const char **what, char *err, size_t errlen)
{
    static struct ratelimit rl_role;
    *what = "replica";
    redisReply *r = redis_commandf(c, "ROLE");
    if (r == NULL) {
        snprintf(err, errlen, "redis %s: ROLE: %s", label,
                 c->errstr[0] ? c->errstr : "connection lost");
        return -1;
    }
    int role = 0;
    if (r->type == REDIS_REPLY_ERROR) {
        long long supp = 0;
        if (ratelimit_ok(&rl_role, 60000, &supp))
            glog_warn("redis", NULL, "redis %s: ROLE refused (%.100s): cannot verify that the "
                     "sentinels' answer is the master (%lld similar suppressed)", label, r->str,
                     supp);
        role = 1;
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
               r->element[0]->type == REDIS_REPLY_STRING) {
        if (strcmp(r->element[0]->str, "master") == 0) role = 1;
        else if (strcmp(r->element[0]->str, "sentinel") == 0) *what = "sentinel";
    }
    freeReplyObject(r);
    return role;
}

/* Asks the sentinels for the master, connects, AUTH/SELECT as usual, and
 * checks with ROLE that it is the master: a stale answer or a demoted old
 * master is closed and the sentinels are asked once more. */
static redisContext *open_via_sentinels(const struct baton_redis_opts *o, char *err, size_t errlen,
                                        bool *refused)
{
    const char *name = o->master_name ? o->master_name : "";
    if (refused) *refused = false;
    for (int attempt = 0; attempt < 2; attempt++) {
        char host[256], label[360];
        int port = 0;
        if (redis_sentinel_resolve(o, host, sizeof host, &port, err, errlen) != 0) return NULL;
        snprintf(label, sizeof label, "%.80s via sentinels (%.200s:%d)", name, host, port);
        redisContext *c = open_at(o, host, port, label, err, errlen, refused);
        if (c == NULL) {
            /* the connect step names host:port only: name the master too */
            char plain[300];
            int pl = snprintf(plain, sizeof plain, "redis %s:%d: ", host, port);
            if (pl > 0 && (size_t)pl < sizeof plain && strncmp(err, plain, (size_t)pl) == 0) {
                char rest[512];
                snprintf(rest, sizeof rest, "%s", err + pl);
                snprintf(err, errlen, "redis %s: %s", label, rest);
            }
            return NULL;
        }
        const char *what;
        int role = role_of(c, label, &what, err, errlen);
        if (role == 1) {
            redis_sentinel_note_master(o, host, port);
            return c;
        }
        redisFree(c);
        if (role < 0) return NULL;
        snprintf(err, errlen, "redis %.80s via sentinels: %.200s:%d is a %s", name, host, port,
                 what);
    }
    return NULL;
}

redisContext *redis_conn_open_ex(const struct baton_redis_opts *o, char *err, size_t errlen,
                                 bool *refused)
{
    if (o && o->n_sentinels > 0) return open_via_sentinels(o, err, errlen, refused);
    return open_at(o, NULL, 0, NULL, err, errlen, refused);
}

redisContext *redis_conn_open(const struct baton_redis_opts *o, char *err, size_t errlen)
{
    return redis_conn_open_ex(o, err, errlen, NULL);
}
