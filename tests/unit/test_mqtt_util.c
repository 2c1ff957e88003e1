/* Unit tests: mqtt endpoint pure logic (topic filters, $share, client ids,
 * server URIs, a message's envelope and ordering key, MQTT 5 properties ->
 * envelope fields) and the endpoint's settings validation / auto guard. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "endpoints/endpoint.h"
#include "endpoints/mqtt_util.h"
#include "common/envelope.h"

extern const struct endpoint_ops ep_mqtt_ops;

static void test_filter_valid(void **state)
{
    (void)state;
    char msg[256];
    const char *ok[] = {"a", "a/b", "a/+/c", "+", "#", "a/#", "+/+/#", "/", "a//b", "$SYS/#",
                        "caf\xc3\xa9/+", "$share/g/a/#", "$share/g/+", NULL};
    for (int i = 0; ok[i]; i++) {
        msg[0] = '\0';
        int rc = mqtt_filter_validate(ok[i], msg, sizeof msg);
        if (rc != 0) fail_msg("'%s' rejected: %s", ok[i], msg);
    }
}

static void test_filter_invalid(void **state)
{
    (void)state;
    char msg[256];
    struct {
        const char *f;
        const char *why;
    } bad[] = {
        {"", "empty"},
        {"a/#/b", "'#'"},
        {"a#", "'#'"},
        {"#a", "'#'"},
        {"a/b+", "'+'"},
        {"a/+b/c", "'+'"},
        {"++", "'+'"},
        {"a/\xff", "UTF-8"},
        {"$share/g", "$share/<group>/<filter>"},
        {"$share//a", "group"},
        {"$share/g+/a", "must not contain"},
        {"$share/g/", "empty"},
        {"$share/g/a/#/b", "'#'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        msg[0] = '\0';
        int rc = mqtt_filter_validate(bad[i].f, msg, sizeof msg);
        if (rc == 0) fail_msg("'%s' accepted", bad[i].f);
        if (!strstr(msg, bad[i].why)) fail_msg("'%s': message '%s' lacks '%s'", bad[i].f, msg, bad[i].why);
    }
    /* too long */
    char *big = malloc(MQTT_STRING_MAX + 2);
    memset(big, 'a', MQTT_STRING_MAX + 1);
    big[MQTT_STRING_MAX + 1] = '\0';
    assert_int_equal(mqtt_filter_validate(big, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "65535"));
    big[MQTT_STRING_MAX] = '\0';
    assert_int_equal(mqtt_filter_validate(big, msg, sizeof msg), 0);
    free(big);
}

static void test_group_and_share(void **state)
{
    (void)state;
    char msg[256];
    assert_int_equal(mqtt_group_validate("workers", msg, sizeof msg), 0);
    assert_int_equal(mqtt_group_validate("", msg, sizeof msg), -1);
    assert_int_equal(mqtt_group_validate("a/b", msg, sizeof msg), -1);
    assert_int_equal(mqtt_group_validate("a#", msg, sizeof msg), -1);
    assert_int_equal(mqtt_group_validate("a+", msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "a+"));

    char *s = mqtt_share_compose("workers", "sensors/+/temp");
    assert_string_equal(s, "$share/workers/sensors/+/temp");
    assert_true(mqtt_filter_is_shared(s));
    assert_int_equal(mqtt_filter_validate(s, msg, sizeof msg), 0);
    free(s);
    s = mqtt_share_compose("g", "#");
    assert_string_equal(s, "$share/g/#");
    free(s);
    assert_false(mqtt_filter_is_shared("share/g/a"));
    assert_false(mqtt_filter_is_shared("$shared/g/a"));
    assert_false(mqtt_filter_is_shared("$SYS/#"));
}

