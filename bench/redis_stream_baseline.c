/* The redis_stream sink against a bare hiredis loop running the same Lua
 * script (bench/bench_redis_stream.py).
 *
 *   bench_redis_stream_baseline PORT N BATCH sink|bare
 *
 * Both write N envelopes (redis_psub-like: channel, a 30-byte payload,
 * unique ids) to the Redis at 127.0.0.1:PORT in batches of BATCH, into a
 * fresh stream ("bench:<mode>:<pid>"):
 * - sink: through sink_redis_stream_ops.send, unguarded (no term checks to
 *   ask: NULL call), so what is measured is the sink's own work (splitting
 *   each envelope into its fields, building the arguments, EVALSHA);
 * - bare: one EVALSHA of the same script (sink_redis_stream_script) per
 *   batch with the arguments prepared beforehand, the least a client can do
 *   for the same effect.
 * Prints "msg_s X cpu_us Y" on stdout (Y: CPU per message, getrusage). */
#include <hiredis/hiredis.h>
#include <libconfig.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/util.h"
#include "common/envelope.h"
#include "common/settings.h"
#include "src/sink_impl.h"

#define EPOCH 1796360000000000ULL
#define PAYLOAD "payload-30-bytes-0123456789abc"

static long long cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000LL + ru.ru_utime.tv_usec +
           ru.ru_stime.tv_usec;
}

static int run_sink(int port, struct message **m, size_t n, size_t batch, const char *stream)
{
    const struct sink_ops *ops = &sink_redis_stream_ops;
    void *st = calloc(1, ops->settings_size);
    /* the table's defaults, with the port and the stream */
    char cfg[256];
    snprintf(cfg, sizeof cfg, "s = { port = %d; stream = \"%s\"; };", port, stream);
    config_t lc;
    config_init(&lc);
    struct config_error err = {0};
    if (config_read_string(&lc, cfg) != CONFIG_TRUE ||
        settings_parse(ops->settings, config_lookup(&lc, "s"), NULL, "bench", st, &err) != 0) {
        fprintf(stderr, "settings: %s\n", err.msg);
        return -1;
    }
    config_destroy(&lc);
    char e[256];
    void *k = ops->create("bench", "bench", st, e, sizeof e);
    if (!k) {
        fprintf(stderr, "create: %s\n", e);
        return -1;
    }
    enum msg_outcome *out = calloc(batch, sizeof *out);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i += batch) {
        size_t b = n - i < batch ? n - i : batch;
        ops->send(k, m + i, b, out, NULL);
        for (size_t j = 0; j < b; j++)
            if (out[j] != MSG_DELIVERED) rc = -1;
    }
    ops->destroy(k);
    settings_free(ops->settings, st);
    free(st);
    free(out);
    return rc;
}

static int run_bare(int port, struct message **m, size_t n, size_t batch, const char *stream)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    if (!c || c->err) return -1;
    redisReply *r = redisCommand(c, "SCRIPT LOAD %s", sink_redis_stream_script);
    if (!r || r->type != REDIS_REPLY_STRING) return -1;
    char sha[41];
    snprintf(sha, sizeof sha, "%s", r->str);
    freeReplyObject(r);
    /* the fields prepared beforehand: id, source, payload */
    char fence[128], prefix[128], ep[24], nk[24];
    snprintf(fence, sizeof fence, "%s:fence", stream);
    snprintf(prefix, sizeof prefix, "%s:seen:bench:", stream); /* endpoint "bench", as ARGV[4] */
    snprintf(ep, sizeof ep, "%llu", EPOCH);
    snprintf(nk, sizeof nk, "%zu", batch + 2);
    const char *src = "{\"type\":\"redis_psub\",\"received_at\":\"2026-12-07T11:00:00.000Z\","
                      "\"channel\":\"chan.x\"}";
    char **keys = calloc(n, sizeof *keys);
    for (size_t i = 0; i < n; i++) {
        keys[i] = malloc(strlen(prefix) + strlen(m[i]->id) + 1);
        sprintf(keys[i], "%s%s", prefix, m[i]->id);
    }
    size_t cap = 3 + 2 + batch + 4 + 3 * batch;
    const char **argv = calloc(cap, sizeof *argv);
    size_t *len = calloc(cap, sizeof *len);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i += batch) {
        size_t b = n - i < batch ? n - i : batch, a = 0;
        snprintf(nk, sizeof nk, "%zu", b + 2);
        argv[a++] = "EVALSHA", argv[a++] = sha, argv[a++] = nk;
        argv[a++] = stream, argv[a++] = fence;
        for (size_t j = 0; j < b; j++) argv[a++] = keys[i + j];
        argv[a++] = ep, argv[a++] = "1000000", argv[a++] = "86400000", argv[a++] = "bench";
        for (size_t j = 0; j < b; j++) {
            argv[a++] = m[i + j]->id;
            argv[a++] = src;
            argv[a++] = PAYLOAD;
        }
        for (size_t x = 0; x < a; x++) len[x] = strlen(argv[x]);
        r = redisCommandArgv(c, (int)a, argv, len);
        if (!r || r->type != REDIS_REPLY_ARRAY) rc = -1;
        if (r) freeReplyObject(r);
    }
    for (size_t i = 0; i < n; i++) free(keys[i]);
    free(keys);
    free(argv);
    free(len);
    redisFree(c);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s PORT N BATCH sink|bare\n", argv[0]);
        return 64;
    }
    int port = atoi(argv[1]);
    size_t n = (size_t)atol(argv[2]), batch = (size_t)atol(argv[3]);
    bool sink = strcmp(argv[4], "sink") == 0;
    struct envelope e;
    envelope_init(&e);
    struct message **m = calloc(n, sizeof *m);
    for (size_t i = 0; i < n; i++) {
        envelope_begin(&e, "bench", "redis_psub", EPOCH, NULL, clock_wall_ms());
        envelope_str(&e, "channel", "chan.x", 6);
        envelope_payload(&e, PAYLOAD, sizeof PAYLOAD - 1);
        m[i] = envelope_finish(&e);
    }
    char stream[64];
    snprintf(stream, sizeof stream, "bench:%s:%d", argv[4], (int)getpid());
    long long c0 = cpu_us();
    int64_t t0 = clock_mono_us();
    int rc = sink ? run_sink(port, m, n, batch, stream) : run_bare(port, m, n, batch, stream);
    int64_t t1 = clock_mono_us();
    long long c1 = cpu_us();
    for (size_t i = 0; i < n; i++) message_unref(m[i]);
    free(m);
    envelope_free(&e);
    if (rc) {
        fprintf(stderr, "%s: failed\n", argv[4]);
        return 1;
    }
    printf("msg_s %.0f cpu_us %.2f\n", (double)n * 1e6 / (double)(t1 - t0),
           (double)(c1 - c0) / (double)n);
    return 0;
}
