/* See sentinel.h. */
#include "redis/sentinel.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "redis/io.h"
#include "base/glog.h"
#include "base/util.h"

#define DEFAULT_SENTINEL_PORT 26379
#define SWITCH_CHANNEL "+switch-master"

static int64_t mto_of(const struct baton_redis_opts *o)
{
    return o->command_timeout_ms > 0 ? o->command_timeout_ms : 1000;
}

static struct timeval ms_tv(int64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

/* "1".."65535", digits only (strtol takes " +26400abc" as 26400): the
 * port, or -1. */
static long port_of(const char *s)
{
    long v = 0;
    size_t i = 0;
    for (; s[i] >= '0' && s[i] <= '9' && i < 6; i++) v = v * 10 + (s[i] - '0');
    return i > 0 && s[i] == '\0' && s[0] != '0' && v >= 1 && v <= 65535 ? v : -1;
}

bool redis_sentinel_parse_addr(const char *s, char *host, size_t hostlen, int *port)
{
    if (s == NULL || hostlen == 0) return false;
    const char *h = s, *he, *ps = NULL;
    if (s[0] == '[') {
        h = s + 1;
        he = strchr(h, ']');
        if (he == NULL) return false;
        if (he[1] == ':') ps = he + 2;
        else if (he[1] != '\0') return false;
    } else {
        const char *c = strrchr(s, ':');
        if (c && strchr(s, ':') != c) c = NULL; /* a bare IPv6 address: no port */
        he = c ? c : s + strlen(s);
        ps = c ? c + 1 : NULL;
    }
    size_t hl = (size_t)(he - h);
    if (hl == 0 || hl >= hostlen) return false;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = DEFAULT_SENTINEL_PORT;
    if (ps) {
        long v = port_of(ps);
        if (v < 0) return false;
        *port = (int)v;
    }
    return true;
}

bool redis_failover_error(const char *e)
{
    if (e == NULL) return false;
    static const char *const codes[] = {"READONLY", "MASTERDOWN", "LOADING"};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        size_t n = strlen(codes[i]);
        if (strncmp(e, codes[i], n) == 0 && (e[n] == ' ' || e[n] == '\0')) return true;
        /* relayed by a script: "ERR Error running script ... -READONLY You can't ..." */
        char relayed[16];
        snprintf(relayed, sizeof relayed, "-%s ", codes[i]);
        if (strstr(e, relayed)) return true;
    }
    return false;
}

/* A connection to one sentinel (TLS like the data connections when
 * configured: redis_conn_connect), with o's timeouts. NULL with err = the
 * reason (without the address). */
static redisContext *sentinel_connect(const struct baton_redis_opts *o, const char *host, int port,
                                      char *err, size_t errlen)
{
    char e[512];
    e[0] = '\0';
    redisContext *c = redis_conn_connect(o, host, port, e, sizeof e);
    if (c == NULL) {
        /* drop the "redis host:port: " the connect step puts first */
        char plain[300];
        int pl = snprintf(plain, sizeof plain, "redis %s:%d: ", host, port);
        const char *rest = pl > 0 && strncmp(e, plain, (size_t)pl) == 0 ? e + pl : e;
        snprintf(err, errlen, "%s", rest[0] ? rest : "connect failed");
        return NULL;
    }
    if (redisSetTimeout(c, ms_tv(mto_of(o))) != REDIS_OK) {
        snprintf(err, errlen, "cannot set the command timeout");
        redisFree(c);
        return NULL;
    }
    redis_reader_bound(c->reader);
    /* a sentinel's answers are a few addresses: 1 MiB whatever the data
     * connections allow */
    redis_reader_set_max(c->reader, BATON_REDIS_MAX_REPLY_DEFAULT);
    return c;
}

/* The answer to SENTINEL get-master-addr-by-name: 1 = address, 0 = the
 * sentinel does not know the name (why says so), -1 = error (why). */
static int master_answer(const redisReply *r, const char *name, char *host, size_t hostlen,
                         int *port, char *why, size_t whylen)
{
    if (r->type == REDIS_REPLY_NIL) {
        snprintf(why, whylen, "does not know master \"%.60s\"", name);
        return 0;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(why, whylen, "%.120s", r->str);
        return -1;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING) {
        snprintf(why, whylen, "unexpected answer (type %d)", r->type);
        return -1;
    }
    long p = port_of(r->element[1]->str);
    if (r->element[0]->len == 0 || (size_t)r->element[0]->len >= hostlen || p < 1 ||
        memchr(r->element[0]->str, '\0', r->element[0]->len)) {
        snprintf(why, whylen, "unusable address \"%.60s:%.10s\"", r->element[0]->str,
                 r->element[1]->str);
        return -1;
    }
    memcpy(host, r->element[0]->str, (size_t)r->element[0]->len);
    host[r->element[0]->len] = '\0';
    *port = (int)p;
    return 1;
}

