/* Redis locker (hiredis, blocking API).
 *
 * Three connections, each with its own lazy connect and reconnect:
 *
 * - Lease connection (one redisContext under lease.mu): try_lock, renew,
 *   unlock, check and announce_release only, so nothing else can delay lease
 *   traffic. A command that finds it broken (no reply, I/O error, timeout)
 *   frees it, bumps the generation and returns BATON_LOCKER_ERR with the reason;
 *   the next call reconnects (and bumps the generation again). Acquire,
 *   unlock, renew and check are Lua scripts, loaded on each connect in one
 *   pipelined round trip and called by EVALSHA, falling back to EVAL (and
 *   reloading) on NOSCRIPT.
 *
 * - Side connection (under side.mu): claim (OnceGuard), holder (status pages),
 *   ping (readiness probes) and the shared state beside a lease: fenced_set
 *   (a Lua script, loaded on each connect of the side connection and called
 *   by EVALSHA like the lease scripts) and shared_get. Its breaks and
 *   reconnects never change the generation: that counter is about the lease
 *   connection and the subscriber only.
 *
 * - Subscriber connection: created lazily (first release_seq/wait_release,
 *   or first acquisition or renewal, so that a holder notices a Redis restart
 *   between renewals), owned by its own thread, which SUBSCRIBEs to
 *   "<key>:released" for each key watched and counts, per key, the
 *   announcements it sees (release_seq). A re-established subscription
 *   advances every count too (announcements may have been missed while it
 *   was down), so a standby comparing counts cannot miss a release. When it
 *   sees its connection break it bumps the generation: the guard then
 *   verifies its lease at once instead of at the next renewal.
 *
 * Connections name themselves (CLIENT SETNAME baton-lease / baton-side /
 * baton-sub, best effort) so that CLIENT LIST tells them apart.
 *
 * Sentinel (opts.n_sentinels > 0): every connect asks the sentinels for the
 * master and checks its ROLE (redis_conn_open_ex). Failovers are followed
 * two ways: an error reply READONLY, MASTERDOWN or LOADING counts as a
 * broken connection (freed; on the lease connection the generation moves, so
 * the guard verifies its token on the next master), and the process's
 * +switch-master watcher (redis/sentinel.h) counts switches: that
 * count is part of the generation, and each connection made before the last
 * switch is dropped and reopened (rediscovering the master) before its next
 * use. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "guard/locker.h"
#include "redis/open.h"
#include "redis/sentinel.h"
#include "base/glog.h"
#include "guard/locker_redis_private.h"
#include "base/util.h"

#define EPOCH_KEY_MIN_TTL_MS (24LL * 3600 * 1000)

/* The "<key>:epoch" expiry set with a lease of ttl_ms. */
static int64_t epoch_ttl_ms(int64_t ttl_ms)
{
    return ttl_ms * 2 > EPOCH_KEY_MIN_TTL_MS ? ttl_ms * 2 : EPOCH_KEY_MIN_TTL_MS;
}

/* Why a token script answered v (0 or 2) instead of 1. */
static const char *token_lost_text(long long v)
{
    return v == 2 ? "held with another token" : "not held (expired or released)";
}

/* KEYS[1] lock key, KEYS[2] epoch key; ARGV[1] token, ARGV[2] ttl ms,
 * ARGV[3] epoch key ttl ms, ARGV[4] holder ("host pid N", stored beside the
 * lock as <key>:holder with the same expiry, for `baton status`). Returns
 * -2 - PTTL when held elsewhere (so a standby knows when to look again), else
 * the epoch: max(stored + 1, TIME in microseconds) -- the design's "ms x 1000"
 * at full resolution, so a data loss within the same millisecond as the last
 * acquisition still yields a larger epoch. Types are checked, and TIME and the
 * stored epoch read, before any write, so a wrong-typed key or a command the
 * user's ACL refuses never leaves a half-done acquisition behind. */
static const char SCRIPT_ACQUIRE[] =
    "if redis.replicate_commands then redis.replicate_commands() end\n"
    "local t1 = redis.call('TYPE', KEYS[1]).ok\n"
    "if t1 ~= 'none' and t1 ~= 'string' then\n"
    "  return redis.error_reply('WRONGTYPE lock key ' .. KEYS[1] .. ' holds a ' .. t1)\n"
    "end\n"
    "local t2 = redis.call('TYPE', KEYS[2]).ok\n"
    "if t2 ~= 'none' and t2 ~= 'string' then\n"
    "  return redis.error_reply('WRONGTYPE epoch key ' .. KEYS[2] .. ' holds a ' .. t2)\n"
    "end\n"
    "local now = redis.call('TIME')\n"
    "local stored = redis.call('GET', KEYS[2])\n"
    "if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
    "  local p = redis.call('PTTL', KEYS[1])\n"
    "  if p < 0 then p = 0 end\n"
    "  return -2 - p\n"
    "end\n"
    "redis.call('SET', KEYS[1] .. ':holder', ARGV[4], 'PX', ARGV[2])\n"
    "local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])\n"
    "local e = (tonumber(stored or '0') or 0) + 1\n"
    "if floor > e then e = floor end\n"
    "redis.call('SET', KEYS[2], string.format('%.0f', e), 'PX', ARGV[3])\n"
    "return e\n";

/* 1 = done, 0 = key absent, 2 = key holds another token. GET raises
 * WRONGTYPE on a non-string key. */
static const char SCRIPT_UNLOCK[] =
    "local v = redis.call('GET', KEYS[1])\n"
    "if v == ARGV[1] then redis.call('DEL', KEYS[1], KEYS[1] .. ':holder') return 1 end\n"
    "if v then return 2 end\n"
    "return 0\n";
/* KEYS[1] lock key, KEYS[2] epoch key; ARGV[1] token, ARGV[2] ttl ms,
 * ARGV[3] epoch key ttl ms (max(2 x ttl, 24 h), as at acquisition): the epoch
 * key never expires while the lease is renewed. */
static const char SCRIPT_RENEW[] =
    "local v = redis.call('GET', KEYS[1])\n"
    "if v == ARGV[1] then\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  redis.call('PEXPIRE', KEYS[1] .. ':holder', ARGV[2])\n"
    "  redis.call('PEXPIRE', KEYS[2], ARGV[3])\n"
    "  return 1\n"
    "end\n"
    "if v then return 2 end\n"
    "return 0\n";
static const char SCRIPT_CHECK[] =
    "local v = redis.call('GET', KEYS[1])\n"
    "if v == ARGV[1] then return 1 end\n"
    "if v then return 2 end\n"
    "return 0\n";

/* KEYS[1] epoch key "<key>:epoch", KEYS[2] value key "<key>:<name>"; ARGV[1]
 * the writer's epoch in decimal (the acquire script stores it so, with
 * string.format('%.0f')), ARGV[2] the value, ARGV[3] its ttl ms. 1 = written,
 * 0 = the epoch moved on or is gone: nothing written. GET raises WRONGTYPE on
 * a non-string epoch key. */
static const char SCRIPT_FENCED_SET[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])\n"
    "  return 1\n"
    "end\n"
    "return 0\n";

static const char *const SCRIPTS[S_COUNT] = {SCRIPT_ACQUIRE, SCRIPT_UNLOCK, SCRIPT_RENEW,
                                             SCRIPT_CHECK, SCRIPT_FENCED_SET};

/* ---- blocking connections -------------------------------------------------- */

/* The lease connection or the subscriber broke or was re-established:
 * leading guards verify their leases at once (they wait on their renewal
 * timers, not on a poll of the generation). */
void locker_redis_gen_bump(struct redis_locker *rl)
{
    atomic_fetch_add(&rl->generation, 1);
    locker_notify_gen(&rl->base);
}

static void conn_broken(struct redis_locker *rl, struct rconn *cn, const char *what,
                        char err[BATON_LOCKER_ERR_MAX])
{
    snprintf(err, BATON_LOCKER_ERR_MAX, "redis %s: %s: %.100s", rl->where, what,
             cn->c && cn->c->errstr[0] ? cn->c->errstr : "connection lost");
    long long suppressed = 0;
    if (ratelimit_ok(&cn->rl_break, 2000, &suppressed))
        glog_warn("locker", NULL,
                 "%s; %s connection reconnects on the next call (%lld similar suppressed)", err,
                 cn->role, suppressed);
    if (cn->c) redisFree(cn->c);
    cn->c = NULL;
    if (cn == &rl->lease) locker_redis_gen_bump(rl);
}

