/* The Redis locker's release subscriber (guard/locker_redis.c describes the
 * three connections): a thread of its own, started on first use, SUBSCRIBEs
 * to "<key>:released" for each key watched, counts the announcements per key
 * (release_seq) and wakes the standbys waiting on one (wait_release). The
 * locker's state is in guard/locker_redis_private.h. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
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

#define SUB_POLL_MS 1000 /* the wake pipe interrupts it (new channel, destroy) */

/* ---- subscriber ------------------------------------------------------------ */

void locker_redis_wake_sub(struct redis_locker *rl)
{
    char b = 1;
    ssize_t n = write(rl->wake_pipe[1], &b, 1);
    (void)n; /* a full pipe already means "wake up" */
}

static void drain_pipe(int fd)
{
    char buf[64];
    while (read(fd, buf, sizeof buf) > 0) {
    }
}

/* sub_mu held. */
static uint32_t chan_hash(const char *key, size_t kl)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < kl; i++) h = (h ^ (unsigned char)key[i]) * 16777619u;
    return h;
}

static struct sub_channel *channel_find(struct redis_locker *rl, const char *key, size_t kl)
{
    uint32_t h = chan_hash(key, kl);
    for (struct sub_channel *ch = rl->chan_index[h & (CHAN_BUCKETS - 1)]; ch; ch = ch->hnext)
        if (ch->hash == h && ch->klen == kl && memcmp(ch->key, key, kl) == 0) return ch;
    return NULL;
}

/* "message" on <key>:released counts one announcement; a "subscribe"
 * confirmation counts one too (announcements before it were not seen). */
static void sub_deliver(struct redis_locker *rl, redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR) {
        /* e.g. an ACL without +subscribe or the &<prefix>:* channels:
         * standbys then learn of releases only at the lease's expiry */
        long long suppressed = 0;
        if (ratelimit_ok(&rl->rl_sub_err, 60000, &suppressed))
            glog_error("locker", NULL,
                      "redis %s: release subscriber: %s (standbys wait for the lease's expiry "
                      "instead of the release announcement; %lld similar suppressed)",
                      rl->where, r->str, suppressed);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3) return;
    redisReply *kind = r->element[0], *chan = r->element[1];
    if (kind->type != REDIS_REPLY_STRING || chan->type != REDIS_REPLY_STRING) return;
    bool message = strcmp(kind->str, "message") == 0;
    bool confirm = strcmp(kind->str, "subscribe") == 0;
    if (!message && !confirm) return;
    size_t sl = strlen(RELEASED_SUFFIX);
    if (chan->len <= sl || strcmp(chan->str + chan->len - sl, RELEASED_SUFFIX) != 0) return;
    pthread_mutex_lock(&rl->sub_mu);
    struct sub_channel *ch = channel_find(rl, chan->str, chan->len - sl);
    if (ch) {
        ch->seq++;
        if (confirm) ch->confirmed = true;
        pthread_cond_broadcast(&rl->sub_cv);
    }
    pthread_mutex_unlock(&rl->sub_mu);
    /* the standbys the acquirer attempts for (a confirmation too: any
     * announcement before it was missed) */
    if (ch) locker_release_notify(&rl->base, chan->str, chan->len - sl);
}

/* Sends SUBSCRIBE for channels not yet subscribed on sc (named first when
 * fresh). false = broken. */
static bool sub_flush_subscriptions(struct redis_locker *rl, redisContext *sc, bool fresh)
{
    bool any = fresh;
    if (fresh) redisAppendCommand(sc, "CLIENT SETNAME baton-sub");
    pthread_mutex_lock(&rl->sub_mu);
    for (struct sub_channel *ch = rl->channels; ch; ch = ch->next) {
        if (ch->subscribed) continue;
        redisAppendCommand(sc, "SUBSCRIBE %s" RELEASED_SUFFIX, ch->key);
        ch->subscribed = true;
        any = true;
    }
    pthread_mutex_unlock(&rl->sub_mu);
    if (!any) return true;
    int done = 0;
    while (!done)
        if (redisBufferWrite(sc, &done) != REDIS_OK) return false;
    return true;
}

