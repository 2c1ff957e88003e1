/* schedule: cron triggers (6-field cron with seconds, see cron.h) that fire
 * once per planned slot across all replicas.
 *
 * Every replica runs its own clock. The endpoint thread sleeps until the
 * next planned time (a condition variable on CLOCK_REALTIME: a stop wakes it
 * at once, a clock jump is noticed within a second), then takes as its slot
 * the latest planned time <= now, never the time of execution. Slots passed
 * over while the process was paused or the clock jumped are not replayed:
 * they are counted and logged. With guard "once" (the default) the slot goes
 * through a OnceGuard (key = slot in Unix seconds, scope
 * "schedule:<owner>:<name>"); only the replica that wins it emits. Backend
 * failure: fail-closed by default, so the tick is skipped with a warning and
 * the next one tries again. A claim answered more than max_late_ms after its
 * slot is not fired (see fire()). A drained replica (baton drain) claims
 * no slot until resumed: the others claim them. Guard "active": only the
 * leader runs the clock (a drain steps it down like any leased endpoint).
 * Guard "none" (forced): every replica fires every slot, drained or not.
 *
 * Envelope: {"endpoint":..,"type":"schedule","epoch":..,"id":"<name>:<slot>",
 *   "received_at":..,"slot":1733148000,"slot_time":"2024-12-02T14:00:00Z",
 *   "cron":"0 0 * * * *"[,"timezone":"Europe/Berlin"][,"payload":"..."]} */
#include <ctype.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "endpoints/cron.h"
#include "endpoints/endpoint.h"
#include "baton/once_guard.h"
#include "baton/scope.h"
#include "common/envelope.h"
#include "common/log.h"
#include "common/util.h"

#define COMPONENT "schedule"
#define MISSED_COUNT_CAP 1000000

struct schedule_settings {
    char *cron;
    char *timezone;
    char *payload;
    int payload_format; /* index into payload_formats */
    int64_t max_late_ms;
};

static const char *const payload_formats[] = {"text", "json", NULL};
enum { PAYLOAD_TEXT = 0, PAYLOAD_JSON = 1 };

static const struct setting_def schedule_defs[] = {
    {"cron", SETTING_STRING, offsetof(struct schedule_settings, cron), .required = true,
     .help = "6-field cron \"sec min hour dom month dow\" or @every/@hourly/@daily/@weekly/"
             "@monthly/@yearly, e.g. \"0 */5 * * * *\""},
    {"timezone", SETTING_STRING, offsetof(struct schedule_settings, timezone), .def = "UTC",
     .help = "\"UTC\" or an IANA zone name under /usr/share/zoneinfo, e.g. \"Europe/Berlin\""},
    {"payload", SETTING_STRING, offsetof(struct schedule_settings, payload),
     .help = "text sent as the envelope's \"payload\" with every tick (optional)"},
    {"payload_format", SETTING_ENUM, offsetof(struct schedule_settings, payload_format),
     .def = "text", .choices = payload_formats,
     .help = "\"text\" or \"json\" (payload must then be valid JSON; checked at load time)"},
    {"max_late_ms", SETTING_INT, offsetof(struct schedule_settings, max_late_ms), .def = "2000",
     .min = 1, .max = 86400000,
     .help = "guard \"once\": a slot whose claim is answered later than this after its planned "
             "time is not fired (counted as missed): a claim that late may have been taken on a "
             "locker that lost its keys since the slot, after another replica fired it"},
    SETTINGS_END,
};

/* ------------------------------------------------------------------------ */
/* A strict JSON validator (RFC 8259), for payload_format = "json". */

struct jv {
    const char *p, *end;
    const char *why;
    int depth;
};

static void jv_ws(struct jv *v)
{
    while (v->p < v->end && (*v->p == ' ' || *v->p == '\t' || *v->p == '\n' || *v->p == '\r')) v->p++;
}

static bool jv_value(struct jv *v);

static bool jv_lit(struct jv *v, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(v->end - v->p) < n || memcmp(v->p, lit, n) != 0) {
        v->why = "unexpected token";
        return false;
    }
    v->p += n;
    return true;
}