/* An error reply saying the server is no longer (or not yet) the master to
 * use (READONLY, MASTERDOWN, LOADING; err already says it): dropped like a
 * broken connection, so the next call reconnects (rediscovering the master
 * through the sentinels) and the guard verifies its lease. */
static void conn_failover(struct redis_locker *rl, struct rconn *cn, const char *err)
{
    long long suppressed = 0;
    if (ratelimit_ok(&cn->rl_break, 2000, &suppressed))
        glog_warn("locker", NULL,
                 "%s; %s connection dropped, reconnects on the next call (%lld similar "
                 "suppressed)", err, cn->role, suppressed);
    if (cn->c) redisFree(cn->c);
    cn->c = NULL;
    if (cn == &rl->lease) locker_redis_gen_bump(rl);
}

/* The generation the guard sees: the connection breaks counted, plus the
 * sentinels' switches (so a switch makes the guard verify its lease at once;
 * both only grow). */
static uint64_t gen_now(struct redis_locker *rl)
{
    return atomic_load(&rl->generation) + redis_sentinel_watch_count(rl->watch);
}

/* The scripts [*lo, *hi) that run on cn. */
static void script_range(const struct redis_locker *rl, const struct rconn *cn, int *lo, int *hi)
{
    *lo = cn == &rl->lease ? 0 : S_LEASE_COUNT;
    *hi = cn == &rl->lease ? S_LEASE_COUNT : S_COUNT;
}

/* Names the connection (baton-<role>) and loads its scripts, all in one
 * pipelined round trip (cn->mu held). Best effort: a script whose load failed
 * is sent with EVAL; a refused CLIENT SETNAME (ACL) is ignored. A broken
 * connection is freed (cn->c NULL). */
static void load_scripts(struct redis_locker *rl, struct rconn *cn)
{
    redisContext *c = cn->c;
    int lo, hi;
    script_range(rl, cn, &lo, &hi);
    for (int i = 0; i < S_COUNT; i++) cn->sha[i][0] = '\0';
    bool ok = redisAppendCommand(c, "CLIENT SETNAME baton-%s", cn->role) == REDIS_OK;
    for (int i = lo; i < hi && ok; i++)
        ok = redisAppendCommand(c, "SCRIPT LOAD %s", SCRIPTS[i]) == REDIS_OK;
    for (int i = lo - 1; i < hi && ok; i++) {
        redisReply *r = NULL;
        if (redis_get_reply(c, (void **)&r) != REDIS_OK || r == NULL) {
            ok = false;
            break;
        }
        if (i >= lo) {
            if (r->type == REDIS_REPLY_STRING && r->len == 40)
                memcpy(cn->sha[i], r->str, 41);
            else
                glog_warn("locker", NULL, "redis %s: SCRIPT LOAD failed (%s); using EVAL",
                         rl->where, r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        }
        freeReplyObject(r);
    }
    if (!ok) {
        char err[BATON_LOCKER_ERR_MAX];
        conn_broken(rl, cn, "SCRIPT LOAD", err);
    }
}

/* cn->mu held. Each connection names itself and loads its scripts. */
static bool ensure_conn(struct redis_locker *rl, struct rconn *cn, char err[BATON_LOCKER_ERR_MAX])
{
    uint64_t sw = redis_sentinel_watch_count(rl->watch);
    if (cn->c && sw != cn->switch_seen) {
        glog_info("locker", NULL, "redis %s: the sentinels switched the master; %s connection "
                 "reconnects", rl->where, cn->role);
        redisFree(cn->c);
        cn->c = NULL;
        if (cn == &rl->lease) locker_redis_gen_bump(rl);
    }
    if (cn->c) return true;
    cn->c = redis_conn_open(&rl->opts, err, BATON_LOCKER_ERR_MAX);
    if (cn->c == NULL) return false;
    cn->switch_seen = sw;
    if (cn == &rl->lease) locker_redis_gen_bump(rl);
    if (cn->ever_connected)
        glog_info("locker", NULL, "redis %s: %s connection re-established", rl->where, cn->role);
    cn->ever_connected = true;
    load_scripts(rl, cn);
    if (cn->c == NULL) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "redis %s: %s connection lost while setting it up",
                 rl->where, cn->role);
        return false;
    }
    return true;
}

/* snprintf into err, truncating quietly: error messages may be cut short
 * (long keys), never overflow. */
static void errf(char err[BATON_LOCKER_ERR_MAX], const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void errf(char err[BATON_LOCKER_ERR_MAX], const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, BATON_LOCKER_ERR_MAX, fmt, ap);
    va_end(ap);
}

/* err = "redis <where>: <label>: <rest>" for an err "redis <where>: <rest>"
 * (a failed connect) that does not name label yet. */
static void err_label(struct redis_locker *rl, const char *label, char err[BATON_LOCKER_ERR_MAX])
{
    char prefix[160];
    int pl = snprintf(prefix, sizeof prefix, "redis %s: ", rl->where);
    if (pl < 0 || (size_t)pl >= sizeof prefix) return;
    const char *rest = strncmp(err, prefix, (size_t)pl) == 0 ? err + pl : err;
    if (strncmp(rest, label, strlen(label)) == 0) return;
    char tmp[BATON_LOCKER_ERR_MAX];
    snprintf(tmp, sizeof tmp, "%s", rest);
    errf(err, "%s%s: %s", prefix, label, tmp);
}

/* Redis 7.0 names neither the command nor the key a script was refused
 * ("... can't run this command or subcommand script: <sha>, on
 * @user_script:N"): "line N (<that line>)" from our own source, so an ACL
 * denial inside a script names its command; "" for other errors. */
static void script_line(int idx, const char *reply, char *out, size_t len)
{
    out[0] = '\0';
    const char *at = strstr(reply, "@user_script:");
    if (at == NULL) return;
    int n = atoi(at + strlen("@user_script:"));
    const char *p = SCRIPTS[idx];
    for (int i = 1; i < n && p; i++) {
        p = strchr(p, '\n');
        if (p) p++;
    }
    if (p == NULL || n < 1) return;
    while (*p == ' ') p++;
    const char *e = strchr(p, '\n');
    int l = e ? (int)(e - p) : (int)strlen(p);
    snprintf(out, len, "line %d (%.*s)", n, l > 80 ? 80 : l, p);
}

/* One script call: script idx with nkeys keys among its nargs arguments ka
 * (kalen: their lengths, binary safe; NULL = C strings). Errors read
 * "redis <where>: <what> <subject>: <reason>"; subject NULL = what names the
 * key itself, and then a failed connect names it too. Out: r (an integer
 * reply; never an error reply: those become NULL with the reason in err),
 * sent (clock_boot_ms() just before the request that produced the reply was
 * written), gen (the generation then, after any reconnect) and lost (a
 * request was written and its reply lost: it may have run). */
struct script_call {
    int idx, nkeys, nargs;
    const char **ka;
    const size_t *kalen;
    const char *what, *subject;
    bool acquire; /* lease batches: release the key's orphans first, record a lost one */
    redisReply *r;
    int64_t sent;
    uint64_t gen;
    bool lost;
    bool failed;  /* no reply (err says why) */
    bool by_sha;
    char *err;    /* BATON_LOCKER_ERR_MAX */
};

#define SCRIPT_ARGS_MAX 9

static const char *reply_type_name(int type)
{
    switch (type) {
    case REDIS_REPLY_STRING: return "a string";
    case REDIS_REPLY_ARRAY: return "an array";
    case REDIS_REPLY_NIL: return "nil";
    case REDIS_REPLY_STATUS: return "a status";
    default: return "an unknown type";
    }
}

/* Runs n script calls on cn (cn->mu held) in one pipelined round trip (two
 * when the server lost its scripts: those calls go again by EVAL). */
