#!/usr/bin/env python3
"""The broker launcher of the C tests: a command line in front of the
Python launchers the Python tests use (tests/integration/lib: harness.py's
RedisServer, sentinel.py's SentinelCluster, etcd.py's EtcdCluster,
postgres.py's PgServer), so that each broker is started one way only
(issue 35). tests/support/child.h (launcher_*) spawns it.

    python3 tests/support/brokers.py redis [-- EXTRA REDIS-SERVER ARGS...]
    python3 tests/support/brokers.py redis-tls no yes   (one TLS-only server
            each, requiring a client certificate: yes; test certificates)
    python3 tests/support/brokers.py sentinel --name N --redis 2 --sentinels 3 \\
            --down-after-ms 1000 --failover-timeout-ms 2000
    python3 tests/support/brokers.py etcd [--base DIR] [-- EXTRA ETCD ARGS...]
    python3 tests/support/brokers.py postgres   (PostgreSQL 15; needs root)

Once everything is up it prints one JSON line on stdout ({"ok": true, ...}:
the ports, pids, directories; {"ok": false, "error": ...} and exit 1 when it
could not start), then reads one command a line on stdin and answers each
with one JSON line (what a command found, e.g. "port", besides "ok"):

    redis:     kill | term | restart   (SIGKILL; SIGTERM; (killed and) again) (+ "pid")
    redis-tls: kill I | restart I | pause I | resume I   (+ "pids")
    sentinel:  kill_redis I | start_redis I   (SIGKILL; (killed and) again on its port)
               wait_synced I MS ("synced") | wait_new_master NOT_PORT MS ("port")
               wait_settled MS ("port") | dump_logs N   (see sentinel.py)
    etcd:      kill I | stop I | restart I | pause I | resume I   (+ "pids")
    postgres:  kill | stop | restart | pause | resume   (+ "pid": the postmaster's;
               pause and kill reach its backends too; restart: same port, same data)

End of stdin (the test closed the pipe or died), SIGTERM (the C side's
PR_SET_PDEATHSIG) or SIGINT: everything is stopped and its temporary
directories removed (the harness's cleanups). The brokers it starts die with
it even when it is SIGKILLed (PR_SET_PDEATHSIG). Its own logging goes to
stderr: stdout carries only the answers.
"""

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration", "lib"))

# stdout is the answer channel: anything else printed (harness.log) and the
# brokers' inherited stdout go to stderr.
_answers = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr

import harness as h  # noqa: E402


def _die_with_parent():
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class _Popen(subprocess.Popen):
    """Every broker started here dies with this process."""

    def __init__(self, *args, **kw):
        if kw.get("preexec_fn") is None:
            kw["preexec_fn"] = _die_with_parent
        super().__init__(*args, **kw)


subprocess.Popen = _Popen


def answer(**kw):
    _answers.write(json.dumps(kw) + "\n")
    _answers.flush()


class _Context:
    """What the launchers need of a harness.TestContext."""

    def require(self, cond, msg):
        if not cond:
            raise RuntimeError(msg)

    def cleanup(self, fn):
        h._cleanups.append(fn)


