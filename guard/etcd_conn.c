/* etcd v3 JSON gateway client: one curl easy handle per connection, endpoint
 * failover within the command timeout, auth tokens, json-c parsing. */
#include "guard/etcd_conn.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guard/curl_dl.h"
#include "guard/glog.h"
#include "guard/util.h"

#define RESPONSE_MAX (4u << 20) /* baton's answers are tiny; a runaway one is an error */

/* gRPC status codes the gateway reports (google.golang.org/grpc/codes). */
enum {
    GRPC_DEADLINE_EXCEEDED = 4,
    GRPC_UNAVAILABLE = 14,
    GRPC_UNAUTHENTICATED = 16,
};

struct etcd_conn {
    pthread_mutex_t mu;
    struct baton_etcd_opts o;
    char role[16];
    CURL *easy;
    size_t cur; /* endpoint in use */
    char *token; /* auth token, NULL until authenticated */
    atomic_ullong breaks;
    struct ratelimit rl;
    char curl_err[CURL_ERROR_SIZE]; /* curl's detail of a transport error */
    char *buf; /* response body */
    size_t len, cap;
    bool overflow;
};

int etcd_opts_copy(struct baton_etcd_opts *dst, const struct baton_etcd_opts *src)
{
    bool oom = false;
    memset(dst, 0, sizeof *dst);
    dst->endpoints = calloc(src->n_endpoints ? src->n_endpoints : 1, sizeof *dst->endpoints);
    if (!dst->endpoints) return -1;
    dst->n_endpoints = src->n_endpoints;
    for (size_t i = 0; i < src->n_endpoints; i++) dst->endpoints[i] = dup_opt(src->endpoints[i], &oom);
    dst->ca_file = dup_opt(src->ca_file, &oom);
    dst->cert_file = dup_opt(src->cert_file, &oom);
    dst->key_file = dup_opt(src->key_file, &oom);
    dst->user = dup_opt(src->user, &oom);
    dst->password = dup_opt(src->password, &oom);
    dst->connect_timeout_ms = src->connect_timeout_ms > 0 ? src->connect_timeout_ms : 1000;
    dst->command_timeout_ms = src->command_timeout_ms > 0 ? src->command_timeout_ms : 1000;
    if (oom) {
        etcd_opts_clear(dst);
        return -1;
    }
    return 0;
}

void etcd_opts_clear(struct baton_etcd_opts *o)
{
    for (size_t i = 0; i < o->n_endpoints; i++) free(o->endpoints[i]);
    free(o->endpoints);
    free(o->ca_file);
    free(o->cert_file);
    free(o->key_file);
    free(o->user);
    if (o->password) {
        explicit_bzero(o->password, strlen(o->password));
        free(o->password);
    }
    memset(o, 0, sizeof *o);
}

/* ---- base64 and fields ------------------------------------------------------ */

char *etcd_b64(const void *data, size_t len)
{
    char *s = malloc(base64_encoded_len(len) + 1);
    if (!s) return NULL;
    base64_encode(data, len, s);
    s[base64_encoded_len(len)] = '\0';
    return s;
}

static int b64_val(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+' || ch == '-') return 62;
    if (ch == '/' || ch == '_') return 63;
    return -1;
}

char *etcd_unb64(const char *s, size_t *outlen)
{
    size_t n = strlen(s);
    char *out = malloc(n / 4 * 3 + 4);
    if (!out) return NULL;
    size_t o = 0;
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=') break;
        int v = b64_val((unsigned char)s[i]);
        if (v < 0) {
            free(out);
            return NULL;
        }
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (char)((acc >> bits) & 0xff);
        }
    }
    out[o] = '\0';
    if (outlen) *outlen = o;
    return out;
}

int64_t etcd_int(json_object *o, const char *field, int64_t def)
{
    json_object *v;
    if (o == NULL || !json_object_object_get_ex(o, field, &v)) return def;
    if (json_object_is_type(v, json_type_string)) {
        const char *s = json_object_get_string(v);
        char *end;
        long long x = strtoll(s, &end, 10);
        return (end != s && *end == '\0') ? (int64_t)x : def;
    }
    if (json_object_is_type(v, json_type_int)) return json_object_get_int64(v);
    return def;
}

