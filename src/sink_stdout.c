/* stdout sink: one envelope per line. A batch is copied into a staging
 * buffer and goes out with as few write(2) calls as possible under one
 * process-wide mutex, so lines from different endpoints' forwarders never
 * interleave. No stdio buffering: a
 * batch is on the file descriptor when send() returns. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "src/common/log.h"
#include "src/common/util.h"
#include "src/sink_impl.h"

struct stdout_settings {
    int64_t fd;
};

static const struct setting_def stdout_defs[] = {
    {"fd", SETTING_INT, offsetof(struct stdout_settings, fd), .def = "1", .min = 1,
     .max = 1048576, .help = "file descriptor to write to (1 = stdout; 2 = stderr)"},
    SETTINGS_END,
};

struct stdout_sink {
    char *name;
    int fd;
    struct log_ratelimit rl;
};

/* One lock for every instance: they share the descriptor. */
static pthread_mutex_t stdout_mu = PTHREAD_MUTEX_INITIALIZER;

static void *stdout_create(const char *name, const void *settings, char *err, size_t errlen)
{
    const struct stdout_settings *s = settings;
    struct stdout_sink *k = xcalloc(1, sizeof *k);
    k->name = xstrdup(name ? name : "stdout");
    k->fd = s ? (int)s->fd : STDOUT_FILENO;
    if (k->fd <= 0) k->fd = STDOUT_FILENO;
    return k;
}

static void stdout_destroy(void *sink)
{
    struct stdout_sink *k = sink;
    if (!k) return;
    free(k->name);
    free(k);
}

/* Waits for a non-blocking descriptor to become writable. */
static int wait_writable(int fd, const atomic_bool *cancel)
{
    for (;;) {
        if (cancel && atomic_load(cancel)) return -1;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int r = poll(&p, 1, 100);
        if (r > 0) return 0;
        if (r < 0 && errno != EINTR) return -1;
    }
}

static const char newline = '\n';

/* Lines are copied into one staging buffer and written with write(2): one
 * contiguous segment costs the kernel far less than two iovecs per line.
 * A line longer than the buffer goes out on its own with writev. */
#define STDOUT_STAGE_SIZE ((size_t)64 * 1024)
#define STDOUT_STAGE_LINES 1024
static char stage[STDOUT_STAGE_SIZE]; /* under stdout_mu */
/* fds whose last line was cut and not yet terminated (under stdout_mu) */
#define PENDING_NL_FDS 1024
static bool pending_newline[PENDING_NL_FDS];

/* Writes n bytes of buf; returns how many went out (n unless *err). */
static size_t write_all(int fd, const char *buf, size_t n, const atomic_bool *cancel, int *err)
{
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, buf + off, n - off);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (wait_writable(fd, cancel) == 0) continue;
                *err = EAGAIN;
                return off;
            }
            *err = errno;
            return off;
        }
        off += (size_t)w;
    }
    return off;
}

/* One line too long for the staging buffer: json + "\n" with writev.
 * Returns true when it went out whole; *cut when only part of it did. */
static bool write_one_long(int fd, const struct message *m, const atomic_bool *cancel, int *err,
                           bool *cut)
{
    struct iovec iov[2] = {
        {.iov_base = (void *)m->json, .iov_len = m->len},
        {.iov_base = (void *)&newline, .iov_len = 1},
    };
    size_t first = 0, wrote = 0;
    while (first < 2) {
        ssize_t w = writev(fd, iov + first, (int)(2 - first));
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (wait_writable(fd, cancel) == 0) continue;
                *err = EAGAIN;
            } else {
                *err = errno;
            }
            *cut = wrote > 0;
            return false;
        }
        wrote += (size_t)w;
        size_t left = (size_t)w;
        while (first < 2 && left >= iov[first].iov_len) {
            left -= iov[first].iov_len;
            first++;
        }
        if (first < 2) {
            iov[first].iov_base = (char *)iov[first].iov_base + left;
            iov[first].iov_len -= left;
        }
    }
    return true;
}

/* Writes the lines of msgs[0..n). Returns how many messages went out whole;
 * *err receives errno when fewer than n did, *cut whether part of the next
 * line was written. Call with stdout_mu held. */
static size_t write_lines(int fd, struct message *const *msgs, size_t n, const atomic_bool *cancel,
                          int *err, bool *cut)
{
    size_t ends[STDOUT_STAGE_LINES]; /* end offset of each staged line */
    size_t done = 0; /* messages fully written */
    *err = 0;
    *cut = false;
    while (done < n) {
        if (msgs[done]->len + 1 > STDOUT_STAGE_SIZE) {
            if (!write_one_long(fd, msgs[done], cancel, err, cut)) return done;
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
        size_t wrote = write_all(fd, stage, used, cancel, err);
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
                        enum msg_outcome *outcome, const atomic_bool *cancel,
                        unsigned long long *attempt_errors)
{
    struct stdout_sink *k = sink;
    if (attempt_errors) *attempt_errors = 0;
    if (n == 0) return;
    int err = 0;
    bool cut = false;
    pthread_mutex_lock(&stdout_mu);
    /* A line cut by an earlier failure must be terminated before anything
     * else is written, or the next line would be glued onto it (and lost
     * to the reader while counted as delivered). */
    bool *pending = k->fd >= 0 && k->fd < PENDING_NL_FDS ? &pending_newline[k->fd] : NULL;
    size_t done = 0;
    if (pending && *pending) {
        if (write(k->fd, &newline, 1) == 1) {
            *pending = false;
        } else {
            err = errno;
        }
    }
    if (!pending || !*pending) done = write_lines(k->fd, msgs, n, cancel, &err, &cut);
    if (cut && err != EPIPE && err != EBADF) {
        /* A line was cut: terminate it now if possible, else before the
         * next batch (that message counts as failed either way). */
        if (write(k->fd, &newline, 1) != 1 && pending) *pending = true;
    }
    pthread_mutex_unlock(&stdout_mu);
    for (size_t i = 0; i < n; i++) outcome[i] = i < done ? MSG_DELIVERED : MSG_DROPPED_SINK_FAILED;
    if (done < n) {
        if (attempt_errors) *attempt_errors = 1;
        long long suppressed = 0;
        if (log_ratelimit_ok(&k->rl, 1000, &suppressed)) {
            char ep[128];
            sink_envelope_endpoint(msgs[done], ep, sizeof ep);
            log_error("sink_stdout", ep[0] ? ep : NULL,
                      "sink '%s': write to fd %d failed: %s (errno %d); %zu of %zu messages "
                      "dropped (first id '%s')%s",
                      k->name, k->fd, strerror(err), err, n - done, n, msgs[done]->id,
                      suppressed ? " (earlier failures suppressed)" : "");
        }
    }
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
    .check = stdout_check,
    .destroy = stdout_destroy,
};
