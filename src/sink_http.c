/* http sink (libcurl): POST each envelope (or an NDJSON batch) to a URL over
 * a kept-alive connection, retrying with exponential backoff and jitter on
 * connection errors, timeouts, 5xx and 429; other 4xx fail at once.
 *
 * Lease-bounded: before every attempt the sink asks whether the messages'
 * term still runs (sink_wait_live); an ended term stops it
 * (MSG_DROPPED_TERM_ENDED). A request runs on a multi handle polled in
 * slices of at most 20 ms, asking the lease each slice: it is aborted the
 * moment its term ends (the deadline passed without a renewal), while a
 * lease that keeps being renewed lets a slow receiver take its configured
 * timeout. Back-off sleeps re-ask at least every 20 ms and never run past
 * the deadline. A request already written when the term ends is aborted;
 * the receiver may still have processed it (it carries X-Baton-Epoch, so a
 * receiver keeping the highest epoch it saw can reject it).
 *
 * Headers: Content-Type, X-Baton-Endpoint (the endpoint the instance was
 * created for), X-Baton-Epoch
 * and X-Baton-Id (from the message; omitted when the id is empty), plus the
 * static ones from `headers` and `headers_env`. In a batch (batch_max > 1)
 * X-Baton-Epoch is the highest epoch in the batch, X-Baton-Id the first
 * message's id and X-Baton-Count the number of lines. Header values are
 * percent-encoded outside printable ASCII, so a source id can never inject a
 * header. */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/curl_dl.h"
#include "base/util.h"
#include "common/json.h"
#include "common/log.h"
#include "common/redact.h"
#include "common/util.h"
#include "src/sink_impl.h"

struct http_settings {
    char *url;
    int64_t timeout_ms;
    int64_t connect_timeout_ms;
    int64_t retries;
    int64_t backoff_ms;
    int64_t backoff_max_ms;
    struct strlist headers;
    struct strlist headers_env;
    int64_t batch_max;
};

static const struct setting_def http_defs[] = {
    {"url", SETTING_STRING, offsetof(struct http_settings, url), .required = true,
     .help = "http:// or https:// URL to POST to"},
    {"timeout_ms", SETTING_INT, offsetof(struct http_settings, timeout_ms), .def = "5000",
     .min = 1, .max = 3600000, .help = "whole-request timeout in ms"},
    {"connect_timeout_ms", SETTING_INT, offsetof(struct http_settings, connect_timeout_ms),
     .def = "2000", .min = 1, .max = 600000, .help = "connect timeout in ms"},
    {"retries", SETTING_INT, offsetof(struct http_settings, retries), .def = "5", .min = 0,
     .max = 1000, .help = "retries after the first attempt"},
    {"backoff_ms", SETTING_INT, offsetof(struct http_settings, backoff_ms), .def = "100",
     .min = 1, .max = 3600000, .help = "first retry delay in ms (doubles per retry, jittered)"},
    {"backoff_max_ms", SETTING_INT, offsetof(struct http_settings, backoff_max_ms),
     .def = "5000", .min = 1, .max = 3600000, .help = "largest retry delay in ms"},
    {"headers", SETTING_STRLIST, offsetof(struct http_settings, headers),
     .help = "list of \"Name: value\" headers sent with every request"},
    {"headers_env", SETTING_STRLIST, offsetof(struct http_settings, headers_env),
     .help = "list of \"Name=ENVVAR\": header Name with the value of environment variable "
             "ENVVAR"},
    {"batch_max", SETTING_INT, offsetof(struct http_settings, batch_max), .def = "1", .min = 1,
     .max = 100000, .help = "messages per POST; > 1 sends an NDJSON body"},
    SETTINGS_END,
};

struct http_sink {
    char *name;
    char *endpoint;        /* for log lines; NULL = none */
    char *endpoint_header; /* "X-Baton-Endpoint: <name, encoded>"; NULL = none */
    char *url;       /* what curl gets */
    char *url_shown; /* what logs and messages show: user information masked */
    long timeout_ms, connect_timeout_ms;
    unsigned retries;
    int64_t backoff_ms, backoff_max_ms;
    size_t batch_max;
    struct curl_slist *static_headers; /* static + env headers, "Name: value" */
    bool custom_content_type;
    CURL *curl;
    CURLM *multi; /* runs k->curl, so a request can be aborted between poll slices */
    char errbuf[CURL_ERROR_SIZE];
    struct jbuf body;       /* NDJSON batch body, reused */
    char resp[256];         /* start of the last response body, for logs */
    size_t resp_len;
};



