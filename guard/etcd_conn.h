/* Talking to etcd v3 through its JSON gateway (POST /v3/..., keys and values
 * base64, int64 fields as decimal strings) over libcurl (loaded on first use,
 * guard/curl_dl.h), responses parsed with json-c.
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
 * when libcurl cannot be loaded. role names the connection in logs. */
struct etcd_conn *etcd_conn_create(const struct baton_etcd_opts *o, const char *role, char *err,
                                   size_t errlen);
void etcd_conn_destroy(struct etcd_conn *c);

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
/* Moves to the next listed endpoint (a stream failed on the one in use). */
void etcd_conn_rotate(struct etcd_conn *c);
/* A counter that advances whenever a call failed on transport or moved to
 * another endpoint (the locker's generation). */
uint64_t etcd_conn_breaks(struct etcd_conn *c);

/* base64 of len bytes (malloc'ed, NUL terminated) / decode (malloc'ed, NUL
 * terminated, *outlen set; NULL on bad input). */
char *etcd_b64(const void *data, size_t len);
char *etcd_unb64(const char *s, size_t *outlen);
/* An int64 field given as a decimal string (or number); def when absent. */
int64_t etcd_int(json_object *o, const char *field, int64_t def);

#endif
