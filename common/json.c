/* Growable byte buffer with JSON writers. */
#include "common/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "common/util.h"

void jbuf_init(struct jbuf *b, size_t initial_cap)
{
    b->len = 0;
    b->cap = initial_cap ? initial_cap : 256;
    b->data = xmalloc(b->cap);
    b->data[0] = '\0';
}

void jbuf_free(struct jbuf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void jbuf_reset(struct jbuf *b)
{
    b->len = 0;
    if (b->data) b->data[0] = '\0';
}

char *jbuf_steal(struct jbuf *b, size_t *len)
{
    jbuf_reserve(b, 0); /* make sure there is a buffer with room for the NUL */
    char *p = b->data;
    p[b->len] = '\0';
    if (len) *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}

/* Keeps room for extra bytes plus a terminating NUL. */
void jbuf_reserve(struct jbuf *b, size_t extra)
{
    if (extra > SIZE_MAX - b->len - 1) {
        xmalloc(SIZE_MAX); /* aborts with the OOM message */
    }
    size_t need = b->len + extra + 1;
    if (b->data && need <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    b->data = xrealloc(b->data, cap);
    b->cap = cap;
}

/* The common case inline: room is already there. */
static inline void reserve_fast(struct jbuf *b, size_t extra)
{
    if (b->data && extra < b->cap - b->len) return; /* len + extra + 1 <= cap */
    jbuf_reserve(b, extra);
}

void jbuf_raw(struct jbuf *b, const char *s, size_t n)
{
    reserve_fast(b, n);
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void jbuf_rawz(struct jbuf *b, const char *s)
{
    jbuf_raw(b, s, strlen(s));
}

void jbuf_char(struct jbuf *b, char c)
{
    reserve_fast(b, 1);
    b->data[b->len++] = c;
    b->data[b->len] = '\0';
}

/* Length of the valid UTF-8 sequence starting at s (1..4), or 0 when the
 * bytes at s do not start a valid sequence (overlong, surrogate, > U+10FFFF,
 * truncated, stray continuation byte). */
size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0; /* continuation byte or overlong 2-byte lead */
    if (c < 0xE0) {
        if (n < 2 || (s[1] & 0xC0) != 0x80) return 0;
        return 2;
    }
    if (c < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[1] < 0xA0) return 0; /* overlong */
        if (c == 0xED && s[1] >= 0xA0) return 0; /* surrogates U+D800..DFFF */
        return 3;
    }
    if (c < 0xF5) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        if (c == 0xF0 && s[1] < 0x90) return 0; /* overlong */
        if (c == 0xF4 && s[1] >= 0x90) return 0; /* > U+10FFFF */
        return 4;
    }
    return 0;
}

bool utf8_valid(const void *data, size_t n)
{
    const unsigned char *s = data;
    size_t i = 0;
    while (i < n) {
        /* fast path over ASCII */
        while (i < n && s[i] < 0x80) i++;
        if (i >= n) break;
        size_t l = utf8_seq_len(s + i, n - i);
        if (l == 0) return false;
        i += l;
    }
    return true;
}

/* 0: copied as is; 1: needs an escape (control, quote, backslash);
 * 2: non-ASCII, validated as UTF-8. */
static const unsigned char str_class[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x00 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x10 */
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x20: '"' */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, /* 0x50: '\\' */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, /* 0x80.. */
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
};

/* Length of the leading run of bytes of class 0 (printable ASCII other than
 * '"' and '\\'), eight bytes at a time. */
static size_t plain_run(const unsigned char *s, size_t n)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    size_t i = 0;
    while (n - i >= 8) {
        uint64_t x;
        memcpy(&x, s + i, 8);
        uint64_t q = x ^ (ones * '"'), bs = x ^ (ones * '\\');
        /* a byte >= 0x80, < 0x20, == '"' or == '\\' (zero-byte tests on the
         * XORs are exact; the < 0x20 test only errs when a high byte is
         * present, which is reported anyway) */
        uint64_t special = (x | ((x - ones * 0x20) & ~x) | ((q - ones) & ~q) | ((bs - ones) & ~bs)) &
                           highs;
        if (special) break;
        i += 8;
    }
    while (i < n && str_class[s[i]] == 0) i++;
    return i;
}

