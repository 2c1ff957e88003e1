/* http sink (libcurl): POST each envelope (or an NDJSON batch) to a URL over
 * a kept-alive connection. What an answer means (docs/receiver.md):
 *   2xx                delivered
 *   408, 425, 429, 5xx, connect errors, timeouts
 *                      retried with exponential back-off and jitter, for as
 *                      long as this replica leads the messages' term
 *                      (retries = "while_leading", the default) or at most
 *                      `retries` times; a 429 or 503 with Retry-After
 *                      (seconds or an HTTP date) pauses every request of the
 *                      sink that long instead, still bounded by the term
 *   409                fenced: the receiver saw a newer epoch; the term ends
 *                      at once (sink_call.fenced), never retried
 *   other 4xx, 3xx     rejected, not retried
 * A message given up on carries the status and the answer's first 512 bytes
 * (message.failure) to the endpoint's dead-letter sink, if it has one.
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
#include <stdatomic.h>
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
#include "src/aimd.h"
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
    int64_t max_in_flight; /* 0 = "auto" */
    int64_t max_in_flight_limit;
};

static const struct setting_def http_defs[] = {
    {"url", SETTING_STRING, offsetof(struct http_settings, url), .required = true,
     .help = "http:// or https:// URL to POST to"},
    {"timeout_ms", SETTING_INT, offsetof(struct http_settings, timeout_ms), .def = "5000",
     .min = 1, .max = 3600000, .help = "whole-request timeout in ms"},
    {"connect_timeout_ms", SETTING_INT, offsetof(struct http_settings, connect_timeout_ms),
     .def = "2000", .min = 1, .max = 600000, .help = "connect timeout in ms"},
    {"retries", SETTING_INT, offsetof(struct http_settings, retries), .def = "while_leading",
     .min = 0, .max = 1000000, .word = "while_leading", .word_value = -1,
     .help = "\"while_leading\": retry a retryable failure for as long as this replica leads "
             "the message's lease term; or how many retries after the first attempt"},
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
    {"max_in_flight", SETTING_INT, offsetof(struct http_settings, max_in_flight), .def = "auto",
     .min = 1, .max = 1024, .word = "auto",
     .help = "requests in flight together (1 to 1024), or \"auto\": adapted to the receiver "
             "(AIMD), up to max_in_flight_limit"},
    {"max_in_flight_limit", SETTING_INT, offsetof(struct http_settings, max_in_flight_limit),
     .def = "64", .min = 1, .max = 1024, .help = "the most requests \"auto\" puts in flight"},
    SETTINGS_END,
};

/* One request: its messages' headers and body, its curl handle (reused:
 * the connections stay in the multi handle's pool, kept alive), its retry
 * state, and the start of the last answer's body for the logs. */
struct http_req {
    struct http_req *next;   /* k->active, k->done or k->spare */
    struct sink_req *r;
    struct sink_call *call;
    CURL *easy;
    struct curl_slist *hdrs;
    struct jbuf body;        /* NDJSON batch body (batch_max > 1) */
    const char *data;        /* what is posted: body.data or the one envelope */
    size_t len;
    size_t sent;             /* of data, handed to libcurl in this attempt (on_read) */
    uint64_t epoch;
    unsigned attempt;        /* attempts failed so far */
    bool running;            /* added to the multi handle (else waiting to retry) */
    enum msg_outcome stopped; /* MSG_DELIVERED, or why on_prereq refused to send */
    int64_t t0_ms;           /* first attempt */
    int64_t attempt_ms;      /* this attempt's start */
    int64_t retry_at_ms;     /* waiting: when the next attempt may start */
    unsigned load;           /* requests in flight when this attempt started */
    long status;
    char errbuf[CURL_ERROR_SIZE];
    char resp[MESSAGE_FAILURE_BODY_MAX + 1]; /* start of the answer's body */
    size_t resp_len;
    char what[400];          /* the last failure, for the logs */
};

