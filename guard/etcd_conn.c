/* etcd v3 JSON gateway client: one curl easy handle per connection, endpoint
 * failover within the command timeout, auth tokens, json-c parsing. */
#include "guard/etcd_conn.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/curl_dl.h"
#include "base/glog.h"
#include "base/util.h"

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

/* ---- strict readers -------------------------------------------------------------- */

/* The field's JSON text, escaped (control characters and quotes cannot
 * reach a log line raw) and cut for a message. */
static const char *shown(json_object *v)
{
    const char *t = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
    return t ? t : "?";
}

/* The field v of o: OK, ABSENT (o NULL or no such field), MALFORMED (o is
 * not an object). */
static enum etcd_field field_of(json_object *o, const char *field, json_object **v, char *err,
                                size_t errlen)
{
    *v = NULL;
    if (o == NULL) return ETCD_FIELD_ABSENT;
    if (!json_object_is_type(o, json_type_object)) {
        snprintf(err, errlen, "field \"%s\": its parent is %s, not an object", field,
                 json_type_to_name(json_object_get_type(o)));
        return ETCD_FIELD_MALFORMED;
    }
    if (!json_object_object_get_ex(o, field, v)) return ETCD_FIELD_ABSENT;
    if (*v == NULL) { /* the gateway omits a field, it never sends null */
        snprintf(err, errlen, "field \"%s\": null", field);
        return ETCD_FIELD_MALFORMED;
    }
    return ETCD_FIELD_OK;
}

/* Decimal digits only (the caller has taken the sign), into *mag; false on
 * anything else or beyond UINT64_MAX. */
static bool digits_u64(const char *s, uint64_t *mag, bool *overflow)
{
    *overflow = false;
    if (*s == '\0') return false;
    uint64_t x = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        if (__builtin_mul_overflow(x, 10u, &x) || __builtin_add_overflow(x, (uint64_t)(*s - '0'), &x))
            *overflow = true;
    }
    *mag = x;
    return true;
}

/* An integer field as a sign and a magnitude: OK, or MALFORMED with err. */
static enum etcd_field read_integer(json_object *v, const char *field, bool allow_negative,
                                    bool *neg, uint64_t *mag, char *err, size_t errlen)
{
    *neg = false;
    if (json_object_is_type(v, json_type_int)) {
        /* json-c clamps an out-of-range number to the nearest limit: a limit
         * itself cannot be told from an overflow, and etcd sends neither */
        int64_t x = json_object_get_int64(v);
        uint64_t u = json_object_get_uint64(v);
        if (x == INT64_MIN || u == UINT64_MAX) {
            snprintf(err, errlen, "field \"%s\": %.40s is out of range", field, shown(v));
            return ETCD_FIELD_MALFORMED;
        }
        if (x < 0) {
            *neg = true;
            *mag = (uint64_t)(-(x + 1)) + 1;
        } else {
            *mag = x == INT64_MAX ? u : (uint64_t)x;
        }
    } else if (json_object_is_type(v, json_type_string)) {
        const char *s = json_object_get_string(v);
        if (*s == '-') {
            *neg = true;
            s++;
        }
        bool overflow = false;
        if (!digits_u64(s, mag, &overflow)) {
            snprintf(err, errlen, "field \"%s\": %.40s is not a decimal integer", field, shown(v));
            return ETCD_FIELD_MALFORMED;
        }
        if (overflow) {
            snprintf(err, errlen, "field \"%s\": %.40s is out of range", field, shown(v));
            return ETCD_FIELD_MALFORMED;
        }
    } else {
        snprintf(err, errlen, "field \"%s\": %s %.40s, not an integer", field,
                 json_type_to_name(json_object_get_type(v)), shown(v));
        return ETCD_FIELD_MALFORMED;
    }
    if (*neg && !allow_negative && *mag != 0) {
        snprintf(err, errlen, "field \"%s\": %.40s is negative", field, shown(v));
        return ETCD_FIELD_MALFORMED;
    }
    if (*neg && !allow_negative) { /* "-0" */
        snprintf(err, errlen, "field \"%s\": %.40s has a sign", field, shown(v));
        return ETCD_FIELD_MALFORMED;
    }
    return ETCD_FIELD_OK;
}

