/* etcd v3 locker (guard/etcd_conn.h: the JSON gateway over libcurl).
 *
 * Mapping of the locker contract (guard/locker.h):
 *
 * - try_lock: a linearizable range of the key first (a standby polling a
 *   held lease costs one round trip; the holder's lease time-to-live is then
 *   read so it need not look again before that). When absent: grant a lease
 *   of ttl seconds, then one transaction "create_revision(key) == 0 -> put
 *   key = token, <key>:holder = "host pid N" (both with the lease) and
 *   <key>:epoch (no lease)". The epoch is the revision of that transaction:
 *   cluster-wide, strictly increasing, no clock involved. The deadline is
 *   computed from the grant's send time (the lease's life starts there).
 *   Held after all: the lease is revoked. A lost answer: the lease is revoked
 *   (which deletes the key if the put ran), else it expires within ttl.
 * - renew: a keep-alive of the lease (the deadline from its send time), then
 *   a range confirming the key still holds the token; both within one
 *   command timeout.
 * - unlock: transaction "value(key) == token -> delete key, <key>:holder",
 *   then revoke the lease.
 * - release_seq / wait_release: a watch thread keeps one watch stream per
 *   watched key; a DELETE event (a release or the lease's expiry) and every
 *   (re)created stream advance the key's count. Streams are re-created every
 *   WATCH_RECYCLE_MS, so a member that stopped answering cannot keep a
 *   standby deaf for long.
 * - claim: range, then grant (ttl rounded up to seconds) and a create-if-
 *   absent transaction.
 * - fenced_set: transaction "mod_revision(<key>:epoch) == epoch -> put
 *   <key>:<name>" with a lease of the value's ttl (reused for writes within
 *   a quarter of it). <key>:epoch is rewritten only by an acquisition, so it
 *   fences exactly as the Redis backend's epoch key does.
 *
 * Two connections as for Redis: "lease" (try_lock, renew, unlock, check)
 * and "side" (claim, holder, ping, shared state, inspect), so status pages
 * and checkpoints never delay lease traffic; the watch thread has its own
 * curl handles. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "guard/etcd_conn.h"
#include "guard/locker.h"
#include "base/glog.h"
#include "guard/locker_etcd_private.h"
#include "base/util.h"

#define MIN_TTL_MS 2000

/* A lease this process holds on a key (try_lock granted it). */
struct held {
    struct held *next;
    char *key;
    char token[RANDOM_TOKEN_LEN];
    char lease[24]; /* decimal lease ID */
    int64_t ttl_s;  /* its ttl */
    bool stale;     /* from an ended term: revoke before the next try_lock */
};

/* ---- helpers ------------------------------------------------------------------ */

static void errf(char err[BATON_LOCKER_ERR_MAX], const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void errf(char err[BATON_LOCKER_ERR_MAX], const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, BATON_LOCKER_ERR_MAX, fmt, ap);
    va_end(ap);
}

static void add_b64(json_object *o, const char *field, const void *data, size_t len)
{
    char *b = etcd_b64(data, len);
    /* out of memory: a value etcd refuses ("illegal base64"), so the request
     * fails as a backend error instead of comparing or writing another key */
    json_object_object_add(o, field, json_object_new_string(b ? b : "%"));
    free(b);
}

static void add_str64(json_object *o, const char *field, const char *s)
{
    add_b64(o, field, s, strlen(s));
}

json_object *locker_etcd_obj_key(const char *key)
{
    json_object *o = json_object_new_object();
    add_str64(o, "key", key);
    return o;
}

static json_object *get(json_object *o, const char *field)
{
    json_object *v = NULL;
    if (o && json_object_object_get_ex(o, field, &v)) return v;
    return NULL;
}

/* {"request_put": {key, value, [lease]}} */
static json_object *op_put(const char *key, const char *value, size_t vlen, const char *lease)
{
    json_object *p = locker_etcd_obj_key(key);
    add_b64(p, "value", value, vlen);
    if (lease) json_object_object_add(p, "lease", json_object_new_string(lease));
    json_object *op = json_object_new_object();
    json_object_object_add(op, "request_put", p);
    return op;
}

static json_object *op_range(const char *key)
{
    json_object *op = json_object_new_object();
    json_object_object_add(op, "request_range", locker_etcd_obj_key(key));
    return op;
}

static json_object *op_delete(const char *key)
{
    json_object *op = json_object_new_object();
    json_object_object_add(op, "request_delete_range", locker_etcd_obj_key(key));
    return op;
}

/* {"key": k, "target": target, "result": "EQUAL", <field>: value} */
static json_object *cmp(const char *key, const char *target, const char *field, json_object *value)
{
    json_object *c = locker_etcd_obj_key(key);
    json_object_object_add(c, "target", json_object_new_string(target));
    json_object_object_add(c, "result", json_object_new_string("EQUAL"));
    json_object_object_add(c, field, value);
    return c;
}

static json_object *txn(json_object *compare, json_object *success, json_object *failure)
{
    json_object *t = json_object_new_object();
    json_object_object_add(t, "compare", compare ? compare : json_object_new_array());
    json_object_object_add(t, "success", success ? success : json_object_new_array());
    json_object_object_add(t, "failure", failure ? failure : json_object_new_array());
    return t;
}

static json_object *arr1(json_object *a)
{
    json_object *r = json_object_new_array();
    json_object_array_add(r, a);
    return r;
}

