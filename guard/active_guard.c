/* ActiveGuard: one lease per scope; the holder is the only active consumer.
 *
 * Threads per guard:
 *   lease thread   acquire, renew, verify, release: never waits for a
 *                  callback, so the lease keeps being renewed while a slow
 *                  on_promoted (a broker handshake) or on_demoted (a drain)
 *                  runs;
 *   worker thread  runs on_promoted / on_demoted, one at a time, posted by
 *                  the lease thread: started for each callback and gone
 *                  when it returns (an idle guard has none).
 * and, per locker that renews in batches (redis), the renewer thread
 * (guard/renewer.h): while the lease thread leads, it delegates the
 * renewals at the interval to it and sleeps until an event. The renewer
 * extends the term through term_extend (below) and hands every other
 * outcome back (W_RENEWER), which the lease thread handles as if its own
 * renewal had given it; it then renews itself until one succeeds, and
 * delegates again. Likewise, per locker that attempts in batches (redis),
 * the acquirer thread (guard/acquirer.h): while the lease thread stands by,
 * it delegates its acquisition attempts to it and sleeps until it is handed
 * a grant (W_ACQUIRER), or asked to stop or give up.
 *
 * Terms. A term is one acquisition: one epoch, from the grant until its
 * deadline passes or the lease is released or lost. The state other threads
 * read is three atomics: term_epoch, deadline (CLOCK_BOOTTIME ms; > 0 while
 * the term may still be live, 0 once it ended) and lease_gen (the locker
 * generation the lease was last confirmed on). A passed deadline is final:
 * the first reader that sees the clock past it swaps it to 0
 * (compare-and-swap), and a renewal may only move it forward by a
 * compare-and-swap from the value it read while the clock was still before
 * it; so a renewal answered after the deadline can never revive the term:
 * leading again needs a new acquisition and a new epoch.
 * (guard/model/ checks this protocol with spin; its README maps the model's
 * transitions to the functions here.) */
#include "baton/active_guard.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "guard/acquirer.h"
#include "guard/locker.h"
#include "guard/renewer.h"
#include "baton/scope.h"
#include "base/glog.h"
#include "base/util.h"

#define DEFAULT_TTL_MS 3000
#define DEFAULT_RETRY_MS 250
/* While it leads, the lease thread sleeps until its next renewal or its
 * deadline. A backend that announces generation changes (notifies_gen:
 * redis, local) wakes it at once when its connection breaks; with the
 * others (etcd) it looks at the generation every LEADER_POLL_MS. Safety does
 * not depend on either: every reader checks the deadline and the generation
 * itself; this only bounds how soon a verification starts. */
#define LEADER_POLL_MS 50
#define LEADER_POLL_NOTIFIED_MS 1000 /* also the bound for a jump of the boot clock */
/* A standby waiting for a release looks at its flags at least this often;
 * a backend with wake_waiters is woken at stop / give-up instead. */
#define RELEASE_WAIT_CHUNK_MS 250
#define RELEASE_WAIT_CHUNK_WOKEN_MS 5000 /* waits are <= ttl: one wake per attempt */
#define VERIFY_RETRY_MS 100
/* A leader whose renewals the renewer makes sleeps until an event: the
 * renewer wakes it when its term ends (it watches the deadlines, also over
 * a jump of the boot clock) or when it hands the lease back; this bound is
 * only a backstop. Each such wait draws its length between half this and
 * this: the lease threads of endpoints that started together (1,000 on one
 * replica) would otherwise all wake in the same millisecond every 30 s and
 * queue on the locks they share. */
#define DELEGATED_MAX_WAIT_MS 30000

/* What the renewer handed back (struct baton_active_guard ren_kind). */
enum ren_back { RB_ERR, RB_LOST, RB_LATE, RB_ENDED };

enum wk_cmd { WK_NONE = 0, WK_PROMOTE, WK_DEMOTE };

struct baton_active_guard {
    struct baton_locker *locker; /* not owned */
    char key[BATON_GUARD_KEY_MAX];
    char *log_name;
    int64_t ttl_ms, renew_ms, retry_ms, margin_ms;
    int64_t command_timeout_ms; /* the locker's, 0 = unknown */
    int64_t (*standby_delay_ms)(void *arg);
    void *standby_delay_arg;
    struct baton_active_guard_callbacks cb;

    pthread_mutex_t life_mu; /* start/stop/destroy */
    bool running;
    pthread_t thread, worker;
    bool worker_running;

    pthread_mutex_t mu; /* wakeups, the give-up reason, the worker mailbox */
    pthread_cond_t cv;  /* lease thread waits here (CLOCK_MONOTONIC) */
    atomic_bool stop;
    atomic_bool give_up;
    /* logging only: "standby for ..." was said since the last promotion */
    atomic_bool said_standby;
    char give_up_reason[160];
    /* how long the next sit-out lasts (under mu): ttl after a give-up, the
     * asked hold after a step-down, INT64_MAX = until resumed */
    int64_t give_up_hold_ms;
    bool give_up_asked; /* (under mu) an operator's step-down, not a failure: logged at info */
    _Atomic int64_t hold_until; /* boot ms while sitting out; 0 = not; INT64_MAX = until resumed */
    atomic_bool resume_req;     /* set (under mu) only while sitting out */
    /* worker mailbox (under mu) */
    enum wk_cmd wk_cmd;
    uint64_t wk_epoch;
    atomic_bool wk_done; /* the posted command finished */
    int wk_result;

    /* the term, read lock-free by forwarders */
    _Atomic uint64_t term_epoch;
    _Atomic int64_t deadline; /* CLOCK_BOOTTIME ms; 0 = no live term */
    _Atomic uint64_t lease_gen;
    char token[RANDOM_TOKEN_LEN]; /* lease thread only; the renewer reads it while delegated */
    /* the term's token for its writers (baton_active_guard_term_token), under mu */
    char shown_token[RANDOM_TOKEN_LEN];
    uint64_t shown_epoch;
    /* the renewer: the entry, whether the lease thread delegated its
     * renewals (lease thread only), and what it handed back (under mu) */
    struct renewer *renewer;
    struct renewer_entry ren;
    bool delegated;
    atomic_bool ren_back;
    enum ren_back ren_kind;
    int64_t ren_sent;
    char ren_err[BATON_LOCKER_ERR_MAX];
    /* the acquirer: the entry, whether the lease thread delegated its
     * attempts (lease thread only), and the grant it handed over (under mu) */
    struct acquirer *acquirer;
    struct acquirer_entry acq;
    bool acq_delegated;
    atomic_bool acq_back;
    struct baton_lock_grant acq_grant;
    struct locker_watcher watcher; /* registered with the locker while leading */
    struct ratelimit rl_err;
    struct baton_active_guard_stats stats;
};

