#!/usr/bin/env python3
"""Benchmark: the redis_stream sink against a bare hiredis loop running the
same Lua script per batch (issue 38).

    bench/bench_redis_stream.py [BUILD_DIR]    (default: $BATON_BUILD_DIR or ./build)

bench_redis_stream_baseline (bench/redis_stream_baseline.c) writes N
envelopes (N default 200000, unique ids, a 30-byte payload) in batches of
BATCH (default 64) into a fresh stream of one redis-server, either through
sink_redis_stream_ops.send (mode "sink": splitting each envelope into its
fields, building the arguments, EVALSHA) or as a bare loop of EVALSHA with
the arguments prepared beforehand (mode "bare"). ROUNDS (default 3) rounds,
the two taking turns at going first, FLUSHALL between runs; the best of each
compared. Target: sink / bare >= 0.9. Prints RESULT {json} lines (bench/run's
contract).
"""
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

h = benchlib.harness()
BUILD = os.environ["BATON_BUILD_DIR"]
PROG = os.path.join(BUILD, "bench", "bench_redis_stream_baseline")
N = int(os.environ.get("N", "200000"))
BATCH = int(os.environ.get("BATCH", "64"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))


def run(port, mode):
    p = subprocess.run([PROG, str(port), str(N), str(BATCH), mode], capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        raise RuntimeError("%s failed (rc %d): %s" % (mode, p.returncode, p.stderr[-500:]))
    w = p.stdout.split()
    return float(w[1]), float(w[3])


def main():
    if not os.path.exists(PROG):
        print("missing %s (build bench_programs)" % PROG, file=sys.stderr)
        return 2
    redis = h.RedisServer()
    c = redis.client()
    best = {"sink": (0, None), "bare": (0, None)}
    for rnd in range(ROUNDS):
        for mode in (("sink", "bare") if rnd % 2 == 0 else ("bare", "sink")):
            c.cmd("FLUSHALL")
            r, cpu = run(redis.port, mode)
            print("  round %d %-5s %9.0f msg/s, CPU %.2f us/msg" % (rnd + 1, mode + ":", r, cpu),
                  flush=True)
            if r > best[mode][0]:
                best[mode] = (r, cpu)
    (sr, sc), (br, bc) = best["sink"], best["bare"]
    ratio = sr / br
    results = [
        {"workload": "redis_stream sink, batch %d, %d msgs, vs a bare EVALSHA loop" % (BATCH, N),
         "baton": round(sr), "baseline": round(br), "unit": "msg/s", "ratio": round(ratio, 3),
         "target": ">= 0.9", "pass": ratio >= 0.9},
        {"workload": "redis_stream sink client CPU per message, batch %d (info)" % BATCH,
         "baton": round(sc, 2), "baseline": round(bc, 2), "unit": "us/msg",
         "ratio": round(sc / bc, 2) if bc else None, "target": None, "pass": None},
    ]
    for r in results:
        print("RESULT " + json.dumps(r))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    benchlib.run(main)
