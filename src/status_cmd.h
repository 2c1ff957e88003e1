/* `baton status -c FILE`: asks the locker's Redis who leads each endpoint of
 * the configuration and prints a table. No HTTP listener needed. */
#ifndef BATON_STATUS_CMD_H
#define BATON_STATUS_CMD_H

#include <stdio.h>

#include "src/config.h"

/* Returns an exit status (0, or BATON_EXIT_START when Redis is unreachable). */
int status_cmd_run(const struct baton_config *cfg, FILE *out);

#endif
