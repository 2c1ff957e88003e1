/* What the HTTP pages show: /metrics (Prometheus text), /status (JSON) and
 * /readyz, and the observer thread that refreshes what of them needs the
 * backend (the locker probe, the holders of the leases, the sinks'
 * readiness), so the listener never waits for Redis or a sink. Split out of
 * src/gateway.c; the state it reads is in src/gateway_private.h. */
#include "base/util.h"
#include "src/gateway_private.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "baton/active_guard.h"
#include "baton/locker.h"
#include "baton/once_guard.h"
#include "baton/scope.h"
#include "common/log.h"
#include "common/redact.h"
#include "common/util.h"
#include "src/prefer.h"
#include "src/queue.h"
#include "src/warm.h"

/* ---- introspection ------------------------------------------------------ */

/* One round trip to the locker backend on its side connection (never the
 * lease connection). 0 when it answered (or there is no locker). */
static int gateway_locker_probe(struct gateway *gw, char *reason, size_t len)
{
    if (!gw->locker) return 0;
    char err[BATON_LOCKER_ERR_MAX] = "";
    int rc = baton_locker_ping(gw->locker, err);
    if (rc == BATON_LOCKER_UNSUPPORTED) { /* a round trip all the same */
        char key[BATON_GUARD_KEY_MAX];
        baton_key(key, sizeof key, gw->cfg->key_prefix, "probe", util_hostname(), NULL);
        rc = baton_locker_unlock(gw->locker, key, "probe", err);
    }
    if (rc == BATON_LOCKER_ERR) {
        if (reason) snprintf(reason, len, "locker unreachable: %s", err);
        return -1;
    }
    return 0;
}

/* One refresh of what the HTTP pages show: the locker probe, the holders of
 * the leases, the sinks' readiness. Runs on the observer thread only. */

/* The holder of each guarded endpoint's lease, for /status, in one batch
 * (baton_locker_holders: redis pipelines them, a round trip per 64 endpoints).
 * An endpoint this replica leads now is not asked about (/status names this
 * replica then, render_status): a leader of all its endpoints sends nothing.
 * The others are read HOLDERS_PER_ROUND at a time, round robin from where the
 * last round stopped, so a replica's status traffic stays bounded as its
 * endpoints grow: at 1,000 standby endpoints each holder is at most 8 rounds
 * old, where reading all of them every round was 1,000 GETs a second per
 * replica, most of an idle replica's CPU at that scale (bench/bench_scale). */
#define HOLDERS_PER_ROUND 128
static void observe_holders(struct gateway *gw, bool up)
{
    if (!baton_locker_has_holder(gw->locker) || gw->n_eps == 0) return;
    const char *keys[HOLDERS_PER_ROUND];
    char who[HOLDERS_PER_ROUND][160];
    char *bufs[HOLDERS_PER_ROUND];
    int rcs[HOLDERS_PER_ROUND];
    size_t idx[HOLDERS_PER_ROUND];
    size_t n = 0, seen = 0;
    pthread_mutex_lock(&gw->obs.mu); /* the scan only reads lock-free lease state */
    for (; seen < gw->n_eps && n < HOLDERS_PER_ROUND; seen++) {
        size_t i = (gw->obs_cursor + seen) % gw->n_eps;
        const struct gw_endpoint *e = &gw->eps[i];
        if (!e->guard) continue;
        if (baton_active_guard_is_leader_now(e->guard)) {
            /* what was observed before it led is stale now: unknown until
             * it is read again after a demotion */
            gw->obs.holder_known[i] = false;
            continue;
        }
        keys[n] = e->lease_key;
        bufs[n] = who[n];
        idx[n++] = i;
    }
    pthread_mutex_unlock(&gw->obs.mu);
    gw->obs_cursor = (gw->obs_cursor + seen) % gw->n_eps;
    if (n == 0) return;
    if (up)
        baton_locker_holders(gw->locker, n, keys, bufs, sizeof who[0], rcs);
    else
        for (size_t j = 0; j < n; j++) rcs[j] = BATON_LOCKER_ERR;
    pthread_mutex_lock(&gw->obs.mu);
    for (size_t j = 0; j < n; j++) {
        size_t i = idx[j];
        gw->obs.holder_known[i] = rcs[j] == BATON_LOCKER_OK;
        snprintf(gw->obs.holder[i], sizeof gw->obs.holder[i], "%.159s", rcs[j] == BATON_LOCKER_OK ? who[j] : "");
    }
    pthread_mutex_unlock(&gw->obs.mu);
}

