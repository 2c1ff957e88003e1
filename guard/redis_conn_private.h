/* Private to guard/: redis_conn_open telling a server's refusal (AUTH,
 * SELECT: a configuration error, retrying will not help) from a network
 * failure (transient). */
#ifndef BATON_REDIS_CONN_PRIVATE_H
#define BATON_REDIS_CONN_PRIVATE_H

#include <stdbool.h>

#include "guard/redis_conn.h"

/* As redis_conn_open; *refused (may be NULL) is set true when the server
 * answered but rejected AUTH or SELECT. */
redisContext *redis_conn_open_ex(const struct baton_redis_opts *o, char *err, size_t errlen,
                                 bool *refused);

/* The connect step of redis_conn_open_ex (also for reaching sentinels):
 * host:port over TLS when o->tls.enabled (guard/redis/tls.h, never plain
 * text then), else plain TCP; within o->connect_timeout_ms. A connected
 * blocking context (no AUTH, SELECT or command timeout yet), or NULL with
 * err naming host:port ("redis h:p: connect: ...", "redis h:p: TLS: ..."). */
redisContext *redis_conn_connect(const struct baton_redis_opts *o, const char *host, int port, char *err,
                                 size_t errlen);

#endif