void jbuf_str(struct jbuf *b, const char *str, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)str;
    /* room for the common case (nothing to escape); escapes reserve more */
    reserve_fast(b, n + 2);
    b->data[b->len++] = '"';
    size_t i = plain_run(s, n);
    if (i == n) { /* the common case: nothing to escape or validate */
        memcpy(b->data + b->len, s, n);
        b->len += n;
        b->data[b->len++] = '"';
        b->data[b->len] = '\0';
        return;
    }
    if (i > 0) {
        memcpy(b->data + b->len, s, i);
        b->len += i;
    }
    while (i < n) {
        /* a run of bytes copied as they are: plain ASCII and valid UTF-8 */
        size_t start = i;
        for (;;) {
            i += plain_run(s + i, n - i);
            if (i < n && str_class[s[i]] == 2) {
                size_t l = utf8_seq_len(s + i, n - i);
                if (l) {
                    i += l;
                    continue;
                }
            }
            break;
        }
        if (i > start) {
            reserve_fast(b, i - start + 1);
            memcpy(b->data + b->len, s + start, i - start);
            b->len += i - start;
        }
        if (i >= n) break;
        unsigned char c = s[i++];
        char esc[6];
        size_t elen = 2;
        esc[0] = '\\';
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            if (c < 0x20) {
                memcpy(esc, "\\u00", 4);
                esc[4] = hex[c >> 4];
                esc[5] = hex[c & 0xf];
                elen = 6;
            } else { /* a byte that does not start valid UTF-8 */
                memcpy(esc, "\xEF\xBF\xBD", 3); /* U+FFFD */
                elen = 3;
            }
        }
        reserve_fast(b, elen + 1);
        memcpy(b->data + b->len, esc, elen);
        b->len += elen;
    }
    reserve_fast(b, 1);
    b->data[b->len++] = '"';
    b->data[b->len] = '\0';
}

void jbuf_strz(struct jbuf *b, const char *s)
{
    if (!s) {
        jbuf_null(b);
        return;
    }
    jbuf_str(b, s, strlen(s));
}

/* Decimal digits of v at the end of tmp[24]; returns the first digit. */
static char *u64_digits(uint64_t v, char *end)
{
    char *p = end;
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return p;
}

void jbuf_i64(struct jbuf *b, int64_t v)
{
    char tmp[24];
    char *end = tmp + sizeof tmp;
    /* magnitude without overflow for INT64_MIN */
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    char *p = u64_digits(mag, end);
    if (v < 0) *--p = '-';
    jbuf_raw(b, p, (size_t)(end - p));
}

void jbuf_u64(struct jbuf *b, uint64_t v)
{
    char tmp[24];
    char *end = tmp + sizeof tmp;
    char *p = u64_digits(v, end);
    jbuf_raw(b, p, (size_t)(end - p));
}

void jbuf_double(struct jbuf *b, double v)
{
    if (!isfinite(v)) {
        jbuf_null(b);
        return;
    }
    char tmp[40];
    /* shortest of %.15g .. %.17g that round-trips */
    int n = 0;
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v) break;
    }
    /* %g never uses a locale-specific decimal point other than the C
     * locale's unless setlocale was called; normalise just in case. */
    for (int i = 0; i < n; i++)
        if (tmp[i] == ',') tmp[i] = '.';
    jbuf_raw(b, tmp, (size_t)n);
}

void jbuf_bool(struct jbuf *b, bool v)
{
    if (v)
        jbuf_raw(b, "true", 4);
    else
        jbuf_raw(b, "false", 5);
}

void jbuf_null(struct jbuf *b)
{
    jbuf_raw(b, "null", 4);
}

void jbuf_base64(struct jbuf *b, const void *data, size_t n)
{
    size_t el = base64_encoded_len(n);
    jbuf_reserve(b, el + 2);
    b->data[b->len++] = '"';
    base64_encode(data, n, b->data + b->len);
    b->len += el;
    b->data[b->len++] = '"';
    b->data[b->len] = '\0';
}

void jbuf_key(struct jbuf *b, bool *first, const char *key)
{
    size_t n = strlen(key);
    if (plain_run((const unsigned char *)key, n) == n) {
        /* the common case, in one go: ,"key": */
        reserve_fast(b, n + 4);
        char *o = b->data + b->len;
        if (!*first) *o++ = ',';
        *o++ = '"';
        memcpy(o, key, n);
        o += n;
        *o++ = '"';
        *o++ = ':';
        *o = '\0';
        b->len = (size_t)(o - b->data);
        *first = false;
        return;
    }
    if (!*first) jbuf_char(b, ',');
    *first = false;
    jbuf_str(b, key, n);
    jbuf_char(b, ':');
}