enum etcd_field etcd_field_int64(json_object *o, const char *field, bool allow_negative,
                                 int64_t *out, char *err, size_t errlen)
{
    json_object *v;
    enum etcd_field f = field_of(o, field, &v, err, errlen);
    if (f != ETCD_FIELD_OK) return f;
    bool neg;
    uint64_t mag;
    if (read_integer(v, field, allow_negative, &neg, &mag, err, errlen) != ETCD_FIELD_OK)
        return ETCD_FIELD_MALFORMED;
    if (neg ? mag > (uint64_t)INT64_MAX + 1 : mag > (uint64_t)INT64_MAX) {
        snprintf(err, errlen, "field \"%s\": %.40s is out of the int64 range", field, shown(v));
        return ETCD_FIELD_MALFORMED;
    }
    *out = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
    return ETCD_FIELD_OK;
}

enum etcd_field etcd_field_uint64(json_object *o, const char *field, uint64_t *out, char *err,
                                  size_t errlen)
{
    json_object *v;
    enum etcd_field f = field_of(o, field, &v, err, errlen);
    if (f != ETCD_FIELD_OK) return f;
    bool neg;
    uint64_t mag;
    if (read_integer(v, field, false, &neg, &mag, err, errlen) != ETCD_FIELD_OK)
        return ETCD_FIELD_MALFORMED;
    *out = mag;
    return ETCD_FIELD_OK;
}

enum etcd_field etcd_field_bool(json_object *o, const char *field, bool *out, char *err,
                                size_t errlen)
{
    json_object *v;
    enum etcd_field f = field_of(o, field, &v, err, errlen);
    if (f != ETCD_FIELD_OK) return f;
    if (!json_object_is_type(v, json_type_boolean)) {
        snprintf(err, errlen, "field \"%s\": %s %.40s, not a JSON boolean", field,
                 json_type_to_name(json_object_get_type(v)), shown(v));
        return ETCD_FIELD_MALFORMED;
    }
    *out = json_object_get_boolean(v);
    return ETCD_FIELD_OK;
}

/* ---- whole answers ------------------------------------------------------------------ */

/* RFC 8259 only (json-c otherwise reads TRUE, 'x' and 012); what follows
 * the first value is left alone, as a stream's next message is. */
static int strict_flags(void)
{
#ifdef JSON_TOKENER_ALLOW_TRAILING_CHARS
    return JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS;
#else
    return 0; /* json-c before 0.15: strict mode would refuse the next message */
#endif
}

json_object *etcd_answer_parse(const char *buf, size_t len)
{
    if (buf == NULL || len == 0 || len > ETCD_RESPONSE_MAX) return NULL;
    json_tokener *tok = json_tokener_new();
    if (tok == NULL) return NULL;
    json_tokener_set_flags(tok, strict_flags());
    json_object *o = json_tokener_parse_ex(tok, buf, (int)len);
    if (o == NULL && json_tokener_get_error(tok) == json_tokener_continue)
        o = json_tokener_parse_ex(tok, "", 1); /* a number at the very end */
    json_tokener_free(tok);
    return o;
}

int etcd_answer_positive(json_object *o, const char *field, const char *what, int64_t *out,
                         char *err, size_t errlen)
{
    int64_t r = 0;
    enum etcd_field f = etcd_field_int64(o, field, true, &r, err, errlen);
    if (f == ETCD_FIELD_MALFORMED) return -1;
    if (f == ETCD_FIELD_ABSENT || r == 0) {
        snprintf(err, errlen, "no %s in the answer", what);
        return -1;
    }
    if (r < 0) {
        snprintf(err, errlen, "negative %s %lld in the answer", what, (long long)r);
        return -1;
    }
    *out = r;
    return 0;
}

int etcd_answer_revision(json_object *resp, int64_t *rev, char *err, size_t errlen)
{
    json_object *hdr;
    if (field_of(resp, "header", &hdr, err, errlen) == ETCD_FIELD_MALFORMED) return -1;
    return etcd_answer_positive(hdr, "revision", "revision", rev, err, errlen);
}

int etcd_answer_succeeded(json_object *resp, bool *ok, char *err, size_t errlen)
{
    bool b = false;
    if (etcd_field_bool(resp, "succeeded", &b, err, errlen) == ETCD_FIELD_MALFORMED) return -1;
    *ok = b;
    return 0;
}

