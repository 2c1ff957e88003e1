/* The test clock: see tests/support/fake_clock.h. Built into the test
 * support library only; it reaches base/util.c's clocks through
 * clock_hooks_set. */
#include "tests/support/fake_clock.h"

#include "base/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static atomic_bool fk_on; /* whether the fake clock is installed */

/* One per thread that used the fake clock (created at its first call,
 * freed when the thread exits). */
struct fk_thread {
    struct fk_thread *next;
    int64_t until;      /* fake ms it waits for; 0 = not waiting */
    pthread_cond_t *cv; /* the condition it waits on (clock_cond_wait), or NULL */
    int64_t act_us;     /* real monotonic us of its last clock call */
    pid_t tid;
    pthread_mutex_t sleep_mu;
    pthread_cond_t sleep_cv; /* fake_clock_sleep's own */
};

static pthread_mutex_t fk_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fk_thread *fk_threads; /* under fk_mu */
static _Atomic int64_t fk_now;
static _Atomic uint64_t fk_steps;
static uint64_t fk_epoch; /* under fk_mu: bumped when a thread starts or stops waiting */
static pthread_t fk_ticker;
static bool fk_stop;    /* under fk_mu */
static int64_t fk_quiet_us = 20000; /* a woken waiter that stays silent this long counts as blocked */
static int64_t fk_pause_us = 30;   /* between the two looks that must agree */
static bool fk_installed; /* main thread's: install / uninstall */
static pthread_key_t fk_key;
static pthread_once_t fk_key_once = PTHREAD_ONCE_INIT;

static int64_t real_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static struct timespec real_deadline(clockid_t clock, int64_t ms)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    if (ms < 0) ms = 0;
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static void fk_thread_gone(void *p)
{
    struct fk_thread *t = p;
    pthread_mutex_lock(&fk_mu);
    for (struct fk_thread **pp = &fk_threads; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    fk_epoch++;
    pthread_mutex_unlock(&fk_mu);
    pthread_cond_destroy(&t->sleep_cv);
    pthread_mutex_destroy(&t->sleep_mu);
    free(t);
}

static void fk_key_init(void)
{
    pthread_key_create(&fk_key, fk_thread_gone);
}

/* The calling thread's record; fk_mu held. NULL when out of memory (the
 * thread is then unseen by the ticker). */
static struct fk_thread *me_locked(void)
{
    struct fk_thread *t = pthread_getspecific(fk_key);
    if (t) return t;
    t = calloc(1, sizeof *t);
    if (!t) return NULL;
    pthread_mutex_init(&t->sleep_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->sleep_cv, &ca);
    pthread_condattr_destroy(&ca);
    t->act_us = real_us();
    t->tid = (pid_t)syscall(SYS_gettid);
    t->next = fk_threads;
    fk_threads = t;
    fk_epoch++;
    pthread_setspecific(fk_key, t);
    return t;
}

/* Whether the threads that use the clock have all taken in the time they
 * were last given: none of them is woken for a deadline it has not seen yet
 * (a waiter the ticker woke, or a wait noted by clock_deadline that has
 * passed), unless it stayed silent for fk_quiet_us. fk_mu held. */
static bool settled_locked(int64_t now, int64_t real)
{
    for (struct fk_thread *t = fk_threads; t; t = t->next)
        if (t->until > 0 && t->until <= now && real - t->act_us < fk_quiet_us) return false;
    return true;
}

/* Whether every thread of the process but the ticker sleeps in the kernel
 * (/proc/self/task/<tid>/stat: not 'R'): a thread that runs, or is ready to
 * run, may be about to wait for a deadline, or to wake another thread; fake
 * time waits for it. This also sees the threads that never call the clock
 * (a callback thread, a thread just started). */
static bool all_asleep(pid_t self)
{
    DIR *d = opendir("/proc/self/task");
    if (d == NULL) return true;
    bool asleep = true;
    struct dirent *de;
    while (asleep && (de = readdir(d)) != NULL) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9') continue;
        if ((pid_t)atol(de->d_name) == self) continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", de->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue; /* gone */
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0) continue;
        buf[n] = '\0';
        const char *p = strrchr(buf, ')'); /* "tid (comm) S ..." */
        if (p && p[1] == ' ' && p[2] == 'R') asleep = false;
    }
    closedir(d);
    return asleep;
}

static int64_t earliest_locked(int64_t now)
{
    int64_t e = INT64_MAX;
    for (struct fk_thread *t = fk_threads; t; t = t->next)
        if (t->until > now && t->until < e) e = t->until;
    return e;
}

