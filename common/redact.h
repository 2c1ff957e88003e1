/* Hiding credentials written into URLs (http://root:PW@host:2379) wherever
 * baton shows a URL: log lines, /status, `baton status`, --check-config and
 * configuration errors, systemd STATUS= lines. The URL itself is kept for
 * the connection (curl gets the real one); only what is shown is masked.
 *
 * The password part of a URL's user information becomes "***":
 *   http://root:PW@host:2379/v3  ->  http://root:***@host:2379/v3
 * user information without a ':' may itself be a token and is masked whole
 * ("TOKEN@host" in an https URL becomes "***@host").
 * Masking, not refusing: configurations that already carry user information
 * keep working (libcurl sends it as Basic authentication). */
#ifndef BATON_REDACT_H
#define BATON_REDACT_H

#include <stdbool.h>
#include <stddef.h>

/* What is shown in place of a password. */
#define REDACT_MASK "***"

/* Copies text to out (len bytes, always NUL-terminated when len > 0) with
 * the user information of every URL in it masked. A URL is found by its
 * "://"; its authority runs to the first '/', '?', '#', space or control
 * character, and its user information to the last '@' in the authority
 * (a password holding '@' is masked whole). text may hold several URLs or
 * none (copied unchanged); text and out must not overlap. A result too
 * long for out is cut, never cut inside a password (the mask is written
 * before anything after it). Returns out. */
char *redact_urls(const char *text, char *out, size_t len);

/* True when text holds a URL with user information that redact_urls would
 * mask. */
bool redact_needed(const char *text);

/* Masks in place, in a buffer of cap bytes holding a NUL-terminated
 * string: the result may be longer than the text (a one-letter password
 * becomes "***") and is cut to fit cap. */
void redact_urls_inplace(char *buf, size_t cap);

#endif
