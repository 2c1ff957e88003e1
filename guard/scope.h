/* Scope and key building for guards. Segments are joined with ':'; empty and
 * NULL segments are skipped, so an absent owner changes nothing.
 *   guard_scope(buf, n, "schedule", owner, "nightly", NULL) -> "schedule:nightly"
 *   guard_key(buf, n, "baton", "once", scope, "1733148000")
 *       -> "baton:once:schedule:nightly:1733148000"
 * Both return the length written, or -1 if it did not fit (buf then holds "").*/
#ifndef BATON_SCOPE_H
#define BATON_SCOPE_H

#include <stdbool.h>
#include <stddef.h>

#define GUARD_DEFAULT_PREFIX "baton"
#define GUARD_KEY_MAX 512

/* Variadic list of const char * segments terminated by NULL (use the macro). */
int guard_scope_join(char *buf, size_t len, const char *first, ...);
/* The same over an array of n segments, where NULL entries are skipped rather
 * than ending the list. The macro uses it so that an absent (NULL) segment in
 * the middle, such as an unset owner, never cuts the scope short. */
int guard_scope_join_n(char *buf, size_t len, const char *const *segs, size_t n);
#define guard_scope(buf, len, ...)                                                 \
    guard_scope_join_n(buf, len, (const char *const[]){__VA_ARGS__},               \
                       sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))
/* <prefix>:<kind>:<scope>[:<key>] (key may be NULL). prefix NULL = "baton". */
int guard_key(char *buf, size_t len, const char *prefix, const char *kind,
              const char *scope, const char *key);
/* An ActiveGuard's lease key: "<prefix>:active:<scope>", or with hash_tag
 * "<prefix>:active:{<scope>}", so that it and the keys kept beside it
 * ("<key>:epoch", ":holder", ":mark", ":cdc") share one Redis Cluster slot
 * (the slot hashes the first {...}). */
int guard_lease_key(char *buf, size_t len, const char *prefix, const char *scope, bool hash_tag);

#endif
