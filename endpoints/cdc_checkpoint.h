/* Checkpointing for the mysql_cdc endpoint.
 *
 * cdc_progress tracks which forwarded row messages the sink accepted and
 * yields the newest transaction boundary (file:pos) before which every
 * message was delivered: the position a new leader may resume from without
 * losing anything. Thread safe: the consumer assigns sequence numbers and
 * records boundaries; the forwarder reports outcomes (message done callback).
 * A message that was not delivered (dropped) holds the checkpoint where it is
 * for the rest of the term, so a later leader re-reads it; the endpoint ends
 * such a term once its backlog passes a bound (cdc_progress_backlog). Each
 * boundary also carries the GTID of the transaction it ends, so the
 * checkpoint holds the GTID position as well (resume on another server).
 *
 * The checkpoint itself is the text "file:pos;server_id=N;gtid=D-S-N,..."
 * (cdc_checkpoint_format / cdc_checkpoint_parse). mysql_cdc.c keeps it in the locker beside the lease
 * ("<lease key>:cdc", baton_locker_fenced_set / baton_locker_shared_get): a write is
 * fenced by the lease epoch, so a stale leader cannot move it. No transport
 * here. */
#ifndef BATON_CDC_CHECKPOINT_H
#define BATON_CDC_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CDC_FILE_MAX 128
/* GTID position text "d-s-n,d-s-n,..." (one GTID per replication domain),
 * NUL included; at most CDC_GTID_DOMAINS domains are tracked. */
#define CDC_GTID_MAX 704
#define CDC_GTID_DOMAINS 16

/* One MariaDB GTID: domain-server-sequence. */
struct cdc_gtid {
    uint32_t domain, server;
    uint64_t seq;
};

/* A resume point: a binlog file:pos on the server it was read from
 * (server_id, 0 = unknown: a checkpoint written before baton stored it) and
 * the GTID position there (gtid_known false: not known). On the same server
 * the stream resumes at file:pos; on another one (a promoted replica) by
 * GTID. */
struct cdc_ckpt {
    char file[CDC_FILE_MAX];
    uint64_t pos;
    uint32_t server_id;
    bool gtid_known;
    char gtid[CDC_GTID_MAX];
};

/* What the tracker holds for the current term (cdc_progress_backlog). */
struct cdc_backlog {
    uint64_t pending;         /* rows assigned and not yet behind the checkpoint */
    bool blocked;             /* a row was not delivered: the checkpoint is stuck */
    int64_t blocked_since_ms; /* monotonic ms of the first such row (0 if none) */
    size_t bytes;             /* heap held by the tracker */
};

struct cdc_progress;

struct cdc_progress *cdc_progress_create(void);
void cdc_progress_destroy(struct cdc_progress *p);
/* Starts a new term from resume point *from (its file/pos, server_id and
 * GTID position, which later boundaries advance): forgets everything;
 * outcomes of messages from earlier terms are ignored from now on. from may
 * be NULL (GTID position unknown). */
void cdc_progress_reset(struct cdc_progress *p, const struct cdc_ckpt *from);
/* The sequence number of the next message (to put in m->seq); registers it
 * as pending. */
uint64_t cdc_progress_assign(struct cdc_progress *p);
/* Outcome of message seq (from the done callback). */
void cdc_progress_done(struct cdc_progress *p, uint64_t seq, bool delivered);
/* A transaction boundary: every message assigned so far belongs to
 * transactions that end at or before file:pos. gtid: the GTID of the
 * transaction that ends here (NULL for a boundary that ends none, e.g. a
 * rotation). server_id: the server being read. */
void cdc_progress_boundary(struct cdc_progress *p, const char *file, uint64_t pos,
                           const struct cdc_gtid *gtid, uint32_t server_id);
/* The newest boundary whose messages were all delivered. Returns true and
 * fills *out when there is one newer than the last returned. */
bool cdc_progress_checkpoint(struct cdc_progress *p, struct cdc_ckpt *out);
/* Messages assigned and not yet resolved; whether a drop blocks the term. */
uint64_t cdc_progress_pending(struct cdc_progress *p, bool *blocked);
void cdc_progress_backlog(struct cdc_progress *p, struct cdc_backlog *b);

/* GTID position text <-> GTIDs. Parse: "" is the empty position (n = 0);
 * -1 on a malformed text or more than max domains. Format: -1 when it does
 * not fit. */
int cdc_gtid_parse(const char *s, struct cdc_gtid *out, size_t max, size_t *n);
int cdc_gtid_format(char *buf, size_t len, const struct cdc_gtid *g, size_t n);

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

/* Longest checkpoint text: "<file>:<pos>;server_id=<n>;gtid=<position>",
 * NUL included. */
#define CDC_CHECKPOINT_MAX (CDC_FILE_MAX + 24 + 22 + 6 + CDC_GTID_MAX)

/* Formats the checkpoint into buf: "file:pos", then ";server_id=N" when
 * known and ";gtid=<position>" when known (a baton from before the GTID
 * position reads only "file:pos": it refuses the longer form with an error
 * naming the key and keeps retrying).
 * Returns its length, or -1 when it does not fit (buf then holds ""). */
int cdc_checkpoint_format(char *buf, size_t len, const struct cdc_ckpt *c);
/* Parses a checkpoint value read from key (named in the error): "file:pos"
 * (older batons) or the form above. Returns 0 (*c filled) or -1 with err
 * saying what the key holds instead. */
int cdc_checkpoint_parse(const char *value, const char *key, struct cdc_ckpt *c, char *err,
                         size_t errlen);
/* The same for a value of len bytes as read (a Redis GET reply's len): a
 * value holding a NUL byte is refused, naming the key and the NUL's offset,
 * never read up to the NUL ("file:611\0;server_id=9" would resume at 611 on
 * whatever server, its server_id dropped without a word). */
int cdc_checkpoint_parse_n(const char *value, size_t len, const char *key, struct cdc_ckpt *c,
                           char *err, size_t errlen);
/* The length of a value a locker copied into buf (cap bytes, all zero
 * before the read; the locker NUL-terminates the bytes it copies): up to its
 * last non-NUL byte, so a NUL inside the value is seen by
 * cdc_checkpoint_parse_n. */
size_t cdc_checkpoint_value_len(const char *buf, size_t cap);

#endif
