/* Unit tests: the message envelope (field order, payload encodings, size). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "common/envelope.h"
#include "common/util.h"

static int done_calls;
static enum msg_outcome done_outcome;
static void on_done(void *arg, const struct message *m, enum msg_outcome o)
{
    (void)m;
    done_calls++;
    done_outcome = o;
    *(int *)arg += 1;
}

/* Minimal JSON string decoder for the checks below: s points just after the
 * opening quote; returns the decoded bytes (malloc'd) and their count, and
 * sets *end to the closing quote. Fails the test on malformed input. */
static unsigned char *json_unescape(const char *s, size_t *out_len, const char **end)
{
    size_t cap = strlen(s) + 1, n = 0;
    unsigned char *out = malloc(cap);
    assert_non_null(out);
    const char *p = s;
    while (*p != '"') {
        assert_true(*p != '\0');
        unsigned char c = (unsigned char)*p;
        assert_true(c >= 0x20); /* raw control characters are invalid JSON */
        if (c != '\\') {
            out[n++] = c;
            p++;
            continue;
        }
        p++;
        switch (*p) {
        case '"': out[n++] = '"'; break;
        case '\\': out[n++] = '\\'; break;
        case '/': out[n++] = '/'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'u': {
            char hex[5] = {p[1], p[2], p[3], p[4], 0};
            unsigned v = (unsigned)strtoul(hex, NULL, 16);
            assert_true(v < 0x80); /* the encoder only escapes ASCII controls */
            out[n++] = (unsigned char)v;
            p += 4;
            break;
        }
        default: fail_msg("bad escape \\%c", *p);
        }
        p++;
    }
    *end = p;
    *out_len = n;
    return out;
}

