/* Baseline for bench/bench_redis_psub.sh: a bare hiredis PSUBSCRIBE loop
 * writing each payload as one line to stdout (stdio-buffered), the least a
 * Redis-to-stdout forwarder can do. It exits after COUNT messages (0 = run
 * until the connection closes).
 *
 *   bench_redis_psub_baseline HOST PORT PATTERN COUNT [flush]
 *
 * With "flush" the lines go out as soon as no further message is already
 * read (fflush before each blocking read), as a forwarder must: a message is
 * on the descriptor without waiting for 64 KiB of others. bench_paced.py
 * uses it; bench_redis_psub.sh (saturation, where the reader is rarely
 * idle) does not.
 */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

int main(int argc, char **argv)
{
    if (argc != 5 && !(argc == 6 && strcmp(argv[5], "flush") == 0)) {
        fprintf(stderr, "usage: %s HOST PORT PATTERN COUNT [flush]\n", argv[0]);
        return 64;
    }
    const char *host = argv[1];
    int port = atoi(argv[2]);
    const char *pattern = argv[3];
    long long count = atoll(argv[4]);
    int flush_when_idle = argc == 6;

    redisContext *c = redisConnect(host, port);
    if (!c || c->err) {
        fprintf(stderr, "redis_psub_baseline: connect %s:%d: %s\n", host, port,
                c ? c->errstr : "out of memory");
        return 69;
    }
    redisReply *r = redisCommand(c, "PSUBSCRIBE %s", pattern);
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "redis_psub_baseline: PSUBSCRIBE failed: %s\n", c->errstr);
        return 69;
    }
    freeReplyObject(r);

    static char outbuf[1 << 16];
    setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);
    long long n = 0;
    while (count == 0 || n < count) {
        void *rv = NULL;
        if (flush_when_idle) {
            /* already read and parsed? else flush, then block in the read */
            if (redisGetReplyFromReader(c, &rv) != REDIS_OK) break;
            if (!rv) fflush(stdout);
        }
        if (!rv && (redisGetReply(c, &rv) != REDIS_OK || !rv)) break;
        r = rv;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 4 &&
            r->element[0]->type == REDIS_REPLY_STRING && r->element[0]->len == 8 &&
            memcmp(r->element[0]->str, "pmessage", 8) == 0) {
            fwrite(r->element[3]->str, 1, (size_t)r->element[3]->len, stdout);
            fputc('\n', stdout);
            n++;
        }
        freeReplyObject(r);
    }
    fflush(stdout);
    redisFree(c);
    /* CPU used, for the benchmark's CPU-per-message figure */
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        fprintf(stderr, "cpu_us %lld\n",
                (long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000LL +
                    ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    return n == count || count == 0 ? 0 : 1;
}