/* The response_range of the txn answer's i-th response. */
static json_object *txn_range(json_object *resp, size_t i)
{
    json_object *rs = get(resp, "responses");
    if (rs == NULL || !json_object_is_type(rs, json_type_array) || json_object_array_length(rs) <= i)
        return NULL;
    return get(json_object_array_get_idx(rs, i), "response_range");
}

/* The value of kv decoded into buf (NUL terminated). false when it does not
 * fit or is malformed. */
static bool kv_value(json_object *kv, char *buf, size_t len, size_t *outlen)
{
    json_object *v = get(kv, "value");
    if (v && !json_object_is_type(v, json_type_string)) return false;
    const char *s = v ? json_object_get_string(v) : "";
    size_t n = 0;
    char *d = etcd_unb64(s ? s : "", &n);
    if (d == NULL || n >= len) {
        free(d);
        return false;
    }
    memcpy(buf, d, n + 1);
    free(d);
    if (outlen) *outlen = n;
    return true;
}

/* The locker operation this thread runs, for error messages: a failed
 * request then reads "etcd <endpoint>: <what> <key>: <reason>" (as the Redis
 * backend's do) instead of naming the gateway path. */
static _Thread_local const char *op_what, *op_key;
#define OP(what, key) (op_what = (what), op_key = (key))

/* "etcd <ep>: /v3/...: <reason>" -> "etcd <ep>: <op_what> <op_key>: <reason>" */
static void label_err(char err[BATON_LOCKER_ERR_MAX])
{
    char *p = strstr(err, ": /v3/");
    char *rest = p ? strstr(p + 2, ": ") : NULL;
    if (rest == NULL || op_what == NULL) return;
    char tmp[BATON_LOCKER_ERR_MAX];
    snprintf(tmp, sizeof tmp, "%.*s: %s %.120s%s", (int)(p - err), err, op_what,
             op_key ? op_key : "", rest);
    memcpy(err, tmp, BATON_LOCKER_ERR_MAX);
}

/* An answer that does not say what etcd would: err = "etcd <endpoint>:
 * <what> <key>: <path>: <why>". Returns -1. */
static int bad_answer(struct etcd_conn *conn, const char *path, const char *why,
                      char err[BATON_LOCKER_ERR_MAX])
{
    char ep[256];
    etcd_conn_endpoint(conn, ep, sizeof ep);
    errf(err, "etcd %s: %s%s%.120s: %s: %s", ep, op_what ? op_what : "answer",
         op_key ? " " : "", op_key ? op_key : "", path, why);
    return -1;
}

/* A transaction's "succeeded" (strictly: a JSON boolean, absent false);
 * resp is put. 0, or -1 with err. */
static int txn_succeeded(struct etcd_conn *conn, json_object *resp, bool *ok,
                         char err[BATON_LOCKER_ERR_MAX])
{
    char why[200];
    int rc = etcd_answer_succeeded(resp, ok, why, sizeof why);
    json_object_put(resp);
    return rc == 0 ? 0 : bad_answer(conn, "/v3/kv/txn", why, err);
}

/* One call on conn; req is consumed. */
static int call(struct etcd_conn *conn, int64_t deadline, const char *path, json_object *req,
                json_object **resp, int64_t *sent, char err[BATON_LOCKER_ERR_MAX])
{
    int rc = etcd_call_until(conn, deadline, path, req, resp, sent, NULL, err, BATON_LOCKER_ERR_MAX);
    json_object_put(req);
    if (rc != 0) label_err(err);
    return rc;
}

static int64_t deadline_of(struct etcd_locker *el)
{
    return clock_boot_ms() + el->command_timeout_ms;
}

/* Grants a lease of ttl_s seconds: 0 with id, or -1. */
static int grant(struct etcd_conn *conn, int64_t deadline, int64_t ttl_s,
                 char id[24], int64_t *sent, char err[BATON_LOCKER_ERR_MAX])
{
    json_object *req = json_object_new_object();
    json_object_object_add(req, "TTL", json_object_new_int64(ttl_s));
    json_object *resp;
    if (call(conn, deadline, "/v3/lease/grant", req, &resp, sent, err) != 0) return -1;
    int64_t lid = 0, got = 0;
    char why[200];
    int bad = etcd_answer_positive(resp, "ID", "lease ID", &lid, why, sizeof why);
    if (bad == 0 && etcd_field_int64(resp, "TTL", false, &got, why, sizeof why) == ETCD_FIELD_MALFORMED)
        bad = -1;
    json_object_put(resp);
    if (bad == 0 && got < ttl_s) {
        snprintf(why, sizeof why, "lease of %lld s granted for %lld s asked", (long long)got,
                 (long long)ttl_s);
        bad = -1;
    }
    if (bad != 0) return bad_answer(conn, "/v3/lease/grant", why, err);
    snprintf(id, 24, "%lld", (long long)lid);
    return 0;
}

/* Revokes lease id (deleting the keys attached to it). false when the
 * cluster could not be asked (the lease then expires by itself, or is
 * revoked later); an unknown lease counts as revoked. */
static bool lease_revoke(struct etcd_conn *conn, int64_t deadline, const char *id)
{
    json_object *req = json_object_new_object();
    json_object_object_add(req, "ID", json_object_new_string(id));
    json_object *resp;
    char err[BATON_LOCKER_ERR_MAX];
    if (call(conn, deadline, "/v3/lease/revoke", req, &resp, NULL, err) == 0) {
        json_object_put(resp);
        return true;
    }
    if (strstr(err, "lease not found") != NULL) return true;
    glog_debug("locker", NULL, "%s (the lease expires by itself, or is revoked later)", err);
    return false;
}

