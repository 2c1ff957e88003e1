/* Logging: the JSON line format (log.format = "json") and the text format
 * it sits beside.
 *
 * Every JSON line is checked by a small strict parser below (RFC 8259
 * objects of string values: only the escapes JSON allows, no raw control
 * character, valid UTF-8 throughout), its strings decoded and compared.
 * log_json_line renders with a fixed time, so whole lines are compared
 * byte for byte; log_write itself is tested by pointing fd 2 at a
 * temporary file for the duration of a call. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

/* 2026-12-02T14:00:00.123Z */
#define FIXED_MS 1796220000123LL

/* ---- a strict checker for one JSON line of string members ---- */

#define MAX_MEMBERS 8

struct member {
    char key[64];
    char value[65536]; /* decoded, NUL terminated (values hold no NUL here) */
    size_t value_len;
};

struct parsed {
    struct member m[MAX_MEMBERS];
    size_t n;
};

/* Length of a valid UTF-8 sequence at s, 0 if none (the RFC 3629 rules). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c < 0xE0) return n >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[1] < 0xA0) return 0;
        if (c == 0xED && s[1] >= 0xA0) return 0;
        return 3;
    }
    if (c >= 0xF0 && c < 0xF5) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && s[1] < 0x90) return 0;
        if (c == 0xF4 && s[1] >= 0x90) return 0;
        return 4;
    }
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static size_t put_utf8(char *out, unsigned cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a JSON string at s[*i] (the opening quote) into out (cap bytes).
 * Returns 0, or -1 with why set. */
static int parse_string(const char *s, size_t n, size_t *i, char *out, size_t cap, size_t *out_len,
                        const char **why)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    if (*i >= n || s[*i] != '"') {
        *why = "expected '\"'";
        return -1;
    }
    (*i)++;
    for (;;) {
        if (*i >= n) {
            *why = "unterminated string";
            return -1;
        }
        if (o + 8 >= cap) {
            *why = "string too long for the checker";
            return -1;
        }
        unsigned char c = u[*i];
        if (c == '"') {
            (*i)++;
            break;
        }
        if (c < 0x20) {
            *why = "raw control character in a string";
            return -1;
        }
        if (c == '\\') {
            if (*i + 1 >= n) {
                *why = "dangling backslash";
                return -1;
            }
            char e = s[*i + 1];
            *i += 2;
            switch (e) {
            case '"': out[o++] = '"'; break;
            case '\\': out[o++] = '\\'; break;
            case '/': out[o++] = '/'; break;
            case 'b': out[o++] = '\b'; break;
            case 'f': out[o++] = '\f'; break;
            case 'n': out[o++] = '\n'; break;
            case 'r': out[o++] = '\r'; break;
            case 't': out[o++] = '\t'; break;
            case 'u': {
                if (*i + 4 > n) {
                    *why = "short \\u escape";
                    return -1;
                }
                unsigned cp = 0;
                for (int k = 0; k < 4; k++) {
                    int h = hexval(s[*i + (size_t)k]);
                    if (h < 0) {
                        *why = "bad hex digit in \\u escape";
                        return -1;
                    }
                    cp = cp * 16 + (unsigned)h;
                }
                *i += 4;
                if (cp >= 0xD800 && cp <= 0xDFFF) {
                    *why = "surrogate escape (never written by log.c)";
                    return -1;
                }
                o += put_utf8(out + o, cp);
                break;
            }
            default:
                *why = "invalid escape";
                return -1;
            }
            continue;
        }
        size_t l = utf8_len(u + *i, n - *i);
        if (l == 0) {
            *why = "invalid UTF-8 in a string";
            return -1;
        }
        memcpy(out + o, s + *i, l);
        o += l;
        *i += l;
    }
    out[o] = '\0';
    *out_len = o;
    return 0;
}

/* line[0..n) must be exactly one JSON object of string members followed by
 * a single '\n'. */