struct http_sink {
    char *name;
    char *endpoint;        /* for log lines; NULL = none */
    char *endpoint_header; /* "X-Baton-Endpoint: <name, encoded>"; NULL = none */
    char *url;       /* what curl gets */
    char *url_shown; /* what logs and messages show: user information masked */
    long timeout_ms, connect_timeout_ms;
    unsigned retries;
    bool retry_while_leading; /* retries = "while_leading" */
    int64_t backoff_ms, backoff_max_ms;
    /* A 429 or 503 with Retry-After: no attempt starts before this (mono
     * ms), whatever its request; the dispatcher's thread only. */
    int64_t pause_until_ms;
    size_t batch_max;
    struct curl_slist *static_headers; /* static + env headers, "Name: value" */
    bool custom_content_type;
    CURLM *multi; /* runs every request, so each can be aborted between poll slices */
    /* Requests: started and not handed back (active, n_active of them, n_running
     * on the multi handle), finished and not handed back (done), and spare
     * ones with their curl handles, for reuse. The dispatcher's thread only. */
    struct http_req *active, *done, *spare;
    size_t n_active, n_running;
    size_t fixed_limit;    /* max_in_flight; 0 = auto */
    size_t limit_max;      /* max_in_flight, or max_in_flight_limit (auto) */
    struct aimd aimd;      /* the adaptive limit (auto), and the RTT either way */
    atomic_bool woken;     /* wake() was called: run returns */
    /* What flight() shows (any thread). */
    atomic_size_t shown_in_flight, shown_limit;
    atomic_llong shown_rtt_us;
    struct ratelimit rl_retry; /* "attempt failed, retrying" lines */
    struct ratelimit rl_drop;  /* "dropping" lines */
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
    struct http_req *q = userdata;
    size_t n = size * nmemb;
    size_t room = sizeof q->resp - 1 - q->resp_len;
    size_t take = n < room ? n : room;
    memcpy(q->resp + q->resp_len, ptr, take);
    q->resp_len += take;
    q->resp[q->resp_len] = '\0';
    return n;
}

/* Right before a request is written (libcurl's pre-request callback, after
 * the connection is made or reused): its term is asked once more, so a
 * leader paused between the run loop's check and curl_multi_perform does
 * not send when it resumes (found by test_concurrent_failover: a pass
 * that starts many requests left up to all of them unchecked). What
 * remains is the gap between this check and the write(2) in libcurl. */
/* Whether q may still write: false (q->stopped set) at shutdown or once
 * its term ended. Asked by libcurl's callbacks right before it writes. */
static bool may_write(struct http_req *q)
{
    if (q->call->cancel && atomic_load(q->call->cancel))
        q->stopped = MSG_DROPPED_SHUTDOWN;
    else if (sink_time_left(q->call, q->epoch) < 0)
        q->stopped = MSG_DROPPED_TERM_ENDED;
    return q->stopped == MSG_DELIVERED;
}

static int on_prereq(void *clientp, char *primary_ip, char *local_ip, int primary_port,
                     int local_port)
{
    (void)primary_ip, (void)local_ip, (void)primary_port, (void)local_port;
    return may_write(clientp) ? CURL_PREREQFUNC_OK : CURL_PREREQFUNC_ABORT;
}

/* The body, handed to libcurl when it is about to write it (after the
 * request line and headers went out on their own): the term is asked once
 * more here, so a request whose term ended meanwhile never gets a body and
 * the receiver never sees a whole request. A pause in on_prereq's window,
 * while libcurl builds the headers, is caught here; what remains is the
 * copy between this return and libcurl's write(2). */
static size_t on_read(char *buf, size_t size, size_t nitems, void *userdata)
{
    struct http_req *q = userdata;
    if ((q->sent < q->len || q->len == 0) && !may_write(q)) return CURL_READFUNC_ABORT;
    size_t room = size * nitems;
    size_t n = q->len - q->sent < room ? q->len - q->sent : room;
    memcpy(buf, q->data + q->sent, n);
    q->sent += n;
    return n;
}

/* libcurl rewinds when it sends the request again on a fresh connection (a
 * kept-alive one that the receiver had closed). */
static int on_seek(void *userdata, curl_off_t offset, int origin)
{
    struct http_req *q = userdata;
    if (origin != SEEK_SET || offset < 0 || (size_t)offset > q->len) return CURL_SEEKFUNC_FAIL;
    q->sent = (size_t)offset;
    return CURL_SEEKFUNC_OK;
}

