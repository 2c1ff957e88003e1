/* Baseline for bench/bench_mysql_cdc.sh: a bare Connector/C replication loop
 * that streams the binlog from file:pos and only decodes rows with the
 * library's own mariadb_rpl_extract_rows (no JSON, no queue, no sink), until
 * the stream reaches end_pos in the same file. Prints
 * "rows <n> seconds <s> rate <rows/s>".
 *
 *   bench_mysql_cdc_baseline HOST PORT USER PASSWORD FILE POS END_POS */
#include <mysql.h>
#include <mariadb_rpl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 8) {
        fprintf(stderr, "usage: %s HOST PORT USER PASSWORD FILE POS END_POS\n", argv[0]);
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
    if (mysql_query(m, "SET @master_binlog_checksum = @@global.binlog_checksum") ||
        mysql_query(m, "SET @mariadb_slave_capability = 4")) {
        fprintf(stderr, "setup: %s\n", mysql_error(m));
        return 1;
    }
    MARIADB_RPL *rpl = mariadb_rpl_init(m);
    mariadb_rpl_optionsv(rpl, MARIADB_RPL_SERVER_ID, 777u);
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
        if (ev->next_event_pos >= end_pos && ev->event_type != ROTATE_EVENT &&
            ev->event_type != FORMAT_DESCRIPTION_EVENT && ev->next_event_pos)
            break;
    }
    double dt = now_s() - t0;
    if (bad) fprintf(stderr, "%llu rows events failed to decode: %s\n", bad, mariadb_rpl_error(rpl));
    printf("rows %llu seconds %.4f rate %.0f\n", rows, dt, rows / dt);
    if (ev) mariadb_free_rpl_event(ev);
    if (tm) mariadb_free_rpl_event(tm);
    mariadb_rpl_close(rpl);
    mysql_close(m);
    return 0;
}
