/* Internal to the sink implementations (src/sinks.c, src/sink_*.c): the ops
 * tables the registry lists. */
#ifndef BATON_SINK_IMPL_H
#define BATON_SINK_IMPL_H

#include <stddef.h>

#include "src/sink.h"

extern const struct sink_ops sink_stdout_ops;
extern const struct sink_ops sink_http_ops;
extern const struct sink_ops sink_file_ops;
extern const struct sink_ops sink_redis_stream_ops;
/* The redis_stream sink's Lua script (its keys and arguments: src/sink_redis_stream.c),
 * for its benchmark's bare loop. */
extern const char sink_redis_stream_script[];
extern const struct sink_ops sink_postgresql_ops;

#endif