static void req_free(struct http_req *q)
{
    if (q->easy) sym_curl_easy_cleanup(q->easy);
    sym_curl_slist_free_all(q->hdrs);
    jbuf_free(&q->body);
    free(q);
}

static void req_free_list(struct http_req *q)
{
    while (q) {
        struct http_req *next = q->next;
        req_free(q);
        q = next;
    }
}

static void http_destroy(void *sink)
{
    struct http_sink *k = sink;
    if (!k) return;
    for (struct http_req *q = k->active; q; q = q->next)
        if (q->running) sym_curl_multi_remove_handle(k->multi, q->easy);
    req_free_list(k->active);
    req_free_list(k->done);
    req_free_list(k->spare);
    if (k->multi) sym_curl_multi_cleanup(k->multi);
    sym_curl_slist_free_all(k->static_headers);
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

/* The limit in force now: fixed, or what the receiver's answers taught. */
static size_t current_limit(const struct http_sink *k)
{
    return k->fixed_limit ? k->fixed_limit : aimd_limit(&k->aimd);
}

static void publish_flight(struct http_sink *k)
{
    atomic_store_explicit(&k->shown_in_flight, k->n_active, memory_order_relaxed);
    atomic_store_explicit(&k->shown_limit, current_limit(k), memory_order_relaxed);
    atomic_store_explicit(&k->shown_rtt_us, (long long)(aimd_rtt_ms(&k->aimd) * 1000.0),
                          memory_order_relaxed);
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
    k->retry_while_leading = s->retries < 0;
    k->retries = s->retries < 0 ? 0 : (unsigned)s->retries;
    k->backoff_ms = s->backoff_ms;
    k->backoff_max_ms = s->backoff_max_ms;
    k->batch_max = s->batch_max > 0 ? (size_t)s->batch_max : 1;
    k->fixed_limit = (size_t)s->max_in_flight;
    size_t bound = k->fixed_limit ? k->fixed_limit : (size_t)s->max_in_flight_limit;
    k->limit_max = bound;
    aimd_init(&k->aimd, (unsigned)bound);
    publish_flight(k);

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

    k->multi = sym_curl_multi_init();
    if (!k->multi) {
        snprintf(err, errlen, "sink '%s': curl_multi_init failed", k->name);
        http_destroy(k);
        return NULL;
    }
    /* one kept-alive connection per request in flight (HTTP/1.1), or
     * streams on one connection where the receiver speaks HTTP/2 */
    sym_curl_multi_setopt(k->multi, CURLMOPT_MAXCONNECTS, (long)bound);
    sym_curl_multi_setopt(k->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
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

enum attempt_result { ATTEMPT_OK, ATTEMPT_RETRY, ATTEMPT_FATAL, ATTEMPT_FENCED };

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

/* What an answer's status means (docs/receiver.md): 2xx delivered; 408,
 * 425, 429 and 5xx retried; 409 fenced (the receiver saw a newer epoch);
 * any other (4xx, 3xx: redirects are not followed) rejected for good. */
static enum attempt_result status_result(long status)
{
    if (status >= 200 && status < 300) return ATTEMPT_OK;
    if (status == 409) return ATTEMPT_FENCED;
    if (status == 408 || status == 425 || status == 429 || status >= 500) return ATTEMPT_RETRY;
    return ATTEMPT_FATAL;
}

/* ---- one request's life: start, attempts, retries, end ----------------- */

/* A spare request with its curl handle set up, or a new one (NULL when
 * curl cannot make a handle). */
static struct http_req *req_take(struct http_sink *k)
{
    struct http_req *q = k->spare;
    if (q) {
        k->spare = q->next;
    } else {
        q = xcalloc(1, sizeof *q);
        jbuf_init(&q->body, k->batch_max > 1 ? 4096 : 16);
        q->easy = sym_curl_easy_init();
        if (!q->easy) {
            req_free(q);
            return NULL;
        }
        CURL *c = q->easy;
        sym_curl_easy_setopt(c, CURLOPT_URL, k->url);
        sym_curl_easy_setopt(c, CURLOPT_POST, 1L);
        sym_curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        sym_curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, k->timeout_ms);
        sym_curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, k->connect_timeout_ms);
        sym_curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
        sym_curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
        /* answers are short and only their first 256 bytes are kept:
         * libcurl's smallest receive buffer, 1 KiB instead of 16 KiB per
         * request in flight (15 MiB less at 1,024; a long answer costs
         * more reads, nothing else) */
        sym_curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 1024L);
        sym_curl_easy_setopt(c, CURLOPT_ERRORBUFFER, q->errbuf);
        sym_curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        sym_curl_easy_setopt(c, CURLOPT_WRITEDATA, q);
        sym_curl_easy_setopt(c, CURLOPT_PRIVATE, q);
        sym_curl_easy_setopt(c, CURLOPT_PREREQFUNCTION, on_prereq);
        sym_curl_easy_setopt(c, CURLOPT_PREREQDATA, q);
        sym_curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
        sym_curl_easy_setopt(c, CURLOPT_READDATA, q);
        sym_curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, on_seek);
        sym_curl_easy_setopt(c, CURLOPT_SEEKDATA, q);
        /* the body goes through on_read: libcurl's smallest upload buffer */
        sym_curl_easy_setopt(c, CURLOPT_UPLOAD_BUFFERSIZE, 16384L);
        sym_curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
        sym_curl_easy_setopt(c, CURLOPT_USERAGENT, "baton/" BATON_VERSION);
    }
    q->next = NULL;
    return q;
}

