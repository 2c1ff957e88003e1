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
 * The checkpoint itself is the text "file:pos" (cdc_checkpoint_format /
 * cdc_checkpoint_parse). mysql_cdc.c keeps it in the locker beside the lease
 * ("<lease key>:cdc", locker_fenced_set / locker_shared_get): a write is
 * fenced by the lease epoch, so a stale leader cannot move it. No transport
 * here. */
#ifndef BATON_CDC_CHECKPOINT_H
#define BATON_CDC_CHECKPOINT_H

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

/* In the locker the checkpoint is "<lease key>:" CDC_CHECKPOINT_NAME. Every
 * write sets its expiry again: CDC_CHECKPOINT_TTL_MS, 30 days. A checkpoint
 * older than that is older than any sane binlog retention
 * (expire_logs_days / binlog_expire_logs_seconds): the position it names
 * would be purged anyway. A leader whose position has not moved (no
 * transaction in the binlog) rewrites it every CDC_CHECKPOINT_REFRESH_MS, so
 * an idle but running stream never lets it expire. */
#define CDC_CHECKPOINT_NAME "cdc"
#define CDC_CHECKPOINT_TTL_MS (30LL * 24 * 3600 * 1000)
#define CDC_CHECKPOINT_REFRESH_MS (24LL * 3600 * 1000)

/* Longest checkpoint text: "<file>:<pos>" with pos at most 20 digits, NUL
 * included. */
#define CDC_CHECKPOINT_MAX (CDC_FILE_MAX + 24)

/* Formats "file:pos" into buf. Returns its length, or -1 when it does not
 * fit (buf then holds ""). */
int cdc_checkpoint_format(char *buf, size_t len, const char *file, uint64_t pos);
/* Parses a checkpoint value read from key (named in the error). Returns 0
 * (file/pos filled) or -1 with err saying what the key holds instead. */
int cdc_checkpoint_parse(const char *value, const char *key, char file[CDC_FILE_MAX],
                         uint64_t *pos, char *err, size_t errlen);

#endif
