/* Logging to stderr: one line per event (text or JSON), one write(2) per
 * line, built on the stack. */
#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "baton/log.h"
#include "common/json.h"
#include "common/redact.h"
#include "common/util.h"

static atomic_int log_level_current = LOG_INFO;
static atomic_int log_format_current = LOG_FORMAT_TEXT;

static const char *const level_names[] = {"error", "warn", "info", "debug"};
static const char *const level_tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};

/* The guard library's lines (include/baton/log.h) go through log_write,
 * so they share the daemon's format and level. */
static void guard_log_bridge(void *ctx, enum baton_log_level level, const char *component,
                             const char *subject, const char *message)
{
    (void)ctx;
    log_write((enum log_level)level, component, subject, "%s", message);
}

void log_set_level(enum log_level level)
{
    if (level < LOG_ERROR) level = LOG_ERROR;
    if (level > LOG_DEBUG) level = LOG_DEBUG;
    atomic_store_explicit(&log_level_current, (int)level, memory_order_relaxed);
    baton_log_set(guard_log_bridge, NULL, (enum baton_log_level)level);
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

void log_set_format(enum log_format format)
{
    if (format != LOG_FORMAT_JSON) format = LOG_FORMAT_TEXT;
    atomic_store_explicit(&log_format_current, (int)format, memory_order_relaxed);
}

enum log_format log_get_format(void)
{
    return atomic_load_explicit(&log_format_current, memory_order_relaxed) == LOG_FORMAT_JSON
               ? LOG_FORMAT_JSON
               : LOG_FORMAT_TEXT;
}

const char *log_format_name(enum log_format format)
{
    return format == LOG_FORMAT_JSON ? "json" : "text";
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
/* A JSON line: the message (at most LOG_LINE_MAX - 1 bytes) escaped; only
 * messages full of control characters come near it. */
#define LOG_JSON_LINE_MAX 8192
/* Bytes a component or endpoint name may take in a JSON line (names are at
 * most 128 characters; anything longer is cut). */
#define LOG_JSON_NAME_MAX 256

/* ---- JSON lines ---- */

/* A line being built in a caller's buffer. */
struct lbuf {
    char *p;
    size_t len;
};

static void put(struct lbuf *b, const char *s, size_t n)
{
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void putz(struct lbuf *b, const char *s)
{
    put(b, s, strlen(s));
}

/* The JSON form of the character at u[0] (n bytes left): its length, with
 * *src pointing at it (into u, into esc, or a constant) and *used set to the
 * bytes of u it stands for. Quotes, backslashes, control characters and DEL
 * are escaped; a byte that does not start valid UTF-8 becomes U+FFFD. */
static size_t json_char(const unsigned char *u, size_t n, char esc[6], const char **src, size_t *used)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char c = u[0];
    *used = 1;
    *src = (const char *)u;
    if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') return 1;
    if (c >= 0x80) {
        size_t l = utf8_seq_len(u, n);
        if (l) {
            *used = l;
            return l;
        }
        *src = "\xEF\xBF\xBD"; /* U+FFFD */
        return 3;
    }
    *src = esc;
    esc[0] = '\\';
    switch (c) {
    case '"': esc[1] = '"'; return 2;
    case '\\': esc[1] = '\\'; return 2;
    case '\n': esc[1] = 'n'; return 2;
    case '\r': esc[1] = 'r'; return 2;
    case '\t': esc[1] = 't'; return 2;
    case '\b': esc[1] = 'b'; return 2;
    case '\f': esc[1] = 'f'; return 2;
    default:
        memcpy(esc, "\\u00", 4);
        esc[4] = hex[c >> 4];
        esc[5] = hex[c & 0xF];
        return 6;
    }
}

/* Length of s[0..n) as JSON string content (without the quotes). */
static size_t json_len(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, total = 0;
    while (i < n) {
        char esc[6];
        const char *src;
        size_t used;
        total += json_char(u + i, n - i, esc, &src, &used);
        i += used;
    }
    return total;
}

/* Appends s[0..n) as a quoted JSON string of at most room bytes (room >=
 * 5). A string that does not fit is cut between characters and ends in
 * "..."; so does one the caller already cut (cut). */
static void put_json_str(struct lbuf *b, const char *s, size_t n, size_t room, bool cut)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t end = b->len + room - 1; /* after the content, with both quotes */
    /* fits whole? (every byte takes at most 6: most messages need no count) */
    if (!cut && (n <= (room - 2) / 6 || json_len(s, n) <= room - 2)) end = SIZE_MAX;
    else end -= 3; /* leaves room for `...` */
    b->p[b->len++] = '"';
    size_t i = 0;
    while (i < n) {
        char esc[6];
        const char *src;
        size_t used;
        size_t l = json_char(u + i, n - i, esc, &src, &used);
        if (end != SIZE_MAX && b->len + l > end) break;
        put(b, src, l);
        i += used;
    }
    if (end != SIZE_MAX) put(b, "...", 3);
    b->p[b->len++] = '"';
}

/* When a message was cut by vsnprintf, drops a UTF-8 sequence left
 * incomplete at its end (it would show as U+FFFD before the "..."). */
static size_t trim_partial_utf8(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t k = n, back = 0;
    while (k > 0 && back < 3 && (u[k - 1] & 0xC0) == 0x80) {
        k--;
        back++;
    }
    if (k > 0 && u[k - 1] >= 0xC0 && utf8_seq_len(u + k - 1, n - (k - 1)) == 0) return k - 1;
    return n;
}

static size_t json_line(char *buf, size_t cap, int64_t wall_ms, enum log_level level, const char *component,
                        const char *endpoint, const char *msg, size_t msg_len, bool cut)
{
    if (!buf || cap < LOG_JSON_LINE_MIN) return 0;
    if (level < LOG_ERROR || level > LOG_DEBUG) level = LOG_ERROR;
    if (!component) component = "baton";
    if (!msg) msg = "";
    char ts[32];
    clock_format_rfc3339(wall_ms, ts, sizeof ts);
    struct lbuf b = { buf, 0 };
    putz(&b, "{\"time\":\"");
    putz(&b, ts);
    putz(&b, "\",\"level\":\"");
    putz(&b, level_names[level]);
    putz(&b, "\",\"component\":");
    put_json_str(&b, component, strlen(component), LOG_JSON_NAME_MAX, false);
    if (endpoint && *endpoint) {
        putz(&b, ",\"endpoint\":");
        put_json_str(&b, endpoint, strlen(endpoint), LOG_JSON_NAME_MAX, false);
    }
    putz(&b, ",\"message\":");
    /* what is left, less the closing "}\n" */
    put_json_str(&b, msg, msg_len, cap - b.len - 2, cut);
    put(&b, "}\n", 2);
    return b.len;
}

size_t log_json_line(char *buf, size_t cap, int64_t wall_ms, enum log_level level, const char *component,
                     const char *endpoint, const char *message)
{
    return json_line(buf, cap, wall_ms, level, component, endpoint, message, message ? strlen(message) : 0,
                     false);
}

static void write_json(enum log_level level, const char *component, const char *endpoint, const char *fmt,
                       va_list ap)
{
    char msg[LOG_LINE_MAX];
    int m = vsnprintf(msg, sizeof msg, fmt, ap);
    size_t len = m > 0 ? (size_t)m : 0;
    bool cut = len >= sizeof msg;
    /* a URL's password never reaches the log, whoever formatted it */
    if (m > 0 && redact_needed(msg)) {
        redact_urls_inplace(msg, sizeof msg);
        len = strlen(msg);
        if (len >= sizeof msg - 1) cut = true; /* the mask made it longer */
    }
    if (cut) len = trim_partial_utf8(msg, strlen(msg));
    char line[LOG_JSON_LINE_MAX];
    size_t n = json_line(line, sizeof line, clock_wall_ms(), level, component, endpoint, msg, len, cut);
    write_all(STDERR_FILENO, line, n);
}

/* ---- log_write ---- */

void log_write(enum log_level level, const char *component, const char *endpoint,
               const char *fmt, ...)
{
    if (!log_enabled(level)) return;
    int saved_errno = errno;
    if (level < LOG_ERROR || level > LOG_DEBUG) level = LOG_ERROR;
    if (log_get_format() == LOG_FORMAT_JSON) {
        va_list ap;
        va_start(ap, fmt);
        write_json(level, component, endpoint, fmt, ap);
        va_end(ap);
        errno = saved_errno;
        return;
    }

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
        bool cut = (size_t)m >= sizeof line - len;
        /* a URL's password never reaches the log, whoever formatted it */
        if (redact_needed(line + len)) {
            redact_urls_inplace(line + len, sizeof line - len);
            m = (int)strlen(line + len);
            if ((size_t)m >= sizeof line - len - 1) cut = true; /* the mask made it longer */
        }
        if (cut) {
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

