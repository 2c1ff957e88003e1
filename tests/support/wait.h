/* Waiting in C tests: one WAIT_FOR for every test file (unit and
 * integration) instead of a copy in each. */
#ifndef BATON_TEST_WAIT_H
#define BATON_TEST_WAIT_H

#include <stdint.h>
#include <unistd.h>

#include "base/util.h" /* clock_mono_ms */

/* Polls cond every 2 ms up to timeout_ms; evaluates to the elapsed ms when
 * cond became true, or -1 when it did not within timeout_ms. */
#define WAIT_FOR(cond, timeout_ms)                                      \
    ({                                                                  \
        int64_t t0_ = clock_mono_ms(), r_ = -1;                         \
        while (clock_mono_ms() - t0_ < (timeout_ms)) {                  \
            if (cond) {                                                 \
                r_ = clock_mono_ms() - t0_;                             \
                break;                                                  \
            }                                                           \
            usleep(2000);                                               \
        }                                                               \
        r_;                                                             \
    })

#endif
