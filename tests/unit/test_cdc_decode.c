/* mysql_cdc decoding: value formats, TABLE_MAP/ROWS bodies captured from a
 * MariaDB 10.11 server (binlog_row_metadata=FULL), the rows' ordering keys
 * (primary key metadata, issue 36), positions, filters and the
 * delivered-prefix checkpoint tracker. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "endpoints/cdc_checkpoint.h"
#include "endpoints/cdc_decode.h"
#include "endpoints/cdc_filter.h"
#include "common/message.h"

static size_t unhex(const char *h, unsigned char *out, size_t cap)
{
    size_t n = 0;
    for (; h[0] && h[1] && n < cap; h += 2) {
        unsigned v;
        sscanf(h, "%2x", &v);
        out[n++] = (unsigned char)v;
    }
    return n;
}

static void test_decimal(void **state)
{
    (void)state;
    char out[80];
    /* decimal(5,2) 3.25: 80 03 19 */
    const unsigned char a[] = { 0x80, 0x03, 0x19 };
    assert_int_equal(cdc_format_decimal(a, sizeof a, 5, 2, out, sizeof out), 3);
    assert_string_equal(out, "3.25");
    /* decimal(10,3) -1234.567: positive encoding of 1234.567 is
     * intg 7 -> 4 bytes (0x800004D2), frac 3 -> 2 bytes (0x0237); negated */
    const unsigned char pos[] = { 0x80, 0x00, 0x04, 0xD2, 0x02, 0x37 };
    unsigned char neg[6];
    for (int i = 0; i < 6; i++) neg[i] = (unsigned char)~pos[i];
    assert_int_equal(cdc_format_decimal(pos, 6, 10, 3, out, sizeof out), 6);
    assert_string_equal(out, "1234.567");
    assert_int_equal(cdc_format_decimal(neg, 6, 10, 3, out, sizeof out), 6);
    assert_string_equal(out, "-1234.567");
    /* zero with scale */
    const unsigned char z[] = { 0x80, 0x00, 0x00, 0x00, 0x00, 0x00 };
    assert_int_equal(cdc_format_decimal(z, 6, 10, 3, out, sizeof out), 6);
    assert_string_equal(out, "0.000");
    /* too short, bad precision */
    assert_int_equal(cdc_format_decimal(pos, 5, 10, 3, out, sizeof out), -1);
    assert_int_equal(cdc_format_decimal(pos, 6, 0, 0, out, sizeof out), -1);
    assert_int_equal(cdc_format_decimal(pos, 6, 5, 6, out, sizeof out), -1);
}

static void test_temporal(void **state)
{
    (void)state;
    char out[64];
    unsigned char b[16];
    /* DATETIME2(0) 2024-02-03 04:05:06: ym = 2024*13+2 = 26314,
     * ymd = ym<<5|3, hms = 4<<12|5<<6|6; int = ymd<<17|hms + 0x8000000000 */
    uint64_t ym = 2024 * 13 + 2, ymd = ym << 5 | 3, hms = 4 << 12 | 5 << 6 | 6;
    uint64_t v = (ymd << 17 | hms) + 0x8000000000ULL;
    for (int i = 0; i < 5; i++) b[i] = (unsigned char)(v >> (8 * (4 - i)));
    assert_int_equal(cdc_format_datetime2(b, 5, 0, out, sizeof out), 5);
    assert_string_equal(out, "2024-02-03T04:05:06");
    b[5] = 0x03; b[6] = 0x15; /* fsp 3: 789 * 1000 us / 100 = 7890 = 0x1ED2 */
    b[5] = 0x1E; b[6] = 0xD2;
    assert_int_equal(cdc_format_datetime2(b, 7, 3, out, sizeof out), 7);
    assert_string_equal(out, "2024-02-03T04:05:06.789");
    assert_int_equal(cdc_format_datetime2(b, 6, 3, out, sizeof out), -1);

    /* TIME2(0) -12:34:56 */
    int64_t t = -((int64_t)(12 << 12 | 34 << 6 | 56));
    uint64_t tv = (uint64_t)(t + 0x800000);
    b[0] = (unsigned char)(tv >> 16); b[1] = (unsigned char)(tv >> 8); b[2] = (unsigned char)tv;
    assert_int_equal(cdc_format_time2(b, 3, 0, out, sizeof out), 3);
    assert_string_equal(out, "-12:34:56");
    /* TIME2(2) 12:34:56.50 */
    tv = (uint64_t)(12 << 12 | 34 << 6 | 56) + 0x800000;
    b[0] = (unsigned char)(tv >> 16); b[1] = (unsigned char)(tv >> 8); b[2] = (unsigned char)tv;
    b[3] = 50;
    assert_int_equal(cdc_format_time2(b, 4, 2, out, sizeof out), 4);
    assert_string_equal(out, "12:34:56.50");

    /* TIMESTAMP2(6) 1706933106.123456 */
    const unsigned char ts[] = { 0x65, 0xBD, 0xBB, 0x72, 0x01, 0xE2, 0x40 };
    assert_int_equal(cdc_format_timestamp2(ts, 7, 6, out, sizeof out), 7);
    assert_string_equal(out, "2024-02-03T04:05:06.123456Z");
    /* DATE 2024-02-03: 2024<<9 | 2<<5 | 3 */
    unsigned dv = 2024u << 9 | 2u << 5 | 3u;
    b[0] = (unsigned char)dv; b[1] = (unsigned char)(dv >> 8); b[2] = (unsigned char)(dv >> 16);
    assert_int_equal(cdc_format_date(b, 3, out, sizeof out), 3);
    assert_string_equal(out, "2024-02-03");
    assert_int_equal(cdc_format_date(b, 2, out, sizeof out), -1);

    cdc_format_float(1.5f, out, sizeof out);
    assert_string_equal(out, "1.5");
    cdc_format_float(0.1f, out, sizeof out);
    assert_string_equal(out, "0.1");
}

