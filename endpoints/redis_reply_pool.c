/* Recycled hiredis reply objects: see redis_reply_pool.h. */
#include "endpoints/redis_reply_pool.h"

#include <stdlib.h>
#include <string.h>

#include "redis/io.h"

/* Objects kept between replies: a pmessage takes five, a burst of replies
 * is built and freed one at a time. */
#define KEEP_NODES 64
/* Largest string buffer / element vector kept with an object: a large
 * payload is not pinned in memory after its message. */
#define KEEP_BUF 4096
#define KEEP_ELEMS 16

struct node {
    redisReply r; /* first: hiredis and the decoder see a redisReply */
    struct reply_pool *pool;
    struct node *next; /* in the pool's free list */
    char *buf;
    size_t buf_cap;
    redisReply **elems;
    size_t elems_cap;
};

struct reply_pool {
    struct node *free;
    size_t n_free;
};

static void node_free(struct node *n)
{
    free(n->buf);
    free(n->elems);
    free(n);
}

struct reply_pool *reply_pool_create(void)
{
    return calloc(1, sizeof(struct reply_pool));
}

void reply_pool_destroy(struct reply_pool *p)
{
    if (!p) return;
    while (p->free) {
        struct node *n = p->free;
        p->free = n->next;
        node_free(n);
    }
    free(p);
}

size_t reply_pool_kept(const struct reply_pool *p)
{
    return p ? p->n_free : 0;
}

/* A cleared object of type `type`, linked into its parent's elements as
 * hiredis' own functions do; NULL when out of memory. */
static struct node *take(const redisReadTask *task, int type)
{
    struct reply_pool *p = task->privdata;
    struct node *n = p->free;
    if (n) {
        p->free = n->next;
        p->n_free--;
    } else {
        n = calloc(1, sizeof *n);
        if (!n) return NULL;
        n->pool = p;
    }
    memset(&n->r, 0, sizeof n->r);
    n->r.type = type;
    if (task->parent) {
        redisReply *parent = task->parent->obj;
        parent->element[task->idx] = &n->r;
    }
    return n;
}

static void give_back(struct node *n)
{
    struct reply_pool *p = n->pool;
    if (p->n_free >= KEEP_NODES) {
        node_free(n);
        return;
    }
    if (n->buf_cap > KEEP_BUF) {
        free(n->buf);
        n->buf = NULL;
        n->buf_cap = 0;
    }
    if (n->elems_cap > KEEP_ELEMS) {
        free(n->elems);
        n->elems = NULL;
        n->elems_cap = 0;
    }
    n->next = p->free;
    p->free = n;
    p->n_free++;
}

/* A create function that took n and then ran out of memory: unlinked from
 * its parent again (the reader frees the parent) and back to the pool. */
static void *drop(const redisReadTask *task, struct node *n)
{
    if (task->parent) ((redisReply *)task->parent->obj)->element[task->idx] = NULL;
    give_back(n);
    return NULL;
}

void reply_pool_put(void *reply)
{
    if (!reply) return;
    struct node *n = reply;
    if (n->r.type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < n->r.elements; i++) reply_pool_put(n->r.element[i]);
    give_back(n);
}

static void *create_string(const redisReadTask *task, char *str, size_t len)
{
    /* bounded as every baton connection's reader (redis_reader_bound) */
    if (!redis_reply_string_ok(task, len)) return NULL;
    struct node *n = take(task, task->type);
    if (!n) return NULL;
    if (n->buf_cap < len + 1) {
        char *b = malloc(len + 1);
        if (!b) return drop(task, n);
        free(n->buf);
        n->buf = b;
        n->buf_cap = len + 1;
    }
    memcpy(n->buf, str, len);
    n->buf[len] = '\0';
    n->r.str = n->buf;
    n->r.len = len;
    return &n->r;
}

static void *create_array(const redisReadTask *task, int elements)
{
    /* bounded as every baton connection's reader (redis_reader_bound) */
    if (!redis_reply_array_ok(task, elements)) return NULL;
    struct node *n = take(task, REDIS_REPLY_ARRAY);
    if (!n) return NULL;
    size_t want = elements > 0 ? (size_t)elements : 0;
    if (n->elems_cap < want) {
        redisReply **e = malloc(want * sizeof *e);
        if (!e) return drop(task, n);
        free(n->elems);
        n->elems = e;
        n->elems_cap = want;
    }
    /* an element the reader has not built yet is NULL (freed on an error) */
    if (want) memset(n->elems, 0, want * sizeof *n->elems);
    n->r.element = n->elems;
    n->r.elements = want;
    return &n->r;
}

static void *create_integer(const redisReadTask *task, long long value)
{
    if (!redis_reply_integer_ok(task, value)) return NULL;
    struct node *n = take(task, REDIS_REPLY_INTEGER);
    if (!n) return NULL;
    n->r.integer = value;
    return &n->r;
}

static void *create_nil(const redisReadTask *task)
{
    struct node *n = take(task, REDIS_REPLY_NIL);
    return n ? &n->r : NULL;
}

static redisReplyObjectFunctions pool_functions = {
    .createString = create_string,
    .createArray = create_array,
    .createInteger = create_integer,
    .createNil = create_nil,
    .freeObject = reply_pool_put,
};

void reply_pool_attach(struct reply_pool *p, redisReader *r)
{
    r->fn = &pool_functions;
    r->privdata = p;
}
