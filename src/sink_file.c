/* file sink: one envelope per line, appended to a regular file.
 *
 * Every instance that names the same file (one per endpoint, plus any other
 * user) shares one open file: a process-wide registry keyed by the absolute
 * path holds its descriptor (O_WRONLY | O_APPEND), its size and a mutex.
 * A batch's lines go out under that mutex with writev(2), so lines from
 * different instances never interleave; rotation happens under it too.
 *
 * Durability: fsync = "batch" (one fdatasync after a send's lines),
 * "always" (one per line) or "never".
 *
 * Rotation: before a write that would take the file past max_bytes, path
 * becomes path.1 (path.1 becomes path.2, ... up to path.<keep>; the oldest
 * is overwritten) and a fresh path is opened. SIGHUP (sinks_reopen_request):
 * the next send closes and reopens path (logrotate moved it away).
 *
 * Errors (ENOSPC, EIO, EACCES when reopening, ...) never drop a message
 * while its term lives: a failed write is cut back to the size before it
 * (ftruncate: no torn line is left behind), counted (attempt_errors),
 * logged at most once a second and retried with back-off (50 ms doubling
 * to 1 s) in sleeps of at most 20 ms that ask the lease and the cancel flag
 * each slice. The term ending settles the rest as MSG_DROPPED_TERM_ENDED,
 * cancel as MSG_DROPPED_SHUTDOWN. The file's mutex is not held while
 * waiting: another instance writing the same file is never held up by
 * this one's back-off, and waiting for the mutex asks the lease every
 * 20 ms too. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "common/log.h"
#include "common/util.h"
#include "src/sink_impl.h"

#define FILE_MODE 0640              /* permissions of a file the sink creates */
#define FILE_BACKOFF_MS 50          /* first retry delay, doubling */
#define FILE_BACKOFF_MAX_MS 1000    /* largest retry delay */
#define FILE_SLICE_MS 20            /* longest sleep between two lease checks */

struct file_settings {
    char *path;
    char *fsync;
    int64_t max_bytes;
    int64_t keep;
};

static const struct setting_def file_defs[] = {
    {"path", SETTING_STRING, offsetof(struct file_settings, path), .required = true,
     .help = "file to append JSON lines to (its directory must exist)"},
    {"fsync", SETTING_STRING, offsetof(struct file_settings, fsync), .def = "batch",
     .help = "\"batch\" (fdatasync after each batch), \"always\" (after every line) or \"never\""},
    {"max_bytes", SETTING_INT, offsetof(struct file_settings, max_bytes), .def = "104857600",
     .min = 0, .max = INT64_MAX, .help = "rotate before the file would grow past this many bytes "
                                        "(0 = never rotate)"},
    {"keep", SETTING_INT, offsetof(struct file_settings, keep), .def = "5", .min = 0, .max = 1000,
     .help = "rotated files kept (path.1 ... path.<keep>)"},
    SETTINGS_END,
};

enum fsync_mode { FSYNC_BATCH, FSYNC_ALWAYS, FSYNC_NEVER };

static int fsync_parse(const char *s, enum fsync_mode *out)
{
    if (!s || strcmp(s, "batch") == 0) *out = FSYNC_BATCH;
    else if (strcmp(s, "always") == 0) *out = FSYNC_ALWAYS;
    else if (strcmp(s, "never") == 0) *out = FSYNC_NEVER;
    else return -1;
    return 0;
}

/* One open file, shared by every instance writing it. */
struct shared_file {
    struct shared_file *next; /* files_list, under files_mu */
    char *path;               /* absolute */
    unsigned refs;            /* under files_mu */
    pthread_mutex_t mu;       /* the rest */
    int fd;                   /* -1: not open (opening failed, or closed to reopen) */
    off_t size;               /* bytes in the file, as we know it */
    unsigned generation;      /* sinks_reopen_generation() when it was opened */
};

static pthread_mutex_t files_mu = PTHREAD_MUTEX_INITIALIZER;
static struct shared_file *files_list;

struct file_sink {
    char *name;
    char *endpoint;       /* for log lines; NULL = none */
    char *dir;            /* the file's directory (check) */
    struct shared_file *f;
    enum fsync_mode fsync;
    int64_t max_bytes;    /* 0 = never rotate */
    unsigned keep;
    struct iovec *iov;    /* two per line of a segment; the sender's thread */
    size_t iov_cap;
    unsigned failures;    /* failed attempts since the last success */
    struct ratelimit rl_err, rl_drop, rl_rotate;
};

