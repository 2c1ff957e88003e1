#!/usr/bin/env python3
"""Benchmark: redis_psub -> HTTP sink, against a bare libcurl loop.

    bench/bench_http_sink.py [BUILD_DIR]    (default: $BATON_BUILD_DIR or ./build)

Both post to the same fast receiver (bench/http_receiver_bench.c: one epoll
thread, keep-alive, 204 for every POST, counting messages), one after the
other, never at the same time:
- baton: one leader, redis_psub endpoint -> http sink (batch_max = BATCH),
  N messages published with redis-benchmark (-c 4 -P 32); time from the
  first PUBLISH until the receiver counted N messages; baton's CPU from
  /proc/<pid>/stat over that window;
- baseline: bench_http_sink_baseline, a bare libcurl loop on one kept-alive
  connection posting the same bodies (baton's own first envelope, captured
  by the receiver) in batches of BATCH with the same headers; time until the
  receiver counted N; its CPU from getrusage;
- source loop, for information (like for like): the same program with
  --psub, a bare hiredis PSUBSCRIBE loop that builds each message's envelope
  with baton's own code and posts what it has read (BATCH lines or fewer)
  before it blocks, on one thread; the same publish as baton's. It is what
  the baseline is not: bounded by the source as baton is (at batch 64 the
  baseline posts faster than Redis can deliver to anyone).
For each BATCH in BATCHES (default "1,64"; N_1 = 20000 messages at batch 1,
N = 200000 otherwise), ROUNDS (default 3) rounds in which the three take
turns at each place, the best of each compared. Target (issue 22): baton /
baseline >= 0.9. Prints RESULT {json} lines (bench/run's contract).
"""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

SRC = benchlib.SRC
h = benchlib.harness()

