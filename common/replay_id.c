/* Fingerprints and message ids for replay (see common/replay_id.h).
 *
 * The hash is MurmurHash64A's word step with MurmurHash3's 64-bit
 * finaliser: not cryptographic (a hostile source could forge collisions,
 * which only makes a replay align at the wrong place, as a repeated payload
 * would), but fast and well mixed. Every replica of every platform must get
 * the same value, so words are always read as little-endian. */
#include "common/replay_id.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define MIX_M UINT64_C(0xc6a4a7935bd1e995)
#define MIX_R 47
#define SEED UINT64_C(0x6261746f6e2d7270) /* "baton-rp" */
/* Stands in for a hash of 0, which means "no fingerprint". */
#define FP_NONZERO UINT64_C(0x9e3779b97f4a7c15)

/* memcpy keeps the load aligned-safe and lets the compiler emit one move on
 * little-endian hosts; the swap makes big-endian hosts agree with them. */
static uint64_t load_le64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static uint64_t mix_word(uint64_t h, uint64_t k)
{
    k *= MIX_M;
    k ^= k >> MIX_R;
    k *= MIX_M;
    h ^= k;
    return h * MIX_M;
}

static uint64_t finalise(uint64_t h)
{
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h *= UINT64_C(0xc4ceb9fe1a85ec53);
    h ^= h >> 33;
    return h;
}

/* One field: its length first, then its bytes with the tail zero-padded to
 * a whole word. The length fixes how many words belong to the field, so the
 * boundary between two fields cannot shift ("ab"+"c" differs from "a"+"bc")
 * and trailing zero bytes are not lost in the padding. */
static uint64_t mix_field(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    h = mix_word(h, (uint64_t)len);
    for (; len >= 8; p += 8, len -= 8) h = mix_word(h, load_le64(p));
    if (len) {
        uint64_t tail = 0;
        for (size_t i = 0; i < len; i++) tail |= (uint64_t)p[i] << (8 * i);
        h = mix_word(h, tail);
    }
    return h;
}

uint64_t replay_fingerprint(const void *name, size_t name_len, const void *payload,
                            size_t payload_len)
{
    uint64_t h = mix_field(SEED, name, name_len);
    h = finalise(mix_field(h, payload, payload_len));
    return h ? h : FP_NONZERO;
}

uint64_t replay_id_next(struct replay_idctx *c, uint64_t fp)
{
    /* Oldest first, fp last: the order matters, so a b c d and b a c d
     * (same messages, reordered before d) give d different ids. */
    uint64_t h = SEED;
    for (int i = 0; i < 3; i++) h = mix_word(h, c->prev[i]);
    h = finalise(mix_word(h, fp));
    c->prev[0] = c->prev[1];
    c->prev[1] = c->prev[2];
    c->prev[2] = fp;
    return h;
}

void replay_id_format(uint64_t id, char out[REPLAY_ID_LEN])
{
    static const char hex[] = "0123456789abcdef";
    out[0] = 'r';
    for (int i = 0; i < 16; i++) out[1 + i] = hex[(id >> (60 - 4 * i)) & 0xf];
    out[17] = '\0';
}

void replay_id(struct replay_idctx *c, uint64_t fp, char out[REPLAY_ID_LEN])
{
    replay_id_format(replay_id_next(c, fp), out);
}

void replay_idctx_reset(struct replay_idctx *c)
{
    memset(c, 0, sizeof *c);
}
