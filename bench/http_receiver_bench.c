/* A fast HTTP/1.1 receiver for the HTTP sink benchmarks: the peer both the
 * HTTP sink and its baseline post to, so that the receiver is never what is
 * measured. One thread, epoll, keep-alive; every POST is answered
 * "204 No Content" once its body (Content-Length) has arrived. It counts
 * messages: X-Baton-Count when the request has it (an NDJSON batch), else
 * the body's lines (at least 1). GET /count answers "<messages> <requests>"
 * and, after them, "<rejected> <processing> <peak processing> <connections>
 * <peak connections> <hold us sum>" (the scripts poll it on their own
 * connection; bench_http_sink.py reads the first field only). With
 * FIRST_BODY, the first POST's body is written to that file (the script
 * hands baton's own envelope to the baseline, so both post the same bytes).
 *
 *   bench_http_receiver PORT [FIRST_BODY] [--latency-ms MS] [--capacity C]
 *
 * Without options it answers at once (bench_http_sink.py). For
 * bench_concurrency.py:
 *   --latency-ms MS  every POST is "processed" for MS ms before its 204: the
 *                    request is put on a FIFO of pending answers (the
 *                    latency is fixed, so the FIFO is in due order) and a
 *                    timerfd in the same epoll loop fires at the head's due
 *                    time; other connections are served meanwhile. A
 *                    connection with an answer pending reads on but parses
 *                    no further request until it is answered (no client
 *                    here pipelines). Counted once answered.
 *   --capacity C     at most C POSTs processed at once (with --latency-ms);
 *                    a POST that arrives while C are is answered at once
 *                    "503 Service Unavailable" (no Retry-After) and counted
 *                    as rejected, not as messages.
 * Counters: requests/messages answered 204; rejected (503s); processing now
 * and its peak; connections open and their peak; the sum of the hold times
 * (complete request read -> answer sent) of the 204s, in us (their mean
 * shows whether the receiver kept its latency). The listen backlog is 4096
 * and the fd limit is raised to its hard limit: it holds thousands of
 * kept-alive connections.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define BUF_MAX (4 << 20)

struct conn {
    int fd;
    char *buf;
    size_t len, cap;
    /* --latency-ms: the answer pending on this connection */
    bool pending;
    unsigned long long pending_k; /* its messages */
    int64_t read_ns, due_ns;      /* complete request read; answer due */
    struct conn *prev, *next;     /* the FIFO of pending answers */
};

static unsigned long long messages, requests, rejected, hold_us_sum;
static unsigned long long processing, processing_peak, conns, conns_peak;
static const char *first_body_path;
static int64_t latency_ns;        /* 0: answer at once (the default) */
static unsigned long long capacity; /* 0: no bound */
static struct conn *fifo_head, *fifo_tail;
static int timer_fd = -1;
static int timer_tag; /* epoll data.ptr of the timerfd */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

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

