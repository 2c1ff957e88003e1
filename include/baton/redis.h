/* libbaton-guard: options of the Redis locker (baton_locker_redis_create).
 * Strings are copied by the constructor; fields left zero take the defaults
 * given. Standalone Redis (host/port) or Sentinel (sentinels + master_name);
 * optional TLS (OpenSSL, verifying the server certificate and host name) and
 * ACL user. */
#ifndef BATON_PUBLIC_REDIS_H
#define BATON_PUBLIC_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* TLS for a Redis connection (hiredis 0.14 has none: baton bridges it through OpenSSL).
 * enabled = false: plain TCP. Never falls back to plain text. */
struct baton_redis_tls_opts {
    bool enabled;
    char *ca_file;     /* CA bundle verifying the server; NULL = the system's */
    char *cert_file;   /* client certificate (optional, with key_file) */
    char *key_file;
    char *server_name; /* name checked in the server certificate and sent as
                        * SNI; NULL = the host connected to */
};

struct baton_redis_opts {
    char *host;               /* default "127.0.0.1" */
    int port;                 /* default 6379 */
    int db;                   /* default 0 */
    char *user;               /* ACL user or NULL */
    char *password;           /* resolved secret or NULL */
    int64_t connect_timeout_ms; /* default 1000 */
    int64_t command_timeout_ms; /* default 1000 */
    struct baton_redis_tls_opts tls;  /* also used for the sentinels */
    /* Sentinel: with n_sentinels > 0 the master of master_name is asked of
     * the sentinels ("host:port", tried in order) on every connect, and
     * host/port are not used. */
    char **sentinels;
    size_t n_sentinels;
    char *master_name;
    /* Largest reply accepted, in bytes (a bulk string, or all the strings of
     * one array reply together): a bigger one fails its command and closes
     * the connection. 0 = the default, 1 MiB (BATON_REDIS_MAX_REPLY_DEFAULT):
     * the locker's replies are tiny; a source connection sets more. The
     * sentinels' answers are held to 1 MiB whatever this says. */
    int64_t max_reply_bytes;
};

#define BATON_REDIS_MAX_REPLY_DEFAULT ((int64_t)1 << 20)

#ifdef __cplusplus
}
#endif

#endif
