/* Unit tests: redis_psub reply decoding, envelope building, settings
 * validation, create() errors. No server: replies are built by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "endpoints/redis_psub.h"

/* ---- hand-built replies (freed with free_reply, not freeReplyObject) ---- */

static redisReply *rstr(int type, const char *s, size_t n)
{
    redisReply *r = calloc(1, sizeof *r);
    r->type = type;
    r->str = malloc(n + 1);
    memcpy(r->str, s, n);
    r->str[n] = 0;
    r->len = (int)n;
    return r;
}
static redisReply *bulk(const char *s) { return rstr(REDIS_REPLY_STRING, s, strlen(s)); }
static redisReply *rinteger(long long v)
{
    redisReply *r = calloc(1, sizeof *r);
    r->type = REDIS_REPLY_INTEGER;
    r->integer = v;
    return r;
}
static redisReply *rnil(void)
{
    redisReply *r = calloc(1, sizeof *r);
    r->type = REDIS_REPLY_NIL;
    return r;
}
static redisReply *arr(size_t n, ...)
{
    redisReply *r = calloc(1, sizeof *r);
    r->type = REDIS_REPLY_ARRAY;
    r->elements = n;
    r->element = calloc(n ? n : 1, sizeof *r->element);
    va_list ap;
    va_start(ap, n);
    for (size_t i = 0; i < n; i++) r->element[i] = va_arg(ap, redisReply *);
    va_end(ap);
    return r;
}
static void free_reply(redisReply *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->elements; i++) free_reply(r->element[i]);
    free(r->element);
    free(r->str);
    free(r);
}

static void test_decode_pmessage(void **state)
{
    (void)state;
    redisReply *r = arr(4, bulk("pmessage"), bulk("orders.*"), bulk("orders.created"), bulk("{\"a\":1}"));
    struct psub_event ev;
    assert_int_equal(redis_psub_decode(r, &ev), PSUB_PMESSAGE);
    assert_int_equal(ev.pattern_len, 8);
    assert_memory_equal(ev.pattern, "orders.*", 8);
    assert_int_equal(ev.channel_len, 14);
    assert_memory_equal(ev.channel, "orders.created", 14);
    assert_int_equal(ev.payload_len, 7);
    assert_memory_equal(ev.payload, "{\"a\":1}", 7);
    free_reply(r);
}

static void test_decode_message_binary_payload(void **state)
{
    (void)state;
    redisReply *r = arr(3, bulk("message"), bulk("audit"), rstr(REDIS_REPLY_STRING, "a\0\xff", 3));
    struct psub_event ev;
    assert_int_equal(redis_psub_decode(r, &ev), PSUB_MESSAGE);
    assert_null(ev.pattern);
    assert_int_equal(ev.payload_len, 3);
    assert_memory_equal(ev.payload, "a\0\xff", 3);
    free_reply(r);
}

static void test_decode_confirmations(void **state)
{
    (void)state;
    struct psub_event ev;
    redisReply *r = arr(3, bulk("psubscribe"), bulk("a.*"), rinteger(1));
    assert_int_equal(redis_psub_decode(r, &ev), PSUB_SUBSCRIBED);
    assert_int_equal(ev.pattern_sub, 1);
    assert_int_equal(ev.channel_len, 3);
    free_reply(r);
    r = arr(3, bulk("subscribe"), bulk("chan"), rinteger(2));
    assert_int_equal(redis_psub_decode(r, &ev), PSUB_SUBSCRIBED);
    assert_int_equal(ev.pattern_sub, 0);
    free_reply(r);
    r = arr(3, bulk("punsubscribe"), rnil(), rinteger(0));
    assert_int_equal(redis_psub_decode(r, &ev), PSUB_UNSUBSCRIBED);
    assert_int_equal(ev.pattern_sub, 1);
    assert_null(ev.channel);
    free_reply(r);
}

static void test_decode_pong_and_error(void **state)
{
    (void)state;
    struct psub_event ev;
    redisReply *r = arr(2, bulk("pong"), bulk(""));
    assert_int_equal(redis_psub_decode(r, &ev), PSUB_PONG);
    free_reply(r);
    r = rstr(REDIS_REPLY_STATUS, "PONG", 4);
    assert_int_equal(redis_psub_decode(r, &ev), PSUB_PONG);
    free_reply(r);
    r = rstr(REDIS_REPLY_ERROR, "NOPERM this user has no permissions", 35);
    assert_int_equal(redis_psub_decode(r, &ev), PSUB_ERROR);
    assert_int_equal(ev.payload_len, 35);
    assert_memory_equal(ev.payload, "NOPERM", 6);
    free_reply(r);
}

