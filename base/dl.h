/* What the libraries loaded on first use share (base/curl_dl.c,
 * base/pq_dl.c): dlopen with an environment override, and dlsym into a
 * function pointer. */
#ifndef BATON_DL_H
#define BATON_DL_H

#include <stddef.h>

/* dlopen(getenv(env) if set and not empty, else soname, RTLD_NOW |
 * RTLD_LOCAL). NULL with err: "<what> needs <lib>, which could not be
 * loaded (<dlerror>; on Debian: apt-get install <package>)". */
void *dl_open(const char *env, const char *soname, const char *what, const char *package,
              char *err, size_t errlen);

/* dlsym(handle, name) into *slot: 0, or -1 with err naming lib and name. */
int dl_sym(void *handle, const char *lib, const char *name, void **slot, char *err, size_t errlen);

/* Resolves name into the function pointer var, or returns from the calling
 * function (err filled). Object pointers from dlsym to function pointers:
 * POSIX guarantees the representation; a union keeps -Wpedantic quiet. */
#define DL_RESOLVE(handle, lib, var, name, err, errlen)                                            \
    do {                                                                                           \
        union {                                                                                    \
            void *obj;                                                                             \
            __typeof__(var) fn;                                                                    \
        } u_;                                                                                      \
        if (dl_sym(handle, lib, name, &u_.obj, err, errlen) != 0) return;                         \
        var = u_.fn;                                                                               \
    } while (0)

#endif
