/* The low layer of a Redis connection: the connect step (plain TCP, or TLS
 * through tls.h), replies bounded in size, reads into a heap buffer, one
 * deadline per reply, the command helpers, opts copy/clear. hiredis 0.14
 * (no TLS, RESP2). Opening a connection (AUTH, SELECT, Sentinel) is open.h.
 *
 * redis/, bottom to top: tls <- io <- sentinel <- open; a file includes
 * only the layers below its own (tests/check_redis_layers.sh). This: io, over tls.
 */
#ifndef BATON_REDIS_IO_H
#define BATON_REDIS_IO_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "baton/redis.h"

/* The connect step of redis_conn_open_ex (also for reaching sentinels):
 * host:port over TLS when o->tls.enabled (redis/tls.h, never plain
 * text then), else plain TCP; within o->connect_timeout_ms. A connected
 * blocking context (no AUTH, SELECT or command timeout yet), or NULL with
 * err naming host:port ("redis h:p: connect: ...", "redis h:p: TLS: ..."). */
redisContext *redis_conn_connect(const struct baton_redis_opts *o, const char *host, int port, char *err,
                                 size_t errlen);
/* Largest array reply baton accepts from any Redis. hiredis 0.14 allocates
 * an array's element table as soon as it reads the "*N" header, so a
 * misbehaving server or a corrupt stream declaring "*366666666" would make it
 * calloc gigabytes; baton's replies (pub/sub messages, script results,
 * MGET of a config's leases) are far smaller. */
#define REDIS_MAX_ARRAY_ELEMENTS 65536
/* Largest reply of a source connection (redis_psub) unless configured;
 * the locker's and the sentinels' is BATON_REDIS_MAX_REPLY_DEFAULT. */
#define REDIS_MAX_REPLY_SOURCE ((int64_t)64 << 20)
/* Makes reader refuse, failing the reply (a reader error: the connection is
 * dropped like on any protocol error, c->errstr saying why):
 * - arrays larger than REDIS_MAX_ARRAY_ELEMENTS or nested more than 7 deep;
 * - a reply whose strings (and 16 bytes per array element) add up to more
 *   than max_reply_bytes (0: BATON_REDIS_MAX_REPLY_DEFAULT);
 * - an integer that is not "-?[0-9]+" within int64 (hiredis 0.14 reads
 *   ":99999999999999999999" as whatever the overflow makes of it, ":1x" as -1).
 * redis_conn_open does this on every context it returns (with o's
 * max_reply_bytes); call it again to change the limit. */
void redis_reader_bound(redisReader *reader);
void redis_reader_set_max(redisReader *reader, int64_t max_reply_bytes);
/* The same checks for a reader with functions of its own (the redis_psub
 * reply pool): its create functions call these first and return NULL when
 * they say false (the limit set with redis_reader_set_max applies). */
bool redis_reply_array_ok(const redisReadTask *task, int elements);
bool redis_reply_string_ok(const redisReadTask *task, size_t len);
bool redis_reply_integer_ok(const redisReadTask *task, long long value);
/* After feeding reader: false, with why, when a bulk string's declared
 * length (header read, data still coming) or the bytes not yet parsed
 * exceed the limit. redis_buffer_read checks this after every read. */
bool redis_reader_fed_ok(const redisReader *reader, char *why, size_t whylen);
/* The array size check alone (a warning, rate-limited, names the size). */
bool redis_array_size_ok(int elements);
/* redisGetReplyFromReader with a refusal of the checks above reported in
 * c->errstr ("reply of N bytes over the limit of M (max_reply_bytes)")
 * instead of hiredis's "Out of memory". Use it for every reply taken out
 * of a bounded context's reader. */
int redis_next_reply(redisContext *c, void **reply);
/* Part of a reply is in c's reader (a message arriving): a reader that
 * waits for messages holds it to a deadline of its own. */
bool redis_reply_pending(const redisContext *c);
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
/* redisGetReply with ONE deadline: the reply must be complete within the
 * context's command timeout (its SO_RCVTIMEO, set by redis_conn_open) from
 * the call, however the bytes trickle in; otherwise the call fails, c->err
 * is set ("no answer within N ms", or "no complete answer within N ms"
 * when part of it came) and the socket is shut down: free the context. */
int redis_get_reply(redisContext *c, void **reply);
/* redisCommandArgv / redisCommand through redis_get_reply (the deadline,
 * the bounds): the reply, or NULL with c->err and c->errstr set. The
 * format is hiredis's (%s, %b), not printf's. */
redisReply *redis_command_argv(redisContext *c, int argc, const char **argv, const size_t *argvlen);
redisReply *redis_commandf(redisContext *c, const char *fmt, ...);
/* Deep copy / free of the strings in opts. */
/* redis_opts_copy: 0, or -1 out of memory (dst then cleared). */
int redis_opts_copy(struct baton_redis_opts *dst, const struct baton_redis_opts *src);
void redis_opts_clear(struct baton_redis_opts *o);

#endif
