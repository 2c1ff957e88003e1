/* libbaton-guard: where the library's log lines go.
 *
 * The guards and lockers report what an operator needs (promotions,
 * demotions, a lost lease, a backend that stopped answering, reconnects)
 * through one process-wide callback. Without one, lines at BATON_LOG_WARN
 * and above go to stderr as
 *   2026-12-02T14:00:00.123Z WARN guard[orders]: message
 * Thread safe: the callback is called from the library's threads (lease,
 * subscriber, callback threads) and from the caller's, possibly at the same
 * time, and must not call back into the library. */
#ifndef BATON_PUBLIC_LOG_H
#define BATON_PUBLIC_LOG_H

#include "baton/api.h"

#ifdef __cplusplus
extern "C" {
#endif

enum baton_log_level {
    BATON_LOG_OFF = -1, /* as max_level: nothing is logged */
    BATON_LOG_ERROR = 0,
    BATON_LOG_WARN = 1,
    BATON_LOG_INFO = 2,
    BATON_LOG_DEBUG = 3,
};

/* component: "guard", "once_guard", "locker_redis", "locker_etcd", ...;
 * subject: the log_name given in the guard's options (an endpoint name), or
 * NULL; message: one line, no newline, at most about 4 KiB. */
typedef void (*baton_log_fn)(void *ctx, enum baton_log_level level, const char *component,
                             const char *subject, const char *message);

/* Sends every line at max_level or more severe to fn (NULL = the stderr
 * writer above). Lines above max_level are not even formatted. Set it
 * before creating lockers and guards; it may be changed at any time. */
BATON_API void baton_log_set(baton_log_fn fn, void *ctx, enum baton_log_level max_level);

#ifdef __cplusplus
}
#endif

#endif