/* Table z from a MariaDB 10.11 binlog:
 *   create table z (id int unsigned primary key, y year, f float,
 *     d decimal(5,2) unsigned, bt bit(3), t tinyint unsigned, v varchar(10),
 *     vb varbinary(5), bl blob, tx text, e enum('a','b'), st set('x','y'),
 *     c char(3) charset latin1, g geometry null, j json) charset utf8mb4;
 * (MariaDB's JSON is a LONGTEXT: a string, not base64.)
 *   insert into z values (1, 2024, 1.5, 3.25, b'101', 9, 'é', x'ff', x'00',
 *     'txt', 'b', 'x,y', 'é', null, '[1]');
 * Bodies: event minus the 19-byte header and the 4-byte checksum. */
static const char TM_Z[] =
    "360000000000010004" "73686f7000" "017a00" "0f030d04f610010f0ffcfcfefefefffc"
    "130405020300280005000202f701f801fe030404" "fe7f"
    "0101d8" "03072d3f3f2d083f2e" "070100"
    "042402696401790166016402627401740176027662" "02626c027478016502737401630167016a"
    "0a012d" "05050201780179" "06050201610162" "080100";
static const char ROWS_Z[] =
    "36000000000001000fff7f00a0010000007c0000c03f8003190509" "02c3a9" "01ff" "010000"
    "0300747874" "02" "03" "01e9" "030000005b315d";

static void test_table_and_row(void **state)
{
    (void)state;
    unsigned char tm[512], rw[512];
    size_t tl = unhex(TM_Z, tm, sizeof tm), rl = unhex(ROWS_Z, rw, sizeof rw);
    struct cdc_table t;
    char err[256];
    assert_int_equal(cdc_table_parse(tm, tl, &t, err, sizeof err), 0);
    assert_string_equal(t.db, "shop");
    assert_string_equal(t.table, "z");
    assert_int_equal(t.ncols, 15);
    assert_true(t.have_names);
    assert_true(t.have_signedness);
    assert_string_equal(t.cols[0].name, "id");
    assert_true(t.cols[0].is_unsigned);
    assert_true(t.cols[5].is_unsigned);
    assert_false(t.cols[2].is_unsigned);
    assert_int_equal(t.cols[7].charset, 63);
    assert_int_equal(t.cols[12].charset, 8);
    assert_int_equal(t.cols[10].type, CDC_T_ENUM);
    assert_int_equal(t.cols[10].nvalues, 2);
    /* SIMPLE_PRIMARY_KEY (08 01 00): the key is id */
    assert_true(t.have_pk);
    assert_int_equal(t.npk, 1);
    assert_true(t.cols[0].in_pk);
    for (uint32_t i = 1; i < t.ncols; i++) assert_false(t.cols[i].in_pk);

    struct cdc_rows r;
    assert_int_equal(cdc_rows_parse(23, rw, rl, &r, err, sizeof err), 0);
    assert_int_equal(r.op, CDC_OP_INSERT);
    assert_int_equal(r.table_id, t.table_id);
    assert_int_equal(r.ncols, 15);
    struct jbuf b;
    jbuf_init(&b, 64);
    const unsigned char *p = r.data;
    assert_int_equal(cdc_row_to_json(&t, r.present, &p, r.end, &b, err, sizeof err), 0);
    assert_ptr_equal(p, r.end);
    /* the same JSON with the key spans noted; the row keyed by shop.z id 1 */
    struct jbuf b2;
    jbuf_init(&b2, 16);
    struct cdc_span sp[1];
    p = r.data;
    assert_int_equal(cdc_row_to_json_pk(&t, r.present, &p, r.end, &b2, sp, err, sizeof err), 0);
    assert_ptr_equal(p, r.end);
    assert_int_equal(b2.len, b.len);
    assert_memory_equal(b2.data, b.data, b.len);
    assert_int_equal(sp[0].len, 1);
    assert_memory_equal(b2.data + sp[0].off, "1", 1);
    const void *zparts[] = { "shop", "z", "1" };
    const size_t zlens[] = { 4, 1, 1 };
    assert_int_equal(cdc_row_key(&t, b2.data, NULL, sp), message_key_hash_parts(zparts, zlens, 3));
    jbuf_free(&b2);
    jbuf_char(&b, '\0');
    assert_string_equal(b.data,
        "{\"id\":1,\"y\":2024,\"f\":1.5,\"d\":\"3.25\",\"bt\":5,\"t\":9,\"v\":\"\xc3\xa9\","
        "\"vb\":{\"base64\":\"/w==\"},\"bl\":{\"base64\":\"AA==\"},\"tx\":\"txt\",\"e\":\"b\","
        "\"st\":\"x,y\",\"c\":\"\xc3\xa9\",\"g\":null,\"j\":\"[1]\"}");

    /* every truncation is an error, never a crash or an over-read */
    for (size_t cut = 0; cut < (size_t)(r.end - r.data); cut++) {
        jbuf_reset(&b);
        p = r.data;
        assert_int_equal(cdc_row_to_json(&t, r.present, &p, r.data + cut, &b, err, sizeof err), -1);
    }
    for (size_t cut = 0; cut < tl; cut++) {
        struct cdc_table t2;
        if (cdc_table_parse(tm, cut, &t2, err, sizeof err) == 0) cdc_table_free(&t2);
    }
    assert_int_equal(cdc_rows_parse(19, rw, rl, &r, err, sizeof err), -1);
    assert_int_equal(cdc_rows_parse(23, rw, 5, &r, err, sizeof err), -1);
    jbuf_free(&b);

    cdc_table_free(&t);
}

