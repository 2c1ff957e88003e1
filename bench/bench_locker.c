/* Benchmark: the locker backends side by side, etcd and PostgreSQL against
 * Redis, in one run.
 *
 *   bench_locker [BUILD_DIR]      (run by bench/run; BUILD_DIR is ignored)
 *
 * Starts its own redis-server (no persistence), a single etcd member (data
 * directory under $ETCD_DIR, default /tmp: a real disk, so etcd pays its
 * fsync as it would in production; ETCD_DIR=/dev/shm shows etcd without it)
 * and a PostgreSQL 15 (tests/support/pg_server.h: the tests' server, run as
 * the user postgres, fsync=off, so a commit pays no disk flush: like the
 * Redis without persistence, unlike etcd), each on free loopback ports, and
 * for each backend, through baton's own locker (guard/locker_redis.c,
 * guard/locker_etcd.c, guard/locker_pg.c), one connection, one thread:
 *
 * - acquisitions/s: try_lock (ttl 2000 ms) + unlock cycles on distinct keys
 *   for LOCKER_SECONDS (default 3) or LOCKER_CYCLES (default 100000)
 *   cycles, whichever comes first; every answer must be BATON_LOCKER_OK;
 * - renew round trip: RENEW_N (default 1000) baton_locker_renew calls on one held
 *   lease (ttl 10000 ms), each timed; p50 / p99 / max in ms.
 *
 * PostgreSQL also: the idle load of held leases: LOCKER_IDLE_LEASES (default
 * 1000) leases (ttl 3000 ms, the default lease) held and renewed every ttl/3
 * through the locker API for LOCKER_IDLE_S (default 5) s; the database's
 * committed transactions (pg_stat_database.xact_commit: one per renewal,
 * each an autocommit UPDATE) and WAL bytes (pg_current_wal_lsn) counted
 * over that window, per second per 1,000 leases. A backend reports its
 * counts at most once a second (and may hold them while idle), so the
 * window is bracketed by lockers of their own whose backends have exited
 * (they flush on exit) before each reading.
 *
 * Prints each figure, the process's open file descriptors and threads after
 * each backend (a locker that keeps per-key state shows here), and the
 * contract lines of bench/run: RESULT {json}, the etcd or PostgreSQL figure
 * as "baton" and Redis as "baseline", ratio = etcd / redis or postgresql /
 * redis (no target: informational). Exit 1 when a backend answered wrongly,
 * 0 otherwise (etcd or PostgreSQL not installed: the other figures only). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "baton/etcd.h"
#include "baton/locker.h"
#include "baton/pg.h"
#include "baton/redis.h"
#include "common/log.h"
#include "tests/support/etcd_server.h"
#include "tests/support/pg_server.h"
#include "tests/support/redis_server.h"

struct figures {
    const char *backend;
    long cycles;
    double seconds;
    double acq_per_s;
    double renew_p50_ms, renew_p99_ms, renew_max_ms, renew_mean_ms;
    int fds, threads;
    int failures;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long env_long(const char *name, long def)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') return def;
    long n = strtol(v, NULL, 10);
    return n > 0 ? n : def;
}

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *sorted, long n, double p)
{
    long i = (long)((double)(n - 1) * p / 100.0 + 0.5);
    if (i >= n) i = n - 1;
    return sorted[i];
}

/* The measurements on one locker; 0, or -1 after a wrong answer. */
static int measure(struct baton_locker *l, struct figures *f)
{
    double seconds = (double)env_long("LOCKER_SECONDS", 3);
    long max_cycles = env_long("LOCKER_CYCLES", 100000);
    long renew_n = env_long("RENEW_N", 1000);
    char err[BATON_LOCKER_ERR_MAX], key[96];
    struct baton_lock_grant g;
    unsigned run = (unsigned)time(NULL) ^ (unsigned)getpid();

    /* warm-up: connections open, scripts loaded, code paths hot */
    for (int i = 0; i < 50; i++) {
        snprintf(key, sizeof key, "bench:warm:%u:%d", run, i);
        if (baton_locker_try_lock(l, key, 2000, &g, err) != BATON_LOCKER_OK ||
            baton_locker_unlock(l, key, g.token, err) != BATON_LOCKER_OK) {
            fprintf(stderr, "%s: warm-up: %s\n", f->backend, err);
            return -1;
        }
    }

    /* acquisitions: try_lock + unlock on distinct keys */
    double t0 = now_s(), t = t0;
    long n = 0;
    while (n < max_cycles && (t = now_s()) - t0 < seconds) {
        for (int k = 0; k < 16 && n < max_cycles; k++, n++) {
            snprintf(key, sizeof key, "bench:acq:%u:%ld", run, n);
            int rc = baton_locker_try_lock(l, key, 2000, &g, err);
            if (rc != BATON_LOCKER_OK) {
                fprintf(stderr, "%s: try_lock %s: %s: %s\n", f->backend, key,
                        baton_locker_status_name(rc), err);
                return -1;
            }
            rc = baton_locker_unlock(l, key, g.token, err);
            if (rc != BATON_LOCKER_OK) {
                fprintf(stderr, "%s: unlock %s: %s: %s\n", f->backend, key,
                        baton_locker_status_name(rc), err);
                return -1;
            }
        }
    }
    t = now_s();
    f->cycles = n;
    f->seconds = t - t0;
    f->acq_per_s = (double)n / (t - t0);

    /* renew round trips on one held lease */
    snprintf(key, sizeof key, "bench:renew:%u", run);
    if (baton_locker_try_lock(l, key, 10000, &g, err) != BATON_LOCKER_OK) {
        fprintf(stderr, "%s: try_lock %s: %s\n", f->backend, key, err);
        return -1;
    }
    double *ms = calloc((size_t)renew_n, sizeof *ms), sum = 0;
    if (ms == NULL) return -1;
    for (long i = 0; i < renew_n; i++) {
        int64_t sent;
        double a = now_s();
        int rc = baton_locker_renew(l, key, g.token, 10000, &sent, err);
        ms[i] = (now_s() - a) * 1000.0;
        sum += ms[i];
        if (rc != BATON_LOCKER_OK) {
            fprintf(stderr, "%s: renew %ld: %s: %s\n", f->backend, i, baton_locker_status_name(rc), err);
            free(ms);
            return -1;
        }
    }
    qsort(ms, (size_t)renew_n, sizeof *ms, cmp_double);
    f->renew_p50_ms = pct(ms, renew_n, 50);
    f->renew_p99_ms = pct(ms, renew_n, 99);
    f->renew_max_ms = ms[renew_n - 1];
    f->renew_mean_ms = sum / (double)renew_n;
    free(ms);
    if (baton_locker_unlock(l, key, g.token, err) != BATON_LOCKER_OK) {
        fprintf(stderr, "%s: unlock %s: %s\n", f->backend, key, err);
        return -1;
    }
    f->fds = count_dir("/proc/self/fd");
    f->threads = count_dir("/proc/self/task");
    return 0;
}

