/* redis_reply_pool: recycled hiredis reply objects for one connection that
 * reads many small replies (a redis_psub subscriber).
 *
 * hiredis' default reply functions allocate for every object of a reply:
 * a pmessage ["pmessage", pattern, channel, payload] is an array, its
 * element vector and four strings, each with a copy of its bytes: ten
 * malloc/free pairs per message. A pool keeps the objects freed by
 * reply_pool_put, with their buffers, and hands them out again, so that a
 * steady stream of messages allocates nothing.
 *
 * The objects are ordinary redisReply structs (the decoder and the tests
 * read them as hiredis builds them); only their allocation differs: free
 * them with reply_pool_put, never with freeReplyObject. The pool is used
 * by one thread (the connection's reader) and must outlive every context
 * attached to it: redisFree hands a reply the reader was still building
 * back to the pool. Replies are bounded as on every baton connection
 * (redis_reader_bound: array size and depth, strict integers, and the
 * reply's bytes within the limit set by redis_reader_set_max, which
 * attaching keeps). */
#ifndef BATON_REDIS_REPLY_POOL_H
#define BATON_REDIS_REPLY_POOL_H

#include <hiredis/hiredis.h>
#include <stddef.h>

struct reply_pool;

/* NULL when out of memory. */
struct reply_pool *reply_pool_create(void);

/* Frees the pool and the objects it keeps. Every object it handed out
 * must have been put back (redisFree of every attached context first). */
void reply_pool_destroy(struct reply_pool *p);

/* From now on the reader (a context's c->reader) builds its replies from p. */
void reply_pool_attach(struct reply_pool *p, redisReader *r);

/* Returns a reply built from a pool (and everything in it) to its pool.
 * NULL is ignored. */
void reply_pool_put(void *reply);

/* Objects kept for reuse now (for tests). */
size_t reply_pool_kept(const struct reply_pool *p);

#endif
