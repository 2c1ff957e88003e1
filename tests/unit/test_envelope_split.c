/* Unit tests: an envelope split into the redis_stream sink's fields
 * (common/envelope_split.h), round trips through envelope.h's writers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/envelope.h"
#include "common/envelope_split.h"

struct split {
    struct jbuf source, payload;
};

static struct split *split_of(const struct message *m)
{
    struct split *s = calloc(1, sizeof *s);
    jbuf_init(&s->source, 16);
    jbuf_init(&s->payload, 16);
    envelope_split_fields(m->json, m->len, &s->source, &s->payload);
    jbuf_char(&s->source, '\0');
    return s;
}

static void split_free(struct split *s)
{
    jbuf_free(&s->source);
    jbuf_free(&s->payload);
    free(s);
}

static struct message *build(const void *payload, size_t n, bool with_headers)
{
    struct envelope e;
    envelope_init(&e);
    envelope_begin(&e, "orders", "redis_psub", 42, "id-1", 1796641081245LL);
    envelope_str(&e, "channel", "chan.\"x\"", 8);
    if (with_headers) {
        envelope_key(&e, "headers");
        jbuf_rawz(&e.buf, "{\"a\":\"}{,\\\"\",\"b\":[1,{\"c\":2}]}");
    }
    if (payload) envelope_payload(&e, payload, n);
    struct message *m = envelope_finish(&e);
    envelope_free(&e);
    return m;
}

static void test_text_payload_unescaped(void **state)
{
    (void)state;
    const char p[] = "line \"one\"\n\ttab \\ back, caf\xc3\xa9, \xf0\x9f\x98\x80 \x01 end";
    struct message *m = build(p, sizeof p - 1, false);
    struct split *s = split_of(m);
    assert_int_equal(s->payload.len, sizeof p - 1);
    assert_memory_equal(s->payload.data, p, sizeof p - 1);
    /* the rest, without endpoint, epoch, id, payload */
    assert_non_null(strstr(s->source.data, "\"type\":\"redis_psub\""));
    assert_non_null(strstr(s->source.data, "\"received_at\":\""));
    assert_non_null(strstr(s->source.data, "\"channel\":\"chan.\\\"x\\\"\""));
    assert_null(strstr(s->source.data, "\"endpoint\""));
    assert_null(strstr(s->source.data, "\"epoch\""));
    assert_null(strstr(s->source.data, "\"id\""));
    assert_null(strstr(s->source.data, "\"payload\""));
    assert_int_equal(s->source.data[0], '{');
    assert_int_equal(s->source.data[strlen(s->source.data) - 1], '}');
    split_free(s);
    message_unref(m);
}

static void test_binary_payload_decoded(void **state)
{
    (void)state;
    unsigned char p[256];
    for (int i = 0; i < 256; i++) p[i] = (unsigned char)(255 - i);
    for (size_t n = 0; n <= 5; n++) { /* every padding */
        struct message *m = build(p, sizeof p - n, false);
        assert_non_null(strstr(m->json, "\"payload_encoding\":\"base64\""));
        struct split *s = split_of(m);
        assert_int_equal(s->payload.len, sizeof p - n);
        assert_memory_equal(s->payload.data, p, sizeof p - n);
        assert_null(strstr(s->source.data, "payload_encoding"));
        split_free(s);
        message_unref(m);
    }
}

static void test_nested_values_kept_whole(void **state)
{
    (void)state;
    struct message *m = build("x", 1, true);
    struct split *s = split_of(m);
    assert_non_null(strstr(s->source.data, "\"headers\":{\"a\":\"}{,\\\"\",\"b\":[1,{\"c\":2}]}"));
    assert_int_equal(s->payload.len, 1);
    assert_memory_equal(s->payload.data, "x", 1);
    split_free(s);
    message_unref(m);
}

static void test_no_payload(void **state)
{
    (void)state;
    struct message *m = build(NULL, 0, false);
    struct split *s = split_of(m);
    assert_int_equal(s->payload.len, 0);
    assert_non_null(strstr(s->source.data, "\"channel\""));
    split_free(s);
    message_unref(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_payload_unescaped),
        cmocka_unit_test(test_binary_payload_decoded),
        cmocka_unit_test(test_nested_values_kept_whole),
        cmocka_unit_test(test_no_payload),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
