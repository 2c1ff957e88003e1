/* Unit tests: warm standby replay for one endpoint (src/warm.c) over the
 * in-process locker: standby buffering, promotion on the previous leader's
 * mark (replayed, restamped, in order before the live stream, with their
 * ordering keys), the fenced mark the new leader publishes, and the
 * unaligned cases. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "base/util.h"
#include "guard/locker.h"
#include "common/envelope.h"
#include "common/util.h"
#include "src/replay.h"
#include "src/warm.h"

#define KEY "baton:active:redis_psub:orders"

/* What the gateway would have queued, in order. */
struct sink {
    struct message *m[64];
    size_t n;
};

static void enqueue(struct sink *s, struct message *m)
{
    assert_true(s->n < 64);
    s->m[s->n++] = m;
}

/* As the gateway does: warm_emit, then what it hands back is queued. */
static int emit(struct warm *w, struct message *m, struct sink *out)
{
    struct message *q = NULL;
    int rc = warm_emit(w, m, &q);
    if (q) {
        assert_true(warm_live(w)); /* a standby hands nothing back */
        enqueue(out, q);
    }
    return rc;
}

/* As the gateway does: warm_promote, the replayed messages queued in
 * order, then warm_promote_done. */
static int promote(struct warm *w, uint64_t epoch, struct sink *out)
{
    struct message **replay = NULL;
    size_t n = 0;
    int rc = warm_promote(w, epoch, &replay, &n);
    if (rc != 0) {
        assert_null(replay);
        assert_int_equal(n, 0);
        return rc;
    }
    for (size_t i = 0; i < n; i++) enqueue(out, replay[i]);
    free(replay);
    warm_promote_done(w);
    return 0;
}

static void sink_free(struct sink *s)
{
    for (size_t i = 0; i < s->n; i++) message_finish(s->m[i], MSG_DELIVERED);
    s->n = 0;
}

/* The ordering key of message fp: channel "c<fp % 3>". */
static uint64_t key_of(uint64_t fp)
{
    char ch[8];
    snprintf(ch, sizeof ch, "c%u", (unsigned)(fp % 3));
    return message_key_hash(ch, strlen(ch));
}

/* An envelope with payload "p<fp>" and key_of(fp), built in epoch. */
static struct message *msg(uint64_t fp, uint64_t epoch)
{
    struct envelope e;
    envelope_init(&e);
    envelope_begin(&e, "orders", "redis_psub", epoch, NULL, clock_wall_ms()); /* the ring times it by this */
    char ch[8];
    snprintf(ch, sizeof ch, "c%u", (unsigned)(fp % 3));
    envelope_order_key(&e, ch, strlen(ch));
    char p[32];
    snprintf(p, sizeof p, "p%llu", (unsigned long long)fp);
    envelope_payload(&e, p, strlen(p));
    struct message *m = envelope_finish(&e);
    envelope_free(&e);
    m->fp = fp;
    return m;
}

static bool has_payload(const struct message *m, uint64_t fp)
{
    char p[48];
    snprintf(p, sizeof p, "\"payload\":\"p%llu\"", (unsigned long long)fp);
    return strstr(m->json, p) != NULL;
}

static struct replay_config cfg(void)
{
    struct replay_config c = {.window_ms = 60000, .max_bytes = 1 << 20, .mark_interval_ms = 50};
    return c;
}

/* Takes the lease; returns its epoch. */
static uint64_t acquire(struct baton_locker *l, char token[RANDOM_TOKEN_LEN])
{
    struct baton_lock_grant g;
    char err[BATON_LOCKER_ERR_MAX];
    assert_int_equal(baton_locker_try_lock(l, KEY, 60000, &g, err), BATON_LOCKER_OK);
    memcpy(token, g.token, RANDOM_TOKEN_LEN);
    return g.epoch;
}

static void write_mark(struct baton_locker *l, uint64_t epoch, const uint64_t *fps, unsigned n)
{
    struct replay_mark mk = {0};
    for (unsigned i = 0; i < n; i++) replay_mark_note(&mk, epoch, fps[i], 1764684000123LL);
    char text[REPLAY_MARK_MAX], err[BATON_LOCKER_ERR_MAX];
    int len = replay_mark_format(&mk, text, sizeof text);
    assert_true(len > 0);
    assert_int_equal(baton_locker_fenced_set(l, KEY, "mark", epoch, text, (size_t)len, 60000, err),
                     BATON_LOCKER_OK);
}

static int acks;
static void on_done(void *arg, const struct message *m, enum msg_outcome o)
{
    (void)arg;
    (void)m;
    assert_int_equal(o, MSG_DELIVERED);
    acks++;
}