static int b64val(char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

static unsigned char *b64_decode(const char *s, size_t len, size_t *out_len)
{
    assert_int_equal(len % 4, 0);
    unsigned char *out = malloc(len / 4 * 3 + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i += 4) {
        int a = b64val(s[i]), b = b64val(s[i + 1]);
        assert_true(a >= 0 && b >= 0);
        out[n++] = (unsigned char)(a << 2 | b >> 4);
        if (s[i + 2] == '=') break;
        int c = b64val(s[i + 2]);
        assert_true(c >= 0);
        out[n++] = (unsigned char)((b & 15) << 4 | c >> 2);
        if (s[i + 3] == '=') break;
        int d = b64val(s[i + 3]);
        assert_true(d >= 0);
        out[n++] = (unsigned char)((c & 3) << 6 | d);
    }
    *out_len = n;
    return out;
}

/* 2026-12-02T14:00:00.123Z */
static const int64_t T0 = 1796220000123LL;

static void test_field_order_utf8(void **state)
{
    (void)state;
    struct envelope e;
    envelope_init(&e);
    envelope_begin(&e, "orders", "redis_psub", 7, "id-1", T0);
    envelope_strz(&e, "channel", "orders.eu");
    envelope_i64(&e, "n", -3);
    envelope_bool(&e, "redelivered", false);
    envelope_key(&e, "headers");
    jbuf_rawz(&e.buf, "{}");
    envelope_payload(&e, "h\xc3\xa9\n\"x\"", 7);
    struct message *m = envelope_finish(&e);
    assert_string_equal(m->json,
                        "{\"endpoint\":\"orders\",\"type\":\"redis_psub\",\"epoch\":7,\"id\":\"id-1\","
                        "\"received_at\":\"2026-12-02T14:00:00.123Z\",\"channel\":\"orders.eu\","
                        "\"n\":-3,\"redelivered\":false,\"headers\":{},"
                        "\"payload\":\"h\xc3\xa9\\n\\\"x\\\"\"}");
    assert_int_equal(m->len, strlen(m->json));
    assert_int_equal(m->epoch, 7);
    assert_string_equal(m->id, "id-1");
    assert_true(m->received_mono_us > 0);
    assert_int_equal(m->received_wall_ms, T0); /* the warm ring times it by this */
    assert_null(m->next);
    int calls = 0;
    m->done = on_done;
    m->done_arg = &calls;
    message_finish(m, MSG_DELIVERED);
    assert_int_equal(calls, 1);
    assert_int_equal(done_outcome, MSG_DELIVERED);
    /* the envelope is reusable: no id from the source -> a generated one
     * ("g" + 16 hex digits + "-" + count), epoch 0 */
    envelope_begin(&e, "tick", "schedule", 0, NULL, 0);
    m = envelope_finish(&e);
    char want[256];
    snprintf(want, sizeof want, "{\"endpoint\":\"tick\",\"type\":\"schedule\",\"epoch\":0,"
             "\"id\":\"%s\",\"received_at\":\"1970-01-01T00:00:00.000Z\"}", m->id);
    assert_string_equal(m->json, want);
    assert_int_equal(strlen(m->id), 19);
    assert_int_equal(m->id[0], 'g');
    assert_int_equal(m->id[17], '-');
    char first[MESSAGE_ID_MAX];
    strcpy(first, m->id);
    message_finish(m, MSG_DROPPED_SHUTDOWN);
    /* an empty id is none too; the next generated id differs only in its count */
    envelope_begin(&e, "tick", "schedule", 0, "", 0);
    m = envelope_finish(&e);
    assert_non_null(strstr(m->json, "\"id\":\"g"));
    assert_memory_equal(m->id, first, 18);
    assert_string_equal(m->id + 18, "2");
    message_finish(m, MSG_DELIVERED);
    /* received_at's text is kept for the next envelope of the same time
     * only: back to T0, then one millisecond later */
    envelope_begin(&e, "tick", "schedule", 0, NULL, T0);
    m = envelope_finish_at(&e, 77);
    assert_non_null(strstr(m->json, "\"received_at\":\"2026-12-02T14:00:00.123Z\""));
    assert_int_equal(m->received_mono_us, 77);
    message_finish(m, MSG_DELIVERED);
    envelope_begin(&e, "tick", "schedule", 0, NULL, T0 + 1);
    m = envelope_finish(&e);
    assert_non_null(strstr(m->json, "\"received_at\":\"2026-12-02T14:00:00.124Z\""));
    message_finish(m, MSG_DELIVERED);
    envelope_free(&e);
}

static void test_base64_path(void **state)
{
    (void)state;
    struct envelope e;
    envelope_init(&e);
    envelope_begin(&e, "bin", "mqtt", 1, NULL, T0);
    envelope_bytes(&e, "key", "\x00\x01\xff", 3);
    envelope_payload(&e, "\xc0\x80", 2); /* overlong: not valid UTF-8 */
    struct message *m = envelope_finish(&e);
    assert_non_null(strstr(m->json, ",\"key\":\"AAH/\",\"key_encoding\":\"base64\","));
    const char *tail = ",\"payload\":\"wIA=\",\"payload_encoding\":\"base64\"}";
    assert_int_equal(strcmp(m->json + m->len - strlen(tail), tail), 0);
    message_finish(m, MSG_DELIVERED);
    /* NUL bytes are valid UTF-8: JSON string with \u0000 */
    envelope_begin(&e, "bin", "mqtt", 1, NULL, T0);
    envelope_payload(&e, "a\0b", 3);
    m = envelope_finish(&e);
    assert_non_null(strstr(m->json, "\"payload\":\"a\\u0000b\"}"));
    assert_null(strstr(m->json, "payload_encoding"));
    message_finish(m, MSG_DELIVERED);
    /* empty payload */
    envelope_begin(&e, "bin", "mqtt", 1, NULL, T0);
    envelope_payload(&e, NULL, 0);
    m = envelope_finish(&e);
    assert_non_null(strstr(m->json, "\"payload\":\"\"}"));
    message_finish(m, MSG_DELIVERED);
    envelope_free(&e);
}

static void test_escaped_names_and_long_id(void **state)
{
    (void)state;
    struct envelope e;
    envelope_init(&e);
    char id[200];
    memset(id, 'x', sizeof id - 1);
    id[sizeof id - 1] = '\0';
    envelope_begin(&e, "we\"ird\n", "t", 2, id, T0);
    struct message *m = envelope_finish(&e);
    assert_true(strncmp(m->json, "{\"endpoint\":\"we\\\"ird\\n\",", 24) == 0);
    /* the envelope carries the full id; the message header a truncated copy */
    assert_non_null(strstr(m->json, id));
    assert_int_equal(strlen(m->id), MESSAGE_ID_MAX - 1);
    message_finish(m, MSG_DELIVERED);
    envelope_free(&e);
}

/* The head ({"endpoint":..,"type":..,"epoch":N) is kept and reused: it
 * must change with the epoch, the endpoint's and the type's text (also
 * when the same buffer holds new text), and never after a long name that
 * is not kept. */
static void test_head_reused_only_while_the_same(void **state)
{
    (void)state;
    struct envelope e;
    envelope_init(&e);
    char name[100] = "a";
    char longname[100];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    struct {
        const char *endpoint, *type;
        uint64_t epoch;
        const char *want;
    } steps[] = {
        {name, "redis_psub", 7, "{\"endpoint\":\"a\",\"type\":\"redis_psub\",\"epoch\":7,"},
        {name, "redis_psub", 7, "{\"endpoint\":\"a\",\"type\":\"redis_psub\",\"epoch\":7,"},
        {name, "redis_psub", 8, "{\"endpoint\":\"a\",\"type\":\"redis_psub\",\"epoch\":8,"},
        {name, "mqtt", 8, "{\"endpoint\":\"a\",\"type\":\"mqtt\",\"epoch\":8,"},
        {NULL /* name, rewritten */, "mqtt", 8, "{\"endpoint\":\"b\\\"\",\"type\":\"mqtt\",\"epoch\":8,"},
        {longname, "mqtt", 8, NULL},
        {NULL, "mqtt", 8, "{\"endpoint\":\"b\\\"\",\"type\":\"mqtt\",\"epoch\":8,"},
        {"", "", 0, "{\"endpoint\":\"\",\"type\":\"\",\"epoch\":0,"},
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        const char *ep = steps[i].endpoint;
        if (ep == NULL) {
            strcpy(name, "b\""); /* the same buffer, new text */
            ep = name;
        }
        envelope_begin(&e, ep, steps[i].type, steps[i].epoch, NULL, T0);
        envelope_str(&e, "k", "v", 1);
        struct message *m = envelope_finish(&e);
        if (steps[i].want) {
            assert_true(strncmp(m->json, steps[i].want, strlen(steps[i].want)) == 0);
        } else {
            char want[200];
            snprintf(want, sizeof want, "{\"endpoint\":\"%s\",\"type\":\"%s\",\"epoch\":%llu,",
                     ep, steps[i].type, (unsigned long long)steps[i].epoch);
            assert_true(strncmp(m->json, want, strlen(want)) == 0);
        }
        assert_non_null(strstr(m->json, ",\"received_at\":\"2026-12-02T14:00:00.123Z\",\"k\":\"v\"}"));
        assert_int_equal(m->epoch, steps[i].epoch);
        message_finish(m, MSG_DELIVERED);
    }
    envelope_free(&e);
}

static const char *find_payload(const struct message *m)
{
    const char *p = strstr(m->json, ",\"payload\":\"");
    assert_non_null(p);
    return p + strlen(",\"payload\":\"");
}

static void test_16mib_payload_utf8(void **state)
{
    (void)state;
    size_t n = (size_t)16 << 20;
    unsigned char *data = malloc(n);
    assert_non_null(data);
    /* a mix of ASCII, every control character, quotes, backslashes and
     * multi-byte sequences, all valid UTF-8 */
    static const char *const pieces[] = {"abc", "\"", "\\", "\xc3\xa9", "\xe2\x82\xac",
                                         "\xf0\x9f\x98\x80", "\x00", "\x1f", "\n", "\t", " "};
    size_t i = 0, k = 0;
    while (i < n) {
        const char *pc = pieces[k % (sizeof pieces / sizeof pieces[0])];
        size_t pl = (k % 11 == 6) ? 1 : strlen(pc); /* "\x00" has strlen 0 */
        if (i + pl > n) pc = "a", pl = 1;
        if (k % 13 == 0) {
            data[i] = (unsigned char)(k % 32); /* every control character */
            pl = 1;
        } else {
            memcpy(data + i, pc, pl);
        }
        i += pl;
        k++;
    }
    assert_true(utf8_valid(data, n));
    struct envelope e;
    envelope_init(&e);
    envelope_begin(&e, "big", "redis_psub", 3, "m1", T0);
    envelope_payload(&e, data, n);
    struct message *m = envelope_finish(&e);
    printf("16 MiB UTF-8 payload -> %zu byte envelope\n", m->len);
    assert_null(strstr(m->json, "payload_encoding"));
    const char *end = NULL;
    size_t dn = 0;
    unsigned char *dec = json_unescape(find_payload(m), &dn, &end);
    assert_string_equal(end, "\"}");
    assert_int_equal(dn, n);
    assert_memory_equal(dec, data, n);
    free(dec);
    message_finish(m, MSG_DELIVERED);
    /* the buffer was released (not pinned) and the envelope still works */
    assert_true(e.buf.cap < n);
    envelope_begin(&e, "big", "redis_psub", 3, NULL, T0);
    envelope_payload(&e, "ok", 2);
    m = envelope_finish(&e);
    assert_non_null(strstr(m->json, "\"payload\":\"ok\"}"));
    message_finish(m, MSG_DELIVERED);
    envelope_free(&e);
    free(data);
}

static void test_16mib_payload_binary(void **state)
{
    (void)state;
    size_t n = ((size_t)16 << 20) + 1; /* odd length: exercises padding */
    unsigned char *data = malloc(n);
    assert_non_null(data);
    assert_int_equal(random_bytes(data, n), 0);
    data[0] = 0xff; /* certainly invalid UTF-8 */
    struct envelope e;
    envelope_init(&e);
    envelope_begin(&e, "big", "rabbitmq", 9, NULL, T0);
    envelope_payload(&e, data, n);
    struct message *m = envelope_finish(&e);
    printf("16 MiB binary payload -> %zu byte envelope\n", m->len);
    const char *p = find_payload(m);
    const char *q = strchr(p, '"');
    assert_non_null(q);
    assert_string_equal(q, "\",\"payload_encoding\":\"base64\"}");
    size_t dn = 0;
    unsigned char *dec = b64_decode(p, (size_t)(q - p), &dn);
    assert_int_equal(dn, n);
    assert_memory_equal(dec, data, n);
    free(dec);
    message_finish(m, MSG_DELIVERED);
    envelope_free(&e);
    free(data);
}

/* Warm standby replay re-issues a buffered envelope in the new leader's
 * term: only the epoch changes, "replayed":true follows it, and an endpoint
 * name that spells ,"epoch": inside its string cannot fool it. */
static void test_restamp(void **state)
{
    (void)state;
    struct envelope e;
    envelope_init(&e);
    envelope_begin(&e, "x\",\"epoch\":1", "redis_psub", 7, "r00ff", 1764684000123LL);
    envelope_str(&e, "channel", "c", 1);
    envelope_order_key(&e, "c", 1);
    envelope_payload(&e, "hi", 2);
    struct message *m = envelope_finish(&e);
    assert_int_equal(m->key, message_key_hash("c", 1));
    m->fp = 42;
    int calls = 0;
    m->done = on_done;
    m->done_arg = &calls;

    struct message *r = envelope_restamp(m, 1234567890123ULL, true);
    assert_non_null(r);
    assert_int_equal(r->epoch, 1234567890123ULL);
    assert_int_equal(r->fp, 42);
    assert_int_equal(r->key, m->key); /* a replayed message keeps its order */
    assert_string_equal(r->id, "r00ff");
    assert_int_equal(r->received_mono_us, m->received_mono_us);
    assert_int_equal(r->received_wall_ms, m->received_wall_ms);
    assert_null(r->done); /* the callback stays with the original */
    assert_int_equal(r->len, strlen(r->json));
    const char *want = "{\"endpoint\":\"x\\\",\\\"epoch\\\":1\",\"type\":\"redis_psub\","
                       "\"epoch\":1234567890123,\"replayed\":true,\"id\":\"r00ff\",";
    assert_memory_equal(r->json, want, strlen(want));
    assert_non_null(strstr(r->json, "\"channel\":\"c\",\"payload\":\"hi\"}"));

    struct message *same = envelope_restamp(m, 8, false);
    assert_null(strstr(same->json, "replayed"));
    assert_non_null(strstr(same->json, ",\"epoch\":8,\"id\""));
    assert_int_equal(same->len, m->len); /* "7" -> "8": nothing else changed */

    struct message *bad = message_new("{\"no\":1}", 8);
    assert_null(envelope_restamp(bad, 1, true));
    message_finish(bad, MSG_DELIVERED);
    message_finish(r, MSG_DELIVERED);
    message_finish(same, MSG_DELIVERED);
    message_finish(m, MSG_DELIVERED);
    assert_int_equal(calls, 1);
    envelope_free(&e);
}

/* Ordering keys: never 0 (0 is "no key"), an envelope begun anew has none,
 * and parts hash with their lengths ("ab"+"c" is not "a"+"bc"). */
static void test_order_keys(void **state)
{
    (void)state;
    assert_int_not_equal(message_key_hash("", 0), 0);
    assert_int_equal(message_key_hash("orders", 6), message_key_hash("orders", 6));
    assert_int_not_equal(message_key_hash("orders", 6), message_key_hash("orderz", 6));
    const void *p1[] = {"ab", "c"}, *p2[] = {"a", "bc"};
    const size_t l1[] = {2, 1}, l2[] = {1, 2};
    assert_int_not_equal(message_key_hash_parts(p1, l1, 2), message_key_hash_parts(p2, l2, 2));
    assert_int_equal(message_key_hash_parts(p1, l1, 2), message_key_hash_parts(p1, l1, 2));

    struct envelope e;
    envelope_init(&e);
    envelope_begin(&e, "x", "t", 1, NULL, 0);
    envelope_order_key(&e, "k", 1);
    struct message *a = envelope_finish(&e);
    envelope_begin(&e, "x", "t", 1, NULL, 0);
    struct message *b = envelope_finish(&e);
    assert_int_equal(a->key, message_key_hash("k", 1));
    assert_int_equal(b->key, 0);
    message_finish(a, MSG_DELIVERED);
    message_finish(b, MSG_DELIVERED);
    envelope_free(&e);
}

static void test_outcome_names(void **state)
{
    (void)state;
    assert_string_equal(msg_outcome_name(MSG_DELIVERED), "delivered");
    assert_string_equal(msg_outcome_name(MSG_DROPPED_QUEUE_FULL), "queue_full");
    assert_string_equal(msg_outcome_name(MSG_DROPPED_NOT_LEADER), "not_leader");
    assert_string_equal(msg_outcome_name(MSG_DROPPED_SINK_FAILED), "sink_failed");
    assert_string_equal(msg_outcome_name(MSG_DROPPED_SHUTDOWN), "shutdown");
    message_finish(NULL, MSG_DELIVERED); /* no-op */
    struct message *m = message_new("{}", 2);
    assert_string_equal(m->json, "{}");
    assert_int_equal(m->len, 2);
    assert_null(m->done);
    message_finish(m, MSG_DELIVERED);
}

/* Buffers come back to their pool and are reused; at most max_bytes of
 * them are kept. */
static void test_pool_reuse_and_bound(void **state)
{
    (void)state;
    struct message *probe = message_pool_new(NULL, "{}", 2);
    assert_null(probe->pool);
    message_unref(probe);
    struct message_pool *p = message_pool_create(4 * 256); /* four small buffers */
    struct message *a = message_pool_new(p, "{\"a\":1}", 7);
    assert_string_equal(a->json, "{\"a\":1}");
    assert_ptr_equal(a->pool, p);
    assert_true(a->cap >= a->len + 1);
    assert_int_equal(message_pool_outstanding(p), 1);
    a->epoch = 9;
    a->id[0] = 'x';
    message_finish(a, MSG_DELIVERED);
    assert_int_equal(message_pool_outstanding(p), 0);

    struct message *b = message_pool_new(p, "{}", 2);
    assert_ptr_equal(b, a); /* the same buffer, with a fresh header */
    assert_int_equal(b->cap, 256);
    assert_int_equal(b->epoch, 0);
    assert_string_equal(b->id, "");
    assert_int_equal(b->len, 2);
    assert_string_equal(b->json, "{}");

    /* a shared message goes back only at its last unref */
    message_ref(b);
    message_finish(b, MSG_DELIVERED);
    assert_int_equal(message_pool_outstanding(p), 1);
    message_unref(b);
    assert_int_equal(message_pool_outstanding(p), 0);

    /* ten out, ten back: four kept, so the next four are reused and the
     * fifth is not one of the kept ones */
    struct message *m[10];
    for (int i = 0; i < 10; i++) m[i] = message_pool_new(p, "{}", 2);
    assert_int_equal(message_pool_outstanding(p), 10);
    for (int i = 0; i < 10; i++) message_unref(m[i]);
    struct message *again[4];
    for (int i = 0; i < 4; i++) {
        again[i] = message_pool_new(p, "{}", 2);
        bool found = false;
        for (int j = 0; j < 10; j++) found = found || again[i] == m[j];
        assert_true(found);
    }
    for (int i = 0; i < 4; i++) message_unref(again[i]);

    /* too large to keep: a plain message */
    char *big = xmalloc(MESSAGE_POOL_MAX_BYTES);
    memset(big, 'x', MESSAGE_POOL_MAX_BYTES);
    struct message *l = message_pool_new(p, big, MESSAGE_POOL_MAX_BYTES);
    assert_null(l->pool);
    assert_int_equal(l->len, MESSAGE_POOL_MAX_BYTES);
    message_unref(l);
    free(big);

    /* a kept buffer too small for the next message is replaced */
    char mid[1000];
    memset(mid, 'y', sizeof mid);
    struct message *g = message_pool_new(p, mid, sizeof mid);
    assert_int_equal(g->len, sizeof mid);
    assert_true(g->cap >= sizeof mid + 1);
    assert_memory_equal(g->json, mid, sizeof mid);

    /* the owner lets go while g is out: g stays valid, the pool goes with it */
    message_pool_release(p);
    assert_int_equal(g->json[999], 'y');
    message_unref(g);
    message_pool_release(NULL);
}

/* One thread builds, another finishes (as endpoint and forwarder do); the
 * owner lets go while messages are still out. ASan/TSan/valgrind watch. */
struct pool_pipe {
    int fd[2];
    long n;
};

static void *pool_consumer(void *arg)
{
    struct pool_pipe *pp = arg;
    for (long i = 0; i < pp->n; i++) {
        struct message *m;
        size_t got = 0;
        while (got < sizeof m) {
            ssize_t r = read(pp->fd[0], (char *)&m + got, sizeof m - got);
            if (r <= 0) return NULL;
            got += (size_t)r;
        }
        char want[32];
        snprintf(want, sizeof want, "{\"i\":%ld}", i);
        if (strcmp(m->json, want) != 0) {
            message_unref(m);
            return NULL;
        }
        message_finish(m, MSG_DELIVERED);
    }
    return (void *)1;
}

static void test_pool_two_threads(void **state)
{
    (void)state;
    struct pool_pipe pp = {.n = 20000};
    assert_int_equal(pipe(pp.fd), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, pool_consumer, &pp), 0);
    struct envelope e;
    envelope_init(&e);
    for (long i = 0; i < pp.n; i++) {
        char js[32];
        int n = snprintf(js, sizeof js, "{\"i\":%ld}", i);
        struct message *m = message_pool_new(e.pool, js, (size_t)n);
        assert_int_equal(write(pp.fd[1], &m, sizeof m), (ssize_t)sizeof m);
        if (i == pp.n - 100) envelope_free(&e); /* out: 100 or so; the rest are plain */
    }
    void *ok = NULL;
    pthread_join(t, &ok);
    assert_non_null(ok);
    close(pp.fd[0]);
    close(pp.fd[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_field_order_utf8),
        cmocka_unit_test(test_base64_path),
        cmocka_unit_test(test_escaped_names_and_long_id),
        cmocka_unit_test(test_head_reused_only_while_the_same),
        cmocka_unit_test(test_16mib_payload_utf8),
        cmocka_unit_test(test_16mib_payload_binary),
        cmocka_unit_test(test_restamp),
        cmocka_unit_test(test_order_keys),
        cmocka_unit_test(test_outcome_names),
        cmocka_unit_test(test_pool_reuse_and_bound),
        cmocka_unit_test(test_pool_two_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