int redis_sentinel_resolve(const struct baton_redis_opts *o, char *host, size_t hostlen, int *port,
                           char *err, size_t errlen)
{
    const char *name = o->master_name ? o->master_name : "";
    char whys[1024];
    size_t used = 0;
    whys[0] = '\0';
    for (size_t i = 0; i < o->n_sentinels; i++) {
        const char *s = o->sentinels[i];
        char shost[256], why[200];
        int sport = 0;
        redisContext *c = NULL;
        if (!redis_sentinel_parse_addr(s, shost, sizeof shost, &sport)) {
            snprintf(why, sizeof why, "not a host:port");
        } else if ((c = sentinel_connect(o, shost, sport, why, sizeof why)) != NULL) {
            /* one deadline for the whole answer (redis_get_reply) */
            redisReply *r = redis_commandf(c, "SENTINEL get-master-addr-by-name %s", name);
            if (r == NULL) {
                snprintf(why, sizeof why, "%s", c->errstr[0] ? c->errstr : "connection lost");
            } else {
                int a = master_answer(r, name, host, hostlen, port, why, sizeof why);
                freeReplyObject(r);
                if (a == 1) {
                    redisFree(c);
                    return 0;
                }
            }
            redisFree(c);
        }
        int n = snprintf(whys + used, sizeof whys - used, "%s%.100s: %s", used ? "; " : "", s, why);
        if (n > 0) used = used + (size_t)n < sizeof whys ? used + (size_t)n : sizeof whys - 1;
    }
    snprintf(err, errlen, "redis %s via sentinels: no sentinel gave its master (%s)", name,
             o->n_sentinels ? whys : "no sentinels configured");
    return -1;
}

/* ---- the watchers ---------------------------------------------------------- */

struct redis_sentinel_watch {
    struct redis_sentinel_watch *next; /* registry, under reg_mu */
    char *key;                         /* master name and sentinels */
    int refs;                          /* under reg_mu */
    struct baton_redis_opts o;               /* copy: sentinels, master name, timeouts, tls */
    bool started;
    pthread_t thread;
    atomic_bool stop;
    int wake[2];
    atomic_ullong count;
    pthread_mutex_t mu; /* addr, watch_addr */
    char addr[300];       /* shown: last known master */
    char watch_addr[300]; /* the watcher's own view (its subscriptions) */
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct redis_sentinel_watch *reg;

static char *key_of(const struct baton_redis_opts *o)
{
    size_t n = strlen(o->master_name) + 2;
    for (size_t i = 0; i < o->n_sentinels; i++) n += strlen(o->sentinels[i]) + 1;
    char *k = malloc(n), *p = k;
    if (!k) return NULL;
    p += sprintf(p, "%s\n", o->master_name);
    for (size_t i = 0; i < o->n_sentinels; i++) p += sprintf(p, "%s\n", o->sentinels[i]);
    return k;
}

/* reg_mu held. */
static struct redis_sentinel_watch *reg_find(const char *key)
{
    for (struct redis_sentinel_watch *w = reg; w; w = w->next)
        if (strcmp(w->key, key) == 0) return w;
    return NULL;
}

static void set_addr(struct redis_sentinel_watch *w, const char *addr, bool mine)
{
    pthread_mutex_lock(&w->mu);
    snprintf(w->addr, sizeof w->addr, "%s", addr);
    if (mine) snprintf(w->watch_addr, sizeof w->watch_addr, "%s", addr);
    pthread_mutex_unlock(&w->mu);
}

static void watch_sleep(struct redis_sentinel_watch *w, int64_t ms)
{
    struct pollfd p = {.fd = w->wake[0], .events = POLLIN};
    if (!atomic_load(&w->stop)) poll(&p, 1, (int)ms);
}

static bool flush_out(redisContext *c)
{
    int done = 0;
    while (!done)
        if (redisBufferWrite(c, &done) != REDIS_OK) return false;
    return true;
}

/* A message on +switch-master: "<name> <old ip> <old port> <new ip> <new port>". */
static void on_message(struct redis_sentinel_watch *w, const char *sentinel, redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || strcmp(r->element[0]->str, "message") != 0 ||
        r->element[2]->type != REDIS_REPLY_STRING)
        return;
    char name[256], oh[256], op[16], nh[256], np[16];
    if (sscanf(r->element[2]->str, "%255s %255s %15s %255s %15s", name, oh, op, nh, np) != 5) return;
    if (strcmp(name, w->o.master_name) != 0) return;
    char addr[300];
    snprintf(addr, sizeof addr, "%s:%s", nh, np);
    set_addr(w, addr, true);
    atomic_fetch_add(&w->count, 1);
    glog_info("redis", NULL, "sentinel %s: +switch-master %s: %s:%s -> %s (reconnecting to it)",
             sentinel, name, oh, op, addr);
}

