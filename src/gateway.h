/* The gateway wires everything: for each enabled endpoint a bounded queue, a
 * forwarder thread (queue -> leader-now check -> sink), and the guard that
 * starts and stops the endpoint (ActiveGuard), or the endpoint running
 * unguarded / with its own OnceGuard. */
#ifndef BATON_GATEWAY_H
#define BATON_GATEWAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* Operator control (the ops listener's POST /v1/... routes).
 * gateway_step_down: the endpoint `name` steps down gracefully (drain under
 * the still-valid lease, replay mark, release, announcement) and stays out
 * of the race for hold_ms (0: 2 x its lease ttl). Returns 0, -1 when no
 * enabled endpoint has that name, -2 when it has no lease (guard once or
 * none, or no locker: nobody would take it over); msg says what happened
 * or why not.
 * gateway_drain: every leased endpoint steps down and stays standby (warm:
 * replay rings kept) until gateway_resume; /readyz and /status say
 * "draining". Both return at once; the hand-overs run on the guards'
 * threads. */
int gateway_step_down(struct gateway *gw, const char *name, int64_t hold_ms, char *msg, size_t len);
void gateway_drain(struct gateway *gw);
void gateway_resume(struct gateway *gw);
bool gateway_draining(const struct gateway *gw);

/* Introspection for the metrics and status listener. */
void gateway_render_metrics(struct gateway *gw, struct jbuf *out); /* Prometheus text */
void gateway_render_status(struct gateway *gw, struct jbuf *out);  /* JSON */
/* 0 when ready (locker reachable, sinks reachable), else -1 with reason. */
int gateway_ready(struct gateway *gw, char *reason, size_t len);

#endif
