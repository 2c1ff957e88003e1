/* Delivered-prefix tracking and the checkpoint's text form. See
 * cdc_checkpoint.h. */
#include "endpoints/cdc_checkpoint.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "endpoints/cdc_decode.h"
#include "src/common/util.h"

/* m->seq = term << SEQ_BITS | sequence within the term */
#define SEQ_BITS 44
#define SEQ_MASK ((UINT64_C(1) << SEQ_BITS) - 1)

enum { ST_PENDING = 0, ST_DELIVERED = 1, ST_DROPPED = 2 };

struct point {
    uint64_t seq_end; /* messages with seq < seq_end precede the boundary */
    uint64_t pos;
    char file[CDC_FILE_MAX];
};

struct cdc_progress {
    pthread_mutex_t mu;
    uint64_t term;
    uint64_t base;     /* every seq < base was delivered */
    uint64_t next;     /* next seq to assign */
    uint8_t *st;       /* ring of states for [base, next) */
    size_t cap;        /* power of two */
    bool blocked;
    struct point *pts; /* boundaries, oldest first */
    size_t npts, ptcap;
    char last_file[CDC_FILE_MAX];
    uint64_t last_pos;
};

struct cdc_progress *cdc_progress_create(void)
{
    struct cdc_progress *p = xcalloc(1, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    p->cap = 1024;
    p->st = xcalloc(p->cap, 1);
    p->ptcap = 64;
    p->pts = xcalloc(p->ptcap, sizeof *p->pts);
    return p;
}

void cdc_progress_destroy(struct cdc_progress *p)
{
    if (!p) return;
    pthread_mutex_destroy(&p->mu);
    free(p->st);
    free(p->pts);
    free(p);
}

void cdc_progress_reset(struct cdc_progress *p)
{
    pthread_mutex_lock(&p->mu);
    p->term++;
    p->base = p->next = 0;
    memset(p->st, 0, p->cap);
    p->blocked = false;
    p->npts = 0;
    p->last_file[0] = '\0';
    p->last_pos = 0;
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
        if (!delivered) p->blocked = true;
        while (p->base < p->next && p->st[p->base & (p->cap - 1)] == ST_DELIVERED) {
            p->st[p->base & (p->cap - 1)] = ST_PENDING;
            p->base++;
        }
    }
    pthread_mutex_unlock(&p->mu);
}

void cdc_progress_boundary(struct cdc_progress *p, const char *file, uint64_t pos)
{
    pthread_mutex_lock(&p->mu);
    struct point *last = p->npts ? &p->pts[p->npts - 1] : NULL;
    if (!last || last->seq_end != p->next) {
        if (p->npts == p->ptcap) {
            p->ptcap *= 2;
            p->pts = xrealloc(p->pts, p->ptcap * sizeof *p->pts);
        }
        last = &p->pts[p->npts++];
        last->seq_end = p->next;
    }
    snprintf(last->file, sizeof last->file, "%s", file);
    last->pos = pos;
    pthread_mutex_unlock(&p->mu);
}

bool cdc_progress_checkpoint(struct cdc_progress *p, char file[CDC_FILE_MAX], uint64_t *pos)
{
    bool found = false;
    pthread_mutex_lock(&p->mu);
    size_t k = 0; /* number of points fully delivered */
    while (k < p->npts && p->pts[k].seq_end <= p->base) k++;
    if (k > 0) {
        const struct point *pt = &p->pts[k - 1];
        if (strcmp(pt->file, p->last_file) != 0 || pt->pos != p->last_pos) {
            memcpy(file, pt->file, CDC_FILE_MAX);
            *pos = pt->pos;
            memcpy(p->last_file, pt->file, CDC_FILE_MAX);
            p->last_pos = pt->pos;
            found = true;
        }
        /* keep the newest delivered point (a later boundary may coalesce
         * with it), drop the older ones */
        memmove(p->pts, p->pts + (k - 1), (p->npts - (k - 1)) * sizeof *p->pts);
        p->npts -= k - 1;
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

/* ------------------------------------------------------------ text form */

int cdc_checkpoint_format(char *buf, size_t len, const char *file, uint64_t pos)
{
    if (len == 0) return -1;
    int n = snprintf(buf, len, "%s:%" PRIu64, file, pos);
    if (n < 0 || (size_t)n >= len) {
        buf[0] = '\0';
        return -1;
    }
    return n;
}

int cdc_checkpoint_parse(const char *value, const char *key, char file[CDC_FILE_MAX],
                         uint64_t *pos, char *err, size_t errlen)
{
    if (cdc_position_parse(value, file, CDC_FILE_MAX, pos) == 0) return 0;
    snprintf(err, errlen, "checkpoint %s holds \"%.100s\", not \"file:pos\"", key,
             value ? value : "");
    return -1;
}