/* The PostgreSQL idle load (see the top): 0, or -1 after a wrong answer or
 * a failed reading. */
struct idle_figures {
    long leases, rounds, renewals;
    double seconds;
    double xacts_per_s, wal_bytes_per_s;       /* per 1,000 leases */
    double renewals_per_s;                     /* per 1,000 leases, as sent */
};

/* xact_commit of the database and the WAL position (bytes): 0, or -1. */
static int pg_counters(const struct pg_server *ps, long long *xacts, long long *wal)
{
    char out[256];
    int rc = pg_server_sql(ps, "SELECT xact_commit, pg_current_wal_lsn() - '0/0'::pg_lsn "
                               "FROM pg_stat_database WHERE datname = current_database()",
                           out, sizeof out);
    if (rc != 0 || sscanf(out, "%lld|%lld", xacts, wal) != 2) {
        fprintf(stderr, "postgresql: reading pg_stat_database: exit %d: %s\n", rc, out);
        return -1;
    }
    return 0;
}

/* Waits (up to 10 s) until no backend of baton's locker is left, so that
 * every count they made has been reported (a backend flushes on exit). */
static int pg_no_locker_backends(const struct pg_server *ps)
{
    char out[64];
    for (int i = 0; i < 200; i++) {
        if (pg_server_sql(ps, "SELECT count(*) FROM pg_stat_activity "
                              "WHERE application_name = 'baton-locker'", out, sizeof out) == 0 &&
            atoi(out) == 0)
            return 0;
        usleep(50000);
    }
    fprintf(stderr, "postgresql: the locker's backends did not exit within 10 s\n");
    return -1;
}