/* Splits path into its directory (malloc'd; "." when it has none) and
 * returns its last component (inside path), or NULL when it has none. */
static const char *split_path(const char *path, char **dir)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        *dir = xstrdup(".");
        return path[0] ? path : NULL;
    }
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    *dir = xmalloc(n + 1);
    memcpy(*dir, path, n);
    (*dir)[n] = '\0';
    return slash[1] ? slash + 1 : NULL;
}

static int file_validate(const void *settings, char *msg, size_t msglen)
{
    const struct file_settings *s = settings;
    enum fsync_mode m;
    if (fsync_parse(s->fsync, &m)) {
        snprintf(msg, msglen, "'fsync' expected \"batch\", \"always\" or \"never\", got \"%s\"",
                 s->fsync);
        return -1;
    }
    if (!s->path || !s->path[0]) {
        snprintf(msg, msglen, "'path' must name a file");
        return -1;
    }
    char *dir = NULL;
    const char *base = split_path(s->path, &dir);
    int rc = 0;
    struct stat st;
    if (!base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
        snprintf(msg, msglen, "'path' must name a file, got the directory '%s'", s->path);
        rc = -1;
    } else if (stat(dir, &st) != 0) {
        snprintf(msg, msglen, "'path' '%s': directory '%s' %s", s->path, dir,
                 errno == ENOENT ? "does not exist" : strerror(errno));
        rc = -1;
    } else if (!S_ISDIR(st.st_mode)) {
        snprintf(msg, msglen, "'path' '%s': '%s' is not a directory", s->path, dir);
        rc = -1;
    } else if (stat(s->path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(msg, msglen, "'path' '%s' exists and is not a regular file", s->path);
        rc = -1;
    }
    free(dir);
    return rc;
}

/* ---- the registry of open files ---- */

/* Opens f->path for appending (f->mu held). 0, or -1 with errno. */
static int file_open(struct shared_file *f)
{
    unsigned gen = sinks_reopen_generation();
    /* O_NONBLOCK: a FIFO put in its place must not block the open */
    int fd = open(f->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
                  FILE_MODE);
    if (fd < 0) return -1;
    struct stat st;
    int e = fstat(fd, &st) != 0 ? errno : !S_ISREG(st.st_mode) ? EINVAL : 0;
    if (e) {
        close(fd); /* not a regular file: never appended to, never rotated */
        errno = e;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    f->fd = fd;
    f->size = st.st_size;
    f->generation = gen;
    return 0;
}

static void file_close(struct shared_file *f)
{
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
}

/* The shared file for the absolute path abs (taken over), created when no
 * instance has it yet. */
static struct shared_file *file_acquire(char *abs)
{
    pthread_mutex_lock(&files_mu);
    struct shared_file *f = files_list;
    while (f && strcmp(f->path, abs) != 0) f = f->next;
    if (f) {
        f->refs++;
        free(abs);
    } else {
        f = xcalloc(1, sizeof *f);
        f->path = abs;
        f->refs = 1;
        f->fd = -1;
        pthread_mutex_init(&f->mu, NULL);
        f->next = files_list;
        files_list = f;
    }
    pthread_mutex_unlock(&files_mu);
    return f;
}

static void file_release(struct shared_file *f)
{
    pthread_mutex_lock(&files_mu);
    bool last = --f->refs == 0;
    if (last) {
        struct shared_file **p = &files_list;
        while (*p != f) p = &(*p)->next;
        *p = f->next;
    }
    pthread_mutex_unlock(&files_mu);
    if (!last) return;
    file_close(f);
    pthread_mutex_destroy(&f->mu);
    free(f->path);
    free(f);
}

/* ---- create, destroy, check ---- */

static void *file_create(const char *name, const char *endpoint, const void *settings, char *err,
                         size_t errlen)
{
    const struct file_settings *s = settings;
    char msg[400];
    if (!s || file_validate(s, msg, sizeof msg)) {
        snprintf(err, errlen, "sink '%s': %s", name ? name : "file", s ? msg : "no settings");
        return NULL;
    }
    char *dir = NULL;
    const char *base = split_path(s->path, &dir);
    char *real = realpath(dir, NULL);
    if (!real) {
        snprintf(err, errlen, "sink '%s': 'path' '%s': directory '%s': %s", name ? name : "file",
                 s->path, dir, strerror(errno));
        free(dir);
        return NULL;
    }
    size_t n = strlen(real) + strlen(base) + 2;
    char *abs = xmalloc(n);
    snprintf(abs, n, "%s%s%s", real, strcmp(real, "/") == 0 ? "" : "/", base);
    free(dir);

    struct file_sink *k = xcalloc(1, sizeof *k);
    k->name = xstrdup(name ? name : "file");
    k->endpoint = endpoint && endpoint[0] ? xstrdup(endpoint) : NULL;
    k->dir = real;
    (void)fsync_parse(s->fsync, &k->fsync);
    k->max_bytes = s->max_bytes;
    k->keep = (unsigned)s->keep;
    k->f = file_acquire(abs);
    /* Open now, so the file exists from the start; a failure is retried
     * (and reported) by the first send. */
    pthread_mutex_lock(&k->f->mu);
    if (k->f->fd < 0 && file_open(k->f) != 0)
        log_warn("sink_file", k->endpoint, "sink '%s': cannot open '%s' yet: %s (retried on send)",
                 k->name, k->f->path, strerror(errno));
    pthread_mutex_unlock(&k->f->mu);
    return k;
}

static void file_destroy(void *sink)
{
    struct file_sink *k = sink;
    if (!k) return;
    file_release(k->f);
    free(k->iov);
    free(k->dir);
    free(k->name);
    free(k->endpoint);
    free(k);
}

static int file_check(void *sink, char *msg, size_t msglen)
{
    struct file_sink *k = sink;
    if (access(k->dir, W_OK) != 0) {
        snprintf(msg, msglen, "sink '%s': directory '%s' of '%s' is not writable: %s", k->name,
                 k->dir, k->f->path, strerror(errno));
        return -1;
    }
    if (access(k->f->path, W_OK) != 0 && errno != ENOENT) {
        snprintf(msg, msglen, "sink '%s': '%s' is not writable: %s", k->name, k->f->path,
                 strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- writing ---- */

/* Why an attempt failed: errno and what was being done. */
struct fail {
    int err;
    const char *what; /* "open", "write", "fdatasync", ... */
};

/* Rotates f (f->mu held): path.<i> -> path.<i+1> down to path -> path.1
 * (keep 0: path is removed), then a fresh path is opened. 0, or -1 with
 * *fl filled: either the renames failed (the old file stays open: writing
 * goes on past max_bytes) or opening the fresh file did (f->fd is -1). */
static int rotate(struct file_sink *k, struct shared_file *f, struct fail *fl)
{
    size_t n = strlen(f->path) + 16;
    char *from = xmalloc(n), *to = xmalloc(n);
    int rc = 0;
    if (k->keep == 0) {
        if (unlink(f->path) != 0 && errno != ENOENT) {
            *fl = (struct fail){errno, "remove (rotate)"};
            rc = -1;
        }
    } else {
        for (unsigned i = k->keep - 1; i >= 1 && rc == 0; i--) {
            snprintf(from, n, "%s.%u", f->path, i);
            snprintf(to, n, "%s.%u", f->path, i + 1);
            if (rename(from, to) != 0 && errno != ENOENT) {
                *fl = (struct fail){errno, "rename (rotate)"};
                rc = -1;
            }
        }
        snprintf(to, n, "%s.1", f->path);
        if (rc == 0 && rename(f->path, to) != 0 && errno != ENOENT) {
            *fl = (struct fail){errno, "rename (rotate)"};
            rc = -1;
        }
    }
    free(from);
    free(to);
    if (rc) return -1;
    file_close(f);
    if (file_open(f) != 0) {
        *fl = (struct fail){errno, "open (after rotating)"};
        return -1;
    }
    return 0;
}

/* Writes cnt iovecs whole (partial writes and EINTR continue). 0, or -1
 * with errno. iov is consumed. */
static int write_iov(int fd, struct iovec *iov, size_t cnt)
{
    while (cnt > 0) {
        int c = cnt > IOV_MAX ? IOV_MAX : (int)cnt;
        ssize_t w = writev(fd, iov, c);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        size_t left = (size_t)w;
        while (cnt > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

static char newline[1] = {'\n'};

/* One attempt, f->mu held: opens the file if needed (or reopens it after
 * SIGHUP), rotates if the next line would not fit, then writes the
 * segment msgs[from..) that fits (at least one line) and syncs it. Returns
 * how many lines went out (> 0), or 0 with *fl filled: the file is cut
 * back to its size before the attempt. */
static size_t attempt(struct file_sink *k, struct message *const *msgs, size_t from, size_t n,
                      struct fail *fl)
{
    struct shared_file *f = k->f;
    if (f->fd >= 0 && f->generation != sinks_reopen_generation()) file_close(f);
    if (f->fd < 0 && file_open(f) != 0) {
        *fl = (struct fail){errno, "open"};
        return 0;
    }
    /* the size as it is now (copytruncate, another process appending) */
    struct stat st;
    if (fstat(f->fd, &st) == 0) f->size = st.st_size;

    size_t first = msgs[from]->len + 1;
    bool limit = k->max_bytes > 0;
    if (limit && f->size > 0 && (uint64_t)f->size + first > (uint64_t)k->max_bytes) {
        struct fail rf;
        if (rotate(k, f, &rf) != 0) {
            if (f->fd < 0) {
                *fl = rf;
                return 0;
            }
            long long suppressed = 0;
            if (ratelimit_ok(&k->rl_rotate, 1000, &suppressed))
                log_error("sink_file", k->endpoint,
                          "sink '%s': cannot rotate '%s' (%s: %s); writing on past max_bytes %lld%s",
                          k->name, f->path, rf.what, strerror(rf.err), (long long)k->max_bytes,
                          suppressed ? " (repeated failures suppressed)" : "");
            limit = false;
        }
    }

    /* the segment: the lines that fit (one at least), one with "always" */
    size_t end = from, bytes = 0;
    size_t max_lines = k->fsync == FSYNC_ALWAYS ? 1 : n - from;
    while (end < n && end - from < max_lines) {
        size_t len = msgs[end]->len + 1;
        if (end > from && limit && (uint64_t)f->size + bytes + len > (uint64_t)k->max_bytes) break;
        bytes += len;
        end++;
    }
    size_t cnt = 2 * (end - from);
    if (cnt > k->iov_cap) {
        k->iov_cap = cnt;
        k->iov = xrealloc(k->iov, cnt * sizeof *k->iov);
    }
    for (size_t i = from; i < end; i++) {
        k->iov[2 * (i - from)] = (struct iovec){msgs[i]->json, msgs[i]->len};
        k->iov[2 * (i - from) + 1] = (struct iovec){newline, 1};
    }

    off_t before = f->size;
    int rc = write_iov(f->fd, k->iov, cnt);
    if (rc != 0) *fl = (struct fail){errno, "write"};
    if (rc == 0 && k->fsync != FSYNC_NEVER && fdatasync(f->fd) != 0) {
        *fl = (struct fail){errno, "fdatasync"};
        rc = -1;
    }
    if (rc != 0) {
        /* no torn line: back to the size before this attempt; if even
         * that fails, reopen (and retry the cut) next time */
        if (ftruncate(f->fd, before) != 0) file_close(f);
        return 0;
    }
    f->size = before + (off_t)bytes;
    return end - from;
}

/* Takes f->mu, asking the lease and the cancel flag every 20 ms while
 * another instance holds it. 0 = held; -1 = *why says why not. */
static int lock_file(struct shared_file *f, struct sink_call *call, uint64_t epoch,
                     enum msg_outcome *why)
{
    for (;;) {
        struct timespec ts = clock_deadline(CLOCK_REALTIME, FILE_SLICE_MS);
        int r = pthread_mutex_timedlock(&f->mu, &ts);
        if (r == 0) return 0;
        if (r != ETIMEDOUT && r != EINTR) {
            /* not expected; fall back to waiting without a bound */
            pthread_mutex_lock(&f->mu);
            return 0;
        }
        if (call->cancel && atomic_load(call->cancel)) {
            *why = MSG_DROPPED_SHUTDOWN;
            return -1;
        }
        if (sink_time_left(call, epoch) < 0) {
            *why = MSG_DROPPED_TERM_ENDED;
            return -1;
        }
    }
}

/* Sleeps ms in slices of at most 20 ms, never past the lease's time left,
 * asking it and the cancel flag each slice. 0 = slept; -1 = *why says why
 * it stopped. */
static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int backoff_sleep(struct sink_call *call, uint64_t epoch, int64_t ms, enum msg_outcome *why)
{
    int64_t end = mono_ms() + ms;
    for (;;) {
        if (call->cancel && atomic_load(call->cancel)) {
            *why = MSG_DROPPED_SHUTDOWN;
            return -1;
        }
        int64_t left = sink_time_left(call, epoch);
        if (left < 0) {
            *why = MSG_DROPPED_TERM_ENDED;
            return -1;
        }
        int64_t rem = end - mono_ms();
        if (rem <= 0) return 0;
        int64_t s = rem < FILE_SLICE_MS ? rem : FILE_SLICE_MS;
        if (left > 0 && left < s) s = left;
        struct timespec ts = {(time_t)(s / 1000), (long)(s % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void file_send(void *sink, struct message *const *msgs, size_t n, enum msg_outcome *outcome,
                      struct sink_call *call)
{
    struct file_sink *k = sink;
    if (n == 0) return;
    uint64_t epoch = msgs[0]->epoch;
    size_t done = 0;
    enum msg_outcome why = MSG_DELIVERED;
    int64_t delay = FILE_BACKOFF_MS;
    while (done < n) {
        int64_t left = sink_wait_live(call, epoch);
        if (call->cancel && atomic_load(call->cancel)) {
            why = MSG_DROPPED_SHUTDOWN;
            break;
        }
        if (left < 0) {
            why = MSG_DROPPED_TERM_ENDED;
            break;
        }
        if (lock_file(k->f, call, epoch, &why) != 0) break;
        /* the mutex may have taken a while: still in the term? */
        left = sink_time_left(call, epoch);
        if (left <= 0) {
            pthread_mutex_unlock(&k->f->mu);
            continue; /* asked again at the top */
        }
        struct fail fl = {0, ""};
        size_t w = attempt(k, msgs, done, n, &fl);
        pthread_mutex_unlock(&k->f->mu);
        if (w > 0) {
            done += w;
            delay = FILE_BACKOFF_MS;
            if (k->failures) {
                log_info("sink_file", k->endpoint,
                         "sink '%s': '%s' delivered again after %u failed attempts", k->name,
                         k->f->path, k->failures);
                k->failures = 0;
            }
            continue;
        }
        call->attempt_errors++;
        k->failures++;
        long long suppressed = 0;
        if (ratelimit_ok(&k->rl_err, 1000, &suppressed))
            log_error("sink_file", k->endpoint,
                      "sink '%s': %s '%s' failed: %s (errno %d); %zu message(s) waiting, "
                      "retrying in %lld ms (attempt %u)%s",
                      k->name, fl.what, k->f->path, strerror(fl.err), fl.err, n - done,
                      (long long)delay, k->failures,
                      suppressed ? " (earlier failures suppressed)" : "");
        if (backoff_sleep(call, epoch, delay, &why) != 0) break;
        delay = delay * 2 > FILE_BACKOFF_MAX_MS ? FILE_BACKOFF_MAX_MS : delay * 2;
    }
    for (size_t i = 0; i < n; i++) outcome[i] = i < done ? MSG_DELIVERED : why;
    if (done < n) {
        long long suppressed = 0;
        if (ratelimit_ok(&k->rl_drop, 1000, &suppressed))
            log_warn("sink_file", k->endpoint,
                     "sink '%s': %zu of %zu message(s) not written to '%s' (first id '%s'): %s%s",
                     k->name, n - done, n, k->f->path, msgs[done]->id,
                     why == MSG_DROPPED_SHUTDOWN ? "shutdown" : "the term ended",
                     suppressed ? " (earlier ones suppressed)" : "");
    }
}

const struct sink_ops sink_file_ops = {
    .type = "file",
    .settings = file_defs,
    .settings_size = sizeof(struct file_settings),
    .validate = file_validate,
    .create = file_create,
    .send = file_send,
    .ready = NULL,
    .check = file_check,
    .destroy = file_destroy,
};
