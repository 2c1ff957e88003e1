/* Baselines for bench/bench_mysql_cdc.sh: a bare Connector/C replication
 * loop that streams the binlog from file:pos until the stream reaches end_pos
 * in the same file. Two modes:
 *
 *   (default)  decodes rows with the library's own mariadb_rpl_extract_rows
 *              and nothing else (no JSON, no queue, no sink, no output). The
 *              issue's comparison. Prints "rows <n> seconds <s> rate <rows/s>"
 *              on stdout.
 *   --json     decodes every row with baton's own decoder (endpoints/
 *              cdc_decode.h) into the same envelope baton's mysql_cdc endpoint
 *              emits (endpoint, type, epoch, id, received_at, db, table, op,
 *              before, after, gtid, position, ts), built the same way (the
 *              per-event fields encoded once per rows event, the envelope
 *              buffer reused), and writes one line per row to stdout through a
 *              64 KiB staging buffer with write(2), as baton's stdout sink
 *              does. What it leaves out is exactly baton's pipeline: no
 *              message allocation, no queue, no forwarder thread, no guard, no
 *              checkpoint bookkeeping. The summary line goes to stderr.
 *
 * seconds covers connect + stream + (--json) the last write; process start
 * and exit are not included.
 *
 *   bench_mysql_cdc_baseline [--json] HOST PORT USER PASSWORD FILE POS END_POS */
#include <mysql.h>
#include <mariadb_rpl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "endpoints/cdc_decode.h"
#include "common/envelope.h"
#include "common/json.h"
#include "common/util.h"

#define HEADER_LEN 19
#define STAGE_SIZE ((size_t)64 * 1024) /* as src/sink_stdout.c */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ------------------------------------------------ --json: output staging */

static char stage[STAGE_SIZE];
static size_t staged;

static void stage_flush(void)
{
    size_t off = 0;
    while (off < staged) {
        ssize_t w = write(1, stage + off, staged - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            perror("write");
            exit(1);
        }
        off += (size_t)w;
    }
    staged = 0;
}

static void stage_line(const char *s, size_t n)
{
    if (staged + n + 1 > STAGE_SIZE) stage_flush();
    if (n + 1 > STAGE_SIZE) { /* not with this workload */
        fprintf(stderr, "line of %zu bytes longer than the staging buffer\n", n);
        exit(1);
    }
    memcpy(stage + staged, s, n);
    stage[staged + n] = '\n';
    staged += n + 1;
}

/* ------------------------------------- --json: the endpoint's encoding */

struct json_state {
    bool crc;
    char file[512];
    char gtid[64];
    struct cdc_table table; /* the last table map (the bench has one table) */
    bool have_table;
    struct envelope env;
    struct jbuf head, tail;
    uint32_t ts_secs;
    bool ts_valid;
    char ts_text[32];
    unsigned long long rows, bad;
    double t_first; /* when the first line was built */
};

static void put_u64(char **o, uint64_t v)
{
    char tmp[24], *p = tmp + sizeof tmp;
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    memcpy(*o, p, (size_t)(tmp + sizeof tmp - p));
    *o += tmp + sizeof tmp - p;
}

