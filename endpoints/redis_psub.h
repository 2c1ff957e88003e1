/* redis_psub endpoint: pure pieces exposed for unit tests and fuzzing (the
 * endpoint itself is reached through ep_redis_psub_ops in the registry).
 *
 * redis_psub_decode classifies one RESP2 reply read on a subscribed
 * connection without copying anything: the event points into the reply. */
#ifndef BATON_REDIS_PSUB_H
#define BATON_REDIS_PSUB_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "endpoints/endpoint.h"
#include "endpoints/redis_settings.h"
#include "common/envelope.h"

/* The settings table fills this struct. */
struct redis_psub_settings {
    struct redis_conn_settings conn; /* host, port, db, user, password, timeouts */
    struct strlist patterns; /* PSUBSCRIBE */
    struct strlist channels; /* SUBSCRIBE */
    int64_t reconnect_min_ms;
    int64_t reconnect_max_ms;
    int64_t ping_interval_ms; /* idle keepalive; 0 = never ping */
    struct strlist sentinels; /* Sentinel discovery instead of host/port */
    char *master_name;
    struct redis_tls_settings tls;
    int64_t max_reply_bytes; /* 0 = REDIS_MAX_REPLY_SOURCE (64 MiB) */
};

enum psub_kind {
    PSUB_MESSAGE,      /* ["message", channel, payload] */
    PSUB_PMESSAGE,     /* ["pmessage", pattern, channel, payload] */
    PSUB_SUBSCRIBED,   /* ["subscribe" | "psubscribe", name, count] */
    PSUB_UNSUBSCRIBED, /* ["unsubscribe" | "punsubscribe", name, count] */
    PSUB_PONG,         /* ["pong", ""] (PING while subscribed) or +PONG */
    PSUB_ERROR,        /* an error reply: text in payload */
    PSUB_MALFORMED,    /* anything else: reason in payload (static text) */
};

struct psub_event {
    enum psub_kind kind;
    const char *channel; /* MESSAGE, PMESSAGE; SUBSCRIBED/UNSUBSCRIBED: the name */
    size_t channel_len;
    const char *pattern; /* PMESSAGE only, else NULL */
    size_t pattern_len;
    const char *payload; /* MESSAGE, PMESSAGE; ERROR/MALFORMED: description */
    size_t payload_len;
    int pattern_sub;     /* SUBSCRIBED/UNSUBSCRIBED: 1 for the p- variants */
};

/* Classifies r (never NULL). Never fails: unexpected shapes are MALFORMED. */
enum psub_kind redis_psub_decode(const redisReply *r, struct psub_event *ev);

/* Builds the envelope of a MESSAGE/PMESSAGE event into e (reused buffer):
 * endpoint, type, epoch, received_at, channel, pattern (PMESSAGE only),
 * payload (string when UTF-8, else base64). id: NULL, or the replay id
 * (failover = "replay"). Its ordering key (message.key) is the channel's
 * (message_key_hash of the channel the message was published on, never the
 * pattern). */
void redis_psub_envelope(struct envelope *e, const char *endpoint, uint64_t epoch,
                         int64_t received_wall_ms, const struct psub_event *ev, const char *id);

/* failover = "replay", standby: the compact record of a MESSAGE/PMESSAGE
 * event (message.raw; id from replay_id_next), instead of its envelope;
 * message.key set as redis_psub_envelope sets it.
 * wall_ms / mono_us: when it was read (received_at, received_mono_us). */
struct message *redis_psub_raw(const struct psub_event *ev, int64_t wall_ms, int64_t mono_us,
                               uint64_t id);
/* failover = "replay": renders the raw record a standby kept (message.raw)
 * into the envelope redis_psub_envelope would have built, in term epoch,
 * with "replayed":true when replayed; fp and key are the record's. NULL when
 * raw is not such a record. */
struct message *redis_psub_render(const char *endpoint, struct envelope *e,
                                  const struct message *raw, uint64_t epoch, bool replayed);

/* The cross-field checks of the endpoint's validate op, callable directly. */
int redis_psub_validate(const struct redis_psub_settings *s, enum guard_kind guard, bool force,
                        char *msg, size_t msglen);

#endif
