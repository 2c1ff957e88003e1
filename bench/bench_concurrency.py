#!/usr/bin/env python3
"""Benchmark: concurrent delivery of the HTTP sink (issue 36).

    bench/bench_concurrency.py [BUILD_DIR]    (default: $BATON_BUILD_DIR or ./build)

One baton leader (redis_psub endpoint -> http sink, batch_max 1) posts to
bench/http_receiver_bench.c run with --latency-ms (every POST answered after
a fixed latency, on a timerfd in its epoll loop, other connections served
meanwhile) and, for figure 2, --capacity (at most C processed at once, 503
beyond). A paced publisher (this script with --publish: one connection,
PUBLISH pipelined every 2 ms at an even rate) offers the load round-robin
over CHANNELS (1,024) channels. The target figures use ordering = ORDERING
("key", the setting's default: one request in flight per ordering key, the
redis channel, so the 1,024 channels leave max_in_flight the bound); the
other ("none") is shown for information at 64; the memory figure uses
"none" (1,024 in flight whatever the keys). Every figure has its
baseline in the same invocation: the limit of the configuration
(max_in_flight / latency), or the same baton with ordering = "strict" (one
request at a time, the behaviour before issue 36) for the CPU figure.

1. throughput: receiver latency LATENCY_MS (20 ms), max_in_flight 16 and
   64, offered OFFER (1.5) x the limit; the delivered rate (messages the
   receiver answered 204) over MEASURE_S (6 s) after WARM_S (3 s) of
   warm-up, against max_in_flight / latency (800 and 3,200 msg/s). Target
   >= 0.9. For information beside each: a closed-loop client (--client: N
   kept-alive connections, the next POST as soon as the 204 is back) against
   the same receiver, the most any client gets on this machine at N in
   flight; and max_in_flight 64 with the other ordering. A NOTE is printed
   when ordering "key" never had more than one request in flight (an
   endpoint that gives every message the same key).
2. auto: max_in_flight = "auto" (AIMD, max_in_flight_limit 64) against a
   receiver of capacity CAPACITY (32) at the same latency (503 beyond,
   retried by baton), offered 1.5 x 1,600 msg/s; delivered / (32 / latency).
   Target >= 0.8. The limit baton used (/metrics
   baton_sink_concurrency_limit, every 250 ms) and the 503s are printed.
3. CPU per message: max_in_flight 64 (ORDERING) against ordering "strict",
   at CPU_RATE (400) msg/s offered to a receiver of latency CPU_LATENCY_MS
   (1 ms): a rate both carry (strict carries ~700 there) and enough
   messages for a precise figure; CPU_ROUNDS (2) rounds of CPU_S (8 s) each,
   the order alternating; total CPU over total messages delivered in the
   windows. CPU:
   every thread's run time (/proc/<pid>/task/*/schedstat, ns: the time
   utime + stime of /proc/<pid>/stat count in 10 ms ticks, printed beside
   it). Target <= 1.2x. For information, the same at SLOW_RATE (40) msg/s
   and 20 ms (strict carries at most ~48 msg/s there, less on a busy host).
4. memory: max_in_flight 1024, ordering "none", receiver latency
   MEM_LATENCY_MS (200 ms, so that 1,024 are held), offered MEM_RATE (7,000)
   msg/s (limit 5,120) for MEM_S (6 s): baton's peak RSS (VmHWM), the most
   requests in flight /metrics showed (baton_sink_in_flight, every 100 ms),
   the receiver's peak held at once. Target < 32 MiB. For information, the
   same load with ordering "strict" (its queue full as well).

For every window the script prints the CPU share of baton (and of its
busiest thread), the receiver, the publisher and redis-server (which process
is saturated, if any), and the load average (the host is shared). PARTS
(default "1,2,3,4") picks figures. About 3 minutes in all. Prints RESULT
{json} lines (bench/run's contract).
"""
import os
import signal
import socket
import sys
import time


