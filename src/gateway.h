/* The gateway wires everything: for each enabled endpoint a bounded queue, a
 * forwarder thread (queue -> leader-now check -> sink), and the guard that
 * starts and stops the endpoint (ActiveGuard), or the endpoint running
 * unguarded / with its own OnceGuard. */
#ifndef BATON_GATEWAY_H
#define BATON_GATEWAY_H

#include <stdbool.h>
#include <stddef.h>

#include "common/json.h"
#include "src/config.h"

struct gateway;

struct gateway *gateway_create(const struct baton_config *cfg, char *err, size_t errlen);
/* Starts guards, endpoints and forwarders. */
int gateway_start(struct gateway *gw);
/* Stops endpoints (guards release leases and announce), drains queues to the
 * sinks for at most cfg->drain_timeout_ms, joins every thread. */
void gateway_stop(struct gateway *gw);
void gateway_destroy(struct gateway *gw);

/* Introspection for the metrics and status listener. */
void gateway_render_metrics(struct gateway *gw, struct jbuf *out); /* Prometheus text */
void gateway_render_status(struct gateway *gw, struct jbuf *out);  /* JSON */
/* 0 when ready (locker reachable, sinks reachable), else -1 with reason. */
int gateway_ready(struct gateway *gw, char *reason, size_t len);

#endif