static void observe_once(struct gateway *gw)
{
    char reason[320] = "";
    bool up = gateway_locker_probe(gw, reason, sizeof reason) == 0;
    /* every instance of one configured sink goes to the same place (one
     * fd, one URL): checked once per round, not once per endpoint (at 1,000
     * endpoints on one stdout sink that was 1,000 polls a second) */
    const void *checked[16];
    size_t n_checked = 0;
    for (size_t i = 0; i < gw->n_eps && !reason[0]; i++) {
        const struct gw_endpoint *e = &gw->eps[i];
        if (!e->cfg->sink->ops->check) continue;
        bool dup = false;
        for (size_t j = 0; j < n_checked && !dup; j++) dup = checked[j] == e->cfg->sink;
        if (dup) continue;
        if (n_checked < sizeof checked / sizeof checked[0]) checked[n_checked++] = e->cfg->sink;
        char msg[256] = "";
        if (e->cfg->sink->ops->check(e->sink, msg, sizeof msg) != 0)
            snprintf(reason, sizeof reason, "sink '%s' of endpoint '%s' unreachable: %s",
                     e->cfg->sink->name, e->cfg->name, msg);
    }
    /* nothing enabled: up, but ready for nothing (the start log warned) */
    if (gw->n_eps == 0 && !reason[0])
        snprintf(reason, sizeof reason, "no endpoint is enabled: baton does nothing (enable one in %.200s)",
                 gw->cfg->endpoints_dir ? gw->cfg->endpoints_dir : "the endpoints directory");
    observe_holders(gw, up);
    prefer_round(gw, up && !reason[0]);
    pthread_mutex_lock(&gw->obs.mu);
    /* said once per change: a probe refused (an ACL without +ping) or failing
     * shows in the log, not only on /readyz and baton_locker_up */
    if (gw->locker && gw->obs.valid && up != gw->obs.locker_up) {
        if (up)
            log_info("gateway", NULL, "locker probe answers again");
        else
            log_warn("gateway", NULL, "locker probe failed: %s (/readyz says 503 until it answers)",
                     reason);
    } else if (gw->locker && !gw->obs.valid && !up) {
        log_warn("gateway", NULL, "locker probe failed: %s (/readyz says 503 until it answers)", reason);
    }
    gw->obs.locker_up = up;
    snprintf(gw->obs.ready_reason, sizeof gw->obs.ready_reason, "%s", reason);
    gw->obs.valid = true;
    pthread_mutex_unlock(&gw->obs.mu);
}

/* One round every OBSERVE_MS, asleep in between (a polled sleep woke the
 * thread 50 times a second: a third of an idle replica's wake-ups). */
void *status_pages_observer_main(void *arg)
{
    struct gateway *gw = arg;
    pthread_mutex_lock(&gw->obs_wait_mu);
    while (!atomic_load(&gw->obs_stop)) {
        pthread_mutex_unlock(&gw->obs_wait_mu);
        observe_once(gw);
        pthread_mutex_lock(&gw->obs_wait_mu);
        if (atomic_load(&gw->obs_stop)) break;
        struct timespec ts = clock_deadline(CLOCK_MONOTONIC, OBSERVE_MS);
        pthread_cond_timedwait(&gw->obs_wait_cv, &gw->obs_wait_mu, &ts);
    }
    pthread_mutex_unlock(&gw->obs_wait_mu);
    return NULL;
}

void status_pages_obs_stop_now(struct gateway *gw)
{
    pthread_mutex_lock(&gw->obs_wait_mu);
    atomic_store(&gw->obs_stop, true);
    pthread_cond_broadcast(&gw->obs_wait_cv);
    pthread_mutex_unlock(&gw->obs_wait_mu);
}

/* /status "role": what this replica does with the endpoint, in the words
 * `baton status` uses (src/status_cmd.c; docs/operations.md, "Status words"):
 *   leader         ActiveGuard: holds the lease now, consumes and forwards
 *   standby        ActiveGuard: does not hold it, ready to take over
 *   once-per-slot  OnceGuard: runs the clock, fires the slots it claims first
 *   every-replica  guard "none": consumes, like every other replica
 *   single-process no locker configured: the guards are off, this process
 *                  runs the endpoint as if it were alone */
