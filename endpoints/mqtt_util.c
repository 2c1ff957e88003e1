/* Pure logic of the mqtt endpoint (see mqtt_util.h). */
#include "endpoints/mqtt_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/util.h"

#define SHARE_PREFIX "$share/"

bool mqtt_filter_is_shared(const char *filter)
{
    return filter && strncmp(filter, SHARE_PREFIX, strlen(SHARE_PREFIX)) == 0;
}

int mqtt_group_validate(const char *group, char *msg, size_t msglen)
{
    if (!group || !*group) {
        snprintf(msg, msglen, "share group name is empty");
        return -1;
    }
    size_t n = strlen(group);
    if (!utf8_valid(group, n)) {
        snprintf(msg, msglen, "share group name '%s' is not valid UTF-8", group);
        return -1;
    }
    if (strpbrk(group, "/+#")) {
        snprintf(msg, msglen, "share group name '%s' must not contain '/', '+' or '#'", group);
        return -1;
    }
    return 0;
}

/* Checks the plain (non-share) part of a filter. */
static int filter_check_plain(const char *f, const char *whole, char *msg, size_t msglen)
{
    size_t n = strlen(f);
    if (n == 0) {
        snprintf(msg, msglen, "topic filter '%s' is empty", whole);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        char c = f[i];
        bool level_start = (i == 0 || f[i - 1] == '/');
        bool level_end = (i + 1 == n || f[i + 1] == '/');
        if (c == '#') {
            if (!level_start || i + 1 != n) {
                snprintf(msg, msglen,
                         "topic filter '%s': '#' must be the whole last level (e.g. 'a/#')", whole);
                return -1;
            }
        } else if (c == '+') {
            if (!level_start || !level_end) {
                snprintf(msg, msglen, "topic filter '%s': '+' must be a whole level (e.g. 'a/+/b')",
                         whole);
                return -1;
            }
        }
    }
    return 0;
}

int mqtt_filter_validate(const char *filter, char *msg, size_t msglen)
{
    if (!filter || !*filter) {
        snprintf(msg, msglen, "topic filter is empty");
        return -1;
    }
    size_t n = strlen(filter);
    if (n > MQTT_STRING_MAX) {
        snprintf(msg, msglen, "topic filter is %zu bytes long (at most %d)", n, MQTT_STRING_MAX);
        return -1;
    }
    if (!utf8_valid(filter, n)) {
        snprintf(msg, msglen, "topic filter '%s' is not valid UTF-8", filter);
        return -1;
    }
    if (mqtt_filter_is_shared(filter)) {
        const char *g = filter + strlen(SHARE_PREFIX);
        const char *slash = strchr(g, '/');
        if (!slash) {
            snprintf(msg, msglen, "shared filter '%s' must be '$share/<group>/<filter>'", filter);
            return -1;
        }
        char group[256];
        size_t gl = (size_t)(slash - g);
        if (gl == 0 || gl >= sizeof group) {
            snprintf(msg, msglen, "shared filter '%s': group name must be 1..%zu bytes", filter,
                     sizeof group - 1);
            return -1;
        }
        memcpy(group, g, gl);
        group[gl] = '\0';
        if (mqtt_group_validate(group, msg, msglen) != 0) return -1;
        return filter_check_plain(slash + 1, filter, msg, msglen);
    }
    return filter_check_plain(filter, filter, msg, msglen);
}

char *mqtt_share_compose(const char *group, const char *filter)
{
    size_t n = strlen(SHARE_PREFIX) + strlen(group) + 1 + strlen(filter) + 1;
    char *s = xmalloc(n);
    snprintf(s, n, "%s%s/%s", SHARE_PREFIX, group, filter);
    return s;
}

