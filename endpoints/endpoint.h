/* The endpoint interface. An endpoint consumes one source and hands every
 * message to its host (the gateway), which queues it for the sink.
 *
 * Lifecycle, driven by the gateway:
 *   create(settings, host)   parse-time objects only; no connection yet
 *   start(ep)                begin consuming on the endpoint's own thread;
 *                            for ActiveGuard endpoints this runs on promotion
 *                            and must return only once the subscription is
 *                            confirmed (0) or has failed (<0)
 *   stop(ep)                 stop consuming promptly (shut the socket down to
 *                            interrupt a blocking read); returns only once the
 *                            consumer thread has stopped. start may follow again.
 *   destroy(ep)              after stop; frees everything
 * start/stop pairs may repeat (each promotion/demotion). */
#ifndef BATON_ENDPOINT_H
#define BATON_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/envelope.h"
#include "common/message.h"
#include "common/settings.h"
#include "common/stats.h"

struct baton_locker;
struct baton_redis_opts;

enum guard_kind { GUARD_AUTO = 0, GUARD_ACTIVE, GUARD_ONCE, GUARD_NONE };
const char *guard_kind_name(enum guard_kind k);

/* What the gateway gives each endpoint. All pointers stay valid until after
 * destroy. Function pointers are thread safe. */
struct endpoint_host {
    const char *name;        /* endpoint name from its file */
    const char *type;        /* endpoint type */
    const char *owner;       /* tenant id or NULL */
    const char *key_prefix;  /* guard key prefix ("baton") */
    const char *scope;       /* guard scope: "<type>:<owner>:<name>" (owner skipped if empty) */
    enum guard_kind guard;   /* resolved guard (never GUARD_AUTO) */
    struct baton_locker *locker;   /* NULL in single-process mode */
    /* Connection options of the locker's Redis (NULL unless the locker is
     * Redis). Shared state goes through the locker (fenced_set); this is
     * only for mysql_cdc's one-shot read of a pre-locker checkpoint key. */
    const struct baton_redis_opts *locker_redis;
    /* ActiveGuard lease key (NULL unless guard == GUARD_ACTIVE). The fencing
     * epoch lives at "<lease_key>:epoch". */
    const char *lease_key;
    int64_t lease_ttl_ms;
    struct ep_stats *stats;
    void *gw; /* gateway private */

    /* Queue a message for the sink; takes ownership. Counts received. Returns
     * 0 when queued, -1 when it was dropped (not leader now, or queue full
     * with drop_oldest evicting it; counted, logged, message_finish called).
     * With the block policy it may wait for room (returns -1 if the endpoint
     * is being stopped). */
    int (*emit)(struct endpoint_host *h, struct message *m);
    /* Optional (NULL in test hosts: use emit). For an endpoint that reads
     * in batches: emit without waking the forwarder; the message goes out
     * at the next flush(h) at the latest, which the endpoint calls before it
     * blocks again (it may be delivered by this very thread inside flush,
     * while the forwarder is idle and the sink takes it at once). */
    int (*emit_deferred)(struct endpoint_host *h, struct message *m);
    void (*flush)(struct endpoint_host *h);
    /* Lease still valid right now (always true when unguarded). */
    bool (*leader_now)(const struct endpoint_host *h);
    /* Current fencing epoch (0 when unguarded). */
    uint64_t (*epoch)(const struct endpoint_host *h);
    /* The leader lost its source for longer than the lease ttl: release the
     * lease so another replica can try. Safe to call from the consumer thread. */
    void (*source_lost)(struct endpoint_host *h, const char *reason);
    /* The leader cannot go on in this term (reason: e.g. a backlog behind a
     * row the sink did not take): demote and give the lease up like
     * source_lost, so the next leader (this replica waits one ttl before
     * competing again) starts over from the source's own position. Safe
     * from the consumer thread. */
    void (*end_term)(struct endpoint_host *h, const char *reason);
    /* True once the gateway started shutting down. */
    bool (*stopping)(const struct endpoint_host *h);
    /* Optional (NULL: never): true while this replica is drained (baton
     * drain, until baton resume). An endpoint that claims work item by item
     * (schedule's OnceGuard slots) leaves the items to the other replicas. */
    bool (*draining)(const struct endpoint_host *h);

