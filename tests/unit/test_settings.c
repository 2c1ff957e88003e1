/* settings_parse on every setting type, defaults, ranges, enums, unknown
 * keys; config_error_format; secret_resolve (env, file, neither, both,
 * missing; files others can read, over 64 KiB, in $CREDENTIALS_DIRECTORY);
 * "credential:NAME" in *_file settings ($CREDENTIALS_DIRECTORY).
 * Each case reads a real file so that file and line are checked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/settings.h"

struct all {
    bool b;
    int64_t i;
    int64_t port;
    double d;
    char *s;
    struct strlist l;
    int e;
    char *opt;       /* optional string without default */
    int64_t opt_int; /* optional int without default */
};

static const char *const colours[] = { "red", "green", "blue", NULL };

static const struct setting_def all_defs[] = {
    { "b", SETTING_BOOL, offsetof(struct all, b), .def = "true", .help = "a flag" },
    { "i", SETTING_INT, offsetof(struct all, i), .def = "-7", .help = "unbounded int" },
    { "port", SETTING_INT, offsetof(struct all, port), .def = "6379", .min = 1, .max = 65535,
      .help = "TCP port" },
    { "d", SETTING_DOUBLE, offsetof(struct all, d), .def = "0.5", .help = "a ratio" },
    { "s", SETTING_STRING, offsetof(struct all, s), .def = "hello", .help = "a word" },
    { "l", SETTING_STRLIST, offsetof(struct all, l), .def = "a,b,c", .help = "patterns" },
    { "e", SETTING_ENUM, offsetof(struct all, e), .def = "green", .choices = colours,
      .help = "a colour" },
    { "opt", SETTING_STRING, offsetof(struct all, opt), .help = NULL },
    { "opt_int", SETTING_INT, offsetof(struct all, opt_int), .min = 1, .max = 10 },
    SETTINGS_END
};

static char tmpdir[] = "/tmp/baton-test-settings-XXXXXX";

