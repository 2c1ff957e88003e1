/* Growable byte buffer with JSON writers. Used for every envelope; no size
 * limit other than memory. Writers never fail (OOM aborts). */
#ifndef BATON_JSON_H
#define BATON_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct jbuf {
    char *data;
    size_t len;
    size_t cap;
};

void jbuf_init(struct jbuf *b, size_t initial_cap);
void jbuf_free(struct jbuf *b);
void jbuf_reset(struct jbuf *b);
/* Gives the buffer away (NUL terminated); b becomes empty. */
char *jbuf_steal(struct jbuf *b, size_t *len);
void jbuf_reserve(struct jbuf *b, size_t extra);

void jbuf_raw(struct jbuf *b, const char *s, size_t n);
void jbuf_rawz(struct jbuf *b, const char *s);
void jbuf_char(struct jbuf *b, char c);
/* A quoted JSON string; s is taken as UTF-8 (invalid sequences are written
 * as U+FFFD); every control character is escaped. */
void jbuf_str(struct jbuf *b, const char *s, size_t n);
void jbuf_strz(struct jbuf *b, const char *s);
void jbuf_i64(struct jbuf *b, int64_t v);
void jbuf_u64(struct jbuf *b, uint64_t v);
/* Finite doubles with round-trip precision; NaN/Inf are written as null. */
void jbuf_double(struct jbuf *b, double v);
void jbuf_bool(struct jbuf *b, bool v);
void jbuf_null(struct jbuf *b);
/* Base64 (RFC 4648, padded) inside quotes. */
void jbuf_base64(struct jbuf *b, const void *data, size_t n);

/* Object helpers. jbuf_key writes `,"key":` or `"key":` depending on whether
 * it is the first member: callers keep a `bool *first` per open object. */
void jbuf_key(struct jbuf *b, bool *first, const char *key);

bool utf8_valid(const void *data, size_t n);
/* Length of the valid UTF-8 sequence at s (1..4; n > 0 bytes left), or 0
 * when the bytes at s do not start one (overlong, surrogate, > U+10FFFF,
 * truncated, stray continuation byte): the rule of utf8_valid. */
size_t utf8_seq_len(const unsigned char *s, size_t n);

#endif
