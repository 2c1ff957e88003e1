/* The message envelope: one JSON object per message, built in a reusable
 * buffer and copied into one message allocation. */
#include "common/envelope.h"

#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "common/util.h"

/* Largest buffer kept between envelopes. */
#define ENVELOPE_KEEP_MAX ((size_t)4 << 20)
/* Message buffers kept for reuse per envelope (bytes of JSON room): about
 * 2,000 envelopes of 0.5 KiB, enough to ride out the forwarder draining a
 * backlog; nothing for an endpoint that never built a message. A burst
 * deeper than this frees and later mallocs again, as without a pool. */
#define ENVELOPE_POOL_MAX ((size_t)1 << 20)

void envelope_init(struct envelope *e)
{
    jbuf_init(&e->buf, 1024);
    e->first = true;
    e->epoch = 0;
    e->id[0] = '\0';
    uint64_t nonce = 0;
    if (random_bytes(&nonce, sizeof nonce) != 0) nonce = (uint64_t)clock_mono_us() ^ (uint64_t)clock_wall_ms() << 20;
    snprintf(e->gen, sizeof e->gen, "g%016llx-", (unsigned long long)nonce);
    e->gen_n = 0;
    e->pool = message_pool_create(ENVELOPE_POOL_MAX);
    e->ts_ms = INT64_MIN;
    e->ts[0] = '\0';
    e->head_len = 0;
}

void envelope_free(struct envelope *e)
{
    jbuf_free(&e->buf);
    message_pool_release(e->pool);
    e->pool = NULL;
}

/* {"endpoint":...,"type":...,"epoch":N, the fixed keys as literals; the
 * text of the last one is kept and reused while they stay the same */
static void write_head(struct envelope *e, const char *endpoint, const char *type, uint64_t epoch)
{
    if (e->head_len && epoch == e->head_epoch && strcmp(endpoint, e->head_endpoint) == 0 &&
        strcmp(type, e->head_type) == 0) {
        jbuf_raw(&e->buf, e->head, e->head_len);
        return;
    }
    size_t start = e->buf.len;
    jbuf_raw(&e->buf, "{\"endpoint\":", 12);
    jbuf_strz(&e->buf, endpoint);
    jbuf_raw(&e->buf, ",\"type\":", 8);
    jbuf_strz(&e->buf, type);
    jbuf_raw(&e->buf, ",\"epoch\":", 9);
    jbuf_u64(&e->buf, epoch);
    size_t n = e->buf.len - start;
    e->head_len = 0;
    if (e->buf.data && n <= sizeof e->head && strlen(endpoint) < sizeof e->head_endpoint &&
        strlen(type) < sizeof e->head_type) {
        memcpy(e->head, e->buf.data + start, n);
        strcpy(e->head_endpoint, endpoint);
        strcpy(e->head_type, type);
        e->head_epoch = epoch;
        e->head_len = n;
    }
}

static void begin(struct envelope *e, const char *endpoint, const char *type, uint64_t epoch,
                  bool replayed, const char *id, int64_t received_wall_ms)
{
    jbuf_reset(&e->buf);
    e->first = true;
    e->epoch = epoch;
    e->key = 0;
    e->id[0] = '\0';
    char gen[sizeof e->gen + 21];
    if ((!id || !*id) && e->gen[0]) { /* the source gives none */
        size_t p = strlen(e->gen);
        memcpy(gen, e->gen, p);
        char digits[21];
        size_t nd = 0;
        for (uint64_t v = ++e->gen_n; v; v /= 10) digits[nd++] = (char)('0' + v % 10);
        while (nd) gen[p++] = digits[--nd];
        gen[p] = '\0';
        id = gen;
    }
    if (id) {
        /* truncated to MESSAGE_ID_MAX-1 bytes, without cutting a UTF-8
         * sequence in half */
        size_t n = strlen(id);
        if (n >= MESSAGE_ID_MAX) {
            n = MESSAGE_ID_MAX - 1;
            while (n > 0 && ((unsigned char)id[n] & 0xC0) == 0x80) n--;
        }
        memcpy(e->id, id, n);
        e->id[n] = '\0';
    }
    write_head(e, endpoint ? endpoint : "", type ? type : "", epoch);
    if (replayed) jbuf_raw(&e->buf, ",\"replayed\":true", 16);
    e->first = false;
    if (id && *id) { /* the full id, not the truncated copy */
        jbuf_raw(&e->buf, ",\"id\":", 6);
        jbuf_strz(&e->buf, id);
    }
    if (received_wall_ms != e->ts_ms) {
        clock_format_rfc3339(received_wall_ms, e->ts, sizeof e->ts);
        e->ts_ms = received_wall_ms;
    }
    jbuf_raw(&e->buf, ",\"received_at\":", 15);
    jbuf_strz(&e->buf, e->ts);
}

