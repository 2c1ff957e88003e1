/* Preferred leaders (main file: priority, prefer_after_ms; issue 42).
 *
 * A replica of priority p > 0 that has been a ready standby of an endpoint
 * for prefer_after_ms (hysteresis: one that keeps restarting never gets
 * there) writes a marker "<p> <epoch>" beside the lease, fenced by the
 * current epoch (baton_locker_fenced_set, ttl PREFER_TTL_MS, refreshed each
 * round). The leader of that epoch, of lower priority, once it has seen the
 * marker for ttl + 2 rounds (every standby has seen it and made an attempt
 * since, so each waits as below), steps down: the
 * graceful path of baton_active_guard_step_down (drain under the lease,
 * replay mark, release, announcement), then holds back 2 x ttl. Standbys of
 * lower priority that see the marker wait one ttl more before each attempt,
 * so the preferred replica takes the released lease. Among replicas of
 * equal priority nothing changes (leader balancing).
 *
 * Run by the observer thread once a round (src/status_pages.c), never on a
 * lease thread; its calls go on the locker's side connection (never delay
 * a renewal). At most PREFER_PER_ROUND endpoints are looked at a round,
 * round robin: one marker read (and, for a waiting preferred standby, one
 * inspect and one write) each. */
#ifndef BATON_PREFER_H
#define BATON_PREFER_H

#include <stdbool.h>

struct gateway;

/* ready: the replica's /readyz would say ready (locker and sinks up). */
void prefer_round(struct gateway *gw, bool ready);

#endif