static void test_minimal_metadata(void **state)
{
    (void)state;
    /* table s (id int, name varchar(20)) with no optional metadata */
    unsigned char tm[64];
    size_t tl = unhex("160000000000010004" "73686f7000" "017300" "02030f" "025000" "02", tm, sizeof tm);
    struct cdc_table t;
    char err[128];
    assert_int_equal(cdc_table_parse(tm, tl, &t, err, sizeof err), 0);
    assert_false(t.have_names);
    char *names[] = { "id", "name" };
    bool uns[] = { true, false }, bin[] = { false, false };
    cdc_table_apply_schema(&t, names, uns, bin, 2);
    assert_true(t.have_names);
    assert_string_equal(t.cols[1].name, "name");
    assert_true(t.cols[0].is_unsigned);
    unsigned char row[] = { 0x00, 0xff, 0xff, 0xff, 0xff, 0x02, 'h', 'i' };
    unsigned char present[] = { 0x03 };
    struct jbuf b;
    jbuf_init(&b, 64);
    const unsigned char *p = row;
    assert_int_equal(cdc_row_to_json(&t, present, &p, row + sizeof row, &b, err, sizeof err), 0);
    jbuf_char(&b, '\0');
    assert_string_equal(b.data, "{\"id\":4294967295,\"name\":\"hi\"}");
    jbuf_free(&b);
    cdc_table_free(&t);
}

/* ------------------------------------------- hand-built event bodies */

static size_t put_lenenc(unsigned char *o, size_t v)
{
    if (v < 251) {
        o[0] = (unsigned char)v;
        return 1;
    }
    assert_true(v < 65536);
    o[0] = 252;
    o[1] = (unsigned char)(v & 0xFF);
    o[2] = (unsigned char)(v >> 8);
    return 3;
}

/* A TABLE_MAP body (table id 42): the given column types and their packed
 * metadata, all nullable, plus COLUMN_NAME optional metadata when names is
 * not NULL. */
static size_t table_map_body(unsigned char *out, size_t cap, const uint8_t *types, uint32_t ncols,
                             const unsigned char *meta, size_t metalen, const char *const *names)
{
    unsigned char *o = out;
    const unsigned char head[] = { 42, 0, 0, 0, 0, 0, 1, 0, 1, 'b', 0, 1, 't', 0 };
    memcpy(o, head, sizeof head);
    o += sizeof head;
    o += put_lenenc(o, ncols);
    memcpy(o, types, ncols);
    o += ncols;
    o += put_lenenc(o, metalen);
    if (metalen) memcpy(o, meta, metalen);
    o += metalen;
    memset(o, 0xFF, (ncols + 7) / 8);
    o += (ncols + 7) / 8;
    if (names) {
        unsigned char v[2048];
        size_t vl = 0;
        for (uint32_t i = 0; i < ncols; i++) {
            size_t l = strlen(names[i]);
            vl += put_lenenc(v + vl, l);
            memcpy(v + vl, names[i], l);
            vl += l;
        }
        *o++ = 4; /* COLUMN_NAME */
        o += put_lenenc(o, vl);
        memcpy(o, v, vl);
        o += vl;
    }
    assert_true((size_t)(o - out) <= cap);
    return (size_t)(o - out);
}

/* A WRITE_ROWS v1 body for table 42 with every column present and one row
 * image (null bitmap of zeros, then the values). */
static size_t write_rows_body(unsigned char *out, uint32_t ncols, const unsigned char *values,
                              size_t vlen)
{
    unsigned char *o = out;
    const unsigned char head[] = { 42, 0, 0, 0, 0, 0, 0, 0 };
    memcpy(o, head, sizeof head);
    o += sizeof head;
    o += put_lenenc(o, ncols);
    memset(o, 0xFF, (ncols + 7) / 8);
    o += (ncols + 7) / 8;
    memset(o, 0x00, (ncols + 7) / 8);
    o += (ncols + 7) / 8;
    memcpy(o, values, vlen);
    o += vlen;
    return (size_t)(o - out);
}

/* DECIMAL groups: up to 9 digits in 4 bytes, a leading/trailing partial
 * group of k digits in dig2bytes[k] bytes. A group whose binary value has
 * more digits than the group holds is never written by a server: the value
 * is rejected as malformed (not printed with the extra digits, which would
 * shift every digit after it). */
