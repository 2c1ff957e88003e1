/* Baseline for bench/bench_onceguard.sh: the wire work of one OnceGuard
 * decision in a bare hiredis loop, without baton's code around it.
 *
 *   bench_onceguard_baseline HOST PORT COUNT [TTL_MS]
 *
 * One blocking connection (1 s connect and command timeouts, TCP keepalive,
 * as baton's side connection), one thread. Each decision is what baton's
 * redis locker sends for a claim (guard/locker_redis.c, redis_claim): `SET key
 * value NX PX ttl` pipelined with `TYPE key`, both replies read (one round
 * trip), the SET reply deciding allowed (OK) / skipped (nil). Keys have
 * baton's shape ("baton:once:<scope>:k<i>", a scope unique to this run, so
 * every key is fresh) and the value the length of baton's claim value
 * ("<host> pid <pid> <16-char token>"). 200 warm-up decisions, then COUNT
 * timed with the monotonic clock. Then the same check as bench_onceguard: a
 * second SET NX on the last keys (still inside their TTL) must find them
 * taken.
 *
 * Prints one line, in bench_onceguard's format:
 *   decisions=N seconds=S rate=R allowed=A skipped=K errors=E recheck_skipped=X/Y
 * Exit status: 0 ok; 1 a fresh key not allowed, an error reply, or a taken
 * key allowed again; 64 usage; 69 Redis unreachable or the connection broke. */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { ALLOWED, SKIPPED, ERROR, BROKEN };

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One decision: SET key value NX PX ttl + TYPE key, pipelined. */
static int claim(redisContext *c, const char *key, const char *value, const char *ttl)
{
    const char *set_argv[6] = {"SET", key, value, "NX", "PX", ttl};
    const char *type_argv[2] = {"TYPE", key};
    if (redisAppendCommandArgv(c, 6, set_argv, NULL) != REDIS_OK ||
        redisAppendCommandArgv(c, 2, type_argv, NULL) != REDIS_OK)
        return BROKEN;
    redisReply *r = NULL, *t = NULL;
    if (redisGetReply(c, (void **)&r) != REDIS_OK || r == NULL) return BROKEN;
    if (redisGetReply(c, (void **)&t) != REDIS_OK || t == NULL) {
        freeReplyObject(r);
        return BROKEN;
    }
    int rc = ERROR;
    if (r->type == REDIS_REPLY_STATUS)
        rc = ALLOWED;
    else if (r->type == REDIS_REPLY_NIL)
        rc = t->type == REDIS_REPLY_STATUS && strcmp(t->str, "string") == 0 ? SKIPPED : ERROR;
    freeReplyObject(r);
    freeReplyObject(t);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: %s HOST PORT COUNT [TTL_MS]\n", argv[0]);
        return 64;
    }
    const char *host = argv[1];
    int port = atoi(argv[2]);
    long long count = atoll(argv[3]);
    long long ttl_ms = argc == 5 ? atoll(argv[4]) : 1000;
    if (count <= 0 || ttl_ms <= 0) {
        fprintf(stderr, "onceguard_baseline: COUNT and TTL_MS must be positive\n");
        return 64;
    }
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout(host, port, tv);
    if (c == NULL || c->err) {
        fprintf(stderr, "onceguard_baseline: connect %s:%d: %s\n", host, port,
                c ? c->errstr : "out of memory");
        return 69;
    }
    redisEnableKeepAlive(c);
    redisSetTimeout(c, tv);

    char hostname[64] = "localhost";
    gethostname(hostname, sizeof hostname - 1);
    char value[160], ttl[24], key[160];
    snprintf(value, sizeof value, "%.80s pid %d %016llx", hostname, (int)getpid(),
             (unsigned long long)time(NULL) * 2654435761ULL);
    snprintf(ttl, sizeof ttl, "%lld", ttl_ms);
    char prefix[96];
    snprintf(prefix, sizeof prefix, "baton:once:bench:onceguard-baseline:%ld:%lld",
             (long)getpid(), (long long)time(NULL));

    long long n[4] = {0};
    for (int i = 0; i < 200; i++) { /* warm-up */
        snprintf(key, sizeof key, "%s:warm%d", prefix, i);
        if (claim(c, key, value, ttl) == BROKEN) goto broken;
    }
    double t0 = mono_s();
    for (long long i = 0; i < count; i++) {
        snprintf(key, sizeof key, "%s:k%lld", prefix, i);
        int rc = claim(c, key, value, ttl);
        if (rc == BROKEN) goto broken;
        n[rc]++;
    }
    double secs = mono_s() - t0;

    /* recheck: the last keys are still inside their TTL and must be taken */
    long long sample = count < 100 ? count : 100, re_skipped = 0;
    for (long long i = count - sample; i < count; i++) {
        snprintf(key, sizeof key, "%s:k%lld", prefix, i);
        int rc = claim(c, key, value, ttl);
        if (rc == BROKEN) goto broken;
        if (rc == SKIPPED) re_skipped++;
    }
    redisFree(c);
    printf("decisions=%lld seconds=%.4f rate=%.0f allowed=%lld skipped=%lld errors=%lld "
           "recheck_skipped=%lld/%lld\n",
           count, secs, secs > 0 ? (double)count / secs : 0.0, n[ALLOWED], n[SKIPPED], n[ERROR],
           re_skipped, sample);
    if (n[ALLOWED] != count) {
        fprintf(stderr, "onceguard_baseline: %lld of %lld fresh keys were not allowed\n",
                count - n[ALLOWED], count);
        return 1;
    }
    if (re_skipped != sample) {
        fprintf(stderr, "onceguard_baseline: %lld of %lld keys already taken were allowed again\n",
                sample - re_skipped, sample);
        return 1;
    }
    return 0;

broken:
    fprintf(stderr, "onceguard_baseline: %s:%d: %s\n", host, port,
            c->errstr[0] ? c->errstr : "no reply");
    redisFree(c);
    return 69;
}