/* Every malformed shape is reported, never dereferenced past its end. */
static void test_decode_malformed(void **state)
{
    (void)state;
    struct psub_event ev;
    redisReply *cases[] = {
        rinteger(5),
        rnil(),
        rstr(REDIS_REPLY_STATUS, "OK", 2),
        arr(0),
        arr(1, rinteger(1)),
        arr(1, bulk("pmessage")),
        arr(3, bulk("pmessage"), bulk("p"), bulk("c")),
        arr(4, bulk("pmessage"), bulk("p"), rinteger(1), bulk("x")),
        arr(4, bulk("pmessage"), bulk("p"), bulk("c"), arr(0)),
        arr(2, bulk("message"), bulk("c")),
        arr(4, bulk("message"), bulk("c"), bulk("x"), bulk("y")),
        arr(3, bulk("message"), rnil(), bulk("x")),
        arr(3, bulk("subscribe"), bulk("c"), bulk("1")),
        arr(2, bulk("psubscribe"), bulk("c")),
        arr(3, bulk("subscribe"), rinteger(1), rinteger(1)),
        arr(3, bulk("messages"), bulk("c"), bulk("x")),
        arr(3, bulk("MESSAGE"), bulk("c"), bulk("x")),
        arr(4, bulk("pmessag"), bulk("p"), bulk("c"), bulk("x")),
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        enum psub_kind k = redis_psub_decode(cases[i], &ev);
        if (k != PSUB_MALFORMED) fail_msg("case %zu decoded as %d, expected MALFORMED", i, (int)k);
        assert_non_null(ev.payload);
        assert_int_equal(strlen(ev.payload), ev.payload_len);
        free_reply(cases[i]);
    }
}

static char *envelope_of(const struct psub_event *ev, uint64_t epoch)
{
    struct envelope e;
    envelope_init(&e);
    redis_psub_envelope(&e, "orders", epoch, 1764684000123LL, ev, NULL);
    struct message *m = envelope_finish(&e);
    assert_int_equal(m->epoch, epoch);
    /* no id from Redis: a generated one, cut out here so the cases compare
     * the rest */
    assert_int_equal(m->id[0], 'g');
    char gen[MESSAGE_ID_MAX + 16];
    snprintf(gen, sizeof gen, ",\"id\":\"%s\"", m->id);
    char *s = strdup(m->json);
    char *at = strstr(s, gen);
    assert_non_null(at);
    memmove(at, at + strlen(gen), strlen(at + strlen(gen)) + 1);
    message_finish(m, MSG_DELIVERED);
    envelope_free(&e);
    return s;
}

/* failover = "replay": a standby keeps the raw record; rendered later it is
 * the envelope the leader built for the same event (live), or that
 * envelope restamped with "replayed":true (replayed). */
static void test_raw_record_renders_the_envelope(void **state)
{
    (void)state;
    redisReply *rs[2] = {
        arr(4, bulk("pmessage"), bulk("o.*"), bulk("o.new"), bulk("seq=1 \xff\x00b")),
        arr(3, bulk("message"), bulk("audit"), bulk("")),
    };
    static const char *const channels[2] = {"o.new", "audit"};
    for (int i = 0; i < 2; i++) {
        struct psub_event ev;
        redis_psub_decode(rs[i], &ev);
        struct envelope e;
        envelope_init(&e);
        redis_psub_envelope(&e, "orders", 9, 1764684000123LL, &ev, "r00000000000000ab");
        struct message *lead = envelope_finish(&e);

        /* issue 36: the ordering key is the channel, on the raw record too,
         * and the rendered message keeps it */
        uint64_t key = message_key_hash(channels[i], strlen(channels[i]));
        assert_int_equal(lead->key, key);
        struct message *raw = redis_psub_raw(&ev, 1764684000123LL, 42, 0xab);
        raw->fp = 77;
        assert_true(raw->raw);
        assert_int_equal(raw->key, key);
        struct message *live = redis_psub_render("orders", &e, raw, 9, false);
        assert_non_null(live);
        assert_string_equal(live->json, lead->json);
        assert_string_equal(live->id, "r00000000000000ab");
        assert_int_equal(live->fp, 77);
        assert_int_equal(live->key, key);
        assert_int_equal(live->received_mono_us, raw->received_mono_us);

        struct message *rep = redis_psub_render("orders", &e, raw, 12, true);
        struct message *want = envelope_restamp(lead, 12, true);
        assert_string_equal(rep->json, want->json);
        assert_int_equal(rep->key, key);

        struct message *junk = message_new("xx", 2);
        junk->raw = true;
        assert_null(redis_psub_render("orders", &e, junk, 1, false));
        assert_null(redis_psub_render("orders", &e, lead, 1, false)); /* not raw */
        message_finish(junk, MSG_DELIVERED);
        message_finish(want, MSG_DELIVERED);
        message_finish(rep, MSG_DELIVERED);
        message_finish(live, MSG_DELIVERED);
        message_finish(raw, MSG_DELIVERED);
        message_finish(lead, MSG_DELIVERED);
        envelope_free(&e);
        free_reply(rs[i]);
    }
}

