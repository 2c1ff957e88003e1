/* libFuzzer target: the configuration loader on whole files. The input is
 * split at the first "\n----\n": before it the main file, after it one
 * endpoint file. Errors are expected; crashes, leaks and UB are not. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "src/config.h"

static char dir[] = "/tmp/baton-fuzz-config-XXXXXX";
static char main_path[256], ep_dir[256], ep_path[256];

static void write_file(const char *path, const uint8_t *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    fclose(f);
}

static void remove_dir(void)
{
    unlink(ep_path);
    unlink(main_path);
    rmdir(ep_dir);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    log_set_level(LOG_ERROR);
    if (!mkdtemp(dir)) abort();
    snprintf(main_path, sizeof main_path, "%s/baton.cfg", dir);
    snprintf(ep_dir, sizeof ep_dir, "%s/endpoints.d", dir);
    snprintf(ep_path, sizeof ep_path, "%s/endpoints.d/ep.cfg", dir);
    mkdir(ep_dir, 0700);
    atexit(remove_dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *sep = NULL;
    for (size_t i = 0; i + 6 <= size; i++)
        if (memcmp(data + i, "\n----\n", 6) == 0) {
            sep = data + i;
            break;
        }
    if (sep) {
        write_file(main_path, data, (size_t)(sep - data));
        write_file(ep_path, sep + 6, size - (size_t)(sep - data) - 6);
    } else {
        write_file(main_path, data, size);
        unlink(ep_path);
    }
    struct baton_config cfg;
    memset(&cfg, 0, sizeof cfg);
    struct config_error err;
    memset(&err, 0, sizeof err);
    if (config_load(main_path, &cfg, &err) != 0) {
        char msg[1200];
        config_error_format(&err, msg, sizeof msg);
    }
    config_free(&cfg);
    return 0;
}
