/* Small helpers the daemon and the endpoints share: allocation that treats
 * OOM as fatal, host lists. Clocks, tokens, sleeping, back-off, base64 and
 * rate limiting are in base/util.h (the base room): include it where used. */
#ifndef BATON_UTIL_H
#define BATON_UTIL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* strdup that aborts on OOM (baton treats OOM as fatal, like redis). */
char *xstrdup(const char *s);
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);

/* One server of a `hosts` list: rabbitmq hosts, mysql_cdc hosts. */
struct net_host {
    char host[256]; /* name or address, IPv6 without brackets */
    int port;
};
/* Parses one entry: "host", "host:port", "[v6addr]" or "[v6addr]:port"
 * (port 1..65535; default_port when absent). An IPv6 address must be in
 * brackets (a bare "::1" is refused: "::1:5672" would be ambiguous).
 * Returns 0, or -1 with err filled (quoting the entry). */
int net_host_parse(const char *spec, int default_port, struct net_host *out, char *err,
                   size_t errlen);
/* "host:port", with the host in brackets when it contains ':' (IPv6):
 * "[::1]:5672". The form shown in logs and in /status ("source"). */
void net_host_format(const struct net_host *h, char *out, size_t len);

#endif
