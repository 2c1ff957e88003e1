#!/usr/bin/env python3
"""Benchmark: baton's mysql_cdc endpoint against what users would run
instead (bench/peers/, the binlog CDC workload).

    bench/bench_peers_mysql_cdc.py [BUILD_DIR]
        (default: $BATON_BUILD_DIR or <source>/build-bench)

The same job for each subject, one at a time, never side by side: a Redis
lease and, as leader, the binlog of one mariadbd streamed from a recorded
file:pos, one JSON line per changed row (baton's mysql_cdc envelope fields)
written to a file.

- baton: one leader (mysql_cdc endpoint, start = "file:pos", stdout sink,
  its defaults otherwise: queue_size, checkpoint = auto, i.e. a fenced
  checkpoint in the locker every 100 ms / 1,000 row events), its lease in
  the locker (ttl_ms 60000, renew_ms 2000);
- the peer of bench/peers/ when node and npm are installed: Node.js with
  @vlasky/zongji (npm, pinned; on mysql2) + ioredis, zongji's README idiom
  (includeEvents tablemap + write/update/delete rows) from the same
  file:pos; lease ttl PEER_TTL_MS=60000. Its row values are zongji's
  defaults (DATETIME as a Date: "...T...Z" where baton writes the zoneless
  "...T..."); everything else of the envelope matches baton's, which is
  checked on the first and last row of every run.

Workload: bench_mysql_cdc.sh's. One mariadbd (tests/integration/lib/
mariadb.py: ROW binlog, FULL row metadata, CRC32 checksums, MariaDB's
defaults otherwise) and one redis-server (the locker), started here on free
loopback ports in temporary directories and stopped on every exit path;
a replication user (REPLICATION SLAVE, REPLICATION CLIENT, SELECT). N rows
(default 1,000,000: at 200,000 baton's window is ~0.1 s, too short to
time) are inserted first (INSERT ... SELECT from the sequence engine, 10,000 rows per statement, into a 5-column table: INT key, BIGINT,
VARCHAR, DECIMAL, DATETIME), the binlog's file:pos recorded before and
after; then each subject, started afresh, streams that range and its file
is watched until it holds the N lines (the same observer for both: at most
4 MiB read a look, the next look at once while lines come, else after
1 ms). Per subject: rows/s from the first line to the N-th line ((N - lines
at the first look) / that time: process start and connection setup left
out of both), CPU per row over the same window (its threads' run time,
/proc/<pid>/task/*/schedstat), peak RSS (VmHWM once the N lines are there).
Output goes to /dev/shm when it is writable (bench_mysql_cdc.sh: on disk,
writeback throttled the later rounds). For information, mariadbd's CPU over
the window (its binlog dump thread; near 100 % of a core = the server sets
the pace) and when the first line came after the spawn. Best of ROUNDS
(default 2) rounds by throughput; the order of the subjects is reversed
every other round.

Targets (issue 22), baton against each peer: throughput >= the peer's; CPU
per row <= 1/3 of the peer's; peak RSS <= 1/5 of the peer's. Prints RESULT
{json} lines (bench/run's contract). Every wait is bounded; the whole run is
stopped with an error after BUDGET_S (default 240) seconds.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

if len(sys.argv) <= 1:
    os.environ.setdefault("BATON_BUILD_DIR", os.path.join(benchlib.SRC, "build-bench"))
h = benchlib.harness()
import mariadb as mdb  # noqa: E402  (tests/integration/lib, on the path now)
import subjects  # noqa: E402
from subjects import LineCounter, cpu_ns  # noqa: E402

N = int(os.environ.get("N", "1000000"))
ROUNDS = max(1, int(os.environ.get("ROUNDS", "2")))
BUDGET_S = int(os.environ.get("BUDGET_S", "240"))
START_S = 30           # bound of a subject's start (leader, connected, first row)
WAIT_S = 120           # bound of the stream, first line to N-th
TTL_MS = 60000
RENEW_MS = 2000
USER, PASSWORD = "bench", "bench"
PEER_KEY = "peer:lease:bench"
# envelope fields that differ by design: who wrote it, when, and in which
# term; the DATETIME column (see the docstring)
NOT_COMPARED = ("endpoint", "epoch", "received_at")


def say(*a):
    print(*a, flush=True)


class _Peer:
    """A peer process: stdout to its file, stderr to a log of its own."""

    def __init__(self, work, srv, locker, f0, p0, k):
        self.locker = locker
        stamp = time.monotonic_ns()
        self.out = os.path.join(work, "%s-%d.out" % (self.tag, stamp))
        self.err = os.path.join(work, "%s-%d.err" % (self.tag, stamp))
        argv = self.argv + [str(locker.port), str(srv.port), USER, PASSWORD, f0, str(p0)]
        with open(self.out, "wb") as o, open(self.err, "wb") as e:
            self.proc = subprocess.Popen(argv, stdout=o, stderr=e, stdin=subprocess.DEVNULL,
                                         env=dict(os.environ, PEER_TTL_MS=str(TTL_MS)))
        self.pid = self.proc.pid
        h._cleanups.append(self.kill)

    def alive(self):
        return self.proc.poll() is None

    def log_tail(self):
        try:
            with open(self.err, errors="replace") as f:
                return f.read()[-1000:]
        except FileNotFoundError:
            return ""

    def still_leads(self, epoch):
        return self.locker.c.cmd("EXISTS", PEER_KEY) == 1

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        h.stop_process(self.proc)


class ZongjiPeer(_Peer):
    name = "node/zongji"
    tag = "node-zongji"
    argv = ["node", subjects.node_peer(name)]


class Baton:
    name = "baton"

    def __init__(self, work, srv, locker, f0, p0, k):
        self.mport = h.free_port()
        main = h.main_cfg(redis_port=locker.port, lease={"ttl_ms": TTL_MS, "renew_ms": RENEW_MS},
                          extra='metrics = { listen = "127.0.0.1:%d"; };' % self.mport)
        ep = ('name = "bench"; type = "mysql_cdc"; sink = "out"; host = "127.0.0.1"; port = %d;\n'
              'user = "%s"; password_env = "BENCH_PW"; server_id = %d; start = "%s:%d";\n'
              % (srv.port, USER, 900 + k, f0, p0))
        self.b = h.Baton(work, main, {"cdc.cfg": ep}, env={"BENCH_PW": PASSWORD},
                         name="baton-%d" % time.monotonic_ns())
        self.out, self.pid = self.b.out_path, self.b.pid

    def alive(self):
        return self.b.alive()

    def log_tail(self):
        return self.b.stderr_text()[-1000:]

    def still_leads(self, epoch):
        st = h.status_endpoints(self.mport).get("bench", {})
        return st.get("role") == "leader" and st.get("epoch") == epoch

    def stop(self):
        rc = self.b.term()
        if rc != 0:
            raise RuntimeError("baton exited %s:\n%s" % (rc, self.log_tail()))


class ChunkedLineCounter(LineCounter):
    """benchlib.LineCounter reading at most CHUNK bytes a look (as
    bench_mysql_cdc.sh's watch): unbounded, a look reads until the end of
    the file, and with baton appending ~400 MB/s one look chased it to the
    end of the stream (0.4 s: all 200,000 lines at the second look, no
    window to time)."""
    CHUNK = 1 << 22

    def __call__(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.off)
                data = f.read(self.CHUNK)
        except FileNotFoundError:
            return self.n
        self.off += len(data)
        self.n += data.count(b"\n")
        return self.n


def first_last(path):
    """The first and the last envelope of a file."""
    with open(path, "rb") as f:
        first = json.loads(f.readline())
        f.seek(max(0, os.path.getsize(path) - 65536))
        last = json.loads(f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1])
    return first, last


def comparable(rec):
    """An envelope without the fields that differ by design, its row images
    without the DATETIME column (zongji: a Date, in UTC under the process's
    time zone)."""
    r = {k: v for k, v in rec.items() if k not in NOT_COMPARED}
    for side in ("before", "after"):
        if isinstance(r.get(side), dict):
            r[side] = {k: v for k, v in r[side].items() if k != "dt"}
    return r


def measure(cls, work, srv, locker, f0, p0, k):
    """One round of one subject: a dict of its figures."""
    t_spawn = time.monotonic()
    s = cls(work, srv, locker, f0, p0, k)
    try:
        count = ChunkedLineCounter(s.out)
        deadline = t_spawn + START_S
        while True:  # the first line: leader, connected, streaming
            n = count()
            if n:
                t0 = time.monotonic()
                c0, m0, l0 = cpu_ns(s.pid), cpu_ns(srv.proc.pid), n
                if n >= N:  # no window to time
                    raise RuntimeError("%s: all %d lines were there at the first look (%.3f s "
                                       "after the spawn)" % (cls.name, n, t0 - t_spawn))
                break
            if not s.alive():
                raise RuntimeError("%s exited: %s" % (cls.name, s.log_tail()))
            if time.monotonic() > deadline:
                raise RuntimeError("%s wrote no row within %d s: %s" % (cls.name, START_S,
                                                                       s.log_tail()))
            time.sleep(0.001)
        deadline = t0 + WAIT_S
        while True:  # to the N-th line; the next look at once while lines come
            prev, n = n, count()
            if n >= N:
                t1 = time.monotonic()
                c1, m1 = cpu_ns(s.pid), cpu_ns(srv.proc.pid)
                break
            if n > prev:
                continue
            time.sleep(0.001)
            if not s.alive():
                raise RuntimeError("%s exited after %d of %d rows: %s" % (cls.name, n, N,
                                                                          s.log_tail()))
            if time.monotonic() > deadline:
                raise RuntimeError("%s: %d of %d rows after %d s" % (cls.name, n, N, WAIT_S))
        hwm = benchlib.status_kb(s.pid, "VmHWM")
        time.sleep(0.3)  # nothing follows the range: no more lines may come
        if count() != N:
            raise RuntimeError("%s wrote %d lines for the %d rows" % (cls.name, count(), N))
        first, last = first_last(s.out)
        if first.get("epoch") != last.get("epoch") or not s.still_leads(first.get("epoch")):
            raise RuntimeError("%s lost its lease (or its term changed) during the run"
                               % cls.name)
        return {"rate": (N - l0) / (t1 - t0), "cpu_us": (c1 - c0) / 1e3 / (N - l0),
                "hwm_kb": hwm, "secs": t1 - t0, "first": t0 - t_spawn, "l0": l0,
                "server": (m1 - m0) / 1e9 / (t1 - t0), "cores": (c1 - c0) / 1e9 / (t1 - t0),
                "bytes": os.path.getsize(s.out) / N, "first_rec": first, "last_rec": last}
    finally:
        s.stop()
        locker.c.cmd("FLUSHALL")  # no lease and no checkpoint left for the next subject
        try:
            os.remove(s.out)  # ~60 MB each
        except OSError:
            pass


def outdir():
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    d = tempfile.mkdtemp(prefix="baton-bench-peers-cdc-", dir=base)
    h._cleanups.append(lambda: shutil.rmtree(d, ignore_errors=True))
    return d


def main():
    try:
        return bench()
    except (RuntimeError, TimeoutError, OSError, subprocess.SubprocessError, mdb.SqlError) as e:
        say("FAILED: %s" % e)
        return 1


def bench():
    if not os.path.exists(h.BATON_BIN):
        print("missing %s (build bench_programs)" % h.BATON_BIN, file=sys.stderr)
        return 2
    for tool in ("mariadbd", "mariadb-install-db", "mariadb", "redis-server"):
        if not shutil.which(tool):
            say("%s is not installed: nothing to measure" % tool)
            return 0
    peers = subjects.available_peers(log=say, peers={ZongjiPeer.name: ZongjiPeer})
    if not peers:
        say("no peer can run here (see above): nothing to compare")
        return 0
    srv = mdb.MariaServer()
    srv.create_user(USER, PASSWORD)
    srv.sql("CREATE DATABASE seq; CREATE DATABASE b; CREATE TABLE b.t (id INT PRIMARY KEY, "
            "a BIGINT, s VARCHAR(64), d DECIMAL(10,2), dt DATETIME) CHARSET utf8mb4;")
    version = srv.sql("SELECT VERSION(), @@binlog_format, @@binlog_row_image, "
                      "@@binlog_checksum, @@binlog_row_metadata")[0]
    f0, p0 = srv.master_status()
    t = time.monotonic()
    for lo in range(1, N + 1, 10000):
        hi = min(N, lo + 9999)
        srv.sql("INSERT INTO b.t SELECT seq, seq * 1000003, CONCAT('row-', seq, '-h\u00e9llo'), "
                "seq / 7, '2024-01-01 00:00:00' + INTERVAL seq SECOND FROM seq.seq_%d_to_%d;"
                % (lo, hi))
    f1, p1 = srv.master_status()
    if f0 != f1:
        raise RuntimeError("the insert rotated the binlog (%s -> %s)" % (f0, f1))
    locker = h.RedisServer()
    locker.c = locker.client()
    work = outdir()
    say("mysql_cdc peers benchmark: %d rows inserted in %.1f s, binlog %s:%d .. %s:%d; MariaDB %s "
        "(binlog_format %s, row_image %s, checksum %s, row_metadata %s) on 127.0.0.1:%d, redis "
        "locker 127.0.0.1:%d" % (N, time.monotonic() - t, f0, p0, f1, p1, *version, srv.port,
                                  locker.port))
    best, firsts = {}, {}
    for rnd in range(ROUNDS):
        order = [Baton] + peers
        for i, cls in enumerate(order if rnd % 2 == 0 else order[::-1]):
            r = measure(cls, work, srv, locker, f0, p0, rnd * 10 + i)
            say("  round %d %-12s %8.0f rows/s (%.2f s; first line %.2f s after the spawn, %d "
                "lines by then)  %5.2f us/row (%.2f cores)  peak RSS %6.1f MiB  %.0f B/line; "
                "mariadbd %.0f%% of a core" % (rnd + 1, cls.name, r["rate"], r["secs"],
                                                r["first"], r["l0"], r["cpu_us"], r["cores"],
                                                r["hwm_kb"] / 1024.0, r["bytes"],
                                                r["server"] * 100))
            firsts.setdefault(cls.name, (r["first_rec"], r["last_rec"]))
            if cls.name not in best or r["rate"] > best[cls.name]["rate"]:
                best[cls.name] = r
    # the same rows: the first and last envelopes of baton and of each peer
    # agree but for who wrote them, when, and zongji's DATETIME format
    bf, bl = firsts[Baton.name]
    for cls in peers:
        pf, pl = firsts[cls.name]
        for what, b, p in (("first", bf, pf), ("last", bl, pl)):
            if comparable(b) != comparable(p):
                raise RuntimeError("%s's %s row differs from baton's:\n  baton %s\n  %s %s"
                                   % (cls.name, what, json.dumps(b), cls.name, json.dumps(p)))
        say("%s's first line: %s" % (cls.name, json.dumps(pf, ensure_ascii=False)))
    say("baton's first line: %s" % json.dumps(bf, ensure_ascii=False))
    bt = best[Baton.name]
    wl0 = "mysql_cdc %d rows (5 columns) streamed from a recorded file:pos" % N
    results = []
    for cls in peers:
        p = best[cls.name]
        w = "%s, baton / %s" % (wl0, cls.name)
        results.append({"workload": w + ": throughput, first to last line", "baton":
                        round(bt["rate"]), "baseline": round(p["rate"]), "unit": "rows/s",
                        "ratio": round(bt["rate"] / p["rate"], 2), "target": ">= 1.0",
                        "pass": bt["rate"] / p["rate"] >= 1.0})
        results.append({"workload": w + ": CPU per row", "baton": round(bt["cpu_us"], 2),
                        "baseline": round(p["cpu_us"], 2), "unit": "us/row",
                        "ratio": round(bt["cpu_us"] / p["cpu_us"], 2), "target": "<= 0.33",
                        "pass": bt["cpu_us"] / p["cpu_us"] <= 0.34})
        results.append({"workload": w + ": peak RSS", "baton": round(bt["hwm_kb"] / 1024.0, 1),
                        "baseline": round(p["hwm_kb"] / 1024.0, 1), "unit": "MiB",
                        "ratio": round(bt["hwm_kb"] / p["hwm_kb"], 2), "target": "<= 0.2",
                        "pass": bt["hwm_kb"] / p["hwm_kb"] <= 0.2})
        results.append({"workload": w + ": mariadbd's CPU over the window (info: near 100 = the "
                        "server sets the pace)", "baton": round(bt["server"] * 100),
                        "baseline": round(p["server"] * 100), "unit": "% of a core",
                        "ratio": round(bt["server"] / p["server"], 2) if p["server"] else None,
                        "target": None, "pass": None})
    for r in results:
        print("RESULT " + json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    benchlib.run(main, BUDGET_S)