static void test_promote_on_mark(void **state)
{
    (void)state;
    struct baton_locker *l = baton_locker_local_create();
    struct sink out = {0};
    struct replay_config c = cfg();
    struct warm *w = warm_create("orders", &c, l, KEY);
    char tok[RANDOM_TOKEN_LEN], err[BATON_LOCKER_ERR_MAX];

    /* the old leader delivered 1..3 and marked them */
    uint64_t e1 = acquire(l, tok);
    const uint64_t fps[] = {1, 2, 3};
    write_mark(l, e1, fps, 3);
    assert_int_equal(baton_locker_unlock(l, KEY, tok, err), BATON_LOCKER_OK);

    /* this standby received 1..5; a source waiting for an ack gets it */
    acks = 0;
    for (uint64_t fp = 1; fp <= 5; fp++) {
        struct message *m = msg(fp, e1);
        m->done = on_done;
        assert_int_equal(emit(w, m, &out), 0);
    }
    assert_int_equal(acks, 5);
    assert_int_equal(out.n, 0); /* a standby never forwards */
    assert_false(warm_live(w));
    assert_int_equal(atomic_load(&warm_stats(w)->buffered), 5);
    assert_int_equal(atomic_load(&warm_stats(w)->ring_count), 5);

    uint64_t e2 = acquire(l, tok);
    assert_true(e2 > e1);
    assert_int_equal(promote(w, e2, &out), 0);
    assert_true(warm_live(w));
    assert_int_equal(out.n, 2); /* 4 and 5: what the old leader had not settled */
    for (size_t i = 0; i < 2; i++) {
        assert_true(has_payload(out.m[i], 4 + i));
        assert_int_equal(out.m[i]->epoch, e2);
        assert_non_null(strstr(out.m[i]->json, "\"replayed\":true"));
        assert_int_equal(out.m[i]->key, key_of(4 + i)); /* replayed with its ordering key */
    }
    assert_int_not_equal(out.m[0]->key, out.m[1]->key);
    assert_int_equal(atomic_load(&warm_stats(w)->replayed), 2);
    for (int r = 0; r < 4; r++) assert_int_equal(atomic_load(&warm_stats(w)->unaligned[r]), 0);

    /* live: built in the old epoch just before the promotion -> restamped,
     * not replayed, after the replay */
    assert_int_equal(emit(w, msg(6, e1), &out), 0);
    assert_int_equal(out.n, 3);
    assert_true(has_payload(out.m[2], 6));
    assert_int_equal(out.m[2]->epoch, e2);
    assert_null(strstr(out.m[2]->json, "replayed"));
    assert_int_equal(out.m[2]->key, key_of(6));
    assert_int_equal(atomic_load(&warm_stats(w)->ring_count), 6); /* the leader keeps one too */

    /* the new leader's mark: what it settled, fenced by its epoch */
    enum msg_outcome oc[3] = {MSG_DELIVERED, MSG_DELIVERED, MSG_DELIVERED};
    warm_settled(w, out.m, oc, 3);
    assert_true(warm_mark_lag_ms(w) >= 0);
    warm_flush_mark(w);
    assert_int_equal(atomic_load(&warm_stats(w)->marks_written), 1);
    assert_int_equal(warm_mark_lag_ms(w), 0);
    char text[REPLAY_MARK_MAX];
    assert_int_equal(baton_locker_shared_get(l, KEY, "mark", text, sizeof text, err), BATON_LOCKER_OK);
    struct replay_mark mk;
    assert_int_equal(replay_mark_parse(text, strlen(text), &mk), 0);
    assert_int_equal(mk.epoch, e2);
    assert_int_equal(mk.n, 3);
    assert_int_equal(mk.fp[0], 4);
    assert_int_equal(mk.fp[2], 6);

    /* demoted: buffers again, and a superseded epoch's mark is refused */
    warm_demote(w);
    assert_int_equal(emit(w, msg(7, e2), &out), 0);
    assert_int_equal(out.n, 3);
    assert_int_equal(baton_locker_unlock(l, KEY, tok, err), BATON_LOCKER_OK);
    uint64_t e3 = acquire(l, tok);
    struct message *late = msg(7, e2);
    enum msg_outcome d = MSG_DELIVERED;
    warm_settled(w, &late, &d, 1);
    warm_flush_mark(w);
    assert_int_equal(atomic_load(&warm_stats(w)->marks_fenced), 1);
    message_finish(late, MSG_DELIVERED);
    (void)e3;

    sink_free(&out);
    warm_destroy(w);
    baton_locker_destroy(l);
}

/* Settled messages that are left to the successor (term ended, shutdown)
 * do not advance the mark. */
