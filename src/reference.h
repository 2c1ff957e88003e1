/* The configuration reference, generated from the settings tables: the main
 * file's groups (src/config.c), every endpoint type (endpoint_registry) and
 * every sink type (sink_registry), each setting with its type, default,
 * bounds or choices, whether it is required, its older name, the word it
 * accepts instead of a number, and its help text.
 *
 *   baton --print-reference[=markdown|man]
 *
 * The output depends on the tables only (no date, no version, no path), so a
 * committed copy (docs/reference.md, man/baton.cfg.5) can be compared with
 * it: tests/integration/test_reference.py does. */
#ifndef BATON_REFERENCE_H
#define BATON_REFERENCE_H

#include <stdio.h>

#include "common/settings.h"

enum reference_format {
    REFERENCE_MARKDOWN, /* docs/reference.md */
    REFERENCE_MAN,      /* man/baton.cfg.5, the whole page */
};

/* "markdown" or "man" (NULL: markdown). 0, or -1 for any other text. */
int reference_format_parse(const char *s, enum reference_format *out);

/* Writes the whole reference in fmt. 0, or -1 when writing failed. */
int reference_write(FILE *f, enum reference_format fmt);

/* Defined in src/config.c: the main file's tables by name ("main",
 * "locker", "lease", "metrics", "log", "shutdown", "sink", "endpoint",
 * "replay"); NULL for any other name. */
const struct setting_def *config_reference_table(const char *which);

#endif
