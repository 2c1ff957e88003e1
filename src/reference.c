/* The configuration reference, written from the settings tables (see
 * src/reference.h). One walk over the tables, two renderings: Markdown
 * (docs/reference.md) and roff with the man macros (man/baton.cfg.5). The
 * prose between the tables is written here once, with `code` spans that
 * each rendering turns into its own markup. */
#include "src/reference.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "endpoints/endpoint.h"
#include "src/sink.h"

struct out {
    FILE *f;
    enum reference_format fmt;
    bool bol; /* at the beginning of an output line */
};

int reference_format_parse(const char *s, enum reference_format *out)
{
    if (!s || strcmp(s, "markdown") == 0) {
        *out = REFERENCE_MARKDOWN;
        return 0;
    }
    if (strcmp(s, "man") == 0) {
        *out = REFERENCE_MAN;
        return 0;
    }
    return -1;
}

/* ---- output primitives ---- */

static void put_raw(struct out *o, const char *s)
{
    if (!s[0]) return;
    fputs(s, o->f);
    o->bol = s[strlen(s) - 1] == '\n';
}

static bool word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Text from a table (help, names, defaults): escaped, never markup. */
static void put_text_n(struct out *o, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (o->fmt == REFERENCE_MAN) {
            if (o->bol && (c == '.' || c == '\'')) fputs("\\&", o->f);
            if (c == '\\')
                fputs("\\e", o->f);
            else
                fputc(c, o->f);
        } else {
            /* `_` only where it could open or close emphasis: not inside
             * a name like lease_ttl_ms */
            bool esc = strchr("\\`*<[]", c) != NULL ||
                       (c == '_' && (i == 0 || !word_char(s[i - 1]) || i + 1 == n ||
                                     !word_char(s[i + 1])));
            if (esc) fputc('\\', o->f);
            fputc(c, o->f);
        }
        o->bol = c == '\n';
    }
}

static void put_text(struct out *o, const char *s)
{
    put_text_n(o, s, strlen(s));
}

/* A name or a value, as code. */
static void put_code(struct out *o, const char *s)
{
    if (o->fmt == REFERENCE_MAN) {
        put_raw(o, "\\fB");
        put_text(o, s);
        put_raw(o, "\\fR");
    } else {
        put_raw(o, "`");
        put_raw(o, s);
        put_raw(o, "`");
    }
}

/* Prose written here: `...` spans are code, the rest is text. */
static void put_prose(struct out *o, const char *s)
{
    while (*s) {
        const char *tick = strchr(s, '`');
        if (!tick) {
            put_text(o, s);
            return;
        }
        put_text_n(o, s, (size_t)(tick - s));
        const char *end = strchr(tick + 1, '`');
        if (!end) {
            put_text(o, tick);
            return;
        }
        char code[256];
        size_t n = (size_t)(end - tick - 1);
        if (n >= sizeof code) n = sizeof code - 1;
        memcpy(code, tick + 1, n);
        code[n] = '\0';
        put_code(o, code);
        s = end + 1;
    }
}

/* A paragraph of prose. */
static void para(struct out *o, const char *s)
{
    if (o->fmt == REFERENCE_MAN) put_raw(o, ".PP\n");
    put_prose(o, s);
    put_raw(o, o->fmt == REFERENCE_MAN ? "\n" : "\n\n");
}

/* A heading: level 1 (the document) to 4. The man page has two: .SH for
 * levels 1 and 2 (its upper-case title given as man_title), .SS below. */
static void heading(struct out *o, int level, const char *title, const char *man_title)
{
    if (o->fmt == REFERENCE_MAN) {
        put_raw(o, level <= 2 ? ".SH \"" : ".SS \"");
        const char *t = level <= 2 && man_title ? man_title : title;
        for (const char *p = t; *p; p++)
            if (*p != '`') fputc(*p, o->f);
        put_raw(o, "\"\n");
        return;
    }
    for (int i = 0; i < level; i++) put_raw(o, "#");
    put_raw(o, " ");
    put_raw(o, title);
    put_raw(o, "\n\n");
}

/* A literal block (an example). */
static void example(struct out *o, const char *text)
{
    if (o->fmt == REFERENCE_MAN) {
        put_raw(o, ".PP\n.RS\n.nf\n");
        put_text(o, text);
        put_raw(o, ".fi\n.RE\n");
    } else {
        put_raw(o, "```\n");
        put_raw(o, text);
        put_raw(o, "```\n\n");
    }
}

