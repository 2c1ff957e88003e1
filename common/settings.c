/* Settings tables: parsing a libconfig group into a struct, driven by a
 * NULL-terminated array of struct setting_def. See settings.h. */
#include "common/settings.h"

#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The list config_errors_attach gave, and the struct it collects for. */
static _Thread_local struct config_errors *collect_list;
static _Thread_local const struct config_error *collect_for;

void config_errors_attach(struct config_errors *list, const struct config_error *err)
{
    collect_list = list;
    collect_for = err;
}

void config_errors_detach(void)
{
    collect_list = NULL;
    collect_for = NULL;
}

void config_errors_free(struct config_errors *list)
{
    if (!list) return;
    free(list->v);
    list->v = NULL;
    list->n = 0;
}

static void *oom_check(void *p);

void config_error_set(struct config_error *err, const char *file, int line, const char *fmt, ...)
{
    if (!err) return;
    snprintf(err->file, sizeof err->file, "%s", file ? file : "");
    err->line = line > 0 ? line : 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    if (collect_list && err == collect_for) {
        struct config_errors *l = collect_list;
        l->v = oom_check(realloc(l->v, (l->n + 1) * sizeof *l->v));
        l->v[l->n++] = *err;
    }
}

void config_error_format(const struct config_error *err, char *buf, size_t len)
{
    if (!buf || len == 0) return;
    if (!err) {
        buf[0] = '\0';
        return;
    }
    if (err->file[0] && err->line > 0)
        snprintf(buf, len, "%s:%d: %s", err->file, err->line, err->msg);
    else if (err->file[0])
        snprintf(buf, len, "%s: %s", err->file, err->msg);
    else
        snprintf(buf, len, "%s", err->msg);
}

