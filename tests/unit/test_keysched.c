/* Unit tests: the key scheduler of concurrent delivery (src/keysched.h,
 * issue 36): pick per key in receive order, settle a finished prefix only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/message.h"
#include "src/keysched.h"

/* ---- helpers ---- */

#define KA 0x1001u
#define KB 0x2002u
#define KC 0x3003u
#define KD 0x4004u

static struct message *mk(uint64_t seq, uint64_t key, uint64_t epoch)
{
    struct message *m = message_new("{}", 2);
    m->seq = seq;
    m->key = key;
    m->epoch = epoch;
    return m;
}

/* Pushes n messages with keys[i] (epoch 1 unless epochs given), seq = i. */
static void push_all(struct keysched *ks, struct message **out, const uint64_t *keys,
                     const uint64_t *epochs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        out[i] = mk(i, keys[i], epochs ? epochs[i] : 1);
        keysched_push(ks, out[i]);
    }
}

/* Picks up to max and checks the result is exactly want[0..nwant) (by
 * pointer, in order). Returns the count; slots filled for the caller. */
static size_t pick_expect(struct keysched *ks, size_t max, uint32_t *slots,
                          struct message *const *want, size_t nwant)
{
    struct message *got[64];
    uint32_t sl[64];
    assert_true(max <= 64);
    size_t n = keysched_pick(ks, got, sl, max);
    assert_int_equal(n, nwant);
    for (size_t i = 0; i < n; i++) {
        assert_ptr_equal(got[i], want[i]);
        if (slots) slots[i] = sl[i];
    }
    return n;
}

static size_t pick1(struct keysched *ks, size_t max, uint32_t *slot, struct message *want)
{
    return pick_expect(ks, max, slot, &want, want ? 1 : 0);
}

/* Finishes what still waits (the caller has finished its picked ones),
 * settles everything, checks it comes out as all[0..n) (receive order) and
 * frees the messages. */
static void drain_check_order(struct keysched *ks, struct message **all, size_t n)
{
    keysched_finish_waiting(ks, MSG_DELIVERED);
    size_t got = 0;
    struct message *m[16];
    enum msg_outcome o[16];
    size_t k;
    while ((k = keysched_settle(ks, m, o, 16)) > 0) {
        for (size_t i = 0; i < k; i++) {
            assert_true(got < n);
            assert_ptr_equal(m[i], all[got]);
            message_finish(m[i], MSG_DELIVERED);
            got++;
        }
    }
    assert_int_equal(got, n);
    assert_int_equal(keysched_held(ks), 0);
    assert_int_equal(keysched_waiting(ks), 0);
}

/* ---- 1. head of line per key ---- */

static void test_head_of_line_per_key(void **state)
{
    (void)state;
    struct keysched *ks = keysched_create(8, true);
    const uint64_t keys[] = {KA, KA, KB, KA, KC};
    struct message *m[5];
    push_all(ks, m, keys, NULL, 5);
    assert_int_equal(keysched_waiting(ks), 5);
    assert_int_equal(keysched_held(ks), 5);
    assert_int_equal(keysched_room(ks), 3);

    uint32_t hA1, hB, hC, hA2, hA3;
    pick1(ks, 1, &hA1, m[0]);
    pick1(ks, 1, &hB, m[2]); /* A2 waits behind A1: B goes */
    pick1(ks, 1, &hC, m[4]);
    pick1(ks, 1, NULL, NULL); /* A in flight: A2 and A3 wait */
    pick1(ks, 4, NULL, NULL); /* a bigger request changes nothing */
    assert_int_equal(keysched_waiting(ks), 2);

    keysched_finish(ks, &hB, 1, MSG_DELIVERED);
    pick1(ks, 4, NULL, NULL); /* B's finish frees no A */
    keysched_finish(ks, &hA1, 1, MSG_DELIVERED);
    pick1(ks, 1, &hA2, m[1]); /* A2 before A3 */
    pick1(ks, 1, NULL, NULL);
    keysched_finish(ks, &hA2, 1, MSG_DELIVERED);
    pick1(ks, 4, &hA3, m[3]);
    pick1(ks, 4, NULL, NULL);
    assert_int_equal(keysched_waiting(ks), 0);
    keysched_finish(ks, &hA3, 1, MSG_DELIVERED);
    keysched_finish(ks, &hC, 1, MSG_DELIVERED);
    drain_check_order(ks, m, 5);
    keysched_destroy(ks);
}

/* ---- 2. one key in one request; one term per request ---- */

static void test_same_key_rides_one_request(void **state)
{
    (void)state;
    struct keysched *ks = keysched_create(8, true);
    const uint64_t keys[] = {KA, KA, KB};
    struct message *m[3];
    push_all(ks, m, keys, NULL, 3);
    uint32_t h[4];
    size_t n = pick_expect(ks, 4, h, m, 3); /* A1, A2, B in receive order */
    pick1(ks, 4, NULL, NULL);
    keysched_finish(ks, h, n, MSG_DELIVERED);
    drain_check_order(ks, m, 3);
    keysched_destroy(ks);
}

