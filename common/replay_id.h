/* Fingerprints and message ids for warm standby replay (failover =
 * "replay"), shared by the endpoints that build them and the gateway's
 * replay ring (src/replay.h). Pure functions. */
#ifndef BATON_REPLAY_ID_H
#define BATON_REPLAY_ID_H

#include <stddef.h>
#include <stdint.h>

/* "r" + 16 hex digits + NUL */
#define REPLAY_ID_LEN 18

/* 64-bit fingerprint of (name, payload), never 0. Fast (8 bytes per step);
 * the same on every replica and every platform (byte order fixed). */
uint64_t replay_fingerprint(const void *name, size_t name_len, const void *payload,
                            size_t payload_len);

/* Message ids for sources without ids: derived from the fingerprint of the
 * message and of the 3 before it in the subscription's stream, so the
 * leader and a standby replaying the same message give it the same id while
 * repeated payloads in different places get different ones (a run of 4 or
 * more identical messages shares one id). */
struct replay_idctx {
    uint64_t prev[3];
};
void replay_id(struct replay_idctx *c, uint64_t fp, char out[REPLAY_ID_LEN]);
/* replay_id in two steps: the 64-bit id (advances the context), and its
 * text form. A standby keeps the number and formats it only if it replays. */
uint64_t replay_id_next(struct replay_idctx *c, uint64_t fp);
void replay_id_format(uint64_t id, char out[REPLAY_ID_LEN]);
/* The stream broke (resubscribed): forget the context. */
void replay_idctx_reset(struct replay_idctx *c);

#endif
