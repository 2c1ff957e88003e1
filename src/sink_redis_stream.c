/* redis_stream sink: every message an entry of a Redis Stream, written with
 * the lease's fencing epoch checked in the same atomic step.
 *
 * One Lua script per batch (loaded once with SCRIPT LOAD, run by EVALSHA;
 * NOSCRIPT after a Redis restart or SCRIPT FLUSH: loaded again and the same
 * attempt repeated):
 *
 *   KEYS[1] the stream, KEYS[2] <stream>:fence, KEYS[2+i] <stream>:seen:<endpoint>:<id i>
 *   ARGV    epoch, maxlen, dedup_window_ms, endpoint, then per message
 *           id, source, payload
 *
 *   - the stream key holds something else than a stream: {-2, type}, nothing
 *     written (checked first, so a WRONGTYPE never leaves seen keys behind);
 *   - the fence (a hash: one field per endpoint, since each endpoint has a
 *     lease, and so epochs, of its own, and several endpoints may share a
 *     stream) holds a higher epoch for the batch's endpoint than the
 *     batch's: {-1, fence}, nothing written: a stale leader's batch is
 *     refused by the store itself;
 *   - otherwise the fence is raised to the batch's epoch and, per message,
 *     SET <stream>:seen:<endpoint>:<id> 1 NX PX dedup_window_ms, XADD MAXLEN
 *     ~ maxlen only when that SET took: {0, entries added}.
 *
 * Epochs are compared as decimal strings (length, then bytes): any uint64
 * compares right, where Lua's doubles would round above 2^53. Epoch 0 (an
 * unguarded endpoint) neither reads nor raises the fence.
 *
 * Retrying is safe: the script is idempotent by its seen keys, so a batch
 * whose reply was lost (connection dropped, command timeout) is simply run
 * again; the messages it wrote the first time are skipped. That is also
 * what makes a promoted standby's replayed messages (failover = "replay",
 * same ids) land once.
 *
 * Term-scoped, lease-bounded as the HTTP sink: the term is asked before
 * every attempt (sink_wait_live); the command timeout of an attempt is
 * capped by the time left on the lease; retryable failures (connection
 * lost, timeout, LOADING, BUSY, READONLY, TRYAGAIN, CLUSTERDOWN,
 * MASTERDOWN, OOM, NOREPLICAS) are retried with back-off for as long as the term lives,
 * reconnecting as needed. Fenced: sink_call.fenced, the batch settles as
 * MSG_DROPPED_TERM_ENDED, never retried (as an HTTP 409). Other errors
 * (WRONGTYPE, a script error caused by the data): MSG_DROPPED_SINK_FAILED,
 * rejected, so the dead-letter sink gets them with Redis's message.
 *
 * send() runs on one thread at a time (the endpoint's forwarder); check()
 * runs on the status thread and opens its own connection for a PING. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/util.h"
#include "common/envelope_split.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "endpoints/redis_settings.h"
#include "redis/open.h"
#include "src/sink_impl.h"

#define RS_SLICE_MS 20 /* longest sleep between two lease checks */

struct rs_settings {
    struct redis_conn_settings conn;
    struct strlist sentinels;
    char *master_name;
    struct redis_tls_settings tls;
    int64_t max_reply_bytes;
    char *stream;
    int64_t maxlen;
    int64_t dedup_window_ms;
    bool hash_tag;
    int64_t backoff_ms;
    int64_t backoff_max_ms;
};

