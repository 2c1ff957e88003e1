"""A Redis Sentinel deployment for the integration tests (stdlib only): one
master, replicas and redis-sentinel processes on free 127.0.0.1 ports, each
in its own temporary directory, always stopped (harness cleanups). The C
tests start theirs with this too (tests/support/brokers.py sentinel).

    cl = SentinelCluster(t, name="mymaster", replicas=1, sentinels=3,
                         down_after_ms=1000, failover_timeout_ms=2000)
    cl.sentinel_addrs()     # ["127.0.0.1:p1", ...]
    cl.master_port()        # what the sentinels say now
    cl.redis[0].kill()      # SIGKILL the first master
    cl.wait_new_master(old_port, timeout)
    cl.redis[0].start()     # back with empty data: the sentinels make it a replica

SentinelPublisher is publisher.Publisher publishing to the master the
sentinels name (asked again after every error; a server that is not a master
is refused, so nothing is published to a demoted master).
"""

import os
import subprocess
import time

import harness as h
from publisher import Publisher


def role(port, timeout=0.5):
    """"master" / "slave" / None (no answer) of a redis-server."""
    try:
        c = h.Resp(port, timeout=timeout)
    except OSError:
        return None
    try:
        r = c.cmd("ROLE")
        return r[0].decode() if isinstance(r, list) and r else None
    except (OSError, ConnectionError, h.RedisError):
        return None
    finally:
        c.close()


def replica_synced(port):
    try:
        c = h.Resp(port, timeout=0.5)
    except OSError:
        return False
    try:
        info = c.cmd("INFO", "replication").decode()
        return "role:slave" in info and "master_link_status:up" in info
    except (OSError, ConnectionError, h.RedisError):
        return False
    finally:
        c.close()


def ask_master(sentinel_ports, name, timeout=0.5):
    """(host, port) the first answering sentinel gives for name, or None."""
    for p in sentinel_ports:
        try:
            c = h.Resp(p, timeout=timeout)
        except OSError:
            continue
        try:
            r = c.cmd("SENTINEL", "get-master-addr-by-name", name)
            if isinstance(r, list) and len(r) == 2:
                return r[0].decode(), int(r[1])
        except (OSError, ConnectionError, h.RedisError, ValueError):
            pass
        finally:
            c.close()
    return None