static int parse_line(const char *line, size_t n, struct parsed *p, const char **why)
{
    memset(p, 0, sizeof *p);
    if (n == 0 || line[n - 1] != '\n') {
        *why = "no trailing newline";
        return -1;
    }
    if (memchr(line, '\n', n - 1)) {
        *why = "newline inside the line";
        return -1;
    }
    n--;
    size_t i = 0;
    if (i >= n || line[i] != '{') {
        *why = "expected '{'";
        return -1;
    }
    i++;
    for (;;) {
        if (p->n == MAX_MEMBERS) {
            *why = "too many members";
            return -1;
        }
        struct member *m = &p->m[p->n];
        size_t kl;
        if (parse_string(line, n, &i, m->key, sizeof m->key, &kl, why)) return -1;
        if (i >= n || line[i] != ':') {
            *why = "expected ':'";
            return -1;
        }
        i++;
        if (parse_string(line, n, &i, m->value, sizeof m->value, &m->value_len, why)) return -1;
        for (size_t k = 0; k < p->n; k++)
            if (strcmp(p->m[k].key, m->key) == 0) {
                *why = "duplicate key";
                return -1;
            }
        p->n++;
        if (i < n && line[i] == ',') {
            i++;
            continue;
        }
        if (i < n && line[i] == '}') {
            i++;
            break;
        }
        *why = "expected ',' or '}'";
        return -1;
    }
    if (i != n) {
        *why = "data after the object";
        return -1;
    }
    return 0;
}

static void must_parse(const char *line, size_t n, struct parsed *p)
{
    const char *why = "?";
    if (parse_line(line, n, p, &why)) fail_msg("not a valid JSON line (%s): %.*s", why, (int)n, line);
}

static const struct member *get(const struct parsed *p, const char *key)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->m[i].key, key) == 0) return &p->m[i];
    return NULL;
}

/* The checker itself refuses what it must. */
static void test_checker_rejects_bad_json(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "{\"a\":\"b\"}",           /* no newline */
        "{\"a\":\"b\"}\n\n",       /* two lines */
        "{\"a\":\"b\x01\"}\n",     /* raw control character */
        "{\"a\":\"b\xff\"}\n",     /* invalid UTF-8 */
        "{\"a\":\"\\x41\"}\n",     /* invalid escape */
        "{\"a\":\"b\"\n",          /* unterminated object */
        "{\"a\":\"b\",\"a\":\"c\"}\n",
        "{\"a\":\"b\"}x\n",
    };
    struct parsed *p = malloc(sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *why = NULL;
        if (parse_line(bad[i], strlen(bad[i]), p, &why) == 0) fail_msg("checker accepted case %zu", i);
    }
    const char good[] = "{\"a\":\"\\u00e9\\n\"}\n";
    const char *why = NULL;
    if (parse_line(good, strlen(good), p, &why)) fail_msg("checker refused a good line: %s", why);
    assert_string_equal(p->m[0].value, "\xc3\xa9\n");
    free(p);
}

/* ---- log_json_line: exact lines with a fixed time ---- */

static void test_json_line_exact(void **state)
{
    (void)state;
    char buf[8192];
    size_t n = log_json_line(buf, sizeof buf, FIXED_MS, LOG_WARN, "gateway", "orders", "queue full: dropped 3");
    const char want[] = "{\"time\":\"2026-12-02T14:00:00.123Z\",\"level\":\"warn\",\"component\":\"gateway\","
                        "\"endpoint\":\"orders\",\"message\":\"queue full: dropped 3\"}\n";
    assert_int_equal(n, strlen(want));
    assert_memory_equal(buf, want, n);

    /* no endpoint: the key is left out (NULL and "" alike) */
    const char want2[] = "{\"time\":\"2026-12-02T14:00:00.123Z\",\"level\":\"info\",\"component\":\"main\","
                         "\"message\":\"started\"}\n";
    n = log_json_line(buf, sizeof buf, FIXED_MS, LOG_INFO, "main", NULL, "started");
    assert_int_equal(n, strlen(want2));
    assert_memory_equal(buf, want2, n);
    n = log_json_line(buf, sizeof buf, FIXED_MS, LOG_INFO, "main", "", "started");
    assert_int_equal(n, strlen(want2));
    assert_memory_equal(buf, want2, n);

    /* every level name, a NULL component ("baton", as in text), a NULL message */
    const char want3[] = "{\"time\":\"2026-12-02T14:00:00.123Z\",\"level\":\"debug\",\"component\":\"baton\","
                         "\"message\":\"\"}\n";
    n = log_json_line(buf, sizeof buf, FIXED_MS, LOG_DEBUG, NULL, NULL, NULL);
    assert_int_equal(n, strlen(want3));
    assert_memory_equal(buf, want3, n);
    n = log_json_line(buf, sizeof buf, FIXED_MS, LOG_ERROR, "x", NULL, "m");
    assert_non_null(strstr(buf, "\"level\":\"error\""));

    /* a buffer below the minimum is refused */
    assert_int_equal(log_json_line(buf, LOG_JSON_LINE_MIN - 1, FIXED_MS, LOG_INFO, "c", NULL, "m"), 0);
    assert_int_equal(log_json_line(NULL, sizeof buf, FIXED_MS, LOG_INFO, "c", NULL, "m"), 0);
}