static const struct setting_def rs_defs[] = {
    REDIS_CONN_DEFS(struct rs_settings, conn),
    REDIS_HA_TLS_DEFS(struct rs_settings),
    {"stream", SETTING_STRING, offsetof(struct rs_settings, stream), .def = "baton:{endpoint}",
     .help = "the stream's key; {endpoint} is replaced by the endpoint's name. Its fence is "
             "<stream>:fence (a hash: the epoch per endpoint), its dedup keys "
             "<stream>:seen:<endpoint>:<id>"},
    {"maxlen", SETTING_INT, offsetof(struct rs_settings, maxlen), .def = "1000000", .min = 1,
     .max = INT64_MAX, .help = "entries kept (XADD MAXLEN ~: approximate trimming)"},
    {"dedup_window_ms", SETTING_INT, offsetof(struct rs_settings, dedup_window_ms),
     .def = "86400000", .min = 1, .max = INT64_MAX,
     .help = "how long a message id is remembered: an id seen again within it is not added"},
    {"hash_tag", SETTING_BOOL, offsetof(struct rs_settings, hash_tag), .def = "false",
     .help = "keys {<stream>}, {<stream>}:fence, {<stream>}:seen:<endpoint>:<id>: all in one Redis Cluster "
             "slot"},
    {"backoff_ms", SETTING_INT, offsetof(struct rs_settings, backoff_ms), .def = "50", .min = 1,
     .max = 3600000, .help = "first retry delay in ms (doubles per retry, jittered)"},
    {"backoff_max_ms", SETTING_INT, offsetof(struct rs_settings, backoff_max_ms), .def = "1000",
     .min = 1, .max = 3600000, .help = "largest retry delay in ms"},
    SETTINGS_END,
};

const char sink_redis_stream_script[] =
    "local e = ARGV[1]\n"
    "local t = redis.call('TYPE', KEYS[1])\n"
    "t = type(t) == 'table' and t.ok or t\n"
    "if t ~= 'none' and t ~= 'stream' then return {-2, t} end\n"
    "if e ~= '0' then\n"
    "  local f = redis.call('HGET', KEYS[2], ARGV[4])\n"
    "  if f and (#f > #e or (#f == #e and f > e)) then return {-1, f} end\n"
    "  if f ~= e then redis.call('HSET', KEYS[2], ARGV[4], e) end\n"
    "end\n"
    "local added = 0\n"
    "for i = 1, #KEYS - 2 do\n"
    "  local a = 4 + (i - 1) * 3\n"
    "  local id = ARGV[a + 1]\n"
    "  if id == '' or redis.call('SET', KEYS[2 + i], '1', 'NX', 'PX', ARGV[3]) then\n"
    "    redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'id', id, 'epoch', e,\n"
    "               'endpoint', ARGV[4], 'source', ARGV[a + 2], 'payload', ARGV[a + 3])\n"
    "    added = added + 1\n"
    "  end\n"
    "end\n"
    "return {0, added}\n";

struct rs_sink {
    char *name;
    char *endpoint; /* for log lines and the entries; "" = none */
    struct baton_redis_opts ro;
    int64_t command_timeout_ms;
    int64_t backoff_ms, backoff_max_ms;
    char *stream_key; /* the stream, hash tag applied */
    char *fence_key;
    char *seen_prefix; /* "<stream>:seen:<endpoint>:" */
    char maxlen[24], window[24];
    redisContext *c; /* the sender's; NULL = not connected */
    char sha[41];    /* "" = not loaded on this connection's server yet */
    /* the batch's arguments, reused across sends */
    const char **argv;
    size_t *argvlen;
    size_t arg_cap;
    struct jbuf keys;    /* the seen keys, one after the other */
    struct jbuf fields;  /* per message its source object, then its payload */
    struct jbuf pay;     /* one message's payload, before it joins fields */
    size_t *offs;        /* per message: its key in keys, its source and payload in fields */
    size_t offs_cap;
    struct ratelimit rl_retry, rl_drop;
};

/* ---- settings ---- */

