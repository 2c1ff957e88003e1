/* libbaton-guard: options of the etcd v3 locker (baton_locker_etcd_create).
 * Strings are copied by the constructor; timeouts left zero take the
 * defaults given. etcd lease TTLs are whole seconds, at least 2 s. */
#ifndef BATON_PUBLIC_ETCD_H
#define BATON_PUBLIC_ETCD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct baton_etcd_opts {
    char **endpoints;   /* "http://127.0.0.1:2379", "https://host:2379", ... */
    size_t n_endpoints; /* >= 1 */
    char *ca_file;      /* verify the server against this CA (https) or NULL */
    char *cert_file;    /* client certificate (https) or NULL */
    char *key_file;     /* its key or NULL */
    char *user;         /* etcd auth user or NULL */
    char *password;     /* resolved secret or NULL */
    int64_t connect_timeout_ms; /* default 1000 */
    int64_t command_timeout_ms; /* default 1000 */
};

#ifdef __cplusplus
}
#endif

#endif
