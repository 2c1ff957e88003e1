/* Binlog decoding for the mysql_cdc endpoint: TABLE_MAP and ROWS event bodies
 * (MariaDB/MySQL row-based replication format v1 and v2) into JSON objects
 * keyed by column name. Pure functions over bytes: no connection, no
 * allocation beyond the table description, unit tested.
 *
 * Connector/C 3.3's mariadb_rpl_extract_rows() fails on several common types
 * (TINYINT, SMALLINT, DATE, YEAR, unsigned integers, CHAR, ENUM, SET:
 * "Missing table map metadata" / "Malformed row data"), so the endpoint uses
 * the library only to fetch events and decodes the bodies here.
 *
 * Value conventions (documented in docs/endpoints/mysql_cdc.md):
 *   integers (signed and unsigned), YEAR, BIT      JSON numbers
 *   FLOAT, DOUBLE                                   JSON numbers (shortest
 *                                                   round-trip form)
 *   DECIMAL                                         JSON string "-1234.567"
 *   character strings                               JSON string (UTF-8;
 *                                                   latin1 converted)
 *   binary strings, BLOB, GEOMETRY, undecodable     {"base64":"..."}
 *   DATE "2024-02-03", TIME "-12:34:56.5",
 *   DATETIME "2024-02-03T04:05:06.789" (no zone: a DATETIME has none),
 *   TIMESTAMP "2024-02-03T04:05:06.123456Z" (UTC)
 *   ENUM / SET                                      their string values
 *                                                   (index / bitmask number
 *                                                   when the table map has no
 *                                                   FULL metadata)
 *   NULL                                            null */
#ifndef BATON_CDC_DECODE_H
#define BATON_CDC_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/json.h"

/* Column types as they appear in table maps (enum_field_types numbers). */
enum {
    CDC_T_DECIMAL = 0, CDC_T_TINY = 1, CDC_T_SHORT = 2, CDC_T_LONG = 3, CDC_T_FLOAT = 4,
    CDC_T_DOUBLE = 5, CDC_T_NULL = 6, CDC_T_TIMESTAMP = 7, CDC_T_LONGLONG = 8, CDC_T_INT24 = 9,
    CDC_T_DATE = 10, CDC_T_TIME = 11, CDC_T_DATETIME = 12, CDC_T_YEAR = 13, CDC_T_NEWDATE = 14,
    CDC_T_VARCHAR = 15, CDC_T_BIT = 16, CDC_T_TIMESTAMP2 = 17, CDC_T_DATETIME2 = 18,
    CDC_T_TIME2 = 19, CDC_T_JSON = 245, CDC_T_NEWDECIMAL = 246, CDC_T_ENUM = 247,
    CDC_T_SET = 248, CDC_T_TINY_BLOB = 249, CDC_T_MEDIUM_BLOB = 250, CDC_T_LONG_BLOB = 251,
    CDC_T_BLOB = 252, CDC_T_VAR_STRING = 253, CDC_T_STRING = 254, CDC_T_GEOMETRY = 255,
};

#define CDC_CHARSET_BINARY 63

struct cdc_column {
    uint8_t type;        /* real type (CHAR/ENUM/SET resolved from the metadata) */
    uint16_t meta;       /* type metadata, decoded */
    uint32_t len;        /* STRING: max byte length; ENUM/SET: pack length */
    bool is_unsigned;
    uint32_t charset;    /* collation id; 0 = unknown */
    char *name;          /* NUL terminated; NULL when unknown */
    char **values;       /* ENUM/SET strings (NULL when unknown) */
    uint32_t nvalues;
    char *key;           /* the JSON object key, escaped: "\"name\":" ("@<n>" when
                            the name is unknown); NULL until cdc_table_parse /
                            cdc_table_apply_schema set it */
    size_t key_len;
    bool in_pk;          /* a whole-column part of the primary key: its value is
                            part of the row's ordering key (cdc_row_key) */
};

/* Primary keys of more columns than this (MySQL allows 16 parts, MariaDB
 * 32) are not used for ordering keys: the table's rows are keyed by db +
 * table. */
#define CDC_PK_MAX 64

/* One TABLE_MAP event, parsed. */
struct cdc_table {
    uint64_t table_id;
    char *db;
    char *table;
    uint32_t ncols;
    struct cdc_column *cols;
    bool have_names;      /* COLUMN_NAME optional metadata present */
    bool have_signedness; /* SIGNEDNESS optional metadata present */
    bool have_pk;         /* SIMPLE_PRIMARY_KEY / PRIMARY_KEY_WITH_PREFIX present
                             (binlog_row_metadata=FULL and the table has one) */
    uint32_t npk;         /* columns with in_pk (0: rows keyed by db + table) */
    unsigned char *body;  /* copy of the event body, to detect changes */
    size_t body_len;
};

/* Parses a TABLE_MAP event body (the bytes after the 19-byte common header,
 * without the checksum). Returns 0, or -1 with err filled. out must be
 * zeroed or freed; on error it is left freed. */
int cdc_table_parse(const unsigned char *body, size_t len, struct cdc_table *out, char *err,
                    size_t errlen);
void cdc_table_free(struct cdc_table *t);
/* For a table map without FULL metadata: column facts read from
 * information_schema.COLUMNS (in ORDINAL_POSITION order). names are copied;
 * is_unsigned: COLUMN_TYPE ends in "unsigned"; is_binary: CHARACTER_SET_NAME
 * is NULL for a string/blob column. Only the first min(count, ncols) columns
 * are set; any array may be NULL. */
