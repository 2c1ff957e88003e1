#include "src/http_listener.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/json.h"
#include "src/common/log.h"
#include "src/common/util.h"
#include "src/gateway.h"

struct http_listener {
    struct MHD_Daemon *d;
    struct gateway *gw;
};

int http_listen_parse(const char *listen, char *host, size_t hostlen, int *port)
{
    const char *colon = strrchr(listen, ':');
    if (!colon || colon == listen || (size_t)(colon - listen) >= hostlen) return -1;
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = '\0';
    char *end = NULL;
    long p = strtol(colon + 1, &end, 10);
    if (!end || *end || p < 0 || p > 65535) return -1;
    *port = (int)p;
    if (strcmp(host, "localhost") == 0) snprintf(host, hostlen, "127.0.0.1");
    struct in_addr a;
    if (inet_pton(AF_INET, host, &a) != 1) return -1;
    return 0;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type, struct jbuf *b)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(b->len, b->data, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **state)
{
    struct http_listener *l = cls;
    struct jbuf b;
    jbuf_init(&b, 4096);
    enum MHD_Result ret;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        jbuf_rawz(&b, "method not allowed\n");
        ret = reply(c, 405, "text/plain", &b);
    } else if (strcmp(url, "/metrics") == 0) {
        gateway_render_metrics(l->gw, &b);
        ret = reply(c, 200, "text/plain; version=0.0.4", &b);
    } else if (strcmp(url, "/healthz") == 0) {
        jbuf_rawz(&b, "ok\n");
        ret = reply(c, 200, "text/plain", &b);
    } else if (strcmp(url, "/readyz") == 0) {
        char reason[512] = "";
        bool first = true;
        int ok = gateway_ready(l->gw, reason, sizeof reason) == 0;
        jbuf_char(&b, '{');
        jbuf_key(&b, &first, "ready");
        jbuf_bool(&b, ok);
        if (!ok) {
            jbuf_key(&b, &first, "reason");
            jbuf_strz(&b, reason);
        }
        jbuf_rawz(&b, "}\n");
        ret = reply(c, ok ? 200 : 503, "application/json", &b);
    } else if (strcmp(url, "/status") == 0) {
        gateway_render_status(l->gw, &b);
        jbuf_char(&b, '\n');
        ret = reply(c, 200, "application/json", &b);
    } else {
        jbuf_rawz(&b, "not found: try /metrics, /healthz, /readyz, /status\n");
        ret = reply(c, 404, "text/plain", &b);
    }
    jbuf_free(&b);
    return ret;
}

struct http_listener *http_listener_start(const char *listen, struct gateway *gw, char *err, size_t errlen)
{
    char host[64];
    int port;
    if (http_listen_parse(listen, host, sizeof host, &port) != 0) {
        snprintf(err, errlen, "expected \"host:port\" with an IPv4 address, got \"%s\"", listen);
        return NULL;
    }
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, host, &sa.sin_addr);
    struct http_listener *l = xcalloc(1, sizeof *l);
    l->gw = gw;
    l->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, (uint16_t)port, NULL, NULL,
                            handle, l, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)10, MHD_OPTION_END);
    if (!l->d) {
        snprintf(err, errlen, "cannot listen on %s:%d (address in use or not permitted)", host, port);
        free(l);
        return NULL;
    }
    log_info("http", NULL, "listening on http://%s:%d (/metrics /healthz /readyz /status)", host, port);
    return l;
}

void http_listener_stop(struct http_listener *l)
{
    if (!l) return;
    MHD_stop_daemon(l->d);
    free(l);
}
