/* The message envelope: one JSON object per message.
 *
 *   {"endpoint":"orders","type":"redis_psub","epoch":7,"id":"...",
 *    "received_at":"2026-12-02T14:00:00.123Z", <source fields>,
 *    "payload":"..."}                      (valid UTF-8)
 *    ... "payload":"AAEC","payload_encoding":"base64"}   (otherwise)
 *
 * Usage (an endpoint keeps one struct envelope per consumer thread and
 * reuses its buffer, so building costs no allocation in steady state):
 *   envelope_begin(&e, name, type, epoch, id_or_NULL, clock_wall_ms());
 *   envelope_str(&e, "channel", ch, chlen);
 *   envelope_key(&e, "headers"); jbuf_...(&e.buf, ...);  // nested values
 *   envelope_payload(&e, data, n);            // optional, at most once
 *   struct message *m = envelope_finish(&e);  // copies; e stays reusable
 */
#ifndef BATON_ENVELOPE_H
#define BATON_ENVELOPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/json.h"
#include "common/message.h"

struct envelope {
    struct jbuf buf;
    bool first;
    uint64_t epoch;
    uint64_t key; /* the message's ordering key (envelope_order_key); 0 = none */
    char id[MESSAGE_ID_MAX];
    /* Ids for messages whose source gives none (envelope_begin with a NULL
     * or empty id): "g" + 16 random hex digits drawn at envelope_init + "-"
     * + a count, unique per envelope, so every message can be named in a
     * log line, deduplicated by a receiver across retries (X-Baton-Id) and
     * found in a dead-letter file. */
    char gen[20];
    uint64_t gen_n;
    struct message_pool *pool; /* envelope_finish's messages come from it */
    /* received_at of this (or the last) envelope, the message's
     * received_wall_ms, and its text: the messages of one read(2) share
     * their receive time, so the text is reused */
    int64_t ts_ms;
    char ts[32];
    /* {"endpoint":..,"type":..,"epoch":N of the last envelope begun, and the
     * endpoint, type and epoch it was made of: every message of an endpoint's
     * term starts with the same text, so it is escaped and formatted once
     * (head_len 0: none kept) */
    char head[160];
    size_t head_len;
    char head_endpoint[64];
    char head_type[32];
    uint64_t head_epoch;
};

void envelope_init(struct envelope *e);
void envelope_free(struct envelope *e);
void envelope_begin(struct envelope *e, const char *endpoint, const char *type,
                    uint64_t epoch, const char *id, int64_t received_wall_ms);
/* The same, with "replayed":true right after the epoch (as
 * envelope_restamp writes it): a message a promoted standby replays. */
void envelope_begin_replayed(struct envelope *e, const char *endpoint, const char *type,
                             uint64_t epoch, const char *id, int64_t received_wall_ms);
/* The message's ordering key (message.key): messages with the same key are
 * delivered in receive order, one at a time (endpoint setting ordering =
 * "key"). Set after envelope_begin, which clears it. */
void envelope_order_key(struct envelope *e, const void *key, size_t n);
/* Writes `"key":` (with the comma when needed); the caller writes the value
 * into e->buf with the jbuf_* writers. */
void envelope_key(struct envelope *e, const char *key);
void envelope_str(struct envelope *e, const char *key, const char *s, size_t n);
void envelope_strz(struct envelope *e, const char *key, const char *s);
void envelope_i64(struct envelope *e, const char *key, int64_t v);
void envelope_u64(struct envelope *e, const char *key, uint64_t v);
void envelope_bool(struct envelope *e, const char *key, bool v);
/* Bytes as a JSON string when valid UTF-8, else base64 plus
 * "<key>_encoding":"base64". */
void envelope_bytes(struct envelope *e, const char *key, const void *data, size_t n);
void envelope_payload(struct envelope *e, const void *data, size_t n);
/* Closes the object and returns a new message (epoch, id and
 * received_wall_ms filled in, received_mono_us = now), from the envelope's message pool: envelope_init
 * creates it, envelope_free lets go of it (messages still out stay valid). */
struct message *envelope_finish(struct envelope *e);
/* The same with received_mono_us given: an endpoint that read the clock
 * once for a read(2) holding many messages passes that reading. */
struct message *envelope_finish_at(struct envelope *e, int64_t received_mono_us);
/* A copy of m's envelope with the epoch replaced and, when replayed, a
 * "replayed":true field right after it (warm standby replay). fp, key, id and
 * received_mono_us and received_wall_ms are kept; done is not. NULL when m holds no envelope. */
struct message *envelope_restamp(const struct message *m, uint64_t epoch, bool replayed);

#endif