static int rs_validate(const void *settings, char *msg, size_t msglen)
{
    const struct rs_settings *s = settings;
    if (redis_conn_settings_validate(&s->conn, msg, msglen))
        return -1;
    if (s->sentinels.n > 0 && !s->master_name) {
        snprintf(msg, msglen, "'sentinels' need master_name (the master's name known to them)");
        return -1;
    }
    if (s->master_name && s->sentinels.n == 0) {
        snprintf(msg, msglen, "'master_name' needs sentinels = [ \"host:port\", ... ]");
        return -1;
    }
    if (s->tls.present && (s->tls.cert_file != NULL) != (s->tls.key_file != NULL)) {
        snprintf(msg, msglen, "'tls': cert_file and key_file go together");
        return -1;
    }
    const char *const files[3] = {s->tls.ca_file, s->tls.cert_file, s->tls.key_file};
    static const char *const names[3] = {"ca_file", "cert_file", "key_file"};
    for (int i = 0; s->tls.present && i < 3; i++) {
        if (files[i] && access(files[i], R_OK) != 0) {
            snprintf(msg, msglen, "'tls': %s %s: %s", names[i], files[i], strerror(errno));
            return -1;
        }
    }
    if (!s->stream || !s->stream[0]) {
        snprintf(msg, msglen, "'stream' must not be empty");
        return -1;
    }
    if (s->backoff_max_ms < s->backoff_ms) {
        snprintf(msg, msglen, "'backoff_max_ms' (%lld) is less than backoff_ms (%lld)",
                 (long long)s->backoff_max_ms, (long long)s->backoff_ms);
        return -1;
    }
    return 0;
}

/* stream with every "{endpoint}" replaced by endpoint (malloc'd). */
static char *expand_stream(const char *stream, const char *endpoint)
{
    static const char tok[] = "{endpoint}";
    struct jbuf b;
    jbuf_init(&b, 64);
    for (const char *p = stream; *p;) {
        const char *at = strstr(p, tok);
        if (!at) {
            jbuf_rawz(&b, p);
            break;
        }
        jbuf_raw(&b, p, (size_t)(at - p));
        jbuf_rawz(&b, endpoint);
        p = at + sizeof tok - 1;
    }
    size_t len;
    char *r = jbuf_steal(&b, &len);
    return r ? r : xstrdup("");
}

static char *xprintf2(const char *a, const char *b, const char *c)
{
    size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
    char *r = xmalloc(n);
    snprintf(r, n, "%s%s%s", a, b, c);
    return r;
}

/* "<open><stream><close>:seen:<endpoint>:" (malloc'd): ids are the
 * endpoint's, so two endpoints writing one stream never dedup each other. */
static char *seen_prefix(const char *open, const char *stream, const char *close,
                         const char *endpoint)
{
    size_t n = strlen(open) + strlen(stream) + strlen(close) + strlen(endpoint) + 8;
    char *r = xmalloc(n);
    snprintf(r, n, "%s%s%s:seen:%s:", open, stream, close, endpoint);
    return r;
}

static void rs_destroy(void *sink);

static void *rs_create(const char *name, const char *endpoint, const void *settings, char *err,
                       size_t errlen)
{
    const struct rs_settings *s = settings;
    char msg[400];
    if (!s || rs_validate(s, msg, sizeof msg)) {
        snprintf(err, errlen, "sink '%s': %s", name ? name : "redis_stream", s ? msg : "no settings");
        return NULL;
    }
    struct rs_sink *k = xcalloc(1, sizeof *k);
    k->name = xstrdup(name ? name : "redis_stream");
    k->endpoint = xstrdup(endpoint ? endpoint : "");
    if (redis_conn_settings_apply(&k->ro, &s->conn, msg, sizeof msg)) {
        snprintf(err, errlen, "sink '%s': password: %s", k->name, msg);
        rs_destroy(k);
        return NULL;
    }
    k->ro.max_reply_bytes = s->max_reply_bytes;
    redis_settings_apply(&k->ro, &s->sentinels, s->master_name, &s->tls);
    k->command_timeout_ms = s->conn.command_timeout_ms;
    k->backoff_ms = s->backoff_ms;
    k->backoff_max_ms = s->backoff_max_ms;
    char *stream = expand_stream(s->stream, k->endpoint);
    if (s->hash_tag) {
        k->stream_key = xprintf2("{", stream, "}");
        k->fence_key = xprintf2("{", stream, "}:fence");
        k->seen_prefix = seen_prefix("{", stream, "}", k->endpoint);
    } else {
        k->stream_key = xstrdup(stream);
        k->fence_key = xprintf2(stream, ":fence", "");
        k->seen_prefix = seen_prefix("", stream, "", k->endpoint);
    }
    free(stream);
    snprintf(k->maxlen, sizeof k->maxlen, "%lld", (long long)s->maxlen);
    snprintf(k->window, sizeof k->window, "%lld", (long long)s->dedup_window_ms);
    jbuf_init(&k->keys, 1024);
    jbuf_init(&k->fields, 4096);
    jbuf_init(&k->pay, 1024);
    return k;
}