static const char *role_name(const struct gw_endpoint *e)
{
    if (!e->gw->locker) return "single-process";
    if (!e->guard) return e->cfg->guard == GUARD_ONCE ? "once-per-slot" : "every-replica";
    const struct baton_active_guard_stats *s = baton_active_guard_stats(e->guard);
    switch (atomic_load(&s->role)) {
    case BATON_ROLE_LEADER: return baton_active_guard_is_leader_now(e->guard) ? "leader" : "standby";
    case BATON_ROLE_SINGLE: return "single-process";
    default: return "standby";
    }
}

static void metric_head(struct jbuf *b, const char *name, const char *type, const char *help)
{
    char line[512];
    int n = snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    jbuf_raw(b, line, (size_t)n);
}

/* Label values: endpoint names are validated identifiers, but escape anyway. */
static void label_value(struct jbuf *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"') jbuf_char(b, '\\');
        if (*v == '\n') {
            jbuf_rawz(b, "\\n");
            continue;
        }
        jbuf_char(b, *v);
    }
}

static void metric_ep(struct jbuf *b, const char *name, const struct gw_endpoint *e, const char *extra_label,
                      unsigned long long v)
{
    jbuf_rawz(b, name);
    jbuf_rawz(b, "{endpoint=\"");
    label_value(b, e->cfg->name);
    jbuf_rawz(b, "\"");
    if (extra_label) {
        jbuf_char(b, ',');
        jbuf_rawz(b, extra_label);
    }
    jbuf_rawz(b, "} ");
    jbuf_u64(b, v);
    jbuf_char(b, '\n');
}

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

/* What a concurrent sink shows of its requests; false when it has none. */
static bool endpoint_flight(const struct gw_endpoint *e, struct sink_flight *f)
{
    const struct sink_ops *ops = e->cfg->sink->ops;
    if (!ops->async) return false;
    ops->async->flight(e->sink, f);
    if (!e->concurrent) f->limit = 1; /* ordering = "strict": one at a time */
    return true;
}

/* Requests in flight, their limit and the receiver's round-trip time, per
 * endpoint whose sink has requests in flight together. */
static void render_flight_metrics(const struct gateway *gw, struct jbuf *b)
{
    static const char *const names[] = {"baton_sink_in_flight", "baton_sink_concurrency_limit",
                                        "baton_sink_rtt_seconds"};
    static const char *const helps[] = {
        "Sink requests in flight (retry waits included).",
        "How many sink requests may be in flight now (fixed max_in_flight, or adapted: auto).",
        "Smoothed round-trip time of the sink's answered requests."};
    for (size_t m = 0; m < 3; m++) {
        metric_head(b, names[m], "gauge", helps[m]);
        for (size_t i = 0; i < gw->n_eps; i++) {
            struct sink_flight f;
            if (!endpoint_flight(&gw->eps[i], &f)) continue;
            if (m < 2) {
                metric_ep(b, names[m], &gw->eps[i], NULL, m == 0 ? f.in_flight : f.limit);
                continue;
            }
            jbuf_rawz(b, names[m]);
            jbuf_rawz(b, "{endpoint=\"");
            label_value(b, gw->eps[i].cfg->name);
            char num[32];
            snprintf(num, sizeof num, "\"} %.6f\n", f.rtt_ms / 1000.0);
            jbuf_rawz(b, num);
        }
    }
}

static int64_t ring_age_ms(const struct warm *w)
{
    int64_t oldest = LOAD(warm_stats(w)->ring_oldest_wall_ms);
    int64_t age = oldest ? clock_wall_ms() - oldest : 0;
    return age > 0 ? age : 0;
}

