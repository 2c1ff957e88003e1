/* TLS for Redis connections: hiredis 0.14 (Debian 12) has none, so the TLS
 * session lives outside it. redis_tls_connect connects, runs the handshake
 * (server certificate chain and host name verified, optional client
 * certificate) and returns one end of a socketpair; the caller hands it to
 * redisConnectFd and uses hiredis exactly as over TCP. One bridge thread
 * for the whole process pumps bytes between the other end and the TLS
 * session (see tls.c for why this design). No hiredis here.
 *
 * redis/, bottom to top: tls <- io <- sentinel <- open; a file includes
 * only the layers below its own (tests/check_redis_layers.sh). This: tls, the bottom.
 */
#ifndef BATON_REDIS_TLS_H
#define BATON_REDIS_TLS_H

#include <stddef.h>
#include <stdint.h>

#include "baton/redis.h"

/* Connects to host:port (TCP, then the TLS handshake, both within
 * timeout_ms in all), verifying the server's certificate against
 * t->ca_file (or the system's CA store) and the name t->server_name (or
 * host; an IP address is checked against the certificate's IP addresses);
 * presents t->cert_file/t->key_file when set. Returns a blocking,
 * close-on-exec file descriptor for redisConnectFd (hiredis owns it: closing
 * it ends the TLS session), or -1 with err reading "redis host:port:
 * connect: <reason>" or "redis host:port: TLS: <reason>". Never falls back to
 * plain text. When the server or the network ends the session later, the
 * descriptor reads EOF (hiredis: "Server closed the connection"), and a TLS
 * error (an alert, a corrupt record) is logged naming host:port. */
int redis_tls_connect(const struct baton_redis_tls_opts *t, const char *host, int port, int64_t timeout_ms,
                      char *err, size_t errlen);

/* Sessions the bridge thread currently pumps (tests). */
size_t redis_tls_active(void);

#endif