def publish_main(argv):
    """--publish PORT RATE SECONDS CHANNELS: PUBLISH ch.<i % CHANNELS> at RATE
    msg/s, evenly (what is due every 2 ms, pipelined; replies drained as they
    come), for SECONDS or until SIGTERM; prints "sent N seconds S rate R"."""
    port, rate, seconds, channels = int(argv[0]), float(argv[1]), float(argv[2]), int(argv[3])
    payload = b"payload-30-bytes-0123456789abc"
    cmds = []
    for i in range(channels):
        ch = b"ch.%d" % i
        cmds.append(b"*3\r\n$7\r\nPUBLISH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n"
                    % (len(ch), ch, len(payload), payload))
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.setblocking(False)

    def drain():
        try:
            while s.recv(1 << 16):
                pass
        except BlockingIOError:
            pass

    sent = 0
    t0 = time.monotonic()
    while not stop:
        now = time.monotonic()
        if now - t0 >= seconds:
            break
        due = int((now - t0) * rate)
        if due > sent:
            view = memoryview(b"".join(cmds[i % channels] for i in range(sent, due)))
            while view:
                try:
                    view = view[s.send(view):]
                except BlockingIOError:
                    time.sleep(0.0005)
                drain()
            sent = due
        drain()
        time.sleep(0.002)
    secs = time.monotonic() - t0
    print("sent %d seconds %.3f rate %.0f" % (sent, secs, sent / secs if secs else 0), flush=True)
    s.close()
    return 0


def client_main(argv):
    """--client PORT N SECONDS: N kept-alive connections, each posting a
    150-byte body again as soon as its answer came back, for SECONDS."""
    import selectors
    port, n, seconds = int(argv[0]), int(argv[1]), float(argv[2])
    body = b"x" * 149 + b"\n"
    req = (b"POST /ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    sel = selectors.DefaultSelector()
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(req)
        sel.register(s, selectors.EVENT_READ, [b""])
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    t0 = time.monotonic()
    while not stop and time.monotonic() - t0 < seconds:
        for key, _ in sel.select(0.1):
            data = key.fileobj.recv(4096)
            if not data:
                return 1
            buf = key.data[0] + data
            while b"\r\n\r\n" in buf:  # 204s: a head and no body
                buf = buf.split(b"\r\n\r\n", 1)[1]
                key.fileobj.sendall(req)
            key.data[0] = buf
    return 0


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] in ("--publish", "--client"):
    sys.exit((publish_main if sys.argv[1] == "--publish" else client_main)(sys.argv[2:]))

import json  # noqa: E402
import subprocess  # noqa: E402
import urllib.request  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

h = benchlib.harness()

BUILD = os.environ["BATON_BUILD_DIR"]
RECEIVER = os.path.join(BUILD, "bench", "bench_http_receiver")
CHANNELS = int(os.environ.get("CHANNELS", "1024"))
ORDERING = os.environ.get("ORDERING", "key")
OTHER = "none" if ORDERING == "key" else "key"  # shown for information at 64
LATENCY_MS = float(os.environ.get("LATENCY_MS", "20"))
OFFER = float(os.environ.get("OFFER", "1.5"))
WARM_S = float(os.environ.get("WARM_S", "3"))
MEASURE_S = float(os.environ.get("MEASURE_S", "6"))
CAPACITY = int(os.environ.get("CAPACITY", "32"))
CPU_RATE = float(os.environ.get("CPU_RATE", "400"))
CPU_LATENCY_MS = float(os.environ.get("CPU_LATENCY_MS", "1"))
CPU_ROUNDS = int(os.environ.get("CPU_ROUNDS", "2"))
CPU_S = float(os.environ.get("CPU_S", "8"))
SLOW_RATE = float(os.environ.get("SLOW_RATE", "40"))
MEM_LATENCY_MS = float(os.environ.get("MEM_LATENCY_MS", "200"))
MEM_RATE = float(os.environ.get("MEM_RATE", "7000"))
MEM_S = float(os.environ.get("MEM_S", "6"))
PARTS = os.environ.get("PARTS", "1,2,3,4").split(",")
HZ = benchlib.HZ


