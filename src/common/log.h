/* One logging module for baton: stderr, one line per event.
 *
 * Line format:  2026-12-02T14:00:00.123Z LEVEL component[endpoint]: message
 * The level is checked before formatting (log_enabled), so a disabled debug
 * call costs one atomic load. Thread safe: each line is written with one
 * write(2) call, so lines from different threads never interleave. */
#ifndef BATON_LOG_H
#define BATON_LOG_H

#include <stdbool.h>

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* Parses "error", "warn", "info", "debug". Returns 0, or -1 if unknown. */
int log_level_parse(const char *name, enum log_level *out);
const char *log_level_name(enum log_level level);
bool log_enabled(enum log_level level);

/* component: "guard", "gateway", "redis_psub", ...; endpoint may be NULL. */
void log_write(enum log_level level, const char *component, const char *endpoint,
               const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define LOG_AT(lvl, comp, ep, ...)                                  \
    do {                                                            \
        if (log_enabled(lvl)) log_write(lvl, comp, ep, __VA_ARGS__); \
    } while (0)
#define log_error(comp, ep, ...) LOG_AT(LOG_ERROR, comp, ep, __VA_ARGS__)
#define log_warn(comp, ep, ...) LOG_AT(LOG_WARN, comp, ep, __VA_ARGS__)
#define log_info(comp, ep, ...) LOG_AT(LOG_INFO, comp, ep, __VA_ARGS__)
#define log_debug(comp, ep, ...) LOG_AT(LOG_DEBUG, comp, ep, __VA_ARGS__)

/* Rate limiter for repeated warnings (drops, reconnect loops): returns true
 * at most once per interval_ms per limiter; *suppressed receives how many
 * calls were swallowed since the last true. Lock free. */
struct log_ratelimit {
    long long next_ms; /* monotonic ms; 0 = never fired */
    long long suppressed;
};
bool log_ratelimit_ok(struct log_ratelimit *rl, long long interval_ms, long long *suppressed);

#endif
