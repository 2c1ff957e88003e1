#!/usr/bin/env bash
# Benchmark: row events/s of a 1,000,000-row bulk insert, binlog -> baton ->
# stdout sink (a file), on the same binlog range of the same mariadbd in the
# same run, against two baselines (bench/mysql_cdc_baseline.c):
#
#  1. for information: a bare mariadb_rpl_fetch loop that only decodes
#     rows with the library (mariadb_rpl_extract_rows): no JSON, no output.
#  2. like for like: the same bare loop, decoding every row with baton's own
#     decoder (endpoints/cdc_decode.c) into the same JSON envelope and
#     writing the lines to stdout (a file) through a 64 KiB staging buffer,
#     as baton's stdout sink does. The ratio baton / this isolates the cost
#     of baton's pipeline (message allocation, queue, forwarder thread,
#     guard, done callbacks) from the cost of producing the JSON. Target
#     (issue 22): >= 0.9, first to last line; the spread over rounds is
#     printed.
#
# Two timings are printed:
#  - whole run: baton from process spawn until the N-th line is in the file
#    (includes exec, config, connect, binlog dump request); the baselines as
#    they time themselves (connect + stream + last write; no exec). This is
#    shown for information (it counts baton's exec, not the baseline's).
#  - first to last line ("steady"): the same observer (this script polling
#    the output file every ~1 ms) notes when the first bytes appear (L0 lines
#    by then) and when the N-th line is there; rate = (N - L0) / (t_last -
#    t_first). Applied identically to baton and the JSON baseline; it leaves
#    out process start and connection setup for both. (Baseline 1 writes no
#    lines, so it has no steady figure.)
#
#   bench/bench_mysql_cdc.sh [BUILD_DIR]     (default: $BATON_BUILD_DIR or ./build)
#
# The server is started on a free loopback port in a temporary directory
# (tests/integration/lib/mariadb.py), the rows are inserted first (INSERT ...
# SELECT from the sequence engine, 10,000 rows per statement), then the
# readers stream the recorded file:pos range. baton runs alone (no locker:
# always leader, no checkpoint), start = "file:pos". Rounds alternate
# (ROUNDS, default 4), baton and the JSON baseline taking turns at going
# first, SETTLE_S (default 1) apart; the best of each is compared. Until
# 2026-12-05 baton always ran right after the JSON baseline, and on this
# machine the second subject of a round often runs at half speed (one run
# of 3 rounds: baton second 0.61M and 0.77M rows/s, first 1.67M; the JSON
# baseline second 0.73-1.33M, first 1.63-2.09M): that, not baton, made the
# 0.46-0.89 spread of the figures before. Prints the contract
# lines RESULT {json} (one per comparison).
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-${BATON_BUILD_DIR:-$SRC/build}}
export BATON_BIN=${BATON_BIN:-$BUILD/baton} BATON_SOURCE_DIR=$SRC BATON_BUILD_DIR=$BUILD
export N=${N:-1000000} ROUNDS=${ROUNDS:-4} BASE=$BUILD/bench/bench_mysql_cdc_baseline
for p in "$BATON_BIN" "$BASE"; do
    [ -x "$p" ] || { echo "missing $p (cmake -DBATON_BENCH=ON -B $BUILD; cmake --build $BUILD --target baton bench_mysql_cdc_baseline)" >&2; exit 2; }
done
command -v mariadbd >/dev/null || { echo "missing mariadbd" >&2; exit 2; }

exec timeout 600 python3 - "$SRC" <<'PY'
import json, os, shutil, subprocess, sys, tempfile, time
from statistics import median
sys.path.insert(0, os.path.join(sys.argv[1], "tests", "integration", "lib"))
import harness as h
import mariadb as mdb
sys.path.insert(0, os.path.join(sys.argv[1], "bench"))
import benchlib  # noqa: E402

N, ROUNDS, BASE = int(os.environ["N"]), int(os.environ["ROUNDS"]), os.environ["BASE"]
SETTLE_S = float(os.environ.get("SETTLE_S", "1"))
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

def watch(path, alive, t0, what):
    """Polls path until it holds N lines. Returns (t_done - t0, t_first, lines
    seen at t_first, t_done)."""
    lines, t_first, l0, t_done = 0, None, 0, None
    with open(path, "rb") as f:
        while time.monotonic() - t0 < 300:
            chunk = f.read(1 << 22)
            if chunk:
                now = time.monotonic()
                lines += chunk.count(b"\n")
                if t_first is None:
                    t_first, l0 = now, lines
                if lines >= N:
                    t_done = now
                    break
                continue
            if not alive():
                # the writer is gone: read what it left, then judge
                chunk = f.read()
                lines += chunk.count(b"\n")
                if lines >= N:
                    t_done = time.monotonic()
                break
            time.sleep(0.001)
    if t_done is None:
        raise SystemExit("%s wrote only %d of %d lines" % (what, lines, N))
    return t_done - t0, t_first, l0, t_done