int mqtt_client_id_format(const char *tmpl, const char *name, const char *host, long pid,
                          char *out, size_t len, char *msg, size_t msglen)
{
    size_t o = 0;
    char pidbuf[32];
    snprintf(pidbuf, sizeof pidbuf, "%ld", pid);
    if (len == 0) {
        snprintf(msg, msglen, "no room for the client id");
        return -1;
    }
    for (const char *p = tmpl; *p; p++) {
        const char *add;
        size_t addlen;
        char one;
        if (*p == '%') {
            p++;
            switch (*p) {
            case 'n': add = name ? name : ""; break;
            case 'h': add = host ? host : ""; break;
            case 'p': add = pidbuf; break;
            case '%': add = "%"; break;
            case '\0':
                snprintf(msg, msglen, "client id template '%s' ends with a lone '%%'", tmpl);
                return -1;
            default:
                snprintf(msg, msglen,
                         "client id template '%s': unknown escape '%%%c' (use %%n name, %%h host, "
                         "%%p pid, %%%% percent)",
                         tmpl, *p);
                return -1;
            }
            addlen = strlen(add);
        } else {
            one = *p;
            add = &one;
            addlen = 1;
        }
        if (o + addlen >= len || o + addlen > MQTT_STRING_MAX) {
            snprintf(msg, msglen, "client id from template '%s' is too long", tmpl);
            return -1;
        }
        memcpy(out + o, add, addlen);
        o += addlen;
    }
    out[o] = '\0';
    if (o == 0) {
        snprintf(msg, msglen, "client id template '%s' gives an empty client id", tmpl);
        return -1;
    }
    return (int)o;
}

int mqtt_server_validate(const char *uri, bool *tls, char *msg, size_t msglen)
{
    static const struct {
        const char *scheme;
        bool tls;
    } schemes[] = {
        {"tcp://", false}, {"mqtt://", false}, {"ws://", false},
        {"ssl://", true},  {"mqtts://", true}, {"wss://", true},
    };
    if (!uri || !*uri) {
        snprintf(msg, msglen, "server URI is empty (expected e.g. 'tcp://127.0.0.1:1883')");
        return -1;
    }
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        size_t sl = strlen(schemes[i].scheme);
        if (strncmp(uri, schemes[i].scheme, sl) != 0) continue;
        const char *host = uri + sl;
        if (!*host || *host == ':' || *host == '/') {
            snprintf(msg, msglen, "server URI '%s' has no host", uri);
            return -1;
        }
        const char *colon = strrchr(host, ':');
        const char *bracket = strrchr(host, ']');
        if (colon && (!bracket || colon > bracket)) {
            char *end = NULL;
            long port = strtol(colon + 1, &end, 10);
            if (end == colon + 1 || (*end && *end != '/') || port < 1 || port > 65535) {
                snprintf(msg, msglen, "server URI '%s': port must be 1..65535", uri);
                return -1;
            }
        }
        if (tls) *tls = schemes[i].tls;
        return 0;
    }
    snprintf(msg, msglen,
             "server URI '%s' must start with tcp://, mqtt://, ssl://, mqtts://, ws:// or wss://",
             uri);
    return -1;
}

int mqtt_servers_validate(const char *const *uris, size_t n, bool *tls, char *msg,
                          size_t msglen)
{
    if (n == 0) {
        snprintf(msg, msglen, "servers: the list is empty (expected e.g. [\"tcp://h1:1883\", "
                              "\"tcp://h2:1883\"])");
        return -1;
    }
    size_t first_tls = n, first_plain = n;
    for (size_t i = 0; i < n; i++) {
        bool t = false;
        char m[400];
        if (mqtt_server_validate(uris[i], &t, m, sizeof m) != 0) {
            if (n == 1) snprintf(msg, msglen, "%s", m);
            else snprintf(msg, msglen, "servers[%zu]: %s", i, m);
            return -1;
        }
        if (t && first_tls == n) first_tls = i;
        if (!t && first_plain == n) first_plain = i;
    }
    if (first_tls < n && first_plain < n) {
        snprintf(msg, msglen,
                 "servers: '%s' is TLS and '%s' is not; paho uses one TLS setup for every server "
                 "of a connection: list only TLS (ssl://, mqtts://, wss://) or only plain (tcp://, "
                 "mqtt://, ws://) servers",
                 uris[first_tls], uris[first_plain]);
        return -1;
    }
    if (tls) *tls = first_tls < n;
    return 0;
}

