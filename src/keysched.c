/* The key scheduler (see src/keysched.h).
 *
 * The window is a ring of slots addressed by absolute positions (head ..
 * tail); a slot's handle is its position modulo the capacity, stable until
 * it is settled. Keys in flight are counted in an open-addressing table
 * (linear probing, backward-shift deletion): at most one entry per slot, so
 * a table of twice the window never fills. The keys a pick passed over are
 * kept in a second table stamped with the pick's generation, so starting a
 * pick clears it in O(1). */
#include "src/keysched.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"

enum slot_state { SLOT_FREE = 0, SLOT_WAIT, SLOT_FLIGHT, SLOT_DONE };

struct slot {
    struct message *m;
    uint8_t state;   /* enum slot_state */
    uint8_t outcome; /* enum msg_outcome, once SLOT_DONE */
};

struct key_count {
    uint64_t key;  /* 0 = empty */
    uint32_t count;
    uint32_t pick; /* the pick generation that last took this key */
};

struct key_seen {
    uint64_t key;
    uint32_t gen; /* in the set of pick generation gen */
};

struct keysched {
    struct slot *slots;
    size_t cap;
    uint64_t head, tail; /* absolute positions: held = tail - head */
    uint64_t first_wait; /* no waiting slot before it (>= head) */
    size_t waiting;
    bool by_key;
    struct key_count *flight; /* keys in flight, tmask + 1 entries */
    struct key_seen *seen;    /* keys a pick passed over */
    size_t tmask;
    uint32_t gen;
    /* A pick that took nothing leaves its scan to be continued: the next
     * pick looks only at what was pushed since (same generation, so the
     * keys it passed over still hold their later messages back), unless a
     * key was freed or a waiting message left in between (resume = false).
     * Without it a window full of one busy key was scanned whole on every
     * pick, finding nothing each time. */
    bool resume;
    uint64_t resume_pos;
};

/* key 0 (a keyless message: the endpoint's one key) is a key like any
 * other; 0 marks an empty table entry, so it is stored as this. */
#define KEY_NONE 0x9E3779B97F4A7C15ULL

static uint64_t key_of(const struct message *m)
{
    return m->key ? m->key : KEY_NONE;
}

static size_t key_home(const struct keysched *ks, uint64_t key)
{
    /* the keys are FNV hashes already; fold the high bits in */
    return (size_t)(key ^ (key >> 29)) & ks->tmask;
}

struct keysched *keysched_create(size_t window, bool by_key)
{
    struct keysched *ks = xcalloc(1, sizeof *ks);
    ks->cap = window ? window : 1;
    ks->slots = xcalloc(ks->cap, sizeof *ks->slots);
    ks->by_key = by_key;
    size_t t = 16;
    while (t < 2 * ks->cap) t <<= 1;
    ks->tmask = t - 1;
    ks->flight = xcalloc(t, sizeof *ks->flight);
    ks->seen = xcalloc(t, sizeof *ks->seen);
    ks->gen = 1;
    return ks;
}

void keysched_destroy(struct keysched *ks)
{
    if (!ks) return;
    free(ks->slots);
    free(ks->flight);
    free(ks->seen);
    free(ks);
}

size_t keysched_room(const struct keysched *ks)
{
    return ks->cap - (size_t)(ks->tail - ks->head);
}

size_t keysched_held(const struct keysched *ks)
{
    return (size_t)(ks->tail - ks->head);
}

size_t keysched_waiting(const struct keysched *ks)
{
    return ks->waiting;
}

static struct slot *at(const struct keysched *ks, uint64_t pos)
{
    return &ks->slots[pos % ks->cap];
}

/* ---- keys in flight ---- */

static struct key_count *flight_find(const struct keysched *ks, uint64_t key)
{
    for (size_t i = key_home(ks, key);; i = (i + 1) & ks->tmask) {
        struct key_count *e = &ks->flight[i];
        if (e->key == key) return e;
        if (e->key == 0) return NULL;
    }
}

static struct key_count *flight_add(struct keysched *ks, uint64_t key)
{
    size_t i = key_home(ks, key);
    while (ks->flight[i].key != 0 && ks->flight[i].key != key) i = (i + 1) & ks->tmask;
    struct key_count *e = &ks->flight[i];
    if (e->key == 0) {
        e->key = key;
        e->count = 0;
        e->pick = 0;
    }
    e->count++;
    return e;
}

/* Backward-shift deletion: later entries of the probe run move up, so a
 * lookup never stops early at a hole. */
static void flight_remove_at(struct keysched *ks, size_t hole)
{
    ks->flight[hole].key = 0;
    for (size_t j = (hole + 1) & ks->tmask; ks->flight[j].key != 0; j = (j + 1) & ks->tmask) {
        size_t home = key_home(ks, ks->flight[j].key);
        /* j's entry may fill the hole when its home is not in (hole, j] */
        bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
        if (movable) {
            ks->flight[hole] = ks->flight[j];
            ks->flight[j].key = 0;
            hole = j;
        }
    }
}

static void flight_release(struct keysched *ks, uint64_t key)
{
    struct key_count *e = flight_find(ks, key);
    if (!e) return;
    if (--e->count == 0) {
        flight_remove_at(ks, (size_t)(e - ks->flight));
        ks->resume = false; /* a message passed over may go now */
    }
}

/* ---- keys a pick passed over ---- */

