/* Configuration as data: each endpoint type and each sink type declares its
 * settings in one table; validation, defaults and error messages come from it.
 *
 *   struct my_settings { char *host; int64_t port; struct strlist patterns; };
 *   static const struct setting_def my_defs[] = {
 *       { "host", SETTING_STRING, offsetof(struct my_settings, host),
 *         .def = "127.0.0.1", .help = "source host name or address" },
 *       { "port", SETTING_INT, offsetof(struct my_settings, port),
 *         .def = "6379", .min = 1, .max = 65535, .help = "TCP port" },
 *       { "patterns", SETTING_STRLIST, offsetof(struct my_settings, patterns),
 *         .help = "list of PSUBSCRIBE patterns" },
 *       SETTINGS_END
 *   };
 */
#ifndef BATON_SETTINGS_H
#define BATON_SETTINGS_H

#include <libconfig.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum setting_type {
    SETTING_BOOL,    /* bool */
    SETTING_INT,     /* int64_t; accepts libconfig int and int64 */
    SETTING_DOUBLE,  /* double; accepts ints too */
    SETTING_STRING,  /* char * (malloc'd; NULL when absent without default) */
    SETTING_STRLIST, /* struct strlist; accepts a list/array of strings or one string */
    SETTING_ENUM,    /* int: index into choices */
    SETTING_GROUP,   /* a nested group { ... } parsed with .sub into the struct at
                      * offset, whose first member is `bool present` (set when
                      * the group is given; its defaults apply either way) */
};

struct strlist {
    char **v;
    size_t n;
};

struct setting_def {
    const char *name;
    enum setting_type type;
    size_t offset;              /* where the value goes in the settings struct */
    bool required;
    const char *def;            /* default as text; NULL = none */
    int64_t min, max;           /* SETTING_INT inclusive range; min == max == 0: unbounded */
    const char *const *choices; /* SETTING_ENUM: NULL-terminated list */
    const char *help;           /* what is expected, used in error messages */
    const struct setting_def *sub; /* SETTING_GROUP: the nested group's settings */
    /* An older name of this setting, still accepted: settings_parse reads
     * it when the new name is absent and logs a deprecation warning naming
     * file, line and the new name; both given is an error. NULL: none. */
    const char *old_name;
    /* SETTING_INT: a word accepted instead of a number (as a string, e.g.
     * "auto"), stored as word_value (0 unless given: min must then be > 0;
     * a word beside a range that holds 0 is stored as -1, e.g. retries =
     * "while_leading"). NULL: numbers only. */
    const char *word;
    int64_t word_value;
};
#define SETTINGS_END { .name = NULL }

/* Where and what went wrong. Every config error carries file and line. */
struct config_error {
    char file[512];
    int line;        /* 0 when unknown (e.g. unreadable file) */
    char msg[512];
};
/* Formats "file:line: msg" (or "file: msg" when line is 0). */
void config_error_set(struct config_error *err, const char *file, int line,
                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void config_error_format(const struct config_error *err, char *buf, size_t len);

/* Every error instead of the first (--check-config lists them all). While a
 * list is attached to err on this thread (config_errors_attach),
 * config_error_set on that very struct (not on a scratch one a caller uses
 * to build a message) also appends a copy to the list, and the loaders go
 * on after an error where what follows does not depend on it: settings_parse
 * checks every key of a group, the configuration loader every group, sink
 * and endpoint file. err itself keeps the last error set; the list keeps
 * them all, in the order found. One list per thread at a time. */
struct config_errors {
    struct config_error *v;
    size_t n;
};
void config_errors_attach(struct config_errors *list, const struct config_error *err);
void config_errors_detach(void);
void config_errors_free(struct config_errors *list);

/* Fills out (a zeroed struct) from group according to defs: defaults,
 * required keys, types, ranges, enum choices. Keys in group that are neither
 * in defs nor in also_allowed (NULL-terminated, may be NULL) are errors.
 * what names the object in messages ("endpoint 'orders'", "sink 'out'").
 * Returns 0 or -1 with err filled. Every key is checked: a bad one does not
 * stop the others (see config_errors_attach), but a required key missing
 * is not reported beside an unknown key that is a near miss of its name.
 * On error out may hold partial values: call settings_free anyway. */
int settings_parse(const struct setting_def *defs, const config_setting_t *group,
                   const char *const *also_allowed, const char *what, void *out,
                   struct config_error *err);
/* As settings_parse, but an unknown key is not reported (only counted in
 * the result): for a group a caller parses with two tables, the first of
 * which reported them. A near miss of a required key's name still stands
 * for that key (no "missing" error beside it). */
int settings_parse_values(const struct setting_def *defs, const config_setting_t *group,
                          const char *const *also_allowed, const char *what, void *out,
                          struct config_error *err);
/* Frees strings and lists that settings_parse allocated. */
void settings_free(const struct setting_def *defs, void *out);
void strlist_free(struct strlist *l);

/* A string setting whose name ends in "_file" (password_file, ca_file,
 * cert_file, key_file, ...) may say "credential:NAME": it then names
 * $CREDENTIALS_DIRECTORY/NAME, a systemd credential (LoadCredential=); an
 * unset CREDENTIALS_DIRECTORY is a configuration error naming the setting. */
#define SETTING_CREDENTIAL_PREFIX "credential:"
/* Resolves a secret given as either the name of an environment variable or
 * the path of a file (first line, trailing newline stripped). Neither set:
 * *out = NULL, returns 0. Both set, variable unset, file unreadable: -1 with
 * msg filled (naming the variable or file). *out is malloc'd: free it with
 * secret_free.
 * A file is refused, as ssh refuses a key, when others than its owner and
 * group may read, write or search it (mode & 007: "chmod 600 FILE (or
 * 640)"), except in $CREDENTIALS_DIRECTORY (systemd credentials); refused
 * too when over SECRET_FILE_MAX bytes or not a regular file. What was read
 * is wiped before it is freed. */
#define SECRET_FILE_MAX (64 * 1024)
int secret_resolve(const char *env_name, const char *file, char **out, char *msg, size_t msglen);
/* Wipes a secret (explicit_bzero over its length) and frees it; NULL is
 * fine. */
void secret_free(char *secret);

#endif