    /* OnceGuard options from the endpoint file (once_ttl_ms,
     * once_fail_open), for endpoints that keep their own OnceGuard.
     * 0 / false = the defaults (1 h, fail-closed). */
    int64_t once_ttl_ms;
    bool once_fail_open;
    /* Set by an endpoint that keeps a OnceGuard (in create), so the metrics
     * show its allowed / skipped / backend-error counters. */
    const struct baton_once_guard_stats *once_stats;
    /* Set in create by an endpoint whose source delivers again what this
     * replica did not settle (rabbitmq group: the closing connection
     * requeues it; mysql_cdc with a checkpoint: the next leader replays
     * it). Messages of an ended term are then counted as returned to the
     * source, not as dropped. */
    bool source_redelivers;

    /* failover = "replay" (warm standby): the endpoint is started on every
     * replica at once and runs until shutdown (start/stop are not tied to
     * the lease); the gateway keeps standbys' messages in a ring and only
     * the leader's are forwarded. The endpoint then sets m->fp
     * (replay_fingerprint of channel or topic and payload) and an id from
     * replay_id on every message, calls source_gap after it resubscribed,
     * and when its source stays unreachable for longer than the lease ttl
     * while leader_now(), calls source_lost and keeps retrying. */
    bool replay;
    void (*source_gap)(struct endpoint_host *h);
    /* replay: true while this replica forwards. An endpoint with a
     * replay_render op emits a raw record (message.raw) while it is false
     * (a standby then skips building the envelope); a raw record that
     * arrives just after a promotion is rendered by the gateway. */
    bool (*replay_live)(const struct endpoint_host *h);
    /* The server the endpoint is connected to now (one of its hosts /
     * servers list, e.g. "127.0.0.1:3307"), shown in /status as "source";
     * NULL or "" when it is not connected. Any thread. */
    void (*set_source)(struct endpoint_host *h, const char *where);
};

struct endpoint_ops {
    const char *type;
    const struct setting_def *settings; /* type-specific settings table */
    size_t settings_size;               /* sizeof the struct the table fills */
    /* The default guard for guard = "auto". settings may be consulted (mqtt:
     * none with shared_group, active otherwise). */
    enum guard_kind (*auto_guard)(const void *settings);
    /* Optional cross-field validation after the table checks. guard is the
     * resolved guard; force tells whether "force_guard = true" was given.
     * Return 0 or -1 with msg filled (the loader adds file and line). */
    int (*validate)(const void *settings, enum guard_kind guard, bool force, char *msg, size_t msglen);
    /* Optional validation that needs the file itself (the line of a nested
     * setting, files named relative to base_dir, the endpoint file's
     * directory, which it may rewrite in settings). 0, or -1 with err. */
    int (*check_file)(void *settings, const config_setting_t *root, const char *base_dir,
                      const char *what, struct config_error *err);
    /* NULL: the type cannot do failover = "replay". Otherwise 0 when these
     * settings can (a broadcast subscription every replica may hold), or -1
     * with msg saying why not (the loader adds file and line). */
    int (*replay_check)(const void *settings, char *msg, size_t msglen);
    /* Optional, with replay: renders a raw record the endpoint emitted as
     * standby into its envelope, in term epoch (replayed: with
     * "replayed":true), keeping fp and received_mono_us. scratch is the
     * caller's reusable envelope. Any thread (serialised by the caller);
     * NULL when the record is malformed. */
    struct message *(*replay_render)(void *ep, struct envelope *scratch,
                                     const struct message *raw, uint64_t epoch, bool replayed);
    /* settings stay owned by the gateway and outlive the endpoint. */
    void *(*create)(const void *settings, struct endpoint_host *host, char *err, size_t errlen);
    int (*start)(void *ep);
    void (*stop)(void *ep);
    void (*destroy)(void *ep);
};

/* The registry: every endpoint type that exists. */
const struct endpoint_ops *endpoint_lookup(const char *type);
/* NULL-terminated list, for --help and docs. */
extern const struct endpoint_ops *const endpoint_registry[];

#endif