static void rs_destroy(void *sink)
{
    struct rs_sink *k = sink;
    if (!k) return;
    if (k->c) redisFree(k->c);
    redis_opts_clear(&k->ro);
    free(k->name);
    free(k->endpoint);
    free(k->stream_key);
    free(k->fence_key);
    free(k->seen_prefix);
    free(k->argv);
    free(k->argvlen);
    free(k->offs);
    jbuf_free(&k->keys);
    jbuf_free(&k->fields);
    jbuf_free(&k->pay);
    free(k);
}

/* ---- one batch ---- */

static void grow_args(struct rs_sink *k, size_t n)
{
    size_t need = 3 + 2 + n + 4 + 3 * n; /* EVALSHA sha numkeys, keys, args */
    if (need > k->arg_cap) {
        k->argv = xrealloc(k->argv, need * sizeof *k->argv);
        k->argvlen = xrealloc(k->argvlen, need * sizeof *k->argvlen);
        k->arg_cap = need;
    }
    if (3 * n > k->offs_cap) {
        k->offs = xrealloc(k->offs, 3 * n * sizeof *k->offs);
        k->offs_cap = 3 * n;
    }
}

/* Fills argv[3..] (keys and arguments) for msgs; returns the count of argv
 * entries after EVALSHA's first three. */
static size_t build_args(struct rs_sink *k, struct message *const *msgs, size_t n, char *numkeys,
                         size_t numkeys_len, char *epoch, size_t epoch_len)
{
    grow_args(k, n);
    jbuf_reset(&k->keys);
    jbuf_reset(&k->fields);
    size_t plen = strlen(k->seen_prefix);
    for (size_t i = 0; i < n; i++) {
        k->offs[3 * i] = k->keys.len;
        jbuf_raw(&k->keys, k->seen_prefix, plen);
        jbuf_rawz(&k->keys, msgs[i]->id);
        k->offs[3 * i + 1] = k->fields.len;
        /* source then payload, each a run in fields */
        jbuf_reset(&k->pay);
        envelope_split_fields(msgs[i]->json, msgs[i]->len, &k->fields, &k->pay);
        k->offs[3 * i + 2] = k->fields.len;
        jbuf_raw(&k->fields, k->pay.data, k->pay.len);
    }
    snprintf(numkeys, numkeys_len, "%zu", n + 2);
    snprintf(epoch, epoch_len, "%llu", (unsigned long long)msgs[0]->epoch);
    size_t a = 3;
    k->argv[a] = k->stream_key, k->argvlen[a++] = strlen(k->stream_key);
    k->argv[a] = k->fence_key, k->argvlen[a++] = strlen(k->fence_key);
    for (size_t i = 0; i < n; i++) {
        size_t e = i + 1 < n ? k->offs[3 * (i + 1)] : k->keys.len;
        k->argv[a] = k->keys.data + k->offs[3 * i];
        k->argvlen[a++] = e - k->offs[3 * i];
    }
    k->argv[a] = epoch, k->argvlen[a++] = strlen(epoch);
    k->argv[a] = k->maxlen, k->argvlen[a++] = strlen(k->maxlen);
    k->argv[a] = k->window, k->argvlen[a++] = strlen(k->window);
    k->argv[a] = k->endpoint, k->argvlen[a++] = strlen(k->endpoint);
    for (size_t i = 0; i < n; i++) {
        size_t s0 = k->offs[3 * i + 1], p0 = k->offs[3 * i + 2];
        size_t pe = i + 1 < n ? k->offs[3 * (i + 1) + 1] : k->fields.len;
        k->argv[a] = msgs[i]->id, k->argvlen[a++] = strlen(msgs[i]->id);
        k->argv[a] = k->fields.data + s0, k->argvlen[a++] = p0 - s0;
        k->argv[a] = k->fields.data + p0, k->argvlen[a++] = pe - p0;
    }
    return a - 3;
}