static void sub_wait(struct redis_locker *rl, int64_t ms)
{
    struct pollfd p = {.fd = rl->wake_pipe[0], .events = POLLIN};
    if (poll(&p, 1, (int)ms) > 0) drain_pipe(rl->wake_pipe[0]);
}

/* Frees the subscriber connection: every channel is to be subscribed again,
 * and the generation moves (announcements may have been missed meanwhile). */
static void sub_drop(struct redis_locker *rl, redisContext **sc)
{
    redisFree(*sc);
    *sc = NULL;
    pthread_mutex_lock(&rl->sub_mu);
    for (struct sub_channel *ch = rl->channels; ch; ch = ch->next)
        ch->subscribed = ch->confirmed = false;
    pthread_mutex_unlock(&rl->sub_mu);
    locker_redis_gen_bump(rl);
}

static void *sub_main(void *arg)
{
    struct redis_locker *rl = arg;
    redisContext *sc = NULL;
    bool fresh = false;
    bool setname_pending = false; /* CLIENT SETNAME's reply (best effort) not read yet */
    unsigned attempt = 0;
    uint64_t sub_switch_seen = 0;
    while (!atomic_load(&rl->sub_stop)) {
        if (sc && redis_sentinel_watch_count(rl->watch) != sub_switch_seen) {
            /* subscribed on the old master: announcements go to the new one */
            glog_debug("locker", NULL, "release subscriber on redis %s: the sentinels switched "
                      "the master; resubscribing", rl->where);
            sub_drop(rl, &sc);
        }
        if (sc == NULL) {
            char err[BATON_LOCKER_ERR_MAX];
            sub_switch_seen = redis_sentinel_watch_count(rl->watch);
            sc = redis_conn_open(&rl->opts, err, sizeof err);
            if (sc == NULL) {
                glog_debug("locker", NULL, "release subscriber: %s", err);
                sub_wait(rl, backoff_ms(attempt < 10 ? attempt : 10, 50, 500));
                attempt++;
                continue;
            }
            attempt = 0;
            fresh = true;
            setname_pending = true;
        }
        bool broken = !sub_flush_subscriptions(rl, sc, fresh);
        fresh = false;
        if (!broken) {
            struct pollfd p[2] = {{.fd = sc->fd, .events = POLLIN},
                                  {.fd = rl->wake_pipe[0], .events = POLLIN}};
            int n = poll(p, 2, SUB_POLL_MS);
            if (n < 0 && errno != EINTR) broken = true;
            if (n > 0 && (p[1].revents & POLLIN)) drain_pipe(rl->wake_pipe[0]);
            if (n > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
                if (redis_buffer_read(sc) != REDIS_OK) {
                    broken = true;
                } else {
                    void *reply = NULL;
                    int rc;
                    while ((rc = redis_next_reply(sc, &reply)) == REDIS_OK && reply) {
                        redisReply *rr = reply;
                        if (setname_pending && rr->type != REDIS_REPLY_ARRAY)
                            setname_pending = false; /* +OK, or refused by an ACL: fine */
                        else
                            sub_deliver(rl, reply);
                        freeReplyObject(reply);
                        reply = NULL;
                    }
                    if (rc != REDIS_OK) broken = true;
                }
            }
        }
        if (broken) {
            glog_debug("locker", NULL, "release subscriber on redis %s: connection broke (%s)",
                      rl->where, sc->errstr[0] ? sc->errstr : "closed");
            sub_drop(rl, &sc);
        }
    }
    if (sc) redisFree(sc);
    return NULL;
}