void cdc_table_apply_schema(struct cdc_table *t, char *const *names, const bool *is_unsigned,
                            const bool *is_binary, uint32_t count);

/* For a table map without primary key metadata (have_pk false): which
 * columns are whole-column parts of the primary key, from
 * information_schema (in ORDINAL_POSITION order; a part with a prefix length
 * is not one). Used only when count == ncols (otherwise the schema read is
 * not the table map's, and the rows stay keyed by db + table) and the table
 * map had none. in_pk NULL: no primary key. */
void cdc_table_apply_pk(struct cdc_table *t, const bool *in_pk, uint32_t count);

enum cdc_op { CDC_OP_INSERT = 0, CDC_OP_UPDATE = 1, CDC_OP_DELETE = 2, CDC_OP_DDL = 3 };
const char *cdc_op_name(enum cdc_op op);

/* One ROWS event (WRITE/UPDATE/DELETE, v1 or v2), parsed; pointers into the
 * body. */
struct cdc_rows {
    enum cdc_op op;
    uint64_t table_id;
    uint16_t flags;
    uint32_t ncols;
    const unsigned char *present;     /* columns in the before (or only) image */
    const unsigned char *present_upd; /* UPDATE: columns in the after image */
    const unsigned char *data;        /* row images */
    const unsigned char *end;
};

/* event_type: 23..25 (v1) or 30..32 (v2). Returns 0 or -1 with err. */
int cdc_rows_parse(int event_type, const unsigned char *body, size_t len, struct cdc_rows *out,
                   char *err, size_t errlen);

/* Decodes one row image at *p (advanced past it) and writes it to b as a JSON
 * object keyed by column name ("@<n>", 1-based, when the name is unknown).
 * Columns not present in the image are omitted. Returns 0 or -1 with err
 * (the image is then unusable and so is the rest of the event). */
int cdc_row_to_json(const struct cdc_table *t, const unsigned char *present,
                    const unsigned char **p, const unsigned char *end, struct jbuf *b, char *err,
                    size_t errlen);

/* Where the value of a primary key column sits in the JSON a row image was
 * written to: offsets into the jbuf (it may move as it grows) of the value's
 * JSON text. len 0: the column is not in the image. */
struct cdc_span {
    size_t off, len;
};
/* cdc_row_to_json, also noting in pk[0 .. t->npk) where the value of each
 * primary key column (in column order) was written; pk NULL: none noted. */
int cdc_row_to_json_pk(const struct cdc_table *t, const unsigned char *present,
                       const unsigned char **p, const unsigned char *end, struct jbuf *b,
                       struct cdc_span *pk, char *err, size_t errlen);

/* The ordering key of a row (message.key), issue 36:
 * message_key_hash_parts over db, table and the primary key columns' values
 * (their JSON text as the envelope shows them, in column order): taken from
 * the after image for an insert or an update -- an update that changes the
 * primary key is keyed by the new one -- and from the before image for a
 * delete. A key column an update's after image lacks (binlog_row_image =
 * MINIMAL: not changed) is taken from its before image. db + table alone
 * (cdc_table_key) when the primary key is not known (npk 0: no primary key,
 * only prefix parts, no FULL metadata and no information_schema answer) or
 * a key column is in neither image. buf: the jbuf's data both images were
 * written to (cdc_row_to_json_pk); before / after: their spans, NULL for an
 * image the row has not (insert: no before; delete: no after). */
uint64_t cdc_row_key(const struct cdc_table *t, const char *buf, const struct cdc_span *before,
                     const struct cdc_span *after);
/* message_key_hash_parts over db and table. */
uint64_t cdc_table_key(const struct cdc_table *t);
/* The ordering key of a DDL event: message_key_hash_parts over its (default)
 * database alone. */
uint64_t cdc_ddl_key(const char *db);

/* Value formatting, exposed for tests. Each returns the number of input bytes
 * consumed, or -1 when the input is too short or invalid (or out is too
 * small: decimal needs 70 bytes, datetime2 40, date 16; 96 always works).
 * out receives a NUL terminated string. */
int cdc_format_decimal(const unsigned char *p, size_t avail, int precision, int scale, char *out,
                       size_t outlen);
int cdc_format_datetime2(const unsigned char *p, size_t avail, int fsp, char *out, size_t outlen);
int cdc_format_time2(const unsigned char *p, size_t avail, int fsp, char *out, size_t outlen);
int cdc_format_timestamp2(const unsigned char *p, size_t avail, int fsp, char *out,
                          size_t outlen);
int cdc_format_date(const unsigned char *p, size_t avail, char *out, size_t outlen);
/* Shortest decimal form of a float that reads back as the same float. */
void cdc_format_float(float f, char *out, size_t outlen);

/* "file:pos" (the last ':' separates; pos a positive decimal). Returns 0 or
 * -1. file receives at most filelen-1 bytes (longer names are an error). */
int cdc_position_parse(const char *s, char *file, size_t filelen, uint64_t *pos);

/* Appends latin1 (cp1252 as MariaDB defines it) bytes to b as a JSON string. */
void cdc_json_latin1(struct jbuf *b, const unsigned char *s, size_t n);
/* True for latin1 collation ids. */
bool cdc_charset_is_latin1(uint32_t collation);

#endif
