/* Forwarded messages: one allocation, JSON stored inline. */
#include "common/message.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"

const char *msg_outcome_name(enum msg_outcome o)
{
    switch (o) {
    case MSG_DELIVERED: return "delivered";
    case MSG_DROPPED_QUEUE_FULL: return "queue_full";
    case MSG_DROPPED_NOT_LEADER: return "not_leader";
    case MSG_DROPPED_SINK_FAILED: return "sink_failed";
    case MSG_DROPPED_SHUTDOWN: return "shutdown";
    case MSG_DROPPED_TERM_ENDED: return "term_ended";
    }
    return "unknown";
}

/* A fresh header over a buffer of cap bytes of room, holding json. */
static struct message *init(struct message *m, size_t cap, struct message_pool *pool,
                            const char *json, size_t len)
{
    memset(m, 0, sizeof *m);
    atomic_init(&m->refs, 1);
    m->pool = pool;
    m->cap = cap;
    if (len && json) memcpy(m->json, json, len); /* json NULL: the caller fills it */
    m->json[len] = '\0';
    m->len = len;
    return m;
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

uint64_t message_key_hash(const void *key, size_t n)
{
    uint64_t h = fnv1a(14695981039346656037ULL, key, n);
    return h ? h : 1;
}

uint64_t message_key_hash_parts(const void *const *parts, const size_t *lens, size_t nparts)
{
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < nparts; i++) {
        uint64_t len = lens[i];
        h = fnv1a(h, &len, sizeof len);
        h = fnv1a(h, parts[i], lens[i]);
    }
    return h ? h : 1;
}

struct message *message_new(const char *json, size_t len)
{
    if (len > SIZE_MAX - sizeof(struct message) - 1) xmalloc(SIZE_MAX); /* aborts */
    return init(xmalloc(sizeof(struct message) + len + 1), len + 1, NULL, json, len);
}

/* --- the pool ---
 *
 * Returners (any thread, at the last unref) push onto ret: a lock-free
 * stack that only ever loses all its nodes at once (the owner's exchange),
 * so a push cannot suffer ABA. refs counts the owner (1) plus every buffer
 * out plus the owner's credit: refs taken ahead in steps of CREDIT, so the
 * owner does not touch the returners' cache line per message. */
#define CREDIT 64
#define POOL_ROUND 256

struct message_pool {
    _Atomic(struct message *) ret;
    atomic_size_t ret_bytes; /* about how much is on ret (sum of cap) */
    atomic_size_t refs;
    size_t max_bytes;
    /* the owner's side, on its own cache line */
    _Alignas(64) struct message *local;
    size_t credit;
};

struct message_pool *message_pool_create(size_t max_bytes)
{
    struct message_pool *p = xcalloc(1, sizeof *p);
    atomic_init(&p->ret, NULL);
    atomic_init(&p->ret_bytes, 0);
    atomic_init(&p->refs, 1);
    p->max_bytes = max_bytes;
    return p;
}

static void free_list(struct message *m)
{
    while (m) {
        struct message *next = m->next;
        free(m);
        m = next;
    }
}

static void pool_unref(struct message_pool *p, size_t n)
{
    /* acq_rel: whoever frees the pool sees every push before it */
    if (atomic_fetch_sub_explicit(&p->refs, n, memory_order_acq_rel) == n) {
        free_list(atomic_exchange_explicit(&p->ret, NULL, memory_order_acquire));
        free(p);
    }
}

void message_pool_release(struct message_pool *p)
{
    if (!p) return;
    free_list(p->local);
    p->local = NULL;
    size_t n = 1 + p->credit;
    p->credit = 0;
    pool_unref(p, n);
}

size_t message_pool_outstanding(struct message_pool *p)
{
    return atomic_load(&p->refs) - 1 - p->credit;
}

static void pool_return(struct message_pool *p, struct message *m)
{
    size_t cap = m->cap;
    if (atomic_load_explicit(&p->ret_bytes, memory_order_relaxed) + cap > p->max_bytes) {
        free(m);
    } else {
        /* counted before the push: the owner subtracts only what it took,
         * so the count never goes below zero; once pushed, m is the owner's */
        atomic_fetch_add_explicit(&p->ret_bytes, cap, memory_order_relaxed);
        struct message *head = atomic_load_explicit(&p->ret, memory_order_relaxed);
        do {
            m->next = head;
        } while (!atomic_compare_exchange_weak_explicit(&p->ret, &head, m, memory_order_release,
                                                        memory_order_relaxed));
    }
    pool_unref(p, 1);
}

struct message *message_pool_new(struct message_pool *p, const char *json, size_t len)
{
    if (!p || len >= MESSAGE_POOL_MAX_BYTES) return message_new(json, len);
    struct message *m = p->local;
    if (!m) {
        m = atomic_exchange_explicit(&p->ret, NULL, memory_order_acquire);
        size_t bytes = 0;
        for (struct message *i = m; i; i = i->next) bytes += i->cap;
        if (bytes) atomic_fetch_sub_explicit(&p->ret_bytes, bytes, memory_order_relaxed);
    }
    if (m) {
        p->local = m->next;
        if (m->cap < len + 1) { /* too small for this one: let it go */
            free(m);
            m = NULL;
        }
    }
    size_t cap;
    if (m) {
        cap = m->cap;
    } else {
        cap = (len + 1 + POOL_ROUND - 1) / POOL_ROUND * POOL_ROUND;
        m = xmalloc(sizeof(struct message) + cap);
    }
    if (!p->credit) {
        atomic_fetch_add_explicit(&p->refs, CREDIT, memory_order_relaxed);
        p->credit = CREDIT;
    }
    p->credit--;
    return init(m, cap, p, json, len);
}

void message_set_failure(struct message *m, const struct message_failure *f)
{
    if (!m->failure) m->failure = xmalloc(sizeof *m->failure);
    *m->failure = *f;
}

void message_finish(struct message *m, enum msg_outcome o)
{
    if (!m) return;
    if (m->done) m->done(m->done_arg, m, o);
    message_unref(m);
}

struct message *message_ref(struct message *m)
{
    atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
    return m;
}

void message_unref(struct message *m)
{
    if (!m) return;
    /* acq_rel: the last holder sees every other holder's reads completed */
    if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1) {
        free(m->failure);
        m->failure = NULL;
        if (m->pool) pool_return(m->pool, m);
        else free(m);
    }
}