void strlist_free(struct strlist *l)
{
    if (!l) return;
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* OOM is fatal in baton; this file keeps its own helpers so that it depends
 * on nothing but libconfig. */
static void *oom_check(void *p)
{
    if (!p) {
        fputs("baton: out of memory\n", stderr);
        abort();
    }
    return p;
}

static char *dup_str(const char *s)
{
    return oom_check(strdup(s));
}

static void strlist_push(struct strlist *l, const char *s)
{
    l->v = oom_check(realloc(l->v, (l->n + 1) * sizeof *l->v));
    l->v[l->n++] = dup_str(s);
}

static const char *type_word(int config_type)
{
    switch (config_type) {
    case CONFIG_TYPE_GROUP: return "a group";
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64: return "an integer";
    case CONFIG_TYPE_FLOAT: return "a floating-point number";
    case CONFIG_TYPE_STRING: return "a string";
    case CONFIG_TYPE_BOOL: return "a boolean";
    case CONFIG_TYPE_ARRAY: return "an array";
    case CONFIG_TYPE_LIST: return "a list";
    }
    return "nothing";
}

static const char *expected_word(enum setting_type t)
{
    switch (t) {
    case SETTING_BOOL: return "a boolean (true or false)";
    case SETTING_INT: return "an integer";
    case SETTING_DOUBLE: return "a number";
    case SETTING_STRING: return "a string";
    case SETTING_STRLIST: return "a string or a list of strings";
    case SETTING_ENUM: return "a string";
    case SETTING_GROUP: return "a group { key = value; ... }";
    }
    return "?";
}

/* Where a setting (or failing that, the group holding it) comes from. A
 * file-level (root) group has no line of its own: its first member's file
 * and line 1 stand in. */
static void where(const config_setting_t *s, const char **file, int *line)
{
    *file = s ? config_setting_source_file(s) : NULL;
    *line = s ? config_setting_source_line(s) : 0;
    if (s && (!*file || *line == 0) && config_setting_is_group(s) && config_setting_length(s) > 0) {
        const config_setting_t *first = config_setting_get_elem(s, 0);
        if (!*file) *file = config_setting_source_file(first);
        if (*line == 0) *line = 1;
    }
    if (*line == 0 && *file) *line = 1;
}

static void set_err(struct config_error *err, const config_setting_t *s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(struct config_error *err, const config_setting_t *s, const char *fmt, ...)
{
    if (!err) return;
    const char *file;
    int line;
    where(s, &file, &line);
    char msg[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    config_error_set(err, file, line, "%s", msg);
}

/* "auto, active, once, none" */
static void join_choices(const char *const *choices, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; choices && choices[i]; i++) {
        int n = snprintf(buf + used, len - used, "%s%s", i ? ", " : "", choices[i]);
        if (n < 0 || (size_t)n >= len - used) break;
        used += (size_t)n;
    }
}

static const char *help_suffix(const struct setting_def *d, char *buf, size_t len)
{
    if (d->help && d->help[0])
        snprintf(buf, len, " (%s)", d->help);
    else
        buf[0] = '\0';
    return buf;
}

static bool int_bounded(const struct setting_def *d)
{
    return !(d->min == 0 && d->max == 0);
}

static int check_range(const struct setting_def *d, const config_setting_t *s, int64_t v,
                       const char *what, struct config_error *err)
{
    if (!int_bounded(d) || (v >= d->min && v <= d->max)) return 0;
    char h[200];
    set_err(err, s, "%s: %s = %" PRId64 " is out of range %" PRId64 "..%" PRId64 "%s", what, d->name,
            v, d->min, d->max, help_suffix(d, h, sizeof h));
    return -1;
}

static int enum_index(const struct setting_def *d, const char *v)
{
    for (int i = 0; d->choices && d->choices[i]; i++)
        if (strcmp(d->choices[i], v) == 0) return i;
    return -1;
}

/* Applies the default text of d. Returns 0, or -1 when the table itself is
 * wrong (a programming error, reported like a config error). */
static int apply_default(const struct setting_def *d, void *out, const config_setting_t *group,
                         const char *what, struct config_error *err)
{
    char *p = (char *)out + d->offset;
    const char *t = d->def;
    char *end;
    switch (d->type) {
    case SETTING_BOOL:
        if (strcmp(t, "true") == 0) *(bool *)p = true;
        else if (strcmp(t, "false") == 0) *(bool *)p = false;
        else goto bad;
        return 0;
    case SETTING_INT: {
        if (d->word && strcmp(t, d->word) == 0) {
            *(int64_t *)p = d->word_value;
            return 0;
        }
        errno = 0;
        long long v = strtoll(t, &end, 0);
        if (errno || end == t || *end) goto bad;
        *(int64_t *)p = v;
        return 0;
    }
    case SETTING_DOUBLE: {
        errno = 0;
        double v = strtod(t, &end);
        if (errno || end == t || *end) goto bad;
        *(double *)p = v;
        return 0;
    }
    case SETTING_STRING:
        *(char **)p = dup_str(t);
        return 0;
    case SETTING_STRLIST: {
        /* comma-separated */
        struct strlist *l = (struct strlist *)p;
        const char *s = t;
        while (*s) {
            const char *c = strchr(s, ',');
            size_t n = c ? (size_t)(c - s) : strlen(s);
            char *item = oom_check(strndup(s, n));
            strlist_push(l, item);
            free(item);
            s += n;
            if (*s == ',') s++;
        }
        return 0;
    }
    case SETTING_ENUM: {
        int i = enum_index(d, t);
        if (i < 0) goto bad;
        *(int *)p = i;
        return 0;
    }
    case SETTING_GROUP: /* no textual default: its own settings have them */
        goto bad;
    }
bad:
    set_err(err, group, "%s: internal error: bad default \"%s\" for '%s'", what, t, d->name);
    return -1;
}

/* "credential:NAME" in a *_file setting: $CREDENTIALS_DIRECTORY/NAME, the
 * file systemd's LoadCredential=/SetCredential= provide. */
static int credential_path(const char *name, char **out, char *msg, size_t msglen)
{
    const char *dir = getenv("CREDENTIALS_DIRECTORY");
    if (!name[0] || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
        snprintf(msg, msglen, "a credential name is one file name (no '/'), as in "
                 "LoadCredential=NAME:/path");
        return -1;
    }
    if (!dir || !dir[0]) {
        snprintf(msg, msglen, "$CREDENTIALS_DIRECTORY is not set: a credential is only "
                 "available when systemd starts baton with LoadCredential=%s:... (or "
                 "SetCredential=); elsewhere give the file's path", name);
        return -1;
    }
    size_t n = strlen(dir) + 1 + strlen(name) + 1;
    *out = oom_check(malloc(n));
    snprintf(*out, n, "%s/%s", dir, name);
    return 0;
}

static int parse_one(const struct setting_def *d, const config_setting_t *s, void *out,
                     const char *what, struct config_error *err)
{
    char *p = (char *)out + d->offset;
    int t = config_setting_type(s);
    char h[200];
    if (d->type == SETTING_GROUP) {
        char sub_what[300];
        snprintf(sub_what, sizeof sub_what, "%s: %s", what, d->name);
        if (!config_setting_is_group(s)) {
            set_err(err, s, "%s: '%s' expected a group %s = { key = value; ... }, got %s", what,
                    d->name, d->name, type_word(t));
            return -1;
        }
        *(bool *)p = true;
        return settings_parse(d->sub, s, NULL, sub_what, p, err);
    }
    switch (d->type) {
    case SETTING_BOOL:
        if (t != CONFIG_TYPE_BOOL) break;
        *(bool *)p = config_setting_get_bool(s) != 0;
        return 0;
    case SETTING_INT: {
        if (d->word && t == CONFIG_TYPE_STRING) {
            const char *v = config_setting_get_string(s);
            if (strcmp(v, d->word) != 0) {
                set_err(err, s, "%s: %s = \"%s\": expected an integer (%lld to %lld) or \"%s\"", what,
                        d->name, v, (long long)d->min, (long long)d->max, d->word);
                return -1;
            }
            *(int64_t *)p = d->word_value;
            return 0;
        }
        if (t != CONFIG_TYPE_INT && t != CONFIG_TYPE_INT64) break;
        int64_t v = t == CONFIG_TYPE_INT ? config_setting_get_int(s) : config_setting_get_int64(s);
        if (check_range(d, s, v, what, err)) return -1;
        *(int64_t *)p = v;
        return 0;
    }
    case SETTING_DOUBLE:
        if (t == CONFIG_TYPE_FLOAT)
            *(double *)p = config_setting_get_float(s);
        else if (t == CONFIG_TYPE_INT)
            *(double *)p = config_setting_get_int(s);
        else if (t == CONFIG_TYPE_INT64)
            *(double *)p = (double)config_setting_get_int64(s);
        else
            break;
        return 0;
    case SETTING_STRING: {
        if (t != CONFIG_TYPE_STRING) break;
        char **sp = (char **)p;
        free(*sp);
        *sp = NULL;
        const char *v = config_setting_get_string(s);
        size_t nl = strlen(d->name);
        if (nl > 5 && strcmp(d->name + nl - 5, "_file") == 0 &&
            strncmp(v, SETTING_CREDENTIAL_PREFIX, strlen(SETTING_CREDENTIAL_PREFIX)) == 0) {
            char msg[400];
            if (credential_path(v + strlen(SETTING_CREDENTIAL_PREFIX), sp, msg, sizeof msg) != 0) {
                set_err(err, s, "%s: '%s' = \"%s\": %s", what, d->name, v, msg);
                return -1;
            }
            return 0;
        }
        *sp = dup_str(v);
        return 0;
    }
    case SETTING_STRLIST: {
        struct strlist *l = (struct strlist *)p;
        if (t == CONFIG_TYPE_STRING) {
            strlist_free(l);
            strlist_push(l, config_setting_get_string(s));
            return 0;
        }
        if (t != CONFIG_TYPE_LIST && t != CONFIG_TYPE_ARRAY) break;
        strlist_free(l);
        int n = config_setting_length(s);
        for (int i = 0; i < n; i++) {
            const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
            if (config_setting_type(e) != CONFIG_TYPE_STRING) {
                set_err(err, e, "%s: '%s' expected a list of strings%s, element %d is %s", what,
                        d->name, help_suffix(d, h, sizeof h), i + 1,
                        type_word(config_setting_type(e)));
                return -1;
            }
            strlist_push(l, config_setting_get_string(e));
        }
        if (d->required && l->n == 0) {
            set_err(err, s, "%s: '%s' must not be empty%s", what, d->name,
                    help_suffix(d, h, sizeof h));
            return -1;
        }
        return 0;
    }
    case SETTING_ENUM: {
        if (t != CONFIG_TYPE_STRING) break;
        const char *v = config_setting_get_string(s);
        int i = enum_index(d, v);
        if (i < 0) {
            char list[300];
            join_choices(d->choices, list, sizeof list);
            set_err(err, s, "%s: %s = \"%s\": expected one of %s", what, d->name, v, list);
            return -1;
        }
        *(int *)p = i;
        return 0;
    }
    case SETTING_GROUP: /* parsed above */
        return 0;
    }
    if (d->type == SETTING_ENUM) {
        char list[300];
        join_choices(d->choices, list, sizeof list);
        set_err(err, s, "%s: '%s' expected one of \"%s\" (a quoted string), got %s", what, d->name,
                list, type_word(t));
    } else {
        set_err(err, s, "%s: '%s' expected %s%s, got %s", what, d->name, expected_word(d->type),
                help_suffix(d, h, sizeof h), type_word(t));
    }
    return -1;
}

static bool name_in(const char *name, const struct setting_def *defs, const char *const *also)
{
    for (size_t i = 0; defs && defs[i].name; i++)
        if (strcmp(defs[i].name, name) == 0 ||
            (defs[i].old_name && strcmp(defs[i].old_name, name) == 0))
            return true;
    for (size_t i = 0; also && also[i]; i++)
        if (strcmp(also[i], name) == 0) return true;
    return false;
}

static void list_keys(const struct setting_def *defs, const char *const *also, char *buf, size_t len)
{
    size_t used = 0;
    bool first = true;
    buf[0] = '\0';
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0;; i++) {
            const char *k = pass == 0 ? (defs ? defs[i].name : NULL) : (also ? also[i] : NULL);
            if (!k) break;
            int n = snprintf(buf + used, len - used, "%s%s", first ? "" : ", ", k);
            if (n < 0 || (size_t)n >= len - used) {
                /* Out of room: end with an ellipsis where it fits. */
                if (len >= 4) memcpy(buf + len - 4, "...", 4);
                return;
            }
            used += (size_t)n;
            first = false;
        }
    }
    if (first) snprintf(buf, len, "(none)");
}