enum wake { W_TIMEOUT, W_STOP, W_GIVE_UP, W_RESUME, W_GEN, W_DEADLINE, W_WORKER, W_RENEWER, W_ACQUIRER };
enum lead_end { LEAD_STANDBY, LEAD_REACQUIRE, LEAD_STOPPED };

int baton_active_guard_check_timings(int64_t ttl, int64_t renew, int64_t retry, int64_t margin,
                               int64_t command_timeout_ms, char *msg, size_t msglen)
{
    if (ttl == 0) ttl = DEFAULT_TTL_MS;
    if (renew == 0) renew = ttl / 3;
    if (retry == 0) retry = DEFAULT_RETRY_MS;
    if (margin == 0) margin = ttl / 20 > 10 ? ttl / 20 : 10;
    const char *what = NULL;
    char buf[320];
    if (ttl <= 0)
        what = "ttl must be > 0";
    else if (renew <= 0)
        what = "renew interval must be > 0";
    else if (renew >= ttl)
        what = "renew interval must be shorter than the ttl";
    else if (retry <= 0)
        what = "retry interval must be > 0";
    else if (margin < 0 || ttl - margin <= renew)
        what = "ttl - safety margin must exceed the renew interval";
    else if (command_timeout_ms > 0 && ttl - margin - renew < command_timeout_ms) {
        snprintf(buf, sizeof buf,
                 "ttl - safety margin - renew = %lld ms is shorter than the locker command "
                 "timeout (%lld ms): a renewal that times out would leave no time to demote "
                 "before the key expires; raise ttl or lower renew",
                 (long long)(ttl - margin - renew), (long long)command_timeout_ms);
        what = buf;
    }
    if (what == NULL) return 0;
    snprintf(msg, msglen, "lease ttl %lld ms, renew %lld ms, retry %lld ms (margin %lld ms): %s",
             (long long)ttl, (long long)renew, (long long)retry, (long long)margin, what);
    return -1;
}

static uint64_t locker_gen(const struct baton_active_guard *g)
{
    if (g->locker == NULL || g->locker->ops->generation == NULL) return 0;
    return g->locker->ops->generation(g->locker);
}

static bool gen_changed(const struct baton_active_guard *g)
{
    return locker_gen(g) != atomic_load(&g->lease_gen);
}

/* ---- the term ------------------------------------------------------------- */

/* Reads the term consistently: its epoch and its deadline, ending it (swap
 * to 0) when the clock has passed the deadline. Returns the deadline (> 0
 * while live, 0 once ended) and *epoch. *now receives the clock reading. */
static int64_t term_read(const struct baton_active_guard *cg, uint64_t *epoch, int64_t *now)
{
    struct baton_active_guard *g = (struct baton_active_guard *)cg; /* atomics only */
    for (;;) {
        uint64_t e1 = atomic_load(&g->term_epoch);
        int64_t d = atomic_load(&g->deadline);
        uint64_t e2 = atomic_load(&g->term_epoch);
        if (e1 != e2) continue;
        *epoch = e1;
        *now = clock_boot_ms();
        if (d <= 0) return 0;
        if (*now < d) return d;
        /* passed: final. If the swap fails, a renewal moved it (from a
         * reading taken before it passed) or it ended: look again. */
        if (atomic_compare_exchange_strong(&g->deadline, &d, 0)) return 0;
    }
}

static void term_begin(struct baton_active_guard *g, uint64_t epoch, int64_t sent_ms, uint64_t gen)
{
    int64_t d = sent_ms + g->ttl_ms - g->margin_ms;
    if (d <= 0) d = 1;
    atomic_store(&g->deadline, 0);
    atomic_store(&g->lease_gen, gen);
    atomic_store(&g->term_epoch, epoch); /* before the deadline: readers see a consistent pair */
    atomic_store(&g->deadline, d);
}

/* A renewal sent at sent_ms was answered OK: move the deadline forward, but
 * only if the term is still live now. false = the term had ended (the reply
 * came too late, or a reader saw the deadline pass): it stays ended. */
static bool term_extend(struct baton_active_guard *g, int64_t sent_ms, uint64_t gen)
{
    int64_t d = atomic_load(&g->deadline);
    if (d <= 0) return false;
    if (clock_boot_ms() >= d) {
        atomic_compare_exchange_strong(&g->deadline, &d, 0);
        return false;
    }
    int64_t nd = sent_ms + g->ttl_ms - g->margin_ms;
    atomic_store(&g->lease_gen, gen);
    if (nd <= d) return true; /* never shrinks it */
    /* fails only when a reader ended the term meanwhile */
    return atomic_compare_exchange_strong(&g->deadline, &d, nd);
}

static void term_end(struct baton_active_guard *g)
{
    atomic_store(&g->deadline, 0);
}

static bool term_live(const struct baton_active_guard *g)
{
    uint64_t e;
    int64_t now;
    return term_read(g, &e, &now) > 0;
}

/* ---- waiting -------------------------------------------------------------- */

/* Waits until `until` (boot ms) or an event. watch_flags: stop / give-up
 * wake it; leader: also the term's end and (from gen_after on) the locker
 * generation; the worker's completion always wakes it. */
static enum wake wait_until(struct baton_active_guard *g, int64_t until, bool watch_flags, bool leader,
                            int64_t gen_after)
{
    enum wake w;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        if (watch_flags && atomic_load(&g->stop)) {
            w = W_STOP;
            break;
        }
        if (watch_flags && atomic_load(&g->give_up)) {
            w = W_GIVE_UP;
            break;
        }
        if (watch_flags && atomic_load(&g->resume_req)) {
            w = W_RESUME;
            break;
        }
        if (atomic_load(&g->wk_done)) {
            w = W_WORKER;
            break;
        }
        if (atomic_load(&g->ren_back)) {
            w = W_RENEWER;
            break;
        }
        if (atomic_load(&g->acq_back)) {
            w = W_ACQUIRER;
            break;
        }
        int64_t now = clock_boot_ms();
        int64_t d = 0;
        if (leader) {
            /* under mu (term_live is lock free): a flag set and broadcast
             * while mu was let go here would be missed until the timeout
             * (30 s while the renewer renews) */
            bool live = term_live(g);
            if (!live) {
                w = W_DEADLINE;
                break;
            }
            d = atomic_load(&g->deadline);
            if (now >= gen_after && gen_changed(g)) {
                w = W_GEN;
                break;
            }
        }
        if (now >= until) {
            w = W_TIMEOUT;
            break;
        }
        int64_t slice = until - now;
        if (leader) {
            if (gen_after > now && gen_after - now < slice) slice = gen_after - now;
            if (!g->delegated) {
                if (d > 0 && d - now < slice) slice = d - now;
                int64_t poll = g->locker->notifies_gen ? LEADER_POLL_NOTIFIED_MS : LEADER_POLL_MS;
                if (slice > poll) slice = poll;
            } else if (!g->locker->notifies_gen && slice > LEADER_POLL_MS) {
                slice = LEADER_POLL_MS; /* nobody announces a generation change */
            }
        }
        /* the boot clock may jump (resume); while delegated, the renewer
         * watches the deadline, or the acquirer makes the attempts */
        int64_t cap = (leader && g->delegated) || g->acq_delegated
                          ? DELEGATED_MAX_WAIT_MS - random_jitter(DELEGATED_MAX_WAIT_MS / 2)
                          : 1000;
        if (slice > cap) slice = cap;
        struct clock_wait cw = clock_wait_in(CLOCK_MONOTONIC, slice);
        clock_cond_wait(&g->cv, &g->mu, &cw);
    }
    pthread_mutex_unlock(&g->mu);
    return w;
}

