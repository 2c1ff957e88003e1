/* The low layer of the Redis connection unit (see io.h): the connect step
 * (plain TCP, or TLS through tls.h), bounded replies, reads into a heap
 * buffer, one deadline per reply, the command helpers, opts copy/clear. */
#include "redis/io.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "redis/tls.h"
#include "base/glog.h"
#include "base/util.h"

static struct timeval ms_to_tv(int64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

/* ---- bounded replies ------------------------------------------------------
 *
 * hiredis 0.14's reader has no room for a limit of ours, and baton does not
 * own the end of every context (callers redisFree them), so nothing can be
 * hung on a context. The limit and the count of the reply being built live
 * in the reader itself, in its last read task rstack[8]: hiredis uses it
 * only for an array nested 8 deep, and redis_reply_array_ok refuses
 * nesting beyond 7 (baton's deepest reply nests 2), so hiredis never
 * touches it. Its fields here: privdata = the limit in bytes (0: the
 * default), obj = the bytes of the reply being built (reset when a reply
 * starts), type = why the last reply was refused (REFUSED_*), elements =
 * unused. A create function finds the reader from its task: the tasks are
 * rstack[0..7], the root's parent is NULL. */
_Static_assert(sizeof(((redisReader *)0)->rstack) / sizeof(redisReadTask) == 9,
               "hiredis's reader keeps 9 read tasks (rstack[8] holds baton's bounds)");
#define SPARE_TASK 8
#define MAX_DEPTH 7         /* an array at rstack[7] may have no elements */
#define ARRAY_ELEM_COST 16  /* bytes counted per array element */

enum { REFUSED_NONE, REFUSED_SIZE, REFUSED_ARRAY, REFUSED_DEPTH, REFUSED_INTEGER };

static redisReader *reader_of(const redisReadTask *task, int *depth)
{
    const redisReadTask *root = task;
    int d = 0;
    while (root->parent) {
        root = root->parent;
        d++;
    }
    if (depth) *depth = d;
    return (redisReader *)((char *)(uintptr_t)root - offsetof(redisReader, rstack));
}

static redisReadTask *spare(const redisReader *r)
{
    return (redisReadTask *)&r->rstack[SPARE_TASK];
}

static size_t reader_max(const redisReader *r)
{
    uintptr_t v = (uintptr_t)spare(r)->privdata;
    return v ? (size_t)v : (size_t)BATON_REDIS_MAX_REPLY_DEFAULT;
}

static size_t reply_bytes(const redisReader *r)
{
    return (size_t)(uintptr_t)spare(r)->obj;
}

static void set_reply_bytes(redisReader *r, size_t n)
{
    spare(r)->obj = (void *)(uintptr_t)n;
}

static void refuse(redisReader *r, int why, size_t size)
{
    spare(r)->type = why;
    set_reply_bytes(r, size);
}

void redis_reader_set_max(redisReader *reader, int64_t max_reply_bytes)
{
    if (reader == NULL) return;
    redisReadTask *t = spare(reader);
    t->privdata = (void *)(uintptr_t)(max_reply_bytes > 0 ? (size_t)max_reply_bytes : 0);
    t->type = REFUSED_NONE;
}

bool redis_array_size_ok(int elements)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static struct ratelimit rl;
    if (elements >= 0 && elements <= REDIS_MAX_ARRAY_ELEMENTS) return true;
    long long supp = 0;
    pthread_mutex_lock(&mu);
    bool say = ratelimit_ok(&rl, 10000, &supp);
    pthread_mutex_unlock(&mu);
    if (say)
        glog_warn("redis", NULL,
                  "refusing an array reply of %d elements (limit %d): misbehaving server or "
                  "corrupt stream; the connection is dropped (%lld similar suppressed)",
                  elements, REDIS_MAX_ARRAY_ELEMENTS, supp);
    return false;
}

/* Counts n more bytes into the reply task belongs to: false (refused) over
 * the limit. A reply's first object starts the count. */
static bool count_bytes(const redisReadTask *task, size_t n)
{
    int depth;
    redisReader *r = reader_of(task, &depth);
    size_t have = depth == 0 ? 0 : reply_bytes(r), max = reader_max(r);
    if (n > max || have > max - n) {
        refuse(r, REFUSED_SIZE, n > SIZE_MAX - have ? SIZE_MAX : have + n);
        return false;
    }
    set_reply_bytes(r, have + n);
    return true;
}

bool redis_reply_array_ok(const redisReadTask *task, int elements)
{
    int depth;
    redisReader *r = reader_of(task, &depth);
    if (!redis_array_size_ok(elements)) {
        refuse(r, REFUSED_ARRAY, (size_t)(elements < 0 ? 0 : elements));
        return false;
    }
    if (depth >= MAX_DEPTH && elements > 0) {
        refuse(r, REFUSED_DEPTH, (size_t)depth + 1);
        return false;
    }
    return count_bytes(task, (size_t)elements * ARRAY_ELEM_COST);
}

