#!/usr/bin/env python3
"""Benchmark: how a replica's cost grows with its number of endpoints.

    bench/bench_scale.py [BUILD_DIR]    (default: $BATON_BUILD_DIR or ./build)

For each N in SCALE_NS (default 1,10,100,1000): a locker Redis and a source
Redis (separate, so the locker's INFO commandstats counts lease traffic
only), REPLICAS (default 3) baton processes with N redis_psub endpoints each
(one distinct channel pattern per endpoint, stdout sink, default lease:
ttl 3000, renew 1000, retry 250). Replica A starts first and leads all N;
the others start once A leads everything and stand by.

Figures per N (printed as one table, with the growth against N = 1):
- peak RSS (VmHWM) and threads of the leader and of a standby;
- idle CPU of the leader and of a standby over IDLE_S (default 10) seconds,
  and their wake-ups per second by thread kind (voluntary context switches:
  lease, psub, renewer, acquirer, ...) over the same window;
- locker Redis commands/s over the same window (INFO commandstats, after
  CONFIG RESETSTAT), in all and per replica, with the top commands;
- takeover: SIGKILL A, time until every one of the N endpoints is led by
  another replica (their /status), against ttl + retry + 1 s.
Targets at N = 1000 (issue 22): < 64 MiB RSS per replica, < 2 % of a core
idle, every endpoint led again within ttl + retry + 1 s, lease traffic per
replica growing with renew intervals rather than endpoints x intervals.
RESULT {json} lines per N (the contract of bench/run). A replica that does
not reach its expected state in time is reported (what it reached) and the
figure fails; the script goes on with the next N.
"""
import json
import os
import re
import resource
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

SRC = benchlib.SRC
h = benchlib.harness()

NS = [int(x) for x in os.environ.get("SCALE_NS", "1,10,100,1000").split(",") if x.strip()]
REPLICAS = int(os.environ.get("REPLICAS", "3"))
IDLE_S = float(os.environ.get("IDLE_S", "10"))
TTL, RENEW, RETRY = 3000, 1000, 250
# lease.balance_step_ms (unset = baton's default, retry / 2 = 125 ms, at most
# 1000 ms / endpoints): leader balancing.
BALANCE_STEP_MS = os.environ.get("BALANCE_STEP_MS")
# seconds between the standbys standing by and the idle window (start-up
# work: first attempts, release subscriptions: ~20 s at N = 1,000); unset = 2 + N / 40
SETTLE_S = float(os.environ["SETTLE_S"]) if os.environ.get("SETTLE_S") else None
FIRST_LEAD_S = float(os.environ.get("FIRST_LEAD_S", "0"))  # 0 = 60 + 0.05 s per endpoint
TAKEOVER_BOUND_MS = TTL + RETRY + 1000
HZ = benchlib.HZ
ticks = benchlib.ticks