/* The remaining milliseconds of lease id in *ttl_ms: -1 when it expired or
 * is unknown, and also when the cluster could not be asked (0 is returned
 * then, the caller goes on without it). -1 with err: the answer is
 * malformed (a TTL that is no integer, or beyond any lease etcd grants). */
static int time_to_live(struct etcd_conn *conn, int64_t deadline, const char *id, int64_t *ttl_ms,
                        char err[BATON_LOCKER_ERR_MAX])
{
    *ttl_ms = -1;
    json_object *req = json_object_new_object();
    json_object_object_add(req, "ID", json_object_new_string(id));
    json_object *resp;
    char cerr[BATON_LOCKER_ERR_MAX];
    if (call(conn, deadline, "/v3/lease/timetolive", req, &resp, NULL, cerr) != 0) return 0;
    char why[200];
    int64_t ms = -1;
    /* absent is 0 s left: the gateway omits 0 */
    int rc = etcd_answer_ttl_ms(resp, "TTL", &ms, why, sizeof why);
    json_object_put(resp);
    if (rc != 0) return bad_answer(conn, "/v3/lease/timetolive", why, err);
    *ttl_ms = ms;
    return 0;
}

/* The lease a kv is attached to, as the decimal ID a request takes: 1 (id
 * set), 0 none, -1 malformed (err). */
static int kv_lease(struct etcd_conn *conn, const char *path, json_object *kv, char id[24],
                    char err[BATON_LOCKER_ERR_MAX])
{
    int64_t lid = 0;
    char why[200];
    enum etcd_field f = etcd_field_int64(kv, "lease", false, &lid, why, sizeof why);
    if (f == ETCD_FIELD_MALFORMED) return bad_answer(conn, path, why, err);
    if (f == ETCD_FIELD_ABSENT || lid == 0) return 0;
    snprintf(id, 24, "%lld", (long long)lid);
    return 1;
}

/* A linearizable range of key: 1 present (*kv_out a new reference when
 * non-NULL), 0 absent, -1 error. */
static int range_key(struct etcd_conn *conn, int64_t deadline, const char *key,
                     json_object **kv_out, char err[BATON_LOCKER_ERR_MAX])
{
    json_object *resp;
    if (call(conn, deadline, "/v3/kv/range", locker_etcd_obj_key(key), &resp, NULL, err) != 0) return -1;
    json_object *kv = NULL;
    char why[200];
    if (etcd_answer_first_kv(resp, &kv, why, sizeof why) != 0) {
        json_object_put(resp);
        return bad_answer(conn, "/v3/kv/range", why, err);
    }
    if (kv && kv_out) *kv_out = json_object_get(kv);
    json_object_put(resp);
    return kv ? 1 : 0;
}

static bool ttl_ok(const char *what, const char *key, int64_t ttl_ms, char err[BATON_LOCKER_ERR_MAX])
{
    if (ttl_ms % 1000 == 0 && ttl_ms >= MIN_TTL_MS) return true;
    errf(err,
         "etcd locker: %s %s: ttl %lld ms: etcd leases are whole seconds of at least %d ms",
         what, key, (long long)ttl_ms, MIN_TTL_MS);
    return false;
}

/* ---- held leases ------------------------------------------------------------------ */

/* Leases granted to this process for a key, with the token put under them.
 * A stale one belongs to a term that ended without its lease being revoked
 * (the unlock's revoke or a lost acquisition's could not reach the
 * cluster, or renew/check found the key lost): try_lock revokes those. */

static void held_add(struct etcd_locker *el, const char *key, const char *token, const char *lease,
                     int64_t ttl_s, bool stale)
{
    struct held *h = calloc(1, sizeof *h);
    if (h) h->key = strdup(key);
    if (!h || !h->key) {
        free(h);
        glog_warn("locker", NULL, "etcd locker: out of memory recording lease %s of %s: it is "
                  "not revoked early, it expires after its ttl (%lld s)", lease, key,
                  (long long)ttl_s);
        return;
    }
    snprintf(h->token, sizeof h->token, "%s", token);
    snprintf(h->lease, sizeof h->lease, "%s", lease);
    h->ttl_s = ttl_s;
    h->stale = stale;
    pthread_mutex_lock(&el->held_mu);
    h->next = el->held;
    el->held = h;
    pthread_mutex_unlock(&el->held_mu);
}

enum held_op { HELD_GET, HELD_FORGET, HELD_STALE };

/* Finds (key, token); copies its lease id and ttl out (when non-NULL), then
 * HELD_FORGET removes it, HELD_STALE marks it stale. */
static bool held_do(struct etcd_locker *el, const char *key, const char *token, enum held_op op,
                    char lease[24], int64_t *ttl_s)
{
    bool found = false;
    pthread_mutex_lock(&el->held_mu);
    for (struct held **p = &el->held; *p; p = &(*p)->next) {
        struct held *h = *p;
        if (strcmp(h->key, key) != 0 || strcmp(h->token, token) != 0) continue;
        found = true;
        if (lease) memcpy(lease, h->lease, 24);
        if (ttl_s) *ttl_s = h->ttl_s;
        if (op == HELD_STALE) h->stale = true;
        if (op == HELD_FORGET) {
            *p = h->next;
            free(h->key);
            free(h);
        }
        break;
    }
    pthread_mutex_unlock(&el->held_mu);
    return found;
}