bool redis_reply_string_ok(const redisReadTask *task, size_t len)
{
    return count_bytes(task, len);
}

bool redis_reply_integer_ok(const redisReadTask *task, long long value)
{
    /* hiredis calls createInteger right after reading the line: it ends with
     * "\r\n" at pos. Its first byte follows the ':' type byte, or starts the
     * buffer when hiredis cut what it had parsed before the line came
     * whole. Strict: "-?[0-9]{1,19}" within int64, no '+', no spaces. */
    redisReader *r = reader_of(task, NULL);
    const char *b = r->buf;
    bool ok = false;
    if (b && r->pos >= 3 && r->pos <= r->len && b[r->pos - 2] == '\r') {
        size_t end = r->pos - 2, s = end;
        while (s > 0 && b[s - 1] >= '0' && b[s - 1] <= '9') s--;
        size_t digits = end - s;
        if (s > 0 && b[s - 1] == '-') s--;
        if (digits >= 1 && digits <= 19 && (s == 0 || b[s - 1] == ':')) {
            char text[24];
            memcpy(text, b + s, end - s);
            text[end - s] = '\0';
            char *e;
            errno = 0;
            long long v = strtoll(text, &e, 10);
            ok = errno == 0 && *e == '\0' && v == value;
        }
    }
    if (!ok) refuse(r, REFUSED_INTEGER, 0);
    return ok && count_bytes(task, 0);
}

/* hiredis's own reply functions behind the checks above. hiredis keeps its
 * default table private: it is copied once from a throwaway reader, so every
 * reply is built exactly as hiredis builds it. */
static redisReplyObjectFunctions bounded_fn;
static const redisReplyObjectFunctions *hiredis_fn;
static pthread_once_t bounded_once = PTHREAD_ONCE_INIT;

static void *bounded_create_array(const redisReadTask *task, int elements)
{
    if (!redis_reply_array_ok(task, elements)) return NULL; /* the reader fails the reply */
    return hiredis_fn->createArray(task, elements);
}

static void *bounded_create_string(const redisReadTask *task, char *str, size_t len)
{
    if (!redis_reply_string_ok(task, len)) return NULL;
    return hiredis_fn->createString(task, str, len);
}

static void *bounded_create_integer(const redisReadTask *task, long long value)
{
    if (!redis_reply_integer_ok(task, value)) return NULL;
    return hiredis_fn->createInteger(task, value);
}

static void bounded_init(void)
{
    redisReader *r = redisReaderCreate();
    if (r == NULL || r->fn == NULL || r->fn->createArray == NULL || r->fn->createString == NULL ||
        r->fn->createInteger == NULL) {
        if (r) redisReaderFree(r);
        return;
    }
    hiredis_fn = r->fn;
    bounded_fn = *r->fn;
    bounded_fn.createArray = bounded_create_array;
    bounded_fn.createString = bounded_create_string;
    bounded_fn.createInteger = bounded_create_integer;
    redisReaderFree(r);
}

void redis_reader_bound(redisReader *reader)
{
    pthread_once(&bounded_once, bounded_init);
    if (reader && hiredis_fn && reader->fn == hiredis_fn) reader->fn = &bounded_fn;
}

/* After a reader error: c->errstr says what a bound refused. */
static void bound_error(redisContext *c)
{
    redisReader *r = c->reader;
    if (r == NULL) return;
    redisReadTask *t = spare(r);
    size_t n = reply_bytes(r);
    switch (t->type) {
    case REFUSED_SIZE:
        snprintf(c->errstr, sizeof c->errstr,
                 "reply of at least %zu bytes over max_reply_bytes (%zu): raise it if that is expected",
                 n, reader_max(r));
        break;
    case REFUSED_ARRAY:
        snprintf(c->errstr, sizeof c->errstr, "array reply of %zu elements (limit %d)", n,
                 REDIS_MAX_ARRAY_ELEMENTS);
        break;
    case REFUSED_DEPTH:
        snprintf(c->errstr, sizeof c->errstr, "array reply nested %zu deep (limit %d)", n, MAX_DEPTH);
        break;
    case REFUSED_INTEGER:
        snprintf(c->errstr, sizeof c->errstr, "integer reply not a 64-bit decimal integer");
        break;
    default: return;
    }
    c->err = REDIS_ERR_PROTOCOL;
}

int redis_next_reply(redisContext *c, void **reply)
{
    if (redisGetReplyFromReader(c, reply) == REDIS_OK) return REDIS_OK;
    bound_error(c);
    return REDIS_ERR;
}

/* After a feed: a bulk string whose declared length is over the limit, or
 * more unparsed bytes than one reply may have, fails at once (hiredis would
 * buffer the whole bulk before making it a string: 3 GB for "$3000000000"). */
