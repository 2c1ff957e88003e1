/* Test hook of the configuration loader (private: unit tests only).
 * Replaces the endpoint and sink registries that config_load consults, so
 * loader tests do not depend on the real endpoint and sink modules. Both
 * arrays are NULL-terminated and must outlive the loads; NULL restores the
 * real registry (endpoint_registry / sink_registry). Not thread safe: call
 * it before config_load, from the test's main thread. */
#ifndef BATON_CONFIG_TEST_H
#define BATON_CONFIG_TEST_H

#include "endpoints/endpoint.h"
#include "src/sink.h"

void config_test_set_registries(const struct endpoint_ops *const *endpoints,
                                const struct sink_ops *const *sinks);

#endif