class Receiver:
    FIELDS = ("messages", "requests", "rejected", "processing", "processing_peak", "conns",
              "conns_peak", "hold_us")

    def __init__(self, latency_ms, capacity=0):
        self.port = h.free_port()
        args = [RECEIVER, str(self.port), "--latency-ms", str(latency_ms)]
        if capacity:
            args += ["--capacity", str(capacity)]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL)
        h._cleanups.append(self.close)
        if not h.wait_until(lambda: h.port_open(self.port), 5):
            raise RuntimeError("bench_http_receiver did not listen on %d" % self.port)
        self.url = "http://127.0.0.1:%d/ingest" % self.port

    def count(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/count" % self.port, timeout=2) as r:
            return dict(zip(self.FIELDS, (int(x) for x in r.read().split())))

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Publisher:
    def __init__(self, work, port, rate, seconds):
        self.out = os.path.join(work, "publisher-%d.out" % time.monotonic_ns())
        with open(self.out, "w") as f:
            self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--publish",
                                          str(port), str(rate), str(seconds), str(CHANNELS)],
                                         stdout=f, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        h._cleanups.append(self.stop)

    def stop(self):
        """SIGTERM, wait; returns its line ("sent N seconds S rate R")."""
        h.stop_process(self.proc)
        with open(self.out) as f:
            return f.read().strip()


def metrics(port):
    """{metric name: value} of baton's /metrics (one endpoint: labels dropped,
    but the reason of baton_messages_dropped_total kept: "<name>.<reason>")."""
    _, body = h.http_get(port, "/metrics", timeout=2.0)
    out = {}
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        key = name.split("{")[0]
        if 'reason="' in name:
            key += "." + name.split('reason="')[1].split('"')[0]
        try:
            out[key] = out.get(key, 0) + float(value)
        except ValueError:
            pass
    return out


def dropped(m):
    return sum(v for k, v in m.items() if k.startswith("baton_messages_dropped_total."))


def start_baton(work, locker, source, rec, tag, sink_extra, ordering):
    mport = h.free_port()
    sink = '{ name = "hook"; type = "http"; url = "%s"; batch_max = 1; %s }' % (rec.url, sink_extra)
    main = h.main_cfg(redis_port=locker.port, sinks=sink, log_level="warn",
                      extra='metrics = { listen = "127.0.0.1:%d"; };' % mport)
    ep = ('name = "bench"; type = "redis_psub"; sink = "hook"; host = "127.0.0.1"; port = %d; '
          'patterns = [ "ch.*" ]; ordering = "%s";\n' % (source.port, ordering))
    b = h.Baton(work, main, {"psub.cfg": ep}, name="baton-%s" % tag)
    ok = h.wait_until(lambda: source.client().cmd("PUBSUB", "NUMPAT") == 1, 15)
    if not ok or not h.wait_until(lambda: h.http_get(mport, "/metrics")[0] == 200, 10):
        b.kill()
        raise RuntimeError("baton %s did not start: %s" % (tag, b.stderr_text()[-1500:]))
    return b, mport


def thread_ticks(pid):
    """{tid: (thread name, utime + stime ticks)} of every thread of pid."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                head, rest = f.read().rsplit(")", 1)
            fields = rest.split()
            out[tid] = (head.split("(", 1)[1], int(fields[11]) + int(fields[12]))
        except (OSError, IndexError, ValueError):
            pass  # a thread that ended meanwhile
    return out


class CpuShares:
    """utime + stime of each named process over a window, as % of one core;
    for baton also its busiest thread's (a thread near 100 % sets the pace)."""

    def __init__(self, procs):
        self.procs = {k: pid for k, pid in procs.items() if pid}
        self.t0 = time.monotonic()
        self.c0 = {k: benchlib.ticks(p) for k, p in self.procs.items()}
        self.th0 = thread_ticks(self.procs["baton"]) if "baton" in self.procs else {}

    def done(self):
        secs = time.monotonic() - self.t0
        out = {}
        for k, p in self.procs.items():
            try:
                out[k] = round(100.0 * (benchlib.ticks(p) - self.c0[k]) / HZ / secs, 1)
            except (FileNotFoundError, ProcessLookupError):
                pass
        if "baton" in self.procs:
            try:
                th1 = thread_ticks(self.procs["baton"])
            except (FileNotFoundError, ProcessLookupError):
                th1 = {}
            busy = sorted(((t - self.th0.get(tid, ("", 0))[1], name)
                           for tid, (name, t) in th1.items()), reverse=True)
            if busy:
                out["baton's busiest thread (%s)" % busy[0][1]] = round(
                    100.0 * busy[0][0] / HZ / secs, 1)
        return out


