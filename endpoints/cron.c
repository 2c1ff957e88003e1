/* Cron parser and slot computation, with a private time zone reader (TZif +
 * POSIX TZ rules) so no process-wide TZ state is touched. See cron.h. */
#include "endpoints/cron.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define ZONEINFO_DIR "/usr/share/zoneinfo"
#define TZ_FILE_MAX (1 << 20)
#define SEARCH_YEARS 400

/* ------------------------------------------------------------------------ */
/* Civil calendar (proleptic Gregorian), after H. Hinnant's algorithms. */

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = floor_div(y, 400);
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    z += 719468;
    int64_t era = floor_div(z, 146097);
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static bool is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int days_in_month(int64_t y, int m)
{
    static const int n[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : n[m - 1];
}

/* 0 = Sunday. 1970-01-01 was a Thursday. */
static int weekday_from_days(int64_t z)
{
    return (int)(((z % 7) + 11) % 7);
}

/* ------------------------------------------------------------------------ */
/* Time zones */

struct tz_rule_date {
    char kind;    /* 'M' month.week.day, 'J' julian 1-365, 'N' zero-based day */
    int m, w, d;  /* kind M */
    int n;        /* kind J / N */
    int32_t time; /* seconds after local midnight (may be negative or > 24h) */
};

struct tz_posix {
    int32_t std_off; /* UTC offset, seconds east */
    int32_t dst_off;
    bool has_dst;
    struct tz_rule_date start, end;
};

struct cron_tz {
    int64_t *trans;  /* transition instants, ascending */
    uint8_t *idx;    /* type index per transition */
    int32_t *utoff;  /* per type */
    uint8_t *isdst;  /* per type */
    size_t ntrans, ntypes;
    bool has_footer;
    struct tz_posix posix;
};

static void tz_free(struct cron_tz *z)
{
    if (!z) return;
    free(z->trans);
    free(z->idx);
    free(z->utoff);
    free(z->isdst);
    free(z);
}

static int64_t be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}

static int32_t be32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

/* POSIX TZ string parsing ("CET-1CEST,M3.5.0,M10.5.0/3"). */
static const char *posix_name(const char *p)
{
    if (*p == '<') {
        const char *q = strchr(p, '>');
        return q ? q + 1 : NULL;
    }
    const char *s = p;
    while (isalpha((unsigned char)*p)) p++;
    return p - s >= 3 ? p : NULL;
}

/* [+-]hh[:mm[:ss]] -> seconds; returns the end or NULL. */
static const char *posix_hms(const char *p, int32_t *out, int max_hours)
{
    int sign = 1;
    if (*p == '+' || *p == '-') sign = *p++ == '-' ? -1 : 1;
    if (!isdigit((unsigned char)*p)) return NULL;
    long h = 0, m = 0, s = 0;
    while (isdigit((unsigned char)*p)) {
        h = h * 10 + (*p++ - '0');
        if (h > max_hours) return NULL;
    }
    if (*p == ':') {
        p++;
        if (!isdigit((unsigned char)*p)) return NULL;
        while (isdigit((unsigned char)*p)) m = m * 10 + (*p++ - '0');
        if (*p == ':') {
            p++;
            if (!isdigit((unsigned char)*p)) return NULL;
            while (isdigit((unsigned char)*p)) s = s * 10 + (*p++ - '0');
        }
    }
    if (m > 59 || s > 59) return NULL;
    *out = (int32_t)(sign * (h * 3600 + m * 60 + s));
    return p;
}

static const char *posix_num(const char *p, int *out, int lo, int hi)
{
    if (!isdigit((unsigned char)*p)) return NULL;
    long v = 0;
    while (isdigit((unsigned char)*p)) {
        v = v * 10 + (*p++ - '0');
        if (v > hi) return NULL;
    }
    if (v < lo) return NULL;
    *out = (int)v;
    return p;
}

