/* stdout sink: one envelope per line. A batch is copied into a staging
 * buffer and goes out with as few write(2) calls as possible under one
 * process-wide mutex, so lines from different endpoints' forwarders never
 * interleave. No stdio buffering: a
 * batch is on the file descriptor when send() returns.
 *
 * Lease-bounded: writes never block. A pipe, FIFO or terminal is reopened
 * through /proc/self/fd with O_NONBLOCK (a file description of our own, so
 * the flag never leaks to whoever shares the original); a socket is written
 * with MSG_DONTWAIT; a regular file is written as is (it never stalls on a
 * reader). Waiting for room polls in slices of at most 20 ms, asking the
 * lease each time: a reader that stalls can hold a message only until the
 * term's deadline or the drain deadline, never longer. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/util.h"
#include "common/log.h"
#include "common/util.h"
#include "src/sink_impl.h"

struct stdout_settings {
    int64_t fd;
};

static const struct setting_def stdout_defs[] = {
    {"fd", SETTING_INT, offsetof(struct stdout_settings, fd), .def = "1", .min = 1,
     .max = 1048576, .help = "file descriptor to write to (1 = stdout; 2 = stderr)"},
    SETTINGS_END,
};

enum out_mode {
    OUT_NONBLOCK, /* wfd is our own O_NONBLOCK description */
    OUT_SOCKET,   /* send(MSG_DONTWAIT) on fd */
    OUT_FILE,     /* a regular file: plain writes */
    OUT_CHUNKED,  /* could not reopen: poll, then at most PIPE_BUF per write */
};

struct stdout_sink {
    char *name;
    char *endpoint; /* for log lines; NULL = none */
    int fd;       /* as configured (identifies the shared descriptor) */
    int wfd;      /* what we write to */
    enum out_mode mode;
    struct ratelimit rl;
};

/* One lock for every instance: they share the descriptor. */
static pthread_mutex_t stdout_mu = PTHREAD_MUTEX_INITIALIZER;

static void *stdout_create(const char *name, const char *endpoint, const void *settings, char *err,
                           size_t errlen)
{
    const struct stdout_settings *s = settings;
    struct stdout_sink *k = xcalloc(1, sizeof *k);
    k->name = xstrdup(name ? name : "stdout");
    k->endpoint = endpoint && endpoint[0] ? xstrdup(endpoint) : NULL;
    k->fd = s ? (int)s->fd : STDOUT_FILENO;
    if (k->fd <= 0) k->fd = STDOUT_FILENO;
    k->wfd = k->fd;
    k->mode = OUT_CHUNKED;
    struct stat st;
    if (fstat(k->fd, &st) == 0) {
        if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) {
            k->mode = OUT_FILE;
        } else if (S_ISSOCK(st.st_mode)) {
            k->mode = OUT_SOCKET;
        } else {
            char path[64];
            snprintf(path, sizeof path, "/proc/self/fd/%d", k->fd);
            int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
            if (fd >= 0) {
                k->wfd = fd;
                k->mode = OUT_NONBLOCK;
            }
        }
    }
    return k;
}

static void stdout_destroy(void *sink)
{
    struct stdout_sink *k = sink;
    if (!k) return;
    if (k->wfd != k->fd) close(k->wfd);
    free(k->name);
    free(k->endpoint);
    free(k);
}

/* One write that never blocks: >= 0 bytes written, or -1 with errno
 * (EAGAIN when there is no room now). */