def shares_text(s):
    return ", ".join("%s %.1f %%" % kv for kv in s.items())


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def throughput_run(work, locker, source, tag, latency_ms, capacity, sink_extra, ordering, rate,
                   warm_s, measure_s):
    """A steady-state delivered rate and what went with it."""
    rec = Receiver(latency_ms, capacity)
    b, mport = start_baton(work, locker, source, rec, tag, sink_extra, ordering)
    try:
        pub = Publisher(work, source.port, rate, warm_s + measure_s + 5)
        time.sleep(warm_s)
        c0, m0, t0 = rec.count(), metrics(mport), time.monotonic()
        cpu = CpuShares({"baton": b.pid, "receiver": rec.proc.pid, "publisher": pub.proc.pid,
                         "redis": source.proc.pid})
        inflight, limits = [], []
        while time.monotonic() - t0 < measure_s:
            time.sleep(0.25)
            m = metrics(mport)
            inflight.append(m.get("baton_sink_in_flight", 0))
            limits.append(m.get("baton_sink_concurrency_limit", 0))
        c1, m1, t1 = rec.count(), metrics(mport), time.monotonic()
        shares = cpu.done()
        hwm = benchlib.status_kb(b.pid, "VmHWM") / 1024.0
        pub_line = pub.stop()
    finally:
        b.kill()  # a leader with a full queue drains it at the receiver's pace on SIGTERM
        rec.close()
    secs = t1 - t0
    reqs = c1["requests"] - c0["requests"]
    return {
        "rate": (c1["messages"] - c0["messages"]) / secs,
        "rejected_per_s": (c1["rejected"] - c0["rejected"]) / secs,
        "hold_ms": (c1["hold_us"] - c0["hold_us"]) / 1000.0 / reqs if reqs else 0.0,
        "inflight_mean": sum(inflight) / len(inflight), "inflight_max": max(inflight),
        "limit_mean": sum(limits) / len(limits), "limit_min": min(limits),
        "limit_max": max(limits), "rtt_ms": m1.get("baton_sink_rtt_seconds", 0) * 1000.0,
        "dropped": dropped(m1) - dropped(m0), "queue_depth": m1.get("baton_queue_depth", 0),
        "processing_peak": c1["processing_peak"], "conns_peak": c1["conns_peak"],
        "shares": shares, "hwm_mib": hwm, "publisher": pub_line,
    }


def client_run(latency_ms, n, warm_s, measure_s):
    """The closed-loop client (--client) with n connections against a fresh
    receiver: (delivered msg/s in steady state, receiver hold ms, CPU shares)."""
    rec = Receiver(latency_ms)
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--client", str(rec.port),
                          str(n), str(warm_s + measure_s + 5)], stdin=subprocess.DEVNULL)
    h._cleanups.append(lambda: h.stop_process(p))
    try:
        time.sleep(warm_s)
        c0, t0 = rec.count(), time.monotonic()
        cpu = CpuShares({"client": p.pid, "receiver": rec.proc.pid})
        time.sleep(measure_s)
        c1, t1 = rec.count(), time.monotonic()
        shares = cpu.done()
    finally:
        h.stop_process(p)
        rec.close()
    reqs = c1["requests"] - c0["requests"]
    return ((c1["messages"] - c0["messages"]) / (t1 - t0),
            (c1["hold_us"] - c0["hold_us"]) / 1000.0 / reqs if reqs else 0.0, shares)


def held_limit(n, r):
    """n / the receiver's mean hold in the window: the limit with the latency
    the receiver really kept (its timer wake-ups run late on a busy host)."""
    return n / (r["hold_ms"] / 1000.0) if r["hold_ms"] else float("nan")


