/* libbaton-guard: how the guards name their keys, for programs that read or
 * show a lease without holding a guard (status pages, `baton status`).
 * Segments are joined with ':'; empty and NULL segments are skipped, so an
 * absent owner changes nothing:
 *   baton_scope(buf, n, "schedule", owner, "nightly")   -> "schedule:nightly"
 *   baton_key(buf, n, "baton", "once", scope, "1733148000")
 *       -> "baton:once:schedule:nightly:1733148000"
 *   baton_lease_key(buf, n, "baton", scope, false)      -> "baton:active:<scope>"
 * Each returns the length written, or -1 if it did not fit (buf then holds
 * ""). */
#ifndef BATON_PUBLIC_SCOPE_H
#define BATON_PUBLIC_SCOPE_H

#include "baton/api.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The first segment of every key when no prefix is given. */
#define BATON_DEFAULT_PREFIX "baton"
/* The guards build their scopes and keys within this many bytes (NUL
 * included); at most BATON_KEY_MAX. */
#define BATON_GUARD_KEY_MAX 512

/* Variadic list of const char * segments terminated by NULL. */
BATON_API int baton_scope_join(char *buf, size_t len, const char *first, ...);
/* The same over an array of n segments, where NULL entries are skipped rather
 * than ending the list. The macro uses it so that an absent (NULL) segment in
 * the middle, such as an unset owner, never cuts the scope short. */
BATON_API int baton_scope_join_n(char *buf, size_t len, const char *const *segs, size_t n);
#define baton_scope(buf, len, ...)                                                 \
    baton_scope_join_n(buf, len, (const char *const[]){__VA_ARGS__},               \
                       sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))
/* <prefix>:<kind>:<scope>[:<key>] (key may be NULL). prefix NULL or "" =
 * BATON_DEFAULT_PREFIX. */
BATON_API int baton_key(char *buf, size_t len, const char *prefix, const char *kind,
                        const char *scope, const char *key);
/* An ActiveGuard's lease key (baton_active_guard_key): "<prefix>:active:<scope>",
 * or with hash_tag "<prefix>:active:{<scope>}", so that it and the keys kept
 * beside it ("<key>:epoch", ":holder", fenced shared state) share one Redis
 * Cluster slot (the slot hashes the first {...}). */
BATON_API int baton_lease_key(char *buf, size_t len, const char *prefix, const char *scope,
                              bool hash_tag);

#ifdef __cplusplus
}
#endif

#endif