/* A finished request goes back to the spare list; a huge batch buffer is
 * not pinned. */
static void req_recycle(struct http_sink *k, struct http_req *q)
{
    sym_curl_easy_setopt(q->easy, CURLOPT_HTTPHEADER, NULL);
    sym_curl_slist_free_all(q->hdrs);
    q->hdrs = NULL;
    if (q->body.cap > ((size_t)8 << 20)) {
        jbuf_free(&q->body);
        jbuf_init(&q->body, 4096);
    }
    q->r = NULL;
    q->next = k->spare;
    k->spare = q;
}

static void unlink_active(struct http_sink *k, struct http_req *q)
{
    for (struct http_req **pp = &k->active; *pp; pp = &(*pp)->next) {
        if (*pp == q) {
            *pp = q->next;
            k->n_active--;
            return;
        }
    }
}

/* Ends q with outcome o: off the multi handle, onto the done list. */
static void req_end(struct http_sink *k, struct http_req *q, enum msg_outcome o)
{
    if (q->running) {
        /* mid-transfer this closes the connection: nothing more goes out */
        sym_curl_multi_remove_handle(k->multi, q->easy);
        q->running = false;
        k->n_running--;
    }
    unlink_active(k, q);
    q->r->outcome = o;
    q->next = k->done;
    k->done = q;
}

static void log_not_delivered(struct http_sink *k, const struct http_req *q, const char *level_what,
                              bool error)
{
    long long suppressed = 0;
    if (!ratelimit_ok(&k->rl_drop, 5000, &suppressed)) return;
    const struct sink_req *r = q->r;
    if (error)
        log_error("sink_http", k->endpoint,
                  "sink '%s': POST %s %s; %zu message(s) not delivered, id '%s'%s (%lld such "
                  "lines suppressed)",
                  k->name, k->url_shown, level_what, r->n, r->msgs[0]->id,
                  r->n > 1 ? " and following" : "", suppressed);
    else
        log_warn("sink_http", k->endpoint,
                 "sink '%s': POST %s %s; %zu message(s) not delivered, id '%s'%s (%lld such lines "
                 "suppressed)",
                 k->name, k->url_shown, level_what, r->n, r->msgs[0]->id,
                 r->n > 1 ? " and following" : "", suppressed);
}

/* Starts the next attempt of q (the term was asked just before). */
static void attempt_start(struct http_sink *k, struct http_req *q, int64_t now)
{
    q->errbuf[0] = '\0';
    q->resp_len = 0;
    q->resp[0] = '\0';
    q->status = 0;
    q->sent = 0;
    q->stopped = MSG_DELIVERED;
    q->attempt_ms = now;
    if (sym_curl_multi_add_handle(k->multi, q->easy) != CURLM_OK) {
        snprintf(q->what, sizeof q->what, "curl_multi_add_handle failed");
        q->r->outcome = MSG_DROPPED_SINK_FAILED;
        q->call->attempt_errors++;
        log_not_delivered(k, q, "failed (curl_multi_add_handle)", true);
        req_end(k, q, MSG_DROPPED_SINK_FAILED);
        return;
    }
    q->running = true;
    k->n_running++;
    q->load = (unsigned)k->n_running;
}

