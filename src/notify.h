/* systemd service notifications (sd_notify(3), libsystemd) for Type=notify:
 * READY=1 once baton serves, STOPPING=1 when the shutdown begins, STATUS=
 * lines for `systemctl status`, WATCHDOG=1 pings when WatchdogSec= is set.
 *
 * Every call is a no-op when NOTIFY_SOCKET is unset (not started by systemd,
 * or a unit without Type=notify / WatchdogSec=), so baton runs the same way
 * from a shell, a container or a test. Failures to notify are logged (once)
 * and otherwise ignored: they never stop the gateway.
 *
 * Called from the main thread only. */
#ifndef BATON_NOTIFY_H
#define BATON_NOTIFY_H

#include <stdint.h>

/* STATUS=status alone. */
void notify_status(const char *status);
/* READY=1 and STATUS=status (status may be NULL). */
void notify_ready(const char *status);
/* STOPPING=1 and STATUS=status (status may be NULL). */
void notify_stopping(const char *status);
/* Arms the watchdog if the service manager asked for it (WATCHDOG_USEC, and
 * WATCHDOG_PID naming this process when set: sd_watchdog_enabled(3)).
 * Returns the ping period in ms (half the watchdog timeout), or 0 when no
 * pings are wanted. The caller pings from its own loop: see main.c for what
 * a ping vouches for. */
int64_t notify_watchdog_start(void);
/* WATCHDOG=1; a no-op unless armed (and not stopped). */
void notify_watchdog_ping(void);
/* No pings after this (the shutdown began; systemd stops enforcing the
 * watchdog once the unit is stopping, TimeoutStopSec= bounds the drain). */
void notify_watchdog_stop(void);

#endif
