/* Delivered-prefix tracking and the checkpoint's text form. See
 * cdc_checkpoint.h. */
#include "endpoints/cdc_checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "endpoints/cdc_decode.h"
#include "common/util.h"

/* m->seq = term << SEQ_BITS | sequence within the term */
#define SEQ_BITS 44
#define SEQ_MASK ((UINT64_C(1) << SEQ_BITS) - 1)

enum { ST_PENDING = 0, ST_DELIVERED = 1, ST_DROPPED = 2 };

/* 40 bytes: the binlog file is an index into the file-name table (names
 * change only at a rotation), so a long backlog of one-row transactions
 * costs little per row. */
struct point {
    uint64_t seq_end; /* messages with seq < seq_end precede the boundary */
    uint64_t pos;
    uint32_t file_id; /* files[file_id - file_base] */
    uint32_t server_id;
    struct cdc_gtid gtid; /* of the transaction ending here; seq 0 = none */
};

struct cdc_progress {
    pthread_mutex_t mu;
    uint64_t term;
    uint64_t base;     /* every seq < base was delivered */
    uint64_t next;     /* next seq to assign */
    uint8_t *st;       /* ring of states for [base, next) */
    size_t cap;        /* power of two */
    bool blocked;
    int64_t blocked_since_ms;
    struct point *pts; /* boundaries, oldest first */
    size_t npts, ptcap;
    char (*files)[CDC_FILE_MAX]; /* names of file ids file_base .. file_base + nfiles - 1 */
    uint32_t file_base;
    size_t nfiles, filecap;
    /* GTID position at the newest point handed out (or at the term's start) */
    bool gtid_known;
    struct cdc_gtid state[CDC_GTID_DOMAINS];
    size_t nstate;
    struct cdc_ckpt last; /* last returned (or the start) */
};

