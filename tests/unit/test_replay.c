/* Unit tests: replay fingerprints and ids (common/replay_id.c), the
 * replay mark and the replay ring (src/replay.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/replay_id.h"
#include "src/replay.h"

/* ---- fingerprints and ids ------------------------------------------------ */

static uint64_t fps(const char *name, const char *payload)
{
    return replay_fingerprint(name, strlen(name), payload, strlen(payload));
}

static void test_fingerprint_stable(void **state)
{
    (void)state;
    /* Pinned values: replicas of different builds and platforms must agree,
     * so changing the hash is a breaking change for mixed-version clusters. */
    assert_int_equal(fps("orders", "{\"id\":1}"), UINT64_C(0x468008db75ea51f0));
    assert_int_equal(fps("sensors/temp/1", "{\"t\":21.5,\"unit\":\"C\"}"), UINT64_C(0xcf3f1e683780bbe4));
    assert_int_equal(replay_fingerprint(NULL, 0, NULL, 0), UINT64_C(0xdf0df6e05f0b223c));
    struct replay_idctx c = {{0}};
    char id[REPLAY_ID_LEN];
    replay_id(&c, 1, id);
    assert_string_equal(id, "r08b39581843d7485");
    assert_int_equal(fps("orders", "{\"id\":1}"), fps("orders", "{\"id\":1}"));
    /* Unaligned input reads the same bytes. */
    char buf[64];
    const char *text = "a payload longer than two words";
    memcpy(buf + 3, text, strlen(text));
    assert_int_equal(replay_fingerprint("t", 1, buf + 3, strlen(text)), fps("t", text));
    assert_int_not_equal(replay_fingerprint(NULL, 0, NULL, 0), 0);
}

static void test_fingerprint_separation(void **state)
{
    (void)state;
    /* The name/payload boundary is part of the hash. */
    assert_int_not_equal(fps("ab", "c"), fps("a", "bc"));
    assert_int_not_equal(fps("", "abc"), fps("abc", ""));
    assert_int_not_equal(fps("abcdefgh", "i"), fps("abcdefg", "hi"));
    /* Trailing zero bytes are not lost in the word padding. */
    assert_int_not_equal(replay_fingerprint("c", 1, "a", 1), replay_fingerprint("c", 1, "a\0", 2));
    /* A change in any byte of a multi-word payload shows. */
    char a[41], b[41];
    memset(a, 'x', 40);
    a[40] = '\0';
    uint64_t base = fps("ch", a);
    for (size_t i = 0; i < 40; i++) {
        memcpy(b, a, sizeof a);
        b[i] = 'y';
        assert_int_not_equal(fps("ch", b), base);
    }
    assert_int_not_equal(fps("ch1", "p"), fps("ch2", "p"));
}