/* Edit distance (insert, delete, substitute, swap of neighbours), capped:
 * only small distances matter for "did you mean". */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 64;
    size_t d[64][64];
    for (size_t i = 0; i <= la; i++) d[i][0] = i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    }
    return d[la][lb];
}

/* The closest valid key when it is close enough to be a typo, else NULL. */
static const char *closest_key(const char *name, const struct setting_def *defs, const char *const *also)
{
    const char *best = NULL;
    size_t best_d = 3; /* at most 2 edits */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0;; i++) {
            const char *k = pass == 0 ? (defs ? defs[i].name : NULL) : (also ? also[i] : NULL);
            if (!k) break;
            size_t dist = edit_distance(name, k);
            if (dist < best_d && dist < strlen(k)) {
                best_d = dist;
                best = k;
            }
        }
    }
    return best;
}

/* True when an unknown key of group is a near miss of name (the "did you
 * mean" of its error): the missing key is then that misspelling. */
static bool misspelt(const char *name, const config_setting_t *group, const struct setting_def *defs,
                     const char *const *also)
{
    int n = group ? config_setting_length(group) : 0;
    for (int i = 0; i < n; i++) {
        const char *k = config_setting_name(config_setting_get_elem(group, (unsigned)i));
        if (k && !name_in(k, defs, also)) {
            const char *near = closest_key(k, defs, also);
            if (near && strcmp(near, name) == 0) return true;
        }
    }
    return false;
}

