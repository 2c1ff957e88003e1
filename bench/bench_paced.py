#!/usr/bin/env python3
"""Benchmark: CPU per message at the rates users run, not only at saturation.

    bench/bench_paced.py [BUILD_DIR]    (default: $BATON_BUILD_DIR or ./build)

A paced publisher (bench_paced_pub, paced_pub_bench.c: one PUBLISH per
message at an even rate, replies pipelined) offers RATES (default
"1000,10000,50000" msg/s) for PACED_S (default 4) each to a Redis pattern
subscriber that writes one line per message to a file. Subjects, one at a
time, never side by side:
- baseline: bench_redis_psub_baseline in "flush" mode (a bare hiredis
  PSUBSCRIBE loop that writes its lines as soon as no further message is
  already read);
- baton: one leader (redis_psub endpoint -> stdout sink, the lease in a
  second redis-server), with everything a leader does besides (renewals,
  status);
- the peers of bench/peers/ (Node.js/ioredis, Go/redigo) when node+npm
  and go+redigo are installed (built into <build>/peers; PEERS=0 skips
  them).
CPU is the subject's threads' run time (/proc/<pid>/task/*/schedstat, ns)
from just before the first PUBLISH until its file holds every message,
divided by the messages. Each figure is the median of ROUNDS (default 3)
rounds. Targets (issue 22): baton <= 1.5x the bare loop's CPU per message at
every rate, and <= 1/3 of each peer's. Prints RESULT {json} lines
(bench/run's contract).
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

h = benchlib.harness()
import subjects  # noqa: E402
from subjects import LineCounter, cpu_ns  # noqa: E402

BUILD = os.environ["BATON_BUILD_DIR"]
PUB = os.path.join(BUILD, "bench", "bench_paced_pub")
BASELINE = subjects.BASELINE
RATES = [int(x) for x in os.environ.get("RATES", "1000,10000,50000").split(",") if x.strip()]
PACED_S = float(os.environ.get("PACED_S", "4"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
TIMEOUT_S = float(os.environ.get("TIMEOUT_S", "60"))
PAYLOAD = "payload-30-bytes-0123456789abc"


def measure(cls, work, source, locker, rate):
    s = subjects.start(cls, work, source, locker)
    try:
        time.sleep(0.3)  # start-up work done
        n = int(rate * PACED_S)
        lines = LineCounter(s.out)
        base = lines()
        c0 = cpu_ns(s.pid)
        p = subprocess.run([PUB, "127.0.0.1", str(source.port), "chan.x", str(rate), str(n), PAYLOAD],
                           capture_output=True, text=True, timeout=PACED_S * 3 + 30)
        if p.returncode != 0:
            raise RuntimeError("publisher failed: %s" % (p.stdout + p.stderr))
        if not h.wait_until(lambda: lines() - base >= n, TIMEOUT_S, interval=0.005):
            raise RuntimeError("%s: %d of %d lines" % (s.name, lines() - base, n))
        c1 = cpu_ns(s.pid)
        got = p.stdout.split()
        return (c1 - c0) / 1e3 / n, float(got[got.index("rate") + 1])
    finally:
        s.stop()


def main():
    for f in (h.BATON_BIN, PUB, BASELINE):
        if not os.path.exists(f):
            print("missing %s (build bench_programs)" % f, file=sys.stderr)
            return 2
    work = h.mktemp("baton-bench-paced-")
    locker = h.RedisServer()
    source = h.RedisServer(extra_args=("--client-output-buffer-limit", "pubsub 0 0 0"))
    results = []
    peers = subjects.available_peers() if os.environ.get("PEERS", "1") != "0" else []
    for rate in RATES:
        med = {}
        for cls in [subjects.Baseline, subjects.Baton] + peers:
            cpus = []
            for rnd in range(ROUNDS):
                cpu, offered = measure(cls, work, source, locker, rate)
                cpus.append(cpu)
                print("  %6d msg/s offered (%.0f achieved) round %d %-20s %7.2f us/msg"
                      % (rate, offered, rnd + 1, cls.name, cpu), flush=True)
            med[cls.name] = statistics.median(cpus)
        base, baton = med.pop(subjects.Baseline.name), med.pop(subjects.Baton.name)
        ratio = baton / base
        results.append({"workload": "redis_psub CPU per message at %d msg/s paced, baton / bare loop"
                        % rate, "baton": round(baton, 2), "baseline": round(base, 2), "unit": "us/msg",
                        "ratio": round(ratio, 2), "target": "<= 1.5", "pass": ratio <= 1.5})
        for name, cpu in med.items():  # the peers: at most 1/3 of their CPU per message
            ratio = baton / cpu
            results.append({"workload": "redis_psub CPU per message at %d msg/s paced, baton / %s"
                            % (rate, name), "baton": round(baton, 2), "baseline": round(cpu, 2),
                            "unit": "us/msg", "ratio": round(ratio, 2), "target": "<= 0.33",
                            "pass": ratio <= 0.34})
    for r in results:
        print("RESULT " + json.dumps(r))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    benchlib.run(main)