static void test_client_id(void **state)
{
    (void)state;
    char out[128], msg[256];
    int n = mqtt_client_id_format("baton-%n-%h-%p", "orders", "web1", 4242, out, sizeof out, msg, sizeof msg);
    assert_string_equal(out, "baton-orders-web1-4242");
    assert_int_equal(n, (int)strlen(out));
    /* stable per replica: no pid */
    mqtt_client_id_format("%n@%h", "orders", "web1", 1, out, sizeof out, msg, sizeof msg);
    assert_string_equal(out, "orders@web1");
    /* literal, percent escape */
    mqtt_client_id_format("fixed%%id", "x", "y", 1, out, sizeof out, msg, sizeof msg);
    assert_string_equal(out, "fixed%id");
    /* two replicas on one host differ by pid */
    char a[128], b[128];
    mqtt_client_id_format("baton-%n-%h-%p", "e", "h", 100, a, sizeof a, msg, sizeof msg);
    mqtt_client_id_format("baton-%n-%h-%p", "e", "h", 101, b, sizeof b, msg, sizeof msg);
    assert_string_not_equal(a, b);
    /* errors */
    assert_int_equal(mqtt_client_id_format("id-%x", "n", "h", 1, out, sizeof out, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "%x"));
    assert_int_equal(mqtt_client_id_format("id-%", "n", "h", 1, out, sizeof out, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "lone"));
    assert_int_equal(mqtt_client_id_format("", "n", "h", 1, out, sizeof out, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "empty"));
    char small[8];
    assert_int_equal(mqtt_client_id_format("%n", "longer-than-eight", "h", 1, small, sizeof small, msg,
                                           sizeof msg),
                     -1);
    assert_non_null(strstr(msg, "too long"));
}

static void test_server_uri(void **state)
{
    (void)state;
    char msg[256];
    bool tls = true;
    assert_int_equal(mqtt_server_validate("tcp://127.0.0.1:1883", &tls, msg, sizeof msg), 0);
    assert_false(tls);
    assert_int_equal(mqtt_server_validate("ssl://broker.example:8883", &tls, msg, sizeof msg), 0);
    assert_true(tls);
    assert_int_equal(mqtt_server_validate("mqtts://b", &tls, msg, sizeof msg), 0);
    assert_true(tls);
    assert_int_equal(mqtt_server_validate("tcp://[::1]:1883", &tls, msg, sizeof msg), 0);
    assert_int_equal(mqtt_server_validate("http://x:1", &tls, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "tcp://"));
    assert_int_equal(mqtt_server_validate("tcp://", &tls, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "no host"));
    assert_int_equal(mqtt_server_validate("tcp://h:0", &tls, msg, sizeof msg), -1);
    assert_int_equal(mqtt_server_validate("tcp://h:70000", &tls, msg, sizeof msg), -1);
    assert_int_equal(mqtt_server_validate("tcp://h:12x", &tls, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "port"));
    assert_int_equal(mqtt_server_validate(NULL, &tls, msg, sizeof msg), -1);
}

/* servers = [...]: every URI checked, TLS and plain never mixed, the list
 * joined for messages, paho's connected URI matched to its entry. */
static void test_servers_list(void **state)
{
    (void)state;
    char msg[512];
    bool tls = true;
    const char *plain[] = {"tcp://127.0.0.1:1", "mqtt://h2:1883", "ws://h3:80/mqtt", "tcp://[::1]:1883"};
    assert_int_equal(mqtt_servers_validate(plain, 4, &tls, msg, sizeof msg), 0);
    assert_false(tls);
    const char *secure[] = {"ssl://a:8883", "mqtts://b", "wss://c:443"};
    assert_int_equal(mqtt_servers_validate(secure, 3, &tls, msg, sizeof msg), 0);
    assert_true(tls);
    const char *mixed[] = {"tcp://a:1883", "ssl://b:8883"};
    assert_int_equal(mqtt_servers_validate(mixed, 2, &tls, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "ssl://b:8883"));
    assert_non_null(strstr(msg, "tcp://a:1883"));
    assert_non_null(strstr(msg, "only TLS"));
    const char *badport[] = {"tcp://a:1883", "tcp://b:0"};
    assert_int_equal(mqtt_servers_validate(badport, 2, &tls, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "servers[1]"));
    assert_non_null(strstr(msg, "port"));
    const char *badscheme[] = {"http://a"};
    assert_int_equal(mqtt_servers_validate(badscheme, 1, &tls, msg, sizeof msg), -1);
    assert_null(strstr(msg, "servers[")); /* one server: the message of server */
    assert_int_equal(mqtt_servers_validate(badscheme, 0, &tls, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "empty"));

    char *j = mqtt_servers_join(plain, 2);
    assert_string_equal(j, "tcp://127.0.0.1:1, mqtt://h2:1883");
    free(j);
    j = mqtt_servers_join(plain, 1);
    assert_string_equal(j, "tcp://127.0.0.1:1");
    free(j);

    assert_int_equal(mqtt_servers_match(plain, 4, "mqtt://h2:1883"), 1);
    assert_int_equal(mqtt_servers_match(plain, 4, "h2:1883"), 1); /* without the scheme */
    assert_int_equal(mqtt_servers_match(plain, 4, "[::1]:1883"), 3);
    assert_int_equal(mqtt_servers_match(plain, 4, "tcp://elsewhere:1"), -1);
    assert_int_equal(mqtt_servers_match(plain, 4, NULL), -1);
    assert_int_equal(mqtt_servers_match(plain, 4, ""), -1);
}

