/* Talking to etcd v3 through its JSON gateway (POST /v3/..., keys and values
 * base64, int64 fields as decimal strings) over libcurl (loaded on first use,
 * base/curl_dl.h), responses parsed with json-c.
 *
 * One struct etcd_conn is one blocking "connection": a curl easy handle
 * (keep-alive) under its own mutex, the endpoint in use, and the auth token.
 * A call that cannot reach the endpoint in use (refused, reset, timed out, a
 * member without quorum answering "etcdserver: ...timeout") moves on to the
 * next listed endpoint within the same call, never taking longer than the
 * command timeout in all. */
#ifndef BATON_ETCD_CONN_H
#define BATON_ETCD_CONN_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "baton/etcd.h"


/* 0, or -1 out of memory (dst then cleared). */
int etcd_opts_copy(struct baton_etcd_opts *dst, const struct baton_etcd_opts *src);
void etcd_opts_clear(struct baton_etcd_opts *o);

#define ETCD_ERR_MAX 256

struct etcd_conn;

/* Never fails for an unreachable cluster (calls report it); NULL with err
 * when libcurl cannot be loaded, or when an endpoint carries user
 * information (http://user:pw@host): etcd's JSON gateway reads Basic
 * credentials as an auth token and answers every request 401, and a
 * password kept in a URL ends up wherever the URL is shown; user and
 * password are the way (err names the endpoint's position, never its text).
 * role names the connection in logs. */
struct etcd_conn *etcd_conn_create(const struct baton_etcd_opts *o, const char *role, char *err,
                                   size_t errlen);
void etcd_conn_destroy(struct etcd_conn *c);
/* True when url's authority ("scheme://authority/...") holds user
 * information ('@' before the first '/', '?' or '#'). */
bool etcd_url_has_userinfo(const char *url);

/* POSTs req (a JSON object, not consumed) to path ("/v3/kv/txn") and parses
 * the answer. Returns 0 with *resp (caller puts it), or -1 with err
 * "etcd <endpoint>: <path>: <reason>". *sent_ms (may be NULL) receives
 * clock_boot_ms() just before the successful attempt was sent. A gRPC error
 * in the answer ({"error": ..., "code": N}) is -1 too, its message in err;
 * *grpc_code (may be NULL) receives the code (0 for transport errors).
 * Re-authenticates once when the token was refused. */
int etcd_call(struct etcd_conn *c, const char *path, json_object *req, json_object **resp,
              int64_t *sent_ms, int *grpc_code, char *err, size_t errlen);
/* etcd_call within an absolute deadline (clock_boot_ms) instead of the
 * command timeout from now: several calls making one operation share it. */
int etcd_call_until(struct etcd_conn *c, int64_t deadline_ms, const char *path, json_object *req,
                    json_object **resp, int64_t *sent_ms, int *grpc_code, char *err,
                    size_t errlen);
/* The endpoint in use (for /status), copied into buf. */
void etcd_conn_endpoint(struct etcd_conn *c, char *buf, size_t len);
/* For a streaming request (watch) on a curl easy handle of the caller's:
 * sets the URL (endpoint in use + path), the body (copied), the TLS options
 * and the headers (*headers: the caller frees them with
 * sym_curl_slist_free_all after the transfer), authenticating first when a
 * user is configured. 0, or -1 with err. */
struct curl_slist;
int etcd_conn_prepare_stream(struct etcd_conn *c, void *easy, const char *path, const char *body,
                             struct curl_slist **headers, char *err, size_t errlen);
/* A transport error in words: curl's own (detail, its error buffer, when
 * not empty) except where curl's words mislead ("Out of memory" for a
 * header line over its limit). */
const char *etcd_transport_reason(int curl_code, const char *detail);
/* Moves to the next listed endpoint (a stream failed on the one in use). */
void etcd_conn_rotate(struct etcd_conn *c);
/* A counter that advances whenever a call failed on transport or moved to
 * another endpoint (the locker's generation). */
uint64_t etcd_conn_breaks(struct etcd_conn *c);

/* base64 of len bytes (malloc'ed, NUL terminated) / decode (malloc'ed, NUL
 * terminated, *outlen set; NULL on bad input). */
char *etcd_b64(const void *data, size_t len);
char *etcd_unb64(const char *s, size_t *outlen);