static bool seen_has(const struct keysched *ks, uint64_t key)
{
    for (size_t i = key_home(ks, key);; i = (i + 1) & ks->tmask) {
        const struct key_seen *e = &ks->seen[i];
        if (e->gen != ks->gen) return false;
        if (e->key == key) return true;
    }
}

static void seen_add(struct keysched *ks, uint64_t key)
{
    size_t i = key_home(ks, key);
    while (ks->seen[i].gen == ks->gen) {
        if (ks->seen[i].key == key) return;
        i = (i + 1) & ks->tmask;
    }
    ks->seen[i].key = key;
    ks->seen[i].gen = ks->gen;
}

static void next_generation(struct keysched *ks)
{
    if (++ks->gen == 0) { /* wrapped: old stamps could match again */
        memset(ks->seen, 0, (ks->tmask + 1) * sizeof *ks->seen);
        for (size_t i = 0; i <= ks->tmask; i++) ks->flight[i].pick = 0;
        ks->gen = 1;
    }
}

/* ---- the window ---- */

void keysched_push(struct keysched *ks, struct message *m)
{
    struct slot *s = at(ks, ks->tail++);
    s->m = m;
    s->state = SLOT_WAIT;
    ks->waiting++;
}

/* May the waiting message m join the request being picked (of term
 * epoch, n messages so far)? Records why not, to keep its key's order. */
static bool may_take(struct keysched *ks, const struct message *m, size_t n, uint64_t epoch)
{
    if (!ks->by_key) return n == 0 || m->epoch == epoch;
    uint64_t key = key_of(m);
    if (seen_has(ks, key)) return false; /* an earlier one of its key waits */
    struct key_count *f = flight_find(ks, key);
    /* in flight in another request; in this one, the next of the key may
     * follow it in the same body */
    bool ok = (f == NULL || f->pick == ks->gen) && (n == 0 || m->epoch == epoch);
    if (!ok) seen_add(ks, key);
    return ok;
}

size_t keysched_pick(struct keysched *ks, struct message **msgs, uint32_t *slots, size_t max)
{
    while (ks->first_wait < ks->tail && at(ks, ks->first_wait)->state != SLOT_WAIT) ks->first_wait++;
    if (ks->waiting == 0 || max == 0) return 0;
    uint64_t pos = ks->first_wait;
    if (ks->resume && ks->resume_pos > pos)
        pos = ks->resume_pos; /* only what came since the last empty pick */
    else
        next_generation(ks);
    size_t n = 0;
    uint64_t epoch = 0;
    for (; pos < ks->tail && n < max; pos++) {
        struct slot *s = at(ks, pos);
        if (s->state != SLOT_WAIT || !may_take(ks, s->m, n, epoch)) continue;
        if (n == 0) epoch = s->m->epoch;
        if (ks->by_key) flight_add(ks, key_of(s->m))->pick = ks->gen;
        s->state = SLOT_FLIGHT;
        ks->waiting--;
        msgs[n] = s->m;
        slots[n] = (uint32_t)(pos % ks->cap);
        n++;
    }
    /* continued next time only when this pick took nothing (what it took
     * carries this generation's stamp) and saw everything */
    ks->resume = n == 0;
    ks->resume_pos = pos;
    return n;
}

/* The absolute position of handle h (a slot held in the window). */
static uint64_t position(const struct keysched *ks, uint32_t h)
{
    uint64_t base = ks->head - ks->head % ks->cap + h;
    return base < ks->head ? base + ks->cap : base;
}

void keysched_unpick(struct keysched *ks, const uint32_t *slots, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct slot *s = &ks->slots[slots[i]];
        if (s->state != SLOT_FLIGHT) continue;
        if (ks->by_key) flight_release(ks, key_of(s->m));
        s->state = SLOT_WAIT;
        ks->waiting++;
        ks->resume = false;
        uint64_t pos = position(ks, slots[i]);
        if (pos < ks->first_wait) ks->first_wait = pos;
    }
}

static void finish_slot(struct keysched *ks, struct slot *s, enum msg_outcome o)
{
    if (s->state == SLOT_FLIGHT) {
        if (ks->by_key) flight_release(ks, key_of(s->m));
    } else if (s->state == SLOT_WAIT) {
        ks->waiting--;
        ks->resume = false; /* its key no longer holds later ones back */
    } else {
        return; /* finished already, or free */
    }
    s->state = SLOT_DONE;
    s->outcome = (uint8_t)o;
}

void keysched_finish(struct keysched *ks, const uint32_t *slots, size_t n, enum msg_outcome o)
{
    for (size_t i = 0; i < n; i++) finish_slot(ks, &ks->slots[slots[i]], o);
}

void keysched_finish_waiting(struct keysched *ks, enum msg_outcome o)
{
    for (uint64_t pos = ks->first_wait; pos < ks->tail && ks->waiting > 0; pos++) {
        struct slot *s = at(ks, pos);
        if (s->state == SLOT_WAIT) finish_slot(ks, s, o);
    }
}

size_t keysched_settle(struct keysched *ks, struct message **msgs, enum msg_outcome *outcome,
                       size_t max)
{
    size_t n = 0;
    while (n < max && ks->head < ks->tail) {
        struct slot *s = at(ks, ks->head);
        if (s->state != SLOT_DONE) break;
        msgs[n] = s->m;
        outcome[n] = (enum msg_outcome)s->outcome;
        n++;
        s->m = NULL;
        s->state = SLOT_FREE;
        ks->head++;
    }
    if (ks->first_wait < ks->head) ks->first_wait = ks->head;
    return n;
}