/* The key of a message published on channel ch (matched by pattern pat
 * when pat is not NULL), from its envelope and from its raw record. */
static uint64_t key_of(const char *pat, const char *ch, uint64_t *raw_key)
{
    redisReply *r = pat ? arr(4, bulk("pmessage"), bulk(pat), bulk(ch), bulk("x"))
                        : arr(3, bulk("message"), bulk(ch), bulk("x"));
    struct psub_event ev;
    redis_psub_decode(r, &ev);
    struct envelope e;
    envelope_init(&e);
    redis_psub_envelope(&e, "orders", 3, 1764684000123LL, &ev, NULL);
    struct message *m = envelope_finish(&e);
    uint64_t k = m->key;
    struct message *raw = redis_psub_raw(&ev, 1764684000123LL, 42, 1);
    *raw_key = raw->key;
    message_finish(raw, MSG_DELIVERED);
    message_finish(m, MSG_DELIVERED);
    envelope_free(&e);
    free_reply(r);
    return k;
}

/* issue 36: messages are ordered per channel, the one they were published
 * on: the pattern that matched them plays no part. */
static void test_order_key_is_the_channel(void **state)
{
    (void)state;
    uint64_t rk;
    uint64_t a = key_of("o.*", "o.new", &rk);
    assert_int_equal(a, message_key_hash("o.new", 5));
    assert_int_equal(rk, a);
    assert_int_not_equal(a, 0);
    /* another channel under the same pattern: another key */
    uint64_t b = key_of("o.*", "o.old", &rk);
    assert_int_equal(b, message_key_hash("o.old", 5));
    assert_int_equal(rk, b);
    assert_int_not_equal(a, b);
    /* the same channel through another pattern, or SUBSCRIBE: the same key */
    assert_int_equal(key_of("o.n*", "o.new", &rk), a);
    assert_int_equal(rk, a);
    assert_int_equal(key_of(NULL, "o.new", &rk), a);
    assert_int_equal(rk, a);
    assert_int_not_equal(a, message_key_hash("o.*", 3));
}

static void test_envelope_pmessage(void **state)
{
    (void)state;
    redisReply *r = arr(4, bulk("pmessage"), bulk("o.*"), bulk("o.\"new\""), bulk("seq=1 \xc3\xa9"));
    struct psub_event ev;
    redis_psub_decode(r, &ev);
    char *s = envelope_of(&ev, 42);
    assert_string_equal(s, "{\"endpoint\":\"orders\",\"type\":\"redis_psub\",\"epoch\":42,"
                           "\"received_at\":\"2025-12-02T14:00:00.123Z\","
                           "\"channel\":\"o.\\\"new\\\"\",\"pattern\":\"o.*\","
                           "\"payload\":\"seq=1 \xc3\xa9\"}");
    free(s);
    free_reply(r);
}

static void test_envelope_message_base64_no_pattern(void **state)
{
    (void)state;
    redisReply *r = arr(3, bulk("message"), bulk("bin"), rstr(REDIS_REPLY_STRING, "\x00\x01\xfe", 3));
    struct psub_event ev;
    redis_psub_decode(r, &ev);
    char *s = envelope_of(&ev, 0);
    assert_null(strstr(s, "\"pattern\""));
    assert_null(strstr(s, "\"id\""));
    assert_non_null(strstr(s, "\"channel\":\"bin\""));
    assert_non_null(strstr(s, "\"payload\":\"AAH+\",\"payload_encoding\":\"base64\""));
    free(s);
    free_reply(r);
}

/* ---- validation ---- */