/* ---- connection -------------------------------------------------------------- */

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct etcd_conn *c = arg;
    size_t n = size * nmemb;
    if (c->len + n + 1 > RESPONSE_MAX) {
        c->overflow = true;
        return 0;
    }
    if (c->len + n + 1 > c->cap) {
        size_t cap = c->cap ? c->cap : 1024;
        while (cap < c->len + n + 1) cap *= 2;
        char *nb = realloc(c->buf, cap);
        if (nb == NULL) return 0;
        c->buf = nb;
        c->cap = cap;
    }
    memcpy(c->buf + c->len, ptr, n);
    c->len += n;
    c->buf[c->len] = '\0';
    return n;
}

struct etcd_conn *etcd_conn_create(const struct baton_etcd_opts *o, const char *role, char *err,
                                   size_t errlen)
{
    if (o == NULL || o->n_endpoints == 0) {
        snprintf(err, errlen, "etcd: no endpoints");
        return NULL;
    }
    char lerr[256];
    if (curl_dl_load(lerr, sizeof lerr) != 0) {
        snprintf(err, errlen, "etcd %s: %s", o->endpoints[0], lerr);
        return NULL;
    }
    struct etcd_conn *c = calloc(1, sizeof *c);
    if (!c || etcd_opts_copy(&c->o, o) != 0) {
        free(c);
        snprintf(err, errlen, "etcd %s: out of memory", o->endpoints[0]);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    snprintf(c->role, sizeof c->role, "%s", role ? role : "etcd");
    return c;
}

void etcd_conn_destroy(struct etcd_conn *c)
{
    if (c == NULL) return;
    if (c->easy) sym_curl_easy_cleanup(c->easy);
    free(c->buf);
    if (c->token) {
        explicit_bzero(c->token, strlen(c->token));
        free(c->token);
    }
    etcd_opts_clear(&c->o);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void etcd_conn_endpoint(struct etcd_conn *c, char *buf, size_t len)
{
    pthread_mutex_lock(&c->mu);
    snprintf(buf, len, "%s", c->o.endpoints[c->cur]);
    pthread_mutex_unlock(&c->mu);
}

uint64_t etcd_conn_breaks(struct etcd_conn *c)
{
    return atomic_load(&c->breaks);
}

/* c->mu held. */
static void rotate_locked(struct etcd_conn *c)
{
    atomic_fetch_add(&c->breaks, 1);
    if (c->o.n_endpoints > 1) {
        c->cur = (c->cur + 1) % c->o.n_endpoints;
        /* a simple token is not valid on another member */
        if (c->token) {
            free(c->token);
            c->token = NULL;
        }
    }
    if (c->easy) {
        sym_curl_easy_cleanup(c->easy);
        c->easy = NULL;
    }
}

void etcd_conn_rotate(struct etcd_conn *c)
{
    pthread_mutex_lock(&c->mu);
    rotate_locked(c);
    pthread_mutex_unlock(&c->mu);
}

static void set_tls(struct etcd_conn *c, CURL *e)
{
    if (c->o.ca_file) sym_curl_easy_setopt(e, CURLOPT_CAINFO, c->o.ca_file);
    if (c->o.cert_file) sym_curl_easy_setopt(e, CURLOPT_SSLCERT, c->o.cert_file);
    if (c->o.key_file) sym_curl_easy_setopt(e, CURLOPT_SSLKEY, c->o.key_file);
}

static struct curl_slist *make_headers(struct etcd_conn *c, bool with_token)
{
    struct curl_slist *h = sym_curl_slist_append(NULL, "Content-Type: application/json");
    h = sym_curl_slist_append(h, "Expect:");
    if (with_token && c->token) {
        char *line = malloc(strlen(c->token) + 32);
        if (line) { /* out of memory: sent without, answered "unauthenticated" */
            sprintf(line, "Authorization: %s", c->token);
            h = sym_curl_slist_append(h, line);
            explicit_bzero(line, strlen(line));
            free(line);
        }
    }
    return h;
}

enum post_rc { POST_OK, POST_TRANSPORT, POST_GRPC };

/* One POST to the endpoint in use, body, until deadline (c->mu held). On
 * POST_OK *resp is the parsed object; on POST_GRPC err holds the server's
 * message and *code its gRPC code; on POST_TRANSPORT err the reason. */
static enum post_rc post_once(struct etcd_conn *c, const char *path, const char *body,
                              bool with_token, int64_t deadline_ms, int64_t *sent_ms,
                              json_object **resp, int *code, char *err, size_t errlen)
{
    const char *ep = c->o.endpoints[c->cur];
    *resp = NULL;
    *code = 0;
    int64_t left = deadline_ms - clock_boot_ms();
    /* with other endpoints to try, a member that hangs (stopped, cut off)
     * gets half of what is left, so the call can still succeed elsewhere */
    if (c->o.n_endpoints > 1 && left > 20) left /= 2;
    if (left <= 0) {
        snprintf(err, errlen, "etcd %s: %s: command timeout", ep, path);
        return POST_TRANSPORT;
    }
    if (c->easy == NULL) {
        c->easy = sym_curl_easy_init();
        if (c->easy == NULL) {
            snprintf(err, errlen, "etcd %s: %s: curl_easy_init failed", ep, path);
            return POST_TRANSPORT;
        }
    }
    CURL *e = c->easy;
    char url[512];
    snprintf(url, sizeof url, "%s%s", ep, path);
    struct curl_slist *h = make_headers(c, with_token);
    sym_curl_easy_setopt(e, CURLOPT_URL, url);
    sym_curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    sym_curl_easy_setopt(e, CURLOPT_POST, 1L);
    sym_curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    sym_curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    sym_curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    sym_curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    sym_curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    sym_curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)left);
    int64_t ct = c->o.connect_timeout_ms < left ? c->o.connect_timeout_ms : left;
    sym_curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)ct);
    set_tls(c, e);
    c->curl_err[0] = '\0';
    sym_curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->curl_err);
    c->len = 0;
    c->overflow = false;
    if (c->buf) c->buf[0] = '\0';
    if (sent_ms) *sent_ms = clock_boot_ms();
    CURLcode cc = sym_curl_easy_perform(e);
    sym_curl_easy_setopt(e, CURLOPT_HTTPHEADER, NULL);
    sym_curl_slist_free_all(h);
    if (cc != CURLE_OK) {
        snprintf(err, errlen, "etcd %s: %s: %s", ep, path,
                 c->overflow      ? "answer too large"
                 : c->curl_err[0] ? c->curl_err
                                  : sym_curl_easy_strerror(cc));
        return POST_TRANSPORT;
    }
    long status = 0;
    sym_curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    json_object *o = c->len ? json_tokener_parse(c->buf) : NULL;
    if (o == NULL || !json_object_is_type(o, json_type_object)) {
        snprintf(err, errlen, "etcd %s: %s: HTTP %ld, not a JSON object: %.80s", ep, path, status,
                 c->buf ? c->buf : "");
        if (o) json_object_put(o);
        /* a proxy or a non-etcd server: try the next endpoint */
        return POST_TRANSPORT;
    }
    json_object *msg;
    if (status != 200 || json_object_object_get_ex(o, "error", &msg)) {
        *code = (int)etcd_int(o, "code", 0);
        const char *m = json_object_object_get_ex(o, "message", &msg) ? json_object_get_string(msg)
                        : json_object_object_get_ex(o, "error", &msg) ? json_object_get_string(msg)
                                                                       : "error";
        snprintf(err, errlen, "etcd %s: %s: %s (HTTP %ld, code %d)", ep, path, m, status, *code);
        json_object_put(o);
        return POST_GRPC;
    }
    *resp = o;
    return POST_OK;
}