static void test_epoch_skip_keeps_other_keys(void **state)
{
    (void)state;
    /* A1(e1), B(e2), A3(e1): B is skipped for its term, A3 may follow A1 in
     * the same body (B has another key). */
    struct keysched *ks = keysched_create(8, true);
    const uint64_t keys[] = {KA, KB, KA};
    const uint64_t ep[] = {1, 2, 1};
    struct message *m[3];
    push_all(ks, m, keys, ep, 3);
    uint32_t h[4], hb;
    struct message *want[] = {m[0], m[2]};
    size_t n = pick_expect(ks, 4, h, want, 2);
    pick1(ks, 4, &hb, m[1]); /* then B alone, its own term */
    keysched_finish(ks, &hb, 1, MSG_DELIVERED);
    keysched_finish(ks, h, n, MSG_DELIVERED);
    drain_check_order(ks, m, 3);
    keysched_destroy(ks);
}

static void test_epoch_skip_blocks_its_key(void **state)
{
    (void)state;
    /* X(e1), A(e2), A(e1), Y(e1): the request starts in term 1 at X; A(e2)
     * is skipped for its term, so the later A(e1) must not overtake it;
     * Y (another key) still rides along. */
    struct keysched *ks = keysched_create(8, true);
    const uint64_t keys[] = {KC, KA, KA, KD};
    const uint64_t ep[] = {1, 2, 1, 1};
    struct message *m[4];
    push_all(ks, m, keys, ep, 4);
    uint32_t h1[4], h2, h3;
    struct message *want[] = {m[0], m[3]};
    size_t n = pick_expect(ks, 4, h1, want, 2);
    /* next request: A(e2) starts term 2; A(e1) is of another term and must
     * wait for A(e2) anyway */
    pick1(ks, 4, &h2, m[1]);
    pick1(ks, 4, NULL, NULL);
    keysched_finish(ks, &h2, 1, MSG_DELIVERED);
    pick1(ks, 4, &h3, m[2]);
    keysched_finish(ks, &h3, 1, MSG_DELIVERED);
    keysched_finish(ks, h1, n, MSG_DELIVERED);
    drain_check_order(ks, m, 4);
    keysched_destroy(ks);
}

static void test_key_in_same_request_other_term(void **state)
{
    (void)state;
    /* A(e1), A(e2), A(e1), B(e1): A1 taken, A2 skipped (term) -> A3 must not
     * follow A1 although A is "in this request"; B goes. */
    struct keysched *ks = keysched_create(8, true);
    const uint64_t keys[] = {KA, KA, KA, KB};
    const uint64_t ep[] = {1, 2, 1, 1};
    struct message *m[4];
    push_all(ks, m, keys, ep, 4);
    uint32_t h1[4], h2, h3;
    struct message *want[] = {m[0], m[3]};
    size_t n = pick_expect(ks, 4, h1, want, 2);
    pick1(ks, 4, NULL, NULL); /* A1 in flight: A2 waits */
    keysched_finish(ks, h1, n, MSG_DELIVERED);
    pick1(ks, 4, &h2, m[1]); /* A2 alone (A3 another term) */
    keysched_finish(ks, &h2, 1, MSG_DELIVERED);
    pick1(ks, 4, &h3, m[2]);
    keysched_finish(ks, &h3, 1, MSG_DELIVERED);
    drain_check_order(ks, m, 4);
    keysched_destroy(ks);
}

/* ---- 3. fairness across keys ---- */

static void test_fair_across_keys(void **state)
{
    (void)state;
    enum { HOT = 1000, COLD = 10, N = HOT + COLD };
    struct keysched *ks = keysched_create(N, true);
    struct message **m = calloc(N, sizeof *m);
    assert_non_null(m);
    for (size_t i = 0; i < N; i++) {
        m[i] = mk(i, i < HOT ? 0xB0B0u : 0x100u + (i - HOT), 1);
        keysched_push(ks, m[i]);
    }
    assert_int_equal(keysched_room(ks), 0);
    uint32_t h[COLD + 1];
    pick1(ks, 1, &h[0], m[0]);
    for (size_t k = 0; k < COLD; k++) pick1(ks, 1, &h[1 + k], m[HOT + k]);
    /* 11 requests in flight: HOT holds one, every cold key got its turn
     * while HOT's first is still in flight */
    pick1(ks, 1, NULL, NULL);
    pick1(ks, 32, NULL, NULL);
    assert_int_equal(keysched_waiting(ks), HOT - 1);

    keysched_finish(ks, &h[0], 1, MSG_DELIVERED);
    uint32_t h2;
    pick1(ks, 1, &h2, m[1]); /* HOT's next, in order */
    pick1(ks, 1, NULL, NULL);
    keysched_finish(ks, &h2, 1, MSG_DELIVERED);
    keysched_finish(ks, &h[1], COLD, MSG_DELIVERED);
    drain_check_order(ks, m, N);
    free(m);
    keysched_destroy(ks);
}

/* ---- 4. settle is a prefix only ---- */