static char *one[] = {(char *)"a.*"};
static char *two_same[] = {(char *)"a.*", (char *)"a.*"};
static char *with_empty[] = {(char *)"x", (char *)""};

static struct redis_psub_settings base(void)
{
    struct redis_psub_settings s = {0};
    s.conn.host = (char *)"127.0.0.1";
    s.conn.port = 6379;
    s.conn.connect_timeout_ms = s.conn.command_timeout_ms = 1000;
    s.reconnect_min_ms = 100;
    s.reconnect_max_ms = 2000;
    s.ping_interval_ms = 1000;
    s.patterns.v = one;
    s.patterns.n = 1;
    return s;
}

static void test_validate(void **state)
{
    (void)state;
    char msg[400];
    struct redis_psub_settings s = base();
    assert_int_equal(redis_psub_validate(&s, GUARD_ACTIVE, false, msg, sizeof msg), 0);

    s.patterns.n = 0;
    assert_int_equal(redis_psub_validate(&s, GUARD_ACTIVE, false, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "'patterns'"));
    assert_non_null(strstr(msg, "'channels'"));
    s.channels.v = one;
    s.channels.n = 1;
    assert_int_equal(redis_psub_validate(&s, GUARD_ACTIVE, false, msg, sizeof msg), 0);

    s = base();
    s.patterns.v = two_same;
    s.patterns.n = 2;
    assert_int_equal(redis_psub_validate(&s, GUARD_ACTIVE, false, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "twice"));

    s = base();
    s.channels.v = with_empty;
    s.channels.n = 2;
    assert_int_equal(redis_psub_validate(&s, GUARD_ACTIVE, false, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "'channels' element 2 is an empty string"));

    s = base();
    s.reconnect_max_ms = 50;
    assert_int_equal(redis_psub_validate(&s, GUARD_ACTIVE, false, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "reconnect_max_ms"));

    s = base();
    s.conn.password_env = (char *)"X";
    s.conn.password_file = (char *)"/y";
    assert_int_equal(redis_psub_validate(&s, GUARD_ACTIVE, false, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "not both"));

    s = base();
    assert_int_equal(redis_psub_validate(&s, GUARD_ONCE, true, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "no id"));
    assert_int_equal(redis_psub_validate(&s, GUARD_NONE, false, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "force_guard"));
    assert_int_equal(redis_psub_validate(&s, GUARD_NONE, true, msg, sizeof msg), 0);
}

/* ---- create() errors and a create/destroy cycle without a server ---- */

static struct ep_stats stats;
static struct endpoint_host host = {
    .name = "orders", .type = "redis_psub", .guard = GUARD_ACTIVE, .lease_ttl_ms = 3000,
    .stats = &stats,
};

static void test_create_errors_and_cycle(void **state)
{
    (void)state;
    const struct endpoint_ops *ops = endpoint_lookup("redis_psub");
    assert_non_null(ops);
    assert_int_equal(ops->auto_guard(NULL), GUARD_ACTIVE);
    char err[512];
    struct redis_psub_settings s = base();
    s.conn.password_env = (char *)"BATON_TEST_SURELY_UNSET_VARIABLE";
    unsetenv(s.conn.password_env);
    assert_null(ops->create(&s, &host, err, sizeof err));
    assert_non_null(strstr(err, "BATON_TEST_SURELY_UNSET_VARIABLE"));

    s = base();
    s.patterns.n = 0;
    assert_null(ops->create(&s, &host, err, sizeof err));
    assert_non_null(strstr(err, "nothing to subscribe to"));

    s = base();
    setenv("BATON_TEST_PSUB_PW", "secret", 1);
    s.conn.password_env = (char *)"BATON_TEST_PSUB_PW";
    void *ep = ops->create(&s, &host, err, sizeof err);
    assert_non_null(ep);
    ops->stop(ep); /* never started: a no-op */
    ops->destroy(ep);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_pmessage),
        cmocka_unit_test(test_decode_message_binary_payload),
        cmocka_unit_test(test_decode_confirmations),
        cmocka_unit_test(test_decode_pong_and_error),
        cmocka_unit_test(test_decode_malformed),
        cmocka_unit_test(test_order_key_is_the_channel),
        cmocka_unit_test(test_envelope_pmessage),
        cmocka_unit_test(test_raw_record_renders_the_envelope),
        cmocka_unit_test(test_envelope_message_base64_no_pattern),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_create_errors_and_cycle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