/* Quotes, backslashes, newlines, tabs, every control character, DEL,
 * invalid UTF-8 of every kind, and valid multi-byte characters kept. */
static void test_json_line_escaping(void **state)
{
    (void)state;
    const char msg[] = "say \"hi\" \\ path\nline 2\r\n\ttab \x01\x02\x1b[31m\x1f\x7f"
                       " bad:\xff\xfe|\xc0\xaf|\xe2\x82|\xed\xa0\x80|\xf4\x90\x80\x80|\x80"
                       " good:\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \x08\x0c end";
    char buf[8192];
    size_t n = log_json_line(buf, sizeof buf, FIXED_MS, LOG_ERROR, "redis_psub", "ord\"ers\n", msg);
    struct parsed *p = malloc(sizeof *p);
    assert_non_null(p);
    must_parse(buf, n, p);
    assert_int_equal(p->n, 5);
    assert_string_equal(p->m[0].key, "time");
    assert_string_equal(p->m[0].value, "2026-12-02T14:00:00.123Z");
    assert_string_equal(p->m[1].key, "level");
    assert_string_equal(p->m[1].value, "error");
    assert_string_equal(p->m[2].key, "component");
    assert_string_equal(p->m[2].value, "redis_psub");
    assert_string_equal(p->m[3].key, "endpoint");
    assert_string_equal(p->m[3].value, "ord\"ers\n");
    assert_string_equal(p->m[4].key, "message");
    /* decoded: the same text, each byte that does not start valid UTF-8 as
     * U+FFFD (EF BF BD); control characters and DEL round-trip */
#define FFFD "\xef\xbf\xbd"
    const char want[] = "say \"hi\" \\ path\nline 2\r\n\ttab \x01\x02\x1b[31m\x1f\x7f"
                        " bad:" FFFD FFFD "|" FFFD FFFD "|" FFFD FFFD "|" FFFD FFFD FFFD "|" FFFD FFFD FFFD FFFD
                        "|" FFFD " good:\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \x08\x0c end";
#undef FFFD
    assert_string_equal(p->m[4].value, want);
    /* and the raw escapes are the short ones where JSON has them */
    assert_non_null(strstr(buf, "say \\\"hi\\\" \\\\ path\\nline 2\\r\\n\\ttab \\u0001\\u0002\\u001b[31m\\u001f\\u007f"));
    assert_non_null(strstr(buf, "\\b\\f end\"}\n"));
    free(p);
}

/* A string that does not fit is cut between characters, ends in "...",
 * and the line stays valid and within the buffer. */
static void test_json_line_bounds(void **state)
{
    (void)state;
    struct parsed *p = malloc(sizeof *p);
    assert_non_null(p);
    char *msg = malloc(20000);
    assert_non_null(msg);
    char buf[LOG_JSON_LINE_MIN + 64];

    /* plain text: exactly filling the buffer is not a cut, one byte more is */
    size_t head = log_json_line(buf, sizeof buf, FIXED_MS, LOG_INFO, "c", NULL, "");
    size_t room = sizeof buf - head; /* message bytes that still fit */
    memset(msg, 'a', room);
    msg[room] = '\0';
    size_t n = log_json_line(buf, sizeof buf, FIXED_MS, LOG_INFO, "c", NULL, msg);
    assert_int_equal(n, sizeof buf);
    must_parse(buf, n, p);
    assert_int_equal(get(p, "message")->value_len, room);
    msg[room] = 'a';
    msg[room + 1] = '\0';
    n = log_json_line(buf, sizeof buf, FIXED_MS, LOG_INFO, "c", NULL, msg);
    assert_true(n <= sizeof buf);
    must_parse(buf, n, p);
    const struct member *m = get(p, "message");
    assert_true(m->value_len >= 3 && memcmp(m->value + m->value_len - 3, "...", 3) == 0);

    /* escapes and multi-byte characters are never split */
    static const char *const units[] = { "\x01", "\xe2\x82\xac", "\xff", "\"", "\xf0\x9f\x98\x80" };
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
        for (size_t extra = 0; extra < 8; extra++) {
            size_t ul = strlen(units[u]), len = 0;
            for (size_t k = 0; k < extra; k++) msg[len++] = 'x';
            while (len + ul < 5000) {
                memcpy(msg + len, units[u], ul);
                len += ul;
            }
            msg[len] = '\0';
            n = log_json_line(buf, sizeof buf, FIXED_MS, LOG_INFO, "c", "e", msg);
            assert_true(n > 0 && n <= sizeof buf);
            must_parse(buf, n, p);
            m = get(p, "message");
            assert_true(memcmp(m->value + m->value_len - 3, "...", 3) == 0);
        }
    }

    /* long names are cut too, within their own bound */
    memset(msg, 'n', 2000);
    msg[2000] = '\0';
    n = log_json_line(buf, sizeof buf, FIXED_MS, LOG_INFO, msg, msg, "m");
    must_parse(buf, n, p);
    assert_true(get(p, "component")->value_len < 300);
    assert_true(get(p, "endpoint")->value_len < 300);
    assert_string_equal(get(p, "message")->value, "m");
    free(msg);
    free(p);
}