/* The list is built by hand, as paho hands a received one over (paho's own
 * MQTTProperties_add fails at its first reallocation in 1.3.12). */
static MQTTProperty prop_array[32];

static void add_prop(MQTTProperties *p, const MQTTProperty *x)
{
    assert_true(p->count < (int)(sizeof prop_array / sizeof prop_array[0]));
    p->array = prop_array;
    prop_array[p->count++] = *x;
}

static void add_str(MQTTProperties *p, enum MQTTPropertyCodes id, const char *v, int len)
{
    MQTTProperty x = {.identifier = id};
    x.value.data.data = (char *)v;
    x.value.data.len = len;
    add_prop(p, &x);
}

static void add_user(MQTTProperties *p, const char *k, const char *v)
{
    MQTTProperty x = {.identifier = MQTTPROPERTY_CODE_USER_PROPERTY};
    x.value.data.data = (char *)k;
    x.value.data.len = (int)strlen(k);
    x.value.value.data = (char *)v;
    x.value.value.len = (int)strlen(v);
    add_prop(p, &x);
}

/* Builds an envelope with the given properties; returns its JSON (malloc'd). */
static char *render(const MQTTProperties *p)
{
    struct envelope e;
    envelope_init(&e);
    envelope_begin(&e, "ep", "mqtt", 0, NULL, 0);
    mqtt_properties_to_envelope(p, &e);
    struct message *m = envelope_finish(&e);
    char *s = strdup(m->json);
    message_finish(m, MSG_DELIVERED);
    envelope_free(&e);
    return s;
}

/* The envelope of a message on topic, and its ordering key (issue 36). */
static struct message *on_topic(struct envelope *e, const char *topic, int qos, bool v5)
{
    MQTTAsync_message msg = MQTTAsync_message_initializer;
    msg.payload = (void *)"hi";
    msg.payloadlen = 2;
    msg.qos = qos;
    msg.msgid = 12;
    mqtt_envelope(e, "ep", "mqtt", 3, qos ? "i-1" : NULL, 1764684000123LL, topic, strlen(topic),
                  &msg, v5);
    return envelope_finish(e);
}

static void test_envelope_and_order_key(void **state)
{
    (void)state;
    struct envelope e;
    envelope_init(&e);
    struct message *a = on_topic(&e, "plant/1/temp", 1, true);
    assert_string_equal(a->json,
        "{\"endpoint\":\"ep\",\"type\":\"mqtt\",\"epoch\":3,\"id\":\"i-1\","
        "\"received_at\":\"2025-12-02T14:00:00.123Z\",\"topic\":\"plant/1/temp\",\"qos\":1,"
        "\"retained\":false,\"dup\":false,\"packet_id\":12,\"payload\":\"hi\"}");
    /* the topic the message was published on: one key per topic */
    assert_int_equal(a->key, message_key_hash("plant/1/temp", 12));
    assert_int_not_equal(a->key, 0);
    struct message *b = on_topic(&e, "plant/1/temp", 0, false);
    assert_null(strstr(b->json, "packet_id"));
    assert_non_null(strstr(b->json, "\"id\":\"g")); /* none from the source: generated */
    assert_int_equal(b->key, a->key);
    struct message *c = on_topic(&e, "plant/2/temp", 1, true);
    assert_int_equal(c->key, message_key_hash("plant/2/temp", 12));
    assert_int_not_equal(c->key, a->key);
    message_finish(c, MSG_DELIVERED);
    message_finish(b, MSG_DELIVERED);
    message_finish(a, MSG_DELIVERED);
    envelope_free(&e);
}

