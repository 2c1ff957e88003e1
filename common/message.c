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

struct message *message_new(const char *json, size_t len)
{
    if (len > SIZE_MAX - sizeof(struct message) - 1) xmalloc(SIZE_MAX); /* aborts */
    struct message *m = xmalloc(sizeof *m + len + 1);
    memset(m, 0, sizeof *m);
    atomic_init(&m->refs, 1);
    if (len && json) memcpy(m->json, json, len); /* json NULL: the caller fills it */
    m->json[len] = '\0';
    m->len = len;
    return m;
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
    if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1) free(m);
}
