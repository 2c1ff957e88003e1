/* redis_psub: Redis PSUBSCRIBE / SUBSCRIBE under ActiveGuard.
 *
 * Redis pub/sub broadcasts every message to every subscriber, so N replicas
 * would each forward it: only the leader subscribes. start() (on promotion)
 * spawns the consumer thread, which connects, subscribes and confirms every
 * pattern and channel before start() returns 0. stop() (on demotion) sets a
 * flag, shuts the socket down to interrupt the read and joins the thread.
 *
 * The consumer loop is a bare hiredis loop: parse every reply already
 * buffered (redisGetReplyFromReader), then poll(2) and read once. Per
 * message it builds the envelope into a reused buffer and allocates the one
 * message (envelope_finish), emitted deferred; before it polls again it
 * flushes (host->flush): the read's messages go to the sink as one batch,
 * written by this thread itself while the forwarder is idle and the sink
 * takes them at once (src/gateway.c host_flush), else by the forwarder. The
 * poll has no timeout (a timerfd ticks instead, see tick_open). When the
 * socket stays silent for ping_interval_ms a PING goes out; no answer within
 * the next interval means the connection is dead (a stopped or partitioned
 * server never sends FIN). Without Sentinel and TLS the connection instead
 * joins the process's prober (endpoints/redis_probe.h): one PING per
 * interval for every connection to the same server, and no timer here, so
 * that an idle consumer sleeps until its socket has something.
 *
 * The consumer thread is endpoints/source_loop.h's supervisor (this file
 * gives it open, run, close): connection lost while leader: reconnect with
 * back-off; unreachable for longer than the lease ttl -> host->source_lost()
 * (the guard releases the lease so another replica can try) and the thread
 * ends. Unguarded (guard = none, forced): it retries forever. Messages
 * published while nobody is subscribed are lost: Redis pub/sub keeps
 * nothing.
 *
 * Sentinel (sentinels + master_name): every connect asks the sentinels for
 * the master and checks its ROLE (redis_conn_open_ex); the consumer also
 * watches the process's +switch-master counter (redis/sentinel.h, at
 * least every SWITCH_POLL_MS) and resubscribes on the new master when it
 * moves, like after a lost connection.
 *
 * Falling behind (issue 37): Redis cuts off a subscriber whose output
 * buffer passes client-output-buffer-limit pubsub, e.g. while the reader
 * waits at a full queue (queue_policy "block"), and says nothing to it:
 * the socket just closes. The read loop keeps a lag record (struct lag); a
 * session that ends by EOF or reset while the reader was behind leaves a
 * suspicion, which the next connect judges (overflow_judge) with INFO
 * server (restarted since: not this) and CONFIG GET (the limit, to name
 * it; off: not this), sent only then, so that a source user without +info
 * and +config|get costs nothing in ACL LOG unless it happens (refused:
 * judged without them). A cut-off counts one source_overflow and logs one
 * warning. */
#include "endpoints/redis_psub.h"
#include "base/util.h"
#include "endpoints/redis_probe.h"
#include "endpoints/redis_reply_pool.h"
#include "endpoints/source_loop.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "redis/open.h"
#include "redis/sentinel.h"
#include "common/log.h"
#include "common/replay_id.h"
#include "common/util.h"

#define COMPONENT "redis_psub"
#define TYPE_NAME "redis_psub"
#define SWITCH_POLL_MS 250 /* sentinels: how often the consumer looks for a switch */
/* A replay standby forwards nothing, so nobody waits on its latency. In a
 * burst (a read that drained the socket but brought STANDBY_NAP_MIN_BYTES
 * or more) it naps STANDBY_NAP_US before it polls again, so the next read
 * gathers a millisecond of messages instead of waking for every few
 * packets: at saturation a fifth of its CPU was the wake-ups of poll(2).
 * A full read (more waiting) never naps, nor does a small one (ordinary
 * rates); neither does a leader. */
#define STANDBY_NAP_MIN_BYTES 4096
#define STANDBY_NAP_US 1000
/* Falling behind (struct lag): a read whose messages took this long to hand
 * over (emit + flush) waited for the sink (the queue was full) */
#define LAG_WAIT_MS 10
/* caught up: the reader sat this long at an empty socket, or saw no sign of
 * being behind for LAG_CALM_MS (a socket drained at full speed after a wait
 * comes up empty now and then for a moment: that is not catching up) */
#define LAG_IDLE_MS 100
#define LAG_CALM_MS 1000
/* a lost connection is suspected of being Redis's cut-off when the reader,
 * behind when it was lost, had waited this long in all since it last
 * caught up, ... */
#define LAG_SUSPECT_WAIT_MS 100
/* ... or every read brought a full buffer for this long (reading more slowly
 * than Redis sent) */
#define LAG_SUSPECT_BEHIND_MS 1000

static const struct setting_def psub_defs[] = {
    REDIS_CONN_DEFS(struct redis_psub_settings, conn),
    {"patterns", SETTING_STRLIST, offsetof(struct redis_psub_settings, patterns),
     .help = "glob patterns to PSUBSCRIBE to, e.g. [\"orders.*\"]"},
    {"channels", SETTING_STRLIST, offsetof(struct redis_psub_settings, channels),
     .help = "channel names to SUBSCRIBE to"},
    {"reconnect_min_ms", SETTING_INT,
     offsetof(struct redis_psub_settings, reconnect_min_ms), .def = "100", .min = 1,
     .max = 600000, .help = "first reconnect delay in ms (doubles up to the max, jittered)",
     .old_name = "reconnect_backoff_ms"},
    {"reconnect_max_ms", SETTING_INT,
     offsetof(struct redis_psub_settings, reconnect_max_ms), .def = "2000", .min = 1,
     .max = 3600000, .help = "largest reconnect delay in ms",
     .old_name = "reconnect_backoff_max_ms"},
    {"ping_interval_ms", SETTING_INT, offsetof(struct redis_psub_settings, ping_interval_ms),
     .def = "1000", .min = 0, .max = 3600000,
     .help = "PING after this many ms of silence; no answer within the next interval = "
             "connection dead (0 = never)"},
    REDIS_HA_TLS_DEFS(struct redis_psub_settings),
    SETTINGS_END,
};

/* ------------------------------------------------------------------------ */
/* Pure pieces: reply decoding and envelope building */