char *mqtt_servers_join(const char *const *uris, size_t n)
{
    size_t len = 1;
    for (size_t i = 0; i < n; i++) len += strlen(uris[i]) + 2;
    char *out = xmalloc(len);
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(uris[i]);
        if (i) {
            memcpy(out + o, ", ", 2);
            o += 2;
        }
        memcpy(out + o, uris[i], l);
        o += l;
    }
    out[o] = '\0';
    return out;
}

int mqtt_servers_match(const char *const *uris, size_t n, const char *connected)
{
    if (!connected || !*connected) return -1;
    for (size_t i = 0; i < n; i++)
        if (strcmp(uris[i], connected) == 0) return (int)i;
    /* paho may report the URI without its scheme */
    for (size_t i = 0; i < n; i++) {
        const char *sep = strstr(uris[i], "://");
        if (sep && strcmp(sep + 3, connected) == 0) return (int)i;
    }
    return -1;
}

static void key_bytes(struct envelope *e, const char *key, const char *data, size_t n)
{
    envelope_bytes(e, key, data ? data : "", data ? n : 0);
}

void mqtt_envelope(struct envelope *e, const char *endpoint, const char *type, uint64_t epoch,
                   const char *id, int64_t received_wall_ms, const char *topic, size_t topic_len,
                   const MQTTAsync_message *msg, bool v5)
{
    envelope_begin(e, endpoint, type, epoch, id, received_wall_ms);
    /* ordered per topic */
    envelope_order_key(e, topic, topic_len);
    envelope_str(e, "topic", topic, topic_len);
    envelope_i64(e, "qos", msg->qos);
    envelope_bool(e, "retained", msg->retained != 0);
    envelope_bool(e, "dup", msg->dup != 0);
    if (msg->qos > 0) envelope_i64(e, "packet_id", msg->msgid);
    if (v5) mqtt_properties_to_envelope(&msg->properties, e);
    envelope_payload(e, msg->payload, msg->payloadlen > 0 ? (size_t)msg->payloadlen : 0);
}

