/* PLACEHOLDER: replaced by the real mysql_cdc endpoint. */
#include "endpoints/endpoint.h"

static const struct setting_def defs[] = { SETTINGS_END };
static enum guard_kind auto_guard(const void *s) { (void)s; return GUARD_ACTIVE; }
static void *create(const void *s, struct endpoint_host *h, char *err, size_t n)
{
    (void)s; (void)h;
    if (n) err[0] = 0;
    return 0;
}
static int start(void *ep) { (void)ep; return -1; }
static void stop(void *ep) { (void)ep; }
static void destroy(void *ep) { (void)ep; }
const struct endpoint_ops ep_mysql_cdc_ops = {
    .type = "mysql_cdc", .settings = defs, .settings_size = 1, .auto_guard = auto_guard,
    .create = create, .start = start, .stop = stop, .destroy = destroy,
};
