/* libFuzzer target: the cron parser and slot computation. The first byte
 * picks a zone; the rest is the expression. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "endpoints/cron.h"
#include "common/log.h"

static const char *const zones[] = {"UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 512) return 0;
    log_set_level(LOG_ERROR);
    const char *tz = zones[data[0] % 4];
    char *text = malloc(size);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    char err[256];
    struct cron_expr *e = cron_parse(text, tz, err, sizeof err);
    if (e) {
        int64_t t = 1700000000;
        for (int i = 0; i < 4 && t > 0; i++) t = cron_next(e, t);
        char buf[64];
        if (t > 0) cron_format_time(e, t, buf, sizeof buf);
        cron_free(e);
    }
    free(text);
    return 0;
}
