/* Opening a Redis connection the same way everywhere: TCP connect with
 * timeout, AUTH [user] password, SELECT db, command timeout, keepalive. */
#include "guard/redis_conn.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "guard/redis_conn_private.h"
#include "src/common/log.h"
#include "src/common/util.h"

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

static void *bounded_create_array(const redisReadTask *task, int elements)
{
    if (elements < 0 || elements > REDIS_MAX_ARRAY_ELEMENTS) {
        log_warn("redis", NULL,
                 "refusing an array reply of %d elements (limit %d): misbehaving server or "
                 "corrupt stream; the connection is dropped",
                 elements, REDIS_MAX_ARRAY_ELEMENTS);
        return NULL; /* the reader fails the reply */
    }
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

redisContext *redis_conn_open_ex(const struct redis_opts *o, char *err, size_t errlen,
                                 bool *refused)
{
    const char *host = (o && o->host && o->host[0]) ? o->host : "127.0.0.1";
    int port = (o && o->port > 0) ? o->port : 6379;
    int64_t cto = (o && o->connect_timeout_ms > 0) ? o->connect_timeout_ms : 1000;
    int64_t mto = (o && o->command_timeout_ms > 0) ? o->command_timeout_ms : 1000;
    char where[300];
    snprintf(where, sizeof where, "%s:%d", host, port);
    if (refused) *refused = false;
    if (err && errlen) err[0] = '\0';
    if (o && (o->port < 0 || o->port > 65535)) {
        snprintf(err, errlen, "redis %s: invalid port %d", where, o->port);
        if (refused) *refused = true;
        return NULL;
    }

    redisContext *c = redisConnectWithTimeout(host, port, ms_to_tv(cto));
    if (c == NULL) {
        snprintf(err, errlen, "redis %s: cannot allocate a connection", where);
        return NULL;
    }
    if (c->err) {
        snprintf(err, errlen, "redis %s: connect: %s", where, c->errstr);
        redisFree(c);
        return NULL;
    }
    if (redisSetTimeout(c, ms_to_tv(mto)) != REDIS_OK) {
        snprintf(err, errlen, "redis %s: cannot set the command timeout", where);
        redisFree(c);
        return NULL;
    }
    redisEnableKeepAlive(c);
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
    if (!ok) {
        snprintf(err, errlen, "redis %s: cannot queue the setup commands", where);
        redisFree(c);
        return NULL;
    }
    redisReply *rep[2] = {NULL, NULL};
    for (int i = 0; i < n && ok; i++) {
        if (redisGetReply(c, (void **)&rep[i]) != REDIS_OK || rep[i] == NULL) {
            snprintf(err, errlen, "redis %s: %s: %s", where, what[i],
                     c->errstr[0] ? c->errstr : "connection lost");
            ok = false;
        }
    }
    for (int i = 0; i < n && ok; i++) {
        if (rep[i]->type == REDIS_REPLY_ERROR) {
            snprintf(err, errlen, "redis %s: %s refused: %s", where, what[i],
                     rep[i]->str ? rep[i]->str : "error");
            if (refused) *refused = true;
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

redisContext *redis_conn_open(const struct redis_opts *o, char *err, size_t errlen)
{
    return redis_conn_open_ex(o, err, errlen, NULL);
}

static char *dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

void redis_opts_copy(struct redis_opts *dst, const struct redis_opts *src)
{
    if (dst == NULL) return;
    if (src == NULL) {
        memset(dst, 0, sizeof *dst);
        return;
    }
    *dst = *src;
    dst->host = dup_or_null(src->host);
    dst->user = dup_or_null(src->user);
    dst->password = dup_or_null(src->password);
    dst->tls.ca_file = dup_or_null(src->tls.ca_file);
    dst->tls.cert_file = dup_or_null(src->tls.cert_file);
    dst->tls.key_file = dup_or_null(src->tls.key_file);
    dst->tls.server_name = dup_or_null(src->tls.server_name);
    dst->master_name = dup_or_null(src->master_name);
    dst->sentinels = NULL;
    if (src->n_sentinels) {
        dst->sentinels = xcalloc(src->n_sentinels, sizeof *dst->sentinels);
        for (size_t i = 0; i < src->n_sentinels; i++) dst->sentinels[i] = xstrdup(src->sentinels[i]);
    }
}

void redis_opts_clear(struct redis_opts *o)
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