/* RFC 7230 token characters. */
static bool is_tchar(unsigned char c)
{
    return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool valid_header_name(const char *s, size_t n)
{
    if (n == 0) return false;
    for (size_t i = 0; i < n; i++)
        if (!is_tchar((unsigned char)s[i])) return false;
    return true;
}

static bool valid_header_value(const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
    }
    return true;
}

static bool reserved_header(const char *s, size_t n)
{
    return (n >= 8 && strncasecmp(s, "X-Baton-", 8) == 0) ||
           (n == 14 && strncasecmp(s, "Content-Length", 14) == 0);
}

static int http_validate(const void *settings, char *msg, size_t msglen)
{
    const struct http_settings *s = settings;
    char shown[512];
    redact_urls(s->url ? s->url : "", shown, sizeof shown);
    if (!s->url || (strncasecmp(s->url, "http://", 7) != 0 && strncasecmp(s->url, "https://", 8) != 0)) {
        snprintf(msg, msglen, "'url' expected an http:// or https:// URL, got '%s'", shown);
        return -1;
    }
    size_t hostpart = strncasecmp(s->url, "https://", 8) == 0 ? 8 : 7;
    if (s->url[hostpart] == '\0' || s->url[hostpart] == '/') {
        snprintf(msg, msglen, "'url' has no host: '%s'", shown);
        return -1;
    }
    const char *space = strpbrk(s->url, " \t\r\n");
    if (space) {
        /* the mask stops at the first space: say where, not what */
        snprintf(msg, msglen, "'url' must not contain whitespace (byte %zu)",
                 (size_t)(space - s->url) + 1);
        return -1;
    }
    if (s->backoff_max_ms < s->backoff_ms) {
        snprintf(msg, msglen, "'backoff_max_ms' (%lld) must be >= 'backoff_ms' (%lld)",
                 (long long)s->backoff_max_ms, (long long)s->backoff_ms);
        return -1;
    }
    for (size_t i = 0; i < s->headers.n; i++) {
        const char *h = s->headers.v[i];
        const char *colon = strchr(h, ':');
        if (!colon || !valid_header_name(h, (size_t)(colon - h))) {
            snprintf(msg, msglen, "'headers' element %zu: expected \"Name: value\", got '%s'", i + 1,
                     h);
            return -1;
        }
        if (reserved_header(h, (size_t)(colon - h))) {
            snprintf(msg, msglen, "'headers' element %zu: header '%.*s' is set by baton", i + 1,
                     (int)(colon - h), h);
            return -1;
        }
        if (!valid_header_value(colon + 1)) {
            snprintf(msg, msglen, "'headers' element %zu: value contains control characters", i + 1);
            return -1;
        }
    }
    for (size_t i = 0; i < s->headers_env.n; i++) {
        const char *h = s->headers_env.v[i];
        const char *eq = strchr(h, '=');
        if (!eq || !valid_header_name(h, (size_t)(eq - h)) || eq[1] == '\0') {
            snprintf(msg, msglen, "'headers_env' element %zu: expected \"Name=ENVVAR\", got '%s'",
                     i + 1, h);
            return -1;
        }
        if (reserved_header(h, (size_t)(eq - h))) {
            snprintf(msg, msglen, "'headers_env' element %zu: header '%.*s' is set by baton", i + 1,
                     (int)(eq - h), h);
            return -1;
        }
        for (const char *v = eq + 1; *v; v++) {
            if (!(isalnum((unsigned char)*v) || *v == '_')) {
                snprintf(msg, msglen, "'headers_env' element %zu: '%s' is not an environment variable name",
                         i + 1, eq + 1);
                return -1;
            }
        }
        /* like the locker's password_env: --check-config catches it too */
        if (!getenv(eq + 1)) {
            snprintf(msg, msglen, "'headers_env' element %zu: environment variable '%s' is not set",
                     i + 1, eq + 1);
            return -1;
        }
    }
    return 0;
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct http_sink *k = userdata;
    size_t n = size * nmemb;
    size_t room = sizeof k->resp - 1 - k->resp_len;
    size_t take = n < room ? n : room;
    memcpy(k->resp + k->resp_len, ptr, take);
    k->resp_len += take;
    k->resp[k->resp_len] = '\0';
    return n;
}