def show(label, r, limit):
    print("  %s: delivered %.0f msg/s = %.3f of %.0f; in flight mean %.1f (max %.0f), limit "
          "%.0f..%.0f (mean %.1f); rtt %.1f ms; receiver hold %.2f ms/request, peak held %d, "
          "connections %d; 503s %.0f/s; dropped %d; queue %d; VmHWM %.1f MiB; publisher: %s; "
          "CPU: %s; load %s"
          % (label, r["rate"], r["rate"] / limit, limit, r["inflight_mean"], r["inflight_max"],
             r["limit_min"], r["limit_max"], r["limit_mean"], r["rtt_ms"], r["hold_ms"],
             r["processing_peak"], r["conns_peak"], r["rejected_per_s"], r["dropped"],
             r["queue_depth"], r["hwm_mib"], r["publisher"], shares_text(r["shares"]), loadavg()),
          flush=True)


def cpu_run(work, locker, source, tag, latency_ms, rate, seconds, sink_extra, ordering):
    """baton's CPU over a window at a paced rate, and the messages delivered in it."""
    rec = Receiver(latency_ms)
    b, mport = start_baton(work, locker, source, rec, tag, sink_extra, ordering)
    try:
        warm = 1.5
        pub = Publisher(work, source.port, rate, warm + seconds + 3)
        time.sleep(warm)
        c0, n0, k0, t0 = (rec.count(), benchlib.cpu_ns(b.pid), benchlib.ticks(b.pid),
                          time.monotonic())
        cpu = CpuShares({"baton": b.pid, "receiver": rec.proc.pid, "publisher": pub.proc.pid,
                         "redis": source.proc.pid})
        time.sleep(seconds)
        c1, n1, k1, t1 = (rec.count(), benchlib.cpu_ns(b.pid), benchlib.ticks(b.pid),
                          time.monotonic())
        shares = cpu.done()
        m = metrics(mport)
        pub_line = pub.stop()
    finally:
        b.kill()
        rec.close()
    msgs = c1["messages"] - c0["messages"]
    return {"ns": n1 - n0, "ticks": k1 - k0, "msgs": msgs, "rate": msgs / (t1 - t0),
            "shares": shares, "publisher": pub_line, "queue_depth": m.get("baton_queue_depth", 0),
            "dropped": dropped(m)}


def cpu_compare(work, locker, source, latency_ms, rate, seconds, rounds, tag):
    """{"64"|"strict": (us/msg from schedstat, us/msg from /proc stat, messages)}."""
    modes = {"64": ("max_in_flight = 64;", ORDERING), "strict": ("max_in_flight = 64;", "strict")}
    tot = {k: {"ns": 0, "ticks": 0, "msgs": 0} for k in modes}
    for rnd in range(rounds):
        for mode in (("strict", "64") if rnd % 2 == 0 else ("64", "strict")):
            r = cpu_run(work, locker, source, "cpu-%s-%s-%d" % (tag, mode, rnd), latency_ms, rate,
                        seconds, *modes[mode])
            for k in ("ns", "ticks", "msgs"):
                tot[mode][k] += r[k]
            n = max(r["msgs"], 1)
            print("  %g msg/s, %g ms, round %d, %-7s delivered %.1f msg/s (%d msgs): %.1f us/msg "
                  "(schedstat), %.1f us/msg (/proc stat, %d ticks); queue %d, dropped %d; "
                  "publisher: %s; CPU: %s; load %s"
                  % (rate, latency_ms, rnd + 1, mode + ":", r["rate"], r["msgs"], r["ns"] / 1e3 / n,
                     r["ticks"] * 1e6 / HZ / n, r["ticks"], r["queue_depth"], r["dropped"],
                     r["publisher"], shares_text(r["shares"]), loadavg()), flush=True)
    return {k: (v["ns"] / 1e3 / max(v["msgs"], 1), v["ticks"] * 1e6 / HZ / max(v["msgs"], 1),
                v["msgs"]) for k, v in tot.items()}