/* (key, token) now lives under lease (renew with another ttl). */
static void held_move(struct etcd_locker *el, const char *key, const char *token,
                      const char *lease, int64_t ttl_s)
{
    pthread_mutex_lock(&el->held_mu);
    for (struct held *h = el->held; h; h = h->next)
        if (strcmp(h->key, key) == 0 && strcmp(h->token, token) == 0) {
            snprintf(h->lease, sizeof h->lease, "%s", lease);
            h->ttl_s = ttl_s;
        }
    pthread_mutex_unlock(&el->held_mu);
}

/* ---- lease operations ---------------------------------------------------------------- */

/* Revokes the stale leases this process still has on key, before trying
 * again: a lease nobody renews must not block the key for its ttl, nor for
 * the extension etcd gives every lease when a new raft leader takes over
 * (quorum regained). Kept when the revoke fails; never touches a live one. */
static void revoke_stale(struct etcd_locker *el, const char *key)
{
    for (;;) {
        char id[24] = "", token[RANDOM_TOKEN_LEN];
        pthread_mutex_lock(&el->held_mu);
        for (struct held *h = el->held; h; h = h->next)
            if (h->stale && strcmp(h->key, key) == 0) {
                memcpy(id, h->lease, sizeof id);
                memcpy(token, h->token, sizeof token);
                break;
            }
        pthread_mutex_unlock(&el->held_mu);
        if (!id[0]) return;
        if (!lease_revoke(el->lease, deadline_of(el), id)) return;
        glog_info("locker", NULL, "etcd locker: revoked the lease %s this process kept on %s from "
                 "an earlier term", id, key);
        held_do(el, key, token, HELD_FORGET, NULL, NULL);
    }
}

/* Advances whenever a lease-connection call failed on transport or moved to
 * another endpoint: the guard then verifies its lease (never 0). */
static uint64_t etcd_generation(struct baton_locker *l)
{
    return etcd_conn_breaks(((struct etcd_locker *)l)->lease) + 1;
}

static int etcd_try_lock(struct baton_locker *l, const char *key, int64_t ttl_ms, struct baton_lock_grant *out,
                         char err[BATON_LOCKER_ERR_MAX])
{
    OP("lock", key);
    struct etcd_locker *el = (struct etcd_locker *)l;
    memset(out, 0, sizeof *out);
    if (!ttl_ok("lock", key, ttl_ms, err)) return BATON_LOCKER_ERR;
    revoke_stale(el, key);
    int64_t deadline = deadline_of(el);
    json_object *kv = NULL;
    int present = range_key(el->lease, deadline, key, &kv, err);
    if (present < 0) return BATON_LOCKER_ERR;
    if (present == 1) {
        char lid[24];
        int64_t left = -1;
        int has = kv_lease(el->lease, "/v3/kv/range", kv, lid, err);
        json_object_put(kv);
        if (has < 0) return BATON_LOCKER_ERR;
        if (has && time_to_live(el->lease, deadline_of(el), lid, &left, err) != 0)
            return BATON_LOCKER_ERR;
        out->held_pttl_ms = left > 0 ? left : 0;
        return BATON_LOCKER_HELD;
    }
    char token[RANDOM_TOKEN_LEN], id[24];
    if (random_token(token) != 0) {
        errf(err, "etcd locker: lock %s: no random token", key);
        return BATON_LOCKER_ERR;
    }
    uint64_t gen = etcd_generation(&el->base);
    int64_t sent = 0;
    if (grant(el->lease, deadline_of(el), ttl_ms / 1000, id, &sent, err) != 0) return BATON_LOCKER_ERR;
    char hkey[LOCKER_SUBKEY_MAX], ekey[LOCKER_SUBKEY_MAX];
    locker_subkey(hkey, key, "holder");
    locker_subkey(ekey, key, "epoch");
    json_object *ops = json_object_new_array();
    json_object_array_add(ops, op_put(key, token, strlen(token), id));
    json_object_array_add(ops, op_put(hkey, el->holder, strlen(el->holder), id));
    json_object_array_add(ops, op_put(ekey, token, strlen(token), NULL));
    json_object *t = txn(arr1(cmp(key, "CREATE", "create_revision", json_object_new_string("0"))),
                         ops, NULL);
    json_object *resp;
    if (call(el->lease, deadline_of(el), "/v3/kv/txn", t, &resp, NULL, err) != 0) {
        /* it may have run: revoking the lease deletes what it put */
        if (!lease_revoke(el->lease, deadline_of(el), id))
            held_add(el, key, token, id, ttl_ms / 1000, true);
        return BATON_LOCKER_ERR;
    }
    /* Strictly: a "succeeded" that is not a JSON boolean, or a revision
     * that is not a positive int64, is no grant (whatever ran, revoking the
     * lease deletes what it put) */
    bool ok = false;
    int64_t rev = 0;
    char why[200];
    int bad = etcd_answer_succeeded(resp, &ok, why, sizeof why);
    if (bad == 0 && ok) bad = etcd_answer_revision(resp, &rev, why, sizeof why);
    json_object_put(resp);
    if (bad != 0) {
        bad_answer(el->lease, "/v3/kv/txn", why, err);
        if (!lease_revoke(el->lease, deadline_of(el), id))
            held_add(el, key, token, id, ttl_ms / 1000, true);
        return BATON_LOCKER_ERR;
    }
    if (!ok) {
        lease_revoke(el->lease, deadline_of(el), id);
        return BATON_LOCKER_HELD;
    }
    held_add(el, key, token, id, ttl_ms / 1000, false);
    memcpy(out->token, token, sizeof out->token);
    out->epoch = (uint64_t)rev;
    out->sent_ms = sent;
    out->gen = gen;
    return BATON_LOCKER_OK;
}