int etcd_answer_first_kv(json_object *range, json_object **kv, char *err, size_t errlen)
{
    *kv = NULL;
    json_object *kvs;
    if (field_of(range, "kvs", &kvs, err, errlen) == ETCD_FIELD_MALFORMED) return -1;
    if (kvs == NULL) return 0;
    if (!json_object_is_type(kvs, json_type_array)) {
        snprintf(err, errlen, "field \"kvs\": %s, not an array",
                 json_type_to_name(json_object_get_type(kvs)));
        return -1;
    }
    if (json_object_array_length(kvs) == 0) return 0;
    json_object *k = json_object_array_get_idx(kvs, 0);
    if (k == NULL || !json_object_is_type(k, json_type_object)) {
        snprintf(err, errlen, "field \"kvs\": its first entry is not an object");
        return -1;
    }
    *kv = k;
    return 0;
}

int etcd_answer_ttl_ms(json_object *o, const char *field, int64_t *ttl_ms, char *err,
                       size_t errlen)
{
    int64_t t = 0;
    if (etcd_field_int64(o, field, true, &t, err, errlen) == ETCD_FIELD_MALFORMED) return -1;
    if (t < -1 || t > ETCD_MAX_LEASE_TTL_S) {
        snprintf(err, errlen, "field \"%s\": %lld s is outside what etcd grants (-1 to %lld s)",
                 field, (long long)t, ETCD_MAX_LEASE_TTL_S);
        return -1;
    }
    int64_t ms;
    if (t == -1) {
        ms = -1;
    } else if (__builtin_mul_overflow(t, (int64_t)1000, &ms)) { /* cannot happen below the max */
        snprintf(err, errlen, "field \"%s\": %lld s overflows in milliseconds", field, (long long)t);
        return -1;
    }
    *ttl_ms = ms;
    return 0;
}

int etcd_answer_watch(json_object *o, struct etcd_watch_msg *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    if (o == NULL || !json_object_is_type(o, json_type_object)) {
        snprintf(err, errlen, "a watch message that is not a JSON object");
        return -1;
    }
    json_object *res;
    if (field_of(o, "result", &res, err, errlen) != ETCD_FIELD_OK) return 0; /* {"error": ...} */
    if (!json_object_is_type(res, json_type_object)) {
        snprintf(err, errlen, "field \"result\": %s, not an object",
                 json_type_to_name(json_object_get_type(res)));
        return -1;
    }
    m->result = true;
    if (etcd_field_bool(res, "created", &m->created, err, errlen) == ETCD_FIELD_MALFORMED ||
        etcd_field_bool(res, "canceled", &m->canceled, err, errlen) == ETCD_FIELD_MALFORMED)
        return -1;
    json_object *evs;
    if (field_of(res, "events", &evs, err, errlen) != ETCD_FIELD_OK) return 0;
    if (!json_object_is_type(evs, json_type_array)) {
        snprintf(err, errlen, "field \"events\": %s, not an array",
                 json_type_to_name(json_object_get_type(evs)));
        return -1;
    }
    for (size_t i = 0; i < json_object_array_length(evs); i++) {
        json_object *ev = json_object_array_get_idx(evs, i), *type;
        /* PUT is the enum's zero: the gateway omits it */
        enum etcd_field f = field_of(ev, "type", &type, err, errlen);
        if (f == ETCD_FIELD_MALFORMED) return -1;
        if (f == ETCD_FIELD_ABSENT) continue;
        if (!json_object_is_type(type, json_type_string)) {
            snprintf(err, errlen, "field \"type\": %s %.40s, not a string",
                     json_type_to_name(json_object_get_type(type)), shown(type));
            return -1;
        }
        if (strcmp(json_object_get_string(type), "DELETE") == 0) m->deletes++;
    }
    return 0;
}

/* ---- streams ------------------------------------------------------------------------ */

struct etcd_stream {
    json_tokener *tok;
    size_t max;
    size_t pending; /* bytes fed since the last complete object */
};

struct etcd_stream *etcd_stream_create(size_t max)
{
    struct etcd_stream *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    s->tok = json_tokener_new();
    if (s->tok == NULL) {
        free(s);
        return NULL;
    }
    json_tokener_set_flags(s->tok, strict_flags());
    s->max = max;
    return s;
}

void etcd_stream_destroy(struct etcd_stream *s)
{
    if (s == NULL) return;
    json_tokener_free(s->tok);
    free(s);
}