bool redis_reader_fed_ok(const redisReader *r, char *why, size_t whylen)
{
    size_t max = reader_max(r);
    size_t unparsed = r->len > r->pos ? r->len - r->pos : 0;
    if (r->ridx >= 0 && r->ridx < SPARE_TASK && r->rstack[r->ridx].type == REDIS_REPLY_STRING) {
        /* "$<len>\r\n": pos is past the '$' */
        const char *p = r->buf + r->pos;
        size_t i = 0;
        unsigned long long v = 0;
        while (i < unparsed && i < 20 && p[i] >= '0' && p[i] <= '9') v = v * 10 + (unsigned)(p[i++] - '0');
        size_t before = r->ridx > 0 ? reply_bytes(r) : 0;
        if (i > 0 && (i == 20 || v > max || before > max - v)) {
            snprintf(why, whylen,
                     "reply of %s%llu bytes over max_reply_bytes (%zu): raise it if that is expected",
                     i == 20 ? "more than " : "", v + before, max);
            return false;
        }
    }
    if (unparsed > max + REDIS_READ_CHUNK) {
        snprintf(why, whylen,
                 "reply of more than %zu bytes over max_reply_bytes (%zu): raise it if that is "
                 "expected", unparsed, max);
        return false;
    }
    return true;
}

static bool feed_within(redisContext *c)
{
    if (redis_reader_fed_ok(c->reader, c->errstr, sizeof c->errstr)) return true;
    c->err = REDIS_ERR_PROTOCOL;
    return false;
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
         * (redis/tls.c); keepalive is set on the TCP socket there
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

/* The receive timeout of c's socket (the command timeout), 0 if none. */
static int64_t rcv_timeout_ms(const redisContext *c)
{
    struct timeval tv;
    socklen_t l = sizeof tv;
    if (getsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &l) != 0) return 0;
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* Fails c: no (complete) answer within ms. */
static void timed_out(redisContext *c, int64_t ms, bool partial)
{
    c->err = REDIS_ERR_IO;
    snprintf(c->errstr, sizeof c->errstr, "no %sanswer within %lld ms", partial ? "complete " : "",
             (long long)ms);
    shutdown(c->fd, SHUT_RDWR); /* closed: nothing later is read as this answer */
}

bool redis_reply_pending(const redisContext *c)
{
    /* hiredis sets up rstack[0] (type -1) on every call that finds no
     * reply, so ridx >= 0 alone says nothing: a reply has begun when bytes
     * wait unparsed or its first byte (the type) has been read */
    const redisReader *r = c->reader;
    return r->len > r->pos || (r->ridx >= 0 && r->rstack[0].type >= 0);
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
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            /* the blocking read's SO_RCVTIMEO ran out */
            timed_out(c, rcv_timeout_ms(c), redis_reply_pending(c));
            rc = REDIS_ERR;
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
    } else if (!feed_within(c)) {
        rc = REDIS_ERR;
    } else {
        *got = (size_t)n;
    }
    free(buf);
    return rc;
}

/* Waits until c's socket is readable or the deadline (monotonic ms) has
 * passed: false (c failed) then. */
static bool wait_readable(redisContext *c, int64_t deadline, int64_t timeout)
{
    for (;;) {
        int64_t left = deadline - clock_mono_ms();
        if (left <= 0) {
            timed_out(c, timeout, redis_reply_pending(c));
            return false;
        }
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int n = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
        if (n > 0) return true;
        if (n < 0 && errno != EINTR) {
            c->err = REDIS_ERR_IO;
            snprintf(c->errstr, sizeof c->errstr, "poll: %s", strerror(errno));
            return false;
        }
    }
}

int redis_get_reply(redisContext *c, void **reply)
{
    void *aux = NULL;
    if (redis_next_reply(c, &aux) == REDIS_ERR) return REDIS_ERR;
    if (aux == NULL && (c->flags & REDIS_BLOCK)) {
        int64_t timeout = rcv_timeout_ms(c);
        int64_t deadline = timeout > 0 ? clock_mono_ms() + timeout : 0;
        int wdone = 0;
        do {
            if (redisBufferWrite(c, &wdone) == REDIS_ERR) return REDIS_ERR;
        } while (!wdone);
        do {
            if (deadline && !wait_readable(c, deadline, timeout)) return REDIS_ERR;
            if (redis_buffer_read(c) == REDIS_ERR) return REDIS_ERR;
            if (redis_next_reply(c, &aux) == REDIS_ERR) return REDIS_ERR;
        } while (aux == NULL);
    }
    if (reply != NULL) *reply = aux;
    else if (aux != NULL) freeReplyObject(aux);
    return REDIS_OK;
}

redisReply *redis_command_argv(redisContext *c, int argc, const char **argv, const size_t *argvlen)
{
    if (redisAppendCommandArgv(c, argc, argv, argvlen) != REDIS_OK) return NULL;
    void *r = NULL;
    if (redis_get_reply(c, &r) != REDIS_OK) return NULL;
    return r;
}

redisReply *redis_commandf(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = redisvAppendCommand(c, fmt, ap);
    va_end(ap);
    if (rc != REDIS_OK) return NULL;
    void *r = NULL;
    if (redis_get_reply(c, &r) != REDIS_OK) return NULL;
    return r;
}