static void test_properties_json(void **state)
{
    (void)state;
    MQTTProperties p = MQTTProperties_initializer;
    add_str(&p, MQTTPROPERTY_CODE_CONTENT_TYPE, "application/json", 16);
    add_str(&p, MQTTPROPERTY_CODE_RESPONSE_TOPIC, "reply/1", 7);
    add_str(&p, MQTTPROPERTY_CODE_CORRELATION_DATA, "\xff\x00\x01", 3); /* binary */
    MQTTProperty fmt = {.identifier = MQTTPROPERTY_CODE_PAYLOAD_FORMAT_INDICATOR};
    fmt.value.byte = 1;
    add_prop(&p, &fmt);
    MQTTProperty exp = {.identifier = MQTTPROPERTY_CODE_MESSAGE_EXPIRY_INTERVAL};
    exp.value.integer4 = 60;
    add_prop(&p, &exp);
    MQTTProperty sid = {.identifier = MQTTPROPERTY_CODE_SUBSCRIPTION_IDENTIFIER};
    sid.value.integer4 = 7;
    add_prop(&p, &sid);
    MQTTProperty alias = {.identifier = MQTTPROPERTY_CODE_TOPIC_ALIAS};
    alias.value.integer2 = 3;
    add_prop(&p, &alias);
    add_user(&p, "tenant", "acme");
    add_user(&p, "tag", "a");
    add_user(&p, "message-id", "m-42");
    add_user(&p, "tag", "b\"q");
    add_user(&p, "tag", "c");

    char *s = render(&p);
    assert_non_null(strstr(s, "\"content_type\":\"application/json\""));
    assert_non_null(strstr(s, "\"response_topic\":\"reply/1\""));
    /* base64 of ff 00 01 */
    assert_non_null(strstr(s, "\"correlation_data\":\"/wAB\",\"correlation_data_encoding\":\"base64\""));
    assert_non_null(strstr(s, "\"payload_format_indicator\":1"));
    assert_non_null(strstr(s, "\"message_expiry_interval\":60"));
    assert_non_null(strstr(s, "\"subscription_identifiers\":[7]"));
    assert_null(strstr(s, "alias"));
    assert_non_null(strstr(s, "\"user_properties\":{\"tenant\":\"acme\",\"tag\":[\"a\",\"b\\\"q\",\"c\"],\"message-id\":\"m-42\"}"));

    char id[MESSAGE_ID_MAX];
    assert_true(mqtt_properties_find_user(&p, "message-id", id, sizeof id));
    assert_string_equal(id, "m-42");
    assert_true(mqtt_properties_find_user(&p, "tag", id, sizeof id));
    assert_string_equal(id, "a"); /* the first value */
    assert_false(mqtt_properties_find_user(&p, "nope", id, sizeof id));
    char tiny[3];
    assert_true(mqtt_properties_find_user(&p, "tenant", tiny, sizeof tiny));
    assert_string_equal(tiny, "ac");
    free(s);

    /* no properties: nothing written */
    MQTTProperties none = MQTTProperties_initializer;
    s = render(&none);
    assert_null(strstr(s, "user_properties"));
    assert_null(strstr(s, "content_type"));
    free(s);
}

/* ---- settings: auto guard and validate() --------------------------------- */

/* Mirror of the fields the tests set; filled through the settings table so the
 * layout stays the endpoint's own. */
