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

/* Runs one setup command; on failure fills err and returns false. */
static bool setup_command(redisContext *c, const char *where, const char *what, char *err,
                          size_t errlen, bool *refused, int argc, const char **argv)
{
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    if (r == NULL) {
        snprintf(err, errlen, "redis %s: %s: %s", where, what,
                 c->errstr[0] ? c->errstr : "connection lost");
        return false;
    }
    bool ok = r->type != REDIS_REPLY_ERROR;
    if (!ok) {
        snprintf(err, errlen, "redis %s: %s refused: %s", where, what, r->str ? r->str : "error");
        if (refused) *refused = true;
    }
    freeReplyObject(r);
    return ok;
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

    if (o && o->password && o->password[0]) {
        const char *argv[3] = {"AUTH", NULL, NULL};
        int argc = 0;
        if (o->user && o->user[0]) {
            argv[1] = o->user;
            argv[2] = o->password;
            argc = 3;
        } else {
            argv[1] = o->password;
            argc = 2;
        }
        if (!setup_command(c, where, "AUTH", err, errlen, refused, argc, argv)) {
            redisFree(c);
            return NULL;
        }
    }
    if (o && o->db != 0) {
        char db[24];
        snprintf(db, sizeof db, "%d", o->db);
        const char *argv[2] = {"SELECT", db};
        if (!setup_command(c, where, "SELECT", err, errlen, refused, 2, argv)) {
            redisFree(c);
            return NULL;
        }
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
}

void redis_opts_clear(struct redis_opts *o)
{
    if (o == NULL) return;
    free(o->host);
    free(o->user);
    if (o->password) {
        /* do not leave the secret in freed memory */
        volatile char *p = o->password;
        while (*p) *p++ = '\0';
        free(o->password);
    }
    memset(o, 0, sizeof *o);
}
