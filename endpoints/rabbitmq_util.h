/* Pure helpers of the rabbitmq endpoint (no connection): AMQP field tables
 * to JSON, a delivery's envelope, the queue name template, the ack decision
 * per outcome. Kept apart
 * from endpoints/rabbitmq.c so unit tests can exercise them directly. */
#ifndef BATON_RABBITMQ_UTIL_H
#define BATON_RABBITMQ_UTIL_H

#include <amqp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/envelope.h"
#include "common/json.h"
#include "common/message.h"

/* Nesting deeper than this is written as null (rabbitmq-c itself decodes
 * tables recursively, so this only bounds our own recursion). */
#define RMQ_JSON_MAX_DEPTH 32

/* Writes an AMQP field table as a JSON object:
 *   bool -> true/false; all integer kinds -> numbers; f32/f64 -> numbers
 *   (NaN/Inf -> null); decimal -> an exact JSON number ("12.345");
 *   timestamp -> integer seconds since the epoch; long string 'S' -> string
 *   when valid UTF-8, else base64 string; byte array 'x' -> base64 string;
 *   array -> JSON array; nested table -> object; void -> null.
 * Returns the number of values written as null because they could not be
 * represented (unknown kind, depth limit), 0 normally. */
int rmq_table_to_json(struct jbuf *b, const amqp_table_t *t);
/* One field value (used for arrays, exposed for tests). */
int rmq_field_to_json(struct jbuf *b, const amqp_field_value_t *v, int depth);

/* Builds the envelope of delivery d into e (reused buffer): endpoint, type,
 * epoch, id (the message_id property, its first 255 bytes; none without
 * it or when empty), received_at, exchange, routing_key, delivery_tag,
 * redelivered, queue (when queue is not NULL), message_id, content_type,
 * headers (rmq_table_to_json), payload. Its ordering key (message.key) is
 * the routing key's (message_key_hash; the empty routing key is one key
 * too). Returns what rmq_table_to_json returned for the headers (values
 * written as null), 0 without headers. */
int rmq_envelope(struct envelope *e, const char *endpoint, const char *type, uint64_t epoch,
                 int64_t received_wall_ms, const amqp_envelope_t *d, const char *queue);

/* Expands a queue name template. Placeholders: {name} (endpoint name),
 * {owner}, {type}, {hostname}, {pid}; "{{" and "}}" are literal braces.
 * Any other {...} is an error. The result must fit an AMQP short string
 * (255 bytes). Returns 0, or -1 with err filled. */
struct rmq_name_vars {
    const char *name;
    const char *owner; /* may be NULL */
    const char *type;
    const char *hostname;
    long pid;
};
int rmq_queue_name_expand(const char *tmpl, const struct rmq_name_vars *v, char *out,
                          size_t outlen, char *err, size_t errlen);
/* Checks a template's placeholders without expanding it. */
int rmq_queue_name_check(const char *tmpl, char *err, size_t errlen);

/* What to tell the broker when a message with manual ack finishes:
 *   RMQ_ACK          the sink accepted it
 *   RMQ_NACK_REQUEUE give it back to the queue (group mode: the next
 *                    delivery, possibly to another leader, retries it)
 *   RMQ_NACK_DROP    reject without requeue (private mode: requeueing into a
 *                    private queue only loops it back to the same consumer;
 *                    the gateway has counted and logged the drop)
 *   RMQ_LEAVE        send nothing: the connection is about to close (not
 *                    leader, shutdown, the lease term ended) and the broker
 *                    requeues unacked messages itself, without a redelivery
 *                    loop meanwhile.
 * MSG_DROPPED_TERM_ENDED (the message's lease term ended before the sink
 * took it; never delivered in a later term): group -> RMQ_LEAVE (requeued
 * for the next leader when the demotion that always follows a term's end
 * closes the connection), private -> RMQ_NACK_DROP (dropped and counted). */
enum rmq_ack_action { RMQ_ACK, RMQ_NACK_REQUEUE, RMQ_NACK_DROP, RMQ_LEAVE };
enum rmq_ack_action rmq_ack_action_for(enum msg_outcome o, bool group_mode);

/* Delivery tags travel in message.seq together with the connection
 * generation, so an ack for a closed connection is never sent on a new one
 * (delivery tags are per channel; a stale tag would close the channel). */
#define RMQ_TAG_BITS 48
static inline uint64_t rmq_seq_pack(unsigned gen, uint64_t tag)
{
    return ((uint64_t)(gen & 0xFFFFu) << RMQ_TAG_BITS) |
           (tag & (((uint64_t)1 << RMQ_TAG_BITS) - 1));
}
static inline unsigned rmq_seq_gen(uint64_t seq) { return (unsigned)(seq >> RMQ_TAG_BITS); }
static inline uint64_t rmq_seq_tag(uint64_t seq)
{
    return seq & (((uint64_t)1 << RMQ_TAG_BITS) - 1);
}

#endif
