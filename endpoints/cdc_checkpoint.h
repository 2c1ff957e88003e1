/* Checkpointing for the mysql_cdc endpoint.
 *
 * cdc_progress tracks which forwarded row messages the sink accepted and
 * yields the newest transaction boundary (file:pos) before which every
 * message was delivered: the position a new leader may resume from without
 * losing anything. Thread safe: the consumer assigns sequence numbers and
 * records boundaries; the forwarder reports outcomes (message done callback).
 * A message that was not delivered (dropped) holds the checkpoint where it is
 * for the rest of the term, so a later leader re-reads it.
 *
 * The checkpoint lives in Redis under "<prefix>:cdc:<scope>" as "file:pos".
 * cdc_checkpoint_write() sets it with a Lua script only when the caller's
 * epoch equals GET("<lease key>:epoch"), the fencing epoch the ActiveGuard
 * advances atomically with each acquisition: a stale leader cannot move it. */
#ifndef BATON_CDC_CHECKPOINT_H
#define BATON_CDC_CHECKPOINT_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CDC_FILE_MAX 128

struct cdc_progress;

struct cdc_progress *cdc_progress_create(void);
void cdc_progress_destroy(struct cdc_progress *p);
/* Starts a new term: forgets everything; outcomes of messages from earlier
 * terms are ignored from now on. */
void cdc_progress_reset(struct cdc_progress *p);
/* The sequence number of the next message (to put in m->seq); registers it
 * as pending. */
uint64_t cdc_progress_assign(struct cdc_progress *p);
/* Outcome of message seq (from the done callback). */
void cdc_progress_done(struct cdc_progress *p, uint64_t seq, bool delivered);
/* A transaction boundary: every message assigned so far belongs to
 * transactions that end at or before file:pos. */
void cdc_progress_boundary(struct cdc_progress *p, const char *file, uint64_t pos);
/* The newest boundary whose messages were all delivered. Returns true and
 * fills file/pos when there is one newer than the last returned. */
bool cdc_progress_checkpoint(struct cdc_progress *p, char file[CDC_FILE_MAX], uint64_t *pos);
/* Messages assigned and not yet resolved; whether a drop blocks the term. */
uint64_t cdc_progress_pending(struct cdc_progress *p, bool *blocked);

/* Reads the checkpoint. Returns 1 found (file/pos filled), 0 absent, -1 on a
 * Redis error or an unparsable value (err filled). */
int cdc_checkpoint_read(redisContext *c, const char *key, char file[CDC_FILE_MAX], uint64_t *pos,
                        char *err, size_t errlen);
/* Writes "file:pos". epoch_key NULL: unfenced SET. Returns 1 written, 0
 * rejected because the epoch is stale (err says which epoch is current), -1
 * on a Redis error (err filled). */
int cdc_checkpoint_write(redisContext *c, const char *key, const char *epoch_key, uint64_t epoch,
                         const char *file, uint64_t pos, char *err, size_t errlen);

#endif