/* Is key held with token? BATON_LOCKER_OK, BATON_LOCKER_LOST (err says why), BATON_LOCKER_ERR. */
static int confirm_token(struct etcd_conn *conn, int64_t deadline,
                         const char *what, const char *key, const char *token,
                         char err[BATON_LOCKER_ERR_MAX])
{
    json_object *kv = NULL;
    int present = range_key(conn, deadline, key, &kv, err);
    if (present < 0) return BATON_LOCKER_ERR;
    if (present == 0) {
        errf(err, "etcd locker: %s %s: not held (expired or released)", what, key);
        return BATON_LOCKER_LOST;
    }
    char v[RANDOM_TOKEN_LEN + 8];
    bool same = kv_value(kv, v, sizeof v, NULL) && strcmp(v, token) == 0;
    json_object_put(kv);
    if (same) return BATON_LOCKER_OK;
    errf(err, "etcd locker: %s %s: held with another token", what, key);
    return BATON_LOCKER_LOST;
}

/* {"compare": [value(key) == token]} */
static json_object *cmp_token(const char *key, const char *token)
{
    char *tok64 = etcd_b64(token, strlen(token));
    json_object *c = arr1(cmp(key, "VALUE", "value", json_object_new_string(tok64 ? tok64 : "%")));
    free(tok64);
    return c;
}

/* renew with a ttl other than the lease's: etcd cannot change a lease's ttl,
 * so key and holder move to a new lease of ttl_s (one transaction, only
 * while key holds token), and the old lease is revoked. The deadline counts
 * from the new grant's send time. */
static int renew_moving(struct etcd_locker *el, const char *key, const char *token,
                        const char *old_id, int64_t ttl_s, int64_t deadline, int64_t *sent_ms,
                        char err[BATON_LOCKER_ERR_MAX])
{
    char id[24];
    int64_t sent = 0;
    if (grant(el->lease, deadline, ttl_s, id, &sent, err) != 0) return BATON_LOCKER_ERR;
    char hkey[LOCKER_SUBKEY_MAX];
    locker_subkey(hkey, key, "holder");
    json_object *ops = json_object_new_array();
    json_object_array_add(ops, op_put(key, token, strlen(token), id));
    json_object_array_add(ops, op_put(hkey, el->holder, strlen(el->holder), id));
    json_object *resp;
    if (call(el->lease, deadline, "/v3/kv/txn", txn(cmp_token(key, token), ops, NULL), &resp, NULL,
             err) != 0) {
        lease_revoke(el->lease, deadline_of(el), id); /* else it expires unused */
        return BATON_LOCKER_ERR;
    }
    bool ok = false;
    if (txn_succeeded(el->lease, resp, &ok, err) != 0) {
        /* if the move ran, this deletes the key: a lost term, never a false one */
        lease_revoke(el->lease, deadline_of(el), id);
        return BATON_LOCKER_ERR;
    }
    if (!ok) {
        lease_revoke(el->lease, deadline_of(el), id);
        held_do(el, key, token, HELD_STALE, NULL, NULL);
        errf(err, "etcd locker: renew %s: not held with this token (expired or released)", key);
        return BATON_LOCKER_LOST;
    }
    held_move(el, key, token, id, ttl_s);
    lease_revoke(el->lease, deadline_of(el), old_id); /* nothing is attached to it any more */
    *sent_ms = sent;
    return BATON_LOCKER_OK;
}

static int etcd_renew(struct baton_locker *l, const char *key, const char *token, int64_t ttl_ms,
                      int64_t *sent_ms, char err[BATON_LOCKER_ERR_MAX])
{
    OP("renew", key);
    struct etcd_locker *el = (struct etcd_locker *)l;
    if (!ttl_ok("renew", key, ttl_ms, err)) return BATON_LOCKER_ERR;
    char id[24];
    int64_t ttl_s = 0;
    if (!held_do(el, key, token, HELD_GET, id, &ttl_s)) {
        errf(err, "etcd locker: renew %s: not acquired by this process", key);
        return BATON_LOCKER_LOST;
    }
    int64_t deadline = deadline_of(el);
    if (ttl_s != ttl_ms / 1000)
        return renew_moving(el, key, token, id, ttl_ms / 1000, deadline, sent_ms, err);
    json_object *req = json_object_new_object();
    json_object_object_add(req, "ID", json_object_new_string(id));
    json_object *resp;
    if (call(el->lease, deadline, "/v3/lease/keepalive", req, &resp, sent_ms, err) != 0)
        return BATON_LOCKER_ERR;
    json_object *res = get(resp, "result");
    json_object *e = get(resp, "error");
    if (e != NULL) {
        errf(err, "etcd locker: renew %s: %.150s", key, json_object_get_string(e));
        json_object_put(resp);
        return BATON_LOCKER_ERR;
    }
    /* absent is 0: expired (the gateway omits 0) */
    int64_t left = 0;
    char why[200];
    enum etcd_field f = etcd_field_int64(res, "TTL", true, &left, why, sizeof why);
    json_object_put(resp);
    if (f == ETCD_FIELD_MALFORMED) {
        bad_answer(el->lease, "/v3/lease/keepalive", why, err);
        return BATON_LOCKER_ERR;
    }
    if (left <= 0) {
        errf(err, "etcd locker: renew %s: lease %s expired", key, id);
        held_do(el, key, token, HELD_STALE, NULL, NULL);
        return BATON_LOCKER_LOST;
    }
    /* the lease runs again from *sent_ms; the key must still be ours */
    int rc = confirm_token(el->lease, deadline, "renew", key, token, err);
    if (rc == BATON_LOCKER_LOST) held_do(el, key, token, HELD_STALE, NULL, NULL);
    return rc;
}

