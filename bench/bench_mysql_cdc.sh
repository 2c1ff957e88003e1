#!/usr/bin/env bash
# Benchmark: row events/s of a 200,000-row bulk insert, binlog -> baton ->
# stdout sink (a file), against a bare mariadb_rpl_fetch loop that only
# decodes rows with the library (bench/mysql_cdc_baseline.c), on the same
# binlog range of the same mariadbd in the same run.
#
#   bench/bench_mysql_cdc.sh [BUILD_DIR]     (default: $BATON_BUILD_DIR or ./build)
#
# The server is started on a free loopback port in a temporary directory
# (tests/integration/lib/mariadb.py), the rows are inserted first (INSERT ...
# SELECT from the sequence engine, 10,000 rows per statement), then both
# readers stream the recorded file:pos range. baton runs alone (no locker:
# always leader, no checkpoint), start = "file:pos". Rounds alternate
# (ROUNDS, default 2); the best of each is compared. Target: ratio >= 0.7.
# Prints the contract line RESULT {json}.
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-${BATON_BUILD_DIR:-$SRC/build}}
export BATON_BIN=${BATON_BIN:-$BUILD/baton} BATON_SOURCE_DIR=$SRC BATON_BUILD_DIR=$BUILD
export N=${N:-200000} ROUNDS=${ROUNDS:-2} BASE=$BUILD/bench/bench_mysql_cdc_baseline
for p in "$BATON_BIN" "$BASE"; do
    [ -x "$p" ] || { echo "missing $p (cmake --build $BUILD --target baton bench_mysql_cdc_baseline)" >&2; exit 2; }
done
command -v mariadbd >/dev/null || { echo "missing mariadbd" >&2; exit 2; }

exec timeout 600 python3 - "$SRC" <<'PY'
import json, os, subprocess, sys, time
sys.path.insert(0, os.path.join(sys.argv[1], "tests", "integration", "lib"))
import harness as h
import mariadb as mdb

N, ROUNDS, BASE = int(os.environ["N"]), int(os.environ["ROUNDS"]), os.environ["BASE"]
srv = mdb.MariaServer()
srv.create_user("bench", "bench")
srv.sql("CREATE DATABASE seq; CREATE DATABASE b; CREATE TABLE b.t (id INT PRIMARY KEY, a BIGINT, s VARCHAR(64), "
        "d DECIMAL(10,2), dt DATETIME) CHARSET utf8mb4;")
f0, p0 = srv.master_status()
t0 = time.monotonic()
for lo in range(1, N + 1, 10000):
    hi = min(N, lo + 9999)
    srv.sql("INSERT INTO b.t SELECT seq, seq * 1000003, CONCAT('row-', seq, '-h\u00e9llo'), "
            "seq / 7, '2024-01-01 00:00:00' + INTERVAL seq SECOND FROM seq.seq_%d_to_%d;" % (lo, hi))
f1, p1 = srv.master_status()
print("inserted %d rows in %.1fs; binlog range %s:%d .. %s:%d" % (N, time.monotonic() - t0, f0, p0, f1, p1))
assert f0 == f1, "the bulk insert rotated the binlog"

def run_baseline():
    p = subprocess.run([BASE, "127.0.0.1", str(srv.port), "bench", "bench", f0, str(p0), str(p1)],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise SystemExit("baseline failed: " + p.stderr)
    parts = p.stdout.split()
    rows, rate = int(parts[1]), float(parts[5])
    if p.stderr.strip():
        print("baseline:", p.stderr.strip())
    return rows, rate

def run_baton(k):
    d = h.mktemp("baton-bench-cdc-")
    cfg = ('name = "bench";\ntype = "mysql_cdc";\nsink = "out";\nhost = "127.0.0.1";\nport = %d;\n'
           'user = "bench";\npassword_env = "BENCH_PW";\nserver_id = %d;\nstart = "%s:%d";\n'
           'queue_size = 65536;\n' % (srv.port, 900 + k, f0, p0))
    main = 'sinks = ( { name = "out"; type = "stdout"; } );\nlog = { level = "warn"; };\n'
    b = h.Baton(d, main, {"cdc.cfg": cfg}, env={"BENCH_PW": "bench"}, start=False)
    t0 = time.monotonic()
    b.start()
    lines, t_done = 0, None
    with open(b.out_path, "rb") as f:
        while time.monotonic() - t0 < 300:
            chunk = f.read(1 << 22)
            if chunk:
                lines += chunk.count(b"\n")
                if lines >= N:
                    t_done = time.monotonic()
                    break
                continue
            if not b.alive():
                break
            time.sleep(0.005)
    b.term()
    if t_done is None:
        raise SystemExit("baton forwarded only %d of %d rows; stderr:\n%s" % (lines, N, b.stderr_text()[-2000:]))
    return lines, lines / (t_done - t0)

best_base = best_baton = 0.0
for k in range(ROUNDS):
    rows, rb = run_baseline()
    assert rows == N, "baseline decoded %d rows, expected %d" % (rows, N)
    n, rt = run_baton(k)
    print("round %d: baseline %.0f rows/s, baton %.0f rows/s" % (k + 1, rb, rt))
    best_base, best_baton = max(best_base, rb), max(best_baton, rt)
ratio = best_baton / best_base
print("mysql_cdc: baton %.0f row events/s (stdout sink), bare mariadb_rpl_fetch+extract_rows %.0f rows/s: ratio %.2f (target >= 0.7)"
      % (best_baton, best_base, ratio))
print("RESULT " + json.dumps({"bench": "mysql_cdc", "rows": N, "baton_rows_per_s": round(best_baton),
                              "baseline_rows_per_s": round(best_base), "ratio": round(ratio, 3),
                              "target": 0.7, "ok": ratio >= 0.7}))
h._run_cleanups()
PY
