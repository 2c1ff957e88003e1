/* Unit tests: rabbitmq endpoint pure logic. AMQP field tables -> JSON (every
 * field kind), a delivery's envelope and ordering key, queue name templates,
 * ack decisions, delivery tag packing,
 * settings table + validation (through libconfig text), create() errors and
 * a create/destroy cycle without a broker. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "endpoints/endpoint.h"
#include "endpoints/rabbitmq_util.h"
#include "common/envelope.h"
#include "common/json.h"

extern const struct endpoint_ops ep_rabbitmq_ops;

static char *table_json(const amqp_table_t *t, int *lost)
{
    struct jbuf b;
    jbuf_init(&b, 64);
    int l = rmq_table_to_json(&b, t);
    if (lost) *lost = l;
    size_t n;
    return jbuf_steal(&b, &n);
}

static amqp_table_entry_t entry(const char *key, amqp_field_value_t v)
{
    amqp_table_entry_t e;
    e.key = amqp_cstring_bytes(key);
    e.value = v;
    return e;
}

static amqp_field_value_t fv(char kind)
{
    amqp_field_value_t v;
    memset(&v, 0, sizeof v);
    v.kind = (uint8_t)kind;
    return v;
}

static void test_table_all_kinds(void **state)
{
    (void)state;
    amqp_field_value_t v[20];
    amqp_table_entry_t e[20];
    int n = 0;
    v[n] = fv(AMQP_FIELD_KIND_BOOLEAN); v[n].value.boolean = 1; e[n] = entry("t", v[n]); n++;
    v[n] = fv(AMQP_FIELD_KIND_I8); v[n].value.i8 = -8; e[n] = entry("b", v[n]); n++;
    v[n] = fv(AMQP_FIELD_KIND_U8); v[n].value.u8 = 200; e[n] = entry("B", v[n]); n++;
    v[n] = fv(AMQP_FIELD_KIND_I16); v[n].value.i16 = -30000; e[n] = entry("s", v[n]); n++;
    v[n] = fv(AMQP_FIELD_KIND_U16); v[n].value.u16 = 65535; e[n] = entry("u", v[n]); n++;
    v[n] = fv(AMQP_FIELD_KIND_I32); v[n].value.i32 = INT32_MIN; e[n] = entry("I", v[n]); n++;
    v[n] = fv(AMQP_FIELD_KIND_U32); v[n].value.u32 = UINT32_MAX; e[n] = entry("i", v[n]); n++;
    v[n] = fv(AMQP_FIELD_KIND_I64); v[n].value.i64 = INT64_MIN; e[n] = entry("l", v[n]); n++;
    v[n] = fv(AMQP_FIELD_KIND_U64); v[n].value.u64 = UINT64_MAX; e[n] = entry("L", v[n]); n++;
    v[n] = fv(AMQP_FIELD_KIND_F32); v[n].value.f32 = 1.5f; e[n] = entry("f", v[n]); n++;
    v[n] = fv(AMQP_FIELD_KIND_F64); v[n].value.f64 = -0.25; e[n] = entry("d", v[n]); n++;
    v[n] = fv(AMQP_FIELD_KIND_DECIMAL); v[n].value.decimal.decimals = 2;
    v[n].value.decimal.value = 12345; e[n] = entry("D", v[n]); n++;
    v[n] = fv(AMQP_FIELD_KIND_TIMESTAMP); v[n].value.u64 = 1700000000; e[n] = entry("T", v[n]); n++;
    v[n] = fv(AMQP_FIELD_KIND_UTF8); v[n].value.bytes = amqp_cstring_bytes("h\xc3\xa9\"q"); e[n] = entry("S", v[n]); n++;
    v[n] = fv(AMQP_FIELD_KIND_BYTES); v[n].value.bytes.bytes = "\x00\x01\xff"; v[n].value.bytes.len = 3;
    e[n] = entry("x", v[n]); n++;
    v[n] = fv(AMQP_FIELD_KIND_VOID); e[n] = entry("V", v[n]); n++;
    amqp_table_t t = { n, e };
    int lost = -1;
    char *js = table_json(&t, &lost);
    assert_int_equal(lost, 0);
    assert_string_equal(js,
                        "{\"t\":true,\"b\":-8,\"B\":200,\"s\":-30000,\"u\":65535,"
                        "\"I\":-2147483648,\"i\":4294967295,\"l\":-9223372036854775808,"
                        "\"L\":18446744073709551615,\"f\":1.5,\"d\":-0.25,\"D\":123.45,"
                        "\"T\":1700000000,\"S\":\"h\xc3\xa9\\\"q\",\"x\":\"AAH/\",\"V\":null}");
    free(js);
}

static void test_table_nested_and_arrays(void **state)
{
    (void)state;
    amqp_field_value_t items[3];
    items[0] = fv(AMQP_FIELD_KIND_I32); items[0].value.i32 = 1;
    items[1] = fv(AMQP_FIELD_KIND_UTF8); items[1].value.bytes = amqp_cstring_bytes("two");
    amqp_table_entry_t inner_e[1];
    amqp_field_value_t f = fv(AMQP_FIELD_KIND_BOOLEAN);
    inner_e[0] = entry("k", f);
    items[2] = fv(AMQP_FIELD_KIND_TABLE);
    items[2].value.table.num_entries = 1;
    items[2].value.table.entries = inner_e;
    amqp_field_value_t arr = fv(AMQP_FIELD_KIND_ARRAY);
    arr.value.array.num_entries = 3;
    arr.value.array.entries = items;
    amqp_field_value_t empty = fv(AMQP_FIELD_KIND_ARRAY);
    amqp_table_entry_t e[2] = { entry("a", arr), entry("e", empty) };
    amqp_table_t t = { 2, e };
    char *js = table_json(&t, NULL);
    assert_string_equal(js, "{\"a\":[1,\"two\",{\"k\":false}],\"e\":[]}");
    free(js);

    amqp_table_t none = { 0, NULL };
    js = table_json(&none, NULL);
    assert_string_equal(js, "{}");
    free(js);
}

static void test_table_edge_values(void **state)
{
    (void)state;
    amqp_field_value_t v[6];
    v[0] = fv(AMQP_FIELD_KIND_DECIMAL); v[0].value.decimal.decimals = 5; v[0].value.decimal.value = 42;
    v[1] = fv(AMQP_FIELD_KIND_DECIMAL); v[1].value.decimal.decimals = 0; v[1].value.decimal.value = 7;
    v[2] = fv(AMQP_FIELD_KIND_DECIMAL); v[2].value.decimal.decimals = 3; v[2].value.decimal.value = 123;
    v[3] = fv(AMQP_FIELD_KIND_F64); v[3].value.f64 = NAN;
    /* a long string that is not UTF-8 is not mangled: base64 */
    v[4] = fv(AMQP_FIELD_KIND_UTF8); v[4].value.bytes.bytes = "\xff\xfe"; v[4].value.bytes.len = 2;
    v[5] = fv('Z'); /* unknown kind */
    amqp_table_entry_t e[6] = { entry("d5", v[0]), entry("d0", v[1]), entry("d3", v[2]),
                                entry("nan", v[3]), entry("bin", v[4]), entry("zz", v[5]) };
    amqp_table_t t = { 6, e };
    int lost = 0;
    char *js = table_json(&t, &lost);
    assert_string_equal(js, "{\"d5\":0.00042,\"d0\":7,\"d3\":0.123,\"nan\":null,\"bin\":\"//4=\","
                            "\"zz\":null}");
    assert_int_equal(lost, 1);
    free(js);
}