static void run_scripts_on(struct redis_locker *rl, struct rconn *cn, struct script_call **calls,
                           int n)
{
    char cerr[BATON_LOCKER_ERR_MAX];
    int live = 0;
    for (int i = 0; i < n; i++) {
        calls[i]->r = NULL;
        calls[i]->lost = false;
        if (!calls[i]->failed) live++;
    }
    if (live == 0) return;
    if (!ensure_conn(rl, cn, cerr)) {
        for (int i = 0; i < n; i++) {
            struct script_call *c = calls[i];
            if (c->failed) continue;
            c->failed = true;
            snprintf(c->err, BATON_LOCKER_ERR_MAX, "%s", cerr);
            if (c->subject == NULL) err_label(rl, c->what, c->err);
        }
        return;
    }
    for (int i = 0; i < n; i++) calls[i]->by_sha = cn->sha[calls[i]->idx][0] != '\0';
    bool retry_any = true;
    for (int attempt = 0; attempt < 2 && retry_any; attempt++) {
        retry_any = false;
        uint64_t gen = gen_now(rl);
        int64_t sent = clock_boot_ms();
        bool broken = false;
        int appended = 0;
        for (int i = 0; i < n; i++) {
            struct script_call *c = calls[i];
            if (c->failed || c->r != NULL) continue;
            const char *argv[3 + SCRIPT_ARGS_MAX];
            size_t argvlen[3 + SCRIPT_ARGS_MAX];
            char nk[8];
            snprintf(nk, sizeof nk, "%d", c->nkeys);
            argv[0] = c->by_sha ? "EVALSHA" : "EVAL";
            argv[1] = c->by_sha ? cn->sha[c->idx] : SCRIPTS[c->idx];
            argv[2] = nk;
            for (int k = 0; k < c->nargs && k < SCRIPT_ARGS_MAX; k++) {
                argv[3 + k] = c->ka[k];
                argvlen[3 + k] = c->kalen ? c->kalen[k] : strlen(c->ka[k]);
            }
            for (int k = 0; k < 3; k++) argvlen[k] = strlen(argv[k]);
            if (redisAppendCommandArgv(cn->c, 3 + c->nargs, argv, argvlen) != REDIS_OK) {
                /* out of memory: nothing was written; drop the connection
                 * with what it buffered */
                snprintf(cerr, sizeof cerr, "redis %s: %s: out of memory", rl->where, c->what);
                conn_broken(rl, cn, "pipeline", cerr);
                snprintf(cerr, sizeof cerr, "redis %s: %s: out of memory", rl->where, c->what);
                broken = true;
                appended = 0;
                break;
            }
            appended++;
        }
        for (int i = 0; i < n && appended > 0; i++) {
            struct script_call *c = calls[i];
            if (c->failed || c->r != NULL) continue;
            appended--;
            c->sent = sent;
            c->gen = gen;
            if (broken) {
                c->lost = true; /* written with the others: may have run */
                c->failed = true;
                snprintf(c->err, BATON_LOCKER_ERR_MAX, "%s", cerr);
                continue;
            }
            redisReply *r = NULL;
            if (redis_get_reply(cn->c, (void **)&r) != REDIS_OK || r == NULL) {
                broken = true;
                c->lost = true;
                c->failed = true;
                conn_broken(rl, cn, c->what, cerr);
                snprintf(c->err, BATON_LOCKER_ERR_MAX, "%s", cerr);
                continue;
            }
            if (c->by_sha && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
                freeReplyObject(r);
                c->by_sha = false; /* again, by EVAL */
                cn->sha[c->idx][0] = '\0';
                retry_any = true;
                continue;
            }
            c->r = r;
        }
        if (broken) {
            /* the connection is gone: every call without a reply fails */
            for (int i = 0; i < n; i++) {
                struct script_call *c = calls[i];
                if (c->failed || c->r != NULL) continue;
                c->failed = true;
                snprintf(c->err, BATON_LOCKER_ERR_MAX, "%s", cerr);
            }
            break;
        }
    }
    bool reload[S_COUNT] = {false};
    for (int i = 0; i < n; i++) {
        struct script_call *c = calls[i];
        if (c->failed || c->r == NULL) continue;
        redisReply *r = c->r;
        char label[BATON_LOCKER_ERR_MAX];
        snprintf(label, sizeof label, "%.100s%s%.150s", c->what, c->subject ? " " : "",
                 c->subject ? c->subject : "");
        if (r->type == REDIS_REPLY_ERROR) {
            char line[120];
            script_line(c->idx, r->str, line, sizeof line);
            if (line[0]) /* the command first: the reply's sha would push it out */
                errf(c->err, "redis %s: %s: refused in the script at %s: %.100s", rl->where,
                     label, line, r->str);
            else
                errf(c->err, "redis %s: %s: %s", rl->where, label, r->str);
            if (redis_failover_error(r->str) && cn->c) conn_failover(rl, cn, c->err);
        } else if (r->type != REDIS_REPLY_INTEGER) {
            /* never read as a grant: a script's answer is an integer */
            errf(c->err, "redis %s: %s: the script answered %s, not an integer (a proxy or "
                 "server that is not Redis?)", rl->where, label, reply_type_name(r->type));
        } else {
            if (!c->by_sha && cn->sha[c->idx][0] == '\0') reload[c->idx] = true;
            continue;
        }
        freeReplyObject(r);
        c->r = NULL;
        c->failed = true;
    }
    for (int idx = 0; idx < S_COUNT && cn->c; idx++) {
        if (!reload[idx]) continue;
        /* reload after NOSCRIPT (Redis restarted or SCRIPT FLUSH) */
        redisReply *lr = redis_commandf(cn->c, "SCRIPT LOAD %s", SCRIPTS[idx]);
        if (lr == NULL) {
            char ignored[BATON_LOCKER_ERR_MAX];
            conn_broken(rl, cn, "SCRIPT LOAD", ignored);
        } else {
            if (lr->type == REDIS_REPLY_STRING && lr->len == 40) memcpy(cn->sha[idx], lr->str, 41);
            freeReplyObject(lr);
        }
    }
}

/* One call (cn->mu held): see struct script_call. */
static redisReply *run_script_on(struct redis_locker *rl, struct rconn *cn, int idx, int nkeys,
                                 int nargs, const char **ka, const size_t *kalen,
                                 const char *what, const char *subject, int64_t *sent,
                                 uint64_t *gen, bool *lost, char err[BATON_LOCKER_ERR_MAX])
{
    struct script_call c = {.idx = idx, .nkeys = nkeys, .nargs = nargs, .ka = ka, .kalen = kalen,
                            .what = what, .subject = subject, .err = err};
    struct script_call *cp = &c;
    run_scripts_on(rl, cn, &cp, 1);
    if (sent) *sent = c.sent;
    if (gen) *gen = c.gen;
    if (lost) *lost = c.lost;
    return c.r;
}

/* run_script_on the lease connection (lease.mu held); errors name ka[0]. */
static redisReply *run_script(struct redis_locker *rl, int idx, int nkeys, int nargs,
                              const char **ka, const char *what, int64_t *sent, uint64_t *gen,
                              bool *lost, char err[BATON_LOCKER_ERR_MAX])
{
    return run_script_on(rl, &rl->lease, idx, nkeys, nargs, ka, NULL, what, ka[0], sent, gen,
                         lost, err);
}

/* ---- the lease connection's queue ------------------------------------------ */

#define LEASE_BATCH_MAX 512

/* A queued call. Its thread sleeps on its own semaphore, not on a condition
 * variable under q_mu: the flusher marks a batch done under q_mu, lets go of
 * it, then posts each waiter, which returns without taking q_mu again (with
 * a condvar signalled under the mutex, every woken thread ran into the held
 * mutex and slept once more: at 1,000 leases renewing on the same grid that
 * was about a third of a replica's idle CPU). */
struct lease_waiter {
    struct script_call call;
    struct lease_waiter *next;
    sem_t sem;
    atomic_bool done; /* set by the flusher under q_mu before its post */
};

static bool orphans_release(struct redis_locker *rl, const char *key, char err[BATON_LOCKER_ERR_MAX]);
static void orphan_add(struct redis_locker *rl, const char *key, const char *token);

static struct lease_waiter *waiter_of(struct script_call *c)
{
    return (struct lease_waiter *)((char *)c - offsetof(struct lease_waiter, call));
}

/* Sends the first LEASE_BATCH_MAX queued calls (q_mu held on entry and on
 * return, released meanwhile); self is the calling waiter (the head). */
