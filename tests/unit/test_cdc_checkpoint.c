/* mysql_cdc checkpoint (endpoints/cdc_checkpoint.c): the delivered-prefix
 * tracker (boundaries, out-of-order outcomes, a drop holding the checkpoint,
 * the GTID position it carries, the bounded cost of a backlog), the text
 * form "file:pos[;server_id=N][;gtid=...]" and its parse, GTID positions,
 * and the round trip through a locker exactly as mysql_cdc.c stores it
 * (baton_locker_fenced_set / baton_locker_shared_get under the name "cdc", 30-day ttl),
 * here on the local backend. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "endpoints/cdc_checkpoint.h"
#include "guard/locker.h"

static struct cdc_ckpt ck_of(const char *file, uint64_t pos, uint32_t server, const char *gtid)
{
    struct cdc_ckpt c;
    memset(&c, 0, sizeof c);
    snprintf(c.file, sizeof c.file, "%s", file);
    c.pos = pos;
    c.server_id = server;
    if (gtid) {
        c.gtid_known = true;
        snprintf(c.gtid, sizeof c.gtid, "%s", gtid);
    }
    return c;
}

static void test_format_parse(void **state)
{
    (void)state;
    char buf[CDC_CHECKPOINT_MAX], err[256];
    struct cdc_ckpt in = ck_of("binlog.000003", 1234, 0, NULL), out;
    /* without server id and GTID: the form every baton reads */
    assert_int_equal(cdc_checkpoint_format(buf, sizeof buf, &in), 18);
    assert_string_equal(buf, "binlog.000003:1234");
    assert_int_equal(cdc_checkpoint_parse(buf, "k", &out, err, sizeof err), 0);
    assert_string_equal(out.file, "binlog.000003");
    assert_int_equal(out.pos, 1234);
    assert_int_equal(out.server_id, 0);
    assert_false(out.gtid_known);

    /* with both */
    in = ck_of("binlog.000003", 1234, 7, "0-1-42,3-2-7");
    assert_true(cdc_checkpoint_format(buf, sizeof buf, &in) > 0);
    assert_string_equal(buf, "binlog.000003:1234;server_id=7;gtid=0-1-42,3-2-7");
    assert_int_equal(cdc_checkpoint_parse(buf, "k", &out, err, sizeof err), 0);
    assert_int_equal(out.server_id, 7);
    assert_true(out.gtid_known);
    assert_string_equal(out.gtid, "0-1-42,3-2-7");
    assert_int_equal(out.pos, 1234);
    /* the empty GTID position (a server that never wrote a transaction) */
    in = ck_of("b.1", 4, 2, "");
    assert_true(cdc_checkpoint_format(buf, sizeof buf, &in) > 0);
    assert_string_equal(buf, "b.1:4;server_id=2;gtid=");
    assert_int_equal(cdc_checkpoint_parse(buf, "k", &out, err, sizeof err), 0);
    assert_true(out.gtid_known);
    assert_string_equal(out.gtid, "");

    /* the longest file name with the largest position and a full GTID
     * position fits the buffer */
    in = ck_of("", UINT32_MAX, UINT32_MAX, NULL);
    memset(in.file, 'x', sizeof in.file - 1);
    in.gtid_known = true;
    size_t off = 0;
    for (int d = 0; d < CDC_GTID_DOMAINS; d++)
        off += (size_t)snprintf(in.gtid + off, sizeof in.gtid - off, "%s%u-%u-%llu", d ? "," : "",
                                4000000000u + (unsigned)d, UINT32_MAX, 18446744073709551615ULL);
    assert_true(off < sizeof in.gtid);
    int n = cdc_checkpoint_format(buf, sizeof buf, &in);
    assert_true(n > 0 && (size_t)n < sizeof buf);
    assert_int_equal(cdc_checkpoint_parse(buf, "k", &out, err, sizeof err), 0);
    assert_string_equal(out.file, in.file);
    assert_string_equal(out.gtid, in.gtid);

    /* too small a buffer: -1 and an empty string, never a truncated value */
    in = ck_of("binlog.000003", 1234, 7, "0-1-42");
    assert_int_equal(cdc_checkpoint_format(buf, 10, &in), -1);
    assert_string_equal(buf, "");
    assert_int_equal(cdc_checkpoint_format(buf, 25, &in), -1); /* fits without the gtid */
    assert_string_equal(buf, "");
    assert_int_equal(cdc_checkpoint_format(buf, 0, &in), -1);

    /* errors name the key and what it holds; unknown fields are refused */
    assert_int_equal(cdc_checkpoint_parse("garbage", "baton:active:x:cdc", &out, err, sizeof err), -1);
    assert_non_null(strstr(err, "baton:active:x:cdc"));
    assert_non_null(strstr(err, "\"garbage\""));
    assert_non_null(strstr(err, "file:pos"));
    const char *bad[] = {"f:3", "", "b.1:4;", "b.1:4;server_id=", "b.1:4;server_id=0",
                         "b.1:4;server_id=4294967296", "b.1:4;server_id=1x", "b.1:4;gtid=0-1",
                         "b.1:4;gtid=0-1-2,0-3-4", "b.1:4;gtid=a-b-c", "b.1:4;colour=blue"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (cdc_checkpoint_parse(bad[i], "k", &out, err, sizeof err) != -1)
            fail_msg("parsed \"%s\"", bad[i]);
        assert_false(out.gtid_known);
    }
    assert_int_equal(cdc_checkpoint_parse(NULL, "k", &out, err, sizeof err), -1);
    assert_non_null(strstr(err, "holds \"\""));
}

