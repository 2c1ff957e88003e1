/* Logging to stderr: one line per event, one write(2) per line. */
#include "src/common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "src/common/util.h"

static atomic_int log_level_current = LOG_INFO;

static const char *const level_names[] = {"error", "warn", "info", "debug"};
static const char *const level_tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};

void log_set_level(enum log_level level)
{
    if (level < LOG_ERROR) level = LOG_ERROR;
    if (level > LOG_DEBUG) level = LOG_DEBUG;
    atomic_store_explicit(&log_level_current, (int)level, memory_order_relaxed);
}

enum log_level log_get_level(void)
{
    return (enum log_level)atomic_load_explicit(&log_level_current, memory_order_relaxed);
}

int log_level_parse(const char *name, enum log_level *out)
{
    if (!name) return -1;
    for (int i = LOG_ERROR; i <= LOG_DEBUG; i++) {
        if (strcasecmp(name, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    if (strcasecmp(name, "warning") == 0) {
        *out = LOG_WARN;
        return 0;
    }
    return -1;
}

const char *log_level_name(enum log_level level)
{
    if (level < LOG_ERROR || level > LOG_DEBUG) return "unknown";
    return level_names[level];
}

bool log_enabled(enum log_level level)
{
    return (int)level <= atomic_load_explicit(&log_level_current, memory_order_relaxed);
}

/* Writes all of buf, retrying on EINTR and partial writes. */
static void write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, buf, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            return;
        }
        buf += w;
        len -= (size_t)w;
    }
}

#define LOG_LINE_MAX 4096

void log_write(enum log_level level, const char *component, const char *endpoint,
               const char *fmt, ...)
{
    if (!log_enabled(level)) return;
    int saved_errno = errno;
    if (level < LOG_ERROR || level > LOG_DEBUG) level = LOG_ERROR;

    char line[LOG_LINE_MAX];
    char ts[32];
    clock_format_rfc3339(clock_wall_ms(), ts, sizeof ts);
    int n;
    if (endpoint && *endpoint)
        n = snprintf(line, sizeof line, "%s %s %s[%s]: ", ts, level_tags[level],
                     component ? component : "baton", endpoint);
    else
        n = snprintf(line, sizeof line, "%s %s %s: ", ts, level_tags[level],
                     component ? component : "baton");
    if (n < 0) n = 0;
    size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;

    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + len, sizeof line - len, fmt, ap);
    va_end(ap);
    if (m > 0) {
        if ((size_t)m >= sizeof line - len) {
            /* truncated: mark it */
            len = sizeof line - 1;
            memcpy(line + len - 3, "...", 3);
        } else {
            len += (size_t)m;
        }
    }
    /* One event, one line: embedded newlines would break line-based readers. */
    for (size_t i = 0; i < len; i++) {
        if (line[i] == '\n' || line[i] == '\r') line[i] = ' ';
    }
    if (len >= sizeof line - 1) len = sizeof line - 2;
    line[len++] = '\n';
    write_all(STDERR_FILENO, line, len);
    errno = saved_errno;
}

bool log_ratelimit_ok(struct log_ratelimit *rl, long long interval_ms, long long *suppressed)
{
    /* The struct is plain (it is embedded in other structs and zero
     * initialised), so use the compiler's atomic builtins on its fields. */
    long long now = (long long)clock_mono_ms();
    long long cur = __atomic_load_n(&rl->next_ms, __ATOMIC_RELAXED);
    for (;;) {
        if (cur != 0 && now < cur) {
            __atomic_fetch_add(&rl->suppressed, 1, __ATOMIC_RELAXED);
            if (suppressed) *suppressed = 0;
            return false;
        }
        long long want = now + (interval_ms > 0 ? interval_ms : 1);
        if (__atomic_compare_exchange_n(&rl->next_ms, &cur, want, true, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            long long s = __atomic_exchange_n(&rl->suppressed, 0, __ATOMIC_RELAXED);
            if (suppressed) *suppressed = s;
            return true;
        }
    }
}