enum attempt { ATT_OK, ATT_RETRY, ATT_FENCED, ATT_REJECTED, ATT_NOSCRIPT };

static void drop_conn(struct rs_sink *k)
{
    if (k->c) redisFree(k->c);
    k->c = NULL;
    k->sha[0] = '\0';
}

static struct timeval ms_tv(int64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    return tv;
}

/* Errors that say "not now" rather than "never": retried while the term
 * lives. Everything else (WRONGTYPE, ERR from the script) is the data's. */
static bool error_retryable(const char *e)
{
    /* MOVED and ASK are not here: the sink does not follow Cluster
     * redirections (a Cluster is reached through a proxy, as the locker's),
     * so retrying one would hold the term up for nothing */
    static const char *const transient[] = {"LOADING", "BUSY", "READONLY", "TRYAGAIN",
                                            "CLUSTERDOWN", "MASTERDOWN", "OOM", "NOREPLICAS",
                                            NULL};
    for (size_t i = 0; transient[i]; i++) {
        size_t n = strlen(transient[i]);
        if (strncmp(e, transient[i], n) == 0 && (e[n] == ' ' || e[n] == '\0')) return true;
    }
    return false;
}

/* One attempt within left ms. what gets the reason of a failure. */
static enum attempt attempt_once(struct rs_sink *k, size_t nargs, int64_t left, long long *added,
                                 char *what, size_t whatlen)
{
    int64_t to = k->command_timeout_ms < left ? k->command_timeout_ms : left;
    if (to < 1) to = 1;
    if (!k->c) {
        struct baton_redis_opts o = k->ro;
        if (o.connect_timeout_ms <= 0 || o.connect_timeout_ms > to) o.connect_timeout_ms = to;
        o.command_timeout_ms = to;
        char err[256];
        k->c = redis_conn_open(&o, err, sizeof err);
        if (!k->c) {
            snprintf(what, whatlen, "%s", err);
            return ATT_RETRY;
        }
    } else if (redisSetTimeout(k->c, ms_tv(to)) != REDIS_OK) {
        snprintf(what, whatlen, "setting the command timeout failed");
        drop_conn(k);
        return ATT_RETRY;
    }
    if (!k->sha[0]) {
        redisReply *r = redis_commandf(k->c, "SCRIPT LOAD %s", sink_redis_stream_script);
        if (!r) {
            snprintf(what, whatlen, "SCRIPT LOAD: %s", k->c->errstr);
            drop_conn(k);
            return ATT_RETRY;
        }
        enum attempt res = ATT_OK;
        if (r->type == REDIS_REPLY_STRING && r->len == 40) {
            memcpy(k->sha, r->str, 40);
            k->sha[40] = '\0';
        } else {
            snprintf(what, whatlen, "SCRIPT LOAD: %s",
                     r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
            res = r->type == REDIS_REPLY_ERROR && !error_retryable(r->str) ? ATT_REJECTED : ATT_RETRY;
        }
        freeReplyObject(r);
        if (res != ATT_OK) return res;
    }
    k->argv[0] = "EVALSHA", k->argvlen[0] = 7;
    k->argv[1] = k->sha, k->argvlen[1] = 40;
    /* argv[2] (numkeys) was set by the caller */
    redisReply *r = redis_command_argv(k->c, (int)(nargs + 3), k->argv, k->argvlen);
    if (!r) {
        /* lost reply: safe to run again (seen keys) */
        snprintf(what, whatlen, "EVALSHA: %s", k->c->errstr);
        drop_conn(k);
        return ATT_RETRY;
    }
    enum attempt res;
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(what, whatlen, "%s", r->str);
        if (strncmp(r->str, "NOSCRIPT", 8) == 0) {
            k->sha[0] = '\0';
            res = ATT_NOSCRIPT;
        } else {
            res = error_retryable(r->str) ? ATT_RETRY : ATT_REJECTED;
        }
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
               r->element[0]->type == REDIS_REPLY_INTEGER) {
        redisReply *v = r->element[1];
        long long code = r->element[0]->integer;
        if (code == 0 && v->type == REDIS_REPLY_INTEGER) {
            *added = v->integer;
            res = ATT_OK;
        } else if (code == -1) {
            snprintf(what, whatlen, "the stream's fence %s holds epoch %.*s", k->fence_key,
                     v->type == REDIS_REPLY_STRING ? (int)v->len : 1,
                     v->type == REDIS_REPLY_STRING ? v->str : "?");
            res = ATT_FENCED;
        } else {
            snprintf(what, whatlen, "WRONGTYPE: key %s holds a %.*s, not a stream", k->stream_key,
                     v->type == REDIS_REPLY_STRING ? (int)v->len : 1,
                     v->type == REDIS_REPLY_STRING ? v->str : "?");
            res = ATT_REJECTED;
        }
    } else {
        snprintf(what, whatlen, "EVALSHA: unexpected reply (type %d)", r->type);
        res = ATT_REJECTED;
    }
    freeReplyObject(r);
    return res;
}