static bool is_id(const char *id)
{
    if (strlen(id) != REPLAY_ID_LEN - 1 || id[0] != 'r') return false;
    for (const char *p = id + 1; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
    return true;
}

static void test_id_context(void **state)
{
    (void)state;
    uint64_t s[5] = {fps("c", "1"), fps("c", "2"), fps("c", "3"), fps("c", "4"), fps("c", "5")};
    struct replay_idctx x = {{0}}, y = {{0}};
    char ix[REPLAY_ID_LEN], iy[REPLAY_ID_LEN];
    /* The same stream gives the same ids on every replica. */
    for (int i = 0; i < 5; i++) {
        replay_id(&x, s[i], ix);
        replay_id(&y, s[i], iy);
        assert_true(is_id(ix));
        assert_string_equal(ix, iy);
    }
    /* The same message after different predecessors: a different id. */
    replay_idctx_reset(&x);
    replay_idctx_reset(&y);
    replay_id(&x, s[0], ix);
    replay_id(&y, s[1], iy);
    replay_id(&x, s[4], ix);
    replay_id(&y, s[4], iy);
    assert_string_not_equal(ix, iy);
    /* The order of the predecessors matters. */
    replay_idctx_reset(&x);
    replay_idctx_reset(&y);
    replay_id(&x, s[0], ix);
    replay_id(&x, s[1], ix);
    replay_id(&y, s[1], iy);
    replay_id(&y, s[0], iy);
    replay_id(&x, s[4], ix);
    replay_id(&y, s[4], iy);
    assert_string_not_equal(ix, iy);
    /* Only the last 3 count: a different 4th-before does not change it. */
    replay_idctx_reset(&x);
    replay_idctx_reset(&y);
    replay_id(&x, s[0], ix);
    replay_id(&y, s[4], iy);
    for (int i = 1; i < 4; i++) {
        replay_id(&x, s[i], ix);
        replay_id(&y, s[i], iy);
    }
    replay_id(&x, s[4], ix);
    replay_id(&y, s[4], iy);
    assert_string_equal(ix, iy);
    /* reset forgets: same as a fresh context. */
    struct replay_idctx fresh = {{0}};
    replay_idctx_reset(&x);
    replay_id(&x, s[2], ix);
    replay_id(&fresh, s[2], iy);
    assert_string_equal(ix, iy);
}

static void test_id_identical_run(void **state)
{
    (void)state;
    uint64_t other = fps("c", "x"), same = fps("c", "heartbeat");
    struct replay_idctx c = {{0}};
    char id[6][REPLAY_ID_LEN];
    replay_id(&c, other, id[0]);
    for (int i = 1; i < 6; i++) replay_id(&c, same, id[i]);
    /* The first 4 of the run see different contexts: all distinct. */
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++) assert_string_not_equal(id[i], id[j]);
    /* From the 4th on the context is the run itself: one shared id. */
    assert_string_equal(id[4], id[5]);
}

/* ---- the mark ------------------------------------------------------------ */

/* Field by field: struct padding is not part of the value. */
static void assert_mark_equal(const struct replay_mark *a, const struct replay_mark *b)
{
    assert_int_equal(a->epoch, b->epoch);
    assert_int_equal(a->wall_ms, b->wall_ms);
    assert_int_equal(a->n, b->n);
    for (unsigned i = 0; i < a->n; i++) assert_int_equal(a->fp[i], b->fp[i]);
}

static void test_mark_note(void **state)
{
    (void)state;
    struct replay_mark mk;
    memset(&mk, 0, sizeof mk);
    replay_mark_note(&mk, 3, 11, 1000);
    replay_mark_note(&mk, 3, 12, 1001);
    assert_int_equal(mk.epoch, 3);
    assert_int_equal(mk.n, 2);
    assert_int_equal(mk.fp[0], 11);
    assert_int_equal(mk.fp[1], 12);
    assert_int_equal(mk.wall_ms, 1001);
    /* Past K the oldest goes. */
    for (uint64_t f = 13; f <= 20; f++) replay_mark_note(&mk, 3, f, (int64_t)(1000 + f));
    assert_int_equal(mk.n, REPLAY_MARK_K);
    for (unsigned i = 0; i < REPLAY_MARK_K; i++) assert_int_equal(mk.fp[i], 13 + i);
    assert_int_equal(mk.wall_ms, 1020);
    /* A new epoch starts a new run. */
    replay_mark_note(&mk, 4, 99, 2000);
    assert_int_equal(mk.epoch, 4);
    assert_int_equal(mk.n, 1);
    assert_int_equal(mk.fp[0], 99);
    assert_int_equal(mk.wall_ms, 2000);
}

