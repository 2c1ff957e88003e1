/* The base room's small helpers, used by every layer (guard/, common/,
 * endpoints/, src/): clocks, randomness, sleeping, back-off, base64, a rate
 * limiter. Built into libbaton-guard (hidden in the shared library, not
 * installed); the daemon links them from the in-tree static library, so the
 * tree has one copy of each. Include it where used (common/util.h does not
 * re-export it). */
#ifndef BATON_BASE_UTIL_H
#define BATON_BASE_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "baton/locker.h" /* BATON_TOKEN_LEN */

/* The clock functions below (all but clock_wall_ms) read the test clock
 * while one is installed (clock_hooks_set below; tests only). */
/* CLOCK_MONOTONIC in milliseconds / microseconds. */
int64_t clock_mono_ms(void);
int64_t clock_mono_us(void);
/* CLOCK_BOOTTIME in milliseconds: like CLOCK_MONOTONIC, but it keeps running
 * while the machine or VM is suspended. Lease deadlines use it, so a resumed
 * leader sees its lease as expired instead of believing it still runs. */
int64_t clock_boot_ms(void);
/* CLOCK_REALTIME in milliseconds since the epoch. */
int64_t clock_wall_ms(void);
/* Formats a wall-clock time as RFC 3339 UTC with milliseconds:
 * "2026-12-02T14:00:00.123Z". buf must hold 32 bytes. */
void clock_format_rfc3339(int64_t wall_ms, char *buf, size_t len);
/* The absolute time ms milliseconds from now on clock (CLOCK_MONOTONIC or
 * CLOCK_REALTIME), for pthread_cond_timedwait; negative ms counts as 0. */
struct timespec clock_deadline(clockid_t clock, int64_t ms);
/* pthread_cond_init with the clock its timed waits count on (the deadline
 * from clock_deadline on the same clock). */
void cond_init_clock(pthread_cond_t *cv, clockid_t clock);
/* A timed wait that a test clock can steer (clock_hooks_set): the
 * deadline ms milliseconds from now on clock (as clock_deadline), and the
 * wait for it on a condition initialised by cond_init_clock on the same
 * clock. Without the test clock they are clock_deadline and
 * pthread_cond_timedwait (returns 0 or ETIMEDOUT), nothing more. */
struct clock_wait {
    clockid_t clock;
    struct timespec ts;   /* the real deadline */
    int64_t hooked_until; /* the test clock's (its wait_in), when it is installed */
};
struct clock_wait clock_wait_in(clockid_t clock, int64_t ms);
int clock_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu, const struct clock_wait *w);

/* The clock seam, tests only (issue 35): a test installs a test clock
 * (tests/support/fake_clock.c) through clock_hooks_set; production never
 * calls it. While hooks are set, clock_mono_ms, clock_mono_us,
 * clock_boot_ms, clock_deadline (but on CLOCK_REALTIME), clock_wait_in /
 * clock_cond_wait and sleep_ms_cancellable call them; while none are (the
 * default), those functions read the real clocks and cost one atomic load
 * and a branch more. clock_wall_ms is never hooked. */
struct clock_hooks {
    /* the monotonic and the boot clock, ms (clock_mono_us reads it x1000) */
    int64_t (*now_ms)(void);
    /* clock_deadline on clock (never CLOCK_REALTIME) */
    struct timespec (*deadline)(clockid_t clock, int64_t ms);
    /* clock_wait_in: the deadline ms from now, in the hooks' time (never 0) */
    int64_t (*wait_in)(int64_t ms);
    /* clock_cond_wait of a wait wait_in made: 0 or ETIMEDOUT */
    int (*cond_wait)(pthread_cond_t *cv, pthread_mutex_t *mu, clockid_t clock, int64_t until);
    /* sleep_ms_cancellable */
    bool (*sleep_cancellable)(int64_t ms, const atomic_bool *cancel);
};
/* Installs h (every member set; it must outlive its use), or the real
 * clocks again with NULL. Tests only: install before the threads that read
 * the clocks start, and remove after they ended. */
void clock_hooks_set(const struct clock_hooks *h);

/* Fills buf with len bytes from the OS (getrandom). Returns 0 or -1. */
int random_bytes(void *buf, size_t len);
/* 128 random bits as 32 lowercase hex characters plus NUL (33 bytes). */
#define RANDOM_TOKEN_LEN BATON_TOKEN_LEN
int random_token(char out[RANDOM_TOKEN_LEN]);
/* Uniform in [0, n) from a thread-local xorshift seeded from the OS; for
 * jitter only, never for tokens. */
uint32_t random_jitter(uint32_t n);

/* Sleeps up to ms milliseconds, returning early (true) once *cancel becomes
 * true; checks at least every 20 ms. cancel may be NULL. */
bool sleep_ms_cancellable(int64_t ms, const atomic_bool *cancel);

/* Exponential backoff with full jitter: min(cap, base * 2^attempt) scaled by a
 * random factor in [0.5, 1.0]. */
int64_t backoff_ms(unsigned attempt, int64_t base_ms, int64_t cap_ms);

/* strdup that keeps NULL (NULL in, NULL out) and sets *oom when a copy
 * fails: options structs are copied field by field, then checked once. */
char *dup_opt(const char *s, bool *oom);

/* hostname, cached; never NULL. */
const char *util_hostname(void);

/* Standard base64 with padding: the encoded length of n bytes, and the
 * encoding written to out (base64_encoded_len(n) bytes, no NUL). */
size_t base64_encoded_len(size_t n);
void base64_encode(const void *data, size_t n, char *out);

/* Rate limiter for repeated warnings (drops, reconnect loops): returns true
 * at most once per interval_ms per limiter; *suppressed receives how many
 * calls were swallowed since the last true. Lock free; zero initialised. */
struct ratelimit {
    long long next_ms; /* monotonic ms; 0 = never fired */
    long long suppressed;
};
bool ratelimit_ok(struct ratelimit *rl, long long interval_ms, long long *suppressed);

/* Names thread t "<kind>:<name>" for top -H, ps -L, perf and gdb (cut to
 * the kernel's 15 characters). Best effort: a failure is ignored. */
void thread_name(pthread_t t, const char *kind, const char *name);

#endif
