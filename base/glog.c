/* The guard library's logging: one process-wide sink (callback, context,
 * level), swapped atomically as a whole, so a line is never delivered to a
 * new callback with the old context. */
#include "base/glog.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"

struct glog_sink {
    baton_log_fn fn; /* NULL = stderr */
    void *ctx;
    enum baton_log_level max;
};

static struct glog_sink sink_default = {NULL, NULL, BATON_LOG_WARN};
static _Atomic(struct glog_sink *) sink_current = &sink_default;
/* A sink is never changed in place: baton_log_set fills the next slot of a
 * small ring and then publishes it, so a thread that loaded the previous
 * pointer still reads a consistent sink (a slot is reused only after
 * GLOG_SLOTS - 1 more changes; callers set one or two per process). No
 * allocation, nothing to free. */
#define GLOG_SLOTS 16
static struct glog_sink sink_slots[GLOG_SLOTS];
static atomic_uint sink_next;

void baton_log_set(baton_log_fn fn, void *ctx, enum baton_log_level max_level)
{
    struct glog_sink *cur = atomic_load(&sink_current);
    if (max_level < BATON_LOG_OFF) max_level = BATON_LOG_OFF;
    if (cur->fn == fn && cur->ctx == ctx && cur->max == max_level) return;
    struct glog_sink *s = &sink_slots[atomic_fetch_add(&sink_next, 1) % GLOG_SLOTS];
    s->fn = fn;
    s->ctx = ctx;
    s->max = max_level;
    atomic_store(&sink_current, s);
}

bool glog_enabled(enum baton_log_level level)
{
    return level <= atomic_load_explicit(&sink_current, memory_order_acquire)->max;
}

static void write_stderr(enum baton_log_level level, const char *component, const char *subject,
                         const char *message)
{
    static const char *const tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    char ts[32];
    clock_format_rfc3339(clock_wall_ms(), ts, sizeof ts);
    char line[4608];
    int n = snprintf(line, sizeof line, "%s %s %s%s%s%s: %s\n", ts,
                     tags[level >= BATON_LOG_ERROR && level <= BATON_LOG_DEBUG ? level : 0],
                     component ? component : "baton-guard", subject && subject[0] ? "[" : "",
                     subject ? subject : "", subject && subject[0] ? "]" : "", message);
    if (n < 0) return;
    size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    line[len - 1] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len); /* one write: lines never interleave */
    (void)w;
}

void glog_write(enum baton_log_level level, const char *component, const char *subject,
                const char *fmt, ...)
{
    struct glog_sink *s = atomic_load_explicit(&sink_current, memory_order_acquire);
    if (level > s->max) return;
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof msg) memcpy(msg + sizeof msg - 4, "...", 4);
    if (s->fn)
        s->fn(s->ctx, level, component, subject, msg);
    else
        write_stderr(level, component, subject, msg);
}