/* sub_mu held. */
static bool sub_ensure_started_locked(struct redis_locker *rl)
{
    if (rl->sub_started) return true;
    if (pthread_create(&rl->sub_thread, NULL, sub_main, rl) == 0) {
        thread_name(rl->sub_thread, "locker", "sub");
    } else {
        glog_error("locker", NULL, "redis %s: cannot start the release subscriber thread",
                  rl->where);
        return false;
    }
    rl->sub_started = true;
    return true;
}

void locker_redis_sub_ensure_started(struct redis_locker *rl)
{
    pthread_mutex_lock(&rl->sub_mu);
    sub_ensure_started_locked(rl);
    pthread_mutex_unlock(&rl->sub_mu);
}

/* sub_mu held: the channel of key, created (and handed to the subscriber
 * thread) on first use; *created tells. NULL when the thread cannot start. */
static struct sub_channel *channel_watch(struct redis_locker *rl, const char *key, bool *created)
{
    *created = false;
    if (!sub_ensure_started_locked(rl)) return NULL;
    struct sub_channel *ch = channel_find(rl, key, strlen(key));
    if (ch == NULL) {
        ch = calloc(1, sizeof *ch);
        if (ch) ch->key = strdup(key);
        if (!ch || !ch->key) { /* out of memory: not watched, the standby polls */
            free(ch);
            return NULL;
        }
        ch->klen = strlen(key);
        ch->hash = chan_hash(key, ch->klen);
        ch->next = rl->channels;
        rl->channels = ch;
        ch->hnext = rl->chan_index[ch->hash & (CHAN_BUCKETS - 1)];
        rl->chan_index[ch->hash & (CHAN_BUCKETS - 1)] = ch;
        *created = true;
        locker_redis_wake_sub(rl);
    }
    return ch;
}

uint64_t locker_redis_release_seq(struct baton_locker *l, const char *key)
{
    struct redis_locker *rl = (struct redis_locker *)l;
    pthread_mutex_lock(&rl->sub_mu);
    bool created;
    struct sub_channel *ch = channel_watch(rl, key, &created);
    uint64_t seq = 0;
    if (ch != NULL) {
        if (created) {
            /* wait (briefly) for the SUBSCRIBE confirmation, so that every
             * announcement after this call is counted; if it comes later,
             * it advances the count then */
            int64_t to = rl->opts.command_timeout_ms > 0 ? rl->opts.command_timeout_ms : 1000;
            struct timespec ts = clock_deadline(CLOCK_MONOTONIC, to);
            while (!ch->confirmed && !atomic_load(&rl->sub_stop))
                if (pthread_cond_timedwait(&rl->sub_cv, &rl->sub_mu, &ts) != 0) break;
        }
        seq = ch->seq;
    }
    pthread_mutex_unlock(&rl->sub_mu);
    return seq;
}

bool locker_redis_wait_release(struct baton_locker *l, const char *key, uint64_t seen,
                               int64_t timeout_ms)
{
    struct redis_locker *rl = (struct redis_locker *)l;
    struct timespec ts = clock_deadline(CLOCK_MONOTONIC, timeout_ms);
    pthread_mutex_lock(&rl->sub_mu);
    bool created;
    struct sub_channel *ch = channel_watch(rl, key, &created);
    if (ch == NULL) {
        pthread_mutex_unlock(&rl->sub_mu);
        sleep_ms_cancellable(timeout_ms, NULL);
        return false;
    }
    uint64_t woken = rl->sub_woken;
    while (ch->seq == seen && rl->sub_woken == woken && !atomic_load(&rl->sub_stop))
        if (pthread_cond_timedwait(&rl->sub_cv, &rl->sub_mu, &ts) != 0) break;
    bool changed = ch->seq != seen;
    pthread_mutex_unlock(&rl->sub_mu);
    return changed;
}

void locker_redis_wake_waiters(struct baton_locker *l)
{
    struct redis_locker *rl = (struct redis_locker *)l;
    pthread_mutex_lock(&rl->sub_mu);
    rl->sub_woken++;
    pthread_cond_broadcast(&rl->sub_cv);
    pthread_mutex_unlock(&rl->sub_mu);
}