static void http_submit(void *sink, struct sink_req *r, struct sink_call *call)
{
    struct http_sink *k = sink;
    struct http_req *q = req_take(k);
    r->outcome = MSG_DROPPED_SINK_FAILED;
    if (!q) {
        log_error("sink_http", k->endpoint, "sink '%s': curl_easy_init failed; dropping %zu message(s), id '%s'",
                  k->name, r->n, r->msgs[0]->id);
        call->attempt_errors++;
        /* nothing started: handed back through the done list */
        q = xcalloc(1, sizeof *q);
        q->r = r;
        q->next = k->done;
        k->done = q;
        return;
    }
    q->r = r;
    q->call = call;
    q->epoch = r->msgs[0]->epoch;
    q->attempt = 0;
    q->running = false;
    q->what[0] = '\0';
    q->t0_ms = clock_mono_ms();
    q->retry_at_ms = q->t0_ms; /* the first attempt starts at the next run, after the term check */
    q->hdrs = request_headers(k, r->msgs, r->n);
    q->next = k->active;
    k->active = q;
    k->n_active++;
    if (!q->hdrs) {
        log_error("sink_http", k->endpoint, "sink '%s': out of memory building request headers",
                  k->name);
        call->attempt_errors++;
        req_end(k, q, MSG_DROPPED_SINK_FAILED);
        return;
    }
    if (k->batch_max > 1) {
        jbuf_reset(&q->body);
        for (size_t j = 0; j < r->n; j++) {
            jbuf_raw(&q->body, r->msgs[j]->json, r->msgs[j]->len);
            jbuf_char(&q->body, '\n');
        }
        q->data = q->body.data;
        q->len = q->body.len;
    } else {
        q->data = r->msgs[0]->json;
        q->len = r->msgs[0]->len;
    }
    sym_curl_easy_setopt(q->easy, CURLOPT_HTTPHEADER, q->hdrs);
    /* no POSTFIELDS: libcurl would build the body into the first write,
     * past on_read's check (see on_read) */
    sym_curl_easy_setopt(q->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)q->len);
    publish_flight(k);
}

/* What one finished attempt came to; q->what describes a failure. */
static enum attempt_result attempt_result(struct http_req *q, CURLcode rc)
{
    if (rc == CURLE_OUT_OF_MEMORY) {
        /* what libcurl answers to a response header line over its limit
         * (100 KiB) or one it cannot take apart: say what it is */
        bool detail = q->errbuf[0] && strcasecmp(q->errbuf, "out of memory") != 0;
        snprintf(q->what, sizeof q->what, "receiver's answer has a header line too long or malformed "
                 "(curl: out of memory%s%s)", detail ? ": " : "", detail ? q->errbuf : "");
        return ATTEMPT_FATAL;
    }
    if (rc != CURLE_OK) {
        snprintf(q->what, sizeof q->what, "%s", q->errbuf[0] ? q->errbuf : sym_curl_easy_strerror(rc));
        return curl_error_retryable(rc) ? ATTEMPT_RETRY : ATTEMPT_FATAL;
    }
    sym_curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &q->status);
    if (q->status >= 200 && q->status < 300) return ATTEMPT_OK;
    /* the log shows the answer's start printable on one line (the
     * dead-letter record keeps the bytes as they came) */
    char shown[201];
    size_t n = q->resp_len < sizeof shown - 1 ? q->resp_len : sizeof shown - 1;
    for (size_t i = 0; i < n; i++)
        shown[i] = (unsigned char)q->resp[i] < 0x20 ? ' ' : q->resp[i];
    shown[n] = '\0';
    snprintf(q->what, sizeof q->what, "HTTP %ld%s%s", q->status, n ? ": " : "", shown);
    return status_result(q->status);
}

/* The longest Retry-After honoured (a larger one waits this long): the
 * term bounds every wait anyway, this only keeps the arithmetic sane. */
#define RETRY_AFTER_MAX_MS (3600 * 1000LL)

/* The receiver's Retry-After on a 429 or 503 (seconds or an HTTP date:
 * libcurl turns both into seconds), in ms; 0 = none. */