def memory_run(work, locker, source, tag, ordering):
    rec = Receiver(MEM_LATENCY_MS)
    b, mport = start_baton(work, locker, source, rec, tag, "max_in_flight = 1024;", ordering)
    idle_rss = benchlib.status_kb(b.pid, "VmRSS") / 1024.0
    inflight, depth = [], []
    try:
        pub = Publisher(work, source.port, MEM_RATE, MEM_S + 5)
        cpu = CpuShares({"baton": b.pid, "receiver": rec.proc.pid, "publisher": pub.proc.pid,
                         "redis": source.proc.pid})
        t0 = time.monotonic()
        c0 = rec.count()
        while time.monotonic() - t0 < MEM_S:
            time.sleep(0.1)
            m = metrics(mport)
            inflight.append(m.get("baton_sink_in_flight", 0))
            depth.append(m.get("baton_queue_depth", 0))
        c1, t1 = rec.count(), time.monotonic()
        shares = cpu.done()
        hwm = benchlib.status_kb(b.pid, "VmHWM") / 1024.0
        rss = benchlib.status_kb(b.pid, "VmRSS") / 1024.0
        threads = benchlib.status_kb(b.pid, "Threads")
        fds = len(os.listdir("/proc/%d/fd" % b.pid))
        pub_line = pub.stop()
    finally:
        b.kill()
        rec.close()
    return {"hwm": hwm, "rss": rss, "idle_rss": idle_rss, "threads": threads, "fds": fds,
            "inflight_max": max(inflight),
            "inflight_1000_share": sum(1 for x in inflight if x >= 1000) / len(inflight),
            "depth_max": max(depth), "rate": (c1["messages"] - c0["messages"]) / (t1 - t0),
            "processing_peak": c1["processing_peak"], "conns_peak": c1["conns_peak"],
            "shares": shares, "publisher": pub_line}


def result(results, workload, baton, baseline, unit, target=None, ok=None, ratio=None):
    if ratio is None and baseline:
        ratio = baton / baseline
    results.append({"workload": workload, "baton": baton, "baseline": baseline, "unit": unit,
                    "ratio": round(ratio, 3) if ratio is not None else None, "target": target,
                    "pass": ok})


def part_throughput(work, locker, source, results):
    lat_s = LATENCY_MS / 1000.0
    print("1. throughput: receiver latency %g ms, batch_max 1, ordering %s, %d channels round-robin, "
          "offered %.1fx the limit; warm-up %g s, then %g s measured; load %s"
          % (LATENCY_MS, ORDERING, CHANNELS, OFFER, WARM_S, MEASURE_S, loadavg()), flush=True)
    for n in (16, 64):
        limit = n / lat_s
        r = throughput_run(work, locker, source, "mif%d" % n, LATENCY_MS, 0,
                           "max_in_flight = %d;" % n, ORDERING, OFFER * limit, WARM_S, MEASURE_S)
        show("max_in_flight %d" % n, r, limit)
        crate, chold, cshares = client_run(LATENCY_MS, n, 1.0, MEASURE_S)
        print("  the closed-loop client, %d connections (info): %.0f msg/s = %.3f of %.0f; "
              "receiver hold %.2f ms/request; baton / client %.3f; CPU: %s; load %s"
              % (n, crate, crate / limit, limit, chold, r["rate"] / crate, shares_text(cshares),
                 loadavg()), flush=True)
        ratio = r["rate"] / limit
        hl = held_limit(n, r)
        print("  max_in_flight %d: the receiver held each request %.2f ms on average: %.3f of %d / "
              "that (%.0f msg/s)" % (n, r["hold_ms"], r["rate"] / hl, n, hl), flush=True)
        result(results, "concurrency: max_in_flight %d, receiver latency %g ms, batch_max 1: "
               "delivered msg/s vs max_in_flight / latency (ordering %s, %d channels, offered %.0f "
               "msg/s; receiver hold %.2f ms, %.3f of max_in_flight / hold)"
               % (n, LATENCY_MS, ORDERING, CHANNELS, OFFER * limit, r["hold_ms"], r["rate"] / hl),
               round(r["rate"], 1), round(limit, 1), "msg/s", ">= 0.9", ratio >= 0.9, ratio)
        result(results, "concurrency: max_in_flight %d vs a closed-loop client with %d connections, "
               "receiver latency %g ms (info; receiver hold %.2f vs %.2f ms)"
               % (n, n, LATENCY_MS, r["hold_ms"], chold), round(r["rate"], 1), round(crate, 1),
               "msg/s")
        if n == 64 and ORDERING == "key":
            key_note(r)
    limit = 64 / lat_s
    r = throughput_run(work, locker, source, "other64", LATENCY_MS, 0, "max_in_flight = 64;",
                       OTHER, OFFER * limit, WARM_S, MEASURE_S)
    show("max_in_flight 64, ordering %s (info)" % OTHER, r, limit)
    if OTHER == "key":
        key_note(r)
    result(results, "concurrency: max_in_flight 64, ordering %s, receiver latency %g ms: delivered "
           "msg/s vs max_in_flight / latency (info; %d channels; in flight mean %.1f, max %d)"
           % (OTHER, LATENCY_MS, CHANNELS, r["inflight_mean"], r["inflight_max"]),
           round(r["rate"], 1), round(limit, 1), "msg/s")


