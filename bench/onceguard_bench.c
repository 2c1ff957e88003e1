/* OnceGuard decision rate with one Redis connection, for
 * bench/bench_onceguard.sh.
 *
 *   bench_onceguard HOST PORT COUNT [TTL_MS]
 *
 * Creates baton's own redis locker and a OnceGuard on a scope unique to this
 * run, then calls baton_once_guard_allow COUNT times on distinct keys ("k<i>"),
 * timing the loop with the monotonic clock (after 200 warm-up decisions).
 * Each decision is one baton_locker_claim, which the redis locker
 * (guard/locker_redis.c, redis_claim) sends on its side connection as
 * `SET <prefix>:once:<scope>:<key> <claim value> NX PX <ttl>` pipelined with
 * `TYPE <same key>`: one round trip, no Lua script. (Were an answer lost it
 * would add one GET; that does not happen here.) The baseline,
 * bench_onceguard_baseline (onceguard_baseline.c), is the same pipelined
 * pair in a bare hiredis loop.
 *
 * Then it checks the answers mean something: every fresh key was allowed,
 * and a second guard on the same scope (another "replica") must skip a
 * sample of keys already taken (the last ones, still inside their TTL).
 *
 * Prints one line:
 *   decisions=N seconds=S rate=R allowed=A skipped=K errors=E recheck_skipped=X/Y
 * Exit status: 0 ok; 1 when a decision was not "allowed" on a fresh key or
 * the recheck saw a key allowed twice; 64 usage; 69 Redis unreachable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "baton/locker.h"
#include "baton/once_guard.h"
#include "baton/redis.h"
#include "common/log.h"
#include "common/util.h"

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: %s HOST PORT COUNT [TTL_MS]\n", argv[0]);
        return 64;
    }
    long long count = atoll(argv[3]);
    long long ttl_ms = argc == 5 ? atoll(argv[4]) : 1000;
    if (count <= 0 || ttl_ms <= 0) {
        fprintf(stderr, "onceguard_bench: COUNT and TTL_MS must be positive\n");
        return 64;
    }
    log_set_level(LOG_WARN);

    struct baton_redis_opts ro = {0};
    ro.host = argv[1];
    ro.port = atoi(argv[2]);
    ro.connect_timeout_ms = 1000;
    ro.command_timeout_ms = 1000;
    char err[BATON_LOCKER_ERR_MAX];
    struct baton_locker *l = baton_locker_redis_create(&ro, err);
    if (l == NULL) {
        fprintf(stderr, "onceguard_bench: locker %s:%s: %s\n", argv[1], argv[2], err);
        return 69;
    }
    char scope[96];
    snprintf(scope, sizeof scope, "bench:onceguard:%ld:%lld", (long)getpid(),
             (long long)clock_wall_ms());
    struct baton_once_guard_options opts = {.prefix = "baton", .ttl_ms = ttl_ms, .fail_open = false,
                                      .log_name = "bench"};
    struct baton_once_guard *g = baton_once_guard_create(l, scope, &opts);

    /* warm-up: the side connection's connect (and its script load), first keys */
    char key[48];
    for (int i = 0; i < 200; i++) {
        snprintf(key, sizeof key, "warm%d", i);
        (void)baton_once_guard_allow(g, key);
    }
    const struct baton_once_guard_stats *st = baton_once_guard_stats(g);
    unsigned long long a0 = atomic_load(&st->allowed), s0 = atomic_load(&st->skipped),
                       e0 = atomic_load(&st->backend_errors);

    int64_t t0 = clock_mono_us();
    for (long long i = 0; i < count; i++) {
        snprintf(key, sizeof key, "k%lld", i);
        (void)baton_once_guard_allow(g, key);
    }
    int64_t t1 = clock_mono_us();
    unsigned long long allowed = atomic_load(&st->allowed) - a0;
    unsigned long long skipped = atomic_load(&st->skipped) - s0;
    unsigned long long errors = atomic_load(&st->backend_errors) - e0;
    double secs = (double)(t1 - t0) / 1e6;

    /* recheck: the last keys are still inside their TTL; another guard on the
     * same scope (another "replica") must skip them */
    struct baton_once_guard *g2 = baton_once_guard_create(l, scope, &opts);
    long long sample = count < 100 ? count : 100, re_skipped = 0;
    for (long long i = count - sample; i < count; i++) {
        snprintf(key, sizeof key, "k%lld", i);
        if (!baton_once_guard_allow(g2, key)) re_skipped++;
    }
    printf("decisions=%lld seconds=%.4f rate=%.0f allowed=%llu skipped=%llu errors=%llu "
           "recheck_skipped=%lld/%lld\n",
           count, secs, secs > 0 ? (double)count / secs : 0.0, allowed, skipped, errors,
           re_skipped, sample);
    baton_once_guard_destroy(g2);
    baton_once_guard_destroy(g);
    baton_locker_destroy(l);
    if (allowed != (unsigned long long)count) {
        fprintf(stderr, "onceguard_bench: %llu of %lld fresh keys were not allowed "
                        "(skipped %llu, errors %llu)\n",
                (unsigned long long)count - allowed, count, skipped, errors);
        return 1;
    }
    if (re_skipped != sample) {
        fprintf(stderr, "onceguard_bench: a second guard was allowed %lld of %lld keys "
                        "already taken inside their TTL\n", sample - re_skipped, sample);
        return 1;
    }
    return 0;
}