static void http_destroy(void *sink)
{
    struct http_sink *k = sink;
    if (!k) return;
    if (k->multi) sym_curl_multi_cleanup(k->multi);
    if (k->curl) sym_curl_easy_cleanup(k->curl);
    sym_curl_slist_free_all(k->static_headers);
    jbuf_free(&k->body);
    free(k->name);
    free(k->endpoint);
    free(k->endpoint_header);
    free(k->url);
    free(k->url_shown);
    free(k);
}

static bool append_header(struct curl_slist **list, const char *h)
{
    struct curl_slist *n = sym_curl_slist_append(*list, h);
    if (!n) return false;
    *list = n;
    return true;
}

/* A header line: "Name: value" with value percent-encoded outside visible
 * ASCII. */
#define HEADER_LINE_MAX (64 + 3 * 256 + 1)
static void encode_header(char line[HEADER_LINE_MAX], const char *name, const char *value)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = (size_t)snprintf(line, HEADER_LINE_MAX, "%s: ", name);
    for (const unsigned char *p = (const unsigned char *)value; *p && n + 4 < HEADER_LINE_MAX; p++) {
        if (*p > 0x20 && *p < 0x7f && *p != '%') {
            line[n++] = (char)*p;
        } else {
            line[n++] = '%';
            line[n++] = hex[*p >> 4];
            line[n++] = hex[*p & 15];
        }
    }
    line[n] = '\0';
}

static void *http_create(const char *name, const char *endpoint, const void *settings, char *err,
                         size_t errlen)
{
    const struct http_settings *s = settings;
    if (http_validate(s, err, errlen) != 0) return NULL;
    char lerr[512];
    if (curl_dl_load(lerr, sizeof lerr) != 0) {
        snprintf(err, errlen, "%s", lerr); /* the caller names the sink */
        return NULL;
    }
    struct http_sink *k = xcalloc(1, sizeof *k);
    k->name = xstrdup(name ? name : "http");
    if (endpoint && endpoint[0]) {
        char line[HEADER_LINE_MAX];
        encode_header(line, "X-Baton-Endpoint", endpoint);
        k->endpoint = xstrdup(endpoint);
        k->endpoint_header = xstrdup(line);
    }
    k->url = xstrdup(s->url);
    size_t shown_len = strlen(s->url) + 1 + strlen(REDACT_MASK);
    k->url_shown = xmalloc(shown_len);
    redact_urls(s->url, k->url_shown, shown_len);
    k->timeout_ms = (long)s->timeout_ms;
    k->connect_timeout_ms = (long)s->connect_timeout_ms;
    k->retries = (unsigned)s->retries;
    k->backoff_ms = s->backoff_ms;
    k->backoff_max_ms = s->backoff_max_ms;
    k->batch_max = s->batch_max > 0 ? (size_t)s->batch_max : 1;
    jbuf_init(&k->body, k->batch_max > 1 ? 4096 : 16);

    for (size_t i = 0; i < s->headers.n; i++) {
        const char *h = s->headers.v[i];
        const char *colon = strchr(h, ':');
        if (colon - h == 12 && strncasecmp(h, "Content-Type", 12) == 0) k->custom_content_type = true;
        if (!append_header(&k->static_headers, h)) goto oom;
    }
    for (size_t i = 0; i < s->headers_env.n; i++) {
        const char *h = s->headers_env.v[i];
        const char *eq = strchr(h, '=');
        const char *val = getenv(eq + 1);
        if (!val) {
            snprintf(err, errlen,
                     "sink '%s': headers_env '%s': environment variable '%s' is not set", k->name,
                     h, eq + 1);
            http_destroy(k);
            return NULL;
        }
        if (!valid_header_value(val)) {
            snprintf(err, errlen,
                     "sink '%s': headers_env '%s': environment variable '%s' holds control "
                     "characters",
                     k->name, h, eq + 1);
            http_destroy(k);
            return NULL;
        }
        size_t nl = (size_t)(eq - h);
        if (nl == 12 && strncasecmp(h, "Content-Type", 12) == 0) k->custom_content_type = true;
        size_t len = nl + 2 + strlen(val) + 1;
        char *line = xmalloc(len);
        snprintf(line, len, "%.*s: %s", (int)nl, h, val);
        bool ok = append_header(&k->static_headers, line);
        free(line);
        if (!ok) goto oom;
    }
    /* no "Expect: 100-continue" round trip for large bodies */
    if (!append_header(&k->static_headers, "Expect:")) goto oom;

    k->curl = sym_curl_easy_init();
    k->multi = sym_curl_multi_init();
    if (!k->curl || !k->multi) {
        snprintf(err, errlen, "sink '%s': curl_easy_init failed", k->name);
        http_destroy(k);
        return NULL;
    }
    CURL *c = k->curl;
    sym_curl_easy_setopt(c, CURLOPT_URL, k->url);
    sym_curl_easy_setopt(c, CURLOPT_POST, 1L);
    sym_curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    sym_curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, k->timeout_ms);
    sym_curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, k->connect_timeout_ms);
    sym_curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    sym_curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    sym_curl_easy_setopt(c, CURLOPT_ERRORBUFFER, k->errbuf);
    sym_curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    sym_curl_easy_setopt(c, CURLOPT_WRITEDATA, k);
    sym_curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    sym_curl_easy_setopt(c, CURLOPT_USERAGENT, "baton/" BATON_VERSION);
    return k;