static int64_t retry_after_ms(const struct http_req *q)
{
    curl_off_t ra = 0;
    if ((q->status != 429 && q->status != 503) ||
        sym_curl_easy_getinfo(q->easy, CURLINFO_RETRY_AFTER, &ra) != CURLE_OK || ra <= 0)
        return 0;
    return ra > RETRY_AFTER_MAX_MS / 1000 ? RETRY_AFTER_MAX_MS : (int64_t)ra * 1000;
}

/* What the sink keeps of a request it gives up on, for the dead-letter
 * envelope and the logs: on every message of the request. */
static void record_failure(struct http_req *q, bool rejected)
{
    struct message_failure f = {.rejected = rejected, .status = (int)q->status};
    f.body_len = q->resp_len < sizeof f.body ? q->resp_len : sizeof f.body;
    memcpy(f.body, q->resp, f.body_len);
    for (size_t i = 0; i < q->r->n; i++) message_set_failure(q->r->msgs[i], &f);
}

/* An attempt of q finished with curl's rc: delivered, given up, or waiting
 * to retry. */
static void attempt_done(struct http_sink *k, struct http_req *q, CURLcode rc, int64_t now)
{
    sym_curl_multi_remove_handle(k->multi, q->easy);
    q->running = false;
    k->n_running--;
    if (q->stopped != MSG_DELIVERED) { /* on_prereq: nothing was written */
        q->call->attempt_errors++;
        log_not_delivered(k, q, q->stopped == MSG_DROPPED_SHUTDOWN
                                    ? "not sent: shutdown"
                                    : "not sent: the lease term ended before the request was written",
                          false);
        req_end(k, q, q->stopped);
        return;
    }
    enum attempt_result res = attempt_result(q, rc);
    bool overload = res == ATTEMPT_RETRY; /* timeout, connect error, 5xx, 408, 425, 429 */
    aimd_observe(&k->aimd, now, (double)(now - q->attempt_ms), overload, q->load);
    if (res == ATTEMPT_OK) {
        if (q->attempt > 0)
            log_info("sink_http", k->endpoint, "sink '%s': delivered id '%s' after %u retries",
                     k->name, q->r->msgs[0]->id, q->attempt);
        req_end(k, q, MSG_DELIVERED);
        return;
    }
    q->call->attempt_errors++;
    q->attempt++;
    if (res == ATTEMPT_FENCED) {
        /* The receiver saw a newer epoch: this term is over for it, so it
         * ends here too, at once; never retried (docs/receiver.md). */
        char line[560];
        snprintf(line, sizeof line, "fenced by the receiver (X-Baton-Epoch %llu is older than one "
                 "it saw: %s); ending the term", (unsigned long long)q->epoch, q->what);
        log_not_delivered(k, q, line, true);
        if (q->call->fenced) q->call->fenced(q->call->arg, q->epoch, q->what);
        req_end(k, q, MSG_DROPPED_TERM_ENDED);
        return;
    }
    if (res == ATTEMPT_FATAL) {
        char line[480];
        snprintf(line, sizeof line, "rejected, not retried: %s", q->what);
        log_not_delivered(k, q, line, true);
        record_failure(q, true);
        req_end(k, q, MSG_DROPPED_SINK_FAILED);
        return;
    }
    if (!k->retry_while_leading && q->attempt > k->retries) {
        char line[520];
        snprintf(line, sizeof line, "failed after %u attempts in %lld ms: %s", q->attempt,
                 (long long)(now - q->t0_ms), q->what);
        log_not_delivered(k, q, line, true);
        record_failure(q, false);
        req_end(k, q, MSG_DROPPED_SINK_FAILED);
        return;
    }
    /* Back-off, or the receiver's Retry-After: then no request of this
     * sink starts before it (the receiver asked for a pause, not for this
     * one request to wait). Either way the term bounds the wait
     * (check_terms ends a waiting request whose term ended). */
    int64_t delay = backoff_ms(q->attempt - 1, k->backoff_ms, k->backoff_max_ms);
    int64_t ra = retry_after_ms(q);
    if (ra > 0) {
        delay = ra;
        if (now + ra > k->pause_until_ms) k->pause_until_ms = now + ra;
    }
    q->retry_at_ms = now + delay;
    long long suppressed = 0;
    if (ratelimit_ok(&k->rl_retry, 5000, &suppressed))
        log_warn("sink_http", k->endpoint,
                 "sink '%s': POST attempt %u failed: %s; retrying in %lld ms%s (%lld such lines "
                 "suppressed)",
                 k->name, q->attempt, q->what, (long long)delay,
                 ra > 0 ? " (the receiver's Retry-After)"
                 : k->retry_while_leading ? ", for as long as this replica leads the term" : "",
                 suppressed);
}

