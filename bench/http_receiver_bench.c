/* A fast HTTP/1.1 receiver for bench/bench_http_sink.sh: the peer both the
 * HTTP sink and its baseline post to, so that the receiver is never what is
 * measured. One thread, epoll, keep-alive; every POST is answered
 * "204 No Content" once its body (Content-Length) has arrived. It counts
 * messages: X-Baton-Count when the request has it (an NDJSON batch), else
 * the body's lines (at least 1). GET /count answers "<messages> <requests>"
 * (the script polls it on its own connection). With FIRST_BODY, the
 * first POST's body is written to that file (the script hands baton's own
 * envelope to the baseline, so both post the same bytes).
 *
 *   bench_http_receiver PORT [FIRST_BODY]
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF_MAX (4 << 20)

struct conn {
    int fd;
    char *buf;
    size_t len, cap;
};

static unsigned long long messages, requests;
static const char *first_body_path;

static const char *find_header(const char *head, size_t hlen, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = head; p + nl + 1 < head + hlen; p++) {
        if ((p == head || p[-1] == '\n') && strncasecmp(p, name, nl) == 0 && p[nl] == ':')
            return p + nl + 1;
    }
    return NULL;
}

static int send_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) continue; /* tiny replies: spin briefly */
            return -1;
        }
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Handles every complete request in c->buf; -1 closes the connection. */
static int serve(struct conn *c)
{
    for (;;) {
        char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
        if (!end) return c->len > 65536 ? -1 : 0;
        size_t hlen = (size_t)(end - c->buf) + 4;
        const char *cl = find_header(c->buf, hlen, "Content-Length");
        size_t body = cl ? strtoull(cl, NULL, 10) : 0;
        if (body > BUF_MAX) return -1;
        if (c->len < hlen + body) return 0;
        if (strncmp(c->buf, "GET /count", 10) == 0) {
            char msg[64], out[160];
            int m = snprintf(msg, sizeof msg, "%llu %llu\n", messages, requests);
            int n = snprintf(out, sizeof out, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", m, msg);
            if (send_all(c->fd, out, (size_t)n) != 0) return -1;
        } else {
            const char *cnt = find_header(c->buf, hlen, "X-Baton-Count");
            unsigned long long k = 0;
            if (cnt) {
                k = strtoull(cnt, NULL, 10);
            } else {
                for (size_t i = 0; i < body; i++) k += c->buf[hlen + i] == '\n';
                if (k == 0) k = 1;
            }
            if (requests == 0 && first_body_path) {
                FILE *f = fopen(first_body_path, "w");
                if (f) {
                    fwrite(c->buf + hlen, 1, body, f);
                    fclose(f);
                }
            }
            messages += k;
            requests++;
            static const char ok[] = "HTTP/1.1 204 No Content\r\n\r\n";
            if (send_all(c->fd, ok, sizeof ok - 1) != 0) return -1;
        }
        memmove(c->buf, c->buf + hlen + body, c->len - hlen - body);
        c->len -= hlen + body;
    }
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: %s PORT [FIRST_BODY]\n", argv[0]);
        return 64;
    }
    first_body_path = argc == 3 ? argv[2] : NULL;
    signal(SIGPIPE, SIG_IGN);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[1])),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 128) != 0) {
        perror("http_receiver: bind/listen");
        return 69;
    }
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(ep, evs, 64, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (!c) {
                int fd;
                while ((fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    c = calloc(1, sizeof *c);
                    if (!c) {
                        close(fd);
                        continue;
                    }
                    c->fd = fd;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev);
                }
                continue;
            }
            int closed = 0;
            for (;;) {
                if (c->cap - c->len < 65536) {
                    size_t cap = c->cap ? c->cap * 2 : 131072;
                    if (cap > BUF_MAX + 131072) {
                        closed = 1;
                        break;
                    }
                    char *b = realloc(c->buf, cap);
                    if (!b) {
                        closed = 1;
                        break;
                    }
                    c->buf = b;
                    c->cap = cap;
                }
                ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
                if (r > 0) {
                    c->len += (size_t)r;
                    continue;
                }
                if (r == 0 || (errno != EAGAIN && errno != EINTR)) closed = 1;
                if (r < 0 && errno == EINTR) continue;
                break;
            }
            if (!closed && serve(c) != 0) closed = 1;
            if (closed) {
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                free(c->buf);
                free(c);
            }
        }
    }
    return 0;
}