static void settle(struct message *const *msgs, size_t n, enum msg_outcome *outcome,
                   enum msg_outcome o)
{
    (void)msgs;
    for (size_t i = 0; i < n; i++) outcome[i] = o;
}

static void record_rejected(struct message *const *msgs, size_t n, const char *what)
{
    struct message_failure f = {.rejected = true};
    size_t len = strlen(what);
    f.body_len = len < sizeof f.body ? len : sizeof f.body;
    memcpy(f.body, what, f.body_len);
    for (size_t i = 0; i < n; i++) message_set_failure(msgs[i], &f);
}

static void log_dropped(struct rs_sink *k, struct message *const *msgs, size_t n, const char *why)
{
    long long suppressed = 0;
    if (ratelimit_ok(&k->rl_drop, 1000, &suppressed))
        log_warn("sink_redis_stream", k->endpoint,
                 "sink '%s': %zu message(s) not written to %s (first id '%s'): %s (%lld such lines "
                 "suppressed)",
                 k->name, n, k->stream_key, msgs[0]->id, why, suppressed);
}

/* Sleeps up to ms in slices, asking the term and the cancel flag: the term's
 * time left (> 0), < 0 when it ended, 0 when cancelled. */
static int64_t wait_backoff(const struct sink_call *call, uint64_t epoch, int64_t ms)
{
    int64_t until = clock_mono_ms() + ms;
    for (;;) {
        int64_t left = sink_wait_live(call, epoch);
        if (left <= 0) return left;
        int64_t now = clock_mono_ms();
        if (now >= until) return left;
        int64_t slice = until - now;
        if (slice > RS_SLICE_MS) slice = RS_SLICE_MS;
        if (sleep_ms_cancellable(slice, call ? call->cancel : NULL)) return 0;
    }
}

