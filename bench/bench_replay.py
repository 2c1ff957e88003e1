#!/usr/bin/env python3
"""Benchmark: warm standby replay (failover = "replay") on redis_psub.

    bench/bench_replay.py [BUILD_DIR]      (default: $BATON_BUILD_DIR or ./build)

Two redis-servers on loopback: the source (pattern subscribers, no pub/sub
output buffer limit) and the locker (lease and replay marks stay off the
source). Three parts, each figure a RESULT {json} line (bench/run contract):

1. Leader throughput, replay on vs off. The workload of bench_redis_psub.sh:
   redis-benchmark -c 4 -P 32, N (default 500,000) "PUBLISH chan.x <30-byte
   payload>", one baton replica (leader, stdout sink to a file), pattern
   chan.*. Rate = N / (start of redis-benchmark until the file holds N more
   lines). Rounds alternate "off" (failover gap, the default) and "on"
   (failover = "replay", default replay settings: the leader also copies
   every message into its 16 MiB ring and writes a mark every 50 ms), a fresh
   leader per run (the first mode alternates); ROUNDS (default 5) rounds,
   best of each compared. Target: on / off >= 0.9. Info: the medians' ratio
   (on a shared 2-core machine single runs are bimodal) and the leader's CPU
   per message on vs off (lowest of each: the ring copy's cost).
2. Standby vs leader CPU per message. Two replicas with replay on (A leads,
   B stands by: checked on /status before and after); ROUNDS x N messages as
   in 1; CPU = utime + stime of /proc/<pid>/stat (ticks / CLK_TCK) of each
   process over the window from the start of redis-benchmark until the
   leader's file holds N more lines and the standby's
   baton_replay_buffered_total grew by N, summed over the rounds, divided by
   the messages. Target: standby / leader <= 0.5 (both us/msg as info; the
   log also shows the threads' schedstat run time as a finer cross-check).
3. Ring memory at about RATE (default 300,000) msg/s: a paced publisher
   (one pipelined connection, the same PUBLISH) for PUB_S seconds (default
   3; 1.5 when N < 300,000, as under bench/run --quick) to two replicas with
   replay on, default window (2 x ttl 3000 + 1 s = 7 s):
   a. max_bytes = MAX_BYTES (default 256 MiB): the peak
      baton_replay_ring_bytes of the standby (sampled every 50 ms), its
      ring bytes per message, its peak RSS (VmHWM) and the achieved rate
      (info figures);
   b. default max_bytes (16 MiB): the peak ring bytes of both replicas stay
      <= 16 MiB + 64 KiB (target), and the ring really filled (evictions by
      max_bytes counted).
   The leader's stdout goes to /dev/null in part 3 (the standby is measured).

Every wait is bounded (TIMEOUT_S, default 120, per measurement); everything
started is stopped on exit. Build RelWithDebInfo or Release for real figures.
Knobs: N, ROUNDS, RATE, PUB_S, MAX_BYTES, TIMEOUT_S, QUICK=1 (N=100000,
ROUNDS=1, PUB_S=1.5 unless set).
"""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
from statistics import median

SRC = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
if len(sys.argv) > 1:
    os.environ["BATON_BUILD_DIR"] = os.path.abspath(sys.argv[1])
    os.environ["BATON_BIN"] = os.path.join(os.environ["BATON_BUILD_DIR"], "baton")
os.environ.setdefault("BATON_BUILD_DIR", os.path.join(SRC, "build"))
os.environ.setdefault("BATON_BIN", os.path.join(os.environ["BATON_BUILD_DIR"], "baton"))
os.environ.setdefault("BATON_SOURCE_DIR", SRC)
if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
    tempfile.tempdir = "/dev/shm"  # sink output files: no disk in the figures
sys.path.insert(0, os.path.join(SRC, "tests", "integration", "lib"))
import harness as h  # noqa: E402

QUICK = os.environ.get("QUICK", "") not in ("", "0")
N = int(os.environ.get("N", "100000" if QUICK else "500000"))
ROUNDS = int(os.environ.get("ROUNDS", "1" if QUICK else "5"))
RATE = int(os.environ.get("RATE", "300000"))
PUB_S = float(os.environ.get("PUB_S", "1.5" if (QUICK or N < 300000) else "3"))
MAX_BYTES = int(os.environ.get("MAX_BYTES", str(256 << 20)))
TIMEOUT_S = float(os.environ.get("TIMEOUT_S", "120"))
PAYLOAD = os.environ.get("PAYLOAD", "payload-30-bytes-0123456789abc")
DEFAULT_MAX = 16 << 20
RING_SLACK = 64 << 10
HZ = os.sysconf("SC_CLK_TCK")
EP = "bench"

