/* Binlog TABLE_MAP / ROWS decoding into JSON. See cdc_decode.h. */
#include "endpoints/cdc_decode.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/message.h"
#include "common/util.h"

/* ------------------------------------------------------------------ bytes */

static uint64_t le_uint(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint64_t be_uint(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* Length-encoded integer. Returns false when it does not fit. */
static bool lenenc(const unsigned char **p, const unsigned char *end, uint64_t *out)
{
    if (*p >= end) return false;
    unsigned c = **p;
    int n = c < 251 ? 0 : c == 252 ? 2 : c == 253 ? 3 : c == 254 ? 8 : -1;
    if (n < 0 || end - *p < 1 + n) return false;
    *out = n == 0 ? c : le_uint(*p + 1, n);
    *p += 1 + n;
    return true;
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static char *dup_n(const unsigned char *s, size_t n)
{
    char *d = xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* ------------------------------------------------------------- table map */

static bool is_numeric(uint8_t t)
{
    switch (t) {
    case CDC_T_TINY: case CDC_T_SHORT: case CDC_T_INT24: case CDC_T_LONG: case CDC_T_LONGLONG:
    case CDC_T_YEAR: case CDC_T_FLOAT: case CDC_T_DOUBLE: case CDC_T_NEWDECIMAL:
    case CDC_T_DECIMAL:
        return true;
    default:
        return false;
    }
}

static bool is_blob(uint8_t t)
{
    return t == CDC_T_BLOB || t == CDC_T_TINY_BLOB || t == CDC_T_MEDIUM_BLOB ||
           t == CDC_T_LONG_BLOB || t == CDC_T_GEOMETRY || t == CDC_T_JSON;
}

/* Columns that carry a character set in the optional metadata. */
static bool is_character(uint8_t t)
{
    return t == CDC_T_VARCHAR || t == CDC_T_VAR_STRING || t == CDC_T_STRING || is_blob(t);
}

static bool is_string_type(uint8_t t)
{
    return is_character(t);
}

/* Reads the per-column metadata of column c from *p. */
static bool read_meta(struct cdc_column *c, uint8_t wire_type, const unsigned char **p,
                      const unsigned char *end)
{
    const unsigned char *m = *p;
    c->type = wire_type;
    switch (wire_type) {
    case CDC_T_FLOAT: case CDC_T_DOUBLE: case CDC_T_BLOB: case CDC_T_TINY_BLOB:
    case CDC_T_MEDIUM_BLOB: case CDC_T_LONG_BLOB: case CDC_T_GEOMETRY: case CDC_T_JSON:
    case CDC_T_TIMESTAMP2: case CDC_T_DATETIME2: case CDC_T_TIME2:
        if (end - m < 1) return false;
        c->meta = m[0];
        *p += 1;
        return true;
    case CDC_T_VARCHAR: case CDC_T_VAR_STRING:
        if (end - m < 2) return false;
        c->meta = (uint16_t)le_uint(m, 2);
        c->len = c->meta;
        *p += 2;
        return true;
    case CDC_T_BIT: case CDC_T_NEWDECIMAL:
        if (end - m < 2) return false;
        c->meta = (uint16_t)((m[1] << 8) | m[0]); /* BIT: bytes<<8|bits; DECIMAL: scale<<8|precision */
        *p += 2;
        return true;
    case CDC_T_STRING: case CDC_T_ENUM: case CDC_T_SET: {
        if (end - m < 2) return false;
        unsigned b0 = m[0], b1 = m[1];
        unsigned real = b0, len = b1;
        /* lengths > 255 steal two bits of the type byte */
        if ((b0 & 0x30) != 0x30) {
            real = b0 | 0x30;
            len = b1 | (((b0 & 0x30) ^ 0x30) << 4);
        }
        c->type = (uint8_t)real;
        c->len = len;
        c->meta = (uint16_t)((b0 << 8) | b1);
        *p += 2;
        return true;
    }
    default:
        c->meta = 0;
        return true;
    }
}

static void free_values(struct cdc_column *c)
{
    for (uint32_t i = 0; i < c->nvalues; i++) free(c->values[i]);
    free(c->values);
    c->values = NULL;
    c->nvalues = 0;
}

void cdc_table_free(struct cdc_table *t)
{
    if (!t) return;
    for (uint32_t i = 0; t->cols && i < t->ncols; i++) {
        free(t->cols[i].name);
        free(t->cols[i].key);
        free_values(&t->cols[i]);
    }
    free(t->cols);
    free(t->db);
    free(t->table);
    free(t->body);
    memset(t, 0, sizeof *t);
}

/* ENUM_STR_VALUE / SET_STR_VALUE: for each column of kind, a count then
 * count length-prefixed strings. */
static bool parse_str_values(struct cdc_table *t, uint8_t kind, const unsigned char *p,
                             const unsigned char *end)
{
    for (uint32_t i = 0; i < t->ncols && p < end; i++) {
        struct cdc_column *c = &t->cols[i];
        if (c->type != kind) continue;
        uint64_t n;
        if (!lenenc(&p, end, &n) || n > (uint64_t)(end - p)) return false;
        free_values(c);
        c->values = xcalloc(n ? n : 1, sizeof *c->values);
        for (uint64_t k = 0; k < n; k++) {
            uint64_t l;
            if (!lenenc(&p, end, &l) || l > (uint64_t)(end - p)) return false;
            c->values[k] = dup_n(p, l);
            c->nvalues = (uint32_t)k + 1;
            p += l;
        }
    }
    return true;
}

static bool parse_optional(struct cdc_table *t, const unsigned char *p, const unsigned char *end)
{
    while (p < end) {
        uint8_t kind = *p++;
        uint64_t len;
        if (!lenenc(&p, end, &len) || len > (uint64_t)(end - p)) return false;
        const unsigned char *v = p, *vend = p + len;
        p = vend;
        switch (kind) {
        case 1: { /* SIGNEDNESS: one bit per numeric column, MSB first */
            uint32_t k = 0;
            for (uint32_t i = 0; i < t->ncols; i++) {
                if (!is_numeric(t->cols[i].type)) continue;
                if (k / 8 >= len) return false;
                t->cols[i].is_unsigned = (v[k / 8] >> (7 - k % 8)) & 1;
                k++;
            }
            t->have_signedness = true;
            break;
        }
        case 2: { /* DEFAULT_CHARSET: default, then (index, charset) pairs */
            uint64_t def, idx, cs;
            if (!lenenc(&v, vend, &def)) return false;
            for (uint32_t i = 0; i < t->ncols; i++)
                if (is_character(t->cols[i].type)) t->cols[i].charset = (uint32_t)def;
            while (v < vend) {
                if (!lenenc(&v, vend, &idx) || !lenenc(&v, vend, &cs)) return false;
                uint64_t k = 0;
                for (uint32_t i = 0; i < t->ncols; i++) {
                    if (!is_character(t->cols[i].type)) continue;
                    if (k++ == idx) {
                        t->cols[i].charset = (uint32_t)cs;
                        break;
                    }
                }
            }
            break;
        }
        case 3: /* COLUMN_CHARSET: one per character column */
            for (uint32_t i = 0; i < t->ncols && v < vend; i++) {
                if (!is_character(t->cols[i].type)) continue;
                uint64_t cs;
                if (!lenenc(&v, vend, &cs)) return false;
                t->cols[i].charset = (uint32_t)cs;
            }
            break;
        case 4: /* COLUMN_NAME */
            for (uint32_t i = 0; i < t->ncols; i++) {
                uint64_t l;
                if (!lenenc(&v, vend, &l) || l > (uint64_t)(vend - v)) return false;
                free(t->cols[i].name);
                t->cols[i].name = dup_n(v, l);
                v += l;
            }
            t->have_names = true;
            break;
        case 5: /* SET_STR_VALUE */
            if (!parse_str_values(t, CDC_T_SET, v, vend)) return false;
            break;
        case 6: /* ENUM_STR_VALUE */
            if (!parse_str_values(t, CDC_T_ENUM, v, vend)) return false;
            break;
        case 8: /* SIMPLE_PRIMARY_KEY: the key's column indexes (0-based) */
        case 9: /* PRIMARY_KEY_WITH_PREFIX: (column index, prefix length)
                   pairs, prefix 0 = the whole column */
            while (v < vend) {
                uint64_t idx, prefix = 0;
                if (!lenenc(&v, vend, &idx)) return false;
                if (kind == 9 && !lenenc(&v, vend, &prefix)) return false;
                /* A prefix part is left out of the ordering key, as is an
                 * index out of range: the key gets coarser (rows that
                 * differ only there share it), never finer, so one row's
                 * events still share a key. Keying by the prefix itself
                 * would need the column's character semantics. */
                if (idx < t->ncols && prefix == 0) t->cols[idx].in_pk = true;
            }
            t->have_pk = true;
            break;
        default: /* geometry types, enum/set charsets, column visibility: unused */
            break;
        }
    }
    return true;
}

/* Counts the primary key columns of the ordering key; too many: none. */
static void count_pk(struct cdc_table *t)
{
    t->npk = 0;
    for (uint32_t i = 0; i < t->ncols; i++)
        if (t->cols[i].in_pk) t->npk++;
    if (t->npk > CDC_PK_MAX) {
        for (uint32_t i = 0; i < t->ncols; i++) t->cols[i].in_pk = false;
        t->npk = 0;
    }
}

/* The escaped object key of every column, written once per table map
 * instead of escaping the name again for every row. */
static void build_keys(struct cdc_table *t)
{
    struct jbuf b;
    jbuf_init(&b, 64);
    for (uint32_t i = 0; i < t->ncols; i++) {
        struct cdc_column *c = &t->cols[i];
        jbuf_reset(&b);
        if (c->name) {
            jbuf_strz(&b, c->name);
        } else {
            char at[16];
            snprintf(at, sizeof at, "@%u", i + 1);
            jbuf_strz(&b, at);
        }
        jbuf_char(&b, ':');
        free(c->key);
        c->key = xmalloc(b.len + 1);
        memcpy(c->key, b.data, b.len + 1);
        c->key_len = b.len;
    }
    jbuf_free(&b);
}

int cdc_table_parse(const unsigned char *body, size_t len, struct cdc_table *out, char *err,
                    size_t errlen)
{
    memset(out, 0, sizeof *out);
    const unsigned char *p = body, *end = body + len;
    if (len < 8 + 2) goto short_;
    out->table_id = le_uint(p, 6);
    p += 8; /* table id (6) + flags (2) */
    unsigned dl = *p++;
    if ((size_t)(end - p) < dl + 2u) goto short_;
    out->db = dup_n(p, dl);
    p += dl + 1;
    unsigned tl = *p++;
    if ((size_t)(end - p) < tl + 1u) goto short_;
    out->table = dup_n(p, tl);
    p += tl + 1;
    uint64_t n;
    if (!lenenc(&p, end, &n) || n > (uint64_t)(end - p) || n > 4096) goto short_;
    out->ncols = (uint32_t)n;
    out->cols = xcalloc(n ? n : 1, sizeof *out->cols);
    const unsigned char *types = p;
    p += n;
    uint64_t mlen;
    if (!lenenc(&p, end, &mlen) || mlen > (uint64_t)(end - p)) goto short_;
    const unsigned char *m = p, *mend = p + mlen;
    for (uint32_t i = 0; i < out->ncols; i++) {
        if (!read_meta(&out->cols[i], types[i], &m, mend)) {
            set_err(err, errlen, "table map %s.%s: metadata of column %u (type %u) truncated",
                    out->db, out->table, i + 1, types[i]);
            cdc_table_free(out);
            return -1;
        }
    }
    p = mend;
    size_t nb = (out->ncols + 7) / 8;
    if ((size_t)(end - p) < nb) goto short_;
    p += nb; /* nullability bitmap */
    if (!parse_optional(out, p, end)) {
        set_err(err, errlen, "table map %s.%s: malformed optional metadata", out->db, out->table);
        cdc_table_free(out);
        return -1;
    }
    count_pk(out);
    out->body = xmalloc(len ? len : 1);
    memcpy(out->body, body, len);
    out->body_len = len;
    build_keys(out);
    return 0;
short_:
    set_err(err, errlen, "table map event truncated (%zu bytes)", len);
    cdc_table_free(out);
    return -1;
}

void cdc_table_apply_schema(struct cdc_table *t, char *const *names, const bool *is_unsigned,
                            const bool *is_binary, uint32_t count)
{
    uint32_t n = count < t->ncols ? count : t->ncols;
    for (uint32_t i = 0; i < n; i++) {
        struct cdc_column *c = &t->cols[i];
        if (names && names[i] && !t->have_names) {
            free(c->name);
            c->name = xstrdup(names[i]);
        }
        if (is_unsigned && !t->have_signedness && is_numeric(c->type))
            c->is_unsigned = is_unsigned[i];
        if (is_binary && c->charset == 0 && is_string_type(c->type))
            c->charset = is_binary[i] ? CDC_CHARSET_BINARY : 0;
    }
    if (names && n == t->ncols) t->have_names = true;
    build_keys(t);
}

void cdc_table_apply_pk(struct cdc_table *t, const bool *in_pk, uint32_t count)
{
    if (t->have_pk || count != t->ncols) return;
    for (uint32_t i = 0; i < t->ncols; i++) t->cols[i].in_pk = in_pk && in_pk[i];
    count_pk(t);
}

/* ------------------------------------------------------------ rows event */

const char *cdc_op_name(enum cdc_op op)
{
    switch (op) {
    case CDC_OP_INSERT: return "insert";
    case CDC_OP_UPDATE: return "update";
    case CDC_OP_DELETE: return "delete";
    case CDC_OP_DDL: return "ddl";
    }
    return "?";
}

int cdc_rows_parse(int event_type, const unsigned char *body, size_t len, struct cdc_rows *out,
                   char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    bool v2;
    if (event_type >= 23 && event_type <= 25) {
        v2 = false;
        out->op = (enum cdc_op)(event_type - 23);
    } else if (event_type >= 30 && event_type <= 32) {
        v2 = true;
        out->op = (enum cdc_op)(event_type - 30);
    } else {
        set_err(err, errlen, "event type %d is not a rows event", event_type);
        return -1;
    }
    const unsigned char *p = body, *end = body + len;
    if (len < 8) goto short_;
    out->table_id = le_uint(p, 6);
    out->flags = (uint16_t)le_uint(p + 6, 2);
    p += 8;
    if (v2) {
        if (end - p < 2) goto short_;
        size_t extra = le_uint(p, 2);
        if (extra < 2 || (size_t)(end - p) < extra) goto short_;
        p += extra;
    }
    uint64_t n;
    if (!lenenc(&p, end, &n) || n > 4096) goto short_;
    out->ncols = (uint32_t)n;
    size_t nb = (n + 7) / 8;
    if ((size_t)(end - p) < nb) goto short_;
    out->present = p;
    p += nb;
    if (out->op == CDC_OP_UPDATE) {
        if ((size_t)(end - p) < nb) goto short_;
        out->present_upd = p;
        p += nb;
    }
    out->data = p;
    out->end = end;
    return 0;
short_:
    set_err(err, errlen, "rows event truncated (%zu bytes)", len);
    return -1;
}

/* ---------------------------------------------------------- value formats */

static const int dig2bytes[10] = { 0, 1, 1, 2, 2, 3, 3, 4, 4, 4 };

/* Writes v as exactly width decimal digits (zero padded; width >= the
 * number of digits of v) at o; returns the end. No snprintf on the per-row
 * path. */
static char *put_digits(char *o, uint64_t v, int width)
{
    for (int i = width - 1; i >= 0; i--) {
        o[i] = (char)('0' + v % 10);
        v /= 10;
    }
    return o + width;
}

static const uint64_t pow10_u64[10] = {
    1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000,
};

int cdc_format_decimal(const unsigned char *p, size_t avail, int precision, int scale, char *out,
                       size_t outlen)
{
    if (precision <= 0 || precision > 65 || scale < 0 || scale > precision || outlen < 70)
        return -1;
    int intg = precision - scale;
    int intg0 = intg / 9, intg0x = intg % 9;
    int frac0 = scale / 9, frac0x = scale % 9;
    size_t size = (size_t)(intg0 * 4 + dig2bytes[intg0x] + frac0 * 4 + dig2bytes[frac0x]);
    if (avail < size || size == 0) return -1;
    unsigned char buf[40];
    memcpy(buf, p, size);
    bool neg = !(buf[0] & 0x80);
    buf[0] ^= 0x80;
    if (neg)
        for (size_t i = 0; i < size; i++) buf[i] ^= 0xFF;
    /* Each group of up to 9 decimal digits is stored in up to 4 bytes; a
     * group holding more than its digit count (never written by a server)
     * makes the value invalid. */
    char digits[80];
    char *d = digits;
    const unsigned char *q = buf;
    if (intg0x) {
        int b = dig2bytes[intg0x];
        uint64_t v = be_uint(q, b);
        if (v >= pow10_u64[intg0x]) return -1;
        d = put_digits(d, v, intg0x);
        q += b;
    }
    for (int i = 0; i < intg0; i++, q += 4) {
        uint64_t v = be_uint(q, 4);
        if (v >= pow10_u64[9]) return -1;
        d = put_digits(d, v, 9);
    }
    size_t nd = (size_t)(d - digits);
    /* the integer part without leading zeros */
    size_t lead = 0;
    while (lead + 1 < nd && digits[lead] == '0') lead++;
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (nd == 0) out[o++] = '0';
    else {
        memcpy(out + o, digits + lead, nd - lead);
        o += nd - lead;
    }
    if (scale > 0) {
        out[o++] = '.';
        char *f = out + o;
        for (int i = 0; i < frac0; i++, q += 4) {
            uint64_t v = be_uint(q, 4);
            if (v >= pow10_u64[9]) return -1;
            f = put_digits(f, v, 9);
        }
        if (frac0x) {
            int b = dig2bytes[frac0x];
            uint64_t v = be_uint(q, b);
            if (v >= pow10_u64[frac0x]) return -1;
            f = put_digits(f, v, frac0x);
            q += b;
        }
        o = (size_t)(f - out);
    }
    out[o] = '\0';
    return (int)size;
}

/* Fractional seconds of the *2 temporal types: (fsp+1)/2 big-endian bytes,
 * returned in microseconds. */
static int frac_bytes(int fsp)
{
    return (fsp + 1) / 2;
}

static int64_t read_frac_us(const unsigned char *p, int fsp)
{
    switch (fsp) {
    case 1: case 2: return (int64_t)p[0] * 10000;
    case 3: case 4: return (int64_t)be_uint(p, 2) * 100;
    case 5: case 6: return (int64_t)be_uint(p, 3);
    default: return 0;
    }
}

/* ".<fsp digits>" of us at o (nothing when fsp is 0); returns the end. */
static char *put_frac(char *o, int64_t us, int fsp)
{
    if (fsp <= 0) return o;
    if (fsp > 6) fsp = 6;
    if (us < 0) us = -us;
    char f[6];
    put_digits(f, (uint64_t)(us % 1000000), 6);
    *o++ = '.';
    memcpy(o, f, (size_t)fsp);
    return o + fsp;
}

/* "YYYY-MM-DD" (each field zero padded, wider when it does not fit, as
 * %04u-%02u-%02u prints it); returns the end. */
static char *put_date(char *o, unsigned year, unsigned month, unsigned day)
{
    o = year < 10000 ? put_digits(o, year, 4) : o + sprintf(o, "%u", year);
    *o++ = '-';
    o = month < 100 ? put_digits(o, month, 2) : o + sprintf(o, "%u", month);
    *o++ = '-';
    return day < 100 ? put_digits(o, day, 2) : o + sprintf(o, "%u", day);
}

static char *put_hms(char *o, unsigned hour, unsigned min, unsigned sec)
{
    o = hour < 100 ? put_digits(o, hour, 2) : o + sprintf(o, "%u", hour);
    *o++ = ':';
    o = min < 100 ? put_digits(o, min, 2) : o + sprintf(o, "%u", min);
    *o++ = ':';
    return sec < 100 ? put_digits(o, sec, 2) : o + sprintf(o, "%u", sec);
}

static void append_frac(char *out, size_t outlen, int64_t us, int fsp)
{
    size_t o = strlen(out);
    if (fsp <= 0 || outlen - o < 8) return;
    *put_frac(out + o, us, fsp) = '\0';
}

int cdc_format_datetime2(const unsigned char *p, size_t avail, int fsp, char *out, size_t outlen)
{
    if (fsp < 0 || fsp > 6) return -1;
    int n = 5 + frac_bytes(fsp);
    if (avail < (size_t)n) return -1;
    int64_t intpart = (int64_t)be_uint(p, 5) - 0x8000000000LL;
    int64_t us = read_frac_us(p + 5, fsp);
    if (intpart < 0) intpart = -intpart; /* negative datetimes do not exist */
    int64_t ymd = intpart >> 17, hms = intpart % (1 << 17);
    int64_t ym = ymd >> 5;
    unsigned day = (unsigned)(ymd % 32), month = (unsigned)(ym % 13), year = (unsigned)(ym / 13);
    unsigned sec = (unsigned)(hms % 64), min = (unsigned)((hms >> 6) % 64),
             hour = (unsigned)(hms >> 12);
    if (outlen < 40) { /* the longest form is 26 bytes */
        if (outlen) out[0] = '\0';
        return -1;
    }
    char *o = put_date(out, year, month, day);
    *o++ = 'T';
    o = put_hms(o, hour, min, sec);
    o = put_frac(o, us, fsp);
    *o = '\0';
    return n;
}

int cdc_format_time2(const unsigned char *p, size_t avail, int fsp, char *out, size_t outlen)
{
    if (fsp < 0 || fsp > 6) return -1;
    int n = 3 + frac_bytes(fsp);
    if (avail < (size_t)n) return -1;
    int64_t packed; /* (int part << 24) + microseconds, signed */
    switch (fsp) {
    case 1: case 2: {
        int64_t ip = (int64_t)be_uint(p, 3) - 0x800000LL;
        int64_t fr = p[3];
        if (ip < 0 && fr) {
            ip++;
            fr -= 0x100;
        }
        packed = ip * (1LL << 24) + fr * 10000;
        break;
    }
    case 3: case 4: {
        int64_t ip = (int64_t)be_uint(p, 3) - 0x800000LL;
        int64_t fr = (int64_t)be_uint(p + 3, 2);
        if (ip < 0 && fr) {
            ip++;
            fr -= 0x10000;
        }
        packed = ip * (1LL << 24) + fr * 100;
        break;
    }
    case 5: case 6:
        packed = (int64_t)be_uint(p, 6) - 0x800000000000LL;
        break;
    default:
        packed = ((int64_t)be_uint(p, 3) - 0x800000LL) * (1LL << 24);
        break;
    }
    bool neg = packed < 0;
    if (neg) packed = -packed;
    int64_t hms = packed >> 24, us = packed % (1LL << 24);
    unsigned hour = (unsigned)((hms >> 12) % (1 << 10)), min = (unsigned)((hms >> 6) % 64),
             sec = (unsigned)(hms % 64);
    snprintf(out, outlen, "%s%02u:%02u:%02u", neg ? "-" : "", hour, min, sec);
    append_frac(out, outlen, us, fsp);
    return n;
}

static void format_epoch(int64_t sec, int64_t us, int fsp, char *out, size_t outlen)
{
    time_t t = (time_t)sec;
    struct tm tm;
    gmtime_r(&t, &tm);
    snprintf(out, outlen, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    append_frac(out, outlen, us, fsp);
    size_t o = strlen(out);
    snprintf(out + o, outlen - o, "Z");
}

int cdc_format_timestamp2(const unsigned char *p, size_t avail, int fsp, char *out,
                          size_t outlen)
{
    if (fsp < 0 || fsp > 6) return -1;
    int n = 4 + frac_bytes(fsp);
    if (avail < (size_t)n) return -1;
    format_epoch((int64_t)be_uint(p, 4), read_frac_us(p + 4, fsp), fsp, out, outlen);
    return n;
}

int cdc_format_date(const unsigned char *p, size_t avail, char *out, size_t outlen)
{
    if (avail < 3) return -1;
    unsigned v = (unsigned)le_uint(p, 3);
    if (outlen < 16) {
        if (outlen) out[0] = '\0';
        return -1;
    }
    *put_date(out, v >> 9, (v >> 5) & 15, v & 31) = '\0';
    return 3;
}

void cdc_format_float(float f, char *out, size_t outlen)
{
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(out, outlen, "%.*g", prec, (double)f);
        if (strtof(out, NULL) == f) return;
    }
}

/* ------------------------------------------------------------- strings */

static const uint16_t cp1252_80[32] = {
    0x20AC, 0x0081, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160,
    0x2039, 0x0152, 0x008D, 0x017D, 0x008F, 0x0090, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022,
    0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x009D, 0x017E, 0x0178,
};

void cdc_json_latin1(struct jbuf *b, const unsigned char *s, size_t n)
{
    /* converted to UTF-8 in a scratch buffer, then escaped by jbuf_str */
    char stackbuf[512] = { 0 };
    char *u = n * 3 <= sizeof stackbuf ? stackbuf : xmalloc(n * 3 + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned c = s[i];
        if (c >= 0x80 && c < 0xA0) c = cp1252_80[c - 0x80];
        if (c < 0x80) u[o++] = (char)c;
        else if (c < 0x800) {
            u[o++] = (char)(0xC0 | (c >> 6));
            u[o++] = (char)(0x80 | (c & 0x3F));
        } else {
            u[o++] = (char)(0xE0 | (c >> 12));
            u[o++] = (char)(0x80 | ((c >> 6) & 0x3F));
            u[o++] = (char)(0x80 | (c & 0x3F));
        }
    }
    jbuf_str(b, u, o);
    if (u != stackbuf) free(u);
}

bool cdc_charset_is_latin1(uint32_t c)
{
    return c == 5 || c == 8 || c == 15 || c == 31 || c == 47 || c == 48 || c == 49 || c == 94;
}

static void json_binary(struct jbuf *b, const unsigned char *s, size_t n)
{
    jbuf_rawz(b, "{\"base64\":");
    jbuf_base64(b, s, n);
    jbuf_char(b, '}');
}

static void json_text(struct jbuf *b, uint32_t charset, const unsigned char *s, size_t n)
{
    if (charset == CDC_CHARSET_BINARY) json_binary(b, s, n);
    else if (cdc_charset_is_latin1(charset)) cdc_json_latin1(b, s, n);
    else if (utf8_valid(s, n)) jbuf_str(b, (const char *)s, n);
    else json_binary(b, s, n);
}

/* ------------------------------------------------------------ one value */

#define NEED(k)                                                                          \
    do {                                                                                 \
        if ((size_t)(end - p) < (size_t)(k)) goto short_;                                \
    } while (0)

/* Writes the value of column c at p; returns bytes consumed or -1. */
static long value_to_json(const struct cdc_column *c, const unsigned char *p,
                          const unsigned char *end, struct jbuf *b, char *err, size_t errlen)
{
    char tmp[96];
    int n;
    switch (c->type) {
    case CDC_T_TINY: case CDC_T_SHORT: case CDC_T_INT24: case CDC_T_LONG: case CDC_T_LONGLONG: {
        int w = c->type == CDC_T_TINY ? 1 : c->type == CDC_T_SHORT ? 2 : c->type == CDC_T_INT24 ? 3
              : c->type == CDC_T_LONG ? 4 : 8;
        NEED(w);
        uint64_t u = le_uint(p, w);
        if (c->is_unsigned) jbuf_u64(b, u);
        else {
            int shift = 64 - 8 * w;
            int64_t s = shift ? (int64_t)(u << shift) >> shift : (int64_t)u;
            jbuf_i64(b, s);
        }
        return w;
    }
    case CDC_T_YEAR:
        NEED(1);
        jbuf_i64(b, p[0] ? 1900 + p[0] : 0);
        return 1;
    case CDC_T_FLOAT: {
        NEED(4);
        float f;
        memcpy(&f, p, 4);
        if (!isfinite(f)) jbuf_null(b);
        else {
            cdc_format_float(f, tmp, sizeof tmp);
            jbuf_rawz(b, tmp);
        }
        return 4;
    }
    case CDC_T_DOUBLE: {
        NEED(8);
        double d;
        memcpy(&d, p, 8);
        jbuf_double(b, d);
        return 8;
    }
    case CDC_T_NEWDECIMAL:
        n = cdc_format_decimal(p, (size_t)(end - p), c->meta & 0xFF, c->meta >> 8, tmp, sizeof tmp);
        if (n < 0) goto short_;
        jbuf_strz(b, tmp);
        return n;
    case CDC_T_VARCHAR: case CDC_T_VAR_STRING: case CDC_T_STRING: {
        int w = c->len < 256 ? 1 : 2;
        NEED(w);
        size_t l = le_uint(p, w);
        NEED(w + l);
        json_text(b, c->charset, p + w, l);
        return (long)(w + l);
    }
    case CDC_T_ENUM: case CDC_T_SET: {
        int w = (int)c->len;
        if (w < 1 || w > 8) goto bad;
        NEED(w);
        uint64_t v = le_uint(p, w);
        if (!c->values) jbuf_u64(b, v);
        else if (c->type == CDC_T_ENUM) {
            if (v == 0 || v > c->nvalues) jbuf_strz(b, ""); /* the invalid-value '' */
            else jbuf_strz(b, c->values[v - 1]);
        } else {
            struct jbuf s;
            jbuf_init(&s, 64);
            for (uint32_t i = 0; i < c->nvalues && i < 64; i++) {
                if (!(v >> i & 1)) continue;
                if (s.len) jbuf_char(&s, ',');
                jbuf_rawz(&s, c->values[i]);
            }
            jbuf_str(b, s.data ? s.data : "", s.len);
            jbuf_free(&s);
        }
        return w;
    }
    case CDC_T_BLOB: case CDC_T_TINY_BLOB: case CDC_T_MEDIUM_BLOB: case CDC_T_LONG_BLOB:
    case CDC_T_GEOMETRY: case CDC_T_JSON: {
        int w = c->meta;
        if (w < 1 || w > 4) goto bad;
        NEED(w);
        size_t l = le_uint(p, w);
        NEED(w + l);
        if (c->type == CDC_T_GEOMETRY || c->type == CDC_T_JSON) json_binary(b, p + w, l);
        else json_text(b, c->charset, p + w, l);
        return (long)(w + l);
    }
    case CDC_T_BIT: {
        int w = (c->meta >> 8) + ((c->meta & 0xFF) ? 1 : 0);
        if (w > 8) goto bad;
        NEED(w);
        jbuf_u64(b, be_uint(p, w));
        return w;
    }
    case CDC_T_DATE: case CDC_T_NEWDATE:
        n = cdc_format_date(p, (size_t)(end - p), tmp, sizeof tmp);
        if (n < 0) goto short_;
        jbuf_strz(b, tmp);
        return n;
    case CDC_T_TIME: {
        NEED(3);
        int32_t v = (int32_t)(le_uint(p, 3) << 8) >> 8;
        bool neg = v < 0;
        if (neg) v = -v;
        snprintf(tmp, sizeof tmp, "%s%02d:%02d:%02d", neg ? "-" : "", v / 10000, v / 100 % 100,
                 v % 100);
        jbuf_strz(b, tmp);
        return 3;
    }
    case CDC_T_DATETIME: {
        NEED(8);
        uint64_t v = le_uint(p, 8);
        unsigned d = (unsigned)(v / 1000000), t = (unsigned)(v % 1000000);
        char *o = put_date(tmp, d / 10000, d / 100 % 100, d % 100);
        *o++ = 'T';
        o = put_hms(o, t / 10000, t / 100 % 100, t % 100);
        jbuf_str(b, tmp, (size_t)(o - tmp));
        return 8;
    }
    case CDC_T_TIMESTAMP:
        NEED(4);
        format_epoch((int64_t)le_uint(p, 4), 0, 0, tmp, sizeof tmp);
        jbuf_strz(b, tmp);
        return 4;
    case CDC_T_TIMESTAMP2:
        n = cdc_format_timestamp2(p, (size_t)(end - p), c->meta, tmp, sizeof tmp);
        if (n < 0) goto short_;
        jbuf_strz(b, tmp);
        return n;
    case CDC_T_DATETIME2:
        n = cdc_format_datetime2(p, (size_t)(end - p), c->meta, tmp, sizeof tmp);
        if (n < 0) goto short_;
        jbuf_strz(b, tmp);
        return n;
    case CDC_T_TIME2:
        n = cdc_format_time2(p, (size_t)(end - p), c->meta, tmp, sizeof tmp);
        if (n < 0) goto short_;
        jbuf_strz(b, tmp);
        return n;
    case CDC_T_NULL:
        jbuf_null(b);
        return 0;
    default:
        goto bad;
    }
short_:
    set_err(err, errlen, "value of column %s (type %u) truncated", c->name ? c->name : "?",
            c->type);
    return -1;
bad:
    set_err(err, errlen, "column %s: unsupported type %u (metadata %u)", c->name ? c->name : "?",
            c->type, c->meta);
    return -1;
}

int cdc_row_to_json(const struct cdc_table *t, const unsigned char *present,
                    const unsigned char **pp, const unsigned char *end, struct jbuf *b, char *err,
                    size_t errlen)
{
    return cdc_row_to_json_pk(t, present, pp, end, b, NULL, err, errlen);
}

int cdc_row_to_json_pk(const struct cdc_table *t, const unsigned char *present,
                       const unsigned char **pp, const unsigned char *end, struct jbuf *b,
                       struct cdc_span *pk, char *err, size_t errlen)
{
    const unsigned char *p = *pp;
    uint32_t npresent = 0;
    for (uint32_t i = 0; i < t->ncols; i++)
        if (present[i / 8] >> (i % 8) & 1) npresent++;
    size_t nb = (npresent + 7) / 8;
    if ((size_t)(end - p) < nb) {
        set_err(err, errlen, "row image of %s.%s truncated", t->db, t->table);
        return -1;
    }
    if (pk)
        for (uint32_t j = 0; j < t->npk; j++) pk[j].len = 0;
    const unsigned char *nulls = p;
    p += nb;
    bool first = true;
    jbuf_char(b, '{');
    uint32_t k = 0, kp = 0;
    for (uint32_t i = 0; i < t->ncols; i++) {
        const struct cdc_column *c = &t->cols[i];
        /* the span of this column's value, when it is a key column */
        struct cdc_span *sp = NULL;
        if (c->in_pk) {
            if (pk && kp < t->npk) sp = &pk[kp];
            kp++;
        }
        if (!(present[i / 8] >> (i % 8) & 1)) continue;
        if (c->key) {
            if (!first) jbuf_char(b, ',');
            first = false;
            jbuf_raw(b, c->key, c->key_len);
        } else if (c->name) jbuf_key(b, &first, c->name);
        else {
            char key[16];
            snprintf(key, sizeof key, "@%u", i + 1);
            jbuf_key(b, &first, key);
        }
        size_t at = b->len;
        bool isnull = nulls[k / 8] >> (k % 8) & 1;
        k++;
        if (isnull) {
            jbuf_null(b);
        } else {
            long n = value_to_json(c, p, end, b, err, errlen);
            if (n < 0) return -1;
            p += n;
        }
        if (sp) {
            sp->off = at;
            sp->len = b->len - at;
        }
    }
    jbuf_char(b, '}');
    *pp = p;
    return 0;
}

uint64_t cdc_table_key(const struct cdc_table *t)
{
    const char *db = t->db ? t->db : "", *tb = t->table ? t->table : "";
    const void *parts[2] = {db, tb};
    size_t lens[2] = {strlen(db), strlen(tb)};
    return message_key_hash_parts(parts, lens, 2);
}

uint64_t cdc_ddl_key(const char *db)
{
    if (!db) db = "";
    const void *parts[1] = {db};
    size_t lens[1] = {strlen(db)};
    return message_key_hash_parts(parts, lens, 1);
}

uint64_t cdc_row_key(const struct cdc_table *t, const char *buf, const struct cdc_span *before,
                     const struct cdc_span *after)
{
    if (t->npk == 0 || t->npk > CDC_PK_MAX || (!before && !after)) return cdc_table_key(t);
    const void *parts[2 + CDC_PK_MAX];
    size_t lens[2 + CDC_PK_MAX];
    parts[0] = t->db ? t->db : "";
    lens[0] = strlen(parts[0]);
    parts[1] = t->table ? t->table : "";
    lens[1] = strlen(parts[1]);
    for (uint32_t j = 0; j < t->npk; j++) {
        /* the new value (after image), else the unchanged one (before) */
        const struct cdc_span *sp = after && after[j].len ? &after[j]
                                    : before && before[j].len ? &before[j] : NULL;
        if (!sp) return cdc_table_key(t);
        parts[2 + j] = buf + sp->off;
        lens[2 + j] = sp->len;
    }
    return message_key_hash_parts(parts, lens, 2 + t->npk);
}

/* ------------------------------------------------------------ positions */

int cdc_position_parse(const char *s, char *file, size_t filelen, uint64_t *pos)
{
    if (!s) return -1;
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s) return -1;
    size_t fl = (size_t)(colon - s);
    if (fl + 1 > filelen) return -1;
    const char *num = colon + 1;
    if (*num < '0' || *num > '9') return -1;
    errno = 0;
    char *endp;
    unsigned long long v = strtoull(num, &endp, 10);
    if (errno || *endp || v < 4 || v > UINT32_MAX) return -1;
    memcpy(file, s, fl);
    file[fl] = '\0';
    *pos = v;
    return 0;
}