static const char *posix_date(const char *p, struct tz_rule_date *r)
{
    memset(r, 0, sizeof *r);
    if (*p == 'M') {
        r->kind = 'M';
        if (!(p = posix_num(p + 1, &r->m, 1, 12)) || *p++ != '.') return NULL;
        if (!(p = posix_num(p, &r->w, 1, 5)) || *p++ != '.') return NULL;
        if (!(p = posix_num(p, &r->d, 0, 6))) return NULL;
    } else if (*p == 'J') {
        r->kind = 'J';
        if (!(p = posix_num(p + 1, &r->n, 1, 365))) return NULL;
    } else {
        r->kind = 'N';
        if (!(p = posix_num(p, &r->n, 0, 365))) return NULL;
    }
    r->time = 7200;
    if (*p == '/') p = posix_hms(p + 1, &r->time, 167);
    return p;
}

static int posix_parse(const char *s, struct tz_posix *out)
{
    memset(out, 0, sizeof *out);
    const char *p = posix_name(s);
    int32_t off;
    if (!p || !(p = posix_hms(p, &off, 24))) return -1;
    out->std_off = -off; /* POSIX offsets are west-positive */
    out->dst_off = out->std_off;
    if (*p == 0) return 0;
    if (!(p = posix_name(p))) return -1;
    out->has_dst = true;
    out->dst_off = out->std_off + 3600;
    if (*p && *p != ',') {
        if (!(p = posix_hms(p, &off, 24))) return -1;
        out->dst_off = -off;
    }
    if (*p == 0) { /* no rules given: the POSIX default (US rules) */
        out->start = (struct tz_rule_date){'M', 3, 2, 0, 0, 7200};
        out->end = (struct tz_rule_date){'M', 11, 1, 0, 0, 7200};
        return 0;
    }
    if (*p++ != ',' || !(p = posix_date(p, &out->start))) return -1;
    if (*p++ != ',' || !(p = posix_date(p, &out->end))) return -1;
    return *p == 0 ? 0 : -1;
}

/* Local midnight (in days since the epoch) of a rule date in year y. */
static int64_t rule_day(const struct tz_rule_date *r, int64_t y)
{
    if (r->kind == 'J') {
        int64_t day = r->n - 1;
        if (is_leap(y) && r->n >= 60) day++;
        return days_from_civil(y, 1, 1) + day;
    }
    if (r->kind == 'N') return days_from_civil(y, 1, 1) + r->n;
    int64_t first = days_from_civil(y, r->m, 1);
    int dow0 = weekday_from_days(first);
    int day = 1 + (r->d - dow0 + 7) % 7 + (r->w - 1) * 7;
    while (day > days_in_month(y, r->m)) day -= 7;
    return first + day - 1;
}

/* Rule transition instants (UTC) of year y. */
static void posix_year(const struct tz_posix *z, int64_t y, int64_t *start, int64_t *end)
{
    *start = rule_day(&z->start, y) * 86400 + z->start.time - z->std_off;
    *end = rule_day(&z->end, y) * 86400 + z->end.time - z->dst_off;
}

static int32_t posix_offset(const struct tz_posix *z, int64_t t)
{
    if (!z->has_dst) return z->std_off;
    int64_t y;
    int m, d;
    civil_from_days(floor_div(t + z->std_off, 86400), &y, &m, &d);
    /* the start is given in standard time, the end in daylight time */
    int64_t start, end;
    posix_year(z, y, &start, &end);
    bool dst = start < end ? (t >= start && t < end) : (t < end || t >= start);
    return dst ? z->dst_off : z->std_off;
}

static int32_t tz_offset(const struct cron_tz *z, int64_t t)
{
    if (!z) return 0;
    if (z->ntrans == 0 || t < z->trans[0]) {
        if (z->ntrans == 0 && z->has_footer) return posix_offset(&z->posix, t);
        /* before the first transition: the first standard-time type */
        for (size_t i = 0; i < z->ntypes; i++)
            if (!z->isdst[i]) return z->utoff[i];
        return z->utoff[0];
    }
    if (t >= z->trans[z->ntrans - 1] && z->has_footer) return posix_offset(&z->posix, t);
    size_t lo = 0, hi = z->ntrans; /* largest i with trans[i] <= t */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (z->trans[mid] <= t) lo = mid;
        else hi = mid;
    }
    return z->utoff[z->idx[lo]];
}