static void lease_flush(struct redis_locker *rl, struct lease_waiter *self)
{
    /* on the heap: every lease thread flushes now and then, and a 4 KiB
     * array would stay resident in each one's stack */
    struct script_call *small[16];
    struct script_call **calls = malloc(LEASE_BATCH_MAX * sizeof *calls);
    int cap = LEASE_BATCH_MAX;
    if (calls == NULL) {
        calls = small;
        cap = 16;
    }
    struct lease_waiter *batch = rl->q_head, *w = batch;
    int n = 0;
    for (; w && n < cap; w = w->next) calls[n++] = &w->call;
    rl->q_head = w;
    if (w == NULL) rl->q_tail = NULL;
    rl->q_busy = true;
    pthread_mutex_unlock(&rl->q_mu);

    pthread_mutex_lock(&rl->lease.mu);
    for (int i = 0; i < n; i++) {
        struct script_call *c = calls[i];
        /* an earlier acquisition of this key whose answer was lost goes first */
        if (c->acquire && !orphans_release(rl, c->ka[0], c->err)) c->failed = true;
    }
    run_scripts_on(rl, &rl->lease, calls, n);
    for (int i = 0; i < n; i++) {
        struct script_call *c = calls[i];
        if (c->acquire && c->r == NULL && c->lost) orphan_add(rl, c->ka[0], c->ka[2]);
    }
    pthread_mutex_unlock(&rl->lease.mu);
    atomic_fetch_add(&rl->q_batches, 1);
    atomic_fetch_add(&rl->q_calls, (unsigned long long)n);

    pthread_mutex_lock(&rl->q_mu);
    rl->q_busy = false;
    for (int i = 0; i < n; i++) atomic_store_explicit(&waiter_of(calls[i])->done, true, memory_order_release);
    /* the next in line sends what queued meanwhile */
    struct lease_waiter *next = rl->q_head;
    pthread_mutex_unlock(&rl->q_mu);
    /* Posted outside q_mu. A posted waiter returns at once and its frame is
     * gone: nothing of it is read after its post (calls[] is ours). The
     * next in line cannot leave before its post: only the head flushes, and
     * nobody else marks it done. */
    for (int i = 0; i < n; i++) {
        struct lease_waiter *x = waiter_of(calls[i]);
        if (x != self) sem_post(&x->sem);
    }
    if (next) sem_post(&next->sem);
    if (calls != small) free(calls);
    pthread_mutex_lock(&rl->q_mu);
}

/* Runs w->call on the lease connection, in a batch with whatever else is
 * queued; returns when it is answered (or failed). */
static void lease_run(struct redis_locker *rl, struct lease_waiter *w)
{
    w->next = NULL;
    atomic_init(&w->done, false);
    sem_init(&w->sem, 0, 0);
    pthread_mutex_lock(&rl->q_mu);
    if (rl->q_tail)
        rl->q_tail->next = w;
    else
        rl->q_head = w;
    rl->q_tail = w;
    for (;;) {
        if (atomic_load_explicit(&w->done, memory_order_acquire)) {
            pthread_mutex_unlock(&rl->q_mu);
            break;
        }
        if (!rl->q_busy && rl->q_head == w) {
            lease_flush(rl, w);
            continue;
        }
        pthread_mutex_unlock(&rl->q_mu);
        while (sem_wait(&w->sem) != 0 && errno == EINTR) {
        }
        /* done: answered, and nothing to take q_mu for */
        if (atomic_load_explicit(&w->done, memory_order_acquire)) break;
        pthread_mutex_lock(&rl->q_mu); /* the next in line: flush */
    }
    sem_destroy(&w->sem);
}

/* Sends n pipelined commands on the side connection and reads their n
 * replies (one round trip). false = connection error, with err; the replies
 * are then all NULL, and *maybe_ran (if given) says whether the commands may
 * have run all the same: they went to a connected server and their answer
 * was lost (not: no connection, or a failover error answer). Never touches
 * the generation. */
static bool side_call_ex(struct redis_locker *rl, int n, const int *argc,
                         const char **const *argv, redisReply **replies, const char *what,
                         char err[BATON_LOCKER_ERR_MAX], bool *maybe_ran)
{
    for (int i = 0; i < n; i++) replies[i] = NULL;
    if (maybe_ran) *maybe_ran = false;
    pthread_mutex_lock(&rl->side.mu);
    bool ok = ensure_conn(rl, &rl->side, err);
    if (ok && maybe_ran) *maybe_ran = true; /* until a failover answer says otherwise */
    for (int i = 0; i < n && ok; i++)
        ok = redisAppendCommandArgv(rl->side.c, argc[i], argv[i], NULL) == REDIS_OK;
    for (int i = 0; i < n && ok; i++)
        ok = redis_get_reply(rl->side.c, (void **)&replies[i]) == REDIS_OK && replies[i] != NULL;
    bool failover = false;
    for (int i = 0; i < n && ok && !failover; i++)
        if (replies[i]->type == REDIS_REPLY_ERROR && redis_failover_error(replies[i]->str)) {
            errf(err, "redis %s: %s: %.150s", rl->where, what, replies[i]->str);
            failover = true;
        }
    if (!ok || failover) {
        for (int i = 0; i < n; i++) {
            if (replies[i]) freeReplyObject(replies[i]);
            replies[i] = NULL;
        }
        if (failover) conn_failover(rl, &rl->side, err);
        else if (rl->side.c) conn_broken(rl, &rl->side, what, err);
        if (failover && maybe_ran) *maybe_ran = false;
        ok = false;
    }
    pthread_mutex_unlock(&rl->side.mu);
    return ok;
}

static bool side_call(struct redis_locker *rl, int n, const int *argc, const char **const *argv,
                      redisReply **replies, const char *what, char err[BATON_LOCKER_ERR_MAX])
{
    return side_call_ex(rl, n, argc, argv, replies, what, err, NULL);
}

/* ---- orphaned acquisitions (lease.mu held) ---------------------------------- */

static void orphan_remove(struct redis_locker *rl, int i)
{
    free(rl->orphans[i].key);
    memmove(&rl->orphans[i], &rl->orphans[i + 1],
            (size_t)(rl->n_orphans - i - 1) * sizeof rl->orphans[0]);
    rl->n_orphans--;
}

static void orphan_add(struct redis_locker *rl, const char *key, const char *token)
{
    if (rl->n_orphans == ORPHAN_MAX) {
        glog_warn("locker", NULL,
                 "redis %s: %d acquisitions with lost replies pending; forgetting the oldest "
                 "(on %s): if it ran, that key stays taken until its ttl",
                 rl->where, ORPHAN_MAX, rl->orphans[0].key);
        orphan_remove(rl, 0);
    }
    char *k = strdup(key);
    if (!k) {
        glog_warn("locker", NULL, "redis locker: out of memory recording an orphaned acquisition "
                  "of %s (on %s): if it ran, that key stays taken until its ttl", key, rl->where);
        return;
    }
    struct orphan *o = &rl->orphans[rl->n_orphans++];
    o->key = k;
    memcpy(o->token, token, sizeof o->token);
}

/* Releases every orphaned acquisition of key. false (with err) when the lease
 * connection failed meanwhile: the orphans left are retried next time. */
static bool orphans_release(struct redis_locker *rl, const char *key, char err[BATON_LOCKER_ERR_MAX])
{
    for (int i = 0; i < rl->n_orphans;) {
        if (strcmp(rl->orphans[i].key, key) != 0) {
            i++;
            continue;
        }
        const char *oa[2] = {key, rl->orphans[i].token};
        redisReply *o = run_script(rl, S_UNLOCK, 1, 2, oa, "release lost acquisition", NULL, NULL,
                                   NULL, err);
        if (o == NULL && rl->lease.c == NULL) return false; /* kept for next time */
        if (o == NULL) {
            glog_warn("locker", NULL, "%s; forgetting that acquisition", err);
        } else {
            if (o->integer == 1)
                glog_info("locker", NULL,
                         "redis %s: released %s taken by an acquisition whose reply was lost",
                         rl->where, key);
            freeReplyObject(o);
        }
        orphan_remove(rl, i);
    }
    return true;
}

/* ---- ops ------------------------------------------------------------------- */

/* One acquisition's arguments: KEYS = {key, "<key>:epoch"}, ARGV = {token,
 * ttl, epoch ttl, holder}. */