static int etcd_unlock(struct baton_locker *l, const char *key, const char *token,
                       char err[BATON_LOCKER_ERR_MAX])
{
    OP("unlock", key);
    struct etcd_locker *el = (struct etcd_locker *)l;
    char id[24];
    bool mine = held_do(el, key, token, HELD_GET, id, NULL);
    char hkey[LOCKER_SUBKEY_MAX];
    locker_subkey(hkey, key, "holder");
    json_object *ops = json_object_new_array();
    json_object_array_add(ops, op_delete(key));
    json_object_array_add(ops, op_delete(hkey));
    json_object *t = txn(cmp_token(key, token), ops, arr1(op_range(key)));
    json_object *resp;
    int rc = BATON_LOCKER_ERR;
    if (call(el->lease, deadline_of(el), "/v3/kv/txn", t, &resp, NULL, err) == 0) {
        bool ok = false;
        json_object *other = NULL;
        char why[200];
        if (etcd_answer_succeeded(resp, &ok, why, sizeof why) != 0 ||
            (!ok && etcd_answer_first_kv(txn_range(resp, 0), &other, why, sizeof why) != 0)) {
            bad_answer(el->lease, "/v3/kv/txn", why, err);
        } else if (ok) {
            rc = BATON_LOCKER_OK;
        } else {
            errf(err, "etcd locker: unlock %s: %s", key,
                 other ? "held with another token" : "not held (expired or released)");
            rc = BATON_LOCKER_MISMATCH;
        }
        json_object_put(resp);
    }
    /* the term is over either way: revoke its lease now, or (cluster
     * unreachable) mark it stale for the next try_lock on key */
    if (mine) {
        if (lease_revoke(el->lease, deadline_of(el), id))
            held_do(el, key, token, HELD_FORGET, NULL, NULL);
        else
            held_do(el, key, token, HELD_STALE, NULL, NULL);
    }
    return rc;
}

static int etcd_check(struct baton_locker *l, const char *key, const char *token,
                      char err[BATON_LOCKER_ERR_MAX])
{
    OP("check", key);
    struct etcd_locker *el = (struct etcd_locker *)l;
    int rc = confirm_token(el->lease, deadline_of(el), "check", key, token, err);
    if (rc == BATON_LOCKER_LOST) held_do(el, key, token, HELD_STALE, NULL, NULL);
    return rc;
}

/* ---- side connection: claim, holder, ping, shared state, inspect ----------------- */

static int etcd_claim(struct baton_locker *l, const char *key, int64_t ttl_ms, char err[BATON_LOCKER_ERR_MAX])
{
    OP("claim", key);
    struct etcd_locker *el = (struct etcd_locker *)l;
    int present = range_key(el->side, deadline_of(el), key, NULL, err);
    if (present < 0) return BATON_LOCKER_ERR;
    if (present == 1) return BATON_LOCKER_HELD;
    char id[24];
    if (grant(el->side, deadline_of(el), (ttl_ms + 999) / 1000, id, NULL, err) != 0)
        return BATON_LOCKER_ERR;
    json_object *t = txn(arr1(cmp(key, "CREATE", "create_revision", json_object_new_string("0"))),
                         arr1(op_put(key, el->holder, strlen(el->holder), id)), NULL);
    json_object *resp;
    if (call(el->side, deadline_of(el), "/v3/kv/txn", t, &resp, NULL, err) != 0) {
        /* it may have run: the claim then holds for its ttl, as it should */
        return BATON_LOCKER_ERR;
    }
    bool ok = false;
    if (txn_succeeded(el->side, resp, &ok, err) != 0) return BATON_LOCKER_ERR; /* as above */
    if (ok) return BATON_LOCKER_OK;
    lease_revoke(el->side, deadline_of(el), id);
    return BATON_LOCKER_HELD;
}

static int etcd_holder(struct baton_locker *l, const char *key, char *buf, size_t len,
                       char err[BATON_LOCKER_ERR_MAX])
{
    OP("holder of", key);
    struct etcd_locker *el = (struct etcd_locker *)l;
    char hkey[LOCKER_SUBKEY_MAX];
    locker_subkey(hkey, key, "holder");
    json_object *kv = NULL;
    int present = range_key(el->side, deadline_of(el), hkey, &kv, err);
    if (present < 0) return BATON_LOCKER_ERR;
    if (present == 0) return BATON_LOCKER_LOST;
    if (!kv_value(kv, buf, len, NULL)) snprintf(buf, len, "?");
    json_object_put(kv);
    return BATON_LOCKER_OK;
}

/* Readiness: the member answers and knows a leader (a member cut off from
 * its quorum has none). */
