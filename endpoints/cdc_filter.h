/* Table and operation filters of the mysql_cdc endpoint.
 *
 * Patterns name "db.table"; each part is a shell-style glob (fnmatch: '*',
 * '?', '[...]'), so "shop.*", "*.orders" and "shop.order_?" all work. A row
 * event passes when no include pattern is given or one matches, and no
 * exclude pattern matches. DDL (which names no table reliably) passes when its
 * database could hold a passing table: some include pattern's db part matches
 * (or there are none) and no exclude pattern is "<db glob>.*" matching it. */
#ifndef BATON_CDC_FILTER_H
#define BATON_CDC_FILTER_H

#include <stdbool.h>
#include <stddef.h>

#include "endpoints/cdc_decode.h"
#include "common/settings.h"

struct cdc_filter {
    struct strlist include; /* deep copies */
    struct strlist exclude;
    unsigned ops_mask;      /* 1 << enum cdc_op */
};

/* Validates and copies the patterns and ops ("insert", "update", "delete";
 * an empty list means all three). Returns 0 or -1 with msg naming the bad
 * entry. */
int cdc_filter_init(struct cdc_filter *f, const struct strlist *include,
                    const struct strlist *exclude, const struct strlist *ops, char *msg,
                    size_t msglen);
void cdc_filter_free(struct cdc_filter *f);
bool cdc_filter_table(const struct cdc_filter *f, const char *db, const char *table);
bool cdc_filter_db(const struct cdc_filter *f, const char *db);
bool cdc_filter_op(const struct cdc_filter *f, enum cdc_op op);

#endif