/* ---- one setting ---- */

static bool word_default(const struct setting_def *d)
{
    return d->type == SETTING_INT && d->word && d->def && strcmp(d->def, d->word) == 0;
}

/* A default as written in a file: strings and words quoted. */
static void put_value(struct out *o, const struct setting_def *d, const char *v)
{
    char buf[300];
    bool quoted = d->type == SETTING_STRING || d->type == SETTING_ENUM ||
                  d->type == SETTING_STRLIST || word_default(d);
    snprintf(buf, sizeof buf, quoted ? "\"%s\"" : "%s", v);
    put_code(o, buf);
}

static void put_quoted_code(struct out *o, const char *v)
{
    char buf[300];
    snprintf(buf, sizeof buf, "\"%s\"", v);
    put_code(o, buf);
}

/* "integer from 1 to 65535, or "auto"" and the like. */
static void put_type(struct out *o, const struct setting_def *d)
{
    char buf[160];
    switch (d->type) {
    case SETTING_BOOL: put_text(o, "boolean"); break;
    case SETTING_DOUBLE: put_text(o, "number"); break;
    case SETTING_STRING: put_text(o, "string"); break;
    case SETTING_STRLIST: put_text(o, "list of strings, or one string"); break;
    case SETTING_GROUP: put_text(o, "group { ... }, settings below"); break;
    case SETTING_ENUM:
        put_text(o, "one of ");
        for (size_t i = 0; d->choices && d->choices[i]; i++) {
            if (i) put_text(o, ", ");
            put_quoted_code(o, d->choices[i]);
        }
        break;
    case SETTING_INT:
        if (d->min == 0 && d->max == 0)
            snprintf(buf, sizeof buf, "integer");
        else if (d->max == INT64_MAX)
            snprintf(buf, sizeof buf, "integer, at least %lld", (long long)d->min);
        else
            snprintf(buf, sizeof buf, "integer from %lld to %lld", (long long)d->min,
                     (long long)d->max);
        put_text(o, buf);
        if (d->word) {
            put_text(o, ", or ");
            put_quoted_code(o, d->word);
        }
        break;
    }
}

static void setting(struct out *o, const struct setting_def *d)
{
    if (o->fmt == REFERENCE_MAN) {
        put_raw(o, ".TP\n.B ");
        put_text(o, d->name);
        put_raw(o, "\n(");
    } else {
        put_raw(o, "- ");
        put_code(o, d->name);
        put_raw(o, " (");
    }
    put_type(o, d);
    if (d->required) put_text(o, "; required");
    if (d->def) {
        put_text(o, "; default ");
        put_value(o, d, d->def);
    }
    if (d->old_name) {
        put_text(o, "; older name ");
        put_code(o, d->old_name);
    }
    put_text(o, ")");
    if (d->help && d->help[0]) {
        put_raw(o, o->fmt == REFERENCE_MAN ? "\n.br\n" : ": ");
        put_text(o, d->help);
    }
    put_raw(o, "\n");
}

/* A table, then a sub-section for each nested group in it. where names the
 * table's place for those sub-sections ("locker", "redis_psub"). */
static void table(struct out *o, const struct setting_def *defs, int level, const char *where)
{
    if (o->fmt == REFERENCE_MAN) put_raw(o, ".PP\n");
    for (const struct setting_def *d = defs; d->name; d++) setting(o, d);
    if (o->fmt == REFERENCE_MARKDOWN) put_raw(o, "\n");
    for (const struct setting_def *d = defs; d->name; d++) {
        if (d->type != SETTING_GROUP || !d->sub) continue;
        char title[200], text[300];
        snprintf(title, sizeof title, "`%s = { ... }` in %s", d->name, where);
        heading(o, level + 1, title, NULL);
        snprintf(text, sizeof text,
                 "A group nested in %s: `%s = { key = value; ... };`. Its defaults apply whether "
                 "or not the group is given.",
                 where, d->name);
        para(o, text);
        char sub_where[200];
        snprintf(sub_where, sizeof sub_where, "%s.%s", where, d->name);
        table(o, d->sub, level + 1, sub_where);
    }
}

/* A main-file group: heading, prose, table. */
static void main_group(struct out *o, const char *name, const char *title, const char *text)
{
    heading(o, 3, title, NULL);
    para(o, text);
    table(o, config_reference_table(name), 3, name);
}