static void test_settle_prefix_only(void **state)
{
    (void)state;
    struct keysched *ks = keysched_create(4, true);
    const uint64_t keys[] = {KA, KB, KC, KD};
    struct message *m[4];
    push_all(ks, m, keys, NULL, 4);
    uint32_t h[4];
    for (size_t i = 0; i < 4; i++) pick1(ks, 1, &h[i], m[i]);
    struct message *out[8];
    enum msg_outcome oc[8];

    assert_int_equal(keysched_settle(ks, out, oc, 8), 0); /* nothing finished */
    keysched_finish(ks, &h[2], 1, MSG_DELIVERED);
    assert_int_equal(keysched_settle(ks, out, oc, 8), 0); /* 3rd ahead of 1st */
    keysched_finish(ks, &h[0], 1, MSG_DROPPED_SINK_FAILED);
    assert_int_equal(keysched_settle(ks, out, oc, 8), 1);
    assert_ptr_equal(out[0], m[0]);
    assert_int_equal(oc[0], MSG_DROPPED_SINK_FAILED);
    message_finish(out[0], MSG_DELIVERED);
    assert_int_equal(keysched_held(ks), 3);
    assert_int_equal(keysched_room(ks), 1);
    assert_int_equal(keysched_settle(ks, out, oc, 8), 0); /* 2nd blocks */

    /* a finish twice is a no-op and keeps the first outcome */
    keysched_finish(ks, &h[2], 1, MSG_DROPPED_SHUTDOWN);
    keysched_finish(ks, &h[1], 1, MSG_DROPPED_NOT_LEADER);
    assert_int_equal(keysched_settle(ks, out, oc, 1), 1); /* max respected */
    assert_ptr_equal(out[0], m[1]);
    assert_int_equal(oc[0], MSG_DROPPED_NOT_LEADER);
    message_finish(out[0], MSG_DELIVERED);
    assert_int_equal(keysched_settle(ks, out, oc, 8), 1);
    assert_ptr_equal(out[0], m[2]);
    assert_int_equal(oc[0], MSG_DELIVERED);
    message_finish(out[0], MSG_DELIVERED);
    assert_int_equal(keysched_settle(ks, out, oc, 8), 0); /* 4th in flight */

    /* room again: a push lands in a freed slot while the 4th is held */
    struct message *m5 = mk(5, KA, 1);
    keysched_push(ks, m5);
    uint32_t h5;
    pick1(ks, 1, &h5, m5);
    keysched_finish(ks, &h5, 1, MSG_DROPPED_TERM_ENDED);
    assert_int_equal(keysched_settle(ks, out, oc, 8), 0);
    keysched_finish(ks, &h[3], 1, MSG_DELIVERED);
    assert_int_equal(keysched_settle(ks, out, oc, 8), 2);
    assert_ptr_equal(out[0], m[3]);
    assert_int_equal(oc[0], MSG_DELIVERED);
    assert_ptr_equal(out[1], m5);
    assert_int_equal(oc[1], MSG_DROPPED_TERM_ENDED);
    message_finish(out[0], MSG_DELIVERED);
    message_finish(out[1], MSG_DELIVERED);
    assert_int_equal(keysched_held(ks), 0);
    assert_int_equal(keysched_room(ks), 4);
    keysched_destroy(ks);
}

/* ---- 5. unpick restores ---- */

static void test_unpick_restores(void **state)
{
    (void)state;
    struct keysched *ks = keysched_create(8, true);
    const uint64_t keys[] = {KA, KA, KB, KC};
    struct message *m[4];
    push_all(ks, m, keys, NULL, 4);
    uint32_t h[4];
    size_t n = pick_expect(ks, 3, h, m, 3);
    assert_int_equal(keysched_waiting(ks), 1);
    keysched_unpick(ks, h, n);
    assert_int_equal(keysched_waiting(ks), 4);
    /* the same messages in the same order: A and B are free again */
    n = pick_expect(ks, 3, h, m, 3);
    /* unpick in another order, one at a time: the same again */
    for (size_t i = n; i-- > 0;) keysched_unpick(ks, &h[i], 1);
    n = pick_expect(ks, 4, h, m, 4);
    /* an unpick of a finished message is a no-op */
    keysched_finish(ks, &h[3], 1, MSG_DELIVERED);
    keysched_unpick(ks, &h[3], 1);
    assert_int_equal(keysched_waiting(ks), 0);
    keysched_finish(ks, h, 3, MSG_DELIVERED);
    drain_check_order(ks, m, 4);
    keysched_destroy(ks);
}

static void test_unpick_after_wrap(void **state)
{
    (void)state;
    /* window 4 whose head has moved on: handles are positions modulo 4, an
     * unpicked message must be found again at its old place */
    struct keysched *ks = keysched_create(4, true);
    const uint64_t k0[] = {KA, KB, KC};
    struct message *m0[3];
    push_all(ks, m0, k0, NULL, 3);
    uint32_t h[4];
    size_t n = pick_expect(ks, 3, h, m0, 3);
    keysched_finish(ks, h, n, MSG_DELIVERED);
    drain_check_order(ks, m0, 3);

    const uint64_t k1[] = {KA, KB, KC, KD};
    struct message *m[4];
    push_all(ks, m, k1, NULL, 4); /* positions 3..6: slots 3, 0, 1, 2 */
    assert_int_equal(keysched_room(ks), 0);
    uint32_t h3, hr[3];
    pick1(ks, 1, &h3, m[0]);
    pick_expect(ks, 3, hr, &m[1], 3);
    pick1(ks, 4, NULL, NULL); /* nothing waits */
    keysched_unpick(ks, hr, 2); /* m[1], m[2] wait again */
    pick_expect(ks, 4, hr, &m[1], 2);
    keysched_unpick(ks, &h3, 1); /* the oldest, in the slot before the wrap */
    pick1(ks, 4, &h3, m[0]);
    keysched_finish(ks, &h3, 1, MSG_DELIVERED);
    keysched_finish(ks, hr, 3, MSG_DELIVERED);
    drain_check_order(ks, m, 4);
    keysched_destroy(ks);
}

/* ---- 6. finish_waiting ---- */