static void test_decimal_digit_groups(void **state)
{
    (void)state;
    char out[80];
    unsigned char neg[16];
    /* DECIMAL(5,2): 3 integer digits in 2 bytes, 2 fraction digits in 1 */
    const unsigned char max52[] = { 0x83, 0xE7, 0x63 }; /* 999.99 */
    assert_int_equal(cdc_format_decimal(max52, 3, 5, 2, out, sizeof out), 3);
    assert_string_equal(out, "999.99");
    for (int i = 0; i < 3; i++) neg[i] = (unsigned char)~max52[i];
    assert_int_equal(cdc_format_decimal(neg, 3, 5, 2, out, sizeof out), 3);
    assert_string_equal(out, "-999.99");
    const unsigned char int1000[] = { 0x83, 0xE8, 0x00 }; /* integer group 1000 > 999 */
    assert_int_equal(cdc_format_decimal(int1000, 3, 5, 2, out, sizeof out), -1);
    for (int i = 0; i < 3; i++) neg[i] = (unsigned char)~int1000[i];
    assert_int_equal(cdc_format_decimal(neg, 3, 5, 2, out, sizeof out), -1);
    const unsigned char frac100[] = { 0x80, 0x00, 0x64 }; /* fraction group 100 > 99 */
    assert_int_equal(cdc_format_decimal(frac100, 3, 5, 2, out, sizeof out), -1);
    const unsigned char fracff[] = { 0x80, 0x01, 0xFF }; /* 255 in a 2-digit group */
    assert_int_equal(cdc_format_decimal(fracff, 3, 5, 2, out, sizeof out), -1);

    /* DECIMAL(18,9): one full 4-byte group on each side */
    const unsigned char max189[] = { 0xBB, 0x9A, 0xC9, 0xFF, 0x3B, 0x9A, 0xC9, 0xFF };
    assert_int_equal(cdc_format_decimal(max189, 8, 18, 9, out, sizeof out), 8);
    assert_string_equal(out, "999999999.999999999");
    const unsigned char int1e9[] = { 0xBB, 0x9A, 0xCA, 0x00, 0x00, 0x00, 0x00, 0x00 };
    assert_int_equal(cdc_format_decimal(int1e9, 8, 18, 9, out, sizeof out), -1);
    const unsigned char frac1e9[] = { 0x80, 0x00, 0x00, 0x01, 0x3B, 0x9A, 0xCA, 0x00 };
    assert_int_equal(cdc_format_decimal(frac1e9, 8, 18, 9, out, sizeof out), -1);
    const unsigned char fracmax[] = { 0x80, 0x00, 0x00, 0x01, 0xFF, 0xFF, 0xFF, 0xFF };
    assert_int_equal(cdc_format_decimal(fracmax, 8, 18, 9, out, sizeof out), -1);
    for (int i = 0; i < 8; i++) neg[i] = (unsigned char)~frac1e9[i];
    assert_int_equal(cdc_format_decimal(neg, 8, 18, 9, out, sizeof out), -1);

    /* DECIMAL(20,0): a leading 2-digit group (1 byte) then two full groups */
    const unsigned char lead99[] = { 0xE3, 0x3B, 0x9A, 0xC9, 0xFF, 0x00, 0x00, 0x00, 0x07 };
    assert_int_equal(cdc_format_decimal(lead99, 9, 20, 0, out, sizeof out), 9);
    assert_string_equal(out, "99999999999000000007");
    unsigned char lead100[9];
    memcpy(lead100, lead99, 9);
    lead100[0] = 0x80 | 100;
    assert_int_equal(cdc_format_decimal(lead100, 9, 20, 0, out, sizeof out), -1);
    /* the middle group too large */
    const unsigned char mid[] = { 0x80, 0x3B, 0x9A, 0xCA, 0x00, 0x00, 0x00, 0x00, 0x00 };
    assert_int_equal(cdc_format_decimal(mid, 9, 20, 0, out, sizeof out), -1);

    /* in a row: the event is refused, naming the column, nothing half written
     * is passed off as the value */
    const uint8_t types[] = { CDC_T_NEWDECIMAL };
    const unsigned char meta[] = { 5, 2 }; /* precision, scale */
    const char *const names[] = { "price" };
    unsigned char tm[256], rw[64];
    size_t tl = table_map_body(tm, sizeof tm, types, 1, meta, sizeof meta, names);
    struct cdc_table t;
    char err[256];
    assert_int_equal(cdc_table_parse(tm, tl, &t, err, sizeof err), 0);
    struct jbuf b;
    jbuf_init(&b, 64);
    struct cdc_rows r;
    size_t rl = write_rows_body(rw, 1, max52, sizeof max52);
    assert_int_equal(cdc_rows_parse(23, rw, rl, &r, err, sizeof err), 0);
    const unsigned char *p = r.data;
    assert_int_equal(cdc_row_to_json(&t, r.present, &p, r.end, &b, err, sizeof err), 0);
    assert_string_equal(b.data, "{\"price\":\"999.99\"}");
    rl = write_rows_body(rw, 1, int1000, sizeof int1000);
    assert_int_equal(cdc_rows_parse(23, rw, rl, &r, err, sizeof err), 0);
    p = r.data;
    err[0] = '\0';
    jbuf_reset(&b);
    assert_int_equal(cdc_row_to_json(&t, r.present, &p, r.end, &b, err, sizeof err), -1);
    assert_non_null(strstr(err, "price"));
    assert_null(strstr(b.data, "1000"));
    jbuf_free(&b);
    cdc_table_free(&t);
}

/* The key a column must get: exactly what jbuf_str writes for its name,
 * then ':'. */
static void expect_key(const struct cdc_column *c, const char *name)
{
    struct jbuf want;
    jbuf_init(&want, 16);
    jbuf_strz(&want, name);
    jbuf_char(&want, ':');
    assert_non_null(c->key);
    assert_int_equal(c->key_len, want.len);
    assert_memory_equal(c->key, want.data, want.len);
    assert_int_equal(strlen(c->key), c->key_len); /* NUL terminated, no NUL inside */
    jbuf_free(&want);
}