def roles(port):
    try:
        code, body = h.http_get(port, "/status", timeout=2.0)
        return {e["name"]: e["role"] for e in json.loads(body)["endpoints"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def lease_traffic(port):
    """(round trips, calls) from baton's /metrics, or None."""
    try:
        code, body = h.http_get(port, "/metrics", timeout=2.0)
        text = body.decode() if isinstance(body, bytes) else body
        rt = re.search(r"^baton_locker_round_trips_total (\d+)", text, re.M)
        calls = re.search(r"^baton_locker_calls_total (\d+)", text, re.M)
        return (int(rt.group(1)), int(calls.group(1))) if rt and calls else None
    except (OSError, ValueError):
        return None


def commandstats(redis):
    text = redis.client().cmd("INFO", "commandstats")
    if isinstance(text, bytes):
        text = text.decode()
    out = {}
    for m in re.finditer(r"^cmdstat_(\w+):calls=(\d+)", text, re.M):
        out[m.group(1)] = int(m.group(2))
    return out


def one_size(n):
    locker = h.RedisServer()
    source = h.RedisServer()
    work = h.mktemp("baton-bench-scale-")
    ports = [h.free_port() for _ in range(REPLICAS)]
    eps = {"e%04d.cfg" % i: 'name = "e%04d"; type = "redis_psub"; sink = "out"; '
           'host = "127.0.0.1"; port = %d; patterns = [ "s%04d.*" ];\n' % (i, source.port, i)
           for i in range(n)}
    names = ["e%04d" % i for i in range(n)]
    reps = []
    res = {"endpoints": n, "fail": []}
    try:
        for i in range(REPLICAS):
            lease = {"ttl_ms": TTL, "renew_ms": RENEW, "retry_ms": RETRY}
            if BALANCE_STEP_MS:
                lease["balance_step_ms"] = int(BALANCE_STEP_MS)
            main = h.main_cfg(redis_port=locker.port, log_level="warn", lease=lease,
                              extra='metrics = { listen = "127.0.0.1:%d"; };' % ports[i])
            reps.append(h.Baton(work, main, eps, name="r%d" % i, start=False))
        a = reps[0].start()
        t0 = time.monotonic()
        ok = h.wait_until(lambda: sum(1 for r in roles(ports[0]).values() if r == "leader") == n,
                          FIRST_LEAD_S or 60 + n * 0.05, interval=0.2)
        res["first_lead_s"] = round(time.monotonic() - t0, 2)
        if not ok:
            res["fail"].append("A leads %d of %d after %.0f s"
                               % (sum(1 for r in roles(ports[0]).values() if r == "leader"), n,
                                  res["first_lead_s"]))
            return res
        for r in reps[1:]:
            r.start()
        ok = all(h.wait_until(lambda p=p: sum(1 for v in roles(p).values() if v == "standby") == n,
                              30 + n * 0.02, interval=0.2) for p in ports[1:])
        if not ok:
            res["fail"].append("standbys: %s" % [sum(1 for v in roles(p).values()
                                                     if v == "standby") for p in ports[1:]])
        time.sleep(SETTLE_S if SETTLE_S is not None else 2 + n / 40.0)  # past start-up work
        b = reps[1]
        locker.client().cmd("CONFIG", "RESETSTAT")
        tr0 = [lease_traffic(p) for p in ports[:2]]
        t_a, t_b, w0 = ticks(a.pid), ticks(b.pid), time.monotonic()
        k_a, k_b = benchlib.thread_wakes(a.pid), benchlib.thread_wakes(b.pid)
        time.sleep(IDLE_S)
        wall = time.monotonic() - w0
        res["wakes_per_s_leader"] = benchlib.wakes_per_s(k_a, benchlib.thread_wakes(a.pid), wall)
        res["wakes_per_s_standby"] = benchlib.wakes_per_s(k_b, benchlib.thread_wakes(b.pid), wall)
        tr1 = [lease_traffic(p) for p in ports[:2]]
        for role, x0, x1 in (("leader", tr0[0], tr1[0]), ("standby", tr0[1], tr1[1])):
            if x0 and x1:
                res["round_trips_per_s_" + role] = round((x1[0] - x0[0]) / wall, 1)
                res["lease_calls_per_s_" + role] = round((x1[1] - x0[1]) / wall, 1)
        stats = commandstats(locker)
        res["cpu_leader_pct"] = round(100.0 * (ticks(a.pid) - t_a) / HZ / wall, 3)
        res["cpu_standby_pct"] = round(100.0 * (ticks(b.pid) - t_b) / HZ / wall, 3)
        calls = sum(v for k, v in stats.items() if k not in ("info", "config"))
        res["locker_cmds_per_s"] = round(calls / wall, 1)
        res["locker_cmds_per_s_per_replica"] = round(calls / wall / REPLICAS, 1)
        res["top_commands"] = sorted(((k, round(v / wall, 1)) for k, v in stats.items()
                                      if k not in ("info", "config")), key=lambda kv: -kv[1])[:4]
        res["rss_leader_mib"] = round(benchlib.status_kb(a.pid, "VmHWM") / 1024.0, 1)
        res["rss_standby_mib"] = round(benchlib.status_kb(b.pid, "VmHWM") / 1024.0, 1)
        res["threads_leader"] = benchlib.status_kb(a.pid, "Threads")
        res["threads_standby"] = benchlib.status_kb(b.pid, "Threads")
        # takeover of everything A led
        a.signal(signal.SIGKILL)
        t_kill = time.monotonic()

        def led():
            got = set()
            for p in ports[1:]:
                got |= {k for k, v in roles(p).items() if v == "leader"}
            return len(got & set(names))
        done = h.wait_until(lambda: led() == n, 120, interval=0.05)
        res["takeover_ms"] = round((time.monotonic() - t_kill) * 1000)
        res["takeover_split"] = [sum(1 for v in roles(p).values() if v == "leader")
                                 for p in ports[1:]]
        if not done:
            res["fail"].append("after the SIGKILL only %d of %d endpoints led again in 120 s"
                               % (led(), n))
        return res
    finally:
        for r in reps:
            if r.proc:
                r.kill()
        locker.stop()
        source.stop()


def main():
    if not os.path.exists(h.BATON_BIN):
        print("missing %s (build baton)" % h.BATON_BIN, file=sys.stderr)
        return 2
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(NS) * 2 + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(want, soft)), hard))
    print("scale: %d replicas, N = %s, idle window %.0f s, lease ttl %d renew %d retry %d, "
          "balance_step_ms %s" % (REPLICAS, NS, IDLE_S, TTL, RENEW, RETRY,
                                  BALANCE_STEP_MS or "default (125)"), flush=True)
    rows = []
    for n in NS:
        t0 = time.monotonic()
        r = one_size(n)
        r["seconds"] = round(time.monotonic() - t0, 1)
        rows.append(r)
        print("N=%d %s" % (n, json.dumps(r)), flush=True)
    base = rows[0] if rows and not rows[0]["fail"] else None
    print()
    print("%6s %9s %9s %8s %8s %8s %8s %10s %10s %9s %9s %10s" % (
        "N", "RSS L MiB", "RSS S MiB", "thr L", "thr S", "CPU L %", "CPU S %", "locker/s",
        "/replica", "RT/s L", "RT/s S", "takeover"))
    for r in rows:
        if "rss_leader_mib" not in r:
            print("%6d  failed: %s" % (r["endpoints"], "; ".join(r["fail"])))
            continue
        print("%6d %9.1f %9.1f %8d %8d %8.2f %8.2f %10.1f %10.1f %9s %9s %8d ms" % (
            r["endpoints"], r["rss_leader_mib"], r["rss_standby_mib"], r["threads_leader"],
            r["threads_standby"], r["cpu_leader_pct"], r["cpu_standby_pct"],
            r["locker_cmds_per_s"], r["locker_cmds_per_s_per_replica"],
            r.get("round_trips_per_s_leader", "-"), r.get("round_trips_per_s_standby", "-"),
            r["takeover_ms"]))
    print("\nwake-ups/s by thread kind (voluntary context switches over the idle window):")
    for r in rows:
        if "wakes_per_s_leader" in r:
            for role in ("leader", "standby"):
                w = r["wakes_per_s_" + role]
                print("  N=%-5d %-7s %7.1f in all: %s" % (
                    r["endpoints"], role, sum(w.values()),
                    ", ".join("%s %.1f" % kv for kv in sorted(w.items(), key=lambda kv: -kv[1]))))
    if base:
        print("\ngrowth against N = %d (x):" % base["endpoints"])
        for r in rows[1:]:
            if "rss_leader_mib" not in r:
                continue
            g = lambda k: (r[k] / base[k]) if base.get(k) else float("nan")  # noqa: E731
            print("  N=%-5d RSS leader %.1f, threads leader %.1f, CPU leader %.1f, standby %.1f, "
                  "locker cmds %.1f  (N grew %.0f)" % (
                      r["endpoints"], g("rss_leader_mib"), g("threads_leader"),
                      g("cpu_leader_pct"), g("cpu_standby_pct"), g("locker_cmds_per_s"),
                      r["endpoints"] / base["endpoints"]))
    for r in rows:
        n = r["endpoints"]
        big = n >= 1000
        if "rss_leader_mib" not in r:
            print("RESULT " + json.dumps({"workload": "scale %d endpoints" % n, "baton": None,
                                          "baseline": None, "unit": None, "ratio": None,
                                          "target": None, "pass": False,
                                          "why": "; ".join(r["fail"])}))
            continue
        rss = max(r["rss_leader_mib"], r["rss_standby_mib"])
        cpu = max(r["cpu_leader_pct"], r["cpu_standby_pct"])
        for wl, val, unit, target, ok in [
            ("peak RSS per replica, %d endpoints" % n, rss, "MiB", "< 64" if big else None,
             rss < 64 if big else None),
            ("threads, leader of %d endpoints" % n, r["threads_leader"], "threads", None, None),
            ("idle CPU per replica, %d endpoints" % n, cpu, "% core", "< 2" if big else None,
             cpu < 2 if big else None),
            ("locker commands/s per replica, %d endpoints" % n, r["locker_cmds_per_s_per_replica"],
             "cmd/s", None, None),
            ("locker round trips/s, leader of %d endpoints" % n,
             r.get("round_trips_per_s_leader"), "round trips/s", None, None),
            ("locker round trips/s, standby of %d endpoints" % n,
             r.get("round_trips_per_s_standby"), "round trips/s", None, None),
            ("takeover of %d endpoints after SIGKILL" % n, r["takeover_ms"], "ms",
             "<= %d" % TAKEOVER_BOUND_MS, r["takeover_ms"] <= TAKEOVER_BOUND_MS and not r["fail"]),
        ]:
            print("RESULT " + json.dumps({"workload": wl, "baton": val, "baseline": None,
                                          "unit": unit, "ratio": None, "target": target,
                                          "pass": ok}))
    return 0


if __name__ == "__main__":
    benchlib.run(main)