/* ---- log_write: fd 2 captured in a temporary file ---- */

struct capture {
    char path[512];
    int fd, saved;
};

static void capture_start(struct capture *c)
{
    const char *dir = getenv("TMPDIR");
    snprintf(c->path, sizeof c->path, "%s/baton-test-log-XXXXXX", dir && *dir ? dir : "/tmp");
    c->fd = mkstemp(c->path);
    assert_true(c->fd >= 0);
    c->saved = dup(STDERR_FILENO);
    assert_true(c->saved >= 0);
    assert_int_equal(dup2(c->fd, STDERR_FILENO), STDERR_FILENO);
}

/* Restores fd 2; returns what was written (malloc'd, NUL terminated). */
static char *capture_end(struct capture *c, size_t *len)
{
    assert_int_equal(dup2(c->saved, STDERR_FILENO), STDERR_FILENO);
    close(c->saved);
    off_t size = lseek(c->fd, 0, SEEK_END);
    assert_true(size >= 0);
    char *out = malloc((size_t)size + 1);
    assert_non_null(out);
    assert_int_equal(pread(c->fd, out, (size_t)size, 0), size);
    out[size] = '\0';
    close(c->fd);
    unlink(c->path);
    *len = (size_t)size;
    return out;
}

static bool time_shape_ok(const char *t)
{
    /* YYYY-MM-DDTHH:MM:SS.mmmZ */
    static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";
    if (strlen(t) != sizeof shape - 1) return false;
    for (size_t i = 0; shape[i]; i++) {
        if (shape[i] == 'd' ? !(t[i] >= '0' && t[i] <= '9') : t[i] != shape[i]) return false;
    }
    return true;
}

static void test_log_write_json(void **state)
{
    (void)state;
    enum log_level old_level = log_get_level();
    log_set_level(LOG_INFO);
    log_set_format(LOG_FORMAT_JSON);
    assert_int_equal(log_get_format(), LOG_FORMAT_JSON);
    struct capture c;
    capture_start(&c);
    errno = 1234;
    log_warn("gateway", "orders", "sink \"%s\" failed:\n%s\t(%d)", "hook", "HTTP 503 \xff", 7);
    assert_int_equal(errno, 1234); /* errno is preserved */
    log_info("main", NULL, "exit");
    log_debug("main", NULL, "filtered out by the level");
    size_t len;
    char *out = capture_end(&c, &len);
    log_set_format(LOG_FORMAT_TEXT);
    log_set_level(old_level);

    char *nl = strchr(out, '\n');
    assert_non_null(nl);
    struct parsed *p = malloc(sizeof *p);
    assert_non_null(p);
    must_parse(out, (size_t)(nl - out) + 1, p);
    assert_int_equal(p->n, 5);
    assert_true(time_shape_ok(get(p, "time")->value));
    assert_string_equal(get(p, "level")->value, "warn");
    assert_string_equal(get(p, "component")->value, "gateway");
    assert_string_equal(get(p, "endpoint")->value, "orders");
    assert_string_equal(get(p, "message")->value, "sink \"hook\" failed:\nHTTP 503 \xef\xbf\xbd\t(7)");

    char *second = nl + 1;
    nl = strchr(second, '\n');
    assert_non_null(nl);
    must_parse(second, (size_t)(nl - second) + 1, p);
    assert_int_equal(p->n, 4);
    assert_null(get(p, "endpoint"));
    assert_string_equal(get(p, "message")->value, "exit");
    assert_string_equal(nl + 1, ""); /* the debug line was not written */
    free(p);
    free(out);
}

/* A message cut by the 4 KiB bound ends in "..." without a broken
 * character before it. */