/* failover = "replay" endpoints only. */
static void render_replay_metrics(struct gateway *gw, struct jbuf *b)
{
    struct {
        const char *name, *type, *help;
        size_t off;
    } simple[] = {
        {"baton_replay_buffered_total", "counter", "Messages received as standby and kept in the ring.",
         offsetof(struct warm_stats, buffered)},
        {"baton_replayed_total", "counter",
         "Messages replayed from the ring at promotion (marked \"replayed\": true).",
         offsetof(struct warm_stats, replayed)},
        {"baton_replay_ambiguous_total", "counter",
         "Promotions whose mark matched several places in the ring (chosen by receive time).",
         offsetof(struct warm_stats, ambiguous)},
        {"baton_replay_ring_messages", "gauge", "Messages in the replay ring.",
         offsetof(struct warm_stats, ring_count)},
        {"baton_replay_ring_bytes", "gauge", "Bytes held by the replay ring.",
         offsetof(struct warm_stats, ring_bytes)},
        {"baton_replay_marks_written_total", "counter", "Replay marks written by this replica as leader.",
         offsetof(struct warm_stats, marks_written)},
        {"baton_replay_mark_errors_total", "counter", "Replay marks that could not be written or read.",
         offsetof(struct warm_stats, mark_errors)},
    };
    bool any = false;
    for (size_t i = 0; i < gw->n_eps; i++) any = any || gw->eps[i].warm;
    if (!any) return;
    for (size_t c = 0; c < sizeof simple / sizeof simple[0]; c++) {
        metric_head(b, simple[c].name, simple[c].type, simple[c].help);
        for (size_t i = 0; i < gw->n_eps; i++) {
            if (!gw->eps[i].warm) continue;
            const char *base = (const char *)warm_stats(gw->eps[i].warm);
            metric_ep(b, simple[c].name, &gw->eps[i], NULL,
                      atomic_load((const atomic_ullong *)(base + simple[c].off)));
        }
    }
    metric_head(b, "baton_replay_unaligned_total", "counter",
                "Promotions that could not align on the previous leader's mark and delivered the "
                "whole ring (messages may be lost or repeated), by reason.");
    for (size_t i = 0; i < gw->n_eps; i++) {
        if (!gw->eps[i].warm) continue;
        const struct warm_stats *ws = warm_stats(gw->eps[i].warm);
        for (int r = 0; r < 4; r++) {
            char label[48];
            snprintf(label, sizeof label, "reason=\"%s\"", warm_unaligned_names[r]);
            metric_ep(b, "baton_replay_unaligned_total", &gw->eps[i], label, LOAD(ws->unaligned[r]));
        }
    }
    metric_head(b, "baton_replay_evicted_total", "counter", "Messages evicted from the replay ring, by bound.");
    for (size_t i = 0; i < gw->n_eps; i++) {
        if (!gw->eps[i].warm) continue;
        const struct warm_stats *ws = warm_stats(gw->eps[i].warm);
        metric_ep(b, "baton_replay_evicted_total", &gw->eps[i], "bound=\"window_ms\"", LOAD(ws->evicted_window));
        metric_ep(b, "baton_replay_evicted_total", &gw->eps[i], "bound=\"max_bytes\"", LOAD(ws->evicted_overflow));
    }
    metric_head(b, "baton_replay_ring_age_ms", "gauge", "Age of the oldest message in the replay ring (ms).");
    for (size_t i = 0; i < gw->n_eps; i++)
        if (gw->eps[i].warm)
            metric_ep(b, "baton_replay_ring_age_ms", &gw->eps[i], NULL, (unsigned long long)ring_age_ms(gw->eps[i].warm));
    metric_head(b, "baton_replay_mark_lag_ms", "gauge",
                "Leader: ms of settled messages not yet covered by a written mark (what a crash now "
                "would repeat).");
    for (size_t i = 0; i < gw->n_eps; i++)
        if (gw->eps[i].warm)
            metric_ep(b, "baton_replay_mark_lag_ms", &gw->eps[i], NULL,
                      (unsigned long long)warm_mark_lag_ms(gw->eps[i].warm));
}