/* The per-table precomputed column keys are escaped as jbuf_str escapes the
 * name (quote, backslash, control characters, UTF-8 kept, invalid UTF-8
 * replaced) and are what the row JSON uses. */
static void test_column_keys_escaped(void **state)
{
    (void)state;
    static char longq[301];
    memset(longq, '"', 300); /* escapes to 600 bytes: the key buffer grows */
    const char *const names[] = {
        "a\"b", "c\\d", "e\x01" "f\n\x1f", "h\xc3\xa9llo \xe2\x82\xac", "bad\xff", "id", longq,
    };
    enum { N = 7 };
    uint8_t types[N];
    memset(types, CDC_T_TINY, sizeof types);
    unsigned char tm[2048], rw[64];
    size_t tl = table_map_body(tm, sizeof tm, types, N, NULL, 0, names);
    struct cdc_table t;
    char err[256];
    assert_int_equal(cdc_table_parse(tm, tl, &t, err, sizeof err), 0);
    assert_true(t.have_names);
    for (int i = 0; i < N; i++) expect_key(&t.cols[i], names[i]);
    /* the escapes spelled out, independently of jbuf_str */
    assert_string_equal(t.cols[0].key, "\"a\\\"b\":");
    assert_string_equal(t.cols[1].key, "\"c\\\\d\":");
    assert_string_equal(t.cols[2].key, "\"e\\u0001f\\n\\u001f\":");
    assert_string_equal(t.cols[3].key, "\"h\xc3\xa9llo \xe2\x82\xac\":");
    assert_string_equal(t.cols[4].key, "\"bad\xef\xbf\xbd\":"); /* U+FFFD */
    assert_string_equal(t.cols[5].key, "\"id\":");
    assert_int_equal(t.cols[6].key_len, 2 + 600 + 1);

    /* a row uses them: the same bytes as jbuf_key would write */
    const unsigned char vals[N] = { 1, 2, 3, 4, 5, 6, 0x80 };
    size_t rl = write_rows_body(rw, N, vals, sizeof vals);
    struct cdc_rows r;
    assert_int_equal(cdc_rows_parse(23, rw, rl, &r, err, sizeof err), 0);
    struct jbuf got, want;
    jbuf_init(&got, 64);
    jbuf_init(&want, 64);
    const unsigned char *p = r.data;
    assert_int_equal(cdc_row_to_json(&t, r.present, &p, r.end, &got, err, sizeof err), 0);
    bool first = true;
    jbuf_char(&want, '{');
    for (int i = 0; i < N; i++) {
        jbuf_key(&want, &first, names[i]);
        jbuf_i64(&want, (int8_t)vals[i]);
    }
    jbuf_char(&want, '}');
    assert_int_equal(got.len, want.len);
    assert_memory_equal(got.data, want.data, want.len);
    cdc_table_free(&t);

    /* without names in the table map: "@<n>" until the schema names them,
     * then the escaped names */
    tl = table_map_body(tm, sizeof tm, types, N, NULL, 0, NULL);
    assert_int_equal(cdc_table_parse(tm, tl, &t, err, sizeof err), 0);
    assert_false(t.have_names);
    assert_string_equal(t.cols[0].key, "\"@1\":");
    assert_string_equal(t.cols[6].key, "\"@7\":");
    assert_int_equal(t.cols[6].key_len, 5);
    cdc_table_apply_schema(&t, (char *const *)names, NULL, NULL, N);
    for (int i = 0; i < N; i++) expect_key(&t.cols[i], names[i]);
    jbuf_reset(&got);
    p = r.data;
    assert_int_equal(cdc_row_to_json(&t, r.present, &p, r.end, &got, err, sizeof err), 0);
    assert_int_equal(got.len, want.len);
    assert_memory_equal(got.data, want.data, want.len);
    /* fewer schema names than columns: the rest keep "@<n>" */
    cdc_table_free(&t);
    assert_int_equal(cdc_table_parse(tm, tl, &t, err, sizeof err), 0);
    cdc_table_apply_schema(&t, (char *const *)names, NULL, NULL, 2);
    expect_key(&t.cols[1], names[1]);
    assert_string_equal(t.cols[2].key, "\"@3\":");
    jbuf_free(&got);
    jbuf_free(&want);
    cdc_table_free(&t);
}

/* ------------------------------------------- ordering keys (issue 36) */

/* Appends primary key optional metadata to a table map body of length len:
 * SIMPLE_PRIMARY_KEY (prefix NULL) or PRIMARY_KEY_WITH_PREFIX. */
static size_t add_pk(unsigned char *body, size_t len, const uint32_t *idx, const uint32_t *prefix,
                     size_t n)
{
    unsigned char v[64];
    size_t vl = 0;
    for (size_t i = 0; i < n; i++) {
        vl += put_lenenc(v + vl, idx[i]);
        if (prefix) vl += put_lenenc(v + vl, prefix[i]);
    }
    unsigned char *o = body + len;
    *o++ = prefix ? 9 : 8;
    o += put_lenenc(o, vl);
    memcpy(o, v, vl);
    o += vl;
    return (size_t)(o - body);
}