static void test_mark_skips_unsettled(void **state)
{
    (void)state;
    struct baton_locker *l = baton_locker_local_create();
    struct sink out = {0};
    struct replay_config c = cfg();
    struct warm *w = warm_create("orders", &c, l, KEY);
    char tok[RANDOM_TOKEN_LEN], err[BATON_LOCKER_ERR_MAX];
    uint64_t e = acquire(l, tok);
    assert_int_equal(promote(w, e, &out), 0);
    struct message *m[3] = {msg(11, e), msg(12, e), msg(13, e)};
    enum msg_outcome oc[3] = {MSG_DELIVERED, MSG_DROPPED_TERM_ENDED, MSG_DROPPED_SHUTDOWN};
    warm_settled(w, m, oc, 3);
    warm_flush_mark(w);
    char text[REPLAY_MARK_MAX];
    assert_int_equal(baton_locker_shared_get(l, KEY, "mark", text, sizeof text, err), BATON_LOCKER_OK);
    struct replay_mark mk;
    assert_int_equal(replay_mark_parse(text, strlen(text), &mk), 0);
    assert_int_equal(mk.n, 1);
    assert_int_equal(mk.fp[0], 11);
    for (int i = 0; i < 3; i++) message_finish(m[i], MSG_DELIVERED);
    sink_free(&out);
    warm_destroy(w);
    baton_locker_destroy(l);
}

/* No mark, or a mark this ring never saw: the whole ring is delivered and
 * the reason counted. An empty ring without a mark counts nothing. A mark
 * whose full run is broken (a message dropped between settled ones) still
 * aligns on its newest fingerprints. */
static void test_unaligned_and_partial(void **state)
{
    (void)state;
    struct baton_locker *l = baton_locker_local_create();
    struct sink out = {0};
    struct replay_config c = cfg();
    char tok[RANDOM_TOKEN_LEN], err[BATON_LOCKER_ERR_MAX];

    struct warm *w = warm_create("orders", &c, l, KEY);
    uint64_t e = acquire(l, tok);
    assert_int_equal(promote(w, e, &out), 0); /* empty ring, no mark */
    for (int r = 0; r < 4; r++) assert_int_equal(atomic_load(&warm_stats(w)->unaligned[r]), 0);
    warm_demote(w);
    for (uint64_t fp = 21; fp <= 23; fp++) emit(w, msg(fp, e), &out);
    assert_int_equal(baton_locker_unlock(l, KEY, tok, err), BATON_LOCKER_OK);
    e = acquire(l, tok);
    assert_int_equal(promote(w, e, &out), 0); /* no mark, 3 buffered */
    assert_int_equal(out.n, 3);
    assert_int_equal(atomic_load(&warm_stats(w)->unaligned[WARM_NO_MARK]), 1);
    sink_free(&out);
    warm_destroy(w);

    /* a mark of messages this ring never held */
    w = warm_create("orders", &c, l, KEY);
    const uint64_t other[] = {901, 902};
    write_mark(l, e, other, 2);
    for (uint64_t fp = 31; fp <= 32; fp++) emit(w, msg(fp, e), &out);
    assert_int_equal(baton_locker_unlock(l, KEY, tok, err), BATON_LOCKER_OK);
    e = acquire(l, tok);
    assert_int_equal(promote(w, e, &out), 0);
    assert_int_equal(out.n, 2);
    assert_int_equal(atomic_load(&warm_stats(w)->unaligned[WARM_NOT_FOUND]), 1);
    sink_free(&out);
    warm_destroy(w);

    /* the run 41 42 [43 dropped] 44 45: marked 41 42 44 45 */
    w = warm_create("orders", &c, l, KEY);
    for (uint64_t fp = 41; fp <= 47; fp++) emit(w, msg(fp, e), &out);
    const uint64_t broken[] = {41, 42, 44, 45};
    write_mark(l, e, broken, 4);
    assert_int_equal(baton_locker_unlock(l, KEY, tok, err), BATON_LOCKER_OK);
    e = acquire(l, tok);
    assert_int_equal(promote(w, e, &out), 0);
    assert_int_equal(out.n, 2); /* 46, 47 */
    assert_true(has_payload(out.m[0], 46));
    for (int r = 0; r < 4; r++) assert_int_equal(atomic_load(&warm_stats(w)->unaligned[r]), 0);
    sink_free(&out);
    warm_destroy(w);
    baton_locker_destroy(l);
}

/* The promotion's hand-off keeps the order: a live emit that comes while
 * the gateway is still enqueueing the replayed messages (warm_promote
 * returned, warm_promote_done not yet called) waits, and what it hands
 * back is queued after the last replayed one. */
struct live_emitter {
    struct warm *w;
    struct sink *out;
    uint64_t fp, epoch;
    atomic_bool returned;
};

static void *live_emit_main(void *arg)
{
    struct live_emitter *le = arg;
    emit(le->w, msg(le->fp, le->epoch), le->out);
    atomic_store(&le->returned, true);
    return NULL;
}