/* One subscription on one sentinel, until it breaks or stop. false (with
 * why) when the subscription could not be set up. */
static bool watch_on(struct redis_sentinel_watch *w, redisContext *c, const char *sentinel,
                     char *why, size_t whylen)
{
    const char *name = w->o.master_name;
    redisAppendCommand(c, "SENTINEL get-master-addr-by-name %s", name);
    redisAppendCommand(c, "SUBSCRIBE " SWITCH_CHANNEL);
    snprintf(why, whylen, "%s", "connection lost");
    if (!flush_out(c)) return false;
    redisReply *q = NULL, *s = NULL;
    if (redis_get_reply(c, (void **)&q) != REDIS_OK || q == NULL) {
        if (c->errstr[0]) snprintf(why, whylen, "%s", c->errstr); /* e.g. no answer within N ms */
        return false;
    }
    char host[256];
    int port = 0;
    int a = master_answer(q, name, host, sizeof host, &port, why, whylen);
    freeReplyObject(q);
    if (a != 1) return false;
    if (redis_get_reply(c, (void **)&s) != REDIS_OK || s == NULL) {
        if (c->errstr[0]) snprintf(why, whylen, "%s", c->errstr);
        return false;
    }
    bool confirmed = s->type == REDIS_REPLY_ARRAY && s->elements == 3 &&
                     s->element[0]->type == REDIS_REPLY_STRING &&
                     strcmp(s->element[0]->str, "subscribe") == 0;
    freeReplyObject(s);
    if (!confirmed) {
        snprintf(why, whylen, "SUBSCRIBE " SWITCH_CHANNEL " not confirmed");
        return false;
    }
    /* a switch while nobody watched shows as a different master */
    char addr[300];
    snprintf(addr, sizeof addr, "%s:%d", host, port);
    pthread_mutex_lock(&w->mu);
    bool moved = w->watch_addr[0] && strcmp(w->watch_addr, addr) != 0;
    pthread_mutex_unlock(&w->mu);
    set_addr(w, addr, true);
    if (moved) {
        atomic_fetch_add(&w->count, 1);
        glog_info("redis", NULL, "sentinel %s: master %s is now %s (switched while unwatched)",
                 sentinel, name, addr);
    }
    glog_debug("redis", NULL, "sentinel %s: watching +switch-master of %s (now %s)", sentinel, name,
              addr);

    int64_t interval = mto_of(&w->o);
    bool ping_out = false;
    int64_t started = 0; /* when the reply now arriving began, 0: none */
    while (!atomic_load(&w->stop)) {
        struct pollfd p[2] = {{.fd = c->fd, .events = POLLIN}, {.fd = w->wake[0], .events = POLLIN}};
        int n = poll(p, 2, (int)interval);
        if (started && clock_mono_ms() - started > interval) {
            glog_warn("redis", NULL, "sentinel %s: no complete message within %lld ms; watching "
                      "another sentinel", sentinel, (long long)interval);
            return true;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            return true;
        }
        if (n == 0) {
            if (ping_out) {
                glog_warn("redis", NULL, "sentinel %s: no answer to PING within %lld ms; watching "
                         "another sentinel", sentinel, (long long)interval);
                return true;
            }
            redisAppendCommand(c, "PING");
            if (!flush_out(c)) return true;
            ping_out = true;
            continue;
        }
        if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        if (redis_buffer_read(c) != REDIS_OK) {
            glog_info("redis", NULL, "sentinel %s: connection lost (%s); watching another sentinel",
                     sentinel, c->errstr[0] ? c->errstr : "closed");
            return true;
        }
        void *rv = NULL;
        int rc;
        while ((rc = redis_next_reply(c, &rv)) == REDIS_OK && rv) {
            redisReply *r = rv;
            ping_out = false; /* any traffic shows it alive */
            on_message(w, sentinel, r);
            freeReplyObject(r);
            rv = NULL;
        }
        if (rc != REDIS_OK) {
            glog_warn("redis", NULL, "sentinel %s: %s; watching another sentinel", sentinel,
                      c->errstr);
            return true;
        }
        if (!redis_reply_pending(c)) started = 0;
        else if (!started) started = clock_mono_ms();
    }
    return true;
}