void gateway_render_metrics(struct gateway *gw, struct jbuf *b)
{
    metric_head(b, "baton_build_info", "gauge", "Build information.");
    jbuf_rawz(b, "baton_build_info{version=\"" BATON_VERSION "\"} 1\n");
    metric_head(b, "baton_locker_up", "gauge", "1 when the locker backend answered its last request (1 without a locker).");
    jbuf_rawz(b, "baton_locker_up ");
    pthread_mutex_lock(&gw->obs.mu);
    bool up = gw->obs.valid ? gw->obs.locker_up : gw->locker == NULL;
    pthread_mutex_unlock(&gw->obs.mu);
    jbuf_rawz(b, up ? "1\n" : "0\n");
    metric_head(b, "baton_locker_info", "gauge", "The locker backend (redis, etcd, none).");
    jbuf_rawz(b, "baton_locker_info{backend=\"");
    jbuf_rawz(b, config_locker_backend(gw->cfg));
    jbuf_rawz(b, "\"} 1\n");
    uint64_t round_trips, calls;
    if (baton_locker_lease_traffic(gw->locker, &round_trips, &calls) == 0) {
        char line[160];
        metric_head(b, "baton_locker_round_trips_total", "counter",
                    "Round trips to the locker carrying lease calls (calls queued meanwhile travel together).");
        snprintf(line, sizeof line, "baton_locker_round_trips_total %llu\n", (unsigned long long)round_trips);
        jbuf_rawz(b, line);
        metric_head(b, "baton_locker_calls_total", "counter", "Lease calls (acquire, renew, release, check) sent to the locker.");
        snprintf(line, sizeof line, "baton_locker_calls_total %llu\n", (unsigned long long)calls);
        jbuf_rawz(b, line);
    }

    metric_head(b, "baton_endpoint_leader", "gauge", "1 while this replica may forward for the endpoint.");
    for (size_t i = 0; i < gw->n_eps; i++)
        metric_ep(b, "baton_endpoint_leader", &gw->eps[i], NULL,
                  gw->eps[i].guard ? baton_active_guard_is_leader_now(gw->eps[i].guard) : 1);
    metric_head(b, "baton_draining", "gauge", "1 from POST /v1/drain (baton drain) until /v1/resume.");
    jbuf_rawz(b, gateway_draining(gw) ? "baton_draining 1\n" : "baton_draining 0\n");
    metric_head(b, "baton_endpoint_held", "gauge",
                "1 while this replica stays out of the race for the endpoint (a step-down's hold, a drain, "
                "a give-up's sit-out).");
    for (size_t i = 0; i < gw->n_eps; i++)
        metric_ep(b, "baton_endpoint_held", &gw->eps[i], NULL,
                  gw->eps[i].guard && baton_active_guard_hold_left_ms(gw->eps[i].guard) != 0);
    metric_head(b, "baton_lease_epoch", "gauge", "Fencing epoch of the current or last lease.");
    for (size_t i = 0; i < gw->n_eps; i++)
        metric_ep(b, "baton_lease_epoch", &gw->eps[i], NULL,
                  gw->eps[i].guard ? LOAD(baton_active_guard_stats(gw->eps[i].guard)->epoch) : 0);
    struct {
        const char *name, *help;
        size_t off;
    } guard_counters[] = {
        {"baton_promotions_total", "Promotions to leader.", offsetof(struct baton_active_guard_stats, promotions)},
        {"baton_demotions_total", "Demotions from leader.", offsetof(struct baton_active_guard_stats, demotions)},
        {"baton_lease_renew_failures_total", "Failed lease renewals.",
         offsetof(struct baton_active_guard_stats, renew_failures)},
    };
    for (size_t c = 0; c < sizeof guard_counters / sizeof guard_counters[0]; c++) {
        metric_head(b, guard_counters[c].name, "counter", guard_counters[c].help);
        for (size_t i = 0; i < gw->n_eps; i++) {
            unsigned long long v = 0;
            if (gw->eps[i].guard) {
                const char *base = (const char *)baton_active_guard_stats(gw->eps[i].guard);
                v = atomic_load((const atomic_ullong *)(base + guard_counters[c].off));
            }
            metric_ep(b, guard_counters[c].name, &gw->eps[i], NULL, v);
        }
    }
    metric_head(b, "baton_messages_received_total", "counter", "Messages received from the source.");
    for (size_t i = 0; i < gw->n_eps; i++)
        metric_ep(b, "baton_messages_received_total", &gw->eps[i], NULL, LOAD(gw->eps[i].stats.received));
    metric_head(b, "baton_messages_forwarded_total", "counter", "Messages accepted by the sink.");
    for (size_t i = 0; i < gw->n_eps; i++)
        metric_ep(b, "baton_messages_forwarded_total", &gw->eps[i], NULL, LOAD(gw->eps[i].stats.forwarded));
    metric_head(b, "baton_messages_dropped_total", "counter", "Messages dropped, by reason.");
    for (size_t i = 0; i < gw->n_eps; i++) {
        const struct ep_stats *s = &gw->eps[i].stats;
        metric_ep(b, "baton_messages_dropped_total", &gw->eps[i], "reason=\"queue_full\"", LOAD(s->dropped_queue_full));
        metric_ep(b, "baton_messages_dropped_total", &gw->eps[i], "reason=\"not_leader\"", LOAD(s->dropped_not_leader));
        metric_ep(b, "baton_messages_dropped_total", &gw->eps[i], "reason=\"sink_failed\"", LOAD(s->dropped_sink_failed));
        metric_ep(b, "baton_messages_dropped_total", &gw->eps[i], "reason=\"shutdown\"", LOAD(s->dropped_shutdown));
        metric_ep(b, "baton_messages_dropped_total", &gw->eps[i], "reason=\"term_ended\"", LOAD(s->dropped_term_ended));
    }
    metric_head(b, "baton_messages_returned_total", "counter",
                "Messages of an ended lease term left to a source that delivers them again "
                "(rabbitmq group requeues them, mysql_cdc replays them from its checkpoint, "
                "failover = \"replay\" endpoints leave them to the successor's ring).");
    for (size_t i = 0; i < gw->n_eps; i++)
        metric_ep(b, "baton_messages_returned_total", &gw->eps[i], "reason=\"term_ended\"",
                  LOAD(gw->eps[i].stats.returned_term_ended));
    render_replay_metrics(gw, b);
    metric_head(b, "baton_queue_depth", "gauge", "Messages waiting for the sink.");
    for (size_t i = 0; i < gw->n_eps; i++)
        metric_ep(b, "baton_queue_depth", &gw->eps[i], NULL, queue_depth(gw->eps[i].q));
    render_flight_metrics(gw, b);
    metric_head(b, "baton_sink_errors_total", "counter", "Failed sink attempts, including retried ones.");
    for (size_t i = 0; i < gw->n_eps; i++)
        metric_ep(b, "baton_sink_errors_total", &gw->eps[i], NULL, LOAD(gw->eps[i].stats.sink_errors));
    metric_head(b, "baton_source_errors_total", "counter", "Source connection losses and errors.");
    for (size_t i = 0; i < gw->n_eps; i++)
        metric_ep(b, "baton_source_errors_total", &gw->eps[i], NULL, LOAD(gw->eps[i].stats.source_errors));
    metric_head(b, "baton_source_overflow_total", "counter",
                "Times the source cut this reader off for falling behind (redis_psub: Redis's "
                "client-output-buffer-limit pubsub); what it published meanwhile is lost.");
    for (size_t i = 0; i < gw->n_eps; i++)
        metric_ep(b, "baton_source_overflow_total", &gw->eps[i], NULL, LOAD(gw->eps[i].stats.source_overflow));
    metric_head(b, "baton_messages_dead_lettered_total", "counter",
                "Messages the sink could not deliver, handed to the endpoint's dead_letter sink, by reason.");
    for (size_t i = 0; i < gw->n_eps; i++)
        for (int r = 0; r < DEAD_LETTER_REASONS; r++) {
            char label[64];
            snprintf(label, sizeof label, "reason=\"%s\"", dead_letter_reason_name((enum dead_letter_reason)r));
            metric_ep(b, "baton_messages_dead_lettered_total", &gw->eps[i], label,
                      LOAD(gw->eps[i].stats.dead_lettered[r]));
        }
    metric_head(b, "baton_fenced_by_sink_total", "counter",
                "Times the receiver answered that it saw a newer epoch (HTTP 409): the lease term was ended.");
    for (size_t i = 0; i < gw->n_eps; i++)
        metric_ep(b, "baton_fenced_by_sink_total", &gw->eps[i], NULL, LOAD(gw->eps[i].stats.fenced_by_sink));

    struct {
        const char *name, *help;
        size_t off;
    } once_counters[] = {
        {"baton_once_allowed_total", "OnceGuard decisions that allowed the delivery.",
         offsetof(struct baton_once_guard_stats, allowed)},
        {"baton_once_skipped_total", "OnceGuard decisions that skipped it (taken elsewhere, or fail-closed).",
         offsetof(struct baton_once_guard_stats, skipped)},
        {"baton_once_backend_errors_total", "OnceGuard decisions the locker could not answer.",
         offsetof(struct baton_once_guard_stats, backend_errors)},
    };
    for (size_t c = 0; c < sizeof once_counters / sizeof once_counters[0]; c++) {
        metric_head(b, once_counters[c].name, "counter", once_counters[c].help);
        for (size_t i = 0; i < gw->n_eps; i++) {
            if (!gw->eps[i].host.once_stats) continue;
            const char *base = (const char *)gw->eps[i].host.once_stats;
            metric_ep(b, once_counters[c].name, &gw->eps[i], NULL,
                      atomic_load((const atomic_ullong *)(base + once_counters[c].off)));
        }
    }

    metric_head(b, "baton_sink_latency_seconds", "histogram", "Time from receipt to sink acceptance.");
    for (size_t i = 0; i < gw->n_eps; i++) {
        const struct ep_stats *s = &gw->eps[i].stats;
        unsigned long long cum = 0;
        char le[64];
        for (int k = 0; k <= STATS_LATENCY_BUCKETS; k++) {
            cum += LOAD(s->latency_bucket[k]);
            if (k < STATS_LATENCY_BUCKETS)
                snprintf(le, sizeof le, "le=\"%g\"", stats_latency_bounds[k]);
            else
                snprintf(le, sizeof le, "le=\"+Inf\"");
            metric_ep(b, "baton_sink_latency_seconds_bucket", &gw->eps[i], le, cum);
        }
        char line[256];
        int n = snprintf(line, sizeof line, "baton_sink_latency_seconds_sum{endpoint=\"");
        jbuf_raw(b, line, (size_t)n);
        label_value(b, gw->eps[i].cfg->name);
        n = snprintf(line, sizeof line, "\"} %.6f\n", (double)LOAD(s->latency_sum_us) / 1e6);
        jbuf_raw(b, line, (size_t)n);
        metric_ep(b, "baton_sink_latency_seconds_count", &gw->eps[i], NULL, LOAD(s->latency_count));
    }
}

