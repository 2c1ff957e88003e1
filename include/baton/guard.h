/* libbaton-guard: single-active consumption and once-per-slot execution for
 * replicated services, on a Redis, etcd or PostgreSQL lease. One include for the whole
 * public API; guard/README.md is the reference.
 *
 *   #include <baton/guard.h>      pkg-config --cflags --libs baton-guard
 */
#ifndef BATON_PUBLIC_GUARD_H
#define BATON_PUBLIC_GUARD_H

#define BATON_GUARD_VERSION_MAJOR 1
/* 1: baton_active_guard_step_down, _resume, _hold_left_ms;
 * 2: the PostgreSQL locker (baton/pg.h), baton_active_guard_term_token */
#define BATON_GUARD_VERSION_MINOR 2

#include "baton/active_guard.h"
#include "baton/etcd.h"
#include "baton/locker.h"
#include "baton/log.h"
#include "baton/once_guard.h"
#include "baton/pg.h"
#include "baton/redis.h"
#include "baton/scope.h"

#endif