static void test_table_depth_limit(void **state)
{
    (void)state;
    /* a chain of nested tables deeper than the limit ends in null */
    enum { DEPTH = RMQ_JSON_MAX_DEPTH + 5 };
    amqp_table_entry_t e[DEPTH];
    for (int i = DEPTH - 1; i >= 0; i--) {
        amqp_field_value_t v = fv(AMQP_FIELD_KIND_TABLE);
        if (i == DEPTH - 1) {
            v = fv(AMQP_FIELD_KIND_I8);
        } else {
            v.value.table.num_entries = 1;
            v.value.table.entries = &e[i + 1];
        }
        e[i] = entry("n", v);
    }
    amqp_table_t t = { 1, e };
    int lost = 0;
    char *js = table_json(&t, &lost);
    assert_int_equal(lost, 1);
    assert_non_null(strstr(js, "null"));
    size_t opens = 0;
    for (char *p = js; *p; p++) opens += *p == '{';
    assert_int_equal(opens, RMQ_JSON_MAX_DEPTH);
    free(js);
}

static void test_queue_template(void **state)
{
    (void)state;
    struct rmq_name_vars v = { "orders", "acme", "rabbitmq", "host1", 4242 };
    char out[256], err[256];
    assert_int_equal(rmq_queue_name_expand("baton.{owner}.{name}", &v, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "baton.acme.orders");
    assert_int_equal(rmq_queue_name_expand("{type}-{hostname}-{pid}", &v, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "rabbitmq-host1-4242");
    assert_int_equal(rmq_queue_name_expand("a{{b}}c", &v, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "a{b}c");
    v.owner = NULL;
    assert_int_equal(rmq_queue_name_expand("x{owner}y", &v, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "xy");

    assert_int_equal(rmq_queue_name_expand("q.{nope}", &v, out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "{nope}"));
    assert_int_equal(rmq_queue_name_expand("q.{name", &v, out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "unclosed"));
    assert_int_equal(rmq_queue_name_expand("q}", &v, out, sizeof out, err, sizeof err), -1);
    assert_int_equal(rmq_queue_name_expand("{owner}", &v, out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "empty"));
    char longt[300];
    memset(longt, 'a', 256);
    longt[256] = 0;
    assert_int_equal(rmq_queue_name_expand(longt, &v, out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "longer than 255"));
    longt[255] = 0;
    assert_int_equal(rmq_queue_name_expand(longt, &v, out, sizeof out, err, sizeof err), 0);
    assert_int_equal(strlen(out), 255);
    /* a small output buffer is respected */
    char small[8];
    assert_int_equal(rmq_queue_name_expand("0123456789", &v, small, sizeof small, err, sizeof err), -1);
    assert_int_equal(rmq_queue_name_check("ok.{pid}", err, sizeof err), 0);
    assert_int_equal(rmq_queue_name_check("bad.{x}", err, sizeof err), -1);
}

static void test_ack_actions(void **state)
{
    (void)state;
    assert_int_equal(rmq_ack_action_for(MSG_DELIVERED, true), RMQ_ACK);
    assert_int_equal(rmq_ack_action_for(MSG_DELIVERED, false), RMQ_ACK);
    assert_int_equal(rmq_ack_action_for(MSG_DROPPED_SINK_FAILED, true), RMQ_NACK_REQUEUE);
    assert_int_equal(rmq_ack_action_for(MSG_DROPPED_QUEUE_FULL, true), RMQ_NACK_REQUEUE);
    assert_int_equal(rmq_ack_action_for(MSG_DROPPED_SINK_FAILED, false), RMQ_NACK_DROP);
    assert_int_equal(rmq_ack_action_for(MSG_DROPPED_QUEUE_FULL, false), RMQ_NACK_DROP);
    assert_int_equal(rmq_ack_action_for(MSG_DROPPED_NOT_LEADER, true), RMQ_LEAVE);
    assert_int_equal(rmq_ack_action_for(MSG_DROPPED_SHUTDOWN, false), RMQ_LEAVE);
}

/* Issue 12: a message whose lease term ended before the sink took it is
 * never delivered in a later term. group: left unacked, so the demotion that
 * always follows a term's end closes the connection and the broker requeues
 * it for the next leader (no nack-requeue: that would redeliver it to this
 * same consumer at once, to end as term_ended again); private: rejected
 * without requeue (dropped, counted by the gateway). */
static void test_ack_action_term_ended(void **state)
{
    (void)state;
    assert_int_equal(rmq_ack_action_for(MSG_DROPPED_TERM_ENDED, true), RMQ_LEAVE);
    assert_int_equal(rmq_ack_action_for(MSG_DROPPED_TERM_ENDED, false), RMQ_NACK_DROP);
    /* never an ack, never a requeue-now, whatever the mode */
    for (int group = 0; group <= 1; group++) {
        enum rmq_ack_action a = rmq_ack_action_for(MSG_DROPPED_TERM_ENDED, group);
        assert_int_not_equal(a, RMQ_ACK);
        assert_int_not_equal(a, RMQ_NACK_REQUEUE);
    }
    /* every outcome has a decision; only a delivery is acked */
    for (int o = MSG_DELIVERED; o <= MSG_DROPPED_TERM_ENDED; o++)
        for (int group = 0; group <= 1; group++) {
            enum rmq_ack_action a = rmq_ack_action_for((enum msg_outcome)o, group);
            assert_true(a == RMQ_ACK || a == RMQ_NACK_REQUEUE || a == RMQ_NACK_DROP || a == RMQ_LEAVE);
            assert_int_equal(a == RMQ_ACK, o == MSG_DELIVERED);
        }
}

/* A delivery on exchange ex with routing key rk and body "b". */
static amqp_envelope_t delivery(const char *ex, const char *rk, uint64_t tag)
{
    amqp_envelope_t d;
    memset(&d, 0, sizeof d);
    d.exchange = amqp_cstring_bytes(ex);
    d.routing_key = amqp_cstring_bytes(rk);
    d.delivery_tag = tag;
    d.message.body = amqp_cstring_bytes("b");
    return d;
}

static struct message *build(struct envelope *e, const amqp_envelope_t *d, const char *queue)
{
    assert_int_equal(rmq_envelope(e, "ev", "rabbitmq", 7, 1764684000123LL, d, queue), 0);
    return envelope_finish(e);
}

/* The envelope of a delivery and its ordering key (issue 36): the routing
 * key's, whatever the exchange, the queue or the properties. */
static void test_envelope_and_order_key(void **state)
{
    (void)state;
    struct envelope e;
    envelope_init(&e);
    amqp_envelope_t d = delivery("orders", "order.created", 5);
    d.redelivered = 1;
    d.message.properties._flags = AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG |
                                  AMQP_BASIC_HEADERS_FLAG;
    d.message.properties.message_id = amqp_cstring_bytes("m-1");
    d.message.properties.content_type = amqp_cstring_bytes("text/plain");
    amqp_table_entry_t hs[1] = {entry("h", fv(AMQP_FIELD_KIND_BOOLEAN))};
    hs[0].value.value.boolean = 1;
    d.message.properties.headers.num_entries = 1;
    d.message.properties.headers.entries = hs;
    struct message *a = build(&e, &d, "q1");
    assert_string_equal(a->json,
        "{\"endpoint\":\"ev\",\"type\":\"rabbitmq\",\"epoch\":7,\"id\":\"m-1\","
        "\"received_at\":\"2025-12-02T14:00:00.123Z\",\"exchange\":\"orders\","
        "\"routing_key\":\"order.created\",\"delivery_tag\":5,\"redelivered\":true,"
        "\"queue\":\"q1\",\"message_id\":\"m-1\",\"content_type\":\"text/plain\","
        "\"headers\":{\"h\":true},\"payload\":\"b\"}");
    assert_string_equal(a->id, "m-1");
    assert_int_equal(a->key, message_key_hash("order.created", 13));
    assert_int_not_equal(a->key, 0);

    /* the same routing key through another exchange, without a queue field
     * or properties: the same key */
    amqp_envelope_t d2 = delivery("audit", "order.created", 6);
    struct message *b = build(&e, &d2, NULL);
    assert_null(strstr(b->json, "\"queue\""));
    assert_non_null(strstr(b->json, "\"id\":\"g")); /* none from the source: generated */
    assert_int_equal(b->id[0], 'g');
    assert_int_equal(b->key, a->key);

    /* another routing key: another key; the empty one is a key too */
    amqp_envelope_t d3 = delivery("orders", "order.paid", 7);
    struct message *c = build(&e, &d3, "q1");
    assert_int_equal(c->key, message_key_hash("order.paid", 10));
    assert_int_not_equal(c->key, a->key);
    amqp_envelope_t d4 = delivery("fanout", "", 8);
    struct message *f = build(&e, &d4, NULL);
    assert_int_equal(f->key, message_key_hash("", 0));
    assert_int_not_equal(f->key, 0);
    assert_int_not_equal(f->key, a->key);

    message_finish(f, MSG_DELIVERED);
    message_finish(c, MSG_DELIVERED);
    message_finish(b, MSG_DELIVERED);
    message_finish(a, MSG_DELIVERED);
    envelope_free(&e);
}

static void test_seq_packing(void **state)
{
    (void)state;
    uint64_t s = rmq_seq_pack(0x1234, 987654321ULL);
    assert_int_equal(rmq_seq_gen(s), 0x1234);
    assert_int_equal(rmq_seq_tag(s), 987654321ULL);
    s = rmq_seq_pack(0x1FFFF, ((uint64_t)1 << 48) - 1);
    assert_int_equal(rmq_seq_gen(s), 0xFFFF);
    assert_int_equal(rmq_seq_tag(s), ((uint64_t)1 << 48) - 1);
}

/* ---- hosts entries ---- */
static void *parse(const char *text, char *err, size_t errlen)
{
    config_t cfg;
    config_init(&cfg);
    if (!config_read_string(&cfg, text)) {
        snprintf(err, errlen, "syntax: %s", config_error_text(&cfg));
        config_destroy(&cfg);
        return NULL;
    }
    void *s = calloc(1, ep_rabbitmq_ops.settings_size);
    struct config_error ce;
    int rc = settings_parse(ep_rabbitmq_ops.settings, config_root_setting(&cfg), NULL,
                            "endpoint 't'", s, &ce);
    config_destroy(&cfg);
    if (rc < 0) {
        snprintf(err, errlen, "%s", ce.msg);
        settings_free(ep_rabbitmq_ops.settings, s);
        free(s);
        return NULL;
    }
    return s;
}

static int check(const char *text, enum guard_kind g, bool force, char *msg, size_t len)
{
    void *s = parse(text, msg, len);
    if (!s) return -2;
    int rc = ep_rabbitmq_ops.validate(s, g, force, msg, len);
    settings_free(ep_rabbitmq_ops.settings, s);
    free(s);
    return rc;
}

static void test_validate(void **state)
{
    (void)state;
    char msg[512];
    assert_int_equal(check("exchange = \"ev\";", GUARD_ACTIVE, false, msg, sizeof msg), 0);
    assert_int_equal(check("port = 5672;", GUARD_ACTIVE, false, msg, sizeof msg), -2);
    assert_non_null(strstr(msg, "exchange"));
    assert_int_equal(check("exchange = \"\";", GUARD_ACTIVE, false, msg, sizeof msg), -1);
    assert_int_equal(check("exchange = \"ev\"; exchange_type = \"topic\";", GUARD_ACTIVE, false,
                           msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "routing_keys"));
    assert_int_equal(check("exchange = \"ev\"; exchange_type = \"topic\"; routing_keys = [\"a.*\", \"b.#\"];",
                           GUARD_ACTIVE, false, msg, sizeof msg), 0);
    assert_int_equal(check("exchange = \"ev\"; exchange_type = \"bogus\";", GUARD_ACTIVE, false, msg,
                           sizeof msg), -2);
    assert_int_equal(check("exchange = \"ev\"; mode = \"group\"; ack = \"auto\";", GUARD_ACTIVE,
                           false, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "after_sink"));
    assert_int_equal(check("exchange = \"ev\"; mode = \"group\";", GUARD_ACTIVE, false, msg,
                           sizeof msg), 0);
    assert_int_equal(check("exchange = \"ev\"; ack = \"sometimes\";", GUARD_ACTIVE, false, msg,
                           sizeof msg), -1);
    assert_int_equal(check("exchange = \"ev\"; user = \"bob\";", GUARD_ACTIVE, false, msg,
                           sizeof msg), -1);
    assert_non_null(strstr(msg, "password"));
    assert_int_equal(check("exchange = \"ev\"; user = \"bob\"; password_env = \"P\";", GUARD_ACTIVE,
                           false, msg, sizeof msg), 0);
    assert_int_equal(check("exchange = \"ev\"; password_env = \"P\"; password_file = \"/f\";",
                           GUARD_ACTIVE, false, msg, sizeof msg), -1);
    assert_int_equal(check("exchange = \"ev\"; ca_file = \"/ca.pem\";", GUARD_ACTIVE, false, msg,
                           sizeof msg), -1);
    assert_non_null(strstr(msg, "tls"));
    assert_int_equal(check("exchange = \"ev\"; tls = true;", GUARD_ACTIVE, false, msg, sizeof msg), -1);
    assert_int_equal(check("exchange = \"ev\"; tls = true; verify_peer = false;", GUARD_ACTIVE,
                           false, msg, sizeof msg), 0);
    assert_int_equal(check("exchange = \"ev\"; tls = true; ca_file = \"/ca\"; cert_file = \"/c\";",
                           GUARD_ACTIVE, false, msg, sizeof msg), -1);
    assert_int_equal(check("exchange = \"ev\"; queue = \"q.{what}\";", GUARD_ACTIVE, false, msg,
                           sizeof msg), -1);
    assert_non_null(strstr(msg, "{what}"));
    assert_int_equal(check("exchange = \"ev\"; bind_headers = [\"a=1\"];", GUARD_ACTIVE, false,
                           msg, sizeof msg), -1);
    assert_int_equal(check("exchange = \"ev\"; exchange_type = \"headers\"; bind_headers = [\"a=1\", \"b=x\"];",
                           GUARD_ACTIVE, false, msg, sizeof msg), 0);
    assert_int_equal(check("exchange = \"ev\"; exchange_type = \"headers\"; bind_headers = [\"=1\"];",
                           GUARD_ACTIVE, false, msg, sizeof msg), -1);
    /* a private queue per replica without a guard duplicates everything */
    assert_int_equal(check("exchange = \"ev\";", GUARD_NONE, false, msg, sizeof msg), -1);
    assert_int_equal(check("exchange = \"ev\";", GUARD_NONE, true, msg, sizeof msg), 0);
    assert_int_equal(check("exchange = \"ev\"; mode = \"group\";", GUARD_NONE, false, msg, sizeof msg), 0);
    assert_int_equal(check("exchange = \"ev\"; reconnect_min_ms = 900; reconnect_max_ms = 100;",
                           GUARD_ACTIVE, false, msg, sizeof msg), -1);
    assert_int_equal(check("exchange = \"ev\"; prefetch = 0;", GUARD_ACTIVE, false, msg, sizeof msg), -2);
    /* hosts: a list replacing host, each entry checked, never both */
    assert_int_equal(check("exchange = \"ev\"; hosts = [\"a:5673\", \"[::1]\", \"b\"];",
                           GUARD_ACTIVE, false, msg, sizeof msg), 0);
    assert_int_equal(check("exchange = \"ev\"; hosts = \"a:5673\";", GUARD_ACTIVE, false, msg,
                           sizeof msg), 0);
    assert_int_equal(check("exchange = \"ev\"; host = \"x\"; port = 5673;", GUARD_ACTIVE, false,
                           msg, sizeof msg), 0);
    assert_int_equal(check("exchange = \"ev\"; host = \"x\"; hosts = [\"a\", \"b\"];",
                           GUARD_ACTIVE, false, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "'host'"));
    assert_non_null(strstr(msg, "'hosts'"));
    assert_int_equal(check("exchange = \"ev\"; hosts = [\"a:5673\", \"b:0\"];", GUARD_ACTIVE,
                           false, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "hosts[1]"));
    assert_non_null(strstr(msg, "b:0"));
    assert_int_equal(check("exchange = \"ev\"; hosts = [\"::1\"];", GUARD_ACTIVE, false, msg,
                           sizeof msg), -1);
    assert_non_null(strstr(msg, "[::1]:5672"));
    assert_int_equal(check("exchange = \"ev\"; hosts = [1, 2];", GUARD_ACTIVE, false, msg,
                           sizeof msg), -2);
}

/* ---- create() errors and a create/destroy cycle without a broker ---- */

static uint64_t zero_epoch(const struct endpoint_host *h) { (void)h; return 0; }

static void test_create(void **state)
{
    (void)state;
    struct ep_stats stats;
    memset(&stats, 0, sizeof stats);
    struct endpoint_host host = { .name = "t", .type = "rabbitmq", .guard = GUARD_ACTIVE,
                                  .stats = &stats, .epoch = zero_epoch, .lease_ttl_ms = 3000 };
    char err[512];
    void *s = parse("exchange = \"ev\"; user = \"bob\"; password_env = \"BATON_TEST_NO_SUCH_VAR\";",
                    err, sizeof err);
    assert_non_null(s);
    unsetenv("BATON_TEST_NO_SUCH_VAR");
    assert_null(ep_rabbitmq_ops.create(s, &host, err, sizeof err));
    assert_non_null(strstr(err, "BATON_TEST_NO_SUCH_VAR"));
    setenv("BATON_TEST_NO_SUCH_VAR", "secret", 1);
    void *ep = ep_rabbitmq_ops.create(s, &host, err, sizeof err);
    assert_non_null(ep);
    ep_rabbitmq_ops.stop(ep); /* never started: a no-op */
    ep_rabbitmq_ops.destroy(ep);
    settings_free(ep_rabbitmq_ops.settings, s);
    free(s);

    /* a hosts list: created and freed without a broker */
    s = parse("exchange = \"ev\"; port = 5673; hosts = [\"a\", \"b:5674\", \"[::1]:5675\"];",
              err, sizeof err);
    assert_non_null(s);
    ep = ep_rabbitmq_ops.create(s, &host, err, sizeof err);
    assert_non_null(ep);
    ep_rabbitmq_ops.destroy(ep);
    /* create checks again (an endpoint built without the loader) */
    settings_free(ep_rabbitmq_ops.settings, s);
    free(s);
    s = parse("exchange = \"ev\"; hosts = [\"a\", \"b:99999\"];", err, sizeof err);
    assert_non_null(s);
    assert_null(ep_rabbitmq_ops.create(s, &host, err, sizeof err));
    assert_non_null(strstr(err, "hosts[1]"));
    settings_free(ep_rabbitmq_ops.settings, s);
    free(s);

    /* a template that expands beyond the AMQP short string limit */
    char text[512];
    char name[301];
    memset(name, 'q', 300);
    name[300] = 0;
    snprintf(text, sizeof text, "exchange = \"ev\"; mode = \"group\"; queue = \"%s.{pid}\";", name);
    s = parse(text, err, sizeof err);
    assert_non_null(s);
    assert_null(ep_rabbitmq_ops.create(s, &host, err, sizeof err));
    assert_non_null(strstr(err, "longer than"));
    settings_free(ep_rabbitmq_ops.settings, s);
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_all_kinds),
        cmocka_unit_test(test_table_nested_and_arrays),
        cmocka_unit_test(test_table_edge_values),
        cmocka_unit_test(test_table_depth_limit),
        cmocka_unit_test(test_queue_template),
        cmocka_unit_test(test_ack_actions),
        cmocka_unit_test(test_ack_action_term_ended),
        cmocka_unit_test(test_envelope_and_order_key),
        cmocka_unit_test(test_seq_packing),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_create),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