static int parse_group(const struct setting_def *defs, const config_setting_t *group,
                       const char *const *also_allowed, const char *what, void *out,
                       struct config_error *err, bool report_unknown);

int settings_parse(const struct setting_def *defs, const config_setting_t *group,
                   const char *const *also_allowed, const char *what, void *out,
                   struct config_error *err)
{
    return parse_group(defs, group, also_allowed, what, out, err, true);
}

int settings_parse_values(const struct setting_def *defs, const config_setting_t *group,
                          const char *const *also_allowed, const char *what, void *out,
                          struct config_error *err)
{
    return parse_group(defs, group, also_allowed, what, out, err, false);
}

static int parse_group(const struct setting_def *defs, const config_setting_t *group,
                       const char *const *also_allowed, const char *what, void *out,
                       struct config_error *err, bool report_unknown)
{
    if (!what) what = "settings";
    if (group && !config_setting_is_group(group)) {
        set_err(err, group, "%s: expected a group { key = value; ... }, got %s", what,
                type_word(config_setting_type(group)));
        return -1;
    }

    /* Unknown keys first: a misspelt key explains a "missing" one. Every
     * key is checked; err is left holding the first error (the one a caller
     * that does not collect them all reports). */
    int rc = 0;
    struct config_error first;
    bool have_first = false;
#define FAILED()                                     \
    do {                                             \
        if (!have_first && err) first = *err;        \
        have_first = true;                           \
        rc = -1;                                     \
    } while (0)
    int n = group ? config_setting_length(group) : 0;
    for (int i = 0; i < n; i++) {
        const config_setting_t *s = config_setting_get_elem(group, (unsigned)i);
        const char *name = config_setting_name(s);
        if (name && !name_in(name, defs, also_allowed)) {
            rc = -1;
            if (!report_unknown) continue;
            char keys[400];
            list_keys(defs, also_allowed, keys, sizeof keys);
            const char *near = closest_key(name, defs, also_allowed);
            char hint[160] = "";
            if (near) snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
            set_err(err, s, "%s: unknown key '%s'%s; valid keys: %s", what, name, hint, keys);
            FAILED();
        }
    }

