/* libbaton-guard: BATON_API marks the exported functions. The library is
 * built with hidden visibility, so everything else stays internal to
 * libbaton-guard.so. */
#ifndef BATON_PUBLIC_API_H
#define BATON_PUBLIC_API_H

#if defined(BATON_GUARD_BUILD) && defined(__GNUC__)
#define BATON_API __attribute__((visibility("default")))
#else
#define BATON_API
#endif

#endif