struct acq_args {
    char token[RANDOM_TOKEN_LEN];
    char ekey[LOCKER_SUBKEY_MAX];
    char ttl[24], ettl[24];
    const char *ka[6];
};

static bool acq_args_init(struct redis_locker *rl, struct acq_args *a, const char *key,
                          int64_t ttl_ms, char err[BATON_LOCKER_ERR_MAX])
{
    if (random_token(a->token) != 0) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "redis locker: no randomness for a token (%s)", key);
        return false;
    }
    locker_subkey(a->ekey, key, "epoch");
    snprintf(a->ttl, sizeof a->ttl, "%lld", (long long)ttl_ms);
    snprintf(a->ettl, sizeof a->ettl, "%lld", (long long)epoch_ttl_ms(ttl_ms));
    const char *ka[6] = {key, a->ekey, a->token, a->ttl, a->ettl, rl->holder};
    memcpy(a->ka, ka, sizeof ka);
    return true;
}

static struct script_call acq_call(struct acq_args *a, const char *key, char *err)
{
    return (struct script_call){.idx = S_ACQUIRE, .nkeys = 2, .nargs = 6, .ka = a->ka,
                                .what = "acquire", .subject = key, .acquire = true, .err = err};
}

/* The answer to an acquisition call c (its reply freed here): OK with out
 * filled, HELD with out->held_pttl_ms, or ERR with err. */
static int acquire_answer(struct redis_locker *rl, const char *key, struct script_call *c,
                          const char *token, struct baton_lock_grant *out,
                          char err[BATON_LOCKER_ERR_MAX])
{
    redisReply *r = c->r;
    c->r = NULL;
    if (r == NULL) return BATON_LOCKER_ERR;
    long long v = r->integer;
    freeReplyObject(r);
    if (v == 0 || v <= -2) {
        if (out) out->held_pttl_ms = v <= -2 ? (int64_t)(-2 - v) : 0;
        return BATON_LOCKER_HELD;
    }
    /* a new holder wants to notice a Redis restart between renewals */
    locker_redis_sub_ensure_started(rl);
    if (v < 0) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "redis %s: acquire %s: bad epoch %lld", rl->where, key, v);
        return BATON_LOCKER_ERR;
    }
    if (out) {
        memcpy(out->token, token, RANDOM_TOKEN_LEN);
        out->epoch = (uint64_t)v;
        out->sent_ms = c->sent;
        out->gen = c->gen;
        out->held_pttl_ms = 0;
    }
    return BATON_LOCKER_OK;
}

static int redis_try_lock(struct baton_locker *l, const char *key, int64_t ttl_ms,
                          struct baton_lock_grant *out, char err[BATON_LOCKER_ERR_MAX])
{
    struct redis_locker *rl = (struct redis_locker *)l;
    struct acq_args a;
    if (!acq_args_init(rl, &a, key, ttl_ms, err)) return BATON_LOCKER_ERR;
    struct lease_waiter w = {.call = acq_call(&a, key, err)};
    lease_run(rl, &w);
    return acquire_answer(rl, key, &w.call, a.token, out, err);
}

/* Every acquisition of the batch in one pipelined round trip on the lease
 * connection, taken directly under lease.mu (as renew_batch); orphans as
 * in lease_flush: an earlier acquisition of the key whose answer was lost
 * is released first, and one whose answer is lost now is recorded. */
static void redis_try_lock_batch(struct baton_locker *l, size_t n, struct locker_acquisition *const *av)
{
    struct redis_locker *rl = (struct redis_locker *)l;
    if (n == 0) return;
    struct acq_args *args = malloc(n * sizeof *args);
    struct script_call *calls = malloc(n * sizeof *calls);
    struct script_call **ptrs = malloc(n * sizeof *ptrs);
    if (args == NULL || calls == NULL || ptrs == NULL) {
        for (size_t i = 0; i < n; i++) {
            av[i]->rc = BATON_LOCKER_ERR;
            snprintf(av[i]->err, BATON_LOCKER_ERR_MAX, "redis %s: acquire %.80s: out of memory",
                     rl->where, av[i]->key);
        }
        free(args);
        free(calls);
        free(ptrs);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        av[i]->err[0] = '\0';
        calls[i] = acq_call(&args[i], av[i]->key, av[i]->err);
        calls[i].failed = !acq_args_init(rl, &args[i], av[i]->key, av[i]->ttl_ms, av[i]->err);
        ptrs[i] = &calls[i];
    }
    pthread_mutex_lock(&rl->lease.mu);
    for (size_t i = 0; i < n; i++)
        if (!calls[i].failed && !orphans_release(rl, av[i]->key, av[i]->err)) calls[i].failed = true;
    run_scripts_on(rl, &rl->lease, ptrs, (int)n);
    for (size_t i = 0; i < n; i++)
        if (calls[i].r == NULL && calls[i].lost) orphan_add(rl, av[i]->key, args[i].token);
    pthread_mutex_unlock(&rl->lease.mu);
    atomic_fetch_add(&rl->q_batches, 1);
    atomic_fetch_add(&rl->q_calls, (unsigned long long)n);
    for (size_t i = 0; i < n; i++) {
        memset(&av[i]->grant, 0, sizeof av[i]->grant);
        av[i]->rc = acquire_answer(rl, av[i]->key, &calls[i], args[i].token, &av[i]->grant, av[i]->err);
    }
    free(args);
    free(calls);
    free(ptrs);
}

/* Runs a token-comparing script on KEYS = {key[, key2]}, ARGV = {token[, arg
 * [, arg2]]}: 1 -> ok_rc, 0 -> absent_rc, 2 -> held with another token
 * (absent_rc too, with its own message). */
static int token_script(struct redis_locker *rl, int idx, const char *what, const char *key,
                        const char *key2, const char *token, const char *arg, const char *arg2,
                        int64_t *sent, int ok_rc, int absent_rc, char err[BATON_LOCKER_ERR_MAX])
{
    const char *ka[5];
    int nkeys = 0, n = 0;
    ka[n++] = key;
    nkeys++;
    if (key2) {
        ka[n++] = key2;
        nkeys++;
    }
    ka[n++] = token;
    if (arg) ka[n++] = arg;
    if (arg && arg2) ka[n++] = arg2;
    struct lease_waiter w = {.call = {.idx = idx, .nkeys = nkeys, .nargs = n, .ka = ka,
                                      .what = what, .subject = key, .err = err}};
    lease_run(rl, &w);
    redisReply *r = w.call.r;
    if (sent) *sent = w.call.sent;
    if (r == NULL) return BATON_LOCKER_ERR;
    long long v = r->integer;
    freeReplyObject(r);
    if (v == 1) return ok_rc;
    snprintf(err, BATON_LOCKER_ERR_MAX, "redis %s: %s %s: %s", rl->where, what, key,
             token_lost_text(v));
    return absent_rc;
}

static int redis_unlock(struct baton_locker *l, const char *key, const char *token,
                        char err[BATON_LOCKER_ERR_MAX])
{
    return token_script((struct redis_locker *)l, S_UNLOCK, "unlock", key, NULL, token, NULL,
                        NULL, NULL, BATON_LOCKER_OK, BATON_LOCKER_MISMATCH, err);
}

static int redis_renew(struct baton_locker *l, const char *key, const char *token, int64_t ttl_ms,
                       int64_t *sent_ms, char err[BATON_LOCKER_ERR_MAX])
{
    struct redis_locker *rl = (struct redis_locker *)l;
    /* a renewing leader wants to notice a Redis restart between renewals */
    locker_redis_sub_ensure_started(rl);
    char ttl[24], ettl[24];
    int64_t et = epoch_ttl_ms(ttl_ms);
    snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_ms);
    snprintf(ettl, sizeof ettl, "%lld", (long long)et);
    char ekey[LOCKER_SUBKEY_MAX];
    locker_subkey(ekey, key, "epoch");
    int rc = token_script(rl, S_RENEW, "renew", key, ekey, token, ttl, ettl, sent_ms, BATON_LOCKER_OK,
                          BATON_LOCKER_LOST, err);
    return rc;
}

/* renew_batch: one renewal's call and its arguments */
struct rb_call {
    struct script_call c;
    const char *ka[5];
};

