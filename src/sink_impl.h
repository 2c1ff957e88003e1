/* Internal to the sink implementations (src/sinks.c, src/sink_*.c): the ops
 * tables the registry lists and small helpers they share. */
#ifndef BATON_SINK_IMPL_H
#define BATON_SINK_IMPL_H

#include <stddef.h>

#include "common/message.h"
#include "src/sink.h"

extern const struct sink_ops sink_stdout_ops;
extern const struct sink_ops sink_http_ops;

/* Copies the endpoint name out of an envelope, which always starts with
 * {"endpoint":"<name>". Returns the length, or 0 (out = "") when the JSON
 * does not start that way. JSON escapes in the name are decoded for the
 * simple cases (\" \\ \/); anything else is kept as written. */
size_t sink_envelope_endpoint(const struct message *m, char *out, size_t outlen);

#endif
