#!/bin/sh
# Benchmark: messages/s forwarded by a baton leader (rabbitmq endpoint,
# private queue on a fanout exchange, stdout sink to a file) against a bare
# rabbitmq-c consume loop (bench_rabbitmq_baseline consume, payload lines to
# a file), both bound to the same exchange in the same run, so they receive
# the same messages from the same publisher at the same time.
#
# Rate of each = messages / (time its output file reached COUNT lines -
# time publishing started), observed the same way for both. Prints both
# rates and the ratio (target >= 0.8).
#
#   bench/bench_rabbitmq.sh [BUILD_DIR] [COUNT] [SIZE]
#   defaults: build-bench (or $BATON_BUILD_DIR), 100000 messages, 100 bytes
# Starts its own rabbitmq-server on a free loopback port (~7-20 s) and stops
# it afterwards; bounded to ~3 minutes.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(dirname "$HERE")
BUILD=${1:-${BATON_BUILD_DIR:-$SRC/build-bench}}
COUNT=${2:-100000}
SIZE=${3:-100}
if [ ! -x "$BUILD/baton" ] || [ ! -x "$BUILD/bench/bench_rabbitmq_baseline" ]; then
    echo "building baton and bench_rabbitmq_baseline in $BUILD (Release)" >&2
    cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBATON_TESTS=OFF >/dev/null
    cmake --build "$BUILD" -j2 --target baton bench_rabbitmq_baseline >/dev/null
fi
exec timeout -k 10 240 python3 - "$SRC" "$BUILD" "$COUNT" "$SIZE" <<'EOF'
import os, subprocess, sys, time
src, build, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, os.path.join(src, "tests", "integration", "lib"))
os.environ.setdefault("BATON_BIN", os.path.join(build, "baton"))
import harness as h
import rabbitmq as rmq

baseline_bin = os.path.join(build, "bench", "bench_rabbitmq_baseline")
srv = rmq.RabbitServer()
work = h.mktemp("baton-bench-rmq-")
pub = rmq.Amqp(srv.port)
pub.exchange_declare("bench", "fanout")
pub.close()

ep = ('name = "bench"; type = "rabbitmq"; sink = "out"; host = "127.0.0.1"; port = %d;\n'
      'exchange = "bench";\n' % srv.port)
b = h.Baton(work, h.main_cfg(log_level="warn"), {"b.cfg": ep})
base_out = os.path.join(work, "baseline.out")
base_err = os.path.join(work, "baseline.err")
base = subprocess.Popen([baseline_bin, "consume", str(srv.port), "bench", str(count)],
                        stdout=open(base_out, "wb"), stderr=open(base_err, "wb"))
h._cleanups.append(lambda: base.poll() is None and base.kill())

def bound():
    try:
        return len(srv.bound_queues("bench")) >= 2
    except RuntimeError:
        return False
if not h.wait_until(bound, 30, 0.5):
    print("consumers did not bind:", b.stderr_text(), open(base_err).read())
    sys.exit(1)

class Counter:
    def __init__(self, path):
        self.path, self.off, self.lines, self.done_at = path, 0, 0, None
    def poll(self, now):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.off)
                data = f.read()
        except FileNotFoundError:
            return
        self.off += len(data)
        self.lines += data.count(b"\n")
        if self.done_at is None and self.lines >= count:
            self.done_at = now

cb, cl = Counter(b.out_path), Counter(base_out)
t0 = time.monotonic()
p = subprocess.Popen([baseline_bin, "publish", str(srv.port), "bench", str(count), str(size)],
                     stderr=subprocess.PIPE, text=True)
deadline = t0 + 150
while time.monotonic() < deadline and (cb.done_at is None or cl.done_at is None):
    now = time.monotonic()
    cb.poll(now)
    cl.poll(now)
    time.sleep(0.01)
perr = p.communicate(timeout=30)[1].strip()
print(perr)
try:
    base.wait(10)
except subprocess.TimeoutExpired:
    base.kill()
print(open(base_err).read().strip().splitlines()[-1])
if cb.done_at is None or cl.done_at is None:
    print("incomplete: baton %d, baseline %d of %d lines" % (cb.lines, cl.lines, count))
    print(b.stderr_text()[-2000:])
    sys.exit(1)
rb = count / (cb.done_at - t0)
rl = count / (cl.done_at - t0)
print("baton leader (rabbitmq -> stdout sink): %d messages in %.2f s = %.0f msg/s"
      % (count, cb.done_at - t0, rb))
print("bare rabbitmq-c consume loop:           %d messages in %.2f s = %.0f msg/s"
      % (count, cl.done_at - t0, rl))
print("ratio baton/baseline: %.2f (target >= 0.8)" % (rb / rl))
b.term()
srv.stop()
EOF