/* Every renewal of the batch in one pipelined round trip on the lease
 * connection, taken directly under lease.mu: calls queued meanwhile batch
 * among themselves and go next. */
static void redis_renew_batch(struct baton_locker *l, size_t n, struct locker_renewal *const *rv)
{
    struct redis_locker *rl = (struct redis_locker *)l;
    if (n == 0) return;
    locker_redis_sub_ensure_started(rl); /* renewing leaders want to notice a Redis restart between renewals */
    /* the argument strings: "<key>:epoch", ttl, epoch ttl per renewal */
    size_t need = 0;
    for (size_t i = 0; i < n; i++) need += strlen(rv[i]->key) + sizeof ":epoch" + 2 * 24;
    pthread_mutex_lock(&rl->lease.mu);
    if (rl->rb_ncap < n) {
        struct rb_call *c = realloc(rl->rb_calls, n * sizeof *c);
        if (c != NULL) rl->rb_calls = c;
        struct script_call **p = realloc(rl->rb_ptrs, n * sizeof *p);
        if (p != NULL) rl->rb_ptrs = p;
        if (c != NULL && p != NULL) rl->rb_ncap = n;
    }
    if (rl->rb_acap < need) {
        char *a = realloc(rl->rb_arena, need);
        if (a != NULL) {
            rl->rb_arena = a;
            rl->rb_acap = need;
        }
    }
    if (rl->rb_ncap < n || rl->rb_acap < need) {
        pthread_mutex_unlock(&rl->lease.mu);
        for (size_t i = 0; i < n; i++) {
            rv[i]->rc = BATON_LOCKER_ERR;
            rv[i]->sent_ms = clock_boot_ms();
            snprintf(rv[i]->err, BATON_LOCKER_ERR_MAX, "redis %s: renew %.80s: out of memory",
                     rl->where, rv[i]->key);
        }
        return;
    }
    char *a = rl->rb_arena;
    for (size_t i = 0; i < n; i++) {
        struct locker_renewal *q = rv[i];
        struct rb_call *b = &rl->rb_calls[i];
        int64_t et = epoch_ttl_ms(q->ttl_ms);
        b->ka[0] = q->key;
        b->ka[1] = a;
        a += sprintf(a, "%s:epoch", q->key) + 1;
        b->ka[2] = q->token;
        b->ka[3] = a;
        a += sprintf(a, "%lld", (long long)q->ttl_ms) + 1;
        b->ka[4] = a;
        a += sprintf(a, "%lld", (long long)et) + 1;
        b->c = (struct script_call){.idx = S_RENEW, .nkeys = 2, .nargs = 5, .ka = b->ka,
                                    .what = "renew", .subject = q->key, .err = q->err};
        rl->rb_ptrs[i] = &b->c;
    }
    run_scripts_on(rl, &rl->lease, rl->rb_ptrs, (int)n);
    atomic_fetch_add(&rl->q_batches, 1);
    atomic_fetch_add(&rl->q_calls, (unsigned long long)n);
    for (size_t i = 0; i < n; i++) {
        struct locker_renewal *q = rv[i];
        struct script_call *c = &rl->rb_calls[i].c;
        q->sent_ms = c->sent;
        if (c->r == NULL) {
            q->rc = BATON_LOCKER_ERR;
            if (c->sent == 0) q->sent_ms = clock_boot_ms();
            continue;
        }
        long long v = c->r->integer;
        freeReplyObject(c->r);
        c->r = NULL;
        if (v == 1) {
            q->rc = BATON_LOCKER_OK;
            continue;
        }
        q->rc = BATON_LOCKER_LOST;
        snprintf(q->err, BATON_LOCKER_ERR_MAX, "redis %s: renew %s: %s", rl->where, q->key,
                 token_lost_text(v));
    }
    pthread_mutex_unlock(&rl->lease.mu);
}

static int redis_check(struct baton_locker *l, const char *key, const char *token,
                       char err[BATON_LOCKER_ERR_MAX])
{
    return token_script((struct redis_locker *)l, S_CHECK, "check", key, NULL, token, NULL, NULL,
                        NULL, BATON_LOCKER_OK, BATON_LOCKER_LOST, err);
}

static int redis_announce(struct baton_locker *l, const char *key, char err[BATON_LOCKER_ERR_MAX])
{
    struct redis_locker *rl = (struct redis_locker *)l;
    int rc = BATON_LOCKER_OK;
    pthread_mutex_lock(&rl->lease.mu);
    if (!ensure_conn(rl, &rl->lease, err)) {
        rc = BATON_LOCKER_ERR;
    } else {
        redisReply *r = redis_commandf(rl->lease.c, "PUBLISH %s" RELEASED_SUFFIX " released", key);
        if (r == NULL) {
            conn_broken(rl, &rl->lease, "publish", err);
            rc = BATON_LOCKER_ERR;
        } else {
            bool failover = false;
            if (r->type == REDIS_REPLY_ERROR) {
                snprintf(err, BATON_LOCKER_ERR_MAX, "redis %s: publish %s: %s", rl->where, key, r->str);
                failover = redis_failover_error(r->str);
                rc = BATON_LOCKER_ERR;
            }
            freeReplyObject(r);
            if (failover) conn_failover(rl, &rl->lease, err);
        }
    }
    pthread_mutex_unlock(&rl->lease.mu);
    return rc;
}

static void redis_lease_traffic(const struct baton_locker *l, uint64_t *round_trips, uint64_t *calls)
{
    struct redis_locker *rl = (struct redis_locker *)l;
    *round_trips = atomic_load(&rl->q_batches);
    *calls = atomic_load(&rl->q_calls);
}

static uint64_t redis_generation(struct baton_locker *l)
{
    return gen_now((struct redis_locker *)l);
}

static void redis_destroy(struct baton_locker *l)
{
    struct redis_locker *rl = (struct redis_locker *)l;
    atomic_store(&rl->sub_stop, true);
    pthread_mutex_lock(&rl->sub_mu);
    bool started = rl->sub_started;
    pthread_cond_broadcast(&rl->sub_cv);
    pthread_mutex_unlock(&rl->sub_mu);
    if (started) {
        locker_redis_wake_sub(rl);
        pthread_join(rl->sub_thread, NULL);
    }
    while (rl->channels) {
        struct sub_channel *next = rl->channels->next;
        free(rl->channels->key);
        free(rl->channels);
        rl->channels = next;
    }
    while (rl->n_orphans > 0) orphan_remove(rl, rl->n_orphans - 1);
    free(rl->rb_calls);
    free(rl->rb_ptrs);
    free(rl->rb_arena);
    close(rl->wake_pipe[0]);
    close(rl->wake_pipe[1]);
    if (rl->lease.c) redisFree(rl->lease.c);
    if (rl->side.c) redisFree(rl->side.c);
    redis_sentinel_watch_release(rl->watch);
    redis_opts_clear(&rl->opts);
    pthread_cond_destroy(&rl->sub_cv);
    pthread_mutex_destroy(&rl->sub_mu);
    pthread_mutex_destroy(&rl->side.mu);
    pthread_mutex_destroy(&rl->lease.mu);
    pthread_mutex_destroy(&rl->q_mu);
    locker_base_destroy(&rl->base);
    free(rl);
}

/* After a claim whose answer was lost (a timeout, a broken connection): the
 * SET may have run. Unsure is not "not ours" -- if it ran, every other replica
 * is told the key is held and nobody would act -- so look once, on a fresh
 * side connection, whose value the key holds: ours -> BATON_LOCKER_OK, another's ->
 * BATON_LOCKER_HELD; none (the SET did not run: nobody was told "taken" by it) or
 * no answer -> BATON_LOCKER_ERR with err left as the lost claim's, for the
 * fail-closed/fail-open policy. Not claimed again: a claim that waited for a
 * hung server should not fire late on top of it. */