static void test_mark_format_parse(void **state)
{
    (void)state;
    struct replay_mark mk = {.epoch = 7, .wall_ms = 1700000000123, .n = 2, .fp = {0xab, 0x1}};
    char buf[REPLAY_MARK_MAX];
    const char *want = "v1 7 1700000000123 2 ab 1";
    assert_int_equal(replay_mark_format(&mk, buf, sizeof buf), (int)strlen(want));
    assert_string_equal(buf, want);
    struct replay_mark back;
    assert_int_equal(replay_mark_parse(buf, strlen(buf), &back), 0);
    assert_mark_equal(&back, &mk);
    /* Exactly enough room, and one byte short. */
    assert_int_equal(replay_mark_format(&mk, buf, strlen(want) + 1), (int)strlen(want));
    assert_int_equal(replay_mark_format(&mk, buf, strlen(want)), -1);
    assert_int_equal(replay_mark_format(&mk, buf, 3), -1);
    assert_int_equal(replay_mark_format(&mk, NULL, 0), -1);
    /* The longest mark fits REPLAY_MARK_MAX and round-trips. */
    struct replay_mark big = {.epoch = UINT64_MAX, .wall_ms = INT64_MIN, .n = REPLAY_MARK_K};
    for (unsigned i = 0; i < REPLAY_MARK_K; i++) big.fp[i] = UINT64_MAX - i;
    int n = replay_mark_format(&big, buf, sizeof buf);
    assert_true(n > 0 && n < REPLAY_MARK_MAX);
    assert_int_equal(replay_mark_parse(buf, (size_t)n, &back), 0);
    assert_mark_equal(&back, &big);
    /* A mark parse would reject is not written. */
    struct replay_mark bad = {.epoch = 1, .n = 0};
    assert_int_equal(replay_mark_format(&bad, buf, sizeof buf), -1);
    bad.n = REPLAY_MARK_K + 1;
    assert_int_equal(replay_mark_format(&bad, buf, sizeof buf), -1);
    bad = (struct replay_mark){.epoch = 1, .n = 2, .fp = {5, 0}};
    assert_int_equal(replay_mark_format(&bad, buf, sizeof buf), -1);
    /* len bounds the parse: the text need not be NUL terminated. */
    assert_int_equal(replay_mark_parse("v1 1 2 1 ffXYZ", 11, &back), 0);
    assert_int_equal(back.fp[0], 0xff);
    assert_int_equal(back.n, 1);
}

static void test_mark_parse_rejects(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "v1",
        "v2 1 2 1 ab",                     /* wrong version */
        "V1 1 2 1 ab",
        "v1 1 2 0",                        /* n out of range */
        "v1 1 2 9 1 2 3 4 5 6 7 8 9",
        "v1 1 2 2 ab",                     /* a missing fingerprint */
        "v1 1 2 1 ab cd",                  /* an extra one */
        "v1 1 2",                          /* missing count */
        "v1 1 2 1",
        "v1 1 2 1 ",
        "v1 x 2 1 ab",                     /* non-numeric */
        "v1 1 2x 1 ab",
        "v1 1 2 1 zz",
        "v1 1 2 1 AB",                     /* not lowercase */
        "v1 1 2 1 0x1",
        "v1 1 2 1 0",                      /* a 0 fingerprint */
        "v1 1 2 2 ab 00",
        "v1 1 2 1 ab\n",                   /* trailing garbage */
        "v1 1 2 1 ab ",
        "v1 1 2 1 abq",
        "v1  1 2 1 ab",                    /* not single spaces */
        "v1 1 2 1  ab",
        " v1 1 2 1 ab",
        "v1 -1 2 1 ab",                    /* epoch is unsigned */
        "v1 +1 2 1 ab",
        "v1 1 - 1 ab",
        "v1 18446744073709551616 2 1 ab",  /* overflow */
        "v1 1 9223372036854775808 1 ab",
        "v1 1 2 1 10000000000000000",      /* 17 hex digits */
        "v1 1 2 18446744073709551617 ab",
    };
    struct replay_mark out = {.epoch = 42};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (replay_mark_parse(bad[i], strlen(bad[i]), &out) != -1)
            fail_msg("accepted \"%s\"", bad[i]);
    }
    assert_int_equal(out.epoch, 42); /* untouched on failure */
    /* An embedded NUL inside len is garbage too. */
    assert_int_equal(replay_mark_parse("v1 1 2 1 ab\0", 12, &out), -1);
    /* Edges that are fine. */
    assert_int_equal(replay_mark_parse("v1 0 -5 1 1", 11, &out), 0);
    assert_int_equal(out.wall_ms, -5);
    assert_int_equal(replay_mark_parse("v1 1 2 1 ffffffffffffffff", 25, &out), 0);
    assert_int_equal(out.fp[0], UINT64_MAX);
}

/* ---- the ring ------------------------------------------------------------ */

