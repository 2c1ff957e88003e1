/* A Redis Sentinel deployment for C integration tests: one master, replicas
 * (--replicaof the master) and redis-sentinel processes on free 127.0.0.1
 * ports, each in its own temporary directory, monitoring the master under
 * one name (quorum = majority of the sentinels), started by the launcher the
 * Python tests use too (tests/support/brokers.py sentinel: SentinelCluster
 * of tests/integration/lib/sentinel.py; child.h, launcher_*). Always cleaned
 * up: destroy, or this process ending (the launcher's stdin closes; its
 * PR_SET_PDEATHSIG). Start returns once every sentinel knows the others and
 * the replicas, and the replicas are in sync, so a failover can happen. */
#ifndef BATON_TEST_SENTINEL_H
#define BATON_TEST_SENTINEL_H

#include <stdbool.h>

#define SENTINEL_MAX 5
#define SENTINEL_MAX_REDIS 4

struct sentinel_cluster;

/* n_redis: 1 master + (n_redis - 1) replicas; n_sentinels sentinels with
 * down-after-milliseconds down_after_ms and failover-timeout
 * failover_timeout_ms. NULL (message on stderr) when redis-sentinel is
 * missing or the deployment did not come up within 30 s. */
struct sentinel_cluster *sentinel_cluster_start(const char *master_name, int n_redis,
                                                int n_sentinels, int down_after_ms,
                                                int failover_timeout_ms);
int sentinel_cluster_sentinel_port(const struct sentinel_cluster *c, int i);
/* Port of redis server i (0 = the first master). */
int sentinel_cluster_redis_port(const struct sentinel_cluster *c, int i);
/* SIGKILL redis server i. */
int sentinel_cluster_kill_redis(struct sentinel_cluster *c, int i);
/* Starts redis server i again on its port (empty data, its first role): the
 * sentinels turn an old master into a replica. */
int sentinel_cluster_restart_redis(struct sentinel_cluster *c, int i);
/* The waits and the logs below are the launcher's (SentinelCluster of
 * tests/integration/lib/sentinel.py).
 * Waits until every sentinel reports a master other than not_port and that
 * server says ROLE master. Its port, or -1 after timeout_ms. */
int sentinel_cluster_wait_new_master(struct sentinel_cluster *c, int not_port, int timeout_ms);
/* Waits until redis server i is a replica whose link to its master is up
 * (asks at least once, also with timeout_ms 0). */
bool sentinel_cluster_wait_replica_synced(struct sentinel_cluster *c, int i, int timeout_ms);
/* Waits until every sentinel reports the same master, it says ROLE master,
 * and every other server is a replica whose link is up. The master's port,
 * or -1 after timeout_ms. */
int sentinel_cluster_wait_settled(struct sentinel_cluster *c, int timeout_ms);
/* The last last_lines lines of every sentinel's log, on stderr: evidence
 * when the sentinels did something a test did not expect. */
void sentinel_cluster_dump_logs(struct sentinel_cluster *c, int last_lines);
/* Stops everything and removes the directories. NULL-safe. */
void sentinel_cluster_destroy(struct sentinel_cluster *c);

#endif