static void test_finish_waiting(void **state)
{
    (void)state;
    struct keysched *ks = keysched_create(8, true);
    const uint64_t keys[] = {KA, KB, KC, KA, KD};
    struct message *m[5];
    push_all(ks, m, keys, NULL, 5);
    uint32_t h[2];
    pick_expect(ks, 2, h, m, 2);
    keysched_finish_waiting(ks, MSG_DROPPED_TERM_ENDED);
    assert_int_equal(keysched_waiting(ks), 0);
    assert_int_equal(keysched_held(ks), 5);
    pick1(ks, 4, NULL, NULL);
    struct message *out[8];
    enum msg_outcome oc[8];
    assert_int_equal(keysched_settle(ks, out, oc, 8), 0); /* m0 in flight */
    keysched_finish(ks, &h[0], 1, MSG_DELIVERED);
    assert_int_equal(keysched_settle(ks, out, oc, 8), 1);
    assert_ptr_equal(out[0], m[0]);
    assert_int_equal(oc[0], MSG_DELIVERED);
    message_finish(out[0], MSG_DELIVERED);
    assert_int_equal(keysched_settle(ks, out, oc, 8), 0); /* m1 in flight */
    keysched_finish(ks, &h[1], 1, MSG_DROPPED_SINK_FAILED); /* untouched until now */
    assert_int_equal(keysched_settle(ks, out, oc, 8), 4);
    const enum msg_outcome want[] = {MSG_DROPPED_SINK_FAILED, MSG_DROPPED_TERM_ENDED,
                                     MSG_DROPPED_TERM_ENDED, MSG_DROPPED_TERM_ENDED};
    for (size_t i = 0; i < 4; i++) {
        assert_ptr_equal(out[i], m[1 + i]);
        assert_int_equal(oc[i], want[i]);
        message_finish(out[i], MSG_DELIVERED);
    }
    /* A was freed by the finish of A1: a new A goes at once */
    struct message *a = mk(9, KA, 2);
    keysched_push(ks, a);
    uint32_t ha;
    pick1(ks, 1, &ha, a);
    keysched_finish(ks, &ha, 1, MSG_DELIVERED);
    drain_check_order(ks, &a, 1);
    keysched_destroy(ks);
}

/* ---- 7. ordering "none" ---- */

static void test_ordering_none(void **state)
{
    (void)state;
    struct keysched *ks = keysched_create(8, false);
    const uint64_t keys[] = {KA, KA, KA, KA, KA};
    const uint64_t ep[] = {1, 1, 1, 2, 1};
    struct message *m[5];
    push_all(ks, m, keys, ep, 5);
    uint32_t h[5];
    pick1(ks, 1, &h[0], m[0]);
    pick1(ks, 1, &h[1], m[1]); /* same key in parallel */
    /* one term per request still: m3 (e2) is skipped, m4 (e1) is not held
     * back by it */
    struct message *want[] = {m[2], m[4]};
    pick_expect(ks, 4, &h[2], want, 2);
    pick1(ks, 4, &h[4], m[3]);
    assert_int_equal(keysched_waiting(ks), 0);
    keysched_finish(ks, h, 5, MSG_DELIVERED);
    drain_check_order(ks, m, 5);
    keysched_destroy(ks);
}

/* ---- 8. keyless messages ---- */

static void test_keyless_is_one_key(void **state)
{
    (void)state;
    /* key 0: the endpoint's one key, ordered among keyless messages, and
     * not any keyed message's key */
    struct keysched *ks = keysched_create(8, true);
    const uint64_t keys[] = {0, 0, KA, 0, KA};
    struct message *m[5];
    push_all(ks, m, keys, NULL, 5);
    uint32_t h0, hA, hA2, h[4];
    pick1(ks, 1, &h0, m[0]);
    pick1(ks, 1, &hA, m[2]);  /* keyed A goes beside the keyless 1st */
    pick1(ks, 4, NULL, NULL); /* keyless 2nd and 3rd wait for the 1st */
    keysched_finish(ks, &h0, 1, MSG_DELIVERED);
    /* keyless 2nd and 3rd ride one request; A2 still waits for A1 */
    struct message *want[] = {m[1], m[3]};
    size_t n = pick_expect(ks, 4, h, want, 2);
    pick1(ks, 4, NULL, NULL);
    keysched_finish(ks, &hA, 1, MSG_DELIVERED);
    pick1(ks, 4, &hA2, m[4]);
    keysched_finish(ks, &hA2, 1, MSG_DELIVERED);
    keysched_finish(ks, h, n, MSG_DELIVERED);
    drain_check_order(ks, m, 5);
    keysched_destroy(ks);
}

/* ---- 9. a reference model, random operations ---- */

