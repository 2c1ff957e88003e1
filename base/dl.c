/* See dl.h. */
#include "base/dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

void *dl_open(const char *env, const char *soname, const char *what, const char *package,
              char *err, size_t errlen)
{
    const char *lib = getenv(env);
    if (!lib || !*lib) lib = soname;
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(err, errlen, "%s needs %s, which could not be loaded (%s; on Debian: apt-get install %s)",
                 what, soname, e ? e : lib, package);
    }
    return h;
}

int dl_sym(void *handle, const char *lib, const char *name, void **slot, char *err, size_t errlen)
{
    dlerror();
    *slot = dlsym(handle, name);
    if (*slot) return 0;
    const char *e = dlerror();
    snprintf(err, errlen, "%s has no symbol %s: %s", lib, name, e ? e : "not found");
    return -1;
}