RESULTS = []


def result(workload, baton, baseline, unit, ratio, target, ok):
    r = {"workload": workload, "baton": baton, "baseline": baseline, "unit": unit,
         "ratio": ratio, "target": target, "pass": ok}
    RESULTS.append(r)
    print("RESULT " + json.dumps(r), flush=True)


def say(*a):
    print(*a, flush=True)


# ---- /proc ---------------------------------------------------------------

def ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14, 15)


def run_ns(pid):
    """Sum of the threads' on-CPU ns (schedstat): a finer cross-check of ticks."""
    total = 0
    try:
        for t in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    except OSError:
        return None
    return total


def vm_kb(pid, what):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(what + ":"):
                return int(line.split()[1])
    return 0


# ---- baton replicas --------------------------------------------------------

class Replica:
    """One baton process: its own config dir, stdout to out_path, a metrics
    listener on its own port."""

    def __init__(self, work, name, locker_port, source_port, replay, replay_opts="",
                 out_path=None):
        self.name = name
        self.dir = os.path.join(work, name)
        os.makedirs(os.path.join(self.dir, "endpoints.d"), exist_ok=True)
        self.mport = h.free_port()
        self.cfg = os.path.join(self.dir, "baton.cfg")
        with open(self.cfg, "w") as f:
            f.write('locker = { type = "redis"; host = "127.0.0.1"; port = %d; };\n'
                    'sinks = ( { name = "out"; type = "stdout"; } );\n'
                    'log = { level = "info"; };\n'
                    'metrics = { listen = "127.0.0.1:%d"; };\n' % (locker_port, self.mport))
        ep = ('name = "%s"; type = "redis_psub"; sink = "out";\n'
              'host = "127.0.0.1"; port = %d; patterns = [ "chan.*" ];\n' % (EP, source_port))
        if replay:
            ep += 'failover = "replay";\n' + (replay_opts + "\n" if replay_opts else "")
        with open(os.path.join(self.dir, "endpoints.d", "ep.cfg"), "w") as f:
            f.write(ep)
        self.out_path = out_path or os.path.join(self.dir, "out.jsonl")
        self.err_path = os.path.join(self.dir, "err.log")
        with open(self.out_path, "ab") as out, open(self.err_path, "ab") as err:
            self.proc = subprocess.Popen([h.BATON_BIN, "-c", self.cfg], stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL)
        h._cleanups.append(self.kill)

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        """SIGTERM (graceful: the lease is released), bounded wait."""
        h.stop_process(self.proc, timeout=15)

    def get(self, path):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.mport, timeout=2)
            c.request("GET", path)
            body = c.getresponse().read().decode()
            c.close()
            return body
        except (OSError, http.client.HTTPException):
            return None

    def role(self):
        body = self.get("/status")
        try:
            for e in json.loads(body)["endpoints"]:
                if e["name"] == EP:
                    return e["role"]
        except (TypeError, ValueError, KeyError):
            pass
        return None

    def metrics(self):
        """{metric name (with labels other than endpoint): value} for EP."""
        body = self.get("/metrics")
        out = {}
        if body is None:
            return out
        tag = 'endpoint="%s"' % EP
        for line in body.splitlines():
            if line.startswith("#") or tag not in line:
                continue
            name, _, rest = line.partition("{")
            labels, _, val = rest.rpartition("} ")
            extra = ",".join(l for l in labels.split(",") if l != tag)
            try:
                out[name + ("{%s}" % extra if extra else "")] = float(val)
            except ValueError:
                pass
        return out

    def log_tail(self, n=20):
        try:
            with open(self.err_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


def psubscribers(port):
    """Clients with a pattern subscription (PUBSUB NUMPAT counts distinct
    patterns, not subscribers)."""
    try:
        c = h.Resp(port, timeout=1)
        try:
            text = c.cmd("CLIENT", "LIST")
        finally:
            c.close()
    except (OSError, h.RedisError, ConnectionError):
        return -1
    if isinstance(text, bytes):
        text = text.decode()
    n = 0
    for line in (text or "").splitlines():
        for kv in line.split():
            if kv.startswith("psub=") and kv != "psub=0":
                n += 1
    return n


def wait_for(pred, timeout, what, reps=()):
    if h.wait_until(pred, timeout, 0.02):
        return
    for r in reps:
        sys.stderr.write("--- %s log:\n%s" % (r.name, r.log_tail()))
    raise RuntimeError("timeout after %.0f s waiting for %s" % (timeout, what))


def flush_locker(port):
    """Drops the lease and the replay mark a previous run left (in a finally:
    on a signal the servers may be gone already)."""
    try:
        c = h.Resp(port, timeout=2)
        try:
            c.cmd("FLUSHALL")
        finally:
            c.close()
    except (OSError, h.RedisError, ConnectionError):
        pass


# ---- workloads -------------------------------------------------------------

def redis_benchmark(port, n):
    p = subprocess.Popen(["redis-benchmark", "-p", str(port), "-c", "4", "-P", "32", "-n", str(n),
                          "-q", "PUBLISH", "chan.x", PAYLOAD],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    h._cleanups.append(lambda: h.stop_process(p, 2))
    return p


def bench_rate(p, timeout):
    try:
        out, _ = p.communicate(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    for line in out.replace("\r", "\n").splitlines():
        if "requests per second" in line:
            try:
                return float(line.split(":", 1)[1].split()[0])
            except (ValueError, IndexError):
                pass
    return None


class LineCounter:
    """Counts lines appended to a file since construction."""

    def __init__(self, path):
        self.f = open(path, "rb")
        self.f.seek(0, os.SEEK_END)
        self.lines = 0

    def poll(self):
        while True:
            chunk = self.f.read(1 << 20)
            if not chunk:
                return self.lines
            self.lines += chunk.count(b"\n")

    def close(self):
        self.f.close()


PACED = r'''
import socket, sys, threading, time
port, rate, secs, payload = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
cmd = b"*3\r\n$7\r\nPUBLISH\r\n$6\r\nchan.x\r\n$%d\r\n%s\r\n" % (len(payload), payload.encode())
CH = 500
chunk = cmd * CH
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
acked = [0]
subs = [None]
def reader():
    buf = b""
    while True:
        d = s.recv(1 << 20)
        if not d:
            return
        acked[0] += d.count(b"\n")
        if subs[0] is None:
            buf += d
            if b"\n" in buf:
                subs[0] = buf.split(b"\r\n", 1)[0].decode()
th = threading.Thread(target=reader, daemon=True)
th.start()
sent = 0
t0 = time.monotonic()
while True:
    now = time.monotonic()
    el = now - t0
    if el >= secs:
        break
    due = int(rate * el)
    while sent + CH <= due:
        s.sendall(chunk)
        sent += CH
    time.sleep(0.001)
t_sent = time.monotonic() - t0
deadline = time.monotonic() + 30
while acked[0] < sent and time.monotonic() < deadline:
    time.sleep(0.005)
t_acked = time.monotonic() - t0
print("%d %d %.4f %.4f %s" % (sent, acked[0], t_sent, t_acked, subs[0]))
'''


def paced_publish(port, rate, secs):
    p = subprocess.Popen([sys.executable, "-c", PACED, str(port), str(rate), str(secs), PAYLOAD],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    h._cleanups.append(lambda: h.stop_process(p, 2))
    return p


# ---- part 1 ----------------------------------------------------------------

def leader_run(work, tag, locker, source, replay):
    out = os.path.join(work, "p1-%s.out" % tag)
    r = Replica(work, "p1-" + tag, locker.port, source.port, replay, out_path=out)
    try:
        wait_for(lambda: r.role() == "leader" and psubscribers(source.port) == 1, 15,
                 "%s: leader subscribed" % r.name, [r])
        lc = LineCounter(out)
        c0, n0 = ticks(r.pid), run_ns(r.pid)
        t0 = time.monotonic()
        bench = redis_benchmark(source.port, N)
        t_done = None
        while time.monotonic() - t0 < TIMEOUT_S:
            if lc.poll() >= N:
                t_done = time.monotonic()
                break
            time.sleep(0.005)
        c1, n1 = ticks(r.pid), run_ns(r.pid)
        pub = bench_rate(bench, TIMEOUT_S - (time.monotonic() - t0))
        lc.close()
        if t_done is None:
            raise RuntimeError("%s: %d of %d lines after %.0f s\n%s"
                               % (r.name, lc.lines, N, TIMEOUT_S, r.log_tail()))
        m = r.metrics()
        rate = N / (t_done - t0)
        cpu_us = (c1 - c0) / HZ * 1e6 / N
        ns_us = (n1 - n0) / 1e3 / N if n0 is not None and n1 is not None else float("nan")
        hwm = vm_kb(r.pid, "VmHWM")
        say("  %-4s replay %-3s: %8.0f msg/s (%.3f s; redis-benchmark %s/s; CPU %.2f us/msg "
            "[schedstat %.2f]; VmHWM %d KiB; ring %d msgs %d B; marks %d)"
            % (tag, "on" if replay else "off", rate, t_done - t0,
               "%.0f" % pub if pub else "?", cpu_us, ns_us, hwm,
               m.get("baton_replay_ring_messages", 0), m.get("baton_replay_ring_bytes", 0),
               m.get("baton_replay_marks_written_total", 0)))
        return rate, cpu_us, hwm
    finally:
        r.stop()
        try:
            os.unlink(out)
        except OSError:
            pass
        flush_locker(locker.port)


def part1(work, locker, source):
    say("1. leader throughput, replay off vs on: %d x redis-benchmark -c 4 -P 32 PUBLISH chan.x "
        "<%d-byte payload>, pattern chan.*, %d round(s)" % (N, len(PAYLOAD), ROUNDS))
    best = {False: (0, None, None), True: (0, None, None)}
    cpus = {False: [], True: []}
    rates = {False: [], True: []}
    for rnd in range(ROUNDS):
        # alternate which goes first, so neither always runs on a warmer machine
        order = (False, True) if rnd % 2 == 0 else (True, False)
        for replay in order:
            got = leader_run(work, "r%d-%s" % (rnd + 1, "on" if replay else "off"), locker,
                             source, replay)
            cpus[replay].append(got[1])
            rates[replay].append(got[0])
            if got[0] > best[replay][0]:
                best[replay] = got
    off, on = best[False][0], best[True][0]
    ratio = round(on / off, 3)
    result("replay leader msg/s, on vs off (best of %d, %d msgs)" % (ROUNDS, N),
           round(on), round(off), "msg/s", ratio, ">= 0.9", ratio >= 0.9)
    med_off, med_on = median(rates[False]), median(rates[True])
    result("replay leader msg/s, on vs off (median of %d, info)" % ROUNDS,
           round(med_on), round(med_off), "msg/s", round(med_on / med_off, 3), None, None)
    cpu_on, cpu_off = min(cpus[True]), min(cpus[False])
    result("replay leader CPU per msg, on vs off (lowest of %d, info)" % ROUNDS,
           round(cpu_on, 3), round(cpu_off, 3), "us/msg", round(cpu_on / cpu_off, 3), None, None)
    return best, (cpu_off, cpu_on)


# ---- part 2 ----------------------------------------------------------------

def pair(work, tag, locker, source, replay_opts="", leader_out=None):
    """Replica A (leader), then B (standby); both subscribed."""
    a = Replica(work, tag + "-A", locker.port, source.port, True, replay_opts,
                out_path=leader_out)
    wait_for(lambda: a.role() == "leader" and psubscribers(source.port) == 1, 15,
             "%s leader subscribed" % a.name, [a])
    b = Replica(work, tag + "-B", locker.port, source.port, True, replay_opts)
    wait_for(lambda: b.role() == "standby" and psubscribers(source.port) == 2, 15,
             "%s standby subscribed" % b.name, [a, b])
    return a, b


def part2(work, locker, source):
    say("2. CPU per message, standby vs leader (replay on, 2 replicas; %d x %d msgs as in 1)"
        % (ROUNDS, N))
    a, b = pair(work, "p2", locker, source)
    tot = {"lt": 0, "st": 0, "ln": 0, "sn": 0, "n": 0}
    roles = None
    try:
        for rnd in range(ROUNDS):
            lc = LineCounter(a.out_path)
            buf0 = b.metrics().get("baton_replay_buffered_total", 0)
            ca0, cb0 = ticks(a.pid), ticks(b.pid)
            na0, nb0 = run_ns(a.pid), run_ns(b.pid)
            t0 = time.monotonic()
            bench = redis_benchmark(source.port, N)
            t_lead = t_stby = None
            k = 0
            while time.monotonic() - t0 < TIMEOUT_S and (t_lead is None or t_stby is None):
                if t_lead is None and lc.poll() >= N:
                    t_lead = time.monotonic()
                # the standby's counter over HTTP every 100 ms only: each
                # /metrics request costs the standby CPU in the window
                if t_stby is None and k % 20 == 0 and \
                        b.metrics().get("baton_replay_buffered_total", 0) - buf0 >= N:
                    t_stby = time.monotonic()
                k += 1
                time.sleep(0.005)
            ca1, cb1 = ticks(a.pid), ticks(b.pid)
            na1, nb1 = run_ns(a.pid), run_ns(b.pid)
            pub = bench_rate(bench, 10)
            lc.close()
            if t_lead is None or t_stby is None:
                raise RuntimeError("part 2: leader %d lines, standby buffered %s of %d after %.0f s"
                                   % (lc.lines, b.metrics().get("baton_replay_buffered_total"),
                                      N, TIMEOUT_S))
            roles = (a.role(), b.role())
            if roles != ("leader", "standby"):
                break
            lt, st = ca1 - ca0, cb1 - cb0
            ln, sn = na1 - na0, nb1 - nb0
            for key, v in (("lt", lt), ("st", st), ("ln", ln), ("sn", sn), ("n", N)):
                tot[key] += v
            say("  round %d: leader %.2f us/msg (%d ticks; schedstat %.2f), standby %.2f us/msg "
                "(%d ticks; schedstat %.2f), standby/leader %.3f; leader done after %.3f s, "
                "standby by %.3f s; redis-benchmark %s/s"
                % (rnd + 1, lt / HZ * 1e6 / N, lt, ln / 1e3 / N, st / HZ * 1e6 / N, st,
                   sn / 1e3 / N, st / lt if lt else float("nan"), t_lead - t0, t_stby - t0,
                   "%.0f" % pub if pub else "?"))
        valid = roles == ("leader", "standby") and tot["n"] > 0
        if not valid:
            say("  WARNING: roles changed (%r): the figure is not valid" % (roles,))
        n = max(1, tot["n"])
        lead_us = tot["lt"] / HZ * 1e6 / n
        stby_us = tot["st"] / HZ * 1e6 / n
        lead_ns = tot["ln"] / 1e3 / n
        stby_ns = tot["sn"] / 1e3 / n
        ratio = round(stby_us / lead_us, 3) if lead_us > 0 else None
        result("replay standby vs leader CPU per msg (%d x %d msgs)" % (ROUNDS, N),
               round(stby_us, 3), round(lead_us, 3), "us/msg", ratio, "<= 0.5",
               bool(valid and ratio is not None and ratio <= 0.5))
        result("replay leader CPU per msg (2 replicas, info)", round(lead_us, 3), None,
               "us/msg", None, None, None)
        result("replay standby CPU per msg (2 replicas, info)", round(stby_us, 3), None,
               "us/msg", None, None, None)
        return lead_us, stby_us, lead_ns, stby_ns
    finally:
        for r in (b, a):
            r.stop()
        try:
            os.unlink(a.out_path)
        except OSError:
            pass
        flush_locker(locker.port)


# ---- part 3 ----------------------------------------------------------------

def ring_phase(work, tag, locker, source, max_bytes, secs):
    opts = "replay = { max_bytes = %d; };" % max_bytes if max_bytes != DEFAULT_MAX else ""
    a, b = pair(work, tag, locker, source, opts, leader_out="/dev/null")
    try:
        mb0 = b.metrics()
        buf0 = mb0.get("baton_replay_buffered_total", 0)
        pk = {"A": (0, 0), "B": (0, 0)}  # (bytes, messages at that sample)
        t0 = time.monotonic()
        pub = paced_publish(source.port, RATE, secs)
        last_b = None
        while True:
            for key, r in (("A", a), ("B", b)):
                m = r.metrics()
                if not m:
                    continue
                by = m.get("baton_replay_ring_bytes", 0)
                if by > pk[key][0]:
                    pk[key] = (by, m.get("baton_replay_ring_messages", 0))
                if key == "B":
                    last_b = m
            done = pub.poll() is not None
            if done and last_b is not None:
                break
            if time.monotonic() - t0 > secs + TIMEOUT_S:
                raise RuntimeError("%s: publisher did not finish" % tag)
            time.sleep(0.05)
        out, err = pub.communicate(timeout=5)
        try:
            sent, acked, t_sent, t_acked, subs = out.split()
            sent, acked, t_sent, t_acked = int(sent), int(acked), float(t_sent), float(t_acked)
        except ValueError:
            raise RuntimeError("%s: publisher failed: %s %s" % (tag, out, err[-500:]))
        # the standby drains what Redis still holds for it (bounded)
        want = buf0 + acked
        h.wait_until(lambda: b.metrics().get("baton_replay_buffered_total", 0) >= want, 30, 0.05)
        t_end = time.monotonic()
        mb = b.metrics()
        for key, r in (("A", a), ("B", b)):
            m = mb if key == "B" else r.metrics()
            by = m.get("baton_replay_ring_bytes", 0)
            if by > pk[key][0]:
                pk[key] = (by, m.get("baton_replay_ring_messages", 0))
        got = mb.get("baton_replay_buffered_total", 0) - buf0
        hwm = {k: vm_kb(r.pid, "VmHWM") for k, r in (("A", a), ("B", b))}
        rss = {k: vm_kb(r.pid, "VmRSS") for k, r in (("A", a), ("B", b))}
        ev = {k: (r.metrics() if k == "A" else mb).get(
            'baton_replay_evicted_total{bound="max_bytes"}', 0) for k, r in (("A", a), ("B", b))}
        evw = mb.get('baton_replay_evicted_total{bound="window_ms"}', 0)
        age = mb.get("baton_replay_ring_age_ms", 0)
        roles = (a.role(), b.role())
        lead = a.metrics()
        pub_rate = acked / t_acked if t_acked > 0 else 0
        recv_rate = got / (t_end - t0) if t_end > t0 else 0
        say("  %s: published %d in %.2f s (acked after %.2f s: %.0f msg/s; PUBLISH reached %s "
            "subscribers); standby buffered %d (%.0f msg/s incl. drain); roles after %s"
            % (tag, acked, t_sent, t_acked, pub_rate, subs, got, recv_rate,
               "/".join(str(x) for x in roles)))
        for key, r in (("A", a), ("B", b)):
            by, msgs = pk[key]
            say("    %s %-7s: peak ring %.1f MiB (%d msgs, %.0f B/msg); VmHWM %.1f MiB, VmRSS "
                "%.1f MiB; evicted by max_bytes %d%s"
                % (r.name, "leader" if key == "A" else "standby", by / 1048576.0, msgs,
                   by / msgs if msgs else 0, hwm[key] / 1024.0, rss[key] / 1024.0, ev[key],
                   "; by window %d; ring covers %.0f ms" % (evw, age) if key == "B" else
                   "; forwarded %d, dropped queue full %d"
                   % (lead.get("baton_messages_forwarded_total", 0),
                      lead.get('baton_messages_dropped_total{reason="queue_full"}', 0))))
        return {"pk": pk, "hwm": hwm, "ev": ev, "pub_rate": pub_rate, "recv_rate": recv_rate,
                "acked": acked, "got": got, "roles": roles, "age": age}
    finally:
        for r in (b, a):
            r.stop()
        flush_locker(locker.port)


def part3(work, locker, source):
    say("3. ring memory at about %d msg/s (paced pipelined PUBLISH, %.1f s), window default 7 s"
        % (RATE, PUB_S))
    big = ring_phase(work, "p3a", locker, source, MAX_BYTES, PUB_S)
    by, msgs = big["pk"]["B"]
    per = by / msgs if msgs else None
    valid = big["roles"] == ("leader", "standby")
    if not valid:
        say("    WARNING: roles changed during the window (%r): the figures are not of a "
            "standby" % (big["roles"],))
    result("replay ring: achieved rate (paced at %d/s for %g s)" % (RATE, PUB_S),
           round(big["pub_rate"]), None, "msg/s", None, None, None)
    result("replay ring %d MiB: standby peak ring bytes" % (MAX_BYTES >> 20),
           round(by / 1048576.0, 2), None, "MiB", None, None, None)
    result("replay ring %d MiB: standby peak RSS (VmHWM)" % (MAX_BYTES >> 20),
           round(big["hwm"]["B"] / 1024.0, 2), None, "MiB", None, None, None)
    result("replay ring: bytes per message (%d-byte payload)" % len(PAYLOAD),
           round(per, 1) if per else None, None, "B/msg", None, None, None)
    if per and big["pub_rate"]:
        need = per * big["pub_rate"] * 7.0
        say("    at %.0f msg/s the default 7 s window needs ~%.0f MiB of ring (%.0f B/msg); "
            "max_bytes %d MiB holds ~%.1f s; standby VmHWM / peak ring bytes = %.2f"
            % (big["pub_rate"], need / 1048576.0, per, MAX_BYTES >> 20,
               MAX_BYTES / (per * big["pub_rate"]), big["hwm"]["B"] * 1024.0 / by if by else 0))

    small = ring_phase(work, "p3b", locker, source, DEFAULT_MAX, max(1.0, PUB_S / 2))
    peak = max(small["pk"]["A"][0], small["pk"]["B"][0])
    filled = small["ev"]["A"] > 0 and small["ev"]["B"] > 0
    ok = bool(peak <= DEFAULT_MAX + RING_SLACK and filled and
              small["roles"] == ("leader", "standby"))
    if not filled:
        say("    WARNING: the 16 MiB ring never filled (no max_bytes evictions): the bound was "
            "not exercised")
    result("replay ring 16 MiB (default): peak ring bytes, both replicas",
           round(peak / 1048576.0, 3), None, "MiB", None, "<= 16 MiB", ok)
    result("replay ring 16 MiB (default): standby peak RSS (info)",
           round(small["hwm"]["B"] / 1024.0, 2), None, "MiB", None, None, None)
    return big, small, valid


def main():
    if not os.path.exists(h.BATON_BIN):
        say("missing %s (build baton)" % h.BATON_BIN)
        return 2
    for p in ("redis-server", "redis-benchmark"):
        if subprocess.run(["sh", "-c", "command -v " + p], capture_output=True).returncode:
            say("missing %s" % p)
            return 2
    t_start = time.monotonic()
    work = h.mktemp("baton-bench-replay-")
    source = h.RedisServer(extra_args=["--client-output-buffer-limit", "pubsub 0 0 0"])
    locker = h.RedisServer()
    say("replay benchmark: baton %s, source redis :%d, locker redis :%d, work %s; "
        "load average %s on %d CPUs" % (h.BATON_BIN, source.port, locker.port, work,
                                       "%.2f %.2f %.2f" % os.getloadavg(),
                                       os.cpu_count()))
    best, cpu1 = part1(work, locker, source)
    p2 = part2(work, locker, source)
    big, small, _ = part3(work, locker, source)

    say("")
    say("summary (%.0f s)" % (time.monotonic() - t_start))
    off, on = best[False], best[True]
    say("  leader msg/s        off %8.0f   on %8.0f   on/off %.3f (target >= 0.9)"
        % (off[0], on[0], on[0] / off[0]))
    say("  leader CPU us/msg   off %8.2f   on %8.2f   on/off %.3f (lowest of each)"
        % (cpu1[0], cpu1[1], cpu1[1] / cpu1[0]))
    say("  replay CPU us/msg   leader %.2f   standby %.2f   standby/leader %.3f (target <= 0.5)"
        "   [schedstat: %.2f / %.2f = %.3f]"
        % (p2[0], p2[1], p2[1] / p2[0] if p2[0] else float("nan"), p2[2], p2[3],
           p2[3] / p2[2] if p2[2] else float("nan")))
    bb, bm = big["pk"]["B"]
    say("  ring at %.0f msg/s, max_bytes %d MiB: standby peak %.1f MiB, %d msgs, %.0f B/msg, "
        "VmHWM %.1f MiB" % (big["pub_rate"], MAX_BYTES >> 20, bb / 1048576.0, bm,
                            bb / bm if bm else 0, big["hwm"]["B"] / 1024.0))
    sb = max(small["pk"]["A"][0], small["pk"]["B"][0])
    say("  ring at %.0f msg/s, max_bytes 16 MiB: peak %.3f MiB (target <= 16 MiB), standby VmHWM "
        "%.1f MiB" % (small["pub_rate"], sb / 1048576.0, small["hwm"]["B"] / 1024.0))
    return 0


if __name__ == "__main__":
    rc = 1
    try:
        rc = main()
    except RuntimeError as e:
        print("bench_replay: %s" % e, file=sys.stderr, flush=True)
        rc = 1
    finally:
        h._run_cleanups()
    sys.exit(rc)
