/* Connecting to Redis the same way everywhere (locker, redis_psub endpoint,
 * CDC checkpoints): TCP connect with timeout, AUTH [user] password, SELECT
 * db, command timeout. hiredis 0.14 (no TLS, RESP2). */
#ifndef BATON_REDIS_CONN_H
#define BATON_REDIS_CONN_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

struct redis_opts {
    char *host;               /* default "127.0.0.1" */
    int port;                 /* default 6379 */
    int db;                   /* default 0 */
    char *user;               /* ACL user or NULL */
    char *password;           /* resolved secret or NULL */
    int64_t connect_timeout_ms; /* default 1000 */
    int64_t command_timeout_ms; /* default 1000 */
};

/* Returns a connected, authenticated context with db selected, or NULL with
 * err naming host:port and the reason ("connection refused", "WRONGPASS ..."). */
redisContext *redis_conn_open(const struct redis_opts *o, char *err, size_t errlen);
/* Deep copy / free of the strings in opts. */
void redis_opts_copy(struct redis_opts *dst, const struct redis_opts *src);
void redis_opts_clear(struct redis_opts *o);

#endif
