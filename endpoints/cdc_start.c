/* mysql_cdc: finding where a term starts (endpoints/mysql_cdc.c is the
 * endpoint): the checkpoint in the locker, the one this replica saw last,
 * the legacy key an older baton kept, or `start` resolved on the server;
 * the GTID position of a file:pos, and what a binlog error saying "purged"
 * looks like. The endpoint's state is in endpoints/mysql_cdc_private.h. */
#include <inttypes.h>
#include <mysql.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "endpoints/cdc_checkpoint.h"
#include "endpoints/mysql_cdc_private.h"
#include "redis/open.h"
#include "common/log.h"
#include "common/util.h"

/* Resolves `start` into file/pos on the connected server. */
int mysql_cdc_resolve_start(struct cdc *c, MYSQL *m, const char *start, char *err, size_t errlen)
{
    char a[CDC_FILE_MAX], b[32];
    if (strcmp(start, "latest") == 0) {
        if (mysql_cdc_query_value(c, m, "SHOW MASTER STATUS", 0, a, sizeof a, b, sizeof b, err, errlen))
            return -1;
    } else if (strcmp(start, "oldest") == 0) {
        if (mysql_cdc_query_value(c, m, "SHOW BINARY LOGS", 0, a, sizeof a, NULL, 0, err, errlen))
            return -1;
        snprintf(b, sizeof b, "4");
    } else {
        uint64_t pos;
        if (cdc_position_parse(start, a, sizeof a, &pos)) {
            snprintf(err, errlen, "bad position \"%s\"", start);
            return -1;
        }
        snprintf(c->file, sizeof c->file, "%s", a);
        c->pos = pos;
        return 0;
    }
    if (!a[0]) {
        snprintf(err, errlen, "mysql %s: binary logging is disabled on the server (log_bin is "
                 "OFF): there is no binlog to stream; enable log_bin with binlog_format=ROW",
                 c->where);
        return -1;
    }
    snprintf(c->file, sizeof c->file, "%s", a);
    c->pos = strtoull(b, NULL, 10);
    if (c->pos < 4) c->pos = 4;
    return 0;
}

/* Upgrade path: the checkpoint an older baton kept in the locker's Redis at
 * "<prefix>:cdc:<scope>", read with a one-shot connection. Returns 1 found
 * (*ck filled), 0 absent, -1 on an error (err filled). */
