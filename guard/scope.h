/* Scope and key building for guards. Segments are joined with ':'; empty and
 * NULL segments are skipped, so an absent owner changes nothing.
 *   guard_scope(buf, n, "schedule", owner, "nightly", NULL) -> "schedule:nightly"
 *   guard_key(buf, n, "baton", "once", scope, "1733148000")
 *       -> "baton:once:schedule:nightly:1733148000"
 * Both return the length written, or -1 if it did not fit (buf then holds "").*/
#ifndef BATON_SCOPE_H
#define BATON_SCOPE_H

#include <stddef.h>

#define GUARD_DEFAULT_PREFIX "baton"
#define GUARD_KEY_MAX 512

/* Variadic list of const char * segments terminated by NULL (use the macro). */
int guard_scope_join(char *buf, size_t len, const char *first, ...);
#define guard_scope(buf, len, ...) guard_scope_join(buf, len, __VA_ARGS__, (const char *)0)
/* <prefix>:<kind>:<scope>[:<key>] (key may be NULL). prefix NULL = "baton". */
int guard_key(char *buf, size_t len, const char *prefix, const char *kind,
              const char *scope, const char *key);

#endif