static int claim_lost_answer(struct redis_locker *rl, const char *key, char err[BATON_LOCKER_ERR_MAX])
{
    char err2[BATON_LOCKER_ERR_MAX];
    const char *get_argv[2] = {"GET", key};
    const char **argv[1] = {get_argv};
    const int argc[1] = {2};
    redisReply *rep[1];
    if (!side_call(rl, 1, argc, argv, rep, "claim check", err2)) return BATON_LOCKER_ERR;
    int rc = BATON_LOCKER_ERR;
    if (rep[0]->type == REDIS_REPLY_STRING) {
        rc = strcmp(rep[0]->str, rl->claim_value) == 0 ? BATON_LOCKER_OK : BATON_LOCKER_HELD;
        glog_info("locker", NULL, "redis %s: claim %.60s: its answer was lost (%s); the key holds %s",
                 rl->where, key, err, rc == BATON_LOCKER_OK ? "this claim: taken" : "another claim: held");
    }
    freeReplyObject(rep[0]);
    return rc;
}

/* One-shot claim on the side connection: SET key "<claim value>" NX PX ttl,
 * pipelined with TYPE key in the same round trip, so a key of another type is
 * reported as an error (WRONGTYPE) instead of looking held. A lost answer is
 * resolved by claim_lost_answer; a claim that never reached a server (no
 * connection) is an error at once, without a second connect attempt. */
static int redis_claim(struct baton_locker *l, const char *key, int64_t ttl_ms, char err[BATON_LOCKER_ERR_MAX])
{
    struct redis_locker *rl = (struct redis_locker *)l;
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_ms);
    const char *set_argv[6] = {"SET", key, rl->claim_value, "NX", "PX", ttl};
    const char *type_argv[2] = {"TYPE", key};
    const char **argv[2] = {set_argv, type_argv};
    const int argc[2] = {6, 2};
    redisReply *rep[2];
    bool maybe_ran = false;
    if (!side_call_ex(rl, 2, argc, argv, rep, "claim", err, &maybe_ran))
        return maybe_ran ? claim_lost_answer(rl, key, err) : BATON_LOCKER_ERR;
    redisReply *r = rep[0], *t = rep[1];
    int rc;
    if (r->type == REDIS_REPLY_STATUS) {
        rc = BATON_LOCKER_OK;
    } else if (r->type == REDIS_REPLY_NIL) {
        rc = BATON_LOCKER_HELD;
        if (t->type == REDIS_REPLY_STATUS && strcmp(t->str, "string") != 0) {
            snprintf(err, BATON_LOCKER_ERR_MAX, "redis %s: WRONGTYPE claim key %.60s holds a %.20s", rl->where,
                     key, t->str);
            rc = BATON_LOCKER_ERR;
        }
    } else {
        snprintf(err, BATON_LOCKER_ERR_MAX, "redis %s: claim %.60s: %.50s", rl->where, key,
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        rc = BATON_LOCKER_ERR;
    }
    freeReplyObject(r);
    freeReplyObject(t);
    return rc;
}

static int redis_holder(struct baton_locker *l, const char *key, char *buf, size_t len,
                        char err[BATON_LOCKER_ERR_MAX])
{
    struct redis_locker *rl = (struct redis_locker *)l;
    char hkey[LOCKER_SUBKEY_MAX];
    locker_subkey(hkey, key, "holder");
    const char *get_argv[2] = {"GET", hkey};
    const char **argv[1] = {get_argv};
    const int argc[1] = {2};
    redisReply *r;
    bool ok = side_call(rl, 1, argc, argv, &r, "holder", err);
    if (!ok) return BATON_LOCKER_ERR;
    int rc = BATON_LOCKER_LOST;
    if (r->type == REDIS_REPLY_STRING) {
        snprintf(buf, len, "%.*s", (int)r->len, r->str);
        rc = BATON_LOCKER_OK;
    } else if (r->type == REDIS_REPLY_ERROR) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "redis %s: holder: %.100s", rl->where, r->str);
        rc = BATON_LOCKER_ERR;
    }
    freeReplyObject(r);
    return rc;
}

#define HOLDERS_CHUNK 64

static int redis_holders(struct baton_locker *l, size_t n, const char *const *keys, char *const *bufs,
                         size_t len, int *rcs, char err[BATON_LOCKER_ERR_MAX])
{
    struct redis_locker *rl = (struct redis_locker *)l;
    for (size_t i = 0; i < n; i++) rcs[i] = BATON_LOCKER_ERR;
    char (*hkeys)[LOCKER_SUBKEY_MAX] = malloc(HOLDERS_CHUNK * sizeof *hkeys);
    if (hkeys == NULL) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "redis %s: holder: out of memory", rl->where);
        return BATON_LOCKER_ERR;
    }
    for (size_t base = 0; base < n; base += HOLDERS_CHUNK) {
        int m = (int)(n - base < HOLDERS_CHUNK ? n - base : HOLDERS_CHUNK);
        const char *av[HOLDERS_CHUNK][2];
        const char **argv[HOLDERS_CHUNK];
        int argc[HOLDERS_CHUNK];
        redisReply *r[HOLDERS_CHUNK];
        for (int j = 0; j < m; j++) {
            locker_subkey(hkeys[j], keys[base + j], "holder");
            av[j][0] = "GET";
            av[j][1] = hkeys[j];
            argv[j] = av[j];
            argc[j] = 2;
        }
        if (!side_call(rl, m, argc, argv, r, "holder", err)) {
            free(hkeys);
            return BATON_LOCKER_ERR;
        }
        for (int j = 0; j < m; j++) {
            size_t i = base + (size_t)j;
            rcs[i] = BATON_LOCKER_LOST;
            if (r[j]->type == REDIS_REPLY_STRING) {
                snprintf(bufs[i], len, "%.*s", (int)r[j]->len, r[j]->str);
                rcs[i] = BATON_LOCKER_OK;
            } else if (r[j]->type == REDIS_REPLY_ERROR) {
                rcs[i] = BATON_LOCKER_ERR;
            }
            freeReplyObject(r[j]);
        }
    }
    free(hkeys);
    return BATON_LOCKER_OK;
}

static int redis_ping(struct baton_locker *l, char err[BATON_LOCKER_ERR_MAX])
{
    struct redis_locker *rl = (struct redis_locker *)l;
    const char *ping_argv[1] = {"PING"};
    const char **argv[1] = {ping_argv};
    const int argc[1] = {1};
    redisReply *r;
    if (!side_call(rl, 1, argc, argv, &r, "ping", err)) return BATON_LOCKER_ERR;
    int rc = BATON_LOCKER_OK;
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "redis %s: ping: %.100s", rl->where, r->str);
        rc = BATON_LOCKER_ERR;
    }
    freeReplyObject(r);
    return rc;
}

/* One EVALSHA of SCRIPT_FENCED_SET on the side connection. */
static int redis_fenced_set(struct baton_locker *l, const char *key, const char *name, uint64_t epoch,
                            const char *value, size_t len, int64_t ttl_ms,
                            char err[BATON_LOCKER_ERR_MAX])
{
    struct redis_locker *rl = (struct redis_locker *)l;
    char ekey[LOCKER_SUBKEY_MAX], vkey[LOCKER_SUBKEY_MAX];
    locker_subkey(ekey, key, "epoch");
    locker_subkey(vkey, key, name);
    char ep[24], ttl[24], what[BATON_LOCKER_ERR_MAX];
    snprintf(ep, sizeof ep, "%llu", (unsigned long long)epoch);
    snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_ms);
    snprintf(what, sizeof what, "fenced write %.150s", vkey);
    /* KEYS[1], KEYS[2], ARGV[1..3]; the value is passed binary safe */
    const char *ka[5] = {ekey, vkey, ep, value, ttl};
    const size_t kalen[5] = {strlen(ekey), strlen(vkey), strlen(ep), len, strlen(ttl)};
    pthread_mutex_lock(&rl->side.mu);
    redisReply *r = run_script_on(rl, &rl->side, S_FENCED_SET, 2, 5, ka, kalen, what, NULL, NULL,
                                  NULL, NULL, err);
    pthread_mutex_unlock(&rl->side.mu);
    if (r == NULL) return BATON_LOCKER_ERR;
    long long v = r->integer;
    freeReplyObject(r);
    if (v == 1) return BATON_LOCKER_OK;
    if (v != 0) {
        errf(err, "redis %s: %s: unexpected answer %lld", rl->where, what, v);
        return BATON_LOCKER_ERR;
    }
    errf(err, "redis %s: %s: epoch %s superseded (or expired)", rl->where, what, ep);
    return BATON_LOCKER_LOST;
}

