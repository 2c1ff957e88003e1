/* Splitting an envelope into fields (see common/envelope_split.h). */
#include "common/envelope_split.h"

#include <stdbool.h>
#include <string.h>

/* Skips one JSON value at p (a string, number, literal, object or array);
 * returns the position after it. The envelope is baton's own, well formed. */
static const char *skip_value(const char *p, const char *end)
{
    int depth = 0;
    while (p < end) {
        char ch = *p;
        if (ch == '"') {
            for (p++; p < end && *p != '"'; p++)
                if (*p == '\\') p++;
            p++;
        } else if (ch == '{' || ch == '[') {
            depth++;
            p++;
        } else if (ch == '}' || ch == ']') {
            if (depth == 0) return p;
            depth--;
            p++;
        } else if (ch == ',' && depth == 0) {
            return p;
        } else {
            p++;
        }
        if (depth == 0 && p < end && (*p == ',' || *p == '}' || *p == ']')) return p;
    }
    return p;
}

static unsigned hex4(const char *p)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = p[i];
        v <<= 4;
        if (ch >= '0' && ch <= '9') v |= (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f') v |= (unsigned)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F') v |= (unsigned)(ch - 'A' + 10);
    }
    return v;
}

static void put_utf8(struct jbuf *b, unsigned cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) u[0] = (char)cp, n = 1;
    else if (cp < 0x800) u[0] = (char)(0xC0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xE0 | (cp >> 12)), u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
        u[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
    else
        u[0] = (char)(0xF0 | (cp >> 18)), u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
    jbuf_raw(b, u, n);
}

/* Appends the JSON string at s (its opening quote) to b, unescaped. */
static void put_unescaped(struct jbuf *b, const char *s, const char *end)
{
    const char *p = s + 1;
    while (p < end && *p != '"') {
        const char *run = p;
        while (p < end && *p != '"' && *p != '\\') p++;
        jbuf_raw(b, run, (size_t)(p - run));
        if (p >= end || *p == '"') break;
        p++; /* backslash */
        if (p >= end) break;
        char e = *p++;
        switch (e) {
        case 'b': jbuf_char(b, '\b'); break;
        case 'f': jbuf_char(b, '\f'); break;
        case 'n': jbuf_char(b, '\n'); break;
        case 'r': jbuf_char(b, '\r'); break;
        case 't': jbuf_char(b, '\t'); break;
        case 'u': {
            if (end - p < 4) return;
            unsigned cp = hex4(p);
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
                unsigned lo = hex4(p + 2);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
            }
            put_utf8(b, cp);
            break;
        }
        default: jbuf_char(b, e); break; /* " \ / */
        }
    }
}

static int b64val(char ch)
{
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+') return 62;
    if (ch == '/') return 63;
    return -1;
}

/* Appends the bytes of the base64 JSON string at s to b. */
static void put_base64(struct jbuf *b, const char *s, const char *end)
{
    unsigned acc = 0;
    int bits = 0;
    for (const char *p = s + 1; p < end && *p != '"'; p++) {
        int v = b64val(*p);
        if (v < 0) continue; /* '=' padding */
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            jbuf_char(b, (char)((acc >> bits) & 0xFF));
        }
    }
}

void envelope_split_fields(const char *json, size_t len, struct jbuf *source, struct jbuf *payload)
{
    const char *p = json, *end = json + len;
    const char *pay = NULL;
    bool b64 = false, first = true;
    jbuf_char(source, '{');
    if (p < end && *p == '{') p++;
    while (p < end && *p != '}') {
        if (*p == ',' || *p == ' ') {
            p++;
            continue;
        }
        if (*p != '"') break;
        const char *k0 = p + 1, *k1 = k0;
        while (k1 < end && *k1 != '"') k1++; /* baton's keys have no escapes */
        const char *v = k1 + 2;              /* after the ':' */
        if (v > end) break;
        const char *ve = skip_value(v, end);
        size_t kn = (size_t)(k1 - k0);
#define KEY_IS(lit) (kn == sizeof lit - 1 && memcmp(k0, lit, kn) == 0)
        if (KEY_IS("payload")) pay = v;
        else if (KEY_IS("payload_encoding")) b64 = ve - v == 8 && memcmp(v, "\"base64\"", 8) == 0;
        else if (!KEY_IS("endpoint") && !KEY_IS("epoch") && !KEY_IS("id")) {
            if (!first) jbuf_char(source, ',');
            first = false;
            jbuf_raw(source, k0 - 1, (size_t)(ve - (k0 - 1)));
        }
#undef KEY_IS
        p = ve;
    }
    jbuf_char(source, '}');
    if (pay && *pay == '"') {
        if (b64) put_base64(payload, pay, end);
        else put_unescaped(payload, pay, end);
    } else if (pay) {
        jbuf_raw(payload, pay, (size_t)(skip_value(pay, end) - pay)); /* not a string: as JSON */
    }
}
