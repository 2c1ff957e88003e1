/* A small HTTP/1.1 server of its own (no libmicrohttpd: that library and
 * the GnuTLS tree it pulls in cost ~2.7 MiB of resident memory per replica
 * for four GET routes). One thread polls the listening socket, a stop pipe
 * and up to MAX_CONNS connections; a request is read up to its blank line
 * (at most REQ_MAX bytes), answered with "Connection: close" and the
 * connection closed. Every connection has a CONN_TIMEOUT_MS deadline, and
 * when every slot is taken a new connection evicts the oldest one that has
 * not sent a whole request yet: silent or slow clients cannot hold a slot for
 * long, and any number of them cannot keep /healthz from answering. */
#include "src/http_listener.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "src/gateway.h"

#define MAX_CONNS 32
#define REQ_MAX 8192
#define CONN_TIMEOUT_MS 5000

struct conn {
    int fd; /* -1: free slot */
    int64_t deadline_ms;
    char *in; /* REQ_MAX + 1 bytes while reading */
    size_t inlen;
    char *out; /* the whole response once the request is complete */
    size_t outlen, outpos;
    char peer[64];      /* "10.0.0.5:41234", for the control log lines */
    bool peer_loopback; /* 127.0.0.0/8 */
};

struct http_listener {
    int lfd;
    int stop_pipe[2];
    pthread_t thread;
    struct gateway *gw;
    const char *admin_token; /* NULL: control only from loopback peers */
    int64_t accept_err_logged_ms;
    struct conn conns[MAX_CONNS];
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

static const char *reason_phrase(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

/* Builds the whole response in c->out; head_only leaves the body out (HEAD);
 * extra: more header lines ("Name: value\r\n"), or "". */
static void respond_with(struct conn *c, int status, const char *type, const struct jbuf *body, bool head_only,
                         const char *extra)
{
    struct jbuf r;
    jbuf_init(&r, body->len + 256);
    char line[256];
    int n = snprintf(line, sizeof line,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                     "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
                     status, reason_phrase(status), type, body->len, extra);
    jbuf_raw(&r, line, (size_t)n);
    if (!head_only) jbuf_raw(&r, body->data, body->len);
    free(c->out);
    c->out = jbuf_steal(&r, &c->outlen);
    c->outpos = 0;
}

static void respond(struct conn *c, int status, const char *type, const struct jbuf *body, bool head_only)
{
    respond_with(c, status, type, body, head_only, status == 405 ? "Allow: GET, HEAD\r\n" : "");
}

/* ---- control: POST /v1/... -------------------------------------------------- */

/* The value of header `name` in the request head (after the request line),
 * copied into buf; false when absent or too long. */
static bool header_value(const char *head, const char *name, char *buf, size_t len)
{
    size_t nl = strlen(name);
    for (const char *p = head; p && *p; p = strchr(p, '\n')) {
        p += strspn(p, "\r\n");
        if (strncasecmp(p, name, nl) != 0 || p[nl] != ':') continue;
        const char *v = p + nl + 1;
        while (*v == ' ' || *v == '\t') v++;
        size_t vl = strcspn(v, "\r\n");
        while (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t')) vl--;
        if (vl >= len) return false;
        memcpy(buf, v, vl);
        buf[vl] = '\0';
        return true;
    }
    return false;
}

/* Compares in time that depends on the lengths only, never on where the
 * first difference is. */
static bool token_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    volatile unsigned char d = (unsigned char)(la != lb);
    for (size_t i = 0; i < la; i++) d |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return d == 0;
}

/* 0 when the control request may run, else the status to refuse it with
 * (401: no token, 403: wrong token or not allowed from this peer). */
static int control_allowed(const struct http_listener *l, const struct conn *c, const char *head, const char **why)
{
    if (l->admin_token) {
        char auth[600];
        if (!header_value(head, "Authorization", auth, sizeof auth) || strncasecmp(auth, "Bearer ", 7) != 0) {
            *why = "missing bearer token (admin.token_file is set)";
            return 401;
        }
        const char *t = auth + 7;
        while (*t == ' ') t++;
        bool ok = token_equal(t, l->admin_token);
        explicit_bzero(auth, sizeof auth);
        if (!ok) {
            *why = "wrong bearer token";
            return 403;
        }
        return 0;
    }
    if (!c->peer_loopback) {
        *why = "control requests come from loopback only, unless admin.token_file is set";
        return 403;
    }
    return 0;
}

static void respond_control(struct conn *c, int status, const char *message)
{
    struct jbuf b;
    jbuf_init(&b, 256);
    bool first = true;
    jbuf_char(&b, '{');
    jbuf_key(&b, &first, "ok");
    jbuf_bool(&b, status == 200);
    jbuf_key(&b, &first, "message");
    jbuf_strz(&b, message);
    jbuf_rawz(&b, "}\n");
    respond_with(c, status, "application/json", &b, false,
                 status == 401 ? "WWW-Authenticate: Bearer realm=\"baton\"\r\n"
                 : status == 405 ? "Allow: POST\r\n"
                                 : "");
    jbuf_free(&b);
}

/* hold_ms=N in the query string, N from 1 to CONTROL_HOLD_MAX_MS (as
 * baton step-down --hold-ms takes it); 0 when absent (the default hold),
 * -1 when malformed or out of range. */
#define CONTROL_HOLD_MAX_MS 604800000LL /* 7 days: a longer hold is a drain */
static int64_t query_hold_ms(const char *query)
{
    for (const char *p = query; p && *p;) {
        if (strncmp(p, "hold_ms=", 8) == 0) {
            char *end;
            errno = 0;
            long long v = strtoll(p + 8, &end, 10);
            if (errno != 0 || end == p + 8 || (*end != '\0' && *end != '&') || v < 1 || v > CONTROL_HOLD_MAX_MS)
                return -1;
            return (int64_t)v;
        }
        p = strchr(p, '&');
        if (p) p++;
    }
    return 0;
}

/* POST /v1/drain, /v1/resume, /v1/endpoints/{name}/step-down. */
static void control(struct http_listener *l, struct conn *c, const char *method, const char *path,
                    const char *query, const char *head)
{
    char msg[400];
    int status = 200;
    const char *why = NULL;
    const char *ep = NULL;
    size_t eplen = 0;
    static const char sd_prefix[] = "/v1/endpoints/", sd_suffix[] = "/step-down";
    size_t pl = strlen(path);
    bool is_sd = strncmp(path, sd_prefix, sizeof sd_prefix - 1) == 0 && pl > sizeof sd_prefix - 1 + sizeof sd_suffix - 1 &&
                 strcmp(path + pl - (sizeof sd_suffix - 1), sd_suffix) == 0;
    if (is_sd) {
        ep = path + sizeof sd_prefix - 1;
        eplen = pl - (sizeof sd_prefix - 1) - (sizeof sd_suffix - 1);
        if (memchr(ep, '/', eplen)) is_sd = false;
    }
    if (!is_sd && strcmp(path, "/v1/drain") != 0 && strcmp(path, "/v1/resume") != 0) {
        respond_control(c, 404, "not found: POST /v1/drain, /v1/resume or /v1/endpoints/NAME/step-down");
        return;
    }
    if (strcmp(method, "POST") != 0) {
        respond_control(c, 405, "control requests are POST");
        return;
    }
    if ((status = control_allowed(l, c, head, &why)) != 0) {
        log_warn("http", NULL, "control: POST %s from %s refused (%d): %s", path, c->peer, status, why);
        respond_control(c, status, why);
        return;
    }
    status = 200;
    if (is_sd) {
        char name[256];
        if (eplen >= sizeof name) eplen = sizeof name - 1;
        memcpy(name, ep, eplen);
        name[eplen] = '\0';
        int64_t hold = query_hold_ms(query);
        if (hold < 0) {
            snprintf(msg, sizeof msg, "hold_ms: expected milliseconds, 1 to %lld", CONTROL_HOLD_MAX_MS);
            status = 400;
        } else {
            int rc = gateway_step_down(l->gw, name, hold, msg, sizeof msg);
            status = rc == 0 ? 200 : rc == -1 ? 404 : 409;
        }
    } else if (strcmp(path, "/v1/drain") == 0) {
        gateway_drain(l->gw);
        snprintf(msg, sizeof msg, "draining: stepping down from every endpoint, standby until resumed");
    } else {
        bool was = gateway_draining(l->gw);
        gateway_resume(l->gw);
        snprintf(msg, sizeof msg, "%s: competing for every endpoint again", was ? "resumed" : "not draining");
    }
    if (status == 200)
        log_info("http", NULL, "control: POST %s from %s: %s", path, c->peer, msg);
    else
        log_warn("http", NULL, "control: POST %s from %s: %s", path, c->peer, msg);
    respond_control(c, status, msg);
}

static void route(struct http_listener *l, struct conn *c, const char *method, const char *path, const char *query,
                  const char *head_lines)
{
    if (strncmp(path, "/v1/", 4) == 0) {
        control(l, c, method, path, query, head_lines);
        return;
    }
    bool head = strcmp(method, "HEAD") == 0;
    struct jbuf b;
    jbuf_init(&b, 4096);
    if (!head && strcmp(method, "GET") != 0) {
        jbuf_rawz(&b, "method not allowed\n");
        respond(c, 405, "text/plain", &b, false);
    } else if (strcmp(path, "/metrics") == 0) {
        gateway_render_metrics(l->gw, &b);
        respond(c, 200, "text/plain; version=0.0.4", &b, head);
    } else if (strcmp(path, "/healthz") == 0) {
        jbuf_rawz(&b, "ok\n");
        respond(c, 200, "text/plain", &b, head);
    } else if (strcmp(path, "/readyz") == 0) {
        char reason[512] = "";
        bool first = true;
        int ok = gateway_ready(l->gw, reason, sizeof reason) == 0;
        jbuf_char(&b, '{');
        jbuf_key(&b, &first, "ready");
        jbuf_bool(&b, ok);
        if (gateway_draining(l->gw)) {
            jbuf_key(&b, &first, "state");
            jbuf_strz(&b, "draining");
        }
        if (!ok) {
            jbuf_key(&b, &first, "reason");
            jbuf_strz(&b, reason);
        }
        jbuf_rawz(&b, "}\n");
        respond(c, ok ? 200 : 503, "application/json", &b, head);
    } else if (strcmp(path, "/status") == 0) {
        gateway_render_status(l->gw, &b);
        jbuf_char(&b, '\n');
        respond(c, 200, "application/json", &b, head);
    } else {
        jbuf_rawz(&b, "not found: try /metrics, /healthz, /readyz, /status\n");
        respond(c, 404, "text/plain", &b, head);
    }
    jbuf_free(&b);
}

static void respond_text(struct conn *c, int status, const char *text)
{
    struct jbuf b;
    jbuf_init(&b, 64);
    jbuf_rawz(&b, text);
    respond(c, status, "text/plain", &b, false);
    jbuf_free(&b);
}

/* Parses "METHOD SP target SP HTTP/x.y" at the start of the complete
 * request in c->in and builds the answer. The query string goes to the
 * route (only control requests read it: hold_ms). */
static void handle_request(struct http_listener *l, struct conn *c)
{
    char *eol = strpbrk(c->in, "\r\n");
    const char *head_lines = "";
    if (eol) {
        head_lines = eol + 1; /* the header lines */
        *eol = '\0';
    }
    char *method = c->in;
    char *sp1 = strchr(method, ' ');
    char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (!sp1 || !sp2 || sp1 == method || sp2 == sp1 + 1 || strncmp(sp2 + 1, "HTTP/1.", 7) != 0) {
        respond_text(c, 400, "bad request\n");
        return;
    }
    *sp1 = '\0';
    *sp2 = '\0';
    char *path = sp1 + 1;
    char *q = strchr(path, '?');
    if (q) *q++ = '\0';
    route(l, c, method, path, q ? q : "", head_lines);
}

static void conn_close(struct conn *c)
{
    if (c->fd >= 0) close(c->fd);
    free(c->in);
    free(c->out);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

static void conn_read(struct http_listener *l, struct conn *c)
{
    for (;;) {
        ssize_t n = recv(c->fd, c->in + c->inlen, REQ_MAX - c->inlen, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n <= 0) { /* closed before a whole request, or reset */
            conn_close(c);
            return;
        }
        c->inlen += (size_t)n;
        c->in[c->inlen] = '\0';
        if (strstr(c->in, "\r\n\r\n") || strstr(c->in, "\n\n")) {
            handle_request(l, c);
            return;
        }
        if (c->inlen == REQ_MAX) {
            respond_text(c, 431, "request header too large\n");
            return;
        }
    }
}

static void conn_write(struct conn *c)
{
    while (c->outpos < c->outlen) {
        ssize_t n = send(c->fd, c->out + c->outpos, c->outlen - c->outpos, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n < 0) break;
        c->outpos += (size_t)n;
    }
    /* everything sent (or the peer is gone): half-close, then close */
    shutdown(c->fd, SHUT_WR);
    conn_close(c);
}

static void accept_all(struct http_listener *l)
{
    for (;;) {
        struct sockaddr_in peer;
        socklen_t peerlen = sizeof peer;
        memset(&peer, 0, sizeof peer);
        int fd = accept4(l->lfd, (struct sockaddr *)&peer, &peerlen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                /* out of descriptors (EMFILE) and the like: the listening
                 * socket stays readable, so back off instead of spinning,
                 * and say so at most every 10 s */
                int64_t now = clock_mono_ms();
                if (now - l->accept_err_logged_ms >= 10000) {
                    log_warn("http", NULL, "accept failed: %s (retrying every 100 ms)", strerror(errno));
                    l->accept_err_logged_ms = now;
                }
                struct timespec ts = {0, 100 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
            return;
        }
        struct conn *c = NULL, *oldest = NULL;
        for (int i = 0; i < MAX_CONNS && !c; i++) {
            struct conn *x = &l->conns[i];
            if (x->fd < 0)
                c = x;
            else if (!x->out && (!oldest || x->deadline_ms < oldest->deadline_ms))
                oldest = x;
        }
        if (!c && oldest) { /* full: the oldest still-silent client makes room */
            conn_close(oldest);
            c = oldest;
        }
        if (!c) { /* every slot is sending an answer */
            close(fd);
            continue;
        }
        c->fd = fd;
        c->deadline_ms = clock_mono_ms() + CONN_TIMEOUT_MS;
        char ip[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
        snprintf(c->peer, sizeof c->peer, "%s:%u", ip, (unsigned)ntohs(peer.sin_port));
        c->peer_loopback = peer.sin_family == AF_INET && (ntohl(peer.sin_addr.s_addr) >> 24) == 127;
        c->in = xmalloc(REQ_MAX + 1);
        c->in[0] = '\0';
    }
}

static void *listener_thread(void *arg)
{
    struct http_listener *l = arg;
    struct pollfd pfd[MAX_CONNS + 2];
    int slot_of[MAX_CONNS + 2];
    for (;;) {
        int n = 0;
        int64_t now = clock_mono_ms(), next = now + 60000;
        pfd[n++] = (struct pollfd){.fd = l->stop_pipe[0], .events = POLLIN};
        for (int i = 0; i < MAX_CONNS; i++) {
            struct conn *c = &l->conns[i];
            if (c->fd < 0) continue;
            if (now >= c->deadline_ms) { /* too slow: no answer */
                conn_close(c);
                continue;
            }
            if (c->deadline_ms < next) next = c->deadline_ms;
            slot_of[n] = i;
            pfd[n++] = (struct pollfd){.fd = c->fd, .events = c->out ? POLLOUT : POLLIN};
        }
        int lidx = n;
        pfd[n++] = (struct pollfd){.fd = l->lfd, .events = POLLIN};
        int rc = poll(pfd, (nfds_t)n, (int)(next - now));
        if (rc < 0 && errno != EINTR) {
            log_error("http", NULL, "poll failed: %s; the listener stops", strerror(errno));
            break;
        }
        if (rc <= 0) continue;
        if (pfd[0].revents) break; /* stop requested */
        for (int k = 1; k < n; k++) {
            if (k == lidx || !pfd[k].revents) continue;
            struct conn *c = &l->conns[slot_of[k]];
            if (c->out) {
                conn_write(c);
            } else {
                conn_read(l, c);
                if (c->fd >= 0 && c->out) conn_write(c); /* try at once */
            }
        }
        if (pfd[lidx].revents) accept_all(l);
    }
    return NULL;
}

struct http_listener *http_listener_start(const char *listen_addr, struct gateway *gw, const char *admin_token,
                                          char *err, size_t errlen)
{
    char host[64];
    int port;
    if (http_listen_parse(listen_addr, host, sizeof host, &port) != 0) {
        snprintf(err, errlen, "expected \"host:port\" with an IPv4 address, got \"%s\"", listen_addr);
        return NULL;
    }
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, host, &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 64) != 0) {
        snprintf(err, errlen, "cannot listen on %s:%d: %s", host, port, strerror(errno));
        if (fd >= 0) close(fd);
        return NULL;
    }
    if (port == 0) { /* any free port: say which */
        socklen_t sl = sizeof sa;
        if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0) port = ntohs(sa.sin_port);
    }
    struct http_listener *l = xcalloc(1, sizeof *l);
    l->gw = gw;
    l->admin_token = admin_token;
    l->lfd = fd;
    l->accept_err_logged_ms = INT64_MIN / 2;
    for (int i = 0; i < MAX_CONNS; i++) l->conns[i].fd = -1;
    if (pipe2(l->stop_pipe, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "cannot listen on %s:%d: pipe: %s", host, port, strerror(errno));
        close(fd);
        free(l);
        return NULL;
    }
    int prc = pthread_create(&l->thread, NULL, listener_thread, l);
    if (prc == 0) thread_name(l->thread, "baton", "http");
    if (prc != 0) {
        snprintf(err, errlen, "cannot listen on %s:%d: thread: %s", host, port, strerror(prc));
        close(fd);
        close(l->stop_pipe[0]);
        close(l->stop_pipe[1]);
        free(l);
        return NULL;
    }
    log_info("http", NULL, "listening on http://%s:%d (/metrics /healthz /readyz /status; control POST /v1/...: %s)",
             host, port, admin_token ? "bearer token" : "loopback peers only");
    return l;
}

void http_listener_stop(struct http_listener *l)
{
    if (!l) return;
    ssize_t w;
    do {
        w = write(l->stop_pipe[1], "x", 1);
    } while (w < 0 && errno == EINTR);
    pthread_join(l->thread, NULL);
    for (int i = 0; i < MAX_CONNS; i++) conn_close(&l->conns[i]);
    close(l->lfd);
    close(l->stop_pipe[0]);
    close(l->stop_pipe[1]);
    free(l);
}