def retry(fn, seconds=5.0):
    """fn() until it does not raise, for up to seconds (the ports of a killed
    server may linger briefly)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return fn()
        except Exception:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def wait_stopped(pid, timeout=2.0):
    """After SIGSTOP: until every thread of pid is stopped (state T)."""
    def stopped():
        try:
            for tid in os.listdir("/proc/%d/task" % pid):
                with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                    if f.read().rsplit(")", 1)[1].split()[0] not in ("T", "t"):
                        return False
        except (OSError, IndexError):
            return True
        return True
    h.wait_until(stopped, timeout, 0.01)


def sentinel(args):
    import sentinel as s
    cl = s.SentinelCluster(_Context(), name=args.name, replicas=args.redis - 1,
                           sentinels=args.sentinels, down_after_ms=args.down_after_ms,
                           failover_timeout_ms=args.failover_timeout_ms)
    answer(ok=True, sentinel_ports=cl.sentinel_ports(), redis_ports=[r.port for r in cl.redis])

    def kill_redis(i):
        cl.redis[i].kill()

    def start_redis(i):
        cl.redis[i].kill()
        retry(cl.redis[i].start)
    def wait_synced(i, ms):
        return {"synced": bool(h.wait_until(lambda: s.replica_synced(cl.redis[i].port),
                                            ms / 1000.0, 0.1))}

    def wait_new_master(not_port, ms):
        return {"port": cl.wait_new_master(not_port, ms / 1000.0) or -1}

    def wait_settled(ms):
        return {"port": cl.wait_settled(ms / 1000.0) or -1}

    def dump_logs(n):
        cl.dump_logs(n, sys.stderr)
    return {"kill_redis": kill_redis, "start_redis": start_redis, "wait_synced": wait_synced,
            "wait_new_master": wait_new_master, "wait_settled": wait_settled,
            "dump_logs": dump_logs}, lambda: {}


class _RedisServer(h.RedisServer):
    """Up once PING gets any reply (PONG, or NOAUTH with --requirepass)."""

    def _ping(self):
        try:
            c = h.Resp(self.port, timeout=0.5)
        except OSError:
            return False
        try:
            c.cmd("PING")
            return True
        except h.RedisError:
            return True
        except (OSError, ConnectionError):
            return False
        finally:
            c.close()


def redis(args):
    """One redis-server on a free port (a port taken meanwhile: another)."""
    for attempt in range(5):
        try:
            r = _RedisServer(extra_args=args.extra)
            break
        except RuntimeError:
            if attempt == 4:
                raise

    def restart():
        r.kill()
        retry(r.start)

    def state():
        return {"pid": r.proc.pid if r.proc and r.proc.poll() is None else 0}
    answer(ok=True, port=r.port, dir=r.dir, **state())
    return {"kill": r.kill, "term": r.stop, "restart": restart}, state


def redis_tls(args):
    """TLS-only redis-servers (harness.TlsRedisServer) and the test
    certificates (tlsfiles: CA, server, client; an unrelated CA)."""
    import tlsfiles
    d = h.mktemp("baton-tls-")
    tls = tlsfiles.make_tls_files(d)
    other = tlsfiles.make_ca(d, "other-ca")
    servers = []
    for auth in args.auth_clients:
        for attempt in range(5):
            try:
                servers.append(h.TlsRedisServer(tls, auth_clients=auth == "yes"))
                break
            except RuntimeError:
                if attempt == 4:
                    raise

    def restart(i):
        servers[i].kill()
        retry(servers[i].start)

    def pause(i):
        servers[i].proc.send_signal(signal.SIGSTOP)
        wait_stopped(servers[i].proc.pid)

    def resume(i):
        servers[i].proc.send_signal(signal.SIGCONT)

    def pids():
        return {"pids": [s.proc.pid if s.proc and s.proc.poll() is None else 0
                         for s in servers]}
    answer(ok=True, ports=[s.port for s in servers], other_ca=other[0], **tls, **pids())
    return {"kill": lambda i: servers[i].kill(), "restart": restart, "pause": pause,
            "resume": resume}, pids


def etcd(args):
    import etcd as e
    if args.base:
        tempfile.tempdir = args.base
    cl = e.EtcdCluster(None, members=1, extra_args=args.extra)
    m = cl.members

    def restart(i):
        cl.kill(i)
        retry(lambda: cl.start_member(i))

    def pause(i):
        cl.pause(i)
        wait_stopped(m[i].pid)

    def pids():
        return {"pids": [x.pid if x.alive() else 0 for x in m]}
    answer(ok=True, urls=cl.urls, client_ports=[x.client_port for x in m],
           peer_ports=[x.peer_port for x in m], dir=cl.dir, **pids())
    return {"kill": cl.kill, "stop": cl.stop, "restart": restart, "pause": pause,
            "resume": cl.resume}, pids


def postgres(args):
    """One PostgreSQL 15 (postgres.PgServer) on a free port (a port taken
    meanwhile: another)."""
    import postgres as pg
    why = pg.available()
    if why:
        raise RuntimeError(why)
    srv = pg.PgServer(start=False)  # its stop (a cleanup) resumes a paused one
    for attempt in range(5):
        try:
            srv.start()
            break
        except RuntimeError:
            if attempt == 4:
                raise
            srv.port = h.free_port()

    def restart():
        srv.kill()
        retry(srv.start)

    def state():
        return {"pid": srv.postmaster_pid()}
    answer(ok=True, port=srv.port, dir=srv.dir, conninfo=srv.conninfo(), log=srv.log,
           **state())
    return {"kill": srv.kill, "stop": srv.stop, "restart": restart, "pause": srv.pause,
            "resume": srv.resume}, state


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="broker", required=True)
    ps = sub.add_parser("sentinel")
    ps.add_argument("--name", default="mymaster")
    ps.add_argument("--redis", type=int, default=2, help="1 master + replicas")
    ps.add_argument("--sentinels", type=int, default=3)
    ps.add_argument("--down-after-ms", type=int, default=1000)
    ps.add_argument("--failover-timeout-ms", type=int, default=2000)
    pr = sub.add_parser("redis")
    pr.add_argument("extra", nargs=argparse.REMAINDER, help="-- then extra redis-server arguments")
    pt = sub.add_parser("redis-tls")
    pt.add_argument("auth_clients", nargs="+", choices=("no", "yes"),
                    help="one server each: whether it requires a client certificate")
    pe = sub.add_parser("etcd")
    pe.add_argument("--base", help="the parent of the data directory (default: $TMPDIR)")
    pe.add_argument("extra", nargs=argparse.REMAINDER, help="-- then extra etcd arguments")
    sub.add_parser("postgres")
    args = p.parse_args()
    if getattr(args, "extra", None) and args.extra[0] == "--":
        args.extra = args.extra[1:]
    try:
        commands, state = {"redis": redis, "redis-tls": redis_tls, "sentinel": sentinel,
                           "etcd": etcd, "postgres": postgres}[args.broker](args)
    except Exception as ex:  # noqa: BLE001: reported to the C side
        answer(ok=False, error="%s: %s" % (type(ex).__name__, ex))
        sys.exit(1)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        try:
            result = commands[words[0]](*[int(w) for w in words[1:]]) or {}
            answer(ok=True, **state(), **result)
        except Exception as ex:  # noqa: BLE001: one command failed, the rest goes on
            answer(ok=False, error="%s: %s" % (type(ex).__name__, ex), **state())
    # A test that died closes the pipe and sends its SIGTERM (PR_SET_PDEATHSIG)
    # at once: a signal arriving now must not break into the cleanups below.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    sys.exit(0)  # the harness's cleanups (atexit): stopped, directories removed


if __name__ == "__main__":
    main()
