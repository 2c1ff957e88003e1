/* redis_probe: one thread that keeps watch over every redis_psub connection
 * of the process to a source Redis (plain TCP, no Sentinel), instead of a
 * timer and a PING in each consumer thread.
 *
 * A stopped or partitioned server sends no FIN: only an unanswered PING
 * shows it. The connections to one server (host, port, ping interval) form
 * a group. Once per interval the prober looks at the group: when any of
 * its connections read something within the interval, the server is alive
 * and nothing is sent; otherwise it writes a PING on one of them (in turn)
 * and, when neither that connection read anything nor has unread bytes
 * within the next interval, it marks every connection of the group dead
 * and shuts its socket down: each consumer's read fails and it reconnects
 * as after any lost connection. The PONG is read by the consumer (its
 * reader knows a PING answer). An idle consumer thread then wakes only for
 * the PONGs of the PINGs sent on its own connection: at 1,000 endpoints on
 * one source, about one PING per interval for the whole process instead of
 * one per endpoint (and its timer). A flow that dies alone (a middlebox)
 * is left to TCP keepalive (redis_conn_open enables it).
 *
 * The prober writes the PING itself (a 14-byte send, never blocking) on a
 * socket it holds under its lock: a consumer leaves the group before it
 * closes its connection, and writes nothing on it while it is a member. */
#ifndef BATON_REDIS_PROBE_H
#define BATON_REDIS_PROBE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct probe_group;

/* Embedded in the consumer; fd, last_read_ms and dead are set by
 * probe_join. */
struct probe_conn {
    struct probe_conn *next, *prev;
    struct probe_group *group;
    int fd;
    atomic_llong last_read_ms; /* the consumer: clock_mono_ms() after each read */
    atomic_bool dead;          /* set by the prober before it shuts fd down */
};

/* Joins the group of host:port with interval_ms (> 0); fd is the
 * subscribed connection's socket. false: out of memory or no thread (the
 * consumer keeps its own timer then). */
bool probe_join(struct probe_conn *pc, const char *host, int port, int64_t interval_ms, int fd);
/* Leaves the group: after it returns the prober never touches fd again. */
void probe_leave(struct probe_conn *pc);
/* PINGs the prober sent and groups it found dead, since the start. */
void probe_counts(uint64_t *pings, uint64_t *deaths);

#endif
