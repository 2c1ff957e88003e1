/* Baseline for bench/bench_http_sink.sh: a bare libcurl loop POSTing N
 * messages to URL over one kept-alive connection, BATCH lines per request
 * (NDJSON with X-Baton-Count when BATCH > 1, one JSON body otherwise) with
 * the headers baton's HTTP sink sends, each line the given envelope. The
 * least an HTTP forwarder can do with the same bodies. libcurl is loaded
 * the way baton loads it (guard/curl_dl). Prints the CPU it used
 * ("cpu_us N") on stderr.
 *
 *   bench_http_sink_baseline URL N BATCH LINE
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "guard/curl_dl.h"

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
    (void)p;
    (void)arg;
    return size * n;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s URL N BATCH LINE\n", argv[0]);
        return 64;
    }
    const char *url = argv[1];
    long long n = atoll(argv[2]);
    long long batch = atoll(argv[3]) > 0 ? atoll(argv[3]) : 1;
    const char *line = argv[4];
    size_t ll = strlen(line);
    char err[256];
    if (curl_dl_load(err, sizeof err) != 0) {
        fprintf(stderr, "http_sink_baseline: %s\n", err);
        return 69;
    }
    CURL *c = sym_curl_easy_init();
    char *body = malloc((size_t)batch * (ll + 1) + 1);
    if (!c || !body) return 70;
    sym_curl_easy_setopt(c, CURLOPT_URL, url);
    sym_curl_easy_setopt(c, CURLOPT_POST, 1L);
    sym_curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    sym_curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    sym_curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    long long sent = 0, id = 0;
    while (sent < n) {
        long long k = n - sent < batch ? n - sent : batch;
        size_t len = 0;
        for (long long i = 0; i < k; i++) {
            memcpy(body + len, line, ll);
            len += ll;
            if (batch > 1) body[len++] = '\n';
        }
        char h_id[64], h_count[64];
        snprintf(h_id, sizeof h_id, "X-Baton-Id: r%016llx", ++id);
        snprintf(h_count, sizeof h_count, "X-Baton-Count: %lld", k);
        struct curl_slist *h = sym_curl_slist_append(
            NULL, batch > 1 ? "Content-Type: application/x-ndjson" : "Content-Type: application/json");
        h = sym_curl_slist_append(h, "Expect:");
        h = sym_curl_slist_append(h, "X-Baton-Endpoint: bench");
        h = sym_curl_slist_append(h, "X-Baton-Epoch: 1796360000000000");
        h = sym_curl_slist_append(h, h_id);
        if (batch > 1) h = sym_curl_slist_append(h, h_count);
        sym_curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        sym_curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        sym_curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)len);
        CURLcode rc = sym_curl_easy_perform(c);
        long status = 0;
        sym_curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        sym_curl_slist_free_all(h);
        if (rc != CURLE_OK || status / 100 != 2) {
            fprintf(stderr, "http_sink_baseline: POST %s: %s (status %ld)\n", url,
                    sym_curl_easy_strerror(rc), status);
            return 1;
        }
        sent += k;
    }
    sym_curl_easy_cleanup(c);
    free(body);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(stderr, "cpu_us %lld\n", (long long)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec +
                                         (long long)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec);
    return 0;
}