static void *parse(const char *text, char *err, size_t errlen)
{
    config_t cfg;
    config_init(&cfg);
    if (config_read_string(&cfg, text) != CONFIG_TRUE) {
        snprintf(err, errlen, "libconfig: %s", config_error_text(&cfg));
        config_destroy(&cfg);
        return NULL;
    }
    void *s = calloc(1, ep_mqtt_ops.settings_size);
    struct config_error cerr;
    int rc = settings_parse(ep_mqtt_ops.settings, config_root_setting(&cfg), NULL, "endpoint 't'", s, &cerr);
    config_destroy(&cfg);
    if (rc != 0) {
        config_error_format(&cerr, err, errlen);
        settings_free(ep_mqtt_ops.settings, s);
        free(s);
        return NULL;
    }
    return s;
}

static void release(void *s)
{
    settings_free(ep_mqtt_ops.settings, s);
    free(s);
}

/* ack = after_sink, QoS 1/2 (issue 12): a message whose lease term ended
 * before the sink took it is never emitted again (not in a later term
 * either): it waits for the stop() that always follows a term's end, like
 * not_leader and shutdown; only queue evictions and sink failures within a
 * running term are re-emitted; only a delivery returns (acknowledges) at
 * once. */
static void test_after_sink_verdict_term_ended(void **state)
{
    (void)state;
    assert_int_equal(mqtt_after_sink_verdict(MSG_DROPPED_TERM_ENDED), MQTT_VERDICT_AWAIT_STOP);
    assert_int_equal(mqtt_after_sink_verdict(MSG_DROPPED_NOT_LEADER), MQTT_VERDICT_AWAIT_STOP);
    assert_int_equal(mqtt_after_sink_verdict(MSG_DROPPED_SHUTDOWN), MQTT_VERDICT_AWAIT_STOP);
    assert_int_equal(mqtt_after_sink_verdict(MSG_DROPPED_QUEUE_FULL), MQTT_VERDICT_REEMIT);
    assert_int_equal(mqtt_after_sink_verdict(MSG_DROPPED_SINK_FAILED), MQTT_VERDICT_REEMIT);
    assert_int_equal(mqtt_after_sink_verdict(MSG_DELIVERED), MQTT_VERDICT_ACK);
    for (int o = MSG_DELIVERED; o <= MSG_DROPPED_TERM_ENDED; o++) {
        enum mqtt_verdict v = mqtt_after_sink_verdict((enum msg_outcome)o);
        assert_int_equal(v == MQTT_VERDICT_ACK, o == MSG_DELIVERED);
    }
    /* an outcome unknown to this build is never re-emitted */
    assert_int_equal(mqtt_after_sink_verdict((enum msg_outcome)(MSG_DROPPED_TERM_ENDED + 1)),
                     MQTT_VERDICT_AWAIT_STOP);
}