static void sleep_until(double t)
{
    double left = t - now_s();
    if (left > 0) {
        struct timespec ts = {.tv_sec = (time_t)left, .tv_nsec = (long)((left - (double)(time_t)left) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

static int measure_pg_idle(const struct pg_server *ps, const struct baton_pg_opts *po,
                           struct idle_figures *f)
{
    const int64_t ttl = 3000, renew_ms = ttl / 3;
    long n = env_long("LOCKER_IDLE_LEASES", 1000);
    double window = (double)env_long("LOCKER_IDLE_S", 5);
    char err[BATON_LOCKER_ERR_MAX], key[96];
    unsigned run = (unsigned)time(NULL) ^ (unsigned)getpid();
    char (*tokens)[BATON_TOKEN_LEN] = calloc((size_t)n, sizeof *tokens);
    if (tokens == NULL) return -1;
    int rc = -1;
    long long x0, w0, x1, w1;
    /* the leases, taken by a locker of their own */
    struct baton_locker *l = baton_locker_pg_create(po, err);
    if (l == NULL) {
        fprintf(stderr, "postgresql: baton_locker_pg_create: %s\n", err);
        goto out;
    }
    for (long i = 0; i < n; i++) {
        struct baton_lock_grant g;
        snprintf(key, sizeof key, "bench:idle:%u:%ld", run, i);
        int r = baton_locker_try_lock(l, key, ttl, &g, err);
        if (r != BATON_LOCKER_OK) {
            fprintf(stderr, "postgresql: idle: try_lock %s: %s: %s\n", key, baton_locker_status_name(r), err);
            baton_locker_destroy(l);
            goto out;
        }
        memcpy(tokens[i], g.token, BATON_TOKEN_LEN);
    }
    baton_locker_destroy(l);
    if (pg_no_locker_backends(ps) != 0 || pg_counters(ps, &x0, &w0) != 0) goto out;
    /* renewed every ttl/3 by another locker (a renewal names key and token) */
    l = baton_locker_pg_create(po, err);
    if (l == NULL) {
        fprintf(stderr, "postgresql: baton_locker_pg_create: %s\n", err);
        goto out;
    }
    double t0 = now_s();
    long rounds = 0, renewals = 0;
    for (; (double)rounds * (double)renew_ms / 1000.0 < window; rounds++) {
        sleep_until(t0 + (double)rounds * (double)renew_ms / 1000.0);
        for (long i = 0; i < n; i++) {
            int64_t sent;
            snprintf(key, sizeof key, "bench:idle:%u:%ld", run, i);
            int r = baton_locker_renew(l, key, tokens[i], ttl, &sent, err);
            if (r != BATON_LOCKER_OK) {
                fprintf(stderr, "postgresql: idle: renew %s (round %ld): %s: %s\n", key, rounds,
                        baton_locker_status_name(r), err);
                baton_locker_destroy(l);
                goto out;
            }
            renewals++;
        }
    }
    sleep_until(t0 + window);
    double secs = now_s() - t0;
    baton_locker_destroy(l);
    if (pg_no_locker_backends(ps) != 0 || pg_counters(ps, &x1, &w1) != 0) goto out;
    f->leases = n;
    f->rounds = rounds;
    f->renewals = renewals;
    f->seconds = secs;
    f->xacts_per_s = (double)(x1 - x0) / secs * 1000.0 / (double)n;
    f->wal_bytes_per_s = (double)(w1 - w0) / secs * 1000.0 / (double)n;
    f->renewals_per_s = (double)renewals / secs * 1000.0 / (double)n;
    rc = 0;
out:
    free(tokens);
    return rc;
}

static void report(const struct figures *f)
{
    printf("  %-10s: %ld try_lock+unlock cycles in %.2f s = %.0f acquisitions/s; renew "
           "p50 %.3f ms, p99 %.3f ms, max %.3f ms, mean %.3f ms; after it: %d fds, %d threads\n",
           f->backend, f->cycles, f->seconds, f->acq_per_s, f->renew_p50_ms, f->renew_p99_ms,
           f->renew_max_ms, f->renew_mean_ms, f->fds, f->threads);
    fflush(stdout);
}

static void result(const char *workload, double etcd, double redis, const char *unit, int digits)
{
    char e[32], r[32], ratio[32];
    snprintf(e, sizeof e, "%.*f", digits, etcd);
    snprintf(r, sizeof r, "%.*f", digits, redis);
    if (redis > 0)
        snprintf(ratio, sizeof ratio, "%.3f", etcd / redis);
    else
        snprintf(ratio, sizeof ratio, "null");
    printf("RESULT {\"workload\": \"%s\", \"baton\": %s, \"baseline\": %s, \"unit\": \"%s\", "
           "\"ratio\": %s, \"target\": null, \"pass\": null}\n",
           workload, e, r, unit, ratio);
}

static void result1(const char *workload, double v, const char *unit, int digits)
{
    printf("RESULT {\"workload\": \"%s\", \"baton\": %.*f, \"baseline\": null, \"unit\": \"%s\", "
           "\"ratio\": null, \"target\": null, \"pass\": null}\n",
           workload, digits, v, unit);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    log_set_level(LOG_ERROR);
    int rc = 0;
    struct figures fr = {.backend = "redis"}, fe = {.backend = "etcd"}, fp = {.backend = "postgresql"};
    struct idle_figures fi = {0};
    bool have_etcd = false, have_redis = false, have_pg = false, have_idle = false;

    printf("locker benchmark: baton's redis, etcd and postgresql lockers, one connection, one "
           "thread; acquisitions for %ld s (at most %ld), %ld renewals; postgresql idle load: "
           "%ld leases renewed every ttl/3 for %ld s\n",
           env_long("LOCKER_SECONDS", 3), env_long("LOCKER_CYCLES", 100000),
           env_long("RENEW_N", 1000), env_long("LOCKER_IDLE_LEASES", 1000),
           env_long("LOCKER_IDLE_S", 5));

    struct redis_server *rs = redis_server_start(NULL);
    if (rs == NULL) {
        fprintf(stderr, "bench_locker: could not start redis-server\n");
        return 1;
    }
    struct baton_redis_opts ro = {.host = "127.0.0.1", .port = redis_server_port(rs),
                            .connect_timeout_ms = 1000, .command_timeout_ms = 1000};
    char err[BATON_LOCKER_ERR_MAX];
    struct baton_locker *lr = baton_locker_redis_create(&ro, err);
    if (lr == NULL) {
        fprintf(stderr, "bench_locker: baton_locker_redis_create: %s\n", err);
        redis_server_destroy(rs);
        return 1;
    }
    if (measure(lr, &fr) != 0) {
        rc = 1;
    } else {
        report(&fr);
        have_redis = true;
    }
    baton_locker_destroy(lr);
    redis_server_destroy(rs);

    const char *dir = getenv("ETCD_DIR");
    if (dir == NULL || *dir == '\0') dir = "/tmp";
    struct etcd_server *es = etcd_server_start_in(dir, NULL);
    if (es == NULL) {
        fprintf(stderr, "bench_locker: no etcd member (is etcd installed?): Redis figures only\n");
    } else {
        printf("  etcd member %s, data directory %s\n", etcd_server_url(es), etcd_server_dir(es));
        char *eps[1] = {(char *)etcd_server_url(es)};
        struct baton_etcd_opts eo = {.endpoints = eps, .n_endpoints = 1, .connect_timeout_ms = 1000,
                               .command_timeout_ms = 1000};
        struct baton_locker *le = baton_locker_etcd_create(&eo, err);
        if (le == NULL) {
            fprintf(stderr, "bench_locker: baton_locker_etcd_create: %s\n", err);
            rc = 1;
        } else {
            if (measure(le, &fe) != 0) {
                rc = 1;
            } else {
                report(&fe);
                have_etcd = true;
            }
            baton_locker_destroy(le);
        }
        etcd_server_destroy(es);
    }

    char why[512];
    struct pg_server *ps = pg_server_available(why, sizeof why) ? pg_server_start() : NULL;
    if (ps == NULL) {
        fprintf(stderr, "bench_locker: no PostgreSQL (%s): no postgresql figures\n",
                why[0] ? why : "it did not start");
    } else {
        printf("  postgresql 15 %s (fsync=off), directory %s\n", pg_server_conninfo(ps),
               pg_server_dir(ps));
        struct baton_pg_opts po = {.conninfo = (char *)pg_server_conninfo(ps),
                                   .connect_timeout_ms = 1000, .command_timeout_ms = 1000};
        if (baton_locker_pg_init_schema(&po, err) != 0) {
            fprintf(stderr, "bench_locker: baton_locker_pg_init_schema: %s\n", err);
            rc = 1;
        } else {
            struct baton_locker *lp = baton_locker_pg_create(&po, err);
            if (lp == NULL) {
                fprintf(stderr, "bench_locker: baton_locker_pg_create: %s\n", err);
                rc = 1;
            } else {
                if (measure(lp, &fp) != 0) {
                    rc = 1;
                } else {
                    report(&fp);
                    have_pg = true;
                }
                baton_locker_destroy(lp);
            }
            if (measure_pg_idle(ps, &po, &fi) != 0) {
                rc = 1;
            } else {
                printf("  postgresql idle load: %ld leases (ttl 3000 ms) renewed every 1000 ms, %ld "
                       "rounds, %ld renewals in %.2f s; per 1,000 leases: %.1f renewals/s sent, "
                       "%.1f transactions/s committed, %.0f WAL bytes/s\n",
                       fi.leases, fi.rounds, fi.renewals, fi.seconds, fi.renewals_per_s,
                       fi.xacts_per_s, fi.wal_bytes_per_s);
                fflush(stdout);
                have_idle = true;
            }
        }
        pg_server_destroy(ps);
    }

    if (have_redis) {
        if (have_pg) {
            /* not "locker acquisitions/s...": bench/readme_table.py looks those
             * (the etcd row) up by prefix */
            result("locker postgresql vs redis: acquisitions/s, try_lock+unlock, distinct keys, 1 thread",
                   fp.acq_per_s, fr.acq_per_s, "acquisitions/s", 0);
            result("locker postgresql vs redis: renew round trip p50", fp.renew_p50_ms,
                   fr.renew_p50_ms, "ms", 3);
            result("locker postgresql vs redis: renew round trip p99", fp.renew_p99_ms,
                   fr.renew_p99_ms, "ms", 3);
        }
        if (have_etcd) {
            result("locker acquisitions/s, try_lock+unlock, distinct keys, 1 thread (etcd vs redis)",
                   fe.acq_per_s, fr.acq_per_s, "acquisitions/s", 0);
            result("locker renew round trip p50 (etcd vs redis)", fe.renew_p50_ms,
                   fr.renew_p50_ms, "ms", 3);
            result("locker renew round trip p99 (etcd vs redis)", fe.renew_p99_ms,
                   fr.renew_p99_ms, "ms", 3);
        } else {
            result1("locker acquisitions/s, try_lock+unlock, distinct keys, 1 thread (redis)",
                    fr.acq_per_s, "acquisitions/s", 0);
            result1("locker renew round trip p50 (redis)", fr.renew_p50_ms, "ms", 3);
            result1("locker renew round trip p99 (redis)", fr.renew_p99_ms, "ms", 3);
        }
    }
    if (have_idle) {
        result1("locker postgresql: idle load, transactions/s per 1,000 leases renewed every ttl/3 "
                "(ttl 3000)", fi.xacts_per_s, "transactions/s", 1);
        result1("locker postgresql: idle load, WAL bytes/s per 1,000 leases renewed every ttl/3 "
                "(ttl 3000)", fi.wal_bytes_per_s, "bytes/s", 0);
    }
    return rc;
}
