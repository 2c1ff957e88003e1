/* systemd notifications: thin wrappers over sd_notify(3) (see notify.h). */
#include "src/notify.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "base/util.h"
#include "common/log.h"

static int64_t watchdog_period_ms; /* 0: no pings (not armed, or stopped) */
static struct ratelimit ping_fail_rl;

static bool notify_socket_set(void)
{
    const char *s = getenv("NOTIFY_SOCKET");
    return s && *s;
}

/* Sends state (newline-separated assignments). 0 from sd_notify means no
 * socket: nothing to report. */
static int send_state(const char *state)
{
    int rc = sd_notify(0, state);
    return rc < 0 ? rc : 0;
}

/* "HEAD\nSTATUS=status" (head or status may be NULL), the status on one line:
 * a newline would end the assignment and start a bogus one. */
static void send_with_status(const char *what, const char *head, const char *status)
{
    if (!notify_socket_set()) return;
    char line[900] = "";
    if (status) {
        snprintf(line, sizeof line, "%s", status);
        for (char *p = line; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
    }
    char buf[1024];
    snprintf(buf, sizeof buf, "%s%s%s%s", head ? head : "", head && status ? "\n" : "", status ? "STATUS=" : "",
             line);
    int rc = send_state(buf);
    if (rc < 0)
        log_warn("notify", NULL, "cannot send %s to the service manager (NOTIFY_SOCKET %s): %s", what,
                 getenv("NOTIFY_SOCKET"), strerror(-rc));
    else
        log_debug("notify", NULL, "sent %s", what);
}

void notify_status(const char *status)
{
    send_with_status("STATUS=", NULL, status);
}

void notify_ready(const char *status)
{
    send_with_status("READY=1", "READY=1", status);
}

void notify_stopping(const char *status)
{
    send_with_status("STOPPING=1", "STOPPING=1", status);
}

int64_t notify_watchdog_start(void)
{
    watchdog_period_ms = 0;
    if (!notify_socket_set()) return 0; /* no one to ping */
    uint64_t usec = 0;
    int r = sd_watchdog_enabled(0, &usec);
    if (r < 0) {
        log_warn("notify", NULL, "WATCHDOG_USEC/WATCHDOG_PID: %s: no watchdog pings", strerror(-r));
        return 0;
    }
    if (r == 0 || usec == 0) return 0; /* not asked, or asked of another pid */
    int64_t ms = (int64_t)(usec / 2000);
    watchdog_period_ms = ms > 0 ? ms : 1;
    log_info("notify", NULL, "systemd watchdog %llu ms: pinging every %lld ms from the main loop",
             (unsigned long long)(usec / 1000), (long long)watchdog_period_ms);
    return watchdog_period_ms;
}

void notify_watchdog_ping(void)
{
    if (!watchdog_period_ms) return;
    int rc = send_state("WATCHDOG=1");
    long long suppressed = 0;
    if (rc < 0 && ratelimit_ok(&ping_fail_rl, 60000, &suppressed))
        log_warn("notify", NULL, "cannot send WATCHDOG=1 (NOTIFY_SOCKET %s): %s (%lld more failures in the "
                 "last minute not logged)", getenv("NOTIFY_SOCKET"), strerror(-rc), suppressed);
}

void notify_watchdog_stop(void)
{
    watchdog_period_ms = 0;
}
