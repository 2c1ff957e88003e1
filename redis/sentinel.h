/* Redis Sentinel: finding the master of a name, and following failovers.
 *
 * Discovery: the sentinels of a struct baton_redis_opts ("host:port", tried in
 * order) are asked SENTINEL get-master-addr-by-name <master_name>; the first
 * answer wins. redis_conn_open_ex does this on every connect when
 * n_sentinels > 0, then checks with ROLE that the address is a master.
 *
 * Watching: one thread per distinct (sentinel set, master name) in the
 * process, shared by every user (refcounted), SUBSCRIBEd to +switch-master on
 * one sentinel (the next one on failure) and counting the switches of its
 * master. A user remembers the count when it connects and reconnects (which
 * rediscovers the master) when the count moved.
 *
 * redis/, bottom to top: tls <- io <- sentinel <- open; a file includes
 * only the layers below its own (tests/check_redis_layers.sh). This: sentinel, over io.
 */
#ifndef BATON_REDIS_SENTINEL_H
#define BATON_REDIS_SENTINEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "redis/io.h"

/* Asks the sentinels of o in order for the master of o->master_name. 0 with
 * host (NUL-terminated, cut to hostlen) and *port; -1 with err naming the
 * master name, each sentinel asked and why it did not answer. */
int redis_sentinel_resolve(const struct baton_redis_opts *o, char *host, size_t hostlen, int *port,
                           char *err, size_t errlen);

/* Splits "host:port" / "[v6]:port" / "host" (port 26379). false if
 * malformed (empty host, bad port). */
bool redis_sentinel_parse_addr(const char *s, char *host, size_t hostlen, int *port);

struct redis_sentinel_watch;

/* The watcher of o's sentinel set and master name, started on first use;
 * NULL when o has no sentinels. Each acquire needs one release. */
struct redis_sentinel_watch *redis_sentinel_watch_acquire(const struct baton_redis_opts *o);
/* Stops and frees the watcher with its last user. NULL-safe. */
void redis_sentinel_watch_release(struct redis_sentinel_watch *w);
/* Switches seen so far (+switch-master of this master, or a different
 * master found when the watcher re-subscribed). 0 for NULL. */
uint64_t redis_sentinel_watch_count(const struct redis_sentinel_watch *w);
/* The master's address as last known in this process ("host:port", from the
 * watcher or the last connection opened through the sentinels), "" when
 * unknown. */
void redis_sentinel_watch_addr(struct redis_sentinel_watch *w, char *buf, size_t len);
/* Records that a connection through o's sentinels reached host:port (shown
 * by redis_sentinel_watch_addr). No-op without a watcher. */
void redis_sentinel_note_master(const struct baton_redis_opts *o, const char *host, int port);

/* true for the error replies that mean "this server is no longer (or not
 * yet) the master to talk to": READONLY, MASTERDOWN, LOADING, also when a
 * script relays them ("... -READONLY ..."). */
bool redis_failover_error(const char *reply_error);

#endif
