/* An envelope split into fields (the redis_stream sink's entries): the
 * payload as the bytes it carried, the rest as one JSON object. Reads only
 * baton's own envelopes (common/envelope.h: compact, keys without escapes). */
#ifndef BATON_ENVELOPE_SPLIT_H
#define BATON_ENVELOPE_SPLIT_H

#include <stddef.h>

#include "common/json.h"

/* Appends the envelope's "payload" to payload as bytes (the JSON string
 * unescaped, or base64-decoded when "payload_encoding":"base64"; a
 * non-string payload as its JSON text; nothing when there is none), and
 * every other field but endpoint, epoch, id, payload and payload_encoding
 * (type, received_at, replayed, the source's own: channel, headers, ...) as
 * one JSON object ("{...}", in the envelope's order) to source. */
void envelope_split_fields(const char *json, size_t len, struct jbuf *source, struct jbuf *payload);

#endif