/* Table b.t (a INT, s VARCHAR(20), v INT), optionally with names. */
static const uint8_t KT_TYPES[] = { CDC_T_LONG, CDC_T_VARCHAR, CDC_T_LONG };
static const unsigned char KT_META[] = { 20, 0 };
static const char *const KT_NAMES[] = { "a", "s", "v" };

static size_t kt_table(unsigned char *tm, size_t cap, bool names)
{
    return table_map_body(tm, cap, KT_TYPES, 3, KT_META, sizeof KT_META, names ? KT_NAMES : NULL);
}

/* One row image of the columns in mask (bit i = column i): a, s, v. */
static size_t kt_image(unsigned char *o, unsigned mask, uint32_t a, const char *str, uint32_t v)
{
    size_t n = 0;
    o[n++] = 0x00; /* null bitmap: no nulls (3 columns at most: one byte) */
    if (mask & 1) {
        for (int i = 0; i < 4; i++) o[n++] = (unsigned char)(a >> (8 * i));
    }
    if (mask & 2) {
        size_t l = strlen(str);
        o[n++] = (unsigned char)l;
        memcpy(o + n, str, l);
        n += l;
    }
    if (mask & 4) {
        for (int i = 0; i < 4; i++) o[n++] = (unsigned char)(v >> (8 * i));
    }
    return n;
}

/* A v1 rows body for table 42 (3 columns): type 23 insert, 24 update, 25
 * delete; before/after images (after only for an update). */
static size_t kt_rows(unsigned char *out, int type, unsigned present, unsigned present_upd,
                      const unsigned char *img, size_t imglen)
{
    unsigned char *o = out;
    const unsigned char head[] = { 42, 0, 0, 0, 0, 0, 0, 0 };
    memcpy(o, head, sizeof head);
    o += sizeof head;
    *o++ = 3;
    *o++ = (unsigned char)present;
    if (type == 24) *o++ = (unsigned char)present_upd;
    memcpy(o, img, imglen);
    o += imglen;
    return (size_t)(o - out);
}

/* Decodes the one row of a rows body as mysql_cdc does and returns its
 * ordering key. */
static uint64_t kt_key(const struct cdc_table *t, int type, const unsigned char *body, size_t len)
{
    struct cdc_rows r;
    char err[256];
    assert_int_equal(cdc_rows_parse(type, body, len, &r, err, sizeof err), 0);
    struct jbuf b;
    jbuf_init(&b, 64);
    struct cdc_span before[CDC_PK_MAX], after[CDC_PK_MAX];
    const unsigned char *p = r.data;
    if (r.op != CDC_OP_INSERT)
        assert_int_equal(cdc_row_to_json_pk(t, r.present, &p, r.end, &b, before, err, sizeof err), 0);
    if (r.op != CDC_OP_DELETE)
        assert_int_equal(cdc_row_to_json_pk(t, r.op == CDC_OP_UPDATE ? r.present_upd : r.present,
                                            &p, r.end, &b, after, err, sizeof err), 0);
    assert_ptr_equal(p, r.end);
    uint64_t k = cdc_row_key(t, b.data, r.op == CDC_OP_INSERT ? NULL : before,
                             r.op == CDC_OP_DELETE ? NULL : after);
    jbuf_free(&b);
    assert_int_not_equal(k, 0);
    return k;
}

static uint64_t kt_insert(const struct cdc_table *t, uint32_t a, const char *str, uint32_t v)
{
    unsigned char img[64], body[128];
    size_t il = kt_image(img, 7, a, str, v);
    return kt_key(t, 23, body, kt_rows(body, 23, 7, 0, img, il));
}

/* db b, table t, then the key values' JSON text */
static uint64_t parts_key(const char *a, const char *str)
{
    const void *parts[] = { "b", "t", a, str };
    size_t lens[] = { 1, 1, strlen(a), str ? strlen(str) : 0 };
    return message_key_hash_parts(parts, lens, str ? 4 : 3);
}

static uint64_t table_key(const char *db, const char *table)
{
    const void *parts[] = { db, table };
    size_t lens[] = { strlen(db), strlen(table) };
    return message_key_hash_parts(parts, lens, 2);
}

/* A composite primary key (a, s): rows keyed by db + table + the key's
 * values; an update by its new key (its after image, or its before image
 * for key columns a minimal after image lacks), a delete by its before
 * image. */