static bool is_str(const redisReply *r)
{
    return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

static bool str_eq(const redisReply *r, const char *lit, size_t n)
{
    return (size_t)r->len == n && memcmp(r->str, lit, n) == 0;
}
#define STR_EQ(r, lit) str_eq((r), lit, sizeof(lit) - 1)

static enum psub_kind malformed(struct psub_event *ev, const char *why)
{
    ev->kind = PSUB_MALFORMED;
    ev->payload = why;
    ev->payload_len = strlen(why);
    return ev->kind;
}

enum psub_kind redis_psub_decode(const redisReply *r, struct psub_event *ev)
{
    memset(ev, 0, sizeof *ev);
    if (r->type == REDIS_REPLY_ERROR) {
        ev->kind = PSUB_ERROR;
        ev->payload = r->str ? r->str : "";
        ev->payload_len = r->str ? (size_t)r->len : 0;
        return ev->kind;
    }
    if (r->type == REDIS_REPLY_STATUS && r->str && STR_EQ(r, "PONG")) {
        ev->kind = PSUB_PONG;
        return ev->kind;
    }
    if (r->type != REDIS_REPLY_ARRAY) return malformed(ev, "reply is not an array");
    if (r->elements < 1 || !r->element || !is_str(r->element[0]))
        return malformed(ev, "array does not start with a kind string");
    const redisReply *k = r->element[0];
    /* the hot path first: pmessage, then message */
    if (STR_EQ(k, "pmessage")) {
        if (r->elements != 4 || !is_str(r->element[1]) || !is_str(r->element[2]) ||
            !is_str(r->element[3]))
            return malformed(ev, "pmessage without pattern, channel and payload strings");
        ev->kind = PSUB_PMESSAGE;
        ev->pattern = r->element[1]->str;
        ev->pattern_len = (size_t)r->element[1]->len;
        ev->channel = r->element[2]->str;
        ev->channel_len = (size_t)r->element[2]->len;
        ev->payload = r->element[3]->str;
        ev->payload_len = (size_t)r->element[3]->len;
        return ev->kind;
    }
    if (STR_EQ(k, "message")) {
        if (r->elements != 3 || !is_str(r->element[1]) || !is_str(r->element[2]))
            return malformed(ev, "message without channel and payload strings");
        ev->kind = PSUB_MESSAGE;
        ev->channel = r->element[1]->str;
        ev->channel_len = (size_t)r->element[1]->len;
        ev->payload = r->element[2]->str;
        ev->payload_len = (size_t)r->element[2]->len;
        return ev->kind;
    }
    bool sub = STR_EQ(k, "subscribe"), psub = STR_EQ(k, "psubscribe");
    bool unsub = STR_EQ(k, "unsubscribe"), punsub = STR_EQ(k, "punsubscribe");
    if (sub || psub || unsub || punsub) {
        if (r->elements != 3 || r->element[2]->type != REDIS_REPLY_INTEGER)
            return malformed(ev, "subscription confirmation without name and count");
        const redisReply *n = r->element[1];
        if (is_str(n)) {
            ev->channel = n->str;
            ev->channel_len = (size_t)n->len;
        } else if (n->type != REDIS_REPLY_NIL) {
            return malformed(ev, "subscription confirmation name is not a string");
        }
        ev->kind = (sub || psub) ? PSUB_SUBSCRIBED : PSUB_UNSUBSCRIBED;
        ev->pattern_sub = (psub || punsub) ? 1 : 0;
        return ev->kind;
    }
    if (STR_EQ(k, "pong")) {
        ev->kind = PSUB_PONG;
        return ev->kind;
    }
    return malformed(ev, "unknown push kind");
}

/* The source fields, after envelope_begin. */
static void envelope_fields(struct envelope *e, const struct psub_event *ev)
{
    envelope_str(e, "channel", ev->channel, ev->channel_len);
    if (ev->kind == PSUB_PMESSAGE) envelope_str(e, "pattern", ev->pattern, ev->pattern_len);
    envelope_payload(e, ev->payload, ev->payload_len);
}

void redis_psub_envelope(struct envelope *e, const char *endpoint, uint64_t epoch,
                         int64_t received_wall_ms, const struct psub_event *ev, const char *id)
{
    envelope_begin(e, endpoint, TYPE_NAME, epoch, id, received_wall_ms);
    /* ordered per channel: the one the message was published on, not the
     * pattern that matched it */
    envelope_order_key(e, ev->channel, ev->channel_len);
    envelope_fields(e, ev);
}

/* failover = "replay", standby: the raw record of a message (message.raw),
 * the header then channel, pattern and payload bytes. Rendered into the
 * envelope only if this replica replays it. In-process only (native byte
 * order). Its message.key is already the channel's, as the envelope's would
 * be: the render carries it over. */
struct raw_head {
    int64_t wall_ms;
    uint64_t id; /* replay_id_next */
    uint32_t channel_len, pattern_len;
    uint32_t kind;
};

struct message *redis_psub_raw(const struct psub_event *ev, int64_t wall_ms, int64_t mono_us,
                               uint64_t id)
{
    struct raw_head hd = {.wall_ms = wall_ms, .id = id, .kind = (uint32_t)ev->kind,
                          .channel_len = (uint32_t)ev->channel_len,
                          .pattern_len = ev->kind == PSUB_PMESSAGE ? (uint32_t)ev->pattern_len : 0};
    size_t n = sizeof hd + hd.channel_len + hd.pattern_len + ev->payload_len;
    struct message *m = message_new(NULL, n);
    char *p = m->json;
    memcpy(p, &hd, sizeof hd);
    p += sizeof hd;
    if (hd.channel_len) memcpy(p, ev->channel, hd.channel_len);
    p += hd.channel_len;
    if (hd.pattern_len) memcpy(p, ev->pattern, hd.pattern_len);
    p += hd.pattern_len;
    if (ev->payload_len) memcpy(p, ev->payload, ev->payload_len);
    m->raw = true;
    m->key = message_key_hash(ev->channel, ev->channel_len);
    m->received_mono_us = mono_us;
    m->received_wall_ms = wall_ms;
    return m;
}

struct message *redis_psub_render(const char *endpoint, struct envelope *e,
                                  const struct message *raw, uint64_t epoch, bool replayed)
{
    struct raw_head hd;
    if (!raw->raw || raw->len < sizeof hd) return NULL;
    memcpy(&hd, raw->json, sizeof hd);
    size_t fixed = sizeof hd + (size_t)hd.channel_len + hd.pattern_len;
    if (fixed > raw->len || (hd.kind != PSUB_MESSAGE && hd.kind != PSUB_PMESSAGE)) return NULL;
    struct psub_event ev = {.kind = (enum psub_kind)hd.kind};
    ev.channel = raw->json + sizeof hd;
    ev.channel_len = hd.channel_len;
    ev.pattern = ev.channel + hd.channel_len;
    ev.pattern_len = hd.pattern_len;
    ev.payload = ev.pattern + hd.pattern_len;
    ev.payload_len = raw->len - fixed;
    char id[REPLAY_ID_LEN];
    replay_id_format(hd.id, id);
    if (replayed)
        envelope_begin_replayed(e, endpoint, TYPE_NAME, epoch, id, hd.wall_ms);
    else
        envelope_begin(e, endpoint, TYPE_NAME, epoch, id, hd.wall_ms);
    envelope_fields(e, &ev);
    struct message *m = envelope_finish(e);
    m->fp = raw->fp;
    m->key = raw->key;
    m->received_mono_us = raw->received_mono_us;
    m->received_wall_ms = raw->received_wall_ms;
    return m;
}

static int check_list(const struct strlist *l, const char *key, char *msg, size_t msglen)
{
    for (size_t i = 0; i < l->n; i++) {
        if (!l->v[i] || !l->v[i][0]) {
            snprintf(msg, msglen, "'%s' element %zu is an empty string", key, i + 1);
            return -1;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(l->v[i], l->v[j]) == 0) {
                snprintf(msg, msglen, "'%s' lists \"%s\" twice", key, l->v[i]);
                return -1;
            }
        }
    }
    return 0;
}