/* Arms the timerfd for the FIFO's head (disarms it when empty). */
static void timer_arm(void)
{
    struct itimerspec its = {0};
    if (fifo_head) {
        int64_t due = fifo_head->due_ns > 0 ? fifo_head->due_ns : 1;
        its.it_value.tv_sec = due / 1000000000LL;
        its.it_value.tv_nsec = due % 1000000000LL;
    }
    timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void fifo_push(struct conn *c)
{
    c->prev = fifo_tail;
    c->next = NULL;
    if (fifo_tail)
        fifo_tail->next = c;
    else
        fifo_head = c;
    fifo_tail = c;
    if (fifo_head == c) timer_arm();
}

static void fifo_remove(struct conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        fifo_head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        fifo_tail = c->prev;
    c->prev = c->next = NULL;
}

/* Handles every complete request in c->buf; -1 closes the connection. */
static int serve(struct conn *c)
{
    for (;;) {
        if (c->pending) return 0; /* its answer first */
        char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
        if (!end) return c->len > 65536 ? -1 : 0;
        size_t hlen = (size_t)(end - c->buf) + 4;
        const char *cl = find_header(c->buf, hlen, "Content-Length");
        size_t body = cl ? strtoull(cl, NULL, 10) : 0;
        if (body > BUF_MAX) return -1;
        if (c->len < hlen + body) return 0;
        if (strncmp(c->buf, "GET /count", 10) == 0) {
            char msg[256], out[352];
            int m = snprintf(msg, sizeof msg, "%llu %llu %llu %llu %llu %llu %llu %llu\n", messages,
                             requests, rejected, processing, processing_peak, conns, conns_peak,
                             hold_us_sum);
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
            if (latency_ns == 0) {
                messages += k;
                requests++;
                static const char ok[] = "HTTP/1.1 204 No Content\r\n\r\n";
                if (send_all(c->fd, ok, sizeof ok - 1) != 0) return -1;
            } else if (capacity && processing >= capacity) {
                rejected++;
                static const char busy[] =
                    "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n";
                if (send_all(c->fd, busy, sizeof busy - 1) != 0) return -1;
            } else {
                c->pending = true;
                c->pending_k = k;
                c->read_ns = now_ns();
                c->due_ns = c->read_ns + latency_ns;
                if (++processing > processing_peak) processing_peak = processing;
                fifo_push(c);
            }
        }
        memmove(c->buf, c->buf + hlen + body, c->len - hlen - body);
        c->len -= hlen + body;
    }
}

/* Closes c; its memory is freed after the current batch of epoll events
 * (free_closed), which may still name it: answer_due can close
 * connections other than the one whose event is being handled. */
static struct conn *closed_list;

static void conn_close(int ep, struct conn *c)
{
    if (c->fd < 0) return;
    if (c->pending) {
        fifo_remove(c);
        c->pending = false;
        processing--;
        timer_arm();
    }
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    c->next = closed_list;
    closed_list = c;
    conns--;
}

static void free_closed(void)
{
    while (closed_list) {
        struct conn *c = closed_list;
        closed_list = c->next;
        free(c->buf);
        free(c);
    }
}

/* The timerfd fired: answers every pending request that is due, then lets
 * each answered connection go on with what it has buffered. */
static void answer_due(int ep)
{
    uint64_t expirations;
    if (read(timer_fd, &expirations, sizeof expirations) < 0 && errno != EAGAIN) return;
    int64_t now = now_ns();
    static const char ok[] = "HTTP/1.1 204 No Content\r\n\r\n";
    while (fifo_head && fifo_head->due_ns <= now) {
        struct conn *c = fifo_head;
        fifo_remove(c);
        c->pending = false;
        processing--;
        if (send_all(c->fd, ok, sizeof ok - 1) != 0) {
            conn_close(ep, c);
            continue;
        }
        int64_t t = now_ns();
        messages += c->pending_k;
        requests++;
        hold_us_sum += (unsigned long long)((t - c->read_ns) / 1000);
        /* a further request already read (none from a client that does not
         * pipeline) goes on the FIFO behind, due later than now */
        if (serve(c) != 0) conn_close(ep, c);
    }
    timer_arm();
}

static int usage(const char *argv0)
{
    fprintf(stderr, "usage: %s PORT [FIRST_BODY] [--latency-ms MS] [--capacity C]\n", argv0);
    return 64;
}

int main(int argc, char **argv)
{
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--latency-ms") == 0 && i + 1 < argc) {
            latency_ns = (int64_t)(atof(argv[++i]) * 1e6);
        } else if (strcmp(argv[i], "--capacity") == 0 && i + 1 < argc) {
            capacity = strtoull(argv[++i], NULL, 10);
        } else if (strncmp(argv[i], "--", 2) == 0 || npos == 2) {
            return usage(argv[0]);
        } else {
            pos[npos++] = argv[i];
        }
    }
    if (npos < 1 || latency_ns < 0) return usage(argv[0]);
    first_body_path = pos[1];
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(pos[0])),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 4096) != 0) {
        perror("http_receiver: bind/listen");
        return 69;
    }
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    if (latency_ns > 0) {
        timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (timer_fd < 0) {
            perror("http_receiver: timerfd_create");
            return 71;
        }
        struct epoll_event tev = {.events = EPOLLIN, .data.ptr = &timer_tag};
        epoll_ctl(ep, EPOLL_CTL_ADD, timer_fd, &tev);
    }
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (c && c != (void *)&timer_tag && c->fd < 0) continue; /* closed in this batch */
            if (evs[i].data.ptr == &timer_tag) {
                answer_due(ep);
                continue;
            }
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
                    if (++conns > conns_peak) conns_peak = conns;
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
            if (closed) conn_close(ep, c);
        }
        free_closed();
    }
    return 0;
}
