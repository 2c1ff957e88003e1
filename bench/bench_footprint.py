#!/usr/bin/env python3
"""Benchmark: per-replica footprint with one endpoint of every type.

    bench/bench_footprint.py [BUILD_DIR]    (default: $BATON_BUILD_DIR or ./build)

Starts redis-server (locker and redis_psub source) and mosquitto, and, unless
HEAVY=0, rabbitmq-server and mariadbd (about 15 s more); with HEAVY=0 the
rabbitmq and mysql_cdc endpoints are left out (with no broker they fail to
start as leader and give the lease back every retry, which is not a steady
state). A broker that fails to start is an error: the script exits 1 naming
the broker and the endpoint type it serves (nothing is measured).
Each endpoint type gets one endpoint file; a type whose file does not pass
`baton --check-config` (an endpoint not built yet, or settings that changed)
is left out and named in the output.

Replica A starts first and leads every ActiveGuard endpoint; replica B then
starts and stays standby on all of them (schedule runs on both: its
OnceGuard decides per slot; cron every 10 s). Traffic: BURST (default
20,000) Redis messages and MQTT_N (default 2,000) MQTT QoS 1 messages, each
payload unique, through the leader. The traffic must arrive: within
ARRIVE_S (default 30) seconds the leader's stdout sink must hold every
payload sent (each endpoint's records counted by payload), else the script
exits 1 naming the endpoint type, with what arrived, the replicas'
baton_messages_forwarded_total and the tail of their logs. A PUBLISH that
reached no subscriber or a failed mosquitto_pub is reported the same way.

Figures:
- peak RSS (VmHWM of /proc/<pid>/status) of the leader and of the standby,
  target < 10 MiB each;
- idle standby CPU over IDLE_S (default 30) seconds, (utime + stime) deltas of
  /proc/<pid>/stat, target < 0.5 % of one core; the idle leader's figure is
  printed for information.
Prints RESULT {json} lines (the contract of bench/run).
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

SRC = benchlib.SRC
h = benchlib.harness()

IDLE_S = float(os.environ.get("IDLE_S", "30"))
HEAVY = os.environ.get("HEAVY", "1") != "0"
BURST = int(os.environ.get("BURST", "20000"))
MQTT_N = int(os.environ.get("MQTT_N", "2000"))
ARRIVE_S = float(os.environ.get("ARRIVE_S", "30"))
# /status roles of endpoints without a lease (every replica runs them)
UNLEASED = ("once-per-slot", "every-replica", "single-process")
RSS_TARGET_KB = 10 * 1024
CPU_TARGET = 0.5
HZ = benchlib.HZ
ticks = benchlib.ticks


def start_mosquitto():
    import mosquitto
    return mosquitto.Mosquitto().port


def candidates(redis_port, mqtt_port, amqp_port, mysql_port, server_id):
    """type -> list of endpoint file texts to try (first that checks wins)."""
    common = 'sink = "out";\n'
    return {
        "schedule": ['name = "fp-schedule"; type = "schedule"; %scron = "*/10 * * * * *";\n'
                     % common],
        "redis_psub": ['name = "fp-psub"; type = "redis_psub"; %shost = "127.0.0.1"; port = %d;\n'
                       'patterns = ["fp.*"];\n' % (common, redis_port)],
        "rabbitmq": ['name = "fp-amqp"; type = "rabbitmq"; %shost = "127.0.0.1"; port = %d;\n'
                     'exchange = "fp"; exchange_type = "fanout"; declare_exchange = true;\n'
                     'mode = "private";\n'
                     % (common, amqp_port)],
        "mysql_cdc": ['name = "fp-cdc"; type = "mysql_cdc"; %shost = "127.0.0.1"; port = %d;\n'
                      'user = "cdc"; password_env = "FP_CDC_PASSWORD"; server_id = %d;\n'
                      % (common, mysql_port, server_id)],
        "mqtt": ['name = "fp-mqtt"; type = "mqtt"; %sserver = "tcp://127.0.0.1:%d";\n'
                 'topics = ["fp/#"]; qos = 1;\n' % (common, mqtt_port)],
    }


def check(main_text, ep_text, env):
    d = h.mktemp("baton-fp-check-")
    os.makedirs(os.path.join(d, "endpoints.d"))
    with open(os.path.join(d, "baton.cfg"), "w") as f:
        f.write(main_text)
    with open(os.path.join(d, "endpoints.d", "ep.cfg"), "w") as f:
        f.write(ep_text)
    rc, out, err = h.run_baton(["-c", os.path.join(d, "baton.cfg"), "--check-config"],
                               env=env)
    return rc == 0, (err or out).strip().splitlines()[-1:] or [""]


def status(port):
    import http.client
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        c.request("GET", "/status")
        body = c.getresponse().read()
        c.close()
        return json.loads(body)["endpoints"]
    except (OSError, ValueError, KeyError, http.client.HTTPException):
        return None


def forwarded_totals(port):
    """endpoint name -> baton_messages_forwarded_total from GET /metrics."""
    import re
    code, text = h.http_get(port, "/metrics")
    out = {}
    for m in re.finditer(r'^baton_messages_forwarded_total\{endpoint="([^"]*)"[^}]*\} (\d+)$',
                         text, re.M):
        out[m.group(1)] = int(m.group(2))
    return out


class BrokerFailed(Exception):
    pass


def roles(port):
    eps = status(port)
    return {e["name"]: e["role"] for e in eps} if eps else {}


def main():
    if not os.path.exists(h.BATON_BIN):
        print("missing %s (build baton)" % h.BATON_BIN, file=sys.stderr)
        return 2
    env = {"FP_CDC_PASSWORD": "fp-pw"}

    def broker(name, types, start):
        """start() -> a port; any failure ends the benchmark (exit 1) with
        the broker and the endpoint types it serves named."""
        try:
            return start()
        except Exception as e:  # noqa: BLE001 - any failure is the same failure
            raise BrokerFailed("FAIL: %s did not start, so the %s endpoint%s cannot be measured%s"
                               " -- %s: %s" % (name, " and ".join(types),
                                               "s" if len(types) > 1 else "",
                                               "" if name in ("redis-server", "mosquitto") else
                                               " (HEAVY=0 leaves rabbitmq and mysql_cdc out)",
                                               type(e).__name__, str(e).strip()[-1500:]))

    def start_mariadb():
        import mariadb as mdb
        srv = mdb.MariaServer()
        srv.create_user("cdc", env["FP_CDC_PASSWORD"])
        return srv.port

    def start_rabbitmq():
        import rabbitmq as rmq
        return rmq.RabbitServer().port

    redis = broker("redis-server", ["locker", "redis_psub"], h.RedisServer)
    mqtt_port = broker("mosquitto", ["mqtt"], start_mosquitto)
    amqp_port = mysql_port = None
    brokers = ["redis-server", "mosquitto"]
    no_broker = {}
    if HEAVY:
        amqp_port = broker("rabbitmq-server", ["rabbitmq"], start_rabbitmq)
        brokers.append("rabbitmq-server")
        mysql_port = broker("mariadbd", ["mysql_cdc"], start_mariadb)
        brokers.append("mariadbd")
    else:
        # an endpoint whose broker is not running fails to start as leader
        # and gives its lease back every retry: not a steady state to measure
        no_broker["rabbitmq"] = "HEAVY=0: rabbitmq-server not started"
        no_broker["mysql_cdc"] = "HEAVY=0: mariadbd not started"
    amqp_port = amqp_port or h.free_port()
    mysql_port = mysql_port or h.free_port()

    work = h.mktemp("baton-bench-footprint-")
    mports = [h.free_port(), h.free_port()]

    def main_cfg(i):
        return h.main_cfg(redis_port=redis.port, log_level="warn",
                          extra='metrics = { listen = "127.0.0.1:%d"; };' % mports[i])

    chosen = [{}, {}]
    left_out = {}
    for typ, texts in candidates(redis.port, mqtt_port, amqp_port, mysql_port, 100).items():
        why = None
        if typ in no_broker:
            left_out[typ] = no_broker[typ]
            continue
        for k, _ in enumerate(texts):
            ok, why = check(main_cfg(0), texts[k], env)
            if ok:
                for i in (0, 1):
                    per = candidates(redis.port, mqtt_port, amqp_port, mysql_port, 101 + i)
                    chosen[i]["%s.cfg" % typ] = per[typ][k]
                break
        else:
            left_out[typ] = why[0].split(": ", 1)[-1][:160]
    print("footprint benchmark: endpoint types configured: %s; left out: %s; brokers: %s"
          % (", ".join(sorted(t[:-4] for t in chosen[0])) or "none",
             "; ".join("%s (%s)" % kv for kv in sorted(left_out.items())) or "none",
             ", ".join(brokers)))

    a = h.Baton(work, main_cfg(0), chosen[0], name="leader", env=env)
    guarded = None

    def a_leads_all():
        r = roles(mports[0])
        act = {n: v for n, v in r.items() if v not in UNLEASED}
        return act and all(v == "leader" for v in act.values()) and act
    guarded = h.wait_until(a_leads_all, 30, 0.1)
    if not guarded:
        print("replica A does not lead every guarded endpoint after 30 s: %r"
              % roles(mports[0]), file=sys.stderr)
        print(a.stderr_text()[-3000:], file=sys.stderr)
        return 1
    b = h.Baton(work, main_cfg(1), chosen[1], name="standby", env=env)
    h.wait_until(lambda: len(roles(mports[1])) == len(chosen[1]), 15, 0.1)
    time.sleep(1.0)

    # traffic through the leader; every payload must reach its sink
    sent = {}  # endpoint name -> (type, set of payloads sent)
    problems = []
    if "redis_psub.cfg" in chosen[0]:
        c = redis.client()
        payloads = ["payload-%08d-0123456789abcdef" % j for j in range(BURST)]
        unheard = 0
        for i in range(0, BURST, 1000):
            replies = c.pipeline([("PUBLISH", "fp.x", p) for p in payloads[i:i + 1000]])
            unheard += sum(1 for r in replies if r != 1)
        sent["fp-psub"] = ("redis_psub", set(payloads))
        if unheard:
            problems.append("redis_psub: %d of %d PUBLISH reached no subscriber (or more than "
                            "one): the leader is not subscribed to fp.*" % (unheard, BURST))
    if "mqtt.cfg" in chosen[0]:
        payloads = ["mqtt-%d" % i for i in range(MQTT_N)]
        try:
            p = subprocess.run(["mosquitto_pub", "-p", str(mqtt_port), "-t", "fp/x", "-l",
                                "-q", "1"], input="".join(x + "\n" for x in payloads).encode(),
                               timeout=60, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            pub_err = None if p.returncode == 0 else "exit %d: %s" % (
                p.returncode, p.stderr.decode(errors="replace").strip()[-300:])
        except (OSError, subprocess.TimeoutExpired) as e:
            pub_err = str(e)
        if pub_err:
            problems.append("mqtt: mosquitto_pub failed (%s): the MQTT traffic was not sent"
                            % pub_err)
        sent["fp-mqtt"] = ("mqtt", set(payloads))

    def arrived():
        """endpoint name -> set of payloads in the leader's stdout sink."""
        got = {}
        for r in a.records:
            got.setdefault(r.get("endpoint"), set()).add(r.get("payload"))
        return got

    def missing():
        a.poll_records()
        got = arrived()
        return {n: len(want - got.get(n, set())) for n, (_t, want) in sent.items()}

    h.wait_until(lambda: not any(missing().values()), ARRIVE_S, 0.25)
    miss = missing()
    fwd_a, fwd_b = forwarded_totals(mports[0]), forwarded_totals(mports[1])
    for n, (typ, want) in sorted(sent.items()):
        if miss[n]:
            problems.append("%s: %d of %d messages sent did not arrive at the leader's stdout "
                            "sink within %.0f s (%d arrived; baton_messages_forwarded_total: "
                            "leader %s, standby %s)"
                            % (typ, miss[n], len(want), ARRIVE_S, len(want) - miss[n],
                               fwd_a.get(n), fwd_b.get(n)))
    if problems:
        for pr in problems:
            print("FAIL: traffic: " + pr, file=sys.stderr)
        for rep in (a, b):
            print("--- %s stderr (tail) ---\n%s" % (rep.name, rep.stderr_text()[-2000:]),
                  file=sys.stderr)
        return 1
    forwarded = len(a.records)
    print("  traffic arrived: %s"
          % "; ".join("%s %d sent, %d at the sink (forwarded_total %s)"
                      % (typ, len(want), len(want), fwd_a.get(n))
                      for n, (typ, want) in sorted(sent.items())), flush=True)
    a.records = []  # the payload sets are not needed any more
    time.sleep(1.0)

    rb = roles(mports[1])
    not_standby = {n: v for n, v in rb.items() if v != "standby" and v not in UNLEASED}
    ta, tb, t0 = ticks(a.pid), ticks(b.pid), time.monotonic()
    time.sleep(IDLE_S)
    ta1, tb1, t1 = ticks(a.pid), ticks(b.pid), time.monotonic()
    cpu_a = (ta1 - ta) / HZ / (t1 - t0) * 100.0
    cpu_b = (tb1 - tb) / HZ / (t1 - t0) * 100.0
    hwm_a, hwm_b = benchlib.status_kb(a.pid, "VmHWM"), benchlib.status_kb(b.pid, "VmHWM")
    if os.environ.get("SMAPS"):
        # where the leader's resident memory is: the largest mappings
        maps, cur = [], None
        with open("/proc/%d/smaps" % a.pid) as f:
            for line in f:
                parts = line.split()
                if "-" in parts[0] and len(parts) >= 5 and not parts[0].endswith(":"):
                    cur = [parts[5] if len(parts) > 5 else "[anon]", 0]
                    maps.append(cur)
                elif parts[0] == "Rss:" and cur is not None:
                    cur[1] = int(parts[1])
        by = {}
        for name, rss in maps:
            by[name] = by.get(name, 0) + rss
        for name, rss in sorted(by.items(), key=lambda kv: -kv[1])[:25]:
            print("  smaps %6d KiB %s" % (rss, name))
    rss_a, rss_b = benchlib.status_kb(a.pid, "VmRSS"), benchlib.status_kb(b.pid, "VmRSS")
    rb2 = roles(mports[1])
    ra2 = roles(mports[0])
    alive = a.alive() and b.alive()
    lost = {n: v for n, v in ra2.items() if n in guarded and v != "leader"}
    if lost:
        print("  WARNING: replica A no longer leads %r: the measurement is not of a steady state"
              % lost)
        not_standby = not_standby or lost
    print("  leader: roles %s; forwarded %d lines; VmHWM %d KiB, VmRSS %d KiB; idle CPU %.3f %%"
          % (ra2, forwarded, hwm_a, rss_a, cpu_a))
    print("  standby: roles %s; VmHWM %d KiB, VmRSS %d KiB; idle CPU %.3f %% over %.0f s"
          % (rb2, hwm_b, rss_b, cpu_b, t1 - t0))
    for rep in (a, b):
        lines = [l for l in rep.stderr_text().splitlines() if " WARN " in l or " ERROR " in l]
        print("  %s log: %d warning/error lines%s" % (rep.name, len(lines), ":" if lines else ""))
        for l in lines[:5] + (["  ..."] if len(lines) > 8 else []) + lines[max(5, len(lines) - 3):]:
            print("    " + l)
    if not_standby:
        print("  WARNING: replica B was not standby everywhere: %r" % not_standby)
    ntypes = len(chosen[0])
    results = [
        {"workload": "peak RSS, leader, %d endpoint types" % ntypes, "baton": round(hwm_a / 1024.0, 2),
         "baseline": None, "unit": "MiB", "ratio": None, "target": "< 10",
         "pass": hwm_a < RSS_TARGET_KB and alive},
        {"workload": "peak RSS, standby, %d endpoint types" % ntypes, "baton": round(hwm_b / 1024.0, 2),
         "baseline": None, "unit": "MiB", "ratio": None, "target": "< 10",
         "pass": hwm_b < RSS_TARGET_KB and alive},
        {"workload": "idle standby CPU over %.0f s" % IDLE_S, "baton": round(cpu_b, 3),
         "baseline": None, "unit": "% core", "ratio": None, "target": "< 0.5",
         "pass": cpu_b < CPU_TARGET and not not_standby and alive},
        {"workload": "idle leader CPU over %.0f s (info)" % IDLE_S, "baton": round(cpu_a, 3),
         "baseline": None, "unit": "% core", "ratio": None, "target": None, "pass": None},
    ]
    for r in results:
        print("RESULT " + json.dumps(r))
    return 0 if alive else 1


if __name__ == "__main__":
    try:
        try:
            rc = main()
        except BrokerFailed as e:
            print(str(e), file=sys.stderr)
            rc = 1
    finally:
        h._run_cleanups()
    sys.exit(rc)