oom:
    snprintf(err, errlen, "sink '%s': out of memory building headers", k->name);
    http_destroy(k);
    return NULL;
}

static bool add_header_encoded(struct curl_slist **list, const char *name, const char *value)
{
    char line[HEADER_LINE_MAX];
    encode_header(line, name, value);
    return append_header(list, line);
}

/* Builds the per-request header list. NULL on OOM. */
static struct curl_slist *request_headers(struct http_sink *k, struct message *const *msgs,
                                          size_t n)
{
    struct curl_slist *h = NULL;
    bool ok = true;
    if (!k->custom_content_type)
        ok = append_header(&h, n > 1 || k->batch_max > 1 ? "Content-Type: application/x-ndjson"
                                                         : "Content-Type: application/json");
    if (ok && k->endpoint_header) ok = append_header(&h, k->endpoint_header);
    uint64_t epoch = 0;
    for (size_t i = 0; i < n; i++)
        if (msgs[i]->epoch > epoch) epoch = msgs[i]->epoch;
    char num[64];
    snprintf(num, sizeof num, "X-Baton-Epoch: %llu", (unsigned long long)epoch);
    if (ok) ok = append_header(&h, num);
    if (ok && msgs[0]->id[0]) ok = add_header_encoded(&h, "X-Baton-Id", msgs[0]->id);
    if (ok && k->batch_max > 1) {
        snprintf(num, sizeof num, "X-Baton-Count: %zu", n);
        ok = append_header(&h, num);
    }
    for (struct curl_slist *s = k->static_headers; ok && s; s = s->next)
        ok = append_header(&h, s->data);
    if (!ok) {
        sym_curl_slist_free_all(h);
        return NULL;
    }
    return h;
}

enum attempt_result { ATTEMPT_OK, ATTEMPT_RETRY, ATTEMPT_FATAL, ATTEMPT_ENDED, ATTEMPT_CANCELLED };

static bool curl_error_retryable(CURLcode rc)
{
    switch (rc) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_NOT_BUILT_IN:
    case CURLE_BAD_FUNCTION_ARGUMENT:
    case CURLE_OUT_OF_MEMORY:
    case CURLE_ABORTED_BY_CALLBACK: /* cancelled */
        return false;
    default:
        return true; /* connect, resolve, timeout, send/recv, TLS, empty reply */
    }
}

/* Runs the prepared request on the multi handle, asking the lease every
 * poll slice (<= 20 ms): aborted (ATTEMPT_ENDED / ATTEMPT_CANCELLED) the
 * moment the term ends or the drain deadline passes. *rc gets curl's result
 * otherwise. */
