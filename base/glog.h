/* The library's logging (include/baton/log.h; in the base room because
 * curl_dl logs through it too): glog_warn(component,
 * subject, fmt, ...) formats only when the level is enabled and hands the
 * line to the callback the caller set, or to the stderr writer. */
#ifndef BATON_BASE_GLOG_H
#define BATON_BASE_GLOG_H

#include <stdbool.h>

#include "baton/log.h"

bool glog_enabled(enum baton_log_level level);
void glog_write(enum baton_log_level level, const char *component, const char *subject,
                const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define GLOG_AT(lvl, comp, subj, ...)                                   \
    do {                                                                \
        if (glog_enabled(lvl)) glog_write(lvl, comp, subj, __VA_ARGS__); \
    } while (0)
#define glog_error(comp, subj, ...) GLOG_AT(BATON_LOG_ERROR, comp, subj, __VA_ARGS__)
#define glog_warn(comp, subj, ...) GLOG_AT(BATON_LOG_WARN, comp, subj, __VA_ARGS__)
#define glog_info(comp, subj, ...) GLOG_AT(BATON_LOG_INFO, comp, subj, __VA_ARGS__)
#define glog_debug(comp, subj, ...) GLOG_AT(BATON_LOG_DEBUG, comp, subj, __VA_ARGS__)

#endif