/* Authenticates on the endpoint in use (c->mu held). 0 or -1 with err. */
static int authenticate(struct etcd_conn *c, int64_t deadline_ms, char *err, size_t errlen)
{
    json_object *req = json_object_new_object();
    json_object_object_add(req, "name", json_object_new_string(c->o.user));
    json_object_object_add(req, "password", json_object_new_string(c->o.password ? c->o.password : ""));
    const char *body = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
    json_object *resp = NULL;
    int code = 0;
    enum post_rc rc = post_once(c, "/v3/auth/authenticate", body, false, deadline_ms, NULL, &resp,
                                &code, err, errlen);
    /* the password is in the body: wipe it */
    char *b = (char *)json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
    explicit_bzero(b, strlen(b));
    json_object_put(req);
    if (rc != POST_OK) return rc == POST_TRANSPORT ? -2 : -1;
    json_object *t;
    if (!json_object_object_get_ex(resp, "token", &t) || !json_object_is_type(t, json_type_string)) {
        snprintf(err, errlen, "etcd %s: authenticate: no token in the answer",
                 c->o.endpoints[c->cur]);
        json_object_put(resp);
        return -1;
    }
    free(c->token);
    c->token = strdup(json_object_get_string(t));
    json_object_put(resp);
    if (!c->token) {
        snprintf(err, errlen, "etcd %s: authenticate: out of memory", c->o.endpoints[c->cur]);
        return -1;
    }
    return 0;
}