static int etcd_ping(struct baton_locker *l, char err[BATON_LOCKER_ERR_MAX])
{
    OP("ping", NULL);
    struct etcd_locker *el = (struct etcd_locker *)l;
    json_object *resp;
    if (call(el->side, deadline_of(el), "/v3/maintenance/status", json_object_new_object(), &resp,
             NULL, err) != 0)
        return BATON_LOCKER_ERR;
    uint64_t leader = 0; /* a member ID, a uint64; absent is 0 */
    char why[200];
    enum etcd_field f = etcd_field_uint64(resp, "leader", &leader, why, sizeof why);
    json_object_put(resp);
    if (f == ETCD_FIELD_MALFORMED) {
        bad_answer(el->side, "/v3/maintenance/status", why, err);
        return BATON_LOCKER_ERR;
    }
    if (leader != 0) return BATON_LOCKER_OK;
    char ep[256];
    etcd_conn_endpoint(el->side, ep, sizeof ep);
    errf(err, "etcd %s: the member has no leader (quorum lost?)", ep);
    return BATON_LOCKER_ERR;
}

/* A lease for shared values of ttl_s seconds, reused for writes within a
 * quarter of its life (side connection, held_mu taken here). */
static int shared_lease(struct etcd_locker *el, int64_t ttl_s, char id[24], bool fresh,
                        char err[BATON_LOCKER_ERR_MAX])
{
    int64_t now = clock_boot_ms();
    pthread_mutex_lock(&el->held_mu);
    struct shared_lease *slot = NULL, *oldest = &el->shared[0];
    for (int i = 0; i < SHARED_LEASES; i++) {
        if (el->shared[i].ttl_s == ttl_s) slot = &el->shared[i];
        if (el->shared[i].granted_ms < oldest->granted_ms) oldest = &el->shared[i];
    }
    if (slot && !fresh && slot->id[0] && now - slot->granted_ms < ttl_s * 1000 / 4) {
        memcpy(id, slot->id, 24);
        pthread_mutex_unlock(&el->held_mu);
        return 0;
    }
    pthread_mutex_unlock(&el->held_mu);
    int64_t sent = 0;
    if (grant(el->side, deadline_of(el), ttl_s, id, &sent, err) != 0) return -1;
    pthread_mutex_lock(&el->held_mu);
    if (slot == NULL) slot = oldest;
    slot->ttl_s = ttl_s;
    memcpy(slot->id, id, 24);
    slot->granted_ms = sent;
    pthread_mutex_unlock(&el->held_mu);
    return 0;
}

static int etcd_fenced_set(struct baton_locker *l, const char *key, const char *name, uint64_t epoch,
                           const char *value, size_t len, int64_t ttl_ms, char err[BATON_LOCKER_ERR_MAX])
{
    struct etcd_locker *el = (struct etcd_locker *)l;
    char ekey[LOCKER_SUBKEY_MAX], vkey[LOCKER_SUBKEY_MAX];
    locker_subkey(ekey, key, "epoch");
    locker_subkey(vkey, key, name);
    OP("fenced write", vkey);
    char ep[24];
    snprintf(ep, sizeof ep, "%llu", (unsigned long long)epoch);
    int rc = BATON_LOCKER_ERR;
    for (int attempt = 0; attempt < 2; attempt++) {
        char id[24];
        if (shared_lease(el, (ttl_ms + 999) / 1000, id, attempt > 0, err) != 0) break;
        json_object *t = txn(arr1(cmp(ekey, "MOD", "mod_revision", json_object_new_string(ep))),
                             arr1(op_put(vkey, value, len, id)), NULL);
        json_object *resp;
        if (call(el->side, deadline_of(el), "/v3/kv/txn", t, &resp, NULL, err) != 0) {
            if (strstr(err, "lease not found") != NULL) continue; /* expired early: a new one */
            break;
        }
        bool ok = false;
        if (txn_succeeded(el->side, resp, &ok, err) != 0) break;
        if (ok) {
            rc = BATON_LOCKER_OK;
        } else {
            errf(err, "etcd locker: fenced write %s: epoch %s superseded", vkey, ep);
            rc = BATON_LOCKER_LOST;
        }
        break;
    }
    return rc;
}

static int etcd_shared_get(struct baton_locker *l, const char *key, const char *name, char *buf,
                           size_t len, char err[BATON_LOCKER_ERR_MAX])
{
    struct etcd_locker *el = (struct etcd_locker *)l;
    char vkey[LOCKER_SUBKEY_MAX];
    locker_subkey(vkey, key, name);
    OP("shared read", vkey);
    json_object *kv = NULL;
    int present = range_key(el->side, deadline_of(el), vkey, &kv, err);
    int rc = BATON_LOCKER_ERR;
    if (present == 0) {
        errf(err, "etcd locker: shared read %s: not set (or expired)", vkey);
        rc = BATON_LOCKER_LOST;
    } else if (present == 1) {
        size_t n = 0;
        if (kv_value(kv, buf, len, &n)) {
            rc = BATON_LOCKER_OK;
        } else {
            errf(err, "etcd locker: shared read %s: value does not fit the buffer of %zu bytes",
                 vkey, len);
        }
        json_object_put(kv);
    }
    return rc;
}

