/* libcurl, loaded on first use (dlopen of libcurl.so.4) instead of linked:
 * only the HTTP sink needs it, and libcurl with what it pulls in (GnuTLS,
 * Kerberos, LDAP, libssh2, librtmp, nghttp2...) costs ~4 MiB of resident
 * memory in every replica, most of which forward to stdout. The pattern is
 * systemd's: the library's own header for types and constants, a sym_
 * pointer per function used, resolved all at once.
 *
 * BATON_LIBCURL in the environment names another file to load (a libcurl
 * outside the loader's path). curl_dl_load() is thread safe and idempotent; after it returned 0 every
 * sym_ pointer is set and curl_global_init has run. */
#ifndef BATON_CURL_DL_H
#define BATON_CURL_DL_H

#include <curl/curl.h>
#include <stddef.h>

#define BATON_LIBCURL_SONAME "libcurl.so.4"

extern CURL *(*sym_curl_easy_init)(void);
extern CURLcode (*sym_curl_easy_setopt)(CURL *, CURLoption, ...);
extern CURLcode (*sym_curl_easy_perform)(CURL *);
extern CURLcode (*sym_curl_easy_getinfo)(CURL *, CURLINFO, ...);
extern void (*sym_curl_easy_cleanup)(CURL *);
extern const char *(*sym_curl_easy_strerror)(CURLcode);
extern struct curl_slist *(*sym_curl_slist_append)(struct curl_slist *, const char *);
extern void (*sym_curl_slist_free_all)(struct curl_slist *);
extern CURLM *(*sym_curl_multi_init)(void);
extern CURLMcode (*sym_curl_multi_add_handle)(CURLM *, CURL *);
extern CURLMcode (*sym_curl_multi_remove_handle)(CURLM *, CURL *);
extern CURLMcode (*sym_curl_multi_perform)(CURLM *, int *);
extern CURLMcode (*sym_curl_multi_poll)(CURLM *, struct curl_waitfd[], unsigned int, int, int *);
extern CURLMsg *(*sym_curl_multi_info_read)(CURLM *, int *);
extern CURLMcode (*sym_curl_multi_cleanup)(CURLM *);
extern CURLMcode (*sym_curl_multi_wakeup)(CURLM *);
extern CURLMcode (*sym_curl_multi_setopt)(CURLM *, CURLMoption, ...);

/* 0, or -1 with err naming the library and what failed (not installed, a
 * symbol missing, curl_global_init failing); the same answer every call. */
int curl_dl_load(char *err, size_t errlen);

#endif