static int zone_name_ok(const char *name)
{
    if (!name[0] || name[0] == '/' || strlen(name) > 200) return 0;
    if (strstr(name, "..")) return 0;
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("/_+-", *p)) return 0;
    return 1;
}

static bool is_utc_name(const char *name)
{
    return !name || !name[0] || strcmp(name, "UTC") == 0;
}

static struct cron_tz *tz_load(const char *name, char *err, size_t errlen)
{
    if (!zone_name_ok(name)) {
        snprintf(err, errlen, "time zone \"%s\": not a zone name (expected \"UTC\" or e.g. \"Europe/Berlin\")", name);
        return NULL;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s", ZONEINFO_DIR, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "time zone \"%s\": cannot open %s: %s", name, path, strerror(errno));
        return NULL;
    }
    unsigned char *buf = xmalloc(TZ_FILE_MAX);
    size_t n = fread(buf, 1, TZ_FILE_MAX, f);
    fclose(f);
    struct cron_tz *z = xcalloc(1, sizeof *z);
    const char *why = "truncated file";
    /* header: "TZif" ver(1) reserved(15) six counts */
    if (n < 44 || memcmp(buf, "TZif", 4) != 0) {
        why = "not a TZif file";
        goto bad;
    }
    if (buf[4] < '2') {
        why = "TZif version 1 is not supported";
        goto bad;
    }
    size_t off = 0;
    uint32_t c[6];
    for (int i = 0; i < 6; i++) c[i] = (uint32_t)be32(buf + 20 + 4 * i);
    /* isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt; skip the v1 block */
    off = 44 + (size_t)c[3] * 5 + (size_t)c[4] * 6 + c[5] + (size_t)c[2] * 8 + c[1] + c[0];
    if (n < off + 44 || memcmp(buf + off, "TZif", 4) != 0) goto bad;
    for (int i = 0; i < 6; i++) c[i] = (uint32_t)be32(buf + off + 20 + 4 * i);
    off += 44;
    size_t timecnt = c[3], typecnt = c[4];
    size_t need = timecnt * 9 + typecnt * 6 + c[5] + (size_t)c[2] * 12 + c[1] + c[0];
    if (typecnt == 0 || typecnt > 256 || n < off + need) goto bad;
    z->ntrans = timecnt;
    z->ntypes = typecnt;
    z->trans = xcalloc(timecnt ? timecnt : 1, sizeof *z->trans);
    z->idx = xcalloc(timecnt ? timecnt : 1, 1);
    z->utoff = xcalloc(typecnt, sizeof *z->utoff);
    z->isdst = xcalloc(typecnt, 1);
    for (size_t i = 0; i < timecnt; i++) z->trans[i] = be64(buf + off + 8 * i);
    off += timecnt * 8;
    for (size_t i = 0; i < timecnt; i++) {
        z->idx[i] = buf[off + i];
        if (z->idx[i] >= typecnt) {
            why = "transition type out of range";
            goto bad;
        }
    }
    off += timecnt;
    for (size_t i = 0; i < typecnt; i++) {
        z->utoff[i] = be32(buf + off + 6 * i);
        z->isdst[i] = buf[off + 6 * i + 4];
    }
    off += need - timecnt * 9;
    /* footer: "\n<POSIX TZ>\n" */
    if (off < n && buf[off] == '\n') {
        const unsigned char *e = memchr(buf + off + 1, '\n', n - off - 1);
        if (e && e > buf + off + 1) {
            char tzs[128];
            size_t len = (size_t)(e - (buf + off + 1));
            if (len >= sizeof tzs) {
                why = "footer too long";
                goto bad;
            }
            memcpy(tzs, buf + off + 1, len);
            tzs[len] = 0;
            if (posix_parse(tzs, &z->posix) != 0) {
                why = "unsupported POSIX TZ footer";
                goto bad;
            }
            z->has_footer = true;
        }
    }
    free(buf);
    return z;
