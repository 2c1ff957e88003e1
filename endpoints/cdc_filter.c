/* Table and operation filters of the mysql_cdc endpoint. See cdc_filter.h. */
#include "endpoints/cdc_filter.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

static int copy_patterns(struct strlist *dst, const struct strlist *src, const char *what,
                         char *msg, size_t msglen)
{
    dst->n = 0;
    dst->v = NULL;
    if (!src || src->n == 0) return 0;
    dst->v = xcalloc(src->n, sizeof *dst->v);
    for (size_t i = 0; i < src->n; i++) {
        const char *p = src->v[i];
        const char *dot = p ? strchr(p, '.') : NULL;
        if (!p || !dot || dot == p || !dot[1] || strchr(dot + 1, '.')) {
            snprintf(msg, msglen, "%s[%zu] \"%s\": expected \"db.table\" (globs allowed, e.g. \"shop.*\")",
                     what, i, p ? p : "");
            return -1;
        }
        dst->v[dst->n++] = xstrdup(p);
    }
    return 0;
}

int cdc_filter_init(struct cdc_filter *f, const struct strlist *include,
                    const struct strlist *exclude, const struct strlist *ops, char *msg,
                    size_t msglen)
{
    memset(f, 0, sizeof *f);
    if (copy_patterns(&f->include, include, "tables", msg, msglen) ||
        copy_patterns(&f->exclude, exclude, "exclude_tables", msg, msglen)) {
        cdc_filter_free(f);
        return -1;
    }
    if (!ops || ops->n == 0) {
        f->ops_mask = 1u << CDC_OP_INSERT | 1u << CDC_OP_UPDATE | 1u << CDC_OP_DELETE;
        return 0;
    }
    for (size_t i = 0; i < ops->n; i++) {
        const char *o = ops->v[i] ? ops->v[i] : "";
        if (strcmp(o, "insert") == 0) f->ops_mask |= 1u << CDC_OP_INSERT;
        else if (strcmp(o, "update") == 0) f->ops_mask |= 1u << CDC_OP_UPDATE;
        else if (strcmp(o, "delete") == 0) f->ops_mask |= 1u << CDC_OP_DELETE;
        else {
            snprintf(msg, msglen, "ops[%zu] \"%s\": expected insert, update or delete", i, o);
            cdc_filter_free(f);
            return -1;
        }
    }
    return 0;
}

void cdc_filter_free(struct cdc_filter *f)
{
    strlist_free(&f->include);
    strlist_free(&f->exclude);
    f->ops_mask = 0;
}

/* Matches "db.table" against a pattern "dbglob.tableglob" part by part, so a
 * '*' never spans the dot. */
static bool match(const char *pattern, const char *db, const char *table)
{
    const char *dot = strchr(pattern, '.');
    char dbpat[256];
    size_t n = (size_t)(dot - pattern);
    if (n >= sizeof dbpat) return false;
    memcpy(dbpat, pattern, n);
    dbpat[n] = '\0';
    if (fnmatch(dbpat, db, 0) != 0) return false;
    return table == NULL || fnmatch(dot + 1, table, 0) == 0;
}

bool cdc_filter_table(const struct cdc_filter *f, const char *db, const char *table)
{
    bool ok = f->include.n == 0;
    for (size_t i = 0; !ok && i < f->include.n; i++) ok = match(f->include.v[i], db, table);
    for (size_t i = 0; ok && i < f->exclude.n; i++)
        if (match(f->exclude.v[i], db, table)) ok = false;
    return ok;
}

bool cdc_filter_db(const struct cdc_filter *f, const char *db)
{
    bool ok = f->include.n == 0;
    for (size_t i = 0; !ok && i < f->include.n; i++) ok = match(f->include.v[i], db, NULL);
    for (size_t i = 0; ok && i < f->exclude.n; i++) {
        const char *dot = strchr(f->exclude.v[i], '.');
        if (strcmp(dot + 1, "*") == 0 && match(f->exclude.v[i], db, NULL)) ok = false;
    }
    return ok;
}

bool cdc_filter_op(const struct cdc_filter *f, enum cdc_op op)
{
    if (op == CDC_OP_DDL) return true;
    return (f->ops_mask >> op) & 1;
}