static void note_backend_error(struct baton_active_guard *g, const char *what, const char *err)
{
    atomic_fetch_add(&g->stats.backend_errors, 1);
    long long suppressed = 0;
    if (ratelimit_ok(&g->rl_err, 2000, &suppressed))
        glog_warn("guard", g->log_name, "%s %s: %s (%lld similar suppressed)", what, g->key, err,
                 suppressed);
}

/* ---- the callback worker ---------------------------------------------------- */

/* One thread per posted command, started when it is posted and gone when
 * the callback returns: an idle guard holds no callback thread (1,000
 * endpoints: 1,000 threads fewer per replica). */
static void *worker_main(void *arg)
{
    struct baton_active_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    enum wk_cmd cmd = g->wk_cmd;
    uint64_t epoch = g->wk_epoch;
    pthread_mutex_unlock(&g->mu);
    int rc = 0;
    if (cmd == WK_PROMOTE && g->cb.on_promoted) rc = g->cb.on_promoted(g->cb.arg, epoch);
    if (cmd == WK_DEMOTE && g->cb.on_demoted) g->cb.on_demoted(g->cb.arg);
    pthread_mutex_lock(&g->mu);
    g->wk_cmd = WK_NONE;
    g->wk_result = rc;
    atomic_store(&g->wk_done, true);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/* Joins the thread of the previous command (it has finished, or is about
 * to: a command is posted only after the last one's completion was taken). */
static void worker_reap(struct baton_active_guard *g)
{
    pthread_mutex_lock(&g->mu);
    bool have = g->worker_running;
    pthread_t t = g->worker;
    g->worker_running = false;
    pthread_mutex_unlock(&g->mu);
    if (have) pthread_join(t, NULL);
}

static void worker_post(struct baton_active_guard *g, enum wk_cmd cmd, uint64_t epoch)
{
    worker_reap(g);
    pthread_mutex_lock(&g->mu);
    atomic_store(&g->wk_done, false);
    g->wk_cmd = cmd;
    g->wk_epoch = epoch;
    pthread_t t;
    int err = pthread_create(&t, NULL, worker_main, g);
    if (err == 0) {
        thread_name(t, "cb", g->log_name ? g->log_name : g->key);
        g->worker = t;
        g->worker_running = true;
        pthread_mutex_unlock(&g->mu);
        return;
    }
    pthread_mutex_unlock(&g->mu);
    /* No thread (resource limits): a promotion fails (the guard releases
     * and tries again later); a demotion runs here, on the lease thread,
     * so the consumer is stopped all the same. */
    glog_error("guard", g->log_name, "cannot start a callback thread for %s (%s): %s", g->key,
               cmd == WK_PROMOTE ? "promotion fails" : "on_demoted runs on the lease thread",
               strerror(err));
    int rc = -1;
    if (cmd == WK_DEMOTE) {
        rc = 0;
        if (g->cb.on_demoted) g->cb.on_demoted(g->cb.arg);
    }
    pthread_mutex_lock(&g->mu);
    g->wk_cmd = WK_NONE;
    g->wk_result = rc;
    atomic_store(&g->wk_done, true);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* Takes the finished command's result (W_WORKER), and joins its thread now
 * (it only has to return): left for the next command, a leader's finished
 * promotion thread kept its stack until the demotion (at 1,000 led
 * endpoints, 1,000 finished threads and ~12 MiB of stacks). */
static int worker_take(struct baton_active_guard *g)
{
    pthread_mutex_lock(&g->mu);
    atomic_store(&g->wk_done, false);
    int rc = g->wk_result;
    pthread_mutex_unlock(&g->mu);
    worker_reap(g);
    return rc;
}

/* ---- leading ---------------------------------------------------------------- */

/* Verifies the lease after the locker connection broke. */
static int verify_lease(struct baton_active_guard *g, char err[BATON_LOCKER_ERR_MAX])
{
    uint64_t g1 = locker_gen(g); /* before the request: a break during it shows */
    int rc;
    if (g->locker->ops->check) {
        err[0] = '\0';
        rc = g->locker->ops->check(g->locker, g->key, g->token, err);
        if (rc == BATON_LOCKER_OK) atomic_store(&g->lease_gen, g1);
    } else {
        int64_t sent = 0;
        rc = baton_locker_renew(g->locker, g->key, g->token, g->ttl_ms, &sent, err);
        if (rc == BATON_LOCKER_OK && !term_extend(g, sent, g1)) rc = BATON_LOCKER_LOST;
    }
    return rc;
}

enum end_mode {
    END_NONE = 0,
    END_GRACEFUL,  /* stop, give-up, failed start: drain under the renewed lease, release, announce */
    END_REACQUIRE, /* locker cannot renew: release and try again at once */
    END_EXPIRED,   /* the deadline passed: the term ended; release quietly */
    END_LOST,      /* the key is gone or another's: nothing to release */
};

/* The next renewal after one sent at `sent`: on a grid of renew_ms on the
 * boot clock, so that the guards of a process with the same interval renew
 * at the same instants and the locker sends their renewals in one batch
 * (locker_redis.c: one pipelined round trip). Never later than sent +
 * renew_ms; the first interval of a term may be shorter. */
static int64_t next_renewal(const struct baton_active_guard *g, int64_t sent)
{
    int64_t t = sent + g->renew_ms;
    if (t <= 0) return t;
    return t - t % g->renew_ms; /* > sent: t % renew_ms < renew_ms */
}

/* Whether a lease call (a renewal retry, a verification) started now is
 * sure to end before the term's deadline. One that the command timeout
 * could keep blocked past it would hold up the demotion (on_demoted) by up
 * to that timeout, and an answer after the deadline cannot extend the term
 * anyway: the guard waits for the deadline instead. Asked before a retry
 * after a failed renewal and before a verification; the renewal at the
 * interval is always made (it fits by check_timings, ttl - margin - renew >=
 * timeout, unless the thread woke late, and then it may still save the
 * term). */
static bool call_fits(const struct baton_active_guard *g)
{
    int64_t d = atomic_load(&g->deadline);
    return g->command_timeout_ms <= 0 || d <= 0 || clock_boot_ms() + g->command_timeout_ms <= d;
}

/* ---- the renewer's side (its thread, its mutex held) ------------------------ */

static struct baton_active_guard *guard_of(struct renewer_entry *e)
{
    return (struct baton_active_guard *)((char *)e - offsetof(struct baton_active_guard, ren));
}

/* The renewer takes its hands off the lease: the lease thread handles what
 * it says (W_RENEWER). */
static void hand_back(struct baton_active_guard *g, enum ren_back kind, const struct locker_renewal *r)
{
    pthread_mutex_lock(&g->mu);
    g->ren_kind = kind;
    g->ren_sent = r ? r->sent_ms : 0;
    snprintf(g->ren_err, sizeof g->ren_err, "%s", r ? r->err : "");
    atomic_store(&g->ren_back, true);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static int64_t ren_answered(struct renewer_entry *e, const struct locker_renewal *r, uint64_t gen)
{
    struct baton_active_guard *g = guard_of(e);
    if (r->rc == BATON_LOCKER_OK) {
        /* the same compare-and-swap as the lease thread's: never revives,
         * never shrinks */
        if (term_extend(g, r->sent_ms, gen)) return next_renewal(g, r->sent_ms);
        hand_back(g, RB_LATE, r);
        return 0;
    }
    hand_back(g, r->rc == BATON_LOCKER_LOST ? RB_LOST : RB_ERR, r);
    return 0;
}

static int64_t ren_deadline(struct renewer_entry *e)
{
    struct baton_active_guard *g = guard_of(e);
    uint64_t epoch;
    int64_t now;
    int64_t d = term_read(g, &epoch, &now); /* ends the term when the clock passed it */
    if (d <= 0) hand_back(g, RB_ENDED, NULL);
    return d;
}

static const struct renewer_client guard_renewer_client = {
    .answered = ren_answered,
    .deadline = ren_deadline,
};

/* ---- leading (the lease thread) -------------------------------------------- */

/* The outcome of a renewal at the interval, made by the lease thread
 * itself or handed back by the renewer: rc, and whether term_extend took
 * an OK answer. */
struct lead_state {
    enum end_mode end;
    char reason[sizeof ((struct baton_active_guard *)0)->give_up_reason + BATON_LOCKER_ERR_MAX + 128];
    int64_t next_renew, gen_after;
    bool retrying; /* the last renewal failed (not LOST) */
};

static void renew_outcome(struct baton_active_guard *g, struct lead_state *ls, int rc, bool extended,
                          int64_t sent, const char *err)
{
    if (rc == BATON_LOCKER_OK) {
        if (!extended) {
            atomic_fetch_add(&g->stats.renew_failures, 1);
            size_t l = strlen(ls->reason);
            snprintf(ls->reason + l, sizeof ls->reason - l,
                     "%srenewal answered after the lease deadline (%lld ms after it was "
                     "sent): the term ended and is not revived",
                     l ? "; " : "", (long long)(clock_boot_ms() - sent));
            ls->end = END_EXPIRED;
            term_end(g);
            return;
        }
        ls->next_renew = next_renewal(g, sent);
        ls->gen_after = 0;
        ls->retrying = false;
    } else if (rc == BATON_LOCKER_LOST) {
        atomic_fetch_add(&g->stats.renew_failures, 1);
        snprintf(ls->reason, sizeof ls->reason, "%s", err);
        ls->end = END_LOST;
        term_end(g);
    } else {
        /* keep trying until the deadline; the term ends there */
        atomic_fetch_add(&g->stats.renew_failures, 1);
        note_backend_error(g, "renewing", err);
        int64_t step = g->retry_ms < g->renew_ms ? g->retry_ms : g->renew_ms;
        ls->next_renew = clock_boot_ms() + step;
        ls->retrying = true;
    }
}

static enum lead_end lead(struct baton_active_guard *g, const struct baton_lock_grant *grant, uint64_t gen0)
{
    memcpy(g->token, grant->token, sizeof g->token);
    pthread_mutex_lock(&g->mu);
    memcpy(g->shown_token, grant->token, sizeof g->shown_token);
    g->shown_epoch = grant->epoch;
    pthread_mutex_unlock(&g->mu);
    g->watcher.mu = &g->mu;
    g->watcher.cv = &g->cv;
    locker_watch(g->locker, &g->watcher);
    /* the epoch first: whoever sees the term live sees its epoch */
    atomic_store(&g->stats.epoch, grant->epoch);
    term_begin(g, grant->epoch, grant->sent_ms, gen0);
    atomic_store(&g->stats.leader_since_ms, clock_wall_ms());
    atomic_store(&g->stats.role, BATON_ROLE_LEADER);
    atomic_fetch_add(&g->stats.promotions, 1);
    glog_info("guard", g->log_name, "promoted to leader of %s (epoch %llu)", g->key,
             (unsigned long long)grant->epoch);
    atomic_store(&g->said_standby, false); /* a standby again after this term says so again */

    worker_post(g, WK_PROMOTE, grant->epoch);
    bool promoting = true, demoting = false, promote_failed = false;
    enum lead_end ret = LEAD_STANDBY;
    struct lead_state ls = {.end = END_NONE};
    bool can_renew = baton_locker_can_renew(g->locker);
    ls.next_renew = next_renewal(g, grant->sent_ms);
    char err[BATON_LOCKER_ERR_MAX];
    /* the renewer renews at the interval from now on (the token stays
     * until renewer_remove below) */
    g->ren.client = &guard_renewer_client;
    g->ren.req.key = g->key;
    g->ren.req.token = g->token;
    g->ren.req.ttl_ms = g->ttl_ms;
    atomic_store(&g->ren_back, false);
    g->delegated = can_renew && renewer_add(g->renewer, &g->ren, ls.next_renew);

    for (;;) {
        bool live = ls.end != END_EXPIRED && ls.end != END_LOST && term_live(g);
        if (!live && ls.end != END_EXPIRED && ls.end != END_LOST) {
            /* the deadline passed (seen here, by a reader or the renewer): final */
            atomic_fetch_add(&g->stats.renew_failures, 1);
            if (ls.end == END_NONE)
                snprintf(ls.reason, sizeof ls.reason, "lease deadline passed without a successful renewal");
            else
                snprintf(ls.reason + strlen(ls.reason), sizeof ls.reason - strlen(ls.reason),
                         "; the lease deadline passed meanwhile");
            ls.end = END_EXPIRED;
            term_end(g);
        }
        if (ls.end != END_NONE && !promoting && !demoting) {
            /* on_demoted only after on_promoted returned; the lease keeps
             * being renewed meanwhile (graceful) */
            worker_post(g, WK_DEMOTE, 0);
            demoting = true;
        }
        bool renewing = live && ls.end != END_EXPIRED && ls.end != END_LOST;
        enum wake w = wait_until(g, renewing && !g->delegated ? ls.next_renew : INT64_MAX,
                                 ls.end == END_NONE, renewing, ls.gen_after);
        switch (w) {
        case W_WORKER: {
            int rc = worker_take(g);
            if (promoting) {
                promoting = false;
                if (rc < 0 && ls.end == END_NONE) {
                    glog_warn("guard", g->log_name, "starting the consumer failed; releasing %s", g->key);
                    snprintf(ls.reason, sizeof ls.reason, "promotion failed");
                    ls.end = END_GRACEFUL;
                    promote_failed = true;
                }
            } else if (demoting) {
                demoting = false;
                goto done;
            }
            break;
        }
        case W_STOP:
            snprintf(ls.reason, sizeof ls.reason, "stopping");
            ls.end = END_GRACEFUL;
            ret = LEAD_STOPPED;
            break;
        case W_GIVE_UP:
            pthread_mutex_lock(&g->mu);
            snprintf(ls.reason, sizeof ls.reason, "gave up: %s", g->give_up_reason);
            pthread_mutex_unlock(&g->mu);
            ls.end = END_GRACEFUL; /* guard_main sits out afterwards */
            break;
        case W_DEADLINE:
        case W_RESUME:   /* only while sitting out */
        case W_ACQUIRER: /* not delegated while leading */
            break; /* handled at the top */
        case W_RENEWER: {
            /* the renewer let go of the lease: handled as if this thread's
             * own renewal had given it; this thread renews from now on
             * (retries), until one succeeds */
            pthread_mutex_lock(&g->mu);
            enum ren_back kind = g->ren_kind;
            int64_t sent = g->ren_sent;
            snprintf(err, sizeof err, "%s", g->ren_err);
            atomic_store(&g->ren_back, false);
            pthread_mutex_unlock(&g->mu);
            g->delegated = false;
            if (kind == RB_ENDED) break; /* the deadline passed: the top sees it */
            if (ls.end == END_EXPIRED || ls.end == END_LOST) break;
            renew_outcome(g, &ls, kind == RB_LOST ? BATON_LOCKER_LOST
                                  : kind == RB_ERR ? BATON_LOCKER_ERR
                                                   : BATON_LOCKER_OK,
                          false, sent, err);
            break;
        }
        case W_GEN: {
            if (!call_fits(g)) {
                ls.gen_after = INT64_MAX; /* UNSURE until a renewal or the deadline */
                break;
            }
            int rc = verify_lease(g, err);
            if (rc == BATON_LOCKER_OK) {
                glog_info("guard", g->log_name,
                         "lease %s (epoch %llu) verified after the connection was re-established",
                         g->key, (unsigned long long)grant->epoch);
                ls.gen_after = 0;
            } else if (rc == BATON_LOCKER_LOST) {
                atomic_fetch_add(&g->stats.renew_failures, 1);
                snprintf(ls.reason, sizeof ls.reason, "lease lost while the connection was down");
                ls.end = END_LOST;
                term_end(g);
            } else {
                note_backend_error(g, "verifying", err);
                ls.gen_after = clock_boot_ms() + VERIFY_RETRY_MS;
            }
            break;
        }
        case W_TIMEOUT: {
            if (!renewing || g->delegated) break;
            if (ls.retrying && !call_fits(g)) {
                ls.next_renew = INT64_MAX; /* the term ends at its deadline */
                break;
            }
            if (!can_renew) {
                if (ls.end == END_NONE) {
                    snprintf(ls.reason, sizeof ls.reason, "re-acquiring (locker cannot renew)");
                    ls.end = END_REACQUIRE;
                }
                ls.next_renew = INT64_MAX;
                break;
            }
            uint64_t g1 = locker_gen(g); /* before the request: a break during it shows */
            int64_t sent = 0;
            int rc = baton_locker_renew(g->locker, g->key, g->token, g->ttl_ms, &sent, err);
            bool extended = rc == BATON_LOCKER_OK && term_extend(g, sent, g1);
            renew_outcome(g, &ls, rc, extended, sent, err);
            /* renewed: the renewer takes the next ones again */
            if (extended && g->renewer) g->delegated = renewer_add(g->renewer, &g->ren, ls.next_renew);
            break;
        }
        }
    }
done:
    term_end(g);
    /* a renewal of this term in flight is answered before the lease is
     * released or another term begins (the model's Guard waits for Ren) */
    renewer_remove(g->renewer, &g->ren);
    g->delegated = false;
    atomic_store(&g->ren_back, false);
    locker_unwatch(g->locker, &g->watcher);
    atomic_store(&g->stats.role, BATON_ROLE_STANDBY);
    atomic_fetch_add(&g->stats.demotions, 1);
    glog_info("guard", g->log_name, "demoted from leader of %s (epoch %llu): %s", g->key,
             (unsigned long long)grant->epoch, ls.reason);
    if (ls.end != END_LOST) {
        int rc = baton_locker_unlock(g->locker, g->key, g->token, err);
        if (rc != BATON_LOCKER_OK) {
            if (ls.end != END_EXPIRED) glog_warn("guard", g->log_name, "release of %s: %s", g->key, err);
        } else if (ls.end == END_GRACEFUL && g->locker->ops->announce_release) {
            if (g->locker->ops->announce_release(g->locker, g->key, err) != BATON_LOCKER_OK)
                glog_warn("guard", g->log_name, "announcing the release of %s: %s", g->key, err);
        }
    }
    if (promote_failed && ret != LEAD_STOPPED) {
        wait_until(g, clock_boot_ms() + g->retry_ms, true, false, 0);
        atomic_store(&g->wk_done, false);
    }
    if (ls.end == END_REACQUIRE && ret != LEAD_STOPPED) return LEAD_REACQUIRE;
    return ret;
}

/* After an attempt found the key held with held_pttl_ms left: look again
 * when it would expire (at least retry_ms, at most ttl), instead of every
 * retry_ms. The holder's lease cannot expire before its remaining ttl, and
 * a release is announced: a crash is taken over right at the expiry. */
static int64_t held_wait(const struct baton_active_guard *g, int64_t held_pttl_ms)
{
    int64_t wait = g->retry_ms;
    if (held_pttl_ms > wait) wait = held_pttl_ms + 1;
    if (wait > g->ttl_ms) wait = g->ttl_ms;
    return wait;
}

/* The extra delay before each attempt (leader balancing), >= 0. */
static int64_t standby_delay(struct baton_active_guard *g)
{
    int64_t d = g->standby_delay_ms ? g->standby_delay_ms(g->standby_delay_arg) : 0;
    return d > 0 ? d : 0;
}

/* ---- the acquirer's side (its thread, its mutex held) ----------------------- */

static struct baton_active_guard *guard_of_acq(struct acquirer_entry *e)
{
    return (struct baton_active_guard *)((char *)e - offsetof(struct baton_active_guard, acq));
}

/* An attempt made for this standby: a grant is handed to the lease thread
 * (W_ACQUIRER); held or an error, the next attempt is scheduled as the
 * lease thread would have made it. */
/* A lease attempt found the lease held: said once per standby period (at
 * start, after each term), not at every attempt. */
static void say_standby(struct baton_active_guard *g, int64_t held_pttl_ms)
{
    if (atomic_exchange(&g->said_standby, true)) return;
    if (held_pttl_ms > 0)
        glog_info("guard", g->log_name, "standby for %s: another replica holds the lease (%lld ms left); "
                  "waiting for its release or expiry", g->key, (long long)held_pttl_ms);
    else
        glog_info("guard", g->log_name, "standby for %s: another replica holds the lease; waiting for "
                  "its release or expiry", g->key);
}

static int64_t acq_answered(struct acquirer_entry *e, const struct locker_acquisition *a,
                            uint64_t gen_before)
{
    struct baton_active_guard *g = guard_of_acq(e);
    if (a->rc == BATON_LOCKER_OK) {
        /* a won attempt shows as leader by the time it is counted */
        atomic_store(&g->stats.role, BATON_ROLE_LEADER);
        atomic_fetch_add(&g->stats.attempts, 1);
        pthread_mutex_lock(&g->mu);
        g->acq_grant = a->grant;
        /* the generation of the connection that carried the grant, read
         * before the request when the backend gives none (as guard_main) */
        if (g->acq_grant.gen == 0) g->acq_grant.gen = gen_before;
        atomic_store(&g->acq_back, true);
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        return 0;
    }
    atomic_fetch_add(&g->stats.attempts, 1);
    int64_t now = clock_boot_ms();
    int64_t d = standby_delay(g);
    e->release_delay = d;
    if (a->rc == BATON_LOCKER_HELD) {
        say_standby(g, a->grant.held_pttl_ms);
        return now + held_wait(g, a->grant.held_pttl_ms) + d;
    }
    note_backend_error(g, "acquiring", a->err);
    return now + g->retry_ms + d;
}

static const struct acquirer_client guard_acquirer_client = {
    .answered = acq_answered,
};

/* Standby through the acquirer: it makes every attempt (the first at once,
 * after the balancing delay) and hands over a grant; this thread sleeps
 * until then or until it is asked to stop or give up. Returns false when
 * the acquirer could not take the attempts (the caller makes them). */
static bool standby_delegated(struct baton_active_guard *g)
{
    /* subscribed to the key's release announcements before the first
     * attempt is made: any release after that attempt reaches the acquirer */
    g->locker->ops->release_seq(g->locker, g->key);
    int64_t d = standby_delay(g);
    g->acq.client = &guard_acquirer_client;
    g->acq.req.key = g->key;
    g->acq.req.ttl_ms = g->ttl_ms;
    g->acq.release_delay = d;
    atomic_store(&g->acq_back, false);
    if (!acquirer_add(g->acquirer, &g->acq, clock_boot_ms() + d)) return false;
    g->acq_delegated = true;
    wait_until(g, INT64_MAX, true, false, 0);
    acquirer_remove(g->acquirer, &g->acq); /* an attempt in flight is answered first */
    g->acq_delegated = false;
    pthread_mutex_lock(&g->mu);
    bool granted = atomic_load(&g->acq_back);
    struct baton_lock_grant grant = g->acq_grant;
    atomic_store(&g->acq_back, false);
    pthread_mutex_unlock(&g->mu);
    if (!granted) return true; /* stop or give-up: the caller's loop sees it */
    if (atomic_load(&g->stop) || atomic_load(&g->give_up)) {
        /* granted while asked to stop or give up: never led; the lease goes
         * back at once, announced to the other standbys */
        char err[BATON_LOCKER_ERR_MAX];
        int rc = baton_locker_unlock(g->locker, g->key, grant.token, err);
        if (rc != BATON_LOCKER_OK)
            glog_warn("guard", g->log_name, "release of %s: %s", g->key, err);
        else if (g->locker->ops->announce_release &&
                 g->locker->ops->announce_release(g->locker, g->key, err) != BATON_LOCKER_OK)
            glog_warn("guard", g->log_name, "announcing the release of %s: %s", g->key, err);
        atomic_store(&g->stats.role, BATON_ROLE_STANDBY);
        return true;
    }
    lead(g, &grant, grant.gen); /* LEAD_REACQUIRE: at once, through the acquirer */
    return true;
}

/* Standby: wait wait_ms, returning early when a release is announced after
 * `seen` was read (true) or on stop / give-up. */
static bool standby_wait(struct baton_active_guard *g, int64_t wait_ms, uint64_t seen)
{
    int64_t until = clock_boot_ms() + wait_ms;
    if (g->locker->ops->wait_release == NULL) {
        wait_until(g, until, true, false, 0);
        return false;
    }
    int64_t chunk = g->locker->ops->wake_waiters ? RELEASE_WAIT_CHUNK_WOKEN_MS : RELEASE_WAIT_CHUNK_MS;
    for (;;) {
        if (atomic_load(&g->stop) || atomic_load(&g->give_up)) return false;
        int64_t rem = until - clock_boot_ms();
        if (rem <= 0) return false;
        if (rem > chunk) rem = chunk;
        if (g->locker->ops->wait_release(g->locker, g->key, seen, rem)) return true;
    }
}

/* The boot-clock time a hold of hold_ms that starts now ends; INT64_MAX
 * (until resumed) for INT64_MAX or a hold too long to add. */
static int64_t hold_end(int64_t hold_ms)
{
    int64_t now = clock_boot_ms();
    return hold_ms >= INT64_MAX - now ? INT64_MAX : now + hold_ms;
}

/* Out of the race after a give-up (one ttl) or a step-down (its hold, or
 * until resumed). A new give-up or step-down, a resume or a stop ends it
 * early (the caller's loop then sits out again for the new request). */
static void sit_out(struct baton_active_guard *g)
{
    char reason[sizeof g->give_up_reason];
    pthread_mutex_lock(&g->mu);
    snprintf(reason, sizeof reason, "%s", g->give_up_reason);
    int64_t hold = g->give_up_hold_ms;
    bool asked = g->give_up_asked;
    int64_t until = hold_end(hold);
    atomic_store(&g->hold_until, until > 0 ? until : 1);
    atomic_store(&g->give_up, false);
    atomic_store(&g->resume_req, false);
    pthread_mutex_unlock(&g->mu);
    if (asked && hold == INT64_MAX)
        glog_info("guard", g->log_name, "%s: not competing for %s until resumed", reason, g->key);
    else if (asked)
        glog_info("guard", g->log_name, "%s: not competing for %s for %lld ms", reason, g->key, (long long)hold);
    else
        glog_warn("guard", g->log_name, "giving up %s (%s): not competing for %lld ms", g->key, reason,
                  (long long)hold);
    enum wake w = wait_until(g, until, true, false, 0);
    pthread_mutex_lock(&g->mu);
    atomic_store(&g->hold_until, 0);
    atomic_store(&g->resume_req, false);
    pthread_mutex_unlock(&g->mu);
    if (w == W_RESUME) glog_info("guard", g->log_name, "resumed: competing for %s again", g->key);
}

static void run_single(struct baton_active_guard *g)
{
    atomic_store(&g->stats.role, BATON_ROLE_SINGLE);
    bool promoted = false;
    while (!atomic_load(&g->stop)) {
        if (!promoted) {
            if (g->cb.on_promoted == NULL || g->cb.on_promoted(g->cb.arg, 0) >= 0) {
                promoted = true;
                atomic_fetch_add(&g->stats.promotions, 1);
                atomic_store(&g->stats.leader_since_ms, clock_wall_ms());
                glog_info("guard", g->log_name, "no locker: running as the single instance");
            } else {
                glog_warn("guard", g->log_name, "starting the consumer failed; retrying");
                if (g->cb.on_demoted) g->cb.on_demoted(g->cb.arg);
                wait_until(g, clock_boot_ms() + g->retry_ms, true, false, 0);
                continue;
            }
        }
        enum wake w = wait_until(g, INT64_MAX, true, false, 0);
        if (w == W_GIVE_UP) {
            if (g->cb.on_demoted) g->cb.on_demoted(g->cb.arg);
            atomic_fetch_add(&g->stats.demotions, 1);
            promoted = false;
            sit_out(g);
        }
    }
    if (promoted && g->cb.on_demoted) g->cb.on_demoted(g->cb.arg);
}

static void *guard_main(void *arg)
{
    struct baton_active_guard *g = arg;
    if (g->locker == NULL) {
        run_single(g);
        return NULL;
    }
    bool have_seq = g->locker->ops->release_seq != NULL;
    while (!atomic_load(&g->stop)) {
        if (atomic_load(&g->give_up)) {
            sit_out(g);
            continue;
        }
        if (g->acquirer && standby_delegated(g)) continue;
        int64_t d = standby_delay(g);
        if (d > 0 && wait_until(g, clock_boot_ms() + d, true, false, 0) != W_TIMEOUT) continue;
        /* Read before try_lock: an announcement made after this point is
         * seen by standby_wait, whenever it comes. */
        uint64_t seen = have_seq ? g->locker->ops->release_seq(g->locker, g->key) : 0;
        struct baton_lock_grant grant;
        memset(&grant, 0, sizeof grant);
        char err[BATON_LOCKER_ERR_MAX];
        /* The generation of the connection that carries the grant, read
         * before the request: a break at any point after it shows as a
         * change and makes the guard verify (a reconnect inside try_lock
         * costs one extra check, never a missed break). The backend's own
         * reading (grant.gen) is preferred when it gives one. */
        uint64_t gen_before = locker_gen(g);
        int rc = baton_locker_try_lock(g->locker, g->key, g->ttl_ms, &grant, err);
        /* a won attempt shows as leader by the time it is counted */
        if (rc == BATON_LOCKER_OK) atomic_store(&g->stats.role, BATON_ROLE_LEADER);
        atomic_fetch_add(&g->stats.attempts, 1);
        if (rc == BATON_LOCKER_OK) {
            lead(g, &grant, grant.gen ? grant.gen : gen_before); /* LEAD_REACQUIRE: at once */
            continue;
        }
        if (rc == BATON_LOCKER_HELD) {
            say_standby(g, grant.held_pttl_ms);
            standby_wait(g, held_wait(g, grant.held_pttl_ms), seen);
            continue;
        }
        note_backend_error(g, "acquiring", err);
        wait_until(g, clock_boot_ms() + g->retry_ms, true, false, 0);
    }
    atomic_store(&g->stats.role, BATON_ROLE_STANDBY);
    return NULL;
}

struct baton_active_guard *baton_active_guard_create(struct baton_locker *locker, const char *scope,
                                         const struct baton_active_guard_options *opts,
                                         const struct baton_active_guard_callbacks *cb, char *err,
                                         size_t errlen)
{
    struct baton_active_guard_options o = {0};
    if (opts) o = *opts;
    char msg[400];
    if (baton_active_guard_check_timings(o.ttl_ms, o.renew_ms, o.retry_ms, o.safety_margin_ms,
                                   locker ? o.command_timeout_ms : 0, msg, sizeof msg) != 0) {
        snprintf(err, errlen, "active guard %s: %s", scope ? scope : "", msg);
        return NULL;
    }
    int64_t ttl = o.ttl_ms ? o.ttl_ms : DEFAULT_TTL_MS;
    int64_t renew = o.renew_ms ? o.renew_ms : ttl / 3;
    int64_t retry = o.retry_ms ? o.retry_ms : DEFAULT_RETRY_MS;
    int64_t margin = o.safety_margin_ms ? o.safety_margin_ms : (ttl / 20 > 10 ? ttl / 20 : 10);
    struct baton_active_guard *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, errlen, "active guard %s: out of memory", scope ? scope : "");
        return NULL;
    }
    if (baton_lease_key(g->key, sizeof g->key, o.prefix, scope, o.hash_tag) < 0) {
        snprintf(err, errlen, "active guard %s: key too long", scope ? scope : "");
        free(g);
        return NULL;
    }
    g->locker = locker;
    g->renewer = renewer_of(locker); /* NULL: the backend cannot renew in batches */
    g->acquirer = acquirer_of(locker); /* NULL: nor attempt in batches */
    g->log_name = o.log_name ? strdup(o.log_name) : NULL;
    if (o.log_name && !g->log_name) {
        snprintf(err, errlen, "active guard %s: out of memory", scope ? scope : "");
        free(g);
        return NULL;
    }
    g->ttl_ms = ttl;
    g->renew_ms = renew;
    g->retry_ms = retry;
    g->margin_ms = margin;
    g->command_timeout_ms = o.command_timeout_ms > 0 ? o.command_timeout_ms : 0;
    g->standby_delay_ms = o.standby_delay_ms;
    g->standby_delay_arg = o.standby_delay_arg;
    if (cb) g->cb = *cb;
    pthread_mutex_init(&g->life_mu, NULL);
    pthread_mutex_init(&g->mu, NULL);
    cond_init_clock(&g->cv, CLOCK_MONOTONIC);
    atomic_store(&g->stats.role, locker ? BATON_ROLE_STANDBY : BATON_ROLE_SINGLE);
    return g;
}

int baton_active_guard_start(struct baton_active_guard *g)
{
    if (g == NULL) return -1;
    pthread_mutex_lock(&g->life_mu);
    int rc = 0;
    if (!g->running) {
        atomic_store(&g->stop, false);
        pthread_mutex_lock(&g->mu);
        g->wk_cmd = WK_NONE;
        atomic_store(&g->wk_done, false);
        pthread_mutex_unlock(&g->mu);
        if (pthread_create(&g->thread, NULL, guard_main, g) != 0) {
            glog_error("guard", g->log_name, "cannot start the guard thread for %s", g->key);
            rc = -1;
        } else {
            thread_name(g->thread, "lease", g->log_name ? g->log_name : g->key);
            g->running = true;
        }
    }
    pthread_mutex_unlock(&g->life_mu);
    return rc;
}

void baton_active_guard_request_stop(struct baton_active_guard *g)
{
    if (g == NULL) return;
    pthread_mutex_lock(&g->mu);
    atomic_store(&g->stop, true);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (g->locker && g->locker->ops->wake_waiters) g->locker->ops->wake_waiters(g->locker);
}

void baton_active_guard_stop(struct baton_active_guard *g)
{
    if (g == NULL) return;
    pthread_mutex_lock(&g->life_mu);
    pthread_mutex_lock(&g->mu);
    bool in_worker = g->worker_running && pthread_equal(pthread_self(), g->worker);
    pthread_mutex_unlock(&g->mu);
    if (g->running || in_worker) {
        baton_active_guard_request_stop(g);
        if ((g->running && pthread_equal(pthread_self(), g->thread)) || in_worker) {
            /* called from a callback: the loop ends after it returns; the
             * owner's later stop/destroy joins */
            pthread_mutex_unlock(&g->life_mu);
            return;
        }
        if (g->running) pthread_join(g->thread, NULL);
        g->running = false;
    }
    /* the thread of the last callback (the lease thread has ended: no more
     * are started) */
    worker_reap(g);
    pthread_mutex_unlock(&g->life_mu);
}

void baton_active_guard_destroy(struct baton_active_guard *g)
{
    if (g == NULL) return;
    baton_active_guard_stop(g);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    pthread_mutex_destroy(&g->life_mu);
    free(g->log_name);
    free(g);
}

enum baton_leader_state baton_active_guard_term_state(const struct baton_active_guard *g, uint64_t epoch,
                                          int64_t *left_ms)
{
    if (left_ms) *left_ms = 0;
    if (g == NULL) return BATON_LEADER_NO;
    if (g->locker == NULL) {
        if (left_ms) *left_ms = INT64_MAX;
        return BATON_LEADER_YES;
    }
    uint64_t e;
    int64_t now;
    int64_t d = term_read(g, &e, &now);
    if (d <= 0 || e != epoch) return BATON_LEADER_NO;
    if (left_ms) *left_ms = d - now;
    return gen_changed(g) ? BATON_LEADER_UNSURE : BATON_LEADER_YES;
}

bool baton_active_guard_is_leader_now(const struct baton_active_guard *g)
{
    return baton_active_guard_leader_state(g) == BATON_LEADER_YES;
}

enum baton_leader_state baton_active_guard_leader_state(const struct baton_active_guard *g)
{
    if (g == NULL) return BATON_LEADER_NO;
    return baton_active_guard_term_state(g, atomic_load(&g->term_epoch), NULL);
}

bool baton_active_guard_term_open(const struct baton_active_guard *g)
{
    if (g == NULL) return false;
    if (g->locker == NULL) return true;
    return atomic_load(&((struct baton_active_guard *)g)->deadline) > 0;
}

int baton_active_guard_term_token(struct baton_active_guard *g, uint64_t epoch,
                                  char out[BATON_TOKEN_LEN])
{
    out[0] = '\0';
    if (!g || epoch == 0) return -1;
    pthread_mutex_lock(&g->mu);
    bool same = g->shown_epoch == epoch;
    if (same) memcpy(out, g->shown_token, BATON_TOKEN_LEN);
    pthread_mutex_unlock(&g->mu);
    return same ? 0 : -1;
}

uint64_t baton_active_guard_epoch(const struct baton_active_guard *g)
{
    return g ? atomic_load(&g->stats.epoch) : 0;
}

/* A give-up or step-down never shortens a hold already running or asked
 * for (a drain stays a drain when a standby's source is lost meanwhile):
 * only resume does. */
static void request_give_up(struct baton_active_guard *g, const char *reason, int64_t hold_ms, bool asked)
{
    pthread_mutex_lock(&g->mu);
    int64_t cur = atomic_load(&g->hold_until);
    int64_t want = hold_end(hold_ms);
    bool pending = atomic_load(&g->give_up);
    if ((cur != 0 && cur >= want) || (pending && g->give_up_hold_ms >= hold_ms)) {
        pthread_mutex_unlock(&g->mu);
        return;
    }
    snprintf(g->give_up_reason, sizeof g->give_up_reason, "%s", reason ? reason : "");
    g->give_up_hold_ms = hold_ms;
    g->give_up_asked = asked;
    atomic_store(&g->give_up, true);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (g->locker && g->locker->ops->wake_waiters) g->locker->ops->wake_waiters(g->locker);
}

void baton_active_guard_give_up(struct baton_active_guard *g, const char *reason)
{
    if (g == NULL) return;
    request_give_up(g, reason, g->ttl_ms, false);
}

void baton_active_guard_step_down(struct baton_active_guard *g, const char *reason, int64_t hold_ms)
{
    if (g == NULL) return;
    request_give_up(g, reason, hold_ms < 0 ? INT64_MAX : hold_ms == 0 ? 2 * g->ttl_ms : hold_ms, true);
}

void baton_active_guard_resume(struct baton_active_guard *g)
{
    if (g == NULL) return;
    pthread_mutex_lock(&g->mu);
    /* a step-down not yet acted on still steps down, but holds no longer */
    if (atomic_load(&g->give_up)) g->give_up_hold_ms = 0;
    if (atomic_load(&g->hold_until) != 0) {
        atomic_store(&g->resume_req, true);
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    if (g->locker && g->locker->ops->wake_waiters) g->locker->ops->wake_waiters(g->locker);
}

int64_t baton_active_guard_hold_left_ms(const struct baton_active_guard *g)
{
    if (g == NULL) return 0;
    struct baton_active_guard *mg = (struct baton_active_guard *)g;
    int64_t until = atomic_load(&mg->hold_until);
    if (until == 0) {
        /* a step-down asked for and not yet acted on (a standby's thread may
         * be in a round trip): its hold, as it will be, so that what the
         * operator asked shows at once */
        int64_t pending = 0;
        pthread_mutex_lock(&mg->mu);
        if (atomic_load(&mg->give_up) && mg->give_up_asked) pending = mg->give_up_hold_ms;
        pthread_mutex_unlock(&mg->mu);
        return pending == INT64_MAX ? -1 : pending;
    }
    if (until == INT64_MAX) return -1;
    int64_t left = until - clock_boot_ms();
    return left > 0 ? left : 1;
}

const char *baton_active_guard_key(const struct baton_active_guard *g)
{
    return g->key;
}

const struct baton_active_guard_stats *baton_active_guard_stats(const struct baton_active_guard *g)
{
    return &g->stats;
}
