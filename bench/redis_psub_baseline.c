/* Baseline for bench/bench_redis_psub.sh: a bare hiredis PSUBSCRIBE loop
 * writing each payload as one line to stdout (stdio-buffered), the least a
 * Redis-to-stdout forwarder can do. It exits after COUNT messages (0 = run
 * until the connection closes).
 *
 *   bench_redis_psub_baseline [--json] HOST PORT PATTERN COUNT [flush]
 *
 * With --json each line is the envelope baton's redis_psub endpoint writes
 * for the message (endpoints/redis_psub.h's redis_psub_envelope, built in
 * one reused buffer: endpoint "bench", an epoch of as many digits as
 * baton's (microseconds since 1970), received_at read once per
 * read(2) as baton does), with no lease, queue, message object or sink: the
 * least a forwarder writing baton's output can do ("like for like", as
 * bench_mysql_cdc_baseline --json).
 *
 * With "flush" the lines go out as soon as no further message is already
 * read (fflush before each blocking read), as a forwarder must: a message is
 * on the descriptor without waiting for 64 KiB of others. bench_paced.py,
 * bench_peers.py and bench_redis_psub.sh run it so.
 */
#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench/bench_psub.h"
#include "common/envelope.h"
#include "endpoints/redis_psub.h"
#include "base/util.h"

#define EPOCH 1796500000000000ULL /* as many digits as baton's epochs */

int main(int argc, char **argv)
{
    const char *prog = argv[0];
    bool json = argc > 1 && strcmp(argv[1], "--json") == 0;
    if (json) {
        argc--;
        argv++;
    }
    if (argc != 5 && !(argc == 6 && strcmp(argv[5], "flush") == 0)) {
        fprintf(stderr, "usage: %s [--json] HOST PORT PATTERN COUNT [flush]\n", prog);
        return 64;
    }
    const char *host = argv[1];
    int port = atoi(argv[2]);
    const char *pattern = argv[3];
    long long count = atoll(argv[4]);
    int flush_when_idle = argc == 6;

    redisContext *c = bench_psub_connect("redis_psub_baseline", host, port, pattern);
    if (!c) return 69;
    redisReply *r;

    static char outbuf[1 << 16];
    setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);
    struct envelope env;
    envelope_init(&env);
    int64_t read_wall_ms = clock_wall_ms();
    long long n = 0;
    while (count == 0 || n < count) {
        void *rv = NULL;
        /* already read and parsed? else (flush, then) block in the read */
        if (redisGetReplyFromReader(c, &rv) != REDIS_OK) break;
        if (!rv) {
            if (flush_when_idle) fflush(stdout);
            if (redisGetReply(c, &rv) != REDIS_OK || !rv) break;
            if (json) read_wall_ms = clock_wall_ms(); /* once per read(2), as baton */
        }
        r = rv;
        if (json) {
            struct psub_event ev;
            if (redis_psub_decode(r, &ev) == PSUB_PMESSAGE) {
                redis_psub_envelope(&env, "bench", EPOCH, read_wall_ms, &ev, NULL);
                jbuf_char(&env.buf, '}'); /* what envelope_finish adds */
                jbuf_char(&env.buf, '\n');
                fwrite(env.buf.data, 1, env.buf.len, stdout);
                n++;
            }
        } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 4 &&
                   r->element[0]->type == REDIS_REPLY_STRING && r->element[0]->len == 8 &&
                   memcmp(r->element[0]->str, "pmessage", 8) == 0) {
            fwrite(r->element[3]->str, 1, (size_t)r->element[3]->len, stdout);
            fputc('\n', stdout);
            n++;
        }
        freeReplyObject(r);
    }
    fflush(stdout);
    envelope_free(&env);
    redisFree(c);
    /* CPU used, for the benchmark's CPU-per-message figure */
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        fprintf(stderr, "cpu_us %lld\n",
                (long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000LL +
                    ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    return n == count || count == 0 ? 0 : 1;
}