static void json_rows(struct json_state *s, int type, const unsigned char *body, size_t len,
                      uint64_t ev_pos, uint32_t ts)
{
    struct cdc_rows rows;
    char err[256];
    if (!s->have_table || cdc_rows_parse(type, body, len, &rows, err, sizeof err) ||
        rows.table_id != s->table.table_id || rows.ncols != s->table.ncols) {
        s->bad++;
        return;
    }
    int64_t received = clock_wall_ms();
    if (!s->ts_valid || s->ts_secs != ts) {
        clock_format_rfc3339((int64_t)ts * 1000, s->ts_text, sizeof s->ts_text);
        s->ts_secs = ts;
        s->ts_valid = true;
    }
    char id[600], *o = id;
    size_t fl = strlen(s->file);
    memcpy(o, s->file, fl);
    o += fl;
    *o++ = ':';
    put_u64(&o, ev_pos);
    *o++ = ':';
    size_t idn = (size_t)(o - id);

    bool first = false;
    jbuf_reset(&s->head);
    jbuf_key(&s->head, &first, "db");
    jbuf_strz(&s->head, s->table.db);
    jbuf_key(&s->head, &first, "table");
    jbuf_strz(&s->head, s->table.table);
    jbuf_key(&s->head, &first, "op");
    jbuf_strz(&s->head, cdc_op_name(rows.op));
    jbuf_key(&s->head, &first, "before");
    jbuf_reset(&s->tail);
    first = false;
    jbuf_key(&s->tail, &first, "gtid");
    if (s->gtid[0]) jbuf_strz(&s->tail, s->gtid);
    else jbuf_null(&s->tail);
    jbuf_key(&s->tail, &first, "position");
    jbuf_rawz(&s->tail, "{\"file\":");
    jbuf_strz(&s->tail, s->file);
    jbuf_rawz(&s->tail, ",\"pos\":");
    jbuf_u64(&s->tail, ev_pos);
    jbuf_char(&s->tail, '}');
    jbuf_key(&s->tail, &first, "ts");
    jbuf_strz(&s->tail, s->ts_text);

    const unsigned char *p = rows.data;
    for (uint64_t idx = 0; p < rows.end; idx++) {
        o = id + idn;
        put_u64(&o, idx);
        *o = '\0';
        envelope_begin(&s->env, "bench", "mysql_cdc", 0, id, received);
        struct jbuf *b = &s->env.buf;
        jbuf_raw(b, s->head.data, s->head.len);
        int rc = 0;
        if (rows.op == CDC_OP_INSERT) jbuf_null(b);
        else rc = cdc_row_to_json(&s->table, rows.present, &p, rows.end, b, err, sizeof err);
        if (rc == 0) {
            jbuf_raw(b, ",\"after\":", 9);
            if (rows.op == CDC_OP_DELETE) jbuf_null(b);
            else
                rc = cdc_row_to_json(&s->table,
                                     rows.op == CDC_OP_UPDATE ? rows.present_upd : rows.present,
                                     &p, rows.end, b, err, sizeof err);
        }
        if (rc) {
            fprintf(stderr, "row %" PRIu64 " at %s:%" PRIu64 ": %s\n", idx, s->file, ev_pos, err);
            s->bad++;
            return;
        }
        jbuf_raw(b, s->tail.data, s->tail.len);
        jbuf_char(b, '}'); /* what envelope_finish adds */
        stage_line(b->data, b->len);
        if (s->rows++ == 0) s->t_first = now_s();
    }
}

