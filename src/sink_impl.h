/* Internal to the sink implementations (src/sinks.c, src/sink_*.c): the ops
 * tables the registry lists. */
#ifndef BATON_SINK_IMPL_H
#define BATON_SINK_IMPL_H

#include <stddef.h>

#include "src/sink.h"

extern const struct sink_ops sink_stdout_ops;
extern const struct sink_ops sink_http_ops;
extern const struct sink_ops sink_file_ops;
extern const struct sink_ops sink_postgresql_ops;

#endif
