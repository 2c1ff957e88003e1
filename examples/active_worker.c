/* A worker loop that only one replica runs at a time, with libbaton-guard's
 * ActiveGuard, and that passes the lease's fencing epoch to what it writes.
 *
 *   cc active_worker.c $(pkg-config --cflags --libs baton-guard) -o active_worker
 *   ./active_worker [-h host] [-p port] [-t ttl_ms] [-n items]
 *
 * Start several: one becomes the leader and processes items 1, 2, 3, ...
 * (here: prints "item <n> epoch <e>"), the others wait. Kill the leader and
 * a standby takes over within the lease ttl, resuming after the last item
 * the old leader committed. Progress is committed with a fenced write
 * (baton_locker_fenced_set): it succeeds only while this replica's epoch is
 * still the lease's current one, so a leader that was paused (GC, SIGSTOP,
 * a VM migration) and wakes up after a newer leader took over can never
 * overwrite the newer leader's progress: its write is refused and it stops.
 * The same rule, an epoch that must not go backwards, is what a database or
 * an HTTP receiver should check on everything the worker sends it. */
#define _DEFAULT_SOURCE /* getopt, usleep under -std=c11 */
#include <baton/guard.h>

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct worker {
    struct baton_locker *locker;
    struct baton_active_guard *guard;
    pthread_mutex_t mu;
    uint64_t epoch; /* the term this replica leads, 0 = standby */
    long next;      /* the next item to process in that term */
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

/* Promoted (on the guard's callback thread): read where the previous
 * leader got to, then start working in this term. */
static int on_promoted(void *arg, uint64_t epoch)
{
    struct worker *w = arg;
    char value[32], err[BATON_LOCKER_ERR_MAX];
    long done = 0;
    int rc = baton_locker_shared_get(w->locker, baton_active_guard_key(w->guard), "progress",
                                     value, sizeof value, err);
    if (rc == BATON_LOCKER_OK)
        done = atol(value);
    else if (rc != BATON_LOCKER_LOST) { /* LOST: nothing committed yet */
        fprintf(stderr, "active_worker: cannot read the progress: %s\n", err);
        return -1; /* the guard demotes and releases: another replica may do better */
    }
    pthread_mutex_lock(&w->mu);
    w->epoch = epoch;
    w->next = done + 1;
    pthread_mutex_unlock(&w->mu);
    fprintf(stderr, "active_worker: leader, epoch %" PRIu64 ", resuming after item %ld\n", epoch,
            done);
    return 0;
}

/* Demoted: stop before returning (the mutex waits out an item in flight). */
static void on_demoted(void *arg)
{
    struct worker *w = arg;
    pthread_mutex_lock(&w->mu);
    w->epoch = 0;
    pthread_mutex_unlock(&w->mu);
    fprintf(stderr, "active_worker: standby\n");
}

/* One item in term `epoch`: commit it, fenced by the epoch, then report it. */
static void work_one(struct worker *w)
{
    pthread_mutex_lock(&w->mu);
    uint64_t epoch = w->epoch;
    /* Term-scoped: only while this term is the current one and its lease
     * deadline has not passed (a few atomic loads, no round trip). */
    if (epoch == 0 || baton_active_guard_term_state(w->guard, epoch, NULL) != BATON_LEADER_YES) {
        pthread_mutex_unlock(&w->mu);
        return;
    }
    long n = w->next;
    char value[32], err[BATON_LOCKER_ERR_MAX];
    int len = snprintf(value, sizeof value, "%ld", n);
    int rc = baton_locker_fenced_set(w->locker, baton_active_guard_key(w->guard), "progress",
                                     epoch, value, (size_t)len, 24 * 3600 * 1000LL, err);
    if (rc == BATON_LOCKER_OK) {
        printf("item %ld epoch %" PRIu64 "\n", n, epoch);
        fflush(stdout);
        w->next = n + 1;
    } else if (rc == BATON_LOCKER_LOST) {
        /* a newer leader exists: this term is over, whatever our clock says */
        fprintf(stderr, "active_worker: item %ld refused: %s\n", n, err);
        w->epoch = 0;
    } else {
        fprintf(stderr, "active_worker: item %ld not committed (retried): %s\n", n, err);
    }
    pthread_mutex_unlock(&w->mu);
}

int main(int argc, char **argv)
{
    struct baton_redis_opts ro = {.host = "127.0.0.1", .port = 6379};
    long ttl = 3000, items = 0;
    int opt;
    while ((opt = getopt(argc, argv, "h:p:t:n:")) != -1) {
        switch (opt) {
        case 'h': ro.host = optarg; break;
        case 'p': ro.port = atoi(optarg); break;
        case 't': ttl = atol(optarg); break;
        case 'n': items = atol(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-h host] [-p port] [-t ttl_ms] [-n items]\n", argv[0]);
            return 64;
        }
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    char err[BATON_LOCKER_ERR_MAX];
    struct worker w = {.mu = PTHREAD_MUTEX_INITIALIZER};
    w.locker = baton_locker_redis_create(&ro, err);
    if (!w.locker) {
        fprintf(stderr, "active_worker: %s\n", err);
        return 1;
    }
    struct baton_active_guard_options o = {.ttl_ms = ttl, .log_name = "worker",
                                           .command_timeout_ms = 1000};
    struct baton_active_guard_callbacks cb = {.on_promoted = on_promoted,
                                              .on_demoted = on_demoted, .arg = &w};
    char gerr[256];
    w.guard = baton_active_guard_create(w.locker, "example:worker", &o, &cb, gerr, sizeof gerr);
    if (!w.guard || baton_active_guard_start(w.guard) != 0) {
        fprintf(stderr, "active_worker: %s\n", w.guard ? "cannot start the guard" : gerr);
        baton_active_guard_destroy(w.guard);
        baton_locker_destroy(w.locker);
        return 1;
    }
    while (!stop) {
        work_one(&w);
        pthread_mutex_lock(&w.mu);
        bool finished = items > 0 && w.next > items;
        pthread_mutex_unlock(&w.mu);
        if (finished) break;
        usleep(50000); /* the work itself */
    }
    /* Graceful: on_demoted, release the lease and announce it, so a standby
     * takes over at once instead of after the ttl. */
    baton_active_guard_stop(w.guard);
    baton_active_guard_destroy(w.guard);
    baton_locker_destroy(w.locker);
    return 0;
}
