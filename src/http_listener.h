/* The operations HTTP listener (built in, its own thread; see http_listener.c):
 *   GET /metrics  Prometheus text format
 *   GET /healthz  200 "ok" while the process runs
 *   GET /readyz   200 when the locker and every sink are reachable, else 503
 *                 with {"ready":false,"reason":"..."}
 *   GET /status   JSON: every endpoint with role, epoch, since, counts
 * Control (operator actions), POST only, JSON answers {"ok":..,"message":..}:
 *   POST /v1/endpoints/NAME/step-down[?hold_ms=N]   200, 404 no such endpoint,
 *                 409 the endpoint has no lease
 *   POST /v1/drain, POST /v1/resume
 * refused (403) unless the peer is on loopback, or, when an admin token is
 * given, only with "Authorization: Bearer TOKEN" (401 without, 403 wrong);
 * every control request is logged with the peer address.
 * Listens on "host:port" (loopback by default in the example config). */
#ifndef BATON_HTTP_LISTENER_H
#define BATON_HTTP_LISTENER_H

#include <stddef.h>

struct gateway;
struct http_listener;

/* admin_token: NULL = control from loopback peers only; not copied (must
 * outlive the listener). */
struct http_listener *http_listener_start(const char *listen, struct gateway *gw, const char *admin_token,
                                          char *err, size_t errlen);
/* NULL is a no-op. */
void http_listener_stop(struct http_listener *l);
/* Parses "host:port" (IPv4 literal or "localhost"). Returns 0 or -1. */
int http_listen_parse(const char *listen, char *host, size_t hostlen, int *port);

#endif