BUILD = os.environ["BATON_BUILD_DIR"]
RECEIVER = os.path.join(BUILD, "bench", "bench_http_receiver")
BASELINE = os.path.join(BUILD, "bench", "bench_http_sink_baseline")
BATCHES = [int(x) for x in os.environ.get("BATCHES", "1,64").split(",") if x.strip()]
N = int(os.environ.get("N", "200000"))
N_1 = int(os.environ.get("N_1", "20000"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
SUBJECTS = ("baton", "baseline", "source loop")
TIMEOUT_S = float(os.environ.get("TIMEOUT_S", "120"))
PAYLOAD = "payload-30-bytes-0123456789abc"
HZ = benchlib.HZ
ticks = benchlib.ticks


class Receiver:
    def __init__(self, work):
        self.port = h.free_port()
        self.first = os.path.join(work, "first-body")
        self.proc = subprocess.Popen([RECEIVER, str(self.port), self.first])
        if not h.wait_until(lambda: h.port_open(self.port), 5):
            raise RuntimeError("bench_http_receiver did not listen on %d" % self.port)
        self.url = "http://127.0.0.1:%d/ingest" % self.port

    def count(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/count" % self.port, timeout=2) as r:
            return int(r.read().split()[0])

    def wait_for(self, target, t0):
        """Seconds from t0 until the count reaches target, None on timeout."""
        while time.monotonic() - t0 < TIMEOUT_S:
            if self.count() >= target:
                return time.monotonic() - t0
            time.sleep(0.005)
        return None

    def close(self):
        self.proc.kill()
        self.proc.wait()


def publish(port, n):
    return subprocess.Popen(["redis-benchmark", "-p", str(port), "-c", "4", "-P", "32", "-n", str(n),
                             "-q", "PUBLISH", "chan.x", PAYLOAD],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def subscribed(source):
    """Whether one pattern subscriber is on the source within 15 s."""
    return h.wait_until(lambda: source.client().cmd("PUBSUB", "NUMPAT") == 1, 15)


def timed_publish(rec, source, n):
    """Publishes n and returns (seconds from the first PUBLISH until the
    receiver counted n more, None on timeout; how many it counted)."""
    base = rec.count()
    t0 = time.monotonic()
    pub = publish(source.port, n)
    secs = rec.wait_for(base + n, t0)
    pub.wait(30)
    return secs, rec.count() - base


def run_baton(work, rec, source, locker, batch, n, tag):
    sink = '{ name = "hook"; type = "http"; url = "%s"; batch_max = %d; }' % (rec.url, batch)
    main = h.main_cfg(redis_port=locker.port, sinks=sink, log_level="warn")
    ep = ('name = "bench"; type = "redis_psub"; sink = "hook"; host = "127.0.0.1"; port = %d; '
          'patterns = [ "chan.*" ];\n' % source.port)
    b = h.Baton(work, main, {"psub.cfg": ep}, name="baton-%s" % tag)
    try:
        if not subscribed(source):
            raise RuntimeError("baton did not subscribe: %s" % b.stderr_text()[-1500:])
        c0 = ticks(b.pid)
        secs, got = timed_publish(rec, source, n)
        c1 = ticks(b.pid)
        if secs is None:
            raise RuntimeError("baton: %d of %d messages reached the receiver in %.0f s"
                               % (got, n, TIMEOUT_S))
        return n / secs, (c1 - c0) * 1e6 / HZ / n
    finally:
        b.term()


def run_baseline(rec, line, batch, n):
    base = rec.count()
    t0 = time.monotonic()
    p = subprocess.run([BASELINE, rec.url, str(n), str(batch), line], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=TIMEOUT_S)
    secs = rec.wait_for(base + n, t0)
    if p.returncode != 0 or secs is None:
        raise RuntimeError("baseline failed (rc %d): %s" % (p.returncode, p.stderr[-500:]))
    cpu_us = int(p.stderr.split("cpu_us")[1].split()[0])
    return n / secs, cpu_us / n


def run_source_loop(rec, source, batch, n):
    """The bare loop that receives too (--psub): subscribes, then the same publish as baton's."""
    p = subprocess.Popen([BASELINE, rec.url, str(n), str(batch), "--psub", "127.0.0.1",
                          str(source.port), "chan.*"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        if not subscribed(source):
            raise RuntimeError("the source loop did not subscribe")
        secs, _ = timed_publish(rec, source, n)
        _, err = p.communicate(timeout=TIMEOUT_S)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if p.returncode != 0 or secs is None:
        raise RuntimeError("source loop failed (rc %s): %s" % (p.returncode, err[-500:]))
    cpu_us = int(err.split("cpu_us")[1].split()[0])
    return n / secs, cpu_us / n


def main():
    for f in (h.BATON_BIN, RECEIVER, BASELINE):
        if not os.path.exists(f):
            print("missing %s (build bench_programs)" % f, file=sys.stderr)
            return 2
    work = h.mktemp("baton-bench-http-")
    locker = h.RedisServer()
    source = h.RedisServer(extra_args=("--client-output-buffer-limit", "pubsub 0 0 0"))
    rec = Receiver(work)
    results = []
    try:
        for batch in BATCHES:
            n = N_1 if batch == 1 else N
            best = {"baton": (0, None), "baseline": (0, None), "source loop": (0, None)}
            for rnd in range(ROUNDS):
                # baton runs first in round 1 (the baseline posts baton's first envelope);
                # then the three take turns at each place
                for k in range(3):
                    who = SUBJECTS[(rnd + k) % 3]
                    if who == "baton":
                        r, cpu = run_baton(work, rec, source, locker, batch, n, "%d-%d" % (batch, rnd))
                    elif who == "baseline":
                        with open(rec.first) as f:
                            line = f.read().split("\n")[0]
                        r, cpu = run_baseline(rec, line, batch, n)
                    else:
                        r, cpu = run_source_loop(rec, source, batch, n)
                    print("  batch %3d round %d %-12s %9.0f msg/s, CPU %.2f us/msg"
                          % (batch, rnd + 1, who + ":", r, cpu), flush=True)
                    if r > best[who][0]:
                        best[who] = (r, cpu)
            (br, bc), (lr, lc), (sr, sc) = best["baton"], best["baseline"], best["source loop"]
            ratio = br / lr
            results.append({"workload": "redis_psub -> http sink, batch_max %d, %d msgs" % (batch, n),
                            "baton": round(br), "baseline": round(lr), "unit": "msg/s",
                            "ratio": round(ratio, 3), "target": ">= 0.9", "pass": ratio >= 0.9})
            results.append({"workload": "http sink CPU per message, batch_max %d (info)" % batch,
                            "baton": round(bc, 2), "baseline": round(lc, 2), "unit": "us/msg",
                            "ratio": round(bc / lc, 2) if lc else None, "target": None,
                            "pass": None})
            results.append({"workload": "redis_psub -> http sink like for like, batch_max %d: baton / "
                                        "the loop that receives too (info)" % batch,
                            "baton": round(br), "baseline": round(sr), "unit": "msg/s",
                            "ratio": round(br / sr, 3), "target": None, "pass": None})
            results.append({"workload": "http sink CPU per message like for like, batch_max %d (info)" % batch,
                            "baton": round(bc, 2), "baseline": round(sc, 2), "unit": "us/msg",
                            "ratio": round(bc / sc, 2) if sc else None, "target": None,
                            "pass": None})
    finally:
        rec.close()
    for r in results:
        print("RESULT " + json.dumps(r))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    benchlib.run(main)