static int setup_dir(void **state)
{
    (void)state;
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_dir(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static char path[512];

/* Writes text to <tmpdir>/t.cfg and reads it into cf; returns the group
 * named "g" (or the root when group is NULL). */
static const config_setting_t *load(config_t *cf, const char *text, const char *group)
{
    snprintf(path, sizeof path, "%s/t.cfg", tmpdir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    config_init(cf);
    if (config_read_file(cf, path) != CONFIG_TRUE)
        fail_msg("test fixture does not parse: %s:%d %s", path, config_error_line(cf), config_error_text(cf));
    const config_setting_t *r = config_root_setting(cf);
    return group ? config_setting_get_member(r, group) : r;
}

/* Parses text with all_defs; expects failure at line with msg containing want. */
static void expect_error(const char *text, int line, const char *want)
{
    config_t cf;
    const config_setting_t *g = load(&cf, text, "g");
    struct all a = { 0 };
    struct config_error err = { 0 };
    int rc = settings_parse(all_defs, g, NULL, "thing 'x'", &a, &err);
    settings_free(all_defs, &a);
    config_destroy(&cf);
    if (rc != -1) fail_msg("expected an error containing '%s' for:\n%s", want, text);
    char buf[1200];
    config_error_format(&err, buf, sizeof buf);
    print_message("  %s\n", buf);
    assert_string_equal(err.file, path);
    assert_int_equal(err.line, line);
    if (!strstr(err.msg, want)) fail_msg("message '%s' lacks '%s'", err.msg, want);
    if (!strstr(err.msg, "thing 'x'")) fail_msg("message '%s' does not name the object", err.msg);
}

static void test_defaults(void **state)
{
    (void)state;
    config_t cf;
    const config_setting_t *g = load(&cf, "g = { };\n", "g");
    struct all a = { 0 };
    struct config_error err = { 0 };
    assert_int_equal(settings_parse(all_defs, g, NULL, "thing", &a, &err), 0);
    assert_true(a.b);
    assert_int_equal(a.i, -7);
    assert_int_equal(a.port, 6379);
    assert_true(a.d == 0.5);
    assert_string_equal(a.s, "hello");
    assert_int_equal(a.l.n, 3);
    assert_string_equal(a.l.v[0], "a");
    assert_string_equal(a.l.v[1], "b");
    assert_string_equal(a.l.v[2], "c");
    assert_int_equal(a.e, 1);
    assert_null(a.opt);
    assert_int_equal(a.opt_int, 0);
    settings_free(all_defs, &a);
    assert_null(a.s);
    assert_null(a.l.v);
    assert_int_equal(a.l.n, 0);
    config_destroy(&cf);
}

static void test_null_group_gives_defaults(void **state)
{
    (void)state;
    struct all a = { 0 };
    struct config_error err = { 0 };
    assert_int_equal(settings_parse(all_defs, NULL, NULL, "thing", &a, &err), 0);
    assert_int_equal(a.port, 6379);
    assert_string_equal(a.s, "hello");
    settings_free(all_defs, &a);
}

static void test_every_type_given(void **state)
{
    (void)state;
    config_t cf;
    const config_setting_t *g = load(&cf,
                                     "g = {\n"
                                     "  b = false;\n"
                                     "  i = 12345678901L;\n"
                                     "  port = 65535;\n"
                                     "  d = 3;\n"
                                     "  s = \"w\\\"orld\";\n"
                                     "  l = [\"x\", \"y\"];\n"
                                     "  e = \"blue\";\n"
                                     "  opt = \"\";\n"
                                     "  opt_int = 10;\n"
                                     "};\n",
                                     "g");
    struct all a = { 0 };
    struct config_error err = { 0 };
    assert_int_equal(settings_parse(all_defs, g, NULL, "thing", &a, &err), 0);
    assert_false(a.b);
    assert_int_equal(a.i, 12345678901LL);
    assert_int_equal(a.port, 65535);
    assert_true(a.d == 3.0);
    assert_string_equal(a.s, "w\"orld");
    assert_int_equal(a.l.n, 2);
    assert_string_equal(a.l.v[0], "x");
    assert_string_equal(a.l.v[1], "y");
    assert_int_equal(a.e, 2);
    assert_string_equal(a.opt, "");
    assert_int_equal(a.opt_int, 10);
    settings_free(all_defs, &a);
    config_destroy(&cf);
}

static void test_strlist_forms(void **state)
{
    (void)state;
    config_t cf;
    /* one string; a list ( ) of strings; an empty list */
    const char *texts[] = { "g = { l = \"only\"; };\n", "g = { l = (\"p\", \"q\", \"r\"); };\n",
                            "g = { l = [ ]; };\n" };
    size_t want_n[] = { 1, 3, 0 };
    for (size_t t = 0; t < 3; t++) {
        const config_setting_t *g = load(&cf, texts[t], "g");
        struct all a = { 0 };
        struct config_error err = { 0 };
        assert_int_equal(settings_parse(all_defs, g, NULL, "thing", &a, &err), 0);
        assert_int_equal(a.l.n, want_n[t]);
        if (t == 0) assert_string_equal(a.l.v[0], "only");
        if (t == 1) assert_string_equal(a.l.v[2], "r");
        settings_free(all_defs, &a);
        config_destroy(&cf);
    }
}

static void test_double_accepts_float_and_int64(void **state)
{
    (void)state;
    config_t cf;
    const config_setting_t *g = load(&cf, "g = { d = -2.25; };\n", "g");
    struct all a = { 0 };
    struct config_error err = { 0 };
    assert_int_equal(settings_parse(all_defs, g, NULL, "thing", &a, &err), 0);
    assert_true(a.d == -2.25);
    settings_free(all_defs, &a);
    config_destroy(&cf);
    g = load(&cf, "g = { d = 10000000000L; };\n", "g");
    memset(&a, 0, sizeof a);
    assert_int_equal(settings_parse(all_defs, g, NULL, "thing", &a, &err), 0);
    assert_true(a.d == 1e10);
    settings_free(all_defs, &a);
    config_destroy(&cf);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("g = {\n  b = 1;\n};\n", 2, "'b' expected a boolean (true or false) (a flag), got an integer");
    expect_error("g = {\n\n  i = \"12\";\n};\n", 3, "'i' expected an integer (unbounded int), got a string");
    expect_error("g = {\n  i = 1.5;\n};\n", 2, "'i' expected an integer");
    expect_error("g = { port = 70000; };\n", 1, "port = 70000 is out of range 1..65535 (TCP port)");
    expect_error("g = {\n port = 0;\n};\n", 2, "port = 0 is out of range 1..65535");
    expect_error("g = {\n port = -1;\n};\n", 2, "port = -1 is out of range 1..65535");
    expect_error("g = {\n opt_int = 11;\n};\n", 2, "opt_int = 11 is out of range 1..10");
    expect_error("g = {\n d = \"x\";\n};\n", 2, "'d' expected a number (a ratio), got a string");
    expect_error("g = {\n d = true;\n};\n", 2, "'d' expected a number");
    expect_error("g = {\n s = 5;\n};\n", 2, "'s' expected a string (a word), got an integer");
    expect_error("g = {\n s = { };\n};\n", 2, "'s' expected a string (a word), got a group");
    expect_error("g = {\n l = 3;\n};\n", 2, "'l' expected a string or a list of strings (patterns), got an integer");
    expect_error("g = {\n l = (\"a\",\n 2);\n};\n", 3, "'l' expected a list of strings (patterns), element 2 is an integer");
    expect_error("g = {\n e = \"purple\";\n};\n", 2, "e = \"purple\": expected one of red, green, blue");
    expect_error("g = {\n e = \"Red\";\n};\n", 2, "expected one of red, green, blue");
    expect_error("g = {\n e = 1;\n};\n", 2, "'e' expected one of \"red, green, blue\" (a quoted string), got an integer");
    expect_error("g = {\n port = 1;\n  prot = 2;\n};\n", 3,
                 "unknown key 'prot' (did you mean 'port'?); valid keys: b, i, port, d, s, l, e, opt, opt_int");
}

static void test_unknown_key_before_other_errors(void **state)
{
    (void)state;
    /* the misspelt key is reported, not the value error on a later line */
    expect_error("g = {\n port = 70000;\n  colour = 1;\n};\n", 3, "unknown key 'colour'; valid keys");
}

/* A renamed setting: the old name still fills it (with a warning, not
 * checked here: it goes to the log), the new one wins nothing over it
 * silently: both at once is an error naming the old one's line. */
static void test_old_name(void **state)
{
    (void)state;
    struct ren {
        int64_t reconnect_min_ms;
    };
    static const struct setting_def ren_defs[] = {
        { "reconnect_min_ms", SETTING_INT, offsetof(struct ren, reconnect_min_ms), .def = "100",
          .min = 1, .max = 1000, .old_name = "reconnect_backoff_ms" },
        SETTINGS_END
    };
    config_t cf;
    struct config_error err = { 0 };
    struct ren r = { 0 };
    const config_setting_t *g = load(&cf, "g = {\n reconnect_backoff_ms = 250;\n};\n", "g");
    assert_int_equal(settings_parse(ren_defs, g, NULL, "endpoint 'x'", &r, &err), 0);
    assert_int_equal(r.reconnect_min_ms, 250);
    config_destroy(&cf);

    memset(&r, 0, sizeof r);
    g = load(&cf, "g = {\n reconnect_backoff_ms = 5000;\n};\n", "g");
    assert_int_equal(settings_parse(ren_defs, g, NULL, "endpoint 'x'", &r, &err), -1);
    assert_int_equal(err.line, 2); /* its range applies under the old name too */
    config_destroy(&cf);

    memset(&r, 0, sizeof r);
    g = load(&cf, "g = {\n reconnect_min_ms = 300;\n reconnect_backoff_ms = 250;\n};\n", "g");
    assert_int_equal(settings_parse(ren_defs, g, NULL, "endpoint 'x'", &r, &err), -1);
    assert_int_equal(err.line, 3);
    assert_non_null(strstr(err.msg, "keep only 'reconnect_min_ms'"));
    config_destroy(&cf);

    memset(&r, 0, sizeof r);
    g = load(&cf, "g = {\n reconnect_min_ms = 300;\n};\n", "g");
    assert_int_equal(settings_parse(ren_defs, g, NULL, "endpoint 'x'", &r, &err), 0);
    assert_int_equal(r.reconnect_min_ms, 300);
    config_destroy(&cf);
}

/* An integer setting that also takes a word ("auto"), stored as 0. */
static void test_int_or_word(void **state)
{
    (void)state;
    struct w {
        int64_t max_in_flight;
    };
    static const struct setting_def w_defs[] = {
        { "max_in_flight", SETTING_INT, offsetof(struct w, max_in_flight), .def = "auto",
          .min = 1, .max = 1024, .word = "auto" },
        SETTINGS_END
    };
    config_t cf;
    struct config_error err = { 0 };
    struct w r = { 7 };
    const config_setting_t *g = load(&cf, "g = {\n};\n", "g");
    assert_int_equal(settings_parse(w_defs, g, NULL, "sink 'x'", &r, &err), 0);
    assert_int_equal(r.max_in_flight, 0); /* the default word */
    config_destroy(&cf);

    g = load(&cf, "g = {\n max_in_flight = 64;\n};\n", "g");
    assert_int_equal(settings_parse(w_defs, g, NULL, "sink 'x'", &r, &err), 0);
    assert_int_equal(r.max_in_flight, 64);
    config_destroy(&cf);

    g = load(&cf, "g = {\n max_in_flight = \"auto\";\n};\n", "g");
    assert_int_equal(settings_parse(w_defs, g, NULL, "sink 'x'", &r, &err), 0);
    assert_int_equal(r.max_in_flight, 0);
    config_destroy(&cf);

    g = load(&cf, "g = {\n max_in_flight = \"many\";\n};\n", "g");
    assert_int_equal(settings_parse(w_defs, g, NULL, "sink 'x'", &r, &err), -1);
    assert_int_equal(err.line, 2);
    assert_non_null(strstr(err.msg, "max_in_flight = \"many\": expected an integer (1 to 1024) or \"auto\""));
    config_destroy(&cf);

    g = load(&cf, "g = {\n max_in_flight = 0;\n};\n", "g");
    assert_int_equal(settings_parse(w_defs, g, NULL, "sink 'x'", &r, &err), -1);
    config_destroy(&cf);
}

static void test_also_allowed_and_required(void **state)
{
    (void)state;
    struct req {
        char *cron;
        struct strlist pats;
    };
    static const struct setting_def req_defs[] = {
        { "cron", SETTING_STRING, offsetof(struct req, cron), .required = true,
          .help = "6-field cron expression" },
        { "pats", SETTING_STRLIST, offsetof(struct req, pats), .required = true, .help = "patterns" },
        SETTINGS_END
    };
    static const char *const also[] = { "name", "type", NULL };
    config_t cf;
    struct config_error err = { 0 };
    struct req r = { 0 };

    /* file-level group: keys of the other table are allowed */
    const config_setting_t *root = load(&cf, "name = \"n\";\ntype = \"schedule\";\ncron = \"* * * * * *\";\npats = \"p\";\n", NULL);
    assert_int_equal(settings_parse(req_defs, root, also, "endpoint 'n'", &r, &err), 0);
    assert_string_equal(r.cron, "* * * * * *");
    assert_int_equal(r.pats.n, 1);
    settings_free(req_defs, &r);
    config_destroy(&cf);

    /* missing required key in a file-level group: the file and line 1 */
    root = load(&cf, "name = \"n\";\n\npats = \"p\";\n", NULL);
    memset(&r, 0, sizeof r);
    assert_int_equal(settings_parse(req_defs, root, also, "endpoint 'n'", &r, &err), -1);
    settings_free(req_defs, &r);
    config_destroy(&cf);
    assert_string_equal(err.file, path);
    assert_int_equal(err.line, 1);
    assert_non_null(strstr(err.msg, "endpoint 'n': missing required key 'cron' (6-field cron expression)"));

    /* missing required key in a nested group: the group's line */
    root = load(&cf, "x = 1;\ng = {\n  cron = \"c\";\n};\n", NULL);
    memset(&r, 0, sizeof r);
    assert_int_equal(settings_parse(req_defs, config_setting_get_member(root, "g"), NULL, "obj", &r, &err), -1);
    settings_free(req_defs, &r);
    config_destroy(&cf);
    assert_int_equal(err.line, 2);
    assert_non_null(strstr(err.msg, "missing required key 'pats'"));

    /* a required list must not be empty */
    root = load(&cf, "g = {\n  cron = \"c\";\n  pats = [];\n};\n", NULL);
    memset(&r, 0, sizeof r);
    assert_int_equal(settings_parse(req_defs, config_setting_get_member(root, "g"), NULL, "obj", &r, &err), -1);
    settings_free(req_defs, &r);
    config_destroy(&cf);
    assert_int_equal(err.line, 3);
    assert_non_null(strstr(err.msg, "'pats' must not be empty"));

    /* unknown key lists the also-allowed keys too */
    root = load(&cf, "name = \"n\";\ncron = \"c\";\npats = \"p\";\nextra = 1;\n", NULL);
    memset(&r, 0, sizeof r);
    assert_int_equal(settings_parse(req_defs, root, also, "endpoint 'n'", &r, &err), -1);
    settings_free(req_defs, &r);
    config_destroy(&cf);
    assert_int_equal(err.line, 4);
    assert_non_null(strstr(err.msg, "unknown key 'extra'; valid keys: cron, pats, name, type"));
}

static void test_not_a_group(void **state)
{
    (void)state;
    config_t cf;
    const config_setting_t *root = load(&cf, "a = 1;\ng = 5;\n", NULL);
    struct all a = { 0 };
    struct config_error err = { 0 };
    assert_int_equal(settings_parse(all_defs, config_setting_get_member(root, "g"), NULL, "thing", &a, &err), -1);
    settings_free(all_defs, &a);
    config_destroy(&cf);
    assert_int_equal(err.line, 2);
    assert_non_null(strstr(err.msg, "thing: expected a group"));
}

static void test_bad_default_is_reported(void **state)
{
    (void)state;
    struct one {
        int64_t n;
    };
    static const struct setting_def bad[] = {
        { "n", SETTING_INT, offsetof(struct one, n), .def = "12x" },
        SETTINGS_END,
    };
    struct one o = { 0 };
    struct config_error err = { 0 };
    assert_int_equal(settings_parse(bad, NULL, NULL, "thing", &o, &err), -1);
    assert_non_null(strstr(err.msg, "bad default \"12x\""));
}

static void test_error_format(void **state)
{
    (void)state;
    struct config_error err;
    char buf[700];
    config_error_set(&err, "/etc/baton/baton.cfg", 12, "locker: port = %d is out of range 1..65535", 70000);
    config_error_format(&err, buf, sizeof buf);
    assert_string_equal(buf, "/etc/baton/baton.cfg:12: locker: port = 70000 is out of range 1..65535");
    config_error_set(&err, "/x.cfg", 0, "cannot read file: %s", "Permission denied");
    config_error_format(&err, buf, sizeof buf);
    assert_string_equal(buf, "/x.cfg: cannot read file: Permission denied");
    config_error_set(&err, NULL, 0, "plain");
    config_error_format(&err, buf, sizeof buf);
    assert_string_equal(buf, "plain");
    /* truncation is safe */
    config_error_set(&err, "/a/b.cfg", 3, "abcdefghij");
    config_error_format(&err, buf, 12);
    assert_string_equal(buf, "/a/b.cfg:3:");
}

static void write_text(const char *p, const char *text)
{
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(p, 0600), 0);
}

static void test_secret_env(void **state)
{
    (void)state;
    char *out = (char *)1;
    char msg[256];
    setenv("BATON_TEST_SECRET", "s3cret value", 1);
    assert_int_equal(secret_resolve("BATON_TEST_SECRET", NULL, &out, msg, sizeof msg), 0);
    assert_string_equal(out, "s3cret value");
    free(out);

    unsetenv("BATON_TEST_SECRET_UNSET");
    assert_int_equal(secret_resolve("BATON_TEST_SECRET_UNSET", NULL, &out, msg, sizeof msg), -1);
    assert_null(out);
    assert_non_null(strstr(msg, "environment variable 'BATON_TEST_SECRET_UNSET' is not set"));

    setenv("BATON_TEST_SECRET_EMPTY", "", 1);
    assert_int_equal(secret_resolve("BATON_TEST_SECRET_EMPTY", NULL, &out, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "'BATON_TEST_SECRET_EMPTY' is empty"));
}

static void test_secret_file(void **state)
{
    (void)state;
    char p[600], msg[700];
    char *out = NULL;
    snprintf(p, sizeof p, "%s/secret", tmpdir);

    write_text(p, "pa ss\r\nsecond line ignored\n");
    assert_int_equal(secret_resolve(NULL, p, &out, msg, sizeof msg), 0);
    assert_string_equal(out, "pa ss");
    free(out);

    write_text(p, "no-newline");
    assert_int_equal(secret_resolve(NULL, p, &out, msg, sizeof msg), 0);
    assert_string_equal(out, "no-newline");
    free(out);

    write_text(p, "\n");
    assert_int_equal(secret_resolve(NULL, p, &out, msg, sizeof msg), -1);
    assert_null(out);
    assert_non_null(strstr(msg, "is empty"));

    snprintf(p, sizeof p, "%s/no-such-secret", tmpdir);
    assert_int_equal(secret_resolve(NULL, p, &out, msg, sizeof msg), -1);
    assert_null(out);
    assert_non_null(strstr(msg, "cannot read secret file"));
    assert_non_null(strstr(msg, p));
    assert_non_null(strstr(msg, "No such file or directory"));

    /* a directory is not a secret */
    assert_int_equal(secret_resolve(NULL, tmpdir, &out, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "not a regular file"));

    /* nor a FIFO: refused at once, never waiting for a writer */
    snprintf(p, sizeof p, "%s/secret-fifo", tmpdir);
    assert_int_equal(mkfifo(p, 0600), 0);
    assert_int_equal(secret_resolve(NULL, p, &out, msg, sizeof msg), -1);
    assert_null(out);
    assert_non_null(strstr(msg, "not a regular file"));
    unlink(p);
}

/* As ssh: a secret file others may read (or write) is refused, naming the
 * file, its mode and the fix; group access is fine. */
static void test_secret_file_mode(void **state)
{
    (void)state;
    char p[600], msg[700];
    char *out = NULL;
    snprintf(p, sizeof p, "%s/secret-mode", tmpdir);
    write_text(p, "Pw-s3cr3t\n");
    static const struct {
        mode_t mode;
        const char *word; /* NULL: accepted */
    } cases[] = {
        { 0600, NULL }, { 0400, NULL }, { 0640, NULL }, { 0660, NULL },
        { 0644, "readable" }, { 0604, "readable" }, { 0666, "readable" },
        { 0602, "writable" }, { 0601, "accessible" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(chmod(p, cases[i].mode), 0);
        int rc = secret_resolve(NULL, p, &out, msg, sizeof msg);
        if (!cases[i].word) {
            if (rc != 0) fail_msg("mode %04o: refused: %s", (unsigned)cases[i].mode, msg);
            assert_string_equal(out, "Pw-s3cr3t");
            secret_free(out);
            out = NULL;
            continue;
        }
        if (rc != -1) fail_msg("mode %04o: accepted", (unsigned)cases[i].mode);
        assert_null(out);
        char want[1600];
        snprintf(want, sizeof want, "secret file '%s' is %s by others (mode %04o): chmod 600 %s (or 640)",
                 p, cases[i].word, (unsigned)cases[i].mode, p);
        assert_string_equal(msg, want);
        assert_null(strstr(msg, "Pw-s3cr3t"));
    }
    unlink(p);
}

/* systemd credentials ($CREDENTIALS_DIRECTORY) are fine whatever their
 * mode: the directory is the service's alone. Elsewhere, no. */
static void test_secret_file_credentials_dir(void **state)
{
    (void)state;
    char dir[600], p[700], msg[900];
    char *out = NULL;
    snprintf(dir, sizeof dir, "%s/creds", tmpdir);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(p, sizeof p, "%s/redis-password", dir);
    write_text(p, "from-systemd\n");
    assert_int_equal(chmod(p, 0644), 0);

    unsetenv("CREDENTIALS_DIRECTORY");
    assert_int_equal(secret_resolve(NULL, p, &out, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "readable by others (mode 0644)"));

    setenv("CREDENTIALS_DIRECTORY", dir, 1);
    assert_int_equal(secret_resolve(NULL, p, &out, msg, sizeof msg), 0);
    assert_string_equal(out, "from-systemd");
    secret_free(out);
    out = NULL;
    /* the same file named through a path that is not the directory's own */
    char other[800];
    snprintf(other, sizeof other, "%s/../creds/./redis-password", dir);
    assert_int_equal(secret_resolve(NULL, other, &out, msg, sizeof msg), 0);
    secret_free(out);
    out = NULL;

    /* a file beside the credentials directory is not in it */
    char beside[700];
    snprintf(beside, sizeof beside, "%s/creds-not", tmpdir);
    write_text(beside, "x\n");
    assert_int_equal(chmod(beside, 0644), 0);
    assert_int_equal(secret_resolve(NULL, beside, &out, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "readable by others"));
    unsetenv("CREDENTIALS_DIRECTORY");
    unlink(beside);
    unlink(p);
    rmdir(dir);
}

/* At most 64 KiB: a bigger file is refused naming file and limit, before
 * anything is read. */
static void test_secret_file_size(void **state)
{
    (void)state;
    char p[600], msg[700];
    char *out = NULL;
    snprintf(p, sizeof p, "%s/secret-big", tmpdir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("big-secret\n", f);
    for (size_t n = strlen("big-secret\n"); n < SECRET_FILE_MAX; n++) fputc('x', f);
    fclose(f);
    assert_int_equal(chmod(p, 0600), 0);
    /* exactly the limit: fine (the secret is the first line) */
    assert_int_equal(secret_resolve(NULL, p, &out, msg, sizeof msg), 0);
    assert_string_equal(out, "big-secret");
    secret_free(out);
    out = NULL;

    f = fopen(p, "a");
    assert_non_null(f);
    fputc('y', f);
    fclose(f);
    assert_int_equal(secret_resolve(NULL, p, &out, msg, sizeof msg), -1);
    assert_null(out);
    char want[1600];
    snprintf(want, sizeof want, "secret file '%s' is %d bytes; secret files are limited to 64 KiB (65536 "
             "bytes; the secret is its first line)", p, SECRET_FILE_MAX + 1);
    assert_string_equal(msg, want);
    unlink(p);

    /* a NUL in the first line would cut the secret short: refused */
    snprintf(p, sizeof p, "%s/secret-nul", tmpdir);
    f = fopen(p, "w");
    assert_non_null(f);
    fwrite("ab\0cd\n", 1, 6, f);
    fclose(f);
    assert_int_equal(chmod(p, 0600), 0);
    assert_int_equal(secret_resolve(NULL, p, &out, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "NUL byte"));
    unlink(p);
    secret_free(NULL);
}

static void test_secret_neither_and_both(void **state)
{
    (void)state;
    char *out = (char *)1;
    char msg[256];
    assert_int_equal(secret_resolve(NULL, NULL, &out, msg, sizeof msg), 0);
    assert_null(out);
    setenv("BATON_TEST_SECRET", "x", 1);
    assert_int_equal(secret_resolve("BATON_TEST_SECRET", "/etc/hostname", &out, msg, sizeof msg), -1);
    assert_null(out);
    assert_non_null(strstr(msg, "give only one"));
    assert_non_null(strstr(msg, "BATON_TEST_SECRET"));
}

struct files {
    char *key_file;
    char *label; /* not a *_file setting: "credential:" stays literal */
};

static const struct setting_def file_defs[] = {
    { "key_file", SETTING_STRING, offsetof(struct files, key_file), .help = "a key" },
    { "label", SETTING_STRING, offsetof(struct files, label), .help = "a word" },
    SETTINGS_END
};

/* "credential:NAME" names $CREDENTIALS_DIRECTORY/NAME in *_file settings
 * only; unset variable or a name with '/': an error at the setting's line. */
static void test_credential_files(void **state)
{
    (void)state;
    const char *text = "g = {\n  label = \"credential:x\";\n  key_file = \"credential:tls-key\";\n};\n";
    config_t cf;
    struct files f = { 0 };
    struct config_error err = { 0 };

    setenv("CREDENTIALS_DIRECTORY", "/run/credentials/baton.service", 1);
    const config_setting_t *g = load(&cf, text, "g");
    assert_int_equal(settings_parse(file_defs, g, NULL, "locker", &f, &err), 0);
    assert_string_equal(f.key_file, "/run/credentials/baton.service/tls-key");
    assert_string_equal(f.label, "credential:x");
    settings_free(file_defs, &f);
    config_destroy(&cf);

    unsetenv("CREDENTIALS_DIRECTORY");
    memset(&f, 0, sizeof f);
    g = load(&cf, text, "g");
    assert_int_equal(settings_parse(file_defs, g, NULL, "locker", &f, &err), -1);
    settings_free(file_defs, &f);
    config_destroy(&cf);
    assert_string_equal(err.file, path);
    assert_int_equal(err.line, 3);
    if (!strstr(err.msg, "key_file") || !strstr(err.msg, "CREDENTIALS_DIRECTORY"))
        fail_msg("message '%s' does not name the setting and the variable", err.msg);

    setenv("CREDENTIALS_DIRECTORY", "/run/credentials/baton.service", 1);
    memset(&f, 0, sizeof f);
    memset(&err, 0, sizeof err);
    g = load(&cf, "g = { key_file = \"credential:../etc/shadow\"; };\n", "g");
    assert_int_equal(settings_parse(file_defs, g, NULL, "locker", &f, &err), -1);
    settings_free(file_defs, &f);
    config_destroy(&cf);
    assert_int_equal(err.line, 1);
    if (!strstr(err.msg, "one file name")) fail_msg("message '%s'", err.msg);
    unsetenv("CREDENTIALS_DIRECTORY");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_null_group_gives_defaults),
        cmocka_unit_test(test_every_type_given),
        cmocka_unit_test(test_strlist_forms),
        cmocka_unit_test(test_double_accepts_float_and_int64),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_unknown_key_before_other_errors),
        cmocka_unit_test(test_also_allowed_and_required),
        cmocka_unit_test(test_not_a_group),
        cmocka_unit_test(test_bad_default_is_reported),
        cmocka_unit_test(test_error_format),
        cmocka_unit_test(test_secret_env),
        cmocka_unit_test(test_secret_file),
        cmocka_unit_test(test_secret_file_mode),
        cmocka_unit_test(test_secret_file_credentials_dir),
        cmocka_unit_test(test_secret_file_size),
        cmocka_unit_test(test_secret_neither_and_both),
        cmocka_unit_test(test_credential_files),
        cmocka_unit_test(test_old_name),
        cmocka_unit_test(test_int_or_word),
    };
    return cmocka_run_group_tests(tests, setup_dir, remove_dir);
}
