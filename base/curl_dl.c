/* See curl_dl.h. */
#include "base/curl_dl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dl.h"
#include "base/glog.h"

CURL *(*sym_curl_easy_init)(void);
CURLcode (*sym_curl_easy_setopt)(CURL *, CURLoption, ...);
CURLcode (*sym_curl_easy_perform)(CURL *);
CURLcode (*sym_curl_easy_getinfo)(CURL *, CURLINFO, ...);
void (*sym_curl_easy_cleanup)(CURL *);
const char *(*sym_curl_easy_strerror)(CURLcode);
struct curl_slist *(*sym_curl_slist_append)(struct curl_slist *, const char *);
void (*sym_curl_slist_free_all)(struct curl_slist *);
CURLM *(*sym_curl_multi_init)(void);
CURLMcode (*sym_curl_multi_add_handle)(CURLM *, CURL *);
CURLMcode (*sym_curl_multi_remove_handle)(CURLM *, CURL *);
CURLMcode (*sym_curl_multi_perform)(CURLM *, int *);
CURLMcode (*sym_curl_multi_poll)(CURLM *, struct curl_waitfd[], unsigned int, int, int *);
CURLMsg *(*sym_curl_multi_info_read)(CURLM *, int *);
CURLMcode (*sym_curl_multi_cleanup)(CURLM *);
CURLMcode (*sym_curl_multi_wakeup)(CURLM *);
CURLMcode (*sym_curl_multi_setopt)(CURLM *, CURLMoption, ...);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_rc = -1;
static char load_err[512];
static void *handle; /* never closed: the sinks use it until exit */

static void load_once(void)
{
    handle = dl_open("BATON_LIBCURL", BATON_LIBCURL_SONAME, "the HTTP sink", "libcurl4", load_err,
                     sizeof load_err);
    if (!handle) return;
    CURLcode (*global_init)(long) = NULL;
#define RESOLVE(var, name) DL_RESOLVE(handle, BATON_LIBCURL_SONAME, var, name, load_err, sizeof load_err)
    RESOLVE(global_init, "curl_global_init");
    RESOLVE(sym_curl_easy_init, "curl_easy_init");
    RESOLVE(sym_curl_easy_setopt, "curl_easy_setopt");
    RESOLVE(sym_curl_easy_perform, "curl_easy_perform");
    RESOLVE(sym_curl_easy_getinfo, "curl_easy_getinfo");
    RESOLVE(sym_curl_easy_cleanup, "curl_easy_cleanup");
    RESOLVE(sym_curl_easy_strerror, "curl_easy_strerror");
    RESOLVE(sym_curl_slist_append, "curl_slist_append");
    RESOLVE(sym_curl_slist_free_all, "curl_slist_free_all");
    RESOLVE(sym_curl_multi_init, "curl_multi_init");
    RESOLVE(sym_curl_multi_add_handle, "curl_multi_add_handle");
    RESOLVE(sym_curl_multi_remove_handle, "curl_multi_remove_handle");
    RESOLVE(sym_curl_multi_perform, "curl_multi_perform");
    RESOLVE(sym_curl_multi_poll, "curl_multi_poll");
    RESOLVE(sym_curl_multi_info_read, "curl_multi_info_read");
    RESOLVE(sym_curl_multi_cleanup, "curl_multi_cleanup");
    RESOLVE(sym_curl_multi_wakeup, "curl_multi_wakeup");
    RESOLVE(sym_curl_multi_setopt, "curl_multi_setopt");
#undef RESOLVE
    CURLcode rc = global_init(CURL_GLOBAL_DEFAULT);
    if (rc != CURLE_OK) {
        snprintf(load_err, sizeof load_err, "curl_global_init failed: %s", sym_curl_easy_strerror(rc));
        return;
    }
    const char *lib = getenv("BATON_LIBCURL");
    glog_debug("curl", NULL, "loaded %s", lib && *lib ? lib : BATON_LIBCURL_SONAME);
    load_rc = 0;
}

int curl_dl_load(char *err, size_t errlen)
{
    pthread_once(&once, load_once);
    if (load_rc != 0 && err && errlen) snprintf(err, errlen, "%s", load_err);
    return load_rc;
}