bad:
    snprintf(err, errlen, "time zone \"%s\": %s: %s", name, path, why);
    free(buf);
    tz_free(z);
    return NULL;
}

int cron_zone_check(const char *name, char *msg, size_t msglen)
{
    if (is_utc_name(name)) return 0;
    struct cron_tz *z = tz_load(name, msg, msglen);
    if (!z) return -1;
    tz_free(z);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Expressions */

struct cron_expr {
    uint64_t sec, min;
    uint32_t hour, dom;
    uint16_t month;
    uint8_t dow;
    bool dom_star, dow_star, hour_star;
    int64_t every; /* > 0: "@every" period in seconds */
    struct cron_tz *tz;
    char *zone;
};

enum field_id { F_SEC, F_MIN, F_HOUR, F_DOM, F_MONTH, F_DOW, F_COUNT };

struct field_meta {
    const char *name;
    int lo, hi;
    const char *const *names; /* names[i] is value names_base + i */
    int names_base;
};

static const char *const month_names[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL",
                                          "AUG", "SEP", "OCT", "NOV", "DEC", NULL};
static const char *const dow_names[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", NULL};

static const struct field_meta fields[F_COUNT] = {
    {"second", 0, 59, NULL, 0},         {"minute", 0, 59, NULL, 0},
    {"hour", 0, 23, NULL, 0},           {"day-of-month", 1, 31, NULL, 0},
    {"month", 1, 12, month_names, 1},   {"day-of-week", 0, 7, dow_names, 0},
};

static void seterr(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t len, const char *fmt, ...)
{
    if (!len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

/* A number or a name; returns the end of the value or NULL. */
static const char *parse_value(const char *p, const char *end, const struct field_meta *fm, int *out,
                               char *why, size_t whylen)
{
    if (p < end && isdigit((unsigned char)*p)) {
        long v = 0;
        while (p < end && isdigit((unsigned char)*p)) {
            v = v * 10 + (*p++ - '0');
            if (v > 100000) break;
        }
        if (v < fm->lo || v > fm->hi) {
            snprintf(why, whylen, "value %ld out of range %d-%d", v, fm->lo, fm->hi);
            return NULL;
        }
        *out = (int)v;
        return p;
    }
    if (fm->names && end - p >= 3) {
        for (int i = 0; fm->names[i]; i++) {
            if (strncasecmp(p, fm->names[i], 3) == 0 && (end - p == 3 || !isalpha((unsigned char)p[3]))) {
                *out = fm->names_base + i;
                return p + 3;
            }
        }
    }
    if (fm->names)
        snprintf(why, whylen, "expected a number %d-%d or a name like %s", fm->lo, fm->hi, fm->names[0]);
    else
        snprintf(why, whylen, "expected a number %d-%d", fm->lo, fm->hi);
    return NULL;
}

/* One field (tok[0..len)) into a bit set. */
static int parse_field(const char *tok, size_t len, enum field_id id, uint64_t *bits, bool *star,
                       char *err, size_t errlen)
{
    const struct field_meta *fm = &fields[id];
    char why[128];
    const char *end = tok + len;
    *bits = 0;
    *star = len > 0 && (tok[0] == '*' || tok[0] == '?');
    const char *item = tok;
    while (item <= end) {
        const char *iend = memchr(item, ',', (size_t)(end - item));
        if (!iend) iend = end;
        const char *p = item;
        int a, b, step = 1;
        bool whole = false;
        if (p == iend) {
            snprintf(why, sizeof why, "empty list item");
            goto bad;
        }
        if (*p == '*' || *p == '?') {
            if (*p == '?' && id != F_DOM && id != F_DOW) {
                snprintf(why, sizeof why, "'?' is only allowed for day-of-month and day-of-week");
                goto bad;
            }
            a = fm->lo;
            b = fm->hi;
            whole = true;
            p++;
        } else {
            if (!(p = parse_value(p, iend, fm, &a, why, sizeof why))) goto bad;
            b = a;
            if (p < iend && *p == '-') {
                if (!(p = parse_value(p + 1, iend, fm, &b, why, sizeof why))) goto bad;
                if (id == F_DOW && b == 0 && a > 0) b = 7; /* "SAT-SUN" */
                if (b < a) {
                    snprintf(why, sizeof why, "range start %d is after its end %d", a, b);
                    goto bad;
                }
            } else if (p < iend && *p == '/') {
                b = fm->hi; /* "a/n": from a to the end of the field */
            }
        }
        if (p < iend && *p == '/') {
            p++;
            long s = 0;
            if (p >= iend || !isdigit((unsigned char)*p)) {
                snprintf(why, sizeof why, "expected a step number after '/'");
                goto bad;
            }
            while (p < iend && isdigit((unsigned char)*p)) {
                s = s * 10 + (*p++ - '0');
                if (s > 1000) break;
            }
            int span = fm->hi - fm->lo + (id == F_DOW ? 0 : 1);
            if (s < 1 || s > span) {
                snprintf(why, sizeof why, "step %ld out of range 1-%d", s, span);
                goto bad;
            }
            step = (int)s;
        }
        if (p != iend) {
            snprintf(why, sizeof why, "unexpected '%c'", *p);
            goto bad;
        }
        if (whole && id == F_DOW) b = 6; /* "*" means 0-6; 7 is an alias */
        for (int v = a; v <= b; v += step) *bits |= (uint64_t)1 << (id == F_DOW && v == 7 ? 0 : v);
        item = iend + 1;
    }
    return 0;
bad:
    seterr(err, errlen, "%s field (field %d) \"%.*s\": %s", fm->name, (int)id + 1, (int)len, tok, why);
    return -1;
}

/* "30s", "5m", "1h30m", "2d", "90" (seconds) -> seconds, or -1. */
static int64_t parse_duration(const char *s)
{
    int64_t total = 0;
    bool any = false;
    while (*s) {
        if (!isdigit((unsigned char)*s)) return -1;
        int64_t v = 0;
        while (isdigit((unsigned char)*s)) {
            v = v * 10 + (*s++ - '0');
            if (v > 100000000) return -1;
        }
        int64_t mul;
        switch (*s) {
        case 's': mul = 1; s++; break;
        case 'm': mul = 60; s++; break;
        case 'h': mul = 3600; s++; break;
        case 'd': mul = 86400; s++; break;
        case 0: /* a bare number of seconds, only on its own */
            if (any) return -1;
            mul = 1;
            break;
        default: return -1;
        }
        total += v * mul;
        if (total > 366 * 86400LL) return -1;
        any = true;
    }
    return any ? total : -1;
}

static const struct {
    const char *name;
    const char *expr;
} macros[] = {
    {"@yearly", "0 0 0 1 1 *"},  {"@annually", "0 0 0 1 1 *"}, {"@monthly", "0 0 0 1 * *"},
    {"@weekly", "0 0 0 * * 0"},  {"@daily", "0 0 0 * * *"},    {"@midnight", "0 0 0 * * *"},
    {"@hourly", "0 0 * * * *"},
};

static int64_t civil_next(const struct cron_expr *e, int64_t L);

static int parse_fields(struct cron_expr *e, const char *text, char *err, size_t errlen)
{
    const char *tok[F_COUNT + 1];
    size_t len[F_COUNT + 1];
    int n = 0;
    const char *p = text;
    for (;;) {
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) break;
        const char *s = p;
        while (*p && *p != ' ' && *p != '\t') p++;
        if (n <= F_COUNT) {
            tok[n] = s;
            len[n] = (size_t)(p - s);
        }
        n++;
    }
    if (n != F_COUNT) {
        seterr(err, errlen, "expected 6 fields (sec min hour dom month dow), got %d", n);
        return -1;
    }
    uint64_t b[F_COUNT];
    bool star[F_COUNT];
    for (int i = 0; i < F_COUNT; i++)
        if (parse_field(tok[i], len[i], (enum field_id)i, &b[i], &star[i], err, errlen) != 0) return -1;
    e->sec = b[F_SEC];
    e->min = b[F_MIN];
    e->hour = (uint32_t)b[F_HOUR];
    e->dom = (uint32_t)b[F_DOM];
    e->month = (uint16_t)b[F_MONTH];
    e->dow = (uint8_t)b[F_DOW];
    e->hour_star = star[F_HOUR];
    e->dom_star = star[F_DOM];
    e->dow_star = star[F_DOW];
    return 0;
}

struct cron_expr *cron_parse(const char *text, const char *tz, char *err, size_t errlen)
{
    if (errlen) err[0] = 0;
    if (!text) {
        seterr(err, errlen, "empty cron expression");
        return NULL;
    }
    struct cron_expr *e = xcalloc(1, sizeof *e);
    char inner[CRON_ERR_MAX];
    const char *t = text;
    while (*t == ' ' || *t == '\t') t++;
    if (*t == '@') {
        size_t wl = strcspn(t, " \t");
        if (wl == 6 && strncasecmp(t, "@every", 6) == 0) {
            char dur[64];
            const char *d = t + 6;
            while (*d == ' ' || *d == '\t') d++;
            size_t dl = strlen(d);
            while (dl && (d[dl - 1] == ' ' || d[dl - 1] == '\t')) dl--;
            if (dl == 0 || dl >= sizeof dur) {
                seterr(err, errlen, "cron \"%s\": @every needs a duration such as 30s, 5m, 1h", text);
                goto fail;
            }
            memcpy(dur, d, dl);
            dur[dl] = 0;
            e->every = parse_duration(dur);
            if (e->every <= 0) {
                seterr(err, errlen,
                       "cron \"%s\": @every: bad duration \"%s\" (expected e.g. 30s, 5m, 1h30m; 1s to 366d)",
                       text, dur);
                goto fail;
            }
        } else {
            const char *expr = NULL;
            for (size_t i = 0; i < sizeof macros / sizeof macros[0]; i++)
                if (strlen(macros[i].name) == wl && strncasecmp(t, macros[i].name, wl) == 0)
                    expr = macros[i].expr;
            const char *rest = t + wl;
            while (*rest == ' ' || *rest == '\t') rest++;
            if (!expr || *rest) {
                seterr(err, errlen,
                       "cron \"%s\": unknown macro \"%.*s\" (expected @every, @yearly, @monthly, @weekly, @daily, @hourly)",
                       text, (int)wl, t);
                goto fail;
            }
            if (parse_fields(e, expr, inner, sizeof inner) != 0) abort(); /* tables are static */
        }
    } else if (parse_fields(e, t, inner, sizeof inner) != 0) {
        seterr(err, errlen, "cron \"%s\": %s", text, inner);
        goto fail;
    }
    if (!is_utc_name(tz)) {
        e->tz = tz_load(tz, err, errlen);
        if (!e->tz) goto fail;
    }
    e->zone = xstrdup(is_utc_name(tz) ? "UTC" : tz);
    if (!e->every && civil_next(e, 0) < 0) {
        seterr(err, errlen, "cron \"%s\": never matches (no such date, e.g. 30 FEB)", text);
        goto fail;
    }
    return e;
fail:
    cron_free(e);
    return NULL;
}

void cron_free(struct cron_expr *e)
{
    if (!e) return;
    tz_free(e->tz);
    free(e->zone);
    free(e);
}

int64_t cron_every_seconds(const struct cron_expr *e)
{
    return e->every;
}

const char *cron_zone_name(const struct cron_expr *e)
{
    return e->zone;
}

int32_t cron_utc_offset(const struct cron_expr *e, int64_t t)
{
    return tz_offset(e->tz, t);
}

/* ------------------------------------------------------------------------ */
/* Slot computation */

/* Lowest set bit >= from (up to hi), or -1. */
static int next_bit(uint64_t bits, int from, int hi)
{
    for (int v = from < 0 ? 0 : from; v <= hi; v++)
        if (bits & ((uint64_t)1 << v)) return v;
    return -1;
}

static bool day_matches(const struct cron_expr *e, int64_t days, int d)
{
    bool dom_ok = e->dom & ((uint32_t)1 << d);
    bool dow_ok = e->dow & (1u << weekday_from_days(days));
    if (e->dom_star || e->dow_star) return dom_ok && dow_ok;
    return dom_ok || dow_ok;
}

/* Smallest matching local civil time (seconds, as if UTC) >= L, or -1. */
static int64_t civil_next(const struct cron_expr *e, int64_t L)
{
    int64_t days = floor_div(L, 86400);
    int64_t rem = L - days * 86400;
    int h = (int)(rem / 3600), mi = (int)(rem / 60 % 60), s = (int)(rem % 60);
    int64_t y;
    int mo, d;
    civil_from_days(days, &y, &mo, &d);
    int64_t limit = y + SEARCH_YEARS;
    for (;;) {
        if (y > limit) return -1;
        if (!(e->month & (1u << mo)) || d > days_in_month(y, mo)) {
            if (++mo > 12) {
                mo = 1;
                y++;
            }
            d = 1;
            h = mi = s = 0;
            continue;
        }
        int64_t dd = days_from_civil(y, mo, d);
        if (!day_matches(e, dd, d)) {
            d++;
            h = mi = s = 0;
            continue;
        }
        int nh = next_bit(e->hour, h, 23);
        if (nh < 0) {
            d++;
            h = mi = s = 0;
            continue;
        }
        if (nh != h) {
            h = nh;
            mi = s = 0;
        }
        int nm = next_bit(e->min, mi, 59);
        if (nm < 0) {
            h++;
            mi = s = 0;
            continue;
        }
        if (nm != mi) {
            mi = nm;
            s = 0;
        }
        int ns = next_bit(e->sec, s, 59);
        if (ns < 0) {
            mi++;
            s = 0;
            continue;
        }
        return dd * 86400 + h * 3600 + mi * 60 + ns;
    }
}

/* Maps a local civil time to UTC. Returns 1 (unique, *a), 2 (ambiguous:
 * *a first occurrence, *b second) or 0 (in a gap: *a = the transition). */
static int local_to_utc(const struct cron_tz *z, int64_t L, int64_t *a, int64_t *b)
{
    int32_t oe = tz_offset(z, L - 86400), ol = tz_offset(z, L + 86400);
    bool ve = tz_offset(z, L - oe) == oe, vl = tz_offset(z, L - ol) == ol;
    if (ve && vl && oe != ol) { /* fall back: the local time occurs twice */
        *a = L - (oe > ol ? oe : ol);
        *b = L - (oe > ol ? ol : oe);
        return 2;
    }
    if (ve || vl) {
        *a = L - (ve ? oe : ol);
        return 1;
    }
    if (ol > oe) { /* spring forward: the transition lies in (L - ol, L - oe] */
        int64_t lo = L - ol, hi = L - oe;
        while (hi - lo > 1) {
            int64_t mid = lo + (hi - lo) / 2;
            if (tz_offset(z, mid) == ol) hi = mid;
            else lo = mid;
        }
        *a = hi;
        return 0;
    }
    /* two transitions within two days (historic oddities): best effort */
    *a = L - tz_offset(z, L - tz_offset(z, L));
    return 1;
}

/* The first instant > t at which the offset may change, or INT64_MAX. */
static int64_t tz_next_transition(const struct cron_tz *z, int64_t t)
{
    if (z->ntrans && t < z->trans[z->ntrans - 1]) {
        size_t lo = 0, hi = z->ntrans - 1; /* first i with trans[i] > t */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (z->trans[mid] > t) hi = mid;
            else lo = mid + 1;
        }
        return z->trans[lo];
    }
    if (!z->has_footer || !z->posix.has_dst) return INT64_MAX;
    int64_t y, best = INT64_MAX;
    int m, d;
    civil_from_days(floor_div(t, 86400), &y, &m, &d);
    for (int64_t yy = y - 1; yy <= y + 1; yy++) {
        int64_t s0, s1;
        posix_year(&z->posix, yy, &s0, &s1);
        if (s0 > t && s0 < best) best = s0;
        if (s1 > t && s1 < best) best = s1;
    }
    return best;
}

/* Walks the zone's segments of constant offset from after+1 on: within a
 * segment local time maps to UTC linearly; a match that falls into a
 * spring-forward gap fires at the transition; a match in the second pass of
 * a fall-back overlap fires only when the hour field begins with '*'. */
int64_t cron_next(const struct cron_expr *e, int64_t after)
{
    if (e->every) return (floor_div(after, e->every) + 1) * e->every;
    int64_t t = after + 1;
    if (!e->tz) return civil_next(e, t);
    int64_t seg = t;
    for (int guard = 0; guard < 100000; guard++) {
        int32_t o = tz_offset(e->tz, seg);
        int64_t next_tr = tz_next_transition(e->tz, seg);
        int64_t L = seg + o, lm, u;
        for (;;) {
            lm = civil_next(e, L);
            if (lm < 0) return -1;
            u = lm - o;
            if (u >= next_tr) break;
            if (!e->hour_star) {
                int64_t a = 0, b = 0;
                if (local_to_utc(e->tz, lm, &a, &b) == 2 && u == b) { /* second pass */
                    L = lm + 1;
                    continue;
                }
            }
            return u;
        }
        if (next_tr == INT64_MAX) return -1;
        int32_t o2 = tz_offset(e->tz, next_tr);
        if (o2 > o && lm < next_tr + o2) return next_tr; /* in the gap */
        seg = next_tr;
    }
    return -1;
}

int64_t cron_latest(const struct cron_expr *e, int64_t prev, int64_t now, int64_t *skipped,
                    int64_t max_count)
{
    if (skipped) *skipped = 0;
    if (now <= prev) return -1;
    if (e->every) {
        int64_t last = floor_div(now, e->every) * e->every;
        if (last <= prev) return -1;
        if (skipped) {
            int64_t first = (floor_div(prev, e->every) + 1) * e->every;
            int64_t n = (last - first) / e->every;
            *skipped = n > max_count ? max_count : n;
        }
        return last;
    }
    int64_t s = cron_next(e, prev);
    if (s < 0 || s > now) return -1;
    int64_t count = 0;
    for (;;) {
        int64_t n = cron_next(e, s);
        if (n < 0 || n > now) {
            if (skipped) *skipped = count;
            return s;
        }
        s = n;
        if (++count >= max_count) break;
    }
    /* too many to count: look back from now in growing windows */
    if (skipped) *skipped = max_count;
    for (int64_t w = 1; w > 0 && now - w > s; w *= 4) {
        int64_t c = cron_next(e, now - w);
        if (c >= 0 && c <= now) {
            for (int64_t n; (n = cron_next(e, c)) >= 0 && n <= now;) c = n;
            return c;
        }
    }
    for (int64_t n; (n = cron_next(e, s)) >= 0 && n <= now;) s = n;
    return s;
}

void cron_format_time(const struct cron_expr *e, int64_t t, char *buf, size_t len)
{
    int32_t off = tz_offset(e->tz, t);
    int64_t L = t + off;
    int64_t days = floor_div(L, 86400), rem = L - days * 86400;
    int64_t y;
    int m, d;
    civil_from_days(days, &y, &m, &d);
    char zone[16];
    if (!e->tz) {
        snprintf(zone, sizeof zone, "Z");
    } else {
        int32_t a = off < 0 ? -off : off;
        snprintf(zone, sizeof zone, "%c%02d:%02d", off < 0 ? '-' : '+', (int)(a / 3600), (int)(a / 60 % 60));
    }
    snprintf(buf, len, "%04lld-%02d-%02dT%02d:%02d:%02d%s", (long long)y, m, d, (int)(rem / 3600),
             (int)(rem / 60 % 60), (int)(rem % 60), zone);
}