/* Errors that say "this member cannot serve now": try another. */
static bool member_unavailable(int code, const char *err)
{
    return code == GRPC_UNAVAILABLE || code == GRPC_DEADLINE_EXCEEDED ||
           strstr(err, "no leader") != NULL || strstr(err, "leader changed") != NULL ||
           strstr(err, "timed out") != NULL;
}

int etcd_call_until(struct etcd_conn *c, int64_t deadline_ms, const char *path, json_object *req,
                    json_object **resp, int64_t *sent_ms, int *grpc_code, char *err,
                    size_t errlen)
{
    *resp = NULL;
    if (grpc_code) *grpc_code = 0;
    const char *body = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
    pthread_mutex_lock(&c->mu);
    int rc = -1;
    bool reauthed = false;
    size_t tried = 0;
    err[0] = '\0';
    while (tried < c->o.n_endpoints && clock_boot_ms() < deadline_ms) {
        if (c->o.user && c->token == NULL) {
            int a = authenticate(c, deadline_ms, err, errlen);
            if (a == -2) { /* transport: next endpoint */
                rotate_locked(c);
                tried++;
                continue;
            }
            if (a != 0) break; /* refused: a configuration error, same everywhere */
        }
        int code = 0;
        enum post_rc pr = post_once(c, path, body, true, deadline_ms, sent_ms, resp, &code, err,
                                    errlen);
        if (pr == POST_OK) {
            rc = 0;
            break;
        }
        if (grpc_code) *grpc_code = code;
        if (pr == POST_GRPC && code == GRPC_UNAUTHENTICATED && c->o.user && !reauthed) {
            free(c->token); /* expired or revoked: once more with a fresh one */
            c->token = NULL;
            reauthed = true;
            continue;
        }
        if (pr == POST_GRPC && !member_unavailable(code, err)) break; /* the answer */
        rotate_locked(c);
        tried++;
    }
    if (rc != 0 && err[0] == '\0')
        snprintf(err, errlen, "etcd %s: %s: command timeout", c->o.endpoints[c->cur], path);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int etcd_call(struct etcd_conn *c, const char *path, json_object *req, json_object **resp,
              int64_t *sent_ms, int *grpc_code, char *err, size_t errlen)
{
    return etcd_call_until(c, clock_boot_ms() + c->o.command_timeout_ms, path, req, resp, sent_ms,
                           grpc_code, err, errlen);
}

int etcd_conn_prepare_stream(struct etcd_conn *c, void *easy, const char *path, const char *body,
                             struct curl_slist **headers, char *err, size_t errlen)
{
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    if (c->o.user && c->token == NULL) {
        rc = authenticate(c, clock_boot_ms() + c->o.command_timeout_ms, err, errlen);
        if (rc == -2) rotate_locked(c);
    }
    if (rc == 0) {
        CURL *e = easy;
        char url[512];
        snprintf(url, sizeof url, "%s%s", c->o.endpoints[c->cur], path);
        *headers = make_headers(c, true);
        sym_curl_easy_setopt(e, CURLOPT_URL, url);
        sym_curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        sym_curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, body);
        sym_curl_easy_setopt(e, CURLOPT_HTTPHEADER, *headers);
        sym_curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)c->o.connect_timeout_ms);
        set_tls(c, e);
    }
    pthread_mutex_unlock(&c->mu);
    return rc == 0 ? 0 : -1;
}