static void *ticker_main(void *arg)
{
    (void)arg;
    /* its pauses are tens of microseconds: no timer slack (50 us default) */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    pid_t self = (pid_t)syscall(SYS_gettid);
    pthread_mutex_lock(&fk_mu);
    while (!fk_stop) {
        int64_t now = atomic_load(&fk_now);
        if (!settled_locked(now, real_us())) {
            pthread_mutex_unlock(&fk_mu);
            usleep((useconds_t)fk_pause_us);
            pthread_mutex_lock(&fk_mu);
            continue;
        }
        /* look twice, a moment apart: a thread just woken by a signal
         * (still marked as waiting) has run by then and shows */
        uint64_t epoch = fk_epoch;
        pthread_mutex_unlock(&fk_mu);
        usleep((useconds_t)fk_pause_us);
        bool asleep = all_asleep(self);
        pthread_mutex_lock(&fk_mu);
        if (fk_stop) break;
        if (!asleep || epoch != fk_epoch || !settled_locked(now, real_us())) continue;
        int64_t next = earliest_locked(now);
        if (next == INT64_MAX) { /* nobody waits for a time: time has no reason to pass */
            pthread_mutex_unlock(&fk_mu);
            usleep((useconds_t)fk_pause_us * 4);
            pthread_mutex_lock(&fk_mu);
            continue;
        }
        if (next > now + FAKE_CLOCK_MAX_STEP_MS) next = now + FAKE_CLOCK_MAX_STEP_MS;
        atomic_store(&fk_now, next);
        atomic_fetch_add(&fk_steps, 1);
        fk_epoch++;
        /* the waiter is inside clock_cond_wait on cv while it is listed:
         * cv is alive */
        int64_t real = real_us();
        for (struct fk_thread *t = fk_threads; t; t = t->next) {
            if (t->until <= 0 || t->until > next) continue;
            /* runnable from now on: it has fk_quiet_us to show before it
             * counts as blocked elsewhere */
            t->act_us = real;
            if (t->cv) pthread_cond_broadcast(t->cv);
        }
    }
    pthread_mutex_unlock(&fk_mu);
    return NULL;
}

static int64_t fake_clock_read_ms(void);
static int64_t fake_clock_until(int64_t ms);
static struct timespec fake_clock_deadline_hook(clockid_t clock, int64_t ms);
static int fake_clock_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu, clockid_t clock,
                                int64_t until);
static bool fake_clock_sleep_cancellable(int64_t ms, const atomic_bool *cancel);

/* What base/util.c's clocks call while the fake clock is installed. */
static const struct clock_hooks fk_hooks = {
    .now_ms = fake_clock_read_ms,
    .deadline = fake_clock_deadline_hook,
    .wait_in = fake_clock_until,
    .cond_wait = fake_clock_cond_wait,
    .sleep_cancellable = fake_clock_sleep_cancellable,
};

bool fake_clock_active(void)
{
    return atomic_load_explicit(&fk_on, memory_order_relaxed);
}

