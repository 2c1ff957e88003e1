#include "src/control_cmd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <stdbool.h>
#include <unistd.h>

#include "base/util.h"
#include "common/util.h"
#include "src/http_listener.h"

#define CONTROL_TIMEOUT_MS 10000

/* One request (POST, or GET for the status page) on a fresh connection;
 * *status gets the HTTP status and body the answer's body (cut at bodylen).
 * Returns 0, or -1 with why filled (not reachable). */
static int request(const char *method, const char *host, int port, const char *path, const char *token,
                   int *status, char *body, size_t bodylen, char *why, size_t whylen)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, host, &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        snprintf(why, whylen, "cannot reach the ops listener on %s:%d: %s", host, port, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    char req[1024];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Length: 0\r\n%s%s%sConnection: close\r\n\r\n",
                     method, path, host, port, token ? "Authorization: Bearer " : "", token ? token : "",
                     token ? "\r\n" : "");
    size_t off = 0;
    while (n > 0 && off < (size_t)n) {
        ssize_t w = send(fd, req + off, (size_t)n - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) break;
        off += (size_t)w;
    }
    explicit_bzero(req, sizeof req);
    size_t cap = bodylen + 1024, len = 0;
    char *resp = xmalloc(cap);
    int64_t deadline = clock_mono_ms() + CONTROL_TIMEOUT_MS;
    for (;;) {
        int64_t left = deadline - clock_mono_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0) break;
        ssize_t r = recv(fd, resp + len, cap - 1 - len, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
        if (len == cap - 1) break;
    }
    close(fd);
    resp[len] = '\0';
    if (sscanf(resp, "HTTP/1.%*d %d", status) != 1) {
        snprintf(why, whylen, "no answer from the ops listener on %s:%d", host, port);
        free(resp);
        return -1;
    }
    const char *b = strstr(resp, "\r\n\r\n");
    snprintf(body, bodylen, "%s", b ? b + 4 : "");
    free(resp);
    size_t bl = strlen(body);
    while (bl > 0 && (body[bl - 1] == '\n' || body[bl - 1] == '\r')) body[--bl] = '\0';
    return 0;
}

/* Whether /status shows endpoint `name` (NULL: any endpoint) led by this
 * replica. The page is baton's own JSON (src/status_pages.c): each
 * endpoint object begins {"name":"...","type":...,"role":"..."; names are
 * validated identifiers (no quotes to escape). */
static bool leads(const char *status_json, const char *name)
{
    char needle[300];
    for (const char *p = strstr(status_json, "{\"name\":\""); p; p = strstr(p + 1, "{\"name\":\"")) {
        const char *n = p + 9;
        if (name) {
            snprintf(needle, sizeof needle, "%s\"", name);
            if (strncmp(n, needle, strlen(needle)) != 0) continue;
        }
        const char *r = strstr(n, "\"role\":\"");
        const char *next = strstr(n, "{\"name\":\"");
        if (r && (!next || r < next) && strncmp(r + 8, "leader\"", 7) == 0) return true;
    }
    return false;
}

/* Waits until the replica leads none of the endpoints in names (all of them
 * when n == 0), at most timeout_ms; true when so. The answers say only that
 * the step-down began: this is when the hand-over is done. */
static bool wait_handed_over(const char *host, int port, char **names, int n, int64_t timeout_ms)
{
    int64_t deadline = clock_mono_ms() + timeout_ms;
    size_t cap = 1024 * 1024;
    char *body = xmalloc(cap);
    bool done = false;
    for (;;) {
        int status = 0;
        char why[256];
        if (request("GET", host, port, "/status", NULL, &status, body, cap, why, sizeof why) == 0 && status == 200) {
            done = true;
            for (int i = 0; i < n && done; i++)
                if (leads(body, names[i])) done = false;
            if (n == 0 && leads(body, NULL)) done = false;
        }
        if (done || clock_mono_ms() >= deadline) break;
        sleep_ms_cancellable(50, NULL);
    }
    free(body);
    return done;
}