static void test_promotion_hand_off_keeps_order(void **state)
{
    (void)state;
    struct baton_locker *l = baton_locker_local_create();
    struct sink out = {0};
    struct replay_config c = cfg();
    struct warm *w = warm_create("orders", &c, l, KEY);
    char tok[RANDOM_TOKEN_LEN];

    uint64_t e1 = acquire(l, tok);
    for (uint64_t fp = 51; fp <= 53; fp++) assert_int_equal(emit(w, msg(fp, e1), &out), 0);
    assert_int_equal(out.n, 0);

    struct message **replay = NULL;
    size_t n = 0;
    assert_int_equal(warm_promote(w, e1, &replay, &n), 0); /* no mark: the whole ring */
    assert_int_equal(n, 3);
    assert_true(warm_live(w));

    struct live_emitter le = {.w = w, .out = &out, .fp = 54, .epoch = e1};
    atomic_init(&le.returned, false);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, live_emit_main, &le), 0);
    usleep(50000);
    assert_false(atomic_load(&le.returned)); /* held back by the hand-off */
    assert_int_equal(out.n, 0);

    for (size_t i = 0; i < n; i++) enqueue(&out, replay[i]);
    free(replay);
    warm_promote_done(w);
    pthread_join(t, NULL);
    assert_true(atomic_load(&le.returned));

    assert_int_equal(out.n, 4);
    for (size_t i = 0; i < 4; i++) {
        assert_true(has_payload(out.m[i], 51 + i));
        assert_int_equal(out.m[i]->epoch, e1);
        if (i < 3)
            assert_non_null(strstr(out.m[i]->json, "\"replayed\":true"));
        else
            assert_null(strstr(out.m[i]->json, "replayed"));
    }
    sink_free(&out);
    warm_destroy(w);
    baton_locker_destroy(l);
}

/* failover = "replay" with raw records (redis_psub's standby): a record is
 * rendered only when it is re-issued, by the endpoint's render, and the
 * message it becomes keeps the record's ordering key (issue 36) -- also
 * when the render itself sets none, as this one. */
static struct message *render_raw(void *ep, struct envelope *scratch, const struct message *raw,
                                  uint64_t epoch, bool replayed)
{
    (void)ep;
    if (replayed)
        envelope_begin_replayed(scratch, "orders", "redis_psub", epoch, NULL, raw->received_wall_ms);
    else
        envelope_begin(scratch, "orders", "redis_psub", epoch, NULL, raw->received_wall_ms);
    envelope_payload(scratch, raw->json, raw->len);
    struct message *m = envelope_finish(scratch);
    m->fp = raw->fp;
    return m;
}

/* A raw record "p<fp>" with key_of(fp). */
static struct message *raw_msg(uint64_t fp)
{
    char p[32];
    int n = snprintf(p, sizeof p, "p%llu", (unsigned long long)fp);
    struct message *m = message_new(p, (size_t)n);
    m->raw = true;
    m->fp = fp;
    m->key = key_of(fp);
    m->received_wall_ms = clock_wall_ms();
    return m;
}

static void test_raw_records_keep_their_key(void **state)
{
    (void)state;
    struct baton_locker *l = baton_locker_local_create();
    struct sink out = {0};
    struct replay_config c = cfg();
    struct warm *w = warm_create("orders", &c, l, KEY);
    warm_set_render(w, render_raw, NULL);
    char tok[RANDOM_TOKEN_LEN];

    for (uint64_t fp = 61; fp <= 63; fp++) assert_int_equal(emit(w, raw_msg(fp), &out), 0);
    assert_int_equal(out.n, 0);
    uint64_t e = acquire(l, tok);
    assert_int_equal(promote(w, e, &out), 0); /* no mark: the whole ring */
    assert_int_equal(out.n, 3);
    /* live: a raw record emitted just before the promotion is rendered now */
    assert_int_equal(emit(w, raw_msg(64), &out), 0);
    assert_int_equal(out.n, 4);
    for (size_t i = 0; i < 4; i++) {
        assert_false(out.m[i]->raw);
        assert_true(has_payload(out.m[i], 61 + i));
        assert_int_equal(out.m[i]->epoch, e);
        assert_int_equal(out.m[i]->key, key_of(61 + i));
    }
    /* three channels: three keys */
    assert_int_not_equal(out.m[0]->key, out.m[1]->key);
    assert_int_not_equal(out.m[1]->key, out.m[2]->key);
    assert_int_equal(out.m[0]->key, out.m[3]->key);
    sink_free(&out);
    warm_destroy(w);
    baton_locker_destroy(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_promote_on_mark),
        cmocka_unit_test(test_mark_skips_unsettled),
        cmocka_unit_test(test_unaligned_and_partial),
        cmocka_unit_test(test_promotion_hand_off_keeps_order),
        cmocka_unit_test(test_raw_records_keep_their_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