def steady(t_first, l0, t_done):
    return (N - l0) / (t_done - t_first) if t_done > t_first else float("nan")


def outdir(prefix):
    """A directory for a round's output, in memory when /dev/shm is there:
    a round writes ~380 MB, and on disk the later rounds were throttled by
    the writeback of the earlier ones (the JSON baseline fell from 2.2M to
    0.9M rows/s from round 2 on, baton likewise but not alike: the spread
    of 0.3-0.8 between rounds)."""
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    d = tempfile.mkdtemp(prefix=prefix, dir=base)
    h._cleanups.append(lambda: shutil.rmtree(d, ignore_errors=True))
    return d


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


def run_json_baseline():
    d = outdir("baton-bench-cdc-json-")
    out, err = os.path.join(d, "out.jsonl"), os.path.join(d, "err.txt")
    with open(out, "wb") as fo, open(err, "wb") as fe:
        t0 = time.monotonic()
        p = subprocess.Popen([BASE, "--json", "127.0.0.1", str(srv.port), "bench", "bench", f0,
                              str(p0), str(p1)], stdout=fo, stderr=fe, stdin=subprocess.DEVNULL)
    _, t_first, l0, t_done = watch(out, lambda: p.poll() is None, t0, "json baseline")
    cpu = benchlib.wait_cpu(p, 60)  # the whole process, start to exit
    if p.returncode != 0:
        raise SystemExit("json baseline failed: " + open(err).read())
    summary = [l for l in open(err).read().splitlines() if l.startswith("rows ")]
    others = [l for l in open(err).read().splitlines() if not l.startswith("rows ")]
    if others:
        print("json baseline:", "\n".join(others))
    parts = summary[0].split()
    rows, rate = int(parts[1]), float(parts[5])
    return rows, rate, steady(t_first, l0, t_done), out, cpu


def run_baton(k):
    d = outdir("baton-bench-cdc-")
    cfg = ('name = "bench";\ntype = "mysql_cdc";\nsink = "out";\nhost = "127.0.0.1";\nport = %d;\n'
           'user = "bench";\npassword_env = "BENCH_PW";\nserver_id = %d;\nstart = "%s:%d";\n'
           'queue_size = 65536;\n' % (srv.port, 900 + k, f0, p0))
    main = 'sinks = ( { name = "out"; type = "stdout"; } );\nlog = { level = "warn"; };\n'
    b = h.Baton(d, main, {"cdc.cfg": cfg}, env={"BENCH_PW": "bench"}, start=False)
    open(b.out_path, "wb").close()
    t0 = time.monotonic()
    b.start()
    try:
        dt, t_first, l0, t_done = watch(b.out_path, b.alive, t0, "baton")
    except SystemExit as e:
        raise SystemExit("%s; stderr:\n%s" % (e, b.stderr_text()[-2000:]))
    cpu = benchlib.ticks(b.proc.pid) / benchlib.HZ  # the whole process, start to the N-th line
    b.term()
    return N / dt, steady(t_first, l0, t_done), b.out_path, cpu


def first_record(path):
    with open(path, "rb") as f:
        return json.loads(f.readline())