static int etcd_inspect(struct baton_locker *l, const char *key, struct baton_lock_info *info,
                        char err[BATON_LOCKER_ERR_MAX])
{
    OP("inspect", key);
    struct etcd_locker *el = (struct etcd_locker *)l;
    char hkey[LOCKER_SUBKEY_MAX], ekey[LOCKER_SUBKEY_MAX];
    locker_subkey(hkey, key, "holder");
    locker_subkey(ekey, key, "epoch");
    json_object *ops = json_object_new_array();
    json_object_array_add(ops, op_range(key));
    json_object_array_add(ops, op_range(hkey));
    json_object_array_add(ops, op_range(ekey));
    json_object *resp;
    if (call(el->side, deadline_of(el), "/v3/kv/txn", txn(NULL, ops, NULL), &resp, NULL, err) != 0)
        return BATON_LOCKER_ERR;
    json_object *kv = NULL, *hkv = NULL, *ekv = NULL;
    char why[200], lease[24] = "";
    int64_t epoch = 0;
    int has = 0;
    if (etcd_answer_first_kv(txn_range(resp, 0), &kv, why, sizeof why) != 0 ||
        etcd_answer_first_kv(txn_range(resp, 1), &hkv, why, sizeof why) != 0 ||
        etcd_answer_first_kv(txn_range(resp, 2), &ekv, why, sizeof why) != 0 ||
        (ekv && etcd_answer_positive(ekv, "mod_revision", "mod_revision", &epoch, why,
                                     sizeof why) != 0)) {
        json_object_put(resp);
        bad_answer(el->side, "/v3/kv/txn", why, err);
        return BATON_LOCKER_ERR;
    }
    info->held = kv != NULL;
    if (hkv && !kv_value(hkv, info->holder, sizeof info->holder, NULL)) info->holder[0] = '\0';
    info->epoch = (uint64_t)epoch;
    if (kv) has = kv_lease(el->side, "/v3/kv/txn", kv, lease, err);
    json_object_put(resp);
    if (has < 0) return BATON_LOCKER_ERR;
    if (has) {
        int64_t ms = -1;
        if (time_to_live(el->side, deadline_of(el), lease, &ms, err) != 0) return BATON_LOCKER_ERR;
        info->ttl_ms = ms;
    }
    return BATON_LOCKER_OK;
}

static void etcd_where(struct baton_locker *l, char *buf, size_t len)
{
    etcd_conn_endpoint(((struct etcd_locker *)l)->lease, buf, len);
}

static void etcd_destroy(struct baton_locker *l)
{
    struct etcd_locker *el = (struct etcd_locker *)l;
    atomic_store(&el->w_stop, true);
    pthread_mutex_lock(&el->w_mu);
    bool started = el->w_started;
    pthread_cond_broadcast(&el->w_cv);
    pthread_mutex_unlock(&el->w_mu);
    if (started) pthread_join(el->w_thread, NULL);
    while (el->keys) {
        struct watch_key *n = el->keys->next;
        free(el->keys->key);
        free(el->keys);
        el->keys = n;
    }
    while (el->held) {
        struct held *n = el->held->next;
        free(el->held->key);
        free(el->held);
        el->held = n;
    }
    etcd_conn_destroy(el->lease);
    etcd_conn_destroy(el->side);
    etcd_conn_destroy(el->watch);
    pthread_cond_destroy(&el->w_cv);
    pthread_mutex_destroy(&el->w_mu);
    pthread_mutex_destroy(&el->held_mu);
    locker_base_destroy(&el->base);
    free(el);
}

static const struct locker_ops etcd_ops = {
    .name = "etcd",
    .try_lock = etcd_try_lock,
    .unlock = etcd_unlock,
    .renew = etcd_renew,
    .release_seq = locker_etcd_release_seq,
    .wait_release = locker_etcd_wait_release,
    .generation = etcd_generation,
    .check = etcd_check,
    .destroy = etcd_destroy,
    .claim = etcd_claim,
    .holder = etcd_holder,
    .ping = etcd_ping,
    .fenced_set = etcd_fenced_set,
    .shared_get = etcd_shared_get,
    .inspect = etcd_inspect,
    .where = etcd_where,
};

struct baton_locker *baton_locker_etcd_create(const struct baton_etcd_opts *opts, char err[BATON_LOCKER_ERR_MAX])
{
    err[0] = '\0';
    struct etcd_locker *el = calloc(1, sizeof *el);
    if (!el) {
        snprintf(err, BATON_LOCKER_ERR_MAX, "etcd locker: out of memory");
        return NULL;
    }
    locker_base_init(&el->base, &etcd_ops, false);
    snprintf(el->holder, sizeof el->holder, "%.80s pid %d", util_hostname(), (int)getpid());
    el->command_timeout_ms = opts && opts->command_timeout_ms > 0 ? opts->command_timeout_ms : 1000;
    pthread_mutex_init(&el->held_mu, NULL);
    pthread_mutex_init(&el->w_mu, NULL);
    cond_init_clock(&el->w_cv, CLOCK_MONOTONIC);
    el->lease = etcd_conn_create(opts, "lease", err, BATON_LOCKER_ERR_MAX);
    el->side = el->lease ? etcd_conn_create(opts, "side", err, BATON_LOCKER_ERR_MAX) : NULL;
    el->watch = el->side ? etcd_conn_create(opts, "watch", err, BATON_LOCKER_ERR_MAX) : NULL;
    if (el->watch == NULL) {
        etcd_destroy(&el->base);
        return NULL;
    }
    /* Reach the cluster now, to say at start what is wrong. Nothing here
     * fails creation: an unreachable cluster, a wrong CA or a refused
     * password may be mended while baton runs (a member coming up, auth
     * being rolled out), so every call reports it and is retried. */
    json_object *resp;
    char cerr[BATON_LOCKER_ERR_MAX];
    json_object *req = json_object_new_object();
    int rc = etcd_call(el->side, "/v3/maintenance/status", req, &resp, NULL, NULL, cerr, sizeof cerr);
    json_object_put(req);
    if (rc == 0)
        json_object_put(resp);
    else
        glog_error("locker", NULL, "%s (will keep retrying)", cerr);
    return &el->base;
}