    for (size_t i = 0; defs && defs[i].name; i++) {
        const struct setting_def *d = &defs[i];
        const config_setting_t *s = group ? config_setting_get_member(group, d->name) : NULL;
        const config_setting_t *old =
            group && d->old_name ? config_setting_get_member(group, d->old_name) : NULL;
        if (old && s) {
            set_err(err, old, "%s: '%s' and '%s' are the same setting (its old and new "
                    "name): keep only '%s'", what, d->old_name, d->name, d->name);
            FAILED();
            continue;
        }
        if (old) {
            const char *file;
            int line;
            where(old, &file, &line);
            log_warn("config", NULL, "%s:%d: %s: '%s' is deprecated: it is now called '%s' "
                     "(the old name still works, for now)", file ? file : "(config)", line, what,
                     d->old_name, d->name);
            s = old;
        }
        if (s) {
            if (parse_one(d, s, out, what, err)) FAILED();
        } else if (d->required) {
            if (!misspelt(d->name, group, defs, also_allowed)) {
                char h[200];
                set_err(err, group, "%s: missing required key '%s'%s", what, d->name,
                        help_suffix(d, h, sizeof h));
                FAILED();
            }
            rc = -1;
        } else if (d->type == SETTING_GROUP) {
            char sub_what[300];
            snprintf(sub_what, sizeof sub_what, "%s: %s", what, d->name);
            if (settings_parse(d->sub, NULL, NULL, sub_what, (char *)out + d->offset, err)) FAILED();
        } else if (d->def) {
            if (apply_default(d, out, group, what, err)) FAILED();
        }
    }
#undef FAILED
    if (have_first && err) *err = first;
    return rc;
}

void settings_free(const struct setting_def *defs, void *out)
{
    if (!defs || !out) return;
    for (size_t i = 0; defs[i].name; i++) {
        char *p = (char *)out + defs[i].offset;
        if (defs[i].type == SETTING_STRING) {
            free(*(char **)p);
            *(char **)p = NULL;
        } else if (defs[i].type == SETTING_STRLIST) {
            strlist_free((struct strlist *)p);
        } else if (defs[i].type == SETTING_GROUP) {
            settings_free(defs[i].sub, p);
        }
    }
}

/* True when path names a file in $CREDENTIALS_DIRECTORY (systemd's
 * credentials: a directory only the service can read, whatever the modes of
 * the files in it). Compared after resolving both, so "credential:NAME" and
 * the full path are alike. */