/* ---- the document ---- */

static const char MAIN_EXAMPLE[] = "locker = { backend = \"redis\"; host = \"10.0.0.5\"; port = 6379; };\n"
                                   "lease = { ttl_ms = 3000; };\n"
                                   "sinks = (\n"
                                   "  { name = \"out\"; type = \"stdout\"; },\n"
                                   "  { name = \"hook\"; type = \"http\"; url = \"http://127.0.0.1:8080/in\"; }\n"
                                   ");\n"
                                   "metrics = { listen = \"127.0.0.1:9464\"; };\n"
                                   "log = { level = \"info\"; };\n";

static const char ENDPOINT_EXAMPLE[] = "# endpoints.d/orders.cfg\n"
                                       "name = \"orders\";\n"
                                       "type = \"redis_psub\";\n"
                                       "sink = \"hook\";\n"
                                       "host = \"127.0.0.1\";\n"
                                       "patterns = [ \"orders.*\" ];\n";

static void intro(struct out *o)
{
    para(o, "baton reads one main file (`baton -c FILE`, usually `/etc/baton/baton.cfg`) and one "
            "file per endpoint, every `*.cfg` file of `endpoints_dir` (default `endpoints.d` "
            "beside the main file), loaded in byte order of their names; names starting with a "
            "dot are skipped.");
    para(o, "All of them are in libconfig syntax: `key = value;`, groups `{ ... }`, lists "
            "`( ... )`, arrays `[ ... ]`, strings in double quotes, comments with `#` or `//`, "
            "and `@include \"file\"`. A file larger than 1 MiB, or one that is not a regular "
            "file, is refused.");
    para(o, "Every key is checked against the tables below: an unknown key, a value of the wrong "
            "type, out of its bounds or not one of its choices is an error that names the file "
            "and the line. `baton -c FILE --check-config` checks a configuration without "
            "starting anything.");
    para(o, "An older name of a setting is still read (a warning names the new one); giving both "
            "is an error. A list of strings also takes a single string. An integer setting that "
            "takes a word takes it as a string instead of the number, e.g. "
            "`retries = \"while_leading\"`.");
    para(o, "Secrets are never written in the files: a `password_env` names an environment "
            "variable, a `password_file` a file whose first line is the password. Such a file "
            "must not be readable by others (`chmod 600 FILE`, or 640). A string setting whose "
            "name ends in `_file` may say `\"credential:NAME\"`: the systemd credential NAME "
            "(`LoadCredential=`), read from `$CREDENTIALS_DIRECTORY`.");
}

static void main_file(struct out *o)
{
    heading(o, 2, "The main file", "MAIN FILE");
    para(o, "Top-level settings and the groups `locker`, `lease`, `sinks`, `metrics`, `log`, "
            "`shutdown` and `admin`, every one optional. For example:");
    example(o, MAIN_EXAMPLE);
    heading(o, 3, "Top level", NULL);
    table(o, config_reference_table("main"), 3, "the main file");
    main_group(o, "locker", "`locker = { ... }`",
               "Where the leases are kept: Redis (a single server, or found through Sentinel) or "
               "etcd. Without a `locker` group baton runs in single-process mode: every guard "
               "lets everything through, as if this process were alone.");
    main_group(o, "lease", "`lease = { ... }`",
               "The timing of every ActiveGuard lease; an endpoint may override it with its own "
               "`lease_ttl_ms`, `lease_renew_ms` and `lease_retry_ms`.");
    heading(o, 3, "`sinks = ( { ... }, ... )`", NULL);
    para(o, "A list of groups, one per sink. Every sink has the settings below, and those of its "
            "`type` (see the sink types).");
    table(o, config_reference_table("sink"), 3, "a sink");
    main_group(o, "metrics", "`metrics = { ... }`",
               "The ops listener: `/metrics` (Prometheus), `/healthz`, `/readyz` and `/status`. "
               "Without a `metrics` group there is none.");
    main_group(o, "log", "`log = { ... }`",
               "Logging goes to stderr. The command line's `--log-level` wins over `level`.");
    main_group(o, "shutdown", "`shutdown = { ... }`",
               "What SIGTERM and SIGINT do; an operator's step-down and drain drain as long.");
    main_group(o, "admin", "`admin = { ... }`",
               "Who may send control requests (`POST /v1/...` on the ops listener: step-down, "
               "drain, resume; `baton step-down`, `baton drain`, `baton resume`). Without an "
               "`admin` group only loopback peers may; with `token_file` every control request "
               "must carry `Authorization: Bearer TOKEN`. `GET` pages are not affected.");
}

