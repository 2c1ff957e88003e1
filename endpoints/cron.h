/* Cron expressions with seconds, evaluated in UTC or an IANA time zone.
 *
 * Syntax: six fields "sec min hour dom month dow", each a comma-separated
 * list of items: "*", "?" (dom/dow only), a value, a range "a-b", with an
 * optional step "/n" ("*" + "/7", "10-40/5", "5/15" = 5 to the field's end).
 * Months accept JAN..DEC, weekdays SUN..SAT (case-insensitive); dow 0-7 with
 * 0 and 7 both Sunday. When both dom and dow are restricted (neither begins
 * with "*" or "?") a day matches if EITHER matches (Vixie cron semantics);
 * otherwise both must match.
 * Macros: @yearly/@annually, @monthly, @weekly, @daily/@midnight, @hourly,
 * and "@every D" with D a duration such as "30s", "5m", "1h30m", "2d" or a
 * plain number of seconds: slots are the multiples of D since the Unix epoch
 * (time zone independent), so every replica computes the same slots.
 *
 * Time zones: "UTC" or a zone name under /usr/share/zoneinfo, read and
 * evaluated by this module (TZif v2+ data plus its POSIX TZ footer for times
 * past the last transition). No setenv/tzset: everything is thread safe.
 * DST: a local time that does not exist (spring forward) fires at the
 * transition instant (the first second after the gap); a local time that
 * occurs twice (fall back) fires at its first occurrence only, unless the
 * hour field begins with "*" (then every real hour fires, both passes).
 *
 * A parsed expression is immutable: share it between threads freely. */
#ifndef BATON_CRON_H
#define BATON_CRON_H

#include <stddef.h>
#include <stdint.h>

#define CRON_ERR_MAX 256

struct cron_expr;

/* Parses text in time zone tz (NULL or "UTC" = UTC). Returns NULL with err
 * filled (naming the field and the bad token, or the zone) on failure. An
 * expression that can never match (e.g. "0 0 0 30 2 *") is an error too. */
struct cron_expr *cron_parse(const char *text, const char *tz, char *err, size_t errlen);
void cron_free(struct cron_expr *e);

/* The next planned time strictly after `after` (Unix seconds), or -1 when
 * none exists within 400 years. */
int64_t cron_next(const struct cron_expr *e, int64_t after);

/* The latest planned time <= now that is strictly after `prev`, or -1 when
 * no slot lies in (prev, now]. *skipped (may be NULL) receives how many
 * earlier slots in (prev, now] are passed over (capped at max_count; the
 * count is exact below the cap). */
int64_t cron_latest(const struct cron_expr *e, int64_t prev, int64_t now,
                    int64_t *skipped, int64_t max_count);

/* The expression's period in seconds when it is "@every", else 0. */
int64_t cron_every_seconds(const struct cron_expr *e);
/* The UTC offset (seconds east) of the expression's zone at instant t. */
int32_t cron_utc_offset(const struct cron_expr *e, int64_t t);
/* RFC 3339 in the expression's zone: "2026-03-29T03:00:00+02:00", or with
 * "Z" for UTC. buf should hold 32 bytes. */
void cron_format_time(const struct cron_expr *e, int64_t t, char *buf, size_t len);
/* The zone name as given ("UTC" by default). */
const char *cron_zone_name(const struct cron_expr *e);

/* True when name is "UTC" or a readable zone file under /usr/share/zoneinfo
 * (used by config validation). msg receives the reason otherwise. */
int cron_zone_check(const char *name, char *msg, size_t msglen);

#endif