/* A NUL inside a value read with its length (a GET reply's len) is refused
 * naming the key, never read up to the NUL: "binlog.000002:611\0;server_id=9"
 * would otherwise resume at 611 on whatever server answers. */
static void test_parse_refuses_nul(void **state)
{
    (void)state;
    struct cdc_ckpt out;
    char err[400];
    static const char v[] = "binlog.000002:611\0;server_id=9";
    size_t len = sizeof v - 1;
    assert_int_equal(cdc_checkpoint_parse_n(v, len, "baton:active:{x}:cdc", &out, err, sizeof err), -1);
    assert_non_null(strstr(err, "checkpoint baton:active:{x}:cdc contains a NUL byte"));
    assert_non_null(strstr(err, "at byte 18 of 30"));
    assert_string_equal(out.file, "");
    assert_int_equal(out.pos, 0);
    /* a trailing NUL is refused too: the value is not what was written */
    assert_int_equal(cdc_checkpoint_parse_n("b.1:4\0", 6, "k", &out, err, sizeof err), -1);
    assert_non_null(strstr(err, "NUL byte"));
    /* without a NUL: as cdc_checkpoint_parse */
    assert_int_equal(cdc_checkpoint_parse_n("binlog.000002:611;server_id=9", 29, "k", &out, err, sizeof err),
                     0);
    assert_string_equal(out.file, "binlog.000002");
    assert_int_equal(out.pos, 611);
    assert_int_equal(out.server_id, 9);
    assert_int_equal(cdc_checkpoint_parse_n("garbage", 7, "k", &out, err, sizeof err), -1);
    assert_non_null(strstr(err, "\"garbage\""));

    /* what a locker copied into a zeroed buffer: its length reaches past an
     * embedded NUL */
    char buf[64] = "";
    memcpy(buf, v, len + 1);
    assert_int_equal(cdc_checkpoint_value_len(buf, sizeof buf), len);
    assert_int_equal(cdc_checkpoint_parse_n(buf, cdc_checkpoint_value_len(buf, sizeof buf), "k", &out, err,
                                            sizeof err), -1);
    memset(buf, 0, sizeof buf);
    memcpy(buf, "b.1:4", 6);
    assert_int_equal(cdc_checkpoint_value_len(buf, sizeof buf), 5);
    memset(buf, 0, sizeof buf);
    assert_int_equal(cdc_checkpoint_value_len(buf, sizeof buf), 0);
}

