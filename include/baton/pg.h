/* libbaton-guard: the PostgreSQL locker (baton_locker_pg_create), the
 * mapping in guard/locker_pg.c. libpq is loaded on first use (libpq.so.5),
 * never linked. Strings are copied by the constructor; timeouts left zero
 * take the defaults given.
 *
 * The database's clock decides expiry (clock_timestamp()), never a
 * replica's. Its tables (baton_leases, baton_claims, baton_shared and the
 * sequence baton_epoch_seq) are created by baton_locker_pg_init_schema or
 * by running baton_locker_pg_ddl() (`baton --init-locker [--apply]`). */
#ifndef BATON_PUBLIC_PG_H
#define BATON_PUBLIC_PG_H

#include "baton/api.h"
#include "baton/locker.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct baton_pg_opts {
    char *conninfo; /* libpq connection string or postgresql:// URI (required) */
    char *password; /* resolved secret, or NULL (conninfo, PGPASSWORD or ~/.pgpass) */
    int64_t connect_timeout_ms; /* default 1000 */
    int64_t command_timeout_ms; /* default 1000 */
};

BATON_API struct baton_locker *baton_locker_pg_create(const struct baton_pg_opts *opts,
                                                      char err[BATON_LOCKER_ERR_MAX]);
/* The locker's tables as SQL, idempotent (CREATE ... IF NOT EXISTS). */
BATON_API const char *baton_locker_pg_ddl(void);
/* Runs baton_locker_pg_ddl() on the database of opts: 0, or -1 with err. */
BATON_API int baton_locker_pg_init_schema(const struct baton_pg_opts *opts,
                                          char err[BATON_LOCKER_ERR_MAX]);

#ifdef __cplusplus
}
#endif

#endif