static void test_row_key_composite_pk(void **state)
{
    (void)state;
    unsigned char tm[256];
    size_t tl = kt_table(tm, sizeof tm, true);
    const uint32_t idx[] = { 1, 0 }; /* PRIMARY KEY (s, a): any order */
    tl = add_pk(tm, tl, idx, NULL, 2);
    struct cdc_table t;
    char err[256];
    assert_int_equal(cdc_table_parse(tm, tl, &t, err, sizeof err), 0);
    assert_true(t.have_pk);
    assert_int_equal(t.npk, 2);
    assert_true(t.cols[0].in_pk && t.cols[1].in_pk && !t.cols[2].in_pk);

    uint64_t k1x = kt_insert(&t, 1, "x", 10);
    assert_int_equal(k1x, parts_key("1", "\"x\""));
    assert_int_equal(kt_insert(&t, 1, "x", 99), k1x); /* another value, the same row */
    assert_int_not_equal(kt_insert(&t, 2, "x", 10), k1x);
    assert_int_not_equal(kt_insert(&t, 1, "y", 10), k1x);
    assert_int_not_equal(k1x, table_key("b", "t"));

    unsigned char img[128], body[256];
    size_t il;
    /* update v of (1, x), full images: keyed by (1, x) */
    il = kt_image(img, 7, 1, "x", 10);
    il += kt_image(img + il, 7, 1, "x", 11);
    assert_int_equal(kt_key(&t, 24, body, kt_rows(body, 24, 7, 7, img, il)), k1x);
    /* the same with a minimal after image (v only): the key from before */
    il = kt_image(img, 3, 1, "x", 0);
    il += kt_image(img + il, 4, 0, NULL, 11);
    assert_int_equal(kt_key(&t, 24, body, kt_rows(body, 24, 3, 4, img, il)), k1x);
    /* an update that changes the key: keyed by the new one, (2, x) */
    il = kt_image(img, 7, 1, "x", 10);
    il += kt_image(img + il, 7, 2, "x", 10);
    assert_int_equal(kt_key(&t, 24, body, kt_rows(body, 24, 7, 7, img, il)),
                     parts_key("2", "\"x\""));
    /* ... minimal: a changed (after), s unchanged (before) */
    il = kt_image(img, 3, 1, "x", 0);
    il += kt_image(img + il, 1, 2, NULL, 0);
    assert_int_equal(kt_key(&t, 24, body, kt_rows(body, 24, 3, 1, img, il)),
                     parts_key("2", "\"x\""));
    /* delete: the before image, full or minimal */
    il = kt_image(img, 7, 1, "x", 10);
    assert_int_equal(kt_key(&t, 25, body, kt_rows(body, 25, 7, 0, img, il)), k1x);
    il = kt_image(img, 3, 1, "x", 0);
    assert_int_equal(kt_key(&t, 25, body, kt_rows(body, 25, 3, 0, img, il)), k1x);
    /* a key column in neither image: keyed by the table */
    il = kt_image(img, 1, 1, NULL, 0);
    assert_int_equal(kt_key(&t, 25, body, kt_rows(body, 25, 1, 0, img, il)), table_key("b", "t"));
    cdc_table_free(&t);
}

/* Tables without a usable primary key: their rows keyed by db + table. A
 * prefix part is left out of the key (PRIMARY_KEY_WITH_PREFIX). */
static void test_row_key_without_pk(void **state)
{
    (void)state;
    unsigned char tm[256];
    struct cdc_table t;
    char err[256];
    /* FULL metadata, no primary key */
    size_t tl = kt_table(tm, sizeof tm, true);
    assert_int_equal(cdc_table_parse(tm, tl, &t, err, sizeof err), 0);
    assert_false(t.have_pk);
    assert_int_equal(t.npk, 0);
    uint64_t k = kt_insert(&t, 1, "x", 10);
    assert_int_equal(k, table_key("b", "t"));
    assert_int_equal(kt_insert(&t, 2, "y", 20), k);
    assert_int_equal(cdc_table_key(&t), k);
    cdc_table_free(&t);

    /* PRIMARY KEY (a, s(5)): keyed by a */
    tl = kt_table(tm, sizeof tm, true);
    const uint32_t idx[] = { 0, 1 }, prefix[] = { 0, 5 };
    tl = add_pk(tm, tl, idx, prefix, 2);
    assert_int_equal(cdc_table_parse(tm, tl, &t, err, sizeof err), 0);
    assert_true(t.have_pk);
    assert_int_equal(t.npk, 1);
    assert_true(t.cols[0].in_pk);
    assert_false(t.cols[1].in_pk);
    k = kt_insert(&t, 1, "x", 10);
    assert_int_equal(k, parts_key("1", NULL));
    assert_int_equal(kt_insert(&t, 1, "y", 10), k);
    assert_int_not_equal(kt_insert(&t, 2, "x", 10), k);
    cdc_table_free(&t);

    /* PRIMARY KEY (s(5)) alone: keyed by the table */
    tl = kt_table(tm, sizeof tm, true);
    const uint32_t idx1[] = { 1 }, prefix1[] = { 5 };
    tl = add_pk(tm, tl, idx1, prefix1, 1);
    assert_int_equal(cdc_table_parse(tm, tl, &t, err, sizeof err), 0);
    assert_true(t.have_pk);
    assert_int_equal(t.npk, 0);
    assert_int_equal(kt_insert(&t, 1, "x", 10), table_key("b", "t"));
    cdc_table_free(&t);

    /* a malformed key field fails the table map, as other optional metadata */
    tl = kt_table(tm, sizeof tm, true);
    tm[tl++] = 9;
    tm[tl++] = 1;
    tm[tl++] = 0; /* an index without its prefix length */
    assert_int_equal(cdc_table_parse(tm, tl, &t, err, sizeof err), -1);

    /* DDL: keyed by its database alone */
    const void *dparts[] = { "shop" };
    const size_t dlens[] = { 4 };
    assert_int_equal(cdc_ddl_key("shop"), message_key_hash_parts(dparts, dlens, 1));
    assert_int_not_equal(cdc_ddl_key("shop"), cdc_ddl_key("crm"));
    assert_int_not_equal(cdc_ddl_key("shop"), table_key("shop", ""));
    assert_int_not_equal(cdc_ddl_key("shop"), 0);
}

/* Without FULL metadata the primary key comes from information_schema
 * (cdc_table_apply_pk), used only when it lists as many columns as the
 * table map has and the table map named none itself. */