static ssize_t out_write(const struct stdout_sink *k, const char *buf, size_t n)
{
    switch (k->mode) {
    case OUT_SOCKET: return send(k->wfd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    case OUT_CHUNKED: {
        struct pollfd p = {.fd = k->wfd, .events = POLLOUT};
        if (poll(&p, 1, 0) == 0) {
            errno = EAGAIN;
            return -1;
        }
        return write(k->wfd, buf, n < PIPE_BUF ? n : PIPE_BUF);
    }
    default: return write(k->wfd, buf, n);
    }
}

/* Why a write stopped before the end. */
struct wstop {
    int err;               /* errno of a failed write (0: lease or cancel) */
    enum msg_outcome why;  /* SINK_FAILED, TERM_ENDED or SHUTDOWN */
};

/* Waits for room, in poll slices of at most 20 ms and never past the
 * lease deadline, asking the lease each slice and once more after the fd
 * became writable (a leader paused inside poll must not write when it
 * resumes after its term ended). 0 = writable, in the term. */
static int wait_writable(const struct stdout_sink *k, struct sink_call *call, uint64_t epoch,
                         struct wstop *st)
{
    bool writable = false;
    for (;;) {
        int64_t left = sink_wait_live(call, epoch);
        if (call->cancel && atomic_load(call->cancel)) {
            st->why = MSG_DROPPED_SHUTDOWN;
            return -1;
        }
        if (left < 0) {
            st->why = MSG_DROPPED_TERM_ENDED;
            return -1;
        }
        if (writable) return 0;
        struct pollfd p = {.fd = k->wfd, .events = POLLOUT};
        int r = poll(&p, 1, (int)(left < 20 ? left : 20));
        if (r > 0) writable = true;
        if (r < 0 && errno != EINTR) {
            st->err = errno;
            st->why = MSG_DROPPED_SINK_FAILED;
            return -1;
        }
    }
}

static const char newline = '\n';

/* Lines are copied into one staging buffer and written with write(2): one
 * contiguous segment costs the kernel far less than two iovecs per line.
 * A line longer than the buffer goes out on its own. */
#define STDOUT_STAGE_SIZE ((size_t)64 * 1024)
#define STDOUT_STAGE_LINES 1024
static char stage[STDOUT_STAGE_SIZE]; /* under stdout_mu */
/* fds whose last line was cut and not yet terminated (under stdout_mu) */
#define PENDING_NL_FDS 1024
static bool pending_newline[PENDING_NL_FDS];

/* Writes n bytes of buf; returns how many went out (n unless it stopped:
 * *st says why). */
static size_t write_all(const struct stdout_sink *k, const char *buf, size_t n,
                        struct sink_call *call, uint64_t epoch, struct wstop *st)
{
    size_t off = 0;
    while (off < n) {
        /* after a partial write, ask again before the next one */
        if (off > 0 && sink_time_left(call, epoch) < 0) {
            st->why = MSG_DROPPED_TERM_ENDED;
            return off;
        }
        ssize_t w = out_write(k, buf + off, n - off);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (wait_writable(k, call, epoch, st) == 0) continue;
                return off;
            }
            st->err = errno;
            st->why = MSG_DROPPED_SINK_FAILED;
            return off;
        }
        off += (size_t)w;
    }
    return off;
}

/* Writes the lines of msgs[0..n) (all of one term). Returns how many
 * messages went out whole; *st says why fewer did, *cut whether part of the
 * next line was written. Call with stdout_mu held. */
static size_t write_lines(const struct stdout_sink *k, struct message *const *msgs, size_t n,
                          struct sink_call *call, struct wstop *st, bool *cut)
{
    size_t ends[STDOUT_STAGE_LINES]; /* end offset of each staged line */
    size_t done = 0; /* messages fully written */
    uint64_t epoch = n ? msgs[0]->epoch : 0;
    *cut = false;
    while (done < n) {
        /* leader now, in this term, before every write */
        int64_t left = sink_wait_live(call, epoch);
        if (call->cancel && atomic_load(call->cancel)) {
            st->why = MSG_DROPPED_SHUTDOWN;
            return done;
        }
        if (left < 0) {
            st->why = MSG_DROPPED_TERM_ENDED;
            return done;
        }
        if (msgs[done]->len + 1 > STDOUT_STAGE_SIZE) {
            const struct message *m = msgs[done];
            size_t w = write_all(k, m->json, m->len, call, epoch, st);
            if (w == m->len) w += write_all(k, &newline, 1, call, epoch, st);
            if (w < m->len + 1) {
                *cut = w > 0;
                return done;
            }
            done++;
            continue;
        }
        /* stage whole lines: json + "\n" per message */
        size_t used = 0, cnt = 0;
        while (done + cnt < n && cnt < STDOUT_STAGE_LINES) {
            const struct message *m = msgs[done + cnt];
            if (m->len + 1 > STDOUT_STAGE_SIZE - used) break;
            memcpy(stage + used, m->json, m->len);
            used += m->len;
            stage[used++] = '\n';
            ends[cnt++] = used;
        }
        size_t wrote = write_all(k, stage, used, call, epoch, st);
        size_t whole = 0;
        while (whole < cnt && ends[whole] <= wrote) whole++;
        done += whole;
        if (wrote < used) {
            *cut = wrote > (whole ? ends[whole - 1] : 0);
            return done;
        }
    }
    return done;
}