static struct message *msg(uint64_t fp, size_t len)
{
    char body[4096];
    assert_true(len <= sizeof body);
    memset(body, 'x', len);
    struct message *m = message_new(body, len);
    m->fp = fp;
    return m;
}

/* Bytes the ring accounts for one message of len bytes. */
static size_t cost(size_t len)
{
    struct replay_ring *r = replay_ring_new(1000, SIZE_MAX);
    replay_ring_push(r, msg(1, len), 0);
    struct replay_ring_stats st;
    replay_ring_stats(r, &st);
    replay_ring_free(r);
    return st.bytes;
}

static void test_ring_window(void **state)
{
    (void)state;
    struct replay_ring *r = replay_ring_new(1000, SIZE_MAX);
    struct replay_ring_stats st;
    replay_ring_stats(r, &st);
    assert_int_equal(st.count, 0);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(st.oldest_wall_ms, 0);
    assert_null(replay_ring_at(r, 0));
    /* 100 messages 20 ms apart: more than the initial array, so it grows
     * and wraps. */
    for (uint64_t i = 0; i < 100; i++) replay_ring_push(r, msg(i + 1, 10), 10000 + (int64_t)i * 20);
    /* Newest at 11980: kept from 10980 on (entries 49..99). */
    replay_ring_stats(r, &st);
    assert_int_equal(st.count, 51);
    assert_int_equal(replay_ring_count(r), 51);
    assert_int_equal(st.evicted_window, 49);
    assert_int_equal(st.evicted_overflow, 0);
    assert_int_equal(st.oldest_wall_ms, 10980);
    assert_int_equal(st.newest_wall_ms, 11980);
    assert_int_equal(st.bytes, 51 * cost(10));
    for (size_t i = 0; i < 51; i++) {
        assert_int_equal(replay_ring_at(r, i)->fp, 50 + i);
        assert_int_equal(replay_ring_wall_at(r, i), 10980 + (int64_t)i * 20);
    }
    assert_null(replay_ring_at(r, 51));
    /* An idle source: trim evicts by window without a push, down to none. */
    replay_ring_trim(r, 12500);
    replay_ring_stats(r, &st);
    assert_int_equal(st.count, 25);
    assert_int_equal(st.oldest_wall_ms, 11500);
    replay_ring_trim(r, 999999);
    replay_ring_stats(r, &st);
    assert_int_equal(st.count, 0);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(st.evicted_window, 100);
    assert_int_equal(st.newest_wall_ms, 0);
    /* Still usable after emptying. */
    replay_ring_push(r, msg(7, 1), 1000000);
    assert_int_equal(replay_ring_count(r), 1);
    replay_ring_free(r);
}

static void test_ring_bytes(void **state)
{
    (void)state;
    size_t c = cost(100);
    struct replay_ring *r = replay_ring_new(1000000, 5 * c);
    for (uint64_t i = 0; i < 5; i++) replay_ring_push(r, msg(i + 1, 100), 1);
    struct replay_ring_stats st;
    replay_ring_stats(r, &st);
    assert_int_equal(st.count, 5); /* exactly max_bytes: kept */
    assert_int_equal(st.bytes, 5 * c);
    replay_ring_push(r, msg(6, 100), 2);
    replay_ring_stats(r, &st);
    assert_int_equal(st.count, 5);
    assert_int_equal(st.evicted_overflow, 1);
    assert_int_equal(st.evicted_window, 0);
    assert_int_equal(replay_ring_at(r, 0)->fp, 2);
    /* A message worth 3 entries pushes out 3. */
    replay_ring_push(r, msg(7, 100 + 2 * c), 3);
    replay_ring_stats(r, &st);
    assert_int_equal(st.count, 3);
    assert_int_equal(st.evicted_overflow, 4);
    assert_int_equal(st.bytes, 2 * c + cost(100 + 2 * c));
    assert_int_equal(replay_ring_at(r, 0)->fp, 5);
    assert_int_equal(replay_ring_at(r, 2)->fp, 7);
    replay_ring_free(r);
}