static void test_gtid_text(void **state)
{
    (void)state;
    struct cdc_gtid g[4];
    size_t n = 9;
    char buf[64];
    assert_int_equal(cdc_gtid_parse("", g, 4, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(cdc_gtid_parse("0-1-42, 3-2-18446744073709551615", g, 4, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(g[1].domain, 3);
    assert_int_equal(g[1].server, 2);
    assert_true(g[1].seq == UINT64_MAX);
    assert_int_equal(cdc_gtid_format(buf, sizeof buf, g, n), 31);
    assert_string_equal(buf, "0-1-42,3-2-18446744073709551615");
    assert_int_equal(cdc_gtid_format(buf, 10, g, n), -1);
    assert_string_equal(buf, "");
    const char *bad[] = {"0-1", "0-1-", "-1-2", "0-1-2,", "0-1-2,,1-2-3", "0-1-2 1-2-3",
                         "4294967296-1-2", "0-1-2,0-1-3", "1-2-3,2-2-3,3-2-3,4-2-3,5-2-3",
                         "0-1-99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (cdc_gtid_parse(bad[i], g, 4, &n) != -1) fail_msg("parsed \"%s\"", bad[i]);
}

#define CKPT(p, ck) cdc_progress_checkpoint((p), &(ck))

static void test_progress(void **state)
{
    (void)state;
    struct cdc_progress *p = cdc_progress_create();
    struct cdc_ckpt ck;
    cdc_progress_reset(p, NULL);
    assert_false(CKPT(p, ck));
    uint64_t s0 = cdc_progress_assign(p), s1 = cdc_progress_assign(p);
    cdc_progress_boundary(p, "b.1", 100, NULL, 1); /* txn A: s0, s1 */
    uint64_t s2 = cdc_progress_assign(p);
    cdc_progress_boundary(p, "b.1", 200, NULL, 1); /* txn B: s2 */
    assert_false(CKPT(p, ck));
    cdc_progress_done(p, s1, true); /* out of order */
    assert_false(CKPT(p, ck));
    cdc_progress_done(p, s0, true);
    assert_true(CKPT(p, ck));
    assert_string_equal(ck.file, "b.1");
    assert_int_equal(ck.pos, 100);
    assert_int_equal(ck.server_id, 1);
    assert_false(ck.gtid_known); /* the term started without a GTID position */
    assert_false(CKPT(p, ck)); /* nothing newer */
    /* an empty transaction (filtered rows) moves the boundary once delivered */
    cdc_progress_done(p, s2, true);
    cdc_progress_boundary(p, "b.2", 4, NULL, 1);
    assert_true(CKPT(p, ck));
    assert_string_equal(ck.file, "b.2");
    assert_int_equal(ck.pos, 4);
    /* a dropped message holds the checkpoint for the rest of the term */
    uint64_t s3 = cdc_progress_assign(p);
    cdc_progress_boundary(p, "b.2", 300, NULL, 1);
    uint64_t s4 = cdc_progress_assign(p);
    cdc_progress_boundary(p, "b.2", 400, NULL, 1);
    struct cdc_backlog b;
    cdc_progress_backlog(p, &b);
    assert_false(b.blocked);
    assert_int_equal(b.blocked_since_ms, 0);
    cdc_progress_done(p, s3, false);
    cdc_progress_done(p, s4, true);
    assert_false(CKPT(p, ck));
    bool blocked = false;
    assert_int_equal(cdc_progress_pending(p, &blocked), 2);
    assert_true(blocked);
    cdc_progress_backlog(p, &b);
    assert_true(b.blocked);
    assert_true(b.blocked_since_ms > 0);
    assert_int_equal(b.pending, 2);
    /* a new term ignores outcomes of the old one */
    cdc_progress_reset(p, NULL);
    cdc_progress_backlog(p, &b);
    assert_false(b.blocked);
    uint64_t t0 = cdc_progress_assign(p);
    cdc_progress_boundary(p, "b.3", 50, NULL, 1);
    cdc_progress_done(p, s4, true);
    assert_false(CKPT(p, ck));
    cdc_progress_done(p, t0, true);
    assert_true(CKPT(p, ck));
    assert_int_equal(ck.pos, 50);
    /* many in flight: the ring grows */
    uint64_t *seqs = calloc(5000, sizeof *seqs);
    for (int i = 0; i < 5000; i++) {
        seqs[i] = cdc_progress_assign(p);
        cdc_progress_boundary(p, "b.4", 1000 + (uint64_t)i, NULL, 1);
    }
    for (int i = 4999; i >= 1; i--) cdc_progress_done(p, seqs[i], true);
    assert_false(CKPT(p, ck));
    cdc_progress_done(p, seqs[0], true);
    assert_true(CKPT(p, ck));
    assert_string_equal(ck.file, "b.4");
    assert_int_equal(ck.pos, 1000 + 4999);
    free(seqs);
    cdc_progress_destroy(p);
}

/* The checkpoint carries the GTID position of its boundary: the term's
 * start advanced by every transaction delivered up to it, one GTID per
 * domain; boundaries of other domains are never merged away. */
static void test_progress_gtid(void **state)
{
    (void)state;
    struct cdc_progress *p = cdc_progress_create();
    struct cdc_ckpt from = ck_of("b.1", 4, 1, "0-1-10"), ck;
    cdc_progress_reset(p, &from);
    struct cdc_gtid a = {0, 1, 11}, d1 = {1, 2, 5}, d1b = {1, 2, 6}, c = {0, 1, 12};
    uint64_t s0 = cdc_progress_assign(p);
    cdc_progress_boundary(p, "b.1", 100, &a, 1);
    /* two empty transactions of domain 1 (no rows forwarded), then one of 0 */
    cdc_progress_boundary(p, "b.1", 150, &d1, 1);
    cdc_progress_boundary(p, "b.1", 180, &d1b, 1); /* same domain: replaces */
    uint64_t s1 = cdc_progress_assign(p);
    cdc_progress_boundary(p, "b.1", 250, &c, 1);
    assert_false(CKPT(p, ck));
    cdc_progress_done(p, s0, true);
    assert_true(CKPT(p, ck));
    assert_int_equal(ck.pos, 180);
    assert_true(ck.gtid_known);
    assert_string_equal(ck.gtid, "0-1-11,1-2-6");
    cdc_progress_done(p, s1, true);
    assert_true(CKPT(p, ck));
    assert_int_equal(ck.pos, 250);
    assert_string_equal(ck.gtid, "0-1-12,1-2-6");
    /* a rotation (no GTID) keeps the position's GTIDs */
    cdc_progress_boundary(p, "b.2", 4, NULL, 1);
    assert_true(CKPT(p, ck));
    assert_string_equal(ck.file, "b.2");
    assert_string_equal(ck.gtid, "0-1-12,1-2-6");
    /* another server (a switchover): its id travels with the boundary */
    struct cdc_gtid e = {0, 1, 13};
    cdc_progress_boundary(p, "other-bin.000001", 900, &e, 2);
    assert_true(CKPT(p, ck));
    assert_int_equal(ck.server_id, 2);
    assert_string_equal(ck.gtid, "0-1-13,1-2-6");
    /* a term without a known start position never claims one */
    cdc_progress_reset(p, NULL);
    uint64_t t0 = cdc_progress_assign(p);
    cdc_progress_boundary(p, "b.3", 50, &a, 1);
    cdc_progress_done(p, t0, true);
    assert_true(CKPT(p, ck));
    assert_false(ck.gtid_known);
    cdc_progress_destroy(p);
}

/* One dropped row then many one-row transactions: the checkpoint stays,
 * and what the backlog costs per row stays small (a boundary is 40 bytes,
 * the file name is shared), so backlog_max_rows bounds memory. */
static void test_backlog_cost(void **state)
{
    (void)state;
    struct cdc_progress *p = cdc_progress_create();
    struct cdc_ckpt from = ck_of("binlog.000001", 4, 1, "0-1-0"), ck;
    cdc_progress_reset(p, &from);
    const uint64_t rows = 200000;
    for (uint64_t i = 0; i < rows; i++) {
        uint64_t s = cdc_progress_assign(p);
        struct cdc_gtid g = {0, 1, i + 1};
        cdc_progress_boundary(p, i < rows / 2 ? "binlog.000001" : "binlog.000002", 100 + i, &g, 1);
        cdc_progress_done(p, s, i != 0);
        if (i % 1000 == 0) assert_false(CKPT(p, ck));
    }
    struct cdc_backlog b;
    cdc_progress_backlog(p, &b);
    assert_true(b.blocked);
    assert_int_equal(b.pending, rows);
    double per_row = (double)b.bytes / (double)rows;
    printf("backlog of %llu rows behind a dropped one: %zu bytes (%.1f per row)\n",
           (unsigned long long)rows, b.bytes, per_row);
    assert_true(per_row <= 2 * 40 + 4); /* boundary array and ring, each at most doubled */
    cdc_progress_destroy(p);
}

static void test_ttl_constants(void **state)
{
    (void)state;
    assert_int_equal(CDC_CHECKPOINT_TTL_MS, 30LL * 86400 * 1000);
    assert_true(CDC_CHECKPOINT_REFRESH_MS < CDC_CHECKPOINT_TTL_MS / 2);
    assert_string_equal(CDC_CHECKPOINT_NAME, "cdc");
}

/* The locker contract mysql_cdc relies on: the name "cdc" is not reserved,
 * a 30-day ttl is accepted, absent reads are BATON_LOCKER_LOST, and a superseded
 * epoch cannot move the value. */
static void test_locker_round_trip(void **state)
{
    (void)state;
    struct baton_locker *l = baton_locker_local_create();
    char err[BATON_LOCKER_ERR_MAX], buf[CDC_CHECKPOINT_MAX];
    struct cdc_ckpt out, in = ck_of("binlog.000001", 4, 3, "0-3-9");
    const char *lease = "baton:active:mysql_cdc:st";
    assert_int_equal(baton_locker_shared_get(l, lease, CDC_CHECKPOINT_NAME, buf, sizeof buf, err),
                     BATON_LOCKER_LOST);
    struct baton_lock_grant a, b;
    assert_int_equal(baton_locker_try_lock(l, lease, 5000, &a, err), BATON_LOCKER_OK);
    int n = cdc_checkpoint_format(buf, sizeof buf, &in);
    assert_int_equal(baton_locker_fenced_set(l, lease, CDC_CHECKPOINT_NAME, a.epoch, buf, (size_t)n,
                                       CDC_CHECKPOINT_TTL_MS, err),
                     BATON_LOCKER_OK);
    memset(buf, 0, sizeof buf);
    assert_int_equal(baton_locker_shared_get(l, lease, CDC_CHECKPOINT_NAME, buf, sizeof buf, err),
                     BATON_LOCKER_OK);
    assert_int_equal(cdc_checkpoint_parse(buf, lease, &out, err, sizeof err), 0);
    assert_string_equal(out.file, "binlog.000001");
    assert_int_equal(out.pos, 4);
    assert_string_equal(out.gtid, "0-3-9");

    /* a newer leader: the old epoch's write is BATON_LOCKER_LOST, the value stays */
    assert_int_equal(baton_locker_unlock(l, lease, a.token, err), BATON_LOCKER_OK);
    assert_int_equal(baton_locker_try_lock(l, lease, 5000, &b, err), BATON_LOCKER_OK);
    in = ck_of("binlog.000009", 999, 3, NULL);
    n = cdc_checkpoint_format(buf, sizeof buf, &in);
    assert_int_equal(baton_locker_fenced_set(l, lease, CDC_CHECKPOINT_NAME, a.epoch, buf, (size_t)n,
                                       CDC_CHECKPOINT_TTL_MS, err),
                     BATON_LOCKER_LOST);
    assert_int_equal(baton_locker_shared_get(l, lease, CDC_CHECKPOINT_NAME, buf, sizeof buf, err),
                     BATON_LOCKER_OK);
    assert_string_equal(buf, "binlog.000001:4;server_id=3;gtid=0-3-9");
    baton_locker_destroy(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_parse),
        cmocka_unit_test(test_parse_refuses_nul),
        cmocka_unit_test(test_gtid_text),
        cmocka_unit_test(test_progress),
        cmocka_unit_test(test_progress_gtid),
        cmocka_unit_test(test_backlog_cost),
        cmocka_unit_test(test_ttl_constants),
        cmocka_unit_test(test_locker_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