static void test_auto_guard_and_validate(void **state)
{
    (void)state;
    char err[512], msg[1024];
    void *s = parse("topics = [\"a/#\"]; shared_group = \"g\";", err, sizeof err);
    assert_non_null(s);
    assert_int_equal(ep_mqtt_ops.auto_guard(s), GUARD_NONE);
    assert_int_equal(ep_mqtt_ops.validate(s, GUARD_NONE, false, msg, sizeof msg), 0);
    /* a guard on a $share subscription: rejected with the reason, unless forced */
    assert_int_equal(ep_mqtt_ops.validate(s, GUARD_ACTIVE, false, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "at-most-once"));
    assert_non_null(strstr(msg, "force_guard"));
    assert_int_equal(ep_mqtt_ops.validate(s, GUARD_ACTIVE, true, msg, sizeof msg), 0);
    release(s);

    s = parse("topics = [\"a/#\", \"b\"];", err, sizeof err);
    assert_int_equal(ep_mqtt_ops.auto_guard(s), GUARD_ACTIVE);
    assert_int_equal(ep_mqtt_ops.validate(s, GUARD_ACTIVE, false, msg, sizeof msg), 0);
    release(s);

    /* $share written by hand counts as shared */
    s = parse("topics = [\"$share/g/a\"];", err, sizeof err);
    assert_int_equal(ep_mqtt_ops.auto_guard(s), GUARD_NONE);
    assert_int_equal(ep_mqtt_ops.validate(s, GUARD_ACTIVE, false, msg, sizeof msg), -1);
    release(s);

    struct {
        const char *text;
        const char *why;
    } bad[] = {
        {"topics = [\"a/#/b\"];", "topics[0]"},
        {"topics = [\"a\"]; shared_group = \"g/x\";", "shared_group"},
        {"topics = [\"$share/g/a\"]; shared_group = \"h\";", "already a $share"},
        {"topics = [\"a\"]; server = \"http://x\";", "tcp://"},
        {"topics = [\"a\"]; ca_file = \"/ca.pem\";", "ssl://"},
        {"topics = [\"a\"]; server = \"ssl://h:8883\"; cert_file = \"/c.pem\";", "key_file"},
        {"topics = [\"a\"]; client_id = \"x-%q\";", "client_id"},
        {"topics = [\"a\"]; protocol = \"3.1.1\"; receive_maximum = 10;", "MQTT 5"},
        {"topics = [\"a\"]; reconnect_min_ms = 5000; reconnect_max_ms = 100;", "reconnect_min_ms"},
        {"topics = [\"a\"]; server = \"tcp://a:1\"; servers = [\"tcp://b:1\"];", "'servers'"},
        {"topics = [\"a\"]; server = \"tcp://a:1\"; servers = [\"tcp://b:1\"];", "'server'"},
        {"topics = [\"a\"]; servers = [\"tcp://a:1\", \"ssl://b:2\"];", "only TLS"},
        {"topics = [\"a\"]; servers = [\"tcp://a:1\", \"tcp://b\"]; ca_file = \"/ca.pem\";", "ssl://"},
        {"topics = [\"a\"]; servers = [\"tcp://a:1\", \"tcp://b:x\"];", "servers[1]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s = parse(bad[i].text, err, sizeof err);
        if (!s) fail_msg("'%s' did not parse: %s", bad[i].text, err);
        msg[0] = '\0';
        int rc = ep_mqtt_ops.validate(s, ep_mqtt_ops.auto_guard(s), false, msg, sizeof msg);
        if (rc == 0) fail_msg("'%s' accepted", bad[i].text);
        if (!strstr(msg, bad[i].why)) fail_msg("'%s': '%s' lacks '%s'", bad[i].text, msg, bad[i].why);
        release(s);
    }
    /* servers accepted: plain, TLS with TLS files, a single string */
    const char *good[] = {
        "topics = [\"a\"]; servers = [\"tcp://a:1\", \"tcp://b:2\"];",
        "topics = [\"a\"]; servers = [\"ssl://a:1\", \"mqtts://b\"]; ca_file = \"/ca.pem\";",
        "topics = [\"a\"]; servers = \"tcp://a:1\";",
        "topics = [\"a\"];", /* neither: the default server */
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        s = parse(good[i], err, sizeof err);
        if (!s) fail_msg("'%s' did not parse: %s", good[i], err);
        msg[0] = '\0';
        if (ep_mqtt_ops.validate(s, GUARD_ACTIVE, false, msg, sizeof msg) != 0)
            fail_msg("'%s' refused: %s", good[i], msg);
        release(s);
    }
    /* table-level checks: qos range, protocol choice, topics required */
    assert_null(parse("topics = [\"a\"]; qos = 3;", err, sizeof err));
    assert_null(parse("topics = [\"a\"]; protocol = \"4\";", err, sizeof err));
    assert_null(parse("qos = 1;", err, sizeof err));
    assert_non_null(strstr(err, "topics"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filter_valid),
        cmocka_unit_test(test_filter_invalid),
        cmocka_unit_test(test_group_and_share),
        cmocka_unit_test(test_client_id),
        cmocka_unit_test(test_server_uri),
        cmocka_unit_test(test_servers_list),
        cmocka_unit_test(test_envelope_and_order_key),
        cmocka_unit_test(test_properties_json),
        cmocka_unit_test(test_after_sink_verdict_term_ended),
        cmocka_unit_test(test_auto_guard_and_validate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