/* GET "<key>:<name>" on the side connection. */
static int redis_shared_get(struct baton_locker *l, const char *key, const char *name, char *buf,
                            size_t len, char err[BATON_LOCKER_ERR_MAX])
{
    struct redis_locker *rl = (struct redis_locker *)l;
    char vkey[LOCKER_SUBKEY_MAX];
    locker_subkey(vkey, key, name);
    char what[BATON_LOCKER_ERR_MAX];
    snprintf(what, sizeof what, "shared read %.150s", vkey);
    const char *get_argv[2] = {"GET", vkey};
    const char **argv[1] = {get_argv};
    const int argc[1] = {2};
    redisReply *r;
    bool ok = side_call(rl, 1, argc, argv, &r, what, err);
    if (!ok) {
        err_label(rl, what, err);
        return BATON_LOCKER_ERR;
    }
    int rc = BATON_LOCKER_ERR;
    if (r->type == REDIS_REPLY_NIL) {
        errf(err, "redis %s: %s: not set (or expired)", rl->where, what);
        rc = BATON_LOCKER_LOST;
    } else if (r->type == REDIS_REPLY_STRING) {
        if (r->len >= len) {
            errf(err, "redis %s: %s: value of %zu bytes exceeds the buffer of %zu (NUL included)",
                 rl->where, what, (size_t)r->len, len);
        } else {
            memcpy(buf, r->str, r->len);
            buf[r->len] = '\0';
            rc = BATON_LOCKER_OK;
        }
    } else {
        errf(err, "redis %s: %s: %.100s", rl->where, what,
             r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    }
    freeReplyObject(r);
    return rc;
}

/* An epoch as the acquire script stores it: 1 to 20 decimal digits, no
 * sign or space, within uint64, not 0. */
static bool epoch_text(const char *s, size_t len, uint64_t *out)
{
    if (len == 0 || len > 20 || s[0] == '0') return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* GET key, PTTL key, GET <key>:epoch, GET <key>:holder in one round trip on
 * the side connection. */
static int redis_inspect(struct baton_locker *l, const char *key, struct baton_lock_info *info,
                         char err[BATON_LOCKER_ERR_MAX])
{
    struct redis_locker *rl = (struct redis_locker *)l;
    char ekey[LOCKER_SUBKEY_MAX], hkey[LOCKER_SUBKEY_MAX];
    locker_subkey(ekey, key, "epoch");
    locker_subkey(hkey, key, "holder");
    const char *a0[2] = {"GET", key}, *a1[2] = {"PTTL", key}, *a2[2] = {"GET", ekey},
               *a3[2] = {"GET", hkey};
    const char **argv[4] = {a0, a1, a2, a3};
    const int argc[4] = {2, 2, 2, 2};
    redisReply *r[4];
    bool ok = side_call(rl, 4, argc, argv, r, "inspect", err);
    if (!ok) return BATON_LOCKER_ERR;
    int rc = BATON_LOCKER_OK;
    for (int i = 0; i < 4; i++)
        if (r[i]->type == REDIS_REPLY_ERROR) {
            errf(err, "redis %s: inspect %.100s: %.100s", rl->where, key, r[i]->str);
            rc = BATON_LOCKER_ERR;
        }
    if (rc == BATON_LOCKER_OK) {
        info->held = r[0]->type == REDIS_REPLY_STRING;
        info->ttl_ms = r[1]->type == REDIS_REPLY_INTEGER && r[1]->integer >= 0 ? r[1]->integer : -1;
        if (r[2]->type == REDIS_REPLY_STRING && !epoch_text(r[2]->str, r[2]->len, &info->epoch)) {
            errf(err, "redis %s: inspect %.100s: %.100s holds \"%.40s\", not an epoch", rl->where,
                 key, ekey, r[2]->str);
            rc = BATON_LOCKER_ERR;
        }
        if (r[3]->type == REDIS_REPLY_STRING)
            snprintf(info->holder, sizeof info->holder, "%.*s", (int)r[3]->len, r[3]->str);
    }
    for (int i = 0; i < 4; i++) freeReplyObject(r[i]);
    return rc;
}

static void redis_where(struct baton_locker *l, char *buf, size_t len)
{
    struct redis_locker *rl = (struct redis_locker *)l;
    char addr[300];
    redis_sentinel_watch_addr(rl->watch, addr, sizeof addr);
    if (addr[0]) snprintf(buf, len, "%s (%s)", rl->where, addr);
    else snprintf(buf, len, "%s", rl->where);
}

static const struct locker_ops redis_ops = {
    .name = "redis",
    .try_lock = redis_try_lock,
    .unlock = redis_unlock,
    .renew = redis_renew,
    .renew_batch = redis_renew_batch,
    .try_lock_batch = redis_try_lock_batch,
    .announce_release = redis_announce,
    .release_seq = locker_redis_release_seq,
    .wait_release = locker_redis_wait_release,
    .wake_waiters = locker_redis_wake_waiters,
    .lease_traffic = redis_lease_traffic,
    .holders = redis_holders,
    .generation = redis_generation,
    .check = redis_check,
    .destroy = redis_destroy,
    .claim = redis_claim,
    .holder = redis_holder,
    .ping = redis_ping,
    .fenced_set = redis_fenced_set,
    .shared_get = redis_shared_get,
    .inspect = redis_inspect,
    .where = redis_where,
};

struct baton_locker *baton_locker_redis_create(const struct baton_redis_opts *opts, char err[BATON_LOCKER_ERR_MAX])
{
    err[0] = '\0';
    struct redis_locker *rl = calloc(1, sizeof *rl);
    if (!rl || redis_opts_copy(&rl->opts, opts) != 0) {
        free(rl);
        snprintf(err, BATON_LOCKER_ERR_MAX, "redis locker: out of memory");
        return NULL;
    }
    locker_base_init(&rl->base, &redis_ops, true);
    if (rl->opts.n_sentinels > 0)
        snprintf(rl->where, sizeof rl->where, "sentinel master %.100s",
                 rl->opts.master_name ? rl->opts.master_name : "");
    else
        snprintf(rl->where, sizeof rl->where, "%.100s:%d",
                 rl->opts.host && rl->opts.host[0] ? rl->opts.host : "127.0.0.1",
                 rl->opts.port > 0 ? rl->opts.port : 6379);
    snprintf(rl->holder, sizeof rl->holder, "%.80s pid %d", util_hostname(), (int)getpid());
    char inst[RANDOM_TOKEN_LEN];
    if (random_token(inst) != 0) snprintf(inst, sizeof inst, "%llx", (unsigned long long)clock_wall_ms());
    snprintf(rl->claim_value, sizeof rl->claim_value, "%s %.16s", rl->holder, inst);
    rl->lease.role = "lease";
    rl->side.role = "side";
    if (pipe2(rl->wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "redis locker: pipe: %s", strerror(errno));
        redis_opts_clear(&rl->opts);
        locker_base_destroy(&rl->base);
        free(rl);
        return NULL;
    }
    pthread_mutex_init(&rl->q_mu, NULL);
    pthread_mutex_init(&rl->lease.mu, NULL);
    pthread_mutex_init(&rl->side.mu, NULL);
    pthread_mutex_init(&rl->sub_mu, NULL);
    cond_init_clock(&rl->sub_cv, CLOCK_MONOTONIC);

    /* Connect the lease connection now: a refused AUTH or SELECT is a
     * configuration error and fails creation; an unreachable server is
     * transient (every call then reports BATON_LOCKER_ERR with the reason until it
     * is back). The side connection connects on first use. */
    bool refused = false;
    char cerr[BATON_LOCKER_ERR_MAX];
    rl->watch = redis_sentinel_watch_acquire(&rl->opts); /* NULL without sentinels */
    rl->lease.switch_seen = redis_sentinel_watch_count(rl->watch);
    rl->lease.c = redis_conn_open_ex(&rl->opts, cerr, sizeof cerr, &refused);
    if (rl->lease.c == NULL) {
        if (refused) {
            snprintf(err, BATON_LOCKER_ERR_MAX, "%s", cerr);
            redis_destroy(&rl->base);
            return NULL;
        }
        glog_warn("locker", NULL, "%s (will keep retrying)", cerr);
    } else {
        rl->lease.ever_connected = true;
        atomic_fetch_add(&rl->generation, 1);
        load_scripts(rl, &rl->lease);
    }
    return &rl->base;
}