static void *watch_main(void *arg)
{
    struct redis_sentinel_watch *w = arg;
    size_t idx = 0;
    unsigned fails = 0;
    struct ratelimit rl = {0};
    while (!atomic_load(&w->stop)) {
        const char *s = w->o.sentinels[idx % w->o.n_sentinels];
        idx++;
        char host[256], why[200] = "not a host:port";
        int port = 0;
        redisContext *c = NULL;
        if (redis_sentinel_parse_addr(s, host, sizeof host, &port))
            c = sentinel_connect(&w->o, host, port, why, sizeof why);
        bool connected = false;
        if (c) {
            connected = watch_on(w, c, s, why, sizeof why);
            redisFree(c);
        }
        if (!connected) {
            long long supp = 0;
            if (ratelimit_ok(&rl, 10000, &supp))
                glog_warn("redis", NULL, "sentinel %s: %s (watching %s; %lld similar suppressed)",
                         s, why, w->o.master_name, supp);
        }
        if (atomic_load(&w->stop)) break;
        /* a full round of failures backs off; the next sentinel is tried at once */
        if (connected) {
            fails = 0;
            watch_sleep(w, 50);
        } else if (idx % w->o.n_sentinels == 0) {
            watch_sleep(w, backoff_ms(fails < 6 ? fails : 6, 100, 2000));
            fails++;
        }
    }
    return NULL;
}

struct redis_sentinel_watch *redis_sentinel_watch_acquire(const struct baton_redis_opts *o)
{
    if (o == NULL || o->n_sentinels == 0 || o->master_name == NULL) return NULL;
    char *key = key_of(o);
    if (!key) return NULL; /* out of memory: no watch, the master is asked on each connect */
    pthread_mutex_lock(&reg_mu);
    struct redis_sentinel_watch *w = reg_find(key);
    if (w) {
        w->refs++;
        pthread_mutex_unlock(&reg_mu);
        free(key);
        return w;
    }
    w = calloc(1, sizeof *w);
    if (!w || redis_opts_copy(&w->o, o) != 0) {
        pthread_mutex_unlock(&reg_mu);
        free(w);
        free(key);
        return NULL;
    }
    w->key = key;
    w->refs = 1;
    if (w->o.password) /* not used towards sentinels: wiped, not left in freed memory */
        explicit_bzero(w->o.password, strlen(w->o.password));
    free(w->o.password);
    w->o.password = NULL;
    atomic_init(&w->stop, false);
    atomic_init(&w->count, 0);
    pthread_mutex_init(&w->mu, NULL);
    w->wake[0] = w->wake[1] = -1;
    if (pipe2(w->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        glog_error("redis", NULL, "sentinel watcher of %s: pipe: %s; failovers are followed on "
                  "errors only", o->master_name, strerror(errno));
    } else if (pthread_create(&w->thread, NULL, watch_main, w) != 0) {
        glog_error("redis", NULL, "sentinel watcher of %s: cannot start its thread; failovers "
                  "are followed on errors only", o->master_name);
    } else {
        w->started = true;
        thread_name(w->thread, "sentinel", o->master_name);
    }
    w->next = reg;
    reg = w;
    pthread_mutex_unlock(&reg_mu);
    return w;
}

void redis_sentinel_watch_release(struct redis_sentinel_watch *w)
{
    if (w == NULL) return;
    pthread_mutex_lock(&reg_mu);
    bool last = --w->refs == 0;
    if (last)
        for (struct redis_sentinel_watch **pp = &reg; *pp; pp = &(*pp)->next)
            if (*pp == w) {
                *pp = w->next;
                break;
            }
    pthread_mutex_unlock(&reg_mu);
    if (!last) return;
    atomic_store(&w->stop, true);
    if (w->started) {
        char b = 1;
        ssize_t n = write(w->wake[1], &b, 1);
        (void)n;
        pthread_join(w->thread, NULL);
    }
    if (w->wake[0] >= 0) close(w->wake[0]);
    if (w->wake[1] >= 0) close(w->wake[1]);
    pthread_mutex_destroy(&w->mu);
    redis_opts_clear(&w->o);
    free(w->key);
    free(w);
}

uint64_t redis_sentinel_watch_count(const struct redis_sentinel_watch *w)
{
    return w ? atomic_load(&((struct redis_sentinel_watch *)w)->count) : 0;
}

void redis_sentinel_watch_addr(struct redis_sentinel_watch *w, char *buf, size_t len)
{
    if (len == 0) return;
    buf[0] = '\0';
    if (w == NULL) return;
    pthread_mutex_lock(&w->mu);
    snprintf(buf, len, "%s", w->addr);
    pthread_mutex_unlock(&w->mu);
}

void redis_sentinel_note_master(const struct baton_redis_opts *o, const char *host, int port)
{
    if (o == NULL || o->n_sentinels == 0 || o->master_name == NULL) return;
    char *key = key_of(o);
    if (!key) return;
    char addr[300];
    snprintf(addr, sizeof addr, "%s:%d", host, port);
    pthread_mutex_lock(&reg_mu);
    struct redis_sentinel_watch *w = reg_find(key);
    if (w) set_addr(w, addr, false);
    pthread_mutex_unlock(&reg_mu);
    free(key);
}