static void endpoint_files(struct out *o)
{
    heading(o, 2, "Endpoint files", "ENDPOINT FILES");
    para(o, "One file per endpoint in `endpoints_dir`: the settings every endpoint has, and those "
            "of its `type`, all at the top level. For example:");
    example(o, ENDPOINT_EXAMPLE);
    heading(o, 3, "Settings every endpoint has", NULL);
    table(o, config_reference_table("endpoint"), 3, "an endpoint file");
    heading(o, 4, "`replay = { ... }` in an endpoint file", NULL);
    para(o, "With `failover = \"replay\"` only (a type that supports it, guard \"active\" and a "
            "locker): how standbys buffer what they receive, so that a new leader replays what "
            "the old one did not deliver.");
    table(o, config_reference_table("replay"), 4, "replay");
    for (size_t i = 0; endpoint_registry[i]; i++) {
        const struct endpoint_ops *ops = endpoint_registry[i];
        char title[200], text[400];
        snprintf(title, sizeof title, "Endpoint type `%s`", ops->type);
        heading(o, 3, title, NULL);
        snprintf(text, sizeof text,
                 "`type = \"%s\";` takes these settings besides the settings every endpoint "
                 "has.%s",
                 ops->type, ops->replay_check ? " It can do `failover = \"replay\"`." : "");
        para(o, text);
        table(o, ops->settings, 3, ops->type);
    }
}

static void sink_types(struct out *o)
{
    heading(o, 2, "Sink types", "SINK TYPES");
    para(o, "A sink of the main file's `sinks` list takes the settings every sink has and those "
            "of its type.");
    for (size_t i = 0; sink_registry[i]; i++) {
        const struct sink_ops *ops = sink_registry[i];
        char title[200], text[300];
        snprintf(title, sizeof title, "Sink type `%s`", ops->type);
        heading(o, 3, title, NULL);
        snprintf(text, sizeof text, "`type = \"%s\";` takes these settings besides `name`, "
                                    "`type` and `dead_letter`.",
                 ops->type);
        para(o, text);
        table(o, ops->settings, 3, ops->type);
    }
}

static void markdown(struct out *o)
{
    put_raw(o, "<!-- Generated from the settings tables by `baton --print-reference=markdown`: "
               "do not edit.\n"
               "     Regenerate: build/baton --print-reference=markdown > docs/reference.md -->\n");
    heading(o, 1, "baton configuration reference", NULL);
    intro(o);
    main_file(o);
    endpoint_files(o);
    sink_types(o);
}

static void man(struct out *o)
{
    put_raw(o, ".\\\" Generated from the settings tables by `baton --print-reference=man`: do "
               "not edit.\n"
               ".\\\" Regenerate: build/baton --print-reference=man > man/baton.cfg.5\n"
               ".TH BATON.CFG 5 \"\" \"baton\" \"File Formats Manual\"\n"
               ".nh\n"
               ".SH NAME\n"
               "baton.cfg \\- configuration of baton, the single-active consumer gateway\n"
               ".SH SYNOPSIS\n"
               ".I /etc/baton/baton.cfg\n"
               ".br\n"
               ".I /etc/baton/endpoints.d/*.cfg\n");
    heading(o, 2, "Description", "DESCRIPTION");
    intro(o);
    para(o, "Each setting below is given with its type, whether it is required, its default, "
            "its older name if it has one, and what it means.");
    main_file(o);
    endpoint_files(o);
    sink_types(o);
    put_raw(o, ".SH FILES\n"
               ".TP\n"
               ".I /etc/baton/baton.cfg\n"
               "The main file (any other with\n"
               ".BR \"\\-c FILE\" ).\n"
               ".TP\n"
               ".I /etc/baton/endpoints.d/*.cfg\n"
               "One file per endpoint (the default\n"
               ".BR endpoints_dir ).\n"
               ".SH SEE ALSO\n"
               ".BR baton (8)\n");
}

int reference_write(FILE *f, enum reference_format fmt)
{
    struct out o = {.f = f, .fmt = fmt, .bol = true};
    if (fmt == REFERENCE_MAN)
        man(&o);
    else
        markdown(&o);
    return fflush(f) == 0 && !ferror(f) ? 0 : -1;
}