static bool jv_string(struct jv *v)
{
    const char *s = ++v->p;
    while (v->p < v->end && *v->p != '"') {
        unsigned char c = (unsigned char)*v->p;
        if (c < 0x20) {
            v->why = "control character in a string";
            return false;
        }
        if (c == '\\') {
            v->p++;
            if (v->p >= v->end) break;
            if (*v->p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (v->p + i >= v->end || !isxdigit((unsigned char)v->p[i])) {
                        v->why = "bad \\u escape";
                        return false;
                    }
                v->p += 4;
            } else if (!strchr("\"\\/bfnrt", *v->p)) {
                v->why = "bad escape";
                return false;
            }
        }
        v->p++;
    }
    if (v->p >= v->end) {
        v->why = "unterminated string";
        return false;
    }
    if (!utf8_valid(s, (size_t)(v->p - s))) {
        v->why = "invalid UTF-8 in a string";
        return false;
    }
    v->p++;
    return true;
}

static bool jv_number(struct jv *v)
{
    const char *p = v->p;
    if (p < v->end && *p == '-') p++;
    if (p < v->end && *p == '0') p++;
    else if (p < v->end && *p >= '1' && *p <= '9')
        while (p < v->end && isdigit((unsigned char)*p)) p++;
    else goto bad;
    if (p < v->end && *p == '.') {
        p++;
        if (p >= v->end || !isdigit((unsigned char)*p)) goto bad;
        while (p < v->end && isdigit((unsigned char)*p)) p++;
    }
    if (p < v->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < v->end && (*p == '+' || *p == '-')) p++;
        if (p >= v->end || !isdigit((unsigned char)*p)) goto bad;
        while (p < v->end && isdigit((unsigned char)*p)) p++;
    }
    v->p = p;
    return true;
bad:
    v->why = "bad number";
    return false;
}

static bool jv_container(struct jv *v, char close)
{
    if (++v->depth > 64) {
        v->why = "nested deeper than 64";
        return false;
    }
    v->p++;
    jv_ws(v);
    if (v->p < v->end && *v->p == close) {
        v->p++;
        v->depth--;
        return true;
    }
    for (;;) {
        jv_ws(v);
        if (close == '}') {
            if (v->p >= v->end || *v->p != '"') {
                v->why = "expected a string key";
                return false;
            }
            if (!jv_string(v)) return false;
            jv_ws(v);
            if (v->p >= v->end || *v->p != ':') {
                v->why = "expected ':'";
                return false;
            }
            v->p++;
        }
        if (!jv_value(v)) return false;
        jv_ws(v);
        if (v->p < v->end && *v->p == ',') {
            v->p++;
            continue;
        }
        if (v->p < v->end && *v->p == close) {
            v->p++;
            v->depth--;
            return true;
        }
        v->why = close == '}' ? "expected ',' or '}'" : "expected ',' or ']'";
        return false;
    }
}

static bool jv_value(struct jv *v)
{
    jv_ws(v);
    if (v->p >= v->end) {
        v->why = "unexpected end";
        return false;
    }
    switch (*v->p) {
    case '{': return jv_container(v, '}');
    case '[': return jv_container(v, ']');
    case '"': return jv_string(v);
    case 't': return jv_lit(v, "true");
    case 'f': return jv_lit(v, "false");
    case 'n': return jv_lit(v, "null");
    default: return jv_number(v);
    }
}