/* ---- the run loop ------------------------------------------------------- */

/* The term of every request is asked at most once per pass (one term at a
 * time is the rule; a handover leaves two for a moment). */
struct term_memo {
    uint64_t epoch[4];
    int64_t left[4];
    size_t n;
};

static int64_t term_left(struct term_memo *m, const struct sink_call *call, uint64_t epoch)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->epoch[i] == epoch) return m->left[i];
    int64_t left = sink_time_left(call, epoch);
    if (m->n < 4) {
        m->epoch[m->n] = epoch;
        m->left[m->n] = left;
        m->n++;
    }
    return left;
}

/* Whether the term of every running request still runs, asked again right
 * before curl_multi_perform: a pause inside the pass (SIGSTOP, swap) must
 * not let what it decided write after the term ended. Once a term ended it
 * stays ended, so the next pass aborts what this one found. */
static bool terms_still_live(const struct http_sink *k)
{
    struct term_memo fresh = {.n = 0};
    for (const struct http_req *q = k->active; q; q = q->next)
        if (q->running && term_left(&fresh, q->call, q->epoch) < 0) return false;
    return true;
}

/* Before every curl_multi_perform, the call that writes: a request whose
 * term ended (or at shutdown) is aborted, a waiting one whose time came is
 * started if its term runs with time left. Returns the poll bound: the
 * least time left in a running request's term, and the next retry. */
static int64_t check_terms(struct http_sink *k, int64_t now, int64_t bound)
{
    struct term_memo memo = {.n = 0};
    struct http_req *next;
    for (struct http_req *q = k->active; q; q = next) {
        next = q->next;
        const struct sink_call *call = q->call;
        if (call->cancel && atomic_load(call->cancel)) {
            if (q->running || q->attempt > 0) {
                if (q->running) q->call->attempt_errors++;
                log_not_delivered(k, q, q->running ? "aborted: shutdown" : "not retried: shutdown", false);
            }
            req_end(k, q, MSG_DROPPED_SHUTDOWN);
            continue;
        }
        int64_t left = term_left(&memo, call, q->epoch);
        if (left < 0) {
            if (q->running) {
                /* The term is asked right before every curl_multi_perform: a
                 * leader paused inside the poll (SIGSTOP, swap) must not send
                 * the rest of its request when it resumes after its term
                 * ended (found by test_term_delivery_acked). */
                q->call->attempt_errors++;
                char line[160];
                snprintf(line, sizeof line, "aborted: the lease term ended during the request "
                         "(the receiver may still process what was written: X-Baton-Epoch %llu)",
                         (unsigned long long)q->epoch);
                log_not_delivered(k, q, line, false);
            } else if (q->attempt > 0) {
                char line[480];
                snprintf(line, sizeof line, "term %llu ended while retrying (%s)",
                         (unsigned long long)q->epoch, q->what);
                log_not_delivered(k, q, line, false);
            }
            req_end(k, q, MSG_DROPPED_TERM_ENDED);
            continue;
        }
        if (q->running) {
            if (left > 0 && left < bound) bound = left;
            continue;
        }
        /* waiting: for its first attempt or a retry; a lease being
         * verified (left == 0) sends nothing and asks again shortly */
        if (left == 0) {
            if (bound > 1) bound = 1;
        } else if (now < k->pause_until_ms) { /* Retry-After: nothing starts */
            if (k->pause_until_ms - now < bound) bound = k->pause_until_ms - now;
        } else if (now >= q->retry_at_ms) {
            attempt_start(k, q, now);
            if (q->running && left < bound) bound = left;
        } else if (q->retry_at_ms - now < bound) {
            bound = q->retry_at_ms - now;
        }
    }
    return bound;
}

