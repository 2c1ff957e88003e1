/* `baton step-down|drain|resume -c FILE`: operator control through the ops
 * listener of the replica that runs with FILE (metrics.listen; a listener
 * on 0.0.0.0 is reached on 127.0.0.1), with admin.token_file's token as a
 * bearer token when the file sets one. See src/http_listener.h for the
 * requests. */
#ifndef BATON_CONTROL_CMD_H
#define BATON_CONTROL_CMD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "src/config.h"

enum control_action { CONTROL_STEP_DOWN, CONTROL_DRAIN, CONTROL_RESUME };

/* Step-down: the endpoints named (n > 0), or every enabled endpoint with an
 * ActiveGuard when all; hold_ms 0 = the replica's default (2 x ttl).
 * Prints the replica's answer per request. Returns an exit status: 0 when
 * every request was done, BATON_EXIT_START when the listener cannot be
 * reached (or there is none), BATON_EXIT_RUNTIME when one was refused. */
int control_cmd_run(const struct baton_config *cfg, enum control_action action, char **names, int n, bool all,
                    int64_t hold_ms, FILE *out);

#endif
