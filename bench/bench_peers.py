#!/usr/bin/env python3
"""Benchmark: baton against what users would run instead (bench/peers/).

    bench/bench_peers.py [BUILD_DIR]    (default: $BATON_BUILD_DIR or ./build)

The same job for each subject, one at a time: a Redis SET NX PX lease (the
peers: the seed's TryLock + Lua CAS renewal; baton: its ActiveGuard) and,
as leader, PSUBSCRIBE "chan.*" writing one JSON line per message to a file.
The workload is bench_redis_psub.sh's: N (default 500,000) PUBLISH with
redis-benchmark (-c 4 -P 32, 30-byte payload). Per subject: msg/s (N / time
from the first PUBLISH until its file holds N lines), CPU per message
(/proc/<pid>/task/*/schedstat over that window) and peak RSS (VmHWM). Best
of ROUNDS (default 2) rounds by throughput.

Subjects: baton; Node.js with ioredis; Go with redigo (Debian's package);
the bare hiredis loop for information (the floor). A peer whose toolchain is
missing is skipped and said so (subjects.build_peers).

Targets (issue 22), baton against each peer: throughput >= the peer's; CPU
per message <= 1/3 of the peer's; peak RSS <= 1/5 of the peer's. Prints
RESULT {json} lines (bench/run's contract).
"""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

h = benchlib.harness()
import subjects  # noqa: E402
from subjects import LineCounter, cpu_ns  # noqa: E402

N = int(os.environ.get("N", "500000"))
ROUNDS = int(os.environ.get("ROUNDS", "2"))
TIMEOUT_S = float(os.environ.get("TIMEOUT_S", "120"))
PAYLOAD = "payload-30-bytes-0123456789abc"


def measure(cls, work, source, locker):
    """(msg/s, us of CPU per message, peak RSS KiB) of one round."""
    s = subjects.start(cls, work, source, locker)
    try:
        time.sleep(0.5)  # start-up work done
        lines = LineCounter(s.out)
        base = lines()
        c0 = cpu_ns(s.pid)
        t0 = time.monotonic()
        pub = subprocess.Popen(["redis-benchmark", "-p", str(source.port), "-c", "4", "-P", "32",
                                "-n", str(N), "-q", "PUBLISH", "chan.x", PAYLOAD],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        done = h.wait_until(lambda: lines() - base >= N, TIMEOUT_S, interval=0.01)
        secs = time.monotonic() - t0
        c1 = cpu_ns(s.pid)
        hwm = benchlib.status_kb(s.pid, "VmHWM")
        pub.wait(30)
        if not done:
            raise RuntimeError("%s: %d of %d lines after %.0f s" % (cls.name, lines() - base, N,
                                                                    TIMEOUT_S))
        return N / secs, (c1 - c0) / 1e3 / N, hwm
    finally:
        s.stop()


def main():
    for f in (h.BATON_BIN, subjects.BASELINE):
        if not os.path.exists(f):
            print("missing %s (build bench_programs)" % f, file=sys.stderr)
            return 2
    peers = subjects.available_peers()
    if not peers:
        print("no peer can run here (see above): nothing to compare")
        return 0
    work = h.mktemp("baton-bench-peers-")
    locker = h.RedisServer()
    source = h.RedisServer(extra_args=("--client-output-buffer-limit", "pubsub 0 0 0"))
    best = {}
    for rnd in range(ROUNDS):
        for cls in [subjects.Baton] + peers + [subjects.Baseline]:
            rate, cpu, hwm = measure(cls, work, source, locker)
            print("  round %d %-18s %9.0f msg/s  %6.2f us/msg  peak RSS %7.1f MiB"
                  % (rnd + 1, cls.name, rate, cpu, hwm / 1024.0), flush=True)
            if cls.name not in best or rate > best[cls.name][0]:
                best[cls.name] = (rate, cpu, hwm)
    br, bc, bm = best[subjects.Baton.name]
    fr, fc, fm = best[subjects.Baseline.name]
    results = []
    for cls in peers:
        pr, pc, pm = best[cls.name]
        w = "redis_psub %d msgs, baton / %s" % (N, cls.name)
        results.append({"workload": w + ": throughput", "baton": round(br), "baseline": round(pr),
                        "unit": "msg/s", "ratio": round(br / pr, 2), "target": ">= 1.0",
                        "pass": br / pr >= 1.0})
        results.append({"workload": w + ": CPU per message", "baton": round(bc, 2),
                        "baseline": round(pc, 2), "unit": "us/msg", "ratio": round(bc / pc, 2),
                        "target": "<= 0.33", "pass": bc / pc <= 0.34})
        results.append({"workload": w + ": peak RSS", "baton": round(bm / 1024.0, 1),
                        "baseline": round(pm / 1024.0, 1), "unit": "MiB", "ratio": round(bm / pm, 2),
                        "target": "<= 0.2", "pass": bm / pm <= 0.2})
        results.append({"workload": w + ": CPU per message of the bare hiredis loop / the peer "
                        "(the floor, info)", "baton": round(fc, 2), "baseline": round(pc, 2),
                        "unit": "us/msg", "ratio": round(fc / pc, 2), "target": None, "pass": None})
    results.append({"workload": "redis_psub %d msgs, baton / bare hiredis loop (info)" % N,
                    "baton": round(br), "baseline": round(fr), "unit": "msg/s",
                    "ratio": round(br / fr, 2), "target": None, "pass": None})
    for r in results:
        print("RESULT " + json.dumps(r))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    benchlib.run(main)
