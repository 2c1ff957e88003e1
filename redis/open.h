/* Connecting to Redis the same way everywhere (locker, redis_psub endpoint,
 * CDC checkpoints): TCP connect with timeout, AUTH [user] password, SELECT
 * db, command timeout; through the sentinels when o has some.
 *
 * redis/, bottom to top: tls <- io <- sentinel <- open; a file includes
 * only the layers below its own (tests/check_redis_layers.sh). This: open, over sentinel and io.
 */
#ifndef BATON_REDIS_OPEN_H
#define BATON_REDIS_OPEN_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>

#include "redis/io.h"

/* Returns a connected, authenticated context with db selected, or NULL with
 * err naming host:port and the reason ("connection refused", "WRONGPASS ..."). */
redisContext *redis_conn_open(const struct baton_redis_opts *o, char *err, size_t errlen);

/* Private to guard/: redis_conn_open telling a server's refusal (AUTH,
 * SELECT: a configuration error, retrying will not help) from a network
 * failure (transient). As redis_conn_open; *refused (may be NULL) is set
 * true when the server answered but rejected AUTH or SELECT. */
redisContext *redis_conn_open_ex(const struct baton_redis_opts *o, char *err, size_t errlen,
                                 bool *refused);

#endif