void gateway_render_status(struct gateway *gw, struct jbuf *b)
{
    bool first = true;
    jbuf_char(b, '{');
    jbuf_key(b, &first, "host");
    jbuf_strz(b, util_hostname());
    jbuf_key(b, &first, "locker");
    jbuf_strz(b, config_locker_backend(gw->cfg));
    char where[256] = "";
    if (baton_locker_where(gw->locker, where, sizeof where) == 0) {
        char shown[300];
        jbuf_key(b, &first, "locker_endpoint");
        jbuf_strz(b, redact_urls(where, shown, sizeof shown)); /* http://root:***@host */
        explicit_bzero(where, sizeof where);
    }
    /* "draining" from POST /v1/drain until /v1/resume, else "running" */
    jbuf_key(b, &first, "state");
    jbuf_strz(b, gateway_draining(gw) ? "draining" : "running");
    jbuf_key(b, &first, "endpoints");
    jbuf_char(b, '[');
    for (size_t i = 0; i < gw->n_eps; i++) {
        const struct gw_endpoint *e = &gw->eps[i];
        bool f = true;
        if (i) jbuf_char(b, ',');
        jbuf_char(b, '{');
        jbuf_key(b, &f, "name");
        jbuf_strz(b, e->cfg->name);
        jbuf_key(b, &f, "type");
        jbuf_strz(b, e->cfg->type);
        jbuf_key(b, &f, "guard");
        jbuf_strz(b, guard_kind_name(e->cfg->guard));
        jbuf_key(b, &f, "role");
        jbuf_strz(b, role_name(e));
        if (e->guard) {
            const struct baton_active_guard_stats *s = baton_active_guard_stats(e->guard);
            jbuf_key(b, &f, "epoch");
            jbuf_u64(b, LOAD(s->epoch));
            jbuf_key(b, &f, "lease_key");
            jbuf_strz(b, e->lease_key);
            if (baton_locker_has_holder(gw->locker)) {
                /* this replica when it leads now, else as last observed (at
                 * most OBSERVE_MS old): no Redis call here */
                char who[160] = "";
                bool known = true;
                if (baton_active_guard_is_leader_now(e->guard)) {
                    snprintf(who, sizeof who, "%.80s pid %d", util_hostname(), (int)getpid());
                } else {
                    pthread_mutex_lock(&gw->obs.mu);
                    known = gw->obs.holder_known[i];
                    if (known) snprintf(who, sizeof who, "%s", gw->obs.holder[i]);
                    pthread_mutex_unlock(&gw->obs.mu);
                }
                jbuf_key(b, &f, "holder");
                if (known)
                    jbuf_strz(b, who);
                else
                    jbuf_null(b);
            }
            int64_t since = atomic_load(&s->leader_since_ms);
            if (since) {
                char ts[40];
                clock_format_rfc3339(since, ts, sizeof ts);
                jbuf_key(b, &f, "since");
                jbuf_strz(b, ts);
            }
            /* out of the race after a step-down or a drain: "hold_ms_left"
             * (ms) or "hold": "until-resume" */
            int64_t hold = baton_active_guard_hold_left_ms(e->guard);
            if (hold < 0) {
                jbuf_key(b, &f, "hold");
                jbuf_strz(b, "until-resume");
            } else if (hold > 0) {
                jbuf_key(b, &f, "hold_ms_left");
                jbuf_u64(b, (uint64_t)hold);
            }
            jbuf_key(b, &f, "promotions");
            jbuf_u64(b, LOAD(s->promotions));
            jbuf_key(b, &f, "demotions");
            jbuf_u64(b, LOAD(s->demotions));
        }
        jbuf_key(b, &f, "received");
        jbuf_u64(b, LOAD(e->stats.received));
        jbuf_key(b, &f, "forwarded");
        jbuf_u64(b, LOAD(e->stats.forwarded));
        jbuf_key(b, &f, "dropped");
        jbuf_u64(b, LOAD(e->stats.dropped_queue_full) + LOAD(e->stats.dropped_not_leader) +
                        LOAD(e->stats.dropped_sink_failed) + LOAD(e->stats.dropped_shutdown) +
                        LOAD(e->stats.dropped_term_ended));
        jbuf_key(b, &f, "queue_depth");
        jbuf_u64(b, queue_depth(e->q));
        struct sink_flight fl;
        if (endpoint_flight(e, &fl)) {
            static const char *const order_names[] = {"key", "none", "strict"};
            bool df = true;
            jbuf_key(b, &f, "delivery");
            jbuf_char(b, '{');
            jbuf_key(b, &df, "ordering");
            jbuf_strz(b, order_names[e->cfg->ordering]);
            jbuf_key(b, &df, "in_flight");
            jbuf_u64(b, fl.in_flight);
            jbuf_key(b, &df, "limit");
            jbuf_u64(b, fl.limit);
            jbuf_key(b, &df, "rtt_ms");
            char num[32];
            snprintf(num, sizeof num, "%.3f", fl.rtt_ms);
            jbuf_rawz(b, num);
            jbuf_char(b, '}');
        }
        char source[sizeof e->source];
        pthread_mutex_lock(&gw->eps[i].source_mu);
        memcpy(source, e->source, sizeof source);
        pthread_mutex_unlock(&gw->eps[i].source_mu);
        if (source[0]) {
            jbuf_key(b, &f, "source");
            jbuf_strz(b, source);
        }
        if (e->warm) {
            const struct warm_stats *ws = warm_stats(e->warm);
            bool rf = true;
            jbuf_key(b, &f, "failover");
            jbuf_strz(b, "replay");
            jbuf_key(b, &f, "replay");
            jbuf_char(b, '{');
            jbuf_key(b, &rf, "ring_messages");
            jbuf_u64(b, LOAD(ws->ring_count));
            jbuf_key(b, &rf, "ring_bytes");
            jbuf_u64(b, LOAD(ws->ring_bytes));
            jbuf_key(b, &rf, "ring_age_ms");
            jbuf_u64(b, (uint64_t)ring_age_ms(e->warm));
            jbuf_key(b, &rf, "replayed");
            jbuf_u64(b, LOAD(ws->replayed));
            unsigned long long un = 0;
            for (int r = 0; r < 4; r++) un += LOAD(ws->unaligned[r]);
            jbuf_key(b, &rf, "unaligned");
            jbuf_u64(b, un);
            jbuf_key(b, &rf, "mark_lag_ms");
            jbuf_u64(b, (uint64_t)warm_mark_lag_ms(e->warm));
            jbuf_char(b, '}');
        }
        jbuf_char(b, '}');
    }
    jbuf_char(b, ']');
    jbuf_char(b, '}');
}

int gateway_ready(struct gateway *gw, char *reason, size_t len)
{
    /* as last observed by the observer thread: never waits for a backend */
    pthread_mutex_lock(&gw->obs.mu);
    int rc = 0;
    if (gateway_draining(gw)) {
        snprintf(reason, len, "draining: standby for every endpoint until POST /v1/resume (baton resume)");
        rc = -1;
    } else if (!gw->obs.valid) {
        snprintf(reason, len, "starting: the locker and the sinks were not probed yet");
        rc = -1;
    } else if (gw->obs.ready_reason[0]) {
        redact_urls(gw->obs.ready_reason, reason, len); /* a sink's or etcd's URL: shown in /readyz */
        rc = -1;
    }
    pthread_mutex_unlock(&gw->obs.mu);
    return rc;
}