static void json_event(struct json_state *s, const MARIADB_RPL_EVENT *ev)
{
    const unsigned char *raw = ev->raw_data ? ev->raw_data + ev->raw_data_ofs : NULL;
    size_t ev_len = ev->raw_data ? ev->raw_data_size - ev->raw_data_ofs : 0;
    size_t crc = s->crc ? 4 : 0;
    if (!raw || ev_len < HEADER_LEN + crc) return;
    const unsigned char *body = raw + HEADER_LEN;
    size_t body_len = ev_len - HEADER_LEN - crc;
    uint64_t ev_pos = ev->next_event_pos >= ev_len ? ev->next_event_pos - ev_len : 0;
    switch ((int)ev->event_type) {
    case ROTATE_EVENT:
        if (body_len > 8) {
            size_t fl = body_len - 8 < sizeof s->file ? body_len - 8 : sizeof s->file - 1;
            memcpy(s->file, body + 8, fl);
            s->file[fl] = '\0';
        }
        break;
    case GTID_EVENT:
        snprintf(s->gtid, sizeof s->gtid, "%u-%u-%" PRIu64, ev->event.gtid.domain_id,
                 ev->server_id, (uint64_t)ev->event.gtid.sequence_nr);
        break;
    case TABLE_MAP_EVENT: {
        /* baton re-parses only a changed table map: compare as it does */
        if (s->have_table && s->table.body_len == body_len &&
            memcmp(s->table.body, body, body_len) == 0)
            break;
        char err[256];
        cdc_table_free(&s->table);
        s->have_table = cdc_table_parse(body, body_len, &s->table, err, sizeof err) == 0;
        if (!s->have_table) fprintf(stderr, "table map: %s\n", err);
        break;
    }
    case WRITE_ROWS_EVENT_V1: case UPDATE_ROWS_EVENT_V1: case DELETE_ROWS_EVENT_V1:
    case WRITE_ROWS_EVENT: case UPDATE_ROWS_EVENT: case DELETE_ROWS_EVENT:
        json_rows(s, (int)ev->event_type, body, body_len, ev_pos, ev->timestamp);
        break;
    default:
        break;
    }
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    bool json = argc > 1 && strcmp(argv[1], "--json") == 0;
    if (json) {
        argc--;
        argv++;
    }
    if (argc != 8) {
        fprintf(stderr, "usage: %s [--json] HOST PORT USER PASSWORD FILE POS END_POS\n", argv[0]);
        return 2;
    }
    const char *file = argv[5];
    unsigned long pos = strtoul(argv[6], NULL, 10), end_pos = strtoul(argv[7], NULL, 10);
    double t0 = now_s();
    MYSQL *m = mysql_init(NULL);
    if (!mysql_real_connect(m, argv[1], argv[3], argv[4], NULL, (unsigned)atoi(argv[2]), NULL, 0)) {
        fprintf(stderr, "connect: %s\n", mysql_error(m));
        return 1;
    }
    static struct json_state js;
    if (json) {
        if (mysql_query(m, "SELECT @@global.binlog_checksum")) {
            fprintf(stderr, "setup: %s\n", mysql_error(m));
            return 1;
        }
        MYSQL_RES *res = mysql_store_result(m);
        MYSQL_ROW row = res ? mysql_fetch_row(res) : NULL;
        js.crc = row && row[0] && row[0][0] && strcasecmp(row[0], "NONE") != 0;
        if (res) mysql_free_result(res);
        snprintf(js.file, sizeof js.file, "%s", file);
        envelope_init(&js.env);
        jbuf_init(&js.head, 256);
        jbuf_init(&js.tail, 256);
    }
    if (mysql_query(m, "SET @master_binlog_checksum = @@global.binlog_checksum") ||
        mysql_query(m, "SET @mariadb_slave_capability = 4")) {
        fprintf(stderr, "setup: %s\n", mysql_error(m));
        return 1;
    }
    MARIADB_RPL *rpl = mariadb_rpl_init(m);
    /* a server id of its own per run: reusing one makes the server kill the
     * previous run's dump thread first, which costs ~100 ms */
    mariadb_rpl_optionsv(rpl, MARIADB_RPL_SERVER_ID, 100000u + (unsigned)getpid() % 1000000u);
    mariadb_rpl_optionsv(rpl, MARIADB_RPL_FILENAME, file, strlen(file));
    mariadb_rpl_optionsv(rpl, MARIADB_RPL_START, pos);
    mariadb_rpl_optionsv(rpl, MARIADB_RPL_FLAGS, 0u);
    if (mariadb_rpl_open(rpl)) {
        fprintf(stderr, "binlog dump: %s\n", mysql_error(m));
        return 1;
    }
    MARIADB_RPL_EVENT *ev = NULL, *tm = NULL;
    unsigned long long rows = 0, bad = 0;
    while ((ev = mariadb_rpl_fetch(rpl, ev))) {
        if (json) {
            json_event(&js, ev);
        } else {
            if (ev->event_type == TABLE_MAP_EVENT) {
                if (tm) mariadb_free_rpl_event(tm);
                tm = ev; /* keep it for the rows events that follow */
                ev = NULL;
                continue;
            }
            if (IS_ROW_EVENT(ev) && tm) {
                MARIADB_RPL_ROW *r = mariadb_rpl_extract_rows(rpl, tm, ev);
                if (!r) bad++;
                for (; r; r = r->next) rows++;
            }
        }
        if (ev->next_event_pos >= end_pos && ev->event_type != ROTATE_EVENT &&
            ev->event_type != FORMAT_DESCRIPTION_EVENT && ev->next_event_pos)
            break;
    }
    if (json) {
        stage_flush();
        rows = js.rows;
        bad = js.bad;
    }
    double dt = now_s() - t0;
    if (bad)
        fprintf(stderr, "%llu rows events failed to decode%s%s\n", bad, json ? "" : ": ",
                json ? "" : mariadb_rpl_error(rpl));
    if (json)
        fprintf(stderr, "rows %llu seconds %.4f rate %.0f first_row_after %.4f\n", rows, dt,
                rows / dt, js.rows ? js.t_first - t0 : 0.0);
    else
        printf("rows %llu seconds %.4f rate %.0f\n", rows, dt, rows / dt);
    if (ev) mariadb_free_rpl_event(ev);
    if (tm) mariadb_free_rpl_event(tm);
    if (json) {
        cdc_table_free(&js.table);
        envelope_free(&js.env);
        jbuf_free(&js.head);
        jbuf_free(&js.tail);
    }
    mariadb_rpl_close(rpl);
    mysql_close(m);
    return 0;
}