best = {"base": 0.0, "json": 0.0, "json_steady": 0.0, "baton": 0.0, "baton_steady": 0.0}
per_round = []  # (whole-run ratio, first-to-last ratio) of each round: the spread
cpu_rounds = []  # (baton, JSON baseline) CPU us per row of each round
bytes_per_line = None
for k in range(ROUNDS):
    rows, rb = run_baseline()
    assert rows == N, "baseline decoded %d rows, expected %d" % (rows, N)
    # the two timed subjects take turns at going first (the first one after
    # the decode-only loop meets the server's background work, e.g. InnoDB
    # still flushing the bulk insert in round 1)
    if k % 2 == 0:
        rows, rj, rjs, jout, cj = run_json_baseline()
        rj0 = first_record(jout)
        os.remove(jout)
        time.sleep(SETTLE_S)
        rt, rts, bout, ct = run_baton(k)
    else:
        rt, rts, bout, ct = run_baton(k)
        rt0, bytes_per_line = first_record(bout), os.path.getsize(bout) / N
        os.remove(bout)  # as the baseline's before baton runs: each starts beside no old output
        time.sleep(SETTLE_S)
        rows, rj, rjs, jout, cj = run_json_baseline()
        rj0 = first_record(jout)
        os.remove(jout)
    assert rows == N, "json baseline encoded %d rows, expected %d" % (rows, N)
    # like for like: the same envelope, key for key and value for value
    # (received_at, endpoint and epoch aside)
    if k % 2 == 0:
        rt0, bytes_per_line = first_record(bout), os.path.getsize(bout) / N
        os.remove(bout)
    for r in (rj0, rt0):
        for key in ("received_at", "endpoint", "epoch"):
            r.pop(key, None)
    assert list(rj0) == list(rt0) and rj0 == rt0, "json baseline line differs from baton's:\n%s\n%s" % (rj0, rt0)
    per_round.append((rt / rj, rts / rjs))
    cpu_rounds.append((ct * 1e6 / N, cj * 1e6 / N))
    print("round %d: bare loop %.0f rows/s; bare loop + JSON to a file %.0f rows/s (first to last "
          "line %.0f, CPU %.2f us/row); baton %.0f rows/s (first to last line %.0f, CPU %.2f us/row); "
          "like for like %.2f whole run, %.2f first to last (%s first)"
          % (k + 1, rb, rj, rjs, cj * 1e6 / N, rt, rts, ct * 1e6 / N, rt / rj, rts / rjs,
             "the JSON baseline" if k % 2 == 0 else "baton"), flush=True)
    for key, v in (("base", rb), ("json", rj), ("json_steady", rjs), ("baton", rt),
                   ("baton_steady", rts)):
        best[key] = max(best[key], v)

# Like for like (issue 22: >= 0.9): the same decoder, the same envelope,
# the same output path, first to last line for both (process start and
# connection setup left out of both; the whole-run figure counts baton's
# exec and configuration but not the baseline's, which at 200,000 rows --
# a fifth of a second -- was most of the spread between runs, 0.37-0.79).
r_whole = best["baton"] / best["json"]
r_steady = best["baton_steady"] / best["json_steady"]
lo, hi = min(r for _, r in per_round), max(r for _, r in per_round)
wlo, whi = min(r for r, _ in per_round), max(r for r, _ in per_round)
print("mysql_cdc: bare loop + same JSON to a file %.0f rows/s whole run, %.0f rows/s first to last line "
      "(%.0f bytes/line); baton %.0f / %.0f: like-for-like ratio %.2f first to last (rounds %.2f-%.2f), "
      "%.2f whole run (rounds %.2f-%.2f)"
      % (best["json"], best["json_steady"], bytes_per_line, best["baton"], best["baton_steady"],
         r_steady, lo, hi, r_whole, wlo, whi))
print("RESULT " + json.dumps({
    "workload": "mysql_cdc %d rows, baton vs bare loop + same JSON to a file, first to last line "
                "(best of %d; rounds %.2f-%.2f)" % (N, ROUNDS, lo, hi),
    "baton": round(best["baton_steady"]), "baseline": round(best["json_steady"]), "unit": "rows/s",
    "ratio": round(r_steady, 3), "target": ">= 0.9", "pass": r_steady >= 0.9}))
print("RESULT " + json.dumps({
    "workload": "mysql_cdc %d rows, the same, whole run (baton's exec included; rounds %.2f-%.2f, info)"
                % (N, wlo, whi),
    "baton": round(best["baton"]), "baseline": round(best["json"]), "unit": "rows/s",
    "ratio": round(r_whole, 3), "target": None, "pass": None}))
# CPU per row: the whole process (baton: all its threads, start to the N-th
# line; the baseline: start to exit), the median over the rounds: it moves
# less with the machine than the rates do.
cb, cjm = median([c for c, _ in cpu_rounds]), median([c for _, c in cpu_rounds])
print("RESULT " + json.dumps({
    "workload": "mysql_cdc %d rows, CPU per row, baton vs bare loop + same JSON to a file (median of "
                "%d rounds; baton %s us; info)" % (N, ROUNDS, ", ".join("%.2f" % c for c, _ in cpu_rounds)),
    "baton": round(cb, 3), "baseline": round(cjm, 3), "unit": "us/row",
    "ratio": round(cb / cjm, 3) if cjm else None, "target": None, "pass": None}))
# The decode-only loop writes nothing: informational since issue 22 (the
# like-for-like comparison above carries the target).
ratio = best["baton"] / best["base"]
print("RESULT " + json.dumps({
    "workload": "mysql_cdc %d rows, baton vs bare decode-only loop (no JSON, no output; info)" % N,
    "baton": round(best["baton"]), "baseline": round(best["base"]), "unit": "rows/s",
    "ratio": round(ratio, 3), "target": None, "pass": None}))
h._run_cleanups()
PY
