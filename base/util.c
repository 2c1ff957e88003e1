/* The base room's small helpers: clocks, randomness, sleeping, back-off,
 * base64, a rate limiter. Internal (hidden in libbaton-guard.so); every layer
 * includes base/util.h where it uses them, so the whole tree uses one copy. */
#include "base/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* The test clock's hooks (clock_hooks_set, tests only); NULL: the real
 * clocks. */
static _Atomic(const struct clock_hooks *) clock_hooks_;

static inline const struct clock_hooks *hooks(void)
{
    return atomic_load_explicit(&clock_hooks_, memory_order_acquire);
}

void clock_hooks_set(const struct clock_hooks *h)
{
    atomic_store_explicit(&clock_hooks_, h, memory_order_release);
}

int64_t clock_mono_ms(void)
{
    const struct clock_hooks *h = hooks();
    if (h) return h->now_ms();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t clock_boot_ms(void)
{
    const struct clock_hooks *h = hooks();
    if (h) return h->now_ms();
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t clock_mono_us(void)
{
    const struct clock_hooks *h = hooks();
    if (h) return h->now_ms() * 1000;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t clock_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void put2(char *p, int v)
{
    p[0] = (char)('0' + v / 10 % 10);
    p[1] = (char)('0' + v % 10);
}

void clock_format_rfc3339(int64_t wall_ms, char *buf, size_t len)
{
    /* Per-thread cache of the "YYYY-MM-DDTHH:MM:SS" part: envelopes of one
     * second share it, so the common case is a copy plus three digits. */
    static _Thread_local int64_t cached_secs = INT64_MIN;
    static _Thread_local char cached[20];
    if (!buf || len == 0) return;
    int64_t secs = wall_ms / 1000;
    int64_t ms = wall_ms % 1000;
    if (ms < 0) { /* times before 1970: floor division */
        ms += 1000;
        secs -= 1;
    }
    if (secs != cached_secs) {
        time_t t = (time_t)secs;
        struct tm tm;
        if (!gmtime_r(&t, &tm) || tm.tm_year + 1900 < 0 || tm.tm_year + 1900 > 9999) {
            snprintf(buf, len, "1970-01-01T00:00:00.000Z");
            return;
        }
        int y = tm.tm_year + 1900;
        put2(cached, y / 100);
        put2(cached + 2, y % 100);
        cached[4] = '-';
        put2(cached + 5, tm.tm_mon + 1);
        cached[7] = '-';
        put2(cached + 8, tm.tm_mday);
        cached[10] = 'T';
        put2(cached + 11, tm.tm_hour);
        cached[13] = ':';
        put2(cached + 14, tm.tm_min);
        cached[16] = ':';
        put2(cached + 17, tm.tm_sec);
        cached[19] = '\0';
        cached_secs = secs;
    }
    char out[32];
    memcpy(out, cached, 19);
    out[19] = '.';
    out[20] = (char)('0' + ms / 100);
    put2(out + 21, (int)(ms % 100));
    out[23] = 'Z';
    out[24] = '\0';
    size_t n = len > 25 ? 25 : len; /* truncated like snprintf when short */
    memcpy(buf, out, n - 1);
    buf[n - 1] = '\0';
}

int random_bytes(void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int random_token(char out[RANDOM_TOKEN_LEN])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[16];
    if (random_bytes(raw, sizeof raw) != 0) {
        out[0] = '\0';
        return -1;
    }
    for (size_t i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 0x0f];
    }
    out[32] = '\0';
    return 0;
}

static _Thread_local uint64_t jitter_state;

static uint64_t jitter_next(void)
{
    if (jitter_state == 0) {
        uint64_t seed = 0;
        if (random_bytes(&seed, sizeof seed) != 0 || seed == 0)
            seed = (uint64_t)clock_mono_us() ^ ((uint64_t)(uintptr_t)&seed << 17) ^
                   0x9e3779b97f4a7c15ULL;
        jitter_state = seed ? seed : 0x9e3779b97f4a7c15ULL;
    }
    /* xorshift64* */
    uint64_t x = jitter_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    jitter_state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

uint32_t random_jitter(uint32_t n)
{
    if (n <= 1) return 0;
    /* 64-bit multiply-shift: bias is negligible for jitter. */
    return (uint32_t)(((jitter_next() >> 32) * (uint64_t)n) >> 32);
}

bool sleep_ms_cancellable(int64_t ms, const atomic_bool *cancel)
{
    const struct clock_hooks *h = hooks();
    if (h) return h->sleep_cancellable(ms, cancel);
    if (cancel && atomic_load(cancel)) return true;
    if (ms <= 0) return false;
    int64_t deadline = clock_mono_ms() + ms;
    for (;;) {
        int64_t left = deadline - clock_mono_ms();
        if (left <= 0) return false;
        int64_t step = left < 20 ? left : 20;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(step * 1000000)};
        nanosleep(&ts, NULL); /* EINTR: loop re-checks time and cancel */
        if (cancel && atomic_load(cancel)) return true;
    }
}

int64_t backoff_ms(unsigned attempt, int64_t base_ms, int64_t cap_ms)
{
    if (base_ms <= 0) base_ms = 1;
    if (cap_ms < base_ms) cap_ms = base_ms;
    int64_t d = base_ms;
    for (unsigned i = 0; i < attempt && d < cap_ms; i++) {
        if (d > cap_ms / 2) {
            d = cap_ms;
            break;
        }
        d *= 2;
    }
    if (d > cap_ms) d = cap_ms;
    /* scale by a factor in [0.5, 1.0] */
    int64_t half = d / 2;
    int64_t span = d - half; /* d - d/2 */
    uint32_t r = span > 0 ? random_jitter(span >= UINT32_MAX ? UINT32_MAX : (uint32_t)span + 1)
                          : 0;
    int64_t out = half + (int64_t)r;
    if (out > d) out = d;
    if (out < 1) out = 1;
    return out;
}

static pthread_once_t hostname_once = PTHREAD_ONCE_INIT;
static char hostname_buf[256];

char *dup_opt(const char *s, bool *oom)
{
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *oom = true;
    return d;
}

static void hostname_init(void)
{
    if (gethostname(hostname_buf, sizeof hostname_buf - 1) != 0 || hostname_buf[0] == '\0')
        snprintf(hostname_buf, sizeof hostname_buf, "unknown");
    hostname_buf[sizeof hostname_buf - 1] = '\0';
}

const char *util_hostname(void)
{
    pthread_once(&hostname_once, hostname_init);
    return hostname_buf;
}

void cond_init_clock(pthread_cond_t *cv, clockid_t clock)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, clock);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

struct timespec clock_deadline(clockid_t clock, int64_t ms)
{
    const struct clock_hooks *h = hooks();
    if (h && clock != CLOCK_REALTIME) return h->deadline(clock, ms);
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

struct clock_wait clock_wait_in(clockid_t clock, int64_t ms)
{
    struct clock_wait w = {.clock = clock};
    const struct clock_hooks *h = hooks();
    if (h && clock != CLOCK_REALTIME)
        w.hooked_until = h->wait_in(ms);
    else
        w.ts = clock_deadline(clock, ms);
    return w;
}

int clock_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu, const struct clock_wait *w)
{
    if (w->hooked_until != 0) {
        const struct clock_hooks *h = hooks();
        if (h) return h->cond_wait(cv, mu, w->clock, w->hooked_until);
    }
    return pthread_cond_timedwait(cv, mu, &w->ts);
}

size_t base64_encoded_len(size_t n)
{
    return ((n + 2) / 3) * 4;
}

void base64_encode(const void *data, size_t n, char *out)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *s = data;
    size_t i = 0, o = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        out[o++] = tbl[(v >> 18) & 63];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = tbl[(v >> 6) & 63];
        out[o++] = tbl[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)s[i] << 16;
        out[o++] = tbl[(v >> 18) & 63];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8;
        out[o++] = tbl[(v >> 18) & 63];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = tbl[(v >> 6) & 63];
        out[o++] = '=';
    }
}

bool ratelimit_ok(struct ratelimit *rl, long long interval_ms, long long *suppressed)
{
    /* The struct is plain (it is embedded in other structs and zero
     * initialised), so use the compiler's atomic builtins on its fields. */
    long long now = (long long)clock_mono_ms();
    long long cur = __atomic_load_n(&rl->next_ms, __ATOMIC_RELAXED);
    for (;;) {
        if (cur != 0 && now < cur) {
            __atomic_fetch_add(&rl->suppressed, 1, __ATOMIC_RELAXED);
            if (suppressed) *suppressed = 0;
            return false;
        }
        long long want = now + (interval_ms > 0 ? interval_ms : 1);
        if (__atomic_compare_exchange_n(&rl->next_ms, &cur, want, true, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            long long s = __atomic_exchange_n(&rl->suppressed, 0, __ATOMIC_RELAXED);
            if (suppressed) *suppressed = s;
            return true;
        }
    }
}

void thread_name(pthread_t t, const char *kind, const char *name)
{
    char buf[16];
    snprintf(buf, sizeof buf, "%s:%s", kind, name ? name : "");
    (void)pthread_setname_np(t, buf);
}