/* ---- reading answers strictly ------------------------------------------------
 *
 * The server (or whatever answers on its port) is not trusted to send the
 * types etcd sends: every field that decides leadership, an epoch or a wait
 * is read with exact JSON types, and anything else is an error naming the
 * field. The gateway (grpc-gateway) omits fields holding false or zero, so
 * "absent" is a value of its own, never folded into "malformed".
 *
 * The field readers take the object holding the field (NULL reads as
 * absent; another JSON type than an object is malformed) and return: */
enum etcd_field {
    ETCD_FIELD_MALFORMED = -1, /* err: field "<name>": <why> */
    ETCD_FIELD_OK = 0,         /* *out set */
    ETCD_FIELD_ABSENT = 1,     /* *out untouched */
};
/* An int64: a JSON integer, or a string of decimal digits (etcd's gateway
 * sends int64 as strings) with a leading '-' only when allow_negative; no
 * spaces, no '+', within the int64 range. */
enum etcd_field etcd_field_int64(json_object *o, const char *field, bool allow_negative,
                                 int64_t *out, char *err, size_t errlen);
/* A uint64 (member IDs, "leader"): the same without a sign. */
enum etcd_field etcd_field_uint64(json_object *o, const char *field, uint64_t *out, char *err,
                                  size_t errlen);
/* A JSON boolean (never a string or a number). */
enum etcd_field etcd_field_bool(json_object *o, const char *field, bool *out, char *err,
                                size_t errlen);

/* An answer's body (len bytes, not necessarily NUL terminated) as JSON,
 * RFC 8259 strictly (no TRUE, 'x' or 012 as json-c reads by default);
 * bytes after the first value are ignored. NULL when it is not JSON. */
json_object *etcd_answer_parse(const char *buf, size_t len);

/* Whole answers. Each returns 0, or -1 with err saying what is wrong with
 * the answer (the caller adds the server and the operation). */

/* o's field, an int64 that must be > 0 (a revision, an ID): "no <what> in
 * the answer" when absent or 0, "negative <what> -5 in the answer", or the
 * field's error. */
int etcd_answer_positive(json_object *o, const char *field, const char *what, int64_t *out,
                         char *err, size_t errlen);
/* header.revision: > 0 ("no revision in the answer", "negative revision -5
 * in the answer", or the field's error). */
int etcd_answer_revision(json_object *resp, int64_t *rev, char *err, size_t errlen);
/* A transaction's "succeeded": absent is false (the gateway omits false). */
int etcd_answer_succeeded(json_object *resp, bool *ok, char *err, size_t errlen);
/* The first kv of a range answer (a range's or a txn's response_range):
 * *kv borrowed from range, NULL when the key is absent. */
int etcd_answer_first_kv(json_object *range, json_object **kv, char *err, size_t errlen);
/* The longest lease etcd grants (etcd's MaxLeaseTTL), in seconds. */
#define ETCD_MAX_LEASE_TTL_S 9000000000LL
/* A lease ttl field in seconds (o's field), as milliseconds: -1 stays -1
 * (expired or unknown, /v3/lease/timetolive), absent is 0 (the gateway
 * omits 0); below -1 or above ETCD_MAX_LEASE_TTL_S is an error. */
int etcd_answer_ttl_ms(json_object *o, const char *field, int64_t *ttl_ms, char *err,
                       size_t errlen);
/* One message of a watch stream. result: the message is a {"result": ...}
 * (else an {"error": ...}: the stream ends); deletes: DELETE events. */
struct etcd_watch_msg {
    bool result, created, canceled;
    size_t deletes;
};
int etcd_answer_watch(json_object *o, struct etcd_watch_msg *m, char *err, size_t errlen);

/* A stream of JSON objects (a watch's body): bytes in, one callback per
 * complete object. A message of more than max bytes (counted since the last
 * complete object) ends the stream, as an ordinary answer over
 * ETCD_RESPONSE_MAX ends its request. */
#define ETCD_RESPONSE_MAX (4u << 20)
struct etcd_stream;
struct etcd_stream *etcd_stream_create(size_t max);
void etcd_stream_destroy(struct etcd_stream *s);
enum etcd_stream_rc {
    ETCD_STREAM_OK = 0,          /* all of data taken */
    ETCD_STREAM_MALFORMED = -1,  /* not JSON: err says why */
    ETCD_STREAM_TOO_LARGE = -2,  /* a message over max: err says so */
};
/* Feeds n bytes; on_object (o borrowed for the call) runs for every object
 * completed. After an error the stream is unusable. */
enum etcd_stream_rc etcd_stream_feed(struct etcd_stream *s, const char *data, size_t n,
                                     void (*on_object)(json_object *o, void *arg), void *arg,
                                     char *err, size_t errlen);

#endif