static enum attempt_result run_request(struct http_sink *k, struct sink_call *call, uint64_t epoch,
                                       CURLcode *rc)
{
    enum attempt_result stop = ATTEMPT_OK;
    *rc = CURLE_OK;
    if (sym_curl_multi_add_handle(k->multi, k->curl) != CURLM_OK) {
        *rc = CURLE_FAILED_INIT;
        return ATTEMPT_OK;
    }
    int running = 1;
    for (;;) {
        /* The term is asked right before every curl_multi_perform, the call
         * that writes: a leader paused inside the poll below (SIGSTOP, swap)
         * must not send the rest of its request when it resumes after its
         * term ended (found by test_term_delivery_acked: a connect pending at
         * the pause completed and sent the request 0.9 s after a newer
         * epoch). What remains is the gap between this check and the write. */
        if (call->cancel && atomic_load(call->cancel)) {
            stop = ATTEMPT_CANCELLED;
            break;
        }
        int64_t left = sink_time_left(call, epoch);
        if (left < 0) {
            stop = ATTEMPT_ENDED;
            break;
        }
        if (sym_curl_multi_perform(k->multi, &running) != CURLM_OK) {
            *rc = CURLE_FAILED_INIT;
            break;
        }
        if (!running) {
            int q = 0;
            CURLMsg *msg;
            while ((msg = sym_curl_multi_info_read(k->multi, &q)))
                if (msg->msg == CURLMSG_DONE && msg->easy_handle == k->curl) *rc = msg->data.result;
            break;
        }
        int wait = 20;
        if (left > 0 && left < wait) wait = (int)left;
        sym_curl_multi_poll(k->multi, NULL, 0, wait, NULL);
    }
    /* mid-transfer this closes the connection: nothing more goes out */
    sym_curl_multi_remove_handle(k->multi, k->curl);
    return stop;
}