static void rs_send(void *sink, struct message *const *msgs, size_t n, enum msg_outcome *outcome,
                    struct sink_call *call)
{
    struct rs_sink *k = sink;
    if (n == 0) return;
    uint64_t epoch = msgs[0]->epoch;
    char numkeys[24], ep[24];
    size_t nargs = build_args(k, msgs, n, numkeys, sizeof numkeys, ep, sizeof ep);
    unsigned attempt = 0;
    bool reloaded = false;
    int64_t t0 = clock_mono_ms();
    for (;;) {
        int64_t left = sink_wait_live(call, epoch);
        if (left == 0) {
            settle(msgs, n, outcome, MSG_DROPPED_SHUTDOWN);
            log_dropped(k, msgs, n, "shutdown");
            return;
        }
        if (left < 0) {
            settle(msgs, n, outcome, MSG_DROPPED_TERM_ENDED);
            log_dropped(k, msgs, n, "the lease term ended before the batch was written");
            return;
        }
        char what[400] = "";
        long long added = 0;
        k->argv[2] = numkeys, k->argvlen[2] = strlen(numkeys);
        enum attempt res = attempt_once(k, nargs, left, &added, what, sizeof what);
        if (res == ATT_OK) {
            if (attempt > 0)
                log_info("sink_redis_stream", k->endpoint,
                         "sink '%s': batch of %zu (first id '%s') written after %u retries in %lld ms",
                         k->name, n, msgs[0]->id, attempt, (long long)(clock_mono_ms() - t0));
            if ((size_t)added < n)
                log_debug("sink_redis_stream", k->endpoint,
                          "sink '%s': %zu of %zu id(s) already in %s within dedup_window_ms "
                          "(first id '%s'): not added again",
                          k->name, n - (size_t)added, n, k->stream_key, msgs[0]->id);
            settle(msgs, n, outcome, MSG_DELIVERED);
            return;
        }
        if (res == ATT_NOSCRIPT && !reloaded) {
            /* script cache flushed (restart, SCRIPT FLUSH): load and run again */
            reloaded = true;
            log_info("sink_redis_stream", k->endpoint, "sink '%s': NOSCRIPT; loading the script again",
                     k->name);
            continue;
        }
        if (call) call->attempt_errors++;
        if (res == ATT_FENCED) {
            char line[520];
            snprintf(line, sizeof line, "fenced by the store: batch epoch %s is older than %s; "
                     "ending the term", ep, what);
            log_dropped(k, msgs, n, line);
            if (call && call->fenced) call->fenced(call->arg, epoch, what);
            settle(msgs, n, outcome, MSG_DROPPED_TERM_ENDED);
            return;
        }
        if (res == ATT_REJECTED) {
            char line[480];
            snprintf(line, sizeof line, "rejected, not retried: %s", what);
            log_dropped(k, msgs, n, line);
            record_rejected(msgs, n, what);
            settle(msgs, n, outcome, MSG_DROPPED_SINK_FAILED);
            return;
        }
        attempt++;
        int64_t delay = backoff_ms(attempt - 1, k->backoff_ms, k->backoff_max_ms);
        long long suppressed = 0;
        if (ratelimit_ok(&k->rl_retry, 5000, &suppressed))
            log_warn("sink_redis_stream", k->endpoint,
                     "sink '%s': attempt %u failed: %s; retrying in %lld ms (%lld such lines "
                     "suppressed)",
                     k->name, attempt, what, (long long)delay, suppressed);
        if (res == ATT_NOSCRIPT) reloaded = false;
        (void)wait_backoff(call, epoch, delay); /* the loop's head asks again */
    }
}

static int rs_check(void *sink, char *msg, size_t msglen)
{
    struct rs_sink *k = sink;
    /* own connection: check() runs on the status thread */
    char err[256];
    redisContext *c = redis_conn_open(&k->ro, err, sizeof err);
    if (!c) {
        snprintf(msg, msglen, "sink '%s': %s", k->name, err);
        return -1;
    }
    redisReply *r = redis_commandf(c, "PING");
    int rc = 0;
    if (!r || r->type == REDIS_REPLY_ERROR) {
        snprintf(msg, msglen, "sink '%s': PING: %s", k->name, r ? r->str : c->errstr);
        rc = -1;
    }
    if (r) freeReplyObject(r);
    redisFree(c);
    return rc;
}

const struct sink_ops sink_redis_stream_ops = {
    .type = "redis_stream",
    .settings = rs_defs,
    .settings_size = sizeof(struct rs_settings),
    .validate = rs_validate,
    .create = rs_create,
    .send = rs_send,
    .check = rs_check,
    .destroy = rs_destroy,
};
