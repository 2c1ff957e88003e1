/* What the bench loops that read Redis pub/sub share: connect and
 * PSUBSCRIBE, or a one-line error naming what failed (prefixed with who). */
#ifndef BATON_BENCH_PSUB_H
#define BATON_BENCH_PSUB_H

#include <hiredis/hiredis.h>
#include <stdio.h>

static inline redisContext *bench_psub_connect(const char *who, const char *host, int port,
                                               const char *pattern)
{
    redisContext *c = redisConnect(host, port);
    if (!c || c->err) {
        fprintf(stderr, "%s: connect %s:%d: %s\n", who, host, port, c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        return NULL;
    }
    redisReply *r = redisCommand(c, "PSUBSCRIBE %s", pattern);
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "%s: PSUBSCRIBE %s on %s:%d failed: %s\n", who, pattern, host, port,
                r && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
        if (r) freeReplyObject(r);
        redisFree(c);
        return NULL;
    }
    freeReplyObject(r);
    return c;
}

#endif