struct cdc_progress *cdc_progress_create(void)
{
    struct cdc_progress *p = xcalloc(1, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    p->cap = 1024;
    p->st = xcalloc(p->cap, 1);
    p->ptcap = 64;
    p->pts = xcalloc(p->ptcap, sizeof *p->pts);
    p->filecap = 4;
    p->files = xcalloc(p->filecap, sizeof *p->files);
    return p;
}

void cdc_progress_destroy(struct cdc_progress *p)
{
    if (!p) return;
    pthread_mutex_destroy(&p->mu);
    free(p->st);
    free(p->pts);
    free(p->files);
    free(p);
}

void cdc_progress_reset(struct cdc_progress *p, const struct cdc_ckpt *from)
{
    pthread_mutex_lock(&p->mu);
    p->term++;
    p->base = p->next = 0;
    memset(p->st, 0, p->cap);
    p->blocked = false;
    p->blocked_since_ms = 0;
    p->npts = 0;
    p->nfiles = 0;
    p->file_base = 0;
    memset(&p->last, 0, sizeof p->last);
    p->nstate = 0;
    p->gtid_known = false;
    if (from) {
        p->last = *from;
        size_t n = 0;
        if (from->gtid_known &&
            cdc_gtid_parse(from->gtid, p->state, CDC_GTID_DOMAINS, &n) == 0) {
            p->nstate = n;
            p->gtid_known = true;
        }
    }
    p->last.gtid_known = p->gtid_known;
    pthread_mutex_unlock(&p->mu);
}

uint64_t cdc_progress_assign(struct cdc_progress *p)
{
    pthread_mutex_lock(&p->mu);
    if (p->next - p->base == p->cap) { /* grow the ring, keeping positions */
        size_t ncap = p->cap * 2;
        uint8_t *nst = xcalloc(ncap, 1);
        for (uint64_t s = p->base; s < p->next; s++) nst[s & (ncap - 1)] = p->st[s & (p->cap - 1)];
        free(p->st);
        p->st = nst;
        p->cap = ncap;
    }
    uint64_t s = p->next++;
    p->st[s & (p->cap - 1)] = ST_PENDING;
    uint64_t seq = (p->term << SEQ_BITS) | (s & SEQ_MASK);
    pthread_mutex_unlock(&p->mu);
    return seq;
}

void cdc_progress_done(struct cdc_progress *p, uint64_t seq, bool delivered)
{
    pthread_mutex_lock(&p->mu);
    uint64_t s = seq & SEQ_MASK;
    if ((seq >> SEQ_BITS) == (p->term & ((UINT64_C(1) << (64 - SEQ_BITS)) - 1)) && s >= p->base &&
        s < p->next) {
        p->st[s & (p->cap - 1)] = delivered ? ST_DELIVERED : ST_DROPPED;
        if (!delivered && !p->blocked) {
            p->blocked = true;
            p->blocked_since_ms = clock_mono_ms();
        }
        while (p->base < p->next && p->st[p->base & (p->cap - 1)] == ST_DELIVERED) {
            p->st[p->base & (p->cap - 1)] = ST_PENDING;
            p->base++;
        }
    }
    pthread_mutex_unlock(&p->mu);
}

/* The id of file, appending it to the table when it is not the newest. */
static uint32_t file_id(struct cdc_progress *p, const char *file)
{
    if (p->nfiles > 0 && strcmp(p->files[p->nfiles - 1], file) == 0)
        return p->file_base + (uint32_t)(p->nfiles - 1);
    if (p->nfiles == p->filecap) {
        p->filecap *= 2;
        p->files = xrealloc(p->files, p->filecap * sizeof *p->files);
    }
    snprintf(p->files[p->nfiles], CDC_FILE_MAX, "%s", file);
    return p->file_base + (uint32_t)p->nfiles++;
}

void cdc_progress_boundary(struct cdc_progress *p, const char *file, uint64_t pos,
                           const struct cdc_gtid *gtid, uint32_t server_id)
{
    pthread_mutex_lock(&p->mu);
    struct point *last = p->npts ? &p->pts[p->npts - 1] : NULL;
    /* a boundary with no message since the last one replaces it, unless
     * both carry a GTID of different domains (both must be applied) */
    bool coalesce = last && last->seq_end == p->next &&
                    !(gtid && last->gtid.seq && last->gtid.domain != gtid->domain);
    if (!coalesce) {
        if (p->npts == p->ptcap) {
            p->ptcap *= 2;
            p->pts = xrealloc(p->pts, p->ptcap * sizeof *p->pts);
        }
        last = &p->pts[p->npts++];
        memset(last, 0, sizeof *last);
        last->seq_end = p->next;
    }
    last->file_id = file_id(p, file);
    last->pos = pos;
    last->server_id = server_id;
    if (gtid) last->gtid = *gtid;
    pthread_mutex_unlock(&p->mu);
}

static void state_apply(struct cdc_progress *p, const struct cdc_gtid *g)
{
    for (size_t i = 0; i < p->nstate; i++)
        if (p->state[i].domain == g->domain) {
            p->state[i] = *g;
            return;
        }
    if (p->nstate < CDC_GTID_DOMAINS) p->state[p->nstate++] = *g;
    else p->gtid_known = false; /* more domains than tracked: no GTID position */
}

bool cdc_progress_checkpoint(struct cdc_progress *p, struct cdc_ckpt *out)
{
    bool found = false;
    pthread_mutex_lock(&p->mu);
    size_t k = 0; /* number of points fully delivered */
    while (k < p->npts && p->pts[k].seq_end <= p->base) k++;
    if (k > 0) {
        /* the points before the newest delivered one are dropped below:
         * their GTIDs enter the position now */
        for (size_t i = 0; i < k; i++)
            if (p->pts[i].gtid.seq) state_apply(p, &p->pts[i].gtid);
        const struct point *pt = &p->pts[k - 1];
        const char *file = p->files[pt->file_id - p->file_base];
        if (strcmp(file, p->last.file) != 0 || pt->pos != p->last.pos ||
            pt->server_id != p->last.server_id) {
            snprintf(p->last.file, sizeof p->last.file, "%s", file);
            p->last.pos = pt->pos;
            p->last.server_id = pt->server_id;
            p->last.gtid_known = p->gtid_known &&
                                 cdc_gtid_format(p->last.gtid, sizeof p->last.gtid, p->state,
                                                 p->nstate) >= 0;
            if (!p->last.gtid_known) p->last.gtid[0] = '\0';
            *out = p->last;
            found = true;
        }
        /* keep the newest delivered point (a later boundary may coalesce
         * with it), its GTID already applied; drop the older ones */
        memmove(p->pts, p->pts + (k - 1), (p->npts - (k - 1)) * sizeof *p->pts);
        p->npts -= k - 1;
        p->pts[0].gtid.seq = 0;
        /* file names no point refers to any more */
        uint32_t drop = p->pts[0].file_id - p->file_base;
        if (drop > 0) {
            memmove(p->files, p->files + drop, (p->nfiles - drop) * sizeof *p->files);
            p->nfiles -= drop;
            p->file_base += drop;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return found;
}

uint64_t cdc_progress_pending(struct cdc_progress *p, bool *blocked)
{
    pthread_mutex_lock(&p->mu);
    uint64_t n = p->next - p->base;
    if (blocked) *blocked = p->blocked;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void cdc_progress_backlog(struct cdc_progress *p, struct cdc_backlog *b)
{
    pthread_mutex_lock(&p->mu);
    b->pending = p->next - p->base;
    b->blocked = p->blocked;
    b->blocked_since_ms = p->blocked_since_ms;
    b->bytes = sizeof *p + p->cap + p->ptcap * sizeof *p->pts + p->filecap * sizeof *p->files;
    pthread_mutex_unlock(&p->mu);
}

/* ------------------------------------------------------------ GTIDs */

int cdc_gtid_parse(const char *s, struct cdc_gtid *out, size_t max, size_t *n)
{
    *n = 0;
    if (!s) return -1;
    while (*s == ' ') s++;
    if (!*s) return 0;
    for (;;) {
        unsigned long long v[3];
        for (int i = 0; i < 3; i++) {
            if (*s < '0' || *s > '9') return -1;
            char *end;
            errno = 0;
            v[i] = strtoull(s, &end, 10);
            if (errno || (i < 2 && v[i] > UINT32_MAX)) return -1;
            s = end;
            if (i < 2 && *s++ != '-') return -1;
        }
        if (*n == max) return -1;
        for (size_t i = 0; i < *n; i++)
            if (out[i].domain == v[0]) return -1; /* one GTID per domain */
        out[*n].domain = (uint32_t)v[0];
        out[*n].server = (uint32_t)v[1];
        out[*n].seq = v[2];
        (*n)++;
        while (*s == ' ') s++;
        if (!*s) return 0;
        if (*s++ != ',') return -1;
        while (*s == ' ') s++;
    }
}

int cdc_gtid_format(char *buf, size_t len, const struct cdc_gtid *g, size_t n)
{
    if (len == 0) return -1;
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        int w = snprintf(buf + off, len - off, "%s%" PRIu32 "-%" PRIu32 "-%" PRIu64, i ? "," : "",
                         g[i].domain, g[i].server, g[i].seq);
        if (w < 0 || (size_t)w >= len - off) {
            buf[0] = '\0';
            return -1;
        }
        off += (size_t)w;
    }
    return (int)off;
}

/* ------------------------------------------------------------ text form */

int cdc_checkpoint_format(char *buf, size_t len, const struct cdc_ckpt *c)
{
    if (len == 0) return -1;
    int n = snprintf(buf, len, "%s:%" PRIu64, c->file, c->pos);
    if (n >= 0 && (size_t)n < len && c->server_id)
        n += snprintf(buf + n, len - (size_t)n, ";server_id=%" PRIu32, c->server_id);
    if (n >= 0 && (size_t)n < len && c->gtid_known)
        n += snprintf(buf + n, len - (size_t)n, ";gtid=%s", c->gtid);
    if (n < 0 || (size_t)n >= len) {
        buf[0] = '\0';
        return -1;
    }
    return n;
}

int cdc_checkpoint_parse(const char *value, const char *key, struct cdc_ckpt *c, char *err,
                         size_t errlen)
{
    memset(c, 0, sizeof *c);
    char head[CDC_FILE_MAX + 32];
    const char *semi = value ? strchr(value, ';') : NULL;
    size_t hl = semi ? (size_t)(semi - value) : (value ? strlen(value) : 0);
    bool ok = value && hl < sizeof head;
    if (ok) {
        memcpy(head, value, hl);
        head[hl] = '\0';
        ok = cdc_position_parse(head, c->file, CDC_FILE_MAX, &c->pos) == 0;
    }
    for (const char *f = semi; ok && f; f = strchr(f + 1, ';')) {
        const char *v = f + 1;
        const char *end = strchr(v, ';');
        size_t fl = end ? (size_t)(end - v) : strlen(v);
        if (strncmp(v, "server_id=", 10) == 0) {
            char *e;
            errno = 0;
            unsigned long long id = strtoull(v + 10, &e, 10);
            ok = !errno && e == v + fl && e > v + 10 && id >= 1 && id <= UINT32_MAX;
            c->server_id = (uint32_t)id;
        } else if (strncmp(v, "gtid=", 5) == 0 && fl - 5 < sizeof c->gtid) {
            memcpy(c->gtid, v + 5, fl - 5);
            c->gtid[fl - 5] = '\0';
            struct cdc_gtid g[CDC_GTID_DOMAINS];
            size_t n;
            ok = cdc_gtid_parse(c->gtid, g, CDC_GTID_DOMAINS, &n) == 0;
            c->gtid_known = ok;
        } else {
            ok = false; /* unknown field: written by a newer baton? refuse, never guess */
        }
    }
    if (ok) return 0;
    memset(c, 0, sizeof *c);
    snprintf(err, errlen, "checkpoint %s holds \"%.100s\", not \"file:pos[;server_id=N][;gtid=D-S-N,...]\"",
             key, value ? value : "");
    return -1;
}

int cdc_checkpoint_parse_n(const char *value, size_t len, const char *key, struct cdc_ckpt *c,
                           char *err, size_t errlen)
{
    const char *nul = value ? memchr(value, '\0', len) : NULL;
    if (!nul) return cdc_checkpoint_parse(value, key, c, err, errlen);
    memset(c, 0, sizeof *c);
    size_t at = (size_t)(nul - value);
    snprintf(err, errlen, "checkpoint %s contains a NUL byte (at byte %zu of %zu: \"%.100s\" then %zu "
             "more); refused rather than resumed from the part before it", key, at + 1, len, value,
             len - at - 1);
    return -1;
}

size_t cdc_checkpoint_value_len(const char *buf, size_t cap)
{
    size_t n = cap;
    while (n > 0 && buf[n - 1] == '\0') n--;
    return n;
}