static uint64_t rng_state;
static uint64_t rnd(void)
{
    /* splitmix64: deterministic for a seed */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static size_t rnd_below(size_t n)
{
    return (size_t)(rnd() % n);
}

enum { R_WAIT = 1, R_FLIGHT, R_DONE, R_SETTLED };

struct rec {
    struct message *m;
    int kidx;
    uint64_t epoch;
    int state;
    int req; /* the request that holds it, in flight */
    enum msg_outcome outcome;
};

struct req {
    uint32_t slots[16];
    size_t seq[16];
    size_t n;
    bool picked_whole; /* nothing of it finished yet: may be unpicked */
};

struct model {
    struct keysched *ks;
    size_t window;
    bool by_key;
    const uint64_t *keys;
    size_t nkeys;
    size_t total;
    struct rec *r;
    size_t head, tail; /* receive positions: settled below head */
    size_t waiting;
    struct req *reqs; /* live requests, compacted */
    size_t nreqs;
    size_t *inflight; /* per key index: messages in flight */
    int *owner;       /* per key index: the request holding it, or -1 */
    bool *skipped, *taken;
    size_t settled;
    uint64_t epoch;
    size_t picks, steps;
};

static void model_init(struct model *md, size_t window, bool by_key, const uint64_t *keys,
                       size_t nkeys, size_t total)
{
    memset(md, 0, sizeof *md);
    md->ks = keysched_create(window, by_key);
    md->window = window;
    md->by_key = by_key;
    md->keys = keys;
    md->nkeys = nkeys;
    md->total = total;
    md->r = calloc(total, sizeof *md->r);
    md->reqs = calloc(window, sizeof *md->reqs);
    md->inflight = calloc(nkeys, sizeof *md->inflight);
    md->owner = malloc(nkeys * sizeof *md->owner);
    md->skipped = calloc(nkeys, sizeof *md->skipped);
    md->taken = calloc(nkeys, sizeof *md->taken);
    assert_true(md->r && md->reqs && md->inflight && md->owner && md->skipped && md->taken);
    for (size_t k = 0; k < nkeys; k++) md->owner[k] = -1;
    md->epoch = 1;
}

static void model_free(struct model *md)
{
    keysched_destroy(md->ks);
    free(md->r);
    free(md->reqs);
    free(md->inflight);
    free(md->owner);
    free(md->skipped);
    free(md->taken);
}

static void model_check_counters(struct model *md)
{
    assert_int_equal(keysched_held(md->ks), md->tail - md->head);
    assert_int_equal(keysched_room(md->ks), md->window - (md->tail - md->head));
    assert_int_equal(keysched_waiting(md->ks), md->waiting);
}

static void model_push(struct model *md)
{
    if (md->tail == md->total || md->tail - md->head == md->window) return;
    if (rnd_below(64) == 0) md->epoch++; /* a new term now and then */
    struct rec *r = &md->r[md->tail];
    r->kidx = (int)rnd_below(md->nkeys);
    /* a few stragglers of the previous term */
    r->epoch = rnd_below(16) == 0 && md->epoch > 1 ? md->epoch - 1 : md->epoch;
    r->m = mk(md->tail, md->keys[r->kidx], r->epoch);
    r->state = R_WAIT;
    r->req = -1;
    keysched_push(md->ks, r->m);
    md->tail++;
    md->waiting++;
}

static void model_pick(struct model *md)
{
    size_t max = 1 + rnd_below(md->by_key ? 8 : 4);
    /* the reference: the rules of keysched.h, spelled out */
    size_t want[16], n = 0;
    uint64_t ep = 0;
    memset(md->skipped, 0, md->nkeys * sizeof *md->skipped);
    memset(md->taken, 0, md->nkeys * sizeof *md->taken);
    for (size_t s = md->head; s < md->tail && n < max; s++) {
        struct rec *r = &md->r[s];
        if (r->state != R_WAIT) continue;
        int k = r->kidx;
        if (md->by_key) {
            if (md->skipped[k]) continue; /* an earlier one of its key waits */
            if (md->inflight[k] > 0 && !md->taken[k]) {
                md->skipped[k] = true; /* in flight in another request */
                continue;
            }
        }
        if (n > 0 && r->epoch != ep) {
            md->skipped[k] = true; /* another term */
            continue;
        }
        if (n == 0) ep = r->epoch;
        md->taken[k] = true;
        want[n++] = s;
    }

    struct message *got[16];
    uint32_t sl[16];
    size_t g = keysched_pick(md->ks, got, sl, max);
    md->picks++;
    assert_int_equal(g, n);
    if (n == 0) return;
    int id = (int)md->nreqs;
    struct req *q = &md->reqs[md->nreqs++];
    q->n = n;
    q->picked_whole = true;
    for (size_t i = 0; i < n; i++) {
        struct rec *r = &md->r[want[i]];
        assert_ptr_equal(got[i], r->m);
        assert_int_equal(got[i]->seq, want[i]);
        assert_int_equal(got[i]->epoch, ep); /* one term per request */
        int k = r->kidx;
        if (md->by_key) {
            /* (a) never two requests in flight with one key */
            assert_true(md->owner[k] == -1 || md->owner[k] == id);
            md->owner[k] = id;
            /* (b) per key in receive order: nothing earlier of it waits */
            for (size_t s = md->head; s < want[i]; s++)
                if (md->r[s].kidx == k) assert_int_not_equal(md->r[s].state, R_WAIT);
        }
        md->inflight[k]++;
        r->state = R_FLIGHT;
        r->req = id;
        q->slots[i] = sl[i];
        q->seq[i] = want[i];
    }
    md->waiting -= n;
}

/* Removes request i (empty now); the last moves into its place. */
static void model_drop_req(struct model *md, size_t i)
{
    size_t last = md->nreqs - 1;
    if (i != last) {
        md->reqs[i] = md->reqs[last];
        for (size_t j = 0; j < md->reqs[i].n; j++) md->r[md->reqs[i].seq[j]].req = (int)i;
        for (size_t k = 0; k < md->nkeys; k++)
            if (md->owner[k] == (int)last) md->owner[k] = (int)i;
    }
    md->nreqs--;
}

static void model_release_key(struct model *md, int k)
{
    assert_true(md->inflight[k] > 0);
    if (--md->inflight[k] == 0) md->owner[k] = -1;
}

static void model_finish(struct model *md)
{
    if (md->nreqs == 0) return;
    size_t i = rnd_below(md->nreqs);
    struct req *q = &md->reqs[i];
    /* usually the whole request; sometimes a part of it (any of its slots) */
    size_t take = rnd_below(4) == 0 ? 1 + rnd_below(q->n) : q->n;
    enum msg_outcome o = (enum msg_outcome)rnd_below(MSG_DROPPED_TERM_ENDED + 1);
    size_t at = rnd_below(q->n - take + 1);
    keysched_finish(md->ks, &q->slots[at], take, o);
    for (size_t j = at; j < at + take; j++) {
        struct rec *r = &md->r[q->seq[j]];
        assert_int_equal(r->state, R_FLIGHT);
        r->state = R_DONE;
        r->outcome = o;
        r->req = -1;
        model_release_key(md, r->kidx);
    }
    memmove(&q->slots[at], &q->slots[at + take], (q->n - at - take) * sizeof q->slots[0]);
    memmove(&q->seq[at], &q->seq[at + take], (q->n - at - take) * sizeof q->seq[0]);
    q->n -= take;
    q->picked_whole = false;
    if (q->n == 0) model_drop_req(md, i);
}

static void model_unpick(struct model *md)
{
    if (md->nreqs == 0) return;
    size_t i = rnd_below(md->nreqs);
    struct req *q = &md->reqs[i];
    if (!q->picked_whole) return;
    keysched_unpick(md->ks, q->slots, q->n);
    for (size_t j = 0; j < q->n; j++) {
        struct rec *r = &md->r[q->seq[j]];
        r->state = R_WAIT;
        r->req = -1;
        model_release_key(md, r->kidx);
    }
    md->waiting += q->n;
    q->n = 0;
    model_drop_req(md, i);
}

static void model_finish_waiting(struct model *md)
{
    keysched_finish_waiting(md->ks, MSG_DROPPED_TERM_ENDED);
    for (size_t s = md->head; s < md->tail; s++) {
        if (md->r[s].state != R_WAIT) continue;
        md->r[s].state = R_DONE;
        md->r[s].outcome = MSG_DROPPED_TERM_ENDED;
    }
    md->waiting = 0;
}

static void model_settle(struct model *md)
{
    size_t max = 1 + rnd_below(8);
    struct message *out[8];
    enum msg_outcome oc[8];
    size_t n = keysched_settle(md->ks, out, oc, max);
    size_t want = 0;
    while (want < max && md->head + want < md->tail && md->r[md->head + want].state == R_DONE)
        want++;
    assert_int_equal(n, want);
    for (size_t i = 0; i < n; i++) {
        struct rec *r = &md->r[md->head];
        /* (c) exactly receive order, (e) once */
        assert_ptr_equal(out[i], r->m);
        assert_int_equal(out[i]->seq, md->head);
        assert_int_equal(oc[i], r->outcome);
        r->state = R_SETTLED;
        r->m = NULL;
        message_finish(out[i], MSG_DELIVERED);
        md->head++;
        md->settled++;
    }
}

static void model_run(struct model *md)
{
    while (md->settled < md->total) {
        md->steps++;
        assert_true(md->steps < 40 * md->total + 100000); /* progress */
        size_t op = rnd_below(1000);
        if (op < 360) model_push(md);
        else if (op < 610) model_pick(md);
        else if (op < 860) model_finish(md);
        else if (op < 960) model_settle(md);
        else if (op < 998) model_unpick(md);
        else model_finish_waiting(md);
        /* (d) counters */
        model_check_counters(md);
    }
    /* (e) every message settled exactly once, nothing left */
    assert_int_equal(md->head, md->total);
    assert_int_equal(md->nreqs, 0);
    for (size_t s = 0; s < md->total; s++) assert_int_equal(md->r[s].state, R_SETTLED);
    assert_int_equal(keysched_room(md->ks), md->window);
    assert_true(md->picks > md->total / 8);
}

/* key_home of keysched.c: (key ^ (key >> 29)) & mask, the table twice the
 * window at least (16 at least). A key with the given home whose high bits
 * are not zero (so the fold matters): hi << 29 | low, low chosen so that
 * (low ^ hi) & mask = home. */
static uint64_t colliding_key(size_t home, uint64_t hi, size_t mask)
{
    uint64_t low = ((uint64_t)home ^ hi) & mask;
    uint64_t k = (hi << 29) | low;
    assert_int_equal((size_t)(k ^ (k >> 29)) & mask, home);
    return k;
}

static size_t table_mask(size_t window)
{
    size_t t = 16;
    while (t < 2 * window) t <<= 1;
    return t - 1;
}

static void test_model_small_window(void **state)
{
    (void)state;
    size_t mask = table_mask(8); /* 15 */
    /* runs at home 3 and at home 15 (wrapping to 0, 1: past home 0's key) */
    const uint64_t keys[] = {
        0, /* keyless */
        3, 3 + 16, 3 + 32, colliding_key(3, 5, mask),
        15, 15 + 16, colliding_key(15, 77, mask),
        16, 1, 2,
    };
    struct model md;
    rng_state = 36;
    model_init(&md, 8, true, keys, sizeof keys / sizeof keys[0], 10000);
    model_run(&md);
    model_free(&md);
}

static void test_model_small_window_few_keys(void **state)
{
    (void)state;
    const uint64_t keys[] = {KA, KB};
    struct model md;
    rng_state = 4242;
    model_init(&md, 8, true, keys, 2, 5000);
    model_run(&md);
    model_free(&md);
}

static void test_model_ordering_none(void **state)
{
    (void)state;
    const uint64_t keys[] = {KA, KB, 0};
    struct model md;
    rng_state = 7;
    model_init(&md, 8, false, keys, 3, 5000);
    model_run(&md);
    model_free(&md);
}

static void test_model_large_window_collisions(void **state)
{
    (void)state;
    enum { W = 1024, PER_HOME = 12 };
    size_t mask = table_mask(W); /* 2047 */
    const size_t homes[] = {mask, 0, 1, 700};
    uint64_t keys[1 + 4 * PER_HOME + 16];
    size_t nk = 0;
    keys[nk++] = 0;
    for (size_t h = 0; h < 4; h++)
        for (size_t j = 0; j < PER_HOME; j++)
            keys[nk++] = j % 2 ? colliding_key(homes[h], 1000 + 31 * j + h, mask)
                               : homes[h] + (mask + 1) * (j + 1);
    for (size_t j = 0; j < 16; j++) keys[nk++] = 0xABCDEF0123ULL * (j + 3); /* spread */
    struct model md;
    rng_state = 1024;
    model_init(&md, W, true, keys, nk, 20000);
    model_run(&md);
    model_free(&md);
}

/* The keys-in-flight table around its wrap: five keys whose homes are the
 * entry before the last, the last (two of them), 0 and 1, so their probe
 * runs cross the end of the table. For every order of taking them in (the table's layout) and
 * every order of finishing them (backward-shift deletions at the run's
 * start, middle and end, across the wrap), each key in flight must still be
 * found: its next message waits until exactly its own first is finished. */
static void next_perm(size_t *p, size_t n)
{
    size_t i = n - 1;
    while (i > 0 && p[i - 1] >= p[i]) i--;
    if (i == 0) { /* last: back to the first */
        for (size_t a = 0, b = n - 1; a < b; a++, b--) {
            size_t t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
        return;
    }
    size_t j = n - 1;
    while (p[j] <= p[i - 1]) j--;
    size_t t = p[i - 1];
    p[i - 1] = p[j];
    p[j] = t;
    for (size_t a = i, b = n - 1; a < b; a++, b--) {
        t = p[a];
        p[a] = p[b];
        p[b] = t;
    }
}

static void test_flight_table_wrapped_runs(void **state)
{
    (void)state;
    enum { NK = 5, W = 2 * NK };
    size_t mask = table_mask(W); /* 31 */
    const uint64_t keys[NK] = {
        colliding_key(mask - 1, 9, mask), /* home: the one before the last */
        mask, 2 * mask + 1,               /* home: the last */
        mask + 1,                         /* home 0 */
        1,                                /* home 1 */
    };
    size_t in[NK] = {0, 1, 2, 3, 4};
    size_t scenarios = 0;
    for (size_t a = 0; a < 120; a++, next_perm(in, NK)) {
        size_t fin[NK] = {0, 1, 2, 3, 4};
        for (size_t b = 0; b < 120; b++, next_perm(fin, NK)) {
            struct keysched *ks = keysched_create(W, true);
            struct message *first[NK], *second[NK], *all[W];
            uint32_t hf[NK], hs[NK];
            for (size_t i = 0; i < NK; i++) {
                first[in[i]] = all[i] = mk(i, keys[in[i]], 1);
                keysched_push(ks, first[in[i]]);
            }
            for (size_t i = 0; i < NK; i++) pick1(ks, 1, &hf[in[i]], first[in[i]]);
            for (size_t k = 0; k < NK; k++) {
                second[k] = all[NK + k] = mk(NK + k, keys[k], 1);
                keysched_push(ks, second[k]);
            }
            pick1(ks, W, NULL, NULL);
            for (size_t i = 0; i < NK; i++) {
                size_t k = fin[i];
                keysched_finish(ks, &hf[k], 1, MSG_DELIVERED);
                pick1(ks, W, &hs[k], second[k]);
                pick1(ks, W, NULL, NULL);
            }
            keysched_finish(ks, hs, NK, MSG_DELIVERED);
            /* every key left the table: all go at once again */
            struct message *third[NK];
            uint32_t ht[NK];
            for (size_t k = 0; k < NK; k++) third[k] = mk(W + k, keys[k], 1);
            struct message *out[W];
            enum msg_outcome oc[W];
            assert_int_equal(keysched_settle(ks, out, oc, W), W);
            for (size_t i = 0; i < W; i++) {
                assert_ptr_equal(out[i], all[i]);
                message_finish(out[i], MSG_DELIVERED);
            }
            for (size_t k = 0; k < NK; k++) keysched_push(ks, third[k]);
            pick_expect(ks, W, ht, third, NK);
            keysched_finish(ks, ht, NK, MSG_DELIVERED);
            drain_check_order(ks, third, NK);
            keysched_destroy(ks);
            scenarios++;
        }
    }
    assert_int_equal(scenarios, 120 * 120);
}

/* ---- 10. the pick generation wrap ----
 *
 * gen (uint32_t) counts picks; 4 billion picks are out of reach here, so
 * the test reaches into the scheduler: the struct's definition comes from
 * including keysched.c itself, its public functions renamed so this copy
 * does not clash with the library's (the library's functions run; the copy
 * only lends the layout). Then gen is set just below the wrap. What must
 * hold across it: a key in flight since before the wrap, stamped with a
 * generation the counter reaches again after it, still blocks its next
 * message. */
#define keysched_create wb_keysched_create
#define keysched_destroy wb_keysched_destroy
#define keysched_room wb_keysched_room
#define keysched_held wb_keysched_held
#define keysched_waiting wb_keysched_waiting
#define keysched_push wb_keysched_push
#define keysched_pick wb_keysched_pick
#define keysched_unpick wb_keysched_unpick
#define keysched_finish wb_keysched_finish
#define keysched_finish_waiting wb_keysched_finish_waiting
#define keysched_settle wb_keysched_settle
#include "src/keysched.c"
#undef keysched_create
#undef keysched_destroy
#undef keysched_room
#undef keysched_held
#undef keysched_waiting
#undef keysched_push
#undef keysched_pick
#undef keysched_unpick
#undef keysched_finish
#undef keysched_finish_waiting
#undef keysched_settle

static void test_generation_wrap(void **state)
{
    (void)state;
    struct keysched *ks = keysched_create(16, true);
    const uint64_t keys[] = {KA, KA, KB, KB, KC};
    struct message *m[5];
    push_all(ks, m, keys, NULL, 5);
    assert_int_equal(ks->gen, 1);
    uint32_t hA1, hB1, hC;
    pick1(ks, 1, &hA1, m[0]); /* generation 2: A in flight, stamped 2 */
    assert_int_equal(ks->gen, 2);
    ks->gen = UINT32_MAX;     /* ~4 billion picks later */
    pick1(ks, 1, &hB1, m[2]); /* wraps to generation 1 */
    assert_int_equal(ks->gen, 1);
    /* generation 2 again: A2 must still wait for A1 (in flight since the
     * old generation 2), B2 for B1; C goes */
    pick1(ks, 4, &hC, m[4]);
    assert_int_equal(ks->gen, 2);
    pick1(ks, 4, NULL, NULL);
    keysched_finish(ks, &hA1, 1, MSG_DELIVERED);
    keysched_finish(ks, &hB1, 1, MSG_DELIVERED);
    keysched_finish(ks, &hC, 1, MSG_DELIVERED);
    uint32_t h[4];
    struct message *want[] = {m[1], m[3]};
    size_t n = pick_expect(ks, 4, h, want, 2);
    keysched_finish(ks, h, n, MSG_DELIVERED);
    drain_check_order(ks, m, 5);
    keysched_destroy(ks);
}

static void test_generation_wrap_forgets_passed_over(void **state)
{
    (void)state;
    /* A key a pick passed over before the wrap, stamped with a generation
     * reached again after it, must not hold its next message back then. */
    struct keysched *ks = keysched_create(16, true);
    const uint64_t keys[] = {KA, KA};
    struct message *m[4];
    push_all(ks, m, keys, NULL, 2);
    uint32_t hA1, hA2, hB;
    pick1(ks, 1, &hA1, m[0]); /* generation 2 */
    pick1(ks, 1, NULL, NULL); /* generation 3: passes A2 over (A1 in flight) */
    assert_int_equal(ks->gen, 3);
    keysched_finish(ks, &hA1, 1, MSG_DELIVERED);
    ks->gen = UINT32_MAX;
    pick1(ks, 1, &hA2, m[1]); /* generation 1 */
    m[2] = mk(2, KB, 1);
    m[3] = mk(3, KC, 1);
    keysched_push(ks, m[2]);
    keysched_push(ks, m[3]);
    pick1(ks, 1, &hB, m[2]); /* generation 2 */
    keysched_unpick(ks, &hA2, 1);
    pick1(ks, 1, &hA2, m[1]); /* generation 3: A2 first, C after */
    assert_int_equal(ks->gen, 3);
    keysched_finish(ks, &hA2, 1, MSG_DELIVERED);
    keysched_finish(ks, &hB, 1, MSG_DELIVERED);
    drain_check_order(ks, m, 4);
    keysched_destroy(ks);
}

static void test_model_across_generation_wrap(void **state)
{
    (void)state;
    const uint64_t keys[] = {0, 3, 19, 35, 15, 31, KA};
    struct model md;
    rng_state = 99;
    model_init(&md, 8, true, keys, sizeof keys / sizeof keys[0], 3000);
    md.ks->gen = UINT32_MAX - 300; /* wraps about a third of the way in */
    model_run(&md);
    assert_true(md.ks->gen < 10000);
    model_free(&md);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_of_line_per_key),
        cmocka_unit_test(test_same_key_rides_one_request),
        cmocka_unit_test(test_epoch_skip_keeps_other_keys),
        cmocka_unit_test(test_epoch_skip_blocks_its_key),
        cmocka_unit_test(test_key_in_same_request_other_term),
        cmocka_unit_test(test_fair_across_keys),
        cmocka_unit_test(test_settle_prefix_only),
        cmocka_unit_test(test_unpick_restores),
        cmocka_unit_test(test_unpick_after_wrap),
        cmocka_unit_test(test_finish_waiting),
        cmocka_unit_test(test_ordering_none),
        cmocka_unit_test(test_keyless_is_one_key),
        cmocka_unit_test(test_model_small_window),
        cmocka_unit_test(test_model_small_window_few_keys),
        cmocka_unit_test(test_model_ordering_none),
        cmocka_unit_test(test_model_large_window_collisions),
        cmocka_unit_test(test_flight_table_wrapped_runs),
        cmocka_unit_test(test_generation_wrap),
        cmocka_unit_test(test_generation_wrap_forgets_passed_over),
        cmocka_unit_test(test_model_across_generation_wrap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
