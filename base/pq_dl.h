/* libpq, loaded on first use (dlopen of libpq.so.5) instead of linked: only
 * the postgresql sink and the postgresql locker need it, and most replicas
 * configure neither. The
 * pattern of base/curl_dl.h: libpq-fe.h for types and constants, a sym_
 * pointer per function used, resolved all at once.
 *
 * BATON_LIBPQ in the environment names another file to load (a libpq
 * outside the loader's path). pq_dl_load() is thread safe and idempotent;
 * after it returned 0 every sym_ pointer is set. */
#ifndef BATON_PQ_DL_H
#define BATON_PQ_DL_H

#include <libpq-fe.h>
#include <stddef.h>

#define BATON_LIBPQ_SONAME "libpq.so.5"

extern PGconn *(*sym_PQconnectStartParams)(const char *const *, const char *const *, int);
extern PostgresPollingStatusType (*sym_PQconnectPoll)(PGconn *);
extern ConnStatusType (*sym_PQstatus)(const PGconn *);
extern PGTransactionStatusType (*sym_PQtransactionStatus)(const PGconn *);
extern char *(*sym_PQerrorMessage)(const PGconn *);
extern int (*sym_PQsocket)(const PGconn *);
extern void (*sym_PQfinish)(PGconn *);
extern int (*sym_PQsetnonblocking)(PGconn *, int);
extern int (*sym_PQflush)(PGconn *);
extern int (*sym_PQsendQuery)(PGconn *, const char *);
extern int (*sym_PQsendQueryParams)(PGconn *, const char *, int, const Oid *, const char *const *,
                                    const int *, const int *, int);
extern int (*sym_PQsendPrepare)(PGconn *, const char *, const char *, int, const Oid *);
extern int (*sym_PQsendQueryPrepared)(PGconn *, const char *, int, const char *const *,
                                      const int *, const int *, int);
extern int (*sym_PQconsumeInput)(PGconn *);
extern int (*sym_PQisBusy)(PGconn *);
extern PGresult *(*sym_PQgetResult)(PGconn *);
extern ExecStatusType (*sym_PQresultStatus)(const PGresult *);
extern char *(*sym_PQresultErrorMessage)(const PGresult *);
extern char *(*sym_PQresultErrorField)(const PGresult *, int);
extern int (*sym_PQntuples)(const PGresult *);
extern char *(*sym_PQgetvalue)(const PGresult *, int, int);
extern int (*sym_PQgetisnull)(const PGresult *, int, int);
extern char *(*sym_PQcmdTuples)(PGresult *);
extern char *(*sym_PQcmdStatus)(PGresult *);
extern void (*sym_PQclear)(PGresult *);
extern PQconninfoOption *(*sym_PQconninfoParse)(const char *, char **);
extern void (*sym_PQconninfoFree)(PQconninfoOption *);
extern void (*sym_PQfreemem)(void *);
extern char *(*sym_PQescapeIdentifier)(PGconn *, const char *, size_t);
extern PGnotify *(*sym_PQnotifies)(PGconn *);
extern int (*sym_PQgetlength)(const PGresult *, int, int);
extern char *(*sym_PQhost)(const PGconn *);
extern char *(*sym_PQport)(const PGconn *);
extern PQnoticeReceiver (*sym_PQsetNoticeReceiver)(PGconn *, PQnoticeReceiver, void *);

/* 0, or -1 with err naming the library and what failed (not installed, a
 * symbol missing); the same answer every call. */
int pq_dl_load(char *err, size_t errlen);

#endif
