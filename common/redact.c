/* Masking the user information of URLs in text shown to people. See
 * redact.h. */
#include "common/redact.h"

#include <string.h>

/* Where the authority that starts at a ends. */
static const char *authority_end(const char *a)
{
    while (*a && *a != '/' && *a != '?' && *a != '#' && (unsigned char)*a > 0x20 && *a != 0x7f) a++;
    return a;
}

/* The last '@' in [a, e), or NULL. */
static const char *last_at(const char *a, const char *e)
{
    const char *at = NULL;
    for (const char *p = a; p < e; p++)
        if (*p == '@') at = p;
    return at;
}

struct out {
    char *p;
    size_t len, used;
};

static void put(struct out *o, const char *s, size_t n)
{
    if (o->len == 0) return;
    size_t room = o->len - 1 - o->used;
    if (n > room) n = room;
    memcpy(o->p + o->used, s, n);
    o->used += n;
    o->p[o->used] = '\0';
}

char *redact_urls(const char *text, char *out, size_t len)
{
    struct out o = { out, len, 0 };
    if (len) out[0] = '\0';
    if (!text) return out;
    const char *s = text;
    for (;;) {
        const char *sep = strstr(s, "://");
        if (!sep) break;
        const char *a = sep + 3;
        put(&o, s, (size_t)(a - s));
        const char *e = authority_end(a);
        const char *at = last_at(a, e);
        if (at) {
            const char *colon = memchr(a, ':', (size_t)(at - a));
            if (colon) put(&o, a, (size_t)(colon + 1 - a));
            put(&o, REDACT_MASK, strlen(REDACT_MASK));
            s = at; /* the '@' and the host follow */
        } else {
            s = a;
        }
    }
    put(&o, s, strlen(s));
    return out;
}

bool redact_needed(const char *text)
{
    for (const char *s = text; s && (s = strstr(s, "://")); s += 3) {
        const char *a = s + 3;
        if (last_at(a, authority_end(a))) return true;
    }
    return false;
}

void redact_urls_inplace(char *buf, size_t cap)
{
    if (!buf || cap == 0 || !redact_needed(buf)) return;
    char tmp[8192];
    size_t n = cap < sizeof tmp ? cap : sizeof tmp;
    redact_urls(buf, tmp, n);
    memcpy(buf, tmp, strlen(tmp) + 1);
}