def key_note(r):
    if r["inflight_max"] <= 1:
        print("  NOTE: with ordering = \"key\" never more than one request was in flight over %d "
              "channels: the endpoint gave every message the same ordering key (none per channel: "
              "the endpoint's one key), so \"key\" delivered one at a time" % CHANNELS, flush=True)


def part_auto(work, locker, source, results):
    limit = CAPACITY / (LATENCY_MS / 1000.0)
    warm, measure = WARM_S + 1, MEASURE_S + 2
    print("2. auto: max_in_flight \"auto\" (max_in_flight_limit 64) against a receiver of capacity "
          "%d (503 beyond), latency %g ms, ordering %s, offered %.0f msg/s; warm-up %g s, then %g s "
          "measured; load %s" % (CAPACITY, LATENCY_MS, ORDERING, OFFER * limit, warm, measure,
                                 loadavg()), flush=True)
    r = throughput_run(work, locker, source, "auto", LATENCY_MS, CAPACITY,
                       'max_in_flight = "auto";', ORDERING, OFFER * limit, warm, measure)
    show("auto, capacity %d" % CAPACITY, r, limit)
    ratio = r["rate"] / limit
    hl = held_limit(CAPACITY, r)
    print("  auto: the receiver held each request %.2f ms on average: %.3f of %d / that (%.0f msg/s)"
          % (r["hold_ms"], r["rate"] / hl, CAPACITY, hl), flush=True)
    result(results, "concurrency: auto vs a receiver of capacity %d (503 beyond), latency %g ms: "
           "delivered msg/s vs capacity / latency (ordering %s, offered %.0f msg/s; receiver hold "
           "%.2f ms, %.3f of capacity / hold)"
           % (CAPACITY, LATENCY_MS, ORDERING, OFFER * limit, r["hold_ms"], r["rate"] / hl),
           round(r["rate"], 1), round(limit, 1), "msg/s", ">= 0.8", ratio >= 0.8, ratio)
    result(results, "concurrency: auto, the limit it used, mean over the window vs the capacity "
           "(info; min %.0f, max %.0f; in flight mean %.1f; 503s %.0f/s; dropped %d)"
           % (r["limit_min"], r["limit_max"], r["inflight_mean"], r["rejected_per_s"], r["dropped"]),
           round(r["limit_mean"], 1), CAPACITY, "requests")