static int read_legacy_checkpoint(struct cdc *c, struct cdc_ckpt *ck, char *err, size_t errlen)
{
    char cerr[512];
    redisContext *rc = redis_conn_open(c->h->locker_redis, cerr, sizeof cerr);
    if (!rc) {
        snprintf(err, errlen, "legacy checkpoint %.200s: %.280s", c->legacy_key, cerr);
        return -1;
    }
    redisReply *r = redis_commandf(rc, "GET %s", c->legacy_key); /* within the command timeout */
    int found = -1;
    if (!r) {
        snprintf(err, errlen, "GET %.200s: %.200s", c->legacy_key,
                 rc->errstr[0] ? rc->errstr : "connection lost");
    } else if (r->type == REDIS_REPLY_NIL) {
        found = 0;
    } else if (r->type == REDIS_REPLY_STRING) {
        found = cdc_checkpoint_parse_n(r->str, r->len, c->legacy_key, ck, err, errlen) == 0 ? 1 : -1;
    } else {
        snprintf(err, errlen, "GET %.200s: %.200s", c->legacy_key,
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    }
    if (r) freeReplyObject(r);
    redisFree(rc);
    return found;
}

bool mysql_cdc_is_purged_error(unsigned errnum, const char *msg)
{
    return errnum == 1236 && msg &&
           (strstr(msg, "Could not find first log file") || strstr(msg, "purged") ||
            strstr(msg, "could not find") || strstr(msg, "Could not find"));
}


/* The GTID position of file:pos on the connected server (BINLOG_GTID_POS):
 * 1 with out filled, 0 when the server cannot say (NULL: not a position of
 * its binlog, or purged), -1 on a query error. */
int mysql_cdc_gtid_at(struct cdc *c, MYSQL *m, const char *file, uint64_t pos, char *out,
                      size_t outlen, char *err, size_t errlen)
{
    char ef[2 * CDC_FILE_MAX + 1], sql[2 * CDC_FILE_MAX + 80], v[CDC_GTID_MAX];
    mysql_real_escape_string(m, ef, file, (unsigned long)strlen(file));
    snprintf(sql, sizeof sql, "SELECT BINLOG_GTID_POS('%s', %" PRIu64 ")", ef, pos);
    if (mysql_query(m, sql)) {
        snprintf(err, errlen, "mysql %.100s: %.150s: %.150s (error %u)", c->where, sql, mysql_error(m),
                 mysql_errno(m));
        return -1;
    }
    MYSQL_RES *r = mysql_store_result(m);
    int found = 0;
    if (r) {
        MYSQL_ROW row = mysql_fetch_row(r);
        if (row && row[0]) {
            snprintf(v, sizeof v, "%s", row[0]);
            struct cdc_gtid g[CDC_GTID_DOMAINS];
            size_t n;
            if (cdc_gtid_parse(v, g, CDC_GTID_DOMAINS, &n) == 0) {
                snprintf(out, outlen, "%s", v);
                found = 1;
            }
        }
        mysql_free_result(r);
    }
    return found;
}

/* The read side starts at ck (file:pos on server ck->server_id, 0 =
 * unknown: taken as this server, as before the server id was kept, and
 * its GTID position). */
void mysql_cdc_set_resume(struct cdc *c, const struct cdc_ckpt *ck)
{
    snprintf(c->resume_file, sizeof c->resume_file, "%s", ck->file);
    c->resume_pos = ck->pos;
    c->resume_server = ck->server_id;
    c->nrstate = 0;
    c->rstate_known = ck->gtid_known &&
                      cdc_gtid_parse(ck->gtid, c->rstate, CDC_GTID_DOMAINS, &c->nrstate) == 0;
}

/* Finds where this term starts (checkpoint, cached checkpoint, legacy key or
 * `start`) on the connected server m. 0, or -1 with err. */
int mysql_cdc_find_start(struct cdc *c, MYSQL *m, char *err, size_t errlen)
{
    const char *name = c->h->name;
    struct cdc_ckpt ck;
    memset(&ck, 0, sizeof ck);
    int found = 0;
    char e2[512];
    if (c->ckpt_on) {
        found = mysql_cdc_read_checkpoint(c, &ck, e2, sizeof e2);
        if (found < 0) {
            snprintf(err, errlen, "cannot read the checkpoint: %s", e2);
            return -1;
        }
    }
    bool cached = false;
    if (!found && c->ckpt_on) {
        /* The locker has no checkpoint. If this replica saw one (as leader
         * or following it as a standby), the locker lost its data: resume
         * there rather than at `start`, which would skip the rows in
         * between. */
        pthread_mutex_lock(&c->cache_mu);
        if (c->cache_valid) {
            ck = c->cache;
            found = 2;
        }
        cached = c->cache_valid;
        int64_t age = clock_mono_ms() - c->cache_at_ms;
        pthread_mutex_unlock(&c->cache_mu);
        if (found) {
            log_warn(COMPONENT, name, "no checkpoint in the locker (%s), but this replica "
                     "saw %s:%" PRIu64 " %lld ms ago: the locker lost its data (Redis "
                     "restarted without persistence?); resuming there (rows after it may be "
                     "forwarded again)",
                     c->ckpt_key, ck.file, ck.pos, (long long)age);
            if (mysql_cdc_write_checkpoint(c, &ck) != 1) {
                snprintf(err, errlen, "cannot restore the checkpoint %s", c->ckpt_key);
                return -1;
            }
        }
    }
    const char *from = c->ckpt_key;
    if (!found && !cached && c->legacy_on) {
        /* Upgrade: no checkpoint under the new key and this process never
         * saw one there; an older baton may have kept it under the legacy
         * key. Taken over once: it is written under the new key at once,
         * which every later promotion finds (the legacy key is left as it
         * is, for a rollback). */
        found = read_legacy_checkpoint(c, &ck, e2, sizeof e2);
        if (found < 0) {
            snprintf(err, errlen, "cannot read the legacy checkpoint: %s", e2);
            return -1;
        }
        if (found) {
            log_info(COMPONENT, name, "checkpoint taken over from legacy key %s = %s:%" PRIu64
                     "; from now on it is kept at %s (the legacy key is left as it is)",
                     c->legacy_key, ck.file, ck.pos, c->ckpt_key);
            if (mysql_cdc_write_checkpoint(c, &ck) != 1) {
                snprintf(err, errlen, "cannot write the checkpoint taken over from %.200s "
                         "to %.200s", c->legacy_key, c->ckpt_key);
                return -1;
            }
            from = c->legacy_key;
        }
    }
    if (found) {
        log_info(COMPONENT, name, "resuming from checkpoint %s = %s:%" PRIu64 "%s%s%s%s", from,
                 ck.file, ck.pos, ck.server_id ? " on server_id " : "",
                 ck.server_id ? (snprintf(e2, sizeof e2, "%" PRIu32, ck.server_id), e2) : "",
                 ck.gtid_known ? ", GTID position " : "", ck.gtid_known ? ck.gtid : "");
        /* a checkpoint from before the server id and GTID were kept: of this
         * server (as it was then); learn its GTID position for a later
         * switchover */
        bool same = ck.server_id == 0 || ck.server_id == c->server_now;
        if (ck.server_id == 0) ck.server_id = c->server_now;
        if (same && !ck.gtid_known && mysql_cdc_gtid_at(c, m, ck.file, ck.pos, ck.gtid, sizeof ck.gtid,
                                                        e2, sizeof e2) == 1)
            ck.gtid_known = true;
    } else {
        if (mysql_cdc_resolve_start(c, m, c->s->start, err, errlen)) return -1;
        snprintf(ck.file, sizeof ck.file, "%s", c->file);
        ck.pos = c->pos;
        ck.server_id = c->server_now;
        ck.gtid_known = mysql_cdc_gtid_at(c, m, ck.file, ck.pos, ck.gtid, sizeof ck.gtid, e2, sizeof e2) == 1;
        log_info(COMPONENT, name, "%s; start = \"%s\" = %s:%" PRIu64 "%s%s",
                 c->ckpt_on ? "no checkpoint yet" : "checkpoint off", c->s->start, ck.file, ck.pos,
                 ck.gtid_known ? ", GTID position " : "", ck.gtid_known ? ck.gtid : "");
        if (c->ckpt_on && mysql_cdc_write_checkpoint(c, &ck) != 1) {
            snprintf(err, errlen, "cannot write the initial checkpoint %s", c->ckpt_key);
            return -1;
        }
    }
    mysql_cdc_set_resume(c, &ck);
    if (c->ckpt_on) cdc_progress_reset(c->progress, &ck);
    return 0;
}
