/* Every endpoint type baton knows. Adding one: a file pair in endpoints/,
 * its ops here. */
#include <string.h>

#include "endpoints/endpoint.h"

extern const struct endpoint_ops ep_schedule_ops;
extern const struct endpoint_ops ep_redis_psub_ops;
extern const struct endpoint_ops ep_rabbitmq_ops;
extern const struct endpoint_ops ep_mysql_cdc_ops;
extern const struct endpoint_ops ep_mqtt_ops;

const struct endpoint_ops *const endpoint_registry[] = {
    &ep_schedule_ops, &ep_redis_psub_ops, &ep_rabbitmq_ops, &ep_mysql_cdc_ops, &ep_mqtt_ops, NULL,
};

const struct endpoint_ops *endpoint_lookup(const char *type)
{
    for (size_t i = 0; endpoint_registry[i]; i++)
        if (strcmp(endpoint_registry[i]->type, type) == 0) return endpoint_registry[i];
    return NULL;
}

const char *guard_kind_name(enum guard_kind k)
{
    switch (k) {
    case GUARD_AUTO: return "auto";
    case GUARD_ACTIVE: return "active";
    case GUARD_ONCE: return "once";
    case GUARD_NONE: return "none";
    }
    return "?";
}
