/* redis_probe: see redis_probe.h.
 *
 * State under mu: the groups (a list) and each group's members. The thread
 * is started by the first join and ends when the last group is gone (it is
 * detached: nothing waits for it; a later join starts another). Each group
 * has its own next check (next_ms); the thread sleeps until the earliest,
 * and a join wakes it. */
#include "endpoints/redis_probe.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/util.h"
#include "common/log.h"
#include "common/util.h"

#define COMPONENT "redis_psub"

struct probe_group {
    struct probe_group *next;
    char host[256];
    int port;
    int64_t interval_ms;
    struct probe_conn *members, *cursor; /* cursor: the next one to PING */
    size_t n;
    struct probe_conn *target; /* PINGed at ping_ms, not answered yet */
    int64_t ping_ms, next_ms;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv; /* CLOCK_MONOTONIC; made once */
static pthread_once_t cv_once = PTHREAD_ONCE_INIT;
static struct probe_group *groups;
static bool running;
static atomic_ullong n_pings, n_deaths;

static void cv_init(void)
{
    cond_init_clock(&cv, CLOCK_MONOTONIC);
}

static bool readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

/* mu held: one look at g at time now. */
static void group_step(struct probe_group *g, int64_t now)
{
    if (g->target) {
        struct probe_conn *t = g->target;
        if (atomic_load(&t->last_read_ms) >= g->ping_ms || readable(t->fd)) {
            g->target = NULL; /* answered (or something else came): alive */
        } else if (now - g->ping_ms < g->interval_ms) {
            g->next_ms = g->ping_ms + g->interval_ms;
            return;
        } else {
            atomic_fetch_add(&n_deaths, 1);
            log_warn(COMPONENT, NULL,
                     "redis %s:%d: no answer to PING within %lld ms: dropping its %zu "
                     "connection(s)", g->host, g->port, (long long)g->interval_ms, g->n);
            for (struct probe_conn *m = g->members; m; m = m->next) {
                atomic_store(&m->dead, true);
                shutdown(m->fd, SHUT_RDWR);
            }
            g->target = NULL;
            g->next_ms = now + g->interval_ms;
            return;
        }
    }
    /* anything read on any connection within the interval: alive */
    int64_t last = 0;
    for (struct probe_conn *m = g->members; m; m = m->next) {
        int64_t r = atomic_load(&m->last_read_ms);
        if (r > last) last = r;
    }
    if (now - last < g->interval_ms) {
        g->next_ms = last + g->interval_ms;
        return;
    }
    struct probe_conn *t = g->cursor ? g->cursor : g->members;
    g->cursor = t->next;
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    ssize_t w = send(t->fd, ping, sizeof ping - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    g->next_ms = now + g->interval_ms;
    if (w == (ssize_t)(sizeof ping - 1)) {
        atomic_fetch_add(&n_pings, 1);
        g->target = t;
        g->ping_ms = now;
    }
    /* not written (a full buffer, a broken socket): the consumer's read
     * shows a broken one; look again next interval */
}

static void *probe_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    while (groups != NULL) {
        int64_t now = clock_mono_ms();
        int64_t wake = now + 60000;
        for (struct probe_group *g = groups; g; g = g->next) {
            if (now >= g->next_ms) group_step(g, now);
            if (g->next_ms < wake) wake = g->next_ms;
        }
        if (wake > now) {
            struct timespec ts = clock_deadline(CLOCK_MONOTONIC, wake - now);
            pthread_cond_timedwait(&cv, &mu, &ts);
        }
    }
    running = false;
    pthread_mutex_unlock(&mu);
    return NULL;
}

bool probe_join(struct probe_conn *pc, const char *host, int port, int64_t interval_ms, int fd)
{
    pthread_once(&cv_once, cv_init);
    pc->fd = fd;
    pc->next = pc->prev = NULL;
    atomic_store(&pc->last_read_ms, clock_mono_ms());
    atomic_store(&pc->dead, false);
    pthread_mutex_lock(&mu);
    struct probe_group *g = groups;
    while (g && !(g->port == port && g->interval_ms == interval_ms && strcmp(g->host, host) == 0))
        g = g->next;
    bool made = false;
    if (g == NULL) {
        g = calloc(1, sizeof *g);
        if (g == NULL) {
            pthread_mutex_unlock(&mu);
            return false;
        }
        snprintf(g->host, sizeof g->host, "%s", host);
        g->port = port;
        g->interval_ms = interval_ms;
        g->next_ms = clock_mono_ms() + interval_ms;
        g->next = groups;
        groups = g;
        made = true;
    }
    if (!running) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        int err = pthread_create(&t, &a, probe_main, NULL);
        pthread_attr_destroy(&a);
        if (err != 0) {
            if (made) {
                groups = g->next;
                free(g);
            }
            pthread_mutex_unlock(&mu);
            log_warn(COMPONENT, NULL, "cannot start the PING thread (%s): each connection PINGs "
                     "on its own", strerror(err));
            return false;
        }
        thread_name(t, "baton", "probe");
        running = true;
    }
    pc->group = g;
    pc->next = g->members;
    if (g->members) g->members->prev = pc;
    g->members = pc;
    g->n++;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    return true;
}

void probe_leave(struct probe_conn *pc)
{
    pthread_mutex_lock(&mu);
    struct probe_group *g = pc->group;
    if (g != NULL) {
        if (g->target == pc) g->target = NULL;
        if (g->cursor == pc) g->cursor = pc->next;
        if (pc->prev)
            pc->prev->next = pc->next;
        else
            g->members = pc->next;
        if (pc->next) pc->next->prev = pc->prev;
        g->n--;
        if (g->members == NULL) {
            struct probe_group **pp = &groups;
            while (*pp != g) pp = &(*pp)->next;
            *pp = g->next;
            free(g);
            pthread_cond_signal(&cv); /* the last one: the thread ends */
        }
    }
    pc->group = NULL;
    pc->next = pc->prev = NULL;
    pthread_mutex_unlock(&mu);
}

void probe_counts(uint64_t *pings, uint64_t *deaths)
{
    *pings = atomic_load(&n_pings);
    *deaths = atomic_load(&n_deaths);
}