def part_cpu(work, locker, source, results):
    print("3. CPU per delivered message: max_in_flight 64 (ordering %s) vs ordering \"strict\" (one "
          "at a time), %g msg/s offered over %d channels, receiver latency %g ms, %d rounds of %g s "
          "each, alternating; load %s" % (ORDERING, CPU_RATE, CHANNELS, CPU_LATENCY_MS, CPU_ROUNDS,
                                          CPU_S, loadavg()), flush=True)
    per = cpu_compare(work, locker, source, CPU_LATENCY_MS, CPU_RATE, CPU_S, CPU_ROUNDS, "fast")
    ratio = per["64"][0] / per["strict"][0]
    print("  CPU per message: 64 in flight %.1f us, strict %.1f us (schedstat) = %.2fx; /proc stat "
          "%.1f vs %.1f us; %d vs %d messages" % (per["64"][0], per["strict"][0], ratio,
                                                  per["64"][1], per["strict"][1], per["64"][2],
                                                  per["strict"][2]), flush=True)
    result(results, "concurrency: CPU per message, max_in_flight 64 vs ordering strict, %g msg/s "
           "to a receiver of latency %g ms (ordering %s; every thread's run time; /proc stat %.1f vs "
           "%.1f us)" % (CPU_RATE, CPU_LATENCY_MS, ORDERING, per["64"][1], per["strict"][1]),
           round(per["64"][0], 1), round(per["strict"][0], 1), "us/msg", "<= 1.2", ratio <= 1.2,
           ratio)
    slow = cpu_compare(work, locker, source, LATENCY_MS, SLOW_RATE, CPU_S, 1, "slow")
    sr = slow["64"][0] / slow["strict"][0]
    print("  CPU per message at %g msg/s, %g ms: 64 in flight %.1f us, strict %.1f us = %.2fx"
          % (SLOW_RATE, LATENCY_MS, slow["64"][0], slow["strict"][0], sr), flush=True)
    result(results, "concurrency: CPU per message at a slow rate, max_in_flight 64 vs ordering "
           "strict, %g msg/s to a receiver of latency %g ms (info; idle work included)"
           % (SLOW_RATE, LATENCY_MS), round(slow["64"][0], 1), round(slow["strict"][0], 1),
           "us/msg", ratio=sr)


def part_memory(work, locker, source, results):
    print("4. memory: max_in_flight 1024, ordering none, receiver latency %g ms, offered %.0f msg/s "
          "(limit %.0f) for %g s; then the same load with ordering strict (info); load %s"
          % (MEM_LATENCY_MS, MEM_RATE, 1024 / (MEM_LATENCY_MS / 1000.0), MEM_S, loadavg()),
          flush=True)
    mem = {}
    for tag, ordering in (("1024", "none"), ("strict", "strict")):
        r = mem[tag] = memory_run(work, locker, source, "mem-" + tag, ordering)
        print("  %-7s peak RSS %.1f MiB (VmRSS idle before the load %.1f, at the end %.1f); in "
              "flight: most %d, >= 1000 in %.0f %% of the samples; receiver held %d at most over %d "
              "connections; queue depth up to %d; delivered %.0f msg/s; %d threads, %d fds; "
              "publisher: %s; CPU: %s; load %s"
              % (tag + ":", r["hwm"], r["idle_rss"], r["rss"], r["inflight_max"],
                 100 * r["inflight_1000_share"], r["processing_peak"], r["conns_peak"],
                 r["depth_max"], r["rate"], r["threads"], r["fds"], r["publisher"],
                 shares_text(r["shares"]), loadavg()), flush=True)
    r, s = mem["1024"], mem["strict"]
    result(results, "concurrency: peak RSS with max_in_flight 1024, receiver latency %g ms "
           "(ordering none; most in flight seen %d, receiver held %d, queue up to %d; baseline, "
           "info: the same load with ordering strict)"
           % (MEM_LATENCY_MS, r["inflight_max"], r["processing_peak"], r["depth_max"]),
           round(r["hwm"], 1), round(s["hwm"], 1), "MiB", "< 32 MiB", r["hwm"] < 32)
    result(results, "concurrency: requests in flight seen in /metrics, max_in_flight 1024 (info; "
           ">= 1000 in %.0f %% of the samples)" % (100 * r["inflight_1000_share"]),
           r["inflight_max"], 1024, "requests")


def main():
    for f in (h.BATON_BIN, RECEIVER):
        if not os.path.exists(f):
            print("missing %s (build bench_programs)" % f, file=sys.stderr)
            return 2
    t_start = time.monotonic()
    work = h.mktemp("baton-bench-conc-")
    locker = h.RedisServer()
    source = h.RedisServer(extra_args=("--client-output-buffer-limit", "pubsub 0 0 0"))
    results = []
    try:
        for part, fn in (("1", part_throughput), ("2", part_auto), ("3", part_cpu),
                         ("4", part_memory)):
            if part in PARTS:
                fn(work, locker, source, results)
        print("done in %.0f s; load %s" % (time.monotonic() - t_start, loadavg()), flush=True)
    finally:  # the figures measured so far, even when a later part failed
        for x in results:
            print("RESULT " + json.dumps(x), flush=True)
    return 0


if __name__ == "__main__":
    benchlib.run(main, budget_s=400)