static void test_row_key_from_schema(void **state)
{
    (void)state;
    unsigned char tm[256];
    struct cdc_table t;
    char err[256];
    size_t tl = kt_table(tm, sizeof tm, false);
    assert_int_equal(cdc_table_parse(tm, tl, &t, err, sizeof err), 0);
    assert_false(t.have_pk);
    assert_int_equal(kt_insert(&t, 1, "x", 10), table_key("b", "t"));
    cdc_table_apply_schema(&t, (char *const *)KT_NAMES, NULL, NULL, 3);
    const bool pk_a[] = { true, false, false };
    cdc_table_apply_pk(&t, pk_a, 2); /* another column count: ignored */
    assert_int_equal(t.npk, 0);
    cdc_table_apply_pk(&t, pk_a, 3);
    assert_int_equal(t.npk, 1);
    assert_int_equal(kt_insert(&t, 1, "x", 10), parts_key("1", NULL));
    assert_int_not_equal(kt_insert(&t, 2, "x", 10), parts_key("1", NULL));
    cdc_table_apply_pk(&t, NULL, 3); /* no primary key (any more) */
    assert_int_equal(t.npk, 0);
    assert_int_equal(kt_insert(&t, 1, "x", 10), table_key("b", "t"));
    cdc_table_free(&t);

    /* the table map's own key wins */
    tl = kt_table(tm, sizeof tm, true);
    const uint32_t idx[] = { 2 };
    tl = add_pk(tm, tl, idx, NULL, 1);
    assert_int_equal(cdc_table_parse(tm, tl, &t, err, sizeof err), 0);
    cdc_table_apply_pk(&t, pk_a, 3);
    assert_int_equal(t.npk, 1);
    assert_true(t.cols[2].in_pk);
    assert_false(t.cols[0].in_pk);
    cdc_table_free(&t);
}

static void test_position(void **state)
{
    (void)state;
    char f[CDC_FILE_MAX];
    uint64_t pos;
    assert_int_equal(cdc_position_parse("binlog.000003:1234", f, sizeof f, &pos), 0);
    assert_string_equal(f, "binlog.000003");
    assert_int_equal(pos, 1234);
    assert_int_equal(cdc_position_parse("a:b:4", f, sizeof f, &pos), 0);
    assert_string_equal(f, "a:b");
    assert_int_equal(cdc_position_parse("binlog.000003", f, sizeof f, &pos), -1);
    assert_int_equal(cdc_position_parse(":4", f, sizeof f, &pos), -1);
    assert_int_equal(cdc_position_parse("f:3", f, sizeof f, &pos), -1);
    assert_int_equal(cdc_position_parse("f:-4", f, sizeof f, &pos), -1);
    assert_int_equal(cdc_position_parse("f:12x", f, sizeof f, &pos), -1);
    assert_int_equal(cdc_position_parse("f:99999999999", f, sizeof f, &pos), -1);
    assert_int_equal(cdc_position_parse(NULL, f, sizeof f, &pos), -1);
    assert_int_equal(cdc_position_parse("abcdef:4", f, 4, &pos), -1);
}

static void test_filter(void **state)
{
    (void)state;
    char *inc[] = { "shop.*", "crm.cust?mers" }, *exc[] = { "shop.tmp_*" }, *ops[] = { "insert", "delete" };
    struct strlist li = { inc, 2 }, le = { exc, 1 }, lo = { ops, 2 };
    struct cdc_filter f;
    char msg[256];
    assert_int_equal(cdc_filter_init(&f, &li, &le, &lo, msg, sizeof msg), 0);
    assert_true(cdc_filter_table(&f, "shop", "orders"));
    assert_false(cdc_filter_table(&f, "shop", "tmp_x"));
    assert_true(cdc_filter_table(&f, "crm", "customers"));
    assert_false(cdc_filter_table(&f, "crm", "leads"));
    assert_false(cdc_filter_table(&f, "shopx", "orders"));
    assert_true(cdc_filter_db(&f, "crm"));
    assert_false(cdc_filter_db(&f, "other"));
    assert_true(cdc_filter_op(&f, CDC_OP_INSERT));
    assert_false(cdc_filter_op(&f, CDC_OP_UPDATE));
    assert_true(cdc_filter_op(&f, CDC_OP_DDL));
    cdc_filter_free(&f);

    struct strlist empty = { NULL, 0 };
    assert_int_equal(cdc_filter_init(&f, &empty, &empty, &empty, msg, sizeof msg), 0);
    assert_true(cdc_filter_table(&f, "any", "thing"));
    assert_true(cdc_filter_op(&f, CDC_OP_UPDATE));
    cdc_filter_free(&f);

    char *bad[] = { "nodot" };
    struct strlist lb = { bad, 1 };
    assert_int_equal(cdc_filter_init(&f, &lb, &empty, &empty, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "nodot"));
    char *badop[] = { "upsert" };
    struct strlist lbo = { badop, 1 };
    assert_int_equal(cdc_filter_init(&f, &empty, &empty, &lbo, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "upsert"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decimal),
        cmocka_unit_test(test_temporal),
        cmocka_unit_test(test_table_and_row),
        cmocka_unit_test(test_minimal_metadata),
        cmocka_unit_test(test_decimal_digit_groups),
        cmocka_unit_test(test_column_keys_escaped),
        cmocka_unit_test(test_row_key_composite_pk),
        cmocka_unit_test(test_row_key_without_pk),
        cmocka_unit_test(test_row_key_from_schema),
        cmocka_unit_test(test_position),
        cmocka_unit_test(test_filter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
