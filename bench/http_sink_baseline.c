/* Baseline for bench/bench_http_sink.sh: a bare libcurl loop POSTing N
 * messages to URL over one kept-alive connection, BATCH lines per request
 * (NDJSON with X-Baton-Count when BATCH > 1, one JSON body otherwise) with
 * the headers baton's HTTP sink sends, each line the given envelope. The
 * least an HTTP forwarder can do with the same bodies. libcurl is loaded
 * the way baton loads it (base/curl_dl). Prints the CPU it used
 * ("cpu_us N") on stderr.
 *
 *   bench_http_sink_baseline URL N BATCH LINE
 *   bench_http_sink_baseline URL N BATCH --psub HOST PORT PATTERN
 *
 * With --psub the lines are not given but received, like for like with
 * baton's redis_psub -> http pipeline on one thread: a bare hiredis
 * PSUBSCRIBE loop builds each message's envelope with baton's own
 * redis_psub_envelope (received_at read once per read(2)) and posts what it
 * has -- BATCH lines, or fewer when nothing more is already read -- before
 * it blocks in the next read. No lease, queue, message object or hand-off
 * to a second thread.
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
#include "base/curl_dl.h"
#include "base/util.h"

#define EPOCH 1796360000000000ULL

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
    (void)p;
    (void)arg;
    return size * n;
}

static CURL *curl;
static long long posts;

/* One POST of k lines (body, len) with the headers baton's HTTP sink sends. */
static int post(const char *url, const char *body, size_t len, long long k, long long batch)
{
    char h_id[64], h_count[64], h_epoch[64];
    snprintf(h_epoch, sizeof h_epoch, "X-Baton-Epoch: %llu", EPOCH);
    snprintf(h_id, sizeof h_id, "X-Baton-Id: r%016llx", ++posts);
    snprintf(h_count, sizeof h_count, "X-Baton-Count: %lld", k);
    struct curl_slist *h = sym_curl_slist_append(
        NULL, batch > 1 ? "Content-Type: application/x-ndjson" : "Content-Type: application/json");
    h = sym_curl_slist_append(h, "Expect:");
    h = sym_curl_slist_append(h, "X-Baton-Endpoint: bench");
    h = sym_curl_slist_append(h, h_epoch);
    h = sym_curl_slist_append(h, h_id);
    if (batch > 1) h = sym_curl_slist_append(h, h_count);
    sym_curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
    sym_curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    sym_curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)len);
    CURLcode rc = sym_curl_easy_perform(curl);
    long status = 0;
    sym_curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    sym_curl_slist_free_all(h);
    if (rc != CURLE_OK || status / 100 != 2) {
        fprintf(stderr, "http_sink_baseline: POST %s: %s (status %ld)\n", url,
                sym_curl_easy_strerror(rc), status);
        return -1;
    }
    return 0;
}

/* Posts n given lines, batch at a time. */
static int run_lines(const char *url, long long n, long long batch, const char *line)
{
    size_t ll = strlen(line);
    char *body = malloc((size_t)batch * (ll + 1) + 1);
    if (!body) return 70;
    long long sent = 0;
    while (sent < n) {
        long long k = n - sent < batch ? n - sent : batch;
        size_t len = 0;
        for (long long i = 0; i < k; i++) {
            memcpy(body + len, line, ll);
            len += ll;
            if (batch > 1) body[len++] = '\n';
        }
        if (post(url, body, len, k, batch) != 0) {
            free(body);
            return 1;
        }
        sent += k;
    }
    free(body);
    return 0;
}

/* Posts the in_body lines gathered in body, if any, and empties it. */
static int post_body(const char *url, struct jbuf *body, long long *in_body, long long batch)
{
    int rc = *in_body ? post(url, body->data, body->len, *in_body, batch) : 0;
    jbuf_reset(body);
    *in_body = 0;
    return rc;
}

/* --psub: receives n messages and posts their envelopes (see the top). */
static int run_psub(const char *url, long long n, long long batch, const char *host, int port,
                    const char *pattern)
{
    redisContext *c = bench_psub_connect("http_sink_baseline", host, port, pattern);
    if (!c) return 69;
    struct envelope env;
    envelope_init(&env);
    struct jbuf body;
    jbuf_init(&body, 64 * 1024);
    int64_t read_wall_ms = clock_wall_ms();
    long long got = 0, in_body = 0;
    int rc = 0;
    while (got < n) {
        void *rv = NULL;
        if (redisGetReplyFromReader(c, &rv) != REDIS_OK) break;
        if (!rv) {
            /* nothing more already read: post what we have, then block */
            if (post_body(url, &body, &in_body, batch) != 0) {
                rc = 1;
                break;
            }
            if (redisGetReply(c, &rv) != REDIS_OK || !rv) break;
            read_wall_ms = clock_wall_ms();
        }
        struct redisReply *r = rv;
        struct psub_event ev;
        if (redis_psub_decode(r, &ev) == PSUB_PMESSAGE) {
            redis_psub_envelope(&env, "bench", EPOCH, read_wall_ms, &ev, NULL);
            jbuf_char(&env.buf, '}'); /* what envelope_finish adds */
            jbuf_raw(&body, env.buf.data, env.buf.len);
            if (batch > 1) jbuf_char(&body, '\n');
            got++;
            in_body++;
        }
        freeReplyObject(r);
        if (in_body == batch && post_body(url, &body, &in_body, batch) != 0) {
            rc = 1;
            break;
        }
    }
    if (rc == 0 && post_body(url, &body, &in_body, batch) != 0) rc = 1;
    if (rc == 0 && got < n) {
        fprintf(stderr, "http_sink_baseline: the connection ended after %lld of %lld messages: %s\n",
                got, n, c->errstr);
        rc = 1;
    }
    jbuf_free(&body);
    envelope_free(&env);
    redisFree(c);
    return rc;
}

int main(int argc, char **argv)
{
    bool psub = argc == 8 && strcmp(argv[4], "--psub") == 0;
    if (argc != 5 && !psub) {
        fprintf(stderr, "usage: %s URL N BATCH LINE\n"
                        "       %s URL N BATCH --psub HOST PORT PATTERN\n", argv[0], argv[0]);
        return 64;
    }
    const char *url = argv[1];
    long long n = atoll(argv[2]);
    long long batch = atoll(argv[3]) > 0 ? atoll(argv[3]) : 1;
    char err[256];
    if (curl_dl_load(err, sizeof err) != 0) {
        fprintf(stderr, "http_sink_baseline: %s\n", err);
        return 69;
    }
    curl = sym_curl_easy_init();
    if (!curl) return 70;
    sym_curl_easy_setopt(curl, CURLOPT_URL, url);
    sym_curl_easy_setopt(curl, CURLOPT_POST, 1L);
    sym_curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard);
    sym_curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    sym_curl_easy_setopt(curl, CURLOPT_TCP_NODELAY, 1L);
    int rc = psub ? run_psub(url, n, batch, argv[5], atoi(argv[6]), argv[7])
                  : run_lines(url, n, batch, argv[4]);
    sym_curl_easy_cleanup(curl);
    if (rc != 0) return rc;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(stderr, "cpu_us %lld\n", (long long)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec +
                                         (long long)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec);
    return 0;
}