static char *step_down_path(const char *name, const char *qs)
{
    size_t len = strlen(name) + strlen(qs) + 32;
    char *p = xmalloc(len);
    snprintf(p, len, "/v1/endpoints/%s/step-down%s", name, qs);
    return p;
}

int control_cmd_run(const struct baton_config *cfg, enum control_action action, char **names, int n, bool all,
                    int64_t hold_ms, FILE *out)
{
    const char *cmd = action == CONTROL_STEP_DOWN ? "step-down" : action == CONTROL_DRAIN ? "drain" : "resume";
    if (!cfg->metrics_listen) {
        fprintf(stderr, "baton %s: %s has no metrics group: no ops listener to send the request to\n", cmd,
                cfg->path);
        return BATON_EXIT_START;
    }
    char host[64];
    int port;
    if (http_listen_parse(cfg->metrics_listen, host, sizeof host, &port) != 0) {
        fprintf(stderr, "baton %s: metrics.listen \"%s\": expected host:port\n", cmd, cfg->metrics_listen);
        return BATON_EXIT_CONFIG;
    }
    if (strcmp(host, "0.0.0.0") == 0) snprintf(host, sizeof host, "127.0.0.1");
    char **paths = xcalloc((size_t)(n > 0 ? n : 0) + cfg->n_endpoints + 1, sizeof *paths);
    size_t np = 0;
    char qs[48] = "";
    if (hold_ms > 0) snprintf(qs, sizeof qs, "?hold_ms=%lld", (long long)hold_ms);
    if (action == CONTROL_DRAIN) {
        paths[np++] = xstrdup("/v1/drain");
    } else if (action == CONTROL_RESUME) {
        paths[np++] = xstrdup("/v1/resume");
    } else if (all) {
        for (size_t i = 0; i < cfg->n_endpoints; i++) {
            const struct endpoint_config *e = &cfg->endpoints[i];
            if (!e->enabled || e->guard != GUARD_ACTIVE) continue;
            paths[np++] = step_down_path(e->name, qs);
        }
        if (np == 0) fprintf(out, "no enabled endpoint with an ActiveGuard in %s: nothing to step down\n", cfg->path);
    } else {
        for (int i = 0; i < n; i++) paths[np++] = step_down_path(names[i], qs);
    }
    int rc = BATON_EXIT_OK;
    for (size_t i = 0; i < np; i++) {
        int status = 0;
        char body[2048], why[512];
        if (request("POST", host, port, paths[i], cfg->admin_token, &status, body, sizeof body, why, sizeof why) !=
            0) {
            fprintf(stderr, "baton %s: %s\n", cmd, why);
            rc = BATON_EXIT_START;
            break;
        }
        if (status == 200) {
            fprintf(out, "%s\n", body);
        } else {
            fprintf(stderr, "baton %s: %s: HTTP %d %s\n", cmd, paths[i], status, body);
            rc = BATON_EXIT_RUNTIME;
        }
    }
    /* step-down and drain: done when the endpoints are handed over (the
     * drain under the lease is bounded by shutdown.drain_timeout_ms) */
    if (rc == BATON_EXIT_OK && action != CONTROL_RESUME && np > 0) {
        char **which = names;
        int nw = action == CONTROL_STEP_DOWN && !all ? n : 0;
        if (!wait_handed_over(host, port, which, nw, cfg->drain_timeout_ms + 2000)) {
            fprintf(stderr, "baton %s: still leading after %lld ms (see its log)\n", cmd,
                    (long long)cfg->drain_timeout_ms + 2000);
            rc = BATON_EXIT_RUNTIME;
        } else {
            fprintf(out, "handed over\n");
        }
    }
    for (size_t i = 0; i < np; i++) free(paths[i]);
    free(paths);
    return rc;
}
