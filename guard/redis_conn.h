/* Connecting to Redis the same way everywhere (locker, redis_psub endpoint,
 * CDC checkpoints): TCP connect with timeout, AUTH [user] password, SELECT
 * db, command timeout. hiredis 0.14 (no TLS, RESP2). */
#ifndef BATON_REDIS_CONN_H
#define BATON_REDIS_CONN_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "baton/redis.h"

/* Returns a connected, authenticated context with db selected, or NULL with
 * err naming host:port and the reason ("connection refused", "WRONGPASS ..."). */
redisContext *redis_conn_open(const struct baton_redis_opts *o, char *err, size_t errlen);
/* Largest array reply baton accepts from any Redis. hiredis 0.14 allocates
 * an array's element table as soon as it reads the "*N" header, so a
 * misbehaving server or a corrupt stream declaring "*366666666" would make it
 * calloc gigabytes; baton's replies (pub/sub messages, script results,
 * MGET of a config's leases) are far smaller. */
#define REDIS_MAX_ARRAY_ELEMENTS 65536
/* Makes reader refuse arrays larger than REDIS_MAX_ARRAY_ELEMENTS: the reply
 * fails (reader error, the connection is dropped like any protocol error)
 * and a warning names the declared size. redis_conn_open does this on every
 * context it returns. */
void redis_reader_bound(redisReader *reader);
/* The same check for a reader with functions of its own (the redis_psub
 * reply pool): false, with the warning, for a size over the bound. */
bool redis_array_size_ok(int elements);
/* redisBufferRead and redisGetReply (blocking context), reading into a heap
 * buffer: hiredis's own put 16 KiB on the caller's stack, so every thread
 * that ever read a reply kept one more resident stack page (a lease thread
 * that flushed once, a redis_psub consumer: ~8 MiB at 1,000 endpoints).
 * Same results and errors as hiredis's. */
int redis_buffer_read(redisContext *c);
/* hiredis's READ_BUF: a read takes up to this much */
#define REDIS_READ_CHUNK (16 * 1024)
/* The same; *got receives the bytes read (0 when none; REDIS_READ_CHUNK:
 * more may be waiting). */
int redis_buffer_read_got(redisContext *c, size_t *got);
/* The same without blocking (recv MSG_DONTWAIT on any context): *got 0
 * and REDIS_OK when nothing is waiting. For a reader whose last read was
 * full: the next one usually finds more, and poll(2) before it would be a
 * wasted system call. */
int redis_buffer_read_nowait(redisContext *c, size_t *got);
int redis_get_reply(redisContext *c, void **reply);
/* Deep copy / free of the strings in opts. */
/* redis_opts_copy: 0, or -1 out of memory (dst then cleared). */
int redis_opts_copy(struct baton_redis_opts *dst, const struct baton_redis_opts *src);
void redis_opts_clear(struct baton_redis_opts *o);

#endif
