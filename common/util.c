/* Clocks, randomness, sleeping, allocation helpers. */
#include "common/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static void oom(size_t n)
{
    char msg[128];
    int len = snprintf(msg, sizeof msg, "baton: out of memory allocating %zu bytes\n", n);
    if (len > 0) {
        ssize_t w = write(STDERR_FILENO, msg, (size_t)len);
        (void)w;
    }
    abort();
}

char *xstrdup(const char *s)
{
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (!p) oom(n);
    memcpy(p, s, n);
    return p;
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

int net_host_parse(const char *spec, int default_port, struct net_host *out, char *err,
                   size_t errlen)
{
    const char *host, *port = NULL;
    size_t hl;
    if (!spec || !*spec) {
        snprintf(err, errlen, "entry \"\" is empty (expected \"host\" or \"host:port\")");
        return -1;
    }
    if (spec[0] == '[') {
        const char *close = strchr(spec, ']');
        if (!close) {
            snprintf(err, errlen, "entry \"%s\": missing ']' after the IPv6 address", spec);
            return -1;
        }
        host = spec + 1;
        hl = (size_t)(close - host);
        if (close[1] == ':') {
            port = close + 2;
        } else if (close[1] != '\0') {
            snprintf(err, errlen, "entry \"%s\": expected \":port\" after ']'", spec);
            return -1;
        }
    } else {
        const char *colon = strchr(spec, ':');
        if (colon && strchr(colon + 1, ':')) {
            snprintf(err, errlen, "entry \"%s\": write an IPv6 address in brackets, e.g. "
                                  "\"[::1]:5672\"", spec);
            return -1;
        }
        host = spec;
        hl = colon ? (size_t)(colon - spec) : strlen(spec);
        if (colon) port = colon + 1;
    }
    if (hl == 0) {
        snprintf(err, errlen, "entry \"%s\" has no host", spec);
        return -1;
    }
    if (hl >= sizeof out->host) {
        snprintf(err, errlen, "entry \"%.60s...\": host longer than %zu bytes", spec,
                 sizeof out->host - 1);
        return -1;
    }
    long p = default_port;
    if (port) {
        char *end = NULL;
        p = (*port >= '0' && *port <= '9') ? strtol(port, &end, 10) : -1;
        if (p < 1 || p > 65535 || !end || *end != '\0') {
            snprintf(err, errlen, "entry \"%s\": port must be 1..65535", spec);
            return -1;
        }
    }
    memcpy(out->host, host, hl);
    out->host[hl] = '\0';
    out->port = (int)p;
    return 0;
}

void net_host_format(const struct net_host *h, char *out, size_t len)
{
    if (strchr(h->host, ':')) snprintf(out, len, "[%s]:%d", h->host, h->port);
    else snprintf(out, len, "%s:%d", h->host, h->port);
}