void envelope_begin(struct envelope *e, const char *endpoint, const char *type, uint64_t epoch,
                    const char *id, int64_t received_wall_ms)
{
    begin(e, endpoint, type, epoch, false, id, received_wall_ms);
}

void envelope_begin_replayed(struct envelope *e, const char *endpoint, const char *type,
                             uint64_t epoch, const char *id, int64_t received_wall_ms)
{
    begin(e, endpoint, type, epoch, true, id, received_wall_ms);
}

void envelope_order_key(struct envelope *e, const void *key, size_t n)
{
    e->key = message_key_hash(key, n);
}

void envelope_key(struct envelope *e, const char *key)
{
    jbuf_key(&e->buf, &e->first, key);
}

void envelope_str(struct envelope *e, const char *key, const char *s, size_t n)
{
    envelope_key(e, key);
    jbuf_str(&e->buf, s ? s : "", s ? n : 0);
}

void envelope_strz(struct envelope *e, const char *key, const char *s)
{
    envelope_key(e, key);
    jbuf_strz(&e->buf, s);
}

void envelope_i64(struct envelope *e, const char *key, int64_t v)
{
    envelope_key(e, key);
    jbuf_i64(&e->buf, v);
}

void envelope_u64(struct envelope *e, const char *key, uint64_t v)
{
    envelope_key(e, key);
    jbuf_u64(&e->buf, v);
}

void envelope_bool(struct envelope *e, const char *key, bool v)
{
    envelope_key(e, key);
    jbuf_bool(&e->buf, v);
}

void envelope_bytes(struct envelope *e, const char *key, const void *data, size_t n)
{
    if (!data) n = 0;
    envelope_key(e, key);
    if (n == 0 || utf8_valid(data, n)) {
        jbuf_str(&e->buf, data ? data : "", n);
        return;
    }
    jbuf_base64(&e->buf, data, n);
    /* ,"<key>_encoding":"base64" -- the key escaped as jbuf_key does */
    jbuf_char(&e->buf, ',');
    jbuf_str(&e->buf, key, strlen(key));
    e->buf.len--; /* reopen the quoted key */
    jbuf_rawz(&e->buf, "_encoding\":\"base64\"");
}

void envelope_payload(struct envelope *e, const void *data, size_t n)
{
    envelope_bytes(e, "payload", data, n);
}

struct message *envelope_finish(struct envelope *e)
{
    return envelope_finish_at(e, clock_mono_us());
}

struct message *envelope_finish_at(struct envelope *e, int64_t received_mono_us)
{
    jbuf_char(&e->buf, '}');
    struct message *m = message_pool_new(e->pool, e->buf.data, e->buf.len);
    m->epoch = e->epoch;
    m->key = e->key;
    memcpy(m->id, e->id, sizeof m->id);
    m->received_mono_us = received_mono_us;
    m->received_wall_ms = e->ts_ms;
    /* keep the buffer (and its capacity) for the next envelope, unless an
     * exceptionally large message grew it: do not pin that memory */
    if (e->buf.cap > ENVELOPE_KEEP_MAX) {
        jbuf_free(&e->buf);
        jbuf_init(&e->buf, 1024);
    } else {
        jbuf_reset(&e->buf);
    }
    e->first = true;
    return m;
}

struct message *envelope_restamp(const struct message *m, uint64_t epoch, bool replayed)
{
    /* The first literal ,"epoch": is the envelope's own: the endpoint name
     * and type before it are JSON strings, where a quote is escaped. */
    static const char key[] = ",\"epoch\":";
    const char *at = memmem(m->json, m->len, key, sizeof key - 1);
    if (!at) return NULL;
    const char *digits = at + sizeof key - 1;
    const char *end = m->json + m->len;
    const char *rest = digits;
    while (rest < end && *rest >= '0' && *rest <= '9') rest++;
    if (rest == digits) return NULL;
    char num[24];
    int nl = snprintf(num, sizeof num, "%llu", (unsigned long long)epoch);
    static const char flag[] = ",\"replayed\":true";
    size_t fl = replayed ? sizeof flag - 1 : 0;
    size_t head = (size_t)(digits - m->json), tail = (size_t)(end - rest);
    struct message *out = message_new(NULL, head + (size_t)nl + fl + tail);
    char *p = out->json;
    memcpy(p, m->json, head);
    memcpy(p + head, num, (size_t)nl);
    if (fl) memcpy(p + head + (size_t)nl, flag, fl);
    memcpy(p + head + (size_t)nl + fl, rest, tail);
    out->epoch = epoch;
    out->fp = m->fp;
    out->key = m->key;
    out->received_mono_us = m->received_mono_us;
    out->received_wall_ms = m->received_wall_ms;
    memcpy(out->id, m->id, sizeof out->id);
    return out;
}