static void test_log_write_json_long_message(void **state)
{
    (void)state;
    char *big = malloc(6000);
    assert_non_null(big);
    memset(big, 'a', 4094);
    strcpy(big + 4094, "\xe2\x82\xac tail"); /* the euro sign straddles the cut */
    log_set_format(LOG_FORMAT_JSON);
    struct capture c;
    capture_start(&c);
    log_error("c", NULL, "%s", big);
    size_t len;
    char *out = capture_end(&c, &len);
    log_set_format(LOG_FORMAT_TEXT);
    struct parsed *p = malloc(sizeof *p);
    assert_non_null(p);
    must_parse(out, len, p);
    const struct member *m = get(p, "message");
    assert_int_equal(m->value_len, 4094 + 3);
    assert_memory_equal(m->value + 4090, "aaaa...", 7);
    free(p);
    free(out);
    free(big);
}

/* The text format is unchanged: "<time> LEVEL component[endpoint]: message",
 * newlines as spaces. */
static void test_log_write_text_unchanged(void **state)
{
    (void)state;
    log_set_format(LOG_FORMAT_TEXT);
    struct capture c;
    capture_start(&c);
    log_warn("gateway", "orders", "sink \"%s\" failed:\n%s", "hook", "HTTP 503");
    log_error("main", NULL, "exit");
    log_error(NULL, "", "no component");
    size_t len;
    char *out = capture_end(&c, &len);
    char *lines[3];
    char *save = NULL;
    lines[0] = strtok_r(out, "\n", &save);
    lines[1] = strtok_r(NULL, "\n", &save);
    lines[2] = strtok_r(NULL, "\n", &save);
    assert_null(strtok_r(NULL, "\n", &save));
    for (int i = 0; i < 3; i++) {
        assert_non_null(lines[i]);
        char ts[25];
        memcpy(ts, lines[i], 24);
        ts[24] = '\0';
        assert_true(time_shape_ok(ts));
        assert_int_equal(lines[i][24], ' ');
    }
    assert_string_equal(lines[0] + 25, "WARN gateway[orders]: sink \"hook\" failed: HTTP 503");
    assert_string_equal(lines[1] + 25, "ERROR main: exit");
    assert_string_equal(lines[2] + 25, "ERROR baton: no component");
    free(out);
}

/* Threads logging at once: every line is whole (one write per line). */
#define THREADS 4
#define PER_THREAD 200

static void *log_thread(void *arg)
{
    long id = (long)arg;
    for (int i = 0; i < PER_THREAD; i++)
        log_info("worker", "ep", "thread %ld line %d \"quoted\"\twith\ttabs and a long tail %0200d", id, i, 0);
    return NULL;
}

static void test_log_write_json_threads(void **state)
{
    (void)state;
    log_set_format(LOG_FORMAT_JSON);
    struct capture c;
    capture_start(&c);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) assert_int_equal(pthread_create(&t[i], NULL, log_thread, (void *)i), 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    size_t len;
    char *out = capture_end(&c, &len);
    log_set_format(LOG_FORMAT_TEXT);
    struct parsed *p = malloc(sizeof *p);
    assert_non_null(p);
    int seen[THREADS] = { 0 };
    size_t lines = 0;
    for (char *s = out; *s;) {
        char *nl = strchr(s, '\n');
        assert_non_null(nl);
        must_parse(s, (size_t)(nl - s) + 1, p);
        long id;
        int i;
        assert_int_equal(sscanf(get(p, "message")->value, "thread %ld line %d", &id, &i), 2);
        assert_true(id >= 0 && id < THREADS);
        assert_int_equal(i, seen[id]); /* each thread's lines in order */
        seen[id]++;
        lines++;
        s = nl + 1;
    }
    assert_int_equal(lines, THREADS * PER_THREAD);
    free(p);
    free(out);
}

static void test_format_names(void **state)
{
    (void)state;
    assert_string_equal(log_format_name(LOG_FORMAT_TEXT), "text");
    assert_string_equal(log_format_name(LOG_FORMAT_JSON), "json");
    log_set_format((enum log_format)7); /* out of range: text */
    assert_int_equal(log_get_format(), LOG_FORMAT_TEXT);
    log_set_format(LOG_FORMAT_JSON);
    assert_int_equal(log_get_format(), LOG_FORMAT_JSON);
    log_set_format(LOG_FORMAT_TEXT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checker_rejects_bad_json),
        cmocka_unit_test(test_json_line_exact),
        cmocka_unit_test(test_json_line_escaping),
        cmocka_unit_test(test_json_line_bounds),
        cmocka_unit_test(test_log_write_json),
        cmocka_unit_test(test_log_write_json_long_message),
        cmocka_unit_test(test_log_write_text_unchanged),
        cmocka_unit_test(test_log_write_json_threads),
        cmocka_unit_test(test_format_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
