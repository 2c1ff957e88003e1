/* Scope and key building for guards: segments joined with ':', empty and
 * NULL segments skipped. */
#include "baton/scope.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Appends seg (with a ':' separator unless *pos is 0). Returns false when it
 * does not fit (buf[len - 1] is reserved for the NUL). */
static bool append_segment(char *buf, size_t len, size_t *pos, const char *seg)
{
    size_t n = strlen(seg);
    size_t need = n + (*pos > 0 ? 1 : 0);
    if (*pos + need + 1 > len) return false;
    if (*pos > 0) buf[(*pos)++] = ':';
    memcpy(buf + *pos, seg, n);
    *pos += n;
    buf[*pos] = '\0';
    return true;
}

static int join_list(char *buf, size_t len, const char *first, va_list ap)
{
    if (buf == NULL || len == 0) return -1;
    buf[0] = '\0';
    size_t pos = 0;
    for (const char *seg = first; seg != NULL; seg = va_arg(ap, const char *)) {
        if (seg[0] == '\0') continue;
        if (!append_segment(buf, len, &pos, seg)) {
            buf[0] = '\0';
            return -1;
        }
    }
    return (int)pos;
}

int baton_scope_join(char *buf, size_t len, const char *first, ...)
{
    va_list ap;
    va_start(ap, first);
    int rc = join_list(buf, len, first, ap);
    va_end(ap);
    return rc;
}

int baton_scope_join_n(char *buf, size_t len, const char *const *segs, size_t n)
{
    if (buf == NULL || len == 0) return -1;
    buf[0] = '\0';
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        if (segs[i] == NULL || segs[i][0] == '\0') continue;
        if (!append_segment(buf, len, &pos, segs[i])) {
            buf[0] = '\0';
            return -1;
        }
    }
    return (int)pos;
}

int baton_key(char *buf, size_t len, const char *prefix, const char *kind, const char *scope,
              const char *key)
{
    if (prefix == NULL || prefix[0] == '\0') prefix = BATON_DEFAULT_PREFIX;
    const char *segs[4] = {prefix, kind, scope, key};
    return baton_scope_join_n(buf, len, segs, 4);
}

int baton_lease_key(char *buf, size_t len, const char *prefix, const char *scope, bool hash_tag)
{
    if (!hash_tag) return baton_key(buf, len, prefix, "active", scope, NULL);
    char tagged[BATON_GUARD_KEY_MAX];
    int n = snprintf(tagged, sizeof tagged, "{%s}", scope ? scope : "");
    if (n < 0 || (size_t)n >= sizeof tagged) {
        if (len) buf[0] = '\0';
        return -1;
    }
    return baton_key(buf, len, prefix, "active", tagged, NULL);
}
