/* One logging module for baton: stderr, one line per event, in one of two
 * formats (log.format in the main file):
 *
 * text (default):
 *   2026-12-02T14:00:00.123Z WARN gateway[orders]: message
 * json: one object per line, keys in this order; "endpoint" is left out
 * when the event has none (there are no other keys):
 *   {"time":"2026-12-02T14:00:00.123Z","level":"warn","component":"gateway","endpoint":"orders","message":"..."}
 *   JSON strings escape '"', '\\' and every control character (a newline in
 *   a message is \n, where the text format writes a space); bytes that are
 *   not valid UTF-8 become U+FFFD, so every line is valid JSON whatever the
 *   message holds.
 * Bounds: a text line is cut at 4 KiB; a JSON message at 4095 bytes before
 * escaping and a JSON line at 8 KiB. A cut message ends in "...". 
 *
 * The level is checked before formatting (log_enabled), so a disabled debug
 * call costs one atomic load. Thread safe: each line is written with one
 * write(2) call, so lines from different threads never interleave; lines
 * are built on the stack (no allocation). */
#ifndef BATON_LOG_H
#define BATON_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h" /* struct ratelimit */

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* Parses "error", "warn", "info", "debug". Returns 0, or -1 if unknown. */
int log_level_parse(const char *name, enum log_level *out);
const char *log_level_name(enum log_level level);
bool log_enabled(enum log_level level);

enum log_format { LOG_FORMAT_TEXT = 0, LOG_FORMAT_JSON = 1 };

void log_set_format(enum log_format format);
enum log_format log_get_format(void);
/* "text" or "json". */
const char *log_format_name(enum log_format format);

/* The JSON line log_write writes for one event (LOG_FORMAT_JSON), with the
 * time given: wall_ms since the epoch. component NULL is written "baton",
 * endpoint NULL or "" is left out. Writes at most cap bytes, newline
 * included, no NUL; a message that does not fit is cut at a character
 * boundary and ends in "...". Returns the length, or 0 when cap is below
 * LOG_JSON_LINE_MIN. */
#define LOG_JSON_LINE_MIN 1024
size_t log_json_line(char *buf, size_t cap, int64_t wall_ms, enum log_level level, const char *component,
                     const char *endpoint, const char *message);

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

#endif