static bool under_credentials_dir(const char *path)
{
    const char *dir = getenv("CREDENTIALS_DIRECTORY");
    if (!dir || !dir[0]) return false;
    char *rdir = realpath(dir, NULL);
    char *rpath = realpath(path, NULL);
    bool in = false;
    if (rdir && rpath) {
        size_t n = strlen(rdir);
        in = strncmp(rpath, rdir, n) == 0 && rpath[n] == '/' && !strchr(rpath + n + 1, '/');
    }
    free(rdir);
    free(rpath);
    return in;
}

int secret_resolve(const char *env_name, const char *file, char **out, char *msg, size_t msglen)
{
    *out = NULL;
    if (msglen) msg[0] = '\0';
    if (env_name && file) {
        snprintf(msg, msglen,
                 "both an environment variable ('%s') and a file ('%s') are given for one "
                 "secret; give only one",
                 env_name, file);
        return -1;
    }
    if (env_name) {
        const char *v = getenv(env_name);
        if (!v) {
            snprintf(msg, msglen, "environment variable '%s' is not set", env_name);
            return -1;
        }
        if (!v[0]) {
            snprintf(msg, msglen, "environment variable '%s' is empty", env_name);
            return -1;
        }
        *out = dup_str(v);
        return 0;
    }
    if (!file) return 0;

    /* O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused
     * below, like anything that is not a regular file */
    int fd = open(file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(msg, msglen, "cannot read secret file '%s': %s", file, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(msg, msglen, "cannot read secret file '%s': not a regular file", file);
        close(fd);
        return -1;
    }
    /* as ssh does with its keys: a secret others can read is no secret */
    if ((st.st_mode & S_IRWXO) && !under_credentials_dir(file)) {
        unsigned mode = (unsigned)(st.st_mode & 07777);
        snprintf(msg, msglen, "secret file '%s' is %s by others (mode %04o): chmod 600 %s (or 640)",
                 file, (st.st_mode & S_IROTH) ? "readable" : (st.st_mode & S_IWOTH) ? "writable" : "accessible",
                 mode, file);
        close(fd);
        return -1;
    }
    if (st.st_size > SECRET_FILE_MAX) {
        snprintf(msg, msglen, "secret file '%s' is %lld bytes; secret files are limited to %d KiB "
                 "(%d bytes; the secret is its first line)",
                 file, (long long)st.st_size, SECRET_FILE_MAX / 1024, SECRET_FILE_MAX);
        close(fd);
        return -1;
    }
    /* read(2) into a buffer of our own, wiped after use (stdio would leave
     * a copy in its buffer); one byte more than the cap tells a file that
     * grew since fstat */
    char *buf = oom_check(malloc(SECRET_FILE_MAX + 2));
    size_t len = 0;
    int read_errno = 0;
    while (len < SECRET_FILE_MAX + 1) {
        ssize_t r = read(fd, buf + len, SECRET_FILE_MAX + 1 - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            read_errno = errno;
            break;
        }
        if (r == 0) break;
        len += (size_t)r;
    }
    close(fd);
    if (read_errno || len > SECRET_FILE_MAX) {
        if (read_errno)
            snprintf(msg, msglen, "cannot read secret file '%s': %s", file, strerror(read_errno));
        else
            snprintf(msg, msglen, "secret file '%s' is over %d KiB; secret files are limited to %d "
                     "bytes (the secret is its first line)", file, SECRET_FILE_MAX / 1024, SECRET_FILE_MAX);
        explicit_bzero(buf, SECRET_FILE_MAX + 2);
        free(buf);
        return -1;
    }
    size_t line = 0;
    while (line < len && buf[line] != '\n') line++;
    while (line > 0 && buf[line - 1] == '\r') line--;
    if (line == 0) {
        explicit_bzero(buf, len);
        free(buf);
        snprintf(msg, msglen, "secret file '%s' is empty (the secret is its first line)", file);
        return -1;
    }
    if (memchr(buf, '\0', line)) {
        explicit_bzero(buf, len);
        free(buf);
        snprintf(msg, msglen, "secret file '%s': its first line holds a NUL byte", file);
        return -1;
    }
    *out = oom_check(malloc(line + 1));
    memcpy(*out, buf, line);
    (*out)[line] = '\0';
    explicit_bzero(buf, len);
    free(buf);
    return 0;
}

void secret_free(char *secret)
{
    if (!secret) return;
    explicit_bzero(secret, strlen(secret));
    free(secret);
}