int redis_psub_validate(const struct redis_psub_settings *s, enum guard_kind guard, bool force,
                        char *msg, size_t msglen)
{
    if (s->patterns.n == 0 && s->channels.n == 0) {
        snprintf(msg, msglen,
                 "nothing to subscribe to: set 'patterns' (PSUBSCRIBE, e.g. [\"orders.*\"]) "
                 "and/or 'channels' (SUBSCRIBE), at least one non-empty");
        return -1;
    }
    if (check_list(&s->patterns, "patterns", msg, msglen)) return -1;
    if (check_list(&s->channels, "channels", msg, msglen)) return -1;
    if (s->reconnect_max_ms < s->reconnect_min_ms) {
        snprintf(msg, msglen,
                 "'reconnect_max_ms' (%" PRId64 ") must be >= 'reconnect_min_ms' "
                 "(%" PRId64 ")",
                 s->reconnect_max_ms, s->reconnect_min_ms);
        return -1;
    }
    if (s->conn.password_env && s->conn.password_file) {
        snprintf(msg, msglen, "set either 'password_env' or 'password_file', not both");
        return -1;
    }
    if (guard == GUARD_ONCE) {
        snprintf(msg, msglen,
                 "guard \"once\" cannot work for redis_psub: pub/sub messages carry no id to "
                 "deduplicate on; use guard \"active\" (the default)");
        return -1;
    }
    if (guard == GUARD_NONE && !force) {
        snprintf(msg, msglen,
                 "guard \"none\": Redis pub/sub delivers every message to every replica, so each "
                 "replica would forward it; use guard \"active\" (the default), or set "
                 "force_guard = true if only one replica runs");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The endpoint */

/* How the reader kept up with its socket in one session. Behind: a read
 * brought a full buffer (more was waiting), or handing a read's messages
 * over (emit, flush) took LAG_WAIT_MS or more (the queue was full). Caught
 * up (the record starts over): LAG_IDLE_MS at an empty socket, or
 * LAG_CALM_MS without a sign of being behind. */
struct lag {
    int64_t since_ms;       /* behind since (0: caught up) */
    int64_t last_behind_ms; /* when it was last seen behind */
    int64_t waited_ms;      /* hand-off time of the reads that waited, since since_ms */
    int64_t ready_ms;       /* the last read was handed over: reading again */
};

/* A session lost (EOF or reset) while the reader was behind: judged at the
 * next connect (overflow_judge). */
struct overflow_suspect {
    bool set;
    int64_t waited_ms, behind_ms;
    int64_t session_ms;   /* when that session connected (clock_mono_ms) */
    uint64_t switch_seen; /* the Sentinel switch count of that session */
};

/* What the judging connect asked the server (INFO server, CONFIG GET). */
struct server_facts {
    long long uptime_s;        /* INFO server uptime_in_seconds, -1 unknown */
    char info_err[160];        /* why unknown */
    bool limit_known;          /* client-output-buffer-limit pubsub's hard, soft, seconds */
    long long hard, soft, secs;
    char limit_err[160];       /* why not known */
};

struct psub {
    const struct redis_psub_settings *s;
    struct endpoint_host *host;
    struct baton_redis_opts ro;
    char where[200]; /* "host:port db N" for log lines (host cut at 150) */
    bool replay;     /* failover = "replay": runs on every replica until shutdown */
    struct replay_idctx idctx; /* consumer thread only */

    /* PSUBSCRIBE / SUBSCRIBE argument vectors, built once */
    const char **pargv, **cargv;
    size_t *pargvlen, *cargvlen;
    int pargc, cargc;

    pthread_mutex_t lock; /* guards fd */
    int fd;               /* socket of the live connection, -1 when none */
    struct source_loop loop; /* the consumer thread */
    redisContext *conn;      /* the live connection; consumer thread only */

    struct envelope env; /* consumer thread only */
    struct reply_pool *pool; /* the replies of its connections; consumer thread only */
    struct ratelimit rl_bad;

    /* Sentinel: the process's +switch-master watcher of ro's sentinels
     * (acquired by the consumer thread on its first connect, released by
     * destroy) and its count when the live connection was opened: when it
     * moves the consumer resubscribes on the new master. */
    struct redis_sentinel_watch *watch;
    uint64_t switch_seen; /* consumer thread only */
    size_t deferred;      /* consumer thread only: emitted since the last flush */
    /* the process's prober watches the live connection (consumer thread
     * only, besides the prober's own fields) */
    struct probe_conn probe;
    bool probed;

    /* Falling behind (consumer thread only): the live session's lag, and a
     * lost session's suspicion for the next connect to judge */
    struct lag lag;
    struct overflow_suspect suspect;
    int64_t session_ms; /* when the live connection was opened */
};

/* Deferred: flushed after the read (a drop is counted and logged there). */
static void emit(struct psub *p, struct message *m, bool deferred)
{
    struct endpoint_host *h = p->host;
    if (deferred && h->emit_deferred) {
        h->emit_deferred(h, m);
        p->deferred++;
    } else {
        h->emit(h, m);
    }
}

/* When the bytes of a read(2) arrived. Every message parsed from one read
 * arrived at the same moment, so the consumer reads the clocks once per
 * read, not once per message. */
struct read_clock {
    int64_t wall_ms; /* received_at */
    int64_t mono_us; /* received_mono_us (latency) */
};

static struct read_clock read_clock_now(void)
{
    return (struct read_clock){.wall_ms = clock_wall_ms(), .mono_us = clock_mono_us()};
}

static void handle_message(struct psub *p, const struct psub_event *ev, const struct read_clock *rc,
                           bool deferred)
{
    struct endpoint_host *h = p->host;
    int64_t wall_ms = rc->wall_ms;
    if (!p->replay) {
        redis_psub_envelope(&p->env, h->name, h->epoch(h), wall_ms, ev, NULL);
        emit(p, envelope_finish_at(&p->env, rc->mono_us), deferred);
        return;
    }
    /* the same id on every replica for the same message in the stream */
    uint64_t fp = replay_fingerprint(ev->channel, ev->channel_len, ev->payload, ev->payload_len);
    uint64_t idn = replay_id_next(&p->idctx, fp);
    struct message *m;
    if (!h->replay_live(h)) {
        m = redis_psub_raw(ev, wall_ms, rc->mono_us, idn); /* a standby renders only what it replays */
    } else {
        char id[REPLAY_ID_LEN];
        replay_id_format(idn, id);
        redis_psub_envelope(&p->env, h->name, h->epoch(h), wall_ms, ev, id);
        m = envelope_finish_at(&p->env, rc->mono_us);
    }
    m->fp = fp;
    emit(p, m, deferred);
}

static void count_bad(struct psub *p, const char *what, const struct psub_event *ev)
{
    struct endpoint_host *h = p->host;
    long long supp = 0;
    if (ev->kind == PSUB_MALFORMED)
        atomic_fetch_add_explicit(&h->stats->malformed, 1, memory_order_relaxed);
    else
        atomic_fetch_add_explicit(&h->stats->source_errors, 1, memory_order_relaxed);
    if (ratelimit_ok(&p->rl_bad, 5000, &supp))
        log_warn(COMPONENT, h->name, "%s from %s: %.*s (%lld more suppressed)", what, p->where,
                 (int)(ev->payload_len > 200 ? 200 : ev->payload_len),
                 ev->payload ? ev->payload : "", supp);
}

/* Handles one reply on a subscribed connection. Returns 1 for a message, 0
 * otherwise; *pong set when it was a PING answer. */
static int handle_reply(struct psub *p, const redisReply *r, bool *pong, const struct read_clock *rc)
{
    struct psub_event ev;
    switch (redis_psub_decode(r, &ev)) {
    case PSUB_PMESSAGE:
    case PSUB_MESSAGE: handle_message(p, &ev, rc, true); return 1;
    case PSUB_PONG: *pong = true; return 0;
    case PSUB_SUBSCRIBED: return 0;
    case PSUB_UNSUBSCRIBED:
        /* nobody unsubscribes this connection but us; tell it anyway */
        log_warn(COMPONENT, p->host->name, "unexpected %sunsubscribe confirmation for \"%.*s\"",
                 ev.pattern_sub ? "p" : "", (int)ev.channel_len, ev.channel ? ev.channel : "");
        return 0;
    case PSUB_ERROR: count_bad(p, "error reply", &ev); return 0;
    case PSUB_MALFORMED: count_bad(p, "unexpected reply", &ev); return 0;
    }
    return 0;
}

static void conn_close(struct psub *p, redisContext *c)
{
    if (!c) return;
    pthread_mutex_lock(&p->lock);
    p->fd = -1;
    pthread_mutex_unlock(&p->lock);
    redisFree(c);
}

static bool flush_output(redisContext *c)
{
    int done = 0;
    while (!done)
        if (redisBufferWrite(c, &done) != REDIS_OK) return false;
    return true;
}

/* ------------------------------------------------------------------------ */
/* Falling behind: Redis's client-output-buffer-limit pubsub */

/* Whether the reader, at now_ms, has caught up since it was last behind. */
static bool lag_caught_up(const struct lag *l, int64_t now_ms)
{
    return now_ms - l->ready_ms >= LAG_IDLE_MS || now_ms - l->last_behind_ms >= LAG_CALM_MS;
}

/* After a read of got bytes at read_ms whose messages took handoff_ms to
 * hand over. */
static void lag_read(struct lag *l, int64_t read_ms, size_t got, int64_t handoff_ms)
{
    if (l->since_ms && lag_caught_up(l, read_ms)) {
        l->since_ms = 0;
        l->waited_ms = 0;
    }
    l->ready_ms = read_ms + handoff_ms;
    bool waited = handoff_ms >= LAG_WAIT_MS;
    if (!waited && got < REDIS_READ_CHUNK) return;
    if (!l->since_ms) l->since_ms = read_ms;
    l->last_behind_ms = l->ready_ms;
    if (waited) l->waited_ms += handoff_ms;
}

/* The connection ended at now_ms: true (waited and behind filled) when the
 * reader was behind enough for Redis to have cut it off. */
static bool lag_suspect(const struct lag *l, int64_t now_ms, int64_t *waited, int64_t *behind)
{
    if (!l->since_ms || lag_caught_up(l, now_ms)) return false;
    *waited = l->waited_ms;
    *behind = l->last_behind_ms - l->since_ms;
    return *waited >= LAG_SUSPECT_WAIT_MS || *behind >= LAG_SUSPECT_BEHIND_MS;
}

/* A read of the live connection failed: when it was EOF or a reset (not a
 * stop, not the prober's verdict, not a refused reply) while the reader was
 * behind, the next connect judges it. */
static void lag_lost(struct psub *p, const redisContext *c)
{
    if (c->err != REDIS_ERR_EOF && c->err != REDIS_ERR_IO) return;
    if ((p->probed && atomic_load(&p->probe.dead)) || source_loop_stopping(&p->loop)) return;
    int64_t waited = 0, behind = 0;
    if (!lag_suspect(&p->lag, clock_mono_us() / 1000, &waited, &behind)) return;
    p->suspect = (struct overflow_suspect){.set = true, .waited_ms = waited, .behind_ms = behind,
                                           .session_ms = p->session_ms,
                                           .switch_seen = p->switch_seen};
}

/* The value of field name in an INFO text, into out ("" when absent). */
static void info_field(const char *info, size_t len, const char *name, char *out, size_t outlen)
{
    size_t n = strlen(name);
    out[0] = '\0';
    for (const char *q = info, *end = info + len; q < end;) {
        const char *eol = memchr(q, '\n', (size_t)(end - q));
        const char *le = eol ? eol : end;
        if ((size_t)(le - q) > n && memcmp(q, name, n) == 0 && q[n] == ':') {
            const char *v = q + n + 1;
            if (le > v && le[-1] == '\r') le--;
            size_t vl = (size_t)(le - v) < outlen ? (size_t)(le - v) : outlen - 1;
            memcpy(out, v, vl);
            out[vl] = '\0';
            return;
        }
        q = eol ? eol + 1 : end;
    }
}

/* "pubsub <hard> <soft> <seconds>" out of client-output-buffer-limit's
 * value ("normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 ..."). */
static bool limit_parse(const char *v, struct server_facts *f)
{
    const char *q = strstr(v, "pubsub ");
    if (!q) return false;
    char *e;
    long long x[3];
    q += sizeof "pubsub " - 1;
    for (int i = 0; i < 3; i++) {
        errno = 0;
        x[i] = strtoll(q, &e, 10);
        if (e == q || errno || x[i] < 0) return false;
        q = e;
    }
    f->hard = x[0];
    f->soft = x[1];
    f->secs = x[2];
    return true;
}

/* Bytes the way the setting is written ("1mb", "512kb", "1000"). */
static const char *size_text(long long b, char *buf, size_t len)
{
    static const char *const unit[] = {"gb", "mb", "kb"};
    for (int i = 0; i < 3; i++) {
        long long u = 1LL << (10 * (3 - i));
        if (b > 0 && b % u == 0) {
            snprintf(buf, len, "%lld%s", b / u, unit[i]);
            return buf;
        }
    }
    snprintf(buf, len, "%lld", b);
    return buf;
}

/* The answers to INFO server and CONFIG GET client-output-buffer-limit,
 * sent before the subscription. A refusal (ACL, a renamed or disabled
 * command) leaves the fact unknown; false (err filled) only when the
 * connection failed. */
static bool read_facts(struct psub *p, redisContext *c, struct server_facts *f, char *err,
                       size_t errlen)
{
    *f = (struct server_facts){.uptime_s = -1};
    for (int i = 0; i < 2; i++) {
        void *rv = NULL;
        if (redis_get_reply(c, &rv) != REDIS_OK || !rv) {
            snprintf(err, errlen, "redis %s: waiting for the answer to %s: %s", p->where,
                     i == 0 ? "INFO" : "CONFIG GET", c->errstr[0] ? c->errstr : "connection lost");
            return false;
        }
        redisReply *r = rv;
        char *why = i == 0 ? f->info_err : f->limit_err;
        if (i == 0 && r->type == REDIS_REPLY_STRING) {
            char v[32];
            info_field(r->str, (size_t)r->len, "uptime_in_seconds", v, sizeof v);
            char *e;
            long long up = strtoll(v, &e, 10);
            if (v[0] && !*e && up >= 0) f->uptime_s = up;
            else snprintf(why, sizeof f->info_err, "INFO server has no uptime_in_seconds");
        } else if (i == 1 && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                   is_str(r->element[1]) && limit_parse(r->element[1]->str, f)) {
            f->limit_known = true;
        } else if (r->type == REDIS_REPLY_ERROR) {
            snprintf(why, sizeof f->info_err, "%s refused: %.120s", i == 0 ? "INFO" : "CONFIG GET",
                     r->str ? r->str : "");
        } else {
            snprintf(why, sizeof f->info_err, "%s answered something else",
                     i == 0 ? "INFO" : "CONFIG GET");
        }
        freeReplyObject(r);
    }
    return true;
}

/* At the first connect after a session lost while the reader was behind
 * (p->suspect), with f from the new connection: was it Redis cutting the
 * subscriber off for passing client-output-buffer-limit pubsub? Redis tells
 * the subscriber nothing, and 7.0 keeps no count of it (7.2's
 * client_output_buffer_limit_disconnections counts every client's, with no
 * baseline here), so it is judged: not when the server started after the
 * lost session connected (uptime: restarted) or the sentinels switched the
 * master since, nor when the limit is off (hard and soft 0); otherwise most
 * likely yes: one source_overflow, one warning. */
static void overflow_judge(struct psub *p, const struct server_facts *f)
{
    struct overflow_suspect s = p->suspect;
    p->suspect.set = false;
    /* started after the lost session connected, for certain (uptime is
     * whole seconds at both ends, so it may read 1 just after a start: a
     * restart within two seconds of the connect is missed) */
    int64_t session_age = clock_mono_us() / 1000 - s.session_ms;
    const char *not_it = NULL;
    if (f->uptime_s >= 0 && (f->uptime_s + 1) * 1000 <= session_age)
        not_it = "Redis restarted since (INFO server uptime_in_seconds)";
    else if (p->watch && p->switch_seen != s.switch_seen)
        not_it = "the sentinels switched the master since";
    else if (f->limit_known && f->hard == 0 && f->soft == 0)
        not_it = "client-output-buffer-limit pubsub is off (0 0)";
    if (not_it) {
        log_info(COMPONENT, p->host->name,
                 "the reader was behind when the last connection was lost, but %s: an "
                 "ordinary connection loss, not a cut-off for falling behind", not_it);
        return;
    }
    atomic_fetch_add_explicit(&p->host->stats->source_overflow, 1, memory_order_relaxed);

    char limit[240], a[24], b[24], why[200];
    if (f->limit_known)
        snprintf(limit, sizeof limit, "client-output-buffer-limit pubsub %s %s %lld",
                 size_text(f->hard, a, sizeof a), size_text(f->soft, b, sizeof b), f->secs);
    else
        snprintf(limit, sizeof limit, "client-output-buffer-limit pubsub unknown: %s",
                 f->limit_err);
    if (s.waited_ms >= LAG_SUSPECT_WAIT_MS)
        snprintf(why, sizeof why, "The sink was not taking messages fast enough (queue full: "
                 "the reader waited %.1f s to hand messages over).", (double)s.waited_ms / 1000.0);
    else
        snprintf(why, sizeof why, "baton read more slowly than Redis published (behind for "
                 "%.1f s).", (double)s.behind_ms / 1000.0);
    /* the suggestion: at least 64mb 16mb 60, else twice the current one */
    long long hard = 64LL << 20, soft = 16LL << 20, secs = 60;
    if (f->limit_known) {
        if (f->hard * 2 > hard) hard = f->hard * 2;
        if (f->soft * 2 > soft) soft = f->soft * 2;
        if (f->secs > 0) secs = f->secs;
    }
    char restart[200] = "";
    if (f->uptime_s < 0)
        snprintf(restart, sizeof restart, " (%s: a restart could not be ruled out)", f->info_err);
    log_warn(COMPONENT, p->host->name,
             "Redis %s most likely closed the subscription because baton fell behind (%s): "
             "messages published while disconnected are lost. %s Raise the limit (CONFIG SET "
             "client-output-buffer-limit \"pubsub %s %s %lld\"), or set queue_policy = "
             "\"drop_oldest\" to drop (counted) instead of being disconnected.%s",
             p->where, limit, why, size_text(hard, a, sizeof a), size_text(soft, b, sizeof b), secs,
             restart);
}

/* Connects and subscribes; returns the context once every pattern and
 * channel is confirmed, or NULL with err filled. */
static redisContext *conn_open(struct psub *p, char *err, size_t errlen)
{
    if (p->ro.n_sentinels > 0 && p->watch == NULL) p->watch = redis_sentinel_watch_acquire(&p->ro);
    p->switch_seen = redis_sentinel_watch_count(p->watch);
    redisContext *c = redis_conn_open(&p->ro, err, errlen);
    if (!c) return NULL;
    p->session_ms = clock_mono_us() / 1000;
    pthread_mutex_lock(&p->lock);
    bool stopping = source_loop_stopping(&p->loop);
    if (!stopping) p->fd = c->fd; /* from now on stop() can interrupt us */
    pthread_mutex_unlock(&p->lock);
    if (stopping) {
        snprintf(err, errlen, "stopping");
        redisFree(c);
        return NULL;
    }
    /* after a session lost while behind, in the same round trip, before
     * the subscription: what overflow_judge needs */
    bool judge = p->suspect.set;
    if (judge) {
        redisAppendCommand(c, "INFO server");
        redisAppendCommand(c, "CONFIG GET client-output-buffer-limit");
    }
    if (p->pargc > 1) redisAppendCommandArgv(c, p->pargc, p->pargv, p->pargvlen);
    if (p->cargc > 1) redisAppendCommandArgv(c, p->cargc, p->cargv, p->cargvlen);
    if (!flush_output(c)) {
        snprintf(err, errlen, "redis %s: sending the subscription: %s", p->where, c->errstr);
        conn_close(p, c);
        return NULL;
    }
    if (judge) {
        struct server_facts facts;
        if (!read_facts(p, c, &facts, err, errlen)) {
            conn_close(p, c); /* judged at the next connect */
            return NULL;
        }
        overflow_judge(p, &facts);
    }
    /* from here on (the replies above were hiredis's own): a message
     * allocates nothing */
    reply_pool_attach(p->pool, c->reader);
    /* one confirmation per pattern and per channel; messages of the first
     * subscriptions may arrive between them and are forwarded as usual */
    int want_p = p->pargc - 1, want_c = p->cargc - 1;
    while (want_p > 0 || want_c > 0) {
        void *rv = NULL;
        if (redis_get_reply(c, &rv) != REDIS_OK || !rv) {
            /* one deadline per reply: "no answer within N ms" */
            snprintf(err, errlen, "redis %s: waiting for the subscription confirmation: %s",
                     p->where, c->errstr[0] ? c->errstr : "connection lost");
            conn_close(p, c);
            return NULL;
        }
        redisReply *r = rv;
        struct psub_event ev;
        enum psub_kind k = redis_psub_decode(r, &ev);
        if (k == PSUB_SUBSCRIBED) {
            if (ev.pattern_sub) want_p--;
            else want_c--;
        } else if (k == PSUB_MESSAGE || k == PSUB_PMESSAGE) {
            struct read_clock rc = read_clock_now();
            handle_message(p, &ev, &rc, false);
        } else {
            snprintf(err, errlen, "redis %s: subscription %s: %.*s", p->where,
                     k == PSUB_ERROR ? "refused" : "answered unexpectedly",
                     (int)(ev.payload_len > 160 ? 160 : ev.payload_len),
                     ev.payload ? ev.payload : "");
            reply_pool_put(r);
            conn_close(p, c);
            return NULL;
        }
        reply_pool_put(r);
    }
    return c;
}

/* Emitted deferred since the last flush: out now (before blocking). */
static void flush_deferred(struct psub *p)
{
    if (p->deferred) {
        p->deferred = 0;
        p->host->flush(p->host);
    }
}

/* A timerfd that ticks every ms (-1 when it cannot be made: the caller
 * falls back to poll's own timeout). The read loop waits in poll(2)
 * without a timeout: a timed poll arms and cancels a high-resolution timer
 * on every wait, which on a VM cost about a quarter of the consumer's CPU
 * per message at 1,000 msg/s. The tick keeps the silence clock (PING) and
 * the Sentinel watch for the price of one wake-up per interval. */
static int tick_open(int ms)
{
    if (ms <= 0) return -1;
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0) return -1;
    struct itimerspec its = {
        .it_interval = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L},
    };
    its.it_value = its.it_interval;
    if (timerfd_settime(fd, 0, &its, NULL) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* How long the read loop may wait without looking at the clock: the PING
 * interval, with sentinels at most SWITCH_POLL_MS; -1: no limit. */
static int conn_wait_ms(const struct psub *p)
{
    int wait = p->s->ping_interval_ms > 0 ? (int)p->s->ping_interval_ms : -1;
    if (p->watch && (wait < 0 || wait > SWITCH_POLL_MS)) wait = SWITCH_POLL_MS;
    return wait;
}

/* One read into hiredis's buffer (nowait: without blocking, *got 0 when
 * nothing was waiting). False, with err set, when the connection failed. */
static bool read_some(struct psub *p, redisContext *c, bool nowait, size_t *got, char *err,
                      size_t errlen)
{
    if ((nowait ? redis_buffer_read_nowait(c, got) : redis_buffer_read_got(c, got)) == REDIS_OK)
        return true;
    if (p->probed && atomic_load(&p->probe.dead))
        snprintf(err, errlen, "redis %s: no answer to PING within %lld ms (the process PINGs "
                 "each server on one of its connections)", p->where, (long long)p->s->ping_interval_ms);
    else
        snprintf(err, errlen, "redis %s: %s", p->where, c->errstr[0] ? c->errstr : "connection lost");
    return false;
}

/* After a read that brought got bytes: the read's clock, the silence
 * clock, whether a replay standby naps and whether the buffer came full. */
static void after_read(struct psub *p, size_t got, struct read_clock *read_at, int64_t *quiet_since,
                       bool *nap, bool *full)
{
    *read_at = read_clock_now();
    *quiet_since = read_at->mono_us / 1000;
    *nap = got >= STANDBY_NAP_MIN_BYTES && got < REDIS_READ_CHUNK && p->replay &&
           !p->host->replay_live(p->host);
    *full = got == REDIS_READ_CHUNK;
    if (p->probed) atomic_store_explicit(&p->probe.last_read_ms, *quiet_since, memory_order_relaxed);
}

/* Reads until the connection fails or stop is set. err says why it ended.
 * tfd: tick_open(wait) or -1. */
static void conn_read(struct psub *p, redisContext *c, int tfd, char *err, size_t errlen)
{
    int timeout = p->s->ping_interval_ms > 0 ? (int)p->s->ping_interval_ms : -1;
    /* with sentinels, wake at least every SWITCH_POLL_MS to look at the
     * +switch-master count; the PING keeps its own silence clock */
    int wait = conn_wait_ms(p);
    struct pollfd pfd[2] = {{.fd = c->fd, .events = POLLIN}, {.fd = tfd, .events = POLLIN}};
    int poll_timeout = tfd >= 0 || p->probed ? -1 : wait;
    int64_t quiet_since = clock_mono_ms();
    bool ping_out = false;
    struct read_clock read_at = read_clock_now();
    bool nap = false, full = false;
    /* the last read, not yet accounted for in p->lag (lag_read) */
    size_t lag_got = 0;
    p->lag = (struct lag){0};
    /* a message that began arriving must be complete within the command
     * timeout (a trickle would otherwise hold the connection forever);
     * 0: none in progress. Only looked at when a read completed nothing. */
    int64_t partial_since = 0;
    for (;;) {
        /* everything hiredis already holds, before blocking again */
        int completed = 0;
        for (;;) {
            void *rv = NULL;
            if (redis_next_reply(c, &rv) != REDIS_OK) {
                snprintf(err, errlen, "redis %s: protocol error: %s", p->where, c->errstr);
                return;
            }
            if (!rv) break;
            completed++;
            bool pong = false;
            handle_reply(p, rv, &pong, &read_at);
            if (pong) ping_out = false;
            reply_pool_put(rv);
        }
        flush_deferred(p); /* this read's messages, before we block again */
        if (lag_got) {
            int64_t read_ms = read_at.mono_us / 1000;
            lag_read(&p->lag, read_ms, lag_got, clock_mono_us() / 1000 - read_ms);
            lag_got = 0;
        }
        if (!redis_reply_pending(c)) {
            partial_since = 0;
        } else if (completed > 0 || partial_since == 0) {
            partial_since = read_at.mono_us / 1000;
        } else if (clock_mono_ms() - partial_since > p->s->conn.command_timeout_ms) {
            snprintf(err, errlen, "redis %s: no complete message within %" PRId64 " ms",
                     p->where, p->s->conn.command_timeout_ms);
            return;
        }
        if (atomic_load_explicit(&p->loop.stop, memory_order_relaxed)) {
            snprintf(err, errlen, "stopping");
            return;
        }
        if (p->watch && redis_sentinel_watch_count(p->watch) != p->switch_seen) {
            snprintf(err, errlen, "redis %s: the sentinels switched the master (+switch-master)",
                     p->where);
            return;
        }
        if (nap) {
            struct timespec ts = {0, STANDBY_NAP_US * 1000L};
            nanosleep(&ts, NULL);
            nap = false;
        }
        if (full) {
            /* the last read filled the buffer: more is usually waiting, so
             * read again without the poll(2) (at saturation most reads) */
            full = false;
            size_t got;
            if (!read_some(p, c, true, &got, err, errlen)) {
                lag_lost(p, c);
                return;
            }
            if (got > 0) {
                after_read(p, got, &read_at, &quiet_since, &nap, &full);
                lag_got = got;
                continue;
            }
        }
        int n = poll(pfd, tfd >= 0 ? 2 : 1, poll_timeout);
        if (n < 0) {
            if (errno == EINTR) continue;
            snprintf(err, errlen, "redis %s: poll: %s", p->where, strerror(errno));
            return;
        }
        bool tick = n == 0;
        if (tfd >= 0 && (pfd[1].revents & POLLIN)) {
            uint64_t ticks;
            if (read(tfd, &ticks, sizeof ticks) < 0 && errno != EAGAIN) {
                snprintf(err, errlen, "redis %s: timerfd: %s", p->where, strerror(errno));
                return;
            }
            tick = true;
        }
        if (pfd[0].revents) { /* data first: it may hold the PONG */
            size_t got;
            if (!read_some(p, c, false, &got, err, errlen)) {
                lag_lost(p, c);
                return;
            }
            after_read(p, got, &read_at, &quiet_since, &nap, &full);
            lag_got = got;
            continue; /* the silence clock was just reset */
        }
        if (!tick) continue;
        if (partial_since && clock_mono_ms() - partial_since > p->s->conn.command_timeout_ms) {
            snprintf(err, errlen, "redis %s: no complete message within %" PRId64 " ms",
                     p->where, p->s->conn.command_timeout_ms);
            return;
        }
        if (timeout < 0 || clock_mono_ms() - quiet_since < timeout) continue;
        quiet_since = clock_mono_ms();
        if (ping_out) {
            snprintf(err, errlen, "redis %s: no answer to PING within %d ms", p->where, timeout);
            return;
        }
        redisAppendCommand(c, "PING");
        if (!flush_output(c)) {
            snprintf(err, errlen, "redis %s: sending PING: %s", p->where, c->errstr);
            return;
        }
        ping_out = true;
    }
}

static void conn_run(struct psub *p, redisContext *c, char *err, size_t errlen)
{
    /* the prober PINGs for us: not with Sentinel (the tick also watches
     * for a switch) and not over TLS (kept to the per-connection PING; not
     * tried with the bridge yet) */
    p->probed = p->ro.n_sentinels == 0 && !p->s->tls.present && p->s->ping_interval_ms > 0 &&
                probe_join(&p->probe, p->s->conn.host, (int)p->s->conn.port, p->s->ping_interval_ms, c->fd);
    if (p->probed) {
        /* a flow that dies alone (a middlebox) is left to TCP keepalive
         * (redis_conn_open enables it) */
        conn_read(p, c, -1, err, errlen);
        probe_leave(&p->probe);
        p->probed = false;
    } else {
        int tfd = tick_open(conn_wait_ms(p));
        conn_read(p, c, tfd, err, errlen);
        if (tfd >= 0) close(tfd);
    }
    flush_deferred(p); /* whatever ended the loop, nothing stays unannounced */
}

/* The reconnect delay; with sentinels it ends early when they switch the
 * master (the count moved since the last attempt): no backoff left over
 * from the outage delays the resubscription on the new master. */
static void loop_wait(void *ep, int64_t ms, const atomic_bool *stop)
{
    struct psub *p = ep;
    if (p->watch == NULL) {
        sleep_ms_cancellable(ms, stop);
        return;
    }
    int64_t end = clock_mono_ms() + ms;
    for (int64_t left = ms; left > 0 && !atomic_load(stop); left = end - clock_mono_ms()) {
        if (redis_sentinel_watch_count(p->watch) != p->switch_seen) return;
        sleep_ms_cancellable(left < SWITCH_POLL_MS / 5 ? left : SWITCH_POLL_MS / 5, stop);
    }
}

static int loop_open(void *ep, char *err, size_t errlen)
{
    struct psub *p = ep;
    p->conn = conn_open(p, err, errlen);
    return p->conn ? 0 : -1;
}

static enum source_end loop_run(void *ep, struct source_loop *l, char *err, size_t errlen)
{
    struct psub *p = ep;
    conn_run(p, p->conn, err, errlen);
    return source_loop_stopping(l) ? SOURCE_STOPPED : SOURCE_LOST;
}

static void loop_close(void *ep)
{
    struct psub *p = ep;
    conn_close(p, p->conn);
    p->conn = NULL;
}

static void loop_up(void *ep, bool first, int64_t down_ms)
{
    struct psub *p = ep;
    const char *name = p->host->name;
    if (first) {
        log_info(COMPONENT, name, "subscribed on %s: %d pattern(s), %d channel(s)", p->where,
                 p->pargc - 1, p->cargc - 1);
    } else if (p->replay) {
        /* the ring has a hole here (the loop told the gateway); the ids
         * restart their context */
        replay_idctx_reset(&p->idctx);
        log_info(COMPONENT, name,
                 "resubscribed on %s after %" PRId64 " ms (messages published "
                 "meanwhile are missing from this replica's replay ring)",
                 p->where, down_ms);
    } else {
        log_info(COMPONENT, name,
                 "resubscribed on %s after %" PRId64 " ms (messages published "
                 "meanwhile are lost: pub/sub keeps nothing)",
                 p->where, down_ms);
    }
}

static const struct source_loop_ops psub_loop_ops = {
    .open = loop_open,
    .run = loop_run,
    .close = loop_close,
    .up = loop_up,
    .wait = loop_wait,
};

static void build_argv(const char *cmd, const struct strlist *l, const char ***argv,
                       size_t **argvlen, int *argc)
{
    *argc = (int)l->n + 1;
    *argv = xcalloc(l->n + 1, sizeof **argv);
    *argvlen = xcalloc(l->n + 1, sizeof **argvlen);
    (*argv)[0] = cmd;
    (*argvlen)[0] = strlen(cmd);
    for (size_t i = 0; i < l->n; i++) {
        (*argv)[i + 1] = l->v[i];
        (*argvlen)[i + 1] = strlen(l->v[i]);
    }
}

static void psub_destroy(void *ep);

static void *psub_create(const void *settings, struct endpoint_host *host, char *err,
                         size_t errlen)
{
    const struct redis_psub_settings *s = settings;
    char msg[400];
    if (redis_psub_validate(s, host->guard, true, msg, sizeof msg)) {
        snprintf(err, errlen, "endpoint '%s': %s", host->name, msg);
        return NULL;
    }
    struct baton_redis_opts ro = {0};
    if (redis_conn_settings_apply(&ro, &s->conn, msg, sizeof msg)) {
        snprintf(err, errlen, "endpoint '%s': password: %s", host->name, msg);
        return NULL;
    }
    struct psub *p = xcalloc(1, sizeof *p);
    p->s = s;
    p->host = host;
    p->replay = host->replay;
    p->ro = ro;
    p->ro.max_reply_bytes = s->max_reply_bytes > 0 ? s->max_reply_bytes : REDIS_MAX_REPLY_SOURCE;
    redis_settings_apply(&p->ro, &s->sentinels, s->master_name, &s->tls);
    if (p->ro.n_sentinels)
        snprintf(p->where, sizeof p->where, "sentinel master %.120s db %d", p->ro.master_name,
                 p->ro.db);
    else
        snprintf(p->where, sizeof p->where, "%.150s:%d db %d", p->ro.host, p->ro.port, p->ro.db);
    build_argv("PSUBSCRIBE", &s->patterns, &p->pargv, &p->pargvlen, &p->pargc);
    build_argv("SUBSCRIBE", &s->channels, &p->cargv, &p->cargvlen, &p->cargc);
    pthread_mutex_init(&p->lock, NULL);
    p->fd = -1;
    source_loop_init(&p->loop, &psub_loop_ops, p, host, COMPONENT, "psub", s->reconnect_min_ms,
                     s->reconnect_max_ms);
    envelope_init(&p->env);
    p->pool = reply_pool_create();
    if (!p->pool) {
        snprintf(err, errlen, "endpoint '%s': out of memory", host->name);
        psub_destroy(p);
        return NULL;
    }
    return p;
}

static int psub_start(void *ep)
{
    struct psub *p = ep;
    p->fd = -1;
    char err[1024];
    if (source_loop_start(&p->loop, err, sizeof err) < 0) {
        log_error(COMPONENT, p->host->name, "cannot subscribe: %s", err);
        return -1;
    }
    return 0;
}

static void psub_stop(void *ep)
{
    struct psub *p = ep;
    if (!source_loop_running(&p->loop)) return;
    source_loop_request_stop(&p->loop);
    pthread_mutex_lock(&p->lock);
    if (p->fd >= 0) shutdown(p->fd, SHUT_RDWR); /* wakes the poll/read at once */
    pthread_mutex_unlock(&p->lock);
    source_loop_join(&p->loop);
    log_info(COMPONENT, p->host->name, "unsubscribed from %s", p->where);
}

static void psub_destroy(void *ep)
{
    struct psub *p = ep;
    if (!p) return;
    psub_stop(p);
    envelope_free(&p->env);
    reply_pool_destroy(p->pool); /* after the consumer freed its context */
    free(p->pargv);
    free(p->pargvlen);
    free(p->cargv);
    free(p->cargvlen);
    redis_sentinel_watch_release(p->watch);
    redis_opts_clear(&p->ro);
    source_loop_destroy(&p->loop);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

static enum guard_kind psub_auto_guard(const void *settings)
{
    (void)settings;
    return GUARD_ACTIVE;
}

static int psub_validate(const void *settings, enum guard_kind guard, bool force, char *msg,
                         size_t msglen)
{
    return redis_psub_validate(settings, guard, force, msg, msglen);
}

/* One Redis node sends every subscriber the same messages in the same
 * order: every replica's ring lines up with the leader's stream. */
static struct message *psub_replay_render(void *ep, struct envelope *scratch,
                                          const struct message *raw, uint64_t epoch,
                                          bool replayed)
{
    const struct psub *p = ep;
    return redis_psub_render(p->host->name, scratch, raw, epoch, replayed);
}

static int psub_replay_check(const void *settings, char *msg, size_t msglen)
{
    (void)settings;
    (void)msg;
    (void)msglen;
    return 0;
}

static int psub_check_file(void *settings, const config_setting_t *root, const char *base_dir,
                           const char *what, struct config_error *err)
{
    struct redis_psub_settings *s = settings;
    return redis_settings_check(root, &s->sentinels, s->master_name, &s->tls, base_dir, what, err);
}

const struct endpoint_ops ep_redis_psub_ops = {
    .type = TYPE_NAME,
    .settings = psub_defs,
    .settings_size = sizeof(struct redis_psub_settings),
    .auto_guard = psub_auto_guard,
    .validate = psub_validate,
    .check_file = psub_check_file,
    .replay_check = psub_replay_check,
    .replay_render = psub_replay_render,
    .create = psub_create,
    .start = psub_start,
    .stop = psub_stop,
    .destroy = psub_destroy,
};