static void test_ring_oversized_kept(void **state)
{
    (void)state;
    struct replay_ring *r = replay_ring_new(1000000, 100);
    replay_ring_push(r, msg(1, 10), 1);
    replay_ring_push(r, msg(2, 1000), 2); /* alone larger than max_bytes */
    struct replay_ring_stats st;
    replay_ring_stats(r, &st);
    assert_int_equal(st.count, 1);
    assert_int_equal(st.evicted_overflow, 1);
    assert_int_equal(replay_ring_at(r, 0)->fp, 2);
    assert_int_equal(st.bytes, cost(1000));
    replay_ring_push(r, msg(3, 2000), 3); /* replaces it */
    replay_ring_stats(r, &st);
    assert_int_equal(st.count, 1);
    assert_int_equal(replay_ring_at(r, 0)->fp, 3);
    replay_ring_free(r);
    replay_ring_free(NULL);
}

/* ---- align --------------------------------------------------------------- */

/* Pushes fps[0..n) received at wall0, wall0 + 10, ... */
static void push_run(struct replay_ring *r, const uint64_t *f, size_t n, int64_t wall0)
{
    for (size_t i = 0; i < n; i++) replay_ring_push(r, msg(f[i], 8), wall0 + (int64_t)i * 10);
}

static struct replay_mark mark_of(const uint64_t *f, unsigned n, int64_t wall_ms)
{
    struct replay_mark mk = {.epoch = 1, .wall_ms = wall_ms, .n = n};
    memcpy(mk.fp, f, n * sizeof f[0]);
    return mk;
}

static void test_align_exact(void **state)
{
    (void)state;
    const uint64_t f[] = {11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
    struct replay_ring *r = replay_ring_new(1000000, SIZE_MAX);
    push_run(r, f, 10, 1000);
    struct replay_mark mk = mark_of(f + 3, 3, 1050); /* 14 15 16, entries 3..5 */
    struct replay_plan p;
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.how, REPLAY_ALIGNED);
    assert_string_equal(replay_how_name(p.how), "aligned");
    assert_int_equal(p.start, 6);
    assert_int_equal(p.matches, 1);
    assert_false(p.gap);
    /* A partial run is no match. */
    const uint64_t partial[] = {14, 15, 99};
    mk = mark_of(partial, 3, 1050);
    replay_ring_align(r, &mk, &p);
    assert_int_not_equal(p.how, REPLAY_ALIGNED);
    /* A run of 1 at the oldest entry. */
    mk = mark_of(f, 1, 1000);
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.how, REPLAY_ALIGNED);
    assert_int_equal(p.start, 1);
    replay_ring_free(r);
}

static void test_align_newest(void **state)
{
    (void)state;
    const uint64_t f[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    struct replay_ring *r = replay_ring_new(1000000, SIZE_MAX);
    push_run(r, f, 9, 1000);
    struct replay_mark mk = mark_of(f + 1, REPLAY_MARK_K, 1080); /* up to the newest */
    struct replay_plan p;
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.how, REPLAY_ALIGNED);
    assert_int_equal(p.start, replay_ring_count(r)); /* nothing to replay */
    assert_int_equal(p.matches, 1);
    assert_false(p.gap);
    /* ... unless the stream broke since: a pending gap counts. */
    replay_ring_gap(r);
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.start, 9);
    assert_true(p.gap);
    replay_ring_free(r);
}

static void test_align_no_mark(void **state)
{
    (void)state;
    const uint64_t f[] = {1, 2, 3};
    struct replay_ring *r = replay_ring_new(1000000, SIZE_MAX);
    struct replay_plan p;
    replay_ring_align(r, NULL, &p); /* empty ring */
    assert_int_equal(p.how, REPLAY_NO_MARK);
    assert_int_equal(p.start, 0);
    assert_false(p.gap);
    push_run(r, f, 3, 1000);
    replay_ring_align(r, NULL, &p);
    assert_int_equal(p.how, REPLAY_NO_MARK);
    assert_string_equal(replay_how_name(p.how), "no_mark");
    assert_int_equal(p.start, 0);
    assert_int_equal(p.matches, 0);
    assert_false(p.gap);
    replay_ring_free(r);
}