/* 0, or -1 with msg naming the offset and the problem. */
static int json_check(const char *s, char *msg, size_t msglen)
{
    struct jv v = {.p = s, .end = s + strlen(s)};
    if (jv_value(&v)) {
        jv_ws(&v);
        if (v.p == v.end) return 0;
        v.why = "trailing characters after the value";
    }
    snprintf(msg, msglen, "%s at offset %td", v.why ? v.why : "invalid", v.p - s);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* The endpoint */

struct schedule {
    const struct schedule_settings *s;
    struct endpoint_host *host;
    struct cron_expr *expr;
    struct baton_once_guard *once; /* GUARD_ONCE only */
    bool utc;

    pthread_t thread;
    bool running;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_REALTIME: deadlines are wall-clock slots */
    bool stop;         /* under mu */

    struct envelope env; /* consumer thread only */
    atomic_ullong fired, skipped_guard, skipped_backend, skipped_drained, missed;
    bool said_drained; /* schedule thread only: "left to the others" logged since the drain began */
    struct ratelimit rl_late; /* consumer thread only */
};

static int schedule_check(const struct schedule_settings *s, char *msg, size_t msglen)
{
    char err[CRON_ERR_MAX];
    struct cron_expr *e = cron_parse(s->cron, s->timezone, err, sizeof err);
    if (!e) {
        snprintf(msg, msglen, "%s", err);
        return -1;
    }
    cron_free(e);
    if (s->payload_format == PAYLOAD_JSON) {
        if (!s->payload) {
            snprintf(msg, msglen, "payload_format = \"json\" needs a 'payload'");
            return -1;
        }
        char why[128];
        if (json_check(s->payload, why, sizeof why)) {
            snprintf(msg, msglen, "payload is not valid JSON (payload_format = \"json\"): %s", why);
            return -1;
        }
    }
    if (s->payload && !utf8_valid(s->payload, strlen(s->payload))) {
        snprintf(msg, msglen, "payload is not valid UTF-8");
        return -1;
    }
    return 0;
}

static int schedule_validate(const void *settings, enum guard_kind guard, bool force, char *msg,
                             size_t msglen)
{
    if (guard == GUARD_NONE && !force) {
        snprintf(msg, msglen,
                 "guard \"none\" makes every replica fire every slot; use \"once\" (the default) or set "
                 "force_guard = true if that is really wanted");
        return -1;
    }
    return schedule_check(settings, msg, msglen);
}

static enum guard_kind schedule_auto_guard(const void *settings)
{
    (void)settings;
    return GUARD_ONCE;
}

static void *schedule_create(const void *settings, struct endpoint_host *host, char *err, size_t errlen)
{
    const struct schedule_settings *s = settings;
    char msg[400];
    if (schedule_check(s, msg, sizeof msg)) {
        snprintf(err, errlen, "%s", msg);
        return NULL;
    }
    struct schedule *sc = xcalloc(1, sizeof *sc);
    sc->s = s;
    sc->host = host;
    char cerr[CRON_ERR_MAX];
    sc->expr = cron_parse(s->cron, s->timezone, cerr, sizeof cerr);
    if (!sc->expr) { /* checked above; only a vanished zone file gets here */
        snprintf(err, errlen, "cron: %s", cerr);
        free(sc);
        return NULL;
    }
    sc->utc = strcmp(cron_zone_name(sc->expr), "UTC") == 0;
    if (host->guard == GUARD_ONCE) {
        char scope[BATON_GUARD_KEY_MAX];
        const char *sp = host->scope;
        if (!sp || !sp[0]) {
            if (baton_scope(scope, sizeof scope, "schedule", host->owner, host->name) < 0) {
                snprintf(err, errlen, "guard scope too long");
                cron_free(sc->expr);
                free(sc);
                return NULL;
            }
            sp = scope;
        }
        struct baton_once_guard_options o = {
            .prefix = host->key_prefix,
            .ttl_ms = host->once_ttl_ms,
            .fail_open = host->once_fail_open,
            .log_name = host->name,
        };
        sc->once = baton_once_guard_create(host->locker, sp, &o);
        if (!sc->once) {
            snprintf(err, errlen, "once guard %s: out of memory", sp);
            cron_free(sc->expr);
            free(sc);
            return NULL;
        }
        host->once_stats = baton_once_guard_stats(sc->once);
    }
    pthread_mutex_init(&sc->mu, NULL);
    cond_init_clock(&sc->cv, CLOCK_REALTIME);
    envelope_init(&sc->env);
    return sc;
}

/* Waits until the wall clock reaches deadline_ms or a stop; true = stop.
 * Waits at most a second at a time, so a clock jump is seen promptly. */
static bool wait_until_wall(struct schedule *sc, int64_t deadline_ms)
{
    pthread_mutex_lock(&sc->mu);
    for (;;) {
        if (sc->stop) break;
        int64_t now = clock_wall_ms();
        if (now >= deadline_ms) break;
        int64_t until = deadline_ms < now + 1000 ? deadline_ms : now + 1000;
        struct timespec ts = {.tv_sec = (time_t)(until / 1000), .tv_nsec = (long)(until % 1000) * 1000000L};
        pthread_cond_timedwait(&sc->cv, &sc->mu, &ts);
    }
    bool stop = sc->stop;
    pthread_mutex_unlock(&sc->mu);
    return stop;
}

/* A claim made long after its slot cannot be trusted: if the locker lost
 * its keys since the slot (Redis restarted without persistence, failed over
 * to a replica that had not received the key), the slot's key is gone and a
 * late claim wins it again although another replica fired the slot on time.
 * Found by tests/compose: a replica cut off the network across a slot had its
 * claim wait behind the side connection's reconnects until after a Redis
 * restart, and fired a heartbeat slot a second time. So a slot is fired only
 * when its claim was answered within max_late_ms of the slot's planned time
 * (a late wake-up, a paused process, a slow locker); otherwise it counts as
 * missed (at most once per slot: a slot may be lost, never repeated). */
static bool too_late(struct schedule *sc, int64_t slot, const char *key, const char *when, bool claimed)
{
    int64_t late = clock_wall_ms() - slot * 1000;
    if (late <= sc->s->max_late_ms) return false;
    atomic_fetch_add(&sc->missed, 1);
    long long suppressed = 0;
    if (ratelimit_ok(&sc->rl_late, 1000, &suppressed))
        log_warn(COMPONENT, sc->host->name,
                 "slot %s (%s) not fired: %s %lld ms after its time, past max_late_ms %lld (the locker "
                 "may have lost the slot's key meanwhile, after another replica fired it); counted as "
                 "missed (%lld similar suppressed)",
                 key, when, claimed ? "its claim was answered" : "reached", (long long)late,
                 (long long)sc->s->max_late_ms, suppressed);
    return true;
}

static void fire(struct schedule *sc, int64_t slot)
{
    struct endpoint_host *h = sc->host;
    char key[32];
    snprintf(key, sizeof key, "%" PRId64, slot);
    char when[40];
    cron_format_time(sc->expr, slot, when, sizeof when);
    if (sc->once) {
        /* drained (baton drain): not claimed, so another replica claims it */
        if (h->draining && h->draining(h)) {
            atomic_fetch_add(&sc->skipped_drained, 1);
            if (!sc->said_drained)
                log_info(COMPONENT, h->name, "slot %s (%s) left to the other replicas: this one is drained "
                         "(further slots until baton resume: debug)", key, when);
            else
                log_debug(COMPONENT, h->name, "slot %s (%s) left to the other replicas (drained)", key, when);
            sc->said_drained = true;
            return;
        }
        sc->said_drained = false;
        if (too_late(sc, slot, key, when, false)) return; /* not claimed either */
        const struct baton_once_guard_stats *gs = baton_once_guard_stats(sc->once);
        unsigned long long errs = atomic_load(&gs->backend_errors);
        bool ok = baton_once_guard_allow(sc->once, key);
        bool backend_failed = atomic_load(&gs->backend_errors) != errs;
        if (backend_failed) atomic_fetch_add(&h->stats->source_errors, 1);
        if (!ok) {
            if (backend_failed) {
                atomic_fetch_add(&sc->skipped_backend, 1);
                log_warn(COMPONENT, h->name, "slot %s (%s) skipped: locker unreachable (fail-closed)", key, when);
            } else {
                atomic_fetch_add(&sc->skipped_guard, 1);
                log_debug(COMPONENT, h->name, "slot %s (%s) fired by another replica", key, when);
            }
            return;
        }
        if (backend_failed)
            log_warn(COMPONENT, h->name, "slot %s (%s) fired without the locker (fail-open)", key, when);
        else if (too_late(sc, slot, key, when, true))
            return;
    }
    char id[MESSAGE_ID_MAX];
    snprintf(id, sizeof id, "%s:%s", h->name, key);
    struct envelope *e = &sc->env;
    envelope_begin(e, h->name, h->type, h->epoch(h), id, clock_wall_ms());
    /* no ordering key (0, issue 36): the endpoint's one key, slots in order */
    envelope_i64(e, "slot", slot);
    envelope_strz(e, "slot_time", when);
    envelope_strz(e, "cron", sc->s->cron);
    if (!sc->utc) envelope_strz(e, "timezone", cron_zone_name(sc->expr));
    if (sc->s->payload) envelope_payload(e, sc->s->payload, strlen(sc->s->payload));
    struct message *m = envelope_finish(e);
    atomic_fetch_add(&sc->fired, 1);
    log_debug(COMPONENT, h->name, "slot %s (%s) fired", key, when);
    h->emit(h, m); /* drops are counted and logged by the host */
}

static void *schedule_main(void *arg)
{
    struct schedule *sc = arg;
    const char *name = sc->host->name;
    /* Start after the current second: a slot that already began is not
     * fired late by a replica that just started. */
    int64_t last = clock_wall_ms() / 1000;
    for (;;) {
        int64_t next = cron_next(sc->expr, last);
        if (next < 0) {
            log_error(COMPONENT, name, "cron \"%s\" has no further slot; the schedule stops", sc->s->cron);
            break;
        }
        if (wait_until_wall(sc, next * 1000)) break;
        int64_t now = clock_wall_ms() / 1000;
        int64_t skipped = 0;
        int64_t slot = cron_latest(sc->expr, last, now, &skipped, MISSED_COUNT_CAP);
        if (slot < 0) continue; /* the clock went back meanwhile */
        if (skipped > 0) {
            atomic_fetch_add(&sc->missed, (unsigned long long)skipped);
            char a[40], b[40];
            cron_format_time(sc->expr, next, a, sizeof a);
            cron_format_time(sc->expr, slot, b, sizeof b);
            log_warn(COMPONENT, name,
                     "%s%" PRId64 " missed slot(s) from %s not replayed (process paused or clock jumped); "
                     "firing the latest, %s",
                     skipped >= MISSED_COUNT_CAP ? "at least " : "", skipped, a, b);
        }
        fire(sc, slot);
        last = slot;
    }
    return NULL;
}

static int schedule_start(void *ep)
{
    struct schedule *sc = ep;
    if (sc->running) return 0;
    pthread_mutex_lock(&sc->mu);
    sc->stop = false;
    pthread_mutex_unlock(&sc->mu);
    if (pthread_create(&sc->thread, NULL, schedule_main, sc) != 0) {
        log_error(COMPONENT, sc->host->name, "cannot start the schedule thread");
        return -1;
    }
    thread_name(sc->thread, "sched", sc->host->name);
    sc->running = true;
    int64_t next = cron_next(sc->expr, clock_wall_ms() / 1000);
    char when[40] = "never";
    if (next >= 0) cron_format_time(sc->expr, next, when, sizeof when);
    log_info(COMPONENT, sc->host->name, "started: cron \"%s\" in %s, guard %s, next slot %s", sc->s->cron,
             cron_zone_name(sc->expr), guard_kind_name(sc->host->guard), when);
    return 0;
}

static void schedule_stop(void *ep)
{
    struct schedule *sc = ep;
    if (!sc->running) return;
    pthread_mutex_lock(&sc->mu);
    sc->stop = true;
    pthread_cond_broadcast(&sc->cv);
    pthread_mutex_unlock(&sc->mu);
    pthread_join(sc->thread, NULL);
    sc->running = false;
    log_info(COMPONENT, sc->host->name, "stopped: %llu fired, %llu taken by other replicas, %llu skipped "
             "(locker unreachable), %llu left to the others while drained, %llu missed",
             (unsigned long long)atomic_load(&sc->fired), (unsigned long long)atomic_load(&sc->skipped_guard),
             (unsigned long long)atomic_load(&sc->skipped_backend),
             (unsigned long long)atomic_load(&sc->skipped_drained), (unsigned long long)atomic_load(&sc->missed));
}

static void schedule_destroy(void *ep)
{
    struct schedule *sc = ep;
    if (!sc) return;
    schedule_stop(sc);
    if (sc->once) baton_once_guard_destroy(sc->once);
    cron_free(sc->expr);
    envelope_free(&sc->env);
    pthread_cond_destroy(&sc->cv);
    pthread_mutex_destroy(&sc->mu);
    free(sc);
}

const struct endpoint_ops ep_schedule_ops = {
    .type = "schedule",
    .settings = schedule_defs,
    .settings_size = sizeof(struct schedule_settings),
    .auto_guard = schedule_auto_guard,
    .validate = schedule_validate,
    .create = schedule_create,
    .start = schedule_start,
    .stop = schedule_stop,
    .destroy = schedule_destroy,
};
