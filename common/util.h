/* Small helpers shared by every component: clocks, randomness, sleeping. */
#ifndef BATON_UTIL_H
#define BATON_UTIL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

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

/* Fills buf with len bytes from the OS (getrandom). Returns 0 or -1. */
int random_bytes(void *buf, size_t len);
/* 128 random bits as 32 lowercase hex characters plus NUL (33 bytes). */
#define RANDOM_TOKEN_LEN 33
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

/* strdup that aborts on OOM (baton treats OOM as fatal, like redis). */
char *xstrdup(const char *s);
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);

/* hostname, cached; never NULL. */
const char *util_hostname(void);

/* One server of a `hosts` list: rabbitmq hosts, mysql_cdc hosts. */
struct net_host {
    char host[256]; /* name or address, IPv6 without brackets */
    int port;
};
/* Parses one entry: "host", "host:port", "[v6addr]" or "[v6addr]:port"
 * (port 1..65535; default_port when absent). An IPv6 address must be in
 * brackets (a bare "::1" is refused: "::1:5672" would be ambiguous).
 * Returns 0, or -1 with err filled (quoting the entry). */
int net_host_parse(const char *spec, int default_port, struct net_host *out, char *err,
                   size_t errlen);
/* "host:port", with the host in brackets when it contains ':' (IPv6):
 * "[::1]:5672". The form shown in logs and in /status ("source"). */
void net_host_format(const struct net_host *h, char *out, size_t len);

#endif