static void test_align_not_found(void **state)
{
    (void)state;
    /* This replica subscribed after the mark's messages: nothing evicted,
     * oldest entry newer than the mark. */
    const uint64_t f[] = {5, 6, 7, 8};
    const uint64_t old[] = {1, 2, 3};
    struct replay_ring *r = replay_ring_new(1000000, SIZE_MAX);
    push_run(r, f, 4, 2000);
    struct replay_mark mk = mark_of(old, 3, 1500);
    struct replay_plan p;
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.how, REPLAY_NOT_FOUND);
    assert_string_equal(replay_how_name(p.how), "not_found");
    assert_int_equal(p.start, 0);
    assert_int_equal(p.matches, 0);
    assert_false(p.gap);
    replay_ring_free(r);
    /* Evicted only entries older than the mark, which falls inside what is
     * held but is not there: the streams differ. */
    r = replay_ring_new(100, SIZE_MAX);
    const uint64_t g[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
    push_run(r, g, 20, 1000); /* 1000..1190; keeps 1090.. */
    struct replay_ring_stats st;
    replay_ring_stats(r, &st);
    assert_true(st.evicted_window > 0);
    const uint64_t other[] = {77, 78};
    mk = mark_of(other, 2, 1150);
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.how, REPLAY_NOT_FOUND);
    replay_ring_free(r);
    /* An empty ring that never received anything. */
    r = replay_ring_new(100, SIZE_MAX);
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.how, REPLAY_NOT_FOUND);
    assert_int_equal(p.start, 0);
    replay_ring_free(r);
}

static void test_align_ring_short(void **state)
{
    (void)state;
    const uint64_t g[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
    /* By window: entries 0..8 (1000..1080) evicted; the mark's run (2 3 4,
     * newest at 1030) went with them. */
    struct replay_ring *r = replay_ring_new(100, SIZE_MAX);
    push_run(r, g, 20, 1000);
    assert_int_equal(replay_ring_wall_at(r, 0), 1090);
    struct replay_mark mk = mark_of(g + 1, 3, 1030);
    struct replay_plan p;
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.how, REPLAY_RING_SHORT);
    assert_string_equal(replay_how_name(p.how), "ring_short");
    assert_int_equal(p.start, 0);
    assert_int_equal(p.matches, 0);
    /* The mark between the newest evicted (1080) and the oldest held
     * (1090): received here a little earlier than the leader stamped it. */
    mk.wall_ms = 1085;
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.how, REPLAY_RING_SHORT);
    /* A mark older than all of it, ring emptied by trim: still short. */
    replay_ring_trim(r, 5000);
    mk.wall_ms = 900;
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.how, REPLAY_RING_SHORT);
    /* Newer than everything evicted, ring empty: never received it. */
    mk.wall_ms = 4000;
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.how, REPLAY_NOT_FOUND);
    replay_ring_free(r);
    /* By max_bytes: evicted entries newer than the mark. */
    r = replay_ring_new(1000000, 4 * cost(8));
    push_run(r, g, 20, 1000);
    assert_int_equal(replay_ring_count(r), 4);
    mk = mark_of(g + 2, 2, 1040);
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.how, REPLAY_RING_SHORT);
    /* ... though a mark still held aligns. */
    mk = mark_of(g + 16, 2, 1170);
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.how, REPLAY_ALIGNED);
    assert_int_equal(p.start, 2);
    replay_ring_free(r);
}

static void test_align_heartbeat(void **state)
{
    (void)state;
    /* 12 identical heartbeats 10 ms apart (1000..1110): the mark's run of 3
     * ends at every entry from 2 on. */
    uint64_t hb[12];
    for (int i = 0; i < 12; i++) hb[i] = 0x4242;
    struct replay_ring *r = replay_ring_new(1000000, SIZE_MAX);
    push_run(r, hb, 12, 1000);
    struct replay_mark mk = mark_of(hb, 3, 1052); /* nearest entry 5 (1050) */
    struct replay_plan p;
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.how, REPLAY_ALIGNED);
    assert_int_equal(p.matches, 10);
    assert_int_equal(p.start, 6);
    /* A tie (1055: entries 5 and 6 equally near): the newest. */
    mk.wall_ms = 1055;
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.start, 7);
    /* Far in the past or future: the nearest end. */
    mk.wall_ms = 0;
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.start, 3);
    mk.wall_ms = INT64_MAX;
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.start, 12);
    mk.wall_ms = INT64_MIN;
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.start, 3);
    replay_ring_free(r);
}