/* Finished attempts, from curl's messages. */
static void collect(struct http_sink *k, int64_t now)
{
    int left = 0;
    CURLMsg *msg;
    while ((msg = sym_curl_multi_info_read(k->multi, &left))) {
        if (msg->msg != CURLMSG_DONE) continue;
        struct http_req *q = NULL;
        CURLcode rc = msg->data.result;
        sym_curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&q);
        if (q && q->running) attempt_done(k, q, rc, now);
    }
}

static size_t hand_back(struct http_sink *k, struct sink_req **done, size_t max)
{
    size_t n = 0;
    while (k->done && n < max) {
        struct http_req *q = k->done;
        k->done = q->next;
        done[n++] = q->r;
        if (q->easy)
            req_recycle(k, q);
        else
            req_free(q);
    }
    publish_flight(k);
    return n;
}

static size_t http_run(void *sink, int64_t wait_ms, struct sink_req **done, size_t max)
{
    struct http_sink *k = sink;
    int64_t until = clock_mono_ms() + (wait_ms > 0 ? wait_ms : 0);
    for (;;) {
        int64_t now = clock_mono_ms();
        int64_t bound = check_terms(k, now, 20); /* poll slices of at most 20 ms */
        if (k->n_running > 0) {
            if (!terms_still_live(k)) continue; /* ended meanwhile: the next pass aborts */
            int running = 0;
            if (sym_curl_multi_perform(k->multi, &running) == CURLM_OK) collect(k, clock_mono_ms());
        }
        if (k->done) return hand_back(k, done, max);
        now = clock_mono_ms();
        if (atomic_exchange(&k->woken, false) || now >= until || k->n_active == 0) {
            publish_flight(k);
            return 0;
        }
        if (until - now < bound) bound = until - now;
        if (bound < 1) bound = 1;
        sym_curl_multi_poll(k->multi, NULL, 0, (int)bound, NULL);
    }
}

static void http_wake(void *sink)
{
    struct http_sink *k = sink;
    atomic_store(&k->woken, true);
    sym_curl_multi_wakeup(k->multi);
}

static size_t http_limit(void *sink)
{
    return current_limit(sink);
}

static size_t http_limit_max(void *sink)
{
    const struct http_sink *k = sink;
    return k->limit_max;
}

static size_t http_batch_max(void *sink)
{
    const struct http_sink *k = sink;
    return k->batch_max;
}

static void http_flight(void *sink, struct sink_flight *out)
{
    struct http_sink *k = sink;
    out->in_flight = atomic_load_explicit(&k->shown_in_flight, memory_order_relaxed);
    out->limit = atomic_load_explicit(&k->shown_limit, memory_order_relaxed);
    out->rtt_ms = (double)atomic_load_explicit(&k->shown_rtt_us, memory_order_relaxed) / 1000.0;
}

/* One request at a time (ordering = "strict"): the same requests, each run
 * to its end before the next starts. */
static void http_send(void *sink, struct message *const *msgs, size_t n, enum msg_outcome *outcome,
                      struct sink_call *call)
{
    struct http_sink *k = sink;
    for (size_t i = 0; i < n; i += k->batch_max) {
        size_t cnt = n - i < k->batch_max ? n - i : k->batch_max;
        struct sink_req r = {.msgs = (struct message **)&msgs[i], .n = cnt};
        struct sink_req *back = NULL;
        http_submit(k, &r, call);
        while (http_run(k, 20, &back, 1) == 0) {}
        for (size_t j = 0; j < cnt; j++) outcome[i + j] = r.outcome;
    }
}

static int http_check(void *sink, char *msg, size_t msglen)
{
    struct http_sink *k = sink;
    /* own handle: check() runs on the status thread while requests run on
     * the forwarder thread */
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

static const struct sink_async_ops http_async = {
    .limit = http_limit,
    .limit_max = http_limit_max,
    .batch_max = http_batch_max,
    .submit = http_submit,
    .run = http_run,
    .wake = http_wake,
    .flight = http_flight,
};

const struct sink_ops sink_http_ops = {
    .type = "http",
    .settings = http_defs,
    .settings_size = sizeof(struct http_settings),
    .validate = http_validate,
    .create = http_create,
    .send = http_send,
    .async = &http_async,
    .check = http_check,
    .destroy = http_destroy,
};