class SentinelProc:
    def __init__(self, name, master_port, quorum, down_after_ms, failover_timeout_ms):
        self.port = h.free_port()
        self.dir = h.mktemp("baton-sentinel-")
        self.conf = os.path.join(self.dir, "sentinel.conf")
        with open(self.conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\nlogfile %s\n"
                    "sentinel monitor %s 127.0.0.1 %d %d\n"
                    "sentinel down-after-milliseconds %s %d\n"
                    "sentinel failover-timeout %s %d\n"
                    "sentinel parallel-syncs %s 1\n"
                    % (self.port, self.dir, os.path.join(self.dir, "sentinel.log"), name,
                       master_port, quorum, name, down_after_ms, name, failover_timeout_ms, name))
        self.proc = subprocess.Popen(["redis-sentinel", self.conf], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        h._cleanups.append(self.stop)
        if not h.wait_until(lambda: h.port_open(self.port), 10, 0.05):
            raise RuntimeError("redis-sentinel did not start on port %d" % self.port)

    def stop(self):
        h.stop_process(self.proc)

    def master_field(self, name, field):
        try:
            c = h.Resp(self.port, timeout=0.5)
        except OSError:
            return None
        try:
            r = c.cmd("SENTINEL", "master", name)
            d = dict(zip(r[::2], r[1::2]))
            v = d.get(field.encode())
            return v.decode() if v is not None else None
        except (OSError, ConnectionError, h.RedisError):
            return None
        finally:
            c.close()


class SentinelCluster:
    def __init__(self, t, name="mymaster", replicas=1, sentinels=3, down_after_ms=1000,
                 failover_timeout_ms=2000):
        self.name = name
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        master = h.RedisServer()
        self.redis = [master]
        for _ in range(replicas):
            self.redis.append(h.RedisServer(
                extra_args=["--replicaof", "127.0.0.1", str(master.port)]))
        self.sentinels = []
        t.cleanup(self.stop)
        for r in self.redis[1:]:
            t.require(h.wait_until(lambda: replica_synced(r.port), 15, 0.1),
                      "replica %d never synced" % r.port)
        quorum = sentinels // 2 + 1
        for _ in range(sentinels):
            self.sentinels.append(SentinelProc(name, master.port, quorum, down_after_ms,
                                               failover_timeout_ms))

        def ready():
            for s in self.sentinels:
                others = s.master_field(name, "num-other-sentinels")
                slaves = s.master_field(name, "num-slaves")
                if (others is None or slaves is None or int(others) < sentinels - 1
                        or int(slaves) < replicas):
                    return False
            return True
        t.require(h.wait_until(ready, 30, 0.1),
                  "the sentinels did not discover each other and the replicas in 30 s")

    def sentinel_ports(self):
        return [s.port for s in self.sentinels]

    def sentinel_addrs(self):
        return ["127.0.0.1:%d" % p for p in self.sentinel_ports()]

    def master_port(self):
        a = ask_master(self.sentinel_ports(), self.name)
        return a[1] if a else None

    def server(self, port):
        return next(r for r in self.redis if r.port == port)

    def agreed_master(self, not_port=None):
        """Port of the master every sentinel names now if it is not not_port
        and says ROLE master, else None."""
        ports = set()
        for p in self.sentinel_ports():
            a = ask_master([p], self.name)
            if a is None:
                return None
            ports.add(a[1])
        if len(ports) != 1:
            return None
        p = ports.pop()
        return p if p != not_port and role(p) == "master" else None

    def wait_new_master(self, not_port, timeout):
        """Port of the master every sentinel names, other than not_port and
        answering ROLE master; None after timeout seconds."""
        return h.wait_until(lambda: self.agreed_master(not_port), timeout, 0.05)

    def wait_settled(self, timeout):
        """Port of the master every sentinel names, answering ROLE master,
        every other server a replica whose link is up; None after timeout
        seconds."""
        def settled():
            p = self.agreed_master()
            if p is None:
                return None
            return p if all(replica_synced(r.port) for r in self.redis if r.port != p) else None
        return h.wait_until(settled, timeout, 0.1)

    def dump_logs(self, last_lines, out):
        """The last last_lines lines of every sentinel's log, to out:
        evidence when the sentinels did something a test did not expect."""
        for i, s in enumerate(self.sentinels):
            path = os.path.join(s.dir, "sentinel.log")
            try:
                with open(path, errors="replace") as f:
                    lines = f.read().splitlines()[-max(1, last_lines):]
            except OSError:
                continue
            out.write("--- sentinel %d (port %d), last lines of %s\n" % (i, s.port, path))
            out.writelines("    %s\n" % ln for ln in lines)
        out.flush()

    def failover(self):
        """SENTINEL FAILOVER (a manual switch to a replica)."""
        c = h.Resp(self.sentinels[0].port)
        try:
            return c.cmd("SENTINEL", "FAILOVER", self.name)
        finally:
            c.close()

    def stop(self):
        for s in self.sentinels:
            s.stop()
        for r in self.redis:
            r.stop()


class SentinelPublisher(Publisher):
    """Publisher whose connection goes to the master the sentinels name
    (checked with ROLE), asked again after every error."""

    def __init__(self, cluster, **kw):
        super().__init__(None, **kw)
        self.cluster = cluster
        self.masters = []  # (monotonic time, port) each time it (re)connected

    def _connect(self):
        a = ask_master(self.cluster.sentinel_ports(), self.cluster.name)
        if a is None:
            self._conn = None
            return False
        try:
            self._conn = h.Resp(a[1], timeout=2.0)
            r = self._conn.cmd("ROLE")
            if not (isinstance(r, list) and r and r[0] == b"master"):
                raise ConnectionError("%d is not a master" % a[1])
        except (OSError, ConnectionError, h.RedisError):
            if self._conn:
                self._conn.close()
            self._conn = None
            return False
        self.port = a[1]
        self._conn = _FollowingConn(self._conn, a[1], self.cluster)
        self.masters.append((time.monotonic(), a[1]))
        return True


class _FollowingConn:
    """The publisher's connection: a batch that reached no subscriber makes
    it ask the sentinels (at most every 100 ms) whether the master moved (a
    demoted master still accepts PUBLISH, to nobody): then it fails like a
    broken connection and the publisher reconnects to the new master."""

    def __init__(self, resp, port, cluster):
        self.resp, self.port, self.cluster = resp, port, cluster
        self.checked = 0.0

    def pipeline(self, cmds):
        replies = self.resp.pipeline(cmds)
        if all(r == 0 for r in replies) and time.monotonic() - self.checked > 0.1:
            self.checked = time.monotonic()
            a = ask_master(self.cluster.sentinel_ports(), self.cluster.name)
            if a and a[1] != self.port:
                raise ConnectionError("the master moved to %d" % a[1])
        return replies

    def close(self):
        self.resp.close()
