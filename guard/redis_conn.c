/* Opening a Redis connection the same way everywhere: TCP connect with
 * timeout, AUTH [user] password, SELECT db, command timeout, keepalive. */
#include "guard/redis_conn.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "guard/redis_conn_private.h"
#include "guard/redis_sentinel.h"
#include "guard/redis_tls.h"
#include "guard/glog.h"
#include "guard/util.h"

static struct timeval ms_to_tv(int64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

/* hiredis's own reply functions with createArray bounded. hiredis keeps its
 * default table private: it is copied once from a throwaway reader, so every
 * other kind of reply is built exactly as hiredis builds it. */
static redisReplyObjectFunctions bounded_fn;
static const redisReplyObjectFunctions *hiredis_fn;
static pthread_once_t bounded_once = PTHREAD_ONCE_INIT;

bool redis_array_size_ok(int elements)
{
    if (elements >= 0 && elements <= REDIS_MAX_ARRAY_ELEMENTS) return true;
    glog_warn("redis", NULL,
             "refusing an array reply of %d elements (limit %d): misbehaving server or "
             "corrupt stream; the connection is dropped",
             elements, REDIS_MAX_ARRAY_ELEMENTS);
    return false;
}

static void *bounded_create_array(const redisReadTask *task, int elements)
{
    if (!redis_array_size_ok(elements)) return NULL; /* the reader fails the reply */
    return hiredis_fn->createArray(task, elements);
}

static void bounded_init(void)
{
    redisReader *r = redisReaderCreate();
    if (r == NULL || r->fn == NULL || r->fn->createArray == NULL) {
        if (r) redisReaderFree(r);
        return;
    }
    hiredis_fn = r->fn;
    bounded_fn = *r->fn;
    bounded_fn.createArray = bounded_create_array;
    redisReaderFree(r);
}

void redis_reader_bound(redisReader *reader)
{
    pthread_once(&bounded_once, bounded_init);
    if (reader && hiredis_fn && reader->fn == hiredis_fn) reader->fn = &bounded_fn;
}

redisContext *redis_conn_connect(const struct baton_redis_opts *o, const char *host, int port, char *err,
                                 size_t errlen)
{
    int64_t cto = (o && o->connect_timeout_ms > 0) ? o->connect_timeout_ms : 1000;
    char where[300];
    snprintf(where, sizeof where, "%s:%d", host, port);
    redisContext *c;
    if (o && o->tls.enabled) {
        /* TLS: the handshake here, hiredis over the bridge's socketpair
         * (guard/redis_tls.c); keepalive is set on the TCP socket there
         * (hiredis's TCP_KEEPIDLE fails on an AF_UNIX socket) */
        int fd = redis_tls_connect(&o->tls, host, port, cto, err, errlen);
        if (fd < 0) return NULL;
        c = redisConnectFd(fd);
        if (c == NULL) {
            close(fd);
            snprintf(err, errlen, "redis %s: cannot allocate a connection", where);
            return NULL;
        }
        return c;
    }
    c = redisConnectWithTimeout(host, port, ms_to_tv(cto));
    if (c == NULL) {
        snprintf(err, errlen, "redis %s: cannot allocate a connection", where);
        return NULL;
    }
    if (c->err) {
        snprintf(err, errlen, "redis %s: connect: %s", where, c->errstr);
        redisFree(c);
        return NULL;
    }
    redisEnableKeepAlive(c);
    return c;
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
    redisReply *r = redisCommand(c, "ROLE");
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

int redis_opts_copy(struct baton_redis_opts *dst, const struct baton_redis_opts *src)
{
    if (dst == NULL) return -1;
    if (src == NULL) {
        memset(dst, 0, sizeof *dst);
        return 0;
    }
    bool oom = false;
    *dst = *src;
    dst->host = dup_opt(src->host, &oom);
    dst->user = dup_opt(src->user, &oom);
    dst->password = dup_opt(src->password, &oom);
    dst->tls.ca_file = dup_opt(src->tls.ca_file, &oom);
    dst->tls.cert_file = dup_opt(src->tls.cert_file, &oom);
    dst->tls.key_file = dup_opt(src->tls.key_file, &oom);
    dst->tls.server_name = dup_opt(src->tls.server_name, &oom);
    dst->master_name = dup_opt(src->master_name, &oom);
    dst->sentinels = NULL;
    dst->n_sentinels = 0;
    if (src->n_sentinels) {
        dst->sentinels = calloc(src->n_sentinels, sizeof *dst->sentinels);
        if (dst->sentinels) {
            dst->n_sentinels = src->n_sentinels;
            for (size_t i = 0; i < src->n_sentinels; i++)
                dst->sentinels[i] = dup_opt(src->sentinels[i], &oom);
        } else {
            oom = true;
        }
    }
    if (oom) {
        redis_opts_clear(dst);
        return -1;
    }
    return 0;
}

void redis_opts_clear(struct baton_redis_opts *o)
{
    if (o == NULL) return;
    free(o->host);
    free(o->user);
    free(o->tls.ca_file);
    free(o->tls.cert_file);
    free(o->tls.key_file);
    free(o->tls.server_name);
    free(o->master_name);
    for (size_t i = 0; i < o->n_sentinels; i++) free(o->sentinels[i]);
    free(o->sentinels);
    if (o->password) {
        /* do not leave the secret in freed memory */
        volatile char *p = o->password;
        while (*p) *p++ = '\0';
        free(o->password);
    }
    memset(o, 0, sizeof *o);
}

int redis_buffer_read(redisContext *c)
{
    size_t got;
    return redis_buffer_read_got(c, &got);
}

static int buffer_read(redisContext *c, size_t *got, bool nowait);

int redis_buffer_read_got(redisContext *c, size_t *got)
{
    return buffer_read(c, got, false);
}

int redis_buffer_read_nowait(redisContext *c, size_t *got)
{
    return buffer_read(c, got, true);
}

static int buffer_read(redisContext *c, size_t *got, bool nowait)
{
    *got = 0;
    if (c->err) return REDIS_ERR;
    /* malloc'd per read: freed at once, the chunk is reused by the next
     * read on any thread of the same arena (no page per thread) */
    char *buf = malloc(REDIS_READ_CHUNK);
    if (buf == NULL) {
        c->err = REDIS_ERR_OOM;
        snprintf(c->errstr, sizeof c->errstr, "Out of memory");
        return REDIS_ERR;
    }
    int rc = REDIS_OK;
    ssize_t n = nowait ? recv(c->fd, buf, REDIS_READ_CHUNK, MSG_DONTWAIT)
                       : read(c->fd, buf, REDIS_READ_CHUNK);
    if (n < 0) {
        if (((errno == EAGAIN || errno == EWOULDBLOCK) && (nowait || !(c->flags & REDIS_BLOCK))) ||
            errno == EINTR) {
            /* try again later, as hiredis */
        } else {
            c->err = REDIS_ERR_IO;
            snprintf(c->errstr, sizeof c->errstr, "%s", strerror(errno));
            rc = REDIS_ERR;
        }
    } else if (n == 0) {
        c->err = REDIS_ERR_EOF;
        snprintf(c->errstr, sizeof c->errstr, "Server closed the connection");
        rc = REDIS_ERR;
    } else if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) {
        c->err = c->reader->err;
        snprintf(c->errstr, sizeof c->errstr, "%s", c->reader->errstr);
        rc = REDIS_ERR;
    } else {
        *got = (size_t)n;
    }
    free(buf);
    return rc;
}

int redis_get_reply(redisContext *c, void **reply)
{
    void *aux = NULL;
    if (redisGetReplyFromReader(c, &aux) == REDIS_ERR) return REDIS_ERR;
    if (aux == NULL && (c->flags & REDIS_BLOCK)) {
        int wdone = 0;
        do {
            if (redisBufferWrite(c, &wdone) == REDIS_ERR) return REDIS_ERR;
        } while (!wdone);
        do {
            if (redis_buffer_read(c) == REDIS_ERR) return REDIS_ERR;
            if (redisGetReplyFromReader(c, &aux) == REDIS_ERR) return REDIS_ERR;
        } while (aux == NULL);
    }
    if (reply != NULL) *reply = aux;
    else if (aux != NULL) freeReplyObject(aux);
    return REDIS_OK;
}