static void test_align_gap_inside_run(void **state)
{
    (void)state;
    const uint64_t a[] = {1, 2, 3};
    const uint64_t b[] = {4, 5, 6};
    struct replay_ring *r = replay_ring_new(1000000, SIZE_MAX);
    push_run(r, a, 3, 1000);
    replay_ring_gap(r); /* between 3 and 4 */
    push_run(r, b, 3, 1030);
    struct replay_mark mk = mark_of((const uint64_t[]){2, 3, 4}, 3, 1030);
    struct replay_plan p;
    replay_ring_align(r, &mk, &p);
    assert_int_not_equal(p.how, REPLAY_ALIGNED);
    assert_int_equal(p.how, REPLAY_NOT_FOUND);
    assert_int_equal(p.start, 0);
    assert_true(p.gap); /* the whole ring is replayed, gap included */
    /* A gap before the run's first entry is outside it: a match. */
    mk = mark_of((const uint64_t[]){4, 5}, 2, 1040);
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.how, REPLAY_ALIGNED);
    assert_int_equal(p.start, 5);
    assert_false(p.gap); /* the gap lies before the mark: nothing missing after it */
    replay_ring_free(r);
}

static void test_align_gap_flag(void **state)
{
    (void)state;
    const uint64_t f[] = {1, 2, 3, 4, 5, 6};
    struct replay_ring *r = replay_ring_new(1000000, SIZE_MAX);
    push_run(r, f, 3, 1000);
    replay_ring_gap(r);
    push_run(r, f + 3, 3, 1030); /* entry 3 has gap_before */
    struct replay_plan p;
    /* A gap inside the replayed range. */
    struct replay_mark mk = mark_of(f, 2, 1010);
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.how, REPLAY_ALIGNED);
    assert_int_equal(p.start, 2);
    assert_true(p.gap);
    /* A gap between the mark and the first replayed entry. */
    mk = mark_of(f + 1, 2, 1020);
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.start, 3);
    assert_true(p.gap);
    /* After the gap: none. */
    mk = mark_of(f + 3, 1, 1030);
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.start, 4);
    assert_false(p.gap);
    /* Unaligned plans look at the whole ring. */
    replay_ring_align(r, NULL, &p);
    assert_true(p.gap);
    replay_ring_free(r);
    /* A gap flagged on an empty ring lands on the first entry pushed. */
    r = replay_ring_new(1000000, SIZE_MAX);
    replay_ring_gap(r);
    replay_ring_align(r, NULL, &p);
    assert_true(p.gap); /* pending */
    push_run(r, f, 2, 1000);
    replay_ring_align(r, NULL, &p);
    assert_int_equal(p.how, REPLAY_NO_MARK);
    assert_true(p.gap);
    mk = mark_of(f, 1, 1000);
    replay_ring_align(r, &mk, &p);
    assert_int_equal(p.start, 1);
    assert_false(p.gap);
    replay_ring_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fingerprint_stable),
        cmocka_unit_test(test_fingerprint_separation),
        cmocka_unit_test(test_id_context),
        cmocka_unit_test(test_id_identical_run),
        cmocka_unit_test(test_mark_note),
        cmocka_unit_test(test_mark_format_parse),
        cmocka_unit_test(test_mark_parse_rejects),
        cmocka_unit_test(test_ring_window),
        cmocka_unit_test(test_ring_bytes),
        cmocka_unit_test(test_ring_oversized_kept),
        cmocka_unit_test(test_align_exact),
        cmocka_unit_test(test_align_newest),
        cmocka_unit_test(test_align_no_mark),
        cmocka_unit_test(test_align_not_found),
        cmocka_unit_test(test_align_ring_short),
        cmocka_unit_test(test_align_heartbeat),
        cmocka_unit_test(test_align_gap_inside_run),
        cmocka_unit_test(test_align_gap_flag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