/* One POST. what describes the failure for the log. */
static enum attempt_result post_once(struct http_sink *k, struct sink_call *call, uint64_t epoch,
                                     const char *body, size_t len, struct curl_slist *hdrs,
                                     long *status, char *what, size_t whatlen)
{
    k->errbuf[0] = '\0';
    k->resp_len = 0;
    k->resp[0] = '\0';
    *status = 0;
    sym_curl_easy_setopt(k->curl, CURLOPT_HTTPHEADER, hdrs);
    sym_curl_easy_setopt(k->curl, CURLOPT_POSTFIELDS, body);
    sym_curl_easy_setopt(k->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    CURLcode rc;
    enum attempt_result stop = run_request(k, call, epoch, &rc);
    if (stop != ATTEMPT_OK) {
        snprintf(what, whatlen, "%s", stop == ATTEMPT_ENDED ? "aborted: the lease term ended during the request"
                                                           : "aborted: shutdown");
        return stop;
    }
    if (rc == CURLE_OUT_OF_MEMORY) {
        /* what libcurl answers to a response header line over its limit
         * (100 KiB) or one it cannot take apart: say what it is */
        bool detail = k->errbuf[0] && strcasecmp(k->errbuf, "out of memory") != 0;
        snprintf(what, whatlen, "receiver's answer has a header line too long or malformed "
                 "(curl: out of memory%s%s)", detail ? ": " : "", detail ? k->errbuf : "");
        return ATTEMPT_FATAL;
    }
    if (rc != CURLE_OK) {
        snprintf(what, whatlen, "%s", k->errbuf[0] ? k->errbuf : sym_curl_easy_strerror(rc));
        return curl_error_retryable(rc) ? ATTEMPT_RETRY : ATTEMPT_FATAL;
    }
    sym_curl_easy_getinfo(k->curl, CURLINFO_RESPONSE_CODE, status);
    if (*status >= 200 && *status < 300) return ATTEMPT_OK;
    /* keep the response excerpt printable on one line */
    for (size_t i = 0; i < k->resp_len; i++)
        if ((unsigned char)k->resp[i] < 0x20) k->resp[i] = ' ';
    snprintf(what, whatlen, "HTTP %ld%s%.200s", *status, k->resp_len ? ": " : "", k->resp);
    if (*status == 429 || *status >= 500) return ATTEMPT_RETRY;
    return ATTEMPT_FATAL; /* other 4xx, 3xx (redirects are not followed) */
}

/* Sleeps delay_ms between attempts, asking the lease every 20 ms at most:
 * returns MSG_DELIVERED when the delay passed with the term still live,
 * MSG_DROPPED_TERM_ENDED when it ended, MSG_DROPPED_SHUTDOWN on cancel. */
static enum msg_outcome backoff_sleep(const struct sink_call *call, uint64_t epoch, int64_t delay_ms)
{
    int64_t until = clock_mono_ms() + delay_ms;
    for (;;) {
        int64_t left = sink_wait_live(call, epoch);
        if (call->cancel && atomic_load(call->cancel)) return MSG_DROPPED_SHUTDOWN;
        if (left < 0) return MSG_DROPPED_TERM_ENDED;
        int64_t rem = until - clock_mono_ms();
        if (rem <= 0) return MSG_DELIVERED;
        int64_t step = rem < 20 ? rem : 20;
        if (step > left) step = left; /* never sleep past the deadline */
        sleep_ms_cancellable(step, call->cancel);
    }
}

/* Delivers one request (one message or one NDJSON batch, all of one term)
 * with retries. Returns MSG_DELIVERED, MSG_DROPPED_SINK_FAILED,
 * MSG_DROPPED_TERM_ENDED or MSG_DROPPED_SHUTDOWN. */
static enum msg_outcome deliver(struct http_sink *k, struct message *const *msgs, size_t n,
                                const char *body, size_t len, struct sink_call *call)
{
    const char *epn = k->endpoint;
    uint64_t epoch = msgs[0]->epoch;
    struct curl_slist *hdrs = request_headers(k, msgs, n);
    if (!hdrs) {
        log_error("sink_http", epn, "sink '%s': out of memory building request headers", k->name);
        call->attempt_errors++;
        return MSG_DROPPED_SINK_FAILED;
    }
    char what[400] = "";
    long status = 0;
    enum msg_outcome res = MSG_DROPPED_SINK_FAILED;
    unsigned attempt = 0;
    int64_t t0 = clock_mono_ms();
    for (;;) {
        /* leader now, in this term, before every attempt */
        int64_t left = sink_wait_live(call, epoch);
        if (call->cancel && atomic_load(call->cancel)) {
            res = MSG_DROPPED_SHUTDOWN;
            break;
        }
        if (left < 0) {
            res = MSG_DROPPED_TERM_ENDED;
            if (attempt > 0)
                log_warn("sink_http", epn,
                         "sink '%s': term %llu ended while retrying (%s); %zu message(s) not "
                         "delivered, id '%s'%s",
                         k->name, (unsigned long long)epoch, what, n, msgs[0]->id,
                         n > 1 ? " and following" : "");
            break;
        }
        enum attempt_result r = post_once(k, call, epoch, body, len, hdrs, &status, what, sizeof what);
        if (r == ATTEMPT_ENDED || r == ATTEMPT_CANCELLED) {
            call->attempt_errors++;
            res = r == ATTEMPT_ENDED ? MSG_DROPPED_TERM_ENDED : MSG_DROPPED_SHUTDOWN;
            log_warn("sink_http", epn,
                     "sink '%s': POST %s %s; %zu message(s) not delivered (the receiver may still "
                     "process what was written: X-Baton-Epoch %llu), id '%s'%s",
                     k->name, k->url_shown, what, n, (unsigned long long)epoch, msgs[0]->id,
                     n > 1 ? " and following" : "");
            break;
        }
        if (r == ATTEMPT_OK) {
            res = MSG_DELIVERED;
            if (attempt > 0)
                log_info("sink_http", epn, "sink '%s': delivered id '%s' after %u retries", k->name,
                         msgs[0]->id, attempt);
            break;
        }
        call->attempt_errors++;
        if (call->cancel && atomic_load(call->cancel)) {
            res = MSG_DROPPED_SHUTDOWN;
            break;
        }
        if (r == ATTEMPT_FATAL) {
            log_error("sink_http", epn,
                      "sink '%s': POST %s failed, not retried: %s; dropping %zu message(s), "
                      "id '%s'%s",
                      k->name, k->url_shown, what, n, msgs[0]->id, n > 1 ? " and following" : "");
            break;
        }
        if (attempt >= k->retries) {
            log_error("sink_http", epn,
                      "sink '%s': POST %s failed after %u attempts in %lld ms: %s; dropping "
                      "%zu message(s), id '%s'%s",
                      k->name, k->url_shown, attempt + 1, (long long)(clock_mono_ms() - t0), what, n,
                      msgs[0]->id, n > 1 ? " and following" : "");
            break;
        }
        int64_t delay = backoff_ms(attempt, k->backoff_ms, k->backoff_max_ms);
        curl_off_t retry_after = 0;
        if (status == 429 || status == 503) {
            if (sym_curl_easy_getinfo(k->curl, CURLINFO_RETRY_AFTER, &retry_after) == CURLE_OK &&
                retry_after > 0) {
                int64_t ra = (int64_t)retry_after * 1000;
                if (ra > k->backoff_max_ms) ra = k->backoff_max_ms;
                if (ra > delay) delay = ra;
            }
        }
        log_warn("sink_http", epn, "sink '%s': POST attempt %u failed: %s; retrying in %lld ms",
                 k->name, attempt + 1, what, (long long)delay);
        enum msg_outcome b = backoff_sleep(call, epoch, delay);
        if (b != MSG_DELIVERED) {
            res = b;
            log_warn("sink_http", epn,
                     "sink '%s': %s while retrying (%s); %zu message(s) not delivered, id '%s'%s",
                     k->name, b == MSG_DROPPED_SHUTDOWN ? "shutdown" : "lease term ended", what, n,
                     msgs[0]->id, n > 1 ? " and following" : "");
            break;
        }
        attempt++;
    }
    sym_curl_easy_setopt(k->curl, CURLOPT_HTTPHEADER, NULL);
    sym_curl_slist_free_all(hdrs);
    return res;
}

static void http_send(void *sink, struct message *const *msgs, size_t n, enum msg_outcome *outcome,
                      struct sink_call *call)
{
    struct http_sink *k = sink;
    if (k->batch_max <= 1) {
        for (size_t i = 0; i < n; i++)
            outcome[i] = deliver(k, &msgs[i], 1, msgs[i]->json, msgs[i]->len, call);
    } else {
        for (size_t i = 0; i < n; i += k->batch_max) {
            size_t cnt = n - i < k->batch_max ? n - i : k->batch_max;
            jbuf_reset(&k->body);
            for (size_t j = 0; j < cnt; j++) {
                jbuf_raw(&k->body, msgs[i + j]->json, msgs[i + j]->len);
                jbuf_char(&k->body, '\n');
            }
            enum msg_outcome o = deliver(k, &msgs[i], cnt, k->body.data, k->body.len, call);
            for (size_t j = 0; j < cnt; j++) outcome[i + j] = o;
        }
        /* do not pin a huge batch buffer */
        if (k->body.cap > ((size_t)8 << 20)) {
            jbuf_free(&k->body);
            jbuf_init(&k->body, 4096);
        }
    }
}

static int http_check(void *sink, char *msg, size_t msglen)
{
    struct http_sink *k = sink;
    /* own handle: check() runs on the status thread while send() may be
     * using k->curl on the forwarder thread */
    CURL *c = sym_curl_easy_init();
    if (!c) {
        snprintf(msg, msglen, "sink '%s': curl_easy_init failed", k->name);
        return -1;
    }
    char eb[CURL_ERROR_SIZE] = "";
    sym_curl_easy_setopt(c, CURLOPT_URL, k->url);
    sym_curl_easy_setopt(c, CURLOPT_CONNECT_ONLY, 1L);
    sym_curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    sym_curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, k->connect_timeout_ms);
    sym_curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, k->connect_timeout_ms);
    sym_curl_easy_setopt(c, CURLOPT_ERRORBUFFER, eb);
    sym_curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    CURLcode rc = sym_curl_easy_perform(c);
    sym_curl_easy_cleanup(c);
    if (rc != CURLE_OK) {
        snprintf(msg, msglen, "sink '%s': %s unreachable: %s", k->name, k->url_shown,
                 eb[0] ? eb : sym_curl_easy_strerror(rc));
        return -1;
    }
    return 0;
}

const struct sink_ops sink_http_ops = {
    .type = "http",
    .settings = http_defs,
    .settings_size = sizeof(struct http_settings),
    .validate = http_validate,
    .create = http_create,
    .send = http_send,
    .check = http_check,
    .destroy = http_destroy,
};
