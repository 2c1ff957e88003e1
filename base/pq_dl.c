/* See pq_dl.h. */
#include "base/pq_dl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dl.h"
#include "base/glog.h"

PGconn *(*sym_PQconnectStartParams)(const char *const *, const char *const *, int);
PostgresPollingStatusType (*sym_PQconnectPoll)(PGconn *);
ConnStatusType (*sym_PQstatus)(const PGconn *);
PGTransactionStatusType (*sym_PQtransactionStatus)(const PGconn *);
char *(*sym_PQerrorMessage)(const PGconn *);
int (*sym_PQsocket)(const PGconn *);
void (*sym_PQfinish)(PGconn *);
int (*sym_PQsetnonblocking)(PGconn *, int);
int (*sym_PQflush)(PGconn *);
int (*sym_PQsendQuery)(PGconn *, const char *);
int (*sym_PQsendQueryParams)(PGconn *, const char *, int, const Oid *, const char *const *,
                                    const int *, const int *, int);
int (*sym_PQsendPrepare)(PGconn *, const char *, const char *, int, const Oid *);
int (*sym_PQsendQueryPrepared)(PGconn *, const char *, int, const char *const *,
                                      const int *, const int *, int);
int (*sym_PQconsumeInput)(PGconn *);
int (*sym_PQisBusy)(PGconn *);
PGresult *(*sym_PQgetResult)(PGconn *);
ExecStatusType (*sym_PQresultStatus)(const PGresult *);
char *(*sym_PQresultErrorMessage)(const PGresult *);
char *(*sym_PQresultErrorField)(const PGresult *, int);
int (*sym_PQntuples)(const PGresult *);
char *(*sym_PQgetvalue)(const PGresult *, int, int);
int (*sym_PQgetisnull)(const PGresult *, int, int);
char *(*sym_PQcmdTuples)(PGresult *);
char *(*sym_PQcmdStatus)(PGresult *);
void (*sym_PQclear)(PGresult *);
PQconninfoOption *(*sym_PQconninfoParse)(const char *, char **);
void (*sym_PQconninfoFree)(PQconninfoOption *);
void (*sym_PQfreemem)(void *);
char *(*sym_PQescapeIdentifier)(PGconn *, const char *, size_t);
PGnotify *(*sym_PQnotifies)(PGconn *);
int (*sym_PQgetlength)(const PGresult *, int, int);
char *(*sym_PQhost)(const PGconn *);
char *(*sym_PQport)(const PGconn *);
PQnoticeReceiver (*sym_PQsetNoticeReceiver)(PGconn *, PQnoticeReceiver, void *);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_rc = -1;
static char load_err[512];
static void *handle; /* never closed: the sinks use it until exit */

static void load_once(void)
{
    handle = dl_open("BATON_LIBPQ", BATON_LIBPQ_SONAME, "the postgresql sink", "libpq5", load_err,
                     sizeof load_err);
    if (!handle) return;
#define RESOLVE(var, name) DL_RESOLVE(handle, BATON_LIBPQ_SONAME, var, name, load_err, sizeof load_err)
    RESOLVE(sym_PQconnectStartParams, "PQconnectStartParams");
    RESOLVE(sym_PQconnectPoll, "PQconnectPoll");
    RESOLVE(sym_PQstatus, "PQstatus");
    RESOLVE(sym_PQtransactionStatus, "PQtransactionStatus");
    RESOLVE(sym_PQerrorMessage, "PQerrorMessage");
    RESOLVE(sym_PQsocket, "PQsocket");
    RESOLVE(sym_PQfinish, "PQfinish");
    RESOLVE(sym_PQsetnonblocking, "PQsetnonblocking");
    RESOLVE(sym_PQflush, "PQflush");
    RESOLVE(sym_PQsendQuery, "PQsendQuery");
    RESOLVE(sym_PQsendQueryParams, "PQsendQueryParams");
    RESOLVE(sym_PQsendPrepare, "PQsendPrepare");
    RESOLVE(sym_PQsendQueryPrepared, "PQsendQueryPrepared");
    RESOLVE(sym_PQconsumeInput, "PQconsumeInput");
    RESOLVE(sym_PQisBusy, "PQisBusy");
    RESOLVE(sym_PQgetResult, "PQgetResult");
    RESOLVE(sym_PQresultStatus, "PQresultStatus");
    RESOLVE(sym_PQresultErrorMessage, "PQresultErrorMessage");
    RESOLVE(sym_PQresultErrorField, "PQresultErrorField");
    RESOLVE(sym_PQntuples, "PQntuples");
    RESOLVE(sym_PQgetvalue, "PQgetvalue");
    RESOLVE(sym_PQgetisnull, "PQgetisnull");
    RESOLVE(sym_PQcmdTuples, "PQcmdTuples");
    RESOLVE(sym_PQcmdStatus, "PQcmdStatus");
    RESOLVE(sym_PQclear, "PQclear");
    RESOLVE(sym_PQconninfoParse, "PQconninfoParse");
    RESOLVE(sym_PQconninfoFree, "PQconninfoFree");
    RESOLVE(sym_PQfreemem, "PQfreemem");
    RESOLVE(sym_PQescapeIdentifier, "PQescapeIdentifier");
    RESOLVE(sym_PQnotifies, "PQnotifies");
    RESOLVE(sym_PQgetlength, "PQgetlength");
    RESOLVE(sym_PQhost, "PQhost");
    RESOLVE(sym_PQport, "PQport");
    RESOLVE(sym_PQsetNoticeReceiver, "PQsetNoticeReceiver");
#undef RESOLVE
    const char *lib = getenv("BATON_LIBPQ");
    glog_debug("pq", NULL, "loaded %s", lib && *lib ? lib : BATON_LIBPQ_SONAME);
    load_rc = 0;
}

int pq_dl_load(char *err, size_t errlen)
{
    pthread_once(&once, load_once);
    if (load_rc != 0 && err && errlen) snprintf(err, errlen, "%s", load_err);
    return load_rc;
}