void mqtt_properties_to_envelope(const MQTTProperties *props, struct envelope *e)
{
    if (!props || props->count <= 0) return;
    bool have_sub_ids = false, have_user = false;
    for (int i = 0; i < props->count; i++) {
        const MQTTProperty *p = &props->array[i];
        switch (p->identifier) {
        case MQTTPROPERTY_CODE_PAYLOAD_FORMAT_INDICATOR:
            envelope_u64(e, "payload_format_indicator", p->value.byte);
            break;
        case MQTTPROPERTY_CODE_MESSAGE_EXPIRY_INTERVAL:
            envelope_u64(e, "message_expiry_interval", p->value.integer4);
            break;
        case MQTTPROPERTY_CODE_CONTENT_TYPE:
            envelope_str(e, "content_type", p->value.data.data, (size_t)p->value.data.len);
            break;
        case MQTTPROPERTY_CODE_RESPONSE_TOPIC:
            envelope_str(e, "response_topic", p->value.data.data, (size_t)p->value.data.len);
            break;
        case MQTTPROPERTY_CODE_CORRELATION_DATA:
            key_bytes(e, "correlation_data", p->value.data.data, (size_t)p->value.data.len);
            break;
        case MQTTPROPERTY_CODE_SUBSCRIPTION_IDENTIFIER: have_sub_ids = true; break;
        case MQTTPROPERTY_CODE_USER_PROPERTY: have_user = true; break;
        default: break; /* topic alias and the like: transport details */
        }
    }
    if (have_sub_ids) {
        envelope_key(e, "subscription_identifiers");
        jbuf_char(&e->buf, '[');
        bool first = true;
        for (int i = 0; i < props->count; i++) {
            const MQTTProperty *p = &props->array[i];
            if (p->identifier != MQTTPROPERTY_CODE_SUBSCRIPTION_IDENTIFIER) continue;
            if (!first) jbuf_char(&e->buf, ',');
            first = false;
            jbuf_u64(&e->buf, p->value.integer4);
        }
        jbuf_char(&e->buf, ']');
    }
    if (!have_user) return;
    /* One member per distinct name, in order of first appearance; a name
     * that repeats gets an array of all its values. Quadratic, but a message
     * carries a handful of user properties. */
    envelope_key(e, "user_properties");
    jbuf_char(&e->buf, '{');
    bool first = true;
    for (int i = 0; i < props->count; i++) {
        const MQTTProperty *p = &props->array[i];
        if (p->identifier != MQTTPROPERTY_CODE_USER_PROPERTY) continue;
        const MQTTLenString *k = &p->value.data;
        bool seen = false;
        int count = 0;
        for (int j = 0; j < props->count; j++) {
            const MQTTProperty *q = &props->array[j];
            if (q->identifier != MQTTPROPERTY_CODE_USER_PROPERTY) continue;
            if (q->value.data.len != k->len ||
                (k->len && memcmp(q->value.data.data, k->data, (size_t)k->len) != 0))
                continue;
            if (j < i) seen = true;
            count++;
        }
        if (seen) continue;
        if (!first) jbuf_char(&e->buf, ',');
        first = false;
        jbuf_str(&e->buf, k->data ? k->data : "", k->data ? (size_t)k->len : 0);
        jbuf_char(&e->buf, ':');
        if (count > 1) jbuf_char(&e->buf, '[');
        bool vfirst = true;
        for (int j = i; j < props->count; j++) {
            const MQTTProperty *q = &props->array[j];
            if (q->identifier != MQTTPROPERTY_CODE_USER_PROPERTY) continue;
            if (q->value.data.len != k->len ||
                (k->len && memcmp(q->value.data.data, k->data, (size_t)k->len) != 0))
                continue;
            if (!vfirst) jbuf_char(&e->buf, ',');
            vfirst = false;
            const MQTTLenString *v = &q->value.value;
            jbuf_str(&e->buf, v->data ? v->data : "", v->data ? (size_t)v->len : 0);
        }
        if (count > 1) jbuf_char(&e->buf, ']');
    }
    jbuf_char(&e->buf, '}');
}

bool mqtt_properties_find_user(const MQTTProperties *props, const char *name, char *out,
                               size_t outlen)
{
    if (!props || !name || outlen == 0) return false;
    size_t nl = strlen(name);
    for (int i = 0; i < props->count; i++) {
        const MQTTProperty *p = &props->array[i];
        if (p->identifier != MQTTPROPERTY_CODE_USER_PROPERTY) continue;
        if ((size_t)p->value.data.len != nl || (nl && memcmp(p->value.data.data, name, nl) != 0))
            continue;
        size_t vl = (size_t)p->value.value.len;
        if (vl == 0 || !p->value.value.data) return false;
        if (vl >= outlen) vl = outlen - 1;
        memcpy(out, p->value.value.data, vl);
        out[vl] = '\0';
        return true;
    }
    return false;
}

enum mqtt_verdict mqtt_after_sink_verdict(enum msg_outcome o)
{
    switch (o) {
    case MSG_DELIVERED: return MQTT_VERDICT_ACK;
    case MSG_DROPPED_QUEUE_FULL:
    case MSG_DROPPED_SINK_FAILED: return MQTT_VERDICT_REEMIT;
    case MSG_DROPPED_NOT_LEADER:
    case MSG_DROPPED_SHUTDOWN:
    case MSG_DROPPED_TERM_ENDED: return MQTT_VERDICT_AWAIT_STOP;
    }
    return MQTT_VERDICT_AWAIT_STOP; /* an unknown outcome is never re-emitted */
}
