/* libFuzzer target: the envelope encoder on arbitrary payload bytes. Checks
 * that the output is valid UTF-8 without raw control characters, that it
 * parses as one JSON object (json-c, an independent parser), and that what
 * went in comes back out: a UTF-8 channel as the same string, the payload as
 * the same bytes -- as a string when it is UTF-8, else base64 with
 * "payload_encoding":"base64", decoded here by a decoder of the test's own. */
#include <json-c/json.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/envelope.h"
#include "common/json.h"

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 with padding; returns the decoded length or -1. */
static long b64_decode(const char *s, size_t n, uint8_t *out)
{
    if (n % 4) return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)s[i + (size_t)k];
            if (c == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
                continue;
            }
            if (pad) return -1; /* data after padding */
            v[k] = b64_value(c);
            if (v[k] < 0) return -1;
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2) out[o++] = (uint8_t)(w >> 8);
        if (pad < 1) out[o++] = (uint8_t)w;
    }
    return (long)o;
}

static void expect_bytes(json_object *o, const uint8_t *want, size_t n)
{
    if (!o || !json_object_is_type(o, json_type_string)) abort();
    if ((size_t)json_object_get_string_len(o) != n) abort();
    if (n && memcmp(json_object_get_string(o), want, n) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct envelope e;
    envelope_init(&e);
    size_t half = size / 2;
    envelope_begin(&e, "fuzz", "test", 7, NULL, 1700000000000);
    envelope_str(&e, "channel", (const char *)data, half);
    envelope_payload(&e, data + half, size - half);
    struct message *m = envelope_finish(&e);
    if (!utf8_valid(m->json, m->len)) abort();
    for (size_t i = 0; i < m->len; i++)
        if ((unsigned char)m->json[i] < 0x20) abort();
    if (m->json[0] != '{' || m->json[m->len - 1] != '}') abort();

    json_tokener *tok = json_tokener_new();
    json_object *root = json_tokener_parse_ex(tok, m->json, (int)m->len);
    if (!root || json_tokener_get_error(tok) != json_tokener_success ||
        !json_object_is_type(root, json_type_object))
        abort();
    json_object *channel = NULL, *payload = NULL, *encoding = NULL;
    if (!json_object_object_get_ex(root, "channel", &channel)) abort();
    if (utf8_valid(data, half)) expect_bytes(channel, data, half);
    if (!json_object_object_get_ex(root, "payload", &payload)) abort();
    const uint8_t *body = data + half;
    size_t body_len = size - half;
    if (json_object_object_get_ex(root, "payload_encoding", &encoding)) {
        /* only a payload that is not UTF-8 is base64 */
        if (body_len == 0 || utf8_valid(body, body_len)) abort();
        if (strcmp(json_object_get_string(encoding), "base64") != 0) abort();
        const char *b64 = json_object_get_string(payload);
        size_t b64_len = (size_t)json_object_get_string_len(payload);
        uint8_t *back = malloc(b64_len / 4 * 3 + 1);
        if (!back) abort();
        long got = b64_decode(b64, b64_len, back);
        if (got < 0 || (size_t)got != body_len || memcmp(back, body, body_len) != 0) abort();
        free(back);
    } else {
        expect_bytes(payload, body, body_len);
    }
    json_object_put(root);
    json_tokener_free(tok);

    message_finish(m, MSG_DELIVERED);
    envelope_free(&e);
    return 0;
}