static void stdout_send(void *sink, struct message *const *msgs, size_t n,
                        enum msg_outcome *outcome, struct sink_call *call)
{
    struct stdout_sink *k = sink;
    if (n == 0) return;
    struct wstop st = {0, MSG_DROPPED_SINK_FAILED};
    bool cut = false;
    pthread_mutex_lock(&stdout_mu);
    /* A line cut by an earlier failure must be terminated before anything
     * else is written, or the next line would be glued onto it (and lost
     * to the reader while counted as delivered). */
    bool *pending = k->fd >= 0 && k->fd < PENDING_NL_FDS ? &pending_newline[k->fd] : NULL;
    size_t done = 0;
    if (pending && *pending) {
        if (out_write(k, &newline, 1) == 1) {
            *pending = false;
        } else {
            st.err = errno == EAGAIN ? 0 : errno;
            st.why = MSG_DROPPED_SINK_FAILED;
        }
    }
    if (!pending || !*pending) done = write_lines(k, msgs, n, call, &st, &cut);
    if (cut && st.err != EPIPE && st.err != EBADF) {
        /* A line was cut: terminate it now if possible, else before the
         * next batch (that message counts as failed either way). */
        if (out_write(k, &newline, 1) != 1 && pending) *pending = true;
    }
    pthread_mutex_unlock(&stdout_mu);
    for (size_t i = 0; i < n; i++) outcome[i] = i < done ? MSG_DELIVERED : st.why;
    if (done < n && st.why == MSG_DROPPED_SINK_FAILED) {
        call->attempt_errors++;
        long long suppressed = 0;
        if (ratelimit_ok(&k->rl, 1000, &suppressed)) {
            log_error("sink_stdout", k->endpoint,
                      "sink '%s': write to fd %d failed: %s (errno %d); %zu of %zu messages "
                      "dropped (first id '%s')%s",
                      k->name, k->fd, st.err ? strerror(st.err) : "no room", st.err, n - done, n,
                      msgs[done]->id, suppressed ? " (earlier failures suppressed)" : "");
        }
    }
}

/* A regular file always takes a write at once. A pipe, FIFO, terminal or
 * socket with room (POLLOUT) takes up to PIPE_BUF bytes at once. */
static bool stdout_ready(void *sink, size_t bytes)
{
    const struct stdout_sink *k = sink;
    if (k->mode == OUT_FILE) return true;
    if (bytes > PIPE_BUF) return false;
    struct pollfd p = {.fd = k->wfd, .events = POLLOUT};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLOUT | POLLERR | POLLHUP | POLLNVAL)) == POLLOUT;
}

static int stdout_check(void *sink, char *msg, size_t msglen)
{
    struct stdout_sink *k = sink;
    struct pollfd p = {.fd = k->fd, .events = POLLOUT};
    if (poll(&p, 1, 0) >= 0 && (p.revents & (POLLERR | POLLNVAL))) {
        snprintf(msg, msglen, "sink '%s': fd %d is %s", k->name, k->fd,
                 (p.revents & POLLNVAL) ? "not open" : "in an error state");
        return -1;
    }
    return 0;
}

const struct sink_ops sink_stdout_ops = {
    .type = "stdout",
    .settings = stdout_defs,
    .settings_size = sizeof(struct stdout_settings),
    .validate = NULL,
    .create = stdout_create,
    .send = stdout_send,
    .ready = stdout_ready,
    .check = stdout_check,
    .destroy = stdout_destroy,
};
