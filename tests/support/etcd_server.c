/* See etcd_server.h. */
#include "tests/support/etcd_server.h"

#include "tests/support/child.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

struct etcd_server {
    struct launcher l; /* tests/support/brokers.py etcd */
    pid_t pid;         /* the member's, 0 = not running */
    int port, peer_port;
    char url[64];
    char dir[256];
};

/* ---- a minimal HTTP/1.1 client (Connection: close) ------------------------ */

static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - child_now_ms();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)left);
        if (n < 0 && errno == EINTR) continue;
        return n;
    }
}

static int http_port(int port, const char *path, const char *body, const char *token, char *out,
                     size_t outlen, int timeout_ms)
{
    if (out && outlen) out[0] = '\0';
    int64_t deadline = child_now_ms() + timeout_ms;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int status = -1;
    char *req = NULL, *resp = NULL;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        if (errno != EINPROGRESS || wait_fd(fd, POLLOUT, deadline) <= 0) goto done;
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr != 0) goto done;
    }
    size_t blen = body ? strlen(body) : 0;
    size_t cap = blen + 512 + (token ? strlen(token) : 0) + strlen(path);
    req = malloc(cap);
    if (req == NULL) goto done;
    int n = snprintf(req, cap,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n"
                     "%s%s%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     body ? "POST" : "GET", path, port, token ? "Authorization: " : "",
                     token ? token : "", token ? "\r\n" : "", blen, body ? body : "");
    for (int off = 0; off < n;) {
        ssize_t w = send(fd, req + off, (size_t)(n - off), MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN || wait_fd(fd, POLLOUT, deadline) <= 0) goto done;
            continue;
        }
        off += (int)w;
    }
    size_t rcap = 4096, rlen = 0;
    resp = malloc(rcap);
    if (resp == NULL) goto done;
    for (;;) {
        if (rlen + 1024 > rcap) {
            char *nr = realloc(resp, rcap * 2);
            if (nr == NULL) goto done;
            resp = nr;
            rcap *= 2;
        }
        ssize_t r = recv(fd, resp + rlen, rcap - rlen - 1, 0);
        if (r > 0) {
            rlen += (size_t)r;
            continue;
        }
        if (r == 0) break;
        if (errno == EINTR) continue;
        if (errno != EAGAIN || wait_fd(fd, POLLIN, deadline) <= 0) goto done;
    }
    resp[rlen] = '\0';
    int code;
    if (sscanf(resp, "HTTP/1.%*d %d", &code) != 1) goto done;
    status = code;
    if (out && outlen) {
        char *b = strstr(resp, "\r\n\r\n");
        b = b ? b + 4 : resp + rlen;
        /* a chunked body (etcd answers with Content-Length, except watches) is
         * passed on as it is */
        snprintf(out, outlen, "%s", b);
    }
done:
    free(req);
    free(resp);
    close(fd);
    return status;
}

/* ---- processes: the launcher (tests/support/brokers.py etcd) -------------- */

static const char *default_base(void)
{
    const char *b = getenv("BATON_ETCD_DIR_BASE");
    if (b && *b) return b;
    if (access("/dev/shm", W_OK) == 0) return "/dev/shm";
    return "/tmp";
}

struct etcd_server *etcd_server_start_in(const char *base, const char *const *extra_args)
{
    struct etcd_server *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    const char *args[] = {"etcd", "--base", base ? base : default_base(), "--", NULL};
    if (launcher_start(&s->l, args, extra_args, 60000) < 0) {
        fprintf(stderr, "etcd_server: could not start etcd\n");
        free(s);
        return NULL;
    }
    s->port = (int)launcher_int(&s->l, "client_ports", 0);
    s->peer_port = (int)launcher_int(&s->l, "peer_ports", 0);
    s->pid = (pid_t)launcher_int(&s->l, "pids", 0);
    launcher_str(&s->l, "urls", 0, s->url, sizeof s->url);
    launcher_str(&s->l, "dir", -1, s->dir, sizeof s->dir);
    return s;
}

struct etcd_server *etcd_server_start(const char *const *extra_args)
{
    return etcd_server_start_in(NULL, extra_args);
}

const char *etcd_server_url(const struct etcd_server *s)
{
    return s->url;
}

int etcd_server_port(const struct etcd_server *s)
{
    return s->port;
}

int etcd_server_peer_port(const struct etcd_server *s)
{
    return s->peer_port;
}

const char *etcd_server_dir(const struct etcd_server *s)
{
    return s->dir;
}

pid_t etcd_server_pid(const struct etcd_server *s)
{
    return s->pid;
}

bool etcd_server_running(const struct etcd_server *s)
{
    return s->pid > 0;
}

/* One command to the launcher about the member; its pid afterwards. */
static int member_cmd(struct etcd_server *s, const char *cmd, bool need_running)
{
    if (s == NULL || (need_running && s->pid <= 0)) return -1;
    int rc = launcher_cmd(&s->l, "%s 0", cmd);
    long pid = launcher_int(&s->l, "pids", 0);
    s->pid = pid > 0 ? (pid_t)pid : 0;
    return rc;
}

int etcd_server_stop(struct etcd_server *s)
{
    return member_cmd(s, "stop", true);
}

int etcd_server_kill(struct etcd_server *s)
{
    return member_cmd(s, "kill", true);
}

int etcd_server_restart(struct etcd_server *s)
{
    if (member_cmd(s, "restart", false) == 0) return 0;
    fprintf(stderr, "etcd_server: restart on port %d failed (see %s)\n", s ? s->port : -1,
            s ? s->dir : "");
    return -1;
}

int etcd_server_pause(struct etcd_server *s)
{
    return member_cmd(s, "pause", true);
}

int etcd_server_resume(struct etcd_server *s)
{
    return member_cmd(s, "resume", true);
}

int etcd_server_ctl(const struct etcd_server *s, const char *const *args, char *out, size_t outlen)
{
    if (out && outlen) out[0] = '\0';
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) return -1;
    char ep[96];
    snprintf(ep, sizeof ep, "--endpoints=%s", s->url);
    const char *argv[40] = {"etcdctl", ep, "--dial-timeout=3s", "--command-timeout=5s"};
    int argc = 4;
    for (int i = 0; args && args[i] && argc < 38; i++) argv[argc++] = args[i];
    argv[argc] = NULL;
    static const char *const env[] = {"ETCDCTL_API", "3", NULL};
    pid_t pid = child_exec(argv, env, NULL, pfd[1]);
    if (pid < 0) {
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    close(pfd[1]);
    size_t len = 0;
    int64_t deadline = child_now_ms() + 10000;
    char sink[512];
    for (;;) {
        if (wait_fd(pfd[0], POLLIN, deadline) <= 0) {
            kill(pid, SIGKILL);
            break;
        }
        char *dst = sink;
        size_t room = sizeof sink;
        if (out && outlen > len + 1) {
            dst = out + len;
            room = outlen - len - 1;
        }
        ssize_t r = read(pfd[0], dst, room);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (dst != sink) {
            len += (size_t)r;
            out[len] = '\0';
        }
    }
    close(pfd[0]);
    int st = child_reap_pid(pid);
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int etcd_server_http(const struct etcd_server *s, const char *path, const char *body,
                     const char *token, char *out, size_t outlen, int timeout_ms)
{
    return http_port(s->port, path, body, token, out, outlen, timeout_ms);
}

void etcd_server_destroy(struct etcd_server *s)
{
    if (s == NULL) return;
    launcher_stop(&s->l);
    free(s);
}