static bool blank(char ch)
{
    return ch == '\n' || ch == '\r' || ch == ' ' || ch == '\t';
}

enum etcd_stream_rc etcd_stream_feed(struct etcd_stream *s, const char *data, size_t n,
                                     void (*on_object)(json_object *o, void *arg), void *arg,
                                     char *err, size_t errlen)
{
    size_t off = 0;
    /* blanks between messages are not part of one */
    while (off < n && s->pending == 0 && blank(data[off])) off++;
    while (off < n) {
        /* never more than the cap allows (and within an int) at once */
        size_t room = s->max - s->pending + 1, len = n - off;
        if (len > room) len = room;
        if (len > (1u << 30)) len = 1u << 30;
        json_object *o = json_tokener_parse_ex(s->tok, data + off, (int)len);
        enum json_tokener_error je = json_tokener_get_error(s->tok);
        if (o == NULL) {
            if (je != json_tokener_continue) {
                snprintf(err, errlen, "malformed stream (%s)", json_tokener_error_desc(je));
                return ETCD_STREAM_MALFORMED;
            }
            s->pending += len;
            if (s->pending > s->max) {
                snprintf(err, errlen, "a message of more than %zu bytes", s->max);
                return ETCD_STREAM_TOO_LARGE;
            }
            off += len;
            continue;
        }
        size_t used = json_tokener_get_parse_end(s->tok);
        json_tokener_reset(s->tok);
        s->pending = 0;
        on_object(o, arg);
        json_object_put(o);
        if (used == 0) used = 1; /* never loops in place */
        off += used;
        while (off < n && blank(data[off])) off++;
    }
    return ETCD_STREAM_OK;
}

/* ---- connection -------------------------------------------------------------- */

const char *etcd_transport_reason(int curl_code, const char *detail)
{
    /* curl reports a header line over its 100 KiB limit as "Out of memory" */
    if (curl_code == CURLE_OUT_OF_MEMORY) return "answer header line too long or malformed";
    if (curl_code == CURLE_WEIRD_SERVER_REPLY)
        return detail && detail[0] ? detail : "malformed answer (not HTTP)";
    return detail && detail[0] ? detail : sym_curl_easy_strerror((CURLcode)curl_code);
}

/* baton's answers are tiny; a runaway one (over ETCD_RESPONSE_MAX) is an error */
static size_t on_body(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct etcd_conn *c = arg;
    size_t n = size * nmemb;
    if (c->len + n + 1 > ETCD_RESPONSE_MAX) {
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
    for (size_t i = 0; i < o->n_endpoints; i++) {
        if (o->endpoints[i] && etcd_url_has_userinfo(o->endpoints[i])) {
            snprintf(err, errlen,
                     "etcd: endpoint %zu of %zu has user information in its URL (user:password@): "
                     "etcd answers such requests 401; give user and password instead",
                     i + 1, o->n_endpoints);
            return NULL;
        }
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

bool etcd_url_has_userinfo(const char *url)
{
    const char *p = url ? strstr(url, "://") : NULL;
    if (p == NULL) return false;
    size_t auth = strcspn(p + 3, "/?#");
    return memchr(p + 3, '@', auth) != NULL;
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
                 c->overflow ? "answer too large" : etcd_transport_reason(cc, c->curl_err));
        return POST_TRANSPORT;
    }
    long status = 0;
    sym_curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    json_object *o = etcd_answer_parse(c->buf, c->len);
    if (o == NULL || !json_object_is_type(o, json_type_object)) {
        snprintf(err, errlen, "etcd %s: %s: HTTP %ld, not a JSON object: %.80s", ep, path, status,
                 c->buf ? c->buf : "");
        if (o) json_object_put(o);
        /* a proxy or a non-etcd server: try the next endpoint */
        return POST_TRANSPORT;
    }
    json_object *msg;
    if (status != 200 || json_object_object_get_ex(o, "error", &msg)) {
        /* a code that is not an int32 is no code: the answer fails anyway */
        int64_t gc = 0;
        char cerr[128];
        if (etcd_field_int64(o, "code", false, &gc, cerr, sizeof cerr) != ETCD_FIELD_OK ||
            gc > INT32_MAX)
            gc = 0;
        *code = (int)gc;
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