int fake_clock_install(void)
{
    /* Under valgrind, which runs one thread at a time (a thread ready to
     * run waits for its turn asleep, where /proc cannot tell it from a
     * blocked one), and whose default scheduler can keep one waiting for
     * seconds, fake time would run past threads that merely wait for their
     * turn: the tests run on the real clock there, as they did before
     * (fake_clock_sleep sleeps in real time). BATON_FAKE_CLOCK=0 asks for
     * the real clock anywhere, =1 for the fake one even under valgrind. */
    const char *pre = getenv("LD_PRELOAD");
    bool valgrind = pre && (strstr(pre, "vgpreload") || strstr(pre, "valgrind"));
    const char *want = getenv("BATON_FAKE_CLOCK");
    if (want && *want ? atoi(want) == 0 : valgrind) return 0;
    pthread_once(&fk_key_once, fk_key_init);
    const char *q = getenv("BATON_FAKE_CLOCK_QUIET_US");
    if (q && atoll(q) > 0) fk_quiet_us = atoll(q);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    atomic_store(&fk_now, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
    pthread_mutex_lock(&fk_mu);
    fk_stop = false;
    pthread_mutex_unlock(&fk_mu);
    if (pthread_create(&fk_ticker, NULL, ticker_main, NULL) != 0) return -1;
    fk_installed = true;
    atomic_store(&fk_on, true);
    clock_hooks_set(&fk_hooks);
    return 0;
}

void fake_clock_uninstall(void)
{
    if (!fk_installed) return;
    pthread_mutex_lock(&fk_mu);
    fk_stop = true;
    pthread_mutex_unlock(&fk_mu);
    pthread_join(fk_ticker, NULL);
    clock_hooks_set(NULL);
    atomic_store(&fk_on, false);
    fk_installed = false;
}

int64_t fake_clock_now(void)
{
    if (!fake_clock_active()) return real_us() / 1000;
    return atomic_load(&fk_now);
}

uint64_t fake_clock_steps(void)
{
    return atomic_load(&fk_steps);
}

/* A clock reading: the thread runs (a wait noted by clock_deadline is
 * over: it reads the clock after it). */
static int64_t fake_clock_read_ms(void)
{
    pthread_mutex_lock(&fk_mu);
    struct fk_thread *t = me_locked();
    if (t) {
        t->act_us = real_us();
        if (t->cv == NULL && t->until) {
            t->until = 0;
            fk_epoch++;
        }
    }
    int64_t now = atomic_load(&fk_now);
    pthread_mutex_unlock(&fk_mu);
    return now;
}

static int64_t fake_clock_until(int64_t ms)
{
    int64_t now = fake_clock_read_ms();
    if (ms < 0) ms = 0;
    return ms > INT64_MAX - now ? INT64_MAX : now + ms;
}

/* clock_deadline for a plain pthread_cond_timedwait: noted as the thread's
 * wait; the real deadline is at most FAKE_CLOCK_POLL_MS away, and the
 * caller's loop reads the clock again. */
static struct timespec fake_clock_deadline_hook(clockid_t clock, int64_t ms)
{
    int64_t until = fake_clock_until(ms);
    pthread_mutex_lock(&fk_mu);
    struct fk_thread *t = me_locked();
    if (t && t->until != until) {
        t->until = until;
        t->cv = NULL;
        fk_epoch++;
    }
    pthread_mutex_unlock(&fk_mu);
    return real_deadline(clock, ms <= 0 ? 0 : FAKE_CLOCK_POLL_MS);
}

/* One wait on cv until fake time reaches until, or a wakeup. time_only:
 * the caller waits for the time alone (fake_clock_sleep's own condition,
 * which only the ticker signals): the real polls loop here. Otherwise one
 * real poll at most, see below. */
static int cond_wait_core(pthread_cond_t *cv, pthread_mutex_t *mu, clockid_t clock, int64_t until,
                          bool time_only)
{
    pthread_mutex_lock(&fk_mu);
    struct fk_thread *t = me_locked();
    if (t) {
        t->act_us = real_us();
        t->until = until > 0 ? until : 1;
        t->cv = cv;
        fk_epoch++;
    }
    pthread_mutex_unlock(&fk_mu);
    int rc = ETIMEDOUT;
    while (atomic_load(&fk_now) < until) {
        /* the ticker broadcasts cv when time reaches until; a broadcast
         * between the look above and this wait is caught by the poll */
        struct timespec ts = real_deadline(clock, t ? 5 : FAKE_CLOCK_POLL_MS);
        int r = pthread_cond_timedwait(cv, mu, &ts);
        if (r == ETIMEDOUT && time_only) continue;
        /* Woken, or (a caller's condition) the real poll ran out: the
         * caller looks at its condition again, a spurious wakeup when
         * neither it nor the time changed. Waiting on here after the poll
         * ran out lost wakeups: a poll that runs out while another thread
         * holds mu is off the condition's waiters, so a broadcast that
         * thread makes before it unlocks reached nobody, and the caller
         * waited for its whole (fake) timeout. That was a CI failure of
         * test_announce_wakes_waiters_of_that_key under TSan (woken by the
         * announcement, yet after >= 1,000 fake ms). */
        rc = atomic_load(&fk_now) >= until ? ETIMEDOUT : 0;
        break;
    }
    pthread_mutex_lock(&fk_mu);
    if (t) {
        t->act_us = real_us();
        t->until = 0;
        t->cv = NULL;
        fk_epoch++;
    }
    pthread_mutex_unlock(&fk_mu);
    return rc;
}

static int fake_clock_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu, clockid_t clock,
                                int64_t until)
{
    return cond_wait_core(cv, mu, clock, until, false);
}

void fake_clock_sleep(int64_t ms)
{
    if (!fake_clock_active()) { /* not installed: real time */
        if (ms <= 0) return;
        struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        return;
    }
    int64_t until = fake_clock_until(ms);
    pthread_mutex_lock(&fk_mu);
    struct fk_thread *t = me_locked();
    pthread_mutex_unlock(&fk_mu);
    if (t == NULL) {
        while (atomic_load(&fk_now) < until) usleep(1000);
        return;
    }
    pthread_mutex_lock(&t->sleep_mu);
    while (cond_wait_core(&t->sleep_cv, &t->sleep_mu, CLOCK_MONOTONIC, until, true) != ETIMEDOUT) {
    }
    pthread_mutex_unlock(&t->sleep_mu);
}

static bool fake_clock_sleep_cancellable(int64_t ms, const atomic_bool *cancel)
{
    if (cancel && atomic_load(cancel)) return true;
    if (ms <= 0) return false;
    int64_t deadline = fake_clock_until(ms);
    for (;;) {
        int64_t left = deadline - fake_clock_read_ms();
        if (left <= 0) return false;
        fake_clock_sleep(left < 20 ? left : 20);
        if (cancel && atomic_load(cancel)) return true;
    }
}
